#define _DEFAULT_SOURCE /* symlink */
/*
 * test_average.c - `tgrad average` on tiny real checkpoints of `tgrad train --pairs`:
 * - the output's parameters are, bit for bit, the mean computed here independently (read back
 *   through the library's safetensors reader: the inputs summed in double precision in the
 *   order given, divided by n, rounded once to f32); no optimizer state; the newest input's
 *   metadata with average.n and average.steps; the same bytes again, and with 1 or 2 OpenMP
 *   threads;
 * - the output translates, exports and is described by `tgrad info`; `train --resume` refuses
 *   it (exit 2, naming the missing optimizer state);
 * - inputs of different models or tokenizers, an average as input and a file given twice are
 *   usage errors (exit 2); a truncated input, non-finite parameters or optimizer state, and a
 *   file that is not a checkpoint are refused naming the file (exit 1);
 * - OUT: an existing file is replaced only with --force (and left intact otherwise); an input
 *   (also through a symbolic link) is never replaced, even with --force.
 */
#include "testutil.h"
#include "tgrad_io.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static char dir[256];
static void setup(void) { tu_mkdtemp(dir, sizeof dir, "average"); }
static void teardown(void) { tu_rm_tree(dir); }
static int run(const char *args) { return tu_run_tgrad(dir, args, 120, NULL); }
static char *slurp(const char *name, size_t *len) { return tu_slurp_in(dir, name, len); }

#define DATA "--pairs train.tsv --valid valid.tsv "
#define SHAPE                                                                                      \
    "--heads 2 --d-ff 32 --layers 1 --seq-len 40 --batch-tokens 200 --threads 1 "                  \
    "--quiet "
#define MODEL "--d-model 16 " SHAPE

static void expect_rc(const char *args, int want_rc, const char *needle)
{
    int rc = run(args);
    char *err = slurp("err.txt", NULL);
    ck_assert_msg(rc == want_rc, "tgrad %s: exit %d (want %d): %s", args, rc, want_rc,
                  err ? err : "");
    if (needle) {
        ck_assert_msg(err && tu_count_lines(err) == 1, "tgrad %s: want one line: %s", args,
                      err ? err : "");
        ck_assert_msg(strstr(err, needle), "tgrad %s: '%s' lacks '%s'", args, err, needle);
    }
    free(err);
}

/* Three checkpoints of one model (byte tokenizer): steps 4, 8 and 12. */
static void three_checkpoints(void)
{
    tu_write_pairs(dir, "train.tsv", 60, 0);
    tu_write_pairs(dir, "valid.tsv", 10, 3);
    char a[512];
    for (int s = 4; s <= 12; s += 4) {
        snprintf(a, sizeof a,
                 "train " DATA "--tokenizer bytes " MODEL " --steps %d "
                 "--eval-every 4 --checkpoint s%d.ckpt",
                 s, s);
        expect_rc(a, 0, NULL);
    }
}

static tg_safetensors *open_st(tg_ctx *ctx, const char *name)
{
    char p[512];
    tg_safetensors *st = tg_safetensors_read(ctx, tu_path(p, sizeof p, dir, name));
    ck_assert_msg(st, "%s: %s", name, tg_ctx_message(ctx));
    return st;
}

static bool same_bytes(const char *a, const char *b)
{
    size_t na, nb;
    char *x = slurp(a, &na), *y = slurp(b, &nb);
    bool same = x && y && na == nb && memcmp(x, y, na) == 0;
    free(x);
    free(y);
    return same;
}

/* avg.ckpt against the mean of @p n inputs computed here, in their order. */
static void check_mean(const char *const *in, int n)
{
    tg_ctx *ctx = tg_ctx_new();
    tg_safetensors *avg = open_st(ctx, "avg.ckpt"), *st[8];
    for (int i = 0; i < n; i++)
        st[i] = open_st(ctx, in[i]);
    int64_t params = 0;
    for (int64_t j = 0; j < tg_safetensors_count(st[0]); j++)
        params += strncmp(tg_safetensors_name(st[0], j), "adam.", 5) != 0;
    ck_assert_int_eq(tg_safetensors_count(avg), params); /* parameters only */
    for (int64_t j = 0; j < tg_safetensors_count(avg); j++) {
        const char *name = tg_safetensors_name(avg, j);
        tg_tensor *t = tg_safetensors_tensor(avg, j);
        ck_assert_str_eq(tg_safetensors_file_dtype(avg, j), "F32");
        const float *got = tg_tensor_data(t);
        for (int64_t k = 0; k < tg_tensor_numel(t); k++) {
            double sum = 0;
            for (int i = 0; i < n; i++) {
                tg_tensor *x = tg_safetensors_find(st[i], name);
                ck_assert_ptr_nonnull(x);
                ck_assert_int_eq(tg_tensor_numel(x), tg_tensor_numel(t));
                sum += (double)((const float *)tg_tensor_data(x))[k];
            }
            float want = (float)(sum / n);
            ck_assert_msg(memcmp(&want, &got[k], sizeof want) == 0, "%s[%lld]: %.9g, want %.9g",
                          name, (long long)k, (double)got[k], (double)want);
        }
    }
    tg_ctx_free(ctx);
}

