//! A dataset's split as local files: from the Hugging Face cache when it holds them (a dataset
//! a user fetched with Python is found without a download), else from the hub, stored in that
//! cache as `huggingface_hub` stores it (so Python finds what we fetched).
//!
//! The hub is asked what `huggingface_hub.dataset_info(files_metadata=True)` asks:
//! `GET {endpoint}/api/datasets/{id}/revision/{revision}?blobs=true` (the commit, the files with
//! their blob ids, the card's `configs`). The split's files are chosen as the `datasets` library
//! chooses them (`select`); when the repository holds no file we read, the hub's own parquet
//! conversion (`refs/convert/parquet`: `{subset}/{split}/NNNN.parquet`) is taken instead. Each
//! file is fetched from `resolve/{commit}/{path}` into `blobs/{etag}`, through
//! `blobs/{etag}.incomplete`, resumed with a `Range` request when one is left from before (by us
//! or by `huggingface_hub`, which names it the same), linked from `snapshots/{commit}/{path}`;
//! `refs/{revision}` names the commit. The card (README.md) is stored too, so the cache alone
//! answers the next time.

use std::fs;
use std::io::{self, IsTerminal, Seek, Write};
use std::path::{Path, PathBuf};

use serde_json::Value;

use super::card;
use super::select::{self, Missing};
use super::{link_target, revision_of, HubError, HubSettings, RepoKind};
use crate::net::fetch::{self, FetchError};
use crate::workload::rows::DatasetFiles;
use crate::workload::tokenizer::HubCache;

/// The revision holding the hub's parquet conversion of a dataset.
const CONVERTED: &str = "refs/convert/parquet";

/// `id`'s `split` of `subset` (its default when `None`) at `revision` (`main` when `None`),
/// with the cache and the hub settings of the environment (`HF_HUB_CACHE`, `HF_HOME`,
/// `HF_ENDPOINT`, `HF_TOKEN`, `HF_HUB_OFFLINE`), as `huggingface_hub` reads them.
pub fn dataset_files(
    id: &str,
    subset: Option<&str>,
    split: &str,
    revision: Option<&str>,
) -> Result<DatasetFiles, Box<HubError>> {
    let cache = HubCache::from_env().ok_or_else(|| {
        Box::new(HubError::Dataset {
            id: id.into(),
            message: "no Hugging Face cache directory: none of HF_HUB_CACHE, HF_HOME, HOME is set; set HF_HUB_CACHE".into(),
        })
    })?;
    dataset_files_in(
        id,
        subset,
        split,
        revision,
        &cache.dir,
        &HubSettings::from_env(),
    )
}

