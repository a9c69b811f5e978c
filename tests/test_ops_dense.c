/*
 * test_ops_dense.c - tg_dense (PyTorch nn.Linear, y = x W^T + b): hand-computed values and
 * gradients (f32 and f64), with and without bias, any leading rank, agreement with
 * matmul + add, every shape/dtype/context error, gradcheck on several shapes, thread invariance,
 * and the edge cases (rank 0, rank 6, x used as both input and weight, accumulation over two
 * backwards, re-running with new data).
 */
#include "testutil.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- helpers --------------------------------------------------------------------------------- */
/* x (2,3) = [[1,2,3],[4,5,6]], W (2,3) = [[1,0,-1],[0.5,1,2]], b = [0.5,-1]
 * y = x W^T + b = [[1-3+0.5, 0.5+2+6-1], [4-6+0.5, 2+5+12-1]] = [[-1.5, 7.5], [-1.5, 18]]
 * dy = [[1,2],[3,4]]:
 *   dx = dy W   = [[1+1, 0+2, -1+4], [3+2, 0+4, -3+8]] = [[2,2,3],[5,4,5]]
 *   dW = dy^T x = [[1*1+3*4, 1*2+3*5, 1*3+3*6], [2*1+4*4, 2*2+4*5, 2*3+4*6]]
 *               = [[13,17,21],[18,24,30]]
 *   db = column sums of dy = [4, 6] */
static const double k_x[] = {1, 2, 3, 4, 5, 6}, k_w[] = {1, 0, -1, 0.5, 1, 2}, k_b[] = {0.5, -1};

START_TEST(test_forward_backward)
{
    tg_dtype dt = tu_dtypes[_i];
    tg_ctx *ctx = tu_ctx_new();
    tg_tensor *x = tu_in(ctx, dt, TG_DIMS(2, 3), "x", k_x);
    tg_tensor *w = tg_param(ctx, dt, TG_DIMS(2, 3), "weight");
    tg_tensor *b = tg_param(ctx, dt, TG_DIMS(2), "bias");
    tu_set(w, k_w);
    tu_set(b, k_b);
    tg_tensor *y = tg_dense(ctx, x, w, b);
    tg_graph *g = tu_fwd(ctx, y);
    EXPECT_SHAPE(y, 2, 2);
    ck_assert_str_eq(tg_tensor_op_name(y), "dense");
    EXPECT_DATA(y, 0, -1.5, 7.5, -1.5, 18);
    ck_assert_int_eq(tg_graph_n_grad_leaves(g), 3);
    tu_bwd(ctx, g, y, VALS(1, 2, 3, 4));
    EXPECT_GRAD(x, 0, 2, 2, 3, 5, 4, 5);
    EXPECT_GRAD(w, 0, 13, 17, 21, 18, 24, 30);
    EXPECT_GRAD(b, 0, 4, 6);
    tu_ctx_free(ctx);
}
END_TEST

/* Without bias: y = x W^T = [[-2, 8.5], [-2, 19]]; d(sum)/dx = column sums of W = [1.5, 1, 1]
 * per row; d(sum)/dW = column sums of x = [5, 7, 9] per row. */
START_TEST(test_no_bias)
{
    tg_dtype dt = tu_dtypes[_i];
    tg_ctx *ctx = tu_ctx_new();
    tg_tensor *x = tu_in(ctx, dt, TG_DIMS(2, 3), "x", k_x);
    tg_tensor *w = tu_in(ctx, dt, TG_DIMS(2, 3), "w", k_w);
    tg_tensor *y = tg_dense(ctx, x, w, NULL);
    tg_graph *g = tu_fwd(ctx, y);
    EXPECT_DATA(y, 0, -2, 8.5, -2, 19);
    ck_assert_int_eq(tg_graph_n_grad_leaves(g), 2);
    tu_bwd(ctx, g, y, NULL);
    EXPECT_GRAD(x, 0, 1.5, 1, 1, 1.5, 1, 1);
    EXPECT_GRAD(w, 0, 5, 7, 9, 5, 7, 9);
    tu_ctx_free(ctx);
}
END_TEST

