/*
 * test_ops_matmul.c - tg_matmul: hand-computed forward and gradients (f32 and f64), transpose
 * flags, batch broadcasting, every shape/dtype/context error, gradcheck on several shapes, thread
 * invariance and the edge cases (rank 6, an operand used twice, accumulation, re-running).
 *
 * Integer-valued data is used for the forward and gradient checks so both dtypes are exact.
 */
#include "testutil.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- helpers --------------------------------------------------------------------------------- */
/* ---- hand-computed forward and gradients ------------------------------------------------------ */
/* A (2,3) = [[1,2,3],[4,5,6]], B (3,2) = [[7,8],[9,10],[11,12]]
 * C = A B = [[58, 64], [139, 154]]
 * upstream dC = [[1,2],[3,4]]:
 *   dA = dC B^T = [[1*7+2*8, 1*9+2*10, 1*11+2*12], [3*7+4*8, 3*9+4*10, 3*11+4*12]]
 *      = [[23, 29, 35], [53, 67, 81]]
 *   dB = A^T dC = [[1+12, 2+16], [2+15, 4+20], [3+18, 6+24]] = [[13, 18], [17, 24], [21, 30]] */
static const double k_A[] = {1, 2, 3, 4, 5, 6}, k_At[] = {1, 4, 2, 5, 3, 6};
static const double k_B[] = {7, 8, 9, 10, 11, 12}, k_Bt[] = {7, 9, 11, 8, 10, 12};

START_TEST(test_forward_2x3_3x2)
{
    tg_dtype dt = tu_dtypes[_i];
    tg_ctx *ctx = tu_ctx_new();
    tg_tensor *a = tu_in(ctx, dt, TG_DIMS(2, 3), "a", k_A);
    tg_tensor *b = tu_in(ctx, dt, TG_DIMS(3, 2), "b", k_B);
    tg_tensor *c = tg_matmul(ctx, a, b, false, false);
    tg_graph *g = tu_fwd(ctx, c);
    EXPECT_SHAPE(c, 2, 2);
    ck_assert_int_eq(tg_tensor_dtype(c), dt);
    ck_assert_str_eq(tg_tensor_op_name(c), "matmul");
    EXPECT_DATA(c, 0, 58, 64, 139, 154);
    tu_bwd(ctx, g, c, VALS(1, 2, 3, 4));
    EXPECT_GRAD(a, 0, 23, 29, 35, 53, 67, 81);
    EXPECT_GRAD(b, 0, 13, 18, 17, 24, 21, 30);
    tu_ctx_free(ctx);
}
END_TEST

/* d(sum(A B))/dA = 1 B^T: every row is B's row sums [15, 19, 23]; dB rows are A's column sums
 * [5, 7, 9] repeated. */
START_TEST(test_grad_of_sum)
{
    tg_dtype dt = tu_dtypes[_i];
    tg_ctx *ctx = tu_ctx_new();
    tg_tensor *a = tu_in(ctx, dt, TG_DIMS(2, 3), "a", k_A);
    tg_tensor *b = tu_in(ctx, dt, TG_DIMS(3, 2), "b", k_B);
    tg_tensor *l = tg_sum_all(ctx, tg_matmul(ctx, a, b, false, false));
    tg_graph *g = tu_fwd(ctx, l);
    EXPECT_DATA(l, 0, 58 + 64 + 139 + 154);
    ck_assert_int_eq(tg_graph_backward(g, l, NULL), TG_OK);
    EXPECT_GRAD(a, 0, 15, 19, 23, 15, 19, 23);
    EXPECT_GRAD(b, 0, 5, 5, 7, 7, 9, 9);
    tu_ctx_free(ctx);
}
END_TEST

/* The same product with the operands stored transposed: a stored (3,2) = A^T with ta, b stored
 * (2,3) = B^T with tb, and both. Gradients come back in the stored layout (dA^T, dB^T). */
START_TEST(test_transpose_flags)
{
    tg_dtype dt = tu_dtypes[_i];
    for (int mode = 1; mode <= 3; mode++) {
        bool ta = mode & 1, tb = mode & 2;
        tg_ctx *ctx = tu_ctx_new();
        tg_tensor *a = ta ? tu_in(ctx, dt, TG_DIMS(3, 2), "at", k_At)
                          : tu_in(ctx, dt, TG_DIMS(2, 3), "a", k_A);
        tg_tensor *b = tb ? tu_in(ctx, dt, TG_DIMS(2, 3), "bt", k_Bt)
                          : tu_in(ctx, dt, TG_DIMS(3, 2), "b", k_B);
        tg_tensor *c = tg_matmul(ctx, a, b, ta, tb);
        tg_graph *g = tu_fwd(ctx, c);
        EXPECT_SHAPE(c, 2, 2);
        EXPECT_DATA(c, 0, 58, 64, 139, 154);
        tu_bwd(ctx, g, c, VALS(1, 2, 3, 4));
        if (ta)
            EXPECT_GRAD(a, 0, 23, 53, 29, 67, 35, 81);
        else
            EXPECT_GRAD(a, 0, 23, 29, 35, 53, 67, 81);
        if (tb)
            EXPECT_GRAD(b, 0, 13, 17, 21, 18, 24, 30);
        else
            EXPECT_GRAD(b, 0, 13, 18, 17, 24, 21, 30);
        tu_ctx_free(ctx);
    }
}
END_TEST

