/*
 * outpath.c - the rule for every output file of `tgrad` (outpath.h).
 */
#define _GNU_SOURCE /* realpath */
#include "outpath.h"

#include "climsg.h"
#include "tgrad_io.h"

#include <errno.h>
#include <fcntl.h>
#include <stddef.h>
#include <stdint.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

outpath_status outpath_check(const char *opt, const char *path, bool replace, bool *exists,
                             char *err, size_t n)
{
    struct stat ls, sb;
    if (exists)
        *exists = false;
    if (lstat(path, &ls) != 0) {
        if (errno == ENOENT)
            return OUTPATH_OK;
        snprintf(err, n, "%s '%s': %s", opt, path, strerror(errno));
        return OUTPATH_ERROR;
    }
    sb = ls;
    if (S_ISLNK(ls.st_mode)) {
        if (stat(path, &sb) != 0) {
            if (errno == ENOENT)
                snprintf(err, n, "%s '%s' is a symbolic link to a file that does not exist; "
                         "refusing to write through it", opt, path);
            else
                snprintf(err, n, "%s '%s': cannot follow the symbolic link: %s", opt, path,
                         strerror(errno));
            return OUTPATH_ERROR;
        }
        if (!S_ISREG(sb.st_mode)) {
            snprintf(err, n, "%s '%s' is a symbolic link to %s, not to a regular file; "
                     "refusing to replace it", opt, path, cli_file_kind(sb.st_mode));
            return OUTPATH_ERROR;
        }
    }
    if (!S_ISREG(sb.st_mode)) {
        snprintf(err, n, "%s '%s' is %s, not a regular file; refusing to replace it", opt, path,
                 cli_file_kind(sb.st_mode));
        return OUTPATH_ERROR;
    }
    if (exists)
        *exists = true;
    if (!replace) {
        snprintf(err, n, "%s '%s' exists (pass --force to replace it)", opt, path);
        return OUTPATH_EXISTS;
    }
    return OUTPATH_OK;
}

/* A stdio stream over the library writer's byte sink (fopencookie), remembering its error. */
typedef struct {
    const tg_writer *w;
    int err;
} sink_cookie;

static ssize_t sink_cookie_write(void *c, const char *buf, size_t size)
{
    sink_cookie *k = c;
    int e = size ? k->w->write(k->w->user, buf, size) : 0;
    if (e) {
        k->err = e;
        errno = e;
        return -1;
    }
    return (ssize_t)size;
}

typedef struct {
    outpath_emit_fn emit;
    void *user;
} emit_args;

static tg_status emit_stream(tg_ctx *ctx, const tg_writer *w, void *user)
{
    const emit_args *a = user;
    sink_cookie k = {w, 0};
    cookie_io_functions_t io = {.write = sink_cookie_write};
    FILE *f = fopencookie(&k, "w", io);
    static const char fn[] = "tg_file_write"; /* (left out of the CLI's messages) */
    if (!f)
        return tg_ctx_set_error(ctx, TG_ERROR_RUN, TG_ERR_NOMEM, fn, "out of memory");
    bool ok = a->emit(f, a->user);
    bool bad = fflush(f) != 0 || ferror(f);
    (void)fclose(f);
    if (k.err)
        return tg_ctx_set_error(ctx, TG_ERROR_RUN, TG_ERR_IO, fn, "cannot write: %s",
                                strerror(k.err));
    if (!ok || bad)
        return tg_ctx_set_error(ctx, TG_ERROR_RUN, TG_ERR_IO, fn, "cannot produce the contents");
    return TG_OK;
}

bool outpath_write(tg_ctx *ctx, const char *opt, const char *path, outpath_emit_fn emit,
                   void *user, char *err, size_t n)
{
    tg_ctx *own = NULL;
    if (!ctx && !(ctx = own = tg_ctx_new())) {
        snprintf(err, n, "%s '%s': out of memory", opt, path);
        return false;
    }
    emit_args a = {emit, user};
    bool ok = tg_file_write(ctx, path, emit_stream, &a, NULL) == TG_OK;
    if (!ok)
        cli_format(opt, path, ctx, err, n);
    tg_ctx_free(own);
    return ok;
}

