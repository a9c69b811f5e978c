/*
 * test_cli.c - the `tgrad` program run as a separate process (tu_tgrad_exe(): the built one,
 * or $TG_TGRAD_EXE) in a scratch directory, each run killed after RUN_TIMEOUT seconds so a hang
 * fails instead of blocking:
 *   - gradcheck: the table it prints, --op / --dtype / --list / --help;
 *   - the top level: --version / version (and that the version macros agree with meson's
 *     project version, passed as TG_PROJECT_VERSION), --help, help COMMAND, unknown commands;
 *   - hostile numbers (huge, negative, NaN, inf, non-numeric, empty) on every numeric option of
 *     run, gradcheck and bench: one line on stderr naming the value and what is allowed, a
 *     non-zero exit, no signal (a sanitizer report would add lines), no hang;
 *   - bench: the %peak cells (never above 100: a rate above the probed peak means the probe
 *     failed, and the cell says n/a), in the printed tables and as a unit;
 *   - info on several files (.npy dtypes and shapes, safetensors), with bad files among them,
 *     and on a FIFO, a device and a directory (refused at once, not read).
 */
#define _POSIX_C_SOURCE 200809L
#include "bench_gemm.h"
#include "opcases.h"
#include "testutil.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#ifndef TG_TGRAD_EXE
#error "TG_TGRAD_EXE must name the built tgrad program"
#endif
#ifndef TG_PROJECT_VERSION
#error "TG_PROJECT_VERSION must be meson's project version"
#endif

/* Seconds before a run counts as hung (`timeout` exits 124). */
#define RUN_TIMEOUT 60

typedef struct {
    bool exited;  /* false if killed by a signal */
    int code;     /* exit status */
    char *out;    /* stdout */
    char *err;    /* stderr */
} cmd_result;

/* Scratch directory of every test (a checked fixture): tgrad runs there. */
static char tmpdir[256];

static void tmp_setup(void) { tu_mkdtemp(tmpdir, sizeof tmpdir, "cli"); }
static void tmp_teardown(void) { tu_rm_tree(tmpdir); }

/* Run `tgrad ARGS` in tmpdir, capturing stdout and stderr separately. */
static cmd_result run_tgrad(const char *args)
{
    cmd_result r;
    int rc = tu_run_tgrad(tmpdir, args, RUN_TIMEOUT, NULL);
    ck_assert_msg(rc != TU_TIMED_OUT, "tgrad %s hung (killed after %d s)", args, RUN_TIMEOUT);
    r.exited = rc >= 0; /* negative: killed by signal -rc */
    r.code = rc;
    r.out = tu_slurp_in(tmpdir, "out.txt", NULL);
    r.err = tu_slurp_in(tmpdir, "err.txt", NULL);
    ck_assert(r.out && r.err);
    return r;
}

static void result_free(cmd_result *r)
{
    free(r->out);
    free(r->err);
}

/* Every "N%" in @p out (a number right before a '%') is at most 100. */
static void assert_pct_at_most_100(const char *out)
{
    for (const char *p = strchr(out, '%'); p; p = strchr(p + 1, '%')) {
        const char *b = p;
        while (b > out && (b[-1] == '.' || (b[-1] >= '0' && b[-1] <= '9')))
            b--;
        if (b < p)
            ck_assert_msg(strtod(b, NULL) <= 100, "%.*s%% of peak in '%s'", (int)(p - b), b,
                          out);
    }
}

#define count_lines tu_count_lines

/* A usage error: a normal non-zero exit, exactly one line on stderr, nothing on stdout. */
static void expect_usage_error(const char *args, const char *needle)
{
    cmd_result r = run_tgrad(args);
    ck_assert_msg(r.exited, "tgrad %s was killed by a signal (%d)", args, r.code);
    ck_assert_msg(r.code != 0, "tgrad %s exited 0", args);
    ck_assert_msg(count_lines(r.err) == 1 && r.err[strlen(r.err) - 1] == '\n',
                  "tgrad %s: stderr is not one line: '%s'", args, r.err);
    ck_assert_msg(r.out[0] == '\0', "tgrad %s printed to stdout: '%s'", args, r.out);
    if (needle)
        ck_assert_msg(strstr(r.err, needle) != NULL, "tgrad %s: stderr '%s' lacks '%s'", args,
                      r.err, needle);
    result_free(&r);
}

/* ---- the table ---------------------------------------------------------------------------- */
typedef struct {
    char op[64], name[64], dtype[16], result[16];
    double max_abs, max_rel;
} row;

/* Parse the rows of a gradcheck table (fields counted from both ends, since the shapes
 * column contains spaces). Checks the header. Returns the number of rows. */
