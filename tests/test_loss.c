/*
 * test_loss.c - cross-entropy with label smoothing (tg_cross_entropy_smoothed):
 * - PyTorch parity: every tests/fixtures/xent_<case>.safetensors (tests/fixtures/gen/gen_train_fixtures.py,
 *   F.cross_entropy(..., ignore_index, label_smoothing) in PyTorch 1.13) is rebuilt; the loss
 *   and the logits' gradient satisfy max |ours - ref| / (1 + max |ref|) <= 1e-10 (f64),
 *   1e-4 (f32);
 * - a case by hand, label_smoothing 0 equal bit for bit to tg_cross_entropy, every target
 *   ignored (0, not PyTorch's NaN), the argument checks, and thread invariance.
 * (The gradient checks are the cross_entropy "smooth*" cases of tools/cli/opcases.c.)
 */
#include "testutil.h"
#include "tgrad_io.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *const cases[] = {
    "ls01_2d", "ls03_3d_ignore", "ls01_ignore_class", "ls03_wide", "ls01_1d",
    "ls1_full", "ls0_ignore", "ls01_large", "ls03_one_class",
};
#define N_CASES ((int)(sizeof cases / sizeof cases[0]))

static double rel_err(const tg_tensor *ours, const tg_tensor *ref, bool grad)
{
    ck_assert_int_eq(tg_tensor_numel(ours), tg_tensor_numel(ref));
    double md = 0, mr = 0;
    for (int64_t i = 0; i < tg_tensor_numel(ref); i++) {
        double o = grad ? tg_grad_get(ours, i) : tg_get(ours, i), r = tg_get(ref, i);
        double d = fabs(o - r);
        if (!(d <= md))
            md = isnan(d) ? INFINITY : d;
        if (fabs(r) > mr)
            mr = fabs(r);
    }
    return md / (1 + mr);
}

static void run_fixture(const char *name, tg_dtype dt)
{
    double tol = dt == TG_F64 ? 1e-10 : 1e-4;
    char path[1024];
    snprintf(path, sizeof path, "%s/xent_%s.safetensors", TG_FIXTURES, name);
    tg_ctx *ctx = tg_ctx_new();
    tg_safetensors *st = tg_safetensors_read(ctx, path);
    ck_assert_msg(st != NULL, "%s: %s", path, tg_ctx_message(ctx));
    const char *ign_s = tg_safetensors_meta_get(st, "ignore_index");
    const char *eps_s = tg_safetensors_meta_get(st, "label_smoothing");
    ck_assert(ign_s && eps_s);
    int64_t ign = strtoll(ign_s, NULL, 10);
    double eps = strtod(eps_s, NULL);
    tg_tensor *fl = tg_safetensors_find(st, "logits"), *ft = tg_safetensors_find(st, "targets");
    tg_tensor *fg = tg_safetensors_find(st, "grad_out"), *fo = tg_safetensors_find(st, "out");
    tg_tensor *fd = tg_safetensors_find(st, "grad.logits");
    ck_assert(fl && ft && fg && fo && fd);

    /* the writer stores rank-0 values (the loss, grad_out, one row's target) as shape (1):
     * targets take the logits' leading dims, values are copied by count */
    int rank = tg_tensor_rank(fl);
    tg_tensor *x = tg_input(ctx, dt, rank, tg_tensor_shape(fl), "logits");
    tg_tensor *t = tg_input(ctx, TG_I32, rank - 1, tg_tensor_shape(fl), "targets");
    ck_assert(x && t);
    ck_assert_int_eq(tg_tensor_numel(t), tg_tensor_numel(ft));
    ck_assert_int_eq(tg_tensor_numel(fg), 1);
    ck_assert_int_eq(tg_tensor_copy(x, fl), TG_OK);
    for (int64_t i = 0; i < tg_tensor_numel(t); i++)
        tg_set(t, i, tg_get(ft, i)); /* integers stored as F64: exact */
    tg_set_requires_grad(x, true);
    tg_tensor *loss = tg_cross_entropy_smoothed(ctx, x, t, ign, eps);
    ck_assert_msg(loss != NULL, "%s", tg_ctx_message(ctx));
    tg_tensor *dy = tg_const(ctx, dt, 0, NULL, "grad_out");
    tg_set(dy, 0, tg_get(fg, 0));
    tg_graph *g = tg_graph_new(ctx, &loss, 1);
    ck_assert_ptr_nonnull(g);
    ck_assert_int_eq(tg_graph_forward(g), TG_OK);
    ck_assert_int_eq(tg_graph_backward(g, loss, dy), TG_OK);
    double e = rel_err(loss, fo, false);
    ck_assert_msg(e <= tol, "%s (%s): loss %.17g vs PyTorch %.17g: rel err %.3g > %g", name,
                  tg_dtype_str(dt), tg_get(loss, 0), tg_get(fo, 0), e, tol);
    e = rel_err(x, fd, true);
    ck_assert_msg(e <= tol, "%s (%s): grad.logits rel err %.3g > %g", name, tg_dtype_str(dt), e,
                  tol);
    tg_ctx_free(ctx);
}

