/*
 * fuzz_metrics.c - libFuzzer harness for BLEU and chrF (include/tgrad_metrics.h) on hostile
 * text: a translation's hypothesis and the references of a test file are arbitrary bytes.
 *
 * The input's first byte picks where the rest splits into hypothesis and reference. Per input,
 * on a fresh context with a capped allocator:
 * 1. tg_bleu_tokenize of each side: succeeds exactly when the side is valid UTF-8 (else
 *    TG_ERR_ARG naming a byte offset inside the text, in one clean line); the result fits the
 *    documented 2 n bytes, is valid UTF-8, has single spaces between tokens and none at the
 *    ends, and no more non-space bytes than the input. (13a is not idempotent: `,,8` gives
 *    `, ,8`, which gives `, , 8`, in sacreBLEU too.)
 * 2. tg_bleu_stats_add and tg_chrf_stats_add on (hyp, ref): the same verdict; the statistics
 *    obey their definitions (sys_len = the tokens of step 1, totals = max(0, len - n + 1),
 *    matches within both sides' n-gram counts, chrF's hyp zeroed where the reference has no
 *    n-gram); scores finite in [0, 100]; (hyp, hyp) matches everything (BLEU counts = totals,
 *    chrF matches = hyp counts); a failure leaves the statistics and the context's bytes as
 *    they were.
 * 3. Memory stays linear in the input (at most 96 x + 64 KB at the peak).
 * 4. The BLEU call once more with one allocation failing (chosen from the input): TG_ERR_NOMEM
 *    or success, nothing kept.
 */
#include "fuzz_util.h"

#include "io/io.h"
#include "tgrad_metrics.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static const char FN[] = "fuzz_metrics";

static void check_tokens(tg_ctx *ctx, const char *s, size_t n, bool valid)
{
    size_t cap = 2 * n + 1, len = 0;
    char *out = malloc(cap);
    if (!out)
        abort();
    tg_status st = tg_bleu_tokenize(ctx, s, n, out, cap, &len);
    if (valid != (st == TG_OK))
        fz_die(ctx, "tokenize: %s for %s UTF-8", tg_status_str(st), valid ? "valid" : "invalid");
    if (st != TG_OK) {
        const char *m = strstr(tg_ctx_message(ctx), "not valid UTF-8 at byte ");
        if (st != TG_ERR_ARG || !m || strtoull(m + 24, NULL, 10) >= n)
            fz_die(ctx, "tokenize: refusal without the byte offset");
        fz_check_line("tg_bleu_tokenize", tg_ctx_message(ctx));
        free(out);
        return;
    }
    if (len > 2 * n || out[len] != '\0' || !tg__utf8_valid(out, len, NULL))
        fz_die(ctx, "tokenize: %zu bytes from %zu, or not NUL-terminated valid UTF-8", len, n);
    for (size_t i = 0; i < len; i++)
        if (out[i] == ' ' && (i == 0 || i + 1 == len || out[i + 1] == ' '))
            fz_die(ctx, "tokenize: a space at the end or two in a row at byte %zu", i);
    /* every byte of the output but the separating spaces comes from the input, in order
     * (entities and <skipped> only shrink it): at most n - spaces other bytes */
    size_t spaces = 0;
    for (size_t i = 0; i < len; i++)
        spaces += out[i] == ' ';
    if (len - spaces > n)
        fz_die(ctx, "tokenize: %zu non-space bytes from %zu", len - spaces, n);
    free(out);
}

/* Tokens of the 13a tokenization of a valid line. */
static int64_t n_tokens(tg_ctx *ctx, const char *s, size_t n)
{
    char *out = malloc(2 * n + 1);
    size_t len = 0;
    if (!out || tg_bleu_tokenize(ctx, s, n, out, 2 * n + 1, &len) != TG_OK)
        abort();
    int64_t k = len > 0;
    for (size_t i = 0; i < len; i++)
        k += out[i] == ' ';
    free(out);
    return k;
}

static void check_bleu(tg_ctx *ctx, const tg_bleu_stats *s, int64_t th, int64_t tr, bool same)
{
    if (s->sys_len != th || s->ref_len != tr || s->n_sentences != 1)
        fz_die(ctx, "BLEU lengths %lld/%lld, tokens %lld/%lld", (long long)s->sys_len,
               (long long)s->ref_len, (long long)th, (long long)tr);
    for (int n = 1; n <= TG_BLEU_ORDER; n++) {
        int64_t th_n = th >= n ? th - n + 1 : 0, tr_n = tr >= n ? tr - n + 1 : 0;
        int64_t c = s->counts[n - 1];
        if (s->totals[n - 1] != th_n || c < 0 || c > th_n || c > tr_n || (same && c != th_n))
            fz_die(ctx, "BLEU order %d: %lld of %lld (reference n-grams %lld)", n, (long long)c,
                   (long long)s->totals[n - 1], (long long)tr_n);
    }
    tg_bleu b;
    if (tg_bleu_stats_score(ctx, s, &b) != TG_OK)
        fz_die(ctx, "tg_bleu_stats_score refused its own sums: %s", tg_ctx_message(ctx));
    if (!(b.score >= 0 && b.score <= 100 + 1e-9) || !(b.bp >= 0 && b.bp <= 1))
        fz_die(ctx, "BLEU %.17g, BP %.17g", b.score, b.bp);
    char line[256];
    if (tg_bleu_format(&b, line, sizeof line) >= sizeof line)
        fz_die(ctx, "BLEU line longer than 255 bytes");
}