static int parse_table(const char *out, row *rows, int cap)
{
    char *copy = strdup(out);
    int n = 0;
    bool header = false;
    char *save = NULL;
    for (char *line = strtok_r(copy, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
        if (!header) {
            ck_assert_msg(strstr(line, "op") && strstr(line, "case") && strstr(line, "dtype") &&
                              strstr(line, "max_abs") && strstr(line, "max_rel"),
                          "bad header line '%s'", line);
            header = true;
            continue;
        }
        if (line[0] == ' ' || strstr(line, " cases, ")) /* failure detail, summary */
            continue;
        char *tok[64];
        int nt = 0;
        char *s2 = NULL;
        for (char *t = strtok_r(line, " \t", &s2); t && nt < 64; t = strtok_r(NULL, " \t", &s2))
            tok[nt++] = t;
        ck_assert_msg(nt >= 6, "short row (%d fields)", nt);
        ck_assert_int_lt(n, cap);
        row *r = &rows[n++];
        snprintf(r->op, sizeof r->op, "%s", tok[0]);
        snprintf(r->name, sizeof r->name, "%s", tok[1]);
        snprintf(r->result, sizeof r->result, "%s", tok[nt - 1]);
        snprintf(r->dtype, sizeof r->dtype, "%s", tok[nt - 4]);
        char *end;
        r->max_abs = strtod(tok[nt - 3], &end);
        ck_assert_msg(*end == '\0', "max_abs '%s' is not a number", tok[nt - 3]);
        r->max_rel = strtod(tok[nt - 2], &end);
        ck_assert_msg(*end == '\0', "max_rel '%s' is not a number", tok[nt - 2]);
    }
    ck_assert_msg(header, "no output");
    free(copy);
    return n;
}

/* --order 2: second derivatives through the gradients built as nodes; --mode fwd: forward mode;
 * an op with a rule passes (dropout and max too, through the mask of the run), one without (a
 * custom op without rules as ops) is refused naming it, and a refusal makes the exit status 1. */
START_TEST(test_gradcheck_order2)
{
    cmd_result r = run_tgrad("gradcheck --order 2 --op matmul --op mha --op layer_norm");
    ck_assert_msg(r.exited && r.code == 0, "exited %d:\n%s\n%s", r.code, r.out, r.err);
    ck_assert_ptr_nonnull(strstr(r.out, " 0 failed, 0 refused"));
    ck_assert_ptr_null(strstr(r.out, "REFUSED"));
    result_free(&r);
    r = run_tgrad("gradcheck --order 2 --op custom");
    ck_assert_msg(r.exited && r.code == 1, "exited %d:\n%s\n%s", r.code, r.out, r.err);
    ck_assert_ptr_nonnull(strstr(r.out, "REFUSED"));
    ck_assert_ptr_nonnull(strstr(r.out, "op 'exp_from_output'"));
    ck_assert_ptr_nonnull(strstr(r.out, "4 passed, 0 failed, 1 refused"));
    result_free(&r);
    r = run_tgrad("gradcheck --mode fwd --op layer_norm --op encoder");
    ck_assert_msg(r.exited && r.code == 0, "exited %d:\n%s\n%s", r.code, r.out, r.err);
    ck_assert_ptr_nonnull(strstr(r.out, " 0 failed, 0 refused (no forward-mode rule yet)"));
    result_free(&r);
    r = run_tgrad("gradcheck --mode both --order 2 --op dropout --op max");
    ck_assert_msg(r.exited && r.code == 0, "exited %d:\n%s\n%s", r.code, r.out, r.err);
    ck_assert_ptr_nonnull(strstr(r.out, " 0 failed, 0 refused"));
    result_free(&r);
    r = run_tgrad("gradcheck --mode fwd --op custom");
    ck_assert_msg(r.exited && r.code == 1, "exited %d:\n%s\n%s", r.code, r.out, r.err);
    ck_assert_ptr_nonnull(strstr(r.out, "op 'exp_from_output'"));
    result_free(&r);
    r = run_tgrad("gradcheck --order 3");
    ck_assert_msg(r.exited && r.code == 2, "exited %d", r.code);
    result_free(&r);
}
END_TEST

START_TEST(test_gradcheck_all)
{
    cmd_result r = run_tgrad("gradcheck");
    ck_assert_msg(r.exited && r.code == 0, "tgrad gradcheck exited %d:\n%s\n%s", r.code, r.out,
                  r.err);
    ck_assert_str_eq(r.err, "");
    row *rows = calloc((size_t)tg_n_opcases + 1, sizeof *rows);
    int n = parse_table(r.out, rows, tg_n_opcases + 1);
    ck_assert_int_eq(n, tg_n_opcases);
    for (int i = 0; i < n; i++) {
        ck_assert_msg(strcmp(rows[i].result, "PASS") == 0, "%s/%s: %s", rows[i].op,
                      rows[i].name, rows[i].result);
        ck_assert_str_eq(rows[i].dtype, "f64");
        ck_assert_str_eq(rows[i].op, tg_opcases[i].op);
        ck_assert_str_eq(rows[i].name, tg_opcases[i].name);
        ck_assert(rows[i].max_abs >= 0 && rows[i].max_rel >= 0);
    }
    /* a PASS row for every registered op with a backward rule (the inference-only ones have
     * none, and no cases: tests/test_registry.c checks that list) */
    for (int k = 0; k < tg_op_count(); k++) {
        if (!tg_op_has_backward(k))
            continue;
        bool seen = false;
        for (int i = 0; i < n && !seen; i++)
            seen = strcmp(rows[i].op, tg_op_name(k)) == 0 && strcmp(rows[i].result, "PASS") == 0;
        ck_assert_msg(seen, "no PASS row for op '%s'", tg_op_name(k));
    }
    /* aligned columns, whatever the length of a case's name or shapes: every row's dtype and
     * result start where the header's do */
    const char *hdr = r.out;
    size_t hl = strcspn(hdr, "\n");
    char *h = strndup(hdr, hl);
    size_t dtype_at = (size_t)(strstr(h, "dtype") - h);
    size_t result_at = (size_t)(strstr(h, "result") - h);
    for (const char *p = hdr + hl + 1; *p && strncmp(p, "\n", 1); p += strcspn(p, "\n") + 1) {
        if (p[0] == ' ')
            continue; /* failure detail */
        ck_assert_msg(strlen(p) > result_at && !strncmp(p + dtype_at, "f64", 3) &&
                          !strncmp(p + result_at, "PASS", 4),
                      "misaligned row: %.*s", (int)strcspn(p, "\n"), p);
    }
    free(h);
    char summary[96];
    snprintf(summary, sizeof summary, "%d cases, %d passed, 0 failed", n, n);
    ck_assert_msg(strstr(r.out, summary) != NULL, "no summary '%s'", summary);
    free(rows);
    result_free(&r);
}
END_TEST

START_TEST(test_gradcheck_one_op)
{
    cmd_result r = run_tgrad("gradcheck --op softmax");
    ck_assert_msg(r.exited && r.code == 0, "exit %d: %s", r.code, r.err);
    row rows[64];
    int n = parse_table(r.out, rows, 64);
    ck_assert_int_eq(n, tg_opcase_count("softmax"));
    ck_assert_int_ge(n, 3);
    for (int i = 0; i < n; i++) {
        ck_assert_str_eq(rows[i].op, "softmax");
        ck_assert_str_eq(rows[i].result, "PASS");
    }
    result_free(&r);

    /* --op repeats; modules are selectable too */
    r = run_tgrad("gradcheck --op relu --op matmul --op sdpa");
    ck_assert_msg(r.exited && r.code == 0, "exit %d: %s", r.code, r.err);
    n = parse_table(r.out, rows, 64);
    ck_assert_int_eq(n, tg_opcase_count("relu") + tg_opcase_count("matmul") +
                            tg_opcase_count("sdpa"));
    for (int i = 0; i < n; i++)
        ck_assert(strcmp(rows[i].op, "relu") == 0 || strcmp(rows[i].op, "matmul") == 0 ||
                  strcmp(rows[i].op, "sdpa") == 0);
    result_free(&r);
}
END_TEST

START_TEST(test_gradcheck_f32)
{
    cmd_result r = run_tgrad("gradcheck --dtype f32");
    ck_assert_msg(r.exited && r.code == 0, "tgrad gradcheck --dtype f32 exited %d:\n%s\n%s",
                  r.code, r.out, r.err);
    row *rows = calloc((size_t)tg_n_opcases + 1, sizeof *rows);
    int n = parse_table(r.out, rows, tg_n_opcases + 1);
    ck_assert_int_eq(n, tg_n_opcases);
    for (int i = 0; i < n; i++) {
        ck_assert_str_eq(rows[i].dtype, "f32");
        ck_assert_str_eq(rows[i].result, "PASS");
    }
    free(rows);
    result_free(&r);
    r = run_tgrad("gradcheck --dtype f64 --op gelu");
    ck_assert_int_eq(r.code, 0);
    row rows2[16];
    n = parse_table(r.out, rows2, 16);
    for (int i = 0; i < n; i++)
        ck_assert_str_eq(rows2[i].dtype, "f64");
    result_free(&r);
}
END_TEST

START_TEST(test_gradcheck_threads)
{
    cmd_result r = run_tgrad("gradcheck --threads 2 --op matmul --op layer_norm");
    ck_assert_msg(r.exited && r.code == 0, "exit %d: %s", r.code, r.err);
    row rows[64];
    int n = parse_table(r.out, rows, 64);
    ck_assert_int_eq(n, tg_opcase_count("matmul") + tg_opcase_count("layer_norm"));
    result_free(&r);
}
END_TEST

START_TEST(test_list)
{
    cmd_result r = run_tgrad("gradcheck --list");
    ck_assert_msg(r.exited && r.code == 0, "exit %d: %s", r.code, r.err);
    ck_assert_str_eq(r.err, "");
    ck_assert_int_eq(count_lines(r.out), tg_n_opcases);
    /* one line per case, starting with its op and case names; nothing is run */
    const char *p = r.out;
    for (int i = 0; i < tg_n_opcases; i++) {
        char op[64], name[64];
        ck_assert_int_eq(sscanf(p, "%63s %63s", op, name), 2);
        ck_assert_str_eq(op, tg_opcases[i].op);
        ck_assert_str_eq(name, tg_opcases[i].name);
        p = strchr(p, '\n') + 1;
    }
    ck_assert(strstr(r.out, "PASS") == NULL);
    result_free(&r);
    /* --list with --op still lists (and validates the name) */
    r = run_tgrad("gradcheck --list --op dense");
    ck_assert_int_eq(r.code, 0);
    result_free(&r);
}
END_TEST

START_TEST(test_help)
{
    cmd_result r = run_tgrad("gradcheck --help");
    ck_assert_msg(r.exited && r.code == 0, "exit %d", r.code);
    ck_assert_msg(strstr(r.out, "usage: tgrad gradcheck") != NULL, "help: '%s'", r.out);
    ck_assert(strstr(r.out, "--op") && strstr(r.out, "--dtype") && strstr(r.out, "--list"));
    ck_assert_str_eq(r.err, "");
    result_free(&r);
    r = run_tgrad("gradcheck -h");
    ck_assert_int_eq(r.code, 0);
    result_free(&r);
    r = run_tgrad("--help");
    ck_assert_msg(r.exited && r.code == 0, "exit %d", r.code);
    ck_assert(strstr(r.out, "gradcheck") != NULL);
    ck_assert_str_eq(r.err, "");
    result_free(&r);
}
END_TEST

/* ---- usage errors ------------------------------------------------------------------------- */
START_TEST(test_usage_errors)
{
    expect_usage_error("gradcheck --op no_such_op", "no_such_op");
    expect_usage_error("gradcheck --op softmax --op nope", "nope");
    expect_usage_error("gradcheck --dtype f16", "f16");
    expect_usage_error("gradcheck --dtype", NULL);
    expect_usage_error("gradcheck --bogus", "--bogus");
    expect_usage_error("gradcheck extra_argument", "extra_argument");
    expect_usage_error("gradcheck --op", NULL);
    expect_usage_error("gradcheck --threads 0", NULL);
    expect_usage_error("gradcheck --threads -3", NULL);
    expect_usage_error("gradcheck --list --op no_such_op", "no_such_op");
    expect_usage_error("no_such_command", "no_such_command");
    /* no command at all: usage on stderr, non-zero */
    cmd_result r = run_tgrad("");
    ck_assert(r.exited && r.code != 0);
    ck_assert(strstr(r.err, "usage") != NULL);
    ck_assert_str_eq(r.out, "");
    result_free(&r);
}
END_TEST

/* ---- version and the top level ------------------------------------------------------------ */
START_TEST(test_version)
{
    /* the header agrees with meson.build's project version, and with itself */
    ck_assert_str_eq(TGRAD_VERSION_STRING, TG_PROJECT_VERSION);
    char v[64];
    snprintf(v, sizeof v, "%d.%d.%d", TGRAD_VERSION_MAJOR, TGRAD_VERSION_MINOR,
             TGRAD_VERSION_PATCH);
    ck_assert_str_eq(v, TGRAD_VERSION_STRING);
    char want[96];
    snprintf(want, sizeof want, "tgrad %s\n", TG_PROJECT_VERSION);
    static const char *const forms[] = {"--version", "version", "--version train"};
    for (size_t i = 0; i < sizeof forms / sizeof forms[0]; i++) {
        cmd_result r = run_tgrad(forms[i]);
        ck_assert_msg(r.exited && r.code == 0, "tgrad %s exited %d: %s", forms[i], r.code, r.err);
        ck_assert_str_eq(r.out, want);
        ck_assert_str_eq(r.err, "");
        result_free(&r);
    }
    expect_usage_error("version extra", "extra");
    cmd_result r = run_tgrad("--help");
    ck_assert(strstr(r.out, "version") && strstr(r.out, "export"));
    result_free(&r);
}
END_TEST

/* Output that cannot be written (a full device, c 1 7: ENOSPC) is an error for every command,
 * not an exit 0 with the output lost (info, gradcheck, version, help, run, export and train
 * used to exit 0). */
START_TEST(test_output_write_errors)
{
    char full[600];
    if (!tu_full_device(tmpdir, "full", full, sizeof full, true, "test_output_write_errors"))
        return;
    char fix[600];
    snprintf(fix, sizeof fix, "'%s/export_lm.ckpt'", TG_FIXTURES);
    const char *const forms[] = {"--version", "--help", "help help", "train --help",
                                 "gradcheck --list", "info", "sample --tokens 3 --checkpoint",
                                 "export --out e.safetensors --checkpoint"};
    for (size_t i = 0; i < sizeof forms / sizeof forms[0]; i++) {
        char cmd[2400];
        bool with_ck = i >= 5;
        snprintf(cmd, sizeof cmd, "('%s' %s %s > '%s')", tu_tgrad_exe(), forms[i],
                 with_ck ? fix : "", full);
        int rc = tu_run_sh(tmpdir, cmd, RUN_TIMEOUT, NULL);
        char *err = tu_slurp_in(tmpdir, "err.txt", NULL);
        ck_assert_msg(rc == 1 && err && count_lines(err) == 1 &&
                      strstr(err, "writing the output failed"),
                      "tgrad %s > %s: exit %d, '%s'", forms[i], full, rc, err ? err : "");
        free(err);
    }
}
END_TEST

START_TEST(test_top_level)
{
    expect_usage_error("--bogus", "--bogus");
    expect_usage_error("--vers", "--vers");     /* no abbreviations */
    expect_usage_error("-x train", "-x");
    expect_usage_error("help no_such_command", "no_such_command");
    expect_usage_error("help run extra", "extra");
    /* help COMMAND is COMMAND --help */
    static const char *const cmds[] = {"run", "info", "gradcheck", "bench", "export"};
    for (size_t i = 0; i < sizeof cmds / sizeof cmds[0]; i++) {
        char a[64], b[64];
        snprintf(a, sizeof a, "help %s", cmds[i]);
        snprintf(b, sizeof b, "%s --help", cmds[i]);
        cmd_result r1 = run_tgrad(a), r2 = run_tgrad(b);
        ck_assert_msg(r1.exited && r1.code == 0 && r2.code == 0, "%s: %d %s", a, r1.code, r1.err);
        ck_assert_str_eq(r1.out, r2.out);
        char usage[64];
        snprintf(usage, sizeof usage, "usage: tgrad %s", cmds[i]);
        ck_assert_msg(strstr(r1.out, usage) != NULL, "%s: '%s'", a, r1.out);
        ck_assert_str_eq(r1.err, "");
        result_free(&r1);
        result_free(&r2);
    }
    /* the top-level help lists every module of run, from run's own table, within 80
     * columns; `help run MODULE` is `run MODULE --help` */
    cmd_result h = run_tgrad("--help");
    static const char *const modules[] = {"sdpa", "mha", "ffn", "encoder", "decoder",
                                          "transformer"};
    for (size_t i = 0; i < sizeof modules / sizeof modules[0]; i++) {
        char a[64], b[64];
        ck_assert_msg(strstr(h.out, modules[i]) != NULL, "--help lacks '%s': %s", modules[i],
                      h.out);
        snprintf(a, sizeof a, "help run %s", modules[i]);
        snprintf(b, sizeof b, "run %s --help", modules[i]);
        cmd_result r1 = run_tgrad(a), r2 = run_tgrad(b);
        ck_assert_msg(r1.exited && r1.code == 0 && r2.code == 0, "%s: %d %s", a, r1.code,
                      r1.err);
        ck_assert_str_eq(r1.out, r2.out);
        ck_assert_str_eq(r1.err, "");
        result_free(&r1);
        result_free(&r2);
    }
    for (const char *p = h.out; *p; p = strchr(p, '\n') + 1) {
        ck_assert_msg(strcspn(p, "\n") <= 80, "--help line over 80 columns: %.*s",
                      (int)strcspn(p, "\n"), p);
        if (!strchr(p, '\n'))
            break;
    }
    result_free(&h);
    /* every command's description fits in 80 columns as written: the wrapping never breaks
     * a word off onto a line of its own */
    static const char *const helps[] = {"train", "sample", "run", "info", "gradcheck",
                                        "bench", "export", "run mha"};
    for (size_t i = 0; i < sizeof helps / sizeof helps[0]; i++) {
        char a[64];
        snprintf(a, sizeof a, "%s --help", helps[i]);
        cmd_result r1 = run_tgrad(a);
        size_t prev = 0;
        for (const char *p = r1.out; *p; p = strchr(p, '\n') + 1) {
            size_t len = strcspn(p, "\n");
            ck_assert_msg(prev < 76 || len == 0 || p[0] == ' ' || memchr(p, ' ', len) != NULL,
                          "%s: a word broken off onto a line of its own: '%.*s'", a, (int)len,
                          p);
            prev = len;
            if (!p[len])
                break;
        }
        result_free(&r1);
    }
    /* the help of table-driven commands lists their options with ranges */
    cmd_result r = run_tgrad("gradcheck --help");
    ck_assert_msg(strstr(r.out, "--threads N") && strstr(r.out, "[1..256]"), "'%s'", r.out);
    result_free(&r);
    r = run_tgrad("bench --help");
    ck_assert_msg(strstr(r.out, "--samples N") && strstr(r.out, "--only SECTION") &&
                      strstr(r.out, "OpenBLAS") && !strstr(r.out, "--tiny"), "'%s'", r.out);
    result_free(&r);
    /* the GEMM section runs (one tiny shape, 1 sample: a smoke test, its numbers mean
     * nothing and none is checked) and prints its tables, with or without OpenBLAS */
    r = run_tgrad("bench --only gemm --tiny --samples 1 --threads 2");
    ck_assert_msg(r.exited && r.code == 0, "bench --tiny: %d '%s'", r.code, r.err);
    ck_assert_msg(strstr(r.out, "FMA peak probe") && strstr(r.out, "OpenBLAS") &&
                      strstr(r.out, "sgemm, 1 thread") && strstr(r.out, "dgemm, 2 threads") &&
                      strstr(r.out, "(M, N, K)") && strstr(r.out, "(16, 8, 4)"), "'%s'", r.out);
    assert_pct_at_most_100(r.out);
    result_free(&r);
    r = run_tgrad("run encoder --help");
    ck_assert_msg(strstr(r.out, "--eps E") && strstr(r.out, "[0, 1]") &&
                      strstr(r.out, "[1..65536]") && strstr(r.out, "(required)"), "'%s'", r.out);
    result_free(&r);
}
END_TEST

/* The %peak cell: a percentage only when 0 <= GFLOP/s <= peak and the peak is positive and
 * finite; else n/a (the probe failed). 100 * g / p never rounds above 100. */
START_TEST(test_bench_pct_cell)
{
    static const struct {
        double gflops, peak;
        bool ok;
        const char *cell;
    } rows[] = {
        {50, 100, true, "   50%"},    {100, 100, true, "  100%"},
        {99.6, 100, true, "  100%"},  {0, 58.8, true, "    0%"},
        {86.4, 58.8, false, "   n/a"}, /* the report's 2-thread dgemm at 147% */
        {100.0000001, 100, false, "   n/a"}, {1, 0, false, "   n/a"},
        {1, -5, false, "   n/a"},    {1, NAN, false, "   n/a"},
        {NAN, 10, false, "   n/a"},  {1, INFINITY, false, "   n/a"},
        {INFINITY, INFINITY, false, "   n/a"}, {-1, 10, false, "   n/a"},
        {58.8 * (1 - 1e-16), 58.8, true, "  100%"}, {0x1p-1074, 0x1p-1074, true, "  100%"},
    };
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
        char cell[16];
        bool ok = bench_pct_cell(rows[i].gflops, rows[i].peak, cell, sizeof cell);
        ck_assert_msg(ok == rows[i].ok && strcmp(cell, rows[i].cell) == 0,
                      "row %zu: %g of %g gave %d '%s'", i, rows[i].gflops, rows[i].peak, ok,
                      cell);
        assert_pct_at_most_100(cell);
    }
}
END_TEST

