//! What the server received from each tool, compared: the simulated server's request log
//! (`llmspeed mock --request-log`) of one tool's run against the other's. The generation
//! requests (the warm-up ones, which come first, and the measured ones) are compared body field
//! by body field under the rules of [`FIELDS`]; of the other calls (`/v1/models`, `/tokenize`,
//! `/server_info`, ...) only the kinds each tool makes.
//!
//! Each difference comes back with a key (its first line) that the caller's list of deliberate
//! differences can name. Pure, but for [`read`].
#![allow(dead_code)]

use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

/// How a body field's values are compared over a group of requests (nested objects'
/// fields are named by their path, `stream_options.include_usage`).
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Rule {
    /// The prompt, whichever field carries it: its form on both sides (the field, and text,
    /// token ids or messages), the number of token ids (their count is drawn exactly by both
    /// tools; their values are each tool's own random draw), the messages' roles and content
    /// form; the texts themselves where the row's prompts are read from a file (the measured
    /// requests': which sample a warm-up takes is each tool's own draw).
    Prompt,
    /// The same values, as a multiset over the requests: a fixed field (model, max_tokens,
    /// temperature, stream, ignore_eos, stream_options, extra body fields, ...) holds one value
    /// in every request of both tools, and one drawn per request (a ShareGPT output length)
    /// holds the same values in some order. A field only one tool sends differs here.
    Same,
}

/// Every field whose rule is not [`Rule::Same`]; any other field a body carries is compared
/// under [`Rule::Same`].
pub const FIELDS: &[(&str, Rule)] = &[
    // OpenAI completions (text, token ids or a list of either).
    ("prompt", Rule::Prompt),
    // OpenAI chat.
    ("messages", Rule::Prompt),
    // The OpenAI Responses API.
    ("input", Rule::Prompt),
    // SGLang's native /generate.
    ("text", Rule::Prompt),
    ("input_ids", Rule::Prompt),
    // TGI's /generate_stream.
    ("inputs", Rule::Prompt),
];

/// The endpoints that generate; a call to any other one is auxiliary.
pub const GENERATE: &[&str] = &[
    "/v1/completions",
    "/v1/chat/completions",
    "/v1/responses",
    "/generate",
    "/generate_stream",
];

/// One request as the mock logged it.
#[derive(Clone, Debug)]
pub struct Logged {
    pub arrival_ns: u64,
    pub method: String,
    pub path: String,
    pub request_id: Option<String>,
    /// SGLang's `X-SMG-Routing-Key` header, when sent.
    pub routing_key: Option<String>,
    pub status: u64,
    pub body: Value,
}

/// The log at `file` in order of arrival (empty when there is none).
pub fn read(file: &Path) -> Vec<Logged> {
    let text = std::fs::read_to_string(file).unwrap_or_default();
    let mut out: Vec<Logged> = text
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .map(|v| Logged {
            arrival_ns: v["arrival_ns"].as_u64().unwrap_or(0),
            method: v["method"].as_str().unwrap_or("").to_string(),
            path: v["path"].as_str().unwrap_or("").to_string(),
            request_id: v["request_id"].as_str().map(str::to_owned),
            routing_key: v["routing_key"].as_str().map(str::to_owned),
            status: v["status"].as_u64().unwrap_or(0),
            body: v["body"].clone(),
        })
        .collect();
    out.sort_by_key(|r| r.arrival_ns);
    out
}

/// One tool's requests, sorted out.
pub struct Sorted<'a> {
    /// The streamed generation requests before the measured ones (a tool's initial test run
    /// or warm-up), in order of arrival.
    pub warmup: Vec<&'a Logged>,
    pub measured: Vec<&'a Logged>,
    /// Every other call's kind: `METHOD /path`, and for a generation request before the run
    /// that does not stream (a probe), `METHOD /path (not streamed, before the run)`.
    pub auxiliary: BTreeSet<String>,
}

