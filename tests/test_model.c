#define _POSIX_C_SOURCE 200809L
/*
 * test_model.c - tg_model_load (tgrad_model.h): a ready model from any file tgrad writes.
 * - the committed fixtures (tests/fixtures/export_<case>.ckpt and .safetensors, an LM and a
 *   task encoder; see test_export.c): the checkpoint (with its Adam state) and the export each
 *   load in one call and reproduce the PyTorch reference model's logits;
 * - checkpoints written now by `tgrad train`: a seq2seq model (BOS, set_source), a tied,
 *   sinusoidal LM trained with SGD momentum (sgd.momentum.* skipped), and its export with a
 *   tied head.weight copy; the KV-cache generator of a loaded model matches a whole forward;
 * - the vocabulary: encode/decode, unknown bytes and BOS named;
 * - strict loading with tg_params_load() no longer fails on a checkpoint's optimizer state;
 * - hostile files: no format, fields that disagree, a config claiming more values than the
 *   file holds (refused before anything is allocated), stray tensors; the context then holds
 *   what it held before.
 */
#include "testutil.h"
#include "tgrad_model.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static char dir[256];

static void setup(void) { tu_mkdtemp(dir, sizeof dir, "model"); }
static void teardown(void) { tu_rm_tree(dir); }

static void fixture(char *p, size_t n, const char *c, const char *suffix)
{
    snprintf(p, n, "%s/%s%s", TG_FIXTURES, c, suffix);
}

static void run_ok(const char *args)
{
    int rc = tu_run_tgrad(dir, args, 120, NULL);
    if (rc != 0) {
        char *err = tu_slurp_in(dir, "err.txt", NULL);
        ck_abort_msg("tgrad %s: exit %d: %s", args, rc, err ? err : "");
    }
}

/* Logits of @p m on ids (B, T) from @p ids_ref, as a new graph's output. */
static tg_tensor *logits_of(tg_ctx *ctx, tg_model *m, const tg_tensor *ids_ref)
{
    int64_t B = tg_tensor_shape(ids_ref)[0], T = tg_tensor_shape(ids_ref)[1];
    tg_tensor *ids = tg_input(ctx, TG_I32, TG_DIMS(B, T), "ids");
    for (int64_t i = 0; i < B * T; i++)
        tg_set(ids, i, tg_get(ids_ref, i));
    tg_tensor *y = tg_transformer_forward(ctx, tg_model_transformer(m), ids, NULL);
    tg_graph_opts go = {.no_grad = true};
    tg_graph *g = y ? tg_graph_new_opts(ctx, &y, 1, &go) : NULL;
    ck_assert_msg(g != NULL, "%s", tg_ctx_message(ctx));
    tg_ctx_set_training(ctx, false);
    ck_assert_int_eq(tg_graph_forward(g), TG_OK);
    return y;
}

static double max_rel_diff(const tg_tensor *a, const tg_tensor *b)
{
    ck_assert_int_eq(tg_tensor_numel(a), tg_tensor_numel(b));
    double md = 0, mr = 0;
    for (int64_t i = 0; i < tg_tensor_numel(b); i++) {
        double d = fabs(tg_get(a, i) - tg_get(b, i));
        md = isnan(d) ? INFINITY : fmax(md, d);
        mr = fmax(mr, fabs(tg_get(b, i)));
    }
    return md / (1 + mr);
}

