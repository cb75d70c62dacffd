//! A reference flag a front end refuses, and the one-line message that names it.
//!
//! Each front end keeps its refusals in one table (`vllm::flags::REFUSED`,
//! `sglang::flags::REFUSED`) that a reader can hold against the reference's own argument parser
//! and that the conformance test (`tests/conformance_flags.rs`) walks: every flag of the
//! reference is either accepted with its meaning or listed there with the reason.

/// One refused reference flag (or `--flag value` for a refused choice) and why.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Refusal {
    /// `--flag`, or `--flag value` where only that choice is refused.
    pub flag: &'static str,
    /// Why llmspeed does not honour it, for the user who gave it.
    pub reason: &'static str,
}

/// The refusal of `flag` in `table`, if it is listed.
pub fn find(table: &'static [Refusal], flag: &str) -> Option<&'static Refusal> {
    table.iter().find(|r| r.flag == flag)
}

/// `"{flag} is not supported by llmspeed {command}: {reason}"`, from the table's row for `flag`.
///
/// Every refusal the code raises has a row (each front end's tests check that the two agree);
/// a flag without one is still refused by name.
pub fn message(table: &'static [Refusal], command: &str, flag: &str) -> String {
    debug_assert!(
        find(table, flag).is_some(),
        "{flag} is refused but not in the table"
    );
    match find(table, flag) {
        Some(r) => format!(
            "{} is not supported by llmspeed {command}: {}",
            r.flag, r.reason
        ),
        None => format!("{flag} is not supported by llmspeed {command}"),
    }
}

/// The refusal of the first flag in `given` that was given (each `(flag, given)` names a row
/// of `table`); `Ok` when none was.
pub fn check_given(
    table: &'static [Refusal],
    command: &str,
    given: &[(&'static str, bool)],
) -> Result<(), String> {
    match given.iter().find(|(_, on)| *on) {
        Some((flag, _)) => Err(message(table, command, flag)),
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const T: &[Refusal] = &[Refusal {
        flag: "--profile",
        reason: "no profiler",
    }];

    #[test]
    fn message_names_the_flag_and_the_reason() {
        assert_eq!(
            message(T, "bench serve", "--profile"),
            "--profile is not supported by llmspeed bench serve: no profiler"
        );
        assert!(find(T, "--other").is_none());
        assert_eq!(check_given(T, "x", &[("--profile", false)]), Ok(()));
        assert_eq!(
            check_given(T, "x", &[("--profile", true)]),
            Err("--profile is not supported by llmspeed x: no profiler".to_string())
        );
    }
}
