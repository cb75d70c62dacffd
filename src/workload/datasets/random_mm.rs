//! vLLM 0.33's `random-mm` dataset: `random`'s text prompts, each with a number of synthetic
//! images drawn as vLLM's `RandomMultiModalDataset` draws them.
//!
//! Owns the four `--random-mm-*` settings ([`MmSettings`], with the parsers of the two that
//! are Python and JSON literals), the draw of each request's item count and image sizes for a
//! seed ([`ItemDraw`]), and the samples ([`load`]). For a seed the draw is vLLM's own, number
//! for number: after `random`'s lengths and offsets (the same `default_rng(seed)`), request by
//! request, the item count `integers(min, max + 1)`, then for each item a bucket `choice` and
//! the image's pixels `integers(0, 256, (H, W, 3), uint8)` from the same generator. The pixels
//! are vLLM's bytes too; the JPEG around them is llmspeed's encoder (`workload::image`), so only
//! the encoded size differs.
//!
//! Pure: no IO, no clock. The images are made and encoded here, while the dataset loads, or
//! (`Making::Planned`) only their recipes drawn, made during the run.

use crate::workload::datasets::{self, DatasetConfig, DatasetError, PromptSource, Sample};
use crate::workload::image::{Fill, Format, Image, ImageNeed, Making, Pixels, Recipe, MAX_SIDE};
use crate::workload::numpy::Generator;

/// A modality of a bucket (`(H, W, frames)`: 1 frame an image, more a video) or a limit.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Modality {
    Image,
    Video,
}

impl Modality {
    pub fn as_str(self) -> &'static str {
        match self {
            Modality::Image => "image",
            Modality::Video => "video",
        }
    }
}

/// One `(height, width, frames): probability` entry of `--random-mm-bucket-config`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Bucket {
    pub height: u32,
    pub width: u32,
    pub frames: u32,
    pub p: f64,
}

impl Bucket {
    pub fn modality(&self) -> Modality {
        if self.frames == 1 {
            Modality::Image
        } else {
            Modality::Video
        }
    }
}

/// `--random-mm-limit-mm-per-prompt`: the most items of each modality in one request (`None`:
/// not named, which vLLM refuses for a modality the buckets use).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    pub image: Option<u32>,
    pub video: Option<u32>,
}

impl Limits {
    fn get(&self, m: Modality) -> Option<u32> {
        match m {
            Modality::Image => self.image,
            Modality::Video => self.video,
        }
    }
}

/// The `random-mm` flags, with vLLM 0.33's defaults.
#[derive(Clone, Debug, PartialEq)]
pub struct MmSettings {
    /// `--random-mm-base-items-per-request` n.
    pub base_items: u32,
    /// `--random-mm-num-mm-items-range-ratio` r: the count is drawn from
    /// `[floor(n(1-r)), ceil(n(1+r))]`.
    pub items_range_ratio: f64,
    pub limits: Limits,
    /// `--random-mm-bucket-config`, in the order written (a repeated key keeps its first place
    /// and its last value, as a Python dict does).
    pub buckets: Vec<Bucket>,
    /// What the pixels are (vLLM's: noise).
    pub fill: Fill,
}

impl Default for MmSettings {
    fn default() -> Self {
        let b = |height, width, frames, p| Bucket {
            height,
            width,
            frames,
            p,
        };
        MmSettings {
            base_items: 1,
            items_range_ratio: 0.0,
            limits: Limits {
                image: Some(255),
                video: Some(1),
            },
            buckets: vec![
                b(256, 256, 1, 0.5),
                b(720, 1280, 1, 0.5),
                b(720, 1280, 16, 0.0),
            ],
            fill: Fill::Noise,
        }
    }
}

/// What llmspeed does not send: video (its buckets may stay in the config at probability 0,
/// or with a limit of 0, as they never produce an item then).
const NO_VIDEO: &str = "llmspeed sends no video yet: give video buckets probability 0 (or a \
                        video limit of 0 in --random-mm-limit-mm-per-prompt)";

/// The checked draw: the item count's bounds, the buckets with a share above zero (their
/// shares summing to 1) and each modality's cap. vLLM's `get_mm_item_sampling_params`.
#[derive(Clone, Debug, PartialEq)]
pub struct ItemDraw {
    pub min: u32,
    pub max: u32,
    pub buckets: Vec<Bucket>,
    pub limits: Limits,
}

