/*
 * test_plan_random.c - the planner against its no-sharing reference, adversarially:
 *
 * - a generator of random small graphs (seeded): chains and diamonds of elementwise ops, the
 *   in-place-eligible ones (scale, relu, add_mask, dropout, exp, tanh, sigmoid, neg, log,
 *   sqrt, silu, gelu_tanh), views between them (transpose, reshape round trips that need a
 *   copy, narrow + concat), strided matmul, broadcast adds of reductions (sum, max), softmax,
 *   log_softmax, layer_norm, several outputs and kept intermediates (tg_keep), backward
 *   seeded at every output, at the outputs and a kept tensor, or at a kept tensor only;
 * - every op and module case of tools/cli/opcases.c, f32 and f64;
 *
 * each run with default planning, default + poison, one_backward, one_backward + poison,
 * no_grad + poison (forward values only), at 1 and 2 or 3 threads, and with the thread count changed after tg_graph_new and between
 * forward and backward: every output, kept value, kept/output gradient and leaf gradient after
 * each backward is bitwise equal to no_reuse. The sequence is forward, backward, forward,
 * backward, a second backward on the same forward (default mode: leaf gradients accumulate;
 * one_backward: refused with TG_ERR_STATE), forward, backward. Backward from a tensor that is
 * neither an output nor kept is refused.
 */
