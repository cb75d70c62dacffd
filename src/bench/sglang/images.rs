//! The image dataset's figures (`--dataset-name image`): SGLang's vision-token total and
//! llmspeed's `images` block.
//!
//! SGLang counts each row's vision tokens on the client before the run, with the model's
//! processor (its count of the prompt with the images less its count of the text alone).
//! llmspeed loads no processor: it takes the server's own count, `prompt_tokens` as the server
//! reported it (native `/generate` always does; the chat endpoint when asked through
//! `--extra-request-body '{"stream_options": {"include_usage": true}}'`) less the row's text
//! length, for each completed request that has both. The text length is, as SGLang's, the
//! text's chat request without images as the server counts it, where the run could ask
//! (`run::chat_text_counts`; on the native backends the text alone through the processor's
//! chat template, `run::native_text_counts`), else the text's own length. Pure: no IO.

use crate::timeline::Timeline;
use crate::workload::image::Image;
use serde_json::{json, Value};

/// One request of an image run: its images and what the server said of its prompt.
pub struct Row<'a> {
    pub images: &'a [Image],
    /// The row's text length (the sample's `prompt_len`).
    pub text_tokens: u64,
    pub success: bool,
    pub timeline: &'a Timeline,
}

/// The vision tokens of one request by the server's count (`None`: it reported none).
pub fn vision_tokens(r: &Row<'_>) -> Option<u64> {
    let reported = r
        .timeline
        .usage
        .map(|u| u.prompt_tokens)
        .filter(|&p| p > 0)?;
    Some(reported.saturating_sub(r.text_tokens))
}

/// The text tokens of the completed requests (SGLang's `total_input_text_tokens`).
pub fn total_text(rows: &[Row<'_>]) -> u64 {
    rows.iter()
        .filter(|r| r.success)
        .map(|r| r.text_tokens)
        .sum()
}

/// The vision tokens of the completed requests (SGLang's `total_input_vision_tokens`), 0 where
/// the server reported no prompt count.
pub fn total_vision(rows: &[Row<'_>]) -> u64 {
    rows.iter()
        .filter(|r| r.success)
        .filter_map(vision_tokens)
        .sum()
}

/// The `llmspeed.images` block: each request's image count, pixels, encoded bytes (the files,
/// before base64) and vision tokens by the server's count (`null` where it gave none), in
/// dispatch order, and their totals.
pub fn block(rows: &[Row<'_>]) -> Value {
    let count: Vec<u64> = rows.iter().map(|r| r.images.len() as u64).collect();
    let pixels: Vec<u64> = rows
        .iter()
        .map(|r| r.images.iter().map(Image::pixels).sum())
        .collect();
    let bytes: Vec<u64> = rows
        .iter()
        .map(|r| r.images.iter().map(|i| i.encoded_bytes).sum())
        .collect();
    let vision: Vec<Option<u64>> = rows.iter().map(vision_tokens).collect();
    let sizes: Vec<Vec<[u32; 2]>> = rows
        .iter()
        .map(|r| r.images.iter().map(|i| [i.width, i.height]).collect())
        .collect();
    json!({
        "total_images": count.iter().sum::<u64>(),
        "total_pixels": pixels.iter().sum::<u64>(),
        "total_encoded_bytes": bytes.iter().sum::<u64>(),
        "vision_tokens_counted_by": if vision.iter().any(Option::is_some) { "server_prompt_tokens" } else { "none" },
        "images": count,
        "sizes_wh": sizes,
        "pixels": pixels,
        "encoded_bytes": bytes,
        "vision_tokens": vision,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::timeline::Usage;

    fn img(w: u32, h: u32, bytes: u64) -> Image {
        Image {
            width: w,
            height: h,
            encoded_bytes: bytes,
            url: "data:x".into(),
            recipe: None,
        }
    }

    #[test]
    fn vision_is_the_servers_prompt_count_less_the_text() {
        let mut told = Timeline::new(0, 0, true);
        told.usage = Some(Usage {
            prompt_tokens: 130,
            ..Usage::default()
        });
        let silent = Timeline::new(0, 0, true);
        let a = [img(4, 2, 10), img(1, 1, 5)];
        let b = [img(3, 3, 7)];
        let rows = [
            Row {
                images: &a,
                text_tokens: 30,
                success: true,
                timeline: &told,
            },
            Row {
                images: &b,
                text_tokens: 8,
                success: true,
                timeline: &silent,
            },
            Row {
                images: &b,
                text_tokens: 8,
                success: false,
                timeline: &told,
            },
        ];
        assert_eq!(total_vision(&rows), 100);
        assert_eq!(total_text(&rows), 38);
        let v = block(&rows);
        assert_eq!(v["total_images"], 4);
        assert_eq!(v["total_pixels"], 8 + 1 + 9 + 9);
        assert_eq!(v["total_encoded_bytes"], 29);
        assert_eq!(v["vision_tokens"], json!([100, null, 122]));
        assert_eq!(v["sizes_wh"][0], json!([[4, 2], [1, 1]]));
        assert_eq!(v["vision_tokens_counted_by"], "server_prompt_tokens");
    }
}
