#define _POSIX_C_SOURCE 200809L
/*
 * test_export.c - `tgrad export` end to end, on the committed fixtures (tests/fixtures/,
 * made by tools/reference/check_export.py --tgrad; see tests/fixtures/README.md):
 *   export_<case>.ckpt            a tiny checkpoint written by `tgrad train`
 *   export_<case>.safetensors     its export, which PyTorch loaded with strict=True
 *   export_<case>_logits.safetensors  the PyTorch reference model's logits on fixed ids
 * Checked: today's export is byte-identical to the file PyTorch verified; every tensor equals
 * the checkpoint's, no optimizer state; the metadata (config, vocabulary) is complete: a tgrad
 * model built from it alone reproduces PyTorch's logits (1e-10 in f64, 1e-4 in f32); every
 * refusal (existing --out without --force: exit 2, a directory, a symbolic link to nothing or to a
 * directory (a link to a regular file is written through with --force), the checkpoint itself,
 * a FIFO, a file that is not a checkpoint) and every hostile metadata value (huge, negative,
 * NaN, inf, non-numeric, inconsistent with the tensors) is one line and a non-zero exit, and
 * leaves no file behind.
 */
#include "testutil.h"
#include "tgrad_io.h"
#include "tgrad_model.h"
#include "tgrad_train.h"

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

static char dir[256];
/* The fixtures and what their exports hold: tied weights, f64, data, the JSON vocabulary
 * (NULL: the text checkpoint's data.vocab, or none for a translation model), an
 * encoder-decoder (nn.Transformer's names), a translation model (tgrad train --pairs: its
 * tokenizer instead of a vocabulary). */
static const struct {
    const char *name;
    bool tied, f64;
    const char *data, *vocab;
    bool s2s, pairs;
} cases[] = {
    {"export_lm", false, false, "text", NULL, false, false},
    {"export_task", true, true, "task:reverse", "[48, 49, 50, 51, 52, 53, 54, 55, 56, 57]",
     false, false},
    {"export_seq2seq", false, false, "task:reverse",
     "[48, 49, 50, 51, 52, 53, 54, 55, 56, 57, null]", true, false},
    {"export_seq2seq_tied", true, true, "task:sort",
     "[48, 49, 50, 51, 52, 53, 54, 55, 56, 57, null]", true, false},
    {"export_pairs_bytes", true, false, "pairs", NULL, true, true},
    {"export_pairs_spm", true, false, "pairs", NULL, true, true},
};
#define N_CASES ((int)(sizeof cases / sizeof cases[0]))

static void setup(void) { tu_mkdtemp(dir, sizeof dir, "export"); }
static void teardown(void) { tu_rm_tree(dir); }

/* `tgrad ARGS` in dir (under timeout); stdout to out.txt, stderr to err.txt; exit status. */
static int run(const char *args)
{
    int rc = tu_run_tgrad(dir, args, 120, NULL);
    ck_assert_msg(rc != TU_TIMED_OUT, "tgrad %s hung", args);
    ck_assert_msg(rc >= 0, "tgrad %s died of signal %d", args, -rc);
    return rc;
}

static char *slurp(const char *path, size_t *n) { return tu_slurp(path, n); }

static char *slurp_in_dir(const char *name)
{
    char *s = tu_slurp_in(dir, name, NULL);
    ck_assert_msg(s != NULL, "cannot read %s/%s", dir, name);
    return s;
}

#define count_lines tu_count_lines

/* Number of directory entries in dir (besides . and ..). */
static int n_entries(void)
{
    DIR *d = opendir(dir);
    ck_assert_ptr_nonnull(d);
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)))
        n += strcmp(e->d_name, ".") && strcmp(e->d_name, "..");
    closedir(d);
    return n;
}

/* A failed export: non-zero, one line on stderr containing @p needle, nothing on stdout. */
static void expect_fail(const char *args, const char *needle)
{
    int rc = run(args);
    char *err = slurp_in_dir("err.txt"), *out = slurp_in_dir("out.txt");
    ck_assert_msg(rc != 0, "'%s' exited 0", args);
    ck_assert_msg(count_lines(err) == 1, "'%s' printed %d lines: %s", args, count_lines(err), err);
    ck_assert_msg(strstr(err, "tgrad export: ") == err, "'%s': '%s'", args, err);
    ck_assert_msg(!needle || strstr(err, needle), "'%s': '%s' lacks '%s'", args, err, needle);
    ck_assert_msg(strstr(err, "tg_") == NULL, "'%s' names an internal function: %s", args, err);
    ck_assert_str_eq(out, "");
    free(err);
    free(out);
}

static void fixture_path(char *p, size_t n, const char *c, const char *suffix)
{
    snprintf(p, n, "%s/%s%s", TG_FIXTURES, c, suffix);
}

static bool same_file(const char *a, const char *b)
{
    size_t na = 0, nb = 0;
    char *x = slurp(a, &na), *y = slurp(b, &nb);
    bool same = x && y && na == nb && !memcmp(x, y, na);
    free(x);
    free(y);
    return same;
}

