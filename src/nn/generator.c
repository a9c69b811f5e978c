/*
 * generator.c - incremental decoding of the decoder-only LM (tg_transformer with cfg.causal)
 * through a KV cache: prefill a prompt, then one token at a time.
 *
 * Graphs have static shapes, so a feed of n tokens runs a graph built for n:
 *   ids (B, n) i32, pos_ids (n) i32 = pos..pos+n-1, pos (1) i32
 *   x      = tok_emb[ids] + P[pos_ids]             (B, n, D)   P: pos_emb.weight or the
 *                                                              sinusoidal table (max_len, D)
 *   x      = layer_i(x)  with self-attention       (B, n, D)   tg_kv_attention over layer i's
 *            over the cache (tg_kv_attention)                  cache (writes rows pos..pos+n-1)
 *   logits = LN(x[:, n-1]) head_w^T + head_b       (B, 1, V)   the last position only
 * Each layer is tg_encoder_layer_forward()'s (post-norm or pre-norm, relu/gelu, dense_act when
 * fusion is on) with the attention replaced and no dropout (inference); the tests compare every
 * configuration against tg_transformer_forward() on the whole sequence.
 * Graphs: the step graph (n = 1) and the refill graph (n = max(1, max_len / 2), what the wrap
 * at max_len re-prefills) are built once by tg_generator_new(); a prompt of any other length
 * gets a graph built after tg_ctx_mark() and released by tg_ctx_rewind() once its logits are
 * copied, so feeding any number of tokens does not grow the context.
 */
#include "nn_internal.h"
#include "tgrad_train.h"
#include "core.h"

#include <math.h>
#include <stdio.h>

typedef struct gen_graph {
    int64_t n;                          /* new positions per run */
    tg_tensor *ids, *pos_ids, *pos;     /* (B, n), (n), (1) i32 inputs */
    tg_tensor *logits;                  /* (B, 1, V) */
    tg_graph *g;
} gen_graph;

struct tg_generator {
    tg_ctx *ctx;
    const tg_transformer *m;
    int64_t B, L, V, D, H, n_layers;
    int64_t len;                        /* positions the caches hold */
    int64_t refill_n;                   /* tokens kept at the wrap: max(1, L / 2) */
    tg_tensor **kc, **vc;               /* per layer: (B, H, Dh, L) keys transposed, (B, H, L, Dh) */
    tg_tensor *pe;                      /* (L, D) sinusoidal table, or NULL (learned) */
    tg_tensor *logits;                  /* (B, V): the last feed's last-position logits */
    int32_t *hist;                      /* (B, L): tokens at positions 0..len-1 of each row */
    int32_t *buf;                       /* (B, L): tokens of a wrap's re-prefill */
    int32_t *pbuf;                      /* (L): position ids */
    gen_graph step, refill;
    bool freed;
};

/* Self-attention of one layer over its cache: one in_proj product read as q, k, v head views
 * (as tg_mha_forward's fused path), tg_kv_attention, heads merged, out_proj. */
static tg_tensor *self_attn_cached(tg_ctx *ctx, const tg_mha *a, tg_tensor *x, tg_tensor *kc,
                                   tg_tensor *vc, tg_tensor *pos)
{
    int64_t B = tg_tensor_dim(x, 0), n = tg_tensor_dim(x, 1), D = a->d_model, H = a->n_heads;
    int64_t Dh = D / H;
    tg_tensor *qkv = tg_dense(ctx, x, a->in_proj_weight, a->in_proj_bias); /* (B, n, 3D) */
    qkv = tg_transpose(ctx, tg_reshape(ctx, qkv, TG_DIMS(B, n, 3 * H, Dh)), 1, 2);
    tg_tensor *q = tg_narrow(ctx, qkv, 1, 0, H);                        /* (B, H, n, Dh) each */
    tg_tensor *k = tg_narrow(ctx, qkv, 1, H, H);
    tg_tensor *v = tg_narrow(ctx, qkv, 1, 2 * H, H);
    tg_tensor *o = tg_kv_attention(ctx, q, k, v, kc, vc, pos, 1.0 / sqrt((double)Dh));
    o = tg_reshape(ctx, tg_transpose(ctx, o, 1, 2), TG_DIMS(B, n, D));  /* (B, n, D) */
    return tg_dense(ctx, o, a->out_proj_weight, a->out_proj_bias);
}

/* tg_encoder_layer_forward() (its sublayer pieces, encoder.c) with the cached self-attention
 * and no dropout. */
