/*
 * test_decoder.c - the decoder layer, the encoder / decoder stacks, the encoder-decoder model
 * and the seq2seq tg_transformer beyond PyTorch parity (tests/test_fixtures.c):
 * parameter names, fused and unfused graphs agree, thread invariance, fully masked memory
 * rows, and clear errors for bad input.
 */
#include "testutil.h"
#include "tgrad_io.h"
#include "tgrad_nn.h"
#include "tgrad_train.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* A 0/1 constant mask of the given shape from ints. */
static tg_tensor *mask_of(tg_ctx *ctx, tg_dtype dt, int rank, const int64_t *shape,
                          const int *v, const char *name)
{
    tg_tensor *m = tg_const(ctx, dt, rank, shape, name);
    ck_assert_ptr_nonnull(m);
    for (int64_t i = 0; i < tg_tensor_numel(m); i++)
        tg_set(m, i, v ? v[i] : 0);
    return m;
}

static tg_decoder_config small_cfg(bool pre, tg_activation act)
{
    tg_decoder_config c = tg_encoder_config_default(8, 2);
    c.d_ff = 12;
    c.norm_first = pre;
    c.activation = act;
    return c;
}

/* ---- names ----------------------------------------------------------------------------- */

/* Every parameter exactly as PyTorch's state_dict (the fixture files hold them), same count. */
static void expect_names_in(tg_ctx *ctx, const char *fixture, int64_t n_expected)
{
    char path[1024];
    snprintf(path, sizeof path, "%s/%s.safetensors", TG_FIXTURES, fixture);
    tg_safetensors *st = tg_safetensors_read(ctx, path);
    ck_assert_msg(st != NULL, "%s", tg_ctx_message(ctx));
    ck_assert_int_eq(tg_ctx_n_params(ctx), n_expected);
    for (int64_t i = 0; i < tg_ctx_n_params(ctx); i++) {
        tg_tensor *p = tg_ctx_param(ctx, i);
        tg_tensor *f = tg_safetensors_find(st, tg_tensor_name(p));
        ck_assert_msg(f != NULL, "%s: PyTorch has no key %s", fixture, tg_tensor_name(p));
        ck_assert_int_eq(tg_tensor_rank(f), tg_tensor_rank(p));
        ck_assert_int_eq(tg_tensor_numel(f), tg_tensor_numel(p));
    }
}

START_TEST(test_state_dict_names)
{
    tg_ctx *ctx = tu_ctx_new();
    tg_decoder_config c = tg_encoder_config_default(8, 2);
    c.d_ff = 16;
    tg_decoder_layer l;
    ck_assert_int_eq(tg_decoder_layer_init(ctx, &l, TG_F64, &c, NULL), TG_OK);
    expect_names_in(ctx, "dec_post_relu", 18);
    tu_ctx_free(ctx);

    ctx = tu_ctx_new();
    tg_decoder d;
    ck_assert_int_eq(tg_decoder_init(ctx, &d, TG_F32, &c, 2, true, NULL), TG_OK);
    expect_names_in(ctx, "dec_stack2", 2 * 18 + 2);
    ck_assert_ptr_nonnull(tg_ctx_find_param(ctx, "layers.1.multihead_attn.out_proj.bias"));
    tu_ctx_free(ctx);

    ctx = tu_ctx_new();
    tg_encoder e;
    ck_assert_int_eq(tg_encoder_init(ctx, &e, TG_F32, &c, 2, true, NULL), TG_OK);
    expect_names_in(ctx, "enc_stack2_norm", 2 * 12 + 2);
    tu_ctx_free(ctx);

    /* no final norm: no norm.* */
    ctx = tu_ctx_new();
    ck_assert_int_eq(tg_encoder_init(ctx, &e, TG_F32, &c, 3, false, "enc."), TG_OK);
    ck_assert_int_eq(tg_ctx_n_params(ctx), 36);
    ck_assert_ptr_null(e.norm_weight);
    ck_assert_ptr_nonnull(tg_ctx_find_param(ctx, "enc.layers.2.norm2.bias"));
    tu_ctx_free(ctx);

    ctx = tu_ctx_new();
    tg_encoder_decoder m;
    ck_assert_int_eq(tg_encoder_decoder_init(ctx, &m, TG_F64, &c, 2, 2, NULL), TG_OK);
    expect_names_in(ctx, "transformer_2_2", 2 * 12 + 2 + 2 * 18 + 2);
    tu_ctx_free(ctx);
}
END_TEST

