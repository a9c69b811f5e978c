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

/* Each kernel works on its own range: rows [lo, hi) of y, dx (one row-kernel call per row; a row
 * of D elements stays in L1 across its passes) or columns [lo, hi) of dgamma, dbeta (rows walked
 * in order over contiguous row segments). Race-free: a range owns its outputs. */
#define DEFINE_LN(T, SUF)                                                                      \
    TG_SIMD_CLONES static void ln_fwd_rows_##SUF(const T *X, const T *G, const T *B, T *Y,     \
                                                 T *mean, T *rstd, T eps, int64_t D,           \
                                                 int64_t lo, int64_t hi)                       \
    {                                                                                          \
        for (int64_t r = lo; r < hi; r++) {                                                    \
            const T *xr = X + r * D;                                                           \
            T *yr = Y + r * D;                                                                 \
            /* statistics in double, also for f32 (exact for constant rows) */                 \
            double a[LANES] = {0};                                                             \
            int64_t j = 0;                                                                     \
            for (; j + LANES <= D; j += LANES)                                                 \
                for (int k = 0; k < LANES; k++)                                                \
                    a[k] += (double)xr[j + k];                                                 \
            for (int k = 0; j + k < D; k++)                                                    \
                a[k] += (double)xr[j + k];                                                     \
            LANE_TREE(a);                                                                      \
            double md = a[0] / (double)D, v[LANES] = {0};                                      \
            for (j = 0; j + LANES <= D; j += LANES)                                            \
                for (int k = 0; k < LANES; k++) {                                              \
                    double c = (double)xr[j + k] - md;                                         \
                    v[k] += c * c;                                                             \
                }                                                                              \
            for (int k = 0; j + k < D; k++) {                                                  \
                double c = (double)xr[j + k] - md;                                             \
                v[k] += c * c;                                                                 \
            }                                                                                  \
            LANE_TREE(v);                                                                      \
            double var = v[0] / (double)D + (double)eps;                                       \
            T m = (T)md, rs = var > 0 ? (T)(1.0 / sqrt(var)) : (T)0; /* eps 0, constant row */ \
            mean[r] = m;                                                                       \
            rstd[r] = rs;                                                                      \
            if (G && B) {                                                                      \
                for (j = 0; j < D; j++)                                                        \
                    yr[j] = ((xr[j] - m) * rs) * G[j] + B[j];                                  \
            } else {                                                                           \
                for (j = 0; j < D; j++) {                                                      \
                    T h = (xr[j] - m) * rs;                                                    \
                    yr[j] = (G ? h * G[j] : h) + (B ? B[j] : 0);                               \
                }                                                                              \
            }                                                                                  \
        }                                                                                      \
    }                                                                                          \
    TG_SIMD_CLONES static void ln_bwd_rows_##SUF(const T *X, const T *G, const T *DY,          \
                                                 const T *mean, const T *rstd, T *DX,          \
                                                 int64_t D, int64_t lo, int64_t hi)            \
    {                                                                                          \
        for (int64_t r = lo; r < hi; r++) {                                                    \
            const T *xr = X + r * D, *dy = DY + r * D;                                         \
            T *dx = DX + r * D;                                                                \
            T m = mean[r], rs = rstd[r];                                                       \
            double a[LANES] = {0}, b[LANES] = {0};                                             \
            int64_t j = 0;                                                                     \
            for (; j + LANES <= D; j += LANES)                                                 \
                for (int k = 0; k < LANES; k++) {                                              \
                    T g = G ? dy[j + k] * G[j + k] : dy[j + k];                                \
                    a[k] += (double)g;                                                         \
                    b[k] += (double)(g * ((xr[j + k] - m) * rs));                              \
                }                                                                              \
            for (int k = 0; j + k < D; k++) {                                                  \
                T g = G ? dy[j + k] * G[j + k] : dy[j + k];                                    \
                a[k] += (double)g;                                                             \
                b[k] += (double)(g * ((xr[j + k] - m) * rs));                                  \
            }                                                                                  \
            LANE_TREE(a);                                                                      \
            LANE_TREE(b);                                                                      \
            T sg = (T)(a[0] / (double)D), sgh = (T)(b[0] / (double)D);                         \
            for (j = 0; j < D; j++) {                                                          \
                T g = G ? dy[j] * G[j] : dy[j];                                                \
                T h = (xr[j] - m) * rs;                                                        \
                dx[j] += rs * (g - sg - h * sgh);                                              \
            }                                                                                  \
        }                                                                                      \
    }                                                                                          \
    TG_SIMD_CLONES static void param_cols_##SUF(const T *X, const T *DY, const T *mean,        \
                                                const T *rstd, T *DG, T *DB, int64_t R,        \
                                                int64_t D, int64_t lo, int64_t hi)             \
    {                                                                                          \
        T ag[CB], ab[CB];                                                                      \
        for (int64_t c0 = lo; c0 < hi; c0 += CB) {                                             \
            int64_t w = hi - c0 < CB ? hi - c0 : CB;                                           \
            for (int64_t c = 0; c < w; c++)                                                    \
                ag[c] = ab[c] = 0;                                                             \
            for (int64_t r = 0; r < R; r++) {                                                  \
                const T *dy = DY + r * D + c0, *xr = X + r * D + c0;                           \
                T m = mean[r], rs = rstd[r];                                                   \
                for (int64_t c = 0; c < w; c++) {                                              \
                    ag[c] += dy[c] * (xr[c] - m) * rs;                                         \
                    ab[c] += dy[c];                                                            \
                }                                                                              \
            }                                                                                  \
            for (int64_t c = 0; c < w; c++) {                                                  \
                if (DG)                                                                        \
                    DG[c0 + c] += ag[c];                                                       \
                if (DB)                                                                        \
                    DB[c0 + c] += ab[c];                                                       \
            }                                                                                  \
        }                                                                                      \
    }                                                                                          \
    static void fwd_##SUF(const tg__call *c)                                                        \
    {                                                                                          \
        const tg_tensor *y = c->y;                                                             \
        const tg_tensor *x = y->src[0], *gm = y->src[1], *bt = y->src[2];                      \
        int64_t D = x->shape[x->rank - 1], R = x->numel / D;                                   \
        const T *G = gm ? c->in[1] : NULL, *B = bt ? c->in[2] : NULL;                          \
        T *mean = c->saved, *rstd = mean + R;                                                  \
        T eps = (T)y->p.layer_norm.eps;                                                        \
        TG_PAR_RANGE(c->nt, x->numel * 2 * (int64_t)sizeof(T) > TG_PAR_BYTES,   \
                     R, 1,                                                                    \
                     ln_fwd_rows_##SUF(c->in[0], G, B, c->out, mean, rstd, eps, D, lo, hi));  \
    }                                                                                          \
    static void bwd_##SUF(const tg__call *c)                                                        \
    {                                                                                          \
        const tg_tensor *y = c->y;                                                             \
        tg_tensor *x = y->src[0], *gm = y->src[1], *bt = y->src[2];                            \
        int64_t D = x->shape[x->rank - 1], R = x->numel / D;                                   \
        const T *G = gm ? c->in[1] : NULL;                                                     \
        const T *mean = c->saved, *rstd = mean + R;                                            \
        int nt = c->nt;                                                          \
        if (c->dx[0])                                                                          \
            TG_PAR_RANGE(nt, x->numel * 3 * (int64_t)sizeof(T) > TG_PAR_BYTES, R, 1,          \
                         ln_bwd_rows_##SUF(c->in[0], G, c->dy, mean, rstd, c->dx[0], D, lo,   \
                                           hi));                                              \
        T *DG = gm ? c->dx[1] : NULL, *DB = bt ? c->dx[2] : NULL;                              \
        if (DG || DB) /* columns walked by blocks, rows in order: fixed order per column */   \
            TG_PAR_RANGE(nt, x->numel * 2 * (int64_t)sizeof(T) > TG_PAR_BYTES, D, 16,         \
                         param_cols_##SUF(c->in[0], c->dy, mean, rstd, DG, DB, R, D, lo, hi)); \
    }
DEFINE_LN(float, f32)
DEFINE_LN(double, f64)

tg_status tg__layer_norm_forward(const tg__call *c)
{
    const tg_tensor *y = c->y;
    if (y->dtype == TG_F32)
        fwd_f32(c);
    else
        fwd_f64(c);
    return TG_OK;
}

tg_status tg__layer_norm_backward(const tg__call *c)
{
    const tg_tensor *y = c->y;
    if (y->dtype == TG_F32)
        bwd_f32(c);
    else
        bwd_f64(c);
    return TG_OK;
}
