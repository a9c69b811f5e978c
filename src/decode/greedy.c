/*
 * greedy.c - greedy decoding of a fixed length with the encoder-decoder model
 * (include/tgrad_decode.h, "Greedy decoding of a fixed length"): the held-out accuracy of
 * `tgrad train --arch seq2seq` and `tgrad sample --source`.
 *
 * Cached path (the default): a tg_generator encodes the sources once (tg_generator_set_source:
 * the encoder and every decoder layer's memory keys and values), then each step feeds the
 * previous token of every row (BOS first) and takes the argmax of the last position's logits:
 * one position through the decoder per step.
 * Uncached path: one no_grad graph over a batch of sources (B, T) and target prefixes (B, T)
 * -> logits (B, T, V), built once. Step i runs the whole graph and takes the argmax at target
 * position i; the causal target mask makes position i depend only on decoder inputs <= i, so
 * the not yet decoded positions (filled with BOS) do not matter. Each step costs a whole
 * forward pass (the encoder included). Both give the same tokens (tested).
 */
#include "tgrad_decode.h"
#include "core.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

struct tg_greedy {
    tg_ctx *ctx;
    const tg_transformer *model;
    int64_t B, T, V;      /* batch, sequence length (source = target), vocabulary */
    int32_t bos;
    tg_tensor *src, *tgt; /* (B, T) i32 inputs of the uncached graph */
    tg_tensor *logits;    /* (B, T, V) */
    tg_graph *g;
    tg_generator *gen;    /* the cached path, or NULL */
    int32_t *dec;         /* (B, T) decoder inputs */
    double *row;          /* (B V) logits of one step (cached), or (V) of one position */
};

static const char *FN_NEW = "tg_greedy_new", *FN = "tg_greedy_decode";

/* The cached path's generator and buffers; false with the error on the context. */
static bool init_cached(tg_greedy *d, tg_precision precision)
{
    d->gen = tg_generator_new(d->ctx, d->model, d->B);
    d->dec = malloc(sizeof(int32_t) * (size_t)d->B);
    d->row = malloc(sizeof(double) * (size_t)(d->B * d->V));
    if (d->gen && (!d->dec || !d->row))
        tg__run_err(d->ctx, TG_ERR_NOMEM, FN_NEW, "out of memory");
    return d->gen && d->dec && d->row && tg_generator_set_precision(d->gen, precision) == TG_OK;
}

/* The uncached path's graph and buffers; false with the error on the context. */
static bool init_graph(tg_greedy *d, tg_precision precision)
{
    d->src = tg_input(d->ctx, TG_I32, TG_DIMS(d->B, d->T), "src_ids");
    d->tgt = tg_input(d->ctx, TG_I32, TG_DIMS(d->B, d->T), "tgt_ids");
    d->logits = tg_transformer_forward_seq2seq(d->ctx, d->model, d->src, d->tgt, NULL, NULL);
    /* inference: no gradients, nothing saved */
    tg_graph_opts go = {.no_grad = true, .precision = precision};
    d->g = tg_graph_new_opts(d->ctx, &d->logits, 1, &go);
    if (!d->g)
        return false;
    d->dec = malloc(sizeof(int32_t) * (size_t)(d->B * d->T));
    d->row = malloc(sizeof(double) * (size_t)d->V);
    if (!d->dec || !d->row) {
        tg__run_err(d->ctx, TG_ERR_NOMEM, FN_NEW, "out of memory");
        return false;
    }
    return true;
}

tg_greedy *tg_greedy_new(tg_ctx *ctx, const tg_transformer *m, int64_t B, int64_t T,
                         int32_t bos, bool no_cache, tg_precision precision)
{
    if (!ctx)
        return NULL;
    tg__begin(ctx);
    if (!m || m->cfg.n_decoder_layers < 1 || B < 1 || T < 1 || bos < 0 ||
        bos >= m->cfg.vocab_size) {
        tg__run_err(ctx, TG_ERR_ARG, FN_NEW, "needs an encoder-decoder model, B and T >= 1 "
                    "and bos in [0, V)");
        return NULL;
    }
    tg_greedy *d = calloc(1, sizeof *d);
    if (!d) {
        tg__run_err(ctx, TG_ERR_NOMEM, FN_NEW, "out of memory");
        return NULL;
    }
    *d = (tg_greedy){.ctx = ctx, .model = m, .B = B, .T = T, .V = m->cfg.vocab_size,
                     .bos = bos};
    if (!(no_cache ? init_graph(d, precision) : init_cached(d, precision))) {
        tg_greedy_free(d);
        return NULL;
    }
    return d;
}

