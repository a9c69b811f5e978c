/*
 * test_ops_shape.c - tg_transpose, tg_permute, tg_reshape, tg_narrow: hand-computed values and
 * gradients (f32 and f64), every axis/shape/argument error, gradcheck on several shapes, thread
 * invariance, and the edge cases (rank 0, rank 6, a tensor used twice, accumulation, re-running,
 * reshape as a view).
 *
 * Most inputs hold 0, 1, 2, ... so that y[idx] can be checked against an index formula.
 */
#include "testutil.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- helpers --------------------------------------------------------------------------------- */
/* x = 0, 1, 2, ... */
static tg_tensor *iota(tg_ctx *ctx, tg_dtype dt, int rank, const int64_t *shape, const char *name)
{
    tg_tensor *t = tu_in(ctx, dt, rank, shape, name, NULL);
    for (int64_t i = 0; i < tg_tensor_numel(t); i++)
        tg_set(t, i, (double)i);
    return t;
}

/* dy = 0, 1, 2, ... of y's shape */
static void bwd_iota(tg_ctx *ctx, tg_graph *g, tg_tensor *y)
{
    int64_t n = tg_tensor_numel(y);
    double *v = malloc(sizeof(double) * (size_t)n);
    for (int64_t i = 0; i < n; i++)
        v[i] = (double)i;
    tu_bwd(ctx, g, y, v);
    free(v);
}

/* ---- transpose ------------------------------------------------------------------------------ */
/* x (2,3) = [[0,1,2],[3,4,5]] -> x^T (3,2) = [[0,3],[1,4],[2,5]];
 * dy (3,2) = [[0,1],[2,3],[4,5]] -> dx = dy^T = [[0,2,4],[1,3,5]] */
START_TEST(test_transpose_2d)
{
    tg_dtype dt = tu_dtypes[_i];
    tg_ctx *ctx = tu_ctx_new();
    tg_tensor *x = iota(ctx, dt, TG_DIMS(2, 3), "x");
    tg_tensor *y = tg_transpose(ctx, x, 0, 1);
    tg_graph *g = tu_fwd(ctx, y);
    EXPECT_SHAPE(y, 3, 2);
    ck_assert_str_eq(tg_tensor_op_name(y), "transpose");
    EXPECT_DATA(y, 0, 0, 3, 1, 4, 2, 5);
    bwd_iota(ctx, g, y);
    EXPECT_GRAD(x, 0, 0, 2, 4, 1, 3, 5);
    tu_ctx_free(ctx);
}
END_TEST

/* x (2,3,4) = iota, transpose(0, 2) -> (4,3,2) with y[k,j,i] = x[i,j,k] = 12 i + 4 j + k.
 * Negative axes (-1, -3) and the reversed order (2, 0) give the same; (1, 1) is the identity. */
START_TEST(test_transpose_3d)
{
    tg_dtype dt = tu_dtypes[_i];
    tg_ctx *ctx = tu_ctx_new();
    tg_tensor *x = iota(ctx, dt, TG_DIMS(2, 3, 4), "x");
    tg_tensor *ys[4] = {tg_transpose(ctx, x, 0, 2), tg_transpose(ctx, x, -1, -3),
                        tg_transpose(ctx, x, 2, 0), tg_transpose(ctx, x, 1, 1)};
    tg_graph *g = tg_graph_new(ctx, ys, 4);
    ck_assert_ptr_nonnull(g);
    ck_assert_int_eq(tg_graph_forward(g), TG_OK);
    for (int v = 0; v < 3; v++) {
        EXPECT_SHAPE(ys[v], 4, 3, 2);
        for (int k = 0; k < 4; k++)
            for (int j = 0; j < 3; j++)
                for (int i = 0; i < 2; i++)
                    ck_assert_double_eq(tg_get(ys[v], (k * 3 + j) * 2 + i), 12 * i + 4 * j + k);
    }
    EXPECT_SHAPE(ys[3], 2, 3, 4);
    for (int i = 0; i < 24; i++)
        ck_assert_double_eq(tg_get(ys[3], i), i);
    /* gradient of transpose(0,2) with dy = iota: dx[i,j,k] = dy[k,j,i] = 6 k + 2 j + i */
    bwd_iota(ctx, g, ys[0]);
    for (int i = 0; i < 2; i++)
        for (int j = 0; j < 3; j++)
            for (int k = 0; k < 4; k++)
                ck_assert_double_eq(tg_grad_get(x, (i * 3 + j) * 4 + k), 6 * k + 2 * j + i);
    tu_ctx_free(ctx);
}
END_TEST

/* ---- permute -------------------------------------------------------------------------------- */
/* x (2,3,4) = iota, perm (2,0,1) -> (4,2,3), y[a,b,c] = x[b,c,a] = 12 b + 4 c + a:
 * y[0] = [[0,4,8],[12,16,20]], y[1] = [[1,5,9],[13,17,21]], ...
 * dy = iota of (4,2,3): dx[b,c,a] = dy[a,b,c] = 6 a + 3 b + c. perm (-1,0,-2) is the same. */