impl ItemDraw {
    /// Checks the settings as vLLM does, with its messages' sense, and refuses video.
    pub fn new(s: &MmSettings) -> Result<ItemDraw, String> {
        let r = s.items_range_ratio;
        if !(0.0..=1.0).contains(&r) {
            return Err(format!(
                "--random-mm-num-mm-items-range-ratio must be in [0, 1], got {r}"
            ));
        }
        for b in &s.buckets {
            if s.limits.get(b.modality()).is_none() {
                return Err(format!(
                    "--random-mm-bucket-config has {} bucket ({}, {}, {}), but \
                     --random-mm-limit-mm-per-prompt gives no {} limit",
                    b.modality().as_str(),
                    b.height,
                    b.width,
                    b.frames,
                    b.modality().as_str()
                ));
            }
        }
        let buckets = normalise(&s.buckets)?;
        // Only the limits of modalities the buckets still use count towards the maximum.
        let used = |m: Modality| buckets.iter().any(|b| b.modality() == m);
        let limits = Limits {
            image: s.limits.image.filter(|_| used(Modality::Image)),
            video: s.limits.video.filter(|_| used(Modality::Video)),
        };
        if buckets
            .iter()
            .any(|b| b.modality() == Modality::Video && limits.video != Some(0))
        {
            return Err(NO_VIDEO.into());
        }
        let n = s.base_items as f64;
        let cap = limits.image.unwrap_or(0) as u64 + limits.video.unwrap_or(0) as u64;
        let max = ((n * (1.0 + r)).ceil() as u64).min(cap) as u32;
        let min = (n * (1.0 - r)).floor().max(0.0) as u32;
        if min > max {
            return Err(format!(
                "the fewest items a request may draw ({min}) is above the most \
                 ({max}, capped by --random-mm-limit-mm-per-prompt)"
            ));
        }
        Ok(ItemDraw {
            min,
            max,
            buckets,
            limits,
        })
    }

    /// One request's items, drawn from `g` as vLLM's `get_mm_item_iterator` draws them: the
    /// count, then per item a bucket, whose image `make` draws from `g` in turn (vLLM draws
    /// each image's pixels before the next bucket). A modality at its cap leaves the draw (its
    /// buckets dropped, the rest renormalised), costing the pick that found it full.
    pub fn request<T>(
        &self,
        g: &mut Generator,
        mut make: impl FnMut(&mut Generator, &Bucket) -> Result<T, String>,
    ) -> Result<Vec<T>, String> {
        let count = g.integers(self.min as i64, self.max as i64 + 1) as u32;
        let mut items = Vec::with_capacity(count as usize);
        let mut left = self.buckets.clone();
        let (mut images, mut videos) = (0u32, 0u32);
        while images + videos < count {
            let p: Vec<f64> = left.iter().map(|b| b.p).collect();
            let pick = left[g.choice_weighted(&p, 1)[0]];
            let m = pick.modality();
            let (had, cap) = match m {
                Modality::Image => (&mut images, self.limits.image),
                Modality::Video => (&mut videos, self.limits.video),
            };
            if *had < cap.unwrap_or(0) {
                *had += 1;
                items.push(make(g, &pick)?);
                continue;
            }
            left.retain(|b| b.modality() != m);
            if left.is_empty() {
                break;
            }
            left = normalise(&left)?;
        }
        Ok(items)
    }
}

/// vLLM's `normalize_bucket_config`: no share below zero, the zero ones dropped, the rest
/// divided by their (Python, left to right) sum.
fn normalise(buckets: &[Bucket]) -> Result<Vec<Bucket>, String> {
    if let Some(b) = buckets.iter().find(|b| b.p < 0.0) {
        return Err(format!(
            "--random-mm-bucket-config: bucket ({}, {}, {}) has a negative probability {}",
            b.height, b.width, b.frames, b.p
        ));
    }
    let kept: Vec<Bucket> = buckets.iter().copied().filter(|b| b.p > 0.0).collect();
    if kept.is_empty() {
        return Err("--random-mm-bucket-config: every probability is zero".into());
    }
    let total: f64 = kept.iter().map(|b| b.p).fold(0.0, |a, p| a + p);
    Ok(kept
        .into_iter()
        .map(|b| Bucket {
            p: b.p / total,
            ..b
        })
        .collect())
}

