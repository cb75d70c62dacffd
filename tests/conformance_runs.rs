//! Run conformance: each command line of [`RUNS`] is run by the reference tool (vLLM 0.33.0's
//! `vllm bench serve`, SGLang 0.5.23's `python -m sglang.bench_serving`) and by the drop-in
//! against the same simulated server (a fresh one per tool), and what each produced is compared:
//! the exit code, the result file's keys and their order (ours carries one more, `llmspeed`,
//! last) and each shared value's JSON type, the console block's lines and their order, completed
//! and failed counts and the token totals; and what each sent, from the server's request log:
//! the same kinds of calls, and the generation requests' bodies field by field under the rules
//! of `tests/conformance/bodies.rs`. vLLM 0.33's own sweep driver running llmspeed is
//! `tests/conformance_sweep.rs`.
//!
//! Needs the references (`scripts/references.sh`; `.ci/run` exports their Pythons) and the tiny
//! Hugging Face tokenizer of `scripts/vllm-server.sh` (`LLMSPEED_VLLM_MODEL`), which both tools
//! load: NOT RUN without them, a failure under `CI=true`.
//!
//! To add a case, add a row to [`RUNS`] (a server other than the fast mock goes into [`SERVED`],
//! a file the row reads into [`FILES`], keys the row is there to exercise into [`REQUIRED`]); a
//! difference we keep on purpose (a result key, a console label, or a request difference by the
//! key `bodies::compare` names it with) goes into [`DELIBERATE`] with its reason. `LLMSPEED_CONFORMANCE_ROWS=TEXT` runs only the rows whose
//! name contains TEXT (all of a tool's selected rows run in one reference process, which imports
//! torch once: 10-20 s);
//! `LLMSPEED_CONFORMANCE_KEEP=1` keeps each row's folder (both results and the server's
//! request logs, `ref-requests.jsonl` and `ours-requests.jsonl`) and prints where.

#[path = "conformance/bodies.rs"]
mod bodies;
#[path = "conformance/reference.rs"]
mod reference;
#[path = "conformance/results.rs"]
mod results;
mod support;

use results::{
    block, check, keys_in_order, label, python_json, ran, ran_with, traffic_lines, value, Ran,
    SERVER_PROBE, UUID_REQUEST_IDS,
};
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::Command;
use support::mock::MockThread;

#[derive(Clone, Copy, Debug, PartialEq)]
enum Tool {
    /// `vllm bench serve` / `llmspeed bench serve`.
    Vllm,
    /// `python -m sglang.bench_serving` / `llmspeed bench sglang`.
    Sglang,
}

/// One command line, run by both tools (the server, model, tokenizer and output file flags are
/// added by the test).
struct Run {
    name: &'static str,
    tool: Tool,
    args: &'static [&'static str],
    /// How `total_input_tokens` may differ (the other totals must be equal).
    input: Input,
}

/// How the two tools' input token totals compare, and why they may differ.
#[derive(Clone, Copy, Debug)]
enum Input {
    Equal,
    /// Ours is the reference's plus one per completed request: vLLM 0.33 and SGLang 0.5.23
    /// shorten each random text prompt by the tokenizer's special tokens (the BOS a server adds
    /// to a text prompt); llmspeed sends token ids, to which no server adds one, at the full
    /// length. The mock adds none to either, so the reference's prompts count one token fewer
    /// there (the tiny tokenizer adds one BOS); on a server that adds a BOS to text both reach
    /// the requested length.
    PlusOneSpecialPerRequest,
    /// Within this many percent: chat prompts are text on both sides (vLLM's decoded ids
    /// aligned with /tokenize, llmspeed's ids through /detokenize), which the server's chat
    /// template and re-tokenization lengthen differently.
    WithinPercent(f64),
    /// Ours is exactly this total and the reference's is its own: SGLang 0.5.23's mooncake
    /// replay builds each prompt as chat text from the `hash_ids` alone (a block is the id and
    /// 128 words), whatever the trace's `input_length`; llmspeed sends the trace's lengths.
    OursExactly(f64),
    /// Ours is below the reference's: vLLM 0.33 does not align `random-mm`'s text with the
    /// server (no /tokenize, /detokenize: it decodes its ids with its own tokenizer, which the
    /// server counts again, longer), where llmspeed fits the text part to the drawn length as
    /// the server counts it. The images are the same on both sides (the bodies' check reads
    /// each one's size), so their tokens are too.
    BelowUnalignedText,
    /// Ours is below the reference's: SGLang 0.5.23 counts each image row before the run with
    /// the model's processor, which for the suite's text-only tiny tokenizer renders each data
    /// URL into the prompt text and counts its base64 as tokens (thousands an image); llmspeed
    /// counts the text's chat request as the server counts it and the server's own image
    /// tokens (`--image-tokens`' rule), which a processor of a vision model would agree with;
    /// here none, as SGLang's chat body asks for no usage, so the server reports no prompt
    /// count (`tests/images_sglang.rs` asks for it and checks the count). The images are the
    /// same on both sides, request by request (the bodies' check reads each one's size).
    BelowProcessorCount,
}

