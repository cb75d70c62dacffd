//! `--tokenizer` with a real `tokenizers` build: hand-written `tokenizer.json` files loaded by
//! path, by directory and by model id through a fake Hugging Face cache; exact counts; prose
//! calibration reaching its target. Needs `--features hf-tokenizer` (CI runs it so); the error
//! without the feature is a unit test in `src/workload/tokenizer.rs`.
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
    let missing = LocalTokenizer::load("acme/absent");
    std::env::remove_var("HF_HUB_CACHE");

    let t = t.unwrap();
    assert_eq!(t.path(), f);
    assert_eq!(t.count("the cat sat").unwrap(), 4);
    let msg = missing.unwrap_err().to_string();
    assert!(msg.contains("acme/absent"), "{msg}");
    assert!(msg.contains("models--acme--absent/snapshots"), "{msg}");
    assert!(msg.contains("HF_HUB_CACHE"), "{msg}");

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
