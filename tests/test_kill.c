/*
 * test_kill.c - crash safety of checkpoints: SIGKILL `tgrad train` at random moments while it
 * checkpoints every 2 steps, continue each time with `--resume CK --checkpoint CK`, and after
 * every kill check that
 *   - `tgrad info CK` and `tgrad sample --checkpoint CK` succeed whenever CK exists (a kill
 *     never leaves a torn or missing checkpoint once one was saved, and its step never goes
 *     back);
 *   - a kill adds at most 1 stray file to the run's directory (anything but the corpus and
 *     CK): a temporary of a save killed in the instant between naming and renaming it, which
 *     no later save removes (a save removes only the temporary it created);
 * and that a final uninterrupted run that saves adds no stray file.
 *
 * The kill moments are drawn from a fixed seed, printed at the start, so a failure can be
 * replayed (the process's progress at a given moment still depends on the machine's load).
 * Environment: TG_KILL_ROUNDS (default 50) sets the number of kills, e.g. TG_KILL_ROUNDS=200
 * for the long mode; TG_KILL_SEED (default 20240507) the seed.
 *
 * The tgrad program is tu_tgrad_exe() ($TG_TGRAD_EXE, else the built one). Training uses
 * --eval-every 2, which saves the checkpoint at every evaluation (also once `--save-every` exists).
 */
#define _POSIX_C_SOURCE 200809L
#include "testutil.h"
#include "tgrad_io.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#ifndef TG_TGRAD_EXE
#error "TG_TGRAD_EXE must name the built tgrad program"
#endif

enum { DEFAULT_ROUNDS = 50 };
#define DEFAULT_SEED 20240507u
#define MAX_DELAY_US 150000 /* kill moments are uniform in [0, 150 ms) after the fork */

static char g_base[4096];              /* scratch directory: logs, and run/ */
static char g_run[4200];               /* the training directory whose files are counted */
static char g_corpus[4300], g_ck[4300], g_train_log[4300], g_check_log[4300];

