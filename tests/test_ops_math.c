/*
 * test_ops_math.c - tg_sub, tg_div (broadcasting), tg_neg, tg_exp, tg_log, tg_sqrt, tg_tanh,
 * tg_sigmoid, tg_silu, tg_gelu_tanh and tg_mse_loss: values and gradients computed by hand or
 * by PyTorch (f32 and f64), out-of-domain values (inf and NaN as IEEE-754 and PyTorch), every
 * shape/dtype/argument error, f64 (and some f32) gradcheck on several shapes per op, and thread
 * invariance (1, 2, 3 threads bitwise identical) on shapes big enough for the parallel paths.
 *
 * PyTorch references: /usr/bin/python3 with torch 1.13 (float64), e.g.
 *   x = torch.tensor([-2.0, -0.5, 0.0, 0.5, 1.0, 3.0], dtype=torch.float64, requires_grad=True)
 *   y = F.gelu(x, approximate='tanh'); g, = torch.autograd.grad(y.sum(), x)
 * printed with float.__repr__ (17 significant digits). f32 results are compared with the f64
 * references at a relative tolerance of 2e-6.
 */
#include "testutil.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* tolerance of a dtype against f64 references */
static double tol_of(tg_dtype dt) { return dt == TG_F32 ? 2e-6 : 1e-14; }

/* Like tu_expect_vals, but a NaN in want expects NaN, and zeros compare their sign too. */
static void expect_ieee(const tg_tensor *t, bool grad, const double *want, double tol)
{
    for (int64_t i = 0; i < tg_tensor_numel(t); i++) {
        double v = grad ? tg_grad_get(t, i) : tg_get(t, i), w = want[i];
        bool ok;
        if (isnan(w))
            ok = isnan(v);
        else if (isinf(w) || w == 0)
            ok = v == w && signbit(v) == signbit(w);
        else
            ok = fabs(v - w) <= tol * fmax(1.0, fabs(w));
        ck_assert_msg(ok, "%s of '%s'[%lld] = %.17g, expected %.17g (tol %g)",
                      grad ? "grad" : "value", tg_tensor_name(t), (long long)i, v, w, tol);
    }
}
#define EXPECT_IEEE(t, grad, tol, ...) expect_ieee((t), (grad), VALS(__VA_ARGS__), (tol))

/* ---- sub ------------------------------------------------------------------------------------ */
/* Same shape: [[1,-2,3],[4,5,-6]] - [[0.5,1,-1],[4,-5,0]] = [[0.5,-3,4],[0,10,-6]]; da = dy,
 * db = -dy. Broadcast b (3) = [4,-0.5,3] (PyTorch): y = [[-3,-1.5,0],[0,5.5,-9]];
 * dy = [[1,2,3],[-1,0.5,2]]: da = dy, db = -(column sums) = [0, -2.5, -5].
 * a broadcast: (1) [10] - (2,2) [[1,2],[3,4]] = [[9,8],[7,6]]; d(sum)/da = 4, d(sum)/db = -1. */
START_TEST(test_sub)
{
    tg_dtype dt = tu_dtypes[_i];
    tg_ctx *ctx = tu_ctx_new();
    tg_tensor *a = tu_in(ctx, dt, TG_DIMS(2, 3), "a", VALS(1, -2, 3, 4, 5, -6));
    tg_tensor *b = tu_in(ctx, dt, TG_DIMS(2, 3), "b", VALS(0.5, 1, -1, 4, -5, 0));
    tg_tensor *y = tg_sub(ctx, a, b);
    tg_graph *g = tu_fwd(ctx, y);
    ck_assert_str_eq(tg_tensor_op_name(y), "sub");
    EXPECT_SHAPE(y, 2, 3);
    EXPECT_DATA(y, 0, 0.5, -3, 4, 0, 10, -6);
    tu_bwd(ctx, g, y, VALS(1, -2, 3, -4, 5, -6));
    EXPECT_GRAD(a, 0, 1, -2, 3, -4, 5, -6);
    EXPECT_GRAD(b, 0, -1, 2, -3, 4, -5, 6);

    a = tu_in(ctx, dt, TG_DIMS(2, 3), "a2", VALS(1, -2, 3, 4, 5, -6));
    b = tu_in(ctx, dt, TG_DIMS(3), "b2", VALS(4, -0.5, 3));
    y = tg_sub(ctx, a, b);
    g = tu_fwd(ctx, y);
    EXPECT_SHAPE(y, 2, 3);
    EXPECT_DATA(y, 0, -3, -1.5, 0, 0, 5.5, -9);
    tu_bwd(ctx, g, y, VALS(1, 2, 3, -1, 0.5, 2));
    EXPECT_GRAD(a, 0, 1, 2, 3, -1, 0.5, 2);
    EXPECT_GRAD(b, 0, 0, -2.5, -5);

    tg_tensor *s = tu_in(ctx, dt, TG_DIMS(1), "s", VALS(10));
    tg_tensor *m = tu_in(ctx, dt, TG_DIMS(2, 2), "m", VALS(1, 2, 3, 4));
    y = tg_sub(ctx, s, m);
    g = tu_fwd(ctx, y);
    EXPECT_SHAPE(y, 2, 2);
    EXPECT_DATA(y, 0, 9, 8, 7, 6);
    tu_bwd(ctx, g, y, NULL);
    EXPECT_GRAD(s, 0, 4);
    EXPECT_GRAD(m, 0, -1, -1, -1, -1);
    tu_ctx_free(ctx);
}
END_TEST

/* x - x = 0 with gradient 1 - 1 = 0; (3,1) - (1,2) outer: y[i,j] = a_i - b_j,
 * d(sum)/da = 2 (columns), d(sum)/db = -3 (rows); rank 0 - rank 0. */
START_TEST(test_sub_self_outer_rank0)
{
    tg_dtype dt = tu_dtypes[_i];
    tg_ctx *ctx = tu_ctx_new();
    tg_tensor *x = tu_in(ctx, dt, TG_DIMS(3), "x", VALS(1.5, -2, 7));
    tg_tensor *y = tg_sub(ctx, x, x);
    tg_graph *g = tu_fwd(ctx, y);
    EXPECT_DATA(y, 0, 0, 0, 0);
    tu_bwd(ctx, g, y, VALS(3, 4, 5));
    EXPECT_GRAD(x, 0, 0, 0, 0);

    tg_tensor *a = tu_in(ctx, dt, TG_DIMS(3, 1), "a", VALS(1, 2, 3));
    tg_tensor *b = tu_in(ctx, dt, TG_DIMS(1, 2), "b", VALS(10, 20));
    y = tg_sub(ctx, a, b);
    g = tu_fwd(ctx, y);
    EXPECT_SHAPE(y, 3, 2);
    EXPECT_DATA(y, 0, -9, -19, -8, -18, -7, -17);
    tu_bwd(ctx, g, y, NULL);
    EXPECT_GRAD(a, 0, 2, 2, 2);
    EXPECT_GRAD(b, 0, -3, -3);

    tg_tensor *p = tu_in(ctx, dt, 0, NULL, "p", VALS(2.5));
    tg_tensor *q = tu_in(ctx, dt, 0, NULL, "q", VALS(4));
    y = tg_sub(ctx, p, q);
    g = tu_fwd(ctx, y);
    ck_assert_int_eq(tg_tensor_rank(y), 0);
    EXPECT_DATA(y, 0, -1.5);
    ck_assert_int_eq(tg_graph_backward(g, y, NULL), TG_OK);
    EXPECT_GRAD(p, 0, 1);
    EXPECT_GRAD(q, 0, -1);
    tu_ctx_free(ctx);
}
END_TEST

