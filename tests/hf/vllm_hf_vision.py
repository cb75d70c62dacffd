"""vLLM 0.33's own `--dataset-name hf` loader for its vision ids, run on local files, for
tests/hf_vision.rs, which builds the same samples with llmspeed from the same files.

Usage: python vllm_hf_vision.py < cases.json > answers.json
Each case: {"argv": [...vllm bench serve flags...], "dir": DIR, "split": S, "rows": [row...],
"image_columns": {column: "one" | "list"}}. In a row, {"__pil__": {"w", "h", "format", "mode"}}
stands for an image PIL makes (a gradient of that size and mode) and saves in that format, and
{"__bytes__": base64} for raw bytes; either becomes the hub's image struct {bytes, path}. The
rows are written into DIR/S-00000-of-00001.parquet with the image columns cast to the
`datasets` library's Image feature (the hub's own layout: a {bytes, path} struct and the
feature in the schema's metadata). vLLM's argument parser reads argv, its get_samples builds
the samples with `load_dataset` pointed at that file (streamed, as vLLM streams the hub's).
The tokenizer counts words. Each answer: {"samples": [{"prompt", "prompt_len", "output_len",
"images": [{"size": [w, h], "format"} | {"url"}...]}...]} or
{"error": "..."}: an image sent as a data URL is opened with PIL to give its size (vLLM
re-encodes every image as JPEG, so its bytes are not the row's).
"""

import base64
import io
import json
import os
import sys
import types

import datasets
import pyarrow as pa
import pyarrow.parquet as pq
from PIL import Image

from vllm.benchmarks.datasets import datasets as vd
from vllm.benchmarks.serve import add_cli_args
from vllm.utils.argparse_utils import FlexibleArgumentParser


class Words:
    """A tokenizer whose tokens are the words of a text (str.split)."""

    def __call__(self, text, add_special_tokens=True):
        return types.SimpleNamespace(input_ids=text.split())

    def encode(self, text, add_special_tokens=True):
        return text.split()


def pil_image(spec):
    w, h = spec["w"], spec["h"]
    im = Image.new("RGB", (w, h))
    im.putdata([((x * 5 + y) % 256, (y * 9) % 256, (x * y) % 256)
                for y in range(h) for x in range(w)])
    mode = spec.get("mode", "RGB")
    if mode != "RGB":
        im = im.convert(mode)
    out = io.BytesIO()
    im.save(out, format=spec["format"])
    return out.getvalue()


def materialise(v):
    if isinstance(v, dict):
        if "__pil__" in v:
            return {"bytes": pil_image(v["__pil__"]), "path": None}
        if "__bytes__" in v:
            return {"bytes": base64.b64decode(v["__bytes__"]), "path": None}
        return {k: materialise(x) for k, x in v.items()}
    if isinstance(v, list):
        return [materialise(x) for x in v]
    return v


def sent_images(mm):
    if mm is None:
        return []
    parts = mm if isinstance(mm, list) else [mm]
    out = []
    for p in parts:
        url = p["image_url"]["url"]
        if url.startswith("data:image/"):
            data = base64.b64decode(url.split(",", 1)[1])
            with Image.open(io.BytesIO(data)) as im:
                out.append({"size": list(im.size), "format": im.format})
        else:
            out.append({"url": url})
    return out


def run(case):
    d = case["dir"]
    os.makedirs(d, exist_ok=True)
    split = case["split"]
    rows = [materialise(r) for r in case["rows"]]
    table = pa.Table.from_pylist(rows)
    features = datasets.Features.from_arrow_schema(table.schema)
    for col, kind in case.get("image_columns", {}).items():
        features[col] = datasets.Image() if kind == "one" else datasets.List(datasets.Image())
    # The features' schema carries them in its metadata, as the hub's files do.
    table = table.cast(features.arrow_schema)
    path = os.path.join(d, f"{split}-00000-of-00001.parquet")
    pq.write_table(table, path)

    def load_dataset(p, name=None, split=None, streaming=False, trust_remote_code=False):
        return datasets.load_dataset("parquet", data_files={case["split"]: [path]},
                                     split=split, streaming=streaming)

    vd.load_dataset = load_dataset
    parser = FlexibleArgumentParser()
    add_cli_args(parser)
    args = parser.parse_args(["--model", "m"] + case["argv"])
    try:
        reqs = vd.get_samples(args, Words())
    except Exception as e:  # noqa: BLE001 - the message is compared
        return {"error": f"{type(e).__name__}: {e}"}
    samples = []
    for r in reqs:
        prompt = r.prompt
        mm = r.multi_modal_data
        if isinstance(prompt, list):
            # --enable-multimodal-chat: the text and image parts inside one user message.
            # vLLM's chat request sends these messages as they are (multi_modal_data, still
            # set by VisionArena, is not sent again).
            parts = prompt[0]["content"]
            prompt = [p["text"] for p in parts if p.get("type") == "text"][0]
            mm = [p for p in parts if p.get("type") == "image_url"]
        samples.append({
            "prompt": prompt,
            "prompt_len": r.prompt_len,
            "output_len": r.expected_output_len,
            "images": sent_images(mm),
        })
    return {"samples": samples}


def main():
    cases = json.load(sys.stdin)
    json.dump([run(c) for c in cases], sys.stdout)


if __name__ == "__main__":
    main()