/* The fixtures: checkpoint and export each reproduce PyTorch's logits. */
START_TEST(test_fixtures_match_pytorch)
{
    static const char *const cases[2] = {"export_lm", "export_task"};
    const char *c = cases[_i / 2];
    bool export = _i % 2;
    char path[512], lg[512];
    fixture(path, sizeof path, c, export ? ".safetensors" : ".ckpt");
    fixture(lg, sizeof lg, c, "_logits.safetensors");
    tg_ctx *ctx = tg_ctx_new();
    tg_model *m = tg_model_load(ctx, path);
    ck_assert_msg(m != NULL, "%s: %s", path, tg_ctx_message(ctx));
    const tg_model_info *info = tg_model_get_info(m);
    ck_assert_int_eq(info->format, export ? TG_MODEL_EXPORT : TG_MODEL_CHECKPOINT);
    ck_assert_int_eq(info->kind, _i < 2 ? TG_MODEL_LM : TG_MODEL_ENCODER);
    ck_assert(info->config.causal == (_i < 2));
    ck_assert_int_eq(info->bos_id, -1);
    ck_assert_str_eq(info->task, _i < 2 ? "" : "reverse");
    ck_assert_int_gt(info->step, 0);
    ck_assert_int_eq(tg_model_vocab_size(m), info->config.vocab_size);
    if (_i >= 2) /* a task's ids are the digits */
        for (int32_t d = 0; d < 10; d++) {
            ck_assert_int_eq(tg_model_token_byte(m, d), '0' + d);
            ck_assert_int_eq(tg_model_byte_token(m, '0' + d), d);
        }
    /* the parameters are the context's, named as the file names them */
    ck_assert_int_eq(tg_model_n_params(m), tg_ctx_n_params(ctx));
    ck_assert_str_eq(tg_tensor_name(tg_model_param(m, 0)), "tok_emb.weight");
    ck_assert_ptr_null(tg_model_param(m, tg_model_n_params(m)));
    /* only the model stays: the file's tensors were released */
    size_t after_load = tg_ctx_bytes(ctx);
    tg_safetensors *ref = tg_safetensors_read(ctx, lg);
    ck_assert_ptr_nonnull(ref);
    tg_tensor *y = logits_of(ctx, m, tg_safetensors_find(ref, "ids"));
    double d = max_rel_diff(y, tg_safetensors_find(ref, "logits"));
    ck_assert_msg(d <= 1e-4, "%s: logits differ from PyTorch's by %.3g", path, d);
    double params = 0;
    for (int64_t i = 0; i < tg_model_n_params(m); i++)
        params += (double)tg_tensor_numel(tg_model_param(m, i)) * 4;
    ck_assert_msg((double)after_load < 2.5 * params + 65536, "%zu bytes for %g of parameters",
                  after_load, params);
    tg_ctx_free(ctx);
}
END_TEST

/* Input @p name of a logits fixture as an i32 (ids) or @p dt (a mask) input. */
static tg_tensor *fixture_input(tg_ctx *ctx, const tg_safetensors *ref, const char *name,
                                tg_dtype dt)
{
    tg_tensor *r = tg_safetensors_find(ref, name);
    ck_assert_msg(r != NULL, "the logits fixture lacks %s", name);
    tg_tensor *t = tg_input(ctx, dt, TG_DIMS(tg_tensor_shape(r)[0], tg_tensor_shape(r)[1]),
                            name);
    ck_assert_ptr_nonnull(t);
    for (int64_t i = 0; i < tg_tensor_numel(r); i++)
        tg_set(t, i, tg_get(r, i));
    return t;
}

/* The encoder-decoder fixtures: checkpoint and export each give the same model, which
 * reproduces PyTorch's logits (nn.Transformer, a padded source) and decodes alike. */
START_TEST(test_seq2seq_fixtures_match_pytorch)
{
    static const char *const cases[2] = {"export_seq2seq", "export_seq2seq_tied"};
    const char *c = cases[_i / 2];
    bool export = _i % 2;
    char path[512], lg[512];
    fixture(path, sizeof path, c, export ? ".safetensors" : ".ckpt");
    fixture(lg, sizeof lg, c, "_logits.safetensors");
    tg_ctx *ctx = tg_ctx_new();
    tg_model *m = tg_model_load(ctx, path);
    ck_assert_msg(m != NULL, "%s: %s", path, tg_ctx_message(ctx));
    const tg_model_info *info = tg_model_get_info(m);
    ck_assert_int_eq(info->format, export ? TG_MODEL_EXPORT : TG_MODEL_CHECKPOINT);
    ck_assert_int_eq(info->kind, TG_MODEL_SEQ2SEQ);
    ck_assert_int_eq(info->bos_id, 10);
    ck_assert_int_eq(info->config.n_decoder_layers, _i < 2 ? 2 : 1);
    ck_assert_int_eq(info->config.n_layers, _i < 2 ? 1 : 2);
    ck_assert_str_eq(info->task, _i < 2 ? "reverse" : "sort");
    ck_assert_int_eq(info->dtype, _i < 2 ? TG_F32 : TG_F64);
    ck_assert_int_eq(info->step, 20);
    ck_assert_int_eq(tg_model_token_byte(m, 10), -1);
    for (int32_t d = 0; d < 10; d++)
        ck_assert_int_eq(tg_model_token_byte(m, d), '0' + d);
    tg_safetensors *ref = tg_safetensors_read(ctx, lg);
    ck_assert_ptr_nonnull(ref);
    tg_dtype dt = info->dtype;
    tg_tensor *y = tg_transformer_forward_seq2seq(
        ctx, tg_model_transformer(m), fixture_input(ctx, ref, "src_ids", TG_I32),
        fixture_input(ctx, ref, "tgt_ids", TG_I32),
        fixture_input(ctx, ref, "src_key_padding_mask", dt), NULL);
    tg_graph_opts go = {.no_grad = true};
    tg_graph *g = y ? tg_graph_new_opts(ctx, &y, 1, &go) : NULL;
    ck_assert_msg(g != NULL, "%s", tg_ctx_message(ctx));
    tg_ctx_set_training(ctx, false);
    ck_assert_int_eq(tg_graph_forward(g), TG_OK);
    double d = max_rel_diff(y, tg_safetensors_find(ref, dt == TG_F64 ? "logits" : "logits_f32"));
    ck_assert_msg(d <= (dt == TG_F64 ? 1e-10 : 1e-5), "%s: logits differ from PyTorch's by %.3g",
                  path, d);
    tg_ctx_free(ctx);
}
END_TEST