/* The seq2seq tg_transformer: tok_emb, pos_emb, encoder.*, decoder.*, head.*; no norm.* (the
 * decoder's final norm is the one before the head); logits (B, T, V). */
START_TEST(test_seq2seq_model)
{
    tg_ctx *ctx = tu_ctx_new();
    tg_transformer_config c;
    memset(&c, 0, sizeof c);
    c.vocab_size = 7;
    c.max_seq_len = 6;
    c.n_layers = 2;
    c.n_decoder_layers = 3;
    c.layer = small_cfg(true, TG_ACT_GELU);
    tg_transformer m;
    ck_assert_int_eq(tg_transformer_init(ctx, &m, TG_F64, &c), TG_OK);
    ck_assert_int_eq(tg_ctx_n_params(ctx), 2 + 2 * 12 + 2 + 3 * 18 + 2 + 2);
    ck_assert_ptr_nonnull(tg_ctx_find_param(ctx, "encoder.layers.1.linear2.bias"));
    ck_assert_ptr_nonnull(tg_ctx_find_param(ctx, "decoder.layers.2.multihead_attn.in_proj_weight"));
    ck_assert_ptr_nonnull(tg_ctx_find_param(ctx, "decoder.norm.weight"));
    ck_assert_ptr_nonnull(tg_ctx_find_param(ctx, "encoder.norm.bias"));
    ck_assert_ptr_null(tg_ctx_find_param(ctx, "norm.weight"));
    ck_assert_ptr_eq(m.norm_w, tg_ctx_find_param(ctx, "decoder.norm.weight"));
    tg_tensor *src = tg_input(ctx, TG_I32, TG_DIMS(2, 5), "src");
    tg_tensor *tgt = tg_input(ctx, TG_I32, TG_DIMS(2, 4), "tgt");
    for (int64_t i = 0; i < 10; i++)
        tg_set(src, i, (double)(i % 7));
    for (int64_t i = 0; i < 8; i++)
        tg_set(tgt, i, (double)((3 * i) % 7));
    tg_tensor *y = tg_transformer_forward_seq2seq(ctx, &m, src, tgt, NULL, NULL);
    ck_assert_msg(y != NULL, "%s", tg_ctx_message(ctx));
    ck_assert_int_eq(tg_tensor_rank(y), 3);
    ck_assert_int_eq(tg_tensor_dim(y, 1), 4);
    ck_assert_int_eq(tg_tensor_dim(y, 2), 7);
    /* the decoder-only entry point refuses it, and vice versa */
    ck_assert_ptr_null(tg_transformer_forward(ctx, &m, tgt, NULL));
    tu_assert_error(ctx, TG_ERR_ARG, "use tg_transformer_forward_seq2seq");
    tg_ctx_clear_error(ctx);
    /* causal target: logits at position t do not depend on target tokens after t */
    tg_graph *g = tg_graph_new(ctx, &y, 1);
    ck_assert_ptr_nonnull(g);
    ck_assert_int_eq(tg_graph_forward(g), TG_OK);
    double before[14];
    for (int i = 0; i < 14; i++)
        before[i] = tg_get(y, i); /* batch 0, positions 0 and 1 */
    tg_set(tgt, 2, 6);
    tg_set(tgt, 3, 5);
    ck_assert_int_eq(tg_graph_forward(g), TG_OK);
    for (int i = 0; i < 14; i++)
        ck_assert(tg_get(y, i) == before[i]);
    ck_assert(tg_get(y, 2 * 7) != 0); /* and the model does run */
    tu_ctx_free(ctx);

    ctx = tu_ctx_new();
    c.n_decoder_layers = 0;
    c.causal = true;
    ck_assert_int_eq(tg_transformer_init(ctx, &m, TG_F32, &c), TG_OK);
    tgt = tg_input(ctx, TG_I32, TG_DIMS(2, 4), "tgt");
    ck_assert_ptr_null(tg_transformer_forward_seq2seq(ctx, &m, tgt, tgt, NULL, NULL));
    tu_assert_error(ctx, TG_ERR_ARG, "not an encoder-decoder model");
    tu_ctx_free(ctx);

    ctx = tu_ctx_new();
    c.n_layers = 0;
    c.n_decoder_layers = 2;
    ck_assert_int_eq(tg_transformer_init(ctx, &m, TG_F32, &c), TG_ERR_ARG);
    tu_assert_error(ctx, TG_ERR_ARG, "needs n_layers >= 1");
    tu_ctx_free(ctx);
}
END_TEST

