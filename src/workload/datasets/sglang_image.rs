//! SGLang 0.5.23's `image` dataset (`bench sglang --dataset-name image`): `random`'s text
//! lengths, each request with a number of synthetic images of a resolution, as SGLang's
//! `ImageDataset` draws them.
//!
//! Owns the `--image-*` settings ([`ImageSettings`], with the `--image-resolution` parser
//! [`parse_resolution`]), the draw of each request's image count, text and output length and
//! image sizes for a seed, and the samples ([`load`]). For a seed the draw is SGLang's own,
//! number for number, from numpy's legacy generator (`np.random.seed(seed)`): with
//! `--random-image-count` every request's count `randint(1, count + 1, size=n)`; every input
//! length, then every output length (`compute_random_lens`); then request by request, image by
//! image, with `random:` bounds the width `randint(min_w, max_w + 1)` and the height
//! `randint(min_h, max_h + 1)`, then (content `random`) the pixels `rand(h, w, 3) * 255` cast to
//! bytes. The pixels are SGLang's bytes too; the JPEG or PNG around them is llmspeed's encoder
//! (`workload::image`), so only the encoded size differs. The text is llmspeed's: token ids of
//! the drawn length (SGLang decodes ids drawn by Python's `random` from the tokenizer's
//! vocabulary), fitted to text by the engine as for `random`.
//!
//! Also SGLang's prompt for a native-backend image row, this family's and `mmmu`'s
//! (`create_mm_data_row`): [`native_prompt`], the processor's chat template around the images
//! and the text or SGLang's fallback, and [`text_only_prompt`], the text alone through it (what
//! SGLang counts as the row's text tokens).
//!
//! Pure: no IO, no clock. The images are made and encoded here, while the dataset loads, or
//! (`Making::Planned`) only their recipes drawn, made during the run.

use super::{DatasetConfig, DatasetError, PromptSource, Sample};
use crate::workload::chat_template::{Message, Part, Processor};
use crate::workload::image::{Format, Image, ImageNeed, Making, Pixels, Recipe};
use crate::workload::numpy::RandomState;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use std::sync::Arc;

/// The JPEG quality SGLang asks PIL for (`img.save(..., quality=85)`).
pub const JPEG_QUALITY: u8 = 85;

/// `--image-resolution`, as sizes `(width, height)`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Resolution {
    /// Every image this size: a preset (`4k`, `1080p`, `720p`, `360p`) or `HxW`.
    Fixed { width: u32, height: u32 },
    /// `random:<min_h>x<min_w>-<max_h>x<max_w>`: each image's width and height drawn
    /// uniformly, bounds included.
    Random { min: (u32, u32), max: (u32, u32) },
}

impl Resolution {
    /// The largest image it may make, `(width, height)`.
    pub fn max(self) -> (u32, u32) {
        match self {
            Resolution::Fixed { width, height } => (width, height),
            Resolution::Random { max, .. } => max,
        }
    }
}

/// `--image-content`: what the pixels are.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Content {
    /// Each byte `int(u * 255)` of a uniform double `u` (SGLang's `random`).
    Random,
    /// Every byte 255: a white image (SGLang's `blank`), drawing nothing.
    Blank,
}

/// The image dataset's flags, with SGLang 0.5.23's defaults.
#[derive(Clone, Debug, PartialEq)]
pub struct ImageSettings {
    /// `--image-count`: images per request (with `random_count`, the most).
    pub count: u32,
    /// `--random-image-count`: each request's count drawn from `1..=count`.
    pub random_count: bool,
    pub resolution: Resolution,
    pub format: Format,
    pub content: Content,
}

impl Default for ImageSettings {
    fn default() -> Self {
        ImageSettings {
            count: 1,
            random_count: false,
            resolution: Resolution::Fixed {
                width: 1920,
                height: 1080,
            },
            format: Format::Jpeg,
            content: Content::Random,
        }
    }
}

const RESOLUTION_HELP: &str = "presets 4k, 1080p, 720p, 360p, HEIGHTxWIDTH (e.g. 1080x1920), \
                               or random:MIN_HxMIN_W-MAX_HxMAX_W (e.g. random:256x256-1024x1024)";

