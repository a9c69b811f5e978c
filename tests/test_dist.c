/*
 * test_dist.c - `mpirun -np P tgrad train --grad-accum K` (built with -Dmpi): the final
 * checkpoints of P = 1, 2, 4 processes are byte-identical to one process without mpirun
 * (parameters, optimizer state, RNG, metadata); P that are not powers of two (K = 6 over 2 and
 * 3), the text LM with dropout and the seq2seq model; resume with another P; a killed rank
 * ends the job with an error and leaves the last checkpoint intact; errors printed once.
 *
 * Open MPI refuses to run as root unless told; containers often are root, so the two
 * variables it documents for that are set here (never in README commands). Single-copy
 * (CMA) transfers are turned off: containers usually forbid ptrace-style reads.
 */
#define _GNU_SOURCE
#include "testutil.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static char g_dir[256];

static void setup(void)
{
    setenv("OMPI_ALLOW_RUN_AS_ROOT", "1", 1);
    setenv("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1", 1);
    setenv("OMPI_MCA_btl_vader_single_copy_mechanism", "none", 1);
    setenv("OMPI_MCA_rmaps_base_oversubscribe", "1", 1);
    /* sanitizer builds: Open MPI keeps its own allocations to the end (not ours to check);
     * the last setting of a flag wins */
    const char *asan = getenv("ASAN_OPTIONS");
    char opts[1024];
    snprintf(opts, sizeof opts, "%s%sdetect_leaks=0", asan ? asan : "", asan && *asan ? ":" : "");
    setenv("ASAN_OPTIONS", opts, 1);
    tu_mkdtemp(g_dir, sizeof g_dir, "dist");
}

static void teardown(void) { tu_rm_tree(g_dir); }

/* Run `mpirun -np P tgrad ARGS` (P = 0: tgrad alone) in g_dir; the exit status. */
static int run(int np, const char *args, double timeout_s)
{
    char cmd[4096];
    if (np > 0)
        snprintf(cmd, sizeof cmd, "mpirun --oversubscribe -np %d '%s' %s", np, tu_tgrad_exe(),
                 args);
    else
        snprintf(cmd, sizeof cmd, "'%s' %s", tu_tgrad_exe(), args);
    return tu_run_sh(g_dir, cmd, timeout_s, NULL);
}

static char *err_text(void) { return tu_slurp_in(g_dir, "err.txt", NULL); }
static char *out_text(void) { return tu_slurp_in(g_dir, "out.txt", NULL); }

static void expect_rc(int rc, int want, const char *what)
{
    if (rc != want) {
        char *e = err_text(), *o = out_text();
        ck_abort_msg("%s: exit %d, want %d\nstdout:\n%s\nstderr:\n%s", what, rc, want,
                     o ? o : "", e ? e : "");
    }
}

/* Two files byte for byte. */
static void expect_same_file(const char *a, const char *b)
{
    size_t na = 0, nb = 0;
    char *x = tu_slurp_in(g_dir, a, &na), *y = tu_slurp_in(g_dir, b, &nb);
    ck_assert_msg(x && y, "missing %s or %s", a, b);
    ck_assert_msg(na == nb && memcmp(x, y, na) == 0, "%s and %s differ (%zu and %zu bytes)", a,
                  b, na, nb);
    free(x);
    free(y);
}

/* The default task (exit 3: 30 steps do not reach 99%; --target-acc 0 never stops early) with
 * dropout, so the micro-batch streams of the RNG matter. */
#define TASK_T "train --steps 30 --grad-accum 4 --dropout 0.1 --target-acc 0 --eval-every 10 " \
               "--quiet"
#define TASK TASK_T " --threads 1"

START_TEST(p124_byte_identical)
{
    expect_rc(run(0, TASK " --checkpoint one.st", 120), 0, "one process");
    expect_rc(run(1, TASK " --checkpoint p1.st", 120), 0, "mpirun -np 1");
    expect_rc(run(2, TASK " --checkpoint p2.st", 120), 0, "mpirun -np 2");
    expect_rc(run(4, TASK_T " --checkpoint p4.st --threads 2", 180), 0, "mpirun -np 4");
    expect_same_file("one.st", "p1.st");
    expect_same_file("one.st", "p2.st");
    expect_same_file("one.st", "p4.st");
    char *o = out_text();
    ck_assert_msg(strstr(o, "data parallel: 4 processes x 2 threads") &&
                  strstr(o, "MB sent per process per step"), "%s", o);
    free(o);
}
END_TEST

