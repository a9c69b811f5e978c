/*
 * fuzz_cli.c - libFuzzer harness for the option parsers of the `tgrad` program: the top level
 * and every command's parse-only entry point (tools/cli/cli.h, tools/cli/train_args.h), and cli_set()
 * (tools/cli/cliopt.h) on every option of every table.
 *
 * Input: the command line after "tgrad", as strings separated by NUL bytes ("train\0--steps\0
 * 5\0"; a final NUL is optional, an empty string between two NULs is an empty argument). Per
 * input:
 * 1. top_parse() on {"tgrad", strings...} with tgrad.c's command names, then, as tgrad.c's
 *    main() does, the chosen command's parser on the command's argv (for `help COMMAND`, that
 *    command's parser on {COMMAND, "--help"}, which must answer CLI_HELP). Each must return
 *    CLI_OK, CLI_HELP or CLI_ERROR; an error must be one clean line (fz_check_line: at most
 *    FZ_LINE_MAX bytes, no control character, so a value is never echoed raw or unbounded); an
 *    accepted command line must satisfy its table: every option given holds a value within its
 *    bounds, and the command's own rules (--heads divides --d-model after train_resolve(),
 *    --out is not --checkpoint, every --op exists, ...). For `train`, train_resolve() and the
 *    memory estimate (model_memory_check() against 8 GB, as a fresh run does) follow.
 * 2. cli_set() of every option of every table (tools_access.h: the commands', and export's
 *    checkpoint-field table) with one of the input's strings as the value (round robin): it
 *    accepts exactly what the option's kind and bounds allow (checked independently of
 *    cliopt.c's own parsing where that is simple), stores a value within the bounds, and
 *    otherwise says so in one clean line naming the source. A CLI_LIST option is refused.
 * 3. Once per process: every table's --help is printable text.
 * Every parser's *_free() runs on every path; LeakSanitizer (libFuzzer) and valgrind (the
 * replay test under --setup=valgrind) find what was not released.
 */
#define _GNU_SOURCE /* open_memstream */
#include "ckpt_config.h"
#include "cli.h"
#include "fuzz_util.h"
#include "opcases.h"
#include "tools_access.h"
#include "train_args.h"

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* tools/cli/tgrad.c's command table, in its order (top_parse answers an index into it). */
static const char *const commands[] = {"train",   "sample",  "translate", "export",
                                       "average", "info",    "bench",     "gradcheck",
                                       "run",     "version", "help"};
enum { N_COMMANDS = sizeof commands / sizeof commands[0] };

#define ERR_SIZE 4096 /* larger than any clean line (FZ_LINE_MAX): truncation would hide it */

static FILE *devnull(void)
{
    static FILE *f;
    if (!f)
        f = fopen("/dev/null", "w");
    if (!f)
        fz_die(NULL, "cannot open /dev/null");
    return f;
}

/* rc must be a documented outcome; a CLI_ERROR must carry one clean line. */
static void check_rc(const char *fn, int rc, const char *err)
{
    if (rc != CLI_OK && rc != CLI_HELP && rc != CLI_ERROR)
        fz_die(NULL, "%s returned %d, not CLI_OK, CLI_HELP or CLI_ERROR", fn, rc);
    if (rc == CLI_ERROR)
        fz_check_line(fn, err);
}

/* ---- the value cli_set stored, against the option's kind and bounds ------------------------ */

/* Independent check of a clean base-10 integer: optional '-', digits, no overflow. */
static bool clean_int(const char *s, int64_t *out)
{
    const char *p = s;
    bool neg = *p == '-';
    if (neg)
        p++;
    if (!*p)
        return false;
    uint64_t v = 0, lim = neg ? (uint64_t)INT64_MAX + 1 : (uint64_t)INT64_MAX;
    for (; *p; p++) {
        if (*p < '0' || *p > '9')
            return false;
        unsigned d = (unsigned)(*p - '0');
        if (v > (lim - d) / 10)
            return false;
        v = 10 * v + d;
    }
    *out = neg ? (v == (uint64_t)INT64_MAX + 1 ? INT64_MIN : -(int64_t)v) : (int64_t)v;
    return true;
}

