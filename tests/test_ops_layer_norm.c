/*
 * test_ops_layer_norm.c - tg_layer_norm (Ba et al. 2016; PyTorch nn.LayerNorm over the last
 * axis): hand-computed values and gradients (f32 and f64), with and without gamma / beta,
 * constant rows (y = beta, never NaN), large offsets (two-pass variance), every
 * shape/argument/dtype/context error, gradcheck on several shapes, thread invariance, and the edge
 * cases (rank 1, rank 6, D = 1, a tensor used as x, gamma and beta at once, accumulation over two
 * backwards, re-running with new data).
 *
 * Reference row x = [1, 2, 3, 4]: mean 2.5, biased var 1.25, rstd = 1/sqrt(1.25) = 2/sqrt(5),
 * xhat = [-3, -1, 1, 3] / sqrt(5) (eps = 0).
 */
#include "testutil.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- helpers --------------------------------------------------------------------------------- */
#define H0 1.3416407864998738 /* 3 / sqrt(5) */
#define H1 0.4472135954999579 /* 1 / sqrt(5) */

static double tol_of(tg_dtype dt) { return dt == TG_F32 ? 1e-6 : 1e-14; }

/* ---- forward ------------------------------------------------------------------------------- */
/* eps = 1e-5 (PyTorch's default), gamma = [1, 2, 0.5, -1], beta = [0, 1, -1, 0.5]:
 * xhat = (x - 2.5) / sqrt(1.25 + 1e-5) = [-1.3416354199689269, -0.447211806656309, ...]
 * y = xhat gamma + beta = [-1.3416354199689269, 0.105576386687382, -0.7763940966718454,
 *                          -0.8416354199689269] */
START_TEST(test_affine_row)
{
    tg_dtype dt = tu_dtypes[_i];
    tg_ctx *ctx = tu_ctx_new();
    tg_tensor *x = tu_in(ctx, dt, TG_DIMS(1, 4), "x", VALS(1, 2, 3, 4));
    tg_tensor *gm = tg_param(ctx, dt, TG_DIMS(4), "weight");
    tg_tensor *bt = tg_param(ctx, dt, TG_DIMS(4), "bias");
    tu_set(gm, VALS(1, 2, 0.5, -1));
    tu_set(bt, VALS(0, 1, -1, 0.5));
    tg_tensor *y = tg_layer_norm(ctx, x, gm, bt, 1e-5);
    tu_fwd(ctx, y);
    EXPECT_SHAPE(y, 1, 4);
    ck_assert_str_eq(tg_tensor_op_name(y), "layer_norm");
    EXPECT_DATA(y, tol_of(dt), -1.3416354199689269, 0.105576386687382, -0.7763940966718454,
                -0.8416354199689269);
    tu_ctx_free(ctx);
}
END_TEST

/* No affine, eps = 0: rows [1,2,3,4], [2,4,6,8] (scale invariance), [1e6+1 .. 1e6+4] (a large
 * offset: the two-pass variance loses nothing, even in f32 where these are exact), and a rank-1
 * x (4) gives the same row. */
START_TEST(test_plain_rows)
{
    tg_dtype dt = tu_dtypes[_i];
    tg_ctx *ctx = tu_ctx_new();
    tg_tensor *x = tu_in(ctx, dt, TG_DIMS(3, 4), "x",
                         VALS(1, 2, 3, 4, 2, 4, 6, 8, 1e6 + 1, 1e6 + 2, 1e6 + 3, 1e6 + 4));
    tg_tensor *v = tu_in(ctx, dt, TG_DIMS(4), "v", VALS(4, 3, 2, 1));
    tg_tensor *y = tg_layer_norm(ctx, x, NULL, NULL, 0.0);
    tg_tensor *yv = tg_layer_norm(ctx, v, NULL, NULL, 0.0);
    tg_tensor *outs[2] = {y, yv};
    tg_graph *g = tg_graph_new(ctx, outs, 2);
    ck_assert_ptr_nonnull(g);
    ck_assert_int_eq(tg_graph_forward(g), TG_OK);
    EXPECT_DATA(y, tol_of(dt), -H0, -H1, H1, H0, -H0, -H1, H1, H0, -H0, -H1, H1, H0);
    EXPECT_SHAPE(yv, 4);
    EXPECT_DATA(yv, tol_of(dt), H0, H1, -H1, -H0);
    tu_ctx_free(ctx);
}
END_TEST

