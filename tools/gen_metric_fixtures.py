#!/usr/bin/python3
"""Score small corpora with sacreBLEU's own code: the BLEU and chrF fixtures of tests/test_metrics.c.

Usage:
    /usr/bin/python3 tools/gen_metric_fixtures.py --sacrebleu DIR [--out FILE]          # write
    /usr/bin/python3 tools/gen_metric_fixtures.py --sacrebleu DIR [--out FILE] --check  # verify
    /usr/bin/python3 tools/gen_metric_fixtures.py --sacrebleu-git GITDIR ...

DIR is a sacreBLEU source tree (a clone of https://github.com/mjpost/sacrebleu: the directory
holding the `sacrebleu` package); --sacrebleu-git takes a clone's git directory instead and
extracts HEAD with `git archive`. The package is copied to a temporary directory and imported
from there (with a `version.py` added when the tree has none, as an unbuilt checkout does), so
the metrics are sacreBLEU's code itself, not a reimplementation. It runs on Debian's python3 with
python3-regex, python3-portalocker, python3-tabulate, python3-colorama and python3-lxml.
The fixtures in tests/fixtures/metrics.tsv were written with sacreBLEU 2.6.0 (commit
f615c7286d4d) on Python 3.11; every run writes the same bytes.

Each corpus is scored with the defaults `BLEU()` and `CHRF()` (one reference stream):
`corpus_score(hyps, [refs])`, the summed segment statistics `_extract_corpus_statistics`, the
13a preprocessing `_preprocess_segment` of every line, and `str(score)`.

File format (UTF-8 text, one record per line, fields separated by TAB):
    # comment
    corpus  NAME  N            a corpus of N sentence pairs follows
    pair    HYP  REF           N times: the texts, escaped (below)
    tok     HYP  REF           N times: BLEU's tokenization of each side (rstrip + 13a)
    bleu    SCORE P1 P2 P3 P4 BP RATIO SYS_LEN REF_LEN C1 C2 C3 C4 T1 T2 T3 T4
    bleu_line TEXT             str(BLEUScore)
    chrf    SCORE H1 R1 M1 ... H6 R6 M6   (hyp, ref, match statistics of orders 1..6)
    chrf_line TEXT             str(CHRFScore)
    end
Floats are Python repr() (shortest round trip: C's strtod reads the same double). Escapes in
text fields: \\\\ for a backslash, \\t \\n \\r, \\xHH for other ASCII control bytes, \\uXXXX and
\\UXXXXXXXX for other non-printable code points (str.isprintable() false: Unicode whitespace,
format characters, C1 controls); everything else is raw UTF-8.
"""

import argparse
import os
import random
import shutil
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
DEFAULT_OUT = os.path.join(HERE, "..", "tests", "fixtures", "metrics.tsv")


def import_sacrebleu(src_dir=None, git_dir=None):
    """Import sacrebleu from a source tree (copied to a temporary directory first)."""
    tmp = tempfile.mkdtemp(prefix="sacrebleu.")
    if git_dir:
        archive = subprocess.run(["git", "--git-dir", git_dir, "archive", "HEAD", "sacrebleu"],
                                 check=True, stdout=subprocess.PIPE).stdout
        subprocess.run(["tar", "-x", "-C", tmp], input=archive, check=True)
    else:
        shutil.copytree(os.path.join(src_dir, "sacrebleu"), os.path.join(tmp, "sacrebleu"))
    version = os.path.join(tmp, "sacrebleu", "version.py")
    if not os.path.exists(version):
        with open(version, "w") as f:
            f.write('__version__ = "2.6.0"\n')
    sys.path.insert(0, tmp)
    import sacrebleu  # noqa: F401
    from sacrebleu.metrics import BLEU, CHRF
    return BLEU, CHRF


# ----- corpora ---------------------------------------------------------------------------------
def random_corpus(seed, n, words, max_len):
    """n pairs of random sentences over `words`; the reference shares some of the hypothesis."""
    rng = random.Random(seed)
    hyps, refs = [], []
    for _ in range(n):
        ref = [rng.choice(words) for _ in range(rng.randint(0, max_len))]
        hyp = [w if rng.random() < 0.6 else rng.choice(words) for w in ref]
        if rng.random() < 0.3:
            hyp = hyp[: rng.randint(0, len(hyp))]
        if rng.random() < 0.3:
            hyp += [rng.choice(words) for _ in range(rng.randint(1, 4))]
        joiner = lambda ws: "".join(w + rng.choice([" ", " ", " ", "", "  ", "\t"]) for w in ws)
        hyps.append(joiner(hyp).strip(" ") if rng.random() < 0.5 else joiner(hyp))
        refs.append(joiner(ref))
    return hyps, refs


