/*
 * bleu.c - corpus BLEU (Papineni et al. 2002) exactly as sacreBLEU 2.x's BLEU() computes it
 * with its defaults (Post 2018): the 13a tokenizer (mteval-v13a.pl's rules, sacreBLEU's
 * tokenizer_13a.py + tokenizer_re.py), mixed case, clipped n-gram counts for n = 1..4 summed
 * over the corpus, the brevity penalty, and 'exp' smoothing (NIST's), which only matters when
 * some order has no match.
 *
 * The tokenizer works on code points (as Python's str does): every rule is ASCII, and any
 * other code point is simply a "non-digit". Each regular-expression pass writes its output with
 * runs of whitespace collapsed to one space: the passes only ever look at one character before
 * or after a '.', ',' or '-', so a whitespace run acts exactly as a single space would, and
 * the final split() ignores the difference; this keeps every buffer within 2 n + 3 code points.
 */
#include "metrics.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

/* ----- 13a tokenizer ----------------------------------------------------------------------- */
static bool is_digit(uint32_t c) { return c >= '0' && c <= '9'; }
static bool is_dot_comma(uint32_t c) { return c == '.' || c == ','; }

/* The first regex's class [\{-\~\[-\` -\&\(-\+\:-\@\/]: {|}~ [\]^_` space!"#$%& ()*+ :;<=>?@ / */
static bool is_13a_punct(uint32_t c)
{
    return (c >= '{' && c <= '~') || (c >= '[' && c <= '`') || (c >= ' ' && c <= '&') ||
           (c >= '(' && c <= '+') || (c >= ':' && c <= '@') || c == '/';
}

/* Python's str.replace(pat, rep) on a[0..n) in place (rep no longer than pat): occurrences
 * found left to right, not overlapping, output not rescanned. Returns the new length. */
static size_t replace_all(uint32_t *a, size_t n, const char *pat, const char *rep)
{
    size_t pl = strlen(pat), rl = strlen(rep), w = 0, i = 0;
    while (i < n) {
        size_t k = 0;
        while (k < pl && i + k < n && a[i + k] == (unsigned char)pat[k])
            k++;
        if (k == pl) {
            for (size_t j = 0; j < rl; j++)
                a[w++] = (unsigned char)rep[j];
            i += pl;
        } else {
            a[w++] = a[i++];
        }
    }
    return w;
}

/* Output of one pass, whitespace runs collapsed to one ' '. */
typedef struct emitter {
    uint32_t *p;
    size_t n;
} emitter;

static void emit(emitter *o, uint32_t c)
{
    if (tg__py_space(c)) {
        if (o->n > 0 && o->p[o->n - 1] == ' ')
            return;
        c = ' ';
    }
    o->p[o->n++] = c;
}

/* ' ' + line + ' ', then ([\{-\~\[-\` -\&\(-\+\:-\@\/]) -> ' \1 '. */
static size_t pass_punct(const uint32_t *a, size_t n, uint32_t *out)
{
    emitter o = {out, 0};
    emit(&o, ' ');
    for (size_t i = 0; i < n; i++) {
        if (is_13a_punct(a[i])) {
            emit(&o, ' ');
            emit(&o, a[i]);
            emit(&o, ' ');
        } else {
            emit(&o, a[i]);
        }
    }
    emit(&o, ' ');
    return o.n;
}

/* ([^0-9])([\.,]) -> '\1 \2 ': period and comma split off unless preceded by a digit. */
static size_t pass_dot_after(const uint32_t *a, size_t n, uint32_t *out)
{
    emitter o = {out, 0};
    size_t i = 0;
    while (i < n) {
        if (i + 1 < n && !is_digit(a[i]) && is_dot_comma(a[i + 1])) {
            emit(&o, a[i]);
            emit(&o, ' ');
            emit(&o, a[i + 1]);
            emit(&o, ' ');
            i += 2;
        } else {
            emit(&o, a[i++]);
        }
    }
    return o.n;
}

/* ([\.,])([^0-9]) -> ' \1 \2': period and comma split off unless followed by a digit. */
static size_t pass_dot_before(const uint32_t *a, size_t n, uint32_t *out)
{
    emitter o = {out, 0};
    size_t i = 0;
    while (i < n) {
        if (i + 1 < n && is_dot_comma(a[i]) && !is_digit(a[i + 1])) {
            emit(&o, ' ');
            emit(&o, a[i]);
            emit(&o, ' ');
            emit(&o, a[i + 1]);
            i += 2;
        } else {
            emit(&o, a[i++]);
        }
    }
    return o.n;
}

