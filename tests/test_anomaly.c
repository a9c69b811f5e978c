/*
 * test_anomaly.c - the NaN/Inf tripwire (tg_graph_opts.detect_anomaly, PyTorch's
 * detect_anomaly): the first non-finite value in forward (topological order, leaves included)
 * and in backward (seeds, each rule's written gradients in execution order, the leaf
 * accumulation), the message and the report fields, -inf accepted in attention masks, a failed
 * call leaving leaf gradients alone, both dtypes, every op case without false alarms, and the
 * default (off): NaN flows and nothing is reported.
 */
#include "testutil.h"
#include "tgrad_nn.h"
#include "opcases.h"

#include <stdio.h>
#include <string.h>

static tg_graph *anomaly_graph(tg_ctx *ctx, tg_tensor *y, bool share)
{
    ck_assert_msg(y != NULL, "build failed: %s", tg_ctx_message(ctx));
    tg_graph_opts o = {.poison = share, .detect_anomaly = true}; /* dead buffers hold NaN */
    tg_graph *g = tg_graph_new_opts(ctx, &y, 1, &o);
    ck_assert_msg(g != NULL, "tg_graph_new_opts: %s", tg_ctx_message(ctx));
    return g;
}

static void expect_msg(tg_ctx *ctx, const char *want)
{
    ck_assert_msg(tg_ctx_status(ctx) == TG_ERR_NONFINITE, "status %s (%s)",
                  tg_status_str(tg_ctx_status(ctx)), tg_ctx_message(ctx));
    ck_assert_msg(strcmp(tg_ctx_message(ctx), want) == 0, "message\n  '%s'\nexpected\n  '%s'",
                  tg_ctx_message(ctx), want);
}

/* ---- forward ------------------------------------------------------------------------------ */
/* A NaN in an input is reported at the input (the first node in topological order holding
 * it), with the input's kind, name, shape, index and value; backward is then refused. */
START_TEST(test_forward_nan_input)
{
    tg_dtype dt = tu_dtypes[_i];
    tg_ctx *ctx = tu_ctx_new();
    tg_tensor *w = tg_param(ctx, dt, TG_DIMS(3), "w");
    tg_tensor *x = tg_input(ctx, dt, TG_DIMS(2, 3), "x");
    tg_fill(w, 0.5);
    tg_fill(x, 1.0);
    tg_set(x, 4, NAN);
    tg_tensor *y = tg_mul(ctx, x, w);
    tg_tensor_set_name(y, "y");
    tg_tensor *loss = tg_sum_all(ctx, y);
    tg_graph *g = anomaly_graph(ctx, loss, false);
    ck_assert_int_eq(tg_graph_forward(g), TG_ERR_NONFINITE);
    expect_msg(ctx, "tg_graph_forward: anomaly in forward: input 'x' (2, 3) has nan at flat "
                    "index 4");
    tg_anomaly_report r;
    ck_assert_int_eq(tg_graph_anomaly(g, &r), TG_OK);
    ck_assert_int_eq(r.phase, TG_ANOMALY_FORWARD);
    ck_assert_str_eq(r.op, "input");
    ck_assert_str_eq(r.tensor, "x");
    ck_assert_str_eq(r.writer, "");
    ck_assert_int_eq(r.rank, 2);
    ck_assert(r.shape[0] == 2 && r.shape[1] == 3);
    ck_assert_int_eq(r.index, 4);
    ck_assert(isnan(r.value));
    ck_assert_str_eq(r.message, tg_ctx_message(ctx));
    /* the forward did not complete: backward is refused, saying why */
    ck_assert_int_eq(tg_graph_backward(g, loss, NULL), TG_ERR_STATE);
    tu_assert_error(ctx, TG_ERR_STATE, "the last tg_graph_forward failed");
    ck_assert(tg_grad_get(w, 0) == 0);
    /* the same in a parameter, found before the input because it comes first */
    tg_set(x, 4, 1.0);
    tg_set(w, 2, -INFINITY);
    ck_assert_int_eq(tg_graph_forward(g), TG_ERR_NONFINITE);
    expect_msg(ctx, "tg_graph_forward: anomaly in forward: parameter 'w' (3) has -inf at flat "
                    "index 2");
    ck_assert_int_eq(tg_graph_anomaly(g, &r), TG_OK);
    ck_assert_str_eq(r.op, "parameter");
    ck_assert(r.value == -INFINITY);
    /* fixed data: forward and backward succeed, and the report is cleared */
    tg_set(w, 2, 0.5);
    ck_assert_int_eq(tg_graph_forward(g), TG_OK);
    ck_assert_int_eq(tg_ctx_status(ctx), TG_OK);
    ck_assert_int_eq(tg_graph_anomaly(g, &r), TG_OK);
    ck_assert_int_eq(r.phase, TG_ANOMALY_NONE);
    ck_assert_int_eq(tg_graph_backward(g, loss, NULL), TG_OK);
    ck_assert(tg_grad_get(w, 0) == 2.0);
    tu_ctx_free(ctx);
}
END_TEST

