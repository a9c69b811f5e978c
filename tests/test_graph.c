/*
 * test_graph.c - static graphs and reverse-mode autodiff: topological order, reused tensors,
 * diamonds, shared weights, attention-like reuse, very long chains (no recursion), several
 * outputs, every backward error, accumulation rules, determinism, rerunning with new data,
 * two contexts on two threads, graph lifetime and degenerate graphs.
 */
#include "testutil.h"
#include "tgrad_nn.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int64_t index_in_graph(const tg_graph *g, const tg_tensor *t)
{
    for (int64_t i = 0; i < tg_graph_size(g); i++)
        if (tg_graph_node(g, i) == t)
            return i;
    return -1;
}

static tg_graph *run(tg_ctx *ctx, tg_tensor *y)
{
    ck_assert_msg(y != NULL, "build failed: %s", tg_ctx_message(ctx));
    tg_graph *g = tg_graph_new(ctx, &y, 1);
    ck_assert_msg(g != NULL, "tg_graph_new: %s", tg_ctx_message(ctx));
    ck_assert_int_eq(tg_graph_forward(g), TG_OK);
    ck_assert_int_eq(tg_graph_backward(g, y, NULL), TG_OK);
    return g;
}

/* ---- topological order -------------------------------------------------------------------- */
#define DAG_N 400
START_TEST(test_topological_order)
{
    tg_ctx *ctx = tg_ctx_new();
    tg_ctx_seed(ctx, 5);
    tg_tensor *node[DAG_N];
    int src[DAG_N][2], nsrc[DAG_N];
    uint64_t r = 88172645463325252ULL; /* local xorshift: the DAG shape */
#define NEXT() (r ^= r << 13, r ^= r >> 7, r ^= r << 17, r)
    int n_leaves = 6;
    for (int i = 0; i < n_leaves; i++) {
        node[i] = i % 2 ? tg_param(ctx, TG_F64, TG_DIMS(4), NULL)
                        : tg_const(ctx, TG_F64, TG_DIMS(4), NULL);
        tg_fill_uniform(node[i], -1, 1);
        nsrc[i] = 0;
    }
    for (int i = n_leaves; i < DAG_N; i++) {
        int a = (int)(NEXT() % (uint64_t)i), b = (int)(NEXT() % (uint64_t)i);
        switch (NEXT() % 4) {
        case 0:
            node[i] = tg_add(ctx, node[a], node[b]);
            nsrc[i] = 2;
            break;
        case 1:
            node[i] = tg_mul(ctx, node[a], node[b]);
            nsrc[i] = 2;
            break;
        case 2:
            node[i] = tg_scale(ctx, node[a], 0.5);
            nsrc[i] = 1;
            break;
        default:
            node[i] = tg_gelu(ctx, node[a]);
            nsrc[i] = 1;
            break;
        }
        ck_assert_ptr_nonnull(node[i]);
        src[i][0] = a;
        src[i][1] = b;
    }
    /* outputs: three nodes near the end and one in the middle */
    tg_tensor *outs[4] = {node[DAG_N - 1], node[DAG_N - 7], node[DAG_N / 2], node[DAG_N - 1]};
    tg_graph *g = tg_graph_new(ctx, outs, 4);
    ck_assert_ptr_nonnull(g);
    /* reachable set by our own search over the recorded edges */
    bool reach[DAG_N] = {false};
    int stack[DAG_N * 2], sp = 0;
    stack[sp++] = DAG_N - 1;
    stack[sp++] = DAG_N - 7;
    stack[sp++] = DAG_N / 2;
    while (sp > 0) {
        int v = stack[--sp];
        if (reach[v])
            continue;
        reach[v] = true;
        for (int k = 0; k < nsrc[v]; k++)
            stack[sp++] = src[v][k];
    }
    int n_reach = 0;
    for (int i = 0; i < DAG_N; i++)
        n_reach += reach[i];
    ck_assert_int_eq(tg_graph_size(g), n_reach);
    int64_t pos[DAG_N];
    int n_grad_leaves = 0;
    for (int i = 0; i < DAG_N; i++) {
        pos[i] = index_in_graph(g, node[i]);
        ck_assert_msg((pos[i] >= 0) == reach[i], "node %d: in graph %d, reachable %d", i,
                      pos[i] >= 0, reach[i]);
        if (reach[i] && i < n_leaves && i % 2)
            n_grad_leaves++;
    }
    for (int i = 0; i < DAG_N; i++)
        for (int k = 0; reach[i] && k < nsrc[i]; k++)
            ck_assert_msg(pos[src[i][k]] < pos[i], "node %d at %lld before its source %d at %lld",
                          i, (long long)pos[i], src[i][k], (long long)pos[src[i][k]]);
    /* every node once */
    for (int64_t i = 0; i < tg_graph_size(g); i++)
        for (int64_t j = 0; j < i; j++)
            ck_assert_ptr_ne(tg_graph_node(g, i), tg_graph_node(g, j));
    ck_assert_ptr_null(tg_graph_node(g, -1));
    ck_assert_ptr_null(tg_graph_node(g, tg_graph_size(g)));
    /* grad leaves: the reachable params, in topological order */
    ck_assert_int_eq(tg_graph_n_grad_leaves(g), n_grad_leaves);
    for (int64_t l = 1; l < tg_graph_n_grad_leaves(g); l++)
        ck_assert_int_lt(index_in_graph(g, tg_graph_grad_leaf(g, l - 1)),
                         index_in_graph(g, tg_graph_grad_leaf(g, l)));
    ck_assert_ptr_null(tg_graph_grad_leaf(g, -1));
    ck_assert_ptr_null(tg_graph_grad_leaf(g, n_grad_leaves));
    ck_assert_int_eq(tg_graph_forward(g), TG_OK);
    tg_ctx_free(ctx);
#undef NEXT
}
END_TEST

/* ---- reuse of one tensor ------------------------------------------------------------------ */
START_TEST(test_reuse_add_mul)
{
    for (int dt = 0; dt < 2; dt++) {
        tg_ctx *ctx = tg_ctx_new();
        const double xv[4] = {0.5, -1.25, 3.0, 0.0};
        tg_tensor *x = tg_param(ctx, (tg_dtype)dt, TG_DIMS(4), "x");
        tu_set(x, xv);
        run(ctx, tg_sum_all(ctx, tg_add(ctx, x, x)));
        for (int i = 0; i < 4; i++)
            ck_assert(tg_grad_get(x, i) == 2.0);
        tg_tensor *x2 = tg_param(ctx, (tg_dtype)dt, TG_DIMS(4), "x2");
        tu_set(x2, xv);
        tg_tensor *y = tg_sum_all(ctx, tg_mul(ctx, x2, x2));
        run(ctx, y);
        for (int i = 0; i < 4; i++)
            ck_assert(tg_grad_get(x2, i) == 2.0 * xv[i]);
        ck_assert(tg_get(y, 0) == 0.25 + 1.5625 + 9.0);
        /* the same tensor as both matmul operands */
        tg_tensor *m = tu_input(ctx, TG_F64, TG_DIMS(3, 3), "m", -1, 1);
        if (dt == TG_F64)
            tu_assert_gradcheck(ctx, tg_matmul(ctx, m, m, false, false));
        tg_ctx_free(ctx);
    }
}
END_TEST

