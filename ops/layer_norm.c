/*
 * layer_norm.c - LayerNorm over the last axis (Ba et al. 2016; PyTorch nn.LayerNorm).
 *
 * Forward, per row x (D):  mean = sum(x) / D
 *                          var  = sum((x - mean)^2) / D      (biased, two passes)
 *                          rstd = 1 / sqrt(var + eps),  xhat = (x - mean) rstd
 *                          y    = xhat * gamma + beta
 * Backward:  g = dy * gamma
 *            dx = rstd (g - mean(g) - xhat mean(g xhat))
 *            dgamma += sum_rows dy xhat,  dbeta += sum_rows dy
 * Statistics: two passes over the row (mean, then the centred sum of squares) while the row is
 * in L1, each a sum in 16 fixed lanes; dgamma and dbeta are column sums over row segments.
 * A constant row has var = 0, xhat = 0, y = beta, dx = 0 (with eps = 0 too: rstd is taken as 0
 * when var + eps = 0, where PyTorch gives NaN). Statistics are accumulated in double for both
 * dtypes, so a constant f32 row is exactly constant (its mean is exact).
 * saved: mean (R), rstd (R) in the tensor's dtype.
 */
#include "registry.h"
#include "vec.h"

#include <stdio.h>

tg_tensor *tg_layer_norm(tg_ctx *ctx, tg_tensor *x, tg_tensor *gamma, tg_tensor *beta,
                         double eps)
{
    static const char *fn = "tg_layer_norm";
    tg_tensor *src[3] = {x, gamma, beta};
    /* gamma and beta are each optional: compact the source list. */
    tg_tensor *check[3];
    int n = 0;
    check[n++] = x;
    if (gamma)
        check[n++] = gamma;
    if (beta)
        check[n++] = beta;
    if (!tg__check_srcs(ctx, fn, n, check))
        return NULL;
    char sx[128], sp[128];
    if (x->rank < 1)
        return tg__err(ctx, TG_ERR_SHAPE, fn, "x is a scalar; layer_norm needs rank >= 1");
    if (!isfinite(eps) || eps < 0)
        return tg__err(ctx, TG_ERR_ARG, fn, "eps = %g must be finite and >= 0", eps);
    int64_t D = x->shape[x->rank - 1];
    for (int i = 1; i < 3; i++) {
        tg_tensor *p = src[i];
        if (p && (p->rank != 1 || p->shape[0] != D))
            return tg__err(ctx, TG_ERR_SHAPE, fn, "%s must be (%lld) for x %s, got %s",
                           i == 1 ? "gamma" : "beta", (long long)D,
                           tg__shape_str(x, sx, sizeof sx), tg__shape_str(p, sp, sizeof sp));
    }
    /* Sources keep fixed slots: 0 x, 1 gamma (may be NULL), 2 beta (may be NULL). */
    tg_tensor *y = tg__op_new(ctx, TG_OP_LAYER_NORM, x->dtype, x->rank, x->shape, 3, src);
    if (!y)
        return NULL;
    y->p.layer_norm.eps = eps;
    int64_t R = x->numel / D;
    if (!tg__op_save_n(y, R, 2 * tg_dtype_size(x->dtype), 0))
        return NULL;
    return y;
}

/* Row statistics are sums in double over 16 fixed lanes (lane j mod 16, lanes added in a fixed
 * tree): vectorizable, and the same bits for any thread count and SIMD clone. */
#define LANES 16
#define LANE_TREE(acc)                                                                         \
    do {                                                                                       \
        for (int w_ = LANES / 2; w_ >= 1; w_ /= 2)                                             \
            for (int k_ = 0; k_ < w_; k_++)                                                    \
                (acc)[k_] += (acc)[k_ + w_];                                                   \
    } while (0)
/* Column block of the gamma/beta gradient sums (accumulators stay in L1). */
#define CB 256

/* The kernels, written once in layer_norm_kernel.h, for f32 and for f64: tg__layer_norm_forward_f32
 * ... _backward_f64, registered per dtype in ops/ops_dtype.def. */
#define T float
#define SUF f32
#include "layer_norm_kernel.h"
#undef T
#undef SUF
#define T double
#define SUF f64
#include "layer_norm_kernel.h"
#undef T
#undef SUF
