//! Local Hugging Face tokenizers (`--tokenizer`): count prompt tokens on this machine, so prompt
//! calibration needs neither the server's `/tokenize` nor `usage.prompt_tokens`.
//!
//! Owns: resolving a `--tokenizer` spec (a `tokenizer.json`, a directory holding one, or a model
//! id found in the local Hugging Face cache) and counting the tokens of a text with it.
//!
//! Must never: reach the network itself (a model id missing from the cache is fetched by
//! `workload::hub`, the way `huggingface_hub` does), or run on the per-token path — counting
//! happens while prompts are built, before any request is sent. The `tokenizers` crate is behind
//! the `hf-tokenizer` feature, on in the default build; built without it
//! (`--no-default-features`) the same API exists and [`LocalTokenizer::load`] says how to rebuild.
//!
//! Also finds the tokenizer's chat template files beside its `tokenizer.json` ([`chat_template`];
//! `workload::chat_template` renders them), which the drop-ins use to wrap dataset prompts as the
//! reference tools do. Chat requests are still not counted here: the server renders their
//! template and counts them (`/tokenize` with `messages`, or `usage.prompt_tokens`);
//! [`LocalTokenizer::count_prompt`] answers [`TokenizerError::ChatTemplate`] for them.

use std::ffi::OsString;
use std::fmt;
use std::path::{Path, PathBuf};

use super::chat_template::ChatTemplate;
use super::prose::Prompt;

/// The file a directory or a cache snapshot must contain.
pub const TOKENIZER_FILE: &str = "tokenizer.json";

/// Errors of resolving, loading and using a local tokenizer. One line each.
#[derive(Debug, thiserror::Error)]
pub enum TokenizerError {
    #[error(
        "--tokenizer: built without the hf-tokenizer feature; rebuild with --features hf-tokenizer"
    )]
    NotBuilt,
    #[error("--tokenizer: {path} is a directory without a {TOKENIZER_FILE}")]
    NoFileInDir { path: PathBuf },
    #[error(
        "--tokenizer: {spec:?} is neither an existing file or directory nor a model id (org/name)"
    )]
    BadSpec { spec: String },
    #[error(
        "--tokenizer: model {model} not found in the local Hugging Face cache; looked in {looked}"
    )]
    NotInCache { model: String, looked: String },
    #[error(
        "--tokenizer: no Hugging Face cache directory: none of HF_HUB_CACHE, HF_HOME, HOME is set"
    )]
    NoCacheDir,
    #[error("--tokenizer: cannot read {path}: {message}")]
    Load { path: PathBuf, message: String },
    #[error("tokenizer {path}: encoding failed: {message}")]
    Encode { path: PathBuf, message: String },
    #[error("tokenizer {path}: decoding failed: {message}")]
    Decode { path: PathBuf, message: String },
    #[error("--tokenizer: {0}")]
    Hub(#[from] Box<super::hub::HubError>),
    #[error("tokenizer {path}: chat prompts need the model's chat template, which is not applied locally; count chat prompts with the server")]
    ChatTemplate { path: PathBuf },
    #[error("--tokenizer: {0}")]
    Template(#[from] super::chat_template::ChatTemplateError),
}

/// Where the local Hugging Face hub cache is, and which setting said so (for error messages).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HubCache {
    pub dir: PathBuf,
    /// `"HF_HUB_CACHE"`, `"HF_HOME"`, `"HOME"` or `"given"`.
    pub source: &'static str,
}

impl HubCache {
    pub fn at(dir: impl Into<PathBuf>) -> Self {
        Self {
            dir: dir.into(),
            source: "given",
        }
    }

    /// The cache the `huggingface_hub` library would use: `$HF_HUB_CACHE`, else `$HF_HOME/hub`,
    /// else `~/.cache/huggingface/hub`.
    pub fn from_env() -> Option<Self> {
        Self::from_vars(|k| std::env::var_os(k))
    }

    /// [`HubCache::from_env`] over any variable lookup, so the rule is testable without touching
    /// the process environment. Empty values count as unset, as in `huggingface_hub`.
    pub fn from_vars(get: impl Fn(&str) -> Option<OsString>) -> Option<Self> {
        let get = |k: &str| get(k).filter(|v| !v.is_empty());
        if let Some(d) = get("HF_HUB_CACHE") {
            return Some(Self {
                dir: d.into(),
                source: "HF_HUB_CACHE",
            });
        }
        if let Some(h) = get("HF_HOME") {
            return Some(Self {
                dir: PathBuf::from(h).join("hub"),
                source: "HF_HOME",
            });
        }
        get("HOME").map(|h| Self {
            dir: PathBuf::from(h).join(".cache/huggingface/hub"),
            source: "HOME",
        })
    }

