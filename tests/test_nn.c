/*
 * test_nn.c - module builders beyond PyTorch parity (test_fixtures.c): shape and argument
 * errors, fully masked attention rows (zeros, never NaN, zero gradients), PyTorch default
 * initialisation, state_dict names of the transformer, the sinusoidal encoding, and thread
 * invariance of whole modules (forward and backward).
 */
#include "testutil.h"
#include "tgrad_train.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

START_TEST(test_module_errors)
{
    tg_ctx *ctx = tg_ctx_new();
    tg_mha m;
    ck_assert_int_eq(tg_mha_init(ctx, &m, TG_F32, 10, 3, NULL), TG_ERR_ARG);
    tu_assert_error(ctx, TG_ERR_ARG, "n_heads 3 must divide d_model 10");
    tg_ctx_clear_error(ctx);
    ck_assert_int_eq(tg_mha_init(ctx, &m, TG_F32, 8, 2, NULL), TG_OK);
    tg_tensor *x = tg_input(ctx, TG_F32, TG_DIMS(2, 3, 6), "x");
    ck_assert_ptr_null(tg_mha_forward(ctx, &m, x, x, x, NULL, NULL));
    tu_assert_error(ctx, TG_ERR_SHAPE, "tg_mha_forward");
    tg_ctx_clear_error(ctx);
    /* attn_mask of the wrong shape, key padding of the wrong shape */
    tg_tensor *x8 = tg_input(ctx, TG_F32, TG_DIMS(2, 3, 8), "x8");
    tg_attn_masks mk;
    memset(&mk, 0, sizeof mk);
    mk.attn_mask = tg_const(ctx, TG_F32, TG_DIMS(3, 4), "bad_mask");
    ck_assert_ptr_null(tg_mha_forward(ctx, &m, x8, x8, x8, &mk, NULL));
    tu_assert_error(ctx, TG_ERR_SHAPE, "attn_mask (3, 4)");
    tg_ctx_clear_error(ctx);
    memset(&mk, 0, sizeof mk);
    mk.key_padding_mask = tg_const(ctx, TG_F32, TG_DIMS(3, 3), "bad_pad");
    ck_assert_ptr_null(tg_mha_forward(ctx, &m, x8, x8, x8, &mk, NULL));
    tu_assert_error(ctx, TG_ERR_SHAPE, "key_padding_mask (3, 3)");
    tg_ctx_clear_error(ctx);
    /* integer masks are named by MHA (not by an op inside it), with their dtype */
    for (int which = 0; which < 2; which++) {
        memset(&mk, 0, sizeof mk);
        if (which)
            mk.attn_mask = tg_const(ctx, TG_I32, TG_DIMS(3, 3), "attn_i32");
        else
            mk.key_padding_mask = tg_const(ctx, TG_I32, TG_DIMS(2, 3), "pad_i32");
        ck_assert_ptr_null(tg_mha_forward(ctx, &m, x8, x8, x8, &mk, NULL));
        tu_assert_error(ctx, TG_ERR_DTYPE,
                        which ? "tg_mha_forward: attn_mask 'attn_i32' is i32; masks are float"
                              : "tg_mha_forward: key_padding_mask 'pad_i32' is i32; masks are "
                                "float");
        tg_ctx_clear_error(ctx);
    }
    memset(&mk, 0, sizeof mk);
    mk.attn_mask = tg_const(ctx, TG_I32, TG_DIMS(3, 3), "attn_i32");
    ck_assert_ptr_null(tg_sdpa(ctx, x8, x8, x8, &mk, 0, NULL));
    tu_assert_error(ctx, TG_ERR_DTYPE, "tg_sdpa: attn_mask 'attn_i32' is i32");
    tg_ctx_clear_error(ctx);
    /* key padding is an MHA option: SDPA refuses it rather than ignoring it */
    memset(&mk, 0, sizeof mk);
    mk.key_padding_mask = tg_const(ctx, TG_F32, TG_DIMS(2, 3), "pad");
    ck_assert_ptr_null(tg_sdpa(ctx, x8, x8, x8, &mk, 0, NULL));
    tu_assert_error(ctx, TG_ERR_ARG, "key_padding_mask");
    tg_ctx_clear_error(ctx);
    /* SDPA shape checks and scale */
    tg_tensor *q = tg_input(ctx, TG_F32, TG_DIMS(2, 3, 4), "q");
    tg_tensor *k = tg_input(ctx, TG_F32, TG_DIMS(2, 5, 4), "k");
    tg_tensor *v = tg_input(ctx, TG_F32, TG_DIMS(2, 4, 4), "v");
    ck_assert_ptr_null(tg_sdpa(ctx, q, k, v, NULL, 0, NULL));
    tu_assert_error(ctx, TG_ERR_SHAPE, "tg_sdpa");
    tg_ctx_clear_error(ctx);
    ck_assert_ptr_null(tg_sdpa(ctx, q, k, k, NULL, INFINITY, NULL));
    tu_assert_error(ctx, TG_ERR_ARG, "scale");
    tg_ctx_clear_error(ctx);
    /* uninitialised modules */
    tg_ffn f;
    memset(&f, 0, sizeof f);
    ck_assert_ptr_null(tg_ffn_forward(ctx, &f, x8));
    tu_assert_error(ctx, TG_ERR_ARG, "not initialised");
    tg_ctx_clear_error(ctx);
    tg_encoder_config c = tg_encoder_config_default(8, 2);
    c.dropout = 1.0;
    tg_encoder_layer l;
    ck_assert_int_eq(tg_encoder_layer_init(ctx, &l, TG_F32, &c, NULL), TG_ERR_ARG);
    tg_ctx_clear_error(ctx);
    /* transformer: too long a sequence */
    tg_transformer_config tc;
    memset(&tc, 0, sizeof tc);
    tc.vocab_size = 7;
    tc.max_seq_len = 4;
    tc.n_layers = 1;
    tc.layer = tg_encoder_config_default(8, 2);
    tc.layer.d_ff = 16;
    tg_transformer tm;
    ck_assert_int_eq(tg_transformer_init(ctx, &tm, TG_F32, &tc), TG_OK);
    tg_tensor *ids = tg_input(ctx, TG_I32, TG_DIMS(2, 5), "ids");
    ck_assert_ptr_null(tg_transformer_forward(ctx, &tm, ids, NULL));
    tu_assert_error(ctx, TG_ERR_SHAPE, "T <= 4");
    tg_ctx_free(ctx);
}
END_TEST

