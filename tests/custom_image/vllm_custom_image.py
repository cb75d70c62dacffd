"""vLLM 0.33's own `--dataset-name custom_image` loader run on local files, for
tests/custom_image.rs, which builds the same requests with llmspeed and compares them.

Usage: python vllm_custom_image.py < cases.json > answers.json
Each case: {"argv": [...vllm bench serve flags...]} naming a JSONL file (and its images) the
Rust test wrote. vLLM's own argument parser reads argv and its own get_samples builds the
samples; the tokenizer counts words. Each sample is answered as the chat message content vLLM's
openai-chat request sends (its rule: a prompt that is a list of parts as it is, else a text part
and the images after it), each image part's URL given with the image's size as PIL reads it
(the file a file:// URL names; the decoded data of a data: URL, with its MIME type; null for
a web URL): {"samples": [{"content", "prompt_len", "output_len"}...]} or {"error": "..."}.
"""

import base64
import io
import json
import sys
import types

from PIL import Image

from vllm.benchmarks.datasets import datasets as vd
from vllm.benchmarks.serve import add_cli_args
from vllm.utils.argparse_utils import FlexibleArgumentParser


class Words:
    """A tokenizer whose tokens are the words of a text (str.split)."""

    def __call__(self, text, add_special_tokens=True):
        return types.SimpleNamespace(input_ids=text.split())


def described(part):
    if part.get("type") != "image_url":
        return part
    u = dict(part["image_url"])
    url = u["url"]
    if url.startswith("file://"):
        u["size"] = list(Image.open(url[len("file://"):]).size)
    elif url.startswith("data:"):
        head, b64 = url.split(",", 1)
        u["size"] = list(Image.open(io.BytesIO(base64.b64decode(b64))).size)
        u["url"] = head
    else:
        u["size"] = None
    return {"type": "image_url", "image_url": u}


def content(r):
    prompt = r.prompt
    if isinstance(prompt, list) and prompt and "role" in prompt[0]:
        parts = prompt[0]["content"]
    elif isinstance(prompt, list):
        parts = prompt
    else:
        parts = [{"type": "text", "text": prompt}]
        mm = r.multi_modal_data
        if isinstance(mm, list):
            parts = parts + mm
        elif isinstance(mm, dict):
            parts = parts + [mm]
    return [described(p) for p in parts]


def run(case):
    parser = FlexibleArgumentParser()
    add_cli_args(parser)
    args = parser.parse_args(["--model", "m"] + case["argv"])
    try:
        reqs = vd.get_samples(args, Words())
    except Exception as e:  # noqa: BLE001 - the message is compared
        return {"error": f"{type(e).__name__}: {e}"}
    return {"samples": [{
        "content": content(r),
        "prompt_len": r.prompt_len,
        "output_len": r.expected_output_len,
    } for r in reqs]}


def main():
    cases = json.load(sys.stdin)
    json.dump([run(c) for c in cases], sys.stdout)


if __name__ == "__main__":
    main()
