/*
 * unary_kernel.h - the kernels of ops/unary.c (neg, exp, log, sqrt, tanh, sigmoid, silu,
 * gelu_tanh, erf) for one float type. A template header: unary.c includes it once per dtype with T
 * (float / double), SUF (f32 / f64) and EXP, LOG, SQRT, TANH (expf, logf, sqrtf, tanhf / exp,
 * log, sqrt, tanh) defined; FN(name) is name_f32 or name_f64. Each op's forward and backward
 * loop is unary_op_kernel.h, included here once per op. No include guard. The math: unary.c.
 */
#define FN(name) TG__CAT(name, SUF)

/* silu's dx / dy at v = x */
static inline T FN(silu_d)(T v)
{
    T s = (T)1 / ((T)1 + EXP(-v));
    return s * ((T)1 + v * ((T)1 - s));
}

/* gelu_tanh's y at v = x */
static inline T FN(gelu_tanh)(T v)
{
    T inner = (T)GELU_BETA * (v + (T)GELU_KAPPA * (v * v * v));
    return (T)0.5 * v * ((T)1 + TANH(inner));
}

/* gelu_tanh's dx / dy at v = x */
static inline T FN(gelu_tanh_d)(T v)
{
    T v2 = v * v;
    T t = TANH((T)GELU_BETA * (v + (T)GELU_KAPPA * (v2 * v)));
    T left = (T)0.5 * v, right = (T)1 + t;
    T dleft = (T)0.5 * right;
    T dright = left * ((T)1 - t * t) * ((T)GELU_BETA * ((T)1 + (T)3 * (T)GELU_KAPPA * v2));
    return dleft + dright;
}

/* The loops: y[i] = UN_Y (v = x[i]) and dx[i] += UN_DX (g = dy[i], v = x[i] or y[i]).
 * Transcendental loops split at TG_PAR_MIN / 8 elements, cheap ones at TG_PAR_MIN. */
/* neg: y = -x, dx = -dy (reads neither) */
#define UN_NAME neg
#define UN_Y (-v)
#define UN_DX (-g)
#define UN_FWD_PAR TG_PAR_MIN
#define UN_BWD_PAR TG_PAR_MIN
#include "unary_op_kernel.h"

/* exp: y = e^x, dx = dy y (v = y) */
#define UN_NAME exp
#define UN_Y EXP(v)
#define UN_DX (g * v)
#define UN_FWD_PAR (TG_PAR_MIN / 8)
#define UN_BWD_PAR TG_PAR_MIN
#include "unary_op_kernel.h"

/* log: y = ln x, dx = dy / x (v = x) */
#define UN_NAME log
#define UN_Y LOG(v)
#define UN_DX (g / v)
#define UN_FWD_PAR (TG_PAR_MIN / 8)
#define UN_BWD_PAR TG_PAR_MIN
#include "unary_op_kernel.h"

/* sqrt: y = sqrt(x), dx = dy / (2 y) (v = y) */
#define UN_NAME sqrt
#define UN_Y SQRT(v)
#define UN_DX (g / ((T)2 * v))
#define UN_FWD_PAR (TG_PAR_MIN / 8)
#define UN_BWD_PAR TG_PAR_MIN
#include "unary_op_kernel.h"

/* tanh: y = tanh(x), dx = dy (1 - y^2) (v = y) */
#define UN_NAME tanh
#define UN_Y TANH(v)
#define UN_DX (g * ((T)1 - v * v))
#define UN_FWD_PAR (TG_PAR_MIN / 8)
#define UN_BWD_PAR TG_PAR_MIN
#include "unary_op_kernel.h"

/* sigmoid: y = 1 / (1 + e^-x), dx = dy (1 - y) y (v = y) */
#define UN_NAME sigmoid
#define UN_Y ((T)1 / ((T)1 + EXP(-v)))
#define UN_DX (g * ((T)1 - v) * v)
#define UN_FWD_PAR (TG_PAR_MIN / 8)
#define UN_BWD_PAR TG_PAR_MIN
#include "unary_op_kernel.h"

/* silu: y = x s(x), dx = dy s (1 + x (1 - s)) (v = x) */
#define UN_NAME silu
#define UN_Y (v / ((T)1 + EXP(-v)))
#define UN_DX (g * FN(silu_d)(v))
#define UN_FWD_PAR (TG_PAR_MIN / 8)
#define UN_BWD_PAR (TG_PAR_MIN / 8)
#include "unary_op_kernel.h"

/* gelu_tanh: y = x/2 (1 + tanh(u)), dx = dy gelu_tanh'(x) (v = x) */
#define UN_NAME gelu_tanh
#define UN_Y FN(gelu_tanh)(v)
#define UN_DX (g * FN(gelu_tanh_d)(v))
#define UN_FWD_PAR (TG_PAR_MIN / 16)
#define UN_BWD_PAR (TG_PAR_MIN / 16)
#include "unary_op_kernel.h"

/* erf: y = erf(x), dx = dy 2/sqrt(pi) e^{-x^2} (v = x) */
#define UN_NAME erf
#define UN_Y ERF(v)
#define UN_DX (g * ((T)TWO_OVER_SQRT_PI * EXP(-(v * v))))
#define UN_FWD_PAR (TG_PAR_MIN / 8)
#define UN_BWD_PAR (TG_PAR_MIN / 8)
#include "unary_op_kernel.h"

/* The registry's kernels (ops/ops_dtype.def): tg__neg_forward_f32 ... tg__gelu_tanh_backward_f64.
 * READ is what backward reads (declared in ops/ops.def): the source (x), the output (y) or
 * nothing (NULL). */
#define UN_SRC(c) ((c)->in[0])
#define UN_OUT(c) ((c)->out)
#define UN_NONE(c) ((void)(c), (const void *)NULL)
#define UN_ENTRY(op, READ)                                                                     \
    tg_status FN(tg__##op##_forward)(const tg__call *c)                                        \
    {                                                                                          \
        FN(op##_fwd)(c->nt, c->numel, c->in[0], c->out);                                       \
        return TG_OK;                                                                          \
    }                                                                                          \
    tg_status FN(tg__##op##_backward)(const tg__call *c)                                       \
    {                                                                                          \
        if (!c->dx[0])                                                                         \
            return TG_OK;                                                                      \
        FN(op##_bwd)(c->nt, c->numel, READ(c), c->dy, c->dx[0]);                               \
        return TG_OK;                                                                          \
    }
UN_ENTRY(neg, UN_NONE)
UN_ENTRY(exp, UN_OUT)
UN_ENTRY(log, UN_SRC)
UN_ENTRY(sqrt, UN_OUT)
UN_ENTRY(tanh, UN_OUT)
UN_ENTRY(sigmoid, UN_OUT)
UN_ENTRY(silu, UN_SRC)
UN_ENTRY(gelu_tanh, UN_SRC)
UN_ENTRY(erf, UN_SRC)
#undef UN_ENTRY
#undef UN_SRC
#undef UN_OUT
#undef UN_NONE

#undef FN
