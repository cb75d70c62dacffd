//! What `report site` reads from result files it did not write: Python's non-finite floats
//! (`python_floats_as_strings`) never panic and leave valid JSON as it was; any JSON object,
//! taken as a `bench serve` result, a sweep summary or a `bench sglang` record, gives a header,
//! headline figures, a page and comparison data without panicking.
#![no_main]

use libfuzzer_sys::fuzz_target;
use llmspeed::report::site::gather::{
    classify, is_sglang_record, python_floats_as_strings, Source,
};
use llmspeed::report::site::runs::site_run;
use serde_json::Value;
use std::path::PathBuf;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let fixed = python_floats_as_strings(text);
    if serde_json::from_str::<Value>(text).is_ok() {
        assert_eq!(fixed, text, "valid JSON is left as it was");
    }
    let Ok(Value::Object(m)) = serde_json::from_str::<Value>(&fixed) else {
        return;
    };
    let _ = classify(&m);
    let _ = is_sglang_record(&m);
    let file = PathBuf::from("r.json");
    let points = vec![m.clone()];
    for src in [
        Source::BenchServe {
            file: file.clone(),
            result: m.clone(),
        },
        Source::Sglang {
            file: file.clone(),
            line: 1,
            record: m.clone(),
        },
        Source::Sweep {
            file,
            summary: Value::Object(m),
            points,
        },
    ] {
        let run = site_run(&src, |_, h| llmspeed::report::html::bench::render(h, &[]));
        assert!(!run.id.is_empty());
        let _ = llmspeed::report::html::run_header(&run.header, "", "");
    }
});
