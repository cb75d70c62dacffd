//! `selftest --external 'CMD …'`: any vLLM-compatible benchmark client, scored against the
//! fixed-gap server's trace exactly as llmspeed's own client is.
//!
//! Owns: the work folder (the `custom` dataset the command reads, its result folder, its
//! captured output), the command's placeholders, starting the command with `sh -c` (pinned
//! when asked, in a process group of its own, whose leader kills the group once the self-test
//! ends, however it ends) and reading its CPU time and peak memory from the kernel when it is
//! reaped, stopping it when the self-test is stopped, and reading vLLM's `--save-detailed`
//! result back. The scoring is [`super::score`]'s.
//!
//! A stop (Ctrl-C, SIGTERM: `stop` cancelled with the signal's name) is passed on to the
//! command's process group as the same signal, once (its own group, so a terminal's Ctrl-C
//! does not reach it twice); a command still running [`GRACE`] later is killed. What its
//! result file then holds is scored: a stopped client keeps only the requests that ended, and
//! a vLLM result names them by position only, so they are placed on the streams the server
//! finished (see `score_stopped`); every other stream counts as cut.
//!
//! The contract with the command, which vLLM's `bench serve`, vllm-bench and `llmspeed bench
//! serve` all keep: request `i` of the dataset carries `x-request-id: {prefix}{i}` (the mock
//! keys its trace by that header), and entry `i` of the result's `ttfts`/`itls`/`output_lens`/
//! `errors` arrays (and `latencies`, when it holds them) is request `i`. A client that sends
//! no such ids (SGLang's `bench_serving` and `llmspeed bench sglang`, run with
//! `--max-concurrency 1 --warmup-requests 0`) is matched by arrival order instead
//! ([`super::score::key_by_arrival`], which checks that it sent one request at a time). Its
//! result may be SGLang's `--output-file` (`*.jsonl`, one JSON object per line, the last one
//! read; saved with `--output-details`).

use super::cpu_window;
use super::pin::{CpuList, Mask, Pin};
use super::score::ClientRecord;
use super::CpuScope;
use super::{Report, SelftestError, ServerThread, Shape};
use crate::clock::Clock;
use crate::mock::trace::{TraceRec, TraceSink};
use crate::net::Cancel;
use crate::sys::CpuTime;
use serde_json::Value;
use std::io;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicI32, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

/// How long a stopped command may take to write its result and end before it is killed.
pub const GRACE: Duration = Duration::from_secs(10);

/// The running command's process group (0: none), for [`kill_client`].
static CLIENT_GROUP: AtomicI32 = AtomicI32::new(0);

/// Kills the running command's whole process group at once (none running: nothing). For a
/// process about to end at once (a second signal), whose command would outlive it otherwise.
pub fn kill_client() {
    let group = CLIENT_GROUP.load(Ordering::Acquire);
    if group > 0 {
        // SAFETY: kill(2) on a process group this process started; no memory is involved.
        unsafe {
            libc::kill(-group, libc::SIGKILL);
        }
    }
}

/// The placeholders `--external` knows, in the order the help lists them.
pub const PLACEHOLDERS: [&str; 7] = [
    "url",
    "model",
    "dataset",
    "result_dir",
    "prefix",
    "streams",
    "tokens",
];

/// The request-id prefix the command must use.
pub const PREFIX: &str = "selftest-ext-";

/// How to run an external client.
#[derive(Clone, Debug)]
pub struct External {
    /// The command line with placeholders, run with `sh -c`.
    pub command: String,
    /// Keep the work folder after a successful run (it is always kept after a failure).
    pub keep: bool,
}

/// Replace every `{name}` whose name is a known placeholder; an unknown `{name}` (letters,
/// digits and `_`) is an error naming it. Anything else in braces — `${VAR}`, JSON such as
/// `{"temperature": 0}` — is left for the shell. Values are shell-quoted when they need it.
pub fn substitute(template: &str, vars: &[(&str, String)]) -> Result<String, String> {
    let mut out = String::with_capacity(template.len() + 64);
    let mut rest = template;
    while let Some(open) = rest.find('{') {
        let (before, from) = rest.split_at(open);
        out.push_str(before);
        let name = from[1..].find('}').map(|close| &from[1..1 + close]);
        let is_name = |n: &str| {
            n.starts_with(|c: char| c.is_ascii_alphabetic())
                && n.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
        };
        match name {
            Some(n) if is_name(n) && !before.ends_with('$') => {
                let value = vars
                    .iter()
                    .find(|(k, _)| *k == n)
                    .map(|(_, v)| v)
                    .ok_or_else(|| {
                        let known: Vec<String> =
                            PLACEHOLDERS.iter().map(|p| format!("{{{p}}}")).collect();
                        format!(
                            "--external: unknown placeholder {{{n}}} (known: {})",
                            known.join(", ")
                        )
                    })?;
                out.push_str(&shell_quote(value));
                rest = &from[n.len() + 2..];
            }
            _ => {
                out.push('{');
                rest = &from[1..];
            }
        }
    }
    out.push_str(rest);
    Ok(out)
}