/* Every key blocked for one query row: SDPA gives a zero row and zero weights, MHA gives
 * out_proj.bias, no NaN anywhere, and nothing flows back through the blocked row. */
START_TEST(test_fully_masked_row)
{
    tg_dtype dt = _i ? TG_F64 : TG_F32;
    tg_ctx *ctx = tg_ctx_new();
    tg_ctx_seed(ctx, 3);
    int64_t B = 2, T = 3, D = 4;
    tg_mha m;
    ck_assert_int_eq(tg_mha_init(ctx, &m, dt, D, 2, NULL), TG_OK);
    tg_fill_uniform(m.in_proj_bias, -1, 1);
    tg_fill_uniform(m.out_proj_bias, -1, 1);
    tg_tensor *x = tu_input(ctx, dt, TG_DIMS(B, T, D), "x", -1, 1);
    tg_attn_masks mk;
    memset(&mk, 0, sizeof mk);
    mk.causal = true;
    mk.key_padding_mask = tg_const(ctx, dt, TG_DIMS(B, T), "pad");
    tg_set(mk.key_padding_mask, 3, 1.0); /* batch 1 pads key 0: with causal, query 0 sees none */
    tg_tensor *w = NULL;
    tg_tensor *y = tg_mha_forward(ctx, &m, x, x, x, &mk, &w);
    ck_assert_ptr_nonnull(y);
    tg_tensor *outs[2] = {y, w};
    tg_graph *g = tg_graph_new(ctx, outs, 2);
    ck_assert_int_eq(tg_graph_forward(g), TG_OK);
    for (int64_t i = 0; i < tg_tensor_numel(y); i++)
        ck_assert(isfinite(tg_get(y, i)));
    for (int64_t d = 0; d < D; d++) /* batch 1, query 0 = out_proj.bias */
        ck_assert(tg_get(y, (1 * T + 0) * D + d) == tg_get(m.out_proj_bias, d));
    for (int64_t h = 0; h < 2; h++) /* its attention weights are zeros */
        for (int64_t j = 0; j < T; j++)
            ck_assert(tg_get(w, ((1 * 2 + h) * T + 0) * T + j) == 0.0);
    /* upstream gradient only on the masked row: x gets exactly zero gradient */
    tg_tensor *dy = tg_const(ctx, dt, TG_DIMS(B, T, D), "dy");
    for (int64_t d = 0; d < D; d++)
        tg_set(dy, (1 * T + 0) * D + d, 1.0);
    ck_assert_int_eq(tg_graph_backward(g, y, dy), TG_OK);
    for (int64_t i = 0; i < tg_tensor_numel(x); i++)
        ck_assert_msg(tg_grad_get(x, i) == 0.0, "dx[%lld] = %g", (long long)i,
                      tg_grad_get(x, i));
    for (int64_t i = 0; i < tg_tensor_numel(m.in_proj_weight); i++)
        ck_assert(tg_grad_get(m.in_proj_weight, i) == 0.0);
    for (int64_t d = 0; d < D; d++)
        ck_assert(tg_grad_get(m.out_proj_bias, d) == 1.0);
    tg_ctx_free(ctx);
}
END_TEST

/* PyTorch default initialisation: bounds, zeros and ones, and sample spread. */
START_TEST(test_init)
{
    tg_ctx *ctx = tg_ctx_new();
    tg_ctx_seed(ctx, 11);
    tg_encoder_config c = tg_encoder_config_default(64, 4);
    c.d_ff = 256;
    tg_encoder_layer l;
    ck_assert_int_eq(tg_encoder_layer_init(ctx, &l, TG_F64, &c, "enc."), TG_OK);
    struct {
        tg_tensor *t;
        double bound; /* 0: all zero; -1: all one */
    } want[] = {
        {l.self_attn.in_proj_weight, sqrt(6.0 / (64 + 192))},
        {l.self_attn.in_proj_bias, 0},
        {l.self_attn.out_proj_weight, 1 / sqrt(64.0)},
        {l.self_attn.out_proj_bias, 0},
        {l.ffn.linear1_weight, 1 / sqrt(64.0)},
        {l.ffn.linear1_bias, 1 / sqrt(64.0)},
        {l.ffn.linear2_weight, 1 / sqrt(256.0)},
        {l.ffn.linear2_bias, 1 / sqrt(256.0)},
        {l.norm1_weight, -1}, {l.norm1_bias, 0}, {l.norm2_weight, -1}, {l.norm2_bias, 0},
    };
    for (size_t k = 0; k < sizeof want / sizeof want[0]; k++) {
        tg_tensor *t = want[k].t;
        double mx = 0, sq = 0;
        for (int64_t i = 0; i < tg_tensor_numel(t); i++) {
            double v = tg_get(t, i);
            if (want[k].bound == -1)
                ck_assert(v == 1.0);
            mx = fmax(mx, fabs(v));
            sq += v * v;
        }
        if (want[k].bound == 0)
            ck_assert_msg(mx == 0, "%s not zero", tg_tensor_name(t));
        if (want[k].bound > 0) {
            ck_assert_msg(mx <= want[k].bound, "%s exceeds its bound", tg_tensor_name(t));
            double rms = sqrt(sq / (double)tg_tensor_numel(t)), expect = want[k].bound / sqrt(3.0);
            ck_assert_msg(fabs(rms - expect) < 0.15 * expect, "%s rms %g, uniform gives %g",
                          tg_tensor_name(t), rms, expect);
        }
    }
    ck_assert_str_eq(tg_tensor_name(l.self_attn.out_proj_weight), "enc.self_attn.out_proj.weight");
    ck_assert_ptr_eq(tg_ctx_find_param(ctx, "enc.norm2.bias"), l.norm2_bias);
    tg_ctx_free(ctx);
}
END_TEST

