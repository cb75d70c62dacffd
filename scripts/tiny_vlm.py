#!/usr/bin/env python3
"""Writes a tiny random-weight LLaVA-1.5-style vision-language model in Hugging Face format, for
vLLM's `LlavaForConditionalGeneration` (the CPU build scripts/vllm-server.sh installs).

Usage: tiny_vlm.py OUT_DIR

For testing a benchmark client's image accounting, not for seeing: the text model is
tiny_hf_llama.py's (the same tokenizer, trained with the same seed, plus one `<image>` token,
id 8192), a CLIP vision tower of hidden 64, 2 layers of 2 heads, images of 224 pixels in patches
of 14, and a two-layer projector; bfloat16, random weights, about 11 MB. Every image is resized
and centre-cropped to 224 x 224, so each counts (224 / 14)^2 = 256 prompt tokens whatever its
size (the CLS position dropped: `vision_feature_select_strategy` "default").
The chat template takes OpenAI content parts and writes the parts in order with nothing between
them, `<image>` for each image part; a plain string content is written as is. So a chat's
prompt tokens are those of the same chat with its text alone plus 256 per image.
The CLIP tower's weights are stored as `vision_tower.vision_model.*`, the names vLLM 0.32 loads
(transformers 5.19 writes them without the `vision_model.` level).
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
from safetensors.torch import load_file, save_file
from transformers import (
    CLIPImageProcessor,
    CLIPVisionConfig,
    LlamaConfig,
    LlavaConfig,
    LlavaForConditionalGeneration,
    LlavaProcessor,
)

import tiny_hf_llama as text

IMAGE_TOKEN = "<image>"
IMAGE_SIZE = 224
PATCH = 14
TOKENS_PER_IMAGE = (IMAGE_SIZE // PATCH) ** 2
VISION = dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=2)
CHAT_TEMPLATE = (
    "{{ bos_token }}{% for m in messages %}<|{{ m['role'] }}|>\n"
    "{% if m['content'] is string %}{{ m['content'] }}{% else %}{% for p in m['content'] %}"
    "{% if p['type'] == 'text' %}{{ p['text'] }}"
    "{% elif p['type'] in ['image', 'image_url'] %}" + IMAGE_TOKEN + "{% endif %}"
    "{% endfor %}{% endif %}{{ eos_token }}\n"
    "{% endfor %}{% if add_generation_prompt %}<|assistant|>\n{% endif %}"
)
# The CLIP image processor's usual normalisation (OpenAI CLIP's statistics).
MEAN = [0.48145466, 0.4578275, 0.40821073]
STD = [0.26862954, 0.26130258, 0.27577711]


def tower_names(out):
    """Renames `vision_tower.X` to `vision_tower.vision_model.X` in the saved weights."""
    path = os.path.join(out, "model.safetensors")
    weights = load_file(path)
    renamed = {}
    for k, v in weights.items():
        if k.startswith("vision_tower.") and not k.startswith("vision_tower.vision_model."):
            k = "vision_tower.vision_model." + k[len("vision_tower."):]
        renamed[k] = v.contiguous()
    save_file(renamed, path, metadata={"format": "pt"})
    return sorted({k.split(".")[0] + "." + k.split(".")[1] for k in renamed})


def main(out):
    rng = random.Random(text.SEED)
    torch.manual_seed(text.SEED)
    torch.set_num_threads(1)
    tok = text.tokenizer(rng)
    if len(tok) != text.VOCAB:
        sys.exit("the tokenizer has %d ids, not %d" % (len(tok), text.VOCAB))
    tok.add_special_tokens({"additional_special_tokens": [IMAGE_TOKEN]})
    image_id = tok.convert_tokens_to_ids(IMAGE_TOKEN)
    if image_id != text.VOCAB:
        sys.exit("%s has id %d, not %d" % (IMAGE_TOKEN, image_id, text.VOCAB))
    tok.chat_template = CHAT_TEMPLATE
    text_config = LlamaConfig(
        vocab_size=len(tok),
        hidden_size=text.HIDDEN,
        intermediate_size=text.FFN,
        num_hidden_layers=text.LAYERS,
        num_attention_heads=text.HEADS,
        num_key_value_heads=text.HEADS,
        max_position_embeddings=text.MAX_POSITIONS,
        bos_token_id=tok.bos_token_id,
        eos_token_id=tok.eos_token_id,
        tie_word_embeddings=False,
    )
    vision_config = CLIPVisionConfig(image_size=IMAGE_SIZE, patch_size=PATCH, **VISION)
    config = LlavaConfig(
        vision_config=vision_config,
        text_config=text_config,
        image_token_index=image_id,
        vision_feature_select_strategy="default",
        vision_feature_layer=-1,
        projector_hidden_act="gelu",
        image_seq_length=TOKENS_PER_IMAGE,
        tie_word_embeddings=False,
    )
    model = LlavaForConditionalGeneration(config).to(torch.bfloat16)
    os.makedirs(out, exist_ok=True)
    model.save_pretrained(out, safe_serialization=True)
    prefixes = tower_names(out)
    processor = LlavaProcessor(
        image_processor=CLIPImageProcessor(
            size={"shortest_edge": IMAGE_SIZE},
            crop_size={"height": IMAGE_SIZE, "width": IMAGE_SIZE},
            image_mean=MEAN,
            image_std=STD,
        ),
        tokenizer=tok,
        patch_size=PATCH,
        vision_feature_select_strategy="default",
        num_additional_image_tokens=1,
        image_token=IMAGE_TOKEN,
        chat_template=CHAT_TEMPLATE,
    )
    processor.save_pretrained(out)
    with open(os.path.join(out, "llmspeed-tiny.json"), "w") as f:
        json.dump(
            {
                "seed": text.SEED,
                "vocab_size": len(tok),
                "image_token_id": image_id,
                "image_size": IMAGE_SIZE,
                "patch_size": PATCH,
                "tokens_per_image": TOKENS_PER_IMAGE,
            },
            f,
        )
    print(
        "wrote %s: %d ids, %d parameters, %d tokens per image, weights %s"
        % (out, len(tok), model.num_parameters(), TOKENS_PER_IMAGE, ", ".join(prefixes))
    )


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    main(sys.argv[1])
