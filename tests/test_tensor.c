/*
 * test_tensor.c - tensor records: creation and validation of leaves for every rank, names,
 * kinds and requires_grad rules, data copy with dtype conversion, element accessors, fills,
 * tensor_copy, shape strings and negative axes.
 */
#include "testutil.h"

#include <float.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef tg_tensor *(*leaf_fn)(tg_ctx *, tg_dtype, int, const int64_t *, const char *);
static const leaf_fn leaf_fns[3] = {tg_param, tg_input, tg_const};
static const tg_kind leaf_kinds[3] = {TG_KIND_PARAM, TG_KIND_INPUT, TG_KIND_CONST};
static const char *const leaf_names[3] = {"param", "input", "const"};
static const char *const leaf_fn_names[3] = {"tg_param", "tg_input", "tg_const"};

/* ---- creation ----------------------------------------------------------------------------- */
START_TEST(test_create_every_rank)
{
    tg_ctx *ctx = tg_ctx_new();
    const int64_t dims[TG_MAX_RANK] = {2, 1, 3, 2, 1, 2};
    for (int k = 0; k < 3; k++)
        for (int dt = 0; dt < 2; dt++)
            for (int rank = 0; rank <= TG_MAX_RANK; rank++) {
                tg_tensor *t = leaf_fns[k](ctx, (tg_dtype)dt, rank, rank ? dims : NULL, "t");
                ck_assert_msg(t != NULL, "%s rank %d: %s", leaf_fn_names[k], rank,
                              tg_ctx_message(ctx));
                ck_assert_ptr_eq(tg_tensor_ctx(t), ctx);
                ck_assert_int_eq(tg_tensor_kind(t), leaf_kinds[k]);
                ck_assert_int_eq(tg_tensor_dtype(t), dt);
                ck_assert_int_eq(tg_tensor_rank(t), rank);
                ck_assert_str_eq(tg_tensor_op_name(t), leaf_names[k]);
                int64_t numel = 1;
                for (int i = 0; i < rank; i++) {
                    ck_assert_int_eq(tg_tensor_shape(t)[i], dims[i]);
                    ck_assert_int_eq(tg_tensor_dim(t, i), dims[i]);
                    numel *= dims[i];
                }
                ck_assert_int_eq(tg_tensor_numel(t), numel);
                ck_assert_ptr_nonnull(tg_tensor_data(t));
                ck_assert_ptr_null(tg_tensor_grad(t)); /* no graph yet */
                for (int64_t i = 0; i < numel; i++)
                    ck_assert(tg_get(t, i) == 0.0); /* zero-filled */
            }
    /* a rank-0 tensor has one element; its shape pointer is still valid */
    tg_tensor *s = tg_param(ctx, TG_F64, 0, NULL, "s");
    ck_assert_int_eq(tg_tensor_numel(s), 1);
    ck_assert_ptr_nonnull(tg_tensor_shape(s));
    /* a non-NULL shape with rank 0 is ignored */
    const int64_t junk[1] = {-5};
    ck_assert_ptr_nonnull(tg_input(ctx, TG_F32, 0, junk, "s2"));
    ck_assert_int_eq(tg_ctx_status(ctx), TG_OK);
    tg_ctx_free(ctx);
}
END_TEST

/* Every validation error: NULL result, status, a message naming the builder. */
static void expect_create_error(int k, tg_dtype dt, int rank, const int64_t *shape,
                                tg_status want, const char *needle)
{
    tg_ctx *ctx = tg_ctx_new();
    size_t bytes = tg_ctx_bytes(ctx);
    tg_tensor *t = leaf_fns[k](ctx, dt, rank, shape, "bad");
    ck_assert_msg(t == NULL, "%s rank %d accepted", leaf_fn_names[k], rank);
    tu_assert_error(ctx, want, leaf_fn_names[k]);
    if (needle)
        tu_assert_error(ctx, want, needle);
    ck_assert_uint_eq(tg_ctx_bytes(ctx), bytes); /* nothing kept */
    tg_ctx_free(ctx);
}

START_TEST(test_create_errors)
{
    for (int k = 0; k < 3; k++) {
        const int64_t seven[7] = {1, 1, 1, 1, 1, 1, 1};
        expect_create_error(k, TG_F32, 7, seven, TG_ERR_ARG, "rank 7");
        expect_create_error(k, TG_F32, -1, seven, TG_ERR_ARG, "rank -1");
        expect_create_error(k, TG_F64, 2, (const int64_t[]){2, 0}, TG_ERR_SHAPE, "dim 1 is 0");
        expect_create_error(k, TG_F64, 3, (const int64_t[]){2, -3, 4}, TG_ERR_SHAPE,
                            "(2, -3, 4)");
        expect_create_error(k, TG_F64, 1, (const int64_t[]){0}, TG_ERR_SHAPE, NULL);
        expect_create_error(k, TG_F64, 2, NULL, TG_ERR_ARG, "NULL");
        expect_create_error(k, (tg_dtype)3, 1, (const int64_t[]){3}, TG_ERR_DTYPE, NULL);
        expect_create_error(k, (tg_dtype)-1, 1, (const int64_t[]){3}, TG_ERR_DTYPE, NULL);
        /* numel overflows int64 */
        expect_create_error(k, TG_F32, 2, (const int64_t[]){INT64_MAX / 2, 3}, TG_ERR_OVERFLOW,
                            NULL);
        expect_create_error(k, TG_F64, 6,
                            (const int64_t[]){1 << 20, 1 << 20, 1 << 20, 1 << 20, 1, 1},
                            TG_ERR_OVERFLOW, NULL);
        /* numel fits but the byte count does not (numel * 8 > INT64_MAX) */
        expect_create_error(k, TG_F64, 2, (const int64_t[]){(int64_t)1 << 31, (int64_t)1 << 31},
                            TG_ERR_OVERFLOW, NULL);
        /* one line naming the shape and the limit */
        expect_create_error(k, TG_F32, 2, (const int64_t[]){INT64_MAX, INT64_MAX},
                            TG_ERR_OVERFLOW, "shape (9223372036854775807, 9223372036854775807) "
                            "is too large (at most 1152921504606846975 elements)");
        expect_create_error(k, TG_F32, 1, (const int64_t[]){TG_MAX_NUMEL + 1}, TG_ERR_OVERFLOW,
                            "at most 1152921504606846975 elements");
    }
}
END_TEST

