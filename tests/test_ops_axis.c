/*
 * test_ops_axis.c - ops along an axis: tg_log_softmax (last axis), tg_max (one axis, keepdim,
 * gradient to the first maximum) and tg_concat. Values and gradients by hand or from PyTorch
 * (f32 and f64), -inf / NaN / tie behaviour, every shape/axis/argument error, f64 (and some f32)
 * gradcheck on several shapes per op, and thread invariance (1, 2, 3 threads bitwise identical).
 *
 * PyTorch references: /usr/bin/python3 with torch 1.13 (float64), e.g.
 *   y = F.log_softmax(x, -1); g, = torch.autograd.grad(y, x, gy)
 *   v, i = x.max(1); g, = torch.autograd.grad(v.sum(), x)
 * printed with float.__repr__. f32 results are compared at a relative tolerance of 2e-6.
 */
#include "testutil.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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

/* ---- log_softmax ---------------------------------------------------------------------------- */
/* PyTorch: x = [[1,2,3,4],[-1,0,1000,1]], dy = [[1,0,-1,2],[0.5,0.5,0.5,0.5]] */
START_TEST(test_log_softmax)
{
    tg_dtype dt = tu_dtypes[_i];
    double tol = tol_of(dt);
    tg_ctx *ctx = tu_ctx_new();
    tg_tensor *x = tu_in(ctx, dt, TG_DIMS(2, 4), "x", VALS(1, 2, 3, 4, -1, 0, 1000, 1));
    tg_tensor *y = tg_log_softmax(ctx, x);
    tg_graph *g = tu_fwd(ctx, y);
    ck_assert_str_eq(tg_tensor_op_name(y), "log_softmax");
    EXPECT_SHAPE(y, 2, 4);
    EXPECT_DATA(y, tol, -3.4401896985611953, -2.4401896985611953, -1.4401896985611953,
                -0.44018969856119533, -1001.0, -1000.0, 0.0, -999.0);
    tu_bwd(ctx, g, y, VALS(1, 0, -1, 2, 0.5, 0.5, 0.5, 0.5));
    EXPECT_GRAD(x, tol, 0.93588279343983, -0.17428863748406515, -1.4737656361798204,
                0.7121714802240553, 0.5, 0.5, -1.5, 0.5);

    /* by hand: a constant row gives -log N; a length-1 row gives 0 with gradient 0 */
    tg_tensor *c = tu_in(ctx, dt, TG_DIMS(2, 1), "c", VALS(7, -3));
    tg_tensor *z = tu_in(ctx, dt, TG_DIMS(4), "z", VALS(5, 5, 5, 5));
    tg_tensor *yc = tg_log_softmax(ctx, c), *yz = tg_log_softmax(ctx, z);
    tg_tensor *outs[2] = {yc, yz};
    g = tg_graph_new(ctx, outs, 2);
    ck_assert_int_eq(tg_graph_forward(g), TG_OK);
    EXPECT_DATA(yc, 0, 0, 0);
    EXPECT_DATA(yz, tol, -log(4), -log(4), -log(4), -log(4));
    tu_bwd(ctx, g, yc, VALS(3, 4));
    EXPECT_GRAD(c, 0, 0, 0);
    tu_ctx_free(ctx);
}
END_TEST

/* -inf and NaN. PyTorch on [[-inf, 0, 1], [-inf, -inf, -inf], [inf, 0, 1]], dy = 1:
 *   y  = [-inf, -1.3132616875182228, -0.31326168751822286, nan x 3, nan x 3]
 *   dx = [1, 0.1931757358900147, -1.1931757358900148, nan x 3, nan x 3]
 * tgrad differs on the fully -inf row only: -inf outputs and a zero gradient (as tg_softmax's
 * zeros). A NaN entry makes its row NaN. */
START_TEST(test_log_softmax_inf_nan)
{
    tg_dtype dt = tu_dtypes[_i];
    double tol = tol_of(dt);
    tg_ctx *ctx = tu_ctx_new();
    tg_tensor *x = tu_in(ctx, dt, TG_DIMS(4, 3), "x",
                         VALS(-INFINITY, 0, 1, -INFINITY, -INFINITY, -INFINITY, INFINITY, 0, 1,
                              2, NAN, 3));
    tg_tensor *y = tg_log_softmax(ctx, x);
    tg_graph *g = tu_fwd(ctx, y);
    ck_assert_int_eq(tg_ctx_status(ctx), TG_OK);
    EXPECT_IEEE(y, false, tol, -INFINITY, -1.3132616875182228, -0.31326168751822286,
                -INFINITY, -INFINITY, -INFINITY, NAN, NAN, NAN, NAN, NAN, NAN);
    tu_bwd(ctx, g, y, NULL);
    EXPECT_IEEE(x, true, tol, 1, 0.1931757358900147, -1.1931757358900148, 0, 0, 0, NAN, NAN,
                NAN, NAN, NAN, NAN);
    tu_ctx_free(ctx);
}
END_TEST

