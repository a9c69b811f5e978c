/* seq2seq.c - greedy decoding of the encoder-decoder model (see seq2seq.h). */
#include "seq2seq.h"
#include "train_args.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

void s2s_shift_right(int64_t B, int64_t T, const int32_t *labels, int32_t *dec)
{
    for (int64_t b = 0; b < B; b++) {
        dec[b * T] = SEQ2SEQ_BOS;
        for (int64_t t = 1; t < T; t++)
            dec[b * T + t] = labels[b * T + t - 1];
    }
}

bool s2s_decoder_init(s2s_decoder *d, tg_ctx *ctx, const tg_transformer *m, int64_t B,
                      int64_t T, bool no_cache, int precision)
{
    memset(d, 0, sizeof *d);
    d->ctx = ctx;
    d->model = m;
    d->B = B;
    d->T = T;
    d->V = m->cfg.vocab_size;
    if (!no_cache) {
        d->gen = tg_generator_new(ctx, m, B);
        d->dec = malloc(sizeof(int32_t) * (size_t)B);
        d->row = malloc(sizeof(double) * (size_t)(B * d->V));
        if (!d->gen || !d->dec || !d->row ||
            tg_generator_set_precision(d->gen, precision) != TG_OK) {
            s2s_decoder_free(d);
            return false;
        }
        return true;
    }
    d->src = tg_input(ctx, TG_I32, TG_DIMS(B, T), "src_ids");
    d->tgt = tg_input(ctx, TG_I32, TG_DIMS(B, T), "tgt_ids");
    d->logits = tg_transformer_forward_seq2seq(ctx, m, d->src, d->tgt, NULL, NULL);
    /* inference: no gradients, nothing saved */
    tg_graph_opts go = {.no_grad = true, .precision = precision};
    d->g = tg_graph_new_opts(ctx, &d->logits, 1, &go);
    if (!d->g)
        return false;
    d->dec = malloc(sizeof(int32_t) * (size_t)(B * T));
    d->row = malloc(sizeof(double) * (size_t)d->V);
    if (!d->dec || !d->row) {
        s2s_decoder_free(d);
        return false;
    }
    return true;
}

void s2s_decoder_free(s2s_decoder *d)
{
    free(d->dec);
    free(d->row);
    d->dec = NULL;
    d->row = NULL;
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

/* Greedy decoding through the generator: the source once, then one token per step. */
static s2s_status greedy_cached(s2s_decoder *d, const int32_t *src, int32_t *out)
{
    int64_t B = d->B, T = d->T, V = d->V;
    if (tg_generator_set_source(d->gen, src, T) != TG_OK)
        return S2S_ERROR;
    for (int64_t b = 0; b < B; b++)
        d->dec[b] = SEQ2SEQ_BOS;
    for (int64_t i = 0; i < T; i++) {
        if (tg_generator_feed(d->gen, d->dec, 1) != TG_OK ||
            tg_tensor_get_data(tg_generator_logits(d->gen), d->row, TG_F64,
                               (size_t)(B * V)) != TG_OK)
            return S2S_ERROR;
        for (int64_t b = 0; b < B; b++) {
            int next = argmax_finite(d->row + b * V, V);
            if (next < 0)
                return S2S_NONFINITE;
            out[b * T + i] = next;
            d->dec[b] = next;
        }
    }
    return S2S_OK;
}

s2s_status s2s_greedy(s2s_decoder *d, const int32_t *src, int32_t *out)
{
    int64_t B = d->B, T = d->T, V = d->V;
    if (d->gen)
        return greedy_cached(d, src, out);
    if (!d->g || !d->dec)
        return S2S_ERROR;
    size_t bt = (size_t)(B * T);
    for (size_t i = 0; i < bt; i++)
        d->dec[i] = SEQ2SEQ_BOS; /* positions not decoded yet: masked off by causality */
    if (tg_tensor_set_data(d->src, src, TG_I32, bt) != TG_OK)
        return S2S_ERROR;
    for (int64_t i = 0; i < T; i++) {
        if (tg_tensor_set_data(d->tgt, d->dec, TG_I32, bt) != TG_OK ||
            tg_graph_forward(d->g) != TG_OK)
            return S2S_ERROR;
        for (int64_t b = 0; b < B; b++) {
            int64_t base = (b * T + i) * V;
            for (int64_t v = 0; v < V; v++)
                d->row[v] = tg_get(d->logits, base + v);
            int next = argmax_finite(d->row, V);
            if (next < 0)
                return S2S_NONFINITE;
            out[b * T + i] = next;
            if (i + 1 < T)
                d->dec[b * T + i + 1] = next;
        }
    }
    return S2S_OK;
}
