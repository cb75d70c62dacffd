//! The images of a chat request as the simulated server sees them: each `image_url` part's
//! size, read from the file's header alone (JPEG's frame marker, PNG's `IHDR`, WebP's, GIF's
//! and BMP's), and the prompt tokens it stands for by the configured rule ([`ImageTokens`]).
//!
//! Owns no IO and decodes no pixels: a data URL is base64-decoded only as far as the header
//! needs, and the header is read by the one reader the client also uses for dataset images
//! (`workload::image_header`, held to PIL's reading of PIL-written files). An `http(s)://` URL
//! is never fetched: the request is refused saying so.

use base64::Engine as _;

/// How many prompt tokens one image costs, per model family.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ImageTokens {
    /// The same count whatever the size: LLaVA-1.5-style towers resize every image to one
    /// square (vLLM's tiny LLaVA: 224 / 14 → 256).
    Fixed(u32),
    /// One token per `p` × `p` patch, partial patches counted: `ceil(h / p) × ceil(w / p)`
    /// (a plain patch tower; not Qwen2-VL's count, which resizes first: [`ImageTokens::Qwen2Vl`]).
    Patches(u32),
    /// Qwen2-VL's count (its processor's defaults): each side rounded to the nearest multiple of
    /// 28 (14 px patches merged 2 × 2; halves to even, as Python rounds), the area then brought
    /// within [56², 28² × 1,280] keeping the aspect, one token per 28 × 28 of the result, plus
    /// the `<|vision_start|>` and `<|vision_end|>` around them.
    Qwen2Vl,
    /// A text-only model: a request with an image is refused (400), as a server refuses
    /// images its model cannot read.
    Refused,
}

/// The simulated server's answer to an image sent to a text-only model (`--image-tokens none`).
pub const REFUSED: &str =
    "the model is not a multimodal model: it takes no image input (the simulated server was \
     started with --image-tokens none)";

impl ImageTokens {
    /// Tokens for an image of `width` × `height` (0 where images are refused).
    pub fn count(self, width: u32, height: u32) -> u64 {
        match self {
            ImageTokens::Refused => 0,
            ImageTokens::Fixed(n) => n as u64,
            ImageTokens::Patches(p) => {
                let p = p.max(1);
                width.div_ceil(p) as u64 * height.div_ceil(p) as u64
            }
            ImageTokens::Qwen2Vl => qwen2vl(width, height),
        }
    }
}

/// [`ImageTokens::Qwen2Vl`]'s count of a `width` × `height` image.
fn qwen2vl(width: u32, height: u32) -> u64 {
    const SIDE: f64 = 28.0;
    const MIN_AREA: f64 = 56.0 * 56.0;
    const MAX_AREA: f64 = 28.0 * 28.0 * 1280.0;
    let (w, h) = (f64::from(width.max(1)), f64::from(height.max(1)));
    let nearest = |x: f64| ((x / SIDE).round_ties_even() * SIDE).max(SIDE);
    let (mut rw, mut rh) = (nearest(w), nearest(h));
    if rw * rh > MAX_AREA {
        let scale = (w * h / MAX_AREA).sqrt();
        rw = ((w / scale / SIDE).floor() * SIDE).max(SIDE);
        rh = ((h / scale / SIDE).floor() * SIDE).max(SIDE);
    } else if rw * rh < MIN_AREA {
        let scale = (MIN_AREA / (w * h)).sqrt();
        rw = (w * scale / SIDE).ceil() * SIDE;
        rh = (h * scale / SIDE).ceil() * SIDE;
    }
    (rw / SIDE) as u64 * (rh / SIDE) as u64 + 2
}

impl std::str::FromStr for ImageTokens {
    type Err = String;

    /// `fixed:N`, `patch:P`, `qwen2vl` or `none`.
    fn from_str(s: &str) -> Result<Self, String> {
        match s.trim() {
            "none" => return Ok(ImageTokens::Refused),
            "qwen2vl" => return Ok(ImageTokens::Qwen2Vl),
            _ => {}
        }
        let bad = || {
            format!("image tokens {s:?}: expected fixed:N, patch:P (P at least 1), qwen2vl or none")
        };
        let (kind, n) = s.split_once(':').ok_or_else(bad)?;
        let n: u32 = n.trim().parse().map_err(|_| bad())?;
        match kind.trim() {
            "fixed" => Ok(ImageTokens::Fixed(n)),
            "patch" if n > 0 => Ok(ImageTokens::Patches(n)),
            _ => Err(bad()),
        }
    }
}

impl Default for ImageTokens {
    fn default() -> Self {
        ImageTokens::Fixed(256)
    }
}

/// One image's size in pixels (the client's header reader's).
pub use crate::workload::image_header::Size;

/// One image of a request: its size and a key naming its content (a hash of its URL), from
/// which its placeholder tokens are made, so the same image gives the same tokens (a prefix
/// cache hit, as vLLM's multimodal hashing gives) and another image other tokens.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Seen {
    pub size: Size,
    pub key: u64,
}