/// Check a command's placeholders before anything starts (a usage error, not a failed run).
pub fn check_placeholders(template: &str) -> Result<(), String> {
    let vars: Vec<(&str, String)> = PLACEHOLDERS.iter().map(|p| (*p, String::new())).collect();
    substitute(template, &vars).map(drop)
}

fn shell_quote(v: &str) -> String {
    let plain = |c: char| c.is_ascii_alphanumeric() || "_./:=,+@%-".contains(c);
    if !v.is_empty() && v.chars().all(plain) {
        return v.to_string();
    }
    format!("'{}'", v.replace('\'', r"'\''"))
}

/// vLLM's `custom` dataset: one JSON object per line with `prompt` and `output_tokens`. One
/// short distinct prompt per stream (prefill is free on the fixed-gap server; distinct so no
/// client deduplicates them). Both vLLM-style readers shuffle the lines, which is harmless:
/// requests are identified by position, not by prompt.
pub fn dataset_jsonl(streams: usize, tokens: u32) -> String {
    let mut s = String::with_capacity(streams * 64);
    for i in 0..streams {
        let line = serde_json::json!({
            "prompt": format!("Selftest prompt {i}: the"),
            "output_tokens": tokens,
        });
        s.push_str(&line.to_string());
        s.push('\n');
    }
    s
}

/// Python's `json.dumps` writes a float that is not finite as a bare `NaN`, `Infinity` or
/// `-Infinity`, which is not JSON: each such word outside a string becomes `null`.
fn python_floats_as_null(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let (mut in_string, mut escaped) = (false, false);
    let mut rest = text;
    while let Some(c) = rest.chars().next() {
        if !in_string {
            if let Some(word) = ["-Infinity", "Infinity", "NaN"]
                .into_iter()
                .find(|w| rest.starts_with(w))
            {
                out.push_str("null");
                rest = &rest[word.len()..];
                continue;
            }
        }
        match c {
            _ if escaped => escaped = false,
            '\\' if in_string => escaped = true,
            '"' => in_string = !in_string,
            _ => {}
        }
        out.push(c);
        rest = &rest[c.len_utf8()..];
    }
    out
}

/// The per-request arrays of a result saved with vLLM's `--save-detailed` or SGLang's
/// `--output-details`: one JSON object, or SGLang's JSON lines (the last line is this run's).
pub fn parse_detailed(text: &str) -> Result<Vec<ClientRecord>, String> {
    let text = text.trim();
    let last = text.lines().rfind(|l| !l.trim().is_empty()).unwrap_or("");
    let v: Value = serde_json::from_str(text)
        .or_else(|_| serde_json::from_str(last))
        .or_else(|_| serde_json::from_str(&python_floats_as_null(last)))
        .map_err(|e| format!("the result is not valid JSON: {e}"))?;
    let array = |k: &str| -> Result<&Vec<Value>, String> {
        v.get(k).and_then(Value::as_array).ok_or_else(|| {
            format!(
                "the result has no {k:?} array: was the client run with --save-detailed \
                 (SGLang: --output-details)?"
            )
        })
    };
    let (ttfts, itls, lens, errors) = (
        array("ttfts")?,
        array("itls")?,
        array("output_lens")?,
        array("errors")?,
    );
    // vLLM's per-request latencies, used only when there is one per request (a list of the
    // successful requests' alone cannot be placed).
    let latencies = v
        .get("latencies")
        .and_then(Value::as_array)
        .filter(|l| l.len() == ttfts.len());
    let n = ttfts.len();
    if itls.len() != n || lens.len() != n || errors.len() != n {
        return Err(format!(
            "the result's arrays differ in length: ttfts {n}, itls {}, output_lens {}, errors {}",
            itls.len(),
            lens.len(),
            errors.len()
        ));
    }
    let secs = |x: &Value, what: &str, i: usize| -> Result<f64, String> {
        // A failed request may carry null where a time would be.
        match x {
            Value::Null => Ok(0.0),
            _ => x
                .as_f64()
                .filter(|s| s.is_finite())
                .ok_or_else(|| format!("{what} of request {i} is not a number: {x}")),
        }
    };
    let mut out = Vec::with_capacity(n);
    for i in 0..n {
        let list = match &itls[i] {
            Value::Null => Vec::new(),
            l => l
                .as_array()
                .ok_or_else(|| format!("itls of request {i} is not a list: {l}"))?
                .iter()
                .map(|x| secs(x, "an itl", i))
                .collect::<Result<_, _>>()?,
        };
        let latency_s = match latencies.map(|l| &l[i]) {
            None | Some(Value::Null) => None,
            Some(l) => Some(secs(l, "the latency", i)?),
        };
        out.push(ClientRecord {
            latency_s,
            ttft_s: secs(&ttfts[i], "the ttft", i)?,
            itls_s: list,
            output_len: match &lens[i] {
                Value::Null => 0,
                l => l
                    .as_u64()
                    .ok_or_else(|| format!("output_lens of request {i} is not a count: {l}"))?,
            },
            error: match &errors[i] {
                Value::Null => String::new(),
                Value::String(s) => s.clone(),
                e => e.to_string(),
            },
        });
    }
    Ok(out)
}

