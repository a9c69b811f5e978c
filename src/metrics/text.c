/*
 * text.c - what BLEU and chrF share: UTF-8 to code points, scratch memory, a merge sort, and
 * clipped n-gram statistics (the "modified n-gram precision" numerator of Papineni et al.
 * 2002, which chrF uses for character n-grams).
 */
#include "metrics.h"

#include "io/io.h"

#include <string.h>

size_t tg__utf8_decode(const char *s, size_t n, uint32_t *out, size_t *bad)
{
    const unsigned char *p = (const unsigned char *)s;
    size_t i = 0, k = 0;
    while (i < n) {
        size_t len = tg__utf8_len(p + i, n - i);
        if (len == 0) {
            *bad = i;
            return SIZE_MAX;
        }
        uint32_t c = len == 1 ? p[i] : (uint32_t)p[i] & (0x7fu >> len);
        for (size_t j = 1; j < len; j++)
            c = c << 6 | (p[i + j] & 0x3fu);
        out[k++] = c;
        i += len;
    }
    return k;
}

size_t tg__utf8_encode(uint32_t c, unsigned char *out)
{
    if (c < 0x80) {
        out[0] = (unsigned char)c;
        return 1;
    }
    if (c < 0x800) {
        out[0] = (unsigned char)(0xc0 | c >> 6);
        out[1] = (unsigned char)(0x80 | (c & 0x3f));
        return 2;
    }
    if (c < 0x10000) {
        out[0] = (unsigned char)(0xe0 | c >> 12);
        out[1] = (unsigned char)(0x80 | (c >> 6 & 0x3f));
        out[2] = (unsigned char)(0x80 | (c & 0x3f));
        return 3;
    }
    out[0] = (unsigned char)(0xf0 | c >> 18);
    out[1] = (unsigned char)(0x80 | (c >> 12 & 0x3f));
    out[2] = (unsigned char)(0x80 | (c >> 6 & 0x3f));
    out[3] = (unsigned char)(0x80 | (c & 0x3f));
    return 4;
}

tg_status tg__metric_bad_utf8(tg_ctx *ctx, const char *fn, int64_t pair, const char *side,
                              size_t bad)
{
    if (pair >= 0)
        tg__err(ctx, TG_ERR_ARG, fn, "pair %lld: the %s is not valid UTF-8 at byte %zu",
                (long long)pair, side, bad);
    else
        tg__err(ctx, TG_ERR_ARG, fn, "the %s is not valid UTF-8 at byte %zu", side, bad);
    return TG_ERR_ARG;
}

void *tg__metric_alloc(tg_ctx *ctx, size_t n, size_t es, const char *fn)
{
    size_t bytes;
    if (!tg__mul_size(n ? n : 1, es, &bytes))
        return tg__err(ctx, TG_ERR_NOMEM, fn, "scratch of %zu x %zu bytes is too large", n, es);
    return tg__alloc(ctx, bytes, fn);
}

void tg__msort(size_t *a, size_t n, size_t *tmp, int (*cmp)(const void *c, size_t x, size_t y),
               const void *c)
{
    size_t *src = a, *dst = tmp;
    for (size_t w = 1; w < n; w *= 2) {
        for (size_t lo = 0; lo < n; lo += 2 * w) {
            size_t mid = lo + w < n ? lo + w : n, hi = lo + 2 * w < n ? lo + 2 * w : n;
            size_t i = lo, j = mid, k = lo;
            while (i < mid && j < hi)
                dst[k++] = cmp(c, src[j], src[i]) < 0 ? src[j++] : src[i++];
            while (i < mid)
                dst[k++] = src[i++];
            while (j < hi)
                dst[k++] = src[j++];
        }
        size_t *t = src;
        src = dst;
        dst = t;
    }
    if (src != a)
        memcpy(a, src, n * sizeof *a);
}

