/*
 * loss.c - mean squared error (PyTorch F.mse_loss(input, target, reduction=...)).
 *
 * e_i = (x_i - t_i)^2
 * mean: y = (1/N) sum_i e_i    dx_i += (2/N) (x_i - t_i) dy     dt_i -= the same
 * sum:  y = sum_i e_i          dx_i += 2 (x_i - t_i) dy         dt_i -= the same
 * none: y_i = e_i              dx_i += 2 (x_i - t_i) dy_i       dt_i -= the same
 * (The gradient expressions are PyTorch's mse_loss_backward: norm * (x - t) * dy.)
 *
 * The mean and sum are accumulated in double (for f32 too) over blocks fixed by N alone (at
 * most MSE_BLOCKS of at least MSE_MIN_BLOCK elements): the blocks' partial sums may be computed
 * by any threads, and are then added in block order on one thread, so the result does not
 * depend on the thread count. Backward reads x and t.
 */
#include "registry.h"

#include <stdio.h>

#define MSE_BLOCKS 256
#define MSE_MIN_BLOCK 4096

tg_tensor *tg_mse_loss(tg_ctx *ctx, tg_tensor *input, tg_tensor *target, tg_reduction reduction)
{
    static const char *fn = "tg_mse_loss";
    tg_tensor *src[2] = {input, target};
    if (!tg__check_srcs(ctx, fn, 2, src))
        return NULL;
    if (input->dtype != TG_F32 && input->dtype != TG_F64)
        return tg__err(ctx, TG_ERR_DTYPE, fn, "operands are %s; expected f32 or f64",
                       tg_dtype_str(input->dtype));
    if (reduction != TG_REDUCTION_MEAN && reduction != TG_REDUCTION_SUM &&
        reduction != TG_REDUCTION_NONE)
        return tg__err(ctx, TG_ERR_ARG, fn,
                       "unknown reduction %d (TG_REDUCTION_MEAN, _SUM or _NONE)",
                       (int)reduction);
    if (input->rank != target->rank ||
        memcmp(input->shape, target->shape, sizeof(int64_t) * (size_t)input->rank) != 0) {
        char bi[128], bt[128];
        return tg__err(ctx, TG_ERR_SHAPE, fn, "input is %s but target is %s; shapes must match",
                       tg__shape_str(input, bi, sizeof bi), tg__shape_str(target, bt, sizeof bt));
    }
    bool none = reduction == TG_REDUCTION_NONE;
    tg_tensor *y = tg__op_new(ctx, TG_OP_MSE_LOSS, input->dtype, none ? input->rank : 0,
                              input->shape, 2, src);
    if (y)
        y->p.mse.reduction = reduction;
    return y;
}

/* The kernels, written once in loss_kernel.h, for f32 and for f64: tg__mse_loss_forward_f32 ...
 * _backward_f64, registered per dtype in ops/ops_dtype.def. */
#define T float
#define SUF f32
#include "loss_kernel.h"
#undef T
#undef SUF
#define T double
#define SUF f64
#include "loss_kernel.h"
#undef T
#undef SUF
