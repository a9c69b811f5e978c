/*
 * test_ops_reduce.c - tg_sum, tg_mean (one axis, keepdim or not), tg_sum_all, tg_mean_all:
 * hand-computed values and gradients (f32 and f64), every axis/context error, gradcheck on
 * several shapes, thread invariance, and the edge cases (rank 0, rank 6, a tensor used twice,
 * accumulation over two backwards, re-running with new data).
 */
#include "testutil.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- helpers --------------------------------------------------------------------------------- */
/* x (2,3) = [[1,2,3],[4,5,6]] */
static const double k_x[] = {1, 2, 3, 4, 5, 6};

/* sum axis 0 = [5,7,9]; axis 1 = [6,15]; axis -1 keepdim = [[6],[15]] (2,1);
 * axis -2 keepdim = [[5,7,9]] (1,3); mean axis 0 = [2.5,3.5,4.5]; mean axis 1 = [2,5]. */
START_TEST(test_forward_2d)
{
    tg_dtype dt = tu_dtypes[_i];
    tg_ctx *ctx = tu_ctx_new();
    tg_tensor *x = tu_in(ctx, dt, TG_DIMS(2, 3), "x", k_x);
    tg_tensor *ys[6] = {tg_sum(ctx, x, 0, false),  tg_sum(ctx, x, 1, false),
                        tg_sum(ctx, x, -1, true),  tg_sum(ctx, x, -2, true),
                        tg_mean(ctx, x, 0, false), tg_mean(ctx, x, 1, false)};
    tg_graph *g = tg_graph_new(ctx, ys, 6);
    ck_assert_ptr_nonnull(g);
    ck_assert_int_eq(tg_graph_forward(g), TG_OK);
    EXPECT_SHAPE(ys[0], 3);
    EXPECT_SHAPE(ys[1], 2);
    EXPECT_SHAPE(ys[2], 2, 1);
    EXPECT_SHAPE(ys[3], 1, 3);
    EXPECT_SHAPE(ys[4], 3);
    EXPECT_SHAPE(ys[5], 2);
    ck_assert_str_eq(tg_tensor_op_name(ys[0]), "sum");
    ck_assert_str_eq(tg_tensor_op_name(ys[4]), "mean");
    EXPECT_DATA(ys[0], 0, 5, 7, 9);
    EXPECT_DATA(ys[1], 0, 6, 15);
    EXPECT_DATA(ys[2], 0, 6, 15);
    EXPECT_DATA(ys[3], 0, 5, 7, 9);
    EXPECT_DATA(ys[4], 0, 2.5, 3.5, 4.5);
    EXPECT_DATA(ys[5], 0, 2, 5);
    tu_ctx_free(ctx);
}
END_TEST

/* sum_all = 21 and mean_all = 3.5, both rank 0. */
START_TEST(test_forward_all)
{
    tg_dtype dt = tu_dtypes[_i];
    tg_ctx *ctx = tu_ctx_new();
    tg_tensor *x = tu_in(ctx, dt, TG_DIMS(2, 3), "x", k_x);
    tg_tensor *ys[2] = {tg_sum_all(ctx, x), tg_mean_all(ctx, x)};
    tg_graph *g = tg_graph_new(ctx, ys, 2);
    ck_assert_ptr_nonnull(g);
    ck_assert_int_eq(tg_graph_forward(g), TG_OK);
    ck_assert_int_eq(tg_tensor_rank(ys[0]), 0);
    ck_assert_int_eq(tg_tensor_rank(ys[1]), 0);
    ck_assert_int_eq(tg_tensor_numel(ys[0]), 1);
    ck_assert_str_eq(tg_tensor_op_name(ys[0]), "sum");
    ck_assert_str_eq(tg_tensor_op_name(ys[1]), "mean");
    EXPECT_DATA(ys[0], 0, 21);
    EXPECT_DATA(ys[1], 0, 3.5);
    /* d sum_all / dx = 1, d mean_all / dx = 1/6 */
    ck_assert_int_eq(tg_graph_backward(g, ys[0], NULL), TG_OK);
    EXPECT_GRAD(x, 0, 1, 1, 1, 1, 1, 1);
    tg_graph_zero_grad(g);
    ck_assert_int_eq(tg_graph_backward(g, ys[1], NULL), TG_OK);
    double sixth = 1.0 / 6;
    EXPECT_GRAD(x, dt == TG_F32 ? 1e-7 : 0, sixth, sixth, sixth, sixth, sixth, sixth);
    tu_ctx_free(ctx);
}
END_TEST

