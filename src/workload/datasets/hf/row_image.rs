//! A dataset row's image value turned into the image a request sends, as vLLM 0.33's
//! `process_image` takes the same value: a `{bytes, path}` struct (the hub's parquet `Image`
//! layout; a parquet binary arrives base64-encoded, `workload::rows`) is the image file, sent as
//! its own bytes (`workload::image::Image::from_file`: vLLM re-encodes it as JPEG, the pixel
//! size is the same); a string is a URL passed through as vLLM passes it (`http(s)://`,
//! `file://` and `data:image/` as written, anything else as `file://` + the string), unsized
//! unless it is a data URL. Pure: no IO (a URL is never fetched).

use super::{kind_of, Numbered};
use crate::workload::datasets::{DatasetError, PromptSource, Sample};
use crate::workload::image::Image;
use serde_json::Value;

/// The image `v` (the row's `col`, `at` naming where in it, e.g. `[0]`) stands for.
pub(super) fn image(
    rows: &Numbered,
    col: &str,
    at: &str,
    v: &Value,
) -> Result<Image, DatasetError> {
    let bad = |msg: String| rows.bad(format!("column {col:?}{at}: {msg}"));
    match v {
        Value::Object(m) => match m.get("bytes") {
            Some(Value::String(b64)) => {
                use base64::Engine as _;
                let file = base64::engine::general_purpose::STANDARD
                    .decode(b64)
                    .map_err(|e| bad(format!("its bytes are not base64 ({e})")))?;
                Image::from_file(&file).map_err(|e| {
                    bad(format!(
                        "its bytes are not an image ({e}); vLLM's loader (PIL) would refuse \
                         them too: fix or drop the row"
                    ))
                })
            }
            Some(other) => Err(bad(format!(
                "its \"bytes\" is {}, not an image file's bytes{}",
                kind_of(other),
                match m.get("path").and_then(Value::as_str) {
                    Some(p) => format!(" (its path {p:?} is not read: vLLM reads the bytes)"),
                    None => String::new(),
                }
            ))),
            None => Err(bad(format!(
                "an image struct needs \"bytes\" (it has {:?})",
                m.keys().collect::<Vec<_>>()
            ))),
        },
        Value::String(s) => Ok(url_image(s).map_err(bad)?),
        other => Err(bad(format!(
            "an image is a {{bytes, path}} struct or a URL string, not {}",
            kind_of(other)
        ))),
    }
}

/// A URL string as vLLM sends it: `http(s)://`, `file://` and `data:image/` as written,
/// anything else taken as a local path (`file://` + it). A data URL is sized from its header;
/// the others are not fetched, so their size is unknown (0 × 0, 0 bytes in the report).
fn url_image(s: &str) -> Result<Image, String> {
    if let Some(rest) = s.strip_prefix("data:image/") {
        use base64::Engine as _;
        let (_, b64) = rest
            .split_once(";base64,")
            .ok_or("a data:image/ URL that is not base64 cannot be sized")?;
        let file = base64::engine::general_purpose::STANDARD
            .decode(b64)
            .map_err(|e| format!("a data:image/ URL whose data is not base64 ({e})"))?;
        let sized = Image::from_file(&file)?;
        return Ok(Image {
            url: s.into(),
            ..sized
        });
    }
    let url = if ["http://", "https://", "file://"]
        .iter()
        .any(|p| s.starts_with(p))
    {
        s.to_string()
    } else {
        format!("file://{s}")
    };
    Ok(Image {
        width: 0,
        height: 0,
        encoded_bytes: 0,
        url: url.into(),
        recipe: None,
    })
}

/// `sample` (a text prompt) with `images` after its text, as vLLM's chat request sends them.
pub(super) fn with_images(sample: Sample, images: Vec<Image>) -> Sample {
    Sample {
        prompt: PromptSource::Multimodal {
            text: Box::new(sample.prompt),
            images: images.into(),
        },
        ..sample
    }
}