/* ---- the round trip ------------------------------------------------------------------------ */
static bool is_optim(const char *name)
{
    return !strncmp(name, "adam.", 5) || !strncmp(name, "sgd.", 4);
}

START_TEST(test_round_trip)
{
    const char *c = cases[_i].name;
    char ck[512], ref[512], out[512], a[1200];
    fixture_path(ck, sizeof ck, c, ".ckpt");
    fixture_path(ref, sizeof ref, c, ".safetensors");
    snprintf(out, sizeof out, "%s/m.safetensors", dir);
    snprintf(a, sizeof a, "export --checkpoint '%s' --out m.safetensors", ck);
    ck_assert_int_eq(run(a), 0);
    char *so = slurp_in_dir("out.txt"), *se = slurp_in_dir("err.txt");
    ck_assert_msg(strstr(so, "exported ") == so && count_lines(so) == 1, "%s", so);
    ck_assert_str_eq(se, "");
    free(so);
    free(se);
    /* exactly the file PyTorch loaded with strict=True (tools/reference/check_export.py) */
    ck_assert_msg(same_file(out, ref), "the export of %s differs from %s", ck, ref);

    tg_ctx *ctx = tg_ctx_new();
    tg_safetensors *m = tg_safetensors_read(ctx, out), *k = tg_safetensors_read(ctx, ck);
    ck_assert_msg(m && k, "%s", tg_ctx_message(ctx));
    bool tied = !strcmp(tg_safetensors_meta_get(k, "model.tie_weights"), "1");
    ck_assert_int_eq(tied, cases[_i].tied);
    int64_t n_params = 0;
    for (int64_t i = 0; i < tg_safetensors_count(k); i++)
        n_params += !is_optim(tg_safetensors_name(k, i));
    ck_assert_int_eq(tg_safetensors_count(m), n_params + (tied ? 1 : 0));
    for (int64_t i = 0; i < tg_safetensors_count(m); i++) {
        const char *name = tg_safetensors_name(m, i);
        ck_assert_msg(!is_optim(name), "optimizer state %s exported", name);
        const char *src = tied && !strcmp(name, "head.weight") ? "tok_emb.weight" : name;
        tg_tensor *t = tg_safetensors_tensor(m, i), *u = tg_safetensors_find(k, src);
        ck_assert_msg(u != NULL, "%s is not in the checkpoint", src);
        ck_assert_str_eq(tg_safetensors_file_dtype(m, i), cases[_i].f64 ? "F64" : "F32");
        /* an encoder-decoder: torch.nn.Transformer's own keys, and the embeddings and head */
        if (cases[_i].s2s)
            ck_assert_msg(!strncmp(name, "encoder.layers.", 15) ||
                          !strncmp(name, "decoder.layers.", 15) ||
                          !strcmp(name, "encoder.norm.weight") ||
                          !strcmp(name, "encoder.norm.bias") ||
                          !strcmp(name, "decoder.norm.weight") ||
                          !strcmp(name, "decoder.norm.bias") || !strcmp(name, "tok_emb.weight") ||
                          !strcmp(name, "pos_emb.weight") || !strncmp(name, "head.", 5),
                          "%s is not an nn.Transformer name", name);
        ck_assert_int_eq(tg_tensor_dtype(t), tg_tensor_dtype(u));
        ck_assert_int_eq(tg_tensor_numel(t), tg_tensor_numel(u));
        ck_assert_int_eq(tg_tensor_rank(t), tg_tensor_rank(u));
        size_t bytes = (size_t)tg_tensor_numel(t) * (tg_tensor_dtype(t) == TG_F64 ? 8 : 4);
        ck_assert_msg(!memcmp(tg_tensor_data(t), tg_tensor_data(u), bytes), "%s differs", name);
    }
    /* metadata: format, the vocabulary as JSON, the config */
    ck_assert_str_eq(tg_safetensors_meta_get(m, "format"), "tgrad-export-1");
    ck_assert_str_eq(tg_safetensors_meta_get(m, "tgrad_version"), TGRAD_VERSION_STRING);
    ck_assert_str_eq(tg_safetensors_meta_get(m, "step"), tg_safetensors_meta_get(k, "optim.step"));
    const char *vocab = tg_safetensors_meta_get(m, "vocab");
    if (cases[_i].pairs) { /* the checkpoint's tokenizer, verbatim; no byte vocabulary */
        ck_assert_ptr_null(vocab);
        ck_assert_str_eq(tg_safetensors_meta_get(m, "data"), "pairs");
        const char *kind = tg_safetensors_meta_get(m, "tokenizer.kind");
        ck_assert_ptr_nonnull(kind);
        ck_assert_str_eq(kind, tg_safetensors_meta_get(k, "tokenizer.kind"));
        const char *tm = tg_safetensors_meta_get(m, "tokenizer.model");
        const char *tk = tg_safetensors_meta_get(k, "tokenizer.model");
        ck_assert_int_eq(tm != NULL, !strcmp(kind, "sentencepiece"));
        ck_assert_int_eq(tm != NULL, tk != NULL);
        if (tm)
            ck_assert_str_eq(tm, tk);
    } else if (!cases[_i].vocab) { /* text: the checkpoint's hex vocabulary as JSON bytes */
        const char *hex = tg_safetensors_meta_get(k, "data.vocab");
        char want[2048] = "[";
        for (size_t i = 0; hex[i]; i += 2) {
            unsigned v;
            ck_assert_int_eq(sscanf(hex + i, "%2x", &v), 1);
            size_t l = strlen(want);
            snprintf(want + l, sizeof want - l, "%s%u", i ? ", " : "", v);
        }
        strcat(want, "]");
        ck_assert_str_eq(vocab, want);
        ck_assert_str_eq(tg_safetensors_meta_get(m, "data"), "text");
    } else {
        ck_assert_str_eq(vocab, cases[_i].vocab);
        ck_assert_str_eq(tg_safetensors_meta_get(m, "data"), cases[_i].data);
    }
    const char *cfg = tg_safetensors_meta_get(m, "config"), *bos = tg_safetensors_meta_get(m,
                                                                                       "bos_id");
    if (cases[_i].s2s) { /* Seq2Seq's keyword arguments; the decoder input starts with BOS */
        char want[64];
        snprintf(want, sizeof want, "\"n_decoder_layers\": %s",
                 tg_safetensors_meta_get(k, "model.decoder_layers"));
        /* the checkpoint's embedding scale (a task's: none) */
        const char *sc = tg_safetensors_meta_get(k, "model.scale_embeddings");
        bool scaled = sc && !strcmp(sc, "1");
        ck_assert_msg(strstr(cfg, want) && !strstr(cfg, "\"causal\"") &&
                      strstr(cfg, scaled ? "\"scale_embedding\": true"
                                         : "\"scale_embedding\": false"), "%s", cfg);
        ck_assert_str_eq(bos, cases[_i].pairs ? "1" : "10");
        /* tgrad reads the export back: sample (a task) or translate (a translation model with
         * the byte tokenizer: SentencePiece is optional in a build) decodes it exactly as the
         * checkpoint */
        bool spm = cases[_i].pairs && tg_safetensors_meta_get(m, "tokenizer.model");
        char *from[2] = {NULL, NULL};
        if (cases[_i].pairs) {
            char ip[600];
            snprintf(ip, sizeof ip, "%s/in.txt", dir);
            FILE *f = fopen(ip, "w");
            ck_assert_ptr_nonnull(f);
            fputs("Hello.\nThe dog is small.\nWhere is the house?\nGute Nacht!\n", f);
            fclose(f);
        }
        for (int f = 0; f < 2 && !spm; f++) {
            if (cases[_i].pairs)
                snprintf(a, sizeof a, "translate --checkpoint '%s' --beam 1 in.txt",
                         f ? out : ck);
            else
                snprintf(a, sizeof a, "sample --checkpoint '%s' --source 123456789012",
                         f ? out : ck);
            ck_assert_int_eq(run(a), 0);
            from[f] = slurp_in_dir("out.txt");
        }
        if (spm)
            goto done;
        if (cases[_i].pairs) /* four translations, not all empty */
            ck_assert_msg(count_lines(from[0]) == 4 && strlen(from[0]) > 8, "%s", from[0]);
        else /* 12 tokens (digits or <bos>), newline */
            ck_assert_int_ge((int)strlen(from[0]), 13);
        ck_assert_str_eq(from[0], from[1]);
        free(from[0]);
        free(from[1]);
    } else {
        ck_assert_msg(!strstr(cfg, "n_decoder_layers") && strstr(cfg, "\"causal\""), "%s", cfg);
        ck_assert_ptr_null(bos);
    }
done:
    tg_ctx_free(ctx);
}
END_TEST

