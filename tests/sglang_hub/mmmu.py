"""SGLang 0.5.23's own `--dataset-name mmmu` loader run on a local parquet file, for
tests/sglang_hub.rs, which builds the same requests with llmspeed and compares them.

Usage: python mmmu.py < cases.json > answers.json
Each case: {"argv": [...bench_serving flags...], "parquet": PATH, "rows": [{"question",
"image_1": PATH-or-null}...]}. The rows are written to PATH (pyarrow) as the hub's MMMU/MMMU files
hold them, a {bytes, path} struct per image read from the image files named, and loaded with the
`datasets` library's Image feature, which decodes each to PIL as the hub's metadata makes it. SGLang's own argument parser (`cli_main`) reads argv,
its start-of-run seeding runs as `run_benchmark` does it, and its own `get_dataset` builds the
rows with `load_dataset` pointed at PATH. Its `create_mm_data_row` (the processor's counting)
is replaced by a recorder of what it is given: the text prompt, each image's size as PIL has it
(after SGLang's RGBA conversion), its data URL's head, and the output length; with "processor":
a model folder in the case, SGLang's processor of it (`get_processor`) and the prompt SGLang's own
`create_mm_data_row` makes for the row's backend, with the image's data URL.
"""

import contextlib
import json
import random
import sys

import datasets
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from sglang.benchmark import serving
from sglang.benchmark.datasets import get_dataset
from sglang.benchmark.datasets import mmmu as mmmu_mod
from sglang.benchmark.datasets.common import DatasetRow
from sglang.benchmark.utils import get_processor as real_get_processor

real_create = mmmu_mod.create_mm_data_row


def write(case):
    images = []
    for r in case["rows"]:
        if r["image_1"] is None:
            images.append(None)
        else:
            with open(r["image_1"], "rb") as f:
                images.append({"bytes": f.read(), "path": None})
    table = pa.table({"question": [r["question"] for r in case["rows"]], "image_1": images})
    pq.write_table(table, case["parquet"])


def run(case):
    write(case)
    recorded = []

    def record(text_prompt, images, images_base64, output_len, processor, backend):
        r = {
            "text": text_prompt,
            "sizes": [list(i.size) for i in images],
            "heads": [u.split(",", 1)[0] for u in images_base64],
            "output_len": output_len,
        }
        if case.get("processor"):
            # SGLang's own row: the prompt the backend sends, for the image's data URL.
            row = real_create(text_prompt, images, images_base64, output_len, processor, backend)
            r["prompt"] = row.prompt
            r["urls"] = list(images_base64)
        recorded.append(r)
        return DatasetRow(prompt=text_prompt, prompt_len=1, output_len=output_len)

    def load_dataset(repo, subset=None, split=None, **kw):
        assert (repo, subset, split) == ("MMMU/MMMU", "Math", "test"), (repo, subset, split)
        ds = datasets.load_dataset("parquet", data_files={"test": case["parquet"]}, split="test")
        # The hub's files carry the Image feature; the library decodes each to PIL.
        return ds.cast_column("image_1", datasets.Image())

    mmmu_mod.load_dataset = load_dataset
    mmmu_mod.create_mm_data_row = record
    if case.get("processor"):
        processor = real_get_processor(case["processor"])
        mmmu_mod.get_processor = lambda _model: processor
    else:
        mmmu_mod.get_processor = lambda _model: None

    def run_benchmark(args):
        random.seed(args.seed)
        np.random.seed(args.seed)
        get_dataset(args, None, "m")

    serving.run_benchmark = run_benchmark
    sys.argv = ["bench_serving"] + case["argv"]
    serving.cli_main()
    return {"requests": recorded}


cases = json.load(sys.stdin)
answers = []
with contextlib.redirect_stdout(sys.stderr):
    for c in cases:
        answers.append(run(c))
print(json.dumps(answers))