/// The one `*.json` (or SGLang's `*.jsonl`) the client wrote into its result folder.
pub fn find_result(dir: &Path) -> Result<PathBuf, String> {
    let entries =
        std::fs::read_dir(dir).map_err(|e| format!("cannot list {}: {e}", dir.display()))?;
    let mut found: Vec<PathBuf> = entries
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "json" || x == "jsonl"))
        .collect();
    match found.len() {
        1 => Ok(found.remove(0)),
        0 => Err(format!(
            "the client wrote no *.json into {} (pass --save-result --save-detailed and {{result_dir}} as its result folder)",
            dir.display()
        )),
        n => {
            found.sort();
            let names: Vec<String> = found.iter().map(|p| p.display().to_string()).collect();
            Err(format!(
                "the client wrote {n} *.json files, expected exactly one: {}",
                names.join(", ")
            ))
        }
    }
}

/// Start `sh -c command` with the given output files, stdin closed, in a process group of its
/// own (whose id is the child's pid), restricted to `client_cpus` when given (set in the child
/// between fork and exec, so `sh` and everything it starts inherit the mask).
pub fn spawn(
    command: &str,
    client_cpus: Option<&CpuList>,
    stdout: Stdio,
    stderr: Stdio,
) -> io::Result<Child> {
    spawn_in(command, 0, client_cpus, stdout, stderr)
}

/// [`spawn`] in the process group `group` (0: a group of its own).
fn spawn_in(
    command: &str,
    group: i32,
    client_cpus: Option<&CpuList>,
    stdout: Stdio,
    stderr: Stdio,
) -> io::Result<Child> {
    let mut cmd = Command::new("sh");
    cmd.arg("-c")
        .arg(command)
        .stdin(Stdio::null())
        .stdout(stdout)
        .stderr(stderr);
    std::os::unix::process::CommandExt::process_group(&mut cmd, group);
    if let Some(cpus) = client_cpus {
        let mask = Mask::of(cpus);
        use std::os::unix::process::CommandExt;
        // SAFETY: the closure only makes one system call on a mask built before the fork (no
        // allocation, no lock), which is what `pre_exec` requires.
        unsafe {
            cmd.pre_exec(move || mask.apply());
        }
    }
    cmd.spawn()
}

/// The leader of the command's process group: a `sh` that kills the whole group once this
/// process ends, however it ends (SIGKILL included), so no part of the command outlives the
/// self-test. It reads a pipe only this process writes to (the write end is close-on-exec, so
/// no child keeps it); at its end (this process closed it, or the kernel did as it died) it
/// kills the group, itself last. It is deaf to the stop the group is sent (SIGINT, SIGTERM).
/// `PR_SET_PDEATHSIG` would not do: the death signal reaches the process it is set on only
/// (it is cleared in a forked child, so whatever `sh` starts would live on), and it fires
/// when the thread that started the process ends, not the process.
struct Leader {
    child: Child,
    alive: std::os::fd::OwnedFd,
}

