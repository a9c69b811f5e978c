/*
 * ckpt_config.h - what a `tgrad train` checkpoint claims, validated before anything is built.
 *
 * A checkpoint's metadata (model.*, data.*, train.*, optim.step, rng) is untrusted input: the
 * data.* and train.* fields are read by the library (tg_train_record_read: the mode and its
 * data, every value parsed and in range), and every field that maps to an option is validated
 * with the `tgrad train` option table through cli_set() (so it obeys exactly the command
 * line's bounds, with its messages), the claimed config is checked against the shapes of the tensors
 * in the file (a claim of seq_len 100000000 with a (64, 128) pos_emb.weight is refused before
 * any allocation), and the memory the config needs is estimated and compared with a limit.
 * No I/O, nothing printed: each function returns true, or false with one line in @p err
 * (without the "tgrad <cmd>: --resume 'path': " prefix the caller adds), so a libFuzzer harness
 * can call ckpt_config_load() on tg_safetensors_read_mem() of arbitrary bytes.
 * This is the one place a checkpoint's fields and tensors are validated: `tgrad train
 * --resume`, `tgrad sample` (ckpt_config_load), `tgrad export` (ckpt_config_export), `tgrad
 * info` and `tgrad translate` (ckpt_config_check) all go through it, for every kind of
 * checkpoint (text, task, seq2seq task, translation with bytes or SentencePiece), so they give
 * every file the same verdict. Beyond the fields: the training state as the library reads it
 * (tg_train_state_read), a translation checkpoint's tokenizer as translate loads it
 * (tg_tokenizer_meta_read, tg_spm_load; its size against model.vocab_size), its data hashes
 * and cursor, and the tensors (tg_checkpoint_check: shapes, dtypes, optimizer state complete
 * and finite). An average of checkpoints (`tgrad average`: average.n and average.steps) holds
 * the parameters and no optimizer state: validated as such, it is taken by every command but
 * `train --resume`, which refuses it as the wrong kind of checkpoint (info->usage).
 */
#ifndef TG_CKPT_CONFIG_H
#define TG_CKPT_CONFIG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "tgrad_train.h"
#include "train_args.h"

/* What the checkpoint says beyond the options (which go into train_args). */
typedef struct ckpt_info {
    bool text;                 /* data.mode: "text" (LM) or "task" */
    bool seq2seq;              /* model.arch seq2seq: the encoder-decoder */
    bool pairs;                /* data.mode "pairs": translation (tokenizer.* fields) */
    int vocab_size;            /* model.vocab_size: data.vocab's length (text), 10 (task),
                                * 11 (seq2seq task: the digits and BOS) */
    tg_train_record rec;       /* data.* and train.* as the library reads them
                                * (tg_train_record_read): the text's vocabulary, size, file
                                * count and hash (data.bytes, data.files, data.text_hash absent
                                * in older checkpoints), the task, a translation's data hashes */
    int64_t step;              /* optim.step: steps already taken */
    double best_val;           /* train.best_val (INFINITY when absent) */
    int64_t epoch, batch;      /* data.epoch, data.batch: a translation run's cursor (-1:
                                * absent, as in the other kinds) */
    int n_kept;                /* train.kept: a --keep-last run's kept saves, their steps */
    int64_t kept[TRAIN_KEEP_LAST_MAX + 1];
    int64_t average_n;         /* average.n: the number of checkpoints this one is the mean of
                                * (`tgrad average`: parameters only, no optimizer state); 0:
                                * a training checkpoint */
    bool usage;                /* after a failure: the command line is at fault (options that
                                * contradict the checkpoint, the wrong kind of checkpoint for
                                * the command), not the file: exit status 2, not 1 */
} ckpt_info;

/*
 * Apply checkpoint @p st to @p a (which holds the defaults and the command line):
 * - model.* (arch, layers, decoder_layers, d_model, heads, d_ff, seq_len, norm_first,
 *   activation, pos, tie_weights, dtype), data.task and train.optimizer are the run's identity:
 *   they always come from the checkpoint; one that was given on the command line (@p given,
 *   NULL: none) with another value is an error ("a different config"). model.arch absent (older
 *   checkpoints) is the mode's own (text: lm, task: encoder); model.decoder_layers is required
 *   by a seq2seq checkpoint and absent or 0 in the others.
 * - train.* options, model.dropout and data.val_fraction are restored unless given again.
 * - every field, used or not, is validated: unknown "format", missing model fields, values out
 *   of the option's bounds, NaN, inf, non-numbers, inconsistencies (model.causal vs data.mode,
 *   model.vocab_size vs data.vocab) are errors naming the field and the value; then the
 *   training state (tg_train_state_read) and, for a translation checkpoint, its hashes, its
 *   cursor (data.epoch + data.batch <= optim.step) and its tokenizer (loaded; given
 *   --tokenizer, --vocab-size, --spm-type that contradict it are usage errors).
 * @p sample: the caller is `tgrad sample` (an encoder task checkpoint is then an error; a
 * seq2seq one is sampled with --source).
 */
