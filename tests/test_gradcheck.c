/*
 * test_gradcheck.c - tg_gradcheck as a public API: the report, detection of a real
 * analytic/numeric disagreement (ReLU exactly at its kink), tolerances, projection mode,
 * max_elements, dtype defaults, argument errors, and that it leaves no trace: leaf data and
 * gradients, outputs, context RNG state and context memory are all as before, even when it
 * runs out of memory part-way.
 */
#include "testutil.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Values in [-1, -0.1] U [0.1, 1]: no ReLU kink within any eps. */
static void away_from_zero(tg_tensor *t)
{
    for (int64_t i = 0; i < tg_tensor_numel(t); i++) {
        double v = tg_get(t, i);
        tg_set(t, i, v >= 0 ? 0.1 + 0.9 * v : -0.1 + 0.9 * v);
    }
}

/* ---- the report --------------------------------------------------------------------------- */
START_TEST(test_report_pass)
{
    tg_ctx *ctx = tg_ctx_new();
    tg_ctx_seed(ctx, 1);
    tg_tensor *x = tu_input(ctx, TG_F64, TG_DIMS(3, 4), "x", -1, 1);
    tg_tensor *w = tg_param(ctx, TG_F64, TG_DIMS(2, 4), "w");
    tg_tensor *c = tg_const(ctx, TG_F64, TG_DIMS(2), "c");
    tg_fill_uniform(w, -1, 1);
    tg_fill_uniform(c, -1, 1);
    tg_tensor *y = tg_gelu(ctx, tg_dense(ctx, x, w, c)); /* c: constant bias, not checked */
    tg_gradcheck_report rep;
    memset(&rep, 0x5a, sizeof rep);
    ck_assert_int_eq(tg_gradcheck(ctx, y, NULL, &rep), TG_OK);
    ck_assert(rep.passed);
    ck_assert(rep.backward_deterministic);
    ck_assert(rep.zero_upstream_ok);
    ck_assert_int_eq(rep.n_tensors, 2);
    ck_assert_int_eq(rep.n_checked, 12 + 8);
    ck_assert(rep.max_abs_err >= 0 && rep.max_abs_err < 1e-7);
    ck_assert(rep.max_rel_err >= 0 && rep.max_rel_err < 1e-5);
    ck_assert(strcmp(rep.worst_tensor, "x") == 0 || strcmp(rep.worst_tensor, "w") == 0);
    ck_assert_int_ge(rep.worst_index, 0);
    ck_assert_int_eq(rep.worst_rank, 2);
    ck_assert(rep.worst_abs_err <= rep.max_abs_err);
    ck_assert(fabs(rep.worst_analytic - rep.worst_numeric) == rep.worst_abs_err);
    ck_assert_msg(strncmp(rep.message, "PASS", 4) == 0, "message '%s'", rep.message);
    ck_assert(memchr(rep.message, '\0', sizeof rep.message) != NULL);
    ck_assert_int_eq(tg_ctx_status(ctx), TG_OK);
    tg_ctx_free(ctx);
}
END_TEST

/* ReLU exactly at 0: the analytic gradient is 0 (PyTorch's choice), the central difference
 * straddles the kink and sees r/2. Gradcheck must fail and point at that element. */