    /// The `tokenizer.json` of `model` (`org/name` or `name`) in this cache: the snapshot that
    /// `refs/main` names when it has one, else the most recently modified snapshot that has one.
    pub fn find(&self, model: &str) -> Result<PathBuf, TokenizerError> {
        let file = tokenizer_file(model);
        let snapshots = self.dir.join(file.folder()).join("snapshots");
        super::hub::cached(&self.dir, &file).ok_or_else(|| TokenizerError::NotInCache {
            model: model.to_string(),
            looked: format!(
                "{}/<rev>/{TOKENIZER_FILE} (cache from {}; {})",
                snapshots.display(),
                self.source,
                if snapshots.is_dir() {
                    "no snapshot has one"
                } else {
                    "no such directory"
                }
            ),
        })
    }
}

/// A model's `tokenizer.json` on the hub, as `--tokenizer` names it.
fn tokenizer_file(model: &str) -> super::hub::HubFile<'_> {
    super::hub::HubFile {
        kind: super::hub::RepoKind::Model,
        repo: model,
        file: TOKENIZER_FILE,
        flag: "--tokenizer",
    }
}

/// Turns a `--tokenizer` spec into the path of a `tokenizer.json`: an existing file is taken
/// as is, an existing directory must contain one, anything else that looks like a model id is
/// looked up in `cache`. Does not parse the file.
pub fn resolve_with(spec: &str, cache: Option<&HubCache>) -> Result<PathBuf, TokenizerError> {
    let p = Path::new(spec);
    if p.is_file() {
        return Ok(p.to_path_buf());
    }
    if p.is_dir() {
        let f = p.join(TOKENIZER_FILE);
        return if f.is_file() {
            Ok(f)
        } else {
            Err(TokenizerError::NoFileInDir {
                path: p.to_path_buf(),
            })
        };
    }
    if !looks_like_model_id(spec) {
        return Err(TokenizerError::BadSpec {
            spec: spec.to_string(),
        });
    }
    cache.ok_or(TokenizerError::NoCacheDir)?.find(spec)
}

/// [`resolve_with`] using the cache named by the environment; a model id not in the cache is
/// downloaded into it from the hub (`workload::hub`), as vLLM and SGLang do.
pub fn resolve(spec: &str) -> Result<PathBuf, TokenizerError> {
    let cache = HubCache::from_env();
    match (resolve_with(spec, cache.as_ref()), &cache) {
        (Err(TokenizerError::NotInCache { model, .. }), Some(c)) => Ok(super::hub::get(
            &c.dir,
            &tokenizer_file(&model),
            &super::hub::HubSettings::from_env(),
        )?),
        (r, _) => r,
    }
}

/// The chat template of the tokenizer `spec` names, whose `tokenizer.json` resolved to
/// `tokenizer_json`: the template files beside it (`workload::chat_template`). For a hub id whose
/// cached snapshot lacks `tokenizer_config.json`, the hub's `tokenizer_config.json`,
/// `chat_template.jinja` and `special_tokens_map.json` are fetched as `tokenizer.json` was (one the
/// repository does not have, or that is not cached with `HF_HUB_OFFLINE`, is absent; named templates under `additional_chat_templates/` are
/// read from local folders only: finding them needs the hub's file listing). `None`: the
/// tokenizer has no chat template.
pub fn chat_template(
    spec: &str,
    tokenizer_json: &Path,
) -> Result<Option<ChatTemplate>, TokenizerError> {
    use super::chat_template::{CONFIG_FILE, SPECIAL_TOKENS_FILE, TEMPLATE_FILE};
    let dir = tokenizer_json.parent().unwrap_or(Path::new("."));
    let from_hub = !Path::new(spec).exists() && looks_like_model_id(spec);
    if !from_hub || dir.join(CONFIG_FILE).is_file() || dir.join(TEMPLATE_FILE).is_file() {
        return Ok(ChatTemplate::load_dir(dir)?);
    }
    let cache = HubCache::from_env().ok_or(TokenizerError::NoCacheDir)?;
    let settings = super::hub::HubSettings::from_env();
    let mut texts: Vec<Option<String>> = Vec::new();
    for name in [TEMPLATE_FILE, CONFIG_FILE, SPECIAL_TOKENS_FILE] {
        let file = super::hub::HubFile {
            file: name,
            ..tokenizer_file(spec)
        };
        let path = match super::hub::get(&cache.dir, &file, &settings) {
            Ok(p) => p,
            Err(e) if is_not_found(&e) => {
                texts.push(None);
                continue;
            }
            Err(e) => return Err(e.into()),
        };
        texts.push(Some(std::fs::read_to_string(&path).map_err(|e| {
            TokenizerError::Load {
                path: path.clone(),
                message: e.to_string(),
            }
        })?));
    }
    let files = super::chat_template::TemplateFiles {
        jinja: texts[0].as_deref(),
        named: Vec::new(),
        config: texts[1].as_deref(),
        special_tokens_map: texts[2].as_deref(),
    };
    Ok(ChatTemplate::parse(&dir.display().to_string(), &files)?)
}

