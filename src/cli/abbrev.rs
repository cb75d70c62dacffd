//! A long flag shortened to a prefix, where the reference tool takes it: `bench serve --num-prom 5`
//! and `--num-prom=5` mean `--num-prompts 5`, as in `vllm bench serve` and SGLang's
//! `bench_serving`.
//!
//! Both references parse with Python's `argparse` and keep its `allow_abbrev` on (the default):
//! vLLM's `FlexibleArgumentParser` passes no `allow_abbrev` and rewrites only underscores, `-O`
//! and dotted `--a.b` words before handing the words to `argparse`; SGLang builds a plain
//! `ArgumentParser`. `argparse` reads each `--` word before the first bare `--` (a value's place
//! too) as follows, and so does this pass:
//! - the name (before the first `=`) is a flag: taken as written;
//! - it starts exactly one flag's name: that flag (`--num-prom=5` -> `--num-prompts=5`);
//! - it starts several: refused, naming them all;
//! - none: left for clap, which refuses it as unknown.
//!
//! The names a prefix is resolved against are the reference's own flags ([`DropIn::reference`]):
//! the command's flags less llmspeed's extras ([`DropIn::extras`]), so an extra never makes
//! ambiguous a prefix that the reference takes (`--sh` is `--sharegpt-output-len` although
//! `--shard` starts with it too). An extra is taken only in full: a prefix that starts none of
//! the reference's flags but some extra is refused naming the extra, so that a command line
//! that works here means the same to the reference or fails there.
//! `tests/conformance_flags.rs` checks both lists against the references' own parsers. Pure:
//! argv in, argv out.

use clap::Command;
use std::ffi::OsString;

/// What a `--name` resolves to among a parser's flags.
#[derive(Debug, PartialEq, Eq)]
pub enum Resolved<'a> {
    /// A flag's own name.
    Exact,
    /// The start of one flag's name only: that flag.
    Unique(&'a str),
    /// The start of several flags' names, in the order given.
    Ambiguous(Vec<&'a str>),
    /// The start of no flag's name.
    Unknown,
}

/// `name` (with its `--`, without any `=value`) among `flags`, as `argparse` resolves it.
pub fn resolve<'a>(name: &str, flags: &[&'a str]) -> Resolved<'a> {
    if flags.contains(&name) {
        return Resolved::Exact;
    }
    let hits: Vec<&'a str> = flags
        .iter()
        .copied()
        .filter(|f| f.starts_with(name))
        .collect();
    match hits.as_slice() {
        [] => Resolved::Unknown,
        [one] => Resolved::Unique(one),
        _ => Resolved::Ambiguous(hits),
    }
}

/// One drop-in command and the reference whose parser it follows.
pub struct DropIn {
    /// The subcommand of `llmspeed bench`.
    pub command: &'static str,
    /// The reference command, for messages.
    pub reference: &'static str,
    /// llmspeed's flags (and aliases) of this drop-in only that the reference's parser does not
    /// have (beside those of both drop-ins).
    pub extras: &'static [&'static str],
}

/// llmspeed's flags in both drop-ins (`--fail-on-client-bound` is `bench`'s, for both).
const COMMON_EXTRAS: [&str; 9] = [
    "--fail-on-client-bound",
    "--fail-on-upstream-batching",
    "--no-packet-stamps",
    "--num-runs",
    "--packet-stamps",
    "--shard",
    "--start-at",
    "--sweep-max-concurrency",
    "--sweep-request-rate",
];

/// `llmspeed bench serve`, after `vllm bench serve` 0.33.0.
pub const SERVE: DropIn = DropIn {
    command: "serve",
    reference: "vllm bench serve",
    extras: &[
        "--sweep-num-prompts-factor",
        "--api-key",
        "--ca-cert",
        "--system-roots",
        "--chat-end",
        "--continuous-usage",
        "--no-continuous-usage",
        "--custom-skip-chat-template",
        "--dry-run",
        "--latency-from",
        "--ttft-from",
        "--multi-turn",
        "--multi-turn-concurrency",
        "--multi-turn-delay-ms",
        "--multi-turn-max-turns",
        "--multi-turn-min-turns",
        "--multi-turn-num-turns",
        "--multi-turn-prefix-conversation-ratio",
        "--multi-turn-prefix-global-ratio",
        "--no-kernel-stamps",
        "--no-steady-state",
        "--steady-state-min-window",
        "--steady-state-threshold",
        "--preconnect",
        "--sonnet-input-len",
        "--sonnet-output-len",
        "--sonnet-prefix-len",
        "--threads",
        "--hf-prompt-column",
        "--hf-output-column",
    ],
};

