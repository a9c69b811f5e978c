#define _POSIX_C_SOURCE 200809L
/*
 * test_optim.c - optimizers, gradient clipping, the learning-rate schedule, and training
 * sanity.
 *
 * - PyTorch parity: every tests/fixtures/optim_<case>.safetensors (written by
 *   tests/fixtures/gen/gen_optim_fixtures.py with torch.optim, PyTorch 1.13) is replayed step by step with
 *   the stored gradients and per-step learning rates; after every step
 *   max |ours - ref| / (1 + max |ref|) <= 1e-12 (f64), 1e-5 (f32).
 * - Single steps computed by hand (SGD with momentum and weight decay, Adam, AdamW).
 * - A NaN / infinite gradient changes nothing (parameters, state, step count; bitwise) and
 *   names the parameter; a rejected first step does not consume SGD's "first step".
 * - tg_grad_norm / tg_clip_grad_norm (torch.nn.utils.clip_grad_norm_ semantics),
 *   tg_lr_warmup_cosine, bad hyperparameters, state naming, thread invariance of the update.
 * - A tiny transformer overfits one batch; dropout keeps ~(1 - p), scales by 1 / (1 - p), is
 *   the identity in eval mode and draws the same mask for any thread count.
 */
#include "testutil.h"
#include "tgrad_io.h"
#include "tgrad_train.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------------------------------------ */
/* helpers                                                                                    */
/* ------------------------------------------------------------------------------------------ */

/* Build a graph sum(p_i) over the parameters so every one gets a gradient buffer, which the
 * tests then fill directly. */
static tg_graph *grad_graph(tg_ctx *ctx, int n, tg_tensor *const *params)
{
    tg_tensor *outs[16];
    ck_assert_int_le(n, 16);
    for (int i = 0; i < n; i++)
        outs[i] = tg_sum_all(ctx, params[i]);
    tg_graph *g = tg_graph_new(ctx, outs, n);
    ck_assert_msg(g != NULL, "%s", tg_ctx_message(ctx));
    for (int i = 0; i < n; i++)
        ck_assert_ptr_nonnull(tg_tensor_grad(params[i]));
    return g;
}

/* Gradient element k of p := v (converted to p's dtype). No ck_assert inside: Check records
 * the location of every assertion (a write in fork mode), which is slow in element loops. */
static void grad_put(tg_tensor *p, void *g, int64_t k, double v)
{
    if (tg_tensor_dtype(p) == TG_F32)
        ((float *)g)[k] = (float)v;
    else
        ((double *)g)[k] = v;
}

static void *grad_buf(tg_tensor *p)
{
    void *g = tg_tensor_grad(p);
    ck_assert_msg(g != NULL, "'%s' has no gradient buffer", tg_tensor_name(p));
    return g;
}

static void grad_set(tg_tensor *p, int64_t k, double v) { grad_put(p, grad_buf(p), k, v); }

static void grad_set_all(tg_tensor *p, const double *v)
{
    void *g = grad_buf(p);
    for (int64_t k = 0; k < tg_tensor_numel(p); k++)
        grad_put(p, g, k, v[k]);
}

/* Gradient of p := data of src (same numel). */
static void grad_from(tg_tensor *p, const tg_tensor *src)
{
    ck_assert_int_eq(tg_tensor_numel(p), tg_tensor_numel(src));
    void *g = grad_buf(p);
    for (int64_t k = 0; k < tg_tensor_numel(p); k++)
        grad_put(p, g, k, tg_get(src, k));
}

/* Fill p's gradient with N(0, 1) values from the context RNG. */
static void grad_randn(tg_tensor *p)
{
    void *g = grad_buf(p);
    for (int64_t k = 0; k < tg_tensor_numel(p); k++)
        grad_put(p, g, k, tg_rng_normal(tg_tensor_ctx(p)));
}

static size_t nbytes(const tg_tensor *t)
{
    return (size_t)tg_tensor_numel(t) * tg_dtype_size(tg_tensor_dtype(t));
}

/* A malloc'd copy of the bytes of every parameter's data and gradient and every state tensor
 * of @p o, to compare bitwise. */
static unsigned char *snapshot(const tg_optim *o, size_t *len)
{
    size_t n = 0;
    for (int64_t i = 0; i < tg_optim_n_params(o); i++)
        n += 2 * nbytes(tg_optim_param(o, i));
    for (int64_t i = 0; i < tg_optim_n_state(o); i++)
        n += nbytes(tg_optim_state(o, i));
    unsigned char *b = malloc(n ? n : 1), *w = b;
    ck_assert_ptr_nonnull(b);
    for (int64_t i = 0; i < tg_optim_n_params(o); i++) {
        tg_tensor *p = tg_optim_param(o, i);
        memcpy(w, tg_tensor_data(p), nbytes(p));
        w += nbytes(p);
        memcpy(w, tg_tensor_grad(p), nbytes(p));
        w += nbytes(p);
    }
    for (int64_t i = 0; i < tg_optim_n_state(o); i++) {
        tg_tensor *s = tg_optim_state(o, i);
        memcpy(w, tg_tensor_data(s), nbytes(s));
        w += nbytes(s);
    }
    *len = n;
    return b;
}

/* max |ours - ref| / (1 + max |ref|); NaN counts as infinite. */
static double rel_err(const tg_tensor *ours, const tg_tensor *ref)
{
    ck_assert_int_eq(tg_tensor_numel(ours), tg_tensor_numel(ref));
    double md = 0, mr = 0;
    for (int64_t i = 0; i < tg_tensor_numel(ref); i++) {
        double d = fabs(tg_get(ours, i) - tg_get(ref, i));
        if (!(d <= md))
            md = isnan(d) ? INFINITY : d;
        if (fabs(tg_get(ref, i)) > mr)
            mr = fabs(tg_get(ref, i));
    }
    return md / (1 + mr);
}

static bool contains(const char *hay, const char *needle) { return strstr(hay, needle) != NULL; }

/* ------------------------------------------------------------------------------------------ */
/* (a) PyTorch parity: replay tests/fixtures/optim_<case>.safetensors                          */
/* ------------------------------------------------------------------------------------------ */

static const char *const fixture_cases[] = {
    "sgd_plain",    "sgd_momentum_wd", "sgd_dampening", "sgd_nesterov",
    "adam_default", "adam_wd",         "adamw_default", "adamw_custom",
};
#define N_FIXTURES ((int)(sizeof fixture_cases / sizeof fixture_cases[0]))

static double meta_num(const tg_safetensors *st, const char *key)
{
    const char *s = tg_safetensors_meta_get(st, key);
    ck_assert_msg(s != NULL, "metadata '%s' missing", key);
    char *end;
    double v = strtod(s, &end);
    ck_assert_msg(end != s && *end == '\0', "metadata '%s' = '%s' is not a number", key, s);
    return v;
}

static void replay_fixture(const char *name, tg_dtype dt)
{
    double tol = dt == TG_F64 ? 1e-12 : 1e-5;
    char path[1024];
    snprintf(path, sizeof path, "%s/optim_%s.safetensors", TG_FIXTURES, name);
    tg_ctx *ctx = tg_ctx_new();
    tg_safetensors *st = tg_safetensors_read(ctx, path);
    ck_assert_msg(st != NULL, "%s: %s", path, tg_ctx_message(ctx));

    const char *kind = tg_safetensors_meta_get(st, "kind");
    ck_assert_ptr_nonnull(kind);
    tg_optim_kind k = strcmp(kind, "sgd") == 0    ? TG_OPTIM_SGD
                      : strcmp(kind, "adam") == 0 ? TG_OPTIM_ADAM
                                                  : TG_OPTIM_ADAMW;
    ck_assert(k != TG_OPTIM_ADAMW || strcmp(kind, "adamw") == 0);
    tg_optim_config cfg = tg_optim_defaults(k);
    cfg.momentum = meta_num(st, "momentum");
    cfg.dampening = meta_num(st, "dampening");
    cfg.nesterov = meta_num(st, "nesterov") != 0;
    cfg.weight_decay = meta_num(st, "weight_decay");
    cfg.beta1 = meta_num(st, "beta1");
    cfg.beta2 = meta_num(st, "beta2");
    cfg.eps = meta_num(st, "eps");
    cfg.lr = 12345; /* never used: every step passes its own lr */
    int n = (int)meta_num(st, "n_params"), steps = (int)meta_num(st, "n_steps");
    ck_assert(n >= 1 && n <= 8 && steps >= 1 && steps <= 16);

    double lr[16];
    const char *s = tg_safetensors_meta_get(st, "lr");
    ck_assert_ptr_nonnull(s);
    for (int i = 0; i < steps; i++) {
        char *end;
        lr[i] = strtod(s, &end);
        ck_assert_msg(end != s && *end == (i + 1 < steps ? ',' : '\0'), "bad lr list");
        s = end + (*end == ',');
    }

    tg_tensor *params[8];
    char key[64];
    for (int i = 0; i < n; i++) {
        snprintf(key, sizeof key, "p0.%d", i);
        tg_tensor *f = tg_safetensors_find(st, key);
        ck_assert_msg(f != NULL, "%s: %s missing", name, key);
        snprintf(key, sizeof key, "w%d", i);
        params[i] = tg_param(ctx, dt, tg_tensor_rank(f), tg_tensor_shape(f), key);
        ck_assert_ptr_nonnull(params[i]);
        ck_assert_int_eq(tg_tensor_copy(params[i], f), TG_OK);
    }
    grad_graph(ctx, n, params);
    tg_optim *opt = tg_optim_new(ctx, &cfg, n, params);
    ck_assert_msg(opt != NULL, "%s", tg_ctx_message(ctx));

    for (int t = 1; t <= steps; t++) {
        for (int i = 0; i < n; i++) {
            snprintf(key, sizeof key, "g%d.%d", t, i);
            tg_tensor *g = tg_safetensors_find(st, key);
            ck_assert_msg(g != NULL, "%s: %s missing", name, key);
            grad_from(params[i], g);
        }
        ck_assert_int_eq(tg_optim_step(opt, lr[t - 1]), TG_OK);
        ck_assert_int_eq(tg_optim_steps(opt), t);
        for (int i = 0; i < n; i++) {
            snprintf(key, sizeof key, "p%d.%d", t, i);
            tg_tensor *ref = tg_safetensors_find(st, key);
            ck_assert_msg(ref != NULL, "%s: %s missing", name, key);
            double e = rel_err(params[i], ref);
            ck_assert_msg(e <= tol, "%s (%s): step %d param %d: rel err %.3g > %g", name,
                          tg_dtype_str(dt), t, i, e, tol);
        }
    }
    ck_assert_int_eq(tg_ctx_status(ctx), TG_OK);
    tg_ctx_free(ctx);
}