impl Leader {
    /// Starts the leader, in a new group whose id is its pid ([`Leader::group`]).
    fn start() -> io::Result<Leader> {
        let (read, alive) = pipe()?;
        let mut cmd = Command::new("sh");
        cmd.arg("-c")
            .arg("trap '' INT TERM; read -r line; kill -KILL 0")
            .stdin(read)
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        std::os::unix::process::CommandExt::process_group(&mut cmd, 0);
        let child = cmd.spawn()?;
        Ok(Leader { child, alive })
    }

    /// The group's id, for the command to join.
    fn group(&self) -> i32 {
        self.child.id() as i32
    }

    /// The command was reaped: whatever it left running in the group is killed, then the
    /// leader is reaped.
    fn end(mut self) {
        drop(self.alive);
        let _ = self.child.wait();
    }
}

/// A pipe (read end, write end), both close-on-exec.
fn pipe() -> io::Result<(std::os::fd::OwnedFd, std::os::fd::OwnedFd)> {
    use std::os::fd::FromRawFd;
    let mut fds = [0; 2];
    // SAFETY: pipe2(2) writes two descriptors into the array it is given, which this process
    // then owns (each wrapped once).
    unsafe {
        if libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) != 0 {
            return Err(io::Error::last_os_error());
        }
        Ok((
            std::os::fd::OwnedFd::from_raw_fd(fds[0]),
            std::os::fd::OwnedFd::from_raw_fd(fds[1]),
        ))
    }
}

/// How a child ended and what it used.
#[derive(Clone, Copy, Debug)]
pub struct ChildRun {
    pub status: ExitStatus,
    /// CPU time of the child and every descendant it waited for (`sh` and the client).
    pub cpu: CpuTime,
    /// The largest resident set among them.
    pub peak_rss_bytes: u64,
}

/// Wait for the child and read its resource usage as the kernel hands it over at reaping
/// (`wait4`): exactly this child's, unlike a before/after of `RUSAGE_CHILDREN`, which would
/// also count any other child this process reaps meanwhile (tests run in parallel).
pub fn wait(child: Child) -> io::Result<ChildRun> {
    let (status, cpu, peak_rss_bytes) = crate::sys::wait_child(child.id())?;
    use std::os::unix::process::ExitStatusExt;
    Ok(ChildRun {
        status: ExitStatus::from_raw(status),
        cpu,
        peak_rss_bytes,
    })
}

/// The last `max` bytes of a file, as text (for error messages).
fn tail(path: &Path, max: usize) -> String {
    let bytes = std::fs::read(path).unwrap_or_default();
    let start = bytes.len().saturating_sub(max);
    String::from_utf8_lossy(&bytes[start..]).trim().to_string()
}

/// The work folder: the dataset, the result folder, and the command's output.
struct Work {
    dir: PathBuf,
}

impl Work {
    fn create() -> io::Result<Work> {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or(0);
        let dir =
            std::env::temp_dir().join(format!("llmspeed-selftest-{}-{nanos}", std::process::id()));
        std::fs::create_dir(&dir)?;
        std::fs::create_dir(dir.join("result"))?;
        Ok(Work { dir })
    }
    fn dataset(&self) -> PathBuf {
        self.dir.join("dataset.jsonl")
    }
    fn result_dir(&self) -> PathBuf {
        self.dir.join("result")
    }
    fn stdout(&self) -> PathBuf {
        self.dir.join("stdout.txt")
    }
    fn stderr(&self) -> PathBuf {
        self.dir.join("stderr.txt")
    }
}

/// Run the fixed-gap server, the external command against it, and score the command's result.
/// On failure the work folder is kept and the error names it.
pub fn run(shape: &Shape, ext: &External, pin: Option<&Pin>) -> Result<Report, SelftestError> {
    run_stoppable(shape, ext, pin, &Cancel::new())
}

/// [`run`] that `stop` ends early: the command is stopped (see the module docs), what it wrote
/// is scored, and the report says why it stopped (`Report::interrupted`, the stop's reason).
pub fn run_stoppable(
    shape: &Shape,
    ext: &External,
    pin: Option<&Pin>,
    stop: &Cancel,
) -> Result<Report, SelftestError> {
    shape.validate().map_err(SelftestError::Shape)?;
    check_placeholders(&ext.command).map_err(SelftestError::Shape)?;
    // The server's end of each stream; the command's ends are in its own process.
    super::fds::ensure(shape.streams, 1, "the server's end").map_err(SelftestError::Limit)?;
    let work = Work::create()
        .map_err(|e| SelftestError::External(format!("cannot create the work folder: {e}")))?;
    match run_in(shape, ext, pin, &work, stop) {
        Ok(mut report) => {
            if ext.keep {
                report.work_dir = Some(work.dir.display().to_string());
            } else {
                let _ = std::fs::remove_dir_all(&work.dir);
            }
            Ok(report)
        }
        Err(e) => Err(SelftestError::External(format!(
            "{e}; the work folder is kept: {}",
            work.dir.display()
        ))),
    }
}