/// The `image_url` parts of chat messages' `content` lists, in order. A part of another type
/// is not an image (the text parts are the template's).
pub fn images_of(messages: &[serde_json::Value]) -> Result<Vec<Seen>, String> {
    let mut out = Vec::new();
    for m in messages {
        let Some(parts) = m.get("content").and_then(serde_json::Value::as_array) else {
            continue;
        };
        for p in parts {
            if p.get("type").and_then(serde_json::Value::as_str) != Some("image_url") {
                continue;
            }
            let url = p
                .get("image_url")
                .and_then(|u| u.get("url").or(Some(u)))
                .and_then(serde_json::Value::as_str)
                .ok_or("an image_url part needs image_url.url (a string)")?;
            out.push(Seen {
                size: url_size(url)?,
                key: url_key(url),
            });
        }
    }
    Ok(out)
}

/// SGLang's native `image_data`: one image URL or a list of them (absent or `null`: none).
pub fn image_data(v: Option<&serde_json::Value>) -> Result<Vec<Seen>, String> {
    let urls: Vec<&serde_json::Value> = match v {
        None | Some(serde_json::Value::Null) => return Ok(Vec::new()),
        Some(serde_json::Value::Array(a)) => a.iter().collect(),
        Some(one) => vec![one],
    };
    urls.into_iter()
        .map(|u| {
            let url = u
                .as_str()
                .ok_or("image_data holds image URLs (strings), one or a list")?;
            Ok(Seen {
                size: url_size(url)?,
                key: url_key(url),
            })
        })
        .collect()
}

/// A hash of the URL's length and up to its first and last 32 KiB: enough to tell images
/// apart (noise differs from the first bytes on) without reading megabytes per request.
fn url_key(url: &str) -> u64 {
    use std::hash::{Hash, Hasher};
    const SPAN: usize = 32 << 10;
    let b = url.as_bytes();
    let mut h = std::collections::hash_map::DefaultHasher::new();
    b.len().hash(&mut h);
    b[..b.len().min(SPAN)].hash(&mut h);
    b[b.len().saturating_sub(SPAN)..].hash(&mut h);
    h.finish()
}

/// Appends each image's placeholder tokens (`rule`'s count, ids below `vocab` drawn from the
/// image's key) to the prompt, after its text; returns how many were added.
pub fn add_image_tokens(
    prompt: &mut Vec<u32>,
    images: &[Seen],
    rule: ImageTokens,
    vocab: u32,
) -> u64 {
    let mut added = 0;
    for img in images {
        let n = rule.count(img.size.width, img.size.height);
        let mut x = img.key;
        prompt.extend((0..n).map(|_| {
            // splitmix64: a well-spread id per position.
            x = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
            let mut z = x;
            z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
            ((z ^ (z >> 31)) % vocab.max(1) as u64) as u32
        }));
        added += n;
    }
    added
}

/// The size of the image an `image_url` names: a `data:image/...;base64,` URL, decoded only
/// as far as its header.
pub fn url_size(url: &str) -> Result<Size, String> {
    if url.starts_with("http://") || url.starts_with("https://") {
        return Err(format!(
            "the simulated server fetches no image URLs ({}...): send images as data: URLs",
            &url[..url.len().min(40)]
        ));
    }
    let rest = url
        .strip_prefix("data:")
        .ok_or("an image_url must be a data: URL")?;
    let (head, b64) = rest
        .split_once(',')
        .ok_or("a data: URL needs a comma before its data")?;
    if !head.starts_with("image/") || !head.ends_with(";base64") {
        return Err(format!(
            "an image data: URL must be image/...;base64, got {head:?}"
        ));
    }
    // Decode more of the file until the header is in it (a JPEG's frame follows its tables
    // and any metadata segments).
    let mut take = 1024usize;
    loop {
        let end = (take.min(b64.len())) / 4 * 4;
        let whole = end == b64.len() / 4 * 4;
        let end = if whole { b64.len() } else { end };
        let bytes = base64::engine::general_purpose::STANDARD
            .decode(&b64.as_bytes()[..end])
            .map_err(|e| format!("an image data: URL is not base64: {e}"))?;
        match header_size(&bytes) {
            Ok(Some(size)) => return Ok(size),
            Ok(None) if !whole => take *= 4,
            Ok(None) => return Err("the image ends before its size is given".into()),
            Err(e) => return Err(e),
        }
    }
}