START_TEST(test_detects_kink)
{
    tg_ctx *ctx = tg_ctx_new();
    tg_ctx_seed(ctx, 2);
    tg_tensor *x = tu_input(ctx, TG_F64, TG_DIMS(2, 3), "x", -1, 1);
    away_from_zero(x);
    tg_set(x, 5, 0.0); /* x[1, 2] */
    tg_gradcheck_report rep;
    ck_assert_int_eq(tg_gradcheck(ctx, tg_relu(ctx, x), NULL, &rep), TG_ERR_GRADCHECK);
    ck_assert(!rep.passed);
    ck_assert(rep.backward_deterministic); /* the failure is the gradient, nothing else */
    ck_assert(rep.zero_upstream_ok);
    ck_assert_int_eq(rep.n_checked, 6);
    ck_assert_str_eq(rep.worst_tensor, "x");
    ck_assert_int_eq(rep.worst_index, 5);
    ck_assert_int_eq(rep.worst_rank, 2);
    ck_assert_int_eq(rep.worst_coords[0], 1);
    ck_assert_int_eq(rep.worst_coords[1], 2);
    ck_assert(rep.worst_analytic == 0.0);
    ck_assert_msg(rep.worst_numeric >= 0.25 && rep.worst_numeric < 0.75, "numeric %g",
                  rep.worst_numeric); /* r/2 with r in [0.5, 1.5) */
    ck_assert(rep.worst_abs_err == rep.worst_numeric);
    ck_assert(rep.max_abs_err == rep.worst_abs_err);
    ck_assert_double_eq_tol(rep.worst_rel_err, 1.0, 1e-6);
    ck_assert_double_eq_tol(rep.max_rel_err, 1.0, 1e-6);
    ck_assert_msg(strncmp(rep.message, "FAIL", 4) == 0, "message '%s'", rep.message);
    ck_assert_msg(strstr(rep.message, "'x'[5]") != NULL, "message '%s'", rep.message);
    tg_ctx_free(ctx);
}
END_TEST

/* Several leaves, rank 3: the report names the right tensor and coordinates. */
START_TEST(test_detects_kink_second_tensor)
{
    tg_ctx *ctx = tg_ctx_new();
    tg_ctx_seed(ctx, 3);
    tg_tensor *a = tu_input(ctx, TG_F64, TG_DIMS(2, 2, 2), "a", 0.5, 1.0);
    tg_tensor *b = tg_param(ctx, TG_F64, TG_DIMS(2, 2, 2), "layer.b");
    tg_fill_uniform(b, -1, 1);
    away_from_zero(b);
    tg_set(b, 3, 0.0); /* (0, 1, 1) */
    tg_tensor *y = tg_mul(ctx, a, tg_relu(ctx, b));
    tg_gradcheck_report rep;
    ck_assert_int_eq(tg_gradcheck(ctx, y, NULL, &rep), TG_ERR_GRADCHECK);
    ck_assert_int_eq(rep.n_tensors, 2);
    ck_assert_int_eq(rep.n_checked, 16);
    ck_assert_str_eq(rep.worst_tensor, "layer.b");
    ck_assert_int_eq(rep.worst_index, 3);
    ck_assert_int_eq(rep.worst_rank, 3);
    ck_assert_int_eq(rep.worst_coords[0], 0);
    ck_assert_int_eq(rep.worst_coords[1], 1);
    ck_assert_int_eq(rep.worst_coords[2], 1);
    ck_assert(rep.worst_analytic == 0.0);
    ck_assert(rep.worst_numeric > 0.1);
    /* projection mode sees it too */
    tg_gradcheck_opts o = tg_gradcheck_defaults(TG_F64);
    o.n_projections = 8;
    ck_assert_int_eq(tg_gradcheck(ctx, y, &o, &rep), TG_ERR_GRADCHECK);
    ck_assert(!rep.passed);
    ck_assert_str_eq(rep.worst_tensor, "");
    ck_assert_int_lt(rep.worst_index, 8);
    tg_ctx_free(ctx);
}
END_TEST

/* ---- options ------------------------------------------------------------------------------ */
START_TEST(test_tight_tolerances_fail)
{
    tg_ctx *ctx = tg_ctx_new();
    tg_ctx_seed(ctx, 4);
    tg_tensor *x = tu_input(ctx, TG_F64, TG_DIMS(3, 5), "x", -2, 2);
    tg_tensor *y = tg_softmax(ctx, tg_gelu(ctx, x));
    tg_gradcheck_report rep;
    ck_assert_int_eq(tg_gradcheck(ctx, y, NULL, &rep), TG_OK);
    double err = rep.max_abs_err;
    ck_assert(err > 0);
    tg_gradcheck_opts o = tg_gradcheck_defaults(TG_F64);
    o.atol = 0;
    o.rtol = 1e-13; /* below central-difference accuracy */
    ck_assert_int_eq(tg_gradcheck(ctx, y, &o, &rep), TG_ERR_GRADCHECK);
    ck_assert(!rep.passed);
    ck_assert(rep.backward_deterministic && rep.zero_upstream_ok);
    /* loose enough again */
    o.atol = 10 * err;
    o.rtol = 0;
    ck_assert_int_eq(tg_gradcheck(ctx, y, &o, &rep), TG_OK);
    /* a large eps makes the central difference inaccurate: fails at default tolerances */
    o = tg_gradcheck_defaults(TG_F64);
    o.eps = 0.5;
    ck_assert_int_eq(tg_gradcheck(ctx, y, &o, &rep), TG_ERR_GRADCHECK);
    tg_ctx_free(ctx);
}
END_TEST

