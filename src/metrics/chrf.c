/*
 * chrf.c - corpus chrF (Popović 2015) exactly as sacreBLEU 2.x's CHRF() computes it with its
 * defaults (Post 2018): character n-grams for n = 1..6 of each line with every whitespace code
 * point removed, mixed case, no word n-grams (chrF, not chrF++), beta = 2, statistics summed
 * over the corpus, then precision and recall averaged over the "effective" orders before one
 * F-score (eps_smoothing=False).
 */
#include "metrics.h"

#include <stdio.h>
#include <string.h>

/* Decode one side and drop its whitespace: a fresh buffer *out (len entries, to tg__free) and
 * its code-point count *n. */
static tg_status decode_strip(tg_ctx *ctx, const char *s, size_t len, uint32_t **out, size_t *n,
                              const char *fn, int64_t pair, const char *side)
{
    size_t bad = 0;
    *out = NULL;
    uint32_t *a = tg__metric_alloc(ctx, len, sizeof *a, fn);
    if (!a)
        return TG_ERR_NOMEM;
    size_t k = tg__utf8_decode(s, len, a, &bad);
    if (k == SIZE_MAX) {
        tg__free(ctx, a);
        return tg__metric_bad_utf8(ctx, fn, pair, side, bad);
    }
    size_t w = 0; /* ''.join(line.split()) */
    for (size_t i = 0; i < k; i++)
        if (!tg__py_space(a[i]))
            a[w++] = a[i];
    *out = a;
    *n = w;
    return TG_OK;
}

/* Statistics of one pair into *d. */
static tg_status pair_stats(tg_ctx *ctx, const char *hyp, size_t hyp_len, const char *ref,
                            size_t ref_len, const char *fn, int64_t pair, tg_chrf_stats *d)
{
    tg_status st;
    uint32_t *h = NULL, *r = NULL;
    size_t *idx = NULL, *tmp = NULL, hn = 0, rn = 0;
    if ((st = decode_strip(ctx, hyp, hyp_len, &h, &hn, fn, pair, "hypothesis")) != TG_OK ||
        (st = decode_strip(ctx, ref, ref_len, &r, &rn, fn, pair, "reference")) != TG_OK)
        goto done;
    st = TG_ERR_NOMEM;
    if (!(idx = tg__metric_alloc(ctx, hn + rn, sizeof *idx, fn)) ||
        !(tmp = tg__metric_alloc(ctx, hn + rn, sizeof *tmp, fn)))
        goto done;
    memset(d, 0, sizeof *d);
    tg__ngram_match(h, hn, r, rn, TG_CHRF_ORDER, idx, tmp, d->match);
    for (size_t n = 1; n <= TG_CHRF_ORDER; n++) {
        int64_t nh = hn >= n ? (int64_t)(hn - n + 1) : 0, nr = rn >= n ? (int64_t)(rn - n + 1) : 0;
        d->hyp[n - 1] = nr > 0 ? nh : 0; /* sacreBLEU: `hyp_count if ref_ngrams else 0` */
        d->ref[n - 1] = nr;
    }
    d->n_sentences = 1;
    st = TG_OK;
done:
    tg__free(ctx, h);
    tg__free(ctx, r);
    tg__free(ctx, idx);
    tg__free(ctx, tmp);
    return st;
}

/* st += d, all or nothing. */
static tg_status stats_sum(tg_ctx *ctx, tg_chrf_stats *st, const tg_chrf_stats *d,
                           const char *fn)
{
    tg_chrf_stats s;
    bool ok = tg__add_i64(st->n_sentences, d->n_sentences, &s.n_sentences);
    for (int n = 0; n < TG_CHRF_ORDER; n++)
        ok = ok && tg__add_i64(st->hyp[n], d->hyp[n], &s.hyp[n]) &&
             tg__add_i64(st->ref[n], d->ref[n], &s.ref[n]) &&
             tg__add_i64(st->match[n], d->match[n], &s.match[n]);
    if (!ok) {
        tg__err(ctx, TG_ERR_ARG, fn, "the statistics would overflow int64 (or are negative)");
        return TG_ERR_ARG;
    }
    *st = s;
    return TG_OK;
}

static tg_status chrf_add(tg_ctx *ctx, tg_chrf_stats *st, const char *hyp, size_t hyp_len,
                          const char *ref, size_t ref_len, const char *fn, int64_t pair)
{
    if (!st) {
        tg__err(ctx, TG_ERR_ARG, fn, "stats is NULL");
        return TG_ERR_ARG;
    }
    if ((!hyp && hyp_len) || (!ref && ref_len)) {
        const char *side = !hyp && hyp_len ? "hypothesis" : "reference";
        if (pair >= 0)
            tg__err(ctx, TG_ERR_ARG, fn, "pair %lld: the %s is NULL", (long long)pair, side);
        else
            tg__err(ctx, TG_ERR_ARG, fn, "the %s is NULL with length %zu", side,
                    !hyp && hyp_len ? hyp_len : ref_len);
        return TG_ERR_ARG;
    }
    tg_chrf_stats d;
    tg_status s = pair_stats(ctx, hyp, hyp_len, ref, ref_len, fn, pair, &d);
    return s != TG_OK ? s : stats_sum(ctx, st, &d, fn);
}