START_TEST(test_transformer_names_and_tying)
{
    tg_ctx *ctx = tg_ctx_new();
    tg_transformer_config tc;
    memset(&tc, 0, sizeof tc);
    tc.vocab_size = 11;
    tc.max_seq_len = 6;
    tc.n_layers = 2;
    tc.layer = tg_encoder_config_default(8, 2);
    tc.layer.d_ff = 16;
    tc.tie_weights = true;
    tc.pos = TG_POS_SINUSOIDAL;
    tg_transformer m;
    ck_assert_int_eq(tg_transformer_init(ctx, &m, TG_F32, &tc), TG_OK);
    ck_assert_ptr_eq(m.head_w, m.tok_emb);
    ck_assert_ptr_null(m.pos_emb);
    ck_assert_ptr_nonnull(tg_ctx_find_param(ctx, "layers.1.self_attn.in_proj_weight"));
    ck_assert_ptr_nonnull(tg_ctx_find_param(ctx, "norm.weight"));
    ck_assert_ptr_nonnull(tg_ctx_find_param(ctx, "head.bias"));
    ck_assert_ptr_null(tg_ctx_find_param(ctx, "head.weight")); /* tied: no separate head */
    ck_assert_int_eq(tg_ctx_n_params(ctx), 1 + 2 * 12 + 2 + 1);
    tg_tensor *ids = tg_input(ctx, TG_I32, TG_DIMS(3, 5), "ids");
    tg_tensor *y = tg_transformer_forward(ctx, &m, ids, NULL);
    ck_assert_ptr_nonnull(y);
    ck_assert_int_eq(tg_tensor_rank(y), 3);
    ck_assert_int_eq(tg_tensor_dim(y, 2), 11);
    /* an out-of-range id is reported by forward, naming the element */
    tg_set(ids, 7, 11);
    tg_graph *g = tg_graph_new(ctx, &y, 1);
    ck_assert_int_eq(tg_graph_forward(g), TG_ERR_ARG);
    tu_assert_error(ctx, TG_ERR_ARG, "'ids'[7] = 11");
    tg_ctx_free(ctx);
}
END_TEST

START_TEST(test_sinusoidal)
{
    tg_ctx *ctx = tg_ctx_new();
    tg_tensor *pe = tg_sinusoidal_encoding(ctx, TG_F64, 5, 6);
    ck_assert_ptr_nonnull(pe);
    for (int64_t t = 0; t < 5; t++)
        for (int64_t i = 0; i < 3; i++) {
            double f = pow(10000.0, -2.0 * (double)i / 6.0);
            ck_assert(fabs(tg_get(pe, t * 6 + 2 * i) - sin((double)t * f)) < 1e-15);
            ck_assert(fabs(tg_get(pe, t * 6 + 2 * i + 1) - cos((double)t * f)) < 1e-15);
        }
    tg_ctx_free(ctx);
}
END_TEST

static tg_tensor *big_encoder(tg_ctx *ctx, tg_dtype dt)
{
    tg_encoder_config c = tg_encoder_config_default(64, 4);
    c.d_ff = 128;
    c.norm_first = true;
    c.activation = TG_ACT_GELU;
    c.dropout = 0.1;
    tg_encoder_layer l;
    if (tg_encoder_layer_init(ctx, &l, dt, &c, NULL) != TG_OK)
        return NULL;
    tg_attn_masks mk;
    memset(&mk, 0, sizeof mk);
    mk.causal = true;
    return tg_encoder_layer_forward(ctx, &l, tu_input(ctx, dt, TG_DIMS(8, 32, 64), "x", -1, 1),
                                    &mk);
}

/* The attention weights' dropout of nn.MultiheadAttention(dropout=p), built from the ops by
 * hand: heads of x W^T + b, softmax(q k^T / sqrt(Dh)), dropout p, times v, out_proj. */
