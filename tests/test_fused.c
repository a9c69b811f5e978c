/*
 * test_fused.c - fused ops against the unfused graphs they replace: dense_act (dense
 * with ReLU/GELU in the GEMM epilogue) against dense + relu/gelu, and the modules that use the
 * fused ops (FFN, encoder layer) with tg_ctx_set_fusion on and off: values and every gradient,
 * f32 and f64, 1/2/3 threads; ReLU bitwise, GELU and modules within 1e-12 relative (f64).
 */
#include "testutil.h"

#include "tgrad_nn.h"

#include <stdlib.h>
#include <string.h>

/* Relative distance max|a - b| / max(max|b|, tiny). */
static double rel_diff(const double *a, const double *b, size_t n)
{
    double d = 0, m = 1e-300;
    for (size_t i = 0; i < n; i++) {
        d = fmax(d, fabs(a[i] - b[i]));
        m = fmax(m, fabs(b[i]));
    }
    return d / m;
}

/* dense_act(x, w, b) or dense then act; returns y then dx, dw, db (as doubles) in out. */
static size_t dense_run(tg_dtype dt, int nt, bool fused, int act, bool bias, const int64_t *xs,
                        int xr, int64_t O, double *out)
{
    tg_ctx *ctx = tu_ctx_new();
    tg_ctx_set_threads(ctx, nt);
    tg_ctx_seed(ctx, 1234);
    int64_t I = xs[xr - 1];
    tg_tensor *x = tu_input(ctx, dt, xr, xs, "x", -2, 2);
    tg_tensor *w = tg_param(ctx, dt, TG_DIMS(O, I), "weight");
    tg_tensor *b = bias ? tg_param(ctx, dt, TG_DIMS(O), "bias") : NULL;
    tg_fill_uniform(w, -1, 1);
    if (b)
        tg_fill_uniform(b, -1, 1);
    tg_tensor *y;
    if (fused) {
        y = tg_dense_act(ctx, x, w, b, (tg_activation)act);
    } else {
        y = tg_dense(ctx, x, w, b);
        y = act == TG_ACT_RELU ? tg_relu(ctx, y) : tg_gelu(ctx, y);
    }
    ck_assert_msg(y != NULL, "%s", tg_ctx_message(ctx));
    if (fused)
        ck_assert_str_eq(tg_tensor_op_name(y), "dense_act");
    /* a loss whose gradient differs per element */
    tg_tensor *sq = tg_sum_all(ctx, tg_mul(ctx, y, y));
    tg_tensor *outs[2] = {sq, y};
    tg_graph *g = tg_graph_new(ctx, outs, 2);
    ck_assert_msg(g != NULL, "%s", tg_ctx_message(ctx));
    ck_assert_int_eq(tg_graph_forward(g), TG_OK);
    ck_assert_int_eq(tg_graph_backward(g, sq, NULL), TG_OK);
    size_t k = 0;
    for (int64_t i = 0; i < tg_tensor_numel(y); i++)
        out[k++] = tg_get(y, i);
    tg_tensor *leaves[3] = {x, w, b};
    for (int l = 0; l < 3; l++)
        if (leaves[l])
            for (int64_t i = 0; i < tg_tensor_numel(leaves[l]); i++)
                out[k++] = tg_grad_get(leaves[l], i);
    tu_ctx_free(ctx);
    return k;
}

START_TEST(test_dense_act_matches_unfused)
{
    tg_dtype dt = tu_dtypes[_i];
    static const int64_t shapes[][4] = {{1, 1, 1, 1}, {3, 5, 7, 0}, {2, 13, 33, 0},
                                        {4, 30, 70, 0}, {1, 200, 40, 0}};
    static const int ranks[] = {1, 2, 3, 3, 3};
    static const int64_t outs[] = {1, 4, 35, 97, 300};
    size_t cap = 200000;
    double *ref = malloc(sizeof(double) * cap), *got = malloc(sizeof(double) * cap);
    for (int s = 0; s < 5; s++)
        for (int act = 0; act < 2; act++)
            for (int bias = 0; bias < 2; bias++) {
                size_t n = dense_run(dt, 1, false, act, bias, shapes[s], ranks[s], outs[s], ref);
                ck_assert(n <= cap);
                for (int nt = 1; nt <= 3; nt++) {
                    size_t m = dense_run(dt, nt, true, act, bias, shapes[s], ranks[s], outs[s],
                                         got);
                    ck_assert_int_eq((int)m, (int)n);
                    if (act == TG_ACT_RELU)
                        ck_assert_msg(memcmp(ref, got, n * sizeof(double)) == 0,
                                      "relu shape %d bias %d threads %d not bitwise", s, bias, nt);
                    else
                        ck_assert_msg(rel_diff(got, ref, n) <= (dt == TG_F64 ? 1e-12 : 1e-5),
                                      "gelu shape %d bias %d threads %d: %g", s, bias, nt,
                                      rel_diff(got, ref, n));
                }
            }
    free(ref);
    free(got);
}
END_TEST