/// Sorts `log` out, given how many requests the run measured (its result's completed and
/// failed): the generation requests before those are warm-ups or probes.
pub fn sort(log: &[Logged], measured: usize) -> Sorted<'_> {
    let generates = |r: &Logged| r.method == "POST" && GENERATE.contains(&r.path.as_str());
    let generation: Vec<&Logged> = log.iter().filter(|r| generates(r)).collect();
    let (before, measured) = generation.split_at(generation.len().saturating_sub(measured));
    let streams = |r: &&Logged| r.body["stream"] == Value::Bool(true);
    let mut auxiliary: BTreeSet<String> = log
        .iter()
        .filter(|r| !generates(r))
        .map(|r| format!("{} {}", r.method, r.path))
        .collect();
    auxiliary.extend(
        before
            .iter()
            .filter(|r| !streams(r))
            .map(|r| format!("{} {} (not streamed, before the run)", r.method, r.path)),
    );
    Sorted {
        warmup: before.iter().copied().filter(streams).collect(),
        measured: measured.to_vec(),
        auxiliary,
    }
}

/// One difference: a key the list of deliberate differences can name, and what differs.
pub type Difference = (String, String);

/// Every difference between the reference's requests and ours. `file_prompts`: the row's
/// prompts are read from a file, so both tools send the same texts in the measured requests.
pub fn compare(theirs: &Sorted, ours: &Sorted, file_prompts: bool) -> Vec<Difference> {
    let mut out = Vec::new();
    for kind in theirs.auxiliary.symmetric_difference(&ours.auxiliary) {
        let who = if theirs.auxiliary.contains(kind) {
            "the reference"
        } else {
            "llmspeed"
        };
        out.push((
            format!("{kind}: only {who} calls it"),
            format!("only {who} calls {kind}"),
        ));
    }
    if theirs.warmup.len() != ours.warmup.len() {
        out.push((
            "warm-up requests".into(),
            format!(
                "warm-up requests: reference {}, llmspeed {}",
                theirs.warmup.len(),
                ours.warmup.len()
            ),
        ));
    }
    for (group, t, o) in [
        ("warm-up", &theirs.warmup, &ours.warmup),
        ("measured", &theirs.measured, &ours.measured),
    ] {
        if t.is_empty() || o.is_empty() {
            continue;
        }
        let paths = |g: &[&Logged]| -> BTreeSet<String> {
            g.iter().map(|r| format!("POST {}", r.path)).collect()
        };
        if paths(t) != paths(o) {
            out.push((
                "endpoint".into(),
                format!(
                    "{group} requests go to: reference {:?}, llmspeed {:?}",
                    paths(t),
                    paths(o)
                ),
            ));
        }
        let ids = |g: &[&Logged]| multiset(g.iter().map(|r| request_id_form(&r.request_id)));
        if ids(t) != ids(o) {
            out.push((
                "x-request-id".into(),
                format!(
                    "{group} requests' x-request-id: reference {}, llmspeed {}",
                    show(&ids(t)),
                    show(&ids(o))
                ),
            ));
        }
        // SGLang's routing key: the same form and groups (each group's count of requests), and
        // one run's tag on all of a tool's requests.
        let keys = |g: &[&Logged]| multiset(g.iter().map(|r| routing_key_form(&r.routing_key)));
        if keys(t) != keys(o) {
            out.push((
                "routing key".into(),
                format!(
                    "{group} requests' X-SMG-Routing-Key: reference {}, llmspeed {}",
                    show(&keys(t)),
                    show(&keys(o))
                ),
            ));
        }
        let tags = |g: &[&Logged]| -> BTreeSet<String> {
            g.iter()
                .filter_map(|r| r.routing_key.as_deref()?.rsplit_once('_'))
                .map(|(tag, _)| tag.to_string())
                .collect()
        };
        if tags(o).len() > 1 {
            out.push((
                "routing key".into(),
                format!("{group} requests' X-SMG-Routing-Key: llmspeed sent the tags of several runs {:?}", tags(o)),
            ));
        }
        // Which sample a warm-up takes is each tool's own draw: its text is not compared, nor,
        // on a file's prompts, the value of a field drawn with the sample (the measured
        // requests' output lengths, which differ from one request to the next): both tools
        // must still send it.
        let warmup = group == "warm-up";
        let texts = file_prompts && !warmup;
        let drawn = if file_prompts && warmup {
            per_sample(&theirs.measured)
        } else {
            BTreeSet::new()
        };
        out.extend(compare_bodies(group, t, o, texts, &drawn));
    }
    out
}

