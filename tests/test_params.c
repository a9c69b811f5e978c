/*
 * test_params.c - tg_transformer_params: the parameter list of a transformer config equals,
 * name by name and shape by shape and in order, the tensors tg_transformer_init creates;
 * tg_checkpoint_check: a checkpoint's tensors against a config, dtype and optimizer;
 * tg_transformer_meta: a config as checkpoint metadata, read back by tg_model_load and by
 * tg_transformer_meta_read.
 */
#include "testutil.h"

#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tgrad_model.h"
#include "tgrad_train.h"

/* Loop index -> a config: arch (encoder, decoder-only LM, seq2seq) x tied x positions x norm
 * placement (24 configs), small sizes. */
static tg_transformer_config config_of(int i)
{
    tg_transformer_config c;
    memset(&c, 0, sizeof c);
    int arch = i % 3;
    c.vocab_size = 7;
    c.max_seq_len = 6;
    c.n_layers = 2;
    c.layer = tg_encoder_config_default(8, 2);
    c.layer.d_ff = 12;
    c.layer.norm_first = (i / 12) % 2;
    c.causal = arch == 1;
    c.n_decoder_layers = arch == 2 ? 3 : 0;
    c.tie_weights = (i / 3) % 2;
    c.pos = (i / 6) % 2 ? TG_POS_SINUSOIDAL : TG_POS_LEARNED;
    c.scale_embeddings = arch == 2 && c.tie_weights;
    return c;
}

/* tg_transformer_params(c) is what tg_transformer_init(c) created after @p first params. */
static void assert_list_matches(tg_ctx *ctx, const tg_transformer_config *c, int64_t first)
{
    int64_t n = tg_transformer_params(c, NULL, 0);
    ck_assert_int_eq(n, tg_ctx_n_params(ctx) - first);
    tg_param_info *ps = calloc((size_t)n, sizeof *ps);
    ck_assert_ptr_nonnull(ps);
    ck_assert_int_eq(tg_transformer_params(c, ps, n), n);
    for (int64_t i = 0; i < n; i++) {
        const tg_tensor *t = tg_ctx_param(ctx, first + i);
        ck_assert_str_eq(ps[i].name, tg_tensor_name(t));
        ck_assert_int_eq(ps[i].rank, tg_tensor_rank(t));
        ck_assert_int_eq(ps[i].shape[0], tg_tensor_shape(t)[0]);
        if (ps[i].rank == 2)
            ck_assert_int_eq(ps[i].shape[1], tg_tensor_shape(t)[1]);
        else
            ck_assert_int_eq(ps[i].shape[1], 0);
    }
    free(ps);
}

START_TEST(test_list_is_init)
{
    tg_transformer_config c = config_of(_i);
    tg_ctx *ctx = tu_ctx_new();
    /* a parameter before the model: the list starts where the model's parameters start */
    ck_assert_ptr_nonnull(tg_param(ctx, TG_F32, TG_DIMS(3), "other"));
    tg_transformer m;
    ck_assert_msg(tg_transformer_init(ctx, &m, TG_F32, &c) == TG_OK, "%s", tg_ctx_message(ctx));
    assert_list_matches(ctx, &c, 1);
    /* the count by the formula of the header */
    int64_t want = 4 + 12 * c.n_layers + (c.pos == TG_POS_LEARNED) + !c.tie_weights +
                   (c.n_decoder_layers > 0 ? 2 + 18 * c.n_decoder_layers : 0);
    ck_assert_int_eq(tg_transformer_params(&c, NULL, 0), want);
}
END_TEST