/* Valid but impossibly large: the allocator fails, reported as NOMEM (no abort). */
START_TEST(test_create_too_big_for_memory)
{
    tg_ctx *ctx = tg_ctx_new();
    tg_tensor *t = tg_param(ctx, TG_F64, TG_DIMS((int64_t)1 << 27, (int64_t)1 << 27), "huge");
    ck_assert_ptr_null(t);
    tu_assert_error(ctx, TG_ERR_NOMEM, "tg_param");
    tg_ctx_free(ctx);
}
END_TEST

/* ---- names -------------------------------------------------------------------------------- */
START_TEST(test_names)
{
    tg_ctx *ctx = tg_ctx_new();
    tg_tensor *a = tg_param(ctx, TG_F32, TG_DIMS(2), "encoder.weight");
    ck_assert_str_eq(tg_tensor_name(a), "encoder.weight");
    /* the name is copied */
    char buf[16] = "mutable";
    tg_tensor *b = tg_input(ctx, TG_F32, TG_DIMS(2), buf);
    strcpy(buf, "changed");
    ck_assert_str_eq(tg_tensor_name(b), "mutable");
    /* generated names: kind + number, all distinct */
    tg_tensor *gen[6];
    for (int k = 0; k < 3; k++) {
        gen[2 * k] = leaf_fns[k](ctx, TG_F32, TG_DIMS(1), NULL);
        gen[2 * k + 1] = leaf_fns[k](ctx, TG_F64, 0, NULL, NULL);
    }
    for (int i = 0; i < 6; i++) {
        const char *n = tg_tensor_name(gen[i]);
        const char *kind = leaf_names[i / 2];
        ck_assert_msg(strncmp(n, kind, strlen(kind)) == 0, "generated name '%s'", n);
        ck_assert_msg(strlen(n) > strlen(kind), "generated name '%s' has no number", n);
        for (int j = 0; j < i; j++)
            ck_assert_str_ne(n, tg_tensor_name(gen[j]));
    }
    /* op results get generated names too */
    tg_tensor *y = tg_add(ctx, a, a);
    ck_assert_msg(strncmp(tg_tensor_name(y), "add", 3) == 0, "op name '%s'", tg_tensor_name(y));
    ck_assert_str_eq(tg_tensor_op_name(y), "add");
    /* empty name is allowed */
    ck_assert_str_eq(tg_tensor_name(tg_const(ctx, TG_F32, TG_DIMS(1), "")), "");
    tg_ctx_free(ctx);
}
END_TEST

START_TEST(test_name_truncation)
{
    tg_ctx *ctx = tg_ctx_new();
    char longname[300];
    for (int i = 0; i < 299; i++)
        longname[i] = (char)('a' + i % 26);
    longname[299] = '\0';
    tg_tensor *t = tg_param(ctx, TG_F32, TG_DIMS(2), longname);
    ck_assert_ptr_nonnull(t);
    ck_assert_uint_eq(strlen(tg_tensor_name(t)), TG_NAME_MAX - 1);
    ck_assert(strncmp(tg_tensor_name(t), longname, TG_NAME_MAX - 1) == 0);
    /* exactly TG_NAME_MAX - 1 characters fits */
    longname[TG_NAME_MAX - 1] = '\0';
    t = tg_input(ctx, TG_F32, TG_DIMS(2), longname);
    ck_assert_str_eq(tg_tensor_name(t), longname);
    /* set_name truncates the same way */
    longname[TG_NAME_MAX - 1] = 'X';
    ck_assert_int_eq(tg_tensor_set_name(t, longname), TG_OK);
    ck_assert_uint_eq(strlen(tg_tensor_name(t)), TG_NAME_MAX - 1);
    tg_ctx_free(ctx);
}
END_TEST

