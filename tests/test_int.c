/*
 * test_int.c - integer tensors (TG_I32): creation and the rules that keep them
 * out of gradients, the one float <-> i32 conversion rule in every copy and accessor, every
 * float op refusing them, embedding and cross_entropy taking them (and refusing float ids),
 * backward reading only what forward saved (item 9: changing ids or targets between forward and
 * backward changes nothing), and .npy / safetensors reading and writing them, malformed and
 * out-of-range files included.
 */
#include "testutil.h"
#include "tgrad_io.h"
#include "tgrad_train.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- creation and gradients ---------------------------------------------------------------- */
START_TEST(test_dtype_basics)
{
    ck_assert_uint_eq(tg_dtype_size(TG_I32), 4);
    ck_assert_str_eq(tg_dtype_str(TG_I32), "i32");
    ck_assert(!tg_dtype_is_float(TG_I32));
    ck_assert(tg_dtype_is_float(TG_F32) && tg_dtype_is_float(TG_F64));
    ck_assert(!tg_dtype_is_float((tg_dtype)3));
    ck_assert_uint_eq(tg_dtype_size((tg_dtype)3), 0);
    tg_ctx *ctx = tu_ctx_new();
    const int64_t dims[TG_MAX_RANK] = {2, 1, 3, 2, 1, 2};
    for (int rank = 0; rank <= TG_MAX_RANK; rank++) {
        tg_tensor *in = tg_input(ctx, TG_I32, rank, rank ? dims : NULL, "ids");
        tg_tensor *c = tg_const(ctx, TG_I32, rank, rank ? dims : NULL, "mask");
        ck_assert_msg(in && c, "rank %d: %s", rank, tg_ctx_message(ctx));
        ck_assert_int_eq(tg_tensor_dtype(in), TG_I32);
        ck_assert_int_eq(tg_tensor_dtype(c), TG_I32);
        ck_assert(!tg_tensor_requires_grad(in) && !tg_tensor_requires_grad(c));
        for (int64_t i = 0; i < tg_tensor_numel(in); i++)
            ck_assert(tg_get(in, i) == 0.0 && ((const int32_t *)tg_tensor_data(in))[i] == 0);
    }
    tu_ctx_free(ctx);
}
END_TEST

/* A parameter is float; no integer tensor ever gets a gradient. */
START_TEST(test_no_gradients)
{
    tg_ctx *ctx = tu_ctx_new();
    size_t before = tg_ctx_bytes(ctx);
    ck_assert_ptr_null(tg_param(ctx, TG_I32, TG_DIMS(3), "w"));
    tu_assert_error(ctx, TG_ERR_DTYPE,
                    "tg_param: dtype i32 for 'w': parameters are f32 or f64 (integer tensors "
                    "have no gradient)");
    ck_assert_uint_eq(tg_ctx_bytes(ctx), before);
    ck_assert_int_eq(tg_ctx_n_params(ctx), 0);
    tg_ctx_clear_error(ctx);

    tg_tensor *ids = tg_input(ctx, TG_I32, TG_DIMS(3), "ids");
    ck_assert_int_eq(tg_set_requires_grad(ids, true), TG_ERR_DTYPE);
    tu_assert_error(ctx, TG_ERR_DTYPE,
                    "tg_set_requires_grad: 'ids' is i32: integer tensors have no gradient");
    ck_assert(!tg_tensor_requires_grad(ids));
    tg_ctx_clear_error(ctx);
    ck_assert_int_eq(tg_set_requires_grad(ids, false), TG_OK); /* asking for none is fine */
    tg_tensor *m = tg_const(ctx, TG_I32, TG_DIMS(3), "m");
    ck_assert_int_eq(tg_set_requires_grad(m, true), TG_ERR_DTYPE);
    tg_ctx_clear_error(ctx);

    /* a graph over an embedding gives the weight a gradient and the ids none; gradcheck counts
     * only the weight */
    tu_set(ids, VALS(2, 0, 2));
    tg_tensor *w = tg_param(ctx, TG_F64, TG_DIMS(3, 2), "w");
    tg_fill_uniform(w, -1, 1);
    tg_tensor *y = tg_embedding(ctx, ids, w);
    tg_graph *g = tu_fwd(ctx, y);
    ck_assert_int_eq(tg_graph_n_grad_leaves(g), 1);
    ck_assert_ptr_eq(tg_graph_grad_leaf(g, 0), w);
    tu_bwd(ctx, g, y, NULL);
    ck_assert_ptr_null(tg_tensor_grad(ids));
    int32_t out[3];
    ck_assert_int_eq(tg_tensor_get_grad(ids, out, TG_I32, 3), TG_ERR_NOGRAD);
    ck_assert(isnan(tg_grad_get(ids, 0)));
    tg_gradcheck_report rep;
    ck_assert_int_eq(tg_gradcheck(ctx, y, NULL, &rep), TG_OK);
    ck_assert_int_eq(rep.n_tensors, 1);
    /* an integer output has nothing to differentiate */
    ck_assert_int_eq(tg_gradcheck(ctx, ids, NULL, &rep), TG_ERR_NOGRAD);
    tu_ctx_free(ctx);
}
END_TEST

