/*
 * test_ops_elementwise.c - tg_scale, tg_add, tg_mul (broadcasting), tg_relu, tg_gelu:
 * hand-computed values and gradients (f32 and f64), every shape/dtype/argument error, gradcheck
 * on several shapes, thread invariance, and the edge cases (rank 0, rank 6, x*x, x+x,
 * accumulation over two backwards, re-running with new data, signed zeros and NaN).
 */
#include "testutil.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- helpers --------------------------------------------------------------------------------- */
/* ---- scale ---------------------------------------------------------------------------------- */
/* [1, -2, 3.5] * 2.5 = [2.5, -5, 8.75];  dy = [1, 2, 3] -> dx = 2.5 dy = [2.5, 5, 7.5]
 * * 0 = zeros (dx = 0), * -1 = negation (dx = -dy). */
START_TEST(test_scale)
{
    tg_dtype dt = tu_dtypes[_i];
    tg_ctx *ctx = tu_ctx_new();
    tg_tensor *x = tu_in(ctx, dt, TG_DIMS(3), "x", VALS(1, -2, 3.5));
    tg_tensor *y = tg_scale(ctx, x, 2.5);
    tg_graph *g = tu_fwd(ctx, y);
    EXPECT_SHAPE(y, 3);
    ck_assert_str_eq(tg_tensor_op_name(y), "scale");
    EXPECT_DATA(y, 0, 2.5, -5, 8.75);
    tu_bwd(ctx, g, y, VALS(1, 2, 3));
    EXPECT_GRAD(x, 0, 2.5, 5, 7.5);

    tg_tensor *x2 = tu_in(ctx, dt, TG_DIMS(2, 2), "x2", VALS(1, -2, 0, 4));
    tg_tensor *z = tg_scale(ctx, x2, 0.0), *n = tg_scale(ctx, x2, -1.0);
    tg_tensor *outs[2] = {z, n};
    g = tg_graph_new(ctx, outs, 2);
    ck_assert_ptr_nonnull(g);
    ck_assert_int_eq(tg_graph_forward(g), TG_OK);
    EXPECT_DATA(z, 0, 0, 0, 0, 0);
    EXPECT_DATA(n, 0, -1, 2, 0, -4);
    tu_bwd(ctx, g, n, VALS(1, 2, 3, 4));
    EXPECT_GRAD(x2, 0, -1, -2, -3, -4);
    tg_graph_zero_grad(g);
    tu_bwd(ctx, g, z, VALS(1, 2, 3, 4));
    EXPECT_GRAD(x2, 0, 0, 0, 0, 0);
    tu_ctx_free(ctx);
}
END_TEST

/* ---- add ------------------------------------------------------------------------------------ */
/* Same shape: [[1,2,3],[4,5,6]] + [[10,20,30],[40,50,60]] = [[11,22,33],[44,55,66]]
 * Bias (2,3) + (3) [10,20,30] = [[11,22,33],[14,25,36]];
 *   dy = [[1,2,3],[4,5,6]]: dx = dy, dbias = column sums [5, 7, 9]
 * Outer (3,1) [1,2,3] + (1,2) [10,20] = [[11,21],[12,22],[13,23]];
 *   d(sum)/da = [2,2,2] (2 columns), d(sum)/db = [3,3] (3 rows)
 * Left dims (2,3) + (2,1) [[10],[20]] = [[11,12,13],[24,25,26]]; d(sum)/db = [3, 3] */
START_TEST(test_add_same_and_bias)
{
    tg_dtype dt = tu_dtypes[_i];
    tg_ctx *ctx = tu_ctx_new();
    tg_tensor *a = tu_in(ctx, dt, TG_DIMS(2, 3), "a", VALS(1, 2, 3, 4, 5, 6));
    tg_tensor *b = tu_in(ctx, dt, TG_DIMS(2, 3), "b", VALS(10, 20, 30, 40, 50, 60));
    tg_tensor *y = tg_add(ctx, a, b);
    tg_graph *g = tu_fwd(ctx, y);
    ck_assert_str_eq(tg_tensor_op_name(y), "add");
    EXPECT_SHAPE(y, 2, 3);
    EXPECT_DATA(y, 0, 11, 22, 33, 44, 55, 66);
    tu_bwd(ctx, g, y, VALS(1, -2, 3, -4, 5, -6));
    EXPECT_GRAD(a, 0, 1, -2, 3, -4, 5, -6);
    EXPECT_GRAD(b, 0, 1, -2, 3, -4, 5, -6);

    tg_tensor *x = tu_in(ctx, dt, TG_DIMS(2, 3), "x", VALS(1, 2, 3, 4, 5, 6));
    tg_tensor *bias = tu_in(ctx, dt, TG_DIMS(3), "bias", VALS(10, 20, 30));
    y = tg_add(ctx, x, bias);
    g = tu_fwd(ctx, y);
    EXPECT_SHAPE(y, 2, 3);
    EXPECT_DATA(y, 0, 11, 22, 33, 14, 25, 36);
    tu_bwd(ctx, g, y, VALS(1, 2, 3, 4, 5, 6));
    EXPECT_GRAD(x, 0, 1, 2, 3, 4, 5, 6);
    EXPECT_GRAD(bias, 0, 5, 7, 9);

    /* the broadcast operand first gives the same */
    tg_tensor *y2 = tg_add(ctx, bias, x);
    tu_fwd(ctx, y2);
    EXPECT_SHAPE(y2, 2, 3);
    EXPECT_DATA(y2, 0, 11, 22, 33, 14, 25, 36);
    tu_ctx_free(ctx);
}
END_TEST