START_TEST(test_permute_3d)
{
    tg_dtype dt = tu_dtypes[_i];
    for (int neg = 0; neg < 2; neg++) {
        tg_ctx *ctx = tu_ctx_new();
        tg_tensor *x = iota(ctx, dt, TG_DIMS(2, 3, 4), "x");
        static const int perm[] = {2, 0, 1}, perm_neg[] = {-1, 0, -2};
        tg_tensor *y = tg_permute(ctx, x, neg ? perm_neg : perm);
        tg_graph *g = tu_fwd(ctx, y);
        EXPECT_SHAPE(y, 4, 2, 3);
        ck_assert_str_eq(tg_tensor_op_name(y), "permute");
        for (int a = 0; a < 4; a++)
            for (int b = 0; b < 2; b++)
                for (int c = 0; c < 3; c++)
                    ck_assert_double_eq(tg_get(y, (a * 2 + b) * 3 + c), 12 * b + 4 * c + a);
        bwd_iota(ctx, g, y);
        for (int b = 0; b < 2; b++)
            for (int c = 0; c < 3; c++)
                for (int a = 0; a < 4; a++)
                    ck_assert_double_eq(tg_grad_get(x, (b * 3 + c) * 4 + a), 6 * a + 3 * b + c);
        tu_ctx_free(ctx);
    }
}
END_TEST

/* Rank 6 (TG_MAX_RANK): x (2,1,3,1,2,2) = iota, perm (5,3,1,0,2,4) -> (2,1,1,2,3,2).
 * y[i5,i3,i1,i0,i2,i4] = x[i0,i1,i2,i3,i4,i5]; x's row-major strides are (12,12,4,4,2,1). */
START_TEST(test_permute_rank6)
{
    tg_dtype dt = tu_dtypes[_i];
    tg_ctx *ctx = tu_ctx_new();
    tg_tensor *x = iota(ctx, dt, TG_DIMS(2, 1, 3, 1, 2, 2), "x");
    tg_tensor *y = tg_permute(ctx, x, (const int[]){5, 3, 1, 0, 2, 4});
    tg_graph *g = tu_fwd(ctx, y);
    EXPECT_SHAPE(y, 2, 1, 1, 2, 3, 2);
    int64_t n = 0;
    for (int i5 = 0; i5 < 2; i5++)
        for (int i0 = 0; i0 < 2; i0++)
            for (int i2 = 0; i2 < 3; i2++)
                for (int i4 = 0; i4 < 2; i4++)
                    ck_assert_double_eq(tg_get(y, n++), 12 * i0 + 4 * i2 + 2 * i4 + i5);
    bwd_iota(ctx, g, y);
    /* the gradient is the inverse permutation of dy: permuting back gives x's layout */
    n = 0;
    for (int i5 = 0; i5 < 2; i5++)
        for (int i0 = 0; i0 < 2; i0++)
            for (int i2 = 0; i2 < 3; i2++)
                for (int i4 = 0; i4 < 2; i4++)
                    ck_assert_double_eq(tg_grad_get(x, 12 * i0 + 4 * i2 + 2 * i4 + i5),
                                        (double)n++);
    if (dt == TG_F64)
        tu_assert_gradcheck(ctx, y);
    else
        tu_gradcheck_f32(ctx, y);
    tu_ctx_free(ctx);
}
END_TEST

/* The multi-head split and merge: x (B,T,D) = (2,3,4) -> reshape (B,T,H,Dh) = (2,3,2,2) ->
 * permute (0,2,1,3) -> (B,H,T,Dh) with y[b,h,t,d] = x[b,t,2h+d] = 12 b + 4 t + 2 h + d;
 * merging back (permute (0,2,1,3), reshape (2,3,4)) is the identity, value and gradient. */
START_TEST(test_heads_split_merge)
{
    tg_dtype dt = tu_dtypes[_i];
    tg_ctx *ctx = tu_ctx_new();
    tg_tensor *x = iota(ctx, dt, TG_DIMS(2, 3, 4), "x");
    static const int p0213[] = {0, 2, 1, 3};
    tg_tensor *heads = tg_permute(ctx, tg_reshape(ctx, x, TG_DIMS(2, 3, 2, 2)), p0213);
    tg_tensor *merged = tg_reshape(ctx, tg_permute(ctx, heads, p0213), TG_DIMS(2, 3, -1));
    tg_graph *g = tu_fwd(ctx, merged);
    EXPECT_SHAPE(heads, 2, 2, 3, 2);
    EXPECT_SHAPE(merged, 2, 3, 4);
    for (int b = 0; b < 2; b++)
        for (int h = 0; h < 2; h++)
            for (int t = 0; t < 3; t++)
                for (int d = 0; d < 2; d++)
                    ck_assert_double_eq(tg_get(heads, ((b * 2 + h) * 3 + t) * 2 + d),
                                        12 * b + 4 * t + 2 * h + d);
    for (int i = 0; i < 24; i++)
        ck_assert_double_eq(tg_get(merged, i), i);
    bwd_iota(ctx, g, merged);
    for (int i = 0; i < 24; i++)
        ck_assert_double_eq(tg_grad_get(x, i), i);
    tu_ctx_free(ctx);
}
END_TEST

