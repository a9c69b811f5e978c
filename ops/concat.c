/*
 * concat.c - concatenation of n tensors along one axis (PyTorch torch.cat(xs, dim)).
 *
 * Each x_k viewed as (outer, N_k, inner) and y as (outer, N, inner), N = sum_k N_k,
 * c_k = N_0 + ... + N_{k-1}:
 *   y[o, c_k + a, i] = x_k[o, a, i]          dx_k[o, a, i] += dy[o, c_k + a, i]
 * Backward reads no data (only dy), so every source may be freed after forward.
 */
#include "registry.h"

#include <stdio.h>

_Static_assert(TG_CONCAT_MAX <= TG_MAX_SRC, "tg_concat's sources must fit in a node");

tg_tensor *tg_concat(tg_ctx *ctx, tg_tensor *const *xs, int n, int axis)
{
    static const char *fn = "tg_concat";
    if (!ctx)
        return NULL;
    if (!xs || n < 1 || n > TG_CONCAT_MAX) {
        tg__begin(ctx);
        if (tg__build_failed(ctx))
            return NULL;
        if (!xs)
            return tg__err(ctx, TG_ERR_ARG, fn, "xs is NULL");
        return tg__err(ctx, TG_ERR_ARG, fn, "n is %d; expected 1..%d tensors", n,
                       TG_CONCAT_MAX);
    }
    if (!tg__check_srcs(ctx, fn, n, xs))
        return NULL;
    const tg_tensor *x0 = xs[0];
    if (x0->dtype != TG_F32 && x0->dtype != TG_F64)
        return tg__err(ctx, TG_ERR_DTYPE, fn, "tensors are %s; expected f32 or f64",
                       tg_dtype_str(x0->dtype));
    for (int k = 0; k < n; k++)
        if (xs[k]->rank < 1)
            return tg__err(ctx, TG_ERR_SHAPE, fn,
                           "tensor %d is a scalar; concat needs rank >= 1", k);
    int a = tg__axis(axis, x0->rank);
    if (a < 0) {
        char b[128];
        return tg__err(ctx, TG_ERR_AXIS, fn, "axis %d out of range for tensor 0 %s (rank %d)",
                       axis, tg__shape_str(x0, b, sizeof b), x0->rank);
    }
    int64_t shape[TG_MAX_RANK];
    memcpy(shape, x0->shape, sizeof shape);
    for (int k = 1; k < n; k++) {
        const tg_tensor *x = xs[k];
        if (x->rank != x0->rank) {
            char b0[128], bk[128];
            return tg__err(ctx, TG_ERR_SHAPE, fn,
                           "tensors 0 and %d differ in rank (%d vs %d): %s vs %s", k, x0->rank,
                           x->rank, tg__shape_str(x0, b0, sizeof b0),
                           tg__shape_str(x, bk, sizeof bk));
        }
        for (int d = 0; d < x0->rank; d++)
            if (d != a && x->shape[d] != x0->shape[d])
                return tg__err(ctx, TG_ERR_SHAPE, fn,
                               "tensors 0 and %d differ on axis %d (%lld vs %lld)", k, d,
                               (long long)x0->shape[d], (long long)x->shape[d]);
        if (!tg__add_i64(shape[a], x->shape[a], &shape[a]))
            return tg__err(ctx, TG_ERR_OVERFLOW, fn, "the joined axis %d overflows int64", a);
    }
    tg_tensor *y = tg__op_new(ctx, TG_OP_CONCAT, x0->dtype, x0->rank, shape, n, xs);
    if (y)
        y->p.concat.axis = a;
    return y;
}

/* outer and inner of y (and of every source: they agree off the axis) */
static void split(const tg_tensor *y, int64_t *outer, int64_t *inner)
{
    int a = y->p.concat.axis;
    *outer = *inner = 1;
    for (int i = 0; i < a; i++)
        *outer *= y->shape[i];
    for (int i = a + 1; i < y->rank; i++)
        *inner *= y->shape[i];
}

/* One source at a time; within it one row o of (outer, N_k * inner) per iteration, writing its
 * own span of y (forward) or of dx_k (backward). Sources run in order, so the same tensor
 * given twice accumulates twice without a race. Thread-count independent. */
#define DEFINE_CONCAT(T, SUF)                                                                  \
    static void copy_##SUF(const tg__call *c, bool backward)                                        \
    {                                                                                          \
        const tg_tensor *y = c->y;                                                             \
        int64_t outer, inner;                                                                  \
        split(y, &outer, &inner);                                                              \
        int a = y->p.concat.axis;                                                              \
        int64_t row = y->shape[a] * inner, off = 0; /* off: c_k * inner */                     \
        int nt = c->nt;                                                          \
        for (int k = 0; k < y->n_src; k++) {                                                   \
            tg_tensor *x = y->src[k];                                                          \
            int64_t xrow = x->shape[a] * inner;                                                \
            if (!backward) {                                                                   \
                const T *X = c->in[k];                                                         \
                T *Y = c->out;                                                                \
                TG_OMP_FOR(nt, outer > 1 && x->numel > TG_PAR_MIN)                             \
                for (int64_t o = 0; o < outer; o++)                                            \
                    memcpy(Y + o * row + off, X + o * xrow, (size_t)xrow * sizeof(T));         \
            } else if (c->dx[k]) {                                                             \
                const T *G = c->dy;                                                          \
                T *DX = c->dx[k];                                                              \
                TG_OMP_FOR(nt, outer > 1 && x->numel > TG_PAR_MIN)                             \
                for (int64_t o = 0; o < outer; o++) {                                          \
                    const T *g = G + o * row + off;                                            \
                    T *dx = DX + o * xrow;                                                     \
                    for (int64_t j = 0; j < xrow; j++)                                         \
                        dx[j] += g[j];                                                         \
                }                                                                              \
            }                                                                                  \
            off += xrow;                                                                       \
        }                                                                                      \
    }
DEFINE_CONCAT(float, f32)
DEFINE_CONCAT(double, f64)

tg_status tg__concat_forward(const tg__call *c)
{
    const tg_tensor *y = c->y;
    if (y->dtype == TG_F32)
        copy_f32(c, false);
    else
        copy_f64(c, false);
    return TG_OK;
}

tg_status tg__concat_backward(const tg__call *c)
{
    const tg_tensor *y = c->y;
    if (y->dtype == TG_F32)
        copy_f32(c, true);
    else
        copy_f64(c, true);
    return TG_OK;
}