/// `llmspeed bench sglang`, after SGLang 0.5.23's `python -m sglang.bench_serving`.
pub const SGLANG: DropIn = DropIn {
    command: "sglang",
    reference: "python -m sglang.bench_serving",
    extras: &["--ca-cert", "--insecure"],
};

impl DropIn {
    /// The drop-in's own command, built (help and `bench`'s global flags included).
    fn leaf(&self, root: &Command) -> Option<Command> {
        let mut root = root.clone();
        root.build();
        root.find_subcommand("bench")?
            .find_subcommand(self.command)
            .cloned()
    }

    /// Every long flag name of the drop-in, aliases included (`--help` among them).
    pub fn ours(&self, root: &Command) -> Vec<String> {
        let Some(leaf) = self.leaf(root) else {
            return Vec::new();
        };
        leaf.get_arguments()
            .filter(|a| !a.is_positional())
            .flat_map(|a| {
                a.get_long()
                    .into_iter()
                    .chain(a.get_all_aliases().unwrap_or_default())
                    .map(|n| format!("--{n}"))
                    .collect::<Vec<_>>()
            })
            .collect()
    }

    /// The reference's flags as this drop-in knows them: its own less the extras.
    pub fn reference(&self, root: &Command) -> Vec<String> {
        let extras = self.all_extras();
        self.ours(root)
            .into_iter()
            .filter(|n| !extras.contains(&n.as_str()))
            .collect()
    }

    /// Every flag of the drop-in that the reference lacks.
    pub fn all_extras(&self) -> Vec<&'static str> {
        COMMON_EXTRAS.iter().chain(self.extras).copied().collect()
    }
}

/// The drop-in named by `argv` (`llmspeed bench [FLAGS] serve|sglang ...`), and the index of
/// its first own word.
pub fn drop_in(argv: &[OsString]) -> Option<(&'static DropIn, usize)> {
    if argv.get(1).and_then(|t| t.to_str()) != Some("bench") {
        return None;
    }
    let (i, word) = argv
        .iter()
        .enumerate()
        .skip(2)
        .find(|(_, t)| !t.to_str().is_some_and(|s| s.starts_with('-')))?;
    [&SERVE, &SGLANG]
        .into_iter()
        .find(|d| word.to_str() == Some(d.command))
        .map(|d| (d, i + 1))
}

/// `argv` (program name first) with every shortened flag of `bench serve` and `bench sglang`
/// written in full, or the refusal of an ambiguous one; other commands' argv unchanged.
pub fn expand(root: &Command, argv: Vec<OsString>) -> Result<Vec<OsString>, clap::Error> {
    let Some((d, start)) = drop_in(&argv) else {
        return Ok(argv);
    };
    let ours = d.ours(root);
    let ours: Vec<&str> = ours.iter().map(String::as_str).collect();
    let extras = d.all_extras();
    let reference: Vec<&str> = ours
        .iter()
        .copied()
        .filter(|n| !extras.contains(n))
        .collect();
    let mut out = argv;
    for tok in out.iter_mut().skip(start) {
        let Some(s) = tok.to_str() else {
            continue;
        };
        if s == "--" {
            break;
        }
        if !s.starts_with("--") {
            continue;
        }
        let (name, value) = match s.split_once('=') {
            Some((n, v)) => (n, Some(v)),
            None => (s, None),
        };
        if resolve(name, &ours) == Resolved::Exact {
            continue;
        }
        let full = match resolve(name, &reference) {
            Resolved::Exact | Resolved::Unknown => {
                let hits: Vec<&str> = extras
                    .iter()
                    .copied()
                    .filter(|e| e.starts_with(name))
                    .collect();
                if hits.is_empty() {
                    continue; // clap names it as unknown
                }
                return Err(refusal(format!(
                    "{name} is not a flag of {}, and llmspeed's own flags are not shortened: \
                     write {} in full",
                    d.reference,
                    hits.join(" or ")
                )));
            }
            Resolved::Ambiguous(all) => {
                return Err(refusal(format!(
                    "{name} is ambiguous: it could be {} (a shortened flag must start one \
                     flag's name only)",
                    all.join(", ")
                )));
            }
            Resolved::Unique(full) => full,
        };
        *tok = match value {
            Some(v) => format!("{full}={v}").into(),
            None => full.into(),
        };
    }
    Ok(out)
}