static void check_chrf(tg_ctx *ctx, const tg_chrf_stats *s, bool same)
{
    for (int n = 0; n < TG_CHRF_ORDER; n++) {
        int64_t h = s->hyp[n], r = s->ref[n], m = s->match[n];
        if (h < 0 || r < 0 || m < 0 || m > r || (r == 0 && h != 0) || (r > 0 && m > h) ||
            (n > 0 && (r > s->ref[n - 1] || h > s->hyp[n - 1])) || (same && m != h))
            fz_die(ctx, "chrF order %d: hyp %lld ref %lld match %lld", n + 1, (long long)h,
                   (long long)r, (long long)m);
    }
    tg_chrf c;
    if (tg_chrf_stats_score(ctx, s, &c) != TG_OK)
        fz_die(ctx, "tg_chrf_stats_score refused its own sums: %s", tg_ctx_message(ctx));
    if (!(c.score >= 0 && c.score <= 100 + 1e-9) || (same && s->ref[0] > 0 && c.score != 100))
        fz_die(ctx, "chrF %.17g", c.score);
}

/* Both metrics on one pair; returns whether they succeeded. */
static bool run_pair(tg_ctx *ctx, const char *h, size_t hn, const char *r, size_t rn, bool valid,
                     bool same)
{
    tg_bleu_stats bs, b0;
    tg_chrf_stats cs, c0;
    memset(&bs, 0, sizeof bs);
    memset(&cs, 0, sizeof cs);
    b0 = bs;
    c0 = cs;
    size_t bytes = tg_ctx_bytes(ctx);
    static const tg_status allowed[] = {TG_ERR_ARG, TG_OK};
    tg_status s1 = tg_bleu_stats_add(ctx, &bs, h, hn, r, rn);
    if ((s1 == TG_OK) != valid)
        fz_die(ctx, "tg_bleu_stats_add: %s", tg_status_str(s1));
    if (s1 != TG_OK) {
        fz_check_failure(ctx, "tg_bleu_stats_add", bytes, allowed);
        if (memcmp(&bs, &b0, sizeof bs) != 0)
            fz_die(ctx, "tg_bleu_stats_add changed the statistics on failure");
    }
    tg_status s2 = tg_chrf_stats_add(ctx, &cs, h, hn, r, rn);
    if ((s2 == TG_OK) != valid)
        fz_die(ctx, "tg_chrf_stats_add: %s", tg_status_str(s2));
    if (s2 != TG_OK) {
        fz_check_failure(ctx, "tg_chrf_stats_add", bytes, allowed);
        if (memcmp(&cs, &c0, sizeof cs) != 0)
            fz_die(ctx, "tg_chrf_stats_add changed the statistics on failure");
        return false;
    }
    check_bleu(ctx, &bs, n_tokens(ctx, h, hn), n_tokens(ctx, r, rn), same);
    check_chrf(ctx, &cs, same);
    if (tg_ctx_bytes(ctx) != bytes)
        fz_die(ctx, "the metrics kept %zu bytes", tg_ctx_bytes(ctx) - bytes);
    return true;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size == 0)
        return 0;
    const char *text = (const char *)data + 1;
    size_t n = size - 1, hn = (size_t)(((uint64_t)n * data[0]) / 255), rn = n - hn;
    const char *h = text, *r = text + hn;
    bool hv = tg__utf8_valid(h, hn, NULL), rv = tg__utf8_valid(r, rn, NULL);

    fz_alloc A;
    tg_ctx *ctx = fz_ctx_new(&A, FZ_CAP);
    size_t live0 = fz_peak_start(&A);
    check_tokens(ctx, h, hn, hv);
    check_tokens(ctx, r, rn, rv);
    run_pair(ctx, h, hn, r, rn, hv && rv, false);
    if (hv)
        run_pair(ctx, h, hn, h, hn, true, true);
    size_t used = A.peak - live0;
    if (used > ((size_t)64 << 10) && (used - ((size_t)64 << 10)) / 96 > size)
        fz_die(ctx, "%s: %zu bytes of input made the context hold %zu bytes", FN, size, used);

    /* one allocation failing */
    size_t bytes = tg_ctx_bytes(ctx);
    tg_bleu_stats bs;
    memset(&bs, 0, sizeof bs);
    A.count = 0;
    A.fail_at = 1 + fz_hash(data, size) % 8;
    tg_status st = tg_bleu_stats_add(ctx, &bs, h, hn, r, rn);
    A.fail_at = 0;
    static const tg_status allowed[] = {TG_ERR_NOMEM, TG_ERR_ARG, TG_OK};
    if (st != TG_OK)
        fz_check_failure(ctx, "tg_bleu_stats_add", bytes, allowed);
    else if (tg_ctx_bytes(ctx) != bytes)
        fz_die(ctx, "tg_bleu_stats_add kept memory");
    fz_ctx_free(ctx, &A);
    return 0;
}
