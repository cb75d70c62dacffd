//! vLLM 0.33's `custom_image` dataset (`bench serve --dataset-name custom_image`): a JSONL file
//! of prompts with images, as `CustomImageDataset` reads it.
//!
//! Owns the file's rules ([`parse`], pure: the fuzz target `custom_image_lines`) and the
//! samples ([`load`]). Each non-blank line is a JSON object with either `prompt` (text) and
//! `image_files` (a non-empty list), or `content` (a non-empty list of `{type: text, text}`,
//! `{type: image, image}` and `{type: image_url, image_url: URL | {url, ...}}` parts, in the
//! order they are sent). A line that breaks a rule is an error naming the line, with vLLM's
//! message. The rows are shuffled by Python's `random` seeded with `--seed` (unless
//! `--disable-shuffle`), the first `--num-prompts` taken, then oversampled as vLLM does (unless
//! `--no-oversample`). Every output length is `--custom-output-len`; the prompt length is the
//! text's (the `content` form: its text parts joined), counted by the run's tokenizer.
//!
//! Images, as vLLM's `process_image` takes a string: `http(s)://` and `data:image/` URLs as
//! written (a data URL sized from its header; a web URL is not fetched, so unsized), anything
//! else a local file — `file://` + the path as written, which vLLM sends for the server to read.
//! llmspeed reads each local file of the requests it takes while the dataset loads: a missing or
//! unreadable file, or one that is no image, stops the run before anything is sent, naming the
//! line; its header gives the size the report counts. With `--custom-ensure-client-side-data`
//! the file goes as a data URL of its own bytes (`workload::image::Image::from_file`; vLLM
//! re-encodes it as PNG: the same pixels and size, other bytes), and a web URL is refused
//! (llmspeed fetches no image while loading). Requests of the first form carry the text, then
//! the images (vLLM's order); of the `content` form, the parts as written.

use super::common::{counted, fill_to, need_path, read};
use super::{DatasetConfig, DatasetError, PromptSource, Sample, Tokens};
use crate::workload::image::{Image, ImageNeed};
use crate::workload::pyrandom::PyRandom;
use serde_json::{json, Map, Value};
use std::path::Path;
use std::sync::Arc;

/// `--custom-ensure-client-side-data`: send local files as data URLs of their bytes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Settings {
    pub client_side: bool,
}

/// One line of the file, checked.
#[derive(Clone, Debug, PartialEq)]
pub struct Line {
    /// 1-based, as vLLM numbers them.
    pub number: usize,
    pub item: Item,
}

/// What a line asks for.
#[derive(Clone, Debug, PartialEq)]
pub enum Item {
    /// `prompt` and `image_files`: the text, then each image.
    Prompt { text: String, images: Vec<String> },
    /// `content`: the parts in order.
    Content(Vec<Part>),
}

/// One part of a `content` line.
#[derive(Clone, Debug, PartialEq)]
pub enum Part {
    Text(String),
    /// An image reference and the `image_url` object's other keys (`detail` ...), kept.
    Image {
        image: String,
        extra: Map<String, Value>,
    },
}

/// The file's lines as vLLM's `load_data` and `sample` check them; the first broken line is
/// the error, with vLLM's message (naming the line where vLLM does, and always here).
pub fn parse(text: &str) -> Result<Vec<Line>, String> {
    let mut out = Vec::new();
    for (i, raw) in text.lines().enumerate() {
        let number = i + 1;
        let l = raw.trim();
        if l.is_empty() {
            continue;
        }
        let v: Value = serde_json::from_str(l)
            .map_err(|e| format!("Invalid JSON in custom image dataset line {number}: {e}"))?;
        let Value::Object(o) = v else {
            return Err(format!(
                "Each custom image dataset line must contain a JSON object. Found {} on line \
                 {number}.",
                kind(&v)
            ));
        };
        let at = |m: &str| format!("line {number}: {m}");
        let item = if o.contains_key("content") {
            Item::Content(content(&o["content"]).map_err(|m| at(&m))?)
        } else if let (Some(p), Some(files)) = (o.get("prompt"), o.get("image_files")) {
            let Value::String(text) = p else {
                return Err(at("'prompt' must be a string."));
            };
            let images = match files {
                Value::Array(a) if !a.is_empty() => a
                    .iter()
                    .map(|f| match f {
                        Value::String(s) => Ok(s.clone()),
                        other => Err(at(&format!(
                            "each of 'image_files' must be a string (a path or URL), not {}",
                            kind(other)
                        ))),
                    })
                    .collect::<Result<_, _>>()?,
                _ => return Err(at("'image_files' must be a non-empty list.")),
            };
            Item::Prompt {
                text: text.clone(),
                images,
            }
        } else {
            return Err(format!(
                "Each custom image dataset line must contain either 'prompt' and 'image_files' \
                 fields, or a 'content' field. Invalid line: {number}."
            ));
        };
        out.push(Line { number, item });
    }
    Ok(out)
}

