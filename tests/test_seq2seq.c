#define _DEFAULT_SOURCE
/*
 * test_seq2seq.c - the sequence-to-sequence task end to end, through the
 * tgrad program: `tgrad train --arch seq2seq` learns a tiny task in well under a second, its
 * checkpoints resume bit-exactly (losses and every tensor), `tgrad sample --source` decodes,
 * and mistakes (architecture/task combinations, --source on other checkpoints, bad digits,
 * seq2seq checkpoint fields) are one line on stderr and a non-zero exit. The library side
 * (greedy decoding of the model's logits) is checked against tg_transformer_forward_seq2seq.
 */
#include "testutil.h"
#include "tgrad_train.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static char dir[256];

static void setup(void) { tu_mkdtemp(dir, sizeof dir, "seq2seq"); }
static void teardown(void) { tu_rm_tree(dir); }
static int run(const char *args) { return tu_run_tgrad(dir, args, 300, NULL); }
static char *slurp(const char *name) { return tu_slurp_in(dir, name, NULL); }

/* A tiny model: trains in a fraction of a second. */
#define TINY "--arch seq2seq --d-model 16 --heads 2 --d-ff 32 --seq-len 6 --batch 32 " \
             "--layers 1 --warmup 20 --lr 1e-2 --threads 1"

/* `tgrad <args>` must fail with one line on stderr containing @p needle. */
static void expect_refusal(const char *args, const char *needle)
{
    int rc = run(args);
    char *err = slurp("err.txt");
    ck_assert_msg(rc > 0, "'%s' exited with %d: %s", args, rc, err ? err : "");
    ck_assert_ptr_nonnull(err);
    size_t len = strlen(err);
    ck_assert_msg(tu_count_lines(err) == 1 && len > 0 && err[len - 1] == '\n',
                  "'%s' printed %d lines on stderr: %s", args, tu_count_lines(err), err);
    ck_assert_msg(strstr(err, needle), "'%s': '%s' lacks '%s'", args, err, needle);
    free(err);
}

/* The exact-sequence accuracy of the summary line, in percent. */
static double summary_accuracy(void)
{
    char *out = slurp("out.txt");
    ck_assert_ptr_nonnull(out);
    const char *p = strstr(out, "exact-sequence accuracy ");
    ck_assert_msg(p != NULL, "no accuracy in: %s", out);
    double acc = atof(p + strlen("exact-sequence accuracy "));
    ck_assert_msg(strstr(out, "token accuracy"), "no token accuracy in: %s", out);
    free(out);
    return acc;
}

START_TEST(test_tiny_copy_learns)
{
    ck_assert_int_eq(run("train " TINY " --task copy --steps 400 --eval-every 25 --target-acc 0.98 --quiet "
                         "--checkpoint c.ckpt"), 0);
    double acc = summary_accuracy();
    ck_assert_msg(acc >= 98.0, "copy: exact-sequence accuracy %g%%", acc);
    /* the checkpoint decodes: copy gives the source back */
    ck_assert_int_eq(run("sample --checkpoint c.ckpt --source 907142"), 0);
    char *out = slurp("out.txt");
    ck_assert_str_eq(out, "907142\n");
    free(out);
}
END_TEST

START_TEST(test_tiny_reverse_learns_and_samples)
{
    ck_assert_int_eq(run("train " TINY " --task reverse --steps 400 --eval-every 25 --target-acc 0.98 --quiet "
                         "--checkpoint r.ckpt"), 0);
    ck_assert_msg(summary_accuracy() >= 98.0, "reverse did not learn");
    ck_assert_int_eq(run("sample --checkpoint r.ckpt --source 123450 --threads 2"), 0);
    char *out = slurp("out.txt");
    ck_assert_str_eq(out, "054321\n");
    free(out);
}
END_TEST

/* The documented command with its defaults: >= 99% of held-out sequences decoded
 * exactly (it stops at the first evaluation that reaches it; ~3 s of CPU on 2 threads). */
START_TEST(test_default_reverse_reaches_target)
{
    ck_assert_int_eq(run("train --arch seq2seq --task reverse --quiet"), 0);
    double acc = summary_accuracy();
    ck_assert_msg(acc >= 99.0, "reverse: exact-sequence accuracy %g%%", acc);
}
END_TEST

