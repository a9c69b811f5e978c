#define _GNU_SOURCE
/*
 * test_train_cli.c - `tgrad train` and `tgrad sample` against hostile and mistaken input, run as
 * a user would run them (the tgrad binary: TG_TGRAD_EXE, overridable by the environment
 * variable of the same name). Every refusal must be exactly one line on stderr, a non-zero exit,
 * and quick: each run has a timeout and is killed (and the test failed) if it hangs.
 *
 * Hostile inputs covered: huge sizes (bounded options, no wrap of the loss-curve buffer), NaN
 * logits in sample, checkpoint fields validated like the command line, a checkpoint's claimed
 * config checked against its tensors (memory estimate), FIFOs and devices that never block,
 * resume saving back (the interrupt prints the resume command), --checkpoint never silently
 * replacing another file, output paths checked up front (the plot respects the umask), the live
 * line fitting the terminal, option tables (messages, --help), and --save-every.
 */
#include "testutil.h"
#include "tgrad_train.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <pty.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/inotify.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static char dir[256];

static const char *exe(void) { return tu_tgrad_exe(); }
static void setup(void) { tu_mkdtemp(dir, sizeof dir, "train_cli"); }
static void teardown(void) { tu_rm_tree(dir); }
#define TIMED_OUT TU_TIMED_OUT
/* A shell command in dir (stdout, stderr: out.txt, err.txt), killed after @p timeout_s. */
static int run_sh(const char *cmd, double timeout_s, double *secs)
{
    return tu_run_sh(dir, cmd, timeout_s, secs);
}
/* `tgrad <args>` with a timeout. */
static int run_t(const char *args, double timeout_s, double *secs)
{
    return tu_run_tgrad(dir, args, timeout_s, secs);
}
static int run(const char *args) { return run_t(args, 120, NULL); }
static char *slurp(const char *name, size_t *len) { return tu_slurp_in(dir, name, len); }
static void path_of(const char *name, char *p, size_t n) { tu_path(p, n, dir, name); }
#define count_lines tu_count_lines
/* A background job of `sh -c` starts with SIGINT ignored, and tgrad keeps a SIGINT it inherits
 * as ignored ignored; a run that stands for a foreground one (Ctrl-C) gets it at its default. */
#define SIGINT_DFL "env --default-signal=INT "

/* `tgrad <args>` must fail within @p timeout_s with exactly one line on stderr containing
 * @p needle (NULL: any) and nothing else. */
static void expect_refusal_t(const char *args, const char *needle, double timeout_s)
{
    double secs;
    int rc = run_t(args, timeout_s, &secs);
    char *err = slurp("err.txt", NULL);
    ck_assert_msg(rc != TIMED_OUT, "'%s' did not finish in %.0f s (hang?)", args, timeout_s);
    ck_assert_msg(rc > 0, "'%s' exited with %d (want an error exit; negative: a signal): %s",
                  args, rc, err ? err : "");
    ck_assert_ptr_nonnull(err);
    size_t len = strlen(err);
    ck_assert_msg(count_lines(err) == 1 && len > 0 && err[len - 1] == '\n',
                  "'%s' printed %d lines on stderr: %s", args, count_lines(err), err);
    ck_assert_msg(!needle || strstr(err, needle), "'%s': '%s' lacks '%s'", args, err, needle);
    free(err);
}

static void expect_refusal(const char *args, const char *needle)
{
    expect_refusal_t(args, needle, 20);
}

static void write_file(const char *name, const char *text) { tu_write_file(dir, name, text); }
/* A small English-like text. */
static void write_corpus(const char *name) { tu_write_corpus(dir, name, 2000); }

/* Tiny models: every run below takes milliseconds. */
#define TEXT_MODEL "--text c.txt --d-model 16 --heads 2 --d-ff 32 --seq-len 8 --batch 4 " \
                   "--layers 1 --threads 1"
#define TASK_MODEL "--task copy --d-model 8 --heads 2 --d-ff 16 --seq-len 4 --batch 4 " \
                   "--layers 1 --threads 1"

/* ---- checkpoint rewriting (the library's own reader and writer) ------------------------- */

/* Copy checkpoint @p src to @p dst (in dir) with metadata @p key set to @p value (NULL:
 * removed; a key not present is added), without tensor @p drop (NULL: keep all), and with
 * every element of tensor @p poison (NULL: none) set to NaN. */
static void rewrite(const char *src, const char *dst, const char *key, const char *value,
                    const char *drop, const char *poison)
{
    char ps[512], pd[512];
    path_of(src, ps, sizeof ps);
    path_of(dst, pd, sizeof pd);
    tu_st_rewrite(ps, pd, &(tu_st_edit){.key = key, .value = value, .drop = drop,
                                        .poison = poison});
}

/* A metadata value of checkpoint @p name (copied into buf), or NULL. */
static const char *meta_of(const char *name, const char *key, char *buf, size_t n)
{
    char p[512];
    path_of(name, p, sizeof p);
    tg_ctx *ctx = tg_ctx_new();
    tg_safetensors *st = tg_safetensors_read(ctx, p);
    const char *v = st ? tg_safetensors_meta_get(st, key) : NULL;
    if (v)
        snprintf(buf, n, "%s", v);
    tg_ctx_free(ctx);
    return v ? buf : NULL;
}

static void make_text_ckpt(const char *name, const char *extra)
{
    write_corpus("c.txt");
    char a[1024];
    snprintf(a, sizeof a, "train " TEXT_MODEL " --steps 3 --eval-every 2 --quiet "
             "--checkpoint %s %s", name, extra ? extra : "");
    ck_assert_msg(run(a) == 0, "%s", slurp("err.txt", NULL));
}

static void make_task_ckpt(const char *name)
{
    char a[1024];
    snprintf(a, sizeof a, "train " TASK_MODEL " --steps 3 --eval-every 2 --target-acc 0 "
             "--quiet --checkpoint %s", name);
    ck_assert_msg(run(a) == 0, "%s", slurp("err.txt", NULL));
}

/* ---- defect 14: option tables --------------------------------------------------------- */

/* Values no numeric option accepts. */
static const char *const hostile_numbers[] = {
    "99999999999999999999", "-4611686018427387904", "-1", "nan", "inf", "-inf", "1e400",
    "-1e300", "abc", "", "0x10", "+1", " 1", "1 ", "2abc",
};
#define N_HOSTILE (sizeof hostile_numbers / sizeof hostile_numbers[0])

/* Every numeric option with a value just past its bound. */
static const struct {
    const char *cmd, *opt, *past;
} numeric_options[] = {
    {"train", "layers", "1025"},        {"train", "d-model", "65537"},
    {"train", "heads", "1025"},         {"train", "d-ff", "262145"},
    {"train", "seq-len", "1"},          {"train", "seq-len", "65537"},
    {"train", "batch", "0"},            {"train", "batch", "65537"},
    {"train", "steps", "0"},            {"train", "steps", "1000000001"},
    {"train", "warmup", "1000000001"},  {"train", "eval-every", "0"},
    {"train", "save-every", "0"},       {"train", "stop-after", "0"},
    {"train", "seed", "9223372036854775808"}, {"train", "threads", "0"},
    {"train", "threads", "1025"},       {"train", "lr", "10.5"},
    {"train", "min-lr", "11"},          {"train", "weight-decay", "11"},
    {"train", "clip", "2e6"},           {"train", "momentum", "1.5"},
    {"train", "dropout", "1"},          {"train", "val-fraction", "1"},
    {"train", "target-acc", "1.01"},    {"train", "beta2", "1"},
    {"train", "eps", "0"},              {"train", "eps", "1.5"},
    {"train", "label-smoothing", "1.01"}, {"sample", "tokens", "1000000001"},
    {"sample", "temperature", "101"},   {"sample", "top-k", "257"},
    {"sample", "seed", "9223372036854775808"}, {"sample", "threads", "0"},
};

START_TEST(test_numeric_options_bounded)
{
    char a[512], needle[64];
    for (size_t i = 0; i < sizeof numeric_options / sizeof numeric_options[0]; i++) {
        const char *pre = strcmp(numeric_options[i].cmd, "sample") ? "" : "--checkpoint x.ckpt ";
        snprintf(needle, sizeof needle, "--%s", numeric_options[i].opt);
        snprintf(a, sizeof a, "%s %s--%s '%s'", numeric_options[i].cmd, pre,
                 numeric_options[i].opt, numeric_options[i].past);
        expect_refusal_t(a, needle, 5);
        for (size_t k = 0; k < N_HOSTILE; k++) {
            snprintf(a, sizeof a, "%s %s--%s '%s'", numeric_options[i].cmd, pre,
                     numeric_options[i].opt, hostile_numbers[k]);
            expect_refusal_t(a, needle, 5);
            /* the message quotes what was given */
            char *err = slurp("err.txt", NULL);
            char quoted[80];
            snprintf(quoted, sizeof quoted, "'%s'", hostile_numbers[k]);
            ck_assert_msg(strstr(err, quoted), "'%s': '%s' does not quote the value", a, err);
            free(err);
        }
    }
    /* and the known reproducers, by name */
    expect_refusal_t("train --layers 4611686018427387904", "from 1 to 1024", 5);
    expect_refusal_t("train --steps 4611686018427387904", "'4611686018427387904'", 5);
    expect_refusal_t("sample --checkpoint x.ckpt --tokens 4611686018427387904",
                     "'4611686018427387904'", 5);
}
END_TEST

START_TEST(test_option_messages)
{
    /* a missing value does not swallow the next option */
    expect_refusal("train --steps --d-model 64", "needs a value");
    expect_refusal("train --steps", "needs a value");
    /* the value, not a placeholder */
    expect_refusal("train --dropout 1", "--dropout '1'");
    expect_refusal("train --val-fraction 1", "--val-fraction '1'");
    /* --text DIR says it is a directory */
    write_file("d_marker", "x");
    char p[512];
    path_of("sub", p, sizeof p);
    ck_assert_int_eq(mkdir(p, 0755), 0);
    expect_refusal("train --text sub", "directory");
    expect_refusal("train --bogus", "--bogus");
    expect_refusal("train --ste 3", "--steps");
    expect_refusal("train --steps 3 --steps 4", "twice");
    expect_refusal("train --text c.txt --task copy", "--task");
    expect_refusal("train --optimizer rmsprop", "adamw, adam or sgd");
    expect_refusal("train --task juggle", "copy, reverse or sort");
    expect_refusal("train --activation tanh", "relu or gelu");
    expect_refusal("train --pos rotary", "learned or sinusoidal");
    expect_refusal("train --dtype f16", "f32 or f64");
    expect_refusal("train --schedule linear", "cosine or noam");
    expect_refusal("train --d-model 30 --heads 4", "does not divide");
    expect_refusal("sample", "--checkpoint");
    expect_refusal("sample --checkpoint", "needs a value");
    expect_refusal("sample --checkpoint x.ckpt --bogus 1", "--bogus");
    /* a value holding a newline is still one line */
    expect_refusal("train --steps \"$(printf '1\\n2')\"", "--steps");
    /* --help: from the table, every option, exit 0 on stdout */
    static const char *const train_opts[] = {
        "--layers", "--d-model", "--heads", "--d-ff", "--seq-len", "--post-norm", "--activation",
        "--pos", "--tie-weights", "--dtype", "--dropout", "--attn-dropout", "--act-dropout", "--batch", "--steps", "--lr",
        "--optimizer", "--momentum", "--warmup", "--weight-decay", "--clip", "--min-lr",
        "--schedule", "--beta2", "--eps", "--label-smoothing",
        "--seed", "--eval-every", "--val-fraction", "--target-acc", "--threads",
        "--detect-anomaly", "--unfused", "--text", "--task", "--checkpoint", "--resume", "--save-every", "--keep-best", "--keep-last",
        "--force", "--stop-after", "--log", "--plot", "--dot", "--quiet", "--help"};
    ck_assert_int_eq(run("train --help"), 0);
    char *out = slurp("out.txt", NULL);
    for (size_t i = 0; i < sizeof train_opts / sizeof train_opts[0]; i++)
        ck_assert_msg(strstr(out, train_opts[i]), "train --help lacks %s", train_opts[i]);
    ck_assert_ptr_nonnull(strstr(out, "[1..1024]")); /* bounds are shown */
    free(out);
    static const char *const sample_opts[] = {"--checkpoint", "--prompt", "--tokens",
                                              "--temperature", "--top-k", "--seed", "--threads"};
    ck_assert_int_eq(run("sample --help"), 0);
    out = slurp("out.txt", NULL);
    for (size_t i = 0; i < sizeof sample_opts / sizeof sample_opts[0]; i++)
        ck_assert_msg(strstr(out, sample_opts[i]), "sample --help lacks %s", sample_opts[i]);
    free(out);
}
END_TEST

/* ---- defect 3, 1, 5: checkpoint metadata validated like the command line ------------------ */

/* Values no checkpoint field accepts (numbers, choices, hex, flags alike). */
static const char *const hostile_fields[] = {
    "1\nmodel.layers 2", "nan", "inf", "-1e300", "abc", "", "99999999999999999999",
    "-9223372036854775807",
};

/* Every field of checkpoint @p ck, each value in hostile_fields: the command @p fmt (with %s for
 * the edited checkpoint) must refuse it in one line naming the field. */
static void check_all_fields(const char *ck, const char *fmt)
{
    char p[512];
    path_of(ck, p, sizeof p);
    tg_ctx *ctx = tg_ctx_new();
    tg_safetensors *st = tg_safetensors_read(ctx, p);
    ck_assert_ptr_nonnull(st);
    int64_t nm = tg_safetensors_meta_count(st);
    ck_assert_int_ge(nm, 30);
    /* under valgrind (each spawn is slow) only the first three: a newline, NaN, inf */
    size_t nv = tu_under_valgrind() ? 3 : sizeof hostile_fields / sizeof hostile_fields[0];
    for (int64_t i = 0; i < nm; i++) {
        const char *key = tg_safetensors_meta_key(st, i);
        for (size_t k = 0; k < nv; k++) {
            const char *v = hostile_fields[k];
            if (!strcmp(key, "train.best_val") && (!strcmp(v, "inf") || v[0] == '9'))
                continue; /* "no validation yet" and a loss of 1e20: valid */
            rewrite(ck, "bad.ckpt", key, v, NULL, NULL);
            char a[1024];
            snprintf(a, sizeof a, fmt, "bad.ckpt");
            char needle[96];
            snprintf(needle, sizeof needle, "'%s'", key);
            expect_refusal_t(a, needle, 10);
        }
    }
    tg_ctx_free(ctx);
}