/* tg_params_load() strict on a checkpoint: its adam.* tensors are skipped, not refused. */
START_TEST(test_params_load_skips_optimizer_state)
{
    char ck[512];
    fixture(ck, sizeof ck, "export_lm", ".ckpt");
    tg_ctx *ctx = tg_ctx_new();
    tg_model *m = tg_model_load(ctx, ck);
    ck_assert_ptr_nonnull(m);
    tg_ctx *c2 = tg_ctx_new();
    tg_transformer tf;
    ck_assert_int_eq(tg_transformer_init(c2, &tf, TG_F32, &tg_model_get_info(m)->config), TG_OK);
    ck_assert_msg(tg_params_load(c2, ck, 0, NULL, true) == TG_OK, "%s", tg_ctx_message(c2));
    for (int64_t i = 0; i < tg_ctx_n_params(c2); i++)
        ck_assert_double_eq(tu_max_abs_diff(tg_ctx_param(c2, i), tg_model_param(m, i)), 0);
    /* optimizer state of a parameter that is not loaded is still unexpected */
    tg_tensor *only = tg_ctx_param(c2, 0);
    ck_assert_int_eq(tg_params_load(c2, ck, 1, &only, true), TG_ERR_MISMATCH);
    tu_assert_error(c2, TG_ERR_MISMATCH, "unexpected tensor");
    tg_ctx_free(c2);
    tg_ctx_free(ctx);
}
END_TEST

/* Logits of the generator after feeding ids[0..n) equal the last row of a whole forward. */
static void check_generator(tg_ctx *ctx, tg_model *m, const int32_t *ids, int64_t n)
{
    tg_generator *gen = tg_model_generator(m, 1);
    ck_assert_msg(gen != NULL, "%s", tg_ctx_message(ctx));
    ck_assert_int_eq(tg_generator_feed(gen, ids, n), TG_OK);
    tg_tensor *ref = tg_input(ctx, TG_I32, TG_DIMS(1, n), "ref");
    for (int64_t i = 0; i < n; i++)
        tg_set(ref, i, ids[i]);
    tg_tensor *y = logits_of(ctx, m, ref);
    int64_t V = tg_model_vocab_size(m);
    tg_tensor *lg = tg_generator_logits(gen);
    for (int64_t v = 0; v < V; v++)
        ck_assert_double_eq_tol(tg_get(lg, v), tg_get(y, (n - 1) * V + v), 1e-4);
    tg_generator_free(gen);
}

