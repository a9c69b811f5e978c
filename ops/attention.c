/*
 * attention.c - the two ops specific to attention scores: add_mask and a safe softmax.
 *
 * add_mask (ADDITIVE): y = s + m (m broadcast)           ds += dy, dm += reduce(dy)
 * add_mask (BLOCK):    y = (m != 0) ? -inf : s           ds += dy where m == 0
 * softmax (last axis): y_i = exp(x_i - max) / sum_j exp(x_j - max)
 *                      dx_i += y_i (dy_i - sum_j dy_j y_j)
 *   A row that is entirely -inf (every key blocked) gives y = 0 and dx = 0, never NaN
 *   (PyTorch SDPA `_safe_softmax`; plain torch.softmax would give NaN there).
 * Source: Vaswani et al. 2017, sec. 3.2.1 (masking by -inf before the softmax).
 */
#include "registry.h"
#include "vec.h"

#include <stdio.h>

tg_tensor *tg_add_mask(tg_ctx *ctx, tg_tensor *scores, tg_tensor *mask, tg_mask_kind kind)
{
    static const char *fn = "tg_add_mask";
    tg_tensor *src[2] = {scores, mask};
    if (!tg__check_srcs(ctx, fn, 2, src))
        return NULL;
    if (kind != TG_MASK_ADDITIVE && kind != TG_MASK_BLOCK)
        return tg__err(ctx, TG_ERR_ARG, fn,
                       "unknown mask kind %d (use TG_MASK_ADDITIVE or TG_MASK_BLOCK)", (int)kind);
    char ss[128], sm[128];
    int64_t shape[TG_MAX_RANK];
    int r;
    if (mask->rank > scores->rank ||
        !tg__broadcast_shape(scores->rank, scores->shape, mask->rank, mask->shape, &r, shape) ||
        memcmp(shape, scores->shape, sizeof(int64_t) * (size_t)r) != 0)
        return tg__err(ctx, TG_ERR_SHAPE, fn, "mask %s does not broadcast to scores %s",
                       tg__shape_str(mask, sm, sizeof sm), tg__shape_str(scores, ss, sizeof ss));
    tg_tensor *y = tg__op_new(ctx, TG_OP_ADD_MASK, scores->dtype, scores->rank, scores->shape,
                              2, src);
    if (!y)
        return NULL;
    y->p.mask.kind = kind;
    if (kind == TG_MASK_BLOCK && mask->requires_grad) {
        /* A boolean mask has no gradient; keep y's requirement from the scores only. */
        y->requires_grad = scores->requires_grad;
    }
    return y;
}

/* Each row of the last axis is written by one iteration. */
#define DEFINE_MASK(T, SUF)                                                                    \
    static void mask_rows_##SUF(const tg__call *c, bool backward)                                   \
    {                                                                                          \
        const tg_tensor *y = c->y;                                                             \
        const tg_tensor *m = y->src[1];                                                        \
        const T *M = c->in[1];                                                                 \
        bool block = y->p.mask.kind == TG_MASK_BLOCK;                                          \
        int r = y->rank;                                                                       \
        int64_t ms[TG_MAX_RANK];                                                               \
        tg__bcast_strides(m, r, y->shape, ms);                                                 \
        int64_t L = r ? y->shape[r - 1] : 1, rows = y->numel / L, msl = r ? ms[r - 1] : 0;     \
        const T *S = c->in[0], *G = c->dy;                                                   \
        T *Y = c->out, *dS = c->dx[0];                                                        \
        int nt = c->nt;                                                          \
        TG_OMP_FOR(nt, y->numel > TG_PAR_MIN)                                                  \
        for (int64_t row = 0; row < rows; row++) {                                             \
            int64_t rem = row, mo = 0;                                                         \
            for (int d = r - 2; d >= 0; d--) {                                                 \
                mo += (rem % y->shape[d]) * ms[d];                                             \
                rem /= y->shape[d];                                                            \
            }                                                                                  \
            int64_t o = row * L;                                                               \
            for (int64_t j = 0; j < L; j++) {                                                  \
                T mv = M[mo + j * msl];                                                        \
                if (!backward) {                                                               \
                    if (block)                                                                 \
                        Y[o + j] = mv != 0 ? (T)-INFINITY : S[o + j];                          \
                    else                                                                       \
                        Y[o + j] = S[o + j] + mv;                                              \
                } else if (dS == G) { /* in place (TG_OPF_BWD_INPLACE): write */               \
                    dS[o + j] = (!block || mv == 0) ? (T)0 + G[o + j] : (T)0;                  \
                } else if (!block || mv == 0) {                                                \
                    dS[o + j] += G[o + j];                                                     \
                }                                                                              \
            }                                                                                  \
        }                                                                                      \
    }
DEFINE_MASK(float, f32)
DEFINE_MASK(double, f64)

tg_status tg__add_mask_forward(const tg__call *c)
{
    const tg_tensor *y = c->y;
    if (y->dtype == TG_F32)
        mask_rows_f32(c, false);
    else
        mask_rows_f64(c, false);
    return TG_OK;
}