/* A few named entries, by hand: positions, the head, a decoder layer's cross-attention. */
START_TEST(test_named_entries)
{
    tg_transformer_config c = config_of(2); /* seq2seq, untied, learned */
    tg_param_info ps[96];
    int64_t n = tg_transformer_params(&c, ps, 96);
    ck_assert_int_eq(n, 4 + 24 + 1 + 1 + 2 + 54);
    ck_assert_str_eq(ps[0].name, "tok_emb.weight");
    ck_assert_int_eq(ps[0].shape[0], 7);
    ck_assert_int_eq(ps[0].shape[1], 8);
    ck_assert_str_eq(ps[1].name, "pos_emb.weight");
    ck_assert_int_eq(ps[1].shape[0], 6);
    ck_assert_str_eq(ps[2].name, "encoder.layers.0.self_attn.in_proj_weight");
    ck_assert_int_eq(ps[2].shape[0], 24);
    ck_assert_str_eq(ps[2 + 24].name, "encoder.norm.weight");
    ck_assert_str_eq(ps[2 + 24 + 2 + 18 + 6].name,
                     "decoder.layers.1.multihead_attn.out_proj.weight");
    ck_assert_str_eq(ps[2 + 24 + 2 + 18 + 10].name, "decoder.layers.1.linear2.weight");
    ck_assert_int_eq(ps[2 + 24 + 2 + 18 + 10].shape[0], 8);
    ck_assert_int_eq(ps[2 + 24 + 2 + 18 + 10].shape[1], 12);
    ck_assert_str_eq(ps[n - 3].name, "decoder.norm.bias");
    ck_assert_str_eq(ps[n - 2].name, "head.weight");
    ck_assert_str_eq(ps[n - 1].name, "head.bias");
    ck_assert_int_eq(ps[n - 1].rank, 1);
    ck_assert_int_eq(ps[n - 1].shape[0], 7);
    /* decoder-only, no layers, tied, sinusoidal: the embedding, the final norm and the bias */
    tg_transformer_config z = config_of(4);
    z.n_layers = 0;
    z.pos = TG_POS_SINUSOIDAL;
    ck_assert_int_eq(tg_transformer_params(&z, ps, 96), 4);
    ck_assert_str_eq(ps[1].name, "norm.weight");
    ck_assert_str_eq(ps[2].name, "norm.bias");
    ck_assert_str_eq(ps[3].name, "head.bias");
    tg_ctx *ctx = tu_ctx_new();
    tg_transformer m;
    ck_assert_int_eq(tg_transformer_init(ctx, &m, TG_F64, &z), TG_OK);
    assert_list_matches(ctx, &z, 0);
}
END_TEST

/* out NULL counts; cap limits what is written; a config without a list is -1. */
START_TEST(test_cap_and_errors)
{
    tg_transformer_config c = config_of(0);
    int64_t n = tg_transformer_params(&c, NULL, 0);
    ck_assert_int_eq(n, 4 + 24 + 1 + 1);
    tg_param_info ps[4];
    memset(ps, 0x5a, sizeof ps);
    ck_assert_int_eq(tg_transformer_params(&c, ps, 3), n);
    ck_assert_str_eq(ps[2].name, "layers.0.self_attn.in_proj_weight");
    ck_assert_int_eq((unsigned char)ps[3].name[0], 0x5a); /* beyond cap: untouched */
    ck_assert_int_eq(tg_transformer_params(&c, ps, 0), n);
    ck_assert_int_eq(tg_transformer_params(NULL, ps, 4), -1);
    tg_transformer_config b = c;
    b.n_layers = -1;
    ck_assert_int_eq(tg_transformer_params(&b, ps, 4), -1);
    b = c;
    b.n_decoder_layers = TG_TRANSFORMER_MAX_LAYERS + 1;
    ck_assert_int_eq(tg_transformer_params(&b, ps, 4), -1);
    b = c;
    b.layer.d_model = INT64_MAX / 2;
    ck_assert_int_eq(tg_transformer_params(&b, ps, 4), -1);
    /* the largest: names fit TG_NAME_MAX */
    b = c;
    b.n_layers = b.n_decoder_layers = TG_TRANSFORMER_MAX_LAYERS;
    ck_assert_int_eq(tg_transformer_params(&b, NULL, 0),
                     6 + 30 * (int64_t)TG_TRANSFORMER_MAX_LAYERS + 2);
}
END_TEST

/* tg_checkpoint_check(ctx, st, cfg, dt, optim) is @p want, its message containing @p needle. */
static void check_is(tg_ctx *ctx, const tg_safetensors *st, const tg_transformer_config *c,
                     tg_dtype dt, const tg_optim_config *oc, tg_status want, const char *needle)
{
    tg_status s = tg_checkpoint_check(ctx, st, c, dt, oc);
    ck_assert_msg(s == want, "status %s, want %s: %s", tg_status_str(s), tg_status_str(want),
                  tg_ctx_message(ctx));
    if (needle)
        ck_assert_msg(strstr(tg_ctx_message(ctx), needle), "'%s' lacks '%s'",
                      tg_ctx_message(ctx), needle);
    tg_ctx_clear_error(ctx);
}