/* exp(log_softmax(x)) equals softmax(x), and logits of +-1e4 stay finite. */
START_TEST(test_log_softmax_vs_softmax)
{
    tg_dtype dt = tu_dtypes[_i];
    tg_ctx *ctx = tu_ctx_new();
    tg_ctx_seed(ctx, 5);
    tg_tensor *x = tu_input(ctx, dt, TG_DIMS(3, 2, 9), "x", -4, 4);
    for (int64_t i = 0; i < 9; i++) /* row 0 around +-1e4 */
        tg_set(x, i, tg_get(x, i) + (i % 2 ? 1e4 : -1e4));
    tg_tensor *e = tg_exp(ctx, tg_log_softmax(ctx, x)), *s = tg_softmax(ctx, x);
    tg_tensor *outs[2] = {e, s};
    tg_graph *g = tg_graph_new(ctx, outs, 2);
    ck_assert_int_eq(tg_graph_forward(g), TG_OK);
    for (int64_t i = 0; i < tg_tensor_numel(s); i++) {
        ck_assert(isfinite(tg_get(e, i)));
        ck_assert_msg(fabs(tg_get(e, i) - tg_get(s, i)) <= (dt == TG_F32 ? 1e-6 : 1e-14),
                      "[%lld] %.17g vs %.17g", (long long)i, tg_get(e, i), tg_get(s, i));
    }
    tu_ctx_free(ctx);
}
END_TEST

/* ---- max ------------------------------------------------------------------------------------ */
/* x (2, 3) = [[1, 5, -2], [4, 0, 6]]:
 *   axis 0 -> [4, 5, 6]; d(sum)/dx = [[0,1,0],[1,0,1]]
 *   axis 1 keepdim -> [[5], [6]] (2, 1); dy = [2, 3] -> dx = [[0,2,0],[0,0,3]]
 *   axis -2 == axis 0. x (4) -> () = 7 for [3, 7, -1, 2]. */
START_TEST(test_max)
{
    tg_dtype dt = tu_dtypes[_i];
    tg_ctx *ctx = tu_ctx_new();
    tg_tensor *x = tu_in(ctx, dt, TG_DIMS(2, 3), "x", VALS(1, 5, -2, 4, 0, 6));
    tg_tensor *y = tg_max(ctx, x, 0, false);
    tg_graph *g = tu_fwd(ctx, y);
    ck_assert_str_eq(tg_tensor_op_name(y), "max");
    EXPECT_SHAPE(y, 3);
    EXPECT_DATA(y, 0, 4, 5, 6);
    tu_bwd(ctx, g, y, NULL);
    EXPECT_GRAD(x, 0, 0, 1, 0, 1, 0, 1);

    tg_tensor *x2 = tu_in(ctx, dt, TG_DIMS(2, 3), "x2", VALS(1, 5, -2, 4, 0, 6));
    y = tg_max(ctx, x2, 1, true);
    g = tu_fwd(ctx, y);
    EXPECT_SHAPE(y, 2, 1);
    EXPECT_DATA(y, 0, 5, 6);
    tu_bwd(ctx, g, y, VALS(2, 3));
    EXPECT_GRAD(x2, 0, 0, 2, 0, 0, 0, 3);

    y = tg_max(ctx, x2, -2, true);
    g = tu_fwd(ctx, y);
    EXPECT_SHAPE(y, 1, 3);
    EXPECT_DATA(y, 0, 4, 5, 6);

    tg_tensor *v = tu_in(ctx, dt, TG_DIMS(4), "v", VALS(3, 7, -1, 2));
    y = tg_max(ctx, v, 0, false);
    g = tu_fwd(ctx, y);
    ck_assert_int_eq(tg_tensor_rank(y), 0);
    EXPECT_DATA(y, 0, 7);
    ck_assert_int_eq(tg_graph_backward(g, y, NULL), TG_OK);
    EXPECT_GRAD(v, 0, 0, 1, 0, 0);
    tu_ctx_free(ctx);
}
END_TEST

