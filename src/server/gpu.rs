//! GPUs of the machine llmspeed runs on, from `nvidia-smi`: listed once per run, and sampled
//! (utilisation, memory used, power, SM clock) on its own task during each matrix cell.
//!
//! Owns the query and the parsing of its CSV (pure, tested on recorded text). A missing tool,
//! or one that fails, is said to be absent with the reason; nothing is ever guessed. Never on
//! the per-token path: each reading is a child process run on a blocking thread.
//! `rocm-smi` is recognised but not read (its output varies by version); the report says so.

use crate::report::{GpuInfo, GpuSample};
use std::io::Read;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};
use tokio::sync::oneshot;

/// The fields asked of nvidia-smi, in this order (`--format=csv,noheader,nounits`).
pub const NVIDIA_QUERY: &str = "name,memory.total,utilization.gpu,memory.used,power.draw,clocks.sm";

/// A reading slower than this is abandoned (a hung driver must not hang the run).
const READ_TIMEOUT: Duration = Duration::from_secs(5);

/// One row of the query.
#[derive(Clone, Debug, PartialEq)]
pub struct Reading {
    pub index: u32,
    pub name: String,
    pub memory_total_mib: Option<f64>,
    pub utilization_pct: Option<f64>,
    pub memory_used_mib: Option<f64>,
    pub power_w: Option<f64>,
    pub sm_clock_mhz: Option<f64>,
}

/// A number, or `None` for nvidia-smi's "[N/A]", "[Not Supported]", "N/A" and the like.
fn value(field: &str) -> Option<f64> {
    field.trim().parse::<f64>().ok().filter(|v| v.is_finite())
}

/// Parse `nvidia-smi --query-gpu=NVIDIA_QUERY --format=csv,noheader,nounits`: one line per GPU,
/// in index order. A line without six fields is an error (another tool, or another query).
pub fn parse_nvidia_csv(text: &str) -> Result<Vec<Reading>, String> {
    let mut out = Vec::new();
    for line in text.lines().filter(|l| !l.trim().is_empty()) {
        // GPU names have no commas; the name is the first field whatever it holds.
        let f: Vec<&str> = line.split(',').collect();
        if f.len() != 6 {
            return Err(format!(
                "nvidia-smi printed {:?}, not the 6 fields asked for",
                line.chars().take(120).collect::<String>()
            ));
        }
        out.push(Reading {
            index: out.len() as u32,
            name: f[0].trim().to_string(),
            memory_total_mib: value(f[1]),
            utilization_pct: value(f[2]),
            memory_used_mib: value(f[3]),
            power_w: value(f[4]),
            sm_clock_mhz: value(f[5]),
        });
    }
    Ok(out)
}

/// Run `program args` with a deadline; its stdout, or why not. `Err(None)` when the program
/// does not exist.
fn run(program: &str, args: &[&str]) -> Result<String, Option<String>> {
    let mut child = match Command::new(program)
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
    {
        Ok(c) => c,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Err(None),
        Err(e) => return Err(Some(format!("{program} could not be started: {e}"))),
    };
    let start = Instant::now();
    let status = loop {
        match child.try_wait() {
            Ok(Some(s)) => break s,
            Ok(None) if start.elapsed() > READ_TIMEOUT => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(Some(format!(
                    "{program} gave no answer within {} s",
                    READ_TIMEOUT.as_secs()
                )));
            }
            Ok(None) => std::thread::sleep(Duration::from_millis(10)),
            Err(e) => return Err(Some(format!("{program}: {e}"))),
        }
    };
    let mut out = String::new();
    let mut err = String::new();
    if let Some(mut o) = child.stdout.take() {
        let _ = o.read_to_string(&mut out);
    }
    if let Some(mut e) = child.stderr.take() {
        let _ = e.read_to_string(&mut err);
    }
    if !status.success() {
        let why = err
            .lines()
            .chain(out.lines())
            .find(|l| !l.trim().is_empty())
            .unwrap_or("no message");
        return Err(Some(format!("{program} failed ({status}): {}", why.trim())));
    }
    Ok(out)
}

/// One reading of every GPU.
pub fn read_nvidia() -> Result<Vec<Reading>, String> {
    let query = format!("--query-gpu={NVIDIA_QUERY}");
    match run("nvidia-smi", &[&query, "--format=csv,noheader,nounits"]) {
        Ok(text) => parse_nvidia_csv(&text),
        Err(None) => Err("nvidia-smi is not on PATH".into()),
        Err(Some(e)) => Err(e),
    }
}

