/*
 * unary.c - elementwise math and activations: neg, exp, log, sqrt, tanh, sigmoid, silu,
 * gelu_tanh, erf.
 *
 * neg:       y = -x                               dx = -dy
 * exp:       y = e^x                              dx = dy y                 (reads y)
 * log:       y = ln x                             dx = dy / x               (reads x)
 * sqrt:      y = sqrt(x)                          dx = dy / (2 y)           (reads y)
 * tanh:      y = tanh(x)                          dx = dy (1 - y^2)         (reads y)
 * sigmoid:   y = 1 / (1 + e^-x)                   dx = dy (1 - y) y         (reads y)
 * silu:      y = x / (1 + e^-x) = x s(x)          dx = dy s (1 + x (1 - s)) (reads x)
 *            (Elfwing et al. 2018, "Sigmoid-weighted linear units"; PyTorch nn.SiLU)
 * gelu_tanh: y = x/2 (1 + tanh(u)), u = sqrt(2/pi) (x + 0.044715 x^3)
 *            dx = dy (1/2 (1 + t) + x/2 (1 - t^2) sqrt(2/pi) (1 + 3 * 0.044715 x^2)),
 *            t = tanh(u)                                                    (reads x)
 *            (Hendrycks & Gimpel 2016, sec. 2; PyTorch F.gelu(approximate='tanh'); GPT-2)
 * erf:       y = erf(x)                           dx = dy 2/sqrt(pi) e^{-x^2} (reads x)
 *            (PyTorch torch.erf; the C library's erf / erff)
 *
 * The formulas and their evaluation order are PyTorch's CPU kernels' (aten UnaryOps,
 * Activation.cpp), so values agree to an ulp or two. f32 is computed in float, f64 in double.
 * Out-of-domain values follow IEEE-754 like PyTorch, never an error: log(+-0) = -inf,
 * log(x < 0) = NaN, sqrt(x < 0) = NaN, sqrt'(0) = inf, and inf/NaN propagate.
 *
 * Every forward reads x[i] into a local before writing y[i], and y[i] depends on x[i] only,
 * so y may be x's buffer (TG_OPF_INPLACE in ops/ops.def). Each loop iteration writes its own
 * element: race-free and thread-count independent.
 */
#include "registry.h"

static tg_tensor *unary(tg_ctx *ctx, int op, const char *fn, tg_tensor *x)
{
    if (!tg__check_srcs(ctx, fn, 1, &x))
        return NULL;
    if (x->dtype != TG_F32 && x->dtype != TG_F64)
        return tg__err(ctx, TG_ERR_DTYPE, fn, "x is %s; expected f32 or f64",
                       tg_dtype_str(x->dtype));
    return tg__op_new(ctx, op, x->dtype, x->rank, x->shape, 1, &x);
}

tg_tensor *tg_neg(tg_ctx *ctx, tg_tensor *x) { return unary(ctx, TG_OP_NEG, "tg_neg", x); }
tg_tensor *tg_exp(tg_ctx *ctx, tg_tensor *x) { return unary(ctx, TG_OP_EXP, "tg_exp", x); }
tg_tensor *tg_log(tg_ctx *ctx, tg_tensor *x) { return unary(ctx, TG_OP_LOG, "tg_log", x); }
tg_tensor *tg_sqrt(tg_ctx *ctx, tg_tensor *x) { return unary(ctx, TG_OP_SQRT, "tg_sqrt", x); }
tg_tensor *tg_tanh(tg_ctx *ctx, tg_tensor *x) { return unary(ctx, TG_OP_TANH, "tg_tanh", x); }
tg_tensor *tg_sigmoid(tg_ctx *ctx, tg_tensor *x)
{
    return unary(ctx, TG_OP_SIGMOID, "tg_sigmoid", x);
}
tg_tensor *tg_silu(tg_ctx *ctx, tg_tensor *x) { return unary(ctx, TG_OP_SILU, "tg_silu", x); }
tg_tensor *tg_gelu_tanh(tg_ctx *ctx, tg_tensor *x)
{
    return unary(ctx, TG_OP_GELU_TANH, "tg_gelu_tanh", x);
}

tg_tensor *tg_erf(tg_ctx *ctx, tg_tensor *x) { return unary(ctx, TG_OP_ERF, "tg_erf", x); }

/* sqrt(2/pi) and the cubic coefficient of the tanh approximation (PyTorch's kBeta, kKappa). */
#define GELU_BETA 0.79788456080286535588
#define GELU_KAPPA 0.044715
#define TWO_OVER_SQRT_PI 1.12837916709551257390 /* erf's derivative at 0 */

/* The kernels, written once in unary_kernel.h, for f32 and for f64: tg__neg_forward_f32 ...
 * tg__gelu_tanh_backward_f64, registered per dtype in ops/ops_dtype.def. */
#define T float
#define SUF f32
#define EXP expf
#define LOG logf
#define SQRT sqrtf
#define TANH tanhf
#define ERF erff
#include "unary_kernel.h"
#undef T
#undef SUF
#undef EXP
#undef LOG
#undef SQRT
#undef TANH
#undef ERF
#define T double
#define SUF f64
#define EXP exp
#define LOG log
#define SQRT sqrt
#define TANH tanh
#define ERF erf
#include "unary_kernel.h"
#undef T
#undef SUF
#undef EXP
#undef LOG
#undef SQRT
#undef TANH
#undef ERF
