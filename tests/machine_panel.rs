//! The machine panel, measured: `matrix --mock` with a fake `nvidia-smi` first on PATH lists
//! the fake GPUs in the header and samples them during every cell (results.json, checked
//! against the committed schema, and report.md); with no GPU tool on PATH the report says the
//! tool is absent and no cell has samples.

use serde_json::Value;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::Command;

fn run_matrix(dir: &Path, path_env: &str) -> (Value, String) {
    let out = dir.join("r");
    let o = Command::new(env!("CARGO_BIN_EXE_llmspeed"))
        .args([
            "matrix",
            "--mock",
            "--contexts",
            "1k",
            "--prefill-contexts",
            "1k",
        ])
        .args([
            "--concurrency",
            "1,2",
            "--duration",
            "2",
            "--max-tokens",
            "64",
        ])
        .arg("--out")
        .arg(&out)
        .arg("--prompt-cache")
        .arg(dir.join("cache"))
        .env("PATH", path_env)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let text = std::fs::read_to_string(out.join("results.json")).unwrap();
    let v: Value = serde_json::from_str(&text).unwrap();
    let schema: Value = serde_json::from_str(
        &std::fs::read_to_string(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/docs/results.schema.json"
        ))
        .unwrap(),
    )
    .unwrap();
    let validator = jsonschema::validator_for(&schema).unwrap();
    let errs: Vec<String> = validator.iter_errors(&v).map(|e| e.to_string()).collect();
    assert!(errs.is_empty(), "{errs:#?}");
    (v, std::fs::read_to_string(out.join("report.md")).unwrap())
}

#[test]
fn a_fake_nvidia_smi_is_listed_and_sampled_during_each_cell() {
    let dir = tempfile::tempdir().unwrap();
    let bin = dir.path().join("bin");
    std::fs::create_dir(&bin).unwrap();
    let calls = dir.path().join("calls");
    // Answers the query as nvidia-smi does (csv, noheader, nounits); utilisation is the number
    // of calls so far, so samples from different moments differ.
    let script = format!(
        "#!/bin/sh\necho x >> '{calls}'\nn=$(wc -l < '{calls}')\n\
         echo \"Fake GPU A, 81559, $n, 1000, 300.5, 1980\"\n\
         echo \"Fake GPU B, 81559, 7, 2000, [N/A], [Not Supported]\"\n",
        calls = calls.display()
    );
    let tool = bin.join("nvidia-smi");
    std::fs::write(&tool, script).unwrap();
    std::fs::set_permissions(&tool, std::fs::Permissions::from_mode(0o755)).unwrap();
    let path = format!("{}:/usr/bin:/bin", bin.display());
    let (v, md) = run_matrix(dir.path(), &path);

    let hw = &v["metadata"]["hardware"];
    assert_eq!(hw["gpu_source"], "nvidia-smi");
    assert_eq!(hw["gpus"][0]["name"], "Fake GPU A");
    assert_eq!(hw["gpus"][1]["name"], "Fake GPU B");
    assert_eq!(hw["gpus"][0]["memory_total_mib"], 81559.0);
    assert!(hw["client"]["cpu_logical"].as_u64().unwrap() >= 1);
    assert!(hw["client"]["kernel"]
        .as_str()
        .unwrap()
        .starts_with("Linux"));
    // Not typed: the flag-only fields stay empty.
    assert!(hw["gpu"].is_null());

    let cells = v["decode"].as_array().unwrap();
    assert_eq!(cells.len(), 2);
    for c in cells {
        let s = c["gpu_samples"].as_array().unwrap();
        // Two GPUs per reading, and a 2 s window sampled about once a second.
        assert!(s.len() >= 4 && s.len() % 2 == 0, "{c}");
        let a: Vec<&Value> = s.iter().filter(|x| x["index"] == 0).collect();
        let b: Vec<&Value> = s.iter().filter(|x| x["index"] == 1).collect();
        assert_eq!(a.len(), b.len());
        assert!(a
            .iter()
            .all(|x| x["power_w"] == 300.5 && x["sm_clock_mhz"] == 1980.0));
        assert!(b
            .iter()
            .all(|x| x["power_w"].is_null() && x["sm_clock_mhz"].is_null()));
        assert!(b.iter().all(|x| x["utilization_pct"] == 7.0));
        // Later readings were later calls, at later times.
        let u: Vec<f64> = a
            .iter()
            .map(|x| x["utilization_pct"].as_f64().unwrap())
            .collect();
        let t: Vec<f64> = a.iter().map(|x| x["t_s"].as_f64().unwrap()).collect();
        assert!(u.windows(2).all(|w| w[0] < w[1]), "{u:?}");
        assert!(t.windows(2).all(|w| w[0] < w[1]), "{t:?}");
        let measured = c["measured_s"].as_f64().unwrap();
        assert!(
            *t.last().unwrap() >= measured * 0.5,
            "{t:?} over {measured} s"
        );
    }
    assert!(
        md.contains("- Client GPUs (nvidia-smi): Fake GPU A (80 GiB); Fake GPU B (80 GiB)"),
        "{md}"
    );
    assert!(md.contains("- Client CPU: "), "{md}");
    assert!(md.contains("- Client memory: "), "{md}");
}

#[test]
fn no_gpu_tool_is_said_absent() {
    let dir = tempfile::tempdir().unwrap();
    let empty = dir.path().join("empty");
    std::fs::create_dir(&empty).unwrap();
    let (v, md) = run_matrix(dir.path(), empty.to_str().unwrap());
    let hw = &v["metadata"]["hardware"];
    assert_eq!(
        hw["gpu_source"],
        "absent: neither nvidia-smi nor rocm-smi is on PATH"
    );
    assert_eq!(hw["gpus"].as_array().unwrap().len(), 0);
    for c in v["decode"].as_array().unwrap() {
        assert_eq!(c["gpu_samples"].as_array().unwrap().len(), 0);
    }
    assert!(
        md.contains("- Client GPUs: absent: neither nvidia-smi nor rocm-smi is on PATH"),
        "{md}"
    );
}

#[test]
fn results_written_before_the_panel_still_read() {
    let old = serde_json::json!({
        "kind": null, "gpu": "RTX", "vram_gb": 96.0, "os": "linux", "description": null
    });
    let h: llmspeed::report::Hardware = serde_json::from_value(old).unwrap();
    assert_eq!(h.gpu.as_deref(), Some("RTX"));
    assert!(h.client.is_none() && h.gpus.is_empty() && h.gpu_source.is_none());
}