START_TEST(test_add_outer_and_left)
{
    tg_dtype dt = tu_dtypes[_i];
    tg_ctx *ctx = tu_ctx_new();
    tg_tensor *a = tu_in(ctx, dt, TG_DIMS(3, 1), "a", VALS(1, 2, 3));
    tg_tensor *b = tu_in(ctx, dt, TG_DIMS(1, 2), "b", VALS(10, 20));
    tg_tensor *y = tg_add(ctx, a, b);
    tg_graph *g = tu_fwd(ctx, y);
    EXPECT_SHAPE(y, 3, 2);
    EXPECT_DATA(y, 0, 11, 21, 12, 22, 13, 23);
    tu_bwd(ctx, g, y, NULL);
    EXPECT_GRAD(a, 0, 2, 2, 2);
    EXPECT_GRAD(b, 0, 3, 3);

    tg_tensor *x = tu_in(ctx, dt, TG_DIMS(2, 3), "x", VALS(1, 2, 3, 4, 5, 6));
    tg_tensor *c = tu_in(ctx, dt, TG_DIMS(2, 1), "c", VALS(10, 20));
    y = tg_add(ctx, x, c);
    g = tu_fwd(ctx, y);
    EXPECT_DATA(y, 0, 11, 12, 13, 24, 25, 26);
    tu_bwd(ctx, g, y, VALS(1, 2, 3, 4, 5, 6));
    EXPECT_GRAD(c, 0, 6, 15);
    tu_ctx_free(ctx);
}
END_TEST

/* Rank 0 broadcasts against anything: 5 + [[1,2],[3,4]] = [[6,7],[8,9]];
 * dy = [1,2,3,4]: d/ds = 10, d/dx = dy. () + () = () too. */
START_TEST(test_add_rank0)
{
    tg_dtype dt = tu_dtypes[_i];
    tg_ctx *ctx = tu_ctx_new();
    tg_tensor *s = tu_in(ctx, dt, 0, NULL, "s", VALS(5));
    tg_tensor *x = tu_in(ctx, dt, TG_DIMS(2, 2), "x", VALS(1, 2, 3, 4));
    tg_tensor *y = tg_add(ctx, s, x);
    tg_graph *g = tu_fwd(ctx, y);
    EXPECT_SHAPE(y, 2, 2);
    EXPECT_DATA(y, 0, 6, 7, 8, 9);
    tu_bwd(ctx, g, y, VALS(1, 2, 3, 4));
    EXPECT_GRAD(s, 0, 10);
    EXPECT_GRAD(x, 0, 1, 2, 3, 4);

    tg_tensor *t = tu_in(ctx, dt, 0, NULL, "t", VALS(-1.5));
    tg_tensor *ss = tg_add(ctx, s, t);
    g = tu_fwd(ctx, ss);
    ck_assert_int_eq(tg_tensor_rank(ss), 0);
    EXPECT_DATA(ss, 0, 3.5);
    ck_assert_int_eq(tg_graph_backward(g, ss, NULL), TG_OK);
    EXPECT_GRAD(t, 0, 1);
    tu_ctx_free(ctx);
}
END_TEST

/* Rank 6 with broadcasting on alternate axes: a (2,1,3,1,2,1) + b (1,4,1,3,1,2)
 * -> (2,4,3,3,2,2), y = a[i0,i2,i4] + b[i1,i3,i5]; d(sum)/da = 4*3*2 = 24, d(sum)/db = 12. */