static tg_tensor *mha_by_hand(tg_ctx *ctx, const tg_mha *m, tg_tensor *x, double p)
{
    int64_t B = tg_tensor_dim(x, 0), T = tg_tensor_dim(x, 1), D = m->d_model, H = m->n_heads;
    tg_tensor *h[3];
    for (int i = 0; i < 3; i++) {
        tg_tensor *y = tg_dense(ctx, x, tg_narrow(ctx, m->in_proj_weight, 0, i * D, D),
                                tg_narrow(ctx, m->in_proj_bias, 0, i * D, D));
        h[i] = tg_transpose(ctx, tg_reshape(ctx, y, TG_DIMS(B, T, H, D / H)), 1, 2);
    }
    tg_tensor *s = tg_scale(ctx, tg_matmul(ctx, h[0], h[1], false, true), 1.0 / sqrt(D / H));
    tg_tensor *o = tg_matmul(ctx, tg_dropout(ctx, tg_softmax(ctx, s), p), h[2], false, false);
    o = tg_reshape(ctx, tg_transpose(ctx, o, 1, 2), TG_DIMS(B, T, D));
    return tg_dense(ctx, o, m->out_proj_weight, m->out_proj_bias);
}


/* Dropout apart (attn_dropout, act_dropout, as fairseq's): the dropout nodes of an encoder and
 * a decoder layer in training mode, by setting. 0 follows cfg.dropout (PyTorch's one dropout:
 * attention weights, FFN, after each sublayer), TG_DROPOUT_OFF removes it (the attention then
 * runs fused), a value of its own replaces it; values outside [0, 1) or OFF are refused. */
static int64_t count_op(tg_tensor *y, const char *op)
{
    tg_graph *g = tg_graph_new(tg_tensor_ctx(y), &y, 1);
    ck_assert_ptr_nonnull(g);
    int64_t n = 0;
    for (int64_t i = 0; i < tg_graph_size(g); i++)
        n += tg_tensor_op_index(tg_graph_node(g, i)) == tg_op_find(op);
    tg_graph_free(g);
    return n;
}

START_TEST(test_dropout_apart)
{
    static const struct {
        double p, attn, act;
        int64_t enc, dec, fused_enc; /* dropout nodes; flash attention nodes of the encoder */
    } rows[] = {
        {0.3, 0, 0, 4, 6, 0},
        {0.3, TG_DROPOUT_OFF, 0, 3, 4, 1},
        {0.3, 0, TG_DROPOUT_OFF, 3, 5, 0},
        {0.3, TG_DROPOUT_OFF, TG_DROPOUT_OFF, 2, 3, 1},
        {0, 0.2, 0.1, 2, 3, 0},
        {0, 0, 0, 0, 0, 1},
    };
    for (size_t r = 0; r < sizeof rows / sizeof rows[0]; r++) {
        tg_ctx *ctx = tu_ctx_new();
        tg_encoder_config c = tg_encoder_config_default(8, 2);
        c.d_ff = 16;
        c.dropout = rows[r].p;
        c.attn_dropout = rows[r].attn;
        c.act_dropout = rows[r].act;
        tg_encoder_layer el;
        tg_decoder_layer dl;
        ck_assert_int_eq(tg_encoder_layer_init(ctx, &el, TG_F32, &c, "e."), TG_OK);
        ck_assert_int_eq(tg_decoder_layer_init(ctx, &dl, TG_F32, &c, "d."), TG_OK);
        tg_tensor *x = tg_input(ctx, TG_F32, TG_DIMS(2, 3, 8), "x");
        tg_tensor *e = tg_encoder_layer_forward(ctx, &el, x, NULL);
        tg_tensor *d = tg_decoder_layer_forward(ctx, &dl, x, e, NULL, NULL);
        ck_assert_int_eq(count_op(e, "dropout"), rows[r].enc);
        ck_assert_int_eq(count_op(d, "dropout") - count_op(e, "dropout"), rows[r].dec);
        ck_assert_int_eq(count_op(e, "flash_attention"), rows[r].fused_enc);
        tu_ctx_free(ctx);
    }
    static const double bad[][2] = {{1.0, 0}, {-0.5, 0}, {0, 1.5}, {0, -2}, {0.0 / 0.0, 0}};
    for (size_t b = 0; b < sizeof bad / sizeof bad[0]; b++) {
        tg_ctx *ctx = tu_ctx_new();
        tg_encoder_config c = tg_encoder_config_default(8, 2);
        c.attn_dropout = bad[b][0];
        c.act_dropout = bad[b][1];
        tg_encoder_layer el;
        ck_assert_int_eq(tg_encoder_layer_init(ctx, &el, TG_F32, &c, NULL), TG_ERR_ARG);
        ck_assert_ptr_nonnull(strstr(tg_ctx_message(ctx), "attn_dropout"));
        tu_ctx_free(ctx);
    }
}
END_TEST

/* tg_mha.dropout drops attention weights in training mode (the same mask as the hand-built
 * graph from the same RNG state), nothing in eval mode; the encoder and decoder layers set it
 * from their config, as PyTorch's layers pass dropout to their MultiheadAttention. */