/* Transpose flags change the output shape: a (3,2) with ta is (2,3); a (3,2) @ a with ta gives
 * A^T A (2,2); with tb, a a^T (3,3). a = [[1,2],[3,4],[5,6]]:
 * a^T a = [[1+9+25, 2+12+30], [.., 4+16+36]] = [[35, 44], [44, 56]]
 * a a^T = [[5, 11, 17], [11, 25, 39], [17, 39, 61]] */
START_TEST(test_transpose_shapes)
{
    tg_dtype dt = tu_dtypes[_i];
    tg_ctx *ctx = tu_ctx_new();
    tg_tensor *a = tu_in(ctx, dt, TG_DIMS(3, 2), "a", VALS(1, 2, 3, 4, 5, 6));
    tg_tensor *ata = tg_matmul(ctx, a, a, true, false);
    tg_tensor *aat = tg_matmul(ctx, a, a, false, true);
    tg_tensor *outs[2] = {ata, aat};
    tg_graph *g = tg_graph_new(ctx, outs, 2);
    ck_assert_ptr_nonnull(g);
    ck_assert_int_eq(tg_graph_forward(g), TG_OK);
    EXPECT_SHAPE(ata, 2, 2);
    EXPECT_SHAPE(aat, 3, 3);
    EXPECT_DATA(ata, 0, 35, 44, 44, 56);
    EXPECT_DATA(aat, 0, 5, 11, 17, 11, 25, 39, 17, 39, 61);
    tu_ctx_free(ctx);
}
END_TEST

/* Small broadcast by hand: a (2,1,1,2) = [[1,2]], [[3,4]]; b (3,2,1) = [1,0]^T, [0,1]^T, [1,1]^T
 * -> (2,3,1,1) = a_i . b_j = [1, 2, 3, 3, 4, 7].
 * d(sum)/da_i = sum_j b_j^T = [2, 2]; d(sum)/db_j = sum_i a_i^T = [4, 6]. */
START_TEST(test_broadcast_by_hand)
{
    tg_dtype dt = tu_dtypes[_i];
    tg_ctx *ctx = tu_ctx_new();
    tg_tensor *a = tu_in(ctx, dt, TG_DIMS(2, 1, 1, 2), "a", VALS(1, 2, 3, 4));
    tg_tensor *b = tu_in(ctx, dt, TG_DIMS(3, 2, 1), "b", VALS(1, 0, 0, 1, 1, 1));
    tg_tensor *c = tg_matmul(ctx, a, b, false, false);
    tg_graph *g = tu_fwd(ctx, c);
    EXPECT_SHAPE(c, 2, 3, 1, 1);
    EXPECT_DATA(c, 0, 1, 2, 3, 3, 4, 7);
    tu_bwd(ctx, g, c, NULL);
    EXPECT_GRAD(a, 0, 2, 2, 2, 2);
    EXPECT_GRAD(b, 0, 4, 6, 4, 6, 4, 6);
    tu_ctx_free(ctx);
}
END_TEST

/* (2,1,3,4) @ (3,4,5) -> (2,3,3,5): out[i,j] = A[i,0] B[j]; checked against a reference loop,
 * and the gradients of sum(out): dA[i,0,m,k] = sum_j sum_n B[j,k,n] (3 batches of b reach each
 * a matrix), dB[j,k,n] = sum_i sum_m A[i,0,m,k]. */
START_TEST(test_broadcast_2134_345)
{
    tg_dtype dt = tu_dtypes[_i];
    tg_ctx *ctx = tu_ctx_new();
    tg_tensor *a = tu_in(ctx, dt, TG_DIMS(2, 1, 3, 4), "a", NULL);
    tg_tensor *b = tu_in(ctx, dt, TG_DIMS(3, 4, 5), "b", NULL);
    tu_fill_int(a, 3, 1, 7, 3);
    tu_fill_int(b, 5, 2, 9, 4);
    tg_tensor *c = tg_matmul(ctx, a, b, false, false);
    tg_graph *g = tu_fwd(ctx, c);
    EXPECT_SHAPE(c, 2, 3, 3, 5);
    for (int i = 0; i < 2; i++)
        for (int j = 0; j < 3; j++)
            for (int m = 0; m < 3; m++)
                for (int n = 0; n < 5; n++) {
                    double s = 0;
                    for (int k = 0; k < 4; k++)
                        s += tg_get(a, (i * 3 + m) * 4 + k) * tg_get(b, (j * 4 + k) * 5 + n);
                    int64_t idx[4] = {i, j, m, n};
                    ck_assert_double_eq(tg_get_at(c, idx), s);
                }
    tu_bwd(ctx, g, c, NULL);
    for (int i = 0; i < 2; i++)
        for (int m = 0; m < 3; m++)
            for (int k = 0; k < 4; k++) {
                double s = 0;
                for (int j = 0; j < 3; j++)
                    for (int n = 0; n < 5; n++)
                        s += tg_get(b, (j * 4 + k) * 5 + n);
                ck_assert_double_eq(tg_grad_get(a, (i * 3 + m) * 4 + k), s);
            }
    for (int j = 0; j < 3; j++)
        for (int k = 0; k < 4; k++)
            for (int n = 0; n < 5; n++) {
                double s = 0;
                for (int i = 0; i < 2; i++)
                    for (int m = 0; m < 3; m++)
                        s += tg_get(a, (i * 3 + m) * 4 + k);
                ck_assert_double_eq(tg_grad_get(b, (j * 4 + k) * 5 + n), s);
            }
    tu_ctx_free(ctx);
}
END_TEST

