//! `results.json` against the committed schema `docs/results.schema.json`: a realistic report
//! validates, reads back unchanged, and broken reports are rejected.

mod report_common;

use llmspeed::matrix::plan::{rows_from_plan, Plan, PlanConfig};
use llmspeed::matrix::status::{KvSource, ServerLimits};
use llmspeed::report::{json, methodology, MatrixReport};
use serde_json::{json, Value};

fn schema() -> Value {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/docs/results.schema.json");
    let text = std::fs::read_to_string(path).expect("docs/results.schema.json is committed");
    serde_json::from_str(&text).expect("the schema is JSON")
}

fn validator() -> jsonschema::Validator {
    jsonschema::validator_for(&schema()).expect("the schema compiles")
}

fn to_value(r: &MatrixReport) -> Value {
    let mut out = Vec::new();
    json::write(&mut out, r).expect("writing to a Vec cannot fail");
    serde_json::from_slice(&out).expect("the writer emits JSON")
}

fn errors(v: &jsonschema::Validator, instance: &Value) -> Vec<String> {
    v.iter_errors(instance)
        .map(|e| format!("{} at {}", e, e.instance_path()))
        .collect()
}

#[test]
fn the_schema_is_a_valid_2020_12_schema() {
    let s = schema();
    assert_eq!(s["$schema"], "https://json-schema.org/draft/2020-12/schema");
    jsonschema::meta::validate(&s).expect("valid against the draft 2020-12 meta-schema");
}

#[test]
fn a_realistic_report_validates_and_reads_back() {
    let v = validator();
    let report = report_common::report();
    let value = to_value(&report);
    assert_eq!(errors(&v, &value), Vec::<String>::new());
    let mut out = Vec::new();
    json::write(&mut out, &report).unwrap();
    assert!(out.ends_with(b"}\n"));
    assert_eq!(json::read(out.as_slice()).unwrap(), report);
}

#[test]
fn a_report_straight_from_the_seed_plan_validates() {
    // The seed's server: every planned cell is Pending, Over capacity or Skipped.
    let limits = ServerLimits {
        max_model_len: Some(262_144),
        kv_tokens: Some((1_600_000, KvSource::BlocksTimesBlockSize)),
        max_running: None,
    };
    let plan = Plan::new(&PlanConfig::default(), limits);
    let mut report = report_common::report();
    (report.prefill, report.decode) = rows_from_plan(&plan);
    report.methodology = methodology(&report.metadata.settings);
    assert!(report.methodology.len() >= 8);
    report.metadata.server_limits = limits.into();
    report.metadata.interrupted = Some("interrupted by Ctrl-C".into());
    assert_eq!(report.decode.len(), 48);
    assert_eq!(report.prefill.len(), 7);
    let value = to_value(&report);
    assert_eq!(errors(&validator(), &value), Vec::<String>::new());
    assert_eq!(value["decode"][47]["status"]["kind"], "over_capacity");
    assert_eq!(value["decode"][0]["status"]["kind"], "pending");
}

type Breakage = Box<dyn Fn(&mut Value)>;

#[test]
fn broken_reports_are_rejected() {
    let v = validator();
    let good = to_value(&report_common::report());
    let breakages: Vec<(&str, Breakage)> = vec![
        (
            "no metadata",
            Box::new(|r| {
                r.as_object_mut().unwrap().remove("metadata");
            }),
        ),
        (
            "unknown status",
            Box::new(|r| r["decode"][0]["status"] = json!({"kind": "great"})),
        ),
        (
            "failed without errors",
            Box::new(|r| r["decode"][6]["status"] = json!({"kind": "failed"})),
        ),
        (
            "over capacity without reason",
            Box::new(|r| r["decode"][3]["status"] = json!({"kind": "over_capacity"})),
        ),
        (
            "unknown error kind",
            Box::new(|r| r["decode"][6]["errors"][0]["kind"] = json!("oops")),
        ),
        (
            "negative throughput",
            Box::new(|r| r["decode"][0]["output_tok_per_s"] = json!(-1.0)),
        ),
        (
            "throughput as text",
            Box::new(|r| r["decode"][0]["output_tok_per_s"] = json!("95.7")),
        ),
        (
            "missing field",
            Box::new(|r| {
                r["decode"][0]
                    .as_object_mut()
                    .unwrap()
                    .remove("ttft_ms_p50");
            }),
        ),
        (
            "unknown field",
            Box::new(|r| r["decode"][0]["ttft"] = json!(1.0)),
        ),
        (
            "zero concurrency",
            Box::new(|r| r["decode"][0]["concurrency"] = json!(0)),
        ),
        (
            "bad channel",
            Box::new(|r| r["decode"][1]["loop_info"]["channel"] = json!("answer")),
        ),
        (
            "client lag without its verdict",
            Box::new(|r| {
                r["decode"][0]["client_lag"]
                    .as_object_mut()
                    .unwrap()
                    .remove("client_bound");
            }),
        ),
        (
            "a share of gaps over 100%",
            Box::new(|r| r["decode"][0]["client_lag"]["gaps_merged_percent"] = json!(100.5)),
        ),
        (
            "a bound without its value",
            Box::new(|r| {
                r["decode"][0]["client_lag"]["bounds_ms"]["itl_p50"] = json!({"bound": 0.02})
            }),
        ),
        (
            "the old wake-up field",
            Box::new(|r| r["decode"][0]["client_wakeup_us_p99"] = json!(12.0)),
        ),
        (
            "wrong schema version",
            Box::new(|r| r["schema_version"] = json!(2)),
        ),
        (
            "bad endpoint",
            Box::new(|r| r["metadata"]["settings"]["endpoint"] = json!("grpc")),
        ),
    ];
    for (name, breakage) in breakages {
        let mut broken = good.clone();
        breakage(&mut broken);
        assert!(!v.is_valid(&broken), "the schema accepted: {name}");
    }
    assert!(v.is_valid(&good));
}

#[test]
fn reading_back_rejects_unknown_enum_names_with_a_clear_message() {
    let mut value = to_value(&report_common::report());
    value["decode"][6]["errors"][0]["kind"] = json!("oops");
    let text = serde_json::to_string(&value).unwrap();
    let err = json::read(text.as_bytes()).unwrap_err().to_string();
    assert!(err.contains("unknown error_kind 'oops'"), "{err}");
}
