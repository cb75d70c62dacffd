//! On-disk cache of calibrated prompts, keyed by (tokenizer identity, model, context, seed,
//! kind), so a rerun or a resumed run sends byte-identical prompts without a full calibration.
//! The tokenizer identity (engine, model, vocabulary size, counting dialect, or a local
//! tokenizer's file) keeps a prompt counted by one tokenizer from being reused for another. The
//! caller stores only prompts whose count it confirmed, and re-counts a loaded one before use.
//!
//! Owns the file name scheme, the file format (a small text header, then length-prefixed parts)
//! and atomic replacement (write a temporary file, sync, rename: a crash never leaves a torn
//! prompt behind). The directory is the caller's; this module never picks one, never deletes
//! anything but its own temporary file, and never touches the network.
//!
//! Format, all UTF-8:
//! ```text
//! llmspeed-prompt 2
//! tokenizer <who counted it>
//! model <model id>
//! context <tokens asked for>
//! seed <seed>
//! kind chat|completion
//! tokens <tokens the counter reported>
//! parts <n>
//! part <role|text> <byte length>
//! <that many bytes>
//! ...
//! ```

use crate::workload::prose::{ChatMessage, Prompt, PromptKind, Role};
use std::fmt::Write as _;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

/// Version 2 added the tokenizer line; version-1 files (which could hold prompts counted by a
/// dialect that answered 0) are rejected as foreign.
const MAGIC: &str = "llmspeed-prompt 2";

/// What a cached prompt is for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CacheKey<'a> {
    /// Who counted the prompt (see the module docs); one header line.
    pub tokenizer: &'a str,
    pub model: &'a str,
    pub context: u64,
    pub seed: u64,
    pub kind: PromptKind,
}

/// A cached prompt and its counted size.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CachedPrompt {
    pub prompt: Prompt,
    pub tokens: u64,
}

#[derive(Debug, thiserror::Error)]
pub enum CacheError {
    #[error("prompt cache {path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("prompt cache {path}: not a valid cached prompt: {reason}")]
    Corrupt { path: PathBuf, reason: String },
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> CacheError + '_ {
    move |source| CacheError::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// FNV-1a over the full key: the readable part of the file name is lossy (model ids carry `/`).
fn key_hash(key: &CacheKey) -> u64 {
    let mut h: u64 = 0xCBF2_9CE4_8422_2325;
    let mut feed = |bytes: &[u8]| {
        for &b in bytes {
            h = (h ^ b as u64).wrapping_mul(0x100_0000_01B3);
        }
        h = (h ^ 0xFF).wrapping_mul(0x100_0000_01B3);
    };
    feed(key.tokenizer.as_bytes());
    feed(key.model.as_bytes());
    feed(&key.context.to_le_bytes());
    feed(&key.seed.to_le_bytes());
    feed(key.kind.as_str().as_bytes());
    h
}

/// Where the prompt for `key` lives under `dir`.
pub fn path_for(dir: &Path, key: &CacheKey) -> PathBuf {
    let model: String = key
        .model
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '.' || c == '-' || c == '_' {
                c
            } else {
                '_'
            }
        })
        .take(80)
        .collect();
    dir.join(format!(
        "{model}-{}-{}-{}-{:016x}.prompt",
        key.context,
        key.seed,
        key.kind.as_str(),
        key_hash(key)
    ))
}

/// Serialise a cached prompt in the file format above.
pub fn encode(key: &CacheKey, cached: &CachedPrompt) -> String {
    let mut s = String::with_capacity(cached.prompt.text_len() + 256);
    // `model` is one header line: a newline in it would break the format, so refuse it early
    // by escaping (model ids never contain one in practice).
    let model = key.model.replace(['\n', '\r'], " ");
    let tokenizer = key.tokenizer.replace(['\n', '\r'], " ");
    let _ = writeln!(s, "{MAGIC}");
    let _ = writeln!(s, "tokenizer {tokenizer}");
    let _ = writeln!(s, "model {model}");
    let _ = writeln!(s, "context {}", key.context);
    let _ = writeln!(s, "seed {}", key.seed);
    let _ = writeln!(s, "kind {}", key.kind.as_str());
    let _ = writeln!(s, "tokens {}", cached.tokens);
    match &cached.prompt {
        Prompt::Chat(msgs) => {
            let _ = writeln!(s, "parts {}", msgs.len());
            for m in msgs {
                let _ = writeln!(s, "part {} {}", m.role.as_str(), m.content.len());
                s.push_str(&m.content);
                s.push('\n');
            }
        }
        Prompt::Text(t) => {
            let _ = writeln!(s, "parts 1");
            let _ = writeln!(s, "part text {}", t.len());
            s.push_str(t);
            s.push('\n');
        }
    }
    s
}