/* y = f(a) + g(a): both paths contribute. Dyadic values keep everything exact. */
START_TEST(test_diamond)
{
    tg_ctx *ctx = tg_ctx_new();
    const double av[4] = {0.5, -1.25, 2.0, 0.75};
    tg_tensor *a = tg_param(ctx, TG_F64, TG_DIMS(4), "a");
    tu_set(a, av);
    tg_tensor *f = tg_mul(ctx, a, a);     /* a^2 */
    tg_tensor *g3 = tg_scale(ctx, a, 3.0); /* 3a */
    tg_tensor *y = tg_sum_all(ctx, tg_add(ctx, f, g3));
    run(ctx, y);
    for (int i = 0; i < 4; i++)
        ck_assert_msg(tg_grad_get(a, i) == 2 * av[i] + 3, "da[%d] = %.17g", i,
                      tg_grad_get(a, i));
    /* a deeper diamond with non-linear branches passes gradcheck */
    tg_tensor *b = tu_input(ctx, TG_F64, TG_DIMS(2, 5), "b", -1, 1);
    tg_tensor *left = tg_softmax(ctx, tg_scale(ctx, b, 2.0));
    tg_tensor *right = tg_layer_norm(ctx, tg_gelu(ctx, b), NULL, NULL, 1e-5);
    tu_assert_gradcheck(ctx, tg_mul(ctx, tg_add(ctx, left, right), b));
    tg_ctx_free(ctx);
}
END_TEST

/* One weight used by two dense layers: its gradient is the sum of both uses. */
START_TEST(test_shared_weights)
{
    tg_ctx *ctx = tg_ctx_new();
    tg_ctx_seed(ctx, 3);
    tg_tensor *x = tu_input(ctx, TG_F64, TG_DIMS(4, 3), "x", -1, 1);
    tg_tensor *w = tg_param(ctx, TG_F64, TG_DIMS(3, 3), "w");
    tg_tensor *b = tg_param(ctx, TG_F64, TG_DIMS(3), "b");
    tg_fill_uniform(w, -1, 1);
    tg_fill_uniform(b, -1, 1);
    tg_tensor *h = tg_gelu(ctx, tg_dense(ctx, x, w, b));
    tg_tensor *y = tg_dense(ctx, h, w, b);
    tu_assert_gradcheck(ctx, y);
    tg_tensor *loss = tg_sum_all(ctx, y);
    run(ctx, loss);

    /* the same network with untied copies w1, w2 (b1, b2) */
    tg_tensor *w1 = tg_param(ctx, TG_F64, TG_DIMS(3, 3), "w1");
    tg_tensor *w2 = tg_param(ctx, TG_F64, TG_DIMS(3, 3), "w2");
    tg_tensor *b1 = tg_param(ctx, TG_F64, TG_DIMS(3), "b1");
    tg_tensor *b2 = tg_param(ctx, TG_F64, TG_DIMS(3), "b2");
    tg_tensor_copy(w1, w);
    tg_tensor_copy(w2, w);
    tg_tensor_copy(b1, b);
    tg_tensor_copy(b2, b);
    tg_tensor *y2 = tg_dense(ctx, tg_gelu(ctx, tg_dense(ctx, x, w1, b1)), w2, b2);
    tg_tensor *loss2 = tg_sum_all(ctx, y2);
    run(ctx, loss2);
    ck_assert(tg_get(loss, 0) == tg_get(loss2, 0));
    for (int i = 0; i < 9; i++)
        ck_assert_double_eq_tol(tg_grad_get(w, i), tg_grad_get(w1, i) + tg_grad_get(w2, i),
                                1e-13);
    for (int i = 0; i < 3; i++)
        ck_assert_double_eq_tol(tg_grad_get(b, i), tg_grad_get(b1, i) + tg_grad_get(b2, i),
                                1e-13);
    /* and both uses really contribute */
    ck_assert(fabs(tg_grad_get(w1, 0)) > 1e-6 && fabs(tg_grad_get(w2, 0)) > 1e-6);
    tg_ctx_free(ctx);
}
END_TEST

/* Self-attention-like reuse: x is query, key and value. */
START_TEST(test_attention_pattern)
{
    tg_ctx *ctx = tg_ctx_new();
    tg_ctx_seed(ctx, 12);
    /* bare: softmax(x x^T / sqrt(D)) x */
    tg_tensor *x = tu_input(ctx, TG_F64, TG_DIMS(2, 4, 3), "x", -1, 1);
    tg_tensor *s = tg_scale(ctx, tg_matmul(ctx, x, x, false, true), 1 / sqrt(3.0));
    tu_assert_gradcheck(ctx, tg_matmul(ctx, tg_softmax(ctx, s), x, false, false));
    /* with projections: q = x Wq, k = x Wk, v = x Wv */
    tg_tensor *wq = tg_param(ctx, TG_F64, TG_DIMS(3, 3), "wq");
    tg_tensor *wk = tg_param(ctx, TG_F64, TG_DIMS(3, 3), "wk");
    tg_tensor *wv = tg_param(ctx, TG_F64, TG_DIMS(3, 2), "wv");
    tg_fill_uniform(wq, -1, 1);
    tg_fill_uniform(wk, -1, 1);
    tg_fill_uniform(wv, -1, 1);
    tg_tensor *q = tg_matmul(ctx, x, wq, false, false);
    tg_tensor *k = tg_matmul(ctx, x, wk, false, false);
    tg_tensor *v = tg_matmul(ctx, x, wv, false, false);
    tg_tensor *p = tg_softmax(ctx, tg_scale(ctx, tg_matmul(ctx, q, k, false, true), 0.5));
    tg_tensor *o = tg_add(ctx, tg_matmul(ctx, p, v, false, false), tg_narrow(ctx, x, -1, 0, 2));
    tu_assert_gradcheck(ctx, tg_layer_norm(ctx, o, NULL, NULL, 1e-5));
    tg_ctx_free(ctx);
}
END_TEST

/* ---- long chains -------------------------------------------------------------------------- */
/* y = ((x s0 + b) s1 + b) ...  with s alternating 2 and 0.5; L = sum(y). Everything is exact
 * in binary, and the expected values are computed with the same operations in the same order,
 * so the comparison is bitwise. */
static void chain(int64_t steps, double max_seconds)
{
    double t0 = now_s();
    tg_ctx *ctx = tg_ctx_new();
    tg_ctx_set_threads(ctx, 1);
    const double xv[3] = {0.5, -1.25, 2.0}, bv[3] = {0.25, 0.5, -0.75};
    tg_tensor *x = tg_param(ctx, TG_F64, TG_DIMS(3), "x");
    tg_tensor *b = tg_param(ctx, TG_F64, TG_DIMS(3), "b");
    tu_set(x, xv);
    tu_set(b, bv);
    tg_tensor *y = x;
    for (int64_t k = 0; k < steps; k++) {
        y = tg_scale(ctx, y, k % 2 ? 0.5 : 2.0);
        y = tg_add(ctx, y, b);
    }
    tg_tensor *loss = tg_sum_all(ctx, y);
    ck_assert_msg(loss != NULL, "%s", tg_ctx_message(ctx));
    tg_keep(y); /* read below */
    tg_graph *g = tg_graph_new(ctx, &loss, 1);
    ck_assert_msg(g != NULL, "%s", tg_ctx_message(ctx));
    ck_assert_int_eq(tg_graph_size(g), 2 * steps + 3);
    ck_assert_ptr_eq(tg_graph_node(g, tg_graph_size(g) - 1), loss);
    ck_assert_int_eq(tg_graph_forward(g), TG_OK);
    ck_assert_int_eq(tg_graph_backward(g, loss, NULL), TG_OK);

    double expect_sum = 0;
    for (int i = 0; i < 3; i++) {
        double v = xv[i];
        for (int64_t k = 0; k < steps; k++)
            v = (k % 2 ? 0.5 : 2.0) * v + bv[i];
        ck_assert_msg(tg_get(y, i) == v, "y[%d] = %.17g, expected %.17g", i, tg_get(y, i), v);
        expect_sum += v;
    }
    ck_assert(tg_get(loss, 0) == expect_sum);
    double gy = 1, gb = 0;
    for (int64_t k = steps - 1; k >= 0; k--) {
        gb += gy;
        gy *= k % 2 ? 0.5 : 2.0;
    }
    for (int i = 0; i < 3; i++) {
        ck_assert_msg(tg_grad_get(x, i) == gy, "dx = %.17g, expected %.17g", tg_grad_get(x, i),
                      gy);
        ck_assert_msg(tg_grad_get(b, i) == gb, "db = %.17g, expected %.17g", tg_grad_get(b, i),
                      gb);
    }
    ck_assert(gb == 0.75 * (double)steps); /* steps even: pairs of 1 + 0.5 */
    /* a second backward (no zero_grad) doubles the leaf gradients exactly */
    ck_assert_int_eq(tg_graph_backward(g, loss, NULL), TG_OK);
    ck_assert(tg_grad_get(b, 0) == 2 * gb);
    tg_ctx_free(ctx);
    double dt = now_s() - t0;
    if (!tu_under_valgrind())
        ck_assert_msg(dt < max_seconds, "%lld-node chain took %.2f s", (long long)(2 * steps),
                      dt);
}

