//! `/metrics` in Prometheus text format with vLLM's metric names and labels
//! (`model_name`, `engine="0"`). Formatting only; the numbers come from the engine.

use super::config::MockConfig;
use super::engine::EngineStats;
use std::fmt::Write;

/// Render the exposition text.
pub fn render(cfg: &MockConfig, s: &EngineStats) -> String {
    let labels = format!(
        "engine=\"0\",model_name=\"{}\"",
        cfg.model.replace('\\', "\\\\").replace('"', "\\\"")
    );
    let mut o = String::with_capacity(2048);
    cache_config(&mut o, cfg, s);
    gauges(&mut o, &labels, s);
    counters(&mut o, &labels, s);
    queue_time(&mut o, &labels, s);
    if !cfg.spec_decode_acceptance.is_empty() {
        spec_decode(
            &mut o,
            &labels,
            &cfg.spec_decode_acceptance,
            s.generation_tokens_total,
        );
    }
    o
}

/// `vllm:cache_config_info`: the KV cache's size and block size in its labels.
fn cache_config(o: &mut String, cfg: &MockConfig, s: &EngineStats) {
    let e = &cfg.engine;
    let kv_tokens = s.num_blocks as u64 * e.block_size as u64;
    let _ = writeln!(
        o,
        "# HELP vllm:cache_config_info Information of the LLMEngine CacheConfig"
    );
    let _ = writeln!(o, "# TYPE vllm:cache_config_info gauge");
    let _ = writeln!(
        o,
        "vllm:cache_config_info{{block_size=\"{}\",cache_dtype=\"auto\",enable_prefix_caching=\"True\",engine=\"0\",gpu_memory_utilization=\"0.9\",kv_cache_max_concurrency=\"{:.2}\",kv_cache_size_tokens=\"{}\",num_cpu_blocks=\"0\",num_gpu_blocks=\"{}\",prefix_caching_hash_algo=\"builtin\"}} 1.0",
        e.block_size,
        kv_tokens as f64 / cfg.max_model_len as f64,
        kv_tokens,
        s.num_blocks
    );
}

/// Running and waiting requests and the KV cache's use.
fn gauges(o: &mut String, labels: &str, s: &EngineStats) {
    let gauges = [
        (
            "vllm:num_requests_running",
            "Number of requests in model execution batches.",
            s.running as f64,
        ),
        (
            "vllm:num_requests_waiting",
            "Number of requests waiting to be processed.",
            s.waiting as f64,
        ),
        (
            "vllm:kv_cache_usage_perc",
            "KV-cache usage. 1 means 100 percent usage.",
            s.kv_usage(),
        ),
    ];
    for (name, help, v) in gauges {
        let _ = writeln!(
            o,
            "# HELP {name} {help}\n# TYPE {name} gauge\n{name}{{{labels}}} {v:?}"
        );
    }
}

/// Preemptions, tokens, prefix-cache lookups and finished requests so far.
fn counters(o: &mut String, labels: &str, s: &EngineStats) {
    let counters = [
        (
            "vllm:num_preemptions_total",
            "Cumulative number of preemption from the engine.",
            s.preemptions_total,
        ),
        (
            "vllm:prompt_tokens_total",
            "Number of prefill tokens processed.",
            s.prompt_tokens_total,
        ),
        (
            "vllm:generation_tokens_total",
            "Number of generation tokens processed.",
            s.generation_tokens_total,
        ),
        (
            "vllm:prefix_cache_queries_total",
            "Prefix cache queries, in terms of number of queried tokens.",
            s.prefix_cache_queries_total,
        ),
        (
            "vllm:prefix_cache_hits_total",
            "Prefix cache hits, in terms of number of cached tokens.",
            s.prefix_cache_hits_total,
        ),
        (
            "vllm:request_success_total",
            "Count of successfully processed requests.",
            s.finished_total,
        ),
    ];
    for (name, help, v) in counters {
        let _ = writeln!(
            o,
            "# HELP {name} {help}\n# TYPE {name} counter\n{name}{{{labels}}} {:?}",
            v as f64
        );
    }
}

/// vLLM's histogram of the time requests spent waiting before their first step; the mock keeps
/// no buckets, so it writes the sum, the count and the one bucket that holds them all.
fn queue_time(o: &mut String, labels: &str, s: &EngineStats) {
    let name = "vllm:request_queue_time_seconds";
    let _ = writeln!(
        o,
        "# HELP {name} Seconds each request waited before the step that admitted it.\n# TYPE {name} histogram\n\
         {name}_sum{{{labels}}} {:?}\n{name}_bucket{{{labels},le=\"+Inf\"}} {:?}\n{name}_count{{{labels}}} {:?}",
        s.queue_time_ns_total as f64 / 1e9,
        s.admitted_total as f64,
        s.admitted_total as f64
    );
}

/// The fake speculative-decoding counters (see [`MockConfig::spec_decode_acceptance`]).
fn spec_decode(o: &mut String, labels: &str, rates: &[f64], generated: u64) {
    let drafts = generated;
    let per: Vec<u64> = rates
        .iter()
        .map(|r| (drafts as f64 * r.clamp(0.0, 1.0)).floor() as u64)
        .collect();
    for (name, v) in [
        ("vllm:spec_decode_num_drafts", drafts),
        (
            "vllm:spec_decode_num_draft_tokens",
            drafts * rates.len() as u64,
        ),
        ("vllm:spec_decode_num_accepted_tokens", per.iter().sum()),
    ] {
        let _ = writeln!(
            o,
            "# TYPE {name} counter\n{name}_total{{{labels}}} {:?}",
            v as f64
        );
    }
    let name = "vllm:spec_decode_num_accepted_tokens_per_pos";
    let _ = writeln!(o, "# TYPE {name} counter");
    for (i, v) in per.iter().enumerate() {
        let _ = writeln!(
            o,
            "{name}_total{{{labels},position=\"{i}\"}} {:?}",
            *v as f64
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mock::config::Profile;

    #[test]
    fn seed_profile_reports_vllm_names() {
        let cfg = MockConfig::profile(Profile::Seed);
        let stats = EngineStats {
            running: 2,
            waiting: 3,
            used_blocks: 10,
            num_blocks: cfg.engine.num_blocks(),
            prompt_tokens_total: 7,
            admitted_total: 4,
            queue_time_ns_total: 1_500_000_000,
            ..EngineStats::default()
        };
        let text = render(&cfg, &stats);
        assert!(text.contains("kv_cache_size_tokens=\"1835008\""), "{text}");
        assert!(text.contains("num_gpu_blocks=\"114688\""));
        assert!(
            text.contains("vllm:num_requests_waiting{engine=\"0\",model_name=\"mock-model\"} 3.0")
        );
        assert!(
            text.contains("vllm:prompt_tokens_total{engine=\"0\",model_name=\"mock-model\"} 7.0")
        );
        assert!(text.contains("kv_cache_max_concurrency=\"7.00\""));
        for line in [
            "vllm:request_queue_time_seconds_sum{engine=\"0\",model_name=\"mock-model\"} 1.5",
            "vllm:request_queue_time_seconds_count{engine=\"0\",model_name=\"mock-model\"} 4.0",
        ] {
            assert!(text.lines().any(|l| l == line), "{line} in {text}");
        }
        // Well-formed: the whole page parses.
        crate::proto::prometheus::parse(&text).unwrap();
    }
}