/* Gradients broadcast dy back over the reduced axis:
 * sum axis 0, dy = [1,2,3]       -> dx = [[1,2,3],[1,2,3]]
 * sum axis 1 keepdim, dy = [[1],[2]] -> dx = [[1,1,1],[2,2,2]]
 * mean axis 1, dy = [3, 6]       -> dx = [[1,1,1],[2,2,2]]
 * mean axis 0 keepdim, dy = [[2,4,6]] -> dx = [[1,2,3],[1,2,3]] */
START_TEST(test_grads)
{
    tg_dtype dt = tu_dtypes[_i];
    for (int c = 0; c < 4; c++) {
        tg_ctx *ctx = tu_ctx_new();
        tg_tensor *x = tu_in(ctx, dt, TG_DIMS(2, 3), "x", k_x);
        tg_tensor *y = c == 0   ? tg_sum(ctx, x, 0, false)
                       : c == 1 ? tg_sum(ctx, x, 1, true)
                       : c == 2 ? tg_mean(ctx, x, 1, false)
                                : tg_mean(ctx, x, 0, true);
        tg_graph *g = tu_fwd(ctx, y);
        switch (c) {
        case 0:
            tu_bwd(ctx, g, y, VALS(1, 2, 3));
            EXPECT_GRAD(x, 0, 1, 2, 3, 1, 2, 3);
            break;
        case 1:
            tu_bwd(ctx, g, y, VALS(1, 2));
            EXPECT_GRAD(x, 0, 1, 1, 1, 2, 2, 2);
            break;
        case 2:
            tu_bwd(ctx, g, y, VALS(3, 6));
            EXPECT_GRAD(x, 0, 1, 1, 1, 2, 2, 2);
            break;
        default:
            tu_bwd(ctx, g, y, VALS(2, 4, 6));
            EXPECT_GRAD(x, 0, 1, 2, 3, 1, 2, 3);
        }
        tu_ctx_free(ctx);
    }
}
END_TEST

/* x (2,3,4) = 0..23: sum over axis 1 -> y[o,i] = sum_a (12 o + 4 a + i) = 36 o + 12 + 3 i;
 * mean over axis 1 keepdim -> (2,1,4) = 12 o + 4 + i; sum over axis 2 -> 48 o + 16 a + 6. */
START_TEST(test_middle_axis)
{
    tg_dtype dt = tu_dtypes[_i];
    tg_ctx *ctx = tu_ctx_new();
    tg_tensor *x = tu_in(ctx, dt, TG_DIMS(2, 3, 4), "x", NULL);
    for (int i = 0; i < 24; i++)
        tg_set(x, i, i);
    tg_tensor *ys[3] = {tg_sum(ctx, x, 1, false), tg_mean(ctx, x, 1, true), tg_sum(ctx, x, 2, false)};
    tg_graph *g = tg_graph_new(ctx, ys, 3);
    ck_assert_ptr_nonnull(g);
    ck_assert_int_eq(tg_graph_forward(g), TG_OK);
    EXPECT_SHAPE(ys[0], 2, 4);
    EXPECT_SHAPE(ys[1], 2, 1, 4);
    EXPECT_SHAPE(ys[2], 2, 3);
    for (int o = 0; o < 2; o++)
        for (int i = 0; i < 4; i++) {
            ck_assert_double_eq(tg_get(ys[0], o * 4 + i), 36 * o + 12 + 3 * i);
            ck_assert_double_eq(tg_get(ys[1], o * 4 + i), 12 * o + 4 + i);
        }
    for (int o = 0; o < 2; o++)
        for (int a = 0; a < 3; a++)
            ck_assert_double_eq(tg_get(ys[2], o * 3 + a), 48 * o + 16 * a + 6);
    /* d(mean axis 1)/dx with dy[o,0,i] = 3 (o*4+i): dx[o,a,i] = o*4 + i */
    double dy[8];
    for (int i = 0; i < 8; i++)
        dy[i] = 3.0 * i;
    tu_bwd(ctx, g, ys[1], dy);
    for (int o = 0; o < 2; o++)
        for (int a = 0; a < 3; a++)
            for (int i = 0; i < 4; i++)
                ck_assert_double_eq(tg_grad_get(x, (o * 3 + a) * 4 + i), o * 4 + i);
    tu_ctx_free(ctx);
}
END_TEST

