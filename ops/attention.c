/*
 * attention.c - the two ops specific to attention scores: add_mask and a safe softmax.
 *
 * add_mask (ADDITIVE): y = s + m (m broadcast)           ds += dy, dm += reduce(dy)
 * add_mask (BLOCK):    y = (m != 0) ? -inf : s           ds += dy where m == 0
 * softmax (last axis): y_i = exp(x_i - max) / sum_j exp(x_j - max)
 *                      dx_i += y_i (dy_i - sum_j dy_j y_j)
 *   A row that is entirely -inf (every key blocked) gives y = 0 and dx = 0, never NaN
 *   (PyTorch SDPA `_safe_softmax`; plain torch.softmax would give NaN there).
 * Source: Vaswani et al. 2017, sec. 3.2.1 (masking by -inf before the softmax).
 */
#include "registry.h"
#include "vec.h"

#include <stdio.h>

tg_tensor *tg_add_mask(tg_ctx *ctx, tg_tensor *scores, tg_tensor *mask, tg_mask_kind kind)
{
    static const char *fn = "tg_add_mask";
    tg_tensor *src[2] = {scores, mask};
    if (!tg__check_srcs(ctx, fn, 2, src))
        return NULL;
    if (kind != TG_MASK_ADDITIVE && kind != TG_MASK_BLOCK)
        return tg__err(ctx, TG_ERR_ARG, fn,
                       "unknown mask kind %d (use TG_MASK_ADDITIVE or TG_MASK_BLOCK)", (int)kind);
    char ss[128], sm[128];
    int64_t shape[TG_MAX_RANK];
    int r;
    if (mask->rank > scores->rank ||
        !tg__broadcast_shape(scores->rank, scores->shape, mask->rank, mask->shape, &r, shape) ||
        memcmp(shape, scores->shape, sizeof(int64_t) * (size_t)r) != 0)
        return tg__err(ctx, TG_ERR_SHAPE, fn, "mask %s does not broadcast to scores %s",
                       tg__shape_str(mask, sm, sizeof sm), tg__shape_str(scores, ss, sizeof ss));
    tg_tensor *y = tg__op_new(ctx, TG_OP_ADD_MASK, scores->dtype, scores->rank, scores->shape,
                              2, src);
    if (!y)
        return NULL;
    y->p.mask.kind = kind;
    if (kind == TG_MASK_BLOCK && mask->requires_grad) {
        /* A boolean mask has no gradient; keep y's requirement from the scores only. */
        y->requires_grad = scores->requires_grad;
    }
    return y;
}

/* The kernels, written once in attention_kernel.h, for f32 and for f64: tg__add_mask_forward_f32
 * ... tg__softmax_backward_f64, registered per dtype in ops/ops_dtype.def. */
#define T float
#define SUF f32
#include "attention_kernel.h"
#undef T
#undef SUF
#define T double
#define SUF f64
#include "attention_kernel.h"
#undef T
#undef SUF
/* ---- softmax ------------------------------------------------------------------------------ */
tg_tensor *tg_softmax(tg_ctx *ctx, tg_tensor *x)
{
    static const char *fn = "tg_softmax";
    if (!tg__check_srcs(ctx, fn, 1, &x))
        return NULL;
    if (x->rank < 1)
        return tg__err(ctx, TG_ERR_SHAPE, fn, "x is a scalar; softmax needs rank >= 1");
    return tg__op_new(ctx, TG_OP_SOFTMAX, x->dtype, x->rank, x->shape, 1, &x);
}