/* Leading dims are kept: x (3) -> (2); x (2,1,3) -> (2,1,2), same rows as the 2-D case. */
START_TEST(test_leading_dims)
{
    tg_dtype dt = tu_dtypes[_i];
    tg_ctx *ctx = tu_ctx_new();
    tg_tensor *w = tu_in(ctx, dt, TG_DIMS(2, 3), "w", k_w);
    tg_tensor *b = tu_in(ctx, dt, TG_DIMS(2), "b", k_b);
    tg_tensor *x1 = tu_in(ctx, dt, TG_DIMS(3), "x1", VALS(1, 2, 3));
    tg_tensor *x3 = tu_in(ctx, dt, TG_DIMS(2, 1, 3), "x3", k_x);
    tg_tensor *y1 = tg_dense(ctx, x1, w, b), *y3 = tg_dense(ctx, x3, w, b);
    EXPECT_SHAPE(y1, 2);
    EXPECT_SHAPE(y3, 2, 1, 2);
    tg_tensor *outs[2] = {y1, y3};
    tg_graph *g = tg_graph_new(ctx, outs, 2);
    ck_assert_ptr_nonnull(g);
    ck_assert_int_eq(tg_graph_forward(g), TG_OK);
    EXPECT_DATA(y1, 0, -1.5, 7.5);
    EXPECT_DATA(y3, 0, -1.5, 7.5, -1.5, 18);
    tu_bwd(ctx, g, y3, VALS(1, 2, 3, 4));
    EXPECT_GRAD(x3, 0, 2, 2, 3, 5, 4, 5);
    EXPECT_GRAD(w, 0, 13, 17, 21, 18, 24, 30);
    EXPECT_GRAD(b, 0, 4, 6);
    tu_ctx_free(ctx);
}
END_TEST

/* Rank 6 input (1,2,1,1,2,3) through W (4,3), b (4): checked against a reference loop. */
START_TEST(test_rank6)
{
    tg_dtype dt = tu_dtypes[_i];
    tg_ctx *ctx = tu_ctx_new();
    tg_tensor *x = tu_in(ctx, dt, TG_DIMS(1, 2, 1, 1, 2, 3), "x", NULL);
    tg_tensor *w = tu_in(ctx, dt, TG_DIMS(4, 3), "w", NULL);
    tg_tensor *b = tu_in(ctx, dt, TG_DIMS(4), "b", VALS(1, -1, 2, -2));
    tu_fill_int(x, 5, 1, 7, 3);
    tu_fill_int(w, 3, 2, 5, 2);
    tg_tensor *y = tg_dense(ctx, x, w, b);
    tg_graph *g = tu_fwd(ctx, y);
    EXPECT_SHAPE(y, 1, 2, 1, 1, 2, 4);
    for (int r = 0; r < 4; r++)
        for (int o = 0; o < 4; o++) {
            double s = tg_get(b, o);
            for (int i = 0; i < 3; i++)
                s += tg_get(x, r * 3 + i) * tg_get(w, o * 3 + i);
            ck_assert_double_eq(tg_get(y, r * 4 + o), s);
        }
    tu_bwd(ctx, g, y, NULL);
    for (int o = 0; o < 4; o++)
        ck_assert_double_eq(tg_grad_get(b, o), 4);
    if (dt == TG_F64)
        tu_assert_gradcheck(ctx, y);
    else
        tu_gradcheck_f32(ctx, y);
    tu_ctx_free(ctx);
}
END_TEST