/* Ties, NaN and -inf. PyTorch: x = [[1,3,3,2],[nan,1,nan,5]].max(1) = ([3, nan], [1, 0]) and
 * the gradient of the values' sum is [[0,1,0,0],[1,0,0,0]] (the first maximum, the first NaN);
 * [[-0., 0.], [0., -0.]].max(1) = ([-0., 0.], [0, 0]) (+0 and -0 tie: the first wins).
 * By hand: an all -inf slice gives -inf with the gradient at index 0; a 3-D middle axis with a
 * tie: x (2, 3, 2) axis 1. */
START_TEST(test_max_ties_nan)
{
    tg_dtype dt = tu_dtypes[_i];
    tg_ctx *ctx = tu_ctx_new();
    tg_tensor *x = tu_in(ctx, dt, TG_DIMS(4, 4), "x",
                         VALS(1, 3, 3, 2, NAN, 1, NAN, 5, 2, 1, NAN, 9,
                              -INFINITY, -INFINITY, -INFINITY, -INFINITY));
    tg_tensor *y = tg_max(ctx, x, 1, false);
    tg_graph *g = tu_fwd(ctx, y);
    EXPECT_IEEE(y, false, 0, 3, NAN, NAN, -INFINITY);
    tu_bwd(ctx, g, y, VALS(1, 2, 3, 4));
    EXPECT_IEEE(x, true, 0, 0, 1, 0, 0, 2, 0, 0, 0, 0, 0, 3, 0, 4, 0, 0, 0);

    tg_tensor *z = tu_in(ctx, dt, TG_DIMS(2, 2), "z", VALS(-0.0, 0.0, 0.0, -0.0));
    y = tg_max(ctx, z, 1, false);
    g = tu_fwd(ctx, y);
    EXPECT_IEEE(y, false, 0, -0.0, 0.0);
    tu_bwd(ctx, g, y, NULL);
    EXPECT_IEEE(z, true, 0, 1, 0, 1, 0);

    /* x[b, a, i]: b=0: columns [1, 4, 4] and [2, 2, 0]; b=1: [-1, -1, -1] and [0, 8, 8] */
    tg_tensor *w = tu_in(ctx, dt, TG_DIMS(2, 3, 2), "w",
                         VALS(1, 2, 4, 2, 4, 0, -1, 0, -1, 8, -1, 8));
    y = tg_max(ctx, w, 1, true);
    g = tu_fwd(ctx, y);
    EXPECT_SHAPE(y, 2, 1, 2);
    EXPECT_DATA(y, 0, 4, 2, -1, 8);
    tu_bwd(ctx, g, y, VALS(1, 2, 3, 4));
    EXPECT_GRAD(w, 0, 0, 2, 1, 0, 0, 0, 3, 0, 0, 4, 0, 0);
    tu_ctx_free(ctx);
}
END_TEST

/* Backward reads the index saved by forward, not x: changing x between forward and backward
 * does not move the gradient. */
START_TEST(test_max_saved_index)
{
    tg_dtype dt = tu_dtypes[_i];
    tg_ctx *ctx = tu_ctx_new();
    tg_tensor *x = tu_in(ctx, dt, TG_DIMS(3), "x", VALS(1, 9, 2));
    tg_tensor *y = tg_max(ctx, x, 0, false);
    tg_graph *g = tu_fwd(ctx, y);
    tu_set(x, VALS(9, 1, 2));
    ck_assert_int_eq(tg_graph_backward(g, y, NULL), TG_OK);
    EXPECT_GRAD(x, 0, 0, 1, 0);
    tu_ctx_free(ctx);
}
END_TEST

/* ---- concat --------------------------------------------------------------------------------- */
/* a (2,2) [[1,2],[3,4]], b (2,1) [[5],[6]] along axis 1 (and -1) -> [[1,2,5],[3,4,6]];
 *   dy = [[1,2,3],[4,5,6]]: da = [[1,2],[4,5]], db = [[3],[6]]
 * a, c (1,2) [[7,8]] along axis 0 -> [[1,2],[3,4],[7,8]]; dy = 1..6: da = 1..4, dc = [5,6] */