START_TEST(test_set_name)
{
    tg_ctx *ctx = tg_ctx_new();
    tg_tensor *t = tg_param(ctx, TG_F32, TG_DIMS(2), "old");
    ck_assert_int_eq(tg_tensor_set_name(t, "new.name"), TG_OK);
    ck_assert_str_eq(tg_tensor_name(t), "new.name");
    ck_assert_int_eq(tg_tensor_set_name(t, NULL), TG_ERR_ARG);
    ck_assert_str_eq(tg_tensor_name(t), "new.name");
    ck_assert_int_eq(tg_tensor_set_name(NULL, "x"), TG_ERR_ARG);
    /* op results can be renamed */
    tg_tensor *y = tg_scale(ctx, t, 2.0);
    ck_assert_int_eq(tg_tensor_set_name(y, "logits"), TG_OK);
    ck_assert_str_eq(tg_tensor_name(y), "logits");
    ck_assert_str_eq(tg_tensor_op_name(y), "scale");
    tg_ctx_free(ctx);
}
END_TEST

/* ---- kinds and requires_grad -------------------------------------------------------------- */
START_TEST(test_requires_grad_rules)
{
    tg_ctx *ctx = tg_ctx_new();
    tg_tensor *p = tg_param(ctx, TG_F64, TG_DIMS(2), "p");
    tg_tensor *in = tg_input(ctx, TG_F64, TG_DIMS(2), "in");
    tg_tensor *c = tg_const(ctx, TG_F64, TG_DIMS(2), "c");
    /* params always */
    ck_assert(tg_tensor_requires_grad(p));
    ck_assert_int_eq(tg_set_requires_grad(p, true), TG_OK);
    ck_assert(tg_tensor_requires_grad(p));
    ck_assert_int_eq(tg_set_requires_grad(p, false), TG_ERR_ARG);
    ck_assert(tg_tensor_requires_grad(p));
    tu_assert_error(ctx, TG_ERR_ARG, "tg_set_requires_grad");
    tg_ctx_clear_error(ctx);
    /* inputs on request, both ways */
    ck_assert(!tg_tensor_requires_grad(in));
    ck_assert_int_eq(tg_set_requires_grad(in, true), TG_OK);
    ck_assert(tg_tensor_requires_grad(in));
    ck_assert_int_eq(tg_set_requires_grad(in, false), TG_OK);
    ck_assert(!tg_tensor_requires_grad(in));
    ck_assert_int_eq(tg_ctx_status(ctx), TG_OK);
    /* constants refuse */
    ck_assert(!tg_tensor_requires_grad(c));
    ck_assert_int_eq(tg_set_requires_grad(c, true), TG_ERR_ARG);
    ck_assert(!tg_tensor_requires_grad(c));
    tu_assert_error(ctx, TG_ERR_ARG, "'c'");
    tg_ctx_clear_error(ctx);
    ck_assert_int_eq(tg_set_requires_grad(c, false), TG_ERR_ARG);
    tg_ctx_clear_error(ctx);
    /* op results: derived from the sources, cannot be changed */
    tg_tensor *yc = tg_scale(ctx, c, 2.0);
    tg_tensor *yp = tg_add(ctx, c, p);
    ck_assert_int_eq(tg_tensor_kind(yc), TG_KIND_OP);
    ck_assert(!tg_tensor_requires_grad(yc));
    ck_assert(tg_tensor_requires_grad(yp));
    ck_assert_int_eq(tg_set_requires_grad(yc, true), TG_ERR_ARG);
    ck_assert(!tg_tensor_requires_grad(yc));
    tg_ctx_clear_error(ctx);
    tg_set_requires_grad(in, true);
    ck_assert(tg_tensor_requires_grad(tg_mul(ctx, in, c)));
    ck_assert_int_eq(tg_set_requires_grad(NULL, true), TG_ERR_ARG);
    tg_ctx_free(ctx);
}
END_TEST

/* ---- data ---------------------------------------------------------------------------------- */
START_TEST(test_set_get_data_conversion)
{
    tg_ctx *ctx = tg_ctx_new();
    const double d[6] = {0.1, -2.5, 1e30, 3.0, -0.0, 1.0 / 3.0};
    const float f[6] = {0.1f, -2.5f, 1e30f, 3.0f, -0.0f, 1.0f / 3.0f};
    tg_tensor *t32 = tg_input(ctx, TG_F32, TG_DIMS(2, 3), "t32");
    tg_tensor *t64 = tg_input(ctx, TG_F64, TG_DIMS(3, 2), "t64");
    /* f64 -> f32 rounds, f32 -> f64 is exact */
    ck_assert_int_eq(tg_tensor_set_data(t32, d, TG_F64, 6), TG_OK);
    ck_assert_int_eq(tg_tensor_set_data(t64, f, TG_F32, 6), TG_OK);
    for (int i = 0; i < 6; i++) {
        ck_assert(((float *)tg_tensor_data(t32))[i] == (float)d[i]);
        ck_assert(((double *)tg_tensor_data(t64))[i] == (double)f[i]);
    }
    /* same dtype: exact copy */
    ck_assert_int_eq(tg_tensor_set_data(t64, d, TG_F64, 6), TG_OK);
    ck_assert_mem_eq(tg_tensor_data(t64), d, sizeof d);
    double od[6];
    float of[6];
    ck_assert_int_eq(tg_tensor_get_data(t64, od, TG_F64, 6), TG_OK);
    ck_assert_mem_eq(od, d, sizeof d);
    ck_assert_int_eq(tg_tensor_get_data(t64, of, TG_F32, 6), TG_OK);
    for (int i = 0; i < 6; i++)
        ck_assert(of[i] == (float)d[i]);
    ck_assert_int_eq(tg_tensor_get_data(t32, od, TG_F64, 6), TG_OK);
    for (int i = 0; i < 6; i++)
        ck_assert(od[i] == (double)(float)d[i]);
    /* signed zero survives */
    ck_assert(signbit(tg_get(t64, 4)));
    /* params and constants accept data too */
    tg_tensor *c = tg_const(ctx, TG_F64, TG_DIMS(6), "c");
    ck_assert_int_eq(tg_tensor_set_data(c, d, TG_F64, 6), TG_OK);
    ck_assert(tg_get(c, 5) == d[5]);
    tg_tensor *p = tg_param(ctx, TG_F32, TG_DIMS(6), "p");
    ck_assert_int_eq(tg_tensor_set_data(p, f, TG_F32, 6), TG_OK);
    ck_assert(tg_get(p, 1) == -2.5);
    ck_assert_int_eq(tg_ctx_status(ctx), TG_OK);
    tg_ctx_free(ctx);
}
END_TEST