/// The command lines. Each one runs in a few seconds on the fast mock profile.
const RUNS: &[Run] = &[
    Run {
        name: "random on completions",
        tool: Tool::Vllm,
        args: &[
            "--backend",
            "openai",
            "--dataset-name",
            "random",
            "--num-prompts",
            "8",
            "--random-input-len",
            "32",
            "--random-output-len",
            "8",
            "--seed",
            "3",
        ],
        input: Input::PlusOneSpecialPerRequest,
    },
    Run {
        name: "random on chat with a concurrency limit, a rate and every metric",
        tool: Tool::Vllm,
        args: &[
            "--backend",
            "openai-chat",
            "--endpoint",
            "/v1/chat/completions",
            "--dataset-name",
            "random",
            "--num-prompts",
            "8",
            "--input-len",
            "24",
            "--output-len",
            "6",
            "--max-concurrency",
            "2",
            "--request-rate",
            "50",
            "--burstiness",
            "0.5",
            "--percentile-metrics",
            "ttft,tpot,itl,e2el,client_queue_time,e2el_including_client_queue",
            "--metric-percentiles",
            "50,90,99",
            "--temperature",
            "0",
        ],
        input: Input::WithinPercent(10.0),
    },
    Run {
        name: "random-mm on chat: images drawn as vLLM draws them",
        tool: Tool::Vllm,
        args: &[
            "--backend",
            "openai-chat",
            "--endpoint",
            "/v1/chat/completions",
            "--dataset-name",
            "random-mm",
            "--num-prompts",
            "8",
            "--random-input-len",
            "24",
            "--random-output-len",
            "6",
            "--random-mm-base-items-per-request",
            "2",
            "--random-mm-num-mm-items-range-ratio",
            "1.0",
            "--random-mm-limit-mm-per-prompt",
            r#"{"image": 3, "video": 0}"#,
            "--random-mm-bucket-config",
            "{(64, 48, 1): 0.5, (32, 32, 1): 0.5}",
            "--seed",
            "3",
        ],
        input: Input::BelowUnalignedText,
    },
    Run {
        name: "prefix_repetition on completions",
        tool: Tool::Vllm,
        args: &[
            "--dataset-name",
            "prefix_repetition",
            "--num-prompts",
            "8",
            "--prefix-repetition-prefix-len",
            "16",
            "--prefix-repetition-suffix-len",
            "8",
            "--prefix-repetition-num-prefixes",
            "2",
            "--prefix-repetition-output-len",
            "4",
            "--ignore-eos",
        ],
        // vLLM builds these prompts at their exact length (no room left for specials).
        input: Input::Equal,
    },
    Run {
        name: "random on completions from a server sending its per-request metrics",
        tool: Tool::Vllm,
        args: &[
            "--dataset-name",
            "random",
            "--num-prompts",
            "6",
            "--random-input-len",
            "24",
            "--random-output-len",
            "5",
            "--save-detailed",
        ],
        input: Input::PlusOneSpecialPerRequest,
    },
    Run {
        name: "a linear ramp-up",
        tool: Tool::Vllm,
        args: &[
            "--dataset-name",
            "random",
            "--num-prompts",
            "10",
            "--random-input-len",
            "16",
            "--random-output-len",
            "4",
            "--ramp-up-strategy",
            "linear",
            "--ramp-up-start-rps",
            "20",
            "--ramp-up-end-rps",
            "60",
        ],
        input: Input::PlusOneSpecialPerRequest,
    },
    Run {
        name: "a closed loop (steady state is ours, under llmspeed)",
        tool: Tool::Vllm,
        args: &[
            "--dataset-name",
            "random",
            "--num-prompts",
            "8",
            "--random-input-len",
            "16",
            "--random-output-len",
            "4",
            "--max-concurrency",
            "2",
            "--percentile-metrics",
            "ttft,tpot,client_queue_time",
        ],
        input: Input::PlusOneSpecialPerRequest,
    },
    Run {
        name: "goodput",
        tool: Tool::Vllm,
        args: &[
            "--dataset-name",
            "random",
            "--num-prompts",
            "6",
            "--random-input-len",
            "16",
            "--random-output-len",
            "4",
            "--goodput",
            "ttft:2000",
            "e2el:5000",
        ],
        input: Input::PlusOneSpecialPerRequest,
    },
    Run {
        name: "a rate with burstiness, a seed, a range ratio and warm-ups",
        tool: Tool::Vllm,
        args: &[
            "--dataset-name",
            "random",
            "--num-prompts",
            "8",
            "--random-input-len",
            "16",
            "--random-output-len",
            "4",
            // The same lengths drawn for the seed (numpy's generator, vLLM's order).
            "--random-range-ratio",
            "0.5",
            // Gaps of about 100 ms, each held to the reference's (`SEND_GAP_TOLERANCE_MS`).
            "--request-rate",
            "10",
            "--burstiness",
            "2.5",
            "--seed",
            "11",
            // vLLM's warm-ups (0 by default): the same count, sent before the measured ones.
            "--num-warmups",
            "2",
        ],
        input: Input::PlusOneSpecialPerRequest,
    },
    Run {
        name: "timed_trace replayed on its own timestamps",
        tool: Tool::Vllm,
        args: &[
            "--dataset-name",
            "timed_trace",
            "--dataset-path",
            "{dir}/trace.jsonl",
            "--num-prompts",
            "4",
            "--timed-trace-sec-multiplier",
            "0.001",
            "--self-timed",
            "--save-detailed",
        ],
        input: Input::Equal,
    },
    Run {
        name: "custom prompts from a JSONL file",
        tool: Tool::Vllm,
        args: &[
            "--dataset-name",
            "custom",
            "--dataset-path",
            "{dir}/custom.jsonl",
            "--num-prompts",
            "3",
            "--custom-output-len",
            "4",
            "--skip-chat-template",
        ],
        input: Input::Equal,
    },
    Run {
        name: "sharegpt from a small file",
        tool: Tool::Vllm,
        args: &[
            "--dataset-name",
            "sharegpt",
            "--dataset-path",
            "{dir}/sharegpt.json",
            "--num-prompts",
            "3",
            "--sharegpt-output-len",
            "4",
        ],
        input: Input::Equal,
    },
    Run {
        name: "custom prompts wrapped in the tokenizer's chat template",
        tool: Tool::Vllm,
        args: &[
            "--dataset-name",
            "custom",
            "--dataset-path",
            "{dir}/custom.jsonl",
            "--num-prompts",
            "3",
            "--custom-output-len",
            "4",
            // No --skip-chat-template: both wrap each prompt in the tiny tokenizer's
            // chat_template.jinja and count the wrapped text, special tokens included.
        ],
        input: Input::Equal,
    },
    Run {
        name: "custom prompts wrapped in the chat template on chat, with template kwargs",
        tool: Tool::Vllm,
        args: &[
            "--backend",
            "openai-chat",
            "--endpoint",
            "/v1/chat/completions",
            "--dataset-name",
            "custom",
            "--dataset-path",
            "{dir}/custom.jsonl",
            "--num-prompts",
            "3",
            "--custom-output-len",
            "4",
            // A variable the tiny template does not read: accepted, changing nothing.
            "--chat-template-kwargs",
            "{\"enable_thinking\": false}",
        ],
        input: Input::Equal,
    },
    Run {
        name: "random on the Responses API",
        tool: Tool::Vllm,
        args: &[
            "--backend",
            "openai-responses",
            "--endpoint",
            "/v1/responses",
            "--dataset-name",
            "random",
            "--num-prompts",
            "8",
            "--random-input-len",
            "24",
            "--random-output-len",
            "6",
            "--max-concurrency",
            "4",
            "--temperature",
            "0",
        ],
        // Text prompts on both sides, as on chat: the server's chat template and
        // re-tokenization lengthen them differently.
        input: Input::WithinPercent(10.0),
    },
    Run {
        name: "random-ids on SGLang's OpenAI completions",
        tool: Tool::Sglang,
        args: &[
            "--backend",
            "sglang-oai",
            "--dataset-name",
            "random-ids",
            "--num-prompts",
            "8",
            "--random-input-len",
            "32",
            "--random-output-len",
            "8",
            // Drawn lengths: the same for the seed (numpy's legacy generator, SGLang's order).
            "--random-range-ratio",
            "0.5",
        ],
        input: Input::PlusOneSpecialPerRequest,
    },
    Run {
        name: "random-ids on SGLang's chat",
        tool: Tool::Sglang,
        args: &[
            "--backend",
            "sglang-oai-chat",
            "--dataset-name",
            "random-ids",
            "--num-prompts",
            "6",
            "--random-input-len",
            "24",
            "--random-output-len",
            "6",
            "--max-concurrency",
            "2",
            "--random-range-ratio",
            "1.0",
        ],
        // On chat llmspeed's ids are text too, fitted through /detokenize, and the simulated
        // server's vocabulary brings not every cut back to its length (with seed 42's offsets
        // one prompt of 24 ids comes back 18 however it is cut).
        input: Input::WithinPercent(5.0),
    },
    Run {
        name: "SGLang's image dataset on chat: images drawn as SGLang draws them",
        tool: Tool::Sglang,
        args: &[
            "--backend",
            "sglang-oai-chat",
            "--dataset-name",
            "image",
            "--num-prompts",
            "6",
            "--random-input-len",
            "24",
            "--random-output-len",
            "6",
            "--random-range-ratio",
            "0.5",
            // The same counts (1 to 3) and sizes (each side between its bounds) per request
            // for the seed: the bodies' check reads each image's size from its header.
            "--image-count",
            "3",
            "--random-image-count",
            "--image-resolution",
            "random:16x16-48x40",
            "--image-format",
            "png",
            "--model",
            "{tokenizer}",
            "--seed",
            "3",
            "--max-concurrency",
            "2",
        ],
        input: Input::BelowProcessorCount,
    },
    Run {
        name: "goodput on SGLang's native backend",
        tool: Tool::Sglang,
        args: &[
            "--backend",
            "sglang",
            "--dataset-name",
            "random-ids",
            "--num-prompts",
            "8",
            "--random-input-len",
            "32",
            "--random-output-len",
            "8",
            "--random-range-ratio",
            "1.0",
            // Every request meets the last two on the fast mock; none meets the first (no TTFT
            // is 1 us). A TPOT SLO near 0 would not do: on a loaded machine the mock may write a
            // whole output in one chunk, whose TPOT (last token - first) is 0 in both tools, in
            // one tool's run and not the other's (CI-like load: 3 of 8 in ours, 0 in SGLang's).
            "--goodput",
            "ttft:0.001",
            "e2el:60000",
            "tpot:60000",
        ],
        input: Input::PlusOneSpecialPerRequest,
    },
    Run {
        name: "a rate and a seed on SGLang's native /generate",
        tool: Tool::Sglang,
        args: &[
            "--backend",
            "sglang",
            "--dataset-name",
            "random-ids",
            "--num-prompts",
            "8",
            "--random-input-len",
            "24",
            "--random-output-len",
            "6",
            // The same lengths drawn for the seed, and the send times drawn after them.
            "--random-range-ratio",
            "0.5",
            "--request-rate",
            "10",
            "--seed",
            "7",
        ],
        input: Input::PlusOneSpecialPerRequest,
    },
    Run {
        name: "sharegpt from a file on SGLang's completions",
        tool: Tool::Sglang,
        args: &[
            "--backend",
            "sglang-oai",
            "--dataset-name",
            "sharegpt",
            "--dataset-path",
            "{dir}/sharegpt-sglang.json",
            // Every usable conversation, so both send the same five (each shuffles its own way).
            "--num-prompts",
            "5",
            "--sharegpt-output-len",
            "6",
        ],
        // Both count each prompt with the tokenizer, special tokens included.
        input: Input::Equal,
    },
    Run {
        name: "sharegpt with a prompt suffix on SGLang's chat",
        tool: Tool::Sglang,
        args: &[
            "--backend",
            "sglang-oai-chat",
            "--dataset-name",
            "sharegpt",
            "--dataset-path",
            "{dir}/sharegpt-sglang.json",
            "--num-prompts",
            "3",
            "--sharegpt-output-len",
            "5",
            "--prompt-suffix",
            " Answer in one line.",
        ],
        input: Input::Equal,
    },
    Run {
        name: "random cut from a ShareGPT file on SGLang's completions",
        tool: Tool::Sglang,
        args: &[
            "--backend",
            "sglang-oai",
            "--dataset-name",
            "random",
            "--dataset-path",
            "{dir}/sharegpt-sglang.json",
            // More than the file's five usable conversations: both send the five.
            "--num-prompts",
            "8",
            "--random-input-len",
            "20",
            "--random-output-len",
            "4",
            "--random-range-ratio",
            "0.5",
            "--max-concurrency",
            "1",
        ],
        // The same texts; SGLang records each drawn length less the special token it took off,
        // llmspeed the tokenizer's count of the text sent, the BOS a server adds included.
        input: Input::PlusOneSpecialPerRequest,
    },
    Run {
        name: "random cut from a ShareGPT file as token ids on SGLang's native /generate",
        tool: Tool::Sglang,
        args: &[
            "--backend",
            "sglang",
            "--tokenize-prompt",
            "--dataset-name",
            "random",
            "--dataset-path",
            "{dir}/sharegpt-sglang.json",
            "--num-prompts",
            "5",
            "--random-input-len",
            "30",
            "--random-output-len",
            "4",
            "--random-range-ratio",
            "0.25",
            "--max-concurrency",
            "1",
        ],
        input: Input::Equal,
    },
    Run {
        name: "generated-shared-prefix with the cache report on SGLang's native /generate",
        tool: Tool::Sglang,
        args: &[
            "--backend",
            "sglang",
            "--dataset-name",
            "generated-shared-prefix",
            "--gsp-num-groups",
            "2",
            "--gsp-prompts-per-group",
            "3",
            "--gsp-system-prompt-len",
            "64",
            "--gsp-question-len",
            "8",
            "--gsp-output-len",
            "4",
            "--max-concurrency",
            "1",
            // Token-id prompts on both sides: SGLang's text ones (random ids decoded, joined
            // with "\n\n" and counted again) come out about 15% longer than drawn.
            "--tokenize-prompt",
            "--cache-report",
            // Each measured request names its group: 3 requests each of groups 0 and 1.
            "--gsp-send-routing-key",
        ],
        input: Input::Equal,
    },
    Run {
        name: "generated-shared-prefix conversations of 3 turns on SGLang's chat backend",
        tool: Tool::Sglang,
        args: &[
            "--backend",
            "sglang-oai-chat",
            "--dataset-name",
            "generated-shared-prefix",
            "--gsp-num-groups",
            "2",
            "--gsp-prompts-per-group",
            "2",
            "--gsp-system-prompt-len",
            "32",
            "--gsp-question-len",
            "8",
            "--gsp-output-len",
            "6",
            "--gsp-num-turns",
            "3",
            "--max-concurrency",
            "2",
        ],
        // Each round is a request (12), its prompt length the server's; SGLang totals the
        // dataset's input, which it passes none of for conversations: 0 on both sides.
        input: Input::Equal,
    },
    Run {
        name: "generated-shared-prefix with Zipf groups on SGLang's native /generate",
        tool: Tool::Sglang,
        args: &[
            "--backend",
            "sglang",
            "--dataset-name",
            "generated-shared-prefix",
            "--gsp-num-groups",
            "3",
            "--gsp-prompts-per-group",
            "4",
            "--gsp-system-prompt-len",
            "32",
            "--gsp-question-len",
            "8",
            "--gsp-output-len",
            "4",
            "--gsp-group-distribution",
            "zipf",
            "--gsp-zipf-alpha",
            "1.2",
            "--tokenize-prompt",
        ],
        // Exact lengths: every prompt is 32 + 8 tokens whichever group it drew.
        input: Input::Equal,
    },
    Run {
        name: "sharegpt with a context length and more prompts asked than pass, on SGLang's completions",
        tool: Tool::Sglang,
        args: &[
            "--backend",
            "sglang-oai",
            "--dataset-name",
            "sharegpt",
            "--dataset-path",
            "{dir}/sharegpt-sglang.json",
            // Prompt + reply (the tiny tokenizer, BOS included) are 40, 50, 43, 37 and 45
            // tokens: three pass 44, and both send those three (SGLang never oversamples).
            "--num-prompts",
            "10",
            "--sharegpt-context-len",
            "44",
        ],
        input: Input::Equal,
    },
    Run {
        name: "a dataset offset, which SGLang reads only for agentic-trace, on SGLang's native /generate",
        tool: Tool::Sglang,
        args: &[
            "--backend",
            "sglang",
            "--dataset-name",
            "sharegpt",
            "--dataset-path",
            "{dir}/sharegpt-sglang.json",
            "--num-prompts",
            "5",
            "--sharegpt-output-len",
            "6",
            "--dataset-offset",
            "3",
        ],
        input: Input::Equal,
    },
    Run {
        name: "SGLang's custom conversations on its chat backend",
        tool: Tool::Sglang,
        args: &[
            "--backend",
            "sglang-oai-chat",
            "--dataset-name",
            "custom",
            "--dataset-path",
            "{dir}/custom-sglang.jsonl",
            // Four usable lines of six: both send the four.
            "--num-prompts",
            "10",
        ],
        // Both count each prompt with the tokenizer on the client, whatever the chat template.
        input: Input::Equal,
    },
    Run {
        name: "sharegpt with --apply-chat-template on SGLang's completions",
        tool: Tool::Sglang,
        args: &[
            "--backend",
            "sglang-oai",
            "--dataset-name",
            "sharegpt",
            "--dataset-path",
            "{dir}/sharegpt-sglang.json",
            "--num-prompts",
            "5",
            "--sharegpt-output-len",
            "6",
            // Each prompt wrapped in the tiny tokenizer's template, its BOS taken out.
            "--apply-chat-template",
        ],
        input: Input::Equal,
    },
    Run {
        name: "SGLang's custom conversations with --apply-chat-template on its chat backend",
        tool: Tool::Sglang,
        args: &[
            "--backend",
            "sglang-oai-chat",
            "--dataset-name",
            "custom",
            "--dataset-path",
            "{dir}/custom-sglang.jsonl",
            "--num-prompts",
            "10",
            "--apply-chat-template",
        ],
        input: Input::Equal,
    },
    Run {
        name: "SGLang's openai chat requests on its chat backend",
        tool: Tool::Sglang,
        args: &[
            "--backend",
            "sglang-oai-chat",
            "--dataset-name",
            "openai",
            "--dataset-path",
            "{dir}/openai-sglang.jsonl",
            "--num-prompts",
            "10",
        ],
        // Both count each request's messages through the tiny tokenizer's chat template, and
        // its tools as Python's json.dumps writes them.
        input: Input::Equal,
    },
    Run {
        name: "SGLang's mooncake trace replayed on its timestamps in two rounds a session, on native /generate",
        tool: Tool::Sglang,
        args: &[
            "--backend",
            "sglang",
            "--dataset-name",
            "mooncake",
            "--dataset-path",
            "{dir}/trace.jsonl",
            "--num-prompts",
            "4",
            "--mooncake-slowdown-factor",
            "0.5",
            "--use-trace-timestamps",
            "--mooncake-num-rounds",
            "2",
        ],
        // 8 requests: each row's first round has the trace's input length (32 + 48 + 16 +
        // 32), its second twice that and the row's output length between (68 + 99 + 37 + 66).
        input: Input::OursExactly(398.0),
    },
];