/* ([0-9])(-) -> '\1 \2 ': a dash split off after a digit. */
static size_t pass_dash(const uint32_t *a, size_t n, uint32_t *out)
{
    emitter o = {out, 0};
    size_t i = 0;
    while (i < n) {
        if (i + 1 < n && is_digit(a[i]) && a[i + 1] == '-') {
            emit(&o, a[i]);
            emit(&o, ' ');
            emit(&o, '-');
            emit(&o, ' ');
            i += 2;
        } else {
            emit(&o, a[i++]);
        }
    }
    return o.n;
}

/* BLEU's preprocessing of one segment: rstrip(), then Tokenizer13a. a[0..n) holds the code
 * points and has room for 2 n + 3; b is scratch of the same size. The result is left in a:
 * tokens separated by single spaces, possibly with one space before and after. */
static size_t tokenize_13a(uint32_t *a, size_t n, uint32_t *b)
{
    while (n > 0 && tg__py_space(a[n - 1]))
        n--;
    n = replace_all(a, n, "<skipped>", "");
    n = replace_all(a, n, "-\n", "");
    n = replace_all(a, n, "\n", " ");
    n = replace_all(a, n, "&quot;", "\"");
    n = replace_all(a, n, "&amp;", "&");
    n = replace_all(a, n, "&lt;", "<");
    n = replace_all(a, n, "&gt;", ">");
    n = pass_punct(a, n, b);
    n = pass_dot_after(b, n, a);
    n = pass_dot_before(a, n, b);
    return pass_dash(b, n, a);
}

/* Scratch code-point buffers for a line of len bytes: 2 len + 3 entries. */
static bool line_cap(size_t len, size_t *cap)
{
    if (len > (SIZE_MAX - 3) / 2 / sizeof(uint32_t))
        return false;
    *cap = 2 * len + 3;
    return true;
}

/* Decode and tokenize one side into a fresh buffer *out (2 len + 3 entries, to tg__free) using
 * b (the same size or more) as scratch; *n receives the token-string length. */
static tg_status decode_tokenize(tg_ctx *ctx, const char *s, size_t len, uint32_t **out,
                                 size_t *n, uint32_t *b, const char *fn, int64_t pair,
                                 const char *side)
{
    size_t cap, bad = 0;
    *out = NULL;
    if (!line_cap(len, &cap)) {
        tg__err(ctx, TG_ERR_NOMEM, fn, "the %s of %zu bytes is too long", side, len);
        return TG_ERR_NOMEM;
    }
    uint32_t *a = tg__metric_alloc(ctx, cap, sizeof *a, fn);
    if (!a)
        return TG_ERR_NOMEM;
    size_t k = tg__utf8_decode(s, len, a, &bad);
    if (k == SIZE_MAX) {
        tg__free(ctx, a);
        return tg__metric_bad_utf8(ctx, fn, pair, side, bad);
    }
    *out = a;
    *n = tokenize_13a(a, k, b);
    return TG_OK;
}

