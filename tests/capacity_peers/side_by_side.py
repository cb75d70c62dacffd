#!/usr/bin/env python3
"""`llmspeed capacity` beside GuideLLM's goodput profile and AIPerf's max-concurrency-under-sla
recipe, on the simulated server with a known answer (docs/capacity.md, "Beside GuideLLM and
AIPerf").

A MEASUREMENT FOR THE DOCS, NOT A CI TEST: nothing here asserts; it prints a table. Cost on the
busy 2-core machine it was written on: llmspeed well under a minute, GuideLLM a few minutes,
AIPerf about a minute a probe (each probe starts its multi-process system afresh), so one round
of the three is some 10-15 minutes; the peers' install (tests/capacity_peers/install.sh) another
16 minutes the first time.

The server: `llmspeed mock` with tests/capacity_mock.rs's ITL case (demo profile, decode step
10 ms + 10 ms per running sequence, context terms 0, prefill nearly free, max_num_seqs 64;
32-token prompts, 16-token outputs). With C streams every gap is at most step(C) = 10 + 10 C ms:
50 ms at 4, and at 5 nearly every step runs all 5 (60 ms). So under a 55 ms objective on the
95th percentile the truth is 4 streams, whichever gap statistic is used: llmspeed's `itl_p95`
pools every gap; AIPerf's `--itl-sla-ms` is p95 (strictly under) of each request's mean gap
(E2E - TTFT) / (tokens - 1); GuideLLM's `tpot_ms` objective counts a request as conforming
when its mean gap (last - first token) / (tokens - 1) is at most the threshold and the probe
passes when at least 95% conform (its default target attainment) - the same p95 of the same
per-request figure. At 4 every per-request mean is at most 50 ms; at 5 it is about 59 ms.

Every tool gets the same range (1 to 64 streams), workload and server, one after another on a
fresh mock (each on a free port of 127.0.0.1), and the order alternates between rounds. The
requests sent are counted by the mock's own request log; the wall time is the tool's process,
start to exit.

usage: side_by_side.py [--rounds 2] [--out DIR] [--llmspeed PATH] [--tools llmspeed,guidellm,aiperf]
       [--aiperf-timeout 600] [--guidellm-timeout 600]
The peers come from tests/capacity_peers/install.sh; the tokenizer AIPerf needs from
$LLMSPEED_VLLM_MODEL (the suite's tiny model folder, written by scripts/vllm-server.sh).
"""

import argparse
import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent

TRUTH = 4
SLO_MS = 55.0
INPUT_LEN, OUTPUT_LEN = 32, 16
MAX_STREAMS = 64
# AIPerf's smooth-isotonic planner warms every new load for 60 s (15 s for a repeat) before its
# measured phase, and measures 1,000 requests a probe by default ("normal" precision): on this
# machine that is 2-5 minutes a probe. Both are cut (environment variables it documents, and
# --request-count) so that a search fits in minutes; the table says so.
AIPERF_ENV = {
    "AIPERF_SEARCH_PLANNER_FIRST_PROBE_WARMUP_FLOOR": "2",
    "AIPERF_SEARCH_PLANNER_DEFAULT_WARMUP_SECONDS": "2",
    "AIPERF_SEARCH_PLANNER_REPLICATE_WARMUP_FLOOR": "2",
}
PEER_REQUESTS = 100  # per probe, both peers (GuideLLM needs a per-probe limit: it has none)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def load():
    return open("/proc/loadavg").read().split()[0]


class Mock:
    def __init__(self, llmspeed, log_dir):
        self.port = free_port()
        self.request_log = log_dir / f"requests-{self.port}.log"
        self.proc = subprocess.Popen(
            [llmspeed, "mock", "--profile", "demo", "--port", str(self.port),
             "--max-num-seqs", "64", "--decode-base-us", "10000", "--decode-per-seq-us", "10000",
             "--decode-per-ktok-us", "0", "--decode-per-ktok-max-us", "0",
             "--prefill-rate", "1e9", "--request-log", str(self.request_log)],
            stdout=subprocess.DEVNULL, stderr=open(log_dir / f"mock-{self.port}.err", "w"))
        deadline = time.time() + 30
        while time.time() < deadline:
            try:
                socket.create_connection(("127.0.0.1", self.port), 0.5).close()
                return
            except OSError:
                time.sleep(0.1)
        raise SystemExit(f"llmspeed mock did not listen on {self.port}")

    @property
    def url(self):
        return f"http://127.0.0.1:{self.port}"

    def requests(self):
        try:
            return sum(1 for line in open(self.request_log) if '"method":"POST"' in line)
        except FileNotFoundError:
            return 0

    def stop(self):
        self.proc.terminate()
        self.proc.wait(10)


