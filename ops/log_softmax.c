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

/* The kernels, written once in log_softmax_kernel.h, for f32 and for f64:
 * tg__log_softmax_forward_f32 ... _backward_f64, registered per dtype in ops/ops_dtype.def. */
#define T float
#define SUF f32
#define EXP tg__expf
#define LOG logf
#include "log_softmax_kernel.h"
#undef T
#undef SUF
#undef EXP
#undef LOG
#define T double
#define SUF f64
#define EXP tg__exp
#define LOG log
#include "log_softmax_kernel.h"
#undef T
#undef SUF
#undef EXP
#undef LOG