/* ---- div ------------------------------------------------------------------------------------ */
/* PyTorch: a = [[1,-2,3],[4,5,-6]] / b = [4,-0.5,3], dy = [[1,2,3],[-1,0.5,2]]:
 *   y  = [[0.25, 4, 1], [1, -10, -2]]
 *   da = dy / b = [[0.25, -4, 1], [-0.25, -1, 0.6666666666666666]]
 *   db = -sum_rows(dy a / b^2) = [0.1875, 6, 0.33333333333333326]
 * Same shape: [6, -3, 1] / [2, 4, -8] = [3, -0.75, -0.125];
 *   d(sum)/da = 1/b = [0.5, 0.25, -0.125], d(sum)/db = -a/b^2 = [-1.5, 0.1875, -0.015625]. */
START_TEST(test_div)
{
    tg_dtype dt = tu_dtypes[_i];
    double tol = tol_of(dt);
    tg_ctx *ctx = tu_ctx_new();
    tg_tensor *a = tu_in(ctx, dt, TG_DIMS(2, 3), "a", VALS(1, -2, 3, 4, 5, -6));
    tg_tensor *b = tu_in(ctx, dt, TG_DIMS(3), "b", VALS(4, -0.5, 3));
    tg_tensor *y = tg_div(ctx, a, b);
    tg_graph *g = tu_fwd(ctx, y);
    ck_assert_str_eq(tg_tensor_op_name(y), "div");
    EXPECT_SHAPE(y, 2, 3);
    EXPECT_DATA(y, 0, 0.25, 4, 1, 1, -10, -2);
    tu_bwd(ctx, g, y, VALS(1, 2, 3, -1, 0.5, 2));
    EXPECT_GRAD(a, tol, 0.25, -4, 1, -0.25, -1, 0.6666666666666666);
    EXPECT_GRAD(b, tol, 0.1875, 6, 0.33333333333333326);

    a = tu_in(ctx, dt, TG_DIMS(3), "a2", VALS(6, -3, 1));
    b = tu_in(ctx, dt, TG_DIMS(3), "b2", VALS(2, 4, -8));
    y = tg_div(ctx, a, b);
    g = tu_fwd(ctx, y);
    EXPECT_DATA(y, 0, 3, -0.75, -0.125);
    tu_bwd(ctx, g, y, NULL);
    EXPECT_GRAD(a, 0, 0.5, 0.25, -0.125);
    EXPECT_GRAD(b, 0, -1.5, 0.1875, -0.015625);

    /* a broadcast: (1) [12] / (2,2) [1,2,3,4] = [12,6,4,3];
     * d(sum)/da = sum 1/b = 25/12, d(sum)/db = -12/b^2 = [-12, -3, -4/3, -0.75] */
    tg_tensor *s = tu_in(ctx, dt, TG_DIMS(1), "s", VALS(12));
    tg_tensor *m = tu_in(ctx, dt, TG_DIMS(2, 2), "m", VALS(1, 2, 3, 4));
    y = tg_div(ctx, s, m);
    g = tu_fwd(ctx, y);
    EXPECT_DATA(y, 0, 12, 6, 4, 3);
    tu_bwd(ctx, g, y, NULL);
    EXPECT_GRAD(s, tol, 25.0 / 12);
    EXPECT_GRAD(m, tol, -12, -3, -4.0 / 3, -0.75);
    tu_ctx_free(ctx);
}
END_TEST

/* Division by zero is IEEE-754, not an error: 1/0 = inf, -1/0 = -inf, 0/0 = NaN, 1/-0 = -inf;
 * the gradients are inf/NaN likewise (PyTorch agrees). x/x = 1 with gradient 0. */
START_TEST(test_div_domain)
{
    tg_dtype dt = tu_dtypes[_i];
    tg_ctx *ctx = tu_ctx_new();
    tg_tensor *a = tu_in(ctx, dt, TG_DIMS(4), "a", VALS(1, -1, 0, 1));
    tg_tensor *b = tu_in(ctx, dt, TG_DIMS(4), "b", VALS(0, 0, 0, -0.0));
    tg_tensor *y = tg_div(ctx, a, b);
    tg_graph *g = tu_fwd(ctx, y);
    ck_assert_int_eq(tg_ctx_status(ctx), TG_OK);
    EXPECT_IEEE(y, false, 0, INFINITY, -INFINITY, NAN, -INFINITY);
    tu_bwd(ctx, g, y, NULL);
    EXPECT_IEEE(a, true, 0, INFINITY, INFINITY, INFINITY, -INFINITY);
    /* db = -(1 * (a/b)) / b: -(inf)/0 = -inf, -(-inf)/0 = inf, NaN, -(-inf)/-0 = -inf */
    EXPECT_IEEE(b, true, 0, -INFINITY, INFINITY, NAN, -INFINITY);

    tg_tensor *x = tu_in(ctx, dt, TG_DIMS(3), "x", VALS(2, -3, 0.5));
    y = tg_div(ctx, x, x);
    g = tu_fwd(ctx, y);
    EXPECT_DATA(y, 0, 1, 1, 1);
    tu_bwd(ctx, g, y, VALS(1, 2, 3));
    EXPECT_GRAD(x, 1e-15, 0, 0, 0);
    tu_ctx_free(ctx);
}
END_TEST

/* ---- unary ops ------------------------------------------------------------------------------ */
static const double k_x6[] = {-2.0, -0.5, 0.0, 0.5, 1.0, 3.0};

typedef tg_tensor *(*unary_fn)(tg_ctx *, tg_tensor *);

/* y = f(x) on k_x6, dy = 1: value and gradient against the PyTorch references. */
static void check_unary(tg_dtype dt, unary_fn f, const char *name, const double *want_y,
                        const double *want_dx)
{
    tg_ctx *ctx = tu_ctx_new();
    tg_tensor *x = tu_in(ctx, dt, TG_DIMS(6), "x", k_x6);
    tg_tensor *y = f(ctx, x);
    tg_graph *g = tu_fwd(ctx, y);
    ck_assert_str_eq(tg_tensor_op_name(y), name);
    ck_assert_int_eq(tg_tensor_dtype(y), dt);
    EXPECT_SHAPE(y, 6);
    tu_expect_vals(y, false, want_y, tol_of(dt));
    tu_bwd(ctx, g, y, NULL);
    tu_expect_vals(x, true, want_dx, tol_of(dt));
    tu_ctx_free(ctx);
}