START_TEST(test_set_data_errors)
{
    tg_ctx *ctx = tg_ctx_new();
    double d[7] = {1, 2, 3, 4, 5, 6, 7};
    tg_tensor *t = tg_input(ctx, TG_F64, TG_DIMS(2, 3), "t");
    ck_assert_int_eq(tg_tensor_set_data(t, d, TG_F64, 7), TG_ERR_SHAPE);
    tu_assert_error(ctx, TG_ERR_SHAPE, "'t' (2, 3) has 6 elements, got 7");
    tg_ctx_clear_error(ctx);
    ck_assert_int_eq(tg_tensor_set_data(t, d, TG_F64, 5), TG_ERR_SHAPE);
    ck_assert_int_eq(tg_tensor_set_data(t, d, TG_F64, 0), TG_ERR_SHAPE);
    tg_ctx_clear_error(ctx);
    for (int i = 0; i < 6; i++)
        ck_assert(tg_get(t, i) == 0); /* unchanged by failed calls */
    ck_assert_int_eq(tg_tensor_set_data(t, NULL, TG_F64, 6), TG_ERR_ARG);
    ck_assert_int_eq(tg_tensor_set_data(NULL, d, TG_F64, 6), TG_ERR_ARG);
    ck_assert_int_eq(tg_tensor_set_data(t, d, (tg_dtype)9, 6), TG_ERR_ARG);
    /* op results are computed, never set */
    tg_tensor *y = tg_scale(ctx, t, 2.0);
    ck_assert_int_eq(tg_tensor_set_data(y, d, TG_F64, 6), TG_ERR_STATE);
    tu_assert_error(ctx, TG_ERR_STATE, "scale");
    tg_ctx_clear_error(ctx);
    /* reshape views are op results too */
    tg_tensor *v = tg_reshape(ctx, t, TG_DIMS(6));
    ck_assert_int_eq(tg_tensor_set_data(v, d, TG_F64, 6), TG_ERR_STATE);
    /* get_data errors */
    double out[6];
    ck_assert_int_eq(tg_tensor_get_data(t, out, TG_F64, 5), TG_ERR_SHAPE);
    ck_assert_int_eq(tg_tensor_get_data(t, NULL, TG_F64, 6), TG_ERR_ARG);
    ck_assert_int_eq(tg_tensor_get_data(NULL, out, TG_F64, 6), TG_ERR_ARG);
    ck_assert_int_eq(tg_tensor_get_data(t, out, (tg_dtype)5, 6), TG_ERR_ARG);
    tg_ctx_free(ctx);
}
END_TEST

START_TEST(test_get_grad)
{
    tg_ctx *ctx = tg_ctx_new();
    tg_tensor *p = tg_param(ctx, TG_F32, TG_DIMS(3), "p");
    double out[3];
    ck_assert_int_eq(tg_tensor_get_grad(p, out, TG_F64, 3), TG_ERR_NOGRAD);
    tg_ctx_clear_error(ctx);
    ck_assert(isnan(tg_grad_get(p, 0)));
    tu_set(p, (const double[]){1, 2, 3});
    tg_tensor *y = tg_sum_all(ctx, tg_mul(ctx, p, p));
    tg_graph *g = tg_graph_new(ctx, &y, 1);
    ck_assert_ptr_nonnull(tg_tensor_grad(p));
    ck_assert_int_eq(tg_graph_forward(g), TG_OK);
    ck_assert_int_eq(tg_graph_backward(g, y, NULL), TG_OK);
    ck_assert_int_eq(tg_tensor_get_grad(p, out, TG_F64, 3), TG_OK);
    ck_assert(out[0] == 2 && out[1] == 4 && out[2] == 6);
    float of[3];
    ck_assert_int_eq(tg_tensor_get_grad(p, of, TG_F32, 3), TG_OK);
    ck_assert(of[2] == 6.0f);
    ck_assert_int_eq(tg_tensor_get_grad(p, out, TG_F64, 2), TG_ERR_SHAPE);
    ck_assert_int_eq(tg_tensor_get_grad(p, NULL, TG_F64, 3), TG_ERR_ARG);
    ck_assert(tg_grad_get(p, 1) == 4.0);
    ck_assert(isnan(tg_grad_get(p, 3)));
    ck_assert(isnan(tg_grad_get(p, -1)));
    ck_assert(isnan(tg_grad_get(NULL, 0)));
    tg_zero_grad(p);
    ck_assert(tg_grad_get(p, 1) == 0.0);
    tg_zero_grad(NULL);
    tg_tensor *c = tg_const(ctx, TG_F32, TG_DIMS(2), "c");
    tg_zero_grad(c); /* no gradient buffer: no-op */
    ck_assert_ptr_null(tg_tensor_grad(c));
    tg_ctx_free(ctx);
}
END_TEST

