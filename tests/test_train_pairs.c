#define _GNU_SOURCE /* memmem */
/*
 * test_train_pairs.c - `tgrad train --pairs` (translation training) through the CLI, on a
 * small synthetic pairs file with tiny models (byte tokenizer, and SentencePiece when built
 * with it):
 * - a run trains, logs val_bleu, evaluates greedy BLEU and writes a checkpoint whose metadata
 *   carries the tokenizer, the data hashes and the batch cursor;
 * - stopping and resuming gives the checkpoint of the uninterrupted run, byte for byte
 *   (epoch, batch order, RNG, schedule), across an epoch boundary;
 * - resuming with other data, or without --pairs, is refused with one line (exit 2);
 * - bad options and bad files end in one line and a non-zero exit;
 * - the progress lines keep their columns (epoch, lr) across evaluations, and a resumed run
 *   shows its checkpoint's validation loss from its first line;
 * - --plot: the loss axis from 0, the BLEU panel titled as such; --help's pairs defaults;
 * - SIGTERM during the setup (a signal left pending by the parent, or one sent while the
 *   SentencePiece model trains) stops the run with exit 130, one message, nothing written; a
 *   SIGINT inherited as ignored stays ignored, in the setup and in the loop.
 */
#include "testutil.h"
#include "tgrad_io.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static char dir[256];
static void setup(void) { tu_mkdtemp(dir, sizeof dir, "train_pairs"); }
static void teardown(void) { tu_rm_tree(dir); }
static int run(const char *args) { return tu_run_tgrad(dir, args, 120, NULL); }
static char *slurp(const char *name, size_t *len) { return tu_slurp_in(dir, name, len); }

/* n pairs of a toy "translation": English digits words -> German words. */
static void write_pairs(const char *name, int n, int offset)
{
    tu_write_pairs(dir, name, n, offset);
}

#define MODEL "--tokenizer bytes --d-model 16 --heads 2 --d-ff 32 --layers 1 --seq-len 40 " \
              "--batch-tokens 200 --threads 1 --quiet"

static void expect_ok(const char *args)
{
    int rc = run(args);
    char *err = slurp("err.txt", NULL);
    ck_assert_msg(rc == 0, "tgrad %s: exit %d: %s", args, rc, err ? err : "");
    free(err);
}

static void expect_fail(const char *args, int want_rc, const char *needle)
{
    int rc = run(args);
    char *err = slurp("err.txt", NULL);
    ck_assert_msg(rc == want_rc, "tgrad %s: exit %d (want %d): %s", args, rc, want_rc,
                  err ? err : "");
    ck_assert_msg(err && tu_count_lines(err) == 1, "tgrad %s: want one line: %s", args,
                  err ? err : "");
    ck_assert_msg(strstr(err, needle), "tgrad %s: '%s' lacks '%s'", args, err, needle);
    free(err);
}

static const char *meta(const char *name, const char *key, char *buf, size_t n)
{
    char p[512];
    tu_path(p, sizeof p, dir, name);
    tg_ctx *ctx = tg_ctx_new();
    tg_safetensors *st = tg_safetensors_read(ctx, p);
    const char *v = st ? tg_safetensors_meta_get(st, key) : NULL;
    if (v)
        snprintf(buf, n, "%s", v);
    tg_ctx_free(ctx);
    return v ? buf : NULL;
}

static bool same_file(const char *a, const char *b)
{
    size_t na, nb;
    char *x = slurp(a, &na), *y = slurp(b, &nb);
    bool same = x && y && na == nb && memcmp(x, y, na) == 0;
    free(x);
    free(y);
    return same;
}

