/*
 * outpath.c - the rule for every output file of `tgrad` (outpath.h).
 */
#define _GNU_SOURCE /* realpath */
#include "outpath.h"

#include "climsg.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
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

char *outpath_target(const char *path)
{
    struct stat ls, sb;
    if (lstat(path, &ls) == 0 && S_ISLNK(ls.st_mode) && stat(path, &sb) == 0 &&
        S_ISREG(sb.st_mode)) {
        char *real = realpath(path, NULL);
        if (real)
            return real;
    }
    return strdup(path);
}

/* The sidecar's name: "<real path>.lock" (an absent checkpoint: its real directory + name). */
static char *lock_name(const char *path)
{
    char *real = realpath(path, NULL);
    if (!real) {
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
        if (!real)
            return NULL;
    }
    size_t len = strlen(real) + 6;
    char *name = malloc(len);
    if (name)
        snprintf(name, len, "%s.lock", real);
    free(real);
    return name;
}

bool outpath_lock_take(outpath_lock *l, const char *opt, const char *path, char *err, size_t n)
{
    l->fd = -1;
    if (n)
        err[0] = 0;
    l->path = lock_name(path);
    if (!l->path) {
        snprintf(err, n, "out of memory");
        return false;
    }
    for (int attempt = 0; attempt < 8; attempt++) {
        int fd = open(l->path, O_RDWR | O_CREAT | O_NOFOLLOW | O_NOCTTY | O_CLOEXEC, 0666);
        if (fd < 0) {
            snprintf(err, n, "%s '%s': cannot create the lock file '%s': %s", opt, path, l->path,
                     strerror(errno));
            break;
        }
        struct flock fl = {.l_type = F_WRLCK, .l_whence = SEEK_SET, .l_start = 0, .l_len = 0};
        if (fcntl(fd, F_SETLK, &fl) != 0) {
            int e = errno;
            if (e != EACCES && e != EAGAIN) {
                snprintf(err, n, "%s '%s': cannot lock '%s': %s", opt, path, l->path,
                         strerror(e));
                close(fd);
                break;
            }
            /* the holder's pid: from the kernel, else what the holder wrote */
            struct flock q = {.l_type = F_WRLCK, .l_whence = SEEK_SET};
            long pid = 0;
            if (fcntl(fd, F_GETLK, &q) == 0 && q.l_type != F_UNLCK && q.l_pid > 0)
                pid = (long)q.l_pid;
            if (pid <= 0) {
                char buf[32] = "";
                ssize_t k = pread(fd, buf, sizeof buf - 1, 0);
                pid = k > 0 ? strtol(buf, NULL, 10) : 0;
            }
            close(fd);
            if (pid > 0)
                snprintf(err, n, "%s '%s' is in use by another tgrad run (pid %ld)", opt, path,
                         pid);
            else
                snprintf(err, n, "%s '%s' is in use by another tgrad run", opt, path);
            break;
        }
        /* locked; but the file may have been removed (by its releasing owner) after we opened
         * it: then lock the new one */
        struct stat a, b;
        if (fstat(fd, &a) != 0 || stat(l->path, &b) != 0 || a.st_dev != b.st_dev ||
            a.st_ino != b.st_ino) {
            close(fd);
            continue;
        }
        char buf[32];
        int k = snprintf(buf, sizeof buf, "%ld\n", (long)getpid());
        if (ftruncate(fd, 0) != 0 || pwrite(fd, buf, (size_t)k, 0) != k) {
            /* the pid is only for the message: the lock itself is held */
        }
        l->fd = fd;
        return true;
    }
    if (n && !err[0])
        snprintf(err, n, "%s '%s': the lock file '%s' keeps changing", opt, path, l->path);
    free(l->path);
    l->path = NULL;
    return false;
}

void outpath_lock_release(outpath_lock *l)
{
    if (l->fd >= 0) {
        (void)unlink(l->path); /* while still holding it: the next owner locks a new file */
        close(l->fd);
    }
    l->fd = -1;
    free(l->path);
    l->path = NULL;
}