/// A change to the fast profile's settings.
type Tweak = fn(&mut llmspeed::mock::MockConfig);

/// The simulated server of the rows that need more than the fast profile, by row name.
const SERVED: &[(&str, Tweak)] = &[
    (
        "random on completions from a server sending its per-request metrics",
        per_request_metrics,
    ),
    (
        "SGLang's image dataset on chat: images drawn as SGLang draws them",
        serves_the_tiny_model_by_its_path,
    ),
];

/// SGLang's image dataset loads the model's processor from `--model`: the row names the tiny
/// model's folder, which the server then serves under that name.
fn serves_the_tiny_model_by_its_path(c: &mut llmspeed::mock::MockConfig) {
    if let Some(m) = std::env::var_os("LLMSPEED_VLLM_MODEL") {
        c.model = m.to_string_lossy().into_owned();
    }
}

/// Keys the reference must write on a row (so the row exercises what it is there for), by row
/// name; both tools must then write them.
const REQUIRED: &[(&str, &[&str])] = &[
    (
        "random on completions from a server sending its per-request metrics",
        &["server_queue_times", "server_ttfts"],
    ),
    (
        "a linear ramp-up",
        &["ramp_up_strategy", "rps_change_events"],
    ),
    (
        "a closed loop (steady state is ours, under llmspeed)",
        &["mean_client_queue_time_ms"],
    ),
];

