//! `matrix --images N --image-size WxH`: the images a chat prompt carries, and where they go.
//!
//! Owns the rule that makes an image new to the server or the same: an image's pixels are
//! noise drawn from a key, so two keys give two images (two hashes: vLLM's multimodal cache,
//! keyed by the image's hash, holds nothing of one for the other) and one key the same bytes.
//! Prefill samples take a key of their own (cold), a context row's decode cells share one
//! (warm), the image-token probe takes another.
//!
//! Pure: no IO, no clock. Images are made and encoded (JPEG, base64) while a step is prepared,
//! before any of its requests is sent; a request only copies the finished data URL.

use crate::net::request::Generation;
use crate::workload::image::{Image, MAX_SIDE};
use serde_json::{json, Value};
use std::sync::Arc;

/// What each matrix prompt carries: `count` images of `width` × `height` pixels (JPEG).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ImageSpec {
    pub count: u32,
    pub width: u32,
    pub height: u32,
}

/// The most images a prompt may carry (a typo guard: engines take a handful).
pub const MAX_IMAGES: u32 = 64;

impl ImageSpec {
    /// `--images N --image-size WxH`, checked.
    pub fn new(count: u32, size: &str) -> Result<ImageSpec, String> {
        if count == 0 || count > MAX_IMAGES {
            return Err(format!(
                "--images {count}: give 1 to {MAX_IMAGES} images a prompt"
            ));
        }
        let (width, height) = parse_size(size)?;
        Ok(ImageSpec {
            count,
            width,
            height,
        })
    }

    /// `4 × 1280x720`, for messages and the report.
    pub fn label(&self) -> String {
        format!("{} × {}x{}", self.count, self.width, self.height)
    }
}

/// `WxH` (width first, as screens are named: `1280x720`), each side 1 to 65,535 pixels.
pub fn parse_size(s: &str) -> Result<(u32, u32), String> {
    let bad = || {
        format!("--image-size {s:?}: give width x height in pixels, e.g. 1280x720 (each side 1 to {MAX_SIDE})")
    };
    let (w, h) = s.trim().split_once(['x', 'X', '×']).ok_or_else(bad)?;
    let side = |t: &str| {
        t.trim()
            .parse::<u32>()
            .ok()
            .filter(|&n| (1..=MAX_SIDE).contains(&n))
    };
    match (side(w), side(h)) {
        (Some(w), Some(h)) => Ok((w, h)),
        _ => Err(bad()),
    }
}

