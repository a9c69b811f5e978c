/**
 * @file tgrad_data.h
 * Data for sequence-to-sequence training: tokenizers (UTF-8 bytes here; SentencePiece in the
 * optional tgrad_spm.h), sentence-pair files, tokenized pairs and length-bucketed batches.
 *
 * Special token ids are the same for every tokenizer tgrad makes: unk 0, bos 1, eos 2, pad 3
 * (::TG_TOKEN_UNK ...). The byte tokenizer maps byte b to id 4 + b (vocabulary 260); the
 * SentencePiece models `tgrad train` trains are given these four ids too.
 */
#ifndef TGRAD_DATA_H
#define TGRAD_DATA_H

#include "tgrad.h"
#include "tgrad_io.h"

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ------------------------------------------------------------------------------------------ */
/** @name Tokenizers */
/**@{*/
/** The special ids of tgrad's tokenizers. */
enum {
    TG_TOKEN_UNK = 0, /**< unknown piece */
    TG_TOKEN_BOS = 1, /**< beginning of sequence (the decoder's first input) */
    TG_TOKEN_EOS = 2, /**< end of sequence (appended to sources and labels) */
    TG_TOKEN_PAD = 3  /**< padding (always masked: key padding mask, ignored labels) */
};

/** Vocabulary of the byte tokenizer: the four special ids, then the 256 byte values. */
#define TG_BYTE_VOCAB 260

/** A tokenizer: text (UTF-8) <-> token ids. Opaque; made by tg_tokenizer_bytes(),
 *  tg_tokenizer_new() or tg_spm_load() / tg_spm_train() (tgrad_spm.h); released by
 *  tg_tokenizer_free(). */
typedef struct tg_tokenizer tg_tokenizer;

/** The special ids of a tokenizer; -1 where the tokenizer has none. */
typedef struct tg_token_ids {
    int32_t unk, bos, eos, pad;
} tg_token_ids;

/**
 * The operations of a tokenizer implementation, for tg_tokenizer_new() (how tgrad_spm.h
 * plugs SentencePiece in; an embedder can plug in its own).
 * encode: write at most @p cap ids of @p text (n bytes of valid UTF-8) to @p ids and return
 * how many the whole text needs (so a return > cap means "call again with more room"), or -1
 * with a message (at most @p err_size bytes, NUL-terminated) in @p err.
 * decode: write the text of @p n ids (specials skipped) to @p out (at most @p cap bytes, no
 * NUL needed) and return how many bytes the whole text needs, or -1 with a message.
 * free: release @p impl (may be NULL).
 * nbest (optional; NULL when a text has one segmentation): the at most @p l most probable
 * segmentations of @p text, most probable first, each with its log-probability: their ids one
 * after another in @p ids (at most @p cap written), the end of segmentation k (an index into
 * ids, exclusive) in ends[k] and its log-probability in scores[k] (both arrays hold @p l),
 * their number in *count; returns how many ids all of them need (> cap: call again with more
 * room), or -1 with a message as encode.
 */
typedef struct tg_tokenizer_ops {
    const char *kind; /**< short name stored in checkpoints, e.g. "sentencepiece" */
    int64_t (*encode)(void *impl, const char *text, size_t n, int32_t *ids, int64_t cap,
                      char *err, size_t err_size);
    int64_t (*decode)(void *impl, const int32_t *ids, int64_t n, char *out, size_t cap,
                      char *err, size_t err_size);
    void (*free)(void *impl);
    int64_t (*nbest)(void *impl, const char *text, size_t n, int l, int32_t *ids, int64_t cap,
                     int64_t *ends, double *scores, int *count, char *err, size_t err_size);
} tg_tokenizer_ops;

/**
 * Make a tokenizer from an implementation. @p ops is copied; @p impl is owned by the tokenizer
 * from now on (released by ops->free, also when this call fails). @p model, @p model_size: the
 * serialized model (copied; what checkpoints store), or NULL, 0.
 * Errors (build-free: recorded as run-time errors on @p ctx, NULL returned): ::TG_ERR_ARG
 * (@p ops NULL or without encode/decode/kind, vocab_size < 1, a special id outside
 * [-1, vocab_size), bos or eos missing), ::TG_ERR_NOMEM.
 */
TG_API tg_tokenizer *tg_tokenizer_new(tg_ctx *ctx, const tg_tokenizer_ops *ops, void *impl,
                                      int64_t vocab_size, tg_token_ids special,
                                      const void *model, size_t model_size);

