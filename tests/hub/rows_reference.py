"""The `datasets` library's own row orders, for tests/hub_rows.rs.

Reads a JSON spec on stdin: {"dir", "sizes", "row_group", "seeds", "perms": [[seed, n]...]}.
Writes the shards (parquet with pyarrow, and the same rows as JSON Lines), loads them with
`datasets.load_dataset` streamed and in full, shuffles for each seed and prints the `id` order,
the first rows whole, and numpy's `default_rng(seed).permutation(n)` for each pair of `perms`.
"""

import json
import os
import sys

spec = json.load(sys.stdin)
os.environ["HF_DATASETS_CACHE"] = os.path.join(spec["dir"], "cache")
os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["HF_DATASETS_OFFLINE"] = "1"

import numpy as np  # noqa: E402
import pyarrow as pa  # noqa: E402
import pyarrow.parquet as pq  # noqa: E402
import datasets  # noqa: E402

datasets.disable_progress_bars()


def row(i):
    return {
        "id": i,
        "text": f"row {i} \u00e9\u4e2d",
        "conversations": [
            {"from": "human", "value": f"q{i}"},
            {"from": "gpt", "value": f"a{i}"},
        ],
        "meta": {"score": i * 0.5, "tags": ["t"] * (i % 3), "ok": i % 2 == 0},
    }


answer = {"files": {}, "orders": {}, "perms": []}
start = 0
paths = {"parquet": [], "json": []}
for k, n in enumerate(spec["sizes"]):
    rows = [row(i) for i in range(start, start + n)]
    start += n
    p = os.path.join(spec["dir"], f"train-{k:05d}.parquet")
    pq.write_table(pa.Table.from_pylist(rows), p, row_group_size=spec["row_group"])
    paths["parquet"].append(p)
    j = os.path.join(spec["dir"], f"train-{k:05d}.jsonl")
    with open(j, "w") as f:
        for r in rows:
            f.write(json.dumps(r) + "\n")
    paths["json"].append(j)
answer["files"] = paths

for builder, files in paths.items():
    for seed in spec["seeds"]:
        s = datasets.load_dataset(builder, data_files={"train": files}, split="train", streaming=True)
        streamed = list(s.shuffle(seed=seed))
        full = datasets.load_dataset(builder, data_files={"train": files}, split="train")
        answer["orders"][f"{builder}/{seed}"] = {
            "streamed": [r["id"] for r in streamed],
            "full": [r["id"] for r in full.shuffle(seed=seed)],
            "first": streamed[:5],
        }

for seed, n in spec["perms"]:
    answer["perms"].append(np.random.default_rng(seed).permutation(n).tolist())

json.dump(answer, sys.stdout)