START_TEST(test_fixture_f64) { replay_fixture(fixture_cases[_i], TG_F64); }
END_TEST

START_TEST(test_fixture_f32) { replay_fixture(fixture_cases[_i], TG_F32); }
END_TEST

/* ------------------------------------------------------------------------------------------ */
/* (b) single steps computed by hand                                                           */
/* ------------------------------------------------------------------------------------------ */

/* SGD, lr 0.1, momentum 0.9, weight_decay 0.1, p = 2, grad 0.5 at both steps:
 *   step 1: d = 0.5 + 0.1 * 2 = 0.7;  b = d = 0.7 (first step: plain copy);
 *           p = 2 - 0.1 * 0.7 = 1.93
 *   step 2: d = 0.5 + 0.1 * 1.93 = 0.693;  b = 0.9 * 0.7 + 0.693 = 1.323;
 *           p = 1.93 - 0.1 * 1.323 = 1.7977          (PyTorch: 1.93, 1.7976999999999999)
 * Plain SGD with lr argument -1 uses the configured lr (default 1e-2):
 *   p = 2 - 0.01 * 0.5 = 1.995 */
START_TEST(test_sgd_by_hand)
{
    for (int d = 0; d < 2; d++) {
        tg_dtype dt = d ? TG_F32 : TG_F64;
        double tol = d ? 1e-6 : 1e-15;
        tg_ctx *ctx = tg_ctx_new();
        tg_tensor *w = tg_param(ctx, dt, 0, NULL, "w");
        tg_tensor *u = tg_param(ctx, dt, 0, NULL, "u");
        grad_graph(ctx, 2, (tg_tensor *[]){w, u});

        tg_optim_config c = tg_optim_defaults(TG_OPTIM_SGD);
        c.lr = 0.1;
        c.momentum = 0.9;
        c.weight_decay = 0.1;
        tg_optim *o = tg_optim_new(ctx, &c, 1, &w);
        ck_assert_ptr_nonnull(o);
        tg_set(w, 0, 2.0);
        grad_set(w, 0, 0.5);
        ck_assert_int_eq(tg_optim_step(o, -1), TG_OK);
        ck_assert_double_eq_tol(tg_get(w, 0), 1.93, tol);
        ck_assert_double_eq_tol(tg_get(tg_optim_state(o, 0), 0), 0.7, tol);
        ck_assert_int_eq(tg_optim_step(o, 0.1), TG_OK);
        ck_assert_double_eq_tol(tg_get(w, 0), 1.7977, tol);
        ck_assert_double_eq_tol(tg_get(tg_optim_state(o, 0), 0), 1.323, tol);
        ck_assert_int_eq(tg_optim_steps(o), 2);

        tg_optim_config plain = tg_optim_defaults(TG_OPTIM_SGD);
        ck_assert_double_eq(plain.lr, 1e-2);
        tg_optim *o2 = tg_optim_new(ctx, &plain, 1, &u);
        ck_assert_ptr_nonnull(o2);
        ck_assert_int_eq(tg_optim_n_state(o2), 0);
        tg_set(u, 0, 2.0);
        grad_set(u, 0, 0.5);
        ck_assert_int_eq(tg_optim_step(o2, -1), TG_OK);
        ck_assert_double_eq_tol(tg_get(u, 0), 1.995, tol);
        /* lr 0 is allowed and changes nothing */
        ck_assert_int_eq(tg_optim_step(o2, 0), TG_OK);
        ck_assert_double_eq_tol(tg_get(u, 0), 1.995, tol);
        tg_ctx_free(ctx);
    }
}
END_TEST

/* AdamW, lr 0.1, weight_decay 0.01, betas (0.9, 0.999), eps 1e-8, p = 1, grad 0.5, t = 1:
 *   p <- p (1 - lr wd) = 0.999
 *   m = 0.1 * 0.5 = 0.05;  v = 0.001 * 0.25 = 2.5e-4
 *   m / (1 - 0.9) = 0.5;  sqrt(v / (1 - 0.999)) = 0.5
 *   p <- 0.999 - 0.1 * 0.5 / (0.5 + 1e-8) = 0.999 - 0.1 / (1 + 2e-8) = 0.899000002
 *                                                                  (PyTorch: 0.899000002)
 * Adam (L2), lr 0.1, weight_decay 0.5, p = 1, grad 0.5, t = 1:
 *   g = 0.5 + 0.5 * 1 = 1;  m = 0.1, v = 0.001;  m_hat = 1, sqrt(v_hat) = 1
 *   p <- 1 - 0.1 * 1 / (1 + 1e-8) = 0.900000001                    (PyTorch: 0.900000001) */
START_TEST(test_adam_by_hand)
{
    for (int d = 0; d < 2; d++) {
        tg_dtype dt = d ? TG_F32 : TG_F64;
        double tol = d ? 1e-6 : 1e-15;
        tg_ctx *ctx = tg_ctx_new();
        tg_tensor *w = tg_param(ctx, dt, 0, NULL, "w");
        tg_tensor *u = tg_param(ctx, dt, 0, NULL, "u");
        grad_graph(ctx, 2, (tg_tensor *[]){w, u});

        tg_optim_config c = tg_optim_defaults(TG_OPTIM_ADAMW);
        ck_assert_double_eq(c.weight_decay, 1e-2);
        ck_assert_double_eq(c.lr, 1e-3);
        tg_optim *o = tg_optim_new(ctx, &c, 1, &w);
        ck_assert_ptr_nonnull(o);
        tg_set(w, 0, 1.0);
        grad_set(w, 0, 0.5);
        ck_assert_int_eq(tg_optim_step(o, 0.1), TG_OK);
        ck_assert_double_eq_tol(tg_get(w, 0), 0.999 - 0.1 / (1 + 2e-8), tol);
        ck_assert_double_eq_tol(tg_get(w, 0), 0.899000002, tol);
        ck_assert_double_eq_tol(tg_get(tg_optim_state(o, 0), 0), 0.05, tol);   /* m */
        ck_assert_double_eq_tol(tg_get(tg_optim_state(o, 1), 0), 2.5e-4, tol); /* v */

        tg_optim_config a = tg_optim_defaults(TG_OPTIM_ADAM);
        ck_assert_double_eq(a.weight_decay, 0);
        a.weight_decay = 0.5;
        tg_optim *o2 = tg_optim_new(ctx, &a, 1, &u);
        ck_assert_ptr_nonnull(o2);
        tg_set(u, 0, 1.0);
        grad_set(u, 0, 0.5);
        ck_assert_int_eq(tg_optim_step(o2, 0.1), TG_OK);
        ck_assert_double_eq_tol(tg_get(u, 0), 0.900000001, tol);
        ck_assert_double_eq_tol(tg_get(tg_optim_state(o2, 0), 0), 0.1, tol);
        ck_assert_double_eq_tol(tg_get(tg_optim_state(o2, 1), 0), 1e-3, tol);
        tg_ctx_free(ctx);
    }
}
END_TEST

/* ------------------------------------------------------------------------------------------ */
/* (c) non-finite gradients                                                                    */
/* ------------------------------------------------------------------------------------------ */

static tg_optim_config nonfinite_cfg(int kind)
{
    tg_optim_config c = tg_optim_defaults((tg_optim_kind)kind);
    if (kind == TG_OPTIM_SGD) {
        c.momentum = 0.9;
        c.weight_decay = 0.1;
    } else if (kind == TG_OPTIM_ADAM) {
        c.weight_decay = 0.1;
    }
    return c;
}

/* _i = kind (SGD with momentum, Adam, AdamW) x dtype */
START_TEST(test_nonfinite_grad)
{
    int kind = _i % 3;
    tg_dtype dt = _i / 3 ? TG_F32 : TG_F64;
    tg_ctx *ctx = tg_ctx_new();
    tg_ctx_seed(ctx, 7);
    tg_tensor *p[2] = {tg_param(ctx, dt, TG_DIMS(3, 4), "enc.weight"),
                       tg_param(ctx, dt, TG_DIMS(5), "enc.bias")};
    tg_fill_normal(p[0], 0, 1);
    tg_fill_normal(p[1], 0, 1);
    grad_graph(ctx, 2, p);
    tg_optim_config c = nonfinite_cfg(kind);
    tg_optim *o = tg_optim_new(ctx, &c, 2, p);
    ck_assert_ptr_nonnull(o);
    for (int s = 0; s < 2; s++) { /* make the state non-trivial */
        grad_randn(p[0]);
        grad_randn(p[1]);
        ck_assert_int_eq(tg_optim_step(o, 0.05), TG_OK);
    }
    const double bad[] = {NAN, INFINITY, -INFINITY};
    for (int b = 0; b < 3; b++) {
        for (int which = 0; which < 2; which++) {
            grad_randn(p[0]);
            grad_randn(p[1]);
            grad_set(p[which], which ? 4 : 5, bad[b]);
            size_t n0, n1;
            unsigned char *before = snapshot(o, &n0);
            int64_t t0 = tg_optim_steps(o);
            ck_assert_int_eq(tg_optim_step(o, 0.05), TG_ERR_NONFINITE);
            ck_assert_int_eq(tg_ctx_status(ctx), TG_ERR_NONFINITE);
            const char *msg = tg_ctx_message(ctx);
            ck_assert_msg(contains(msg, "tg_optim_step") &&
                              contains(msg, tg_tensor_name(p[which])),
                          "message '%s' does not name '%s'", msg, tg_tensor_name(p[which]));
            ck_assert_msg(which || !contains(msg, "enc.bias"), "wrong parameter: %s", msg);
            unsigned char *after = snapshot(o, &n1);
            ck_assert_uint_eq(n0, n1);
            ck_assert_msg(memcmp(before, after, n0) == 0,
                          "a rejected step modified parameters or state (bad %g, param %d)",
                          bad[b], which);
            ck_assert_int_eq(tg_optim_steps(o), t0);
            free(before);
            free(after);
            tg_ctx_clear_error(ctx);
        }
    }
    /* a finite gradient goes through again */
    grad_randn(p[0]);
    grad_randn(p[1]);
    ck_assert_int_eq(tg_optim_step(o, 0.05), TG_OK);
    ck_assert_int_eq(tg_optim_steps(o), 3);
    ck_assert_int_eq(tg_ctx_status(ctx), TG_OK);
    tg_ctx_free(ctx);
}
END_TEST

