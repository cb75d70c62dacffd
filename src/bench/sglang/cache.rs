//! `--cache-report`: SGLang 0.5.23's cache hit statistics (`sglang/benchmark/serving.py`, the
//! `args.cache_report` branches), from what each request's stream said.
//!
//! What SGLang reads per request: the native reader takes `meta_info.cached_tokens` of the last
//! event (0 when absent) and `meta_info.cached_tokens_details`; the `sglang-oai` readers ask for
//! `return_cached_tokens_details` and read only the `sglext.cached_tokens_details` extension;
//! other backends get a warning and zeros. Each request's prompt length is the server's
//! `prompt_tokens` when it reported a non-zero one (SGLang's `_record_server_prompt_len`), else
//! the dataset's. The run's figures are over successful requests: the prompt and cached totals
//! and the hit rate `cached / prompt * 100` (0 without prompt tokens).
//!
//! llmspeed reads the native `cached_tokens` count; the per-tier breakdown
//! (`cached_tokens_details`: device, host, storage) is not read, so its keys are `null` and its
//! console lines absent, as SGLang writes them for a server that sends no breakdown. Pure:
//! `run` gathers the per-request counts, `console` and `record` write the figures.

/// Whether `--cache-report` can be honoured with `backend`: the `sglang-oai` backends carry the
/// counts only in SGLang's `sglext` extension, which llmspeed's stream reader does not parse.
pub fn check_backend(backend: &str) -> Result<(), String> {
    match backend {
        "sglang-oai" | "sglang-oai-chat" => Err(format!(
            "--cache-report with --backend {backend}: SGLang reads the cached-token counts from \
             its sglext response extension there, which llmspeed does not parse yet; use \
             --backend sglang (the native /generate stream carries meta_info.cached_tokens)"
        )),
        _ => Ok(()),
    }
}

/// The backends whose streams carry cached-token counts (SGLang's list); any other gets
/// [`WARNING`] and zeros.
pub fn reads_counts(backend: &str) -> bool {
    matches!(backend, "sglang" | "sglang-native")
}

/// What SGLang prints for a backend outside its list (and still reports).
pub const WARNING: &str = "WARNING: --cache-report is only supported with sglang backends.";

/// One request's counts.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Request {
    pub success: bool,
    /// The server's `prompt_tokens` when non-zero, else the dataset's length.
    pub prompt_len: u64,
    /// `meta_info.cached_tokens` of the last event (0 when absent or not read).
    pub cached: u64,
}

/// SGLang's cache report of a run.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct CacheReport {
    pub total_prompt_tokens: u64,
    pub total_cached_tokens: u64,
    /// `cached / prompt * 100`, 0 without prompt tokens.
    pub hit_rate_pct: f64,
    /// Per request (failures included), for `--output-details`' `cached_tokens`.
    pub per_request: Vec<u64>,
}

/// The report over `requests` (every request that ran, in order).
pub fn compute(requests: &[Request]) -> CacheReport {
    let ok = requests.iter().filter(|r| r.success);
    let total_prompt_tokens: u64 = ok.clone().map(|r| r.prompt_len).sum();
    let total_cached_tokens: u64 = ok.map(|r| r.cached).sum();
    let hit_rate_pct = if total_prompt_tokens > 0 {
        total_cached_tokens as f64 / total_prompt_tokens as f64 * 100.0
    } else {
        0.0
    };
    CacheReport {
        total_prompt_tokens,
        total_cached_tokens,
        hit_rate_pct,
        per_request: requests.iter().map(|r| r.cached).collect(),
    }
}

/// Python's `round(x, 2)` for the record (the nearest of the two-decimal values; Rust's
/// formatting rounds the exact binary value, as Python's `round` does).
pub fn round2(x: f64) -> f64 {
    format!("{x:.2}").parse().unwrap_or(x)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn totals_and_the_rate_are_over_successful_requests() {
        let r = |success, prompt_len, cached| Request {
            success,
            prompt_len,
            cached,
        };
        let c = compute(&[r(true, 100, 30), r(true, 60, 0), r(false, 999, 999)]);
        assert_eq!((c.total_prompt_tokens, c.total_cached_tokens), (160, 30));
        assert_eq!(c.hit_rate_pct, 18.75);
        assert_eq!(c.per_request, vec![30, 0, 999]);
        assert_eq!(compute(&[r(false, 5, 5)]).hit_rate_pct, 0.0);
        assert_eq!(round2(100.0 / 3.0), 33.33);
        assert_eq!(
            round2(2.675),
            2.67,
            "2.675 is 2.67499... in binary, as Python rounds it"
        );
    }

    #[test]
    fn the_oai_backends_are_refused_and_only_native_ones_read_counts() {
        assert!(check_backend("sglang-oai")
            .unwrap_err()
            .starts_with("--cache-report with --backend sglang-oai: "));
        assert!(check_backend("sglang-oai-chat").is_err());
        for ok in ["sglang", "sglang-native", "vllm", "vllm-chat", "lmdeploy"] {
            assert_eq!(check_backend(ok), Ok(()), "{ok}");
        }
        assert!(reads_counts("sglang") && reads_counts("sglang-native"));
        assert!(!reads_counts("vllm"));
    }
}
