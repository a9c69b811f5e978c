#define _POSIX_C_SOURCE 200809L
/*
 * test_metrics.c - corpus BLEU and chrF (include/tgrad_metrics.h) against sacreBLEU.
 *
 * - Fixtures: every corpus of tests/fixtures/metrics.tsv (scored by sacreBLEU 2.6.0's own code,
 *   tests/fixtures/gen/gen_metric_fixtures.py): BLEU's and chrF's statistics equal exactly, the scores,
 *   precisions, brevity penalty and ratio to 1e-9, the 13a tokenization of every line and the
 *   formatted lines character for character; streaming (one pair at a time) gives the corpus
 *   result bit for bit.
 * - The score formulas from given statistics, by hand (smoothing, brevity penalty, chrF's
 *   effective order), and statistics summed from two halves of a corpus.
 * - Errors: invalid UTF-8 on either side (side, byte offset, pair index; statistics unchanged),
 *   NULL arguments, a too small tokenizer buffer, out-of-memory at every allocation (nothing
 *   leaks, statistics unchanged), errors are run-time ones (later builders still work).
 * - Long and repetitive lines stay fast (no quadratic behaviour).
 */
#include "testutil.h"
#include "tgrad_metrics.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------------------------------------ */
/* fixture file                                                                               */
/* ------------------------------------------------------------------------------------------ */
typedef struct text {
    char *p;
    size_t n;
} text;

typedef struct corpus {
    char name[64];
    size_t n;
    text *hyp, *ref, *hyp_tok, *ref_tok;
    double bleu[8];   /* score, p1..p4, bp, ratio (and a spare) */
    int64_t bleu_i[10]; /* sys_len, ref_len, counts 1..4, totals 1..4 */
    char bleu_line[256];
    double chrf;
    int64_t chrf_st[3 * TG_CHRF_ORDER]; /* (hyp, ref, match) per order */
    char chrf_line[64];
} corpus;

#define MAX_CORPORA 128
static corpus g_corpora[MAX_CORPORA];
static int g_n_corpora;

static size_t put_utf8(uint32_t c, char *out)
{
    if (c < 0x80) {
        out[0] = (char)c;
        return 1;
    }
    if (c < 0x800) {
        out[0] = (char)(0xc0 | c >> 6);
        out[1] = (char)(0x80 | (c & 0x3f));
        return 2;
    }
    if (c < 0x10000) {
        out[0] = (char)(0xe0 | c >> 12);
        out[1] = (char)(0x80 | (c >> 6 & 0x3f));
        out[2] = (char)(0x80 | (c & 0x3f));
        return 3;
    }
    out[0] = (char)(0xf0 | c >> 18);
    out[1] = (char)(0x80 | (c >> 12 & 0x3f));
    out[2] = (char)(0x80 | (c >> 6 & 0x3f));
    out[3] = (char)(0x80 | (c & 0x3f));
    return 4;
}

/* Unescape a field (the generator's escapes) into a fresh buffer. */
static text unescape(const char *s, size_t n)
{
    text t = {malloc(n + 1), 0};
    if (!t.p) /* (called from main: no Check assertion here) */
        exit(1);
    for (size_t i = 0; i < n;) {
        if (s[i] != '\\') {
            t.p[t.n++] = s[i++];
            continue;
        }
        char k = s[i + 1];
        if (k == '\\' || k == 't' || k == 'n' || k == 'r') {
            t.p[t.n++] = k == '\\' ? '\\' : k == 't' ? '\t' : k == 'n' ? '\n' : '\r';
            i += 2;
            continue;
        }
        int w = k == 'x' ? 2 : k == 'u' ? 4 : 8;
        char hex[9];
        memcpy(hex, s + i + 2, (size_t)w);
        hex[w] = '\0';
        t.n += put_utf8((uint32_t)strtoul(hex, NULL, 16), t.p + t.n);
        i += 2 + (size_t)w;
    }
    t.p[t.n] = '\0';
    return t;
}

/* Split line (NUL-terminated, no newline) at tabs into at most max fields. */
static int split_tabs(char *line, char **f, int max)
{
    int k = 0;
    f[k++] = line;
    for (char *p = line; *p && k < max; p++)
        if (*p == '\t') {
            *p = '\0';
            f[k++] = p + 1;
        }
    return k;
}

