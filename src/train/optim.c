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
    const tg_optim_config *c = cfg;
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
    o->cfg = *c;
    o->n = n;
    o->params = tg__alloc(ctx, bytes, fn);
    o->m = tg__alloc(ctx, bytes, fn);
    o->v = tg__alloc(ctx, bytes, fn);
    if (!o->params || !o->m || !o->v)
        goto fail;
    for (int64_t i = 0; i < n; i++) {
        if (!params[i] || params[i]->ctx != ctx || params[i]->kind != TG_KIND_PARAM) {
            tg__err(ctx, TG_ERR_ARG, fn, "entry %lld is not a parameter of this context",
                    (long long)i);
            goto fail;
        }
        o->params[i] = params[i];
        bool sgd = c->kind == TG_OPTIM_SGD;
        if (sgd && c->momentum == 0)
            continue;
        o->m[i] = state_like(ctx, params[i], sgd ? "sgd.momentum." : "adam.m.");
        if (!o->m[i])
            goto fail;
        if (!sgd && !(o->v[i] = state_like(ctx, params[i], "adam.v.")))
            goto fail;
    }
    return o;

fail: /* the error is recorded; give back what was made (state tensors included) */
    for (int64_t i = 0; i < n && o->m && o->v; i++) {
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

/* Is every gradient element finite? (parameters without a gradient count as zero) */
static bool all_finite(const tg_tensor *p)
{
    if (p->dtype == TG_F32)
        return tg__first_nonfinite_f32(p->grad, p->numel, false) < 0;
    return tg__first_nonfinite_f64(p->grad, p->numel, false) < 0;
}

static tg_tensor *first_nonfinite(tg_tensor *const *params, int64_t n)
{
    for (int64_t i = 0; i < n; i++)
        if (params[i]->grad && !all_finite(params[i]))
            return params[i];
    return NULL;
}

/* Adam/AdamW on elements [lo, hi): branch-free per element (the optimizer kind and weight-decay
 * mode are loop-invariant), compiled per SIMD level; the same arithmetic as the scalar form, so
 * every clone and thread count gives the same bits. */
#define DEFINE_UPDATE(T, SUF)                                                                  \
    TG_SIMD_CLONES static void adam_range_##SUF(int64_t lo, int64_t hi, T step, T bc2s, T b1,  \
                                                T b2, T wd, T eps, T decay, bool decoupled,    \
                                                T *p, const T *g, T *m, T *v)                  \
    {                                                                                          \
        if (decoupled) {                                                                       \
            for (int64_t i = lo; i < hi; i++) {                                                \
                T gi = g[i];                                                                   \
                p[i] *= decay;                                                                 \
                m[i] = m[i] * b1 + (1 - b1) * gi;                                              \
                v[i] = v[i] * b2 + (1 - b2) * gi * gi;                                         \
                T denom = sqrt(v[i]) / bc2s + eps;                                             \
                p[i] -= step * (m[i] / denom);                                                 \
            }                                                                                  \
        } else {                                                                               \
            for (int64_t i = lo; i < hi; i++) {                                                \
                T gi = g[i];                                                                   \
                if (wd != 0)                                                                   \
                    gi += wd * p[i];                                                           \
                m[i] = m[i] * b1 + (1 - b1) * gi;                                              \
                v[i] = v[i] * b2 + (1 - b2) * gi * gi;                                         \
                T denom = sqrt(v[i]) / bc2s + eps;                                             \
                p[i] -= step * (m[i] / denom);                                                 \
            }                                                                                  \
        }                                                                                      \
    }                                                                                          \
    static void adam_##SUF(int nt, const tg_optim_config *c, double lr, int64_t t, int64_t n,  \
                           T *p, const T *g, T *m, T *v)                                       \
    {                                                                                          \
        double bc1 = 1.0 - pow(c->beta1, (double)t), bc2 = 1.0 - pow(c->beta2, (double)t);     \
        T step = (T)(lr / bc1), bc2s = (T)sqrt(bc2), b1 = (T)c->beta1, b2 = (T)c->beta2;       \
        T wd = (T)c->weight_decay, eps = (T)c->eps, decay = (T)(1.0 - lr * c->weight_decay);   \
        bool decoupled = c->kind == TG_OPTIM_ADAMW;                                            \
        /* Race-free: element i of p, m, v is owned by one range. (g is never NULL: a        \
         * parameter without a gradient is not stepped.) */                                    \
        TG_PAR_RANGE(nt, n * 4 * (int64_t)sizeof(T) > TG_PAR_BYTES, n, 16,                     \
                     adam_range_##SUF(lo, hi, step, bc2s, b1, b2, wd, eps, decay, decoupled,   \
                                      p, g, m, v));                                            \
    }                                                                                          \
    static void sgd_##SUF(int nt, const tg_optim_config *c, double lr, int64_t t, int64_t n,   \
                          T *p, const T *g, T *buf)                                            \
    {                                                                                          \
        T wd = (T)c->weight_decay, mom = (T)c->momentum, damp = (T)(1.0 - c->dampening);       \
        T l = (T)lr;                                                                           \
        TG_OMP_FOR(nt, n > TG_PAR_MIN / 8)                                                     \
        for (int64_t i = 0; i < n; i++) {                                                      \
            T d = (g ? g[i] : 0) + wd * p[i];                                                  \
            if (buf) {                                                                         \
                buf[i] = t == 1 ? d : mom * buf[i] + damp * d;                                 \
                d = c->nesterov ? d + mom * buf[i] : buf[i];                                   \
            }                                                                                  \
            p[i] -= l * d;                                                                     \
        }                                                                                      \
    }
DEFINE_UPDATE(float, f32)
DEFINE_UPDATE(double, f64)

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
    tg_tensor *bad = first_nonfinite(o->params, o->n);
    if (bad) {
        tg__run_err(o->ctx, TG_ERR_NONFINITE, fn,
                    "gradient of '%s' is not finite; parameters left unchanged", bad->name);
        return TG_ERR_NONFINITE;
    }
    int64_t t = ++o->t;
    int nt = tg__threads(o->ctx);
    for (int64_t i = 0; i < o->n; i++) {
        tg_tensor *p = o->params[i];
        if (!p->grad)
            continue; /* like PyTorch, a parameter without a gradient is not stepped */
        void *m = o->m[i] ? o->m[i]->data : NULL, *v = o->v[i] ? o->v[i]->data : NULL;
        if (o->cfg.kind == TG_OPTIM_SGD) {
            if (p->dtype == TG_F32)
                sgd_f32(nt, &o->cfg, lr, t, p->numel, p->data, p->grad, m);
            else
                sgd_f64(nt, &o->cfg, lr, t, p->numel, p->data, p->grad, m);
        } else {
            if (p->dtype == TG_F32)
                adam_f32(nt, &o->cfg, lr, t, p->numel, p->data, p->grad, m, v);
            else
                adam_f64(nt, &o->cfg, lr, t, p->numel, p->data, p->grad, m, v);
        }
    }
    return TG_OK;
}

double tg_grad_norm(tg_ctx *ctx, int64_t n, tg_tensor *const *params)
{
    if (!ctx)
        return 0;
    if (!params) {
        n = ctx->n_params;
        params = ctx->params;
    }
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
    double norm = tg_grad_norm(ctx, n, params);
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