/* ---- the conversion rule ----------------------------------------------------------------- */
START_TEST(test_set_data_conversions)
{
    tg_ctx *ctx = tu_ctx_new();
    tg_tensor *t = tg_input(ctx, TG_I32, TG_DIMS(4), "ids");
    /* integral floats in range are stored exactly, the bounds included */
    ck_assert_int_eq(tg_tensor_set_data(t, VALS(-2147483648.0, 2147483647.0, -0.0, 7), TG_F64,
                                        4), TG_OK);
    const int32_t *d = tg_tensor_data(t);
    ck_assert(d[0] == INT32_MIN && d[1] == INT32_MAX && d[2] == 0 && d[3] == 7);
    const float f[4] = {1, 2, 16777216.0f, -3};
    ck_assert_int_eq(tg_tensor_set_data(t, f, TG_F32, 4), TG_OK);
    ck_assert(d[0] == 1 && d[1] == 2 && d[2] == 16777216 && d[3] == -3);
    const int32_t iv[4] = {5, 6, 7, 8};
    ck_assert_int_eq(tg_tensor_set_data(t, iv, TG_I32, 4), TG_OK);
    ck_assert(d[0] == 5 && d[3] == 8);
    /* a fraction, NaN, infinities and out-of-range values are refused; nothing is written */
    static const double bad[][4] = {{1, 2, 2.5, 3},
                                    {1, 2, NAN, 3},
                                    {1, 2, INFINITY, 3},
                                    {1, 2, -INFINITY, 3},
                                    {1, 2, 2147483648.0, 3},
                                    {1, 2, -2147483649.0, 3},
                                    {1, 2, 1e300, 3}};
    for (size_t k = 0; k < sizeof bad / sizeof bad[0]; k++) {
        ck_assert_int_eq(tg_tensor_set_data(t, bad[k], TG_F64, 4), TG_ERR_ARG);
        tu_assert_error(ctx, TG_ERR_ARG, "tg_tensor_set_data: element 2 of the source is ");
        tu_assert_error(ctx, TG_ERR_ARG, "not an integer in the i32 range [-2147483648, "
                                         "2147483647] ('ids' is i32); nothing was copied");
        ck_assert(d[0] == 5 && d[1] == 6 && d[2] == 7 && d[3] == 8);
    }
    tu_assert_error(ctx, TG_ERR_ARG, "element 2 of the source is 1.0000000000000001e+300");
    ck_assert_int_eq(tg_tensor_set_data(t, (const float[]){0.5f, 0, 0, 0}, TG_F32, 4),
                     TG_ERR_ARG);
    tu_assert_error(ctx, TG_ERR_ARG, "element 0 of the source is 0.5,");
    /* the run-time error does not stick */
    ck_assert_int_eq(tg_tensor_set_data(t, iv, TG_I32, 4), TG_OK);
    ck_assert_int_eq(tg_ctx_status(ctx), TG_OK);

    /* i32 into floats: exact in f64, rounded to nearest in f32 */
    tg_tensor *x64 = tg_input(ctx, TG_F64, TG_DIMS(3), "x64");
    tg_tensor *x32 = tg_input(ctx, TG_F32, TG_DIMS(3), "x32");
    const int32_t big[3] = {INT32_MAX, 16777217, -16777217};
    ck_assert_int_eq(tg_tensor_set_data(x64, big, TG_I32, 3), TG_OK);
    EXPECT_DATA(x64, 0, 2147483647.0, 16777217.0, -16777217.0);
    ck_assert_int_eq(tg_tensor_set_data(x32, big, TG_I32, 3), TG_OK);
    EXPECT_DATA(x32, 0, 2147483648.0, 16777216.0, -16777216.0);

    /* get_data: the same rule in the other direction */
    int32_t out[3] = {-1, -1, -1};
    ck_assert_int_eq(tg_tensor_get_data(x64, out, TG_I32, 3), TG_OK);
    ck_assert(out[0] == INT32_MAX && out[1] == 16777217 && out[2] == -16777217);
    tu_set(x64, VALS(1, 2.25, 3));
    int32_t keep[3] = {9, 9, 9};
    ck_assert_int_eq(tg_tensor_get_data(x64, keep, TG_I32, 3), TG_ERR_ARG);
    tu_assert_error(ctx, TG_ERR_ARG, "tg_tensor_get_data: element 1 of the data is 2.25");
    ck_assert(keep[0] == 9 && keep[1] == 9 && keep[2] == 9);
    double back[4];
    ck_assert_int_eq(tg_tensor_get_data(t, back, TG_F64, 4), TG_OK);
    ck_assert(back[0] == 5 && back[3] == 8);

    /* tensor_copy between dtypes follows it too */
    tg_tensor *u = tg_input(ctx, TG_I32, TG_DIMS(3), "u");
    tu_set(x64, VALS(4, 5, 6));
    ck_assert_int_eq(tg_tensor_copy(u, x64), TG_OK);
    EXPECT_DATA(u, 0, 4, 5, 6);
    tu_set(x64, VALS(4, 5, 6.5));
    ck_assert_int_eq(tg_tensor_copy(u, x64), TG_ERR_ARG);
    tu_assert_error(ctx, TG_ERR_ARG, "tg_tensor_copy: element 2 of the source is 6.5");
    EXPECT_DATA(u, 0, 4, 5, 6);
    ck_assert_int_eq(tg_tensor_copy(x32, u), TG_OK);
    EXPECT_DATA(x32, 0, 4, 5, 6);
    tu_ctx_free(ctx);
}
END_TEST

START_TEST(test_accessors)
{
    tg_ctx *ctx = tu_ctx_new();
    tg_tensor *t = tg_const(ctx, TG_I32, TG_DIMS(2, 2), "m");
    tg_set(t, 1, -7);
    tg_set(t, 3, 2147483647.0);
    ck_assert_int_eq(tg_ctx_status(ctx), TG_OK);
    EXPECT_DATA(t, 0, 0, -7, 0, 2147483647.0);
    ck_assert(tg_get_at(t, (const int64_t[]){0, 1}) == -7);
    tg_set(t, 0, 0.5); /* refused: the element keeps its value */
    tu_assert_error(ctx, TG_ERR_ARG, "tg_set: 0.5 is not an integer in the i32 range");
    tg_set(t, 0, NAN);
    tu_assert_error(ctx, TG_ERR_ARG, "tg_set: nan is not an integer");
    EXPECT_DATA(t, 0, 0, -7, 0, 2147483647.0);
    tg_ctx_clear_error(ctx);
    tg_fill(t, 1);
    EXPECT_DATA(t, 0, 1, 1, 1, 1);
    tg_fill(t, 3e9);
    tu_assert_error(ctx, TG_ERR_ARG, "tg_fill: 3000000000 is not an integer in the i32 range");
    EXPECT_DATA(t, 0, 1, 1, 1, 1);
    tg_fill_uniform(t, 0, 10);
    tu_assert_error(ctx, TG_ERR_DTYPE, "tg_fill_uniform: 'm' is i32: random values are not "
                                       "integers");
    tg_fill_normal(t, 0, 1);
    tu_assert_error(ctx, TG_ERR_DTYPE, "tg_fill_normal: 'm' is i32");
    EXPECT_DATA(t, 0, 1, 1, 1, 1);
    /* a failed tg_set is a run-time error: building still works */
    tg_tensor *x = tu_in(ctx, TG_F32, TG_DIMS(2), "x", VALS(1, 2));
    ck_assert_ptr_nonnull(tg_relu(ctx, x));
    tu_ctx_free(ctx);
}
END_TEST

