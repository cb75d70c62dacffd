"""Random draws made by numpy itself and by the reference tools' own functions, for
tests/reference_draws.rs, which computes the same with llmspeed and compares them exactly.

Usage: python draws.py numpy|vllm|sglang|python < cases.json > draws.json, or
       python draws.py serve: one {"which", "cases"} a line on stdin, one answer a line.
  numpy:  each case {"seed", "legacy": [[call, args...]...], "generator": [[lo, hi, n]...]} run on
          np.random.RandomState(seed) (what np.random.seed seeds) and default_rng(seed);
          with "sums": [[x...]...], np.sum of each array.
  vllm:   each case {"seed", "n", "rate", "burstiness", "ramp": null | [strategy, start, end]}:
          the delay vLLM's own get_request sleeps until, per request, after np.random.seed(seed)
          as its main does; and {"seed", "n", "input_len", "output_len", "ratio", "special"}:
          the lengths vLLM's own get_sampling_params draws.
          {"seed", "n", "sharegpt": PATH}: the prompts, in order, vLLM's own ShareGPTDataset
          sends (a tokenizer counting words); and {"seed", "n", "burstgpt": PATH}: each request's
          input and output length, in order, from its own BurstGPTDataset. With "mm" (and
          "prefix", "vocab"): each request's lengths and images from its own
          RandomMultiModalDataset (random_mm_case).
  sglang: each case {"seed", "n", "input_len", "output_len", "ratio", "vocab", "rate", "ids"}:
          the lengths SGLang's own sample_random_requests draws after np.random.seed(seed), then
          the send time of each request by its own get_request; {"seed", "gsp": [groups, per,
          system, question, output, ratio, turns], "rate"}: the group, input and output length of
          each prompt its own sample_generated_shared_prefix_requests builds (in order), and the
          send times after; {"seed", "n", "input_len", "output_len", "ratio", "rate", "cuts":
          PATH, "tokenizer": DIR, "text"}: its `random` (ShareGPT cut with that tokenizer): each
          prompt (text, or ids without "text"), its length and output length, and the send
          times after; and {"seed", "n", "sharegpt":
          PATH}: the prompts, in order, its own sample_sharegpt_requests sends after
          random.seed(seed) (a tokenizer counting words).
  python: each case {"seed", "shuffle": n, "choices": [n, k]}: random.shuffle of range(n) and
          k random.choice of range(n), each after random.seed(seed).
Floats are written with repr, which reads back to the same double.
"""

import asyncio
import contextlib
import json
import sys
import traceback

import numpy as np


def python_case(case):
    import random

    random.seed(case["seed"])
    x = list(range(case["shuffle"]))
    random.shuffle(x)
    random.seed(case["seed"])
    n, k = case["choices"]
    return {"shuffle": x, "choices": [random.choice(range(n)) for _ in range(k)]}


def numpy_case(case):
    # The legacy generator takes seeds below 2**32 only: a case with no legacy calls may pass a
    # larger one to default_rng.
    rs = np.random.RandomState(case["seed"]) if case["legacy"] else None
    legacy = []
    for call, *args in case["legacy"]:
        if call == "randint":
            lo, hi, n = args
            legacy.append([int(x) for x in rs.randint(lo, hi, size=n)])
        elif call == "random":
            legacy.append([repr(float(x)) for x in rs.random_sample(size=args[0])])
        elif call == "normal":
            legacy.append([repr(float(x)) for x in rs.standard_normal(size=args[0])])
        elif call == "gamma":
            shape, scale, n = args
            legacy.append([repr(float(x)) for x in rs.gamma(shape, scale, size=n)])
        elif call == "exponential":
            scale, n = args
            legacy.append([repr(float(x)) for x in rs.exponential(scale, size=n)])
        else:
            raise ValueError(call)
    g = np.random.default_rng(case["seed"])
    generator = [[int(x) for x in g.integers(lo, hi, size=n)] for lo, hi, n in case["generator"]]
    sums = [repr(float(np.sum(np.array(a, dtype=np.float64)))) for a in case.get("sums", [])]
    return {"legacy": legacy, "generator": generator, "sums": sums}


