/*
 * seq2seq.h - greedy decoding of the encoder-decoder model for `tgrad train --arch seq2seq`
 * (held-out exact-sequence accuracy) and `tgrad sample --source` (layer 6: public headers only).
 *
 * Cached path (the default): a tg_generator (tgrad_train.h) encodes the sources once
 * (tg_generator_set_source: the encoder and every decoder layer's memory keys and values),
 * then each step feeds the previous token of every row (BOS first) and takes the argmax of
 * the last position's logits: one position through the decoder per step.
 * Uncached path (--no-cache): one no_grad graph over a batch of sources (B, T) and target
 * prefixes (B, T) -> logits (B, T, V), built once. Step i runs the whole graph and takes the
 * argmax at target position i; the causal target mask makes position i depend only on decoder
 * inputs <= i, so the not yet decoded positions (filled with BOS) do not matter. Each step
 * costs a whole forward pass (the encoder included). Both give the same tokens (tested).
 */
#ifndef TG_SEQ2SEQ_H
#define TG_SEQ2SEQ_H

#include <stdbool.h>
#include <stdint.h>

#include "tgrad_train.h"

typedef struct s2s_decoder {
    tg_ctx *ctx;
    const tg_transformer *model;
    int64_t B, T, V;         /* batch, sequence length (source = target), vocabulary */
    tg_tensor *src, *tgt;    /* (B, T) i32 inputs of the uncached graph */
    tg_tensor *logits;       /* (B, T, V) */
    tg_graph *g;
    tg_generator *gen;       /* the cached path, or NULL */
    int32_t *dec;            /* (B, T) decoder inputs */
    double *row;             /* (B V) logits of one step (cached), or (V) of one position */
} s2s_decoder;

/* Build the decoder for @p B sources of length @p T over model @p m (n_decoder_layers > 0),
 * through the KV cache unless @p no_cache. False with the context's error (report with
 * cli_report) on failure. */
bool s2s_decoder_init(s2s_decoder *d, tg_ctx *ctx, const tg_transformer *m, int64_t B,
                      int64_t T, bool no_cache, int precision);
/* Release the buffers (the graph belongs to the context). */
void s2s_decoder_free(s2s_decoder *d);

/* Outcome of s2s_greedy. */
typedef enum { S2S_OK = 0, S2S_ERROR = 1, S2S_NONFINITE = 2 } s2s_status;

/*
 * Greedy decoding of @p src (B, T) digits into @p out (B, T): decoder input [BOS], then T
 * steps, each appending the argmax of the last position's logits over the whole vocabulary
 * (BOS included: a model that predicts BOS is wrong there). S2S_ERROR: a library error (on the
 * context); S2S_NONFINITE: a logit was NaN or inf (the parameters hold NaN or inf).
 * The context must be in inference mode (tg_ctx_set_training(ctx, false)).
 */
s2s_status s2s_greedy(s2s_decoder *d, const int32_t *src, int32_t *out);

/* Decoder inputs for teacher forcing: dec[b, 0] = BOS, dec[b, t] = labels[b, t - 1]. */
void s2s_shift_right(int64_t B, int64_t T, const int32_t *labels, int32_t *dec);

#endif