/* neg by hand: [2, 0.5, -0, -0.5, -1, -3], dx = -dy */
START_TEST(test_neg)
{
    tg_dtype dt = tu_dtypes[_i];
    check_unary(dt, tg_neg, "neg", VALS(2, 0.5, 0, -0.5, -1, -3), VALS(-1, -1, -1, -1, -1, -1));
    tg_ctx *ctx = tu_ctx_new();
    tg_tensor *x = tu_in(ctx, dt, TG_DIMS(4), "x", VALS(0, -0.0, INFINITY, NAN));
    tg_tensor *y = tg_neg(ctx, x);
    tg_graph *g = tu_fwd(ctx, y);
    EXPECT_IEEE(y, false, 0, -0.0, 0.0, -INFINITY, NAN);
    tu_bwd(ctx, g, y, VALS(2, 3, 4, 5));
    EXPECT_IEEE(x, true, 0, -2, -3, -4, -5);
    tu_ctx_free(ctx);
}
END_TEST

/* PyTorch: torch.exp; dx = y */
START_TEST(test_exp)
{
    static const double ey[] = {0.1353352832366127, 0.6065306597126334, 1.0,
                                1.6487212707001282, 2.718281828459045, 20.085536923187668};
    check_unary(tu_dtypes[_i], tg_exp, "exp", ey, ey);
}
END_TEST

/* PyTorch: torch.log on [0.25, 0.5, 1, 2, 10]; dx = 1/x (by hand: exact) */
START_TEST(test_log)
{
    tg_dtype dt = tu_dtypes[_i];
    tg_ctx *ctx = tu_ctx_new();
    tg_tensor *x = tu_in(ctx, dt, TG_DIMS(5), "x", VALS(0.25, 0.5, 1, 2, 10));
    tg_tensor *y = tg_log(ctx, x);
    tg_graph *g = tu_fwd(ctx, y);
    ck_assert_str_eq(tg_tensor_op_name(y), "log");
    EXPECT_DATA(y, tol_of(dt), -1.3862943611198906, -0.6931471805599453, 0.0,
                0.6931471805599453, 2.302585092994046);
    ck_assert_double_eq(tg_get(y, 2), 0); /* log 1 = 0 exactly */
    tu_bwd(ctx, g, y, NULL);
    EXPECT_GRAD(x, tol_of(dt), 4, 2, 1, 0.5, 0.1);
    tu_ctx_free(ctx);
}
END_TEST

/* PyTorch: torch.sqrt on [0.25, 0.5, 1, 2, 10]; dx = 1 / (2 y) */
START_TEST(test_sqrt)
{
    tg_dtype dt = tu_dtypes[_i];
    tg_ctx *ctx = tu_ctx_new();
    tg_tensor *x = tu_in(ctx, dt, TG_DIMS(5), "x", VALS(0.25, 0.5, 1, 2, 10));
    tg_tensor *y = tg_sqrt(ctx, x);
    tg_graph *g = tu_fwd(ctx, y);
    ck_assert_str_eq(tg_tensor_op_name(y), "sqrt");
    EXPECT_DATA(y, tol_of(dt), 0.5, 0.7071067811865476, 1.0, 1.4142135623730951,
                3.1622776601683795);
    tu_bwd(ctx, g, y, NULL);
    EXPECT_GRAD(x, tol_of(dt), 1.0, 0.7071067811865475, 0.5, 0.35355339059327373,
                0.15811388300841897);
    tu_ctx_free(ctx);
}
END_TEST

/* Out of domain, PyTorch (torch.log / torch.sqrt of [0, -1, inf, -0], dy = 1):
 *   log  y = [-inf, nan, inf, -inf]   dx = [inf, -1, 0, -inf]
 *   sqrt y = [0, nan, inf, -0]        dx = [inf, nan, 0, -inf]
 * No error is recorded. */
START_TEST(test_log_sqrt_domain)
{
    tg_dtype dt = tu_dtypes[_i];
    tg_ctx *ctx = tu_ctx_new();
    tg_tensor *x = tu_in(ctx, dt, TG_DIMS(4), "x", VALS(0, -1, INFINITY, -0.0));
    tg_tensor *l = tg_log(ctx, x);
    tg_graph *g = tu_fwd(ctx, l);
    EXPECT_IEEE(l, false, 0, -INFINITY, NAN, INFINITY, -INFINITY);
    tu_bwd(ctx, g, l, NULL);
    EXPECT_IEEE(x, true, 0, INFINITY, -1, 0, -INFINITY);

    tg_tensor *x2 = tu_in(ctx, dt, TG_DIMS(4), "x2", VALS(0, -1, INFINITY, -0.0));
    tg_tensor *s = tg_sqrt(ctx, x2);
    g = tu_fwd(ctx, s);
    EXPECT_IEEE(s, false, 0, 0.0, NAN, INFINITY, -0.0);
    tu_bwd(ctx, g, s, NULL);
    EXPECT_IEEE(x2, true, 0, INFINITY, NAN, 0, -INFINITY);
    ck_assert_int_eq(tg_ctx_status(ctx), TG_OK);
    tu_ctx_free(ctx);
}
END_TEST

/* PyTorch: torch.tanh; dx = 1 - y^2 */
START_TEST(test_tanh)
{
    check_unary(tu_dtypes[_i], tg_tanh, "tanh",
                VALS(-0.9640275800758169, -0.46211715726000974, 0.0, 0.46211715726000974,
                     0.7615941559557649, 0.9950547536867305),
                VALS(0.07065082485316443, 0.7864477329659274, 1.0, 0.7864477329659274,
                     0.41997434161402614, 0.009866037165440166));
}
END_TEST

/* PyTorch: torch.sigmoid; dx = (1 - y) y */
START_TEST(test_sigmoid)
{
    check_unary(tu_dtypes[_i], tg_sigmoid, "sigmoid",
                VALS(0.11920292202211755, 0.3775406687981454, 0.5, 0.6224593312018546,
                     0.7310585786300049, 0.9525741268224334),
                VALS(0.1049935854035065, 0.2350037122015945, 0.25, 0.2350037122015945,
                     0.19661193324148185, 0.045176659730912));
}
END_TEST

/* PyTorch: F.silu */
START_TEST(test_silu)
{
    check_unary(tu_dtypes[_i], tg_silu, "silu",
                VALS(-0.2384058440442351, -0.1887703343990727, 0.0, 0.3112296656009273,
                     0.7310585786300049, 2.8577223804672998),
                VALS(-0.09078424878489547, 0.2600388126973482, 0.5, 0.7399611873026519,
                     0.9276705118714869, 1.0881041060151693));
}
END_TEST