/// The hub answered that the repository has no such file, or offline the cache lacks it (as
/// `transformers` takes an optional file missing from the cache when offline).
fn is_not_found(e: &super::hub::HubError) -> bool {
    matches!(
        e,
        super::hub::HubError::Offline { .. }
            | super::hub::HubError::Download {
                cause: crate::net::fetch::FetchError::Status { status: 404, .. },
                ..
            }
    )
}

/// `name` or `org/name` with the characters the hub allows; anything path-like (absolute,
/// relative with dots, several slashes, a file extension on a lone name) is not an id, so a
/// mistyped path is reported as a path rather than searched for in the cache.
pub(crate) fn looks_like_model_id(spec: &str) -> bool {
    let parts: Vec<&str> = spec.split('/').collect();
    let ok_part = |s: &str| {
        !s.is_empty()
            && !s.starts_with('.')
            && !s.starts_with('-')
            && s.chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
    };
    match parts.as_slice() {
        [name] => ok_part(name) && !name.ends_with(".json"),
        [org, name] => ok_part(org) && ok_part(name),
        _ => false,
    }
}

/// A `tokenizer.json` loaded for counting. Truncation and padding configured in the file are
/// switched off: a tokenizer saved with `max_length: 512` would otherwise cap every count.
pub struct LocalTokenizer {
    path: PathBuf,
    inner: Inner,
    /// Whether [`LocalTokenizer::decode`] cleans up spaces before punctuation as
    /// `transformers` 5 does: `clean_up_tokenization_spaces` in the `tokenizer_config.json`
    /// beside the file, skipped for a BPE model unless that file also forces it.
    #[cfg_attr(not(feature = "hf-tokenizer"), allow(dead_code))]
    clean_up: bool,
}

#[cfg(feature = "hf-tokenizer")]
type Inner = tokenizers::Tokenizer;

/// Without the feature no tokenizer can be loaded, so a `LocalTokenizer` cannot exist.
#[cfg(not(feature = "hf-tokenizer"))]
enum Inner {}

impl fmt::Debug for LocalTokenizer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LocalTokenizer")
            .field("path", &self.path)
            .finish_non_exhaustive()
    }
}

impl LocalTokenizer {
    /// Whether this build can load tokenizers at all.
    pub const AVAILABLE: bool = cfg!(feature = "hf-tokenizer");

    /// Loads the tokenizer a `--tokenizer` spec names (see [`resolve`]).
    pub fn load(spec: &str) -> Result<Self, TokenizerError> {
        if !Self::AVAILABLE {
            return Err(TokenizerError::NotBuilt);
        }
        Self::load_file(&resolve(spec)?)
    }

    /// Loads the tokenizer a spec names, looking model ids up in `cache` (tests, callers that
    /// resolved the cache themselves).
    pub fn load_with(spec: &str, cache: Option<&HubCache>) -> Result<Self, TokenizerError> {
        if !Self::AVAILABLE {
            return Err(TokenizerError::NotBuilt);
        }
        Self::load_file(&resolve_with(spec, cache)?)
    }