fn run_in(
    shape: &Shape,
    ext: &External,
    pin: Option<&Pin>,
    work: &Work,
    stop: &Cancel,
) -> Result<Report, String> {
    let wall = Instant::now();
    std::fs::write(work.dataset(), dataset_jsonl(shape.streams, shape.tokens))
        .map_err(|e| format!("cannot write the dataset: {e}"))?;
    let (sink, trace_rx) = TraceSink::memory();
    let config = super::mock_config(shape, sink);
    let model = config.model.clone();
    let server =
        ServerThread::start(config, pin.map(|p| Mask::of(&p.server))).map_err(|e| e.to_string())?;
    let vars = [
        ("url", format!("http://{}", server.addr)),
        ("model", model),
        ("dataset", work.dataset().display().to_string()),
        ("result_dir", work.result_dir().display().to_string()),
        ("prefix", PREFIX.to_string()),
        ("streams", shape.streams.to_string()),
        ("tokens", shape.tokens.to_string()),
    ];
    let child = substitute(&ext.command, &vars).and_then(|cmd| run_child(&cmd, pin, work, stop));
    // Stop the server whatever happened to the child, so its thread never outlives us.
    let stopped = server.stop();
    let child = child?;
    stopped.map_err(|e| e.to_string())?;
    let signal = stop
        .is_cancelled()
        .then(|| stop.reason().unwrap_or("SIGINT"));
    if signal.is_none() && !child.run.status.success() {
        return Err(format!(
            "the external command failed ({}); the end of its stderr:\n{}",
            child.run.status,
            tail(&work.stderr(), 2000)
        ));
    }
    // The server has returned: every sink clone is gone and the trace is complete.
    let trace: Vec<TraceRec> = trace_rx.try_iter().collect();
    let mut report = match signal {
        None => {
            let path = find_result(&work.result_dir())?;
            let text = std::fs::read_to_string(&path)
                .map_err(|e| format!("cannot read {}: {e}", path.display()))?;
            super::score_result(shape, &trace, &text, PREFIX)
                .map_err(|e| format!("{}: {e}", path.display()))?
        }
        Some(sig) => score_stopped(shape, &trace, &work.result_dir(), sig),
    };
    let per_token = |ns: f64| super::per_token(ns, report.tokens);
    report.client = ext.command.clone();
    let whole = child.run.cpu;
    report.client_cpu_whole_run_ns_per_token = per_token(whole.total_ns() as f64);
    // The streaming: from the first request's arrival to the last token's write.
    let start = trace.iter().map(|r| r.arrival_raw).min();
    let end = trace.iter().map(|r| r.t_raw).max();
    let spent = start
        .zip(end)
        .and_then(|(a, b)| cpu_window::window(&child.samples, a, b));
    match spent {
        Some(w) => {
            let share = w
                .user_share
                .unwrap_or_else(|| whole.user_ns as f64 / whole.total_ns().max(1) as f64);
            let ns = w.cpu_ns as f64;
            report.client_cpu_scope = CpuScope::StreamingWindow;
            report.client_cpu_ms = ns / 1e6;
            report.client_cpu_ns_per_token = per_token(ns);
            report.client_cpu_user_ns_per_token = per_token(ns * share);
            report.client_cpu_sys_ns_per_token = per_token(ns * (1.0 - share));
        }
        None => {
            report.client_cpu_scope = CpuScope::WholeProcess;
            report.client_cpu_ms = whole.total_ns() as f64 / 1e6;
            report.client_cpu_ns_per_token = per_token(whole.total_ns() as f64);
            report.client_cpu_user_ns_per_token = per_token(whole.user_ns as f64);
            report.client_cpu_sys_ns_per_token = per_token(whole.system_ns as f64);
        }
    }
    report.peak_rss_mb = child.run.peak_rss_bytes as f64 / (1024.0 * 1024.0);
    report.server_cpus = pin.map(|p| p.server.cpus().to_vec());
    report.client_cpus = pin.map(|p| p.client.cpus().to_vec());
    report.wall_s = wall.elapsed().as_secs_f64();
    Ok(report)
}

