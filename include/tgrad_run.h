/**
 * @file tgrad_run.h
 * @brief The built-in training runs that need decoding and metrics: translation on sentence
 *        pairs (`tgrad train --pairs`) as callbacks of tg_train_run().
 *
 * The run owns what a translation run trains on and how it is judged: the epoch's
 * length-bucketed batches and the cursor in them, the loss of every batch shape
 * (tg_seq2seq_loss), and the evaluation (validation loss, greedy BLEU and chrF of the
 * validation set). The caller keeps the model, the tokenizer and the tokenized data, the
 * optimizer, and its files (tg_train_callbacks row and save). Not in the minimal build.
 * @code
 *   tg_seq2seq_opts so = {.max_len = 64};
 *   tg_seq2seq_data *tr = tg_seq2seq_load(ctx, "train.tsv", tok, &so);
 *   so.keep_text = true;                               // BLEU reads the references
 *   tg_seq2seq_data *va = tg_seq2seq_load(ctx, "valid.tsv", tok, &so);
 *   tg_train_pairs_opts po = {.tokenizer = tok, .train = tr, .valid = va,
 *                             .batch_tokens = 4096, .seed = 1};
 *   tg_train_pairs *pr = tg_train_pairs_new(ctx, &model, &po);
 *   tg_train_config cfg = tg_train_config_default();   // steps, schedule, ...
 *   tg_train_callbacks cb = {.user = &mine, .save = my_save};
 *   tg_train_pairs_bind(pr, &cb, &cfg);
 *   tg_status s = tg_train_run(ctx, opt, &cfg, &cb, &res);
 * @endcode
 * See docs/training.md, "The training run".
 */
#ifndef TGRAD_RUN_H
#define TGRAD_RUN_H

#include "tgrad.h"
#include "tgrad_data.h"
#include "tgrad_decode.h"
#include "tgrad_metrics.h"
#include "tgrad_train.h"