/* ---- fused and unfused graphs ------------------------------------------------------------ */

typedef struct {
    tg_ctx *ctx;
    tg_tensor *y;
    tg_tensor *leaves[4];
    int n_leaves;
} built;

/* A decoder layer (model false) or the 2+2 encoder-decoder (model true) with every kind of
 * mask, forward and backward, fusion on or off. Same seed: same parameters and inputs. */
static built build_fusion(bool fused, bool model, bool pre)
{
    built b;
    memset(&b, 0, sizeof b);
    b.ctx = tu_ctx_new();
    tg_ctx *ctx = b.ctx;
    tg_ctx_set_fusion(ctx, fused);
    tg_ctx_seed(ctx, 11);
    tg_decoder_config c = small_cfg(pre, pre ? TG_ACT_GELU : TG_ACT_RELU);
    const int64_t B = 2, T = 5, S = 6;
    static const int tpad[] = {0, 0, 0, 1, 1, 0, 0, 0, 0, 1};
    static const int mpad[] = {0, 0, 1, 0, 0, 0, 1, 1, 1, 1, 1, 1}; /* batch 1: all padded */
    static const int mmask[] = {0, 1, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 0, 0, 1, 0,
                                1, 0, 0, 0, 0, 0, 0, 1, 0, 1, 0, 1, 0, 1};
    tg_attn_masks tm = {0}, mm = {0}, sm = {0};
    tm.causal = true;
    tm.key_padding_mask = mask_of(ctx, TG_F64, TG_DIMS(B, T), tpad, "tpad");
    mm.key_padding_mask = mask_of(ctx, TG_F64, TG_DIMS(B, S), mpad, "mpad");
    mm.attn_mask = mask_of(ctx, TG_F64, TG_DIMS(T, S), mmask, "mmask"); /* row 1 blocked */
    mm.attn_mask_kind = TG_MASK_BLOCK;
    if (model) {
        tg_encoder_decoder m;
        ck_assert_int_eq(tg_encoder_decoder_init(ctx, &m, TG_F64, &c, 2, 2, NULL), TG_OK);
        tg_tensor *src = tu_input(ctx, TG_F64, TG_DIMS(B, S, 8), "src", -1, 1);
        tg_tensor *tgt = tu_input(ctx, TG_F64, TG_DIMS(B, T, 8), "tgt", -1, 1);
        static const int spad[] = {0, 0, 0, 0, 1, 1, 0, 0, 0, 0, 0, 1};
        sm.key_padding_mask = mask_of(ctx, TG_F64, TG_DIMS(B, S), spad, "spad");
        mm.key_padding_mask = sm.key_padding_mask;
        b.y = tg_encoder_decoder_forward(ctx, &m, src, tgt, &sm, &tm, &mm);
        b.leaves[0] = src;
        b.leaves[1] = tgt;
        b.n_leaves = 2;
    } else {
        tg_decoder_layer l;
        ck_assert_int_eq(tg_decoder_layer_init(ctx, &l, TG_F64, &c, NULL), TG_OK);
        tg_fill_uniform(l.multihead_attn.in_proj_bias, -0.5, 0.5);
        tg_fill_uniform(l.multihead_attn.out_proj_bias, -0.5, 0.5);
        tg_tensor *x = tu_input(ctx, TG_F64, TG_DIMS(B, T, 8), "x", -1, 1);
        tg_tensor *mem = tu_input(ctx, TG_F64, TG_DIMS(B, S, 8), "memory", -1, 1);
        b.y = tg_decoder_layer_forward(ctx, &l, x, mem, &tm, &mm);
        b.leaves[0] = x;
        b.leaves[1] = mem;
        b.n_leaves = 2;
    }
    ck_assert_msg(b.y != NULL, "%s", tg_ctx_message(ctx));
    tg_graph *g = tg_graph_new(ctx, &b.y, 1);
    ck_assert_ptr_nonnull(g);
    ck_assert_int_eq(tg_graph_forward(g), TG_OK);
    tg_tensor *dy = tg_const(ctx, TG_F64, tg_tensor_rank(b.y), tg_tensor_shape(b.y), "dy");
    for (int64_t i = 0; i < tg_tensor_numel(dy); i++)
        tg_set(dy, i, sin(0.37 * (double)i + 0.1));
    ck_assert_int_eq(tg_graph_backward(g, b.y, dy), TG_OK);
    return b;
}