def run_timed(cmd, log, timeout, env=None):
    t0 = time.monotonic()
    with open(log, "w") as f:
        try:
            rc = subprocess.run(cmd, stdout=f, stderr=subprocess.STDOUT, timeout=timeout,
                                env={**os.environ, **(env or {})}).returncode
        except subprocess.TimeoutExpired:
            rc = "timeout"
    return rc, time.monotonic() - t0


def run_llmspeed(a, mock, d):
    out = d / "llmspeed"
    cmd = [a.llmspeed, "capacity", "--base-url", mock.url, "--slo", f"itl_p95={SLO_MS:g}ms",
           "--input-len", str(INPUT_LEN), "--output-len", str(OUTPUT_LEN), "--seed", "1",
           "--max-concurrency", str(MAX_STREAMS), "--round", "12", "--max-rounds", "6",
           "--settle", "100ms", "--out", str(out)]
    rc, wall = run_timed(cmd, d / "llmspeed.log", 600)
    r = json.load(open(out / "results.json"))
    ans = r["answer"]
    return {
        "answer": ans["concurrency"],
        "failing": ans["smallest_failing_concurrency"],
        "probes": [p["concurrency"] for p in r["probes"]],
        "objective": "itl_p95 <= 55 ms (every gap pooled), 95% intervals",
        "note": f"ending {ans['ending']}",
        "rc": rc, "wall_s": wall,
    }


def run_guidellm(a, mock, d):
    scenario = {
        "backend": {"kind": "openai_http", "target": mock.url, "model": "mock-model"},
        "profile": {"kind": "goodput", "initial_streams": 1, "max_streams": MAX_STREAMS},
        "constraints": [{"kind": "max_requests", "count": PEER_REQUESTS}],
        "data": [{"kind": "synthetic_text", "prompt_tokens": INPUT_LEN,
                  "output_tokens": OUTPUT_LEN}],
        "tokenizer": {"kind": "huggingface_auto", "model": a.tokenizer},
        "metrics": {"kind": "generative", "slo": {"tpot_ms": SLO_MS}},
        "outputs": [{"kind": "json", "path": str(d / "guidellm.json")}],
    }
    (d / "guidellm-scenario.json").write_text(json.dumps({"spec": scenario}, indent=1))
    cmd = [a.guidellm, "run", "--config", str(d / "guidellm-scenario.json"),
           "--disable-console-interactive"]
    rc, wall = run_timed(cmd, d / "guidellm.log", a.guidellm_timeout,
                         env={"HF_HUB_OFFLINE": "1"})
    probes, answer, failing, note = [], None, None, f"rc {rc}"
    # Its answer is the goodput search's conclusion, logged at the end of the run.
    log = (d / "guidellm.log").read_text(errors="replace")
    for line in log.splitlines():
        if "Goodput search" in line:
            note = line.split(" - ", 1)[-1].strip()
    try:
        report = json.load(open(d / "guidellm.json"))
        for b in report.get("benchmarks", []):
            s = b.get("config", {}).get("strategy", {}).get("streams")
            if s is not None:
                probes.append(s)
        concl = find_key(report, "best_passing_streams")
        if concl is not None:
            answer, failing = concl.get("best_passing_streams"), concl.get(
                "lowest_failing_streams")
    except (OSError, ValueError) as e:
        note += f"; no report: {e}"
    return {"answer": answer, "failing": failing, "probes": probes,
            "objective": "95% of requests with mean gap (tpot_ms) <= 55 ms (Wilson 95%)",
            "note": note, "rc": rc, "wall_s": wall}


def find_key(obj, key):
    """The last dict (depth first) holding `key`."""
    found = None
    if isinstance(obj, dict):
        if key in obj:
            found = obj
        for v in obj.values():
            f = find_key(v, key)
            if f is not None:
                found = f
    elif isinstance(obj, list):
        for v in obj:
            f = find_key(v, key)
            if f is not None:
                found = f
    return found