START_TEST(test_projection_mode)
{
    tg_ctx *ctx = tg_ctx_new();
    tg_ctx_seed(ctx, 5);
    tg_tensor *x = tu_input(ctx, TG_F64, TG_DIMS(64, 64), "x", -1, 1);
    tg_tensor *w = tg_param(ctx, TG_F64, TG_DIMS(64, 64), "w");
    tg_tensor *b = tg_param(ctx, TG_F64, TG_DIMS(64), "b");
    tg_fill_uniform(w, -0.125, 0.125);
    tg_fill_uniform(b, -1, 1);
    tg_tensor *y = tg_dense(ctx, x, w, b);
    tg_gradcheck_opts o = tg_gradcheck_defaults(TG_F64);
    o.n_projections = 8;
    tg_gradcheck_report rep;
    double t0 = now_s();
    tg_status s = tg_gradcheck(ctx, y, &o, &rep);
    double dt = now_s() - t0;
    ck_assert_msg(s == TG_OK, "%s", rep.message);
    ck_assert_int_eq(rep.n_checked, 8);
    ck_assert_int_eq(rep.n_tensors, 3);
    ck_assert_str_eq(rep.worst_tensor, "");
    ck_assert(rep.worst_index >= 0 && rep.worst_index < 8);
    ck_assert(rep.backward_deterministic && rep.zero_upstream_ok);
    /* 8 projections: about 8 backward + 16 forward runs, not 2 per element (8256 elements) */
    if (!tu_under_valgrind())
        ck_assert_msg(dt < 1.0, "projection mode took %.3f s", dt);
    /* also on non-linear ops */
    tg_tensor *z = tg_layer_norm(ctx, tg_softmax(ctx, tg_narrow(ctx, y, 1, 3, 10)), NULL, NULL,
                                 1e-5);
    ck_assert_int_eq(tg_gradcheck(ctx, z, &o, &rep), TG_OK);
    tg_ctx_free(ctx);
}
END_TEST

START_TEST(test_max_elements)
{
    tg_ctx *ctx = tg_ctx_new();
    tg_ctx_seed(ctx, 6);
    tg_tensor *x = tu_input(ctx, TG_F64, TG_DIMS(10, 10), "x", -1, 1);
    tg_tensor *v = tu_input(ctx, TG_F64, TG_DIMS(10), "v", -1, 1);
    away_from_zero(x);
    tg_tensor *y = tg_add(ctx, tg_relu(ctx, x), v);
    tg_gradcheck_opts o = tg_gradcheck_defaults(TG_F64);
    tg_gradcheck_report rep;
    o.max_elements = 7; /* every 15th of x's 100 elements (7), every 2nd of v's 10 (5) */
    ck_assert_int_eq(tg_gradcheck(ctx, y, &o, &rep), TG_OK);
    ck_assert_int_eq(rep.n_checked, 7 + 5);
    o.max_elements = 1;
    ck_assert_int_eq(tg_gradcheck(ctx, y, &o, &rep), TG_OK);
    ck_assert_int_eq(rep.n_checked, 2);
    o.max_elements = 0; /* no limit */
    ck_assert_int_eq(tg_gradcheck(ctx, y, &o, &rep), TG_OK);
    ck_assert_int_eq(rep.n_checked, 110);
    o.max_elements = 1000;
    ck_assert_int_eq(tg_gradcheck(ctx, y, &o, &rep), TG_OK);
    ck_assert_int_eq(rep.n_checked, 110);
    /* element 0 is always among the checked ones: a kink there is still found */
    tg_set(x, 0, 0.0);
    o.max_elements = 3;
    ck_assert_int_eq(tg_gradcheck(ctx, y, &o, &rep), TG_ERR_GRADCHECK);
    ck_assert_str_eq(rep.worst_tensor, "x");
    ck_assert_int_eq(rep.worst_index, 0);
    tg_ctx_free(ctx);
}
END_TEST