START_TEST(test_concat)
{
    tg_dtype dt = tu_dtypes[_i];
    tg_ctx *ctx = tu_ctx_new();
    tg_tensor *a = tu_in(ctx, dt, TG_DIMS(2, 2), "a", VALS(1, 2, 3, 4));
    tg_tensor *b = tu_in(ctx, dt, TG_DIMS(2, 1), "b", VALS(5, 6));
    tg_tensor *xs[2] = {a, b};
    for (int ax = 1; ax >= -1; ax -= 2) {
        tg_tensor *y = tg_concat(ctx, xs, 2, ax);
        tg_graph *g = tu_fwd(ctx, y);
        ck_assert_str_eq(tg_tensor_op_name(y), "concat");
        EXPECT_SHAPE(y, 2, 3);
        EXPECT_DATA(y, 0, 1, 2, 5, 3, 4, 6);
        tg_graph_zero_grad(g);
        tu_bwd(ctx, g, y, VALS(1, 2, 3, 4, 5, 6));
        EXPECT_GRAD(a, 0, 1, 2, 4, 5);
        EXPECT_GRAD(b, 0, 3, 6);
    }
    tg_tensor *a2 = tu_in(ctx, dt, TG_DIMS(2, 2), "a2", VALS(1, 2, 3, 4));
    tg_tensor *c = tu_in(ctx, dt, TG_DIMS(1, 2), "c", VALS(7, 8));
    tg_tensor *ys[2] = {a2, c};
    tg_tensor *y = tg_concat(ctx, ys, 2, 0);
    tg_graph *g = tu_fwd(ctx, y);
    EXPECT_SHAPE(y, 3, 2);
    EXPECT_DATA(y, 0, 1, 2, 3, 4, 7, 8);
    tu_bwd(ctx, g, y, VALS(1, 2, 3, 4, 5, 6));
    EXPECT_GRAD(a2, 0, 1, 2, 3, 4);
    EXPECT_GRAD(c, 0, 5, 6);
    tu_ctx_free(ctx);
}
END_TEST

/* 3-D middle axis with three parts; the same tensor twice (its gradient is the sum of both
 * slices); one tensor alone (a copy); eight tensors (TG_CONCAT_MAX); a constant part gets no
 * gradient. */
START_TEST(test_concat_more)
{
    tg_dtype dt = tu_dtypes[_i];
    tg_ctx *ctx = tu_ctx_new();
    /* p (2,1,2) [[[1,2]],[[3,4]]], q (2,2,2) 10..17, r (2,1,2) const [[[-1,-2]],[[-3,-4]]] */
    tg_tensor *p = tu_in(ctx, dt, TG_DIMS(2, 1, 2), "p", VALS(1, 2, 3, 4));
    tg_tensor *q = tu_in(ctx, dt, TG_DIMS(2, 2, 2), "q", VALS(10, 11, 12, 13, 14, 15, 16, 17));
    tg_tensor *r = tg_const(ctx, dt, TG_DIMS(2, 1, 2), "r");
    tu_set(r, VALS(-1, -2, -3, -4));
    tg_tensor *xs[3] = {p, q, r};
    tg_tensor *y = tg_concat(ctx, xs, 3, 1);
    tg_graph *g = tu_fwd(ctx, y);
    EXPECT_SHAPE(y, 2, 4, 2);
    EXPECT_DATA(y, 0, 1, 2, 10, 11, 12, 13, -1, -2, 3, 4, 14, 15, 16, 17, -3, -4);
    tu_bwd(ctx, g, y, VALS(1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16));
    EXPECT_GRAD(p, 0, 1, 2, 9, 10);
    EXPECT_GRAD(q, 0, 3, 4, 5, 6, 11, 12, 13, 14);
    ck_assert_ptr_null(tg_tensor_grad(r));

    tg_tensor *x = tu_in(ctx, dt, TG_DIMS(3), "x", VALS(1, 2, 3));
    tg_tensor *xx[2] = {x, x};
    y = tg_concat(ctx, xx, 2, 0);
    g = tu_fwd(ctx, y);
    EXPECT_DATA(y, 0, 1, 2, 3, 1, 2, 3);
    tu_bwd(ctx, g, y, VALS(1, 2, 3, 40, 50, 60));
    EXPECT_GRAD(x, 0, 41, 52, 63);

    tg_tensor *one = tu_in(ctx, dt, TG_DIMS(2, 2), "one", VALS(1, 2, 3, 4));
    y = tg_concat(ctx, &one, 1, -1);
    g = tu_fwd(ctx, y);
    EXPECT_SHAPE(y, 2, 2);
    EXPECT_DATA(y, 0, 1, 2, 3, 4);
    tu_bwd(ctx, g, y, VALS(5, 6, 7, 8));
    EXPECT_GRAD(one, 0, 5, 6, 7, 8);

    tg_tensor *e[TG_CONCAT_MAX];
    for (int k = 0; k < TG_CONCAT_MAX; k++) {
        e[k] = tu_in(ctx, dt, TG_DIMS(1, 1 + k % 2), "e", NULL);
        tg_fill(e[k], k);
    }
    y = tg_concat(ctx, e, TG_CONCAT_MAX, 1); /* widths 1,2,1,2,... = 12 */
    g = tu_fwd(ctx, y);
    EXPECT_SHAPE(y, 1, 12);
    EXPECT_DATA(y, 0, 0, 1, 1, 2, 3, 3, 4, 5, 5, 6, 7, 7);
    tu_bwd(ctx, g, y, VALS(1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12));
    EXPECT_GRAD(e[0], 0, 1);
    EXPECT_GRAD(e[1], 0, 2, 3);
    EXPECT_GRAD(e[7], 0, 11, 12);
    tu_ctx_free(ctx);
}
END_TEST