/* Finite gradients whose update is not finite (a huge gradient squared, a huge learning rate,
 * a NaN already in the state) are refused like a non-finite gradient: TG_ERR_NONFINITE naming
 * the parameter, nothing changed (parameters, state, step count). _i = kind x dtype. */
START_TEST(test_nonfinite_update)
{
    int kind = _i % 3;
    tg_dtype dt = _i / 3 ? TG_F32 : TG_F64;
    double huge = dt == TG_F32 ? 1e30 : 1e200; /* finite; its square (or lr times it) is not */
    for (int how = 0; how < 3; how++) {
        tg_ctx *ctx = tg_ctx_new();
        tg_ctx_seed(ctx, 3);
        tg_tensor *p[2] = {tg_param(ctx, dt, TG_DIMS(3, 4), "enc.weight"),
                           tg_param(ctx, dt, TG_DIMS(5), "enc.bias")};
        tg_fill_normal(p[0], 0, 1);
        tg_fill_normal(p[1], 0, 1);
        grad_graph(ctx, 2, p);
        tg_optim_config c = nonfinite_cfg(kind);
        tg_optim *o = tg_optim_new(ctx, &c, 2, p);
        ck_assert_ptr_nonnull(o);
        for (int st = 0; st < 2; st++) { /* non-trivial state */
            grad_randn(p[0]);
            grad_randn(p[1]);
            ck_assert_int_eq(tg_optim_step(o, 0.05), TG_OK);
        }
        grad_randn(p[0]);
        grad_randn(p[1]);
        double lr = 0.05;
        if (how == 0) {
            grad_set(p[1], 2, huge);
            lr = huge;
        } else if (how == 1) {
            grad_set(p[1], 2, -huge);
            lr = kind == TG_OPTIM_SGD ? huge : 0.05; /* Adam: v = (1 - b2) g^2 overflows */
        } else { /* a NaN in the state (say, restored from a damaged file) */
            tg_tensor *m = NULL;
            for (int64_t i = 0; i < tg_optim_n_state(o); i++)
                if (strstr(tg_tensor_name(tg_optim_state(o, i)), "enc.bias"))
                    m = tg_optim_state(o, i);
            ck_assert_ptr_nonnull(m);
            tg_set(m, 2, NAN);
        }
        size_t n0, n1;
        unsigned char *before = snapshot(o, &n0);
        ck_assert_int_eq(tg_optim_step(o, lr), TG_ERR_NONFINITE);
        const char *msg = tg_ctx_message(ctx);
        ck_assert_msg(contains(msg, "tg_optim_step: the update of 'enc.bias' is not finite at "
                                    "element 2") &&
                          contains(msg, "parameters left unchanged"),
                      "how %d: %s", how, msg);
        unsigned char *after = snapshot(o, &n1);
        ck_assert_msg(n0 == n1 && memcmp(before, after, n0) == 0,
                      "how %d: a refused step changed parameters or state", how);
        ck_assert_int_eq(tg_optim_steps(o), 2);
        free(before);
        free(after);
        /* a run-time error: building goes on without tg_ctx_clear_error */
        ck_assert_ptr_nonnull(tg_sum_all(ctx, p[0]));
        tg_ctx_free(ctx);
    }
}
END_TEST

/* A parameter listed twice would be stepped twice with two states: refused. */
START_TEST(test_duplicate_param)
{
    tg_ctx *ctx = tg_ctx_new();
    tg_tensor *a = tg_param(ctx, TG_F32, TG_DIMS(2), "a");
    tg_tensor *b = tg_param(ctx, TG_F32, TG_DIMS(2), "b");
    tg_optim_config c = tg_optim_defaults(TG_OPTIM_ADAMW);
    ck_assert_ptr_null(tg_optim_new(ctx, &c, 3, (tg_tensor *[]){a, b, a}));
    tu_assert_error(ctx, TG_ERR_ARG,
                    "tg_optim_new: parameter 'a' is listed twice (entries 0 and 2)");
    tg_ctx_clear_error(ctx);
    size_t bytes = tg_ctx_bytes(ctx);
    ck_assert_ptr_null(tg_optim_new(ctx, &c, 2, (tg_tensor *[]){b, b}));
    tu_assert_error(ctx, TG_ERR_ARG, "'b' is listed twice");
    ck_assert_uint_eq(tg_ctx_bytes(ctx), bytes); /* nothing kept */
    tg_ctx_clear_error(ctx);
    ck_assert_ptr_nonnull(tg_optim_new(ctx, &c, 2, (tg_tensor *[]){b, a}));
    tg_ctx_free(ctx);
}
END_TEST

/* A rejected first step must not count as SGD's first step (where the momentum buffer is a
 * plain copy of the gradient): NaN step + good step == good step alone, bitwise. */
START_TEST(test_nonfinite_first_step)
{
    for (int kind = 0; kind < 3; kind++) {
        tg_ctx *cx[2];
        tg_tensor *w[2];
        tg_optim *o[2];
        for (int r = 0; r < 2; r++) {
            cx[r] = tg_ctx_new();
            w[r] = tg_param(cx[r], TG_F64, TG_DIMS(4), "w");
            tg_fill(w[r], 1.5);
            grad_graph(cx[r], 1, &w[r]);
            tg_optim_config c = nonfinite_cfg(kind);
            o[r] = tg_optim_new(cx[r], &c, 1, &w[r]);
            ck_assert_ptr_nonnull(o[r]);
        }
        const double g[] = {0.25, -1, 2, 0.5};
        grad_set_all(w[0], g);
        grad_set(w[0], 2, NAN);
        ck_assert_int_eq(tg_optim_step(o[0], 0.1), TG_ERR_NONFINITE);
        ck_assert_int_eq(tg_optim_steps(o[0]), 0);
        for (int r = 0; r < 2; r++) {
            grad_set_all(w[r], g);
            ck_assert_int_eq(tg_optim_step(o[r], 0.1), TG_OK);
            ck_assert_int_eq(tg_optim_steps(o[r]), 1);
        }
        size_t n0, n1;
        unsigned char *a = snapshot(o[0], &n0), *b = snapshot(o[1], &n1);
        ck_assert_uint_eq(n0, n1);
        ck_assert_msg(memcmp(a, b, n0) == 0, "kind %d: rejected step left a trace", kind);
        free(a);
        free(b);
        tg_ctx_free(cx[0]);
        tg_ctx_free(cx[1]);
    }
}
END_TEST

/* ------------------------------------------------------------------------------------------ */
/* (d) gradient norm and clipping                                                              */
/* ------------------------------------------------------------------------------------------ */

/* Context with a (2) "a", q (1) "b" (both with gradient buffers) and r (3) "unused" (none);
 * gradients a = (3, 4), b = (12): global norm 13. */
typedef struct {
    tg_ctx *ctx;
    tg_tensor *a, *b, *r;
} clip_fix;

static clip_fix clip_setup(tg_dtype dt)
{
    clip_fix f;
    f.ctx = tg_ctx_new();
    f.a = tg_param(f.ctx, dt, TG_DIMS(2), "a");
    f.b = tg_param(f.ctx, dt, TG_DIMS(1), "b");
    f.r = tg_param(f.ctx, dt, TG_DIMS(3), "unused");
    grad_graph(f.ctx, 2, (tg_tensor *[]){f.a, f.b});
    ck_assert_ptr_null(tg_tensor_grad(f.r));
    grad_set_all(f.a, (const double[]){3, 4});
    grad_set(f.b, 0, 12);
    return f;
}

/* Gradients == (3, 4), (12) times s, within tol (tol 0: exactly). */
static void assert_grads(const clip_fix *f, double s, double tol)
{
    const double want[3] = {3 * s, 4 * s, 12 * s};
    const double got[3] = {tg_grad_get(f->a, 0), tg_grad_get(f->a, 1), tg_grad_get(f->b, 0)};
    for (int k = 0; k < 3; k++)
        ck_assert_msg(fabs(got[k] - want[k]) <= tol, "grad %d = %.17g, want %.17g (tol %g)", k,
                      got[k], want[k], tol);
}

/* Parameters of another context are refused like builders refuse them, and nothing of theirs
 * changes. */