static double max_diff(const tg_tensor *a, const tg_tensor *b, bool grad)
{
    double m = 0;
    ck_assert_int_eq(tg_tensor_numel(a), tg_tensor_numel(b));
    for (int64_t i = 0; i < tg_tensor_numel(a); i++) {
        double x = grad ? tg_grad_get(a, i) : tg_get(a, i);
        double y = grad ? tg_grad_get(b, i) : tg_get(b, i);
        ck_assert_msg(isfinite(x) && isfinite(y), "not finite at %lld", (long long)i);
        m = fmax(m, fabs(x - y));
    }
    return m;
}

START_TEST(test_fused_unfused)
{
    bool model = _i >= 2, pre = _i % 2;
    built f = build_fusion(true, model, pre), u = build_fusion(false, model, pre);
    ck_assert_int_eq(tg_ctx_n_params(f.ctx), tg_ctx_n_params(u.ctx));
    double e = max_diff(f.y, u.y, false);
    ck_assert_msg(e <= 1e-12, "output differs by %.3g", e);
    for (int i = 0; i < f.n_leaves; i++) {
        e = max_diff(f.leaves[i], u.leaves[i], true);
        ck_assert_msg(e <= 1e-12, "grad %s differs by %.3g", tg_tensor_name(f.leaves[i]), e);
    }
    for (int64_t i = 0; i < tg_ctx_n_params(f.ctx); i++) {
        e = max_diff(tg_ctx_param(f.ctx, i), tg_ctx_param(u.ctx, i), true);
        ck_assert_msg(e <= 1e-12, "grad %s differs by %.3g",
                      tg_tensor_name(tg_ctx_param(f.ctx, i)), e);
    }
    tu_ctx_free(f.ctx);
    tu_ctx_free(u.ctx);
}
END_TEST

/* Fully masked memory rows: every output finite; batch 1's memory is all padding, so its
 * output does not depend on memory at all and memory's gradient there is exactly 0 (the
 * cross-attention contributes out_proj.bias alone). */
START_TEST(test_masked_memory_rows)
{
    built b = build_fusion(_i == 0, false, true);
    const int64_t T = 5, S = 6, D = 8;
    for (int64_t i = 0; i < tg_tensor_numel(b.y); i++)
        ck_assert(isfinite(tg_get(b.y, i)));
    tg_tensor *mem = b.leaves[1];
    for (int64_t i = S * D; i < 2 * S * D; i++)
        ck_assert_msg(tg_grad_get(mem, i) == 0, "memory grad %lld", (long long)i);
    /* batch 0 reads memory (a row not blocked) */
    double s = 0;
    for (int64_t i = 0; i < S * D; i++)
        s += fabs(tg_grad_get(mem, i));
    ck_assert(s > 0);
    (void)T;
    tu_ctx_free(b.ctx);
}
END_TEST

/* ---- threads ----------------------------------------------------------------------------- */