class Stub:
    """The few tokenizer facts the draws read."""

    def __init__(self, special, vocab):
        self.special, self.vocab_size = special, vocab

    def num_special_tokens_to_add(self, pair=False):
        return self.special

    def decode(self, ids):
        return " ".join(str(i) for i in ids)

    def encode(self, text):
        return text.split()

    def get_vocab(self):
        return {str(i): i for i in range(self.vocab_size)}

    def __call__(self, text):
        class Encoded:
            input_ids = text.split()

        return Encoded()


class MmStub(Stub):
    """What RandomMultiModalDataset reads of a tokenizer: ids decode to their numbers and
    encode back to the same ids, so the text draws take no extra words."""

    added_tokens_decoder = {}

    def encode(self, text, add_special_tokens=False):
        return [int(t) for t in text.split()]


def random_mm_case(case):
    """Each request's input and output length and, per image in order, [height, width, the
    sum of its pixel bytes, its first 8 bytes in hex], from vLLM's own
    RandomMultiModalDataset.sample (its JPEG step replaced by a reading of the pixels)."""
    from vllm.benchmarks.datasets import datasets

    def pixels(image):
        raw = np.asarray(image).tobytes()
        return [image.height, image.width, int(sum(raw)), raw[:8].hex()]

    datasets.process_image = pixels
    mm = case["mm"]
    data = datasets.RandomMultiModalDataset(random_seed=case["seed"])
    rows = data.sample(
        MmStub(case["special"], case["vocab"]),
        case["n"],
        prefix_len=case["prefix"],
        range_ratio=case["ratio"],
        input_len=case["input_len"],
        output_len=case["output_len"],
        base_items_per_request=mm["base"],
        num_mm_items_range_ratio=mm["ratio"],
        limit_mm_per_prompt=mm["limits"],
        bucket_config={(h, w, f): p for h, w, f, p in mm["buckets"]},
    )
    return {
        "input": [int(r.prompt_len) for r in rows],
        "output": [int(r.expected_output_len) for r in rows],
        "images": [r.multi_modal_data for r in rows],
    }


def vllm_case(case):
    from vllm.benchmarks import serve
    from vllm.benchmarks.datasets.utils import get_sampling_params

    if "mm" in case:
        return random_mm_case(case)
    if "burstgpt" in case:
        from vllm.benchmarks.datasets.datasets import BurstGPTDataset

        data = BurstGPTDataset(random_seed=case["seed"], dataset_path=case["burstgpt"])
        rows = data.sample(Stub(0, 32000), case["n"])
        return {
            "input": [int(r.prompt_len) for r in rows],
            "output": [int(r.expected_output_len) for r in rows],
        }
    if "sharegpt" in case:
        from vllm.benchmarks.datasets.datasets import ShareGPTDataset

        data = ShareGPTDataset(random_seed=case["seed"], dataset_path=case["sharegpt"])
        rows = data.sample(Stub(0, 32000), case["n"])
        return {"prompts": [r.prompt for r in rows]}
    if "rate" in case:
        np.random.seed(case["seed"])
        serve.time.time = lambda: 0.0
        ramp = case["ramp"] or [None, None, None]
        gen = serve.get_request(
            [None] * case["n"],
            float(case["rate"]),
            float(case["burstiness"]),
            ramp[0],
            ramp[1],
            ramp[2],
        )
        # get_request sleeps until start + delay, the start being time.time() = 0: each sleep
        # is the request's whole delay; the ones it does not sleep for go at once.
        cumulative = []
        slept = []

        async def sleep(seconds, *_):
            slept.append(seconds)

        async def drain():
            async for _ in gen:
                cumulative.append(repr(float(slept[-1])) if slept else "0.0")
                slept.clear()

        real = asyncio.sleep
        asyncio.sleep = sleep
        try:
            asyncio.run(drain())
        finally:
            asyncio.sleep = real
        return {"at_s": cumulative}
    rng = np.random.default_rng(case["seed"])
    ins, outs, _ = get_sampling_params(
        rng,
        case["n"],
        case["ratio"],
        case["input_len"],
        case["output_len"],
        Stub(case["special"], 32000),
    )
    return {"input": [int(x) for x in ins], "output": [int(x) for x in outs]}


