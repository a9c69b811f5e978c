/*
 * tokenizer.c - the tokenizer interface (tgrad_data.h) and the byte tokenizer.
 *
 * A tg_tokenizer is a small heap object: the implementation's operations and state, the
 * vocabulary size, the special ids and a copy of the serialized model (what checkpoints
 * store). The generic wrappers validate the arguments, check the text is UTF-8 before any
 * implementation sees it, check the ids an implementation returns, and make every decoded
 * text valid UTF-8 (U+FFFD for each maximal invalid subpart, as Python's errors="replace").
 */
#include "data.h"
#include "core.h"
#include "io/io.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct tg_tokenizer {
    tg_ctx *ctx;
    tg_tokenizer_ops ops;
    void *impl;
    int64_t vocab;
    tg_token_ids special;
    void *model;
    size_t model_size;
};

tg_tokenizer *tg_tokenizer_new(tg_ctx *ctx, const tg_tokenizer_ops *ops, void *impl,
                               int64_t vocab_size, tg_token_ids special, const void *model,
                               size_t model_size)
{
    static const char *fn = "tg_tokenizer_new";
    if (!ctx) {
        if (ops && ops->free)
            ops->free(impl);
        return NULL;
    }
    tg__begin(ctx);
    const char *why = NULL;
    if (!ops || !ops->encode || !ops->decode || !ops->kind || !ops->kind[0])
        why = "the operations need kind, encode and decode";
    else if (vocab_size < 1 || vocab_size > INT32_MAX)
        why = "the vocabulary size must be in [1, 2^31)";
    else if (special.bos < 0 || special.eos < 0)
        why = "the tokenizer needs bos and eos ids";
    else if (!model && model_size)
        why = "model is NULL with a nonzero size";
    int32_t ids[4] = {special.unk, special.bos, special.eos, special.pad};
    for (int i = 0; !why && i < 4; i++)
        if (ids[i] < -1 || ids[i] >= vocab_size)
            why = "a special id is outside [-1, vocab_size)";
    if (why) {
        if (ops && ops->free)
            ops->free(impl);
        tg__run_err(ctx, TG_ERR_ARG, fn, "%s", why);
        return NULL;
    }
    tg_tokenizer *t = calloc(1, sizeof *t);
    void *copy = model_size ? malloc(model_size) : NULL;
    if (!t || (model_size && !copy)) {
        free(t);
        free(copy);
        if (ops->free)
            ops->free(impl);
        tg__run_err(ctx, TG_ERR_NOMEM, fn, "out of memory (%zu bytes of model)", model_size);
        return NULL;
    }
    if (model_size)
        memcpy(copy, model, model_size);
    t->ctx = ctx;
    t->ops = *ops;
    t->impl = impl;
    t->vocab = vocab_size;
    t->special = special;
    t->model = copy;
    t->model_size = model_size;
    return t;
}

/* ----- the byte tokenizer ------------------------------------------------------------------ */
static int64_t bytes_encode(void *impl, const char *text, size_t n, int32_t *ids, int64_t cap,
                            char *err, size_t err_size)
{
    (void)impl, (void)err, (void)err_size;
    const unsigned char *p = (const unsigned char *)text;
    int64_t m = cap < (int64_t)n ? cap : (int64_t)n;
    for (int64_t i = 0; i < m; i++)
        ids[i] = 4 + (int32_t)p[i];
    return (int64_t)n;
}

static int64_t bytes_decode(void *impl, const int32_t *ids, int64_t n, char *out, size_t cap,
                            char *err, size_t err_size)
{
    (void)impl, (void)err, (void)err_size;
    size_t len = 0;
    for (int64_t i = 0; i < n; i++) {
        if (ids[i] < 4)
            continue; /* specials */
        if (len < cap)
            out[len] = (char)(unsigned char)(ids[i] - 4);
        len++;
    }
    return (int64_t)len;
}

static const tg_tokenizer_ops bytes_ops = {"bytes", bytes_encode, bytes_decode, NULL, NULL};

tg_tokenizer *tg_tokenizer_bytes(tg_ctx *ctx)
{
    tg_token_ids sp = {TG_TOKEN_UNK, TG_TOKEN_BOS, TG_TOKEN_EOS, TG_TOKEN_PAD};
    return tg_tokenizer_new(ctx, &bytes_ops, NULL, TG_BYTE_VOCAB, sp, NULL, 0);
}