/* ---- element access ----------------------------------------------------------------------- */
START_TEST(test_element_access)
{
    tg_ctx *ctx = tg_ctx_new();
    for (int dt = 0; dt < 2; dt++) {
        tg_tensor *t = tg_input(ctx, (tg_dtype)dt, TG_DIMS(2, 3, 4), "t");
        for (int64_t i = 0; i < 24; i++)
            tg_set(t, i, (double)i - 0.5);
        for (int64_t i = 0; i < 24; i++)
            ck_assert(tg_get(t, i) == (double)i - 0.5);
        ck_assert(tg_get_at(t, (const int64_t[]){1, 2, 3}) == 23 - 0.5);
        ck_assert(tg_get_at(t, (const int64_t[]){0, 1, 2}) == 6 - 0.5);
        ck_assert(tg_get_at(t, (const int64_t[]){1, 0, 0}) == 12 - 0.5);
        /* out of range: NaN / no-op */
        ck_assert(isnan(tg_get(t, -1)));
        ck_assert(isnan(tg_get(t, 24)));
        ck_assert(isnan(tg_get(t, INT64_MAX)));
        ck_assert(isnan(tg_get(t, INT64_MIN)));
        ck_assert(isnan(tg_get(NULL, 0)));
        ck_assert(isnan(tg_get_at(t, (const int64_t[]){2, 0, 0})));
        ck_assert(isnan(tg_get_at(t, (const int64_t[]){0, 3, 0})));
        ck_assert(isnan(tg_get_at(t, (const int64_t[]){0, 0, -1})));
        ck_assert(isnan(tg_get_at(t, NULL)));
        ck_assert(isnan(tg_get_at(NULL, (const int64_t[]){0, 0, 0})));
        tg_set(t, -1, 99);
        tg_set(t, 24, 99);
        tg_set(t, INT64_MAX, 99);
        tg_set(NULL, 0, 99);
        for (int64_t i = 0; i < 24; i++)
            ck_assert(tg_get(t, i) == (double)i - 0.5);
        /* f32 storage rounds */
        tg_set(t, 0, 0.1);
        ck_assert(tg_get(t, 0) == (dt == TG_F32 ? (double)0.1f : 0.1));
    }
    /* rank 0: one element; get_at takes no coordinates */
    tg_tensor *s = tg_param(ctx, TG_F64, 0, NULL, "s");
    tg_set(s, 0, 4.25);
    ck_assert(tg_get(s, 0) == 4.25);
    ck_assert(tg_get_at(s, NULL) == 4.25);
    ck_assert(isnan(tg_get(s, 1)));
    /* special values are stored, not filtered */
    tg_set(s, 0, INFINITY);
    ck_assert(isinf(tg_get(s, 0)));
    tg_set(s, 0, NAN);
    ck_assert(isnan(tg_get(s, 0)));
    tg_ctx_free(ctx);
}
END_TEST

/* ---- fills -------------------------------------------------------------------------------- */
START_TEST(test_fill)
{
    tg_ctx *ctx = tg_ctx_new();
    for (int dt = 0; dt < 2; dt++) {
        tg_tensor *t = tg_param(ctx, (tg_dtype)dt, TG_DIMS(3, 5), "t");
        tg_fill(t, -1.5);
        for (int64_t i = 0; i < 15; i++)
            ck_assert(tg_get(t, i) == -1.5);
        tg_fill(t, 0);
        for (int64_t i = 0; i < 15; i++)
            ck_assert(tg_get(t, i) == 0);
    }
    tg_fill(NULL, 1);
    tg_fill_uniform(NULL, 0, 1);
    tg_fill_normal(NULL, 0, 1);
    tg_ctx_free(ctx);
}
END_TEST

/* A finite f64 that would round to an infinity in f32 (1e308) is refused wherever it would
 * become an f32, naming the value; nothing is written. NaN, the infinities, FLT_MAX and values
 * that round down to FLT_MAX stay allowed. */