START_TEST(test_other_context)
{
    clip_fix f = clip_setup(TG_F64);
    tg_ctx *other = tg_ctx_new();
    tg_tensor *mine = tg_param(other, TG_F64, TG_DIMS(2), "mine");
    double norm = -1;
    tg_tensor *fa[2] = {f.a, f.b};
    ck_assert_int_eq(tg_clip_grad_norm(other, 2, fa, 1, &norm), TG_ERR_ARG);
    tu_assert_error(other, TG_ERR_ARG,
                    "tg_clip_grad_norm: entry 0 ('a') belongs to another context");
    assert_grads(&f, 1, 0); /* not rescaled */
    ck_assert(isnan(tg_grad_norm(other, 2, fa)));
    tu_assert_error(other, TG_ERR_ARG, "tg_grad_norm: entry 0 ('a') belongs to another context");
    ck_assert_double_eq(tg_grad_norm(f.ctx, 2, fa), 13);
    /* a successful call leaves no message behind (a run-time error does not stay) */
    ck_assert_double_eq(tg_grad_norm(other, 1, NULL), 0);
    ck_assert_int_eq(tg_ctx_status(other), TG_OK);
    ck_assert_str_eq(tg_ctx_message(other), "");
    /* a run-time error: building in `other` goes on */
    ck_assert_ptr_nonnull(tg_sum_all(other, mine));
    tg_optim_config c = tg_optim_defaults(TG_OPTIM_SGD);
    ck_assert_ptr_null(tg_optim_new(other, &c, 2, fa));
    tu_assert_error(other, TG_ERR_ARG,
                    "tg_optim_new: entry 0 is not a parameter of this context (it belongs to another "
                    "context)");
    tg_ctx_free(other);
    tg_ctx_free(f.ctx);
}
END_TEST

START_TEST(test_clip_grad_norm)
{
    for (int d = 0; d < 2; d++) {
        tg_dtype dt = d ? TG_F32 : TG_F64;
        double tol = d ? 1e-5 : 1e-14;
        clip_fix f = clip_setup(dt);
        /* norms: NULL = every parameter of the context; "unused" counts as zero */
        ck_assert_double_eq(tg_grad_norm(f.ctx, 0, NULL), 13);
        ck_assert_double_eq(tg_grad_norm(f.ctx, 1, &f.a), 5);
        ck_assert_double_eq(tg_grad_norm(f.ctx, 1, &f.r), 0);
        ck_assert_double_eq(tg_grad_norm(f.ctx, 3, (tg_tensor *[]){f.r, f.b, f.a}), 13);

        /* norm < max_norm: untouched (bitwise) */
        double norm = -1;
        double max_norms[] = {26, 13.5, 13.0 + 2e-6};
        for (int k = 0; k < 3; k++) {
            ck_assert_int_eq(tg_clip_grad_norm(f.ctx, 0, NULL, max_norms[k], &norm), TG_OK);
            ck_assert_double_eq(norm, 13);
            assert_grads(&f, 1, 0);
        }
        /* norm > max_norm: every gradient scaled by max_norm / (norm + 1e-6)
         * (PyTorch: a = 1.4999998846153937, 1.9999998461538582, b = 5.999999538461575) */
        ck_assert_int_eq(tg_clip_grad_norm(f.ctx, 0, NULL, 6.5, &norm), TG_OK);
        ck_assert_double_eq(norm, 13);
        assert_grads(&f, 6.5 / (13 + 1e-6), tol);
        if (dt == TG_F64) {
            ck_assert_double_eq_tol(tg_grad_get(f.a, 0), 1.4999998846153937, 1e-15);
            ck_assert_double_eq_tol(tg_grad_get(f.b, 0), 5.999999538461575, 1e-14);
        }
        ck_assert_double_eq_tol(tg_grad_norm(f.ctx, 0, NULL), 6.5, 1e-5);
        /* only the listed parameters are clipped, by their own norm (5) */
        grad_set_all(f.a, (const double[]){3, 4});
        grad_set(f.b, 0, 12);
        ck_assert_int_eq(tg_clip_grad_norm(f.ctx, 1, &f.a, 1, NULL), TG_OK);
        ck_assert_double_eq_tol(tg_grad_get(f.a, 0), 3 / (5 + 1e-6), tol);
        ck_assert_double_eq_tol(tg_grad_get(f.a, 1), 4 / (5 + 1e-6), tol);
        ck_assert_double_eq(tg_grad_get(f.b, 0), 12);
        /* norm == max_norm: PyTorch multiplies by min(1, max_norm / (norm + 1e-6)), so it
         * still scales, by 13 / (13 + 1e-6) (PyTorch: a[0] = 2.9999997692307874) */
        grad_set_all(f.a, (const double[]){3, 4});
        ck_assert_int_eq(tg_clip_grad_norm(f.ctx, 0, NULL, 13, &norm), TG_OK);
        assert_grads(&f, 13 / (13 + 1e-6), tol);
        if (dt == TG_F64)
            ck_assert_double_eq_tol(tg_grad_get(f.a, 0), 2.9999997692307874, 1e-15);
        ck_assert_int_eq(tg_ctx_status(f.ctx), TG_OK);
        tg_ctx_free(f.ctx);
    }
}
END_TEST

START_TEST(test_clip_grad_norm_errors)
{
    clip_fix f = clip_setup(TG_F64);
    double norm = 0;
    /* max_norm <= 0 or NaN */
    const double bad_max[] = {0, -1, NAN};
    for (int k = 0; k < 3; k++) {
        ck_assert_int_eq(tg_clip_grad_norm(f.ctx, 0, NULL, bad_max[k], &norm), TG_ERR_ARG);
        tu_assert_error(f.ctx, TG_ERR_ARG, "max_norm");
        tg_ctx_clear_error(f.ctx);
        assert_grads(&f, 1, 0);
    }
    ck_assert_int_eq(tg_clip_grad_norm(NULL, 0, NULL, 1, &norm), TG_ERR_ARG);
    /* non-finite gradient -> non-finite norm: nothing changes */
    const double bad[] = {NAN, INFINITY, -INFINITY};
    for (int k = 0; k < 3; k++) {
        grad_set(f.b, 0, bad[k]);
        ck_assert_int_eq(tg_clip_grad_norm(f.ctx, 0, NULL, 1, &norm), TG_ERR_NONFINITE);
        tu_assert_error(f.ctx, TG_ERR_NONFINITE, "tg_clip_grad_norm");
        tg_ctx_clear_error(f.ctx);
        ck_assert(!isfinite(norm));
        ck_assert(isnan(bad[k]) ? isnan(norm) : norm == INFINITY);
        ck_assert_double_eq(tg_grad_get(f.a, 0), 3);
        ck_assert_double_eq(tg_grad_get(f.a, 1), 4);
        ck_assert(isnan(bad[k]) ? isnan(tg_grad_get(f.b, 0)) : tg_grad_get(f.b, 0) == bad[k]);
    }
    /* finite gradients whose squares overflow double: the norm is +inf (as in PyTorch) and
     * the gradients are left alone (PyTorch would zero them) */
    grad_set_all(f.a, (const double[]){1e200, 1e200});
    grad_set(f.b, 0, 0);
    ck_assert_int_eq(tg_clip_grad_norm(f.ctx, 0, NULL, 1, &norm), TG_ERR_NONFINITE);
    ck_assert_double_eq(tg_grad_get(f.a, 0), 1e200);
    tg_ctx_free(f.ctx);

    /* f32 gradients of 1e30: the norm is summed in double, so it is finite and clipping
     * works (PyTorch's f32 norm overflows here) */
    clip_fix g = clip_setup(TG_F32);
    grad_set_all(g.a, (const double[]){3e30, 4e30});
    grad_set(g.b, 0, 0);
    ck_assert_int_eq(tg_clip_grad_norm(g.ctx, 0, NULL, 1, &norm), TG_OK);
    ck_assert_double_eq_tol(norm / 5e30, 1, 1e-6);
    ck_assert_double_eq_tol(tg_grad_get(g.a, 0), 0.6, 1e-6);
    ck_assert_double_eq_tol(tg_grad_get(g.a, 1), 0.8, 1e-6);
    tg_ctx_free(g.ctx);
}
END_TEST

/* ------------------------------------------------------------------------------------------ */
/* (e) warmup + cosine schedule                                                                */
/* ------------------------------------------------------------------------------------------ */

START_TEST(test_lr_warmup_cosine)
{
    const double base = 1e-3, mn = 1e-5;
    const int64_t W = 10, N = 100;
    /* warmup: base (step + 1) / W */
    ck_assert_double_eq_tol(tg_lr_warmup_cosine(0, N, W, base, mn), base / W, 1e-18);
    for (int64_t s = 0; s < W; s++)
        ck_assert_double_eq_tol(tg_lr_warmup_cosine(s, N, W, base, mn),
                                base * (double)(s + 1) / W, 1e-18);
    ck_assert_double_eq_tol(tg_lr_warmup_cosine(W - 1, N, W, base, mn), base, 1e-18);
    /* end of warmup: the cosine starts at base */
    ck_assert_double_eq_tol(tg_lr_warmup_cosine(W, N, W, base, mn), base, 1e-18);
    /* midpoint of the decay: (base + min) / 2; the end: min_lr, and it stays there */
    ck_assert_double_eq_tol(tg_lr_warmup_cosine(W + (N - W) / 2, N, W, base, mn),
                            (base + mn) / 2, 1e-15);
    ck_assert_double_eq_tol(tg_lr_warmup_cosine(N, N, W, base, mn), mn, 1e-18);
    ck_assert_double_eq_tol(tg_lr_warmup_cosine(N + 50, N, W, base, mn), mn, 1e-18);
    /* strictly decreasing after warmup, never below min_lr; increasing during warmup */
    for (int64_t s = 1; s < W; s++)
        ck_assert(tg_lr_warmup_cosine(s, N, W, base, mn) >
                  tg_lr_warmup_cosine(s - 1, N, W, base, mn));
    for (int64_t s = W + 1; s <= N; s++) {
        double a = tg_lr_warmup_cosine(s - 1, N, W, base, mn);
        double b = tg_lr_warmup_cosine(s, N, W, base, mn);
        ck_assert_msg(b < a, "not decreasing at step %lld: %g >= %g", (long long)s, b, a);
        ck_assert(b >= mn - 1e-18 && b <= base);
    }
    /* cosine formula at an arbitrary step */
    double pr = (37.0 - W) / (N - W);
    ck_assert_double_eq_tol(tg_lr_warmup_cosine(37, N, W, base, mn),
                            mn + 0.5 * (base - mn) * (1 + cos(3.14159265358979323846 * pr)), 1e-18);
    /* no warmup: starts at base, ends at min_lr */
    ck_assert_double_eq_tol(tg_lr_warmup_cosine(0, N, 0, base, mn), base, 1e-18);
    ck_assert_double_eq_tol(tg_lr_warmup_cosine(N, N, 0, base, mn), mn, 1e-18);
    ck_assert_double_eq_tol(tg_lr_warmup_cosine(N / 2, N, 0, base, mn), (base + mn) / 2, 1e-15);
    for (int64_t s = 1; s <= N; s++)
        ck_assert(tg_lr_warmup_cosine(s, N, 0, base, mn) <
                  tg_lr_warmup_cosine(s - 1, N, 0, base, mn));
    /* min_lr 0 ends at exactly 0 (well, cos(pi) rounding) */
    ck_assert_double_eq_tol(tg_lr_warmup_cosine(N, N, W, base, 0), 0, 1e-18);
    /* warmup covering the whole run: warmup values, then base */
    ck_assert_double_eq_tol(tg_lr_warmup_cosine(4, 10, 10, base, mn), base * 0.5, 1e-18);
    ck_assert_double_eq_tol(tg_lr_warmup_cosine(10, 10, 10, base, mn), base, 1e-18);
    /* every value finite */
    for (int64_t s = 0; s < 2 * N; s++)
        ck_assert(isfinite(tg_lr_warmup_cosine(s, N, W, base, mn)));
}
END_TEST