/* Rank 0: sum_all / mean_all of a scalar is the scalar (gradient 1); reducing a rank-1 tensor
 * over its axis gives rank 0; keepdim on rank 1 gives (1). */
START_TEST(test_rank0)
{
    tg_dtype dt = tu_dtypes[_i];
    tg_ctx *ctx = tu_ctx_new();
    tg_tensor *s = tu_in(ctx, dt, 0, NULL, "s", VALS(-7.25));
    tg_tensor *ys[2] = {tg_sum_all(ctx, s), tg_mean_all(ctx, s)};
    tg_graph *g = tg_graph_new(ctx, ys, 2);
    ck_assert_ptr_nonnull(g);
    ck_assert_int_eq(tg_graph_forward(g), TG_OK);
    EXPECT_DATA(ys[0], 0, -7.25);
    EXPECT_DATA(ys[1], 0, -7.25);
    ck_assert_int_eq(tg_graph_backward(g, ys[1], NULL), TG_OK);
    EXPECT_GRAD(s, 0, 1);

    tg_tensor *v = tu_in(ctx, dt, TG_DIMS(4), "v", VALS(1, 2, 3, 4.5));
    tg_tensor *r0 = tg_sum(ctx, v, 0, false), *r1 = tg_mean(ctx, v, -1, true);
    ck_assert_int_eq(tg_tensor_rank(r0), 0);
    EXPECT_SHAPE(r1, 1);
    tg_tensor *outs[2] = {r0, r1};
    g = tg_graph_new(ctx, outs, 2);
    ck_assert_ptr_nonnull(g);
    ck_assert_int_eq(tg_graph_forward(g), TG_OK);
    EXPECT_DATA(r0, 0, 10.5);
    EXPECT_DATA(r1, 0, 2.625);
    ck_assert_int_eq(tg_graph_backward(g, r1, NULL), TG_OK);
    EXPECT_GRAD(v, 0, 0.25, 0.25, 0.25, 0.25);

    /* a scalar has no axis to reduce */
    ck_assert_ptr_null(tg_sum(ctx, s, 0, false));
    tu_assert_error(ctx, TG_ERR_AXIS, "tg_sum");
    tu_assert_error(ctx, TG_ERR_AXIS, "()");
    tu_ctx_free(ctx);
}
END_TEST

/* Rank 6: x (2,1,3,2,1,2) = 0..23, sum over axis 3 keepdim -> (2,1,3,1,1,2),
 * x strides (12,12,4,2,2,1): y[i0,i2,i5] = x[.., a=0] + x[.., a=1] = 2 (12 i0 + 4 i2 + i5) + 2;
 * mean over axis -6 (the first) -> (1,3,2,1,2) = 6 + j. */
START_TEST(test_rank6)
{
    tg_dtype dt = tu_dtypes[_i];
    tg_ctx *ctx = tu_ctx_new();
    tg_tensor *x = tu_in(ctx, dt, TG_DIMS(2, 1, 3, 2, 1, 2), "x", NULL);
    for (int i = 0; i < 24; i++)
        tg_set(x, i, i);
    tg_tensor *y = tg_sum(ctx, x, 3, true), *m = tg_mean(ctx, x, -6, false);
    tg_tensor *outs[2] = {y, m};
    tg_graph *g = tg_graph_new(ctx, outs, 2);
    ck_assert_ptr_nonnull(g);
    ck_assert_int_eq(tg_graph_forward(g), TG_OK);
    EXPECT_SHAPE(y, 2, 1, 3, 1, 1, 2);
    EXPECT_SHAPE(m, 1, 3, 2, 1, 2);
    int n = 0;
    for (int i0 = 0; i0 < 2; i0++)
        for (int i2 = 0; i2 < 3; i2++)
            for (int i5 = 0; i5 < 2; i5++)
                ck_assert_double_eq(tg_get(y, n++), 2 * (12 * i0 + 4 * i2 + i5) + 2);
    for (int j = 0; j < 12; j++)
        ck_assert_double_eq(tg_get(m, j), 6 + j);
    tu_bwd(ctx, g, y, NULL);
    for (int i = 0; i < 24; i++)
        ck_assert_double_eq(tg_grad_get(x, i), 1);
    tu_ctx_free(ctx);
}
END_TEST