/* A tied, sinusoidal LM trained with SGD momentum: checkpoint and export, vocabulary. */
START_TEST(test_lm_sgd_tied_sinusoidal)
{
    tu_write_corpus(dir, "c.txt", 400);
    run_ok("train --text c.txt --steps 3 --layers 1 --d-model 16 --heads 2 --d-ff 32 "
           "--seq-len 16 --batch 4 --tie-weights --pos sinusoidal --optimizer sgd "
           "--momentum 0.9 --eval-every 100 --checkpoint lm.ckpt");
    run_ok("export --checkpoint lm.ckpt --out lm.safetensors");
    char ck[512], ex[512];
    tg_ctx *ctx = tg_ctx_new();
    tg_model *a = tg_model_load(ctx, tu_path(ck, sizeof ck, dir, "lm.ckpt"));
    ck_assert_msg(a != NULL, "%s", tg_ctx_message(ctx));
    tg_model *b = tg_model_load(ctx, tu_path(ex, sizeof ex, dir, "lm.safetensors"));
    ck_assert_msg(b != NULL, "%s", tg_ctx_message(ctx));
    const tg_model_info *ia = tg_model_get_info(a), *ib = tg_model_get_info(b);
    ck_assert(ia->config.tie_weights && ib->config.tie_weights);
    ck_assert_int_eq(ia->config.pos, TG_POS_SINUSOIDAL);
    ck_assert_int_eq(ib->config.pos, TG_POS_SINUSOIDAL);
    ck_assert_int_eq(ia->step, 3);
    ck_assert_int_eq(ib->step, 3);
    ck_assert_int_eq(tg_model_n_params(a), tg_model_n_params(b));
    for (int64_t i = 0; i < tg_model_n_params(a); i++) {
        ck_assert_str_eq(tg_tensor_name(tg_model_param(a, i)), tg_tensor_name(tg_model_param(b, i)));
        ck_assert_double_eq(tu_max_abs_diff(tg_model_param(a, i), tg_model_param(b, i)), 0);
    }
    /* the vocabulary: the corpus's bytes, both ways */
    ck_assert_int_eq(tg_model_vocab_size(a), tg_model_vocab_size(b));
    for (int32_t i = 0; i < tg_model_vocab_size(a); i++)
        ck_assert_int_eq(tg_model_token_byte(a, i), tg_model_token_byte(b, i));
    const char *text = "the ";
    int32_t ids[8];
    char back[8];
    ck_assert_int_eq(tg_model_encode(a, text, 4, NULL, 0), 4);
    ck_assert_int_eq(tg_model_encode(a, text, 4, ids, 8), 4);
    ck_assert_int_eq(tg_model_decode(a, ids, 4, back), 4);
    ck_assert(memcmp(back, text, 4) == 0);
    ck_assert_int_eq(tg_model_encode(a, "th~", 3, ids, 8), -1);
    tu_assert_error(ctx, TG_ERR_ARG, "byte 0x7e '~' at offset 2 is not in the model's vocabulary");
    ck_assert_int_eq(tg_model_encode(a, text, 4, ids, 3), -1);
    tu_assert_error(ctx, TG_ERR_ARG, "do not fit");
    ck_assert_int_eq(tg_model_token_byte(a, -1), -1);
    ck_assert_int_eq(tg_model_token_byte(a, (int32_t)tg_model_vocab_size(a)), -1);
    tg_ctx_clear_error(ctx);
    ck_assert_int_eq(tg_model_encode(a, text, 4, ids, 8), 4);
    check_generator(ctx, a, ids, 4);
    tg_ctx_free(ctx);
    /* `tgrad sample` reads both through the same loader: the same text */
    run_ok("sample --checkpoint lm.ckpt --prompt 'the ' --tokens 30 --temperature 0");
    char *from_ckpt = tu_slurp_in(dir, "out.txt", NULL);
    run_ok("sample --checkpoint lm.safetensors --prompt 'the ' --tokens 30 --temperature 0");
    char *from_export = tu_slurp_in(dir, "out.txt", NULL);
    ck_assert_ptr_nonnull(from_ckpt);
    ck_assert_ptr_nonnull(from_export);
    ck_assert_int_eq((int)strlen(from_ckpt), 4 + 30 + 1);
    ck_assert_str_eq(from_ckpt, from_export);
    free(from_ckpt);
    free(from_export);
}
END_TEST

