/*
 * cliopt.c - option tables parsed with getopt_long; see cliopt.h.
 */
#define _GNU_SOURCE /* getopt_long */
#include "cliopt.h"

#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ---- numbers ----------------------------------------------------------------------------- */
bool cli_parse_i64(const char *s, int64_t *out)
{
    if (!s || !*s)
        return false;
    /* strtoll skips leading space and accepts '+': neither is a clean integer */
    if (!(*s == '-' || (*s >= '0' && *s <= '9')))
        return false;
    char *end;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (*end || errno || end == s)
        return false;
    *out = (int64_t)v;
    return true;
}

bool cli_parse_f64(const char *s, double *out)
{
    if (!s || !*s)
        return false;
    if (!(*s == '-' || *s == '.' || (*s >= '0' && *s <= '9')))
        return false; /* no leading space, '+', "inf", "nan" */
    if (strpbrk(s, "xXpPnNiI"))
        return false; /* no hex floats ("0x10"), "-inf", "-nan" */
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (*end || end == s || !isfinite(v))
        return false;
    /* ERANGE on underflow gives a tiny or zero value: accept it; overflow gave inf above */
    *out = v;
    return true;
}

const char *cli_fmt_double(double v, char *buf, size_t n)
{
    if (!n)
        return buf;
    if (!isfinite(v)) {
        snprintf(buf, n, "%g", v);
        return buf;
    }
    char t[40];
    for (int p = 1; p <= 17; p++) { /* %.17g always round-trips a double */
        snprintf(t, sizeof t, "%.*g", p, v);
        if (strtod(t, NULL) == v)
            break;
    }
    snprintf(buf, n, "%s", t);
    return buf;
}

const char *cli_show(const char *s, char *buf, size_t n)
{
    return cli_show_max(s, 60, buf, n);
}

const char *cli_show_max(const char *s, size_t keep, char *buf, size_t n)
{
    if (!n)
        return buf;
    size_t w = 0, max = n - 1;
    size_t len = s ? strlen(s) : 0, cut = len;
    if (len > keep + 1) { /* cut at byte keep, back to a UTF-8 character boundary */
        cut = keep;
        while (cut > 0 && ((unsigned char)s[cut] & 0xc0) == 0x80)
            cut--;
    }
    for (size_t i = 0; i < cut && w < max; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c == 0xc2 && (unsigned char)s[i + 1] >= 0x80 && (unsigned char)s[i + 1] <= 0x9f) {
            buf[w++] = '?'; /* a C1 control as UTF-8 (U+0080..U+009F, e.g. CSI) */
            i++;
            continue;
        }
        buf[w++] = (c < 0x20 || c == 0x7f) ? '?' : (char)c;
    }
    for (int k = 0; cut < len && k < 3 && w < max; k++)
        buf[w++] = '.';
    buf[w] = 0;
    return buf;
}

/* ---- table helpers ----------------------------------------------------------------------- */
static int n_opts(const cli_command *cmd)
{
    int n = 0;
    while (cmd->opts[n].name)
        n++;
    return n;
}

/* "tgrad train", or "tgrad" for the top level (name NULL or ""). */
static const char *prog(const cli_command *cmd, char *buf, size_t n)
{
    if (!cmd->name || !*cmd->name)
        snprintf(buf, n, "tgrad");
    else
        snprintf(buf, n, "tgrad %s", cmd->name);
    return buf;
}

const cli_option *cli_find(const cli_command *cmd, const char *name)
{
    for (const cli_option *o = cmd->opts; o->name; o++)
        if (!strcmp(o->name, name))
            return o;
    return NULL;
}

int cli_index(const cli_command *cmd, const cli_option *o)
{
    return (int)(o - cmd->opts);
}

bool cli_given(const cli_command *cmd, const cli_result *res, const char *name)
{
    const cli_option *o = cli_find(cmd, name);
    return o && res->given[cli_index(cmd, o)];
}

static bool ints_unbounded(const cli_option *o)
{
    return o->imin == 0 && o->imax == 0;
}

