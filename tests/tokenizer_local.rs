//! `--tokenizer` with a real `tokenizers` build: hand-written `tokenizer.json` files loaded by
//! path, by directory and by model id through a fake Hugging Face cache; exact counts; prose
//! calibration reaching its target. The feature `hf-tokenizer` is in the default build; the error
//! without it is a unit test in `src/workload/tokenizer.rs`.
#![cfg(feature = "hf-tokenizer")]

use std::path::{Path, PathBuf};

use llmspeed::workload::prose::{ChatMessage, Prompt, PromptBuilder, PromptKind, Role};
use llmspeed::workload::tokenizer::{HubCache, LocalTokenizer, TokenizerError};
use proptest::prelude::*;

/// A WordLevel model over whitespace-split words with a `[BOS]` added by the post-processor,
/// and a truncation to 4 tokens that loading must switch off. Every whitespace-separated piece
/// is exactly one token (known or `[UNK]`), so the true count of `s` is
/// `s.split_whitespace().count() + 1`.
const WORD_LEVEL: &str = r#"{
  "version": "1.0",
  "truncation": {"direction": "Right", "max_length": 4, "strategy": "LongestFirst", "stride": 0},
  "padding": null,
  "added_tokens": [
    {"id": 0, "content": "[UNK]", "single_word": false, "lstrip": false, "rstrip": false, "normalized": false, "special": true},
    {"id": 1, "content": "[BOS]", "single_word": false, "lstrip": false, "rstrip": false, "normalized": false, "special": true}
  ],
  "normalizer": {"type": "Lowercase"},
  "pre_tokenizer": {"type": "WhitespaceSplit"},
  "post_processor": {
    "type": "TemplateProcessing",
    "single": [{"SpecialToken": {"id": "[BOS]", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}}],
    "pair": [{"SpecialToken": {"id": "[BOS]", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}}, {"Sequence": {"id": "B", "type_id": 1}}],
    "special_tokens": {"[BOS]": {"id": "[BOS]", "ids": [1], "tokens": ["[BOS]"]}}
  },
  "decoder": null,
  "model": {"type": "WordLevel", "vocab": {"[UNK]": 0, "[BOS]": 1, "the": 2, "cat": 3, "sat": 4, "on": 5, "mat.": 6}, "unk_token": "[UNK]"}
}"#;

/// A small BPE: pieces split on whitespace and punctuation, `a b -> ab`, `ab c -> abc`.
const BPE: &str = r#"{
  "version": "1.0",
  "truncation": null,
  "padding": null,
  "added_tokens": [],
  "normalizer": null,
  "pre_tokenizer": {"type": "Whitespace"},
  "post_processor": null,
  "decoder": null,
  "model": {
    "type": "BPE", "dropout": null, "unk_token": null, "continuing_subword_prefix": null,
    "end_of_word_suffix": null, "fuse_unk": false, "byte_fallback": false, "ignore_merges": false,
    "vocab": {"a": 0, "b": 1, "c": 2, "!": 3, "ab": 4, "abc": 5},
    "merges": ["a b", "ab c"]
  }
}"#;

fn write(dir: &Path, rel: &str, json: &str) -> PathBuf {
    let p = dir.join(rel);
    std::fs::create_dir_all(p.parent().unwrap()).unwrap();
    std::fs::write(&p, json).unwrap();
    p
}

fn naive_word_level(s: &str) -> u64 {
    s.split_whitespace().count() as u64 + 1
}

#[test]
fn counts_are_exact_and_ignore_the_files_truncation() {
    let dir = tempfile::tempdir().unwrap();
    let f = write(dir.path(), "wl/tokenizer.json", WORD_LEVEL);
    let t = LocalTokenizer::load(f.to_str().unwrap()).unwrap();
    assert_eq!(t.path(), f);
    assert_eq!(t.count("").unwrap(), 1);
    assert_eq!(t.count("The cat sat on the mat.").unwrap(), 7);
    assert_eq!(t.count_with("The cat sat on the mat.", false).unwrap(), 6);
    // Unknown words are one [UNK] each; the file's max_length 4 does not cap the count.
    assert_eq!(t.count("zebra  quagga\n\nokapi the").unwrap(), 5);
    let long = "the cat ".repeat(5000);
    assert_eq!(t.count(&long).unwrap(), 10_001);

    let b = write(dir.path(), "bpe/tokenizer.json", BPE);
    let b = LocalTokenizer::load(b.to_str().unwrap()).unwrap();
    // "ab" -> [ab], "abc" -> [abc], "cab!" -> [c, ab] [!], "ba" -> [b, a]: merges apply within
    // a piece, and no merge joins b to a.
    assert_eq!(b.count("ab abc cab! ba").unwrap(), 7);
}