#ifdef __cplusplus
extern "C" {
#endif

/**
 * @name Translation on sentence pairs
 * Step s trains on batch `batch` of epoch `epoch` of tg_seq2seq_batches(train, batch_tokens,
 * seed, epoch) (the cursor then moves on; after an epoch's last batch the next epoch's plan
 * is made), through tg_seq2seq_loss_backward(): the loss is the mean label-smoothed
 * cross-entropy per real target token (labels -100 at padding), the batch built by
 * tg_seq2seq_batch_fill() (source + EOS; decoder input BOS + target; labels target + EOS).
 * The evaluation, after which the context is in training mode again:
 * - the validation loss: tg_seq2seq_evaluate() over the validation set in epoch 0's batches of
 *   the same seed, unsmoothed, per target token (nats/token);
 * - greedy translations (tg_translator, beam 1, @c max_sentences sentences per call) of the
 *   validation sources in file order, decoded by the tokenizer and scored against the
 *   validation targets' text: corpus BLEU (sacreBLEU's 13a BLEU, tg_bleu_stats_add()) is the
 *   metric, chrF2 beside it; reached when BLEU >= target_bleu > 0;
 * - non-finite logits: the validation loss NaN, BLEU and chrF 0 (the error cleared).
 */
/**@{*/
/** Options of tg_train_pairs_new(); zero-initialised fields take the defaults in brackets. */
typedef struct tg_train_pairs_opts {
    const tg_tokenizer *tokenizer; /**< the tokenizer of both sides (borrowed): decodes the
                                        greedy translations for BLEU */
    const tg_seq2seq_data *train;  /**< the training pairs, tokenized by @c tokenizer
                                        (tg_seq2seq_load(), borrowed) */
    const tg_seq2seq_data *valid;  /**< the validation pairs, loaded with keep_text (borrowed) */
    int64_t batch_tokens;          /**< tokens per batch (tg_seq2seq_batches()), at least the
                                        longest sequence of either set */
    uint64_t seed;                 /**< the batches' order of every epoch */
    int64_t epoch, batch;          /**< where the run starts: batch @c batch of epoch @c epoch
                                        (a resumed run: the checkpoint's `data.epoch`,
                                        `data.batch`; batch <= that epoch's batch count) [0, 0] */
    double label_smoothing;        /**< the training loss's epsilon in [0, 1) [0] */
    tg_precision precision;        /**< products of the loss graphs and of decoding [f32] */
    int64_t max_sentences;         /**< sentences per translation call [64] */
    double target_bleu;            /**< reached at this BLEU (0: never) */
    int sample_nbest;              /**< subword regularization: > 0 trains every epoch on
                                        tg_seq2seq_sample(ctx, train, tokenizer, sample_nbest,
                                        sample_alpha, seed, epoch) (Kudo 2018), which needs
                                        @c train loaded with keep_text, a tokenizer that can
                                        sample, and train's max_len at most batch_tokens and
                                        the model's max_seq_len; 0: off */
    double sample_alpha;           /**< its alpha, in [0, 100] */
} tg_train_pairs_opts;

/** A translation run (opaque): tg_train_pairs_new(), released by tg_train_pairs_free(). */
typedef struct tg_train_pairs tg_train_pairs;

/**
 * Prepare translation training of @p model (an encoder-decoder:
 * cfg.n_decoder_layers > 0) on @p o: the loss object (graphs built per batch shape, on first
 * use) and the greedy translator over the same parameters. The model, tokenizer and data stay
 * the caller's and must outlive the run.
 * Errors (NULL returned, the error on the context): ::TG_ERR_ARG (NULL arguments, a model
 * without a decoder, batch_tokens smaller than the longest sequence of either set, epoch or
 * batch negative, batch beyond its epoch's batch count, label_smoothing outside [0, 1),
 * max_sentences negative, a validation set loaded without keep_text), ::TG_ERR_NOMEM, those
 * of tg_seq2seq_loss_new() and tg_translator_new().
 */
TG_API tg_train_pairs *tg_train_pairs_new(tg_ctx *ctx, const tg_transformer *model,
                                          const tg_train_pairs_opts *o);

/** Fill @p cb's model_user, batch, micro, tokens (the real target tokens of the step) and
 *  evaluate for tg_train_run(); @p cfg's accum stays NULL (one micro-batch per step) and
 *  tokens_per_step 0 (tokens/s counts real tokens per second of steps). @p cb's user and
 *  other callbacks stay the caller's. */
TG_API void tg_train_pairs_bind(tg_train_pairs *m, tg_train_callbacks *cb,
                                tg_train_config *cfg);

/** The evaluation tg_train_pairs_bind() gives the run: the validation loss and BLEU (the
 *  metric), and whether BLEU reached target_bleu. */
TG_API tg_status tg_train_pairs_evaluate(tg_train_pairs *m, double *val_loss, double *bleu,
                                         bool *reached);

/** The last evaluation's scores: @p bleu and @p chrf (either may be NULL). Returns false
 *  before an evaluation or when its logits were non-finite (both then score 0). */
TG_API bool tg_train_pairs_scores(const tg_train_pairs *m, tg_bleu *bleu, tg_chrf *chrf);

/** The next batch's place: batch @p *batch of epoch @p *epoch (what a checkpoint saved now
 *  records as `data.epoch`, `data.batch`: tg_train_state). */
TG_API void tg_train_pairs_position(const tg_train_pairs *m, int64_t *epoch, int64_t *batch);

/**
 * Append the run's checkpoint metadata to @p list (after tg_train_record_meta()'s, mode
 * "pairs"): the tokenizer's (tg_tokenizer_meta(): `tokenizer.kind`, and `tokenizer.model`
 * for SentencePiece), `data.pairs_hash` and `data.valid_hash` (fnv1a64:HEX16 of the files),
 * the places of the training state's `data.epoch` and `data.batch` (NULL values, written by
 * tg_train_checkpoint_save() from tg_train_state), `train.batch_tokens`, and with sampling
 * `train.spm_alpha` and `train.spm_nbest` (sample_alpha, sample_nbest). The values are
 * owned by the run and valid until its next tg_train_pairs_meta() or tg_train_pairs_free().
 * Errors (run-time): ::TG_ERR_ARG (NULL arguments, no room left in @p list), ::TG_ERR_NOMEM.
 */
TG_API tg_status tg_train_pairs_meta(tg_train_pairs *m, tg_train_meta_list *list);

/** The real target tokens of the last batch trained on. */
TG_API int64_t tg_train_pairs_last_tokens(const tg_train_pairs *m);

/** The training graph of the next batch's shape (forward and backward), built without running
 *  it (for DOT files). NULL: the error on the context. Owned by the run. */
TG_API const tg_graph *tg_train_pairs_graph(tg_train_pairs *m);

/** Release the run (the loss object, the translator, the batch plan); NULL: no-op. */
TG_API void tg_train_pairs_free(tg_train_pairs *m);
/**@}*/

#ifdef __cplusplus
}
#endif
#endif /* TGRAD_RUN_H */
