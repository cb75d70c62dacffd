"""SGLang 0.5.23's own `--dataset-name longbench_v2` loader run on local files, for
tests/sglang_hub.rs, which builds the same samples with llmspeed and compares them exactly.

Usage: python longbench_v2.py < cases.json > answers.json
Each case: {"argv": [...bench_serving flags...], "dir": DIR, "rows": [row...],
"source": "parquet" | "jsonl" | "hub"}.
The rows are written into DIR: `data.parquet` (pyarrow), `data.jsonl` (one JSON object a line,
with blank lines between), or for "hub" `data.json` (one JSON list, as the hub's
THUDM/LongBench-v2 holds it) with `datasets.load_dataset` pointed at it (the `datasets`
library's json loader; SGLang asks for the hub id, split "train"). SGLang's own argument parser
(`cli_main`) reads argv, its start-of-run seeding runs as `run_benchmark` does it
(`random.seed`, `np.random.seed`), and its own `get_dataset` builds the rows. The tokenizer
counts words. Each answer: {"samples": [{"prompt", "prompt_len", "output_len"}...]}.
"""

import contextlib
import json
import os
import random
import sys
import types

import datasets
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from sglang.benchmark import serving
from sglang.benchmark.datasets import get_dataset


class Words:
    """A tokenizer whose tokens are the words of a text (str.split)."""

    def __call__(self, text, add_special_tokens=True):
        return types.SimpleNamespace(input_ids=text.split())


def write(case):
    d = case["dir"]
    os.makedirs(d, exist_ok=True)
    rows = case["rows"]
    source = case["source"]
    if source == "parquet":
        path = os.path.join(d, "data.parquet")
        pq.write_table(pa.Table.from_pylist(rows), path)
        return ["--dataset-path", path]
    if source == "jsonl":
        path = os.path.join(d, "data.jsonl")
        with open(path, "w") as f:
            for r in rows:
                f.write(json.dumps(r) + "\n\n")
        return ["--dataset-path", path]
    path = os.path.join(d, "data.json")
    with open(path, "w") as f:
        json.dump(rows, f)
    real = datasets.load_dataset

    def load_dataset(repo, split=None, **kw):
        assert repo == "THUDM/LongBench-v2" and split == "train", (repo, split)
        return real("json", data_files={"train": path}, split=split)

    datasets.load_dataset = load_dataset
    return []


def run(case):
    extra = write(case)
    captured = {}

    def run_benchmark(args):
        # What run_benchmark does before its dataset: the seeding, nothing drawn between.
        random.seed(args.seed)
        np.random.seed(args.seed)
        captured["rows"] = get_dataset(args, Words(), None)

    serving.run_benchmark = run_benchmark
    sys.argv = ["bench_serving"] + case["argv"] + extra
    serving.cli_main()
    return {
        "samples": [
            {"prompt": r.prompt, "prompt_len": r.prompt_len, "output_len": r.output_len}
            for r in captured["rows"]
        ]
    }


cases = json.load(sys.stdin)
answers = []
with contextlib.redirect_stdout(sys.stderr):
    for c in cases:
        answers.append(run(c))
print(json.dumps(answers))