/** The byte tokenizer: byte b <-> id 4 + b, specials as ::TG_TOKEN_UNK ...; vocabulary
 *  ::TG_BYTE_VOCAB. Decoding replaces each invalid UTF-8 sequence by U+FFFD, as Python's
 *  `bytes.decode(errors="replace")`. NULL with ::TG_ERR_NOMEM on @p ctx. */
TG_API tg_tokenizer *tg_tokenizer_bytes(tg_ctx *ctx);

/**
 * Token ids of @p text (@p n bytes of UTF-8; no BOS/EOS added). Writes at most @p cap ids to
 * @p ids (may be NULL if cap is 0) and returns the number the whole text needs.
 * Errors (run-time, -1 returned): ::TG_ERR_ARG (NULL arguments, invalid UTF-8 or a NUL byte in
 * @p text: the message gives the byte offset), the implementation's message.
 */
TG_API int64_t tg_tokenizer_encode(const tg_tokenizer *tok, const char *text, size_t n,
                                   int32_t *ids, int64_t cap);
/**
 * Text of @p n token ids, special ids (unk, bos, eos, pad) skipped; always valid UTF-8 (an
 * invalid sequence becomes U+FFFD). Writes at most @p cap bytes to @p out and a terminating
 * NUL if it fits; returns the byte length of the whole text (without the NUL).
 * Errors (run-time, -1 returned): ::TG_ERR_ARG (NULL arguments, an id outside the vocabulary).
 */
TG_API int64_t tg_tokenizer_decode(const tg_tokenizer *tok, const int32_t *ids, int64_t n,
                                   char *out, size_t cap);
/** Largest l of tg_tokenizer_encode_sampled(). */
#define TG_SAMPLE_MAX_NBEST 1024

/**
 * Subword regularization (Kudo 2018, "Subword Regularization", sec. 3.1): one segmentation of
 * @p text drawn from its @p l most probable ones x_1 .. x_m (m <= l; the tokenizer's nbest),
 * segmentation k with probability
 *
 *     P(x_k) = exp(alpha (s_k - s_1)) / sum_j exp(alpha (s_j - s_1)),
 *
 * s_k its log-probability (P(x_k)^alpha normalised over the l best). The draw is
 * u = (splitmix64(@p key) >> 11) * 2^-53, the first output of splitmix64 (tgrad_data.h,
 * "Length-bucketed batches", step 1) from state @p key; the first k whose cumulative weight
 * exceeds u times the total is taken. So the result is a function of the text, l, alpha and
 * key: the same on any thread count and on resume. alpha = 0 samples the l best uniformly;
 * l = 1 is tg_tokenizer_encode(). Computed in f64.
 * Writes at most @p cap ids (no BOS/EOS) and returns how many the segmentation has.
 * Errors (run-time, -1 returned): those of tg_tokenizer_encode(); ::TG_ERR_ARG for l outside
 * [1, ::TG_SAMPLE_MAX_NBEST] or alpha outside [0, 100] or not finite, and for an nbest
 * operation that returns a malformed list (no segmentation, ends out of order, scores not
 * finite or far out of order, more ids than any text needs); ::TG_ERR_UNSUPPORTED
 * for a tokenizer without nbest (tg_tokenizer_can_sample()); ::TG_ERR_NOMEM.
 */
TG_API int64_t tg_tokenizer_encode_sampled(const tg_tokenizer *tok, const char *text, size_t n,
                                           int l, double alpha, uint64_t key, int32_t *ids,
                                           int64_t cap);
/** Whether @p tok can sample segmentations (tg_tokenizer_encode_sampled()): SentencePiece's
 *  unigram models can; BPE models and the byte tokenizer cannot. false for NULL. */
TG_API bool tg_tokenizer_can_sample(const tg_tokenizer *tok);
/** Vocabulary size (ids are in [0, size)); 0 for NULL. */
TG_API int64_t tg_tokenizer_vocab_size(const tg_tokenizer *tok);
/** The special ids (all -1 for NULL). */
TG_API tg_token_ids tg_tokenizer_special(const tg_tokenizer *tok);
/** The kind: "bytes", "sentencepiece", or the name an embedder gave; "" for NULL. */
TG_API const char *tg_tokenizer_kind(const tg_tokenizer *tok);
/** The serialized model (owned by the tokenizer) and its size; NULL, 0 for the byte tokenizer. */
TG_API const void *tg_tokenizer_model(const tg_tokenizer *tok, size_t *size);
/** The context the tokenizer reports errors on. */
TG_API tg_ctx *tg_tokenizer_ctx(const tg_tokenizer *tok);
/** Release the tokenizer (NULL is a no-op). */
TG_API void tg_tokenizer_free(tg_tokenizer *tok);