/// [`dataset_files`] with the cache directory and the settings given.
pub fn dataset_files_in(
    id: &str,
    subset: Option<&str>,
    split: &str,
    revision: Option<&str>,
    cache_dir: &Path,
    settings: &HubSettings,
) -> Result<DatasetFiles, Box<HubError>> {
    let rev = revision.unwrap_or("main");
    let repo = cache_dir.join(folder(id));
    let err = |message: String| {
        Box::new(HubError::Dataset {
            id: id.into(),
            message,
        })
    };
    if !valid_id(id) {
        return Err(err(format!(
            "{id:?} is not a dataset id: write it owner/name, as on {}/datasets",
            settings.endpoint
        )));
    }
    let cached = from_cache(&repo, rev, subset, split, id);
    match cached {
        Some(Ok(files)) => return Ok(files),
        Some(Err(missing)) if settings.offline => {
            return Err(err(missing_message(&missing, subset, split)));
        }
        _ => {}
    }
    if settings.offline {
        return Err(err(format!(
            "not in the Hugging Face cache at {} and HF_HUB_OFFLINE forbids asking {}: run once with network (or with Python's datasets library), or unset HF_HUB_OFFLINE",
            repo.display(),
            settings.endpoint
        )));
    }
    let info = info(settings, id, rev)?;
    let paths: Vec<String> = info.files.iter().map(|f| f.path.clone()).collect();
    let (revision_used, info, chosen) = match select::choose(&paths, &info.configs, subset, split) {
        Ok(chosen) => (rev.to_string(), info, chosen),
        Err(Missing::Format(exts)) => {
            let conv = info_or(settings, id, CONVERTED).map_err(|_| {
                err(format!(
                    "holds no parquet, JSON Lines or JSON data file (found {}) and the hub has no parquet conversion of it",
                    exts.join(", ")
                ))
            })?;
            let conv_paths: Vec<String> = conv.files.iter().map(|f| f.path.clone()).collect();
            let chosen = converted(&conv_paths, subset, split).map_err(|m| {
                err(format!(
                    "the hub's parquet conversion: {}",
                    missing_message(&m, subset, split)
                ))
            })?;
            (CONVERTED.to_string(), conv, chosen)
        }
        Err(m) => return Err(err(missing_message(&m, subset, split))),
    };
    let mut files = Vec::with_capacity(chosen.files.len());
    for path in &chosen.files {
        let meta = info.files.iter().find(|f| &f.path == path);
        files.push(download(settings, &repo, id, &info.sha, path, meta)?);
    }
    if revision_used == rev && paths.iter().any(|p| p == "README.md") {
        let meta = info.files.iter().find(|f| f.path == "README.md");
        download(settings, &repo, id, &info.sha, "README.md", meta)?;
    }
    write_ref(&repo, &revision_used, &info.sha).map_err(|(p, e)| store_err(id, &p, e))?;
    Ok(DatasetFiles {
        id: id.into(),
        subset: chosen.subset.or(subset.map(str::to_string)),
        split: split.into(),
        format: chosen.format,
        files,
    })
}

fn folder(id: &str) -> String {
    super::HubFile {
        kind: RepoKind::Dataset,
        repo: id,
        file: "",
        flag: "",
    }
    .folder()
}

/// `owner/name` or `name`, each part a hub name (letters, digits, `-`, `_`, `.`).
fn valid_id(id: &str) -> bool {
    let parts: Vec<&str> = id.split('/').collect();
    parts.len() <= 2
        && parts.iter().all(|p| {
            !p.is_empty()
                && !p.starts_with('.')
                && p.chars()
                    .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
        })
}

fn missing_message(m: &Missing, subset: Option<&str>, split: &str) -> String {
    match m {
        Missing::Subset(have) => format!(
            "has no subset {:?}; its subsets: {} (pass one with --hf-subset)",
            subset.unwrap_or(""),
            have.join(", ")
        ),
        Missing::Split(have) if have.is_empty() => {
            format!("has no split {split:?} and no data files for any split")
        }
        Missing::Split(have) => format!(
            "has no split {split:?}; its splits: {} (pass one with --hf-split)",
            have.join(", ")
        ),
        Missing::Format(exts) => format!(
            "holds no parquet, JSON Lines or JSON data file (found {})",
            exts.join(", ")
        ),
        Missing::NoFiles(patterns) => format!(
            "no file matches split {split:?}'s data files ({})",
            patterns.join(", ")
        ),
    }
}

/// The split from the cache: the snapshot `refs/{rev}` names (or `rev` itself when it is a
/// commit), its card's configs and its files. `None` when the cache cannot tell (no snapshot,
/// a card this reader cannot read, a file missing); `Some(Err)` when the cached card says the
/// subset or split does not exist.
fn from_cache(
    repo: &Path,
    rev: &str,
    subset: Option<&str>,
    split: &str,
    id: &str,
) -> Option<Result<DatasetFiles, Missing>> {
    let snap = snapshot(repo, rev)?;
    let paths = list(&snap);
    let configs = match fs::read_to_string(snap.join("README.md")) {
        Ok(readme) => card::configs(&readme)?,
        Err(_) => Value::Null,
    };
    let chosen = match select::choose(&paths, &configs, subset, split) {
        Ok(c) => c,
        Err(Missing::Format(_)) => {
            let snap = snapshot(repo, CONVERTED)?;
            match converted(&list(&snap), subset, split) {
                Ok(c) => return Some(Ok(files_of(id, subset, split, &snap, c))),
                Err(_) => return None,
            }
        }
        // A snapshot holds the files that were fetched, not necessarily all of them.
        Err(Missing::NoFiles(_)) => return None,
        Err(m) => return Some(Err(m)),
    };
    Some(Ok(files_of(id, subset, split, &snap, chosen)))
}

