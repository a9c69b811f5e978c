/*
 * optim.c - layer 3: optimizers (SGD, Adam, AdamW with PyTorch's single-tensor formulas),
 * global-norm gradient clipping and the warmup + cosine learning-rate schedule.
 *
 * Updates are elementwise: each parameter element is owned by one OpenMP iteration, so steps
 * are bitwise identical for any thread count. Norms are summed serially in double.
 */
#include "tgrad_train.h"
#include "core.h"
#include "vec.h"

#include <stdio.h>
#include <stdlib.h>

struct tg_optim {
    tg_ctx *ctx;
    tg_optim_config cfg;
    int64_t n;
    tg_tensor **params;
    tg_tensor **m, **v; /* Adam: first and second moments; SGD: m = momentum buffer */
    int64_t t;          /* steps taken */
};

tg_optim_config tg_optim_defaults(tg_optim_kind kind)
{
    tg_optim_config c;
    memset(&c, 0, sizeof c);
    c.kind = kind;
    c.lr = kind == TG_OPTIM_SGD ? 1e-2 : 1e-3;
    c.weight_decay = kind == TG_OPTIM_ADAMW ? 1e-2 : 0.0;
    c.beta1 = 0.9;
    c.beta2 = 0.999;
    c.eps = 1e-8;
    return c;
}

size_t tg_optim_state_bytes(const tg_optim *opt)
{
    if (!opt)
        return 0;
    size_t b = 0;
    for (int64_t i = 0; i < opt->n; i++) {
        if (opt->m && opt->m[i])
            b += (size_t)opt->m[i]->numel * tg_dtype_size(opt->m[i]->dtype);
        if (opt->v && opt->v[i])
            b += (size_t)opt->v[i]->numel * tg_dtype_size(opt->v[i]->dtype);
    }
    return b;
}

static tg_tensor *state_like(tg_ctx *ctx, const tg_tensor *p, const char *prefix)
{
    char name[2 * TG_NAME_MAX]; /* tg_const truncates to TG_NAME_MAX - 1 */
    snprintf(name, sizeof name, "%s%s", prefix, p->name);
    return tg_const(ctx, p->dtype, p->rank, p->shape, name);
}

static int by_id(const void *a, const void *b)
{
    uint64_t x = (*(tg_tensor *const *)a)->id, y = (*(tg_tensor *const *)b)->id;
    return x < y ? -1 : x > y;
}

/* Refuse a parameter listed twice (it would be stepped twice per step, with two states).
 * Sorts a copy by creation number: O(n log n). Records the error; false on failure. */
static bool check_distinct(tg_ctx *ctx, const char *fn, int64_t n, tg_tensor *const *params)
{
    if (n < 2)
        return true;
    tg_tensor **s = tg__alloc(ctx, sizeof *s * (size_t)n, fn);
    if (!s)
        return false;
    memcpy(s, params, sizeof *s * (size_t)n);
    qsort(s, (size_t)n, sizeof *s, by_id);
    const tg_tensor *dup = NULL;
    for (int64_t i = 1; i < n && !dup; i++)
        if (s[i] == s[i - 1])
            dup = s[i];
    tg__free(ctx, s);
    if (!dup)
        return true;
    int64_t first = -1, second = -1;
    for (int64_t i = 0; i < n && second < 0; i++)
        if (params[i] == dup) {
            if (first < 0)
                first = i;
            else
                second = i;
        }
    tg__err(ctx, TG_ERR_ARG, fn, "parameter '%s' is listed twice (entries %lld and %lld); each "
            "parameter may appear once", dup->name, (long long)first, (long long)second);
    return false;
}

/* The configuration's values: false with the error recorded (naming fn). */
static bool config_ok(tg_ctx *ctx, const char *fn, const tg_optim_config *c)
{
    if (c->kind < TG_OPTIM_SGD || c->kind > TG_OPTIM_ADAMW)
        return tg__err(ctx, TG_ERR_ARG, fn, "unknown optimizer kind %d", (int)c->kind);
    if (!(c->lr >= 0) || !isfinite(c->lr))
        return tg__err(ctx, TG_ERR_ARG, fn, "lr %g must be finite and >= 0", c->lr);
    if (!(c->weight_decay >= 0) || !isfinite(c->weight_decay))
        return tg__err(ctx, TG_ERR_ARG, fn, "weight_decay %g must be finite and >= 0",
                       c->weight_decay);
    if (!(c->momentum >= 0) || !isfinite(c->momentum) || !(c->dampening >= 0) ||
        !isfinite(c->dampening))
        return tg__err(ctx, TG_ERR_ARG, fn, "momentum %g and dampening %g must be finite and >= 0",
                       c->momentum, c->dampening);
    if (c->nesterov && (c->momentum <= 0 || c->dampening != 0))
        return tg__err(ctx, TG_ERR_ARG, fn,
                       "nesterov needs momentum > 0 and dampening 0 (momentum %g, dampening %g)",
                       c->momentum, c->dampening);
    if (!(c->beta1 >= 0 && c->beta1 < 1) || !(c->beta2 >= 0 && c->beta2 < 1))
        return tg__err(ctx, TG_ERR_ARG, fn, "betas (%g, %g) must be in [0, 1)", c->beta1,
                       c->beta2);
    if (!(c->eps > 0) || !isfinite(c->eps))
        return tg__err(ctx, TG_ERR_ARG, fn, "eps %g must be finite and > 0", c->eps);
    return true;
}

