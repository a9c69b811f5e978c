/*
 * test_custom.c - user-defined ops (tg_custom_op): values, gradients and tg_gradcheck (a correct
 * op passes, a deliberately wrong one fails), dtype support (an f32-only op refuses f64),
 * errors reported by callbacks (forward, backward, inside tg_gradcheck; with and without a
 * message; not sticky), the thread count and workspace handed to callbacks, what backward may
 * read, build errors, and out-of-memory at every allocation of a build.
 */
#include "testutil.h"

#include <stdio.h>
#include <string.h>

/* ---- callbacks ----------------------------------------------------------------------------- */
static double cget(const tg_custom_call *c, const void *p, int64_t i)
{
    return c->dtype == TG_F32 ? (double)((const float *)p)[i] : ((const double *)p)[i];
}
static void cset(const tg_custom_call *c, void *p, int64_t i, double v)
{
    if (c->dtype == TG_F32)
        ((float *)p)[i] = (float)v;
    else
        ((double *)p)[i] = v;
}

/* What the callbacks saw (def.user). */
typedef struct {
    int n_fwd, n_bwd;
    int threads_fwd, threads_bwd;
    bool fwd_saw_all_inputs, bwd_input0_null, bwd_input1_null, bwd_output_null;
    bool fwd_grad_null;
    size_t ws_fwd, ws_bwd;      /* workspace_bytes seen */
    bool ws_ok;                 /* workspace non-NULL and writable when bytes > 0 */
    double fail_below;          /* forward fails on an input below this (if fail_fwd) */
    bool fail_fwd, fail_bwd, fail_silent, fail_bogus;
    bool wrong;                 /* backward misses a factor (a deliberately wrong rule) */
    bool assigns;               /* backward assigns dx = ... instead of adding dx += ... */
} probe;

/* softplus: y = log(1 + e^x), dx += dy sigmoid(x) */
static tg_status sp_fwd(tg_custom_call *c)
{
    probe *p = c->user;
    if (p) {
        p->n_fwd++;
        p->threads_fwd = c->n_threads;
        p->fwd_saw_all_inputs = c->input[0] != NULL && c->output != NULL;
        p->fwd_grad_null = c->grad_output == NULL && c->grad_input[0] == NULL;
        p->ws_fwd = c->workspace_bytes;
        if (c->workspace_bytes) {
            p->ws_ok = c->workspace != NULL;
            if (c->workspace)
                memset(c->workspace, 0xab, c->workspace_bytes);
        }
    }
    for (int64_t i = 0; i < c->output_numel; i++) {
        double x = cget(c, c->input[0], i);
        if (p && p->fail_fwd && x < p->fail_below) {
            if (p->fail_bogus)
                return (tg_status)999;
            if (p->fail_silent)
                return TG_ERR_NONFINITE;
            return tg_custom_error(c, TG_ERR_ARG, "x[%lld] = %g is below %g", (long long)i, x,
                                   p->fail_below);
        }
        cset(c, c->output, i, (x > 0 ? x : 0) + log1p(exp(-fabs(x))));
    }
    return TG_OK;
}
static tg_status sp_bwd(tg_custom_call *c)
{
    probe *p = c->user;
    if (p) {
        p->n_bwd++;
        p->threads_bwd = c->n_threads;
        p->bwd_output_null = c->output == NULL;
        p->ws_bwd = c->workspace_bytes;
        if (c->workspace_bytes && !c->workspace)
            p->ws_ok = false;
        if (p->fail_bwd)
            return tg_custom_error(c, TG_ERR_NONFINITE, "dy[0] = %g is not allowed",
                                   cget(c, c->grad_output, 0));
    }
    if (!c->grad_input[0])
        return TG_OK;
    for (int64_t i = 0; i < c->output_numel; i++) {
        double x = cget(c, c->input[0], i);
        double s = 1 / (1 + exp(-x));
        double g = cget(c, c->grad_output, i) * (p && p->wrong ? 1.0 : s);
        cset(c, c->grad_input[0], i, (p && p->assigns ? 0 : cget(c, c->grad_input[0], i)) + g);
    }
    return TG_OK;
}

static size_t ws_16_per_thread(const tg_custom_call *c)
{
    ck_assert(c->input[0] == NULL && c->output == NULL); /* a shape-only query */
    return (size_t)c->n_threads * 16 + (c->backward ? 8 : 0);
}

static tg_custom_def softplus_def(probe *p)
{
    tg_custom_def d;
    memset(&d, 0, sizeof d);
    d.name = "softplus";
    d.out_rank = TG_CUSTOM_SAME_SHAPE;
    d.forward_f32 = d.forward_f64 = sp_fwd;
    d.backward_f32 = d.backward_f64 = sp_bwd;
    d.backward_reads = TG_CUSTOM_READS_INPUT(0);
    d.user = p;
    return d;
}

static tg_tensor *softplus(tg_ctx *ctx, tg_tensor *x, probe *p)
{
    tg_custom_def d = softplus_def(p);
    return tg_custom_op(ctx, &d, 1, &x);
}

static double softplus_ref(double x) { return log1p(exp(x)); }

/* ---- rules written as ops (tg_custom_def.vjp, .jvp) ------------------------------------------ */
/* The user pointer: the callbacks' probe, then the rules' mode: 0 right, 1 a result of the
 * wrong shape, 2 NULL without an error, 3 a builder's error, 4 a status without a message. */
typedef struct {
    probe p;
    int mode;
} rule_user;

