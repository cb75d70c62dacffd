//! Prompts of an exact token count for the matrix: counting (the server's verified
//! `/tokenize` dialect, a local tokenizer, or the `usage` of a one-token request), calibration,
//! token-id prompts within the server's vocabulary, and the prompt cache.
//!
//! Owns the rule that a prompt is only used when its size was confirmed: a count of 0, a
//! count that does not grow with the text, or a size more than 1% off the target is an error
//! naming the context and the counter's answer, never a cached or a sent prompt.

use crate::matrix::config::MatrixConfig;
use crate::matrix::scout::Fresh;
use crate::net::request::{Generation, Prompt as NetPrompt};
use crate::net::{Cancel, Client, NoopObserver};
use crate::report::PromptTokens;
use crate::server::probe::token_id_range;
use crate::server::{ServerInfo, TokenizeDialect};
use crate::sys::unix_now;
use crate::workload::prompt_cache::{self, CacheKey, CachedPrompt};
use crate::workload::prose::{self, PromptBuilder, PromptKind};
use serde_json::{json, Value};

/// A prompt ready to send, and its size.
pub(super) struct Prepared {
    pub(super) generation: Generation,
    pub(super) tokens: u64,
    /// The text it was built from (`None` for token ids): what a prefill sample with another
    /// first line is counted from.
    pub(super) prose: Option<prose::Prompt>,
    /// Where the prompt came from (cache, calibration), for the progress line.
    pub(super) note: Option<String>,
    /// Of `tokens`, those its images take (`matrix --images`; 0 without): the text is
    /// `tokens - image_tokens`.
    pub(super) image_tokens: u64,
}

/// The run id a cached prompt is stored under. Never sent: a loaded prompt gets this run's id
/// (see [`prose::Prompt::replace_prefix`]).
const CACHE_RUN_ID: &str = "xxxxxxxx";

pub(super) fn mix(a: u64, b: u64) -> u64 {
    let mut x = a ^ b.wrapping_mul(0x9E37_79B9_7F4A_7C15);
    x ^= x >> 31;
    x = x.wrapping_mul(0xBF58_476D_1CE4_E5B9);
    x ^ (x >> 29)
}

/// A key from a string's bytes (a run id), for drawing others from it.
pub(super) fn key_of(s: &str) -> u64 {
    s.bytes().fold(0, |h, b| mix(h, u64::from(b)))
}

/// A run id: eight decimal digits of `key`.
pub(super) fn eight_digits(key: u64) -> String {
    format!("{:08}", key % 100_000_000)
}

/// `p` counted by the server's `/tokenize` in `dialect`. A non-2xx answer is an error with
/// the server's message; a chat prompt in a dialect with no chat form is an error too (joined
/// texts would miss the chat template).
pub(super) async fn count_tokens(
    client: &Client,
    dialect: TokenizeDialect,
    model: &str,
    p: &prose::Prompt,
) -> Result<u64, String> {
    let body = match p {
        prose::Prompt::Text(t) => dialect.text_body(model, t),
        prose::Prompt::Chat(m) => dialect.chat_body(model, m).ok_or_else(|| {
            format!(
                "the server's /tokenize ({} dialect) cannot apply the chat template; use --prompt-mode usage",
                dialect.as_str()
            )
        })?,
    };
    crate::server::probe::tokenize_count(client, dialect, &body).await
}

/// `p` counted with `--tokenizer` (synchronous: a few milliseconds for a cache check).
pub(super) fn local_count(cfg: &MatrixConfig, p: &prose::Prompt) -> Result<u64, String> {
    let tok = cfg
        .tokenizer
        .as_ref()
        .ok_or("no local tokenizer loaded (--tokenizer)")?;
    tok.count_prompt(p).map_err(|e| e.to_string())
}

