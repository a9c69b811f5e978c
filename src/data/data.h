/*
 * data.h - internal helpers shared by the files of src/data/ (pairs reader, tokenized data, batches).
 */
#ifndef TG_DATA_INTERNAL_H
#define TG_DATA_INTERNAL_H

#include "tgrad_data.h"
#include "io/io.h"

/* FNV-1a 64 (offset basis 0xcbf29ce484222325, prime 0x100000001b3), continued from h. */
uint64_t tg__fnv1a(uint64_t h, const void *p, size_t n);
#define TG__FNV_BASIS 0xcbf29ce484222325ULL

/* tg_pairs_read over an opened source, messages naming fn and src->label. Errors are
 * recorded on ctx (the caller is inside tg__io_enter). */
tg_status tg__pairs_read_src(tg_ctx *ctx, const char *fn, tg__src *src, size_t max_line,
                             tg_pair_fn cb, void *user, tg_pairs_info *info);

#endif
