/*
 * test_cli.c - the `tgrad` program's gradcheck command, run as a separate process
 * (TG_TGRAD_EXE is set by tests/meson.build): the table it prints, --op / --dtype / --list /
 * --help, and that every usage error exits non-zero with one line on stderr.
 */
#define _POSIX_C_SOURCE 200809L
#include "opcases.h"
#include "testutil.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#ifndef TG_TGRAD_EXE
#error "TG_TGRAD_EXE must name the built tgrad program"
#endif

typedef struct {
    bool exited;  /* false if killed by a signal */
    int code;     /* exit status */
    char *out;    /* stdout */
    char *err;    /* stderr */
} cmd_result;

static char *slurp(FILE *f)
{
    size_t cap = 4096, n = 0;
    char *buf = malloc(cap);
    ck_assert_ptr_nonnull(buf);
    size_t k;
    while ((k = fread(buf + n, 1, cap - n - 1, f)) > 0) {
        n += k;
        if (cap - n - 1 == 0) {
            cap *= 2;
            buf = realloc(buf, cap);
            ck_assert_ptr_nonnull(buf);
        }
    }
    buf[n] = '\0';
    return buf;
}

/* Run `tgrad ARGS`, capturing stdout and stderr separately. */
static cmd_result run_tgrad(const char *args)
{
    cmd_result r;
    char errpath[] = "/tmp/tgrad_cli_err_XXXXXX";
    int fd = mkstemp(errpath);
    ck_assert_int_ge(fd, 0);
    close(fd);
    char cmd[2048];
    snprintf(cmd, sizeof cmd, "'%s' %s 2>'%s'", TG_TGRAD_EXE, args, errpath);
    FILE *p = popen(cmd, "r");
    ck_assert_ptr_nonnull(p);
    r.out = slurp(p);
    int st = pclose(p);
    r.exited = WIFEXITED(st);
    r.code = r.exited ? WEXITSTATUS(st) : -1;
    FILE *e = fopen(errpath, "r");
    ck_assert_ptr_nonnull(e);
    r.err = slurp(e);
    fclose(e);
    unlink(errpath);
    return r;
}

static void result_free(cmd_result *r)
{
    free(r->out);
    free(r->err);
}

static int count_lines(const char *s)
{
    int n = 0;
    for (; *s; s++)
        n += *s == '\n';
    return n;
}

/* A usage error: a normal non-zero exit, exactly one line on stderr, nothing on stdout. */
static void expect_usage_error(const char *args, const char *needle)
{
    cmd_result r = run_tgrad(args);
    ck_assert_msg(r.exited, "tgrad %s was killed by a signal", args);
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
    /* a PASS row for every registered op */
    for (int k = 0; k < tg_op_count(); k++) {
        bool seen = false;
        for (int i = 0; i < n && !seen; i++)
            seen = strcmp(rows[i].op, tg_op_name(k)) == 0 && strcmp(rows[i].result, "PASS") == 0;
        ck_assert_msg(seen, "no PASS row for op '%s'", tg_op_name(k));
    }
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

static Suite *cli_suite(void)
{
    Suite *s = suite_create("cli");
    TCase *tc = tcase_create("gradcheck");
    tcase_set_timeout(tc, 240);
    tcase_add_test(tc, test_gradcheck_all);
    tcase_add_test(tc, test_gradcheck_one_op);
    tcase_add_test(tc, test_gradcheck_f32);
    tcase_add_test(tc, test_gradcheck_threads);
    tcase_add_test(tc, test_list);
    tcase_add_test(tc, test_help);
    tcase_add_test(tc, test_usage_errors);
    suite_add_tcase(s, tc);
    return s;
}

int main(void) { return tu_run(cli_suite()); }