/* ---- reshape -------------------------------------------------------------------------------- */
/* x (2,6) = iota: (3,-1) -> (3,4); (-1) -> (12); (2,-1,3) -> (2,2,3); (-1,1,3) -> (4,1,3);
 * the data is the same sequence and the gradient is dy's sequence. */
START_TEST(test_reshape_infer)
{
    tg_dtype dt = tu_dtypes[_i];
    tg_ctx *ctx = tu_ctx_new();
    tg_tensor *x = iota(ctx, dt, TG_DIMS(2, 6), "x");
    tg_tensor *ys[4] = {tg_reshape(ctx, x, TG_DIMS(3, -1)), tg_reshape(ctx, x, TG_DIMS(-1)),
                        tg_reshape(ctx, x, TG_DIMS(2, -1, 3)),
                        tg_reshape(ctx, x, TG_DIMS(-1, 1, 3))};
    EXPECT_SHAPE(ys[0], 3, 4);
    EXPECT_SHAPE(ys[1], 12);
    EXPECT_SHAPE(ys[2], 2, 2, 3);
    EXPECT_SHAPE(ys[3], 4, 1, 3);
    tg_graph *g = tg_graph_new(ctx, ys, 4);
    ck_assert_ptr_nonnull(g);
    ck_assert_int_eq(tg_graph_forward(g), TG_OK);
    for (int v = 0; v < 4; v++) {
        ck_assert_str_eq(tg_tensor_op_name(ys[v]), "reshape");
        for (int i = 0; i < 12; i++)
            ck_assert_double_eq(tg_get(ys[v], i), i);
    }
    bwd_iota(ctx, g, ys[0]);
    for (int i = 0; i < 12; i++)
        ck_assert_double_eq(tg_grad_get(x, i), i);
    tu_ctx_free(ctx);
}
END_TEST

/* Reshape is a view: it shares x's buffer, and a new forward sees x's new data. Also reshape of
 * an op result (a view of the op's buffer) follows the op across re-runs. */
START_TEST(test_reshape_view)
{
    tg_dtype dt = tu_dtypes[_i];
    tg_ctx *ctx = tu_ctx_new();
    tg_tensor *x = tu_in(ctx, dt, TG_DIMS(2, 2), "x", VALS(1, 2, 3, 4));
    tg_tensor *r = tg_reshape(ctx, x, TG_DIMS(4));
    tg_tensor *s = tg_reshape(ctx, tg_scale(ctx, x, 2.0), TG_DIMS(1, 4));
    tg_tensor *outs[2] = {r, s};
    tg_graph *g = tg_graph_new(ctx, outs, 2);
    ck_assert_ptr_nonnull(g);
    ck_assert_ptr_eq(tg_tensor_data(r), tg_tensor_data(x));
    ck_assert_int_eq(tg_graph_forward(g), TG_OK);
    EXPECT_DATA(r, 0, 1, 2, 3, 4);
    EXPECT_DATA(s, 0, 2, 4, 6, 8);
    tu_set(x, VALS(-1, 0.5, 7, 0));
    ck_assert_int_eq(tg_graph_forward(g), TG_OK);
    EXPECT_DATA(r, 0, -1, 0.5, 7, 0);
    EXPECT_DATA(s, 0, -2, 1, 14, 0);
    /* an op result cannot be written through the view */
    ck_assert_int_eq(tg_tensor_set_data(r, VALS(0, 0, 0, 0), TG_F64, 4), TG_ERR_STATE);
    tu_ctx_free(ctx);
}
END_TEST

/* Rank 0 <-> rank 1..6: (1,1,1) -> () -> (1) and () -> (-1); rank 6 from (24) -> (2,1,3,1,2,2)
 * and back. d(y)/dx for the scalar chain is 1. */
START_TEST(test_reshape_rank0_rank6)
{
    tg_dtype dt = tu_dtypes[_i];
    tg_ctx *ctx = tu_ctx_new();
    tg_tensor *x = tu_in(ctx, dt, TG_DIMS(1, 1, 1), "x", VALS(-2.5));
    tg_tensor *s = tg_reshape(ctx, x, 0, NULL);
    tg_tensor *v = tg_reshape(ctx, s, TG_DIMS(-1));
    tg_tensor *m = tg_reshape(ctx, s, TG_DIMS(1, 1));
    ck_assert_int_eq(tg_tensor_rank(s), 0);
    ck_assert_int_eq(tg_tensor_numel(s), 1);
    EXPECT_SHAPE(v, 1);
    EXPECT_SHAPE(m, 1, 1);
    tg_graph *g = tu_fwd(ctx, v);
    EXPECT_DATA(s, 0, -2.5);
    EXPECT_DATA(v, 0, -2.5);
    tu_bwd(ctx, g, v, VALS(3));
    EXPECT_GRAD(x, 0, 3);

    tg_tensor *z = iota(ctx, dt, TG_DIMS(24), "z");
    tg_tensor *r6 = tg_reshape(ctx, z, TG_DIMS(2, 1, 3, 1, 2, 2));
    tg_tensor *back = tg_reshape(ctx, r6, TG_DIMS(4, -1));
    EXPECT_SHAPE(r6, 2, 1, 3, 1, 2, 2);
    EXPECT_SHAPE(back, 4, 6);
    g = tu_fwd(ctx, back);
    int64_t idx[6] = {1, 0, 2, 0, 1, 0};
    ck_assert_double_eq(tg_get_at(r6, idx), 12 + 8 + 2);
    for (int i = 0; i < 24; i++)
        ck_assert_double_eq(tg_get(back, i), i);
    tu_ctx_free(ctx);
}
END_TEST

