//! `llmspeed completions bash` is a script bash itself accepts and completes with: sourced into
//! a real bash, `complete -p llmspeed` names its function, and that function completes a
//! subcommand, a nested subcommand and a long flag the way clap parses them. `llmspeed man`
//! prints a man page naming every command.

use std::io::Write;
use std::process::Command;

fn llmspeed(args: &[&str]) -> Vec<u8> {
    let out = Command::new(env!("CARGO_BIN_EXE_llmspeed"))
        .args(args)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    out.stdout
}

/// What bash completes for the command line `words` (the last word being completed), using
/// the generated script: the function `complete -p` registered, called as bash calls it.
fn complete(script: &std::path::Path, words: &[&str]) -> Vec<String> {
    let program = r#"
source "$1"; shift
spec=$(complete -p llmspeed) || exit 3
func=$(sed -E 's/.*-F ([^ ]+).*/\1/' <<<"$spec")
COMP_WORDS=("$@")
COMP_CWORD=$(( $# - 1 ))
COMP_LINE="$*"
COMP_POINT=${#COMP_LINE}
"$func" llmspeed "${COMP_WORDS[COMP_CWORD]}" "${COMP_WORDS[COMP_CWORD-1]}"
printf '%s\n' "${COMPREPLY[@]}"
"#;
    let out = Command::new("bash")
        .args(["--norc", "--noprofile", "-c", program, "bash"])
        .arg(script)
        .args(words)
        .output()
        .expect("bash must be installed");
    assert!(
        out.status.success(),
        "bash: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|l| l.trim().to_string())
        .filter(|l| !l.is_empty())
        .collect()
}

#[test]
fn bash_completes_subcommands_and_flags_from_the_generated_script() {
    let mut script = tempfile::NamedTempFile::new().unwrap();
    script
        .write_all(&llmspeed(&["completions", "bash"]))
        .unwrap();
    let path = script.path();

    assert_eq!(complete(path, &["llmspeed", "be"]), ["bench"]);
    assert_eq!(complete(path, &["llmspeed", "se"]), ["selftest"]);
    assert_eq!(complete(path, &["llmspeed", "bench", "se"]), ["serve"]);
    assert_eq!(
        complete(path, &["llmspeed", "bench", "serve", "--num-promp"]),
        ["--num-prompts"]
    );
    // Every subcommand is offered on an empty word.
    let all = complete(path, &["llmspeed", ""]);
    for sub in [
        "stream", "mock", "bench", "probe", "matrix", "report", "merge", "selftest",
    ] {
        assert!(all.iter().any(|w| w == sub), "{sub} not in {all:?}");
    }
}

#[test]
fn zsh_and_fish_scripts_name_the_command() {
    let zsh = String::from_utf8(llmspeed(&["completions", "zsh"])).unwrap();
    assert!(zsh.starts_with("#compdef llmspeed"), "{}", &zsh[..80]);
    let fish = String::from_utf8(llmspeed(&["completions", "fish"])).unwrap();
    assert!(fish.contains("complete -c llmspeed"), "{}", &fish[..200]);
}

#[test]
fn man_page_names_every_command_and_writes_one_page_each() {
    let page = String::from_utf8(llmspeed(&["man"])).unwrap();
    assert!(
        page.starts_with(".ie \\n(.g .ds Aq"),
        "not roff: {}",
        &page[..80]
    );
    assert!(page.contains(".TH llmspeed 1"), "{}", &page[..200]);
    for sub in ["bench", "matrix", "selftest", "completions"] {
        assert!(page.contains(sub), "{sub} missing");
    }
    let dir = tempfile::tempdir().unwrap();
    llmspeed(&["man", "--dir", dir.path().to_str().unwrap()]);
    for f in [
        "llmspeed.1",
        "llmspeed-bench.1",
        "llmspeed-bench-serve.1",
        "llmspeed-mock.1",
    ] {
        let text = std::fs::read_to_string(dir.path().join(f)).unwrap();
        assert!(text.contains(".TH"), "{f}");
    }
    let serve = std::fs::read_to_string(dir.path().join("llmspeed-bench-serve.1")).unwrap();
    assert!(
        serve.contains("num\\-prompts"),
        "bench serve's flags are in its page"
    );
}
