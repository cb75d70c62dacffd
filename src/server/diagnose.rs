//! Why a server answered a generation request with `400` and an empty body.
//!
//! Such a server says nothing about what it refused. llama-cpp-python's server does it for an
//! `x-request-id` header that is not a UUID (starlette-context's request-id plugin); other
//! servers refuse fields beyond OpenAI's API. Both can be checked: [`empty_400`] sends the same
//! request again, cut to one output token, without each suspect, and the first variant the server
//! accepts names the cause. [`variant`] and [`explain`] are pure; only [`empty_400`] touches the
//! network (at most three short requests, once per run).

use crate::net::{Client, StreamRequest};
use crate::timeline::Timeline;
use serde_json::{Map, Value};

/// Fields we (or vLLM's benchmark) may send beyond OpenAI's own API.
pub const EXTENSION_FIELDS: &[&str] = &[
    "ignore_eos",
    "min_tokens",
    "repetition_penalty",
    "top_k",
    "min_p",
    "cache_salt",
    "add_special_tokens",
    "return_token_ids",
    "continuous_usage_stats",
];

/// What the checks found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Cause {
    /// The request works without our `x-request-id` header.
    RequestId(String),
    /// The request works without these fields (and the header).
    Fields(Vec<String>),
    /// Neither change made the server accept it (or a check could not be made): the message
    /// lists what was tried.
    Unknown(String),
}

/// Whether `tl` ended with a 400 whose body was empty (nothing to tell the user).
pub fn is_empty_400(tl: &Timeline) -> bool {
    matches!(&tl.outcome, Err(e) if e.status == Some(400) && e.message.ends_with(crate::net::EMPTY_BODY))
}

/// The request body with at most one output token and without `drop` (top-level keys, and the
/// same keys inside `stream_options`); `None` when the body is not a JSON object.
pub fn variant(body: &[u8], drop: &[&str]) -> Option<Vec<u8>> {
    let mut v: Map<String, Value> = serde_json::from_slice(body).ok()?;
    for k in ["max_tokens", "max_completion_tokens"] {
        if v.contains_key(k) {
            v.insert(k.into(), Value::from(1));
        }
    }
    if v.contains_key("min_tokens") {
        v.insert("min_tokens".into(), Value::from(1));
    }
    for k in drop {
        v.remove(*k);
        if let Some(Value::Object(so)) = v.get_mut("stream_options") {
            so.remove(*k);
        }
    }
    serde_json::to_vec(&v).ok()
}

/// The fields of [`EXTENSION_FIELDS`] present in `body` (top level or `stream_options`).
pub fn extension_fields(body: &[u8]) -> Vec<String> {
    let Ok(v) = serde_json::from_slice::<Map<String, Value>>(body) else {
        return Vec::new();
    };
    let so = v.get("stream_options").and_then(Value::as_object);
    EXTENSION_FIELDS
        .iter()
        .filter(|k| v.contains_key(**k) || so.is_some_and(|s| s.contains_key(**k)))
        .map(|k| k.to_string())
        .collect()
}

/// The command whose request was refused: the flags to try differ.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Command {
    BenchServe,
    Matrix,
}

/// The sentence for the user: the cause found and the flag to try.
pub fn explain(cause: &Cause, command: Command) -> String {
    match cause {
        Cause::RequestId(id) => format!(
            "the server refuses our x-request-id header ({id:?}): the same request without it \
             succeeds. {}",
            match command {
                Command::BenchServe => {
                    "Request ids are UUIDs unless --request-id-prefix is given; leave that \
                     flag out, or give a prefix whose ids the server accepts"
                }
                Command::Matrix => {
                    "The matrix's ids are UUIDs and no flag changes them: please report this \
                     server"
                }
            }
        ),
        Cause::Fields(f) => format!(
            "the server refuses field(s) beyond OpenAI's API ({}): the same request without \
             them succeeds. {}",
            f.join(", "),
            match command {
                Command::BenchServe => {
                    "Leave out the flags that add them (--ignore-eos, --extra-body, sampling \
                     flags such as --top-k)"
                }
                Command::Matrix =>
                    "Try --no-ignore-eos (ignore_eos is the matrix's one such field)",
            }
        ),
        Cause::Unknown(tried) => format!(
            "the server answered 400 with an empty body and did not accept the request \
             {tried} either: check its own log for the reason"
        ),
    }
}