/* dense(x, W, b) equals add(matmul(x, W, tb), b) (values and gradients, to rounding). */
START_TEST(test_matches_matmul)
{
    tg_dtype dt = tu_dtypes[_i];
    double tol = dt == TG_F32 ? 1e-5 : 1e-13;
    tg_ctx *ctx = tu_ctx_new();
    tg_ctx_seed(ctx, 51);
    tg_tensor *x = tu_input(ctx, dt, TG_DIMS(3, 5, 7), "x", -1, 1);
    tg_tensor *w = tu_input(ctx, dt, TG_DIMS(4, 7), "w", -1, 1);
    tg_tensor *b = tu_input(ctx, dt, TG_DIMS(4), "b", -1, 1);
    tg_tensor *x2 = tu_input(ctx, dt, TG_DIMS(3, 5, 7), "x2", 0, 1);
    tg_tensor *w2 = tu_input(ctx, dt, TG_DIMS(4, 7), "w2", 0, 1);
    tg_tensor *b2 = tu_input(ctx, dt, TG_DIMS(4), "b2", 0, 1);
    ck_assert_int_eq(tg_tensor_copy(x2, x), TG_OK);
    ck_assert_int_eq(tg_tensor_copy(w2, w), TG_OK);
    ck_assert_int_eq(tg_tensor_copy(b2, b), TG_OK);
    tg_tensor *y = tg_dense(ctx, x, w, b);
    tg_tensor *ref = tg_add(ctx, tg_matmul(ctx, x2, w2, false, true), b2);
    EXPECT_SHAPE(ref, 3, 5, 4);
    tg_tensor *outs[2] = {y, ref};
    tg_graph *g = tg_graph_new(ctx, outs, 2);
    ck_assert_ptr_nonnull(g);
    ck_assert_int_eq(tg_graph_forward(g), TG_OK);
    ck_assert_double_le(tu_max_abs_diff(y, ref), tol);
    tg_tensor *dy = tg_const(ctx, dt, TG_DIMS(3, 5, 4), "dy");
    for (int i = 0; i < 60; i++)
        tg_set(dy, i, cos(0.4 * i));
    tg_tensor *ys[2] = {y, ref};
    const tg_tensor *dys[2] = {dy, dy};
    ck_assert_int_eq(tg_graph_backward_multi(g, 2, ys, dys), TG_OK);
    tg_tensor *pairs[3][2] = {{x, x2}, {w, w2}, {b, b2}};
    for (int p = 0; p < 3; p++)
        for (int64_t i = 0; i < tg_tensor_numel(pairs[p][0]); i++)
            ck_assert_msg(fabs(tg_grad_get(pairs[p][0], i) - tg_grad_get(pairs[p][1], i)) <= tol,
                          "grad of '%s'[%lld]: dense %.17g vs matmul %.17g",
                          tg_tensor_name(pairs[p][0]), (long long)i,
                          tg_grad_get(pairs[p][0], i), tg_grad_get(pairs[p][1], i));
    tu_ctx_free(ctx);
}
END_TEST

/* x as both input and weight: dense(x, x) = x x^T; x = [[1,2],[3,4]] -> [[5,11],[11,25]],
 * d(sum)/dx = 2 * column sums = [[8,12],[8,12]]. */
START_TEST(test_used_twice)
{
    tg_dtype dt = tu_dtypes[_i];
    tg_ctx *ctx = tu_ctx_new();
    tg_tensor *x = tu_in(ctx, dt, TG_DIMS(2, 2), "x", VALS(1, 2, 3, 4));
    tg_tensor *y = tg_dense(ctx, x, x, NULL);
    tg_graph *g = tu_fwd(ctx, y);
    EXPECT_DATA(y, 0, 5, 11, 11, 25);
    tu_bwd(ctx, g, y, NULL);
    EXPECT_GRAD(x, 0, 8, 12, 8, 12);
    /* and a bias shared by two dense layers: db = 2 * rows */
    tg_tensor *b = tu_in(ctx, dt, TG_DIMS(2), "b", VALS(1, 1));
    tg_tensor *z = tg_add(ctx, tg_dense(ctx, x, x, b), tg_dense(ctx, x, x, b));
    g = tu_fwd(ctx, z);
    EXPECT_DATA(z, 0, 12, 24, 24, 52);
    tu_bwd(ctx, g, z, NULL);
    EXPECT_GRAD(b, 0, 4, 4);
    tu_ctx_free(ctx);
}
END_TEST