START_TEST(test_checkpoint_fields_text)
{
    make_text_ckpt("t.ckpt", NULL);
    check_all_fields("t.ckpt", "train --text c.txt --resume %s --steps 6 --quiet");
}
END_TEST

START_TEST(test_checkpoint_fields_sample)
{
    make_text_ckpt("t.ckpt", NULL);
    check_all_fields("t.ckpt", "sample --checkpoint %s --tokens 3");
}
END_TEST

START_TEST(test_checkpoint_fields_task)
{
    make_task_ckpt("k.ckpt");
    check_all_fields("k.ckpt", "train --resume %s --steps 6 --quiet");
    /* a field of a text checkpoint in a task one; a task checkpoint without its task */
    rewrite("k.ckpt", "bad.ckpt", "data.vocab", "30313233343536373839", NULL, NULL);
    expect_refusal_t("train --resume bad.ckpt --steps 6 --quiet", "data.vocab", 10);
    rewrite("k.ckpt", "bad.ckpt", "data.task", NULL, NULL, NULL);
    expect_refusal_t("train --resume bad.ckpt --steps 6 --quiet", "data.task", 10);
}
END_TEST

/* a seq2seq checkpoint (model.arch, model.decoder_layers too), resumed and sampled */
START_TEST(test_checkpoint_fields_seq2seq)
{
    ck_assert_msg(run("train --arch seq2seq " TASK_MODEL " --steps 3 --eval-every 2 "
                      "--target-acc 0 --quiet --checkpoint s.ckpt") == 0, "%s",
                  slurp("err.txt", NULL));
    check_all_fields("s.ckpt", "train --resume %s --steps 6 --quiet");
    check_all_fields("s.ckpt", "sample --checkpoint %s --source 1234");
}
END_TEST

