/*
 * shape.c - the layout ops, all views (no data is copied), and `contiguous`, the one copy.
 *
 * permute:    y[i_perm[0], ..., i_perm[r-1]] = x[i_0, ..., i_{r-1}], y.shape[k] = x.shape[perm[k]]
 *             view: y.stride[k] = x.stride[perm[k]];        dx = permute(dy, inverse perm)
 * reshape:    y = x with a new shape; a view of a contiguous x (tg__op_new copies a strided x
 *             first, since reshape does not read strides);   dx = dy (viewed back)
 * narrow:     y = x[..., start:start+length, ...] along one axis; view: offset += start *
 *             x.stride[axis];                                 dx[slice] += dy
 * contiguous: y = x laid out row-major (reads x's strides);   dx += dy
 * Gradients are always contiguous buffers of their tensor's shape, so the backward rules of
 * views are the copies the forward no longer makes.
 */
#include "registry.h"
#include "vec.h"

#include <stdio.h>

static tg_tensor *permute_op(tg_ctx *ctx, const char *fn, int op, tg_tensor *x, const int *perm)
{
    if (!tg__check_srcs(ctx, fn, 1, &x))
        return NULL;
    if (!perm)
        return tg__err(ctx, TG_ERR_ARG, fn, "perm is NULL");
    int p[TG_MAX_RANK];
    bool seen[TG_MAX_RANK] = {false};
    int64_t shape[TG_MAX_RANK];
    for (int i = 0; i < x->rank; i++) {
        int a = tg__axis(perm[i], x->rank);
        if (a < 0 || seen[a]) {
            char b[128];
            return tg__err(ctx, TG_ERR_AXIS, fn,
                           "perm[%d] = %d is %s for x %s (need a permutation of 0..%d)", i,
                           perm[i], a < 0 ? "out of range" : "repeated",
                           tg__shape_str(x, b, sizeof b), x->rank - 1);
        }
        seen[a] = true;
        p[i] = a;
        shape[i] = x->shape[a];
    }
    tg_tensor *y = tg__op_new(ctx, op, x->dtype, x->rank, shape, 1, &x);
    if (!y)
        return NULL;
    for (int i = 0; i < TG_MAX_RANK; i++)
        y->p.permute.perm[i] = i < x->rank ? p[i] : i;
    y->base = x->base ? x->base : x; /* a view: strides permuted */
    y->offset = x->offset;
    for (int i = 0; i < x->rank; i++)
        y->stride[i] = x->stride[p[i]];
    return y;
}

tg_tensor *tg_permute(tg_ctx *ctx, tg_tensor *x, const int *perm)
{
    return permute_op(ctx, "tg_permute", TG_OP_PERMUTE, x, perm);
}

tg_tensor *tg_transpose(tg_ctx *ctx, tg_tensor *x, int axis0, int axis1)
{
    static const char *fn = "tg_transpose";
    if (!tg__check_srcs(ctx, fn, 1, &x))
        return NULL;
    int a0 = tg__axis(axis0, x->rank), a1 = tg__axis(axis1, x->rank);
    if (a0 < 0 || a1 < 0) {
        char b[128];
        return tg__err(ctx, TG_ERR_AXIS, fn, "axes (%d, %d) out of range for x %s", axis0,
                       axis1, tg__shape_str(x, b, sizeof b));
    }
    int perm[TG_MAX_RANK];
    for (int i = 0; i < x->rank; i++)
        perm[i] = i;
    perm[a0] = a1;
    perm[a1] = a0;
    return permute_op(ctx, fn, TG_OP_TRANSPOSE, x, perm);
}

/* The views' forward (transpose, permute, reshape, narrow): nothing to compute, the output is
 * a view of its source's memory; one function registered for both dtypes. */
tg_status tg__view_forward(const tg__call *c)
{
    (void)c;
    return TG_OK;
}

/* The kernels, written once in shape_kernel.h, for f32 and for f64: tg__permute_backward_f32 ...
 * tg__contiguous_backward_f64, registered per dtype in ops/ops_dtype.def. */