fn files_of(
    id: &str,
    subset: Option<&str>,
    split: &str,
    snap: &Path,
    c: select::Chosen,
) -> DatasetFiles {
    DatasetFiles {
        id: id.into(),
        subset: c.subset.or(subset.map(str::to_string)),
        split: split.into(),
        format: c.format,
        files: c.files.iter().map(|f| snap.join(f)).collect(),
    }
}

fn snapshot(repo: &Path, rev: &str) -> Option<PathBuf> {
    let commit = if rev.len() == 40 && rev.chars().all(|c| c.is_ascii_hexdigit()) {
        rev.to_string()
    } else {
        fs::read_to_string(repo.join("refs").join(rev))
            .ok()?
            .trim()
            .to_string()
    };
    let snap = repo.join("snapshots").join(&commit);
    (!commit.is_empty() && snap.is_dir()).then_some(snap)
}

/// Every file under `dir`, as repository paths (`/`-separated), links followed.
fn list(dir: &Path) -> Vec<String> {
    let mut out = Vec::new();
    let mut stack = vec![(dir.to_path_buf(), String::new())];
    while let Some((d, prefix)) = stack.pop() {
        let Ok(entries) = fs::read_dir(&d) else {
            continue;
        };
        for e in entries.flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            let rel = if prefix.is_empty() {
                name
            } else {
                format!("{prefix}/{name}")
            };
            let p = e.path();
            if p.is_dir() {
                stack.push((p, rel));
            } else if p.is_file() {
                out.push(rel);
            }
        }
    }
    out.sort();
    out
}

/// The parquet conversion's files of the split: `{subset}/{split}/*.parquet` (`default` when
/// no subset is named; the largest splits come as `partial-{split}`).
fn converted(
    paths: &[String],
    subset: Option<&str>,
    split: &str,
) -> Result<select::Chosen, Missing> {
    let mut subsets: Vec<String> = paths
        .iter()
        .filter_map(|p| p.split_once('/').map(|(s, _)| s.to_string()))
        .filter(|s| !s.starts_with('.'))
        .collect();
    subsets.sort();
    subsets.dedup();
    let sub = match subset {
        Some(s) => s.to_string(),
        None if subsets.iter().any(|s| s == "default") => "default".into(),
        None if subsets.len() == 1 => subsets[0].clone(),
        None => return Err(Missing::Subset(subsets)),
    };
    if !subsets.contains(&sub) {
        return Err(Missing::Subset(subsets));
    }
    for dir in [split.to_string(), format!("partial-{split}")] {
        let pat = format!("{sub}/{dir}/*.parquet");
        let files = select::resolve(paths, &[pat]);
        if !files.is_empty() {
            return Ok(select::Chosen {
                subset: Some(sub),
                format: crate::workload::rows::FileFormat::Parquet,
                files,
            });
        }
    }
    let mut splits: Vec<String> = paths
        .iter()
        .filter_map(|p| {
            let rest = p.strip_prefix(&format!("{sub}/"))?;
            let s = rest.split('/').next()?;
            Some(s.strip_prefix("partial-").unwrap_or(s).to_string())
        })
        .collect();
    splits.sort();
    splits.dedup();
    Err(Missing::Split(splits))
}

/// One file of the repository as the hub lists it.
#[derive(Clone, Debug)]
struct RepoFile {
    path: String,
    /// `lfs.sha256`, else `blobId`: the blob's name in the cache.
    etag: Option<String>,
    size: Option<u64>,
}

struct Info {
    sha: String,
    files: Vec<RepoFile>,
    configs: Value,
}