static tg_status rule_vjp(tg_ctx *ctx, tg_tensor *y, int n, tg_tensor *const *in, tg_tensor *gy,
                          const bool *need, tg_tensor **gx, void *user)
{
    int mode = ((rule_user *)user)->mode;
    ck_assert_int_eq(n, 1);
    ck_assert(need[0] && tg_tensor_numel(gy) == tg_tensor_numel(y));
    if (mode == 4)
        return TG_ERR_ARG;
    if (mode == 3)
        return (gx[0] = tg_matmul(ctx, gy, in[0], false, false)) ? TG_OK : tg_ctx_status(ctx);
    gx[0] = mode == 2 ? NULL
            : mode == 1 ? tg_sum_all(ctx, gy)
                        : tg_mul(ctx, gy, tg_sigmoid(ctx, in[0]));
    return TG_OK;
}
static tg_tensor *rule_jvp(tg_ctx *ctx, tg_tensor *y, int n, tg_tensor *const *in,
                           tg_tensor *const *t, void *user)
{
    (void)y, (void)n;
    int mode = ((rule_user *)user)->mode;
    return mode == 2 ? NULL
           : mode == 1 ? tg_sum_all(ctx, t[0])
                       : tg_mul(ctx, t[0], tg_sigmoid(ctx, in[0]));
}

/* A custom op with rules as ops goes through tg_grad, tg_jvp and the second-order check in f64
 * (the rules are right); rules that give a wrong shape, NULL or fail are refused naming the op
 * (a builder's error inside a rule keeps the builder's message), as build errors of tg_grad /
 * tg_jvp with the results NULL. */
START_TEST(test_rules_as_ops)
{
    static const char *const want[] = {NULL, "of another shape", "as NULL", "tg_matmul",
                                       "its vjp rule failed"};
    for (int mode = 0; mode < 5; mode++) {
        tg_ctx *ctx = tu_ctx_new();
        int64_t sh[2] = {3, 4};
        tg_tensor *x = tg_input(ctx, TG_F64, 2, sh, "x"), *u = tg_const(ctx, TG_F64, 2, sh, "u");
        tg_fill_uniform(x, -2, 2);
        tg_fill_uniform(u, -1, 1);
        tg_set_requires_grad(x, true);
        rule_user ru = {.mode = mode};
        tg_custom_def d = softplus_def(&ru.p);
        d.vjp = rule_vjp;
        d.jvp = rule_jvp;
        tg_tensor *y = tg_custom_op(ctx, &d, 1, &x), *L = tg_sum_all(ctx, tg_mul(ctx, y, y));
        tg_tensor *g = (tg_tensor *)1, *t = (tg_tensor *)1;
        tg_status sg = tg_grad(ctx, 1, &L, NULL, 1, &x, &g);
        if (mode == 0) {
            ck_assert_int_eq(sg, TG_OK);
            ck_assert_int_eq(tg_jvp(ctx, 1, &x, &u, 1, &y, &t), TG_OK);
            tg_gradcheck_report r;
            tg_gradcheck_opts o = tg_gradcheck_defaults(TG_F64);
            o.mode = TG_GRADCHECK_BOTH;
            tg_status sc = tg_gradgradcheck(ctx, L, &o, &r);
            ck_assert_msg(sc == TG_OK, "%d %s / %s", sc, r.message, tg_ctx_message(ctx));
        } else {
            ck_assert_int_ne(sg, TG_OK);
            ck_assert_ptr_null(g);
            ck_assert_msg((mode == 3 || strstr(tg_ctx_message(ctx), "softplus")) &&
                              strstr(tg_ctx_message(ctx), want[mode]),
                          "%d: %s", mode, tg_ctx_message(ctx));
            if (mode == 1 || mode == 2) {
                tu_ctx_free(ctx);
                ctx = tu_ctx_new(); /* (the build error sticks) */
                x = tg_input(ctx, TG_F64, 2, sh, "x");
                u = tg_const(ctx, TG_F64, 2, sh, "u");
                tg_set_requires_grad(x, true);
                y = tg_custom_op(ctx, &d, 1, &x);
                ck_assert_int_ne(tg_jvp(ctx, 1, &x, &u, 1, &y, &t), TG_OK);
                ck_assert_ptr_null(t);
                ck_assert_msg(strstr(tg_ctx_message(ctx), "jvp rule gave the tangent"), "%s",
                              tg_ctx_message(ctx));
            }
        }
        tu_ctx_free(ctx);
    }
}
END_TEST

/* ---- values, gradients, gradcheck ----------------------------------------------------------- */
START_TEST(test_values_and_gradients)
{
    tg_dtype dt = tu_dtypes[_i];
    tg_ctx *ctx = tu_ctx_new();
    tg_tensor *x = tu_in(ctx, dt, TG_DIMS(2, 3), "x", VALS(-2, -0.5, 0, 0.5, 1, 3));
    probe p = {0};
    tg_tensor *y = softplus(ctx, x, &p);
    ck_assert_msg(y != NULL, "%s", tg_ctx_message(ctx));
    EXPECT_SHAPE(y, 2, 3);
    ck_assert_int_eq(tg_tensor_dtype(y), dt);
    ck_assert_str_eq(tg_tensor_op_name(y), "softplus");
    ck_assert_int_eq(tg_tensor_op_index(y), tg_op_find("custom"));
    ck_assert(tg_tensor_requires_grad(y));
    ck_assert(strncmp(tg_tensor_name(y), "softplus", 8) == 0); /* generated: softplus<N> */
    ck_assert_int_eq(tg_tensor_n_srcs(y), 1);
    ck_assert_ptr_eq(tg_tensor_src(y, 0), x);
    tg_graph *g = tu_fwd(ctx, y);
    double tol = dt == TG_F32 ? 1e-6 : 1e-14;
    EXPECT_DATA(y, tol, softplus_ref(-2), softplus_ref(-0.5), softplus_ref(0),
                softplus_ref(0.5), softplus_ref(1), softplus_ref(3));
    tu_bwd(ctx, g, y, VALS(1, 2, 3, 4, 5, 6));
    double s[6] = {-2, -0.5, 0, 0.5, 1, 3};
    double want[6];
    for (int i = 0; i < 6; i++)
        want[i] = (i + 1) / (1 + exp(-s[i]));
    tu_expect_vals(x, true, want, tol);
    ck_assert_int_eq(p.n_fwd, 1);
    ck_assert_int_eq(p.n_bwd, 1);
    ck_assert(p.fwd_saw_all_inputs && p.fwd_grad_null);
    ck_assert(p.bwd_output_null); /* backward did not declare it reads the output */
    /* accumulate contract: a second backward adds */
    tg_graph_zero_grad(g);
    tu_assert_backward_twice(ctx, g, y, VALS(1, 2, 3, 4, 5, 6), &x, 1);
}
END_TEST