START_TEST(test_f32_range)
{
    tg_ctx *ctx = tg_ctx_new();
    tg_tensor *t = tg_input(ctx, TG_F32, TG_DIMS(3), "mask");
    tg_fill(t, 1);
    const double bad[] = {1e308, -1e308, 3.5e38, 0x1.ffffffp+127, DBL_MAX};
    for (int i = 0; i < 5; i++) {
        tg_set(t, 1, bad[i]);
        tu_assert_error(ctx, TG_ERR_ARG, "tg_set: ");
        tu_assert_error(ctx, TG_ERR_ARG, "is beyond the f32 range");
        tg_fill(t, bad[i]);
        tu_assert_error(ctx, TG_ERR_ARG, "tg_fill: ");
        const double src[3] = {0, 2, bad[i]};
        ck_assert_int_eq(tg_tensor_set_data(t, src, TG_F64, 3), TG_ERR_ARG);
        tu_assert_error(ctx, TG_ERR_ARG, "element 2 of the source is");
        tu_assert_error(ctx, TG_ERR_ARG, "beyond the f32 range");
        tg_tensor *s64 = tg_const(ctx, TG_F64, TG_DIMS(3), "big");
        tg_tensor_set_data(s64, src, TG_F64, 3);
        ck_assert_int_eq(tg_tensor_copy(t, s64), TG_ERR_ARG);
        tu_assert_error(ctx, TG_ERR_ARG, "tg_tensor_copy: element 2 of the source is");
        float out[3];
        ck_assert_int_eq(tg_tensor_get_data(s64, out, TG_F32, 3), TG_ERR_ARG);
        tu_assert_error(ctx, TG_ERR_ARG, "'big' is read as f32");
        for (int k = 0; k < 3; k++)
            ck_assert(tg_get(t, k) == 1);
    }
    /* random fills: bounds whose values cannot be f32 are refused before drawing (the
     * tensor and the RNG unchanged: the next draw is the one a clean context makes) */
    uint64_t st0[4], st1[4];
    tg_rng_get_state(ctx, st0);
    const double lohi[][2] = {{-1e308, 1e308}, {0, 1e39}, {-3.5e38, 0}, {0, INFINITY},
                              {NAN, 1}};
    const double means[] = {1e308, -3.5e38, INFINITY, NAN, 0};
    const double stds[] = {1, 1, 1, 1, INFINITY};
    for (int i = 0; i < 5; i++) {
        tg_fill_uniform(t, lohi[i][0], lohi[i][1]);
        tu_assert_error(ctx, TG_ERR_ARG, "tg_fill_uniform: bounds");
        tg_fill_normal(t, means[i], stds[i]);
        tu_assert_error(ctx, TG_ERR_ARG, "tg_fill_normal: mean and std");
    }
    tg_fill_normal(t, 0, 1e37); /* 40 std reach 4e38: an f32 draw could overflow */
    tu_assert_error(ctx, TG_ERR_ARG, "beyond the f32 range of 'mask'");
    tg_rng_get_state(ctx, st1);
    ck_assert(memcmp(st0, st1, sizeof st0) == 0);
    for (int k = 0; k < 3; k++)
        ck_assert(tg_get(t, k) == 1);
    tg_tensor *d = tg_input(ctx, TG_F64, TG_DIMS(3), "d");
    tg_fill_uniform(d, -1e308, 1e308); /* finite bounds, but hi - lo overflows f64 */
    tu_assert_error(ctx, TG_ERR_ARG, "beyond the f64 range of 'd'");
    tg_ctx_clear_error(ctx);
    tg_fill_uniform(t, -3e38, 3e38); /* within f32, width 6e38 is finite in f64: fine */
    ck_assert_int_eq(tg_ctx_status(ctx), TG_OK);
    for (int k = 0; k < 3; k++)
        ck_assert(isfinite(tg_get(t, k)));
    char msg[64];
    snprintf(msg, sizeof msg, "%.17g is beyond", 1e308);
    tg_set(t, 0, 1e308);
    tu_assert_error(ctx, TG_ERR_ARG, msg);
    tg_ctx_clear_error(ctx);
    const double ok[] = {FLT_MAX, -FLT_MAX, 0x1.fffffefffffffp+127, INFINITY, -INFINITY, 1e-300};
    for (int i = 0; i < 6; i++) {
        tg_set(t, 0, ok[i]);
        ck_assert_int_eq(tg_ctx_status(ctx), TG_OK);
        ck_assert(tg_get(t, 0) == (double)(float)ok[i]);
    }
    tg_set(t, 0, NAN);
    ck_assert(isnan(tg_get(t, 0)));
    ck_assert_int_eq(tg_ctx_status(ctx), TG_OK);
    tg_ctx_free(ctx);
}
END_TEST

START_TEST(test_fill_uniform)
{
    tg_ctx *ctx = tg_ctx_new();
    tg_ctx_seed(ctx, 17);
    tg_tensor *t = tg_param(ctx, TG_F64, TG_DIMS(100, 100), "t");
    tg_fill_uniform(t, -2, 3);
    double s = 0, mn = 1e9, mx = -1e9;
    for (int64_t i = 0; i < 10000; i++) {
        double v = tg_get(t, i);
        ck_assert(v >= -2 && v < 3);
        s += v;
        mn = fmin(mn, v);
        mx = fmax(mx, v);
    }
    ck_assert_double_lt(fabs(s / 10000 - 0.5), 0.05);
    ck_assert_double_lt(mn, -1.9);
    ck_assert_double_gt(mx, 2.9);
    /* reproducible from the context seed; the values are the RNG's in element order */
    tg_ctx *other = tg_ctx_new();
    tg_ctx_seed(other, 17);
    tg_tensor *u = tg_param(other, TG_F64, TG_DIMS(10000), "u");
    tg_fill_uniform(u, -2, 3);
    ck_assert_mem_eq(tg_tensor_data(t), tg_tensor_data(u), 10000 * sizeof(double));
    tg_ctx_seed(other, 17);
    ck_assert(tg_get(u, 0) == -2 + 5 * tg_rng_uniform(other));
    /* f32: within range after rounding */
    tg_tensor *f = tg_param(ctx, TG_F32, TG_DIMS(1000), "f");
    tg_fill_uniform(f, 0, 1);
    for (int64_t i = 0; i < 1000; i++)
        ck_assert(tg_get(f, i) >= 0 && tg_get(f, i) <= 1);
    tg_ctx_free(other);
    tg_ctx_free(ctx);
}
END_TEST

