/*
 * test_grad.c - gradients as graph nodes (tg_grad): for every case of the gradient-check table
 * whose ops have reverse rules written as ops, in f64,
 *   - first order: the nodes tg_grad appends, run as outputs of a graph, equal the gradients
 *     tg_graph_backward gives the same loss (to 1e-12 relative);
 *   - second order (gradgradcheck): S = <grad L, v> for a fixed random v is differentiated by
 *     tg_gradcheck against central differences, and reverse-over-reverse (tg_grad of S) equals
 *     tg_graph_backward of S (Hessian-vector products both ways, to 1e-12);
 * a case whose op has no such rule yet is refused with ::TG_ERR_NOGRAD naming the op, and the
 * ops expected to have one are listed here, so a rule that goes missing fails. Also: a gradient
 * used in a loss (a gradient penalty), inputs the outputs do not depend on, intermediate wrt,
 * seeds, argument errors, thread invariance.
 */
#include "testutil.h"
#include "opcases.h"
#include "tgrad_nn.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { MAX_WRT = 64 };

/* The ops whose reverse rule is written as ops (ops/vjp.c); docs/autodiff.md's table. */
static const char *const with_rule[] = {
    "matmul",
    "transpose",
    "permute",
    "reshape",
    "narrow",
    "contiguous",
    "scale",
    "add",
    "sub",
    "mul",
    "div",
    "neg",
    "exp",
    "log",
    "sqrt",
    "tanh",
    "sigmoid",
    "silu",
    "gelu_tanh",
    "sum",
    "mean",
    "softmax",
    "log_softmax",
    "layer_norm",
    "dense",
    "concat",
    "mse_loss",
    "add_mask",
    "relu",
    "dense_act",
    "flash_attention",
    "erf",
    "gelu",
    "dropout",
    "max",
    "relu_gate",
    "cross_entropy",
    "embedding",
};

static bool has_rule(const char *op)
{
    for (size_t i = 0; i < sizeof with_rule / sizeof *with_rule; i++)
        if (!strcmp(with_rule[i], op))
            return true;
    return false;
}

/* The differentiable leaves y depends on (inputs with requires_grad and parameters), in the
 * order of a graph over y. */
static int leaves_of(tg_ctx *ctx, tg_tensor *y, tg_tensor **wrt)
{
    tg_graph *g = tg_graph_new(ctx, &y, 1);
    ck_assert_ptr_nonnull(g);
    int n = 0;
    for (int64_t i = 0; i < tg_graph_size(g); i++) {
        tg_tensor *t = tg_graph_node(g, i);
        tg_kind k = tg_tensor_kind(t);
        if ((k == TG_KIND_INPUT || k == TG_KIND_PARAM) && tg_tensor_requires_grad(t)) {
            ck_assert_int_lt(n, MAX_WRT);
            wrt[n++] = t;
        }
    }
    tg_graph_free(g);
    return n;
}

/* A constant like @p t with values uniform in [lo, hi) from the context RNG. */
static tg_tensor *random_like(tg_ctx *ctx, const tg_tensor *t, double lo, double hi)
{
    int64_t shape[TG_MAX_RANK];
    int rank = tg_tensor_rank(t);
    for (int d = 0; d < rank; d++)
        shape[d] = tg_tensor_dim(t, d);
    tg_tensor *c = tg_const(ctx, tg_tensor_dtype(t), rank, shape, "r");
    ck_assert_ptr_nonnull(c);
    tg_fill_uniform(c, lo, hi);
    return c;
}

/* max |a - b| / max(|b|, 1) over n values. */
static double rel_diff(const double *a, const double *b, int64_t n)
{
    double m = 0;
    for (int64_t i = 0; i < n; i++) {
        double d = fabs(a[i] - b[i]) / fmax(fabs(b[i]), 1.0);
        if (!(d <= m)) /* NaN counts as a difference */
            m = isnan(d) ? INFINITY : d;
    }
    return m;
}

/* The values of @p t (f64) into a new array. */
static double *values(const tg_tensor *t)
{
    int64_t n = tg_tensor_numel(t);
    double *v = malloc(sizeof *v * (size_t)(n ? n : 1));
    ck_assert_ptr_nonnull(v);
    ck_assert_int_eq(tg_tensor_get_data(t, v, TG_F64, (size_t)n), TG_OK);
    return v;
}

/* Zero the gradient buffers of @p n leaves (those a graph's backward does not reach keep
 * what an earlier backward left). */
static void zero_leaf_grads(tg_tensor *const *t, int n)
{
    for (int j = 0; j < n; j++) {
        double *g = tg_tensor_grad(t[j]);
        if (g)
            memset(g, 0, sizeof *g * (size_t)tg_tensor_numel(t[j]));
    }
}

/* A leaf's gradient after a backward (f64; none: zeros) into a new array. */
static double *leaf_grad(tg_tensor *t)
{
    int64_t n = tg_tensor_numel(t);
    double *v = calloc((size_t)(n ? n : 1), sizeof *v);
    ck_assert_ptr_nonnull(v);
    const double *g = tg_tensor_grad(t);
    if (g)
        memcpy(v, g, sizeof *v * (size_t)n);
    return v;
}

/* Case @p c: first order against tg_graph_backward, then the second-order checks. Returns
 * false when the case's ops lack a rule (checked: TG_ERR_NOGRAD naming one of them). */
static char missing[1024]; /* the ops named by refusals, for the summary */