/* ----- generic wrappers -------------------------------------------------------------------- */
/* The checks every encode call makes before the implementation sees the text. */
static bool text_ok(const tg_tokenizer *tok, const char *fn, const char *text, size_t n,
                    const int32_t *ids, int64_t cap)
{
    if ((!text && n) || cap < 0 || (!ids && cap > 0)) {
        tg__run_err(tok->ctx, TG_ERR_ARG, fn, "NULL text or ids, or a negative capacity");
        return false;
    }
    const void *nul = n ? memchr(text, 0, n) : NULL;
    if (nul) {
        tg__run_err(tok->ctx, TG_ERR_ARG, fn, "the text has a NUL byte at offset %zu",
                    (size_t)((const char *)nul - text));
        return false;
    }
    size_t bad;
    if (!tg__utf8_valid(text, n, &bad)) {
        tg__run_err(tok->ctx, TG_ERR_ARG, fn, "the text is not valid UTF-8 (byte %zu, 0x%02x)",
                    bad, (unsigned)(unsigned char)text[bad]);
        return false;
    }
    return true;
}

/* Whether the implementation's ids[0..m) are all in the vocabulary. */
static bool ids_ok(const tg_tokenizer *tok, const char *fn, const int32_t *ids, int64_t m)
{
    for (int64_t i = 0; i < m; i++)
        if (ids[i] < 0 || ids[i] >= tok->vocab) {
            tg__run_err(tok->ctx, TG_ERR_ARG, fn, "%s returned id %d outside [0, %lld)",
                        tok->ops.kind, (int)ids[i], (long long)tok->vocab);
            return false;
        }
    return true;
}

int64_t tg_tokenizer_encode(const tg_tokenizer *tok, const char *text, size_t n, int32_t *ids,
                            int64_t cap)
{
    static const char *fn = "tg_tokenizer_encode";
    if (!tok)
        return -1;
    tg__begin(tok->ctx);
    if (!text_ok(tok, fn, text, n, ids, cap))
        return -1;
    char err[256] = "";
    int64_t k = tok->ops.encode(tok->impl, text ? text : "", n, ids, cap, err, sizeof err);
    if (k < 0) {
        tg__run_err(tok->ctx, TG_ERR_ARG, fn, "%s: %s", tok->ops.kind,
                    err[0] ? err : "encoding failed");
        return -1;
    }
    return ids_ok(tok, fn, ids, k < cap ? k : cap) ? k : -1;
}

bool tg_tokenizer_can_sample(const tg_tokenizer *tok) { return tok && tok->ops.nbest; }

static tg_status nbest_get(const tg_tokenizer *tok, const char *fn, const char *text, size_t n,
                           int l, tg__nbest *nb)
{
    /* at most l segmentations of at most 4 n + 16 pieces each (normalization can expand a
     * character into a few) */
    int64_t cap = 256, bound = (int64_t)l * (4 * (int64_t)(n < INT32_MAX ? n : INT32_MAX) + 16);
    for (int round = 0;; round++) {
        nb->ids = malloc((size_t)cap * sizeof *nb->ids);
        if (!nb->ids) {
            tg__run_err(tok->ctx, TG_ERR_NOMEM, fn, "out of memory");
            return TG_ERR_NOMEM;
        }
        char err[256] = "";
        nb->count = 0;
        memset(nb->ends, 0, (size_t)l * sizeof *nb->ends);
        memset(nb->scores, 0, (size_t)l * sizeof *nb->scores);
        int64_t k = tok->ops.nbest(tok->impl, text ? text : "", n, l, nb->ids, cap, nb->ends,
                                   nb->scores, &nb->count, err, sizeof err);
        if (k < 0) {
            tg__run_err(tok->ctx, TG_ERR_ARG, fn, "%s: %s", tok->ops.kind,
                        err[0] ? err : "n-best encoding failed");
            return TG_ERR_ARG;
        }
        nb->n_ids = k;
        if (k <= cap)
            break;
        free(nb->ids);
        nb->ids = NULL;
        if (round > 0 || k > bound) { /* it asked twice, or for more than any text needs */
            tg__run_err(tok->ctx, TG_ERR_ARG, fn, "%s's n-best list asks for %lld ids for %zu "
                        "bytes of text", tok->ops.kind, (long long)k, n);
            return TG_ERR_ARG;
        }
        cap = k;
    }
    bool shape = nb->count >= 1 && nb->count <= l;
    for (int i = 0; shape && i < nb->count; i++)
        shape = nb->ends[i] >= (i ? nb->ends[i - 1] : 0) && isfinite(nb->scores[i]);
    if (!shape || nb->ends[nb->count - 1] != nb->n_ids) {
        tg__run_err(tok->ctx, TG_ERR_ARG, fn, "%s returned a malformed n-best list", tok->ops.kind);
        return TG_ERR_ARG;
    }
    return ids_ok(tok, fn, nb->ids, nb->n_ids) ? TG_OK : TG_ERR_ARG;
}