START_TEST(test_chain_10k) { chain(5000, 10.0); }
END_TEST

START_TEST(test_chain_200k)
{
    /* 200,000 op nodes; under valgrind a 20,000-node chain (the same code paths) */
    chain(tu_under_valgrind() ? 10000 : 100000, 10.0);
}
END_TEST

/* ---- several outputs ---------------------------------------------------------------------- */
START_TEST(test_multi_output)
{
    tg_ctx *ctx = tg_ctx_new();
    const double xv[3] = {1.5, -2.0, 0.25}, wv[3] = {0.5, 0.75, -1.0}, dv[3] = {1, 2, -4};
    tg_tensor *x = tg_const(ctx, TG_F64, TG_DIMS(3), "x");
    tg_tensor *w = tg_param(ctx, TG_F64, TG_DIMS(3), "w");
    tg_tensor *dy2 = tg_const(ctx, TG_F64, TG_DIMS(3), "dy2");
    tu_set(x, xv);
    tu_set(w, wv);
    tu_set(dy2, dv);
    tg_tensor *y1 = tg_sum_all(ctx, tg_mul(ctx, x, w)); /* dw = x */
    tg_tensor *y2 = tg_scale(ctx, w, 3.0);              /* dw = 3 dy2 */
    tg_tensor *outs[2] = {y1, y2};
    tg_graph *g = tg_graph_new(ctx, outs, 2);
    ck_assert_ptr_nonnull(g);
    ck_assert_int_eq(tg_graph_size(g), 5); /* x, w, mul, sum, scale */
    ck_assert_int_eq(tg_graph_n_grad_leaves(g), 1);
    ck_assert_int_eq(tg_graph_forward(g), TG_OK);
    ck_assert(tg_get(y1, 0) == 0.75 - 1.5 - 0.25);
    ck_assert(tg_get(y2, 2) == -3.0);
    const tg_tensor *dys[2] = {NULL, dy2};
    ck_assert_int_eq(tg_graph_backward_multi(g, 2, outs, dys), TG_OK);
    for (int i = 0; i < 3; i++)
        ck_assert(tg_grad_get(w, i) == xv[i] + 3 * dv[i]);
    /* same as two separate calls (leaf gradients accumulate) */
    tg_graph_zero_grad(g);
    ck_assert_int_eq(tg_graph_backward(g, y1, NULL), TG_OK);
    for (int i = 0; i < 3; i++)
        ck_assert(tg_grad_get(w, i) == xv[i]);
    ck_assert_int_eq(tg_graph_backward(g, y2, dy2), TG_OK);
    for (int i = 0; i < 3; i++)
        ck_assert(tg_grad_get(w, i) == xv[i] + 3 * dv[i]);
    /* dys NULL seeds every (scalar) output with 1 */
    tg_graph_zero_grad(g);
    tg_tensor *outs1[2] = {y1, y1};
    ck_assert_int_eq(tg_graph_backward_multi(g, 2, outs1, NULL), TG_OK);
    for (int i = 0; i < 3; i++)
        ck_assert(tg_grad_get(w, i) == 2 * xv[i]);
    /* a non-scalar output among them without dy */
    ck_assert_int_eq(tg_graph_backward_multi(g, 2, outs, NULL), TG_ERR_SHAPE);
    tg_ctx_clear_error(ctx);
    ck_assert_int_eq(tg_graph_backward_multi(g, 0, outs, NULL), TG_ERR_ARG);
    ck_assert_int_eq(tg_graph_backward_multi(g, 1, NULL, NULL), TG_ERR_ARG);
    ck_assert_int_eq(tg_graph_backward_multi(NULL, 1, outs, NULL), TG_ERR_ARG);
    /* the same output twice in tg_graph_new appears once */
    tg_tensor *twice[2] = {y1, y1};
    tg_graph *g2 = tg_graph_new(ctx, twice, 2);
    ck_assert_int_eq(tg_graph_size(g2), 4);
    tg_ctx_free(ctx);
}
END_TEST

/* Backward from an intermediate tensor with an upstream gradient. */
START_TEST(test_backward_from_intermediate)
{
    tg_ctx *ctx = tg_ctx_new();
    tg_tensor *x = tg_param(ctx, TG_F64, TG_DIMS(2), "x");
    tu_set(x, (const double[]){1, 2});
    tg_tensor *h = tg_scale(ctx, x, 3.0);
    tg_tensor *loss = tg_sum_all(ctx, tg_mul(ctx, h, h));
    tg_keep(h); /* backward starts from outputs and kept tensors */
    tg_graph *g = tg_graph_new(ctx, &loss, 1);
    tg_tensor *dh = tg_const(ctx, TG_F64, TG_DIMS(2), "dh");
    tu_set(dh, (const double[]){0.5, -1});
    ck_assert_int_eq(tg_graph_forward(g), TG_OK);
    ck_assert_int_eq(tg_graph_backward(g, h, dh), TG_OK);
    ck_assert(tg_grad_get(x, 0) == 1.5 && tg_grad_get(x, 1) == -3.0);
    ck_assert(tg_grad_get(loss, 0) == 0.0);
    tg_ctx_free(ctx);
}
END_TEST

/* ---- errors ------------------------------------------------------------------------------- */
START_TEST(test_graph_new_errors)
{
    tg_ctx *ctx = tg_ctx_new();
    tg_tensor *x = tg_param(ctx, TG_F32, TG_DIMS(2), "x");
    tg_tensor *y = tg_sum_all(ctx, x);
    ck_assert_ptr_null(tg_graph_new(ctx, NULL, 1));
    tu_assert_error(ctx, TG_ERR_ARG, "tg_graph_new");
    tg_ctx_clear_error(ctx);
    ck_assert_ptr_null(tg_graph_new(ctx, &y, 0));
    tu_assert_error(ctx, TG_ERR_ARG, "tg_graph_new");
    tg_ctx_clear_error(ctx);
    ck_assert_ptr_null(tg_graph_new(ctx, &y, -3));
    tg_ctx_clear_error(ctx);
    tg_tensor *outs[2] = {y, NULL};
    ck_assert_ptr_null(tg_graph_new(ctx, outs, 2));
    tu_assert_error(ctx, TG_ERR_ARG, "output 1 is NULL");
    tg_ctx_clear_error(ctx);
    tg_ctx *other = tg_ctx_new();
    tg_tensor *foreign = tg_param(other, TG_F32, TG_DIMS(2), "f");
    ck_assert_ptr_null(tg_graph_new(ctx, &foreign, 1));
    tu_assert_error(ctx, TG_ERR_ARG, "another context");
    tg_ctx_clear_error(ctx);
    ck_assert_ptr_null(tg_graph_new(NULL, &y, 1));
    /* a pending builder error blocks graph construction and is kept */
    ck_assert_ptr_null(tg_softmax(ctx, tg_sum_all(ctx, x)));
    ck_assert_ptr_null(tg_graph_new(ctx, &y, 1));
    tu_assert_error(ctx, TG_ERR_SHAPE, "tg_softmax");
    tg_ctx_free(other);
    tg_ctx_free(ctx);
}
END_TEST