/* ---- errors --------------------------------------------------------------------------------- */
START_TEST(test_err_shapes)
{
    tg_ctx *ctx = tu_ctx_new();
    tg_tensor *x = tg_input(ctx, TG_F32, TG_DIMS(2, 3), "x");
    tg_tensor *w = tg_param(ctx, TG_F32, TG_DIMS(2, 3), "w");
    tg_tensor *w1 = tg_param(ctx, TG_F32, TG_DIMS(3), "w1");
    tg_tensor *w3 = tg_param(ctx, TG_F32, TG_DIMS(1, 2, 3), "w3");
    tg_tensor *w4 = tg_param(ctx, TG_F32, TG_DIMS(2, 4), "w4");
    tg_tensor *b3 = tg_param(ctx, TG_F32, TG_DIMS(3), "b3");
    tg_tensor *b12 = tg_param(ctx, TG_F32, TG_DIMS(1, 2), "b12");
    tg_tensor *b0 = tg_param(ctx, TG_F32, 0, NULL, "b0");
    tg_tensor *x0 = tg_input(ctx, TG_F32, 0, NULL, "x0");
    struct {
        tg_tensor *x, *w, *b;
        const char *n1, *n2;
    } bad[] = {
        {x, w1, NULL, "(3)", "w must be"},      /* w rank 1 */
        {x, w3, NULL, "(1, 2, 3)", "w must be"}, /* w rank 3 */
        {x, w4, NULL, "(2, 3)", "(2, 4)"},       /* in_features 3 vs 4 */
        {x, w, b3, "(3)", "(2, 3)"},             /* b length 3 vs out 2 */
        {x, w, b12, "(1, 2)", "b must be"},      /* b rank 2 */
        {x, w, b0, "()", "b must be"},           /* b rank 0 */
        {x0, w, NULL, "()", "(2, 3)"},           /* x rank 0 */
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        ck_assert_msg(tg_dense(ctx, bad[i].x, bad[i].w, bad[i].b) == NULL, "case %zu", i);
        tu_assert_error(ctx, TG_ERR_SHAPE, "tg_dense");
        tu_assert_error(ctx, TG_ERR_SHAPE, bad[i].n1);
        tu_assert_error(ctx, TG_ERR_SHAPE, bad[i].n2);
        tg_ctx_clear_error(ctx);
    }
    tu_ctx_free(ctx);
}
END_TEST

START_TEST(test_err_dtype_context)
{
    tg_ctx *ctx = tu_ctx_new(), *other = tu_ctx_new();
    tg_tensor *x = tg_input(ctx, TG_F32, TG_DIMS(2, 3), "x");
    tg_tensor *w = tg_param(ctx, TG_F32, TG_DIMS(2, 3), "w");
    tg_tensor *b = tg_param(ctx, TG_F32, TG_DIMS(2), "b");
    tg_tensor *w64 = tg_param(ctx, TG_F64, TG_DIMS(2, 3), "w64");
    tg_tensor *b64 = tg_param(ctx, TG_F64, TG_DIMS(2), "b64");
    tg_tensor *x64 = tg_input(ctx, TG_F64, TG_DIMS(2, 3), "x64");
    tg_tensor *cases[][3] = {{x, w64, b}, {x, w, b64}, {x64, w, NULL}, {x64, w64, b}};
    for (int i = 0; i < 4; i++) {
        ck_assert_ptr_null(tg_dense(ctx, cases[i][0], cases[i][1], cases[i][2]));
        tu_assert_error(ctx, TG_ERR_DTYPE, "tg_dense");
        tg_ctx_clear_error(ctx);
    }
    tg_tensor *wo = tg_param(other, TG_F32, TG_DIMS(2, 3), "w_other");
    tg_tensor *bo = tg_param(other, TG_F32, TG_DIMS(2), "b_other");
    tg_tensor *xo = tg_input(other, TG_F32, TG_DIMS(2, 3), "x_other");
    tg_tensor *oc[][3] = {{x, wo, b}, {x, w, bo}, {xo, w, b}};
    for (int i = 0; i < 3; i++) {
        ck_assert_ptr_null(tg_dense(ctx, oc[i][0], oc[i][1], oc[i][2]));
        tu_assert_error(ctx, TG_ERR_ARG, "tg_dense");
        tu_assert_error(ctx, TG_ERR_ARG, "another context");
        tg_ctx_clear_error(ctx);
    }
    ck_assert_int_eq(tg_ctx_status(other), TG_OK);
    tu_ctx_free(other);
    tu_ctx_free(ctx);
}
END_TEST