/* The segmentation drawn (tg_tokenizer_encode_sampled's rule); -1 if the weights are not
 * finite (scores far from best first). */
static int draw(const double *scores, int count, double alpha, uint64_t key)
{
    double w[TG_SAMPLE_MAX_NBEST], total = 0;
    for (int k = 0; k < count; k++) {
        w[k] = alpha == 0 ? 1.0 : exp(alpha * (scores[k] - scores[0]));
        total += w[k];
    }
    if (!isfinite(total))
        return -1;
    double u = (double)(tg__splitmix64(&key) >> 11) * 0x1p-53 * total, c = 0;
    for (int k = 0; k < count; k++) {
        c += w[k];
        if (u < c)
            return k;
    }
    return count - 1; /* rounding: u * total at the very end */
}

/* l in range and a tokenizer that can sample (else an error naming fn). */
static bool sample_args_ok(const tg_tokenizer *tok, const char *fn, int l, double alpha)
{
    if (l < 1 || l > TG_SAMPLE_MAX_NBEST || !(alpha >= 0 && alpha <= 100)) {
        tg__run_err(tok->ctx, TG_ERR_ARG, fn, "l %d must be in [1, %d] and alpha %g in [0, 100]", l,
                    TG_SAMPLE_MAX_NBEST, alpha);
        return false;
    }
    if (!tok->ops.nbest) {
        tg__run_err(tok->ctx, TG_ERR_UNSUPPORTED, fn,
                    "the %s tokenizer has one segmentation per text: nothing to sample",
                    tok->ops.kind);
        return false;
    }
    return true;
}

tg_status tg__tokenizer_nbest(const tg_tokenizer *tok, const char *text, size_t n, int l,
                              tg__nbest *nb)
{
    static const char *fn = "tg_tokenizer_encode_sampled";
    nb->ids = NULL;
    tg__begin(tok->ctx);
    if (!text_ok(tok, fn, text, n, NULL, 0) || !sample_args_ok(tok, fn, l, 0))
        return tg_ctx_status(tok->ctx);
    tg_status st = nbest_get(tok, fn, text, n, l, nb);
    if (st != TG_OK) {
        free(nb->ids);
        nb->ids = NULL;
    }
    return st;
}

int tg__tokenizer_draw(const tg_tokenizer *tok, const double *scores, int count, double alpha,
                       uint64_t key)
{
    int j = draw(scores, count, alpha, key);
    if (j < 0)
        tg__run_err(tok->ctx, TG_ERR_ARG, "tg_tokenizer_encode_sampled",
                    "%s's n-best scores are not in order (the weights overflow)", tok->ops.kind);
    return j;
}

int64_t tg__tokenizer_pick(const tg_tokenizer *tok, const int64_t *ends, const double *scores,
                           int count, const int32_t *list_ids, double alpha, uint64_t key,
                           int32_t *ids, int64_t cap)
{
    int j = tg__tokenizer_draw(tok, scores, count, alpha, key);
    if (j < 0)
        return -1;
    int64_t b = j > 0 ? ends[j - 1] : 0, k = ends[j] - b;
    if (k > 0 && cap > 0)
        memcpy(ids, list_ids + b, (size_t)(k < cap ? k : cap) * sizeof *ids);
    return k;
}

int64_t tg_tokenizer_encode_sampled(const tg_tokenizer *tok, const char *text, size_t n, int l,
                                    double alpha, uint64_t key, int32_t *ids, int64_t cap)
{
    static const char *fn = "tg_tokenizer_encode_sampled";
    if (!tok)
        return -1;
    tg__begin(tok->ctx);
    if (!text_ok(tok, fn, text, n, ids, cap) || !sample_args_ok(tok, fn, l, alpha))
        return -1;
    tg__nbest *nb = malloc(sizeof *nb);
    if (!nb) {
        tg__run_err(tok->ctx, TG_ERR_NOMEM, fn, "out of memory");
        return -1;
    }
    nb->ids = NULL;
    int64_t k = -1;
    if (nbest_get(tok, fn, text, n, l, nb) == TG_OK)
        k = tg__tokenizer_pick(tok, nb->ends, nb->scores, nb->count, nb->ids, alpha, key, ids, cap);
    free(nb->ids);
    free(nb);
    return k;
}