/* ---- narrow --------------------------------------------------------------------------------- */
/* x (4,3) = iota [[0,1,2],[3,4,5],[6,7,8],[9,10,11]]
 * narrow(0, 1, 2) = [[3,4,5],[6,7,8]]   narrow(1, 2, 1) = [[2],[5],[8],[11]]
 * narrow(-1, 0, 2) = [[0,1],[3,4],[6,7],[9,10]]   narrow(0, 0, 4) = x
 * d(sum narrow(0,1,2))/dx = rows 1 and 2 ones, rows 0 and 3 zero. */
START_TEST(test_narrow_2d)
{
    tg_dtype dt = tu_dtypes[_i];
    tg_ctx *ctx = tu_ctx_new();
    tg_tensor *x = iota(ctx, dt, TG_DIMS(4, 3), "x");
    tg_tensor *ys[4] = {tg_narrow(ctx, x, 0, 1, 2), tg_narrow(ctx, x, 1, 2, 1),
                        tg_narrow(ctx, x, -1, 0, 2), tg_narrow(ctx, x, 0, 0, 4)};
    tg_graph *g = tg_graph_new(ctx, ys, 4);
    ck_assert_ptr_nonnull(g);
    ck_assert_int_eq(tg_graph_forward(g), TG_OK);
    EXPECT_SHAPE(ys[0], 2, 3);
    EXPECT_SHAPE(ys[1], 4, 1);
    EXPECT_SHAPE(ys[2], 4, 2);
    EXPECT_SHAPE(ys[3], 4, 3);
    ck_assert_str_eq(tg_tensor_op_name(ys[0]), "narrow");
    EXPECT_DATA(ys[0], 0, 3, 4, 5, 6, 7, 8);
    EXPECT_DATA(ys[1], 0, 2, 5, 8, 11);
    EXPECT_DATA(ys[2], 0, 0, 1, 3, 4, 6, 7, 9, 10);
    EXPECT_DATA(ys[3], 0, 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11);
    tu_bwd(ctx, g, ys[0], NULL);
    EXPECT_GRAD(x, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 0, 0, 0);
    tg_graph_zero_grad(g);
    tu_bwd(ctx, g, ys[1], VALS(1, 2, 3, 4));
    EXPECT_GRAD(x, 0, 0, 0, 1, 0, 0, 2, 0, 0, 3, 0, 0, 4);
    tu_ctx_free(ctx);
}
END_TEST

/* x (2,4,3) = iota, narrow(1, 1, 2) -> (2,2,3), y[o,l,i] = x[o,1+l,i] = 12 o + 3 (1 + l) + i;
 * rank 6: x (2,1,3,1,2,2) narrow(2, 2, 1) -> (2,1,1,1,2,2), y = x[:, :, 2] = 12 o + 8 + r. */
START_TEST(test_narrow_inner_axes)
{
    tg_dtype dt = tu_dtypes[_i];
    tg_ctx *ctx = tu_ctx_new();
    tg_tensor *x = iota(ctx, dt, TG_DIMS(2, 4, 3), "x");
    tg_tensor *y = tg_narrow(ctx, x, 1, 1, 2);
    tg_tensor *x6 = iota(ctx, dt, TG_DIMS(2, 1, 3, 1, 2, 2), "x6");
    tg_tensor *y6 = tg_narrow(ctx, x6, 2, 2, 1);
    tg_tensor *outs[2] = {y, y6};
    tg_graph *g = tg_graph_new(ctx, outs, 2);
    ck_assert_ptr_nonnull(g);
    ck_assert_int_eq(tg_graph_forward(g), TG_OK);
    EXPECT_SHAPE(y, 2, 2, 3);
    for (int o = 0; o < 2; o++)
        for (int l = 0; l < 2; l++)
            for (int i = 0; i < 3; i++)
                ck_assert_double_eq(tg_get(y, (o * 2 + l) * 3 + i), 12 * o + 3 * (1 + l) + i);
    EXPECT_SHAPE(y6, 2, 1, 1, 1, 2, 2);
    for (int o = 0; o < 2; o++)
        for (int r = 0; r < 4; r++)
            ck_assert_double_eq(tg_get(y6, o * 4 + r), 12 * o + 8 + r);
    bwd_iota(ctx, g, y6);
    for (int i = 0; i < 24; i++) {
        int o = i / 12, j = (i % 12) / 4, r = i % 4;
        ck_assert_double_eq(tg_grad_get(x6, i), j == 2 ? o * 4 + r : 0);
    }
    tu_ctx_free(ctx);
}
END_TEST

/* ---- a tensor used twice -------------------------------------------------------------------- */
/* Overlapping slices accumulate: y = x[0:3] + x[1:4] = [x0+x1, x1+x2, x2+x3],
 * d(sum y)/dx = [1, 2, 2, 1]. And x + x^T (2,2): d(sum)/dx = 2. */
