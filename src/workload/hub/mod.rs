//! Files from the Hugging Face hub, found the way `huggingface_hub.hf_hub_download` finds them
//! (what vLLM and SGLang call on a user's machine): the local hub cache first, then a download
//! from `HF_ENDPOINT` written into that same cache layout, so the Python tools find it too.
//!
//! Owns: the hub's settings from the environment (`HF_ENDPOINT`, `HF_TOKEN`, `HF_HUB_OFFLINE`),
//! a file's URL and cache folder (`models--org--name`, `datasets--org--name`), the lookup in a
//! cache (`refs/main`, then any snapshot holding the file), and storing a download as
//! `blobs/<etag>` with `snapshots/<commit>/<file>` pointing at it and `refs/main` naming the
//! commit. The pure parts are separate from [`get`], the one function doing IO.
//!
//! Must never: download when `HF_HUB_OFFLINE` is set, or leave a half-written file where a
//! lookup would find it (downloads land in `blobs/` under a temporary name and are renamed).
//! It knows nothing about tokenizers: callers name the repository and the file. For a dataset
//! it also chooses the files a subset's split is made of, as the `datasets` library does
//! (`select`, `card`: pure) and fetches them into the same cache (`dataset`), resuming an
//! interrupted download as `huggingface_hub` does.

mod card;
mod dataset;
pub mod select;

pub use dataset::{dataset_files, dataset_files_in};

use std::ffi::OsString;
use std::fs;
use std::io;
use std::path::{Path, PathBuf};

use crate::net::fetch::{self, FetchError, Fetched};

/// The hub `huggingface_hub` talks to when `HF_ENDPOINT` is unset.
pub const DEFAULT_ENDPOINT: &str = "https://huggingface.co";

/// A model repository or a dataset repository: they differ in URL and cache folder.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RepoKind {
    Model,
    Dataset,
}

/// One file of one hub repository, at its `main` revision, and the flag that takes a local
/// copy instead (for error messages).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HubFile<'a> {
    pub kind: RepoKind,
    /// `org/name` or `name`.
    pub repo: &'a str,
    pub file: &'a str,
    /// The command-line flag a user can give the file's local path with.
    pub flag: &'a str,
}

impl HubFile<'_> {
    /// `{endpoint}/[datasets/]{repo}/resolve/main/{file}`, as `huggingface_hub` builds it.
    pub fn url(&self, endpoint: &str) -> String {
        let kind = match self.kind {
            RepoKind::Model => "",
            RepoKind::Dataset => "datasets/",
        };
        format!(
            "{}/{kind}{}/resolve/main/{}",
            endpoint.trim_end_matches('/'),
            self.repo,
            self.file
        )
    }

    /// The repository's folder in the hub cache: `models--org--name` or `datasets--org--name`.
    pub fn folder(&self) -> String {
        let kind = match self.kind {
            RepoKind::Model => "models",
            RepoKind::Dataset => "datasets",
        };
        format!("{kind}--{}", self.repo.replace('/', "--"))
    }
}

/// The file SGLang's `bench_serving` downloads for `--dataset-name sharegpt` (and `random`)
/// without `--dataset-path`: its `SHAREGPT_REPO_ID` and `SHAREGPT_FILENAME`, a dataset repo.
pub const SHAREGPT: HubFile<'static> = HubFile {
    kind: RepoKind::Dataset,
    repo: "anon8231489123/ShareGPT_Vicuna_unfiltered",
    file: "ShareGPT_V3_unfiltered_cleaned_split.json",
    flag: "--dataset-path",
};

/// The hub's settings, as `huggingface_hub` reads them from the environment.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HubSettings {
    /// Without a trailing `/`.
    pub endpoint: String,
    /// Sent as `Authorization: Bearer` to the endpoint (not to the CDN it redirects to).
    pub token: Option<String>,
    /// `HF_HUB_OFFLINE`: the cache only.
    pub offline: bool,
}

impl HubSettings {
    pub fn from_env() -> Self {
        Self::from_vars(|k| std::env::var_os(k))
    }

    /// [`HubSettings::from_env`] over any variable lookup. Empty values count as unset; the
    /// offline switch takes `1`, `ON`, `YES`, `TRUE` in any case, as `huggingface_hub` does.
    pub fn from_vars(get: impl Fn(&str) -> Option<OsString>) -> Self {
        let get = |k: &str| {
            get(k)
                .and_then(|v| v.into_string().ok())
                .map(|v| v.trim().to_string())
                .filter(|v| !v.is_empty())
        };
        Self {
            endpoint: get("HF_ENDPOINT")
                .unwrap_or_else(|| DEFAULT_ENDPOINT.to_string())
                .trim_end_matches('/')
                .to_string(),
            token: get("HF_TOKEN"),
            offline: get("HF_HUB_OFFLINE").is_some_and(|v| {
                matches!(v.to_ascii_uppercase().as_str(), "1" | "ON" | "YES" | "TRUE")
            }),
        }
    }
}