/// Parse the file format; the key must match what the header says.
pub fn decode<'d>(path: &Path, key: &CacheKey, data: &'d str) -> Result<CachedPrompt, CacheError> {
    let corrupt = |reason: String| CacheError::Corrupt {
        path: path.to_path_buf(),
        reason,
    };
    let mut rest = data;
    let line = |rest: &mut &'d str, what: &str| -> Result<&'d str, CacheError> {
        let (l, r) = rest
            .split_once('\n')
            .ok_or_else(|| corrupt(format!("file ends before the {what} line")))?;
        *rest = r;
        Ok(l)
    };
    if line(&mut rest, "first")? != MAGIC {
        return Err(corrupt(format!("does not start with '{MAGIC}'")));
    }
    let model = key.model.replace(['\n', '\r'], " ");
    let expect = [
        ("tokenizer", key.tokenizer.replace(['\n', '\r'], " ")),
        ("model", model),
        ("context", key.context.to_string()),
        ("seed", key.seed.to_string()),
        ("kind", key.kind.as_str().to_string()),
    ];
    for (name, want) in &expect {
        let l = line(&mut rest, name)?;
        let got = l
            .strip_prefix(name)
            .and_then(|v| v.strip_prefix(' '))
            .ok_or_else(|| corrupt(format!("expected a '{name}' line, found '{l}'")))?;
        if got != want {
            return Err(corrupt(format!("{name} is '{got}', expected '{want}'")));
        }
    }
    let number = |l: &str, name: &str| -> Result<u64, CacheError> {
        l.strip_prefix(name)
            .and_then(|v| v.strip_prefix(' '))
            .and_then(canonical_number)
            .ok_or_else(|| corrupt(format!("expected '{name} <number>', found '{l}'")))
    };
    let tokens = number(line(&mut rest, "tokens")?, "tokens")?;
    if tokens == 0 {
        return Err(corrupt("a prompt counted as 0 tokens".into()));
    }
    let parts = number(line(&mut rest, "parts")?, "parts")?;
    if parts == 0 || parts > 64 {
        return Err(corrupt(format!("{parts} parts")));
    }
    let mut contents: Vec<(String, String)> = Vec::new();
    for _ in 0..parts {
        let header = line(&mut rest, "part")?;
        let mut it = header.splitn(3, ' ');
        let (tag, label, len) = (it.next(), it.next(), it.next());
        let (Some("part"), Some(label), Some(len)) = (tag, label, len) else {
            return Err(corrupt(format!(
                "expected 'part <role> <bytes>', found '{header}'"
            )));
        };
        let len = canonical_number(len)
            .and_then(|n| usize::try_from(n).ok())
            .ok_or_else(|| corrupt(format!("bad part length '{len}'")))?;
        if rest.len() < len + 1 || !rest.is_char_boundary(len) || rest.as_bytes()[len] != b'\n' {
            return Err(corrupt(format!(
                "part '{label}' of {len} bytes is cut short"
            )));
        }
        contents.push((label.to_string(), rest[..len].to_string()));
        rest = &rest[len + 1..];
    }
    if !rest.is_empty() {
        return Err(corrupt(format!("{} stray bytes at the end", rest.len())));
    }
    let prompt = match key.kind {
        PromptKind::Completion => match contents.as_slice() {
            [(label, text)] if label == "text" => Prompt::Text(text.clone()),
            _ => return Err(corrupt("a completion prompt has one 'text' part".into())),
        },
        PromptKind::Chat => Prompt::Chat(
            contents
                .into_iter()
                .map(|(label, content)| {
                    Role::parse(&label)
                        .map(|role| ChatMessage { role, content })
                        .ok_or_else(|| corrupt(format!("unknown role '{label}'")))
                })
                .collect::<Result<_, _>>()?,
        ),
    };
    Ok(CachedPrompt { prompt, tokens })
}