START_TEST(test_fill_normal)
{
    tg_ctx *ctx = tg_ctx_new();
    tg_ctx_seed(ctx, 23);
    tg_tensor *t = tg_param(ctx, TG_F64, TG_DIMS(200, 100), "t");
    tg_fill_normal(t, 3.0, 0.5);
    double s = 0, s2 = 0;
    for (int64_t i = 0; i < 20000; i++) {
        double v = tg_get(t, i);
        s += v;
        s2 += v * v;
    }
    double mean = s / 20000, var = s2 / 20000 - mean * mean;
    ck_assert_msg(fabs(mean - 3.0) < 0.02, "mean %g", mean);
    ck_assert_msg(fabs(sqrt(var) - 0.5) < 0.02, "std %g", sqrt(var));
    tg_ctx_free(ctx);
}
END_TEST

/* ---- tensor_copy -------------------------------------------------------------------------- */
START_TEST(test_tensor_copy)
{
    tg_ctx *ctx = tg_ctx_new();
    tg_tensor *a = tg_param(ctx, TG_F64, TG_DIMS(2, 3), "a");
    tg_tensor *b = tg_input(ctx, TG_F32, TG_DIMS(2, 3), "b");
    tg_tensor *c = tg_const(ctx, TG_F64, TG_DIMS(2, 3), "c");
    for (int64_t i = 0; i < 6; i++)
        tg_set(a, i, 0.1 * (double)i);
    ck_assert_int_eq(tg_tensor_copy(b, a), TG_OK); /* f64 -> f32 */
    for (int64_t i = 0; i < 6; i++)
        ck_assert(tg_get(b, i) == (double)(float)(0.1 * (double)i));
    ck_assert_int_eq(tg_tensor_copy(c, b), TG_OK); /* f32 -> f64 exact */
    for (int64_t i = 0; i < 6; i++)
        ck_assert(tg_get(c, i) == tg_get(b, i));
    /* copy from an op result (after forward) into a leaf */
    tg_tensor *y = tg_scale(ctx, a, 2.0);
    tg_graph *g = tg_graph_new(ctx, &y, 1);
    tg_graph_forward(g);
    ck_assert_int_eq(tg_tensor_copy(c, y), TG_OK);
    ck_assert(tg_get(c, 5) == 2 * 0.5);
    /* errors */
    tg_tensor *d = tg_param(ctx, TG_F64, TG_DIMS(7), "d");
    ck_assert_int_eq(tg_tensor_copy(d, a), TG_ERR_SHAPE);
    ck_assert_int_eq(tg_tensor_copy(y, a), TG_ERR_STATE);
    tg_ctx_clear_error(ctx);
    ck_assert_int_eq(tg_tensor_copy(NULL, a), TG_ERR_ARG);
    ck_assert_int_eq(tg_tensor_copy(a, NULL), TG_ERR_ARG);
    /* same numel, different shape: the header promises "same shape" */
    tg_tensor *e = tg_param(ctx, TG_F64, TG_DIMS(3, 2), "e");
    ck_assert_int_eq(tg_tensor_copy(e, a), TG_ERR_SHAPE);
    tg_ctx_free(ctx);
}
END_TEST

/* ---- shapes as text and axes -------------------------------------------------------------- */
START_TEST(test_shape_str)
{
    tg_ctx *ctx = tg_ctx_new();
    char buf[64];
    ck_assert_str_eq(tg_tensor_shape_str(tg_param(ctx, TG_F32, TG_DIMS(2, 3), NULL), buf,
                                         sizeof buf),
                     "(2, 3)");
    ck_assert_str_eq(tg_tensor_shape_str(tg_param(ctx, TG_F32, 0, NULL, NULL), buf, sizeof buf),
                     "()");
    ck_assert_str_eq(tg_tensor_shape_str(tg_param(ctx, TG_F32, TG_DIMS(5), NULL), buf,
                                         sizeof buf),
                     "(5)");
    tg_tensor *r6 = tg_input(ctx, TG_F32, TG_DIMS(1, 2, 3, 4, 5, 6), NULL);
    ck_assert_str_eq(tg_tensor_shape_str(r6, buf, sizeof buf), "(1, 2, 3, 4, 5, 6)");
    tg_tensor *big = tg_input(ctx, TG_F32, TG_DIMS(1, 1234567), NULL);
    ck_assert_str_eq(tg_tensor_shape_str(big, buf, sizeof buf), "(1, 1234567)");
    /* the return value is the buffer */
    ck_assert_ptr_eq(tg_tensor_shape_str(big, buf, sizeof buf), buf);
    /* small buffers truncate, always terminated, never overrun */
    char small[8];
    memset(small, 'Z', sizeof small);
    tg_tensor_shape_str(r6, small, 6);
    ck_assert_uint_lt(strlen(small), 6);
    ck_assert_int_eq(small[6], 'Z');
    ck_assert(strncmp(small, "(1, 2", 5) == 0);
    memset(small, 'Z', sizeof small);
    tg_tensor_shape_str(r6, small, 1);
    ck_assert_int_eq(small[0], '\0');
    ck_assert_int_eq(small[1], 'Z');
    memset(small, 'Z', sizeof small);
    tg_tensor_shape_str(r6, small, 0);
    ck_assert_int_eq(small[0], 'Z');
    ck_assert_ptr_nonnull(tg_tensor_shape_str(NULL, buf, sizeof buf));
    ck_assert_ptr_nonnull(tg_tensor_shape_str(r6, NULL, 10));
    tg_ctx_free(ctx);
}
END_TEST