static tg_tensor *dec_threads_build(tg_ctx *ctx, tg_dtype dt)
{
    int64_t B = tu_big(4, 2), T = tu_big(24, 6), S = tu_big(32, 7), D = tu_big(64, 16);
    tg_decoder_config c = tg_encoder_config_default(D, 4);
    c.d_ff = 2 * D;
    c.norm_first = true;
    c.activation = TG_ACT_GELU;
    tg_decoder_layer l;
    if (tg_decoder_layer_init(ctx, &l, dt, &c, NULL) != TG_OK)
        return NULL;
    tg_attn_masks tm = {0}, mm = {0};
    tm.causal = true;
    tg_tensor *pad = tg_const(ctx, dt, TG_DIMS(B, S), "pad");
    for (int64_t i = 0; i < B * S; i++)
        tg_set(pad, i, (i % S) >= S - 1 - (i / S)); /* batch b pads its last b + 1 keys */
    mm.key_padding_mask = pad;
    return tg_decoder_layer_forward(ctx, &l, tu_input(ctx, dt, TG_DIMS(B, T, D), "x", -1, 1),
                                    tu_input(ctx, dt, TG_DIMS(B, S, D), "memory", -1, 1), &tm,
                                    &mm);
}

START_TEST(test_threads_decoder)
{
    tu_assert_thread_invariant(dec_threads_build, tu_dtypes[_i]);
}
END_TEST

/* ---- errors ------------------------------------------------------------------------------ */

