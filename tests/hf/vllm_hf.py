"""vLLM 0.33's own `--dataset-name hf` loader run on local files, for tests/hf_vllm.rs, which
builds the same samples with llmspeed and compares them exactly.

Usage: python vllm_hf.py < cases.json > samples.json
Each case: {"argv": [...vllm bench serve flags...], "dir": DIR, "rows": {split: [row...]},
"shards": N} or,
for BFCL, {"argv": [...], "dir": DIR, "bfcl": {category: [row...]}}.
The rows are written into DIR as parquet (pyarrow, N shards per split; BFCL: one JSON-lines
file per category, BFCL_v3_<category>.json, as the hub holds them). vLLM's own argument parser
reads argv, and its own get_samples builds the samples, with `load_dataset` pointed at those
files (the `datasets` library's parquet loader, streamed as vLLM streams the hub's) and
`hf_hub_download` at DIR. The tokenizer counts words; its chat template is a fixed format
(tests/hf_vllm.rs renders the same). Each answer: {"samples": [{"prompt", "prompt_len",
"output_len", "chat_messages", "overrides"}...]} or {"error": "..."}.
"""

import json
import os
import sys
import types

import datasets
import pyarrow as pa
import pyarrow.parquet as pq

from vllm.benchmarks.datasets import datasets as vd
from vllm.benchmarks.serve import add_cli_args
from vllm.utils.argparse_utils import FlexibleArgumentParser


class Words:
    """A tokenizer whose tokens are the words of a text (str.split)."""

    def __call__(self, text, add_special_tokens=True):
        return types.SimpleNamespace(input_ids=text.split())

    def apply_chat_template(self, messages, tools=None, add_generation_prompt=False,
                            tokenize=False, **kwargs):
        out = ""
        if tools is not None:
            out += "<|tools|> " + " ".join(t["function"]["name"] for t in tools) + "\n"
        for m in messages:
            out += f"<|{m['role']}|>\n{m['content']}\n"
        if add_generation_prompt:
            out += "<|assistant|>\n"
        return out


def run(case):
    d = case["dir"]
    os.makedirs(d, exist_ok=True)
    files = {}
    shards = case.get("shards", 1)
    for split, rows in case.get("rows", {}).items():
        files[split] = []
        per = -(-len(rows) // shards)
        for k in range(shards):
            path = os.path.join(d, f"{split}-{k:05d}-of-{shards:05d}.parquet")
            pq.write_table(pa.Table.from_pylist(rows[k * per:(k + 1) * per]), path)
            files[split].append(path)
    for cat, rows in case.get("bfcl", {}).items():
        with open(os.path.join(d, f"BFCL_v3_{cat}.json"), "w") as f:
            for r in rows:
                f.write(json.dumps(r) + "\n")

    def load_dataset(path, name=None, split=None, streaming=False, trust_remote_code=False):
        if split not in files:
            raise ValueError(f'Unknown split "{split}". Should be one of {list(files)}.')
        return datasets.load_dataset("parquet", data_files={split: files[split]}, split=split,
                                     streaming=streaming)

    class Api:
        def hf_hub_download(self, repo, filename, repo_type=None):
            from huggingface_hub.errors import EntryNotFoundError
            p = os.path.join(d, filename)
            if not os.path.exists(p):
                raise EntryNotFoundError(f"{filename} not found")
            return p

    vd.load_dataset = load_dataset
    vd.hf_api = lambda: Api()
    parser = FlexibleArgumentParser()
    add_cli_args(parser)
    args = parser.parse_args(["--model", "m"] + case["argv"])
    try:
        reqs = vd.get_samples(args, Words())
    except Exception as e:  # noqa: BLE001 - the message is compared
        return {"error": f"{type(e).__name__}: {e}"}
    return {"samples": [{
        "prompt": r.prompt,
        "prompt_len": r.prompt_len,
        "output_len": r.expected_output_len,
        "chat_messages": r.chat_messages,
        "overrides": r.request_overrides,
    } for r in reqs]}


def main():
    cases = json.load(sys.stdin)
    json.dump([run(c) for c in cases], sys.stdout)


if __name__ == "__main__":
    main()