/* Independent check of a clean decimal: -?(D+(.D*)?|.D+)([eE][+-]?D+)? with a finite value
 * (what cli_parse_f64 documents: strtod's decimal form without space, '+', inf, nan, hex). */
static bool clean_decimal(const char *s, double *out)
{
    const char *p = s;
    if (*p == '-')
        p++;
    size_t digits = 0;
    while (*p >= '0' && *p <= '9')
        p++, digits++;
    if (*p == '.')
        for (p++; *p >= '0' && *p <= '9';)
            p++, digits++;
    if (!digits)
        return false;
    if (*p == 'e' || *p == 'E') {
        p++;
        if (*p == '+' || *p == '-')
            p++;
        if (*p < '0' || *p > '9')
            return false;
        while (*p >= '0' && *p <= '9')
            p++;
    }
    if (*p)
        return false;
    *out = strtod(s, NULL);
    return isfinite(*out);
}

static bool int_bounded(const cli_option *o) { return !(o->imin == 0 && o->imax == 0); }

static bool num_bounded(const cli_option *o)
{
    return !(o->fmin == 0 && o->fmax == 0 && !(o->flags & (CLI_FMIN_OPEN | CLI_FMAX_OPEN)));
}

static bool num_in_range(const cli_option *o, double v)
{
    if (!isfinite(v))
        return false;
    if (!num_bounded(o))
        return true;
    bool lo = (o->flags & CLI_FMIN_OPEN) ? v > o->fmin : v >= o->fmin;
    bool hi = (o->flags & CLI_FMAX_OPEN) ? v < o->fmax : v <= o->fmax;
    return lo && hi;
}

static int n_choices(const char *choices)
{
    int n = 1;
    for (const char *p = choices; *p; p++)
        n += *p == '|';
    return n;
}

/* Is @p v exactly one of "a|b|c"? */
static bool is_choice(const char *choices, const char *v)
{
    size_t vl = strlen(v);
    for (const char *p = choices;;) {
        size_t l = strcspn(p, "|");
        if (l == vl && !strncmp(p, v, l))
            return true;
        if (!p[l])
            return false;
        p += l + 1;
    }
}

/* The value option @p o holds in @p args is one the table allows. */
static void check_stored(const char *table, const cli_option *o, const void *args)
{
    const char *p = (const char *)args + o->offset;
    switch (o->kind) {
    case CLI_FLAG: {
        unsigned char b;
        memcpy(&b, p, 1);
        if (b > 1)
            fz_die(NULL, "%s --%s: flag holds %u", table, o->name, b);
        break;
    }
    case CLI_INT: {
        int64_t v;
        memcpy(&v, p, sizeof v);
        if (int_bounded(o) && (v < o->imin || v > o->imax))
            fz_die(NULL, "%s --%s: %" PRId64 " outside [%" PRId64 ", %" PRId64 "]", table,
                   o->name, v, o->imin, o->imax);
        break;
    }
    case CLI_NUM: {
        double v;
        memcpy(&v, p, sizeof v);
        if (!num_in_range(o, v))
            fz_die(NULL, "%s --%s: %g outside its range", table, o->name, v);
        break;
    }
    case CLI_CHOICE: {
        int v;
        memcpy(&v, p, sizeof v);
        if (v < 0 || v >= n_choices(o->choices))
            fz_die(NULL, "%s --%s: choice index %d of '%s'", table, o->name, v, o->choices);
        break;
    }
    case CLI_STR:
    case CLI_PATH: {
        const char *s;
        memcpy(&s, p, sizeof s);
        if (!s || !*s)
            fz_die(NULL, "%s --%s: empty value accepted", table, o->name);
        break;
    }
    case CLI_LIST: {
        cli_list l;
        memcpy(&l, p, sizeof l);
        if (l.n < 1 || !l.v)
            fz_die(NULL, "%s --%s: list given but empty", table, o->name);
        for (int i = 0; i < l.n; i++)
            if (!l.v[i] || !*l.v[i])
                fz_die(NULL, "%s --%s: empty list element accepted", table, o->name);
        break;
    }
    }
}

