#!/usr/bin/env python3
"""Writes a tiny random-weight Qwen2-VL-style vision-language model in Hugging Face format, for
vLLM's `Qwen2VLForConditionalGeneration` (the CPU build scripts/vllm-server.sh installs).

Usage: tiny_qwen2vl.py OUT_DIR

For testing a benchmark client's image accounting, not for seeing. Unlike tiny_vlm.py's LLaVA,
an image's token count depends on its size: the processor resizes each image to multiples of
28 pixels (patches of 14, merged 2 x 2), each dimension rounded to the nearest multiple, the
area kept within [MIN_PIXELS, MAX_PIXELS], and the image stands for (h / 28) x (w / 28)
`<|image_pad|>` tokens between `<|vision_start|>` and `<|vision_end|>`.
The text model is tiny_hf_llama.py's sizes with its tokenizer (same seed) plus the four vision
tokens (ids 8192-8195); a vision tower of 64 wide, 2 layers of 2 heads; bfloat16, about 12 MB.
The chat template writes the parts in order with nothing between them; an image part is
`<|vision_start|><|image_pad|><|vision_end|>`.
Deterministic (fixed seeds, one thread): the same files every time; nothing is downloaded.
"""
import json
import os
import random
import sys

os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

import torch
from transformers import (
    Qwen2VLConfig,
    Qwen2VLForConditionalGeneration,
    Qwen2VLImageProcessor,
    Qwen2VLProcessor,
    Qwen2VLVideoProcessor,
)

import tiny_hf_llama as text

VISION_TOKENS = ["<|vision_start|>", "<|vision_end|>", "<|image_pad|>", "<|video_pad|>"]
PATCH = 14
MERGE = 2
# Qwen2-VL's own bounds: at least 4 merged patches (56 x 56), at most 1,280 (of 28 x 28).
MIN_PIXELS = 56 * 56
MAX_PIXELS = 28 * 28 * 1280
IMAGE = "<|vision_start|><|image_pad|><|vision_end|>"
CHAT_TEMPLATE = (
    "{{ bos_token }}{% for m in messages %}<|{{ m['role'] }}|>\n"
    "{% if m['content'] is string %}{{ m['content'] }}{% else %}{% for p in m['content'] %}"
    "{% if p['type'] == 'text' %}{{ p['text'] }}"
    "{% elif p['type'] in ['image', 'image_url'] %}" + IMAGE + "{% endif %}"
    "{% endfor %}{% endif %}{{ eos_token }}\n"
    "{% endfor %}{% if add_generation_prompt %}<|assistant|>\n{% endif %}"
)
MEAN = [0.48145466, 0.4578275, 0.40821073]
STD = [0.26862954, 0.26130258, 0.27577711]


def main(out):
    rng = random.Random(text.SEED)
    torch.manual_seed(text.SEED)
    torch.set_num_threads(1)
    tok = text.tokenizer(rng)
    if len(tok) != text.VOCAB:
        sys.exit("the tokenizer has %d ids, not %d" % (len(tok), text.VOCAB))
    tok.add_special_tokens({"additional_special_tokens": VISION_TOKENS})
    ids = {t: tok.convert_tokens_to_ids(t) for t in VISION_TOKENS}
    if sorted(ids.values()) != list(range(text.VOCAB, text.VOCAB + len(VISION_TOKENS))):
        sys.exit("unexpected ids for the vision tokens: %s" % ids)
    tok.chat_template = CHAT_TEMPLATE
    head_dim = text.HIDDEN // text.HEADS
    config = Qwen2VLConfig(
        text_config=dict(
            vocab_size=len(tok),
            hidden_size=text.HIDDEN,
            intermediate_size=text.FFN,
            num_hidden_layers=text.LAYERS,
            num_attention_heads=text.HEADS,
            num_key_value_heads=text.HEADS,
            max_position_embeddings=text.MAX_POSITIONS,
            bos_token_id=tok.bos_token_id,
            eos_token_id=tok.eos_token_id,
            # The three sections (time, height, width) of the rotary half of a head.
            rope_parameters={
                "rope_type": "default",
                "rope_theta": 10000.0,
                "mrope_section": [head_dim // 8, 3 * head_dim // 16, 3 * head_dim // 16],
            },
            tie_word_embeddings=False,
        ),
        vision_config=dict(
            depth=2,
            embed_dim=64,
            hidden_size=text.HIDDEN,
            mlp_ratio=2,
            num_heads=2,
            patch_size=PATCH,
            spatial_merge_size=MERGE,
            temporal_patch_size=2,
        ),
        image_token_id=ids["<|image_pad|>"],
        video_token_id=ids["<|video_pad|>"],
        vision_start_token_id=ids["<|vision_start|>"],
        vision_end_token_id=ids["<|vision_end|>"],
        tie_word_embeddings=False,
    )
    model = Qwen2VLForConditionalGeneration(config).to(torch.bfloat16)
    os.makedirs(out, exist_ok=True)
    model.save_pretrained(out, safe_serialization=True)
    processor = Qwen2VLProcessor(
        image_processor=Qwen2VLImageProcessor(
            min_pixels=MIN_PIXELS,
            max_pixels=MAX_PIXELS,
            patch_size=PATCH,
            merge_size=MERGE,
            temporal_patch_size=2,
            image_mean=MEAN,
            image_std=STD,
        ),
        tokenizer=tok,
        # Not used (no video is sent), but the processor must have one.
        video_processor=Qwen2VLVideoProcessor(
            patch_size=PATCH, merge_size=MERGE, temporal_patch_size=2
        ),
        chat_template=CHAT_TEMPLATE,
    )
    processor.save_pretrained(out)
    with open(os.path.join(out, "llmspeed-tiny.json"), "w") as f:
        json.dump(
            {
                "seed": text.SEED,
                "vocab_size": len(tok),
                "vision_tokens": ids,
                "patch_size": PATCH,
                "merge_size": MERGE,
                "min_pixels": MIN_PIXELS,
                "max_pixels": MAX_PIXELS,
            },
            f,
        )
    print("wrote %s: %d ids, %d parameters" % (out, len(tok), model.num_parameters()))


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    main(sys.argv[1])