/// Why a hub file is not available. One line each, naming the file, where it was looked for
/// or fetched from, and where a user without network can put it by hand.
#[derive(Debug, thiserror::Error)]
pub enum HubError {
    #[error("{file} of {repo} is not in the Hugging Face cache and HF_HUB_OFFLINE forbids downloading it from {url}; put it at {by_hand}, or give its local path with {flag}")]
    Offline {
        file: String,
        repo: String,
        url: String,
        by_hand: String,
        flag: String,
    },
    #[error("cannot download {file} of {repo}: {cause}; without network, fetch {url} elsewhere and put it at {by_hand}, or give its local path with {flag}")]
    Download {
        file: String,
        repo: String,
        url: String,
        cause: FetchError,
        by_hand: String,
        flag: String,
    },
    #[error("{url} is not a Hugging Face hub answer: no {header} header (HF_ENDPOINT points at a plain web server?)")]
    NotHub { url: String, header: &'static str },
    /// A dataset that cannot be had: what is wrong and what to do.
    #[error("dataset {id}: {message}")]
    Dataset { id: String, message: String },
    #[error("dataset {id}: {cause}; {todo}")]
    DatasetFetch {
        id: String,
        cause: FetchError,
        todo: String,
    },
    #[error("cannot store {file} in the Hugging Face cache at {path}: {err}")]
    Store {
        file: String,
        path: PathBuf,
        err: io::Error,
    },
}

/// `file`'s path in the cache at `cache_dir`, if it is there: the snapshot `refs/main` names,
/// else the most recently modified snapshot holding it.
pub fn cached(cache_dir: &Path, file: &HubFile<'_>) -> Option<PathBuf> {
    let repo = cache_dir.join(file.folder());
    let snapshots = repo.join("snapshots");
    if let Ok(rev) = fs::read_to_string(repo.join("refs").join("main")) {
        let f = snapshots.join(rev.trim()).join(file.file);
        if !rev.trim().is_empty() && f.is_file() {
            return Some(f);
        }
    }
    fs::read_dir(&snapshots)
        .ok()?
        .flatten()
        .filter(|e| e.path().join(file.file).is_file())
        .max_by_key(|e| {
            let t = e.metadata().and_then(|m| m.modified()).ok();
            (t, e.file_name())
        })
        .map(|e| e.path().join(file.file))
}

/// Where a user without network puts the file by hand so that [`cached`] finds it.
pub fn by_hand(cache_dir: &Path, file: &HubFile<'_>) -> PathBuf {
    cache_dir
        .join(file.folder())
        .join("snapshots")
        .join("manual")
        .join(file.file)
}

/// The commit and the blob name the hub gave a file in its answer's headers: `X-Repo-Commit`,
/// and `X-Linked-Etag` (large files) or `ETag`, without quotes or a weak-validator mark. Both
/// become path components, so anything but letters, digits, `-`, `_` and `.` (and a leading
/// `.`) is refused.
pub fn revision_of(headers: &Fetched) -> Result<(String, String), &'static str> {
    let commit = headers
        .first_header("x-repo-commit")
        .map(str::trim)
        .filter(|c| is_safe_name(c))
        .ok_or("X-Repo-Commit")?;
    let etag = headers
        .first_header("x-linked-etag")
        .or_else(|| headers.first_header("etag"))
        .map(|e| e.trim().trim_start_matches("W/").trim_matches('"'))
        .filter(|e| is_safe_name(e))
        .ok_or("ETag")?;
    Ok((commit.to_string(), etag.to_string()))
}

fn is_safe_name(s: &str) -> bool {
    !s.is_empty()
        && !s.starts_with('.')
        && s.len() <= 128
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
}

/// The path from `snapshots/<commit>/<file>` to `blobs/<etag>`, as `huggingface_hub` links it.
pub fn link_target(file: &str, etag: &str) -> PathBuf {
    let depth = file.matches('/').count() + 2;
    let mut p = PathBuf::new();
    for _ in 0..depth {
        p.push("..");
    }
    p.join("blobs").join(etag)
}

