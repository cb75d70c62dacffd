#!/usr/bin/env python3
"""Writes a tiny random-weight Llama in Hugging Face format for vLLM (and any transformers loader).

Usage: tiny_hf_llama.py OUT_DIR

The model is for testing a benchmark client, not for text: 2 layers, hidden 256 with 4 heads of
64 (vLLM's CPU attention needs a head size of 32 or more), bfloat16, random weights, about 10 MB.
The tokenizer is a byte-level BPE of 8,192 ids trained here, with `tokenizers`, on English words
(many of them those of llmspeed's prompt prose) and made-up words: `<s>` (BOS, added to every
encoded text), `</s>` (EOS), a chat template with `<|system|>`, `<|user|>`, `<|assistant|>`.
8,192 ids: token-id prompts drawn from 1000..8000 (llmspeed's range when a server does not say
its vocabulary, as vLLM does not) are all valid ids. Byte-level pieces that are not valid UTF-8
alone make a random model's content chunks fewer than its tokens, as real models' do.
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
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

from tiny_words import WORDS

SEED = 20261201
VOCAB = 8192
HIDDEN = 256
HEADS = 4
LAYERS = 2
FFN = 512
MAX_POSITIONS = 4096
SPECIAL = ["<s>", "</s>", "<unk>", "<|system|>", "<|user|>", "<|assistant|>"]
CHAT_TEMPLATE = (
    "{{ bos_token }}{% for m in messages %}<|{{ m['role'] }}|>\n{{ m['content'] }}{{ eos_token }}\n"
    "{% endfor %}{% if add_generation_prompt %}<|assistant|>\n{% endif %}"
)


def corpus(rng):
    """Sentences of English words and made-up words (so the BPE has enough to merge)."""
    syllables = [c + v for c in "bcdfghklmnprstvwz" for v in "aeiou"] + ["th", "st", "er", "an"]
    made_up = ["".join(rng.choice(syllables) for _ in range(rng.randint(2, 4))) for _ in range(6000)]
    lines = []
    for _ in range(4000):
        n = rng.randint(6, 16)
        words = [rng.choice(WORDS) if rng.random() < 0.6 else rng.choice(made_up) for _ in range(n)]
        words[0] = words[0].capitalize()
        lines.append(" ".join(words) + rng.choice([".", ".", ",", "?", "!", ";"]) + " " + str(rng.randint(0, 9999)))
    return lines


def tokenizer(rng):
    tok = Tokenizer(models.BPE(unk_token=None))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB,
        special_tokens=SPECIAL,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(corpus(rng), trainer=trainer)
    bos = tok.token_to_id("<s>")
    tok.post_processor = processors.TemplateProcessing(
        single="<s> $A", pair="<s> $A <s> $B", special_tokens=[("<s>", bos)]
    )
    return PreTrainedTokenizerFast(
        tokenizer_object=tok,
        bos_token="<s>",
        eos_token="</s>",
        unk_token="<unk>",
        model_max_length=MAX_POSITIONS,
        chat_template=CHAT_TEMPLATE,
    )


def main(out):
    rng = random.Random(SEED)
    torch.manual_seed(SEED)
    torch.set_num_threads(1)
    tok = tokenizer(rng)
    if len(tok) != VOCAB:
        sys.exit("the tokenizer has %d ids, not %d (the corpus is too small)" % (len(tok), VOCAB))
    config = LlamaConfig(
        vocab_size=VOCAB,
        hidden_size=HIDDEN,
        intermediate_size=FFN,
        num_hidden_layers=LAYERS,
        num_attention_heads=HEADS,
        num_key_value_heads=HEADS,
        max_position_embeddings=MAX_POSITIONS,
        bos_token_id=tok.bos_token_id,
        eos_token_id=tok.eos_token_id,
        tie_word_embeddings=False,
    )
    model = LlamaForCausalLM(config).to(torch.bfloat16)
    os.makedirs(out, exist_ok=True)
    model.save_pretrained(out, safe_serialization=True)
    tok.save_pretrained(out)
    with open(os.path.join(out, "llmspeed-tiny.json"), "w") as f:
        json.dump({"seed": SEED, "vocab_size": VOCAB, "hidden_size": HIDDEN, "layers": LAYERS}, f)
    print("wrote %s: %d ids, %d parameters" % (out, len(tok), model.num_parameters()))


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    main(sys.argv[1])
