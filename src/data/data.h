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

/* tokenizer.c: the l best segmentations of a text (tg_tokenizer_ops.nbest), checked as
 * tg_tokenizer_encode_sampled() checks them (its messages, on the tokenizer's context):
 * segmentation k is ids[ends[k-1] .. ends[k]) (ends[-1] = 0), scores[k] its log-probability,
 * best first. ids is malloc'd (free() it; NULL after a failure). */
typedef struct tg__nbest {
    int32_t *ids;
    int64_t n_ids, ends[TG_SAMPLE_MAX_NBEST];
    double scores[TG_SAMPLE_MAX_NBEST];
    int count;
} tg__nbest;
tg_status tg__tokenizer_nbest(const tg_tokenizer *tok, const char *text, size_t n, int l,
                              tg__nbest *nb);
/* The index of the segmentation tg_tokenizer_encode_sampled() draws from count scores, or -1
 * with the error on the tokenizer's context (weights that overflow). */
int tg__tokenizer_draw(const tg_tokenizer *tok, const double *scores, int count, double alpha,
                       uint64_t key);
/* tg_tokenizer_encode_sampled()'s draw from a list (ends, scores, count, list_ids as in
 * tg__nbest): writes at most cap ids and returns the segmentation's length, or -1 with the
 * error on the tokenizer's context (weights that overflow). */
int64_t tg__tokenizer_pick(const tg_tokenizer *tok, const int64_t *ends, const double *scores,
                           int count, const int32_t *list_ids, double alpha, uint64_t key,
                           int32_t *ids, int64_t cap);

#endif