static bool nums_unbounded(const cli_option *o)
{
    return o->fmin == 0 && o->fmax == 0 && !(o->flags & (CLI_FMIN_OPEN | CLI_FMAX_OPEN));
}

/* "[0, 1)" style range of a CLI_NUM option. */
static void num_range(const cli_option *o, char *buf, size_t n)
{
    snprintf(buf, n, "%c%.6g, %.6g%c", (o->flags & CLI_FMIN_OPEN) ? '(' : '[', o->fmin,
             o->fmax, (o->flags & CLI_FMAX_OPEN) ? ')' : ']');
}

/* Is @p v (length len) one of the '|'-separated choices? Returns its index or -1. */
static int choice_index(const char *choices, const char *v)
{
    size_t vl = strlen(v);
    int i = 0;
    for (const char *p = choices; *p; i++) {
        const char *bar = strchr(p, '|');
        size_t l = bar ? (size_t)(bar - p) : strlen(p);
        if (l == vl && !strncmp(p, v, l))
            return i;
        if (!bar)
            break;
        p = bar + 1;
    }
    return -1;
}

const char *cli_choice_name(const cli_option *o, int i, char *buf, size_t n)
{
    const char *p = o && o->choices && i >= 0 ? o->choices : NULL;
    for (int k = 0; k < i && p; k++) {
        p = strchr(p, '|');
        if (p)
            p++;
    }
    if (!p)
        p = "?";
    snprintf(buf, n, "%.*s", (int)strcspn(p, "|"), p);
    return buf;
}

/* "relu or gelu", "adamw, adam or sgd" */
static void choice_list(const char *choices, char *buf, size_t n)
{
    size_t w = 0;
    buf[0] = 0;
    const char *p = choices;
    while (*p && w + 1 < n) {
        const char *bar = strchr(p, '|');
        size_t l = bar ? (size_t)(bar - p) : strlen(p);
        const char *sep = "";
        if (p != choices)
            sep = (bar ? ", " : " or ");
        int k = snprintf(buf + w, n - w, "%s%.*s", sep, (int)l, p);
        if (k < 0)
            break;
        w += (size_t)k;
        if (w >= n)
            break;
        if (!bar)
            break;
        p = bar + 1;
    }
}

/* A CLI_INT option's value, within its bounds. */
static bool set_int(const cli_option *o, const char *value, int64_t *out, const char *source,
                    char *err, size_t err_size)
{
    char shown[80];
    const char *vs = cli_show(value, shown, sizeof shown);
    int64_t v;
    bool ok = cli_parse_i64(value, &v);
    if (ok && !ints_unbounded(o) && (v < o->imin || v > o->imax))
        ok = false;
    if (!ok) {
        if (ints_unbounded(o))
            snprintf(err, err_size, "%s '%s': expected an integer", source, vs);
        else
            snprintf(err, err_size, "%s '%s': expected an integer from %" PRId64
                     " to %" PRId64, source, vs, o->imin, o->imax);
        return false;
    }
    *out = v;
    return true;
}

/* A CLI_NUM option's value: finite, within its (open or closed) bounds. */
static bool set_num(const cli_option *o, const char *value, double *out, const char *source,
                    char *err, size_t err_size)
{
    char range[128], shown[80];
    const char *vs = cli_show(value, shown, sizeof shown);
    double v;
    bool ok = cli_parse_f64(value, &v);
    if (ok && !nums_unbounded(o)) {
        if ((o->flags & CLI_FMIN_OPEN) ? !(v > o->fmin) : !(v >= o->fmin))
            ok = false;
        if ((o->flags & CLI_FMAX_OPEN) ? !(v < o->fmax) : !(v <= o->fmax))
            ok = false;
    }
    if (!ok) {
        if (nums_unbounded(o)) {
            snprintf(err, err_size, "%s '%s': expected a finite number", source, vs);
        } else {
            num_range(o, range, sizeof range);
            snprintf(err, err_size, "%s '%s': expected a number in %s", source, vs, range);
        }
        return false;
    }
    *out = v;
    return true;
}

