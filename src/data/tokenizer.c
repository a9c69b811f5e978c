/*
 * tokenizer.c - the tokenizer interface (tgrad_data.h) and the byte tokenizer.
 *
 * A tg_tokenizer is a small heap object: the implementation's operations and state, the
 * vocabulary size, the special ids and a copy of the serialized model (what checkpoints
 * store). The generic wrappers validate the arguments, check the text is UTF-8 before any
 * implementation sees it, check the ids an implementation returns, and make every decoded
 * text valid UTF-8 (U+FFFD for each maximal invalid subpart, as Python's errors="replace").
 */
#include "tgrad_data.h"
#include "core.h"

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

static const tg_tokenizer_ops bytes_ops = {"bytes", bytes_encode, bytes_decode, NULL};

tg_tokenizer *tg_tokenizer_bytes(tg_ctx *ctx)
{
    tg_token_ids sp = {TG_TOKEN_UNK, TG_TOKEN_BOS, TG_TOKEN_EOS, TG_TOKEN_PAD};
    return tg_tokenizer_new(ctx, &bytes_ops, NULL, TG_BYTE_VOCAB, sp, NULL, 0);
}

/* ----- generic wrappers -------------------------------------------------------------------- */
int64_t tg_tokenizer_encode(const tg_tokenizer *tok, const char *text, size_t n, int32_t *ids,
                            int64_t cap)
{
    static const char *fn = "tg_tokenizer_encode";
    if (!tok)
        return -1;
    tg__begin(tok->ctx);
    if ((!text && n) || cap < 0 || (!ids && cap > 0)) {
        tg__run_err(tok->ctx, TG_ERR_ARG, fn, "NULL text or ids, or a negative capacity");
        return -1;
    }
    const void *nul = n ? memchr(text, 0, n) : NULL;
    if (nul) {
        tg__run_err(tok->ctx, TG_ERR_ARG, fn, "the text has a NUL byte at offset %zu",
                    (size_t)((const char *)nul - text));
        return -1;
    }
    size_t bad;
    if (!tg__utf8_valid(text, n, &bad)) {
        tg__run_err(tok->ctx, TG_ERR_ARG, fn, "the text is not valid UTF-8 (byte %zu, 0x%02x)",
                    bad, (unsigned)(unsigned char)text[bad]);
        return -1;
    }
    char err[256] = "";
    int64_t k = tok->ops.encode(tok->impl, text ? text : "", n, ids, cap, err, sizeof err);
    if (k < 0) {
        tg__run_err(tok->ctx, TG_ERR_ARG, fn, "%s: %s", tok->ops.kind,
                    err[0] ? err : "encoding failed");
        return -1;
    }
    int64_t m = k < cap ? k : cap;
    for (int64_t i = 0; i < m; i++)
        if (ids[i] < 0 || ids[i] >= tok->vocab) {
            tg__run_err(tok->ctx, TG_ERR_ARG, fn, "%s returned id %d outside [0, %lld)",
                        tok->ops.kind, (int)ids[i], (long long)tok->vocab);
            return -1;
        }
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
