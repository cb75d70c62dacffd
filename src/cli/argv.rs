//! A value that starts with a hyphen reaches its flag's own parser.
//!
//! clap reads `--duration -1` as the flag `--duration` followed by a short flag `-1`, and answers
//! "unexpected argument '-1' found" without naming `--duration`. Before parsing, every value
//! flag followed by a token that looks like a negative number or duration (`-1`, `-0.5`,
//! `-30s`, `-.5`) is joined into `--flag=VALUE`, which clap always reads as the flag's value:
//! the flag's parser then refuses it with an error that names the flag and says what it
//! accepts. Which flags take values is read from the command itself, so every value flag of
//! every command is covered.
//!
//! `bench serve` also takes vLLM's spellings with underscores (`--random_input_len 5`,
//! `--random_input_len=5`): `vllm bench serve`'s `FlexibleArgumentParser` turns the underscores
//! of every `--` token's name into hyphens before parsing ([`vllm_spellings`]). SGLang's parser
//! is a plain `argparse` one that refuses them, so `bench sglang` does too. Pure: argv in, argv
//! out.

use clap::Command;
use std::any::TypeId;
use std::ffi::OsString;

/// `argv` (program name first) with each `--flag -N…` joined into `--flag=-N…`.
pub fn join_hyphen_values(cmd: &Command, argv: Vec<OsString>) -> Vec<OsString> {
    let mut out = Vec::with_capacity(argv.len());
    let mut cur = cmd;
    let mut it = argv.into_iter();
    if let Some(program) = it.next() {
        out.push(program);
    }
    while let Some(tok) = it.next() {
        let Some(s) = tok.to_str() else {
            out.push(tok);
            continue;
        };
        if s == "--" {
            out.push(tok);
            out.extend(it);
            break;
        }
        if let Some(sub) = cur.find_subcommand(s) {
            cur = sub;
            out.push(tok);
            continue;
        }
        let takes_value = s
            .strip_prefix("--")
            .filter(|name| !name.contains('='))
            .is_some_and(|name| value_flag(cur, name));
        if !takes_value {
            out.push(tok);
            continue;
        }
        // The flag's value, whatever it is, is never a subcommand name or a flag of its own.
        match it.next() {
            Some(v) if v.to_str().is_some_and(looks_negative) => {
                let mut joined = tok;
                joined.push("=");
                joined.push(&v);
                out.push(joined);
            }
            Some(v) => {
                out.push(tok);
                out.push(v);
            }
            None => out.push(tok),
        }
    }
    out
}

/// `argv` with vLLM's `FlexibleArgumentParser` rewrite when the command is `bench serve`
/// (`bench`'s own flags may come first): in each token after `serve` that starts with `--`
/// (values too, as vLLM does), the underscores of the name — the part before the first `=`, up
/// to its first `.` — become hyphens.
pub fn vllm_spellings(argv: Vec<OsString>) -> Vec<OsString> {
    let start = match super::abbrev::drop_in(&argv) {
        Some((d, start)) if d.command == super::abbrev::SERVE.command => start,
        _ => return argv,
    };
    argv.into_iter()
        .enumerate()
        .map(|(i, tok)| if i < start { tok } else { hyphenate(tok) })
        .collect()
}

/// One token as vLLM rewrites it (`--a_b.c_d=e_f` -> `--a-b.c_d=e_f`).
fn hyphenate(tok: OsString) -> OsString {
    let Some(rest) = tok.to_str().and_then(|s| s.strip_prefix("--")) else {
        return tok;
    };
    if !rest.contains('_') {
        return tok;
    }
    let (key, value) = match rest.split_once('=') {
        Some((k, v)) => (k, Some(v)),
        None => (rest, None),
    };
    let end = key.find('.').unwrap_or(key.len());
    let mut out = format!("--{}{}", key[..end].replace('_', "-"), &key[end..]);
    if let Some(v) = value {
        out.push('=');
        out.push_str(v);
    }
    out.into()
}

/// clap's refusal of a negative value, with what an unsigned whole-number flag takes added as a
/// tip: its parser says only "invalid digit found in string". Other refusals are unchanged
/// (the duration parser, for one, already lists its forms).
pub fn explain(cmd: &Command, argv: &[OsString], mut err: clap::Error) -> clap::Error {
    use clap::error::{ContextKind, ContextValue, ErrorKind};
    if err.kind() != ErrorKind::ValueValidation {
        return err;
    }
    let (Some(ContextValue::String(arg)), Some(ContextValue::String(value))) = (
        err.get(ContextKind::InvalidArg),
        err.get(ContextKind::InvalidValue),
    ) else {
        return err;
    };
    if !looks_negative(value) {
        return err;
    }
    let Some(name) = arg
        .split_whitespace()
        .next()
        .and_then(|f| f.strip_prefix("--"))
        .map(str::to_string)
    else {
        return err;
    };
    let mut leaf = cmd;
    for tok in argv.iter().filter_map(|t| t.to_str()) {
        if let Some(sub) = leaf.find_subcommand(tok) {
            leaf = sub;
        }
    }
    let unsigned = leaf
        .get_arguments()
        .find(|a| a.get_long() == Some(name.as_str()))
        .is_some_and(|a| {
            let t = a.get_value_parser().type_id();
            [
                TypeId::of::<u8>(),
                TypeId::of::<u16>(),
                TypeId::of::<u32>(),
                TypeId::of::<u64>(),
                TypeId::of::<usize>(),
            ]
            .iter()
            .any(|id| t == *id)
        });
    if unsigned {
        let tip = format!("--{name} takes a whole number such as 100; a negative one is refused");
        err.insert(
            ContextKind::Suggested,
            ContextValue::StyledStrs(vec![tip.into()]),
        );
    }
    err
}

