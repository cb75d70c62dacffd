"""SGLang 0.5.23's own image dataset (`sglang.benchmark.datasets.image.ImageDataset.load`),
run for each case read as JSON from stdin; prints one JSON answer per case, in a list.

Each answer: the drawn input and output lengths (its `compute_random_lens`, recorded as it
returns), per request the images in order as [width, height, the sum of the pixel bytes, the
first 8 bytes in hex] (read from the PIL images it made, before its processor counts them),
each image's data URL prefix, and the repr of the next double numpy's legacy generator gives
after the dataset (the send times are drawn from there).

The processor is a stub with a small vocabulary: SGLang's text is drawn from Python's
`random`, apart from numpy's stream, and is not compared."""

import contextlib
import json
import sys

import numpy as np

from sglang.benchmark.datasets import image as image_mod
from sglang.benchmark.datasets.common import DatasetRow


class StubTokenizer:
    all_special_ids = [0]

    def get_vocab(self):
        return {f"t{i}": i for i in range(50)}

    def decode(self, ids):
        return " ".join(str(i) for i in ids)


def run(case):
    lens = []
    real_lens = image_mod.compute_random_lens

    def record_lens(**kw):
        out = real_lens(**kw)
        lens.append([int(x) for x in out])
        return out

    rows = []

    def capture(text_prompt, images, images_base64, output_len, processor, backend):
        per = []
        for img, url in zip(images, images_base64):
            raw = np.asarray(img).tobytes()
            per.append([img.width, img.height, int(sum(raw)), raw[:8].hex()])
        rows.append({"images": per, "prefix": [u.split(",", 1)[0] for u in images_base64]})
        return DatasetRow(prompt=text_prompt, prompt_len=1, output_len=output_len)

    image_mod.compute_random_lens = record_lens
    image_mod.create_mm_data_row = capture
    image_mod.get_processor = lambda _model: StubTokenizer()
    from argparse import Namespace

    args = Namespace(
        num_prompts=case["n"],
        image_count=case["count"],
        random_input_len=case["input_len"],
        random_output_len=case["output_len"],
        random_range_ratio=case["ratio"],
        image_content=case["content"],
        image_format=case["format"],
        image_resolution=case["resolution"],
        backend="sglang-oai-chat",
        random_image_count=case["random_count"],
        seed=case["seed"],
    )
    image_mod.ImageDataset.from_args(args).load(None, "stub")
    return {
        "input": lens[0],
        "output": lens[1],
        "rows": rows,
        "next_double": repr(float(np.random.random())),
    }


cases = json.load(sys.stdin)
# SGLang prints its statistics: they go to stderr, the answer alone to stdout.
with contextlib.redirect_stdout(sys.stderr):
    out = [run(c) for c in cases]
print(json.dumps(out))
