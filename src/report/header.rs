//! What a run measured, as every HTML page says it before any number: the served model name
//! (a path or repository only as a detail), the engine and its version, the hardware as told or
//! seen, the launch command when given, the tool and its version, the date and the duration, and
//! the settings that shaped the numbers.
//!
//! Pure: a [`RunHeader`] is built from what a run's own file holds — a matrix `results.json`
//! ([`RunHeader::matrix`]), a `bench serve` result ([`RunHeader::bench_serve`]) or a `bench
//! sglang` record ([`RunHeader::bench_sglang`]) — and `html::run_header` draws it, the one
//! drawing every page uses. A fact the file does not hold is `None` and shown as not recorded,
//! never guessed.

use crate::report::format::{group_digits, hardware_name, hardware_text, one_decimal, seconds};
use crate::report::model::{MatrixReport, PromptTokens};
use serde_json::{Map, Value};

/// What a page's run was and how it was measured.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct RunHeader {
    /// The kind of measurement: `Speed test matrix`, `bench serve`, `bench sglang`.
    pub kind: String,
    /// The name the server serves the model under (requests carried it).
    pub model: String,
    /// The model's path or repository where it differs from the served name.
    pub model_detail: Option<String>,
    /// Engine name and version (`vllm 0.11.0`).
    pub engine: Option<String>,
    /// Quantisation, backend, build, commit: whatever the run recorded.
    pub engine_detail: Option<String>,
    /// The hardware as the user told it, else as the client saw it.
    pub hardware: Option<String>,
    /// Where the title says the run was measured: hardware told or seen, or the simulated
    /// server and its profile; `None`: neither (the title says unrecorded, the `hardware`
    /// row says how to record it).
    pub title_on: Option<String>,
    pub launch_command: Option<String>,
    /// The server's base URL, as text.
    pub server: Option<String>,
    /// `llmspeed 0.1.0 (commit target)`; `None` when no tool version was recorded.
    pub tool: Option<String>,
    /// When the run started, `YYYY-MM-DD HH:MM:SS UTC`.
    pub date: Option<String>,
    pub duration_s: Option<f64>,
    /// Why the run stopped early.
    pub interrupted: Option<String>,
    pub notes: Option<String>,
    /// The settings that shaped the numbers, in reading order.
    pub settings: Vec<(String, String)>,
}

impl RunHeader {
    /// The page title: what, which model, on which hardware.
    pub fn title(&self) -> String {
        format!(
            "{} · {} on {}",
            self.kind,
            self.model,
            self.title_on.as_deref().unwrap_or("unrecorded hardware")
        )
    }

    /// A matrix run's header, from its `results.json`.
    pub fn matrix(r: &MatrixReport) -> RunHeader {
        let md = &r.metadata;
        let joined = |parts: &[Option<&str>], sep: &str| {
            let s: Vec<&str> = parts.iter().flatten().copied().collect();
            (!s.is_empty()).then(|| s.join(sep))
        };
        let hardware = hardware_text(&md.hardware);
        let title_on = hardware_name(&md.hardware).or_else(|| {
            md.simulated_server.as_deref().map(|sim| {
                // The identity reads `<profile> profile: <parameters>`.
                let profile = sim.split(':').next().unwrap_or(sim).trim();
                format!("the simulated server ({profile})")
            })
        });
        RunHeader {
            kind: "Speed test matrix".into(),
            model: md.model.id.clone(),
            model_detail: md.model.name.clone().filter(|n| *n != md.model.id),
            engine: joined(
                &[md.engine.name.as_deref(), md.engine.version.as_deref()],
                " ",
            ),
            engine_detail: joined(
                &[
                    md.engine.quantization.as_deref(),
                    md.engine.backend.as_deref(),
                    md.engine.build.as_deref(),
                    md.engine.commit.as_deref(),
                ],
                " · ",
            ),
            hardware: (!hardware.is_empty()).then_some(hardware),
            title_on,
            launch_command: md.launch_command.clone(),
            server: md.base_url.clone(),
            tool: Some(format!("{} {}", md.tool, md.tool_version)),
            date: Some(md.date.replacen('T', " ", 1).replace('Z', " UTC")),
            duration_s: md
                .finished
                .as_deref()
                .and_then(unix_of_rfc3339)
                .zip(unix_of_rfc3339(&md.date))
                .map(|(end, start)| (end - start) as f64),
            interrupted: md.interrupted.clone(),
            notes: md.notes.clone(),
            settings: matrix_settings(r),
        }
    }

