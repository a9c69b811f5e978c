/*
 * test_planner.c - the memory planner: for every gradcheck case of every op and module, planned
 * execution (shared arena, in place, backward in place, dead buffers poisoned with NaN; also
 * one_backward) gives bitwise the same outputs and leaf gradients as no_reuse (every buffer its
 * own memory), at 1 and 2 threads, over two forward+backward rounds; the arena of a real model
 * is a fraction of no_reuse's; backward is refused from a tensor that is neither an output nor
 * kept; graphs of both kinds over the same tensors do not disturb each other.
 */
#include "opcases.h"
#include "testutil.h"
#include "tgrad_train.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Build case c in a fresh context (same seed), run forward and backward twice with a fixed
 * upstream gradient; return the output values and leaf gradients as one malloc'd f64 array.
 * mode 0: no_reuse (every buffer its own memory: the reference); 1: planned, with dead buffers
 * poisoned (NaN); 2: planned, poisoned, one_backward (values backward reads freed as soon as
 * read). */
static double *run_case(const tg_opcase *c, int mode, int nt, size_t *len, size_t *grad_bytes)
{
    tg_ctx *ctx = tg_ctx_new();
    tg_ctx_seed(ctx, 77);
    tg_ctx_set_threads(ctx, nt);
    tg_tensor *y = c->build(ctx, TG_F64);
    ck_assert_msg(y != NULL, "%s/%s: %s", c->op, c->name, tg_ctx_message(ctx));
    tg_graph_opts o = {.no_reuse = mode == 0, .poison = mode > 0, .one_backward = mode == 2};
    tg_graph *g = tg_graph_new_opts(ctx, &y, 1, &o);
    ck_assert_msg(g != NULL, "%s", tg_ctx_message(ctx));
    if (grad_bytes)
        *grad_bytes = tg_graph_grad_bytes(g);
    tg_tensor *dy = tg_const(ctx, TG_F64, tg_tensor_rank(y), tg_tensor_shape(y), "dy");
    for (int64_t i = 0; i < tg_tensor_numel(dy); i++)
        tg_set(dy, i, cos(0.7 * (double)i) + 0.25);
    uint64_t rng[4];
    tg_rng_get_state(ctx, rng);
    ck_assert_int_eq(tg_graph_forward(g), TG_OK);
    ck_assert_int_eq(tg_graph_backward(g, y, dy), TG_OK);
    tg_rng_set_state(ctx, rng); /* dropout: same mask on the second run */
    ck_assert_int_eq(tg_graph_forward(g), TG_OK);
    ck_assert_int_eq(tg_graph_backward(g, y, dy), TG_OK);
    size_t n = (size_t)tg_tensor_numel(y);
    for (int64_t l = 0; l < tg_graph_n_grad_leaves(g); l++)
        n += (size_t)tg_tensor_numel(tg_graph_grad_leaf(g, l));
    double *out = malloc(sizeof(double) * n);
    size_t k = 0;
    for (int64_t i = 0; i < tg_tensor_numel(y); i++)
        out[k++] = tg_get(y, i);
    for (int64_t l = 0; l < tg_graph_n_grad_leaves(g); l++) {
        tg_tensor *t = tg_graph_grad_leaf(g, l);
        for (int64_t i = 0; i < tg_tensor_numel(t); i++)
            out[k++] = tg_grad_get(t, i);
    }
    *len = n;
    tg_ctx_free(ctx);
    return out;
}

/* Every op and module case: planned execution (shared arena, in place, poisoned dead buffers)
 * is bitwise identical to the no-sharing reference, at 1 and 2 threads, f64. A planned buffer
 * read after its memory was given away would read NaN and differ. */
START_TEST(test_planned_equals_no_reuse)
{
    const tg_opcase *c = &tg_opcases[_i];
    size_t n0, n1, n2;
    double *a = run_case(c, 0, 1, &n0, NULL);
    for (int nt = 1; nt <= 2; nt++) {
        double *b = run_case(c, 1, nt, &n1, NULL);
        double *d = run_case(c, 2, nt, &n2, NULL);
        ck_assert_uint_eq(n0, n1);
        ck_assert_uint_eq(n0, n2);
        ck_assert_msg(memcmp(a, b, sizeof(double) * n0) == 0, "%s/%s: planned differs from "
                      "no_reuse (%d threads)", c->op, c->name, nt);
        ck_assert_msg(memcmp(a, d, sizeof(double) * n0) == 0, "%s/%s: one_backward differs "
                      "from no_reuse (%d threads)", c->op, c->name, nt);
        free(b);
        free(d);
    }
    free(a);
}
END_TEST