/// A `content` list's parts, checked as vLLM's `_process_content_part` checks them.
fn content(v: &Value) -> Result<Vec<Part>, String> {
    let Value::Array(parts) = v else {
        return Err("'content' must be a list of text and image content dictionaries.".into());
    };
    if parts.is_empty() {
        return Err("'content' must contain at least one item.".into());
    }
    parts
        .iter()
        .map(|p| {
            let Value::Object(p) = p else {
                return Err(format!(
                    "Each item in 'content' must be a dictionary. Found {}.",
                    kind(p)
                ));
            };
            match p.get("type").and_then(Value::as_str) {
                Some("text") => match p.get("text") {
                    Some(Value::String(t)) => Ok(Part::Text(t.clone())),
                    _ => Err("Text content parts must contain a string 'text'.".into()),
                },
                Some("image") => match p.get("image") {
                    Some(Value::String(s)) => Ok(Part::Image {
                        image: s.clone(),
                        extra: Map::new(),
                    }),
                    Some(other) => Err(format!(
                        "an 'image' part's image must be a path or URL string, not {}",
                        kind(other)
                    )),
                    None => Err("Image content parts must contain an 'image' field.".into()),
                },
                Some("image_url") => match p.get("image_url") {
                    Some(Value::String(s)) => Ok(Part::Image {
                        image: s.clone(),
                        extra: Map::new(),
                    }),
                    Some(Value::Object(u)) => match u.get("url") {
                        Some(Value::String(s)) => Ok(Part::Image {
                            image: s.clone(),
                            extra: u
                                .iter()
                                .filter(|(k, _)| *k != "url")
                                .map(|(k, v)| (k.clone(), v.clone()))
                                .collect(),
                        }),
                        _ => Err(
                            "Image URL content parts must contain a string 'image_url.url'.".into(),
                        ),
                    },
                    _ => Err(
                        "Image URL content parts must contain an 'image_url' string or \
                              dictionary."
                            .into(),
                    ),
                },
                t => Err(format!(
                    "Content parts must have type 'text', 'image', or 'image_url'. Found: {}.",
                    match t {
                        Some(t) => format!("'{t}'"),
                        None => "None".into(),
                    }
                )),
            }
        })
        .collect()
}

/// A JSON value's Python type, for vLLM's messages.
fn kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "<class 'NoneType'>",
        Value::Bool(_) => "<class 'bool'>",
        Value::Number(n) if n.is_f64() => "<class 'float'>",
        Value::Number(_) => "<class 'int'>",
        Value::String(_) => "<class 'str'>",
        Value::Array(_) => "<class 'list'>",
        Value::Object(_) => "<class 'dict'>",
    }
}

/// The image a reference stands for, as sent (see the module doc); `read` reads a local file.
pub fn image(
    s: &str,
    client_side: bool,
    read: &mut dyn FnMut(&Path) -> std::io::Result<Vec<u8>>,
) -> Result<Image, String> {
    if let Some(rest) = s.strip_prefix("data:image/") {
        use base64::Engine as _;
        let b64 = rest
            .split_once(";base64,")
            .map(|(_, b)| b)
            .ok_or("a data:image/ URL that is not base64")?;
        let file = base64::engine::general_purpose::STANDARD
            .decode(b64)
            .map_err(|e| format!("a data:image/ URL whose data is not base64 ({e})"))?;
        let sized = Image::from_file(&file)?;
        return Ok(Image {
            url: s.into(),
            ..sized
        });
    }
    if s.starts_with("http://") || s.starts_with("https://") {
        if client_side {
            return Err(format!(
                "{s}: --custom-ensure-client-side-data would fetch it, and llmspeed fetches no \
                 image while loading: download it and name the file"
            ));
        }
        return Ok(Image {
            width: 0,
            height: 0,
            encoded_bytes: 0,
            url: s.into(),
            recipe: None,
        });
    }
    let path = s.strip_prefix("file://").unwrap_or(s);
    let file = read(Path::new(path)).map_err(|e| format!("image {path:?}: {e}"))?;
    let sized = Image::from_file(&file).map_err(|e| format!("image {path:?}: {e}"))?;
    if client_side {
        return Ok(sized);
    }
    Ok(Image {
        url: format!("file://{path}").into(),
        ..sized
    })
}