START_TEST(test_fixture_f64) { run_fixture(cases[_i], TG_F64); }
END_TEST

START_TEST(test_fixture_f32) { run_fixture(cases[_i], TG_F32); }
END_TEST

/* logits [0, log 3] (softmax 1/4, 3/4), target 0, eps 0.2, V 2: q = (0.9, 0.1);
 * loss = -(0.9 log 1/4 + 0.1 log 3/4); dx = (1/4 - 0.9, 3/4 - 0.1). A second row is ignored. */
START_TEST(test_by_hand)
{
    tg_dtype dt = tu_dtypes[_i];
    double tol = dt == TG_F64 ? 1e-15 : 1e-6;
    tg_ctx *ctx = tu_ctx_new();
    tg_tensor *x = tu_in(ctx, dt, TG_DIMS(2, 2), "logits", VALS(0, log(3.0), 5, -5));
    tg_tensor *t = tg_const(ctx, TG_I32, TG_DIMS(2), "targets");
    tu_set(t, VALS(0, -100));
    tg_tensor *loss = tg_cross_entropy_smoothed(ctx, x, t, -100, 0.2);
    tg_graph *g = tu_fwd(ctx, loss);
    tu_bwd(ctx, g, loss, NULL);
    tu_expect_vals(loss, false, VALS(-(0.9 * log(0.25) + 0.1 * log(0.75))), tol);
    tu_expect_vals(x, true, VALS(-0.65, 0.65, 0, 0), tol);
    tu_ctx_free(ctx);
}
END_TEST

/* label_smoothing 0 is tg_cross_entropy bit for bit, forward and backward (both dtypes). */
START_TEST(test_zero_is_plain)
{
    tg_dtype dt = tu_dtypes[_i];
    double loss_v[2], grad_v[2][6 * 17];
    for (int k = 0; k < 2; k++) {
        tg_ctx *ctx = tu_ctx_new();
        tg_ctx_seed(ctx, 7);
        tg_tensor *x = tu_input(ctx, dt, TG_DIMS(2, 3, 17), "logits", -4, 4);
        tg_tensor *t = tg_const(ctx, TG_I32, TG_DIMS(2, 3), "targets");
        tu_set(t, VALS(3, -1, 16, 0, 9, -1));
        tg_tensor *loss = k ? tg_cross_entropy_smoothed(ctx, x, t, -1, 0.0)
                            : tg_cross_entropy(ctx, x, t, -1);
        tg_graph *g = tu_fwd(ctx, loss);
        tu_bwd(ctx, g, loss, VALS(0.75));
        loss_v[k] = tg_get(loss, 0);
        for (int i = 0; i < 6 * 17; i++)
            grad_v[k][i] = tg_grad_get(x, i);
        tu_ctx_free(ctx);
    }
    ck_assert(memcmp(&loss_v[0], &loss_v[1], sizeof loss_v[0]) == 0);
    ck_assert(memcmp(grad_v[0], grad_v[1], sizeof grad_v[0]) == 0);
}
END_TEST

/* Every target ignored: loss 0 and gradient 0 (PyTorch: NaN), with smoothing too. */
START_TEST(test_all_ignored)
{
    tg_dtype dt = tu_dtypes[_i];
    tg_ctx *ctx = tu_ctx_new();
    tg_tensor *x = tu_in(ctx, dt, TG_DIMS(3, 4), "logits", NULL);
    tg_fill_uniform(x, -1, 1);
    tg_tensor *t = tg_const(ctx, TG_I32, TG_DIMS(3), "targets");
    tg_fill(t, 7); /* 7 is not a class, but it is ignore_index: no error */
    tg_tensor *loss = tg_cross_entropy_smoothed(ctx, x, t, 7, 0.4);
    tg_graph *g = tu_fwd(ctx, loss);
    tu_bwd(ctx, g, loss, NULL);
    ck_assert(tg_get(loss, 0) == 0);
    for (int i = 0; i < 12; i++)
        ck_assert(tg_grad_get(x, i) == 0);
    tu_ctx_free(ctx);
}
END_TEST