/* The Transformer's schedule against tests/fixtures/sched_noam_<case>.safetensors
 * (tests/fixtures/gen/gen_train_fixtures.py): `lr` is the formula in Python floats, `lr_torch` the lr
 * torch.optim.lr_scheduler.LambdaLR gives before each optimizer.step(); both within 1e-15
 * relative of tg_lr_noam(step) for the 0-based update index step. */
static const char *const noam_cases[] = {"paper", "small", "warmup1"};

START_TEST(test_lr_noam_fixture)
{
    char path[1024];
    snprintf(path, sizeof path, "%s/sched_noam_%s.safetensors", TG_FIXTURES, noam_cases[_i]);
    tg_ctx *ctx = tg_ctx_new();
    tg_safetensors *st = tg_safetensors_read(ctx, path);
    ck_assert_msg(st != NULL, "%s: %s", path, tg_ctx_message(ctx));
    int64_t d = (int64_t)meta_num(st, "d_model"), w = (int64_t)meta_num(st, "warmup");
    double f = meta_num(st, "factor");
    tg_tensor *step = tg_safetensors_find(st, "step"), *lr = tg_safetensors_find(st, "lr");
    tg_tensor *lt = tg_safetensors_find(st, "lr_torch");
    ck_assert(step && lr && lt && tg_tensor_numel(step) > 64);
    ck_assert_int_eq(tg_tensor_numel(lr), tg_tensor_numel(step));
    ck_assert_int_eq(tg_tensor_numel(lt), tg_tensor_numel(step));
    for (int64_t i = 0; i < tg_tensor_numel(step); i++) {
        int64_t s = (int64_t)tg_get(step, i);
        double got = tg_lr_noam(s, d, w, f);
        double e1 = fabs(got - tg_get(lr, i)) / tg_get(lr, i);
        double e2 = fabs(got - tg_get(lt, i)) / tg_get(lt, i);
        ck_assert_msg(e1 <= 1e-15 && e2 <= 1e-15, "%s step %lld: %.17g, formula %.17g, "
                      "LambdaLR %.17g", noam_cases[_i], (long long)s, got, tg_get(lr, i),
                      tg_get(lt, i));
    }
    tg_ctx_free(ctx);
}
END_TEST

/* The Transformer's schedule by its definition: a linear rise to the peak
 * factor (d_model warmup)^-0.5 at update index warmup - 1 (n = warmup), then n^-0.5 decay;
 * the first update (step 0) gets the value at n = 1; negative steps count as 0; warmup <= 0
 * is no warmup; invalid d_model or factor give NaN. */
START_TEST(test_lr_noam)
{
    const int64_t D = 512, W = 4000;
    double first = pow(512.0, -0.5) * pow(4000.0, -1.5);
    ck_assert_double_eq_tol(tg_lr_noam(0, D, W, 1.0), first, 1e-15 * first);
    ck_assert(tg_lr_noam(-7, D, W, 1.0) == tg_lr_noam(0, D, W, 1.0));
    ck_assert(tg_lr_noam(INT64_MIN, D, W, 1.0) == tg_lr_noam(0, D, W, 1.0));
    double peak = 1.0 / sqrt(512.0 * 4000.0);
    ck_assert_double_eq_tol(tg_lr_noam(W - 1, D, W, 1.0), peak, 1e-15 * peak);
    for (int64_t s = 1; s < 3 * W; s++) {
        double a = tg_lr_noam(s - 1, D, W, 1.0), b = tg_lr_noam(s, D, W, 1.0);
        if (s < W) /* linear: lr(s) = (s + 1) lr(0) */
            ck_assert_double_eq_tol(b, (double)(s + 1) * first, 1e-13 * b);
        ck_assert_msg(s < W ? b > a : b < a, "not %s at step %lld",
                      s < W ? "increasing" : "decreasing", (long long)s);
    }
    /* after the peak: (n / warmup)^-0.5 of it; the factor scales everything */
    ck_assert_double_eq_tol(tg_lr_noam(4 * W - 1, D, W, 1.0), peak / 2, 1e-15 * peak);
    ck_assert_double_eq_tol(tg_lr_noam(99, D, W, 2.5), 2.5 * tg_lr_noam(99, D, W, 1.0),
                            1e-15 * tg_lr_noam(99, D, W, 2.5));
    ck_assert(tg_lr_noam(99, D, W, 0.0) == 0.0);
    /* no warmup: factor (d_model n)^-0.5 from the first update */
    ck_assert_double_eq_tol(tg_lr_noam(0, 64, 0, 1.0), 0.125, 1e-16);
    ck_assert_double_eq_tol(tg_lr_noam(3, 64, -5, 1.0), 0.0625, 1e-16);
    /* warmup 1: no rise at all */
    ck_assert_double_eq_tol(tg_lr_noam(0, 64, 1, 1.0), 0.125, 1e-16);
    /* extremes stay finite and positive */
    ck_assert(isfinite(tg_lr_noam(INT64_MAX, 1, INT64_MAX, 1.0)) &&
              tg_lr_noam(INT64_MAX, 1, INT64_MAX, 1.0) > 0);
    ck_assert(isfinite(tg_lr_noam(0, INT64_MAX, INT64_MAX, 1.0)) &&
              tg_lr_noam(0, INT64_MAX, INT64_MAX, 1.0) >= 0);
    /* invalid: NaN (tg_optim_step refuses it; a negative lr would mean "the configured") */
    ck_assert(isnan(tg_lr_noam(0, 0, W, 1.0)));
    ck_assert(isnan(tg_lr_noam(0, -512, W, 1.0)));
    ck_assert(isnan(tg_lr_noam(0, D, W, -1.0)));
    ck_assert(isnan(tg_lr_noam(0, D, W, NAN)));
    ck_assert(isnan(tg_lr_noam(0, D, W, INFINITY)));
}
END_TEST

/* ------------------------------------------------------------------------------------------ */
/* (f) bad configurations and arguments                                                        */
/* ------------------------------------------------------------------------------------------ */


/* Hostile int64 values in the schedule (a checkpoint's train.warmup = -9223372036854775807,
 * steps near INT64_MAX) give a finite rate without signed overflow. */
START_TEST(test_lr_schedule_extremes)
{
    const int64_t v[] = {INT64_MIN, -9223372036854775807LL, -1, 0, 1, 100,
                         INT64_MAX - 1, INT64_MAX};
    int n = (int)(sizeof v / sizeof v[0]);
    for (int a = 0; a < n; a++)
        for (int b = 0; b < n; b++)
            for (int c = 0; c < n; c++) {
                double lr = tg_lr_warmup_cosine(v[a], v[b], v[c], 1e-3, 1e-5);
                ck_assert_msg(isfinite(lr) && lr >= 0 && lr <= 1e-3, "step %lld total %lld "
                              "warmup %lld: lr %g", (long long)v[a], (long long)v[b],
                              (long long)v[c], lr);
            }
    /* negative warmup means none; negative step counts as step 0 */
    ck_assert(tg_lr_warmup_cosine(0, 100, -9223372036854775807LL, 1.0, 0.0) == 1.0);
    ck_assert(tg_lr_warmup_cosine(-5, 100, 10, 1.0, 0.0) == 0.1);
    ck_assert(tg_lr_warmup_cosine(INT64_MAX, INT64_MAX, 0, 1.0, 0.5) == 0.5);
}
END_TEST

/* The step counter cannot wrap; an optimizer over an absurd count is refused; and a failed
 * step (non-finite gradient) is a run-time error that does not block later builds. */