/// What the run knows about GPUs at its start.
#[derive(Clone, Debug, PartialEq)]
pub struct Listing {
    pub gpus: Vec<GpuInfo>,
    /// "nvidia-smi", or "absent: why".
    pub source: String,
    /// Whether cells should sample (nvidia-smi answered with at least one GPU).
    pub sample: bool,
}

/// List the GPUs once (blocking: call it off the runtime's hot threads, once per run).
pub fn list() -> Listing {
    let absent = |why: String| Listing {
        gpus: Vec::new(),
        source: format!("absent: {why}"),
        sample: false,
    };
    match read_nvidia() {
        Ok(r) if !r.is_empty() => Listing {
            gpus: r
                .into_iter()
                .map(|g| GpuInfo {
                    index: g.index,
                    name: g.name,
                    memory_total_mib: g.memory_total_mib,
                })
                .collect(),
            source: "nvidia-smi".into(),
            sample: true,
        },
        Ok(_) => absent("nvidia-smi listed no GPU".into()),
        Err(e) if e.ends_with("not on PATH") => match run("rocm-smi", &["--version"]) {
            Err(None) => absent("neither nvidia-smi nor rocm-smi is on PATH".into()),
            _ => absent("rocm-smi is on PATH but llmspeed does not read it yet".into()),
        },
        Err(e) => absent(e),
    }
}

/// Samples every GPU on its own task until stopped; readings that fail leave a gap.
pub struct GpuSampler {
    stop: oneshot::Sender<()>,
    task: tokio::task::JoinHandle<Vec<GpuSample>>,
}

impl GpuSampler {
    pub fn start(period: Duration) -> Self {
        let (stop, mut rx) = oneshot::channel::<()>();
        let task = tokio::spawn(async move {
            let t0 = Instant::now();
            let mut out = Vec::new();
            loop {
                let t_s = t0.elapsed().as_secs_f64();
                if let Ok(Ok(rows)) = tokio::task::spawn_blocking(read_nvidia).await {
                    out.extend(rows.into_iter().map(|r| GpuSample {
                        t_s,
                        index: r.index,
                        utilization_pct: r.utilization_pct,
                        memory_used_mib: r.memory_used_mib,
                        power_w: r.power_w,
                        sm_clock_mhz: r.sm_clock_mhz,
                    }));
                }
                tokio::select! {
                    _ = &mut rx => break,
                    _ = tokio::time::sleep(period) => {}
                }
            }
            out
        });
        Self { stop, task }
    }

    /// Stop and return the samples (empty if the task failed).
    pub async fn stop(self) -> Vec<GpuSample> {
        let _ = self.stop.send(());
        self.task.await.unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// nvidia-smi's `csv,noheader,nounits` shape for this query on a two-GPU machine: ", "
    /// between fields, "[N/A]" where a board does not report a value (power on some consumer
    /// boards, clocks on some virtual GPUs).
    const TWO_GPUS: &str = "NVIDIA H200, 143771, 97, 130012, 612.50, 1980\nNVIDIA GeForce RTX 3090, 24576, 3, 1234, [N/A], [Not Supported]\n";

    #[test]
    fn parses_every_field_and_says_none_for_na() {
        let r = parse_nvidia_csv(TWO_GPUS).unwrap();
        assert_eq!(r.len(), 2);
        assert_eq!(
            r[0],
            Reading {
                index: 0,
                name: "NVIDIA H200".into(),
                memory_total_mib: Some(143_771.0),
                utilization_pct: Some(97.0),
                memory_used_mib: Some(130_012.0),
                power_w: Some(612.5),
                sm_clock_mhz: Some(1980.0),
            }
        );
        assert_eq!(r[1].index, 1);
        assert_eq!(r[1].name, "NVIDIA GeForce RTX 3090");
        assert_eq!((r[1].power_w, r[1].sm_clock_mhz), (None, None));
        assert_eq!(r[1].utilization_pct, Some(3.0));
    }

    #[test]
    fn other_output_is_an_error_not_a_guess() {
        assert!(parse_nvidia_csv(
            "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver."
        )
        .is_err());
        assert!(parse_nvidia_csv("NVIDIA H200, 143771, 97\n").is_err());
        assert_eq!(parse_nvidia_csv("\n").unwrap(), Vec::new());
    }
}
