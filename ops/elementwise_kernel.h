/*
 * elementwise_kernel.h - the kernels of ops/elementwise.c (scale, relu, gelu; the broadcasting
 * forward of add, mul, sub and div through elementwise_binary_kernel.h; mul's backward) for one
 * float type. A template header: elementwise.c includes it once per dtype with T (float /
 * double) and SUF (f32 / f64) defined; FN(name) is name_f32 or name_f64. No include guard. The
 * math: elementwise.c.
 */
#define FN(name) TG__CAT(name, SUF)

/* ---- unary ops ---------------------------------------------------------------------------- */
/* Each element is written by exactly one iteration: race-free and thread-count independent.
 * The cheap loops (scale, relu) are branch-free range functions compiled per SIMD level
 * (TG_SIMD_CLONES) that fork only above TG_PAR_BYTES touched (src/core/vec.h); every operand is
 * loaded unconditionally so the compiler turns the selects into vector blends. */
TG_SIMD_CLONES static void FN(scale_range)(int64_t lo, int64_t hi, T s, const T *x, T *y, int mode)
{
    if (mode == 0) /* y = s x */
        for (int64_t i = lo; i < hi; i++)
            y[i] = s * x[i];
    else if (mode == 1) /* in place (TG_OPF_BWD_INPLACE): dx = 0 + s dy */
        for (int64_t i = lo; i < hi; i++)
            y[i] = (T)0 + s * y[i];
    else /* dx += s dy */
        for (int64_t i = lo; i < hi; i++)
            y[i] += s * x[i];
}

static void FN(scale_fwd)(const tg__call *c, int64_t n, T s, const T *x, T *y)
{
    TG_PAR_RANGE(c->nt, n * 2 * (int64_t)sizeof(T) > TG_PAR_BYTES, n, 16,
                 FN(scale_range)(lo, hi, s, x, y, 0));
}

static void FN(scale_bwd)(const tg__call *c, int64_t n, T s, const T *dy, T *dx)
{
    TG_PAR_RANGE(c->nt, n * 3 * (int64_t)sizeof(T) > TG_PAR_BYTES, n, 16,
                 FN(scale_range)(lo, hi, s, dy, dx, dx == dy ? 1 : 2));
}

TG_SIMD_CLONES static void FN(relu_fwd_range)(int64_t lo, int64_t hi, const T *x, T *y)
{
    for (int64_t i = lo; i < hi; i++) {
        T v = x[i];
        y[i] = v > 0 ? v : (v != v ? v : (T)0); /* NaN propagates */
    }
}

TG_SIMD_CLONES static void FN(relu_bwd_range)(int64_t lo, int64_t hi, const T *y, const T *dy,
                                              T *dx)
{
    if (dx == dy) { /* in place (TG_OPF_BWD_INPLACE): dx = 0 + dy [y > 0] */
        for (int64_t i = lo; i < hi; i++) {
            T g = dx[i];
            dx[i] = (T)0 + (y[i] > 0 ? g : (T)0);
        }
        return;
    }
    for (int64_t i = lo; i < hi; i++) {
        T g = dy[i];
        dx[i] += y[i] > 0 ? g : (T)0; /* y > 0 exactly where x > 0 */
    }
}

TG_SIMD_CLONES static void FN(gate_fwd_range)(int64_t lo, int64_t hi, const T *t, const T *r,
                                              T *y)
{
    for (int64_t i = lo; i < hi; i++)
        y[i] = r[i] > 0 ? t[i] : (T)0;
}

static void FN(relu_fwd)(const tg__call *c, int64_t n, const T *x, T *y)
{
    TG_PAR_RANGE(c->nt, n * 2 * (int64_t)sizeof(T) > TG_PAR_BYTES, n, 16,
                 FN(relu_fwd_range)(lo, hi, x, y));
}

static void FN(relu_bwd)(const tg__call *c, int64_t n, const T *y, const T *dy, T *dx)
{
    TG_PAR_RANGE(c->nt, n * 3 * (int64_t)sizeof(T) > TG_PAR_BYTES, n, 16,
                 FN(relu_bwd_range)(lo, hi, y, dy, dx));
}

static void FN(gelu_fwd)(int nt, int64_t n, const T *x, T *y)
{
    TG_OMP_FOR(nt, n > TG_PAR_MIN / 16)
    for (int64_t i = 0; i < n; i++) {
        double v = (double)x[i];
        y[i] = (T)(0.5 * v * (1.0 + erf(v * INV_SQRT2)));
    }
}

static void FN(gelu_bwd)(int nt, int64_t n, const T *x, const T *dy, T *dx)
{
    TG_OMP_FOR(nt, n > TG_PAR_MIN / 16)
    for (int64_t i = 0; i < n; i++) {
        double v = (double)x[i];
        double cdf = 0.5 * (1.0 + erf(v * INV_SQRT2));
        double pdf = INV_SQRT2PI * exp(-0.5 * v * v);
        dx[i] += (T)((double)dy[i] * (cdf + v * pdf));
    }
}

/* ---- binary broadcasting ops -------------------------------------------------------------- */
/* y = a (op) b over y's shape, for OP one of + * - /: rows of the last dim are the unit of
 * work, each row of y written by one iteration (elementwise_binary_kernel.h). */
#define BIN_NAME add
#define BIN_OP +
#include "elementwise_binary_kernel.h"

#define BIN_NAME mul
#define BIN_OP *
#include "elementwise_binary_kernel.h"