/// SplitMix64: the noise's bytes from a key (no statistical claim beyond "two keys differ").
fn splitmix(state: &mut u64) -> u64 {
    *state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
    let mut z = *state;
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// The spec's images for `key`: RGB noise (the largest JPEG of its size, as vLLM's
/// `random-mm` sends), image `i` drawn from `key` and `i` alone, so they are made on every core
/// (rayon's pool; the JPEG is most of the cost) and come out the same at any thread count.
pub fn make(spec: &ImageSpec, key: u64) -> Result<Arc<[Image]>, String> {
    use rayon::prelude::*;
    let bytes = spec.width as usize * spec.height as usize * 3;
    (0..spec.count)
        .into_par_iter()
        .map(|i| {
            let mut rgb = vec![0u8; bytes];
            let mut state = key ^ (u64::from(i) + 1).wrapping_mul(0xD1B5_4A32_D192_ED03);
            for chunk in rgb.chunks_mut(8) {
                let w = splitmix(&mut state).to_le_bytes();
                chunk.copy_from_slice(&w[..chunk.len()]);
            }
            Image::jpeg(spec.width, spec.height, &rgb)
        })
        .collect::<Result<Vec<Image>, String>>()
        .map(Arc::from)
}

/// Puts `images` into a chat generation: the last user message's content becomes its text part
/// followed by one `image_url` part per image, replacing any images it carried (a cold sample
/// swaps the warm prompt's images for its own). An error for a generation without chat
/// messages: images travel only in chat messages.
pub fn attach(g: &mut Generation, images: &[Image]) -> Result<(), String> {
    let content = g
        .extra
        .get_mut("messages")
        .and_then(Value::as_array_mut)
        .and_then(|m| {
            m.iter_mut()
                .rev()
                .find(|m| m.get("role").and_then(Value::as_str) == Some("user"))
        })
        .and_then(|m| m.get_mut("content"))
        .ok_or("images go into a chat prompt's user message, and this prompt has none")?;
    let mut parts = match content.take() {
        Value::String(t) => vec![json!({"type": "text", "text": t})],
        Value::Array(p) => p
            .into_iter()
            .filter(|p| p.get("type").and_then(Value::as_str) != Some("image_url"))
            .collect(),
        other => return Err(format!("a user message's content is {other}, not text")),
    };
    parts.extend(
        images
            .iter()
            .map(|i| json!({"type": "image_url", "image_url": {"url": &*i.url}})),
    );
    *content = Value::Array(parts);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::net::request::Prompt;

    #[test]
    fn sizes_parse_width_first_and_bad_ones_say_how() {
        assert_eq!(parse_size("1280x720"), Ok((1280, 720)));
        assert_eq!(parse_size(" 64 X 32 "), Ok((64, 32)));
        for bad in ["1280", "0x10", "10x", "x10", "70000x10", "-1x5", "axb"] {
            let e = parse_size(bad).unwrap_err();
            assert!(e.contains("1280x720"), "{bad}: {e}");
        }
        assert!(ImageSpec::new(0, "8x8").unwrap_err().contains("1 to 64"));
        assert_eq!(ImageSpec::new(2, "8x4").unwrap().label(), "2 × 8x4");
    }

    #[test]
    fn a_key_gives_the_same_images_and_another_key_others() {
        let spec = ImageSpec::new(2, "17x9").unwrap();
        let a = make(&spec, 1).unwrap();
        let b = make(&spec, 1).unwrap();
        let c = make(&spec, 2).unwrap();
        assert_eq!(a, b);
        assert_eq!(a.len(), 2);
        assert!((a[0].width, a[0].height) == (17, 9));
        // Every image differs from every other: within a prompt and across keys.
        let all: Vec<&str> = a.iter().chain(c.iter()).map(|i| &*i.url).collect();
        for (i, x) in all.iter().enumerate() {
            assert!(all[i + 1..].iter().all(|y| y != x));
        }
    }

    #[test]
    fn the_images_are_the_same_on_one_thread_and_on_several() {
        let spec = ImageSpec::new(5, "33x20").unwrap();
        let on = |threads: usize| {
            let pool = rayon::ThreadPoolBuilder::new()
                .num_threads(threads)
                .build()
                .unwrap();
            pool.install(|| make(&spec, 7).unwrap())
        };
        let one = on(1);
        assert_eq!(one.len(), 5);
        assert_eq!(one, on(3));
        assert_eq!(one, on(8));
    }

    #[test]
    fn images_follow_the_last_user_messages_text_and_replace_earlier_ones() {
        let mut g = Generation::new("m", Prompt::Text(String::new()));
        g.chat = true;
        g.extra.insert(
            "messages".into(),
            json!([{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"},
                   {"role": "user", "content": "c"}]),
        );
        let spec = ImageSpec::new(1, "8x8").unwrap();
        let one = make(&spec, 1).unwrap();
        attach(&mut g, &one).unwrap();
        let m = &g.extra["messages"];
        assert_eq!(m[0]["content"], json!("a"));
        assert_eq!(m[2]["content"][0], json!({"type": "text", "text": "c"}));
        assert_eq!(m[2]["content"][1]["image_url"]["url"], json!(&*one[0].url));
        let two = make(&ImageSpec::new(2, "8x8").unwrap(), 9).unwrap();
        attach(&mut g, &two).unwrap();
        let parts = g.extra["messages"][2]["content"]
            .as_array()
            .unwrap()
            .clone();
        assert_eq!(parts.len(), 3);
        assert_eq!(parts[0]["text"], json!("c"));
        assert_eq!(parts[1]["image_url"]["url"], json!(&*two[0].url));
        assert_eq!(parts[2]["image_url"]["url"], json!(&*two[1].url));
        // A completions prompt has no message to carry them.
        let mut text = Generation::new("m", Prompt::Text("x".into()));
        assert!(attach(&mut text, &two).is_err());
    }
}