/// The size an image file's header gives (`workload::image_header`: JPEG, PNG, WebP, GIF or
/// BMP); `Ok(None)` when `file` ends before it.
pub fn header_size(file: &[u8]) -> Result<Option<Size>, String> {
    Ok(crate::workload::image_header::read(file)?.map(|h| h.size))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn b64(bytes: &[u8]) -> String {
        base64::engine::general_purpose::STANDARD.encode(bytes)
    }

    /// A JPEG head written by hand: SOI, an APP0 of `app` bytes, a DQT stub, then SOF0.
    fn jpeg_head(w: u16, h: u16, app: usize) -> Vec<u8> {
        let mut f = vec![0xFF, 0xD8, 0xFF, 0xE0];
        f.extend_from_slice(&((app + 2) as u16).to_be_bytes());
        f.extend(std::iter::repeat_n(0u8, app));
        f.extend_from_slice(&[0xFF, 0xDB, 0x00, 0x03, 0x00]);
        f.extend_from_slice(&[0xFF, 0xC0, 0x00, 0x11, 0x08]);
        f.extend_from_slice(&h.to_be_bytes());
        f.extend_from_slice(&w.to_be_bytes());
        f.extend_from_slice(&[3; 10]);
        f
    }

    #[test]
    fn reads_jpeg_and_png_sizes_from_their_headers() {
        let url = format!("data:image/jpeg;base64,{}", b64(&jpeg_head(1280, 720, 16)));
        assert_eq!(
            url_size(&url).unwrap(),
            Size {
                width: 1280,
                height: 720
            }
        );
        // A metadata segment far longer than the first slice decoded.
        let url = format!("data:image/jpeg;base64,{}", b64(&jpeg_head(3, 5, 20_000)));
        assert_eq!(
            url_size(&url).unwrap(),
            Size {
                width: 3,
                height: 5
            }
        );
        let mut png = b"\x89PNG\r\n\x1a\n\0\0\0\x0dIHDR".to_vec();
        png.extend_from_slice(&640u32.to_be_bytes());
        png.extend_from_slice(&480u32.to_be_bytes());
        let url = format!("data:image/png;base64,{}", b64(&png));
        assert_eq!(
            url_size(&url).unwrap(),
            Size {
                width: 640,
                height: 480
            }
        );
    }

    #[test]
    fn refuses_what_it_cannot_size_with_a_reason() {
        for (url, says) in [
            ("https://example.invalid/cat.jpg", "fetches no image URLs"),
            ("file:///x.jpg", "must be a data: URL"),
            ("data:image/jpeg;base64", "needs a comma"),
            ("data:text/plain;base64,aGk=", "image/...;base64"),
            ("data:image/jpeg;base64,***", "not base64"),
            ("data:image/x;base64,AAAAAAAAAAAAAAAA", "not an image"),
            ("data:image/jpeg;base64,/9j/4AAQ", "ends before its size"),
        ] {
            let e = url_size(url).unwrap_err();
            assert!(e.contains(says), "{url}: {e}");
        }
        // A GIF is sized too (its logical screen): 1 x 1.
        let gif = url_size("data:image/gif;base64,R0lGODlhAQABAAAAACw=").unwrap();
        assert_eq!((gif.width, gif.height), (1, 1));
    }

    #[test]
    fn token_rules_by_hand() {
        assert_eq!(ImageTokens::Fixed(256).count(1280, 720), 256);
        // 1280 / 28 = 45.7 -> 46 columns, 720 / 28 = 25.7 -> 26 rows.
        assert_eq!(ImageTokens::Patches(28).count(1280, 720), 46 * 26);
        assert_eq!(ImageTokens::Patches(14).count(256, 256), 19 * 19);
        assert_eq!("qwen2vl".parse::<ImageTokens>(), Ok(ImageTokens::Qwen2Vl));
    }

    /// The counts a real Qwen2-VL-style model (`scripts/tiny_qwen2vl.py` on vLLM 0.32's CPU
    /// build) gave for these sizes, `usage.prompt_tokens` less the text's, read live: each side
    /// rounded (640 × 480 to 644 × 476: 23 × 17, where a ceiling rule says 23 × 18), under the
    /// least area (20 × 20 up to 56 × 56), over the most (2000 × 1500 down to 1148 × 840).
    /// `tests/real_vision_qwen2vl.rs` holds the rule to the server on every request it sends.
    #[test]
    fn qwen2vl_counts_what_the_real_model_counts() {
        let live = [
            ((640, 480), 391),
            ((96, 64), 6),
            ((1280, 720), 1196),
            ((20, 20), 4),
            ((30, 500), 18),
            ((2000, 1500), 1230),
            ((41, 43), 6),
        ];
        for ((w, h), tokens) in live {
            assert_eq!(ImageTokens::Qwen2Vl.count(w, h), tokens + 2, "{w} x {h}");
        }
        assert_eq!(
            "fixed:64".parse::<ImageTokens>(),
            Ok(ImageTokens::Fixed(64))
        );
        assert_eq!(
            "patch:28".parse::<ImageTokens>(),
            Ok(ImageTokens::Patches(28))
        );
        for bad in ["patch:0", "fixed", "tiles:3", "fixed:-1"] {
            assert!(bad.parse::<ImageTokens>().is_err(), "{bad}");
        }
    }
}