/* ---- float ops refuse integers ------------------------------------------------------------ */
typedef tg_tensor *(*op_fn)(tg_ctx *ctx, tg_tensor *i, tg_tensor *f);

static tg_tensor *op_add(tg_ctx *c, tg_tensor *i, tg_tensor *f) { return tg_add(c, i, f); }
static tg_tensor *op_add_r(tg_ctx *c, tg_tensor *i, tg_tensor *f) { return tg_add(c, f, i); }
static tg_tensor *op_mul(tg_ctx *c, tg_tensor *i, tg_tensor *f) { return tg_mul(c, i, f); }
static tg_tensor *op_matmul(tg_ctx *c, tg_tensor *i, tg_tensor *f)
{
    return tg_matmul(c, f, i, false, false);
}
static tg_tensor *op_scale(tg_ctx *c, tg_tensor *i, tg_tensor *f) { (void)f; return tg_scale(c, i, 2); }
static tg_tensor *op_softmax(tg_ctx *c, tg_tensor *i, tg_tensor *f) { (void)f; return tg_softmax(c, i); }
static tg_tensor *op_relu(tg_ctx *c, tg_tensor *i, tg_tensor *f) { (void)f; return tg_relu(c, i); }
static tg_tensor *op_gelu(tg_ctx *c, tg_tensor *i, tg_tensor *f) { (void)f; return tg_gelu(c, i); }
static tg_tensor *op_sum(tg_ctx *c, tg_tensor *i, tg_tensor *f) { (void)f; return tg_sum(c, i, 0, false); }
static tg_tensor *op_mean(tg_ctx *c, tg_tensor *i, tg_tensor *f) { (void)f; return tg_mean(c, i, -1, true); }
static tg_tensor *op_sum_all(tg_ctx *c, tg_tensor *i, tg_tensor *f) { (void)f; return tg_sum_all(c, i); }
static tg_tensor *op_mean_all(tg_ctx *c, tg_tensor *i, tg_tensor *f) { (void)f; return tg_mean_all(c, i); }
static tg_tensor *op_transpose(tg_ctx *c, tg_tensor *i, tg_tensor *f) { (void)f; return tg_transpose(c, i, 0, 1); }
static tg_tensor *op_permute(tg_ctx *c, tg_tensor *i, tg_tensor *f)
{
    (void)f;
    return tg_permute(c, i, (const int[]){1, 0});
}
static tg_tensor *op_reshape(tg_ctx *c, tg_tensor *i, tg_tensor *f)
{
    (void)f;
    return tg_reshape(c, i, TG_DIMS(4));
}
static tg_tensor *op_narrow(tg_ctx *c, tg_tensor *i, tg_tensor *f) { (void)f; return tg_narrow(c, i, 0, 0, 1); }
static tg_tensor *op_dropout(tg_ctx *c, tg_tensor *i, tg_tensor *f) { (void)f; return tg_dropout(c, i, 0.5); }
static tg_tensor *op_ln(tg_ctx *c, tg_tensor *i, tg_tensor *f) { (void)f; return tg_layer_norm(c, i, NULL, NULL, 1e-5); }
static tg_tensor *op_ln_gamma(tg_ctx *c, tg_tensor *i, tg_tensor *f)
{
    return tg_layer_norm(c, f, i, NULL, 1e-5);
}
static tg_tensor *op_dense(tg_ctx *c, tg_tensor *i, tg_tensor *f) { return tg_dense(c, f, i, NULL); }
static tg_tensor *op_mask_scores(tg_ctx *c, tg_tensor *i, tg_tensor *f)
{
    return tg_add_mask(c, i, f, TG_MASK_BLOCK);
}
static tg_tensor *op_mask_block(tg_ctx *c, tg_tensor *i, tg_tensor *f)
{
    return tg_add_mask(c, f, i, TG_MASK_BLOCK); /* library masks are float: convert first */
}
static tg_tensor *op_emb_weight(tg_ctx *c, tg_tensor *i, tg_tensor *f)
{
    (void)f;
    return tg_embedding(c, i, i);
}
static tg_tensor *op_xent_logits(tg_ctx *c, tg_tensor *i, tg_tensor *f)
{
    (void)f;
    tg_tensor *t = tg_const(c, TG_I32, TG_DIMS(2), "t");
    return tg_cross_entropy(c, i, t, -1);
}

/* Every float op given an i32 operand 'ids' (2, 2): NULL, TG_ERR_DTYPE, one line naming the
 * builder, the tensor and its dtype. */