tg_status tg_chrf_stats_add(tg_ctx *ctx, tg_chrf_stats *st, const char *hyp, size_t hyp_len,
                            const char *ref, size_t ref_len)
{
    if (!ctx)
        return TG_ERR_ARG;
    tg__io_enter(ctx);
    tg_status s = chrf_add(ctx, st, hyp, hyp_len, ref, ref_len, "tg_chrf_stats_add", -1);
    tg__io_leave(ctx);
    return s;
}

/* sacreBLEU's CHRF._compute_f_score, eps_smoothing=False, in its order of operations. */
static void chrf_score(const tg_chrf_stats *st, tg_chrf *out)
{
    tg_chrf c;
    memset(&c, 0, sizeof c);
    c.stats = *st;
    const double factor = (double)TG_CHRF_BETA * TG_CHRF_BETA;
    double avg_prec = 0.0, avg_rec = 0.0;
    int eff = 0;
    for (int i = 0; i < TG_CHRF_ORDER; i++) {
        int64_t n_hyp = st->hyp[i], n_ref = st->ref[i], n_match = st->match[i];
        if (n_hyp > 0 && n_ref > 0) {
            avg_prec += (double)n_match / (double)n_hyp;
            avg_rec += (double)n_match / (double)n_ref;
            eff++;
        }
    }
    if (eff == 0) {
        avg_prec = avg_rec = 0.0;
    } else {
        avg_prec /= eff;
        avg_rec /= eff;
    }
    c.precision = avg_prec;
    c.recall = avg_rec;
    c.effective_order = eff;
    if (avg_prec + avg_rec != 0.0) {
        double score = (1 + factor) * avg_prec * avg_rec;
        score /= factor * avg_prec + avg_rec;
        c.score = 100 * score;
    }
    *out = c;
}

tg_status tg_chrf_stats_score(tg_ctx *ctx, const tg_chrf_stats *st, tg_chrf *out)
{
    static const char *fn = "tg_chrf_stats_score";
    if (!ctx)
        return TG_ERR_ARG;
    tg__begin(ctx);
    if (!st || !out) {
        tg__run_err(ctx, TG_ERR_ARG, fn, "%s is NULL", !st ? "st" : "out");
        return TG_ERR_ARG;
    }
    /* what tg_chrf_stats_add sums: nothing negative, no more matches than n-grams */
    if (st->n_sentences < 0) {
        tg__run_err(ctx, TG_ERR_ARG, fn, "n_sentences = %lld is negative (not statistics "
                    "tg_chrf_stats_add sums)", (long long)st->n_sentences);
        return TG_ERR_ARG;
    }
    for (int n = 0; n < TG_CHRF_ORDER; n++) {
        const char *neg = st->hyp[n] < 0 ? "hyp" : st->ref[n] < 0 ? "ref"
                          : st->match[n] < 0 ? "match" : NULL;
        if (neg) {
            int64_t v = st->hyp[n] < 0 ? st->hyp[n] : st->ref[n] < 0 ? st->ref[n] : st->match[n];
            tg__run_err(ctx, TG_ERR_ARG, fn, "%s[%d] = %lld is negative (not statistics "
                        "tg_chrf_stats_add sums)", neg, n, (long long)v);
            return TG_ERR_ARG;
        }
        if (st->match[n] > st->hyp[n] || st->match[n] > st->ref[n]) {
            bool h = st->match[n] > st->hyp[n];
            tg__run_err(ctx, TG_ERR_ARG, fn, "match[%d] = %lld is more than %s[%d] = %lld "
                        "(not statistics tg_chrf_stats_add sums)", n, (long long)st->match[n],
                        h ? "hyp" : "ref", n, (long long)(h ? st->hyp[n] : st->ref[n]));
            return TG_ERR_ARG;
        }
    }
    chrf_score(st, out);
    return TG_OK;
}

/* tg__metric_corpus's view of chrf_add. */
static tg_status chrf_add_any(tg_ctx *ctx, void *st, const char *hyp, size_t hyp_len,
                          const char *ref, size_t ref_len, const char *fn, int64_t pair)
{
    return chrf_add(ctx, (tg_chrf_stats *)st, hyp, hyp_len, ref, ref_len, fn, pair);
}

tg_status tg_chrf_corpus(tg_ctx *ctx, size_t n, const char *const *hyps, const size_t *hyp_lens,
                         const char *const *refs, const size_t *ref_lens, tg_chrf *out)
{
    if (!ctx)
        return TG_ERR_ARG;
    tg__io_enter(ctx);
    tg_chrf_stats st;
    memset(&st, 0, sizeof st);
    tg_status s = tg__metric_corpus(ctx, "tg_chrf_corpus", n, hyps, hyp_lens, refs, ref_lens,
                                    out != NULL, &st, chrf_add_any);
    if (s == TG_OK)
        chrf_score(&st, out);
    tg__io_leave(ctx);
    return s;
}

size_t tg_chrf_format(const tg_chrf *c, char *buf, size_t size)
{
    if (!c) {
        if (buf && size)
            buf[0] = '\0';
        return 0;
    }
    int k = snprintf(buf, size, "chrF%d = %.2f", TG_CHRF_BETA, c->score);
    return k < 0 ? 0 : (size_t)k;
}