    /// A `bench serve` result's header (vLLM's result object plus our `llmspeed` key). The
    /// engine, hardware and launch command are what `--metadata` told (`engine=`,
    /// `engine_version=`, `hardware=` or `gpu=`, `launch_command=`): `bench serve` does not
    /// probe them.
    pub fn bench_serve(m: &Map<String, Value>) -> RunHeader {
        let s = |k: &str| m.get(k).and_then(Value::as_str).map(String::from);
        let ours = m.get("llmspeed");
        let model = s("model_id").unwrap_or_default();
        let mut settings = Vec::new();
        let mut put = |k: &str, v: Option<String>| {
            if let Some(v) = v {
                settings.push((k.to_string(), v));
            }
        };
        put("Backend", s("backend"));
        put("Label", s("label"));
        put("Prompts", m.get("num_prompts").and_then(number_text));
        put("Request rate", m.get("request_rate").and_then(number_text));
        put("Burstiness", m.get("burstiness").and_then(number_text));
        put(
            "Max concurrency",
            m.get("max_concurrency").and_then(number_text),
        );
        put("Ramp-up", s("ramp_up_strategy"));
        let ours_text = |k: &str| ours.and_then(|o| o.get(k)).and_then(number_text);
        put("Warm-ups", ours_text("num_warmups"));
        put(
            "Prompt tokens counted by",
            ours_text("prompt_token_counting"),
        );
        put("Prompts from", ours_text("prompt_source"));
        put("Latency from", ours_text("latency_from"));
        put("TTFT from", ours_text("ttft_from"));
        RunHeader {
            kind: "bench serve".into(),
            model_detail: s("tokenizer_id").filter(|t| *t != model),
            model,
            engine: joined_told(s("engine"), s("engine_version")),
            engine_detail: None,
            hardware: s("hardware").or_else(|| s("gpu")),
            title_on: s("hardware").or_else(|| s("gpu")),
            launch_command: s("launch_command"),
            server: s("base_url"),
            tool: ours
                .and_then(|o| o.get("version"))
                .and_then(Value::as_str)
                .map(|v| format!("llmspeed {v}")),
            // llmspeed writes vLLM's date in UTC; vLLM itself in its machine's local time.
            date: s("date").map(|d| match ours {
                Some(_) => compact_date_text(&d),
                None => compact_date_text(&d).replace(" UTC", " (local time)"),
            }),
            duration_s: m.get("duration").and_then(Value::as_f64),
            interrupted: ours
                .and_then(|o| o.get("interrupted"))
                .and_then(|i| i.get("signal"))
                .and_then(Value::as_str)
                .map(|sig| format!("stopped by {sig}")),
            notes: None,
            settings,
        }
    }

    /// A `bench serve` sweep's header: its first point's result says what was measured; the
    /// swept setting is named with its values, the duration is the points' together.
    pub fn bench_sweep(summary: &Value, points: &[Map<String, Value>]) -> RunHeader {
        let key = summary.get("sweep").and_then(Value::as_str).unwrap_or("");
        let mut h = points
            .first()
            .map(RunHeader::bench_serve)
            .unwrap_or_else(|| RunHeader {
                model: "not recorded (no point's result file was read)".into(),
                ..RunHeader::default()
            });
        h.kind = format!("bench serve sweep over {key}");
        let swept = match key {
            "max_concurrency" => "Max concurrency",
            "request_rate" => "Request rate",
            _ => "",
        };
        h.settings.retain(|(k, _)| k != swept && k != "Prompts");
        let values: Vec<String> = summary
            .get("values")
            .and_then(Value::as_array)
            .map(|v| v.iter().filter_map(number_text).collect())
            .unwrap_or_default();
        h.settings.insert(
            0,
            ("Sweep over".into(), format!("{key}: {}", values.join(", "))),
        );
        if let Some(n) = summary.get("num_runs").and_then(number_text) {
            h.settings.insert(1, ("Runs per point".into(), n));
        }
        let durations: Vec<f64> = points
            .iter()
            .filter_map(|p| p.get("duration").and_then(Value::as_f64))
            .collect();
        h.duration_s = (!durations.is_empty() && durations.len() == points.len())
            .then(|| durations.iter().sum());
        h
    }