/// `file` from the cache at `cache_dir`, else downloaded from `settings.endpoint` into it.
pub fn get(
    cache_dir: &Path,
    file: &HubFile<'_>,
    settings: &HubSettings,
) -> Result<PathBuf, Box<HubError>> {
    if let Some(p) = cached(cache_dir, file) {
        return Ok(p);
    }
    let url = file.url(&settings.endpoint);
    let by_hand = by_hand(cache_dir, file).display().to_string();
    if settings.offline {
        return Err(Box::new(HubError::Offline {
            file: file.file.into(),
            repo: file.repo.into(),
            url,
            by_hand,
            flag: file.flag.into(),
        }));
    }
    let repo = cache_dir.join(file.folder());
    let blobs = repo.join("blobs");
    let store_err = |path: &Path, err: io::Error| {
        Box::new(HubError::Store {
            file: file.file.into(),
            path: path.to_path_buf(),
            err,
        })
    };
    fs::create_dir_all(&blobs).map_err(|e| store_err(&blobs, e))?;
    let tmp = blobs.join(format!(".llmspeed-{}.incomplete", std::process::id()));
    let mut out = fs::File::create(&tmp).map_err(|e| store_err(&tmp, e))?;
    let fetched = fetch::fetch(&url, settings.token.as_deref(), &mut out);
    drop(out);
    let fetched = match fetched {
        Ok(f) => f,
        Err(cause) => {
            let _ = fs::remove_file(&tmp);
            return Err(Box::new(HubError::Download {
                file: file.file.into(),
                repo: file.repo.into(),
                url,
                cause,
                by_hand,
                flag: file.flag.into(),
            }));
        }
    };
    let (commit, etag) = revision_of(&fetched).map_err(|header| {
        let _ = fs::remove_file(&tmp);
        Box::new(HubError::NotHub {
            url: url.clone(),
            header,
        })
    })?;
    store(&repo, file.file, &commit, &etag, &tmp).map_err(|(p, e)| store_err(&p, e))
}

/// Moves a finished download into place: the blob, the snapshot's link to it, `refs/main`.
fn store(
    repo: &Path,
    file: &str,
    commit: &str,
    etag: &str,
    tmp: &Path,
) -> Result<PathBuf, (PathBuf, io::Error)> {
    let blob = repo.join("blobs").join(etag);
    fs::rename(tmp, &blob).map_err(|e| (blob.clone(), e))?;
    let snap = repo.join("snapshots").join(commit).join(file);
    if let Some(dir) = snap.parent() {
        fs::create_dir_all(dir).map_err(|e| (dir.to_path_buf(), e))?;
    }
    let _ = fs::remove_file(&snap);
    link(&link_target(file, etag), &blob, &snap).map_err(|e| (snap.clone(), e))?;
    let refs = repo.join("refs");
    fs::create_dir_all(&refs).map_err(|e| (refs.clone(), e))?;
    fs::write(refs.join("main"), commit).map_err(|e| (refs.join("main"), e))?;
    Ok(snap)
}

#[cfg(unix)]
fn link(relative: &Path, _blob: &Path, snap: &Path) -> io::Result<()> {
    std::os::unix::fs::symlink(relative, snap)
}

/// Without symlinks (as `huggingface_hub` on Windows without developer mode) the snapshot
/// holds a copy.
#[cfg(not(unix))]
fn link(_relative: &Path, blob: &Path, snap: &Path) -> io::Result<()> {
    fs::copy(blob, snap).map(|_| ())
}

#[cfg(test)]
mod tests {
    use super::*;

