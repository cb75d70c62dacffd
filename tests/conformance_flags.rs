//! Flag conformance: every flag of the reference tools' own argument parsers (vLLM 0.33.0's
//! `vllm bench serve`, SGLang 0.5.23's `python -m sglang.bench_serving`), read by
//! `tests/conformance/argparse_dump.py`, is either accepted by the drop-in (a command line using
//! it parses, with the reference's default where the parser shows one) or refused naming itself
//! and the reason listed in the tool's one table (`src/bench/{vllm,sglang}/flags.rs`). Never
//! clap's "unexpected argument".
//!
//! With the references installed (`scripts/references.sh`, variables exported by `.ci/run`)
//! the flags are read live and must equal the kept copy in `tests/conformance/`; without them
//! the kept copy is checked (and under `CI=true` the test fails).

#[path = "conformance/reference.rs"]
mod reference;

use clap::{CommandFactory, Parser};
use llmspeed::bench::refusal::Refusal;
use reference::Tool;
use serde_json::Value;

#[derive(Parser)]
struct Serve {
    #[command(flatten)]
    a: llmspeed::bench::vllm::args::ServeArgs,
}

#[derive(Parser)]
struct Sglang {
    #[command(flatten)]
    a: llmspeed::bench::sglang::args::SglangArgs,
}

/// A command line parsed (the outer `Err`: clap refused it) and validated (the inner one).
type Outcome = Result<Result<(), String>, String>;

/// One drop-in as this test drives it: parse, validate, its refusal table and its defaults.
struct DropIn {
    tool: Tool,
    command: &'static str,
    /// The words after `llmspeed` that name the command.
    words: &'static [&'static str],
    refused: &'static [Refusal],
    defaults_differ: &'static [(&'static str, &'static str)],
    /// Parses (clap) and validates a command line.
    run: fn(&[String]) -> Outcome,
    cmd: fn() -> clap::Command,
    /// Flags whose refusal shows only in a context (the dataset that reads them).
    context: &'static [(&'static str, &'static [&'static str])],
    /// How `llmspeed` resolves this command's shortened flags.
    abbrev: &'static llmspeed::cli::abbrev::DropIn,
}

fn serve_run(argv: &[String]) -> Outcome {
    let p = Serve::try_parse_from(std::iter::once("x".to_string()).chain(argv.iter().cloned()))
        .map_err(|e| e.to_string())?;
    Ok(p.a.validate().map(|_| ()))
}

fn sglang_run(argv: &[String]) -> Outcome {
    let p = Sglang::try_parse_from(std::iter::once("x".to_string()).chain(argv.iter().cloned()))
        .map_err(|e| e.to_string())?;
    Ok(p.a.validate().map(|_| ()))
}

const VLLM: DropIn = DropIn {
    tool: reference::VLLM,
    command: "bench serve",
    words: &["bench", "serve"],
    refused: llmspeed::bench::vllm::flags::REFUSED,
    defaults_differ: llmspeed::bench::vllm::flags::DEFAULTS_DIFFER,
    run: serve_run,
    cmd: Serve::command,
    context: &[],
    abbrev: &llmspeed::cli::abbrev::SERVE,
};

const SGLANG: DropIn = DropIn {
    tool: reference::SGLANG,
    command: "bench sglang",
    words: &["bench", "sglang"],
    refused: llmspeed::bench::sglang::flags::REFUSED,
    defaults_differ: llmspeed::bench::sglang::flags::DEFAULTS_DIFFER,
    run: sglang_run,
    cmd: Sglang::command,
    context: &[
        (
            "--gsp-range-ratio",
            &["--dataset-name", "generated-shared-prefix"],
        ),
        (
            "--mooncake-num-rounds",
            &["--dataset-name", "mooncake", "--dataset-path", "t.jsonl"],
        ),
    ],
    abbrev: &llmspeed::cli::abbrev::SGLANG,
};