    /// A `capacity` search's header, from its `results.json`: the server as the search found
    /// it, the objectives and the search's settings.
    pub fn capacity(v: &Value) -> RunHeader {
        let s = |p: &str| v.pointer(p).and_then(Value::as_str).map(String::from);
        let n = |p: &str| v.pointer(p).and_then(number_text);
        let slo: Vec<String> = v
            .get("slo")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(|o| {
                let key = o.get("key")?.as_str()?;
                let pct =
                    |x: f64| format!("{}%", crate::report::html::charts::tick_text(x * 100.0));
                Some(if let Some(ms) = o.get("max_ms").and_then(Value::as_f64) {
                    format!("{key} <= {} ms", crate::report::html::charts::tick_text(ms))
                } else if let Some(f) = o.get("max_fraction").and_then(Value::as_f64) {
                    format!("{key} <= {}", pct(f))
                } else if let Some(f) = o.get("min_fraction").and_then(Value::as_f64) {
                    format!("{key} >= {}", pct(f))
                } else {
                    key.to_string()
                })
            })
            .collect();
        let by = s("/workload/by").unwrap_or_else(|| "concurrency".into());
        let mut settings = vec![("Objectives".to_string(), slo.join(", "))];
        let mut put = |k: &str, v: Option<String>| {
            if let Some(v) = v {
                settings.push((k.to_string(), v));
            }
        };
        put("Load", Some(by));
        put("Dataset", s("/workload/dataset"));
        put("Burstiness", n("/workload/burstiness"));
        put(
            "Prompt / output tokens",
            n("/workload/input_len")
                .zip(n("/workload/output_len"))
                .map(|(i, o)| format!("{i} / {o}")),
        );
        put(
            "Confidence",
            v.pointer("/settings/confidence")
                .and_then(Value::as_f64)
                .map(|c| format!("{}%", crate::report::html::charts::tick_text(c * 100.0))),
        );
        put("Resolution", n("/settings/resolution"));
        put(
            "Start / growth",
            n("/settings/start")
                .zip(n("/settings/growth"))
                .map(|(a, b)| format!("{a} / ×{b}")),
        );
        put(
            "Max load",
            n("/settings/max_concurrency").or_else(|| n("/settings/max_request_rate")),
        );
        put("Rounds per probe, at most", n("/settings/max_rounds"));
        put("Max time (s)", n("/settings/max_time_s"));
        put("Seed", n("/workload/seed"));
        let simulated = s("/server/simulated_server");
        RunHeader {
            kind: "Capacity under an SLO".into(),
            model: s("/server/model").unwrap_or_else(|| "not recorded".into()),
            model_detail: None,
            engine: s("/server/engine").filter(|e| !e.is_empty()),
            engine_detail: None,
            hardware: simulated.clone(),
            title_on: simulated,
            launch_command: None,
            server: s("/server/base_url"),
            tool: s("/tool/version").map(|v| format!("llmspeed {v}")),
            date: v
                .get("started_unix_s")
                .and_then(Value::as_u64)
                .map(date_text),
            duration_s: v.get("wall_s").and_then(Value::as_f64),
            interrupted: s("/answer/stopped_by").map(|by| format!("stopped by {by}")),
            notes: None,
            settings,
        }
    }