/* The encoder-decoder: BOS, set_source, greedy steps through the generator. */
START_TEST(test_seq2seq)
{
    run_ok("train --task reverse --arch seq2seq --steps 2 --layers 1 --decoder-layers 1 "
           "--d-model 16 --heads 2 --d-ff 32 --seq-len 6 --batch 4 --eval-every 100 --target-acc 0 "
           "--checkpoint s.ckpt");
    char ck[512];
    tg_ctx *ctx = tg_ctx_new();
    tg_model *m = tg_model_load(ctx, tu_path(ck, sizeof ck, dir, "s.ckpt"));
    ck_assert_msg(m != NULL, "%s", tg_ctx_message(ctx));
    const tg_model_info *info = tg_model_get_info(m);
    ck_assert_int_eq(info->kind, TG_MODEL_SEQ2SEQ);
    ck_assert_int_eq(info->config.n_decoder_layers, 1);
    ck_assert_int_eq(info->bos_id, 10);
    ck_assert_str_eq(info->task, "reverse");
    ck_assert_int_eq(tg_model_vocab_size(m), 11);
    ck_assert_int_eq(tg_model_token_byte(m, 10), -1);
    int32_t bos = 10;
    char out[1];
    ck_assert_int_eq(tg_model_decode(m, &bos, 1, out), -1);
    tu_assert_error(ctx, TG_ERR_ARG, "BOS");
    int32_t src[6];
    ck_assert_int_eq(tg_model_encode(m, "123456", 6, src, 6), 6);
    tg_generator *gen = tg_model_generator(m, 1);
    ck_assert_msg(gen != NULL, "%s", tg_ctx_message(ctx));
    ck_assert_int_eq(tg_generator_set_source(gen, src, 6), TG_OK);
    ck_assert_int_eq(tg_generator_feed(gen, &bos, 1), TG_OK);
    tg_tensor *lg = tg_generator_logits(gen);
    for (int64_t v = 0; v < 11; v++)
        ck_assert(isfinite(tg_get(lg, v)));
    tg_ctx_free(ctx);
}
END_TEST

/* ---- hostile files ------------------------------------------------------------------------ */
/* Rewrite @p src into dir/@p name with metadata @p key set to @p value (NULL: removed) and,
 * if @p extra, one more tensor of that name (a copy of the first). */
static const char *rewrite(const char *src, const char *name, const char *key, const char *value,
                           const char *extra)
{
    static char out[512];
    tg_ctx *ctx = tg_ctx_new();
    tg_safetensors *st = tg_safetensors_read(ctx, src);
    ck_assert_ptr_nonnull(st);
    int64_t n = tg_safetensors_count(st), nm = tg_safetensors_meta_count(st);
    tg_io_item *items = calloc((size_t)n + 1, sizeof *items);
    const char **k = calloc((size_t)nm + 1, sizeof *k), **v = calloc((size_t)nm + 1, sizeof *v);
    for (int64_t i = 0; i < n; i++)
        items[i] = tg_io_item_data(tg_safetensors_tensor(st, i), tg_safetensors_name(st, i));
    if (extra)
        items[n++] = tg_io_item_data(tg_safetensors_tensor(st, 0), extra);
    int64_t j = 0;
    bool done = false;
    for (int64_t i = 0; i < nm; i++) {
        const char *mk = tg_safetensors_meta_key(st, i);
        if (key && !strcmp(mk, key)) {
            done = true;
            if (!value)
                continue;
            k[j] = mk;
            v[j++] = value;
        } else {
            k[j] = mk;
            v[j++] = tg_safetensors_meta_value(st, i);
        }
    }
    if (key && value && !done) {
        k[j] = key;
        v[j++] = value;
    }
    tu_path(out, sizeof out, dir, name);
    ck_assert_msg(tg_safetensors_write_items(ctx, out, n, items, j, k, v, NULL) == TG_OK, "%s",
                  tg_ctx_message(ctx));
    free(items);
    free(k);
    free(v);
    tg_ctx_free(ctx);
    return out;
}

/* Loading @p path fails with @p status and a message containing @p needle; the context holds
 * exactly the bytes it held before. */
static void expect_refused(const char *path, tg_status status, const char *needle)
{
    tg_ctx *ctx = tg_ctx_new();
    tg_tensor *keep = tg_param(ctx, TG_F32, TG_DIMS(3), "keep");
    ck_assert_ptr_nonnull(keep);
    size_t bytes = tg_ctx_bytes(ctx);
    ck_assert_ptr_null(tg_model_load(ctx, path));
    tu_assert_error(ctx, status, needle);
    ck_assert_uint_eq(tg_ctx_bytes(ctx), bytes);
    ck_assert_int_eq(tg_ctx_n_params(ctx), 1);
    tg_ctx_free(ctx);
}

