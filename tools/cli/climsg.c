/*
 * climsg.c - library errors as one line for the user; see climsg.h.
 */
#define _GNU_SOURCE /* sched_getaffinity, CPU_COUNT */
#include "climsg.h"

#include <errno.h>
#include <inttypes.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* Skip `tg_<identifier>: ` at the start of @p s. */
static const char *skip_fn(const char *s)
{
    if (strncmp(s, "tg_", 3))
        return s;
    const char *p = s + 3;
    while ((*p >= 'a' && *p <= 'z') || (*p >= '0' && *p <= '9') || *p == '_')
        p++;
    return (p[0] == ':' && p[1] == ' ') ? p + 2 : s;
}

/* Skip `<path>: ` or `'<path>': ` at the start of @p s. */
static const char *skip_path(const char *s, const char *path)
{
    size_t l = strlen(path);
    if (!l)
        return s;
    if (!strncmp(s, path, l) && s[l] == ':' && s[l + 1] == ' ')
        return s + l + 2;
    if (s[0] == '\'' && !strncmp(s + 1, path, l) && s[l + 1] == '\'' && s[l + 2] == ':' &&
        s[l + 3] == ' ')
        return s + l + 4;
    return s;
}

const char *cli_message(const tg_ctx *ctx, const char *path, char *buf, size_t n)
{
    const char *m = ctx ? tg_ctx_message(ctx) : NULL;
    if (!m || !*m)
        m = ctx ? tg_status_str(tg_ctx_status(ctx)) : "out of memory";
    m = skip_fn(m);
    if (path)
        m = skip_fn(skip_path(m, path)); /* "f: tg_x: ..." as well as "tg_x: f: ..." */
    snprintf(buf, n, "%s", m);
    return buf;
}

const char *cli_format(const char *what, const char *path, const tg_ctx *ctx, char *buf,
                       size_t n)
{
    char msg[1200];
    cli_message(ctx, path, msg, sizeof msg);
    bool show_path = path && !strstr(msg, path);
    if (show_path)
        snprintf(buf, n, "%s%s'%s': %s", what ? what : "", what ? " " : "", path, msg);
    else
        snprintf(buf, n, "%s%s%s", what ? what : "", what ? ": " : "", msg);
    return buf;
}

void cli_report(const char *cmd, const char *what, const char *path, const tg_ctx *ctx)
{
    char line[1600];
    cli_format(what, path, ctx, line, sizeof line);
    fprintf(stderr, "tgrad %s: %s\n", cmd, line);
}

const char *cli_file_kind(unsigned mode)
{
    mode_t m = (mode_t)mode;
    return S_ISDIR(m)    ? "a directory"
           : S_ISFIFO(m) ? "a FIFO"
           : S_ISCHR(m)  ? "a character device"
           : S_ISBLK(m)  ? "a block device"
           : S_ISSOCK(m) ? "a socket"
           : S_ISLNK(m)  ? "a symbolic link"
                         : "a special file";
}

bool cli_same_file(const char *p, const char *q)
{
    struct stat a, b;
    if (!strcmp(p, q))
        return true;
    return stat(p, &a) == 0 && stat(q, &b) == 0 && a.st_dev == b.st_dev && a.st_ino == b.st_ino;
}

bool cli_regular_file(const char *path, char *err, size_t n)
{
    struct stat st;
    if (stat(path, &st) != 0) {
        snprintf(err, n, "'%s': %s", path, strerror(errno));
        return false;
    }
    if (S_ISREG(st.st_mode))
        return true;
    snprintf(err, n, "'%s': is %s, not a regular file", path, cli_file_kind(st.st_mode));
    return false;
}

int cli_cpus_available(void)
{
    cpu_set_t set;
    CPU_ZERO(&set);
    if (sched_getaffinity(0, sizeof set, &set) == 0 && CPU_COUNT(&set) > 0)
        return CPU_COUNT(&set);
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n > 0 ? (int)n : 1;
}

int cli_threads_cap(const char *cmd, int64_t requested)
{
    int cpus = cli_cpus_available();
    const char *o = getenv("TGRAD_OVERSUBSCRIBE");
    if (requested <= cpus || (o && !strcmp(o, "1")))
        return (int)requested;
    fprintf(stderr, "tgrad %s: --threads %" PRId64 ": only %d CPU%s available to this process; "
            "using %d\n", cmd, requested, cpus, cpus == 1 ? "" : "s", cpus);
    return cpus;
}

void cli_say(FILE *f, const char *prefix, const char *text)
{
    char out[4096];
    size_t w = 0, indent = strlen(prefix), col;
    const size_t width = 80;
    if (indent == 0 || indent > 40)
        indent = 2;
    w += (size_t)snprintf(out, sizeof out, "%s", prefix);
    col = strlen(prefix);
    const char *p = text;
    while (*p && w + 2 < sizeof out) {
        size_t len = strlen(p);
        if (col + len <= width) {
            w += (size_t)snprintf(out + w, sizeof out - w, "%s", p);
            break;
        }
        size_t cut = width > col ? width - col : 0;
        while (cut > 0 && p[cut] != ' ')
            cut--;
        if (cut == 0) { /* a word longer than the line: up to the next space */
            cut = strcspn(p, " ");
            if (!p[cut]) {
                w += (size_t)snprintf(out + w, sizeof out - w, "%s", p);
                break;
            }
        }
        size_t end = cut;
        while (end > 0 && p[end - 1] == ' ')
            end--;
        w += (size_t)snprintf(out + w, sizeof out - w, "%.*s\n%*s", (int)end, p, (int)indent,
                              "");
        if (w >= sizeof out)
            w = sizeof out - 1;
        col = indent;
        p += cut;
        while (*p == ' ')
            p++;
    }
    if (w >= sizeof out - 1)
        w = sizeof out - 2;
    out[w++] = '\n';
    out[w] = 0;
    fputs(out, f);
    fflush(f);
}