bool cli_set(const cli_command *cmd, const cli_option *o, const char *value, void *args,
             const char *source, char *err, size_t err_size)
{
    (void)cmd;
    char *base = (char *)args;
    char range[128], shown[80];
    const char *vs = cli_show(value, shown, sizeof shown); /* one line, bounded, in messages */
    switch (o->kind) {
    case CLI_FLAG: {
        bool b;
        if (!strcmp(value, "1") || !strcmp(value, "true"))
            b = true;
        else if (!strcmp(value, "0") || !strcmp(value, "false"))
            b = false;
        else {
            snprintf(err, err_size, "%s '%s': expected 0 or 1", source, vs);
            return false;
        }
        *(bool *)(base + o->offset) = b;
        return true;
    }
    case CLI_INT:
        return set_int(o, value, (int64_t *)(base + o->offset), source, err, err_size);
    case CLI_NUM:
        return set_num(o, value, (double *)(base + o->offset), source, err, err_size);
    case CLI_STR:
    case CLI_PATH:
        if (!*value) {
            snprintf(err, err_size, "%s: expected a non-empty %s", source,
                     o->kind == CLI_PATH ? "path" : "value");
            return false;
        }
        *(const char **)(base + o->offset) = value;
        return true;
    case CLI_CHOICE: {
        int i = choice_index(o->choices, value);
        if (i < 0) {
            choice_list(o->choices, range, sizeof range);
            snprintf(err, err_size, "%s '%s': expected %s", source, vs, range);
            return false;
        }
        *(int *)(base + o->offset) = i;
        return true;
    }
    case CLI_LIST:
        break;
    }
    snprintf(err, err_size, "%s: cannot be set from a single value", source);
    return false;
}

static bool list_append(cli_list *l, const char *v)
{
    const char **nv = realloc(l->v, sizeof *nv * (size_t)(l->n + 1));
    if (!nv)
        return false;
    nv[l->n++] = v;
    l->v = nv;
    return true;
}

/* Was the option element argv[k] written as the full long name (not an abbreviation)? */
static bool full_name(const char *elem, const char *name)
{
    if (strncmp(elem, "--", 2))
        return false;
    size_t l = strlen(name);
    return !strncmp(elem + 2, name, l) && (elem[2 + l] == 0 || elem[2 + l] == '=');
}

/* What cli_parse's stages share. */
typedef struct {
    const cli_command *cmd;
    void *args;
    cli_result *res;
    char *err;
    size_t err_size;
    int n;         /* options in cmd */
    int open_list; /* CLI_LIST option still taking values, or -1 */
    char pg[96];   /* the program's name, for "try '... --help'" */
} cli_pstate;

static int parse_nomem(cli_pstate *ps)
{
    snprintf(ps->err, ps->err_size, "out of memory");
    return CLI_ERROR;
}

static bool add_positional(cli_result *res, char *value)
{
    const char **nv = realloc(res->positional, sizeof *nv * (size_t)(res->n_positional + 1));
    if (!nv)
        return false;
    res->positional = nv;
    nv[res->n_positional++] = value;
    return true;
}

/* A non-option argument, in order: the open list's next value, or a positional argument. */
static int parse_nonoption(cli_pstate *ps, char *arg)
{
    const cli_command *cmd = ps->cmd;
    char shown[80];
    if (ps->open_list >= 0) {
        if (!*arg) { /* as for the list's first value */
            snprintf(ps->err, ps->err_size, "--%s: expected a non-empty value",
                     cmd->opts[ps->open_list].name);
            return CLI_ERROR;
        }
        if (!list_append((cli_list *)((char *)ps->args + cmd->opts[ps->open_list].offset), arg))
            return parse_nomem(ps);
        return CLI_OK;
    }
    if (!cmd->positional) {
        snprintf(ps->err, ps->err_size, "unexpected argument '%s' (try '%s --help')",
                 cli_show(arg, shown, sizeof shown), ps->pg);
        return CLI_ERROR;
    }
    if (cmd->max_positional > 0 && ps->res->n_positional >= cmd->max_positional) {
        snprintf(ps->err, ps->err_size, "too many arguments: '%s' (at most %d %s)",
                 cli_show(arg, shown, sizeof shown), cmd->max_positional, cmd->positional);
        return CLI_ERROR;
    }
    return add_positional(ps->res, arg) ? CLI_OK : parse_nomem(ps);
}