/* x used twice: y = sum_all(x) + mean_all(x) (rank 0) = 10 + 2.5, dy/dx = 1 + 1/4;
 * and sum over axis 0 of (x + x) = [8, 12], gradient 2 dy. */
START_TEST(test_used_twice)
{
    tg_dtype dt = tu_dtypes[_i];
    tg_ctx *ctx = tu_ctx_new();
    tg_tensor *x = tu_in(ctx, dt, TG_DIMS(2, 2), "x", VALS(1, 2, 3, 4));
    tg_tensor *y = tg_add(ctx, tg_sum_all(ctx, x), tg_mean_all(ctx, x));
    tg_graph *g = tu_fwd(ctx, y);
    ck_assert_int_eq(tg_tensor_rank(y), 0);
    EXPECT_DATA(y, 0, 12.5);
    ck_assert_int_eq(tg_graph_backward(g, y, NULL), TG_OK);
    EXPECT_GRAD(x, 0, 1.25, 1.25, 1.25, 1.25);

    tg_tensor *x2 = tu_in(ctx, dt, TG_DIMS(2, 2), "x2", VALS(1, 2, 3, 4));
    tg_tensor *z = tg_sum(ctx, tg_add(ctx, x2, x2), 0, false);
    g = tu_fwd(ctx, z);
    EXPECT_DATA(z, 0, 8, 12);
    tu_bwd(ctx, g, z, VALS(1, -1));
    EXPECT_GRAD(x2, 0, 2, -2, 2, -2);
    tu_ctx_free(ctx);
}
END_TEST

/* Accumulation in order: f32 sum of 0.1 x 1000 and mean of alternating +-1e8 + 1 are the
 * sequential left-to-right results (no silent reordering); the f64 results are near-exact. */
START_TEST(test_precision)
{
    tg_dtype dt = tu_dtypes[_i];
    tg_ctx *ctx = tu_ctx_new();
    tg_tensor *x = tu_in(ctx, dt, TG_DIMS(1000), "x", NULL);
    tg_fill(x, 0.1);
    tg_tensor *s = tg_sum_all(ctx, x), *m = tg_mean(ctx, x, 0, false);
    tg_tensor *outs[2] = {s, m};
    tg_graph *g = tg_graph_new(ctx, outs, 2);
    ck_assert_ptr_nonnull(g);
    ck_assert_int_eq(tg_graph_forward(g), TG_OK);
    if (dt == TG_F32) {
        float acc = 0;
        for (int i = 0; i < 1000; i++)
            acc += 0.1f;
        ck_assert_double_eq(tg_get(s, 0), (double)acc);
        ck_assert_double_eq(tg_get(m, 0), (double)(acc / 1000.0f));
    } else {
        ck_assert_double_eq_tol(tg_get(s, 0), 100.0, 1e-11);
        ck_assert_double_eq_tol(tg_get(m, 0), 0.1, 1e-14);
    }
    tu_ctx_free(ctx);
}
END_TEST

/* ---- errors --------------------------------------------------------------------------------- */
START_TEST(test_err_axis)
{
    tg_ctx *ctx = tu_ctx_new();
    tg_tensor *x = tg_input(ctx, TG_F32, TG_DIMS(2, 3), "x");
    const int bad[] = {2, -3, 100, -100};
    for (int i = 0; i < 4; i++) {
        ck_assert_ptr_null(tg_sum(ctx, x, bad[i], false));
        tu_assert_error(ctx, TG_ERR_AXIS, "tg_sum");
        tu_assert_error(ctx, TG_ERR_AXIS, "(2, 3)");
        tg_ctx_clear_error(ctx);
        ck_assert_ptr_null(tg_mean(ctx, x, bad[i], true));
        tu_assert_error(ctx, TG_ERR_AXIS, "tg_mean");
        tu_assert_error(ctx, TG_ERR_AXIS, "(2, 3)");
        tg_ctx_clear_error(ctx);
    }
    tu_ctx_free(ctx);
}
END_TEST