/* The target is not reached in 3 steps: exit 3, as the other tasks. */
START_TEST(test_target_not_reached)
{
    ck_assert_int_eq(run("train " TINY " --task sort --steps 3 --quiet"), 3);
    char *err = slurp("err.txt");
    ck_assert_ptr_nonnull(strstr(err, "not reached"));
    free(err);
}
END_TEST

/* CSV columns step,train_loss,val_loss,lr,val_acc (tokens_per_s, the 5th, dropped: it is
 * timing). */
static char *csv_without_speed(const char *name)
{
    char *c = slurp(name);
    ck_assert_ptr_nonnull(c);
    char *out = malloc(strlen(c) + 1), *o = out;
    for (char *line = strtok(c, "\n"); line; line = strtok(NULL, "\n")) {
        char *speed = line; /* the 5th field, from its comma to the next or the end */
        for (int k = 0; k < 4 && speed; k++)
            speed = strchr(speed + (k > 0), ',');
        if (speed)
            memmove(speed, speed + strcspn(speed + 1, ",") + 1,
                    strlen(speed + strcspn(speed + 1, ",") + 1) + 1);
        o += sprintf(o, "%s\n", line);
    }
    free(c);
    return out;
}

/* 60 steps straight == 40 + checkpoint + resume + 20, bitwise (losses, every tensor). */
START_TEST(test_resume_bit_exact)
{
    const char *m = "train " TINY " --task reverse --decoder-layers 2 --steps 60 --dropout 0.1 "
                    "--eval-every 20 --target-acc 0 --quiet";
    char a[1024];
    snprintf(a, sizeof a, "%s --checkpoint a.ckpt --log a.csv", m);
    ck_assert_int_eq(run(a), 0);
    snprintf(a, sizeof a, "%s --checkpoint b.ckpt --log b.csv --stop-after 40", m);
    ck_assert_int_eq(run(a), 0);
    snprintf(a, sizeof a, "%s --resume b.ckpt --log b.csv", m);
    ck_assert_msg(run(a) == 0, "resume failed: %s", slurp("err.txt"));
    /* resumed without the model options: they come from the checkpoint */
    ck_assert_int_eq(run("train --resume b.ckpt --checkpoint c.ckpt --steps 70 --quiet "
                         "--target-acc 0"), 0);
    char *ca = csv_without_speed("a.csv"), *cb = csv_without_speed("b.csv");
    ck_assert_int_eq(tu_count_lines(ca), 61);
    ck_assert_msg(strcmp(ca, cb) == 0, "loss sequences differ:\n%s\n%s", ca, cb);
    free(ca);
    free(cb);
    tg_ctx *ctx = tg_ctx_new();
    char pa[512], pb[512];
    tu_path(pa, sizeof pa, dir, "a.ckpt");
    tu_path(pb, sizeof pb, dir, "b.ckpt");
    tg_safetensors *sa = tg_safetensors_read(ctx, pa), *sb = tg_safetensors_read(ctx, pb);
    ck_assert_ptr_nonnull(sa);
    ck_assert_ptr_nonnull(sb);
    ck_assert_str_eq(tg_safetensors_meta_get(sa, "model.arch"), "seq2seq");
    ck_assert_str_eq(tg_safetensors_meta_get(sa, "model.decoder_layers"), "2");
    ck_assert_str_eq(tg_safetensors_meta_get(sa, "model.vocab_size"), "11");
    ck_assert_ptr_nonnull(tg_safetensors_find(sa, "decoder.layers.1.multihead_attn.in_proj_weight"));
    ck_assert_ptr_nonnull(tg_safetensors_find(sa, "adam.m.encoder.norm.weight"));
    ck_assert_int_eq(tg_safetensors_count(sa), tg_safetensors_count(sb));
    for (int64_t i = 0; i < tg_safetensors_count(sa); i++) {
        tg_tensor *x = tg_safetensors_tensor(sa, i);
        tg_tensor *y = tg_safetensors_find(sb, tg_safetensors_name(sa, i));
        ck_assert_ptr_nonnull(y);
        ck_assert_msg(memcmp(tg_tensor_data(x), tg_tensor_data(y),
                             (size_t)tg_tensor_numel(x) * tg_dtype_size(tg_tensor_dtype(x))) == 0,
                      "tensor %s differs", tg_safetensors_name(sa, i));
    }
    tg_ctx_free(ctx);
}
END_TEST