/// The fields whose value differs between the measured requests (drawn with each sample).
fn per_sample(measured: &[&Logged]) -> BTreeSet<String> {
    let mut seen: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for r in measured {
        for (k, v) in fields(&r.body) {
            seen.entry(k).or_default().insert(v.to_string());
        }
    }
    seen.into_iter()
        .filter(|(_, values)| values.len() > 1)
        .map(|(k, _)| k)
        .collect()
}

/// The bodies of one group of requests, field by field.
fn compare_bodies(
    group: &str,
    theirs: &[&Logged],
    ours: &[&Logged],
    file_prompts: bool,
    drawn: &BTreeSet<String>,
) -> Vec<Difference> {
    let mut out = Vec::new();
    let (t, o): (Vec<_>, Vec<_>) = (
        theirs.iter().map(|r| fields(&r.body)).collect(),
        ours.iter().map(|r| fields(&r.body)).collect(),
    );
    // The prompt: its coarse form first (a deliberate difference names it), then its details.
    let (tk, ok) = (
        multiset(theirs.iter().map(|r| prompt_form(&r.body, false, false))),
        multiset(ours.iter().map(|r| prompt_form(&r.body, false, false))),
    );
    if tk != ok {
        let one = |m: &BTreeMap<String, usize>| m.keys().cloned().collect::<Vec<_>>().join(" | ");
        out.push((
            format!("prompt: {} sent as {}", one(&tk), one(&ok)),
            format!(
                "{group} requests' prompts: reference {}, llmspeed {}",
                show(&tk),
                show(&ok)
            ),
        ));
    } else {
        let detail =
            |g: &[&Logged]| multiset(g.iter().map(|r| prompt_form(&r.body, true, file_prompts)));
        if detail(theirs) != detail(ours) {
            out.push((
                "prompt".into(),
                format!(
                    "{group} requests' prompts: reference {}, llmspeed {}",
                    show(&detail(theirs)),
                    show(&detail(ours))
                ),
            ));
        }
    }
    let names: BTreeSet<&String> = t.iter().chain(&o).flat_map(|f| f.keys()).collect();
    for name in names {
        let values = |g: &[BTreeMap<String, Value>]| {
            multiset(g.iter().map(|f| match f.get(name) {
                None => "(absent)".to_string(),
                Some(_) if drawn.contains(name) => "(present)".to_string(),
                Some(v) => v.to_string(),
            }))
        };
        let (tv, ov) = (values(&t), values(&o));
        if tv != ov {
            out.push((
                format!("body field {name}"),
                format!(
                    "{group} requests' `{name}`: reference {}, llmspeed {}",
                    show(&tv),
                    show(&ov)
                ),
            ));
        }
    }
    out
}

/// A body's fields under [`Rule::Same`], by path: nested objects are walked, lists are values.
fn fields(body: &Value) -> BTreeMap<String, Value> {
    fn walk(prefix: &str, v: &Value, out: &mut BTreeMap<String, Value>) {
        match v {
            Value::Object(m) if !m.is_empty() => {
                for (k, x) in m {
                    let path = if prefix.is_empty() {
                        k.clone()
                    } else {
                        format!("{prefix}.{k}")
                    };
                    if rule(&path) == Rule::Same {
                        walk(&path, x, out);
                    }
                }
            }
            _ => {
                out.insert(prefix.to_string(), v.clone());
            }
        }
    }
    let mut out = BTreeMap::new();
    if body.is_object() {
        walk("", body, &mut out);
    } else {
        out.insert("(body)".into(), body.clone());
    }
    out
}

fn rule(path: &str) -> Rule {
    FIELDS
        .iter()
        .find(|(f, _)| *f == path)
        .map_or(Rule::Same, |(_, r)| *r)
}

