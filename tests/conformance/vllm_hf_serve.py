"""vLLM 0.33's whole `vllm bench serve` client on `--dataset-name hf`, offline, for
tests/conformance_hf.rs: several runs in one Python process (torch is imported once).

Usage: python vllm_hf_serve.py < spec.json > exit_codes.json
spec: {"cache": DIR, "datasets": [{"id", "commit", "folder", "card", "parquet": {path: [row...]},
       "jsonl": {path: [row...]}}...], "runs": [{"argv": [...], "stdout": FILE, "stderr": FILE}]}

1. Each dataset is written into DIR in the Hugging Face hub cache's layout, as
   `huggingface_hub` stores a download: `datasets--{owner}--{name}/blobs/{sha256}`, linked from
   `snapshots/{commit}/{path}`, `refs/main` naming the commit; parquet files written by pyarrow,
   JSON-lines files as the hub holds BFCL's, the card (README.md, its `configs`) when given;
   a dataset with a "folder" is written there as plain files instead (a local copy).
   llmspeed then reads the same cache (HF_HUB_CACHE=DIR, HF_HUB_OFFLINE=1).
2. The one change to vLLM: `load_dataset` in vllm.benchmarks.datasets, which asks the hub for a
   streamed dataset (it needs the network even when the files are cached), is pointed at the
   dataset's cached snapshot folder: the `datasets` library's own loader then chooses the split's
   files (its default patterns, or the card's configs for --hf-subset) and streams and shuffles
   them as it would the hub's. BFCL's `hf_hub_download` is huggingface_hub's own, answered
   offline from the same cache (HF_HUB_CACHE).
3. Each run is vLLM's CLI main, unchanged, with sys.argv = ["vllm", "bench", "serve", *argv],
   its stdout and stderr (file descriptors 1 and 2) sent to the run's files; its exit status
   (SystemExit's code, 1 for an exception escaping main, else 0) is printed, one per run, as a
   JSON list: the only thing on stdout (anything printed outside a run goes to stderr).
"""

import hashlib
import json
import os
import sys
import traceback

import datasets
import pyarrow as pa
import pyarrow.parquet as pq


def repo_dir(cache, repo_id):
    return os.path.join(cache, "datasets--" + repo_id.replace("/", "--"))


def contents(ds):
    """The dataset's files as bytes, by repository path."""
    files = {}
    for path, rows in ds.get("parquet", {}).items():
        sink = pa.BufferOutputStream()
        pq.write_table(pa.Table.from_pylist(rows), sink)
        files[path] = sink.getvalue().to_pybytes()
    for path, rows in ds.get("jsonl", {}).items():
        files[path] = "".join(json.dumps(r) + "\n" for r in rows).encode()
    if ds.get("card"):
        files["README.md"] = ds["card"].encode()
    return files


def store(cache, ds):
    """Writes one dataset into the cache as huggingface_hub lays out a download, or, given a
    folder, as plain files there (a local copy named by --hf-name)."""
    if ds.get("folder"):
        for path, data in contents(ds).items():
            dest = os.path.join(ds["folder"], path)
            os.makedirs(os.path.dirname(dest), exist_ok=True)
            with open(dest, "wb") as f:
                f.write(data)
        return
    repo = repo_dir(cache, ds["id"])
    snap = os.path.join(repo, "snapshots", ds["commit"])
    blobs = os.path.join(repo, "blobs")
    os.makedirs(blobs, exist_ok=True)
    os.makedirs(os.path.join(repo, "refs"), exist_ok=True)
    with open(os.path.join(repo, "refs", "main"), "w") as f:
        f.write(ds["commit"])
    for path, data in contents(ds).items():
        blob = os.path.join(blobs, hashlib.sha256(data).hexdigest())
        with open(blob, "wb") as f:
            f.write(data)
        link = os.path.join(snap, path)
        os.makedirs(os.path.dirname(link), exist_ok=True)
        os.symlink(os.path.relpath(blob, os.path.dirname(link)), link)


def cached_load_dataset(cache):
    """`load_dataset(hub id, ...)` answered from the id's cached snapshot folder (a local
    folder, which the library reads offline, as it is)."""

    def load_dataset(path, name=None, split=None, streaming=False, **_ignored):
        if os.path.isdir(path):
            return datasets.load_dataset(path, name=name, split=split, streaming=streaming)
        repo = repo_dir(cache, path)
        try:
            with open(os.path.join(repo, "refs", "main")) as f:
                commit = f.read().strip()
        except FileNotFoundError:
            raise FileNotFoundError(f"{path} is not in the test's hub cache {cache}") from None
        snap = os.path.join(repo, "snapshots", commit)
        return datasets.load_dataset(snap, name=name, split=split, streaming=streaming)

    return load_dataset


def run_one(main, run):
    sys.argv = ["vllm", "bench", "serve", *run["argv"]]
    sys.stdout.flush()
    sys.stderr.flush()
    saved = (os.dup(1), os.dup(2))
    out = os.open(run["stdout"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    err = os.open(run["stderr"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    os.dup2(out, 1)
    os.dup2(err, 2)
    code = 0
    try:
        main()
    except SystemExit as e:
        code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
    except BaseException:  # noqa: BLE001 - an escaping exception is Python's exit status 1
        traceback.print_exc()
        code = 1
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os.dup2(saved[0], 1)
        os.dup2(saved[1], 2)
        for fd in (out, err, *saved):
            os.close(fd)
    return code


def main():
    spec = json.load(sys.stdin)
    # The answer alone on stdout: whatever else is printed outside a run goes to stderr.
    answer = os.fdopen(os.dup(1), "w")
    sys.stdout.flush()
    os.dup2(2, 1)
    cache = spec["cache"]
    for ds in spec["datasets"]:
        store(cache, ds)
    from vllm.benchmarks.datasets import datasets as vd
    from vllm.entrypoints.cli.main import main as vllm_main

    vd.load_dataset = cached_load_dataset(cache)
    codes = [run_one(vllm_main, run) for run in spec["runs"]]
    json.dump(codes, answer)
    answer.close()


if __name__ == "__main__":
    main()