bool outpath_not_input(const char *out_opt, const char *out, const char *in_opt,
                       const char *in, char *err, size_t n)
{
    if (!out || !in || !cli_same_file(out, in))
        return true;
    snprintf(err, n, "%s '%s' is the input %s '%s' (an output never replaces an input, even "
             "with --force; choose another file)", out_opt, out, in_opt, in);
    return false;
}

/* The checkpoint's real path (an absent one: its real directory + its name), malloc'd. */
static char *canonical_path(const char *path)
{
    char *real = realpath(path, NULL);
    if (real)
        return real;
    const char *slash = strrchr(path, '/');
    char dir[PATH_MAX];
    if (!slash)
        snprintf(dir, sizeof dir, ".");
    else if (slash == path)
        snprintf(dir, sizeof dir, "/");
    else
        snprintf(dir, sizeof dir, "%.*s", (int)(slash - path), path);
    char *rd = realpath(dir, NULL);
    const char *base = slash ? slash + 1 : path;
    size_t len = (rd ? strlen(rd) : strlen(dir)) + strlen(base) + 2;
    real = malloc(len);
    if (real)
        snprintf(real, len, "%s/%s", rd ? rd : dir, base);
    free(rd);
    return real;
}

/* The lock's address: an abstract Unix socket (Linux: no file, gone with its process)
 * "\0tgrad-checkpoint-<64-bit FNV-1a of the real path>". */
static socklen_t lock_address(const char *real, struct sockaddr_un *sa)
{
    uint64_t h = 0xcbf29ce484222325ULL;
    for (const unsigned char *p = (const unsigned char *)real; *p; p++) {
        h ^= *p;
        h *= 0x100000001b3ULL;
    }
    memset(sa, 0, sizeof *sa);
    sa->sun_family = AF_UNIX;
    int k = snprintf(sa->sun_path + 1, sizeof sa->sun_path - 1, "tgrad-checkpoint-%016llx",
                     (unsigned long long)h);
    return (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + (size_t)k);
}

bool outpath_lock_take(outpath_lock *l, const char *opt, const char *path, char *err, size_t n)
{
    l->fd = -1;
    char *real = canonical_path(path);
    if (!real) {
        snprintf(err, n, "out of memory");
        return false;
    }
    struct sockaddr_un sa;
    socklen_t sl = lock_address(real, &sa);
    free(real);
    if (n)
        err[0] = 0;
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd >= 0 && bind(fd, (const struct sockaddr *)&sa, sl) == 0 && listen(fd, 16) == 0) {
        l->fd = fd;
        return true;
    }
    int e = errno;
    if (fd >= 0)
        close(fd);
    if (e != EADDRINUSE) { /* no lock to be had here (a sandbox without sockets): say so, go on */
        snprintf(err, n, "note: %s '%s' is not locked against a second run (%s)", opt, path,
                 strerror(e));
        return true;
    }
    /* held: the holder's pid from the kernel (the credentials of the listening process) */
    long pid = 0;
    int c = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (c >= 0) {
        struct ucred cr;
        socklen_t cl = sizeof cr;
        if (connect(c, (const struct sockaddr *)&sa, sl) == 0 &&
            getsockopt(c, SOL_SOCKET, SO_PEERCRED, &cr, &cl) == 0 && cr.pid > 0)
            pid = (long)cr.pid;
        close(c);
    }
    if (pid > 0)
        snprintf(err, n, "%s '%s' is in use by another tgrad run (pid %ld)", opt, path, pid);
    else
        snprintf(err, n, "%s '%s' is in use by another tgrad run", opt, path);
    return false;
}

void outpath_lock_release(outpath_lock *l)
{
    if (l->fd >= 0)
        close(l->fd);
    l->fd = -1;
}