START_TEST(test_add_rank6)
{
    tg_dtype dt = tu_dtypes[_i];
    tg_ctx *ctx = tu_ctx_new();
    tg_tensor *a = tu_in(ctx, dt, TG_DIMS(2, 1, 3, 1, 2, 1), "a", NULL);
    tg_tensor *b = tu_in(ctx, dt, TG_DIMS(1, 4, 1, 3, 1, 2), "b", NULL);
    for (int i = 0; i < 12; i++)
        tg_set(a, i, 100 * i);
    for (int i = 0; i < 24; i++)
        tg_set(b, i, i);
    tg_tensor *y = tg_add(ctx, a, b);
    tg_graph *g = tu_fwd(ctx, y);
    EXPECT_SHAPE(y, 2, 4, 3, 3, 2, 2);
    int64_t n = 0;
    for (int i0 = 0; i0 < 2; i0++)
        for (int i1 = 0; i1 < 4; i1++)
            for (int i2 = 0; i2 < 3; i2++)
                for (int i3 = 0; i3 < 3; i3++)
                    for (int i4 = 0; i4 < 2; i4++)
                        for (int i5 = 0; i5 < 2; i5++)
                            ck_assert_double_eq(tg_get(y, n++),
                                                100 * ((i0 * 3 + i2) * 2 + i4) +
                                                    (i1 * 3 + i3) * 2 + i5);
    tu_bwd(ctx, g, y, NULL);
    for (int i = 0; i < 12; i++)
        ck_assert_double_eq(tg_grad_get(a, i), 24);
    for (int i = 0; i < 24; i++)
        ck_assert_double_eq(tg_grad_get(b, i), 12);
    tu_ctx_free(ctx);
}
END_TEST

/* ---- mul ------------------------------------------------------------------------------------ */
/* [1,2,3] * [4,5,6] = [4,10,18]; d(sum)/da = b, d(sum)/db = a.
 * (2,3) [[1,2,3],[4,5,6]] * (2,1) [[2],[-1]] = [[2,4,6],[-4,-5,-6]];
 *   d(sum)/da = [[2,2,2],[-1,-1,-1]], d(sum)/db = row sums [6, 15].
 * () 2 * (3) [1,2,3] = [2,4,6]; d(sum)/ds = 6, d(sum)/dx = [2,2,2]. */
START_TEST(test_mul)
{
    tg_dtype dt = tu_dtypes[_i];
    tg_ctx *ctx = tu_ctx_new();
    tg_tensor *a = tu_in(ctx, dt, TG_DIMS(3), "a", VALS(1, 2, 3));
    tg_tensor *b = tu_in(ctx, dt, TG_DIMS(3), "b", VALS(4, 5, 6));
    tg_tensor *y = tg_mul(ctx, a, b);
    tg_graph *g = tu_fwd(ctx, y);
    ck_assert_str_eq(tg_tensor_op_name(y), "mul");
    EXPECT_DATA(y, 0, 4, 10, 18);
    tu_bwd(ctx, g, y, NULL);
    EXPECT_GRAD(a, 0, 4, 5, 6);
    EXPECT_GRAD(b, 0, 1, 2, 3);

    tg_tensor *m = tu_in(ctx, dt, TG_DIMS(2, 3), "m", VALS(1, 2, 3, 4, 5, 6));
    tg_tensor *c = tu_in(ctx, dt, TG_DIMS(2, 1), "c", VALS(2, -1));
    y = tg_mul(ctx, m, c);
    g = tu_fwd(ctx, y);
    EXPECT_SHAPE(y, 2, 3);
    EXPECT_DATA(y, 0, 2, 4, 6, -4, -5, -6);
    tu_bwd(ctx, g, y, NULL);
    EXPECT_GRAD(m, 0, 2, 2, 2, -1, -1, -1);
    EXPECT_GRAD(c, 0, 6, 15);

    tg_tensor *s = tu_in(ctx, dt, 0, NULL, "s", VALS(2));
    tg_tensor *x = tu_in(ctx, dt, TG_DIMS(3), "x", VALS(1, 2, 3));
    y = tg_mul(ctx, s, x);
    g = tu_fwd(ctx, y);
    EXPECT_SHAPE(y, 3);
    EXPECT_DATA(y, 0, 2, 4, 6);
    tu_bwd(ctx, g, y, NULL);
    EXPECT_GRAD(s, 0, 6);
    EXPECT_GRAD(x, 0, 2, 2, 2);
    tu_ctx_free(ctx);
}
END_TEST

/* ---- the same tensor used twice ------------------------------------------------------------- */
/* x = [1,-2,3]: x*x = [1,4,9], d(sum)/dx = 2x = [2,-4,6]; x+x = [2,-4,6], d(sum)/dx = 2;
 * outer x (3,1) * x (1,3) (a reshape of the same leaf): y[i,j] = x_i x_j,
 *   d(sum)/dx_k = 2 sum(x) = 4. */