/* Value of "key" in the flat JSON object @p json (number, true/false, or string into @p s). */
static double json_num(const char *json, const char *key)
{
    char k[64];
    snprintf(k, sizeof k, "\"%s\": ", key);
    const char *p = strstr(json, k);
    ck_assert_msg(p != NULL, "config lacks %s: %s", key, json);
    p += strlen(k);
    if (!strncmp(p, "true", 4))
        return 1;
    if (!strncmp(p, "false", 5))
        return 0;
    char *end;
    double v = strtod(p, &end);
    ck_assert_msg(end != p, "config %s is not a number", key);
    return v;
}

static bool json_str_is(const char *json, const char *key, const char *value)
{
    char k[128];
    snprintf(k, sizeof k, "\"%s\": \"%s\"", key, value);
    return strstr(json, k) != NULL;
}

/* Input @p name of the logits fixture as an i32 (ids) or @p dt (a mask) input. */
static tg_tensor *fixture_input(tg_ctx *ctx, const tg_safetensors *ref, const char *name,
                                tg_dtype dt)
{
    tg_tensor *r = tg_safetensors_find(ref, name);
    ck_assert_msg(r != NULL, "the logits fixture lacks %s", name);
    ck_assert_int_eq(tg_tensor_rank(r), 2);
    tg_tensor *t = tg_input(ctx, dt, TG_DIMS(tg_tensor_shape(r)[0], tg_tensor_shape(r)[1]),
                            name);
    ck_assert_ptr_nonnull(t);
    for (int64_t i = 0; i < tg_tensor_numel(r); i++)
        tg_set(t, i, tg_get(r, i));
    return t;
}

