/*
 * train_plan.h - the outputs of `tgrad train` (--checkpoint, --log, --plot, --dot), checked
 * before anything is trained: no two name the same file, none names an input (the data, the
 * tokenizer model, the resumed checkpoint unless it is the one saved), each in a directory
 * where files can be created, an existing file replaced only with --force (or a resumed run's
 * own), and the checkpoint's lock taken last (outpath.h).
 */
#ifndef TG_TRAIN_PLAN_H
#define TG_TRAIN_PLAN_H

#include <stdbool.h>

#include "outpath.h"
#include "train_args.h"

/* One line "tgrad train: MESSAGE" on stderr, in one write (never split by another rank's or
 * stream's output). */
void train_errf(const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 1, 2)))
#endif
    ;

typedef struct train_plan {
    const train_args *a;
    outpath_lock *lock; /* --checkpoint's lock, taken here (unless --dry-run) */
    bool usage;         /* a failure is the command line's (exit 2) */
    char *best_path;    /* --keep-best: where the best checkpoint goes (malloc'd), or NULL */
    const int64_t *kept; /* --keep-last: the steps of the step files the resumed run kept (its
                          * train.kept, when it saves back to its own --checkpoint) */
    int n_kept;
    bool resumed_best;  /* the resumed run kept its best checkpoint (train.keep_best) */
} train_plan;

/* --keep-best's file for checkpoint @p ck: ".best" inserted before the extension of its last
 * path component (de-en.ckpt -> de-en.best.ckpt), or appended when it has none. Malloc'd;
 * NULL when out of memory. */
char *train_plan_best_path(const char *ck);
/* @p tag (".best", ".step1500") inserted the same way. Malloc'd; NULL when out of memory. */
char *train_plan_tag_path(const char *ck, const char *tag);
/* --keep-last's file of step @p step: ".step<step>" inserted (de-en.step1500.ckpt). */
char *train_plan_step_path(const char *ck, int64_t step);

/* Check every output of @p t->a (each failure one line on stderr). */
bool train_plan_outputs(train_plan *t);

#endif