def run_aiperf(a, mock, d):
    out = d / "aiperf"
    cmd = [a.aiperf, "profile", "--model", "mock-model", "--url", mock.url,
           "--endpoint-type", "completions", "--streaming", "--tokenizer", a.tokenizer,
           "--isl", str(INPUT_LEN), "--osl", str(OUTPUT_LEN), "--extra-inputs", "ignore_eos:true",
           "--use-server-token-count", "--request-count", str(PEER_REQUESTS),
           "--search-recipe", "max-concurrency-under-sla", "--itl-sla-ms", f"{SLO_MS:g}",
           "--concurrency-min", "1", "--concurrency-max", str(MAX_STREAMS),
           "--artifact-dir", str(out), "--ui-type", "none"]
    # Not HF_HUB_OFFLINE: with it, AIPerf 0.13.0 resolves a local tokenizer folder as a hub repo
    # id and fails; without it a folder path loads from disk (nothing is fetched).
    rc, wall = run_timed(cmd, d / "aiperf.log", a.aiperf_timeout, env=AIPERF_ENV)
    probes, answer, failing, note = [], None, None, f"rc {rc}"
    try:
        h = json.load(open(out / "search_history.json"))
        feasible = []
        for it in h.get("iterations", []):
            c = it["variation_values"]["phases.profiling.concurrency"]
            probes.append(c)
            feasible.append((c, it.get("feasible")))
        # Its answer: the boundary summary's largest feasible load (else the best trial).
        b = h.get("boundary_summary") or {}
        best = h.get("best_trials") or []
        if b.get("feasible_max"):
            answer = b["feasible_max"]["value"]
        elif best:
            answer = best[0]["variation_values"]["phases.profiling.concurrency"]
        if b.get("infeasible_min"):
            failing = b["infeasible_min"]["value"]
        else:
            fails = [c for c, f in feasible if f is False]
            failing = min(fails) if fails else None
        breach = (b.get("infeasible_min") or {}).get("first_breach") or {}
        note = (f"convergence {h.get('convergence_reason')}; boundary {b.get('boundary_type')}"
                + (f"; p95 {breach['observed']:.1f} ms at {failing}" if breach else ""))
    except (OSError, ValueError, KeyError) as e:
        note += f"; no search_history.json: {e}"
    if rc == "timeout":
        note = f"stopped by our {a.aiperf_timeout:.0f} s limit; " + note
    return {"answer": answer, "failing": failing, "probes": probes,
            "objective": "p95 of per-request mean gap < 55 ms (--itl-sla-ms 55)",
            "note": note, "rc": rc, "wall_s": wall}


TOOLS = {"llmspeed": run_llmspeed, "guidellm": run_guidellm, "aiperf": run_aiperf}


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--out", default="target/capacity-peers")
    p.add_argument("--llmspeed", default=str(REPO / "target/release/llmspeed"))
    p.add_argument("--tools", default="llmspeed,guidellm,aiperf")
    p.add_argument("--guidellm", help="its console script (default: install.sh's)")
    p.add_argument("--aiperf", help="its console script (default: install.sh's)")
    p.add_argument("--aiperf-timeout", type=float, default=600)
    p.add_argument("--guidellm-timeout", type=float, default=600)
    a = p.parse_args()
    a.tokenizer = os.environ.get("LLMSPEED_VLLM_MODEL", "")
    if not a.tokenizer:
        raise SystemExit("set LLMSPEED_VLLM_MODEL: the model= line scripts/vllm-server.sh prints")
    if not (a.guidellm and a.aiperf):
        paths = dict(line.split("=", 1) for line in subprocess.run(
            ["bash", str(HERE / "install.sh")], check=True, capture_output=True,
            text=True).stdout.split())
        a.guidellm, a.aiperf = paths["guidellm"], paths["aiperf"]
    out = Path(a.out).resolve()
    out.mkdir(parents=True, exist_ok=True)
    tools = a.tools.split(",")
    rows = []
    for r in range(1, a.rounds + 1):
        order = tools if r % 2 else list(reversed(tools))
        for name in order:
            d = out / f"round{r}" / name
            d.mkdir(parents=True, exist_ok=True)
            mock = Mock(a.llmspeed, d)
            before = load()
            try:
                row = TOOLS[name](a, mock, d)
            finally:
                mock.stop()
                row_requests = mock.requests()
            row.update(tool=name, round=r, requests=row_requests, load_before=before,
                       load_after=load())
            rows.append(row)
            print(json.dumps(row), flush=True)
            with open(out / "rows.jsonl", "a") as f:
                f.write(json.dumps(row) + "\n")
    print()
    print(f"truth: {TRUTH} streams (smallest failing {TRUTH + 1}); objective: 55 ms on the p95 "
          "of the gaps; server: llmspeed mock, ITL case of tests/capacity_mock.rs")
    print("| round | tool | answer | smallest failing | truth | probes | requests | wall s | "
          "load 1-min before/after | note |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for x in rows:
        print(f"| {x['round']} | {x['tool']} | {x['answer']} | {x['failing']} | {TRUTH} | "
              f"{len(x['probes'])}: {', '.join(map(str, x['probes']))} | {x['requests']} | "
              f"{x['wall_s']:.0f} | {x['load_before']} / {x['load_after']} | {x['note']} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