static bool check_case(const tg_opcase *c, int threads)
{
    tg_ctx *ctx = tu_ctx_new();
    tg_ctx_set_threads(ctx, threads);
    tg_ctx_seed(ctx, 7);
    tg_tensor *y = c->build(ctx, TG_F64);
    ck_assert_msg(y != NULL, "%s/%s: %s", c->op, c->name, tg_ctx_message(ctx));
    tg_tensor *wrt[MAX_WRT], *grads[MAX_WRT];
    int n = leaves_of(ctx, y, wrt);
    ck_assert_int_gt(n, 0);
    tg_tensor *L = tg_sum_all(ctx, tg_mul(ctx, y, random_like(ctx, y, 0.5, 1.5)));
    tg_status s = tg_grad(ctx, 1, &L, NULL, n, wrt, grads);
    if (s == TG_ERR_NOGRAD) { /* the op named is one without a rule */
        const char *m = tg_ctx_message(ctx), *q = strstr(m, "op '");
        ck_assert_msg(q && strstr(m, "has no reverse rule"), "%s/%s: %s", c->op, c->name, m);
        char op[64];
        ck_assert_int_eq(sscanf(q, "op '%63[^']'", op), 1);
        ck_assert_msg(!has_rule(op), "%s/%s: %s", c->op, c->name, m);
        char key[68];
        snprintf(key, sizeof key, " %s,", op);
        if (!strstr(missing, key) && strlen(missing) + strlen(key) < sizeof missing)
            strcat(missing, key);
        tu_ctx_free(ctx);
        return false;
    }
    ck_assert_msg(s == TG_OK, "%s/%s: %s", c->op, c->name, tg_ctx_message(ctx));
    /* first order: the gradient nodes against the backward kernels */
    tg_tensor *outs[1 + MAX_WRT] = {L};
    memcpy(outs + 1, grads, sizeof *grads * (size_t)n);
    tg_graph *g = tg_graph_new(ctx, outs, 1 + n);
    ck_assert_msg(g != NULL, "%s/%s: %s", c->op, c->name, tg_ctx_message(ctx));
    ck_assert_int_eq(tg_graph_forward(g), TG_OK);
    zero_leaf_grads(wrt, n);
    ck_assert_int_eq(tg_graph_backward(g, L, NULL), TG_OK);
    for (int j = 0; j < n; j++) {
        double *a = values(grads[j]), *b = leaf_grad(wrt[j]);
        double d = rel_diff(a, b, tg_tensor_numel(wrt[j]));
        ck_assert_msg(d <= 1e-12, "%s/%s: d/d%s differs from backward by %g", c->op, c->name,
                      tg_tensor_name(wrt[j]), d);
        free(a);
        free(b);
    }
    tg_graph_free(g);
    /* second order: S = sum_j <grads[j], v_j> */
    tg_tensor *S = NULL;
    for (int j = 0; j < n; j++) {
        tg_tensor *t = tg_sum_all(ctx, tg_mul(ctx, grads[j], random_like(ctx, grads[j], -1, 1)));
        S = S ? tg_add(ctx, S, t) : t;
    }
    tg_gradcheck_opts o = tg_gradcheck_defaults(TG_F64);
    tg_gradcheck_report r;
    s = tg_gradcheck(ctx, S, &o, &r);
    ck_assert_msg(s == TG_OK || (s == TG_ERR_NOGRAD && !tg_tensor_requires_grad(S)),
                  "%s/%s second order: %s", c->op, c->name, r.message);
    if (s == TG_OK) { /* reverse over reverse against the backward of S */
        tg_tensor *hv[MAX_WRT];
        ck_assert_msg(tg_grad(ctx, 1, &S, NULL, n, wrt, hv) == TG_OK, "%s/%s: %s", c->op, c->name,
                      tg_ctx_message(ctx));
        tg_tensor *o2[1 + MAX_WRT] = {S};
        memcpy(o2 + 1, hv, sizeof *hv * (size_t)n);
        tg_graph *g2 = tg_graph_new(ctx, o2, 1 + n);
        ck_assert_ptr_nonnull(g2);
        ck_assert_int_eq(tg_graph_forward(g2), TG_OK);
        zero_leaf_grads(wrt, n);
        ck_assert_int_eq(tg_graph_backward(g2, S, NULL), TG_OK);
        for (int j = 0; j < n; j++) {
            double *a = values(hv[j]), *b = leaf_grad(wrt[j]);
            double d = rel_diff(a, b, tg_tensor_numel(wrt[j]));
            ck_assert_msg(d <= 1e-12, "%s/%s: Hv for %s differs by %g", c->op, c->name,
                          tg_tensor_name(wrt[j]), d);
            free(a);
            free(b);
        }
        tg_graph_free(g2);
    }
    tu_ctx_free(ctx);
    return true;
}

/* Every case of the table: those with rules pass both orders; every op listed has a case that
 * passes. */
START_TEST(test_every_case)
{
    int passed = 0;
    bool seen[sizeof with_rule / sizeof *with_rule] = {false};
    for (int i = 0; i < tg_n_opcases; i++) {
        if (!check_case(&tg_opcases[i], 1))
            continue;
        passed++;
        for (size_t k = 0; k < sizeof with_rule / sizeof *with_rule; k++)
            seen[k] |= !strcmp(with_rule[k], tg_opcases[i].op);
    }
    for (size_t k = 0; k < sizeof with_rule / sizeof *with_rule; k++)
        ck_assert_msg(seen[k], "op %s: no case passed", with_rule[k]);
    fprintf(stderr,
            "tg_grad: %d of %d cases pass first and second order; refused (no rule "
            "as ops yet):%s\n",
            passed, tg_n_opcases, missing);
}
END_TEST

/* The gradient and tangent nodes' values are the same bits on 1 and 2 threads. */
START_TEST(test_threads)
{
    double *v[2] = {NULL, NULL};
    int64_t n = 0;
    for (int t = 1; t <= 2; t++) {
        tg_ctx *ctx = tu_ctx_new();
        tg_ctx_set_threads(ctx, t);
        tg_ctx_seed(ctx, 3);
        int64_t sa[2] = {48, 64}, sb[2] = {64, 40};
        tg_tensor *a = tg_input(ctx, TG_F32, 2, sa, "a"), *b = tg_param(ctx, TG_F32, 2, sb, "b");
        tg_set_requires_grad(a, true);
        tg_fill_uniform(a, -1, 1);
        tg_fill_uniform(b, -1, 1);
        tg_tensor *y = tg_log_softmax(ctx, tg_tanh(ctx, tg_matmul(ctx, a, b, false, false)));
        tg_tensor *L = tg_mean_all(ctx, tg_mul(ctx, y, y));
        tg_tensor *wrt[2] = {a, b}, *g[3];
        ck_assert_int_eq(tg_grad(ctx, 1, &L, NULL, 2, wrt, g), TG_OK);
        tg_tensor *ua = tg_const(ctx, TG_F32, 2, sa, "ua"); /* and a JVP of y along ua */
        tg_fill_uniform(ua, -1, 1);
        ck_assert_int_eq(tg_jvp(ctx, 1, &a, &ua, 1, &y, &g[2]), TG_OK);
        tg_graph *gr = tg_graph_new(ctx, g, 3);
        ck_assert_int_eq(tg_graph_forward(gr), TG_OK);
        n = tg_tensor_numel(a) + tg_tensor_numel(b) + tg_tensor_numel(y);
        v[t - 1] = malloc(sizeof(float) * (size_t)n);
        tg_tensor_get_data(g[0], v[t - 1], TG_F32, (size_t)tg_tensor_numel(a));
        tg_tensor_get_data(g[1], (float *)v[t - 1] + tg_tensor_numel(a), TG_F32,
                           (size_t)tg_tensor_numel(b));
        tg_tensor_get_data(g[2], (float *)v[t - 1] + tg_tensor_numel(a) + tg_tensor_numel(b),
                           TG_F32, (size_t)tg_tensor_numel(y));
        tu_ctx_free(ctx);
    }
    ck_assert_mem_eq(v[0], v[1], sizeof(float) * (size_t)n);
    free(v[0]);
    free(v[1]);
}
END_TEST