static tg_tensor *layer_cached(tg_ctx *ctx, const tg_encoder_layer *l, tg_tensor *x,
                               tg_tensor *kc, tg_tensor *vc, tg_tensor *pos)
{
    tg_encoder_config c = l->cfg;
    c.dropout = 0; /* inference */
    tg_tensor *h = tg__nn_sublayer_in(ctx, &c, x, l->norm1_weight, l->norm1_bias);
    tg_tensor *sa = self_attn_cached(ctx, &l->self_attn, h, kc, vc, pos);
    x = tg__nn_sublayer_out(ctx, &c, x, sa, l->norm1_weight, l->norm1_bias); /* (B, n, D) */
    h = tg__nn_sublayer_in(ctx, &c, x, l->norm2_weight, l->norm2_bias);
    tg_tensor *ff = tg__nn_ff_block(ctx, &l->ffn, h, 0);
    return tg__nn_sublayer_out(ctx, &c, x, ff, l->norm2_weight, l->norm2_bias);
}

/* Build the graph that feeds n tokens (no_grad). Returns the status (error recorded). */
static tg_status build_graph(tg_generator *gen, int64_t n, gen_graph *gg)
{
    tg_ctx *ctx = gen->ctx;
    const tg_transformer *m = gen->m;
    memset(gg, 0, sizeof *gg);
    gg->n = n;
    gg->ids = tg_input(ctx, TG_I32, TG_DIMS(gen->B, n), "generator.ids");
    gg->pos_ids = tg_input(ctx, TG_I32, TG_DIMS(n), "generator.pos_ids");
    gg->pos = tg_input(ctx, TG_I32, TG_DIMS(1), "generator.pos");
    if (!gg->ids || !gg->pos_ids || !gg->pos)
        return tg_ctx_status(ctx);
    tg_tensor *x = tg_embedding(ctx, gg->ids, m->tok_emb);               /* (B, n, D) */
    x = tg_add(ctx, x, tg_embedding(ctx, gg->pos_ids, m->pos_emb ? m->pos_emb : gen->pe));
    for (int64_t i = 0; i < gen->n_layers; i++)
        x = layer_cached(ctx, &m->layers[i], x, gen->kc[i], gen->vc[i], gg->pos);
    x = tg_narrow(ctx, x, 1, n - 1, 1);                                  /* (B, 1, D) */
    x = tg_layer_norm(ctx, x, m->norm_w, m->norm_b, m->cfg.layer.layer_norm_eps);
    gg->logits = tg_dense(ctx, x, m->head_w, m->head_b);                 /* (B, 1, V) */
    if (!gg->logits)
        return tg__nn_status(ctx) != TG_OK ? tg__nn_status(ctx) : TG_ERR_ARG;
    tg_graph_opts go;
    memset(&go, 0, sizeof go);
    go.no_grad = true;
    gg->g = tg_graph_new_opts(ctx, &gg->logits, 1, &go);
    return gg->g ? TG_OK : tg_ctx_status(ctx);
}