START_TEST(test_gradcheck_correct_passes)
{
    tg_ctx *ctx = tu_ctx_new();
    tg_ctx_seed(ctx, 3);
    tg_tensor *x = tu_input(ctx, TG_F64, TG_DIMS(3, 4), "x", -3, 3);
    tg_tensor *y = softplus(ctx, tg_scale(ctx, x, 1.5), NULL);
    tu_assert_gradcheck(ctx, tg_mean_all(ctx, tg_mul(ctx, y, x)));
}
END_TEST

START_TEST(test_gradcheck_wrong_fails)
{
    tg_ctx *ctx = tu_ctx_new();
    tg_ctx_seed(ctx, 3);
    tg_tensor *x = tu_input(ctx, TG_F64, TG_DIMS(3, 4), "x", -3, 3);
    probe p = {0};
    p.wrong = true; /* dx += dy, the sigmoid factor forgotten */
    tg_tensor *y = softplus(ctx, x, &p);
    tg_gradcheck_report rep;
    tg_status s = tg_gradcheck(ctx, y, NULL, &rep);
    ck_assert_int_eq(s, TG_ERR_GRADCHECK);
    ck_assert(!rep.passed);
    ck_assert_str_eq(rep.worst_tensor, "x");
    ck_assert_msg(strncmp(rep.message, "FAIL", 4) == 0, "%s", rep.message);
    ck_assert(rep.max_abs_err > 0.01);
}
END_TEST

/* A backward that assigns (dx = ...) instead of adding (dx += ...) is right as long as it is
 * its input's only consumer, so the values alone pass; tg_gradcheck pre-fills the input's
 * gradient as a second consumer would and names the rule. On a leaf (f64) and on an op
 * result (f32). */
START_TEST(test_gradcheck_assigning_backward_fails)
{
    tg_dtype dt = _i == 0 ? TG_F64 : TG_F32;
    tg_ctx *ctx = tu_ctx_new();
    tg_ctx_seed(ctx, 3);
    tg_tensor *x = tu_input(ctx, dt, TG_DIMS(3, 4), "x", -3, 3);
    tg_tensor *in = _i == 0 ? x : tg_scale(ctx, x, 1.5);
    if (_i == 1)
        tg_tensor_set_name(in, "scaled");
    probe p = {0};
    p.assigns = true;
    tg_tensor *y = softplus(ctx, in, &p);
    tg_tensor_set_name(y, "sp");
    ck_assert_int_eq(tg_graph_forward(tu_fwd(ctx, y)), TG_OK);
    double x0 = tg_get(x, 5);
    tg_gradcheck_report rep;
    tg_status s = tg_gradcheck(ctx, y, NULL, &rep);
    ck_assert_int_eq(s, TG_ERR_GRADCHECK);
    ck_assert(!rep.passed);
    ck_assert(!rep.backward_accumulates);
    ck_assert(rep.backward_deterministic && rep.zero_upstream_ok);
    char want[160];
    snprintf(want, sizeof want, "FAIL: the backward rule of 'sp' (op softplus) assigns the "
             "gradient of its input '%s' instead of adding to it (dx += ...)",
             _i == 0 ? "x" : "scaled");
    ck_assert_msg(strncmp(rep.message, want, strlen(want)) == 0, "%s", rep.message);
    /* the values agree with the differences: only the pre-filled run finds the fault */
    ck_assert_msg(rep.max_abs_err < 1e-2, "%s", rep.message);
    ck_assert_double_eq(tg_get(x, 5), x0); /* the leaf restored */
    /* the same op adding: passes */
    p.assigns = false;
    ck_assert_int_eq(tg_gradcheck(ctx, y, NULL, &rep), TG_OK);
    ck_assert(rep.passed && rep.backward_accumulates);
}
END_TEST

/* Used twice, by two custom ops and a built-in one: contributions add up. */
START_TEST(test_shared_input_accumulates)
{
    tg_ctx *ctx = tu_ctx_new();
    tg_ctx_seed(ctx, 5);
    tg_tensor *x = tu_input(ctx, TG_F64, TG_DIMS(2, 5), "x", -2, 2);
    tg_tensor *a = softplus(ctx, x, NULL), *b = softplus(ctx, tg_scale(ctx, x, -1), NULL);
    tu_assert_gradcheck(ctx, tg_sum_all(ctx, tg_add(ctx, tg_mul(ctx, a, b), x)));
}
END_TEST

/* ---- dtypes ------------------------------------------------------------------------------- */
START_TEST(test_f32_only_refuses_f64)
{
    tg_ctx *ctx = tu_ctx_new();
    tg_custom_def d = softplus_def(NULL);
    d.forward_f64 = NULL;
    d.backward_f64 = NULL;
    tg_tensor *x32 = tg_input(ctx, TG_F32, TG_DIMS(3), "x32");
    tg_tensor *y32 = tg_custom_op(ctx, &d, 1, &x32);
    ck_assert_msg(y32 != NULL, "%s", tg_ctx_message(ctx));
    tg_tensor *x64 = tg_input(ctx, TG_F64, TG_DIMS(3), "x64");
    ck_assert_ptr_null(tg_custom_op(ctx, &d, 1, &x64));
    tu_assert_error(ctx, TG_ERR_DTYPE, "tg_custom_op: op 'softplus' has no f64 forward");
}
END_TEST