/* Without --grad-accum, K is the number of processes: mpirun -np 2 is --grad-accum 2. */
START_TEST(k_defaults_to_p)
{
    const char *a = "train --steps 6 --eval-every 3 --target-acc 0 --threads 1 --quiet";
    char args[512];
    snprintf(args, sizeof args, "%s --grad-accum 2 --checkpoint one.st", a);
    expect_rc(run(0, args, 120), 0, "one process, K = 2");
    snprintf(args, sizeof args, "%s --checkpoint p2.st", a);
    expect_rc(run(2, args, 120), 0, "mpirun -np 2, no --grad-accum");
    expect_same_file("one.st", "p2.st");
    expect_rc(run(2, "train --batch 7 --steps 2", 120), 2, "batch 7 over 2");
    char *e = err_text();
    ck_assert_msg(strstr(e, "--batch 7 does not split over 2 processes"), "%s", e);
    free(e);
}
END_TEST

/* K = 6 over 2 and 3 processes (not powers of two: the spanning-node schedule), f64. */
START_TEST(non_power_of_two)
{
    const char *a = "train --steps 8 --grad-accum 6 --batch 12 --dtype f64 --target-acc 0 "
                    "--eval-every 4 --threads 1 --quiet --dropout 0.2";
    char args[512];
    snprintf(args, sizeof args, "%s --checkpoint one.st", a);
    expect_rc(run(0, args, 120), 0, "one process");
    for (int np = 2; np <= 3; np++) {
        snprintf(args, sizeof args, "%s --checkpoint p%d.st", a, np);
        expect_rc(run(np, args, 120), 0, "mpirun");
        char name[16];
        snprintf(name, sizeof name, "p%d.st", np);
        expect_same_file("one.st", name);
    }
}
END_TEST

/* The byte-level LM (text, validation) and the encoder-decoder model. */
START_TEST(text_and_seq2seq)
{
    tu_write_corpus(g_dir, "corpus.txt", 3000);
    const char *lm = "train --text corpus.txt --steps 10 --batch 8 --grad-accum 2 --d-model 32 "
                     "--seq-len 16 --eval-every 5 --dropout 0.1 --threads 1 --quiet";
    char args[512];
    snprintf(args, sizeof args, "%s --checkpoint lm1.st --log lm1.csv", lm);
    expect_rc(run(0, args, 120), 0, "LM, one process");
    snprintf(args, sizeof args, "%s --checkpoint lm2.st --log lm2.csv", lm);
    expect_rc(run(2, args, 120), 0, "LM, 2 processes");
    expect_same_file("lm1.st", "lm2.st");
    /* the log: same losses (tokens/s differ) */
    char *l1 = tu_slurp_in(g_dir, "lm1.csv", NULL), *l2 = tu_slurp_in(g_dir, "lm2.csv", NULL);
    ck_assert_int_eq(tu_count_lines(l1), 11);
    ck_assert_int_eq(tu_count_lines(l2), 11);
    free(l1);
    free(l2);
    const char *s2s = "train --arch seq2seq --task copy --steps 6 --batch 16 --grad-accum 4 "
                      "--d-model 32 --layers 1 --eval-every 3 --target-acc 0 --threads 1 --quiet";
    snprintf(args, sizeof args, "%s --checkpoint s1.st", s2s);
    expect_rc(run(0, args, 120), 0, "seq2seq, one process");
    snprintf(args, sizeof args, "%s --checkpoint s4.st", s2s);
    expect_rc(run(4, args, 180), 0, "seq2seq, 4 processes");
    expect_same_file("s1.st", "s4.st");
}
END_TEST

/* Stop at step 12 on P processes, resume to 30 on Q: the same file as 30 steps straight. */
START_TEST(resume_across_p)
{
    expect_rc(run(0, TASK " --checkpoint straight.st", 120), 0, "straight");
    static const int pq[][2] = {{0, 2}, {2, 0}, {4, 2}};
    for (int i = 0; i < 3; i++) {
        char args[512], name[32];
        snprintf(name, sizeof name, "r%d.st", i);
        snprintf(args, sizeof args, TASK " --checkpoint %s --stop-after 12", name);
        expect_rc(run(pq[i][0], args, 120), 0, "first part");
        snprintf(args, sizeof args, "train --resume %s --threads 1 --quiet", name);
        expect_rc(run(pq[i][1], args, 120), 0, "resumed part");
        expect_same_file("straight.st", name);
    }
}
END_TEST

/* Kill rank 1 once a checkpoint exists: mpirun ends the job with an error naming the rank,
 * the checkpoint is whole, and resuming it (one process) ends exactly where a straight run
 * does. */