/* A gradient in a loss (L + lambda |dL/dx|^2, a gradient penalty), trained on by the ordinary
 * backward: its parameter gradient matches central differences (tg_gradcheck). */
START_TEST(test_gradient_penalty)
{
    tg_ctx *ctx = tu_ctx_new();
    tg_ctx_seed(ctx, 11);
    int64_t sx[2] = {4, 6}, sw[2] = {6, 5};
    tg_tensor *x = tg_input(ctx, TG_F64, 2, sx, "x"), *w = tg_param(ctx, TG_F64, 2, sw, "w");
    tg_set_requires_grad(x, true);
    tg_fill_uniform(x, -1, 1);
    tg_fill_uniform(w, -1, 1);
    tg_tensor *L = tg_mean_all(ctx, tg_sigmoid(ctx, tg_matmul(ctx, x, w, false, false)));
    tg_tensor *gx;
    ck_assert_int_eq(tg_grad(ctx, 1, &L, NULL, 1, &x, &gx), TG_OK);
    tg_tensor *P = tg_add(ctx, L, tg_scale(ctx, tg_sum_all(ctx, tg_mul(ctx, gx, gx)), 10.0));
    tg_gradcheck_report r;
    ck_assert_msg(tg_gradcheck(ctx, P, NULL, &r) == TG_OK, "%s", r.message);
    tu_ctx_free(ctx);
}
END_TEST

/* Inputs the outputs do not use get zeros; an intermediate result can be a wrt; seeds weight
 * the outputs (two outputs summed). */
START_TEST(test_wrt_and_seeds)
{
    tg_ctx *ctx = tu_ctx_new();
    tg_ctx_seed(ctx, 5);
    int64_t s3[1] = {3};
    tg_tensor *a = tg_input(ctx, TG_F64, 1, s3, "a"), *b = tg_input(ctx, TG_F64, 1, s3, "b");
    tg_set_requires_grad(a, true);
    tg_set_requires_grad(b, true);
    double av[3] = {0.5, -1.0, 2.0};
    tg_tensor_set_data(a, av, TG_F64, 3);
    tg_fill(b, 1.0);
    tg_tensor *h = tg_exp(ctx, a);       /* intermediate */
    tg_tensor *y1 = tg_mul(ctx, h, h);   /* e^{2a} */
    tg_tensor *y2 = tg_scale(ctx, h, 3); /* 3 e^a */
    tg_tensor *s1 = tg_const(ctx, TG_F64, 1, s3, "s1"), *s2 = tg_const(ctx, TG_F64, 1, s3, "s2");
    tg_fill(s1, 2.0);
    tg_fill(s2, -1.0);
    tg_tensor *outs[2] = {y1, y2}, *seeds[2] = {s1, s2}, *wrt[3] = {a, h, b}, *g[3];
    ck_assert_int_eq(tg_grad(ctx, 2, outs, seeds, 3, wrt, g), TG_OK);
    tg_graph *gr = tg_graph_new(ctx, g, 3);
    ck_assert_int_eq(tg_graph_forward(gr), TG_OK);
    for (int i = 0; i < 3; i++) {
        double e = exp(av[i]);
        ck_assert_double_eq_tol(tg_get(g[0], i), 2 * 2 * e * e - 3 * e, 1e-12);
        ck_assert_double_eq_tol(tg_get(g[1], i), 2 * 2 * e - 3, 1e-12);
        ck_assert_double_eq(tg_get(g[2], i), 0.0);
    }
    tu_ctx_free(ctx);
}
END_TEST

/* Argument errors: build errors naming the argument, grads all NULL. */
START_TEST(test_errors)
{
    int64_t s2[1] = {2};
    struct {
        int which;
        tg_status want;
        const char *msg;
    } cases[] = {{0, TG_ERR_ARG, "at least one output"},
                 {1, TG_ERR_SHAPE, "has 2 elements"},
                 {2, TG_ERR_SHAPE, "seed 0 must be"},
                 {3, TG_ERR_DTYPE, "not f32 or f64"},
                 {4, TG_ERR_ARG, "another context"}};
    for (size_t k = 0; k < sizeof cases / sizeof *cases; k++) {
        tg_ctx *ctx = tu_ctx_new(), *other = tu_ctx_new();
        tg_tensor *x = tg_input(ctx, TG_F64, 1, s2, "x");
        tg_set_requires_grad(x, true);
        tg_tensor *v = tg_exp(ctx, x), *y = tg_sum_all(ctx, v), *g = (tg_tensor *)1;
        tg_tensor *seed = tg_const(ctx, TG_F32, 1, s2, "s");
        tg_tensor *ids = tg_input(ctx, TG_I32, 1, s2, "ids");
        tg_tensor *ox = tg_input(other, TG_F64, 1, s2, "ox");
        tg_status s = cases[k].which == 0   ? tg_grad(ctx, 0, &y, NULL, 1, &x, &g)
                      : cases[k].which == 1 ? tg_grad(ctx, 1, &v, NULL, 1, &x, &g)
                      : cases[k].which == 2 ? tg_grad(ctx, 1, &v, &seed, 1, &x, &g)
                      : cases[k].which == 3 ? tg_grad(ctx, 1, &y, NULL, 1, &ids, &g)
                                            : tg_grad(ctx, 1, &y, NULL, 1, &ox, &g);
        ck_assert_int_eq(s, cases[k].want);
        ck_assert_msg(strstr(tg_ctx_message(ctx), cases[k].msg), "%s", tg_ctx_message(ctx));
        ck_assert_ptr_null(g);
        tu_ctx_free(ctx);
        tu_ctx_free(other);
    }
}
END_TEST

