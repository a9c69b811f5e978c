/*
 * train_args.h - the options of `tgrad train` and `tgrad sample`: one cliopt table each, and
 * parse-only entry points (no I/O, nothing printed, no globals besides getopt's own), so that
 * the commands, their tests and a libFuzzer harness share exactly the same validation.
 *
 * Every numeric option has bounds (cliopt.h); a value outside them, NaN, inf, a fraction for an
 * integer or anything that is not a number is refused with one line naming the option, the
 * value given and what is allowed. Checkpoint metadata is validated with the same table
 * (ckpt_config.h), so a value a checkpoint carries is held to exactly the command line's rules.
 */
#ifndef TG_TRAIN_ARGS_H
#define TG_TRAIN_ARGS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "cliopt.h"
#include "tgrad.h"
#include "tgrad_train.h"

/* Bounds shared by the tables, the checkpoint validation and the tests. */
#define TRAIN_MAX_LAYERS 1024
#define TRAIN_MAX_D_MODEL 65536
#define TRAIN_MAX_HEADS 1024
#define TRAIN_MAX_D_FF 262144
#define TRAIN_MAX_SEQ_LEN TG_TRANSFORMER_MAX_SEQ_LEN /* every loader's bound */
#define TRAIN_MAX_BATCH 65536
#define TRAIN_MAX_STEPS 1000000000 /* also warmup, eval-every, save-every, stop-after */
#define TRAIN_MAX_THREADS TG_MAX_THREADS
#define TRAIN_KEEP_LAST_MAX 20 /* --keep-last */
#define SAMPLE_MAX_TOKENS 1000000000
#define SAMPLE_MAX_TOP_K 256 /* the byte vocabulary has at most 256 symbols */

/* Choice indices (order of the '|'-separated lists in the tables). */
enum { ACT_RELU = 0, ACT_GELU = 1 };
enum { POS_LEARNED = 0, POS_SINUSOIDAL = 1 };
enum { OPT_ADAMW = 0, OPT_ADAM = 1, OPT_SGD = 2 };
enum { SCHED_COSINE = 0, SCHED_NOAM = 1 }; /* --schedule */
enum { DT_F32 = 0, DT_F64 = 1 };
enum { TOK_SENTENCEPIECE = 0, TOK_BYTES = 1 };
enum { SPM_UNIGRAM = 0, SPM_BPE = 1 };
enum { EMB_NONE = 0, EMB_SQRT = 1 };
#define TRAIN_MAX_VOCAB 1000000
#define TRAIN_MAX_BATCH_TOKENS 100000000
/* --arch: -1 (not given) is the mode's own: text -> ARCH_LM, a task -> ARCH_ENCODER. */
enum { ARCH_ENCODER = 0, ARCH_LM = 1, ARCH_SEQ2SEQ = 2 };
/* The sequence-to-sequence task's vocabulary: the 10 digits and BOS (id 10), which starts
 * every decoder input (docs/transformer.md, "The sequence-to-sequence task"). */
#define SEQ2SEQ_BOS 10
#define SEQ2SEQ_VOCAB 11
/* --task uses task_kind's order (data.h): copy, reverse, sort. */

/* `tgrad train` options. Integers are int64_t, numbers double, choices int, flags bool.
 * -1 in d_model, d_ff, seq_len, steps, eval_every, lr, min_lr means "the mode's default", filled
 * in by train_resolve(); 0 in threads, save_every, stop_after means "not set". */