START_TEST(test_dtype_defaults)
{
    tg_gradcheck_opts d64 = tg_gradcheck_defaults(TG_F64);
    ck_assert(d64.eps == 1e-6 && d64.atol == 1e-5 && d64.rtol == 1e-3);
    ck_assert_int_eq(d64.n_projections, 0);
    ck_assert_int_eq(d64.max_elements, 0);
    tg_gradcheck_opts d32 = tg_gradcheck_defaults(TG_F32);
    ck_assert(d32.eps == 1e-3 && d32.atol == 1e-2 && d32.rtol == 1e-2);
    ck_assert_int_eq(d32.n_projections, 0);
    ck_assert_int_eq(d32.max_elements, 0);
    ck_assert(d32.seed == d64.seed);

    tg_ctx *ctx = tg_ctx_new();
    tg_ctx_seed(ctx, 7);
    tg_tensor *x = tu_input(ctx, TG_F32, TG_DIMS(4, 6), "x", -2, 2);
    tg_tensor *w = tg_param(ctx, TG_F32, TG_DIMS(3, 6), "w");
    tg_fill_uniform(w, -1, 1);
    tg_tensor *y = tg_layer_norm(ctx, tg_gelu(ctx, tg_dense(ctx, x, w, NULL)), NULL, NULL, 1e-5);
    tg_gradcheck_report rep;
    /* NULL options: f32 defaults for an f32 output */
    ck_assert_int_eq(tg_gradcheck(ctx, y, NULL, &rep), TG_OK);
    ck_assert_int_eq(tg_gradcheck(ctx, y, &d32, &rep), TG_OK);
    /* f64's tiny eps is meaningless in f32 (the difference drowns in rounding) */
    ck_assert_int_eq(tg_gradcheck(ctx, y, &d64, &rep), TG_ERR_GRADCHECK);
    tg_ctx_free(ctx);
}
END_TEST

/* ---- errors ------------------------------------------------------------------------------- */
START_TEST(test_invalid_options)
{
    tg_ctx *ctx = tg_ctx_new();
    tg_tensor *x = tu_input(ctx, TG_F64, TG_DIMS(3), "x", -1, 1);
    tg_tensor *y = tg_gelu(ctx, x);
    tg_gradcheck_report rep;
    tg_gradcheck_opts bad[10];
    for (int i = 0; i < 10; i++)
        bad[i] = tg_gradcheck_defaults(TG_F64);
    bad[0].eps = 0;
    bad[1].eps = -1e-6;
    bad[2].eps = NAN;
    bad[3].eps = INFINITY;
    bad[4].atol = -1;
    bad[5].atol = NAN;
    bad[6].rtol = -1e-3;
    bad[7].rtol = NAN;
    bad[8].n_projections = -1;
    bad[9].max_elements = -5;
    for (int i = 0; i < 10; i++) {
        tg_status s = tg_gradcheck(ctx, y, &bad[i], &rep);
        ck_assert_msg(s == TG_ERR_ARG, "bad options %d: got %s", i, tg_status_str(s));
        tu_assert_error(ctx, TG_ERR_ARG, "tg_gradcheck");
        ck_assert(!rep.passed);
        tg_ctx_clear_error(ctx);
    }
    /* zero tolerances are valid (exact agreement required) */
    tg_gradcheck_opts z = tg_gradcheck_defaults(TG_F64);
    z.atol = 0;
    z.rtol = 0;
    tg_status s = tg_gradcheck(ctx, y, &z, &rep);
    ck_assert(s == TG_OK || s == TG_ERR_GRADCHECK);
    /* NULL arguments */
    ck_assert_int_eq(tg_gradcheck(NULL, y, NULL, &rep), TG_ERR_ARG);
    ck_assert_int_eq(tg_gradcheck(ctx, NULL, NULL, &rep), TG_ERR_ARG);
    ck_assert_int_eq(tg_gradcheck(ctx, y, NULL, NULL), TG_ERR_ARG);
    /* y from another context */
    tg_ctx *other = tg_ctx_new();
    tg_tensor *xo = tu_input(other, TG_F64, TG_DIMS(3), "xo", -1, 1);
    tg_tensor *yo = tg_gelu(other, xo);
    ck_assert_int_eq(tg_gradcheck(ctx, yo, NULL, &rep), TG_ERR_ARG);
    tg_ctx_free(other);
    tg_ctx_free(ctx);
}
END_TEST