START_TEST(test_errors)
{
    tg_ctx *ctx = tu_ctx_new();
    tg_decoder_config c = small_cfg(false, TG_ACT_RELU);
    tg_decoder_layer l;
    ck_assert_int_eq(tg_decoder_layer_init(ctx, &l, TG_F32, &c, NULL), TG_OK);
    tg_tensor *x = tu_input(ctx, TG_F32, TG_DIMS(2, 3, 8), "x", -1, 1);
    tg_tensor *mem = tu_input(ctx, TG_F32, TG_DIMS(2, 4, 8), "memory", -1, 1);
    tg_tensor *narrow_mem = tu_input(ctx, TG_F32, TG_DIMS(2, 4, 6), "m6", -1, 1);
    tg_tensor *mem3 = tu_input(ctx, TG_F32, TG_DIMS(3, 4, 8), "m3", -1, 1);
    struct {
        tg_tensor *x, *mem;
        tg_attn_masks tm, mm;
        tg_status st;
        const char *needle;
    } cases[] = {
        {x, narrow_mem, {0}, {0}, TG_ERR_SHAPE,
         "need x (B, T, 8) and memory (B, S, 8) with the same batch B; got x (2, 3, 8), "
         "memory (2, 4, 6)"},
        {x, mem3, {0}, {0}, TG_ERR_SHAPE, "memory (3, 4, 8)"},
        {mem, x, {0}, {0}, TG_OK, NULL}, /* T = 4, S = 3: fine */
        {x, mem, {0}, {.causal = true}, TG_ERR_ARG, "memory_masks.causal"},
        {x, mem, {.attn_mask = mask_of(ctx, TG_F32, TG_DIMS(3, 4), NULL, "a")}, {0},
         TG_ERR_SHAPE, "tgt_mask (3, 4) must be (T_q, T_k) = (3, 3) or (B, T_q, T_k) = (2, 3, 3)"},
        {x, mem, {0}, {.attn_mask = mask_of(ctx, TG_F32, TG_DIMS(3, 3), NULL, "b")},
         TG_ERR_SHAPE, "memory_mask (3, 3) must be (T_q, T_k) = (3, 4)"},
        {x, mem, {.key_padding_mask = mask_of(ctx, TG_F32, TG_DIMS(2, 4), NULL, "c")}, {0},
         TG_ERR_SHAPE, "tgt_key_padding_mask (2, 4) must be (B, T_k) = (2, 3)"},
        {x, mem, {0}, {.key_padding_mask = mask_of(ctx, TG_F32, TG_DIMS(2, 3), NULL, "d")},
         TG_ERR_SHAPE, "memory_key_padding_mask (2, 3) must be (B, T_k) = (2, 4)"},
        {x, mem, {0}, {.key_padding_mask = mask_of(ctx, TG_F32, TG_DIMS(3, 4), NULL, "e")},
         TG_ERR_SHAPE, "memory_key_padding_mask (3, 4)"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        tg_tensor *y = tg_decoder_layer_forward(ctx, &l, cases[i].x, cases[i].mem, &cases[i].tm,
                                                &cases[i].mm);
        if (cases[i].st == TG_OK) {
            ck_assert_msg(y != NULL, "case %zu: %s", i, tg_ctx_message(ctx));
            continue;
        }
        ck_assert_msg(y == NULL, "case %zu built", i);
        tu_assert_error(ctx, cases[i].st, cases[i].needle);
        tg_ctx_clear_error(ctx);
    }
    /* a NULL input is passed through without a new error */
    ck_assert_ptr_null(tg_decoder_layer_forward(ctx, &l, x, NULL, NULL, NULL));
    ck_assert_int_eq(tg_ctx_status(ctx), TG_OK);
    /* uninitialised modules */
    tg_decoder_layer z;
    memset(&z, 0, sizeof z);
    ck_assert_ptr_null(tg_decoder_layer_forward(ctx, &z, x, mem, NULL, NULL));
    tu_assert_error(ctx, TG_ERR_ARG, "not initialised");
    tg_ctx_clear_error(ctx);
    tg_decoder zd;
    memset(&zd, 0, sizeof zd);
    ck_assert_ptr_null(tg_decoder_forward(ctx, &zd, x, mem, NULL, NULL));
    tu_assert_error(ctx, TG_ERR_ARG, "tg_decoder_forward: stack is NULL or not initialised");
    tg_ctx_clear_error(ctx);
    /* the stacks propagate the layer's errors */
    tg_decoder d;
    ck_assert_int_eq(tg_decoder_init(ctx, &d, TG_F32, &c, 2, true, "dec."), TG_OK);
    ck_assert_ptr_null(tg_decoder_forward(ctx, &d, x, narrow_mem, NULL, NULL));
    tu_assert_error(ctx, TG_ERR_SHAPE, "tg_decoder_layer_forward");
    tg_ctx_clear_error(ctx);
    tu_ctx_free(ctx);

    /* bad configs and layer counts: nothing allocated */
    ctx = tu_ctx_new();
    tg_decoder_config bad = c;
    bad.n_heads = 3;
    ck_assert_int_eq(tg_decoder_layer_init(ctx, &l, TG_F32, &bad, NULL), TG_ERR_ARG);
    tu_assert_error(ctx, TG_ERR_ARG, "tg_decoder_layer_init: bad config");
    ck_assert_int_eq(tg_ctx_n_params(ctx), 0);
    tg_ctx_clear_error(ctx);
    ck_assert_int_eq(tg_decoder_init(ctx, &d, TG_F32, &c, 0, true, NULL), TG_ERR_ARG);
    tu_assert_error(ctx, TG_ERR_ARG, "n_layers 0 must be from 1 to 65536");
    tg_ctx_clear_error(ctx);
    tg_encoder e;
    ck_assert_int_eq(tg_encoder_init(ctx, &e, TG_F32, &c, TG_NN_MAX_LAYERS + 1, false, NULL),
                     TG_ERR_ARG);
    tg_ctx_clear_error(ctx);
    tg_encoder_decoder m;
    ck_assert_int_eq(tg_encoder_decoder_init(ctx, &m, TG_F32, &c, 2, -1, NULL), TG_ERR_ARG);
    tu_assert_error(ctx, TG_ERR_ARG, "n_decoder_layers -1");
    tg_ctx_clear_error(ctx);
    ck_assert_int_eq(tg_ctx_n_params(ctx), 0);
    /* a memory limit refuses a too-large model before allocating anything */
    tg_ctx_set_memory_limit(ctx, 4096);
    ck_assert_int_eq(tg_encoder_decoder_init(ctx, &m, TG_F32, &c, 2, 2, NULL), TG_ERR_NOMEM);
    ck_assert_int_eq(tg_ctx_n_params(ctx), 0);
    tu_ctx_free(ctx);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("decoder");
    TCase *tc = tcase_create("decoder");
    tcase_add_checked_fixture(tc, NULL, tu_ctx_teardown);
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_state_dict_names);
    tcase_add_test(tc, test_seq2seq_model);
    tcase_add_loop_test(tc, test_fused_unfused, 0, 4);
    tcase_add_loop_test(tc, test_masked_memory_rows, 0, 2);
    tcase_add_loop_test(tc, test_threads_decoder, 0, 2);
    tcase_add_test(tc, test_errors);
    suite_add_tcase(s, tc);
    return tu_run(s);
}