/* PyTorch: F.gelu(x, approximate='tanh'). (The exact GELU at 1 is 0.8413447460685429; the
 * approximation gives 0.8411919906082768: the two ops really differ.) */
START_TEST(test_gelu_tanh)
{
    tg_dtype dt = tu_dtypes[_i];
    check_unary(dt, tg_gelu_tanh, "gelu_tanh",
                VALS(-0.04540230591222494, -0.15428599017485606, 0.0, 0.34571400982514394,
                     0.8411919906082768, 2.996362607918227),
                VALS(-0.0860992566236183, 0.13263009646535764, 0.5, 0.8673699035346424,
                     1.0829640838457826, 1.0115841666309695));
    tg_ctx *ctx = tu_ctx_new();
    tg_tensor *x = tu_in(ctx, dt, TG_DIMS(1), "x", VALS(1));
    tg_tensor *y = tg_gelu_tanh(ctx, x), *e = tg_gelu(ctx, x);
    tg_tensor *outs[2] = {y, e};
    tg_graph *g = tg_graph_new(ctx, outs, 2);
    ck_assert_int_eq(tg_graph_forward(g), TG_OK);
    ck_assert(fabs(tg_get(y, 0) - tg_get(e, 0)) > 1e-4);
    tu_ctx_free(ctx);
}
END_TEST

/* Infinities, NaN and saturation, PyTorch (dy = 1) on [-inf, inf, nan, -100, 100]:
 *   exp       y [0, inf, nan, 3.720075976020836e-44, 2.6881171418161356e+43]   dx = y
 *   tanh      y [-1, 1, nan, -1, 1]                 dx [0, 0, nan, 0, 0]
 *   sigmoid   y [0, 1, nan, 3.7200759760208356e-44, 1]
 *             dx [0, 0, nan, 3.7200759760208356e-44, 0]
 *   silu      y [nan, inf, nan, -3.720075976020836e-42, 100]
 *             dx [nan, nan, nan, -3.682875216260627e-42, 1]
 *   gelu_tanh y [nan, inf, nan, -0, 100]           dx [nan, nan, nan, 0, 1]
 * f64 only: in f32, e^100 overflows and e^-100 underflows to 0 (checked separately). */
START_TEST(test_unary_ieee_f64)
{
    tg_ctx *ctx = tu_ctx_new();
    unary_fn fns[5] = {tg_exp, tg_tanh, tg_sigmoid, tg_silu, tg_gelu_tanh};
    const double want_y[5][5] = {
        {0, INFINITY, NAN, 3.720075976020836e-44, 2.6881171418161356e+43},
        {-1, 1, NAN, -1, 1},
        {0, 1, NAN, 3.7200759760208356e-44, 1},
        {NAN, INFINITY, NAN, -3.720075976020836e-42, 100},
        {NAN, INFINITY, NAN, -0.0, 100},
    };
    const double want_dx[5][5] = {
        {0, INFINITY, NAN, 3.720075976020836e-44, 2.6881171418161356e+43},
        {0, 0, NAN, 0, 0},
        {0, 0, NAN, 3.7200759760208356e-44, 0},
        {NAN, NAN, NAN, -3.682875216260627e-42, 1},
        {NAN, NAN, NAN, 0, 1},
    };
    for (int f = 0; f < 5; f++) {
        tg_tensor *x =
            tu_in(ctx, TG_F64, TG_DIMS(5), "x", VALS(-INFINITY, INFINITY, NAN, -100, 100));
        tg_tensor *y = fns[f](ctx, x);
        tg_graph *g = tu_fwd(ctx, y);
        expect_ieee(y, false, want_y[f], 1e-14);
        tu_bwd(ctx, g, y, NULL);
        expect_ieee(x, true, want_dx[f], 1e-14);
    }
    ck_assert_int_eq(tg_ctx_status(ctx), TG_OK);
    tu_ctx_free(ctx);
}
END_TEST

/* f32 saturation: sigmoid(+-200) is exactly 0 and 1 with zero gradients; sigmoid(-50) =
 * 1.9287498479639178e-22 (f64 reference) is not flushed; exp(200) = inf and exp(-200) = 0;
 * tanh(+-50) = +-1; silu and gelu_tanh give -0 / x far left and right; no NaN for finite x. */
START_TEST(test_unary_saturation_f32)
{
    tg_ctx *ctx = tu_ctx_new();
    tg_tensor *x = tu_in(ctx, TG_F32, TG_DIMS(4), "x", VALS(-200, 200, -50, 50));
    tg_tensor *s = tg_sigmoid(ctx, x), *t = tg_tanh(ctx, x), *e = tg_exp(ctx, x);
    tg_tensor *u = tg_silu(ctx, x), *gt = tg_gelu_tanh(ctx, x);
    tg_tensor *outs[5] = {s, t, e, u, gt};
    tg_graph *g = tg_graph_new(ctx, outs, 5);
    ck_assert_int_eq(tg_graph_forward(g), TG_OK);
    ck_assert_double_eq(tg_get(s, 0), 0);
    ck_assert_double_eq(tg_get(s, 1), 1);
    ck_assert_double_eq(tg_get(s, 3), 1);
    ck_assert(fabs(tg_get(s, 2) / 1.9287498479639178e-22 - 1) < 1e-6);
    EXPECT_IEEE(t, false, 0, -1, 1, -1, 1);
    EXPECT_IEEE(e, false, 1e-6, 0, INFINITY, 1.9287498479639178e-22, 5.184705528587072e+21);
    EXPECT_IEEE(u, false, 1e-6, -0.0, 200, -9.6437492398195889e-21, 50);
    EXPECT_IEEE(gt, false, 1e-6, -0.0, 200, -0.0, 50);
    tg_tensor *dy = tg_const(ctx, TG_F32, TG_DIMS(4), "dy");
    tg_fill(dy, 1);
    ck_assert_int_eq(tg_graph_backward(g, s, dy), TG_OK);
    ck_assert_double_eq(tg_grad_get(x, 0), 0);
    ck_assert_double_eq(tg_grad_get(x, 1), 0);
    ck_assert_double_eq(tg_grad_get(x, 3), 0);
    ck_assert(fabs(tg_grad_get(x, 2) / 1.9287498479639178e-22 - 1) < 1e-6);
    tu_ctx_free(ctx);
}
END_TEST

/* Unary ops on rank 0 and rank 6. exp(log(x)) = x, sqrt(x)^2 ... composed gradients by hand:
 * y = sigmoid(neg(tanh(s))) at s = 0: tanh 0 = 0, y = 1/2, dy/ds = 1/4 * -1 * 1 = -1/4. */
