/*
 * kv_attention.c - causal attention over a KV cache, one step of incremental decoding
 * (inference only: no backward rule).
 *
 *   write:  Kc[b, h, :, pos + i] = k[b, h, i, :],  Vc[b, h, pos + i, :] = v[b, h, i, :]
 *           for the n new positions i = 0..n-1 (pos = how many positions the cache held)
 *   attend: s_ij  = scale (q[b, h, i] . Kc[b, h, :, j])   for j = 0..pos+i (causal: query i
 *                   sits at absolute position pos + i)
 *           out_i = sum_j p_ij Vc[b, h, j],  p_ij = exp(s_ij - m_i) / sum_j exp(s_ij - m_i)
 * which is softmax(q k^T scale + causal mask) v (Vaswani et al. 2017, eq. (1)) of the whole
 * sequence so far, restricted to the new rows: the keys and values of earlier positions are
 * read from the cache instead of being recomputed (the "KV cache" of autoregressive
 * Transformer decoders; e.g. Pope et al. 2022, "Efficiently Scaling Transformer Inference",
 * sec. 2). Work is O(pos + n) per query row, O(n (pos + n) d) per (batch, head).
 *
 * Layout: the key cache is stored transposed, Kc (B, H, d_k, L), so that the scores of one
 * query against every cached key are a unit-stride loop over keys (vectorized); the value
 * cache is Vc (B, H, L, d_v), so the weighted sum is a unit-stride loop over d_v. Both are
 * leaves the caller owns (the generator, src/nn/generator.c); the op writes into them. pos is
 * an i32 input (1) read at run time; the data check refuses pos < 0 or pos + n > L (a run
 * error, nothing written). q, k, v (B, H, n, d) are read through their strides (heads split by
 * views) with a contiguous last axis.
 *
 * Order of operations (determinism): for each (b, h), one thread writes the n new cache
 * entries, then for each query row in order: scores s_j = sum_c q_c Kc[c][j] over c ascending
 * (vectorized across j), times scale; m = max_j s_j, e_j = exp(s_j - m) and l = sum_j e_j in
 * the fixed 16 lanes of tg__row_expsum; acc_c = sum_j e_j Vc[j][c] over j ascending
 * (vectorized across c); out_c = acc_c / l. Nothing depends on the thread count or the SIMD
 * clone (-ffp-contract=off: multiply and add round separately everywhere).
 * Threading: (batch, head) items in one parallel region, static contiguous chunks; each item
 * owns its cache slices and its output rows.
 */
#include "registry.h"
#include "vec.h"

#include <stdio.h>

enum { KV_Q, KV_K, KV_V, KV_KC, KV_VC, KV_POS };

static size_t kv_round64(size_t b) { return (b + 63) / 64 * 64; }

/* Per thread: the scores / weights of one row (L) and the accumulator (d_v). */
static size_t kv_ws_per_thread(const tg__call *c)
{
    const int64_t *vc = c->src_shape[KV_VC];
    size_t L = (size_t)vc[2], dv = (size_t)vc[3];
    return kv_round64((L + dv) * tg_dtype_size(c->dtype));
}

size_t tg__kv_attention_ws(const tg__call *c)
{
    int nt = c->nt;
    if (c->backward)
        return 0;
    return (size_t)(nt < 1 ? 1 : nt) * kv_ws_per_thread(c);
}

tg_status tg__kv_attention_check(const tg__call *c)
{
    int64_t pos = ((const int32_t *)c->in[KV_POS])[0];
    int64_t n = c->shape[2], L = c->src_shape[KV_VC][2];
    if (pos < 0 || pos > L - n) {
        tg__run_err(c->ctx, TG_ERR_ARG, "tg_kv_attention",
                    "'%s' = %lld: %lld new positions from there do not fit in the cache of "
                    "max_len %lld (need 0 <= pos <= %lld)",
                    c->src_name[KV_POS], (long long)pos, (long long)n, (long long)L, (long long)(L - n));
        return TG_ERR_ARG;
    }
    return TG_OK;
}

/* The kernel, written once in kv_attention_kernel.h, for f32 and for f64:
 * tg__kv_attention_forward_f32 / _f64, registered per dtype in ops/ops_dtype.def (no backward). */
#define T float
#define SUF f32
#include "kv_attention_kernel.h"
#undef T
#undef SUF
#define T double
#define SUF f64
#include "kv_attention_kernel.h"
#undef T
#undef SUF
/* ---- builder ------------------------------------------------------------------------------ */