/* A rank-2 operand broadcasts against a batched one on either side:
 * (3,4) @ (2,4,5) -> (2,3,5) and (2,3,4) @ (4,5) -> (2,3,5) (a shared weight: its gradient sums
 * over the batch). */
START_TEST(test_broadcast_2d_operand)
{
    tg_dtype dt = tu_dtypes[_i];
    tg_ctx *ctx = tu_ctx_new();
    tg_tensor *a2 = tu_in(ctx, dt, TG_DIMS(3, 4), "a2", NULL);
    tg_tensor *b3 = tu_in(ctx, dt, TG_DIMS(2, 4, 5), "b3", NULL);
    tg_tensor *a3 = tu_in(ctx, dt, TG_DIMS(2, 3, 4), "a3", NULL);
    tg_tensor *b2 = tu_in(ctx, dt, TG_DIMS(4, 5), "b2", NULL);
    tu_fill_int(a2, 2, 1, 5, 2);
    tu_fill_int(b3, 3, 0, 7, 3);
    tu_fill_int(a3, 5, 4, 11, 5);
    tu_fill_int(b2, 7, 1, 6, 2);
    tg_tensor *c1 = tg_matmul(ctx, a2, b3, false, false);
    tg_tensor *c2 = tg_matmul(ctx, a3, b2, false, false);
    EXPECT_SHAPE(c1, 2, 3, 5);
    EXPECT_SHAPE(c2, 2, 3, 5);
    tg_tensor *outs[2] = {c1, c2};
    tg_graph *g = tg_graph_new(ctx, outs, 2);
    ck_assert_ptr_nonnull(g);
    ck_assert_int_eq(tg_graph_forward(g), TG_OK);
    for (int o = 0; o < 2; o++)
        for (int m = 0; m < 3; m++)
            for (int n = 0; n < 5; n++) {
                double s1 = 0, s2 = 0;
                for (int k = 0; k < 4; k++) {
                    s1 += tg_get(a2, m * 4 + k) * tg_get(b3, (o * 4 + k) * 5 + n);
                    s2 += tg_get(a3, (o * 3 + m) * 4 + k) * tg_get(b2, k * 5 + n);
                }
                ck_assert_double_eq(tg_get(c1, (o * 3 + m) * 5 + n), s1);
                ck_assert_double_eq(tg_get(c2, (o * 3 + m) * 5 + n), s2);
            }
    /* d(sum c2)/d b2[k, n] = sum over batch and rows of a3[., ., k] */
    tu_bwd(ctx, g, c2, NULL);
    for (int k = 0; k < 4; k++) {
        double s = 0;
        for (int o = 0; o < 2; o++)
            for (int m = 0; m < 3; m++)
                s += tg_get(a3, (o * 3 + m) * 4 + k);
        for (int n = 0; n < 5; n++)
            ck_assert_double_eq(tg_grad_get(b2, k * 5 + n), s);
    }
    tu_ctx_free(ctx);
}
END_TEST

