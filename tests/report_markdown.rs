//! Golden test of `report.md`: the exact text for a small hand-built report with a row for each
//! status. A change here is a change users see in published reports: update deliberately.

mod report_common;

use llmspeed::report::markdown;

fn render(r: &llmspeed::report::MatrixReport) -> String {
    let mut out = Vec::new();
    markdown::write(&mut out, r).expect("writing to a Vec cannot fail");
    String::from_utf8(out).expect("markdown is UTF-8")
}

#[test]
fn golden_report_md() {
    let got = render(&report_common::report());
    if got != EXPECTED {
        // Show the first differing line: a whole-file diff of a long table is unreadable.
        for (i, (g, e)) in got.lines().zip(EXPECTED.lines()).enumerate() {
            assert_eq!(g, e, "line {} differs", i + 1);
        }
        assert_eq!(
            got.lines().count(),
            EXPECTED.lines().count(),
            "line count differs"
        );
        assert_eq!(got, EXPECTED);
    }
}

#[test]
fn partial_report_says_so_and_missing_metadata_is_left_out() {
    let mut r = report_common::report();
    r.metadata.interrupted = Some("interrupted by Ctrl-C".into());
    r.metadata.hardware = Default::default();
    r.metadata.engine = Default::default();
    r.metadata.launch_command = None;
    r.metadata.server_limits = Default::default();
    let md = render(&r);
    assert!(md.contains("**gemma-4-26B-A4B-it-NVFP4**\n"), "{md}");
    assert!(md.contains(
        "**Partial report:** the run stopped early (interrupted by Ctrl-C); cells marked Pending were not run, a cell marked interrupted was measured for less than its window."
    ));
    assert!(md.contains("- KV cache: unknown (no cell marked Over capacity)\n"));
    assert!(!md.contains("- GPU:"));
    assert!(!md.contains("## Launch command"));
    assert!(md.starts_with("# Speed test matrix\n\n**gemma-4-26B-A4B-it-NVFP4**\n\n3 contexts (8K–251K) × 4 concurrency levels (1–8) · prefill at 8K, 128K, 256K\n"));
}

#[test]
fn hardware_is_what_was_told_or_measured_never_the_os_name() {
    // Nothing told, no GPU seen: said so (it printed "- OS: linux" under Hardware before).
    let mut r = report_common::report();
    r.metadata.hardware = Default::default();
    r.metadata.hardware.os = Some("linux".into());
    let md = render(&r);
    assert!(
        md.contains("- Hardware: no GPU seen on the client; pass --gpu for the server's\n"),
        "{md}"
    );
    assert!(!md.contains("linux"), "{md}");
    // Nothing told, GPUs listed by nvidia-smi: those.
    report_common::add_machine_and_gaps(&mut r);
    r.metadata.hardware.os = Some("linux".into());
    let md = render(&r);
    let line = md
        .lines()
        .find(|l| l.starts_with("- Hardware: "))
        .expect("a hardware line");
    assert_eq!(
        line,
        "- Hardware: NVIDIA H200 (140.4 GiB); NVIDIA H200 (140.4 GiB) (listed by nvidia-smi on the client)"
    );
    // Told with --gpu: the told GPU line, no measured guess beside it.
    let md = render(&report_common::report());
    assert!(!md.contains("- Hardware:"), "{md}");
    assert!(md.contains("- GPU: RTX PRO 6000 Blackwell Server Edition\n"));
}

#[test]
fn table_cells_cannot_break_the_table() {
    let mut r = report_common::report();
    r.decode[0].context_label = "8K|x".into();
    let md = render(&r);
    assert!(md.contains("| 8K\\|x | 101.2 · 45.3 ms TTFT |"), "{md}");
}

const EXPECTED: &str = r#"# Speed test matrix

**gemma-4-26B-A4B-it-NVFP4 on RTX PRO 6000 Blackwell Server Edition 96GB**

vllm · 0.30.1rc1.dev452+g73a583112 · NVFP4 · 3 contexts (8K–251K) × 4 concurrency levels (1–8) · prefill at 8K, 128K, 256K