START_TEST(test_backward_errors)
{
    tg_ctx *ctx = tg_ctx_new();
    tg_tensor *x = tg_param(ctx, TG_F64, TG_DIMS(2, 3), "x");
    tg_tensor *c = tg_const(ctx, TG_F64, TG_DIMS(2, 3), "c");
    tg_tensor *y = tg_mul(ctx, x, c);           /* (2, 3) */
    tg_tensor *loss = tg_sum_all(ctx, y);       /* () */
    tg_tensor *nograd = tg_sum_all(ctx, c);     /* depends only on a constant */
    tg_tensor *outs[3] = {loss, y, nograd};
    tg_graph *g = tg_graph_new(ctx, outs, 3);
    ck_assert_ptr_nonnull(g);

    /* before forward */
    ck_assert_int_eq(tg_graph_backward(g, loss, NULL), TG_ERR_STATE);
    tu_assert_error(ctx, TG_ERR_STATE, "forward");
    tg_ctx_clear_error(ctx);
    ck_assert_int_eq(tg_graph_forward(g), TG_OK);
    ck_assert_int_eq(tg_graph_forward(NULL), TG_ERR_ARG);

    /* non-scalar without dy */
    ck_assert_int_eq(tg_graph_backward(g, y, NULL), TG_ERR_SHAPE);
    tu_assert_error(ctx, TG_ERR_SHAPE, "(2, 3)");
    tg_ctx_clear_error(ctx);
    /* dy of the wrong shape: different numel, and same numel but different shape */
    tg_tensor *dy_bad = tg_const(ctx, TG_F64, TG_DIMS(3, 3), "dy_bad");
    ck_assert_int_eq(tg_graph_backward(g, y, dy_bad), TG_ERR_SHAPE);
    tu_assert_error(ctx, TG_ERR_SHAPE, "dy_bad");
    tg_ctx_clear_error(ctx);
    tg_tensor *dy_t = tg_const(ctx, TG_F64, TG_DIMS(3, 2), "dy_t");
    ck_assert_int_eq(tg_graph_backward(g, y, dy_t), TG_ERR_SHAPE);
    tg_ctx_clear_error(ctx);
    tg_tensor *dy_flat = tg_const(ctx, TG_F64, TG_DIMS(6), "dy_flat");
    ck_assert_int_eq(tg_graph_backward(g, y, dy_flat), TG_ERR_SHAPE);
    tg_ctx_clear_error(ctx);
    /* dy of the wrong dtype */
    tg_tensor *dy32 = tg_const(ctx, TG_F32, TG_DIMS(2, 3), "dy32");
    ck_assert_int_eq(tg_graph_backward(g, y, dy32), TG_ERR_DTYPE);
    tu_assert_error(ctx, TG_ERR_DTYPE, "f32");
    tg_ctx_clear_error(ctx);
    /* y not in the graph: made later, or in another graph */
    tg_tensor *later = tg_sum_all(ctx, tg_scale(ctx, x, 2.0));
    ck_assert_int_eq(tg_graph_backward(g, later, NULL), TG_ERR_ARG);
    tu_assert_error(ctx, TG_ERR_ARG, "not a tensor of this graph");
    tg_ctx_clear_error(ctx);
    tg_graph *g2 = tg_graph_new(ctx, &later, 1);
    ck_assert_ptr_nonnull(g2);
    ck_assert_int_eq(tg_graph_backward(g, later, NULL), TG_ERR_ARG);
    tg_ctx_clear_error(ctx);
    ck_assert_int_eq(tg_graph_backward(g, NULL, NULL), TG_ERR_ARG);
    tg_ctx_clear_error(ctx);
    /* an output that needs no gradient */
    ck_assert_int_eq(tg_graph_backward(g, nograd, NULL), TG_ERR_NOGRAD);
    tu_assert_error(ctx, TG_ERR_NOGRAD, "'");
    tg_ctx_clear_error(ctx);
    ck_assert_int_eq(tg_graph_backward(g, c, NULL), TG_ERR_NOGRAD);
    tg_ctx_clear_error(ctx);
    /* a failed call changed no gradient */
    for (int i = 0; i < 6; i++)
        ck_assert(tg_grad_get(x, i) == 0.0);
    /* and the graph still works */
    ck_assert_int_eq(tg_graph_backward(g, loss, NULL), TG_OK);
    tg_ctx_free(ctx);
}
END_TEST

/* ---- accumulation and determinism --------------------------------------------------------- */
/* An intermediate value (neither an output nor kept) is not readable after the run: the
 * planner gave its memory to later values (x -> exp -> scale -> scale runs in place), so
 * tg_get gives NaN and tg_tensor_data NULL with an error naming tg_keep, never another
 * value's bytes; kept, it reads e; views of a leaf or of an output and no_reuse graphs stay
 * readable. */
START_TEST(test_intermediate_not_readable)
{
    for (int kept = 0; kept < 2; kept++) {
        tg_ctx *ctx = tu_ctx_new();
        tg_tensor *x = tg_input(ctx, TG_F32, TG_DIMS(1), "x");
        tg_set(x, 0, 1.0);
        tg_tensor *h = tg_exp(ctx, x);
        tg_tensor *a = tg_scale(ctx, h, 3.0);
        tg_tensor *y = tg_scale(ctx, a, 10.0);
        tg_tensor *xv = tg_reshape(ctx, x, TG_DIMS(1, 1)); /* a view of the leaf */
        tg_tensor *yv = tg_reshape(ctx, y, TG_DIMS(1, 1)); /* a view of an output */
        if (kept)
            tg_keep(h);
        tg_tensor *outs[3] = {y, tg_scale(ctx, xv, 1.0), tg_scale(ctx, yv, 2.0)};
        tg_graph *g = tg_graph_new(ctx, outs, 3);
        ck_assert_ptr_nonnull(g);
        ck_assert_int_eq(tg_graph_forward(g), TG_OK);
        ck_assert_double_eq_tol(tg_get(y, 0), 30 * exp(1.0), 1e-4);
        ck_assert(tg_get(xv, 0) == 1.0);
        ck_assert(tg_get(yv, 0) == tg_get(y, 0));
        if (kept) {
            ck_assert_double_eq_tol(tg_get(h, 0), exp(1.0), 1e-6);
            ck_assert_ptr_nonnull(tg_tensor_data(h));
        } else {
            ck_assert(isnan(tg_get(h, 0)));
            tu_assert_error(ctx, TG_ERR_STATE, "tg_keep('exp");
            ck_assert_ptr_null(tg_tensor_data(h));
            tu_assert_error(ctx, TG_ERR_STATE, "is an intermediate value of its graph");
            float buf = 0;
            ck_assert_int_eq(tg_tensor_get_data(h, &buf, TG_F32, 1), TG_ERR_STATE);
        }
        ck_assert(isnan(tg_get(a, 0))); /* never kept */
        tu_ctx_free(ctx);
    }
    /* with no_reuse every value has memory of its own */
    tg_ctx *ctx = tu_ctx_new();
    tg_tensor *x = tg_input(ctx, TG_F64, TG_DIMS(1), "x");
    tg_set(x, 0, 1.0);
    tg_tensor *h = tg_exp(ctx, x);
    tg_tensor *y = tg_scale(ctx, tg_scale(ctx, h, 3.0), 10.0);
    tg_graph *g = tg_graph_new_opts(ctx, &y, 1, &(tg_graph_opts){.no_reuse = true});
    ck_assert_int_eq(tg_graph_forward(g), TG_OK);
    ck_assert_double_eq_tol(tg_get(h, 0), exp(1.0), 1e-15);
    tu_ctx_free(ctx);
}
END_TEST

