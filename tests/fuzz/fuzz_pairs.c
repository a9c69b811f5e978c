/*
 * fuzz_pairs.c - libFuzzer harness for the sentence-pair reader, tokenized seq2seq data and
 * length-bucketed batches (tgrad_data.h).
 *
 * Input: 4 bytes of settings, then the file. Settings: byte 0 the line limit (0: the default
 * 64 KiB; else 1..255 bytes), byte 1 max_len (2 + b % 40), byte 2 the extra token budget over
 * the longest sequence, byte 3 the seed and whether texts are kept.
 * Per input, on a fresh context with a capped allocator (fuzz_util.h):
 * 1. tg_pairs_read_mem() against an independent whole-buffer model of the format written
 *    here: the same verdict (OK or TG_ERR_FORMAT), the same pairs (texts, line numbers), the
 *    hash is FNV-1a of the bytes; a refusal is one clean line naming the label and the line the
 *    model refuses; with a small line limit, the peak memory stays within the line buffer.
 * 2. The same bytes as a file (tg_pairs_read on a memfd): the same verdict and counts.
 * 3. If accepted: tg_seq2seq_load_mem() with the byte tokenizer: every source is its bytes
 *    truncated to max_len - 1, then EOS; every target its bytes truncated; the counts and
 *    texts agree.
 * 4. Batches of epochs 0 and 1 (budget = longest + extra): every example once per epoch, each
 *    batch within the budget with its S and T the maxima; a budget one below the longest is
 *    refused (TG_ERR_ARG). The first batch filled into tensors: ids, mask, decoder input and
 *    labels as the rule says.
 * 5. Out-of-memory pass: tg_seq2seq_load_mem() with one allocation failing: NULL and
 *    TG_ERR_NOMEM with nothing kept, or success (the failing allocation was never reached).
 * Every context must give back every byte on tg_ctx_free.
 */
#include "fuzz_util.h"
#include "tgrad_data.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const tg_status read_errors[] = {TG_ERR_FORMAT, TG_ERR_NOMEM, TG_OK};

/* ----- the model: the format, as tgrad_data.h describes it ---------------------------------- */
static bool utf8_ok(const unsigned char *s, size_t n)
{
    for (size_t i = 0; i < n;) {
        unsigned c = s[i];
        size_t need;
        unsigned lo = 0x80, hi = 0xBF;
        if (c < 0x80) {
            i++;
            continue;
        }
        if (c >= 0xC2 && c <= 0xDF)
            need = 1;
        else if (c >= 0xE0 && c <= 0xEF) {
            need = 2;
            lo = c == 0xE0 ? 0xA0 : 0x80;
            hi = c == 0xED ? 0x9F : 0xBF;
        } else if (c >= 0xF0 && c <= 0xF4) {
            need = 3;
            lo = c == 0xF0 ? 0x90 : 0x80;
            hi = c == 0xF4 ? 0x8F : 0xBF;
        } else
            return false;
        if (n - i <= need || s[i + 1] < lo || s[i + 1] > hi)
            return false;
        for (size_t k = 2; k <= need; k++)
            if ((s[i + k] & 0xC0) != 0x80)
                return false;
        i += need + 1;
    }
    return true;
}

typedef struct mpair {
    const unsigned char *src, *tgt;
    size_t sn, tn;
} mpair;

/* Returns the number of pairs, or -(line) of the first bad line, or 0 for "no pairs";
 * *good: the pairs before the first bad line (all of them if none). */
static int64_t model(const unsigned char *d, size_t n, size_t max_line, mpair *out,
                     int64_t *good)
{
    int64_t line = 0, pairs = 0;
    size_t i = 0;
    while (i < n) {
        line++;
        const unsigned char *nl = memchr(d + i, '\n', n - i);
        size_t len = nl ? (size_t)(nl - (d + i)) : n - i;
        const unsigned char *s = d + i;
        i += len + (nl ? 1 : 0);
        if (len && s[len - 1] == '\r')
            len--;
        *good = pairs;
        if (len > max_line || memchr(s, 0, len) || !utf8_ok(s, len))
            return -line;
        const unsigned char *tab = memchr(s, '\t', len);
        if (!tab || memchr(tab + 1, '\t', len - (size_t)(tab - s) - 1) || tab == s ||
            tab == s + len - 1)
            return -line;
        out[pairs].src = s;
        out[pairs].sn = (size_t)(tab - s);
        out[pairs].tgt = tab + 1;
        out[pairs].tn = len - out[pairs].sn - 1;
        pairs++;
    }
    *good = pairs;
    return pairs;
}