/* A forward without backward: fine for constants, refused where a gradient is needed. */
START_TEST(test_no_backward)
{
    tg_ctx *ctx = tu_ctx_new();
    tg_custom_def d = softplus_def(NULL);
    d.backward_f64 = NULL;
    tg_tensor *c = tg_const(ctx, TG_F64, TG_DIMS(2), "c");
    tg_tensor *y = tg_custom_op(ctx, &d, 1, &c);
    ck_assert_ptr_nonnull(y);
    ck_assert(!tg_tensor_requires_grad(y));
    tg_graph *g = tg_graph_new(ctx, &y, 1);
    ck_assert_ptr_nonnull(g);
    ck_assert_int_eq(tg_graph_forward(g), TG_OK);
    ck_assert_double_eq_tol(tg_get(y, 0), log(2.0), 1e-15);

    tg_tensor *x = tu_in(ctx, TG_F64, TG_DIMS(2), "x", NULL);
    tg_tensor *z = tg_custom_op(ctx, &d, 1, &x);
    ck_assert_ptr_nonnull(z);
    ck_assert_ptr_null(tg_graph_new(ctx, &z, 1));
    tu_assert_error(ctx, TG_ERR_NOGRAD, "op 'softplus'");
}
END_TEST

/* ---- errors from callbacks ---------------------------------------------------------------- */
START_TEST(test_forward_error_propagates)
{
    tg_ctx *ctx = tu_ctx_new();
    tg_tensor *x = tu_in(ctx, TG_F64, TG_DIMS(3), "x", VALS(1, -4, 2));
    probe p = {0};
    p.fail_fwd = true;
    p.fail_below = -1;
    tg_tensor *y = softplus(ctx, x, &p);
    tg_tensor_set_name(y, "act");
    tg_graph *g = tg_graph_new(ctx, &y, 1);
    ck_assert_ptr_nonnull(g);
    ck_assert_int_eq(tg_graph_forward(g), TG_ERR_ARG);
    tu_assert_error(ctx, TG_ERR_ARG,
                    "tg_graph_forward: custom op 'softplus' ('act'): x[1] = -4 is below -1");
    /* the failed forward leaves the graph not forwarded */
    ck_assert_int_eq(tg_graph_backward(g, y, NULL), TG_ERR_STATE);
    /* a run-time error: fixing the data and running again needs no clear */
    tg_set(x, 1, 0.5);
    ck_assert_int_eq(tg_graph_forward(g), TG_OK);
    ck_assert_int_eq(tg_ctx_status(ctx), TG_OK);
    ck_assert_double_eq_tol(tg_get(y, 1), softplus_ref(0.5), 1e-15);
    /* and building still works */
    ck_assert_ptr_nonnull(tg_scale(ctx, y, 2));
}
END_TEST

START_TEST(test_error_without_message)
{
    tg_ctx *ctx = tu_ctx_new();
    tg_tensor *x = tu_in(ctx, TG_F64, TG_DIMS(2), "x", VALS(-5, 1));
    probe p = {0};
    p.fail_fwd = p.fail_silent = true;
    p.fail_below = 0;
    tg_tensor *y = softplus(ctx, x, &p);
    tg_graph *g = tg_graph_new(ctx, &y, 1);
    ck_assert_int_eq(tg_graph_forward(g), TG_ERR_NONFINITE);
    tu_assert_error(ctx, TG_ERR_NONFINITE, "forward callback failed with TG_ERR_NONFINITE");
    p.fail_bogus = true; /* not a tg_status at all */
    ck_assert_int_eq(tg_graph_forward(g), TG_ERR_ARG);
    tu_assert_error(ctx, TG_ERR_ARG, "forward callback returned 999, not a tg_status");
}
END_TEST

START_TEST(test_backward_error_propagates)
{
    tg_ctx *ctx = tu_ctx_new();
    tg_tensor *x = tu_in(ctx, TG_F64, TG_DIMS(3), "x", VALS(1, 2, 3));
    probe p = {0};
    tg_tensor *y = softplus(ctx, x, &p);
    tg_tensor *loss = tg_sum_all(ctx, y);
    tg_graph *g = tu_fwd(ctx, loss);
    ck_assert_int_eq(tg_graph_backward(g, loss, NULL), TG_OK);
    double g0 = tg_grad_get(x, 0);
    ck_assert_double_eq_tol(g0, 1 / (1 + exp(-1.0)), 1e-15);
    p.fail_bwd = true;
    ck_assert_int_eq(tg_graph_backward(g, loss, NULL), TG_ERR_NONFINITE);
    tu_assert_error(ctx, TG_ERR_NONFINITE, "tg_graph_backward: custom op 'softplus'");
    tu_assert_error(ctx, TG_ERR_NONFINITE, "dy[0] = 1 is not allowed");
    /* a failed backward changes no leaf gradient */
    ck_assert(tg_grad_get(x, 0) == g0);
    p.fail_bwd = false;
    ck_assert_int_eq(tg_graph_backward(g, loss, NULL), TG_OK);
    ck_assert_double_eq_tol(tg_grad_get(x, 0), 2 * g0, 1e-15);
}
END_TEST

/* A callback that fails only at a perturbed input ends tg_gradcheck with its error. */
START_TEST(test_error_inside_gradcheck)
{
    tg_ctx *ctx = tu_ctx_new();
    tg_tensor *x = tu_in(ctx, TG_F64, TG_DIMS(2), "x", VALS(0.5, 2));
    probe p = {0};
    p.fail_fwd = true;
    p.fail_below = 0.5; /* x[0] - eps trips it */
    tg_tensor *y = softplus(ctx, x, &p);
    tg_gradcheck_report rep;
    tg_status s = tg_gradcheck(ctx, y, NULL, &rep);
    ck_assert_int_eq(s, TG_ERR_ARG);
    ck_assert(!rep.passed);
    tu_assert_error(ctx, TG_ERR_ARG, "tg_gradcheck: a run of the check failed: tg_graph_forward: "
                                     "custom op 'softplus'");
    ck_assert_msg(strstr(rep.message, "is below 0.5") != NULL, "%s", rep.message);
    ck_assert(tg_get(x, 0) == 0.5); /* leaves restored */
}
END_TEST