/* A saved checkpoint (an encoder, untied, learned positions, Adam state) against its own
 * config, other configs, dtypes and optimizers: today's messages of tgrad's validation. */
START_TEST(test_checkpoint_check)
{
    char dir[256], path[512];
    tu_mkdtemp(dir, sizeof dir, "params");
    tu_path(path, sizeof path, dir, "ck.safetensors");
    tg_transformer_config c = config_of(0);
    tg_ctx *ctx = tu_ctx_new();
    tg_transformer m;
    ck_assert_int_eq(tg_transformer_init(ctx, &m, TG_F32, &c), TG_OK);
    tg_optim_config adam = tg_optim_defaults(TG_OPTIM_ADAM);
    tg_optim *opt = tg_optim_new(ctx, &adam, 0, NULL);
    ck_assert_ptr_nonnull(opt);
    ck_assert_int_eq(tg_checkpoint_save(ctx, path, opt, 0, NULL, NULL, NULL), TG_OK);
    tg_ctx *rc = tu_ctx_new(); /* the file read in another context */
    tg_safetensors *st = tg_safetensors_read(rc, path);
    ck_assert_ptr_nonnull(st);
    check_is(ctx, st, &c, TG_F32, &adam, TG_OK, NULL);
    check_is(ctx, st, &c, TG_F32, NULL, TG_OK, NULL);
    tg_optim_config adamw = tg_optim_defaults(TG_OPTIM_ADAMW);
    check_is(ctx, st, &c, TG_F32, &adamw, TG_OK, NULL); /* the same state names */
    /* other optimizers */
    tg_optim_config sgd = tg_optim_defaults(TG_OPTIM_SGD);
    check_is(ctx, st, &c, TG_F32, &sgd, TG_ERR_MISMATCH,
             "optimizer state 'adam.m.tok_emb.weight' is Adam/AdamW state, which the optimizer "
             "restored into (sgd with momentum 0) does not keep");
    sgd.momentum = 0.9;
    check_is(ctx, st, &c, TG_F32, &sgd, TG_ERR_MISMATCH,
             "tg_checkpoint_check: optimizer state 'adam.m.tok_emb.weight' is Adam/AdamW state, "
             "which the optimizer restored into (sgd) does not keep");
    /* the dtype */
    check_is(ctx, st, &c, TG_F64, NULL, TG_ERR_MISMATCH,
             "tensor 'tok_emb.weight' is F32 in the file, but model.dtype is f64");
    /* other configs: a missing, a stray, a misshapen parameter */
    tg_transformer_config o = c;
    o.n_layers = 3;
    check_is(ctx, st, &o, TG_F32, NULL, TG_ERR_MISMATCH,
             "the file lacks tensor 'layers.2.self_attn.in_proj_weight' (24, 8) that "
             "model.layers 3, model.d_model 8 and model.d_ff 12 need");
    o.n_layers = 1;
    check_is(ctx, st, &o, TG_F32, NULL, TG_ERR_MISMATCH,
             "the file has tensor 'layers.1.self_attn.in_proj_weight' but model.layers is 1");
    o = c;
    o.layer.d_ff = 16;
    check_is(ctx, st, &o, TG_F32, NULL, TG_ERR_MISMATCH,
             "tensor 'layers.0.linear1.weight' is (12, 8) in the file, but model.layers 2, "
             "model.d_model 8 and model.d_ff 16 need (16, 8)");
    o = c;
    o.pos = TG_POS_SINUSOIDAL;
    check_is(ctx, st, &o, TG_F32, NULL, TG_ERR_MISMATCH,
             "the file has tensor 'pos_emb.weight' but model.pos is sinusoidal");
    o = c;
    o.tie_weights = true;
    check_is(ctx, st, &o, TG_F32, NULL, TG_ERR_MISMATCH,
             "the file has tensor 'head.weight' but model.tie_weights is 1");
    o = c;
    o.vocab_size = 9;
    check_is(ctx, st, &o, TG_F32, NULL, TG_ERR_MISMATCH,
             "tensor 'tok_emb.weight' is (7, 8) in the file, but model.vocab_size 9 and "
             "model.d_model 8 need (9, 8)");
    /* bad arguments */
    check_is(ctx, NULL, &c, TG_F32, NULL, TG_ERR_ARG, "the checkpoint is NULL");
    check_is(ctx, st, NULL, TG_F32, NULL, TG_ERR_ARG, "the config");
    check_is(ctx, st, &c, TG_I32, NULL, TG_ERR_ARG, "dtype");
    ck_assert_int_eq(tg_checkpoint_check(NULL, st, &c, TG_F32, NULL), TG_ERR_ARG);

    /* saved without optimizer state: Adam's is missing, SGD without momentum has none */
    ck_assert_int_eq(tg_checkpoint_save(ctx, path, NULL, 0, NULL, NULL, NULL), TG_OK);
    tg_safetensors *st2 = tg_safetensors_read(rc, path);
    ck_assert_ptr_nonnull(st2);
    check_is(ctx, st2, &c, TG_F32, &adam, TG_ERR_MISMATCH,
             "the file lacks optimizer state 'adam.m.tok_emb.weight' that the optimizer "
             "restored into (adam) keeps for every parameter (a training checkpoint holds it; "
             "'tgrad train --resume' restores it)");
    check_is(ctx, st2, &c, TG_F32, &sgd, TG_ERR_MISMATCH,
             "the file lacks optimizer state 'sgd.momentum.tok_emb.weight'");
    sgd.momentum = 0;
    check_is(ctx, st2, &c, TG_F32, &sgd, TG_OK, NULL);
    /* the check leaves no pending build error: the context still builds */
    ck_assert_ptr_nonnull(tg_param(ctx, TG_F32, TG_DIMS(2), "after"));
    tu_rm_tree(dir);
}
END_TEST