START_TEST(test_trains_logs_and_saves)
{
    write_pairs("train.tsv", 60, 0);
    write_pairs("valid.tsv", 10, 3);
    expect_ok("train --pairs train.tsv --valid valid.tsv " MODEL " --steps 12 --eval-every 6 "
              "--log log.csv --checkpoint ck");
    char *log = slurp("log.csv", NULL);
    ck_assert_ptr_nonnull(log);
    const char *head = "step,train_loss,val_loss,lr,tokens_per_s,val_bleu\n";
    ck_assert_msg(strncmp(log, head, strlen(head)) == 0, "%s", log);
    ck_assert_int_eq(tu_count_lines(log), 13);
    free(log);
    char v[128];
    ck_assert_str_eq(meta("ck", "data.mode", v, sizeof v), "pairs");
    ck_assert_str_eq(meta("ck", "tokenizer.kind", v, sizeof v), "bytes");
    ck_assert_str_eq(meta("ck", "model.vocab_size", v, sizeof v), "260");
    ck_assert_str_eq(meta("ck", "model.scale_embeddings", v, sizeof v), "1");
    ck_assert_str_eq(meta("ck", "optim.step", v, sizeof v), "12");
    ck_assert_ptr_nonnull(meta("ck", "data.pairs_hash", v, sizeof v));
    ck_assert_ptr_nonnull(meta("ck", "data.epoch", v, sizeof v));
    char *out = slurp("out.txt", NULL);
    ck_assert_msg(out && strstr(out, "BLEU = "), "summary: %s", out ? out : "");
    free(out);
}
END_TEST

/* 60 pairs in batches of <= 200 tokens: about 14 batches an epoch, so 40 steps cross two epoch
 * boundaries; stopping at 17 and resuming must give the straight run's bytes. */
START_TEST(test_resume_bit_exact)
{
    write_pairs("train.tsv", 60, 0);
    write_pairs("valid.tsv", 10, 3);
    expect_ok("train --pairs train.tsv --valid valid.tsv " MODEL " --steps 40 --eval-every 20 "
              "--checkpoint straight");
    expect_ok("train --pairs train.tsv --valid valid.tsv " MODEL " --steps 40 --eval-every 20 "
              "--checkpoint part --stop-after 17");
    char v[64];
    ck_assert_str_eq(meta("part", "optim.step", v, sizeof v), "17");
    expect_ok("train --pairs train.tsv --valid valid.tsv --resume part --quiet");
    ck_assert_msg(same_file("straight", "part"), "resumed checkpoint differs");
    ck_assert_msg(strcmp(meta("part", "data.epoch", v, sizeof v), "0") != 0,
                  "the run crossed an epoch");
    /* other data, or no data: refused */
    write_pairs("other.tsv", 60, 1);
    expect_fail("train --pairs other.tsv --valid valid.tsv --resume part --steps 50", 2,
                "other --pairs data");
    expect_fail("train --resume part --steps 50", 2, "pass its --pairs and --valid");
}
END_TEST

START_TEST(test_refusals)
{
    write_pairs("train.tsv", 20, 0);
    write_pairs("valid.tsv", 5, 3);
    expect_fail("train --pairs train.tsv " MODEL, 2, "--valid");
    expect_fail("train --valid valid.tsv --task copy", 2, "--valid needs --pairs");
    expect_fail("train --pairs train.tsv --valid valid.tsv --text train.tsv", 2,
                "exclude each other");
    expect_fail("train --pairs train.tsv --valid valid.tsv --arch lm", 2, "encoder-decoder");
    expect_fail("train --pairs train.tsv --valid valid.tsv --tokenizer bytes --seq-len 40 "
                "--batch-tokens 10", 2,
                "--batch-tokens 10 is smaller than the longest sequence");
    tu_write_file(dir, "bad.tsv", "one\ttwo\nno tab here\n");
    expect_fail("train --pairs bad.tsv --valid valid.tsv " MODEL, 1, "bad.tsv:2");
    tu_write_file(dir, "bad8.tsv", "caf\xe9\tx\n");
    expect_fail("train --pairs train.tsv --valid bad8.tsv " MODEL, 1, "bad8.tsv:1");
    expect_fail("train --pairs missing.tsv --valid valid.tsv " MODEL, 1, "missing.tsv");
}
END_TEST

/* Subword regularization: new segmentations every epoch (the run differs from one without),
 * recorded in the checkpoint, restored on resume bit-exactly, the same on 1 and 2 threads. */
#define SPM_MODEL                                                                                  \
    "--vocab-size 30 --d-model 16 --heads 2 --d-ff 32 --layers 1 --seq-len 40 "                    \
    "--batch-tokens 200 --quiet --steps 40 --eval-every 20"