/* ---- errors --------------------------------------------------------------------------------- */
START_TEST(test_err_log_softmax_max)
{
    tg_ctx *ctx = tu_ctx_new(), *other = tu_ctx_new();
    tg_tensor *s = tg_input(ctx, TG_F64, 0, NULL, "s");
    tg_tensor *x = tg_input(ctx, TG_F64, TG_DIMS(2, 3), "x");
    tg_tensor *o = tg_input(other, TG_F64, TG_DIMS(2, 3), "o");
    ck_assert_ptr_null(tg_log_softmax(ctx, s));
    tu_assert_error(ctx, TG_ERR_SHAPE,
                    "tg_log_softmax: x is a scalar; log_softmax needs rank >= 1");
    tg_ctx_clear_error(ctx);
    ck_assert_ptr_null(tg_log_softmax(ctx, o));
    tu_assert_error(ctx, TG_ERR_ARG, "tg_log_softmax: operand 0 ('o') belongs to another context");
    tg_ctx_clear_error(ctx);

    ck_assert_ptr_null(tg_max(ctx, x, 2, false));
    tu_assert_error(ctx, TG_ERR_AXIS, "tg_max: axis 2 out of range for x (2, 3) (rank 2)");
    tg_ctx_clear_error(ctx);
    ck_assert_ptr_null(tg_max(ctx, x, -3, true));
    tu_assert_error(ctx, TG_ERR_AXIS, "axis -3 out of range");
    tg_ctx_clear_error(ctx);
    ck_assert_ptr_null(tg_max(ctx, s, 0, false));
    tu_assert_error(ctx, TG_ERR_AXIS, "tg_max: axis 0 out of range for x () (rank 0)");
    tg_ctx_clear_error(ctx);
    ck_assert_ptr_null(tg_max(ctx, o, 0, false));
    tu_assert_error(ctx, TG_ERR_ARG, "tg_max");
    tg_ctx_clear_error(ctx);
    ck_assert_ptr_nonnull(tg_max(ctx, x, -1, false));
    ck_assert_ptr_nonnull(tg_log_softmax(ctx, x));
    ck_assert_int_eq(tg_ctx_status(ctx), TG_OK);
    ck_assert_int_eq(tg_ctx_status(other), TG_OK);
    tu_ctx_free(other);
    tu_ctx_free(ctx);
}
END_TEST