/* ---- threads, workspace, what backward reads ---------------------------------------------- */
START_TEST(test_thread_count_passed)
{
    tg_ctx *ctx = tu_ctx_new();
    tg_tensor *x = tu_in(ctx, TG_F64, TG_DIMS(4), "x", VALS(1, 2, 3, 4));
    probe p = {0};
    tg_tensor *y = softplus(ctx, x, &p);
    tg_graph *g = tg_graph_new(ctx, &y, 1);
    for (int nt = 1; nt <= 3; nt++) {
        tg_ctx_set_threads(ctx, nt);
        ck_assert_int_eq(tg_graph_forward(g), TG_OK);
        tu_bwd(ctx, g, y, NULL);
        ck_assert_int_eq(p.threads_fwd, nt);
        ck_assert_int_eq(p.threads_bwd, nt);
    }
}
END_TEST

START_TEST(test_workspace)
{
    tg_ctx *ctx = tu_ctx_new();
    tg_tensor *x = tu_in(ctx, TG_F32, TG_DIMS(4), "x", VALS(1, 2, 3, 4));
    probe p = {0};
    tg_custom_def d = softplus_def(&p);
    d.workspace = ws_16_per_thread;
    tg_tensor *y = tg_custom_op(ctx, &d, 1, &x);
    tg_graph *g = tg_graph_new(ctx, &y, 1);
    for (int nt = 1; nt <= 4; nt += 3) {
        tg_ctx_set_threads(ctx, nt);
        p.ws_ok = true;
        ck_assert_int_eq(tg_graph_forward(g), TG_OK);
        tu_bwd(ctx, g, y, NULL);
        ck_assert_uint_eq(p.ws_fwd, 16 * (size_t)nt);
        ck_assert_uint_eq(p.ws_bwd, 16 * (size_t)nt + 8);
        ck_assert(p.ws_ok);
    }
    /* no workspace function: 0 bytes, NULL */
    probe q = {0};
    tg_tensor *z = softplus(ctx, x, &q);
    tu_fwd(ctx, z);
    ck_assert_uint_eq(q.ws_fwd, 0);
}
END_TEST

/* A workspace callback's size is checked like a shape: a size no arena can hold (up to
 * SIZE_MAX, or a sum of sizes that would wrap) is refused by tg_graph_new with a message naming
 * the op, and a callback that asks for more at run time than it did when the graph was planned
 * fails that run instead of writing past its buffer. */
static size_t huge_ws_value;
static bool huge_ws_backward_only;
static bool huge_ws_later, huge_ws_armed; /* later: 64 bytes until armed */
static size_t ws_huge(const tg_custom_call *c)
{
    if (huge_ws_later)
        return huge_ws_armed ? huge_ws_value : 64;
    if (huge_ws_backward_only && !c->backward)
        return 64;
    return huge_ws_value;
}

START_TEST(test_workspace_huge)
{
    const size_t sizes[] = {SIZE_MAX,
                            SIZE_MAX - 62,
                            (size_t)INT64_MAX - 62, /* 2^63 - 63: rounds up past INT64_MAX */
                            (size_t)INT64_MAX,
                            (size_t)1 << 63,
                            ((size_t)1 << 62) + 1};
    for (size_t k = 0; k < sizeof sizes / sizeof sizes[0]; k++) {
        for (int bwd = 0; bwd < 2; bwd++) {
            tg_ctx *ctx = tu_ctx_new();
            tg_tensor *x = tu_in(ctx, TG_F32, TG_DIMS(4), "x", VALS(1, 2, 3, 4));
            tg_set_requires_grad(x, true);
            probe p = {0};
            tg_custom_def d = softplus_def(&p);
            d.workspace = ws_huge;
            huge_ws_value = sizes[k];
            huge_ws_backward_only = bwd;
            huge_ws_later = false;
            tg_tensor *y = tg_custom_op(ctx, &d, 1, &x);
            tg_tensor *y2 = tg_custom_op(ctx, &d, 1, &y); /* two of them: sums wrap too */
            ck_assert_ptr_nonnull(y2);
            tg_graph *g = tg_graph_new(ctx, &y2, 1);
            ck_assert_msg(g == NULL, "size %zu (backward only: %d) accepted", sizes[k], bwd);
            tg_status s = tg_ctx_status(ctx);
            ck_assert_msg(s == TG_ERR_NOMEM || s == TG_ERR_ARG, "%s", tg_status_str(s));
            ck_assert_msg(strstr(tg_ctx_message(ctx), "workspace") != NULL &&
                              strstr(tg_ctx_message(ctx), "softplus") != NULL,
                          "%s", tg_ctx_message(ctx));
            ck_assert_int_eq(p.n_fwd, 0);
            tu_ctx_free(ctx);
        }
    }
    /* planned small, asks for more when it runs: that run fails, nothing is written */
    tg_ctx *ctx = tu_ctx_new();
    tg_tensor *x = tu_in(ctx, TG_F32, TG_DIMS(4), "x", VALS(1, 2, 3, 4));
    probe p = {0};
    tg_custom_def d = softplus_def(&p);
    d.workspace = ws_huge;
    huge_ws_value = SIZE_MAX;
    huge_ws_backward_only = false;
    huge_ws_later = true; /* the planner's queries get 64 bytes, every later one SIZE_MAX */
    huge_ws_armed = false;
    tg_tensor *y = tg_custom_op(ctx, &d, 1, &x);
    tg_graph *g = tg_graph_new(ctx, &y, 1);
    ck_assert_msg(g != NULL, "%s", tg_ctx_message(ctx));
    huge_ws_armed = true;
    ck_assert_int_ne(tg_graph_forward(g), TG_OK);
    ck_assert_int_eq(p.n_fwd, 0);
    ck_assert_msg(strstr(tg_ctx_message(ctx), "workspace") != NULL, "%s", tg_ctx_message(ctx));
    /* a run-time error: building still works */
    huge_ws_later = false;
    huge_ws_value = 64;
    ck_assert_ptr_nonnull(tg_add(ctx, x, x));
    tu_ctx_free(ctx);
}
END_TEST