START_TEST(test_used_twice)
{
    tg_dtype dt = tu_dtypes[_i];
    tg_ctx *ctx = tu_ctx_new();
    tg_tensor *x = tu_in(ctx, dt, TG_DIMS(4), "x", VALS(1, 10, 100, 1000));
    tg_tensor *y = tg_add(ctx, tg_narrow(ctx, x, 0, 0, 3), tg_narrow(ctx, x, 0, 1, 3));
    tg_graph *g = tu_fwd(ctx, y);
    EXPECT_DATA(y, 0, 11, 110, 1100);
    tu_bwd(ctx, g, y, NULL);
    EXPECT_GRAD(x, 0, 1, 2, 2, 1);

    tg_tensor *m = tu_in(ctx, dt, TG_DIMS(2, 2), "m", VALS(1, 2, 3, 4));
    tg_tensor *sym = tg_add(ctx, m, tg_transpose(ctx, m, 0, 1));
    g = tu_fwd(ctx, sym);
    EXPECT_DATA(sym, 0, 2, 5, 5, 8);
    tu_bwd(ctx, g, sym, VALS(1, 2, 3, 4)); /* dm = dy + dy^T = [[2,5],[5,8]] */
    EXPECT_GRAD(m, 0, 2, 5, 5, 8);
    tu_ctx_free(ctx);
}
END_TEST

/* Two backwards without zero_grad give exactly twice the gradient (each op adds dy once). */
START_TEST(test_backward_twice)
{
    tg_dtype dt = tu_dtypes[_i];
    tg_ctx *ctx = tu_ctx_new();
    tg_ctx_seed(ctx, 11);
    tg_tensor *x = tu_input(ctx, dt, TG_DIMS(3, 4, 5), "x", -1, 1);
    tg_tensor *y = tg_narrow(ctx, tg_permute(ctx, tg_reshape(ctx, x, TG_DIMS(3, 20)),
                                             (const int[]){1, 0}), 0, 3, 15);
    tg_tensor *z = tg_transpose(ctx, y, 0, 1);
    tg_graph *g = tu_fwd(ctx, z);
    double dy[45];
    for (int i = 0; i < 45; i++)
        dy[i] = cos(0.3 * i) * 1.7;
    tu_assert_backward_twice(ctx, g, z, dy, &x, 1);
    tu_ctx_free(ctx);
}
END_TEST

/* Re-running with new data gives new results without rebuilding. */
START_TEST(test_rerun_new_data)
{
    tg_dtype dt = tu_dtypes[_i];
    tg_ctx *ctx = tu_ctx_new();
    tg_tensor *x = tu_in(ctx, dt, TG_DIMS(2, 3), "x", VALS(1, 2, 3, 4, 5, 6));
    tg_tensor *y = tg_narrow(ctx, tg_transpose(ctx, x, 0, 1), 0, 1, 2); /* rows 1..2 of x^T */
    tg_graph *g = tu_fwd(ctx, y);
    EXPECT_DATA(y, 0, 2, 5, 3, 6);
    tu_set(x, VALS(-1, -2, -3, -4, -5, -6));
    ck_assert_int_eq(tg_graph_forward(g), TG_OK);
    EXPECT_DATA(y, 0, -2, -5, -3, -6);
    tu_ctx_free(ctx);
}
END_TEST

/* Rank 0: transposing or narrowing a scalar is an axis error; an (empty) permutation of a scalar
 * is the scalar. */
START_TEST(test_rank0)
{
    tg_dtype dt = tu_dtypes[_i];
    tg_ctx *ctx = tu_ctx_new();
    tg_tensor *s = tu_in(ctx, dt, 0, NULL, "s", VALS(4.5));
    tg_tensor *p = tg_permute(ctx, s, (const int[]){0});
    ck_assert_ptr_nonnull(p);
    ck_assert_int_eq(tg_tensor_rank(p), 0);
    tg_graph *g = tu_fwd(ctx, p);
    EXPECT_DATA(p, 0, 4.5);
    ck_assert_int_eq(tg_graph_backward(g, p, NULL), TG_OK);
    EXPECT_GRAD(s, 0, 1);
    ck_assert_ptr_null(tg_transpose(ctx, s, 0, 0));
    tu_assert_error(ctx, TG_ERR_AXIS, "tg_transpose");
    tu_assert_error(ctx, TG_ERR_AXIS, "()");
    tg_ctx_clear_error(ctx);
    ck_assert_ptr_null(tg_narrow(ctx, s, 0, 0, 1));
    tu_assert_error(ctx, TG_ERR_AXIS, "tg_narrow");
    tu_ctx_free(ctx);
}
END_TEST