    /// A `bench sglang` record's header (one line of its JSONL): SGLang's own keys, with
    /// `server_info` as the server reported it.
    pub fn bench_sglang(m: &Map<String, Value>) -> RunHeader {
        let s = |k: &str| m.get(k).and_then(Value::as_str).map(String::from);
        let info = m.get("server_info").filter(|v| v.is_object());
        let info_s = |k: &str| {
            info.and_then(|i| i.get(k))
                .and_then(Value::as_str)
                .map(String::from)
        };
        let ours = m.get("llmspeed");
        let model = info_s("served_model_name")
            .or_else(|| info_s("model_path"))
            .or_else(|| s("model_id"))
            .unwrap_or_default();
        let mut settings = Vec::new();
        for (label, key) in [
            ("Backend", "backend"),
            ("Dataset", "dataset_name"),
            ("Request rate", "request_rate"),
            ("Max concurrency", "max_concurrency"),
            ("Random input length", "random_input_len"),
            ("Random output length", "random_output_len"),
            ("Random range ratio", "random_range_ratio"),
            ("Tag", "tag"),
        ] {
            if let Some(v) = m.get(key).and_then(number_text) {
                settings.push((label.to_string(), v));
            }
        }
        RunHeader {
            kind: "bench sglang".into(),
            model_detail: info_s("model_path").filter(|p| *p != model),
            model,
            engine: info
                .and_then(|i| i.get("version"))
                .and_then(Value::as_str)
                .map(|v| format!("sglang {v}")),
            engine_detail: None,
            hardware: None,
            title_on: None,
            launch_command: None,
            server: None,
            tool: ours
                .and_then(|o| o.get("version"))
                .and_then(Value::as_str)
                .map(|v| format!("llmspeed {v}")),
            date: ours
                .and_then(|o| o.get("start_unix_ns"))
                .and_then(Value::as_u64)
                .map(|ns| date_text(ns / 1_000_000_000)),
            duration_s: m.get("duration").and_then(Value::as_f64),
            interrupted: None,
            notes: None,
            settings,
        }
    }

    /// The settings whose values differ between headers, by name (a setting one header lacks
    /// differs too), in the first header's order then the others'.
    pub fn differing_settings(headers: &[&RunHeader]) -> Vec<String> {
        let mut names: Vec<&str> = Vec::new();
        for h in headers {
            for (k, _) in &h.settings {
                if !names.contains(&k.as_str()) {
                    names.push(k);
                }
            }
        }
        names
            .into_iter()
            .filter(|name| {
                let value = |h: &RunHeader| -> Option<String> {
                    h.settings
                        .iter()
                        .find(|(k, _)| k == name)
                        .map(|p| p.1.clone())
                };
                let first = headers.first().map(|h| value(h));
                headers.iter().any(|h| Some(value(h)) != first)
            })
            .map(String::from)
            .collect()
    }
}

/// This llmspeed's version, as every result it writes records it.
pub fn tool_version() -> &'static str {
    env!("LLMSPEED_VERSION")
}

fn joined_told(name: Option<String>, version: Option<String>) -> Option<String> {
    match (name, version) {
        (Some(n), Some(v)) => Some(format!("{n} {v}")),
        (n, v) => n.or(v),
    }
}

/// A JSON value as a setting's text: strings as they are, numbers as JSON writes them.
fn number_text(v: &Value) -> Option<String> {
    match v {
        Value::Null => None,
        Value::String(s) => Some(s.clone()),
        Value::Number(n) => Some(n.to_string()),
        other => Some(other.to_string()),
    }
}

/// The matrix's settings, as its page lists them.
fn matrix_settings(r: &MatrixReport) -> Vec<(String, String)> {
    let s = &r.metadata.settings;
    let l = &r.metadata.server_limits;
    let list =
        |v: &[u64], f: fn(u64) -> String| v.iter().map(|&x| f(x)).collect::<Vec<_>>().join(", ");
    let or_missing =
        |v: Option<u64>| v.map_or_else(|| crate::report::format::MISSING.to_string(), group_digits);
    let mut out = vec![
        ("Window".into(), seconds(s.duration_s)),
        ("max_tokens".into(), group_digits(s.max_tokens)),
        ("Decode contexts".into(), list(&s.contexts, context_label)),
        (
            "Concurrency".into(),
            list(&s.concurrency, |c| c.to_string()),
        ),
        (
            "Prefill contexts".into(),
            list(&s.prefill_contexts, context_label),
        ),
        ("Prefill samples".into(), s.prefill_samples.to_string()),
        ("Endpoint".into(), s.endpoint.clone()),
        (
            "Prompt sizes".into(),
            match s.prompt_tokens {
                PromptTokens::TokenIds => "exact: token-id prompts",
                PromptTokens::TokenizeEndpoint => "counted with the server's tokenize endpoint",
                PromptTokens::LocalTokenizer => "counted with a local tokenizer",
                PromptTokens::UsageEstimate => "approximate: scaled from usage",
            }
            .to_string(),
        ),
        ("ignore_eos".into(), s.ignore_eos.to_string()),
        ("Seed".into(), s.seed.to_string()),
        ("max_model_len".into(), or_missing(l.max_model_len)),
        ("KV-cache tokens".into(), or_missing(l.kv_cache_tokens)),
        ("Running limit".into(), or_missing(l.max_running_requests)),
    ];
    if let Some(i) = &s.images {
        out.push(("Images".into(), crate::report::markdown::images_text(i)));
    }
    if let Some(lr) = s.loop_rule {
        out.push((
            "Loop rule".into(),
            format!(
                "{} repeats over {} characters (period ≤ {})",
                lr.min_repeats, lr.min_span_chars, lr.max_period_chars
            ),
        ));
    }
    out
}