/* backward sees only what it declared: undeclared inputs (and the output) arrive as NULL */
static tg_status two_fwd(tg_custom_call *c)
{
    for (int64_t i = 0; i < c->output_numel; i++)
        cset(c, c->output, i, cget(c, c->input[0], i) * cget(c, c->input[1], i));
    return TG_OK;
}
static tg_status two_bwd(tg_custom_call *c)
{
    probe *p = c->user;
    p->bwd_input0_null = c->input[0] == NULL;
    p->bwd_input1_null = c->input[1] == NULL;
    p->bwd_output_null = c->output == NULL;
    /* y = a * b: da += dy b (reads b), db += dy a (reads a) */
    for (int64_t i = 0; i < c->output_numel; i++) {
        double g = cget(c, c->grad_output, i);
        if (c->grad_input[0])
            cset(c, c->grad_input[0], i, cget(c, c->grad_input[0], i) + g * cget(c, c->input[1], i));
        if (c->grad_input[1])
            cset(c, c->grad_input[1], i, cget(c, c->grad_input[1], i) + g * cget(c, c->input[0], i));
    }
    return TG_OK;
}

START_TEST(test_backward_reads)
{
    tg_ctx *ctx = tu_ctx_new();
    probe p = {0};
    tg_custom_def d;
    memset(&d, 0, sizeof d);
    d.name = "times";
    d.out_rank = TG_CUSTOM_SAME_SHAPE;
    d.forward_f64 = two_fwd;
    d.backward_f64 = two_bwd;
    d.user = &p;
    /* a needs no gradient, so backward reads only a: declare input 0 */
    d.backward_reads = TG_CUSTOM_READS_INPUT(0);
    tg_tensor *in[2] = {tg_const(ctx, TG_F64, TG_DIMS(3), "a"),
                        tu_in(ctx, TG_F64, TG_DIMS(3), "b", VALS(4, 5, 6))};
    tu_set(in[0], VALS(1, 2, 3));
    tg_tensor *y = tg_custom_op(ctx, &d, 2, in);
    ck_assert_msg(y != NULL, "%s", tg_ctx_message(ctx));
    tg_graph *g = tu_fwd(ctx, y);
    EXPECT_DATA(y, 0, 4, 10, 18);
    tu_bwd(ctx, g, y, VALS(1, 1, 2));
    EXPECT_GRAD(in[1], 0, 1, 2, 6);
    ck_assert(!p.bwd_input0_null);
    ck_assert(p.bwd_input1_null);
    ck_assert(p.bwd_output_null);
    /* reading the output too */
    d.backward_reads = TG_CUSTOM_READS_INPUT(0) | TG_CUSTOM_READS_OUTPUT;
    tg_tensor *y2 = tg_custom_op(ctx, &d, 2, in);
    g = tu_fwd(ctx, y2);
    tu_bwd(ctx, g, y2, NULL);
    ck_assert(!p.bwd_output_null);
}
END_TEST

/* shapes from a function or given explicitly */
static tg_status sum_shape(int n, const tg_tensor *const *in, int *rank, int64_t *shape,
                           char *msg, size_t msg_size, void *user)
{
    (void)n;
    (void)user;
    if (tg_tensor_rank(in[0]) != 2) {
        snprintf(msg, msg_size, "x must be a matrix, got rank %d", tg_tensor_rank(in[0]));
        return TG_ERR_SHAPE;
    }
    *rank = 1;
    shape[0] = tg_tensor_dim(in[0], 0);
    return TG_OK;
}
static tg_status rowsum_fwd(tg_custom_call *c)
{
    int64_t N = c->input_shape[0][1];
    for (int64_t r = 0; r < c->output_numel; r++) {
        double acc = 0;
        for (int64_t j = 0; j < N; j++)
            acc += cget(c, c->input[0], r * N + j);
        cset(c, c->output, r, acc);
    }
    return TG_OK;
}
static tg_status rowsum_bwd(tg_custom_call *c)
{
    int64_t N = c->input_shape[0][1];
    for (int64_t r = 0; c->grad_input[0] && r < c->output_numel; r++)
        for (int64_t j = 0; j < N; j++)
            cset(c, c->grad_input[0], r * N + j,
                 cget(c, c->grad_input[0], r * N + j) + cget(c, c->grad_output, r));
    return TG_OK;
}

START_TEST(test_shapes)
{
    tg_ctx *ctx = tu_ctx_new();
    tg_custom_def d;
    memset(&d, 0, sizeof d);
    d.name = "rowsum";
    d.shape = sum_shape;
    d.forward_f32 = d.forward_f64 = rowsum_fwd;
    d.backward_f32 = d.backward_f64 = rowsum_bwd;
    tg_tensor *x = tu_in(ctx, TG_F64, TG_DIMS(2, 3), "x", VALS(1, 2, 3, 4, 5, 6));
    tg_tensor *y = tg_custom_op(ctx, &d, 1, &x);
    EXPECT_SHAPE(y, 2);
    tg_graph *g = tu_fwd(ctx, y);
    EXPECT_DATA(y, 0, 6, 15);
    tu_bwd(ctx, g, y, VALS(1, 2));
    EXPECT_GRAD(x, 0, 1, 1, 1, 2, 2, 2);
    tu_assert_gradcheck(ctx, y);
    /* explicit shape: (2) and a scalar (rank 0, the zero value) */
    d.shape = NULL;
    d.out_rank = 1;
    d.out_shape[0] = 2;
    EXPECT_SHAPE(tg_custom_op(ctx, &d, 1, &x), 2);
    /* the shape function refuses: its message is kept */
    tg_tensor *v = tg_input(ctx, TG_F64, TG_DIMS(4), "v");
    d.shape = sum_shape;
    ck_assert_ptr_null(tg_custom_op(ctx, &d, 1, &v));
    tu_assert_error(ctx, TG_ERR_SHAPE, "tg_custom_op: op 'rowsum': the shape function refused "
                                       "input 0 (4): x must be a matrix, got rank 1");
}
END_TEST

