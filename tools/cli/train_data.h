/*
 * data.h - the command line's side of training data for `tgrad train` and `tgrad sample`: the
 * library's byte-level text corpora (tgrad_data.h) with the option's name in messages, input
 * file checks, the memory limit, the vocabulary in checkpoint metadata, task names.
 */
#ifndef TG_DATA_H
#define TG_DATA_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "tgrad.h"
#include "tgrad_data.h"

/* Largest corpus read (bytes, all files together): the library's limit (tgrad_data.h). */
#define CORPUS_MAX_BYTES TG_TEXT_MAX_BYTES

/* tg_text_load() with the command line's messages: on error one line in @p err naming the
 * option ("--text 'x' is a FIFO, not a regular file") and NULL. */
tg_text *corpus_load(tg_ctx *ctx, const char *const *paths, int n_paths, double val_fraction,
                     char *err, size_t err_size);
/* Is @p path a regular file (cli_regular_file) of at most @p max_bytes (<= 0: any size)?
 * (stat only: never blocks.) Otherwise one line in @p err saying what it is ("'p': is a FIFO,
 * not a regular file"), why it cannot be read ("'p': No such file or directory") or how big it
 * is, to follow the option's name. */
bool data_check_regular(const char *path, double max_bytes, char *err, size_t err_size);

/* The memory this process may use, in bytes: the machine's physical memory (sysconf; a huge
 * value if unknown), or the address-space or data-segment limit (ulimit -v, -d) if lower. */
double phys_memory_bytes(void);

/* The value of hex digit @p c (0-9, a-f, A-F), or -1. */
int hex_digit(char c);

/* The algorithmic tasks (the library's tg_task_kind; --task names them). */
typedef tg_task_kind task_kind;
#define TASK_COPY TG_TASK_COPY
#define TASK_REVERSE TG_TASK_REVERSE
#define TASK_SORT TG_TASK_SORT
bool task_parse(const char *name, task_kind *k);
const char *task_name(task_kind k);

#endif