START_TEST(test_mha_attention_dropout)
{
    tg_tensor *y[2];
    tg_ctx *ctx[2];
    tg_graph *g[2];
    for (int k = 0; k < 2; k++) {
        ctx[k] = tg_ctx_new();
        tg_ctx_seed(ctx[k], 11);
        tg_mha m;
        ck_assert_int_eq(tg_mha_init(ctx[k], &m, TG_F64, 8, 2, NULL), TG_OK);
        ck_assert(m.dropout == 0);
        tg_tensor *x = tu_input(ctx[k], TG_F64, TG_DIMS(2, 5, 8), "x", -1, 1);
        m.dropout = 0.5;
        y[k] = k == 0 ? tg_mha_forward(ctx[k], &m, x, x, x, NULL, NULL)
                      : mha_by_hand(ctx[k], &m, x, 0.5);
        ck_assert_ptr_nonnull(y[k]);
        g[k] = tg_graph_new(ctx[k], &y[k], 1);
        ck_assert_ptr_nonnull(g[k]);
        tg_ctx_set_training(ctx[k], true);
        ck_assert_int_eq(tg_graph_forward(g[k]), TG_OK);
    }
    ck_assert_double_le(tu_max_abs_diff(y[0], y[1]), 1e-12);
    /* eval mode: no dropout, the output of dropout 0 */
    tg_mha m0;
    tg_ctx *c = tg_ctx_new();
    tg_ctx_seed(c, 11);
    ck_assert_int_eq(tg_mha_init(c, &m0, TG_F64, 8, 2, NULL), TG_OK);
    tg_tensor *x0 = tu_input(c, TG_F64, TG_DIMS(2, 5, 8), "x", -1, 1);
    tg_tensor *y0 = tg_mha_forward(c, &m0, x0, x0, x0, NULL, NULL);
    tg_graph *g0 = tg_graph_new(c, &y0, 1);
    ck_assert_int_eq(tg_graph_forward(g0), TG_OK);
    tg_ctx_set_training(ctx[0], false);
    ck_assert_int_eq(tg_graph_forward(g[0]), TG_OK);
    ck_assert_double_le(tu_max_abs_diff(y[0], y0), 1e-12);
    ck_assert_double_gt(tu_max_abs_diff(y[1], y0), 1e-3); /* the dropout did act */
    /* out of range */
    m0.dropout = 1;
    ck_assert_ptr_null(tg_mha_forward(c, &m0, x0, x0, x0, NULL, NULL));
    tu_assert_error(c, TG_ERR_ARG, "dropout 1 must be in [0, 1)");
    tg_ctx_clear_error(c);
    /* the layers pass their dropout on */
    tg_encoder_config cfg = tg_encoder_config_default(8, 2);
    cfg.d_ff = 16;
    cfg.dropout = 0.25;
    tg_encoder_layer el;
    tg_decoder_layer dl;
    ck_assert_int_eq(tg_encoder_layer_init(c, &el, TG_F64, &cfg, "enc."), TG_OK);
    ck_assert_int_eq(tg_decoder_layer_init(c, &dl, TG_F64, &cfg, "dec."), TG_OK);
    ck_assert(el.self_attn.dropout == 0.25);
    ck_assert(dl.self_attn.dropout == 0.25 && dl.multihead_attn.dropout == 0.25);
    for (int k = 0; k < 2; k++)
        tg_ctx_free(ctx[k]);
    tg_ctx_free(c);
}
END_TEST

START_TEST(test_encoder_thread_invariance)
{
    tu_assert_thread_invariant(big_encoder, _i ? TG_F64 : TG_F32);
}
END_TEST


/* cross_entropy stays finite and exact for logits of +-1e4, in both dtypes. */
START_TEST(test_cross_entropy_large_logits)
{
    tg_dtype dt = _i ? TG_F64 : TG_F32;
    tg_ctx *ctx = tg_ctx_new();
    tg_tensor *x = tg_input(ctx, dt, TG_DIMS(2, 3), "logits");
    tg_set_requires_grad(x, true);
    tu_set(x, (const double[]){1e4, -1e4, 0, -1e4, -1e4, 1e4});
    tg_tensor *t = tg_const(ctx, TG_I32, TG_DIMS(2), "targets");
    tu_set(t, (const double[]){1, 2}); /* row 0: wrong class by 2e4; row 1: right class */
    tg_tensor *loss = tg_cross_entropy(ctx, x, t, -100);
    tg_graph *g = tg_graph_new(ctx, &loss, 1);
    ck_assert_int_eq(tg_graph_forward(g), TG_OK);
    ck_assert_int_eq(tg_graph_backward(g, loss, NULL), TG_OK);
    /* row 0 loss = logsumexp - x_1 = 1e4 - (-1e4) = 2e4; row 1 loss = 0; mean 1e4 */
    ck_assert_msg(fabs(tg_get(loss, 0) - 1e4) <= 1e-3, "loss %g", tg_get(loss, 0));
    const double want[6] = {0.5, -0.5, 0, 0, 0, 0}; /* (softmax - onehot) / 2 */
    for (int i = 0; i < 6; i++)
        ck_assert_msg(fabs(tg_grad_get(x, i) - want[i]) < 1e-6, "dx[%d] = %g", i,
                      tg_grad_get(x, i));
    tg_ctx_free(ctx);
}
END_TEST


/* ---- sizes the library cannot represent ---------------------- */
#define HUGE62 4611686018427387904LL /* 2^62 */

/* Each init function refuses a size it cannot represent with one message naming the value
 * and the limit, before allocating anything (no wrapped allocation, no heap overflow, no
 * signed overflow at 3 * d_model). */