/* A tgrad model built from the export's metadata alone reproduces PyTorch's logits: an
 * encoder-decoder's on a source with padding (src_key_padding_mask) within 1e-10 in f64 and,
 * against PyTorch's float32 model, 1e-5 in f32. */
START_TEST(test_logits_match_pytorch)
{
    const char *c = cases[_i / 2].name;
    bool s2s = cases[_i / 2].s2s;
    tg_dtype dt = _i % 2 ? TG_F32 : TG_F64;
    double tol = dt == TG_F64 ? 1e-10 : s2s ? 1e-5 : 1e-4;
    char ex[512], lg[512];
    fixture_path(ex, sizeof ex, c, ".safetensors");
    fixture_path(lg, sizeof lg, c, "_logits.safetensors");
    tg_ctx *ctx = tg_ctx_new();
    tg_safetensors *m = tg_safetensors_read(ctx, ex), *ref = tg_safetensors_read(ctx, lg);
    ck_assert_msg(m && ref, "%s", tg_ctx_message(ctx));
    const char *cfg = tg_safetensors_meta_get(m, "config");
    ck_assert_ptr_nonnull(cfg);
    tg_transformer_config mc;
    memset(&mc, 0, sizeof mc);
    mc.vocab_size = (int64_t)json_num(cfg, "vocab_size");
    mc.max_seq_len = (int64_t)json_num(cfg, "max_seq_len");
    mc.n_layers = (int64_t)json_num(cfg, "n_layers");
    mc.layer = tg_encoder_config_default((int64_t)json_num(cfg, "d_model"),
                                         (int64_t)json_num(cfg, "n_heads"));
    mc.layer.d_ff = (int64_t)json_num(cfg, "d_ff");
    mc.layer.norm_first = json_num(cfg, "norm_first") != 0;
    mc.layer.layer_norm_eps = json_num(cfg, "layer_norm_eps");
    mc.layer.dropout = json_num(cfg, "dropout");
    ck_assert(json_str_is(cfg, "activation", "relu") || json_str_is(cfg, "activation", "gelu"));
    mc.layer.activation = json_str_is(cfg, "activation", "gelu") ? TG_ACT_GELU : TG_ACT_RELU;
    ck_assert(json_str_is(cfg, "pos", "learned") || json_str_is(cfg, "pos", "sinusoidal"));
    mc.pos = json_str_is(cfg, "pos", "sinusoidal") ? TG_POS_SINUSOIDAL : TG_POS_LEARNED;
    if (s2s) {
        mc.n_decoder_layers = (int64_t)json_num(cfg, "n_decoder_layers");
        mc.scale_embeddings = json_num(cfg, "scale_embedding") != 0;
    } else
        mc.causal = json_num(cfg, "causal") != 0;
    mc.tie_weights = json_num(cfg, "tie_weights") != 0;
    tg_transformer model;
    ck_assert_int_eq(tg_transformer_init(ctx, &model, dt, &mc), TG_OK);
    /* strict: every parameter in the file and nothing else (a tied model has no head.weight
     * of its own: the file's copy of tok_emb.weight is then the one extra key) */
    ck_assert_msg(tg_params_load_from(ctx, m, 0, NULL, !mc.tie_weights) == TG_OK, "%s",
                  tg_ctx_message(ctx));
    tg_tensor *want = tg_safetensors_find(ref, s2s && dt == TG_F32 ? "logits_f32" : "logits");
    ck_assert(want != NULL);
    tg_tensor *logits;
    if (s2s) {
        tg_tensor *mask = fixture_input(ctx, ref, "src_key_padding_mask", dt);
        bool padded = false;
        for (int64_t i = 0; i < tg_tensor_numel(mask); i++)
            padded = padded || tg_get(mask, i) != 0;
        ck_assert_msg(padded, "the source has no padding");
        logits = tg_transformer_forward_seq2seq(ctx, &model,
                                                fixture_input(ctx, ref, "src_ids", TG_I32),
                                                fixture_input(ctx, ref, "tgt_ids", TG_I32), mask,
                                                NULL);
    } else {
        logits = tg_transformer_forward(ctx, &model, fixture_input(ctx, ref, "ids", TG_I32),
                                        NULL);
    }
    tg_graph *g = logits ? tg_graph_new(ctx, &logits, 1) : NULL;
    ck_assert_msg(g != NULL, "%s", tg_ctx_message(ctx));
    tg_ctx_set_training(ctx, false);
    ck_assert_int_eq(tg_graph_forward(g), TG_OK);
    ck_assert_int_eq(tg_tensor_numel(logits), tg_tensor_numel(want));
    double md = 0, mr = 0;
    for (int64_t i = 0; i < tg_tensor_numel(want); i++) {
        double d = fabs(tg_get(logits, i) - tg_get(want, i));
        md = isnan(d) || d > md ? (isnan(d) ? INFINITY : d) : md;
        mr = fmax(mr, fabs(tg_get(want, i)));
    }
    ck_assert_msg(md / (1 + mr) <= tol, "%s %s: logits differ from PyTorch's by %.3g (tol %g)", c,
                  tg_dtype_str(dt), md / (1 + mr), tol);
    tg_ctx_free(ctx);
}
END_TEST