/// A value the reference's parser takes for this flag (`None`: a switch); for a choice, the
/// default, else the first choice not refused on its own (each choice is checked apart).
fn sample(flag: &Value, name: &str, refused: &[Refusal]) -> Option<String> {
    let kind = flag["kind"].as_str().unwrap_or("");
    if matches!(
        kind,
        "store_true" | "store_false" | "boolean_optional" | "store_const"
    ) {
        return None;
    }
    if let Some(c) = flag["choices"].as_array() {
        let choices: Vec<&str> = c.iter().filter_map(Value::as_str).collect();
        let default = flag["default"].as_str().filter(|d| choices.contains(d));
        let free = choices
            .iter()
            .find(|c| !refused.iter().any(|r| r.flag == format!("{name} {c}")));
        return default.or(free.copied()).map(str::to_string);
    }
    // Flags whose reference type is a parser of its own.
    let special = [
        ("--goodput", "ttft:1"),
        ("--metadata", "k=v"),
        ("--header", "k=v"),
        ("--timeline-itl-thresholds", "25,50"),
        ("--percentile-metrics", "ttft"),
        ("--metric-percentiles", "99"),
        ("--random-range-ratio", "0.1"),
        ("--request-rate", "1"),
        ("--tokenizer-mode", "slow"),
        ("--random-mm-bucket-config", "{(256, 256, 1): 1.0}"),
        // Refused away from the reference's default only: a value that is not the default.
        ("--random-batch-size", "2"),
        ("--mooncake-num-rounds", "2"),
        ("--gsp-num-turns", "2"),
        ("--gsp-range-ratio", "0.5"),
        // Accepted whatever its value (SGLang reads it only for agentic-trace): not 0.
        ("--dataset-offset", "3"),
    ];
    if let Some((_, v)) = special.iter().find(|(f, _)| *f == name) {
        return Some(v.to_string());
    }
    Some(
        match flag["type"].as_str() {
            Some("int") => "1",
            Some("float") | Some("_finite_positive_float") => "0.5",
            Some("loads") => "{}",
            _ => "x",
        }
        .to_string(),
    )
}

