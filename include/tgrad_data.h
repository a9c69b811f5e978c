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
 */
typedef struct tg_tokenizer_ops {
    const char *kind; /**< short name stored in checkpoints, e.g. "sentencepiece" */
    int64_t (*encode)(void *impl, const char *text, size_t n, int32_t *ids, int64_t cap,
                      char *err, size_t err_size);
    int64_t (*decode)(void *impl, const int32_t *ids, int64_t n, char *out, size_t cap,
                      char *err, size_t err_size);
    void (*free)(void *impl);
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
/**@}*/

#ifdef __cplusplus
}
#endif

#endif