/* The logits of model @p m on the logits fixture's padded source batch (its dtype). */
static tg_tensor *model_logits(tg_ctx *ctx, tg_model *m, const tg_safetensors *ref)
{
    tg_dtype dt = tg_model_get_info(m)->dtype;
    tg_tensor *y = tg_transformer_forward_seq2seq(
        ctx, tg_model_transformer(m), fixture_input(ctx, ref, "src_ids", TG_I32),
        fixture_input(ctx, ref, "tgt_ids", TG_I32),
        fixture_input(ctx, ref, "src_key_padding_mask", dt), NULL);
    tg_graph_opts go = {.no_grad = true};
    tg_graph *g = y ? tg_graph_new_opts(ctx, &y, 1, &go) : NULL;
    ck_assert_msg(g != NULL, "%s", tg_ctx_message(ctx));
    tg_ctx_set_training(ctx, false);
    ck_assert_int_eq(tg_graph_forward(g), TG_OK);
    return y;
}

/* A translation model's export loads with tg_model_load exactly as its checkpoint: the same
 * config (the embedding scale too), BOS 1, the same tokenizer (kind and SentencePiece bytes),
 * and the same logits (bit for bit) on a padded source batch, which are PyTorch's (1e-5). */
START_TEST(test_pairs_model_load)
{
    int c = 0;
    for (int i = 0, seen = 0; i < N_CASES; i++)
        if (cases[i].pairs && seen++ == _i)
            c = i;
    ck_assert(cases[c].pairs);
    char ck[512], ex[512], lg[512];
    fixture_path(ck, sizeof ck, cases[c].name, ".ckpt");
    fixture_path(ex, sizeof ex, cases[c].name, ".safetensors");
    fixture_path(lg, sizeof lg, cases[c].name, "_logits.safetensors");
    tg_ctx *ctx = tg_ctx_new();
    tg_safetensors *ref = tg_safetensors_read(ctx, lg);
    tg_model *mk = tg_model_load(ctx, ck), *me = mk ? tg_model_load(ctx, ex) : NULL;
    ck_assert_msg(ref && mk && me, "%s", tg_ctx_message(ctx));
    const tg_model_info *ik = tg_model_get_info(mk), *ie = tg_model_get_info(me);
    ck_assert_int_eq(ie->format, TG_MODEL_EXPORT);
    ck_assert_int_eq(ik->format, TG_MODEL_CHECKPOINT);
    ck_assert_int_eq(ie->kind, TG_MODEL_SEQ2SEQ);
    ck_assert_int_eq(ie->bos_id, TG_TOKEN_BOS);
    ck_assert_int_eq(ik->bos_id, TG_TOKEN_BOS);
    ck_assert_int_eq(ie->dtype, ik->dtype);
    ck_assert_int_eq(ie->step, ik->step);
    ck_assert_str_eq(ie->tokenizer, ik->tokenizer);
    const tg_transformer_config *a = &ie->config, *b = &ik->config;
    ck_assert(a->vocab_size == b->vocab_size && a->max_seq_len == b->max_seq_len &&
              a->n_layers == b->n_layers && a->n_decoder_layers == b->n_decoder_layers &&
              a->layer.d_model == b->layer.d_model && a->layer.n_heads == b->layer.n_heads &&
              a->layer.d_ff == b->layer.d_ff && a->layer.norm_first == b->layer.norm_first &&
              a->layer.activation == b->layer.activation && a->pos == b->pos &&
              a->tie_weights == b->tie_weights && a->causal == b->causal);
    ck_assert_int_eq(a->scale_embeddings, b->scale_embeddings);
    /* the SentencePiece case has the scale, the byte case not: both values are exercised */
    ck_assert_int_eq(a->scale_embeddings, !strcmp(ie->tokenizer, "sentencepiece"));
    size_t nk = 0, ne = 0;
    const void *tk = tg_model_tokenizer_bytes(mk, &nk), *te = tg_model_tokenizer_bytes(me, &ne);
    ck_assert_int_eq((int64_t)nk, (int64_t)ne);
    ck_assert_int_eq(tk != NULL, !strcmp(ie->tokenizer, "sentencepiece"));
    ck_assert(!nk || !memcmp(tk, te, nk));
    ck_assert_int_eq(tg_model_n_params(mk), tg_model_n_params(me));
    tg_tensor *yk = model_logits(ctx, mk, ref), *ye = model_logits(ctx, me, ref);
    ck_assert_int_eq(tg_tensor_numel(yk), tg_tensor_numel(ye));
    for (int64_t i = 0; i < tg_tensor_numel(yk); i++)
        ck_assert_msg(tg_get(yk, i) == tg_get(ye, i), "logit %lld: %.9g (checkpoint) but %.9g "
                      "(export)", (long long)i, tg_get(yk, i), tg_get(ye, i));
    const tg_tensor *want = tg_safetensors_find(ref, "logits_f32");
    ck_assert_ptr_nonnull(want);
    ck_assert_int_eq(tg_tensor_numel(want), tg_tensor_numel(ye));
    double md = 0, mr = 0;
    for (int64_t i = 0; i < tg_tensor_numel(want); i++) {
        double d = fabs(tg_get(ye, i) - tg_get(want, i));
        md = isnan(d) ? INFINITY : fmax(md, d);
        mr = fmax(mr, fabs(tg_get(want, i)));
    }
    ck_assert_msg(md / (1 + mr) <= 1e-5, "%s: logits differ from PyTorch's by %.3g",
                  cases[c].name, md / (1 + mr));
    tg_ctx_free(ctx);
}
END_TEST