START_TEST(test_unary_rank0_rank6)
{
    tg_dtype dt = tu_dtypes[_i];
    tg_ctx *ctx = tu_ctx_new();
    tg_tensor *s = tu_in(ctx, dt, 0, NULL, "s", VALS(0));
    tg_tensor *y = tg_sigmoid(ctx, tg_neg(ctx, tg_tanh(ctx, s)));
    tg_graph *g = tu_fwd(ctx, y);
    ck_assert_int_eq(tg_tensor_rank(y), 0);
    EXPECT_DATA(y, 0, 0.5);
    ck_assert_int_eq(tg_graph_backward(g, y, NULL), TG_OK);
    EXPECT_GRAD(s, 0, -0.25);

    tg_tensor *x6 = tu_in(ctx, dt, TG_DIMS(1, 2, 1, 2, 1, 2), "x6", VALS(1, 2, 3, 4, 5, 6, 7, 8));
    tg_tensor *r6 = tg_exp(ctx, tg_log(ctx, x6)); /* identity, derivative 1 */
    g = tu_fwd(ctx, r6);
    EXPECT_SHAPE(r6, 1, 2, 1, 2, 1, 2);
    EXPECT_DATA(r6, tol_of(dt), 1, 2, 3, 4, 5, 6, 7, 8);
    tu_bwd(ctx, g, r6, NULL);
    EXPECT_GRAD(x6, tol_of(dt), 1, 1, 1, 1, 1, 1, 1, 1);
    tu_ctx_free(ctx);
}
END_TEST

/* ---- mse_loss ------------------------------------------------------------------------------- */
/* PyTorch F.mse_loss of a = [[1,2,3],[4,5,6.5]], t = [[0.5,2,5],[1,5.5,6]] (d = a - t =
 * [0.5, 0, -2, 3, -0.5, 0.5], d^2 = [0.25, 0, 4, 9, 0.25, 0.25], sum 13.75):
 *   mean: 2.2916666666666665, da = 2 d / 6, dt = -da
 *   sum:  13.75,              da = 2 d,     dt = -da
 *   none: d^2, with dy = [1..6]: da = 2 d dy = [1, 0, -12, 24, -5, 6], dt = -da */
START_TEST(test_mse_loss)
{
    tg_dtype dt = tu_dtypes[_i];
    double tol = tol_of(dt);
    static const double av[] = {1, 2, 3, 4, 5, 6.5}, tv[] = {0.5, 2, 5, 1, 5.5, 6};
    const tg_reduction reds[3] = {TG_REDUCTION_MEAN, TG_REDUCTION_SUM, TG_REDUCTION_NONE};
    for (int r = 0; r < 3; r++) {
        tg_ctx *ctx = tu_ctx_new();
        tg_tensor *a = tu_in(ctx, dt, TG_DIMS(2, 3), "a", av);
        tg_tensor *t = tu_in(ctx, dt, TG_DIMS(2, 3), "t", tv);
        tg_tensor *y = tg_mse_loss(ctx, a, t, reds[r]);
        tg_graph *g = tu_fwd(ctx, y);
        ck_assert_str_eq(tg_tensor_op_name(y), "mse_loss");
        if (reds[r] == TG_REDUCTION_MEAN) {
            ck_assert_int_eq(tg_tensor_rank(y), 0);
            EXPECT_DATA(y, tol, 2.2916666666666665);
            tu_bwd(ctx, g, y, NULL);
            EXPECT_GRAD(a, tol, 0.16666666666666666, 0.0, -0.6666666666666666, 1.0,
                        -0.16666666666666666, 0.16666666666666666);
            EXPECT_GRAD(t, tol, -0.16666666666666666, 0.0, 0.6666666666666666, -1.0,
                        0.16666666666666666, -0.16666666666666666);
        } else if (reds[r] == TG_REDUCTION_SUM) {
            ck_assert_int_eq(tg_tensor_rank(y), 0);
            EXPECT_DATA(y, 0, 13.75);
            tu_bwd(ctx, g, y, VALS(0.5));
            EXPECT_GRAD(a, 0, 0.5, 0, -2, 3, -0.5, 0.5);
            EXPECT_GRAD(t, 0, -0.5, 0, 2, -3, 0.5, -0.5);
        } else {
            EXPECT_SHAPE(y, 2, 3);
            EXPECT_DATA(y, 0, 0.25, 0, 4, 9, 0.25, 0.25);
            tu_bwd(ctx, g, y, VALS(1, 2, 3, 4, 5, 6));
            EXPECT_GRAD(a, 0, 1, 0, -12, 24, -5, 6);
            EXPECT_GRAD(t, 0, -1, 0, 12, -24, 5, -6);
        }
        tu_ctx_free(ctx);
    }
}
END_TEST

/* mse_loss(x, x) = 0 with zero gradient; a constant target gets no gradient; a rank-0 pair;
 * the mean of 100000 equal terms is exact to the dtype's precision (double accumulation). */
START_TEST(test_mse_loss_edges)
{
    tg_dtype dt = tu_dtypes[_i];
    tg_ctx *ctx = tu_ctx_new();
    tg_tensor *x = tu_in(ctx, dt, TG_DIMS(3), "x", VALS(1, -2, 4));
    tg_tensor *y = tg_mse_loss(ctx, x, x, TG_REDUCTION_MEAN);
    tg_graph *g = tu_fwd(ctx, y);
    EXPECT_DATA(y, 0, 0);
    tu_bwd(ctx, g, y, NULL);
    EXPECT_GRAD(x, 0, 0, 0, 0);

    tg_tensor *p = tu_in(ctx, dt, 0, NULL, "p", VALS(3));
    tg_tensor *c = tg_const(ctx, dt, 0, NULL, "c");
    tg_fill(c, 1);
    y = tg_mse_loss(ctx, p, c, TG_REDUCTION_NONE);
    g = tu_fwd(ctx, y);
    ck_assert_int_eq(tg_tensor_rank(y), 0);
    EXPECT_DATA(y, 0, 4);
    ck_assert_int_eq(tg_graph_backward(g, y, NULL), TG_OK);
    EXPECT_GRAD(p, 0, 4);
    ck_assert_ptr_null(tg_tensor_grad(c));

    /* 100000 terms of 0.1^2 in f32: a float running sum would drift by ~1e-3 relative; the
     * double accumulation gives 0.01 * (f32 0.1 / 0.1)^2 to f32 precision */
    int64_t n = 100000;
    tg_tensor *big = tg_input(ctx, dt, TG_DIMS(n), "big");
    tg_tensor *zero = tg_const(ctx, dt, TG_DIMS(n), "zero");
    tg_fill(big, 0.1);
    y = tg_mse_loss(ctx, big, zero, TG_REDUCTION_MEAN);
    tu_fwd(ctx, y);
    double v = dt == TG_F32 ? (double)0.1f * (double)0.1f : 0.1 * 0.1;
    ck_assert_msg(fabs(tg_get(y, 0) - v) <= 1e-7 * v, "mean %.17g, want %.17g", tg_get(y, 0), v);
    tu_ctx_free(ctx);
}
END_TEST