/* The value of @p key among @p kv (n), or NULL. */
static const char *kv_get(const tg_meta_kv *kv, int n, const char *key)
{
    for (int i = 0; i < n; i++)
        if (!strcmp(kv[i].key, key))
            return kv[i].value;
    return NULL;
}

/* tg_transformer_meta: the keys in order, their values, the shortest dropout, refusals. */
START_TEST(test_meta_writer)
{
    tg_meta_kv kv[TG_TRANSFORMER_META_MAX];
    tg_transformer_config c = config_of(1); /* decoder-only LM, untied, learned, post-norm */
    c.layer.dropout = 0.1;
    c.layer.activation = TG_ACT_GELU;
    int n = tg_transformer_meta(&c, TG_F64, kv);
    static const char *const keys[] = {
        "model.arch", "model.layers", "model.d_model", "model.heads", "model.d_ff",
        "model.seq_len", "model.vocab_size", "model.norm_first", "model.activation", "model.pos",
        "model.causal", "model.tie_weights", "model.dropout", "model.dtype"};
    static const char *const vals[] = {"lm", "2", "8", "2", "12", "6", "7", "0", "gelu",
                                       "learned", "1", "0", "0.1", "f64"};
    ck_assert_int_eq(n, 14);
    for (int i = 0; i < n; i++) {
        ck_assert_str_eq(kv[i].key, keys[i]);
        ck_assert_str_eq(kv[i].value, vals[i]);
    }
    c.layer.dropout = 1.0 / 3;
    tg_transformer_meta(&c, TG_F32, kv);
    ck_assert_str_eq(kv_get(kv, n, "model.dropout"), "0.3333333333333333");
    ck_assert_str_eq(kv_get(kv, n, "model.dtype"), "f32");
    /* the encoder; the encoder-decoder with its decoder layers and the embedding scale */
    c = config_of(0);
    n = tg_transformer_meta(&c, TG_F32, kv);
    ck_assert_str_eq(kv_get(kv, n, "model.arch"), "encoder");
    ck_assert_str_eq(kv_get(kv, n, "model.causal"), "0");
    ck_assert_ptr_null(kv_get(kv, n, "model.decoder_layers"));
    ck_assert_ptr_null(kv_get(kv, n, "model.scale_embeddings"));
    c = config_of(2); /* seq2seq, unscaled: no model.scale_embeddings (absent is 0) */
    n = tg_transformer_meta(&c, TG_F32, kv);
    ck_assert_int_eq(n, 15);
    ck_assert_ptr_null(kv_get(kv, n, "model.scale_embeddings"));
    c = config_of(5); /* seq2seq, tied, learned: scaled */
    c.pos = TG_POS_SINUSOIDAL;
    n = tg_transformer_meta(&c, TG_F32, kv);
    ck_assert_int_eq(n, 16);
    ck_assert_str_eq(kv[0].value, "seq2seq");
    ck_assert_str_eq(kv[2].key, "model.decoder_layers");
    ck_assert_str_eq(kv[2].value, "3");
    ck_assert_str_eq(kv_get(kv, n, "model.pos"), "sinusoidal");
    ck_assert_str_eq(kv_get(kv, n, "model.tie_weights"), "1");
    ck_assert_str_eq(kv[n - 1].key, "model.scale_embeddings");
    ck_assert_str_eq(kv[n - 1].value, "1");
    /* refused */
    ck_assert_int_eq(tg_transformer_meta(NULL, TG_F32, kv), -1);
    ck_assert_int_eq(tg_transformer_meta(&c, TG_F32, NULL), -1);
    ck_assert_int_eq(tg_transformer_meta(&c, TG_I32, kv), -1);
    c.n_layers = -1;
    ck_assert_int_eq(tg_transformer_meta(&c, TG_F32, kv), -1);
}
END_TEST