/* Length of the longest prefix of s[0..n) that can begin a valid UTF-8 sequence (1 if s[0]
 * cannot: a maximal invalid subpart is then that one byte), per Unicode's "substitution of
 * maximal subparts" (what Python's errors="replace" does). */
static size_t maximal_subpart(const unsigned char *s, size_t n)
{
    unsigned c = s[0];
    size_t need;
    unsigned lo = 0x80, hi = 0xBF;
    if (c >= 0xC2 && c <= 0xDF)
        need = 2;
    else if (c >= 0xE0 && c <= 0xEF) {
        need = 3;
        if (c == 0xE0)
            lo = 0xA0;
        if (c == 0xED)
            hi = 0x9F;
    } else if (c >= 0xF0 && c <= 0xF4) {
        need = 4;
        if (c == 0xF0)
            lo = 0x90;
        if (c == 0xF4)
            hi = 0x8F;
    } else
        return 1;
    size_t k = 1;
    if (k < n && k < need && s[k] >= lo && s[k] <= hi) {
        k++;
        while (k < n && k < need && (s[k] & 0xC0) == 0x80)
            k++;
    }
    return k;
}

int64_t tg_tokenizer_decode(const tg_tokenizer *tok, const int32_t *ids, int64_t n, char *out,
                            size_t cap)
{
    static const char *fn = "tg_tokenizer_decode";
    if (!tok)
        return -1;
    tg__begin(tok->ctx);
    if ((!ids && n) || n < 0 || (!out && cap)) {
        tg__run_err(tok->ctx, TG_ERR_ARG, fn, "NULL ids or output, or a negative count");
        return -1;
    }
    for (int64_t i = 0; i < n; i++)
        if (ids[i] < 0 || ids[i] >= tok->vocab) {
            tg__run_err(tok->ctx, TG_ERR_ARG, fn, "id %d (element %lld) is outside [0, %lld)",
                        (int)ids[i], (long long)i, (long long)tok->vocab);
            return -1;
        }
    /* The implementation sees the ids without the specials. */
    int32_t *kept = malloc((size_t)(n ? n : 1) * sizeof *kept);
    if (!kept) {
        tg__run_err(tok->ctx, TG_ERR_NOMEM, fn, "out of memory");
        return -1;
    }
    const tg_token_ids sp = tok->special;
    int64_t m = 0;
    for (int64_t i = 0; i < n; i++)
        if (ids[i] != sp.unk && ids[i] != sp.bos && ids[i] != sp.eos && ids[i] != sp.pad)
            kept[m++] = ids[i];
    char err[256] = "";
    char stackbuf[512];
    char *raw = stackbuf;
    int64_t len = tok->ops.decode(tok->impl, kept, m, raw, sizeof stackbuf, err, sizeof err);
    if (len > (int64_t)sizeof stackbuf) {
        raw = malloc((size_t)len);
        if (!raw) {
            free(kept);
            tg__run_err(tok->ctx, TG_ERR_NOMEM, fn, "out of memory (%lld bytes)", (long long)len);
            return -1;
        }
        int64_t again = tok->ops.decode(tok->impl, kept, m, raw, (size_t)len, err, sizeof err);
        if (again != len)
            len = again < 0 ? again : (again < len ? again : len);
    }
    free(kept);
    if (len < 0) {
        if (raw != stackbuf)
            free(raw);
        tg__run_err(tok->ctx, TG_ERR_ARG, fn, "%s: %s", tok->ops.kind,
                    err[0] ? err : "decoding failed");
        return -1;
    }
    /* Copy out, replacing invalid sequences (and NUL bytes, which no text line may hold) by
     * U+FFFD. */
    static const char repl[3] = {(char)0xEF, (char)0xBF, (char)0xBD};
    const unsigned char *s = (const unsigned char *)raw;
    size_t i = 0, o = 0, total = (size_t)len;
    while (i < total) {
        uint32_t cp;
        size_t k = tg__utf8_next(s + i, total - i, &cp);
        if (k && cp != 0) {
            for (size_t j = 0; j < k; j++, o++)
                if (o < cap)
                    out[o] = (char)s[i + j];
            i += k;
        } else {
            k = cp == 0 && k ? 1 : maximal_subpart(s + i, total - i);
            for (size_t j = 0; j < 3; j++, o++)
                if (o < cap)
                    out[o] = repl[j];
            i += k;
        }
    }
    if (o < cap)
        out[o] = '\0';
    if (raw != stackbuf)
        free(raw);
    return (int64_t)o;
}