/* Every option the parse marked as given holds an allowed value. */
static void check_given(const cli_command *cmd, const cli_result *r, const void *args)
{
    for (int i = 0; cmd->opts[i].name; i++)
        if (r->given[i])
            check_stored(cmd->name, &cmd->opts[i], args);
}

/* ---- step 2: cli_set on every option of every table ----------------------------------------- */
static void set_one(const cli_command *cmd, const cli_option *o, size_t args_size,
                    const char *value)
{
    _Alignas(max_align_t) unsigned char args[1024];
    if (args_size > sizeof args || o->offset >= args_size)
        fz_die(NULL, "%s --%s: offset %zu in an argument struct of %zu bytes", cmd->name,
               o->name, o->offset, args_size);
    memset(args, 0, sizeof args);
    char err[ERR_SIZE], src[160];
    snprintf(src, sizeof src, "--%s", o->name);
    bool ok = cli_set(cmd, o, value, args, src, err, sizeof err);
    /* what the option accepts, decided here without cliopt.c's helpers where simple */
    bool want;
    int64_t iv = 0;
    double dv;
    switch (o->kind) {
    case CLI_FLAG:
        want = !strcmp(value, "0") || !strcmp(value, "1") || !strcmp(value, "true") ||
               !strcmp(value, "false");
        break;
    case CLI_INT:
        want = clean_int(value, &iv) && (!int_bounded(o) || (iv >= o->imin && iv <= o->imax));
        break;
    case CLI_NUM:
        /* exactly the clean decimals (clean_decimal) within the bounds */
        want = cli_parse_f64(value, &dv) && num_in_range(o, dv);
        if (want != (clean_decimal(value, &dv) && num_in_range(o, dv)))
            fz_die(NULL, "cli_parse_f64('%.80s') %s a number in range", value,
                   want ? "accepts" : "refuses");
        break;
    case CLI_STR:
    case CLI_PATH:
        want = *value != 0;
        break;
    case CLI_CHOICE:
        want = is_choice(o->choices, value);
        break;
    default: /* CLI_LIST cannot be set from one value */
        want = false;
        break;
    }
    if (ok != want)
        fz_die(NULL, "cli_set(%s --%s, '%.80s') %s, expected %s", cmd->name ? cmd->name : "",
               o->name, value, ok ? "accepts" : "refuses", want ? "acceptance" : "refusal");
    if (ok) {
        check_stored(cmd->name, o, args);
        const char *p = (const char *)args + o->offset;
        if (o->kind == CLI_INT) {
            int64_t v;
            memcpy(&v, p, sizeof v);
            if (v != iv)
                fz_die(NULL, "cli_set(--%s, '%.80s') stored %" PRId64, o->name, value, v);
        } else if (o->kind == CLI_STR || o->kind == CLI_PATH) {
            const char *s;
            memcpy(&s, p, sizeof s);
            if (s != value)
                fz_die(NULL, "cli_set(--%s) did not store the caller's string", o->name);
        }
    } else {
        fz_check_line("cli_set", err);
        if (strncmp(err, src, strlen(src)) != 0)
            fz_die(NULL, "cli_set(--%s): the message does not start with its source: %.200s",
                   o->name, err);
    }
}

static void set_all(char **tok, int ntok)
{
    static const char *const extra[] = {"", "0", "-1", "1e309", "nan", "9223372036854775808"};
    int k = 0;
    for (int t = 0; t < fz_n_tables(); t++) {
        size_t size;
        const cli_command *cmd = fz_table(t, &size);
        for (const cli_option *o = cmd->opts; o->name; o++, k++) {
            const char *v = ntok > 0 ? tok[k % ntok] : extra[k % 6];
            set_one(cmd, o, size, v);
        }
    }
}

static const cli_command *table_named(const char *name)
{
    size_t size;
    for (int t = 0; t < fz_n_tables(); t++)
        if (fz_table(t, &size)->name && !strcmp(fz_table(t, &size)->name, name))
            return fz_table(t, &size);
    fz_die(NULL, "no table named '%s'", name);
}

/* ---- step 1: the command line ---------------------------------------------------------------- */

/* A private copy of argv for one parser (getopt may permute what it is given). */
static char **argv_copy(char **argv, int argc)
{
    char **c = malloc(sizeof *c * (size_t)(argc + 1));
    if (!c)
        fz_die(NULL, "out of memory in the harness");
    memcpy(c, argv, sizeof *c * (size_t)argc);
    c[argc] = NULL;
    return c;
}