/// The samples of `lines` (the file's, in order), by vLLM's rule (see the module doc); `read`
/// reads a local image file.
pub fn samples(
    cfg: &DatasetConfig,
    mut lines: Vec<Line>,
    tokens: &mut dyn Tokens,
    read: &mut dyn FnMut(&Path) -> std::io::Result<Vec<u8>>,
) -> Result<Vec<Sample>, DatasetError> {
    let output_len = cfg.custom_output_len.ok_or_else(|| {
        DatasetError::Invalid(
            "--dataset-name custom_image needs --custom-output-len N (vLLM sends -1 as each \
             request's output length)"
                .into(),
        )
    })?;
    if cfg.shuffle {
        PyRandom::new(cfg.seed).shuffle(&mut lines);
    }
    let client_side = cfg.custom_image.client_side;
    let mut out = Vec::with_capacity(cfg.num_prompts.min(lines.len()));
    for line in lines.into_iter().take(cfg.num_prompts) {
        let bad = |m: String| DatasetError::Invalid(format!("line {}: {m}", line.number));
        let mut img = |s: &str| image(s, client_side, read).map_err(bad);
        let (prompt, text) = match &line.item {
            Item::Prompt { text, images } => {
                let images = images
                    .iter()
                    .map(|s| img(s))
                    .collect::<Result<Vec<_>, _>>()?;
                let prompt = PromptSource::Multimodal {
                    text: Box::new(PromptSource::Text(text.clone())),
                    images: images.into(),
                };
                (prompt, text.clone())
            }
            Item::Content(parts) => {
                let mut text = String::new();
                let mut sent = Vec::with_capacity(parts.len());
                for p in parts {
                    sent.push(match p {
                        Part::Text(t) => {
                            text.push_str(t);
                            json!({"type": "text", "text": t})
                        }
                        Part::Image { image, extra } => {
                            let i = img(image)?;
                            let mut u = Map::new();
                            u.insert("url".into(), Value::String(i.url.to_string()));
                            u.extend(extra.clone());
                            json!({"type": "image_url", "image_url": u})
                        }
                    });
                }
                let messages = json!([{"role": "user", "content": sent}]);
                let prompt = PromptSource::Chat {
                    messages: Arc::new(messages),
                    extra: Arc::new(Map::new()),
                };
                (prompt, text)
            }
        };
        out.push(Sample {
            prompt,
            prompt_len: counted(tokens, &text)?,
            output_len,
            group: None,
        });
    }
    fill_to(&mut out, cfg);
    Ok(out)
}

/// The family's entry: `--dataset-path` (a `.jsonl` file, as vLLM requires) read and checked,
/// then [`samples`] with the images of the requests taken read from disk.
pub fn load(cfg: &DatasetConfig, tokens: &mut dyn Tokens) -> Result<Vec<Sample>, DatasetError> {
    let path = need_path(cfg)?;
    if path.extension().and_then(|e| e.to_str()) != Some("jsonl") {
        return Err(DatasetError::Invalid(format!(
            "{}: Only JSONL format is supported for CustomImageDataset (a .jsonl file).",
            path.display()
        )));
    }
    let text = read(path)?;
    let lines = parse(&text).map_err(|msg| DatasetError::Format {
        path: path.display().to_string(),
        msg,
    })?;
    samples(cfg, lines, tokens, &mut |p: &Path| std::fs::read(p))
}

/// The longest data URL prefix a file is sent under: `data:` + `image/jpeg` (or `image/webp`;
/// the other types are a byte shorter) + `;base64,` ([`crate::workload::image::data_url`]).
const DATA_URL_PREFIX: u64 = 5 + 10 + 8;