int64_t tg_tokenizer_vocab_size(const tg_tokenizer *tok)
{
    return tok ? tok->vocab : 0;
}

tg_token_ids tg_tokenizer_special(const tg_tokenizer *tok)
{
    tg_token_ids none = {-1, -1, -1, -1};
    return tok ? tok->special : none;
}

const char *tg_tokenizer_kind(const tg_tokenizer *tok)
{
    return tok ? tok->ops.kind : "";
}

const void *tg_tokenizer_model(const tg_tokenizer *tok, size_t *size)
{
    if (size)
        *size = tok ? tok->model_size : 0;
    return tok ? tok->model : NULL;
}

tg_ctx *tg_tokenizer_ctx(const tg_tokenizer *tok)
{
    return tok ? tok->ctx : NULL;
}

void tg_tokenizer_free(tg_tokenizer *tok)
{
    if (!tok)
        return;
    if (tok->ops.free)
        tok->ops.free(tok->impl);
    free(tok->model);
    free(tok);
}

/* ----- checkpoint metadata: tokenizer.kind, tokenizer.model (base64) ------------------------ */
static const char b64_alphabet[] =
    "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

/* RFC 4648 section 4 with padding: 4 characters per 3 bytes (the last group padded with '='). */
static char *b64_encode(const unsigned char *p, size_t n)
{
    size_t groups = n / 3 + (n % 3 != 0);
    if (groups > (SIZE_MAX - 1) / 4)
        return NULL;
    char *out = malloc(4 * groups + 1), *o = out;
    if (!out)
        return NULL;
    for (size_t i = 0; i < n; i += 3) {
        uint32_t v = (uint32_t)p[i] << 16;
        if (i + 1 < n)
            v |= (uint32_t)p[i + 1] << 8;
        if (i + 2 < n)
            v |= p[i + 2];
        *o++ = b64_alphabet[v >> 18 & 63];
        *o++ = b64_alphabet[v >> 12 & 63];
        *o++ = i + 1 < n ? b64_alphabet[v >> 6 & 63] : '=';
        *o++ = i + 2 < n ? b64_alphabet[v & 63] : '=';
    }
    *o = '\0';
    return out;
}

static int b64_value(unsigned char c)
{
    if (c >= 'A' && c <= 'Z')
        return c - 'A';
    if (c >= 'a' && c <= 'z')
        return c - 'a' + 26;
    if (c >= '0' && c <= '9')
        return c - '0' + 52;
    return c == '+' ? 62 : c == '/' ? 63 : -1;
}

int tg_tokenizer_meta(const tg_tokenizer *tok, const char *keys[2], char *values[2])
{
    static const char *fn = "tg_tokenizer_meta";
    if (!tok || !keys || !values)
        return -1;
    tg__begin(tok->ctx);
    values[0] = values[1] = NULL;
    keys[0] = "tokenizer.kind";
    keys[1] = NULL;
    size_t kl = strlen(tok->ops.kind);
    values[0] = malloc(kl + 1);
    if (!values[0]) {
        tg__run_err(tok->ctx, TG_ERR_NOMEM, fn, "out of memory");
        return -1;
    }
    memcpy(values[0], tok->ops.kind, kl + 1);
    if (!tok->model_size)
        return 1;
    values[1] = b64_encode(tok->model, tok->model_size);
    if (!values[1]) {
        free(values[0]);
        values[0] = NULL;
        tg__run_err(tok->ctx, TG_ERR_NOMEM, fn, "out of memory (base64 of %zu bytes of model)",
                    tok->model_size);
        return -1;
    }
    keys[1] = "tokenizer.model";
    return 2;
}