START_TEST(test_err_concat)
{
    tg_ctx *ctx = tu_ctx_new(), *other = tu_ctx_new();
    tg_tensor *a = tg_input(ctx, TG_F32, TG_DIMS(2, 3), "a");
    tg_tensor *b = tg_input(ctx, TG_F32, TG_DIMS(2, 3), "b");
    tg_tensor *c = tg_input(ctx, TG_F32, TG_DIMS(2, 4), "c");
    tg_tensor *d = tg_input(ctx, TG_F64, TG_DIMS(2, 3), "d");
    tg_tensor *r3 = tg_input(ctx, TG_F32, TG_DIMS(2, 3, 1), "r3");
    tg_tensor *s = tg_input(ctx, TG_F32, 0, NULL, "s");
    tg_tensor *o = tg_input(other, TG_F32, TG_DIMS(2, 3), "o");

    tg_tensor *abc[3] = {a, b, c};
    ck_assert_ptr_null(tg_concat(ctx, abc, 3, 0));
    tu_assert_error(ctx, TG_ERR_SHAPE, "tg_concat: tensors 0 and 2 differ on axis 1 (3 vs 4)");
    ck_assert_ptr_null(strchr(tg_ctx_message(ctx), '\n'));
    tg_ctx_clear_error(ctx);
    ck_assert_ptr_nonnull(tg_concat(ctx, abc, 3, 1)); /* the differing axis is the joined one */
    ck_assert_ptr_nonnull(tg_concat(ctx, abc, 3, -1));

    tg_tensor *ar[2] = {a, r3};
    ck_assert_ptr_null(tg_concat(ctx, ar, 2, 0));
    tu_assert_error(ctx, TG_ERR_SHAPE,
                    "tg_concat: tensors 0 and 1 differ in rank (2 vs 3): (2, 3) vs (2, 3, 1)");
    tg_ctx_clear_error(ctx);

    tg_tensor *as[2] = {a, s};
    ck_assert_ptr_null(tg_concat(ctx, as, 2, 0));
    tu_assert_error(ctx, TG_ERR_SHAPE, "tg_concat: tensor 1 is a scalar; concat needs rank >= 1");
    tg_ctx_clear_error(ctx);
    ck_assert_ptr_null(tg_concat(ctx, &s, 1, 0));
    tu_assert_error(ctx, TG_ERR_SHAPE, "tensor 0 is a scalar");
    tg_ctx_clear_error(ctx);

    tg_tensor *ab[2] = {a, b};
    ck_assert_ptr_null(tg_concat(ctx, ab, 2, 2));
    tu_assert_error(ctx, TG_ERR_AXIS,
                    "tg_concat: axis 2 out of range for tensor 0 (2, 3) (rank 2)");
    tg_ctx_clear_error(ctx);
    ck_assert_ptr_null(tg_concat(ctx, ab, 2, -3));
    tu_assert_error(ctx, TG_ERR_AXIS, "axis -3");
    tg_ctx_clear_error(ctx);

    tg_tensor *ad[2] = {a, d};
    ck_assert_ptr_null(tg_concat(ctx, ad, 2, 0));
    tu_assert_error(ctx, TG_ERR_DTYPE, "tg_concat: dtypes differ: 'a' is f32, 'd' is f64");
    tg_ctx_clear_error(ctx);
    tg_tensor *ao[2] = {a, o};
    ck_assert_ptr_null(tg_concat(ctx, ao, 2, 0));
    tu_assert_error(ctx, TG_ERR_ARG, "tg_concat: operand 1 ('o') belongs to another context");
    tg_ctx_clear_error(ctx);

    tg_tensor *many[TG_CONCAT_MAX + 1];
    for (int k = 0; k <= TG_CONCAT_MAX; k++)
        many[k] = a;
    ck_assert_ptr_null(tg_concat(ctx, many, TG_CONCAT_MAX + 1, 0));
    tu_assert_error(ctx, TG_ERR_ARG, "tg_concat: n is 9; expected 1..8 tensors");
    tg_ctx_clear_error(ctx);
    ck_assert_ptr_null(tg_concat(ctx, many, 0, 0));
    tu_assert_error(ctx, TG_ERR_ARG, "n is 0");
    tg_ctx_clear_error(ctx);
    ck_assert_ptr_null(tg_concat(ctx, many, -1, 0));
    tu_assert_error(ctx, TG_ERR_ARG, "n is -1");
    tg_ctx_clear_error(ctx);
    ck_assert_ptr_null(tg_concat(ctx, NULL, 2, 0));
    tu_assert_error(ctx, TG_ERR_ARG, "tg_concat: xs is NULL");
    tg_ctx_clear_error(ctx);
    ck_assert_ptr_nonnull(tg_concat(ctx, many, TG_CONCAT_MAX, 0));
    ck_assert_int_eq(tg_ctx_status(ctx), TG_OK);
    ck_assert_ptr_null(tg_concat(NULL, ab, 2, 0));
    ck_assert_int_eq(tg_ctx_status(other), TG_OK);
    tu_ctx_free(other);
    tu_ctx_free(ctx);
}
END_TEST

