/* train_log.c - the CSV log of `tgrad train` (see train_log.h). */
#define _GNU_SOURCE /* getline, O_CLOEXEC */
#include "train_log.h"
#include "cliopt.h"
#include "outpath.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* The failure's message (without the "tgrad train: " prefix). */
#define ERR(...) snprintf(l->err, sizeof l->err, __VA_ARGS__)

#define LOG_HEADER "step,train_loss,val_loss,lr,tokens_per_s,val_acc\n"
/* --pairs: the last column is the validation set's greedy BLEU */
#define LOG_HEADER_PAIRS "step,train_loss,val_loss,lr,tokens_per_s,val_bleu\n"
/* The header before val_acc: such a log is resumed with 5-column rows. */
#define LOG_HEADER_5 "step,train_loss,val_loss,lr,tokens_per_s\n"

/* Append @p len bytes (whole lines) to the log with one write(2); a failed or short write is
 * cut back, so the log never ends in a partial line. */
bool tlog_write(train_log *l, const char *line, size_t len)
{
    size_t done = 0;
    while (done < len) {
        ssize_t k = write(l->fd, line + done, len - done);
        if (k < 0 && errno == EINTR)
            continue;
        if (k <= 0) {
            int e = k < 0 ? errno : ENOSPC;
            if (ftruncate(l->fd, (off_t)l->len) != 0 ||
                lseek(l->fd, (off_t)l->len, SEEK_SET) < 0) {
                /* cannot cut the partial line off: said in the message */
                ERR("--log '%s': %s (and its last line could not be removed: %s)", l->path,
                    strerror(e), strerror(errno));
                return false;
            }
            ERR("--log '%s': %s", l->path, strerror(e));
            return false;
        }
        done += (size_t)k;
    }
    l->len += (int64_t)len;
    return true;
}

/* One CSV field of a log line: the @p i-th (0-based) as a number, false when empty or not a
 * number. */
static bool log_field(const char *line, int i, double *v)
{
    const char *p = line;
    for (int k = 0; k < i; k++) {
        p = strchr(p, ',');
        if (!p)
            return false;
        p++;
    }
    char buf[64];
    size_t len = strcspn(p, ",\n");
    if (len == 0 || len >= sizeof buf)
        return false;
    memcpy(buf, p, len);
    buf[len] = 0;
    return cli_parse_f64(buf, v) && isfinite(*v);
}

/*
 * A resumed run's own log: keep its header and the whole rows of steps up to the checkpoint's
 * step, drop the rest (rows a killed run wrote after its last save, a partial last line), and
 * give the kept rows to the plot, so the plot shows the whole run. A file that does not start
 * with the header is not a log of ours: with --force it is replaced, else refused.
 */
static bool trim_log(train_log *l, bool *fresh)
{
    FILE *r = NULL;
    int fd2 = dup(l->fd);
    if (fd2 >= 0 && !(r = fdopen(fd2, "r")))
        close(fd2);
    if (!r) {
        ERR("--log '%s': %s", l->path, strerror(errno));
        return false;
    }
    char *line = NULL;
    size_t cap = 0;
    ssize_t len;
    int64_t keep = 0;
    bool ok = true;
    *fresh = false;
    while ((len = getline(&line, &cap, r)) > 0) {
        if (line[len - 1] != '\n')
            break; /* a partial last line */
        if (keep == 0) {
            l->no_acc = strcmp(line, LOG_HEADER_5) == 0;
            const char *want = l->pairs ? LOG_HEADER_PAIRS : LOG_HEADER;
            if (strcmp(line, want) != 0 && !l->no_acc) {
                if (!l->force) {
                    ERR("--log '%s' is not a tgrad training log (its first line is not '%.*s'); "
                        "pass --force to replace it, or choose another --log", l->path,
                        (int)strlen(want) - 1, want);
                    l->usage = true;
                    ok = false;
                }
                *fresh = true;
                break;
            }
            keep = len;
            continue;
        }
        double step, loss, val, acc;
        if (!log_field(line, 0, &step) || step < 1 || step > (double)l->start)
            break;
        keep += len;
        if (l->train && log_field(line, 1, &loss) && !svg_series_add(l->train, step, loss))
            ok = false;
        if (l->val && log_field(line, 2, &val) && !svg_series_add(l->val, step, val))
            ok = false;
        if (l->metric && !l->text && !l->no_acc && log_field(line, 5, &acc) &&
            !svg_series_add(l->metric, step, l->pairs ? acc / 100 : acc))
            ok = false;
    }
    bool rerr = ferror(r);
    free(line);
    fclose(r);
    if (!ok) {
        if (!l->usage)
            ERR("out of memory");
        return false;
    }
    if (rerr) {
        ERR("--log '%s': %s", l->path, strerror(errno));
        return false;
    }
    if (keep == 0)
        *fresh = true;
    if (*fresh) {
        l->no_acc = false; /* replaced whole (open_log), with the current header */
        return true;
    }
    if (ftruncate(l->fd, (off_t)keep) != 0 || lseek(l->fd, (off_t)keep, SEEK_SET) < 0) {
        ERR("--log '%s': %s", l->path, strerror(errno));
        return false;
    }
    l->len = keep;
    return true;
}

static bool emit_text(FILE *f, void *user)
{
    return fputs(user, f) >= 0;
}

/* Open the existing regular file @p path for the log (no create, no truncation; a FIFO
 * swapped in cannot block the open). -1 (errno set) on failure; ENOENT when absent. */
static int open_log_fd(const char *path)
{
    int fd = open(path, O_RDWR | O_NONBLOCK | O_CLOEXEC | O_NOCTTY);
    if (fd < 0)
        return -1;
    struct stat sb;
    int e = fstat(fd, &sb) != 0 ? errno : !S_ISREG(sb.st_mode) ? ENODEV : 0;
    int fl = e ? -1 : fcntl(fd, F_GETFL);
    if (!e && (fl < 0 || fcntl(fd, F_SETFL, fl & ~O_NONBLOCK) != 0))
        e = errno;
    if (e) {
        close(fd);
        errno = e;
        return -1;
    }
    return fd;
}

/*
 * --log: a new log with its header, or (--resume) the run's own log cut at the checkpoint.
 * A new log is written like every output (outpath_write: a temporary with the header renamed
 * into place), so a log that cannot be written leaves nothing behind and an existing file
 * (--force) is replaced whole or not at all; the rows are then appended to it.
 */
bool tlog_open(train_log *l, tg_ctx *ctx, bool resumed)
{
    bool fresh = true;
    l->fd = -1;
    if (resumed) {
        l->fd = open_log_fd(l->path);
        if (l->fd < 0 && errno != ENOENT) {
            ERR("--log '%s': %s", l->path, strerror(errno));
            return false;
        }
        if (l->fd >= 0 && !trim_log(l, &fresh))
            return false;
        if (fresh && l->fd >= 0) {
            close(l->fd);
            l->fd = -1;
        }
    }
    if (!fresh)
        return true;
    const char *header = l->pairs ? LOG_HEADER_PAIRS : LOG_HEADER;
    if (!outpath_write(ctx, "--log", l->path, emit_text, (void *)header, l->err,
                       sizeof l->err)) {
        return false;
    }
    l->fd = open_log_fd(l->path);
    if (l->fd < 0 || lseek(l->fd, 0, SEEK_END) != (off_t)strlen(header)) {
        ERR("--log '%s': %s", l->path,
            l->fd < 0 ? strerror(errno) : "changed by another program while being opened");
        return false;
    }
    l->len = (int64_t)strlen(header);
    return true;
}