START_TEST(test_huge_sizes_refused)
{
    tg_ctx *ctx = tg_ctx_new();
    size_t b0 = tg_ctx_bytes(ctx);
    tg_transformer_config tc;
    memset(&tc, 0, sizeof tc);
    tc.vocab_size = 7;
    tc.max_seq_len = 4;
    tc.n_layers = HUGE62; /* n_layers * sizeof(tg_encoder_layer) wrapped: heap overflow */
    tc.layer = tg_encoder_config_default(8, 2);
    tc.layer.d_ff = 16;
    tg_transformer tm;
    ck_assert_int_eq(tg_transformer_init(ctx, &tm, TG_F32, &tc), TG_ERR_ARG);
    tu_assert_error(ctx, TG_ERR_ARG,
                    "tg_transformer_init: n_layers 4611686018427387904 too large (at most 65536)");
    ck_assert_uint_eq(tg_ctx_bytes(ctx), b0);
    tg_ctx_clear_error(ctx);
    tc.n_layers = TG_TRANSFORMER_MAX_LAYERS + 1;
    ck_assert_int_eq(tg_transformer_init(ctx, &tm, TG_F32, &tc), TG_ERR_ARG);
    tu_assert_error(ctx, TG_ERR_ARG, "n_layers 65537 too large (at most 65536)");
    tg_ctx_clear_error(ctx);
    tc.n_layers = INT64_MIN;
    ck_assert_int_eq(tg_transformer_init(ctx, &tm, TG_F32, &tc), TG_ERR_ARG);
    tu_assert_error(ctx, TG_ERR_ARG, "n_layers -9223372036854775808");
    tg_ctx_clear_error(ctx);
    tc.n_layers = 1;

    /* vocab, max_seq_len and d_model of the whole model */
    tc.vocab_size = HUGE62;
    ck_assert_int_eq(tg_transformer_init(ctx, &tm, TG_F32, &tc), TG_ERR_ARG);
    tu_assert_error(ctx, TG_ERR_ARG, "tg_transformer_init: vocab_size 4611686018427387904 with "
                    "d_model 8 too large: tok_emb.weight (vocab, d_model) would hold more than "
                    "1152921504606846975 elements");
    tg_ctx_clear_error(ctx);
    tc.vocab_size = 7;
    tc.max_seq_len = INT64_MAX; /* beyond the one bound of a model's length */
    ck_assert_int_eq(tg_transformer_init(ctx, &tm, TG_F32, &tc), TG_ERR_ARG);
    tu_assert_error(ctx, TG_ERR_ARG, "tg_transformer_init: max_seq_len 9223372036854775807 is "
                    "more than 65536 (TG_TRANSFORMER_MAX_SEQ_LEN)");
    tg_ctx_clear_error(ctx);
    tc.max_seq_len = 4;
    tc.layer = tg_encoder_config_default(HUGE62, 1);
    tc.layer.d_ff = 1;
    ck_assert_int_eq(tg_transformer_init(ctx, &tm, TG_F32, &tc), TG_ERR_ARG);
    tu_assert_error(ctx, TG_ERR_ARG, "d_model 4611686018427387904");
    tg_ctx_clear_error(ctx);
    tc.layer = tg_encoder_config_default(8, 2);
    tc.layer.d_ff = HUGE62;
    ck_assert_int_eq(tg_transformer_init(ctx, &tm, TG_F32, &tc), TG_ERR_ARG);
    tu_assert_error(ctx, TG_ERR_ARG, "d_model 8 with d_ff 4611686018427387904 too large: "
                    "linear1.weight (d_ff, d_model)");
    tg_ctx_clear_error(ctx);
    tc.layer.d_ff = 16;
    tc.layer.n_heads = INT64_MAX;
    ck_assert_int_eq(tg_transformer_init(ctx, &tm, TG_F32, &tc), TG_ERR_ARG);
    tu_assert_error(ctx, TG_ERR_ARG, "n_heads 9223372036854775807");
    tg_ctx_clear_error(ctx);
    ck_assert_uint_eq(tg_ctx_bytes(ctx), b0);

    /* MHA: 3 * d_model overflowed int64 (signed overflow) before; 1e9 is representable as a
     * number but in_proj_weight (3e9, 1e9) is not */
    tg_mha m;
    const int64_t dms[] = {HUGE62, INT64_MAX, 1000000000};
    for (int i = 0; i < 3; i++) {
        ck_assert_int_eq(tg_mha_init(ctx, &m, TG_F32, dms[i], 1, NULL), TG_ERR_ARG);
        char want[160];
        snprintf(want, sizeof want, "tg_mha_init: d_model %lld too large: in_proj_weight "
                 "(3 d_model, d_model) would hold more than 1152921504606846975 elements",
                 (long long)dms[i]);
        tu_assert_error(ctx, TG_ERR_ARG, want);
        ck_assert_ptr_null(m.in_proj_weight);
        tg_ctx_clear_error(ctx);
    }
    ck_assert_int_eq(tg_mha_init(ctx, &m, TG_F32, HUGE62, HUGE62, NULL), TG_ERR_ARG);
    tg_ctx_clear_error(ctx);
    /* FFN */
    tg_ffn f;
    ck_assert_int_eq(tg_ffn_init(ctx, &f, TG_F64, 2, HUGE62, TG_ACT_RELU, NULL), TG_ERR_ARG);
    tu_assert_error(ctx, TG_ERR_ARG, "tg_ffn_init: d_model 2 with d_ff 4611686018427387904 too "
                    "large: linear1.weight (d_ff, d_model) would hold more than");
    tg_ctx_clear_error(ctx);
    ck_assert_int_eq(tg_ffn_init(ctx, &f, TG_F64, INT64_MAX, INT64_MAX, TG_ACT_GELU, NULL),
                     TG_ERR_ARG);
    tg_ctx_clear_error(ctx);
    /* encoder layer */
    tg_encoder_config ec = tg_encoder_config_default(1LL << 40, 1);
    ec.d_ff = 1;
    tg_encoder_layer el;
    ck_assert_int_eq(tg_encoder_layer_init(ctx, &el, TG_F32, &ec, NULL), TG_ERR_ARG);
    tu_assert_error(ctx, TG_ERR_ARG, "tg_encoder_layer_init: d_model 1099511627776 with d_ff 1 "
                    "too large: self_attn.in_proj_weight (3 d_model, d_model)");
    tg_ctx_clear_error(ctx);
    ck_assert_uint_eq(tg_ctx_bytes(ctx), b0);

    /* the constants of the model: causal mask and sinusoidal encoding */
    ck_assert_ptr_null(tg_causal_mask(ctx, TG_F32, INT64_MAX, INT64_MAX));
    tu_assert_error(ctx, TG_ERR_SHAPE, "tg_causal_mask: (t_q, t_k) = (9223372036854775807, "
                    "9223372036854775807) is too large (at most 1152921504606846975 elements)");
    tg_ctx_clear_error(ctx);
    ck_assert_ptr_null(tg_causal_mask(ctx, TG_F32, 0, 3));
    tu_assert_error(ctx, TG_ERR_SHAPE, "tg_causal_mask: t_q 0 and t_k 3 must both be >= 1");
    tg_ctx_clear_error(ctx);
    ck_assert_ptr_null(tg_sinusoidal_encoding(ctx, TG_F64, HUGE62, 8));
    tu_assert_error(ctx, TG_ERR_SHAPE, "tg_sinusoidal_encoding: (t, d) = (4611686018427387904, 8)");
    tg_ctx_clear_error(ctx);
    ck_assert_ptr_null(tg_sinusoidal_encoding(ctx, TG_F64, 4, -1));
    tu_assert_error(ctx, TG_ERR_SHAPE, "tg_sinusoidal_encoding: t 4 and d -1");
    tg_ctx_clear_error(ctx);
    ck_assert_uint_eq(tg_ctx_bytes(ctx), b0);

    /* a prefix so long that the names would be truncated (and could collide) */
    char longp[200];
    memset(longp, 'p', sizeof longp - 1);
    longp[sizeof longp - 1] = '\0';
    ck_assert_int_eq(tg_mha_init(ctx, &m, TG_F32, 8, 2, longp), TG_ERR_ARG);
    tu_assert_error(ctx, TG_ERR_ARG, "prefix too long");
    ck_assert_int_eq(tg_ctx_n_params(ctx), 0);
    tg_ctx_free(ctx);
}
END_TEST