START_TEST(test_float_ops_refuse_integers)
{
    static const struct {
        const char *fn;
        op_fn build;
    } cases[] = {
        {"tg_add", op_add},           {"tg_add", op_add_r},
        {"tg_mul", op_mul},           {"tg_matmul", op_matmul},
        {"tg_scale", op_scale},       {"tg_softmax", op_softmax},
        {"tg_relu", op_relu},         {"tg_gelu", op_gelu},
        {"tg_sum", op_sum},           {"tg_mean", op_mean},
        {"tg_sum_all", op_sum_all},   {"tg_mean_all", op_mean_all},
        {"tg_transpose", op_transpose}, {"tg_permute", op_permute},
        {"tg_reshape", op_reshape},   {"tg_narrow", op_narrow},
        {"tg_dropout", op_dropout},   {"tg_layer_norm", op_ln},
        {"tg_layer_norm", op_ln_gamma}, {"tg_dense", op_dense},
        {"tg_add_mask", op_mask_scores}, {"tg_add_mask", op_mask_block},
        {"tg_embedding", op_emb_weight}, {"tg_cross_entropy", op_xent_logits},
    };
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        tg_ctx *ctx = tu_ctx_new();
        tg_tensor *ids = tg_input(ctx, TG_I32, TG_DIMS(2, 2), "ids");
        tg_tensor *f = tg_input(ctx, TG_F32, TG_DIMS(2, 2), "f");
        if (cases[k].build == op_ln_gamma) /* gamma (D) */
            ids = tg_input(ctx, TG_I32, TG_DIMS(2), "ids");
        ck_assert_ptr_nonnull(ids);
        tg_tensor *y = cases[k].build(ctx, ids, f);
        ck_assert_msg(y == NULL, "%s (case %zu) accepted an i32 operand", cases[k].fn, k);
        char want[128];
        snprintf(want, sizeof want, "%s: 'ids' is i32; this op needs f32 or f64", cases[k].fn);
        ck_assert_msg(tg_ctx_status(ctx) == TG_ERR_DTYPE && strstr(tg_ctx_message(ctx), want),
                      "case %zu: %s: '%s'", k, tg_status_str(tg_ctx_status(ctx)),
                      tg_ctx_message(ctx));
        ck_assert_ptr_null(strchr(tg_ctx_message(ctx), '\n'));
        tu_ctx_free(ctx);
    }
}
END_TEST

/* With the NaN tripwire on, an i32 leaf is neither read as floats nor flagged. */
START_TEST(test_anomaly_skips_integers)
{
    tg_ctx *ctx = tu_ctx_new();
    tg_tensor *ids = tg_input(ctx, TG_I32, TG_DIMS(3), "ids");
    tu_set(ids, VALS(1, 0, 1));
    tg_tensor *w = tg_param(ctx, TG_F32, TG_DIMS(2, 2), "w");
    tg_fill_uniform(w, -1, 1);
    tg_tensor *y = tg_sum_all(ctx, tg_embedding(ctx, ids, w));
    tg_graph_opts o = {.detect_anomaly = true};
    tg_graph *g = tg_graph_new_opts(ctx, &y, 1, &o);
    ck_assert_ptr_nonnull(g);
    ck_assert_int_eq(tg_graph_forward(g), TG_OK);
    ck_assert_int_eq(tg_graph_backward(g, y, NULL), TG_OK);
    tg_set(w, 1, NAN);
    ck_assert_int_eq(tg_graph_forward(g), TG_ERR_NONFINITE);
    tu_assert_error(ctx, TG_ERR_NONFINITE, "parameter 'w'");
    tu_ctx_free(ctx);
}
END_TEST

/* ---- embedding and cross_entropy ------------------------------------------------------------ */
START_TEST(test_embedding_i32)
{
    tg_dtype dt = tu_dtypes[_i];
    tg_ctx *ctx = tu_ctx_new();
    tg_tensor *w = tg_param(ctx, dt, TG_DIMS(3, 2), "w");
    tu_set(w, VALS(0, 1, 10, 11, 20, 21));
    tg_tensor *ids = tg_input(ctx, TG_I32, TG_DIMS(2, 2), "ids");
    tu_set(ids, VALS(2, 0, 2, 1));
    tg_tensor *y = tg_embedding(ctx, ids, w);
    EXPECT_SHAPE(y, 2, 2, 2);
    ck_assert_int_eq(tg_tensor_dtype(y), dt);
    tg_graph *g = tu_fwd(ctx, y);
    EXPECT_DATA(y, 0, 20, 21, 0, 1, 20, 21, 10, 11);
    tu_bwd(ctx, g, y, VALS(1, 2, 3, 4, 5, 6, 7, 8));
    EXPECT_GRAD(w, 0, 3, 4, 7, 8, 1 + 5, 2 + 6);
    /* float ids are refused at build, naming them */
    tg_tensor *fids = tg_input(ctx, dt, TG_DIMS(2), "fids");
    ck_assert_ptr_null(tg_embedding(ctx, fids, w));
    char want[256];
    snprintf(want, sizeof want, "tg_embedding: ids 'fids' is %s; ids must be i32 (copy float "
             "values into a TG_I32 tensor with tg_tensor_set_data, which checks they are "
             "integers)", tg_dtype_str(dt));
    tu_assert_error(ctx, TG_ERR_DTYPE, want);
    tu_ctx_free(ctx);
}
END_TEST