/* ---- refusals ----------------------------------------------------------------------------- */
START_TEST(test_refusals)
{
    char ck[512], ref[512], p[512], a[1500];
    fixture_path(ck, sizeof ck, cases[0].name, ".ckpt");
    fixture_path(ref, sizeof ref, cases[0].name, ".safetensors");
    /* an existing --out is not replaced without --force, and stays as it was */
    snprintf(p, sizeof p, "%s/m.safetensors", dir);
    FILE *f = fopen(p, "w");
    fputs("precious", f);
    fclose(f);
    snprintf(a, sizeof a, "export --checkpoint '%s' --out m.safetensors", ck);
    expect_fail(a, "--out 'm.safetensors' exists (pass --force to replace it)");
    char *kept = slurp(p, NULL);
    ck_assert_str_eq(kept, "precious");
    free(kept);
    snprintf(a, sizeof a, "export --checkpoint '%s' --out m.safetensors --force", ck);
    ck_assert_int_eq(run(a), 0);
    ck_assert(same_file(p, ref));
    int entries = n_entries(); /* m.safetensors, out.txt, err.txt */
    ck_assert_int_eq(entries, 3);

    /* never replaced, even with --force: a directory, the checkpoint itself; a symbolic link
     * to a regular file is written through like every output (train --checkpoint too): it
     * needs --force, and the link stays a link */
    snprintf(p, sizeof p, "%s/d", dir);
    ck_assert_int_eq(mkdir(p, 0700), 0);
    snprintf(a, sizeof a, "export --checkpoint '%s' --out d --force", ck);
    expect_fail(a, "--out 'd' is a directory, not a regular file; refusing to replace it");
    snprintf(p, sizeof p, "%s/link", dir);
    ck_assert_int_eq(symlink("m.safetensors", p), 0);
    snprintf(a, sizeof a, "export --checkpoint '%s' --out link", ck);
    expect_fail(a, "--out 'link' exists (pass --force to replace it)");
    ck_assert_int_eq(run(a), 2); /* a usage error */
    snprintf(a, sizeof a, "export --checkpoint '%s' --out link --force", ck);
    ck_assert_int_eq(run(a), 0);
    struct stat lsb;
    ck_assert_int_eq(lstat(p, &lsb), 0);
    ck_assert(S_ISLNK(lsb.st_mode));
    snprintf(p, sizeof p, "%s/m.safetensors", dir);
    ck_assert(same_file(p, ref));
    snprintf(p, sizeof p, "%s/dangling", dir);
    ck_assert_int_eq(symlink("nothere", p), 0);
    snprintf(a, sizeof a, "export --checkpoint '%s' --out dangling --force", ck);
    expect_fail(a, "a symbolic link to a file that does not exist");
    snprintf(p, sizeof p, "%s/dirlink", dir);
    ck_assert_int_eq(symlink("d", p), 0);
    snprintf(a, sizeof a, "export --checkpoint '%s' --out dirlink --force", ck);
    expect_fail(a, "a symbolic link to a directory, not to a regular file");
    snprintf(a, sizeof a, "cp '%s' '%s/ck.ckpt'", ck, dir);
    ck_assert_int_eq(system(a), 0);
    expect_fail("export --checkpoint ck.ckpt --out ck.ckpt --force", "the checkpoint itself");
    expect_fail("export --checkpoint ck.ckpt --out ./ck.ckpt --force",
                "is the input --checkpoint 'ck.ckpt'");
    entries = n_entries(); /* + d, link, dangling, dirlink, ck.ckpt */
    ck_assert_int_eq(entries, 8);

    /* not a checkpoint */
    char other[512];
    fixture_path(other, sizeof other, "mha_self", ".safetensors");
    snprintf(a, sizeof a, "export --checkpoint '%s' --out n.safetensors", other);
    expect_fail(a, "not a tgrad checkpoint");
    snprintf(a, sizeof a, "export --checkpoint '%s' --out n.safetensors", ref);
    expect_fail(a, "'format' 'tgrad-export-1': not a tgrad checkpoint");
    expect_fail("export --checkpoint out.txt --out n.safetensors", "--checkpoint 'out.txt'");
    expect_fail("export --checkpoint nothere.ckpt --out n.safetensors",
                "--checkpoint 'nothere.ckpt': No such file");
    snprintf(p, sizeof p, "%s/fifo", dir);
    ck_assert_int_eq(mkfifo(p, 0600), 0);
    expect_fail("export --checkpoint fifo --out n.safetensors", "is a FIFO, not a regular file");
    expect_fail("export --checkpoint /dev/zero --out n.safetensors", "character device");
    expect_fail("export --checkpoint d --out n.safetensors", "is a directory");
    /* command-line errors */
    expect_fail("export --out n.safetensors", "missing option '--checkpoint CK'");
    expect_fail("export --checkpoint ck.ckpt", "missing option '--out FILE'");
    expect_fail("export --checkpoint --out n.safetensors", "--checkpoint");
    expect_fail("export --checkpoint ck.ckpt --out n.safetensors extra", "extra");
    expect_fail("export --checkpoint ck.ckpt --out n.safetensors --force --force", "twice");
    /* (the reason is the library's; the line names the option and the path once) */
    expect_fail("export --checkpoint ck.ckpt --out /nonexistent/dir/n.safetensors",
                "tgrad export: --out");
    expect_fail("export --checkpoint ck.ckpt --out /nonexistent/dir/n.safetensors",
                "'/nonexistent/dir/n.safetensors'");
    ck_assert_int_eq(n_entries(), entries + 1); /* + fifo; no n.safetensors, no temporaries */
}
END_TEST