/* ----- step 1: the callback compares with the model ----------------------------------------- */
typedef struct walk {
    const tg_ctx *ctx;
    const mpair *want;
    int64_t n_want, seen;
    int64_t last_line;
} walk;

static tg_status visit(void *user, const tg_pair *p)
{
    walk *w = user;
    if (w->seen >= w->n_want)
        fz_die(w->ctx, "more pairs than the model has");
    const mpair *m = &w->want[w->seen++];
    if (p->source_len != m->sn || p->target_len != m->tn ||
        memcmp(p->source, m->src, m->sn) != 0 || memcmp(p->target, m->tgt, m->tn) != 0 ||
        p->source[p->source_len] != '\0' || p->target[p->target_len] != '\0')
        fz_die(w->ctx, "pair %lld differs from the model", (long long)w->seen);
    if (p->line <= w->last_line)
        fz_die(w->ctx, "line numbers do not increase");
    w->last_line = p->line;
    return TG_OK;
}

static void check_refusal(tg_ctx *ctx, const char *fn, size_t before, int64_t bad_line)
{
    fz_check_failure(ctx, fn, before, read_errors);
    const char *msg = tg_ctx_message(ctx);
    fz_check_line(fn, msg);
    if (tg_ctx_status(ctx) != TG_ERR_FORMAT)
        return;
    char want[64];
    if (bad_line > 0)
        snprintf(want, sizeof want, "in.tsv:%lld: ", (long long)bad_line);
    else
        snprintf(want, sizeof want, "in.tsv: no sentence pairs");
    if (!strstr(msg, want))
        fz_die(ctx, "the refusal does not say '%s'", want);
}

/* ----- steps 3-4 ------------------------------------------------------------------------------ */
static void check_data(tg_ctx *ctx, const tg_seq2seq_data *d, const mpair *m, int64_t n,
                       int64_t L, bool keep)
{
    tg_seq2seq_info in = tg_seq2seq_get_info(d);
    if (in.pairs != n || in.max_len != L || in.pad_id != TG_TOKEN_PAD)
        fz_die(ctx, "info: %lld pairs (want %lld)", (long long)in.pairs, (long long)n);
    int64_t ts = 0, tt = 0;
    for (int64_t i = 0; i < n; i++) {
        int64_t sl, tl;
        const int32_t *s = tg_seq2seq_source(d, i, &sl);
        const int32_t *t = tg_seq2seq_target(d, i, &tl);
        int64_t ws = (int64_t)m[i].sn < L - 1 ? (int64_t)m[i].sn : L - 1;
        int64_t wt = (int64_t)m[i].tn < L - 1 ? (int64_t)m[i].tn : L - 1;
        ts += (int64_t)m[i].sn > L - 1;
        tt += (int64_t)m[i].tn > L - 1;
        if (!s || !t || sl != ws + 1 || tl != wt || s[ws] != TG_TOKEN_EOS ||
            tg_seq2seq_src_len(d, i) != sl || tg_seq2seq_tgt_len(d, i) != tl + 1)
            fz_die(ctx, "pair %lld: lengths %lld, %lld", (long long)i, (long long)sl,
                   (long long)tl);
        for (int64_t k = 0; k < ws; k++)
            if (s[k] != 4 + m[i].src[k])
                fz_die(ctx, "pair %lld: source id %lld", (long long)i, (long long)k);
        for (int64_t k = 0; k < wt; k++)
            if (t[k] != 4 + m[i].tgt[k])
                fz_die(ctx, "pair %lld: target id %lld", (long long)i, (long long)k);
        const char *st = tg_seq2seq_source_text(d, i), *tx = tg_seq2seq_target_text(d, i);
        if (keep ? (!st || !tx || strlen(st) != m[i].sn || strlen(tx) != m[i].tn ||
                    memcmp(st, m[i].src, m[i].sn) || memcmp(tx, m[i].tgt, m[i].tn))
                 : (st || tx))
            fz_die(ctx, "pair %lld: texts", (long long)i);
    }
    if (in.truncated_src != ts || in.truncated_tgt != tt)
        fz_die(ctx, "truncation counts");
}

