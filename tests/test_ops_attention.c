/*
 * test_ops_attention.c - tg_add_mask (ADDITIVE and BLOCK) and tg_softmax: hand-computed values
 * and gradients (f32 and f64), fully masked rows (exact zeros, zero gradient, never NaN), the
 * seeds' `scores + (-1e9 * mask)` convention, every shape/kind/dtype/context error, gradcheck on
 * several shapes, thread invariance, and the edge cases (rank 0, rank 6, a tensor used twice,
 * accumulation over two backwards, re-running with new data).
 */
#include "testutil.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- helpers --------------------------------------------------------------------------------- */
/* softmax([1, 2, 3]) = e^(x - 3) / sum = [e^-2, e^-1, 1] / (e^-2 + e^-1 + 1) */
#define SM0 0.09003057317038046
#define SM1 0.24472847105479767
#define SM2 0.6652409557748219
/* softmax([1, 2]) */
#define SA 0.2689414213699951
#define SB 0.7310585786300049

static double tol_of(tg_dtype dt) { return dt == TG_F32 ? 2e-7 : 1e-15; }

/* A constant 0/1 mask of the given shape. */
static tg_tensor *mask_const(tg_ctx *ctx, tg_dtype dt, int rank, const int64_t *shape,
                             const double *v)
{
    tg_tensor *m = tg_const(ctx, dt, rank, shape, "mask");
    ck_assert_ptr_nonnull(m);
    tu_set(m, v);
    return m;
}

/* ---- softmax -------------------------------------------------------------------------------- */
/* Rows [1,2,3], [1000,1001,1002] (max-subtracted: no overflow, same result), [0,0,0] (1/3 each),
 * [-inf, 0, -inf] (one survivor: exactly 1), [-inf, 1, 2] (softmax of [1,2] on the rest). */
START_TEST(test_softmax_forward)
{
    tg_dtype dt = tu_dtypes[_i];
    double tol = tol_of(dt);
    tg_ctx *ctx = tu_ctx_new();
    tg_tensor *x = tu_in(ctx, dt, TG_DIMS(5, 3), "x",
                         VALS(1, 2, 3, 1000, 1001, 1002, 0, 0, 0, -INFINITY, 0, -INFINITY,
                              -INFINITY, 1, 2));
    tg_tensor *y = tg_softmax(ctx, x);
    tu_fwd(ctx, y);
    EXPECT_SHAPE(y, 5, 3);
    ck_assert_str_eq(tg_tensor_op_name(y), "softmax");
    EXPECT_DATA(y, tol, SM0, SM1, SM2, SM0, SM1, SM2, 1.0 / 3, 1.0 / 3, 1.0 / 3, 0, 1, 0, 0, SA,
                SB);
    ck_assert_double_eq(tg_get(y, 9), 0); /* exp(-inf) is exactly 0 */
    ck_assert_double_eq(tg_get(y, 10), 1);
    ck_assert_double_eq(tg_get(y, 12), 0);
    tu_ctx_free(ctx);
}
END_TEST

/* dx = y * (dy - sum(dy * y)) with y = softmax([1,2,3]):
 *   dy = [1, 0, 0]     -> [y0 (1 - y0), -y1 y0, -y2 y0]
 *                       = [0.08192506906499324, -0.022033044520174298, -0.059892024544818935]
 *   dy = [0.5, -1, 2]  -> [-0.05678847003696696, -0.5214597727496748, 0.5782482427866417]
 *   dy = [7, 7, 7]     -> 0 (softmax is shift invariant) */
START_TEST(test_softmax_grad)
{
    tg_dtype dt = tu_dtypes[_i];
    double tol = dt == TG_F32 ? 1e-6 : 1e-15;
    tg_ctx *ctx = tu_ctx_new();
    tg_tensor *x = tu_in(ctx, dt, TG_DIMS(3, 3), "x", VALS(1, 2, 3, 1, 2, 3, 1, 2, 3));
    tg_tensor *y = tg_softmax(ctx, x);
    tg_graph *g = tu_fwd(ctx, y);
    tu_bwd(ctx, g, y, VALS(1, 0, 0, 0.5, -1, 2, 7, 7, 7));
    EXPECT_GRAD(x, tol, 0.08192506906499324, -0.022033044520174298, -0.059892024544818935,
                -0.05678847003696696, -0.5214597727496748, 0.5782482427866417, 0, 0, 0);
    tu_ctx_free(ctx);
}
END_TEST

/* A row of all -inf gives exact zeros (PyTorch SDPA's _safe_softmax) and an exactly zero
 * gradient, never NaN; the neighbouring rows are unaffected. */