/** Largest serialized tokenizer model tg_tokenizer_meta_read() decodes (bytes; as
 *  ::TG_SPM_MAX_MODEL_BYTES of tgrad_spm.h). */
#define TG_TOKENIZER_MAX_MODEL_BYTES ((size_t)64 << 20)

/**
 * The checkpoint metadata of a tokenizer, for tg_checkpoint_save(): keys[0] =
 * "tokenizer.kind" with values[0] = its kind (tg_tokenizer_kind()); for a tokenizer with a
 * serialized model (tg_tokenizer_model(): SentencePiece) also keys[1] = "tokenizer.model" with
 * values[1] = the model bytes in base64 (RFC 4648 section 4, standard alphabet, padded with
 * '='; 4 ceil(size / 3) characters). The keys are static strings; the values are malloc'd
 * (the caller frees both; unused entries are NULL).
 * @return the number of pairs (1 or 2), or -1 with a run-time error on the tokenizer's
 *         context (::TG_ERR_NOMEM; nothing is left allocated) or for NULL arguments.
 */
TG_API int tg_tokenizer_meta(const tg_tokenizer *tok, const char *keys[2], char *values[2]);

/**
 * The tokenizer a parsed checkpoint (tg_safetensors_read()) names, as tg_tokenizer_meta()
 * wrote it. Untrusted input, checked strictly:
 * - `tokenizer.kind` must be "bytes" or "sentencepiece"; *kind then points into @p st's
 *   metadata (valid as long as @p st);
 * - "bytes": no `tokenizer.model` may be present; *model = NULL, *size = 0;
 * - "sentencepiece": `tokenizer.model` must be strict base64 (only the standard alphabet, a
 *   length that is a multiple of 4, at most two '=' only at the end, the unused bits of the
 *   last character 0: the one canonical encoding), of at most ::TG_TOKENIZER_MAX_MODEL_BYTES
 *   decoded bytes (checked from the length before anything is allocated); *model = the
 *   decoded bytes (malloc'd: the caller frees them), *size their count. The bytes are not
 *   validated as a model here: tg_spm_load() (tgrad_spm.h) does that before SentencePiece
 *   sees them.
 * Errors (run-time, on @p ctx; the outputs are then NULL, 0): ::TG_ERR_FORMAT naming the key
 * (`metadata 'tokenizer.kind' is missing`, `metadata 'tokenizer.model': byte 0x21 at offset
 * 12 is not a base64 character`, a bad length, misplaced padding, non-canonical bits, too
 * large), ::TG_ERR_NOMEM, ::TG_ERR_ARG (NULL arguments).
 */
TG_API tg_status tg_tokenizer_meta_read(tg_ctx *ctx, const tg_safetensors *st,
                                        const char **kind, void **model, size_t *size);
/**@}*/

/* ------------------------------------------------------------------------------------------ */
/** @name Sentence-pair files
 * A pairs file is UTF-8 text, one pair per line: `source<TAB>target` (for tgrad's translation
 * data, English<TAB>German), each line ended by `\n` or `\r\n` (the last line may lack it).
 * Refused, each with the file name and line number (`train.tsv:12: ...`, ::TG_ERR_FORMAT): a
 * line without exactly one tab (an empty line too), an empty side, invalid UTF-8 (strict RFC
 * 3629), a NUL byte, a line longer than the limit (::TG_PAIRS_MAX_LINE bytes by default,
 * without its line end); and a file without any pair (empty). The file is read in bounded
 * chunks: memory does not grow with its size (only with the longest line). */
/**@{*/

/** Default longest line of a pairs file, in bytes without the line end (64 KiB). */
#define TG_PAIRS_MAX_LINE 65536

/** One pair, as tg_pairs_read() hands it to its callback. The strings are NUL-terminated
 *  (they hold no NUL), valid UTF-8 and borrowed: valid only during the call. */