START_TEST(test_step_limits_and_runtime_error)
{
    tg_ctx *ctx = tg_ctx_new();
    tg_tensor *w = tg_param(ctx, TG_F64, TG_DIMS(2), "w");
    tg_optim_config c = tg_optim_defaults(TG_OPTIM_ADAM);
    ck_assert_ptr_null(tg_optim_new(ctx, &c, INT64_MAX, &w));
    tu_assert_error(ctx, TG_ERR_ARG, "parameter count 9223372036854775807 too large");
    tg_ctx_clear_error(ctx);
    tg_optim *o = tg_optim_new(ctx, &c, 1, &w);
    ck_assert_ptr_nonnull(o);
    tg_tensor *y = tg_sum_all(ctx, tg_mul(ctx, w, w));
    tg_graph *g = tg_graph_new(ctx, &y, 1);
    ck_assert_int_eq(tg_graph_forward(g), TG_OK);
    ck_assert_int_eq(tg_graph_backward(g, y, NULL), TG_OK);
    tg_optim_set_steps(o, INT64_MAX);
    ck_assert_int_eq(tg_optim_step(o, -1), TG_ERR_STATE);
    tu_assert_error(ctx, TG_ERR_STATE, "step count 9223372036854775807");
    ck_assert_int_eq(tg_optim_steps(o), INT64_MAX);
    tg_optim_set_steps(o, 0);
    ((double *)tg_tensor_grad(w))[1] = NAN;
    ck_assert_int_eq(tg_optim_step(o, -1), TG_ERR_NONFINITE);
    tu_assert_error(ctx, TG_ERR_NONFINITE, "gradient of 'w' is not finite");
    /* no tg_ctx_clear_error: building goes on */
    tg_tensor *z = tg_sum_all(ctx, w);
    ck_assert_ptr_nonnull(tg_graph_new(ctx, &z, 1));
    ck_assert_ptr_nonnull(tg_optim_new(ctx, &c, 1, &w));
    ck_assert_int_eq(tg_ctx_status(ctx), TG_OK);
    /* a non-finite clip is a run-time error too */
    ck_assert_int_eq(tg_clip_grad_norm(ctx, 1, &w, 1.0, NULL), TG_ERR_NONFINITE);
    ck_assert_ptr_nonnull(tg_graph_new(ctx, &z, 1));
    tg_ctx_free(ctx);
}
END_TEST

START_TEST(test_bad_config)
{
    tg_ctx *ctx = tg_ctx_new();
    tg_tensor *w = tg_param(ctx, TG_F64, TG_DIMS(2), "w");
    struct {
        tg_optim_kind kind;
        const char *what, *needle;
        double lr, momentum, dampening, wd, b1, b2, eps;
        bool nesterov;
    } cases[] = {
        /* kind        what                 needle       lr   mom  damp wd   b1   b2     eps */
        {TG_OPTIM_SGD, "negative lr", "lr -1", -1, 0, 0, 0, 0.9, 0.999, 1e-8, false},
        {TG_OPTIM_SGD, "NaN lr", "lr nan", NAN, 0, 0, 0, 0.9, 0.999, 1e-8, false},
        {TG_OPTIM_ADAM, "beta1 = 1", "betas (1, 0.999)", 1e-3, 0, 0, 0, 1, 0.999, 1e-8, false},
        {TG_OPTIM_ADAMW, "beta2 = 1", "betas (0.9, 1)", 1e-3, 0, 0, 0, 0.9, 1, 1e-8, false},
        {TG_OPTIM_ADAM, "negative beta1", "betas (-0.1", 1e-3, 0, 0, 0, -0.1, 0.999, 1e-8,
         false},
        {TG_OPTIM_ADAM, "eps 0", "eps 0", 1e-3, 0, 0, 0, 0.9, 0.999, 0, false},
        {TG_OPTIM_ADAMW, "negative eps", "eps -1", 1e-3, 0, 0, 0, 0.9, 0.999, -1, false},
        {TG_OPTIM_SGD, "nesterov, no momentum", "nesterov needs momentum > 0", 0.1, 0, 0, 0, 0.9, 0.999, 1e-8,
         true},
        {TG_OPTIM_SGD, "nesterov with dampening", "dampening 0.5", 0.1, 0.9, 0.5, 0, 0.9, 0.999,
         1e-8, true},
        {TG_OPTIM_SGD, "negative momentum", "momentum -0.5", 0.1, -0.5, 0, 0, 0.9, 0.999, 1e-8,
         false},
        {TG_OPTIM_ADAMW, "negative weight decay", "weight_decay -0.1", 1e-3, 0, 0, -0.1, 0.9,
         0.999, 1e-8, false},
        {(tg_optim_kind)7, "unknown kind", "kind 7", 1e-3, 0, 0, 0, 0.9, 0.999, 1e-8, false},
    };
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        tg_optim_config c = tg_optim_defaults(TG_OPTIM_SGD);
        c.kind = cases[k].kind;
        c.lr = cases[k].lr;
        c.momentum = cases[k].momentum;
        c.dampening = cases[k].dampening;
        c.weight_decay = cases[k].wd;
        c.beta1 = cases[k].b1;
        c.beta2 = cases[k].b2;
        c.eps = cases[k].eps;
        c.nesterov = cases[k].nesterov;
        tg_ctx_clear_error(ctx);
        ck_assert_msg(tg_optim_new(ctx, &c, 1, &w) == NULL, "%s accepted", cases[k].what);
        ck_assert_int_eq(tg_ctx_status(ctx), TG_ERR_ARG);
        ck_assert_msg(contains(tg_ctx_message(ctx), "tg_optim_new") &&
                          contains(tg_ctx_message(ctx), cases[k].needle),
                      "%s: message '%s' lacks '%s'", cases[k].what, tg_ctx_message(ctx),
                      cases[k].needle);
    }
    tg_ctx_clear_error(ctx);

    /* boundary values that are valid: lr 0, beta 0, nesterov with momentum */
    tg_optim_config ok = tg_optim_defaults(TG_OPTIM_ADAM);
    ok.lr = 0;
    ok.beta1 = 0;
    ok.beta2 = 0;
    ck_assert_ptr_nonnull(tg_optim_new(ctx, &ok, 1, &w));
    ok = tg_optim_defaults(TG_OPTIM_SGD);
    ok.momentum = 0.9;
    ok.nesterov = true;
    ck_assert_ptr_nonnull(tg_optim_new(ctx, &ok, 1, &w));
    ck_assert_int_eq(tg_ctx_status(ctx), TG_OK);

    /* entries that are not parameters of this context */
    tg_optim_config c = tg_optim_defaults(TG_OPTIM_ADAMW);
    tg_tensor *x = tg_input(ctx, TG_F64, TG_DIMS(2), "x");
    ck_assert_ptr_null(tg_optim_new(ctx, &c, 2, (tg_tensor *[]){w, x}));
    tu_assert_error(ctx, TG_ERR_ARG, "entry 1 is not a parameter");
    tg_ctx_clear_error(ctx);
    tg_ctx *other = tg_ctx_new();
    tg_tensor *wo = tg_param(other, TG_F64, TG_DIMS(2), "w");
    ck_assert_ptr_null(tg_optim_new(ctx, &c, 1, &wo));
    tu_assert_error(ctx, TG_ERR_ARG, "entry 0 is not a parameter");
    tg_ctx_clear_error(ctx);
    ck_assert_ptr_null(tg_optim_new(ctx, &c, 1, (tg_tensor *[]){NULL}));
    tu_assert_error(ctx, TG_ERR_ARG, "entry 0");
    tg_ctx_clear_error(ctx);
    ck_assert_ptr_null(tg_optim_new(ctx, &c, -1, &w));
    tu_assert_error(ctx, TG_ERR_ARG, "negative parameter count");
    tg_ctx_clear_error(ctx);
    ck_assert_ptr_null(tg_optim_new(NULL, &c, 1, &w));
    ck_assert_ptr_null(tg_optim_new(ctx, NULL, 1, &w));

    /* step: non-finite lr is an error and changes nothing; NULL optimizer */
    tg_optim *o = tg_optim_new(ctx, &c, 1, &w);
    ck_assert_ptr_nonnull(o);
    grad_graph(ctx, 1, &w);
    const double bad_lr[] = {NAN, INFINITY};
    for (int k = 0; k < 2; k++) {
        ck_assert_int_eq(tg_optim_step(o, bad_lr[k]), TG_ERR_ARG);
        tu_assert_error(ctx, TG_ERR_ARG, "tg_optim_step");
        tg_ctx_clear_error(ctx);
        ck_assert_int_eq(tg_optim_steps(o), 0);
    }
    ck_assert_int_eq(tg_optim_step(NULL, 0.1), TG_ERR_ARG);
    ck_assert_int_eq(tg_optim_steps(NULL), 0);
    ck_assert_int_eq(tg_optim_n_state(NULL), 0);
    ck_assert_ptr_null(tg_optim_state(NULL, 0));
    ck_assert_int_eq(tg_optim_n_params(NULL), 0);
    ck_assert_ptr_null(tg_optim_param(NULL, 0));
    tg_optim_set_steps(NULL, 3); /* no-op */
    /* set_steps: negative ignored */
    tg_optim_set_steps(o, 5);
    ck_assert_int_eq(tg_optim_steps(o), 5);
    tg_optim_set_steps(o, -1);
    ck_assert_int_eq(tg_optim_steps(o), 5);
    tg_ctx_free(other);
    tg_ctx_free(ctx);
}
END_TEST

/* ------------------------------------------------------------------------------------------ */
/* (g) state naming and parameter lists                                                        */
/* ------------------------------------------------------------------------------------------ */

static void assert_state(const tg_optim *o, int64_t i, const char *name, const tg_tensor *like)
{
    tg_tensor *s = tg_optim_state(o, i);
    ck_assert_msg(s != NULL, "state %lld missing", (long long)i);
    ck_assert_str_eq(tg_tensor_name(s), name);
    ck_assert_int_eq(tg_tensor_dtype(s), tg_tensor_dtype(like));
    ck_assert_int_eq(tg_tensor_rank(s), tg_tensor_rank(like));
    for (int d = 0; d < tg_tensor_rank(s); d++)
        ck_assert_int_eq(tg_tensor_shape(s)[d], tg_tensor_shape(like)[d]);
    ck_assert_int_ne(tg_tensor_kind(s), TG_KIND_PARAM);
    for (int64_t k = 0; k < tg_tensor_numel(s); k++)
        ck_assert_double_eq(tg_get(s, k), 0);
}