/// Parses `--image-resolution` as SGLang 0.5.23 does: a preset (matched as written), else the
/// text trimmed and lower-cased as `HEIGHTxWIDTH` (two runs of ASCII digits, each above 0), or
/// with the prefix `random:` two such bounds (a bound may be a preset) joined by the first `-`,
/// neither side of the minimum above the maximum's.
pub fn parse_resolution(s: &str) -> Result<Resolution, String> {
    let err = |m: &str| format!("--image-resolution {s:?}: {m} ({RESOLUTION_HELP})");
    let t = s.trim();
    let lower = t.to_lowercase();
    if !lower.starts_with("random:") {
        let (width, height) = fixed(s).map_err(|m| err(&m))?;
        return Ok(Resolution::Fixed { width, height });
    }
    // SGLang cuts the prefix's length off the trimmed text (any case) and splits at the first
    // '-'.
    let rest = t.get("random:".len()..).unwrap_or("");
    let (lo, hi) = rest
        .split_once('-')
        .ok_or_else(|| err("random bounds are two resolutions joined by '-'"))?;
    let min = fixed(lo).map_err(|m| err(&format!("the minimum: {m}")))?;
    let max = fixed(hi).map_err(|m| err(&format!("the maximum: {m}")))?;
    if min.0 > max.0 || min.1 > max.1 {
        return Err(err(&format!(
            "the minimum {}x{} (height x width) is above the maximum {}x{}",
            min.1, min.0, max.1, max.0
        )));
    }
    Ok(Resolution::Random { min, max })
}

/// One resolution, `(width, height)`: SGLang's `parse_image_resolution`.
fn fixed(s: &str) -> Result<(u32, u32), String> {
    match s {
        "4k" => return Ok((3840, 2160)),
        "1080p" => return Ok((1920, 1080)),
        "720p" => return Ok((1280, 720)),
        "360p" => return Ok((640, 360)),
        _ => {}
    }
    let t = s.trim().to_lowercase();
    let mut parts = t.split('x');
    let (h, w) = match (parts.next(), parts.next(), parts.next()) {
        (Some(h), Some(w), None) => (h, w),
        _ => return Err(format!("{s:?} is not a preset or HEIGHTxWIDTH")),
    };
    let side = |d: &str, name: &str| -> Result<u32, String> {
        if d.is_empty() || !d.bytes().all(|c| c.is_ascii_digit()) {
            return Err(format!("{s:?}: the {name} is not a whole number"));
        }
        match d.trim_start_matches('0') {
            "" => Err(format!("{s:?}: the {name} must be above 0")),
            n => n
                .parse::<u32>()
                .map_err(|_| format!("{s:?}: the {name} is too large")),
        }
    };
    let height = side(h, "height")?;
    let width = side(w, "width")?;
    Ok((width, height))
}

/// `--image-format`: `jpeg` or `png`, SGLang's two.
pub fn parse_format(s: &str) -> Result<Format, String> {
    match s {
        "jpeg" => Ok(Format::Jpeg),
        "png" => Ok(Format::Png),
        _ => Err(format!(
            "--image-format {s:?}: llmspeed makes jpeg or png images (SGLang's two)"
        )),
    }
}

/// `--image-content`: `random` or `blank`.
pub fn parse_content(s: &str) -> Result<Content, String> {
    match s {
        "random" => Ok(Content::Random),
        "blank" => Ok(Content::Blank),
        // SGLang reads anything but "blank" as random; a typo is refused here instead.
        _ => Err(format!(
            "--image-content {s:?}: random (noise) or blank (white)"
        )),
    }
}

/// What the draw gives: each request's text and output length and what `make` made of each
/// of its images, and the 32-bit words the draw took.
pub struct Drawn<T> {
    pub input: Vec<u32>,
    pub output: Vec<u32>,
    pub images: Vec<Vec<T>>,
    pub words: u64,
}