/* Rank 6 (TG_MAX_RANK) on both sides: (2,1,1,1,2,3) @ (1,3,1,1,3,2) -> (2,3,1,1,2,2). */
START_TEST(test_rank6)
{
    tg_dtype dt = tu_dtypes[_i];
    tg_ctx *ctx = tu_ctx_new();
    tg_tensor *a = tu_in(ctx, dt, TG_DIMS(2, 1, 1, 1, 2, 3), "a", NULL);
    tg_tensor *b = tu_in(ctx, dt, TG_DIMS(1, 3, 1, 1, 3, 2), "b", NULL);
    tu_fill_int(a, 3, 2, 7, 3);
    tu_fill_int(b, 2, 1, 5, 2);
    tg_tensor *c = tg_matmul(ctx, a, b, false, false);
    tg_graph *g = tu_fwd(ctx, c);
    EXPECT_SHAPE(c, 2, 3, 1, 1, 2, 2);
    for (int i = 0; i < 2; i++)
        for (int j = 0; j < 3; j++)
            for (int m = 0; m < 2; m++)
                for (int n = 0; n < 2; n++) {
                    double s = 0;
                    for (int k = 0; k < 3; k++)
                        s += tg_get(a, (i * 2 + m) * 3 + k) * tg_get(b, (j * 3 + k) * 2 + n);
                    ck_assert_double_eq(tg_get(c, ((i * 3 + j) * 2 + m) * 2 + n), s);
                }
    tu_bwd(ctx, g, c, NULL);
    for (int i = 0; i < 2; i++)
        for (int m = 0; m < 2; m++)
            for (int k = 0; k < 3; k++) {
                double s = 0;
                for (int j = 0; j < 3; j++)
                    for (int n = 0; n < 2; n++)
                        s += tg_get(b, (j * 3 + k) * 2 + n);
                ck_assert_double_eq(tg_grad_get(a, (i * 2 + m) * 3 + k), s);
            }
    if (dt == TG_F64)
        tu_assert_gradcheck(ctx, c);
    else
        tu_gradcheck_f32(ctx, c);
    tu_ctx_free(ctx);
}
END_TEST

/* x used as both operands.
 * x = [[1,2],[3,4]]: x x^T = [[5,11],[11,25]], d(sum)/dx = 2 * column sums = [[8,12],[8,12]].
 * x x = [[7,10],[15,22]], d(sum)/dx = row sums of x (as dA) + column sums (as dB)
 *     = [[3,7],[3,7]] + [[4,4],[6,6]] = [[7,11],[9,13]]. */
START_TEST(test_operand_used_twice)
{
    tg_dtype dt = tu_dtypes[_i];
    for (int tb = 0; tb < 2; tb++) {
        tg_ctx *ctx = tu_ctx_new();
        tg_tensor *x = tu_in(ctx, dt, TG_DIMS(2, 2), "x", VALS(1, 2, 3, 4));
        tg_tensor *c = tg_matmul(ctx, x, x, false, tb);
        tg_graph *g = tu_fwd(ctx, c);
        tu_bwd(ctx, g, c, NULL);
        if (tb) {
            EXPECT_DATA(c, 0, 5, 11, 11, 25);
            EXPECT_GRAD(x, 0, 8, 12, 8, 12);
        } else {
            EXPECT_DATA(c, 0, 7, 10, 15, 22);
            EXPECT_GRAD(x, 0, 7, 11, 9, 13);
        }
        tu_ctx_free(ctx);
    }
}
END_TEST

/* Only one operand differentiable: b is a constant, so only a gets a gradient. */
START_TEST(test_const_operand)
{
    tg_dtype dt = tu_dtypes[_i];
    tg_ctx *ctx = tu_ctx_new();
    tg_tensor *a = tu_in(ctx, dt, TG_DIMS(2, 3), "a", k_A);
    tg_tensor *b = tg_const(ctx, dt, TG_DIMS(3, 2), "b");
    tu_set(b, k_B);
    tg_tensor *c = tg_matmul(ctx, a, b, false, false);
    tg_graph *g = tu_fwd(ctx, c);
    ck_assert_int_eq(tg_graph_n_grad_leaves(g), 1);
    tu_bwd(ctx, g, c, VALS(1, 2, 3, 4));
    EXPECT_GRAD(a, 0, 23, 29, 35, 53, 67, 81);
    ck_assert_ptr_null(tg_tensor_grad(b));
    tu_ctx_free(ctx);
}
END_TEST

/* ---- errors ------------------------------------------------------------------------------------ */
START_TEST(test_err_rank)
{
    tg_ctx *ctx = tu_ctx_new();
    tg_tensor *v = tg_input(ctx, TG_F32, TG_DIMS(3), "v");
    tg_tensor *m = tg_input(ctx, TG_F32, TG_DIMS(3, 2), "m");
    ck_assert_ptr_null(tg_matmul(ctx, v, m, false, false));
    tu_assert_error(ctx, TG_ERR_SHAPE, "tg_matmul");
    tu_assert_error(ctx, TG_ERR_SHAPE, "(3)");
    tu_assert_error(ctx, TG_ERR_SHAPE, "(3, 2)");
    tg_ctx_clear_error(ctx);
    ck_assert_ptr_null(tg_matmul(ctx, m, v, false, true));
    tu_assert_error(ctx, TG_ERR_SHAPE, "tg_matmul");
    tg_ctx_clear_error(ctx);
    tg_tensor *s = tg_input(ctx, TG_F32, 0, NULL, "s"); /* rank 0 */
    ck_assert_ptr_null(tg_matmul(ctx, s, s, false, false));
    tu_assert_error(ctx, TG_ERR_SHAPE, "()");
    tu_ctx_free(ctx);
}
END_TEST