fn api_url(settings: &HubSettings, id: &str, rev: &str) -> String {
    format!(
        "{}/api/datasets/{id}/revision/{}?blobs=true",
        settings.endpoint,
        rev.replace('/', "%2F")
    )
}

/// What to do about a status the hub answered.
fn advice(status: u16, id: &str, settings: &HubSettings) -> String {
    let page = format!("{}/datasets/{id}", settings.endpoint);
    match status {
        401 | 403 if settings.token.is_none() => format!(
            "the dataset is gated or private: accept its terms at {page} and set HF_TOKEN to a token of that account"
        ),
        401 | 403 => format!(
            "HF_TOKEN is not allowed to read it: accept the dataset's terms at {page} with the token's account, or check the token"
        ),
        404 => format!(
            "no such dataset or revision: check the id (owner/name) and the revision at {page}; a gated or private dataset also answers 404 without HF_TOKEN"
        ),
        429 => "the hub is rate-limiting: wait and try again, or set HF_TOKEN".into(),
        s if s >= 500 => "the hub failed: try again later, or point HF_ENDPOINT at a mirror".into(),
        _ => "check HF_ENDPOINT and the dataset id".into(),
    }
}

fn fetch_error(id: &str, settings: &HubSettings, cause: FetchError) -> Box<HubError> {
    let todo = match &cause {
        FetchError::Status { status, .. } => advice(*status, id, settings),
        FetchError::Connect { .. } => format!(
            "check the network or HF_ENDPOINT ({}); without network, fetch the dataset elsewhere into this cache and set HF_HUB_OFFLINE=1",
            settings.endpoint
        ),
        _ => "try again; the download resumes where it stopped".into(),
    };
    Box::new(HubError::DatasetFetch {
        id: id.into(),
        cause,
        todo,
    })
}

fn info(settings: &HubSettings, id: &str, rev: &str) -> Result<Info, Box<HubError>> {
    info_or(settings, id, rev)
}

fn info_or(settings: &HubSettings, id: &str, rev: &str) -> Result<Info, Box<HubError>> {
    let url = api_url(settings, id, rev);
    let mut body = Vec::new();
    fetch::fetch(&url, settings.token.as_deref(), &mut body)
        .map_err(|e| fetch_error(id, settings, e))?;
    parse_info(&body).map_err(|why| {
        Box::new(HubError::Dataset {
            id: id.into(),
            message: format!("{url} is not a Hugging Face hub answer ({why}): check HF_ENDPOINT"),
        })
    })
}

/// The hub's answer to the revision API: `sha`, `siblings[].{rfilename, blobId, size,
/// lfs.sha256}`, `cardData.configs`.
fn parse_info(body: &[u8]) -> Result<Info, String> {
    let v: Value = serde_json::from_slice(body).map_err(|e| format!("not JSON: {e}"))?;
    let sha = v["sha"]
        .as_str()
        .filter(|s| super::is_safe_name(s))
        .ok_or("no commit sha")?
        .to_string();
    let files = v["siblings"]
        .as_array()
        .ok_or("no siblings")?
        .iter()
        .filter_map(|s| {
            let path = s["rfilename"].as_str()?.to_string();
            // Repository paths become cache paths: no climbing out.
            if path
                .split('/')
                .any(|c| c.is_empty() || c == ".." || c == ".")
                || path.contains('\\')
            {
                return None;
            }
            let etag = s["lfs"]["sha256"]
                .as_str()
                .or_else(|| s["blobId"].as_str())
                .filter(|e| super::is_safe_name(e))
                .map(str::to_string);
            let size = s["lfs"]["size"].as_u64().or_else(|| s["size"].as_u64());
            Some(RepoFile { path, etag, size })
        })
        .collect();
    Ok(Info {
        sha,
        files,
        configs: v["cardData"]["configs"].clone(),
    })
}

fn store_err(id: &str, path: &Path, err: io::Error) -> Box<HubError> {
    Box::new(HubError::Store {
        file: id.into(),
        path: path.to_path_buf(),
        err,
    })
}