/* gamma only: y = xhat gamma; beta only: y = xhat + beta (eps = 0). */
START_TEST(test_gamma_or_beta_only)
{
    tg_dtype dt = tu_dtypes[_i];
    tg_ctx *ctx = tu_ctx_new();
    tg_tensor *x = tu_in(ctx, dt, TG_DIMS(4), "x", VALS(1, 2, 3, 4));
    tg_tensor *gm = tu_in(ctx, dt, TG_DIMS(4), "gamma", VALS(2, 2, -1, 0));
    tg_tensor *bt = tu_in(ctx, dt, TG_DIMS(4), "beta", VALS(10, 20, 30, 40));
    tg_tensor *yg = tg_layer_norm(ctx, x, gm, NULL, 0.0);
    tg_tensor *yb = tg_layer_norm(ctx, x, NULL, bt, 0.0);
    tg_tensor *outs[2] = {yg, yb};
    tg_graph *g = tg_graph_new(ctx, outs, 2);
    ck_assert_ptr_nonnull(g);
    ck_assert_int_eq(tg_graph_forward(g), TG_OK);
    EXPECT_DATA(yg, tol_of(dt), -2 * H0, -2 * H1, -H1, 0);
    EXPECT_DATA(yb, tol_of(dt), 10 - H0, 20 - H1, 30 + H1, 40 + H0);
    /* d(sum yb)/dbeta = 1; d(sum yg)/dgamma = xhat */
    tu_bwd(ctx, g, yb, NULL);
    EXPECT_GRAD(bt, 0, 1, 1, 1, 1);
    tg_graph_zero_grad(g);
    tu_bwd(ctx, g, yg, NULL);
    EXPECT_GRAD(gm, tol_of(dt), -H0, -H1, H1, H0);
    tu_ctx_free(ctx);
}
END_TEST

/* ---- gradients ------------------------------------------------------------------------------ */
/* eps = 0, dy = [1, 0, 0, 0], gamma = [1, 2, 0.5, -1] (g = dy gamma = [1, 0, 0, 0]):
 * dx = rstd (g - mean(g) - xhat mean(g xhat)), mean(g) = 1/4, mean(g xhat) = xhat0 / 4:
 *    = (2/sqrt 5) [0.75 - 0.45, -0.25 - 0.15, -0.25 + 0.15, -0.25 + 0.45]
 *    = (2/sqrt 5) [0.3, -0.4, -0.1, 0.2]
 * dgamma = dy xhat = [xhat0, 0, 0, 0], dbeta = dy.
 * Two rows (second = 2 x first, same xhat) with dy = 1: dgamma = 2 xhat, dbeta = 2, and
 * dx = rstd (gamma - mean(gamma) - xhat mean(gamma xhat)) per row. */
