/*
 * run.c - the training run (include/tgrad_train.h, "The training run"): the loop of
 * `tgrad train` as one call. Each step s (0-based):
 *   lr(s) by the schedule -> batch(s) -> tg_train_step -> tokens/s -> after_step (stop request)
 *   -> evaluate when (s+1) % eval_every == 0 or last -> best_val -> row -> save when due
 *   -> progress -> end after the last step or once a target is reached.
 * What a step trains on, how a model is evaluated, and where rows and checkpoints go are the
 * caller's callbacks; the loop's decisions (schedule, cadences, best-so-far, stop rules) are
 * made here, once, for the command line and for an embedder alike.
 */
#define _POSIX_C_SOURCE 200809L /* clock_gettime */
#include "tgrad_train.h"
#include "core.h"

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <time.h>

static const char *FN = "tg_train_run";

tg_train_config tg_train_config_default(void)
{
    tg_train_config c = {0};
    c.steps = 1;
    c.eval_every = 1;
    c.schedule = TG_LR_WARMUP_COSINE;
    c.lr = 1e-3;
    c.min_lr = 1e-4;
    c.d_model = 1;
    c.best_val = INFINITY;
    c.last_val = NAN;
    return c;
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Everything one call keeps between steps. */
typedef struct {
    tg_ctx *ctx;
    tg_optim *opt;
    const tg_train_config *cfg;
    const tg_train_callbacks *cb;
    tg_train_result *res;
    int64_t end;
    double t0, train_s; /* the call's start; seconds spent in steps */
    int64_t tokens_done; /* with the tokens callback: real tokens trained on */
} run_state;

/* The configuration's rules (tg_train_run's Errors). */
static bool config_ok(tg_ctx *ctx, tg_optim *opt, const tg_train_config *c,
                      const tg_train_callbacks *cb)
{
    const char *why = NULL;
    if (!opt || !c || !cb || !cb->micro)
        why = "NULL argument";
    else if (c->steps < 1 || c->start < 0 || c->start >= c->steps)
        why = "steps must be >= 1 and start in [0, steps)";
    else if (c->eval_every < 1 || c->save_every < 0 || c->warmup < 0)
        why = "eval_every must be >= 1, save_every and warmup >= 0";
    else if (c->schedule == TG_LR_NOAM && c->d_model < 1)
        why = "the noam schedule needs d_model >= 1";
    else if (c->schedule != TG_LR_NOAM && c->schedule != TG_LR_WARMUP_COSINE)
        why = "unknown schedule";
    if (why)
        tg__run_err(ctx, TG_ERR_ARG, FN, "%s", why);
    return why == NULL;
}

static double step_lr(const tg_train_config *c, int64_t step)
{
    return c->schedule == TG_LR_NOAM
               ? tg_lr_noam(step, c->d_model, c->warmup, c->lr)
               : tg_lr_warmup_cosine(step, c->steps, c->warmup, c->lr, c->min_lr);
}

/* The user of the model's callbacks (batch, micro, tokens, evaluate). */
static void *model_user(const tg_train_callbacks *cb)
{
    return cb->model_user ? cb->model_user : cb->user;
}

/* Fail the run at stage @p f with status @p s. */
static tg_status fail(run_state *r, tg_train_fail f, tg_status s)
{
    r->res->failed = f;
    return s != TG_OK ? s : TG_ERR_STATE;
}

/* Steps 2-3 of step @p step: the batch, tg_train_step, tokens/s. */
static tg_status train_one(run_state *r, int64_t step, double lr, double *loss)
{
    const tg_train_config *c = r->cfg;
    const tg_train_callbacks *cb = r->cb;
    *loss = NAN;
    double ts = now_s();
    tg_status s = cb->batch ? cb->batch(model_user(cb), step) : TG_OK;
    if (s != TG_OK)
        return fail(r, TG_TRAIN_FAIL_BATCH, s);
    tg_train_step_opts o = {.clip = c->clip, .accum = c->accum,
                            .sync = c->accum ? c->sync : NULL};
    tg_train_step_result sr;
    s = tg_train_step(r->ctx, r->opt, &o, cb->micro, model_user(cb), lr, &sr);
    *loss = sr.loss;
    if (s != TG_OK)
        return fail(r, sr.failed == TG_TRAIN_STAGE_BATCH ? TG_TRAIN_FAIL_BATCH
                                                           : TG_TRAIN_FAIL_UPDATE, s);
    r->train_s += now_s() - ts;
    r->res->trained++;
    double el = now_s() - r->t0;
    if (cb->tokens) { /* real tokens per second of training */
        r->tokens_done += cb->tokens(model_user(cb));
        r->res->tokens_per_s = (double)r->tokens_done / (r->train_s > 0 ? r->train_s : 1e-9);
    } else {
        r->res->tokens_per_s = (double)r->res->trained * (double)c->tokens_per_step /
                               (el > 0 ? el : 1e-9);
    }
    return TG_OK;
}

/* Step 4: the evaluation after step @p step into @p row. With several processes
 * (cfg.sync with accum) only the process running micro-batch 0 evaluates; its outcome (ok,
 * loss, metric, reached) goes to every process through sync->broadcast, so all keep the same
 * best_val, stop together on a target and fail together. */
static tg_status evaluate(run_state *r, int64_t step, tg_train_row *row)
{
    const tg_train_config *c = r->cfg;
    const tg_train_callbacks *cb = r->cb;
    const tg_train_sync *sync = c->accum && c->sync && c->sync->broadcast ? c->sync : NULL;
    bool here = !sync || tg_grad_accum_first(c->accum) == 0;
    double e[4] = {1, NAN, NAN, 0}; /* ok, val, metric, reached */
    tg_status s = TG_OK;
    if (here && cb->evaluate) {
        bool reached = false;
        s = cb->evaluate(model_user(cb), step, &e[1], &e[2], &reached);
        e[0] = s == TG_OK;
        e[3] = reached;
    }
    if (sync) {
        tg_status bs = sync->broadcast(sync->user, e, sizeof e);
        if (bs != TG_OK)
            return fail(r, TG_TRAIN_FAIL_SYNC, bs);
    }
    if (e[0] == 0) {
        if (!here)
            tg__run_err(r->ctx, TG_ERR_STATE, FN, "the evaluation failed on the process of "
                        "micro-batch 0");
        return fail(r, TG_TRAIN_FAIL_EVAL, here ? s : TG_ERR_STATE);
    }
    r->res->last_val = e[1];
    r->res->metric = e[2];
    r->res->reached |= e[3] != 0;
    if (e[1] < r->res->best_val) /* NaN never replaces it */
        r->res->best_val = e[1];
    row->val_loss = e[1];
    row->metric = e[2];
    return TG_OK;
}

/* Steps 3-5 after step @p step trained with loss @p loss at @p lr: stop request, evaluation,
 * row, save, progress. @p *stop: the run ends after this step. */
static tg_status finish_step(run_state *r, int64_t step, double loss, double lr, bool *stop)
{
    const tg_train_config *c = r->cfg;
    const tg_train_callbacks *cb = r->cb;
    tg_train_row row = {.step = step + 1, .loss = loss, .lr = lr, .val_loss = NAN,
                        .metric = NAN, .tokens_per_s = r->res->tokens_per_s};
    bool asked = c->stop && *c->stop != 0;
    if (cb->after_step) {
        tg_status s = cb->after_step(cb->user, step, step + 1 == r->end, &asked);
        if (s != TG_OK)
            return fail(r, TG_TRAIN_FAIL_AFTER, s);
    }
    r->res->stopped = asked;
    row.last = step + 1 == r->end || asked;
    row.eval = (step + 1) % c->eval_every == 0 || row.last;
    if (row.eval) {
        tg_status s = evaluate(r, step, &row);
        if (s != TG_OK)
            return s;
    }
    row.best_val = r->res->best_val;
    row.stop = r->res->reached || row.last;
    tg_status s = cb->row ? cb->row(cb->user, &row) : TG_OK;
    if (s != TG_OK)
        return fail(r, TG_TRAIN_FAIL_ROW, s);
    bool save = row.eval || row.stop || (c->save_every > 0 && (step + 1) % c->save_every == 0);
    s = save && cb->save ? cb->save(cb->user, step + 1, r->res->best_val) : TG_OK;
    if (s != TG_OK)
        return fail(r, TG_TRAIN_FAIL_SAVE, s);
    s = cb->progress ? cb->progress(cb->user, &row) : TG_OK;
    if (s != TG_OK)
        return fail(r, TG_TRAIN_FAIL_PROGRESS, s);
    *stop = row.stop;
    return TG_OK;
}

tg_status tg_train_run(tg_ctx *ctx, tg_optim *opt, const tg_train_config *cfg,
                       const tg_train_callbacks *cb, tg_train_result *res)
{
    tg_train_result dummy;
    if (!res)
        res = &dummy;
    *res = (tg_train_result){.loss = NAN, .last_val = NAN, .best_val = INFINITY,
                             .metric = NAN};
    if (!ctx)
        return TG_ERR_ARG;
    tg__begin(ctx);
    if (!config_ok(ctx, opt, cfg, cb))
        return TG_ERR_ARG;
    run_state r = {ctx, opt, cfg, cb, res, cfg->steps, now_s(), 0, 0};
    if (cfg->stop_after > 0 && cfg->stop_after < cfg->steps)
        r.end = cfg->stop_after;
    res->step = cfg->start;
    res->best_val = cfg->best_val;
    res->last_val = cfg->last_val;
    for (int64_t step = cfg->start; step < r.end; step++) {
        double lr = step_lr(cfg, step), loss;
        if (step == cfg->start && cb->first && cb->first(cb->user, step)) {
            res->before_first = true;
            return TG_OK;
        }
        tg_status s = train_one(&r, step, lr, &loss);
        res->loss = loss;
        bool stop = false;
        if (s == TG_OK)
            s = finish_step(&r, step, loss, lr, &stop);
        if (s != TG_OK)
            return s;
        res->step = step + 1;
        if (stop)
            break;
    }
    return TG_OK;
}

int tg_train_log_header(const char *metric, char *buf, size_t n)
{
    int k = snprintf(buf, n, "step,train_loss,val_loss,lr,tokens_per_s%s%s\n",
                     metric ? "," : "", metric ? metric : "");
    return k >= 0 && (size_t)k < n ? k : -1;
}

int tg_train_log_row(const tg_train_row *r, bool metric, char *buf, size_t n)
{
    char vs[32] = "", ms[32] = "";
    if (r->eval && isfinite(r->val_loss))
        snprintf(vs, sizeof vs, "%.6f", r->val_loss);
    if (r->eval && isfinite(r->metric))
        snprintf(ms, sizeof ms, "%.6f", r->metric);
    int k = snprintf(buf, n, "%" PRId64 ",%.6f,%s,%.6g,%.1f%s%s\n", r->step, r->loss, vs, r->lr,
                     r->tokens_per_s, metric ? "," : "", metric ? ms : "");
    return k >= 0 && (size_t)k < n ? k : -1;
}
