//! A stand-in for the Hugging Face hub's dataset API, in its URL layout, on two listeners on
//! 127.0.0.1 port 0 (the hub and its CDN, two origins), raw `std::net`, sharing no code with
//! our client:
//! - `GET /api/datasets/{id}/revision/{rev}[?blobs=true]`: `sha`, `siblings` (`rfilename`,
//!   `blobId`, `size`, `lfs.{sha256,size}` for parquet files), `cardData.configs`;
//! - `GET|HEAD /datasets/{id}/resolve/{rev}/{path}` (a model repository's at
//!   `/{id}/resolve/{rev}/{path}`): a 302 to `{cdn}/cdn/{etag}?sig=..` with
//!   `X-Repo-Commit`, `X-Linked-Etag`, `X-Linked-Size`, as huggingface.co answers;
//! - the CDN: the blob with its length, or from a `Range: bytes=N-` (206, `Content-Range`);
//! - 401 without the right token on a gated repository, 404 (`X-Error-Code: RepoNotFound`,
//!   `EntryNotFound`) for anything else.
//!
//! [`StandIn::cut_next`] makes the CDN send only the first bytes of the next blob and close, as
//! a dropped connection does.

#![allow(dead_code)]

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::{Arc, Mutex};

use serde_json::{json, Value};

/// One dataset repository at one commit.
#[derive(Clone, Debug, Default)]
pub struct Repo {
    pub id: String,
    pub sha: String,
    pub files: BTreeMap<String, Vec<u8>>,
    /// The card's `configs` (`Value::Null`: none).
    pub configs: Value,
    /// A gated repository answers 401 unless this token is sent.
    pub token: Option<String>,
    /// The revision name this commit also answers to besides `main` (`refs/convert/parquet`).
    pub revision: Option<String>,
    /// A model repository: its files answer at `/{id}/resolve/{rev}/{path}` (no API).
    pub model: bool,
}

/// One request the stand-in saw.
#[derive(Clone, Debug)]
pub struct Seen {
    pub method: String,
    pub path: String,
    pub auth: Option<String>,
    pub range: Option<String>,
}

#[derive(Default)]
struct State {
    repos: Vec<Repo>,
    seen: Vec<Seen>,
    /// Send only this many bytes of the next CDN body, then close.
    cut: Option<usize>,
}

pub struct StandIn {
    pub url: String,
    pub cdn: String,
    state: Arc<Mutex<State>>,
}

impl StandIn {
    pub fn start(repos: Vec<Repo>) -> Self {
        let state = Arc::new(Mutex::new(State {
            repos,
            ..State::default()
        }));
        let cdn = serve(state.clone(), String::new());
        let url = serve(state.clone(), cdn.clone());
        Self { url, cdn, state }
    }

    pub fn seen(&self) -> Vec<Seen> {
        self.state.lock().unwrap().seen.clone()
    }

    pub fn cut_next(&self, bytes: usize) {
        self.state.lock().unwrap().cut = Some(bytes);
    }
}

/// The blob name the hub gives a file: a sha256-like name for parquet (LFS) files, a git blob
/// id for the others (not the real digests: the client only uses them as names).
pub fn etag(path: &str, bytes: &[u8]) -> String {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in path.bytes().chain(bytes.iter().copied()) {
        h = (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3);
    }
    if is_lfs(path) {
        format!("{h:016x}").repeat(4)
    } else {
        format!("{h:016x}{:08x}", bytes.len() as u32 ^ 0x5a5a)
            + &format!("{:016x}", h.rotate_left(17))[..16]
    }
}

fn is_lfs(path: &str) -> bool {
    path.ends_with(".parquet")
}