/* An op that turns finite inputs into inf is named, with its output and shape; an unnamed
 * output is described by what it was computed from. */
START_TEST(test_forward_inf_from_op)
{
    tg_dtype dt = tu_dtypes[_i];
    double big = dt == TG_F32 ? 1e30 : 1e200;
    tg_ctx *ctx = tu_ctx_new();
    tg_tensor *x = tg_input(ctx, dt, TG_DIMS(3), "x");
    tu_set(x, VALS(1, big, -2));
    tg_tensor *sq = tg_mul(ctx, x, x); /* big^2 overflows */
    tg_tensor *loss = tg_sum_all(ctx, tg_scale(ctx, sq, 0.5));
    tg_graph *g = anomaly_graph(ctx, loss, false);
    ck_assert_int_eq(tg_graph_forward(g), TG_ERR_NONFINITE);
    char want[256];
    snprintf(want, sizeof want, "tg_graph_forward: anomaly in forward: op 'mul' output '%s' (3), "
             "computed from 'x', 'x', has inf at flat index 1", tg_tensor_name(sq));
    expect_msg(ctx, want);
    tg_anomaly_report r;
    ck_assert_int_eq(tg_graph_anomaly(g, &r), TG_OK);
    ck_assert_int_eq(r.phase, TG_ANOMALY_FORWARD);
    ck_assert_str_eq(r.op, "mul");
    ck_assert_str_eq(r.tensor, tg_tensor_name(sq));
    ck_assert_int_eq(r.rank, 1);
    ck_assert_int_eq(r.shape[0], 3);
    ck_assert_int_eq(r.index, 1);
    ck_assert(r.value == INFINITY);
    /* named: the name is the description */
    tg_tensor_set_name(sq, "squares");
    ck_assert_int_eq(tg_graph_forward(g), TG_ERR_NONFINITE);
    expect_msg(ctx, "tg_graph_forward: anomaly in forward: op 'mul' output 'squares' (3) has "
                    "inf at flat index 1");
    tu_ctx_free(ctx);
}
END_TEST

/* A NaN made inside softmax (a +inf score) is found at softmax, the first node holding it,
 * in a rank-4 attention-shaped tensor; the message has the documented form. */