    /// Loads a `tokenizer.json` file.
    #[cfg(feature = "hf-tokenizer")]
    pub fn load_file(path: &Path) -> Result<Self, TokenizerError> {
        let load_err = |message: String| TokenizerError::Load {
            path: path.to_path_buf(),
            message,
        };
        let mut t = tokenizers::Tokenizer::from_file(path).map_err(|e| load_err(e.to_string()))?;
        t.with_truncation(None)
            .map_err(|e| load_err(e.to_string()))?;
        t.with_padding(None);
        let config = path
            .parent()
            .map(|d| d.join(super::chat_template::CONFIG_FILE))
            .and_then(|f| std::fs::read_to_string(f).ok())
            .and_then(|text| serde_json::from_str::<serde_json::Value>(&text).ok());
        let flag = |key: &str| {
            config
                .as_ref()
                .and_then(|c| c.get(key))
                .and_then(serde_json::Value::as_bool)
                .unwrap_or(false)
        };
        let bpe = matches!(t.get_model(), tokenizers::ModelWrapper::BPE(_));
        let clean_up = flag("clean_up_tokenization_spaces")
            && (!bpe
                || flag("clean_up_tokenization_spaces_for_bpe_even_though_it_will_corrupt_output"));
        Ok(Self {
            path: path.to_path_buf(),
            inner: t,
            clean_up,
        })
    }

    /// Loads a `tokenizer.json` file.
    #[cfg(not(feature = "hf-tokenizer"))]
    pub fn load_file(_path: &Path) -> Result<Self, TokenizerError> {
        Err(TokenizerError::NotBuilt)
    }

    /// The `tokenizer.json` this was loaded from (for reports: which counter was used).
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Tokens of `text` as a completions prompt: with the special tokens the tokenizer adds
    /// (BOS and the like), because servers add them too — vLLM's `/tokenize` and
    /// `/v1/completions` both default to `add_special_tokens: true`.
    pub fn count(&self, text: &str) -> Result<u64, TokenizerError> {
        self.count_with(text, true)
    }

    /// The special tokens the tokenizer adds to one text (transformers'
    /// `num_special_tokens_to_add()`: its post-processor's, e.g. 1 for a BOS).
    #[cfg(feature = "hf-tokenizer")]
    pub fn num_special_tokens(&self) -> u32 {
        use tokenizers::PostProcessor;
        self.inner
            .get_post_processor()
            .map_or(0, |p| p.added_tokens(false) as u32)
    }

    /// The special tokens the tokenizer adds to one text.
    #[cfg(not(feature = "hf-tokenizer"))]
    pub fn num_special_tokens(&self) -> u32 {
        match self.inner {}
    }

    /// The vocabulary's size without added tokens (transformers' `vocab_size`).
    #[cfg(feature = "hf-tokenizer")]
    pub fn vocab_size(&self) -> u32 {
        self.inner.get_vocab_size(false) as u32
    }

    /// The vocabulary's size without added tokens.
    #[cfg(not(feature = "hf-tokenizer"))]
    pub fn vocab_size(&self) -> u32 {
        match self.inner {}
    }

    /// Tokens of `text`, with or without the tokenizer's special tokens.
    #[cfg(feature = "hf-tokenizer")]
    pub fn count_with(&self, text: &str, add_special_tokens: bool) -> Result<u64, TokenizerError> {
        // encode_fast skips the offsets we would throw away.
        self.inner
            .encode_fast(text, add_special_tokens)
            .map(|e| e.len() as u64)
            .map_err(|e| TokenizerError::Encode {
                path: self.path.clone(),
                message: e.to_string(),
            })
    }

    /// Tokens of `text`, with or without the tokenizer's special tokens.
    #[cfg(not(feature = "hf-tokenizer"))]
    pub fn count_with(
        &self,
        _text: &str,
        _add_special_tokens: bool,
    ) -> Result<u64, TokenizerError> {
        match self.inner {}
    }

    /// The ids of `text`, with or without the tokenizer's special tokens (`transformers`'
    /// `encode(text, add_special_tokens=...)`).
    #[cfg(feature = "hf-tokenizer")]
    pub fn encode(&self, text: &str, add_special_tokens: bool) -> Result<Vec<u32>, TokenizerError> {
        self.inner
            .encode_fast(text, add_special_tokens)
            .map(|e| e.get_ids().to_vec())
            .map_err(|e| TokenizerError::Encode {
                path: self.path.clone(),
                message: e.to_string(),
            })
    }

    /// The ids of `text`.
    #[cfg(not(feature = "hf-tokenizer"))]
    pub fn encode(
        &self,
        _text: &str,
        _add_special_tokens: bool,
    ) -> Result<Vec<u32>, TokenizerError> {
        match self.inner {}
    }

    /// The text of `ids` as `transformers` 5's `decode(ids)` gives it: special tokens kept,
    /// then, where the tokenizer's config asks, [`clean_up_tokenization`].
    #[cfg(feature = "hf-tokenizer")]
    pub fn decode(&self, ids: &[u32]) -> Result<String, TokenizerError> {
        let text = self
            .inner
            .decode(ids, false)
            .map_err(|e| TokenizerError::Decode {
                path: self.path.clone(),
                message: e.to_string(),
            })?;
        Ok(match self.clean_up {
            true => clean_up_tokenization(&text),
            false => text,
        })
    }