/* tg_gradgradcheck: ops and modules with rules pass in f64, custom ops with rules too; a custom
 * op without them is refused naming it, as a run-time error (the context builds on). */
START_TEST(test_gradgradcheck)
{
    static const char *const ok_ops[] = {"mha", "sdpa", "layer_norm", "softmax", "relu"};
    for (int i = 0; i < tg_n_opcases; i++) {
        const tg_opcase *c = &tg_opcases[i];
        bool want = false, custom = !strcmp(c->op, "custom");
        bool refused = custom && !strcmp(c->name, "reads-output"); /* no rules as ops */
        for (size_t k = 0; k < sizeof ok_ops / sizeof *ok_ops; k++)
            want |= !strcmp(ok_ops[k], c->op);
        if (!want && !custom)
            continue;
        tg_ctx *ctx = tu_ctx_new();
        tg_ctx_seed(ctx, 9);
        tg_tensor *y = c->build(ctx, TG_F64);
        ck_assert_ptr_nonnull(y);
        tg_gradcheck_report r;
        tg_status s = tg_gradgradcheck(ctx, y, NULL, &r);
        if (refused) {
            ck_assert_int_eq(s, TG_ERR_NOGRAD);
            ck_assert_ptr_nonnull(strstr(r.message, "has no reverse rule"));
            ck_assert_ptr_nonnull(strstr(tg_ctx_message(ctx), "op '"));
            ck_assert_ptr_nonnull(tg_exp(ctx, y)); /* not a sticky build error */
        } else {
            ck_assert_msg(s == TG_OK, "%s/%s: %s", c->op, c->name, r.message);
        }
        tu_ctx_free(ctx);
    }
    ck_assert_int_eq(tg_gradgradcheck(NULL, NULL, NULL, NULL), TG_ERR_ARG);
}
END_TEST

/* The rules of dropout and max read the mask of the same run (grad_mask): d dropout(x)/dx is
 * keep / (1 - p) (1 in evaluation mode), d max/dx the one-hot of the first arg-max, in f32 and
 * f64, reverse and forward. In a graph without gradients the planner keeps dropout's saved
 * mask until its reader has run, with buffers reused and freed ones poisoned (against
 * no_reuse). */
static tg_tensor *ones(tg_ctx *ctx, tg_dtype dt, int rank, const int64_t *shape)
{
    tg_tensor *c = tg_const(ctx, dt, rank, shape, "ones");
    tg_fill(c, 1);
    return c;
}

START_TEST(test_grad_mask)
{
    for (int v = 0; v < 8; v++) {
        tg_dtype dt = v & 1 ? TG_F64 : TG_F32;
        bool reuse = v & 2, eval = v & 4;
        tg_ctx *ctx = tu_ctx_new();
        tg_ctx_seed(ctx, 11);
        tg_ctx_set_training(ctx, !eval);
        int64_t s[2] = {8, 64};
        tg_tensor *x = tg_input(ctx, dt, 2, s, "x");
        tg_fill_uniform(x, 0.5, 1.5);
        tg_set(x, 64 * 3 + 5, 7.0); /* row 3: a tie of maxima at 5 and 9, the first wins */
        tg_set(x, 64 * 3 + 9, 7.0);
        tg_set_requires_grad(x, true);
        tg_tensor *d = tg_dropout(ctx, x, 0.4), *m = tg_max(ctx, x, 1, false), *z = d;
        for (int k = 0; k < 6; k++) /* values alive after dropout's: reuse candidates */
            z = tg_exp(ctx, tg_scale(ctx, z, 0.1));
        tg_tensor *gd, *gm, *tm, *u = random_like(ctx, x, -1, 1);
        ck_assert_int_eq(tg_grad(ctx, 1, &d, (tg_tensor *[]){ones(ctx, dt, 2, s)}, 1, &x, &gd),
                         TG_OK);
        ck_assert_int_eq(tg_grad(ctx, 1, &m, (tg_tensor *[]){ones(ctx, dt, 1, s)}, 1, &x, &gm),
                         TG_OK);
        ck_assert_int_eq(tg_jvp(ctx, 1, &x, &u, 1, &m, &tm), TG_OK);
        tg_tensor *outs[] = {tg_sum_all(ctx, z), gd, gm, tm, d};
        tg_graph_opts o = {.no_grad = true, .no_reuse = !reuse, .poison = reuse};
        tg_graph *g = tg_graph_new_opts(ctx, outs, 5, &o);
        ck_assert_ptr_nonnull(g);
        ck_assert_int_eq(tg_graph_forward(g), TG_OK);
        double keep = dt == TG_F32 ? (double)(float)(1 / 0.6) : 1 / 0.6;
        int64_t dropped = 0;
        for (int64_t i = 0; i < 8 * 64; i++) {
            double want = eval ? 1 : tg_get(d, i) != 0 ? keep : 0;
            dropped += tg_get(d, i) == 0;
            ck_assert_double_eq(tg_get(gd, i), want);
        }
        ck_assert(eval ? dropped == 0 : dropped > 100 && dropped < 300);
        for (int64_t r = 0; r < 8; r++) {
            int64_t best = 0;
            for (int64_t c = 1; c < 64; c++)
                best = tg_get(x, r * 64 + c) > tg_get(x, r * 64 + best) ? c : best;
            ck_assert(r != 3 || best == 5);
            for (int64_t c = 0; c < 64; c++)
                ck_assert_double_eq(tg_get(gm, r * 64 + c), c == best);
            ck_assert_double_eq(tg_get(tm, r), tg_get(u, r * 64 + best));
        }
        tu_ctx_free(ctx);
    }
}
END_TEST