typedef struct tg_pair {
    const char *source; /**< the text before the tab */
    size_t source_len;  /**< its bytes (> 0) */
    const char *target; /**< the text after the tab, without the line end */
    size_t target_len;  /**< its bytes (> 0) */
    int64_t line;       /**< line number in the file, from 1 */
} tg_pair;

/** Called for each pair in file order. Return ::TG_OK to go on; anything else stops the read,
 *  which returns that status (recorded on the context as "callback stopped at FILE:LINE"
 *  unless the callback recorded an error of its own there). */
typedef tg_status (*tg_pair_fn)(void *user, const tg_pair *pair);

/** What a read saw (tg_pairs_read()). */
typedef struct tg_pairs_info {
    int64_t pairs;  /**< pairs (= lines) read */
    uint64_t bytes; /**< bytes read */
    uint64_t hash;  /**< FNV-1a 64 of those bytes in file order (offset basis
                         0xcbf29ce484222325, prime 0x100000001b3): a resumed run checks it is
                         training on the same file */
} tg_pairs_info;

/**
 * Stream the pairs of the file at @p path to @p fn (may be NULL: only validate and count).
 * @p max_line: the longest line allowed (bytes, without the line end); 0 means
 * ::TG_PAIRS_MAX_LINE. Memory: one line buffer of max_line bytes and a 64 KiB read buffer.
 * @p info (may be NULL) receives the counts and the hash, also after a failure (what was read
 * until then).
 * Errors (run-time, like every file call): ::TG_ERR_IO (missing, not a regular file,
 * unreadable: "cannot open 'x.tsv': No such file or directory"), ::TG_ERR_FORMAT (the
 * refusals above: "tg_pairs_read: x.tsv:3: 2 tabs; a pair is source<TAB>target with exactly
 * one tab"), ::TG_ERR_TRUNCATED (the file shrank while being read), ::TG_ERR_ARG (NULL
 * path), ::TG_ERR_NOMEM, or the callback's status.
 */
TG_API tg_status tg_pairs_read(tg_ctx *ctx, const char *path, size_t max_line, tg_pair_fn fn,
                               void *user, tg_pairs_info *info);
/** tg_pairs_read() over @p size bytes at @p data; @p label (NULL: "<memory>") names it in
 *  messages. */
TG_API tg_status tg_pairs_read_mem(tg_ctx *ctx, const void *data, size_t size,
                                   const char *label, size_t max_line, tg_pair_fn fn,
                                   void *user, tg_pairs_info *info);
/**@}*/

/* ------------------------------------------------------------------------------------------ */
/** @name Tokenized sequence-to-sequence data
 * The pairs of a file tokenized once, stored as token ids only (one id array and offsets). For
 * pair i, with L = max_len and tok() the tokenizer (no specials):
 * - source ids  = tok(source)[:L-1] + [EOS]                 S_i = their count (1..L)
 * - decoder input = [BOS] + tok(target)[:L-1]               T_i = their count (1..L)
 * - labels      = tok(target)[:L-1] + [EOS]                 (T_i as well)
 * (the same rule as fairseq's truncation, the PyTorch reference's and `tgrad translate`'s). */
/**@{*/

/** Tokenized pairs (opaque): tg_seq2seq_load(); released by tg_seq2seq_free(). */
typedef struct tg_seq2seq_data tg_seq2seq_data;

/** Options of tg_seq2seq_load(). Zero-initialised fields take the defaults. */
typedef struct tg_seq2seq_opts {
    int64_t max_len;  /**< tokens per sequence including EOS / BOS, >= 2 (0: 256) */
    size_t max_line;  /**< the pairs file's line limit (0: ::TG_PAIRS_MAX_LINE) */
    bool keep_text;   /**< keep each pair's source and target text (evaluation sets: BLEU
                           needs the reference text); the training set does not need it */
} tg_seq2seq_opts;

/** Counts of a loaded data set. */
typedef struct tg_seq2seq_info {
    int64_t pairs;          /**< N */
    int64_t max_len;        /**< the L it was built with */
    int64_t max_src;        /**< max S_i */
    int64_t max_tgt;        /**< max T_i */
    int64_t src_tokens;     /**< sum of S_i */
    int64_t tgt_tokens;     /**< sum of T_i */
    int64_t truncated_src;  /**< pairs whose source had more than L - 1 tokens */
    int64_t truncated_tgt;  /**< pairs whose target had more than L - 1 tokens */
    int32_t pad_id;         /**< id of padded positions (the tokenizer's pad, else its unk,
                                 else 0: padding is always masked) */
    uint64_t hash;          /**< the file's FNV-1a 64 (::tg_pairs_info) */
    uint64_t bytes;         /**< the file's size */
} tg_seq2seq_info;