/* Two graphs over one node keep their run-time state apart: building a second graph over y
 * (where y has another node index) must not change what the first graph's run leaves
 * readable. In A, w is a view of y, and y is kept by A (the base of its output v), so w is
 * readable after A's forward; B numbers its nodes differently (y after q's nodes). */
START_TEST(test_two_graphs_share_a_node)
{
    tg_ctx *ctx = tu_ctx_new();
    tg_tensor *x = tg_input(ctx, TG_F32, TG_DIMS(2), "x");
    tg_set(x, 0, 1.0);
    tg_set(x, 1, 2.0);
    tg_tensor *y = tg_exp(ctx, x);
    tg_tensor *v = tg_reshape(ctx, y, TG_DIMS(1, 2));       /* A's output: keeps y */
    tg_tensor *w = tg_reshape(ctx, y, TG_DIMS(2, 1));       /* a view of y, not an output */
    tg_tensor *m = tg_mul(ctx, w, w);
    tg_tensor *outs_a[2] = {v, m};
    tg_graph *a = tg_graph_new(ctx, outs_a, 2);
    ck_assert_ptr_nonnull(a);
    tg_tensor *c = tg_input(ctx, TG_F32, TG_DIMS(2), "c");
    tg_fill(c, 0.5);
    tg_tensor *q = tg_exp(ctx, c);
    tg_tensor *outs_b[2] = {q, y};
    tg_graph *b = tg_graph_new(ctx, outs_b, 2);
    ck_assert_ptr_nonnull(b);
    ck_assert_int_ne(index_in_graph(a, y), index_in_graph(b, y));
    for (int round = 0; round < 2; round++) {
        ck_assert_int_eq(tg_graph_forward(a), TG_OK);
        ck_assert_ptr_nonnull(tg_tensor_data(w));
        ck_assert_double_eq_tol(tg_get(w, 1), exp(2.0), 1e-5);
        ck_assert_double_eq_tol(tg_get(m, 1), exp(4.0), 1e-3);
        ck_assert_int_eq(tg_graph_forward(b), TG_OK); /* y is now B's: w's base too */
        ck_assert_double_eq_tol(tg_get(y, 0), exp(1.0), 1e-5);
        ck_assert_double_eq_tol(tg_get(q, 0), exp(0.5), 1e-6);
    }
    tg_graph_free(b);
    tg_graph_free(a);
    tu_ctx_free(ctx);
}
END_TEST

START_TEST(test_accumulation)
{
    tg_ctx *ctx = tg_ctx_new();
    tg_ctx_seed(ctx, 9);
    tg_tensor *x = tu_input(ctx, TG_F64, TG_DIMS(3, 4), "x", -1, 1);
    tg_tensor *w = tg_param(ctx, TG_F64, TG_DIMS(2, 4), "w");
    tg_fill_uniform(w, -1, 1);
    tg_tensor *h = tg_dense(ctx, x, w, NULL); /* intermediate, kept to read its gradient */
    tg_keep(h);
    tg_tensor *loss = tg_mean_all(ctx, tg_mul(ctx, h, h));
    tg_graph *g = run(ctx, loss);
    double g1[8], h1[6], x1[12];
    for (int i = 0; i < 8; i++)
        g1[i] = tg_grad_get(w, i);
    for (int i = 0; i < 6; i++)
        h1[i] = tg_grad_get(h, i);
    for (int i = 0; i < 12; i++)
        x1[i] = tg_grad_get(x, i);
    ck_assert_int_eq(tg_graph_backward(g, loss, NULL), TG_OK);
    /* leaves accumulate like PyTorch's grad += new_grad: exactly twice one call */
    for (int i = 0; i < 8; i++)
        ck_assert_msg(tg_grad_get(w, i) == 2 * g1[i], "dw[%d] = %.17g, expected 2 * %.17g", i,
                      tg_grad_get(w, i), g1[i]);
    for (int i = 0; i < 12; i++)
        ck_assert_msg(tg_grad_get(x, i) == 2 * x1[i], "dx[%d] = %.17g, expected 2 * %.17g", i,
                      tg_grad_get(x, i), x1[i]);
    for (int i = 0; i < 6; i++)
        ck_assert(tg_grad_get(h, i) == h1[i]); /* intermediates do not */
    tg_graph_zero_grad(g);
    for (int i = 0; i < 8; i++)
        ck_assert(tg_grad_get(w, i) == 0.0);
    for (int i = 0; i < 12; i++)
        ck_assert(tg_grad_get(x, i) == 0.0);
    tg_graph_zero_grad(NULL);
    ck_assert_int_eq(tg_graph_backward(g, loss, NULL), TG_OK);
    for (int i = 0; i < 8; i++)
        ck_assert(tg_grad_get(w, i) == g1[i]);
    tg_ctx_free(ctx);
}
END_TEST

static tg_tensor *mlp(tg_ctx *ctx, tg_tensor *x, int depth)
{
    tg_tensor *h = x;
    for (int l = 0; l < depth; l++) {
        char n[32];
        snprintf(n, sizeof n, "w%d", l);
        tg_tensor *w = tg_param(ctx, tg_tensor_dtype(x), TG_DIMS(8, 8), n);
        snprintf(n, sizeof n, "b%d", l);
        tg_tensor *b = tg_param(ctx, tg_tensor_dtype(x), TG_DIMS(8), n);
        tg_fill_normal(w, 0, 0.4);
        tg_fill_normal(b, 0, 0.1);
        h = tg_layer_norm(ctx, tg_gelu(ctx, tg_dense(ctx, h, w, b)), NULL, NULL, 1e-5);
    }
    return tg_mean_all(ctx, tg_softmax(ctx, h));
}

START_TEST(test_rerun_bitwise)
{
    for (int dt = 0; dt < 2; dt++) {
        tg_ctx *ctx = tg_ctx_new();
        tg_ctx_seed(ctx, 31);
        tg_tensor *x = tu_input(ctx, (tg_dtype)dt, TG_DIMS(5, 8), "x", -1, 1);
        tg_tensor *loss = mlp(ctx, x, 3);
        tg_graph *g = run(ctx, loss);
        size_t es = tg_dtype_size((tg_dtype)dt);
        int64_t nl = tg_graph_n_grad_leaves(g);
        ck_assert_int_eq(nl, 7);
        char *ref[7];
        for (int64_t l = 0; l < nl; l++) {
            tg_tensor *t = tg_graph_grad_leaf(g, l);
            size_t n = (size_t)tg_tensor_numel(t) * es;
            ref[l] = malloc(n);
            memcpy(ref[l], tg_tensor_grad(t), n);
        }
        double y0 = tg_get(loss, 0);
        for (int rep = 0; rep < 3; rep++) {
            ck_assert_int_eq(tg_graph_forward(g), TG_OK);
            ck_assert(tg_get(loss, 0) == y0);
            tg_graph_zero_grad(g);
            ck_assert_int_eq(tg_graph_backward(g, loss, NULL), TG_OK);
            for (int64_t l = 0; l < nl; l++) {
                tg_tensor *t = tg_graph_grad_leaf(g, l);
                ck_assert_msg(memcmp(ref[l], tg_tensor_grad(t),
                                     (size_t)tg_tensor_numel(t) * es) == 0,
                              "rerun %d: gradient of '%s' differs", rep, tg_tensor_name(t));
            }
        }
        for (int64_t l = 0; l < nl; l++)
            free(ref[l]);
        tg_ctx_free(ctx);
    }
}
END_TEST