/* `tgrad bench --tiny` runs every section on tiny shapes (a smoke test of every code path: its
 * numbers mean nothing and none is checked; speed is never asserted in a test) and prints
 * every section's header and every workload's row. */
START_TEST(test_bench_tiny)
{
    cmd_result r = run_tgrad("bench --tiny --samples 1 --threads 2");
    ck_assert_msg(r.exited && r.code == 0, "bench --tiny: %d '%s'", r.code, r.err);
    assert_pct_at_most_100(r.out);
    static const char *const want[] = {
        "Machine: ", "OpenBLAS", "Threads: 1 and 2", "FMA peak probe", "instruction form",
        "same, f64", /* the forms depend on the CPU (and valgrind hides AVX-512) */ "Peak (used for %peak below)", "sgemm, 1 thread",
        "sgemm, 2 threads", "dgemm, 1 thread", "dgemm, 2 threads", "(16, 8, 4)",
        "dense (M, N, K)", "Modules and training, f32, fused ops", "2 threads", "speedup",
        "sdpa (2, 3, 4) fwd ", "sdpa (2, 3, 4) fwd+bwd", "mha (2, 6) fwd ", "mha (2, 6) fwd+bwd",
        "mha (2, 3) fwd ", "mha (2, 3) fwd+bwd", "encoder (2, 6) fwd ", "encoder (2, 6) fwd+bwd",
        "encoder (2, 3) fwd ", "encoder (2, 3) fwd+bwd", "train step (B 2, T 8)"};
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++)
        ck_assert_msg(strstr(r.out, want[i]) != NULL, "bench --tiny: no '%s' in '%s'", want[i],
                      r.out);