/* ---- hostile checkpoint metadata ---------------------------------------------------------- */
static int edited_case; /* the fixture write_edited starts from: 0 the LM */

/* Write dir/h.ckpt: the fixture with metadata @p key set to @p value (NULL: removed). */
static void write_edited(const char *key, const char *value)
{
    char ck[512], p[512];
    fixture_path(ck, sizeof ck, cases[edited_case].name, ".ckpt");
    snprintf(p, sizeof p, "%s/h.ckpt", dir);
    bool found = tu_st_rewrite(ck, p, &(tu_st_edit){.key = key, .value = value});
    ck_assert_msg(found, "the fixture has no metadata '%s'", key);
}

static void expect_meta_fail(const char *key, const char *value, const char *needle)
{
    write_edited(key, value);
    expect_fail("export --checkpoint h.ckpt --out h.safetensors", needle);
    char p[512];
    struct stat sb;
    snprintf(p, sizeof p, "%s/h.safetensors", dir);
    ck_assert_msg(stat(p, &sb) != 0, "%s=%s: an output was written", key, value);
}

START_TEST(test_hostile_metadata)
{
    static const char *const ints[] = {"model.layers", "model.d_model", "model.heads",
                                       "model.d_ff", "model.seq_len", "model.vocab_size"};
    static const char *const bad[] = {"4611686018427387904", "9223372036854775808",
                                      "-1", "-4611686018427387904", "nan", "inf", "1e999",
                                      "abc", "", "1.5", " 8", "0x8"};
    for (size_t i = 0; i < sizeof ints / sizeof ints[0]; i++) {
        for (size_t j = 0; j < sizeof bad / sizeof bad[0]; j++) {
            char needle[160];
            snprintf(needle, sizeof needle, "checkpoint field '%s' '%s': expected an integer "
                     "from", ints[i], bad[j]);
            expect_meta_fail(ints[i], bad[j], needle);
        }
        char needle[160];
        snprintf(needle, sizeof needle, "it lacks the field '%s'", ints[i]);
        expect_meta_fail(ints[i], NULL, needle);
    }
    expect_meta_fail("model.d_model", "0", "from 1 to 65536");
    expect_meta_fail("model.vocab_size", "257", "from 1 to 256");
    expect_meta_fail("model.layers", "1025", "from 1 to 1024");
    expect_meta_fail("model.norm_first", "2", "'model.norm_first' '2': expected 0 or 1");
    expect_meta_fail("model.causal", "yes", "'model.causal' 'yes': expected 0 or 1");
    expect_meta_fail("model.tie_weights", "nan", "expected 0 or 1");
    expect_meta_fail("model.activation", "tanh", "'tanh': expected relu or gelu");
    expect_meta_fail("model.pos", "rope", "expected learned or sinusoidal");
    expect_meta_fail("model.dropout", "nan", "'model.dropout' 'nan': expected a number in [0, 1)");
    expect_meta_fail("model.dropout", "1", "[0, 1)");
    expect_meta_fail("model.dropout", "-1e300", "[0, 1)");
    expect_meta_fail("model.dropout", "inf", "[0, 1)");
    expect_meta_fail("model.dtype", "f16", "expected f32 or f64");
    expect_meta_fail("optim.step", "-1", "'optim.step' '-1'");
    expect_meta_fail("optim.step", "4611686018427387904", "'optim.step' '4611686018427387904'");
    expect_meta_fail("optim.step", NULL, "it lacks the field 'optim.step'");
    expect_meta_fail("rng", NULL, "it lacks the field 'rng'");
    expect_meta_fail("rng", "00", "'rng' '00': expected 64 hex digits");
    expect_meta_fail("train.steps", "nan", "'train.steps' 'nan'");
    expect_meta_fail("train.lr", "-1", "'train.lr' '-1'");
    expect_meta_fail("data.val_fraction", "1", "'data.val_fraction' '1'");
    expect_meta_fail("data.position", "-1", "'data.position' '-1'");
    expect_meta_fail("data.mode", "both", "expected text, task or pairs");
    expect_meta_fail("data.mode", "task", "model.causal 1 but data.mode task");
    expect_meta_fail("data.vocab", "zz", "'data.vocab' 'zz': expected");
    expect_meta_fail("data.vocab", NULL, "it lacks the field 'data.vocab'");
    /* 54 bytes, but not hex / not sorted */
    char v[200];
    memset(v, 'a', 108);
    v[108] = 0;
    v[1] = 'g';
    expect_meta_fail("data.vocab", v, "distinct bytes in increasing order as hex");
    memset(v, 'a', 108);
    expect_meta_fail("data.vocab", v, "distinct bytes in increasing order as hex");
    expect_meta_fail("format", "tgrad-checkpoint-999", "expected 'tgrad-checkpoint-1'");
    expect_meta_fail("format", NULL, "not a tgrad checkpoint");
    /* valid values that disagree with the tensors */
    expect_meta_fail("model.d_model", "16",
                     "tensor 'tok_emb.weight' is (54, 8) in the file, but model.vocab_size 54 "
                     "and model.d_model 16 need (54, 16)");
    expect_meta_fail("model.heads", "3", "model.heads 3 and model.d_model 8 disagree");
    expect_meta_fail("model.layers", "3",
                     "the file lacks tensor 'layers.2.self_attn.in_proj_weight'");
    expect_meta_fail("model.layers", "1", "the file has tensor "
                                          "'layers.1.self_attn.in_proj_weight' but model.layers "
                                          "is 1");
    expect_meta_fail("model.layers", "1024", "the file lacks tensor 'layers.2.");
    expect_meta_fail("model.seq_len", "1048576", "from 2 to 65536");
    expect_meta_fail("model.seq_len", "60000", "tensor 'pos_emb.weight' is (8, 8) in the file");
    expect_meta_fail("model.d_ff", "1048576", "from 1 to 262144");
    expect_meta_fail("model.d_ff", "64", "tensor 'layers.0.linear1.weight' is (16, 8) in the "
                                         "file");
    expect_meta_fail("model.pos", "sinusoidal", "the file has tensor 'pos_emb.weight' but "
                                                "model.pos is sinusoidal");
    expect_meta_fail("model.tie_weights", "1", "the file has tensor 'head.weight' but "
                                               "model.tie_weights is 1");
    expect_meta_fail("model.vocab_size", "53", "model.vocab_size 53 but data.vocab holds 54");
    /* the tensors' dtype is what model.dtype says */
    expect_meta_fail("model.dtype", "f64", "is F32 in the file, but model.dtype is f64");
}
END_TEST