#[test]
fn loads_by_directory_and_reports_bad_files() {
    let dir = tempfile::tempdir().unwrap();
    let f = write(dir.path(), "model/tokenizer.json", WORD_LEVEL);
    let t = LocalTokenizer::load(dir.path().join("model").to_str().unwrap()).unwrap();
    assert_eq!(t.path(), f);
    assert_eq!(t.count("the cat").unwrap(), 3);

    let bad = write(dir.path(), "bad/tokenizer.json", "{\"model\": 3}");
    let e = LocalTokenizer::load(bad.to_str().unwrap()).unwrap_err();
    assert!(matches!(e, TokenizerError::Load { .. }), "{e}");
    let msg = e.to_string();
    assert!(
        msg.contains("cannot read") && msg.contains("bad/tokenizer.json"),
        "{msg}"
    );
}

/// The only test that touches the process environment (HF_HUB_CACHE), so no lock is needed:
/// every other test loads by path or passes its cache explicitly.
#[test]
fn loads_a_model_id_from_the_hugging_face_cache() {
    let cache = tempfile::tempdir().unwrap();
    let snap = "models--acme--tiny-word/snapshots/0123abcd/tokenizer.json";
    let f = write(cache.path(), snap, WORD_LEVEL);

    std::env::set_var("HF_HUB_CACHE", cache.path());
    let t = LocalTokenizer::load("acme/tiny-word");
    // Offline, so the model missing from the cache is not fetched from huggingface.co.
    std::env::set_var("HF_HUB_OFFLINE", "1");
    let missing = LocalTokenizer::load("acme/absent");
    std::env::remove_var("HF_HUB_OFFLINE");
    std::env::remove_var("HF_HUB_CACHE");

    let t = t.unwrap();
    assert_eq!(t.path(), f);
    assert_eq!(t.count("the cat sat").unwrap(), 4);
    let msg = missing.unwrap_err().to_string();
    assert!(msg.contains("acme/absent"), "{msg}");
    assert!(msg.contains("models--acme--absent/snapshots"), "{msg}");
    assert!(msg.contains(&cache.path().display().to_string()), "{msg}");
    assert!(msg.contains("HF_HUB_OFFLINE"), "{msg}");

    // The same lookup with the cache passed in, without the environment.
    let t = LocalTokenizer::load_with("acme/tiny-word", Some(&HubCache::at(cache.path()))).unwrap();
    assert_eq!(t.path(), f);
}

#[test]
fn prose_calibration_reaches_the_exact_target() {
    let dir = tempfile::tempdir().unwrap();
    let f = write(dir.path(), "tokenizer.json", WORD_LEVEL);
    let t = LocalTokenizer::load(f.to_str().unwrap()).unwrap();
    for (target, seed) in [(200u64, 1u64), (4096, 2), (32_768, 3)] {
        let mut b = PromptBuilder::new("tok", target, seed, PromptKind::Completion);
        let c = b.calibrate(target, |p| t.count_prompt(p), 20).unwrap();
        assert_eq!(c.tokens, target, "target {target}");
        let Prompt::Text(text) = &c.prompt else {
            panic!("completion prompt expected")
        };
        // The counter's answer is the truth, not just self-consistent.
        assert_eq!(naive_word_level(text), target);
        assert!(c.calls <= 20);
    }
}

#[test]
fn chat_prompts_are_left_to_the_server() {
    let dir = tempfile::tempdir().unwrap();
    let f = write(dir.path(), "tokenizer.json", WORD_LEVEL);
    let t = LocalTokenizer::load(f.to_str().unwrap()).unwrap();
    let chat = Prompt::Chat(vec![ChatMessage {
        role: Role::User,
        content: "the cat".into(),
    }]);
    let e = t.count_prompt(&chat).unwrap_err();
    assert!(matches!(e, TokenizerError::ChatTemplate { .. }));
    assert!(e.to_string().contains("count chat prompts with the server"));
    let mut b = PromptBuilder::new("tok", 100, 1, PromptKind::Chat);
    assert!(b.calibrate(100, |p| t.count_prompt(p), 20).is_err());
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    /// The library count equals the naive count for any mix of known words, unknown words,
    /// case and whitespace runs.
    #[test]
    fn word_level_count_matches_naive(
        words in prop::collection::vec("(the|cat|SAT|mat\\.|[a-z]{1,8}|[é☃]{1,3})", 0..60),
        seps in prop::collection::vec("( |  |\n|\t| \n\n)", 0..60),
    ) {
        let dir = tempfile::tempdir().unwrap();
        let f = write(dir.path(), "tokenizer.json", WORD_LEVEL);
        let t = LocalTokenizer::load(f.to_str().unwrap()).unwrap();
        let mut s = String::new();
        for (i, w) in words.iter().enumerate() {
            s.push_str(w);
            s.push_str(seps.get(i).map_or(" ", |x| x.as_str()));
        }
        prop_assert_eq!(t.count(&s).unwrap(), naive_word_level(&s));
    }
}