tg_generator *tg_generator_new(tg_ctx *ctx, const tg_transformer *m, int64_t batch)
{
    static const char *fn = "tg_generator_new";
    if (!ctx)
        return NULL;
    tg__begin(ctx);
    if (tg__build_failed(ctx))
        return NULL; /* a build error is pending: keep it, allocate nothing */
    if (!m || !m->tok_emb || !m->head_w || !m->norm_w || m->cfg.n_layers < 0 ||
        m->cfg.n_layers > TG_TRANSFORMER_MAX_LAYERS || (m->cfg.n_layers > 0 && !m->layers))
        return tg__err(ctx, TG_ERR_ARG, fn, "model is NULL or not initialised");
    if (m->cfg.n_decoder_layers > 0)
        return tg__err(ctx, TG_ERR_ARG, fn,
                       "the model is an encoder-decoder (seq2seq): this generator decodes the "
                       "decoder-only LM (cfg.causal) only");
    if (!m->cfg.causal)
        return tg__err(ctx, TG_ERR_ARG, fn,
                       "the model is not causal (an encoder classifier): only the decoder-only "
                       "LM (cfg.causal) generates");
    if (batch < 1 || batch > TG_MAX_NUMEL)
        return tg__err(ctx, TG_ERR_ARG, fn, "batch %lld must be >= 1", (long long)batch);
    int64_t L = m->cfg.max_seq_len, D = m->cfg.layer.d_model, V = m->cfg.vocab_size;
    int64_t H = m->cfg.n_layers > 0 ? m->cfg.layer.n_heads : 1, NL = m->cfg.n_layers;
    tg_dtype dt = tg_tensor_dtype(m->tok_emb);
    int64_t cells, hb;
    size_t hist_bytes;
    if (!tg__mul_i64(batch, L, &cells) || !tg__bytes(cells, sizeof(int32_t), &hist_bytes) ||
        !tg__mul_i64(batch, D, &hb) || !tg__mul_i64(hb, L, &hb) || hb > TG_MAX_NUMEL)
        return tg__err(ctx, TG_ERR_OVERFLOW, fn,
                       "batch %lld with max_seq_len %lld and d_model %lld: caches too large",
                       (long long)batch, (long long)L, (long long)D);
    tg_mark mark = tg_ctx_mark(ctx); /* on failure everything made here is released */
    tg_generator *gen = tg__alloc(ctx, sizeof *gen, fn);
    if (!gen)
        return NULL;
    gen->ctx = ctx;
    gen->m = m;
    gen->B = batch;
    gen->L = L;
    gen->V = V;
    gen->D = D;
    gen->H = H;
    gen->n_layers = NL;
    gen->refill_n = L / 2 > 1 ? L / 2 : 1;
    gen->hist = tg__alloc(ctx, hist_bytes, fn);
    gen->buf = tg__alloc(ctx, hist_bytes, fn);
    gen->pbuf = tg__alloc(ctx, sizeof(int32_t) * (size_t)L, fn);
    if (NL > 0) {
        gen->kc = tg__alloc(ctx, sizeof(tg_tensor *) * (size_t)NL, fn);
        gen->vc = tg__alloc(ctx, sizeof(tg_tensor *) * (size_t)NL, fn);
    }
    if (!gen->hist || !gen->buf || !gen->pbuf || (NL > 0 && (!gen->kc || !gen->vc)))
        goto fail;
    int64_t Dh = D / H;
    for (int64_t i = 0; i < NL; i++) {
        char name[64];
        snprintf(name, sizeof name, "generator.k_cache.%lld", (long long)i);
        gen->kc[i] = tg_input(ctx, dt, TG_DIMS(batch, H, Dh, L), name);
        snprintf(name, sizeof name, "generator.v_cache.%lld", (long long)i);
        gen->vc[i] = tg_input(ctx, dt, TG_DIMS(batch, H, L, Dh), name);
        if (!gen->kc[i] || !gen->vc[i])
            goto fail;
    }
    if (!m->pos_emb && !(gen->pe = tg_sinusoidal_encoding(ctx, dt, L, D)))
        goto fail;
    gen->logits = tg_input(ctx, dt, TG_DIMS(batch, V), "generator.logits");
    if (!gen->logits || build_graph(gen, 1, &gen->step) != TG_OK ||
        (gen->refill_n > 1 && build_graph(gen, gen->refill_n, &gen->refill) != TG_OK))
        goto fail;
    return gen;
fail:
    if (tg_ctx_status(ctx) == TG_OK)
        tg__err(ctx, TG_ERR_NOMEM, fn, "out of memory");
    tg_ctx_rewind(ctx, mark); /* the error stays recorded */
    return NULL;
}

/* Run @p gg (built for gg->n tokens) on tokens (B, gg->n) at positions start..; copies the
 * logits into gen->logits. */
static tg_status run_graph(tg_generator *gen, gen_graph *gg, const int32_t *tokens,
                           int64_t start)
{
    int64_t n = gg->n;
    for (int64_t i = 0; i < n; i++)
        gen->pbuf[i] = (int32_t)(start + i);
    int32_t p = (int32_t)start;
    tg_status s = tg_tensor_set_data(gg->ids, tokens, TG_I32, (size_t)(gen->B * n));
    if (s == TG_OK)
        s = tg_tensor_set_data(gg->pos_ids, gen->pbuf, TG_I32, (size_t)n);
    if (s == TG_OK)
        s = tg_tensor_set_data(gg->pos, &p, TG_I32, 1);
    if (s == TG_OK)
        s = tg_graph_forward(gg->g);
    if (s == TG_OK)
        memcpy(tg_tensor_data(gen->logits), tg_tensor_data(gg->logits),
               (size_t)(gen->B * gen->V) * tg_dtype_size(tg_tensor_dtype(gen->logits)));
    return s;
}