/// The report of a stopped command. A result with every request is scored as usual (the
/// command had finished). A stopped client keeps only the requests that ended, in request
/// order, and a vLLM result names them by position only: they are placed on the streams the
/// server's trace shows finished, when as many finished as the result holds ([`place`]), and
/// scored; every other stream counts as cut by the stop (`errors.cancelled`). When the counts
/// differ nothing is scored and the result's requests count under `errors.unmatched`.
fn score_stopped(shape: &Shape, trace: &[TraceRec], dir: &Path, signal: &'static str) -> Report {
    let written = find_result(dir)
        .ok()
        .and_then(|p| std::fs::read_to_string(p).ok())
        .and_then(|text| parse_detailed(&text).ok())
        .unwrap_or_default();
    // A client without ids: its requests by arrival order when that is sound, else as traced.
    let (matching, keyed) = super::score::key_by_arrival(trace, PREFIX, written.len())
        .unwrap_or((super::score::Matching::RequestId, None));
    let trace = keyed.as_deref().unwrap_or(trace);
    let n = shape.streams;
    let cut = ClientRecord {
        error: format!("cancelled by {signal}"),
        ..ClientRecord::default()
    };
    let placed = place(shape, trace, &written, &cut);
    let none_placed = vec![cut; n];
    let mut report = super::analyse_external(
        shape,
        trace,
        placed.as_deref().unwrap_or(&none_placed),
        PREFIX,
    );
    if written.len() != n {
        let k = written.len().min(n);
        let own_failed = written.iter().filter(|c| !c.error.is_empty()).count();
        report.errors.remove("client_reported");
        report.errors.insert("cancelled", n - k);
        let scored = match placed {
            Some(_) if own_failed > 0 => {
                report.errors.insert("client_reported", own_failed);
                k
            }
            Some(_) => k,
            None if !written.is_empty() => {
                report.errors.insert("unmatched", written.len());
                0
            }
            None => 0,
        };
        report.failed_streams = n - k + own_failed.min(scored);
        report.first_error = Some(format!(
            "stopped by {signal}: the client's result holds {} of {n} requests ({scored} scored)",
            written.len()
        ));
    }
    report.interrupted = Some(signal);
    report.matched_by = matching.as_str();
    report
}

/// A stopped client's `written` requests (those that ended, in request order) on the streams
/// they belong to: the streams whose every token the server wrote, in request order, when there
/// are exactly as many; every other stream is `cut`. `None` when the counts differ (a stream
/// the server finished that the client cut before reading its end, or one that failed).
fn place(
    shape: &Shape,
    trace: &[TraceRec],
    written: &[ClientRecord],
    cut: &ClientRecord,
) -> Option<Vec<ClientRecord>> {
    let n = shape.streams;
    if written.len() == n {
        return Some(written.to_vec());
    }
    let truth = super::score::index_trace(trace);
    let finished: Vec<usize> = (0..n)
        .filter(|i| {
            truth.get(&format!("{PREFIX}{i}")).is_some_and(|r| {
                r.writes_ns.len() == shape.tokens as usize
                    && r.writes_ns.iter().all(Option::is_some)
            })
        })
        .collect();
    if finished.len() != written.len() {
        return None;
    }
    let mut all = vec![cut.clone(); n];
    for (&i, c) in finished.iter().zip(written) {
        all[i] = c.clone();
    }
    Some(all)
}

/// The child's end and its CPU readings over its life (see [`cpu_window`]).
struct Sampled {
    run: ChildRun,
    samples: Vec<cpu_window::Sample>,
}

/// Passes a stop on to the command's process group while it runs.
struct Forward {
    /// Set, under its lock, once the command was reaped: no signal is sent after that.
    reaped: Arc<(Mutex<bool>, Condvar)>,
    thread: std::thread::JoinHandle<()>,
}

impl Forward {
    fn start(group: i32, stop: Cancel) -> io::Result<Forward> {
        let reaped = Arc::new((Mutex::new(false), Condvar::new()));
        let r = reaped.clone();
        let thread = std::thread::Builder::new()
            .name("selftest-stop".into())
            .spawn(move || {
                let (lock, cv) = &*r;
                let mut sent: Option<Instant> = None;
                let mut done = lock.lock().unwrap_or_else(|e| e.into_inner());
                while !*done {
                    let sig = match (stop.is_cancelled(), sent) {
                        (true, None) => Some(match stop.reason() {
                            Some("SIGINT") => libc::SIGINT,
                            _ => libc::SIGTERM,
                        }),
                        (_, Some(t)) if t.elapsed() >= GRACE => Some(libc::SIGKILL),
                        _ => None,
                    };
                    if let Some(sig) = sig {
                        // SAFETY: kill(2) on the group of a child not yet reaped (the lock
                        // is held), so the id is still its; no memory is involved.
                        unsafe {
                            libc::kill(-group, sig);
                        }
                        sent = sent.or(Some(Instant::now()));
                    }
                    done = cv
                        .wait_timeout(done, Duration::from_millis(20))
                        .map(|(g, _)| g)
                        .unwrap_or_else(|e| e.into_inner().0);
                }
            })?;
        Ok(Forward { reaped, thread })
    }

