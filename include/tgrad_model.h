/**
 * @file tgrad_model.h
 * @brief A ready model from any file `tgrad` writes: a training checkpoint (`tgrad train
 *        --checkpoint`: a byte-level LM, a built-in task's encoder or the encoder-decoder,
 *        with or without optimizer state) or an export (`tgrad export`), in one call.
 *
 * @code
 *   tg_model *m = tg_model_load(ctx, "lm.ckpt");       // config, vocabulary, weights
 *   if (!m) { fprintf(stderr, "%s\n", tg_ctx_message(ctx)); ... }
 *   const tg_model_info *info = tg_model_get_info(m);   // info->config, dtype, step, kind
 *   int32_t ids[64];
 *   int64_t n = tg_model_encode(m, "Hello", 5, ids, 64); // bytes -> token ids
 *   tg_generator *gen = tg_model_generator(m, 1);       // KV-cache decoding (tgrad_train.h)
 *   tg_generator_feed(gen, ids, n);                     // tg_generator_logits(gen): (1, V)
 *   // or a whole-sequence graph: tg_transformer_forward(ctx, tg_model_transformer(m), x, NULL)
 * @endcode
 *
 * What is read (every value is validated; a file is untrusted input):
 * - **checkpoint** (metadata `format` = "tgrad-checkpoint-1"): `model.layers`, `model.d_model`,
 *   `model.heads`, `model.d_ff`, `model.seq_len`, `model.vocab_size`, `model.norm_first`,
 *   `model.activation` (relu | gelu), `model.pos` (learned | sinusoidal), and if present
 *   `model.arch` (encoder | lm | seq2seq; absent: lm for text, encoder for a task),
 *   `model.decoder_layers` (seq2seq), `model.causal`, `model.tie_weights`, `model.dtype`
 *   (f32 | f64), `model.scale_embeddings` (0 | 1, absent 0), `data.mode` (text | task | pairs),
 *   `data.vocab` (text: the token bytes as hex, strictly increasing), `data.task`,
 *   `optim.step`; a translation checkpoint (`data.mode` pairs, written by `tgrad train
 *   --pairs`; model.arch seq2seq) has `tokenizer.kind` (bytes | sentencepiece) and, for
 *   sentencepiece, `tokenizer.model` (strict base64 of the serialized model, at most
 *   ::TG_TOKENIZER_MAX_MODEL_BYTES decoded: tg_tokenizer_meta_read()); model.vocab_size must be
 *   260 for bytes. The training options (`train.*`) are not needed
 *   for a model and are ignored; the training state (`data.epoch`, `data.batch`,
 *   `data.position`, `train.steps`, `train.best_val`, `rng`), when present, must be what
 *   tg_train_state_read() accepts, so a checkpoint `tgrad train --resume` refuses is refused
 *   here too. Tensors: the parameters, plus optimizer state (`adam.m.<p>`, `adam.v.<p>`,
 *   `sgd.momentum.<p>` of a parameter p, shaped like it, every value finite and Adam's second
 *   moments >= 0), which is skipped.
 * - **export** (`format` = "tgrad-export-1"): `config` (JSON: vocab_size, max_seq_len,
 *   n_layers, d_model, n_heads, d_ff, activation, norm_first, pos, causal, tie_weights,
 *   layer_norm_eps, dropout, dtype; an encoder-decoder's has n_decoder_layers and
 *   scale_embedding (true: token embeddings times sqrt(d_model); absent: false) instead of
 *   causal), `vocab` (JSON array: the byte of each id; the task encoder-decoder's last entry
 *   is null, its BOS), `bos_id` (encoder-decoder: 10 for a task, 1 for a translation model),
 *   `data` ("text" | "task:<name>" | "pairs"), `step`. A translation model's export (`data`
 *   "pairs", an encoder-decoder config, vocab_size at most 2^20, byte-level exports at most
 *   256) has no `vocab` (refused if present) but the checkpoint's `tokenizer.kind` and
 *   `tokenizer.model`, read and checked exactly as a translation checkpoint's. Tensors: the
 *   parameters; a tied model's `head.weight` (PyTorch lists both keys) must equal
 *   `tok_emb.weight` and is otherwise skipped.
 *
 * The vocabulary: a text model's ids stand for the bytes of `data.vocab` (the corpus's
 * distinct bytes, sorted); a task model's ids 0-9 for the digits '0'-'9'; the encoder-decoder
 * adds BOS (id 10, tg_model_info::bos_id), which stands for no byte. A translation model's
 * ids are its tokenizer's (unk 0, bos 1, eos 2, pad 3, then pieces or bytes): tg_model_encode()
 * and tg_model_decode() do not apply (every id stands for no byte); use
 * tg_model_tokenizer() (bytes) or tg_spm_load() of tg_model_tokenizer_bytes() (sentencepiece).
 *
 * Loading is strict, as PyTorch's `load_state_dict(strict=True)`: every parameter of the
 * config must be in the file with its shape, and nothing else may be (but the optimizer state
 * and tied head above). Values of another float dtype are converted to the model's dtype by
 * the rule of ::tg_dtype.
 */
