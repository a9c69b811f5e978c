/*
 * climsg.h - turning a library error into one line for the user of `tgrad`.
 *
 * Library messages name the function and often the file (`tg_safetensors_read: f.st: header
 * ...`); the command line names the option and the file once instead:
 *   tgrad run: --weights 'f.st': header ...
 */
#ifndef TG_CLIMSG_H
#define TG_CLIMSG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

#include "tgrad.h"

/* The context's message without the leading library function name (`tg_xxx: `) and without a
 * leading `<path>: ` / `'<path>': ` when @p path is given. Written to @p buf, which is returned. */
const char *cli_message(const tg_ctx *ctx, const char *path, char *buf, size_t n);

/* The line cli_report() prints, without its `tgrad <cmd>: ` prefix:
 * `[<what> ]'<path>': <message>`, or `[<what>: ]<message>` when the message already names the
 * path (so it is printed once).
 * Written to @p buf, which is returned. For commands that report errors after the fact. */
const char *cli_format(const char *what, const char *path, const tg_ctx *ctx, char *buf,
                       size_t n);

/* Print `tgrad <cmd>: ` and the cli_format() line to stderr: @p what names the option
 * ("--weights") or is NULL; the path is printed unless the message already contains it. */
void cli_report(const char *cmd, const char *what, const char *path, const tg_ctx *ctx);

/* What a file that is not a regular file is, for a message, from its st_mode (stat or lstat):
 * "a directory", "a FIFO", "a character device", "a block device", "a socket", "a symbolic
 * link" or "a special file". */
const char *cli_file_kind(unsigned mode);

/* Do @p p and @p q name the same file (the same string, or the same device and inode after
 * following symbolic links)? */
bool cli_same_file(const char *p, const char *q);

/*
 * Is @p path an existing regular file (symbolic links followed)? Checked with stat(), so
 * nothing is opened: a FIFO without a writer, a terminal or a device is refused without
 * blocking or side effects (and /dev/zero cannot be read without end). On false, @p err
 * receives `'<path>': <reason>`, e.g. `'p': is a FIFO, not a regular file` or
 * `'p': No such file or directory`.
 */
bool cli_regular_file(const char *path, char *err, size_t n);

/* The CPUs this process may run on (sched_getaffinity; the online CPUs if that fails). */
int cli_cpus_available(void);

/*
 * --threads @p requested of `tgrad <cmd>` capped at cli_cpus_available(): more threads than
 * CPUs only wait on each other (a step slowed down many times). A lowered count prints one
 * warning line `tgrad <cmd>: --threads N: only M CPUs available to this process; using M`.
 * The environment variable TGRAD_OVERSUBSCRIBE=1 keeps the count as given (for tests of
 * thread invariance on small machines).
 */
int cli_threads_cap(const char *cmd, int64_t requested);

/* Write @p text (one logical line, without '\n') to @p f as lines of at most 80 columns:
 * @p prefix first, then the text broken at spaces, each continuation indented by the
 * prefix's width (2 columns without a prefix); all in one write, so lines of concurrent
 * writers (ranks under mpirun, stdout and stderr merged) never interleave within a line. */
void cli_say(FILE *f, const char *prefix, const char *text);

#endif