tg_tensor *tg_kv_attention(tg_ctx *ctx, tg_tensor *q, tg_tensor *k, tg_tensor *v,
                           tg_tensor *k_cache, tg_tensor *v_cache, tg_tensor *pos, double scale)
{
    static const char *fn = "tg_kv_attention";
    tg_tensor *src[6] = {q, k, v, k_cache, v_cache, pos};
    if (!tg__check_srcs_ids(ctx, fn, 6, src, KV_POS, "pos"))
        return NULL;
    char b1[128], b2[128], b3[128], b4[128], b5[128];
    if (q->rank != 4 || k->rank != 4 || v->rank != 4 || k_cache->rank != 4 ||
        v_cache->rank != 4)
        return tg__err(ctx, TG_ERR_SHAPE, fn,
                       "need q, k (B, H, n, d_k), v (B, H, n, d_v), k_cache (B, H, d_k, "
                       "max_len), v_cache (B, H, max_len, d_v); got q %s, k %s, v %s, k_cache "
                       "%s, v_cache %s",
                       tg__shape_str(q, b1, sizeof b1), tg__shape_str(k, b2, sizeof b2),
                       tg__shape_str(v, b3, sizeof b3), tg__shape_str(k_cache, b4, sizeof b4),
                       tg__shape_str(v_cache, b5, sizeof b5));
    int64_t B = q->shape[0], H = q->shape[1], n = q->shape[2], dk = q->shape[3];
    int64_t dv = v->shape[3], L = v_cache->shape[2];
    bool ok = true;
    for (int a = 0; a < 3; a++)
        ok = ok && k->shape[a] == q->shape[a] && v->shape[a] == q->shape[a];
    ok = ok && k->shape[3] == dk && k_cache->shape[0] == B && k_cache->shape[1] == H &&
         k_cache->shape[2] == dk && k_cache->shape[3] == L && v_cache->shape[0] == B &&
         v_cache->shape[1] == H && v_cache->shape[3] == dv;
    if (!ok)
        return tg__err(ctx, TG_ERR_SHAPE, fn,
                       "shapes disagree: need q, k (B, H, n, d_k), v (B, H, n, d_v), k_cache "
                       "(B, H, d_k, max_len), v_cache (B, H, max_len, d_v); got q %s, k %s, v "
                       "%s, k_cache %s, v_cache %s",
                       tg__shape_str(q, b1, sizeof b1), tg__shape_str(k, b2, sizeof b2),
                       tg__shape_str(v, b3, sizeof b3), tg__shape_str(k_cache, b4, sizeof b4),
                       tg__shape_str(v_cache, b5, sizeof b5));
    if (n > L)
        return tg__err(ctx, TG_ERR_SHAPE, fn,
                       "%lld new positions do not fit in a cache of max_len %lld",
                       (long long)n, (long long)L);
    if (pos->numel != 1)
        return tg__err(ctx, TG_ERR_SHAPE, fn, "pos %s must hold one element",
                       tg__shape_str(pos, b1, sizeof b1));
    for (int i = KV_KC; i <= KV_POS; i++) {
        tg_tensor *c = src[i];
        if (c->op != TG_OP_NONE || c->base || c->requires_grad || !tg__is_contiguous(c))
            return tg__err(ctx, TG_ERR_ARG, fn,
                           "%s '%s' must be a contiguous leaf without gradient (an input or "
                           "constant the caller owns; the op writes the cache in place)",
                           i == KV_KC ? "k_cache" : i == KV_VC ? "v_cache" : "pos", c->name);
    }
    if (!isfinite(scale))
        return tg__err(ctx, TG_ERR_ARG, fn, "scale %g is not finite", scale);
    if (scale == 0)
        scale = 1.0 / sqrt((double)dk);
    /* q, k, v are read through strides with a contiguous last axis; copy any other layout */
    for (int i = 0; i < 3; i++) {
        tg_tensor *x = src[i];
        if (x->shape[3] > 1 && x->stride[3] != 1 && !(src[i] = tg__contiguous(ctx, x)))
            return NULL;
    }
    int64_t shape[4] = {B, H, n, dv};
    tg_tensor *y = tg__op_new(ctx, TG_OP_KV_ATTN, q->dtype, 4, shape, 6, src);
    if (!y)
        return NULL;
    y->p.kv_attn.scale = scale;
    return y;
}