START_TEST(test_softmax_fully_masked_row)
{
    tg_dtype dt = tu_dtypes[_i];
    tg_ctx *ctx = tu_ctx_new();
    tg_tensor *x = tu_in(ctx, dt, TG_DIMS(3, 3), "x",
                         VALS(1, 2, 3, -INFINITY, -INFINITY, -INFINITY, 1, 2, 3));
    tg_tensor *y = tg_softmax(ctx, x);
    tg_graph *g = tu_fwd(ctx, y);
    EXPECT_DATA(y, tol_of(dt), SM0, SM1, SM2, 0, 0, 0, SM0, SM1, SM2);
    for (int j = 3; j < 6; j++)
        ck_assert_msg(tg_get(y, j) == 0 && !signbit(tg_get(y, j)), "y[%d] = %g", j, tg_get(y, j));
    tu_bwd(ctx, g, y, VALS(1, 2, 3, 1e30, -5, 3, 1, 0, 0));
    ck_assert_int_eq(tu_count_nan(y, false), 0);
    ck_assert_int_eq(tu_count_nan(x, true), 0);
    for (int j = 3; j < 6; j++)
        ck_assert_double_eq(tg_grad_get(x, j), 0);
    EXPECT_GRAD(x, dt == TG_F32 ? 1e-6 : 1e-15, tg_grad_get(x, 0), tg_grad_get(x, 1),
                tg_grad_get(x, 2), 0, 0, 0, 0.08192506906499324, -0.022033044520174298,
                -0.059892024544818935);
    tu_ctx_free(ctx);
}
END_TEST

/* Size-1 last axis: softmax is exactly 1, the gradient exactly 0. Rank 1 works too. */
START_TEST(test_softmax_size1_rank1)
{
    tg_dtype dt = tu_dtypes[_i];
    tg_ctx *ctx = tu_ctx_new();
    tg_tensor *x = tu_in(ctx, dt, TG_DIMS(3, 1), "x", VALS(-50, 0, 1e6));
    tg_tensor *y = tg_softmax(ctx, x);
    tg_graph *g = tu_fwd(ctx, y);
    EXPECT_DATA(y, 0, 1, 1, 1);
    tu_bwd(ctx, g, y, VALS(3, -2, 5));
    EXPECT_GRAD(x, 0, 0, 0, 0);

    tg_tensor *v = tu_in(ctx, dt, TG_DIMS(3), "v", VALS(3, 1, 2));
    tg_tensor *sv = tg_softmax(ctx, v);
    tu_fwd(ctx, sv);
    EXPECT_SHAPE(sv, 3);
    EXPECT_DATA(sv, tol_of(dt), SM2, SM0, SM1);
    tu_ctx_free(ctx);
}
END_TEST

/* ---- add_mask: ADDITIVE --------------------------------------------------------------------- */
/* scores (2,2) [[1,2],[3,4]] + mask (2) [0, -1] = [[1,1],[3,3]]; -inf in the mask gives -inf.
 * dy = [[1,2],[3,4]]: dscores = dy, dmask = column sums [4, 6] (a learned bias). */
START_TEST(test_mask_additive)
{
    tg_dtype dt = tu_dtypes[_i];
    tg_ctx *ctx = tu_ctx_new();
    tg_tensor *s = tu_in(ctx, dt, TG_DIMS(2, 2), "scores", VALS(1, 2, 3, 4));
    tg_tensor *m = tu_in(ctx, dt, TG_DIMS(2), "bias", VALS(0, -1));
    tg_tensor *y = tg_add_mask(ctx, s, m, TG_MASK_ADDITIVE);
    tg_graph *g = tu_fwd(ctx, y);
    EXPECT_SHAPE(y, 2, 2);
    ck_assert_str_eq(tg_tensor_op_name(y), "add_mask");
    EXPECT_DATA(y, 0, 1, 1, 3, 3);
    tu_bwd(ctx, g, y, VALS(1, 2, 3, 4));
    EXPECT_GRAD(s, 0, 1, 2, 3, 4);
    EXPECT_GRAD(m, 0, 4, 6);

    tg_tensor *mi = mask_const(ctx, dt, TG_DIMS(2), VALS(-INFINITY, 0));
    tg_tensor *yi = tg_add_mask(ctx, s, mi, TG_MASK_ADDITIVE);
    tu_fwd(ctx, yi);
    EXPECT_DATA(yi, 0, -INFINITY, 2, -INFINITY, 4);
    tu_ctx_free(ctx);
}
END_TEST

/* A learned bias (T_q, T_k) = (2,3) over scores (B, T_q, T_k) = (2,2,3): dmask = sum over B. */
START_TEST(test_mask_additive_batch)
{
    tg_dtype dt = tu_dtypes[_i];
    tg_ctx *ctx = tu_ctx_new();
    tg_tensor *s = tu_in(ctx, dt, TG_DIMS(2, 2, 3), "scores", NULL);
    for (int i = 0; i < 12; i++)
        tg_set(s, i, i);
    tg_tensor *m = tu_in(ctx, dt, TG_DIMS(2, 3), "bias", VALS(10, 20, 30, 40, 50, 60));
    tg_tensor *y = tg_add_mask(ctx, s, m, TG_MASK_ADDITIVE);
    tg_graph *g = tu_fwd(ctx, y);
    EXPECT_DATA(y, 0, 10, 21, 32, 43, 54, 65, 16, 27, 38, 49, 60, 71);
    double dy[12];
    for (int i = 0; i < 12; i++)
        dy[i] = i;
    tu_bwd(ctx, g, y, dy);
    EXPECT_GRAD(m, 0, 6, 8, 10, 12, 14, 16);
    tu_ctx_free(ctx);
}
END_TEST