/// The `random-mm` dataset: `random`'s prompts (its lengths vLLM's, sent as text on the chat
/// endpoint), each with its images. For a seed, each request's image count and sizes are the
/// ones vLLM draws, where its text draws took no extra words (vLLM draws more when its
/// tokenizer's decode and re-encode of a prompt comes out short).
pub fn load(
    cfg: &DatasetConfig,
    mm: &MmSettings,
    making: Making,
) -> Result<Vec<Sample>, DatasetError> {
    let fill = mm.fill;
    // The draw runs in vLLM's order on one thread, each image's pixels jumped over (PCG64
    // jumps in O(log n)) after a copy of the generator is taken where they begin: each image's
    // recipe. Up front, the images are made from those recipes on every core; planned, the
    // samples carry the recipes and the engine's producer makes them during the run.
    let planned = making == Making::Planned;
    let make = |r: Recipe| r.make();
    let (drawn, made) = crate::workload::image::make_in_parallel(&make, |submit| {
        draw(cfg, mm, |g, b| {
            check_size(b)?;
            let r = recipe(g.clone(), b, fill);
            g.skip_u8(b.width as usize * b.height as usize * 3);
            match planned {
                true => Ok(Some(Image::planned(r))),
                false => {
                    submit(r);
                    Ok(None)
                }
            }
        })
    });
    let (texts, items) = drawn?;
    let mut made = made.into_iter();
    texts
        .into_iter()
        .zip(items)
        .map(|(s, items)| {
            let images = match planned {
                true => items.into_iter().flatten().collect(),
                false => made
                    .by_ref()
                    .take(items.len())
                    .collect::<Result<Vec<Image>, String>>()
                    .map_err(DatasetError::Invalid)?,
            };
            Ok(Sample {
                prompt: PromptSource::Multimodal {
                    text: Box::new(s.prompt),
                    images: images.into(),
                },
                ..s
            })
        })
        .collect()
}

/// The recipe of one image of bucket `b` whose pixels begin at `g`: noise drawn from it, or
/// black; a JPEG at vLLM's quality.
fn recipe(g: Generator, b: &Bucket, fill: Fill) -> Recipe {
    Recipe {
        width: b.width,
        height: b.height,
        format: Format::Jpeg,
        quality: crate::workload::image::JPEG_QUALITY,
        pixels: match fill {
            Fill::Noise => Pixels::Bytes(g),
            Fill::Blank => Pixels::Solid(0),
        },
    }
}

/// About how many bytes the data URLs of [`load`]'s images will hold
/// ([`crate::workload::image::url_bytes_estimate`] of each), before any is made: the draw
/// itself with every image's pixels jumped over, so the sizes and counts are the ones `load`
/// makes.
pub fn url_bytes_estimate(cfg: &DatasetConfig, mm: &MmSettings) -> Result<u64, DatasetError> {
    Ok(url_bytes_need(cfg, mm)?.total)
}

/// [`url_bytes_estimate`] in total and for the request that needs the most.
pub fn url_bytes_need(cfg: &DatasetConfig, mm: &MmSettings) -> Result<ImageNeed, DatasetError> {
    let (_, items) = draw(cfg, mm, |g, b| {
        check_size(b)?;
        let pixels = b.width as u64 * b.height as u64;
        g.skip_u8(pixels as usize * 3);
        Ok(crate::workload::image::url_bytes_estimate(
            crate::workload::image::Format::Jpeg,
            crate::workload::image::JPEG_QUALITY,
            mm.fill,
            pixels,
        ))
    })?;
    Ok(ImageNeed::of(items.iter().map(|r| r.iter().sum())))
}

/// `random`'s samples and each one's items, `make` turning a drawn bucket into an item (it
/// draws the pixels from the generator it is given), in vLLM's order.
pub fn draw<T>(
    cfg: &DatasetConfig,
    mm: &MmSettings,
    mut make: impl FnMut(&mut Generator, &Bucket) -> Result<T, String>,
) -> Result<(Vec<Sample>, Vec<Vec<T>>), DatasetError> {
    let plan = ItemDraw::new(mm).map_err(DatasetError::Invalid)?;
    let (texts, g) = datasets::random_then(cfg)?;
    let mut g = g.ok_or_else(|| {
        DatasetError::Invalid("random-mm draws its lengths as vLLM's random does".into())
    })?;
    // vLLM's shared prefix is drawn after the offsets, from the same generator.
    for _ in 0..cfg.random_prefix_len {
        g.integers(0, cfg.ids.span as i64);
    }
    let items = (0..texts.len())
        .map(|_| plan.request(&mut g, &mut make))
        .collect::<Result<Vec<_>, _>>()
        .map_err(DatasetError::Invalid)?;
    Ok((texts, items))
}