START_TEST(test_state_naming)
{
    tg_ctx *ctx = tg_ctx_new();
    tg_tensor *a = tg_param(ctx, TG_F64, TG_DIMS(2, 3), "layers.0.linear1.weight");
    tg_tensor *x = tg_input(ctx, TG_F64, TG_DIMS(3), "x"); /* not a parameter */
    tg_tensor *b = tg_param(ctx, TG_F32, TG_DIMS(4), "norm.bias");
    ck_assert_ptr_nonnull(x);
    ck_assert_int_eq(tg_ctx_n_params(ctx), 2);

    tg_optim_config sgd = tg_optim_defaults(TG_OPTIM_SGD);
    tg_optim *o = tg_optim_new(ctx, &sgd, 0, NULL);
    ck_assert_ptr_nonnull(o);
    ck_assert_int_eq(tg_optim_n_params(o), 2);
    ck_assert_ptr_eq(tg_optim_param(o, 0), a);
    ck_assert_ptr_eq(tg_optim_param(o, 1), b);
    ck_assert_ptr_null(tg_optim_param(o, 2));
    ck_assert_ptr_null(tg_optim_param(o, -1));
    ck_assert_int_eq(tg_optim_n_state(o), 0); /* no momentum: no buffers */
    ck_assert_ptr_null(tg_optim_state(o, 0));

    sgd.momentum = 0.9;
    o = tg_optim_new(ctx, &sgd, 0, NULL);
    ck_assert_ptr_nonnull(o);
    ck_assert_int_eq(tg_optim_n_state(o), 2);
    assert_state(o, 0, "sgd.momentum.layers.0.linear1.weight", a);
    assert_state(o, 1, "sgd.momentum.norm.bias", b);
    ck_assert_ptr_null(tg_optim_state(o, 2));
    ck_assert_ptr_null(tg_optim_state(o, -1));

    for (int kind = TG_OPTIM_ADAM; kind <= TG_OPTIM_ADAMW; kind++) {
        tg_optim_config c = tg_optim_defaults((tg_optim_kind)kind);
        o = tg_optim_new(ctx, &c, 0, NULL);
        ck_assert_ptr_nonnull(o);
        ck_assert_int_eq(tg_optim_n_params(o), 2);
        ck_assert_int_eq(tg_optim_n_state(o), 4);
        assert_state(o, 0, "adam.m.layers.0.linear1.weight", a);
        assert_state(o, 1, "adam.v.layers.0.linear1.weight", a);
        assert_state(o, 2, "adam.m.norm.bias", b);
        assert_state(o, 3, "adam.v.norm.bias", b);
        ck_assert_ptr_null(tg_optim_state(o, 4));
    }
    /* state tensors are not parameters: the context still has two */
    ck_assert_int_eq(tg_ctx_n_params(ctx), 2);

    /* an explicit subset */
    tg_optim_config c = tg_optim_defaults(TG_OPTIM_ADAMW);
    o = tg_optim_new(ctx, &c, 1, &b);
    ck_assert_ptr_nonnull(o);
    ck_assert_int_eq(tg_optim_n_params(o), 1);
    ck_assert_ptr_eq(tg_optim_param(o, 0), b);
    ck_assert_int_eq(tg_optim_n_state(o), 2);
    assert_state(o, 0, "adam.m.norm.bias", b);
    assert_state(o, 1, "adam.v.norm.bias", b);

    /* no parameters at all: valid, steps do nothing but count */
    o = tg_optim_new(ctx, &c, 0, (tg_tensor *[]){NULL});
    ck_assert_ptr_nonnull(o);
    ck_assert_int_eq(tg_optim_n_params(o), 0);
    ck_assert_int_eq(tg_optim_n_state(o), 0);
    ck_assert_int_eq(tg_optim_step(o, 0.1), TG_OK);
    ck_assert_int_eq(tg_optim_steps(o), 1);

    /* a name of TG_NAME_MAX - 1 bytes: the state name is truncated, never overflows */
    char longname[TG_NAME_MAX];
    memset(longname, 'n', TG_NAME_MAX - 1);
    longname[TG_NAME_MAX - 1] = '\0';
    tg_tensor *l = tg_param(ctx, TG_F64, TG_DIMS(1), longname);
    ck_assert_ptr_nonnull(l);
    o = tg_optim_new(ctx, &c, 1, &l);
    ck_assert_ptr_nonnull(o);
    const char *sn = tg_tensor_name(tg_optim_state(o, 0));
    ck_assert_uint_eq(strlen(sn), TG_NAME_MAX - 1);
    ck_assert(strncmp(sn, "adam.m.nnnn", 11) == 0);
    ck_assert_int_eq(tg_ctx_status(ctx), TG_OK);
    tg_ctx_free(ctx);
}
END_TEST

/* ------------------------------------------------------------------------------------------ */
/* (h) thread invariance of the update                                                         */
/* ------------------------------------------------------------------------------------------ */

/* Three steps on a (300, 300) parameter with @p nt threads; returns a malloc'd snapshot. */
static unsigned char *run_threads(int nt, tg_optim_kind kind, tg_dtype dt, size_t *len)
{
    tg_ctx *ctx = tg_ctx_new();
    tg_ctx_set_threads(ctx, nt);
    tg_ctx_seed(ctx, 42);
    tg_tensor *w = tg_param(ctx, dt, TG_DIMS(300, 300), "w");
    tg_fill_normal(w, 0, 1);
    grad_graph(ctx, 1, &w);
    tg_optim_config c = tg_optim_defaults(kind);
    if (kind == TG_OPTIM_SGD) {
        c.momentum = 0.9;
        c.nesterov = true;
        c.weight_decay = 0.1;
    } else {
        c.weight_decay = 0.1;
    }
    tg_optim *o = tg_optim_new(ctx, &c, 1, &w);
    ck_assert_ptr_nonnull(o);
    for (int s = 0; s < 3; s++) {
        grad_randn(w);
        ck_assert_int_eq(tg_optim_step(o, 0.01 * (s + 1)), TG_OK);
    }
    unsigned char *b = snapshot(o, len);
    tg_ctx_free(ctx);
    return b;
}

/* _i: kind (SGD nesterov, Adam, AdamW) x dtype */
START_TEST(test_thread_invariance)
{
    tg_optim_kind kind = (tg_optim_kind)(_i % 3);
    tg_dtype dt = _i / 3 ? TG_F32 : TG_F64;
    size_t n1, n;
    unsigned char *ref = run_threads(1, kind, dt, &n1);
    for (int nt = 2; nt <= 3; nt++) {
        unsigned char *b = run_threads(nt, kind, dt, &n);
        ck_assert_uint_eq(n, n1);
        ck_assert_msg(memcmp(ref, b, n) == 0, "kind %d %s: %d threads differ from 1",
                      (int)kind, tg_dtype_str(dt), nt);
        free(b);
    }
    free(ref);
}
END_TEST

/* ------------------------------------------------------------------------------------------ */
/* (i) training sanity: overfit one batch; dropout                                             */
/* ------------------------------------------------------------------------------------------ */

/* A 1-layer encoder classifier (V 7, D 8, H 2, F 16, T 5, not causal) memorises one fixed
 * batch of 4 random sequences with random per-position targets: cross-entropy < 0.05 within
 * 300 AdamW steps at lr 1e-2. */
static void overfit_one_batch(tg_dtype dt)
{
    const int64_t V = 7, B = 4, T = 5;
    tg_ctx *ctx = tg_ctx_new();
    tg_ctx_seed(ctx, 1234);
    tg_transformer_config mc;
    memset(&mc, 0, sizeof mc);
    mc.vocab_size = V;
    mc.max_seq_len = T;
    mc.n_layers = 1;
    mc.layer = tg_encoder_config_default(8, 2);
    mc.layer.d_ff = 16;
    mc.pos = TG_POS_LEARNED;
    mc.causal = false;
    tg_transformer m;
    ck_assert_msg(tg_transformer_init(ctx, &m, dt, &mc) == TG_OK, "%s", tg_ctx_message(ctx));

    tg_tensor *ids = tg_input(ctx, TG_I32, TG_DIMS(B, T), "ids");
    tg_tensor *tgt = tg_input(ctx, TG_I32, TG_DIMS(B, T), "targets");
    for (int64_t k = 0; k < B * T; k++) {
        tg_set(ids, k, (double)(tg_rng_u64(ctx) % (uint64_t)V));
        tg_set(tgt, k, (double)(tg_rng_u64(ctx) % (uint64_t)V));
    }
    tg_tensor *logits = tg_transformer_forward(ctx, &m, ids, NULL); /* (B, T, V) */
    tg_tensor *loss = tg_cross_entropy(ctx, logits, tgt, -100);     /* () */
    tg_graph *g = tg_graph_new(ctx, &loss, 1);
    ck_assert_msg(g != NULL, "%s", tg_ctx_message(ctx));
    tg_optim_config c = tg_optim_defaults(TG_OPTIM_ADAMW);
    c.lr = 1e-2;
    tg_optim *o = tg_optim_new(ctx, &c, 0, NULL);
    ck_assert_ptr_nonnull(o);
    ck_assert_int_eq(tg_optim_n_params(o), tg_ctx_n_params(ctx));

    double first = NAN, last = NAN;
    int reached = -1;
    for (int s = 0; s < 300; s++) {
        tg_graph_zero_grad(g);
        ck_assert_int_eq(tg_graph_forward(g), TG_OK);
        last = tg_get(loss, 0);
        if (s == 0)
            first = last;
        ck_assert_msg(isfinite(last), "loss not finite at step %d", s);
        if (last < 0.05 && reached < 0)
            reached = s;
        ck_assert_int_eq(tg_graph_backward(g, loss, NULL), TG_OK);
        ck_assert_int_eq(tg_optim_step(o, -1), TG_OK);
    }
    ck_assert_int_eq(tg_graph_forward(g), TG_OK);
    last = tg_get(loss, 0);
    ck_assert_msg(first > 1.0, "initial loss %g suspiciously low", first);
    ck_assert_msg(reached >= 0 && last < 0.05,
                  "%s: loss %g -> %g after 300 steps (first < 0.05 at step %d)",
                  tg_dtype_str(dt), first, last, reached);
    ck_assert_int_eq(tg_optim_steps(o), 300);
    tg_ctx_free(ctx);
}

START_TEST(test_overfit_one_batch_f32) { overfit_one_batch(TG_F32); }
END_TEST

START_TEST(test_overfit_one_batch_f64) { overfit_one_batch(TG_F64); }
END_TEST