/* getopt_long's answer @p c for the element @p elem that is none of the command's options: an
 * unknown option, or a value missing. Always CLI_ERROR. */
static int parse_bad_option(cli_pstate *ps, int c, const char *elem)
{
    char shown[80];
    if (c == '?') {
        if (optopt > 0x20 && optopt < 0x7f) /* a printable short option */
            snprintf(ps->err, ps->err_size, "unknown option '-%c' (try '%s --help')", optopt,
                     ps->pg);
        else
            snprintf(ps->err, ps->err_size, "unknown option '%s' (try '%s --help')",
                     cli_show(elem, shown, sizeof shown), ps->pg);
    } else if (c == ':') {
        const cli_option *o = NULL;
        if (optopt >= 256 && optopt < 256 + ps->n)
            o = &ps->cmd->opts[optopt - 256];
        if (o)
            snprintf(ps->err, ps->err_size, "option '--%s' needs a value (%s)", o->name,
                     o->metavar ? o->metavar : "a value");
        else
            snprintf(ps->err, ps->err_size, "option '%s' needs a value",
                     cli_show(elem, shown, sizeof shown));
    } else {
        snprintf(ps->err, ps->err_size, "unknown option '%s' (try '%s --help')",
                 cli_show(elem, shown, sizeof shown), ps->pg);
    }
    return CLI_ERROR;
}

/* Option i, written as @p elem, with its value @p arg (NULL for a flag). */
static int parse_option(cli_pstate *ps, int i, const char *elem, char *arg)
{
    const cli_option *o = &ps->cmd->opts[i];
    char src[96], shown[80];
    if (!full_name(elem, o->name)) {
        snprintf(ps->err, ps->err_size, "unknown option '%.*s' (did you mean '--%s'?)",
                 (int)strcspn(cli_show(elem, shown, sizeof shown), "="), shown, o->name);
        return CLI_ERROR;
    }
    if (ps->res->given[i] && o->kind != CLI_LIST) {
        snprintf(ps->err, ps->err_size, "option '--%s' given twice", o->name);
        return CLI_ERROR;
    }
    ps->res->given[i] = true;
    if (o->kind == CLI_FLAG) {
        *(bool *)((char *)ps->args + o->offset) = true;
        return CLI_OK;
    }
    /* a separate value that is itself an option: `--steps --d-model 64` */
    bool separate = !strchr(elem, '=');
    if (separate && arg[0] == '-' && arg[1] == '-' && arg[2]) {
        snprintf(ps->err, ps->err_size,
                 "option '--%s' needs a value (%s) but got the option '%s'", o->name,
                 o->metavar ? o->metavar : "a value", cli_show(arg, shown, sizeof shown));
        return CLI_ERROR;
    }
    if (o->kind == CLI_LIST) {
        if (!*arg) {
            snprintf(ps->err, ps->err_size, "--%s: expected a non-empty value", o->name);
            return CLI_ERROR;
        }
        if (!list_append((cli_list *)((char *)ps->args + o->offset), arg))
            return parse_nomem(ps);
        ps->open_list = i;
        return CLI_OK;
    }
    snprintf(src, sizeof src, "--%s", o->name);
    if (!cli_set(ps->cmd, o, arg, ps->args, src, ps->err, ps->err_size))
        return CLI_ERROR;
    return CLI_OK;
}

/* After the options: the arguments after "--" (all positional), the positional count, the
 * required options. */