/// A bucket whose images a JPEG can hold, or an error naming it.
fn check_size(b: &Bucket) -> Result<(), String> {
    if b.width == 0 || b.height == 0 || b.width > MAX_SIDE || b.height > MAX_SIDE {
        return Err(format!(
            "--random-mm-bucket-config: an image of {}x{} (height x width) cannot be sent \
             (each side 1 to {MAX_SIDE})",
            b.height, b.width
        ));
    }
    Ok(())
}

/// The images a sample carries (none for a text prompt).
pub fn images(s: &Sample) -> &[Image] {
    match &s.prompt {
        PromptSource::Multimodal { images, .. } => images,
        _ => &[],
    }
}

/// Parses `--random-mm-bucket-config`: a Python dict literal of `(H, W, F): p` entries, a key
/// also given as a string holding that tuple (vLLM reads both with `ast.literal_eval`), each
/// `p` a number (`True`/`False` read as 1 and 0, as Python's `float` does).
pub fn parse_buckets(s: &str) -> Result<Vec<Bucket>, String> {
    let err = |m: String| format!("--random-mm-bucket-config {s:?}: {m}");
    let mut p = Lit::new(s);
    p.expect(b'{').map_err(err)?;
    let mut out: Vec<Bucket> = Vec::new();
    loop {
        if p.eat(b'}') {
            break;
        }
        let (height, width, frames) = p.key().map_err(err)?;
        p.expect(b':').map_err(err)?;
        let prob = p.number().map_err(err)?;
        match out
            .iter_mut()
            .find(|b| (b.height, b.width, b.frames) == (height, width, frames))
        {
            Some(b) => b.p = prob,
            None => out.push(Bucket {
                height,
                width,
                frames,
                p: prob,
            }),
        }
        if p.eat(b',') {
            continue;
        }
        p.expect(b'}').map_err(err)?;
        break;
    }
    if !p.at_end() {
        return Err(err(format!("unexpected text at byte {}", p.at)));
    }
    Ok(out)
}

/// Parses `--random-mm-limit-mm-per-prompt`: a JSON object of modality → count (`image`,
/// `video`; vLLM's `audio` is accepted and unused, as it has no buckets).
pub fn parse_limits(s: &str) -> Result<Limits, String> {
    let err = |m: String| format!("--random-mm-limit-mm-per-prompt {s:?}: {m}");
    let v: serde_json::Value = serde_json::from_str(s).map_err(|e| err(e.to_string()))?;
    let obj = v
        .as_object()
        .ok_or_else(|| err("expected a JSON object such as {\"image\": 3}".into()))?;
    let mut limits = Limits {
        image: None,
        video: None,
    };
    for (k, v) in obj {
        let n = v
            .as_u64()
            .and_then(|n| u32::try_from(n).ok())
            .ok_or_else(|| err(format!("{k}: expected a count of 0 or more, got {v}")))?;
        match k.as_str() {
            "image" => limits.image = Some(n),
            "video" => limits.video = Some(n),
            "audio" => {}
            _ => {
                return Err(err(format!(
                    "unknown modality {k:?} (known: image, video, audio)"
                )))
            }
        }
    }
    Ok(limits)
}

/// A cursor over a Python literal (the subset bucket configs are written in).
struct Lit<'a> {
    s: &'a [u8],
    at: usize,
}

impl<'a> Lit<'a> {
    fn new(s: &'a str) -> Self {
        Lit {
            s: s.as_bytes(),
            at: 0,
        }
    }

    fn skip_ws(&mut self) {
        while self.s.get(self.at).is_some_and(u8::is_ascii_whitespace) {
            self.at += 1;
        }
    }

    fn at_end(&mut self) -> bool {
        self.skip_ws();
        self.at == self.s.len()
    }

    fn eat(&mut self, c: u8) -> bool {
        self.skip_ws();
        let hit = self.s.get(self.at) == Some(&c);
        self.at += hit as usize;
        hit
    }

    fn expect(&mut self, c: u8) -> Result<(), String> {
        if self.eat(c) {
            return Ok(());
        }
        Err(match self.s.get(self.at) {
            Some(_) => format!("expected '{}' at byte {}", c as char, self.at),
            None => format!("expected '{}' at the end", c as char),
        })
    }

