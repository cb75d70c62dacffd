//! Packet stamps (`--packet-stamps`, Linux): a client that falls behind and reads many events
//! at once still times each one, from the arrival of its own TCP segment.
//!
//! The simulated server writes one token every 2 ms; the client's observer blocks its only
//! thread for 25 ms on the third token, so the next ten or so tokens wait in the socket and
//! come in one read. Truth is the server's trace: each token's write, stamped just before and
//! just after the system call, on the same TSC clock as the client's stamps (one process).
//!
//! - Socket stamps alone (kernel receive stamps): the merged read's tokens share one stamp,
//!   the newest segment's, so its first token is off its write by most of the pause.
//! - Packet stamps: every token lies within [`BOUND`] of its own write, stamps strictly
//!   increase, and tokens that were read many milliseconds late still carry distinct times.
//!
//! Needs `CAP_NET_RAW`. Under `CI=true` (root) its absence fails the test; elsewhere the test
//! says it cannot run and passes.
#![cfg(target_os = "linux")]

#[path = "support/mock.rs"]
mod mock_server;

use llmspeed::clock::Clock;
use llmspeed::mock::trace::TraceRec;
use llmspeed::net::request::{Generation, Prompt};
use llmspeed::net::{Cancel, Client, ClientConfig, Flow, Target};
use llmspeed::timeline::{EventRecord, StampSource, Timeline};
use mock_server::TracedMock;
use std::time::Duration;

const STEP_US: f64 = 2000.0;
const TOKENS: u32 = 30;
const PAUSE: Duration = Duration::from_millis(25);
/// How far a packet-stamped token may lie from its write. The stamp is taken inside the
/// write on `lo`; what is left is converting `CLOCK_REALTIME` to the TSC clock at the read
/// and the calibration of two `Clock`s. A token of the merged read stamped with the read
/// misses its write by up to the pause, so by more than ten times this.
const BOUND: Duration = Duration::from_millis(1);

struct Run {
    tl: Timeline,
    trace: Vec<TraceRec>,
    clock: Clock,
}

/// One stream of [`TOKENS`] tokens, the client blocked for [`PAUSE`] on the third; `None` when
/// packet stamps were asked for and cannot be had here.
fn run(packet: bool) -> Option<Run> {
    let mock = TracedMock::start(STEP_US);
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let mut cfg = ClientConfig::new(Target::parse(&format!("http://{}", mock.addr)).unwrap());
    cfg.packet_stamps = packet;
    let client = Client::new(cfg, Clock::new()).unwrap();
    if let Err(why) = client.packet_stamps() {
        let _ = mock.finish();
        if std::env::var("CI").as_deref() == Ok("true") {
            panic!("CI=true: packet stamps must work here (CI runs as root): {why:?}");
        }
        eprintln!("skipped: {}", why.note());
        return None;
    }
    let mut g = Generation::new("mock-model", Prompt::Text("the river runs on".into()));
    g.max_tokens = Some(TOKENS);
    g.ignore_eos = true;
    let mut req = g.stream_request(Some(false)).unwrap();
    req.request_id = Some("packet-stamps".into());
    let tl = rt.block_on(async {
        let mut seen = 0;
        // Blocking the runtime's only thread is the point: the tokens pile up in the socket.
        let mut late = |e: &EventRecord, _: Option<&[u8]>| {
            seen += e.tokens;
            if seen == 3 {
                std::thread::sleep(PAUSE);
            }
            Flow::Continue
        };
        let start = client.clock().raw();
        client.stream(&req, start, &mut late, &Cancel::new()).await
    });
    let clock = client.clock().clone();
    let mut trace = mock.finish();
    let trace = trace
        .remove("packet-stamps")
        .expect("the server traced the request");
    assert!(tl.is_ok(), "{:?}", tl.outcome);
    assert_eq!(trace.len(), TOKENS as usize);
    assert_eq!(tl.event_tokens(), u64::from(TOKENS));
    Some(Run { tl, trace, clock })
}

impl Run {
    /// Each token's stamp, with how far it lies from its write's span, ns (0 inside).
    fn errors(&self) -> Vec<(u64, u64)> {
        let c = &self.clock;
        let stamps = self
            .tl
            .events
            .iter()
            .flat_map(|e| std::iter::repeat_n(e.t, e.tokens as usize));
        stamps
            .zip(&self.trace)
            .enumerate()
            .map(|(k, (t, rec))| {
                assert_eq!(rec.index as usize, k);
                let (t, lo, hi) = (
                    c.epoch_ns(t),
                    c.epoch_ns(rec.t_before_raw),
                    c.epoch_ns(rec.t_raw),
                );
                (t, lo.saturating_sub(t).max(t.saturating_sub(hi)))
            })
            .collect()
    }

    /// Tokens the client read at least `late` after they arrived.
    fn read_late(&self, late: Duration) -> usize {
        self.tl
            .events
            .iter()
            .filter(|e| e.tokens > 0 && u128::from(e.wakeup_ns) >= late.as_nanos())
            .count()
    }
}