    /// The text of `ids`.
    #[cfg(not(feature = "hf-tokenizer"))]
    pub fn decode(&self, _ids: &[u32]) -> Result<String, TokenizerError> {
        match self.inner {}
    }

    /// Tokens of a prompt, for [`super::prose::PromptBuilder::calibrate`]. Text prompts only;
    /// chat prompts answer [`TokenizerError::ChatTemplate`] (see the module docs).
    pub fn count_prompt(&self, prompt: &Prompt) -> Result<u64, TokenizerError> {
        match prompt {
            Prompt::Text(t) => self.count(t),
            Prompt::Chat(_) => Err(TokenizerError::ChatTemplate {
                path: self.path.clone(),
            }),
        }
    }
}

/// `transformers`' `clean_up_tokenization`: no space before `.`, `?`, `!` and `,`, nor inside
/// the English contractions it knows.
pub fn clean_up_tokenization(text: &str) -> String {
    [
        (" .", "."),
        (" ?", "?"),
        (" !", "!"),
        (" ,", ","),
        (" ' ", "'"),
        (" n't", "n't"),
        (" 'm", "'m"),
        (" 's", "'s"),
        (" 've", "'ve"),
        (" 're", "'re"),
    ]
    .iter()
    .fold(text.to_string(), |t, (from, to)| t.replace(from, to))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vars(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<OsString> {
        let v: Vec<(String, String)> = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        move |k| {
            v.iter()
                .find(|(kk, _)| kk == k)
                .map(|(_, vv)| OsString::from(vv))
        }
    }

    #[test]
    fn cache_dir_follows_huggingface_hub_precedence() {
        let all = [("HF_HUB_CACHE", "/a"), ("HF_HOME", "/b"), ("HOME", "/c")];
        let c = HubCache::from_vars(vars(&all)).unwrap();
        assert_eq!((c.dir, c.source), (PathBuf::from("/a"), "HF_HUB_CACHE"));
        let c = HubCache::from_vars(vars(&all[1..])).unwrap();
        assert_eq!((c.dir, c.source), (PathBuf::from("/b/hub"), "HF_HOME"));
        let c = HubCache::from_vars(vars(&[("HF_HUB_CACHE", ""), ("HOME", "/c")])).unwrap();
        assert_eq!(
            (c.dir, c.source),
            (PathBuf::from("/c/.cache/huggingface/hub"), "HOME")
        );
        assert_eq!(HubCache::from_vars(vars(&[])), None);
    }

    #[test]
    fn model_ids_and_paths_are_told_apart() {
        for id in [
            "gpt2",
            "Qwen/Qwen3-8B",
            "meta-llama/Llama-3.1-8B-Instruct",
            "a_b/c.d",
        ] {
            assert!(looks_like_model_id(id), "{id}");
        }
        for p in [
            "",
            "/abs/path",
            "./rel",
            "../up/x",
            "a/b/c",
            "tokenizer.json",
            "org/",
            "~/x",
            "a b/c",
        ] {
            assert!(!looks_like_model_id(p), "{p}");
        }
    }

    #[test]
    fn resolution_errors_say_what_was_wrong() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path().to_str().unwrap();
        let e = resolve_with(d, None).unwrap_err().to_string();
        assert!(e.contains("directory without a tokenizer.json"), "{e}");
        let e = resolve_with("./no/such/file.json", None)
            .unwrap_err()
            .to_string();
        assert!(e.contains("neither an existing file"), "{e}");
        let e = resolve_with("org/model", None).unwrap_err().to_string();
        assert!(e.contains("HF_HUB_CACHE, HF_HOME, HOME"), "{e}");
        let cache = HubCache::at(dir.path());
        let e = resolve_with("org/model", Some(&cache))
            .unwrap_err()
            .to_string();
        assert!(e.contains("models--org--model/snapshots"), "{e}");
        assert!(e.contains("no such directory"), "{e}");
        assert!(!e.contains('\n'));
    }

    #[test]
    fn cache_prefers_refs_main_then_newest_snapshot() {
        let dir = tempfile::tempdir().unwrap();
        let repo = dir.path().join("models--org--m");
        for rev in ["aaa", "bbb", "ccc"] {
            std::fs::create_dir_all(repo.join("snapshots").join(rev)).unwrap();
        }
        // ccc has no tokenizer.json, so it never counts even though it is newest by name.
        std::fs::write(repo.join("snapshots/aaa/tokenizer.json"), "{}").unwrap();
        std::fs::write(repo.join("snapshots/bbb/tokenizer.json"), "{}").unwrap();
        let cache = HubCache::at(dir.path());
        // bbb was written last (or in the same mtime tick, where the larger name wins).
        assert!(cache.find("org/m").unwrap().ends_with("bbb/tokenizer.json"));
        std::fs::create_dir_all(repo.join("refs")).unwrap();
        std::fs::write(repo.join("refs/main"), "aaa\n").unwrap();
        assert!(cache.find("org/m").unwrap().ends_with("aaa/tokenizer.json"));
        std::fs::write(repo.join("refs/main"), "ccc").unwrap();
        assert!(cache.find("org/m").unwrap().ends_with("bbb/tokenizer.json"));
        std::fs::remove_file(repo.join("snapshots/aaa/tokenizer.json")).unwrap();
        std::fs::remove_file(repo.join("snapshots/bbb/tokenizer.json")).unwrap();
        let e = cache.find("org/m").unwrap_err().to_string();
        assert!(e.contains("no snapshot has one"), "{e}");
    }

    #[test]
    fn clean_up_takes_the_spaces_transformers_takes() {
        // transformers 5.19's answer for the same text.
        assert_eq!(
            clean_up_tokenization(
                "it 's fine , they 're sure ! is n't it ? yes . i 'm ' ok ' we 've"
            ),
            "it's fine, they're sure! isn't it? yes. i'm'ok'we've"
        );
    }

    /// A WordLevel (`kind` "WordLevel") or BPE model's tokenizer whose decoded text is its tokens
    /// joined by spaces, beside a `tokenizer_config.json` of `config`.
    #[cfg(feature = "hf-tokenizer")]
    fn spaced(dir: &Path, kind: &str, config: &str) -> LocalTokenizer {
        let model = match kind {
            "BPE" => r#"{"type":"BPE","vocab":{"it":0,"'s":1,"fine":2,".":3},"merges":[]}"#,
            _ => r#"{"type":"WordLevel","vocab":{"it":0,"'s":1,"fine":2,".":3},"unk_token":"."}"#,
        };
        let json = format!(
            r#"{{"version":"1.0","truncation":null,"padding":null,"added_tokens":[],
            "normalizer":null,"pre_tokenizer":{{"type":"WhitespaceSplit"}},"post_processor":null,
            "decoder":null,"model":{model}}}"#
        );
        std::fs::write(dir.join("tokenizer.json"), json).unwrap();
        std::fs::write(dir.join("tokenizer_config.json"), config).unwrap();
        LocalTokenizer::load_file(&dir.join("tokenizer.json")).unwrap()
    }

    #[cfg(feature = "hf-tokenizer")]
    #[test]
    fn decode_cleans_up_where_the_config_asks_as_transformers_5_does() {
        let dir = tempfile::tempdir().unwrap();
        let on = r#"{"clean_up_tokenization_spaces": true}"#;
        let t = spaced(dir.path(), "WordLevel", on);
        let ids = t.encode("it 's fine .", false).unwrap();
        assert_eq!(ids, [0, 1, 2, 3]);
        assert_eq!(t.decode(&ids).unwrap(), "it's fine.");
        // Off by default (transformers 5), and skipped for BPE unless forced.
        let t = spaced(dir.path(), "WordLevel", "{}");
        assert_eq!(t.decode(&ids).unwrap(), "it 's fine .");
        let t = spaced(dir.path(), "BPE", on);
        assert_eq!(t.decode(&ids).unwrap(), "it 's fine .");
        let forced = r#"{"clean_up_tokenization_spaces": true,
            "clean_up_tokenization_spaces_for_bpe_even_though_it_will_corrupt_output": true}"#;
        let t = spaced(dir.path(), "BPE", forced);
        assert_eq!(t.decode(&ids).unwrap(), "it's fine.");
    }

    #[cfg(not(feature = "hf-tokenizer"))]
    #[test]
    fn without_the_feature_load_says_how_to_rebuild() {
        let e = LocalTokenizer::load("org/model").unwrap_err();
        assert!(matches!(e, TokenizerError::NotBuilt));
        assert!(e
            .to_string()
            .contains("rebuild with --features hf-tokenizer"));
    }
}