/* label_smoothing outside [0, 1] or NaN: NULL and TG_ERR_ARG; 0 and 1 are accepted; a NULL
 * operand gives NULL without a new error; the targets are checked at each forward. */
START_TEST(test_arguments)
{
    const double bad[] = {-0.1, 1.0000001, NAN, INFINITY, -INFINITY};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        tg_ctx *ctx = tu_ctx_new();
        tg_tensor *x = tu_in(ctx, TG_F64, TG_DIMS(2, 3), "logits", NULL);
        tg_tensor *t = tg_const(ctx, TG_I32, TG_DIMS(2), "targets");
        ck_assert_ptr_null(tg_cross_entropy_smoothed(ctx, x, t, -100, bad[i]));
        tu_assert_error(ctx, TG_ERR_ARG, "tg_cross_entropy_smoothed: label_smoothing = ");
        tu_assert_error(ctx, TG_ERR_ARG, "must be in [0, 1]");
        tu_ctx_free(ctx);
    }
    tg_ctx *ctx = tu_ctx_new();
    tg_tensor *x = tu_in(ctx, TG_F64, TG_DIMS(2, 3), "logits", NULL);
    tg_tensor *t = tg_const(ctx, TG_I32, TG_DIMS(2), "targets");
    ck_assert_ptr_nonnull(tg_cross_entropy_smoothed(ctx, x, t, -100, 0.0));
    ck_assert_ptr_nonnull(tg_cross_entropy_smoothed(ctx, x, t, -100, 1.0));
    ck_assert_ptr_null(tg_cross_entropy_smoothed(ctx, NULL, t, -100, 0.1));
    ck_assert_int_eq(tg_ctx_status(ctx), TG_OK);
    tg_tensor *t3 = tg_const(ctx, TG_I32, TG_DIMS(3), "t3");
    ck_assert_ptr_null(tg_cross_entropy_smoothed(ctx, x, t3, -100, 0.1));
    tu_assert_error(ctx, TG_ERR_SHAPE, "tg_cross_entropy_smoothed: need logits (..., V)");
    tu_ctx_free(ctx);

    ctx = tu_ctx_new();
    x = tu_in(ctx, TG_F32, TG_DIMS(2, 3), "logits", NULL);
    t = tg_input(ctx, TG_I32, TG_DIMS(2), "targets");
    tu_set(t, VALS(1, 3));
    tg_tensor *loss = tg_cross_entropy_smoothed(ctx, x, t, -100, 0.1);
    tg_graph *g = tg_graph_new(ctx, &loss, 1);
    ck_assert_int_eq(tg_graph_forward(g), TG_ERR_ARG);
    tu_assert_error(ctx, TG_ERR_ARG, "target 'targets'[1] = 3 is not a class in [0, 3)");
    tu_ctx_free(ctx);
}
END_TEST

/* Thread invariance: rows enough for the parallel paths, a few ignored. */
static tg_tensor *big_smoothed(tg_ctx *ctx, tg_dtype dt)
{
    int64_t B = tu_big(16, 4), T = 37, V = 301;
    tg_tensor *x = tu_input(ctx, dt, TG_DIMS(B, T, V), "logits", -3, 3);
    tg_tensor *t = tg_const(ctx, TG_I32, TG_DIMS(B, T), "targets");
    for (int64_t i = 0; i < B * T; i++)
        tg_set(t, i, i % 11 == 3 ? -100 : (double)((i * 37) % V));
    return tg_cross_entropy_smoothed(ctx, x, t, -100, 0.1);
}

int main(void)
{
    Suite *s = suite_create("loss");
    TCase *tc = tu_tcase(s, "fixtures", 0);
    tcase_add_loop_test(tc, test_fixture_f64, 0, N_CASES);
    tcase_add_loop_test(tc, test_fixture_f32, 0, N_CASES);
    tc = tu_tcase(s, "smoothing", 0);
    tcase_add_loop_test(tc, test_by_hand, 0, 2);
    tcase_add_loop_test(tc, test_zero_is_plain, 0, 2);
    tcase_add_loop_test(tc, test_all_ignored, 0, 2);
    tcase_add_test(tc, test_arguments);
    static const tu_build_fn builds[] = {big_smoothed};
    tu_add_thread_tcase(s, builds, 1);
    return tu_run(s);
}
