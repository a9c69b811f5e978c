/*
 * elementwise.c - scale, add, mul (broadcasting), relu, gelu; the broadcasting forward loop is also
 * sub's and div's (ops/arith.c has their math and backward rules).
 *
 * scale: y = s x                      dx = s dy
 * add:   y = a + b (broadcast)        da = reduce(dy), db = reduce(dy)
 * mul:   y = a * b (broadcast)        da = reduce(dy * b), db = reduce(dy * a)
 * relu:  y = max(0, x)                dx = dy [x > 0]            (PyTorch: gradient 0 at 0)
 * relu_gate: y = t [r > 0]            dt = dy [r > 0], dr = 0    (PyTorch threshold_backward)
 * gelu:  y = x Phi(x) = x/2 (1 + erf(x / sqrt 2))
 *                                     dx = dy (Phi(x) + x phi(x))  (Hendrycks & Gimpel 2016;
 *                                     PyTorch nn.GELU(approximate='none'))
 * reduce() sums over broadcast dims (tg__reduce_to), in a fixed order per element.
 */
#include "registry.h"
#include "vec.h"

#include <stdio.h>
#include <string.h>

/* ---- unary ops -------------------------------------------------------------------------- */
static tg_tensor *unary(tg_ctx *ctx, int op, const char *fn, tg_tensor *x)
{
    if (!tg__check_srcs(ctx, fn, 1, &x))
        return NULL;
    return tg__op_new(ctx, op, x->dtype, x->rank, x->shape, 1, &x);
}

tg_tensor *tg_scale(tg_ctx *ctx, tg_tensor *x, double s)
{
    if (!x)
        return NULL;
    if (!isfinite(s))
        return tg__err(ctx, TG_ERR_ARG, "tg_scale", "scale factor %g is not finite", s);
    tg_tensor *y = unary(ctx, TG_OP_SCALE, "tg_scale", x);
    if (y)
        y->p.scale.s = s;
    return y;
}

tg_tensor *tg_relu(tg_ctx *ctx, tg_tensor *x) { return unary(ctx, TG_OP_RELU, "tg_relu", x); }
tg_tensor *tg_gelu(tg_ctx *ctx, tg_tensor *x) { return unary(ctx, TG_OP_GELU, "tg_gelu", x); }

tg_tensor *tg_relu_gate(tg_ctx *ctx, tg_tensor *t, tg_tensor *r)
{
    static const char *fn = "tg_relu_gate";
    tg_tensor *src[2] = {t, r};
    if (!tg__check_srcs(ctx, fn, 2, src))
        return NULL;
    if (t->rank != r->rank || memcmp(t->shape, r->shape, sizeof t->shape) != 0) {
        char a[128], b[128];
        return tg__err(ctx, TG_ERR_SHAPE, fn, "t %s and r %s must have one shape",
                       tg__shape_str(t, a, sizeof a), tg__shape_str(r, b, sizeof b));
    }
    return tg__op_new(ctx, TG_OP_RELU_GATE, t->dtype, t->rank, t->shape, 2, src);
}

#define INV_SQRT2 0.70710678118654752440
#define INV_SQRT2PI 0.39894228040143267794

/* yr[j] = a[j * as] OP b[j * bs] for j < L, with the last-axis strides as, bs in {0, 1}: one
 * contiguous (vectorized) inner loop per stride pattern. */
#define BCAST_ROW(OP, yr, ap, bp, as, bs, L)                                                   \
    do {                                                                                       \
        if ((as) && (bs))                                                                      \
            for (int64_t j = 0; j < (L); j++)                                                  \
                (yr)[j] = (ap)[j] OP (bp)[j];                                                  \
        else if (as) {                                                                         \
            for (int64_t j = 0; j < (L); j++)                                                  \
                (yr)[j] = (ap)[j] OP (bp)[0];                                                  \
        } else if (bs) {                                                                       \
            for (int64_t j = 0; j < (L); j++)                                                  \
                (yr)[j] = (ap)[0] OP (bp)[j];                                                  \
        } else {                                                                               \
            for (int64_t j = 0; j < (L); j++)                                                  \
                (yr)[j] = (ap)[0] OP (bp)[0];                                                  \
        }                                                                                      \
    } while (0)

/* The kernels, written once in elementwise_kernel.h, for f32 and for f64: tg__scale_forward_f32
 * ... tg__mul_backward_f64 and the forwards of sub and div (ops/arith.c has their backward
 * rules), registered per dtype in ops/ops_dtype.def. */
#define T float
#define SUF f32
#include "elementwise_kernel.h"
#undef T
#undef SUF
#define T double
#define SUF f64
#include "elementwise_kernel.h"
#undef T
#undef SUF

/* ---- binary broadcasting ops --------------------------------------------------------------
 * workspace (mul's backward, only when an operand is broadcast): c->numel elements holding
 * dy * other before it is reduced onto the operand's shape. */

size_t tg__mul_ws(const tg__call *c)
{
    int nt = c->nt;
    bool backward = c->backward;
    (void)nt;
    bool bcast = c->src_numel[0] != c->numel || c->src_numel[1] != c->numel;
    return backward && bcast ? (size_t)c->numel * tg_dtype_size(c->dtype) : 0;
}

tg_tensor *tg_add(tg_ctx *ctx, tg_tensor *a, tg_tensor *b)
{
    return tg__binary_new(ctx, TG_OP_ADD, "tg_add", a, b);
}

tg_tensor *tg_mul(tg_ctx *ctx, tg_tensor *a, tg_tensor *b)
{
    return tg__binary_new(ctx, TG_OP_MUL, "tg_mul", a, b);
}