/* ---- add_mask: BLOCK ------------------------------------------------------------------------ */
/* Key padding: scores (B,H,T_q,T_k) = (2,2,2,3) = 0..23, mask (B,1,1,T_k) = [[0,0,1],[0,1,1]]:
 * y = -inf exactly where mask[b, k] != 0 (for every head and query), the score elsewhere;
 * dscores = dy where kept, 0 where blocked; the mask gets no gradient. */
START_TEST(test_mask_block_padding)
{
    tg_dtype dt = tu_dtypes[_i];
    tg_ctx *ctx = tu_ctx_new();
    tg_tensor *s = tu_in(ctx, dt, TG_DIMS(2, 2, 2, 3), "scores", NULL);
    for (int i = 0; i < 24; i++)
        tg_set(s, i, i);
    tg_tensor *m = mask_const(ctx, dt, TG_DIMS(2, 1, 1, 3), VALS(0, 0, 1, 0, 1, 1));
    tg_tensor *y = tg_add_mask(ctx, s, m, TG_MASK_BLOCK);
    tg_graph *g = tu_fwd(ctx, y);
    EXPECT_SHAPE(y, 2, 2, 2, 3);
    for (int i = 0; i < 24; i++) {
        int b = i / 12, k = i % 3;
        bool blocked = b == 0 ? k == 2 : k >= 1;
        if (blocked)
            ck_assert_msg(isinf(tg_get(y, i)) && tg_get(y, i) < 0, "y[%d] = %g", i, tg_get(y, i));
        else
            ck_assert_double_eq(tg_get(y, i), i);
    }
    double dy[24];
    for (int i = 0; i < 24; i++)
        dy[i] = i + 1;
    tu_bwd(ctx, g, y, dy);
    for (int i = 0; i < 24; i++) {
        int b = i / 12, k = i % 3;
        bool blocked = b == 0 ? k == 2 : k >= 1;
        ck_assert_double_eq(tg_grad_get(s, i), blocked ? 0 : i + 1);
    }
    ck_assert_ptr_null(tg_tensor_grad(m));
    tu_ctx_free(ctx);
}
END_TEST

/* Any non-zero mask value blocks (0.5, -2, 1e-30, NaN); 0 and -0.0 keep. A differentiable mask
 * given as BLOCK still gets no gradient (its gradient stays zero). */
START_TEST(test_mask_block_values)
{
    tg_dtype dt = tu_dtypes[_i];
    tg_ctx *ctx = tu_ctx_new();
    tg_tensor *s = tu_in(ctx, dt, TG_DIMS(2, 6), "scores",
                         VALS(1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12));
    tg_tensor *m = tu_in(ctx, dt, TG_DIMS(6), "mask", VALS(0, -0.0, 0.5, -2, 1e-30, NAN));
    tg_tensor *y = tg_add_mask(ctx, s, m, TG_MASK_BLOCK);
    tg_graph *g = tu_fwd(ctx, y);
    if (dt == TG_F32) /* 1e-30 is a normal f32 (> FLT_MIN 1.2e-38): still non-zero */
        ck_assert(tg_get(m, 4) != 0);
    EXPECT_DATA(y, 0, 1, 2, -INFINITY, -INFINITY, -INFINITY, -INFINITY, 7, 8, -INFINITY,
                -INFINITY, -INFINITY, -INFINITY);
    tu_bwd(ctx, g, y, NULL);
    EXPECT_GRAD(s, 0, 1, 1, 0, 0, 0, 0, 1, 1, 0, 0, 0, 0);
    for (int i = 0; i < 6; i++)
        ck_assert_msg(!(tg_grad_get(m, i) != 0), "BLOCK mask got gradient %g", tg_grad_get(m, i));
    tu_ctx_free(ctx);
}
END_TEST

/* Causal mask (T,T) = (3,3), 1 above the diagonal, broadcast over (B,H) = (2,2); with all-zero
 * scores the softmax rows are [1,0,0], [1/2,1/2,0], [1/3,1/3,1/3] in every batch and head. */
START_TEST(test_mask_block_causal_softmax)
{
    tg_dtype dt = tu_dtypes[_i];
    tg_ctx *ctx = tu_ctx_new();
    tg_tensor *s = tu_in(ctx, dt, TG_DIMS(2, 2, 3, 3), "scores", NULL);
    tg_tensor *m = mask_const(ctx, dt, TG_DIMS(3, 3), VALS(0, 1, 1, 0, 0, 1, 0, 0, 0));
    tg_tensor *y = tg_softmax(ctx, tg_add_mask(ctx, s, m, TG_MASK_BLOCK));
    tg_graph *g = tu_fwd(ctx, y);
    EXPECT_SHAPE(y, 2, 2, 3, 3);
    const double row[9] = {1, 0, 0, 0.5, 0.5, 0, 1.0 / 3, 1.0 / 3, 1.0 / 3};
    for (int i = 0; i < 36; i++)
        ck_assert_double_eq_tol(tg_get(y, i), row[i % 9], tol_of(dt));
    tu_bwd(ctx, g, y, NULL);
    ck_assert_int_eq(tu_count_nan(s, true), 0);
    /* blocked positions get exactly zero gradient */
    for (int i = 0; i < 36; i++)
        if (row[i % 9] == 0)
            ck_assert_double_eq(tg_grad_get(s, i), 0);
    tu_ctx_free(ctx);
}
END_TEST