START_TEST(test_used_twice)
{
    tg_dtype dt = tu_dtypes[_i];
    tg_ctx *ctx = tu_ctx_new();
    tg_tensor *x = tu_in(ctx, dt, TG_DIMS(3), "x", VALS(1, -2, 3));
    tg_tensor *sq = tg_mul(ctx, x, x);
    tg_graph *g = tu_fwd(ctx, sq);
    EXPECT_DATA(sq, 0, 1, 4, 9);
    tu_bwd(ctx, g, sq, NULL);
    EXPECT_GRAD(x, 0, 2, -4, 6);

    tg_tensor *x2 = tu_in(ctx, dt, TG_DIMS(3), "x2", VALS(1, -2, 3));
    tg_tensor *dbl = tg_add(ctx, x2, x2);
    g = tu_fwd(ctx, dbl);
    EXPECT_DATA(dbl, 0, 2, -4, 6);
    tu_bwd(ctx, g, dbl, NULL);
    EXPECT_GRAD(x2, 0, 2, 2, 2);

    tg_tensor *x3 = tu_in(ctx, dt, TG_DIMS(3), "x3", VALS(1, -2, 3));
    tg_tensor *outer = tg_mul(ctx, tg_reshape(ctx, x3, TG_DIMS(3, 1)),
                              tg_reshape(ctx, x3, TG_DIMS(1, 3)));
    g = tu_fwd(ctx, outer);
    EXPECT_SHAPE(outer, 3, 3);
    EXPECT_DATA(outer, 0, 1, -2, 3, -2, 4, -6, 3, -6, 9);
    tu_bwd(ctx, g, outer, NULL);
    EXPECT_GRAD(x3, 0, 4, 4, 4);
    tu_ctx_free(ctx);
}
END_TEST

/* ---- relu ----------------------------------------------------------------------------------- */
/* x = [-2, -0.0, 0, 0.5, 3, -1e-30, 1e30, -inf, inf]
 * relu = [0, 0, 0, 0.5, 3, 0, 1e30, 0, inf]; dy = 1..9 -> dx = dy where x > 0 (0 at exactly 0
 * and -0.0, PyTorch's choice) = [0, 0, 0, 4, 5, 0, 7, 0, 9]. */
START_TEST(test_relu)
{
    tg_dtype dt = tu_dtypes[_i];
    tg_ctx *ctx = tu_ctx_new();
    tg_tensor *x = tu_in(ctx, dt, TG_DIMS(9), "x",
                         VALS(-2, -0.0, 0, 0.5, 3, -1e-30, 1e30, -INFINITY, INFINITY));
    tg_tensor *y = tg_relu(ctx, x);
    tg_graph *g = tu_fwd(ctx, y);
    ck_assert_str_eq(tg_tensor_op_name(y), "relu");
    double big30 = dt == TG_F32 ? (double)1e30f : 1e30;
    EXPECT_DATA(y, 0, 0, 0, 0, 0.5, 3, 0, big30, 0, INFINITY);
    tu_bwd(ctx, g, y, VALS(1, 2, 3, 4, 5, 6, 7, 8, 9));
    EXPECT_GRAD(x, 0, 0, 0, 0, 4, 5, 0, 7, 0, 9);
    tu_ctx_free(ctx);
}
END_TEST

/* NaN propagates through relu (it is not silently turned into 0). */
START_TEST(test_relu_nan)
{
    tg_dtype dt = tu_dtypes[_i];
    tg_ctx *ctx = tu_ctx_new();
    tg_tensor *x = tu_in(ctx, dt, TG_DIMS(2), "x", VALS(NAN, 1));
    tg_tensor *y = tg_relu(ctx, x);
    tu_fwd(ctx, y);
    ck_assert(isnan(tg_get(y, 0)));
    ck_assert_double_eq(tg_get(y, 1), 1);
    tu_ctx_free(ctx);
}
END_TEST

/* ---- gelu ----------------------------------------------------------------------------------- */
/* Exact GELU x Phi(x), Phi(x) = (1 + erf(x / sqrt 2)) / 2; gradient Phi(x) + x phi(x):
 *   x     gelu(x)                     gelu'(x)
 *   0     0                           0.5
 *   1     0.8413447460685429          1.0833154705876864
 *  -1    -0.15865525393145707        -0.08331547058768629
 *   2     1.9544997361036416          1.085231801078197
 *  -3    -0.00404969409489031        -0.01194564720418392
 *   0.5   0.34573123063700656         0.8674951246561629
 *  10    10                           1
 * -10    -0 (erf saturates)          ~ -7.7e-22 */