static const char *meta(const char *name, const char *key, char *buf, size_t n)
{
    tg_ctx *ctx = tg_ctx_new();
    const char *v = tg_safetensors_meta_get(open_st(ctx, name), key);
    if (v)
        snprintf(buf, n, "%s", v);
    tg_ctx_free(ctx);
    return v ? buf : NULL;
}

START_TEST(test_mean_and_use)
{
    three_checkpoints();
    expect_rc("average --out avg.ckpt s8.ckpt s4.ckpt s12.ckpt", 0, NULL);
    const char *in[3] = {"s8.ckpt", "s4.ckpt", "s12.ckpt"};
    check_mean(in, 3);
    char v[256], w[256];
    ck_assert_str_eq(meta("avg.ckpt", "average.n", v, sizeof v), "3");
    ck_assert_str_eq(meta("avg.ckpt", "average.steps", v, sizeof v), "8,4,12");
    ck_assert_str_eq(meta("avg.ckpt", "optim.step", v, sizeof v), "12"); /* the newest's */
    ck_assert_str_eq(meta("avg.ckpt", "rng", v, sizeof v), meta("s12.ckpt", "rng", w, sizeof w));
    /* deterministic, and the same with 1 or 2 threads */
    char sh[1024];
    for (int t = 1; t <= 2; t++) {
        snprintf(sh, sizeof sh,
                 "env OMP_NUM_THREADS=%d TGRAD_OVERSUBSCRIBE=1 '%s' average --out "
                 "t%d.ckpt s8.ckpt s4.ckpt s12.ckpt",
                 t, tu_tgrad_exe(), t);
        ck_assert_int_eq(tu_run_sh(dir, sh, 60, NULL), 0);
    }
    ck_assert(same_bytes("t1.ckpt", "avg.ckpt"));
    ck_assert(same_bytes("t2.ckpt", "avg.ckpt"));
    /* usable by translate, export, info; not resumable */
    tu_write_file(dir, "in.txt", "one two three.\n");
    expect_rc("translate --checkpoint avg.ckpt --beam 2 in.txt", 0, NULL);
    char *out = slurp("out.txt", NULL);
    ck_assert_int_eq(tu_count_lines(out), 1);
    free(out);
    expect_rc("export --checkpoint avg.ckpt --out avg.safetensors", 0, NULL);
    expect_rc("info avg.ckpt", 0, NULL);
    out = slurp("out.txt", NULL);
    ck_assert_msg(strstr(out, "average.steps") && strstr(out, "8,4,12"), "%s", out);
    free(out);
    expect_rc("train " DATA "--resume avg.ckpt --steps 20", 2, "no optimizer state");
    expect_rc("train " DATA "--resume avg.ckpt --checkpoint r.ckpt --steps 20", 2,
              "average of 3 checkpoints");
    ck_assert_int_ne(access("r.ckpt", F_OK), 0);
    /* one input: a parameters-only copy */
    expect_rc("average --out one.ckpt s4.ckpt", 0, NULL);
    const char *one[1] = {"s4.ckpt"};
    ck_assert(rename(tu_path(sh, sizeof sh, dir, "one.ckpt"),
                     tu_path(v, sizeof v, dir, "avg.ckpt")) == 0);
    check_mean(one, 1);
}
END_TEST