/**
 * Read the pairs file at @p path (tg_pairs_read() rules) and tokenize both sides with @p tok.
 * The tokenizer must outlive nothing: the data keeps only ids (and the texts with keep_text).
 * Errors (run-time, NULL returned): those of tg_pairs_read(); ::TG_ERR_ARG (NULL arguments,
 * max_len < 2 or > 2^30; a side the tokenizer refuses: "x.tsv:7: source: <its message>"),
 * ::TG_ERR_NOMEM.
 */
TG_API tg_seq2seq_data *tg_seq2seq_load(tg_ctx *ctx, const char *path, const tg_tokenizer *tok,
                                        const tg_seq2seq_opts *opts);
/** tg_seq2seq_load() over a buffer (@p label as in tg_pairs_read_mem()). */
TG_API tg_seq2seq_data *tg_seq2seq_load_mem(tg_ctx *ctx, const void *data, size_t size,
                                            const char *label, const tg_tokenizer *tok,
                                            const tg_seq2seq_opts *opts);
/**
 * Subword regularization of a training set: the pairs of @p d (loaded with keep_text), both
 * sides tokenized again by tg_tokenizer_encode_sampled() with @p l and @p alpha, then
 * truncated and ended as tg_seq2seq_load() does (d's max_len and specials). The key of side
 * s (0 source, 1 target) of pair i is
 *
 *     seed XOR (0x9E3779B97F4A7C15 * (epoch + 1)) XOR (0xD1B54A32D192ED03 * (2 i + s + 1))
 *
 * (mod 2^64), so a training run draws new segmentations every epoch (Kudo 2018, sec. 3.2,
 * "on-the-fly" sampling), the same ones on any thread count and when resumed. The result, made
 * in @p ctx's memory, keeps ids only (no texts), d's line numbers and d's hash and size (the
 * same file); its counts are its own. Owned by the caller: tg_seq2seq_free().
 * The n-best lists depend on the texts and l only, so when @p ctx is @p d's context the call
 * keeps them with @p d (in its memory, freed with it; ids in 16 bits for vocabularies up to
 * 65,536), and a later call with the same tokenizer and l draws from them without asking the
 * tokenizer again: the same result, bit for bit. Memory grows with l and the texts (about
 * 90 MB for the 15,097 Ding training pairs at l = 64 with 4000 pieces); a data set whose
 * lists would pass 512 MiB, or the context's memory limit, is sampled without them.
 * Not to be called concurrently on one @p d.
 * Errors (run-time, on @p ctx, NULL returned): ::TG_ERR_ARG (NULL arguments, @p d without
 * texts, epoch < 0, l or alpha outside tg_tokenizer_encode_sampled()'s ranges, a side the
 * tokenizer refuses: "pairs:7: source: <its message>", 7 the pair's line), ::TG_ERR_UNSUPPORTED
 * (a tokenizer that cannot sample), ::TG_ERR_NOMEM.
 */
TG_API tg_seq2seq_data *tg_seq2seq_sample(tg_ctx *ctx, const tg_seq2seq_data *d,
                                          const tg_tokenizer *tok, int l, double alpha,
                                          uint64_t seed, int64_t epoch);
/** Release (NULL is a no-op). */
TG_API void tg_seq2seq_free(tg_seq2seq_data *d);
/** Counts (all zero for NULL). */
TG_API tg_seq2seq_info tg_seq2seq_get_info(const tg_seq2seq_data *d);
/** Number of pairs N (0 for NULL). */
TG_API int64_t tg_seq2seq_count(const tg_seq2seq_data *d);
/** Source ids of pair @p i (S_i of them, the last EOS) and *len = S_i; NULL if out of range.
 *  Owned by @p d. */
TG_API const int32_t *tg_seq2seq_source(const tg_seq2seq_data *d, int64_t i, int64_t *len);
/** Target ids of pair @p i without BOS and EOS: tok(target)[:L-1], T_i - 1 of them (decoder
 *  input = BOS + these, labels = these + EOS); *len = T_i - 1. NULL if out of range. */
