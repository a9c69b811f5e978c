/**
 * @file tgrad_spm.h
 * @brief SentencePiece subword tokenizers (Kudo & Richardson 2018): train a model on sentences,
 *        load one from bytes or a `.model` file, and use it as a ::tg_tokenizer (tgrad_data.h).
 *
 * Built only with the meson feature `-Dsentencepiece=enabled` (or `auto`, the default, when
 * Debian's `libsentencepiece-dev` is installed) as libtgrad_spm.so and libtgrad_spm.a,
 * described by `tgrad-spm.pc` (which requires `tgrad` and `sentencepiece`). The core library
 * never depends on SentencePiece; in-tree programs built with it see `-DTG_HAVE_SPM`.
 *
 * **Models.** A SentencePiece model is a serialized `ModelProto` (protocol buffers): the
 * pieces (subword strings with a score and a type), the trainer's and the normalizer's
 * settings. The unigram model (Kudo 2018) segments a normalized sentence into the pieces of
 * highest total log-probability (Viterbi); the BPE model (Sennrich et al. 2016) applies the
 * learnt merges in order of score. Text is first normalized (default `nmt_nfkc`: Unicode NFKC
 * plus a few NMT-specific rules) and spaces become U+2581 "▁", so decoding gives back the
 * normalized text exactly.
 *
 * **Special ids.** Models tgrad trains have unk 0, bos 1, eos 2, pad 3 (::TG_TOKEN_UNK ...).
 * A model from elsewhere keeps its own ids, read from the model (`<unk>` of type UNKNOWN,
 * `<s>`, `</s>`, `<pad>` of type CONTROL, as SentencePiece's own `bos_id()` ...); it needs bos
 * and eos, pad may be missing (-1).
 *
 * **Untrusted bytes.** Checkpoints store the model's bytes, so tg_spm_load() treats them as
 * hostile: it validates the protobuf wire format itself before SentencePiece parses anything
 * (docs/io.md, "Tokenizers", lists every check). SentencePiece 0.1.97 trusts its input: a
 * hand-made normalization table (`precompiled_charsmap`) loads fine and then makes the first
 * encoding read outside its buffers (a crash or a silent over-read), and a piece starting
 * with a NUL byte makes the load throw a C++ exception out of SentencePiece.
 *
 * **Memory.** SentencePiece allocates with C++'s operator new and the tokenizer with malloc,
 * not through the context's allocator (tg_ctx_new_with()), so the context's memory limit does
 * not cover them; the model size and vocabulary limits below bound what a model can claim.
 *
 * **Global state.** SentencePiece logs to stderr through a process-wide level; the first call
 * of this library sets that level so that it logs nothing (library code never prints).
 * Training and loading are otherwise independent per call and thread-safe.
 */
#ifndef TGRAD_SPM_H
#define TGRAD_SPM_H

#include "tgrad.h"
#include "tgrad_data.h"

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/** Largest serialized model tg_spm_load() accepts (bytes). Models of 8000 pieces are ~400 KB. */
#define TG_SPM_MAX_MODEL_BYTES ((size_t)64 << 20)
/** Largest vocabulary (pieces) tg_spm_load() and tg_spm_train() accept. */
#define TG_SPM_MAX_VOCAB (1 << 20)
/** Longest piece (bytes) tg_spm_load() accepts. */
#define TG_SPM_MAX_PIECE_BYTES 1024

/** Model types tg_spm_train() can train. */
typedef enum tg_spm_type {
    TG_SPM_UNIGRAM = 0, /**< unigram language model (Kudo 2018), SentencePiece's default */
    TG_SPM_BPE = 1      /**< byte-pair encoding (Sennrich et al. 2016) */
} tg_spm_type;

/** Options of tg_spm_train(); start from tg_spm_train_defaults(). */
typedef struct tg_spm_train_opts {
    int64_t vocab_size;        /**< pieces including the 4 specials; default 8000, in [8, ::TG_SPM_MAX_VOCAB] */
    tg_spm_type type;          /**< default ::TG_SPM_UNIGRAM */
    double character_coverage; /**< share of characters (by count) the pieces must cover; the
                                    rest map to unk; default 1.0, in (0, 1] */
    /** sentences longer than this (bytes) are left out of training (as SentencePiece's
     *  `max_sentence_length`); default 4192, in [1, 2^30] */
    int64_t max_sentence_bytes;
    /** when nonzero (the default), training fails with ::TG_ERR_ARG if @c vocab_size is more
     *  than the sentences allow (SentencePiece's `hard_vocab_limit`); 0 lets the model be
     *  smaller */
    int hard_vocab_limit;
} tg_spm_train_opts;

/** The defaults: vocabulary 8000, unigram, character coverage 1.0, sentences up to 4192
 *  bytes, hard vocabulary limit. */
TG_API tg_spm_train_opts tg_spm_train_defaults(void);

/**
 * Sentence source for tg_spm_train(): store the next sentence (@p n bytes of UTF-8 at
 * @p *text, valid until the next call) and return 1; return 0 at the end; return -1 to stop
 * training with an error (the caller's own message may be set on the context first).
 */
typedef int (*tg_spm_next_fn)(void *user, const char **text, size_t *n);