START_TEST(test_err_inner)
{
    tg_ctx *ctx = tu_ctx_new();
    tg_tensor *a = tg_input(ctx, TG_F64, TG_DIMS(2, 3), "a");
    tg_tensor *b = tg_input(ctx, TG_F64, TG_DIMS(4, 5), "b");
    ck_assert_ptr_null(tg_matmul(ctx, a, b, false, false));
    tu_assert_error(ctx, TG_ERR_SHAPE, "tg_matmul");
    tu_assert_error(ctx, TG_ERR_SHAPE, "(2, 3)");
    tu_assert_error(ctx, TG_ERR_SHAPE, "(4, 5)");
    tg_ctx_clear_error(ctx);
    /* a (2,3) with ta has K = 2; b (3,2) has K = 3 */
    tg_tensor *b2 = tg_input(ctx, TG_F64, TG_DIMS(3, 2), "b2");
    ck_assert_ptr_null(tg_matmul(ctx, a, b2, true, false));
    tu_assert_error(ctx, TG_ERR_SHAPE, "transposed");
    tu_assert_error(ctx, TG_ERR_SHAPE, "(3, 2)");
    tg_ctx_clear_error(ctx);
    /* with tb, b (2,3) has K = 3 and a (2,3) has K = 3: fine; b2 (3,2) with tb has K = 2: error */
    ck_assert_ptr_nonnull(tg_matmul(ctx, a, a, false, true));
    ck_assert_ptr_null(tg_matmul(ctx, a, b2, false, true));
    tu_assert_error(ctx, TG_ERR_SHAPE, "tg_matmul");
    tu_ctx_free(ctx);
}
END_TEST

START_TEST(test_err_batch)
{
    tg_ctx *ctx = tu_ctx_new();
    tg_tensor *a = tg_input(ctx, TG_F32, TG_DIMS(2, 3, 4), "a");
    tg_tensor *b = tg_input(ctx, TG_F32, TG_DIMS(3, 4, 5), "b");
    ck_assert_ptr_null(tg_matmul(ctx, a, b, false, false));
    tu_assert_error(ctx, TG_ERR_SHAPE, "tg_matmul");
    tu_assert_error(ctx, TG_ERR_SHAPE, "(2, 3, 4)");
    tu_assert_error(ctx, TG_ERR_SHAPE, "(3, 4, 5)");
    tg_ctx_clear_error(ctx);
    tg_tensor *a4 = tg_input(ctx, TG_F32, TG_DIMS(2, 2, 3, 4), "a4");
    tg_tensor *b4 = tg_input(ctx, TG_F32, TG_DIMS(3, 1, 4, 5), "b4");
    ck_assert_ptr_null(tg_matmul(ctx, a4, b4, false, false));
    tu_assert_error(ctx, TG_ERR_SHAPE, "(3, 1, 4, 5)");
    tu_ctx_free(ctx);
}
END_TEST

START_TEST(test_err_dtype_and_context)
{
    tg_ctx *ctx = tu_ctx_new(), *other = tu_ctx_new();
    tg_tensor *a = tg_input(ctx, TG_F32, TG_DIMS(2, 3), "a");
    tg_tensor *b64 = tg_input(ctx, TG_F64, TG_DIMS(3, 2), "b64");
    ck_assert_ptr_null(tg_matmul(ctx, a, b64, false, false));
    tu_assert_error(ctx, TG_ERR_DTYPE, "tg_matmul");
    tu_assert_error(ctx, TG_ERR_DTYPE, "f64");
    tg_ctx_clear_error(ctx);
    tg_tensor *bo = tg_input(other, TG_F32, TG_DIMS(3, 2), "b_other");
    ck_assert_ptr_null(tg_matmul(ctx, a, bo, false, false));
    tu_assert_error(ctx, TG_ERR_ARG, "tg_matmul");
    tu_assert_error(ctx, TG_ERR_ARG, "another context");
    ck_assert_int_eq(tg_ctx_status(other), TG_OK); /* the other context is not touched */
    tg_ctx_clear_error(ctx);
    ck_assert_ptr_null(tg_matmul(ctx, bo, a, false, false));
    tu_assert_error(ctx, TG_ERR_ARG, "another context");
    tu_ctx_free(other);
    tu_ctx_free(ctx);
}
END_TEST

/* NULL operands propagate NULL; the first error sticks; chained builders return NULL; the graph
 * refuses to build while a builder error is pending, and builds again once it is cleared. */
