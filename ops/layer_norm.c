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
 * A constant row has var = 0, xhat = 0, y = beta, dx = 0 (with eps = 0 too: rstd is taken as 0
 * when var + eps = 0, where PyTorch gives NaN). Statistics are accumulated in double for both
 * dtypes, so a constant f32 row is exactly constant (its mean is exact).
 * saved: mean (R), rstd (R) in the tensor's dtype.
 */
#include "registry.h"

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

#define DEFINE_LN(T, SUF)                                                                \
    static void fwd_##SUF(tg_tensor *y)                                                        \
    {                                                                                          \
        const tg_tensor *x = y->src[0], *gm = y->src[1], *bt = y->src[2];                      \
        int64_t D = x->shape[x->rank - 1], R = x->numel / D;                                   \
        const T *X = x->data, *G = gm ? gm->data : NULL, *B = bt ? bt->data : NULL;            \
        T *Y = y->data, *mean = y->saved, *rstd = mean + R;                                    \
        T eps = (T)y->p.layer_norm.eps;                                                        \
        int nt = tg__threads(y->ctx);                                                          \
        /* Race-free: row r owns Y[r, :], mean[r], rstd[r]. */                                 \
        TG_OMP_FOR(nt, x->numel > TG_PAR_MIN / 4)                                              \
        for (int64_t r = 0; r < R; r++) {                                                      \
            const T *xr = X + r * D;                                                           \
            T *yr = Y + r * D;                                                                 \
            double s = 0; /* statistics in double, also for f32 (exact for constant rows) */ \
            for (int64_t j = 0; j < D; j++)                                                    \
                s += (double)xr[j];                                                            \
            double md = s / (double)D, v = 0;                                                  \
            for (int64_t j = 0; j < D; j++) {                                                  \
                double c = (double)xr[j] - md;                                                 \
                v += c * c;                                                                    \
            }                                                                                  \
            double var = v / (double)D + (double)eps;                                          \
            T m = (T)md, rs = var > 0 ? (T)(1.0 / sqrt(var)) : (T)0; /* eps 0, constant row */ \
            mean[r] = m;                                                                       \
            rstd[r] = rs;                                                                      \
            for (int64_t j = 0; j < D; j++) {                                                  \
                T h = (xr[j] - m) * rs;                                                        \
                yr[j] = (G ? h * G[j] : h) + (B ? B[j] : 0);                                   \
            }                                                                                  \
        }                                                                                      \
    }                                                                                          \
    static void bwd_##SUF(tg_tensor *y)                                                        \
    {                                                                                          \
        tg_tensor *x = y->src[0], *gm = y->src[1], *bt = y->src[2];                            \
        int64_t D = x->shape[x->rank - 1], R = x->numel / D;                                   \
        const T *X = x->data, *G = gm ? gm->data : NULL, *DY = y->grad;                        \
        const T *mean = y->saved, *rstd = mean + R;                                            \
        int nt = tg__threads(y->ctx);                                                          \
        if (x->grad) {                                                                         \
            T *DX = x->grad;                                                                   \
            /* Race-free: row r owns DX[r, :]. */                                              \
            TG_OMP_FOR(nt, x->numel > TG_PAR_MIN / 4)                                          \
            for (int64_t r = 0; r < R; r++) {                                                  \
                const T *xr = X + r * D, *dy = DY + r * D;                                     \
                T *dx = DX + r * D;                                                            \
                T m = mean[r], rs = rstd[r];                                                   \
                double sgd = 0, sghd = 0;                                                      \
                for (int64_t j = 0; j < D; j++) {                                              \
                    T g = G ? dy[j] * G[j] : dy[j];                                            \
                    sgd += (double)g;                                                          \
                    sghd += (double)(g * ((xr[j] - m) * rs));                                  \
                }                                                                              \
                T sg = (T)(sgd / (double)D), sgh = (T)(sghd / (double)D);                      \
                for (int64_t j = 0; j < D; j++) {                                              \
                    T g = G ? dy[j] * G[j] : dy[j];                                            \
                    T h = (xr[j] - m) * rs;                                                    \
                    dx[j] += rs * (g - sg - h * sgh);                                          \
                }                                                                              \
            }                                                                                  \
        }                                                                                      \
        T *DG = gm ? gm->grad : NULL, *DB = bt ? bt->grad : NULL;                              \
        if (DG || DB) {                                                                        \
            /* Race-free: column j owns DG[j], DB[j]; rows summed in order. */                 \
            TG_OMP_FOR(nt, x->numel > TG_PAR_MIN)                                              \
            for (int64_t j = 0; j < D; j++) {                                                  \
                T ag = 0, ab = 0;                                                              \
                for (int64_t r = 0; r < R; r++) {                                              \
                    T dy = DY[r * D + j];                                                      \
                    ag += dy * (X[r * D + j] - mean[r]) * rstd[r];                             \
                    ab += dy;                                                                  \
                }                                                                              \
                if (DG)                                                                        \
                    DG[j] += ag;                                                               \
                if (DB)                                                                        \
                    DB[j] += ab;                                                               \
            }                                                                                  \
        }                                                                                      \
    }
DEFINE_LN(float, f32)
DEFINE_LN(double, f64)

void tg__layer_norm_forward(tg_tensor *y)
{
    if (y->dtype == TG_F32)
        fwd_f32(y);
    else
        fwd_f64(y);
}

void tg__layer_norm_backward(tg_tensor *y)
{
    if (y->dtype == TG_F32)
        bwd_f32(y);
    else
        bwd_f64(y);
}