START_TEST(test_spm_alpha)
{
    write_pairs("train.tsv", 60, 0);
    write_pairs("valid.tsv", 10, 3);
    const char *run_args = "train --pairs train.tsv --valid valid.tsv " SPM_MODEL;
    char a[1024];
    snprintf(a, sizeof a, "%s --threads 1 --checkpoint best-only", run_args);
    int rc = run(a);
    char *err = slurp("err.txt", NULL);
    if (rc == 2 && err && strstr(err, "built without SentencePiece")) {
        fprintf(stderr, "test_spm_alpha: skipped: tgrad built without SentencePiece\n");
        free(err);
        return;
    }
    ck_assert_msg(rc == 0, "tgrad %s: exit %d: %s", a, rc, err ? err : "");
    free(err);
    snprintf(a, sizeof a, "%s --spm-alpha 0.5 --spm-nbest 8 --threads 1 --checkpoint straight",
             run_args);
    expect_ok(a);
    ck_assert_msg(!same_file("straight", "best-only"), "sampling changed nothing");
    char v[64];
    ck_assert_str_eq(meta("straight", "train.spm_alpha", v, sizeof v), "0.5");
    ck_assert_str_eq(meta("straight", "train.spm_nbest", v, sizeof v), "8");
    ck_assert_ptr_null(meta("best-only", "train.spm_alpha", v, sizeof v));
    snprintf(a, sizeof a, "%s --spm-alpha 0.5 --spm-nbest 8 --threads 2 --checkpoint two",
             run_args);
    expect_ok(a);
    ck_assert_msg(same_file("straight", "two"), "2 threads differ from 1");
    snprintf(a, sizeof a,
             "%s --spm-alpha 0.5 --spm-nbest 8 --threads 1 --checkpoint part "
             "--stop-after 17",
             run_args);
    expect_ok(a);
    expect_ok("train --pairs train.tsv --valid valid.tsv --resume part --quiet");
    ck_assert_msg(same_file("straight", "part"), "resumed checkpoint differs");
    ck_assert_msg(strcmp(meta("part", "data.epoch", v, sizeof v), "0") != 0,
                  "the run crossed an epoch");
    /* refusals: what cannot sample, and a budget a sample could exceed */
    expect_fail("train --pairs train.tsv --valid valid.tsv " MODEL " --spm-alpha 0.5", 2,
                "excludes --tokenizer bytes");
    expect_fail("train --pairs train.tsv --valid valid.tsv --spm-type bpe --spm-alpha 0.5", 2,
                "excludes --spm-type bpe");
    expect_fail("train --pairs train.tsv --valid valid.tsv --spm-nbest 4", 2,
                "--spm-nbest needs --spm-alpha");
    expect_fail("train --pairs train.tsv --valid valid.tsv --vocab-size 30 --seq-len 40 "
                "--batch-tokens 30 --spm-alpha 0.5 --quiet",
                2, "which a sampled segmentation");
    expect_fail("train --pairs train.tsv --valid valid.tsv --vocab-size 30 --spm-alpha -1", 2,
                "spm-alpha");
}
END_TEST

/* Every progress line of a non-terminal run (stderr is a file) has the same columns: the epoch
 * and the learning rate stay after the first evaluation; a resumed run shows the checkpoint's
 * validation loss (train.best_val) until it evaluates, not "val -". */