START_TEST(test_err_first_sticks)
{
    tg_ctx *ctx = tu_ctx_new();
    tg_tensor *a = tg_input(ctx, TG_F32, TG_DIMS(2, 3), "a");
    tg_tensor *b = tg_input(ctx, TG_F32, TG_DIMS(3, 2), "b");
    /* NULL with no error pending: NULL back, nothing recorded */
    ck_assert_ptr_null(tg_matmul(ctx, NULL, b, false, false));
    ck_assert_ptr_null(tg_matmul(ctx, a, NULL, false, false));
    ck_assert_int_eq(tg_ctx_status(ctx), TG_OK);
    tg_tensor *good = tg_matmul(ctx, a, b, false, false);
    ck_assert_ptr_nonnull(good);
    /* first error: inner dims */
    tg_tensor *bad = tg_matmul(ctx, a, a, false, false);
    ck_assert_ptr_null(bad);
    tu_assert_error(ctx, TG_ERR_SHAPE, "inner");
    char first[512];
    snprintf(first, sizeof first, "%s", tg_ctx_message(ctx));
    /* chained: every later builder given the NULL returns NULL and keeps the first message */
    tg_tensor *chain = tg_matmul(ctx, tg_matmul(ctx, bad, b, false, false), b, true, false);
    ck_assert_ptr_null(chain);
    ck_assert_ptr_null(tg_sum_all(ctx, chain));
    /* a second, different error is not recorded over the first */
    tg_tensor *v = tg_input(ctx, TG_F64, TG_DIMS(2, 3), "v");
    ck_assert_ptr_null(tg_matmul(ctx, a, v, false, true));
    ck_assert_int_eq(tg_ctx_status(ctx), TG_ERR_SHAPE);
    ck_assert_str_eq(tg_ctx_message(ctx), first);
    /* a graph over a perfectly good tensor is refused while the error is pending */
    tg_graph *g = tu_assert_graph_refused(ctx, good, first);
    ck_assert_int_eq(tg_graph_forward(g), TG_OK);
    tu_ctx_free(ctx);
}
END_TEST

/* ---- gradcheck --------------------------------------------------------------------------------- */
/* Shapes differ from tools/cli/opcases.c: row and column vectors, non-square, size-1 batch dims,
 * broadcasting with both flags. */
static tg_tensor *gc_case(tg_ctx *ctx, tg_dtype dt, int which)
{
    switch (which) {
    case 0: return tg_matmul(ctx, GIN("a", 1, 5), GIN("b", 5, 1), false, false);  /* (1,1) */
    case 1: return tg_matmul(ctx, GIN("a", 5, 1), GIN("b", 1, 3), false, false);  /* outer */
    case 2: return tg_matmul(ctx, GIN("a", 5, 2), GIN("b", 2, 3), false, false);
    case 3: return tg_matmul(ctx, GIN("a", 3, 1, 2, 4), GIN("b", 2, 4, 3), false, false);
    case 4: return tg_matmul(ctx, GIN("q", 1, 4, 3), GIN("k", 2, 5, 3), false, true);
    case 5: return tg_matmul(ctx, GIN("a", 4, 1), GIN("b", 4, 3), true, false);
    case 6: return tg_matmul(ctx, GIN("a", 2, 1, 3, 2), GIN("b", 1, 3, 4, 3), true, true);
    case 7: return tg_matmul(ctx, GIN("a", 9, 2), GIN("b", 3, 2, 1), false, false);
    default: {
        tg_tensor *x = GIN("x", 2, 3, 4); /* x^T x per batch: x used twice with ta */
        return tg_matmul(ctx, x, x, true, false);
    }
    }
}
#define N_GC_CASES 9

START_TEST(test_gradcheck_f64)
{
    tu_gradcheck_case(gc_case, TG_F64, _i, 100 + (uint64_t)_i);
}
END_TEST

START_TEST(test_gradcheck_f32)
{
    static const int cases[] = {2, 3, 4, 6};
    tu_gradcheck_case(gc_case, TG_F32, cases[_i], 200 + (uint64_t)_i);
}
END_TEST

/* ---- thread invariance ------------------------------------------------------------------------ */
/* Sizes exceed TG_PAR_MIN = 32768 scalar ops so the parallel paths engage (per-batch GEMMs and
 * the row-block split inside one GEMM). Under valgrind they shrink but stay above it. */
static tg_tensor *ti_batched(tg_ctx *ctx, tg_dtype dt) /* (4,64,64) @ (4,64,64) */
{
    int64_t n = tu_big(64, 40);
    return tg_matmul(ctx, GIN("a", 4, n, n), GIN("b", 4, n, n), false, false);
}
static tg_tensor *ti_single(tg_ctx *ctx, tg_dtype dt) /* one GEMM split over several C tiles */
{
    int64_t m = tu_big(200, 100), k = tu_big(96, 40), n = tu_big(300, 140);
    return tg_matmul(ctx, GIN("a", m, k), GIN("b", k, n), false, false);
}
static tg_tensor *ti_tb(tg_ctx *ctx, tg_dtype dt) /* attention scores q k^T, (2,8,..) */
{
    int64_t t = tu_big(48, 24), d = tu_big(40, 20);
    return tg_matmul(ctx, GIN("q", 2, 8, t, d), GIN("k", 2, 8, t, d), false, true);
}
static tg_tensor *ti_ta(tg_ctx *ctx, tg_dtype dt) /* ta and tb together, shared b broadcast */
{
    int64_t n = tu_big(64, 36);
    return tg_matmul(ctx, GIN("a", 3, n, n + 1), GIN("b", n - 2, n), true, true);
}
static tg_tensor *ti_bcast(tg_ctx *ctx, tg_dtype dt) /* (2,1,n,n) @ (3,n,n): both broadcast */
{
    int64_t n = tu_big(48, 32);
    return tg_matmul(ctx, GIN("a", 2, 1, n, n), GIN("b", 3, n, n), false, false);
}