def sglang_case(case):
    import random

    from sglang.benchmark import serving
    from sglang.benchmark.datasets.random import sample_random_requests
    from sglang.benchmark.datasets.sharegpt import sample_sharegpt_requests

    if "sharegpt" in case:
        random.seed(case["seed"])
        np.random.seed(case["seed"])
        rows = sample_sharegpt_requests(case["sharegpt"], case["n"], Stub(0, 32000))
        return {"prompts": [r.prompt for r in rows]}

    np.random.seed(case["seed"])
    random.seed(case["seed"])
    if "gsp" in case:
        from sglang.benchmark.datasets.generated_shared_prefix import (
            sample_generated_shared_prefix_requests,
        )

        groups, per, system, question, output, ratio, turns = case["gsp"]
        rows = sample_generated_shared_prefix_requests(
            groups,
            per,
            system,
            question,
            output,
            ratio,
            Stub(0, 32000),
            case["seed"],
            send_routing_key=True,
            num_turns=turns,
            input_ids=turns == 1,
            group_distribution="zipf" if case.get("zipf") else "uniform",
            zipf_alpha=case.get("zipf"),
        )
        answer = {
            "group": [int(r.routing_key.rsplit("_", 1)[1]) for r in rows],
            "input": [int(r.prompt_len) for r in rows],
            "output": [int(r.output_len) for r in rows],
        }
    elif "cuts" in case:
        from transformers import AutoTokenizer

        rows = sample_random_requests(
            input_len=case["input_len"],
            output_len=case["output_len"],
            num_prompts=case["n"],
            range_ratio=case["ratio"],
            tokenizer=AutoTokenizer.from_pretrained(case["tokenizer"]),
            dataset_path=case["cuts"],
            random_sample=True,
            return_text=case["text"],
        )
        answer = {
            "prompts": [r.prompt if case["text"] else [int(i) for i in r.prompt] for r in rows],
            "input": [int(r.prompt_len) for r in rows],
            "output": [int(r.output_len) for r in rows],
        }
    else:
        rows = sample_random_requests(
            input_len=case["input_len"],
            output_len=case["output_len"],
            num_prompts=case["n"],
            range_ratio=case["ratio"],
            tokenizer=Stub(0, case["vocab"]),
            dataset_path="",
            random_sample=False,
            return_text=False,
        )
        answer = {
            "input": [int(r.prompt_len) for r in rows],
            "output": [int(r.output_len) for r in rows],
        }
    # SGLang sleeps each gap after a request: the send times are the gaps' running sums.
    slept = []

    async def sleep(seconds, *_):
        slept.append(seconds)

    async def drain():
        at, t = [], 0.0
        async for _ in serving.get_request(rows, float(case["rate"])):
            t = t + (slept[-1] if slept else 0.0)
            slept.clear()
            at.append(repr(float(t)))
            if len(at) == len(rows):
                break
        return at

    real = asyncio.sleep
    asyncio.sleep = sleep
    try:
        answer["at_s"] = asyncio.run(drain())
    finally:
        asyncio.sleep = real
    return answer


RUN = {"numpy": numpy_case, "python": python_case, "vllm": vllm_case, "sglang": sglang_case}


def serve():
    """One request a line, {"which", "cases"}, one answer a line: {"answer": [...]} or
    {"error": traceback}. One process answers every test of a binary, so the reference tools'
    imports (tens of seconds on a busy machine) are paid once, not once a test."""
    out = sys.stdout
    with contextlib.redirect_stdout(sys.stderr):
        while True:
            line = sys.stdin.readline()
            if not line:
                return
            try:
                req = json.loads(line)
                msg = {"answer": [RUN[req["which"]](c) for c in req["cases"]]}
            except Exception:
                msg = {"error": traceback.format_exc()}
            out.write(json.dumps(msg) + "\n")
            out.flush()


def main():
    which = sys.argv[1]
    if which == "serve":
        return serve()
    run = RUN[which]
    cases = json.load(sys.stdin)
    # The tools print as they draw (SGLang its token totals): stdout carries the answer only.
    with contextlib.redirect_stdout(sys.stderr):
        out = [run(c) for c in cases]
    json.dump(out, sys.stdout)


if __name__ == "__main__":
    main()