tg_status tg_bleu_tokenize(tg_ctx *ctx, const char *text, size_t len, char *out, size_t cap,
                           size_t *out_len)
{
    if (!ctx)
        return TG_ERR_ARG;
    static const char fn[] = "tg_bleu_tokenize";
    tg__io_enter(ctx);
    tg_status st = TG_OK;
    uint32_t *a = NULL, *b = NULL;
    size_t bcap;
    if (!text && len > 0) {
        st = TG_ERR_ARG;
        tg__err(ctx, st, fn, "text is NULL with length %zu", len);
        goto done;
    }
    if (!out && cap > 0) {
        st = TG_ERR_ARG;
        tg__err(ctx, st, fn, "out is NULL with capacity %zu", cap);
        goto done;
    }
    if (!line_cap(len, &bcap)) {
        st = TG_ERR_NOMEM;
        tg__err(ctx, st, fn, "the text of %zu bytes is too long", len);
        goto done;
    }
    if (!(b = tg__metric_alloc(ctx, bcap, sizeof *b, fn))) {
        st = TG_ERR_NOMEM;
        goto done;
    }
    size_t n = 0;
    if ((st = decode_tokenize(ctx, text, len, &a, &n, b, fn, -1, "text")) != TG_OK)
        goto done;
    size_t lo = 0, hi = n;
    if (lo < hi && a[lo] == ' ')
        lo++;
    if (lo < hi && a[hi - 1] == ' ')
        hi--;
    size_t need = 0;
    unsigned char tmp[4];
    for (size_t i = lo; i < hi; i++)
        need += tg__utf8_encode(a[i], tmp);
    if (out_len)
        *out_len = need;
    if (cap < need + 1) {
        st = TG_ERR_ARG;
        tg__err(ctx, st, fn, "output buffer of %zu bytes, %zu needed", cap, need + 1);
        goto done;
    }
    size_t w = 0;
    for (size_t i = lo; i < hi; i++)
        w += tg__utf8_encode(a[i], (unsigned char *)out + w);
    out[w] = '\0';
done:
    tg__free(ctx, a);
    tg__free(ctx, b);
    tg__io_leave(ctx);
    return st;
}

/* ----- repeated words ---------------------------------------------------------------------- */
/* Whether code point c makes a token a word (tg_word_run). */
static bool word_char(uint32_t c)
{
    return (c >= '0' && c <= '9') || ((c | 0x20) >= 'a' && (c | 0x20) <= 'z') ||
           (c >= 0xC0 && c != 0xD7 && c != 0xF7 && !(c >= 0x2000 && c <= 0x2BFF) &&
            !(c >= 0x3000 && c <= 0x303F) && c != 0xFFFD && !(c >= 0x1F000 && c <= 0x1FAFF));
}

/* The longest run of equal word tokens in the 13a tokens a[0..n) (single spaces between). */
static int64_t longest_run(const uint32_t *a, size_t n)
{
    int64_t best = 0, cur = 0;
    size_t ps = 0, pn = 0; /* the previous token */
    for (size_t i = 0; i < n;) {
        while (i < n && a[i] == ' ')
            i++;
        size_t s0 = i;
        bool word = false;
        while (i < n && a[i] != ' ')
            word |= word_char(a[i++]);
        size_t tn = i - s0;
        if (!tn)
            break;
        bool same = cur > 0 && tn == pn && !memcmp(a + s0, a + ps, tn * sizeof *a);
        cur = !word ? 0 : same ? cur + 1 : 1;
        best = cur > best ? cur : best;
        ps = s0;
        pn = tn;
    }
    return best;
}

tg_status tg_word_run(tg_ctx *ctx, const char *text, size_t len, int64_t *run)
{
    if (!ctx)
        return TG_ERR_ARG;
    static const char fn[] = "tg_word_run";
    tg__io_enter(ctx);
    tg_status st = TG_OK;
    uint32_t *a = NULL, *b = NULL;
    size_t bcap, n = 0;
    if ((!text && len > 0) || !run) {
        st = TG_ERR_ARG;
        tg__err(ctx, st, fn, "%s is NULL", run ? "text" : "run");
    } else if (!line_cap(len, &bcap)) {
        st = TG_ERR_NOMEM;
        tg__err(ctx, st, fn, "the text of %zu bytes is too long", len);
    } else if (!(b = tg__metric_alloc(ctx, bcap, sizeof *b, fn)))
        st = TG_ERR_NOMEM;
    else if ((st = decode_tokenize(ctx, text, len, &a, &n, b, fn, -1, "text")) == TG_OK)
        *run = longest_run(a, n);
    tg__free(ctx, a);
    tg__free(ctx, b);
    tg__io_leave(ctx);
    return st;
}

/* ----- statistics -------------------------------------------------------------------------- */
/* Tokens of both sides: (start, length) in their code-point buffers. */
typedef struct token_list {
    const uint32_t **start;
    size_t *len;
} token_list;

/* Record the tokens of a[0..n) (single-space separated) from index k on; returns the count. */
static size_t split_tokens(const uint32_t *a, size_t n, token_list *t, size_t k)
{
    size_t i = 0, k0 = k;
    while (i < n) {
        while (i < n && a[i] == ' ')
            i++;
        if (i == n)
            break;
        size_t j = i;
        while (j < n && a[j] != ' ')
            j++;
        if (t) {
            t->start[k] = a + i;
            t->len[k] = j - i;
        }
        k++;
        i = j;
    }
    return k - k0;
}