/// `usage.prompt_tokens` of a one-token non-streaming request (the last-resort counter).
pub(super) async fn usage_count(client: &Client, g: &Generation) -> Result<u64, String> {
    let mut g = g.clone();
    g.max_tokens = Some(1);
    g.ignore_eos = false;
    let mut body: Value =
        serde_json::from_slice(&g.body()?).map_err(|e| format!("request body: {e}"))?;
    body["stream"] = json!(false);
    body.as_object_mut().map(|o| o.remove("stream_options"));
    let r = client
        .post_json(g.path(), body.to_string().as_bytes())
        .await
        .map_err(|e| e.to_string())?;
    if !r.is_success() {
        return Err(format!(
            "{} answered {}: {}",
            g.path(),
            r.status,
            r.error_message()
        ));
    }
    let v: Value = serde_json::from_slice(&r.body).map_err(|e| format!("usage: {e}"))?;
    v.pointer("/usage/prompt_tokens")
        .and_then(Value::as_u64)
        .ok_or_else(|| "the answer has no usage.prompt_tokens".to_string())
}

pub(super) fn chat_messages(m: &[prose::ChatMessage]) -> Value {
    Value::Array(
        m.iter()
            .map(|m| json!({"role": m.role.as_str(), "content": m.content}))
            .collect(),
    )
}

pub(super) struct Run<'a> {
    pub(super) client: &'a Client,
    pub(super) cfg: &'a MatrixConfig,
    pub(super) model: String,
    pub(super) info: &'a ServerInfo,
    pub(super) mode: PromptTokens,
    pub(super) run_id: String,
    /// Prompt tokens the images of one prompt take (`matrix --images`, measured once by
    /// [`Run::measure_image_tokens`]; 0 without images).
    pub(super) image_tokens: u64,
}