static void load_fixtures(void)
{
    const char *path = TG_FIXTURES "/metrics.tsv";
    FILE *f = fopen(path, "rb");
    if (!f) {
        fprintf(stderr, "cannot open %s\n", path);
        exit(1);
    }
    char *line = NULL;
    size_t cap = 0;
    ssize_t len;
    corpus *c = NULL;
    size_t k_pair = 0, k_tok = 0;
    while ((len = getline(&line, &cap, f)) > 0) {
        if (line[len - 1] == '\n')
            line[--len] = '\0';
        if (line[0] == '#' || len == 0)
            continue;
        char *fl[40];
        int nf = split_tabs(line, fl, 40);
        if (!strcmp(fl[0], "corpus")) {
            if (g_n_corpora == MAX_CORPORA || nf != 3)
                exit(1);
            c = &g_corpora[g_n_corpora++];
            snprintf(c->name, sizeof c->name, "%s", fl[1]);
            c->n = (size_t)strtoul(fl[2], NULL, 10);
            c->hyp = calloc(c->n + 1, sizeof(text));
            c->ref = calloc(c->n + 1, sizeof(text));
            c->hyp_tok = calloc(c->n + 1, sizeof(text));
            c->ref_tok = calloc(c->n + 1, sizeof(text));
            k_pair = k_tok = 0;
        } else if (!strcmp(fl[0], "pair") && nf == 3 && c && k_pair < c->n) {
            c->hyp[k_pair] = unescape(fl[1], strlen(fl[1]));
            c->ref[k_pair++] = unescape(fl[2], strlen(fl[2]));
        } else if (!strcmp(fl[0], "tok") && nf == 3 && c && k_tok < c->n) {
            c->hyp_tok[k_tok] = unescape(fl[1], strlen(fl[1]));
            c->ref_tok[k_tok++] = unescape(fl[2], strlen(fl[2]));
        } else if (!strcmp(fl[0], "bleu") && nf == 18 && c) {
            for (int i = 0; i < 7; i++)
                c->bleu[i] = strtod(fl[1 + i], NULL);
            for (int i = 0; i < 10; i++)
                c->bleu_i[i] = strtoll(fl[8 + i], NULL, 10);
        } else if (!strcmp(fl[0], "bleu_line") && nf == 2 && c) {
            text t = unescape(fl[1], strlen(fl[1]));
            snprintf(c->bleu_line, sizeof c->bleu_line, "%s", t.p);
            free(t.p);
        } else if (!strcmp(fl[0], "chrf") && nf == 2 + 3 * TG_CHRF_ORDER && c) {
            c->chrf = strtod(fl[1], NULL);
            for (int i = 0; i < 3 * TG_CHRF_ORDER; i++)
                c->chrf_st[i] = strtoll(fl[2 + i], NULL, 10);
        } else if (!strcmp(fl[0], "chrf_line") && nf == 2 && c) {
            snprintf(c->chrf_line, sizeof c->chrf_line, "%s", fl[1]);
        } else if (!strcmp(fl[0], "end") && c && k_pair == c->n && k_tok == c->n) {
            c = NULL;
        } else {
            fprintf(stderr, "%s: unexpected line starting '%s'\n", path, fl[0]);
            exit(1);
        }
    }
    free(line);
    fclose(f);
}

/* Arrays of pointers and lengths for the corpus calls. */
typedef struct corpus_arrays {
    const char **hyps, **refs;
    size_t *hl, *rl;
} corpus_arrays;

static corpus_arrays arrays_of(const corpus *c)
{
    corpus_arrays a = {calloc(c->n + 1, sizeof(char *)), calloc(c->n + 1, sizeof(char *)),
                       calloc(c->n + 1, sizeof(size_t)), calloc(c->n + 1, sizeof(size_t))};
    for (size_t i = 0; i < c->n; i++) {
        a.hyps[i] = c->hyp[i].p;
        a.refs[i] = c->ref[i].p;
        a.hl[i] = c->hyp[i].n;
        a.rl[i] = c->ref[i].n;
    }
    return a;
}

static void arrays_free(corpus_arrays *a)
{
    free(a->hyps);
    free(a->refs);
    free(a->hl);
    free(a->rl);
}

#define TOL 1e-9

static void expect_close(double got, double want, const char *what, const char *name)
{
    ck_assert_msg(fabs(got - want) <= TOL, "%s: %s = %.17g, sacreBLEU %.17g", name, what, got,
                  want);
}

/* ------------------------------------------------------------------------------------------ */
/* fixtures                                                                                   */
/* ------------------------------------------------------------------------------------------ */
START_TEST(test_fixture_bleu)
{
    const corpus *c = &g_corpora[_i];
    tg_ctx *ctx = tu_ctx_new();
    corpus_arrays a = arrays_of(c);
    tg_bleu b;
    ck_assert_msg(tg_bleu_corpus(ctx, c->n, a.hyps, a.hl, a.refs, a.rl, &b) == TG_OK, "%s: %s",
                  c->name, tg_ctx_message(ctx));
    /* statistics: exact */
    ck_assert_msg(b.sys_len == c->bleu_i[0] && b.ref_len == c->bleu_i[1],
                  "%s: lengths %lld/%lld, sacreBLEU %lld/%lld", c->name, (long long)b.sys_len,
                  (long long)b.ref_len, (long long)c->bleu_i[0], (long long)c->bleu_i[1]);
    for (int n = 0; n < TG_BLEU_ORDER; n++)
        ck_assert_msg(b.counts[n] == c->bleu_i[2 + n] && b.totals[n] == c->bleu_i[6 + n],
                      "%s: order %d: %lld/%lld, sacreBLEU %lld/%lld", c->name, n + 1,
                      (long long)b.counts[n], (long long)b.totals[n],
                      (long long)c->bleu_i[2 + n], (long long)c->bleu_i[6 + n]);
    expect_close(b.score, c->bleu[0], "BLEU", c->name);
    for (int n = 0; n < TG_BLEU_ORDER; n++)
        expect_close(b.precisions[n], c->bleu[1 + n], "precision", c->name);
    expect_close(b.bp, c->bleu[5], "BP", c->name);
    expect_close(b.ratio, c->bleu[6], "ratio", c->name);
    char line[256];
    size_t len = tg_bleu_format(&b, line, sizeof line);
    ck_assert_uint_eq(len, strlen(line));
    ck_assert_msg(!strcmp(line, c->bleu_line), "%s: '%s', sacreBLEU '%s'", c->name, line,
                  c->bleu_line);

    /* streaming, one pair at a time: the same statistics, the same score bit for bit */
    tg_bleu_stats st = {0};
    for (size_t i = 0; i < c->n; i++)
        ck_assert_int_eq(tg_bleu_stats_add(ctx, &st, a.hyps[i], a.hl[i], a.refs[i], a.rl[i]),
                         TG_OK);
    ck_assert_int_eq(st.n_sentences, (int64_t)c->n);
    tg_bleu b2;
    ck_assert_int_eq(tg_bleu_stats_score(ctx, &st, &b2), TG_OK);
    ck_assert(memcmp(&b, &b2, sizeof b) == 0);
    arrays_free(&a);
    tu_ctx_free(ctx);
}
END_TEST