/* Every key blocked for one query row (mask row all 1): softmax gives exact zeros there and the
 * scores get an exactly zero gradient, never NaN. */
START_TEST(test_mask_block_fully_masked_row)
{
    tg_dtype dt = tu_dtypes[_i];
    tg_ctx *ctx = tu_ctx_new();
    tg_tensor *s = tu_in(ctx, dt, TG_DIMS(2, 2, 3), "scores",
                         VALS(1, 2, 3, 4, 5, 6, 1, 2, 3, 4, 5, 6));
    tg_tensor *m = mask_const(ctx, dt, TG_DIMS(2, 3), VALS(0, 0, 1, 1, 1, 1));
    tg_tensor *y = tg_softmax(ctx, tg_add_mask(ctx, s, m, TG_MASK_BLOCK));
    tg_graph *g = tu_fwd(ctx, y);
    EXPECT_DATA(y, tol_of(dt), SA, SB, 0, 0, 0, 0, SA, SB, 0, 0, 0, 0);
    tu_bwd(ctx, g, y, VALS(1, -1, 2, 3, 4, 5, 0.5, 0.5, 0.5, -1, -2, -3));
    ck_assert_int_eq(tu_count_nan(y, false), 0);
    ck_assert_int_eq(tu_count_nan(s, true), 0);
    for (int i = 0; i < 12; i++)
        if (i % 6 >= 2)
            ck_assert_double_eq(tg_grad_get(s, i), 0);
    /* row 0: dx = y (dy - y.dy) with y = [SA, SB], dy = [1, -1] */
    double dot = SA - SB;
    ck_assert_double_eq_tol(tg_grad_get(s, 0), SA * (1 - dot), 1e-6);
    ck_assert_double_eq_tol(tg_grad_get(s, 1), SB * (-1 - dot), 1e-6);
    tu_ctx_free(ctx);
}
END_TEST

/* The seeds' convention scores + (-1e9 * mask) through ADDITIVE: masked scores become
 * 3 - 1e9 and the softmax there is exactly 0 (exp underflows). A fully masked row is NOT zero
 * under this convention (unlike BLOCK): in f64 it is softmax of the unmasked scores (shift
 * invariance), in f32 the -1e9 swamps the scores and it is uniform. */
START_TEST(test_mask_seed_convention)
{
    tg_dtype dt = tu_dtypes[_i];
    tg_ctx *ctx = tu_ctx_new();
    tg_tensor *s = tu_in(ctx, dt, TG_DIMS(2, 3), "scores", VALS(1, 2, 3, 1, 2, 3));
    tg_tensor *m = mask_const(ctx, dt, TG_DIMS(2, 3), VALS(0, 0, 1, 1, 1, 1));
    tg_tensor *masked = tg_add_mask(ctx, s, tg_scale(ctx, m, -1e9), TG_MASK_ADDITIVE);
    tg_tensor *y = tg_softmax(ctx, masked);
    tg_keep(masked); /* read below */
    tg_graph *g = tu_fwd(ctx, y);
    double tol_m = dt == TG_F32 ? 64 : 0; /* f32 spacing at 1e9 is 64: 3 - 1e9 rounds to -1e9 */
    ck_assert_msg(fabs(tg_get(masked, 2) - (3 - 1e9)) <= tol_m, "masked = %.17g", tg_get(masked, 2));
    ck_assert_double_eq_tol(tg_get(y, 0), SA, tol_of(dt));
    ck_assert_double_eq_tol(tg_get(y, 1), SB, tol_of(dt));
    ck_assert_double_eq(tg_get(y, 2), 0);
    if (dt == TG_F64)
        EXPECT_DATA(y, 1e-9, SA, SB, 0, SM0, SM1, SM2);
    else
        EXPECT_DATA(y, 1e-7, SA, SB, 0, 1.0 / 3, 1.0 / 3, 1.0 / 3);
    tu_bwd(ctx, g, y, VALS(1, 2, 3, 4, 5, 6));
    ck_assert_double_eq(tg_grad_get(s, 2), 0);
    ck_assert_int_eq(tu_count_nan(s, true), 0);
    tu_ctx_free(ctx);
}
END_TEST