/* NULL x or w propagate NULL (b NULL means "no bias"); first error sticks; a failed builder
 * passed as the (optional) bias still leaves the error pending, so no graph is built. */
START_TEST(test_err_null_first_sticks)
{
    tg_ctx *ctx = tu_ctx_new();
    tg_tensor *x = tg_input(ctx, TG_F32, TG_DIMS(2, 3), "x");
    tg_tensor *w = tg_param(ctx, TG_F32, TG_DIMS(2, 3), "w");
    tg_tensor *b = tg_param(ctx, TG_F32, TG_DIMS(2), "b");
    ck_assert_ptr_null(tg_dense(ctx, NULL, w, b));
    ck_assert_ptr_null(tg_dense(ctx, x, NULL, b));
    ck_assert_ptr_null(tg_dense(ctx, NULL, NULL, NULL));
    ck_assert_int_eq(tg_ctx_status(ctx), TG_OK);
    tg_tensor *good = tg_dense(ctx, x, w, b);
    ck_assert_ptr_nonnull(good);
    tg_tensor *bad = tg_dense(ctx, tg_dense(ctx, x, w, NULL), w, b); /* (2,2) into in_features 3 */
    ck_assert_ptr_null(bad);
    tu_assert_error(ctx, TG_ERR_SHAPE, "tg_dense");
    char first[512];
    snprintf(first, sizeof first, "%s", tg_ctx_message(ctx));
    ck_assert_ptr_null(tg_dense(ctx, tg_dense(ctx, bad, w, b), w, NULL));
    ck_assert_ptr_null(tg_dense(ctx, x, b, NULL)); /* a new error is not recorded */
    ck_assert_str_eq(tg_ctx_message(ctx), first);
    tg_tensor *nb = tg_dense(ctx, x, w, bad); /* bias "absent": builds, but the error stays */
    ck_assert_str_eq(tg_ctx_message(ctx), first);
    if (nb)
        ck_assert_ptr_null(tg_graph_new(ctx, &nb, 1));
    tu_assert_graph_refused(ctx, good, first);
    tu_ctx_free(ctx);
}
END_TEST

/* ---- gradcheck ------------------------------------------------------------------------------ */
static tg_tensor *gc_case(tg_ctx *ctx, tg_dtype dt, int which)
{
    switch (which) {
    case 0: return tg_dense(ctx, GIN("x", 5, 2), GPARAM("weight", 1, 2), GPARAM("bias", 1));
    case 1: return tg_dense(ctx, GIN("x", 1, 1, 4), GPARAM("weight", 3, 4), NULL);
    case 2: return tg_dense(ctx, GIN("x", 3, 2, 1), GPARAM("weight", 4, 1), GPARAM("bias", 4));
    case 3: return tg_dense(ctx, GIN("x", 7), GPARAM("weight", 2, 7), GPARAM("bias", 2));
    case 4: return tg_dense(ctx, GIN("x", 9, 8), GPARAM("weight", 3, 8), GPARAM("bias", 3));
    case 5: { /* constant input: only W and b are differentiable */
        tg_tensor *x = tg_const(ctx, dt, TG_DIMS(4, 3), "x");
        tg_fill_uniform(x, -1, 1);
        return tg_dense(ctx, x, GPARAM("weight", 2, 3), GPARAM("bias", 2));
    }
    default: {
        tg_tensor *x = GIN("x", 3, 3);
        return tg_dense(ctx, x, x, GPARAM("bias", 3));
    }
    }
}
#define N_GC_CASES 7

START_TEST(test_gradcheck_f64)
{
    tu_gradcheck_case(gc_case, TG_F64, _i, 1100 + (uint64_t)_i);
}
END_TEST