/* Known reproducers and values valid in isolation but wrong for the file. */
START_TEST(test_checkpoint_reproducers)
{
    make_text_ckpt("t.ckpt", NULL);
    const char *resume = "train --text c.txt --resume bad.ckpt --steps 6 --quiet";
    const char *sample = "sample --checkpoint bad.ckpt --tokens 3";
    static const struct {
        const char *key, *value, *needle;
    } cases[] = {
        {"data.val_fraction", "-0.5", "data.val_fraction"},
        {"data.val_fraction", "NaN", "data.val_fraction"},
        {"train.lr", "-1e300", "train.lr"},
        {"train.eval_every", "0", "train.eval_every"},
        {"train.eval_every", "abc", "train.eval_every"},
        {"train.warmup", "-9223372036854775807", "train.warmup"},
        {"train.steps", "4611686018427387904", "train.steps"},
        {"train.batch", "4611686018427387904", "train.batch"},
        {"model.layers", "4611686018427387904", "model.layers"},
        {"model.seq_len", "100000000", "model.seq_len"},
        {"model.d_model", "1000000000", "model.d_model"},
        {"optim.step", "-5", "optim.step"},
        {"model.vocab_size", "7", "model.vocab_size"},
        {"model.causal", "0", "model.causal"},
        /* n_decoder_layers (absent = 0) only in a seq2seq checkpoint */
        {"model.decoder_layers", "2", "model.decoder_layers 2 but model.arch"},
        {"model.decoder_layers", "-1", "model.decoder_layers"},
        {"data.vocab", "2020", "data.vocab"},     /* a byte twice */
        {"data.vocab", "zz", "data.vocab"},
        {"data.mode", "task", NULL},               /* resume: the mode; sample: not text */
        {"format", "tgrad-checkpoint-9", "format"},
        /* in bounds, but not what the file's tensors are */
        {"model.seq_len", "60000", "pos_emb.weight"},
        {"model.layers", "3", "layers"},
        {"model.d_model", "32", "d_model"},
        {"model.d_ff", "64", "d_ff"},
        {"model.heads", "3", "heads"},
        {"model.tie_weights", "1", "head.weight"},
        /* the tensors are f32: a claim of f64 is not converted silently */
        {"model.dtype", "f64", "model.dtype is f64"},
        /* the RNG's fixed point, refused before anything is built */
        {"rng", "0000000000000000000000000000000000000000000000000000000000000000", "rng"},
        /* a field of a task checkpoint in a text one */
        {"data.task", "copy", "data.task"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        rewrite("t.ckpt", "bad.ckpt", cases[i].key, cases[i].value, NULL, NULL);
        expect_refusal_t(resume, cases[i].needle, 10);
        expect_refusal_t(sample, cases[i].needle, 10);
    }
    /* missing fields */
    static const char *const required[] = {"format", "model.layers", "model.d_model", "model.heads",
                                           "model.d_ff", "model.seq_len", "model.norm_first",
                                           "model.activation", "model.pos", "data.mode",
                                           "data.vocab", "model.vocab_size", "optim.step",
                                           "rng"};
    for (size_t i = 0; i < sizeof required / sizeof required[0]; i++) {
        rewrite("t.ckpt", "bad.ckpt", required[i], NULL, NULL, NULL);
        expect_refusal_t(resume, required[i], 10);
        expect_refusal_t(sample, required[i], 10);
    }
    /* a tensor that is neither a parameter nor optimizer state, and optimizer state shaped
     * unlike its parameter: refused by sample too (which loads only the parameters) */
    char ps[512], pd[512];
    path_of("t.ckpt", ps, sizeof ps);
    path_of("bad.ckpt", pd, sizeof pd);
    tu_st_rewrite(ps, pd, &(tu_st_edit){.rename = "adam.m.head.bias", .to = "extra.tensor"});
    expect_refusal_t(resume, "'extra.tensor', which is neither a parameter", 10);
    expect_refusal_t(sample, "'extra.tensor', which is neither a parameter", 10);
    path_of("tmp.ckpt", pd, sizeof pd);
    tu_st_rewrite(ps, pd, &(tu_st_edit){.drop = "adam.m.norm.bias"});
    path_of("bad.ckpt", ps, sizeof ps);
    tu_st_rewrite(pd, ps, &(tu_st_edit){.rename = "adam.m.head.bias", .to = "adam.m.norm.bias"});
    expect_refusal_t(resume, "optimizer state 'adam.m.norm.bias' is", 10);
    expect_refusal_t(sample, "optimizer state 'adam.m.norm.bias' is", 10);
    /* a layer beyond model.layers, a missing tensor */
    rewrite("t.ckpt", "bad.ckpt", NULL, NULL, "layers.0.linear1.bias", NULL);
    expect_refusal_t(resume, "layers.0.linear1.bias", 10);
    expect_refusal_t(sample, "layers.0.linear1.bias", 10);
    /* sinusoidal positions (no tensor tells seq_len): the memory estimate refuses a huge one */
    rewrite("t.ckpt", "s.ckpt", "model.pos", "sinusoidal", "pos_emb.weight", NULL);
    rewrite("s.ckpt", "s2.ckpt", NULL, NULL, "adam.m.pos_emb.weight", NULL);
    rewrite("s2.ckpt", "s.ckpt", NULL, NULL, "adam.v.pos_emb.weight", NULL);
    rewrite("s.ckpt", "bad.ckpt", "model.seq_len", "65536", NULL, NULL);
    double secs;
    expect_refusal_t(resume, "memory", 10);
    run_t(sample, 10, &secs);
    expect_refusal_t(sample, "memory", 10);
    ck_assert_msg(secs < 5, "sample took %.1f s to refuse", secs);
    /* and the untouched checkpoint still works */
    ck_assert_int_eq(run("train --text c.txt --resume t.ckpt --steps 5 --quiet"), 0);
    ck_assert_int_eq(run("sample --checkpoint t.ckpt --tokens 5"), 0);
}
END_TEST

/* A config too big for the machine fails at once, with the estimate. */
START_TEST(test_memory_estimate)
{
    double secs;
    expect_refusal_t("train --d-model 1000000000", "--d-model", 5);
    run_t("train --d-model 1000000000", 5, &secs);
    ck_assert_msg(secs < 1, "took %.2f s", secs);
    expect_refusal_t("train --d-model 65536 --d-ff 262144 --layers 1024", "memory", 5);
    run_t("train --d-model 65536 --d-ff 262144 --layers 1024", 5, &secs);
    ck_assert_msg(secs < 1, "took %.2f s", secs);
    write_corpus("c.txt");
    expect_refusal_t("train --text c.txt --seq-len 65536 --batch 65536", "memory", 5);
    expect_refusal_t("train --seq-len 60000 --batch 4096 --d-model 1024 --heads 16", "memory", 5);
#ifndef __SANITIZE_ADDRESS__ /* (ASan reserves terabytes of address space: no ulimit -v) */
    /* the limit is ulimit -v when it is below the machine's memory: ~800 MB needed under a
     * 400 MB limit is the estimate's one line, not an allocation failure after the build */
    char cmd[2048];
    snprintf(cmd, sizeof cmd, "(ulimit -v 400000; exec '%s' train --text c.txt --seq-len 512 "
             "--batch 8 --steps 1 --quiet)", exe());
    int rc = run_sh(cmd, 20, NULL);
    char *err = slurp("err.txt", NULL);
    ck_assert_msg(rc == 1 && count_lines(err) == 1 && strstr(err, "ulimit -v") &&
                  strstr(err, "needs about"), "exit %d: %s", rc, err);
    free(err);
#endif
}
END_TEST

/* ---- defect 2: NaN logits --------------------------------------------------------------- */
START_TEST(test_sample_nan_weights)
{
    make_text_ckpt("t.ckpt", NULL);
    rewrite("t.ckpt", "nan.ckpt", NULL, NULL, NULL, "head.bias");
    static const char *const args[] = {
        "sample --checkpoint nan.ckpt --top-k 3 --tokens 5",
        "sample --checkpoint nan.ckpt --top-k 1 --tokens 5",
        "sample --checkpoint nan.ckpt --tokens 5",
        "sample --checkpoint nan.ckpt --temperature 0 --tokens 5",
        "sample --checkpoint nan.ckpt --top-k 3 --prompt 'the ' --tokens 5",
    };
    for (size_t i = 0; i < sizeof args / sizeof args[0]; i++)
        expect_refusal_t(args[i], "not finite", 10);
    /* finite weights: every top-k from 1 to past the vocabulary works */
    for (int k = 0; k <= 40; k += 7) {
        char a[256];
        snprintf(a, sizeof a, "sample --checkpoint t.ckpt --top-k %d --tokens 20 --seed %d", k, k);
        ck_assert_int_eq(run(a), 0);
    }
}
END_TEST

/* --detect-anomaly names the first non-finite value (op, tensor, phase); without it the step
 * still stops cleanly on the non-finite loss */
START_TEST(test_detect_anomaly)
{
    make_text_ckpt("t.ckpt", NULL);
    rewrite("t.ckpt", "nan.ckpt", NULL, NULL, NULL, "head.bias");
    expect_refusal("train --text c.txt --resume nan.ckpt --steps 6 --quiet --detect-anomaly",
                   "head.bias");
    char *err = slurp("err.txt", NULL);
    ck_assert_ptr_nonnull(err);
    ck_assert_msg(strstr(err, "forward") && strstr(err, "nan"), "%s", err);
    free(err);
    expect_refusal("train --text c.txt --resume nan.ckpt --steps 6 --quiet", "not finite");
}
END_TEST

/* Finite optimizer state whose update is not finite (a huge first moment over a zero second
 * moment): the run stops at that step, naming the update once, and the checkpoint keeps its
 * step. */
START_TEST(test_nonfinite_update)
{
    make_text_ckpt("t.ckpt", NULL);
    char src[512], mid[512], dst[512];
    path_of("t.ckpt", src, sizeof src);
    path_of("m.ckpt", mid, sizeof mid);
    path_of("u.ckpt", dst, sizeof dst);
    tu_st_rewrite(src, mid, &(tu_st_edit){.fill = "adam.m.head.weight", .fill_value = 3e38});
    tu_st_rewrite(mid, dst, &(tu_st_edit){.fill = "adam.v.head.weight", .fill_value = 0});
    char v[64], step[64];
    snprintf(step, sizeof step, "%s", meta_of("u.ckpt", "optim.step", v, sizeof v));
    expect_refusal("train --text c.txt --resume u.ckpt --steps 100 --quiet",
                   "non-finite update (the update of 'head.weight' is not finite");
    char *err = slurp("err.txt", NULL);
    const char *at = strstr(err, "left unchanged");
    ck_assert_msg(at && !strstr(at + 1, "left unchanged"), "said once: %s", err);
    free(err);
    ck_assert_str_eq(meta_of("u.ckpt", "optim.step", v, sizeof v), step);
}
END_TEST

/* ---- defect 6: FIFOs and devices -------------------------------------------------------- */
START_TEST(test_fifo_never_blocks)
{
    char p[512];
    path_of("fifo", p, sizeof p);
    ck_assert_int_eq(mkfifo(p, 0644), 0);
    make_text_ckpt("t.ckpt", NULL);
    expect_refusal_t("train --text fifo", "FIFO", 5);
    expect_refusal_t("train --text c.txt fifo", "FIFO", 5);
    expect_refusal_t("train --text /dev/zero", "not a regular file", 5);
    expect_refusal_t("sample --checkpoint fifo", "FIFO", 5);
    expect_refusal_t("sample --checkpoint /dev/zero", "not a regular file", 5);
    expect_refusal_t("train --text c.txt --resume fifo", "FIFO", 5);
    expect_refusal_t("train --text c.txt --resume /dev/zero", "not a regular file", 5);
    expect_refusal_t("train " TEXT_MODEL " --checkpoint fifo --force", "FIFO", 5);
    expect_refusal_t("train " TEXT_MODEL " --checkpoint /dev/null --force", "not a regular", 5);
    expect_refusal_t("train " TEXT_MODEL " --log fifo", "FIFO", 5);
    expect_refusal_t("train " TEXT_MODEL " --plot fifo", "FIFO", 5);
    /* a sparse 4 GiB file: refused by its size, not read */
    char big[512];
    path_of("big.txt", big, sizeof big);
    int fd = open(big, O_WRONLY | O_CREAT, 0644);
    ck_assert_int_ge(fd, 0);
    ck_assert_int_eq(ftruncate(fd, (off_t)4 << 30), 0);
    close(fd);
    expect_refusal_t("train --text big.txt", "the files hold 4294967296 bytes, more than the "
                     "1073741824 (1 GiB) allowed", 5);
    /* a checkpoint bigger than the machine's memory (sparse, 1 TiB): refused by its size */
    path_of("huge.ckpt", big, sizeof big);
    fd = open(big, O_WRONLY | O_CREAT, 0644);
    ck_assert_int_ge(fd, 0);
    ck_assert_int_eq(ftruncate(fd, (off_t)1 << 40), 0);
    close(fd);
    expect_refusal_t("sample --checkpoint huge.ckpt", "memory", 5);
    expect_refusal_t("train --text c.txt --resume huge.ckpt", "memory", 5);
}
END_TEST

/* ---- defect 9: resume saves back; the interrupt prints the resume command ------------------ */
START_TEST(test_resume_saves_back)
{
    write_corpus("c.txt");
    ck_assert_int_eq(run("train " TEXT_MODEL " --steps 40 --eval-every 10 --stop-after 10 "
                         "--checkpoint r.ckpt --quiet"), 0);
    char v[64];
    ck_assert_str_eq(meta_of("r.ckpt", "optim.step", v, sizeof v), "10");
    /* other text (here the same words, fewer of them) is not the run being resumed: refused
     * by its size (data.bytes), not continued silently on other data */
    tu_write_corpus(dir, "other.txt", 1500);
    expect_refusal("train --text other.txt --resume r.ckpt --stop-after 20 --quiet",
                   "was trained on");
    expect_refusal("train --text c.txt other.txt --resume r.ckpt --stop-after 20 --quiet",
                   "bytes of text, these files hold");
    /* no --checkpoint: saved back to the resumed file */
    ck_assert_int_eq(run("train --text c.txt --resume r.ckpt --stop-after 20 --quiet"), 0);
    ck_assert_str_eq(meta_of("r.ckpt", "optim.step", v, sizeof v), "20");
    char *out = slurp("out.txt", NULL);
    ck_assert_ptr_nonnull(strstr(out, "checkpoint r.ckpt"));
    free(out);
    /* --checkpoint OTHER: OTHER is written, the resumed file stays as it was */
    size_t n0, n1;
    char *before = slurp("r.ckpt", &n0);
    ck_assert_int_eq(run("train --text c.txt --resume r.ckpt --stop-after 30 "
                         "--checkpoint other.ckpt --quiet"), 0);
    ck_assert_str_eq(meta_of("other.ckpt", "optim.step", v, sizeof v), "30");
    char *after = slurp("r.ckpt", &n1);
    ck_assert(n0 == n1 && memcmp(before, after, n0) == 0);
    free(before);
    free(after);
}
END_TEST

/* Largest |a - b| / max(1, |b|) over every tensor of two checkpoints with the same names. */
static double ckpt_max_rel_diff(const char *a, const char *b)
{
    char pa[512], pb[512];
    path_of(a, pa, sizeof pa);
    path_of(b, pb, sizeof pb);
    tg_ctx *ctx = tg_ctx_new();
    tg_safetensors *x = tg_safetensors_read(ctx, pa), *y = tg_safetensors_read(ctx, pb);
    ck_assert_ptr_nonnull(x);
    ck_assert_ptr_nonnull(y);
    ck_assert_int_eq(tg_safetensors_count(x), tg_safetensors_count(y));
    double worst = 0;
    for (int64_t i = 0; i < tg_safetensors_count(x); i++) {
        tg_tensor *u = tg_safetensors_tensor(x, i);
        tg_tensor *v = tg_safetensors_find(y, tg_safetensors_name(x, i));
        ck_assert_ptr_nonnull(v);
        for (int64_t e = 0; e < tg_tensor_numel(u); e++) {
            double d = fabs(tg_get(u, e) - tg_get(v, e)) / fmax(1, fabs(tg_get(v, e)));
            worst = d > worst ? d : worst;
        }
    }
    tg_ctx_free(ctx);
    return worst;
}

/* --precision bf16: recorded as train.precision, restored by --resume (a run stopped and
 * resumed equals the run straight through, byte for byte, and differs from the f32 run); bf16
 * with --dtype f64 is refused. */
START_TEST(test_precision_recorded)
{
    write_corpus("c.txt");
    ck_assert_int_eq(run("train " TEXT_MODEL " --steps 20 --eval-every 10 --precision bf16 "
                         "--checkpoint whole.ckpt --quiet"), 0);
    char v[64];
    ck_assert_str_eq(meta_of("whole.ckpt", "train.precision", v, sizeof v), "bf16");
    ck_assert_int_eq(run("train " TEXT_MODEL " --steps 20 --eval-every 10 --precision bf16 "
                         "--stop-after 10 --checkpoint part.ckpt --quiet"), 0);
    ck_assert_int_eq(run("train --text c.txt --resume part.ckpt --quiet"), 0);
    ck_assert_str_eq(meta_of("part.ckpt", "train.precision", v, sizeof v), "bf16");
    ck_assert(ckpt_max_rel_diff("part.ckpt", "whole.ckpt") == 0);
    ck_assert_int_eq(run("train " TEXT_MODEL " --steps 20 --eval-every 10 "
                         "--checkpoint f32.ckpt --quiet"), 0);
    ck_assert_str_eq(meta_of("f32.ckpt", "train.precision", v, sizeof v), "f32");
    ck_assert(ckpt_max_rel_diff("f32.ckpt", "whole.ckpt") > 0);
    expect_refusal("train " TEXT_MODEL " --dtype f64 --precision bf16 --steps 2 --quiet",
                   "--precision bf16 is for --dtype f32");
}
END_TEST

/* --grad-accum: K = 1 is the run without it, byte for byte; K = 4 computes the same mean-loss
 * gradients (f64: equal up to rounding, the log's losses too); K is recorded and restored;
 * K must divide the batch. */
START_TEST(test_grad_accum)
{
    const char *base = "train --eval-every 3 --dtype f64 --optimizer sgd --momentum 0 "
                       "--lr 0.05 --warmup 0 --target-acc 0 --quiet";
    char args[512];
    snprintf(args, sizeof args, "%s --steps 6 --checkpoint none.ckpt --log none.csv", base);
    ck_assert_int_eq(run(args), 0);
    snprintf(args, sizeof args, "%s --steps 6 --grad-accum 1 --checkpoint k1.ckpt", base);
    ck_assert_int_eq(run(args), 0);
    size_t n0, n1;
    char *f0 = slurp("none.ckpt", &n0), *f1 = slurp("k1.ckpt", &n1);
    ck_assert(n0 == n1 && memcmp(f0, f1, n0) == 0);
    free(f0);
    free(f1);
    snprintf(args, sizeof args, "%s --steps 6 --grad-accum 4 --checkpoint k4.ckpt --log k4.csv",
             base);
    ck_assert_int_eq(run(args), 0);
    double d = ckpt_max_rel_diff("k4.ckpt", "none.ckpt");
    ck_assert_msg(d < 1e-12, "K = 4 vs K = 1: %g", d);
    char *l0 = slurp("none.csv", NULL), *l4 = slurp("k4.csv", NULL);
    for (const char *p = l0, *q = l4; p && q; p = strchr(p, '\n'), q = strchr(q, '\n')) {
        p++, q++;
        double a0, a4;
        if (sscanf(p, "%*d,%lf", &a0) == 1) {
            ck_assert(sscanf(q, "%*d,%lf", &a4) == 1);
            ck_assert_msg(fabs(a0 - a4) < 1e-9, "loss %g vs %g", a0, a4);
        }
    }
    free(l0);
    free(l4);
    char v[64];
    ck_assert_str_eq(meta_of("k4.ckpt", "train.grad_accum", v, sizeof v), "4");
    ck_assert_str_eq(meta_of("k1.ckpt", "train.grad_accum", v, sizeof v), "1");
    /* resume restores K (the continued file equals a straight run with K = 4) */
    snprintf(args, sizeof args, "%s --grad-accum 4 --steps 10 --checkpoint s.ckpt", base);
    ck_assert_int_eq(run(args), 0);
    snprintf(args, sizeof args, "%s --grad-accum 4 --steps 10 --stop-after 4 --checkpoint r.ckpt",
             base);
    ck_assert_int_eq(run(args), 0);
    ck_assert_int_eq(run("train --resume r.ckpt --quiet"), 0);
    f0 = slurp("s.ckpt", &n0);
    f1 = slurp("r.ckpt", &n1);
    ck_assert(n0 == n1 && memcmp(f0, f1, n0) == 0);
    free(f0);
    free(f1);
    expect_refusal("train --grad-accum 3", "--batch 32 does not split into --grad-accum 3");
    expect_refusal("train --batch 4 --grad-accum 8", "--batch 4 does not split");
    expect_refusal("train --grad-accum 0", "--grad-accum");
    /* a resumed K that does not divide a new --batch */
    expect_refusal("train --resume r.ckpt --batch 6", "--batch 6 does not split into "
                   "--grad-accum 4");
}
END_TEST

START_TEST(test_interrupt_prints_resume_command)
{
    write_corpus("c.txt");
    char cmd[4096];
    snprintf(cmd, sizeof cmd,
             "(" SIGINT_DFL "'%s' train " TEXT_MODEL " --steps 1000000 --eval-every 1000000 "
             "--checkpoint 'i 1.ckpt' --quiet & pid=$!; sleep 1; kill -INT $pid; wait $pid)",
             exe());
    ck_assert_int_eq(run_sh(cmd, 60, NULL), 130);
    char *err = slurp("err.txt", NULL);
    const char *w = strstr(err, "resume with: ");
    ck_assert_msg(w != NULL, "%s", err);
    char again[4096];
    snprintf(again, sizeof again, "%.*s", (int)strcspn(w + 13, "\n"), w + 13);
    ck_assert_ptr_nonnull(strstr(again, "--resume 'i 1.ckpt'"));
    free(err);
    /* the printed command resumes the run (here only one step further) */
    char v[64];
    long at = atol(meta_of("i 1.ckpt", "optim.step", v, sizeof v));
    char next[4200];
    snprintf(next, sizeof next, "%s --stop-after %ld", again, at + 1);
    ck_assert_msg(run_sh(next, 60, NULL) == 0, "%s: %s", next, slurp("err.txt", NULL));
    ck_assert_int_eq(atol(meta_of("i 1.ckpt", "optim.step", v, sizeof v)), at + 1);
}
END_TEST

/* ---- --save-every ------------------------------------------------------------------------ */
START_TEST(test_save_every)
{
    write_corpus("c.txt");
    char cmd[4096];
    /* SIGKILL: no final save, so the checkpoint on disk is the last periodic one */
    snprintf(cmd, sizeof cmd,
             "('%s' train " TEXT_MODEL " --steps 1000000 --eval-every 1000000 --save-every 7 "
             "--checkpoint s.ckpt --quiet & pid=$!; sleep 2; kill -KILL $pid; wait $pid; "
             "exit 0)", exe());
    ck_assert_int_eq(run_sh(cmd, 60, NULL), 0);
    char v[64];
    ck_assert_ptr_nonnull(meta_of("s.ckpt", "optim.step", v, sizeof v));
    long at = atol(v);
    ck_assert_msg(at > 0 && at % 7 == 0, "optim.step %ld", at);
    ck_assert_str_eq(meta_of("s.ckpt", "train.save_every", v, sizeof v), "7");
    ck_assert_int_eq(run("info s.ckpt"), 0);
}
END_TEST

/* ---- defect 10: --checkpoint does not silently replace another file ---------------------- */
START_TEST(test_checkpoint_not_replaced)
{
    write_corpus("c.txt");
    ck_assert_int_eq(run("train --text c.txt --d-model 32 --heads 2 --d-ff 32 --seq-len 8 "
                         "--batch 4 --layers 1 --threads 1 --steps 5 --checkpoint lic.ckpt "
                         "--quiet"), 0);
    size_t n0, n1;
    char *before = slurp("lic.ckpt", &n0);
    expect_refusal("train " TEXT_MODEL " --steps 3 --checkpoint lic.ckpt", "d_model 32");
    char *err = slurp("err.txt", NULL);
    ck_assert_ptr_nonnull(strstr(err, "step 5"));
    ck_assert_ptr_nonnull(strstr(err, "--force"));
    free(err);
    /* the same config again is another run too */
    expect_refusal("train --text c.txt --d-model 32 --heads 2 --d-ff 32 --seq-len 8 --batch 4 "
                   "--layers 1 --threads 1 --steps 5 --checkpoint lic.ckpt", "--force");
    char *after = slurp("lic.ckpt", &n1);
    ck_assert(n0 == n1 && memcmp(before, after, n0) == 0);
    free(after);
    /* any other existing file */
    write_file("notes.txt", "precious\n");
    expect_refusal("train " TEXT_MODEL " --steps 3 --checkpoint notes.txt", "not a tgrad");
    char *notes = slurp("notes.txt", NULL);
    ck_assert_str_eq(notes, "precious\n");
    free(notes);
    /* a directory is never replaced, even with --force */
    char p[512];
    path_of("adir", p, sizeof p);
    ck_assert_int_eq(mkdir(p, 0755), 0);
    expect_refusal("train " TEXT_MODEL " --steps 3 --checkpoint adir --force", "directory");
    /* --force replaces; resuming needs no --force */
    ck_assert_int_eq(run("train " TEXT_MODEL " --steps 3 --checkpoint lic.ckpt --force --quiet"),
                     0);
    char v[64];
    ck_assert_str_eq(meta_of("lic.ckpt", "model.d_model", v, sizeof v), "16");
    ck_assert_int_eq(run("train --text c.txt --resume lic.ckpt --steps 6 --checkpoint lic.ckpt "
                         "--quiet"), 0);
    free(before);
}
END_TEST

/* ---- defect 11: outputs checked before training; the plot's mode ------------------------- */
START_TEST(test_outputs_checked_up_front)
{
    write_corpus("c.txt");
    /* would train for a very long time if the check came after the training */
    const char *longrun = "train " TEXT_MODEL " --steps 10000000 --eval-every 10000000";
    char a[1024];
    snprintf(a, sizeof a, "%s --plot /nonexistent-dir/l.svg", longrun);
    expect_refusal_t(a, "/nonexistent-dir/l.svg", 5);
    snprintf(a, sizeof a, "%s --log /nonexistent-dir/l.csv", longrun);
    expect_refusal_t(a, "/nonexistent-dir/l.csv", 5);
    snprintf(a, sizeof a, "%s --checkpoint /nonexistent-dir/l.ckpt", longrun);
    expect_refusal_t(a, "/nonexistent-dir/l.ckpt", 5);
    snprintf(a, sizeof a, "%s --plot same.out --log same.out", longrun);
    expect_refusal_t(a, "same", 5);
    /* the plot respects the umask, like the log */
    mode_t masks[2] = {022, 077};
    for (int i = 0; i < 2; i++) {
        mode_t old = umask(masks[i]);
        int rc = run("train " TEXT_MODEL " --steps 3 --plot p.svg --log p.csv --quiet");
        umask(old);
        ck_assert_int_eq(rc, 0);
        struct stat sb, lb;
        char p[512], q[512];
        path_of("p.svg", p, sizeof p);
        path_of("p.csv", q, sizeof q);
        ck_assert_int_eq(stat(p, &sb), 0);
        ck_assert_int_eq(stat(q, &lb), 0);
        ck_assert_int_eq((int)(sb.st_mode & 0777), (int)(0666 & ~masks[i]));
        unlink(p);
        unlink(q);
    }
}
END_TEST

/* An output naming an input: refused (with --force too) before anything is written; the input
 * stays byte-identical (--log used to truncate the text trained on, or append to the resumed
 * checkpoint when --checkpoint named another file). */
START_TEST(test_outputs_never_inputs)
{
    write_corpus("c.txt");
    make_text_ckpt("t.ckpt", NULL);
    size_t n0, k0;
    char *text0 = slurp("c.txt", &n0), *ck0 = slurp("t.ckpt", &k0);
    static const char *const args[] = {
        "train " TEXT_MODEL " --steps 3 --log c.txt",
        "train " TEXT_MODEL " --steps 3 --log ./c.txt",
        "train " TEXT_MODEL " --steps 3 --plot c.txt",
        "train " TEXT_MODEL " --steps 3 --checkpoint c.txt --force",
        "train --text c.txt --resume t.ckpt --steps 9 --checkpoint o.ckpt --log t.ckpt",
        "train --text c.txt --resume t.ckpt --steps 9 --checkpoint o.ckpt --plot t.ckpt",
    };
    for (size_t i = 0; i < sizeof args / sizeof args[0]; i++) {
        expect_refusal_t(args[i], "(an output never replaces an input, even with --force", 10);
        size_t n1, k1;
        char *text1 = slurp("c.txt", &n1), *ck1 = slurp("t.ckpt", &k1);
        ck_assert_msg(n1 == n0 && !memcmp(text0, text1, n0), "'%s' changed c.txt", args[i]);
        ck_assert_msg(k1 == k0 && !memcmp(ck0, ck1, k0), "'%s' changed t.ckpt", args[i]);
        free(text1);
        free(ck1);
    }
    free(text0);
    free(ck0);
}
END_TEST

/* Defect 7 (no litter), for the checks before training too: a run names no file in the
 * directory of its outputs but the outputs themselves and their temporaries (named only
 * between their link and their rename: every file goes through the one writer). A probe file (the old writability check created and
 * removed .tgrad-probe-XXXXXX) would be left behind by a SIGKILL at that moment; watched here
 * with inotify, so the test does not depend on hitting that moment. */
START_TEST(test_no_probe_files)
{
    write_corpus("c.txt");
    char sub[512];
    path_of("out", sub, sizeof sub);
    ck_assert_int_eq(mkdir(sub, 0755), 0);
    int in = inotify_init1(IN_NONBLOCK | IN_CLOEXEC);
    ck_assert_int_ge(in, 0);
    ck_assert_int_ge(inotify_add_watch(in, sub, IN_CREATE | IN_MOVED_TO), 0);
    ck_assert_int_eq(run("train " TEXT_MODEL " --steps 2 --quiet --checkpoint out/ck.ckpt "
                         "--log out/l.csv --plot out/p.svg"), 0);
    char buf[16384] __attribute__((aligned(__alignof__(struct inotify_event))));
    ssize_t len;
    int seen = 0;
    while ((len = read(in, buf, sizeof buf)) > 0) {
        for (char *p = buf; p < buf + len;) {
            const struct inotify_event *ev = (const struct inotify_event *)p;
            const char *name = ev->len ? ev->name : "";
            bool ok = !strcmp(name, "ck.ckpt") || !strcmp(name, "l.csv") ||
                      !strcmp(name, "p.svg") || !strncmp(name, "ck.ckpt.tmp.", 12) ||
                      !strncmp(name, "p.svg.tmp.", 10) || !strncmp(name, "l.csv.tmp.", 10);
            ck_assert_msg(ok, "tgrad created '%s' in the output directory", name);
            seen++;
            p += sizeof *ev + ev->len;
        }
    }
    ck_assert_int_ge(seen, 3);
    close(in);
}
END_TEST

/* A hostile OMP_NUM_THREADS (the default thread count) is capped at TG_MAX_THREADS: 100000
 * made libgomp overflow its stack (SIGSEGV) at the first parallel kernel. */
START_TEST(test_omp_num_threads_capped)
{
    write_corpus("c.txt");
    char cmd[1024];
    snprintf(cmd, sizeof cmd, "(OMP_NUM_THREADS=100000 exec '%s' train --text c.txt --d-model 32 "
             "--heads 2 --seq-len 16 --batch 8 --layers 1 --steps 1 --quiet)", exe());
    int rc = run_sh(cmd, 120, NULL);
    ck_assert_msg(rc == 0, "exit %d: %s", rc, slurp("err.txt", NULL));
}
END_TEST

/* --val-fraction 0: no validation set; the summary and the log say so instead of "nan" */
START_TEST(test_no_validation)
{
    write_corpus("c.txt");
    ck_assert_int_eq(run("train " TEXT_MODEL " --steps 3 --eval-every 2 --val-fraction 0 "
                         "--log v.csv --quiet"), 0);
    char *out = slurp("out.txt", NULL), *csv = slurp("v.csv", NULL);
    ck_assert_msg(strstr(out, "no validation loss (--val-fraction 0)") && !strstr(out, "nan"),
                  "%s", out);
    ck_assert_msg(!strstr(csv, "nan"), "%s", csv);
    free(out);
    free(csv);
}
END_TEST

/* ---- defect 4: a huge --steps allocates nothing up front --------------------------------- */
START_TEST(test_huge_steps_bounded_memory)
{
    write_corpus("c.txt");
    double secs;
    int rc = run_t("train " TEXT_MODEL " --steps 1000000000 --eval-every 2 --stop-after 9 "
                   "--plot p.svg --quiet", 60, &secs);
    ck_assert_msg(rc == 0, "rc %d: %s", rc, slurp("err.txt", NULL));
    char *svg = slurp("p.svg", NULL);
    ck_assert_ptr_nonnull(svg);
    ck_assert_ptr_nonnull(strstr(svg, "</svg>"));
    free(svg);
    rc = run_t("train " TASK_MODEL " --steps 1000000000 --target-acc 0 --stop-after 5 "
               "--plot q.svg --quiet", 60, &secs);
    ck_assert_msg(rc == 0, "rc %d: %s", rc, slurp("err.txt", NULL));
}
END_TEST

/* ---- defect 13: the live line fits the terminal ------------------------------------------ */

/* Run `tgrad <args>` with stderr on a pseudo-terminal of @p cols columns (0: size unknown) and
 * COLUMNS=@p env_cols (NULL: unset); stdout to /dev/null. Returns everything printed. */
static char *run_on_pty(const char *args, int cols, const char *env_cols)
{
    int master;
    struct winsize ws = {.ws_row = 24, .ws_col = (unsigned short)cols};
    pid_t pid = forkpty(&master, NULL, NULL, &ws);
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        if (chdir(dir) != 0)
            _exit(126);
        int fd = open("/dev/null", O_WRONLY);
        dup2(fd, 1);
        if (env_cols)
            setenv("COLUMNS", env_cols, 1);
        else
            unsetenv("COLUMNS");
        char cmd[4096];
        snprintf(cmd, sizeof cmd, "exec '%s' %s", exe(), args);
        execl("/bin/sh", "sh", "-c", cmd, (char *)NULL);
        _exit(127);
    }
    size_t cap = 1 << 16, n = 0;
    char *buf = malloc(cap);
    for (;;) {
        if (n + 4096 > cap)
            buf = realloc(buf, cap *= 2);
        ssize_t k = read(master, buf + n, 4096);
        if (k > 0) {
            n += (size_t)k;
            continue;
        }
        if (k < 0 && errno == EINTR)
            continue;
        break; /* EIO: the child closed the terminal (the test's timeout covers a hang) */
    }
    buf[n] = 0;
    int st;
    waitpid(pid, &st, 0);
    close(master);
    ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) == 0, "'%s' failed on the terminal: %s",
                  args, buf);
    return buf;
}