START_TEST(test_err_context_null_first)
{
    tg_ctx *ctx = tu_ctx_new(), *other = tu_ctx_new();
    tg_tensor *o = tg_input(other, TG_F64, TG_DIMS(2, 3), "o");
    ck_assert_ptr_null(tg_sum(ctx, o, 0, false));
    tu_assert_error(ctx, TG_ERR_ARG, "tg_sum");
    tu_assert_error(ctx, TG_ERR_ARG, "another context");
    tg_ctx_clear_error(ctx);
    ck_assert_ptr_null(tg_mean(ctx, o, 0, false));
    tu_assert_error(ctx, TG_ERR_ARG, "tg_mean");
    tg_ctx_clear_error(ctx);
    ck_assert_ptr_null(tg_sum_all(ctx, o));
    tu_assert_error(ctx, TG_ERR_ARG, "tg_sum_all");
    tg_ctx_clear_error(ctx);
    ck_assert_ptr_null(tg_mean_all(ctx, o));
    tu_assert_error(ctx, TG_ERR_ARG, "tg_mean_all");
    tg_ctx_clear_error(ctx);
    ck_assert_int_eq(tg_ctx_status(other), TG_OK);

    tg_tensor *x = tg_input(ctx, TG_F64, TG_DIMS(2, 3), "x");
    ck_assert_ptr_null(tg_sum(ctx, NULL, 0, false));
    ck_assert_ptr_null(tg_mean(ctx, NULL, 0, true));
    ck_assert_ptr_null(tg_sum_all(ctx, NULL));
    ck_assert_ptr_null(tg_mean_all(ctx, NULL));
    ck_assert_int_eq(tg_ctx_status(ctx), TG_OK);
    tg_tensor *good = tg_sum_all(ctx, x);
    tg_tensor *bad = tg_mean(ctx, x, 5, false);
    ck_assert_ptr_null(bad);
    char first[512];
    snprintf(first, sizeof first, "%s", tg_ctx_message(ctx));
    ck_assert_ptr_null(tg_mean_all(ctx, tg_sum(ctx, tg_sum(ctx, bad, 0, false), 0, false)));
    ck_assert_ptr_null(tg_sum(ctx, x, -9, false));
    tu_assert_error(ctx, TG_ERR_AXIS, "tg_mean");
    ck_assert_str_eq(tg_ctx_message(ctx), first);
    tu_assert_graph_refused(ctx, good, first);
    tu_ctx_free(other);
    tu_ctx_free(ctx);
}
END_TEST

/* ---- gradcheck ------------------------------------------------------------------------------ */
static tg_tensor *gc_case(tg_ctx *ctx, tg_dtype dt, int which)
{
    switch (which) {
    case 0: return tg_sum(ctx, GIN("x", 4, 1, 3), 1, false);
    case 1: return tg_sum(ctx, GIN("x", 2, 5), 0, true);
    case 2: return tg_sum(ctx, GIN("x", 3, 2, 4), -3, false);
    case 3: return tg_mean(ctx, GIN("x", 3, 2, 4), -1, false);
    case 4: return tg_mean(ctx, GIN("x", 1, 7), 0, true);
    case 5: return tg_mean(ctx, GIN("x", 2, 1, 3, 1, 2, 1), 4, true);
    case 6: return tg_sum_all(ctx, GIN("x", 3, 1, 2));
    case 7: return tg_mean_all(ctx, GIN("x", 5, 2));
    case 8: return tg_sum_all(ctx, tu_gc_input(ctx, dt, 0, NULL, "s"));
    default: { /* mean over rows of x * x: x used twice under a reduction */
        tg_tensor *x = GIN("x", 3, 4);
        return tg_mean(ctx, tg_mul(ctx, x, x), 1, false);
    }
    }
}
#define N_GC_CASES 10

START_TEST(test_gradcheck_f64)
{
    tu_gradcheck_case(gc_case, TG_F64, _i, 700 + (uint64_t)_i);
}
END_TEST

START_TEST(test_gradcheck_f32)
{
    static const int cases[] = {1, 3, 7, 9};
    tu_gradcheck_case(gc_case, TG_F32, cases[_i], 800 + (uint64_t)_i);
}
END_TEST

/* ---- thread invariance ---------------------------------------------------------------------- */
static tg_tensor *ti_sum_ax0(tg_ctx *ctx, tg_dtype dt) { return tg_sum(ctx, GIN("x", 300, 200), 0, false); }
static tg_tensor *ti_sum_last(tg_ctx *ctx, tg_dtype dt) { return tg_sum(ctx, GIN("x", 200, 300), -1, true); }
static tg_tensor *ti_mean_mid(tg_ctx *ctx, tg_dtype dt) { return tg_mean(ctx, GIN("x", 20, 300, 10), 1, false); }
static tg_tensor *ti_sum_all(tg_ctx *ctx, tg_dtype dt) { return tg_sum_all(ctx, GIN("x", 300, 200)); }
static tg_tensor *ti_mean_all(tg_ctx *ctx, tg_dtype dt) { return tg_mean_all(ctx, GIN("x", 200, 300)); }
static const tu_build_fn k_ti_builds[] = {
    ti_sum_ax0, ti_sum_last, ti_mean_mid, ti_sum_all, ti_mean_all};
