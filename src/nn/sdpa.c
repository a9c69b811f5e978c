/*
 * sdpa.c - scaled dot-product attention as a graph of ops (Vaswani et al. 2017, eq. (1)):
 *   scores = Q K^T * scale       matmul with transpose_b, then scale      (..., T_q, T_k)
 *   scores = add_mask(scores)    every mask in tg_attn_masks
 *   W      = softmax(scores)     attention weights; fully masked rows are 0
 *   out    = W V                                                          (..., T_q, d_v)
 * With fusion on (tg_ctx_fusion) and the weights not requested, the whole chain is one
 * tg_flash_attention node (same values to rounding; the weights are never stored).
 */
#include "nn_internal.h"
#include "core.h"

#include <math.h>

tg_tensor *tg_sdpa(tg_ctx *ctx, tg_tensor *q, tg_tensor *k, tg_tensor *v,
                   const tg_attn_masks *masks, double scale, tg_tensor **attn_weights)
{
    static const char *fn = "tg_sdpa";
    if (attn_weights)
        *attn_weights = NULL;
    if (!ctx || !q || !k || !v)
        return NULL;
    char bq[128], bk[128], bv[128];
    int rq = tg_tensor_rank(q), rk = tg_tensor_rank(k), rv = tg_tensor_rank(v);
    if (rq < 2 || rk < 2 || rv < 2)
        return tg__err(ctx, TG_ERR_SHAPE, fn, "q %s, k %s, v %s need rank >= 2",
                       tg_tensor_shape_str(q, bq, sizeof bq), tg_tensor_shape_str(k, bk, sizeof bk),
                       tg_tensor_shape_str(v, bv, sizeof bv));
    if (tg_tensor_dim(q, -1) != tg_tensor_dim(k, -1) || tg_tensor_dim(k, -2) != tg_tensor_dim(v, -2))
        return tg__err(ctx, TG_ERR_SHAPE, fn,
                       "need q (..., T_q, d_k), k (..., T_k, d_k), v (..., T_k, d_v); got q %s, "
                       "k %s, v %s",
                       tg_tensor_shape_str(q, bq, sizeof bq), tg_tensor_shape_str(k, bk, sizeof bk),
                       tg_tensor_shape_str(v, bv, sizeof bv));
    if (!isfinite(scale))
        return tg__err(ctx, TG_ERR_ARG, fn, "scale %g is not finite", scale);
    if (scale == 0)
        scale = 1.0 / sqrt((double)tg_tensor_dim(q, -1));
    if (tg_ctx_fusion(ctx) && !attn_weights) {
        tg__nn_masks pm;
        if (!tg__nn_prepare_masks(ctx, fn, masks, false, 0, tg_tensor_dim(q, -2),
                                  tg_tensor_dim(k, -2), &pm))
            return NULL;
        return tg_flash_attention(ctx, q, k, v, pm.attn, pm.kind, pm.pad, pm.causal, scale);
    }
    tg_tensor *s = tg_matmul(ctx, q, k, false, true);        /* (..., T_q, T_k) */
    s = tg_scale(ctx, s, scale);
    s = tg__nn_apply_masks(ctx, fn, s, masks, false);
    tg_tensor *w = tg_softmax(ctx, s);                       /* (..., T_q, T_k) */
    tg_tensor *out = tg_matmul(ctx, w, v, false, false);     /* (..., T_q, d_v) */
    if (out && attn_weights)
        *attn_weights = w;
    return out;
}