/* Every progress line (each piece between \r and \n) is at most @p max columns. */
static void assert_lines_fit(const char *out, int max, const char *what)
{
    int progress = 0;
    const char *p = out;
    while (*p) {
        size_t len = strcspn(p, "\r\n");
        if (memmem(p, len, "loss", 4)) {
            progress++;
            ck_assert_msg((int)len <= max, "%s: a %zu-column progress line (at most %d): '%.*s'",
                          what, len, max, (int)len, p);
        }
        p += len;
        if (*p)
            p++;
    }
    ck_assert_msg(progress >= 2, "%s: no progress lines in: %s", what, out);
}

START_TEST(test_progress_fits_terminal)
{
    write_corpus("c.txt");
    const char *task = "train " TASK_MODEL " --steps 60 --eval-every 20 --target-acc 0";
    const char *text = "train " TEXT_MODEL " --steps 60 --eval-every 20";
    const char *runs[2] = {task, text};
    for (int i = 0; i < 2; i++) {
        char *o = run_on_pty(runs[i], 50, NULL);
        assert_lines_fit(o, 49, "50 columns");
        free(o);
        o = run_on_pty(runs[i], 0, NULL);
        assert_lines_fit(o, 79, "unknown width");
        free(o);
        o = run_on_pty(runs[i], 0, "40");
        assert_lines_fit(o, 39, "COLUMNS=40");
        free(o);
        o = run_on_pty(runs[i], 200, NULL); /* wide: the full line, with the validation */
        ck_assert_ptr_nonnull(strstr(o, "elapsed"));
        free(o);
    }
}
END_TEST

/* --dot: the training graph (forward and backward edges) is written once built and training
 * goes on; the path is checked up front like the other outputs. */
START_TEST(test_dot)
{
    write_corpus("c.txt");
    ck_assert_int_eq(run("train " TEXT_MODEL " --steps 2 --eval-every 1 --dot g.dot --log l.csv "
                         "--quiet"), 0);
    char *g = slurp("g.dot", NULL);
    ck_assert_ptr_nonnull(g);
    ck_assert_ptr_nonnull(strstr(g, "digraph tgrad {"));
    ck_assert_ptr_nonnull(strstr(g, "[label=\"param\\ntok_emb.weight\\n"));
    ck_assert_ptr_nonnull(strstr(g, "[label=\"input\\nids\\n(4, 8) i32\""));
    ck_assert_ptr_nonnull(strstr(g, "[label=\"cross_entropy\\n"));
    ck_assert_ptr_nonnull(strstr(g, "[style=dashed, color=\"#c0392b\", constraint=false]"));
    free(g);
    char *log = slurp("l.csv", NULL); /* it trained: two steps logged */
    ck_assert_int_eq(count_lines(log), 3);
    free(log);
    if (system("command -v dot >/dev/null 2>&1") == 0) {
        ck_assert_int_eq(run_sh("dot -Tsvg g.dot -o g.svg", 120, NULL), 0);
        char *err = slurp("err.txt", NULL);
        ck_assert_str_eq(err, "");
        free(err);
    }
    /* refused before training */
    const char *longrun = "train " TEXT_MODEL " --steps 10000000 --eval-every 10000000";
    char a[1024];
    snprintf(a, sizeof a, "%s --dot /nonexistent-dir/g.dot", longrun);
    expect_refusal_t(a, "--dot '/nonexistent-dir/g.dot'", 5);
    snprintf(a, sizeof a, "%s --dot same.out --plot same.out", longrun);
    expect_refusal_t(a, "--plot and --dot name the same file", 5);
    snprintf(a, sizeof a, "%s --dot c.txt", longrun);
    expect_refusal_t(a, "--dot 'c.txt' is the input --text 'c.txt'", 5);
    snprintf(a, sizeof a, "%s --dot .", longrun);
    expect_refusal_t(a, "--dot '.' is a directory, not a regular file", 5);
}
END_TEST

