/*
 * step.c - one training step over K micro-batches (include/tgrad_train.h, "One training step
 * and evaluation"):
 *   for i in this process's micro-batches: fn(i) -> gradients g_i, weighted loss l_i
 *   g = tree sum of g_i, l = tree sum of l_i      (tg_grad_accum; K = 1: g_0, l_0 as they are)
 *   stop if l is not finite; clip g to the global norm; optimizer update at lr
 * and evaluation: loss per token = (sum of the batches' summed losses) / (their tokens).
 *
 * The micro-batch loop is the one `tgrad train --grad-accum` has always run, so its bits (and
 * its random numbers: micro-batch i from the step's RNG state jumped i times) are unchanged.
 */
#include "tgrad_train.h"
#include "core.h"

#include <math.h>
#include <stdlib.h>

static const char *FN = "tg_train_step";

/* K > 1: this process's micro-batches of the step through the accumulator; the RNG as the
 * header describes. */
static tg_status accumulate(tg_ctx *ctx, tg_grad_accum *acc, const tg_train_sync *sync,
                            tg_micro_batch_fn fn, void *user, double *loss)
{
    int64_t first = tg_grad_accum_first(acc), count = tg_grad_accum_count(acc);
    uint64_t after0[4]; /* the state micro-batch 0 leaves: the stream goes on from there */
    tg_rng_get_state(ctx, after0);
    for (int64_t j = 0; j < first; j++)
        tg_rng_jump(ctx);
    for (int64_t i = first; i < first + count; i++) {
        uint64_t cur[4];
        tg_rng_get_state(ctx, cur); /* the step's state jumped i times */
        double l = NAN;
        tg_status s = fn(user, i, &l);
        if (s == TG_OK)
            s = tg_grad_accum_push(acc, l);
        if (s != TG_OK)
            return s;
        if (i == 0)
            tg_rng_get_state(ctx, after0);
        tg_rng_set_state(ctx, cur);
        tg_rng_jump(ctx);
    }
    tg_status s = sync && sync->reduce ? sync->reduce(sync->user, acc, loss)
                                       : tg_grad_accum_finish(acc, loss);
    if (s == TG_OK && sync && sync->broadcast)
        s = sync->broadcast(sync->user, after0, sizeof after0);
    if (s != TG_OK)
        return s;
    tg_rng_set_state(ctx, after0);
    return TG_OK;
}

/* Clip the optimizer's parameters' gradients to @p max_norm; their norm in @p norm. */
static tg_status clip(tg_ctx *ctx, tg_optim *opt, double max_norm, double *norm)
{
    int64_t n = tg_optim_n_params(opt);
    tg_tensor **p = malloc(sizeof *p * (size_t)(n > 0 ? n : 1));
    if (!p) {
        tg__run_err(ctx, TG_ERR_NOMEM, FN, "out of memory");
        return TG_ERR_NOMEM;
    }
    for (int64_t i = 0; i < n; i++)
        p[i] = tg_optim_param(opt, i);
    tg_status s = tg_clip_grad_norm(ctx, n, p, max_norm, norm);
    free(p);
    return s;
}

tg_status tg_train_step(tg_ctx *ctx, tg_optim *opt, const tg_train_step_opts *opts,
                        tg_micro_batch_fn fn, void *user, double lr, tg_train_step_result *res)
{
    tg_train_step_result r = {NAN, NAN, TG_TRAIN_STAGE_BATCH};
    tg_train_step_opts o = {0};
    if (opts)
        o = *opts;
    if (res)
        *res = r;
    if (!ctx)
        return TG_ERR_ARG;
    tg__begin(ctx);
    if (!opt || !fn) {
        tg__run_err(ctx, TG_ERR_ARG, FN, "%s is NULL", !opt ? "the optimizer" : "the callback");
        return TG_ERR_ARG;
    }
    if (o.sync && !o.accum) {
        tg__run_err(ctx, TG_ERR_ARG, FN, "a sync needs an accumulator (opts->accum)");
        return TG_ERR_ARG;
    }
    tg_status s = o.accum ? accumulate(ctx, o.accum, o.sync, fn, user, &r.loss)
                          : fn(user, 0, &r.loss);
    if (s != TG_OK) {
        r.loss = NAN;
        if (res)
            *res = r;
        return s;
    }
    r.failed = TG_TRAIN_STAGE_UPDATE;
    if (!isfinite(r.loss)) {
        tg__run_err(ctx, TG_ERR_NONFINITE, FN, "loss is not finite (%g); parameters left "
                    "unchanged", r.loss);
        s = TG_ERR_NONFINITE;
    }
    if (s == TG_OK && o.clip > 0)
        s = clip(ctx, opt, o.clip, &r.grad_norm);
    if (s == TG_OK)
        s = tg_optim_step(opt, lr);
    if (s == TG_OK)
        r.failed = TG_TRAIN_STAGE_NONE;
    if (res)
        *res = r;
    return s;
}

tg_status tg_evaluate(tg_ctx *ctx, int64_t n, tg_eval_batch_fn fn, void *user,
                      double *loss_per_token, int64_t *tokens)
{
    static const char *fn_name = "tg_evaluate";
    if (loss_per_token)
        *loss_per_token = NAN;
    if (tokens)
        *tokens = 0;
    if (!ctx)
        return TG_ERR_ARG;
    tg__begin(ctx);
    if (!fn || !loss_per_token) {
        tg__run_err(ctx, TG_ERR_ARG, fn_name, "%s is NULL", !fn ? "the callback" : "the result");
        return TG_ERR_ARG;
    }
    if (n < 0) {
        tg__run_err(ctx, TG_ERR_ARG, fn_name, "negative batch count %lld", (long long)n);
        return TG_ERR_ARG;
    }
    bool was_training = tg_ctx_training(ctx);
    tg_ctx_set_training(ctx, false);
    double sum = 0;
    int64_t count = 0;
    tg_status s = TG_OK;
    for (int64_t i = 0; i < n && s == TG_OK; i++) {
        double l = 0;
        int64_t k = 0;
        s = fn(user, i, &l, &k);
        if (s == TG_OK && k < 0) {
            tg__run_err(ctx, TG_ERR_ARG, fn_name, "batch %lld reported %lld tokens",
                        (long long)i, (long long)k);
            s = TG_ERR_ARG;
        }
        sum += l;
        count += k;
    }
    tg_ctx_set_training(ctx, was_training);
    if (s != TG_OK)
        return s;
    if (tokens)
        *tokens = count;
    *loss_per_token = count ? sum / (double)count : NAN;
    return TG_OK;
}