/* tg_one_hot (the rules' class rows): values in f32 and f64, the ignored id inside and outside
 * the classes, a bad id refused at the forward run naming it, builder errors. */
START_TEST(test_one_hot)
{
    for (int d = 0; d < 2; d++) {
        tg_dtype dt = d ? TG_F64 : TG_F32;
        for (int k = 0; k < 2; k++) {
            int64_t ig = k ? 2 : -100, s4[2] = {2, 2};
            int32_t ids[4] = {0, 3, (int32_t)ig, 1};
            tg_ctx *ctx = tu_ctx_new();
            tg_tensor *t = tg_input(ctx, TG_I32, 2, s4, "t");
            tg_tensor_set_data(t, ids, TG_I32, 4);
            tg_tensor *y = tg_one_hot(ctx, t, 4, ig, dt);
            ck_assert_int_eq(tg_tensor_rank(y), 3);
            ck_assert_int_eq(tg_tensor_dim(y, 2), 4);
            ck_assert(!tg_tensor_requires_grad(y));
            tg_graph *g = tg_graph_new(ctx, &y, 1);
            ck_assert_int_eq(tg_graph_forward(g), TG_OK);
            for (int n = 0; n < 4; n++)
                for (int c = 0; c < 4; c++)
                    ck_assert_double_eq(tg_get(y, n * 4 + c), n != 2 && ids[n] == c ? 1.0 : 0.0);
            ids[1] = 4; /* neither a class nor the ignored id */
            tg_tensor_set_data(t, ids, TG_I32, 4);
            ck_assert_int_eq(tg_graph_forward(g), TG_ERR_ARG);
            ck_assert_ptr_nonnull(strstr(tg_ctx_message(ctx), "'t'[1] = 4 is not a class id"));
            tu_ctx_free(ctx);
        }
    }
    int64_t s2[1] = {2};
    for (int k = 0; k < 3; k++) {
        tg_ctx *ctx = tu_ctx_new();
        tg_tensor *f = tg_input(ctx, TG_F32, 1, s2, "f"), *t = tg_input(ctx, TG_I32, 1, s2, "t");
        tg_tensor *y = k == 0   ? tg_one_hot(ctx, f, 3, -1, TG_F32)
                       : k == 1 ? tg_one_hot(ctx, t, 0, -1, TG_F32)
                                : tg_one_hot(ctx, t, 3, -1, TG_I32);
        ck_assert_ptr_null(y);
        ck_assert_int_eq(tg_ctx_status(ctx), k == 1 ? TG_ERR_ARG : TG_ERR_DTYPE);
        tu_ctx_free(ctx);
    }
}
END_TEST

/* tg_hessian: of sum(x^3) + (sum x)^2, exactly 6 x_i [i = j] + 2; of a small network's loss,
 * symmetric and equal to the Jacobian of its gradient (tg_jacobian of tg_grad's node) to 1e-12;
 * tg_hvp equals H v. tg_jacobian of a softmax: diag(p) - p p^T; by columns (tg_jacobian_fwd)
 * it equals the one by rows. Errors are run-time. */
START_TEST(test_hessian_jacobian)
{
    enum { N = 4 };
    tg_ctx *ctx = tu_ctx_new();
    tg_ctx_seed(ctx, 21);
    tg_tensor *x = tg_input(ctx, TG_F64, TG_DIMS(N), "x");
    tg_set_requires_grad(x, true);
    tg_fill_uniform(x, -1, 1);
    tg_tensor *s1 = tg_sum_all(ctx, x);
    tg_tensor *y =
        tg_add(ctx, tg_sum_all(ctx, tg_mul(ctx, tg_mul(ctx, x, x), x)), tg_mul(ctx, s1, s1));
    double H[N * N], J[N * N], P[N];
    ck_assert_int_eq(tg_hessian(ctx, y, x, H, N * N), TG_OK);
    for (int i = 0; i < N; i++)
        for (int j = 0; j < N; j++)
            ck_assert_double_eq_tol(H[i * N + j], (i == j ? 6 * tg_get(x, i) : 0) + 2, 1e-13);
    /* a network: log_softmax(tanh(x W)) . c */
    tg_tensor *w = tg_param(ctx, TG_F64, TG_DIMS(N, 3), "w");
    tg_fill_uniform(w, -1, 1);
    tg_tensor *z = tg_log_softmax(
        ctx, tg_tanh(ctx, tg_matmul(ctx, tg_reshape(ctx, x, 2, (const int64_t[]){1, N}), w, false,
                                    false)));
    tg_tensor *c = tg_const(ctx, TG_F64, TG_DIMS(1, 3), "c");
    tg_fill_uniform(c, 0.5, 1.5);
    tg_tensor *L = tg_sum_all(ctx, tg_mul(ctx, z, c)), *gx;
    ck_assert_int_eq(tg_grad(ctx, 1, &L, NULL, 1, &x, &gx), TG_OK);
    ck_assert_int_eq(tg_hessian(ctx, L, x, H, N * N), TG_OK);
    ck_assert_int_eq(tg_jacobian(ctx, gx, x, J, N * N), TG_OK);
    for (int i = 0; i < N * N; i++) {
        ck_assert_double_eq_tol(H[i], J[i], 1e-12 * fmax(1, fabs(J[i])));
        ck_assert_double_eq_tol(H[i], H[(i % N) * N + i / N], 1e-12 * fmax(1, fabs(H[i])));
    }
    tg_tensor *v = tg_const(ctx, TG_F64, TG_DIMS(N), "v"), *hv;
    tg_fill_uniform(v, -1, 1);
    ck_assert_int_eq(tg_hvp(ctx, L, 1, &x, &v, &hv), TG_OK);
    tg_graph *g = tg_graph_new(ctx, &hv, 1);
    ck_assert_int_eq(tg_graph_forward(g), TG_OK);
    for (int i = 0; i < N; i++) {
        double want = 0;
        for (int j = 0; j < N; j++)
            want += H[i * N + j] * tg_get(v, j);
        ck_assert_double_eq_tol(tg_get(hv, i), want, 1e-12);
    }
    /* the Jacobian of a softmax */
    tg_tensor *p = tg_softmax(ctx, x);
    ck_assert_int_eq(tg_jacobian(ctx, p, x, J, N * N), TG_OK);
    tg_graph *gp = tg_graph_new(ctx, &p, 1);
    ck_assert_int_eq(tg_graph_forward(gp), TG_OK);
    tg_tensor_get_data(p, P, TG_F64, N);
    for (int i = 0; i < N; i++)
        for (int j = 0; j < N; j++)
            ck_assert_double_eq_tol(J[i * N + j], (i == j ? P[i] : 0) - P[i] * P[j], 1e-15);
    /* by columns (tg_jacobian_fwd) = by rows, on a non-square Jacobian: (2, 3) from x (4) */
    double Jr[6 * N], Jc[6 * N];
    tg_tensor *y6 =
        tg_tanh(ctx, tg_matmul(ctx,
                               tg_reshape(ctx, tg_concat(ctx, (tg_tensor *[]){x, x}, 2, 0), 2,
                                          (const int64_t[]){2, N}),
                               w, false, false));
    ck_assert_int_eq(tg_jacobian(ctx, y6, x, Jr, 6 * N), TG_OK);
    ck_assert_int_eq(tg_jacobian_fwd(ctx, y6, x, Jc, 6 * N), TG_OK);
    for (int i = 0; i < 6 * N; i++)
        ck_assert_double_eq_tol(Jr[i], Jc[i], 1e-15 * fmax(1, fabs(Jr[i])));
    ck_assert_int_eq(tg_jacobian_fwd(ctx, y6, x, Jc, 6 * N - 1), TG_ERR_ARG);
    /* errors: run-time, the context builds on */
    ck_assert_int_eq(tg_hessian(ctx, y, x, H, N * N - 1), TG_ERR_ARG);
    ck_assert_int_eq(tg_hessian(ctx, p, x, H, N * N), TG_ERR_SHAPE);
    ck_assert_ptr_nonnull(strstr(tg_ctx_message(ctx), "scalar"));
    ck_assert_ptr_nonnull(tg_exp(ctx, x));
    tu_ctx_free(ctx);
}
END_TEST