WORDS = ["the", "The", "cat", "sat", "on", "mat", "a", "dog", ".", ",", "!", "?", "3.14",
         "1,000", "a-b", "-", "--", "e.g.", "U.S.", "it's", "(", ")", '"', "&amp;", "&quot;",
         "&lt;", "<skipped>", "Mädchen", "Straße", "über", "猫", "北京", "🍕", "é", "x.y",
         "5-3", "-5", "5.", ".5", ",a", "a,", "$", "%", "10%", "@", "#tag", "[x]", "{y}",
         "a/b", "~", "^", "_", "`", "|", ";", ":", "'", "''", "&", "<", ">", "=", "+", "*"]

LONG_WORDS = ["alpha", "beta", "gamma", "delta", "epsilon", "zeta", "eta", "theta", "iota",
              "kappa", "lambda", "mu", "nu", "xi", "omicron", "pi", "rho", "sigma", "tau"]


def corpora():
    """(name, hyps, refs) of every fixture corpus, in file order."""
    c = []

    def add(name, pairs):
        c.append((name, [h for h, _ in pairs], [r for _, r in pairs]))

    add("identical_one", [("The cat sat on the mat.", "The cat sat on the mat.")])
    add("identical_many", [("Ich bin durstig.", "Ich bin durstig."),
                           ("Das ist ein Haus.", "Das ist ein Haus."),
                           ("Wo ist der Bahnhof?", "Wo ist der Bahnhof?")])
    add("partial_match", [("The cat sat on the mat.", "The cat sat on a mat."),
                          ("There is a cat on the mat.", "A cat is on the mat.")])
    add("all_wrong", [("foo bar baz qux", "the cat sat on the mat"),
                      ("lorem ipsum", "hello world")])
    add("empty_hypothesis_only", [("", "The cat sat on the mat.")])
    add("empty_hypothesis_among", [("", "Das ist gut."), ("Das ist gut.", "Das ist gut."),
                                   ("Ein Hund bellt.", "Der Hund bellt laut.")])
    add("empty_reference", [("The cat sat on the mat.", ""), ("Das ist gut.", "Das ist gut.")])
    add("empty_reference_only", [("Something here.", "")])
    add("both_empty", [("", "")])
    add("whitespace_only", [("  \t ", " "), ("a b", "a b")])
    add("one_word_hyps", [("cat", "The cat sat."), ("Hund", "Der Hund bellt."),
                          ("nothing", "Here is something.")])
    add("one_word_both", [("cat", "cat"), ("dog", "dog")])
    add("one_word_wrong", [("cat", "dog")])
    add("clipping_unigrams", [("the the the the the the the", "The cat is on the mat.")])
    add("clipping_ngrams", [("a b a b a b a b a b", "a b a b c d"),
                            ("x x x x x", "x x y x x")])
    add("brevity_short", [("The cat", "The cat sat on the mat today."),
                          ("Ich bin", "Ich bin sehr durstig heute.")])
    add("brevity_long", [("The cat sat on the mat and then it sat on the mat again and again .",
                          "The cat sat on the mat.")])
    add("zero_bigram_matches", [("cat mat sat the", "the cat sat on the mat")])
    add("zero_trigram_matches", [("the cat on the mat sat down", "the cat sat on the mat")])
    add("zero_fourgram_only", [("a b c x b c d", "a b c d e")])
    add("no_fourgrams_in_hyps", [("the cat", "the cat sat"), ("on mat", "on the mat"),
                                 ("yes", "yes")])
    add("case_sensitive", [("THE CAT SAT ON THE MAT.", "The cat sat on the mat."),
                           ("Mädchen", "mädchen")])
    add("german_umlauts", [("Über den Fluß gehen die Mädchen schön.",
                            "Die Mädchen gehen schön über den Fluss."),
                           ("Die Straße ist nass, weil es regnet.",
                            "Die Straße ist nass, da es geregnet hat."),
                           ("Ärger über Öl und Übel.", "Ärger über Öl und Übel!")])
    add("cjk", [("我爱北京天安门。", "我爱北京。"), ("猫が好きです", "私は猫が好きです"),
                ("中文,测试.", "中文，测试。")])
    add("emoji", [("I ❤️ 🍕!", "I ❤️ 🍕 too!"), ("👨‍👩‍👧 family 🏳️‍🌈", "👨‍👩‍👧 family"),
                  ("😀😀😀", "😀😃😀")])
    add("combining_marks", [("café cafe\u0301", "café café"), ("n\u0303o", "ño")])
    add("numbers_13a", [("It costs 3.14 dollars, or 1,000 cents.",
                         "It costs 3.14 dollars or 1,000 cents."),
                        ("Pages 5-7 and 10-12.", "Pages 5 - 7 and 10-12 ."),
                        ("The year 1.000,50 and 3,5.", "The year 1.000,50 and 3,5 ."),
                        ("-5 degrees, 5- and 2.5-3.", "-5 degrees , 5 - and 2.5 - 3 .")])
    add("dash_period_rules", [("a-b c--d e.g. U.S.A. end.", "a-b c--d e.g. U.S.A. end."),
                              ("...", ". . ."), ("a..b .5 5. ,a a,b 1,a a,1", "a..b"),
                              ("x.-y 3.-4 3-.4", "x. - y"), ("v1.2.3-rc1", "v1.2.3 - rc1")])
    add("entities", [("Tom &amp; Jerry &quot;hi&quot; &lt;b&gt;",
                      'Tom & Jerry "hi" <b>'),
                     ("&amp;quot; &amp;amp; &apos; &#39; & amp;", '&quot; &amp; \' \' &'),
                     ("AT&amp;T", "AT&T")])
    add("skipped", [("<skipped>", ""), ("a <skipped> b", "a b"),
                    ("<skip<skipped>ped>", "<skipped>"), ("x<skipped>y", "xy")])
    add("newlines", [("a -\nb", "a b"), ("line one\nline two", "line one line two"),
                     ("end-\n", "end"), ("\n\n", "")])
    add("punctuation", [('"Hello," she said. (Really?) [yes] {no} it\'s rock\'n\'roll!',
                         "\"Hello\", she said (really) [yes] it's rock'n'roll!"),
                        ("!!! ??? ;;; :::", "! ? ; :"),
                        ("a/b c\\d e_f g^h i`j k|l m~n o@p q#r s$t u%v w*x y+z <=>",
                         "a / b c \\ d e _ f")])
    add("trailing_leading_space", [("  The cat sat.  \t", "The cat sat."),
                                   ("\tDas ist gut .\t\t", "Das ist gut."),
                                   ("a  b   c", "a b c")])
    add("unicode_whitespace", [("a\u00a0b\u3000c\u2028d", "a b c d"),
                               ("x\x1cy\x85z", "x y z"), ("p\u2009q\u200bq", "p q\u200bq"),
                               ("\r\nfoo\r", "foo")])
    add("control_and_nul", [("a\x00b c", "a\x00b c"), ("\x01\x7f", "\x01")])
    add("chrf_short_reference", [("abcdefgh", "abc"), ("xyz", "x")])
    add("chrf_short_hypothesis", [("ab", "abcdefgh"), ("a", "abcdef")])
    add("realistic_de", [
        ("Ich habe Durst.", "Ich bin durstig."),
        ("Mach dir keine Sorgen um mich.", "Mach dir meinetwegen keine Sorgen."),
        ("Er ist nach Hause gegangen.", "Er ist nach Hause gegangen."),
        ("Kannst du mir helfen?", "Können Sie mir helfen?"),
        ("Das Wetter ist heute schön.", "Heute ist das Wetter schön."),
        ("Wir sehen uns morgen!", "Bis morgen!")])
    rng = random.Random(7)
    long_ref = " ".join(rng.choice(LONG_WORDS) for _ in range(3000))
    long_hyp = " ".join(w if rng.random() < 0.8 else rng.choice(LONG_WORDS)
                        for w in long_ref.split())
    add("very_long_line", [(long_hyp, long_ref), (long_ref[:5000], long_ref)])
    for k, seed in enumerate([11, 12, 13]):
        hyps, refs = random_corpus(seed, 40, WORDS, 25)
        c.append((f"random_{k}", hyps, refs))
    return c