START_TEST(test_grad_by_hand)
{
    tg_dtype dt = tu_dtypes[_i];
    double tol = dt == TG_F32 ? 2e-6 : 1e-14;
    tg_ctx *ctx = tu_ctx_new();
    tg_tensor *x = tu_in(ctx, dt, TG_DIMS(4), "x", VALS(1, 2, 3, 4));
    tg_tensor *gm = tu_in(ctx, dt, TG_DIMS(4), "gamma", VALS(1, 2, 0.5, -1));
    tg_tensor *bt = tu_in(ctx, dt, TG_DIMS(4), "beta", VALS(0, 1, -1, 0.5));
    tg_tensor *y = tg_layer_norm(ctx, x, gm, bt, 0.0);
    tg_graph *g = tu_fwd(ctx, y);
    tu_bwd(ctx, g, y, VALS(1, 0, 0, 0));
    const double r = 2 / sqrt(5.0);
    EXPECT_GRAD(x, tol, 0.3 * r, -0.4 * r, -0.1 * r, 0.2 * r);
    EXPECT_GRAD(gm, tol, -H0, 0, 0, 0);
    EXPECT_GRAD(bt, 0, 1, 0, 0, 0);

    tg_tensor *x2 = tu_in(ctx, dt, TG_DIMS(2, 4), "x2", VALS(1, 2, 3, 4, 2, 4, 6, 8));
    tg_tensor *g2 = tu_in(ctx, dt, TG_DIMS(4), "g2", VALS(1, 2, 0.5, -1));
    tg_tensor *b2 = tu_in(ctx, dt, TG_DIMS(4), "b2", VALS(0, 0, 0, 0));
    tg_tensor *y2 = tg_layer_norm(ctx, x2, g2, b2, 0.0);
    g = tu_fwd(ctx, y2);
    tu_bwd(ctx, g, y2, NULL);
    EXPECT_GRAD(g2, tol, -2 * H0, -2 * H1, 2 * H1, 2 * H0);
    EXPECT_GRAD(b2, 0, 2, 2, 2, 2);
    /* mean(gamma) = 0.625, mean(gamma xhat) = (-H0 - 2 H1 + 0.5 H1 - H0) / 4 */
    double mgh = (-H0 - 2 * H1 + 0.5 * H1 - H0) / 4;
    const double xh[4] = {-H0, -H1, H1, H0}, gv[4] = {1, 2, 0.5, -1};
    for (int row = 0; row < 2; row++) {
        double rs = row == 0 ? r : r / 2; /* the second row has twice the std */
        for (int j = 0; j < 4; j++)
            ck_assert_double_eq_tol(tg_grad_get(x2, row * 4 + j),
                                    rs * (gv[j] - 0.625 - xh[j] * mgh), tol);
    }
    tu_ctx_free(ctx);
}
END_TEST

/* Without gamma, d(sum y)/dx = 0 (the normalised row always sums to 0). */
START_TEST(test_grad_of_sum_is_zero)
{
    tg_dtype dt = tu_dtypes[_i];
    tg_ctx *ctx = tu_ctx_new();
    tg_ctx_seed(ctx, 5);
    tg_tensor *x = tu_input(ctx, dt, TG_DIMS(3, 6), "x", -3, 3);
    tg_tensor *y = tg_layer_norm(ctx, x, NULL, NULL, 1e-5);
    tg_graph *g = tu_fwd(ctx, y);
    tu_bwd(ctx, g, y, NULL);
    for (int i = 0; i < 18; i++)
        ck_assert_double_eq_tol(tg_grad_get(x, i), 0, dt == TG_F32 ? 1e-5 : 1e-13);
    tu_ctx_free(ctx);
}
END_TEST

/* ---- constant rows -------------------------------------------------------------------------- */
/* A constant row has var = 0: y = beta exactly (0.75 and its mean are exact), the other row is
 * normalised as usual; the gradient is finite: dx = rstd (g - mean(g)), rstd = 1/sqrt(eps). */
START_TEST(test_constant_row)
{
    tg_dtype dt = tu_dtypes[_i];
    tg_ctx *ctx = tu_ctx_new();
    tg_tensor *x = tu_in(ctx, dt, TG_DIMS(2, 4), "x", VALS(0.75, 0.75, 0.75, 0.75, 1, 2, 3, 4));
    tg_tensor *gm = tu_in(ctx, dt, TG_DIMS(4), "gamma", VALS(1, 2, 3, 4));
    tg_tensor *bt = tu_in(ctx, dt, TG_DIMS(4), "beta", VALS(0.1, 0.2, 0.3, 0.4));
    tg_tensor *y = tg_layer_norm(ctx, x, gm, bt, 1e-5);
    tg_graph *g = tu_fwd(ctx, y);
    for (int j = 0; j < 4; j++)
        ck_assert_double_eq(tg_get(y, j), tg_get(bt, j));
    tu_bwd(ctx, g, y, VALS(1, 0, 0, 0, 0, 0, 0, 0));
    ck_assert_int_eq(tu_count_nan(x, true), 0);
    double rs = 1 / sqrt(1e-5);
    EXPECT_GRAD(x, dt == TG_F32 ? 1e-6 : 1e-12, 0.75 * rs, -0.25 * rs, -0.25 * rs, -0.25 * rs, 0,
                0, 0, 0);
    EXPECT_GRAD(gm, 0, 0, 0, 0, 0); /* xhat = 0 on the constant row */
    EXPECT_GRAD(bt, 0, 1, 0, 0, 0);
    tu_ctx_free(ctx);
}
END_TEST