START_TEST(test_gelu)
{
    tg_dtype dt = tu_dtypes[_i];
    double tol = dt == TG_F32 ? 1e-6 : 1e-14;
    tg_ctx *ctx = tu_ctx_new();
    tg_tensor *x = tu_in(ctx, dt, TG_DIMS(8), "x", VALS(0, 1, -1, 2, -3, 0.5, 10, -10));
    tg_tensor *y = tg_gelu(ctx, x);
    tg_graph *g = tu_fwd(ctx, y);
    ck_assert_str_eq(tg_tensor_op_name(y), "gelu");
    EXPECT_DATA(y, tol, 0, 0.8413447460685429, -0.15865525393145707, 1.9544997361036416,
                -0.00404969409489031, 0.34573123063700656, 10, 0);
    tu_bwd(ctx, g, y, NULL);
    EXPECT_GRAD(x, tol, 0.5, 1.0833154705876864, -0.08331547058768629, 1.085231801078197,
                -0.01194564720418392, 0.8674951246561629, 1, 0);
    ck_assert_double_eq(tg_get(y, 0), 0);       /* exactly 0 at 0 */
    ck_assert_double_eq(tg_grad_get(x, 0), 0.5); /* exactly 1/2 at 0 */
    ck_assert(fabs(tg_grad_get(x, 7)) < 1e-20);
    tu_ctx_free(ctx);
}
END_TEST

/* ---- errors --------------------------------------------------------------------------------- */
START_TEST(test_err_scale)
{
    tg_ctx *ctx = tu_ctx_new();
    tg_tensor *x = tg_input(ctx, TG_F32, TG_DIMS(2, 3), "x");
    const double bad[] = {NAN, INFINITY, -INFINITY};
    for (int i = 0; i < 3; i++) {
        ck_assert_ptr_null(tg_scale(ctx, x, bad[i]));
        tu_assert_error(ctx, TG_ERR_ARG, "tg_scale");
        tg_ctx_clear_error(ctx);
    }
    /* the largest finite factor is fine */
    ck_assert_ptr_nonnull(tg_scale(ctx, x, 1.7976931348623157e308));
    ck_assert_int_eq(tg_ctx_status(ctx), TG_OK);
    tu_ctx_free(ctx);
}
END_TEST

START_TEST(test_err_broadcast)
{
    tg_ctx *ctx = tu_ctx_new();
    tg_tensor *a = tg_input(ctx, TG_F64, TG_DIMS(2, 3), "a");
    tg_tensor *b = tg_input(ctx, TG_F64, TG_DIMS(4), "b");
    tg_tensor *c = tg_input(ctx, TG_F64, TG_DIMS(3, 3), "c");
    tg_tensor *d = tg_input(ctx, TG_F64, TG_DIMS(2, 3, 1), "d");
    tg_tensor *(*fns[2])(tg_ctx *, tg_tensor *, tg_tensor *) = {tg_add, tg_mul};
    const char *names[2] = {"tg_add", "tg_mul"};
    for (int f = 0; f < 2; f++) {
        ck_assert_ptr_null(fns[f](ctx, a, b));
        tu_assert_error(ctx, TG_ERR_SHAPE, names[f]);
        tu_assert_error(ctx, TG_ERR_SHAPE, "(2, 3)");
        tu_assert_error(ctx, TG_ERR_SHAPE, "(4)");
        tg_ctx_clear_error(ctx);
        ck_assert_ptr_null(fns[f](ctx, c, a));
        tu_assert_error(ctx, TG_ERR_SHAPE, "(3, 3)");
        tg_ctx_clear_error(ctx);
        ck_assert_ptr_null(fns[f](ctx, a, d)); /* (2,3) vs (2,3,1): 3 vs 1 ok, 2 vs 3 fails */
        tu_assert_error(ctx, TG_ERR_SHAPE, "(2, 3, 1)");
        tg_ctx_clear_error(ctx);
    }
    tu_ctx_free(ctx);
}
END_TEST

START_TEST(test_err_dtype_context)
{
    tg_ctx *ctx = tu_ctx_new(), *other = tu_ctx_new();
    tg_tensor *a = tg_input(ctx, TG_F32, TG_DIMS(2, 3), "a");
    tg_tensor *b = tg_input(ctx, TG_F64, TG_DIMS(2, 3), "b");
    tg_tensor *o = tg_input(other, TG_F32, TG_DIMS(2, 3), "o");
    ck_assert_ptr_null(tg_add(ctx, a, b));
    tu_assert_error(ctx, TG_ERR_DTYPE, "tg_add");
    tg_ctx_clear_error(ctx);
    ck_assert_ptr_null(tg_mul(ctx, b, a));
    tu_assert_error(ctx, TG_ERR_DTYPE, "tg_mul");
    tu_assert_error(ctx, TG_ERR_DTYPE, "f32");
    tg_ctx_clear_error(ctx);
    ck_assert_ptr_null(tg_add(ctx, a, o));
    tu_assert_error(ctx, TG_ERR_ARG, "another context");
    tg_ctx_clear_error(ctx);
    ck_assert_ptr_null(tg_mul(ctx, o, a));
    tu_assert_error(ctx, TG_ERR_ARG, "tg_mul");
    tg_ctx_clear_error(ctx);
    ck_assert_ptr_null(tg_scale(ctx, o, 2.0));
    tu_assert_error(ctx, TG_ERR_ARG, "tg_scale");
    tg_ctx_clear_error(ctx);
    ck_assert_ptr_null(tg_relu(ctx, o));
    tu_assert_error(ctx, TG_ERR_ARG, "tg_relu");
    tg_ctx_clear_error(ctx);
    ck_assert_ptr_null(tg_gelu(ctx, o));
    tu_assert_error(ctx, TG_ERR_ARG, "tg_gelu");
    ck_assert_int_eq(tg_ctx_status(other), TG_OK);
    tu_ctx_free(other);
    tu_ctx_free(ctx);
}
END_TEST