/// SGLang's draw, in its order, `make` turning each image's size into an item (it draws the
/// pixels from the generator it is given, or skips them).
fn draw<T>(
    cfg: &DatasetConfig,
    s: &ImageSettings,
    mut make: impl FnMut(&mut RandomState, u32, u32) -> Result<T, String>,
) -> Result<Drawn<T>, DatasetError> {
    let bad = |m: String| DatasetError::Invalid(m);
    if s.count == 0 {
        return Err(bad(
            "--image-count must be at least 1 (a request of the image dataset carries images)"
                .into(),
        ));
    }
    let (mw, mh) = s.resolution.max();
    let side = s.format.max_side();
    if mw > side || mh > side {
        return Err(bad(format!(
            "--image-resolution: a {} image's sides are at most {side} pixels, got {mh}x{mw} \
             (height x width)",
            s.format.as_str()
        )));
    }
    let n = cfg.num_prompts;
    let mut np = RandomState::from_seed(cfg.seed).map_err(bad)?;
    let counts: Vec<u32> = match s.random_count {
        true => (0..n)
            .map(|_| np.randint(1, s.count as i64 + 1) as u32)
            .collect(),
        false => vec![s.count; n],
    };
    let ((in_lo, in_hi), (out_lo, out_hi)) = cfg.random_bounds.unwrap_or((
        super::sglang_range(cfg.random_input_len, cfg.random_range_ratio),
        super::sglang_range(cfg.random_output_len, cfg.random_range_ratio),
    ));
    let input = super::random::sglang_lens(&mut np, (in_lo, in_hi), n);
    let output = super::random::sglang_lens(&mut np, (out_lo, out_hi), n);
    let mut images = Vec::with_capacity(n);
    for &k in &counts {
        let mut items = Vec::with_capacity(k as usize);
        for _ in 0..k {
            let (w, h) = match s.resolution {
                Resolution::Fixed { width, height } => (width, height),
                Resolution::Random { min, max } => {
                    let w = np.randint(min.0 as i64, max.0 as i64 + 1) as u32;
                    let h = np.randint(min.1 as i64, max.1 as i64 + 1) as u32;
                    (w, h)
                }
            };
            items.push(make(&mut np, w, h).map_err(bad)?);
        }
        images.push(items);
    }
    Ok(Drawn {
        input,
        output,
        images,
        words: np.words(),
    })
}

/// The image dataset's samples: each a token-id text part of the drawn length and its images,
/// made and encoded here, or (`Making::Planned`) their recipes.
pub fn load(cfg: &DatasetConfig, making: Making) -> Result<Vec<Sample>, DatasetError> {
    let s = &cfg.sglang_image;
    // The draw runs in SGLang's order on one thread, each noise image's words skipped after a
    // copy of the generator is taken where they begin (the image's recipe); up front, the
    // images are made from the recipes on every core while the draw goes on (MT19937 cannot
    // jump: the skip costs the words' making, about a tenth of an image's encoding).
    let planned = making == Making::Planned;
    let make = |r: Recipe| r.make();
    let (drawn, made) = crate::workload::image::make_in_parallel(&make, |submit| {
        draw(cfg, s, |np, w, h| {
            let r = recipe(s, np, w, h);
            match planned {
                true => Ok(Some(Image::planned(r))),
                false => {
                    submit(r);
                    Ok(None)
                }
            }
        })
    });
    let drawn = drawn?;
    let mut made = made.into_iter();
    let images = drawn
        .images
        .into_iter()
        .map(|items| match planned {
            true => Ok(items.into_iter().flatten().collect()),
            false => made
                .by_ref()
                .take(items.len())
                .collect::<Result<Vec<Image>, String>>()
                .map_err(DatasetError::Invalid),
        })
        .collect::<Result<Vec<Vec<Image>>, _>>()?;
    // The text's ids are llmspeed's (the ids `random` sends), from a generator of their own.
    let mut rng = StdRng::seed_from_u64(cfg.seed ^ 0x1a6e_5e75);
    let ids = cfg.ids;
    let empty: Arc<[u32]> = Arc::from(Vec::new());
    Ok(images
        .into_iter()
        .enumerate()
        .map(|(i, images)| {
            let len = drawn.input[i];
            Sample {
                prompt: PromptSource::Multimodal {
                    text: Box::new(PromptSource::Synthetic {
                        prefix: empty.clone(),
                        start: rng.gen_range(0..ids.span),
                        len,
                        ids,
                    }),
                    images: images.into(),
                },
                prompt_len: len as u64,
                output_len: drawn.output[i],
                group: None,
            }
        })
        .collect())
}