START_TEST(test_hostile)
{
    char ck[512], ex[512];
    fixture(ck, sizeof ck, "export_lm", ".ckpt");
    fixture(ex, sizeof ex, "export_lm", ".safetensors");
    expect_refused(rewrite(ck, "a.st", "format", NULL, NULL), TG_ERR_FORMAT,
                   "not a tgrad checkpoint or export (metadata 'format' is missing");
    expect_refused(rewrite(ck, "a.st", "format", "tgrad-checkpoint-9", NULL), TG_ERR_FORMAT,
                   "'tgrad-checkpoint-9'");
    expect_refused(rewrite(ck, "a.st", "model.heads", "3", NULL), TG_ERR_FORMAT,
                   "'model.heads' is 3, which does not divide model.d_model 8");
    expect_refused(rewrite(ck, "a.st", "model.layers", "-1", NULL), TG_ERR_FORMAT,
                   "metadata 'model.layers' is '-1' (expected an integer from 1 to");
    expect_refused(rewrite(ck, "a.st", "model.pos", "rotary", NULL), TG_ERR_FORMAT,
                   "expected learned|sinusoidal");
    expect_refused(rewrite(ck, "a.st", "model.vocab_size", "53", NULL), TG_ERR_FORMAT,
                   "model.vocab_size 53 but the vocabulary (data.vocab) has 54");
    expect_refused(rewrite(ck, "a.st", "data.vocab", "4141", NULL), TG_ERR_FORMAT,
                   "distinct bytes in increasing order");
    expect_refused(rewrite(ck, "a.st", "model.causal", "0", NULL), TG_ERR_FORMAT,
                   "model.causal 0 but data.mode text");
    /* a forged config is refused before the model is allocated */
    expect_refused(rewrite(ck, "a.st", "model.d_ff", "1000000000", NULL), TG_ERR_MISMATCH,
                   "the config needs");
    expect_refused(rewrite(ck, "a.st", "model.layers", "3", NULL), TG_ERR_MISMATCH,
                   "the config needs");
    expect_refused(rewrite(ck, "a.st", "model.pos", "sinusoidal", NULL), TG_ERR_MISMATCH,
                   "unexpected tensor 'pos_emb.weight'");
    expect_refused(rewrite(ck, "a.st", NULL, NULL, "layers.7.linear1.weight"), TG_ERR_MISMATCH,
                   "unexpected tensor 'layers.7.linear1.weight'");
    expect_refused(rewrite(ck, "a.st", NULL, NULL, "sgd.momentum.head.bias"), TG_ERR_MISMATCH,
                   "optimizer state shaped unlike its parameter");
    /* exports: the JSON config and vocabulary */
    expect_refused(rewrite(ex, "b.st", "config", "{\"vocab_size\": 54}", NULL), TG_ERR_FORMAT,
                   "metadata 'config' lacks \"max_seq_len\"");
    expect_refused(rewrite(ex, "b.st", "config", "{\"vocab_size\": 54, \"vocab_size\": 54}",
                           NULL), TG_ERR_FORMAT, "a repeated key");
    expect_refused(rewrite(ex, "b.st", "config", "{\"bogus\": 1}", NULL), TG_ERR_FORMAT,
                   "an unknown key");
    expect_refused(rewrite(ex, "b.st", "config", "[1,", NULL), TG_ERR_JSON, "metadata 'config'");
    expect_refused(rewrite(ex, "b.st", "vocab", "[1, 1]", NULL), TG_ERR_FORMAT,
                   "not a distinct byte");
    expect_refused(rewrite(ex, "b.st", "data", "task:copy", NULL), TG_ERR_FORMAT,
                   "expected text for a causal model");
    expect_refused("/nonexistent/x.ckpt", TG_ERR_IO, "x.ckpt");
}
END_TEST