START_TEST(test_dim_axes)
{
    tg_ctx *ctx = tg_ctx_new();
    tg_tensor *t = tg_input(ctx, TG_F32, TG_DIMS(2, 3, 4), "t");
    ck_assert_int_eq(tg_tensor_dim(t, 0), 2);
    ck_assert_int_eq(tg_tensor_dim(t, 2), 4);
    ck_assert_int_eq(tg_tensor_dim(t, -1), 4);
    ck_assert_int_eq(tg_tensor_dim(t, -2), 3);
    ck_assert_int_eq(tg_tensor_dim(t, -3), 2);
    ck_assert_int_eq(tg_tensor_dim(t, -4), -1);
    ck_assert_int_eq(tg_tensor_dim(t, 3), -1);
    ck_assert_int_eq(tg_tensor_dim(t, 100), -1);
    ck_assert_int_eq(tg_tensor_dim(NULL, 0), -1);
    tg_tensor *s = tg_input(ctx, TG_F32, 0, NULL, "s");
    ck_assert_int_eq(tg_tensor_dim(s, 0), -1);
    ck_assert_int_eq(tg_tensor_dim(s, -1), -1);
    tg_ctx_free(ctx);
}
END_TEST

START_TEST(test_null_accessors)
{
    ck_assert_ptr_null(tg_tensor_ctx(NULL));
    ck_assert_int_eq(tg_tensor_rank(NULL), 0);
    ck_assert_int_eq(tg_tensor_numel(NULL), 0);
    ck_assert(!tg_tensor_requires_grad(NULL));
    ck_assert_ptr_nonnull(tg_tensor_name(NULL));
    ck_assert_ptr_nonnull(tg_tensor_op_name(NULL));
    ck_assert_ptr_null(tg_tensor_data(NULL));
    ck_assert_ptr_null(tg_tensor_grad(NULL));
}
END_TEST

/* Tensors from one context are rejected by another's builders. */
START_TEST(test_foreign_context)
{
    tg_ctx *a = tg_ctx_new(), *b = tg_ctx_new();
    tg_tensor *x = tg_param(a, TG_F32, TG_DIMS(2), "x");
    tg_tensor *y = tg_param(b, TG_F32, TG_DIMS(2), "y");
    ck_assert_ptr_null(tg_add(b, x, y));
    tu_assert_error(b, TG_ERR_ARG, "another context");
    ck_assert_int_eq(tg_ctx_status(a), TG_OK);
    /* mixed dtypes */
    tg_ctx_clear_error(b);
    tg_tensor *z = tg_param(b, TG_F64, TG_DIMS(2), "z");
    ck_assert_ptr_null(tg_mul(b, y, z));
    tu_assert_error(b, TG_ERR_DTYPE, "f32");
    tg_ctx_free(a);
    tg_ctx_free(b);
}
END_TEST

static Suite *tensor_suite(void)
{
    Suite *s = suite_create("tensor");
    TCase *tc = tcase_create("create");
    tcase_add_test(tc, test_create_every_rank);
    tcase_add_test(tc, test_create_errors);
    tcase_add_test(tc, test_create_too_big_for_memory);
    tcase_add_test(tc, test_null_accessors);
    tcase_add_test(tc, test_foreign_context);
    suite_add_tcase(s, tc);

    tc = tcase_create("names");
    tcase_add_test(tc, test_names);
    tcase_add_test(tc, test_name_truncation);
    tcase_add_test(tc, test_set_name);
    suite_add_tcase(s, tc);

    tc = tcase_create("kinds");
    tcase_add_test(tc, test_requires_grad_rules);
    suite_add_tcase(s, tc);

    tc = tcase_create("data");
    tcase_add_test(tc, test_set_get_data_conversion);
    tcase_add_test(tc, test_set_data_errors);
    tcase_add_test(tc, test_get_grad);
    tcase_add_test(tc, test_element_access);
    tcase_add_test(tc, test_fill);
    tcase_add_test(tc, test_f32_range);
    tcase_add_test(tc, test_fill_uniform);
    tcase_add_test(tc, test_fill_normal);
    tcase_add_test(tc, test_tensor_copy);
    suite_add_tcase(s, tc);

    tc = tcase_create("shape");
    tcase_add_test(tc, test_shape_str);
    tcase_add_test(tc, test_dim_axes);
    suite_add_tcase(s, tc);
    return s;
}

int main(void) { return tu_run(tensor_suite()); }