/* NULL in -> NULL out with nothing recorded (a NULL entry of xs too); the first error sticks
 * (also over concat's own argument errors); no graph is built over a failed builder. */
START_TEST(test_err_null_first_sticks)
{
    tg_ctx *ctx = tu_ctx_new();
    tg_tensor *x = tg_input(ctx, TG_F32, TG_DIMS(2, 3), "x");
    tg_tensor *xn[3] = {x, NULL, x};
    ck_assert_ptr_null(tg_log_softmax(ctx, NULL));
    ck_assert_ptr_null(tg_max(ctx, NULL, 0, false));
    ck_assert_ptr_null(tg_max(ctx, NULL, 99, false)); /* NULL wins over a bad axis */
    ck_assert_ptr_null(tg_concat(ctx, xn, 3, 0));
    ck_assert_ptr_null(tg_concat(ctx, xn, 3, 7));
    ck_assert_int_eq(tg_ctx_status(ctx), TG_OK);
    tg_tensor *good = tg_log_softmax(ctx, x);
    tg_tensor *bad = tg_max(ctx, x, 5, false);
    ck_assert_ptr_null(bad);
    char first[512];
    snprintf(first, sizeof first, "%s", tg_ctx_message(ctx));
    tg_tensor *xb[2] = {x, bad};
    ck_assert_ptr_null(tg_concat(ctx, xb, 2, 0));
    ck_assert_ptr_null(tg_concat(ctx, xb, 0, 0));     /* n 0: not reported while pending */
    ck_assert_ptr_null(tg_concat(ctx, NULL, 2, 0));
    ck_assert_ptr_null(tg_log_softmax(ctx, x));
    ck_assert_ptr_null(tg_max(ctx, x, 0, false));
    tu_assert_error(ctx, TG_ERR_AXIS, "tg_max");
    ck_assert_str_eq(tg_ctx_message(ctx), first);
    tu_assert_graph_refused(ctx, good, first);
    tu_ctx_free(ctx);
}
END_TEST

/* ---- gradcheck ------------------------------------------------------------------------------ */
/* Distinct values in a scrambled order (spacing 2/n), plus a little of the random fill, so the
 * arg-max of max never changes under the central-difference steps. */
static tg_tensor *distinct(tg_tensor *t)
{
    int64_t n = tg_tensor_numel(t);
    for (int64_t i = 0; i < n; i++)
        tg_set(t, i, -1 + 2.0 * (double)((37 * i + 5) % n) / (double)n +
                         0.005 * (tg_get(t, i) + 1));
    return t;
}

static tg_tensor *gc_case(tg_ctx *ctx, tg_dtype dt, int which)
{
    switch (which) {
    case 0: return tg_log_softmax(ctx, GIN("x", 4, 3));
    case 1: return tg_log_softmax(ctx, GIN("x", 1));
    case 2: return tg_log_softmax(ctx, GIN("x", 2, 1, 3, 5));
    case 3: return tg_max(ctx, distinct(GIN("x", 4, 3)), 0, true);
    case 4: return tg_max(ctx, distinct(GIN("x", 2, 3, 5)), -1, false);
    case 5: return tg_max(ctx, distinct(GIN("x", 3, 4, 2)), 1, true);
    case 6: {
        tg_tensor *xs[2] = {GIN("a", 3, 2), GIN("b", 3, 5)};
        return tg_concat(ctx, xs, 2, 1);
    }
    case 7: {
        tg_tensor *xs[4] = {GIN("a", 1, 2, 2), GIN("b", 3, 2, 2), GPARAM("c", 2, 2, 2),
                            GIN("d", 1, 2, 2)};
        return tg_concat(ctx, xs, 4, 0);
    }
    case 8: {
        tg_tensor *x = GIN("x", 2, 3, 1);
        tg_tensor *xs[3] = {x, GIN("y", 2, 3, 2), x};
        return tg_concat(ctx, xs, 3, -1);
    }
    default: { /* composed: log_softmax(concat(max(x, keepdim), x)) */
        tg_tensor *x = distinct(GIN("x", 3, 4));
        tg_tensor *xs[2] = {tg_max(ctx, x, 1, true), x};
        return tg_log_softmax(ctx, tg_concat(ctx, xs, 2, 1));
    }
    }
}
#define N_GC_CASES 10

START_TEST(test_gradcheck_f64)
{
    tu_gradcheck_case(gc_case, TG_F64, _i, 900 + (uint64_t)_i);
}
END_TEST