#include "opcases.h"
#include "testutil.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static uint64_t rnext(uint64_t *s)
{
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static int rint_(uint64_t *s, int n) { return (int)(rnext(s) % (uint64_t)n); }

/* What a builder made: graph outputs, kept tensors, and the tensors backward starts from. */
#define MAXO 4
typedef struct {
    tg_tensor *outs[MAXO];
    int n_outs;
    tg_tensor *kept[MAXO];
    int n_kept;
    tg_tensor *seeds[MAXO + 1];
    int n_seeds;
    char trace[1024];
} built;

typedef void (*builder_fn)(tg_ctx *ctx, tg_dtype dt, uint64_t seed, built *b);

/* ---- the random graph generator ---------------------------------------------------------- */
typedef struct {
    tg_tensor *t;
    double bound; /* |values| <= bound (keeps exp and products finite) */
} gnode;

static void trace_add(built *b, const char *fmt, const char *name, int a, int c)
{
    size_t l = strlen(b->trace);
    if (l + 40 < sizeof b->trace)
        snprintf(b->trace + l, sizeof b->trace - l, fmt, name, a, c);
}

static void random_graph(tg_ctx *ctx, tg_dtype dt, uint64_t seed, built *b)
{
    uint64_t rs = seed;
    memset(b, 0, sizeof *b);
    tg_ctx_set_training(ctx, true); /* dropout draws a mask at each forward */
    int64_t n = 2 + rint_(&rs, 3);  /* every pooled tensor is (n, n) */
    gnode pool[64];
    int np = 0;
    pool[np++] = (gnode){tu_gc_param(ctx, dt, TG_DIMS(n, n), "p0"), 1};
    pool[np++] = (gnode){tu_gc_param(ctx, dt, TG_DIMS(n, n), "p1"), 1};
    pool[np++] = (gnode){tu_gc_input(ctx, dt, TG_DIMS(n, n), "in0"), 1};
    tg_tensor *c0 = tg_const(ctx, dt, TG_DIMS(n, n), "c0");
    tg_fill_uniform(c0, -1, 1);
    pool[np++] = (gnode){c0, 1};
    tg_tensor *bias = tu_gc_param(ctx, dt, TG_DIMS(n), "bias");
    tg_tensor *gain = tu_gc_param(ctx, dt, TG_DIMS(n), "gain");
    tg_tensor *mask = tg_const(ctx, dt, TG_DIMS(n, n), "mask");
    for (int64_t i = 0; i < n * n; i++)
        tg_set(mask, i, i % 3 == 1 ? -2.0 : 0.0);
    int first_op = np;
    int n_ops = 3 + rint_(&rs, 12);
    for (int k = 0; k < n_ops && np < 60; k++) {
        /* mostly extend the newest node (chains); sometimes reach back (diamonds) */
        int ia = rint_(&rs, 3) ? np - 1 : rint_(&rs, np);
        int ib = rint_(&rs, np);
        gnode x = pool[ia], y = pool[ib];
        int op = rint_(&rs, 29);
        double bd = x.bound;
        tg_tensor *t = NULL;
        if ((op == 4 && x.bound > 3) || (op == 9 && x.bound * y.bound > 40) ||
            (op == 11 && (double)n * x.bound * y.bound > 40))
            op = 5; /* keep values finite: tanh instead */
        switch (op) {
        case 0: {
            static const double sc[3] = {0.5, -1.5, 2.0};
            double s = sc[rint_(&rs, 3)];
            t = tg_scale(ctx, x.t, s);
            bd = x.bound * fabs(s);
            break;
        }
        case 1: t = tg_relu(ctx, x.t); break;
        case 2: t = tg_add_mask(ctx, x.t, mask, TG_MASK_ADDITIVE); bd += 2; break;
        case 3: t = tg_dropout(ctx, x.t, 0.25); bd /= 0.75; break;
        case 4: t = tg_exp(ctx, x.t); bd = exp(x.bound); break;
        case 5: t = tg_tanh(ctx, x.t); bd = 1; break;
        case 6: t = tg_sigmoid(ctx, x.t); bd = 1; break;
        case 7: t = tg_neg(ctx, x.t); break;
        case 8:
            if (rint_(&rs, 3) == 0) {
                t = tg_add(ctx, x.t, bias); /* broadcast over rows */
                bd += 1;
            } else {
                t = tg_add(ctx, x.t, y.t);
                bd += y.bound;
            }
            break;
        case 9: t = tg_mul(ctx, x.t, y.t); bd *= y.bound; break;
        case 10: t = tg_sub(ctx, x.t, y.t); bd += y.bound; break;
        case 11: t = tg_matmul(ctx, x.t, y.t, rint_(&rs, 2), rint_(&rs, 2));
            bd = (double)n * x.bound * y.bound;
            break;
        case 12: t = tg_softmax(ctx, x.t); bd = 1; break;
        case 13: t = tg_transpose(ctx, x.t, 0, 1); break;
        case 14: { /* reshape round trip; through a transpose it needs a copy */
            tg_tensor *s = rint_(&rs, 2) ? tg_transpose(ctx, x.t, 0, 1) : x.t;
            t = tg_reshape(ctx, tg_reshape(ctx, s, TG_DIMS(n * n)), TG_DIMS(n, n));
            break;
        }
        case 15: { /* narrow + concat: two slices of different tensors back to (n, n) */
            int ax = rint_(&rs, 2);
            int64_t cut = 1 + rint_(&rs, (int)n - 1 > 0 ? (int)n - 1 : 1);
            if (cut >= n)
                cut = n - 1;
            if (cut < 1) {
                t = tg_scale(ctx, x.t, 1.0);
                break;
            }
            tg_tensor *parts[2] = {tg_narrow(ctx, x.t, ax, 0, cut),
                                   tg_narrow(ctx, rint_(&rs, 2) ? tg_transpose(ctx, y.t, 0, 1)
                                                                : y.t, ax, cut, n - cut)};
            t = tg_concat(ctx, parts, 2, ax);
            bd = fmax(x.bound, y.bound);
            break;
        }
        case 16: t = tg_contiguous(ctx, rint_(&rs, 2) ? tg_transpose(ctx, x.t, 0, 1) : x.t); break;
        case 17: /* x + row sums of y (broadcast backward) */
            t = tg_add(ctx, x.t, tg_sum(ctx, y.t, 1, true));
            bd += (double)n * y.bound;
            break;
        case 18: t = tg_relu(ctx, tg_transpose(ctx, x.t, 0, 1)); break; /* in place after copy */
        case 20: t = tg_silu(ctx, x.t); break;
        case 21: t = tg_gelu_tanh(ctx, x.t); break;
        case 22: t = tg_gelu(ctx, x.t); break;
        case 23: t = tg_log(ctx, tg_sigmoid(ctx, x.t)); bd = x.bound + 1; break;
        case 24: t = tg_sqrt(ctx, tg_sigmoid(ctx, x.t)); bd = 1; break;
        case 25: t = tg_div(ctx, x.t, tg_exp(ctx, tg_tanh(ctx, y.t))); bd *= 3; break;
        case 26: t = tg_add(ctx, x.t, tg_max(ctx, y.t, rint_(&rs, 2), true)); bd += y.bound;
            break;
        case 27: t = tg_log_softmax(ctx, x.t); bd = 2 * x.bound + 2; break;
        case 28: t = tg_layer_norm(ctx, x.t, bias, gain, 1e-5); bd = 2 * (double)n + 2; break;
        default: /* 19: a narrow view read by matmul in place */
            t = tg_matmul(ctx, tg_narrow(ctx, x.t, 1, 0, n - 1 > 0 ? n - 1 : 1),
                          tg_narrow(ctx, y.t, 0, n > 1 ? 1 : 0, n - 1 > 0 ? n - 1 : 1), false,
                          false);
            bd = (double)n * x.bound * y.bound;
            if (bd > 40) {
                t = tg_tanh(ctx, t);
                bd = 1;
            }
            break;
        }
        trace_add(b, " %s(%d,%d)", t ? tg_tensor_op_name(t) : "NULL", ia, ib);
        ck_assert_msg(t != NULL, "%s: %s", b->trace, tg_ctx_message(ctx));
        pool[np++] = (gnode){t, bd};
    }
    /* outputs: the newest node and up to two more op results; kept: up to two op results */
    b->outs[b->n_outs++] = pool[np - 1].t;
    for (int k = rint_(&rs, 3); k > 0; k--)
        b->outs[b->n_outs++] = pool[first_op + rint_(&rs, np - first_op)].t;
    for (int k = rint_(&rs, 3); k > 0; k--) {
        tg_tensor *t = pool[first_op + rint_(&rs, np - first_op)].t;
        tg_keep(t);
        b->kept[b->n_kept++] = t;
    }
    int how = rint_(&rs, 4); /* seeds: the outputs, plus a kept tensor, or a kept one only */
    for (int k = 0; k < b->n_outs && !(how == 3 && b->n_kept); k++)
        b->seeds[b->n_seeds++] = b->outs[k];
    if (b->n_kept && how >= 2)
        b->seeds[b->n_seeds++] = b->kept[0];
}

/* An op case: its output, and (to cover tg_keep) its first operand that is an op result. */
static void opcase_graph(tg_ctx *ctx, tg_dtype dt, uint64_t which, built *b)
{
    memset(b, 0, sizeof *b);
    const tg_opcase *c = &tg_opcases[which];
    snprintf(b->trace, sizeof b->trace, "%s/%s", c->op, c->name);
    tg_tensor *y = c->build(ctx, dt);
    ck_assert_msg(y != NULL, "%s: %s", b->trace, tg_ctx_message(ctx));
    b->outs[b->n_outs++] = y;
    b->seeds[b->n_seeds++] = y;
    for (int k = 0; k < tg_tensor_n_srcs(y); k++) {
        tg_tensor *s = tg_tensor_src(y, k);
        if (s && tg_tensor_kind(s) == TG_KIND_OP) {
            tg_keep(s);
            b->kept[b->n_kept++] = s;
            break;
        }
    }
}

/* ---- the runs ------------------------------------------------------------------------------ */
typedef struct {
    bool no_reuse, poison, one_backward, no_grad;
    int nt;         /* threads at tg_graph_new */
    bool vary;      /* change the thread count before each forward and before each backward */
} mode;

typedef struct {
    double *v;
    size_t n, cap;
} vec;

static void push(vec *a, double x)
{
    if (a->n == a->cap) {
        a->cap = a->cap ? 2 * a->cap : 256;
        a->v = realloc(a->v, sizeof(double) * a->cap);
        ck_assert_ptr_nonnull(a->v);
    }
    a->v[a->n++] = x;
}

static void push_tensor(vec *a, tg_tensor *t, bool grad)
{
    for (int64_t i = 0; i < tg_tensor_numel(t); i++)
        push(a, grad ? tg_grad_get(t, i) : tg_get(t, i));
}

static bool in_graph(const tg_graph *g, const tg_tensor *t)
{
    for (int64_t i = 0; i < tg_graph_size(g); i++)
        if (tg_graph_node(g, i) == t)
            return true;
    return false;
}

/* The tensor whose buffer a view reads (t itself if not a view). */
static const tg_tensor *base_of(const tg_tensor *t)
{
    while (tg_tensor_is_view(t))
        t = tg_tensor_src(t, 0);
    return t;
}

static void snapshot(vec *a, tg_graph *g, const built *b)
{
    for (int k = 0; k < b->n_outs; k++) {
        push_tensor(a, b->outs[k], false);
        if (tg_tensor_requires_grad(b->outs[k]))
            push_tensor(a, b->outs[k], true);
    }
    for (int k = 0; k < b->n_kept; k++) {
        if (!in_graph(g, b->kept[k]))
            continue;
        push_tensor(a, b->kept[k], false);
        if (tg_tensor_requires_grad(b->kept[k]))
            push_tensor(a, b->kept[k], true);
    }
    for (int64_t l = 0; l < tg_graph_n_grad_leaves(g); l++)
        push_tensor(a, tg_graph_grad_leaf(g, l), true);
}

static int vary_nt(int step) { return 1 + (step * 2 + 1) % 3; }

/* Run the sequence F B F B [B] F B under mode m; `extra`: the second backward on one forward
 * (refused under one_backward, which the run checks). Returns every snapshot. */
static vec run(builder_fn build, tg_dtype dt, uint64_t seed, const mode *m, bool extra,
               char *trace, size_t tn)
{
    tg_ctx *ctx = tu_ctx_new();
    tg_ctx_seed(ctx, 1234 + seed);
    tg_ctx_set_threads(ctx, m->nt);
    built b;
    build(ctx, dt, seed, &b);
    snprintf(trace, tn, "%s", b.trace);
    tg_graph_opts o = {.no_reuse = m->no_reuse, .poison = m->poison,
                       .one_backward = m->one_backward, .no_grad = m->no_grad};
    tg_graph *g = tg_graph_new_opts(ctx, b.outs, b.n_outs, &o);
    ck_assert_msg(g != NULL, "%s: %s", b.trace, tg_ctx_message(ctx));
    /* upstream gradients: fixed values of each seed's shape */
    tg_tensor *dys[MAXO + 1];
    for (int k = 0; k < b.n_seeds; k++) {
        tg_tensor *s = b.seeds[k];
        dys[k] = tg_const(ctx, dt, tg_tensor_rank(s), tg_tensor_shape(s), "dy");
        for (int64_t i = 0; i < tg_tensor_numel(s); i++)
            tg_set(dys[k], i, cos(0.7 * (double)i + k) + 0.25);
    }
    /* seeds that require grad (backward refuses the others) */
    tg_tensor *sd[MAXO + 1];
    const tg_tensor *sdy[MAXO + 1];
    int ns = 0;
    for (int k = 0; k < b.n_seeds; k++)
        if (tg_tensor_requires_grad(b.seeds[k]) && in_graph(g, b.seeds[k])) {
            sd[ns] = b.seeds[k];
            sdy[ns++] = dys[k];
        }
    /* a tensor that is neither an output nor kept (nor the base of one): refused as a seed */
    tg_tensor *inner = NULL;
    for (int64_t i = tg_graph_size(g) - 1; i >= 0 && !inner; i--) {
        tg_tensor *t = tg_graph_node(g, i);
        bool persist = tg_tensor_kind(t) != TG_KIND_OP || !tg_tensor_requires_grad(t);
        for (int k = 0; k < b.n_outs && !persist; k++)
            persist = b.outs[k] == t || base_of(b.outs[k]) == t;
        for (int k = 0; k < b.n_kept && !persist; k++)
            persist = b.kept[k] == t || base_of(b.kept[k]) == t;
        if (!persist)
            inner = t;
    }
    vec out = {0};
    int step = 0;
    for (int round = 0; round < 3; round++) {
        if (m->vary)
            tg_ctx_set_threads(ctx, vary_nt(step++));
        ck_assert_msg(tg_graph_forward(g) == TG_OK, "%s: %s", b.trace, tg_ctx_message(ctx));
        if (round == 0 && inner && !m->no_grad) {
            tg_tensor *dd = tg_const(ctx, dt, tg_tensor_rank(inner), tg_tensor_shape(inner),
                                     "dd");
            ck_assert_int_eq(tg_graph_backward(g, inner, dd), TG_ERR_ARG);
            tu_assert_error(ctx, TG_ERR_ARG, "not an output");
        }
        if (ns == 0 || m->no_grad) { /* forward only: outputs and kept values */
            for (int k = 0; k < b.n_outs; k++)
                push_tensor(&out, b.outs[k], false);
            for (int k = 0; k < b.n_kept; k++)
                if (in_graph(g, b.kept[k]))
                    push_tensor(&out, b.kept[k], false);
            continue;
        }
        int nb = round == 1 ? 2 : 1;
        for (int r = 0; r < nb; r++) {
            if (m->vary)
                tg_ctx_set_threads(ctx, vary_nt(step++));
            tg_status st = tg_graph_backward_multi(g, ns, sd, sdy);
            if (r == 1 && !extra) {
                ck_assert_msg(st == TG_ERR_STATE, "%s: second backward gave %d", b.trace, st);
                tu_assert_error(ctx, TG_ERR_STATE, "one_backward");
                continue;
            }
            ck_assert_msg(st == TG_OK, "%s: %s", b.trace, tg_ctx_message(ctx));
            snapshot(&out, g, &b);
        }
    }
    tu_ctx_free(ctx);
    return out;
}

/* Run `build` under every mode and compare with no_reuse, bitwise. */
static void check_all_modes(builder_fn build, tg_dtype dt, uint64_t seed, int max_nt)
{
    char trace[1024];
    mode ref = {.no_reuse = true, .nt = 1};
    vec r_retain = run(build, dt, seed, &ref, true, trace, sizeof trace);
    for (size_t i = 0; build == random_graph && i < r_retain.n; i++) /* finite: poison shows */
        ck_assert_msg(isfinite(r_retain.v[i]), "%s: reference element %zu is %g", trace, i,
                      r_retain.v[i]);
    ref.one_backward = true;
    vec r_one = run(build, dt, seed, &ref, false, trace, sizeof trace);
    mode ref_ng = {.no_reuse = true, .no_grad = true, .nt = 1};
    vec r_ng = run(build, dt, seed, &ref_ng, false, trace, sizeof trace);
    static const char *names[] = {"default", "default+poison", "one_backward",
                                  "one_backward+poison", "no_grad+poison", "varying threads",
                                  "varying threads+poison+one_backward"};
    for (int nt = 1; nt <= max_nt; nt++)
        for (int k = 0; k < 7; k++) {
            if (k >= 5 && nt > 1)
                continue;
            mode m = {.poison = k == 1 || k == 3 || k == 4 || k == 6,
                      .one_backward = k == 2 || k == 3 || k == 6, .no_grad = k == 4,
                      .nt = k >= 5 ? 3 : nt, .vary = k >= 5};
            const vec *want = m.no_grad ? &r_ng : m.one_backward ? &r_one : &r_retain;
            vec got = run(build, dt, seed, &m, !m.one_backward, trace, sizeof trace);
            ck_assert_uint_eq(got.n, want->n);
            size_t bad = got.n;
            for (size_t i = 0; i < got.n && bad == got.n; i++)
                if (memcmp(&got.v[i], &want->v[i], sizeof(double)) != 0)
                    bad = i;
            ck_assert_msg(bad == got.n, "%s [%s, seed %llu]: %s, %d threads: element %zu is "
                          "%.17g, no_reuse gives %.17g", trace, dt == TG_F32 ? "f32" : "f64",
                          (unsigned long long)seed, names[k], nt, bad, got.v[bad],
                          want->v[bad]);
            free(got.v);
        }
    free(r_retain.v);
    free(r_one.v);
    free(r_ng.v);
}

START_TEST(test_random_graphs)
{
    tg_dtype dt = tu_dtypes[_i % 2];
    /* TG_PLAN_RANDOM_N: graphs per iteration for a longer local search (default 60) */
    const char *env = getenv("TG_PLAN_RANDOM_N");
    int per = env && atoi(env) > 0 ? atoi(env) : tu_under_valgrind() ? 3 : 60;
    for (int k = 0; k < per; k++) {
        uint64_t seed = (uint64_t)(_i / 2) * 1000 + (uint64_t)k;
        check_all_modes(random_graph, dt, seed, k % 4 == 0 ? 3 : 2);
    }
}
END_TEST

START_TEST(test_opcases_all_modes)
{
    int c = _i / 2;
    tg_dtype dt = tu_dtypes[_i % 2];
    check_all_modes(opcase_graph, dt, (uint64_t)c, c % 3 == 0 ? 3 : 2);
}
END_TEST

/* Regression (plan.c): by default, values backward reads outlive backward so that it can run
 * again on the same forward; poison mode used to fill them with NaN at the end of the first
 * backward call, so the second read NaN (exp's output) or a garbage arg-max index (max's saved
 * int64, a crash). */
START_TEST(test_poison_keeps_retained_values)
{
    double want[2][3];
    for (int poison = 0; poison < 2; poison++) {
        tg_ctx *ctx = tu_ctx_new();
        tg_tensor *x = tg_param(ctx, TG_F64, TG_DIMS(3, 2), "x");
        for (int i = 0; i < 6; i++)
            tg_set(x, i, 0.25 * i - 0.5);
        /* sum(exp(x) * x) + sum(max over axis 1) */
        tg_tensor *y = tg_add(ctx, tg_sum_all(ctx, tg_mul(ctx, tg_exp(ctx, x), x)),
                              tg_sum_all(ctx, tg_max(ctx, x, 1, false)));
        tg_graph_opts o = {.no_reuse = !poison, .poison = poison == 1};
        tg_graph *g = tg_graph_new_opts(ctx, &y, 1, &o);
        ck_assert_ptr_nonnull(g);
        ck_assert_int_eq(tg_graph_forward(g), TG_OK);
        ck_assert_int_eq(tg_graph_backward(g, y, NULL), TG_OK);
        ck_assert_int_eq(tg_graph_backward(g, y, NULL), TG_OK);
        for (int i = 0; i < 3; i++) {
            want[poison][i] = tg_grad_get(x, 2 * i + 1);
            ck_assert(want[poison][i] == want[0][i]); /* d/dx = 2 ((x + 1) e^x + [argmax]) */
        }
        tu_ctx_free(ctx);
    }
    ck_assert(fabs(want[0][0] - 2 * ((-0.25 + 1) * exp(-0.25) + 1)) < 1e-15);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("plan_random");
    TCase *tc = tu_tcase(s, "random", 300);
    tcase_add_loop_test(tc, test_random_graphs, 0, tu_under_valgrind() ? 2 : 8);
    tc = tu_tcase(s, "opcases", 120);
    tcase_add_loop_test(tc, test_opcases_all_modes, 0, 2 * tg_n_opcases);
    tcase_add_test(tc, test_poison_keeps_retained_values);
    return tu_run(s);
}