/* Give back what a failed tg_optim_new made (state tensors included). */
static void optim_discard(tg_ctx *ctx, tg_optim *o)
{
    for (int64_t i = 0; i < o->n && o->m && o->v; i++) {
        tg_tensor *st[2] = {o->m[i], o->v[i]};
        for (int k = 0; k < 2; k++)
            if (st[k]) {
                tg__free(ctx, st[k]->data);
                tg__free(ctx, st[k]);
            }
    }
    tg__free(ctx, o->params);
    tg__free(ctx, o->m);
    tg__free(ctx, o->v);
    tg__free(ctx, o);
}

/* Every entry a distinct parameter of ctx: false with the error recorded. */
static bool params_ok(tg_ctx *ctx, const char *fn, int64_t n, tg_tensor *const *params)
{
    for (int64_t i = 0; i < n; i++) {
        if (!params[i] || params[i]->ctx != ctx || params[i]->kind != TG_KIND_PARAM) {
            tg__err(ctx, TG_ERR_ARG, fn, "entry %lld is %s", (long long)i,
                    !params[i] ? "NULL"
                    : params[i]->ctx != ctx ? "not a parameter of this context (it belongs to "
                                              "another context)"
                                            : "not a parameter of this context");
            return false;
        }
    }
    return check_distinct(ctx, fn, n, params);
}

/* The optimizer's state tensors (SGD momentum, or Adam's m and v) for every parameter. */
static bool make_state(tg_ctx *ctx, tg_optim *o, tg_tensor *const *params)
{
    const tg_optim_config *c = &o->cfg;
    for (int64_t i = 0; i < o->n; i++) {
        o->params[i] = params[i];
        bool sgd = c->kind == TG_OPTIM_SGD;
        if (sgd && c->momentum == 0)
            continue;
        o->m[i] = state_like(ctx, params[i], sgd ? "sgd.momentum." : "adam.m.");
        if (!o->m[i])
            return false;
        if (!sgd && !(o->v[i] = state_like(ctx, params[i], "adam.v.")))
            return false;
    }
    return true;
}

tg_optim *tg_optim_new(tg_ctx *ctx, const tg_optim_config *cfg, int64_t n,
                       tg_tensor *const *params)
{
    static const char *fn = "tg_optim_new";
    if (!ctx)
        return NULL;
    tg__begin(ctx);
    if (tg__build_failed(ctx))
        return NULL; /* a build error is pending: keep it, allocate nothing */
    if (!cfg)
        return NULL; /* NULL arguments: NULL, nothing recorded (as before any error) */
    if (!config_ok(ctx, fn, cfg))
        return NULL;
    if (!params) {
        n = ctx->n_params;
        params = ctx->params;
    }
    size_t bytes;
    if (n < 0)
        return tg__err(ctx, TG_ERR_ARG, fn, "negative parameter count %lld", (long long)n);
    if (!tg__bytes(n ? n : 1, sizeof(tg_tensor *), &bytes))
        return tg__err(ctx, TG_ERR_ARG, fn, "parameter count %lld too large (at most %zu)",
                       (long long)n, SIZE_MAX / sizeof(tg_tensor *));
    tg_optim *o = tg__alloc(ctx, sizeof *o, fn);
    if (!o)
        return NULL;
    o->ctx = ctx;
    o->cfg = *cfg;
    o->n = n;
    o->params = tg__alloc(ctx, bytes, fn);
    o->m = tg__alloc(ctx, bytes, fn);
    o->v = tg__alloc(ctx, bytes, fn);
    if (o->params && o->m && o->v && params_ok(ctx, fn, n, params) && make_state(ctx, o, params))
        return o;
    optim_discard(ctx, o); /* the error is recorded */
    return NULL;
}

int64_t tg_optim_steps(const tg_optim *o) { return o ? o->t : 0; }
void tg_optim_set_steps(tg_optim *o, int64_t t)
{
    if (o && t >= 0)
        o->t = t;
}
int64_t tg_optim_n_params(const tg_optim *o) { return o ? o->n : 0; }
tg_tensor *tg_optim_param(const tg_optim *o, int64_t i)
{
    return (o && i >= 0 && i < o->n) ? o->params[i] : NULL;
}