/// The recipe of a `w` × `h` image whose pixels (content `random`) begin at `np`, which moves
/// on past them: SGLang's `(rand(h, w, 3) * 255).astype(uint8)`, or white.
fn recipe(s: &ImageSettings, np: &mut RandomState, w: u32, h: u32) -> Recipe {
    let pixels = match s.content {
        Content::Random => {
            let at = np.clone();
            np.skip_words(6 * w as u64 * h as u64);
            Pixels::Unit(Box::new(at))
        }
        Content::Blank => Pixels::Solid(255),
    };
    Recipe {
        width: w,
        height: h,
        format: s.format,
        quality: JPEG_QUALITY,
        pixels,
    }
}

/// About how many bytes the data URLs of [`load`]'s images will hold
/// ([`crate::workload::image::url_bytes_estimate`]), before any is made: with a fixed
/// resolution each request's count as drawn; with `random:` bounds the expected count and the
/// mean sides (each drawn uniformly, apart), where drawing every size would cost the words of
/// every image's pixels.
pub fn url_bytes_estimate(cfg: &DatasetConfig) -> Result<u64, DatasetError> {
    Ok(url_bytes_need(cfg)?.total)
}

/// [`url_bytes_estimate`] in total, and for the request that may hold the most: its count of
/// images as drawn (fixed resolution), else `--image-count` images of the largest size.
pub fn url_bytes_need(cfg: &DatasetConfig) -> Result<ImageNeed, DatasetError> {
    let s = &cfg.sglang_image;
    let fill = match s.content {
        Content::Random => crate::workload::image::Fill::Noise,
        Content::Blank => crate::workload::image::Fill::Blank,
    };
    let one = |pixels: u64| {
        crate::workload::image::url_bytes_estimate(s.format, JPEG_QUALITY, fill, pixels)
    };
    match s.resolution {
        Resolution::Fixed { width, height } => {
            let each = one(width as u64 * height as u64);
            let d = sizes(cfg)?;
            Ok(ImageNeed::of(
                d.images.iter().map(|v| v.len() as u64 * each),
            ))
        }
        Resolution::Random { min, max } => {
            let count = match s.random_count {
                true => (s.count as f64 + 1.0) / 2.0,
                false => s.count as f64,
            };
            let mean = |a: u32, b: u32| (a as f64 + b as f64) / 2.0;
            let pixels = (mean(min.0, max.0) * mean(min.1, max.1)) as u64;
            let most = s.count as u64 * one(max.0 as u64 * max.1 as u64);
            Ok(ImageNeed {
                total: (cfg.num_prompts as f64 * count * one(pixels) as f64) as u64,
                per_request_max: if cfg.num_prompts > 0 { most } else { 0 },
            })
        }
    }
}

/// How many 32-bit words SGLang's image dataset takes from numpy's legacy generator (its send
/// times are drawn after them): the draw again, each noise image's pixels skipped (two words
/// a byte) rather than made; 0 where the settings are refused.
pub(super) fn numpy_words(cfg: &DatasetConfig) -> u64 {
    sizes(cfg).map_or(0, |d| d.words)
}

/// Each image's size `(width, height)` per request, without making them (the draw of
/// [`load`], pixels skipped): what the reference's own draw is compared with.
pub fn sizes(cfg: &DatasetConfig) -> Result<Drawn<(u32, u32)>, DatasetError> {
    let content = cfg.sglang_image.content;
    // With a fixed resolution nothing is drawn after the first image's pixels but more
    // pixels: their words are counted, not made (the words' making is most of the draw).
    let fixed = matches!(cfg.sglang_image.resolution, Resolution::Fixed { .. });
    let mut counted = 0u64;
    let mut d = draw(cfg, &cfg.sglang_image, |np, w, h| {
        if content == Content::Random {
            match fixed {
                true => counted += 6 * w as u64 * h as u64,
                false => np.skip_words(6 * w as u64 * h as u64),
            }
        }
        Ok((w, h))
    })?;
    d.words += counted;
    Ok(d)
}

/// A native-backend image request's prompt (`sglang` / `sglang-native`: `/generate`, which
/// applies no template), as SGLang 0.5.23's `create_mm_data_row` makes it for its `image` and
/// `mmmu` datasets.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NativePrompt {
    /// The text sent.
    pub text: String,
    /// Why the processor's chat template was not used, where SGLang's fallback was sent.
    pub fallback: Option<String>,
}

/// The processor classes SGLang treats apart, by the name `type(processor).__name__` gives.
const PHI4MM: &str = "Phi4MMProcessor";
const MINICPMO: &str = "MiniCPMOProcessor";

