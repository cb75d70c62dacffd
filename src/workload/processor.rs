//! A model's processor (its chat template and class) found where `transformers`'
//! `AutoProcessor.from_pretrained(name)` finds it, as SGLang's `get_processor` calls it: `name` a
//! local folder, else a hub id whose files come from the Hugging Face cache, else from the hub
//! into that cache (`workload::hub`: `HF_ENDPOINT`, `HF_TOKEN`, `HF_HUB_OFFLINE` honoured).
//!
//! Owns: which files of a hub repository a processor is read from ([`HUB_FILES`]), which of
//! them may be missing, and where the files read are. Reading the template out of them is
//! `workload::chat_template`'s (`ChatTemplate::load_processor_dir`, `ChatTemplate::processor`).
//!
//! Must never: run while requests are sent (it is called once, before the first), or take a
//! repository that has none of the files for a processor (that is an error naming each URL
//! asked and its answer, as `from_pretrained` fails there).

use std::path::{Path, PathBuf};

use super::chat_template::{
    ChatTemplate, ChatTemplateError, Processor, ProcessorFiles, TemplateFiles, CONFIG_FILE,
    PROCESSOR_FILE, PROCESSOR_TEMPLATE_FILE, SPECIAL_TOKENS_FILE, TEMPLATE_FILE,
};
use super::hub::{self, HubError, HubFile, HubSettings, RepoKind};
use super::tokenizer::HubCache;

/// The image processor's settings: `AutoProcessor` reads them; the template does not, but they
/// are fetched so the cache holds what SGLang's processor loads.
pub const PREPROCESSOR_FILE: &str = "preprocessor_config.json";

/// A hub repository's files a processor is read from, in the order they are asked for. Each may
/// be missing from a repository (a 404, or offline not in the cache); not all of them.
pub const HUB_FILES: [&str; 6] = [
    PROCESSOR_FILE,
    PROCESSOR_TEMPLATE_FILE,
    TEMPLATE_FILE,
    PREPROCESSOR_FILE,
    CONFIG_FILE,
    SPECIAL_TOKENS_FILE,
];