/// Digits only, no sign, no leading zero: one spelling per number, so a file that decodes
/// re-encodes to the same bytes.
fn canonical_number(s: &str) -> Option<u64> {
    let ok =
        !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit()) && (s == "0" || !s.starts_with('0'));
    if ok {
        s.parse().ok()
    } else {
        None
    }
}

/// The cached prompt for `key`, `Ok(None)` when there is none. A file that exists but does not
/// parse is an error, so a damaged cache is noticed rather than silently recalibrated each run.
pub fn load(dir: &Path, key: &CacheKey) -> Result<Option<CachedPrompt>, CacheError> {
    let path = path_for(dir, key);
    let data = match std::fs::read(&path) {
        Ok(d) => d,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(io(&path)(e)),
    };
    let data = String::from_utf8(data).map_err(|_| CacheError::Corrupt {
        path: path.clone(),
        reason: "not UTF-8".into(),
    })?;
    decode(&path, key, &data).map(Some)
}

/// Store `cached` for `key` under `dir` (created if missing), replacing any earlier file
/// atomically. Returns the file's path.
pub fn store(dir: &Path, key: &CacheKey, cached: &CachedPrompt) -> Result<PathBuf, CacheError> {
    let path = path_for(dir, key);
    if cached.tokens == 0 {
        return Err(CacheError::Corrupt {
            path,
            reason: "a prompt counted as 0 tokens is never stored".into(),
        });
    }
    if cached.prompt.kind() != key.kind {
        return Err(CacheError::Corrupt {
            path,
            reason: format!(
                "a {} prompt cannot be stored under a {} key",
                cached.prompt.kind().as_str(),
                key.kind.as_str()
            ),
        });
    }
    std::fs::create_dir_all(dir).map_err(io(dir))?;
    // Unique per process and call, so two writers never share a temporary file.
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let tmp = path.with_extension(format!(
        "prompt.tmp.{}.{}",
        std::process::id(),
        COUNTER.fetch_add(1, Ordering::Relaxed)
    ));
    let result = (|| {
        let mut f = std::fs::File::create(&tmp)?;
        f.write_all(encode(key, cached).as_bytes())?;
        f.sync_all()?;
        std::fs::rename(&tmp, &path)
    })();
    if let Err(e) = result {
        let _ = std::fs::remove_file(&tmp);
        return Err(io(&path)(e));
    }
    Ok(path)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::workload::prose::PromptBuilder;

    fn key(kind: PromptKind) -> CacheKey<'static> {
        CacheKey {
            tokenizer: "vllm model=gemma vocab=unknown tokenize=prompt",
            model: "RedHatAI/gemma-4-26B-A4B-it-NVFP4",
            context: 8192,
            seed: 7,
            kind,
        }
    }

    #[test]
    fn round_trip_both_kinds() {
        let dir = tempfile::tempdir().unwrap();
        for kind in [PromptKind::Chat, PromptKind::Completion] {
            let k = key(kind);
            assert!(load(dir.path(), &k).unwrap().is_none());
            let prompt = PromptBuilder::new("run", 8192, 7, kind).build(3000);
            let cached = CachedPrompt {
                prompt,
                tokens: 4321,
            };
            let path = store(dir.path(), &k, &cached).unwrap();
            assert!(path.starts_with(dir.path()));
            let name = path.file_name().unwrap().to_str().unwrap();
            assert!(
                name.starts_with("RedHatAI_gemma-4-26B-A4B-it-NVFP4-8192-7-"),
                "{name}"
            );
            assert_eq!(load(dir.path(), &k).unwrap(), Some(cached.clone()));
            // Replacing is fine and leaves no temporary files.
            store(dir.path(), &k, &cached).unwrap();
        }
        let files: Vec<_> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        assert_eq!(files.len(), 2, "{files:?}");
        assert!(files.iter().all(|f| f.ends_with(".prompt")));
    }

    #[test]
    fn keys_do_not_collide() {
        let d = Path::new("/x");
        let a = key(PromptKind::Chat);
        let variants = [
            CacheKey { model: "a/b", ..a },
            CacheKey { model: "a_b", ..a },
            CacheKey {
                tokenizer: "llama.cpp model=a vocab=679 tokenize=content",
                ..a
            },
            CacheKey { seed: 8, ..a },
            CacheKey { context: 8193, ..a },
            CacheKey {
                kind: PromptKind::Completion,
                ..a
            },
            a,
        ];
        let paths: std::collections::HashSet<_> = variants.iter().map(|k| path_for(d, k)).collect();
        assert_eq!(paths.len(), variants.len());
    }

    #[test]
    fn content_with_newlines_and_unicode_survives() {
        let k = key(PromptKind::Chat);
        let cached = CachedPrompt {
            prompt: Prompt::Chat(vec![ChatMessage {
                role: Role::User,
                content: "line one\npart user 99\n\nünïcødé — end\n".into(),
            }]),
            tokens: 12,
        };
        let text = encode(&k, &cached);
        assert_eq!(decode(Path::new("p"), &k, &text).unwrap(), cached);
    }

    #[test]
    fn damaged_files_are_errors_naming_the_problem() {
        let dir = tempfile::tempdir().unwrap();
        let k = key(PromptKind::Completion);
        let cached = CachedPrompt {
            prompt: Prompt::Text("hello world".into()),
            tokens: 2,
        };
        let path = store(dir.path(), &k, &cached).unwrap();
        let good = std::fs::read_to_string(&path).unwrap();
        let cases = [
            (good.replace("llmspeed-prompt 2", "nope"), "does not start"),
            (
                good.replace("llmspeed-prompt 2", "llmspeed-prompt 1"),
                "does not start",
            ),
            (good.replace("tokens 2", "tokens 0"), "0 tokens"),
            (
                good.replace("tokenize=prompt", "tokenize=content"),
                "tokenizer is",
            ),
            (good[..good.len() - 4].to_string(), "cut short"),
            (
                good.replace("seed 7", "seed 8"),
                "seed is '8', expected '7'",
            ),
            (
                good.replace("tokens 2", "tokens x"),
                "expected 'tokens <number>'",
            ),
            (format!("{good}junk"), "stray bytes"),
        ];
        for (text, want) in cases {
            std::fs::write(&path, &text).unwrap();
            let e = load(dir.path(), &k).unwrap_err().to_string();
            assert!(e.contains(want), "{e}");
            assert!(e.contains(path.to_str().unwrap()), "{e}");
        }
    }

    #[test]
    fn a_zero_token_prompt_is_never_stored() {
        let dir = tempfile::tempdir().unwrap();
        let k = key(PromptKind::Completion);
        let cached = CachedPrompt {
            prompt: Prompt::Text("hello world".into()),
            tokens: 0,
        };
        let e = store(dir.path(), &k, &cached).unwrap_err().to_string();
        assert!(e.contains("0 tokens"), "{e}");
        assert!(load(dir.path(), &k).unwrap().is_none());
    }

    mod props {
        use super::super::*;
        use proptest::prelude::*;

        proptest! {
            #[test]
            fn decode_never_panics(s in "\\PC{0,200}") {
                let k = CacheKey { tokenizer: "t", model: "m", context: 1, seed: 2, kind: PromptKind::Chat };
                let _ = decode(Path::new("p"), &k, &s);
            }

            /// Damage anywhere in a real file gives an error or a prompt, never a panic.
            #[test]
            fn damaged_files_never_panic(cut in 0usize..400, byte in 0u8..128, at in 0usize..400) {
                let k = CacheKey { tokenizer: "t", model: "m", context: 1, seed: 2, kind: PromptKind::Chat };
                let cached = CachedPrompt {
                    prompt: Prompt::Chat(vec![
                        ChatMessage { role: Role::User, content: "héllo\nworld".into() },
                        ChatMessage { role: Role::Assistant, content: "ok".into() },
                    ]),
                    tokens: 9,
                };
                let mut bytes = encode(&k, &cached).into_bytes();
                let at = at % bytes.len();
                bytes[at] = byte;
                bytes.truncate(cut.min(bytes.len()));
                if let Ok(text) = String::from_utf8(bytes) {
                    let _ = decode(Path::new("p"), &k, &text);
                }
            }
        }
    }
}