/* An allocator that fails every block larger than `max` bytes and records the number of the
 * first call that failed and of every call made. */
typedef struct {
    size_t max;
    long calls, first_fail, n_fail;
} cap_alloc;

static void *cap_alloc_fn(void *user, size_t size)
{
    cap_alloc *c = user;
    c->calls++;
    if (size > c->max) {
        if (!c->first_fail)
            c->first_fail = c->calls;
        c->n_fail++;
        return NULL;
    }
    return malloc(size);
}

static void cap_free_fn(void *user, void *p)
{
    (void)user;
    free(p);
}

/* Defect 5: a module build stops at its first failure. The first big parameter fails; before,
 * the builder went on allocating every later parameter that happened to fit (31 s and 15.6 GB
 * for `--d-model 1000000000`); now no allocation is even attempted after it. */
START_TEST(test_build_stops_at_first_failure)
{
    cap_alloc c = {1 << 20, 0, 0, 0}; /* blocks over 1 MB fail */
    tg_allocator al = {cap_alloc_fn, cap_free_fn, &c};
    tg_ctx *ctx = tg_ctx_new_with(&al);
    tg_transformer_config tc;
    memset(&tc, 0, sizeof tc);
    tc.vocab_size = 8;
    tc.max_seq_len = 8;
    tc.n_layers = 3;
    tc.layer = tg_encoder_config_default(1 << 16, 1); /* tok_emb (8, 65536) f32: 2 MB */
    tc.layer.d_ff = 4;
    tg_transformer m;
    ck_assert_int_eq(tg_transformer_init(ctx, &m, TG_F32, &tc), TG_ERR_NOMEM);
    tu_assert_error(ctx, TG_ERR_NOMEM, "tg_param: out of memory allocating 2097152 bytes");
    ck_assert_int_eq(c.n_fail, 1);
    ck_assert_int_eq(c.calls, c.first_fail); /* nothing after the failure */
    ck_assert_int_eq(tg_ctx_n_params(ctx), 0);
    /* the same for an encoder layer failing at in_proj_weight (3 * 512, 512) f32 = 3 MB */
    tg_ctx_clear_error(ctx);
    c.first_fail = c.n_fail = 0;
    tg_encoder_config ec = tg_encoder_config_default(512, 2);
    tg_encoder_layer l;
    ck_assert_int_eq(tg_encoder_layer_init(ctx, &l, TG_F32, &ec, "x."), TG_ERR_NOMEM);
    ck_assert_int_eq(c.n_fail, 1);
    ck_assert_int_eq(c.calls, c.first_fail);
    /* while that error is pending, every init and op builder refuses without allocating */
    long calls = c.calls;
    tg_mha mh;
    ck_assert_int_eq(tg_mha_init(ctx, &mh, TG_F32, 8, 2, NULL), TG_ERR_NOMEM);
    tg_ffn ff;
    ck_assert_int_eq(tg_ffn_init(ctx, &ff, TG_F32, 8, 8, TG_ACT_RELU, NULL), TG_ERR_NOMEM);
    ck_assert_int_eq(tg_transformer_init(ctx, &m, TG_F32, &tc), TG_ERR_NOMEM);
    ck_assert_ptr_null(tg_causal_mask(ctx, TG_F32, 2, 2));
    ck_assert_int_eq(c.calls, calls);
    tu_assert_error(ctx, TG_ERR_NOMEM, "tg_param: out of memory allocating 3145728 bytes");
    /* cleared: a model that fits builds */
    tg_ctx_clear_error(ctx);
    tc.layer = tg_encoder_config_default(8, 2);
    tc.layer.d_ff = 16;
    ck_assert_int_eq(tg_transformer_init(ctx, &m, TG_F32, &tc), TG_OK);
    tg_ctx_free(ctx);
}
END_TEST