/// Whether `--name` is a flag of `cmd` that takes a value.
fn value_flag(cmd: &Command, name: &str) -> bool {
    cmd.get_arguments().any(|a| {
        !a.is_positional()
            && a.get_action().takes_values()
            && (a.get_long() == Some(name)
                || a.get_all_aliases().is_some_and(|al| al.contains(&name)))
    })
}

/// `-` then a digit or a point: a negative number or duration, never one of our flags (none
/// is a digit).
fn looks_negative(s: &str) -> bool {
    let mut c = s.chars();
    c.next() == Some('-') && c.next().is_some_and(|d| d.is_ascii_digit() || d == '.')
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cli::Cli;
    use clap::{CommandFactory, Parser};

    fn join(args: &[&str]) -> Vec<String> {
        let argv = std::iter::once("llmspeed")
            .chain(args.iter().copied())
            .map(OsString::from)
            .collect();
        join_hyphen_values(&Cli::command(), argv)
            .into_iter()
            .map(|s| s.into_string().unwrap())
            .skip(1)
            .collect()
    }

    #[test]
    fn a_negative_value_is_joined_to_its_flag() {
        assert_eq!(
            join(&["matrix", "--duration", "-1", "--mock"]),
            ["matrix", "--duration=-1", "--mock"]
        );
        assert_eq!(
            join(&[
                "bench",
                "serve",
                "--num-prompts",
                "-5",
                "--request-rate",
                "-.5"
            ]),
            ["bench", "serve", "--num-prompts=-5", "--request-rate=-.5"]
        );
        assert_eq!(
            join(&["selftest", "--gap", "-30ms"]),
            ["selftest", "--gap=-30ms"]
        );
    }

    #[test]
    fn everything_else_is_left_alone() {
        let same = |args: &[&str]| assert_eq!(join(args), args);
        // A boolean flag takes no value: `-1` stays what it is (and clap refuses it).
        same(&["matrix", "--mock", "-1"]);
        // A value that is a flag stays a flag: clap says the value is missing.
        same(&["matrix", "--duration", "--mock"]);
        // Already joined, a positive value, after `--`.
        same(&["matrix", "--duration=-1"]);
        same(&["matrix", "--duration", "5s"]);
        same(&["stream", "--", "--max-tokens", "-1"]);
        // A value equal to a subcommand's name is a value.
        same(&["bench", "serve", "--model", "serve"]);
    }

    fn refusal(args: &[&str]) -> String {
        let argv: Vec<OsString> = std::iter::once("llmspeed")
            .chain(args.iter().copied())
            .map(OsString::from)
            .collect();
        let cmd = Cli::command();
        let joined = join_hyphen_values(&cmd, argv.clone());
        let err = Cli::try_parse_from(joined).expect_err("refused");
        explain(&cmd, &argv, err).to_string()
    }

    fn spelled(args: &[&str]) -> Vec<String> {
        let argv = std::iter::once("llmspeed")
            .chain(args.iter().copied())
            .map(OsString::from)
            .collect();
        vllm_spellings(argv)
            .into_iter()
            .map(|s| s.into_string().unwrap())
            .skip(1)
            .collect()
    }

    #[test]
    fn bench_serve_takes_vllms_underscores_and_bench_sglang_does_not() {
        assert_eq!(
            spelled(&[
                "bench",
                "serve",
                "--random_input_len",
                "5",
                "--num_prompts=3"
            ]),
            [
                "bench",
                "serve",
                "--random-input-len",
                "5",
                "--num-prompts=3"
            ]
        );
        // Only the name: a value after `=` and anything from the first `.` on stay as written;
        // a token that does not start with `--` is left alone.
        assert_eq!(
            spelled(&[
                "bench",
                "serve",
                "--model=my_model",
                "--a_b.c_d",
                "my_value",
                "-x_y"
            ]),
            [
                "bench",
                "serve",
                "--model=my_model",
                "--a-b.c_d",
                "my_value",
                "-x_y"
            ]
        );
        // `bench`'s own flags may come before `serve`.
        assert_eq!(
            spelled(&[
                "bench",
                "--fail-on-client-bound",
                "serve",
                "--num_prompts=3"
            ]),
            [
                "bench",
                "--fail-on-client-bound",
                "serve",
                "--num-prompts=3"
            ]
        );
        for other in [
            ["bench", "sglang", "--random_input_len", "5"],
            ["matrix", "--mock", "--max_tokens", "5"],
        ] {
            assert_eq!(spelled(&other), other);
        }
        let parsed = |args: &[&str]| {
            let argv: Vec<OsString> = std::iter::once("llmspeed")
                .chain(args.iter().copied())
                .map(OsString::from)
                .collect();
            Cli::try_parse_from(vllm_spellings(argv)).map(|_| ())
        };
        assert!(parsed(&["bench", "serve", "--random_input_len", "5"]).is_ok());
        assert!(parsed(&["bench", "sglang", "--random_input_len", "5"]).is_err());
        assert!(parsed(&["bench", "sglang", "--random-input-len", "5"]).is_ok());
    }

    #[test]
    fn an_unsigned_flag_says_what_it_takes() {
        let e = refusal(&["bench", "serve", "--num-prompts", "-5"]);
        assert!(e.contains("invalid value '-5' for '--num-prompts"), "{e}");
        assert!(
            e.contains("tip: --num-prompts takes a whole number such as 100"),
            "{e}"
        );
        // A refusal that already says its forms gets no tip.
        let e = refusal(&["matrix", "--mock", "--duration", "-1"]);
        assert!(e.contains("try 30s, 500ms, 2m"), "{e}");
        assert!(!e.contains("tip:"), "{e}");
    }
}
