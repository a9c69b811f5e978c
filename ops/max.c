/*
 * max.c - maximum over one axis (PyTorch torch.max(x, dim, keepdim).values).
 *
 * x viewed as (outer, A, inner):
 *   y[o, i] = max_a x[o, a, i],  k[o, i] = the first a attaining it
 *   dx[o, k[o, i], i] += dy[o, i]  (gradient to the FIRST maximum; 0 elsewhere)
 * Ties: strict comparison keeps the first of equal values (+0 == -0). NaN counts as the
 * maximum, as in PyTorch: the first NaN of a slice is its value and its index.
 * saved: k, one int64 per element of y, written by forward for every element; backward reads
 * only k and dy (no source data), so x may be freed after forward.
 */
#include "registry.h"

#include <string.h>

tg_tensor *tg_max(tg_ctx *ctx, tg_tensor *x, int axis, bool keepdim)
{
    static const char *fn = "tg_max";
    if (!tg__check_srcs(ctx, fn, 1, &x))
        return NULL;
    if (x->dtype != TG_F32 && x->dtype != TG_F64)
        return tg__err(ctx, TG_ERR_DTYPE, fn, "x is %s; expected f32 or f64",
                       tg_dtype_str(x->dtype));
    int a = tg__axis(axis, x->rank);
    if (a < 0) {
        char b[128];
        return tg__err(ctx, TG_ERR_AXIS, fn, "axis %d out of range for x %s (rank %d)", axis,
                       tg__shape_str(x, b, sizeof b), x->rank);
    }
    int64_t shape[TG_MAX_RANK];
    int r = 0;
    for (int i = 0; i < x->rank; i++) {
        if (i == a && !keepdim)
            continue;
        shape[r++] = i == a ? 1 : x->shape[i];
    }
    tg_tensor *y = tg__op_new(ctx, TG_OP_MAX, x->dtype, r, shape, 1, &x);
    if (!y)
        return NULL;
    y->p.max.axis = a;
    if (!tg__op_save_n(y, y->numel, sizeof(int64_t), 0))
        return NULL;
    return y;
}

static void split(const tg__call *c, int64_t *outer, int64_t *A, int64_t *inner)
{
    const int64_t *xs = c->src_shape[0];
    int a = c->p->max.axis;
    *outer = *inner = 1;
    for (int i = 0; i < a; i++)
        *outer *= xs[i];
    for (int i = a + 1; i < c->src_rank[0]; i++)
        *inner *= xs[i];
    *A = xs[a];
}

/* The kernels, written once in max_kernel.h, for f32 and for f64: tg__max_forward_f32 ...
 * _backward_f64, registered per dtype in ops/ops_dtype.def. */
#define T float
#define SUF f32
#include "max_kernel.h"
#undef T
#undef SUF
#define T double
#define SUF f64
#include "max_kernel.h"
#undef T
#undef SUF

/* grad_mask of a max node (ops/grad_mask.c): the one-hot of the saved arg-max along the axis,
 * out viewed as (outer, A, inner) from the call's own shape (x's). */
void tg__max_grad_mask(const tg__call *c)
{
    const int64_t *K = c->src_saved;
    int a = c->p->grad_mask.axis;
    int64_t outer = 1, inner = 1, A = c->shape[a];
    for (int i = 0; i < a; i++)
        outer *= c->shape[i];
    for (int i = a + 1; i < c->rank; i++)
        inner *= c->shape[i];
    size_t es = c->dtype == TG_F64 ? sizeof(double) : sizeof(float);
    memset(c->out, 0, es * (size_t)c->numel);
    for (int64_t oi = 0; oi < outer * inner; oi++) {
        int64_t at = (oi / inner * A + K[oi]) * inner + oi % inner;
        if (c->dtype == TG_F64)
            ((double *)c->out)[at] = 1.0;
        else
            ((float *)c->out)[at] = 1.0f;
    }
}
