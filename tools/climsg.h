/*
 * climsg.h - turning a library error into one line for the user of `tgrad`.
 *
 * Library messages name the function and often the file (`tg_safetensors_read: f.st: header
 * ...`); the command line names the option and the file once instead:
 *   tgrad run: --weights 'f.st': header ...
 */
#ifndef TG_CLIMSG_H
#define TG_CLIMSG_H

#include <stddef.h>
#include <stdio.h>

#include "tgrad.h"

/* The context's message without the leading library function name (`tg_xxx: `) and without a
 * leading `<path>: ` / `'<path>': ` when @p path is given. Written to @p buf, which is returned. */
const char *cli_message(const tg_ctx *ctx, const char *path, char *buf, size_t n);

/* Print `tgrad <cmd>: [<what> ]['<path>': ]<message>` to stderr: @p what names the option
 * ("--weights") or is NULL; the path is printed unless the message already contains it. */
void cli_report(const char *cmd, const char *what, const char *path, const tg_ctx *ctx);

#endif