fn refusal(message: String) -> clap::Error {
    clap::Error::raw(clap::error::ErrorKind::UnknownArgument, message + "\n")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cli::Cli;
    use clap::CommandFactory;

    #[test]
    fn a_prefix_resolves_as_argparse_resolves_it() {
        let flags = ["--num-prompts", "--num-warmups", "--seed", "--seed-offset"];
        assert_eq!(resolve("--num-prompts", &flags), Resolved::Exact);
        // A flag that starts another is itself when written in full.
        assert_eq!(resolve("--seed", &flags), Resolved::Exact);
        assert_eq!(
            resolve("--num-p", &flags),
            Resolved::Unique("--num-prompts")
        );
        assert_eq!(
            resolve("--n", &flags),
            Resolved::Ambiguous(vec!["--num-prompts", "--num-warmups"])
        );
        assert_eq!(
            resolve("--see", &flags),
            Resolved::Ambiguous(vec!["--seed", "--seed-offset"])
        );
        assert_eq!(
            resolve("--seed-", &flags),
            Resolved::Unique("--seed-offset")
        );
        assert_eq!(resolve("--x", &flags), Resolved::Unknown);
        // `--` alone starts every flag (the pass stops there before asking).
        assert!(matches!(resolve("--", &flags), Resolved::Ambiguous(v) if v.len() == 4));
    }

    fn expanded(args: &[&str]) -> Result<Vec<String>, String> {
        let argv = std::iter::once("llmspeed")
            .chain(args.iter().copied())
            .map(OsString::from)
            .collect();
        expand(&Cli::command(), argv)
            .map(|v| {
                v.into_iter()
                    .skip(1)
                    .map(|s| s.into_string().unwrap())
                    .collect()
            })
            .map_err(|e| e.to_string())
    }

    #[test]
    fn a_unique_prefix_is_written_in_full() {
        assert_eq!(
            expanded(&["bench", "serve", "--num-prom", "5", "--random-in=7"]).unwrap(),
            [
                "bench",
                "serve",
                "--num-prompts",
                "5",
                "--random-input-len=7"
            ]
        );
        assert_eq!(
            expanded(&["bench", "sglang", "--num-prom", "5"]).unwrap(),
            ["bench", "sglang", "--num-prompts", "5"]
        );
        // `bench`'s own flags before the subcommand are left alone; the value after `=` too.
        assert_eq!(
            expanded(&["bench", "--fail-on-client-bound", "serve", "--mod=--num"]).unwrap(),
            ["bench", "--fail-on-client-bound", "serve", "--model=--num"]
        );
        // `--help` is a flag of both parsers.
        assert_eq!(
            expanded(&["bench", "serve", "--hel"]).unwrap(),
            ["bench", "serve", "--help"]
        );
    }

    #[test]
    fn an_extra_never_makes_a_reference_prefix_ambiguous() {
        // `--shard` (ours) also starts with `--sh`, `--chat-end` with `--chat`, `--latency-from`
        // with `--la`: vLLM has one flag each.
        assert_eq!(
            expanded(&["bench", "serve", "--sh", "9", "--chat", "{}", "--la", "x"]).unwrap(),
            [
                "bench",
                "serve",
                "--sharegpt-output-len",
                "9",
                "--chat-template-kwargs",
                "{}",
                "--label",
                "x"
            ]
        );
        // Our extras in full are themselves.
        let same = ["bench", "serve", "--shard", "1/2", "--num-runs", "2"];
        assert_eq!(expanded(&same).unwrap(), same);
    }

    #[test]
    fn an_ambiguous_prefix_is_refused_naming_every_candidate() {
        let e = expanded(&["bench", "serve", "--num", "5"]).unwrap_err();
        assert_eq!(
            e.trim_end(),
            "error: --num is ambiguous: it could be --num-prompts, --num-warmups (a shortened \
             flag must start one flag's name only)"
        );
        let e = expanded(&["bench", "sglang", "--random-i=5"]).unwrap_err();
        assert!(e.contains("--random-i is ambiguous"), "{e}");
        assert!(
            e.contains("--random-input-len") && e.contains("--random-image-count"),
            "{e}"
        );
        assert!(!e.contains("unexpected argument"), "{e}");
        assert_eq!(e.trim_end().lines().count(), 1, "{e}");
    }

    #[test]
    fn a_prefix_of_our_extras_only_is_refused_naming_them() {
        let e = expanded(&["bench", "serve", "--num-r", "3"]).unwrap_err();
        assert!(
            e.contains("--num-r is not a flag of vllm bench serve")
                && e.contains("write --num-runs in full"),
            "{e}"
        );
        let e = expanded(&["bench", "sglang", "--sweep-m", "1,2"]).unwrap_err();
        assert!(e.contains("write --sweep-max-concurrency in full"), "{e}");
    }

    #[test]
    fn other_words_and_commands_are_left_alone() {
        let same = |args: &[&str]| assert_eq!(expanded(args).unwrap(), args);
        same(&["matrix", "--mock", "--dur", "5s"]);
        same(&["bench", "serve", "--", "--num"]);
        same(&["bench", "serve", "--nonsense", "-n", "x"]);
        same(&["bench", "serve", "--model", "num"]);
    }
}