/* Strict base64 of @p s (n characters) -> a malloc'd buffer in *out, *size bytes. */
static tg_status b64_decode_strict(tg_ctx *ctx, const char *fn, const char *s, size_t n,
                                   void **out, size_t *size)
{
    static const char *key = "metadata 'tokenizer.model'";
    if (n == 0)
        return tg__run_err(ctx, TG_ERR_FORMAT, fn, "%s is empty (expected the base64 of a "
                           "serialized model)", key), TG_ERR_FORMAT;
    if (n % 4 != 0)
        return tg__run_err(ctx, TG_ERR_FORMAT, fn, "%s: base64 of %zu characters (expected a "
                           "multiple of 4, padded with '=')", key, n), TG_ERR_FORMAT;
    size_t pad = s[n - 1] == '=' ? (s[n - 2] == '=' ? 2 : 1) : 0;
    size_t bytes = n / 4 * 3 - pad;
    if (bytes > TG_TOKENIZER_MAX_MODEL_BYTES)
        return tg__run_err(ctx, TG_ERR_FORMAT, fn, "%s: %zu bytes of model (at most %zu)", key,
                           bytes, (size_t)TG_TOKENIZER_MAX_MODEL_BYTES), TG_ERR_FORMAT;
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (b64_value(c) >= 0 || (c == '=' && i >= n - pad))
            continue;
        if (c == '=')
            return tg__run_err(ctx, TG_ERR_FORMAT, fn, "%s: padding '=' at offset %zu before "
                               "the end", key, i), TG_ERR_FORMAT;
        return tg__run_err(ctx, TG_ERR_FORMAT, fn, "%s: byte 0x%02x at offset %zu is not a "
                           "base64 character", key, c, i), TG_ERR_FORMAT;
    }
    /* the bits below the last byte must be 0 (RFC 4648 section 3.5: canonical encoding) */
    if ((pad == 1 && (b64_value((unsigned char)s[n - 2]) & 3)) ||
        (pad == 2 && (b64_value((unsigned char)s[n - 3]) & 15)))
        return tg__run_err(ctx, TG_ERR_FORMAT, fn, "%s: non-canonical base64 (nonzero padding "
                           "bits at offset %zu)", key, n - pad - 1), TG_ERR_FORMAT;
    unsigned char *p = malloc(bytes ? bytes : 1);
    if (!p)
        return tg__run_err(ctx, TG_ERR_NOMEM, fn, "out of memory (%zu bytes of model)", bytes),
               TG_ERR_NOMEM;
    size_t o = 0;
    for (size_t i = 0; i < n; i += 4) {
        uint32_t v = 0;
        for (int j = 0; j < 4; j++) {
            int d = b64_value((unsigned char)s[i + (size_t)j]);
            v = v << 6 | (uint32_t)(d < 0 ? 0 : d);
        }
        unsigned char g[3] = {(unsigned char)(v >> 16), (unsigned char)(v >> 8),
                              (unsigned char)v};
        for (int j = 0; j < 3 && o < bytes; j++)
            p[o++] = g[j];
    }
    *out = p;
    *size = bytes;
    return TG_OK;
}

tg_status tg_tokenizer_meta_read(tg_ctx *ctx, const tg_safetensors *st, const char **kind,
                                 void **model, size_t *size)
{
    static const char *fn = "tg_tokenizer_meta_read";
    if (!ctx)
        return TG_ERR_ARG;
    tg__begin(ctx);
    if (!st || !kind || !model || !size)
        return tg__run_err(ctx, TG_ERR_ARG, fn, "NULL argument"), TG_ERR_ARG;
    *kind = NULL;
    *model = NULL;
    *size = 0;
    const char *k = tg_safetensors_meta_get(st, "tokenizer.kind");
    const char *b64 = tg_safetensors_meta_get(st, "tokenizer.model");
    if (!k)
        return tg__run_err(ctx, TG_ERR_FORMAT, fn, "metadata 'tokenizer.kind' is missing "
                           "(expected bytes or sentencepiece)"), TG_ERR_FORMAT;
    bool spm = !strcmp(k, "sentencepiece");
    if (!spm && strcmp(k, "bytes") != 0) {
        char q[56];
        return tg__run_err(ctx, TG_ERR_FORMAT, fn, "metadata 'tokenizer.kind' is '%s' "
                           "(expected bytes or sentencepiece)", tg__quote(k, 48, q)),
               TG_ERR_FORMAT;
    }
    if (!spm) {
        if (b64)
            return tg__run_err(ctx, TG_ERR_FORMAT, fn, "metadata 'tokenizer.model' is present "
                               "but tokenizer.kind is bytes (which has no model)"),
                   TG_ERR_FORMAT;
        *kind = k;
        return TG_OK;
    }
    if (!b64)
        return tg__run_err(ctx, TG_ERR_FORMAT, fn, "metadata 'tokenizer.model' is missing "
                           "(tokenizer.kind sentencepiece needs the serialized model)"),
               TG_ERR_FORMAT;
    tg_status s = b64_decode_strict(ctx, fn, b64, strlen(b64), model, size);
    if (s == TG_OK)
        *kind = k;
    return s;
}