static void check_fill(tg_ctx *ctx, const tg_seq2seq_data *d, tg_batch b)
{
    tg_mark mk = tg_ctx_mark(ctx);
    tg_tensor *src = tg_input(ctx, TG_I32, TG_DIMS(b.n, b.src_len), "src");
    tg_tensor *mask = tg_input(ctx, TG_F32, TG_DIMS(b.n, b.src_len), "mask");
    tg_tensor *dec = tg_input(ctx, TG_I32, TG_DIMS(b.n, b.tgt_len), "dec");
    tg_tensor *lab = tg_input(ctx, TG_I32, TG_DIMS(b.n, b.tgt_len), "lab");
    if (!src || !mask || !dec || !lab) { /* the cap: fine, nothing to check */
        tg_ctx_clear_error(ctx);
        tg_ctx_rewind(ctx, mk);
        return;
    }
    if (tg_seq2seq_fill(d, b.examples, b.n, src, mask, dec, lab) != TG_OK)
        fz_die(ctx, "tg_seq2seq_fill refused a planned batch");
    const int32_t *si = tg_tensor_data(src), *di = tg_tensor_data(dec), *li = tg_tensor_data(lab);
    const float *mi = tg_tensor_data(mask);
    for (int64_t r = 0; r < b.n; r++) {
        int64_t sl, tl;
        const int32_t *s = tg_seq2seq_source(d, b.examples[r], &sl);
        const int32_t *t = tg_seq2seq_target(d, b.examples[r], &tl);
        for (int64_t j = 0; j < b.src_len; j++) {
            int32_t v = si[r * b.src_len + j];
            float mv = mi[r * b.src_len + j];
            if (j < sl ? (v != s[j] || mv != 0.0f) : (v != TG_TOKEN_PAD || mv != 1.0f))
                fz_die(ctx, "fill: source row %lld col %lld", (long long)r, (long long)j);
        }
        for (int64_t j = 0; j < b.tgt_len; j++) {
            int32_t dv = di[r * b.tgt_len + j], lv = li[r * b.tgt_len + j];
            int32_t wd = j == 0 ? TG_TOKEN_BOS : j <= tl ? t[j - 1] : TG_TOKEN_PAD;
            int32_t wl = j < tl ? t[j] : j == tl ? TG_TOKEN_EOS : -100;
            if (dv != wd || lv != wl)
                fz_die(ctx, "fill: target row %lld col %lld", (long long)r, (long long)j);
        }
    }
    tg_ctx_rewind(ctx, mk);
}

