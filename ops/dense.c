/*
 * dense.c - affine map over the last axis, PyTorch nn.Linear: y = x W^T + b.
 *
 * Shapes: x (..., I), W (O, I) as PyTorch stores it, b (O) -> y (..., O); R = rows of x.
 * Backward: dx (R, I) += dy (R, O) W (O, I)
 *           dW (O, I) += dy^T (O, R) x (R, I)     (rows summed in order r = 0..R-1)
 *           db (O)    += sum_r dy[r, :]
 */
#include "registry.h"
#include "vec.h"

#include <stdio.h>

tg_tensor *tg_dense(tg_ctx *ctx, tg_tensor *x, tg_tensor *w, tg_tensor *b)
{
    static const char *fn = "tg_dense";
    tg_tensor *src[3] = {x, w, b};
    if (!tg__check_srcs(ctx, fn, b ? 3 : 2, src))
        return NULL;
    char sx[128], sw[128], sb[128];
    if (w->rank != 2)
        return tg__err(ctx, TG_ERR_SHAPE, fn, "w must be (out_features, in_features), got %s",
                       tg__shape_str(w, sw, sizeof sw));
    if (x->rank < 1 || x->shape[x->rank - 1] != w->shape[1])
        return tg__err(ctx, TG_ERR_SHAPE, fn,
                       "x %s last dim must equal in_features of w %s",
                       tg__shape_str(x, sx, sizeof sx), tg__shape_str(w, sw, sizeof sw));
    if (b && (b->rank != 1 || b->shape[0] != w->shape[0]))
        return tg__err(ctx, TG_ERR_SHAPE, fn, "b must be (%lld) for w %s, got %s",
                       (long long)w->shape[0], tg__shape_str(w, sw, sizeof sw),
                       tg__shape_str(b, sb, sizeof sb));
    int64_t shape[TG_MAX_RANK];
    memcpy(shape, x->shape, sizeof shape);
    shape[x->rank - 1] = w->shape[0];
    return tg__op_new(ctx, TG_OP_DENSE, x->dtype, x->rank, shape, b ? 3 : 2, src);
}

#define DEFINE_DENSE(T, SUF)                                                                   \
    static void fwd_##SUF(tg_tensor *y)                                                        \
    {                                                                                          \
        const tg_tensor *x = y->src[0], *w = y->src[1], *b = y->n_src > 2 ? y->src[2] : NULL;  \
        int64_t I = w->shape[1], O = w->shape[0], R = x->numel / I;                            \
        int nt = tg__threads(y->ctx);                                                          \
        T *Y = y->data;                                                                        \
        tg__gemm_##SUF(nt, false, true, R, O, I, x->data, I, w->data, I, Y, O, false, y->ws); \
        if (b) {                                                                               \
            const T *B = b->data;                                                              \
            /* Race-free: row r owns Y[r, :]. */                                               \
            TG_OMP_FOR(nt, R * O > TG_PAR_MIN)                                                 \
            for (int64_t r = 0; r < R; r++)                                                    \
                for (int64_t o = 0; o < O; o++)                                                \
                    Y[r * O + o] += B[o];                                                      \
        }                                                                                      \
    }                                                                                          \
    static void bwd_##SUF(tg_tensor *y)                                                        \
    {                                                                                          \
        tg_tensor *x = y->src[0], *w = y->src[1], *b = y->n_src > 2 ? y->src[2] : NULL;        \
        int64_t I = w->shape[1], O = w->shape[0], R = x->numel / I;                            \
        int nt = tg__threads(y->ctx);                                                          \
        const T *G = y->grad;                                                                  \
        if (x->grad)                                                                           \
            tg__gemm_##SUF(nt, false, false, R, I, O, G, O, w->data, I, x->grad, I, true,      \
                           y->ws);                                                      \
        if (w->grad)                                                                           \
            tg__gemm_##SUF(nt, true, false, O, I, R, G, O, x->data, I, w->grad, I, true,      \
                           y->ws);                                                      \
        if (b && b->grad) /* db (O) += sum_r dy[r, :]: row-blocked, fixed order per column */ \
            tg__sum_rows_##SUF(nt, R, O, G, O, b->grad);                                       \
    }
DEFINE_DENSE(float, f32)
DEFINE_DENSE(double, f64)

size_t tg__dense_ws(const tg_tensor *y, int nt, bool backward)
{
    (void)backward;
    return tg__gemm_ws_bytes(y->dtype, nt);
}

void tg__dense_forward(tg_tensor *y)
{
    if (y->dtype == TG_F32)
        fwd_f32(y);
    else
        fwd_f64(y);
}

void tg__dense_backward(tg_tensor *y)
{
    if (y->dtype == TG_F32)
        bwd_f32(y);
    else
        bwd_f64(y);
}