/* n_projections is bounded: INT_MAX would run for ever; refused at once. */
START_TEST(test_projection_bound)
{
    tg_ctx *ctx = tg_ctx_new();
    tg_tensor *x = tu_input(ctx, TG_F64, TG_DIMS(3), "x", -1, 1);
    tg_tensor *y = tg_gelu(ctx, x);
    tg_gradcheck_report rep;
    const int bad[] = {INT_MAX, TG_GRADCHECK_MAX_PROJECTIONS + 1};
    for (int i = 0; i < 2; i++) {
        tg_gradcheck_opts o = tg_gradcheck_defaults(TG_F64);
        o.n_projections = bad[i];
        ck_assert_int_eq(tg_gradcheck(ctx, y, &o, &rep), TG_ERR_ARG);
        char want[96];
        snprintf(want, sizeof want, "tg_gradcheck: n_projections %d is more than the most, %d",
                 bad[i], TG_GRADCHECK_MAX_PROJECTIONS);
        tu_assert_error(ctx, TG_ERR_ARG, want);
        ck_assert(!rep.passed);
    }
    tg_gradcheck_opts o = tg_gradcheck_defaults(TG_F64);
    o.n_projections = 3;
    ck_assert_int_eq(tg_gradcheck(ctx, y, &o, &rep), TG_OK); /* the error did not stick */
    /* y from another context, named */
    tg_ctx *other = tg_ctx_new();
    tg_tensor *yo = tg_gelu(other, tu_input(other, TG_F64, TG_DIMS(3), "xo", -1, 1));
    ck_assert_int_eq(tg_gradcheck(ctx, yo, NULL, &rep), TG_ERR_ARG);
    tu_assert_error(ctx, TG_ERR_ARG, "belongs to another context");
    tg_ctx_free(other);
    tg_ctx_free(ctx);
}
END_TEST

START_TEST(test_nograd)
{
    tg_ctx *ctx = tg_ctx_new();
    tg_tensor *c = tg_const(ctx, TG_F64, TG_DIMS(2, 2), "c");
    tg_tensor *in = tg_input(ctx, TG_F64, TG_DIMS(2, 2), "in"); /* no requires_grad */
    tg_fill(c, 1);
    tg_gradcheck_report rep;
    ck_assert_int_eq(tg_gradcheck(ctx, tg_sum_all(ctx, tg_mul(ctx, c, in)), NULL, &rep),
                     TG_ERR_NOGRAD);
    tu_assert_error(ctx, TG_ERR_NOGRAD, "tg_gradcheck");
    tg_ctx_clear_error(ctx);
    ck_assert_int_eq(tg_gradcheck(ctx, c, NULL, &rep), TG_ERR_NOGRAD);
    tg_ctx_clear_error(ctx);
    /* a boolean mask is not differentiable even if it asks for a gradient */
    tg_tensor *m = tg_input(ctx, TG_F64, TG_DIMS(2, 2), "m");
    tg_set_requires_grad(m, true);
    ck_assert_int_eq(tg_gradcheck(ctx, tg_add_mask(ctx, c, m, TG_MASK_BLOCK), NULL, &rep),
                     TG_ERR_NOGRAD);
    tg_ctx_clear_error(ctx);
    /* a pending build error is returned as is */
    ck_assert_ptr_null(tg_softmax(ctx, tg_sum_all(ctx, c)));
    tg_tensor *p = tg_param(ctx, TG_F64, TG_DIMS(2), "p");
    ck_assert_int_eq(tg_gradcheck(ctx, p, NULL, &rep), TG_ERR_SHAPE);
    tu_assert_error(ctx, TG_ERR_SHAPE, "tg_softmax");
    tg_ctx_free(ctx);
}
END_TEST