START_TEST(test_dense_act_errors)
{
    tg_ctx *ctx = tu_ctx_new();
    tg_tensor *x = tg_input(ctx, TG_F32, TG_DIMS(2, 3), "x");
    tg_tensor *w = tg_param(ctx, TG_F32, TG_DIMS(4, 3), "w");
    ck_assert_ptr_null(tg_dense_act(ctx, x, w, NULL, (tg_activation)7));
    tu_assert_error(ctx, TG_ERR_ARG, "tg_dense_act: unknown activation 7");
    tg_ctx_clear_error(ctx);
    tg_tensor *w2 = tg_param(ctx, TG_F32, TG_DIMS(4, 5), "w2");
    ck_assert_ptr_null(tg_dense_act(ctx, x, w2, NULL, TG_ACT_RELU));
    tu_assert_error(ctx, TG_ERR_SHAPE, "tg_dense_act");
    tu_ctx_free(ctx);
}
END_TEST

/* FFN and encoder layer, fusion on vs off: output and every parameter's gradient. */
static size_t module_run(tg_dtype dt, int nt, bool fused, int which, int act, double *out)
{
    tg_ctx *ctx = tu_ctx_new();
    tg_ctx_set_threads(ctx, nt);
    tg_ctx_set_fusion(ctx, fused);
    tg_ctx_set_training(ctx, false);
    tg_ctx_seed(ctx, 77);
    tg_tensor *x = tu_input(ctx, dt, TG_DIMS(3, 7, 16), "x", -1, 1);
    tg_tensor *y;
    if (which == 0) {
        tg_ffn f;
        ck_assert_int_eq(tg_ffn_init(ctx, &f, dt, 16, 40, (tg_activation)act, NULL), TG_OK);
        y = tg_ffn_forward(ctx, &f, x);
    } else {
        tg_encoder_config cfg = tg_encoder_config_default(16, 4);
        cfg.d_ff = 40;
        cfg.activation = (tg_activation)act;
        cfg.norm_first = which == 2;
        cfg.dropout = 0;
        tg_encoder_layer l;
        ck_assert_int_eq(tg_encoder_layer_init(ctx, &l, dt, &cfg, NULL), TG_OK);
        y = tg_encoder_layer_forward(ctx, &l, x, NULL);
    }
    ck_assert_msg(y != NULL, "%s", tg_ctx_message(ctx));
    tg_tensor *sq = tg_sum_all(ctx, tg_mul(ctx, y, y));
    tg_tensor *outs[2] = {sq, y};
    tg_graph *g = tg_graph_new(ctx, outs, 2);
    ck_assert_msg(g != NULL, "%s", tg_ctx_message(ctx));
    ck_assert_int_eq(tg_graph_forward(g), TG_OK);
    ck_assert_int_eq(tg_graph_backward(g, sq, NULL), TG_OK);
    size_t k = 0;
    for (int64_t i = 0; i < tg_tensor_numel(y); i++)
        out[k++] = tg_get(y, i);
    for (int64_t i = 0; i < tg_tensor_numel(x); i++)
        out[k++] = tg_grad_get(x, i);
    int64_t np = tg_ctx_n_params(ctx);
    for (int64_t p = 0; p < np; p++) {
        tg_tensor *t = tg_ctx_param(ctx, p);
        for (int64_t i = 0; i < tg_tensor_numel(t); i++)
            out[k++] = tg_grad_get(t, i);
    }
    tu_ctx_free(ctx);
    return k;
}

START_TEST(test_modules_fused_vs_unfused)
{
    tg_dtype dt = tu_dtypes[_i];
    size_t cap = 100000;
    double *ref = malloc(sizeof(double) * cap), *got = malloc(sizeof(double) * cap);
    for (int which = 0; which < 3; which++)
        for (int act = 0; act < 2; act++) {
            size_t n = module_run(dt, 1, false, which, act, ref);
            ck_assert(n <= cap);
            for (int nt = 1; nt <= 3; nt += 2) {
                size_t m = module_run(dt, nt, true, which, act, got);
                ck_assert_int_eq((int)m, (int)n);
                double d = rel_diff(got, ref, n);
                ck_assert_msg(d <= (dt == TG_F64 ? 1e-12 : 2e-5),
                              "module %d act %d threads %d: fused vs unfused %g", which, act, nt,
                              d);
            }
        }
    free(ref);
    free(got);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("fused");
    TCase *tc = tu_tcase(s, "dense_act", 300);
    tcase_add_loop_test(tc, test_dense_act_matches_unfused, 0, 2);
    tcase_add_test(tc, test_dense_act_errors);
    tc = tu_tcase(s, "modules", 300);
    tcase_add_loop_test(tc, test_modules_fused_vs_unfused, 0, 2);
    return tu_run(s);
}
