//! The Kubernetes manifests in deploy/kubernetes/ run the binary's real flags: every container's
//! `command` and `args` are parsed by the binary's own clap definitions (`Cli::try_parse_from`)
//! and validated, with Kubernetes' `$(VAR)` references expanded as the Job would expand them.
//! The schema side (field names, types) is `kubernetes-validate` in `.ci/run`.

use clap::Parser;
use llmspeed::bench::engine::shard::Shard;
use llmspeed::cli::bench::BenchCommand;
use llmspeed::cli::{Cli, Command};
use std::path::{Path, PathBuf};

fn manifest(name: &str) -> String {
    let p = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("deploy/kubernetes")
        .join(name);
    std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

fn indent(line: &str) -> usize {
    line.len() - line.trim_start().len()
}

fn unquote(s: &str) -> String {
    let s = s.trim();
    for q in ['"', '\''] {
        if let Some(inner) = s.strip_prefix(q).and_then(|x| x.strip_suffix(q)) {
            return inner.to_string();
        }
    }
    s.to_string()
}

/// The block sequences under every `key:` line (`command:`, `args:`), in file order. Only the
/// plain block form is read; a flow sequence (`args: [...]`) or a multi-line scalar fails the
/// test rather than being skipped, so the manifest stays in the form this test checks.
fn lists(text: &str, key: &str) -> Vec<Vec<String>> {
    let lines: Vec<&str> = text.lines().collect();
    let mut out = Vec::new();
    for (i, line) in lines.iter().enumerate() {
        let t = line.trim_start();
        if t.starts_with('#') {
            continue;
        }
        let Some(rest) = t.strip_prefix(&format!("{key}:")) else {
            continue;
        };
        assert!(
            rest.trim().is_empty(),
            "{key}: must be a block list, found {rest:?}"
        );
        let mut items = Vec::new();
        for l in &lines[i + 1..] {
            let lt = l.trim_start();
            if lt.is_empty() || lt.starts_with('#') {
                continue;
            }
            if indent(l) < indent(line) || !lt.starts_with("- ") {
                break;
            }
            let item = &lt[2..];
            assert!(
                !item.starts_with(['|', '>', '[', '{']),
                "{key}: item {item:?} is not a plain scalar"
            );
            items.push(unquote(item));
        }
        out.push(items);
    }
    out
}

/// The first `key: value` scalar in the text.
fn scalar(text: &str, key: &str) -> String {
    text.lines()
        .map(str::trim)
        .find_map(|l| l.strip_prefix(&format!("{key}:")))
        .map(unquote)
        .unwrap_or_else(|| panic!("no {key}:"))
}

fn expand(arg: &str, vars: &[(&str, String)]) -> String {
    let mut s = arg.to_string();
    for (k, v) in vars {
        s = s.replace(&format!("$({k})"), v);
    }
    assert!(!s.contains("$("), "unexpanded reference in {arg:?}");
    s
}

fn parse(command: &[String], args: &[String]) -> Cli {
    assert_eq!(
        command,
        ["llmspeed"],
        "the container runs the binary itself"
    );
    let argv = command.iter().chain(args);
    Cli::try_parse_from(argv).unwrap_or_else(|e| panic!("{args:?}:\n{e}"))
}

#[test]
fn shard_job_runs_bench_serve_with_real_flags_one_shard_per_index() {
    let text = manifest("shards-job.yaml");
    assert_eq!(scalar(&text, "completionMode"), "Indexed");
    let completions: usize = scalar(&text, "completions").parse().unwrap();
    assert_eq!(scalar(&text, "parallelism"), completions.to_string());
    let (commands, args) = (lists(&text, "command"), lists(&text, "args"));
    assert_eq!((commands.len(), args.len()), (1, 1), "one container");
    // What `sed` puts in when applying, as docs/distributed.md says.
    let start_at = scalar(&text, "value").replace("START_AT_UNIX_SECONDS", "1796050800");
    let mut files = Vec::new();
    for k in 0..completions {
        let vars = [
            ("JOB_COMPLETION_INDEX", k.to_string()),
            ("START_AT", start_at.clone()),
        ];
        let args: Vec<String> = args[0].iter().map(|a| expand(a, &vars)).collect();
        let Command::Bench(b) = parse(&commands[0], &args).command else {
            panic!("not bench serve: {args:?}")
        };
        let BenchCommand::Serve(a) = b.command else {
            panic!("not bench serve: {args:?}")
        };
        let cfg = a.validate().unwrap_or_else(|e| panic!("{args:?}: {e}"));
        assert_eq!(
            cfg.shard,
            Some(Shard {
                index: k,
                count: completions
            }),
            "--shard must be INDEX/completions"
        );
        assert_eq!(cfg.start_at_unix_ns, Some(1_796_050_800_000_000_000));
        assert!(cfg.save_result && cfg.save_detailed);
        let dir = cfg.result_dir.clone().expect("--result-dir on the volume");
        files.push(dir.join(cfg.result_filename.clone().expect("a fixed file name")));
    }
    let mut unique = files.clone();
    unique.dedup();
    assert_eq!(unique.len(), completions, "each shard its own file");

    // The merge Job reads exactly those files, with merge's real flags.
    let text = manifest("merge-job.yaml");
    let (commands, args) = (lists(&text, "command"), lists(&text, "args"));
    assert_eq!((commands.len(), args.len()), (1, 1));
    let Command::Merge(m) = parse(&commands[0], &args[0]).command else {
        panic!("not merge: {:?}", args[0])
    };
    assert_eq!(m.results, files);
    assert!(m.result_filename.is_some());
}

/// Both Jobs mount the one results claim at the directory the shards write to.
#[test]
fn jobs_share_the_results_claim() {
    let claim = scalar(&manifest("results-pvc.yaml"), "name");
    for job in ["shards-job.yaml", "merge-job.yaml"] {
        let text = manifest(job);
        assert_eq!(scalar(&text, "claimName"), claim, "{job}");
        assert_eq!(
            PathBuf::from(scalar(&text, "mountPath")),
            PathBuf::from("/results"),
            "{job}"
        );
    }
}

/// The reader above finds what it should, and refuses forms it does not read.
#[test]
fn list_reader() {
    let y = "c:\n  args:\n    - a\n    - \"--b\"\n    # note\n    - '3'\n  other: x\n";
    assert_eq!(lists(y, "args"), vec![vec!["a", "--b", "3"]]);
    let flow = std::panic::catch_unwind(|| lists("args: [a, b]\n", "args"));
    assert!(flow.is_err());
}

/// Every container runs the image `scripts/build-image.sh` builds: `localhost/llmspeed:VERSION`
/// of this package (the script tags what the binary's `--version` says).
#[test]
fn manifests_name_the_image_the_build_script_makes() {
    let script = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/build-image.sh"),
    )
    .unwrap();
    assert!(
        script.contains("name=\"localhost/llmspeed:$version\""),
        "scripts/build-image.sh no longer names the image localhost/llmspeed:VERSION"
    );
    let want = format!("localhost/llmspeed:{}", env!("CARGO_PKG_VERSION"));
    for file in ["shards-job.yaml", "merge-job.yaml"] {
        let text = manifest(file);
        let images: Vec<String> = text
            .lines()
            .map(str::trim)
            .filter_map(|l| l.strip_prefix("image:"))
            .map(unquote)
            .collect();
        assert_eq!(images, std::slice::from_ref(&want), "{file}");
    }
}
