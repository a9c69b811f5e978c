/*
 * reduce.c - sum and mean over one axis or over all elements.
 *
 * sum:  y[o, i] = sum_a x[o, a, i]            dx[o, a, i] += dy[o, i]
 * mean: y[o, i] = (1/A) sum_a x[o, a, i]      dx[o, a, i] += dy[o, i] / A
 * (x viewed as (outer, A, inner); "all" is outer = inner = 1, A = numel.)
 */
#include "registry.h"
#include "vec.h"

#include <stdio.h>

static tg_tensor *reduce(tg_ctx *ctx, const char *fn, int op, tg_tensor *x, int axis, bool all,
                         bool keepdim)
{
    if (!tg__check_srcs(ctx, fn, 1, &x))
        return NULL;
    int64_t shape[TG_MAX_RANK];
    int r = 0, a = 0;
    if (!all) {
        a = tg__axis(axis, x->rank);
        if (a < 0) {
            char b[128];
            return tg__err(ctx, TG_ERR_AXIS, fn, "axis %d out of range for x %s", axis,
                           tg__shape_str(x, b, sizeof b));
        }
        for (int i = 0; i < x->rank; i++) {
            if (i == a && !keepdim)
                continue;
            shape[r++] = i == a ? 1 : x->shape[i];
        }
    }
    tg_tensor *y = tg__op_new(ctx, op, x->dtype, r, shape, 1, &x);
    if (y) {
        y->p.reduce.axis = a;
        y->p.reduce.all = all;
    }
    return y;
}

tg_tensor *tg_sum(tg_ctx *ctx, tg_tensor *x, int axis, bool keepdim)
{
    return reduce(ctx, "tg_sum", TG_OP_SUM, x, axis, false, keepdim);
}
tg_tensor *tg_mean(tg_ctx *ctx, tg_tensor *x, int axis, bool keepdim)
{
    return reduce(ctx, "tg_mean", TG_OP_MEAN, x, axis, false, keepdim);
}
tg_tensor *tg_sum_all(tg_ctx *ctx, tg_tensor *x)
{
    return reduce(ctx, "tg_sum_all", TG_OP_SUM, x, 0, true, false);
}
tg_tensor *tg_mean_all(tg_ctx *ctx, tg_tensor *x)
{
    return reduce(ctx, "tg_mean_all", TG_OP_MEAN, x, 0, true, false);
}

static void split(const tg__call *c, int64_t *outer, int64_t *A, int64_t *inner)
{
    const int64_t *xs = c->src_shape[0];
    *outer = *inner = 1;
    if (c->p->reduce.all) {
        *A = c->src_numel[0];
        return;
    }
    int a = c->p->reduce.axis;
    for (int i = 0; i < a; i++)
        *outer *= xs[i];
    for (int i = a + 1; i < c->src_rank[0]; i++)
        *inner *= xs[i];
    *A = xs[a];
}

/* The kernels, written once in reduce_kernel.h, for f32 and for f64: tg__reduce_forward_f32 ...
 * _backward_f64 (sum and mean: c->op tells them apart), registered per dtype in
 * ops/ops_dtype.def. */
#define T float
#define SUF f32
#include "reduce_kernel.h"
#undef T
#undef SUF
#define T double
#define SUF f64
#include "reduce_kernel.h"
#undef T
#undef SUF