/// Why a processor cannot be had. One line each, naming the name and what was tried.
#[derive(Debug, thiserror::Error)]
pub enum ProcessorError {
    #[error("{flag} {name:?} is neither an existing folder nor a hub model id (org/name)")]
    BadName { flag: String, name: String },
    #[error("{flag} {name}: no Hugging Face cache directory: none of HF_HUB_CACHE, HF_HOME, HOME is set")]
    NoCacheDir { flag: String, name: String },
    #[error("{flag} {name}: none of the processor's files could be had: {tried}; without network, put the model's files in {by_hand}, or give {flag} the model's folder")]
    NoFiles {
        flag: String,
        name: String,
        /// Each file's URL and why it is missing, `, `-separated.
        tried: String,
        /// The snapshot folder a user can fill by hand.
        by_hand: String,
    },
    #[error("{flag} {name}: {err}")]
    Hub {
        flag: String,
        name: String,
        err: Box<HubError>,
    },
    #[error("{flag} {name}: cannot read {path}: {message}")]
    Read {
        flag: String,
        name: String,
        path: PathBuf,
        message: String,
    },
    #[error("{0}")]
    Template(#[from] ChatTemplateError),
}

/// The processor of the folder `name`, or of the hub id `name` (cache, then hub). `flag` is the
/// option that gave the name, for messages. Returns the processor and the folder it was read
/// from (for a hub id, the cached snapshot).
pub fn load(name: &str, flag: &str) -> Result<(Processor, PathBuf), ProcessorError> {
    let p = Path::new(name);
    if p.is_dir() {
        return Ok((ChatTemplate::load_processor_dir(p)?, p.to_path_buf()));
    }
    if !super::tokenizer::looks_like_model_id(name) {
        return Err(ProcessorError::BadName {
            flag: flag.into(),
            name: name.into(),
        });
    }
    let cache = HubCache::from_env().ok_or_else(|| ProcessorError::NoCacheDir {
        flag: flag.into(),
        name: name.into(),
    })?;
    from_hub(name, flag, &cache.dir, &HubSettings::from_env())
}

/// [`load`] for a hub id, with the cache folder and hub settings given.
pub fn from_hub(
    name: &str,
    flag: &str,
    cache_dir: &Path,
    settings: &HubSettings,
) -> Result<(Processor, PathBuf), ProcessorError> {
    let mut found: Vec<(&str, PathBuf)> = Vec::new();
    let mut missing: Vec<String> = Vec::new();
    for file in HUB_FILES {
        let f = HubFile {
            kind: RepoKind::Model,
            repo: name,
            file,
            flag,
        };
        match hub::get(cache_dir, &f, settings) {
            Ok(path) => found.push((file, path)),
            Err(e) => match absent(&e) {
                Some(why) => missing.push(why),
                None => {
                    return Err(ProcessorError::Hub {
                        flag: flag.into(),
                        name: name.into(),
                        err: e,
                    })
                }
            },
        }
    }
    let Some((_, first)) = found.first() else {
        let by_hand = hub::by_hand(
            cache_dir,
            &HubFile {
                kind: RepoKind::Model,
                repo: name,
                file: "",
                flag,
            },
        );
        return Err(ProcessorError::NoFiles {
            flag: flag.into(),
            name: name.into(),
            tried: missing.join(", "),
            by_hand: by_hand.display().to_string(),
        });
    };
    let folder = first.parent().unwrap_or(Path::new(".")).to_path_buf();
    if found
        .iter()
        .all(|(_, p)| p.parent() == Some(folder.as_path()))
    {
        // One snapshot holds them all: read it as a local folder (named templates too).
        return Ok((ChatTemplate::load_processor_dir(&folder)?, folder));
    }
    // Files of different commits (the cache had some from before the hub moved on).
    let mut texts: Vec<(&str, String)> = Vec::new();
    for (file, path) in &found {
        let text = std::fs::read_to_string(path).map_err(|e| ProcessorError::Read {
            flag: flag.into(),
            name: name.into(),
            path: path.clone(),
            message: e.to_string(),
        })?;
        texts.push((file, text));
    }
    let text = |name: &str| {
        texts
            .iter()
            .find(|(f, _)| *f == name)
            .map(|(_, t)| t.as_str())
    };
    let files = ProcessorFiles {
        processor: text(PROCESSOR_FILE),
        legacy: text(PROCESSOR_TEMPLATE_FILE),
        tokenizer: TemplateFiles {
            jinja: text(TEMPLATE_FILE),
            named: Vec::new(),
            config: text(CONFIG_FILE),
            special_tokens_map: text(SPECIAL_TOKENS_FILE),
        },
    };
    let p = ChatTemplate::processor(&folder.display().to_string(), &files)?;
    Ok((p, folder))
}

/// The repository has no such file (the hub's 404), or offline the cache lacks it: an optional
/// file, as `transformers` takes one. `Some`: the file's URL and why, in a few words.
fn absent(e: &HubError) -> Option<String> {
    match e {
        HubError::Offline { url, .. } => Some(format!("{url} (not cached; HF_HUB_OFFLINE)")),
        HubError::Download {
            url,
            cause:
                crate::net::fetch::FetchError::Status {
                    status: 404,
                    reason,
                    ..
                },
            ..
        } => Some(format!("{url} (404 {reason})")),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn offline() -> HubSettings {
        HubSettings {
            endpoint: "http://127.0.0.1:9".into(),
            token: None,
            offline: true,
        }
    }

    /// Files cached under two commits (the hub moved on between fetches) are read together.
    #[test]
    fn files_of_two_cached_snapshots_make_one_processor() {
        let cache = tempfile::tempdir().unwrap();
        let snaps = cache.path().join("models--org--m/snapshots");
        std::fs::create_dir_all(snaps.join("old")).unwrap();
        std::fs::create_dir_all(snaps.join("new")).unwrap();
        std::fs::write(
            snaps.join("old").join(PROCESSOR_FILE),
            r#"{"processor_class": "LlavaProcessor"}"#,
        )
        .unwrap();
        std::fs::write(
            snaps.join("new").join(TEMPLATE_FILE),
            "T{{ messages[0]['role'] }}",
        )
        .unwrap();
        let (p, _) = from_hub("org/m", "--model", cache.path(), &offline()).unwrap();
        assert_eq!(p.class.as_deref(), Some("LlavaProcessor"));
        let t = p.template.unwrap();
        assert_eq!(
            t.render_user_parts(&[crate::workload::chat_template::Part::Text("hi")])
                .unwrap(),
            "Tuser"
        );
    }

    /// Offline with nothing cached: an error naming every URL that was not had and the folder
    /// to fill by hand.
    #[test]
    fn no_file_at_all_names_every_url() {
        let cache = tempfile::tempdir().unwrap();
        let e = from_hub("org/m", "--model", cache.path(), &offline())
            .unwrap_err()
            .to_string();
        for f in HUB_FILES {
            assert!(
                e.contains(&format!(
                    "http://127.0.0.1:9/org/m/resolve/main/{f} (not cached"
                )),
                "{e}"
            );
        }
        assert!(e.starts_with("--model org/m: none of"), "{e}");
        assert!(e.contains("models--org--m/snapshots/manual"), "{e}");
    }
}