/* Evaluation and sample through the KV cache give what the uncached path gives: the same log
 * (held-out loss and accuracy at every evaluation) and the same decoded digits, for 1 and 3
 * threads. */
START_TEST(test_cache_matches_no_cache)
{
    const char *m = "train " TINY " --task reverse --steps 75 --eval-every 25 --target-acc 0 "
                    "--quiet";
    char a[1024];
    snprintf(a, sizeof a, "%s --log a.csv --checkpoint r.ckpt", m);
    ck_assert_int_eq(run(a), 0);
    char *out_a = slurp("out.txt");
    snprintf(a, sizeof a, "%s --log b.csv --no-cache", m);
    ck_assert_int_eq(run(a), 0);
    char *out_b = slurp("out.txt");
    char *ca = csv_without_speed("a.csv"), *cb = csv_without_speed("b.csv");
    ck_assert_msg(strcmp(ca, cb) == 0, "logs differ:\n%s\n%s", ca, cb);
    /* the summary lines agree from the accuracy on (before it: wall time and tokens/s) */
    char *pa = strstr(out_a, "accuracy"), *pb = strstr(out_b, "accuracy");
    ck_assert(pa && pb);
    *strchr(pa, '\n') = 0;
    *strchr(pb, '\n') = 0;
    ck_assert_str_eq(pa, pb);
    free(ca);
    free(cb);
    free(out_a);
    free(out_b);
    setenv("TGRAD_OVERSUBSCRIBE", "1", 1); /* --threads 3 even on fewer CPUs */
    static const char *const sources[] = {"000000", "123456", "990301", "555551"};
    for (size_t i = 0; i < sizeof sources / sizeof sources[0]; i++) {
        char *got[4];
        for (int k = 0; k < 4; k++) {
            snprintf(a, sizeof a, "sample --checkpoint r.ckpt --source %s --threads %d%s",
                     sources[i], k % 2 ? 3 : 1, k < 2 ? "" : " --no-cache");
            ck_assert_int_eq(run(a), 0);
            got[k] = slurp("out.txt");
            ck_assert_int_eq((int)strlen(got[k]), 7);
        }
        for (int k = 1; k < 4; k++)
            ck_assert_str_eq(got[k], got[0]);
        for (int k = 0; k < 4; k++)
            free(got[k]);
    }
}
END_TEST

