/*
 * train_pairs.h - `tgrad train --pairs`: translation training on sentence pairs (layer 6:
 * public headers only). The tokenizer (SentencePiece trained on the training pairs, a given
 * --spm model, or UTF-8 bytes), the tokenized training and validation data, the epoch's
 * length-bucketed batches and the cursor in them, the loss of every batch shape
 * (tg_seq2seq_loss) and the evaluation: validation loss per target token (unsmoothed) and
 * corpus BLEU / chrF of greedy translations of the validation set (tg_translator).
 */
#ifndef TG_TRAIN_PAIRS_H
#define TG_TRAIN_PAIRS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "tgrad_data.h"
#include "tgrad_decode.h"
#include "tgrad_io.h"
#include "tgrad_train.h"
#include "train_args.h"

typedef struct pairs_run {
    tg_tokenizer *tok;
    tg_seq2seq_data *train, *valid;
    tg_batches *plan;         /* the current epoch's batches */
    int64_t epoch, cursor;    /* the next batch: batch `cursor` of epoch `epoch` */
    tg_seq2seq_loss *loss;
    tg_translator *greedy;    /* validation BLEU */
    int64_t max_sentences;    /* sentences per translation call */
    /* the current batch's arrays */
    int32_t *src, *tin, *lab;
    int64_t *slen;
    size_t cap_s, cap_t, cap_n;
    int64_t last_tokens;      /* real target tokens (labels) of the last batch */
    double bleu, chrf;        /* the last evaluation's greedy BLEU and chrF2 (NaN: none) */
    char bleu_line[200];      /* sacreBLEU's text line of that BLEU */
} pairs_run;

/* The tokenizer: from the checkpoint @p ck (resume), a --spm model, UTF-8 bytes, or trained
 * (SentencePiece) on both sides of the training pairs. false with one line in @p err;
 * *usage: the command line is at fault. */
bool pairs_tokenizer(pairs_run *p, tg_ctx *ctx, const train_args *a, const tg_safetensors *ck,
                     bool quiet, char *err, size_t n, bool *usage);
/* Load --pairs and --valid with the tokenizer (max_len = a->seq_len), check --batch-tokens
 * against the longest sequence, and (resume) the files' hashes and the cursor. */
bool pairs_load(pairs_run *p, tg_ctx *ctx, const train_args *a, const tg_safetensors *ck,
                char *err, size_t n, bool *usage);
/* The loss object and the greedy translator over @p m. false: error on the context. */
bool pairs_build(pairs_run *p, tg_ctx *ctx, const tg_transformer *m, const train_args *a);
/* The next training batch (advancing the cursor, a new epoch's plan when one ends) and its
 * loss's forward and backward: parameters' gradients replaced. false: error on the context. */
bool pairs_step(pairs_run *p, tg_ctx *ctx, const train_args *a, double *loss);
/* --dot: the training graph of the next batch's shape (the first batch of a fresh run),
 * built without running it, written as DOT to a->dot. false: error on the context. */
bool pairs_write_dot(pairs_run *p, tg_ctx *ctx, const train_args *a);
/* Validation loss per target token (@p val) and greedy BLEU / chrF (p->bleu, p->chrf) over
 * the validation set. The context must be in evaluation mode. false: error on the context;
 * *nonfinite: the logits were NaN or inf (val NaN, BLEU 0). */
bool pairs_evaluate(pairs_run *p, tg_ctx *ctx, const train_args *a, double *val,
                    bool *nonfinite);
/* Checkpoint metadata of the run (tokenizer, hashes, the cursor's place): up to 8 pairs
 * appended to keys/vals from index *k; values malloc'd into owned[] (free them); data.epoch
 * and data.batch with NULL values (tg_train_checkpoint_save writes p->epoch, p->cursor
 * there from the training state). false: out of memory. */
bool pairs_meta(const pairs_run *p, const train_args *a, const char **keys, const char **vals,
                char **owned, int *k);
void pairs_free(pairs_run *p);

#endif