/* ---- errors --------------------------------------------------------------------------------- */
START_TEST(test_err_transpose)
{
    tg_ctx *ctx = tu_ctx_new();
    tg_tensor *x = tg_input(ctx, TG_F32, TG_DIMS(2, 3), "x");
    ck_assert_ptr_null(tg_transpose(ctx, x, 0, 2));
    tu_assert_error(ctx, TG_ERR_AXIS, "tg_transpose");
    tu_assert_error(ctx, TG_ERR_AXIS, "(2, 3)");
    tg_ctx_clear_error(ctx);
    ck_assert_ptr_null(tg_transpose(ctx, x, -3, 0));
    tu_assert_error(ctx, TG_ERR_AXIS, "tg_transpose");
    tg_ctx_clear_error(ctx);
    ck_assert_ptr_null(tg_transpose(ctx, x, 1, 1 << 30));
    tu_assert_error(ctx, TG_ERR_AXIS, "tg_transpose");
    tu_ctx_free(ctx);
}
END_TEST

START_TEST(test_err_permute)
{
    tg_ctx *ctx = tu_ctx_new();
    tg_tensor *x = tg_input(ctx, TG_F64, TG_DIMS(2, 3, 4), "x");
    ck_assert_ptr_null(tg_permute(ctx, x, (const int[]){0, 0, 1}));
    tu_assert_error(ctx, TG_ERR_AXIS, "tg_permute");
    tu_assert_error(ctx, TG_ERR_AXIS, "repeated");
    tu_assert_error(ctx, TG_ERR_AXIS, "(2, 3, 4)");
    tg_ctx_clear_error(ctx);
    ck_assert_ptr_null(tg_permute(ctx, x, (const int[]){0, 3, 1}));
    tu_assert_error(ctx, TG_ERR_AXIS, "out of range");
    tg_ctx_clear_error(ctx);
    ck_assert_ptr_null(tg_permute(ctx, x, (const int[]){-4, 1, 2}));
    tu_assert_error(ctx, TG_ERR_AXIS, "tg_permute");
    tg_ctx_clear_error(ctx);
    ck_assert_ptr_null(tg_permute(ctx, x, (const int[]){2, -1, 0})); /* -1 is 2 again */
    tu_assert_error(ctx, TG_ERR_AXIS, "repeated");
    tg_ctx_clear_error(ctx);
    ck_assert_ptr_null(tg_permute(ctx, x, NULL));
    tu_assert_error(ctx, TG_ERR_ARG, "tg_permute");
    tu_ctx_free(ctx);
}
END_TEST

START_TEST(test_err_reshape)
{
    tg_ctx *ctx = tu_ctx_new();
    tg_tensor *x = tg_input(ctx, TG_F32, TG_DIMS(2, 3), "x");
    struct {
        int rank;
        int64_t shape[7];
        tg_status st;
        const char *needle;
    } cases[] = {
        {2, {4, 2}, TG_ERR_SHAPE, "(4, 2)"},          /* numel 8 != 6 */
        {2, {-1, -1}, TG_ERR_SHAPE, "(-1, -1)"},      /* two -1 */
        {2, {0, 6}, TG_ERR_SHAPE, "(0, 6)"},          /* zero dim */
        {2, {-2, -3}, TG_ERR_SHAPE, "(-2, -3)"},      /* negative dims */
        {2, {4, -1}, TG_ERR_SHAPE, "(2, 3)"},         /* 6 / 4 not whole */
        {3, {7, -1, 1}, TG_ERR_SHAPE, "(2, 3)"},      /* 7 > 6 */
        {1, {5}, TG_ERR_SHAPE, "(5)"},
        {0, {0}, TG_ERR_SHAPE, "tg_reshape"},         /* () has 1 element, x has 6 */
        {7, {1, 1, 1, 2, 3, 1, 1}, TG_ERR_ARG, "7"},  /* rank > TG_MAX_RANK */
        {-1, {6}, TG_ERR_ARG, "-1"},
        {2, {(int64_t)1 << 62, 4}, TG_ERR_SHAPE, "tg_reshape"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        ck_assert_msg(tg_reshape(ctx, x, cases[i].rank, cases[i].shape) == NULL, "case %zu", i);
        tu_assert_error(ctx, cases[i].st, "tg_reshape");
        tu_assert_error(ctx, cases[i].st, cases[i].needle);
        tg_ctx_clear_error(ctx);
    }
    ck_assert_ptr_null(tg_reshape(ctx, x, 2, NULL));
    tu_assert_error(ctx, TG_ERR_ARG, "tg_reshape");
    tu_ctx_free(ctx);
}
END_TEST

/* A shape whose product overflows int64 to exactly numel must still be a shape error:
 * x has 4 elements, (4, 2^62 + 1) multiplies to 2^64 + 4 == 4 (mod 2^64). */
START_TEST(test_err_reshape_overflow)
{
    tg_ctx *ctx = tu_ctx_new();
    tg_tensor *x = tg_input(ctx, TG_F32, TG_DIMS(4), "x");
    const int64_t huge = ((int64_t)1 << 62) + 1;
    ck_assert_ptr_null(tg_reshape(ctx, x, TG_DIMS(4, huge)));
    tu_assert_error(ctx, TG_ERR_SHAPE, "tg_reshape");
    tg_ctx_clear_error(ctx);
    ck_assert_ptr_null(tg_reshape(ctx, x, TG_DIMS(4, huge, -1)));
    tu_assert_error(ctx, TG_ERR_SHAPE, "tg_reshape");
    tu_ctx_free(ctx);
}
END_TEST

START_TEST(test_err_narrow)
{
    tg_ctx *ctx = tu_ctx_new();
    tg_tensor *x = tg_input(ctx, TG_F64, TG_DIMS(4, 3), "x");
    ck_assert_ptr_null(tg_narrow(ctx, x, 2, 0, 1));
    tu_assert_error(ctx, TG_ERR_AXIS, "tg_narrow");
    tu_assert_error(ctx, TG_ERR_AXIS, "(4, 3)");
    tg_ctx_clear_error(ctx);
    ck_assert_ptr_null(tg_narrow(ctx, x, -3, 0, 1));
    tu_assert_error(ctx, TG_ERR_AXIS, "tg_narrow");
    tg_ctx_clear_error(ctx);
    struct {
        int axis;
        int64_t start, length;
    } bad[] = {{0, -1, 2}, {0, 0, 0}, {0, 2, 3}, {1, 3, 1}, {0, 1, -5},
               {1, 0, INT64_MAX}, {0, INT64_MAX - 1, 1}, {1, 4, 0},
               {0, INT64_MAX, 1}, {0, -1, INT64_MIN}, {1, INT64_MIN, INT64_MAX}};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        ck_assert_msg(tg_narrow(ctx, x, bad[i].axis, bad[i].start, bad[i].length) == NULL,
                      "case %zu", i);
        tu_assert_error(ctx, TG_ERR_SHAPE, "tg_narrow");
        tu_assert_error(ctx, TG_ERR_SHAPE, "(4, 3)");
        tg_ctx_clear_error(ctx);
    }
    ck_assert_ptr_null(tg_narrow(ctx, x, 0, 2, 3));
    tu_assert_error(ctx, TG_ERR_SHAPE, "[2, 5)");
    tu_ctx_free(ctx);
}
END_TEST

