//! The file descriptors a self-test needs, checked before it starts. Server and client run in
//! this one process, so every stream holds two descriptors here (the server's end and the
//! client's; with `--packet-stamps` the client has one packet socket for all). A run past the
//! process's limit used to start anyway and fail its late streams with `EMFILE`; it is refused
//! up front instead, naming the limit and what to do.
//!
//! Owns: the count ([`need`]), the decision ([`plan`], pure) and the one `setrlimit`
//! ([`ensure`]).

/// Descriptors beyond the streams': the standard streams, both runtimes' epoll and wake-up
/// descriptors, the listener, the client's packet socket, the external client's pipes, with
/// room.
pub const SPARE: u64 = 256;

/// Descriptors a run of `streams` needs in this process, `per_stream` each.
pub fn need(streams: usize, per_stream: u64) -> u64 {
    (streams as u64)
        .saturating_mul(per_stream)
        .saturating_add(SPARE)
}

/// What to do with the limits `soft` and `hard` for `need` descriptors: `Ok(None)` when the
/// soft limit already allows it, `Ok(Some(new_soft))` to raise it (never past `hard`), and
/// `Err(hard)` when the hard limit is below the need (only a privileged user can raise that).
pub fn plan(need: u64, soft: u64, hard: u64) -> Result<Option<u64>, u64> {
    if soft >= need {
        Ok(None)
    } else if hard >= need {
        Ok(Some(need))
    } else {
        Err(hard)
    }
}

/// The most streams, `per_stream` descriptors each, that fit under `hard`.
pub fn max_streams(hard: u64, per_stream: u64) -> u64 {
    hard.saturating_sub(SPARE) / per_stream.max(1)
}

/// The refusal: what the run needs, what the process may open, and how to get there.
pub fn refusal(streams: usize, per_stream: u64, what: &str, hard: u64) -> String {
    let need = need(streams, per_stream);
    format!(
        "{streams} streams need {need} file descriptors in this process ({per_stream} per stream: {what}; {SPARE} spare), \
         but its hard limit is {hard} (`ulimit -Hn`); raise it (as root: `ulimit -Hn {need} && ulimit -n {need}`; \
         systemd LimitNOFILE={need}; docker run --ulimit nofile={need}) or run at most {} streams",
        max_streams(hard, per_stream)
    )
}

/// Raise this process's soft `RLIMIT_NOFILE` to what `streams` need, or refuse (see
/// [`refusal`]). Where the limit cannot be read the run goes ahead (its connects then fail
/// visibly, stream by stream).
// `rlim_t` is `u64` on Linux and macOS but `i64` on some BSDs: the casts are not idle there.
#[allow(clippy::unnecessary_cast)]
pub fn ensure(streams: usize, per_stream: u64, what: &str) -> Result<(), String> {
    let need = need(streams, per_stream);
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: valid pointer to an rlimit.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) } != 0 {
        return Ok(());
    }
    match plan(need, lim.rlim_cur as u64, lim.rlim_max as u64) {
        Ok(None) => Ok(()),
        Ok(Some(soft)) => {
            lim.rlim_cur = soft as libc::rlim_t;
            // SAFETY: as above.
            if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &lim) } != 0 {
                let e = std::io::Error::last_os_error();
                return Err(format!(
                    "cannot raise the open-file limit to {need} for {streams} streams: {e}"
                ));
            }
            Ok(())
        }
        Err(hard) => Err(refusal(streams, per_stream, what, hard)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ten_thousand_streams_need_twice_that_and_room() {
        assert_eq!(need(10_000, 2), 20_256);
        assert_eq!(need(10_000, 1), 10_256);
        assert_eq!(need(0, 2), SPARE);
    }

    #[test]
    fn raises_the_soft_limit_up_to_the_hard_one_and_refuses_past_it() {
        // Enough already: nothing to do.
        assert_eq!(plan(20_256, 20_256, 20_256), Ok(None));
        assert_eq!(plan(1_000, 65_536, 65_536), Ok(None));
        // A soft limit of 1024 under a hard one of a million (a common default): raised.
        assert_eq!(plan(20_256, 1_024, 1_048_576), Ok(Some(20_256)));
        // The hard limit of the development VM (20000) is below 10,000 streams' need.
        assert_eq!(plan(20_256, 20_000, 20_000), Err(20_000));
        assert_eq!(plan(20_256, 1_024, 20_255), Err(20_255));
    }

    #[test]
    fn the_refusal_names_the_need_the_limit_and_the_streams_that_fit() {
        // (20000 - 256) / 2 = 9872 streams; (20000 - 256) / 1 for an external client's server.
        assert_eq!(max_streams(20_000, 2), 9_872);
        assert_eq!(max_streams(20_000, 1), 19_744);
        assert_eq!(max_streams(100, 2), 0);
        let msg = refusal(10_000, 2, "the server's end and the client's", 20_000);
        assert!(
            msg.starts_with("10000 streams need 20256 file descriptors"),
            "{msg}"
        );
        assert!(msg.contains("hard limit is 20000"), "{msg}");
        assert!(msg.contains("ulimit -Hn 20256"), "{msg}");
        assert!(msg.contains("at most 9872 streams"), "{msg}");
        assert!(!msg.contains('\n'), "{msg}");
    }
}