/* ---- errors --------------------------------------------------------------------------------- */
START_TEST(test_err_mask_shape)
{
    tg_ctx *ctx = tu_ctx_new();
    tg_tensor *s = tg_input(ctx, TG_F32, TG_DIMS(2, 3), "s");
    struct {
        int rank;
        int64_t shape[4];
        const char *needle;
    } bad[] = {
        {1, {4}, "(4)"},             /* last dim 4 vs 3 */
        {2, {3, 3}, "(3, 3)"},       /* 3 vs 2 */
        {3, {1, 2, 3}, "(1, 2, 3)"}, /* rank above the scores' */
        {2, {2, 1}, NULL},           /* fine: broadcasts (checked below) */
    };
    for (int k = 0; k < 2; k++) {
        for (int i = 0; i < 3; i++) {
            tg_tensor *m = tg_const(ctx, TG_F32, bad[i].rank, bad[i].shape, "m");
            ck_assert_ptr_null(tg_add_mask(ctx, s, m, (tg_mask_kind)k));
            tu_assert_error(ctx, TG_ERR_SHAPE, "tg_add_mask");
            tu_assert_error(ctx, TG_ERR_SHAPE, bad[i].needle);
            tu_assert_error(ctx, TG_ERR_SHAPE, "(2, 3)");
            tg_ctx_clear_error(ctx);
        }
        tg_tensor *ok = tg_const(ctx, TG_F32, bad[3].rank, bad[3].shape, "ok");
        ck_assert_ptr_nonnull(tg_add_mask(ctx, s, ok, (tg_mask_kind)k));
    }
    /* the mask may not enlarge the scores: scores (1,4), mask (3,4) broadcast to (3,4) */
    tg_tensor *s1 = tg_input(ctx, TG_F32, TG_DIMS(1, 4), "s1");
    tg_tensor *m3 = tg_const(ctx, TG_F32, TG_DIMS(3, 4), "m3");
    ck_assert_ptr_null(tg_add_mask(ctx, s1, m3, TG_MASK_BLOCK));
    tu_assert_error(ctx, TG_ERR_SHAPE, "(3, 4)");
    tu_assert_error(ctx, TG_ERR_SHAPE, "(1, 4)");
    tg_ctx_clear_error(ctx);
    /* a rank-0 mask broadcasts to anything */
    tg_tensor *m0 = tg_const(ctx, TG_F32, 0, NULL, "m0");
    ck_assert_ptr_nonnull(tg_add_mask(ctx, s, m0, TG_MASK_ADDITIVE));
    ck_assert_int_eq(tg_ctx_status(ctx), TG_OK);
    tu_ctx_free(ctx);
}
END_TEST

START_TEST(test_err_mask_kind_dtype_context)
{
    tg_ctx *ctx = tu_ctx_new(), *other = tu_ctx_new();
    tg_tensor *s = tg_input(ctx, TG_F64, TG_DIMS(2, 3), "s");
    tg_tensor *m = tg_const(ctx, TG_F64, TG_DIMS(3), "m");
    ck_assert_ptr_null(tg_add_mask(ctx, s, m, (tg_mask_kind)7));
    tu_assert_error(ctx, TG_ERR_ARG, "tg_add_mask");
    tu_assert_error(ctx, TG_ERR_ARG, "7");
    tg_ctx_clear_error(ctx);
    ck_assert_ptr_null(tg_add_mask(ctx, s, m, (tg_mask_kind)-1));
    tu_assert_error(ctx, TG_ERR_ARG, "tg_add_mask");
    tg_ctx_clear_error(ctx);
    tg_tensor *m32 = tg_const(ctx, TG_F32, TG_DIMS(3), "m32");
    ck_assert_ptr_null(tg_add_mask(ctx, s, m32, TG_MASK_BLOCK));
    tu_assert_error(ctx, TG_ERR_DTYPE, "tg_add_mask");
    tu_assert_error(ctx, TG_ERR_DTYPE, "f32");
    tg_ctx_clear_error(ctx);
    tg_tensor *mo = tg_const(other, TG_F64, TG_DIMS(3), "m_other");
    ck_assert_ptr_null(tg_add_mask(ctx, s, mo, TG_MASK_BLOCK));
    tu_assert_error(ctx, TG_ERR_ARG, "another context");
    tg_ctx_clear_error(ctx);
    tg_tensor *so = tg_input(other, TG_F64, TG_DIMS(2, 3), "s_other");
    ck_assert_ptr_null(tg_softmax(ctx, so));
    tu_assert_error(ctx, TG_ERR_ARG, "tg_softmax");
    tu_assert_error(ctx, TG_ERR_ARG, "another context");
    ck_assert_int_eq(tg_ctx_status(other), TG_OK);
    tu_ctx_free(other);
    tu_ctx_free(ctx);
}
END_TEST

START_TEST(test_err_softmax_rank0)
{
    tg_ctx *ctx = tu_ctx_new();
    tg_tensor *s = tg_input(ctx, TG_F32, 0, NULL, "s");
    ck_assert_ptr_null(tg_softmax(ctx, s));
    tu_assert_error(ctx, TG_ERR_SHAPE, "tg_softmax");
    tu_ctx_free(ctx);
}
END_TEST