START_TEST(test_gradcheck_f32)
{
    static const int cases[] = {0, 2, 4};
    tu_gradcheck_case(gc_case, TG_F32, cases[_i], 1200 + (uint64_t)_i);
}
END_TEST

/* ---- thread invariance ---------------------------------------------------------------------- */
static tg_tensor *ti_dense(tg_ctx *ctx, tg_dtype dt) /* (512,128) -> (256) with bias */
{
    int64_t r = tu_big(512, 200), i = tu_big(128, 64), o = tu_big(256, 160);
    return tg_dense(ctx, GIN("x", r, i), GPARAM("weight", o, i), GPARAM("bias", o));
}
static tg_tensor *ti_dense_3d(tg_ctx *ctx, tg_dtype dt) /* (4,64,64) -> (4,64,96), no bias */
{
    int64_t t = tu_big(64, 24), o = tu_big(96, 40);
    return tg_dense(ctx, GIN("x", 4, t, 64), GPARAM("weight", o, 64), NULL);
}
static tg_tensor *ti_dense_narrow(tg_ctx *ctx, tg_dtype dt) /* many rows, one output */
{
    int64_t r = tu_big(4096, 1024);
    return tg_dense(ctx, GIN("x", r, 16), GPARAM("weight", 1, 16), GPARAM("bias", 1));
}
static const tu_build_fn k_ti_builds[] = {ti_dense, ti_dense_3d, ti_dense_narrow};
#define N_TI (int)(sizeof k_ti_builds / sizeof k_ti_builds[0])

/* ---- edge cases ----------------------------------------------------------------------------- */
/* Two backwards without zero_grad double every gradient exactly. */
START_TEST(test_backward_twice)
{
    tg_dtype dt = tu_dtypes[_i];
    tg_ctx *ctx = tu_ctx_new();
    tg_ctx_seed(ctx, 61);
    tg_tensor *x = tu_input(ctx, dt, TG_DIMS(6, 9), "x", -1, 1);
    tg_tensor *w = tu_input(ctx, dt, TG_DIMS(5, 9), "w", -1, 1);
    tg_tensor *b = tu_input(ctx, dt, TG_DIMS(5), "b", -1, 1);
    tg_tensor *y = tg_dense(ctx, x, w, b);
    tg_graph *g = tu_fwd(ctx, y);
    double dy[30];
    for (int i = 0; i < 30; i++)
        dy[i] = sin(1.3 * i) + 0.2;
    tg_tensor *leaves[3] = {x, w, b};
    tu_assert_backward_twice(ctx, g, y, dy, leaves, 3);
    tu_ctx_free(ctx);
}
END_TEST

/* The same guarantee when a gradient is a sum of several partial products: many rows
 * (dW = dy^T x reduces over R = 200 rows, longer than the GEMM's K blocking) and one weight shared
 * by two layers. PyTorch adds the finished gradient to .grad once, so the second backward adds
 * exactly the same amount. */
START_TEST(test_backward_twice_multi_term)
{
    tg_dtype dt = tu_dtypes[_i % 2];
    tg_ctx *ctx = tu_ctx_new();
    tg_ctx_seed(ctx, 62);
    tg_tensor *w = tu_input(ctx, dt, TG_DIMS(5, 9), "w", -1, 1);
    tg_tensor *y;
    if (_i / 2 == 0) {
        y = tg_dense(ctx, tu_input(ctx, dt, TG_DIMS(200, 9), "x", -1, 1), w, NULL);
    } else {
        tg_tensor *x1 = tu_input(ctx, dt, TG_DIMS(3, 9), "x1", -1, 1);
        tg_tensor *x2 = tu_input(ctx, dt, TG_DIMS(3, 9), "x2", -1, 1);
        y = tg_add(ctx, tg_dense(ctx, x1, w, NULL), tg_dense(ctx, x2, w, NULL));
    }
    tg_graph *g = tu_fwd(ctx, y);
    int64_t n = tg_tensor_numel(y);
    double *dy = malloc(sizeof(double) * (size_t)n);
    for (int64_t i = 0; i < n; i++)
        dy[i] = sin(1.3 * (double)i) + 0.2;
    tu_assert_backward_twice(ctx, g, y, dy, &w, 1);
    free(dy);
    tu_ctx_free(ctx);
}
END_TEST