/* Feed tokens (B, n) at positions start..start+n-1 through the right graph. */
static tg_status run_tokens(tg_generator *gen, const int32_t *tokens, int64_t n, int64_t start)
{
    if (n == 1)
        return run_graph(gen, &gen->step, tokens, start);
    if (n == gen->refill_n)
        return run_graph(gen, &gen->refill, tokens, start);
    /* any other length: a graph of its own, released before returning */
    tg_ctx *ctx = gen->ctx;
    tg_mark mark = tg_ctx_mark(ctx);
    gen_graph gg;
    tg_status s = build_graph(gen, n, &gg);
    if (s == TG_OK)
        s = run_graph(gen, &gg, tokens, start);
    tg_ctx_rewind(ctx, mark); /* keeps the error state */
    return s;
}

tg_status tg_generator_feed(tg_generator *gen, const int32_t *ids, int64_t n)
{
    static const char *fn = "tg_generator_feed";
    if (!gen || gen->freed)
        return TG_ERR_ARG;
    tg_ctx *ctx = gen->ctx;
    tg__begin(ctx);
    if (!ids || n < 1 || n > TG_MAX_NUMEL / gen->B) {
        tg__run_err(ctx, TG_ERR_ARG, fn, "ids %s with n = %lld (need n >= 1 tokens per row)",
                    ids ? "given" : "is NULL", (long long)n);
        return TG_ERR_ARG;
    }
    /* every id checked first: a bad one changes nothing */
    for (int64_t r = 0; r < gen->B; r++)
        for (int64_t i = 0; i < n; i++) {
            int32_t id = ids[r * n + i];
            if (id < 0 || id >= gen->V) {
                tg__run_err(ctx, TG_ERR_ARG, fn,
                            "ids[%lld][%lld] = %lld is not a token id in [0, %lld)",
                            (long long)r, (long long)i, (long long)id, (long long)gen->V);
                return TG_ERR_ARG;
            }
        }
    int64_t B = gen->B, L = gen->L, len = gen->len;
    if (len + n <= L) { /* append at positions len..len+n-1 */
        tg_status s = run_tokens(gen, ids, n, len);
        if (s != TG_OK)
            return s; /* rows >= len are never read before being written again */
        for (int64_t r = 0; r < B; r++)
            memcpy(gen->hist + r * L + len, ids + r * n, sizeof(int32_t) * (size_t)n);
        gen->len = len + n;
        return TG_OK;
    }
    /* the context would pass max_seq_len: keep the last h tokens of (history, ids) and
     * prefill them again at positions 0..h-1 */
    int64_t h = gen->refill_n, total = len + n;
    for (int64_t r = 0; r < B; r++)
        for (int64_t t = 0; t < h; t++) {
            int64_t gi = total - h + t;
            gen->buf[r * h + t] = gi < len ? gen->hist[r * L + gi] : ids[r * n + gi - len];
        }
    tg_status s = run_tokens(gen, gen->buf, h, 0);
    if (s != TG_OK) {
        gen->len = 0; /* rows 0..h-1 may hold the new keys: the old context is gone */
        return s;
    }
    for (int64_t r = 0; r < B; r++)
        memcpy(gen->hist + r * L, gen->buf + r * h, sizeof(int32_t) * (size_t)h);
    gen->len = h;
    return TG_OK;
}

tg_tensor *tg_generator_logits(const tg_generator *gen)
{
    return gen && !gen->freed ? gen->logits : NULL;
}

int64_t tg_generator_length(const tg_generator *gen)
{
    return gen && !gen->freed ? gen->len : 0;
}

void tg_generator_reset(tg_generator *gen)
{
    if (gen)
        gen->len = 0; /* rows are overwritten before they are read again */
}

void tg_generator_free(tg_generator *gen)
{
    if (!gen || gen->freed)
        return;
    tg_ctx *ctx = gen->ctx;
    tg_graph_free(gen->step.g);
    tg_graph_free(gen->refill.g);
    gen->step.g = gen->refill.g = NULL;
    for (int64_t i = 0; i < gen->n_layers; i++) {
        tg__free(ctx, gen->kc[i]->data);
        tg__free(ctx, gen->vc[i]->data);
        gen->kc[i]->data = gen->vc[i]->data = NULL;
    }
    tg__free(ctx, gen->hist);
    tg__free(ctx, gen->buf);
    tg__free(ctx, gen->pbuf);
    gen->hist = gen->buf = gen->pbuf = NULL;
    gen->len = 0;
    gen->freed = true; /* the record itself stays (small) until the context goes */
}