/* D = 1: every row is constant, y = beta and dx = 0. */
START_TEST(test_d1)
{
    tg_dtype dt = tu_dtypes[_i];
    tg_ctx *ctx = tu_ctx_new();
    tg_tensor *x = tu_in(ctx, dt, TG_DIMS(3, 1), "x", VALS(-5, 0, 1e3));
    tg_tensor *gm = tu_in(ctx, dt, TG_DIMS(1), "gamma", VALS(7));
    tg_tensor *bt = tu_in(ctx, dt, TG_DIMS(1), "beta", VALS(-0.5));
    tg_tensor *y = tg_layer_norm(ctx, x, gm, bt, 1e-5);
    tg_graph *g = tu_fwd(ctx, y);
    EXPECT_DATA(y, 0, -0.5, -0.5, -0.5);
    tu_bwd(ctx, g, y, VALS(1, 2, 3));
    EXPECT_GRAD(x, 0, 0, 0, 0);
    EXPECT_GRAD(gm, 0, 0);
    EXPECT_GRAD(bt, 0, 6);
    tu_ctx_free(ctx);
}
END_TEST

/* eps = 0 is accepted (eps >= 0), and the header promises a constant row gives beta, never NaN.
 * With eps = 0, var + eps = 0, so the kernel must not compute 0 * (1/0). */
START_TEST(test_constant_row_eps0)
{
    tg_dtype dt = tu_dtypes[_i];
    tg_ctx *ctx = tu_ctx_new();
    tg_tensor *x = tu_in(ctx, dt, TG_DIMS(2, 4), "x", VALS(2, 2, 2, 2, 1, 2, 3, 4));
    tg_tensor *gm = tu_in(ctx, dt, TG_DIMS(4), "gamma", VALS(1, 2, 3, 4));
    tg_tensor *bt = tu_in(ctx, dt, TG_DIMS(4), "beta", VALS(0.5, -0.5, 1, -1));
    tg_tensor *y = tg_layer_norm(ctx, x, gm, bt, 0.0);
    ck_assert_ptr_nonnull(y);
    tg_graph *g = tu_fwd(ctx, y);
    tu_bwd(ctx, g, y, NULL);
    ck_assert_msg(tu_count_nan(y, false) == 0, "layer_norm(eps = 0) of a constant row gave NaN: "
                  "y = [%g, %g, %g, %g]", tg_get(y, 0), tg_get(y, 1), tg_get(y, 2), tg_get(y, 3));
    EXPECT_DATA(y, tol_of(dt), 0.5, -0.5, 1, -1, -H0 + 0.5, -2 * H1 - 0.5, 3 * H1 + 1, 4 * H0 - 1);
    ck_assert_int_eq(tu_count_nan(x, true), 0);
    ck_assert_int_eq(tu_count_nan(gm, true), 0);
    tu_ctx_free(ctx);
}
END_TEST

/* A constant row of a value whose f32 sum is inexact (1000.1 over D = 768, a real d_model;
 * 12345.678 over D = 3) must still give beta: the mean has to come out as the value itself,
 * otherwise x - mean is a rounding residue that rstd = 1/sqrt(eps) blows up to O(1). */
START_TEST(test_constant_row_inexact_mean)
{
    tg_dtype dt = tu_dtypes[_i];
    const struct {
        double v;
        int64_t d;
    } cases[] = {{1000.1, 768}, {12345.678, 3}, {0.1, 768}};
    for (int c = 0; c < 3; c++) {
        tg_ctx *ctx = tu_ctx_new();
        int64_t d = cases[c].d;
        tg_tensor *x = tu_in(ctx, dt, TG_DIMS(1, d), "x", NULL);
        tg_fill(x, cases[c].v);
        tg_tensor *gm = tu_in(ctx, dt, TG_DIMS(d), "gamma", NULL);
        tg_tensor *bt = tu_in(ctx, dt, TG_DIMS(d), "beta", NULL);
        tg_fill(gm, 1.0);
        tg_fill(bt, 0.25);
        tg_tensor *y = tg_layer_norm(ctx, x, gm, bt, 1e-5);
        tu_fwd(ctx, y);
        double worst = 0;
        for (int64_t j = 0; j < d; j++)
            worst = fmax(worst, fabs(tg_get(y, j) - 0.25));
        ck_assert_msg(worst <= 1e-3, "%s constant row of %g (D = %lld): max |y - beta| = %g",
                      tg_dtype_str(dt), cases[c].v, (long long)d, worst);
        tu_ctx_free(ctx);
    }
}
END_TEST