/* New input data between runs gives the same results as a freshly built graph. */
static void fresh_run(const double *xdata, double *loss_out, double *grad_w0_out)
{
    tg_ctx *ctx = tg_ctx_new();
    tg_ctx_seed(ctx, 77);
    tg_tensor *x = tg_input(ctx, TG_F64, TG_DIMS(5, 8), "x");
    tg_tensor *loss = mlp(ctx, x, 2);
    tu_set(x, xdata);
    tg_graph *g = run(ctx, loss);
    *loss_out = tg_get(loss, 0);
    tg_tensor *w0 = tg_graph_grad_leaf(g, 0);
    ck_assert_str_eq(tg_tensor_name(w0), "w0");
    for (int i = 0; i < 64; i++)
        grad_w0_out[i] = tg_grad_get(w0, i);
    tg_ctx_free(ctx);
}

START_TEST(test_rerun_new_data)
{
    tg_ctx *ctx = tg_ctx_new();
    tg_ctx_seed(ctx, 77);
    tg_tensor *x = tg_input(ctx, TG_F64, TG_DIMS(5, 8), "x");
    tg_tensor *loss = mlp(ctx, x, 2);
    tg_graph *g = tg_graph_new(ctx, &loss, 1);
    ck_assert_ptr_nonnull(g);
    tg_tensor *w0 = tg_graph_grad_leaf(g, 0);
    double prev = NAN;
    for (int round = 0; round < 3; round++) {
        double xd[40];
        for (int i = 0; i < 40; i++)
            xd[i] = sin(0.7 * i + round) * (round + 1);
        ck_assert_int_eq(tg_tensor_set_data(x, xd, TG_F64, 40), TG_OK);
        ck_assert_int_eq(tg_graph_forward(g), TG_OK);
        tg_graph_zero_grad(g);
        ck_assert_int_eq(tg_graph_backward(g, loss, NULL), TG_OK);
        double fl, fg[64];
        fresh_run(xd, &fl, fg);
        ck_assert_msg(tg_get(loss, 0) == fl, "round %d: loss %.17g, fresh graph %.17g", round,
                      tg_get(loss, 0), fl);
        for (int i = 0; i < 64; i++)
            ck_assert(tg_grad_get(w0, i) == fg[i]);
        ck_assert(tg_get(loss, 0) != prev);
        prev = tg_get(loss, 0);
    }
    tg_ctx_free(ctx);
}
END_TEST

/* ---- two contexts on two threads ---------------------------------------------------------- */
#define TRAIN_STEPS 50
typedef struct {
    uint64_t seed;
    int failed;     /* set instead of asserting off the main thread */
    double losses[TRAIN_STEPS];
    double params[32 * 32 + 32 + 4 * 32 + 4];
} train_job;

/* A 2-layer regression net trained by plain SGD. Big enough that the first dense layer's GEMM
 * takes the OpenMP path (64 * 32 * 32 > TG_PAR_MIN). */
static void *train(void *arg)
{
    train_job *job = arg;
    tg_ctx *ctx = tg_ctx_new();
    if (!ctx) {
        job->failed = 1;
        return NULL;
    }
    tg_ctx_seed(ctx, job->seed);
    tg_tensor *x = tg_input(ctx, TG_F64, TG_DIMS(64, 32), "x");
    tg_tensor *t = tg_const(ctx, TG_F64, TG_DIMS(64, 4), "target");
    tg_tensor *w1 = tg_param(ctx, TG_F64, TG_DIMS(32, 32), "w1");
    tg_tensor *b1 = tg_param(ctx, TG_F64, TG_DIMS(32), "b1");
    tg_tensor *w2 = tg_param(ctx, TG_F64, TG_DIMS(4, 32), "w2");
    tg_tensor *b2 = tg_param(ctx, TG_F64, TG_DIMS(4), "b2");
    tg_fill_normal(x, 0, 1);
    tg_fill_normal(t, 0, 1);
    tg_fill_normal(w1, 0, 0.2);
    tg_fill_normal(w2, 0, 0.2);
    tg_tensor *out = tg_dense(ctx, tg_gelu(ctx, tg_dense(ctx, x, w1, b1)), w2, b2);
    tg_tensor *d = tg_add(ctx, out, tg_scale(ctx, t, -1.0));
    tg_tensor *loss = tg_mean_all(ctx, tg_mul(ctx, d, d));
    tg_graph *g = loss ? tg_graph_new(ctx, &loss, 1) : NULL;
    if (!g) {
        job->failed = 2;
        tg_ctx_free(ctx);
        return NULL;
    }
    tg_tensor *ps[4] = {w1, b1, w2, b2};
    for (int step = 0; step < TRAIN_STEPS; step++) {
        if (tg_graph_forward(g) != TG_OK)
            job->failed = 3;
        tg_graph_zero_grad(g);
        if (tg_graph_backward(g, loss, NULL) != TG_OK)
            job->failed = 4;
        job->losses[step] = tg_get(loss, 0);
        for (int k = 0; k < 4; k++) {
            double *p = tg_tensor_data(ps[k]);
            const double *gr = tg_tensor_grad(ps[k]);
            for (int64_t i = 0; i < tg_tensor_numel(ps[k]); i++)
                p[i] -= 0.1 * gr[i];
        }
    }
    size_t off = 0;
    for (int k = 0; k < 4; k++) {
        size_t n = (size_t)tg_tensor_numel(ps[k]);
        memcpy(job->params + off, tg_tensor_data(ps[k]), n * sizeof(double));
        off += n;
    }
    tg_ctx_free(ctx);
    return NULL;
}

START_TEST(test_two_threads)
{
    train_job seq[2], par[2];
    memset(seq, 0, sizeof seq);
    memset(par, 0, sizeof par);
    for (int i = 0; i < 2; i++)
        seq[i].seed = par[i].seed = 1000 + (uint64_t)i * 17;
    for (int i = 0; i < 2; i++)
        train(&seq[i]);
    pthread_t th[2];
    for (int i = 0; i < 2; i++)
        ck_assert_int_eq(pthread_create(&th[i], NULL, train, &par[i]), 0);
    for (int i = 0; i < 2; i++)
        ck_assert_int_eq(pthread_join(th[i], NULL), 0);
    for (int i = 0; i < 2; i++) {
        ck_assert_int_eq(seq[i].failed, 0);
        ck_assert_int_eq(par[i].failed, 0);
        ck_assert_msg(seq[i].losses[TRAIN_STEPS - 1] < 0.9 * seq[i].losses[0],
                      "training did not reduce the loss: %g -> %g", seq[i].losses[0],
                      seq[i].losses[TRAIN_STEPS - 1]);
        ck_assert_msg(memcmp(seq[i].losses, par[i].losses, sizeof seq[i].losses) == 0,
                      "run %d: losses differ between sequential and concurrent runs", i);
        ck_assert_msg(memcmp(seq[i].params, par[i].params, sizeof seq[i].params) == 0,
                      "run %d: parameters differ between sequential and concurrent runs", i);
    }
    /* the two seeds really give different runs */
    ck_assert(seq[0].losses[0] != seq[1].losses[0]);
}
END_TEST

/* Every buffer is 64-byte aligned: leaves' data and gradients (the context's blocks), and every
 * planned buffer (arena offsets are multiples of 64), for odd sizes in f32 and f64. */
START_TEST(test_alignment)
{
    for (int dt = 0; dt < 2; dt++) {
        tg_ctx *ctx = tg_ctx_new();
        tg_tensor *x = tu_input(ctx, (tg_dtype)dt, TG_DIMS(3, 5), "x", -1, 1);
        tg_tensor *w = tg_param(ctx, (tg_dtype)dt, TG_DIMS(7, 5), "w");
        tg_fill_uniform(w, -1, 1);
        tg_set_requires_grad(x, true);
        tg_tensor *h = tg_dense(ctx, x, w, NULL);
        tg_tensor *r = tg_relu(ctx, tg_scale(ctx, h, 0.5));
        tg_tensor *y = tg_sum_all(ctx, tg_mul(ctx, r, tg_softmax(ctx, h)));
        tg_keep(h);
        tg_keep(r);
        tg_graph *g = tg_graph_new(ctx, &y, 1);
        ck_assert_int_eq(tg_graph_forward(g), TG_OK);
        ck_assert_int_eq(tg_graph_backward(g, y, NULL), TG_OK);
        tg_tensor *all[] = {x, w, h, r, y};
        for (int i = 0; i < 5; i++) {
            ck_assert_msg((uintptr_t)tg_tensor_data(all[i]) % 64 == 0, "data of '%s'",
                          tg_tensor_name(all[i]));
            ck_assert_msg((uintptr_t)tg_tensor_grad(all[i]) % 64 == 0, "grad of '%s'",
                          tg_tensor_name(all[i]));
        }
        tg_ctx_free(ctx);
    }
}
END_TEST