START_TEST(killed_rank)
{
    const char *a = "train --steps 400 --grad-accum 2 --target-acc 0 --eval-every 400 "
                    "--save-every 5 --threads 1 --quiet";
    char cmd[4096];
    snprintf(cmd, sizeof cmd,
             "(mpirun --oversubscribe -np 2 '%s' %s --checkpoint k.st & mp=$!; "
             "i=0; while [ ! -f k.st ] && [ $i -lt 600 ]; do sleep 0.05; i=$((i+1)); done; "
             "for d in /proc/[0-9]*; do "
             "  if tr '\\0' '\\n' < $d/environ 2>/dev/null | grep -qx OMPI_COMM_WORLD_RANK=1 && "
             "     tr '\\0' ' ' < $d/cmdline 2>/dev/null | grep -q -- '--checkpoint k.st'; then "
             "    kill -9 ${d#/proc/}; fi; done; "
             "wait $mp; echo \"mpirun exit $?\" >&2)",
             tu_tgrad_exe(), a);
    ck_assert_int_eq(tu_run_sh(g_dir, cmd, 120, NULL), 0);
    char *e = err_text();
    ck_assert_msg(!strstr(e, "mpirun exit 0"), "the job must fail:\n%s", e);
    ck_assert_msg(strstr(e, "rank 1") && strstr(e, "signal 9"), "mpirun names the rank:\n%s", e);
    free(e);
    /* the checkpoint is whole: info reads it, and resuming gives the straight run's file */
    expect_rc(run(0, "info k.st", 60), 0, "info");
    char *o = out_text();
    ck_assert_msg(strstr(o, "optim.step"), "%s", o);
    free(o);
    expect_rc(run(0, "train --resume k.st --threads 1 --quiet", 300), 0, "resume");
    char args[512];
    snprintf(args, sizeof args, "%s --checkpoint straight.st", a);
    expect_rc(run(0, args, 300), 0, "straight");
    expect_same_file("straight.st", "k.st");
}
END_TEST

/* Ctrl-C to mpirun: every rank stops after the same step, rank 0 saves and prints the resume
 * command once; resuming (here on one process) continues exactly as a straight run. */
START_TEST(interrupt_agreed)
{
    const char *a = "train --steps 100000 --grad-accum 2 --target-acc 0 --eval-every 100000 "
                    "--threads 1";
    char cmd[4096];
    snprintf(cmd, sizeof cmd,
             "(mpirun --oversubscribe -np 2 '%s' %s --checkpoint i.st --save-every 20 & mp=$!; "
             "i=0; while [ ! -f i.st ] && [ $i -lt 600 ]; do sleep 0.05; i=$((i+1)); done; "
             "sleep 0.3; kill -INT $mp; wait $mp; echo \"mpirun exit $?\" >&2)",
             tu_tgrad_exe(), a);
    ck_assert_int_eq(tu_run_sh(g_dir, cmd, 120, NULL), 0);
    char *e = err_text();
    const char *at = strstr(e, "interrupted at step ");
    ck_assert_msg(at && strstr(at, "resume with: mpirun -np 2 "), "%s", e);
    ck_assert_msg(!strstr(at + 1, "interrupted at step"), "printed twice:\n%s", e);
    long step = atol(at + strlen("interrupted at step "));
    ck_assert_int_gt(step, 0);
    free(e);
    char args[1024];
    snprintf(args, sizeof args, "train --resume i.st --stop-after %ld --threads 1 --quiet",
             step + 5);
    expect_rc(run(0, args, 300), 0, "resume");
    snprintf(args, sizeof args, "%s --stop-after %ld --save-every 20 --checkpoint straight.st "
             "--quiet", a,
             step + 5);
    expect_rc(run(0, args, 300), 0, "straight");
    expect_same_file("straight.st", "i.st");
}
END_TEST

/* A NaN weight: every rank holds the same non-finite loss and stops at the same step; rank 0
 * says so once and the job ends without an abort; the checkpoint is left as it was. */
