/*
 * log_softmax.c - log-softmax over the last axis (PyTorch F.log_softmax(x, dim=-1)).
 *
 * y_i = (x_i - m) - log(sum_j exp(x_j - m)),  m = max_j x_j   (max-subtracted: finite for any
 *                                                              finite logits)
 * dx_i = dy_i - exp(y_i) sum_j dy_j                            (backward reads y only)
 *
 * A row whose entries are all -inf gives all -inf and a zero gradient (PyTorch: NaN), so a
 * fully masked row behaves as in tg_softmax (zeros there, log 0 = -inf here). A -inf entry in
 * another row gives -inf and gradient dy_i (PyTorch's); NaN or +inf make the row NaN (PyTorch's).
 */
#include "registry.h"
#include "vec.h"

tg_tensor *tg_log_softmax(tg_ctx *ctx, tg_tensor *x)
{
    static const char *fn = "tg_log_softmax";
    if (!tg__check_srcs(ctx, fn, 1, &x))
        return NULL;
    if (x->dtype != TG_F32 && x->dtype != TG_F64)
        return tg__err(ctx, TG_ERR_DTYPE, fn, "x is %s; expected f32 or f64",
                       tg_dtype_str(x->dtype));
    if (x->rank < 1)
        return tg__err(ctx, TG_ERR_SHAPE, fn, "x is a scalar; log_softmax needs rank >= 1");
    return tg__op_new(ctx, TG_OP_LOG_SOFTMAX, x->dtype, x->rank, x->shape, 1, &x);
}

/* x, y (rows, L); rows [lo, hi) per call. Each row is computed from that row alone with the
 * row kernels softmax shares (src/core/vec.h: NaN-propagating max, exp-sum and sums in 16
 * fixed lanes, the vectorizable exp): race-free, independent of the thread count and clone. */
#define DEFINE_LOG_SOFTMAX(T, SUF, EXP, LOG)                                                   \
    TG_SIMD_CLONES static void lsm_fwd_rows_##SUF(const T *X, T *Y, int64_t L, int64_t lo,    \
                                                  int64_t hi)                                  \
    {                                                                                          \
        for (int64_t r = lo; r < hi; r++) {                                                    \
            const T *x = X + r * L;                                                            \
            T *o = Y + r * L;                                                                  \
            T m = tg__row_max_##SUF(x, L);                                                     \
            if (m == (T)-INFINITY) { /* every entry -inf: log of tg_softmax's zeros */         \
                for (int64_t j = 0; j < L; j++)                                                \
                    o[j] = (T)-INFINITY;                                                       \
                continue;                                                                      \
            }                                                                                  \
            T lse = LOG(tg__row_expsum_##SUF(x, L, m, NULL));                                  \
            for (int64_t j = 0; j < L; j++)                                                    \
                o[j] = (x[j] - m) - lse;                                                       \
        }                                                                                      \
    }                                                                                          \
    TG_SIMD_CLONES static void lsm_bwd_rows_##SUF(const T *Y, const T *G, T *DX, int64_t L,   \
                                                  int64_t lo, int64_t hi)                      \
    {                                                                                          \
        for (int64_t r = lo; r < hi; r++) {                                                    \
            const T *o = Y + r * L, *g = G + r * L;                                            \
            T *dx = DX + r * L;                                                                \
            /* every y -inf (the max is -inf): the row was all -inf, no gradient */            \
            if (tg__row_max_##SUF(o, L) == (T)-INFINITY)                                       \
                continue;                                                                      \
            T sum = tg__row_dot_##SUF(g, NULL, L);                                             \
            for (int64_t j = 0; j < L; j++)                                                    \
                dx[j] += g[j] - EXP(o[j]) * sum;                                               \
        }                                                                                      \
    }                                                                                          \
    static void fwd_##SUF(const tg__call *c)                                                        \
    {                                                                                          \
        const tg_tensor *y = c->y;                                                             \
        int64_t L = y->shape[y->rank - 1], rows = y->numel / L;                                \
        /* Race-free: a thread owns the rows [lo, hi) of y. */                                 \
        TG_PAR_RANGE(c->nt, y->numel * 2 * (int64_t)sizeof(T) > TG_PAR_BYTES,  \
                     rows, 1, lsm_fwd_rows_##SUF(c->in[0], c->out, L, lo, hi));        \
    }                                                                                          \
    static void bwd_##SUF(const tg__call *c)                                                        \
    {                                                                                          \
        const tg_tensor *y = c->y;                                                             \
        int64_t L = y->shape[y->rank - 1], rows = y->numel / L;                                \
        /* Race-free: a thread owns the rows [lo, hi) of dx. */                                \
        TG_PAR_RANGE(c->nt, y->numel * 3 * (int64_t)sizeof(T) > TG_PAR_BYTES,  \
                     rows, 1,                                                                \
                     lsm_bwd_rows_##SUF(c->out, c->dy, c->dx[0], L, lo, hi));      \
    }
DEFINE_LOG_SOFTMAX(float, f32, tg__expf, logf)
DEFINE_LOG_SOFTMAX(double, f64, tg__exp, log)

tg_status tg__log_softmax_forward(const tg__call *c)
{
    const tg_tensor *y = c->y;
    if (y->dtype == TG_F32)
        fwd_f32(c);
    else
        fwd_f64(c);
    return TG_OK;
}

tg_status tg__log_softmax_backward(const tg__call *c)
{
    const tg_tensor *y = c->y;
    if (!c->dx[0])
        return TG_OK;
    if (y->dtype == TG_F32)
        bwd_f32(c);
    else
        bwd_f64(c);
    return TG_OK;
}