static int parse_finish(cli_pstate *ps, int argc, char **argv)
{
    const cli_command *cmd = ps->cmd;
    cli_result *res = ps->res;
    char shown[80];
    for (int k = optind; k < argc; k++) {
        if (!cmd->positional) {
            snprintf(ps->err, ps->err_size, "unexpected argument '%s' (try '%s --help')",
                     cli_show(argv[k], shown, sizeof shown), ps->pg);
            return CLI_ERROR;
        }
        if (!add_positional(res, argv[k]))
            return parse_nomem(ps);
    }
    if (cmd->positional) {
        if (res->n_positional < cmd->min_positional) {
            snprintf(ps->err, ps->err_size, "missing %s (try '%s --help')", cmd->positional,
                     ps->pg);
            return CLI_ERROR;
        }
        if (cmd->max_positional > 0 && res->n_positional > cmd->max_positional) {
            snprintf(ps->err, ps->err_size, "too many arguments (at most %d %s)",
                     cmd->max_positional, cmd->positional);
            return CLI_ERROR;
        }
    }
    for (int i = 0; i < ps->n; i++) {
        const cli_option *o = &cmd->opts[i];
        if ((o->flags & CLI_REQUIRED) && !res->given[i]) {
            snprintf(ps->err, ps->err_size, "missing option '--%s%s%s' (try '%s --help')",
                     o->name, o->metavar ? " " : "", o->metavar ? o->metavar : "", ps->pg);
            return CLI_ERROR;
        }
    }
    return CLI_OK;
}

int cli_parse(const cli_command *cmd, int argc, char **argv, void *args, cli_result *res,
              char *err, size_t err_size)
{
    memset(res, 0, sizeof *res);
    err[0] = 0;
    cli_pstate ps = {cmd, args, res, err, err_size, n_opts(cmd), -1, ""};
    int n = ps.n;
    if (n > CLI_MAX_OPTIONS) {
        snprintf(err, err_size, "internal error: too many options");
        return CLI_ERROR;
    }
    struct option lo[CLI_MAX_OPTIONS + 2];
    for (int i = 0; i < n; i++) {
        lo[i].name = cmd->opts[i].name;
        lo[i].has_arg = cmd->opts[i].kind == CLI_FLAG ? no_argument : required_argument;
        lo[i].flag = NULL;
        lo[i].val = 256 + i;
    }
    lo[n] = (struct option){"help", no_argument, NULL, 'h'};
    lo[n + 1] = (struct option){NULL, 0, NULL, 0};
    prog(cmd, ps.pg, sizeof ps.pg);
    optind = 0; /* full re-initialisation of glibc's getopt */
    opterr = 0;
    for (;;) {
        int prev = optind ? optind : 1;
        int li = -1;
        int c = getopt_long(argc, argv, "-:h", lo, &li);
        if (c == -1)
            break;
        const char *elem = prev < argc ? argv[prev] : "";
        int rc;
        if (c == 1) { /* a non-option argument, in order */
            rc = parse_nonoption(&ps, optarg);
        } else {
            ps.open_list = -1;
            if (c == 'h')
                return CLI_HELP;
            if (c == '?' || c == ':' || c < 256 || c >= 256 + n)
                return parse_bad_option(&ps, c, elem);
            rc = parse_option(&ps, c - 256, elem, optarg);
        }
        if (rc != CLI_OK)
            return rc;
    }
    return parse_finish(&ps, argc, argv);
}

void cli_free(const cli_command *cmd, void *args, cli_result *res)
{
    if (args)
        for (const cli_option *o = cmd->opts; o->name; o++)
            if (o->kind == CLI_LIST) {
                cli_list *l = (cli_list *)((char *)args + o->offset);
                free(l->v);
                l->v = NULL;
                l->n = 0;
            }
    if (res) {
        free(res->positional);
        res->positional = NULL;
        res->n_positional = 0;
    }
}

