/**
 * @file tgrad_decode.h
 * @brief Translation with the encoder-decoder Transformer: greedy and beam search over the KV
 *        cache (tg_generator), batched over sentences, bitwise identical for any thread count.
 *
 * @code
 *   tg_search_opts o = tg_search_defaults();          // beam 5, lenpen 1, a 1.5, b 10
 *   tg_translator *tr = tg_translator_new(ctx, &model, 32, &o);
 *   const int32_t *src[2] = {s0, s1};                  // ids, each ending in EOS
 *   int64_t len[2] = {n0, n1};
 *   tg_translation out[2];
 *   if (tg_translate_batch(tr, 2, src, len, out) == TG_OK)
 *       ... out[i].ids[0 .. out[i].len - 1], out[i].score
 * @endcode
 */
#ifndef TGRAD_DECODE_H
#define TGRAD_DECODE_H

#include "tgrad.h"
#include "tgrad_train.h"

#ifdef __cplusplus
extern "C" {
#endif

/** The search algorithm. */
typedef enum tg_search_method {
    TG_SEARCH_GREEDY = 0, /**< argmax at each step (one generator row per sentence) */
    TG_SEARCH_BEAM = 1    /**< fairseq's beam search with tg_search_opts::beam beams */
} tg_search_method;

/** Search options; tg_search_defaults() gives the defaults in brackets. */
typedef struct tg_search_opts {
    tg_search_method method; /**< [TG_SEARCH_BEAM] */
    int64_t beam;            /**< K, beams per sentence for TG_SEARCH_BEAM, >= 1 [5] */
    double lenpen;           /**< alpha of the length penalty score / len^alpha [1.0] */
    double max_len_a;        /**< maximum output length min(floor(a S + b), max_seq_len - 1) [1.5] */
    double max_len_b;        /**< [10] */
    int32_t bos;             /**< the decoder's first input [1] */
    int32_t eos;             /**< ends a hypothesis [2] */
    int32_t pad;             /**< never generated (its log-probability is -inf), or < 0: none [3] */
    int64_t max_src_len;     /**< the longest source (tokens, EOS included) a call may give,
                              *   1..max_seq_len; 0: max_seq_len [0]. The translator's memory
                              *   follows it (tg_translator_length()) */
    int64_t no_repeat_ngram; /**< n > 0: no hypothesis repeats an n-gram. At each step a token
                              *   that followed an earlier occurrence of the hypothesis's last
                              *   n - 1 tokens (BOS counted as its first token) gets
                              *   log-probability -inf, in greedy and beam search alike
                              *   (fairseq's --no-repeat-ngram-size, NGramRepeatBlock). 0: off
                              *   [0]; at most max_seq_len */
} tg_search_opts;

/** The defaults: beam search, K = 5, lenpen 1.0, a = 1.5, b = 10, bos 1, eos 2, pad 3 (the ids
 *  of tgrad's tokenizers), max_src_len 0 (max_seq_len). */
TG_API tg_search_opts tg_search_defaults(void);

/** One sentence's result: the best hypothesis. */
typedef struct tg_translation {
    const int32_t *ids; /**< (len) its tokens without BOS and EOS; owned by the translator,
                         *   valid until its next tg_translate_batch() or tg_translator_free() */
    int64_t len;        /**< tokens in ids (0: the hypothesis is EOS alone) */
    double score;       /**< sum of its log-probabilities, EOS included, / (len + 1)^lenpen */
} tg_translation;

/** A translator: a model, search options and one tg_generator of max_sentences x K rows.
 *  Opaque; made by tg_translator_new(), owned by the context. */
typedef struct tg_translator tg_translator;

/**
 * Prepare translation with @p m (an encoder-decoder model: cfg.n_decoder_layers > 0) of up to
 * @p max_sentences sentences per call with options @p opts (NULL: tg_search_defaults()).
 * Makes one generator (tg_generator_new_len()) of R = max_sentences K rows (K = 1 for greedy)
 * and the search's buffers (O(R P) ids, R V doubles of log-probabilities), P =
 * tg_translator_length(): positions for the longest source (opts->max_src_len) and the longest
 * output one may get, not max_seq_len, so a model of a large max_seq_len translating short
 * sentences pays for their lengths. Memory is about 4 n_decoder_layers R P d_model elements of
 * cache (tg_generator_new_len()) plus the encoder's graph for max_sentences sources of the
 * call's longest length (made and released by each tg_translate_batch()).
 * The model is borrowed (as the generator's); decoding never applies dropout.
 * Errors (build errors; NULL returned, nothing left allocated): ::TG_ERR_ARG (model NULL or
 * not an encoder-decoder, max_seq_len < 2, max_sentences < 1, beam < 1, lenpen, max_len_a or
 * max_len_b not finite, max_src_len not in [0, max_seq_len], bos or eos not in [0, V), pad >= V, pad equal to bos or eos, fewer than
 * 2K tokens other than pad), ::TG_ERR_OVERFLOW, ::TG_ERR_NOMEM, those of tg_generator_new().
 */
TG_API tg_translator *tg_translator_new(tg_ctx *ctx, const tg_transformer *m,
                                        int64_t max_sentences, const tg_search_opts *opts);

/**
 * Translate @p n sentences (1 <= n <= max_sentences) side by side: sentence i's source is
 * src[i][0 .. src_len[i] - 1] (::TG_I32 ids in [0, V), conventionally ending in EOS;
 * 1 <= src_len[i] <= max_src_len, or max_seq_len if that is 0); out[i] receives its best
 * hypothesis.
 *
 * Sources are padded to the longest (tg_generator_set_sources(): the encoder and the
 * cross-attention mask each row's padding; a sentence's K rows hold the same source); unused
 * rows hold a one-token dummy source. Each step feeds one token per row through the KV cache
 * and reads the logits (R, V); log-probabilities are log_softmax in double:
 * lp(v) = x_v - (m + log sum_u exp(x_u - m)), m = max_u x_u. The maximum output length of
 * sentence i, EOS included, is M_i = max(1, min(floor(a S_i + b), max_seq_len - 1)) with
 * S_i = src_len[i].
 * - Greedy: feed BOS; take the argmax of the logits (lowest id on ties, never pad); stop at
 *   EOS or when M_i - 1 tokens are out (EOS appended). score = sum lp / (len + 1)^alpha.
 * - Beam (fairseq's `sequence_generator.py` with `BeamSearch`): hypothesis scores are sums of
 *   lp; at step t (0-based; step 0 uses only the first beam, all K start identical) the top 2K
 *   candidates (beam, token) by score over K x V without pad (ties: lower beam, then lower
 *   token); an EOS among the first K becomes a finished hypothesis with normalized score
 *   score / (t + 1)^alpha (t + 1 = its length, EOS included; at most K are kept); the first K
 *   non-EOS candidates become the beams (the generator's rows reordered with
 *   tg_generator_select()). At t = M_i - 1 every beam is finished with EOS (its lp added), best
 *   first. A sentence is done with K finished hypotheses (or at t = M_i - 1); its result is
 *   the finished one with the highest normalized score (ties: the first finished).
 * Cost per step: one generator feed of R rows (whether or not a sentence is done; the loop
 * stops when all are), O(R V) for the log-softmax and the candidates, the row copies of
 * tg_generator_select(). Results are bitwise identical for any thread count (tested).
 *
 * Errors (run-time; out[] is written only on success): ::TG_ERR_ARG (@p tr NULL (returned
 * only) or freed, n out of range, NULL arrays, a source length or id out of range, the
 * message naming the sentence and position), ::TG_ERR_NONFINITE (a logit NaN or infinite:
 * `sentence i, step t: logit of token v is nan`), those of the generator.
 * Source: Ott et al. 2019 (fairseq), `fairseq/sequence_generator.py`; Wu et al. 2016 for
 * length normalization (fairseq's penalty is len^alpha, not GNMT's ((5 + len) / 6)^alpha).
 */
TG_API tg_status tg_translate_batch(tg_translator *tr, int64_t n, const int32_t *const *src,
                                    const int64_t *src_len, tg_translation *out);

/**
 * The positions P a translator of @p m with options @p opts (NULL: the defaults) holds:
 * max(S, M), S = opts->max_src_len (0: max_seq_len) and M the largest maximum output length
 * max(1, min(floor(a s + b), max_seq_len - 1)) of a source of s <= S tokens. Its generator's
 * caches and memory keys hold P positions per row. 0 for a NULL model, max_seq_len < 2 or
 * options tg_translator_new() refuses for the lengths. No context, no allocation: a caller
 * estimates the memory of a translator before making it.
 */
TG_API int64_t tg_translator_length(const tg_transformer *m, const tg_search_opts *opts);

/** The options a translator was made with (defaults if @p tr is NULL). */
TG_API tg_search_opts tg_translator_opts(const tg_translator *tr);

/** The translator's generator (rows max_sentences K), e.g. for tg_graph_memory() of its
 *  graphs; NULL if @p tr is NULL or freed. */
TG_API tg_generator *tg_translator_generator(const tg_translator *tr);

/** Release the translator's generator and buffers at once; the small records stay in the
 *  context until tg_ctx_free(). NULL or a second call is a no-op. */
TG_API void tg_translator_free(tg_translator *tr);

/** @name Greedy decoding of a fixed length
 * The argmax decoding of exactly T target tokens for each of B sources of T tokens, as
 * `tgrad train --arch seq2seq` measures its held-out accuracy and `tgrad sample --source`
 * prints: decoder input [bos], then T steps, each appending the argmax of the last position's
 * logits over the whole vocabulary (the first of equal ones; bos included: a model that
 * predicts it is wrong there). No EOS, no length rule (for those, tg_translate_batch()).
 * Through the KV cache (tg_generator) by default; with @c no_cache one no_grad graph of
 * (B, T) sources and target prefixes, run once per step (the causal mask makes step i depend
 * on decoder inputs <= i only). Both give the same tokens.
 */
/**@{*/
typedef struct tg_greedy tg_greedy;

/**
 * Prepare greedy decoding of @p B sources of @p T tokens with @p m (cfg.n_decoder_layers > 0,
 * borrowed) at @p precision. Errors (NULL returned): ::TG_ERR_ARG (not an encoder-decoder, B
 * or T < 1, bos outside [0, V)), ::TG_ERR_NOMEM, those of tg_generator_new() or the graph.
 */
TG_API tg_greedy *tg_greedy_new(tg_ctx *ctx, const tg_transformer *m, int64_t B, int64_t T,
                                 int32_t bos, bool no_cache, tg_precision precision);

/**
 * Decode @p src (B, T) ids into @p out (B, T). The context should be in inference mode
 * (tg_ctx_set_training() false). Errors (run-time): ::TG_ERR_ARG (NULL arguments),
 * ::TG_ERR_NONFINITE (a logit NaN or infinite: `row b, step i: a logit is not finite`;
 * @p out partly written), those of the generator or the graph (a source id outside [0, V)).
 */
TG_API tg_status tg_greedy_decode(tg_greedy *d, const int32_t *src, int32_t *out);

/** Release the decoder's buffers (the graph and generator records belong to the context);
 *  NULL: no-op. */
TG_API void tg_greedy_free(tg_greedy *d);
/**@}*/

#ifdef __cplusplus
}
#endif

#endif /* TGRAD_DECODE_H */