static void do_train(int argc, char **argv)
{
    train_args a;
    cli_result r;
    char err[ERR_SIZE];
    char **v = argv_copy(argv, argc);
    int rc = train_parse(argc, v, &a, &r, err, sizeof err);
    check_rc("train_parse", rc, err);
    if (rc == CLI_OK) {
        const cli_command *cmd = train_command();
        check_given(cmd, &r, &a);
        if (a.text.n > 0 && cli_given(cmd, &r, "task"))
            fz_die(NULL, "train_parse accepted --text with --task");
        bool text = a.text.n > 0;
        const char *resume = a.resume, *ck = a.checkpoint;
        if (!train_resolve(&a, text, err, sizeof err)) {
            fz_check_line("train_resolve", err);
        } else {
            if (a.d_model < 1 || a.heads < 1 || a.heads > a.d_model || a.d_model % a.heads ||
                a.d_ff < 1 || a.seq_len < 2 || a.steps < 1 || a.eval_every < 1 ||
                !(a.min_lr >= 0 && a.min_lr <= 10) || !(a.lr >= 0 && a.lr <= 10))
                fz_die(NULL, "train_resolve left d_model %" PRId64 " heads %" PRId64 " d_ff %"
                       PRId64 " seq_len %" PRId64 " steps %" PRId64 " eval_every %" PRId64
                       " min_lr %g lr %g", a.d_model, a.heads, a.d_ff, a.seq_len, a.steps,
                       a.eval_every, a.min_lr, a.lr);
            if (resume && a.checkpoint != (ck ? ck : resume))
                fz_die(NULL, "train_resolve: a resumed run does not save to %s",
                       ck ? "--checkpoint" : "the resumed file");
            check_given(cmd, &r, &a);
            /* plan_fresh: the memory estimate of the configured run */
            tg_transformer_config mc;
            train_model_config(&a, text, text ? 256 : 10, &mc);
            double est = model_memory_estimate(&mc, train_dtype(&a), a.batch, train_n_state(&a),
                                               true);
            if (!(est > 0) || !isfinite(est))
                fz_die(NULL, "model_memory_estimate gave %g", est);
            if (!model_memory_check(&mc, train_dtype(&a), a.batch, train_n_state(&a), true,
                                    8e9, err, sizeof err))
                fz_check_line("model_memory_check", err);
        }
    }
    train_free(&a, &r);
    free(v);
}

static void do_sample(int argc, char **argv)
{
    sample_args a;
    cli_result r;
    char err[ERR_SIZE];
    char **v = argv_copy(argv, argc);
    int rc = sample_parse(argc, v, &a, &r, err, sizeof err);
    check_rc("sample_parse", rc, err);
    if (rc == CLI_OK) {
        check_given(sample_command(), &r, &a);
        if (!a.checkpoint || !*a.checkpoint || !a.prompt || a.tokens < 0 ||
            a.tokens > SAMPLE_MAX_TOKENS || a.top_k < 0 || a.top_k > SAMPLE_MAX_TOP_K ||
            !(a.temperature >= 0 && a.temperature <= 100))
            fz_die(NULL, "sample_parse accepted an invalid combination");
    }
    sample_free(&a, &r);
    free(v);
}

static void do_translate(int argc, char **argv)
{
    translate_args a;
    cli_result r;
    char err[ERR_SIZE];
    char **v = argv_copy(argv, argc);
    int rc = translate_parse(argc, v, &a, &r, err, sizeof err);
    check_rc("translate_parse", rc, err);
    if (rc == CLI_OK) {
        check_given(translate_command(), &r, &a);
        if (!a.checkpoint || !*a.checkpoint || a.beam < 1 || a.beam > TRANSLATE_MAX_BEAM ||
            a.batch < 1 || a.batch > TRANSLATE_MAX_BATCH || (a.eval && a.input) ||
            (!a.eval && (a.out || a.force)) || !(a.lenpen >= 0 && a.lenpen <= 10))
            fz_die(NULL, "translate_parse accepted an invalid combination");
    }
    translate_free(&a, &r);
    free(v);
}