impl Run<'_> {
    fn generation(&self, p: &prose::Prompt) -> Generation {
        let mut g = match p {
            prose::Prompt::Text(t) => Generation::new(&self.model, NetPrompt::Text(t.clone())),
            prose::Prompt::Chat(m) => {
                let mut g = Generation::new(&self.model, NetPrompt::Text(String::new()));
                g.chat = true;
                // Three turns; `extra` is merged last so it replaces the single-message form.
                g.extra.insert("messages".into(), chat_messages(m));
                g
            }
        };
        g.max_tokens = Some(self.cfg.plan.max_tokens as u32);
        g.ignore_eos = self.cfg.ignore_eos;
        g
    }

    /// Build the prompt of `target` tokens for one context and seed.
    pub(super) async fn prepare(&self, target: u64, seed: u64) -> Result<Prepared, String> {
        let kind = if self.cfg.chat {
            PromptKind::Chat
        } else {
            PromptKind::Completion
        };
        match self.mode {
            PromptTokens::TokenIds => {
                let ids = prose::token_ids(
                    target as usize,
                    mix(mix(seed, target), self.run_id.len() as u64 ^ unix_now()),
                    token_id_range(self.info.vocab.map(|f| f.value)),
                )
                .map_err(|e| e.to_string())?;
                let mut g = Generation::new(&self.model, NetPrompt::TokenIds(ids));
                g.max_tokens = Some(self.cfg.plan.max_tokens as u32);
                g.ignore_eos = self.cfg.ignore_eos;
                Ok(Prepared {
                    generation: g,
                    tokens: target,
                    prose: None,
                    note: None,
                    image_tokens: 0,
                })
            }
            PromptTokens::TokenizeEndpoint
            | PromptTokens::LocalTokenizer
            | PromptTokens::UsageEstimate => match self.cfg.images {
                None => self.calibrated(target, seed, kind).await,
                Some(spec) => self.with_images(target, seed, kind, &spec).await,
            },
        }
    }

    /// A prompt of `target` tokens whose images take [`Run::image_tokens`] of them: its text
    /// calibrated to the rest, then the images of the context's decode cells (the same for
    /// every request of the row: warm), made from the run id, the context and `seed`.
    async fn with_images(
        &self,
        target: u64,
        seed: u64,
        kind: PromptKind,
        spec: &crate::matrix::images::ImageSpec,
    ) -> Result<Prepared, String> {
        let text = target
            .checked_sub(self.image_tokens)
            .filter(|&t| t > 0)
            .ok_or_else(|| {
                format!(
                    "{} images take {} prompt tokens, which leaves no text in a {target}-token context (choose a larger context, or fewer or smaller images)",
                    spec.label(),
                    self.image_tokens
                )
            })?;
        let mut p = self.calibrated(text, seed, kind).await?;
        let key = mix(mix(key_of(&self.run_id), target), mix(seed, 0x1A6E_57A7));
        let images = crate::matrix::images::make(spec, key)?;
        crate::matrix::images::attach(&mut p.generation, &images)?;
        p.tokens += self.image_tokens;
        p.image_tokens = self.image_tokens;
        Ok(p)
    }

    /// Prompt tokens `spec`'s images take in a prompt, as the server counts them: the
    /// `usage.prompt_tokens` of a short chat with the images less that of the same chat
    /// without (two one-token requests; the probe's images are its own, never sent again).
    /// An error with the server's message when it refuses the images, and when it counts
    /// none for them.
    pub(super) async fn measure_image_tokens(
        &self,
        spec: &crate::matrix::images::ImageSpec,
    ) -> Result<u64, String> {
        let mut g = Generation::new(&self.model, NetPrompt::Text(String::new()));
        g.chat = true;
        g.extra.insert(
            "messages".into(),
            json!([{"role": "user", "content": "What is in the pictures?"}]),
        );
        let without = usage_count(self.client, &g)
            .await
            .map_err(|e| format!("counting a short chat prompt: {e}"))?;
        let images = crate::matrix::images::make(spec, mix(key_of(&self.run_id), 0x9_80BE))?;
        crate::matrix::images::attach(&mut g, &images)?;
        let with = usage_count(self.client, &g).await.map_err(|e| {
            format!(
                "the server refused a prompt with {} images: {e}",
                spec.label()
            )
        })?;
        match with.checked_sub(without).filter(|&n| n > 0) {
            Some(n) => Ok(n),
            None => Err(format!(
                "the server counted {with} prompt tokens for a chat with {} images and {without} without: it counts no tokens for images (is the model a vision model?)",
                spec.label()
            )),
        }
    }

    /// The verified `/tokenize` dialect; never a guessed one.
    fn dialect(&self) -> Result<TokenizeDialect, String> {
        self.info
            .tokenize
            .map(|t| t.dialect)
            .ok_or_else(|| match &self.info.tokenize_error {
                Some(e) => format!("the server's /tokenize failed when probed: {e}"),
                None => "the server has no /tokenize dialect that counts a known text".into(),
            })
    }

    /// Count `p` the way this run counts: `/tokenize`, a local tokenizer, or the usage of a
    /// one-token request.
    async fn count(&self, p: &prose::Prompt) -> Result<u64, String> {
        match self.mode {
            PromptTokens::UsageEstimate => usage_count(self.client, &self.generation(p)).await,
            PromptTokens::LocalTokenizer => local_count(self.cfg, p),
            _ => count_tokens(self.client, self.dialect()?, &self.model, p).await,
        }
    }

    /// Whether this run counts a prompt without a prefill (`/tokenize`, a local tokenizer).
    fn counts_free(&self) -> bool {
        matches!(
            self.mode,
            PromptTokens::TokenizeEndpoint | PromptTokens::LocalTokenizer
        )
    }

    /// A run id that most ids of its width count the same as, where counting costs no prefill
    /// (else `first`): each prefill sample swaps the run id for one of its own and must keep
    /// the prompt's count ([`scout::pick_fresh`]), which an uncommon id makes rare. With the
    /// tiny model in our vLLM suite, 2,000 random eight-digit first lines counted 23, 24, 25
    /// and 26 tokens 1%, 50%, 44% and 6% of the time. Draws [`RUN_ID_DRAWS`] ids, counts their
    /// first lines and keeps the first of the most common count. A counter that fails keeps
    /// `first`; calibration then says what it answered.
    ///
    /// [`scout::pick_fresh`]: crate::matrix::scout::pick_fresh
    pub(super) async fn typical_run_id(&self, first: String, seed: u64) -> String {
        if !self.counts_free() {
            return first;
        }
        let h = key_of(&first);
        let ids: Vec<String> = std::iter::once(first.clone())
            .chain((1..RUN_ID_DRAWS as u64).map(|i| eight_digits(mix(h, i))))
            .collect();
        let mut counts = Vec::with_capacity(ids.len());
        for id in &ids {
            let line = prose::Prompt::Text(prose::prompt_prefix(id, 0, seed));
            match self.count(&line).await {
                Ok(n) => counts.push(n),
                Err(_) => return first,
            }
        }
        typical(&counts).map_or(first, |i| ids[i].clone())
    }

    /// What `prompt` counts with its first line replaced per `fresh`, where counting costs no
    /// prefill (`/tokenize`, a local tokenizer). `None` for token ids (new leading ids keep
    /// the count) and where the only counter is a one-token request, which would prefill the
    /// sample before it is measured.
    pub(super) async fn count_fresh(
        &self,
        prompt: &Prepared,
        fresh: &Fresh,
    ) -> Result<Option<u64>, String> {
        let (Fresh::FirstLine { old, new }, Some(p)) = (fresh, &prompt.prose) else {
            return Ok(None);
        };
        if !self.counts_free() {
            return Ok(None);
        }
        let mut p = p.clone();
        if !p.replace_prefix(old, new) {
            return Err(format!(
                "the prompt does not start with its first line `{old}`"
            ));
        }
        self.count(&p).await.map(|n| Some(n + prompt.image_tokens))
    }

    /// Who counts this run's prompts, for the cache key: a prompt counted by one tokenizer is
    /// never reused for another.
    fn tokenizer_identity(&self) -> String {
        match self.mode {
            PromptTokens::LocalTokenizer => format!(
                "local:{}",
                self.cfg
                    .tokenizer
                    .as_ref()
                    .map_or_else(String::new, |t| t.path().display().to_string())
            ),
            PromptTokens::UsageEstimate => {
                format!("usage {}", self.info.tokenizer_identity(&self.model))
            }
            _ => self.info.tokenizer_identity(&self.model),
        }
    }

    /// A calibrated prompt: from the cache when it holds one for this (tokenizer, model,
    /// context, seed, kind) and one count confirms its size with this run's first line, else
    /// calibrated and stored. The first line differs per run, and a tokenizer may split two run
    /// ids into different numbers of tokens; the confirming count is what keeps the size exact.
    /// Errors name the context and what the counter answered.
    async fn calibrated(
        &self,
        target: u64,
        seed: u64,
        kind: PromptKind,
    ) -> Result<Prepared, String> {
        let tokenizer = self.tokenizer_identity();
        let key = CacheKey {
            tokenizer: &tokenizer,
            model: &self.model,
            context: target,
            seed,
            kind,
        };
        let stored_prefix = prose::prompt_prefix(CACHE_RUN_ID, target, seed);
        let run_prefix = prose::prompt_prefix(&self.run_id, target, seed);
        let mut notes = Vec::new();
        if let Some(dir) = &self.cfg.prompt_cache {
            match prompt_cache::load(dir, &key) {
                Ok(Some(c)) => {
                    let mut p = c.prompt;
                    if !p.replace_prefix(&stored_prefix, &run_prefix) {
                        notes.push("cached prompt has another first line; recalibrating".into());
                    } else {
                        let n = self.count(&p).await.map_err(|e| {
                            format!("{target}-token prompt: counting the cached prompt: {e}")
                        })?;
                        if cached_prompt_fits(c.tokens, n, target) {
                            return Ok(Prepared {
                                generation: self.generation(&p),
                                tokens: n,
                                prose: Some(p),
                                note: Some(format!("{n} tokens, from the prompt cache (1 count)")),
                                image_tokens: 0,
                            });
                        }
                        notes.push(format!(
                            "cached prompt counts {n} tokens now, {} when stored; recalibrating",
                            c.tokens
                        ));
                    }
                }
                Ok(None) => {}
                Err(e) => notes.push(format!("{e}; recalibrating")),
            }
        }
        let (prompt, tokens, calls) = self
            .calibrate(target, seed, kind)
            .await
            .map_err(|e| format!("{target}-token prompt ({}): {e}", self.counter_name()))?;
        notes.push(format!("{tokens} tokens, calibrated in {calls} counts"));
        // Calibration vouches for the size; store nothing it did not confirm.
        if let Some(dir) = self
            .cfg
            .prompt_cache
            .as_ref()
            .filter(|_| within_one_percent(tokens, target))
        {
            let mut stored = prompt.clone();
            // Always true: the builder wrote `run_prefix`.
            if stored.replace_prefix(&run_prefix, &stored_prefix) {
                let cached = CachedPrompt {
                    prompt: stored,
                    tokens,
                };
                if let Err(e) = prompt_cache::store(dir, &key, &cached) {
                    notes.push(format!("not cached: {e}"));
                }
            }
        }
        Ok(Prepared {
            generation: self.generation(&prompt),
            tokens,
            prose: Some(prompt),
            note: Some(notes.join("; ")),
            image_tokens: 0,
        })
    }

    /// The counter, for messages.
    fn counter_name(&self) -> String {
        match self.mode {
            PromptTokens::LocalTokenizer => "counted with --tokenizer".into(),
            PromptTokens::UsageEstimate => "counted by usage.prompt_tokens".into(),
            _ => match self.info.tokenize {
                Some(t) => format!("counted by /tokenize, {} dialect", t.dialect.as_str()),
                None => "no verified /tokenize".into(),
            },
        }
    }

    /// Search for the prompt size; returns the prompt, its count and the counting calls.
    async fn calibrate(
        &self,
        target: u64,
        seed: u64,
        kind: PromptKind,
    ) -> Result<(prose::Prompt, u64, u32), String> {
        match self.mode {
            PromptTokens::TokenIds => Err("token-id prompts need no calibration".into()),
            PromptTokens::LocalTokenizer => {
                let tok = self
                    .cfg
                    .tokenizer
                    .clone()
                    .ok_or("no local tokenizer loaded (--tokenizer)")?;
                let run_id = self.run_id.clone();
                // Counting a long prompt locally takes tens of milliseconds per call: keep it off
                // the runtime's worker threads.
                let cal = tokio::task::spawn_blocking(move || {
                    let mut b = PromptBuilder::new(&run_id, target, seed, kind);
                    b.calibrate(target, |p| tok.count_prompt(p), 24)
                        .map_err(|e| e.to_string())
                })
                .await
                .map_err(|e| format!("calibration task: {e}"))??;
                Ok((cal.prompt, cal.tokens, cal.calls))
            }
            PromptTokens::TokenizeEndpoint => {
                let dialect = self.dialect()?;
                let handle = tokio::runtime::Handle::current();
                let client = self.client.clone();
                let model = self.model.clone();
                let run_id = self.run_id.clone();
                // Calibration is a synchronous search; run it on a blocking thread that waits
                // on the async tokenize calls.
                let cal = tokio::task::spawn_blocking(move || {
                    let mut b = PromptBuilder::new(&run_id, target, seed, kind);
                    b.calibrate(
                        target,
                        |p| handle.block_on(count_tokens(&client, dialect, &model, p)),
                        24,
                    )
                    .map_err(|e| e.to_string())
                })
                .await
                .map_err(|e| format!("calibration task: {e}"))??;
                Ok((cal.prompt, cal.tokens, cal.calls))
            }
            PromptTokens::UsageEstimate => {
                // Few calls: each one prefills the whole prompt on the server.
                let handle = tokio::runtime::Handle::current();
                let client = self.client.clone();
                let run_id = self.run_id.clone();
                let gen_of = {
                    let model = self.model.clone();
                    let max_tokens = self.cfg.plan.max_tokens as u32;
                    move |p: &prose::Prompt| {
                        let mut g = match p {
                            prose::Prompt::Text(t) => {
                                Generation::new(&model, NetPrompt::Text(t.clone()))
                            }
                            prose::Prompt::Chat(m) => {
                                let mut g = Generation::new(&model, NetPrompt::Text(String::new()));
                                g.chat = true;
                                g.extra.insert("messages".into(), chat_messages(m));
                                g
                            }
                        };
                        g.max_tokens = Some(max_tokens);
                        g
                    }
                };
                let cal = tokio::task::spawn_blocking(move || {
                    let mut b = PromptBuilder::new(&run_id, target, seed, kind);
                    b.calibrate(
                        target,
                        |p| handle.block_on(usage_count(&client, &gen_of(p))),
                        // Each call prefills the whole prompt; enough to land within 1%.
                        12,
                    )
                    .map_err(|e| e.to_string())
                })
                .await
                .map_err(|e| format!("calibration task: {e}"))??;
                Ok((cal.prompt, cal.tokens, cal.calls))
            }
        }
    }

    /// One hidden request that only warms (the prefix cache, or the server's first-request
    /// costs).
    pub(super) async fn warm(&self, g: &Generation, max_tokens: u32, stop: &Cancel) {
        let mut g = g.clone();
        g.max_tokens = Some(max_tokens);
        if let Ok(req) = g.stream_request(Some(false)) {
            let _ = self
                .client
                .stream(&req, self.client.clock().raw(), &mut NoopObserver, stop)
                .await;
        }
    }
}