/* What the writer writes, tg_model_load reads back as the same config. */
START_TEST(test_meta_round_trip)
{
    char dir[256], path[512];
    tu_mkdtemp(dir, sizeof dir, "params");
    tu_path(path, sizeof path, dir, "ck.safetensors");
    for (int i = 0; i < 2; i++) {
        tg_transformer_config c = config_of(i ? 2 : 0); /* a task's encoder, its seq2seq */
        c.vocab_size = i ? 11 : 10;                     /* the digits (and BOS) */
        c.layer.dropout = 0.3;
        tg_ctx *ctx = tu_ctx_new();
        tg_transformer m;
        ck_assert_int_eq(tg_transformer_init(ctx, &m, TG_F64, &c), TG_OK);
        tg_meta_kv kv[TG_TRANSFORMER_META_MAX];
        int n = tg_transformer_meta(&c, TG_F64, kv);
        ck_assert_int_gt(n, 0);
        const char *keys[TG_TRANSFORMER_META_MAX + 3], *vals[TG_TRANSFORMER_META_MAX + 3];
        keys[0] = "format";
        vals[0] = "tgrad-checkpoint-1";
        keys[1] = "data.mode";
        vals[1] = "task";
        keys[2] = "data.task";
        vals[2] = "sort";
        for (int k = 0; k < n; k++) {
            keys[3 + k] = kv[k].key;
            vals[3 + k] = kv[k].value;
        }
        ck_assert_int_eq(tg_checkpoint_save(ctx, path, NULL, n + 3, keys, vals, NULL), TG_OK);
        tg_ctx *lc = tu_ctx_new();
        tg_model *lm = tg_model_load(lc, path);
        ck_assert_msg(lm != NULL, "%s", tg_ctx_message(lc));
        const tg_transformer_config *r = &tg_model_get_info(lm)->config;
        ck_assert_int_eq(tg_model_get_info(lm)->dtype, TG_F64);
        ck_assert_int_eq(r->vocab_size, c.vocab_size);
        ck_assert_int_eq(r->max_seq_len, c.max_seq_len);
        ck_assert_int_eq(r->n_layers, c.n_layers);
        ck_assert_int_eq(r->n_decoder_layers, c.n_decoder_layers);
        ck_assert_int_eq(r->layer.d_model, c.layer.d_model);
        ck_assert_int_eq(r->layer.n_heads, c.layer.n_heads);
        ck_assert_int_eq(r->layer.d_ff, c.layer.d_ff);
        ck_assert_int_eq(r->layer.norm_first, c.layer.norm_first);
        ck_assert_int_eq(r->layer.activation, c.layer.activation);
        ck_assert_int_eq(r->pos, c.pos);
        ck_assert_int_eq(r->causal, c.causal);
        ck_assert_int_eq(r->tie_weights, c.tie_weights);
        ck_assert_int_eq(r->scale_embeddings, c.scale_embeddings);
    }
    tu_rm_tree(dir);
}
END_TEST