/// `path` at `commit` into the cache: the snapshot's link when it is there, else the blob
/// (fetched, or resumed from its `.incomplete`), then the link.
fn download(
    settings: &HubSettings,
    repo: &Path,
    id: &str,
    commit: &str,
    path: &str,
    meta: Option<&RepoFile>,
) -> Result<PathBuf, Box<HubError>> {
    let snap = repo.join("snapshots").join(commit).join(path);
    if snap.is_file() {
        return Ok(snap);
    }
    let url = format!(
        "{}/datasets/{id}/resolve/{commit}/{path}",
        settings.endpoint
    );
    let blobs = repo.join("blobs");
    fs::create_dir_all(&blobs).map_err(|e| store_err(id, &blobs, e))?;
    let etag = meta.and_then(|m| m.etag.clone());
    let size = meta.and_then(|m| m.size);
    if let Some(e) = &etag {
        let blob = blobs.join(e);
        if blob.is_file() {
            return place(repo, path, commit, e, None).map_err(|(p, e)| store_err(id, &p, e));
        }
    }
    // huggingface_hub's name for a partial download; without an etag, one of our own.
    let tmp = match &etag {
        Some(e) => blobs.join(format!("{e}.incomplete")),
        None => blobs.join(format!(".llmspeed-{}.incomplete", std::process::id())),
    };
    let have = fs::metadata(&tmp).map(|m| m.len()).unwrap_or(0);
    let mut out = fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&tmp)
        .map_err(|e| store_err(id, &tmp, e))?;
    let mut sink = Progress::new(&mut out, path, have, size);
    let fetched = fetch::fetch_from(&url, settings.token.as_deref(), have, &mut sink);
    sink.finish();
    drop(out);
    let (fetched, partial) = fetched.map_err(|e| fetch_error(id, settings, e))?;
    if have > 0 && !partial {
        // The server sent the whole file after the part we had: keep the whole file only.
        drop_prefix(&tmp, have).map_err(|e| store_err(id, &tmp, e))?;
    }
    let got = fs::metadata(&tmp).map(|m| m.len()).unwrap_or(0);
    if let Some(want) = size {
        if got != want {
            return Err(Box::new(HubError::Dataset {
                id: id.into(),
                message: format!(
                    "{url} sent {got} bytes of {want}; run again to resume the download (it is kept at {})",
                    tmp.display()
                ),
            }));
        }
    }
    let etag = match (revision_of(&fetched), etag) {
        (Ok((_, e)), _) => e,
        (Err(_), Some(e)) => e,
        (Err(header), None) => {
            let _ = fs::remove_file(&tmp);
            return Err(Box::new(HubError::NotHub { url, header }));
        }
    };
    place(repo, path, commit, &etag, Some(&tmp)).map_err(|(p, e)| store_err(id, &p, e))
}

/// Drops the first `n` bytes of `file`.
fn drop_prefix(file: &Path, n: u64) -> io::Result<()> {
    let mut f = fs::File::open(file)?;
    f.seek(io::SeekFrom::Start(n))?;
    let tmp = file.with_extension("rewrite");
    let mut out = fs::File::create(&tmp)?;
    io::copy(&mut f, &mut out)?;
    fs::rename(&tmp, file)
}

/// The blob in place (renamed from `tmp` when given) and the snapshot's link to it.
fn place(
    repo: &Path,
    path: &str,
    commit: &str,
    etag: &str,
    tmp: Option<&Path>,
) -> Result<PathBuf, (PathBuf, io::Error)> {
    let blob = repo.join("blobs").join(etag);
    if let Some(t) = tmp {
        fs::rename(t, &blob).map_err(|e| (blob.clone(), e))?;
    }
    let snap = repo.join("snapshots").join(commit).join(path);
    if let Some(dir) = snap.parent() {
        fs::create_dir_all(dir).map_err(|e| (dir.to_path_buf(), e))?;
    }
    let _ = fs::remove_file(&snap);
    super::link(&link_target(path, etag), &blob, &snap).map_err(|e| (snap.clone(), e))?;
    Ok(snap)
}