TG_API const int32_t *tg_seq2seq_target(const tg_seq2seq_data *d, int64_t i, int64_t *len);
/** S_i and T_i of pair @p i (0 out of range). */
TG_API int64_t tg_seq2seq_src_len(const tg_seq2seq_data *d, int64_t i);
TG_API int64_t tg_seq2seq_tgt_len(const tg_seq2seq_data *d, int64_t i);
/** Line number of pair @p i in its file (0 out of range). */
TG_API int64_t tg_seq2seq_line(const tg_seq2seq_data *d, int64_t i);
/** Source / target text of pair @p i (NUL-terminated, owned by @p d), if loaded with
 *  keep_text; else (or out of range) NULL. */
TG_API const char *tg_seq2seq_source_text(const tg_seq2seq_data *d, int64_t i);
TG_API const char *tg_seq2seq_target_text(const tg_seq2seq_data *d, int64_t i);
/**@}*/

/* ------------------------------------------------------------------------------------------ */
/** @name Length-bucketed batches
 * The batches of one epoch, a function of the lengths (S_i, T_i), the token budget, the seed
 * and the epoch e >= 0 (what fairseq's --max-tokens does, made exactly reproducible; the
 * PyTorch reference tools/reference/translate_reference.py implements the same):
 * 1. RNG: splitmix64 with state s = seed XOR (0x9E3779B97F4A7C15 * (e + 1)) (mod 2^64);
 *    next(): s += 0x9E3779B97F4A7C15; z = s; z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9;
 *    z = (z ^ (z >> 27)) * 0x94D049BB133111EB; return z ^ (z >> 31).
 * 2. perm = [0, N); for i = N-1 down to 1: j = next() % (i + 1), swap perm[i], perm[j];
 *    rank[perm[k]] = k.
 * 3. Examples sorted by (T_i, S_i, rank[i]) ascending.
 * 4. Greedy packing in that order: a batch takes the next example while
 *    n * max(max S, max T) <= batch_tokens (padded positions counted).
 * 5. The list of batches shuffled by Fisher-Yates (as in 2) with the same RNG continuing;
 *    inside a batch the examples stay in sorted order.
 * Every example is in exactly one batch per epoch. */
/**@{*/

/** The batches of one epoch (opaque); released by tg_batches_free(). */
typedef struct tg_batches tg_batches;

/** One batch: @p n examples (indices into the data, in order), padded to (n, src_len) and
 *  (n, tgt_len). */
typedef struct tg_batch {
    int64_t n;               /**< examples */
    int64_t src_len;         /**< S = max S_i over them */
    int64_t tgt_len;         /**< T = max T_i over them */
    const int64_t *examples; /**< (n) indices, owned by the tg_batches */
} tg_batch;

/**
 * Plan the batches of epoch @p epoch for @p n examples with lengths @p src_len[i] and
 * @p tgt_len[i] (each >= 1), rule above.
 * Errors (run-time, NULL returned): ::TG_ERR_ARG (n < 1, NULL arrays, a length < 1, epoch < 0,
 * batch_tokens < 1, or an example longer than the budget: "batch_tokens 64 is smaller than
 * example 5's length 80 (max of S and T)"), ::TG_ERR_NOMEM.
 */
TG_API tg_batches *tg_batches_plan(tg_ctx *ctx, const int64_t *src_len, const int64_t *tgt_len,
                                   int64_t n, int64_t batch_tokens, uint64_t seed,
                                   int64_t epoch);
/** tg_batches_plan() over the lengths of @p d (an example too long names its line). */
TG_API tg_batches *tg_seq2seq_batches(const tg_seq2seq_data *d, int64_t batch_tokens,
                                      uint64_t seed, int64_t epoch);
/** Number of batches (0 for NULL). */
TG_API int64_t tg_batches_count(const tg_batches *b);
/** Batch @p i (0 <= i < count) in epoch order; all zero / NULL out of range. */
TG_API tg_batch tg_batches_get(const tg_batches *b, int64_t i);
/** Release (NULL is a no-op). */
TG_API void tg_batches_free(tg_batches *b);