/// About how many bytes the data URLs of the requests taken hold, before any image file is
/// read (what `bench::engine::samples::check_image_memory` weighs): each local file of the
/// lines taken, as `--custom-ensure-client-side-data` sends it, is [`DATA_URL_PREFIX`] +
/// 4·⌈n/3⌉ bytes for a file of n bytes on disk (its size from the file system), a URL written
/// in the file its own length. Without that flag a file goes as its `file://` path: nothing
/// worth weighing, so nothing is read. Oversampled requests share their row's URLs. A file
/// that cannot be sized counts 0 (the load then names it); the dataset file's own errors
/// are the load's too.
pub fn url_bytes_need(cfg: &DatasetConfig) -> Result<ImageNeed, DatasetError> {
    if !cfg.custom_image.client_side {
        return Ok(ImageNeed::default());
    }
    let path = need_path(cfg)?;
    let lines = parse(&read(path)?).map_err(DatasetError::Invalid)?;
    Ok(need_of(cfg, lines, &mut |p: &Path| {
        std::fs::metadata(p).ok().map(|m| m.len())
    }))
}

/// [`url_bytes_need`] of `lines` (the file's, in order) taken by vLLM's rule, each local
/// file's size on disk from `size`.
pub fn need_of(
    cfg: &DatasetConfig,
    mut lines: Vec<Line>,
    size: &mut dyn FnMut(&Path) -> Option<u64>,
) -> ImageNeed {
    if cfg.shuffle {
        PyRandom::new(cfg.seed).shuffle(&mut lines);
    }
    let mut url = |s: &str| -> u64 {
        if s.starts_with("data:image/") || s.starts_with("http://") || s.starts_with("https://") {
            return s.len() as u64;
        }
        let path = s.strip_prefix("file://").unwrap_or(s);
        size(Path::new(path)).map_or(0, |n| DATA_URL_PREFIX + n.div_ceil(3) * 4)
    };
    let per_line = lines.iter().take(cfg.num_prompts).map(|l| match &l.item {
        Item::Prompt { images, .. } => images.iter().map(|s| url(s)).sum(),
        Item::Content(parts) => parts
            .iter()
            .map(|p| match p {
                Part::Image { image, .. } => url(image),
                Part::Text(_) => 0,
            })
            .sum(),
    });
    ImageNeed::of(per_line.collect::<Vec<u64>>().into_iter())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::workload::datasets::test_util::words;
    use crate::workload::datasets::DatasetKind;

    fn png(w: u32, h: u32) -> Vec<u8> {
        crate::workload::image::encode_png(w, h, &vec![90; (w * h * 3) as usize]).unwrap()
    }

    #[test]
    fn lines_are_checked_with_vllms_messages() {
        let ok = parse(
            "{\"prompt\": \"a b\", \"image_files\": [\"x.png\"]}\n\n\
             {\"content\": [{\"type\": \"text\", \"text\": \"c\"}, {\"type\": \"image_url\", \
             \"image_url\": {\"url\": \"y.png\", \"detail\": \"low\"}}]}\n",
        )
        .unwrap();
        assert_eq!(ok.len(), 2);
        assert_eq!(ok[1].number, 3);
        let Item::Content(parts) = &ok[1].item else {
            panic!()
        };
        assert!(
            matches!(&parts[1], Part::Image { image, extra } if image == "y.png" && extra["detail"] == "low")
        );
        for (text, want) in [
            ("{\"prompt\": \"a\"}", "Invalid line: 1."),
            ("\n[1]", "Found <class 'list'> on line 2."),
            ("{x", "Invalid JSON in custom image dataset line 1"),
            (
                "{\"prompt\": 1, \"image_files\": [\"a\"]}",
                "'prompt' must be a string.",
            ),
            (
                "{\"prompt\": \"a\", \"image_files\": []}",
                "'image_files' must be a non-empty list.",
            ),
            (
                "{\"content\": []}",
                "'content' must contain at least one item.",
            ),
            ("{\"content\": [{\"type\": \"audio\"}]}", "Found: 'audio'."),
        ] {
            let e = parse(text).unwrap_err();
            assert!(e.contains(want), "{text}: {e}");
        }
    }

    #[test]
    fn images_are_read_sized_and_sent_by_vllms_rule() {
        let file = png(30, 20);
        let mut read = |p: &Path| {
            if p == Path::new("/d/a.png") {
                Ok(file.clone())
            } else {
                Err(std::io::Error::from(std::io::ErrorKind::NotFound))
            }
        };
        let i = image("/d/a.png", false, &mut read).unwrap();
        assert_eq!((i.width, i.height, &*i.url), (30, 20, "file:///d/a.png"));
        let i = image("file:///d/a.png", true, &mut read).unwrap();
        assert!(i.url.starts_with("data:image/png;base64,"));
        assert_eq!(i.encoded_bytes, file.len() as u64);
        let e = image("/d/missing.png", false, &mut read).unwrap_err();
        assert!(e.contains("missing.png"), "{e}");
        let w = image("https://x/y.jpg", false, &mut read).unwrap();
        assert_eq!((w.width, &*w.url), (0, "https://x/y.jpg"));
        assert!(image("https://x/y.jpg", true, &mut read).is_err());
    }

    #[test]
    fn samples_take_the_shuffled_rows_and_name_a_missing_file_by_line() {
        let text: String = (0..6)
            .map(|i| {
                format!(
                    "{{\"prompt\": \"p{i} {}\", \"image_files\": [\"/d/a.png\"]}}\n",
                    "w ".repeat(i)
                )
            })
            .collect();
        let lines = parse(&text).unwrap();
        let file = png(8, 8);
        let mut read = |_: &Path| Ok(file.clone());
        let cfg = DatasetConfig {
            kind: DatasetKind::CustomImage,
            num_prompts: 4,
            seed: 3,
            ..Default::default()
        };
        let s = samples(&cfg, lines.clone(), &mut words, &mut read).unwrap();
        let mut order: Vec<usize> = (0..6).collect();
        PyRandom::new(3).shuffle(&mut order);
        let lens: Vec<u64> = s.iter().map(|s| s.prompt_len).collect();
        let want: Vec<u64> = order[..4].iter().map(|&i| 1 + i as u64).collect();
        assert_eq!(lens, want);
        assert!(s.iter().all(|s| s.output_len == 256));
        let mut missing = |_: &Path| Err(std::io::Error::from(std::io::ErrorKind::NotFound));
        let e = samples(&cfg, lines, &mut words, &mut missing)
            .unwrap_err()
            .to_string();
        assert!(e.contains(&format!("line {}", order[0] + 1)), "{e}");
    }

    /// The memory estimate, worked by hand: a 100-byte file is 23 + 4·34 = 159 bytes of data
    /// URL, a 3000-byte one 23 + 4·1000 = 4023, a data URL in the file its own 26; the lines
    /// taken (the first `num_prompts` after the shuffle) only; none without client-side data.
    #[test]
    fn the_memory_need_is_each_taken_files_data_url_from_its_size_on_disk() {
        let text = "{\"prompt\": \"a\", \"image_files\": [\"/d/a.png\", \"file:///d/b.jpg\"]}\n\
                    {\"content\": [{\"type\": \"text\", \"text\": \"x\"}, {\"type\": \"image_url\", \
                    \"image_url\": \"data:image/png;base64,AAAA\"}]}\n";
        let lines = parse(text).unwrap();
        let mut size = |p: &Path| match p.to_str() {
            Some("/d/a.png") => Some(100),
            Some("/d/b.jpg") => Some(3000),
            _ => None,
        };
        let mut cfg = DatasetConfig {
            kind: DatasetKind::CustomImage,
            num_prompts: 2,
            shuffle: false,
            ..Default::default()
        };
        let need = need_of(&cfg, lines.clone(), &mut size);
        assert_eq!(
            (need.total, need.per_request_max),
            (159 + 4023 + 26, 159 + 4023)
        );
        cfg.num_prompts = 1;
        assert_eq!(need_of(&cfg, lines.clone(), &mut size).total, 159 + 4023);
        // Without --custom-ensure-client-side-data a file goes as its path: nothing to weigh.
        assert_eq!(url_bytes_need(&cfg).unwrap().total, 0);
        // Against the code that builds the URL: exact for a JPEG's (or WebP's) MIME type, a
        // byte over for PNG's, GIF's and BMP's.
        for (file, over) in [
            (png(7, 5), 1),
            (
                crate::workload::image::encode_jpeg(9, 4, &[7; 9 * 4 * 3]).unwrap(),
                0,
            ),
        ] {
            let n = file.len() as u64;
            let made = image("/f", true, &mut |_: &Path| Ok(file.clone())).unwrap();
            let one = [Line {
                number: 1,
                item: Item::Prompt {
                    text: String::new(),
                    images: vec!["/f".into()],
                },
            }];
            let est = need_of(&cfg, one.to_vec(), &mut |_: &Path| Some(n)).total;
            assert_eq!(est, made.url.len() as u64 + over, "{}", &made.url[..15]);
        }
    }
}