START_TEST(test_cli_errors)
{
    tu_write_corpus(dir, "c.txt", 400);
    expect_refusal("train --arch seq2seq --text c.txt", "--arch seq2seq");
    expect_refusal("train --arch encoder --text c.txt", "--arch encoder");
    expect_refusal("train --arch lm --task copy", "--arch lm");
    expect_refusal("train --arch lm --steps 1", "--arch lm needs --text");
    expect_refusal("train --arch transformer", "--arch");
    expect_refusal("train --task copy --decoder-layers 2 --steps 1", "--decoder-layers 2 needs "
                   "--arch seq2seq");
    expect_refusal("train --text c.txt --decoder-layers 2 --steps 1", "--decoder-layers");
    expect_refusal("train --arch seq2seq --decoder-layers 0", "--decoder-layers");
    /* a seq2seq checkpoint: other architectures and decoder depths are another config */
    ck_assert_int_eq(run("train " TINY " --task copy --steps 2 --target-acc 0 --quiet "
                         "--checkpoint s.ckpt"), 0);
    expect_refusal("train --resume s.ckpt --arch encoder --steps 5", "model.arch");
    expect_refusal("train --resume s.ckpt --decoder-layers 3 --steps 5",
                   "model.decoder_layers");
    expect_refusal("train --resume s.ckpt --task sort --steps 5", "data.task");
    /* a seq2seq checkpoint exports (nn.Transformer's names); its export is held to the same
     * --source rules */
    ck_assert_int_eq(run("export --checkpoint s.ckpt --out e.safetensors"), 0);
    expect_refusal("sample --checkpoint e.safetensors --source 12345", "exactly 6");
    /* sample: --source is for seq2seq checkpoints only, with exactly seq_len digits */
    expect_refusal("sample --checkpoint s.ckpt", "--source");
    expect_refusal("sample --checkpoint s.ckpt --source 12345", "exactly 6");
    expect_refusal("sample --checkpoint s.ckpt --source 1234567", "exactly 6");
    expect_refusal("sample --checkpoint s.ckpt --source 12x456", "'x' at offset 2");
    expect_refusal("sample --checkpoint s.ckpt --source ' 23456'", "offset 0");
    expect_refusal("sample --checkpoint s.ckpt --source -12345", "--source");
    expect_refusal("sample --checkpoint s.ckpt --source 123456 --prompt hi", "--prompt");
    ck_assert_int_eq(run("train --text c.txt --d-model 8 --heads 2 --d-ff 16 --seq-len 8 "
                         "--batch 2 --layers 1 --steps 2 --quiet --checkpoint t.ckpt"), 0);
    expect_refusal("sample --checkpoint t.ckpt --source 123", "not a seq2seq checkpoint");
    ck_assert_int_eq(run("train --task copy --d-model 8 --heads 2 --d-ff 16 --seq-len 4 "
                         "--batch 2 --layers 1 --steps 2 --target-acc 0 --quiet "
                         "--checkpoint e.ckpt"), 0);
    expect_refusal("sample --checkpoint e.ckpt --source 1234", "nothing to sample");
    expect_refusal("train --resume e.ckpt --arch seq2seq --steps 5", "model.arch");
}
END_TEST

/* Checkpoint fields of the seq2seq model, each edited to a wrong but well-formed value. */
START_TEST(test_checkpoint_fields)
{
    ck_assert_int_eq(run("train " TINY " --task copy --steps 2 --target-acc 0 --quiet "
                         "--checkpoint s.ckpt"), 0);
    static const struct {
        const char *key, *value, *needle;
    } cases[] = {
        {"model.arch", "lm", "model.arch"},
        {"model.arch", "encoder", "model.arch"},
        {"model.arch", "decoder", "model.arch"},
        {"model.decoder_layers", NULL, "model.decoder_layers"},
        {"model.decoder_layers", "0", "model.decoder_layers"},
        {"model.decoder_layers", "2", "decoder.layers.1"},
        {"model.decoder_layers", "x", "model.decoder_layers"},
        {"model.vocab_size", "10", "model.vocab_size"},
        {"model.layers", "2", "encoder.layers.1"},
    };
    char ps[512], pd[512];
    tu_path(ps, sizeof ps, dir, "s.ckpt");
    tu_path(pd, sizeof pd, dir, "bad.ckpt");
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        tu_st_rewrite(ps, pd, &(tu_st_edit){.key = cases[i].key, .value = cases[i].value});
        expect_refusal("train --resume bad.ckpt --steps 6 --quiet", cases[i].needle);
        expect_refusal("sample --checkpoint bad.ckpt --source 123456", cases[i].needle);
    }
    /* a tensor of a decoder layer missing */
    tu_st_rewrite(ps, pd, &(tu_st_edit){.drop = "decoder.layers.0.norm3.bias"});
    expect_refusal("sample --checkpoint bad.ckpt --source 123456", "decoder.layers.0.norm3.bias");
    /* an encoder checkpoint claiming decoder layers */
    ck_assert_int_eq(run("train --task copy --d-model 8 --heads 2 --d-ff 16 --seq-len 4 "
                         "--batch 2 --layers 1 --steps 2 --target-acc 0 --quiet "
                         "--checkpoint e.ckpt"), 0);
    tu_path(ps, sizeof ps, dir, "e.ckpt");
    tu_st_rewrite(ps, pd, &(tu_st_edit){.key = "model.decoder_layers", .value = "2"});
    expect_refusal("train --resume bad.ckpt --steps 6 --quiet", "model.decoder_layers 2");
    /* an older checkpoint without model.arch is still the encoder */
    tu_st_rewrite(ps, pd, &(tu_st_edit){.key = "model.arch", .value = NULL});
    ck_assert_int_eq(run("train --resume bad.ckpt --checkpoint x.ckpt --steps 3 --quiet"), 0);
}
END_TEST