# ----- scoring and output ----------------------------------------------------------------------
def escape(s):
    out = []
    for ch in s:
        o = ord(ch)
        if ch == "\\":
            out.append("\\\\")
        elif ch == "\t":
            out.append("\\t")
        elif ch == "\n":
            out.append("\\n")
        elif ch == "\r":
            out.append("\\r")
        elif o < 0x80 and not ch.isprintable():
            out.append(f"\\x{o:02x}")
        elif ch != " " and not ch.isprintable():
            out.append(f"\\u{o:04x}" if o <= 0xFFFF else f"\\U{o:08x}")
        else:
            out.append(ch)
    return "".join(out)


def unescape(s):
    out, i = [], 0
    while i < len(s):
        if s[i] != "\\":
            out.append(s[i])
            i += 1
            continue
        t = s[i + 1]
        if t in "\\tnr":
            out.append({"\\": "\\", "t": "\t", "n": "\n", "r": "\r"}[t])
            i += 2
        else:
            width = {"x": 2, "u": 4, "U": 8}[t]
            out.append(chr(int(s[i + 2:i + 2 + width], 16)))
            i += 2 + width
    return "".join(out)


def score_lines(BLEU, CHRF, name, hyps, refs):
    bleu, chrf = BLEU(), CHRF()
    b = bleu.corpus_score(hyps, [refs])
    stats = [sum(col) for col in zip(*bleu._extract_corpus_statistics(hyps, [refs]))]
    assert stats[0] == b.sys_len and stats[1] == b.ref_len and stats[2:6] == b.counts
    ch = chrf.corpus_score(hyps, [refs])
    cstats = [sum(col) for col in zip(*chrf._extract_corpus_statistics(hyps, [refs]))]
    assert chrf._compute_f_score(cstats) == ch.score
    lines = [f"corpus\t{name}\t{len(hyps)}"]
    for h, r in zip(hyps, refs):
        lines.append(f"pair\t{escape(h)}\t{escape(r)}")
    for h, r in zip(hyps, refs):
        lines.append(f"tok\t{escape(bleu._preprocess_segment(h))}\t"
                     f"{escape(bleu._preprocess_segment(r))}")
    fields = ([b.score] + list(b.precisions) + [b.bp, b.ratio, b.sys_len, b.ref_len]
              + list(b.counts) + list(b.totals))
    lines.append("bleu\t" + "\t".join(repr(float(x)) if isinstance(x, float) else str(x)
                                      for x in fields))
    lines.append(f"bleu_line\t{escape(str(b))}")
    lines.append("chrf\t" + "\t".join([repr(float(ch.score))] + [str(x) for x in cstats]))
    lines.append(f"chrf_line\t{escape(str(ch))}")
    lines.append("end")
    return lines