int64_t tg_optim_n_state(const tg_optim *o)
{
    if (!o)
        return 0;
    int64_t k = 0;
    for (int64_t i = 0; i < o->n; i++)
        k += (o->m[i] != NULL) + (o->v[i] != NULL);
    return k;
}

tg_tensor *tg_optim_state(const tg_optim *o, int64_t i)
{
    if (!o || i < 0)
        return NULL;
    for (int64_t j = 0; j < o->n; j++) {
        if (o->m[j] && i-- == 0)
            return o->m[j];
        if (o->v[j] && i-- == 0)
            return o->v[j];
    }
    return NULL;
}

/* A step that would make a parameter or its state non-finite (finite gradients, but a huge
 * learning rate, state or parameter) is refused like a non-finite gradient: a first pass runs
 * the same arithmetic without writing and ORs a per-element "not finite" flag. */
#define CHECK_BLOCK 4096
#ifdef TG_HAVE_OPENMP
/* Race-free: each iteration ORs into its thread's private copy of var (an integer, so the
 * combined result does not depend on the order). Iterations handed out as TG_OMP_FOR does
 * (guided), so a descheduled thread holds up only what it took. */
#define OMP_FOR_OR(nt, cond, var)                                                              \
    TG__PRAGMA(omp parallel for schedule(guided) num_threads(nt) if (cond) reduction(| : var))
#else
#define OMP_FOR_OR(nt, cond, var) (void)(nt); (void)(cond);
#endif

/* The updates per float type: adam_f32/f64 (Adam, AdamW) and sgd_f32/f64. */
#define T float
#define SUF f32
#include "optim_update_kernel.h"
#undef T
#undef SUF
#define T double
#define SUF f64
#include "optim_update_kernel.h"
#undef T
#undef SUF

static double elem(const void *p, tg_dtype dt, int64_t i)
{
    return dt == TG_F32 ? (double)((const float *)p)[i] : ((const double *)p)[i];
}

tg_status tg_optim_step(tg_optim *o, double lr)
{
    static const char *fn = "tg_optim_step";
    if (!o)
        return TG_ERR_ARG;
    tg__begin(o->ctx);
    if (lr < 0)
        lr = o->cfg.lr;
    if (!isfinite(lr)) {
        tg__run_err(o->ctx, TG_ERR_ARG, fn, "learning rate %g is not finite", lr);
        return TG_ERR_ARG;
    }
    if (o->t == INT64_MAX) {
        tg__run_err(o->ctx, TG_ERR_STATE, fn, "step count %lld cannot grow", (long long)o->t);
        return TG_ERR_STATE;
    }
    int64_t t = o->t + 1;
    int nt = tg__threads(o->ctx);
    tg__govs *govs = &o->ctx->govs;
    /* Two passes: check every parameter's update, then apply them all (or none). A non-finite
     * gradient makes its update non-finite, so the check also finds those (and names them as
     * such) without a separate scan of the gradients. */
    for (int pass = 0; pass < 2; pass++) {
        bool check = pass == 0;
        for (int64_t i = 0; i < o->n; i++) {
            tg_tensor *p = o->params[i];
            if (!p->grad)
                continue; /* like PyTorch, a parameter without a gradient is not stepped */
            void *m = o->m[i] ? o->m[i]->data : NULL, *v = o->v[i] ? o->v[i]->data : NULL;
            int64_t k;
            if (o->cfg.kind == TG_OPTIM_SGD)
                k = p->dtype == TG_F32
                        ? sgd_f32(nt, &o->cfg, lr, t, p->numel, p->data, p->grad, m, check)
                        : sgd_f64(nt, &o->cfg, lr, t, p->numel, p->data, p->grad, m, check);
            else
                k = p->dtype == TG_F32 ? adam_f32(govs, nt, &o->cfg, lr, t, p->numel, p->data,
                                                  p->grad, m, v, check)
                                       : adam_f64(govs, nt, &o->cfg, lr, t, p->numel, p->data,
                                                  p->grad, m, v, check);
            if (k >= 0 && !isfinite(elem(p->grad, p->dtype, k))) {
                tg__run_err(o->ctx, TG_ERR_NONFINITE, fn, "gradient of '%s' is not finite "
                            "(element %lld is %g); parameters left unchanged", p->name,
                            (long long)k, elem(p->grad, p->dtype, k));
                return TG_ERR_NONFINITE;
            }
            if (k >= 0) {
                tg__run_err(o->ctx, TG_ERR_NONFINITE, fn,
                            "the update of '%s' is not finite at element %lld (parameter %g, "
                            "gradient %g, learning rate %g); parameters left unchanged",
                            p->name, (long long)k, elem(p->data, p->dtype, k),
                            elem(p->grad, p->dtype, k), lr);
                return TG_ERR_NONFINITE;
            }
        }
    }
    o->t = t;
    return TG_OK;
}