/// Run ids [`Run::typical_run_id`] draws.
pub(super) const RUN_ID_DRAWS: usize = 16;

/// The index of the first of `counts` whose value is the most frequent (on a tie, the value
/// met first).
pub(super) fn typical(counts: &[u64]) -> Option<usize> {
    let freq = |n: u64| counts.iter().filter(|&&c| c == n).count();
    let mut best: Option<(usize, usize)> = None;
    for (i, &n) in counts.iter().enumerate() {
        let f = freq(n);
        if best.is_none_or(|(_, bf)| f > bf) {
            best = Some((i, f));
        }
    }
    best.map(|(i, _)| i)
}

/// Whether a cached prompt may be used: this run's count equals the stored one, and both are
/// a real size within 1% under the target (a 0-token or wrong-size file is never sent).
pub(super) fn cached_prompt_fits(stored: u64, now: u64, target: u64) -> bool {
    now == stored && within_one_percent(now, target)
}

/// `tokens` is at most `target` and at most 1% under it (and not 0).
pub(super) fn within_one_percent(tokens: u64, target: u64) -> bool {
    tokens > 0 && tokens <= target && (target - tokens) * 100 <= target
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cached_zero_or_wrong_size_prompt_is_never_used() {
        // The bug: a 0-token prompt stored as 0 and re-counted as 0 was "confirmed".
        assert!(!cached_prompt_fits(0, 0, 1024));
        // Counted differently now than when stored.
        assert!(!cached_prompt_fits(1020, 1019, 1024));
        // Stored and confirmed, but another size than the context asks for.
        assert!(!cached_prompt_fits(900, 900, 1024));
        assert!(!cached_prompt_fits(1030, 1030, 1024));
        assert!(cached_prompt_fits(1020, 1020, 1024));
        assert!(cached_prompt_fits(1024, 1024, 1024));
    }

    #[test]
    fn one_percent_boundaries() {
        assert!(within_one_percent(990, 1000));
        assert!(!within_one_percent(989, 1000));
        assert!(within_one_percent(254, 256));
        assert!(!within_one_percent(253, 256));
        assert!(!within_one_percent(0, 0));
    }

    #[test]
    fn the_typical_count_is_the_most_common_one_first_met() {
        assert_eq!(typical(&[26, 24, 25, 24, 25, 24]), Some(1));
        assert_eq!(typical(&[23, 25, 24, 24, 25]), Some(1));
        assert_eq!(typical(&[7]), Some(0));
        assert_eq!(typical(&[]), None);
    }
}