/**
 * Fill the model inputs of @p n examples (e.g. a tg_batch's) of @p d, padded (SPEC rule above):
 * - @p src_ids (n, S) ::TG_I32: source ids, then the pad id;
 * - @p src_pad_mask (n, S) ::TG_F32 or ::TG_F64: 1 at padded positions, 0 elsewhere (the
 *   source key padding mask, also the memory key padding mask; True = padding as PyTorch);
 * - @p dec_in (n, T) ::TG_I32: BOS + target ids, then the pad id;
 * - @p labels (n, T) ::TG_I32: target ids + EOS, then -100 (the ignore_index of
 *   tg_cross_entropy, PyTorch's default).
 * S must be >= every S_i and T >= every T_i (a graph of a fixed larger shape works too); any
 * of the four tensors may be NULL (skipped). The tensors are leaves (tg_input()) whose data is
 * written in place.
 * Errors (run-time, on d's context; nothing written): ::TG_ERR_ARG (NULL d or examples, n < 1,
 * an index out of range), ::TG_ERR_SHAPE (not rank 2, rows != n, S or T too small, the mask's
 * shape differs from src_ids'), ::TG_ERR_DTYPE.
 */
TG_API tg_status tg_seq2seq_fill(const tg_seq2seq_data *d, const int64_t *examples, int64_t n,
                                 tg_tensor *src_ids, tg_tensor *src_pad_mask,
                                 tg_tensor *dec_in, tg_tensor *labels);
/**@}*/

/* ------------------------------------------------------------------------------------------ */
/** @name Byte-level text
 * A corpus for a byte-level language model (`tgrad train --text`): the files' bytes
 * concatenated in the order given, the vocabulary = the distinct bytes present, sorted (id i
 * is the i-th smallest byte), the last floor(n * val_fraction) bytes held out for validation.
 * The model sees windows of T byte ids and predicts, at each position, the next byte. */
/**@{*/

/** A loaded corpus (opaque): tg_text_load(); released by tg_text_free(). */
typedef struct tg_text tg_text;

/** Largest corpus (bytes, all files together): 1 GiB. */
#define TG_TEXT_MAX_BYTES ((int64_t)1 << 30)
/** Most validation windows (tg_text_val_batch()). */
#define TG_TEXT_MAX_VAL_WINDOWS 4096

/** Counts of a corpus. */
typedef struct tg_text_info {
    int64_t bytes;       /**< n, all files together */
    int64_t train_bytes; /**< n_train: bytes [0, n_train) train, [n_train, n) validation */
    int vocab_size;      /**< distinct bytes, 1..256 */
    int files;           /**< files read (a real path given twice is read once) */
    int dirs;            /**< directories given (skipped) */
    uint64_t hash;       /**< tg_text_hash() of the files: a resumed run checks its text */
} tg_text_info;

/**
 * Read and concatenate the @p n_paths files at @p paths. Directories are skipped (a glob like
 * `dir/x*` may match them) and a file reached again through another path (realpath()) is read
 * once; anything else that is not a regular file is refused without blocking (opened with
 * O_NONBLOCK, checked by fstat()). The last floor(n * @p val_fraction) bytes are the
 * validation split.
 * Memory: the bytes once (grown by doubling), at most ::TG_TEXT_MAX_BYTES.
 * Errors (run-time, NULL returned; messages name the file as given):
 * ::TG_ERR_ARG (val_fraction outside [0, 1), NULL paths, only directories given: "'d' is a
 * directory; give the files in it" and an example glob, no bytes: "no text: the input file
 * is empty"), ::TG_ERR_IO ("'x': cannot open: ...", "'x' is a FIFO, not a regular file", more
 * than ::TG_TEXT_MAX_BYTES: "'x': the files hold N bytes, more than the 1073741824 (1 GiB)
 * allowed", a read error), ::TG_ERR_NOMEM.
 */
TG_API tg_text *tg_text_load(tg_ctx *ctx, const char *const *paths, int n_paths,
                             double val_fraction);
/** Release (NULL is a no-op). */
TG_API void tg_text_free(tg_text *t);
/** Counts (all zero for NULL). */
TG_API tg_text_info tg_text_get_info(const tg_text *t);
/** The concatenated bytes (tg_text_info::bytes of them), owned by @p t; NULL for NULL. */
TG_API const unsigned char *tg_text_data(const tg_text *t);
/** The vocabulary: id -> byte (tg_text_info::vocab_size entries), owned by @p t. */
TG_API const unsigned char *tg_text_vocab(const tg_text *t);
/** The id of @p byte, or -1 if the corpus does not contain it. */
TG_API int32_t tg_text_id(const tg_text *t, unsigned char byte);
/**
 * The corpus hash: 64-bit FNV-1a (offset basis 0xcbf29ce484222325, prime 0x100000001b3) over
 * the @p n concatenated bytes in order, then over each file's cumulative end offset
 * (@p ends[0 .. n_files), 8 bytes little-endian each) and the number of files (8 bytes): the
 * same files in another order, or split differently, hash differently.
 */