START_TEST(test_err_null_first_sticks)
{
    tg_ctx *ctx = tu_ctx_new();
    tg_tensor *s = tg_input(ctx, TG_F32, TG_DIMS(2, 3), "s");
    tg_tensor *m = tg_const(ctx, TG_F32, TG_DIMS(3), "m");
    ck_assert_ptr_null(tg_softmax(ctx, NULL));
    ck_assert_ptr_null(tg_add_mask(ctx, NULL, m, TG_MASK_BLOCK));
    ck_assert_ptr_null(tg_add_mask(ctx, s, NULL, TG_MASK_BLOCK));
    ck_assert_ptr_null(tg_add_mask(ctx, s, NULL, (tg_mask_kind)9)); /* NULL wins: no report */
    ck_assert_int_eq(tg_ctx_status(ctx), TG_OK);
    tg_tensor *good = tg_softmax(ctx, tg_add_mask(ctx, s, m, TG_MASK_BLOCK));
    ck_assert_ptr_nonnull(good);
    tg_tensor *wide = tg_const(ctx, TG_F32, TG_DIMS(5), "wide");
    tg_tensor *bad = tg_add_mask(ctx, s, wide, TG_MASK_ADDITIVE);
    ck_assert_ptr_null(bad);
    char first[512];
    snprintf(first, sizeof first, "%s", tg_ctx_message(ctx));
    /* the seeds' chain: softmax(add_mask(scores, scale(mask))) with the failure inside */
    ck_assert_ptr_null(tg_softmax(ctx, tg_add_mask(ctx, bad, tg_scale(ctx, m, -1e9),
                                                   TG_MASK_ADDITIVE)));
    ck_assert_ptr_null(tg_softmax(ctx, tg_add_mask(ctx, s, tg_scale(ctx, bad, -1e9),
                                                   TG_MASK_ADDITIVE)));
    ck_assert_ptr_null(tg_add_mask(ctx, s, m, (tg_mask_kind)3)); /* later errors not recorded */
    tu_assert_error(ctx, TG_ERR_SHAPE, "tg_add_mask");
    ck_assert_str_eq(tg_ctx_message(ctx), first);
    tu_assert_graph_refused(ctx, good, first);
    tu_ctx_free(ctx);
}
END_TEST

/* ---- gradcheck ------------------------------------------------------------------------------ */
/* A 0/1 constant mask from a pattern (repeated to fill). */
static tg_tensor *pattern_mask(tg_ctx *ctx, tg_dtype dt, int rank, const int64_t *shape,
                               const int *pat, int npat)
{
    tg_tensor *m = tg_const(ctx, dt, rank, shape, "mask");
    for (int64_t i = 0; m && i < tg_tensor_numel(m); i++)
        tg_set(m, i, pat[i % npat]);
    return m;
}