/* ---- errors --------------------------------------------------------------------------------- */
START_TEST(test_err_broadcast)
{
    tg_ctx *ctx = tu_ctx_new();
    tg_tensor *a = tg_input(ctx, TG_F64, TG_DIMS(2, 3), "a");
    tg_tensor *b = tg_input(ctx, TG_F64, TG_DIMS(4), "b");
    tg_tensor *d = tg_input(ctx, TG_F64, TG_DIMS(2, 3, 1), "d");
    tg_tensor *(*fns[2])(tg_ctx *, tg_tensor *, tg_tensor *) = {tg_sub, tg_div};
    const char *names[2] = {"tg_sub", "tg_div"};
    for (int f = 0; f < 2; f++) {
        ck_assert_ptr_null(fns[f](ctx, a, b));
        tu_assert_error(ctx, TG_ERR_SHAPE, names[f]);
        tu_assert_error(ctx, TG_ERR_SHAPE, "shapes do not broadcast: a is (2, 3), b is (4)");
        ck_assert_ptr_null(strchr(tg_ctx_message(ctx), '\n'));
        tg_ctx_clear_error(ctx);
        ck_assert_ptr_null(fns[f](ctx, a, d));
        tu_assert_error(ctx, TG_ERR_SHAPE, "(2, 3, 1)");
        tg_ctx_clear_error(ctx);
    }
    tu_ctx_free(ctx);
}
END_TEST

/* dtype mismatch and operands of another context, for every builder of this suite */
START_TEST(test_err_dtype_context)
{
    tg_ctx *ctx = tu_ctx_new(), *other = tu_ctx_new();
    tg_tensor *a = tg_input(ctx, TG_F32, TG_DIMS(2, 3), "a");
    tg_tensor *b = tg_input(ctx, TG_F64, TG_DIMS(2, 3), "b");
    tg_tensor *o = tg_input(other, TG_F32, TG_DIMS(2, 3), "o");
    tg_tensor *(*bin[2])(tg_ctx *, tg_tensor *, tg_tensor *) = {tg_sub, tg_div};
    const char *bnames[2] = {"tg_sub", "tg_div"};
    for (int f = 0; f < 2; f++) {
        ck_assert_ptr_null(bin[f](ctx, a, b));
        tu_assert_error(ctx, TG_ERR_DTYPE, bnames[f]);
        tu_assert_error(ctx, TG_ERR_DTYPE, "dtypes differ: 'a' is f32, 'b' is f64");
        tg_ctx_clear_error(ctx);
        ck_assert_ptr_null(bin[f](ctx, a, o));
        tu_assert_error(ctx, TG_ERR_ARG, "another context");
        tg_ctx_clear_error(ctx);
    }
    for (int r = 0; r < 3; r++) {
        ck_assert_ptr_null(tg_mse_loss(ctx, b, a, (tg_reduction)r));
        tu_assert_error(ctx, TG_ERR_DTYPE, "tg_mse_loss: dtypes differ");
        tg_ctx_clear_error(ctx);
    }
    ck_assert_ptr_null(tg_mse_loss(ctx, o, a, TG_REDUCTION_MEAN));
    tu_assert_error(ctx, TG_ERR_ARG, "tg_mse_loss");
    tg_ctx_clear_error(ctx);
    unary_fn un[8] = {tg_neg, tg_exp, tg_log, tg_sqrt, tg_tanh, tg_sigmoid, tg_silu, tg_gelu_tanh};
    const char *unames[8] = {"tg_neg:", "tg_exp:", "tg_log:", "tg_sqrt:", "tg_tanh:",
                             "tg_sigmoid:", "tg_silu:", "tg_gelu_tanh:"};
    for (int f = 0; f < 8; f++) {
        ck_assert_ptr_null(un[f](ctx, o));
        tu_assert_error(ctx, TG_ERR_ARG, unames[f]);
        tu_assert_error(ctx, TG_ERR_ARG, "another context");
        tg_ctx_clear_error(ctx);
    }
    ck_assert_int_eq(tg_ctx_status(other), TG_OK);
    tu_ctx_free(other);
    tu_ctx_free(ctx);
}
END_TEST

START_TEST(test_err_mse_loss)
{
    tg_ctx *ctx = tu_ctx_new();
    tg_tensor *a = tg_input(ctx, TG_F32, TG_DIMS(2, 3), "a");
    tg_tensor *b = tg_input(ctx, TG_F32, TG_DIMS(3), "b");
    tg_tensor *c = tg_input(ctx, TG_F32, TG_DIMS(3, 2), "c");
    ck_assert_ptr_null(tg_mse_loss(ctx, a, b, TG_REDUCTION_MEAN));
    tu_assert_error(ctx, TG_ERR_SHAPE,
                    "tg_mse_loss: input is (2, 3) but target is (3); shapes must match");
    tg_ctx_clear_error(ctx);
    ck_assert_ptr_null(tg_mse_loss(ctx, a, c, TG_REDUCTION_SUM)); /* same numel, other shape */
    tu_assert_error(ctx, TG_ERR_SHAPE, "target is (3, 2)");
    tg_ctx_clear_error(ctx);
    ck_assert_ptr_null(tg_mse_loss(ctx, a, a, (tg_reduction)3));
    tu_assert_error(ctx, TG_ERR_ARG, "tg_mse_loss: unknown reduction 3");
    tg_ctx_clear_error(ctx);
    ck_assert_ptr_null(tg_mse_loss(ctx, a, a, (tg_reduction)-1));
    tu_assert_error(ctx, TG_ERR_ARG, "unknown reduction -1");
    tg_ctx_clear_error(ctx);
    ck_assert_ptr_nonnull(tg_mse_loss(ctx, a, a, TG_REDUCTION_NONE));
    ck_assert_int_eq(tg_ctx_status(ctx), TG_OK);
    tu_ctx_free(ctx);
}
END_TEST

/* NULL in -> NULL out with nothing recorded; the first error sticks through chains; no graph is
 * built over a failed builder. */
START_TEST(test_err_null_first_sticks)
{
    tg_ctx *ctx = tu_ctx_new();
    tg_tensor *x = tg_input(ctx, TG_F32, TG_DIMS(2, 3), "x");
    unary_fn un[8] = {tg_neg, tg_exp, tg_log, tg_sqrt, tg_tanh, tg_sigmoid, tg_silu, tg_gelu_tanh};
    for (int f = 0; f < 8; f++)
        ck_assert_ptr_null(un[f](ctx, NULL));
    ck_assert_ptr_null(tg_sub(ctx, NULL, x));
    ck_assert_ptr_null(tg_div(ctx, x, NULL));
    ck_assert_ptr_null(tg_mse_loss(ctx, NULL, x, TG_REDUCTION_MEAN));
    ck_assert_ptr_null(tg_mse_loss(ctx, x, NULL, (tg_reduction)99)); /* NULL wins silently */
    ck_assert_int_eq(tg_ctx_status(ctx), TG_OK);
    ck_assert_ptr_null(tg_neg(NULL, x));
    tg_tensor *good = tg_exp(ctx, x);
    tg_tensor *v = tg_input(ctx, TG_F32, TG_DIMS(5), "v");
    tg_tensor *bad = tg_div(ctx, x, v);
    ck_assert_ptr_null(bad);
    char first[512];
    snprintf(first, sizeof first, "%s", tg_ctx_message(ctx));
    ck_assert_ptr_null(tg_sigmoid(ctx, tg_log(ctx, tg_sub(ctx, bad, x))));
    ck_assert_ptr_null(tg_sub(ctx, x, v)); /* a new error does not replace the first */
    ck_assert_ptr_null(tg_mse_loss(ctx, x, v, TG_REDUCTION_MEAN));
    ck_assert_ptr_null(tg_tanh(ctx, x));   /* nor does a valid builder run while it is pending */
    tu_assert_error(ctx, TG_ERR_SHAPE, "tg_div");
    ck_assert_str_eq(tg_ctx_message(ctx), first);
    tu_assert_graph_refused(ctx, good, first);
    tu_ctx_free(ctx);
}
END_TEST