/// SGLang's native prompt for `text` with the images `urls`: the processor's chat template
/// around one user message whose content is each image as `{"type": "image", "image": {"url":
/// ...}}` then the text (for `Phi4MMProcessor` the text alone, `image 1` written
/// `|endoftext10|`), with the generation prompt. Where `apply_chat_template` raises (no
/// template, or the template refuses), SGLang sends `<image>{text}`, for `MiniCPMOProcessor`
/// `(<image>./</image>){text}`.
pub fn native_prompt(p: &Processor, text: &str, urls: &[&str]) -> NativePrompt {
    let rendered = p.template.as_ref().map_err(Clone::clone).and_then(|t| {
        let r = match p.class.as_deref() {
            Some(PHI4MM) => t.render(
                &[Message::user(&text.replace("image 1", "|endoftext10|"))],
                true,
                None,
            ),
            _ => {
                let mut parts: Vec<Part<'_>> = urls.iter().map(|u| Part::Image(u)).collect();
                parts.push(Part::Text(text));
                t.render_user_parts(&parts)
            }
        };
        r.map_err(|e| e.to_string())
    });
    match rendered {
        Ok(text) => NativePrompt {
            text,
            fallback: None,
        },
        Err(why) => NativePrompt {
            text: match p.class.as_deref() {
                Some(MINICPMO) => format!("(<image>./</image>){text}"),
                _ => format!("<image>{text}"),
            },
            fallback: Some(why),
        },
    }
}