START_TEST(test_cross_entropy_i32)
{
    tg_dtype dt = tu_dtypes[_i];
    tg_ctx *ctx = tu_ctx_new();
    /* row 0: logits (0, 0), target 1: loss log 2; row 1 ignored; row 2: (ln 3, 0), target 0:
     * loss log(4/3) */
    tg_tensor *x = tu_in(ctx, dt, TG_DIMS(3, 2), "x", VALS(0, 0, 5, -5, log(3.0), 0));
    tg_tensor *t = tg_const(ctx, TG_I32, TG_DIMS(3), "t");
    tu_set(t, VALS(1, -7, 0));
    tg_tensor *loss = tg_cross_entropy(ctx, x, t, -7);
    ck_assert_int_eq(tg_tensor_dtype(loss), dt);
    tg_graph *g = tu_fwd(ctx, loss);
    double tol = dt == TG_F64 ? 1e-15 : 1e-6;
    EXPECT_DATA(loss, tol, (log(2.0) + log(4.0 / 3.0)) / 2);
    tu_bwd(ctx, g, loss, NULL);
    EXPECT_GRAD(x, tol, 0.25, -0.25, 0, 0, (0.75 - 1) / 2, 0.25 / 2);
    /* a target out of range is a run-time error naming it */
    tg_set(t, 2, 2);
    ck_assert_int_eq(tg_graph_forward(g), TG_ERR_ARG);
    tu_assert_error(ctx, TG_ERR_ARG, "target 't'[2] = 2 is not a class in [0, 2) nor "
                                     "ignore_index -7");
    /* float targets are refused at build */
    tg_tensor *ft = tg_const(ctx, dt, TG_DIMS(3), "ft");
    ck_assert_ptr_null(tg_cross_entropy(ctx, x, ft, -1));
    char want[128];
    snprintf(want, sizeof want, "tg_cross_entropy: targets 'ft' is %s; targets must be i32",
             tg_dtype_str(dt));
    tu_assert_error(ctx, TG_ERR_DTYPE, want);
    tu_ctx_free(ctx);
}
END_TEST

/* embedding's backward reads only what its forward saved, so ids changed
 * between forward and backward do not change the gradient: it is the one of the forward's ids.
 * Likewise for cross_entropy's targets. Compared bitwise with a graph whose ids never change. */
START_TEST(test_backward_uses_forward_ids)
{
    tg_dtype dt = tu_dtypes[_i];
    double grads[2][2][40];
    for (int change = 0; change < 2; change++) {
        tg_ctx *ctx = tu_ctx_new();
        tg_ctx_seed(ctx, 5);
        tg_tensor *w = tg_param(ctx, dt, TG_DIMS(5, 4), "w");
        tg_fill_uniform(w, -1, 1);
        tg_tensor *ids = tg_input(ctx, TG_I32, TG_DIMS(2, 3), "ids");
        tu_set(ids, VALS(1, 3, 1, 0, 4, 1));
        tg_tensor *tgt = tg_input(ctx, TG_I32, TG_DIMS(2, 3), "targets");
        tu_set(tgt, VALS(2, 2, 0, 3, 1, 4));
        tg_tensor *h = tg_embedding(ctx, ids, w);                  /* (2, 3, 4) */
        tg_tensor *head = tg_param(ctx, dt, TG_DIMS(5, 4), "head");
        tg_fill_uniform(head, -1, 1);
        tg_tensor *logits = tg_dense(ctx, h, head, NULL);           /* (2, 3, 5) */
        tg_tensor *loss = tg_cross_entropy(ctx, logits, tgt, -1);
        tg_graph *g = tu_fwd(ctx, loss);
        if (change) { /* other ids and targets, all valid, after the forward ran */
            tu_set(ids, VALS(0, 0, 0, 0, 0, 0));
            tu_set(tgt, VALS(-1, 4, 4, 4, -1, 4));
        }
        ck_assert_int_eq(tg_graph_backward(g, loss, NULL), TG_OK);
        for (int i = 0; i < 20; i++) {
            grads[change][0][i] = tg_grad_get(w, i);
            grads[change][1][i] = tg_grad_get(head, i);
        }
        /* the rows of w the forward's ids never used (2) have no gradient */
        for (int d = 0; d < 4; d++)
            ck_assert(tg_grad_get(w, 2 * 4 + d) == 0);
        tu_ctx_free(ctx);
    }
    for (int k = 0; k < 2; k++)
        for (int i = 0; i < 20; i++)
            ck_assert_msg(grads[0][k][i] == grads[1][k][i], "%s[%d]: %.17g vs %.17g",
                          k ? "head" : "w", i, grads[0][k][i], grads[1][k][i]);
}
END_TEST

/* The transformer takes i32 ids (B, T); float ids are refused. */
START_TEST(test_transformer_ids)
{
    tg_ctx *ctx = tu_ctx_new();
    tg_transformer_config c;
    memset(&c, 0, sizeof c);
    c.vocab_size = 6;
    c.max_seq_len = 4;
    c.n_layers = 1;
    c.layer = tg_encoder_config_default(4, 2);
    c.layer.d_ff = 8;
    c.causal = true;
    tg_transformer m;
    ck_assert_int_eq(tg_transformer_init(ctx, &m, TG_F32, &c), TG_OK);
    tg_tensor *fids = tg_input(ctx, TG_F32, TG_DIMS(1, 3), "fids");
    ck_assert_ptr_null(tg_transformer_forward(ctx, &m, fids, NULL));
    tu_assert_error(ctx, TG_ERR_DTYPE, "tg_embedding: ids 'fids' is f32");
    tg_ctx_clear_error(ctx);
    tg_tensor *ids = tg_input(ctx, TG_I32, TG_DIMS(1, 3), "ids");
    tu_set(ids, VALS(5, 0, 3));
    tg_tensor *y = tg_transformer_forward(ctx, &m, ids, NULL);
    EXPECT_SHAPE(y, 1, 3, 6);
    tu_fwd(ctx, y);
    ck_assert_int_eq(tu_count_nan(y, false), 0);
    tu_ctx_free(ctx);
}
END_TEST

/* ---- files ----------------------------------------------------------------------------------- */
/* A growable in-memory byte sink for the stream writers. */
typedef struct {
    unsigned char *p;
    size_t n, cap;
} membuf;

static int mem_write(void *user, const void *data, size_t size)
{
    membuf *m = user;
    if (m->n + size > m->cap) {
        size_t nc = (m->n + size) * 2;
        unsigned char *np = realloc(m->p, nc);
        if (!np)
            return 12; /* ENOMEM */
        m->p = np;
        m->cap = nc;
    }
    memcpy(m->p + m->n, data, size);
    m->n += size;
    return 0;
}

