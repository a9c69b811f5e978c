/*
 * dropout.c - inverted dropout (Srivastava et al. 2014; PyTorch nn.Dropout).
 *
 * Training mode: keep_i ~ Bernoulli(1 - p);  y = x * keep / (1 - p)
 *                The mask is counter-based: one draw k from the context RNG per forward run,
 *                then u_i = splitmix64's output for the state k + (i + 1) * 0x9e3779b97f4a7c15
 *                (Steele et al. 2014: the i-th output of a splitmix64 stream seeded with k), and
 *                keep_i = (u_i >> 11) >= floor(p * 2^53). Element i's draw depends on k and i
 *                only, so threads generate the mask in parallel and it does not depend on the
 *                thread count; the context RNG advances by one draw per run.
 *                dx += dy * keep / (1 - p)
 * Eval mode (tg_ctx_set_training(ctx, false)) or p = 0: y = x, dx += dy.
 * The mode is read at each forward run; backward uses the mask and scale of that run (switching
 * modes between forward and backward changes nothing). saved: that run's scale (a double, in
 * a 64-byte header), then the keep mask (numel bytes).
 */
#include "registry.h"
#include "vec.h"

#define SAVED_HEAD 64 /* bytes before the mask in the saved values: the scale */

tg_tensor *tg_dropout(tg_ctx *ctx, tg_tensor *x, double p)
{
    static const char *fn = "tg_dropout";
    if (!tg__check_srcs(ctx, fn, 1, &x))
        return NULL;
    if (!(p >= 0 && p < 1))
        return tg__err(ctx, TG_ERR_ARG, fn, "p = %g must be in [0, 1)", p);
    tg_tensor *y = tg__op_new(ctx, TG_OP_DROPOUT, x->dtype, x->rank, x->shape, 1, &x);
    if (!y)
        return NULL;
    y->p.dropout.p = p;
    if (!tg__op_save_n(y, x->numel, 1, SAVED_HEAD))
        return NULL;
    return y;
}

/* The kernels, written once in dropout_kernel.h, for f32 and for f64: tg__dropout_forward_f32 ...
 * _backward_f64, registered per dtype in ops/ops_dtype.def. */
#define T float
#define SUF f32
#include "dropout_kernel.h"
#undef T
#undef SUF
#define T double
#define SUF f64
#include "dropout_kernel.h"
#undef T
#undef SUF

/* grad_mask of a dropout node (ops/grad_mask.c): out = keep * scale of the last forward run,
 * read from that node's saved values; the call's own shape is x's. */
void tg__dropout_grad_mask(const tg__call *c)
{
    const unsigned char *keep = (const unsigned char *)c->src_saved + SAVED_HEAD;
    double s = *(const double *)c->src_saved;
    if (c->dtype == TG_F64) {
        double *out = c->out;
        for (int64_t i = 0; i < c->numel; i++)
            out[i] = keep[i] ? s : 0.0;
    } else {
        float *out = c->out;
        for (int64_t i = 0; i < c->numel; i++)
            out[i] = keep[i] ? (float)s : 0.0f;
    }
}