/// The text alone through the processor's chat template (one user message of the text, the
/// generation prompt): what SGLang counts as a row's text tokens (`text_prompt_len`), so the
/// vision tokens are the prompt's count less it. Where the template cannot render it, the
/// text as it is (SGLang's fallback there).
pub fn text_only_prompt(p: &Processor, text: &str) -> String {
    p.template
        .as_ref()
        .ok()
        .and_then(|t| t.render(&[Message::user(text)], true, None).ok())
        .unwrap_or_else(|| text.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::workload::datasets::{DatasetKind, RandomDraws};

    fn cfg(s: ImageSettings, n: usize, seed: u64) -> DatasetConfig {
        DatasetConfig {
            kind: DatasetKind::SglangImage,
            num_prompts: n,
            seed,
            random_input_len: 20,
            random_output_len: 5,
            random_range_ratio: 0.5,
            random_draws: RandomDraws::Sglang {
                vocab: 0,
                offsets: false,
                text: true,
            },
            sglang_image: s,
            ..Default::default()
        }
    }

    fn processor(class: Option<&str>, template: Option<&str>) -> Processor {
        use crate::workload::chat_template::{ChatTemplate, ProcessorFiles, TemplateFiles};
        let settings = class.map(|c| serde_json::json!({"processor_class": c}).to_string());
        let config = r#"{"bos_token": "<s>"}"#;
        let files = ProcessorFiles {
            processor: settings.as_deref(),
            legacy: None,
            tokenizer: TemplateFiles {
                jinja: template,
                config: Some(config),
                ..Default::default()
            },
        };
        ChatTemplate::processor("/m", &files).unwrap()
    }

    /// `create_mm_data_row`'s prompt, worked by hand: the parts in order, SGLang's Phi-4 string,
    /// and its fallbacks where the template is missing or refuses the row.
    #[test]
    fn native_prompts_are_sglangs_rule() {
        let t = "{{ bos_token }}{% for m in messages %}[{{ m.role }}]{% if m.content is string %}{{ m.content }}{% else %}{% for p in m.content %}{% if p.type == 'image' %}<img>{% elif p.text == 'no' %}{{ raise_exception('refused') }}{% else %}{{ p.text }}{% endif %}{% endfor %}{% endif %}{% endfor %}{% if add_generation_prompt %}[assistant]{% endif %}";
        let p = processor(Some("LlavaProcessor"), Some(t));
        let got = native_prompt(&p, "hi", &["data:a", "data:b"]);
        assert_eq!(got.text, "<s>[user]<img><img>hi[assistant]");
        assert_eq!(got.fallback, None);
        assert_eq!(text_only_prompt(&p, "hi"), "<s>[user]hi[assistant]");
        let refused = native_prompt(&p, "no", &["data:a"]);
        assert_eq!(refused.text, "<image>no");
        assert!(refused.fallback.unwrap().contains("refused"));
        // Phi-4's content is the text itself, "image 1" written as its image token.
        let phi = processor(Some("Phi4MMProcessor"), Some(t));
        assert_eq!(
            native_prompt(&phi, "see image 1 here", &["data:a"]).text,
            "<s>[user]see |endoftext10| here[assistant]"
        );
        // No template: SGLang's placeholder fallbacks, and the text alone as its text part.
        let none = processor(None, None);
        let got = native_prompt(&none, "q", &["data:a"]);
        assert_eq!(got.text, "<image>q");
        assert!(got.fallback.unwrap().contains("no processor chat template"));
        assert_eq!(text_only_prompt(&none, "q"), "q");
        let minicpmo = processor(Some("MiniCPMOProcessor"), None);
        assert_eq!(
            native_prompt(&minicpmo, "q", &["data:a"]).text,
            "(<image>./</image>)q"
        );
    }

    #[test]
    fn resolutions_parse_as_sglang_reads_them() {
        let f = |w, h| Resolution::Fixed {
            width: w,
            height: h,
        };
        assert_eq!(parse_resolution("1080p"), Ok(f(1920, 1080)));
        assert_eq!(parse_resolution("4k"), Ok(f(3840, 2160)));
        assert_eq!(parse_resolution("360p"), Ok(f(640, 360)));
        // HEIGHTxWIDTH, trimmed and lower-cased; leading zeros as int() reads them.
        assert_eq!(parse_resolution(" 1080X1920 "), Ok(f(1920, 1080)));
        assert_eq!(parse_resolution("016x0032"), Ok(f(32, 16)));
        assert_eq!(
            parse_resolution("RANDOM:16x24-40x64"),
            Ok(Resolution::Random {
                min: (24, 16),
                max: (64, 40)
            })
        );
        // A bound may be a preset.
        assert_eq!(
            parse_resolution("random:360p-720p"),
            Ok(Resolution::Random {
                min: (640, 360),
                max: (1280, 720)
            })
        );
        assert_eq!(
            parse_resolution("random: 8x8 - 8x8"),
            Ok(Resolution::Random {
                min: (8, 8),
                max: (8, 8)
            })
        );
    }

    #[test]
    fn bad_resolutions_are_refused_by_name() {
        for (bad, says) in [
            ("1080P", "not a preset"),
            ("720", "not a preset"),
            ("1x2x3", "not a preset"),
            ("0x10", "height must be above 0"),
            ("10x0", "width must be above 0"),
            ("-1x10", "height is not a whole number"),
            ("10x1.5", "width is not a whole number"),
            ("x10", "height is not a whole number"),
            ("99999999999x1", "too large"),
            ("random:16x16", "joined by '-'"),
            ("random:16x16-", "the maximum"),
            ("random:junk-16x16", "the minimum"),
            (
                "random:32x16-16x32",
                "minimum 32x16 (height x width) is above the maximum 16x32",
            ),
        ] {
            let e = parse_resolution(bad).unwrap_err();
            assert!(e.contains(says), "{bad:?}: {e}");
            assert!(e.starts_with("--image-resolution"), "{e}");
        }
        assert!(parse_format("webp").unwrap_err().contains("jpeg or png"));
        assert!(parse_content("noise").unwrap_err().contains("blank"));
    }

    /// The naive twin: SGLang's order spelt out with numpy's calls, one at a time.
    #[test]
    fn the_draw_is_counts_then_lengths_then_each_images_size_and_pixels() {
        let s = ImageSettings {
            count: 3,
            random_count: true,
            resolution: Resolution::Random {
                min: (2, 1),
                max: (5, 4),
            },
            format: Format::Png,
            content: Content::Random,
        };
        let c = cfg(s.clone(), 6, 7);
        let mut seen = Vec::new();
        let d = draw(&c, &s, |np, w, h| {
            let mut px = vec![0; (w * h * 3) as usize];
            recipe(&s, np, w, h).fill(&mut px);
            seen.push(px);
            Ok((w, h))
        })
        .unwrap();
        let mut np = RandomState::new(7);
        let counts: Vec<i64> = (0..6).map(|_| np.randint(1, 4)).collect();
        let input: Vec<u32> = (0..6).map(|_| np.randint(10, 21) as u32).collect();
        let output: Vec<u32> = (0..6).map(|_| np.randint(2, 6) as u32).collect();
        assert_eq!((d.input, d.output), (input, output));
        let mut k = 0;
        for (i, &n) in counts.iter().enumerate() {
            assert_eq!(d.images[i].len() as i64, n);
            for &(w, h) in &d.images[i] {
                assert_eq!(w as i64, np.randint(2, 6));
                assert_eq!(h as i64, np.randint(1, 5));
                let want: Vec<u8> = (0..w * h * 3)
                    .map(|_| (np.random() * 255.0).floor() as u8)
                    .collect();
                assert_eq!(seen[k], want);
                k += 1;
            }
        }
        assert_eq!(d.words, np.words());
        assert_eq!(numpy_words(&c), np.words());
    }

    /// The images made on the pool from generator copies are, byte for byte, the ones one
    /// generator drawing every pixel in turn makes (the draw before images were made in
    /// parallel), for drawn sizes and counts, both contents and both formats.
    #[test]
    fn parallel_images_are_the_sequential_draws_bytes() {
        for (content, format) in [
            (Content::Random, Format::Jpeg),
            (Content::Random, Format::Png),
            (Content::Blank, Format::Jpeg),
        ] {
            let s = ImageSettings {
                count: 3,
                random_count: true,
                resolution: Resolution::Random {
                    min: (3, 2),
                    max: (17, 9),
                },
                format,
                content,
            };
            let c = cfg(s.clone(), 8, 11);
            let want = draw(&c, &s, |np, w, h| {
                let px: Vec<u8> = match content {
                    Content::Random => (0..w * h * 3)
                        .map(|_| (np.random() * 255.0) as u8)
                        .collect(),
                    Content::Blank => vec![255; (w * h * 3) as usize],
                };
                Image::encode(format, JPEG_QUALITY, w, h, &px)
            })
            .unwrap();
            let got: Vec<Vec<Image>> = load(&c, Making::UpFront)
                .unwrap()
                .iter()
                .map(|s| super::super::random_mm::images(s).to_vec())
                .collect();
            assert_eq!(got, want.images);
            // Planned, each image is its recipe alone, and made from it the same bytes.
            let planned = load(&c, Making::Planned).unwrap();
            let made: Vec<Vec<Image>> = planned
                .iter()
                .map(|s| {
                    let images = super::super::random_mm::images(s);
                    assert!(images.iter().all(Image::is_planned));
                    images.iter().map(|i| i.made().unwrap()).collect()
                })
                .collect();
            assert_eq!(made, want.images);
        }
    }

    #[test]
    fn fixed_counts_and_sizes_and_blank_images_draw_no_pixels() {
        let s = ImageSettings {
            count: 2,
            resolution: Resolution::Fixed {
                width: 6,
                height: 4,
            },
            content: Content::Blank,
            ..Default::default()
        };
        let c = cfg(s, 3, 1);
        let samples = load(&c, Making::UpFront).unwrap();
        assert_eq!(samples.len(), 3);
        for smp in &samples {
            let PromptSource::Multimodal { images, text } = &smp.prompt else {
                panic!("images expected")
            };
            assert_eq!(images.len(), 2);
            assert!(images.iter().all(|i| (i.width, i.height) == (6, 4)));
            assert!(images[0].url.starts_with("data:image/jpeg;base64,"));
            assert!(
                matches!(**text, PromptSource::Synthetic { len, .. } if len as u64 == smp.prompt_len)
            );
        }
        // Only the lengths were drawn (each one or more words, by numpy's rejection).
        let mut np = RandomState::new(1);
        for _ in 0..3 {
            np.randint(10, 21);
        }
        for _ in 0..3 {
            np.randint(2, 6);
        }
        assert_eq!(numpy_words(&c), np.words());
    }

    #[test]
    fn refused_settings_say_why() {
        let zero = ImageSettings {
            count: 0,
            ..Default::default()
        };
        let e = load(&cfg(zero, 2, 0), Making::UpFront)
            .unwrap_err()
            .to_string();
        assert!(e.contains("--image-count must be at least 1"), "{e}");
        let huge = ImageSettings {
            resolution: Resolution::Fixed {
                width: 70_000,
                height: 2,
            },
            ..Default::default()
        };
        let e = load(&cfg(huge, 2, 0), Making::UpFront)
            .unwrap_err()
            .to_string();
        assert!(e.contains("at most 65535"), "{e}");
    }
}