TG_API uint64_t tg_text_hash(const unsigned char *bytes, int64_t n, const int64_t *ends,
                             int n_files);
/**
 * A training batch of @p B random windows: for each row a start s uniform in
 * [0, n_train - T - 1] (tg_rng_u64(ctx) % (n_train - T), one draw per row from @p ctx's RNG),
 * ids[b, j] = id(byte[s + j]), targets[b, j] = id(byte[s + j + 1]).
 * Shapes: @p ids and @p targets (B, T) ::TG_I32, row-major, written.
 * Errors (run-time, on @p ctx): ::TG_ERR_ARG (NULL arguments, B or T < 1, a training split
 * shorter than T + 1 bytes).
 */
TG_API tg_status tg_text_train_batch(tg_ctx *ctx, const tg_text *t, int64_t B, int64_t T,
                                     int32_t *ids, int32_t *targets);
/**
 * Validation windows of T: the W = floor((n - n_train - 1) / T) non-overlapping windows from
 * the start of the validation split, or, when W > ::TG_TEXT_MAX_VAL_WINDOWS, that many spread
 * evenly (window w starts at n_train + w * stride * T, stride = floor(W / 4096)), so
 * evaluation cost stays bounded. Returns their number (0 for NULL, T < 1 or no split).
 */
TG_API int64_t tg_text_val_windows(const tg_text *t, int64_t T);
/** Batches of @p B windows: ceil(tg_text_val_windows() / B). */
TG_API int64_t tg_text_val_batches(const tg_text *t, int64_t B, int64_t T);
/**
 * Validation batch @p k: windows k B .. k B + B - 1 into @p ids and @p targets (B, T)
 * ::TG_I32 (targets = the next byte's id); rows past the last window get ids 0 and targets -1
 * (an ignore_index for tg_cross_entropy()). Returns the number of real windows written (< B
 * only in the last batch; 0 for bad arguments).
 */
TG_API int64_t tg_text_val_batch(const tg_text *t, int64_t k, int64_t B, int64_t T,
                                 int32_t *ids, int32_t *targets);
/**@}*/

/* ------------------------------------------------------------------------------------------ */
/** @name Algorithmic tasks
 * Sequences of T random digits 0-9 (vocabulary 10) and a target per position: the same digit
 * (copy), the digit at T - 1 - t (reverse), or the t-th smallest digit (sort). `tgrad train`
 * trains on them by default. */
/**@{*/
/** The task. */
typedef enum tg_task_kind {
    TG_TASK_COPY = 0,    /**< target[t] = x[t] */
    TG_TASK_REVERSE = 1, /**< target[t] = x[T - 1 - t] */
    TG_TASK_SORT = 2     /**< target = x sorted ascending */
} tg_task_kind;

/** "copy", "reverse", "sort"; NULL for another value. */
TG_API const char *tg_task_name(tg_task_kind k);
/**
 * @p B sequences from @p rng_state, a private splitmix64 state (Steele et al. 2014; each
 * digit = next() % 10) advanced in place, so held-out data does not depend on training.
 * Shapes: @p ids, @p targets (B, T) ::TG_I32, written. Errors (no context): ::TG_ERR_ARG
 * (an unknown task, B or T < 1, NULL arrays or state).
 */
TG_API tg_status tg_task_batch(tg_task_kind k, uint64_t *rng_state, int64_t B, int64_t T,
                               int32_t *ids, int32_t *targets);
/** A training batch: as tg_task_batch() with each digit = tg_rng_u64(ctx) % 10.
 *  Errors (run-time, on @p ctx): ::TG_ERR_ARG as there. */
TG_API tg_status tg_task_train_batch(tg_ctx *ctx, tg_task_kind k, int64_t B, int64_t T,
                                     int32_t *ids, int32_t *targets);
/**@}*/

/** Decoder inputs for teacher forcing, (B, T) from labels (B, T): dec[b, 0] = @p bos,
 *  dec[b, t] = labels[b, t - 1] (the labels shifted right). */
TG_API void tg_shift_right(int64_t B, int64_t T, const int32_t *labels, int32_t bos,
                           int32_t *dec);

#ifdef __cplusplus
}
#endif

#endif
