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
#include "tgrad_run.h"
#include "tgrad_io.h"
#include "tgrad_train.h"
#include "train_args.h"

typedef struct pairs_run {
    tg_tokenizer *tok;
    tg_seq2seq_data *train, *valid;
    int64_t epoch, cursor;    /* where the run starts (resume: the checkpoint's place) */
    tg_train_pairs *run;      /* the library's run (tgrad_run.h) */
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
/* The library's run over @p m (tg_train_pairs_new: the loss of every batch shape, the greedy
 * translator, the batches from the resumed place). false: error on the context. */
bool pairs_build(pairs_run *p, tg_ctx *ctx, const tg_transformer *m, const train_args *a);
/* The last evaluation's BLEU, chrF2 and BLEU line into p->bleu, p->chrf, p->bleu_line (0 and
 * "BLEU = 0 (non-finite logits)" when its logits were not finite). */
void pairs_scores(pairs_run *p);
void pairs_free(pairs_run *p);

#endif