/* Another context's tensor; NULL propagation; first error sticks; no graph over a failure. */
START_TEST(test_err_context_null_first)
{
    tg_ctx *ctx = tu_ctx_new(), *other = tu_ctx_new();
    tg_tensor *xo = tg_input(other, TG_F32, TG_DIMS(2, 3), "x_other");
    ck_assert_ptr_null(tg_transpose(ctx, xo, 0, 1));
    tu_assert_error(ctx, TG_ERR_ARG, "tg_transpose");
    tu_assert_error(ctx, TG_ERR_ARG, "another context");
    tg_ctx_clear_error(ctx);
    ck_assert_ptr_null(tg_permute(ctx, xo, (const int[]){1, 0}));
    tu_assert_error(ctx, TG_ERR_ARG, "tg_permute");
    tg_ctx_clear_error(ctx);
    ck_assert_ptr_null(tg_reshape(ctx, xo, TG_DIMS(6)));
    tu_assert_error(ctx, TG_ERR_ARG, "tg_reshape");
    tg_ctx_clear_error(ctx);
    ck_assert_ptr_null(tg_narrow(ctx, xo, 0, 0, 1));
    tu_assert_error(ctx, TG_ERR_ARG, "tg_narrow");
    tg_ctx_clear_error(ctx);
    ck_assert_int_eq(tg_ctx_status(other), TG_OK);

    tg_tensor *x = tg_input(ctx, TG_F32, TG_DIMS(2, 3), "x");
    tg_tensor *good = tg_transpose(ctx, x, 0, 1);
    ck_assert_ptr_nonnull(good);
    /* NULL in, NULL out, nothing recorded */
    ck_assert_ptr_null(tg_transpose(ctx, NULL, 0, 1));
    ck_assert_ptr_null(tg_permute(ctx, NULL, (const int[]){0}));
    ck_assert_ptr_null(tg_reshape(ctx, NULL, TG_DIMS(6)));
    ck_assert_ptr_null(tg_narrow(ctx, NULL, 0, 0, 1));
    ck_assert_int_eq(tg_ctx_status(ctx), TG_OK);
    /* first error sticks through a chain of builders */
    tg_tensor *bad = tg_narrow(ctx, x, 0, 1, 5);
    ck_assert_ptr_null(bad);
    char first[512];
    snprintf(first, sizeof first, "%s", tg_ctx_message(ctx));
    ck_assert_ptr_null(tg_reshape(ctx, tg_permute(ctx, tg_transpose(ctx, bad, 0, 1),
                                                  (const int[]){1, 0}), TG_DIMS(-1)));
    ck_assert_ptr_null(tg_transpose(ctx, x, 0, 5)); /* a new error is not recorded */
    ck_assert_ptr_null(tg_reshape(ctx, x, TG_DIMS(7)));
    tu_assert_error(ctx, TG_ERR_SHAPE, "tg_narrow");
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
    case 0: return tg_transpose(ctx, GIN("x", 3, 1, 2), 0, 1);
    case 1: return tg_transpose(ctx, GIN("x", 4, 5), 1, 0);
    case 2: return tg_transpose(ctx, GIN("x", 2, 3, 1, 2), 1, -1);
    case 3: return tg_permute(ctx, GIN("x", 2, 1, 3, 2), (const int[]){3, 1, 0, 2});
    case 4: return tg_permute(ctx, GIN("x", 1, 5), (const int[]){1, 0});
    case 5: return tg_permute(ctx, GIN("x", 2, 1, 2, 1, 3, 1), (const int[]){5, 3, 1, 0, 2, 4});
    case 6: return tg_reshape(ctx, GIN("x", 3, 4), TG_DIMS(2, -1, 3));
    case 7: return tg_reshape(ctx, GIN("x", 5), TG_DIMS(1, 5, 1));
    case 8: /* reshape of a permuted copy, then narrowed */
        return tg_narrow(ctx, tg_reshape(ctx, tg_permute(ctx, GIN("x", 2, 3, 2),
                                                         (const int[]){2, 0, 1}), TG_DIMS(4, 3)),
                         0, 1, 2);
    case 9: return tg_narrow(ctx, GIN("x", 3, 5, 2), 1, 2, 3);
    case 10: return tg_narrow(ctx, GIN("x", 1, 4), 0, 0, 1);
    case 11: return tg_narrow(ctx, GIN("x", 6), 0, 5, 1);
    default: return tg_narrow(ctx, GIN("x", 2, 1, 3, 1, 2, 2), -1, 1, 1);
    }
}
#define N_GC_CASES 13