/* ---- gradcheck ------------------------------------------------------------------------------ */
static tg_tensor *ranged(tg_ctx *ctx, tg_dtype dt, int rank, const int64_t *shape,
                         const char *name, double lo, double hi)
{
    tg_tensor *t = tu_gc_input(ctx, dt, rank, shape, name);
    tg_fill_uniform(t, lo, hi);
    return t;
}
#define GR(name, lo, hi, ...) ranged(ctx, dt, TG_DIMS(__VA_ARGS__), name, lo, hi)

/* |values| >= m keeping their sign */
static tg_tensor *away(tg_tensor *t, double m)
{
    for (int64_t i = 0; t && i < tg_tensor_numel(t); i++) {
        double v = tg_get(t, i);
        tg_set(t, i, v >= 0 ? v + m : v - m);
    }
    return t;
}

static tg_tensor *gc_case(tg_ctx *ctx, tg_dtype dt, int which)
{
    switch (which) {
    /* sub */
    case 0: return tg_sub(ctx, GIN("a", 2, 1, 3), GIN("b", 4, 1));
    case 1: return tg_sub(ctx, tu_gc_input(ctx, dt, 0, NULL, "s"), GIN("x", 3, 2));
    case 2: return tg_sub(ctx, GIN("x", 2, 3, 4), GPARAM("bias", 4));
    /* div */
    case 3: return tg_div(ctx, GIN("a", 2, 1, 3), away(GIN("b", 4, 1), 0.5));
    case 4: return tg_div(ctx, GIN("x", 3, 2), away(tu_gc_input(ctx, dt, 0, NULL, "s"), 0.5));
    case 5: return tg_div(ctx, GIN("a", 1, 5), away(GIN("b", 5, 1), 0.5));
    /* unary: 3 shapes each */
    case 6: return tg_neg(ctx, GIN("x", 1, 4, 1));
    case 7: return tg_neg(ctx, GIN("x", 2, 1, 2, 1, 3, 1));
    case 8: return tg_neg(ctx, tu_gc_input(ctx, dt, 0, NULL, "s"));
    case 9: return tg_exp(ctx, GR("x", -3, 3, 4, 1, 3));
    case 10: return tg_exp(ctx, GIN("x", 1, 1));
    case 11: return tg_exp(ctx, GIN("x", 2, 5));
    case 12: return tg_log(ctx, GR("x", 0.3, 5, 4, 1, 3));
    case 13: return tg_log(ctx, GR("x", 0.5, 1.5, 1, 1));
    case 14: return tg_log(ctx, GR("x", 1, 100, 2, 5));
    case 15: return tg_sqrt(ctx, GR("x", 0.3, 5, 4, 1, 3));
    case 16: return tg_sqrt(ctx, GR("x", 0.5, 1.5, 1, 1));
    case 17: return tg_sqrt(ctx, GR("x", 1, 100, 2, 5));
    case 18: return tg_tanh(ctx, GR("x", -3, 3, 4, 1, 3));
    case 19: return tg_tanh(ctx, GIN("x", 1, 1));
    case 20: return tg_tanh(ctx, GIN("x", 2, 5));
    case 21: return tg_sigmoid(ctx, GR("x", -6, 6, 4, 1, 3));
    case 22: return tg_sigmoid(ctx, GIN("x", 1, 1));
    case 23: return tg_sigmoid(ctx, GIN("x", 2, 5));
    case 24: return tg_silu(ctx, GR("x", -6, 6, 4, 1, 3));
    case 25: return tg_silu(ctx, GIN("x", 1, 1));
    case 26: return tg_silu(ctx, GIN("x", 2, 5));
    case 27: return tg_gelu_tanh(ctx, GR("x", -5, 5, 4, 1, 3));
    case 28: return tg_gelu_tanh(ctx, GIN("x", 1, 1));
    case 29: return tg_gelu_tanh(ctx, GIN("x", 2, 5));
    /* mse_loss */
    case 30: return tg_mse_loss(ctx, GIN("x", 2, 5), GIN("t", 2, 5), TG_REDUCTION_MEAN);
    case 31: return tg_mse_loss(ctx, GIN("x", 3, 1, 2), GIN("t", 3, 1, 2), TG_REDUCTION_SUM);
    case 32: return tg_mse_loss(ctx, GIN("x", 1), GIN("t", 1), TG_REDUCTION_NONE);
    case 33: return tg_mse_loss(ctx, GIN("x", 2, 3), GIN("t", 2, 3), TG_REDUCTION_NONE);
    default: { /* a composed function: sqrt(exp(x) / sigmoid(x - y)) - tanh(y) */
        tg_tensor *x = GIN("x", 2, 3), *y = GIN("y", 2, 3);
        return tg_sub(ctx, tg_sqrt(ctx, tg_div(ctx, tg_exp(ctx, x),
                                               tg_sigmoid(ctx, tg_sub(ctx, x, y)))),
                      tg_tanh(ctx, y));
    }
    }
}
#define N_GC_CASES 35

START_TEST(test_gradcheck_f64)
{
    tu_gradcheck_case(gc_case, TG_F64, _i, 700 + (uint64_t)_i);
}
END_TEST

START_TEST(test_gradcheck_f32)
{
    static const int cases[] = {0, 3, 6, 9, 12, 15, 18, 21, 24, 27, 30, 34};
    tu_gradcheck_case(gc_case, TG_F32, cases[_i], 800 + (uint64_t)_i);
}
END_TEST

