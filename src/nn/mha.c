/*
 * mha.c - multi-head attention (Vaswani et al. 2017, sec. 3.2.2; PyTorch
 * nn.MultiheadAttention, batch_first=True) as a graph of ops:
 *   W_q, W_k, W_v = rows [0, D), [D, 2D), [2D, 3D) of in_proj_weight (narrow)
 *   q = query W_q^T + b_q                      (B, T_q, D)
 *   q = transpose(reshape(q, B, T_q, H, Dh))   (B, H, T_q, Dh)   likewise k, v with T_k
 *   (with fusion: self-attention makes q, k, v with one (B, T, 3D) product, cross-attention
 *   with key == value makes k, v with one (B, T_k, 2D) product; the heads are views of it)
 *   o = sdpa(q, k, v, masks)                   (B, H, T_q, Dh)   one tg_flash_attention node
 *                                              when fusion is on and no weights are requested
 *   o = reshape(transpose(o), B, T_q, D)       heads concatenated
 *   out = o W_o^T + b_o                        (B, T_q, D)
 * Self-attention passes one tensor as query, key and value; autodiff sums its three uses.
 */
#include "nn_internal.h"
#include "core.h"

#include <math.h>
#include <stdio.h>

tg_status tg_mha_init(tg_ctx *ctx, tg_mha *m, tg_dtype dt, int64_t d_model, int64_t n_heads,
                      const char *prefix)
{
    static const char *fn = "tg_mha_init";
    tg_status s0 = tg__nn_init_begin(ctx, m, sizeof *m);
    if (s0 != TG_OK)
        return s0; /* no context, or a build error is pending: stop before allocating */
    if (!m)
        return TG_ERR_ARG;
    if (d_model < 1 || n_heads < 1 || d_model % n_heads != 0) {
        tg__err(ctx, TG_ERR_ARG, fn, "n_heads %lld must divide d_model %lld (both >= 1)",
                (long long)n_heads, (long long)d_model);
        return TG_ERR_ARG;
    }
    char why[64];
    snprintf(why, sizeof why, "d_model %lld", (long long)d_model);
    tg__nn_plan plan = tg__nn_plan_begin(ctx, fn, dt);
    tg__nn_plan_add(&plan, 1, 3, d_model, d_model, "in_proj_weight (3 d_model, d_model)", why);
    tg__nn_plan_add(&plan, 1, 3, d_model, 0, "in_proj_bias (3 d_model)", why);
    tg__nn_plan_add(&plan, 1, 1, d_model, d_model, "out_proj.weight (d_model, d_model)", why);
    tg__nn_plan_add(&plan, 1, 1, d_model, 0, "out_proj.bias (d_model)", why);
    tg_status ps = tg__nn_plan_end(&plan);
    if (ps != TG_OK)
        return ps;
    m->d_model = d_model;
    m->n_heads = n_heads;
    /* in_proj_weight (3D, D): xavier over fan_in + fan_out = D + 3D (no int overflow: double) */
    double xavier = sqrt(6.0 / (4.0 * (double)d_model));
    double linear = 1.0 / sqrt((double)d_model);
    m->in_proj_weight = tg__nn_param(ctx, dt, TG_DIMS(3 * d_model, d_model), prefix,
                                     "in_proj_weight", xavier, false);
    m->in_proj_bias = tg__nn_param(ctx, dt, TG_DIMS(3 * d_model), prefix, "in_proj_bias", 0,
                                   false);
    m->out_proj_weight = tg__nn_param(ctx, dt, TG_DIMS(d_model, d_model), prefix,
                                      "out_proj.weight", linear, false);
    m->out_proj_bias = tg__nn_param(ctx, dt, TG_DIMS(d_model), prefix, "out_proj.bias", 0,
                                    false);
    return tg__nn_status(ctx);
}

/* (B, T, D) -> (B, H, T, Dh) */
static tg_tensor *split_heads(tg_ctx *ctx, tg_tensor *x, int64_t B, int64_t T, int64_t H,
                              int64_t Dh)
{
    x = tg_reshape(ctx, x, TG_DIMS(B, T, H, Dh));
    return tg_transpose(ctx, x, 1, 2);
}

