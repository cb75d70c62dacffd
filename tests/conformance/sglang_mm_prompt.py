"""SGLang 0.5.23's prompt for an image request (`sglang.benchmark.datasets.image.
create_mm_data_row`, which its `image` and `mmmu` datasets both call), run for each case read as
JSON from stdin; prints one JSON answer per case, in a list.

Each case: {"model": a model folder, "backend": a bench_serving backend, "text": the row's text,
"urls": its images' data URLs}. The processor is SGLang's own `get_processor(model)` (what
bench_serving loads from --served-model-name / --model); the images are the URLs decoded by PIL.
Each answer: the prompt the row sends (`DatasetRow.prompt`), the text-only prompt SGLang counts
as the row's text tokens (`apply_chat_template` of the text alone, the text itself where that
raises, as `create_mm_data_row` falls back), `text_prompt_len`, `prompt_len`, and the class name
of the processor."""

import base64
import contextlib
import io
import json
import sys

from PIL import Image

from sglang.benchmark.datasets.image import create_mm_data_row
from sglang.benchmark.utils import get_processor


def decode(url):
    return Image.open(io.BytesIO(base64.b64decode(url.split(",", 1)[1]))).convert("RGB")


processors = {}


def run(case):
    model = case["model"]
    if model not in processors:
        processors[model] = get_processor(model)
    processor = processors[model]
    images = [decode(u) for u in case["urls"]]
    row = create_mm_data_row(case["text"], images, case["urls"], 1, processor, case["backend"])
    try:
        text_only = processor.apply_chat_template(
            [{"role": "user", "content": case["text"]}],
            add_generation_prompt=True,
            tokenize=False,
        )
    except Exception:
        text_only = case["text"]
    return {
        "prompt": row.prompt,
        "text_only": text_only,
        "text_prompt_len": int(row.text_prompt_len),
        "prompt_len": int(row.prompt_len),
        "class": type(processor).__name__,
    }


cases = json.load(sys.stdin)
# SGLang prints its fallback message: it goes to stderr, the answer alone to stdout.
answers = []
with contextlib.redirect_stdout(sys.stderr):
    for c in cases:
        answers.append(run(c))
print(json.dumps(answers))