/* tg_jvp in f32 and bf16 graphs: the encoder layer's tangent along x in a graph of bf16
 * products is within bf16's error of the f32 graph's (relative 2^-6 of its largest value), and
 * the f32 graph's is within f32's of the f64 layer's; the same bits for 1 and 2 threads. */
START_TEST(test_jvp_bf16)
{
    double *ref = NULL;
    int64_t n = 0;
    for (int v = 0; v < 4; v++) { /* f64, f32, bf16 on 1 thread, bf16 on 2 threads */
        tg_dtype dt = v == 0 ? TG_F64 : TG_F32;
        tg_ctx *ctx = tu_ctx_new();
        tg_ctx_seed(ctx, 31);
        tg_ctx_set_threads(ctx, v == 3 ? 2 : 1);
        tg_ctx_set_training(ctx, false);
        tg_encoder_config c = tg_encoder_config_default(16, 2);
        c.d_ff = 32;
        tg_encoder_layer l;
        ck_assert_int_eq(tg_encoder_layer_init(ctx, &l, dt, &c, NULL), TG_OK);
        tg_tensor *x = tg_input(ctx, dt, TG_DIMS(2, 5, 16), "x");
        tg_tensor *u = tg_const(ctx, dt, TG_DIMS(2, 5, 16), "u"), *t;
        tg_fill_uniform(x, -1, 1);
        tg_fill_uniform(u, -1, 1);
        tg_tensor *y = tg_encoder_layer_forward(ctx, &l, x, NULL);
        ck_assert_int_eq(tg_jvp(ctx, 1, &x, &u, 1, &y, &t), TG_OK);
        tg_graph_opts o = {.precision = v >= 2 ? TG_PRECISION_BF16 : TG_PRECISION_F32};
        tg_graph *g = tg_graph_new_opts(ctx, &t, 1, &o);
        ck_assert_ptr_nonnull(g);
        ck_assert_int_eq(tg_graph_forward(g), TG_OK);
        double *got = values(t), big = 0, err = 0;
        n = tg_tensor_numel(t);
        if (!ref) {
            ref = got;
            tu_ctx_free(ctx);
            continue;
        }
        for (int64_t i = 0; i < n; i++) {
            big = fmax(big, fabs(ref[i]));
            err = fmax(err, fabs(got[i] - ref[i]));
        }
        ck_assert_msg(err <= (v == 1 ? 1e-5 : 0x1p-6) * big, "%d: %g of %g", v, err, big);
        if (v == 3) /* against the 1-thread bf16 run, bit for bit */
            ck_assert_mem_eq(got, ref + n, sizeof *got * (size_t)n);
        if (v == 2) {
            ref = realloc(ref, sizeof *ref * (size_t)n * 2);
            memcpy(ref + n, got, sizeof *got * (size_t)n);
        }
        free(got);
        tu_ctx_free(ctx);
    }
    free(ref);
}
END_TEST

/* The ops with a forward-mode rule written as ops (src/graph/jvp.c); docs/autodiff.md. */
static const char *const with_jvp[] = {
    "scale",      "neg",           "add",       "sub",       "mul",
    "div",        "exp",           "log",       "sqrt",      "tanh",
    "sigmoid",    "silu",          "gelu_tanh", "relu",      "erf",
    "gelu",       "sum",           "mean",      "softmax",   "log_softmax",
    "matmul",     "dense",         "embedding", "permute",   "transpose",
    "reshape",    "contiguous",    "narrow",    "concat",    "add_mask",
    "layer_norm", "cross_entropy", "mse_loss",  "dense_act", "flash_attention",
    "dropout",    "max",           "relu_gate",
};

static bool has_jvp(const char *op)
{
    for (size_t i = 0; i < sizeof with_jvp / sizeof *with_jvp; i++)
        if (!strcmp(with_jvp[i], op))
            return true;
    return false;
}

/* <a, b> over two tensors' values (f64). */
static double dot_values(const tg_tensor *a, const tg_tensor *b)
{
    double *x = values(a), *y = values(b), d = 0;
    for (int64_t i = 0; i < tg_tensor_numel(a); i++)
        d += x[i] * y[i];
    free(x);
    free(y);
    return d;
}