/* ---- outputs: one rule; the log and plot of a resumed run; one writer per checkpoint ------ */

/* An existing --log, --plot or --dot is replaced only with --force (a usage error, exit 2,
 * naming the file and --force; the file untouched); a resumed run continues its own. */
START_TEST(test_outputs_need_force)
{
    write_corpus("c.txt");
    static const char *const opts[] = {"--log", "--plot", "--dot"};
    for (size_t i = 0; i < sizeof opts / sizeof opts[0]; i++) {
        write_file("keep.txt", "precious\n");
        char a[1024], needle[128];
        snprintf(a, sizeof a, "train " TEXT_MODEL " --steps 2 --quiet %s keep.txt", opts[i]);
        snprintf(needle, sizeof needle, "%s 'keep.txt' exists (pass --force to replace it)",
                 opts[i]);
        expect_refusal(a, needle);
        ck_assert_int_eq(run(a), 2);
        char *kept = slurp("keep.txt", NULL);
        ck_assert_str_eq(kept, "precious\n");
        free(kept);
        snprintf(a, sizeof a, "train " TEXT_MODEL " --steps 2 --quiet %s keep.txt --force",
                 opts[i]);
        ck_assert_int_eq(run(a), 0);
        kept = slurp("keep.txt", NULL);
        ck_assert_ptr_null(strstr(kept, "precious"));
        free(kept);
    }
    /* --checkpoint: the same rule, the same exit status */
    ck_assert_int_eq(run("train " TEXT_MODEL " --steps 2 --quiet --checkpoint c1.ckpt"), 0);
    ck_assert_int_eq(run("train " TEXT_MODEL " --steps 2 --quiet --checkpoint c1.ckpt"), 2);
    /* a resumed run's own log and plot need no --force; another file at --log does */
    ck_assert_int_eq(run("train " TEXT_MODEL " --steps 6 --stop-after 3 --quiet --checkpoint "
                         "r.ckpt --log r.csv --plot r.svg"), 0);
    ck_assert_int_eq(run("train --text c.txt --resume r.ckpt --quiet --log r.csv --plot r.svg"),
                     0);
    char *log = slurp("r.csv", NULL);
    ck_assert_int_eq(count_lines(log), 7);
    free(log);
    write_file("notes.csv", "my notes\n");
    ck_assert_int_eq(run("train " TEXT_MODEL " --steps 4 --stop-after 2 --quiet --checkpoint "
                         "n.ckpt"), 0);
    expect_refusal("train --text c.txt --resume n.ckpt --quiet --log notes.csv",
                   "is not a tgrad training log");
    char *notes = slurp("notes.csv", NULL);
    ck_assert_str_eq(notes, "my notes\n");
    free(notes);
}
END_TEST

/* The points of the first polyline of an SVG (the train curve). */
static int polyline_points(const char *svg)
{
    const char *p = strstr(svg, "<polyline");
    ck_assert_ptr_nonnull(p);
    p = strstr(p, "points=\"");
    ck_assert_ptr_nonnull(p);
    p += 8;
    int n = 0;
    for (; *p && *p != '"'; p++)
        n += *p == ',';
    return n;
}

/* A run killed after its last save wrote log rows past it (and maybe half a row): resume cuts
 * the log at the checkpoint's step, then goes on, so every step is logged once, in order, each
 * row whole; the plot of the resumed run draws every step from the first. */
START_TEST(test_log_cut_at_checkpoint)
{
    write_corpus("c.txt");
    ck_assert_int_eq(run("train " TEXT_MODEL " --steps 10 --eval-every 5 --stop-after 5 "
                         "--quiet --checkpoint k.ckpt --log k.csv"), 0);
    /* what a SIGKILL at step 8 leaves: rows 6, 7 and half of row 8 after the save at 5 */
    char p[512];
    path_of("k.csv", p, sizeof p);
    FILE *f = fopen(p, "a");
    ck_assert_ptr_nonnull(f);
    fputs("6,2.000000,,0.003,100.0\n7,2.000000,,0.003,100.0\n8,0.0001", f);
    fclose(f);
    ck_assert_int_eq(run("train --text c.txt --resume k.ckpt --quiet --log k.csv --plot k.svg"),
                     0);
    char *log = slurp("k.csv", NULL);
    ck_assert_msg(!strncmp(log, "step,train_loss,val_loss,lr,tokens_per_s,val_acc\n", 49), "%s",
                  log);
    int rows = 0;
    for (const char *l = strchr(log, '\n') + 1; *l; l = strchr(l, '\n') + 1) {
        rows++;
        ck_assert_int_eq(atoi(l), rows);
        int commas = 0;
        for (const char *c = l; *c != '\n'; c++) {
            ck_assert_msg(*c, "a partial last line: %s", l);
            commas += *c == ',';
        }
        ck_assert_int_eq(commas, 5);
        ck_assert_msg(l[strcspn(l, "\n") - 1] == ',', "a text run's val_acc is empty: %s", l);
        ck_assert_ptr_null(strstr(l, "2.000000,,0.003,100.0")); /* the killed run's rows */
    }
    ck_assert_int_eq(rows, 10);
    free(log);
    char *svg = slurp("k.svg", NULL);
    ck_assert_int_eq(polyline_points(svg), 10);
    free(svg);
    /* a real SIGKILL while saving every step: the resumed log still has each step once */
    char cmd[4096];
    snprintf(cmd, sizeof cmd, "('%s' train " TEXT_MODEL " --steps 1000000 --eval-every 1000000 "
             "--save-every 3 --checkpoint s.ckpt --log s.csv --quiet & pid=$!; sleep 1; "
             "kill -KILL $pid; wait $pid; exit 0)", exe());
    ck_assert_int_eq(run_sh(cmd, 60, NULL), 0);
    char v[64];
    long at = atol(meta_of("s.ckpt", "optim.step", v, sizeof v));
    char a[512];
    snprintf(a, sizeof a, "train --text c.txt --resume s.ckpt --quiet --log s.csv "
             "--stop-after %ld", at + 2);
    ck_assert_int_eq(run(a), 0);
    log = slurp("s.csv", NULL);
    rows = 0;
    for (const char *l = strchr(log, '\n') + 1; *l; l = strchr(l, '\n') + 1)
        ck_assert_int_eq(atoi(l), ++rows);
    ck_assert_int_eq(rows, at + 2);
    free(log);
}
END_TEST

static int occurrences(const char *s, const char *needle);

/* A task run logs its held-out accuracy (val_acc, the last column, on evaluation rows only);
 * resume restores it from the log, so the plot's accuracy panel covers the whole run. A log
 * with the older 5-column header is continued with 5-column rows. */
START_TEST(test_log_accuracy_resume)
{
    ck_assert_int_eq(run("train " TASK_MODEL " --steps 8 --eval-every 2 --target-acc 0 "
                         "--stop-after 4 --quiet --checkpoint k.ckpt --log k.csv"), 0);
    ck_assert_int_eq(run("train --resume k.ckpt --quiet --log k.csv --plot k.svg"), 0);
    char *out = slurp("out.txt", NULL); /* --target-acc 0: no target to miss */
    ck_assert_msg(strstr(out, "held-out token accuracy") && !strstr(out, "target not reached"),
                  "%s", out);
    free(out);
    char *log = slurp("k.csv", NULL);
    ck_assert_msg(!strncmp(log, "step,train_loss,val_loss,lr,tokens_per_s,val_acc\n", 49), "%s",
                  log);
    int rows = 0;
    for (const char *l = strchr(log, '\n') + 1; *l; l = strchr(l, '\n') + 1) {
        ck_assert_int_eq(atoi(l), ++rows);
        const char *acc = l;
        for (int i = 0; i < 5; i++) {
            acc = strchr(acc, ',');
            ck_assert_msg(acc && acc < strchr(l, '\n'), "%s", l);
            acc++;
        }
        if (rows % 2 == 0) {
            double a = atof(acc);
            ck_assert_msg(*acc >= '0' && *acc <= '9' && a >= 0 && a <= 1, "%s", l);
        } else {
            ck_assert_msg(*acc == '\n', "val_acc on a row without evaluation: %s", l);
        }
    }
    ck_assert_int_eq(rows, 8);
    free(log);
    char *svg = slurp("k.svg", NULL);
    ck_assert_int_eq(occurrences(svg, "class=\"val-marker\""), 4);    /* steps 2, 4, 6, 8 */
    ck_assert_int_eq(occurrences(svg, "class=\"metric-marker\""), 4); /* from the first */
    free(svg);
    /* the older header: continued as it is (5 columns), the losses still plotted whole */
    ck_assert_int_eq(run("train " TASK_MODEL " --steps 8 --eval-every 2 --target-acc 0 "
                         "--stop-after 4 --quiet --checkpoint o.ckpt"), 0);
    write_file("o.csv", "step,train_loss,val_loss,lr,tokens_per_s\n"
                        "1,2.0,,0.001,10.0\n2,2.0,2.1,0.001,10.0\n"
                        "3,2.0,,0.001,10.0\n4,2.0,2.1,0.001,10.0\n");
    ck_assert_int_eq(run("train --resume o.ckpt --quiet --log o.csv --plot o.svg"), 0);
    log = slurp("o.csv", NULL);
    ck_assert_msg(!strncmp(log, "step,train_loss,val_loss,lr,tokens_per_s\n1,", 43), "%s", log);
    rows = 0;
    for (const char *l = strchr(log, '\n') + 1; *l; l = strchr(l, '\n') + 1) {
        ck_assert_int_eq(atoi(l), ++rows);
        int commas = 0;
        for (const char *c = l; *c != '\n'; c++)
            commas += *c == ',';
        ck_assert_msg(commas == 4, "%s", l);
    }
    ck_assert_int_eq(rows, 8);
    free(log);
    svg = slurp("o.svg", NULL);
    ck_assert_int_eq(occurrences(svg, "class=\"val-marker\""), 4);
    ck_assert_int_eq(polyline_points(svg), 8);
    free(svg);
}
END_TEST

/* A write that fails (here: the file size limit, as on a full disk) gives the reason and
 * never leaves a partial row; the first save failing says no checkpoint was written. */
START_TEST(test_write_failures)
{
    write_corpus("c.txt");
    char cmd[4096];
    snprintf(cmd, sizeof cmd, "(trap '' XFSZ; ulimit -f 2; exec '%s' train " TEXT_MODEL
             " --steps 1000 --eval-every 1000 --quiet --log big.csv)", exe());
    ck_assert_int_eq(run_sh(cmd, 60, NULL), 1);
    char *err = slurp("err.txt", NULL);
    ck_assert_msg(strstr(err, "--log 'big.csv': File too large") && count_lines(err) == 1, "%s",
                  err);
    free(err);
    size_t len;
    char *log = slurp("big.csv", &len);
    ck_assert(len > 0 && log[len - 1] == '\n');
    free(log);
    snprintf(cmd, sizeof cmd, "(trap '' XFSZ; ulimit -f 2; exec '%s' train " TEXT_MODEL
             " --steps 4 --quiet --checkpoint f.ckpt)", exe());
    ck_assert_int_eq(run_sh(cmd, 60, NULL), 1);
    err = slurp("err.txt", NULL);
    ck_assert_msg(strstr(err, "(no checkpoint was written)") && !strstr(err, "kept"), "%s", err);
    free(err);
}
END_TEST

/* The same files in another order, or other content of the same size: refused, saying so; a
 * checkpoint from before the text hash: resumed with a note. */
START_TEST(test_resume_other_text)
{
    tu_write_corpus(dir, "a.txt", 1000);
    write_file("b.txt", "Another text, with other words in it, long enough to train on and to "
               "validate on as well: quite some bytes of it in the end.\n");
    const char *m = "--d-model 16 --heads 2 --d-ff 32 --seq-len 8 --batch 4 --layers 1 "
                    "--threads 1 --quiet";
    char a[1024];
    snprintf(a, sizeof a, "train --text a.txt b.txt %s --steps 6 --stop-after 2 --checkpoint "
             "h.ckpt", m);
    ck_assert_int_eq(run(a), 0);
    char v[64];
    ck_assert_ptr_nonnull(meta_of("h.ckpt", "data.text_hash", v, sizeof v));
    ck_assert_str_eq(meta_of("h.ckpt", "data.files", v, sizeof v), "2");
    expect_refusal("train --text b.txt a.txt --resume h.ckpt --quiet",
                   "content or order differs");
    expect_refusal("train --text a.txt --resume h.ckpt --quiet", "was trained on");
    /* --text that contradicts the checkpoint is a usage error, as other contradicting options */
    ck_assert_int_eq(run("train --text b.txt a.txt --resume h.ckpt --quiet"), 2);
    ck_assert_int_eq(run("train --text a.txt --resume h.ckpt --quiet"), 2);
    /* the same size, one byte changed */
    char *txt = slurp("a.txt", NULL);
    txt[10] = txt[10] == 'e' ? 'o' : 'e';
    write_file("a2.txt", txt);
    free(txt);
    expect_refusal("train --text a2.txt b.txt --resume h.ckpt --quiet",
                   "content or order differs");
    ck_assert_int_eq(run("train --text a.txt b.txt --resume h.ckpt --stop-after 3 --quiet"), 0);
    /* an older checkpoint: no hash, accepted with a note (quiet or not, one line) */
    rewrite("h.ckpt", "old.ckpt", "data.text_hash", NULL, NULL, NULL);
    rewrite("old.ckpt", "old.ckpt", "data.files", NULL, NULL, NULL);
    ck_assert_int_eq(run("train --text b.txt a.txt --resume old.ckpt --stop-after 4"), 0);
    char *err = slurp("err.txt", NULL);
    ck_assert_msg(strstr(err, "records no hash of its text"), "%s", err);
    free(err);
}
END_TEST

/* One writer per checkpoint: a second run on a checkpoint in use is refused in one line naming
 * the first run's pid; the lock goes with the run. */