## Hardware

- Type: Discrete GPU
- GPU: RTX PRO 6000 Blackwell Server Edition
- VRAM: 96 GB

## Engine

- Engine: vllm
- Version: 0.30.1rc1.dev452+g73a583112
- Quantization: NVFP4
- Backend: cuda
- Repository: github.com/vllm-project/vllm
- Build: cuda-13.2
- Commit: 73a5831127a9
- Max model length: 262,144 tokens
- KV cache: 1,600,000 tokens (vLLM kv_cache_size_tokens)
- Running limit: 4 requests

## Run

- Served model: gemma
- Model: RedHatAI/gemma-4-26B-A4B-it-NVFP4
- Revision: main
- Server: http://127.0.0.1:8000
- Benchmark tool: llmspeed v0.1.0
- Date: 2026-11-30T04:00:00Z
- Decode test: Fixed duration
- Prefill mode: max_tokens=1 requests before each context's decode cells, median of 1 per context
- Time per measurement: 30.0 s
- Max output: 4,096 tokens (ignore_eos)
- Prompts: chat completions (three turns), sized with the server's tokenize endpoint, seed 1
- Notes: Example run | hand-built

## Launch command

```
vllm serve RedHatAI/gemma-4-26B-A4B-it-NVFP4 --served-model-name gemma --max-model-len 262144 --limit-mm-per-prompt '{"image":4}'
```

## Prefill

Prompt tok/s by context length (cold prompt, `max_tokens: 1`).

| Context | Prompt tokens | Prefill tok/s | TTFT | Samples | Status |
|---|---:|---:|---:|---:|---|
| 8K | 8,190 | 31.4K | 261 ms | 1 | Valid |
| 128K | 131,070 | 6,473.0 | 19,927 ms | 1 | Valid |
| 256K | — | — | — | 1 | Failed |

## Sustained decode

Total tok/s · rows are context length, columns are simultaneous requests.

| Context | 1 | 2 | 4 | 8 |
|---|---|---|---|---|
| 8K | 101.2 · 45.3 ms TTFT | Looped (190.4 · 52.0 ms TTFT) | Queued (310.0 · 2,450 ms TTFT) | Over capacity |
| 128K | 95.7 · 446 ms TTFT | 176.9 · 603 ms TTFT | Failed: timeout_gap ×3, http_status ×1 | Over capacity |
| 251K | 68.4 · 998 ms TTFT | Pending | Skipped | Skipped |

TTFT in the grid is the median over requests sent inside the measurement window whose first token also arrived inside it; the cells' prompt is in the server's prefix cache, so it mostly excludes prefill. Cold prefill is in the Prefill table.

Pictures: [decode.svg](decode.svg) (this grid as a heatmap) · [prefill.svg](prefill.svg) (prefill tok/s and TTFT per context).

## All measurements

Latencies are medians. Total tok/s is output across all simultaneous requests; for prefill rows it is prompt tok/s.