#define N_TI (int)(sizeof k_ti_builds / sizeof k_ti_builds[0])

/* ---- edge cases ----------------------------------------------------------------------------- */
START_TEST(test_backward_twice)
{
    tg_dtype dt = tu_dtypes[_i];
    tg_ctx *ctx = tu_ctx_new();
    tg_ctx_seed(ctx, 31);
    tg_tensor *x = tu_input(ctx, dt, TG_DIMS(3, 5, 2), "x", -1, 1);
    tg_tensor *y = tg_mean_all(ctx, tg_sum(ctx, tg_mean(ctx, x, 1, true), -1, false));
    tg_graph *g = tu_fwd(ctx, y);
    ck_assert_int_eq(tg_graph_backward(g, y, NULL), TG_OK);
    double g1[30];
    for (int i = 0; i < 30; i++)
        g1[i] = tg_grad_get(x, i);
    ck_assert_int_eq(tg_graph_backward(g, y, NULL), TG_OK);
    for (int i = 0; i < 30; i++)
        ck_assert_msg(tg_grad_get(x, i) == 2 * g1[i], "dx[%d] = %.17g, expected 2 * %.17g", i,
                      tg_grad_get(x, i), g1[i]);
    tg_graph_zero_grad(g);
    ck_assert_double_eq(tg_grad_get(x, 0), 0);
    tu_ctx_free(ctx);
}
END_TEST

START_TEST(test_rerun_new_data)
{
    tg_dtype dt = tu_dtypes[_i];
    tg_ctx *ctx = tu_ctx_new();
    tg_tensor *x = tu_in(ctx, dt, TG_DIMS(2, 3), "x", k_x);
    tg_tensor *ys[2] = {tg_sum(ctx, x, 1, false), tg_mean_all(ctx, x)};
    tg_graph *g = tg_graph_new(ctx, ys, 2);
    ck_assert_ptr_nonnull(g);
    ck_assert_int_eq(tg_graph_forward(g), TG_OK);
    EXPECT_DATA(ys[0], 0, 6, 15);
    EXPECT_DATA(ys[1], 0, 3.5);
    tu_set(x, VALS(-1, -1, -1, 0.5, 0.5, 2));
    ck_assert_int_eq(tg_graph_forward(g), TG_OK);
    EXPECT_DATA(ys[0], 0, -3, 3);
    EXPECT_DATA(ys[1], 0, 0);
    tu_ctx_free(ctx);
}
END_TEST

static Suite *reduce_suite(void)
{
    Suite *s = suite_create("ops_reduce");
    TCase *tc = tu_tcase(s, "forward", 0);
    tcase_add_loop_test(tc, test_forward_2d, 0, 2);
    tcase_add_loop_test(tc, test_forward_all, 0, 2);
    tcase_add_loop_test(tc, test_grads, 0, 2);
    tcase_add_loop_test(tc, test_middle_axis, 0, 2);
    tcase_add_loop_test(tc, test_precision, 0, 2);

    tc = tu_tcase(s, "errors", 0);
    tcase_add_test(tc, test_err_axis);
    tcase_add_test(tc, test_err_context_null_first);

    tc = tu_tcase(s, "gradcheck", 60);
    tcase_add_loop_test(tc, test_gradcheck_f64, 0, N_GC_CASES);
    tcase_add_loop_test(tc, test_gradcheck_f32, 0, 4);

    tu_add_thread_tcase(s, k_ti_builds, N_TI);

    tc = tu_tcase(s, "edge", 60);
    tcase_add_loop_test(tc, test_rank0, 0, 2);
    tcase_add_loop_test(tc, test_rank6, 0, 2);
    tcase_add_loop_test(tc, test_used_twice, 0, 2);
    tcase_add_loop_test(tc, test_backward_twice, 0, 2);
    tcase_add_loop_test(tc, test_rerun_new_data, 0, 2);
    return s;
}

int main(void) { return tu_run(reduce_suite()); }