/* The module and the inputs' shapes. */
static bool mha_check(tg_ctx *ctx, const char *fn, const tg_mha *m, const tg_tensor *query,
                      const tg_tensor *key, const tg_tensor *value)
{
    if (!m || !m->in_proj_weight || !m->in_proj_bias || !m->out_proj_weight ||
        !m->out_proj_bias)
        return (bool)tg__err(ctx, TG_ERR_ARG, fn, "module is NULL or not initialised");
    int64_t D = m->d_model, H = m->n_heads;
    char b1[128], b2[128], b3[128];
    tg_tensor *W = m->in_proj_weight, *bias = m->in_proj_bias;
    if (D < 1 || H < 1 || D % H != 0 || D > TG_MAX_NUMEL / 3 || tg_tensor_rank(W) != 2 ||
        tg_tensor_dim(W, 0) != 3 * D || tg_tensor_dim(W, 1) != D || tg_tensor_rank(bias) != 1 ||
        tg_tensor_dim(bias, 0) != 3 * D)
        return (bool)tg__err(ctx, TG_ERR_ARG, fn,
                       "module is inconsistent: d_model %lld, n_heads %lld (must divide it), "
                       "in_proj_weight %s (need (3 d_model, d_model)), in_proj_bias %s",
                       (long long)D, (long long)H, tg_tensor_shape_str(W, b1, sizeof b1),
                       tg_tensor_shape_str(bias, b2, sizeof b2));
    if (tg_tensor_rank(query) != 3 || tg_tensor_rank(key) != 3 || tg_tensor_rank(value) != 3 ||
        tg_tensor_dim(query, 2) != D || tg_tensor_dim(key, 2) != D ||
        tg_tensor_dim(value, 2) != D || tg_tensor_dim(key, 0) != tg_tensor_dim(query, 0) ||
        tg_tensor_dim(value, 0) != tg_tensor_dim(query, 0) ||
        tg_tensor_dim(key, 1) != tg_tensor_dim(value, 1))
        return (bool)tg__err(ctx, TG_ERR_SHAPE, fn,
                       "need query (B, T_q, %lld), key and value (B, T_k, %lld); got query %s, "
                       "key %s, value %s",
                       (long long)D, (long long)D, tg_tensor_shape_str(query, b1, sizeof b1),
                       tg_tensor_shape_str(key, b2, sizeof b2),
                       tg_tensor_shape_str(value, b3, sizeof b3));
    return true;
}

/* The in-projections of query, key and value, split into heads: *q (B, H, T_q, Dh), *k and *v
 * (B, H, T_k, Dh). Fused (no attention weights asked for): one product for q, k, v in
 * self-attention, one for k, v when key is value. */