/* Both sequences seen as one list of positions: entry e < hn is h[e..], else r[e - hn..]. */
typedef struct ngram_seqs {
    const uint32_t *h, *r;
    size_t hn, rn;
    size_t order; /* symbols compared */
} ngram_seqs;

static const uint32_t *ngram_at(const ngram_seqs *s, size_t e, size_t *rest)
{
    if (e < s->hn) {
        *rest = s->hn - e;
        return s->h + e;
    }
    *rest = s->rn - (e - s->hn);
    return s->r + (e - s->hn);
}

/* Order of the next `order` symbols (a rest shorter than that compares as the shorter string). */
static int ngram_cmp(const void *c, size_t x, size_t y)
{
    const ngram_seqs *s = c;
    size_t nx, ny;
    const uint32_t *px = ngram_at(s, x, &nx), *py = ngram_at(s, y, &ny);
    size_t kx = nx < s->order ? nx : s->order, ky = ny < s->order ? ny : s->order;
    size_t k = kx < ky ? kx : ky;
    for (size_t i = 0; i < k; i++)
        if (px[i] != py[i])
            return px[i] < py[i] ? -1 : 1;
    return kx < ky ? -1 : kx > ky;
}

void tg__ngram_match(const uint32_t *h, size_t hn, const uint32_t *r, size_t rn, int max_order,
                     size_t *idx, size_t *tmp, int64_t *match)
{
    ngram_seqs s = {h, r, hn, rn, (size_t)max_order};
    size_t total = hn + rn;
    for (size_t e = 0; e < total; e++)
        idx[e] = e;
    tg__msort(idx, total, tmp, ngram_cmp, &s);
    for (int n = 1; n <= max_order; n++) {
        /* Equal n-grams are adjacent in the order above; positions with fewer than n symbols
         * left sort before every n-gram they are a prefix of, never inside a run. */
        int64_t m = 0, ch = 0, cr = 0;
        const uint32_t *head = NULL;
        for (size_t i = 0; i < total; i++) {
            size_t rest;
            const uint32_t *p = ngram_at(&s, idx[i], &rest);
            if (rest < (size_t)n)
                continue;
            if (!head || memcmp(head, p, (size_t)n * sizeof *p) != 0) {
                m += ch < cr ? ch : cr;
                head = p;
                ch = cr = 0;
            }
            if (idx[i] < hn)
                ch++;
            else
                cr++;
        }
        m += ch < cr ? ch : cr;
        match[n - 1] = m;
    }
}

/* The pair's text and length from the corpus arrays. */
static const char *corpus_item(const char *const *v, const size_t *lens, size_t i, size_t *len)
{
    *len = lens ? lens[i] : v[i] ? strlen(v[i]) : 0;
    return v[i];
}

tg_status tg__metric_corpus(tg_ctx *ctx, const char *fn, size_t n, const char *const *hyps,
                            const size_t *hyp_lens, const char *const *refs,
                            const size_t *ref_lens, bool have_out, void *st,
                            tg__metric_add_fn add)
{
    if (!have_out || (n > 0 && (!hyps || !refs))) {
        tg__err(ctx, TG_ERR_ARG, fn, "%s is NULL", !have_out ? "out" : !hyps ? "hyps" : "refs");
        return TG_ERR_ARG;
    }
    for (size_t i = 0; i < n; i++) {
        size_t hl, rl;
        const char *h = corpus_item(hyps, hyp_lens, i, &hl), *r = corpus_item(refs, ref_lens, i, &rl);
        if ((!h && !hyp_lens) || (!r && !ref_lens)) {
            tg__err(ctx, TG_ERR_ARG, fn, "pair %zu: the %s is NULL", i,
                    !h ? "hypothesis" : "reference");
            return TG_ERR_ARG;
        }
        tg_status s = add(ctx, st, h, hl, r, rl, fn, (int64_t)i);
        if (s != TG_OK)
            return s;
    }
    return TG_OK;
}