START_TEST(test_fixture_tokenize)
{
    const corpus *c = &g_corpora[_i];
    tg_ctx *ctx = tu_ctx_new();
    for (size_t i = 0; i < 2 * c->n; i++) {
        const text *in = i < c->n ? &c->hyp[i] : &c->ref[i - c->n];
        const text *want = i < c->n ? &c->hyp_tok[i] : &c->ref_tok[i - c->n];
        size_t cap = 2 * in->n + 1, got = 12345;
        char *out = malloc(cap);
        ck_assert_msg(tg_bleu_tokenize(ctx, in->p, in->n, out, cap, &got) == TG_OK, "%s: %s",
                      c->name, tg_ctx_message(ctx));
        ck_assert_msg(got == want->n && memcmp(out, want->p, got) == 0 && out[got] == '\0',
                      "%s line %zu: '%s', sacreBLEU '%s'", c->name, i, out, want->p);
        free(out);
    }
    tu_ctx_free(ctx);
}
END_TEST

START_TEST(test_fixture_chrf)
{
    const corpus *c = &g_corpora[_i];
    tg_ctx *ctx = tu_ctx_new();
    corpus_arrays a = arrays_of(c);
    tg_chrf r;
    ck_assert_msg(tg_chrf_corpus(ctx, c->n, a.hyps, a.hl, a.refs, a.rl, &r) == TG_OK, "%s: %s",
                  c->name, tg_ctx_message(ctx));
    for (int n = 0; n < TG_CHRF_ORDER; n++)
        ck_assert_msg(r.stats.hyp[n] == c->chrf_st[3 * n] &&
                          r.stats.ref[n] == c->chrf_st[3 * n + 1] &&
                          r.stats.match[n] == c->chrf_st[3 * n + 2],
                      "%s: order %d: hyp %lld ref %lld match %lld, sacreBLEU %lld %lld %lld",
                      c->name, n + 1, (long long)r.stats.hyp[n], (long long)r.stats.ref[n],
                      (long long)r.stats.match[n], (long long)c->chrf_st[3 * n],
                      (long long)c->chrf_st[3 * n + 1], (long long)c->chrf_st[3 * n + 2]);
    ck_assert_int_eq(r.stats.n_sentences, (int64_t)c->n);
    expect_close(r.score, c->chrf, "chrF", c->name);
    char line[64];
    tg_chrf_format(&r, line, sizeof line);
    ck_assert_msg(!strcmp(line, c->chrf_line), "%s: '%s', sacreBLEU '%s'", c->name, line,
                  c->chrf_line);

    tg_chrf_stats st = {0};
    for (size_t i = 0; i < c->n; i++)
        ck_assert_int_eq(tg_chrf_stats_add(ctx, &st, a.hyps[i], a.hl[i], a.refs[i], a.rl[i]),
                         TG_OK);
    tg_chrf r2;
    ck_assert_int_eq(tg_chrf_stats_score(ctx, &st, &r2), TG_OK);
    ck_assert(memcmp(&r, &r2, sizeof r) == 0);
    arrays_free(&a);
    tu_ctx_free(ctx);
}
END_TEST