/* An .npy v1.0 file: header dict padded to 64 bytes, then n bytes of data. */
static membuf npy_bytes(const char *descr, const char *shape, const void *data, size_t n)
{
    membuf m = {0};
    char hdr[256];
    int hl = snprintf(hdr, sizeof hdr, "{'descr': '%s', 'fortran_order': False, 'shape': %s, }",
                      descr, shape);
    int pad = (64 - (10 + hl + 1) % 64) % 64;
    unsigned char pre[10] = {0x93, 'N', 'U', 'M', 'P', 'Y', 1, 0,
                             (unsigned char)((hl + pad + 1) & 0xff),
                             (unsigned char)((hl + pad + 1) >> 8)};
    mem_write(&m, pre, 10);
    mem_write(&m, hdr, (size_t)hl);
    for (int i = 0; i < pad; i++)
        mem_write(&m, " ", 1);
    mem_write(&m, "\n", 1);
    mem_write(&m, data, n);
    return m;
}

START_TEST(test_npy_i32_round_trip)
{
    tg_ctx *ctx = tu_ctx_new();
    tg_tensor *t = tg_input(ctx, TG_I32, TG_DIMS(2, 3), "ids");
    tu_set(t, VALS(0, -1, 2147483647, -2147483648.0, 42, 7));
    membuf m = {0};
    tg_writer w = {mem_write, &m};
    tg_io_item it = tg_io_item_data(t, NULL);
    ck_assert_int_eq(it.dtype, TG_I32);
    ck_assert_int_eq(tg_npy_write_to(ctx, &w, &it), TG_OK);
    ck_assert(m.n > 64 && strstr((const char *)m.p + 10, "'descr': '<i4'") != NULL &&
              m.p[127] == '\n'); /* the header (64-byte aligned) ends before the data */
    ck_assert_uint_eq(m.n, 128 + 24); /* header padded to 64 bytes, then the data */
    tg_npy_kind kind;
    tg_tensor *u = tg_npy_read_mem(ctx, m.p, m.n, TG_I32, &kind);
    ck_assert_msg(u != NULL, "%s", tg_ctx_message(ctx));
    ck_assert_int_eq(kind, TG_NPY_INT);
    ck_assert_int_eq(tg_tensor_dtype(u), TG_I32);
    EXPECT_SHAPE(u, 2, 3);
    ck_assert(memcmp(tg_tensor_data(u), tg_tensor_data(t), 24) == 0);
    tg_tensor *v = tg_npy_read_mem(ctx, m.p, m.n, TG_F64, NULL); /* as floats: exact in f64 */
    EXPECT_DATA(v, 0, 0, -1, 2147483647, -2147483648.0, 42, 7);
    free(m.p);
    /* the path writers and tg_npy_write_data too */
    char dir[256], p[512];
    tu_mkdtemp(dir, sizeof dir, "int");
    ck_assert_int_eq(tg_npy_write(ctx, tu_path(p, sizeof p, dir, "ids.npy"), t), TG_OK);
    u = tg_npy_read(ctx, p, TG_I32, NULL);
    ck_assert(u && memcmp(tg_tensor_data(u), tg_tensor_data(t), 24) == 0);
    ck_assert_str_eq(tg_tensor_name(u), "ids");
    const int32_t raw[2] = {3, -4};
    ck_assert_int_eq(tg_npy_write_data(ctx, tu_path(p, sizeof p, dir, "r.npy"), TG_I32,
                                       TG_DIMS(2), raw), TG_OK);
    u = tg_npy_read(ctx, p, TG_F32, &kind);
    ck_assert_int_eq(kind, TG_NPY_INT);
    EXPECT_DATA(u, 0, 3, -4);
    tu_rm_tree(dir);
    tu_ctx_free(ctx);
}
END_TEST

/* Reading into i32: every integer width by value, bools as 0/1, integral floats; a value that
 * does not fit is TG_ERR_UNSUPPORTED naming the element, and nothing stays allocated. */