/// `8K`, `128K`, `1M` for a context in tokens (binary thousands, as the labels are).
pub fn context_label(t: u64) -> String {
    if t >= 1 << 20 && t % (1 << 20) == 0 {
        format!("{}M", t >> 20)
    } else if t >= 1024 {
        format!("{}K", (t as f64 / 1024.0).round())
    } else {
        t.to_string()
    }
}

/// A duration for the header: `42.0 s`, `12 min 5 s`, `3 h 2 min`.
pub fn duration_text(s: f64) -> String {
    if !s.is_finite() || s < 0.0 {
        return crate::report::format::MISSING.to_string();
    }
    if s < 60.0 {
        return format!("{} s", one_decimal(s));
    }
    let whole = s.round() as u64;
    if whole < 3600 {
        format!("{} min {} s", whole / 60, whole % 60)
    } else {
        format!("{} h {} min", whole / 3600, whole % 3600 / 60)
    }
}

/// Days since 1970-01-01 of a proleptic Gregorian date.
fn days_from_civil(y: i64, m: i64, d: i64) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// The date of days since 1970-01-01.
fn civil_from_days(z: i64) -> (i64, i64, i64) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    (
        if m <= 2 {
            yoe + era * 400 + 1
        } else {
            yoe + era * 400
        },
        m,
        d,
    )
}

/// Seconds since the epoch of `YYYY-MM-DDTHH:MM:SSZ` (what the matrix writes); `None` for
/// anything else.
pub fn unix_of_rfc3339(s: &str) -> Option<i64> {
    let b = s.as_bytes();
    if b.len() < 19 || b[4] != b'-' || b[7] != b'-' || b[10] != b'T' || b[13] != b':' {
        return None;
    }
    let n = |r: std::ops::Range<usize>| s.get(r)?.parse::<i64>().ok();
    let days = days_from_civil(n(0..4)?, n(5..7)?, n(8..10)?);
    Some(days * 86_400 + n(11..13)? * 3600 + n(14..16)? * 60 + n(17..19)?)
}

/// `YYYY-MM-DD HH:MM:SS UTC` of seconds since the epoch.
pub fn date_text(unix_s: u64) -> String {
    let (days, rest) = ((unix_s / 86_400) as i64, unix_s % 86_400);
    let (y, m, d) = civil_from_days(days);
    format!(
        "{y:04}-{m:02}-{d:02} {:02}:{:02}:{:02} UTC",
        rest / 3600,
        rest % 3600 / 60,
        rest % 60
    )
}

/// vLLM's `%Y%m%d-%H%M%S` as `YYYY-MM-DD HH:MM:SS UTC` (`bench serve` writes UTC); any other
/// text as it is.
pub fn compact_date_text(d: &str) -> String {
    let ok = d.len() == 15
        && d.as_bytes()[8] == b'-'
        && d.chars().filter(char::is_ascii_digit).count() == 14;
    if !ok {
        return d.to_string();
    }
    format!(
        "{}-{}-{} {}:{}:{} UTC",
        &d[0..4],
        &d[4..6],
        &d[6..8],
        &d[9..11],
        &d[11..13],
        &d[13..15]
    )
}

