/*
 * dense.c - affine map over the last axis, PyTorch nn.Linear: y = x W^T + b.
 *
 * Shapes: x (..., I), W (O, I) as PyTorch stores it, b (O) -> y (..., O); R = rows of x.
 * Backward: dx (R, I) += dy (R, O) W (O, I)
 *           dW (O, I) += dy^T (O, R) x (R, I)     (rows summed in order r = 0..R-1)
 *           db (O)    += sum_r dy[r, :]
 * dense_act: y = act(z), z = x W^T + b, act ReLU or GELU applied in the GEMM's epilogue (the
 * bias starts each element's chain); backward forms dz = dy act'(z) in its workspace and then
 * runs dense's rules on dz. With the same GEMM order, dense_act and dense followed by
 * relu/gelu give the same bits.
 */
#include "gemv.h"
#include "gemm.h"
#include "registry.h"
#include "vec.h"

#include <math.h>
#include <stdio.h>

static tg_tensor *dense_new(tg_ctx *ctx, const char *fn, int op, tg_tensor *x,
                            tg_tensor *w, tg_tensor *b)
{
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
    return tg__op_new(ctx, op, x->dtype, x->rank, shape, b ? 3 : 2, src);
}

tg_tensor *tg_dense(tg_ctx *ctx, tg_tensor *x, tg_tensor *w, tg_tensor *b)
{
    return dense_new(ctx, "tg_dense", TG_OP_DENSE, x, w, b);
}

tg_tensor *tg_dense_act(tg_ctx *ctx, tg_tensor *x, tg_tensor *w, tg_tensor *b,
                        tg_activation act)
{
    static const char *fn = "tg_dense_act";
    if (ctx && act != TG_ACT_RELU && act != TG_ACT_GELU)
        return tg__err(ctx, TG_ERR_ARG, fn, "unknown activation %d (want TG_ACT_RELU or "
                       "TG_ACT_GELU)", (int)act);
    tg_tensor *y = dense_new(ctx, fn, TG_OP_DENSE_ACT, x, w, b);
    if (!y)
        return NULL;
    y->p.dense.act = act;
    /* GELU's derivative needs z = x W^T + b, which the output does not determine. */
    if (act == TG_ACT_GELU &&
        !tg__op_save_n(y, y->numel, tg_dtype_size(y->dtype), 0)) {
        tg__free(ctx, y);
        return tg__err(ctx, TG_ERR_OVERFLOW, fn, "saved pre-activation overflows");
    }
    return y;
}

/* GEMM workspace of call c covering the three products (forward (R, O, I), dx (R, I, O),
 * dW (O, I, R)): sized by the largest of R, O, I, at the call's precision. */
static size_t gemm_ws(const tg__call *c)
{
    const int64_t *ws = c->src_shape[1];
    int64_t I = ws[1], O = ws[0], R = c->src_numel[0] / (I > 0 ? I : 1);
    int64_t d = R > O ? R : O;
    d = d > I ? d : I;
    return tg__gemm_ws_bytes_prec(c->dtype, c->precision, c->nt, d, d);
}

/* The products at the call's precision: f32 graphs may take bf16 operands (tg_precision),
 * f64 graphs never do (refused when the graph is built). */
static void pgemm_f32(const tg__call *c, bool ta, bool tb, int64_t M, int64_t N, int64_t K,
                      const float *A, int64_t lda, const float *B, int64_t ldb, float *C,
                      int64_t ldc, bool acc, void *ws, const tg__gemm_epi *epi)
{
    tg__gemm_prec_f32(c->govs, c->precision, c->nt, ta, tb, M, N, K, A, lda, B, ldb, C, ldc, acc,
                      ws, epi);
}
static void pgemm_f64(const tg__call *c, bool ta, bool tb, int64_t M, int64_t N, int64_t K,
                      const double *A, int64_t lda, const double *B, int64_t ldb, double *C,
                      int64_t ldc, bool acc, void *ws, const tg__gemm_epi *epi)
{
    tg__gemm_gov_f64(c->govs, c->nt, ta, tb, M, N, K, A, lda, B, ldb, C, ldc, acc, ws, epi);
}
static void pgemv_f32(const tg__call *c, int64_t M, int64_t N, int64_t K, const float *x,
                      const float *W, const float *bias, float *y, int act, float *pre)
{
    if (c->precision == TG_PRECISION_BF16)
        tg__gemv_bf16(c->govs, c->nt, M, N, K, x, K, W, K, bias, y, N, act, pre);
    else
        tg__gemv_f32(c->govs, c->nt, M, N, K, x, K, W, K, bias, y, N, act, pre);
}
static void pgemv_f64(const tg__call *c, int64_t M, int64_t N, int64_t K, const double *x,
                      const double *W, const double *bias, double *y, int act, double *pre)
{
    tg__gemv_f64(c->govs, c->nt, M, N, K, x, K, W, K, bias, y, N, act, pre);
}

#define INV_SQRT2 0.70710678118654752440
#define INV_SQRT2PI 0.39894228040143267794

/* Forward: one GEMM whose epilogue adds the bias (each chain starts at b[o]) and applies the
 * activation (dense_act), so y is written once; with at most TG__GEMV_MAX_ROWS rows (a decoding
 * step) the matrix-vector kernel of gemv.c instead, which streams W without packing it (its
 * sums are in 16 fixed lanes, so the last bits differ from the GEMM's). Backward from
 * G = dL/dz (z = x W^T + b). The kernels, written once in dense_kernel.h, for f32 and for f64:
 * tg__dense_forward_f32 ... tg__dense_act_backward_f64, registered per dtype in
 * ops/ops_dtype.def. */
#define T float
#define SUF f32
#include "dense_kernel.h"
#undef T
#undef SUF
#define T double
#define SUF f64
#include "dense_kernel.h"
#undef T
#undef SUF

size_t tg__dense_ws(const tg__call *c) { return gemm_ws(c); }

size_t tg__dense_act_ws(const tg__call *c)
{
    size_t g = gemm_ws(c);
    return c->backward && !c->dy_scratch ? g + (size_t)c->numel * tg_dtype_size(c->dtype) : g;
}