#[test]
fn socket_stamps_give_a_merged_read_one_time() {
    // Kernel receive stamps on (the default), no packet ring: the control case.
    let r = run(false).expect("no capability needed");
    assert_eq!(
        r.tl.stamp_source(),
        StampSource::Kernel,
        "{:?}",
        r.tl.stamps
    );
    let errors = r.errors();
    let worst = errors.iter().map(|e| e.1).max().unwrap();
    let merged =
        r.tl.events
            .windows(2)
            .filter(|w| w[0].tokens > 0 && w[0].t == w[1].t)
            .count();
    eprintln!(
        "socket stamps: {merged} tokens share a stamp with the next; worst error {} us",
        worst / 1000
    );
    assert!(merged >= 3, "the pause should merge tokens into one read");
    // The merged read's first token arrived most of the pause before the read's stamp.
    assert!(
        Duration::from_nanos(worst) > 5 * BOUND,
        "worst error {worst} ns: the merged read should be far off its writes"
    );
}

#[test]
fn packet_stamps_keep_each_tokens_arrival() {
    let Some(r) = run(true) else {
        return;
    };
    assert_eq!(
        r.tl.stamp_source(),
        StampSource::Packet,
        "{:?}",
        r.tl.stamps
    );
    let errors = r.errors();
    let late = r.read_late(5 * BOUND);
    eprintln!(
        "packet stamps: {late} tokens read over 5 ms after they arrived; errors (us): {:?}",
        errors.iter().map(|e| e.1 / 1000).collect::<Vec<_>>()
    );
    // The pause made the client fall behind: tokens read long after they came.
    assert!(late >= 3, "only {late} tokens were read late");
    for (k, (_, err)) in errors.iter().enumerate() {
        assert!(
            Duration::from_nanos(*err) <= BOUND,
            "token {k} stamped {err} ns off its write (bound {BOUND:?})"
        );
    }
    // Stamps follow the writes: never backwards, and tokens of different writes (spans that
    // do not overlap: different segments) never share one, though many came in one read.
    for (k, w) in errors.windows(2).enumerate() {
        assert!(w[0].0 <= w[1].0, "token {} stamped before token {k}", k + 1);
        let (a, b) = (&r.trace[k], &r.trace[k + 1]);
        if a.t_raw < b.t_before_raw {
            assert!(
                w[0].0 < w[1].0,
                "tokens {k} and {} were written apart",
                k + 1
            );
        }
    }
}

/// `llmspeed stream` against the simulated server, under `wrap` (a command that runs the rest:
/// `setpriv ...`), with `extra` flags: its stderr, after a successful run.
fn stream_stderr(url: &str, wrap: &[&str], extra: &[&str]) -> String {
    let bin = env!("CARGO_BIN_EXE_llmspeed");
    let (program, before) = match wrap.split_first() {
        Some((p, rest)) => (*p, [rest, &[bin]].concat()),
        None => (bin, Vec::new()),
    };
    let out = std::process::Command::new(program)
        .args(before)
        .args([
            "stream",
            "--base-url",
            url,
            "--model",
            "mock-model",
            "--prompt",
            "x",
        ])
        .args(["--max-tokens", "4"])
        .args(extra)
        .env_remove("OPENAI_API_KEY")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "{stderr}");
    stderr
}

#[test]
fn the_commands_take_packet_stamps_by_default_and_say_which_stamps() {
    let server = mock_server::MockThread::start(llmspeed::mock::MockConfig::profile(
        llmspeed::mock::Profile::Fast,
    ));
    let url = server.url();
    // By default: packet stamps where a packet socket opens, one line saying so.
    let stderr = stream_stderr(&url, &[], &[]);
    let stamps: Vec<&str> = stderr
        .lines()
        .filter(|l| l.starts_with("llmspeed: stamps: "))
        .collect();
    assert_eq!(stamps.len(), 1, "one line: {stderr}");
    if mock_server::default_stamp_source() == "packet" {
        assert!(
            stamps[0].starts_with("llmspeed: stamps: packet ("),
            "{stderr}"
        );
        // Without CAP_NET_RAW (root with it taken out of the bounding set): socket stamps,
        // why, and how to have packet stamps.
        let dropped = ["setpriv", "--bounding-set", "-net_raw"];
        if std::process::Command::new("setpriv")
            .arg("--version")
            .output()
            .is_ok()
        {
            let stderr = stream_stderr(&url, &dropped, &[]);
            assert!(
                stderr.contains("llmspeed: stamps: socket receive stamps, not packet stamps: a packet socket would not open"),
                "{stderr}"
            );
            assert!(stderr.contains("setcap cap_net_raw+ep"), "{stderr}");
        } else {
            assert!(
                std::env::var("CI").as_deref() != Ok("true"),
                "CI=true: setpriv missing"
            );
            eprintln!("NOT RUN: setpriv missing, the refused packet socket is not tried");
        }
    } else {
        assert!(stamps[0].contains("setcap cap_net_raw+ep"), "{stderr}");
    }
    // --no-packet-stamps, and --no-kernel-stamps (the client's own clock asked for): no ring,
    // nothing to say.
    for flag in ["--no-packet-stamps", "--no-kernel-stamps"] {
        let stderr = stream_stderr(&url, &[], &[flag]);
        assert!(!stderr.contains("llmspeed: stamps: "), "{flag}: {stderr}");
    }
    server.stop();
}