#define BIN_NAME sub
#define BIN_OP -
#include "elementwise_binary_kernel.h"

#define BIN_NAME div
#define BIN_OP /
#include "elementwise_binary_kernel.h"

/* dst[i] = dy[i] * other(broadcast)[i] over y's shape */
TG_SIMD_CLONES static void FN(mul_expand_rows)(const tg__call *c, const T *O, const int64_t *os,
                                               T *dst, int64_t lo, int64_t hi)
{
    const T *G = c->dy;
    int r = c->rank;
    int64_t L = r ? c->shape[r - 1] : 1, osl = r ? os[r - 1] : 0;
    for (int64_t row = lo; row < hi; row++) {
        int64_t rem = row, oo = 0;
        for (int d = r - 2; d >= 0; d--) {
            oo += (rem % c->shape[d]) * os[d];
            rem /= c->shape[d];
        }
        BCAST_ROW(*, dst + row * L, G + row * L, O + oo, 1, osl, L);
    }
}

TG_SIMD_CLONES static void FN(mul_acc)(const T *G, const T *O, T *dx, int64_t lo, int64_t hi)
{
    for (int64_t i = lo; i < hi; i++)
        dx[i] += G[i] * O[i];
}

/* dst[i] = dy[i] * other(broadcast)[i] over y's shape; rows owned by one call */
static void FN(mul_expand)(const tg__call *c, int o, T *dst)
{
    int r = c->rank;
    int64_t os[TG_MAX_RANK];
    tg__bcast_strides(c->src_rank[o], c->src_shape[o], r, os);
    int64_t L = r ? c->shape[r - 1] : 1;
    TG_PAR_RANGE(c->nt, c->numel * 3 * (int64_t)sizeof(T) > TG_PAR_BYTES,
                 c->numel / L, 1, FN(mul_expand_rows)(c, c->in[o], os, dst, lo, hi));
}

tg_status FN(tg__mul_backward)(const tg__call *c)
{
    for (int s = 0; s < 2; s++) {
        if (!c->dx[s])
            continue;
        if (c->src_numel[s] == c->numel && c->src_numel[1 - s] == c->numel) {
            TG_PAR_RANGE(c->nt,
                         c->numel * 3 * (int64_t)sizeof(T) > TG_PAR_BYTES, c->numel, 16,
                         FN(mul_acc)(c->dy, c->in[1 - s], c->dx[s], lo, hi));
            continue;
        }
        FN(mul_expand)(c, 1 - s, c->ws);
        tg__reduce_to(c->govs, c->nt, c->dtype, c->ws, c->rank, c->shape, c->src_rank[s],
                      c->src_shape[s], c->dx[s]);
    }
    return TG_OK;
}

/* ---- the registry's kernels (ops/ops_dtype.def) ------------------------------------------- */
tg_status FN(tg__scale_forward)(const tg__call *c)
{
    FN(scale_fwd)(c, c->numel, (T)c->p->scale.s, c->in[0], c->out);
    return TG_OK;
}

tg_status FN(tg__scale_backward)(const tg__call *c)
{
    if (c->dx[0])
        FN(scale_bwd)(c, c->numel, (T)c->p->scale.s, c->dy, c->dx[0]);
    return TG_OK;
}

tg_status FN(tg__relu_forward)(const tg__call *c)
{
    FN(relu_fwd)(c, c->numel, c->in[0], c->out);
    return TG_OK;
}

tg_status FN(tg__relu_backward)(const tg__call *c)
{
    if (c->dx[0])
        FN(relu_bwd)(c, c->numel, c->out, c->dy, c->dx[0]);
    return TG_OK;
}

/* relu_gate: y = t [r > 0]; backward is ReLU's with r in y's place (dt = dy [r > 0]) */
tg_status FN(tg__relu_gate_forward)(const tg__call *c)
{
    const T *t = c->in[0], *r = c->in[1];
    T *y = c->out;
    TG_PAR_RANGE(c->nt, c->numel * 3 * (int64_t)sizeof(T) > TG_PAR_BYTES, c->numel, 16,
                 FN(gate_fwd_range)(lo, hi, t, r, y));
    return TG_OK;
}

tg_status FN(tg__relu_gate_backward)(const tg__call *c)
{
    if (c->dx[0])
        FN(relu_bwd)(c, c->numel, c->in[1], c->dy, c->dx[0]);
    return TG_OK;
}

tg_status FN(tg__gelu_forward)(const tg__call *c)
{
    FN(gelu_fwd)(c->nt, c->numel, c->in[0], c->out);
    return TG_OK;
}

tg_status FN(tg__gelu_backward)(const tg__call *c)
{
    if (c->dx[0])
        FN(gelu_bwd)(c->nt, c->numel, c->in[0], c->dy, c->dx[0]);
    return TG_OK;
}

/* da = reduce(dy), db = reduce(dy); in place (TG_OPF_BWD_INPLACE, BWD_SHARE1) dx is dy
 * already, as 0 + dy. */
tg_status FN(tg__add_backward)(const tg__call *c)
{
    for (int s = 0; s < 2; s++) {
        if (c->dx[s] == c->dy)
            tg__plus_zero(c->govs, c->nt, c->dtype, c->numel, c->dx[s]);
        else if (c->dx[s])
            tg__reduce_to(c->govs, c->nt, c->dtype, c->dy, c->rank, c->shape, c->src_rank[s],
                          c->src_shape[s], c->dx[s]);
    }
    return TG_OK;
}

#undef FN