/**
 * Train a SentencePiece model on the sentences @p next yields, with the special ids unk 0,
 * bos 1, eos 2, pad 3 (pieces `<unk>`, `<s>`, `</s>`, `<pad>`), `nmt_nfkc` normalization,
 * every sentence used (no sampling or shuffling) and one thread. The result is deterministic:
 * the same sentences and options give the same model bytes on any machine and thread count.
 * Empty sentences are skipped; a sentence that is not valid UTF-8 or has a NUL byte is an
 * error (::TG_ERR_ARG with its index).
 *
 * **How.** @p next is called in the caller's thread until it returns 0, and the sentences are
 * kept in memory (SentencePiece's trainer holds them all anyway). SentencePiece's trainer then
 * runs in a child process (fork()) with its output on a pipe: on some inputs it stops the
 * process (its CHECK failures call exit()), so only the child can end that way, and what it
 * printed becomes the error message. The caller's process prints nothing and is never
 * stopped. The child's memory is copy-on-write; training uses one thread.
 *
 * @return the tokenizer (kind "sentencepiece", vocabulary @c opts->vocab_size or fewer when
 *         @c hard_vocab_limit is 0), holding the serialized model (tg_tokenizer_model(): the
 *         bytes of a `.model` file, e.g. for tg_spm_save()); owned by the caller, released by
 *         tg_tokenizer_free(). NULL on error.
 * **Errors** (run-time, on @p ctx): ::TG_ERR_ARG (NULL @p next, options out of range, no
 * sentences, none with a letter or digit, a bad sentence, @p next returned -1, vocabulary too
 * large for the data or any other refusal of the trainer: its message; the trainer stopping
 * or dying: its exit status or signal and last message), ::TG_ERR_IO (pipe() or fork()
 * failed), ::TG_ERR_NOMEM. The model is then not made.
 * Source: Kudo & Richardson 2018 (SentencePiece), Kudo 2018 (unigram training: EM with pruning).
 */
TG_API tg_tokenizer *tg_spm_train(tg_ctx *ctx, const tg_spm_train_opts *opts,
                                  tg_spm_next_fn next, void *user);

/** tg_spm_train() on an array: @p n sentences @p texts[i] of @p lens[i] bytes (@p lens NULL:
 *  NUL-terminated strings). Same result as feeding them one by one in order. */
TG_API tg_tokenizer *tg_spm_train_strings(tg_ctx *ctx, const tg_spm_train_opts *opts,
                                          const char *const *texts, const size_t *lens,
                                          int64_t n);

/**
 * Check serialized model bytes without loading them: the checks of tg_spm_load() that need no
 * SentencePiece (docs/io.md lists them). ::TG_OK or the error (run-time, on @p ctx):
 * ::TG_ERR_FORMAT (malformed wire format, a field of the wrong type, a value out of range),
 * ::TG_ERR_UNSUPPORTED (a valid model tgrad does not take: model type word/char, a custom
 * normalization table, self-test data), ::TG_ERR_HEADER_SIZE (over ::TG_SPM_MAX_MODEL_BYTES),
 * ::TG_ERR_ARG (NULL).
 */
TG_API tg_status tg_spm_validate(tg_ctx *ctx, const void *model, size_t size);

/**
 * The type of serialized model bytes (trainer_spec.model_type: ::TG_SPM_UNIGRAM, also when the
 * field is absent, as SentencePiece defaults it, or ::TG_SPM_BPE) into *@p type, after the
 * checks of tg_spm_validate() (its errors; ::TG_ERR_ARG for a NULL @p type). E.g. to compare
 * a checkpoint's model with the type a program was asked to train.
 */
TG_API tg_status tg_spm_model_type(tg_ctx *ctx, const void *model, size_t size,
                                   tg_spm_type *type);

/**
 * A tokenizer from serialized model bytes (a `.model` file's content, or what a checkpoint
 * stored): validated as tg_spm_validate(), then loaded by SentencePiece and checked (pieces,
 * bos and eos present). @p model is copied (tg_tokenizer_model() returns the copy).
 * Encoding: `EncodeAsIds` of the text (no bos/eos added); decoding: `DecodeIds` without the
 * special ids (unknown pieces vanish), so decode(encode(s)) is the normalized s.
 * @return the tokenizer, owned by the caller (tg_tokenizer_free()); NULL on error.
 * **Errors** (run-time, on @p ctx): those of tg_spm_validate(); ::TG_ERR_FORMAT with
 * SentencePiece's message if it refuses the model; ::TG_ERR_UNSUPPORTED for a model without
 * `<s>` or `</s>` control pieces (tgrad needs bos and eos); ::TG_ERR_NOMEM.
 */
TG_API tg_tokenizer *tg_spm_load(tg_ctx *ctx, const void *model, size_t size);

/** tg_spm_load() on the content of the file @p path (at most ::TG_SPM_MAX_MODEL_BYTES).
 *  Errors: ::TG_ERR_IO (cannot open or read, with the path and the system's reason), then
 *  those of tg_spm_load(). */
TG_API tg_tokenizer *tg_spm_load_file(tg_ctx *ctx, const char *path);

/** Write the serialized model of a SentencePiece tokenizer to @p path (a `.model` file, as
 *  `spm_train` writes and Python's `sentencepiece.SentencePieceProcessor(model_file=...)`
 *  reads), atomically, through tg_file_write() (tgrad_io.h): only a regular file (or a link
 *  to one) is replaced, through a temporary file renamed into place, so a failed save leaves
 *  an existing model byte-identical and creates no new file; a device, FIFO or directory is
 *  refused untouched. Errors (run-time): ::TG_ERR_ARG (NULL, or a tokenizer without a model),
 *  ::TG_ERR_IO (with the failing step, the path and the system's reason). */
TG_API tg_status tg_spm_save(const tg_tokenizer *tok, const char *path);

#ifdef __cplusplus
}
#endif

#endif