#define T float
#define SUF f32
#include "shape_kernel.h"
#undef T
#undef SUF
#define T double
#define SUF f64
#include "shape_kernel.h"
#undef T
#undef SUF
/* ---- reshape ------------------------------------------------------------------------------ */
tg_tensor *tg_reshape(tg_ctx *ctx, tg_tensor *x, int rank, const int64_t *shape)
{
    static const char *fn = "tg_reshape";
    if (!tg__check_srcs(ctx, fn, 1, &x))
        return NULL;
    if (rank < 0 || rank > TG_MAX_RANK || (rank > 0 && !shape))
        return tg__err(ctx, TG_ERR_ARG, fn, "rank %d out of range 0..%d (or shape NULL)", rank,
                       TG_MAX_RANK);
    int64_t s[TG_MAX_RANK], known = 1;
    int infer = -1;
    char bx[128], bs[128];
    for (int i = 0; i < rank; i++) {
        s[i] = shape[i];
        if (shape[i] == -1) {
            if (infer >= 0)
                return tg__err(ctx, TG_ERR_SHAPE, fn, "more than one -1 in shape %s",
                               tg__dims_str(rank, shape, bs, sizeof bs));
            infer = i;
        } else if (shape[i] < 1) {
            return tg__err(ctx, TG_ERR_SHAPE, fn, "invalid dim %lld in shape %s",
                           (long long)shape[i], tg__dims_str(rank, shape, bs, sizeof bs));
        } else if (known > x->numel / shape[i]) { /* product exceeds numel: no overflow */
            return tg__err(ctx, TG_ERR_SHAPE, fn,
                           "x %s has %lld elements, fewer than shape %s needs",
                           tg__shape_str(x, bx, sizeof bx), (long long)x->numel,
                           tg__dims_str(rank, shape, bs, sizeof bs));
        } else {
            known *= shape[i];
        }
    }
    if (infer >= 0) {
        if (known > x->numel || x->numel % known != 0)
            return tg__err(ctx, TG_ERR_SHAPE, fn, "cannot infer -1: x %s has %lld elements, "
                           "not a multiple of %lld", tg__shape_str(x, bx, sizeof bx),
                           (long long)x->numel, (long long)known);
        s[infer] = x->numel / known;
        known *= s[infer];
    }
    if (known != x->numel)
        return tg__err(ctx, TG_ERR_SHAPE, fn, "x %s has %lld elements but shape %s does not",
                       tg__shape_str(x, bx, sizeof bx), (long long)x->numel,
                       tg__dims_str(rank, shape, bs, sizeof bs));
    tg_tensor *y = tg__op_new(ctx, TG_OP_RESHAPE, x->dtype, rank, s, 1, &x);
    if (y) { /* y->src[0] is contiguous here (a copy of x if x was not) */
        tg_tensor *c = y->src[0];
        y->base = c->base ? c->base : c;
        y->offset = c->offset;
    }
    return y;
}
/* ---- narrow ------------------------------------------------------------------------------- */
tg_tensor *tg_narrow(tg_ctx *ctx, tg_tensor *x, int axis, int64_t start, int64_t length)
{
    static const char *fn = "tg_narrow";
    if (!tg__check_srcs(ctx, fn, 1, &x))
        return NULL;
    char b[128];
    int a = tg__axis(axis, x->rank);
    if (a < 0)
        return tg__err(ctx, TG_ERR_AXIS, fn, "axis %d out of range for x %s", axis,
                       tg__shape_str(x, b, sizeof b));
    if (start < 0 || length < 1 || start > x->shape[a] - length)
        return tg__err(ctx, TG_ERR_SHAPE, fn,
                       "slice [%lld, %lld) is outside axis %d of size %lld (x %s)",
                       (long long)start, (long long)((uint64_t)start + (uint64_t)length), a,
                       (long long)x->shape[a], tg__shape_str(x, b, sizeof b));
    int64_t shape[TG_MAX_RANK];
    memcpy(shape, x->shape, sizeof shape);
    shape[a] = length;
    tg_tensor *y = tg__op_new(ctx, TG_OP_NARROW, x->dtype, x->rank, shape, 1, &x);
    if (y) {
        y->p.narrow.axis = a;
        y->p.narrow.start = start;
        y->base = x->base ? x->base : x; /* a view: same strides, moved start */
        y->offset = x->offset + start * x->stride[a];
        memcpy(y->stride, x->stride, sizeof y->stride);
    }
    return y;
}
/* ---- contiguous ------------------------------------------------------------------------- */
tg_tensor *tg__contiguous(tg_ctx *ctx, tg_tensor *x)
{
    tg_tensor *y = tg__op_new(ctx, TG_OP_CONTIGUOUS, x->dtype, x->rank, x->shape, 1, &x);
    return y;
}

tg_tensor *tg_contiguous(tg_ctx *ctx, tg_tensor *x)
{
    if (!tg__check_srcs(ctx, "tg_contiguous", 1, &x))
        return NULL;
    return tg__contiguous(ctx, x);
}