fn serve(state: Arc<Mutex<State>>, cdn: String) -> String {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    std::thread::spawn(move || {
        for conn in listener.incoming() {
            let Ok(mut conn) = conn else { return };
            let state = state.clone();
            let cdn = cdn.clone();
            std::thread::spawn(move || {
                let Some(req) = read_request(&mut conn) else {
                    return;
                };
                state.lock().unwrap().seen.push(req.clone());
                let reply = answer(&state, &cdn, &req);
                let _ = conn.write_all(&reply);
            });
        }
    });
    url
}

fn read_request(conn: &mut TcpStream) -> Option<Seen> {
    let mut head = Vec::new();
    let mut b = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        if conn.read(&mut b).ok()? == 0 {
            return None;
        }
        head.push(b[0]);
    }
    let head = String::from_utf8(head).ok()?;
    let mut first = head.split(' ');
    let method = first.next()?.to_string();
    let path = first.next()?.to_string();
    let header = |name: &str| {
        head.lines().find_map(|l| {
            let (k, v) = l.split_once(':')?;
            k.eq_ignore_ascii_case(name).then(|| v.trim().to_string())
        })
    };
    Some(Seen {
        method,
        path,
        auth: header("authorization"),
        range: header("range"),
    })
}

fn reply(status: &str, headers: &[(&str, String)], body: &[u8], head_only: bool) -> Vec<u8> {
    let mut out = format!("HTTP/1.1 {status}\r\n");
    for (k, v) in headers {
        out.push_str(&format!("{k}: {v}\r\n"));
    }
    out.push_str(&format!(
        "Content-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    ));
    let mut out = out.into_bytes();
    if !head_only {
        out.extend_from_slice(body);
    }
    out
}

fn not_found(code: &str, message: &str) -> Vec<u8> {
    let body = json!({ "error": message }).to_string();
    reply(
        "404 Not Found",
        &[
            ("X-Error-Code", code.to_string()),
            ("Content-Type", "application/json".into()),
        ],
        body.as_bytes(),
        false,
    )
}

fn unquote(s: &str) -> String {
    s.replace("%2F", "/").replace("%2f", "/")
}

fn answer(state: &Mutex<State>, cdn: &str, req: &Seen) -> Vec<u8> {
    let head_only = req.method == "HEAD";
    let path = req.path.split('?').next().unwrap_or("");
    if let Some(blob) = path.strip_prefix("/cdn/") {
        return cdn_answer(state, blob, req);
    }
    let st = state.lock().unwrap();
    let find = |id: &str, rev: &str| -> Option<&Repo> {
        st.repos.iter().find(|r| {
            r.id == id
                && (rev == r.sha
                    || r.revision.as_deref() == Some(rev)
                    || (rev == "main" && r.revision.is_none()))
        })
    };
    let gated = |r: &Repo| {
        r.token
            .as_ref()
            .is_some_and(|t| req.auth.as_deref() != Some(&format!("Bearer {t}")))
    };
    let unauthorized = || {
        reply(
            "401 Unauthorized",
            &[("X-Error-Code", "GatedRepo".into())],
            br#"{"error":"Access to this dataset is restricted"}"#,
            head_only,
        )
    };
    if let Some(rest) = path.strip_prefix("/api/datasets/") {
        // {owner}/{name}/revision/{rev}
        let Some((id, rev)) = rest.split_once("/revision/") else {
            return not_found("RepoNotFound", "no such API");
        };
        let rev = unquote(rev);
        let Some(repo) = find(id, &rev) else {
            return not_found("RepoNotFound", "Repository not found");
        };
        if gated(repo) {
            return unauthorized();
        }
        let siblings: Vec<Value> = repo
            .files
            .iter()
            .map(|(p, b)| {
                let e = etag(p, b);
                if is_lfs(p) {
                    json!({"rfilename": p, "blobId": format!("{:040x}", b.len()), "size": b.len(),
                           "lfs": {"sha256": e, "size": b.len(), "pointerSize": 134}})
                } else {
                    json!({"rfilename": p, "blobId": e, "size": b.len()})
                }
            })
            .collect();
        let mut info = json!({
            "_id": "x", "id": repo.id, "sha": repo.sha, "private": false,
            "gated": if repo.token.is_some() { json!("auto") } else { json!(false) },
            "disabled": false, "downloads": 0, "likes": 0, "tags": [],
            "lastModified": "2026-01-01T00:00:00.000Z",
            "createdAt": "2026-01-01T00:00:00.000Z",
            "siblings": siblings,
        });
        if !repo.configs.is_null() {
            info["cardData"] = json!({ "configs": repo.configs });
        }
        return reply(
            "200 OK",
            &[("Content-Type", "application/json".into())],
            info.to_string().as_bytes(),
            head_only,
        );
    }
    // Datasets under /datasets/{owner}/{name}, models under /{owner}/{name}.
    let resolve = match path.strip_prefix("/datasets/") {
        Some(rest) => Some((false, rest)),
        None => path.strip_prefix('/').map(|rest| (true, rest)),
    };
    if let Some((model, rest)) = resolve {
        // {owner}/{name}/resolve/{rev}/{file}
        let Some((id, rest)) = rest.split_once("/resolve/") else {
            return not_found("RepoNotFound", "Repository not found");
        };
        let rest = unquote(rest);
        // The revision may itself hold slashes (refs/convert/parquet).
        let st_repos: Vec<&Repo> = st
            .repos
            .iter()
            .filter(|r| r.id == id && r.model == model)
            .collect();
        let hit = st_repos.iter().find_map(|r| {
            [Some(r.sha.as_str()), r.revision.as_deref(), Some("main")]
                .into_iter()
                .flatten()
                .find_map(|rev| {
                    let file = rest.strip_prefix(&format!("{rev}/"))?;
                    find(id, rev).filter(|f| f.sha == r.sha)?;
                    Some((*r, file.to_string()))
                })
        });
        let Some((repo, file)) = hit else {
            return not_found("RepoNotFound", "Repository not found");
        };
        if gated(repo) {
            return unauthorized();
        }
        let Some(bytes) = repo.files.get(&file) else {
            return not_found("EntryNotFound", "Entry not found");
        };
        let e = etag(&file, bytes);
        return reply(
            "302 Found",
            &[
                ("Location", format!("{cdn}/cdn/{e}?sig=s1")),
                ("X-Repo-Commit", repo.sha.clone()),
                ("X-Linked-Etag", format!("\"{e}\"")),
                ("X-Linked-Size", bytes.len().to_string()),
                ("ETag", "W/\"small\"".into()),
            ],
            b"",
            head_only,
        );
    }
    not_found("RepoNotFound", "Repository not found")
}

fn cdn_answer(state: &Mutex<State>, blob: &str, req: &Seen) -> Vec<u8> {
    let head_only = req.method == "HEAD";
    let mut st = state.lock().unwrap();
    let bytes = st.repos.iter().find_map(|r| {
        r.files
            .iter()
            .find(|(p, b)| etag(p, b) == blob)
            .map(|(_, b)| b.clone())
    });
    let Some(bytes) = bytes else {
        return not_found("EntryNotFound", "no blob");
    };
    let from = req
        .range
        .as_deref()
        .and_then(|r| r.strip_prefix("bytes="))
        .and_then(|r| r.strip_suffix('-'))
        .and_then(|n| n.parse::<usize>().ok());
    let mut out = match from {
        Some(n) if n < bytes.len() => reply(
            "206 Partial Content",
            &[(
                "Content-Range",
                format!("bytes {n}-{}/{}", bytes.len() - 1, bytes.len()),
            )],
            &bytes[n..],
            head_only,
        ),
        _ => reply("200 OK", &[], &bytes, head_only),
    };
    if !head_only {
        if let Some(cut) = st.cut.take() {
            let head_len = out.len() - (bytes.len() - from.unwrap_or(0).min(bytes.len()));
            out.truncate(head_len + cut);
        }
    }
    out
}