/* Scratch directory of the test that writes metadata files (made by the test). */
static char meta_dir[256];

/* A safetensors file with one tensor and @p n metadata pairs, written to meta_dir and read
 * back in @p ctx; its path in @p path. */
static tg_safetensors *meta_file(tg_ctx *ctx, int n, const char *const *keys,
                                 const char *const *vals, char *path, size_t pn)
{
    static int serial;
    char name[32];
    snprintf(name, sizeof name, "m%d.safetensors", serial++);
    tu_path(path, pn, meta_dir, name);
    const tg_tensor *x = tg_param(ctx, TG_F32, TG_DIMS(1), "x");
    const char *names[1] = {"x"};
    ck_assert_int_eq(tg_safetensors_write(ctx, path, 1, &x, names, n, keys, vals), TG_OK);
    return tg_safetensors_read(ctx, path);
}

/* tg_transformer_meta_read reads back what tg_transformer_meta writes, dropout included, with
 * or without data.mode; malformed and contradicting fields are refused with a message. */
START_TEST(test_meta_reader)
{
    tg_ctx *ctx = tu_ctx_new();
    char path[512];
    tu_mkdtemp(meta_dir, sizeof meta_dir, "params");
    for (int i = 0; i < 24; i++) {
        tg_transformer_config c = config_of(i), r;
        c.layer.dropout = i % 2 ? 0.1 : 0;
        c.layer.activation = i % 4 < 2 ? TG_ACT_RELU : TG_ACT_GELU;
        tg_meta_kv kv[TG_TRANSFORMER_META_MAX];
        int n = tg_transformer_meta(&c, i % 5 ? TG_F32 : TG_F64, kv);
        const char *keys[TG_TRANSFORMER_META_MAX], *vals[TG_TRANSFORMER_META_MAX];
        for (int k = 0; k < n; k++) {
            keys[k] = kv[k].key;
            vals[k] = kv[k].value;
        }
        tg_safetensors *st = meta_file(ctx, n, keys, vals, path, sizeof path);
        ck_assert_ptr_nonnull(st);
        tg_dtype dt = TG_I32;
        ck_assert_msg(tg_transformer_meta_read(ctx, st, path, &r, &dt) == TG_OK, "%s",
                      tg_ctx_message(ctx));
        ck_assert_int_eq(dt, i % 5 ? TG_F32 : TG_F64);
        ck_assert_int_eq(r.vocab_size, c.vocab_size);
        ck_assert_int_eq(r.max_seq_len, c.max_seq_len);
        ck_assert_int_eq(r.n_layers, c.n_layers);
        ck_assert_int_eq(r.n_decoder_layers, c.n_decoder_layers);
        ck_assert_int_eq(r.layer.d_model, c.layer.d_model);
        ck_assert_int_eq(r.layer.n_heads, c.layer.n_heads);
        ck_assert_int_eq(r.layer.d_ff, c.layer.d_ff);
        ck_assert_int_eq(r.layer.norm_first, c.layer.norm_first);
        ck_assert_int_eq(r.layer.activation, c.layer.activation);
        ck_assert(r.layer.dropout == c.layer.dropout);
        ck_assert(r.layer.layer_norm_eps == c.layer.layer_norm_eps);
        ck_assert_int_eq(r.pos, c.pos);
        ck_assert_int_eq(r.causal, c.causal && !c.n_decoder_layers);
        ck_assert_int_eq(r.tie_weights, c.tie_weights);
        ck_assert_int_eq(r.scale_embeddings, c.scale_embeddings);
    }
    /* refusals: tg_model_load's messages, named by this function */
    const char *k1[] = {"model.layers", "model.d_model", "model.heads", "model.d_ff",
                        "model.seq_len", "model.vocab_size", "model.norm_first",
                        "model.activation", "model.pos", "model.dropout", "model.arch",
                        "data.mode"};
    const char *v1[] = {"2", "8", "2", "12", "6", "7", "1", "relu", "learned", "0.5", "lm",
                        "text"};
    tg_transformer_config r;
    memset(&r, 0x33, sizeof r);
    tg_transformer_config before = r;
    tg_safetensors *st = meta_file(ctx, 12, k1, v1, path, sizeof path);
    ck_assert_int_eq(tg_transformer_meta_read(ctx, st, "f", &r, NULL), TG_OK);
    ck_assert(r.causal && r.layer.dropout == 0.5);
    v1[10] = "encoder"; /* an encoder with data.mode text */
    st = meta_file(ctx, 12, k1, v1, path, sizeof path);
    r = before;
    ck_assert_int_eq(tg_transformer_meta_read(ctx, st, "f", &r, NULL), TG_ERR_FORMAT);
    tu_assert_error(ctx, TG_ERR_FORMAT, "tg_transformer_meta_read: f: metadata disagrees: "
                    "model.arch encoder but data.mode text");
    ck_assert(!memcmp(&r, &before, sizeof r)); /* untouched */
    tg_ctx_clear_error(ctx);
    v1[10] = "lm";
    v1[0] = "0";
    st = meta_file(ctx, 12, k1, v1, path, sizeof path);
    ck_assert_int_eq(tg_transformer_meta_read(ctx, st, "f", &r, NULL), TG_ERR_FORMAT);
    tu_assert_error(ctx, TG_ERR_FORMAT, "f: metadata 'model.layers' is '0' (expected an "
                    "integer from 1 to 65536)");
    tg_ctx_clear_error(ctx);
    v1[0] = "2";
    v1[9] = "1";
    st = meta_file(ctx, 12, k1, v1, path, sizeof path);
    ck_assert_int_eq(tg_transformer_meta_read(ctx, st, "f", &r, NULL), TG_ERR_FORMAT);
    tu_assert_error(ctx, TG_ERR_FORMAT, "metadata 'model.dropout' is '1'");
    tg_ctx_clear_error(ctx);
    /* no data.mode, no model.arch: model.causal decides */
    v1[9] = "0";
    const char *k2[] = {"model.layers", "model.d_model", "model.heads", "model.d_ff",
                        "model.seq_len", "model.vocab_size", "model.norm_first",
                        "model.activation", "model.pos", "model.causal"};
    st = meta_file(ctx, 10, k2, v1, path, sizeof path);
    ck_assert_int_eq(tg_transformer_meta_read(ctx, st, NULL, &r, NULL), TG_OK);
    ck_assert(!r.causal && r.n_decoder_layers == 0);
    /* seq2seq needs its decoder layers */
    const char *k3[] = {"model.layers", "model.d_model", "model.heads", "model.d_ff",
                        "model.seq_len", "model.vocab_size", "model.norm_first",
                        "model.activation", "model.pos", "model.arch"};
    const char *v3[] = {"2", "8", "2", "12", "6", "7", "1", "relu", "learned", "seq2seq"};
    st = meta_file(ctx, 10, k3, v3, path, sizeof path);
    ck_assert_int_eq(tg_transformer_meta_read(ctx, st, NULL, &r, NULL), TG_ERR_FORMAT);
    tu_assert_error(ctx, TG_ERR_FORMAT, "<memory>: not a complete tgrad checkpoint: metadata "
                    "'model.decoder_layers' is missing");
    tg_ctx_clear_error(ctx);
    ck_assert_int_eq(tg_transformer_meta_read(ctx, NULL, NULL, &r, NULL), TG_ERR_ARG);
    tg_ctx_clear_error(ctx);
    ck_assert_int_eq(tg_transformer_meta_read(ctx, st, NULL, NULL, NULL), TG_ERR_ARG);
    ck_assert_int_eq(tg_transformer_meta_read(NULL, st, NULL, &r, NULL), TG_ERR_ARG);
    tu_rm_tree(meta_dir);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("params");
    TCase *tc = tcase_create("params");
    tcase_add_checked_fixture(tc, NULL, tu_ctx_teardown);
    tcase_set_timeout(tc, 60);
    tcase_add_loop_test(tc, test_list_is_init, 0, 24);
    tcase_add_test(tc, test_named_entries);
    tcase_add_test(tc, test_cap_and_errors);
    tcase_add_test(tc, test_checkpoint_check);
    tcase_add_test(tc, test_meta_writer);
    tcase_add_test(tc, test_meta_round_trip);
    tcase_add_test(tc, test_meta_reader);
    suite_add_tcase(s, tc);
    return tu_run(s);
}