bool ckpt_apply(const tg_safetensors *st, train_args *a, const cli_result *given, bool sample,
                ckpt_info *info, char *err, size_t n);

/* The transformer config of resolved options @p a with vocabulary @p vocab_size
 * (a->arch seq2seq: n_decoder_layers = a->decoder_layers). */
void train_model_config(const train_args *a, bool text, int64_t vocab_size,
                        tg_transformer_config *mc);
/* The parameter dtype of @p a. */
tg_dtype train_dtype(const train_args *a);

/*
 * The tensors of @p st against config @p mc and the options @p a (model.dtype,
 * train.optimizer, train.momentum): tg_checkpoint_check (every parameter of
 * tg_transformer_params with its shape, nothing else but optimizer state shaped like its
 * parameter, every tensor in the parameter dtype, the optimizer state complete for the
 * optimizer); its message without the function name in @p err.
 */
bool ckpt_check_tensors(const tg_safetensors *st, const tg_transformer_config *mc,
                        const train_args *a, char *err, size_t n);

/* Most checkpoints one `tgrad average` takes (average.n's bound). */
#define CKPT_AVERAGE_MAX 1024

/*
 * A rough upper bound of the bytes training (@p train: parameters, gradients, @p n_state
 * optimizer states per parameter, activations and their gradients for @p batch sequences of
 * max_seq_len) or inference (@p train false: one forward pass) of @p mc needs. Computed in
 * double: never overflows.
 */
double model_memory_estimate(const tg_transformer_config *mc, tg_dtype dt, int64_t batch,
                             int n_state, bool train);
/* Refuse a config whose estimate exceeds @p limit_bytes (phys_memory_bytes(): the machine's
 * physical memory, or ulimit -v if lower). */
bool model_memory_check(const tg_transformer_config *mc, tg_dtype dt, int64_t batch,
                        int n_state, bool train, double limit_bytes, char *err, size_t n);
/* Optimizer state tensors per parameter for @p a's optimizer (adam/adamw 2, sgd 1). */
int train_n_state(const train_args *a);

/*
 * Everything above for a checkpoint about to be loaded: ckpt_apply, train_resolve, the model
 * config, ckpt_check_tensors (tg_checkpoint_check: the shapes, every tensor's dtype against
 * model.dtype, the optimizer state complete for train.optimizer: adam.m.* and adam.v.* of
 * every parameter for adam/adamw, sgd.momentum.* for SGD with momentum, none otherwise; so
 * `tgrad sample` and `tgrad export` accept exactly the files `tgrad train --resume`
 * restores), and model_memory_check against @p limit_bytes (batch 1 and no optimizer for
 * @p sample, the run's batch and optimizer otherwise). With --resume, the
 * checkpoint's mode must match the command line's (--text given or not).
 */
bool ckpt_config_load(const tg_safetensors *st, train_args *a, const cli_result *given,
                      bool sample, double limit_bytes, ckpt_info *info,
                      tg_transformer_config *mc, char *err, size_t n);

/*
 * For `tgrad export`: everything ckpt_config_load checks for `tgrad sample` (every field, the
 * tensors against the config, their dtype against model.dtype), for a text or a task
 * checkpoint, without the memory estimate (export builds no model). @p a holds
 * train_defaults().
 */
bool ckpt_config_export(const tg_safetensors *st, train_args *a, ckpt_info *info,
                        tg_transformer_config *mc, char *err, size_t n);

/*
 * For `tgrad info` and `tgrad translate` on a file that claims to be a training checkpoint
 * (metadata format "tgrad-checkpoint-..."): everything ckpt_config_export checks, for any
 * kind, so info says whether train --resume, sample, translate and export will accept it.
 * @p a holds train_defaults().
 */
bool ckpt_config_check(const tg_safetensors *st, train_args *a, ckpt_info *info,
                       tg_transformer_config *mc, char *err, size_t n);

#endif