/// A sortable key of a header's date text (`YYYY-MM-DD HH:MM:SS`), or "" when unknown.
pub fn sortable_date(date: Option<&str>) -> String {
    date.map(|d| d.trim_end_matches(" UTC").to_string())
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn dates_convert_both_ways() {
        assert_eq!(unix_of_rfc3339("1970-01-01T00:00:00Z"), Some(0));
        assert_eq!(unix_of_rfc3339("2026-12-02T09:25:10Z"), Some(1_796_203_510));
        assert_eq!(date_text(1_796_203_510), "2026-12-02 09:25:10 UTC");
        assert_eq!(unix_of_rfc3339("2000-02-29T12:00:00Z"), Some(951_825_600));
        assert_eq!(date_text(951_825_600), "2000-02-29 12:00:00 UTC");
        assert_eq!(unix_of_rfc3339("yesterday"), None);
        assert_eq!(
            compact_date_text("20261202-092510"),
            "2026-12-02 09:25:10 UTC"
        );
        assert_eq!(compact_date_text("soon"), "soon");
        assert_eq!(duration_text(42.04), "42.0 s");
        assert_eq!(duration_text(725.0), "12 min 5 s");
        assert_eq!(duration_text(10_920.0), "3 h 2 min");
    }

    #[test]
    fn a_bench_serve_header_says_what_the_result_and_metadata_hold() {
        let r = json!({
            "date": "20261202-092510", "backend": "vllm", "label": null,
            "model_id": "tiny", "tokenizer_id": "/models/tiny-llama", "num_prompts": 8,
            "hardware": "1x H200", "engine": "vllm", "engine_version": "0.11.0",
            "request_rate": "inf", "burstiness": 1.0, "max_concurrency": 4, "duration": 2.5,
            "llmspeed": {"version": "0.1.0 (abc x86_64)", "num_warmups": 0,
                         "interrupted": {"signal": "SIGINT"}}
        });
        let h = RunHeader::bench_serve(r.as_object().unwrap());
        assert_eq!(h.model, "tiny");
        assert_eq!(h.model_detail.as_deref(), Some("/models/tiny-llama"));
        assert_eq!(h.engine.as_deref(), Some("vllm 0.11.0"));
        assert_eq!(h.hardware.as_deref(), Some("1x H200"));
        assert_eq!(h.tool.as_deref(), Some("llmspeed 0.1.0 (abc x86_64)"));
        assert_eq!(h.date.as_deref(), Some("2026-12-02 09:25:10 UTC"));
        assert_eq!(h.duration_s, Some(2.5));
        assert_eq!(h.interrupted.as_deref(), Some("stopped by SIGINT"));
        assert_eq!(h.title(), "bench serve · tiny on 1x H200");
        let get = |k: &str| {
            h.settings
                .iter()
                .find(|(n, _)| n == k)
                .map(|p| p.1.as_str())
        };
        assert_eq!(get("Max concurrency"), Some("4"));
        assert_eq!(get("Request rate"), Some("inf"));
        assert_eq!(get("Label"), None, "null is no setting");
        // Another tool's result: no version recorded, said as such.
        let vllm = json!({"model_id": "m", "date": "20261202-092510"});
        let v = RunHeader::bench_serve(vllm.as_object().unwrap());
        assert_eq!(v.tool, None);
        assert_eq!(v.date.as_deref(), Some("2026-12-02 09:25:10 (local time)"));
        assert_eq!(v.title(), "bench serve · m on unrecorded hardware");
    }

    #[test]
    fn differing_settings_are_named_once() {
        let h = |pairs: &[(&str, &str)]| RunHeader {
            settings: pairs
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            ..Default::default()
        };
        let a = h(&[("Window", "2.0 s"), ("max_tokens", "64")]);
        let b = h(&[("Window", "2.0 s"), ("max_tokens", "128")]);
        let c = h(&[("Window", "2.0 s"), ("Seed", "1")]);
        assert_eq!(
            RunHeader::differing_settings(&[&a, &a]),
            Vec::<String>::new()
        );
        assert_eq!(RunHeader::differing_settings(&[&a, &b]), ["max_tokens"]);
        assert_eq!(
            RunHeader::differing_settings(&[&a, &b, &c]),
            ["max_tokens", "Seed"]
        );
    }
}
