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

N_EMBD = 32
N_HEAD = 4
N_FF = 64
N_LAYER = 2
N_CTX_TRAIN = 32768
SEED = 20261130

# English words, many of them those of llmspeed's prompt prose, so that prompts tokenize at about
# a word a token as with a real model's vocabulary (a letters-only vocabulary would need 3x more).
WORDS = """
the a this that each every its their our one another these those many several most some few all
near beside behind beyond across along around against among between beneath above below inside
outside within without toward under over through during despite can could should may might will
would must because although while when once unless since after before whenever wherever though
however meanwhile moreover nevertheless consequently afterwards similarly instead still indeed
otherwise likewise accordingly besides thereafter nonetheless subsequently river harbour bridge
market village valley archive ledger merchant canal council charter mill orchard quarry granary
tower lantern ferry railway station workshop foundry factory school library garden meadow forest
hill coast island harvest season winter summer spring autumn storm flood drought field road path
gate wall roof window door chimney furnace engine pump valve pipe channel reservoir dam sluice
lock barge cargo crate barrel sack wagon cart horse farmer weaver baker carpenter mason smith
miner sailor captain clerk surveyor engineer teacher student physician apothecary painter
printer poet historian traveller pilgrim guard mayor judge witness treaty law tax toll fee wage
price debt loan account record map chart survey report letter diary journal pamphlet newspaper
book chapter page margin index table column figure diagram model theory method experiment
instrument measure scale balance weight clock bell compass telescope lens mirror candle lamp oil
coal timber stone brick clay glass iron copper silver tin lead salt grain wheat barley rye oat
apple pear plum cherry grape olive honey cheese bread soup stew kettle oven hearth chair bench
shelf drawer cabinet carpet curtain blanket pillow basket bucket ladder rope chain hook nail
hammer saw chisel plough sickle scythe fence hedge ditch pond well stream creek lake marsh shore
cliff cave ridge summit slope plain desert glacier cloud rain snow frost wind breeze fog mist
thunder lightning sunrise sunset shadow echo signal message rumour custom festival ceremony song
dance story legend riddle proverb argument question answer reason cause effect result outcome
purpose pattern rhythm tradition habit routine schedule calendar decade century generation
family household neighbour stranger visitor guest host servant master apprentice guild union
party faction province district parish county border frontier colony empire kingdom republic
assembly committee office department ministry agency bank company partnership venture contract
shipment voyage journey expedition route passage crossing junction corner square avenue street
alley courtyard cellar attic stair hall chamber corridor balcony terrace fountain statue
monument temple chapel cathedral abbey castle fortress barracks prison hospital orphanage
theatre museum gallery observatory laboratory warehouse dockyard lighthouse shipyard sawmill
brewery bakery tannery dairy vineyard pasture stable barn cottage manor old ancient narrow broad
quiet busy careful patient heavy light dark bright cold warm damp dry steep gentle rough smooth
hidden open crowded empty distant nearby northern southern eastern western central remote modest
grand simple complex rare common early late sudden gradual steady uneven fragile sturdy wooden
stony sandy muddy rusty golden pale deep shallow wide tall short long brief slow quick loud
silent local foreign public private formal informal official secret curious generous stubborn
clever honest humble proud anxious calm restless weary eager reluctant familiar strange ordinary
unusual practical useful costly cheap fertile barren scattered orderly chaotic seasonal annual
monthly weekly daily nightly coastal inland upland lowland rural urban industrial agricultural
commercial maritime mechanical chemical medical legal civic municipal regional national domestic
imperial ruined restored abandoned forgotten celebrated disputed neglected flooded frozen
sheltered exposed fortified painted carved woven printed written spoken detailed accurate vague
thorough partial complete uncertain reliable fragrant bitter sweet salty sour fresh stale ripe
green blue crimson amber adjust admire affect alter appear arrange arrive assist attach attract
avoid borrow build burn calculate carry change check clean clear collect compare complain
consider construct contain continue copy correct count cover cross decide defend deliver depend
describe design destroy develop discover discuss divide doubt drain dream earn enclose encourage
enjoy ensure enter establish estimate examine expand expect explain explore extend fasten fill
finish follow force form gather govern guide handle heat help hesitate hope improve include
increase inform inspect intend introduce invent join keep kill lack land last learn lend limit
link list load locate maintain manage mark melt mend mention mix move name notice obtain observe
offer order organize own paint pass perform pick place plant please point polish possess pour
practise prefer prepare present preserve press prevent print produce promise protect provide
publish pull punish push raise reach receive recognize reduce refuse regard remain remember
remove repair repeat replace request require rescue resist rest restore return reveal ruin sail
save search select separate serve settle share shelter sort start stay store strengthen study
succeed suggest supply support suppose surround suspect sweep test thank tolerate touch tour
trace trade train transport travel treat trust turn unite unload value view visit wander want
warn wash watch weigh welcome wish wonder work worry slowly quickly carefully quietly rarely
often seldom usually gradually suddenly steadily eventually finally initially previously
recently formerly largely partly mostly nearly barely hardly clearly plainly openly privately
jointly separately briefly patiently eagerly reluctantly faithfully strictly loosely roughly
precisely entirely certainly probably perhaps apparently evidently naturally frequently
regularly annually seasonally locally widely Ardmere Belcaster Corrowin Dunhallow Elsford
Fennick Galbury Harrowgate Istervale Jorwick Kelmore Lindqvist Marrowby Nethercombe Oakridge
Pellham Quarrendon Ravensholt Saltmarsh Thornbury Ullswick Varnholm Westerleigh Yarrowdale
Zennor Ashcombe Brackenfell Coldharbour Dunmarrow Eastwold Farrowmere Greystoke Hollowmead
Ivybridge Kingsweir Larkspur Millbrook Northwold Otterburn Pendlewick The reference document is
only source for task follows Read of it Understood I have read whole and rely on alone What you
like me to write Write very article based Go places people trades events by how they connect why
matter quote specific details add section questions at end Do not summarise do stop writing
until part covered
server token speed model cache prefill decode stream batch queue slot context length measure
""".split()


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