static int token_cmp(const void *c, size_t x, size_t y)
{
    const token_list *t = c;
    size_t nx = t->len[x], ny = t->len[y], k = nx < ny ? nx : ny;
    for (size_t i = 0; i < k; i++)
        if (t->start[x][i] != t->start[y][i])
            return t->start[x][i] < t->start[y][i] ? -1 : 1;
    return nx < ny ? -1 : nx > ny;
}

/* Statistics of one pair into *d (sys_len, ref_len, counts, totals; n_sentences = 1). */
static tg_status pair_stats(tg_ctx *ctx, const char *hyp, size_t hyp_len, const char *ref,
                            size_t ref_len, const char *fn, int64_t pair, tg_bleu_stats *d)
{
    tg_status st = TG_ERR_NOMEM;
    uint32_t *ha = NULL, *ra = NULL, *b = NULL, *ids = NULL;
    size_t *idx = NULL, *tmp = NULL, *lens = NULL;
    const uint32_t **starts = NULL;
    size_t bcap;
    if ((uint64_t)hyp_len + ref_len > UINT32_MAX) { /* token ids are 32-bit */
        char where[32] = "";
        if (pair >= 0)
            snprintf(where, sizeof where, "pair %lld: ", (long long)pair);
        tg__err(ctx, TG_ERR_ARG, fn, "%sa sentence pair of %llu bytes (at most %lu)", where,
                (unsigned long long)hyp_len + ref_len, (unsigned long)UINT32_MAX);
        return TG_ERR_ARG;
    }
    if (!line_cap(hyp_len > ref_len ? hyp_len : ref_len, &bcap)) {
        tg__err(ctx, TG_ERR_NOMEM, fn, "a sentence of %zu bytes is too long",
                hyp_len > ref_len ? hyp_len : ref_len);
        return TG_ERR_NOMEM;
    }
    if (!(b = tg__metric_alloc(ctx, bcap, sizeof *b, fn)))
        goto done;
    size_t hn = 0, rn = 0;
    if ((st = decode_tokenize(ctx, hyp, hyp_len, &ha, &hn, b, fn, pair, "hypothesis")) != TG_OK ||
        (st = decode_tokenize(ctx, ref, ref_len, &ra, &rn, b, fn, pair, "reference")) != TG_OK)
        goto done;
    st = TG_ERR_NOMEM;
    size_t th = split_tokens(ha, hn, NULL, 0), tr = split_tokens(ra, rn, NULL, 0), tt = th + tr;
    if (!(starts = tg__metric_alloc(ctx, tt, sizeof *starts, fn)) ||
        !(lens = tg__metric_alloc(ctx, tt, sizeof *lens, fn)) ||
        !(idx = tg__metric_alloc(ctx, tt, sizeof *idx, fn)) ||
        !(tmp = tg__metric_alloc(ctx, tt, sizeof *tmp, fn)) ||
        !(ids = tg__metric_alloc(ctx, tt, sizeof *ids, fn)))
        goto done;
    token_list tl = {starts, lens};
    split_tokens(ha, hn, &tl, 0);
    split_tokens(ra, rn, &tl, th);
    /* Token ids: equal strings (code point by code point) get equal ids. */
    for (size_t i = 0; i < tt; i++)
        idx[i] = i;
    tg__msort(idx, tt, tmp, token_cmp, &tl);
    uint32_t next = 0;
    for (size_t i = 0; i < tt; i++) {
        if (i > 0 && token_cmp(&tl, idx[i - 1], idx[i]) != 0)
            next++;
        ids[idx[i]] = next;
    }
    memset(d, 0, sizeof *d);
    tg__ngram_match(ids, th, ids + th, tr, TG_BLEU_ORDER, idx, tmp, d->counts);
    d->sys_len = (int64_t)th;
    d->ref_len = (int64_t)tr;
    for (size_t n = 1; n <= TG_BLEU_ORDER; n++)
        d->totals[n - 1] = th >= n ? (int64_t)(th - n + 1) : 0;
    d->n_sentences = 1;
    st = TG_OK;
done:
    tg__free(ctx, ha);
    tg__free(ctx, ra);
    tg__free(ctx, b);
    tg__free(ctx, (void *)starts);
    tg__free(ctx, lens);
    tg__free(ctx, idx);
    tg__free(ctx, tmp);
    tg__free(ctx, ids);
    return st;
}