/// The prompt's form: the field that carries it and what it holds. `detail` adds the number of
/// token ids and the messages' roles; `texts` the texts themselves.
fn prompt_form(body: &Value, detail: bool, texts: bool) -> String {
    let carried: Vec<String> = FIELDS
        .iter()
        .filter(|(_, r)| *r == Rule::Prompt)
        .filter_map(|(f, _)| {
            body.get(*f)
                .map(|v| format!("`{f}` {}", form(v, detail, texts)))
        })
        .collect();
    if carried.is_empty() {
        "no prompt".into()
    } else {
        carried.join(", ")
    }
}

/// A content part without text in detail: an `image_url` data URL's size, read from the
/// image's header by the simulated server's reader (the two tools' encoders differ, so the
/// bytes are not compared; the sizes must be the same).
fn image_form(p: &Value) -> String {
    match p["image_url"]["url"].as_str() {
        Some(url) => match llmspeed::mock::image::url_size(url) {
            Ok(s) => format!("{} {}x{}", p["type"], s.width, s.height),
            Err(e) => format!("{} ({e})", p["type"]),
        },
        None => p["type"].to_string(),
    }
}

fn form(v: &Value, detail: bool, texts: bool) -> String {
    let text = |s: &str| {
        if texts {
            format!("text {s:?}")
        } else {
            "text".to_string()
        }
    };
    match v {
        Value::String(s) => text(s),
        Value::Array(a) if !a.is_empty() && a.iter().all(Value::is_u64) => {
            if detail {
                format!("{} token ids", a.len())
            } else {
                "token ids".into()
            }
        }
        Value::Array(a) if !a.is_empty() && a.iter().all(Value::is_object) => {
            let messages: Vec<String> = a
                .iter()
                .map(|m| {
                    let content = match &m["content"] {
                        Value::String(s) => text(s),
                        Value::Array(parts) => {
                            let parts: Vec<String> = parts
                                .iter()
                                .map(|p| match p["text"].as_str() {
                                    Some(s) => format!("{} {}", p["type"], text(s)),
                                    None if detail => image_form(p),
                                    None => p["type"].to_string(),
                                })
                                .collect();
                            format!("parts [{}]", parts.join(", "))
                        }
                        other => format!("content {other}"),
                    };
                    if detail {
                        format!("{}: {content}", m["role"])
                    } else {
                        content
                    }
                })
                .collect();
            if detail {
                format!("messages [{}]", messages.join(", "))
            } else {
                let kinds: BTreeSet<String> = messages.into_iter().collect();
                format!(
                    "messages of {}",
                    kinds.into_iter().collect::<Vec<_>>().join(" and ")
                )
            }
        }
        Value::Array(a) => {
            let items: Vec<String> = a.iter().map(|x| form(x, detail, texts)).collect();
            format!("list [{}]", items.join(", "))
        }
        other => format!("{other}"),
    }
}

/// An `x-request-id`'s form: its fixed parts as sent, its random hex parts by their length
/// (the numbers that count requests are kept).
fn request_id_form(id: &Option<String>) -> String {
    let Some(id) = id else {
        return "(none)".into();
    };
    id.split('-')
        .map(|seg| {
            let hex = seg.bytes().all(|b| b.is_ascii_hexdigit());
            let digits = seg.bytes().all(|b| b.is_ascii_digit());
            if hex && !digits && seg.bytes().any(|b| b.is_ascii_digit()) {
                format!("<{} hex>", seg.len())
            } else {
                seg.to_string()
            }
        })
        .collect::<Vec<_>>()
        .join("-")
}

/// `{8 hex digits}_{YYYYmmddHHMMSS}_{group}` with the run's part shown by its form and the group
/// kept; anything else as it is.
fn routing_key_form(key: &Option<String>) -> String {
    let Some(key) = key else {
        return "(none)".into();
    };
    let parts: Vec<&str> = key.split('_').collect();
    match parts[..] {
        [run, time, group]
            if run.len() == 8
                && run.bytes().all(|b| b.is_ascii_hexdigit())
                && time.len() == 14
                && time.bytes().all(|b| b.is_ascii_digit())
                && group.parse::<u32>().is_ok() =>
        {
            format!("<8 hex>_<YYYYmmddHHMMSS>_{group}")
        }
        _ => format!("{key:?}"),
    }
}