    /// `(H, W, F)`, or a quoted string holding one.
    fn key(&mut self) -> Result<(u32, u32, u32), String> {
        self.skip_ws();
        if let Some(&q @ (b'\'' | b'"')) = self.s.get(self.at) {
            let start = self.at + 1;
            let len = self.s[start..]
                .iter()
                .position(|&c| c == q)
                .ok_or("a key's string is not closed")?;
            self.at = start + len + 1;
            let inner = std::str::from_utf8(&self.s[start..start + len])
                .map_err(|_| "a key's string is not UTF-8".to_string())?;
            let mut k = Lit::new(inner);
            let t = k.tuple()?;
            if !k.at_end() {
                return Err(format!("key {inner:?} is not a tuple (H, W, T)"));
            }
            return Ok(t);
        }
        self.tuple()
    }

    fn tuple(&mut self) -> Result<(u32, u32, u32), String> {
        self.expect(b'(')
            .map_err(|e| format!("{e}: a key is a tuple (H, W, T)"))?;
        let h = self.int()?;
        self.expect(b',')?;
        let w = self.int()?;
        self.expect(b',')?;
        let f = self.int()?;
        self.eat(b',');
        self.expect(b')')
            .map_err(|e| format!("{e}: a key is a tuple of three integers (H, W, T)"))?;
        Ok((h, w, f))
    }