/* A forward run that fails a data check (an out-of-range token id) is an error, not a
 * gradient mismatch and not a pass. */
START_TEST(test_forward_error_propagates)
{
    tg_ctx *ctx = tg_ctx_new();
    tg_tensor *ids = tg_const(ctx, TG_I32, TG_DIMS(3), "ids");
    tu_set(ids, (const double[]){0, 5, 1}); /* 5 is outside [0, 4) */
    tg_tensor *w = tg_param(ctx, TG_F64, TG_DIMS(4, 2), "w");
    tg_fill_uniform(w, -1, 1);
    double w0[8];
    tg_tensor_get_data(w, w0, TG_F64, 8);
    tg_tensor *y = tg_embedding(ctx, ids, w);
    ck_assert_ptr_nonnull(y);
    tg_gradcheck_report rep;
    tg_status s = tg_gradcheck(ctx, y, NULL, &rep);
    ck_assert_msg(s == TG_ERR_ARG, "got %s: %s", tg_status_str(s), rep.message);
    tu_assert_error(ctx, TG_ERR_ARG, "ids");
    ck_assert(!rep.passed);
    for (int i = 0; i < 8; i++)
        ck_assert(tg_get(w, i) == w0[i]);
    /* with valid ids it passes */
    tg_ctx_clear_error(ctx);
    tg_set(ids, 1, 3);
    tu_assert_gradcheck(ctx, y);
    tg_ctx_free(ctx);
}
END_TEST

/* ---- no trace ----------------------------------------------------------------------------- */
typedef struct {
    void *data[4], *grad[4];
    size_t bytes[4];
    void *ydata;
    size_t ybytes;
    uint64_t rng[4];
} snapshot;

static void snap_take(snapshot *s, tg_tensor *const *leaves, int n, tg_tensor *y)
{
    for (int i = 0; i < n; i++) {
        s->bytes[i] = (size_t)tg_tensor_numel(leaves[i]) * tg_dtype_size(tg_tensor_dtype(leaves[i]));
        s->data[i] = malloc(s->bytes[i]);
        s->grad[i] = malloc(s->bytes[i]);
        memcpy(s->data[i], tg_tensor_data(leaves[i]), s->bytes[i]);
        ck_assert_ptr_nonnull(tg_tensor_grad(leaves[i]));
        memcpy(s->grad[i], tg_tensor_grad(leaves[i]), s->bytes[i]);
    }
    s->ybytes = (size_t)tg_tensor_numel(y) * tg_dtype_size(tg_tensor_dtype(y));
    s->ydata = malloc(s->ybytes);
    memcpy(s->ydata, tg_tensor_data(y), s->ybytes);
    tg_rng_get_state(tg_tensor_ctx(y), s->rng);
}

static void snap_check(const snapshot *s, tg_tensor *const *leaves, int n, tg_tensor *y,
                       const char *what)
{
    for (int i = 0; i < n; i++) {
        ck_assert_msg(memcmp(s->data[i], tg_tensor_data(leaves[i]), s->bytes[i]) == 0,
                      "%s: data of '%s' changed", what, tg_tensor_name(leaves[i]));
        ck_assert_msg(memcmp(s->grad[i], tg_tensor_grad(leaves[i]), s->bytes[i]) == 0,
                      "%s: gradient of '%s' changed", what, tg_tensor_name(leaves[i]));
    }
    ck_assert_msg(memcmp(s->ydata, tg_tensor_data(y), s->ybytes) == 0, "%s: output changed",
                  what);
    uint64_t rng[4];
    tg_rng_get_state(tg_tensor_ctx(y), rng);
    ck_assert_msg(memcmp(rng, s->rng, sizeof rng) == 0, "%s: context RNG state changed", what);
}