static const tu_build_fn k_ti_builds[] = {ti_batched, ti_single, ti_tb, ti_ta,
                                            ti_bcast};
#define N_TI (int)(sizeof k_ti_builds / sizeof k_ti_builds[0])

/* ---- edge cases -------------------------------------------------------------------------------- */
/* Run backward twice without zero_grad (upstream dy = fixed values) and assert every leaf
 * gradient is exactly twice the first one, as PyTorch's `grad += new_grad` gives; then that
 * tg_graph_zero_grad resets them. */
static void assert_backward_twice_exact(tg_ctx *ctx, tg_tensor *y)
{
    tg_graph *g = tu_fwd(ctx, y);
    int64_t n = tg_tensor_numel(y);
    double *dy = malloc(sizeof(double) * (size_t)n);
    for (int64_t i = 0; i < n; i++)
        dy[i] = sin(0.7 * (double)i) + 0.25;
    tu_assert_backward_twice(ctx, g, y, dy, NULL, 0);
    free(dy);
    tg_graph_zero_grad(g);
    for (int64_t l = 0; l < tg_graph_n_grad_leaves(g); l++) {
        tg_tensor *t = tg_graph_grad_leaf(g, l);
        for (int64_t i = 0; i < tg_tensor_numel(t); i++)
            ck_assert_double_eq(tg_grad_get(t, i), 0);
    }
}

/* Each operand used once, no batch broadcast, short reductions: exact doubling. */
START_TEST(test_backward_twice_accumulates)
{
    tg_dtype dt = tu_dtypes[_i % 2];
    tg_ctx *ctx = tu_ctx_new();
    tg_ctx_seed(ctx, 7);
    tg_tensor *c;
    switch (_i / 2) {
    case 0: c = tg_matmul(ctx, GIN("a", 2, 5, 7), GIN("b", 2, 7, 6), false, false); break;
    case 1: c = tg_matmul(ctx, GIN("a", 2, 5, 7), GIN("b", 2, 6, 7), false, true); break;
    default: c = tg_matmul(ctx, GIN("a", 2, 7, 5), GIN("b", 2, 6, 7), true, true); break;
    }
    assert_backward_twice_exact(ctx, c);
    tu_ctx_free(ctx);
}
END_TEST

/* The same guarantee where the gradient is a sum of several GEMM contributions: b shared by
 * every batch (its gradient sums the per-batch products), and reductions longer than the GEMM's
 * K blocking (dB = A^T dC reduces over M = 150, dA = dC B^T over N = 150). Accumulating each
 * partial product straight into the leaf's existing gradient makes the second result
 * ((g + p0) + p1) instead of g + (p0 + p1), which is not exactly 2 g. */
START_TEST(test_backward_twice_accumulates_multi_term)
{
    tg_dtype dt = tu_dtypes[_i % 2];
    tg_ctx *ctx = tu_ctx_new();
    tg_ctx_seed(ctx, 8);
    tg_tensor *c;
    switch (_i / 2) {
    case 0: c = tg_matmul(ctx, GIN("a", 2, 5, 7), GIN("b", 7, 6), false, false); break;
    case 1: c = tg_matmul(ctx, GIN("a", 150, 5), GIN("b", 5, 3), false, false); break;
    default: c = tg_matmul(ctx, GIN("a", 3, 5), GIN("b", 150, 5), false, true); break;
    }
    assert_backward_twice_exact(ctx, c);
    tu_ctx_free(ctx);
}
END_TEST

/* The same exactness with small-integer data (no rounding anywhere). */
START_TEST(test_backward_twice_integer)
{
    tg_dtype dt = tu_dtypes[_i];
    tg_ctx *ctx = tu_ctx_new();
    tg_tensor *a = tu_in(ctx, dt, TG_DIMS(2, 3), "a", k_A);
    tg_tensor *b = tu_in(ctx, dt, TG_DIMS(3, 2), "b", k_B);
    tg_tensor *c = tg_matmul(ctx, a, b, false, false);
    tg_graph *g = tu_fwd(ctx, c);
    tu_bwd(ctx, g, c, VALS(1, 2, 3, 4));
    tu_bwd(ctx, g, c, VALS(1, 2, 3, 4));
    EXPECT_GRAD(a, 0, 46, 58, 70, 106, 134, 162);
    EXPECT_GRAD(b, 0, 26, 36, 34, 48, 42, 60);
    tu_ctx_free(ctx);
}
END_TEST