/* ---- lifetime and degenerate graphs -------------------------------------------------------- */
START_TEST(test_graph_free)
{
    tg_ctx *ctx = tg_ctx_new();
    tg_tensor *x = tg_param(ctx, TG_F64, TG_DIMS(3), "x");
    tu_set(x, (const double[]){1, 2, 3});
    tg_tensor *y = tg_sum_all(ctx, tg_mul(ctx, x, x));
    size_t before = tg_ctx_bytes(ctx);
    tg_graph *g = run(ctx, y);
    size_t with_graph = tg_ctx_bytes(ctx);
    ck_assert_uint_gt(with_graph, before);
    tg_graph_free(g);
    ck_assert_uint_lt(tg_ctx_bytes(ctx), with_graph);
    tg_graph_free(NULL);
    /* leaves, their data and gradients outlive the graph; op results' buffers were the
     * graph's (released with it) */
    ck_assert(isnan(tg_get(y, 0)) && tg_tensor_data(y) == NULL);
    ck_assert(tg_get(x, 2) == 3.0);
    ck_assert(tg_grad_get(x, 2) == 6.0);
    /* a new graph over the same tensors works, and reuses the gradient buffers */
    size_t b2 = tg_ctx_bytes(ctx);
    tg_graph *g2 = tg_graph_new(ctx, &y, 1);
    ck_assert_ptr_nonnull(g2);
    ck_assert_int_eq(tg_graph_forward(g2), TG_OK);
    tg_graph_zero_grad(g2);
    ck_assert_int_eq(tg_graph_backward(g2, y, NULL), TG_OK);
    ck_assert(tg_grad_get(x, 2) == 6.0);
    tg_graph_free(g2);
    ck_assert_uint_eq(tg_ctx_bytes(ctx), b2);
    /* many build/free cycles do not grow the context */
    for (int i = 0; i < 100; i++)
        tg_graph_free(tg_graph_new(ctx, &y, 1));
    ck_assert_uint_eq(tg_ctx_bytes(ctx), b2);
    tg_ctx_free(ctx);
}
END_TEST

START_TEST(test_lone_parameter)
{
    tg_ctx *ctx = tg_ctx_new();
    tg_tensor *p = tg_param(ctx, TG_F64, 0, NULL, "p");
    tg_set(p, 0, 2.5);
    tg_graph *g = tg_graph_new(ctx, &p, 1);
    ck_assert_ptr_nonnull(g);
    ck_assert_int_eq(tg_graph_size(g), 1);
    ck_assert_ptr_eq(tg_graph_node(g, 0), p);
    ck_assert_int_eq(tg_graph_n_grad_leaves(g), 1);
    ck_assert_ptr_eq(tg_graph_grad_leaf(g, 0), p);
    ck_assert_int_eq(tg_graph_forward(g), TG_OK);
    ck_assert(tg_get(p, 0) == 2.5);
    ck_assert_int_eq(tg_graph_backward(g, p, NULL), TG_OK);
    ck_assert(tg_grad_get(p, 0) == 1.0);
    ck_assert_int_eq(tg_graph_backward(g, p, NULL), TG_OK);
    ck_assert(tg_grad_get(p, 0) == 2.0);
    /* non-scalar: needs dy, gets dy */
    tg_tensor *q = tg_param(ctx, TG_F32, TG_DIMS(2, 2), "q");
    tg_graph *gq = tg_graph_new(ctx, &q, 1);
    tg_tensor *dq = tg_const(ctx, TG_F32, TG_DIMS(2, 2), "dq");
    tu_set(dq, (const double[]){1, -2, 3, 0.5});
    ck_assert_int_eq(tg_graph_forward(gq), TG_OK);
    ck_assert_int_eq(tg_graph_backward(gq, q, NULL), TG_ERR_SHAPE);
    tg_ctx_clear_error(ctx);
    ck_assert_int_eq(tg_graph_backward(gq, q, dq), TG_OK);
    ck_assert(tg_grad_get(q, 1) == -2.0 && tg_grad_get(q, 3) == 0.5);
    /* gradcheck of the identity */
    tu_assert_gradcheck(ctx, p);
    /* a lone constant: a graph, but nothing to differentiate */
    tg_tensor *c = tg_const(ctx, TG_F64, 0, NULL, "c");
    tg_graph *gc = tg_graph_new(ctx, &c, 1);
    ck_assert_ptr_nonnull(gc);
    ck_assert_int_eq(tg_graph_n_grad_leaves(gc), 0);
    ck_assert_int_eq(tg_graph_forward(gc), TG_OK);
    ck_assert_int_eq(tg_graph_backward(gc, c, NULL), TG_ERR_NOGRAD);
    tg_ctx_free(ctx);
}
END_TEST

/* A graph whose only ops need no gradient runs forward; no gradient buffers are made. */
START_TEST(test_const_only_graph)
{
    tg_ctx *ctx = tg_ctx_new();
    tg_tensor *a = tg_const(ctx, TG_F64, TG_DIMS(2), "a");
    tu_set(a, (const double[]){1, 2});
    tg_tensor *in = tg_input(ctx, TG_F64, TG_DIMS(2), "in"); /* no requires_grad */
    tu_set(in, (const double[]){3, 4});
    tg_tensor *y = tg_sum_all(ctx, tg_mul(ctx, a, in));
    tg_graph *g = tg_graph_new(ctx, &y, 1);
    ck_assert_ptr_nonnull(g);
    ck_assert_int_eq(tg_graph_n_grad_leaves(g), 0);
    ck_assert_int_eq(tg_graph_forward(g), TG_OK);
    ck_assert(tg_get(y, 0) == 11.0);
    ck_assert_ptr_null(tg_tensor_grad(y));
    ck_assert_ptr_null(tg_tensor_grad(in));
    ck_assert_int_eq(tg_graph_backward(g, y, NULL), TG_ERR_NOGRAD);
    tg_ctx_free(ctx);
}
END_TEST


/* ---- the error rule ---------------------------------------------------
 * Build errors stick until tg_ctx_clear_error; a run-time error is reported by the failing
 * call and described by the context right after it, but does not poison later builds. */
