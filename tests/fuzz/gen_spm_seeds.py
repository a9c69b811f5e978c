#!/usr/bin/env python3
"""Write the fuzz_spm seeds and the hand-made regression inputs (tests/fuzz/corpus/fuzz_spm/,
tests/fuzz/regress/fuzz_spm/). Needs Python's sentencepiece (python3-sentencepiece).

Seeds: two small real models without a normalization table (so the fuzzer's inputs stay a few
KB): unigram with a user-defined symbol, and BPE with byte fallback; ids unk 0, bos 1, eos 2,
pad 3. Regressions: the unigram seed with a hand-made `precompiled_charsmap` whose double-array
trie units point far outside the table (SentencePiece 0.1.97 loads it, then crashes in the
first Encode) or just past it (a silent heap over-read). The third regression,
piece_with_nul_darts_exception (a piece starting with a NUL byte: the load throws out of
SentencePiece), was found by libFuzzer on SentencePiece directly.
"""
import io
import os
import random
import struct

import sentencepiece as spm

HERE = os.path.dirname(os.path.abspath(__file__))


def varint(v):
    o = bytearray()
    while True:
        c, v = v & 0x7F, v >> 7
        o.append(c | (0x80 if v else 0))
        if not v:
            return bytes(o)


def read_varint(b, i):
    v = s = 0
    while True:
        c = b[i]
        i += 1
        v |= (c & 0x7F) << s
        s += 7
        if not c & 0x80:
            return v, i


def train(typ, vocab, **kw):
    random.seed(1)
    de = "Grüße aus Köln schöne Äpfel über die Straße der Bär läuft schnell und müde Öl ist " \
         "heiß wir gehen nach Hause heute".split()
    en = "greetings from cologne nice apples over the street bear runs fast and tired oil is " \
         "hot we go home today 12 345".split()
    sents = [" ".join(random.choice(de if i % 2 else en) for _ in range(6)) + "."
             for i in range(400)]
    f = io.BytesIO()
    spm.SentencePieceTrainer.train(sentence_iterator=iter(sents), model_writer=f,
                                   vocab_size=vocab, model_type=typ,
                                   normalization_rule_name="identity", unk_id=0, bos_id=1,
                                   eos_id=2, pad_id=3, character_coverage=1.0, num_threads=1,
                                   minloglevel=4, **kw)
    return f.getvalue()


def with_charsmap(model, unit):
    """The model with its normalizer_spec replaced by one holding a 4-unit trie of @unit."""
    trie = struct.pack("<I", unit) * 4
    blob = struct.pack("<I", len(trie)) + trie + b"a\0"
    ns = varint((2 << 3) | 2) + varint(len(blob)) + blob
    out, i = bytearray(), 0
    while i < len(model):
        k, j = read_varint(model, i)
        n, j2 = read_varint(model, j)
        if k >> 3 != 3:
            out += model[i:j2 + n]
        i = j2 + n
    return bytes(out + varint((3 << 3) | 2) + varint(len(ns)) + ns)


def write(sub, name, data):
    d = os.path.join(HERE, sub, "fuzz_spm")
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, name), "wb") as f:
        f.write(data)


uni = train("unigram", 60, user_defined_symbols=["<sep>"])
write("corpus", "seed_unigram_identity_user_symbol.model", uni)
write("corpus", "seed_bpe_identity_byte_fallback.model", train("bpe", 330, byte_fallback=True))
write("regress", "charsmap_hostile_trie_segfault", with_charsmap(uni, 0xFFFFFC00))
write("regress", "charsmap_trie_heap_overread", with_charsmap(uni, 0x00000400))