typedef struct train_args {
    /* model */
    int64_t layers, d_model, heads, d_ff, seq_len;
    int arch;               /* ARCH_*, -1: the mode's own (resolved by train_resolve) */
    int64_t decoder_layers; /* seq2seq decoder layers; -1: as --layers (train_resolve) */
    bool post_norm, tie;
    int activation, pos, dtype;
    double dropout;
    double attn_dropout, act_dropout; /* -1 (not given): as dropout; 0: none; else p */
    bool keep_best; /* also keep the best checkpoint (train_plan_best_path) */
    int64_t keep_last; /* --keep-last N: also keep the last N saves (train_keep.h); 0: off */
    /* optimisation */
    int64_t batch, steps, warmup, eval_every, seed, threads;
    int64_t grad_accum; /* --grad-accum K: micro-batches per step (K divides batch) */
    double lr, weight_decay, clip, min_lr, val_fraction, target_acc, momentum;
    int optimizer;
    double beta2, eps;      /* --beta2, --eps: Adam/AdamW (0.999, 1e-8) */
    int schedule;           /* SCHED_*: --schedule cosine|noam; noam: lr is the factor */
    int precision;          /* --precision f32|bf16: tg_precision of the products (f32) */
    double label_smoothing; /* --label-smoothing: the training loss only (0) */
    bool detect_anomaly;
    bool dry_run;
    bool unfused; /* --unfused: tg_ctx_set_fusion(ctx, false) */
    bool no_cache; /* --no-cache: seq2seq greedy evaluation without the KV cache */
    /* data */
    cli_list text;
    int task;
    /* translation (--pairs): sentence pairs, tokenizer, token-budget batches */
    const char *pairs, *valid, *spm;
    int tokenizer;          /* TOK_*, -1: SentencePiece when built with it, else bytes */
    int spm_type;           /* SPM_UNIGRAM | SPM_BPE */
    int emb_scale;          /* EMB_*, -1: the mode's own (pairs: sqrt) */
    int64_t vocab_size;     /* SentencePiece vocabulary to train (8000) */
    int64_t batch_tokens;   /* tokens per batch, padded positions counted (2048) */
    double target_bleu;     /* stop at this validation BLEU (0 = never) */
    double spm_alpha;       /* subword regularization's alpha (-1: not given, no sampling) */
    int64_t spm_nbest;      /* ... among the l best segmentations (64) */
    /* files */
    const char *checkpoint, *resume, *log, *plot;
    const char *dot; /* --dot: the training graph as Graphviz DOT, written once built */
    bool plot_log;   /* --plot-log: the plot's loss axis on a log scale */
    int64_t save_every, stop_after;
    bool force, quiet;
} train_args;

/* `tgrad sample` options. */
typedef struct sample_args {
    const char *checkpoint, *prompt;
    const char *source; /* --source DIGITS: a seq2seq checkpoint's source sequence */
    int64_t tokens, top_k, seed, threads;
    double temperature;
    bool no_cache; /* --no-cache: recompute the whole window per token (the old path) */
    int precision; /* --precision f32|bf16 (tg_precision) */
} sample_args;

/* The option tables (static, valid for the whole program). */
const cli_command *train_command(void);
const cli_command *sample_command(void);

/* Fill @p a with the defaults of `tgrad train` with no options. */
void train_defaults(train_args *a);

/*
 * Parse `tgrad train` arguments (argv[0] = "train") into @p a and @p r: defaults, the table's
 * checks, then the checks between options that need nothing else (--text and --task exclude
 * each other). Returns CLI_OK, CLI_HELP or CLI_ERROR with one line in @p err (without the
 * "tgrad train: " prefix). No I/O. Call train_free() afterwards in every case.
 */
int train_parse(int argc, char **argv, train_args *a, cli_result *r, char *err, size_t n);
/* Release what train_parse allocated (the --text list, the positional array). */
void train_free(train_args *a, cli_result *r);

/*
 * After the checkpoint (if any) has been applied: fill in the defaults that depend on the mode
 * (text or task) and the architecture (--arch: the mode's own unless given; seq2seq has its
 * own defaults: batch 64, eval every 100 steps, decoder layers = --layers), check the options against each other (--heads divides --d-model, ...), and
 * make a resumed run save back to the file it resumed from unless --checkpoint says otherwise.
 * Returns false with one line in @p err. No I/O.
 */
bool train_resolve(train_args *a, bool text, char *err, size_t n);

/* --pairs: the translation defaults for every option not given on the command line (@p r):
 * the encoder-decoder (3 + 3 layers, d_model 256, 4 heads, d_ff 1024, sinusoidal positions,
 * tied embeddings scaled by sqrt(d_model)), dropout 0.1, label smoothing 0.1, Adam-style
 * beta2 0.98 and eps 1e-9 with the noam schedule (factor 0.5, warmup 400), 1500 steps with
 * an evaluation every 500, sequences of at most 128 tokens (and --batch-tokens 2048 for every
 * run). Call before train_resolve(). */
void train_pairs_defaults(train_args *a, const cli_result *r);

/* Parse `tgrad sample` arguments as train_parse does (--checkpoint is required). */
int sample_parse(int argc, char **argv, sample_args *a, cli_result *r, char *err, size_t n);
void sample_free(sample_args *a, cli_result *r);

#endif