/* Case @p c in forward mode: <r, J u> from tg_jvp against the adjoint <J^T r, u> (tg_grad) to
 * 1e-12 and against central differences of <r, y> along u. False when refused (checked). */
static bool check_jvp_case(const tg_opcase *c)
{
    tg_ctx *ctx = tu_ctx_new();
    tg_ctx_seed(ctx, 5);
    tg_tensor *y = c->build(ctx, TG_F64);
    ck_assert_ptr_nonnull(y);
    tg_tensor *wrt[MAX_WRT], *u[MAX_WRT], *gr[MAX_WRT], *ty;
    int n = leaves_of(ctx, y, wrt);
    for (int j = 0; j < n; j++)
        u[j] = random_like(ctx, wrt[j], -1, 1);
    tg_status s = tg_jvp(ctx, n, wrt, u, 1, &y, &ty);
    if (s == TG_ERR_NOGRAD) {
        const char *m = tg_ctx_message(ctx), *q = strstr(m, "op '");
        char op[64];
        ck_assert_msg(q && strstr(m, "no forward-mode rule") &&
                          sscanf(q, "op '%63[^']'", op) == 1 && !has_jvp(op),
                      "%s/%s: %s", c->op, c->name, m);
        tu_ctx_free(ctx);
        return false;
    }
    ck_assert_msg(s == TG_OK, "%s/%s: %s", c->op, c->name, tg_ctx_message(ctx));
    tg_tensor *r = random_like(ctx, y, 0.5, 1.5);
    ck_assert_msg(tg_grad(ctx, 1, &y, &r, n, wrt, gr) == TG_OK, "%s", tg_ctx_message(ctx));
    tg_tensor *outs[2 + MAX_WRT] = {y, ty};
    memcpy(outs + 2, gr, sizeof *gr * (size_t)n);
    tg_graph *g = tg_graph_new(ctx, outs, 2 + n);
    uint64_t rng0[4]; /* each run draws dropout's mask anew: the same one for every run */
    tg_rng_get_state(ctx, rng0);
    ck_assert_int_eq(tg_graph_forward(g), TG_OK);
    double a = dot_values(r, ty), b = 0;
    for (int j = 0; j < n; j++)
        b += dot_values(u[j], gr[j]);
    ck_assert_msg(fabs(a - b) <= 1e-12 * fmax(1, fabs(a)),
                  "%s/%s: <r, Ju> %.17g, <J^T r, u> "
                  "%.17g",
                  c->op, c->name, a, b);
    double eps = 1e-6, side[2];
    for (int sgn = 0; sgn < 2; sgn++) { /* <r, y(x +- eps u)> */
        double **keep = calloc((size_t)n, sizeof *keep);
        for (int j = 0; j < n; j++) {
            keep[j] = values(wrt[j]);
            double *dir = values(u[j]);
            for (int64_t e = 0; e < tg_tensor_numel(wrt[j]); e++)
                tg_set(wrt[j], e, keep[j][e] + (sgn ? -eps : eps) * dir[e]);
            free(dir);
        }
        tg_rng_set_state(ctx, rng0);
        ck_assert_int_eq(tg_graph_forward(g), TG_OK);
        side[sgn] = dot_values(r, y);
        for (int j = 0; j < n; j++) {
            tg_tensor_set_data(wrt[j], keep[j], TG_F64, (size_t)tg_tensor_numel(wrt[j]));
            free(keep[j]);
        }
        free(keep);
    }
    double fd = (side[0] - side[1]) / (2 * eps);
    ck_assert_msg(fabs(fd - a) <= 1e-5 + 1e-3 * fabs(fd),
                  "%s/%s: <r, Ju> %.10g, differences "
                  "%.10g",
                  c->op, c->name, a, fd);
    /* HVP of <r, y> along u: forward over reverse (tg_jvp of the gradient nodes) against
     * reverse over reverse (tg_hvp), to 1e-12 */
    tg_tensor *L = tg_sum_all(ctx, tg_mul(ctx, y, r)), *gl[MAX_WRT], *hf[MAX_WRT], *hr[MAX_WRT];
    ck_assert_int_eq(tg_grad(ctx, 1, &L, NULL, n, wrt, gl), TG_OK);
    ck_assert_msg(tg_jvp(ctx, n, wrt, u, n, gl, hf) == TG_OK, "%s/%s: %s", c->op, c->name,
                  tg_ctx_message(ctx));
    ck_assert_int_eq(tg_hvp(ctx, L, n, wrt, u, hr), TG_OK);
    tg_tensor *o2[2 * MAX_WRT];
    memcpy(o2, hf, sizeof *hf * (size_t)n);
    memcpy(o2 + n, hr, sizeof *hr * (size_t)n);
    tg_graph *g2 = tg_graph_new(ctx, o2, 2 * n);
    ck_assert_int_eq(tg_graph_forward(g2), TG_OK);
    for (int j = 0; j < n; j++) {
        double *p = values(hf[j]), *q = values(hr[j]);
        double d = rel_diff(p, q, tg_tensor_numel(wrt[j]));
        ck_assert_msg(d <= 1e-12, "%s/%s: forward-over-reverse HVP for %s differs by %g", c->op,
                      c->name, tg_tensor_name(wrt[j]), d);
        free(p);
        free(q);
    }
    tu_ctx_free(ctx);
    return true;
}

START_TEST(test_jvp_every_case)
{
    int passed = 0;
    bool seen[sizeof with_jvp / sizeof *with_jvp] = {false};
    for (int i = 0; i < tg_n_opcases; i++) {
        if (!check_jvp_case(&tg_opcases[i]))
            continue;
        passed++;
        for (size_t k = 0; k < sizeof with_jvp / sizeof *with_jvp; k++)
            seen[k] |= !strcmp(with_jvp[k], tg_opcases[i].op);
    }
    for (size_t k = 0; k < sizeof with_jvp / sizeof *with_jvp; k++)
        ck_assert_msg(seen[k], "op %s: no forward-mode case passed", with_jvp[k]);
    fprintf(stderr,
            "tg_jvp: %d of %d cases pass the adjoint identity, differences and the HVP "
            "both ways\n",
            passed, tg_n_opcases);
}
END_TEST