static tg_tensor *gc_case(tg_ctx *ctx, tg_dtype dt, int which)
{
    switch (which) {
    case 0: return tg_softmax(ctx, GIN("x", 4, 1));
    case 1: return tg_softmax(ctx, GIN("x", 1, 6));
    case 2: {
        tg_tensor *x = GIN("x", 3, 2, 5);
        tg_fill_uniform(x, -3, 3);
        return tg_softmax(ctx, x);
    }
    case 3: return tg_softmax(ctx, GIN("x", 7));
    case 4: return tg_add_mask(ctx, GIN("s", 2, 3, 4), GIN("bias", 4), TG_MASK_ADDITIVE);
    case 5: return tg_add_mask(ctx, GIN("s", 2, 3, 2), GIN("bias", 3, 1), TG_MASK_ADDITIVE);
    case 6: { /* row 1 fully blocked, row 2 has a single survivor */
        static const int pat[] = {0, 1, 0, 1, 0, 1, 1, 1, 1, 1, 1, 1, 1, 0, 1};
        tg_tensor *m = pattern_mask(ctx, dt, TG_DIMS(3, 5), pat, 15);
        return tg_softmax(ctx, tg_add_mask(ctx, GIN("s", 2, 3, 5), m, TG_MASK_BLOCK));
    }
    case 7: { /* seeds' -1e9 convention with key padding (B,1,1,T_k) */
        static const int pat[] = {0, 0, 1, 1, 0, 0, 0, 1};
        tg_tensor *m = pattern_mask(ctx, dt, TG_DIMS(2, 1, 1, 4), pat, 8);
        return tg_softmax(ctx, tg_add_mask(ctx, GIN("s", 2, 2, 3, 4), tg_scale(ctx, m, -1e9),
                                           TG_MASK_ADDITIVE));
    }
    case 8: { /* softmax of a learned-bias-masked score, then masked again by BLOCK */
        static const int pat[] = {0, 0, 0, 1};
        tg_tensor *m = pattern_mask(ctx, dt, TG_DIMS(4), pat, 4);
        tg_tensor *sc = tg_add_mask(ctx, GIN("s", 3, 4), GIN("bias", 1, 4), TG_MASK_ADDITIVE);
        return tg_softmax(ctx, tg_add_mask(ctx, sc, m, TG_MASK_BLOCK));
    }
    default: { /* scores used as their own additive mask: y = 2 s */
        tg_tensor *s = GIN("s", 2, 3);
        return tg_softmax(ctx, tg_add_mask(ctx, s, s, TG_MASK_ADDITIVE));
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
    static const int cases[] = {2, 4, 6, 7};
    tu_gradcheck_case(gc_case, TG_F32, cases[_i], 1000 + (uint64_t)_i);
}
END_TEST

/* ---- thread invariance ---------------------------------------------------------------------- */
/* Masks are built from index formulas (not the RNG) so every context gets the same ones. */
static tg_tensor *ti_softmax(tg_ctx *ctx, tg_dtype dt)
{
    int64_t n = tu_big(64, 48);
    tg_tensor *x = GIN("x", 32, n, n);
    tg_fill_uniform(x, -4, 4);
    return tg_softmax(ctx, x);
}
static tg_tensor *ti_additive(tg_ctx *ctx, tg_dtype dt) /* learned (B,1,1,T) bias: reduce path */
{
    return tg_add_mask(ctx, GIN("s", 8, 4, 32, 32), GIN("bias", 8, 1, 1, 32), TG_MASK_ADDITIVE);
}
static tg_tensor *ti_block_causal(tg_ctx *ctx, tg_dtype dt)
{
    tg_tensor *m = tg_const(ctx, dt, TG_DIMS(64, 64), "causal");
    for (int64_t i = 0; i < 64 * 64; i++)
        tg_set(m, i, (i % 64) > (i / 64) ? 1 : 0);
    return tg_add_mask(ctx, GIN("s", 8, 4, 64, 64), m, TG_MASK_BLOCK);
}
static tg_tensor *ti_block_softmax(tg_ctx *ctx, tg_dtype dt) /* padding; batch 5 fully padded */
{
    tg_tensor *m = tg_const(ctx, dt, TG_DIMS(32, 1, 64), "pad");
    for (int64_t b = 0; b < 32; b++)
        for (int64_t k = 0; k < 64; k++)
            tg_set(m, b * 64 + k, (b == 5 || k >= 64 - b) ? 1 : 0);
    return tg_softmax(ctx, tg_add_mask(ctx, GIN("s", 32, 64, 64), m, TG_MASK_BLOCK));
}
static tg_tensor *ti_seed_convention(tg_ctx *ctx, tg_dtype dt)
{
    tg_tensor *m = tg_const(ctx, dt, TG_DIMS(64, 64), "causal");
    for (int64_t i = 0; i < 64 * 64; i++)
        tg_set(m, i, (i % 64) > (i / 64) ? 1 : 0);
    return tg_softmax(ctx, tg_add_mask(ctx, GIN("s", 16, 64, 64), tg_scale(ctx, m, -1e9),
                                       TG_MASK_ADDITIVE));
}
static const tu_build_fn k_ti_builds[] = {
    ti_softmax, ti_additive, ti_block_causal, ti_block_softmax, ti_seed_convention};
#define N_TI (int)(sizeof k_ti_builds / sizeof k_ti_builds[0])

/* ---- edge cases ----------------------------------------------------------------------------- */
/* Rank 6 scores with a rank-2 BLOCK mask and a rank-6 softmax: (1,2,1,2,2,3) = 0..23 row-wise
 * shifted, mask (2,3) [[0,0,1],[1,0,0]]: rows alternate softmax over keys {0,1} and {1,2}. */
START_TEST(test_rank6)
{
    tg_dtype dt = tu_dtypes[_i];
    tg_ctx *ctx = tu_ctx_new();
    tg_tensor *s = tu_in(ctx, dt, TG_DIMS(1, 2, 1, 2, 2, 3), "s", NULL);
    for (int i = 0; i < 24; i++)
        tg_set(s, i, (i % 3) + 1); /* every row [1, 2, 3] */
    tg_tensor *m = mask_const(ctx, dt, TG_DIMS(2, 3), VALS(0, 0, 1, 1, 0, 0));
    tg_tensor *y = tg_softmax(ctx, tg_add_mask(ctx, s, m, TG_MASK_BLOCK));
    tg_graph *g = tu_fwd(ctx, y);
    EXPECT_SHAPE(y, 1, 2, 1, 2, 2, 3);
    for (int r = 0; r < 8; r++) {
        const double *want = r % 2 == 0 ? VALS(SA, SB, 0) : VALS(0, SA, SB);
        for (int k = 0; k < 3; k++)
            ck_assert_double_eq_tol(tg_get(y, r * 3 + k), want[k], tol_of(dt));
    }
    tu_bwd(ctx, g, y, NULL); /* dy = 1: softmax's gradient is y (1 - sum y) = 0 */
    for (int i = 0; i < 24; i++)
        ck_assert_double_eq_tol(tg_grad_get(s, i), 0, 1e-7);
    tu_ctx_free(ctx);
}
END_TEST

/* scores used twice: add_mask(s, s, ADDITIVE) = 2 s, d/ds = 2 dy. */
START_TEST(test_used_twice)
{
    tg_dtype dt = tu_dtypes[_i];
    tg_ctx *ctx = tu_ctx_new();
    tg_tensor *s = tu_in(ctx, dt, TG_DIMS(2, 2), "s", VALS(1, -2, 3, 0.5));
    tg_tensor *y = tg_add_mask(ctx, s, s, TG_MASK_ADDITIVE);
    tg_graph *g = tu_fwd(ctx, y);
    EXPECT_DATA(y, 0, 2, -4, 6, 1);
    tu_bwd(ctx, g, y, VALS(1, 2, 3, 4));
    EXPECT_GRAD(s, 0, 2, 4, 6, 8);
    tu_ctx_free(ctx);
}
END_TEST

START_TEST(test_backward_twice)
{
    tg_dtype dt = tu_dtypes[_i];
    tg_ctx *ctx = tu_ctx_new();
    tg_ctx_seed(ctx, 41);
    tg_tensor *s = tu_input(ctx, dt, TG_DIMS(2, 3, 4), "s", -2, 2);
    tg_tensor *bias = tu_input(ctx, dt, TG_DIMS(4), "bias", -1, 1);
    tg_tensor *m = mask_const(ctx, dt, TG_DIMS(3, 4), VALS(0, 1, 0, 0, 1, 1, 1, 1, 0, 0, 0, 1));
    tg_tensor *y = tg_softmax(ctx, tg_add_mask(ctx, tg_add_mask(ctx, s, bias, TG_MASK_ADDITIVE),
                                               m, TG_MASK_BLOCK));
    tg_graph *g = tu_fwd(ctx, y);
    double dy[24];
    for (int i = 0; i < 24; i++)
        dy[i] = sin(0.9 * i);
    tg_tensor *leaves[2] = {s, bias};
    tu_assert_backward_twice(ctx, g, y, dy, leaves, 2);
    tu_ctx_free(ctx);
}
END_TEST

/* New scores and a new mask between runs: the graph picks both up without rebuilding. */
START_TEST(test_rerun_new_data)
{
    tg_dtype dt = tu_dtypes[_i];
    tg_ctx *ctx = tu_ctx_new();
    tg_tensor *s = tu_in(ctx, dt, TG_DIMS(1, 3), "s", VALS(1, 2, 3));
    tg_tensor *m = mask_const(ctx, dt, TG_DIMS(3), VALS(0, 0, 0));
    tg_tensor *y = tg_softmax(ctx, tg_add_mask(ctx, s, m, TG_MASK_BLOCK));
    tg_graph *g = tu_fwd(ctx, y);
    EXPECT_DATA(y, tol_of(dt), SM0, SM1, SM2);
    tu_set(m, VALS(1, 0, 0));
    ck_assert_int_eq(tg_graph_forward(g), TG_OK);
    EXPECT_DATA(y, tol_of(dt), 0, SA, SB);
    tu_set(s, VALS(9, 5, 5));
    ck_assert_int_eq(tg_graph_forward(g), TG_OK);
    EXPECT_DATA(y, tol_of(dt), 0, 0.5, 0.5);
    tu_set(m, VALS(1, 1, 1));
    ck_assert_int_eq(tg_graph_forward(g), TG_OK);
    EXPECT_DATA(y, 0, 0, 0, 0);
    tu_ctx_free(ctx);
}
END_TEST

static Suite *attention_suite(void)
{
    Suite *s = suite_create("ops_attention");
    TCase *tc = tu_tcase(s, "forward", 0);
    tcase_add_loop_test(tc, test_softmax_forward, 0, 2);
    tcase_add_loop_test(tc, test_softmax_grad, 0, 2);
    tcase_add_loop_test(tc, test_softmax_fully_masked_row, 0, 2);
    tcase_add_loop_test(tc, test_softmax_size1_rank1, 0, 2);
    tcase_add_loop_test(tc, test_mask_additive, 0, 2);
    tcase_add_loop_test(tc, test_mask_additive_batch, 0, 2);
    tcase_add_loop_test(tc, test_mask_block_padding, 0, 2);
    tcase_add_loop_test(tc, test_mask_block_values, 0, 2);
    tcase_add_loop_test(tc, test_mask_block_causal_softmax, 0, 2);
    tcase_add_loop_test(tc, test_mask_block_fully_masked_row, 0, 2);
    tcase_add_loop_test(tc, test_mask_seed_convention, 0, 2);

    tc = tu_tcase(s, "errors", 0);
    tcase_add_test(tc, test_err_mask_shape);
    tcase_add_test(tc, test_err_mask_kind_dtype_context);
    tcase_add_test(tc, test_err_softmax_rank0);
    tcase_add_test(tc, test_err_null_first_sticks);

    tc = tu_tcase(s, "gradcheck", 60);
    tcase_add_loop_test(tc, test_gradcheck_f64, 0, N_GC_CASES);
    tcase_add_loop_test(tc, test_gradcheck_f32, 0, 4);

    tu_add_thread_tcase(s, k_ti_builds, N_TI);

    tc = tu_tcase(s, "edge", 60);
    tcase_add_loop_test(tc, test_rank6, 0, 2);
    tcase_add_loop_test(tc, test_used_twice, 0, 2);
    tcase_add_loop_test(tc, test_backward_twice, 0, 2);
    tcase_add_loop_test(tc, test_rerun_new_data, 0, 2);
    return s;
}

int main(void) { return tu_run(attention_suite()); }