START_TEST(test_forward_softmax_nan)
{
    tg_dtype dt = tu_dtypes[_i];
    tg_ctx *ctx = tu_ctx_new();
    tg_tensor *s = tg_input(ctx, dt, TG_DIMS(2, 4, 3, 3), "s");
    tg_fill_uniform(s, -1, 1);
    tg_tensor *m = tg_const(ctx, dt, TG_DIMS(3, 3), "m"); /* additive, finite */
    tg_tensor *scores = tg_add_mask(ctx, s, m, TG_MASK_ADDITIVE);
    tg_tensor *w = tg_softmax(ctx, scores);
    tg_tensor_set_name(w, "weights");
    tg_graph *g = anomaly_graph(ctx, tg_sum_all(ctx, w), false);
    ck_assert_int_eq(tg_graph_forward(g), TG_OK);
    tg_set(m, 4, INFINITY); /* +inf in an additive mask is not the -inf of masking */
    ck_assert_int_eq(tg_graph_forward(g), TG_ERR_NONFINITE);
    expect_msg(ctx, "tg_graph_forward: anomaly in forward: constant 'm' (3, 3) has inf at flat "
                    "index 4");
    tg_set(m, 4, 0);
    tg_set(s, 2 * 9 + 4, INFINITY); /* batch 0, head 2, row 1, col 1 */
    ck_assert_int_eq(tg_graph_forward(g), TG_ERR_NONFINITE);
    expect_msg(ctx, "tg_graph_forward: anomaly in forward: input 's' (2, 4, 3, 3) has inf at "
                    "flat index 22");
    tu_ctx_free(ctx);
}
END_TEST

/* -inf is the point of attention masks: additive masks holding -inf, boolean and causal
 * masks, a (B, T, T) mask reshaped over heads, a fully masked row: no anomaly. */
START_TEST(test_masks_are_not_anomalies)
{
    tg_dtype dt = tu_dtypes[_i];
    tg_ctx *ctx = tu_ctx_new();
    tg_ctx_seed(ctx, 3);
    tg_mha mha;
    ck_assert_int_eq(tg_mha_init(ctx, &mha, dt, 8, 2, NULL), TG_OK);
    tg_tensor *x = tu_input(ctx, dt, TG_DIMS(2, 3, 8), "x", -1, 1);
    tg_tensor *am = tg_const(ctx, dt, TG_DIMS(2, 3, 3), "am"); /* (B, T, T), reshaped */
    tg_set(am, 1, -INFINITY);
    for (int j = 0; j < 3; j++) /* batch 1, row 2: every key blocked */
        tg_set(am, 9 + 6 + j, -INFINITY);
    tg_tensor *kpm = tg_const(ctx, dt, TG_DIMS(2, 3), "kpm");
    tg_set(kpm, 2, 1);
    tg_attn_masks mk = {.attn_mask = am, .attn_mask_kind = TG_MASK_ADDITIVE,
                        .key_padding_mask = kpm, .causal = true};
    tg_tensor *y = tg_mha_forward(ctx, &mha, x, x, x, &mk, NULL);
    tg_tensor *loss = tg_mean_all(ctx, tg_mul(ctx, y, y));
    for (int share = 0; share < 2; share++) {
        tg_graph *g = anomaly_graph(ctx, loss, share);
        ck_assert_msg(tg_graph_forward(g) == TG_OK, "%s", tg_ctx_message(ctx));
        tg_graph_zero_grad(g);
        ck_assert_msg(tg_graph_backward(g, loss, NULL) == TG_OK, "%s", tg_ctx_message(ctx));
        ck_assert(isfinite(tg_get(loss, 0)));
        tg_graph_free(g);
    }
    /* a mask shaped by layout ops, and masked scores rearranged before the softmax */
    tg_tensor *q = tu_input(ctx, dt, TG_DIMS(2, 4, 3), "q", -1, 1);
    tg_tensor *mt = tg_const(ctx, dt, TG_DIMS(4, 4), "mt");
    tg_set(mt, 1, -INFINITY);
    tg_tensor *sc = tg_matmul(ctx, q, q, false, true);                         /* (2, 4, 4) */
    sc = tg_add_mask(ctx, sc, tg_transpose(ctx, mt, 0, 1), TG_MASK_ADDITIVE);
    sc = tg_reshape(ctx, tg_transpose(ctx, sc, 1, 2), TG_DIMS(2, 4, 4));
    tg_tensor *l2 = tg_sum_all(ctx, tg_matmul(ctx, tg_softmax(ctx, sc), q, false, false));
    tg_graph *g2 = anomaly_graph(ctx, l2, false);
    ck_assert_msg(tg_graph_forward(g2) == TG_OK, "%s", tg_ctx_message(ctx));
    ck_assert_msg(tg_graph_backward(g2, l2, NULL) == TG_OK, "%s", tg_ctx_message(ctx));
    /* NaN in a mask is still an anomaly */
    tg_set(am, 0, NAN);
    tg_graph *g = anomaly_graph(ctx, loss, false);
    ck_assert_int_eq(tg_graph_forward(g), TG_ERR_NONFINITE);
    tg_anomaly_report r;
    tg_graph_anomaly(g, &r);
    ck_assert_str_eq(r.tensor, "am");
    tu_ctx_free(ctx);
}
END_TEST