/* A 2-layer LM: the planner needs a fraction of one buffer per intermediate gradient. */
START_TEST(test_memory_saved)
{
    size_t bytes[2];
    for (int share = 0; share < 2; share++) {
        tg_ctx *ctx = tg_ctx_new();
        tg_transformer_config c;
        memset(&c, 0, sizeof c);
        c.vocab_size = 30;
        c.max_seq_len = 32;
        c.n_layers = 2;
        c.layer = tg_encoder_config_default(32, 4);
        c.layer.d_ff = 128;
        c.layer.norm_first = true;
        c.causal = true;
        tg_transformer m;
        ck_assert_int_eq(tg_transformer_init(ctx, &m, TG_F32, &c), TG_OK);
        tg_tensor *ids = tg_input(ctx, TG_I32, TG_DIMS(4, 32), "ids");
        tg_tensor *t = tg_input(ctx, TG_I32, TG_DIMS(4, 32), "targets");
        tg_tensor *loss = tg_cross_entropy(ctx, tg_transformer_forward(ctx, &m, ids, NULL), t, -1);
        tg_graph_opts o = {.no_reuse = share == 0};
        tg_graph *g = tg_graph_new_opts(ctx, &loss, 1, &o);
        ck_assert_ptr_nonnull(g);
        tg_memory_report r;
        ck_assert_int_eq(tg_graph_memory(g, &r), TG_OK);
        bytes[share] = r.arena;
        fprintf(stderr, "arena %s: %zu bytes (activations %zu saved %zu gradients %zu "
                "workspace %zu)\n", share ? "planned" : "no_reuse", r.arena, r.activations,
                r.saved, r.gradients, r.workspace);
        tg_ctx_free(ctx);
    }
    ck_assert_msg(bytes[1] * 3 < bytes[0], "shared %zu bytes vs %zu: expected < 1/3", bytes[1],
                  bytes[0]);
}
END_TEST

START_TEST(test_backward_only_from_outputs)
{
    tg_ctx *ctx = tg_ctx_new();
    tg_tensor *x = tg_param(ctx, TG_F64, TG_DIMS(3), "x");
    tg_fill(x, 2.0);
    tg_tensor *h = tg_scale(ctx, x, 3.0);
    tg_tensor *y = tg_sum_all(ctx, tg_mul(ctx, h, h));
    tg_graph *g = tg_graph_new(ctx, &y, 1);
    ck_assert_int_eq(tg_graph_forward(g), TG_OK);
    tg_tensor *dh = tg_const(ctx, TG_F64, TG_DIMS(3), "dh");
    ck_assert_int_eq(tg_graph_backward(g, h, dh), TG_ERR_ARG);
    tu_assert_error(ctx, TG_ERR_ARG, "not an output");
    tg_ctx_clear_error(ctx);
    ck_assert_int_eq(tg_graph_backward(g, y, NULL), TG_OK);
    for (int i = 0; i < 3; i++) /* d/dx sum (3x)^2 = 18 x = 36 */
        ck_assert(tg_grad_get(x, i) == 36.0);
    tg_ctx_free(ctx);
}
END_TEST

/* A one_backward graph and a default graph over the same tensors, used alternately. */
START_TEST(test_mixed_graphs)
{
    tg_ctx *ctx = tg_ctx_new();
    tg_ctx_seed(ctx, 5);
    tg_mha m;
    ck_assert_int_eq(tg_mha_init(ctx, &m, TG_F64, 8, 2, NULL), TG_OK);
    tg_tensor *x = tu_input(ctx, TG_F64, TG_DIMS(2, 3, 8), "x", -1, 1);
    tg_tensor *y = tg_mha_forward(ctx, &m, x, x, x, NULL, NULL);
    tg_tensor *loss = tg_mean_all(ctx, tg_mul(ctx, y, y));
    tg_graph_opts o = {.one_backward = true};
    tg_graph *gs = tg_graph_new_opts(ctx, &loss, 1, &o);
    tg_keep(y); /* the second graph keeps y (its data and gradient stay readable) */
    tg_graph *gd = tg_graph_new(ctx, &loss, 1);
    ck_assert(gs && gd);
    double ref[24];
    for (int round = 0; round < 3; round++) {
        tg_graph *g = round % 2 ? gd : gs;
        tg_graph_zero_grad(g);
        ck_assert_int_eq(tg_graph_forward(g), TG_OK);
        ck_assert_int_eq(tg_graph_backward(g, loss, NULL), TG_OK);
        for (int i = 0; i < 24; i++) {
            if (round == 0)
                ref[i] = tg_grad_get(m.in_proj_weight, i);
            else
                ck_assert(tg_grad_get(m.in_proj_weight, i) == ref[i]);
        }
    }
    /* after gs (built before tg_keep(y): y is an intermediate there) y is not readable; after
     * gd, which keeps it, its value and gradient are; a second backward of the one_backward
     * graph on the same forward is refused */
    ck_assert(isnan(tg_grad_get(y, 0)));
    tu_assert_error(ctx, TG_ERR_STATE, "tg_keep");
    ck_assert_int_eq(tg_graph_forward(gd), TG_OK);
    ck_assert_int_eq(tg_graph_backward(gd, loss, NULL), TG_OK);
    ck_assert(!isnan(tg_grad_get(y, 0)));
    ck_assert(!isnan(tg_get(y, 0)));
    ck_assert_int_eq(tg_graph_forward(gs), TG_OK);
    ck_assert_int_eq(tg_graph_backward(gs, loss, NULL), TG_OK);
    ck_assert_int_eq(tg_graph_backward(gs, loss, NULL), TG_ERR_STATE);
    tu_assert_error(ctx, TG_ERR_STATE, "run tg_graph_forward again first");
    tg_ctx_free(ctx);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("planner");
    TCase *tc = tcase_create("planner");
    tcase_set_timeout(tc, 120);
    tcase_add_loop_test(tc, test_planned_equals_no_reuse, 0, tg_n_opcases);
    tcase_add_test(tc, test_memory_saved);
    tcase_add_test(tc, test_backward_only_from_outputs);
    tcase_add_test(tc, test_mixed_graphs);
    suite_add_tcase(s, tc);
    return tu_run(s);
}
