/*
 * train_signal.h - SIGINT and SIGTERM during `tgrad train`: a handler that only marks the stop
 * (one lock-free atomic word) and write(2)s a message the loop prepared naming the step the run
 * stops after (train_signal.c has the whole protocol). The run's stop rule is the library's
 * (tg_train_run: after_step asks to stop); this is the command line's side.
 */
#ifndef TG_TRAIN_SIGNAL_H
#define TG_TRAIN_SIGNAL_H

#include <stdbool.h>
#include <stdint.h>

/* At the start of the command: the handlers (for the signals not inherited as ignored) and
 * the setup's message (printed when @p print: rank 0). SIGINT and SIGTERM are unblocked, so
 * one left pending by the parent arrives now. */
void tsig_install(bool print);

/* The dispositions found by tsig_install, back in place. */
void tsig_restore(void);

/* Has a signal asked the run to stop? */
bool tsig_stop_requested(void);

/* Arm the handler's message for step @p s (1-based; written when @p print): from here a signal
 * stops the run after step s; @p tty: start the message on a new line; @p checkpoint: the run
 * saves one. Returns true, arming nothing, when a signal came first: the message it printed
 * named the step before. */
bool tsig_arm(int64_t s, bool tty, bool checkpoint, bool print);

#endif