START_TEST(test_refusals)
{
    three_checkpoints();
    char a[1024], p[512], q[512];
    /* another model, another tokenizer */
    expect_rc("train " DATA "--tokenizer bytes " SHAPE "--d-model 8 --steps 2 --checkpoint "
              "d8.ckpt",
              0, NULL);
    expect_rc("average --out x.ckpt s4.ckpt d8.ckpt", 2,
              "'d8.ckpt' and 's4.ckpt' have different models: model.d_model is '8' in "
              "'d8.ckpt' and '16' in 's4.ckpt'");
    snprintf(a, sizeof a, "train " DATA MODEL " --vocab-size 40 --steps 2 --checkpoint u.ckpt");
    if (run(a) == 0) {
        snprintf(a, sizeof a,
                 "train " DATA MODEL " --vocab-size 40 --spm-type bpe --steps 2 "
                 "--checkpoint b.ckpt");
        expect_rc(a, 0, NULL);
        expect_rc("average --out x.ckpt u.ckpt b.ckpt", 2, "different tokenizers");
    } else {
        fprintf(stderr, "test_average: built without SentencePiece: tokenizer case skipped\n");
    }
    /* corrupt inputs, named */
    size_t len;
    char *bytes = slurp("s8.ckpt", &len);
    FILE *f = fopen(tu_path(p, sizeof p, dir, "cut.ckpt"), "wb");
    fwrite(bytes, 1, len - 100, f);
    fclose(f);
    free(bytes);
    expect_rc("average --out x.ckpt s4.ckpt cut.ckpt", 1, "cut.ckpt");
    tu_st_rewrite(tu_path(p, sizeof p, dir, "s8.ckpt"), tu_path(q, sizeof q, dir, "nan.ckpt"),
                  &(tu_st_edit){.poison = "decoder.norm.weight"});
    expect_rc("average --out x.ckpt s4.ckpt nan.ckpt", 1,
              "'nan.ckpt': parameter 'decoder.norm.weight' element 0 is nan");
    tu_st_rewrite(tu_path(p, sizeof p, dir, "s8.ckpt"), tu_path(q, sizeof q, dir, "nanm.ckpt"),
                  &(tu_st_edit){.poison = "adam.v.decoder.norm.weight"});
    expect_rc("average --out x.ckpt s4.ckpt nanm.ckpt", 1, "'nanm.ckpt'");
    tu_st_rewrite(tu_path(p, sizeof p, dir, "s8.ckpt"), tu_path(q, sizeof q, dir, "sh.ckpt"),
                  &(tu_st_edit){.drop = "head.bias"});
    expect_rc("average --out x.ckpt s4.ckpt sh.ckpt", 1, "'sh.ckpt'");
    expect_rc("export --checkpoint s4.ckpt --out e.st", 0, NULL);
    expect_rc("average --out x.ckpt s4.ckpt e.st", 1, "'e.st': not a checkpoint");
    expect_rc("average --out x.ckpt s4.ckpt missing.ckpt", 1, "missing.ckpt");
    ck_assert_int_ne(access(tu_path(p, sizeof p, dir, "x.ckpt"), F_OK), 0);
    /* an average as input, a file twice */
    expect_rc("average --out avg.ckpt s4.ckpt s8.ckpt", 0, NULL);
    expect_rc("average --out x.ckpt s4.ckpt avg.ckpt", 2, "itself an average");
    ck_assert(symlink("s4.ckpt", tu_path(p, sizeof p, dir, "link.ckpt")) == 0);
    expect_rc("average --out x.ckpt s4.ckpt link.ckpt", 2, "given twice");
    /* OUT: exists (untouched without --force), an input (even through a link, with --force) */
    tu_write_file(dir, "mine.ckpt", "mine");
    expect_rc("average --out mine.ckpt s4.ckpt s8.ckpt", 2, "--out 'mine.ckpt' exists");
    char *mine = slurp("mine.ckpt", NULL);
    ck_assert_str_eq(mine, "mine");
    free(mine);
    expect_rc("average --out mine.ckpt --force s4.ckpt s8.ckpt", 0, NULL);
    ck_assert(same_bytes("mine.ckpt", "avg.ckpt"));
    expect_rc("average --out link.ckpt --force s4.ckpt s8.ckpt", 2, "is the input");
    expect_rc("average --out s8.ckpt --force s4.ckpt s8.ckpt", 2, "is the input");
    char dev[512];
    if (tu_full_device(dir, "full", dev, sizeof dev, false, "average --out on a device")) {
        snprintf(a, sizeof a, "average --out '%s' --force s4.ckpt s8.ckpt", dev);
        expect_rc(a, 1, "not a regular file");
    }
    expect_rc("average s4.ckpt", 2, "--out");
    expect_rc("average --out x.ckpt", 2, NULL);
}
END_TEST

/* The step files of @p prefix (PREFIX.stepS.ckpt) present, as "2,4,..." in increasing step. */
static const char *steps_present(const char *prefix, char *buf, size_t n)
{
    size_t w = 0;
    buf[0] = 0;
    for (int s = 0; s <= 64; s++) {
        char name[64], p[512];
        snprintf(name, sizeof name, "%s.step%d.ckpt", prefix, s);
        if (access(tu_path(p, sizeof p, dir, name), F_OK) == 0)
            w += (size_t)snprintf(buf + w, n - w, "%s%d", w ? "," : "", s);
    }
    return buf;
}

/* --keep-last 3: the last three saves kept beside the checkpoint, the older ones this run
 * wrote removed; a run stopped and resumed (keeping them without the option: train.keep_last)
 * leaves the same files, byte for byte; a file named like a step file that the run did not
 * write is refused at the start (without --force; left untouched), and one put in place of
 * a kept step file later is not removed; the kept files average. */
