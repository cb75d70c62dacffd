//! One request's worth of dataset ([`Sample`]) and what its prompt is ([`PromptSource`]):
//! text, or token ids that are pure functions of a few numbers (a synthetic run, or a trace's
//! hash-id blocks), written out only when sent. Shared by every dataset (`datasets`) and by
//! the trace reader (`trace`), with [`DatasetError`], which both return. Pure: no IO, no clock.

use std::sync::Arc;

/// First id of the range random prompts draw from: past special and byte tokens.
pub const VOCAB_LO: u32 = 1000;
/// Size of that range (ids `1000..8000`): ordinary pieces in every common tokenizer, and inside
/// the simulated server's small vocabulary (8460 ids).
pub const VOCAB_SPAN: u32 = 7_000;

/// The token ids random prompts draw from: `lo..lo + span`. [`IdRange::DEFAULT`] fits every
/// common tokenizer; a server with a smaller vocabulary gets a range inside it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct IdRange {
    pub lo: u32,
    pub span: u32,
}

impl IdRange {
    pub const DEFAULT: IdRange = IdRange {
        lo: VOCAB_LO,
        span: VOCAB_SPAN,
    };

    /// `None` for an empty range.
    pub fn from_range(r: std::ops::Range<u32>) -> Option<IdRange> {
        (r.end > r.start).then(|| IdRange {
            lo: r.start,
            span: r.end - r.start,
        })
    }

    /// One past the highest id.
    pub fn end(self) -> u32 {
        self.lo + self.span
    }
}

/// What a prompt is.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PromptSource {
    /// Text, sent as is (completions `prompt` or the chat user message).
    Text(String),
    /// Token ids `prefix ++ [(ids.lo + (start + j) % ids.span) for j in 0..len]`.
    Synthetic {
        prefix: Arc<[u32]>,
        start: u32,
        len: u32,
        ids: IdRange,
    },
    /// A whole chat request (SGLang's `openai` dataset): its `messages` list, sent as it is,
    /// and the row's other fields (`tools`, `temperature` ...), sent with it over the run's own.
    Chat {
        messages: Arc<serde_json::Value>,
        extra: Arc<serde_json::Map<String, serde_json::Value>>,
    },
    /// A multi-turn row (SGLang's `--gsp-num-turns`): each turn's user message, sent one
    /// round after another with the answers between (`bench::engine::rounds`); the first turn
    /// is what `prompt_len` counts.
    Turns(Arc<[String]>),
    /// A trace's prompt (`timed_trace`): `len` token ids, block `k` built from `hash_ids[k]`
    /// (`block` tokens each), the rest unique to the request (see [`crate::workload::trace`]);
    /// `rounds` times, with `answer` placeholder tokens between each two (a session's round,
    /// [`crate::workload::trace::TraceConfig::rounds`]; 1 round: the prompt alone).
    Blocks {
        hash_ids: Arc<[u64]>,
        block: u32,
        len: u32,
        tail_seed: u64,
        ids: IdRange,
        rounds: u32,
        answer: u32,
    },
    /// A prompt with images (`random-mm`): its text part (any of the above, sent first as a
    /// `text` part) and its images, each an `image_url` part after it. Made before the run; a
    /// request copies the finished data URLs.
    Multimodal {
        text: Box<PromptSource>,
        images: Arc<[crate::workload::image::Image]>,
    },
}

impl PromptSource {
    /// Replaces the text part (a token-id prompt fitted to text) and keeps the images.
    pub fn set_text(&mut self, t: String) {
        match self {
            PromptSource::Multimodal { text, .. } => **text = PromptSource::Text(t),
            _ => *self = PromptSource::Text(t),
        }
    }

    /// The prompt without its images.
    pub fn text_part(&self) -> &PromptSource {
        match self {
            PromptSource::Multimodal { text, .. } => text,
            other => other,
        }
    }
}

/// One request's worth of dataset.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Sample {
    pub prompt: PromptSource,
    /// Prompt length in tokens (exact for token-id prompts, the counter's figure for text).
    pub prompt_len: u64,
    /// Output tokens to ask for (`max_tokens`).
    pub output_len: u32,
    /// The shared prefix's group it was built from (`prefix_repetition`, SGLang's
    /// generated-shared-prefix), `None` for other datasets: SGLang's `--gsp-send-routing-key`
    /// names it in a header.
    pub group: Option<u32>,
}

impl Sample {
    /// Appends the prompt's token ids to `out` (empty for text prompts); returns whether it
    /// was a token-id prompt.
    pub fn write_ids(&self, out: &mut Vec<u32>) -> bool {
        match self.prompt.text_part() {
            PromptSource::Multimodal { .. }
            | PromptSource::Text(_)
            | PromptSource::Chat { .. }
            | PromptSource::Turns(_) => false,
            PromptSource::Synthetic {
                prefix,
                start,
                len,
                ids,
            } => {
                out.reserve(prefix.len() + *len as usize);
                out.extend_from_slice(prefix);
                let mut id = start % ids.span;
                for _ in 0..*len {
                    out.push(ids.lo + id);
                    id += 1;
                    if id == ids.span {
                        id = 0;
                    }
                }
                true
            }
            PromptSource::Blocks {
                hash_ids,
                block,
                len,
                tail_seed,
                ids,
                rounds,
                answer,
            } => {
                for round in 0..*rounds {
                    if round > 0 {
                        // The placeholder answer: one token repeated (SGLang's "story story …").
                        out.extend(std::iter::repeat_n(ids.lo, *answer as usize));
                    }
                    write_block_ids(hash_ids, *block, *len, *tail_seed, *ids, out);
                }
                true
            }
        }
    }
}

/// A dataset that cannot be built, with a one-line reason.
#[derive(Debug, thiserror::Error)]
pub enum DatasetError {
    #[error("--dataset-name {0} needs --dataset-path")]
    NoPath(&'static str),
    #[error("cannot read {path}: {err}")]
    Read { path: String, err: std::io::Error },
    #[error("{path}: {msg}")]
    Format { path: String, msg: String },
    #[error("{0}")]
    Invalid(String),
    #[error("counting tokens failed: {0}")]
    Count(String),
}

/// splitmix64's finaliser: a well-mixed 64-bit function of `x`.
fn mix(mut x: u64) -> u64 {
    x = (x ^ (x >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    x ^ (x >> 31)
}

/// Token `j` of the block named `key`. Each token is hashed on its own (not an arithmetic run
/// from a per-block start) so that two different blocks agree on no run of tokens, which a
/// server's block-hash prefix cache would otherwise count as shared.
#[inline]
pub fn block_token(key: u64, j: u32, ids: IdRange) -> u32 {
    ids.lo + (mix(key ^ mix(j as u64 + 1)) % ids.span as u64) as u32
}

/// Appends a blocks prompt's tokens to `out`: `len` tokens, block `k` from `hash_ids[k]`, the
/// rest from `tail_seed`.
pub fn write_block_ids(
    hash_ids: &[u64],
    block: u32,
    len: u32,
    tail_seed: u64,
    ids: IdRange,
    out: &mut Vec<u32>,
) {
    out.reserve(len as usize);
    let mut left = len;
    for &h in hash_ids {
        if left == 0 {
            return;
        }
        // Hash ids and the unshared tail live in different key spaces (the top bit).
        let key = mix(h) & !(1 << 63);
        let n = left.min(block);
        out.extend((0..n).map(|j| block_token(key, j, ids)));
        left -= n;
    }
    let key = mix(tail_seed) | (1 << 63);
    out.extend((0..left).map(|j| block_token(key, j, ids)));
}
