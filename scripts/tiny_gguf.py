#!/usr/bin/env python3
"""Writes a tiny random-weight llama-architecture GGUF model for llama.cpp's llama-server.

Usage: tiny_gguf.py OUT.gguf

The model is for testing a benchmark client, not for text: 2 layers, 64-wide, F32, a
SentencePiece-style vocabulary of 679 tokens (3 control tokens, 256 byte-fallback pieces and
420 word pieces), about 0.9 MB. Random weights make it emit byte pieces that are not valid UTF-8
on their own, so a server sends fewer content chunks than `usage.completion_tokens` -- a real
trap for a client that counts chunks. Deterministic: the same file every time.
"""
import sys

import numpy as np
from gguf import GGUFWriter, TokenType

N_EMBD = 64
N_HEAD = 4
N_FF = 128
N_LAYER = 2
N_CTX_TRAIN = 32768
SEED = 20261130

WORDS = (
    "the of and to in a is that for it as was with be by on not he this are or his from at which "
    "but have an they you were her she there one all we their been has when who will more no if "
    "out so said what up its about into than them can only other new some could time these two "
    "may then do first any my now such like our over man me even most made after also did many "
    "before must through back years where much your way well down should because each just those "
    "people how too little state good very make world still own see men work long get here "
    "between both life being under never day same another know while last might us great old "
    "year off come since against go came right used take three server token speed model cache "
    "prefill decode stream batch queue slot context length measure tokens second latency"
).split()


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
    for w in WORDS:
        pieces.append("\u2581" + w)
    for a in "aeiou":
        for b in "nrstl":
            pieces.append(a + b)
            pieces.append(b + a)
    out = []
    for p in pieces:
        if p not in seen:
            seen.add(p)
            out.append(p)
    out = out[:420]
    while len(out) < 420:
        out.append("\u2581w%d" % len(out))
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