/* Same with small integers (no rounding): exactly twice the hand-computed gradients. */
START_TEST(test_backward_twice_integer)
{
    tg_dtype dt = tu_dtypes[_i];
    tg_ctx *ctx = tu_ctx_new();
    tg_tensor *x = tu_in(ctx, dt, TG_DIMS(2, 3), "x", k_x);
    tg_tensor *w = tu_in(ctx, dt, TG_DIMS(2, 3), "w", k_w);
    tg_tensor *b = tu_in(ctx, dt, TG_DIMS(2), "b", k_b);
    tg_tensor *y = tg_dense(ctx, x, w, b);
    tg_graph *g = tu_fwd(ctx, y);
    tu_bwd(ctx, g, y, VALS(1, 2, 3, 4));
    tu_bwd(ctx, g, y, VALS(1, 2, 3, 4));
    EXPECT_GRAD(x, 0, 4, 4, 6, 10, 8, 10);
    EXPECT_GRAD(w, 0, 26, 34, 42, 36, 48, 60);
    EXPECT_GRAD(b, 0, 8, 12);
    tg_graph_zero_grad(g);
    EXPECT_GRAD(b, 0, 0, 0);
    tu_ctx_free(ctx);
}
END_TEST

START_TEST(test_rerun_new_data)
{
    tg_dtype dt = tu_dtypes[_i];
    tg_ctx *ctx = tu_ctx_new();
    tg_tensor *x = tu_in(ctx, dt, TG_DIMS(2, 3), "x", k_x);
    tg_tensor *w = tu_in(ctx, dt, TG_DIMS(2, 3), "w", k_w);
    tg_tensor *b = tu_in(ctx, dt, TG_DIMS(2), "b", k_b);
    tg_tensor *y = tg_dense(ctx, x, w, b);
    tg_graph *g = tu_fwd(ctx, y);
    EXPECT_DATA(y, 0, -1.5, 7.5, -1.5, 18);
    tu_set(x, VALS(1, 0, 0, 0, 0, 1)); /* picks W's columns 0 and 2 */
    tu_set(b, VALS(0, 0));
    ck_assert_int_eq(tg_graph_forward(g), TG_OK);
    EXPECT_DATA(y, 0, 1, 0.5, -1, 2);
    tu_ctx_free(ctx);
}
END_TEST

static Suite *dense_suite(void)
{
    Suite *s = suite_create("ops_dense");
    TCase *tc = tu_tcase(s, "forward", 0);
    tcase_add_loop_test(tc, test_forward_backward, 0, 2);
    tcase_add_loop_test(tc, test_no_bias, 0, 2);
    tcase_add_loop_test(tc, test_leading_dims, 0, 2);
    tcase_add_loop_test(tc, test_matches_matmul, 0, 2);
    tcase_add_loop_test(tc, test_used_twice, 0, 2);

    tc = tu_tcase(s, "errors", 0);
    tcase_add_test(tc, test_err_shapes);
    tcase_add_test(tc, test_err_dtype_context);
    tcase_add_test(tc, test_err_null_first_sticks);

    tc = tu_tcase(s, "gradcheck", 60);
    tcase_add_loop_test(tc, test_gradcheck_f64, 0, N_GC_CASES);
    tcase_add_loop_test(tc, test_gradcheck_f32, 0, 3);

    tu_add_thread_tcase(s, k_ti_builds, N_TI);

    tc = tu_tcase(s, "edge", 60);
    tcase_add_loop_test(tc, test_rank6, 0, 2);
    tcase_add_loop_test(tc, test_backward_twice, 0, 2);
    tcase_add_loop_test(tc, test_backward_twice_multi_term, 0, 4);
    tcase_add_loop_test(tc, test_backward_twice_integer, 0, 2);
    tcase_add_loop_test(tc, test_rerun_new_data, 0, 2);
    return s;
}

int main(void) { return tu_run(dense_suite()); }