START_TEST(test_progress_columns)
{
    write_pairs("train.tsv", 60, 0);
    write_pairs("valid.tsv", 10, 3);
    const char *model = "--tokenizer bytes --d-model 16 --heads 2 --d-ff 32 --layers 1 "
                        "--seq-len 40 --batch-tokens 200 --threads 1";
    char args[1024];
    snprintf(args, sizeof args, "train --pairs train.tsv --valid valid.tsv %s --steps 40 "
             "--eval-every 10 --checkpoint ck", model);
    expect_ok(args);
    char *err = slurp("err.txt", NULL);
    int lines = 0, evaluated = 0;
    for (char *p = err; p && *p;) {
        size_t len = strcspn(p, "\n");
        if (!strncmp(p, "step ", 5)) {
            lines++;
            evaluated += memmem(p, len, "BLEU", 4) != NULL;
            ck_assert_msg(memmem(p, len, "  epoch ", 8) && memmem(p, len, "  lr ", 5) &&
                          len <= 80, "a progress line lacks a column: '%.*s'", (int)len, p);
        }
        p += len + (p[len] == '\n');
    }
    ck_assert_msg(lines >= 10 && evaluated >= 2, "%d lines, %d after an evaluation: %s", lines,
                  evaluated, err);
    free(err);
    char v[64], want[64];
    snprintf(want, sizeof want, "  val %.4f  ", atof(meta("ck", "train.best_val", v, sizeof v)));
    snprintf(args, sizeof args, "train --pairs train.tsv --valid valid.tsv --resume ck "
             "--steps 60 --eval-every 10 --checkpoint ck2");
    expect_ok(args);
    err = slurp("err.txt", NULL);
    const char *first = strstr(err, "\nstep 42/60 ");
    ck_assert_msg(first && strstr(first, want) && strstr(first, want) < strchr(first + 1, '\n'),
                  "the resumed run's first line lacks '%s': %s", want, err);
    free(err);
}
END_TEST

/* --plot of a pairs run: the loss axis from 0, the second panel's axis titled BLEU (not
 * accuracy), and its title says training stops on it only when --target-bleu sets a target;
 * --help gives the pairs run's --eval-every default and its log's last column. */
START_TEST(test_plot_and_help)
{
    write_pairs("train.tsv", 60, 0);
    write_pairs("valid.tsv", 10, 3);
    for (int target = 0; target < 2; target++) {
        char args[512];
        snprintf(args, sizeof args, "train --pairs train.tsv --valid valid.tsv " MODEL
                 " --steps 20 --eval-every 10 --plot p.svg --force --target-bleu %d",
                 target ? 90 : 0);
        int rc = run(args);
        ck_assert_msg(rc == (target ? 3 : 0), "%s: exit %d", args, rc);
        char *svg = slurp("p.svg", NULL);
        ck_assert_ptr_nonnull(svg);
        const char *tick = strstr(svg, "class=\"ytick\"");
        ck_assert_msg(tick && !strncmp(strchr(tick, '>'), ">0<", 3), "the loss axis does not "
                      "start at 0: %.80s", tick ? tick : svg);
        ck_assert_msg(strstr(svg, ">BLEU</text>") && !strstr(svg, "accuracy (%)"), "%s", svg);
        ck_assert_msg(!strstr(svg, "training stops") == !target, "target %d: %s", target, svg);
        free(svg);
    }
    expect_ok("train --help");
    char *out = slurp("out.txt", NULL);
    ck_assert_msg(strstr(out, "pairs 500") && strstr(out, "val_bleu"), "%s", out);
    free(out);
}
END_TEST

/* ---- signals ------------------------------------------------------------------------------- */

/* Start `tgrad ARGS` (ARGS: words split at spaces) in dir, stdout and stderr to out.txt and
 * err.txt; returns once the child has exec'd tgrad. The child sets SIGINT to @p int_disp
 * before exec (SIG_IGN: as a background job of a non-interactive shell has it); with
 * @p pending_term it leaves a SIGTERM blocked and pending, which exec hands on: it arrives the
 * moment tgrad unblocks it. */