START_TEST(nonfinite_stops_all_ranks_once)
{
    expect_rc(run(0, TASK " --checkpoint good.st --stop-after 3", 120), 0, "3 steps");
    char src[512], dst[512];
    tu_path(src, sizeof src, g_dir, "good.st");
    tu_path(dst, sizeof dst, g_dir, "bad.st");
    tu_st_rewrite(src, dst, &(tu_st_edit){.poison = "layers.0.linear1.weight"});
    size_t n0, n1;
    char *before = tu_slurp_in(g_dir, "bad.st", &n0);
    expect_rc(run(2, "train --resume bad.st --threads 1 --quiet", 120), 1, "NaN weights");
    char *e = err_text();
    const char *at = strstr(e, "non-finite loss or gradients");
    ck_assert_msg(at && !strstr(at + 1, "non-finite loss"), "once:\n%s", e);
    ck_assert_msg(!strstr(e, "MPI_ABORT"), "an agreed stop is not an abort:\n%s", e);
    free(e);
    char *after = tu_slurp_in(g_dir, "bad.st", &n1);
    ck_assert(n0 == n1 && memcmp(before, after, n0) == 0);
    free(before);
    free(after);
}
END_TEST

/* P must divide K and the batch must split: one clear line, not one per process. */
START_TEST(errors_once)
{
    expect_rc(run(3, "train --grad-accum 4 --steps 2 --checkpoint x.st", 120), 2, "P=3, K=4");
    char *e = err_text();
    ck_assert_msg(strstr(e, "--grad-accum 4 does not split over 3 processes") &&
                  strstr(e, "try --grad-accum 6"), "%s", e);
    const char *first = strstr(e, "does not split");
    ck_assert_msg(!strstr(first + 1, "does not split"), "printed more than once:\n%s", e);
    free(e);
    ck_assert_ptr_null(tu_slurp_in(g_dir, "x.st", NULL));
    expect_rc(run(2, "train --grad-accum 2 --batch 5 --steps 2", 120), 2, "batch 5, K=2");
    e = err_text();
    ck_assert_msg(strstr(e, "--batch 5 does not split into --grad-accum 2"), "%s", e);
    ck_assert_msg(!strstr(strstr(e, "does not split") + 1, "does not split"), "twice:\n%s", e);
    free(e);
    /* a file only some ranks could read would fail on those ranks; every rank fails alike on a
     * missing one, and rank 0 says so once */
    expect_rc(run(2, "train --resume missing.st --grad-accum 2", 120), 1, "missing resume");
    e = err_text();
    ck_assert_msg(strstr(e, "missing.st"), "%s", e);
    ck_assert_msg(!strstr(strstr(e, "missing.st") + 1, "--resume"), "twice:\n%s", e);
    free(e);
}
END_TEST

/* examples/data_parallel.c, the library side (tg_dist_* with an embedder's own loop), checks
 * itself against one process: bitwise agreement or exit 1. */
START_TEST(embedder_example)
{
    char cmd[1024];
    for (int np = 2; np <= 4; np += 2) {
        snprintf(cmd, sizeof cmd, "mpirun --oversubscribe -np %d -x OMP_NUM_THREADS=1 '%s'", np,
                 TG_DATA_PARALLEL_EXE);
        expect_rc(tu_run_sh(g_dir, cmd, 300, NULL), 0, "examples/data_parallel");
        char *o = out_text();
        ck_assert_msg(strstr(o, "bitwise identical to one process"), "%s", o);
        free(o);
    }
    snprintf(cmd, sizeof cmd, "mpirun --oversubscribe -np 3 '%s'", TG_DATA_PARALLEL_EXE);
    expect_rc(tu_run_sh(g_dir, cmd, 300, NULL), 1, "3 processes, k = 4");
    char *e = err_text();
    ck_assert_msg(strstr(e, "do not split evenly over 3 processes"), "%s", e);
    free(e);
}
END_TEST

/* SIGINT to a rank (what `kill -INT` of rank 0 does; Ctrl-C reaches only mpirun, which aborts
 * the job itself with status 1): rank 0 says at once which step it stops after, every rank
 * stops after that step, rank 0 saves, and every rank exits 130, so mpirun does too. */