#if defined(__x86_64__) && defined(__GNUC__)
    ck_assert_msg(strstr(r.out, "Core clock under load"), "'%s'", r.out);
#endif
    result_free(&r);
    /* one section, unfused, one thread count: only its rows */
    r = run_tgrad("bench --tiny --samples 2 --threads 1 --only encoder --unfused");
    ck_assert_msg(r.exited && r.code == 0, "bench --only encoder: %d '%s'", r.code, r.err);
    ck_assert_msg(strstr(r.out, "unfused") && strstr(r.out, "encoder (2, 6) fwd+bwd") &&
                      !strstr(r.out, "mha (") && !strstr(r.out, "FMA peak") &&
                      !strstr(r.out, "sgemm") && !strstr(r.out, "speedup"), "'%s'", r.out);
    result_free(&r);
    r = run_tgrad("bench --tiny --samples 1 --only peak");
    ck_assert_msg(r.exited && r.code == 0 && strstr(r.out, "FMA peak probe") &&
                      !strstr(r.out, "sgemm") && !strstr(r.out, "Modules") &&
                      !strstr(r.out, "Precision:"), "'%s'", r.out);
    result_free(&r);
}
END_TEST

/* --precision bf16: the header names it, gemm prints the bf16 GEMM's tables (no sgemm, dgemm
 * or OpenBLAS columns) with their medians over the shapes, and the module and training rows
 * come from bf16 graphs. Numbers are not checked. */
