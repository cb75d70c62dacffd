"""How long vLLM 0.33's own random-mm set-up takes, for docs/bench-serve.md's images part.

Usage: $LLMSPEED_VLLM_REF_PYTHON vllm_setup_time.py N [ITEMS HEIGHT WIDTH]
Times RandomMultiModalDataset.sample (what vLLM's get_samples calls for --dataset-name
random-mm) for N requests of ITEMS images of HEIGHT x WIDTH each (default 4 x 720 x 1280),
its images made and encoded by vLLM's own code (numpy noise, PIL JPEG, base64), with a
tokenizer whose decode and encode round-trip (the text part is a few hundred ids, a negligible
share of the time). Prints wall and CPU seconds, peak RSS and the data URLs' bytes as JSON.
"""

import json
import resource
import sys
import time


class Tok:
    """Ids decode to their numbers and encode back to the same ids."""

    vocab_size = 32000
    all_special_ids = []
    added_tokens_decoder = {}

    def get_vocab(self):
        return {str(i): i for i in range(self.vocab_size)}

    def num_special_tokens_to_add(self):
        return 0

    def decode(self, ids, **_):
        return " ".join(str(i) for i in ids)

    def encode(self, text, add_special_tokens=False):
        return [int(t) for t in text.split()]


def main():
    n = int(sys.argv[1])
    items, h, w = (int(x) for x in (sys.argv[2:5] or (4, 720, 1280)))
    from vllm.benchmarks.datasets import datasets

    data = datasets.RandomMultiModalDataset(random_seed=0)
    t0, c0 = time.perf_counter(), time.process_time()
    rows = data.sample(
        Tok(),
        n,
        input_len=100,
        output_len=10,
        range_ratio=0.0,
        base_items_per_request=items,
        num_mm_items_range_ratio=0.0,
        limit_mm_per_prompt={"image": items, "video": 0},
        bucket_config={(h, w, 1): 1.0},
    )
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    urls = [p["image_url"]["url"] for r in rows for p in r.multi_modal_data]
    print(
        json.dumps(
            {
                "requests": len(rows),
                "images": len(urls),
                "wall_s": round(wall, 2),
                "cpu_s": round(cpu, 2),
                "max_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024,
                "url_bytes": sum(len(u) for u in urls),
            }
        )
    )


if __name__ == "__main__":
    main()
