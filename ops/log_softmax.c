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

/* x, y (rows, L). One row per iteration; the row's max and sums run left to right: race-free
 * and thread-count independent. */
#define DEFINE_LOG_SOFTMAX(T, SUF, EXP, LOG)                                                   \
    static void fwd_##SUF(tg_tensor *y)                                                        \
    {                                                                                          \
        const T *X = y->src[0]->data;                                                          \
        T *Y = y->data;                                                                        \
        int64_t L = y->shape[y->rank - 1], rows = y->numel / L;                                \
        int nt = tg__threads(y->ctx);                                                          \
        TG_OMP_FOR(nt, y->numel > TG_PAR_MIN / 8)                                              \
        for (int64_t r = 0; r < rows; r++) {                                                   \
            const T *x = X + r * L;                                                            \
            T *o = Y + r * L;                                                                  \
            T m = (T)-INFINITY;                                                                \
            for (int64_t j = 0; j < L; j++)                                                    \
                if (x[j] > m || x[j] != x[j])                                                  \
                    m = x[j];                                                                  \
            if (m == (T)-INFINITY) { /* every entry -inf: log of tg_softmax's zeros */         \
                for (int64_t j = 0; j < L; j++)                                                \
                    o[j] = (T)-INFINITY;                                                       \
                continue;                                                                      \
            }                                                                                  \
            T sum = 0;                                                                         \
            for (int64_t j = 0; j < L; j++)                                                    \
                sum += EXP(x[j] - m);                                                          \
            T lse = LOG(sum);                                                                  \
            for (int64_t j = 0; j < L; j++)                                                    \
                o[j] = (x[j] - m) - lse;                                                       \
        }                                                                                      \
    }                                                                                          \
    static void bwd_##SUF(tg_tensor *y)                                                        \
    {                                                                                          \
        const T *Y = y->data, *G = y->grad;                                                    \
        T *DX = y->src[0]->grad;                                                               \
        int64_t L = y->shape[y->rank - 1], rows = y->numel / L;                                \
        int nt = tg__threads(y->ctx);                                                          \
        TG_OMP_FOR(nt, y->numel > TG_PAR_MIN / 8)                                              \
        for (int64_t r = 0; r < rows; r++) {                                                   \
            const T *o = Y + r * L, *g = G + r * L;                                            \
            T *dx = DX + r * L;                                                                \
            bool masked = true; /* every y -inf: the row was all -inf, no gradient */          \
            for (int64_t j = 0; j < L && masked; j++)                                          \
                masked = o[j] == (T)-INFINITY;                                                 \
            if (masked)                                                                        \
                continue;                                                                      \
            T sum = 0;                                                                         \
            for (int64_t j = 0; j < L; j++)                                                    \
                sum += g[j];                                                                   \
            for (int64_t j = 0; j < L; j++)                                                    \
                dx[j] += g[j] - EXP(o[j]) * sum;                                               \
        }                                                                                      \
    }
DEFINE_LOG_SOFTMAX(float, f32, expf, logf)
DEFINE_LOG_SOFTMAX(double, f64, exp, log)

void tg__log_softmax_forward(tg_tensor *y)
{
    if (y->dtype == TG_F32)
        fwd_f32(y);
    else
        fwd_f64(y);
}

void tg__log_softmax_backward(tg_tensor *y)
{
    if (!y->src[0]->grad)
        return;
    if (y->dtype == TG_F32)
        bwd_f32(y);
    else
        bwd_f64(y);
}