static void do_run(int argc, char **argv)
{
    run_args a;
    cli_result r;
    char err[ERR_SIZE];
    char **v = argv_copy(argv, argc);
    int rc = run_parse(argc, v, &a, &r, err, sizeof err);
    check_rc("run_parse", rc, err);
    if (rc == CLI_HELP)
        run_help(&a, devnull());
    if (rc == CLI_OK) {
        if (a.module < 0 || a.module >= RUN_N_MODULES)
            fz_die(NULL, "run_parse: module %d", a.module);
        static const char *const mods[RUN_N_MODULES] = {"run sdpa", "run mha", "run ffn",
                                                        "run encoder"};
        check_given(table_named(mods[a.module]), &r, &a);
        if (a.module == RUN_MHA && !a.x && !(a.q && a.k && a.v))
            fz_die(NULL, "run_parse: mha without inputs");
        if ((a.grad_out == NULL) != (a.grads == NULL))
            fz_die(NULL, "run_parse: --grad-out without --grads or the reverse");
        if (a.has_eps && !(a.eps >= 0 && a.eps <= 1))
            fz_die(NULL, "run_parse: eps %g", a.eps);
    }
    run_free(&a, &r);
    free(v);
}

static void do_info(int argc, char **argv)
{
    info_args a;
    cli_result r;
    char err[ERR_SIZE];
    char **v = argv_copy(argv, argc);
    int rc = info_parse(argc, v, &a, &r, err, sizeof err);
    check_rc("info_parse", rc, err);
    if (rc == CLI_OK && r.n_positional < 1)
        fz_die(NULL, "info_parse accepted no file");
    for (int i = 0; rc == CLI_OK && i < r.n_positional; i++)
        if (!r.positional[i])
            fz_die(NULL, "info_parse: NULL file %d", i);
    info_free(&a, &r);
    free(v);
}

static void do_gradcheck(int argc, char **argv)
{
    gradcheck_args a;
    cli_result r;
    char err[ERR_SIZE];
    char **v = argv_copy(argv, argc);
    int rc = gradcheck_parse(argc, v, &a, &r, err, sizeof err);
    check_rc("gradcheck_parse", rc, err);
    if (rc == CLI_OK) {
        check_given(table_named("gradcheck"), &r, &a);
        for (int k = 0; k < a.ops.n; k++)
            if (tg_opcase_count(a.ops.v[k]) == 0)
                fz_die(NULL, "gradcheck_parse accepted --op '%.80s'", a.ops.v[k]);
    }
    gradcheck_free(&a, &r);
    free(v);
}

static void do_bench(int argc, char **argv)
{
    bench_args a;
    cli_result r;
    char err[ERR_SIZE];
    char **v = argv_copy(argv, argc);
    int rc = bench_parse(argc, v, &a, &r, err, sizeof err);
    check_rc("bench_parse", rc, err);
    if (rc == CLI_OK && (a.threads < 0 || a.threads > CLI_MAX_THREADS))
        fz_die(NULL, "bench_parse: threads %" PRId64, a.threads);
    bench_free(&a, &r);
    free(v);
}

static void do_export(int argc, char **argv)
{
    export_args a;
    cli_result r;
    char err[ERR_SIZE];
    char **v = argv_copy(argv, argc);
    int rc = export_parse(argc, v, &a, &r, err, sizeof err);
    check_rc("export_parse", rc, err);
    if (rc == CLI_OK && (!a.checkpoint || !a.out || !strcmp(a.checkpoint, a.out)))
        fz_die(NULL, "export_parse accepted --checkpoint and --out naming the same path");
    export_free(&a, &r);
    free(v);
}

static void do_average(int argc, char **argv)
{
    average_args a;
    cli_result r;
    char err[ERR_SIZE];
    char **v = argv_copy(argv, argc);
    int rc = average_parse(argc, v, &a, &r, err, sizeof err);
    check_rc("average_parse", rc, err);
    if (rc == CLI_OK && (!a.out || r.n_positional < 1 || r.n_positional > CKPT_AVERAGE_MAX))
        fz_die(NULL, "average_parse accepted %d checkpoints (1 to %d) or no --out", r.n_positional,
               CKPT_AVERAGE_MAX);
    average_free(&a, &r);
    free(v);
}