/* NULL in -> NULL out with nothing recorded; the first error sticks through chains (including a
 * NULL operand given with a bad scale factor); no graph is built over a failed builder. */
START_TEST(test_err_null_first_sticks)
{
    tg_ctx *ctx = tu_ctx_new();
    tg_tensor *x = tg_input(ctx, TG_F32, TG_DIMS(2, 3), "x");
    ck_assert_ptr_null(tg_scale(ctx, NULL, 2.0));
    ck_assert_ptr_null(tg_add(ctx, NULL, x));
    ck_assert_ptr_null(tg_add(ctx, x, NULL));
    ck_assert_ptr_null(tg_mul(ctx, NULL, NULL));
    ck_assert_ptr_null(tg_relu(ctx, NULL));
    ck_assert_ptr_null(tg_gelu(ctx, NULL));
    ck_assert_int_eq(tg_ctx_status(ctx), TG_OK);
    tg_tensor *good = tg_relu(ctx, x);
    tg_tensor *v = tg_input(ctx, TG_F32, TG_DIMS(5), "v");
    tg_tensor *bad = tg_add(ctx, x, v);
    ck_assert_ptr_null(bad);
    char first[512];
    snprintf(first, sizeof first, "%s", tg_ctx_message(ctx));
    ck_assert_ptr_null(tg_gelu(ctx, tg_relu(ctx, tg_mul(ctx, tg_scale(ctx, bad, 2), x))));
    ck_assert_ptr_null(tg_scale(ctx, bad, NAN)); /* NULL operand: the bad factor is not reported */
    ck_assert_ptr_null(tg_scale(ctx, x, NAN));   /* a new error does not replace the first */
    ck_assert_ptr_null(tg_mul(ctx, x, v));
    tu_assert_error(ctx, TG_ERR_SHAPE, "tg_add");
    ck_assert_str_eq(tg_ctx_message(ctx), first);
    tu_assert_graph_refused(ctx, good, first);
    tu_ctx_free(ctx);
}
END_TEST

/* ---- gradcheck ------------------------------------------------------------------------------ */
/* Push values at least 0.1 away from the ReLU kink so central differences never straddle it. */
static tg_tensor *away_from_zero(tg_tensor *t)
{
    for (int64_t i = 0; t && i < tg_tensor_numel(t); i++) {
        double v = tg_get(t, i);
        tg_set(t, i, v >= 0 ? v + 0.1 : v - 0.1);
    }
    return t;
}

static tg_tensor *gc_case(tg_ctx *ctx, tg_dtype dt, int which)
{
    switch (which) {
    case 0: return tg_scale(ctx, GIN("x", 1, 4, 1), -0.3);
    case 1: return tg_scale(ctx, tu_gc_input(ctx, dt, 0, NULL, "s"), 3.0);
    case 2: return tg_add(ctx, GIN("a", 2, 1, 3), GIN("b", 4, 1));
    case 3: return tg_add(ctx, tu_gc_input(ctx, dt, 0, NULL, "s"), GIN("x", 3, 2));
    case 4: return tg_add(ctx, GIN("a", 1, 5), GIN("b", 5, 1));
    case 5: return tg_mul(ctx, GIN("a", 3, 1, 2), GIN("b", 1, 4, 1));
    case 6: return tg_mul(ctx, GIN("a", 5), GIN("b", 1));
    case 7: {
        tg_tensor *x = GIN("x", 4);
        return tg_mul(ctx, tg_reshape(ctx, x, TG_DIMS(4, 1)), tg_reshape(ctx, x, TG_DIMS(1, 4)));
    }
    case 8: return tg_relu(ctx, away_from_zero(GIN("x", 4, 1, 3)));
    case 9: return tg_relu(ctx, away_from_zero(GIN("x", 2, 1, 2, 1, 3, 1)));
    case 10: {
        tg_tensor *x = GIN("x", 2, 5);
        tg_fill_uniform(x, -4, 4);
        return tg_gelu(ctx, x);
    }
    case 11: return tg_gelu(ctx, GIN("x", 1, 1));
    default: { /* gelu of x * x + x: x used three times */
        tg_tensor *x = GIN("x", 3, 2);
        return tg_gelu(ctx, tg_add(ctx, tg_mul(ctx, x, x), x));
    }
    }
}
#define N_GC_CASES 13