def render(BLEU, CHRF):
    out = ["# BLEU and chrF fixtures scored by sacreBLEU's own code (BLEU(), CHRF() defaults).",
           "# Written by tools/gen_metric_fixtures.py (format in its docstring); do not edit."]
    for name, hyps, refs in corpora():
        for s in hyps + refs:
            assert unescape(escape(s)) == s
        out += score_lines(BLEU, CHRF, name, hyps, refs)
    return "\n".join(out) + "\n"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    src = ap.add_mutually_exclusive_group(required=True)
    src.add_argument("--sacrebleu", metavar="DIR", help="sacreBLEU source tree")
    src.add_argument("--sacrebleu-git", metavar="GITDIR", help="a sacreBLEU clone's git dir")
    ap.add_argument("--out", default=DEFAULT_OUT)
    ap.add_argument("--check", action="store_true", help="compare with --out, write nothing")
    args = ap.parse_args()
    BLEU, CHRF = import_sacrebleu(args.sacrebleu, args.sacrebleu_git)
    text = render(BLEU, CHRF)
    n = text.count("\ncorpus\t")
    if args.check:
        with open(args.out, encoding="utf-8") as f:
            same = f.read() == text
        print(f"{args.out}: {n} corpora, {'identical' if same else 'DIFFERENT'}")
        return 0 if same else 1
    with open(args.out, "w", encoding="utf-8", newline="\n") as f:
        f.write(text)
    print(f"wrote {args.out}: {n} corpora")
    return 0


if __name__ == "__main__":
    sys.exit(main())