/* ---- backward ----------------------------------------------------------------------------- */
/* A huge upstream gradient overflows f32 in scale's backward: the gradient of x is reported,
 * with the op whose rule wrote it; the leaf's accumulated gradient is left as it was. */
START_TEST(test_backward_overflow)
{
    int share = _i;
    tg_ctx *ctx = tu_ctx_new();
    tg_tensor *x = tg_param(ctx, TG_F32, TG_DIMS(2), "x");
    tg_fill(x, 1.0);
    tg_tensor *y = tg_scale(ctx, x, 1e30);
    tg_tensor_set_name(y, "y");
    tg_graph *g = anomaly_graph(ctx, y, share);
    tg_tensor *dy = tg_const(ctx, TG_F32, TG_DIMS(2), "dy");
    tu_set(dy, VALS(1e-3, 1e30));
    ck_assert_int_eq(tg_graph_forward(g), TG_OK);
    ck_assert_int_eq(tg_graph_backward(g, y, dy), TG_ERR_NONFINITE);
    expect_msg(ctx, "tg_graph_backward: anomaly in backward: gradient of parameter 'x' (2) has "
                    "inf at flat index 1, written by the backward of op 'scale' output 'y'");
    tg_anomaly_report r;
    ck_assert_int_eq(tg_graph_anomaly(g, &r), TG_OK);
    ck_assert_int_eq(r.phase, TG_ANOMALY_BACKWARD);
    ck_assert_str_eq(r.op, "scale");
    ck_assert_str_eq(r.tensor, "x");
    ck_assert_str_eq(r.writer, "y");
    ck_assert_int_eq(r.rank, 1);
    ck_assert_int_eq(r.shape[0], 2);
    ck_assert_int_eq(r.index, 1);
    ck_assert(r.value == INFINITY);
    ck_assert(tg_grad_get(x, 0) == 0 && tg_grad_get(x, 1) == 0); /* unchanged */
    /* a finite upstream gradient: fine, and the graph is intact */
    tu_set(dy, VALS(1e-3, 2e-3));
    ck_assert_int_eq(tg_graph_backward(g, y, dy), TG_OK);
    ck_assert_int_eq(tg_ctx_status(ctx), TG_OK);
    ck_assert_int_eq(tg_graph_anomaly(g, &r), TG_OK);
    ck_assert_int_eq(r.phase, TG_ANOMALY_NONE);
    ck_assert(tg_grad_get(x, 1) == (float)(2e-3f * 1e30f));
    /* a NaN in the upstream gradient itself */
    tu_set(dy, VALS(NAN, 1));
    ck_assert_int_eq(tg_graph_backward(g, y, dy), TG_ERR_NONFINITE);
    expect_msg(ctx, "tg_graph_backward: anomaly in backward: upstream gradient of op 'scale' "
                    "output 'y' (2) has nan at flat index 0");
    tg_graph_anomaly(g, &r);
    ck_assert_str_eq(r.op, "upstream");
    ck_assert_str_eq(r.tensor, "y");
    tu_ctx_free(ctx);
}
END_TEST