START_TEST(test_gradcheck_f64)
{
    tu_gradcheck_case(gc_case, TG_F64, _i, 500 + (uint64_t)_i);
}
END_TEST

START_TEST(test_gradcheck_f32)
{
    static const int cases[] = {0, 2, 5, 8, 10};
    tu_gradcheck_case(gc_case, TG_F32, cases[_i], 600 + (uint64_t)_i);
}
END_TEST

/* ---- thread invariance ---------------------------------------------------------------------- */
static tg_tensor *ti_scale(tg_ctx *ctx, tg_dtype dt) { return tg_scale(ctx, GIN("x", 300, 200), 0.37); }
static tg_tensor *ti_add_bias(tg_ctx *ctx, tg_dtype dt)
{
    return tg_add(ctx, GIN("x", 128, 256), GIN("b", 256));
}
static tg_tensor *ti_add_same(tg_ctx *ctx, tg_dtype dt)
{
    return tg_add(ctx, GIN("a", 300, 200), GIN("b", 300, 200));
}
static tg_tensor *ti_add_outer(tg_ctx *ctx, tg_dtype dt)
{
    return tg_add(ctx, GIN("a", 256, 1), GIN("b", 1, 256));
}
static tg_tensor *ti_mul_bcast(tg_ctx *ctx, tg_dtype dt)
{
    return tg_mul(ctx, GIN("x", 128, 256), GIN("c", 128, 1));
}
static tg_tensor *ti_mul_same(tg_ctx *ctx, tg_dtype dt)
{
    return tg_mul(ctx, GIN("a", 300, 200), GIN("b", 300, 200));
}
static tg_tensor *ti_relu(tg_ctx *ctx, tg_dtype dt) { return tg_relu(ctx, GIN("x", 300, 200)); }
static tg_tensor *ti_gelu(tg_ctx *ctx, tg_dtype dt) { return tg_gelu(ctx, GIN("x", 200, 100)); }
static const tu_build_fn k_ti_builds[] = {
    ti_scale, ti_add_bias, ti_add_same, ti_add_outer, ti_mul_bcast, ti_mul_same, ti_relu,
    ti_gelu};
#define N_TI (int)(sizeof k_ti_builds / sizeof k_ti_builds[0])

/* ---- edge cases ----------------------------------------------------------------------------- */
/* Two backwards without zero_grad double every leaf gradient exactly (each leaf used once). */
START_TEST(test_backward_twice)
{
    tg_dtype dt = tu_dtypes[_i];
    tg_ctx *ctx = tu_ctx_new();
    tg_ctx_seed(ctx, 21);
    tg_tensor *x = tu_input(ctx, dt, TG_DIMS(3, 4), "x", -2, 2);
    tg_tensor *b = tu_input(ctx, dt, TG_DIMS(4), "b", -1, 1);
    tg_tensor *c = tu_input(ctx, dt, TG_DIMS(3, 1), "c", -1, 1);
    tg_tensor *y = tg_gelu(ctx, tg_mul(ctx, tg_relu(ctx, tg_scale(ctx, tg_add(ctx, x, b), 1.3)), c));
    tg_graph *g = tu_fwd(ctx, y);
    double dy[12];
    for (int i = 0; i < 12; i++)
        dy[i] = 0.3 + sin(1.1 * i);
    tg_tensor *leaves[3] = {x, b, c};
    tu_assert_backward_twice(ctx, g, y, dy, leaves, 3);
    tu_ctx_free(ctx);
}
END_TEST

/* The same exactness when a leaf feeds several uses (x * x + x): PyTorch sums the uses'
 * contributions and then adds them to .grad once, so two backwards give exactly 2x. */
START_TEST(test_backward_twice_shared)
{
    tg_dtype dt = tu_dtypes[_i];
    tg_ctx *ctx = tu_ctx_new();
    tg_ctx_seed(ctx, 22);
    tg_tensor *x = tu_input(ctx, dt, TG_DIMS(4, 8), "x", -2, 2);
    tg_tensor *y = tg_add(ctx, tg_mul(ctx, x, x), tg_scale(ctx, x, 0.3));
    tg_graph *g = tu_fwd(ctx, y);
    double dy[32];
    for (int i = 0; i < 32; i++)
        dy[i] = 0.3 + sin(1.1 * i);
    tu_assert_backward_twice(ctx, g, y, dy, &x, 1); /* x is used three times */
    tu_ctx_free(ctx);
}
END_TEST