START_TEST(test_checkpoint_lock)
{
    write_corpus("c.txt");
    char cmd[4096];
    snprintf(cmd, sizeof cmd,
             "(" SIGINT_DFL "'%s' train " TEXT_MODEL " --steps 1000000 --eval-every 1000000 "
             "--save-every 1 --checkpoint l.ckpt --quiet & pid=$!; "
             "i=0; while [ ! -e l.ckpt ] && [ $i -lt 200 ]; do sleep 0.05; i=$((i+1)); done; "
             "'%s' train " TEXT_MODEL " --steps 5 --checkpoint l.ckpt --force --quiet "
             "2> second.txt; echo \"fresh $? $pid\" > rc.txt; "
             "'%s' train --text c.txt --resume l.ckpt --steps 2000000 --quiet 2>> second.txt; "
             "echo \"resume $?\" >> rc.txt; ln -s l.ckpt link.ckpt; "
             "'%s' train --text c.txt --resume link.ckpt --steps 2000000 --quiet "
             "2>> second.txt; echo \"link $?\" >> rc.txt; kill -INT $pid; wait $pid)",
             exe(), exe(), exe(), exe());
    ck_assert_int_eq(run_sh(cmd, 60, NULL), 130);
    char *rc = slurp("rc.txt", NULL), *second = slurp("second.txt", NULL);
    long pid = 0;
    ck_assert_msg(sscanf(rc, "fresh 1 %ld", &pid) == 1 && strstr(rc, "resume 1") &&
                  strstr(rc, "link 1"), "%s: %s", rc, second);
    char want[160];
    snprintf(want, sizeof want, "'l.ckpt' is in use by another tgrad run (pid %ld)", pid);
    ck_assert_int_eq(count_lines(second), 3);
    const char *l2 = strchr(second, '\n') + 1;
    ck_assert_msg(strstr(second, want) && strstr(l2, want), "%s", second);
    snprintf(want, sizeof want, "'link.ckpt' is in use by another tgrad run (pid %ld)", pid);
    ck_assert_msg(strstr(strchr(l2, '\n') + 1, want), "%s", second);
    free(rc);
    free(second);
    /* nothing left next to the checkpoint (a lock file would outlive a killed run) */
    DIR *d = opendir(dir);
    ck_assert_ptr_nonnull(d);
    struct dirent *e;
    while ((e = readdir(d)) != NULL)
        ck_assert_msg(!strstr(e->d_name, "lock") && !strstr(e->d_name, ".tmp."), "left: %s",
                      e->d_name);
    closedir(d);
    /* free again (the lock went with its process): resumed */
    char v[64], a[512];
    snprintf(a, sizeof a, "train --text c.txt --resume l.ckpt --stop-after %ld --quiet",
             atol(meta_of("l.ckpt", "optim.step", v, sizeof v)) + 1);
    ck_assert_int_eq(run(a), 0);
}
END_TEST

/* Ctrl-C: acknowledged at once with the step it stops after; further SIGINT/SIGTERM while it
 * finishes and saves change nothing: that step is saved, exit 130. */
START_TEST(test_interrupt_twice)
{
    /* steps of ~0.3 s: the second and third signal arrive while the step still runs */
    const char *big = "--task copy --target-acc 0 --d-model 256 --layers 2 --seq-len 32 "
                      "--batch 32 --threads 1 --eval-every 1000000 --steps 1000000";
    char cmd[4096];
    snprintf(cmd, sizeof cmd, "(" SIGINT_DFL "'%s' train %s --checkpoint i.ckpt --quiet & "
             "pid=$!; sleep 1.5; "
             "kill -INT $pid; sleep 0.05; kill -INT $pid; kill -TERM $pid; wait $pid)", exe(),
             big);
    ck_assert_int_eq(run_sh(cmd, 120, NULL), 130);
    char *err = slurp("err.txt", NULL);
    const char *s = strstr(err, "stopping after step ");
    ck_assert_msg(s && strstr(err, "already stopping"), "%s", err);
    long at = atol(s + 20);
    char v[64];
    ck_assert_msg(meta_of("i.ckpt", "optim.step", v, sizeof v), "no checkpoint: %s", err);
    ck_assert_int_eq(atol(v), at);
    char want[64];
    snprintf(want, sizeof want, "interrupted at step %ld;", at);
    ck_assert_msg(strstr(err, want), "%s", err);
    free(err);
}
END_TEST

/* sample, export and info hold a checkpoint to what resume restores: the optimizer state complete and
 * of the checkpoint's optimizer; sample --source refuses the sampling options (exit 2). */