/// Send `req` again as [`variant`]s until the server accepts one: first without our request
/// id, then also without the extension fields.
pub async fn empty_400(client: &Client, req: &StreamRequest) -> Cause {
    let mut tried = Vec::new();
    let send = |body: Vec<u8>, id: Option<String>| async move {
        client
            .post_json_with_id(&req.path, &body, id.as_deref())
            .await
            .is_ok_and(|r| r.is_success())
    };
    let Some(cut) = variant(&req.body, &[]) else {
        return Cause::Unknown("(its body is not a JSON object)".into());
    };
    if let Some(id) = &req.request_id {
        // The same cut request with the header must still fail, or the cut is what changed.
        if !send(cut.clone(), Some(id.clone())).await && send(cut.clone(), None).await {
            return Cause::RequestId(id.clone());
        }
        tried.push("without the x-request-id header");
    }
    let fields = extension_fields(&req.body);
    if !fields.is_empty() {
        let names: Vec<&str> = fields.iter().map(String::as_str).collect();
        if let Some(bare) = variant(&req.body, &names) {
            if send(bare, None).await {
                return Cause::Fields(fields);
            }
        }
        tried.push("without the fields beyond OpenAI's API");
    }
    Cause::Unknown(if tried.is_empty() {
        "(nothing to leave out)".into()
    } else {
        tried.join(" or ")
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn variants_cut_the_output_and_drop_the_suspects() {
        let body = json!({
            "model": "m", "prompt": "hi", "max_tokens": 64, "stream": true,
            "ignore_eos": true, "min_tokens": 64,
            "stream_options": {"include_usage": true, "continuous_usage_stats": true}
        });
        let b = serde_json::to_vec(&body).unwrap();
        let v: Value = serde_json::from_slice(&variant(&b, &[]).unwrap()).unwrap();
        assert_eq!(v["max_tokens"], 1);
        assert_eq!(v["min_tokens"], 1);
        assert_eq!(v["ignore_eos"], true);
        assert_eq!(
            extension_fields(&b),
            ["ignore_eos", "min_tokens", "continuous_usage_stats"]
        );
        let v: Value = serde_json::from_slice(
            &variant(&b, &["ignore_eos", "min_tokens", "continuous_usage_stats"]).unwrap(),
        )
        .unwrap();
        assert_eq!(
            v,
            json!({"model": "m", "prompt": "hi", "max_tokens": 1, "stream": true,
                   "stream_options": {"include_usage": true}})
        );
        assert_eq!(variant(b"[1,2]", &[]), None);
        assert_eq!(variant(b"not json", &[]), None);
        assert!(extension_fields(b"not json").is_empty());
    }

    #[test]
    fn explanations_name_the_cause_and_the_flag() {
        let s = explain(&Cause::RequestId("run-1".into()), Command::BenchServe);
        assert!(s.contains("x-request-id") && s.contains("\"run-1\""), "{s}");
        assert!(s.contains("--request-id-prefix"), "{s}");
        let s = explain(
            &Cause::Fields(vec!["ignore_eos".into()]),
            Command::BenchServe,
        );
        assert!(
            s.contains("ignore_eos") && s.contains("--ignore-eos"),
            "{s}"
        );
        let s = explain(&Cause::Fields(vec!["ignore_eos".into()]), Command::Matrix);
        assert!(s.contains("--no-ignore-eos"), "{s}");
        let s = explain(
            &Cause::Unknown("without the x-request-id header".into()),
            Command::Matrix,
        );
        assert!(s.contains("without the x-request-id header"), "{s}");
    }
}