/* Run command @p c's parser on @p argv (argv[0] is the command's name). */
static void dispatch(int c, int argc, char **argv)
{
    const char *name = commands[c];
    if (!strcmp(name, "train"))
        do_train(argc, argv);
    else if (!strcmp(name, "sample"))
        do_sample(argc, argv);
    else if (!strcmp(name, "translate"))
        do_translate(argc, argv);
    else if (!strcmp(name, "export"))
        do_export(argc, argv);
    else if (!strcmp(name, "average"))
        do_average(argc, argv);
    else if (!strcmp(name, "info"))
        do_info(argc, argv);
    else if (!strcmp(name, "bench"))
        do_bench(argc, argv);
    else if (!strcmp(name, "gradcheck"))
        do_gradcheck(argc, argv);
    else if (!strcmp(name, "run"))
        do_run(argc, argv);
    /* version prints and takes no options; help is handled by the caller */
}

static void do_top(int argc, char **argv)
{
    top_args a;
    cli_result r;
    char err[ERR_SIZE];
    char **v = argv_copy(argv, argc);
    int rc = top_parse(argc, v, commands, N_COMMANDS, &a, &r, err, sizeof err);
    check_rc("top_parse", rc, err);
    if (rc == CLI_OK && !a.version) {
        if (a.command < 0 || a.command >= N_COMMANDS || a.cmd_argc < 1 || !a.cmd_argv ||
            a.cmd_argv < v || a.cmd_argv + a.cmd_argc != v + argc ||
            strcmp(a.cmd_argv[0], commands[a.command]) != 0)
            fz_die(NULL, "top_parse: command %d with %d arguments", a.command, a.cmd_argc);
        if (!strcmp(commands[a.command], "help")) {
            /* tgrad help COMMAND: the command's parser on {COMMAND, "--help"} */
            for (int i = 0; a.cmd_argc == 2 && i < N_COMMANDS; i++)
                if (strcmp(commands[i], "help") && strcmp(commands[i], "version") &&
                    !strcmp(a.cmd_argv[1], commands[i])) {
                    char help[] = "--help";
                    char *hv[3] = {a.cmd_argv[1], help, NULL};
                    dispatch(i, 2, hv);
                }
        } else {
            dispatch(a.command, a.cmd_argc, a.cmd_argv);
        }
    }
    top_free(&a, &r);
    free(v);
}

/* ---- step 3: help text ------------------------------------------------------------------------ */
static void check_help_once(void)
{
    static bool done;
    if (done)
        return;
    done = true;
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    if (!f)
        fz_die(NULL, "open_memstream: %s", strerror(errno));
    for (int t = 0; t < fz_n_tables(); t++) {
        size_t size;
        const cli_command *cmd = fz_table(t, &size);
        if (cmd->usage) /* export's checkpoint-field table is not a command */
            cli_help(cmd, f);
    }
    run_help(NULL, f);
    fclose(f);
    for (size_t i = 0; i < len; i++) {
        unsigned char c = (unsigned char)buf[i];
        if ((c < 0x20 && c != '\n') || c == 0x7f)
            fz_die(NULL, "--help output holds control character 0x%02x at byte %zu", c, i);
    }
    free(buf);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    check_help_once();
    /* split at NUL bytes into argv[1..] (argv[0] = "tgrad") */
    char *buf = malloc(size + 1);
    int cap = 2;
    for (size_t i = 0; i < size; i++)
        cap += data[i] == 0;
    char **argv = malloc(sizeof *argv * (size_t)(cap + 1));
    if (!buf || !argv)
        fz_die(NULL, "out of memory in the harness");
    memcpy(buf, data, size);
    buf[size] = 0;
    static char prog[] = "tgrad";
    int argc = 0;
    argv[argc++] = prog;
    for (size_t i = 0; i < size;) {
        argv[argc++] = buf + i;
        i += strlen(buf + i) + 1;
    }
    argv[argc] = NULL;
    do_top(argc, argv);
    set_all(argv + 1, argc - 1);
    free(argv);
    free(buf);
    return 0;
}