START_TEST(test_bench_bf16)
{
    cmd_result r = run_tgrad("bench --tiny --samples 1 --threads 2 --precision bf16 --only gemm");
    ck_assert_msg(r.exited && r.code == 0, "bench --precision bf16: %d '%s'", r.code, r.err);
    assert_pct_at_most_100(r.out);
    static const char *const want[] = {
        "Precision: bf16", "FMA peak probe", "bf16 GEMM, 1 thread, bf16 peak",
        "bf16 GEMM, 2 threads, bf16 peak", "tgrad f32 GFLOP/s", "(16, 8, 4)           NT",
        "median over shapes (bf16, 1 thread, NN and NT)",
        "median over shapes (bf16, 2 threads, NN and NT)"};
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++)
        ck_assert_msg(strstr(r.out, want[i]) != NULL, "no '%s' in '%s'", want[i], r.out);
    ck_assert_msg(!strstr(r.out, "sgemm, ") && !strstr(r.out, "dgemm, ") &&
                      !strstr(r.out, "OpenBLAS GFLOP/s"), "'%s'", r.out);
    result_free(&r);
    r = run_tgrad("bench --tiny --samples 1 --threads 2 --precision bf16 --only train");
    ck_assert_msg(r.exited && r.code == 0 && strstr(r.out, "Modules and training, bf16") &&
                      strstr(r.out, "train step (B 2, T 8)"), "%d '%s' '%s'", r.code, r.out,
                  r.err);
    result_free(&r);
    r = run_tgrad("bench --tiny --samples 1 --threads 1 --precision f32 --only dense");
    ck_assert_msg(r.exited && r.code == 0 && strstr(r.out, "dense (M, N, K)") &&
                      !strstr(r.out, "bf16"), "%d '%s' '%s'", r.code, r.out, r.err);
    result_free(&r);
    expect_usage_error("bench --precision f16", "f32 or bf16");
}
END_TEST