START_TEST(test_gradcheck_f64)
{
    tu_gradcheck_case(gc_case, TG_F64, _i, 300 + (uint64_t)_i);
}
END_TEST

START_TEST(test_gradcheck_f32)
{
    static const int cases[] = {2, 3, 8, 9};
    tu_gradcheck_case(gc_case, TG_F32, cases[_i], 400 + (uint64_t)_i);
}
END_TEST

/* ---- thread invariance ---------------------------------------------------------------------- */
static tg_tensor *ti_transpose(tg_ctx *ctx, tg_dtype dt) /* (64,64,32) axes 0 <-> 2 */
{
    return tg_transpose(ctx, GIN("x", 64, 64, 32), 0, 2);
}
static tg_tensor *ti_permute(tg_ctx *ctx, tg_dtype dt) /* head split (B,T,H,Dh) -> (B,H,T,Dh) */
{
    return tg_permute(ctx, GIN("x", 8, 64, 16, 16), (const int[]){0, 2, 1, 3});
}
static tg_tensor *ti_reshape(tg_ctx *ctx, tg_dtype dt)
{
    return tg_reshape(ctx, GIN("x", 300, 200), TG_DIMS(-1, 100));
}
static tg_tensor *ti_narrow(tg_ctx *ctx, tg_dtype dt) /* (64,128,8) axis 1 [10, 110) */
{
    return tg_narrow(ctx, GIN("x", 64, 128, 8), 1, 10, 100);
}
static tg_tensor *ti_narrow_last(tg_ctx *ctx, tg_dtype dt)
{
    return tg_narrow(ctx, GIN("x", 512, 100), -1, 3, 90);
}
static const tu_build_fn k_ti_builds[] = {
    ti_transpose, ti_permute, ti_reshape, ti_narrow, ti_narrow_last};
#define N_TI (int)(sizeof k_ti_builds / sizeof k_ti_builds[0])

static Suite *shape_suite(void)
{
    Suite *s = suite_create("ops_shape");
    TCase *tc = tu_tcase(s, "forward", 0);
    tcase_add_loop_test(tc, test_transpose_2d, 0, 2);
    tcase_add_loop_test(tc, test_transpose_3d, 0, 2);
    tcase_add_loop_test(tc, test_permute_3d, 0, 2);
    tcase_add_loop_test(tc, test_heads_split_merge, 0, 2);
    tcase_add_loop_test(tc, test_reshape_infer, 0, 2);
    tcase_add_loop_test(tc, test_reshape_view, 0, 2);
    tcase_add_loop_test(tc, test_narrow_2d, 0, 2);
    tcase_add_loop_test(tc, test_narrow_inner_axes, 0, 2);

    tc = tu_tcase(s, "errors", 0);
    tcase_add_test(tc, test_err_transpose);
    tcase_add_test(tc, test_err_permute);
    tcase_add_test(tc, test_err_reshape);
    tcase_add_test(tc, test_err_reshape_overflow);
    tcase_add_test(tc, test_err_narrow);
    tcase_add_test(tc, test_err_context_null_first);

    tc = tu_tcase(s, "gradcheck", 60);
    tcase_add_loop_test(tc, test_gradcheck_f64, 0, N_GC_CASES);
    tcase_add_loop_test(tc, test_gradcheck_f32, 0, 4);

    tu_add_thread_tcase(s, k_ti_builds, N_TI);

    tc = tu_tcase(s, "edge", 60);
    tcase_add_loop_test(tc, test_permute_rank6, 0, 2);
    tcase_add_loop_test(tc, test_reshape_rank0_rank6, 0, 2);
    tcase_add_loop_test(tc, test_used_twice, 0, 2);
    tcase_add_loop_test(tc, test_backward_twice, 0, 2);
    tcase_add_loop_test(tc, test_rerun_new_data, 0, 2);
    tcase_add_loop_test(tc, test_rank0, 0, 2);
    return s;
}

int main(void) { return tu_run(shape_suite()); }