/* st += d, all or nothing. */
static tg_status stats_sum(tg_ctx *ctx, tg_bleu_stats *st, const tg_bleu_stats *d,
                           const char *fn)
{
    tg_bleu_stats s;
    bool ok = tg__add_i64(st->sys_len, d->sys_len, &s.sys_len) &&
              tg__add_i64(st->ref_len, d->ref_len, &s.ref_len) &&
              tg__add_i64(st->n_sentences, d->n_sentences, &s.n_sentences);
    for (int n = 0; n < TG_BLEU_ORDER; n++)
        ok = ok && tg__add_i64(st->counts[n], d->counts[n], &s.counts[n]) &&
             tg__add_i64(st->totals[n], d->totals[n], &s.totals[n]);
    if (!ok) {
        tg__err(ctx, TG_ERR_ARG, fn, "the statistics would overflow int64 (or are negative)");
        return TG_ERR_ARG;
    }
    *st = s;
    return TG_OK;
}

/* One pair: checks, statistics, sum. */
static tg_status bleu_add(tg_ctx *ctx, tg_bleu_stats *st, const char *hyp, size_t hyp_len,
                          const char *ref, size_t ref_len, const char *fn, int64_t pair)
{
    if (!st) {
        tg__err(ctx, TG_ERR_ARG, fn, "stats is NULL");
        return TG_ERR_ARG;
    }
    if ((!hyp && hyp_len) || (!ref && ref_len)) {
        if (pair >= 0)
            tg__err(ctx, TG_ERR_ARG, fn, "pair %lld: the %s is NULL", (long long)pair,
                    !hyp && hyp_len ? "hypothesis" : "reference");
        else
            tg__err(ctx, TG_ERR_ARG, fn, "the %s is NULL with length %zu",
                    !hyp && hyp_len ? "hypothesis" : "reference",
                    !hyp && hyp_len ? hyp_len : ref_len);
        return TG_ERR_ARG;
    }
    tg_bleu_stats d;
    tg_status s = pair_stats(ctx, hyp, hyp_len, ref, ref_len, fn, pair, &d);
    return s != TG_OK ? s : stats_sum(ctx, st, &d, fn);
}

tg_status tg_bleu_stats_add(tg_ctx *ctx, tg_bleu_stats *st, const char *hyp, size_t hyp_len,
                            const char *ref, size_t ref_len)
{
    if (!ctx)
        return TG_ERR_ARG;
    tg__io_enter(ctx);
    tg_status s = bleu_add(ctx, st, hyp, hyp_len, ref, ref_len, "tg_bleu_stats_add", -1);
    tg__io_leave(ctx);
    return s;
}

/* ----- score ------------------------------------------------------------------------------- */
/* sacreBLEU's my_log(): log, with log(0) floored to -9999999999. */
static double my_log(double x) { return x == 0.0 ? -9999999999.0 : log(x); }

/* tg_bleu_stats_score of statistics known to be valid. */
static void bleu_score(const tg_bleu_stats *st, tg_bleu *out)
{
    tg_bleu r;
    memset(&r, 0, sizeof r);
    r.sys_len = st->sys_len;
    r.ref_len = st->ref_len;
    memcpy(r.counts, st->counts, sizeof r.counts);
    memcpy(r.totals, st->totals, sizeof r.totals);
    r.ratio = st->ref_len ? (double)st->sys_len / (double)st->ref_len : 0.0;
    r.bp = 1.0;
    if (st->sys_len < st->ref_len)
        r.bp = st->sys_len > 0 ? exp(1.0 - (double)st->ref_len / (double)st->sys_len) : 0.0;
    bool any = false;
    for (int n = 0; n < TG_BLEU_ORDER; n++)
        any = any || st->counts[n] != 0;
    if (!any) { /* sacreBLEU: "Early stop if there are no matches (#141)" */
        *out = r;
        return;
    }
    double smooth = 1.0;
    for (int n = 0; n < TG_BLEU_ORDER; n++) {
        if (st->totals[n] == 0)
            break;
        if (st->counts[n] == 0) {
            smooth *= 2;
            r.precisions[n] = 100.0 / (smooth * (double)st->totals[n]);
        } else {
            r.precisions[n] = 100.0 * (double)st->counts[n] / (double)st->totals[n];
        }
    }
    double sum = 0.0; /* Python's sum() (<= 3.11): left to right from 0 */
    for (int n = 0; n < TG_BLEU_ORDER; n++)
        sum += my_log(r.precisions[n]);
    r.score = r.bp * exp(sum / TG_BLEU_ORDER);
    *out = r;
}

