#!/usr/bin/python3
"""Randomized differential check of tgrad's BLEU and chrF against sacreBLEU (run by hand, not CI).

Usage:
    /usr/bin/python3 tools/reference/check_metrics_random.py --sacrebleu DIR | --sacrebleu-git GITDIR
        [--lib build/libtgrad.so] [--corpora 2000] [--seed 1]

Draws random corpora from an alphabet built to hit the 13a rules and chrF's character handling
(ASCII punctuation and digits, '.', ',' and '-' next to digits, HTML entities, `<skipped>`,
newlines, every kind of Python whitespace, umlauts, CJK, emoji with ZWJ and variation
selectors, combining marks, NUL and other control characters), scores each with sacreBLEU's
`BLEU()` and `CHRF()` (imported as tests/fixtures/gen/gen_metric_fixtures.py does) and with libtgrad through
ctypes (tg_bleu_corpus, tg_chrf_corpus, tg_bleu_tokenize, the formatters), and compares:
statistics and tokenizations must be identical, scores equal to 1e-9 (the report counts how
many are bit-for-bit equal), formatted lines identical. Exit status 1 on any mismatch.
"""

import argparse
import ctypes as C
import os
import random
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..",
                                "tests", "fixtures", "gen"))
from gen_metric_fixtures import import_sacrebleu  # noqa: E402


class BleuStats(C.Structure):
    _fields_ = [("sys_len", C.c_int64), ("ref_len", C.c_int64), ("counts", C.c_int64 * 4),
                ("totals", C.c_int64 * 4), ("n_sentences", C.c_int64)]


class Bleu(C.Structure):
    _fields_ = [("score", C.c_double), ("precisions", C.c_double * 4), ("bp", C.c_double),
                ("ratio", C.c_double), ("sys_len", C.c_int64), ("ref_len", C.c_int64),
                ("counts", C.c_int64 * 4), ("totals", C.c_int64 * 4)]


class ChrfStats(C.Structure):
    _fields_ = [("hyp", C.c_int64 * 6), ("ref", C.c_int64 * 6), ("match", C.c_int64 * 6),
                ("n_sentences", C.c_int64)]


class Chrf(C.Structure):
    _fields_ = [("score", C.c_double), ("precision", C.c_double), ("recall", C.c_double),
                ("effective_order", C.c_int), ("stats", ChrfStats)]


def load_lib(path):
    lib = C.CDLL(path)
    lib.tg_ctx_new.restype = C.c_void_p
    lib.tg_ctx_free.argtypes = [C.c_void_p]
    lib.tg_ctx_message.restype = C.c_char_p
    lib.tg_ctx_message.argtypes = [C.c_void_p]
    arrays = [C.c_void_p, C.c_size_t, C.POINTER(C.c_char_p), C.POINTER(C.c_size_t),
              C.POINTER(C.c_char_p), C.POINTER(C.c_size_t)]
    lib.tg_bleu_corpus.argtypes = arrays + [C.POINTER(Bleu)]
    lib.tg_chrf_corpus.argtypes = arrays + [C.POINTER(Chrf)]
    lib.tg_bleu_tokenize.argtypes = [C.c_void_p, C.c_char_p, C.c_size_t, C.c_char_p,
                                     C.c_size_t, C.POINTER(C.c_size_t)]
    lib.tg_bleu_format.argtypes = [C.POINTER(Bleu), C.c_char_p, C.c_size_t]
    lib.tg_bleu_format.restype = C.c_size_t
    lib.tg_chrf_format.argtypes = [C.POINTER(Chrf), C.c_char_p, C.c_size_t]
    lib.tg_chrf_format.restype = C.c_size_t
    return lib


PIECES = (list("abcxyzABC") + list("0123456789") * 2 + list(".,-") * 4 +
          list("!\"#$%&'()*+/:;<=>?@[\\]^_`{|}~") +
          ["&amp;", "&quot;", "&lt;", "&gt;", "&", "amp;", "<skipped>", "<skip", "ped>",
           "-\n", "\n", "3.14", "1,000", "e.g.", "--", "...",
           " ", " ", " ", " ", " ", "\t", "\r", "\x0b", "\x0c", "\x1c", "\x1f", "\x85", "\xa0",
           "\u1680", "\u2000", "\u200a", "\u2028", "\u2029", "\u202f", "\u205f", "\u3000",
           "\u200b", "\u180e",
           "ä", "Ö", "ß", "é", "e\u0301", "猫", "北京", "。", "，", "😀", "👨\u200d👩\u200d👧",
           "❤\ufe0f", "\x00", "\x01", "\x7f", "\u0085"])
WORDS = ["the", "cat", "sat", "on", "mat", "Haus", "ist", "gut", "a", "b"]


def random_line(rng):
    kind = rng.random()
    if kind < 0.05:
        return ""
    parts = []
    for _ in range(rng.randint(1, 30)):
        parts.append(rng.choice(WORDS) if rng.random() < 0.4 else rng.choice(PIECES))
    return "".join(parts)