START_TEST(test_runtime_error_does_not_stick)
{
    tg_ctx *ctx = tg_ctx_new();
    tg_tensor *w = tg_param(ctx, TG_F32, TG_DIMS(5, 3), "emb");
    tg_tensor *ids = tg_input(ctx, TG_I32, TG_DIMS(2), "ids");
    tg_tensor *y = tg_sum_all(ctx, tg_embedding(ctx, ids, w));
    tg_graph *g = tg_graph_new(ctx, &y, 1);
    ck_assert_ptr_nonnull(g);
    tu_set(ids, VALS(1, 7)); /* 7 is not a token id in [0, 5) */
    ck_assert_int_eq(tg_graph_forward(g), TG_ERR_ARG);
    /* the failure is described right after the call */
    tu_assert_error(ctx, TG_ERR_ARG, "tg_embedding: 'ids'[1] = 7 is not a token id in [0, 5)");
    /* backward says the forward failed */
    ck_assert_int_eq(tg_graph_backward(g, y, NULL), TG_ERR_STATE);
    tu_assert_error(ctx, TG_ERR_STATE, "the last tg_graph_forward failed");
    /* ... and it does not poison later, unrelated builds: no tg_ctx_clear_error here */
    tg_tensor *x = tg_param(ctx, TG_F32, TG_DIMS(2), "x");
    tg_tensor *z = tg_sum_all(ctx, tg_mul(ctx, x, x));
    ck_assert_ptr_nonnull(z);
    tg_graph *g2 = tg_graph_new(ctx, &z, 1);
    ck_assert_msg(g2 != NULL, "tg_graph_new after a failed forward: %s", tg_ctx_message(ctx));
    ck_assert_int_eq(tg_ctx_status(ctx), TG_OK); /* the build began: the old run error is gone */
    ck_assert_int_eq(tg_graph_forward(g2), TG_OK);
    ck_assert_int_eq(tg_graph_backward(g2, z, NULL), TG_OK);
    /* nor module init, whose status is its own */
    ck_assert_int_eq(tg_graph_forward(g), TG_ERR_ARG);
    tg_ffn f;
    ck_assert_int_eq(tg_ffn_init(ctx, &f, TG_F32, 4, 8, TG_ACT_RELU, "ffn."), TG_OK);
    /* fixing the data makes the first graph run again */
    ck_assert_int_eq(tg_graph_forward(g), TG_ERR_ARG);
    tu_set(ids, VALS(1, 4));
    ck_assert_int_eq(tg_graph_forward(g), TG_OK);
    ck_assert_int_eq(tg_ctx_status(ctx), TG_OK); /* a run call that succeeds reports nothing */
    ck_assert_int_eq(tg_graph_backward(g, y, NULL), TG_OK);
    /* a failed backward and a failed data copy do not stick either */
    tg_tensor *dy_bad = tg_const(ctx, TG_F32, TG_DIMS(3), "dy_bad");
    ck_assert_int_eq(tg_graph_backward(g, y, dy_bad), TG_ERR_SHAPE);
    ck_assert_ptr_nonnull(tg_graph_new(ctx, &z, 1));
    double buf[3] = {0};
    ck_assert_int_eq(tg_tensor_set_data(x, buf, TG_F64, 3), TG_ERR_SHAPE);
    tu_assert_error(ctx, TG_ERR_SHAPE, "tg_tensor_set_data");
    ck_assert_ptr_nonnull(tg_graph_new(ctx, &z, 1));
    ck_assert_int_eq(tg_ctx_status(ctx), TG_OK);
    tg_ctx_free(ctx);
}
END_TEST

/* A run-time error never replaces a pending build error, and a build error replaces a
 * run-time one (it sticks from then on). */
START_TEST(test_build_error_outranks_runtime_error)
{
    tg_ctx *ctx = tg_ctx_new();
    tg_tensor *w = tg_param(ctx, TG_F64, TG_DIMS(4, 2), "emb");
    tg_tensor *ids = tg_input(ctx, TG_I32, TG_DIMS(1), "ids");
    tg_tensor *y = tg_sum_all(ctx, tg_embedding(ctx, ids, w));
    tg_graph *g = tg_graph_new(ctx, &y, 1);
    tg_set(ids, 0, -1);
    ck_assert_int_eq(tg_graph_forward(g), TG_ERR_ARG);
    /* a builder fails: its error replaces the run-time one and sticks */
    ck_assert_ptr_null(tg_softmax(ctx, y));
    tu_assert_error(ctx, TG_ERR_SHAPE, "tg_softmax");
    char first[512];
    snprintf(first, sizeof first, "%s", tg_ctx_message(ctx));
    ck_assert_int_eq(tg_graph_forward(g), TG_ERR_ARG); /* the call still says what failed */
    ck_assert_str_eq(tg_ctx_message(ctx), first);       /* but the build error stays */
    ck_assert_ptr_null(tg_graph_new(ctx, &y, 1));
    ck_assert_str_eq(tg_ctx_message(ctx), first);
    tg_ctx_clear_error(ctx);
    tg_set(ids, 0, 3);
    ck_assert_int_eq(tg_graph_forward(g), TG_OK);
    ck_assert_ptr_nonnull(tg_graph_new(ctx, &y, 1));
    tg_ctx_free(ctx);
}
END_TEST

/* A graph build that runs out of memory half way gives its own arrays back. */
START_TEST(test_graph_new_nomem_frees)
{
    tu_failing_alloc st = {-1, 0, 0};
    tg_allocator al = tu_failing_allocator(&st);
    tg_ctx *ctx = tg_ctx_new_with(&al);
    tg_tensor *x = tg_param(ctx, TG_F64, TG_DIMS(3), "x");
    tg_tensor *y = x;
    for (int i = 0; i < 100; i++)
        y = tg_scale(ctx, y, 1.0);
    y = tg_sum_all(ctx, y);
    ck_assert_ptr_nonnull(y);
    /* every gradient buffer first (they belong to the tensors), then a failure at each later
     * allocation of tg_graph_new */
    tg_graph *g = tg_graph_new(ctx, &y, 1);
    ck_assert_ptr_nonnull(g);
    tg_graph_free(g);
    size_t base = tg_ctx_bytes(ctx);
    for (long k = 0; k < 40; k++) {
        st.budget = st.n_alloc + k;
        g = tg_graph_new(ctx, &y, 1);
        if (g) {
            tg_graph_free(g);
            ck_assert_uint_eq(tg_ctx_bytes(ctx), base);
            break;
        }
        tu_assert_error(ctx, TG_ERR_NOMEM, "tg_graph_new");
        ck_assert_uint_eq(tg_ctx_bytes(ctx), base); /* nothing left behind */
        tg_ctx_clear_error(ctx);
    }
    st.budget = -1;
    tg_ctx_free(ctx);
    ck_assert_int_eq(st.n_alloc, st.n_free);
}
END_TEST

static Suite *graph_suite(void)
{
    Suite *s = suite_create("graph");
    TCase *tc = tcase_create("structure");
    tcase_add_test(tc, test_topological_order);
    tcase_add_test(tc, test_reuse_add_mul);
    tcase_add_test(tc, test_diamond);
    tcase_add_test(tc, test_shared_weights);
    tcase_add_test(tc, test_attention_pattern);
    tcase_add_test(tc, test_multi_output);
    tcase_add_test(tc, test_backward_from_intermediate);
    suite_add_tcase(s, tc);

    tc = tcase_create("chains");
    tcase_set_timeout(tc, 300);
    tcase_add_test(tc, test_chain_10k);
    tcase_add_test(tc, test_chain_200k);
    suite_add_tcase(s, tc);

    tc = tcase_create("errors");
    tcase_add_test(tc, test_graph_new_errors);
    tcase_add_test(tc, test_backward_errors);
    tcase_add_test(tc, test_runtime_error_does_not_stick);
    tcase_add_test(tc, test_build_error_outranks_runtime_error);
    tcase_add_test(tc, test_graph_new_nomem_frees);
    suite_add_tcase(s, tc);

    tc = tcase_create("runs");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_accumulation);
    tcase_add_test(tc, test_intermediate_not_readable);
    tcase_add_test(tc, test_two_graphs_share_a_node);
    tcase_add_test(tc, test_rerun_bitwise);
    tcase_add_test(tc, test_rerun_new_data);
    tcase_add_test(tc, test_two_threads);
    suite_add_tcase(s, tc);

    tc = tcase_create("lifetime");
    tcase_add_test(tc, test_graph_free);
    tcase_add_test(tc, test_alignment);
    tcase_add_test(tc, test_lone_parameter);
    tcase_add_test(tc, test_const_only_graph);
    suite_add_tcase(s, tc);
    return s;
}

int main(void) { return tu_run(graph_suite()); }