static void snap_free(snapshot *s, int n)
{
    for (int i = 0; i < n; i++) {
        free(s->data[i]);
        free(s->grad[i]);
    }
    free(s->ydata);
}

/* Build y over three leaves (one with a ReLU kink at 0 when `kink`), give the leaves non-zero
 * gradients from an earlier backward, and run the output once. */
static tg_tensor *restore_case(tg_ctx *ctx, tg_dtype dt, bool kink, tg_tensor **leaves)
{
    tg_ctx_seed(ctx, 8);
    leaves[0] = tu_input(ctx, dt, TG_DIMS(3, 4), "x", -1, 1);
    leaves[1] = tg_param(ctx, dt, TG_DIMS(5, 4), "w");
    leaves[2] = tg_param(ctx, dt, TG_DIMS(5), "b");
    tg_fill_uniform(leaves[1], -1, 1);
    tg_fill_uniform(leaves[2], -1, 1);
    if (kink)
        tg_set(leaves[0], 2, 0.0);
    tg_tensor *h = tg_dense(ctx, tg_relu(ctx, leaves[0]), leaves[1], leaves[2]);
    tg_tensor *y = tg_dropout(ctx, tg_softmax(ctx, h), 0.25); /* draws from the context RNG */
    tg_tensor *loss = tg_sum_all(ctx, tg_mul(ctx, y, y));
    ck_assert_msg(loss != NULL, "%s", tg_ctx_message(ctx));
    tg_keep(y); /* y stays readable in the caller's graph (which stays alive) */
    tg_graph *g = tg_graph_new(ctx, &loss, 1);
    ck_assert_int_eq(tg_graph_forward(g), TG_OK);
    ck_assert_int_eq(tg_graph_backward(g, loss, NULL), TG_OK);
    ck_assert_int_eq(tg_graph_backward(g, loss, NULL), TG_OK);
    for (int i = 0; i < 3; i++)
        ck_assert(tg_grad_get(leaves[i], 0) != 0.0);
    /* the RNG moved on since the forward run: gradcheck must neither reset nor advance it */
    tg_rng_u64(ctx);
    return y;
}

START_TEST(test_restores_everything)
{
    for (int dt = 0; dt < 2; dt++)
        for (int kink = 0; kink < 2; kink++)
            for (int proj = 0; proj < 2; proj++) {
                tg_ctx *ctx = tg_ctx_new();
                tg_tensor *leaves[3];
                tg_tensor *y = restore_case(ctx, (tg_dtype)dt, kink, leaves);
                tg_gradcheck_opts o = tg_gradcheck_defaults((tg_dtype)dt);
                o.n_projections = proj ? 5 : 0;
                snapshot s;
                /* the output holds the value of the last forward run, which gradcheck
                 * recomputes: run gradcheck once, then snapshot, then check again */
                tg_gradcheck_report rep;
                tg_gradcheck(ctx, y, &o, &rep);
                snap_take(&s, leaves, 3, y);
                size_t bytes = tg_ctx_bytes(ctx);
                tg_status st = tg_gradcheck(ctx, y, &o, &rep);
                char what[64];
                snprintf(what, sizeof what, "%s%s%s", tg_dtype_str((tg_dtype)dt),
                         kink ? " kink" : "", proj ? " projections" : "");
                if (kink && !proj)
                    ck_assert_msg(st == TG_ERR_GRADCHECK, "%s: %s", what, rep.message);
                if (!kink)
                    ck_assert_msg(st == TG_OK, "%s: %s", what, rep.message);
                snap_check(&s, leaves, 3, y, what);
                /* and no context memory is kept */
                ck_assert_uint_eq(tg_ctx_bytes(ctx), bytes);
                for (int i = 0; i < 5; i++)
                    tg_gradcheck(ctx, y, &o, &rep);
                ck_assert_uint_eq(tg_ctx_bytes(ctx), bytes);
                snap_check(&s, leaves, 3, y, what);
                snap_free(&s, 3);
                tg_ctx_free(ctx);
            }
}
END_TEST