static void mha_project(tg_ctx *ctx, const tg_mha *m, tg_tensor *query, tg_tensor *key,
                        tg_tensor *value, bool fused, tg_tensor **q, tg_tensor **k,
                        tg_tensor **v)
{
    int64_t D = m->d_model, H = m->n_heads, Dh = D / H;
    int64_t B = tg_tensor_dim(query, 0), Tq = tg_tensor_dim(query, 1), Tk = tg_tensor_dim(key, 1);
    tg_tensor *W = m->in_proj_weight, *bias = m->in_proj_bias;
    if (fused && query == key && key == value) {
        /* self-attention: one in_proj product (B, T, 3D) read as q, k, v head views */
        tg_tensor *qkv = tg_dense(ctx, query, W, bias);            /* (B, T, 3D) */
        qkv = tg_transpose(ctx, tg_reshape(ctx, qkv, TG_DIMS(B, Tq, 3 * H, Dh)), 1, 2);
        *q = tg_narrow(ctx, qkv, 1, 0, H);                         /* (B, H, T, Dh) each */
        *k = tg_narrow(ctx, qkv, 1, H, H);
        *v = tg_narrow(ctx, qkv, 1, 2 * H, H);
    } else if (fused && key == value) {
        /* cross-attention (the decoder's over memory): one (B, T_k, 2D) product read as k, v */
        *q = tg_dense(ctx, query, tg_narrow(ctx, W, 0, 0, D), tg_narrow(ctx, bias, 0, 0, D));
        *q = split_heads(ctx, *q, B, Tq, H, Dh);                   /* (B, H, T_q, Dh) */
        tg_tensor *kv = tg_dense(ctx, key, tg_narrow(ctx, W, 0, D, 2 * D),
                                 tg_narrow(ctx, bias, 0, D, 2 * D)); /* (B, T_k, 2D) */
        kv = tg_transpose(ctx, tg_reshape(ctx, kv, TG_DIMS(B, Tk, 2 * H, Dh)), 1, 2);
        *k = tg_narrow(ctx, kv, 1, 0, H);                          /* (B, H, T_k, Dh) each */
        *v = tg_narrow(ctx, kv, 1, H, H);
    } else {
        *q = tg_dense(ctx, query, tg_narrow(ctx, W, 0, 0, D), tg_narrow(ctx, bias, 0, 0, D));
        *k = tg_dense(ctx, key, tg_narrow(ctx, W, 0, D, D), tg_narrow(ctx, bias, 0, D, D));
        *v = tg_dense(ctx, value, tg_narrow(ctx, W, 0, 2 * D, D),
                      tg_narrow(ctx, bias, 0, 2 * D, D));          /* (B, T, D) each */
        *q = split_heads(ctx, *q, B, Tq, H, Dh);                   /* (B, H, T_q, Dh) */
        *k = split_heads(ctx, *k, B, Tk, H, Dh);                   /* (B, H, T_k, Dh) */
        *v = split_heads(ctx, *v, B, Tk, H, Dh);                   /* (B, H, T_k, Dh) */
    }
}

tg_tensor *tg_mha_forward(tg_ctx *ctx, const tg_mha *m, tg_tensor *query, tg_tensor *key,
                          tg_tensor *value, const tg_attn_masks *masks, tg_tensor **attn_weights)
{
    static const char *fn = "tg_mha_forward";
    if (attn_weights)
        *attn_weights = NULL;
    if (!ctx || !query || !key || !value)
        return NULL;
    if (!mha_check(ctx, fn, m, query, key, value))
        return NULL;
    int64_t D = m->d_model, H = m->n_heads, Dh = D / H;
    int64_t B = tg_tensor_dim(query, 0), Tq = tg_tensor_dim(query, 1), Tk = tg_tensor_dim(key, 1);
    if (!(m->dropout >= 0 && m->dropout < 1))
        return tg__err(ctx, TG_ERR_ARG, fn, "dropout %g must be in [0, 1)", m->dropout);
    tg_tensor *q, *k, *v;
    mha_project(ctx, m, query, key, value, tg_ctx_fusion(ctx) && !attn_weights, &q, &k, &v);
    tg_tensor *o;
    tg_tensor *w = NULL;
    if (tg_ctx_fusion(ctx) && !attn_weights && m->dropout == 0) {
        tg__nn_masks pm;
        if (!tg__nn_prepare_masks(ctx, fn, masks, true, B, Tq, Tk, &pm))
            return NULL;
        o = tg_flash_attention(ctx, q, k, v, pm.attn, pm.kind, pm.pad, pm.causal,
                               1.0 / sqrt((double)Dh));            /* (B, H, T_q, Dh) */
    } else {
        /* scores = q k^T / sqrt(Dh) with the masks, softmax, weighted sum of v */
        tg_tensor *s = tg_scale(ctx, tg_matmul(ctx, q, k, false, true),
                                1.0 / sqrt((double)Dh));
        s = tg__nn_apply_masks(ctx, fn, s, masks, true);           /* (B, H, T_q, T_k) */
        w = tg__nn_drop(ctx, tg_softmax(ctx, s), m->dropout);       /* (B, H, T_q, T_k) */
        o = tg_matmul(ctx, w, v, false, false);                    /* (B, H, T_q, Dh) */
    }
    o = tg_reshape(ctx, tg_transpose(ctx, o, 1, 2), TG_DIMS(B, Tq, D)); /* (B, T_q, D) */
    tg_tensor *out = tg_dense(ctx, o, m->out_proj_weight, m->out_proj_bias);
    if (out && attn_weights)
        *attn_weights = w;
    return out;
}