static void check_batches(tg_ctx *ctx, const tg_seq2seq_data *d, int64_t extra, uint64_t seed)
{
    tg_seq2seq_info in = tg_seq2seq_get_info(d);
    int64_t longest = in.max_src > in.max_tgt ? in.max_src : in.max_tgt;
    int64_t budget = longest + extra;
    int64_t n = in.pairs;
    int *count = calloc((size_t)n, sizeof *count);
    if (!count)
        fz_die(ctx, "out of memory in the harness");
    for (int64_t epoch = 0; epoch < 2; epoch++) {
        tg_batches *b = tg_seq2seq_batches(d, budget, seed, epoch);
        if (!b) {
            if (tg_ctx_status(ctx) == TG_ERR_NOMEM)
                break;
            fz_die(ctx, "no batches for budget %lld", (long long)budget);
        }
        memset(count, 0, (size_t)n * sizeof *count);
        for (int64_t q = 0; q < tg_batches_count(b); q++) {
            tg_batch x = tg_batches_get(b, q);
            int64_t ms = 0, mt = 0;
            if (x.n < 1)
                fz_die(ctx, "an empty batch");
            for (int64_t k = 0; k < x.n; k++) {
                int64_t e = x.examples[k];
                if (e < 0 || e >= n || count[e]++)
                    fz_die(ctx, "example %lld twice or out of range", (long long)e);
                int64_t s = tg_seq2seq_src_len(d, e), t = tg_seq2seq_tgt_len(d, e);
                ms = s > ms ? s : ms;
                mt = t > mt ? t : mt;
            }
            if (ms != x.src_len || mt != x.tgt_len || x.n * (ms > mt ? ms : mt) > budget)
                fz_die(ctx, "batch %lld: S %lld T %lld n %lld budget %lld", (long long)q,
                       (long long)x.src_len, (long long)x.tgt_len, (long long)x.n,
                       (long long)budget);
        }
        for (int64_t i = 0; i < n; i++)
            if (count[i] != 1)
                fz_die(ctx, "example %lld is in no batch", (long long)i);
        if (epoch == 0)
            check_fill(ctx, d, tg_batches_get(b, 0));
        tg_batches_free(b);
    }
    free(count);
    size_t before = tg_ctx_bytes(ctx);
    if (tg_seq2seq_batches(d, longest - 1, seed, 0))
        fz_die(ctx, "a budget below the longest sequence was accepted");
    fz_check_failure(ctx, "tg_seq2seq_batches", before,
                     (const tg_status[]){TG_ERR_ARG, TG_OK});
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 4)
        return 0;
    size_t max_line = data[0] ? data[0] : TG_PAIRS_MAX_LINE;
    int64_t L = 2 + data[1] % 40;
    int64_t extra = data[2];
    uint64_t seed = data[3] >> 1;
    bool keep = data[3] & 1;
    const unsigned char *text = data + 4;
    size_t n = size - 4;

    mpair *want = malloc((n / 2 + 1) * sizeof *want); /* a pair needs at least 3 bytes */
    if (!want)
        return 0;
    int64_t good = 0;
    int64_t verdict = model(text, n, max_line, want, &good);

    fz_alloc a;
    tg_ctx *ctx = fz_ctx_new(&a, FZ_CAP);
    /* 1. the reader against the model */
    walk w = {ctx, want, good, 0, 0};
    tg_pairs_info info;
    size_t before = tg_ctx_bytes(ctx);
    size_t live0 = fz_peak_start(&a);
    tg_status st = tg_pairs_read_mem(ctx, text, n, "in.tsv", max_line, visit, &w, &info);
    if (max_line < 256)
        fz_check_peak(&a, live0, n, "tg_pairs_read_mem");
    if (verdict > 0) {
        if (st != TG_OK)
            fz_die(ctx, "the reader refused a valid file");
        if (w.seen != verdict || info.pairs != verdict)
            fz_die(ctx, "pairs: %lld seen, %lld counted, the model has %lld", (long long)w.seen,
                   (long long)info.pairs, (long long)verdict);
    } else {
        if (w.seen != good)
            fz_die(ctx, "%lld pairs before the refusal, the model has %lld", (long long)w.seen,
                   (long long)good);
        if (st == TG_OK)
            fz_die(ctx, "the reader accepted a file the model refuses (line %lld)",
                   (long long)-verdict);
        check_refusal(ctx, "tg_pairs_read_mem", before, -verdict);
    }
    if (info.bytes != (st == TG_OK ? n : info.bytes) ||
        (st == TG_OK && info.hash != fz_hash(text, n)))
        fz_die(ctx, "bytes or hash");

    /* 2. the same bytes as a file */
    char path[64];
    int fd = fz_file_open(text, n, path, sizeof path);
    if (fd >= 0) {
        tg_pairs_info fi;
        tg_status fst = tg_pairs_read(ctx, path, max_line, NULL, NULL, &fi);
        if (fst != st || (st == TG_OK && (fi.pairs != info.pairs || fi.hash != info.hash)))
            fz_die(ctx, "the file read differs from the memory read: %s vs %s",
                   tg_status_str(fst), tg_status_str(st));
        if (fst != TG_OK)
            fz_check_failure(ctx, "tg_pairs_read", before, read_errors);
        fz_file_close(fd);
    }

    /* 3-5. tokenized data and batches */
    if (verdict > 0) {
        tg_tokenizer *tok = tg_tokenizer_bytes(ctx);
        if (!tok)
            fz_die(ctx, "no byte tokenizer");
        tg_seq2seq_opts o = {.max_len = L, .max_line = max_line, .keep_text = keep};
        tg_seq2seq_data *d = tg_seq2seq_load_mem(ctx, text, n, "in.tsv", tok, &o);
        if (!d) {
            if (tg_ctx_status(ctx) != TG_ERR_NOMEM)
                fz_die(ctx, "tg_seq2seq_load_mem refused a valid file");
        } else {
            check_data(ctx, d, want, verdict, L, keep);
            check_batches(ctx, d, extra, seed);
            tg_seq2seq_free(d);
        }
        /* 5. out of memory at one allocation */
        size_t b0 = tg_ctx_bytes(ctx);
        uint64_t c0 = a.count;
        a.fail_at = c0 + 1 + fz_hash(data, size) % 12;
        d = tg_seq2seq_load_mem(ctx, text, n, "in.tsv", tok, &o);
        if (d)
            tg_seq2seq_free(d);
        else
            fz_check_failure(ctx, "tg_seq2seq_load_mem", b0,
                             (const tg_status[]){TG_ERR_NOMEM, TG_OK});
        a.fail_at = 0;
        tg_tokenizer_free(tok);
    }
    fz_ctx_free(ctx, &a);
    free(want);
    return 0;
}
