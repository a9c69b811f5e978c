/*
 * train_progress.h - the progress lines of `tgrad train` on stderr: on a terminal one live line
 * redrawn in place (the longest of seven forms that fits the width, chosen as if the
 * validation columns were filled so the columns stay put), a line that stays at each
 * evaluation and the end; otherwise (a log, mpirun) whole lines within 80 columns.
 */
#ifndef TG_TRAIN_PROGRESS_H
#define TG_TRAIN_PROGRESS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct train_progress {
    /* the run, set once */
    bool text, s2s, pairs;
    bool no_val;         /* a text run without a validation split (--val-fraction 0) */
    int64_t steps, end;  /* the planned steps; the step this call ends at */
    /* the terminal */
    bool tty;            /* stderr is a terminal (and not --quiet): a live line */
    int width;           /* columns of the live line (terminal width - 1) */
    size_t last_len;     /* length of the last live line, to blank its rest */
    double t0;           /* tprog_now() at the start of the loop */
    /* where the run is: the caller updates these before each line */
    int64_t trained, epoch;
    double tok_s, last_val, acc, tok_acc, bleu;
} train_progress;

/* Seconds on the monotonic clock. */
double tprog_now(void);

/* Columns available to the live line: the terminal's width (stderr), else $COLUMNS, else 80;
 * minus one so the cursor never wraps. */
int tprog_line_width(void);

/* The line for step @p s (1-based), training loss @p l, learning rate @p lr; @p final: an
 * evaluation or the last step (a line that stays), otherwise a live update. */
void tprog_line(train_progress *t, int64_t s, double l, double lr, bool final);

/* Before an error message: end a live line so the message starts on its own line. */
void tprog_end_live(train_progress *t);

#endif