/* ---- hostile numbers ---------------------------------------------------------------------- */
/* Values no integer option accepts (with the bounds they all have, >= 1). */
static const char *const bad_ints[] = {
    "4611686018427387904", "9223372036854775807", "9223372036854775808",
    "99999999999999999999999", "-1", "-4611686018427387904", "0", "nan", "NaN", "-nan", "inf",
    "-inf", "1e999", "1e3", "1.5", "abc", "3x", "0x10", "''", "' 3'", "+3", "65537"};
/* Values no number option of range [0, 1] accepts. */
static const char *const bad_nums[] = {
    "4611686018427387904", "1e308", "1e999", "-1", "-1e-300", "nan", "NaN", "-nan", "inf",
    "-inf", "infinity", "abc", "1e", "''", "' 0.5'", "+0.5", "2"};

/* `tgrad <prefix> <opt> <value> <suffix>` for every value: one line naming the option and the
 * value (as given, for the ones that are printable without quotes) and @p allowed. */
static void hostile(const char *prefix, const char *opt, const char *suffix,
                    const char *const *values, size_t n, const char *allowed)
{
    for (size_t i = 0; i < n; i++) {
        char a[1024], needle[128];
        snprintf(a, sizeof a, "%s %s %s %s", prefix, opt, values[i], suffix);
        expect_usage_error(a, opt);
        if (values[i][0] != '\'') {
            snprintf(needle, sizeof needle, "'%s'", values[i]);
            expect_usage_error(a, needle);
        }
        expect_usage_error(a, allowed);
        /* the --opt=value form too */
        if (values[i][0] != '\'') {
            snprintf(a, sizeof a, "%s %s=%s %s", prefix, opt, values[i], suffix);
            expect_usage_error(a, allowed);
        }
    }
}

