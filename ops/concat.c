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
static void split(const tg__call *c, int64_t *outer, int64_t *inner)
{
    int a = c->p->concat.axis;
    *outer = *inner = 1;
    for (int i = 0; i < a; i++)
        *outer *= c->shape[i];
    for (int i = a + 1; i < c->rank; i++)
        *inner *= c->shape[i];
}

/* The kernels, written once in concat_kernel.h, for f32 and for f64: tg__concat_forward_f32 ...
 * _backward_f64, registered per dtype in ops/ops_dtype.def. */
#define T float
#define SUF f32
#include "concat_kernel.h"
#undef T
#undef SUF
#define T double
#define SUF f64
#include "concat_kernel.h"
#undef T
#undef SUF