    /// The next run of number characters (sign, digits, '.', exponent, '_').
    fn token(&mut self) -> &'a str {
        self.skip_ws();
        let start = self.at;
        while let Some(&c) = self.s.get(self.at) {
            let ok = c.is_ascii_alphanumeric()
                || c == b'.'
                || c == b'_'
                || ((c == b'-' || c == b'+')
                    && (self.at == start || matches!(self.s[self.at - 1], b'e' | b'E')));
            if !ok {
                break;
            }
            self.at += 1;
        }
        // Only ASCII was taken, so the slice is UTF-8.
        std::str::from_utf8(&self.s[start..self.at]).unwrap_or_default()
    }

    fn int(&mut self) -> Result<u32, String> {
        let at = self.at;
        let t = self.token();
        let digits = t.replace('_', "");
        let bad = || {
            format!("expected a size or frame count (an integer 0 or more) at byte {at}, got {t:?}")
        };
        if digits.is_empty() || !digits.bytes().all(|c| c.is_ascii_digit()) || t.starts_with('_') {
            return Err(bad());
        }
        digits.parse::<u32>().map_err(|_| bad())
    }

    fn number(&mut self) -> Result<f64, String> {
        let at = self.at;
        let t = self.token();
        match t {
            "True" => return Ok(1.0),
            "False" => return Ok(0.0),
            _ => {}
        }
        let plain = t.replace('_', "");
        let ok = !plain.is_empty()
            && plain
                .bytes()
                .all(|c| c.is_ascii_digit() || matches!(c, b'.' | b'e' | b'E' | b'+' | b'-'));
        match plain.parse::<f64>() {
            Ok(v) if ok && v.is_finite() => Ok(v),
            _ => Err(format!(
                "expected a probability (a number) at byte {at}, got {t:?}"
            )),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn b(height: u32, width: u32, frames: u32, p: f64) -> Bucket {
        Bucket {
            height,
            width,
            frames,
            p,
        }
    }

    #[test]
    fn parses_vllms_example_and_its_string_keys() {
        let got = parse_buckets("{(256, 256, 1): 0.5, (720, 1280, 1): 0.4, (720, 1280, 16): 0.10}")
            .unwrap();
        assert_eq!(
            got,
            vec![
                b(256, 256, 1, 0.5),
                b(720, 1280, 1, 0.4),
                b(720, 1280, 16, 0.1)
            ]
        );
        let got =
            parse_buckets("{'(64,32,1)': 1, \"(8, 8, 1)\": 2e-1, (1_0, 4, 1,): True,}").unwrap();
        assert_eq!(
            got,
            vec![b(64, 32, 1, 1.0), b(8, 8, 1, 0.2), b(10, 4, 1, 1.0)]
        );
        // A repeated key keeps its first place and takes the last value, as a dict does.
        let got = parse_buckets("{(1,1,1): 0.1, (2,2,1): 0.2, (1,1,1): 0.7}").unwrap();
        assert_eq!(got, vec![b(1, 1, 1, 0.7), b(2, 2, 1, 0.2)]);
        assert_eq!(parse_buckets(" { } ").unwrap(), vec![]);
    }

    #[test]
    fn bucket_config_syntax_errors_say_where() {
        for (bad, says) in [
            ("", "expected '{' at the end"),
            ("[(1,1,1): 1]", "expected '{' at byte 0"),
            ("{(1,1): 1}", "expected ',' at byte 5"),
            ("{(1,1,1) 1}", "expected ':'"),
            ("{(1,1,1): x}", "expected a probability"),
            ("{(1,1,1): nan}", "expected a probability"),
            ("{(1,1,1): 1e999}", "expected a probability"),
            ("{(-1,1,1): 1}", "expected a size"),
            ("{(1.5,1,1): 1}", "expected a size"),
            ("{(1,1,1): 1} junk", "unexpected text"),
            ("{'(1,1,1) : 1}", "not closed"),
            ("{'(1,1,1) x': 1}", "not a tuple"),
            ("{1: 1}", "a key is a tuple"),
            ("{(1,1,1,1): 1}", "three integers"),
            ("{(99999999999,1,1): 1}", "expected a size"),
        ] {
            let e = parse_buckets(bad).unwrap_err();
            assert!(e.contains(says), "{bad:?}: {e}");
            assert!(e.starts_with("--random-mm-bucket-config"), "{e}");
        }
    }

    #[test]
    fn limits_parse_and_refuse_clearly() {
        assert_eq!(
            parse_limits(r#"{"image": 3, "video": 0, "audio": 2}"#).unwrap(),
            Limits {
                image: Some(3),
                video: Some(0)
            }
        );
        for (bad, says) in [
            (r#"{"image": -1}"#, "a count of 0 or more, got -1"),
            (r#"{"image": 1.5}"#, "got 1.5"),
            (r#"{"picture": 1}"#, "unknown modality \"picture\""),
            ("[1]", "a JSON object"),
            ("{image: 1}", "key must be a string"),
        ] {
            let e = parse_limits(bad).unwrap_err();
            assert!(e.contains(says), "{bad}: {e}");
        }
    }

    #[test]
    fn the_checked_draw_is_vllms_bounds() {
        let mut s = MmSettings {
            base_items: 3,
            items_range_ratio: 0.5,
            ..MmSettings::default()
        };
        let d = ItemDraw::new(&s).unwrap();
        // floor(3 * 0.5) = 1, ceil(3 * 1.5) = 5; the zero video bucket is gone, as is its limit.
        assert_eq!((d.min, d.max), (1, 5));
        assert_eq!(d.buckets, vec![b(256, 256, 1, 0.5), b(720, 1280, 1, 0.5)]);
        assert_eq!(d.limits.video, None);
        s.limits.image = Some(2);
        assert_eq!(ItemDraw::new(&s).unwrap().max, 2);
        s.base_items = 8;
        s.items_range_ratio = 0.0;
        let e = ItemDraw::new(&s).unwrap_err();
        assert!(
            e.contains("fewest items a request may draw (8) is above the most (2"),
            "{e}"
        );
    }

    #[test]
    fn the_checked_draw_refuses_what_vllm_refuses_and_video() {
        let base = MmSettings::default();
        let with = |f: &dyn Fn(&mut MmSettings)| {
            let mut s = base.clone();
            f(&mut s);
            ItemDraw::new(&s).unwrap_err()
        };
        let e = with(&|s| s.items_range_ratio = 1.5);
        assert!(e.contains("[0, 1], got 1.5"), "{e}");
        // vLLM checks every bucket's modality against the limits, a zero one too.
        let e = with(&|s| s.limits.video = None);
        assert!(
            e.contains("video bucket (720, 1280, 16)") && e.contains("no video limit"),
            "{e}"
        );
        let e = with(&|s| s.buckets.iter_mut().for_each(|b| b.p = 0.0));
        assert!(e.contains("every probability is zero"), "{e}");
        let e = with(&|s| s.buckets[0].p = -0.1);
        assert!(e.contains("negative probability -0.1"), "{e}");
        let e = with(&|s| s.buckets[2].p = 0.2);
        assert!(e.contains("no video"), "{e}");
        // A video bucket that can never be filled is vLLM's draw, and allowed.
        let mut s = base.clone();
        s.buckets[2].p = 0.2;
        s.limits.video = Some(0);
        assert!(ItemDraw::new(&s).is_ok());
    }

    /// A hand-run draw: the picks land where the cumulative shares put numpy's doubles.
    #[test]
    fn a_request_draws_count_then_bucket_then_pixels_from_one_stream() {
        let s = MmSettings {
            base_items: 2,
            items_range_ratio: 1.0,
            limits: Limits {
                image: Some(3),
                video: None,
            },
            buckets: vec![b(2, 3, 1, 0.25), b(4, 1, 1, 0.75)],
            fill: Fill::Noise,
        };
        let d = ItemDraw::new(&s).unwrap();
        assert_eq!((d.min, d.max), (0, 3));
        let mut ours = Generator::new(11);
        let mut naive = Generator::new(11);
        for _ in 0..20 {
            let got = d
                .request(&mut ours, |g, b| {
                    let mut px = vec![0; (b.height * b.width * 3) as usize];
                    g.fill_u8(&mut px);
                    Ok((b.height, b.width, px))
                })
                .unwrap();
            // The naive twin: the same calls, spelt out.
            let n = naive.integers(0, 4) as usize;
            assert_eq!(got.len(), n);
            for (h, w, px) in &got {
                let u = naive.random();
                let want = if u < 0.25 { (2, 3) } else { (4, 1) };
                assert_eq!((*h, *w), want);
                let mut twin = vec![0; px.len()];
                naive.fill_u8(&mut twin);
                assert_eq!(px, &twin);
            }
        }
    }

    /// The images made on the pool from jumped generator copies are, byte for byte, the ones
    /// one generator drawing every pixel in turn makes (the draw before images were made in
    /// parallel), for mixed sizes, a drawn count and both fills.
    #[test]
    fn parallel_images_are_the_sequential_draws_bytes() {
        for fill in [Fill::Noise, Fill::Blank] {
            let mm = MmSettings {
                base_items: 2,
                items_range_ratio: 1.0,
                limits: Limits {
                    image: Some(3),
                    video: Some(0),
                },
                buckets: vec![b(9, 13, 1, 0.3), b(16, 8, 1, 0.7), b(4, 4, 8, 0.2)],
                fill,
            };
            let cfg = DatasetConfig {
                kind: datasets::DatasetKind::RandomMm,
                num_prompts: 12,
                seed: 3,
                random_input_len: 5,
                random_output_len: 2,
                random_prefix_len: 3,
                ..Default::default()
            };
            let (_, want) = draw(&cfg, &mm, |g, b| {
                let mut px = vec![0; (b.width * b.height * 3) as usize];
                g.fill_u8(&mut px);
                if fill == Fill::Blank {
                    px.fill(0);
                }
                Image::jpeg(b.width, b.height, &px)
            })
            .unwrap();
            let got: Vec<Vec<Image>> = load(&cfg, &mm, Making::UpFront)
                .unwrap()
                .iter()
                .map(|s| images(s).to_vec())
                .collect();
            assert_eq!(got, want);
            assert!(want.iter().map(Vec::len).sum::<usize>() > 12);
            // Planned, each image is its recipe alone, and made from it the same bytes.
            let planned = load(&cfg, &mm, Making::Planned).unwrap();
            for (s, want) in planned.iter().zip(&want) {
                assert!(images(s)
                    .iter()
                    .all(|i| i.is_planned() && i.encoded_bytes == 0));
                let made: Vec<Image> = images(s).iter().map(|i| i.made().unwrap()).collect();
                assert_eq!(&made, want);
            }
        }
    }

    #[test]
    fn a_full_modality_leaves_the_draw() {
        // One image at most, two items wanted, a video bucket that can hold none: the first
        // pick that finds images full drops them, and the video bucket alone is full at once.
        let s = MmSettings {
            base_items: 1,
            items_range_ratio: 0.0,
            limits: Limits {
                image: Some(1),
                video: Some(0),
            },
            buckets: vec![b(2, 2, 1, 0.5), b(2, 2, 8, 0.5)],
            fill: Fill::Blank,
        };
        let d = ItemDraw::new(&s).unwrap();
        assert_eq!((d.min, d.max), (1, 1));
        let mut g = Generator::new(3);
        for _ in 0..10 {
            let items = d.request(&mut g, |_, b| Ok(*b)).unwrap();
            assert_eq!(items.len(), 1);
            assert_eq!(items[0].modality(), Modality::Image);
        }
    }
}