/// `refs/{revision}` naming `commit` (`refs/refs/convert/parquet` for the conversion, as
/// `huggingface_hub` writes it).
fn write_ref(repo: &Path, revision: &str, commit: &str) -> Result<(), (PathBuf, io::Error)> {
    if revision == commit {
        return Ok(());
    }
    let r = repo.join("refs").join(revision);
    if let Some(dir) = r.parent() {
        fs::create_dir_all(dir).map_err(|e| (dir.to_path_buf(), e))?;
    }
    fs::write(&r, commit).map_err(|e| (r.clone(), e))
}

/// Counts what a download writes and shows it on a terminal (stderr) only.
struct Progress<'a> {
    out: &'a mut dyn Write,
    bar: Option<indicatif::ProgressBar>,
}

impl<'a> Progress<'a> {
    fn new(out: &'a mut dyn Write, name: &str, have: u64, size: Option<u64>) -> Self {
        let bar = io::stderr().is_terminal().then(|| {
            let bar = match size {
                Some(s) => indicatif::ProgressBar::new(s),
                None => indicatif::ProgressBar::no_length(),
            };
            bar.set_style(
                indicatif::ProgressStyle::with_template(
                    "{msg} {bytes}/{total_bytes} {binary_bytes_per_sec} {eta}",
                )
                .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
            );
            bar.set_message(name.to_string());
            bar.set_position(have);
            bar
        });
        Self { out, bar }
    }

    fn finish(&self) {
        if let Some(b) = &self.bar {
            b.finish_and_clear();
        }
    }
}

impl Write for Progress<'_> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let n = self.out.write(buf)?;
        if let Some(b) = &self.bar {
            b.inc(n as u64);
        }
        Ok(n)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.out.flush()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_revision_answer_names_files_safely() {
        let body = br#"{"sha":"abc","siblings":[
            {"rfilename":"README.md","blobId":"b1","size":10},
            {"rfilename":"data/train-00000-of-00001.parquet","blobId":"b2","size":99,"lfs":{"sha256":"s2","size":99}},
            {"rfilename":"../escape","blobId":"b3"},
            {"rfilename":"x/../../y","blobId":"b4"}],
            "cardData":{"configs":[{"config_name":"default","data_files":"data/*"}]}}"#;
        let i = parse_info(body).unwrap();
        assert_eq!(i.sha, "abc");
        let names: Vec<_> = i
            .files
            .iter()
            .map(|f| (f.path.as_str(), f.etag.as_deref(), f.size))
            .collect();
        assert_eq!(
            names,
            vec![
                ("README.md", Some("b1"), Some(10)),
                ("data/train-00000-of-00001.parquet", Some("s2"), Some(99))
            ]
        );
        assert_eq!(i.configs[0]["config_name"], "default");
        assert!(parse_info(b"<html>").is_err());
        assert!(parse_info(br#"{"sha":"../x","siblings":[]}"#).is_err());
    }

    #[test]
    fn ids_are_owner_slash_name() {
        assert!(valid_id("likaixin/InstructCoder"));
        assert!(valid_id("gsm8k"));
        for bad in ["", "a/b/c", "../x", "a/", "a b/c"] {
            assert!(!valid_id(bad), "{bad:?}");
        }
    }

    #[test]
    fn the_conversion_layout_lists_subsets_and_splits() {
        let p: Vec<String> = [
            "default/train/0000.parquet",
            "default/partial-test/0000.parquet",
            "other/train/0000.parquet",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        let c = converted(&p, None, "test").unwrap();
        assert_eq!(
            c.files,
            vec!["default/partial-test/0000.parquet".to_string()]
        );
        assert_eq!(
            converted(&p, Some("nope"), "train"),
            Err(Missing::Subset(vec!["default".into(), "other".into()]))
        );
        assert_eq!(
            converted(&p, Some("other"), "test"),
            Err(Missing::Split(vec!["train".into()]))
        );
    }
}