    const TOK: HubFile<'static> = HubFile {
        kind: RepoKind::Model,
        repo: "Qwen/Qwen3-8B",
        file: "tokenizer.json",
        flag: "--tokenizer",
    };

    fn vars(pairs: &'static [(&'static str, &'static str)]) -> impl Fn(&str) -> Option<OsString> {
        move |k| {
            pairs
                .iter()
                .find(|(kk, _)| *kk == k)
                .map(|(_, v)| OsString::from(v))
        }
    }

    #[test]
    fn urls_and_folders_follow_the_hub_layout() {
        assert_eq!(
            TOK.url("https://huggingface.co/"),
            "https://huggingface.co/Qwen/Qwen3-8B/resolve/main/tokenizer.json"
        );
        assert_eq!(TOK.folder(), "models--Qwen--Qwen3-8B");
        assert_eq!(
            SHAREGPT.url("http://127.0.0.1:9"),
            "http://127.0.0.1:9/datasets/anon8231489123/ShareGPT_Vicuna_unfiltered/resolve/main/ShareGPT_V3_unfiltered_cleaned_split.json"
        );
        assert_eq!(
            SHAREGPT.folder(),
            "datasets--anon8231489123--ShareGPT_Vicuna_unfiltered"
        );
    }

    #[test]
    fn settings_read_the_huggingface_hub_variables() {
        let s = HubSettings::from_vars(vars(&[]));
        assert_eq!(
            s,
            HubSettings {
                endpoint: DEFAULT_ENDPOINT.into(),
                token: None,
                offline: false
            }
        );
        let s = HubSettings::from_vars(vars(&[
            ("HF_ENDPOINT", "http://mirror.test/"),
            ("HF_TOKEN", "hf_x"),
            ("HF_HUB_OFFLINE", "yes"),
        ]));
        assert_eq!(s.endpoint, "http://mirror.test");
        assert_eq!(s.token.as_deref(), Some("hf_x"));
        assert!(s.offline);
        for off in ["0", "false", "no", ""] {
            let pairs: &'static [(&str, &str)] =
                Box::leak(vec![("HF_HUB_OFFLINE", off), ("HF_TOKEN", "")].into_boxed_slice());
            let s = HubSettings::from_vars(vars(pairs));
            assert!(!s.offline, "{off:?}");
            assert_eq!(s.token, None);
        }
    }

    fn answer(headers: &[(&str, &str)]) -> Fetched {
        Fetched {
            first_headers: headers
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            final_url: String::new(),
            bytes: 0,
        }
    }

    #[test]
    fn the_revision_comes_from_the_hub_headers_and_is_a_safe_name() {
        let h = answer(&[("X-Repo-Commit", "abc123"), ("ETag", "W/\"e1\"")]);
        assert_eq!(revision_of(&h), Ok(("abc123".into(), "e1".into())));
        let h = answer(&[
            ("x-repo-commit", "abc"),
            ("etag", "\"small\""),
            ("X-Linked-Etag", "\"sha256hex\""),
        ]);
        assert_eq!(revision_of(&h), Ok(("abc".into(), "sha256hex".into())));
        assert_eq!(revision_of(&answer(&[("ETag", "e")])), Err("X-Repo-Commit"));
        assert_eq!(revision_of(&answer(&[("X-Repo-Commit", "c")])), Err("ETag"));
        for bad in ["../../x", "a/b", ".hidden", ""] {
            let h = answer(&[("X-Repo-Commit", bad), ("ETag", "e")]);
            assert_eq!(revision_of(&h), Err("X-Repo-Commit"), "{bad:?}");
            let h = answer(&[("X-Repo-Commit", "c"), ("ETag", bad)]);
            assert_eq!(revision_of(&h), Err("ETag"), "{bad:?}");
        }
    }

    #[test]
    fn snapshot_links_climb_back_to_blobs() {
        assert_eq!(
            link_target("tokenizer.json", "e"),
            PathBuf::from("../../blobs/e")
        );
        assert_eq!(
            link_target("sub/dir/f.json", "e"),
            PathBuf::from("../../../../blobs/e")
        );
    }

    #[test]
    fn lookup_prefers_refs_main_then_the_newest_snapshot_and_offline_refuses() {
        let dir = tempfile::tempdir().unwrap();
        let repo = dir.path().join(TOK.folder());
        assert_eq!(cached(dir.path(), &TOK), None);
        let offline = HubSettings {
            endpoint: "http://127.0.0.1:9".into(),
            token: None,
            offline: true,
        };
        let e = get(dir.path(), &TOK, &offline).unwrap_err().to_string();
        assert!(e.contains("HF_HUB_OFFLINE"), "{e}");
        assert!(
            e.contains("http://127.0.0.1:9/Qwen/Qwen3-8B/resolve/main/tokenizer.json"),
            "{e}"
        );
        assert!(
            e.contains("models--Qwen--Qwen3-8B/snapshots/manual/tokenizer.json"),
            "{e}"
        );
        assert!(e.contains("--tokenizer"), "{e}");
        // Put by hand where the message says: found, offline or not.
        let hand = by_hand(dir.path(), &TOK);
        fs::create_dir_all(hand.parent().unwrap()).unwrap();
        fs::write(&hand, "{}").unwrap();
        assert_eq!(get(dir.path(), &TOK, &offline).unwrap(), hand);
        fs::create_dir_all(repo.join("snapshots/c1")).unwrap();
        fs::write(repo.join("snapshots/c1/tokenizer.json"), "{}").unwrap();
        fs::create_dir_all(repo.join("refs")).unwrap();
        fs::write(repo.join("refs/main"), "c1\n").unwrap();
        assert_eq!(
            cached(dir.path(), &TOK).unwrap(),
            repo.join("snapshots/c1/tokenizer.json")
        );
    }
}
