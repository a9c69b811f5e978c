/*
 * train_log.h - the CSV log of `tgrad train` (--log): a new log is written like every output
 * (outpath_write: a temporary with the header renamed into place), then each row is appended
 * with one write(2), a failed or short write cut back so the log never ends in a partial line;
 * a resumed run continues its own log, cut after the checkpoint's step, its kept rows given to
 * the plot. The rows themselves are the library's (tg_train_log_row).
 */
#ifndef TG_TRAIN_LOG_H
#define TG_TRAIN_LOG_H

#include <stdbool.h>
#include <stdint.h>

#include "svgplot.h"
#include "tgrad.h"

typedef struct train_log {
    const char *path;  /* --log */
    bool pairs, text;  /* the run's mode: the header's last column (val_bleu, val_acc) */
    bool force;        /* --force: a file that is not a training log may be replaced */
    int64_t start;     /* a resumed run's step: the rows after it are cut */
    svg_series *train, *val, *metric; /* --plot: the kept rows' curves (NULL: no plot) */
    int fd;            /* open for writing (-1: none) */
    int64_t len;       /* its length, always at the end of a whole line */
    bool no_acc;       /* a resumed log with the older 5-column header (no val_acc) */
    bool usage;        /* the failure is the command line's (exit 2) */
    char err[1600];    /* the failure's message, without the "tgrad train: " prefix */
} train_log;

/* Open @p l->path: a new log with its header, or (@p resumed) the run's own log cut at
 * l->start (a file that is not a training log: replaced with --force, else refused). */
bool tlog_open(train_log *l, tg_ctx *ctx, bool resumed);

/* Append @p len bytes (whole lines) with one write(2); a failed or short write is cut back. */
bool tlog_write(train_log *l, const char *line, size_t len);

#endif