START_TEST(test_npy_read_i32)
{
    tg_ctx *ctx = tu_ctx_new();
    const int64_t i8s[3] = {-2147483648LL, 2147483647LL, 5};
    membuf m = npy_bytes("<i8", "(3,)", i8s, sizeof i8s);
    tg_npy_kind kind;
    tg_tensor *t = tg_npy_read_mem(ctx, m.p, m.n, TG_I32, &kind);
    ck_assert_msg(t != NULL, "%s", tg_ctx_message(ctx));
    ck_assert_int_eq(kind, TG_NPY_INT);
    const int32_t *d = tg_tensor_data(t);
    ck_assert(d[0] == INT32_MIN && d[1] == INT32_MAX && d[2] == 5);
    free(m.p);
    const unsigned char b1[4] = {0, 1, 2, 0};
    m = npy_bytes("|b1", "(2, 2)", b1, 4);
    t = tg_npy_read_mem(ctx, m.p, m.n, TG_I32, &kind);
    ck_assert_int_eq(kind, TG_NPY_BOOL);
    EXPECT_DATA(t, 0, 0, 1, 1, 0);
    free(m.p);
    const unsigned char u1[2] = {255, 3};
    m = npy_bytes("|u1", "(2,)", u1, 2);
    t = tg_npy_read_mem(ctx, m.p, m.n, TG_I32, NULL);
    EXPECT_DATA(t, 0, 255, 3);
    free(m.p);
    const float f4[2] = {3, -16777216.0f};
    m = npy_bytes("<f4", "(2,)", f4, sizeof f4);
    t = tg_npy_read_mem(ctx, m.p, m.n, TG_I32, &kind);
    ck_assert_int_eq(kind, TG_NPY_FLOAT);
    EXPECT_DATA(t, 0, 3, -16777216.0);
    free(m.p);

    static const struct {
        const char *descr;
        int64_t v[2];
        size_t es;
        const char *needle;
    } bad[] = {
        {"<i8", {1, 2147483648LL}, 8, "array data: element 1 (I64) is 2147483648, not an "
                                      "integer in the i32 range [-2147483648, 2147483647]"},
        {"<i8", {-2147483649LL, 0}, 8, "element 0 (I64) is -2147483649,"},
        {"<u8", {0, -1}, 8, "element 1 (U64) is 18446744073709551615,"},
        {"<u4", {0, 0x80000000LL}, 4, "element 1 (U32) is 2147483648,"},
    };
    for (size_t k = 0; k < sizeof bad / sizeof bad[0]; k++) {
        unsigned char buf[16];
        size_t es = bad[k].es == 4 ? 4 : 8;
        for (size_t i = 0; i < 2; i++) /* little-endian, es bytes each */
            for (size_t b = 0; b < es; b++)
                buf[i * es + b] = (unsigned char)((uint64_t)bad[k].v[i] >> (8 * b));
        m = npy_bytes(bad[k].descr, "(2,)", buf, 2 * es);
        tg_ctx_clear_error(ctx);
        size_t before = tg_ctx_bytes(ctx);
        ck_assert_ptr_null(tg_npy_read_mem(ctx, m.p, m.n, TG_I32, NULL));
        tu_assert_error(ctx, TG_ERR_UNSUPPORTED, bad[k].needle);
        tu_assert_error(ctx, TG_ERR_UNSUPPORTED, "tg_npy_read_mem: <memory>: array data:");
        ck_assert_uint_eq(tg_ctx_bytes(ctx), before);
        /* the same file reads as floats */
        tg_ctx_clear_error(ctx);
        ck_assert_ptr_nonnull(tg_npy_read_mem(ctx, m.p, m.n, TG_F64, NULL));
        free(m.p);
    }
    const double f8[3] = {1, 2.5, NAN};
    m = npy_bytes("<f8", "(3,)", f8, sizeof f8);
    tg_ctx_clear_error(ctx);
    ck_assert_ptr_null(tg_npy_read_mem(ctx, m.p, m.n, TG_I32, NULL));
    tu_assert_error(ctx, TG_ERR_UNSUPPORTED, "element 1 (F64) is 2.5, not an integer");
    free(m.p);
    const double nan8[1] = {NAN};
    m = npy_bytes("<f8", "(1,)", nan8, sizeof nan8);
    tg_ctx_clear_error(ctx);
    ck_assert_ptr_null(tg_npy_read_mem(ctx, m.p, m.n, TG_I32, NULL));
    tu_assert_error(ctx, TG_ERR_UNSUPPORTED, "element 0 (F64) is nan, not an integer");
    free(m.p);
    /* malformed files are refused before any value is looked at, whatever the dtype wanted */
    m = npy_bytes("<i4", "(3,)", i8s, 8); /* 8 bytes for 3 x 4 */
    tg_ctx_clear_error(ctx);
    ck_assert_ptr_null(tg_npy_read_mem(ctx, m.p, m.n, TG_I32, NULL));
    tu_assert_error(ctx, TG_ERR_TRUNCATED, "needs 12");
    free(m.p);
    m = npy_bytes(">i4", "(1,)", i8s, 4);
    tg_ctx_clear_error(ctx);
    ck_assert_ptr_null(tg_npy_read_mem(ctx, m.p, m.n, TG_I32, NULL));
    tu_assert_error(ctx, TG_ERR_UNSUPPORTED, "big-endian");
    free(m.p);
    tg_ctx_clear_error(ctx);
    ck_assert_ptr_null(tg_npy_read_mem(ctx, "x", 1, (tg_dtype)3, NULL));
    tu_assert_error(ctx, TG_ERR_DTYPE, "unknown dtype 3");
    tu_ctx_free(ctx);
}
END_TEST

/* safetensors bytes: 8-byte header length, the JSON header, the data. */
static membuf st_bytes(const char *json, const void *data, size_t n)
{
    membuf m = {0};
    unsigned char len[8];
    uint64_t hl = strlen(json);
    for (int i = 0; i < 8; i++)
        len[i] = (unsigned char)(hl >> (8 * i));
    mem_write(&m, len, 8);
    mem_write(&m, json, (size_t)hl);
    mem_write(&m, data, n);
    return m;
}