tg_status tg_bleu_stats_score(tg_ctx *ctx, const tg_bleu_stats *st, tg_bleu *out)
{
    static const char *fn = "tg_bleu_stats_score";
    if (!ctx)
        return TG_ERR_ARG;
    tg__begin(ctx);
    if (!st || !out) {
        tg__run_err(ctx, TG_ERR_ARG, fn, "%s is NULL", !st ? "st" : "out");
        return TG_ERR_ARG;
    }
    /* what tg_bleu_stats_add sums: nothing negative, no more matches than n-grams */
    const char *const names[3] = {"sys_len", "ref_len", "n_sentences"};
    const int64_t lens[3] = {st->sys_len, st->ref_len, st->n_sentences};
    for (int k = 0; k < 3; k++)
        if (lens[k] < 0) {
            tg__run_err(ctx, TG_ERR_ARG, fn, "%s = %lld is negative (not statistics "
                        "tg_bleu_stats_add sums)", names[k], (long long)lens[k]);
            return TG_ERR_ARG;
        }
    for (int n = 0; n < TG_BLEU_ORDER; n++) {
        if (st->counts[n] < 0 || st->totals[n] < 0) {
            bool c = st->counts[n] < 0;
            tg__run_err(ctx, TG_ERR_ARG, fn, "%s[%d] = %lld is negative (not statistics "
                        "tg_bleu_stats_add sums)", c ? "counts" : "totals", n,
                        (long long)(c ? st->counts[n] : st->totals[n]));
            return TG_ERR_ARG;
        }
        if (st->counts[n] > st->totals[n]) {
            tg__run_err(ctx, TG_ERR_ARG, fn, "counts[%d] = %lld is more than totals[%d] = %lld "
                        "(not statistics tg_bleu_stats_add sums)", n,
                        (long long)st->counts[n], n, (long long)st->totals[n]);
            return TG_ERR_ARG;
        }
    }
    bleu_score(st, out);
    return TG_OK;
}

/* tg__metric_corpus's view of bleu_add. */
static tg_status bleu_add_any(tg_ctx *ctx, void *st, const char *hyp, size_t hyp_len,
                          const char *ref, size_t ref_len, const char *fn, int64_t pair)
{
    return bleu_add(ctx, (tg_bleu_stats *)st, hyp, hyp_len, ref, ref_len, fn, pair);
}

tg_status tg_bleu_corpus(tg_ctx *ctx, size_t n, const char *const *hyps, const size_t *hyp_lens,
                         const char *const *refs, const size_t *ref_lens, tg_bleu *out)
{
    if (!ctx)
        return TG_ERR_ARG;
    tg__io_enter(ctx);
    tg_bleu_stats st;
    memset(&st, 0, sizeof st);
    tg_status s = tg__metric_corpus(ctx, "tg_bleu_corpus", n, hyps, hyp_lens, refs, ref_lens,
                                    out != NULL, &st, bleu_add_any);
    if (s == TG_OK)
        bleu_score(&st, out);
    tg__io_leave(ctx);
    return s;
}

size_t tg_bleu_format(const tg_bleu *b, char *buf, size_t size)
{
    if (!b) {
        if (buf && size)
            buf[0] = '\0';
        return 0;
    }
    int k = snprintf(buf, size,
                     "BLEU = %.2f %.1f/%.1f/%.1f/%.1f (BP = %.3f ratio = %.3f hyp_len = %lld "
                     "ref_len = %lld)",
                     b->score, b->precisions[0], b->precisions[1], b->precisions[2],
                     b->precisions[3], b->bp, b->ratio, (long long)b->sys_len,
                     (long long)b->ref_len);
    return k < 0 ? 0 : (size_t)k;
}