/* The library: greedy decoding from tg_transformer_forward_seq2seq's logits never looks at
 * target positions beyond the one decoded (the causal mask): changing them leaves the logits
 * up to that position bitwise unchanged. */
START_TEST(test_causal_prefix_logits)
{
    tg_ctx *ctx = tu_ctx_new();
    tg_transformer m;
    tg_transformer_config c;
    memset(&c, 0, sizeof c);
    c.vocab_size = 11;
    c.max_seq_len = 5;
    c.n_layers = 1;
    c.n_decoder_layers = 2;
    c.layer = tg_encoder_config_default(8, 2);
    c.layer.d_ff = 16;
    c.layer.norm_first = true;
    ck_assert_int_eq(tg_transformer_init(ctx, &m, TG_F64, &c), TG_OK);
    tg_tensor *src = tg_input(ctx, TG_I32, TG_DIMS(2, 5), "src");
    tg_tensor *tgt = tg_input(ctx, TG_I32, TG_DIMS(2, 5), "tgt");
    tg_tensor *lg = tg_transformer_forward_seq2seq(ctx, &m, src, tgt, NULL, NULL);
    tg_graph_opts go = {.no_grad = true};
    tg_graph *g = tg_graph_new_opts(ctx, &lg, 1, &go);
    ck_assert_ptr_nonnull(g);
    int32_t s[10] = {1, 2, 3, 4, 5, 9, 8, 7, 6, 0};
    int32_t t1[10] = {10, 3, 3, 3, 3, 10, 1, 1, 1, 1}, t2[10] = {10, 3, 7, 0, 2, 10, 1, 4, 5, 6};
    ck_assert_int_eq(tg_tensor_set_data(src, s, TG_I32, 10), TG_OK);
    double a[2 * 5 * 11], b[2 * 5 * 11];
    ck_assert_int_eq(tg_tensor_set_data(tgt, t1, TG_I32, 10), TG_OK);
    ck_assert_int_eq(tg_graph_forward(g), TG_OK);
    ck_assert_int_eq(tg_tensor_get_data(lg, a, TG_F64, 110), TG_OK);
    ck_assert_int_eq(tg_tensor_set_data(tgt, t2, TG_I32, 10), TG_OK);
    ck_assert_int_eq(tg_graph_forward(g), TG_OK);
    ck_assert_int_eq(tg_tensor_get_data(lg, b, TG_F64, 110), TG_OK);
    /* positions 0 and 1 see the same prefix (10, 3) / (10, 1); later ones differ */
    for (int bb = 0; bb < 2; bb++)
        for (int i = 0; i < 2 * 11; i++)
            ck_assert_msg(a[bb * 55 + i] == b[bb * 55 + i], "batch %d logit %d", bb, i);
    ck_assert(memcmp(a + 2 * 11, b + 2 * 11, 3 * 11 * sizeof(double)) != 0);
    tu_ctx_free(ctx);
}
END_TEST

static Suite *suite(void)
{
    Suite *s = suite_create("seq2seq");
    TCase *tc = tcase_create("cli");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_set_timeout(tc, 300);
    tcase_add_test(tc, test_tiny_copy_learns);
    tcase_add_test(tc, test_tiny_reverse_learns_and_samples);
    tcase_add_test(tc, test_default_reverse_reaches_target);
    tcase_add_test(tc, test_target_not_reached);
    tcase_add_test(tc, test_resume_bit_exact);
    tcase_add_test(tc, test_cache_matches_no_cache);
    tcase_add_test(tc, test_cli_errors);
    tcase_add_test(tc, test_checkpoint_fields);
    suite_add_tcase(s, tc);
    TCase *lib = tcase_create("library");
    tcase_add_test(lib, test_causal_prefix_logits);
    suite_add_tcase(s, lib);
    return s;
}

int main(void) { return tu_run(suite()); }