/* The encoder-decoder's own fields: model.decoder_layers against the tensors, and a
 * vocabulary that is not the digits and BOS. */
START_TEST(test_hostile_seq2seq_metadata)
{
    edited_case = 2;
    expect_meta_fail("model.decoder_layers", NULL, "it lacks the field 'model.decoder_layers'");
    expect_meta_fail("model.decoder_layers", "0", "'model.decoder_layers' '0'");
    expect_meta_fail("model.decoder_layers", "abc", "'model.decoder_layers' 'abc'");
    expect_meta_fail("model.decoder_layers", "3", "the file lacks tensor 'decoder.layers.2.");
    expect_meta_fail("model.decoder_layers", "1", "the file has tensor 'decoder.layers.1.");
    expect_meta_fail("model.layers", "2", "the file lacks tensor 'encoder.layers.1.");
    expect_meta_fail("model.vocab_size", "10", "model.vocab_size");
    expect_meta_fail("model.arch", "encoder", NULL);
    /* a translation checkpoint: its tokenizer is validated before it is copied */
    edited_case = 5; /* export_pairs_spm */
    expect_meta_fail("tokenizer.model", "AAA!", "tokenizer.model");
    expect_meta_fail("tokenizer.model", NULL, "tokenizer.model");
    expect_meta_fail("tokenizer.kind", NULL, "tokenizer.kind");
    expect_meta_fail("tokenizer.kind", "words", "tokenizer.kind");
    expect_meta_fail("model.scale_embeddings", "2", "model.scale_embeddings");
    edited_case = 0;
}
END_TEST

int main(void)
{
    Suite *s = suite_create("export");
    TCase *tc = tcase_create("export");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_set_timeout(tc, 240);
    tcase_add_loop_test(tc, test_round_trip, 0, N_CASES);
    tcase_add_loop_test(tc, test_logits_match_pytorch, 0, 2 * N_CASES);
    tcase_add_loop_test(tc, test_pairs_model_load, 0, 2);
    tcase_add_test(tc, test_refusals);
    tcase_add_test(tc, test_hostile_metadata);
    tcase_add_test(tc, test_hostile_seq2seq_metadata);
    suite_add_tcase(s, tc);
    return tu_run(s);
}