/* ---- build errors ------------------------------------------------------------------------- */
static void expect_refused(tg_custom_def d, int n, tg_tensor *const *in, tg_status st,
                           const char *needle)
{
    tg_ctx *ctx = tg_tensor_ctx(in ? in[0] : NULL);
    ck_assert_ptr_null(tg_custom_op(ctx, &d, n, in));
    tu_assert_error(ctx, st, needle);
    tg_ctx_clear_error(ctx);
}

START_TEST(test_build_errors)
{
    tg_ctx *ctx = tu_ctx_new();
    tg_tensor *x = tg_input(ctx, TG_F64, TG_DIMS(2), "x");
    tg_tensor *x32 = tg_input(ctx, TG_F32, TG_DIMS(2), "x32");
    tg_custom_def d = softplus_def(NULL);
    ck_assert_ptr_null(tg_custom_op(NULL, &d, 1, &x));
    ck_assert_ptr_null(tg_custom_op(ctx, NULL, 1, &x));
    tu_assert_error(ctx, TG_ERR_ARG, "tg_custom_op: definition is NULL");
    tg_ctx_clear_error(ctx);
    expect_refused(d, 0, &x, TG_ERR_ARG, "0 inputs: a custom op takes 1 to 4");
    tg_tensor *five[5] = {x, x, x, x, x};
    expect_refused(d, 5, five, TG_ERR_ARG, "5 inputs");
    ck_assert_ptr_null(tg_custom_op(ctx, &d, 1, NULL));
    tu_assert_error(ctx, TG_ERR_ARG, "(array NULL)");
    tg_ctx_clear_error(ctx);
    const char *bad_names[] = {"", "1up", "soft-plus", "a b", "x\n", "quote\"",
                               "abcdefghijklmnopqrstuvwxyz012345" /* 32 characters */};
    for (size_t i = 0; i < sizeof bad_names / sizeof bad_names[0]; i++) {
        d.name = bad_names[i];
        expect_refused(d, 1, &x, TG_ERR_ARG, "op name must be 1 to 31 characters");
    }
    d.name = NULL;
    expect_refused(d, 1, &x, TG_ERR_ARG, "op name must be");
    d.name = "abcdefghijklmnopqrstuvwxyz01234"; /* 31: fine */
    ck_assert_ptr_nonnull(tg_custom_op(ctx, &d, 1, &x));
    const char *taken[] = {"matmul", "softmax", "custom", "param", "input", "const", "leaf"};
    for (size_t i = 0; i < sizeof taken / sizeof taken[0]; i++) {
        d.name = taken[i];
        expect_refused(d, 1, &x, TG_ERR_ARG, "is taken by a built-in op");
    }
    d = softplus_def(NULL);
    d.backward_reads = TG_CUSTOM_READS_INPUT(1);
    expect_refused(d, 1, &x, TG_ERR_ARG, "backward_reads 0x2 names inputs it does not have");
    d.backward_reads = 1u << 7;
    expect_refused(d, 1, &x, TG_ERR_ARG, "backward_reads 0x80");
    d = softplus_def(NULL);
    tg_tensor *mixed[2] = {x, x32};
    expect_refused(d, 2, mixed, TG_ERR_DTYPE, "dtypes differ");
    d.out_rank = 7;
    expect_refused(d, 1, &x, TG_ERR_SHAPE, "output rank 7 out of range 0..6");
    d.out_rank = 2;
    d.out_shape[0] = 3;
    d.out_shape[1] = 0;
    expect_refused(d, 1, &x, TG_ERR_SHAPE, "output shape (3, 0) has dim 1 < 1");
    d.out_shape[1] = INT64_MAX / 2;
    expect_refused(d, 1, &x, TG_ERR_OVERFLOW, "is too large");
    /* another context's tensor */
    tg_ctx *other = tu_ctx_new();
    tg_tensor *o = tg_input(other, TG_F64, TG_DIMS(2), "o");
    d = softplus_def(NULL);
    tg_tensor *two[2] = {x, o};
    expect_refused(d, 2, two, TG_ERR_ARG, "belongs to another context");
    /* a NULL input propagates silently; a pending build error is kept */
    tg_tensor *with_null[2] = {x, NULL};
    ck_assert_ptr_null(tg_custom_op(ctx, &d, 2, with_null));
    ck_assert_int_eq(tg_ctx_status(ctx), TG_OK);
    ck_assert_ptr_null(tg_matmul(ctx, x, x, false, false)); /* rank 1: a build error */
    ck_assert_ptr_null(tg_custom_op(ctx, &d, 1, &x));
    tu_assert_error(ctx, TG_ERR_SHAPE, "tg_matmul");
}
END_TEST

/* tg_custom_error outside a tgrad call, and with TG_OK, still returns an error */
START_TEST(test_custom_error_api)
{
    tg_custom_call c;
    memset(&c, 0, sizeof c);
    ck_assert_int_eq(tg_custom_error(&c, TG_ERR_SHAPE, "x"), TG_ERR_SHAPE);
    ck_assert_int_eq(tg_custom_error(&c, TG_OK, "x"), TG_ERR_ARG);
    ck_assert_int_eq(tg_custom_error(NULL, TG_ERR_IO, "x"), TG_ERR_IO);
}
END_TEST

/* A callback's message becomes one printable line of valid UTF-8: newlines and tabs become
 * spaces; ESC, DEL, C1 controls and bytes that are not UTF-8 become '?'; valid UTF-8 stays. */
static tg_status ugly_fwd(tg_custom_call *c)
{
    return tg_custom_error(c, TG_ERR_ARG, "line1\nline2\r\tx \x1b[31mred\x7f \xff\xfe \xc2\x85 "
                                          "caf\xc3\xa9 \xe2\x82 end");
}