START_TEST(test_gradcheck_f32)
{
    static const int cases[] = {0, 4, 7, 9};
    tu_gradcheck_case(gc_case, TG_F32, cases[_i], 950 + (uint64_t)_i);
}
END_TEST

/* ---- thread invariance ---------------------------------------------------------------------- */
#define BIG(n) tu_big(n, 64)
static tg_tensor *ti_log_softmax(tg_ctx *ctx, tg_dtype dt)
{
    return tg_log_softmax(ctx, GIN("x", BIG(300), 200));
}
static tg_tensor *ti_max_mid(tg_ctx *ctx, tg_dtype dt)
{
    return tg_max(ctx, GIN("x", BIG(64), 8, 1024), 1, false); /* 65536 outputs */
}
static tg_tensor *ti_max_last(tg_ctx *ctx, tg_dtype dt)
{
    return tg_max(ctx, GIN("x", BIG(300), 200), -1, true);
}
static tg_tensor *ti_concat_cols(tg_ctx *ctx, tg_dtype dt)
{
    tg_tensor *x = GIN("x", BIG(200), 100);
    tg_tensor *xs[3] = {GIN("a", BIG(200), 300), x, x};
    return tg_concat(ctx, xs, 3, 1);
}
static tg_tensor *ti_concat_rows(tg_ctx *ctx, tg_dtype dt)
{
    tg_tensor *xs[2] = {GIN("a", BIG(200), 300), GIN("b", BIG(100), 300)};
    return tg_concat(ctx, xs, 2, 0);
}
static const tu_build_fn k_ti_builds[] = {ti_log_softmax, ti_max_mid, ti_max_last,
                                          ti_concat_cols, ti_concat_rows};
#define N_TI (int)(sizeof k_ti_builds / sizeof k_ti_builds[0])

/* ---- edge cases ----------------------------------------------------------------------------- */
START_TEST(test_backward_twice)
{
    tg_dtype dt = tu_dtypes[_i];
    tg_ctx *ctx = tu_ctx_new();
    tg_ctx_seed(ctx, 41);
    tg_tensor *x = tu_input(ctx, dt, TG_DIMS(3, 4), "x", -2, 2);
    tg_tensor *b = tu_input(ctx, dt, TG_DIMS(3, 2), "b", -1, 1);
    tg_tensor *xs[3] = {x, b, tg_max(ctx, x, 1, true)};
    tg_tensor *y = tg_log_softmax(ctx, tg_concat(ctx, xs, 3, 1));
    tg_graph *g = tu_fwd(ctx, y);
    double dy[21];
    for (int i = 0; i < 21; i++)
        dy[i] = 0.3 + sin(1.1 * i);
    tg_tensor *leaves[2] = {x, b};
    tu_assert_backward_twice(ctx, g, y, dy, leaves, 2);
    tu_ctx_free(ctx);
}
END_TEST

static Suite *axis_suite(void)
{
    Suite *s = suite_create("ops_axis");
    TCase *tc = tu_tcase(s, "forward", 0);
    tcase_add_loop_test(tc, test_log_softmax, 0, 2);
    tcase_add_loop_test(tc, test_log_softmax_inf_nan, 0, 2);
    tcase_add_loop_test(tc, test_log_softmax_vs_softmax, 0, 2);
    tcase_add_loop_test(tc, test_max, 0, 2);
    tcase_add_loop_test(tc, test_max_ties_nan, 0, 2);
    tcase_add_loop_test(tc, test_max_saved_index, 0, 2);
    tcase_add_loop_test(tc, test_concat, 0, 2);
    tcase_add_loop_test(tc, test_concat_more, 0, 2);

    tc = tu_tcase(s, "errors", 0);
    tcase_add_test(tc, test_err_log_softmax_max);
    tcase_add_test(tc, test_err_concat);
    tcase_add_test(tc, test_err_null_first_sticks);

    tc = tu_tcase(s, "gradcheck", 60);
    tcase_add_loop_test(tc, test_gradcheck_f64, 0, N_GC_CASES);
    tcase_add_loop_test(tc, test_gradcheck_f32, 0, 4);

    tu_add_thread_tcase(s, k_ti_builds, N_TI);

    tc = tu_tcase(s, "edge", 60);
    tcase_add_loop_test(tc, test_backward_twice, 0, 2);
    return s;
}

int main(void) { return tu_run(axis_suite()); }