/* Out of memory at any allocation inside gradcheck: TG_ERR_NOMEM and still no trace. */
START_TEST(test_restores_on_nomem)
{
    for (int proj = 0; proj < 2; proj++) {
        for (int extra = 0;; extra++) {
            tu_failing_alloc st = {-1, 0, 0};
            tg_allocator al = tu_failing_allocator(&st);
            tg_ctx *ctx = tg_ctx_new_with(&al);
            tg_tensor *leaves[3];
            tg_tensor *y = restore_case(ctx, TG_F64, false, leaves);
            tg_gradcheck_opts o = tg_gradcheck_defaults(TG_F64);
            o.n_projections = proj ? 4 : 0;
            tg_gradcheck_report rep;
            ck_assert_int_eq(tg_gradcheck(ctx, y, &o, &rep), TG_OK);
            snapshot s;
            snap_take(&s, leaves, 3, y);
            st.budget = st.n_alloc + extra;
            tg_status r = tg_gradcheck(ctx, y, &o, &rep);
            char what[64];
            snprintf(what, sizeof what, "%s, allocation %d fails",
                     proj ? "projections" : "elements", extra);
            snap_check(&s, leaves, 3, y, what);
            snap_free(&s, 3);
            bool done = r == TG_OK;
            if (!done) {
                ck_assert_msg(r == TG_ERR_NOMEM, "%s: %s", what, tg_status_str(r));
                tu_assert_error(ctx, TG_ERR_NOMEM, NULL);
            }
            tg_ctx_free(ctx);
            ck_assert_int_eq(st.n_alloc, st.n_free);
            if (done)
                break;
            ck_assert_int_lt(extra, 100);
        }
    }
}
END_TEST

/* A stochastic op: every forward inside gradcheck sees the same mask, so it passes. */
START_TEST(test_dropout_consistent)
{
    tg_ctx *ctx = tg_ctx_new();
    tg_ctx_seed(ctx, 10);
    tg_tensor *x = tu_input(ctx, TG_F64, TG_DIMS(4, 5), "x", -1, 1);
    tg_tensor *y = tg_gelu(ctx, tg_dropout(ctx, x, 0.5));
    uint64_t before[4], after[4];
    tg_rng_get_state(ctx, before);
    tu_assert_gradcheck(ctx, y);
    tg_rng_get_state(ctx, after);
    ck_assert_mem_eq(before, after, sizeof before);
    tg_ctx_free(ctx);
}
END_TEST

static Suite *gradcheck_suite(void)
{
    Suite *s = suite_create("gradcheck");
    TCase *tc = tcase_create("report");
    tcase_add_test(tc, test_report_pass);
    tcase_add_test(tc, test_detects_kink);
    tcase_add_test(tc, test_detects_kink_second_tensor);
    suite_add_tcase(s, tc);

    tc = tcase_create("options");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_tight_tolerances_fail);
    tcase_add_test(tc, test_projection_mode);
    tcase_add_test(tc, test_max_elements);
    tcase_add_test(tc, test_dtype_defaults);
    suite_add_tcase(s, tc);

    tc = tcase_create("errors");
    tcase_add_test(tc, test_invalid_options);
    tcase_add_test(tc, test_projection_bound);
    tcase_add_test(tc, test_nograd);
    tcase_add_test(tc, test_forward_error_propagates);
    suite_add_tcase(s, tc);

    tc = tcase_create("no_trace");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_restores_everything);
    tcase_add_test(tc, test_restores_on_nomem);
    tcase_add_test(tc, test_dropout_consistent);
    suite_add_tcase(s, tc);
    return s;
}

int main(void) { return tu_run(gradcheck_suite()); }