/* ---- thread invariance ---------------------------------------------------------------------- */
#define BIG(n) tu_big(n, 64)
static tg_tensor *ti_sub_bias(tg_ctx *ctx, tg_dtype dt)
{
    return tg_sub(ctx, GIN("x", BIG(256), 256), GIN("b", 256));
}
static tg_tensor *ti_sub_same(tg_ctx *ctx, tg_dtype dt)
{
    return tg_sub(ctx, GIN("a", BIG(300), 200), GIN("b", BIG(300), 200));
}
static tg_tensor *ti_sub_col(tg_ctx *ctx, tg_dtype dt)
{
    return tg_sub(ctx, GIN("a", BIG(256), 1), GIN("b", BIG(256), 256)); /* a broadcast */
}
static tg_tensor *ti_div_bcast(tg_ctx *ctx, tg_dtype dt)
{
    return tg_div(ctx, GIN("x", BIG(256), 256), away(GIN("c", BIG(256), 1), 0.5));
}
static tg_tensor *ti_div_same(tg_ctx *ctx, tg_dtype dt)
{
    return tg_div(ctx, GIN("a", BIG(300), 200), away(GIN("b", BIG(300), 200), 0.5));
}
static tg_tensor *ti_div_row(tg_ctx *ctx, tg_dtype dt)
{
    return tg_div(ctx, GIN("a", 1, 256), away(GIN("b", BIG(256), 256), 0.5)); /* a broadcast */
}
static tg_tensor *ti_unary(tg_ctx *ctx, tg_dtype dt)
{
    /* every unary op in one chain, 60000 elements */
    tg_tensor *x = GIN("x", BIG(300), 200);
    tg_tensor *h = tg_gelu_tanh(ctx, tg_silu(ctx, tg_neg(ctx, tg_tanh(ctx, x))));
    h = tg_sqrt(ctx, tg_exp(ctx, tg_sigmoid(ctx, h)));
    return tg_log(ctx, h);
}
static tg_tensor *ti_mse_mean(tg_ctx *ctx, tg_dtype dt)
{
    return tg_mse_loss(ctx, GIN("x", BIG(300), 200), GIN("t", BIG(300), 200), TG_REDUCTION_MEAN);
}
static tg_tensor *ti_mse_none(tg_ctx *ctx, tg_dtype dt)
{
    return tg_mse_loss(ctx, GIN("x", BIG(300), 200), GIN("t", BIG(300), 200), TG_REDUCTION_NONE);
}
static const tu_build_fn k_ti_builds[] = {ti_sub_bias, ti_sub_same, ti_sub_col, ti_div_bcast,
                                          ti_div_same, ti_div_row,  ti_unary,   ti_mse_mean,
                                          ti_mse_none};
#define N_TI (int)(sizeof k_ti_builds / sizeof k_ti_builds[0])

/* ---- edge cases ----------------------------------------------------------------------------- */
/* Two backwards without zero_grad double every leaf gradient exactly. */
START_TEST(test_backward_twice)
{
    tg_dtype dt = tu_dtypes[_i];
    tg_ctx *ctx = tu_ctx_new();
    tg_ctx_seed(ctx, 31);
    tg_tensor *x = tu_input(ctx, dt, TG_DIMS(3, 4), "x", -2, 2);
    tg_tensor *b = tu_input(ctx, dt, TG_DIMS(4), "b", 0.5, 1.5);
    tg_tensor *c = tu_input(ctx, dt, TG_DIMS(3, 1), "c", -1, 1);
    tg_tensor *y = tg_sub(ctx, tg_gelu_tanh(ctx, tg_div(ctx, tg_exp(ctx, x), b)), c);
    tg_graph *g = tu_fwd(ctx, y);
    double dy[12];
    for (int i = 0; i < 12; i++)
        dy[i] = 0.3 + sin(1.1 * i);
    tg_tensor *leaves[3] = {x, b, c};
    tu_assert_backward_twice(ctx, g, y, dy, leaves, 3);
    tu_ctx_free(ctx);
}
END_TEST

/* Re-running after new data gives new results without rebuilding (no value is cached at
 * build time). */
START_TEST(test_rerun_new_data)
{
    tg_dtype dt = tu_dtypes[_i];
    tg_ctx *ctx = tu_ctx_new();
    tg_tensor *x = tu_in(ctx, dt, TG_DIMS(3), "x", VALS(1, 4, 9));
    tg_tensor *t = tu_in(ctx, dt, TG_DIMS(3), "t", VALS(0, 0, 0));
    tg_tensor *y = tg_mse_loss(ctx, tg_sqrt(ctx, x), t, TG_REDUCTION_SUM); /* sum x */
    tg_graph *g = tu_fwd(ctx, y);
    EXPECT_DATA(y, 0, 14);
    tu_set(x, VALS(16, 25, 0));
    tu_set(t, VALS(1, 1, 1));
    ck_assert_int_eq(tg_graph_forward(g), TG_OK);
    EXPECT_DATA(y, 0, 9 + 16 + 1);
    tu_ctx_free(ctx);
}
END_TEST

static Suite *math_suite(void)
{
    Suite *s = suite_create("ops_math");
    TCase *tc = tu_tcase(s, "forward", 0);
    tcase_add_loop_test(tc, test_sub, 0, 2);
    tcase_add_loop_test(tc, test_sub_self_outer_rank0, 0, 2);
    tcase_add_loop_test(tc, test_div, 0, 2);
    tcase_add_loop_test(tc, test_div_domain, 0, 2);
    tcase_add_loop_test(tc, test_neg, 0, 2);
    tcase_add_loop_test(tc, test_exp, 0, 2);
    tcase_add_loop_test(tc, test_log, 0, 2);
    tcase_add_loop_test(tc, test_sqrt, 0, 2);
    tcase_add_loop_test(tc, test_log_sqrt_domain, 0, 2);
    tcase_add_loop_test(tc, test_tanh, 0, 2);
    tcase_add_loop_test(tc, test_sigmoid, 0, 2);
    tcase_add_loop_test(tc, test_silu, 0, 2);
    tcase_add_loop_test(tc, test_gelu_tanh, 0, 2);
    tcase_add_test(tc, test_unary_ieee_f64);
    tcase_add_test(tc, test_unary_saturation_f32);
    tcase_add_loop_test(tc, test_unary_rank0_rank6, 0, 2);
    tcase_add_loop_test(tc, test_mse_loss, 0, 2);
    tcase_add_loop_test(tc, test_mse_loss_edges, 0, 2);

    tc = tu_tcase(s, "errors", 0);
    tcase_add_test(tc, test_err_broadcast);
    tcase_add_test(tc, test_err_dtype_context);
    tcase_add_test(tc, test_err_mse_loss);
    tcase_add_test(tc, test_err_null_first_sticks);

    tc = tu_tcase(s, "gradcheck", 60);
    tcase_add_loop_test(tc, test_gradcheck_f64, 0, N_GC_CASES);
    tcase_add_loop_test(tc, test_gradcheck_f32, 0, 12);

    tu_add_thread_tcase(s, k_ti_builds, N_TI);

    tc = tu_tcase(s, "edge", 60);
    tcase_add_loop_test(tc, test_backward_twice, 0, 2);
    tcase_add_loop_test(tc, test_rerun_new_data, 0, 2);
    return s;
}

int main(void) { return tu_run(math_suite()); }