/// The table row that refuses `name`: its own, or a `--prefix-*` row.
fn row_for(table: &'static [Refusal], name: &str) -> Option<&'static Refusal> {
    table.iter().find(|r| r.flag == name).or_else(|| {
        table.iter().find(|r| {
            r.flag
                .strip_suffix('*')
                .is_some_and(|prefix| name.starts_with(prefix))
        })
    })
}

/// Does our default for `name` read as the reference's `default`?
fn same_default(cmd: &clap::Command, name: &str, default: &Value) -> Result<(), String> {
    let long = name.trim_start_matches("--");
    let arg = cmd
        .get_arguments()
        .find(|a| {
            a.get_long() == Some(long) || a.get_all_aliases().is_some_and(|al| al.contains(&long))
        })
        .ok_or_else(|| format!("{name}: no such argument"))?;
    let ours: Vec<String> = arg
        .get_default_values()
        .iter()
        .map(|v| v.to_string_lossy().into_owned())
        .collect();
    let same = match (default, ours.as_slice()) {
        (Value::Null, []) => true,
        (Value::Bool(false), []) => true,
        (Value::Bool(b), [o]) => o == &b.to_string(),
        (Value::Number(n), [o]) => o.parse::<f64>().ok() == n.as_f64(),
        (Value::String(s), [o]) => {
            s == o || (s.parse::<f64>().is_ok() && s.parse::<f64>().ok() == o.parse::<f64>().ok())
        }
        (Value::String(s), []) => s.is_empty(),
        _ => false,
    };
    if same {
        Ok(())
    } else {
        Err(format!(
            "{name}: the reference's default is {default}, ours {ours:?}"
        ))
    }
}

/// Checks every flag of `d`'s reference; returns the problems, one line each.
fn check(d: &DropIn, flags: &[Value]) -> (Vec<String>, usize, usize) {
    assert!(
        flags.len() > 50,
        "{}: only {} flags read",
        d.tool.name,
        flags.len()
    );
    let cmd = (d.cmd)();
    let (mut problems, mut accepted, mut refused) = (Vec::new(), 0, 0);
    for f in flags {
        let names: Vec<&str> = f["flags"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(Value::as_str)
            .filter(|n| n.starts_with("--"))
            .collect();
        for name in names {
            let mut argv: Vec<String> = d
                .context
                .iter()
                .find(|(f, _)| *f == name)
                .map(|(_, c)| c.iter().map(|s| s.to_string()).collect())
                .unwrap_or_default();
            argv.push(name.to_string());
            argv.extend(sample(f, name, d.refused));
            let outcome = (d.run)(&argv);
            match (row_for(d.refused, name), outcome) {
                (_, Err(clap)) => problems.push(format!(
                    "{argv:?}: not accepted by llmspeed {}: {}",
                    d.command,
                    clap.lines().next().unwrap_or("")
                )),
                (Some(row), Ok(res)) => {
                    let want = format!(
                        "{} is not supported by llmspeed {}: {}",
                        row.flag, d.command, row.reason
                    );
                    match res {
                        Err(e) if e == want => refused += 1,
                        other => problems.push(format!(
                            "{argv:?}: listed as refused, but validate says {other:?}"
                        )),
                    }
                }
                (None, Ok(res)) => {
                    if let Err(e) = &res {
                        if e.contains("is not supported by llmspeed") {
                            problems.push(format!("{argv:?}: refused without a row: {e}"));
                            continue;
                        }
                    }
                    accepted += 1;
                    if !d.defaults_differ.iter().any(|(n, _)| *n == name)
                        && f["kind"].as_str() != Some("boolean_optional")
                    {
                        if let Err(e) = same_default(&cmd, name, &f["default"]) {
                            problems.push(e);
                        }
                    }
                }
            }
        }
        // Every choice: accepted, or refused by its own `--flag value` row.
        let (Some(choices), Some(name)) = (f["choices"].as_array(), f["flags"][0].as_str()) else {
            continue;
        };
        if row_for(d.refused, name).is_some() {
            continue; // the whole flag is refused, whatever the choice
        }
        for c in choices.iter().filter_map(Value::as_str) {
            let argv = vec![name.to_string(), c.to_string()];
            let row = d.refused.iter().find(|r| r.flag == format!("{name} {c}"));
            match ((d.run)(&argv), row) {
                (Err(clap), _) => problems.push(format!("{argv:?}: not accepted: {clap}")),
                (Ok(Err(e)), Some(r)) if e.starts_with(r.flag) && e.ends_with(r.reason) => {}
                (Ok(res), Some(_)) => {
                    problems.push(format!("{argv:?}: listed as refused, but {res:?}"))
                }
                (Ok(Err(e)), None) if e.contains("not supported") || e.contains("unknown") => {
                    problems.push(format!("{argv:?}: {e}"))
                }
                (Ok(_), None) => {}
            }
        }
    }
    (problems, accepted, refused)
}

/// Each row of the table names a flag (or choice) the reference has: no stale refusal.
fn rows_name_reference_flags(d: &DropIn, flags: &[Value]) {
    for r in d.refused {
        let (flag, choice) = r.flag.split_once(' ').unwrap_or((r.flag, ""));
        let hit = flags.iter().any(|f| {
            let names: Vec<&str> = f["flags"]
                .as_array()
                .unwrap()
                .iter()
                .filter_map(Value::as_str)
                .collect();
            let name_ok = names
                .iter()
                .any(|n| *n == flag || flag.strip_suffix('*').is_some_and(|p| n.starts_with(p)));
            name_ok
                && (choice.is_empty()
                    || f["choices"]
                        .as_array()
                        .is_some_and(|c| c.iter().any(|v| v == choice)))
        });
        assert!(
            hit,
            "{}: the row {:?} names no flag of the reference",
            d.tool.name, r.flag
        );
    }
}

/// The tool's migration page names every refusal, so a user can check a command line there.
fn docs_list_every_refusal(d: &DropIn) {
    let page = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join(format!("docs/migrate-{}.md", d.tool.name));
    let text = std::fs::read_to_string(&page).unwrap();
    for r in d.refused {
        let (flag, choice) = r.flag.split_once(' ').unwrap_or((r.flag, ""));
        let named = if choice.is_empty() {
            text.contains(&format!("`{flag}`"))
                || text.contains(&format!("{flag},"))
                || text.contains(&format!("{flag} "))
                || flag
                    .match_indices('-')
                    .skip(2)
                    .any(|(i, _)| text.contains(&format!("{}*", &flag[..=i])))
        } else {
            text.contains(flag)
                && (text.contains(choice)
                    || choice
                        .match_indices('-')
                        .any(|(i, _)| text.contains(&format!("{}*", &choice[..i]))))
        };
        assert!(
            named,
            "{} does not name the refused {:?}",
            page.display(),
            r.flag
        );
    }
}

fn conform(d: &DropIn) {
    // Read once: the reference's Python imports its whole package (tens of seconds).
    let flags = d.tool.flags();
    rows_name_reference_flags(d, &flags);
    docs_list_every_refusal(d);
    let (problems, accepted, refused) = check(d, &flags);
    eprintln!(
        "{} {}: {accepted} flag spellings accepted, {refused} refused with their reason",
        d.tool.name, d.tool.version
    );
    assert!(
        problems.is_empty(),
        "llmspeed {} does not conform to {} {}:\n{}",
        d.command,
        d.tool.name,
        d.tool.version,
        problems.join("\n")
    );
    let prefixes = Prefixes::of(d, &flags);
    prefixes.llmspeed_resolves_them(d);
    // Where the reference is installed: its parser's verdict on each underscore spelling and
    // each shortened flag, asked in one run of its Python.
    if let Some(python) = d.tool.python() {
        let under = underscore_probes(d, &flags);
        let short = prefixes.probes();
        let all: Vec<Vec<String>> = under.iter().chain(&short).cloned().collect();
        let answers = d.tool.probe(&python, &all);
        let (a_under, a_short) = answers.split_at(under.len());
        let n = underscores(d, &under, a_under);
        eprintln!(
            "{} {}: {n} underscore spellings accepted",
            d.tool.name, d.tool.version
        );
        // vLLM takes them all, SGLang none: the check cannot pass by accident.
        if d.tool.name == "vllm" {
            assert!(n > 50, "vLLM accepted only {n}");
        } else {
            assert_eq!(n, 0);
        }
        let (unique, ambiguous) = prefixes.agree(d, &short, a_short);
        eprintln!(
            "{} {}: {unique} shortened flags taken and {ambiguous} ambiguous ones refused by both",
            d.tool.name, d.tool.version
        );
    }
}

/// The command line as `llmspeed` parses it (its argv passes included): parsed or not.
fn llmspeed_parses(d: &DropIn, argv: &[String]) -> Result<(), String> {
    llmspeed_parsed(d, argv).map(|_| ())
}

/// The command line as `llmspeed` parses it: what it parsed to (its `Debug` text), or the
/// refusal.
fn llmspeed_parsed(d: &DropIn, argv: &[String]) -> Result<String, String> {
    let given = ["llmspeed"]
        .iter()
        .chain(d.words)
        .map(|w| w.to_string())
        .chain(argv.iter().cloned())
        .map(std::ffi::OsString::from)
        .collect();
    llmspeed::cli::try_parse(given)
        .map(|cli| format!("{cli:?}"))
        .map_err(|e| e.to_string())
}

/// What a shortened flag must do.
enum Expect {
    /// Mean the flag written in full: this command line.
    Same(Vec<String>),
    /// Be refused as ambiguous between these flags.
    Ambiguous(Vec<String>),
    /// Be refused: it starts only this llmspeed extra (the reference has no such flag).
    Extra(String),
}

/// Shortened flags, worked out from the reference's own flags (its parser's, `--help` added,
/// as `argparse` adds it): for every flag its shortest prefix that starts no other flag (when
/// shorter than the flag), and its longest prefix that starts two or more (a flag's own name
/// excepted: `--tokenizer` is a flag, not a prefix of `--tokenizer-mode`); for every llmspeed
/// extra its shortest prefix that starts no reference flag.
struct Prefixes {
    cases: Vec<(Vec<String>, Expect)>,
}

impl Prefixes {
    fn of(d: &DropIn, flags: &[Value]) -> Self {
        let named: Vec<(&str, &Value)> = flags
            .iter()
            .flat_map(|f| {
                f["flags"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .filter_map(Value::as_str)
                    .filter(|n| n.starts_with("--"))
                    .map(move |n| (n, f))
            })
            .collect();
        let mut names: Vec<&str> = named.iter().map(|(n, _)| *n).collect();
        names.push("--help");
        // llmspeed resolves prefixes among exactly the reference's flags.
        let root = llmspeed::cli::Cli::command();
        let mut ours = d.abbrev.reference(&root);
        ours.sort();
        let mut theirs: Vec<String> = names.iter().map(|n| n.to_string()).collect();
        theirs.sort();
        assert_eq!(
            ours, theirs,
            "llmspeed {}'s flags less its extras (src/cli/abbrev.rs) are not {} {}'s",
            d.command, d.tool.name, d.tool.version
        );
        let all_ours = d.abbrev.ours(&root);
        let starts = |p: &str| -> Vec<String> {
            names
                .iter()
                .filter(|n| n.starts_with(p))
                .map(|n| n.to_string())
                .collect()
        };
        let mut cases = Vec::new();
        for (name, f) in &named {
            let value = sample(f, name, d.refused);
            let with = |flag: &str| -> Vec<String> {
                std::iter::once(flag.to_string())
                    .chain(value.clone())
                    .collect()
            };
            if let Some(p) = (3..name.len())
                .map(|k| &name[..k])
                .find(|p| starts(p).len() == 1)
            {
                cases.push((with(p), Expect::Same(with(name))));
                if let Some(v) = &value {
                    cases.push((vec![format!("{p}={v}")], Expect::Same(with(name))));
                }
            }
            if let Some(p) = (3..name.len())
                .rev()
                .map(|k| &name[..k])
                .find(|p| starts(p).len() >= 2 && !names.contains(p))
            {
                let mut cands = starts(p);
                cands.sort();
                cases.push((vec![p.to_string()], Expect::Ambiguous(cands)));
            }
        }
        for extra in d.abbrev.all_extras() {
            assert!(
                all_ours.iter().any(|o| o == extra),
                "{extra} is listed as an extra of llmspeed {} but is none of its flags",
                d.command
            );
            // In full, an extra must not mean another flag to the reference.
            assert!(
                starts(extra).len() != 1,
                "llmspeed {}'s {extra} is a shortened {:?} to {} {}",
                d.command,
                starts(extra),
                d.tool.name,
                d.tool.version
            );
            if let Some(p) = (3..extra.len())
                .map(|k| &extra[..k])
                .find(|p| starts(p).is_empty())
            {
                cases.push((vec![p.to_string()], Expect::Extra(extra.to_string())));
            }
        }
        Self { cases }
    }

    /// llmspeed's own verdicts, with no reference: a unique prefix parses to exactly what the
    /// flag in full parses to; an ambiguous one is refused on one line naming each candidate;
    /// a prefix of an extra only is refused naming the extra.
    fn llmspeed_resolves_them(&self, d: &DropIn) {
        let mut problems = Vec::new();
        for (argv, expect) in &self.cases {
            let ours = llmspeed_parsed(d, argv);
            match expect {
                Expect::Same(full) => {
                    if ours != llmspeed_parsed(d, full) {
                        problems.push(format!("{argv:?} is not {full:?}: {ours:?}"));
                    }
                }
                Expect::Ambiguous(cands) => match &ours {
                    Err(e) if candidates_ours(e).as_ref() == Some(cands) => {}
                    other => problems.push(format!(
                        "{argv:?}: refused as ambiguous between {cands:?}? {other:?}"
                    )),
                },
                Expect::Extra(extra) => match &ours {
                    Err(e)
                        if e.contains(&format!("write {extra}"))
                            || e.contains(&format!(" or {extra}")) => {}
                    other => problems.push(format!("{argv:?}: refused naming {extra}? {other:?}")),
                },
            }
        }
        assert!(
            problems.is_empty(),
            "llmspeed {}'s shortened flags:\n{}",
            d.command,
            problems.join("\n")
        );
    }

    /// Each command line the reference's parser is asked about (the flags in full too).
    fn probes(&self) -> Vec<Vec<String>> {
        let mut out: Vec<Vec<String>> = Vec::new();
        for (argv, expect) in &self.cases {
            let full = match expect {
                Expect::Same(full) => Some(full),
                _ => None,
            };
            for p in std::iter::once(argv).chain(full) {
                if !out.contains(p) {
                    out.push(p.clone());
                }
            }
        }
        out
    }

    /// The reference's verdicts equal llmspeed's: a unique prefix parses to the namespace of
    /// the flag in full (the reference resolved it to that flag) where llmspeed parses it; an
    /// ambiguous one is refused by both, naming the same flags; a prefix of an extra only is
    /// refused by both. Returns how many prefixes were taken and how many refused as ambiguous.
    fn agree(&self, d: &DropIn, probes: &[Vec<String>], answers: &[Value]) -> (usize, usize) {
        let theirs = |argv: &Vec<String>| -> &Value {
            &answers[probes.iter().position(|p| p == argv).expect("asked")]
        };
        let (mut problems, mut unique, mut ambiguous) = (Vec::new(), 0, 0);
        let who = format!("{} {}", d.tool.name, d.tool.version);
        for (argv, expect) in &self.cases {
            let t = theirs(argv);
            let ours = llmspeed_parses(d, argv);
            if t.get("ok").is_some() != ours.is_ok() {
                problems.push(format!("{argv:?}: {who} says {t}, llmspeed {ours:?}"));
                continue;
            }
            match expect {
                Expect::Same(full) => {
                    let f = theirs(full);
                    if !same_namespace(&t["ok"], &f["ok"]) || t.get("ok").is_none() {
                        problems.push(format!(
                            "{argv:?}: {who} does not read it as {full:?}: {t} / {f}"
                        ));
                    } else {
                        unique += 1;
                    }
                }
                Expect::Ambiguous(cands) => {
                    let msg = t["error"].as_str().unwrap_or("");
                    match candidates_argparse(msg) {
                        Some(c) if &c == cands => ambiguous += 1,
                        _ => problems.push(format!(
                            "{argv:?}: {who} does not refuse it as ambiguous between \
                             {cands:?}: {t}"
                        )),
                    }
                }
                Expect::Extra(_) => {}
            }
        }
        assert!(
            problems.is_empty(),
            "shortened flags differ from {who}:\n{}",
            problems.join("\n")
        );
        (unique, ambiguous)
    }
}

/// Two parsed namespaces alike, save vLLM's `--request-id-prefix` default, drawn at random
/// each time the parser is built (`bench-<8 hex digits>-`).
fn same_namespace(a: &Value, b: &Value) -> bool {
    let random = |v: &Value| {
        v.as_str().is_some_and(|s| {
            s.len() == 15
                && s.starts_with("bench-")
                && s[6..14].bytes().all(|c| c.is_ascii_hexdigit())
        })
    };
    match (a.as_object(), b.as_object()) {
        (Some(a), Some(b)) => {
            a.len() == b.len()
                && a.iter()
                    .all(|(k, v)| b.get(k).is_some_and(|w| v == w || (random(v) && random(w))))
        }
        _ => false,
    }
}

/// The flags named by argparse's refusal of an ambiguous prefix
/// (`ambiguous option: --num could match --num-prompts, --num-warmups`), sorted.
fn candidates_argparse(msg: &str) -> Option<Vec<String>> {
    let list = msg
        .strip_prefix("ambiguous option: ")?
        .split_once(" could match ")?
        .1;
    let mut c: Vec<String> = list.split(", ").map(str::to_string).collect();
    c.sort();
    Some(c)
}

/// The flags named by llmspeed's refusal of an ambiguous prefix, sorted; `None` unless the
/// refusal is that one, on one line.
fn candidates_ours(msg: &str) -> Option<Vec<String>> {
    let line = msg.trim_end();
    if line.lines().count() != 1 || line.contains("unexpected argument") {
        return None;
    }
    let list = line.split_once(" is ambiguous: it could be ")?.1;
    let list = list.split_once(" (")?.0;
    let mut c: Vec<String> = list.split(", ").map(str::to_string).collect();
    c.sort();
    Some(c)
}

/// Each multi-word flag written with underscores (`--random_input_len 5`, and
/// `--random_input_len=5` for a value flag).
fn underscore_probes(d: &DropIn, flags: &[Value]) -> Vec<Vec<String>> {
    let mut probes: Vec<Vec<String>> = Vec::new();
    for f in flags {
        let Some(name) = f["flags"][0].as_str().filter(|n| n[2..].contains('-')) else {
            continue;
        };
        let under = format!("--{}", name[2..].replace('-', "_"));
        match sample(f, name, d.refused) {
            Some(v) => {
                probes.push(vec![under.clone(), v.clone()]);
                probes.push(vec![format!("{under}={v}")]);
            }
            None => probes.push(vec![under]),
        }
    }
    probes
}

/// The underscore spellings: accepted by llmspeed exactly where the reference's own parser
/// accepts them (vLLM's `FlexibleArgumentParser` rewrites underscores; SGLang's `argparse`
/// parser refuses them). Returns the spellings the reference accepted.
fn underscores(d: &DropIn, probes: &[Vec<String>], answers: &[Value]) -> usize {
    let mut problems = Vec::new();
    let mut accepted = 0;
    for (argv, a) in probes.iter().zip(answers) {
        let theirs = a.get("ok").is_some();
        let ours = llmspeed_parses(d, argv);
        accepted += theirs as usize;
        if theirs != ours.is_ok() {
            problems.push(format!(
                "{argv:?}: {} {} {}, llmspeed {}",
                d.tool.name,
                d.tool.version,
                if theirs { "parses it" } else { "refuses it" },
                match &ours {
                    Ok(()) => "parses it".to_string(),
                    Err(e) => format!("refuses it: {}", e.lines().next().unwrap_or("")),
                }
            ));
        }
    }
    assert!(
        problems.is_empty(),
        "underscore spellings differ from {} {}:\n{}",
        d.tool.name,
        d.tool.version,
        problems.join("\n")
    );
    accepted
}

#[test]
fn underscore_spellings_where_no_reference_is_installed() {
    // The two ways round, by hand; `conform` asks the installed references about every flag.
    let arg = |s: &[&str]| s.iter().map(|x| x.to_string()).collect::<Vec<_>>();
    assert!(llmspeed_parses(&VLLM, &arg(&["--random_input_len", "5"])).is_ok());
    assert!(llmspeed_parses(&VLLM, &arg(&["--num_prompts=5"])).is_ok());
    assert!(llmspeed_parses(&SGLANG, &arg(&["--random_input_len", "5"])).is_err());
    assert!(llmspeed_parses(&SGLANG, &arg(&["--random-input-len", "5"])).is_ok());
}

#[test]
fn bench_serve_takes_every_flag_of_vllm_bench_serve() {
    conform(&VLLM);
}

#[test]
fn bench_sglang_takes_every_flag_of_sglang_bench_serving() {
    conform(&SGLANG);
}
