#!/usr/bin/env python3
"""Writes a tiny random-weight llama-architecture GGUF model for llama.cpp's llama-server.

Usage: tiny_gguf.py OUT.gguf

The model is for testing a benchmark client, not for text: 2 layers, 32-wide, F32, a
SentencePiece-style vocabulary (3 control tokens, 256 byte-fallback pieces, letters and about a
thousand English words), about 1 MB. Random weights make it emit byte pieces that are not valid UTF-8
on their own, so a server sends fewer content chunks than `usage.completion_tokens` -- a real
trap for a client that counts chunks. Deterministic: the same file every time.
"""
import sys

import numpy as np
from gguf import GGUFWriter, TokenType

from tiny_words import WORDS

N_EMBD = 32
N_HEAD = 4
N_FF = 64
N_LAYER = 2
N_CTX_TRAIN = 32768
SEED = 20261130


def vocabulary():
    tokens, scores, types = [], [], []

    def add(piece, score, kind):
        tokens.append(piece.encode("utf-8"))
        scores.append(float(score))
        types.append(int(kind))

    add("<unk>", 0.0, TokenType.UNKNOWN)
    add("<s>", 0.0, TokenType.CONTROL)
    add("</s>", 0.0, TokenType.CONTROL)
    for b in range(256):
        add("<0x%02X>" % b, 0.0, TokenType.BYTE)
    seen = set()
    pieces = []
    for ch in "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789.,:;!?'-()":
        pieces.append(ch)
        pieces.append("\u2581" + ch)
    # SentencePiece merges two adjacent pieces only into a piece of the vocabulary, so every
    # prefix of a word is a piece too (a real vocabulary holds its merge paths the same way).
    for w in WORDS:
        for word in ("\u2581" + w, "\u2581" + w.capitalize()):
            for end in range(2, len(word) + 1):
                pieces.append(word[:end])
    for suffix in ("s", "es", "ed", "ing", "ly", "er", "'s"):
        pieces.append(suffix)
    out = []
    for p in pieces:
        if p not in seen:
            seen.add(p)
            out.append(p)
    for p in out:
        # SentencePiece merges the highest-scoring piece first: prefer longer pieces.
        add(p, -1000.0 + 10.0 * len(p), TokenType.NORMAL)
    return tokens, scores, types


CHAT_TEMPLATE = (
    "{% for m in messages %}<|{{ m['role'] }}|>\n{{ m['content'] }}\n{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>\n{% endif %}"
)


def main(path):
    rng = np.random.default_rng(SEED)
    tokens, scores, types = vocabulary()
    n_vocab = len(tokens)
    w = GGUFWriter(path, "llama")
    w.add_name("llmspeed-tiny-random")
    w.add_context_length(N_CTX_TRAIN)
    w.add_embedding_length(N_EMBD)
    w.add_block_count(N_LAYER)
    w.add_feed_forward_length(N_FF)
    w.add_head_count(N_HEAD)
    w.add_head_count_kv(N_HEAD)
    w.add_rope_dimension_count(N_EMBD // N_HEAD)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_rope_freq_base(10000.0)
    w.add_file_type(0)  # all F32
    w.add_vocab_size(n_vocab)
    w.add_tokenizer_model("llama")
    w.add_token_list(tokens)
    w.add_token_scores(scores)
    w.add_token_types(types)
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)
    w.add_unk_token_id(0)
    w.add_add_bos_token(True)
    w.add_add_eos_token(False)
    w.add_chat_template(CHAT_TEMPLATE)

    def t(name, *shape, scale=0.5):
        w.add_tensor(name, (rng.standard_normal(shape) * scale).astype(np.float32))

    def ones(name, n):
        w.add_tensor(name, np.ones(n, dtype=np.float32))

    # numpy shapes are (rows, cols) = GGUF's (ne1, ne0): a matrix mapping n_in -> n_out is (n_out, n_in).
    t("token_embd.weight", n_vocab, N_EMBD)
    for i in range(N_LAYER):
        ones(f"blk.{i}.attn_norm.weight", N_EMBD)
        t(f"blk.{i}.attn_q.weight", N_EMBD, N_EMBD, scale=0.2)
        t(f"blk.{i}.attn_k.weight", N_EMBD, N_EMBD, scale=0.2)
        t(f"blk.{i}.attn_v.weight", N_EMBD, N_EMBD, scale=0.2)
        t(f"blk.{i}.attn_output.weight", N_EMBD, N_EMBD, scale=0.2)
        ones(f"blk.{i}.ffn_norm.weight", N_EMBD)
        t(f"blk.{i}.ffn_gate.weight", N_FF, N_EMBD, scale=0.2)
        t(f"blk.{i}.ffn_up.weight", N_FF, N_EMBD, scale=0.2)
        t(f"blk.{i}.ffn_down.weight", N_EMBD, N_FF, scale=0.2)
    ones("output_norm.weight", N_EMBD)
    t("output.weight", n_vocab, N_EMBD, scale=1.0)

    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    main(sys.argv[1])