    /// The command was reaped: nothing more is sent to its group.
    fn reaped(self) {
        let (lock, cv) = &*self.reaped;
        *lock.lock().unwrap_or_else(|e| e.into_inner()) = true;
        cv.notify_all();
        let _ = self.thread.join();
    }
}

fn run_child(
    command: &str,
    pin: Option<&Pin>,
    work: &Work,
    stop: &Cancel,
) -> Result<Sampled, String> {
    let file = |p: PathBuf| {
        std::fs::File::create(&p).map_err(|e| format!("cannot create {}: {e}", p.display()))
    };
    let (out, err) = (file(work.stdout())?, file(work.stderr())?);
    let leader =
        Leader::start().map_err(|e| format!("cannot start the command's process group: {e}"))?;
    let group = leader.group();
    let child = match spawn_in(
        command,
        group,
        pin.map(|p| &p.client),
        out.into(),
        err.into(),
    ) {
        Ok(c) => c,
        Err(e) => {
            leader.end();
            return Err(format!("cannot start sh -c {command:?}: {e}"));
        }
    };
    // The sampler runs beside the server, never on the client's CPUs.
    let server_mask = pin.map(|p| Mask::of(&p.server));
    let sampler = cpu_window::Sampler::start(child.id(), Clock::new(), move || {
        if let Some(m) = server_mask {
            let _ = m.apply();
        }
    });
    CLIENT_GROUP.store(group, Ordering::Release);
    let forward = Forward::start(group, stop.clone());
    let run = wait(child).map_err(|e| format!("cannot wait for the external command: {e}"));
    CLIENT_GROUP.store(0, Ordering::Release);
    if let Ok(f) = forward {
        f.reaped();
    }
    leader.end();
    let samples = sampler.map(|s| s.stop()).unwrap_or_default();
    Ok(Sampled { run: run?, samples })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vars() -> Vec<(&'static str, String)> {
        vec![
            ("url", "http://127.0.0.1:9".into()),
            ("result_dir", "/tmp/a b".into()),
            ("streams", "4".into()),
        ]
    }

    #[test]
    fn placeholders_are_substituted_and_quoted() {
        let s = substitute(
            "x --base-url {url} --n {streams} --dir {result_dir} {url}",
            &vars(),
        )
        .unwrap();
        assert_eq!(
            s,
            "x --base-url http://127.0.0.1:9 --n 4 --dir '/tmp/a b' http://127.0.0.1:9"
        );
    }

    #[test]
    fn braces_that_are_not_placeholders_stay() {
        let t = r#"x --extra-body '{"temperature": 0}' ${HOME} {} { url } {url"#;
        assert_eq!(substitute(t, &vars()).unwrap(), t);
    }

    #[test]
    fn an_unknown_placeholder_is_named() {
        let e = substitute("x {model_name}", &vars()).unwrap_err();
        assert!(e.contains("unknown placeholder {model_name}"), "{e}");
        assert!(e.contains("{result_dir}"), "{e}");
        assert!(check_placeholders("x {url} {prefix} {tokens} {dataset} {model}").is_ok());
        assert!(check_placeholders("x {urls}").is_err());
    }

    #[test]
    fn quoting_survives_single_quotes() {
        assert_eq!(shell_quote("it's"), r"'it'\''s'");
        assert_eq!(shell_quote(""), "''");
        assert_eq!(shell_quote("a-b_c.d/e:1"), "a-b_c.d/e:1");
    }

    #[test]
    fn dataset_lines_read_as_vllm_custom() {
        let d = dataset_jsonl(3, 7);
        assert_eq!(d.lines().count(), 3);
        for (i, line) in d.lines().enumerate() {
            let v: Value = serde_json::from_str(line).unwrap();
            assert_eq!(v["prompt"], format!("Selftest prompt {i}: the"));
            assert_eq!(v["output_tokens"], 7);
        }
    }

    #[test]
    fn detailed_results_parse() {
        let r = parse_detailed(
            r#"{"ttfts": [0.5, 0.0], "itls": [[0.1, 0.2], []], "output_lens": [3, 0],
                "errors": ["", "HTTP 500"], "start_times": [0.0, 0.1]}"#,
        )
        .unwrap();
        assert_eq!(r.len(), 2);
        assert_eq!(r[0].itls_s, [0.1, 0.2]);
        assert_eq!(r[0].output_len, 3);
        assert_eq!(r[1].error, "HTTP 500");
    }

    #[test]
    fn latencies_are_read_when_there_is_one_per_request() {
        let r = parse_detailed(
            r#"{"ttfts": [0.5, 0.0], "itls": [[0.1], []], "output_lens": [2, 0],
                "errors": ["", "x"], "latencies": [0.75, 0.0]}"#,
        )
        .unwrap();
        assert_eq!((r[0].latency_s, r[1].latency_s), (Some(0.75), Some(0.0)));
        assert_eq!(r[0].e2el_s(), 0.75);
        // Only the successful requests' latencies: not placed, E2EL is TTFT + ITLs.
        let r = parse_detailed(
            r#"{"ttfts": [0.5, 0.0], "itls": [[0.25], []], "output_lens": [2, 0],
                "errors": ["", "x"], "latencies": [0.75]}"#,
        )
        .unwrap();
        assert_eq!(r[0].latency_s, None);
        assert_eq!(r[0].e2el_s(), 0.75);
    }

    /// SGLang appends one JSON line per run to its `--output-file`, written by Python's
    /// `json.dumps`, which spells a float that is not finite as a bare word.
    #[test]
    fn sglang_json_lines_are_read_from_the_last_line() {
        let text = concat!(
            r#"{"ttfts": [9.0], "itls": [[]], "output_lens": [1], "errors": [""]}"#,
            "\n",
            r#"{"std_ttft_ms": NaN, "x": -Infinity, "y": [Infinity], "note": "NaN stays", "#,
            r#""ttfts": [0.5], "itls": [[0.1, 0.2]], "output_lens": [3], "errors": [""], "#,
            r#""generated_texts": ["a \"NaN\" b"]}"#,
            "\n"
        );
        let r = parse_detailed(text).unwrap();
        assert_eq!(r.len(), 1);
        assert_eq!(r[0].ttft_s, 0.5);
        assert_eq!(r[0].itls_s, [0.1, 0.2]);
        assert_eq!(r[0].latency_s, None);
        assert_eq!(
            python_floats_as_null(r#"{"a": NaN, "b": "NaN \" Infinity", "c": [-Infinity]}"#),
            r#"{"a": null, "b": "NaN \" Infinity", "c": [null]}"#
        );
    }

    #[test]
    fn incomplete_results_are_refused_with_a_reason() {
        let e = parse_detailed(r#"{"ttfts": [0.5]}"#).unwrap_err();
        assert!(
            e.contains("\"itls\"") && e.contains("--save-detailed"),
            "{e}"
        );
        let e = parse_detailed(
            r#"{"ttfts": [0.5, 1], "itls": [[]], "output_lens": [1, 1], "errors": ["", ""]}"#,
        )
        .unwrap_err();
        assert!(e.contains("differ in length"), "{e}");
        let e =
            parse_detailed(r#"{"ttfts": ["x"], "itls": [[]], "output_lens": [1], "errors": [""]}"#)
                .unwrap_err();
        assert!(e.contains("ttft of request 0"), "{e}");
        assert!(parse_detailed("nope").is_err());
    }

    #[test]
    fn exactly_one_result_file() {
        let dir = std::env::temp_dir().join(format!("llmspeed-find-result-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir(&dir).unwrap();
        assert!(find_result(&dir).unwrap_err().contains("no *.json"));
        std::fs::write(dir.join("a.json"), "{}").unwrap();
        std::fs::write(dir.join("a.html"), "").unwrap();
        assert_eq!(find_result(&dir).unwrap(), dir.join("a.json"));
        std::fs::write(dir.join("b.json"), "{}").unwrap();
        assert!(find_result(&dir).unwrap_err().contains("2 *.json"));
        std::fs::remove_file(dir.join("a.json")).unwrap();
        std::fs::remove_file(dir.join("b.json")).unwrap();
        std::fs::write(dir.join("r.jsonl"), "{}").unwrap();
        assert_eq!(find_result(&dir).unwrap(), dir.join("r.jsonl"));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