/* This call's gradient is finite but adding it to the accumulated one overflows. */
START_TEST(test_backward_accumulation_overflow)
{
    tg_ctx *ctx = tu_ctx_new();
    tg_tensor *x = tg_param(ctx, TG_F32, TG_DIMS(3), "x");
    tg_tensor *y = tg_sum_all(ctx, tg_scale(ctx, x, 3e38));
    tg_graph *g = anomaly_graph(ctx, y, false);
    ck_assert_int_eq(tg_graph_forward(g), TG_OK);
    ck_assert_int_eq(tg_graph_backward(g, y, NULL), TG_OK);
    ck_assert_int_eq(tg_graph_backward(g, y, NULL), TG_ERR_NONFINITE);
    expect_msg(ctx, "tg_graph_backward: anomaly in backward: accumulated gradient of parameter "
                    "'x' (3) has inf at flat index 0");
    tg_anomaly_report r;
    tg_graph_anomaly(g, &r);
    ck_assert_str_eq(r.op, "accumulated");
    ck_assert(tg_grad_get(x, 0) == 3e38f); /* still one call's worth */
    tu_ctx_free(ctx);
}
END_TEST

/* In backward execution order: the last op's rule runs first, so a non-finite gradient it
 * writes is found before any written later. */
START_TEST(test_backward_order)
{
    tg_dtype dt = tu_dtypes[_i];
    tg_ctx *ctx = tu_ctx_new();
    tg_tensor *x = tg_input(ctx, dt, TG_DIMS(2), "x");
    tg_set_requires_grad(x, true);
    tu_set(x, VALS(0, 1));
    tg_tensor *h = tg_scale(ctx, x, 2.0);
    tg_tensor_set_name(h, "h");
    tg_tensor *z = tg_mul(ctx, h, h);
    tg_tensor_set_name(z, "z");
    tg_graph *g = anomaly_graph(ctx, z, false);
    tg_tensor *dz = tg_const(ctx, dt, TG_DIMS(2), "dz");
    tu_set(dz, VALS(INFINITY, 0));
    ck_assert_int_eq(tg_graph_forward(g), TG_OK);
    /* dz inf: caught as the upstream gradient, before any rule runs */
    ck_assert_int_eq(tg_graph_backward(g, z, dz), TG_ERR_NONFINITE);
    tg_anomaly_report r;
    tg_graph_anomaly(g, &r);
    ck_assert_str_eq(r.op, "upstream");
    /* h = 0 at index 0 with a huge dz: mul's rule writes dh = 2 h dz = 0 * big... use a value
     * that overflows only in mul's rule: dz = max, h = 2 -> dh = 4 max = inf */
    double big = dt == TG_F32 ? 3e38 : 1.7e308;
    tu_set(dz, VALS(0, big));
    ck_assert_int_eq(tg_graph_backward(g, z, dz), TG_ERR_NONFINITE);
    tg_graph_anomaly(g, &r);
    ck_assert_str_eq(r.op, "mul");
    ck_assert_str_eq(r.tensor, "h");
    ck_assert_str_eq(r.writer, "z");
    ck_assert_int_eq(r.index, 1);
    tu_ctx_free(ctx);
}
END_TEST

/* ---- off by default ----------------------------------------------------------------------- */
START_TEST(test_off_by_default)
{
    tg_dtype dt = tu_dtypes[_i];
    tg_ctx *ctx = tu_ctx_new();
    tg_tensor *w = tg_param(ctx, dt, TG_DIMS(3), "w");
    tg_tensor *x = tg_input(ctx, dt, TG_DIMS(2, 3), "x");
    tg_fill(w, 0.5);
    tg_fill(x, 1.0);
    tg_set(x, 4, NAN);
    tg_tensor *loss = tg_sum_all(ctx, tg_mul(ctx, x, w));
    tg_graph_opts zero = {0};
    for (int k = 0; k < 2; k++) {
        tg_graph *g = k ? tg_graph_new(ctx, &loss, 1) : tg_graph_new_opts(ctx, &loss, 1, &zero);
        ck_assert_ptr_nonnull(g);
        ck_assert_int_eq(tg_graph_forward(g), TG_OK);
        ck_assert(isnan(tg_get(loss, 0))); /* NaN flows */
        ck_assert_int_eq(tg_graph_backward(g, loss, NULL), TG_OK);
        ck_assert(isnan(tg_grad_get(w, 1)));
        ck_assert_int_eq(tg_ctx_status(ctx), TG_OK);
        tg_anomaly_report r;
        ck_assert_int_eq(tg_graph_anomaly(g, &r), TG_OK);
        ck_assert_int_eq(r.phase, TG_ANOMALY_NONE);
        tg_graph_zero_grad(g);
        tg_graph_free(g);
    }
    ck_assert_int_eq(tg_graph_anomaly(NULL, NULL), TG_ERR_ARG);
    tu_ctx_free(ctx);
}
END_TEST