| Phase | Context | Requests at once | Status | Total tok/s | Per request tok/s | TTFT | Time between tokens | Average active requests | Completed requests | Output tokens | Measured for |
|---|---|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|
| Prefill | 8K | 1 | Valid | 31.4K | — | 261 ms | — | — | 1 | — | — |
| Prefill | 128K | 1 | Valid | 6,473.0 | — | 19,927 ms | — | — | 1 | — | — |
| Prefill | 256K | 1 | Failed | — | — | — | — | — | 1 | — | — |
| Sustained decode | 8K | 1 | Valid | 101.2 | 101.5 | 45.3 ms | 9.9 ms | 1.0 | 0 | 3,036 | 30.0 s |
| Sustained decode | 8K | 2 | Looped | 190.4 | 95.3 | 52.0 ms | 10.5 ms | 2.0 | 0 | 5,712 | 30.0 s |
| Sustained decode | 8K | 4 | Queued | 310.0 | 88.1 | 2,450 ms | 11.3 ms | 3.2 | 0 | 9,300 | 30.0 s |
| Sustained decode | 8K | 8 | Over capacity | — | — | — | — | — | — | — | — |
| Sustained decode | 128K | 1 | Valid | 95.7 | 95.9 | 446 ms | 10.4 ms | 1.0 | 0 | 2,869 | 30.0 s |
| Sustained decode | 128K | 2 | Valid | 176.9 | 88.6 | 603 ms | 11.3 ms | 2.0 | 0 | 5,308 | 30.0 s |
| Sustained decode | 128K | 4 | Failed | — | — | — | — | — | 0 | 0 | — |
| Sustained decode | 128K | 8 | Over capacity | — | — | — | — | — | — | — | — |
| Sustained decode | 251K | 1 | Valid | 68.4 | 68.9 | 998 ms | 14.5 ms | 1.0 | 0 | 605 | 8.8 s |
| Sustained decode | 251K | 2 | Pending | — | — | — | — | — | — | — | — |
| Sustained decode | 251K | 4 | Skipped | — | — | — | — | — | — | — | — |
| Sustained decode | 251K | 8 | Skipped | — | — | — | — | — | — | — | — |

## Notes

- Prefill 256K: failed; first message per kind: http_status (HTTP 400): This model's maximum context length is 262144 tokens.
- 8K × 2: 1 stream looped in reasoning (period 41 characters, 112 repeats): “The answer is the answer, "as" noted. ”
- 8K × 4: client counted 9,300 output tokens, server 9,312 (-12)
- 8K × 8: not run, the server runs at most 4 requests at once
- 128K × 4: failed requests: timeout_gap ×3, http_status ×1

## Legend

- **Valid**: all requests ran at once for the whole window; the cell shows total output tok/s and median TTFT.
- **Looped**: at least one stream kept repeating the same text; its figures are kept, in brackets, but describe a model stuck in a loop.
- **Over capacity**: not run, because this many requests at this context (each with its full output) would exceed the server's KV cache, or its limit on running requests.
- **Failed**: requests failed, or no stream produced a token before the readiness gate gave up (timeout_first_token), or the prompt could not be built; the error kinds, counts and the first server message per kind are in the notes.
- **Queued**: the server never ran this many at once: it reported waiting requests during the window, or some streams never produced a token, or never all at one instant (llama.cpp queues requests beyond its slots silently); figures are kept, in brackets.
- **TTFT** in a decode cell: median over the requests sent inside the window whose first token also came inside it (— when every request outlasted the window); time between tokens uses only token events inside the window.
- **Skipped**: not run, because the context plus the output does not fit the model's maximum length.
- **Pending**: planned but not run (the run stopped early).

## Method

- Total tok/s: output tokens stamped inside the window divided by the window length.
"#;

#[test]
fn prefill_mode_line_comes_from_the_settings() {
    // Before, the line was one fixed phrase whatever the run did.
    let mut r = report_common::report();
    r.metadata.settings.prefill_samples = 3;
    let md = render(&r);
    assert!(
        md.contains("- Prefill mode: max_tokens=1 requests before each context's decode cells, median of 3 per context"),
        "{md}"
    );
    r.metadata.settings.prefill_mode = llmspeed::report::PrefillMode::Off;
    assert!(render(&r).contains("- Prefill mode: Not measured"));
}

#[test]
fn an_engine_wide_token_check_reason_is_said_once_for_its_cells() {
    let mut r = report_common::report();
    let why =
        "unavailable: llamacpp:tokens_predicted_total counts a request's tokens only when it ends";
    for c in r.decode.iter_mut().take(2) {
        c.token_count_check = Some(why.into());
    }
    let cells: Vec<String> = r.decode[..2]
        .iter()
        .map(|c| format!("{} × {}", c.context_label, c.concurrency))
        .collect();
    let md = render(&r);
    let lines: Vec<&str> = md.lines().filter(|l| l.contains("token check")).collect();
    assert_eq!(
        lines,
        [format!("- {}: client–server token check {why}", cells.join(", ")).as_str()],
        "{md}"
    );
}
