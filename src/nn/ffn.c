/*
 * ffn.c - position-wise feed-forward network (Vaswani et al. 2017, sec. 3.3, eq. (2)):
 *   h = act(x W1^T + b1)     (..., F)
 *   y = h W2^T + b2          (..., D)
 */
#include "nn_internal.h"
#include "core.h"

#include <math.h>
#include <stdio.h>

tg_status tg_ffn_init(tg_ctx *ctx, tg_ffn *f, tg_dtype dt, int64_t d_model, int64_t d_ff,
                      tg_activation act, const char *prefix)
{
    static const char *fn = "tg_ffn_init";
    tg_status s0 = tg__nn_init_begin(ctx, f, sizeof *f);
    if (s0 != TG_OK)
        return s0; /* no context, or a build error is pending: stop before allocating */
    if (!f)
        return TG_ERR_ARG;
    if (d_model < 1 || d_ff < 1 || (act != TG_ACT_RELU && act != TG_ACT_GELU)) {
        tg__err(ctx, TG_ERR_ARG, fn, "need d_model, d_ff >= 1 and relu or gelu (got %lld, %lld, %d)",
                (long long)d_model, (long long)d_ff, (int)act);
        return TG_ERR_ARG;
    }
    char why[96];
    snprintf(why, sizeof why, "d_model %lld with d_ff %lld", (long long)d_model,
             (long long)d_ff);
    tg__nn_plan plan = tg__nn_plan_begin(ctx, fn, dt);
    tg__nn_plan_add(&plan, 2, 1, d_ff, d_model, "linear1.weight (d_ff, d_model)", why);
    tg__nn_plan_add(&plan, 1, 1, d_ff, 0, "linear1.bias (d_ff)", why);
    tg__nn_plan_add(&plan, 1, 1, d_model, 0, "linear2.bias (d_model)", why);
    tg_status ps = tg__nn_plan_end(&plan);
    if (ps != TG_OK)
        return ps;
    f->d_model = d_model;
    f->d_ff = d_ff;
    f->activation = act;
    double b1 = 1.0 / sqrt((double)d_model), b2 = 1.0 / sqrt((double)d_ff);
    f->linear1_weight = tg__nn_param(ctx, dt, TG_DIMS(d_ff, d_model), prefix, "linear1.weight", b1, false);
    f->linear1_bias = tg__nn_param(ctx, dt, TG_DIMS(d_ff), prefix, "linear1.bias", b1, false);
    f->linear2_weight = tg__nn_param(ctx, dt, TG_DIMS(d_model, d_ff), prefix, "linear2.weight", b2, false);
    f->linear2_bias = tg__nn_param(ctx, dt, TG_DIMS(d_model), prefix, "linear2.bias", b2, false);
    return tg__nn_status(ctx);
}

tg_tensor *tg_ffn_forward(tg_ctx *ctx, const tg_ffn *f, tg_tensor *x)
{
    static const char *fn = "tg_ffn_forward";
    if (!ctx || !x)
        return NULL;
    if (!f || !f->linear1_weight || !f->linear1_bias || !f->linear2_weight || !f->linear2_bias)
        return tg__err(ctx, TG_ERR_ARG, fn, "module is NULL or not initialised");
    char b[128];
    if (tg_tensor_rank(x) < 1 || tg_tensor_dim(x, -1) != f->d_model)
        return tg__err(ctx, TG_ERR_SHAPE, fn, "x %s must end in d_model = %lld",
                       tg_tensor_shape_str(x, b, sizeof b), (long long)f->d_model);
    return tg__nn_ff_block(ctx, f, x, 0);                               /* (..., D) */
}