mod end_to_end {
    //! `--tokenizer` wired into `matrix` and `bench serve`, against the simulated server.
    use super::*;
    use clap::Parser;
    use llmspeed::cli::{Cli, Command};
    use llmspeed::clock::Clock;
    use llmspeed::matrix::status::CellStatus;
    use llmspeed::mock::{MockConfig, Profile};
    use llmspeed::net::{Cancel, Client, ClientConfig, Target};
    use llmspeed::report::PromptTokens;

    /// Runs `f(url)` with the simulated server (fast profile) listening on 127.0.0.1:0.
    /// `llmspeed matrix ARGV` in-process against the server at `url`.
    async fn run_matrix_cli(
        argv: &[&str],
        url: &str,
    ) -> Result<llmspeed::report::MatrixReport, llmspeed::cli::CliError> {
        let Command::Matrix(a) = Cli::try_parse_from(argv).unwrap().command else {
            panic!("not matrix")
        };
        let cfg = llmspeed::cli::matrix::config(&a, url).unwrap();
        let client =
            Client::new(ClientConfig::new(Target::parse(url).unwrap()), Clock::new()).unwrap();
        llmspeed::cli::matrix::run_async(&client, &cfg, false, &Cancel::new()).await
    }

    fn with_mock<T>(f: impl AsyncFnOnce(String) -> T) -> T {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async move {
            let mut m = MockConfig::profile(Profile::Fast);
            // Room for prompts sized by a tokenizer other than the server's: the mock spells
            // words it does not know in several tokens.
            m.max_model_len = 65_536;
            let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
            let url = format!("http://{}", listener.local_addr().unwrap());
            let shutdown = Cancel::new();
            let sd = shutdown.clone();
            let server = tokio::spawn(async move {
                llmspeed::mock::serve(listener, m, async move { sd.cancelled().await }).await
            });
            let out = f(url).await;
            shutdown.cancel();
            server.await.unwrap().unwrap();
            out
        })
    }

    #[test]
    fn matrix_calibrates_with_the_local_tokenizer() {
        let dir = tempfile::tempdir().unwrap();
        let tok = write(dir.path(), "tok/tokenizer.json", WORD_LEVEL);
        let out = dir.path().join("out");
        let report = with_mock(async |url: String| {
            let argv = [
                "llmspeed",
                "matrix",
                "--base-url",
                &url,
                "--tokenizer",
                tok.to_str().unwrap(),
                "--contexts",
                "1000",
                "--prefill-contexts",
                "1000",
                "--concurrency",
                "1",
                "--max-tokens",
                "64",
                "--duration",
                "0.5",
                "--no-prompt-cache",
                "--out",
                out.to_str().unwrap(),
            ];
            run_matrix_cli(&argv, &url).await.unwrap()
        });
        assert_eq!(
            report.metadata.settings.prompt_tokens,
            PromptTokens::LocalTokenizer
        );
        // The prompt was built and sent: the scout and the cell ran on it.
        // (The server's usage count differs: the mock is another tokenizer.)
        assert_eq!(report.prefill.len(), 1);
        assert_eq!(report.prefill[0].status, CellStatus::Valid);
        assert!(report.prefill[0].prompt_tokens.is_some_and(|n| n > 0));
        assert_eq!(report.decode.len(), 1);
        // Measured (a loaded machine's client may be Client-bound at the mock's sub-ms gaps).
        let s = &report.decode[0].status;
        assert!(
            matches!(s, CellStatus::Valid | CellStatus::ClientBound),
            "{s:?}"
        );
        let md = std::fs::read_to_string(out.join("report.md")).unwrap();
        assert!(md.contains("sized with a local tokenizer"), "{md}");
    }

    #[test]
    fn matrix_refuses_chat_with_a_local_tokenizer() {
        let dir = tempfile::tempdir().unwrap();
        let tok = write(dir.path(), "tokenizer.json", WORD_LEVEL);
        let out = dir.path().join("out");
        let e = with_mock(async |url: String| {
            let argv = [
                "llmspeed",
                "matrix",
                "--base-url",
                &url,
                "--tokenizer",
                tok.to_str().unwrap(),
                "--chat",
                "--contexts",
                "1000",
                "--concurrency",
                "1",
                "--out",
                out.to_str().unwrap(),
            ];
            run_matrix_cli(&argv, &url).await.unwrap_err()
        });
        assert!(e.to_string().contains("chat template"), "{e}");
    }

    #[derive(Parser)]
    struct Wrap {
        #[command(flatten)]
        a: llmspeed::bench::vllm::args::ServeArgs,
    }

    /// `bench serve` on the custom `data` file with the tokenizer folder `tok` and `extra`
    /// flags, in-process against the simulated server.
    fn bench_custom(
        tok: &Path,
        data: &Path,
        extra: &[&str],
    ) -> Result<llmspeed::bench::vllm::run::RunOutput, String> {
        with_mock(async |url: String| {
            let mut argv = vec![
                "x",
                "--base-url",
                &url,
                "--dataset-name",
                "custom",
                "--dataset-path",
                data.to_str().unwrap(),
                "--num-prompts",
                "3",
                "--tokenizer",
                tok.to_str().unwrap(),
                "--save-detailed",
            ];
            argv.extend_from_slice(extra);
            let cfg = Wrap::parse_from(argv).a.validate().expect("valid flags");
            let mut log = Vec::new();
            llmspeed::bench::vllm::run::run(&cfg, Clock::new(), &Cancel::new(), &mut log)
                .await
                .map_err(|e| e.to_string())
        })
    }

    fn dataset_lens(out: &llmspeed::bench::vllm::run::RunOutput) -> Vec<u64> {
        out.extras["dataset_input_lens"]
            .as_array()
            .expect("dataset_input_lens")
            .iter()
            .map(|v| v.as_u64().unwrap())
            .collect()
    }

    #[test]
    fn bench_serve_counts_dataset_texts_with_the_local_tokenizer() {
        let dir = tempfile::tempdir().unwrap();
        let tok = write(dir.path(), "tok/tokenizer.json", WORD_LEVEL);
        let prompts = [
            "the cat sat on the mat.",
            "zebra quagga okapi",
            "one two three four five",
        ];
        let jsonl: String = prompts
            .iter()
            .map(|p| format!("{{\"prompt\": \"{p}\", \"output_tokens\": 4}}\n"))
            .collect();
        let data = write(dir.path(), "data.jsonl", &jsonl);
        // vLLM's default wraps each custom prompt in the chat template: a tokenizer without
        // one stops the run before any request, naming the way out.
        let e = bench_custom(tok.parent().unwrap(), &data, &[]).unwrap_err();
        assert!(e.contains("has no chat template"), "{e}");
        assert!(e.contains("--skip-chat-template"), "{e}");
        // --disable-shuffle keeps the file's order (vLLM 0.33 shuffles custom rows by --seed).
        let out = bench_custom(
            tok.parent().unwrap(),
            &data,
            &["--skip-chat-template", "--disable-shuffle"],
        )
        .unwrap();
        assert_eq!(out.extras["prompt_token_counting"], "local_tokenizer");
        // The dataset's lengths are the local tokenizer's counts; the reported input lengths are
        // the server's own (`usage.prompt_tokens`, as vLLM reports them), here the simulated
        // server's tokenizer, which counts these words differently.
        let expected: Vec<u64> = prompts.iter().map(|p| naive_word_level(p)).collect();
        assert_eq!(dataset_lens(&out), expected);
        assert_eq!(out.extras["input_lens_from_server_usage"], 3);
        assert_eq!(
            out.metrics.total_input_tokens,
            out.detailed.input_lens.iter().sum::<u64>()
        );
        // With a template beside the tokenizer, each prompt is wrapped before it is counted:
        // "<u> PROMPT <a>" is the prompt's words, two unknown words and the BOS.
        let templated = write(dir.path(), "tpl/tokenizer.json", WORD_LEVEL);
        write(
            dir.path(),
            "tpl/chat_template.jinja",
            "<{{ messages[0]['role'][0] }}> {{ messages[0]['content'] }}{% if add_generation_prompt %} <a>{% endif %}",
        );
        let out = bench_custom(templated.parent().unwrap(), &data, &["--disable-shuffle"]).unwrap();
        let wrapped: Vec<u64> = prompts.iter().map(|p| naive_word_level(p) + 2).collect();
        assert_eq!(dataset_lens(&out), wrapped);
        assert_eq!(out.extras["prompt_token_counting"], "local_tokenizer");
    }
}
