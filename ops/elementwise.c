/*
 * elementwise.c - scale, add, mul (broadcasting), relu, gelu; the broadcasting forward loop is also
 * sub's and div's (ops/arith.c has their math and backward rules).
 *
 * scale: y = s x                      dx = s dy
 * add:   y = a + b (broadcast)        da = reduce(dy), db = reduce(dy)
 * mul:   y = a * b (broadcast)        da = reduce(dy * b), db = reduce(dy * a)
 * relu:  y = max(0, x)                dx = dy [x > 0]            (PyTorch: gradient 0 at 0)
 * gelu:  y = x Phi(x) = x/2 (1 + erf(x / sqrt 2))
 *                                     dx = dy (Phi(x) + x phi(x))  (Hendrycks & Gimpel 2016;
 *                                     PyTorch nn.GELU(approximate='none'))
 * reduce() sums over broadcast dims (tg__reduce_to), in a fixed order per element.
 */
#include "registry.h"
#include "vec.h"

#include <stdio.h>

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

#define INV_SQRT2 0.70710678118654752440
#define INV_SQRT2PI 0.39894228040143267794

/* Each element is written by exactly one iteration: race-free and thread-count independent.
 * The cheap loops (scale, relu) are branch-free range functions compiled per SIMD level
 * (TG_SIMD_CLONES) that fork only above TG_PAR_BYTES touched (src/core/vec.h); every operand is
 * loaded unconditionally so the compiler turns the selects into vector blends. */