/* Re-running after new data: new results without rebuilding. */
START_TEST(test_rerun_new_data)
{
    tg_dtype dt = tu_dtypes[_i];
    tg_ctx *ctx = tu_ctx_new();
    tg_tensor *x = tu_in(ctx, dt, TG_DIMS(3), "x", VALS(-1, 0, 2));
    tg_tensor *b = tu_in(ctx, dt, TG_DIMS(1), "b", VALS(0.5));
    tg_tensor *y = tg_relu(ctx, tg_add(ctx, tg_scale(ctx, x, 2.0), b)); /* relu(2x + b) */
    tg_graph *g = tu_fwd(ctx, y);
    EXPECT_DATA(y, 0, 0, 0.5, 4.5);
    tu_set(x, VALS(3, -3, 0.25));
    tu_set(b, VALS(-1));
    ck_assert_int_eq(tg_graph_forward(g), TG_OK);
    EXPECT_DATA(y, 0, 5, 0, 0);
    tu_ctx_free(ctx);
}
END_TEST

/* Unary ops on rank 0 and rank 6. */
START_TEST(test_unary_rank0_rank6)
{
    tg_dtype dt = tu_dtypes[_i];
    tg_ctx *ctx = tu_ctx_new();
    tg_tensor *s = tu_in(ctx, dt, 0, NULL, "s", VALS(-1));
    tg_tensor *y = tg_gelu(ctx, tg_relu(ctx, tg_scale(ctx, s, -3.0))); /* gelu(relu(3)) */
    tg_graph *g = tu_fwd(ctx, y);
    ck_assert_int_eq(tg_tensor_rank(y), 0);
    double tol = dt == TG_F32 ? 1e-6 : 1e-14;
    /* gelu(3) = 3 Phi(3) = 2.9959502... ; dy/ds = gelu'(3) * -3 */
    EXPECT_DATA(y, tol, 2.9959503059051098);
    ck_assert_int_eq(tg_graph_backward(g, y, NULL), TG_OK);
    EXPECT_GRAD(s, tol, -3 * 1.0119456472041840);

    tg_tensor *x6 = tu_in(ctx, dt, TG_DIMS(1, 2, 1, 2, 1, 2), "x6",
                          VALS(-4, -3, -2, -1, 1, 2, 3, 4));
    tg_tensor *r6 = tg_relu(ctx, x6);
    g = tu_fwd(ctx, r6);
    EXPECT_SHAPE(r6, 1, 2, 1, 2, 1, 2);
    EXPECT_DATA(r6, 0, 0, 0, 0, 0, 1, 2, 3, 4);
    tu_bwd(ctx, g, r6, NULL);
    EXPECT_GRAD(x6, 0, 0, 0, 0, 0, 1, 1, 1, 1);
    tu_ctx_free(ctx);
}
END_TEST

static Suite *elementwise_suite(void)
{
    Suite *s = suite_create("ops_elementwise");
    TCase *tc = tu_tcase(s, "forward", 0);
    tcase_add_loop_test(tc, test_scale, 0, 2);
    tcase_add_loop_test(tc, test_add_same_and_bias, 0, 2);
    tcase_add_loop_test(tc, test_add_outer_and_left, 0, 2);
    tcase_add_loop_test(tc, test_add_rank0, 0, 2);
    tcase_add_loop_test(tc, test_mul, 0, 2);
    tcase_add_loop_test(tc, test_used_twice, 0, 2);
    tcase_add_loop_test(tc, test_relu, 0, 2);
    tcase_add_loop_test(tc, test_relu_nan, 0, 2);
    tcase_add_loop_test(tc, test_gelu, 0, 2);

    tc = tu_tcase(s, "errors", 0);
    tcase_add_test(tc, test_err_scale);
    tcase_add_test(tc, test_err_broadcast);
    tcase_add_test(tc, test_err_dtype_context);
    tcase_add_test(tc, test_err_null_first_sticks);

    tc = tu_tcase(s, "gradcheck", 60);
    tcase_add_loop_test(tc, test_gradcheck_f64, 0, N_GC_CASES);
    tcase_add_loop_test(tc, test_gradcheck_f32, 0, 5);

    tu_add_thread_tcase(s, k_ti_builds, N_TI);

    tc = tu_tcase(s, "edge", 60);
    tcase_add_loop_test(tc, test_add_rank6, 0, 2);
    tcase_add_loop_test(tc, test_backward_twice, 0, 2);
    tcase_add_loop_test(tc, test_backward_twice_shared, 0, 2);
    tcase_add_loop_test(tc, test_rerun_new_data, 0, 2);
    tcase_add_loop_test(tc, test_unary_rank0_rank6, 0, 2);
    return s;
}

int main(void) { return tu_run(elementwise_suite()); }