def random_corpus(rng):
    n = rng.randint(1, 8)
    hyps, refs = [], []
    for _ in range(n):
        ref = random_line(rng)
        r = rng.random()
        if r < 0.3:
            hyp = ref
        elif r < 0.6 and ref:  # a mutated copy
            chars = list(ref)
            for _ in range(rng.randint(1, 4)):
                i = rng.randrange(len(chars))
                chars[i] = rng.choice(PIECES)
            hyp = "".join(chars)
        else:
            hyp = random_line(rng)
        hyps.append(hyp)
        refs.append(ref)
    return hyps, refs


def c_arrays(strings):
    enc = [s.encode("utf-8") for s in strings]
    return (C.c_char_p * len(enc))(*enc), (C.c_size_t * len(enc))(*[len(e) for e in enc])


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    src = ap.add_mutually_exclusive_group(required=True)
    src.add_argument("--sacrebleu", metavar="DIR")
    src.add_argument("--sacrebleu-git", metavar="GITDIR")
    ap.add_argument("--lib", default=os.path.join(os.path.dirname(__file__), "..", "..", "build",
                                                  "libtgrad.so"))
    ap.add_argument("--corpora", type=int, default=2000)
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args()
    BLEU, CHRF = import_sacrebleu(args.sacrebleu, args.sacrebleu_git)
    lib = load_lib(args.lib)
    ctx = lib.tg_ctx_new()
    rng = random.Random(args.seed)
    bad = 0
    exact = {"bleu": 0, "chrf": 0}
    lines = 0
    buf = C.create_string_buffer(512)
    for k in range(args.corpora):
        hyps, refs = random_corpus(rng)
        bleu, chrf = BLEU(), CHRF()
        b = bleu.corpus_score(hyps, [refs])
        ch = chrf.corpus_score(hyps, [refs])
        cst = [sum(col) for col in zip(*chrf._extract_corpus_statistics(hyps, [refs]))]
        hp, hl = c_arrays(hyps)
        rp, rl = c_arrays(refs)
        tb, tc = Bleu(), Chrf()
        if lib.tg_bleu_corpus(ctx, len(hyps), hp, hl, rp, rl, C.byref(tb)) != 0 or \
                lib.tg_chrf_corpus(ctx, len(hyps), hp, hl, rp, rl, C.byref(tc)) != 0:
            print(f"corpus {k}: error {lib.tg_ctx_message(ctx)}")
            bad += 1
            continue
        problems = []
        if [tb.sys_len, tb.ref_len, list(tb.counts), list(tb.totals)] != \
                [b.sys_len, b.ref_len, b.counts, b.totals]:
            problems.append("BLEU statistics")
        if list(tc.stats.hyp) + list(tc.stats.ref) + list(tc.stats.match) != \
                cst[0::3] + cst[1::3] + cst[2::3]:
            problems.append("chrF statistics")
        for name, got, want in [("BLEU", tb.score, b.score), ("BP", tb.bp, b.bp),
                                ("ratio", tb.ratio, b.ratio), ("chrF", tc.score, ch.score)] + \
                [(f"p{n + 1}", tb.precisions[n], b.precisions[n]) for n in range(4)]:
            if abs(got - want) > 1e-9:
                problems.append(f"{name} {got!r} vs {want!r}")
        exact["bleu"] += tb.score == b.score and list(tb.precisions) == b.precisions
        exact["chrf"] += tc.score == ch.score
        lib.tg_bleu_format(C.byref(tb), buf, len(buf))
        if buf.value.decode() != str(b):
            problems.append(f"line '{buf.value.decode()}' vs '{b}'")
        lib.tg_chrf_format(C.byref(tc), buf, len(buf))
        if buf.value.decode() != str(ch):
            problems.append(f"line '{buf.value.decode()}' vs '{ch}'")
        for s in hyps + refs:
            e = s.encode("utf-8")
            out = C.create_string_buffer(2 * len(e) + 1)
            n = C.c_size_t()
            lib.tg_bleu_tokenize(ctx, e, len(e), out, len(out), C.byref(n))
            lines += 1
            if out.raw[:n.value].decode("utf-8") != bleu._preprocess_segment(s):
                problems.append(f"tokenization of {s!r}: {out.raw[:n.value]!r} vs "
                                f"{bleu._preprocess_segment(s)!r}")
        if problems:
            bad += 1
            print(f"corpus {k}: {hyps!r} / {refs!r}: " + "; ".join(problems[:4]))
    lib.tg_ctx_free(ctx)
    print(f"{args.corpora} random corpora ({lines} lines tokenized): {bad} mismatches; "
          f"scores bit-for-bit equal: BLEU {exact['bleu']}/{args.corpora}, "
          f"chrF {exact['chrf']}/{args.corpora}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