tg_status tg__add_mask_backward(const tg__call *c)
{
    const tg_tensor *y = c->y;
    if (c->dx[0]) {
        if (y->dtype == TG_F32)
            mask_rows_f32(c, true);
        else
            mask_rows_f64(c, true);
    }
    tg_tensor *m = y->src[1];
    if (y->p.mask.kind == TG_MASK_ADDITIVE && c->dx[1])
        tg__reduce_to(c->nt, y->dtype, c->dy, y->rank, y->shape, m, c->dx[1]);
    return TG_OK;
}

/* ---- softmax ------------------------------------------------------------------------------ */
tg_tensor *tg_softmax(tg_ctx *ctx, tg_tensor *x)
{
    static const char *fn = "tg_softmax";
    if (!tg__check_srcs(ctx, fn, 1, &x))
        return NULL;
    if (x->rank < 1)
        return tg__err(ctx, TG_ERR_SHAPE, fn, "x is a scalar; softmax needs rank >= 1");
    return tg__op_new(ctx, TG_OP_SOFTMAX, x->dtype, x->rank, x->shape, 1, &x);
}

/* Rows [lo, hi) of x, y (rows, L). Each row is computed by one call from that row alone, with
 * the shared row kernels (src/core/vec.h: NaN-propagating max, exp-sum in 16 fixed lanes), so
 * results are independent of the thread count and of the SIMD clone. */
#define DEFINE_SOFTMAX(T, SUF)                                                                 \
    TG_SIMD_CLONES static void softmax_rows_##SUF(const T *X, T *Y, int64_t L, int64_t lo,     \
                                                  int64_t hi)                                  \
    {                                                                                          \
        for (int64_t r = lo; r < hi; r++) {                                                    \
            const T *x = X + r * L;                                                            \
            T *o = Y + r * L;                                                                  \
            T m = tg__row_max_##SUF(x, L);                                                     \
            if (m == (T)-INFINITY) { /* every entry masked: zeros, not NaN */                  \
                for (int64_t j = 0; j < L; j++)                                                \
                    o[j] = 0;                                                                  \
                continue;                                                                      \
            }                                                                                  \
            T inv = (T)1 / tg__row_expsum_##SUF(x, L, m, o);                                   \
            for (int64_t j = 0; j < L; j++)                                                    \
                o[j] *= inv;                                                                   \
        }                                                                                      \
    }                                                                                          \
    TG_SIMD_CLONES static void softmax_bwd_rows_##SUF(const T *Y, const T *G, T *DX,           \
                                                      int64_t L, int64_t lo, int64_t hi)       \
    {                                                                                          \
        for (int64_t r = lo; r < hi; r++) {                                                    \
            const T *o = Y + r * L, *g = G + r * L;                                            \
            T *dx = DX + r * L;                                                                \
            T dot = tg__row_dot_##SUF(g, o, L);                                                \
            for (int64_t j = 0; j < L; j++)                                                    \
                dx[j] += o[j] * (g[j] - dot);                                                  \
        }                                                                                      \
    }                                                                                          \
    static void softmax_fwd_##SUF(const tg__call *c)                                                \
    {                                                                                          \
        const tg_tensor *y = c->y;                                                             \
        const T *X = c->in[0];                                                          \
        T *Y = c->out;                                                                        \
        int64_t L = y->shape[y->rank - 1], rows = y->numel / L;                                \
        /* Race-free: a thread owns the rows [lo, hi) of y. */                                 \
        TG_PAR_RANGE(c->nt, y->numel * 2 * (int64_t)sizeof(T) > TG_PAR_BYTES,  \
                     rows, 1, softmax_rows_##SUF(X, Y, L, lo, hi));                            \
    }                                                                                          \
    static void softmax_bwd_##SUF(const tg__call *c)                                                \
    {                                                                                          \
        const tg_tensor *y = c->y;                                                             \
        int64_t L = y->shape[y->rank - 1], rows = y->numel / L;                                \
        /* Race-free: a thread owns the rows [lo, hi) of dx. */                                \
        TG_PAR_RANGE(c->nt, y->numel * 3 * (int64_t)sizeof(T) > TG_PAR_BYTES,  \
                     rows, 1,                                                                  \
                     softmax_bwd_rows_##SUF(c->out, c->dy, c->dx[0], L, lo, hi));    \
    }
DEFINE_SOFTMAX(float, f32)
DEFINE_SOFTMAX(double, f64)

tg_status tg__softmax_forward(const tg__call *c)
{
    const tg_tensor *y = c->y;
    if (y->dtype == TG_F32)
        softmax_fwd_f32(c);
    else
        softmax_fwd_f64(c);
    return TG_OK;
}

tg_status tg__softmax_backward(const tg__call *c)
{
    const tg_tensor *y = c->y;
    if (!c->dx[0])
        return TG_OK;
    if (y->dtype == TG_F32)
        softmax_bwd_f32(c);
    else
        softmax_bwd_f64(c);
    return TG_OK;
}