static pid_t spawn(const char *args, void (*int_disp)(int), bool pending_term)
{
    int gate[2]; /* closed by the exec (O_CLOEXEC): the child runs tgrad once read() sees EOF */
    ck_assert_int_eq(pipe2(gate, O_CLOEXEC), 0);
    pid_t pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid > 0) {
        close(gate[1]);
        char c;
        while (read(gate[0], &c, 1) < 0 && errno == EINTR)
            ;
        close(gate[0]);
        return pid;
    }
    close(gate[0]);
    char buf[2048], *argv[64];
    int n = 0;
    argv[n++] = (char *)tu_tgrad_exe();
    snprintf(buf, sizeof buf, "%s", args);
    for (char *w = strtok(buf, " "); w && n < 63; w = strtok(NULL, " "))
        argv[n++] = w;
    argv[n] = NULL;
    int o = chdir(dir) == 0 ? open("out.txt", O_WRONLY | O_CREAT | O_TRUNC, 0644) : -1;
    int e = o >= 0 ? open("err.txt", O_WRONLY | O_CREAT | O_TRUNC, 0644) : -1;
    if (e < 0 || dup2(o, 1) < 0 || dup2(e, 2) < 0)
        _exit(126);
    signal(SIGINT, int_disp);
    signal(SIGTERM, SIG_DFL);
    if (pending_term) {
        sigset_t set;
        sigemptyset(&set);
        sigaddset(&set, SIGTERM);
        sigprocmask(SIG_BLOCK, &set, NULL);
        raise(SIGTERM);
    }
    execv(argv[0], argv);
    _exit(127);
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* The exit status of @p pid within @p timeout_s (-signal if a signal ended it); killed and a
 * failure after that. */
static int wait_exit(pid_t pid, double timeout_s)
{
    double t0 = now_s();
    int st;
    while (waitpid(pid, &st, WNOHANG) == 0) {
        if (now_s() - t0 > timeout_s) {
            kill(pid, SIGKILL);
            st = tu_wait_killed(pid);
            ck_abort_msg("tgrad still running after %.0f s", timeout_s);
        }
        usleep(10000);
    }
    return WIFEXITED(st) ? WEXITSTATUS(st) : -WTERMSIG(st);
}

/* Wait (at most @p timeout_s) until err.txt holds @p needle or dir/@p file exists. */
static bool wait_for(const char *needle, const char *file, double timeout_s)
{
    double t0 = now_s();
    while (now_s() - t0 < timeout_s) {
        char *e = slurp("err.txt", NULL);
        bool seen = needle && e && strstr(e, needle);
        free(e);
        char p[512];
        if (seen || (file && access(tu_path(p, sizeof p, dir, file), F_OK) == 0))
            return true;
        usleep(5000);
    }
    return false;
}

/* What a setup stopped by a signal leaves: exit 130, the two lines saying so, no checkpoint,
 * no log, nothing else in the directory but the inputs and the captured output. */
static void expect_setup_stopped(int rc)
{
    char *err = slurp("err.txt", NULL);
    ck_assert_msg(rc == 130, "exit %d: %s", rc, err ? err : "");
    ck_assert_msg(strstr(err, "tgrad train: stopping before the first step (nothing is saved)\n") &&
                  strstr(err, "tgrad train: interrupted during the setup, before the first step: "
                         "nothing was saved\n"), "%s", err);
    free(err);
    char p[512];
    ck_assert_msg(access(tu_path(p, sizeof p, dir, "ck"), F_OK) != 0, "a checkpoint was saved");
    ck_assert_msg(access(tu_path(p, sizeof p, dir, "log.csv"), F_OK) != 0, "a log was written");
}

/* A SIGTERM that arrives as the command starts (left pending by the parent): the setup stops
 * at its first check, exit 130, nothing written. */
START_TEST(test_setup_sigterm_pending)
{
    if (getenv("TG_UNDER_VALGRIND")) {
        /* valgrind keeps a blocked signal pending in its own emulated state, so it is not
         * pending in the kernel when the child execs tgrad: the case cannot be set up */
        fprintf(stderr, "test_train_pairs: skipped test_setup_sigterm_pending under valgrind "
                        "(a signal left pending across exec is emulated away)\n");
        return;
    }
    write_pairs("train.tsv", 60, 0);
    write_pairs("valid.tsv", 10, 3);
    pid_t pid = spawn("train --pairs train.tsv --valid valid.tsv " MODEL " --steps 5 "
                      "--checkpoint ck --log log.csv", SIG_DFL, true);
    expect_setup_stopped(wait_exit(pid, 60));
}
END_TEST

/* SIGTERM while the SentencePiece model trains (the longest stage of the setup): heard at once,
 * the setup stops after the stage, exit 130 (not 143, killed without a word), nothing written. */