/* tg_jvp and tg_hvp refuse bad arguments naming them (build errors, results NULL); an op
 * without a forward rule is named; an output no input reaches gets a zero tangent. */
START_TEST(test_jvp_errors)
{
    int64_t s2[1] = {2}, s3[1] = {3};
    for (int k = 0; k < 6; k++) {
        tg_ctx *ctx = tu_ctx_new();
        tg_tensor *x = tg_input(ctx, TG_F64, 1, s2, "x"), *c = tg_const(ctx, TG_F64, 1, s2, "c");
        tg_tensor *u2 = tg_const(ctx, TG_F64, 1, s2, "u"), *u3 = tg_const(ctx, TG_F64, 1, s3, "u3");
        tg_tensor *u32 = tg_const(ctx, TG_F32, 1, s2, "uf"),
                  *ids = tg_input(ctx, TG_I32, 1, s2, "i");
        tg_set_requires_grad(x, true);
        tg_fill(u2, 1);
        tg_fill(c, 2);
        tg_tensor *y = tg_exp(ctx, x), *t = (tg_tensor *)1;
        tg_status s;
        const char *want;
        if (k == 0) {
            s = tg_jvp(ctx, 1, &x, &u3, 1, &y, &t);
            want = "tangent 0 must be";
        } else if (k == 1) {
            s = tg_jvp(ctx, 1, &x, &u32, 1, &y, &t);
            want = "tangent 0 must be";
        } else if (k == 2) {
            s = tg_jvp(ctx, 1, &ids, &u2, 1, &y, &t);
            want = "not f32 or f64";
        } else if (k == 3) { /* a custom op without a forward rule */
            int i = 0;
            while (strcmp(tg_opcases[i].op, "custom") || strcmp(tg_opcases[i].name, "reads-output"))
                i++;
            tg_tensor *d = tg_opcases[i].build(ctx, TG_F64), *in[MAX_WRT], *ud[MAX_WRT];
            int n = leaves_of(ctx, d, in);
            for (int j = 0; j < n; j++)
                ud[j] = random_like(ctx, in[j], -1, 1);
            s = tg_jvp(ctx, n, in, ud, 1, &d, &t);
            want = "no forward-mode rule";
        } else if (k == 4) {
            tg_tensor *yy = tg_sum_all(ctx, y);
            s = tg_hvp(ctx, yy, 1, &x, &u3, &t);
            want = "v[0] must have";
        } else { /* no input reaches c * 3: a zero tangent */
            tg_tensor *z = tg_scale(ctx, c, 3);
            ck_assert_int_eq(tg_jvp(ctx, 1, &x, &u2, 1, &z, &t), TG_OK);
            tg_graph *g = tg_graph_new(ctx, &t, 1);
            ck_assert_int_eq(tg_graph_forward(g), TG_OK);
            ck_assert_double_eq(tg_get(t, 0), 0.0);
            tu_ctx_free(ctx);
            continue;
        }
        ck_assert_int_ne(s, TG_OK);
        ck_assert_msg(strstr(tg_ctx_message(ctx), want), "%d: %s", k, tg_ctx_message(ctx));
        ck_assert_ptr_null(t);
        tu_ctx_free(ctx);
    }
}
END_TEST

/* tg_gradcheck in forward mode (and both) on every case: the JVP columns against central
 * differences and the adjoint identity pass where every op has a forward rule (f64); the
 * others are refused naming the op, as a run-time error. Projections too. */
START_TEST(test_gradcheck_forward)
{
    int passed = 0;
    for (int i = 0; i < tg_n_opcases; i++) {
        const tg_opcase *c = &tg_opcases[i];
        tg_ctx *ctx = tu_ctx_new();
        tg_ctx_seed(ctx, 3);
        tg_tensor *y = c->build(ctx, TG_F64);
        tg_gradcheck_opts o = tg_gradcheck_defaults(TG_F64);
        o.mode = i % 3 == 0 ? TG_GRADCHECK_BOTH : TG_GRADCHECK_FORWARD;
        o.n_projections = i % 5 == 0 ? 3 : 0;
        tg_gradcheck_report r;
        tg_status s = tg_gradcheck(ctx, y, &o, &r);
        if (s == TG_ERR_NOGRAD) {
            const char *m = tg_ctx_message(ctx), *q = strstr(m, "op '");
            char op[64];
            ck_assert_msg(q && sscanf(q, "op '%63[^']'", op) == 1 && !has_jvp(op), "%s/%s: %s",
                          c->op, c->name, m);
            ck_assert_ptr_nonnull(tg_exp(ctx, y)); /* not a sticky build error */
        } else {
            ck_assert_msg(s == TG_OK && r.adjoint_ok, "%s/%s: %s", c->op, c->name, r.message);
            passed++;
        }
        tu_ctx_free(ctx);
    }
    ck_assert_int_ge(passed, 160);
    tg_ctx *ctx = tu_ctx_new();
    tg_tensor *x = tg_param(ctx, TG_F64, TG_DIMS(3), "x");
    tg_gradcheck_opts o = tg_gradcheck_defaults(TG_F64);
    o.mode = (tg_gradcheck_mode)7;
    tg_gradcheck_report r;
    ck_assert_int_eq(tg_gradcheck(ctx, tg_exp(ctx, x), &o, &r), TG_ERR_ARG);
    tu_ctx_free(ctx);
}
END_TEST

static Suite *grad_suite(void)
{
    Suite *s = suite_create("grad");
    TCase *tc = tcase_create("grad");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_every_case);
    tcase_add_test(tc, test_threads);
    tcase_add_test(tc, test_gradient_penalty);
    tcase_add_test(tc, test_wrt_and_seeds);
    tcase_add_test(tc, test_errors);
    tcase_add_test(tc, test_gradgradcheck);
    tcase_add_test(tc, test_one_hot);
    tcase_add_test(tc, test_grad_mask);
    tcase_add_test(tc, test_hessian_jacobian);
    tcase_add_test(tc, test_jvp_every_case);
    tcase_add_test(tc, test_jvp_errors);
    tcase_add_test(tc, test_jvp_bf16);
    tcase_add_test(tc, test_gradcheck_forward);
    suite_add_tcase(s, tc);
    return s;
}

int main(void) { return tu_run(grad_suite()); }