/* A built graph is re-run with new input data: new results, no rebuild. */
START_TEST(test_rerun_new_data)
{
    tg_dtype dt = tu_dtypes[_i];
    tg_ctx *ctx = tu_ctx_new();
    tg_tensor *a = tu_in(ctx, dt, TG_DIMS(2, 3), "a", k_A);
    tg_tensor *b = tu_in(ctx, dt, TG_DIMS(3, 2), "b", k_B);
    tg_tensor *c = tg_matmul(ctx, a, b, false, false);
    tg_graph *g = tu_fwd(ctx, c);
    EXPECT_DATA(c, 0, 58, 64, 139, 154);
    /* a = identity-like [[1,0,0],[0,1,0]]: C = first two rows of B */
    tu_set(a, VALS(1, 0, 0, 0, 1, 0));
    ck_assert_int_eq(tg_graph_forward(g), TG_OK);
    EXPECT_DATA(c, 0, 7, 8, 9, 10);
    tu_set(b, VALS(-1, 0, 0, -1, 2, 2));
    ck_assert_int_eq(tg_graph_forward(g), TG_OK);
    EXPECT_DATA(c, 0, -1, 0, 0, -1);
    tu_ctx_free(ctx);
}
END_TEST

/* 1x1 matrices and large-K dot products still give exact integer sums. */
START_TEST(test_degenerate_sizes)
{
    tg_dtype dt = tu_dtypes[_i];
    tg_ctx *ctx = tu_ctx_new();
    tg_tensor *a = tu_in(ctx, dt, TG_DIMS(1, 1), "a", VALS(-3));
    tg_tensor *b = tu_in(ctx, dt, TG_DIMS(1, 1), "b", VALS(4));
    tg_tensor *c = tg_matmul(ctx, a, b, true, true);
    tg_graph *g = tu_fwd(ctx, c);
    EXPECT_SHAPE(c, 1, 1);
    EXPECT_DATA(c, 0, -12);
    tu_bwd(ctx, g, c, NULL);
    EXPECT_GRAD(a, 0, 4);
    EXPECT_GRAD(b, 0, -3);
    /* (1, 37) @ (37, 1) with tb (lanes of 8 plus a tail of 5): sum_k k * 1 = 666 */
    tg_tensor *r = tu_in(ctx, dt, TG_DIMS(1, 37), "r", NULL);
    tg_tensor *o = tu_in(ctx, dt, TG_DIMS(1, 37), "o", NULL);
    for (int k = 0; k < 37; k++) {
        tg_set(r, k, k);
        tg_set(o, k, 1);
    }
    tg_tensor *d = tg_matmul(ctx, r, o, false, true);
    tu_fwd(ctx, d);
    EXPECT_DATA(d, 0, 666);
    tu_ctx_free(ctx);
}
END_TEST

static Suite *matmul_suite(void)
{
    Suite *s = suite_create("ops_matmul");
    TCase *tc = tu_tcase(s, "forward", 0);
    tcase_add_loop_test(tc, test_forward_2x3_3x2, 0, 2);
    tcase_add_loop_test(tc, test_grad_of_sum, 0, 2);
    tcase_add_loop_test(tc, test_transpose_flags, 0, 2);
    tcase_add_loop_test(tc, test_transpose_shapes, 0, 2);
    tcase_add_loop_test(tc, test_broadcast_by_hand, 0, 2);
    tcase_add_loop_test(tc, test_broadcast_2134_345, 0, 2);
    tcase_add_loop_test(tc, test_broadcast_2d_operand, 0, 2);
    tcase_add_loop_test(tc, test_operand_used_twice, 0, 2);
    tcase_add_loop_test(tc, test_const_operand, 0, 2);

    tc = tu_tcase(s, "errors", 0);
    tcase_add_test(tc, test_err_rank);
    tcase_add_test(tc, test_err_inner);
    tcase_add_test(tc, test_err_batch);
    tcase_add_test(tc, test_err_dtype_and_context);
    tcase_add_test(tc, test_err_first_sticks);

    tc = tu_tcase(s, "gradcheck", 60);
    tcase_add_loop_test(tc, test_gradcheck_f64, 0, N_GC_CASES);
    tcase_add_loop_test(tc, test_gradcheck_f32, 0, 4);

    tu_add_thread_tcase(s, k_ti_builds, N_TI);

    tc = tu_tcase(s, "edge", 60);
    tcase_add_loop_test(tc, test_rank6, 0, 2);
    tcase_add_loop_test(tc, test_backward_twice_accumulates, 0, 6);
    tcase_add_loop_test(tc, test_backward_twice_accumulates_multi_term, 0, 6);
    tcase_add_loop_test(tc, test_backward_twice_integer, 0, 2);
    tcase_add_loop_test(tc, test_rerun_new_data, 0, 2);
    tcase_add_loop_test(tc, test_degenerate_sizes, 0, 2);
    return s;
}

int main(void) { return tu_run(matmul_suite()); }
