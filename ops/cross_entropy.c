/*
 * cross_entropy.c - fused log-softmax + negative log-likelihood over the last axis, mean over
 * the non-ignored tokens, with optional label smoothing (PyTorch F.cross_entropy,
 * reduction='mean', ignore_index, label_smoothing; label smoothing: Szegedy et al. 2016,
 * "Rethinking the Inception Architecture", sec. 7).
 *
 * Per row r with target t_r != ignore_index (targets are i32), V classes, smoothing eps:
 *   lse_r = m_r + log(sum_j exp(x_rj - m_r)),  m_r = max_j x_rj      (finite for |x| ~ 1e4)
 *   loss_r = (1 - eps) (lse_r - x_{r, t_r}) + eps (lse_r - (1/V) sum_j x_rj)
 *          = -sum_j q_rj log softmax(x_r)_j,  q_r = (1 - eps) onehot(t_r) + eps / V
 *   loss  = (1 / N_valid) sum_r loss_r                    (eps = 0: exactly the plain loss)
 * Backward: dx_rj += dy (exp(x_rj - lse_r) - q_rj) / N_valid; ignored rows get 0.
 * If every target is ignored, loss = 0 and the gradient is 0 (PyTorch returns NaN).
 * Check (before each forward): targets are in [0, V) or equal to ignore_index.
 * saved: N_valid (int64), lse (R) and per-row loss (R) in double, and each row's class (R, i32;
 *        -1 for an ignored row), so backward reads the logits and the saved values but never
 *        the targets: changing them between forward and backward cannot change the gradient.
 */
#include "registry.h"
#include "vec.h"

#include <stdio.h>

/* Layout of c->saved (R rows), found from c->saved at each kernel call (the running graph
 * binds it; nothing is cached at build). */
typedef struct {
    int64_t *n_valid;
    double *lse, *row_loss;
    int32_t *cls;
} xent_saved;

static xent_saved saved_of(const tg__call *c, int64_t R)
{
    xent_saved s;
    s.n_valid = c->saved;
    s.lse = (double *)((char *)c->saved + sizeof(double));
    s.row_loss = s.lse + R;
    s.cls = (int32_t *)(s.row_loss + R);
    return s;
}

static tg_tensor *xent_build(tg_ctx *ctx, const char *fn, tg_tensor *logits, tg_tensor *targets,
                             int64_t ignore_index, double label_smoothing)
{
    tg_tensor *src[2] = {logits, targets};
    if (!tg__check_srcs_ids(ctx, fn, 2, src, 1, "targets"))
        return NULL;
    char bl[128], bt[128];
    bool ok = logits->rank >= 1 && targets->rank == logits->rank - 1;
    for (int i = 0; ok && i < targets->rank; i++)
        ok = targets->shape[i] == logits->shape[i];
    if (!ok)
        return tg__err(ctx, TG_ERR_SHAPE, fn,
                       "need logits (..., V) and targets (...): got logits %s, targets %s",
                       tg__shape_str(logits, bl, sizeof bl), tg__shape_str(targets, bt, sizeof bt));
    if (!(label_smoothing >= 0 && label_smoothing <= 1)) /* NaN fails too */
        return tg__err(ctx, TG_ERR_ARG, fn, "label_smoothing = %g must be in [0, 1]",
                       label_smoothing);
    tg_tensor *y = tg__op_new(ctx, TG_OP_XENT, logits->dtype, 0, NULL, 2, src);
    if (!y)
        return NULL;
    y->requires_grad = logits->requires_grad;
    y->p.xent.ignore_index = ignore_index;
    y->p.xent.label_smoothing = label_smoothing;
    int64_t R = targets->numel;
    if (!tg__op_save_n(y, R, 2 * sizeof(double) + sizeof(int32_t), sizeof(double)))
        return NULL;
    return y;
}

tg_tensor *tg_cross_entropy(tg_ctx *ctx, tg_tensor *logits, tg_tensor *targets,
                            int64_t ignore_index)
{
    return xent_build(ctx, "tg_cross_entropy", logits, targets, ignore_index, 0.0);
}

tg_tensor *tg_cross_entropy_smoothed(tg_ctx *ctx, tg_tensor *logits, tg_tensor *targets,
                                     int64_t ignore_index, double label_smoothing)
{
    return xent_build(ctx, "tg_cross_entropy_smoothed", logits, targets, ignore_index,
                      label_smoothing);
}

tg_status tg__xent_check(const tg__call *c)
{
    const int32_t *tg = c->in[1];
    int64_t V = c->src_shape[0][c->src_rank[0] - 1], ign = c->p->xent.ignore_index;
    for (int64_t n = 0; n < c->src_numel[1]; n++) {
        if (tg[n] == ign)
            continue;
        if (tg[n] < 0 || tg[n] >= V) {
            tg__run_err(c->ctx, TG_ERR_ARG, "tg_cross_entropy",
                    "target '%s'[%lld] = %lld is not a class in [0, %lld) nor ignore_index %lld",
                    c->src_name[1], (long long)n, (long long)tg[n], (long long)V,
                    (long long)ign);
            return TG_ERR_ARG;
        }
    }
    return TG_OK;
}

/* The kernels, written once in cross_entropy_kernel.h, for f32 and for f64: tg__xent_forward_f32
 * ... _backward_f64, registered per dtype in ops/ops_dtype.def under the output's (the logits')
 * dtype; the targets are i32 whatever it is. */
#define T float
#define SUF f32
#define EXP tg__expf
#include "cross_entropy_kernel.h"
#undef T
#undef SUF
#undef EXP
#define T double
#define SUF f64
#define EXP tg__exp
#include "cross_entropy_kernel.h"
#undef T
#undef SUF
#undef EXP