#ifndef TGRAD_MODEL_H
#define TGRAD_MODEL_H

#include "tgrad_data.h"
#include "tgrad_io.h"
#include "tgrad_train.h"

#ifdef __cplusplus
extern "C" {
#endif

/** Which file a model came from. */
typedef enum tg_model_format {
    TG_MODEL_CHECKPOINT = 0, /**< `tgrad train --checkpoint` ("tgrad-checkpoint-1") */
    TG_MODEL_EXPORT = 1      /**< `tgrad export` ("tgrad-export-1") */
} tg_model_format;

/** What a model computes. */
typedef enum tg_model_kind {
    TG_MODEL_LM = 0,      /**< decoder-only byte LM (config.causal): next-token logits */
    TG_MODEL_ENCODER = 1, /**< a built-in task's encoder: per-position logits (not causal) */
    TG_MODEL_SEQ2SEQ = 2  /**< encoder-decoder (config.n_decoder_layers > 0) */
} tg_model_kind;

/** Everything the file says about the model. */
typedef struct tg_model_info {
    tg_transformer_config config; /**< complete: pass to tg_transformer_init() for a copy */
    tg_dtype dtype;               /**< parameter dtype: ::TG_F32 or ::TG_F64 */
    tg_model_format format;
    tg_model_kind kind;
    int64_t step;                 /**< optimizer steps trained (0 if the file does not say) */
    char task[16];                /**< built-in task ("copy", "reverse", "sort"); "" for text */
    int32_t bos_id;               /**< the begin-of-sequence id (seq2seq task: 10, translation:
                                       ::TG_TOKEN_BOS = 1), or -1 */
    char tokenizer[16];           /**< a translation model's tokenizer.kind ("bytes" or
                                       "sentencepiece"); "" for the byte-vocabulary models */
} tg_model_info;

/** A loaded model: its transformer, parameters and vocabulary. Opaque; owned by the context. */
typedef struct tg_model tg_model;

/**
 * Read @p path (a checkpoint or an export, see the file comment) and build the model in
 * @p ctx: the transformer of its config (tg_transformer_init(), parameters named as the file
 * names them) with the file's values, and its vocabulary.
 * The file is read and validated (metadata, then that the parameters the config claims do not
 * exceed the values the file holds, so a forged config cannot allocate more than the file's
 * size) before the model is created; the tensors read are released before returning, so
 * the context keeps only the model.
 * Ownership: the model and its tensors belong to @p ctx (tg_ctx_free(), or tg_ctx_rewind() to
 * a mark taken before this call). On failure NULL is returned, the error is recorded on
 * @p ctx as a run-time error, like every file call's (it does not stick: the next call
 * starts afresh, see "Errors" in tgrad.h) and the context holds exactly the bytes it held before the call (tg_ctx_bytes()).
 * Errors: those of tg_safetensors_read() (::TG_ERR_IO, ::TG_ERR_TRUNCATED, ...);
 * ::TG_ERR_FORMAT (not a tgrad checkpoint or export, a missing or malformed field, fields
 * that disagree, e.g. `tg_model_load: lm.ckpt: metadata 'model.heads' is 3, which does not
 * divide model.d_model 64`, optimizer state that is not finite); ::TG_ERR_MISMATCH (a tensor
 * missing, mis-shaped or unexpected, named); those of tg_transformer_init() (::TG_ERR_NOMEM, the memory limit); ::TG_ERR_ARG
 * (NULL arguments).
 */
TG_API tg_model *tg_model_load(tg_ctx *ctx, const char *path);
/**
 * Like tg_model_load() from a file the caller has read (tg_safetensors_read_mem(), _fd());
 * @p st is borrowed (its tensors stay in the context: they are the caller's).
 * Messages name the file "<memory>" unless @p label is given.
 */
TG_API tg_model *tg_model_load_from(tg_ctx *ctx, const tg_safetensors *st, const char *label);

/** The file's description of the model; NULL for NULL. Owned by the model. */
TG_API const tg_model_info *tg_model_get_info(const tg_model *m);
/** The transformer (parameters, config), for tg_transformer_forward(),
 *  tg_transformer_forward_seq2seq(), tg_generator_new(), an optimizer; NULL for NULL. */
TG_API tg_transformer *tg_model_transformer(tg_model *m);
/** Number of parameter tensors, in the file's state_dict order of tg_transformer_init(). */
TG_API int64_t tg_model_n_params(const tg_model *m);
/** Parameter @p i (0 <= i < tg_model_n_params()), named by its state_dict key; NULL out of
 *  range. Use the list for tg_optim_new() (fine-tuning) or tg_params_save(). */
TG_API tg_tensor *tg_model_param(const tg_model *m, int64_t i);

/** Vocabulary size V (= info->config.vocab_size); 0 for NULL. */
TG_API int64_t tg_model_vocab_size(const tg_model *m);
/** The byte token @p id stands for (0-255), or -1 for BOS or an id out of [0, V). */
TG_API int tg_model_token_byte(const tg_model *m, int32_t id);
/** The id of byte @p byte (0-255), or -1 if the vocabulary lacks it. */
TG_API int32_t tg_model_byte_token(const tg_model *m, int byte);
/**
 * Encode @p n bytes of @p text into ids, at most @p cap of them (@p ids may be NULL when
 * @p cap is 0, to ask the length). Returns the number of ids (n), or -1 with a run-time
 * error on the context: ::TG_ERR_ARG naming the first byte the vocabulary lacks (`byte 0x7e
 * '~' at offset 3 is not in the model's vocabulary of 65 bytes`) or n > @p cap.
 */
TG_API int64_t tg_model_encode(const tg_model *m, const char *text, size_t n, int32_t *ids,
                               int64_t cap);
/**
 * Decode @p n ids into bytes at @p out (room for n bytes; not NUL-terminated). Returns n, or
 * -1 with a run-time ::TG_ERR_ARG naming the first id that stands for no byte (BOS, or out of
 * range).
 */
TG_API int64_t tg_model_decode(const tg_model *m, const int32_t *ids, int64_t n, char *out);

/**
 * The serialized tokenizer model of a translation checkpoint (`tokenizer.model`, decoded from
 * base64; sentencepiece only) and its size in *size; NULL, 0 for any other model (bytes
 * tokenizer, LM, task, export). Owned by the model (the context's memory).
 * The core library cannot load it (it does not depend on SentencePiece): with libtgrad_spm,
 * `tg_spm_load(ctx, tg_model_tokenizer_bytes(m, &n), n)` (tgrad_spm.h) validates and loads it;
 * check that its tg_tokenizer_vocab_size() equals tg_model_vocab_size().
 */
TG_API const void *tg_model_tokenizer_bytes(const tg_model *m, size_t *size);
/**
 * A ready tokenizer for a translation model whose tokenizer.kind is "bytes": tg_tokenizer_bytes()
 * (vocabulary 260 = model.vocab_size). Owned by the caller (tg_tokenizer_free()).
 * Errors (run-time, NULL returned): ::TG_ERR_UNSUPPORTED for kind "sentencepiece" (the message
 * says to use tg_spm_load() on tg_model_tokenizer_bytes()), ::TG_ERR_ARG for a model that is
 * not a translation model, ::TG_ERR_NOMEM.
 */
TG_API tg_tokenizer *tg_model_tokenizer(const tg_model *m);

/** tg_generator_new() on the model's transformer (an LM or the encoder-decoder): incremental
 *  decoding through the KV cache for @p batch sequences. Errors: those of tg_generator_new(). */
TG_API tg_generator *tg_model_generator(tg_model *m, int64_t batch);

#ifdef __cplusplus
}
#endif
#endif /* TGRAD_MODEL_H */