fn multiset(items: impl Iterator<Item = String>) -> BTreeMap<String, usize> {
    let mut m = BTreeMap::new();
    for i in items {
        *m.entry(i).or_insert(0) += 1;
    }
    m
}

/// A multiset in a line: each value once, with its count when above one (long values cut).
fn show(m: &BTreeMap<String, usize>) -> String {
    let items: Vec<String> = m
        .iter()
        .map(|(v, n)| {
            let v = if v.chars().count() > 160 {
                format!("{}...", v.chars().take(160).collect::<String>())
            } else {
                v.clone()
            };
            if *n > 1 {
                format!("{v} x{n}")
            } else {
                v
            }
        })
        .collect();
    format!("[{}]", items.join("; "))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn logged(path: &str, body: Value, id: Option<&str>) -> Logged {
        Logged {
            arrival_ns: 0,
            method: "POST".into(),
            path: path.into(),
            request_id: id.map(str::to_owned),
            routing_key: None,
            status: 200,
            body,
        }
    }

    #[test]
    fn routing_keys_compare_by_form_and_group_and_one_tag_per_run() {
        let body = json!({"input_ids": [1, 2], "stream": true});
        let keyed = |k: &str| Logged {
            routing_key: Some(k.into()),
            ..logged("/generate", body.clone(), None)
        };
        let theirs = [
            keyed("0a1b2c3d_20261203120000_0"),
            keyed("0a1b2c3d_20261203120000_1"),
        ];
        let diffs = |ours: &[Logged]| {
            let (t, o) = (sort(&theirs, 2), sort(ours, 2));
            compare(&t, &o, false)
                .into_iter()
                .filter(|(k, _)| k == "routing key")
                .count()
        };
        // Another run's tag and time, the same groups: equal.
        let same = [
            keyed("ffee0011_20261203153000_1"),
            keyed("ffee0011_20261203153000_0"),
        ];
        assert_eq!(diffs(&same), 0);
        // Another group, a missing key, a malformed one, two runs' tags: each differs.
        let other_group = [
            keyed("ffee0011_20261203153000_0"),
            keyed("ffee0011_20261203153000_0"),
        ];
        assert_eq!(diffs(&other_group), 1);
        let missing = [
            keyed("ffee0011_20261203153000_0"),
            logged("/generate", body.clone(), None),
        ];
        assert_eq!(diffs(&missing), 1);
        let malformed = [
            keyed("ffee0011_20261203153000_x"),
            keyed("ffee0011_20261203153000_1"),
        ];
        assert_eq!(diffs(&malformed), 1);
        let two_tags = [
            keyed("ffee0011_20261203153000_0"),
            keyed("ffee0012_20261203153000_1"),
        ];
        assert_eq!(diffs(&two_tags), 1);
    }

    #[test]
    fn fields_are_paths_and_prompts_are_forms() {
        let b = json!({"model": "m", "prompt": [1, 2, 3], "stream_options": {"include_usage": true},
            "sampling_params": {"max_new_tokens": 4}, "logprobs": null});
        assert_eq!(
            fields(&b).keys().cloned().collect::<Vec<_>>(),
            [
                "logprobs",
                "model",
                "sampling_params.max_new_tokens",
                "stream_options.include_usage"
            ]
        );
        assert_eq!(prompt_form(&b, false, false), "`prompt` token ids");
        assert_eq!(prompt_form(&b, true, false), "`prompt` 3 token ids");
        let chat =
            json!({"messages": [{"role": "user", "content": [{"type": "text", "text": "hi"}]}]});
        assert_eq!(
            prompt_form(&chat, true, true),
            "`messages` messages [\"user\": parts [\"text\" text \"hi\"]]"
        );
        assert_eq!(
            prompt_form(&json!({"text": "hi"}), false, true),
            "`text` text \"hi\""
        );
        assert_eq!(
            request_id_form(&Some("bench-3fa9c0d1-12".into())),
            "bench-<8 hex>-12"
        );
    }

    #[test]
    fn every_difference_is_named() {
        let one = |body: Value, id: Option<&str>| vec![logged("/v1/completions", body, id)];
        let (t, o) = (
            one(
                json!({"model": "m", "prompt": "a b", "max_tokens": 4, "logprobs": null}),
                Some("bench-0a1b2c3d-0"),
            ),
            one(
                json!({"model": "m", "prompt": [7, 8], "max_tokens": 5, "top_p": 1.0}),
                None,
            ),
        );
        let d = compare(&sort(&t, 1), &sort(&o, 1), false);
        let keys: Vec<&str> = d.iter().map(|(k, _)| k.as_str()).collect();
        assert_eq!(
            keys,
            [
                "x-request-id",
                "prompt: `prompt` text sent as `prompt` token ids",
                "body field logprobs",
                "body field max_tokens",
                "body field top_p"
            ]
        );
        // The same requests in another order, and a warm-up before them, compare equal.
        let (a, b) = (
            json!({"prompt": [1, 2], "max_tokens": 3, "stream": true}),
            json!({"prompt": [3], "max_tokens": 9, "stream": true}),
        );
        let get = |path: &str| Logged {
            method: "GET".into(),
            ..logged(path, Value::Null, None)
        };
        let t = vec![
            get("/v1/models"),
            logged("/v1/completions", a.clone(), None),
            logged("/v1/completions", a.clone(), None),
            logged("/v1/completions", b.clone(), None),
        ];
        let mut o = vec![
            get("/v1/models"),
            get("/v1/models"),
            logged("/v1/completions", a.clone(), None),
            logged("/v1/completions", b.clone(), None),
            logged("/v1/completions", a.clone(), None),
        ];
        assert_eq!(sort(&t, 2).warmup.len(), 1);
        assert_eq!(
            compare(&sort(&t, 2), &sort(&o, 2), false),
            Vec::<Difference>::new()
        );
        // A probe (a generation request before the run that does not stream) is a call of its
        // own kind, as is an endpoint only one tool calls.
        let probe = json!({"prompt": [5], "max_tokens": 1, "stream": false});
        o.insert(1, logged("/v1/completions", probe, None));
        o.insert(0, get("/version"));
        let d = compare(&sort(&t, 2), &sort(&o, 2), false);
        assert_eq!(
            d.iter().map(|(k, _)| k.as_str()).collect::<Vec<_>>(),
            [
                "GET /version: only llmspeed calls it",
                "POST /v1/completions (not streamed, before the run): only llmspeed calls it"
            ]
        );
        assert_eq!(sort(&o, 2).warmup.len(), 1);
        // A warm-up only one tool sends.
        let d = compare(&sort(&t, 2), &sort(&t, 3), false);
        assert_eq!(d[0].0, "warm-up requests");
        // Texts compare as they are only for a row's file prompts.
        let (t, o) = (
            one(json!({"prompt": "x"}), None),
            one(json!({"prompt": "y"}), None),
        );
        assert!(compare(&sort(&t, 1), &sort(&o, 1), false).is_empty());
        assert_eq!(compare(&sort(&t, 1), &sort(&o, 1), true)[0].0, "prompt");
        // On a file's prompts a warm-up's output length is its sample's: each tool's warm-up
        // may take another sample, so a field the measured requests draw per sample is held to
        // being sent, a fixed one to its value.
        let file = |warm_max: u64, warm_temp: f64| {
            vec![
                logged(
                    "/v1/completions",
                    json!({"prompt": "w", "max_tokens": warm_max, "temperature": warm_temp, "stream": true}),
                    None,
                ),
                logged(
                    "/v1/completions",
                    json!({"prompt": "p", "max_tokens": 20, "temperature": 0.0, "stream": true}),
                    None,
                ),
                logged(
                    "/v1/completions",
                    json!({"prompt": "q", "max_tokens": 18, "temperature": 0.0, "stream": true}),
                    None,
                ),
            ]
        };
        let (t, o) = (file(20, 0.0), file(18, 0.0));
        assert!(compare(&sort(&t, 2), &sort(&o, 2), true).is_empty());
        assert_eq!(
            compare(&sort(&t, 2), &sort(&o, 2), false)[0].0,
            "body field max_tokens"
        );
        let d = compare(&sort(&t, 2), &sort(&file(18, 1.0), 2), true);
        assert_eq!(d[0].0, "body field temperature", "{d:?}");
    }
}