START_TEST(test_safetensors_i32)
{
    tg_ctx *ctx = tu_ctx_new();
    tg_tensor *ids = tg_input(ctx, TG_I32, TG_DIMS(2, 2), "ids");
    tu_set(ids, VALS(1, -2, 2147483647, 0));
    tg_tensor *x = tg_input(ctx, TG_F32, TG_DIMS(3), "x");
    tu_set(x, VALS(0.5, 1, 2));
    membuf m = {0};
    tg_writer w = {mem_write, &m};
    tg_io_item items[2] = {tg_io_item_data(x, NULL), tg_io_item_data(ids, NULL)};
    ck_assert_int_eq(tg_safetensors_write_to(ctx, &w, 2, items, 0, NULL, NULL), TG_OK);
    const char *want = "{\"x\":{\"dtype\":\"F32\",\"shape\":[3],\"data_offsets\":[0,12]},"
                       "\"ids\":{\"dtype\":\"I32\",\"shape\":[2,2],\"data_offsets\":[12,28]}}";
    ck_assert(m.n > 8 && memcmp(m.p + 8, want, strlen(want)) == 0);
    tg_safetensors *st = tg_safetensors_read_mem(ctx, m.p, m.n);
    ck_assert_msg(st != NULL, "%s", tg_ctx_message(ctx));
    tg_tensor *r = tg_safetensors_find(st, "ids");
    ck_assert_int_eq(tg_tensor_dtype(r), TG_I32);
    ck_assert_str_eq(tg_safetensors_file_dtype(st, 1), "I32");
    ck_assert(memcmp(tg_tensor_data(r), tg_tensor_data(ids), 16) == 0);
    ck_assert_int_eq(tg_tensor_dtype(tg_safetensors_find(st, "x")), TG_F32);
    free(m.p);

    /* I64 (PyTorch's int64), U32 and U64 read into i32 when every value fits ... */
    const int64_t i64[2] = {-3, 2147483647};
    m = st_bytes("{\"t\":{\"dtype\":\"I64\",\"shape\":[2],\"data_offsets\":[0,16]}}", i64, 16);
    st = tg_safetensors_read_mem(ctx, m.p, m.n);
    ck_assert_msg(st != NULL, "%s", tg_ctx_message(ctx));
    EXPECT_DATA(tg_safetensors_find(st, "t"), 0, -3, 2147483647);
    free(m.p);
    /* ... and are refused, naming the tensor and the element, when one does not */
    static const struct {
        const char *json;
        uint64_t v[2];
        size_t es;
        const char *needle;
    } bad[] = {
        {"{\"t\":{\"dtype\":\"I64\",\"shape\":[2],\"data_offsets\":[0,16]}}",
         {0, (uint64_t)1 << 53}, 8,
         "tg_safetensors_read_mem: <memory>: data of tensor 't': element 1 (I64) is "
         "9007199254740992, not an integer in the i32 range [-2147483648, 2147483647]"},
        {"{\"t\":{\"dtype\":\"I64\",\"shape\":[2],\"data_offsets\":[0,16]}}",
         {(uint64_t)-2147483649LL, 0}, 8, "element 0 (I64) is -2147483649,"},
        {"{\"t\":{\"dtype\":\"U64\",\"shape\":[2],\"data_offsets\":[0,16]}}",
         {1, UINT64_MAX}, 8, "element 1 (U64) is 18446744073709551615,"},
        {"{\"t\":{\"dtype\":\"U32\",\"shape\":[2],\"data_offsets\":[0,8]}}",
         {0xffffffffu, 0}, 4, "element 0 (U32) is 4294967295,"},
    };
    for (size_t k = 0; k < sizeof bad / sizeof bad[0]; k++) {
        unsigned char buf[16];
        size_t es = bad[k].es == 4 ? 4 : 8;
        for (size_t i = 0; i < 2; i++)
            for (size_t b = 0; b < es; b++)
                buf[i * es + b] = (unsigned char)(bad[k].v[i] >> (8 * b));
        m = st_bytes(bad[k].json, buf, 2 * es);
        tg_ctx_clear_error(ctx);
        size_t before = tg_ctx_bytes(ctx);
        ck_assert_ptr_null(tg_safetensors_read_mem(ctx, m.p, m.n));
        tu_assert_error(ctx, TG_ERR_UNSUPPORTED, bad[k].needle);
        ck_assert_uint_eq(tg_ctx_bytes(ctx), before);
        free(m.p);
    }
    /* the structural checks still come first: a wrong byte size for I32 */
    m = st_bytes("{\"t\":{\"dtype\":\"I32\",\"shape\":[3],\"data_offsets\":[0,8]}}", i64, 8);
    tg_ctx_clear_error(ctx);
    ck_assert_ptr_null(tg_safetensors_read_mem(ctx, m.p, m.n));
    tu_assert_error(ctx, TG_ERR_SIZE_MISMATCH, "I32 [3] needs 12");
    free(m.p);
    tu_ctx_free(ctx);
}
END_TEST

/* Loading by name: an integer file tensor converts into a float parameter; a float one is not
 * taken by an i32 tensor (and nothing is modified). */
START_TEST(test_params_load_dtypes)
{
    tg_ctx *ctx = tu_ctx_new();
    const int32_t v[2] = {3, -4};
    membuf m = st_bytes("{\"w\":{\"dtype\":\"I32\",\"shape\":[2],\"data_offsets\":[0,8]}}", v, 8);
    tg_safetensors *st = tg_safetensors_read_mem(ctx, m.p, m.n);
    ck_assert_ptr_nonnull(st);
    tg_tensor *w = tg_param(ctx, TG_F64, TG_DIMS(2), "w");
    ck_assert_int_eq(tg_params_load_from(ctx, st, 1, &w, true), TG_OK);
    EXPECT_DATA(w, 0, 3, -4);
    free(m.p);
    const float f[2] = {1.5f, 2};
    m = st_bytes("{\"ids\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}", f, 8);
    st = tg_safetensors_read_mem(ctx, m.p, m.n);
    ck_assert_ptr_nonnull(st);
    tg_tensor *ids = tg_input(ctx, TG_I32, TG_DIMS(2), "ids");
    tu_set(ids, VALS(7, 8));
    ck_assert_int_eq(tg_params_load_from(ctx, st, 1, &ids, true), TG_ERR_MISMATCH);
    tu_assert_error(ctx, TG_ERR_MISMATCH, "tensor 'ids' is f32 in the file, but 'ids' is i32");
    EXPECT_DATA(ids, 0, 7, 8);
    free(m.p);
    tu_ctx_free(ctx);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("int");
    TCase *tc = tu_tcase(s, "tensors", 0);
    tcase_add_test(tc, test_dtype_basics);
    tcase_add_test(tc, test_no_gradients);
    tcase_add_test(tc, test_set_data_conversions);
    tcase_add_test(tc, test_accessors);
    tcase_add_test(tc, test_float_ops_refuse_integers);
    tcase_add_test(tc, test_anomaly_skips_integers);
    tc = tu_tcase(s, "ops", 0);
    tcase_add_loop_test(tc, test_embedding_i32, 0, 2);
    tcase_add_loop_test(tc, test_cross_entropy_i32, 0, 2);
    tcase_add_loop_test(tc, test_backward_uses_forward_ids, 0, 2);
    tcase_add_test(tc, test_transformer_ids);
    tc = tu_tcase(s, "files", 0);
    tcase_add_test(tc, test_npy_i32_round_trip);
    tcase_add_test(tc, test_npy_read_i32);
    tcase_add_test(tc, test_safetensors_i32);
    tcase_add_test(tc, test_params_load_dtypes);
    return tu_run(s);
}