/* With a memory limit, a model too big for it fails at once, before allocating anything, with
 * one message naming the sizes; a model within it builds. */
START_TEST(test_memory_limit_model)
{
    tg_ctx *ctx = tg_ctx_new();
    tg_ctx_set_memory_limit(ctx, (size_t)64 << 20); /* 64 MB */
    tg_transformer_config tc;
    memset(&tc, 0, sizeof tc);
    tc.vocab_size = 65;
    tc.max_seq_len = 128;
    tc.n_layers = 2;
    tc.layer = tg_encoder_config_default(1 << 20, 4); /* in_proj alone: 12 TB */
    tc.layer.d_ff = 4;
    tg_transformer m;
    ck_assert_int_eq(tg_transformer_init(ctx, &m, TG_F32, &tc), TG_ERR_NOMEM);
    tu_assert_error(ctx, TG_ERR_NOMEM, "tg_transformer_init: the parameters need ");
    tu_assert_error(ctx, TG_ERR_NOMEM, "which would exceed the memory limit of 67108864 bytes "
                    "(0 in use)");
    ck_assert_uint_eq(tg_ctx_bytes(ctx), 0);
    tg_ctx_clear_error(ctx);
    tg_mha mh;
    ck_assert_int_eq(tg_mha_init(ctx, &mh, TG_F64, 4096, 4, NULL), TG_ERR_NOMEM); /* 512 MB */
    tu_assert_error(ctx, TG_ERR_NOMEM, "tg_mha_init: the parameters need 537001984 bytes");
    ck_assert_uint_eq(tg_ctx_bytes(ctx), 0);
    tg_ctx_clear_error(ctx);
    tc.layer = tg_encoder_config_default(64, 4);
    tc.layer.d_ff = 128;
    ck_assert_int_eq(tg_transformer_init(ctx, &m, TG_F32, &tc), TG_OK);
    ck_assert_uint_le(tg_ctx_bytes(ctx), (size_t)64 << 20);
    tg_ctx_free(ctx);
}
END_TEST

/* A module struct filled by hand with inconsistent sizes is refused, not trusted (D / H with
 * H = 0, 2 * D past the weights). */
START_TEST(test_inconsistent_module_refused)
{
    tg_ctx *ctx = tg_ctx_new();
    tg_mha m;
    ck_assert_int_eq(tg_mha_init(ctx, &m, TG_F32, 8, 2, NULL), TG_OK);
    tg_tensor *x = tg_input(ctx, TG_F32, TG_DIMS(1, 2, 8), "x");
    tg_mha bad = m;
    bad.n_heads = 0;
    ck_assert_ptr_null(tg_mha_forward(ctx, &bad, x, x, x, NULL, NULL));
    tu_assert_error(ctx, TG_ERR_ARG, "tg_mha_forward: module is inconsistent: d_model 8, "
                    "n_heads 0");
    tg_ctx_clear_error(ctx);
    bad = m;
    bad.d_model = INT64_MAX;
    bad.n_heads = 1;
    ck_assert_ptr_null(tg_mha_forward(ctx, &bad, x, x, x, NULL, NULL));
    tu_assert_error(ctx, TG_ERR_ARG, "module is inconsistent");
    tg_ctx_clear_error(ctx);
    tg_transformer_config tc;
    memset(&tc, 0, sizeof tc);
    tc.vocab_size = 5;
    tc.max_seq_len = 2;
    tc.n_layers = 1;
    tc.layer = tg_encoder_config_default(8, 2);
    tc.layer.d_ff = 8;
    tg_transformer t;
    ck_assert_int_eq(tg_transformer_init(ctx, &t, TG_F32, &tc), TG_OK);
    tg_tensor *ids = tg_input(ctx, TG_I32, TG_DIMS(1, 2), "ids");
    tg_transformer tb = t;
    tb.cfg.n_layers = HUGE62;
    ck_assert_ptr_null(tg_transformer_forward(ctx, &tb, ids, NULL));
    tu_assert_error(ctx, TG_ERR_ARG, "not initialised");
    tg_ctx_clear_error(ctx);
    ck_assert_ptr_nonnull(tg_transformer_forward(ctx, &t, ids, NULL));
    tg_ctx_free(ctx);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("nn");
    TCase *tc = tcase_create("nn");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_module_errors);
    tcase_add_test(tc, test_mha_attention_dropout);
    tcase_add_test(tc, test_dropout_apart);
    tcase_add_loop_test(tc, test_fully_masked_row, 0, 2);
    tcase_add_test(tc, test_init);
    tcase_add_test(tc, test_transformer_names_and_tying);
    tcase_add_test(tc, test_sinusoidal);
    tcase_add_loop_test(tc, test_cross_entropy_large_logits, 0, 2);
    tcase_add_loop_test(tc, test_encoder_thread_invariance, 0, 2);
    tcase_add_test(tc, test_huge_sizes_refused);
    tcase_add_test(tc, test_build_stops_at_first_failure);
    tcase_add_test(tc, test_memory_limit_model);
    tcase_add_test(tc, test_inconsistent_module_refused);
    suite_add_tcase(s, tc);
    return tu_run(s);
}