/* An encoder-decoder's export: its config keys and vocabulary are checked. */
START_TEST(test_seq2seq_export_hostile)
{
    char ex[512];
    fixture(ex, sizeof ex, "export_seq2seq", ".safetensors");
    tg_ctx *ctx = tg_ctx_new();
    tg_safetensors *st = tg_safetensors_read(ctx, ex);
    ck_assert_ptr_nonnull(st);
    char cfg[1024], bad[1200];
    snprintf(cfg, sizeof cfg, "%s", tg_safetensors_meta_get(st, "config"));
    tg_ctx_free(ctx);
    char *p = strstr(cfg, "\"scale_embedding\": false");
    ck_assert_ptr_nonnull(p);
    /* scale_embedding true: token embeddings times sqrt(d_model) */
    snprintf(bad, sizeof bad, "%.*s\"scale_embedding\": true%s", (int)(p - cfg), cfg,
             p + strlen("\"scale_embedding\": false"));
    ctx = tg_ctx_new();
    tg_model *m = tg_model_load(ctx, rewrite(ex, "b.st", "config", bad, NULL));
    ck_assert_msg(m != NULL, "%s", tg_ctx_message(ctx));
    ck_assert(tg_model_get_info(m)->config.scale_embeddings);
    tg_ctx_free(ctx);
    ctx = tg_ctx_new();
    m = tg_model_load(ctx, ex);
    ck_assert_msg(m != NULL, "%s", tg_ctx_message(ctx));
    ck_assert(!tg_model_get_info(m)->config.scale_embeddings);
    tg_ctx_free(ctx);
    /* data pairs: the ids are a tokenizer's, so no byte vocabulary may be given */
    expect_refused(rewrite(ex, "b.st", "data", "pairs", NULL), TG_ERR_FORMAT,
                   "metadata 'vocab' in a translation model's export");
    /* causal beside n_decoder_layers */
    snprintf(bad, sizeof bad, "{\"causal\": false, %s", cfg + 1);
    expect_refused(rewrite(ex, "b.st", "config", bad, NULL), TG_ERR_FORMAT,
                   "both \"n_decoder_layers\" and \"causal\"");
    /* n_decoder_layers out of range */
    p = strstr(cfg, "\"n_decoder_layers\": 2");
    ck_assert_ptr_nonnull(p);
    snprintf(bad, sizeof bad, "%.*s\"n_decoder_layers\": 0%s", (int)(p - cfg), cfg,
             p + strlen("\"n_decoder_layers\": 2"));
    expect_refused(rewrite(ex, "b.st", "config", bad, NULL), TG_ERR_FORMAT,
                   "n_decoder_layers out of range");
    snprintf(bad, sizeof bad, "%.*s\"n_decoder_layers\": 3%s", (int)(p - cfg), cfg,
             p + strlen("\"n_decoder_layers\": 2"));
    expect_refused(rewrite(ex, "b.st", "config", bad, NULL), TG_ERR_MISMATCH, NULL);
    /* the vocabulary: BOS (null) only last, the digits before it; bos_id 10 */
    expect_refused(rewrite(ex, "b.st", "vocab", "[null, 48, 49, 50, 51, 52, 53, 54, 55, 56, 57]",
                           NULL), TG_ERR_JSON, "metadata 'vocab'");
    expect_refused(rewrite(ex, "b.st", "vocab", "[48, 49, 50, 51, 52, 53, 54, 55, 56, 58, null]",
                           NULL), TG_ERR_FORMAT, "not an encoder-decoder task's");
    expect_refused(rewrite(ex, "b.st", "vocab", "[48, 49, 50, 51, 52, 53, 54, 55, 56, 57, 58]",
                           NULL), TG_ERR_FORMAT, "not an encoder-decoder task's");
    expect_refused(rewrite(ex, "b.st", "bos_id", "3", NULL), TG_ERR_FORMAT,
                   "not an encoder-decoder task's");
    expect_refused(rewrite(ex, "b.st", "bos_id", NULL, NULL), TG_ERR_FORMAT,
                   "metadata 'bos_id' is missing");
    expect_refused(rewrite(ex, "b.st", "data", "text", NULL), TG_ERR_FORMAT, "metadata 'data'");
}
END_TEST