START_TEST(test_setup_sigterm_spm)
{
    /* 3000 pairs of made-up words: a few seconds of SentencePiece training */
    static const char *const syl[] = {"ka", "to", "ri", "mu", "sen", "lo", "pa", "ve", "dor",
                                      "in", "al", "shi", "qu", "ber", "an", "ti", "zu", "mel"};
    size_t cap = 3000 * 160, len = 0;
    char *buf = malloc(cap);
    uint64_t r = 1;
    for (int i = 0; i < 3000; i++)
        for (int side = 0; side < 2; side++)
            for (int w = 0; w < 8; w++) {
                for (int k = 0, n = 1 + (int)((r >> 33) % 3); k < n; k++) {
                    r = r * 6364136223846793005ULL + 1442695040888963407ULL;
                    len += (size_t)sprintf(buf + len, "%s", syl[(r >> 33) % 18]);
                }
                buf[len++] = w < 7 ? ' ' : side == 0 ? '\t' : '\n';
            }
    buf[len] = 0;
    tu_write_file(dir, "train.tsv", buf);
    free(buf);
    write_pairs("valid.tsv", 10, 3);
    pid_t pid = spawn("train --pairs train.tsv --valid valid.tsv --vocab-size 800 --d-model 16 "
                      "--heads 2 --d-ff 32 --layers 1 --seq-len 64 --batch-tokens 2000 "
                      "--threads 1 --steps 100000 --checkpoint ck --log log.csv", SIG_DFL, false);
    if (!wait_for("training a SentencePiece", NULL, 60)) {
        int rc = wait_exit(pid, 600);
        char *err = slurp("err.txt", NULL);
        bool no_spm = err && strstr(err, "built without SentencePiece");
        free(err);
        if (no_spm) {
            fprintf(stderr, "test_setup_sigterm_spm: skipped: tgrad built without "
                    "SentencePiece\n");
            return;
        }
        ck_abort_msg("no SentencePiece training seen (exit %d)", rc);
    }
    kill(pid, SIGTERM);
    expect_setup_stopped(wait_exit(pid, 300));
}
END_TEST

/* SIGINT inherited as ignored (a background job of `sh -c`, nohup-like launchers) stays
 * ignored, during the setup and the training; SIGTERM still stops the run as usual. */
START_TEST(test_ignored_sigint_stays_ignored)
{
    write_pairs("train.tsv", 60, 0);
    write_pairs("valid.tsv", 10, 3);
    pid_t pid = spawn("train --pairs train.tsv --valid valid.tsv " MODEL " --steps 1000000 "
                      "--eval-every 1000000 --save-every 1 --checkpoint ck", SIG_IGN, false);
    kill(pid, SIGINT); /* in the setup, or before it: ignored either way */
    ck_assert_msg(wait_for(NULL, "ck", 120), "no checkpoint saved");
    for (int i = 0; i < 5; i++) { /* in the loop */
        kill(pid, SIGINT);
        usleep(200000);
    }
    int st;
    ck_assert_msg(waitpid(pid, &st, WNOHANG) == 0, "the ignored SIGINT stopped the run");
    char *err = slurp("err.txt", NULL);
    ck_assert_msg(!strstr(err, "stopping"), "%s", err);
    free(err);
    kill(pid, SIGTERM);
    int rc = wait_exit(pid, 120);
    err = slurp("err.txt", NULL);
    ck_assert_msg(rc == 130 && strstr(err, "stopping after step ") &&
                  strstr(err, "interrupted at step "), "exit %d: %s", rc, err);
    free(err);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("train_pairs");
    TCase *tc = tu_tcase(s, "cli", 0);
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_test(tc, test_trains_logs_and_saves);
    tcase_add_test(tc, test_resume_bit_exact);
    tcase_add_test(tc, test_refusals);
    tcase_add_test(tc, test_progress_columns);
    tcase_add_test(tc, test_plot_and_help);
    tcase_add_test(tc, test_spm_alpha);
    TCase *sig = tu_tcase(s, "signals", 300);
    tcase_add_checked_fixture(sig, setup, teardown);
    tcase_add_test(sig, test_setup_sigterm_pending);
    tcase_add_test(sig, test_setup_sigterm_spm);
    tcase_add_test(sig, test_ignored_sigint_stays_ignored);
    return tu_run(s);
}
