/*
 * metrics.h - internal helpers shared by BLEU and chrF: UTF-8 decoding to code points,
 * Python's whitespace, a stable merge sort with a context, and clipped n-gram statistics of
 * two symbol sequences.
 */
#ifndef TG_METRICS_INTERNAL_H
#define TG_METRICS_INTERNAL_H

#include "core.h"
#include "tgrad_metrics.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Python's str.isspace() (what sacreBLEU's split() and rstrip() use), for any code point. */
static inline bool tg__py_space(uint32_t c)
{
    if (c <= 0x20)
        return (c >= 0x09 && c <= 0x0d) || c >= 0x1c;
    if (c < 0x85)
        return false;
    return c == 0x85 || c == 0xa0 || c == 0x1680 || (c >= 0x2000 && c <= 0x200a) ||
           c == 0x2028 || c == 0x2029 || c == 0x202f || c == 0x205f || c == 0x3000;
}

/* Decode @p n bytes of UTF-8 into @p out (room for n code points); returns the number of code
 * points, or SIZE_MAX if the text is invalid (then *bad is the byte offset of the first
 * invalid sequence). */
size_t tg__utf8_decode(const char *s, size_t n, uint32_t *out, size_t *bad);

/* UTF-8 bytes of code point c (< 0x110000, no surrogate) into out (4 bytes); returns 1..4. */
size_t tg__utf8_encode(uint32_t c, unsigned char *out);

/* Record the error "fn: [pair N: ]the <side> is not valid UTF-8 at byte B" (pair < 0: no
 * pair prefix) and return TG_ERR_ARG. */
tg_status tg__metric_bad_utf8(tg_ctx *ctx, const char *fn, int64_t pair, const char *side,
                              size_t bad);

/* Stable bottom-up merge sort of a[0..n) with tmp[0..n) as scratch; cmp(c, x, y) < 0 when x
 * sorts before y. Worst case O(n log n) comparisons (no hash tables: hostile input cannot
 * make the metrics quadratic). */
void tg__msort(size_t *a, size_t n, size_t *tmp, int (*cmp)(const void *c, size_t x, size_t y),
               const void *c);

/* Clipped n-gram matches of the symbol sequences h (hn) and r (rn) for n = 1..max_order:
 * match[n-1] = sum over n-grams g of min(count of g in h, count of g in r).
 * The hn + rn positions are sorted once by their next max_order symbols (a shorter rest
 * first), so every order's equal n-grams are adjacent; each order is then one scan.
 * Scratch: idx and tmp hold hn + rn entries each. */
void tg__ngram_match(const uint32_t *h, size_t hn, const uint32_t *r, size_t rn, int max_order,
                     size_t *idx, size_t *tmp, int64_t *match);

/* Scratch allocation for one metric call: n elements of es bytes (at least one element), or
 * NULL with TG_ERR_NOMEM recorded (also when n * es overflows). */
void *tg__metric_alloc(tg_ctx *ctx, size_t n, size_t es, const char *fn);


/* One pair added to a metric's statistics @p st (bleu_add / chrf_add). */
typedef tg_status (*tg__metric_add_fn)(tg_ctx *ctx, void *st, const char *hyp, size_t hyp_len,
                                       const char *ref, size_t ref_len, const char *fn,
                                       int64_t pair);
/* The corpus functions' loop (tg_bleu_corpus, tg_chrf_corpus): the arguments checked, each pair
 * added in order to @p st (zeroed by the caller) as a run-time error scope; TG_OK or the first
 * failure (named with its pair). */
tg_status tg__metric_corpus(tg_ctx *ctx, const char *fn, size_t n, const char *const *hyps,
                            const size_t *hyp_lens, const char *const *refs,
                            const size_t *ref_lens, bool have_out, void *st,
                            tg__metric_add_fn add);

#endif /* TG_METRICS_INTERNAL_H */
