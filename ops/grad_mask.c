/*
 * grad_mask.c - the multiplier that dropout's or max's backward applies, as a tensor.
 *
 * For y = dropout(x):   m = keep * s      (that run's mask and scale 1 / (1 - p); 1 in eval)
 * For y = max(x, a):    m[o, k, i] = 1 if k is the arg-max of x[o, :, i] (the first one), else 0
 * m has x's shape and y's dtype; then dx = m * dy (max: dy broadcast along a) is the backward,
 * and the tangent is m * t_x (max: summed along a). The kernel reads y's saved values of the
 * same run (TG_OPF_SRC_SAVED: the planner keeps them until this node has run), so m is exactly
 * the mask that run's backward kernel uses. m is piecewise constant in x (TG_OPF_CONSTANT):
 * nothing is differentiated through it. Its use is the rules written as ops
 * (src/graph/vjp.c, jvp.c): second derivatives and forward mode through dropout and max.
 */
#include "registry.h"

tg_tensor *tg__grad_mask(tg_ctx *ctx, tg_tensor *y)
{
    static const char *fn = "tg__grad_mask";
    if (!y || (y->op != TG_OP_DROPOUT && y->op != TG_OP_MAX))
        return tg__err(ctx, TG_ERR_ARG, fn, "needs a dropout or max node");
    const tg_tensor *x = y->src[0];
    tg_tensor *m = tg__op_new(ctx, TG_OP_GRAD_MASK, y->dtype, x->rank, x->shape, 1, &y);
    if (!m)
        return NULL;
    m->p.grad_mask.of = y->op;
    m->p.grad_mask.axis = y->op == TG_OP_MAX ? y->p.max.axis : 0;
    m->requires_grad = false;
    return m;
}

/* One kernel for f32 and f64 (registered for both in ops/ops_dtype.def): the saved layouts
 * belong to the ops that write them. */
tg_status tg__grad_mask_forward(const tg__call *c)
{
    if (c->p->grad_mask.of == TG_OP_DROPOUT)
        tg__dropout_grad_mask(c);
    else
        tg__max_grad_mask(c);
    return TG_OK;
}