START_TEST(test_hostile_numbers)
{
    const size_t ni = sizeof bad_ints / sizeof bad_ints[0];
    const size_t nn = sizeof bad_nums / sizeof bad_nums[0];
    hostile("gradcheck", "--threads", "--op relu", bad_ints, ni, "from 1 to 256");
    hostile("bench", "--threads", "", bad_ints, ni, "from 1 to 256");
    hostile("bench", "--samples", "", bad_ints, ni, "from 1 to 1000");
    expect_usage_error("bench --only gemmm",
                       "all, peak, gemm, dense, sdpa, mha, encoder, train or sample");
    hostile("run mha --weights w.safetensors --x x.npy", "--heads", "", bad_ints, ni,
            "from 1 to 65536");
    hostile("run encoder --weights w.safetensors --x x.npy", "--heads", "", bad_ints, ni,
            "from 1 to 65536");
    hostile("run encoder --weights w.safetensors --x x.npy --heads 2", "--eps", "", bad_nums, nn,
            "[0, 1]");
    /* a missing value never swallows the next option */
    expect_usage_error("gradcheck --threads --list", "--threads");
    expect_usage_error("bench --threads", "--threads");
    expect_usage_error("run mha --heads --weights w.safetensors --x x.npy", "--heads");
    expect_usage_error("run encoder --weights w --x x --heads 2 --eps --causal", "--eps");
    /* repeated options are an error, not last-one-wins */
    expect_usage_error("bench --threads 1 --threads 2", "twice");
    expect_usage_error("run ffn --weights w --x x --x y", "twice");
    /* options of another module, and modules that do not exist */
    expect_usage_error("run mha --mask m.npy --weights w --heads 2 --x x", "sdpa");
    expect_usage_error("run ffn --heads 2 --weights w --x x", "mha, encoder");
    expect_usage_error("run sdpa --q q --k k --v v --attn-out a --out a", "same file");
    expect_usage_error("run nosuchmodule", "nosuchmodule");
    expect_usage_error("run", "sdpa, mha, ffn, encoder, decoder or transformer");
    expect_usage_error("run mha --weights w --heads 2", "--x");
    expect_usage_error("run mha --weights w --heads 2 --x x --q q", "not both");
    expect_usage_error("run sdpa --q q --k k --v v --dtype f16", "f32 or f64");
    expect_usage_error("run ffn --weights w --x x --activation tanh", "relu or gelu");
}
END_TEST

/* ---- info --------------------------------------------------------------------------------- */
/* An .npy file with the given descr and shape literal and @p nbytes of data. */
static void write_npy(const char *name, const char *descr, const char *shape, size_t nbytes)
{
    char p[512];
    unsigned char *data = malloc(nbytes + 1);
    ck_assert_ptr_nonnull(data);
    for (size_t i = 0; i < nbytes; i++)
        data[i] = (unsigned char)(i % 2); /* 0/1 bytes: valid for every dtype incl. bool */
    tu_write_npy_raw(tu_path(p, sizeof p, tmpdir, name), descr, shape, data, nbytes);
    free(data);
}

static cmd_result info_in_tmp(const char *files)
{
    char a[2048];
    snprintf(a, sizeof a, "info %s", files);
    return run_tgrad(a);
}

