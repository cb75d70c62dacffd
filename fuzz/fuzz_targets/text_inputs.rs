//! The text parsers added around the measurements never panic, whatever they are given: the
//! duration syntax of every duration flag, `nvidia-smi` CSV, the `/proc` and `os-release` files of
//! the machine panel, a BurstGPT CSV, `--start-at`, a shard result file read by `llmspeed merge` (both tools'), a Mooncake-style
//! trace (`--dataset-name timed_trace`), a ShareGPT file read as multi-turn conversations, a
//! ShareGPT or custom file read by SGLang's rules (and cut by its `random`) and `bench sglang --goodput`'s SLOs.
//!
//! Input layout: byte 0 picks the parser; the rest is the text (lossy UTF-8).
#![no_main]

use libfuzzer_sys::fuzz_target;
use llmspeed::bench::engine::conversation;
use llmspeed::bench::engine::shard::parse_start_at;
use llmspeed::bench::sglang::goodput;
use llmspeed::bench::sglang::merge as sglang_merge;
use llmspeed::bench::vllm::merge::ShardResult;
use llmspeed::cli::duration::{parse_secs_f64, Unit};
use llmspeed::server::gpu::parse_nvidia_csv;
use llmspeed::sys::{parse_cpuinfo, parse_mem_available, parse_meminfo, parse_os_release};
use llmspeed::workload::datasets::{self, Conversations, DatasetConfig, IdRange, RandomDraws};
use llmspeed::workload::trace::{self, TraceConfig};

fuzz_target!(|data: &[u8]| {
    let Some((&which, rest)) = data.split_first() else {
        return;
    };
    let text = String::from_utf8_lossy(rest);
    match which % 8 {
        0 => {
            for unit in [Unit::Micros, Unit::Millis, Unit::Secs] {
                // A parsed duration is a number of seconds a timer can hold.
                if let Ok(s) = parse_secs_f64(&text, unit) {
                    assert!(s.is_finite() && s >= 0.0, "{text:?} -> {s}");
                }
            }
        }
        1 => {
            if let Ok(rows) = parse_nvidia_csv(&text) {
                assert!(rows.len() <= text.lines().count());
            }
            // A BurstGPT CSV (`bench serve --dataset-name burstgpt`): what it keeps asks for
            // at least one token, a row at most per record.
            if let Ok(rows) = datasets::burstgpt_rows(&text) {
                assert!(rows.iter().all(|&(_, out)| out > 0));
                assert!(rows.len() <= text.bytes().filter(|&b| b == b'\n' || b == b'\r').count());
            }
        }
        2 => {
            let _ = parse_cpuinfo(&text);
            let _ = parse_meminfo(&text);
            let _ = parse_mem_available(&text);
            let _ = parse_os_release(&text);
        }
        3 => {
            let _ = parse_start_at(&text);
        }
        4 => {
            // A trace's prompts are built from its rows: rows that parse must build, a request
            // and an offset per round of each row.
            if let Ok(rows) = trace::parse(&text, &TraceConfig::default(), 64) {
                for rounds in [1, 3] {
                    let samples = trace::rows_to_samples(&rows, 16, IdRange::DEFAULT, 1, rounds);
                    assert_eq!(samples.len(), rows.len() * rounds as usize);
                    assert_eq!(trace::offsets_ns(&rows, rounds).len(), samples.len());
                }
            }
        }
        5 => {
            let _ = conversation::sharegpt(&text, 4, None, Some(3), 1, "c");
            // SGLang's sharegpt (one JSON list) and custom (JSON lines) rules, counted in words:
            // what loads is at most the prompts asked, each within the context length.
            for lines in [false, true] {
                let cfg = DatasetConfig {
                    num_prompts: 4,
                    conversations: Conversations::Sglang {
                        lines,
                        context_len: Some(64),
                    },
                    ..DatasetConfig::default()
                };
                let mut words =
                    |s: &str| -> Result<u64, String> { Ok(s.split_whitespace().count() as u64) };
                if let Ok(samples) = datasets::sharegpt_text(&cfg, "fuzz", &text, &mut words) {
                    assert!(samples.len() <= 4);
                    assert!(samples
                        .iter()
                        .all(|x| x.prompt_len + x.output_len as u64 <= 64));
                }
            }
            // SGLang's `random`: the file's first turns cut to the drawn lengths, a byte an id.
            for as_text in [false, true] {
                let cfg = DatasetConfig {
                    num_prompts: 4,
                    random_input_len: 8,
                    random_output_len: 2,
                    random_bounds: Some(((4, 8), (1, 2))),
                    random_draws: RandomDraws::Sglang {
                        vocab: 256,
                        offsets: false,
                        text: as_text,
                    },
                    ..DatasetConfig::default()
                };
                if let Ok(samples) = datasets::sglang_sharegpt_cuts(&cfg, &text, &Bytes) {
                    assert!(samples.len() <= 4);
                    assert!(samples.iter().all(|x| x.prompt_len <= 16 && x.output_len <= 2));
                }
            }
        }
        7 => {
            // Whitespace-separated KEY:VALUE words, as the shell hands them to --goodput: what
            // parses names a known metric once, with a finite number of ms above 0.
            let words: Vec<String> = text.split_whitespace().map(str::to_string).collect();
            if let Ok(slos) = goodput::parse(&words) {
                assert!(slos.len() <= goodput::METRICS.len());
                for (name, v) in &slos {
                    assert!(goodput::METRICS.contains(name) && v.is_finite() && *v > 0.0);
                    assert!(!goodput::py_g(*v).is_empty());
                }
            }
        }
        _ => {
            if let Ok(v) = serde_json::from_str::<serde_json::Value>(&text) {
                let _ = ShardResult::from_json("fuzz.json", &v);
            }
            // A `bench sglang --shard` record line: a block that reads names at least one turn
            // per row.
            if let Some(Ok(r)) = sglang_merge::read_shard("fuzz.jsonl", &text) {
                assert!(r.block.turns >= 1, "{:?}", r.block.turns);
            }
        }
    }
});

/// A tokenizer of one id a byte, with one special token.
struct Bytes;

impl datasets::Tokenizer for Bytes {
    fn encode(&self, text: &str) -> Result<Vec<u32>, String> {
        Ok(text.bytes().map(u32::from).collect())
    }

    fn decode(&self, ids: &[u32]) -> Result<String, String> {
        Ok(ids.iter().map(|&b| char::from(b as u8)).collect())
    }

    fn special_tokens(&self) -> u32 {
        1
    }
}