/* Every entry of params (n of them) is NULL or a tensor of ctx (tg_grad_norm and
 * tg_clip_grad_norm skip NULL entries); otherwise a run error naming fn and the entry. */
static bool params_of(tg_ctx *ctx, const char *fn, int64_t n, tg_tensor *const *params)
{
    if (n < 0) {
        tg__run_err(ctx, TG_ERR_ARG, fn, "negative parameter count %lld", (long long)n);
        return false;
    }
    for (int64_t i = 0; i < n; i++)
        if (params[i] && params[i]->ctx != ctx) {
            tg__run_err(ctx, TG_ERR_ARG, fn, "entry %lld ('%s') belongs to another context",
                        (long long)i, params[i]->name);
            return false;
        }
    return true;
}

static double norm_of(int64_t n, tg_tensor *const *params)
{
    double s = 0;
    for (int64_t i = 0; i < n; i++) {
        const tg_tensor *p = params[i];
        if (!p || !p->grad)
            continue;
        if (p->dtype == TG_F32) {
            const float *g = p->grad;
            for (int64_t k = 0; k < p->numel; k++)
                s += (double)g[k] * (double)g[k];
        } else {
            const double *g = p->grad;
            for (int64_t k = 0; k < p->numel; k++)
                s += g[k] * g[k];
        }
    }
    return sqrt(s);
}

double tg_grad_norm(tg_ctx *ctx, int64_t n, tg_tensor *const *params)
{
    if (!ctx)
        return 0;
    tg__begin(ctx); /* a run-time call: the previous call's error does not stay */
    if (!params) {
        n = ctx->n_params;
        params = ctx->params;
    }
    if (!params_of(ctx, "tg_grad_norm", n, params))
        return NAN;
    return norm_of(n, params);
}

tg_status tg_clip_grad_norm(tg_ctx *ctx, int64_t n, tg_tensor *const *params, double max_norm,
                            double *norm_out)
{
    static const char *fn = "tg_clip_grad_norm";
    if (!ctx)
        return TG_ERR_ARG;
    tg__begin(ctx);
    if (!(max_norm > 0)) {
        tg__run_err(ctx, TG_ERR_ARG, fn, "max_norm %g must be > 0", max_norm);
        return TG_ERR_ARG;
    }
    if (!params) {
        n = ctx->n_params;
        params = ctx->params;
    }
    if (!params_of(ctx, fn, n, params))
        return TG_ERR_ARG;
    double norm = norm_of(n, params);
    if (norm_out)
        *norm_out = norm;
    if (!isfinite(norm)) {
        tg__run_err(ctx, TG_ERR_NONFINITE, fn, "gradient norm is %g; gradients left unchanged",
                    norm);
        return TG_ERR_NONFINITE;
    }
    double coef = max_norm / (norm + 1e-6);
    if (coef >= 1)
        return TG_OK;
    for (int64_t i = 0; i < n; i++) {
        tg_tensor *p = params[i];
        if (!p || !p->grad)
            continue;
        if (p->dtype == TG_F32) {
            float *g = p->grad, c = (float)coef;
            for (int64_t k = 0; k < p->numel; k++)
                g[k] *= c;
        } else {
            double *g = p->grad;
            for (int64_t k = 0; k < p->numel; k++)
                g[k] *= coef;
        }
    }
    return TG_OK;
}

double tg_lr_warmup_cosine(int64_t step, int64_t total, int64_t warmup, double base,
                           double min_lr)
{
    /* Negative step, warmup or total count as 0; then every difference below is of two
     * non-negative int64 values (no overflow), and total - warmup >= 1 where it divides. */
    if (step < 0)
        step = 0;
    if (warmup < 0)
        warmup = 0;
    if (total < 0)
        total = 0;
    if (warmup > 0 && step < warmup)
        return base * ((double)step + 1.0) / (double)warmup;
    if (total <= warmup)
        return base;
    double progress = (double)(step - warmup) / (double)(total - warmup);
    if (progress > 1)
        progress = 1;
    return min_lr + 0.5 * (base - min_lr) * (1.0 + cos(3.14159265358979323846 * progress));
}

double tg_lr_noam(int64_t step, int64_t d_model, int64_t warmup, double factor)
{
    if (d_model < 1 || !(factor >= 0) || !isfinite(factor))
        return NAN;
    double n = step < 0 ? 1.0 : (double)step + 1.0; /* the paper's step_num, from 1 */
    double decay = pow(n, -0.5);
    double rate = warmup > 0 ? fmin(decay, n * pow((double)warmup, -1.5)) : decay;
    return factor * pow((double)d_model, -0.5) * rate;
}