/* A translation model's export (data pairs): its tokenizer is checked as a checkpoint's. */
START_TEST(test_pairs_export_hostile)
{
    char ex[512], es[512];
    fixture(ex, sizeof ex, "export_pairs_bytes", ".safetensors");
    fixture(es, sizeof es, "export_pairs_spm", ".safetensors");
    expect_refused(rewrite(ex, "b.st", "bos_id", "10", NULL), TG_ERR_FORMAT,
                   "metadata 'bos_id' is 10 (a translation model's BOS is its tokenizer's id 1)");
    expect_refused(rewrite(ex, "b.st", "bos_id", NULL, NULL), TG_ERR_FORMAT,
                   "metadata 'bos_id' is missing");
    expect_refused(rewrite(ex, "b.st", "vocab", "[48]", NULL), TG_ERR_FORMAT,
                   "metadata 'vocab' in a translation model's export");
    expect_refused(rewrite(ex, "b.st", "tokenizer.kind", NULL, NULL), TG_ERR_FORMAT,
                   "'tokenizer.kind' is missing");
    expect_refused(rewrite(ex, "b.st", "tokenizer.kind", "sentencepiece", NULL), TG_ERR_FORMAT,
                   "tokenizer.model");
    expect_refused(rewrite(ex, "b.st", "tokenizer.kind", "words", NULL), TG_ERR_FORMAT,
                   "tokenizer.kind");
    expect_refused(rewrite(es, "b.st", "tokenizer.model", "AAA!", NULL), TG_ERR_FORMAT,
                   "tokenizer.model");
    expect_refused(rewrite(es, "b.st", "tokenizer.kind", "bytes", NULL), TG_ERR_FORMAT,
                   "tokenizer.model");
    /* the byte tokenizer fixes the vocabulary: 260 ids */
    tg_ctx *ctx = tg_ctx_new();
    tg_safetensors *st = tg_safetensors_read(ctx, ex);
    ck_assert_ptr_nonnull(st);
    char cfg[1024], bad[1200];
    snprintf(cfg, sizeof cfg, "%s", tg_safetensors_meta_get(st, "config"));
    tg_ctx_free(ctx);
    char *p = strstr(cfg, "\"vocab_size\": 260");
    ck_assert_ptr_nonnull(p);
    snprintf(bad, sizeof bad, "%.*s\"vocab_size\": 259%s", (int)(p - cfg), cfg,
             p + strlen("\"vocab_size\": 260"));
    expect_refused(rewrite(ex, "b.st", "config", bad, NULL), TG_ERR_FORMAT,
                   "model.vocab_size 259 but the byte tokenizer");
    /* pairs needs an encoder-decoder's config; a task's data a byte-sized vocabulary */
    char lm[512];
    fixture(lm, sizeof lm, "export_lm", ".safetensors");
    expect_refused(rewrite(lm, "b.st", "data", "pairs", NULL), TG_ERR_FORMAT,
                   "is not an encoder-decoder's");
    expect_refused(rewrite(ex, "b.st", "data", "task:copy", NULL), TG_ERR_FORMAT,
                   "vocab_size 260 is more than a byte vocabulary's 256");
    /* the loaded export: BOS 1, its tokenizer */
    ctx = tg_ctx_new();
    tg_model *m = tg_model_load(ctx, es);
    ck_assert_msg(m != NULL, "%s", tg_ctx_message(ctx));
    ck_assert_int_eq(tg_model_get_info(m)->bos_id, 1);
    ck_assert_str_eq(tg_model_get_info(m)->tokenizer, "sentencepiece");
    ck_assert(tg_model_get_info(m)->config.scale_embeddings);
    size_t nb = 0;
    ck_assert_ptr_nonnull(tg_model_tokenizer_bytes(m, &nb));
    ck_assert_int_eq((int64_t)nb, 716); /* tests/fixtures/export_pairs_spm.model */
    tg_ctx_free(ctx);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("model");
    TCase *tc = tcase_create("model");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_set_timeout(tc, 240);
    tcase_add_loop_test(tc, test_fixtures_match_pytorch, 0, 4);
    tcase_add_test(tc, test_pairs_export_hostile);
    tcase_add_loop_test(tc, test_seq2seq_fixtures_match_pytorch, 0, 4);
    tcase_add_test(tc, test_seq2seq_export_hostile);
    tcase_add_test(tc, test_params_load_skips_optimizer_state);
    tcase_add_test(tc, test_lm_sgd_tied_sinusoidal);
    tcase_add_test(tc, test_seq2seq);
    tcase_add_test(tc, test_hostile);
    suite_add_tcase(s, tc);
    return tu_run(s);
}