void tg_greedy_free(tg_greedy *d)
{
    if (!d)
        return;
    free(d->dec);
    free(d->row);
    free(d);
}

/* The argmax of @p v (n values; the first of equal ones), or -1 if one is not finite. */
static int argmax_finite(const double *v, int64_t n)
{
    int64_t best = 0;
    for (int64_t i = 0; i < n; i++) {
        if (!isfinite(v[i]))
            return -1;
        if (v[i] > v[best])
            best = i;
    }
    return (int)best;
}

static tg_status nonfinite(tg_greedy *d, int64_t b, int64_t i)
{
    tg__run_err(d->ctx, TG_ERR_NONFINITE, FN, "row %lld, step %lld: a logit is not finite",
                (long long)b, (long long)i);
    return TG_ERR_NONFINITE;
}

static tg_status failed(const tg_ctx *ctx)
{
    tg_status s = tg_ctx_status(ctx);
    return s != TG_OK ? s : TG_ERR_STATE;
}

/* Greedy decoding through the generator: the source once, then one token per step. */
static tg_status greedy_cached(tg_greedy *d, const int32_t *src, int32_t *out)
{
    int64_t B = d->B, T = d->T, V = d->V;
    if (tg_generator_set_source(d->gen, src, T) != TG_OK)
        return failed(d->ctx);
    for (int64_t b = 0; b < B; b++)
        d->dec[b] = d->bos;
    for (int64_t i = 0; i < T; i++) {
        if (tg_generator_feed(d->gen, d->dec, 1) != TG_OK ||
            tg_tensor_get_data(tg_generator_logits(d->gen), d->row, TG_F64,
                               (size_t)(B * V)) != TG_OK)
            return failed(d->ctx);
        for (int64_t b = 0; b < B; b++) {
            int next = argmax_finite(d->row + b * V, V);
            if (next < 0)
                return nonfinite(d, b, i);
            out[b * T + i] = next;
            d->dec[b] = next;
        }
    }
    return TG_OK;
}

/* Greedy decoding through the whole graph, one target position per step. */
static tg_status greedy_graph(tg_greedy *d, const int32_t *src, int32_t *out)
{
    int64_t B = d->B, T = d->T, V = d->V;
    size_t bt = (size_t)(B * T);
    for (size_t i = 0; i < bt; i++)
        d->dec[i] = d->bos; /* positions not decoded yet: masked off by causality */
    if (tg_tensor_set_data(d->src, src, TG_I32, bt) != TG_OK)
        return failed(d->ctx);
    for (int64_t i = 0; i < T; i++) {
        if (tg_tensor_set_data(d->tgt, d->dec, TG_I32, bt) != TG_OK ||
            tg_graph_forward(d->g) != TG_OK)
            return failed(d->ctx);
        for (int64_t b = 0; b < B; b++) {
            int64_t base = (b * T + i) * V;
            for (int64_t v = 0; v < V; v++)
                d->row[v] = tg_get(d->logits, base + v);
            int next = argmax_finite(d->row, V);
            if (next < 0)
                return nonfinite(d, b, i);
            out[b * T + i] = next;
            if (i + 1 < T)
                d->dec[b * T + i + 1] = next;
        }
    }
    return TG_OK;
}

tg_status tg_greedy_decode(tg_greedy *d, const int32_t *src, int32_t *out)
{
    if (!d)
        return TG_ERR_ARG;
    tg__begin(d->ctx);
    if (!src || !out) {
        tg__run_err(d->ctx, TG_ERR_ARG, FN, "NULL argument");
        return TG_ERR_ARG;
    }
    return d->gen ? greedy_cached(d, src, out) : greedy_graph(d, src, out);
}