/* Dropout p = 0.3 over 100000 elements: x in [1, 2), loss = sum(dropout(x)). */
typedef struct {
    tg_ctx *ctx;
    tg_tensor *x, *y, *loss;
    tg_graph *g;
} drop_fix;

static drop_fix drop_setup(tg_dtype dt, int nt, double p)
{
    drop_fix f;
    f.ctx = tg_ctx_new();
    tg_ctx_set_threads(f.ctx, nt);
    tg_ctx_seed(f.ctx, 99);
    f.x = tu_input(f.ctx, dt, 1, (const int64_t[]){100000}, "x", 1, 2);
    f.y = tg_dropout(f.ctx, f.x, p);
    f.loss = tg_sum_all(f.ctx, f.y);
    tg_keep(f.y); /* read by the tests */
    f.g = tg_graph_new(f.ctx, &f.loss, 1);
    ck_assert_msg(f.g != NULL, "%s", tg_ctx_message(f.ctx));
    return f;
}

START_TEST(test_dropout)
{
    const double p = 0.3;
    tg_dtype dt = _i ? TG_F32 : TG_F64;
    drop_fix f = drop_setup(dt, 0, p);
    int64_t n = tg_tensor_numel(f.x);
    double scale = dt == TG_F32 ? (double)(float)(1.0 / (1.0 - p)) : 1.0 / (1.0 - p);

    /* training mode (the default) */
    ck_assert(tg_ctx_training(f.ctx));
    ck_assert_int_eq(tg_graph_forward(f.g), TG_OK);
    ck_assert_int_eq(tg_graph_backward(f.g, f.loss, NULL), TG_OK);
    int64_t kept = 0, bad = -1;
    for (int64_t k = 0; k < n && bad < 0; k++) { /* no ck_assert per element (slow) */
        double y = tg_get(f.y, k), x = tg_get(f.x, k), dx = tg_grad_get(f.x, k);
        if (y != 0) {
            kept++;
            double want = dt == TG_F32 ? (double)((float)x * (float)scale) : x * scale;
            if (y != want || dx != scale)
                bad = k;
        } else if (dx != 0) {
            bad = k;
        }
    }
    ck_assert_msg(bad < 0, "element %lld: x %.17g y %.17g dx %.17g (scale %.17g)",
                  (long long)bad, tg_get(f.x, bad), tg_get(f.y, bad), tg_grad_get(f.x, bad),
                  scale);
    double frac = (double)kept / (double)n;
    ck_assert_msg(fabs(frac - (1 - p)) <= 0.01, "kept fraction %g, want %g +- 0.01", frac, 1 - p);

    /* a second run draws a new mask */
    size_t bytes = (size_t)n * tg_dtype_size(dt);
    unsigned char *first = malloc(bytes);
    ck_assert_ptr_nonnull(first);
    memcpy(first, tg_tensor_data(f.y), bytes);
    ck_assert_int_eq(tg_graph_forward(f.g), TG_OK);
    ck_assert(memcmp(first, tg_tensor_data(f.y), bytes) != 0);
    free(first);

    /* eval mode: the identity, forward and backward */
    tg_ctx_set_training(f.ctx, false);
    ck_assert(!tg_ctx_training(f.ctx));
    tg_graph_zero_grad(f.g);
    ck_assert_int_eq(tg_graph_forward(f.g), TG_OK);
    ck_assert(memcmp(tg_tensor_data(f.x), tg_tensor_data(f.y), bytes) == 0);
    ck_assert_int_eq(tg_graph_backward(f.g, f.loss, NULL), TG_OK);
    int64_t not_one = 0;
    for (int64_t k = 0; k < n; k++)
        not_one += tg_grad_get(f.x, k) != 1;
    ck_assert_int_eq(not_one, 0);
    /* back to training: dropping again */
    tg_ctx_set_training(f.ctx, true);
    ck_assert_int_eq(tg_graph_forward(f.g), TG_OK);
    ck_assert(memcmp(tg_tensor_data(f.x), tg_tensor_data(f.y), bytes) != 0);

    /* p = 0 is the identity even in training; p outside [0, 1) is an error */
    tg_ctx *c2 = tg_ctx_new();
    tg_tensor *x2 = tu_input(c2, dt, TG_DIMS(10), "x", -1, 1);
    ck_assert_ptr_null(tg_dropout(c2, x2, 1.0));
    tu_assert_error(c2, TG_ERR_ARG, "tg_dropout");
    tg_ctx_clear_error(c2);
    ck_assert_ptr_null(tg_dropout(c2, x2, -0.1));
    tu_assert_error(c2, TG_ERR_ARG, "tg_dropout");
    tg_ctx_clear_error(c2);
    tg_tensor *y2 = tg_dropout(c2, x2, 0);
    tg_graph *g2 = tg_graph_new(c2, &y2, 1);
    ck_assert_ptr_nonnull(g2);
    ck_assert_int_eq(tg_graph_forward(g2), TG_OK);
    ck_assert(memcmp(tg_tensor_data(x2), tg_tensor_data(y2), 10 * tg_dtype_size(dt)) == 0);
    tg_ctx_free(c2);
    tg_ctx_free(f.ctx);
}
END_TEST

/* The mask comes from the context RNG in element order: same seed -> same output and
 * gradient for 1, 2 and 3 threads. */
START_TEST(test_dropout_threads)
{
    tg_dtype dt = _i ? TG_F32 : TG_F64;
    unsigned char *ref_y = NULL, *ref_dx = NULL;
    size_t bytes = 0;
    for (int nt = 1; nt <= 3; nt++) {
        drop_fix f = drop_setup(dt, nt, 0.3);
        bytes = (size_t)tg_tensor_numel(f.x) * tg_dtype_size(dt);
        ck_assert_int_eq(tg_graph_forward(f.g), TG_OK);
        ck_assert_int_eq(tg_graph_backward(f.g, f.loss, NULL), TG_OK);
        if (nt == 1) {
            ref_y = malloc(bytes);
            ref_dx = malloc(bytes);
            ck_assert(ref_y && ref_dx);
            memcpy(ref_y, tg_tensor_data(f.y), bytes);
            memcpy(ref_dx, tg_tensor_grad(f.x), bytes);
        } else {
            ck_assert_msg(memcmp(ref_y, tg_tensor_data(f.y), bytes) == 0,
                          "%d threads: dropout output differs", nt);
            ck_assert_msg(memcmp(ref_dx, tg_tensor_grad(f.x), bytes) == 0,
                          "%d threads: dropout gradient differs", nt);
        }
        tg_ctx_free(f.ctx);
    }
    free(ref_y);
    free(ref_dx);
}
END_TEST


/* Backward uses the mask and scale of the forward run, even if the mode changed in between. */
START_TEST(test_dropout_mode_switch)
{
    for (int order = 0; order < 2; order++) {
        tg_ctx *ctx = tg_ctx_new();
        tg_ctx_seed(ctx, 5);
        tg_tensor *x = tg_input(ctx, TG_F64, TG_DIMS(64), "x");
        tg_set_requires_grad(x, true);
        tg_fill(x, 1.0);
        tg_tensor *y = tg_dropout(ctx, x, 0.5);
        tg_tensor *dy = tg_const(ctx, TG_F64, TG_DIMS(64), "dy");
        tg_fill(dy, 1.0);
        tg_graph *g = tg_graph_new(ctx, &y, 1);
        ck_assert_ptr_nonnull(g);
        tg_ctx_set_training(ctx, order == 0); /* forward in one mode ... */
        ck_assert_int_eq(tg_graph_forward(g), TG_OK);
        tg_ctx_set_training(ctx, order != 0); /* ... backward in the other */
        ck_assert_int_eq(tg_graph_backward(g, y, dy), TG_OK);
        for (int64_t i = 0; i < 64; i++) /* x = 1 and dy = 1: dx equals y everywhere */
            ck_assert_msg(tg_grad_get(x, i) == tg_get(y, i), "order %d: dx[%lld] %g, y %g",
                          order, (long long)i, tg_grad_get(x, i), tg_get(y, i));
        tg_ctx_free(ctx);
    }
}
END_TEST

int main(void)
{
    Suite *s = suite_create("optim");

    TCase *tc = tcase_create("pytorch_parity");
    tcase_set_timeout(tc, 60);
    tcase_add_loop_test(tc, test_fixture_f64, 0, N_FIXTURES);
    tcase_add_loop_test(tc, test_fixture_f32, 0, N_FIXTURES);
    suite_add_tcase(s, tc);

    tc = tcase_create("updates");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_sgd_by_hand);
    tcase_add_test(tc, test_adam_by_hand);
    tcase_add_loop_test(tc, test_nonfinite_grad, 0, 6);
    tcase_add_test(tc, test_nonfinite_first_step);
    tcase_add_loop_test(tc, test_nonfinite_update, 0, 6);
    tcase_add_test(tc, test_duplicate_param);
    tcase_add_test(tc, test_bad_config);
    tcase_add_test(tc, test_state_naming);
    tcase_add_loop_test(tc, test_thread_invariance, 0, 6);
    suite_add_tcase(s, tc);

    tc = tcase_create("clip_schedule");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_clip_grad_norm);
    tcase_add_test(tc, test_clip_grad_norm_errors);
    tcase_add_test(tc, test_other_context);
    tcase_add_test(tc, test_lr_warmup_cosine);
    tcase_add_test(tc, test_lr_schedule_extremes);
    tcase_add_test(tc, test_lr_noam);
    tcase_add_loop_test(tc, test_lr_noam_fixture, 0, 3);
    tcase_add_test(tc, test_step_limits_and_runtime_error);
    suite_add_tcase(s, tc);

    tc = tcase_create("training");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_overfit_one_batch_f32);
    tcase_add_test(tc, test_overfit_one_batch_f64);
    tcase_add_loop_test(tc, test_dropout, 0, 2);
    tcase_add_loop_test(tc, test_dropout_threads, 0, 2);
    tcase_add_test(tc, test_dropout_mode_switch);
    suite_add_tcase(s, tc);
    return tu_run(s);
}
