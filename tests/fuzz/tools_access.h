/*
 * tools_access.h - what the harnesses fuzz_cli.c and fuzz_checkpoint.c need from the `tgrad`
 * program (tools/) beyond its headers: the option tables and helpers that are static in the
 * command files. tools_access.c compiles those files into one translation unit (#include of
 * the .c files, so nothing in tools/ changes) and exposes them here; a harness linking
  * tools_access.c must therefore not also link tools/cmd_{top,run,info,gradcheck,bench,export,
 * average,sample}.c (tests/fuzz/meson.build: fuzz_tools lists what to link; cmd_translate.c is linked,
 * its table reached through translate_command()).
 */
#ifndef TG_FUZZ_TOOLS_ACCESS_H
#define TG_FUZZ_TOOLS_ACCESS_H

#include "cli.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

/* Every cliopt table of the program: i in [0, fz_n_tables()). @p args_size receives the size
 * of the argument struct its offsets point into. */
int fz_n_tables(void);
const cli_command *fz_table(int i, size_t *args_size);

/* tools/cli/cmd_export.c's export_exec(): validate checkpoint @p ck and write @p out. Returns 0 on
 * success (with the tensors written in @p n_tensors), else non-zero with one line in @p err. */
int fz_export_exec(const char *ck, const char *out, bool force, int64_t *n_tensors, char *err,
                   size_t n);

/* tools/cli/cmd_info.c's info_file(): describe @p path to @p out, or one line in @p err. */
bool fz_info_file(const char *path, FILE *out, char *err, size_t n);

/* tools/cli/cmd_sample.c's pick(): the next token id from @p nv finite logits. */
int fz_sample_pick(const double *lg, int nv, double temp, int64_t top_k, double u, double *p);

#endif