START_TEST(test_custom_error_one_line)
{
    tg_ctx *ctx = tu_ctx_new();
    tg_tensor *x = tu_in(ctx, TG_F64, TG_DIMS(2), "x", VALS(1, 2));
    tg_custom_def d = softplus_def(NULL);
    d.forward_f64 = ugly_fwd;
    tg_tensor *y = tg_custom_op(ctx, &d, 1, &x);
    tg_graph *g = tg_graph_new(ctx, &y, 1);
    ck_assert_int_eq(tg_graph_forward(g), TG_ERR_ARG);
    const char *m = tg_ctx_message(ctx);
    ck_assert_msg(strstr(m, "line1 line2  x ?[31mred? ?? ?? caf\xc3\xa9 ?? end") != NULL,
                  "message: '%s'", m);
    for (const unsigned char *p = (const unsigned char *)m; *p; p++)
        ck_assert_msg(*p >= 0x20 && *p != 0x7f, "control byte 0x%02x in '%s'", *p, m);
    tu_ctx_free(ctx);
}
END_TEST

/* Out of memory at every allocation of building and running a custom op. */
START_TEST(test_out_of_memory)
{
    for (long k = 0;; k++) {
        tu_failing_alloc st = {.budget = -1};
        tg_allocator al = tu_failing_allocator(&st);
        tg_ctx *ctx = tg_ctx_new_with(&al);
        ck_assert_ptr_nonnull(ctx);
        tg_tensor *x = tg_input(ctx, TG_F64, TG_DIMS(3), "x");
        tg_tensor *dy = tg_const(ctx, TG_F64, TG_DIMS(3), "dy");
        tg_set_requires_grad(x, true);
        st.budget = st.n_alloc + k; /* the k-th allocation from here on fails */
        tg_custom_def d = softplus_def(NULL);
        d.workspace = ws_16_per_thread;
        tg_tensor *y = tg_custom_op(ctx, &d, 1, &x);
        tg_graph *g = y ? tg_graph_new(ctx, &y, 1) : NULL;
        tg_status s = g ? tg_graph_forward(g) : tg_ctx_status(ctx);
        if (s == TG_OK)
            s = tg_graph_backward(g, y, dy);
        bool done = s == TG_OK;
        if (!done)
            ck_assert_msg(s == TG_ERR_NOMEM, "k = %ld: %s: %s", k, tg_status_str(s),
                          tg_ctx_message(ctx));
        tg_ctx_free(ctx);
        ck_assert_int_eq(st.n_alloc, st.n_free);
        if (done)
            break;
        ck_assert_int_lt(k, 1000);
    }
}
END_TEST

/* tg_ctx_set_error: the public way a library built on tgrad (libtgrad_dist) reports. */
START_TEST(test_set_error_kinds)
{
    tg_ctx *ctx = tg_ctx_new();
    tg_tensor *a = tg_input(ctx, TG_F64, TG_DIMS(2, 3), "a");
    ck_assert_int_eq(tg_ctx_set_error(NULL, TG_ERROR_BUILD, TG_ERR_IO, "f", "x"), TG_ERR_ARG);
    /* a run-time error: recorded, blocks nothing, dropped by the next call that runs */
    ck_assert_int_eq(tg_ctx_set_error(ctx, TG_ERROR_RUN, TG_ERR_IO, "my_save", "disk %d full",
                                      3), TG_ERR_IO);
    tu_assert_error(ctx, TG_ERR_IO, "my_save: disk 3 full");
    tg_tensor *s = tg_sum_all(ctx, a);
    ck_assert_ptr_nonnull(s);
    tg_graph *g = tg_graph_new(ctx, &s, 1);
    ck_assert_ptr_nonnull(g);
    ck_assert_int_eq(tg_graph_forward(g), TG_OK);
    ck_assert_int_eq(tg_ctx_status(ctx), TG_OK);
    /* a build error sticks and blocks builders; a later one (of either kind) is ignored */
    ck_assert_int_eq(tg_ctx_set_error(ctx, TG_ERROR_BUILD, TG_OK, NULL, "bad %s", "k"),
                     TG_ERR_ARG); /* OK is never a failure */
    tu_assert_error(ctx, TG_ERR_ARG, "tgrad: bad k");
    ck_assert_ptr_null(tg_sum_all(ctx, a));
    tg_ctx_set_error(ctx, TG_ERROR_RUN, TG_ERR_IO, "late", "ignored");
    tg_ctx_set_error(ctx, TG_ERROR_BUILD, TG_ERR_SHAPE, "late", "ignored");
    tu_assert_error(ctx, TG_ERR_ARG, "tgrad: bad k");
    tg_ctx_clear_error(ctx);
    ck_assert_ptr_nonnull(tg_sum_all(ctx, a));
    tg_ctx_free(ctx);
}
END_TEST

static Suite *custom_suite(void)
{
    Suite *s = suite_create("custom");
    TCase *tc = tu_tcase(s, "ops", 60);
    tcase_add_loop_test(tc, test_values_and_gradients, 0, 2);
    tcase_add_test(tc, test_gradcheck_correct_passes);
    tcase_add_test(tc, test_gradcheck_wrong_fails);
    tcase_add_loop_test(tc, test_gradcheck_assigning_backward_fails, 0, 2);
    tcase_add_test(tc, test_shared_input_accumulates);
    tcase_add_test(tc, test_f32_only_refuses_f64);
    tcase_add_test(tc, test_no_backward);
    tcase_add_test(tc, test_forward_error_propagates);
    tcase_add_test(tc, test_error_without_message);
    tcase_add_test(tc, test_backward_error_propagates);
    tcase_add_test(tc, test_error_inside_gradcheck);
    tcase_add_test(tc, test_thread_count_passed);
    tcase_add_test(tc, test_workspace);
    tcase_add_test(tc, test_workspace_huge);
    tcase_add_test(tc, test_backward_reads);
    tcase_add_test(tc, test_shapes);
    tcase_add_test(tc, test_build_errors);
    tcase_add_test(tc, test_custom_error_api);
    tcase_add_test(tc, test_set_error_kinds);
    tcase_add_test(tc, test_rules_as_ops);
    tcase_add_test(tc, test_custom_error_one_line);
    tcase_add_test(tc, test_out_of_memory);
    return s;
}

int main(void) { return tu_run(custom_suite()); }