#define DEFINE_UNARY(T, SUF)                                                                   \
    TG_SIMD_CLONES static void scale_range_##SUF(int64_t lo, int64_t hi, T s, const T *x,    \
                                                 T *y, int mode)                               \
    {                                                                                          \
        if (mode == 0) /* y = s x */                                                           \
            for (int64_t i = lo; i < hi; i++)                                                  \
                y[i] = s * x[i];                                                               \
        else if (mode == 1) /* in place (TG_OPF_BWD_INPLACE): dx = 0 + s dy */                 \
            for (int64_t i = lo; i < hi; i++)                                                  \
                y[i] = (T)0 + s * y[i];                                                        \
        else /* dx += s dy */                                                                  \
            for (int64_t i = lo; i < hi; i++)                                                  \
                y[i] += s * x[i];                                                              \
    }                                                                                          \
    static void scale_fwd_##SUF(int nt, int64_t n, T s, const T *x, T *y)                      \
    {                                                                                          \
        TG_PAR_RANGE(nt, n * 2 * (int64_t)sizeof(T) > TG_PAR_BYTES, n, 16,                     \
                     scale_range_##SUF(lo, hi, s, x, y, 0));                                   \
    }                                                                                          \
    static void scale_bwd_##SUF(int nt, int64_t n, T s, const T *dy, T *dx)                    \
    {                                                                                          \
        TG_PAR_RANGE(nt, n * 3 * (int64_t)sizeof(T) > TG_PAR_BYTES, n, 16,                     \
                     scale_range_##SUF(lo, hi, s, dy, dx, dx == dy ? 1 : 2));                  \
    }                                                                                          \
    TG_SIMD_CLONES static void relu_fwd_range_##SUF(int64_t lo, int64_t hi, const T *x, T *y)  \
    {                                                                                          \
        for (int64_t i = lo; i < hi; i++) {                                                    \
            T v = x[i];                                                                        \
            y[i] = v > 0 ? v : (v != v ? v : (T)0); /* NaN propagates */                       \
        }                                                                                      \
    }                                                                                          \
    TG_SIMD_CLONES static void relu_bwd_range_##SUF(int64_t lo, int64_t hi, const T *y,        \
                                                    const T *dy, T *dx)                        \
    {                                                                                          \
        if (dx == dy) { /* in place (TG_OPF_BWD_INPLACE): dx = 0 + dy [y > 0] */               \
            for (int64_t i = lo; i < hi; i++) {                                                \
                T g = dx[i];                                                                   \
                dx[i] = (T)0 + (y[i] > 0 ? g : (T)0);                                          \
            }                                                                                  \
            return;                                                                            \
        }                                                                                      \
        for (int64_t i = lo; i < hi; i++) {                                                    \
            T g = dy[i];                                                                       \
            dx[i] += y[i] > 0 ? g : (T)0; /* y > 0 exactly where x > 0 */                    \
        }                                                                                      \
    }                                                                                          \
    static void relu_fwd_##SUF(int nt, int64_t n, const T *x, T *y)                            \
    {                                                                                          \
        TG_PAR_RANGE(nt, n * 2 * (int64_t)sizeof(T) > TG_PAR_BYTES, n, 16,                     \
                     relu_fwd_range_##SUF(lo, hi, x, y));                                      \
    }                                                                                          \
    static void relu_bwd_##SUF(int nt, int64_t n, const T *y, const T *dy, T *dx)              \
    {                                                                                          \
        TG_PAR_RANGE(nt, n * 3 * (int64_t)sizeof(T) > TG_PAR_BYTES, n, 16,                     \
                     relu_bwd_range_##SUF(lo, hi, y, dy, dx));                                 \
    }                                                                                          \
    static void gelu_fwd_##SUF(int nt, int64_t n, const T *x, T *y)                            \
    {                                                                                          \
        TG_OMP_FOR(nt, n > TG_PAR_MIN / 16)                                                    \
        for (int64_t i = 0; i < n; i++) {                                                      \
            double v = (double)x[i];                                                           \
            y[i] = (T)(0.5 * v * (1.0 + erf(v * INV_SQRT2)));                                  \
        }                                                                                      \
    }                                                                                          \
    static void gelu_bwd_##SUF(int nt, int64_t n, const T *x, const T *dy, T *dx)              \
    {                                                                                          \
        TG_OMP_FOR(nt, n > TG_PAR_MIN / 16)                                                    \
        for (int64_t i = 0; i < n; i++) {                                                      \
            double v = (double)x[i];                                                           \
            double cdf = 0.5 * (1.0 + erf(v * INV_SQRT2));                                     \
            double pdf = INV_SQRT2PI * exp(-0.5 * v * v);                                      \
            dx[i] += (T)((double)dy[i] * (cdf + v * pdf));                                     \
        }                                                                                      \
    }
DEFINE_UNARY(float, f32)
DEFINE_UNARY(double, f64)

#define DISPATCH(y, call32, call64)                                                            \
    do {                                                                                       \
        if ((y)->dtype == TG_F32)                                                              \
            call32;                                                                            \
        else                                                                                   \
            call64;                                                                            \
    } while (0)

tg_status tg__scale_forward(const tg__call *c)
{
    const tg_tensor *y = c->y;
    int nt = c->nt;
    DISPATCH(y, scale_fwd_f32(nt, y->numel, (float)y->p.scale.s, c->in[0], c->out),
             scale_fwd_f64(nt, y->numel, y->p.scale.s, c->in[0], c->out));
    return TG_OK;
}

tg_status tg__scale_backward(const tg__call *c)
{
    const tg_tensor *y = c->y;
    if (!c->dx[0])
        return TG_OK;
    int nt = c->nt;
    DISPATCH(y, scale_bwd_f32(nt, y->numel, (float)y->p.scale.s, c->dy, c->dx[0]),
             scale_bwd_f64(nt, y->numel, y->p.scale.s, c->dy, c->dx[0]));
    return TG_OK;
}

tg_status tg__relu_forward(const tg__call *c)
{
    const tg_tensor *y = c->y;
    int nt = c->nt;
    DISPATCH(y, relu_fwd_f32(nt, y->numel, c->in[0], c->out),
             relu_fwd_f64(nt, y->numel, c->in[0], c->out));
    return TG_OK;
}

tg_status tg__relu_backward(const tg__call *c)
{
    const tg_tensor *y = c->y;
    if (!c->dx[0])
        return TG_OK;
    int nt = c->nt;
    DISPATCH(y, relu_bwd_f32(nt, y->numel, c->out, c->dy, c->dx[0]),
             relu_bwd_f64(nt, y->numel, c->out, c->dy, c->dx[0]));
    return TG_OK;
}

tg_status tg__gelu_forward(const tg__call *c)
{
    const tg_tensor *y = c->y;
    int nt = c->nt;
    DISPATCH(y, gelu_fwd_f32(nt, y->numel, c->in[0], c->out),
             gelu_fwd_f64(nt, y->numel, c->in[0], c->out));
    return TG_OK;
}

tg_status tg__gelu_backward(const tg__call *c)
{
    const tg_tensor *y = c->y;
    if (!c->dx[0])
        return TG_OK;
    int nt = c->nt;
    DISPATCH(y, gelu_bwd_f32(nt, y->numel, c->in[0], c->dy, c->dx[0]),
             gelu_bwd_f64(nt, y->numel, c->in[0], c->dy, c->dx[0]));
    return TG_OK;
}

/* ---- binary broadcasting ops --------------------------------------------------------------
 * workspace (mul's backward, only when an operand is broadcast): y->numel elements holding
 * dy * other before it is reduced onto the operand's shape. */

size_t tg__mul_ws(const tg__call *c)
{
    const tg_tensor *y = c->y;
    int nt = c->nt;
    bool backward = c->backward;
    (void)nt;
    bool bcast = y->src[0]->numel != y->numel || y->src[1]->numel != y->numel;
    return backward && bcast ? (size_t)y->numel * tg_dtype_size(y->dtype) : 0;
}

tg_tensor *tg_add(tg_ctx *ctx, tg_tensor *a, tg_tensor *b)
{
    return tg__binary_new(ctx, TG_OP_ADD, "tg_add", a, b);
}

tg_tensor *tg_mul(tg_ctx *ctx, tg_tensor *a, tg_tensor *b)
{
    return tg__binary_new(ctx, TG_OP_MUL, "tg_mul", a, b);
}

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

/* y = a OP b over y's shape: same-shape operands as one flat loop; broadcast ones by rows of the
 * last axis (each row of y written by one call, its operand offsets decoded from the row index),
 * with a contiguous inner loop. Ranges [lo, hi) of elements resp. rows: race-free. */
#define BINARY_FWD(T, SUF, NAME, OP)                                                           \
    TG_SIMD_CLONES static void NAME##_flat_##SUF(const T *A, const T *B, T *Y, int64_t lo,    \
                                                 int64_t hi)                                   \
    {                                                                                          \
        for (int64_t i = lo; i < hi; i++)                                                      \
            Y[i] = A[i] OP B[i];                                                               \
    }                                                                                          \
    TG_SIMD_CLONES static void NAME##_rows_##SUF(const tg__call *c, const int64_t *as,        \
                                                 const int64_t *bs, int64_t lo, int64_t hi)    \
    {                                                                                          \
        const tg_tensor *y = c->y;                                                             \
        const T *A = c->in[0], *B = c->in[1];                                    \
        T *Y = c->out;                                                                        \
        int r = y->rank;                                                                       \
        int64_t L = r ? y->shape[r - 1] : 1;                                                   \
        int64_t asl = r ? as[r - 1] : 0, bsl = r ? bs[r - 1] : 0;                              \
        for (int64_t row = lo; row < hi; row++) {                                              \
            int64_t rem = row, ao = 0, bo = 0;                                                 \
            for (int d = r - 2; d >= 0; d--) {                                                 \
                int64_t idx = rem % y->shape[d];                                               \
                rem /= y->shape[d];                                                            \
                ao += idx * as[d];                                                             \
                bo += idx * bs[d];                                                             \
            }                                                                                  \
            BCAST_ROW(OP, Y + row * L, A + ao, B + bo, asl, bsl, L);                           \
        }                                                                                      \
    }                                                                                          \
    static void NAME##_fwd_##SUF(const tg__call *c)                                           \
    {                                                                                          \
        const tg_tensor *y = c->y;                                                             \
        const tg_tensor *a = y->src[0], *b = y->src[1];                                        \
        int nt = c->nt;                                                          \
        int64_t n = y->numel;                                                                  \
        bool par = n * 3 * (int64_t)sizeof(T) > TG_PAR_BYTES;                                  \
        if (a->numel == n && b->numel == n) {                                                  \
            TG_PAR_RANGE(nt, par, n, 16, NAME##_flat_##SUF(c->in[0], c->in[1], c->out, lo, hi));\
            return;                                                                            \
        }                                                                                      \
        int r = y->rank;                                                                       \
        int64_t as[TG_MAX_RANK], bs[TG_MAX_RANK];                                              \
        tg__bcast_strides(a, r, y->shape, as);                                                 \
        tg__bcast_strides(b, r, y->shape, bs);                                                 \
        int64_t L = r ? y->shape[r - 1] : 1;                                                   \
        TG_PAR_RANGE(nt, par, n / L, 1, NAME##_rows_##SUF(c, as, bs, lo, hi));                 \
    }

#define DEFINE_BINARY(T, SUF)                                                                  \
    /* y = a (op) b over y's shape, for OP one of + * - /: rows of the last dim are the unit of \
     * work, each row of y written by one iteration. */                                       \
    BINARY_FWD(T, SUF, add, +)                                                                 \
    BINARY_FWD(T, SUF, mul, *)                                                                 \
    BINARY_FWD(T, SUF, sub, -)                                                                 \
    BINARY_FWD(T, SUF, div, /)                                                                 \
    /* dst[i] = dy[i] * other(broadcast)[i] over y's shape */                                  \
    TG_SIMD_CLONES static void mul_expand_rows_##SUF(const tg__call *c, const T *O,           \
                                                     const int64_t *os, T *dst, int64_t lo,    \
                                                     int64_t hi)                               \
    {                                                                                          \
        const tg_tensor *y = c->y;                                                             \
        const T *G = c->dy;                                                                  \
        int r = y->rank;                                                                       \
        int64_t L = r ? y->shape[r - 1] : 1, osl = r ? os[r - 1] : 0;                          \
        for (int64_t row = lo; row < hi; row++) {                                              \
            int64_t rem = row, oo = 0;                                                         \
            for (int d = r - 2; d >= 0; d--) {                                                 \
                oo += (rem % y->shape[d]) * os[d];                                             \
                rem /= y->shape[d];                                                            \
            }                                                                                  \
            BCAST_ROW(*, dst + row * L, G + row * L, O + oo, 1, osl, L);                       \
        }                                                                                      \
    }                                                                                          \
    TG_SIMD_CLONES static void mul_acc_##SUF(const T *G, const T *O, T *dx, int64_t lo,        \
                                             int64_t hi)                                       \
    {                                                                                          \
        for (int64_t i = lo; i < hi; i++)                                                      \
            dx[i] += G[i] * O[i];                                                              \
    }                                                                                          \
    /* dst[i] = dy[i] * other(broadcast)[i] over y's shape; rows owned by one call */          \
    static void mul_expand_##SUF(const tg__call *c, int o, T *dst)                            \
    {                                                                                          \
        const tg_tensor *y = c->y, *other = y->src[o];                                         \
        int r = y->rank;                                                                       \
        int64_t os[TG_MAX_RANK];                                                               \
        tg__bcast_strides(other, r, y->shape, os);                                             \
        int64_t L = r ? y->shape[r - 1] : 1;                                                   \
        TG_PAR_RANGE(c->nt, y->numel * 3 * (int64_t)sizeof(T) > TG_PAR_BYTES,   \
                     y->numel / L, 1, mul_expand_rows_##SUF(c, c->in[o], os, dst, lo, hi));       \
    }                                                                                          \
    static void mul_bwd_##SUF(const tg__call *c)                                              \
    {                                                                                          \
        const tg_tensor *y = c->y;                                                             \
        for (int s = 0; s < 2; s++) {                                                          \
            tg_tensor *x = y->src[s], *other = y->src[1 - s];                                  \
            if (!c->dx[s])                                                                     \
                continue;                                                                      \
            if (x->numel == y->numel && other->numel == y->numel) {                            \
                TG_PAR_RANGE(c->nt,                                              \
                             y->numel * 3 * (int64_t)sizeof(T) > TG_PAR_BYTES, y->numel, 16,    \
                             mul_acc_##SUF(c->dy, c->in[1 - s], c->dx[s], lo, hi));          \
                continue;                                                                      \
            }                                                                                  \
            mul_expand_##SUF(c, 1 - s, c->ws);                                                  \
            tg__reduce_to(c->nt, y->dtype, c->ws, y->rank, y->shape, x, c->dx[s]);            \
        }                                                                                      \
    }
DEFINE_BINARY(float, f32)
DEFINE_BINARY(double, f64)

tg_status tg__add_forward(const tg__call *c)
{
    const tg_tensor *y = c->y;
    if (y->dtype == TG_F32)
        add_fwd_f32(c);
    else
        add_fwd_f64(c);
    return TG_OK;
}

tg_status tg__add_backward(const tg__call *c)
{
    const tg_tensor *y = c->y;
    for (int s = 0; s < 2; s++) {
        tg_tensor *x = y->src[s];
        if (c->dx[s] == c->dy) /* in place: dx is dy already (as 0 + dy) */
            tg__plus_zero(c->nt, y->dtype, y->numel, c->dx[s]);
        else if (c->dx[s])
            tg__reduce_to(c->nt, y->dtype, c->dy, y->rank, y->shape, x, c->dx[s]);
    }
    return TG_OK;
}

tg_status tg__mul_forward(const tg__call *c)
{
    const tg_tensor *y = c->y;
    if (y->dtype == TG_F32)
        mul_fwd_f32(c);
    else
        mul_fwd_f64(c);
    return TG_OK;
}

/* sub and div (ops/arith.c) share the broadcasting forward loop. */
tg_status tg__sub_forward(const tg__call *c)
{
    const tg_tensor *y = c->y;
    if (y->dtype == TG_F32)
        sub_fwd_f32(c);
    else
        sub_fwd_f64(c);
    return TG_OK;
}

tg_status tg__div_forward(const tg__call *c)
{
    const tg_tensor *y = c->y;
    if (y->dtype == TG_F32)
        div_fwd_f32(c);
    else
        div_fwd_f64(c);
    return TG_OK;
}

tg_status tg__mul_backward(const tg__call *c)
{
    const tg_tensor *y = c->y;
    if (y->dtype == TG_F32)
        mul_bwd_f32(c);
    else
        mul_bwd_f64(c);
    return TG_OK;
}