START_TEST(test_sample_like_resume)
{
    make_text_ckpt("t.ckpt", NULL);
    struct {
        const char *drop, *rename, *to, *needle;
    } cases[] = {
        {"adam.m.tok_emb.weight", NULL, NULL, "lacks optimizer state 'adam.m.tok_emb.weight'"},
        {"adam.v.head.bias", NULL, NULL, "lacks optimizer state 'adam.v.head.bias'"},
        {NULL, "adam.m.head.bias", "sgd.momentum.head.bias",
         "'sgd.momentum.head.bias' is SGD momentum state, which the optimizer restored "
         "into (adamw) does not keep"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char ps[512], pd[512];
        path_of("t.ckpt", ps, sizeof ps);
        path_of("bad.ckpt", pd, sizeof pd);
        tu_st_rewrite(ps, pd, &(tu_st_edit){.drop = cases[i].drop, .rename = cases[i].rename,
                                            .to = cases[i].to});
        expect_refusal("sample --checkpoint bad.ckpt --tokens 3", cases[i].needle);
        expect_refusal("train --text c.txt --resume bad.ckpt --steps 6 --quiet", NULL);
        expect_refusal("export --checkpoint bad.ckpt --out e.safetensors", cases[i].needle);
        expect_refusal("info bad.ckpt", cases[i].needle);
    }
    /* no optimizer state at all: every adam.* tensor dropped, one at a time */
    char ps[512], pd[512], pn[512];
    path_of("t.ckpt", ps, sizeof ps);
    path_of("bare.ckpt", pd, sizeof pd);
    path_of("next.ckpt", pn, sizeof pn);
    tu_st_rewrite(ps, pd, &(tu_st_edit){0});
    tg_ctx *ctx = tg_ctx_new();
    tg_safetensors *st = tg_safetensors_read(ctx, ps);
    ck_assert_ptr_nonnull(st);
    for (int64_t j = 0; j < tg_safetensors_count(st); j++)
        if (!strncmp(tg_safetensors_name(st, j), "adam.", 5)) {
            tu_st_rewrite(pd, pn, &(tu_st_edit){.drop = tg_safetensors_name(st, j)});
            ck_assert_int_eq(rename(pn, pd), 0);
        }
    tg_ctx_free(ctx);
    expect_refusal("sample --checkpoint bare.ckpt --tokens 3", "lacks optimizer state");
    expect_refusal("info bare.ckpt", "not a valid tgrad checkpoint");
    ck_assert_int_eq(run("info t.ckpt"), 0);
    /* seq2seq: --source decodes exactly seq_len digits greedily */
    ck_assert_int_eq(run("train --arch seq2seq --task copy --d-model 8 --heads 2 --d-ff 16 "
                         "--seq-len 4 --batch 4 --layers 1 --threads 1 --steps 2 --target-acc 0 "
                         "--quiet --checkpoint s.ckpt"), 0);
    ck_assert_int_eq(run("sample --checkpoint s.ckpt --source 1234"), 0);
    ck_assert_int_eq(run("info s.ckpt"), 0);
    static const char *const extra[] = {"--tokens 9", "--temperature 0.5", "--top-k 3",
                                        "--seed 4"};
    for (size_t i = 0; i < sizeof extra / sizeof extra[0]; i++) {
        char a[256];
        snprintf(a, sizeof a, "sample --checkpoint s.ckpt --source 1234 %s", extra[i]);
        expect_refusal(a, "do not apply");
        ck_assert_int_eq(run(a), 2);
    }
}
END_TEST

/* Every line of @p text fits in 80 columns (bytes: the text is ASCII). */
static void expect_width_80(const char *what, const char *text)
{
    for (const char *p = text; p && *p;) {
        size_t len = strcspn(p, "\n");
        ck_assert_msg(len <= 80, "%s: a line of %zu columns: %.*s", what, len, (int)len, p);
        p += len;
        if (*p)
            p++;
    }
}

/* The graph of a task run without training it: --dry-run --dot writes the DOT file and the
 * memory plan and nothing else, exit 0 (a one-step run would end below --target-acc, exit 3);
 * --help says so, in 80 columns. */
START_TEST(test_dry_run_dot)
{
    ck_assert_msg(run("train --task reverse --dry-run --dot g.dot --log l.csv --plot p.svg "
                      "--checkpoint c.ckpt") == 0, "%s", slurp("err.txt", NULL));
    char *g = slurp("g.dot", NULL), *out = slurp("out.txt", NULL);
    ck_assert_msg(g && strstr(g, "digraph tgrad {"), "no graph");
    ck_assert_msg(strstr(out, "memory plan of the training graph"), "%s", out);
    expect_width_80("train --dry-run", out);
    struct stat sb;
    char p[512];
    static const char *const none[] = {"l.csv", "p.svg", "c.ckpt"};
    for (size_t i = 0; i < sizeof none / sizeof none[0]; i++) {
        path_of(none[i], p, sizeof p);
        ck_assert_msg(stat(p, &sb) != 0, "--dry-run wrote %s", none[i]);
    }
    free(g);
    free(out);
    ck_assert_int_eq(run("train --help"), 0);
    out = slurp("out.txt", NULL);
    ck_assert_msg(strstr(out, "write --dot if given") && strstr(out, "--dry-run: the graph only"),
                  "%s", out);
    expect_width_80("train --help", out);
    free(out);
    write_corpus("c.txt"); /* with --grad-accum: the accumulation row and its note */
    ck_assert_int_eq(run("train " TEXT_MODEL " --grad-accum 2 --dry-run"), 0);
    out = slurp("out.txt", NULL);
    ck_assert_msg(strstr(out, "packed copies of the gradients"), "%s", out);
    expect_width_80("train --dry-run --grad-accum 2", out);
    free(out);
}
END_TEST

/* Every line `tgrad train` prints (the header, the progress lines of a log, the summary) fits
 * in 80 columns, for a text, a task and a seq2seq run; --threads above the CPUs this process
 * may use is lowered to their number with one warning line. */
START_TEST(test_lines_fit_80_columns)
{
    write_corpus("c.txt");
    cpu_set_t set;
    CPU_ZERO(&set);
    ck_assert_int_eq(sched_getaffinity(0, sizeof set, &set), 0);
    int cpus = CPU_COUNT(&set);
    static const char *const runs[] = {
        "train --text c.txt --d-model 32 --heads 2 --seq-len 16 --batch 8 --steps 3 "
        "--eval-every 2 --threads 1024",
        "train --task reverse --d-model 16 --heads 2 --seq-len 6 --batch 8 --steps 3 "
        "--eval-every 2 --target-acc 0 --grad-accum 2 --threads 1024",
        "train --arch seq2seq --task copy --d-model 16 --heads 2 --seq-len 4 --batch 8 "
        "--steps 3 --eval-every 2 --target-acc 0.5 --threads 1024",
    };
    for (size_t i = 0; i < sizeof runs / sizeof runs[0]; i++) {
        int rc = run(runs[i]);
        char *out = slurp("out.txt", NULL), *err = slurp("err.txt", NULL);
        ck_assert_msg(rc == 0 || rc == 3, "%s: exit %d: %s", runs[i], rc, err);
        expect_width_80(runs[i], out);
        expect_width_80(runs[i], err);
        char want[160];
        snprintf(want, sizeof want, "--threads 1024: only %d CPU%s available to this process; "
                 "using %d\n", cpus, cpus == 1 ? "" : "s", cpus);
        if (cpus < 1024)
            ck_assert_msg(strstr(err, want), "%s: no warning '%s' in: %s", runs[i], want, err);
        snprintf(want, sizeof want, " %d thread%s", cpus < 1024 ? cpus : 1024,
                 cpus == 1 ? "" : "s");
        ck_assert_msg(strstr(err, want), "%s: the header lacks '%s': %s", runs[i], want, err);
        ck_assert_msg(strstr(err, "step 3/3"), "%s: no progress: %s", runs[i], err);
        free(out);
        free(err);
    }
}
END_TEST

/* The numbers of the `<text class="CLS" ...>N</text>` elements of an SVG (at most cap). */
static int svg_numbers(const char *svg, const char *cls, double *v, int cap)
{
    char key[64];
    snprintf(key, sizeof key, "class=\"%s\"", cls);
    int n = 0;
    for (const char *p = strstr(svg, key); p && n < cap; p = strstr(p + 1, key)) {
        const char *gt = strchr(p, '>');
        ck_assert_ptr_nonnull(gt);
        char *end;
        v[n++] = strtod(gt + 1, &end);
        ck_assert_msg(*end == '<', "tick '%.20s' is not a number", gt + 1);
    }
    return n;
}

/* Occurrences of @p needle in @p s. */
static int occurrences(const char *s, const char *needle)
{
    int n = 0;
    for (const char *p = strstr(s, needle); p; p = strstr(p + 1, needle))
        n++;
    return n;
}

/* Is @p x (> 0) 1, 2 or 5 times a power of ten? */
static bool round_125(double x)
{
    double p = pow(10, floor(log10(x) + 1e-9)), m = x / p;
    return fabs(m - 1) < 1e-6 || fabs(m - 2) < 1e-6 || fabs(m - 5) < 1e-6;
}

/* --plot: round ticks (steps of 1, 2 or 5 x 10^k), a loss axis from 0, never below; a marker
 * on every validation point; a task run's accuracy (what it stops on) in a second panel with
 * its target; --plot-log: ticks at 1, 2, 5 x 10^k. */
START_TEST(test_plot)
{
    ck_assert_int_eq(run("train " TASK_MODEL " --steps 6 --eval-every 2 --target-acc 0.95 "
                         "--plot p.svg --quiet"), 3);
    char *svg = slurp("p.svg", NULL);
    ck_assert_ptr_nonnull(svg);
    double y[64], x[64];
    int ny = svg_numbers(svg, "ytick", y, 64);
    ck_assert_int_ge(ny, 2 + 2); /* the loss panel's and the accuracy panel's */
    int nl = 0; /* the loss panel's ticks: up to the first repeated 0 (the accuracy panel) */
    while (nl < ny && (nl == 0 || y[nl] > y[nl - 1]))
        nl++;
    ck_assert_int_ge(nl, 2);
    ck_assert_msg(y[0] >= 0, "the loss axis starts below 0: %g", y[0]);
    double step = y[1] - y[0];
    ck_assert_msg(round_125(step), "tick step %g is not 1, 2 or 5 x 10^k", step);
    for (int i = 1; i < nl; i++)
        ck_assert_msg(fabs(y[i] - y[i - 1] - step) < 1e-9 * fmax(1, step) &&
                          fabs(y[i] / step - round(y[i] / step)) < 1e-6,
                      "tick %g is not a multiple of %g", y[i], step);
    ck_assert_msg(ny - nl == 6 && y[nl] == 0 && y[ny - 1] == 100, "accuracy ticks 0-100: "
                  "%d of them", ny - nl);
    int nx = svg_numbers(svg, "xtick", x, 64);
    ck_assert_int_ge(nx, 2);
    ck_assert_msg(round_125(x[1] - x[0]), "step ticks %g, %g", x[0], x[1]);
    ck_assert_int_eq(occurrences(svg, "class=\"val-marker\""), 3);    /* steps 2, 4, 6 */
    ck_assert_int_eq(occurrences(svg, "class=\"metric-marker\""), 3);
    ck_assert_ptr_nonnull(strstr(svg, "held-out token accuracy"));
    ck_assert_int_eq(occurrences(svg, "class=\"target\""), 1);
    free(svg);
    /* log scale */
    ck_assert_int_eq(run("train " TASK_MODEL " --steps 6 --eval-every 2 --target-acc 0 "
                         "--plot q.svg --plot-log --quiet"), 0);
    svg = slurp("q.svg", NULL);
    ck_assert_ptr_nonnull(strstr(svg, "(log scale)"));
    ny = svg_numbers(svg, "ytick", y, 64);
    for (int i = 0; i < ny && (i == 0 || y[i] > y[i - 1]); i++)
        ck_assert_msg(y[i] > 0 && round_125(y[i]), "log tick %g", y[i]);
    ck_assert_int_eq(occurrences(svg, "class=\"target\""), 0); /* --target-acc 0: none */
    free(svg);
    /* a text run stops on its steps: the losses only */
    write_corpus("c.txt");
    ck_assert_int_eq(run("train " TEXT_MODEL " --steps 4 --eval-every 2 --plot t.svg --quiet"),
                     0);
    svg = slurp("t.svg", NULL);
    ck_assert_ptr_null(strstr(svg, "id=\"metric\""));
    ck_assert_int_eq(occurrences(svg, "class=\"val-marker\""), 2);
    free(svg);
    ck_assert_int_eq(run("train --help"), 0);
    char *out = slurp("out.txt", NULL);
    ck_assert_ptr_nonnull(strstr(out, "--plot-log"));
    free(out);
}
END_TEST

/* --attn-dropout and --act-dropout: recorded only when given (model.attn_dropout 0 = none,
 * model.act_dropout 0.2), absent otherwise (as --dropout); a run of 6 steps equals 3 steps
 * resumed to 6, byte for byte (the options restored from the checkpoint); the same values as
 * --dropout give the same weights as not giving them; out of range refused. */
START_TEST(test_dropout_apart_options)
{
    make_text_ckpt("p.ckpt", "--dropout 0.2");
    char v[64];
    ck_assert_ptr_null(meta_of("p.ckpt", "model.attn_dropout", v, sizeof v));
    ck_assert_ptr_null(meta_of("p.ckpt", "model.act_dropout", v, sizeof v));
    static const char *const opt = "--dropout 0.2 --attn-dropout 0 --act-dropout 0.2 --steps 6 "
                                   "--eval-every 3 --save-every 3";
    char a[1024];
    snprintf(a, sizeof a, "train " TEXT_MODEL " --quiet --checkpoint full.ckpt %s", opt);
    ck_assert_msg(run(a) == 0, "%s", slurp("err.txt", NULL));
    ck_assert_str_eq(meta_of("full.ckpt", "model.attn_dropout", v, sizeof v), "0");
    ck_assert_str_eq(meta_of("full.ckpt", "model.act_dropout", v, sizeof v), "0.2");
    snprintf(a, sizeof a, "train " TEXT_MODEL " --quiet --checkpoint half.ckpt %s --stop-after 3",
             opt);
    ck_assert_msg(run(a) == 0, "%s", slurp("err.txt", NULL));
    ck_assert_msg(run("train --text c.txt --resume half.ckpt --quiet") == 0, "%s",
                  slurp("err.txt", NULL));
    size_t n1, n2;
    char *f1 = slurp("full.ckpt", &n1), *f2 = slurp("half.ckpt", &n2);
    ck_assert(n1 == n2 && memcmp(f1, f2, n1) == 0);
    free(f1);
    free(f2);
    expect_refusal("train --attn-dropout 1", "--attn-dropout '1'");
    expect_refusal("train --act-dropout -0.1", "--act-dropout '-0.1'");
}
END_TEST

/* --keep-best: the lowest validation loss's checkpoint beside the last (a.best.ckpt), both
 * equal, byte for byte, to those of a run stopped and resumed (which keeps keeping it without
 * the option: train.keep_best); refused without --checkpoint, over an existing file without
 * --force (a resumed run owns one only if it kept its best), and onto the resumed
 * checkpoint. */
START_TEST(test_keep_best)
{
    write_corpus("c.txt");
    static const char *const opt = "--steps 8 --eval-every 2 --keep-best --quiet";
    char a[1024];
    snprintf(a, sizeof a, "train " TEXT_MODEL " %s --checkpoint full.ckpt --log full.csv", opt);
    ck_assert_msg(run(a) == 0, "%s", slurp("err.txt", NULL));
    char v[64];
    ck_assert_str_eq(meta_of("full.ckpt", "train.keep_best", v, sizeof v), "1");
    ck_assert_ptr_nonnull(meta_of("full.best.ckpt", "optim.step", v, sizeof v));
    snprintf(a, sizeof a, "train " TEXT_MODEL " %s --checkpoint half.ckpt --stop-after 4", opt);
    ck_assert_msg(run(a) == 0, "%s", slurp("err.txt", NULL));
    ck_assert_msg(run("train --text c.txt --resume half.ckpt --quiet") == 0, "%s",
                  slurp("err.txt", NULL));
    const char *pairs[2][2] = {{"full.ckpt", "half.ckpt"}, {"full.best.ckpt", "half.best.ckpt"}};
    for (int i = 0; i < 2; i++) {
        size_t n1, n2;
        char *f1 = slurp(pairs[i][0], &n1), *f2 = slurp(pairs[i][1], &n2);
        ck_assert_msg(f1 && f2 && n1 == n2 && memcmp(f1, f2, n1) == 0, "%s", pairs[i][0]);
        free(f1);
        free(f2);
    }
    expect_refusal("train --text c.txt --keep-best --steps 2", "--keep-best needs --checkpoint");
    tu_write_file(dir, "z.best.ckpt", "mine");
    expect_refusal("train " TEXT_MODEL " --steps 2 --keep-best --checkpoint z.ckpt",
                   "--keep-best 'z.best.ckpt' exists");
    char *mine = slurp("z.best.ckpt", NULL);
    ck_assert_str_eq(mine, "mine"); /* untouched */
    free(mine);
    expect_refusal("train --text c.txt --resume full.best.ckpt --checkpoint full.ckpt "
                   "--keep-best --force --steps 10",
                   "--keep-best 'full.best.ckpt' is the input --resume");
    /* a resumed run that did not keep its best does not own an existing .best file */
    snprintf(a, sizeof a, "train " TEXT_MODEL " --steps 4 --eval-every 2 --quiet --checkpoint "
             "w.ckpt --stop-after 2");
    ck_assert_msg(run(a) == 0, "%s", slurp("err.txt", NULL));
    tu_write_file(dir, "w.best.ckpt", "mine");
    expect_refusal("train --text c.txt --resume w.ckpt --keep-best", "--keep-best 'w.best.ckpt' "
                   "exists");
    mine = slurp("w.best.ckpt", NULL);
    ck_assert_str_eq(mine, "mine");
    free(mine);
}
END_TEST

/* Numbers in checkpoints and in `tgrad info` are the shortest decimal that reads back as the
 * same double: train.lr 0.003, not 0.0030000000000000001 (also for a checkpoint that stored
 * the 17 digits); --seed names its maximum in the message and in --help. */
START_TEST(test_shortest_numbers)
{
    make_text_ckpt("a.ckpt", "--lr 0.003 --min-lr 0.0003 --dropout 0.1");
    char v[64];
    ck_assert_str_eq(meta_of("a.ckpt", "train.lr", v, sizeof v), "0.003");
    ck_assert_str_eq(meta_of("a.ckpt", "train.min_lr", v, sizeof v), "0.0003");
    ck_assert_str_eq(meta_of("a.ckpt", "model.dropout", v, sizeof v), "0.1");
    rewrite("a.ckpt", "b.ckpt", "train.lr", "0.0030000000000000001", NULL, NULL);
    ck_assert_int_eq(run("info b.ckpt"), 0);
    char *out = slurp("out.txt", NULL);
    const char *at = strstr(out, "train.lr");
    ck_assert_msg(at, "%s", out);
    ck_assert_msg(!strncmp(at + strcspn(at, " "), " ", 1) && strstr(at, " 0.003\n") &&
                      !strstr(out, "0.0030000000000000001"), "%s", out);
    ck_assert_ptr_nonnull(strstr(out, "train.min_lr             0.0003\n"));
    free(out);
    /* the resumed run reads the same double back: it goes on from the same learning rate */
    ck_assert_int_eq(run("train --text c.txt --resume b.ckpt --steps 4 --quiet"), 0);
    ck_assert_str_eq(meta_of("b.ckpt", "train.lr", v, sizeof v), "0.003");
    ck_assert_int_eq(run("train --help"), 0);
    out = slurp("out.txt", NULL);
    ck_assert_msg(strstr(out, "random seed (0)  [0..9223372036854775807]"), "%s", out);
    free(out);
    expect_refusal("train --seed 9223372036854775808",
                   "--seed '9223372036854775808': expected an integer from 0 to "
                   "9223372036854775807");
    expect_refusal("sample --checkpoint a.ckpt --seed -1", "from 0 to 9223372036854775807");
}
END_TEST

/* ---- the schedule, Adam's beta2 and eps, label smoothing ---------------------------------- */

/* The lr column of a --log, one value per step (rows 1..n), into lr[]; returns the count. */
static int log_lrs(const char *name, double *lr, int cap)
{
    char *l = slurp(name, NULL);
    ck_assert_ptr_nonnull(l);
    int n = 0;
    for (const char *p = strchr(l, '\n'); p && p[1] && n < cap; p = strchr(p + 1, '\n')) {
        long long step;
        double v;
        ck_assert_msg(sscanf(p + 1, "%lld,%*[^,],%*[^,],%lf", &step, &v) == 2 ||
                          sscanf(p + 1, "%lld,%*[^,],,%lf", &step, &v) == 2, "%s", p + 1);
        ck_assert_int_eq(step, n + 1);
        lr[n++] = v;
    }
    free(l);
    return n;
}

/* --schedule noam (--lr is the factor, 1 by default), --beta2, --eps and --label-smoothing:
 * used (the log's learning rates are tg_lr_noam's), recorded in the checkpoint, shown by
 * `tgrad info`, restored by --resume (the continued run equals a straight one byte for byte),
 * overridden by giving them again; a checkpoint without the fields (older tgrad) resumes with
 * the old defaults (cosine, 0.999, 1e-8, no smoothing). */
START_TEST(test_schedule_adam_smoothing)
{
    const char *opts = TASK_MODEL " --target-acc 0 --eval-every 2 --quiet --schedule noam "
                       "--warmup 3 --beta2 0.98 --eps 1e-9 --label-smoothing 0.1";
    char a[1024], v[64];
    snprintf(a, sizeof a, "train %s --steps 8 --checkpoint s.ckpt --log s.csv", opts);
    ck_assert_msg(run(a) == 0, "%s", slurp("err.txt", NULL));
    double lr[16];
    ck_assert_int_eq(log_lrs("s.csv", lr, 16), 8);
    for (int i = 0; i < 8; i++) /* the log prints 6 significant digits */
        ck_assert_msg(fabs(lr[i] - tg_lr_noam(i, 8, 3, 1.0)) <= 1e-5 * lr[i], "step %d: %g",
                      i + 1, lr[i]);
    ck_assert_str_eq(meta_of("s.ckpt", "train.schedule", v, sizeof v), "noam");
    ck_assert_str_eq(meta_of("s.ckpt", "train.lr", v, sizeof v), "1");
    ck_assert_str_eq(meta_of("s.ckpt", "train.beta2", v, sizeof v), "0.98");
    ck_assert_str_eq(meta_of("s.ckpt", "train.eps", v, sizeof v), "1e-09");
    ck_assert_str_eq(meta_of("s.ckpt", "train.label_smoothing", v, sizeof v), "0.1");
    ck_assert_int_eq(run("info s.ckpt"), 0);
    char *out = slurp("out.txt", NULL);
    ck_assert_msg(strstr(out, "train.schedule           noam\n") &&
                      strstr(out, "train.beta2              0.98\n") &&
                      strstr(out, "train.eps                1e-09\n") &&
                      strstr(out, "train.label_smoothing    0.1\n"), "%s", out);
    free(out);
    /* resumed without the options: every one restored, the same bytes as the straight run */
    snprintf(a, sizeof a, "train %s --steps 8 --stop-after 3 --checkpoint r.ckpt", opts);
    ck_assert_int_eq(run(a), 0);
    ck_assert_msg(run("train --resume r.ckpt --quiet") == 0, "%s", slurp("err.txt", NULL));
    size_t n0, n1;
    char *f0 = slurp("s.ckpt", &n0), *f1 = slurp("r.ckpt", &n1);
    ck_assert(n0 == n1 && memcmp(f0, f1, n0) == 0);
    free(f0);
    free(f1);
    /* given again: the command line wins, and is what the checkpoint keeps */
    ck_assert_int_eq(run("train --resume r.ckpt --steps 10 --schedule cosine --lr 0.002 "
                         "--beta2 0.99 --eps 1e-7 --label-smoothing 0 --quiet"), 0);
    ck_assert_str_eq(meta_of("r.ckpt", "train.schedule", v, sizeof v), "cosine");
    ck_assert_str_eq(meta_of("r.ckpt", "train.beta2", v, sizeof v), "0.99");
    ck_assert_str_eq(meta_of("r.ckpt", "train.eps", v, sizeof v), "1e-07");
    ck_assert_str_eq(meta_of("r.ckpt", "train.label_smoothing", v, sizeof v), "0");
    /* the defaults: cosine at 3e-3, 0.999, 1e-8, 0 */
    ck_assert_int_eq(run("train " TASK_MODEL " --target-acc 0 --eval-every 2 --quiet "
                         "--steps 6 --checkpoint d.ckpt"), 0);
    ck_assert_str_eq(meta_of("d.ckpt", "train.schedule", v, sizeof v), "cosine");
    ck_assert_str_eq(meta_of("d.ckpt", "train.lr", v, sizeof v), "0.003");
    ck_assert_str_eq(meta_of("d.ckpt", "train.beta2", v, sizeof v), "0.999");
    ck_assert_str_eq(meta_of("d.ckpt", "train.eps", v, sizeof v), "1e-08");
    ck_assert_str_eq(meta_of("d.ckpt", "train.label_smoothing", v, sizeof v), "0");
    /* an older checkpoint (none of the four fields) resumes with those defaults: the same
     * bytes as the straight default run */
    ck_assert_int_eq(run("train " TASK_MODEL " --target-acc 0 --eval-every 2 --quiet "
                         "--steps 6 --stop-after 3 --checkpoint o.ckpt"), 0);
    rewrite("o.ckpt", "o1.ckpt", "train.schedule", NULL, NULL, NULL);
    rewrite("o1.ckpt", "o2.ckpt", "train.beta2", NULL, NULL, NULL);
    rewrite("o2.ckpt", "o1.ckpt", "train.eps", NULL, NULL, NULL);
    rewrite("o1.ckpt", "old.ckpt", "train.label_smoothing", NULL, NULL, NULL);
    ck_assert_ptr_null(meta_of("old.ckpt", "train.beta2", v, sizeof v));
    ck_assert_msg(run("train --resume old.ckpt --quiet") == 0, "%s", slurp("err.txt", NULL));
    f0 = slurp("d.ckpt", &n0);
    f1 = slurp("old.ckpt", &n1);
    ck_assert(n0 == n1 && memcmp(f0, f1, n0) == 0);
    free(f0);
    free(f1);
}
END_TEST

/* --label-smoothing changes the training loss only: with --lr 0 (the parameters never move)
 * the validation losses of runs with and without it are identical, the training losses not. */
START_TEST(test_label_smoothing_validation_unsmoothed)
{
    const char *base = "train " TASK_MODEL " --target-acc 0 --eval-every 2 --steps 4 --lr 0 "
                       "--quiet";
    char a[512];
    snprintf(a, sizeof a, "%s --log plain.csv", base);
    ck_assert_int_eq(run(a), 0);
    snprintf(a, sizeof a, "%s --label-smoothing 0.3 --log ls.csv", base);
    ck_assert_int_eq(run(a), 0);
    char *p = slurp("plain.csv", NULL), *q = slurp("ls.csv", NULL);
    int vals = 0;
    for (const char *x = strchr(p, '\n'), *y = strchr(q, '\n'); x && y && x[1] && y[1];
         x = strchr(x + 1, '\n'), y = strchr(y + 1, '\n')) {
        double tx, ty;
        char vx[32] = "", vy[32] = "";
        ck_assert(sscanf(x + 1, "%*d,%lf,%31[^,]", &tx, vx) >= 1);
        ck_assert(sscanf(y + 1, "%*d,%lf,%31[^,]", &ty, vy) >= 1);
        ck_assert_msg(tx != ty, "training loss %g unchanged by smoothing", tx);
        ck_assert_str_eq(vx, vy); /* empty between evaluations */
        vals += vx[0] != 0;
    }
    ck_assert_int_eq(vals, 2);
    free(p);
    free(q);
}
END_TEST

/* ---- exit statuses: one rule for every command ------------------------------------------ */
/* 2: the command line is at fault (an unknown option, a value out of range, options that
 * exclude each other or contradict the checkpoint, the wrong kind of checkpoint for the
 * command); 1: a run-time failure (a file missing, not a checkpoint, corrupt); 0: success.
 * Every failure is one line on stderr; `needle` (NULL: any) must be in it, `absent` not. */
static const struct {
    const char *args;
    int rc;
    const char *needle, *absent;
} exit_table[] = {
    /* top level */
    {"", 2, NULL, NULL},
    {"frobnicate", 2, "unknown command", NULL},
    {"help frobnicate", 2, "unknown command", NULL},
    /* train */
    {"train --steps 0", 2, "--steps '0'", NULL},
    {"train --seed 9223372036854775808", 2, "from 0 to 9223372036854775807", NULL},
    {"train --task copy --heads 3 --steps 1", 2, "--heads 3 does not divide", NULL},
    {"train " TASK_MODEL " --grad-accum 3 --steps 1", 2, "--grad-accum 3", NULL},
    {"train --text c.txt --task copy", 2, "exclude each other", NULL},
    {"train --task copy --arch lm", 2, "--arch lm", NULL},
    {"train --text c.txt --arch seq2seq", 2, "--arch seq2seq", NULL},
    {"train --text c.txt --resume task.ckpt", 2, "task run", NULL},
    {"train --task copy --resume text.ckpt", 2, "--text run", NULL},
    {"train --text c.txt --resume text.ckpt --d-model 32", 2, "different config", NULL},
    {"train --text c.txt --resume text.ckpt --steps 2", 2, "raise --steps", NULL},
    {"train --text c.txt --resume text.ckpt --steps 9 --stop-after 2", 2, "--stop-after",
     NULL},
    {"train --task copy --resume s2s.ckpt --arch encoder --steps 9", 2, "different config",
     NULL},
    {"train --text missing.txt --steps 1", 1, "missing.txt", NULL},
    {"train --text c.txt --resume missing.ckpt", 1, "missing.ckpt", NULL},
    {"train --text c.txt --resume c.txt", 1, NULL, NULL},
    /* sample */
    {"sample", 2, "--checkpoint", NULL},
    {"sample --checkpoint text.ckpt --tokens -1", 2, "--tokens", NULL},
    {"sample --checkpoint s2s.ckpt --prompt hi", 2, "is a seq2seq checkpoint", "--source:"},
    {"sample --checkpoint s2s.ckpt", 2, "give --source", NULL},
    {"sample --checkpoint s2s.ckpt --source 12", 2, "exactly 4", NULL},
    {"sample --checkpoint s2s.ckpt --source 12a4", 2, "not a digit", NULL},
    {"sample --checkpoint text.ckpt --source 1234", 2, "not a seq2seq checkpoint", "--source:"},
    {"sample --checkpoint task.ckpt", 2, "nothing to sample", NULL},
    {"sample --checkpoint text.ckpt --prompt '#' --tokens 1", 2, "not in the model's vocabulary",
     NULL},
    {"sample --checkpoint missing.ckpt", 1, "missing.ckpt", NULL},
    {"sample --checkpoint c.txt", 1, NULL, NULL},
    {"sample --checkpoint text.ckpt --tokens 3", 0, NULL, NULL},
    /* export */
    {"export --checkpoint text.ckpt", 2, "--out", NULL},
    {"export --checkpoint text.ckpt --out text.ckpt", 2, "the checkpoint itself", NULL},
    {"export --checkpoint s2s.ckpt --out s2s.st", 0, NULL, NULL},
    {"export --checkpoint missing.ckpt --out e.st", 1, "missing.ckpt", NULL},
    {"export --checkpoint c.txt --out e.st", 1, NULL, NULL},
    {"export --checkpoint text.ckpt --out e.st", 0, NULL, NULL},
    /* info */
    {"info", 2, NULL, NULL},
    {"info --bogus text.ckpt", 2, "--bogus", NULL},
    {"info missing.ckpt", 1, "missing.ckpt", NULL},
    {"info text.ckpt", 0, NULL, NULL},
    /* run */
    {"run", 2, "missing MODULE", NULL},
    {"run attention", 2, "unknown module", NULL},
    {"run sdpa --q q.npy", 2, "--k", NULL},
    {"run mha --weights w.st --heads 2 --x x.npy --q q.npy", 2, "not both", NULL},
    {"run sdpa --q missing.npy --k missing.npy --v missing.npy", 1, "missing.npy", NULL},
    /* gradcheck, bench */
    {"gradcheck --op no_such_op", 2, "no_such_op", NULL},
    {"gradcheck --dtype f16", 2, "--dtype", NULL},
    {"bench --samples 0", 2, "--samples", NULL},
    {"bench --only nothing", 2, "--only", NULL},
};

START_TEST(test_exit_status_table)
{
    make_text_ckpt("text.ckpt", NULL);
    make_task_ckpt("task.ckpt");
    ck_assert_msg(run("train --arch seq2seq " TASK_MODEL " --steps 2 --eval-every 2 "
                      "--target-acc 0 --quiet --checkpoint s2s.ckpt") == 0, "%s",
                  slurp("err.txt", NULL));
    for (size_t i = 0; i < sizeof exit_table / sizeof exit_table[0]; i++) {
        const char *args = exit_table[i].args;
        int rc = run_t(args, 60, NULL);
        char *err = slurp("err.txt", NULL);
        ck_assert_ptr_nonnull(err);
        ck_assert_msg(rc == exit_table[i].rc, "'tgrad %s' exited %d, want %d: %s", args, rc,
                      exit_table[i].rc, err);
        if (rc != 0) {
            ck_assert_msg(count_lines(err) == 1 || (rc == 2 && !*args),
                          "'tgrad %s': %d lines on stderr: %s", args, count_lines(err), err);
            ck_assert_msg(!exit_table[i].needle || strstr(err, exit_table[i].needle),
                          "'tgrad %s': '%s' lacks '%s'", args, err, exit_table[i].needle);
            ck_assert_msg(!exit_table[i].absent || !strstr(err, exit_table[i].absent),
                          "'tgrad %s': '%s' has '%s'", args, err, exit_table[i].absent);
        }
        free(err);
    }
}
END_TEST

int main(void)
{
    Suite *s = suite_create("train_cli");
    TCase *tc = tcase_create("train_cli");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_set_timeout(tc, 240);
    tcase_add_test(tc, test_option_messages);
    tcase_add_test(tc, test_numeric_options_bounded);
    tcase_add_test(tc, test_checkpoint_fields_text);
    tcase_add_test(tc, test_checkpoint_fields_sample);
    tcase_add_test(tc, test_checkpoint_fields_task);
    tcase_add_test(tc, test_checkpoint_fields_seq2seq);
    tcase_add_test(tc, test_checkpoint_reproducers);
    tcase_add_test(tc, test_memory_estimate);
    tcase_add_test(tc, test_sample_nan_weights);
    tcase_add_test(tc, test_detect_anomaly);
    tcase_add_test(tc, test_nonfinite_update);
    tcase_add_test(tc, test_fifo_never_blocks);
    tcase_add_test(tc, test_resume_saves_back);
    tcase_add_test(tc, test_grad_accum);
    tcase_add_test(tc, test_precision_recorded);
    tcase_add_test(tc, test_interrupt_prints_resume_command);
    tcase_add_test(tc, test_save_every);
    tcase_add_test(tc, test_checkpoint_not_replaced);
    tcase_add_test(tc, test_outputs_checked_up_front);
    tcase_add_test(tc, test_outputs_never_inputs);
    tcase_add_test(tc, test_no_validation);
    tcase_add_test(tc, test_no_probe_files);
    tcase_add_test(tc, test_omp_num_threads_capped);
    tcase_add_test(tc, test_huge_steps_bounded_memory);
    tcase_add_test(tc, test_progress_fits_terminal);
    tcase_add_test(tc, test_dot);
    tcase_add_test(tc, test_outputs_need_force);
    tcase_add_test(tc, test_log_cut_at_checkpoint);
    tcase_add_test(tc, test_log_accuracy_resume);
    tcase_add_test(tc, test_write_failures);
    tcase_add_test(tc, test_resume_other_text);
    tcase_add_test(tc, test_checkpoint_lock);
    tcase_add_test(tc, test_interrupt_twice);
    tcase_add_test(tc, test_sample_like_resume);
    tcase_add_test(tc, test_exit_status_table);
    tcase_add_test(tc, test_dry_run_dot);
    tcase_add_test(tc, test_lines_fit_80_columns);
    tcase_add_test(tc, test_plot);
    tcase_add_test(tc, test_shortest_numbers);
    tcase_add_test(tc, test_dropout_apart_options);
    tcase_add_test(tc, test_keep_best);
    tcase_add_test(tc, test_schedule_adam_smoothing);
    tcase_add_test(tc, test_label_smoothing_validation_unsmoothed);
    suite_add_tcase(s, tc);
    return tu_run(s);
}