/* ------------------------------------------------------------------------------------------ */
/* formulas by hand                                                                           */
/* ------------------------------------------------------------------------------------------ */
START_TEST(test_bleu_score_by_hand)
{
    /* counts (3, 1, 0, 0) of totals (4, 3, 2, 1), 4 tokens against 5: exp smoothing halves
     * 100 / t_n once per zero order: p = (75, 33.3.., 100 / (2 * 2), 100 / (4 * 1)). */
    tg_ctx *ctx = tu_ctx_new();
    tg_bleu_stats st = {4, 5, {3, 1, 0, 0}, {4, 3, 2, 1}, 1};
    tg_bleu b;
    ck_assert_int_eq(tg_bleu_stats_score(ctx, &st, &b), TG_OK);
    double p[4] = {75.0, 100.0 / 3.0, 25.0, 25.0};
    for (int n = 0; n < 4; n++)
        ck_assert_double_eq_tol(b.precisions[n], p[n], 1e-12);
    double bp = exp(1.0 - 5.0 / 4.0);
    ck_assert_double_eq_tol(b.bp, bp, 1e-15);
    ck_assert_double_eq_tol(b.score, bp * pow(p[0] * p[1] * p[2] * p[3], 0.25), 1e-10);
    ck_assert_double_eq_tol(b.ratio, 0.8, 1e-15);
    char line[200];
    tg_bleu_format(&b, line, sizeof line);
    ck_assert_str_eq(line, "BLEU = 27.53 75.0/33.3/25.0/25.0 (BP = 0.779 ratio = 0.800 "
                           "hyp_len = 4 ref_len = 5)");

    /* no 3-grams at all: the loop stops, log 0 = -9999999999 makes the score 0 */
    tg_bleu_stats s2 = {2, 2, {2, 1, 0, 0}, {2, 1, 0, 0}, 1};
    ck_assert_int_eq(tg_bleu_stats_score(ctx, &s2, &b), TG_OK);
    ck_assert(b.score == 0.0 && b.precisions[0] == 100.0 && b.precisions[1] == 100.0 &&
              b.precisions[2] == 0.0 && b.bp == 1.0);
    /* no match at all: score 0, all precisions 0 (sacreBLEU's early exit), BP still computed */
    tg_bleu_stats s3 = {2, 4, {0, 0, 0, 0}, {2, 1, 0, 0}, 1};
    ck_assert_int_eq(tg_bleu_stats_score(ctx, &s3, &b), TG_OK);
    ck_assert(b.score == 0.0 && b.precisions[0] == 0.0 && b.bp == exp(1.0 - 2.0));
    /* empty corpus */
    tg_bleu_stats s4 = {0};
    ck_assert_int_eq(tg_bleu_stats_score(ctx, &s4, &b), TG_OK);
    tg_bleu_format(&b, line, sizeof line);
    ck_assert_str_eq(line, "BLEU = 0.00 0.0/0.0/0.0/0.0 (BP = 1.000 ratio = 0.000 hyp_len = 0 "
                           "ref_len = 0)");
    /* hypotheses but no reference tokens: BP 1, ratio 0 */
    tg_bleu_stats s5 = {3, 0, {0}, {3, 2, 1, 0}, 1};
    ck_assert_int_eq(tg_bleu_stats_score(ctx, &s5, &b), TG_OK);
    ck_assert(b.bp == 1.0 && b.ratio == 0.0 && b.score == 0.0);
    /* refused: NULL, and statistics tg_bleu_stats_add cannot sum (b unchanged) */
    tg_bleu keep = b;
    ck_assert_int_eq(tg_bleu_stats_score(NULL, &s5, &b), TG_ERR_ARG);
    ck_assert_int_eq(tg_bleu_stats_score(ctx, NULL, &b), TG_ERR_ARG);
    tu_assert_error(ctx, TG_ERR_ARG, "tg_bleu_stats_score: st is NULL");
    ck_assert_int_eq(tg_bleu_stats_score(ctx, &s5, NULL), TG_ERR_ARG);
    static const struct {
        tg_bleu_stats st;
        const char *msg;
    } bad[] = {
        {{4, 5, {3, -1, 0, 0}, {4, 3, 2, 1}, 1}, "counts[1] = -1 is negative"},
        {{4, 5, {3, 1, 0, 0}, {4, 3, -2, 1}, 1}, "totals[2] = -2 is negative"},
        {{-4, 5, {3, 1, 0, 0}, {4, 3, 2, 1}, 1}, "sys_len = -4 is negative"},
        {{4, -5, {3, 1, 0, 0}, {4, 3, 2, 1}, 1}, "ref_len = -5 is negative"},
        {{4, 5, {3, 1, 0, 0}, {4, 3, 2, 1}, -1}, "n_sentences = -1 is negative"},
        {{4, 5, {5, 1, 0, 0}, {4, 3, 2, 1}, 1}, "counts[0] = 5 is more than totals[0] = 4"},
        {{-4, -5, {-3, -1, 0, 0}, {-4, -3, -2, -1}, 1}, "sys_len = -4 is negative"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        ck_assert_int_eq(tg_bleu_stats_score(ctx, &bad[i].st, &b), TG_ERR_ARG);
        tu_assert_error(ctx, TG_ERR_ARG, bad[i].msg);
        ck_assert(memcmp(&b, &keep, sizeof b) == 0);
    }
    /* a run-time error: the next call starts afresh */
    ck_assert_int_eq(tg_bleu_stats_score(ctx, &st, &b), TG_OK);
    ck_assert_int_eq(tg_ctx_status(ctx), TG_OK);
    ck_assert_str_eq(tg_ctx_message(ctx), "");
    tu_ctx_free(ctx);
}
END_TEST

START_TEST(test_chrf_score_by_hand)
{
    /* orders 1..3 effective (4..6 have no reference n-grams) */
    tg_ctx *ctx = tu_ctx_new();
    tg_chrf_stats st = {{10, 9, 8, 0, 0, 0}, {12, 11, 10, 0, 0, 0}, {6, 3, 1, 0, 0, 0}, 2};
    tg_chrf c;
    ck_assert_int_eq(tg_chrf_stats_score(ctx, &st, &c), TG_OK);
    double P = (6.0 / 10 + 3.0 / 9 + 1.0 / 8) / 3, R = (6.0 / 12 + 3.0 / 11 + 1.0 / 10) / 3;
    ck_assert_int_eq(c.effective_order, 3);
    ck_assert_double_eq_tol(c.precision, P, 1e-15);
    ck_assert_double_eq_tol(c.recall, R, 1e-15);
    ck_assert_double_eq_tol(c.score, 100 * 5 * P * R / (4 * P + R), 1e-12);
    char line[32];
    size_t n = tg_chrf_format(&c, line, sizeof line);
    ck_assert_uint_eq(n, strlen("chrF2 = 30.15"));
    ck_assert_str_eq(line, "chrF2 = 30.15"); /* sacreBLEU: 30.148367952522253 */
    ck_assert_double_eq_tol(c.score, 30.148367952522253, 1e-12);
    /* nothing effective, or no match: 0 */
    tg_chrf_stats z = {0};
    ck_assert_int_eq(tg_chrf_stats_score(ctx, &z, &c), TG_OK);
    ck_assert(c.score == 0.0 && c.effective_order == 0);
    tg_chrf_stats nm = {{5, 4, 3, 2, 1, 0}, {5, 4, 3, 2, 1, 0}, {0}, 1};
    ck_assert_int_eq(tg_chrf_stats_score(ctx, &nm, &c), TG_OK);
    ck_assert(c.score == 0.0 && c.effective_order == 5);
    /* truncation: snprintf semantics */
    char small[6];
    ck_assert_uint_eq(tg_chrf_format(&c, small, sizeof small), strlen("chrF2 = 0.00"));
    ck_assert_str_eq(small, "chrF2");
    ck_assert_uint_eq(tg_chrf_format(&c, NULL, 0), strlen("chrF2 = 0.00"));
    /* refused: statistics tg_chrf_stats_add cannot sum (c unchanged) */
    tg_chrf keep = c;
    static const struct {
        tg_chrf_stats st;
        const char *msg;
    } bad[] = {
        {{{10, -9, 8, 0, 0, 0}, {12, 11, 10, 0, 0, 0}, {6, 3, 1, 0, 0, 0}, 2}, "hyp[1] = -9"},
        {{{10, 9, 8, 0, 0, 0}, {12, 11, 10, 0, 0, -1}, {6, 3, 1, 0, 0, 0}, 2}, "ref[5] = -1"},
        {{{10, 9, 8, 0, 0, 0}, {12, 11, 10, 0, 0, 0}, {-6, 3, 1, 0, 0, 0}, 2}, "match[0] = -6"},
        {{{10, 9, 8, 0, 0, 0}, {12, 11, 10, 0, 0, 0}, {11, 3, 1, 0, 0, 0}, 2},
         "match[0] = 11 is more than hyp[0] = 10"},
        {{{10, 9, 8, 0, 0, 0}, {12, 2, 10, 0, 0, 0}, {6, 3, 1, 0, 0, 0}, 2},
         "match[1] = 3 is more than ref[1] = 2"},
        {{{10, 9, 8, 0, 0, 0}, {12, 11, 10, 0, 0, 0}, {6, 3, 1, 0, 0, 0}, -2},
         "n_sentences = -2 is negative"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        ck_assert_int_eq(tg_chrf_stats_score(ctx, &bad[i].st, &c), TG_ERR_ARG);
        tu_assert_error(ctx, TG_ERR_ARG, bad[i].msg);
        ck_assert(memcmp(&c, &keep, sizeof c) == 0);
    }
    ck_assert_int_eq(tg_chrf_stats_score(ctx, NULL, &c), TG_ERR_ARG);
    ck_assert_int_eq(tg_chrf_stats_score(ctx, &st, NULL), TG_ERR_ARG);
    tu_ctx_free(ctx);
}
END_TEST

/* Statistics are sums: two halves added field by field score as the whole corpus. */
START_TEST(test_stats_sum)
{
    const corpus *c = NULL;
    for (int i = 0; i < g_n_corpora; i++)
        if (g_corpora[i].n >= 10)
            c = &g_corpora[i];
    ck_assert_ptr_nonnull(c);
    tg_ctx *ctx = tu_ctx_new();
    tg_bleu_stats part[2];
    tg_chrf_stats cpart[2];
    memset(part, 0, sizeof part);
    memset(cpart, 0, sizeof cpart);
    for (size_t i = 0; i < c->n; i++) {
        int k = i % 2;
        ck_assert_int_eq(tg_bleu_stats_add(ctx, &part[k], c->hyp[i].p, c->hyp[i].n,
                                           c->ref[i].p, c->ref[i].n), TG_OK);
        ck_assert_int_eq(tg_chrf_stats_add(ctx, &cpart[k], c->hyp[i].p, c->hyp[i].n,
                                           c->ref[i].p, c->ref[i].n), TG_OK);
    }
    tg_bleu_stats s = part[0];
    s.sys_len += part[1].sys_len;
    s.ref_len += part[1].ref_len;
    for (int n = 0; n < TG_BLEU_ORDER; n++) {
        s.counts[n] += part[1].counts[n];
        s.totals[n] += part[1].totals[n];
    }
    tg_bleu b;
    ck_assert_int_eq(tg_bleu_stats_score(ctx, &s, &b), TG_OK);
    expect_close(b.score, c->bleu[0], "BLEU of the summed halves", c->name);
    tg_chrf_stats cs = cpart[0];
    for (int n = 0; n < TG_CHRF_ORDER; n++) {
        cs.hyp[n] += cpart[1].hyp[n];
        cs.ref[n] += cpart[1].ref[n];
        cs.match[n] += cpart[1].match[n];
    }
    tg_chrf cr;
    ck_assert_int_eq(tg_chrf_stats_score(ctx, &cs, &cr), TG_OK);
    expect_close(cr.score, c->chrf, "chrF of the summed halves", c->name);
    tu_ctx_free(ctx);
}
END_TEST

/* NUL-terminated strings (lengths NULL), the empty corpus. */
START_TEST(test_corpus_conveniences)
{
    tg_ctx *ctx = tu_ctx_new();
    const char *hyps[] = {"The cat sat on the mat.", "Ich bin durstig."};
    const char *refs[] = {"The cat sat on a mat.", "Ich habe Durst."};
    tg_bleu b;
    tg_chrf c;
    ck_assert_int_eq(tg_bleu_corpus(ctx, 2, hyps, NULL, refs, NULL, &b), TG_OK);
    ck_assert_int_eq(b.sys_len, 11);
    ck_assert_int_eq(b.counts[0], 8);
    ck_assert_int_eq(tg_chrf_corpus(ctx, 2, hyps, NULL, refs, NULL, &c), TG_OK);
    ck_assert_int_eq(c.stats.n_sentences, 2);
    ck_assert_int_eq(tg_bleu_corpus(ctx, 0, NULL, NULL, NULL, NULL, &b), TG_OK);
    ck_assert(b.score == 0.0 && b.sys_len == 0 && b.bp == 1.0);
    ck_assert_int_eq(tg_chrf_corpus(ctx, 0, NULL, NULL, NULL, NULL, &c), TG_OK);
    ck_assert(c.score == 0.0 && c.stats.n_sentences == 0);
    /* NULL text with length 0 is the empty string */
    tg_bleu_stats st = {0};
    ck_assert_int_eq(tg_bleu_stats_add(ctx, &st, NULL, 0, "a b", 3), TG_OK);
    ck_assert(st.sys_len == 0 && st.ref_len == 2 && st.n_sentences == 1);
    tu_ctx_free(ctx);
}
END_TEST

/* ------------------------------------------------------------------------------------------ */
/* errors                                                                                     */
/* ------------------------------------------------------------------------------------------ */
static const struct {
    const char *bytes;
    size_t n;
    size_t bad; /* offset of the first invalid sequence */
} bad_utf8[] = {
    {"ab\x80", 3, 2},               /* stray continuation byte */
    {"a\xc0\xaf", 3, 1},            /* overlong '/' */
    {"\xe0\x80\xaf", 3, 0},         /* overlong, 3 bytes */
    {"x\xed\xa0\x80y", 5, 1},       /* surrogate U+D800 */
    {"\xf4\x90\x80\x80", 4, 0},     /* U+110000 */
    {"ok \xe2\x82", 5, 3},          /* truncated euro sign */
    {"\xf5\x80\x80\x80", 4, 0},     /* invalid lead byte */
    {"\xc3\xa4\xff", 3, 2},         /* 0xff after a valid 'ä' */
};
#define N_BAD (int)(sizeof bad_utf8 / sizeof bad_utf8[0])

START_TEST(test_invalid_utf8)
{
    tg_ctx *ctx = tu_ctx_new();
    const char *good = "Das ist gut.";
    for (int side = 0; side < 2; side++) {
        const char *h = side == 0 ? bad_utf8[_i].bytes : good;
        size_t hl = side == 0 ? bad_utf8[_i].n : strlen(good);
        const char *r = side == 1 ? bad_utf8[_i].bytes : good;
        size_t rl = side == 1 ? bad_utf8[_i].n : strlen(good);
        char want[96];
        snprintf(want, sizeof want, "the %s is not valid UTF-8 at byte %zu",
                 side == 0 ? "hypothesis" : "reference", bad_utf8[_i].bad);

        tg_bleu_stats st = {7, 7, {1, 2, 3, 4}, {5, 6, 7, 8}, 1}, before = st;
        ck_assert_int_eq(tg_bleu_stats_add(ctx, &st, h, hl, r, rl), TG_ERR_ARG);
        tu_assert_error(ctx, TG_ERR_ARG, want);
        tu_assert_error(ctx, TG_ERR_ARG, "tg_bleu_stats_add: ");
        ck_assert(memcmp(&st, &before, sizeof st) == 0);

        tg_chrf_stats cs = {{1, 0, 0, 0, 0, 0}, {2, 0, 0, 0, 0, 0}, {3, 0, 0, 0, 0, 0}, 4};
        tg_chrf_stats cbefore = cs;
        ck_assert_int_eq(tg_chrf_stats_add(ctx, &cs, h, hl, r, rl), TG_ERR_ARG);
        tu_assert_error(ctx, TG_ERR_ARG, want);
        ck_assert(memcmp(&cs, &cbefore, sizeof cs) == 0);

        /* the corpus calls name the pair; out untouched */
        const char *hyps[2] = {good, h}, *refs[2] = {good, r};
        size_t hls[2] = {strlen(good), hl}, rls[2] = {strlen(good), rl};
        tg_bleu b;
        memset(&b, 0x5a, sizeof b);
        tg_bleu b0 = b;
        ck_assert_int_eq(tg_bleu_corpus(ctx, 2, hyps, hls, refs, rls, &b), TG_ERR_ARG);
        char want_pair[128];
        snprintf(want_pair, sizeof want_pair, "tg_bleu_corpus: pair 1: %s", want);
        tu_assert_error(ctx, TG_ERR_ARG, want_pair);
        ck_assert(memcmp(&b, &b0, sizeof b) == 0);
        tg_chrf c;
        ck_assert_int_eq(tg_chrf_corpus(ctx, 2, hyps, hls, refs, rls, &c), TG_ERR_ARG);
        snprintf(want_pair, sizeof want_pair, "tg_chrf_corpus: pair 1: %s", want);
        tu_assert_error(ctx, TG_ERR_ARG, want_pair);
    }
    char out[64];
    ck_assert_int_eq(tg_bleu_tokenize(ctx, bad_utf8[_i].bytes, bad_utf8[_i].n, out, sizeof out,
                                      NULL), TG_ERR_ARG);
    tu_assert_error(ctx, TG_ERR_ARG, "tg_bleu_tokenize: the text is not valid UTF-8 at byte");
    /* a run-time error: building still works, and the next call drops it */
    ck_assert_ptr_nonnull(tg_input(ctx, TG_F32, TG_DIMS(2), "x"));
    tg_bleu_stats st = {0};
    ck_assert_int_eq(tg_bleu_stats_add(ctx, &st, "a", 1, "a", 1), TG_OK);
    ck_assert_int_eq(tg_ctx_status(ctx), TG_OK);
    tu_ctx_free(ctx);
}
END_TEST

START_TEST(test_null_arguments)
{
    tg_ctx *ctx = tu_ctx_new();
    tg_bleu b;
    tg_chrf c;
    tg_bleu_stats st = {0};
    tg_chrf_stats cs = {0};
    ck_assert_int_eq(tg_bleu_stats_add(ctx, NULL, "a", 1, "a", 1), TG_ERR_ARG);
    tu_assert_error(ctx, TG_ERR_ARG, "tg_bleu_stats_add: stats is NULL");
    ck_assert_int_eq(tg_chrf_stats_add(ctx, NULL, "a", 1, "a", 1), TG_ERR_ARG);
    tu_assert_error(ctx, TG_ERR_ARG, "tg_chrf_stats_add: stats is NULL");
    ck_assert_int_eq(tg_bleu_stats_add(ctx, &st, NULL, 3, "a", 1), TG_ERR_ARG);
    tu_assert_error(ctx, TG_ERR_ARG, "the hypothesis is NULL with length 3");
    ck_assert_int_eq(tg_chrf_stats_add(ctx, &cs, "a", 1, NULL, 2), TG_ERR_ARG);
    tu_assert_error(ctx, TG_ERR_ARG, "the reference is NULL with length 2");
    const char *hyps[] = {"a", NULL}, *refs[] = {"a", "b"};
    ck_assert_int_eq(tg_bleu_corpus(ctx, 2, hyps, NULL, refs, NULL, &b), TG_ERR_ARG);
    tu_assert_error(ctx, TG_ERR_ARG, "tg_bleu_corpus: pair 1: the hypothesis is NULL");
    ck_assert_int_eq(tg_chrf_corpus(ctx, 2, refs, NULL, hyps, NULL, &c), TG_ERR_ARG);
    tu_assert_error(ctx, TG_ERR_ARG, "tg_chrf_corpus: pair 1: the reference is NULL");
    ck_assert_int_eq(tg_bleu_corpus(ctx, 1, NULL, NULL, refs, NULL, &b), TG_ERR_ARG);
    tu_assert_error(ctx, TG_ERR_ARG, "tg_bleu_corpus: hyps is NULL");
    ck_assert_int_eq(tg_chrf_corpus(ctx, 1, hyps, NULL, NULL, NULL, &c), TG_ERR_ARG);
    tu_assert_error(ctx, TG_ERR_ARG, "tg_chrf_corpus: refs is NULL");
    ck_assert_int_eq(tg_bleu_corpus(ctx, 1, hyps, NULL, refs, NULL, NULL), TG_ERR_ARG);
    tu_assert_error(ctx, TG_ERR_ARG, "tg_bleu_corpus: out is NULL");
    ck_assert_int_eq(tg_bleu_tokenize(ctx, NULL, 1, NULL, 0, NULL), TG_ERR_ARG);
    tu_assert_error(ctx, TG_ERR_ARG, "tg_bleu_tokenize: text is NULL with length 1");
    ck_assert_int_eq(tg_bleu_tokenize(ctx, "a", 1, NULL, 5, NULL), TG_ERR_ARG);
    tu_assert_error(ctx, TG_ERR_ARG, "out is NULL with capacity 5");
    /* formatters */
    char buf[4] = "xyz";
    ck_assert_uint_eq(tg_bleu_format(NULL, buf, sizeof buf), 0);
    ck_assert_str_eq(buf, "");
    ck_assert_uint_eq(tg_chrf_format(NULL, NULL, 0), 0);
    /* a NULL context: the status only */
    ck_assert_int_eq(tg_bleu_stats_add(NULL, &st, "a", 1, "a", 1), TG_ERR_ARG);
    ck_assert_int_eq(tg_chrf_stats_add(NULL, &cs, "a", 1, "a", 1), TG_ERR_ARG);
    ck_assert_int_eq(tg_bleu_corpus(NULL, 0, NULL, NULL, NULL, NULL, &b), TG_ERR_ARG);
    ck_assert_int_eq(tg_chrf_corpus(NULL, 0, NULL, NULL, NULL, NULL, &c), TG_ERR_ARG);
    ck_assert_int_eq(tg_bleu_tokenize(NULL, "a", 1, buf, sizeof buf, NULL), TG_ERR_ARG);
    ck_assert(st.n_sentences == 0 && cs.n_sentences == 0);
    tu_ctx_free(ctx);
}
END_TEST

START_TEST(test_tokenize_buffer)
{
    tg_ctx *ctx = tu_ctx_new();
    const char *s = "Hello, world! (3.14)";
    const char *want = "Hello , world ! ( 3.14 )";
    char out[64];
    memset(out, 'z', sizeof out);
    size_t n = 0;
    ck_assert_int_eq(tg_bleu_tokenize(ctx, s, strlen(s), out, strlen(want), &n), TG_ERR_ARG);
    ck_assert_uint_eq(n, strlen(want));
    tu_assert_error(ctx, TG_ERR_ARG, "output buffer of 24 bytes, 25 needed");
    ck_assert_int_eq(out[0], 'z');
    ck_assert_int_eq(tg_bleu_tokenize(ctx, s, strlen(s), NULL, 0, &n), TG_ERR_ARG);
    ck_assert_uint_eq(n, strlen(want));
    ck_assert_int_eq(tg_bleu_tokenize(ctx, s, strlen(s), out, strlen(want) + 1, &n), TG_OK);
    ck_assert_str_eq(out, want);
    /* the documented bound: 2 * len bytes + NUL, reached by a line of punctuation */
    const char *p = "!!!!!!!!";
    ck_assert_int_eq(tg_bleu_tokenize(ctx, p, 8, out, 17, &n), TG_OK);
    ck_assert_uint_eq(n, 15);
    ck_assert_str_eq(out, "! ! ! ! ! ! ! !");
    ck_assert_int_eq(tg_bleu_tokenize(ctx, "", 0, out, 1, &n), TG_OK);
    ck_assert_uint_eq(n, 0);
    ck_assert_str_eq(out, "");
    tu_ctx_free(ctx);
}
END_TEST

/* Out of memory at every allocation of each call: the status, nothing leaked, the statistics
 * unchanged; with enough budget the call succeeds. */
START_TEST(test_out_of_memory)
{
    const char *h = "Die Straße ist nass, weil es regnet.";
    const char *r = "Die Straße ist nass, da es geregnet hat.";
    for (int which = 0; which < 3; which++) {
        bool ok = false;
        for (long budget = 0; budget < 40 && !ok; budget++) {
            tu_failing_alloc fa = {-1, 0, 0};
            tg_allocator al = tu_failing_allocator(&fa);
            tg_ctx *ctx = tg_ctx_new_with(&al);
            ck_assert_ptr_nonnull(ctx);
            size_t bytes = tg_ctx_bytes(ctx);
            fa.budget = budget;
            tg_status s;
            if (which == 0) {
                tg_bleu_stats st = {0}, zero = {0};
                s = tg_bleu_stats_add(ctx, &st, h, strlen(h), r, strlen(r));
                if (s != TG_OK)
                    ck_assert(memcmp(&st, &zero, sizeof st) == 0);
                else
                    ck_assert_int_eq(st.sys_len, 9); /* ... nass , weil es regnet . */
            } else if (which == 1) {
                tg_chrf_stats st = {0}, zero = {0};
                s = tg_chrf_stats_add(ctx, &st, h, strlen(h), r, strlen(r));
                if (s != TG_OK)
                    ck_assert(memcmp(&st, &zero, sizeof st) == 0);
            } else {
                char out[128];
                s = tg_bleu_tokenize(ctx, h, strlen(h), out, sizeof out, NULL);
            }
            if (s == TG_OK) {
                ok = true;
            } else {
                ck_assert_int_eq(s, TG_ERR_NOMEM);
                tu_assert_error(ctx, TG_ERR_NOMEM, NULL);
            }
            ck_assert_uint_eq(tg_ctx_bytes(ctx), bytes);
            fa.budget = -1;
            /* a run-time error: the context still builds */
            ck_assert_ptr_nonnull(tg_input(ctx, TG_F32, TG_DIMS(1), "x"));
            tg_ctx_free(ctx);
            ck_assert_int_eq(fa.n_alloc, fa.n_free);
        }
        ck_assert_msg(ok, "call %d never succeeded", which);
    }
}
END_TEST

/* A long line of one repeated character or token (worst case for clipping and sorting) and a
 * long random line: linear-logarithmic, well within the test's time. */
START_TEST(test_long_lines)
{
    tg_ctx *ctx = tu_ctx_new();
    size_t n = 400000;
    char *a = malloc(n), *w = malloc(n);
    memset(a, 'a', n);
    for (size_t i = 0; i < n; i++)
        w[i] = i % 2 ? ' ' : 'x';
    tg_chrf_stats cs = {0};
    ck_assert_int_eq(tg_chrf_stats_add(ctx, &cs, a, n, a, n / 2), TG_OK);
    for (int k = 0; k < TG_CHRF_ORDER; k++) {
        ck_assert_int_eq(cs.hyp[k], (int64_t)(n - (size_t)k));
        ck_assert_int_eq(cs.match[k], (int64_t)(n / 2 - (size_t)k));
    }
    tg_bleu_stats st = {0};
    ck_assert_int_eq(tg_bleu_stats_add(ctx, &st, w, n, w, n / 4), TG_OK);
    ck_assert_int_eq(st.sys_len, (int64_t)(n / 2));
    ck_assert_int_eq(st.ref_len, (int64_t)(n / 8));
    ck_assert_int_eq(st.counts[3], (int64_t)(n / 8 - 3));
    uint64_t x = 42;
    for (size_t i = 0; i < n; i++) {
        x = x * 6364136223846793005ULL + 1442695040888963407ULL;
        a[i] = " .,-abc0123!&"[(x >> 33) % 13];
    }
    ck_assert_int_eq(tg_bleu_stats_add(ctx, &st, a, n, a + 1, n - 1), TG_OK);
    ck_assert_int_eq(tg_chrf_stats_add(ctx, &cs, a, n, a + 1, n - 1), TG_OK);
    free(a);
    free(w);
    tu_ctx_free(ctx);
}
END_TEST

/* tg_word_run: runs of equal 13a word tokens; punctuation is not a word. */
START_TEST(test_word_run)
{
    tg_ctx *ctx = tu_ctx_new();
    static const struct {
        const char *text;
        int64_t run;
    } cases[] = {
        {"Ich bin ein dritten dritten dritten.", 3},
        {"Ich bin ein dritten dritten dritten dritten", 4},
        {"dritten dritten, dritten", 2},
        {"Ha, ha, ha!", 1},
        {"Über Über Über alles", 3},
        {"Mein Glückwunsch an ...!", 1},
        {"... ... ... !!!", 0},
        {"— — —", 0},
        {"", 0},
        {"   ", 0},
        {"a b a b a b", 1},
        {"7 7 7", 3},
        {"zweiten zweiten zweiten … Welt.", 3},
        {"Die die die", 2}, /* case kept, as BLEU's */
        {"€ € € ♪ ♪ ♪ \xef\xbf\xbd \xef\xbf\xbd \xef\xbf\xbd", 0}, /* symbols, U+FFFD */
        {"日本 日本 日本", 3},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        int64_t run = -1;
        ck_assert_int_eq(tg_word_run(ctx, cases[i].text, strlen(cases[i].text), &run), TG_OK);
        ck_assert_msg(run == cases[i].run, "'%s': run %lld, want %lld", cases[i].text,
                      (long long)run, (long long)cases[i].run);
    }
    int64_t run;
    ck_assert_int_eq(tg_word_run(ctx, "caf\xe9 caf\xe9", 9, &run), TG_ERR_ARG);
    tu_assert_error(ctx, TG_ERR_ARG, "UTF-8");
    ck_assert_int_eq(tg_word_run(ctx, "a", 1, NULL), TG_ERR_ARG);
    ck_assert_int_eq(tg_word_run(ctx, NULL, 3, &run), TG_ERR_ARG);
    ck_assert_int_eq(tg_word_run(NULL, "a", 1, &run), TG_ERR_ARG);
}
END_TEST

int main(void)
{
    load_fixtures();
    Suite *s = suite_create("metrics");

    TCase *tc = tcase_create("sacrebleu_fixtures");
    tcase_set_timeout(tc, 60);
    tcase_add_checked_fixture(tc, NULL, tu_ctx_teardown);
    tcase_add_loop_test(tc, test_fixture_bleu, 0, g_n_corpora);
    tcase_add_loop_test(tc, test_fixture_tokenize, 0, g_n_corpora);
    tcase_add_loop_test(tc, test_fixture_chrf, 0, g_n_corpora);
    tcase_add_test(tc, test_stats_sum);
    suite_add_tcase(s, tc);

    tc = tcase_create("formulas");
    tcase_add_checked_fixture(tc, NULL, tu_ctx_teardown);
    tcase_add_test(tc, test_bleu_score_by_hand);
    tcase_add_test(tc, test_chrf_score_by_hand);
    tcase_add_test(tc, test_corpus_conveniences);
    tcase_add_test(tc, test_word_run);
    suite_add_tcase(s, tc);

    tc = tcase_create("errors");
    tcase_set_timeout(tc, 60);
    tcase_add_checked_fixture(tc, NULL, tu_ctx_teardown);
    tcase_add_loop_test(tc, test_invalid_utf8, 0, N_BAD);
    tcase_add_test(tc, test_null_arguments);
    tcase_add_test(tc, test_tokenize_buffer);
    tcase_add_test(tc, test_out_of_memory);
    tcase_add_test(tc, test_long_lines);
    suite_add_tcase(s, tc);
    return tu_run(s);
}