/* ---- errors --------------------------------------------------------------------------------- */
START_TEST(test_err_shapes)
{
    tg_ctx *ctx = tu_ctx_new();
    tg_tensor *x = tg_input(ctx, TG_F32, TG_DIMS(2, 4), "x");
    tg_tensor *g3 = tg_param(ctx, TG_F32, TG_DIMS(3), "g3");
    tg_tensor *g14 = tg_param(ctx, TG_F32, TG_DIMS(1, 4), "g14");
    tg_tensor *g0 = tg_param(ctx, TG_F32, 0, NULL, "g0");
    tg_tensor *ok = tg_param(ctx, TG_F32, TG_DIMS(4), "ok");
    struct {
        tg_tensor *g, *b;
        const char *n1, *n2;
    } bad[] = {
        {g3, NULL, "gamma", "(3)"}, {NULL, g3, "beta", "(3)"},   {g14, ok, "gamma", "(1, 4)"},
        {ok, g14, "beta", "(1, 4)"}, {g0, NULL, "gamma", "()"}, {ok, g0, "beta", "()"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        ck_assert_msg(tg_layer_norm(ctx, x, bad[i].g, bad[i].b, 1e-5) == NULL, "case %zu", i);
        tu_assert_error(ctx, TG_ERR_SHAPE, "tg_layer_norm");
        tu_assert_error(ctx, TG_ERR_SHAPE, bad[i].n1);
        tu_assert_error(ctx, TG_ERR_SHAPE, bad[i].n2);
        tu_assert_error(ctx, TG_ERR_SHAPE, "(2, 4)");
        tg_ctx_clear_error(ctx);
    }
    tg_tensor *s = tg_input(ctx, TG_F32, 0, NULL, "s");
    ck_assert_ptr_null(tg_layer_norm(ctx, s, NULL, NULL, 1e-5));
    tu_assert_error(ctx, TG_ERR_SHAPE, "tg_layer_norm");
    tu_ctx_free(ctx);
}
END_TEST

START_TEST(test_err_eps)
{
    tg_ctx *ctx = tu_ctx_new();
    tg_tensor *x = tg_input(ctx, TG_F64, TG_DIMS(2, 4), "x");
    const double bad[] = {-1e-5, -INFINITY, INFINITY, NAN};
    for (int i = 0; i < 4; i++) {
        ck_assert_ptr_null(tg_layer_norm(ctx, x, NULL, NULL, bad[i]));
        tu_assert_error(ctx, TG_ERR_ARG, "tg_layer_norm");
        tu_assert_error(ctx, TG_ERR_ARG, "eps");
        tg_ctx_clear_error(ctx);
    }
    ck_assert_ptr_nonnull(tg_layer_norm(ctx, x, NULL, NULL, 0.0));
    ck_assert_ptr_nonnull(tg_layer_norm(ctx, x, NULL, NULL, -0.0));
    ck_assert_ptr_nonnull(tg_layer_norm(ctx, x, NULL, NULL, 1e300));
    ck_assert_int_eq(tg_ctx_status(ctx), TG_OK);
    tu_ctx_free(ctx);
}
END_TEST

START_TEST(test_err_dtype_context)
{
    tg_ctx *ctx = tu_ctx_new(), *other = tu_ctx_new();
    tg_tensor *x = tg_input(ctx, TG_F64, TG_DIMS(2, 4), "x");
    tg_tensor *g32 = tg_param(ctx, TG_F32, TG_DIMS(4), "g32");
    tg_tensor *g64 = tg_param(ctx, TG_F64, TG_DIMS(4), "g64");
    ck_assert_ptr_null(tg_layer_norm(ctx, x, g32, NULL, 1e-5));
    tu_assert_error(ctx, TG_ERR_DTYPE, "tg_layer_norm");
    tg_ctx_clear_error(ctx);
    ck_assert_ptr_null(tg_layer_norm(ctx, x, NULL, g32, 1e-5));
    tu_assert_error(ctx, TG_ERR_DTYPE, "tg_layer_norm");
    tg_ctx_clear_error(ctx);
    ck_assert_ptr_null(tg_layer_norm(ctx, x, g64, g32, 1e-5));
    tu_assert_error(ctx, TG_ERR_DTYPE, "f32");
    tg_ctx_clear_error(ctx);
    tg_tensor *go = tg_param(other, TG_F64, TG_DIMS(4), "g_other");
    tg_tensor *xo = tg_input(other, TG_F64, TG_DIMS(2, 4), "x_other");
    ck_assert_ptr_null(tg_layer_norm(ctx, x, go, NULL, 1e-5));
    tu_assert_error(ctx, TG_ERR_ARG, "another context");
    tg_ctx_clear_error(ctx);
    ck_assert_ptr_null(tg_layer_norm(ctx, x, g64, go, 1e-5));
    tu_assert_error(ctx, TG_ERR_ARG, "tg_layer_norm");
    tg_ctx_clear_error(ctx);
    ck_assert_ptr_null(tg_layer_norm(ctx, xo, NULL, NULL, 1e-5));
    tu_assert_error(ctx, TG_ERR_ARG, "another context");
    ck_assert_int_eq(tg_ctx_status(other), TG_OK);
    tu_ctx_free(other);
    tu_ctx_free(ctx);
}
END_TEST

/* NULL x -> NULL; first error sticks; a failed builder given as the (optional) gamma leaves the
 * error pending so no graph is built over it. */
START_TEST(test_err_null_first_sticks)
{
    tg_ctx *ctx = tu_ctx_new();
    tg_tensor *x = tg_input(ctx, TG_F32, TG_DIMS(2, 4), "x");
    tg_tensor *gm = tg_param(ctx, TG_F32, TG_DIMS(4), "gamma");
    ck_assert_ptr_null(tg_layer_norm(ctx, NULL, gm, gm, 1e-5));
    ck_assert_ptr_null(tg_layer_norm(ctx, NULL, NULL, NULL, NAN)); /* NULL x: nothing reported */
    ck_assert_int_eq(tg_ctx_status(ctx), TG_OK);
    tg_tensor *good = tg_layer_norm(ctx, x, gm, gm, 1e-5);
    ck_assert_ptr_nonnull(good);
    tg_tensor *bad = tg_layer_norm(ctx, x, NULL, NULL, -1.0);
    ck_assert_ptr_null(bad);
    tu_assert_error(ctx, TG_ERR_ARG, "eps");
    char first[512];
    snprintf(first, sizeof first, "%s", tg_ctx_message(ctx));
    ck_assert_ptr_null(tg_layer_norm(ctx, tg_layer_norm(ctx, bad, gm, gm, 1e-5), NULL, NULL, 0));
    tg_tensor *g3 = tg_param(ctx, TG_F32, TG_DIMS(3), "g3");
    ck_assert_ptr_null(tg_layer_norm(ctx, x, g3, NULL, 1e-5)); /* not recorded over the first */
    ck_assert_str_eq(tg_ctx_message(ctx), first);
    tg_tensor *nog = tg_layer_norm(ctx, x, tg_scale(ctx, bad, 2.0), NULL, 1e-5);
    ck_assert_str_eq(tg_ctx_message(ctx), first);
    if (nog)
        ck_assert_ptr_null(tg_graph_new(ctx, &nog, 1));
    tu_assert_graph_refused(ctx, good, first);
    tu_ctx_free(ctx);
}
END_TEST

/* ---- gradcheck ------------------------------------------------------------------------------ */
static tg_tensor *gc_case(tg_ctx *ctx, tg_dtype dt, int which)
{
    switch (which) {
    case 0: return tg_layer_norm(ctx, GIN("x", 3, 7), GPARAM("weight", 7), GPARAM("bias", 7), 1e-5);
    case 1: return tg_layer_norm(ctx, GIN("x", 1, 5), GPARAM("weight", 5), GPARAM("bias", 5), 1e-5);
    case 2: return tg_layer_norm(ctx, GIN("x", 4, 2), NULL, NULL, 1e-5);
    case 3: return tg_layer_norm(ctx, GIN("x", 2, 1, 3), GPARAM("weight", 3), NULL, 1e-5);
    case 4: return tg_layer_norm(ctx, GIN("x", 3, 4), NULL, GPARAM("bias", 4), 1e-5);
    case 5: return tg_layer_norm(ctx, GIN("x", 2, 6), GPARAM("weight", 6), NULL, 0.1);
    case 6: { /* large offset, small spread */
        tg_tensor *x = GIN("x", 3, 5);
        tg_fill_uniform(x, 40, 41);
        return tg_layer_norm(ctx, x, GPARAM("weight", 5), GPARAM("bias", 5), 1e-5);
    }
    case 7: return tg_layer_norm(ctx, GIN("x", 1, 2, 1, 1, 2, 4), GPARAM("weight", 4),
                                 GPARAM("bias", 4), 1e-5);
    default: { /* one rank-1 tensor as x, gamma and beta */
        tg_tensor *x = GIN("x", 5);
        return tg_layer_norm(ctx, x, x, x, 1e-5);
    }
    }
}
#define N_GC_CASES 9

START_TEST(test_gradcheck_f64)
{
    tu_gradcheck_case(gc_case, TG_F64, _i, 1300 + (uint64_t)_i);
}
END_TEST

START_TEST(test_gradcheck_f32)
{
    static const int cases[] = {0, 2, 5};
    tu_gradcheck_case(gc_case, TG_F32, cases[_i], 1400 + (uint64_t)_i);
}
END_TEST

/* ---- thread invariance ---------------------------------------------------------------------- */
static tg_tensor *ti_affine(tg_ctx *ctx, tg_dtype dt) /* (256,256) with gamma and beta */
{
    return tg_layer_norm(ctx, GIN("x", 256, 256), GPARAM("weight", 256), GPARAM("bias", 256),
                         1e-5);
}
static tg_tensor *ti_plain(tg_ctx *ctx, tg_dtype dt)
{
    return tg_layer_norm(ctx, GIN("x", 256, 256), NULL, NULL, 1e-5);
}
static tg_tensor *ti_3d(tg_ctx *ctx, tg_dtype dt) /* (B,T,D) = (8,32,192) */
{
    return tg_layer_norm(ctx, GIN("x", 8, 32, 192), GPARAM("weight", 192), NULL, 1e-5);
}
static const tu_build_fn k_ti_builds[] = {ti_affine, ti_plain, ti_3d};
#define N_TI (int)(sizeof k_ti_builds / sizeof k_ti_builds[0])

/* ---- edge cases ----------------------------------------------------------------------------- */
/* Rank 6: (1,2,1,1,2,4), each row a multiple of [1,2,3,4] plus an offset: every row is xhat. */
START_TEST(test_rank6)
{
    tg_dtype dt = tu_dtypes[_i];
    tg_ctx *ctx = tu_ctx_new();
    tg_tensor *x = tu_in(ctx, dt, TG_DIMS(1, 2, 1, 1, 2, 4), "x", NULL);
    for (int r = 0; r < 4; r++)
        for (int j = 0; j < 4; j++)
            tg_set(x, r * 4 + j, (r + 1) * (j + 1) + 10 * r);
    tg_tensor *y = tg_layer_norm(ctx, x, NULL, NULL, 0.0);
    tu_fwd(ctx, y);
    EXPECT_SHAPE(y, 1, 2, 1, 1, 2, 4);
    EXPECT_DATA(y, tol_of(dt), -H0, -H1, H1, H0, -H0, -H1, H1, H0, -H0, -H1, H1, H0, -H0, -H1, H1,
                H0);
    tu_ctx_free(ctx);
}
END_TEST

START_TEST(test_backward_twice)
{
    tg_dtype dt = tu_dtypes[_i];
    tg_ctx *ctx = tu_ctx_new();
    tg_ctx_seed(ctx, 71);
    tg_tensor *x = tu_input(ctx, dt, TG_DIMS(4, 6), "x", -2, 2);
    tg_tensor *gm = tu_input(ctx, dt, TG_DIMS(6), "gamma", 0.5, 1.5);
    tg_tensor *bt = tu_input(ctx, dt, TG_DIMS(6), "beta", -1, 1);
    tg_tensor *y = tg_layer_norm(ctx, x, gm, bt, 1e-5);
    tg_graph *g = tu_fwd(ctx, y);
    double dy[24];
    for (int i = 0; i < 24; i++)
        dy[i] = sin(0.8 * i) - 0.1;
    tg_tensor *leaves[3] = {x, gm, bt};
    tu_assert_backward_twice(ctx, g, y, dy, leaves, 3);
    tu_ctx_free(ctx);
}
END_TEST

/* New data between runs (including a row that becomes constant): new results, no rebuild. */
START_TEST(test_rerun_new_data)
{
    tg_dtype dt = tu_dtypes[_i];
    tg_ctx *ctx = tu_ctx_new();
    tg_tensor *x = tu_in(ctx, dt, TG_DIMS(1, 4), "x", VALS(1, 2, 3, 4));
    tg_tensor *bt = tu_in(ctx, dt, TG_DIMS(4), "beta", VALS(0, 0, 0, 0));
    tg_tensor *y = tg_layer_norm(ctx, x, NULL, bt, 0.0);
    tg_graph *g = tu_fwd(ctx, y);
    EXPECT_DATA(y, tol_of(dt), -H0, -H1, H1, H0);
    tu_set(x, VALS(40, 30, 20, 10));
    ck_assert_int_eq(tg_graph_forward(g), TG_OK);
    EXPECT_DATA(y, tol_of(dt), H0, H1, -H1, -H0);
    tu_set(bt, VALS(1, 1, 1, 1));
    ck_assert_int_eq(tg_graph_forward(g), TG_OK);
    EXPECT_DATA(y, tol_of(dt), 1 + H0, 1 + H1, 1 - H1, 1 - H0);
    tu_ctx_free(ctx);
}
END_TEST

static Suite *layer_norm_suite(void)
{
    Suite *s = suite_create("ops_layer_norm");
    TCase *tc = tu_tcase(s, "forward", 0);
    tcase_add_loop_test(tc, test_affine_row, 0, 2);
    tcase_add_loop_test(tc, test_plain_rows, 0, 2);
    tcase_add_loop_test(tc, test_gamma_or_beta_only, 0, 2);
    tcase_add_loop_test(tc, test_grad_by_hand, 0, 2);
    tcase_add_loop_test(tc, test_grad_of_sum_is_zero, 0, 2);
    tcase_add_loop_test(tc, test_constant_row, 0, 2);
    tcase_add_loop_test(tc, test_d1, 0, 2);
    tcase_add_loop_test(tc, test_constant_row_eps0, 0, 2);
    tcase_add_loop_test(tc, test_constant_row_inexact_mean, 0, 2);

    tc = tu_tcase(s, "errors", 0);
    tcase_add_test(tc, test_err_shapes);
    tcase_add_test(tc, test_err_eps);
    tcase_add_test(tc, test_err_dtype_context);
    tcase_add_test(tc, test_err_null_first_sticks);

    tc = tu_tcase(s, "gradcheck", 60);
    tcase_add_loop_test(tc, test_gradcheck_f64, 0, N_GC_CASES);
    tcase_add_loop_test(tc, test_gradcheck_f32, 0, 3);

    tu_add_thread_tcase(s, k_ti_builds, N_TI);

    tc = tu_tcase(s, "edge", 60);
    tcase_add_loop_test(tc, test_rank6, 0, 2);
    tcase_add_loop_test(tc, test_backward_twice, 0, 2);
    tcase_add_loop_test(tc, test_rerun_new_data, 0, 2);
    return s;
}

int main(void) { return tu_run(layer_norm_suite()); }