/* ---- every op ----------------------------------------------------------------------------- */
/* Every gradcheck case of every op and module, both dtypes: with the tripwire on, forward and
 * backward on finite data report nothing (no false alarm, masks included), and a NaN put in
 * the first float leaf is found there. */
START_TEST(test_every_op_case)
{
    tg_dtype dt = tu_dtypes[_i];
    for (int c = 0; c < tg_n_opcases; c++) {
        const tg_opcase *oc = &tg_opcases[c];
        tg_ctx *ctx = tu_ctx_new();
        tg_ctx_seed(ctx, 11);
        tg_tensor *y = oc->build(ctx, dt);
        ck_assert_msg(y != NULL, "%s/%s: %s", oc->op, oc->name, tg_ctx_message(ctx));
        tg_graph *g = anomaly_graph(ctx, y, false);
        tg_status s = tg_graph_forward(g);
        ck_assert_msg(s == TG_OK, "%s/%s: forward %s: %s", oc->op, oc->name, tg_status_str(s),
                      tg_ctx_message(ctx));
        if (tg_tensor_requires_grad(y)) {
            tg_tensor *dy = tg_const(ctx, dt, tg_tensor_rank(y), tg_tensor_shape(y), "dy");
            tg_fill(dy, 1.0);
            s = tg_graph_backward(g, y, dy);
            ck_assert_msg(s == TG_OK, "%s/%s: backward %s: %s", oc->op, oc->name,
                          tg_status_str(s), tg_ctx_message(ctx));
        }
        tg_tensor *leaf = NULL;
        for (int64_t i = 0; i < tg_graph_size(g) && !leaf; i++) /* (i32 ids hold no NaN) */
            if (tg_tensor_kind(tg_graph_node(g, i)) != TG_KIND_OP &&
                tg_dtype_is_float(tg_tensor_dtype(tg_graph_node(g, i))))
                leaf = tg_graph_node(g, i);
        ck_assert_ptr_nonnull(leaf);
        tg_set(leaf, tg_tensor_numel(leaf) - 1, NAN);
        ck_assert_int_eq(tg_graph_forward(g), TG_ERR_NONFINITE);
        tg_anomaly_report r;
        tg_graph_anomaly(g, &r);
        ck_assert_msg(strcmp(r.tensor, tg_tensor_name(leaf)) == 0, "%s/%s: %s", oc->op,
                      oc->name, r.message);
        ck_assert_int_eq(r.index, tg_tensor_numel(leaf) - 1);
        tu_ctx_free(ctx);
    }
}
END_TEST

int main(void)
{
    Suite *s = suite_create("anomaly");
    TCase *tc = tu_tcase(s, "forward", 0);
    tcase_add_loop_test(tc, test_forward_nan_input, 0, 2);
    tcase_add_loop_test(tc, test_forward_inf_from_op, 0, 2);
    tcase_add_loop_test(tc, test_forward_softmax_nan, 0, 2);
    tcase_add_loop_test(tc, test_masks_are_not_anomalies, 0, 2);
    tc = tu_tcase(s, "backward", 0);
    tcase_add_loop_test(tc, test_backward_overflow, 0, 2);
    tcase_add_test(tc, test_backward_accumulation_overflow);
    tcase_add_loop_test(tc, test_backward_order, 0, 2);
    tc = tu_tcase(s, "off", 0);
    tcase_add_loop_test(tc, test_off_by_default, 0, 2);
    tc = tu_tcase(s, "every_op", 120);
    tcase_add_loop_test(tc, test_every_op_case, 0, 2);
    return tu_run(s);
}