/* @p n bytes of @p p, with CLI_NBSP shown as a space. */
#define CLI_NBSP '\x01' /* a space print_wrapped never breaks at */
static void print_span(FILE *f, const char *p, size_t n)
{
    for (size_t i = 0; i < n; i++)
        fputc(p[i] == CLI_NBSP ? ' ' : p[i], f);
}

/* Print @p text (lines separated by '\n') so that no line exceeds 80 columns: a longer line
 * is broken at its last space before column 80, the rest indented by @p indent columns; the
 * first line starts at column @p col (already printed). */
static void print_wrapped(FILE *f, const char *text, int col, int indent)
{
    const int width = 80;
    for (const char *p = text; *p;) {
        size_t len = strcspn(p, "\n");
        while ((int)len > width - col) {
            int cut = width - col;
            while (cut > 0 && p[cut] != ' ')
                cut--;
            if (cut <= 0)
                break; /* one word longer than the line: printed as it is */
            int end = cut;
            while (end > 0 && p[end - 1] == ' ')
                end--;
            print_span(f, p, (size_t)end);
            fprintf(f, "\n%*s", indent, "");
            while (p[cut] == ' ')
                cut++;
            p += cut;
            len -= (size_t)cut;
            col = indent;
        }
        print_span(f, p, len);
        fputc('\n', f);
        p += len;
        if (*p == '\n')
            p++;
        col = 0;
    }
}

void cli_help(const cli_command *cmd, FILE *f)
{
    char pg[96];
    fprintf(f, "usage: %s %s\n", prog(cmd, pg, sizeof pg), cmd->usage ? cmd->usage : "[options]");
    if (cmd->description) {
        fputc('\n', f);
        print_wrapped(f, cmd->description, 0, 0);
    }
    const char *group = NULL;
    bool first = true;
    for (const cli_option *o = cmd->opts; o->name; o++) {
        if (o->flags & CLI_HIDDEN)
            continue;
        if (first || (o->group && (!group || strcmp(o->group, group)))) {
            fprintf(f, "\n%s\n", o->group ? o->group : "options:");
            group = o->group;
            first = false;
        }
        char lhs[96];
        const char *mv = o->metavar;
        if (!mv && o->kind == CLI_CHOICE)
            mv = o->choices;
        if (o->kind == CLI_FLAG || !mv)
            snprintf(lhs, sizeof lhs, "--%s", o->name);
        else
            snprintf(lhs, sizeof lhs, "--%s %s%s", o->name, mv, o->kind == CLI_LIST ? "..." : "");
        char range[160] = "";
        if (o->kind == CLI_INT && !ints_unbounded(o)) {
            snprintf(range, sizeof range, "  [%" PRId64 "..%" PRId64 "]", o->imin, o->imax);
        } else if (o->kind == CLI_NUM && !nums_unbounded(o)) {
            char r[100];
            num_range(o, r, sizeof r);
            snprintf(range, sizeof range, "  %s", r);
        }
        if (o->flags & CLI_REQUIRED) {
            size_t l = strlen(range);
            snprintf(range + l, sizeof range - l, "  (required)");
        }
        char text[600];
        for (char *c = range[0] ? range + 2 : range; *c; c++) /* "[0, 1e+06]": one line */
            if (*c == ' ')
                *c = CLI_NBSP;
        snprintf(text, sizeof text, "%s%s", o->help ? o->help : "", range);
        if (strlen(lhs) > 24)
            fprintf(f, "  %s\n  %-24s  ", lhs, "");
        else
            fprintf(f, "  %-24s  ", lhs);
        print_wrapped(f, text, 28, 28);
    }
    fprintf(f, "  %-24s  %s\n", "--help, -h", "print this help and exit");
}

int cli_parse_exit(int pr, const cli_command *cmd, const char *err)
{
    if (pr == CLI_OK)
        return -1;
    if (pr == CLI_HELP) {
        cli_help(cmd, stdout);
        return 0;
    }
    char pg[96];
    fprintf(stderr, "%s: %s\n", prog(cmd, pg, sizeof pg), err);
    return 2;
}