START_TEST(test_keep_last)
{
    tu_write_pairs(dir, "train.tsv", 60, 0);
    tu_write_pairs(dir, "valid.tsv", 10, 3);
    static const char *const run_opts = DATA "--tokenizer bytes " MODEL " --steps 12 "
                                             "--eval-every 2 --keep-last 3";
    char a[1024], v[256], w[256];
    snprintf(a, sizeof a, "train %s --checkpoint full.ckpt", run_opts);
    expect_rc(a, 0, NULL);
    ck_assert_str_eq(steps_present("full", v, sizeof v), "8,10,12");
    ck_assert_str_eq(meta("full.ckpt", "train.keep_last", v, sizeof v), "3");
    ck_assert_str_eq(meta("full.ckpt", "train.kept", v, sizeof v), "6,8,10,12");
    snprintf(a, sizeof a, "train %s --checkpoint half.ckpt --stop-after 6", run_opts);
    expect_rc(a, 0, NULL);
    ck_assert_str_eq(steps_present("half", v, sizeof v), "2,4,6");
    tu_write_file(dir, "half.step2.ckpt", "mine"); /* no longer the run's file */
    expect_rc("train " DATA "--resume half.ckpt --quiet", 0, "'half.step2.ckpt' is no longer");
    ck_assert_str_eq(steps_present("half", v, sizeof v), "2,8,10,12");
    char *mine = slurp("half.step2.ckpt", NULL);
    ck_assert_str_eq(mine, "mine");
    free(mine);
    ck_assert(same_bytes("full.ckpt", "half.ckpt"));
    for (int s = 8; s <= 12; s += 2) {
        snprintf(v, sizeof v, "full.step%d.ckpt", s);
        snprintf(w, sizeof w, "half.step%d.ckpt", s);
        ck_assert_msg(same_bytes(v, w), "%s", w);
    }
    expect_rc("average --out avg.ckpt full.step8.ckpt full.step10.ckpt full.step12.ckpt", 0, NULL);
    ck_assert_str_eq(meta("avg.ckpt", "average.steps", v, sizeof v), "8,10,12");
    /* refusals: no --checkpoint; a step file the run did not write, untouched */
    expect_rc("train " DATA "--tokenizer bytes " MODEL " --keep-last 2 --steps 2", 2,
              "--keep-last needs --checkpoint");
    tu_write_file(dir, "z.step4.ckpt", "mine");
    snprintf(a, sizeof a, "train %s --checkpoint z.ckpt", run_opts);
    expect_rc(a, 2, "'z.step4.ckpt' exists and is not a step file of this run");
    mine = slurp("z.step4.ckpt", NULL);
    ck_assert_str_eq(mine, "mine");
    free(mine);
    ck_assert_int_ne(access(tu_path(v, sizeof v, dir, "z.ckpt"), F_OK), 0);
    /* never an input, even with --force */
    tu_write_pairs(dir, "k.step2.ckpt", 60, 0);
    expect_rc("train --pairs k.step2.ckpt --valid valid.tsv --tokenizer bytes " MODEL
              " --steps 4 --eval-every 2 --keep-last 2 --checkpoint k.ckpt --force",
              2, "is the input --pairs");
    /* with --force it may be replaced (step 4 is saved), never removed by name alone */
    snprintf(a, sizeof a, "train %s --checkpoint z.ckpt --force", run_opts);
    expect_rc(a, 0, NULL);
    ck_assert_str_eq(steps_present("z", v, sizeof v), "8,10,12");
    /* a resumed run saving elsewhere leaves the resumed run's step files alone */
    snprintf(a, sizeof a, "train %s --checkpoint p.ckpt --stop-after 6", run_opts);
    expect_rc(a, 0, NULL);
    expect_rc("train " DATA "--resume p.ckpt --checkpoint q.ckpt --quiet", 0, NULL);
    ck_assert_str_eq(steps_present("p", v, sizeof v), "2,4,6");
    ck_assert_str_eq(steps_present("q", v, sizeof v), "8,10,12");
    /* train.kept is validated like every field */
    char p1[512], p2[512];
    tu_st_rewrite(tu_path(p1, sizeof p1, dir, "p.ckpt"), tu_path(p2, sizeof p2, dir, "k.ckpt"),
                  &(tu_st_edit){.key = "train.kept", .value = "4,2"});
    expect_rc("info k.ckpt", 1, "checkpoint field 'train.kept' '4,2'");
    tu_st_rewrite(p1, p2, &(tu_st_edit){.key = "train.kept", .value = "2,4,6,8"});
    expect_rc("info k.ckpt", 1, "checkpoint field 'train.kept' '2,4,6,8'");
}
END_TEST

int main(void)
{
    Suite *s = suite_create("average");
    TCase *tc = tcase_create("cli");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_mean_and_use);
    tcase_add_test(tc, test_refusals);
    tcase_add_test(tc, test_keep_last);
    suite_add_tcase(s, tc);
    return tu_run(s);
}