START_TEST(interrupt_rank_exits_130)
{
    const char *a = "train --steps 100000 --grad-accum 2 --target-acc 0 --eval-every 100000 "
                    "--threads 1 --quiet";
    char cmd[4096];
    snprintf(cmd, sizeof cmd,
             "(mpirun --oversubscribe -np 2 '%s' %s --checkpoint r.st --save-every 20 & mp=$!; "
             "i=0; while [ ! -f r.st ] && [ $i -lt 4800 ]; do sleep 0.05; i=$((i+1)); done; "
             /* rank 0's pid, deterministically: rank 0 alone holds the checkpoint's lock from
              * its setup on, and a second run on r.st is refused naming the holder's pid */
             "pid=$('%s' train --task copy --steps 1 --checkpoint r.st --force --quiet 2>&1 | "
             "sed -n 's/.*in use by another tgrad run (pid \\([0-9]*\\)).*/\\1/p'); "
             "echo \"rank 0: pid ${pid:-not found}\" >&2; "
             "if [ -n \"$pid\" ]; then kill -INT $pid; else kill -TERM $mp; fi; "
             "wait $mp; echo \"mpirun exit $?\" >&2)",
             tu_tgrad_exe(), a, tu_tgrad_exe());
    ck_assert_int_eq(tu_run_sh(g_dir, cmd, 400, NULL), 0);
    char *e = err_text();
    /* messages cut to what Check can carry (a longer one aborts the suite) */
    ck_assert_msg(strstr(e, "mpirun exit 130"), "%.2000s", e);
    const char *s = strstr(e, "stopping after step ");
    ck_assert_msg(s && !strstr(s + 1, "stopping after step "), "once:\n%.2000s", e);
    long at = atol(s + strlen("stopping after step "));
    char want[64];
    snprintf(want, sizeof want, "interrupted at step %ld;", at);
    ck_assert_msg(strstr(e, want), "%.2000s", e);
    free(e);
    expect_rc(run(0, "info r.st", 60), 0, "info");
    char *o = out_text();
    const char *st = strstr(o, "optim.step");
    ck_assert_msg(st && atol(st + strspn(st + 10, " ") + 10) == at, "step %ld: %s", at, o);
    free(o);
}
END_TEST

/* Under mpirun, stdout and stderr merged: every line whole (no line of one stream cut by the
 * other's) and within 80 columns: the header, every progress line, the summary and the
 * data-parallel lines. */
START_TEST(lines_whole_and_80_columns)
{
    char cmd[4096];
    snprintf(cmd, sizeof cmd, "(mpirun --oversubscribe -np 2 '%s' train --task copy --d-model 16 "
             "--heads 2 --seq-len 4 --batch 8 --steps 40 --eval-every 4 --target-acc 0 "
             "--threads 1 2>&1)", tu_tgrad_exe());
    int rc = tu_run_sh(g_dir, cmd, 300, NULL);
    char *o = out_text();
    ck_assert_msg(rc == 0, "exit %d:\n%s", rc, o);
    static const char *const starts[] = {"tgrad train: ", "step ", "parameters ",
                                         "held-out token accuracy", "data parallel: ", "  "};
    int steps = 0;
    for (const char *p = o; *p;) {
        size_t len = strcspn(p, "\n");
        ck_assert_msg(len <= 80, "a line of %zu columns: %.*s", len, (int)len, p);
        bool known = false;
        for (size_t k = 0; k < sizeof starts / sizeof starts[0] && !known; k++)
            known = strncmp(p, starts[k], strlen(starts[k])) == 0;
        ck_assert_msg(known, "not a whole line of tgrad's: '%.*s'\nin:\n%s", (int)len, p, o);
        steps += strncmp(p, "step ", 5) == 0;
        p += len;
        if (*p)
            p++;
    }
    ck_assert_msg(steps >= 10, "%d progress lines:\n%s", steps, o);
    free(o);
}
END_TEST

static Suite *dist_suite(void)
{
    Suite *s = suite_create("dist");
    TCase *tc = tcase_create("dist");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_set_timeout(tc, 600);
    tcase_add_test(tc, p124_byte_identical);
    tcase_add_test(tc, k_defaults_to_p);
    tcase_add_test(tc, non_power_of_two);
    tcase_add_test(tc, text_and_seq2seq);
    tcase_add_test(tc, resume_across_p);
    tcase_add_test(tc, killed_rank);
    tcase_add_test(tc, interrupt_agreed);
    tcase_add_test(tc, nonfinite_stops_all_ranks_once);
    tcase_add_test(tc, errors_once);
    tcase_add_test(tc, embedder_example);
    suite_add_tcase(s, tc);
    /* its own case, so it can be repeated alone: CK_RUN_CASE=interrupt build/tests/test_dist */
    TCase *intr = tcase_create("interrupt");
    tcase_add_checked_fixture(intr, setup, teardown);
    tcase_set_timeout(intr, 600);
    tcase_add_test(intr, interrupt_rank_exits_130);
    suite_add_tcase(s, intr);
    TCase *lines = tcase_create("lines");
    tcase_add_checked_fixture(lines, setup, teardown);
    tcase_set_timeout(lines, 300);
    tcase_add_test(lines, lines_whole_and_80_columns);
    suite_add_tcase(s, lines);
    return s;
}

int main(void) { return tu_run(dist_suite()); }