START_TEST(test_info_many)
{
    write_npy("a.npy", "<f4", "(2, 3)", 24);
    write_npy("b.npy", "|b1", "(5,)", 5);
    write_npy("c.npy", "<i8", "()", 8);
    write_npy("d.npy", "<f8", "(1, 2, 1)", 16);
    cmd_result r = info_in_tmp("a.npy b.npy c.npy d.npy");
    ck_assert_msg(r.exited && r.code == 0, "exit %d: %s", r.code, r.err);
    ck_assert_str_eq(r.out, "a.npy: .npy <f4 (2, 3), 6 elements\n"
                            "b.npy: .npy |b1 (5,), 5 elements\n"
                            "c.npy: .npy <i8 (), 1 elements\n"
                            "d.npy: .npy <f8 (1, 2, 1), 2 elements\n");
    ck_assert_str_eq(r.err, "");
    result_free(&r);

    /* bad files among good ones: each one line naming it, the others described, exit 1 */
    write_npy("short.npy", "<f4", "(2, 3)", 20);
    char p[512];
    snprintf(p, sizeof p, "%s/text.txt", tmpdir);
    FILE *f = fopen(p, "w");
    fputs("hello, this is not a tensor file at all\n", f);
    fclose(f);
    char fix[512];
    snprintf(fix, sizeof fix, "a.npy short.npy '%s/mha_self.safetensors' missing.npy text.txt "
             "b.npy", TG_FIXTURES);
    r = info_in_tmp(fix);
    ck_assert_msg(r.exited && r.code == 1, "exit %d", r.code);
    ck_assert_int_eq(count_lines(r.err), 3);
    ck_assert_msg(strstr(r.err, "tgrad info: 'short.npy': ") != NULL, "%s", r.err);
    ck_assert_msg(strstr(r.err, "tgrad info: 'missing.npy': No such file") != NULL, "%s", r.err);
    ck_assert_msg(strstr(r.err, "tgrad info: 'text.txt': not a safetensors") != NULL, "%s",
                  r.err);
    /* no internal function names, and the path once per line */
    ck_assert_msg(strstr(r.err, "tg_") == NULL, "%s", r.err);
    const char *l = strstr(r.err, "short.npy");
    ck_assert_ptr_null(strstr(l + 1, "short.npy"));
    ck_assert(strstr(r.out, "a.npy: .npy <f4 (2, 3)") && strstr(r.out, "b.npy: .npy |b1 (5,)"));
    ck_assert(strstr(r.out, "in_proj_weight") && strstr(r.out, "F64"));
    result_free(&r);
    expect_usage_error("info", "FILE");
}
END_TEST

START_TEST(test_info_special_files)
{
    char p[512];
    snprintf(p, sizeof p, "%s/fifo", tmpdir);
    ck_assert_int_eq(mkfifo(p, 0600), 0);
    /* a FIFO without a writer: refused at once (the old code blocked forever) */
    cmd_result r = info_in_tmp("fifo");
    ck_assert(r.exited && r.code == 1);
    ck_assert_str_eq(r.err, "tgrad info: 'fifo': is a FIFO, not a regular file\n");
    result_free(&r);
    /* /dev/zero: refused, not read without end */
    r = run_tgrad("info /dev/zero");
    ck_assert(r.exited && r.code == 1);
    ck_assert_str_eq(r.err, "tgrad info: '/dev/zero': is a character device, not a regular file\n");
    result_free(&r);
    r = info_in_tmp(".");
    ck_assert(r.exited && r.code == 1);
    ck_assert_str_eq(r.err, "tgrad info: '.': is a directory, not a regular file\n");
    result_free(&r);
    /* run refuses them too (export: tests/test_export.c) */
    r = info_in_tmp("fifo /dev/null");
    ck_assert_int_eq(count_lines(r.err), 2);
    result_free(&r);
    char a[2048];
    snprintf(a, sizeof a, "run ffn --weights '%s' --x /dev/zero", p);
    expect_usage_error(a, "--weights");
    snprintf(a, sizeof a, "run sdpa --q '%s' --k '%s' --v '%s'", p, p, p);
    expect_usage_error(a, "--q");
}
END_TEST

static Suite *cli_suite(void)
{
    Suite *s = suite_create("cli");
    TCase *tc = tcase_create("gradcheck");
    tcase_add_checked_fixture(tc, tmp_setup, tmp_teardown);
    tcase_set_timeout(tc, 240);
    tcase_add_test(tc, test_gradcheck_all);
    tcase_add_test(tc, test_gradcheck_order2);
    tcase_add_test(tc, test_gradcheck_one_op);
    tcase_add_test(tc, test_gradcheck_f32);
    tcase_add_test(tc, test_gradcheck_threads);
    tcase_add_test(tc, test_list);
    tcase_add_test(tc, test_help);
    tcase_add_test(tc, test_usage_errors);
    suite_add_tcase(s, tc);
    tc = tcase_create("top_level");
    tcase_add_checked_fixture(tc, tmp_setup, tmp_teardown);
    tcase_set_timeout(tc, 240);
    tcase_add_test(tc, test_version);
    tcase_add_test(tc, test_top_level);
    tcase_add_test(tc, test_bench_tiny);
    tcase_add_test(tc, test_bench_bf16);
    tcase_add_test(tc, test_bench_pct_cell);
    tcase_add_test(tc, test_output_write_errors);
    tcase_add_test(tc, test_hostile_numbers);
    suite_add_tcase(s, tc);
    tc = tcase_create("info");
    tcase_add_checked_fixture(tc, tmp_setup, tmp_teardown);
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_info_many);
    tcase_add_test(tc, test_info_special_files);
    suite_add_tcase(s, tc);
    return s;
}

int main(void) { return tu_run(cli_suite()); }