/// vLLM's `--enable-per-request-metrics`.
fn per_request_metrics(c: &mut llmspeed::mock::MockConfig) {
    c.per_request_metrics = true;
}

/// Files the rows read, written into each run's folder (`{dir}` in a row's arguments):
/// a Mooncake-style trace (timestamps in ms), vLLM's custom JSONL, a ShareGPT file, and
/// SGLang's ShareGPT file of five two-turn conversations and one single-turn one, which both
/// tools skip.
const FILES: &[(&str, &str)] = &[
    (
        "trace.jsonl",
        "{\"timestamp\": 0, \"input_length\": 32, \"output_length\": 4, \"hash_ids\": [1, 2]}\n\
         {\"timestamp\": 50, \"input_length\": 48, \"output_length\": 3, \"hash_ids\": [1, 2, 3]}\n\
         {\"timestamp\": 120, \"input_length\": 16, \"output_length\": 5, \"hash_ids\": [4]}\n\
         {\"timestamp\": 200, \"input_length\": 32, \"output_length\": 2, \"hash_ids\": [1, 5]}\n",
    ),
    (
        "custom.jsonl",
        "{\"prompt\": \"The quick brown fox jumps over the lazy dog.\"}\n\
         {\"prompt\": \"Write one line about the sea at night.\"}\n\
         {\"prompt\": \"Name three colours that are also fruits.\"}\n",
    ),
    (
        "sharegpt.json",
        r#"[
  {"id": "a", "conversations": [{"from": "human", "value": "Tell me about the moon and its phases."}, {"from": "gpt", "value": "The moon goes from new to full and back in about a month."}]},
  {"id": "b", "conversations": [{"from": "human", "value": "What is a prime number?"}, {"from": "gpt", "value": "A whole number above one whose only divisors are one and itself."}]},
  {"id": "c", "conversations": [{"from": "human", "value": "Give me a short greeting for a letter."}, {"from": "gpt", "value": "Dear friend, I hope this finds you well."}]}
]"#,
    ),
    (
        "sharegpt-sglang.json",
        r#"[
{"id": "a", "conversations": [{"from": "human", "value": "Tell me about the sea and the ships that sail on it every day."}, {"from": "gpt", "value": "The sea is wide and deep, and many ships sail on it."}]},
{"id": "b", "conversations": [{"from": "human", "value": "Name three colours you can see in a rainbow after the rain."}, {"from": "gpt", "value": "Red, orange and yellow are three of the colours in a rainbow."}]},
{"id": "c", "conversations": [{"from": "human", "value": "only one turn here"}]},
{"id": "d", "conversations": [{"from": "human", "value": "Why do cats like to sleep in warm and sunny places at noon?"}, {"from": "gpt", "value": "Cats keep warm that way and save their energy for the night."}]},
{"id": "e", "conversations": [{"from": "human", "value": "Write one short sentence about a quiet morning in the hills."}, {"from": "gpt", "value": "Mist lay on the hills while the village slept below."}]},
{"id": "f", "conversations": [{"from": "human", "value": "What is the best way to learn to ride a bicycle as an adult?"}, {"from": "gpt", "value": "Start on a gentle grassy slope and keep your eyes ahead."}]}
]"#,
    ), // SGLang's custom JSONL: four two-turn conversations (`content` or `value`, `conversations`
    // or `conversation`), a single-turn one and a line that is not JSON, which both skip.
    (
        "custom-sglang.jsonl",
        r#"{"conversations": [{"role": "user", "content": "Tell me about the sea and the ships that sail on it every day."}, {"role": "assistant", "content": "The sea is wide and deep, and many ships sail on it."}]}
{"conversations": [{"role": "user", "content": "Name three colours you can see in a rainbow after the rain."}, {"role": "assistant", "content": "Red, orange and yellow are three of the colours in a rainbow."}]}
this line is not JSON and is skipped
{"conversation": [{"from": "human", "value": "Why do cats like to sleep in warm and sunny places at noon?"}, {"from": "gpt", "value": "Cats keep warm that way and save their energy for the night."}]}
{"conversations": [{"role": "user", "content": "only one turn here"}]}
{"conversations": [{"role": "user", "content": "Write one short sentence about a quiet morning in the hills."}, {"role": "assistant", "content": "Mist lay on the hills while the village slept below."}]}
"#,
    ),
    // SGLang's openai JSONL: three chat requests (their own fields sent with them, `model` and
    // `max_completion_tokens` not), a line that is not JSON and one without messages, which
    // both skip.
    (
        "openai-sglang.jsonl",
        r#"{"messages": [{"role": "system", "content": "You answer briefly."}, {"role": "user", "content": "Tell me about the sea and the ships that sail on it."}], "max_tokens": 6, "temperature": 0.5}
{"messages": [{"role": "user", "content": "Name three colours of a rainbow."}], "max_tokens": 5, "model": "someone-else", "max_completion_tokens": 99, "top_p": 0.9}
this line is not JSON and is skipped
{"messages": [], "max_tokens": 4}
{"messages": [{"role": "user", "content": "What is the weather in Paris, é?"}], "max_tokens": 7, "tools": [{"type": "function", "function": {"name": "get_weather", "description": "The weather in a city", "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}}]}
"#,
    ),
];

/// Differences kept on purpose: (tool, what, reason). `what` is a result key ours lacks or
/// adds, or a console label, which the comparison then skips; or a difference in what the
/// server received, by the key `bodies::compare` gives it (docs/migrate-vllm.md and
/// docs/migrate-sglang.md list them); or a behaviour the rows allow through their [`Input`]
/// rule, listed here with its reason (docs/bench-sglang.md repeats it).
const DELIBERATE: &[(Tool, &str, &str)] = &[
    (
        Tool::Vllm,
        "prompt: `prompt` text sent as `prompt` token ids",
        "random and prefix_repetition prompts go as token ids of the drawn length, which reach \
         the server as sent on every server (no special tokens added, no re-tokenization); \
         vLLM decodes its ids to text and aligns it with the server's tokenizer: \
         Input::PlusOneSpecialPerRequest",
    ),
    (
        Tool::Vllm,
        "POST /detokenize: only the reference calls it",
        "vLLM aligns its random and prefix_repetition text prompts with the server's tokenizer \
         (/tokenize, /detokenize); token-id prompts need no alignment",
    ),
    (
        Tool::Vllm,
        "POST /detokenize: only llmspeed calls it",
        "random-mm's text parts go as text on chat: llmspeed fits its drawn ids through the \
         server's /detokenize and /tokenize; vLLM 0.33 decodes them with its local tokenizer and \
         does not align them (Input::BelowUnalignedText)",
    ),
    (
        Tool::Vllm,
        "GET /version: only llmspeed calls it",
        SERVER_PROBE,
    ),
    (
        Tool::Vllm,
        "POST /tokenize: only llmspeed calls it",
        SERVER_PROBE,
    ),
    (
        Tool::Vllm,
        "POST /v1/completions (not streamed, before the run): only llmspeed calls it",
        SERVER_PROBE,
    ),
    (Tool::Vllm, "x-request-id", UUID_REQUEST_IDS),
    (
        Tool::Sglang,
        "prompt: `prompt` text sent as `prompt` token ids",
        "random prompts are token ids of the drawn length (below)",
    ),
    (
        Tool::Sglang,
        "prompt: `text` text sent as `input_ids` token ids",
        "random prompts are token ids of the drawn length (below)",
    ),
    (
        Tool::Sglang,
        "POST /detokenize: only llmspeed calls it",
        "the chat backends get random-ids prompts as text: the drawn ids through the server's \
         /detokenize (SGLang decodes them with its local tokenizer)",
    ),
    (
        Tool::Sglang,
        "GET /version: only llmspeed calls it",
        SERVER_PROBE,
    ),
    (
        Tool::Sglang,
        "GET /metrics: only llmspeed calls it",
        SERVER_PROBE,
    ),
    (
        Tool::Sglang,
        "POST /tokenize: only llmspeed calls it",
        SERVER_PROBE,
    ),
    (
        Tool::Sglang,
        "POST /v1/completions (not streamed, before the run): only llmspeed calls it",
        SERVER_PROBE,
    ),
    (Tool::Sglang, "x-request-id", UUID_REQUEST_IDS),
    (
        Tool::Sglang,
        "random prompts are token ids of the drawn length",
        "SGLang sends decoded text shortened by the tokenizer's special tokens and records the \
         shortened length; token ids reach the server as sent (exact on every server, no \
         specials added), so llmspeed sends and records the drawn length: \
         Input::PlusOneSpecialPerRequest",
    ),
    (
        Tool::Sglang,
        "mooncake prompts have the trace's input lengths",
        "SGLang 0.5.23's replay writes each prompt as chat text from the hash_ids alone (each \
         block the id and 128 words, 512 in its warm-up), whatever the trace's input_length; \
         llmspeed sends token ids of the trace's length whose blocks are shared as the hash_ids \
         say (vLLM's timed_trace), and round r of a session r such prompts with a placeholder \
         answer of the output length between each two (SGLang: r turns of its chat text, \
         \"story\" answers): Input::OursExactly",
    ),
];

fn deliberate(tool: Tool, what: &str) -> bool {
    DELIBERATE.iter().any(|(t, w, _)| *t == tool && *w == what)
}

struct Env {
    tokenizer: PathBuf,
}

fn env() -> Option<Env> {
    Some(Env {
        tokenizer: reference::tiny_tokenizer()?,
    })
}

/// The mock settings of `row`.
fn mock_config(row: &Run) -> llmspeed::mock::MockConfig {
    let mut cfg = llmspeed::mock::MockConfig::profile(llmspeed::mock::Profile::Fast);
    for (_, tweak) in SERVED.iter().filter(|(name, _)| *name == row.name) {
        tweak(&mut cfg);
    }
    cfg
}

/// One server of `row`'s settings, logging the requests it receives into `dir/log`.
fn served(row: &Run, dir: &Path, log: &str) -> MockThread {
    let mut c = mock_config(row);
    c.request_log = Some(dir.join(log));
    MockThread::start(c)
}

/// The result file's extension: vLLM writes one JSON object, SGLang appends JSON lines.
fn ext(tool: Tool) -> &'static str {
    match tool {
        Tool::Vllm => "json",
        Tool::Sglang => "jsonl",
    }
}

/// The same command line for both tools, but for the file each one writes into `dir`.
fn args(row: &Run, env: &Env, dir: &Path, mock: &MockThread, file: &str) -> Vec<String> {
    let mut a: Vec<String> = vec![
        "--base-url".into(),
        mock.url(),
        "--tokenizer".into(),
        env.tokenizer.display().to_string(),
        "--disable-tqdm".into(),
    ];
    let out: Vec<String> = match row.tool {
        Tool::Vllm => vec![
            "--save-result".into(),
            "--result-dir".into(),
            dir.display().to_string(),
            "--result-filename".into(),
            file.into(),
        ],
        Tool::Sglang => vec!["--output-file".into(), dir.join(file).display().to_string()],
    };
    a.extend(out);
    let d = dir.display().to_string();
    let t = env.tokenizer.display().to_string();
    a.extend(
        row.args
            .iter()
            .map(|s| s.replace("{dir}", &d).replace("{tokenizer}", &t)),
    );
    a
}

/// Every row by the reference, all in ONE Python process (`tests/conformance/many_runs.py`:
/// the tool's main run once per row, as `python -m` runs it; torch is imported once), each
/// against its own server, all started first. `dirs[i]` is row i's folder, which the rows'
/// files are written into first. Returns each row's run and prints the process's wall time.
fn reference_runs(tool: Tool, rows: &[&Run], env: &Env, python: &Path, dirs: &[&Path]) -> Vec<Ran> {
    let t = match tool {
        Tool::Vllm => reference::VLLM,
        Tool::Sglang => reference::SGLANG,
    };
    let rf = format!("ref.{}", ext(tool));
    let mocks: Vec<MockThread> = rows
        .iter()
        .zip(dirs)
        .map(|(row, dir)| {
            for (name, text) in FILES {
                std::fs::write(dir.join(name), text).unwrap();
            }
            served(row, dir, "ref-requests.jsonl")
        })
        .collect();
    let runs: Vec<Value> = rows
        .iter()
        .zip(dirs)
        .zip(&mocks)
        .map(|((row, dir), mock)| {
            let mut argv: Vec<String> = t
                .args
                .iter()
                .filter(|a| **a != "--")
                .map(|a| a.to_string())
                .collect();
            argv.extend(args(row, env, dir, mock, &rf));
            // SGLang keeps generated datasets under ~/.cache/sglang: the row's folder, not the
            // user's.
            let envs = match tool {
                Tool::Vllm => serde_json::json!({}),
                Tool::Sglang => serde_json::json!({"HOME": dir}),
            };
            serde_json::json!({"argv": argv, "env": envs, "cwd": null,
                "stdout": dir.join("ref.stdout"), "stderr": dir.join("ref.stderr")})
        })
        .collect();
    let started = std::time::Instant::now();
    let codes = reference::run_script(
        python,
        "tests/conformance/many_runs.py",
        &[],
        &reference::OFFLINE,
        &serde_json::json!({"module": t.module, "runs": runs}),
    );
    let codes = codes.as_array().expect("one exit code per run");
    assert_eq!(codes.len(), rows.len(), "one exit code per run");
    eprintln!(
        "{} {}'s client: {} rows in one process, {:.0} s",
        t.name,
        t.version,
        rows.len(),
        started.elapsed().as_secs_f64()
    );
    mocks.into_iter().for_each(MockThread::stop);
    codes
        .iter()
        .zip(dirs)
        .map(|(code, dir)| {
            let text = |f: &str| std::fs::read_to_string(dir.join(f)).unwrap_or_default();
            ran_with(
                code.as_i64().map(|c| c as i32),
                text("ref.stdout"),
                text("ref.stderr"),
                &dir.join(&rf),
                &dir.join("ref-requests.jsonl"),
            )
        })
        .collect()
}

/// One row by llmspeed against a fresh server of the row's settings.
fn our_run(row: &Run, env: &Env, dir: &Path) -> Ran {
    let sub = match row.tool {
        Tool::Vllm => "serve",
        Tool::Sglang => "sglang",
    };
    let of = format!("ours.{}", ext(row.tool));
    let mock = served(row, dir, "ours-requests.jsonl");
    let o = Command::new(env!("CARGO_BIN_EXE_llmspeed"))
        .args(["bench", sub])
        .args(args(row, env, dir, &mock, &of))
        .output()
        .expect("run llmspeed");
    mock.stop();
    ran(o, &dir.join(of), &dir.join("ours-requests.jsonl"))
}

/// Every difference between the two runs of `row` that is not [`DELIBERATE`], one line each.
fn compare(row: &Run, r: &Ran, o: &Ran) -> Vec<String> {
    let mut out = Vec::new();
    let mut differ = |what: String| out.push(format!("{}: {what}", row.name));
    if let Some(d) = check::exit_codes(r, o, false) {
        differ(d);
        return out;
    }
    let (rv, ov) = match check::results(r, o) {
        Ok(both) => both,
        Err(d) => {
            differ(d);
            return out;
        }
    };
    let deliberate = |what: &str| deliberate(row.tool, what);
    check::keys(r, o, &deliberate)
        .into_iter()
        .for_each(&mut differ);
    for (_, keys) in REQUIRED.iter().filter(|(name, _)| *name == row.name) {
        for k in *keys {
            if rv.get(k).is_none_or(Value::is_null) || ov.get(k).is_none_or(Value::is_null) {
                differ(format!(
                    "{k}: reference {:?}, llmspeed {:?} (the row needs both)",
                    rv.get(k),
                    ov.get(k)
                ));
            }
        }
    }
    let total = |v: &Value| v["total_input_tokens"].as_f64().unwrap_or(f64::NAN);
    let (ri, oi) = (total(rv), total(ov));
    let input_ok = match row.input {
        Input::Equal => ri == oi,
        Input::PlusOneSpecialPerRequest => oi == ri + ov["completed"].as_f64().unwrap_or(f64::NAN),
        Input::WithinPercent(p) => (oi - ri).abs() <= ri * p / 100.0,
        Input::OursExactly(n) => oi == n,
        Input::BelowUnalignedText | Input::BelowProcessorCount => oi < ri,
    };
    if !input_ok {
        differ(format!(
            "total_input_tokens: reference {ri}, llmspeed {oi} (expected {:?})",
            row.input
        ));
    }
    // The ramp's whole rates: the same ones in the same order (their moments are each run's).
    let rates = |v: &Value| -> Option<Vec<Value>> {
        Some(
            v.get("rps_change_events")?
                .as_array()?
                .iter()
                .map(|e| e["rps"].clone())
                .collect(),
        )
    };
    if rates(rv) != rates(ov) {
        differ(format!(
            "rps_change_events' rates: reference {:?}, llmspeed {:?}",
            rates(rv),
            rates(ov)
        ));
    }
    // The server's per-request lists: one number per request on both sides.
    for k in ["server_queue_times", "server_ttfts"] {
        let shape = |v: &Value| {
            v.get(k)
                .and_then(Value::as_array)
                .map(|a| (a.len(), a.iter().all(Value::is_number)))
        };
        if shape(rv) != shape(ov) {
            differ(format!(
                "{k} (length, all numbers): reference {:?}, llmspeed {:?}",
                shape(rv),
                shape(ov)
            ));
        }
    }
    // And with --goodput: the same SLOs read, and the same requests meeting each (SLOs far
    // from the mock's latencies, so the verdicts cannot depend on which tool ran).
    check::same_values(
        rv,
        ov,
        &[
            "completed",
            "failed",
            "total_output_tokens",
            "goodput_slos_ms",
            "slo_attainment",
            "slo_attainment_by_metric",
        ],
    )
    .into_iter()
    .for_each(&mut differ);
    // --cache-report: the same keys, and cached tokens seen by both or by neither; where both
    // sent the same prompt lengths, the same figures (the mock caches whole 16-token blocks of
    // a repeated prefix, whatever the prompts' ids and order).
    if let (Some(rc), oc) = (rv.get("cache_report"), ov.get("cache_report")) {
        if matches!(row.input, Input::Equal) && Some(rc) != oc {
            differ(format!("cache_report: reference {rc}, llmspeed {oc:?}"));
        }
        let keys = |v: Option<&Value>| -> Vec<String> {
            v.and_then(Value::as_object)
                .map(|o| o.keys().cloned().collect())
                .unwrap_or_default()
        };
        let cached = |v: Option<&Value>| {
            v.and_then(|c| c["total_cached_tokens"].as_u64())
                .unwrap_or(0)
                > 0
        };
        if keys(Some(rc)) != keys(oc) || cached(Some(rc)) != cached(oc) {
            differ(format!("cache_report: reference {rc}, llmspeed {oc:?}"));
        }
    }
    // The console block: the same labels in the same order, the same counts.
    check::console(
        r,
        o,
        &deliberate,
        &[
            "Successful requests:",
            "Failed requests:",
            "Total generated tokens:",
            "Maximum request concurrency:",
            "Max request concurrency:",
            "Backend:",
            "Traffic request rate:",
        ],
    )
    .into_iter()
    .for_each(&mut differ);
    let rb = block(&r.stdout);
    // A script that reads the console by label (grep, or a dict of label -> value) must find
    // each of the reference's row labels as often as the reference prints it, anywhere in
    // stdout: our own blocks after it (steady state, client lag) carry labels of their own
    // (their rules of `=` are not labels).
    for l in check::labels(&rb, &deliberate)
        .into_iter()
        .filter(|l| l.ends_with(':'))
    {
        let times = |out: &str| out.lines().filter(|x| label(x) == l).count();
        if times(&r.stdout) != times(&o.stdout) {
            differ(format!(
                "console label {l:?} printed {} time(s) by the reference, {} by llmspeed",
                times(&r.stdout),
                times(&o.stdout)
            ));
        }
    }
    if row.tool == Tool::Vllm && traffic_lines(&r.stdout) != traffic_lines(&o.stdout) {
        differ(format!(
            "traffic lines differ:\n  reference: {:?}\n  llmspeed:  {:?}",
            traffic_lines(&r.stdout),
            traffic_lines(&o.stdout)
        ));
    }
    // What the server received: the same kinds of calls, the same generation request bodies.
    let measured = check::measured;
    let file_prompts = row
        .args
        .windows(2)
        .any(|w| w[0] == "--dataset-name" && FILE_PROMPTS.contains(&w[1]));
    let (theirs, ours) = (
        bodies::sort(&r.requests, measured(rv)),
        bodies::sort(&o.requests, measured(ov)),
    );
    for (key, what) in bodies::compare(&theirs, &ours, file_prompts) {
        if !deliberate(&key) {
            differ(format!("request bodies: {what}"));
        }
    }
    // A rate with no concurrency cap: both draw numpy's numbers for the seed, so each gap
    // between two requests reaching the server is the same but for each tool's timing.
    let given = |flag: &str| row.args.contains(&flag);
    if given("--request-rate") && !given("--max-concurrency") {
        let gaps = |s: &bodies::Sorted| -> Vec<i64> {
            s.measured
                .windows(2)
                .map(|w| w[1].arrival_ns as i64 - w[0].arrival_ns as i64)
                .collect()
        };
        let (g_ref, g_ours) = (gaps(&theirs), gaps(&ours));
        let apart = g_ref.len() != g_ours.len()
            || g_ref
                .iter()
                .zip(&g_ours)
                .any(|(a, b)| (a - b).abs() > SEND_GAP_TOLERANCE_MS * 1_000_000);
        if apart {
            let ms = |g: &[i64]| -> Vec<String> {
                g.iter()
                    .map(|x| format!("{:.1}", *x as f64 / 1e6))
                    .collect()
            };
            differ(format!(
                "gaps between sends (ms): reference {:?}, llmspeed {:?}",
                ms(&g_ref),
                ms(&g_ours)
            ));
        }
    }
    out
}

/// How far one gap between two sends may differ between the tools: their timing (an asyncio
/// sleep's lateness, a loaded machine), never the draws. Rows with a rate use about 100 ms
/// gaps, where two independent draws fall within this of each other one time in five per
/// gap, and seven gaps all within it one run in a hundred thousand.
const SEND_GAP_TOLERANCE_MS: i64 = 20;

/// The datasets whose prompts are texts read from the row's file, which both tools send as
/// they are; every other one draws its own.
const FILE_PROMPTS: &[&str] = &["custom", "sharegpt", "openai"];

fn conform(tool: Tool) {
    let t = match tool {
        Tool::Vllm => reference::VLLM,
        Tool::Sglang => reference::SGLANG,
    };
    let Some(python) = t.python() else { return };
    let Some(env) = env() else { return };
    let only = std::env::var("LLMSPEED_CONFORMANCE_ROWS").unwrap_or_default();
    let keep = std::env::var_os("LLMSPEED_CONFORMANCE_KEEP").is_some();
    let rows: Vec<&Run> = RUNS
        .iter()
        .filter(|r| r.tool == tool && r.name.contains(only.as_str()))
        .collect();
    let folders: Vec<tempfile::TempDir> =
        rows.iter().map(|_| tempfile::tempdir().unwrap()).collect();
    let dirs: Vec<&Path> = folders.iter().map(|d| d.path()).collect();
    let theirs = reference_runs(tool, &rows, &env, &python, &dirs);
    let mut problems = Vec::new();
    for ((row, r), dir) in rows.iter().zip(&theirs).zip(folders) {
        let o = our_run(row, &env, dir.path());
        problems.extend(compare(row, r, &o));
        if keep {
            eprintln!("{}: kept in {}", row.name, dir.keep().display());
        }
    }
    assert!(
        problems.is_empty(),
        "{} {} and llmspeed differ:\n{}",
        t.name,
        t.version,
        problems.join("\n\n")
    );
}

#[test]
fn bench_serve_runs_as_vllm_bench_serve_does() {
    conform(Tool::Vllm);
}

#[test]
fn bench_sglang_runs_as_sglang_bench_serving_does() {
    conform(Tool::Sglang);
}

#[test]
fn the_comparison_reads_keys_in_file_order_and_console_rows() {
    assert_eq!(
        keys_in_order(r#"{"b": {"a": 1, "z": ["q"]}, "a": "x\"y:", "c": NaN}"#),
        ["b", "a", "c"]
    );
    let v: Value = serde_json::from_str(&python_json(r#"{"r": Infinity, "l": [NaN, 1]}"#)).unwrap();
    assert_eq!(
        (v["r"].clone(), v["l"][1].clone()),
        (Value::Null, serde_json::json!(1))
    );
    let rows = [
        format!("{:=^50}", " Serving Benchmark Result "),
        format!("{:<40} {:<10}", "Successful requests:", 8),
        "=".repeat(50),
    ];
    let stdout = format!("noise\n{}\nafter\n", rows.join("\n"));
    let b = block(&stdout);
    assert_eq!(b.len(), 3);
    assert_eq!(label(&b[1]), "Successful requests:");
    assert_eq!(value(&b, "Successful requests:"), Some("8"));
}