static uint64_t splitmix(uint64_t *x)
{
    uint64_t z = (*x += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

static long env_long(const char *name, long dflt, long lo, long hi)
{
    const char *s = getenv(name);
    if (!s || !*s)
        return dflt;
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    ck_assert_msg(!errno && !*end && v >= lo && v <= hi, "%s='%s' must be an integer in [%ld, %ld]",
                  name, s, lo, hi);
    return v;
}

static bool exists(const char *path)
{
    struct stat sb;
    return stat(path, &sb) == 0;
}

static void teardown(void)
{
    tu_ctx_teardown();
    if (g_base[0])
        tu_rm_tree(g_base);
    g_base[0] = '\0';
}

/* Fail the test after removing the scratch directory: Check ends a forked test at a failed
 * assertion without running the teardown, and the stray-file assertion is expected to fail
 * until saves stop leaving temporaries, so the directory must not be left in $TMPDIR. */
#if defined(__GNUC__)
__attribute__((format(printf, 1, 2)))
#endif
static void kill_fail(const char *fmt, ...)
{
    static char msg[4096];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    teardown();
    ck_abort_msg("%s", msg);
}

#define KCHECK(cond, ...)                                                                     \
    do {                                                                                      \
        if (!(cond))                                                                          \
            kill_fail(__VA_ARGS__);                                                           \
    } while (0)

/* Stray files in the run directory (everything but the corpus and CK): their number, and their
 * names (comma-separated) in names. */
static int strays(char *names, size_t n)
{
    DIR *d = opendir(g_run);
    ck_assert_ptr_nonnull(d);
    int count = 0;
    size_t used = 0;
    names[0] = '\0';
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        const char *s = e->d_name;
        if (!strcmp(s, ".") || !strcmp(s, "..") || !strcmp(s, "corpus.txt") || !strcmp(s, "CK"))
            continue;
        count++;
        if (used < n) {
            int k = snprintf(names + used, n - used, "%s%s", count > 1 ? ", " : "", s);
            if (k > 0)
                used += (size_t)k;
        }
    }
    closedir(d);
    return count;
}

/* Start tgrad with argv (argv[0] is ignored), stdout and stderr to log (truncated). */
static pid_t spawn(const char *const *argv, const char *log)
{
    pid_t pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        int fd = open(log, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        if (fd >= 0) {
            dup2(fd, 1);
            dup2(fd, 2);
            close(fd);
        }
        execv(tu_tgrad_exe(), (char *const *)argv);
        _exit(127);
    }
    return pid;
}

static int wait_for(pid_t pid)
{
    int st;
    pid_t r;
    while ((r = waitpid(pid, &st, 0)) < 0 && errno == EINTR)
        ;
    ck_assert_int_eq(r, pid);
    return st;
}

/* The last ~1500 bytes of a log, for failure messages. */
static const char *log_tail(const char *path)
{
    static char buf[1600];
    buf[0] = '\0';
    FILE *f = fopen(path, "rb");
    if (!f)
        return "(no log)";
    fseek(f, 0, SEEK_END);
    long size = ftell(f);
    fseek(f, size > 1500 ? size - 1500 : 0, SEEK_SET);
    size_t k = fread(buf, 1, sizeof buf - 1, f);
    buf[k] = '\0';
    fclose(f);
    return buf;
}

/* Run tgrad to completion; returns its exit code (-signal if killed). */
static int run(const char *const *argv, const char *log)
{
    int st = wait_for(spawn(argv, log));
    return WIFEXITED(st) ? WEXITSTATUS(st) : -WTERMSIG(st);
}

/* The training command line: a tiny byte-level LM that saves CK every 2 steps; resumes from CK
 * when it exists. stop_after > 0 adds --stop-after. */
static void train_argv(const char **argv, bool resume, long long stop_after, char *stop_buf)
{
    int n = 0;
    argv[n++] = "tgrad";
    argv[n++] = "train";
    argv[n++] = "--text";
    argv[n++] = g_corpus;
    argv[n++] = "--layers";
    argv[n++] = "1";
    argv[n++] = "--d-model";
    argv[n++] = "16";
    argv[n++] = "--heads";
    argv[n++] = "2";
    argv[n++] = "--seq-len";
    argv[n++] = "16";
    argv[n++] = "--batch";
    argv[n++] = "4";
    argv[n++] = "--steps";
    argv[n++] = "20000";
    argv[n++] = "--eval-every";
    argv[n++] = "2";
    argv[n++] = "--threads";
    argv[n++] = "1";
    argv[n++] = "--quiet";
    argv[n++] = "--checkpoint";
    argv[n++] = g_ck;
    if (resume) {
        argv[n++] = "--resume";
        argv[n++] = g_ck;
    }
    if (stop_after > 0) {
        sprintf(stop_buf, "%lld", stop_after);
        argv[n++] = "--stop-after";
        argv[n++] = stop_buf;
    }
    argv[n] = NULL;
}

/* The step a checkpoint was saved at (its optim.step), read with the library. */
static long long ck_step(void)
{
    tg_ctx *ctx = tu_ctx_new();
    tg_safetensors *st = tg_safetensors_read(ctx, g_ck);
    KCHECK(st != NULL, "CK does not load: %s", tg_ctx_message(ctx));
    const char *s = tg_safetensors_meta_get(st, "optim.step");
    KCHECK(s != NULL, "CK has no optim.step");
    long long v = strtoll(s, NULL, 10);
    tu_ctx_free(ctx);
    return v;
}

/* info and sample must both succeed on CK. */
static void check_ck(long round, uint64_t seed)
{
    const char *info[] = {"tgrad", "info", g_ck, NULL};
    int rc = run(info, g_check_log);
    KCHECK(rc == 0, "seed %" PRIu64 ", round %ld: tgrad info CK exited %d:\n%s", seed,
                  round, rc, log_tail(g_check_log));
    const char *sample[] = {"tgrad", "sample", "--checkpoint", g_ck, "--tokens", "8", "--seed",
                            "1", NULL};
    rc = run(sample, g_check_log);
    KCHECK(rc == 0, "seed %" PRIu64 ", round %ld: tgrad sample --checkpoint CK exited %d:\n%s",
                  seed, round, rc, log_tail(g_check_log));
}

static void write_corpus(void)
{
    static const char *const words[] = {"the", "cat", "sat", "on", "a", "mat", "and", "dog",
                                        "ran", "far", "big", "red", "sun", "sky", "blue"};
    FILE *f = fopen(g_corpus, "w");
    ck_assert_ptr_nonnull(f);
    uint64_t x = 7;
    for (int i = 0; i < 2000; i++)
        fprintf(f, "%s%s", words[splitmix(&x) % 15], i % 12 == 11 ? ".\n" : " ");
    ck_assert_int_eq(fclose(f), 0);
}

START_TEST(test_kill_during_training)
{
    long rounds = env_long("TG_KILL_ROUNDS", DEFAULT_ROUNDS, 1, 1000000);
    uint64_t seed = (uint64_t)env_long("TG_KILL_SEED", (long)DEFAULT_SEED, 0, 0x7fffffffL);
    fprintf(stderr, "test_kill: seed %" PRIu64 ", %ld kills (set TG_KILL_SEED, TG_KILL_ROUNDS "
            "to change)\n", seed, rounds);

    const char *tmp = getenv("TMPDIR");
    snprintf(g_base, sizeof g_base, "%s/tg_kill_XXXXXX", tmp && tmp[0] ? tmp : "/tmp");
    ck_assert_msg(mkdtemp(g_base) != NULL, "mkdtemp: %s", strerror(errno));
    snprintf(g_run, sizeof g_run, "%s/run", g_base);
    ck_assert_int_eq(mkdir(g_run, 0755), 0);
    snprintf(g_corpus, sizeof g_corpus, "%s/corpus.txt", g_run);
    snprintf(g_ck, sizeof g_ck, "%s/CK", g_run);
    snprintf(g_train_log, sizeof g_train_log, "%s/train.log", g_base);
    snprintf(g_check_log, sizeof g_check_log, "%s/check.log", g_base);
    write_corpus();

    uint64_t rng = seed;
    int max_strays = 0, max_new = 0, prev = 0;
    long first_over = -1, rounds_with_ck = 0;
    long long last_step = -1;
    char names[1024], over_names[1024] = "";
    const char *argv[40];
    char stop_buf[32];
    for (long round = 1; round <= rounds; round++) {
        bool had_ck = exists(g_ck);
        train_argv(argv, had_ck, 0, stop_buf);
        long delay_us = (long)(splitmix(&rng) % MAX_DELAY_US);
        pid_t pid = spawn(argv, g_train_log);
        struct timespec ts = {delay_us / 1000000, (delay_us % 1000000) * 1000};
        while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
            ;
        kill(pid, SIGKILL);
        int st = tu_wait_killed(pid);
        if (!WIFSIGNALED(st)) {
            /* it ended by itself before the kill: only an error can do that in 20000 steps */
            kill_fail("seed %" PRIu64 ", round %ld: tgrad train %s exited %d before the "
                          "kill:\n%s", seed, round, had_ck ? "--resume CK" : "",
                          WIFEXITED(st) ? WEXITSTATUS(st) : -1, log_tail(g_train_log));
        }
        if (exists(g_ck)) {
            rounds_with_ck++;
            check_ck(round, seed);
            long long step = ck_step();
            KCHECK(step >= last_step, "seed %" PRIu64 ", round %ld: CK went back from "
                          "step %lld to %lld", seed, round, last_step, step);
            last_step = step;
        } else {
            KCHECK(!had_ck, "seed %" PRIu64 ", round %ld: CK existed before the kill and "
                          "is gone", seed, round);
        }
        int n = strays(names, sizeof names);
        if (n > max_strays)
            max_strays = n;
        if (n - prev > max_new)
            max_new = n - prev;
        if (n - prev > 1 && first_over < 0) {
            first_over = round;
            snprintf(over_names, sizeof over_names, "%s", names);
        }
        prev = n;
    }

    /* A final uninterrupted run that saves: 2 more steps from CK (or 2 from scratch). */
    bool had_ck = exists(g_ck);
    train_argv(argv, had_ck, had_ck ? last_step + 2 : 2, stop_buf);
    int rc = run(argv, g_train_log);
    KCHECK(rc == 0, "seed %" PRIu64 ": the final uninterrupted run exited %d:\n%s", seed,
                  rc, log_tail(g_train_log));
    KCHECK(exists(g_ck), "the final run saved no checkpoint");
    check_ck(rounds + 1, seed);
    char final_names[1024];
    int final = strays(final_names, sizeof final_names);
    fprintf(stderr, "test_kill: %ld kills, CK present after %ld, last saved step %lld, at most "
            "%d stray files during the kills, %d after the final run\n", rounds, rounds_with_ck,
            last_step, max_strays, final);
    char over[1200] = "";
    if (first_over > 0)
        snprintf(over, sizeof over, " (more than 1 new first after kill %ld: %s)", first_over,
                 over_names);
    KCHECK(final == prev && max_new <= 1,
           "seed %" PRIu64 ": stray files: %d after the final uninterrupted save (%s), "
           "%d before it; during the %ld kills at most %d new at once%s",
           seed, final, final_names, prev, rounds, max_new, over);
}
END_TEST

static Suite *kill_suite(void)
{
    Suite *s = suite_create("kill");
    TCase *tc = tcase_create("sigkill");
    tcase_add_checked_fixture(tc, NULL, teardown);
    const char *r = getenv("TG_KILL_ROUNDS"); /* validated by the test itself */
    long rounds = r && atol(r) > 0 ? atol(r) : DEFAULT_ROUNDS;
    tcase_set_timeout(tc, (double)(120 + 4 * rounds));
    tcase_add_test(tc, test_kill_during_training);
    suite_add_tcase(s, tc);
    return s;
}

int main(void) { return tu_run(kill_suite()); }
