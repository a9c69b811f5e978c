/*
 * train_args.c - option tables and parse-only entry points of `tgrad train` and `tgrad sample`
 * (see train_args.h). No I/O: every function here may be called on arbitrary input.
 */
#include "train_args.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#define TA(f) offsetof(train_args, f)
#define SA(f) offsetof(sample_args, f)

#define INT(nm, f, mv, lo, hi, h, g)                                                           \
    {.name = nm, .kind = CLI_INT, .offset = TA(f), .metavar = mv, .help = h, .imin = lo,       \
     .imax = hi, .group = g}
#define NUM(nm, f, mv, lo, hi, fl, h, g)                                                       \
    {.name = nm, .kind = CLI_NUM, .offset = TA(f), .metavar = mv, .help = h, .fmin = lo,       \
     .fmax = hi, .flags = fl, .group = g}
#define CHOICE(nm, f, ch, h, g)                                                                \
    {.name = nm, .kind = CLI_CHOICE, .offset = TA(f), .choices = ch, .help = h, .group = g}
#define FLAG(nm, f, h, g) {.name = nm, .kind = CLI_FLAG, .offset = TA(f), .help = h, .group = g}
#define PATH(nm, f, mv, h, g)                                                                  \
    {.name = nm, .kind = CLI_PATH, .offset = TA(f), .metavar = mv, .help = h, .group = g}

static const char *const G_MODEL = "model (taken from the checkpoint with --resume):";
static const char *const G_TRAIN = "training (restored from the checkpoint with --resume unless "
                                   "given again):";
static const char *const G_DATA = "data:";
static const char *const G_FILES = "files:";

static const cli_option train_opts[] = {
    CHOICE("arch", arch, "encoder|lm|seq2seq", "task: encoder or seq2seq; --text: lm (encoder "
           "/ lm)", G_MODEL),
    INT("layers", layers, "N", 1, TRAIN_MAX_LAYERS, "encoder layers (2)", G_MODEL),
    INT("decoder-layers", decoder_layers, "M", 1, TRAIN_MAX_LAYERS, "seq2seq: decoder layers "
        "(as --layers)", G_MODEL),
    INT("d-model", d_model, "D", 1, TRAIN_MAX_D_MODEL, "model width (text 128, task 64)",
        G_MODEL),
    INT("heads", heads, "H", 1, TRAIN_MAX_HEADS, "attention heads, must divide D (4)", G_MODEL),
    INT("d-ff", d_ff, "F", 1, TRAIN_MAX_D_FF, "feed-forward width (4*D)", G_MODEL),
    INT("seq-len", seq_len, "T", 2, TRAIN_MAX_SEQ_LEN, "sequence length (text 64, task 12)",
        G_MODEL),
    FLAG("post-norm", post_norm, "post-norm layers (default pre-norm)", G_MODEL),
    CHOICE("activation", activation, "relu|gelu", "feed-forward activation (relu)", G_MODEL),
    CHOICE("pos", pos, "learned|sinusoidal", "positions (learned)", G_MODEL),
    FLAG("tie-weights", tie, "output projection = token embedding", G_MODEL),
    CHOICE("dtype", dtype, "f32|f64", "parameter and activation dtype (f32)", G_MODEL),
    NUM("dropout", dropout, "P", 0, 1, CLI_FMAX_OPEN, "dropout probability (0)", G_TRAIN),
    NUM("attn-dropout", attn_dropout, "P", 0, 1, CLI_FMAX_OPEN, "dropout on the attention "
        "weights, apart from --dropout (fairseq's --attention-dropout; 0 = none; default: "
        "--dropout's, as nn.Transformer)", G_TRAIN),
    NUM("act-dropout", act_dropout, "P", 0, 1, CLI_FMAX_OPEN, "dropout inside the "
        "feed-forward block after its activation, apart from --dropout (fairseq's "
        "--activation-dropout; 0 = none; default: --dropout's)", G_TRAIN),
    CHOICE("precision", precision, "f32|bf16", "compute precision of the matrix products: bf16 "
           "rounds their operands to bfloat16 and accumulates in f32; weights, gradients, "
           "optimizer state, softmax and layer norm stay f32 (f32; --dtype f32 only)", G_TRAIN),
    INT("batch", batch, "B", 1, TRAIN_MAX_BATCH, "sequences per step (32, seq2seq 64)",
        G_TRAIN),
    INT("grad-accum", grad_accum, "K", 1, TRAIN_MAX_BATCH, "split each step's batch into K "
        "micro-batches, gradients summed in a fixed tree; K must divide --batch (1)", G_TRAIN),
    INT("steps", steps, "N", 1, TRAIN_MAX_STEPS, "training steps (text 1500, task 2000 max, pairs 1000)",
        G_TRAIN),
    NUM("lr", lr, "LR", 0, 10, 0, "peak learning rate (3e-3); --schedule noam: the factor "
        "(1)", G_TRAIN),
    CHOICE("schedule", schedule, "cosine|noam", "learning rate schedule: cosine = linear "
           "warmup, then cosine decay to --min-lr; noam = LR D^-0.5 min(n^-0.5, n W^-1.5) at "
           "update n, W = --warmup (Vaswani et al. 2017) (cosine)", G_TRAIN),
    CHOICE("optimizer", optimizer, "adamw|adam|sgd", "optimizer (adamw)", G_TRAIN),
    NUM("momentum", momentum, "M", 0, 1, 0, "SGD momentum (0.9)", G_TRAIN),
    NUM("beta2", beta2, "B", 0, 1, CLI_FMAX_OPEN, "Adam/AdamW second-moment decay (0.999)",
        G_TRAIN),
    NUM("eps", eps, "E", 0, 1, CLI_FMIN_OPEN, "Adam/AdamW epsilon (1e-8)", G_TRAIN),
    INT("warmup", warmup, "N", 0, TRAIN_MAX_STEPS, "warmup steps of the schedule (100)",
        G_TRAIN),
    NUM("label-smoothing", label_smoothing, "X", 0, 1, 0, "smooth the training loss's "
        "targets to (1 - X) one-hot + X / V; validation loss is not smoothed (0)", G_TRAIN),
    NUM("weight-decay", weight_decay, "W", 0, 10, 0, "weight decay (0.01)", G_TRAIN),
    NUM("clip", clip, "C", 0, 1e6, 0, "clip gradients to this global norm (1.0, 0 = off)",
        G_TRAIN),
    NUM("min-lr", min_lr, "LR", 0, 10, 0, "final learning rate of the cosine decay (lr/10)",
        G_TRAIN),
    INT("seed", seed, "S", 0, INT64_MAX, "random seed (0)", G_TRAIN),
    INT("eval-every", eval_every, "N", 1, TRAIN_MAX_STEPS, "evaluate every N steps (text 100, "
        "task 50, seq2seq 100, pairs 500)", G_TRAIN),
    NUM("val-fraction", val_fraction, "F", 0, 1, CLI_FMAX_OPEN,
        "text: the last F of the bytes validate (0.1)", G_TRAIN),
    NUM("target-acc", target_acc, "A", 0, 1, 0,
        "task: stop at this held-out accuracy (seq2seq: of exact sequences) (0.99, 0 = never)",
        G_TRAIN),
    INT("threads", threads, "N", 1, TRAIN_MAX_THREADS, "worker threads (all cores)", G_TRAIN),
    FLAG("dry-run", dry_run, "build the model, print its memory plan (tg_graph_memory) and "
         "write --dot if given, then exit without training or writing anything else",
         G_TRAIN),
    FLAG("detect-anomaly", detect_anomaly, "stop at the first NaN or inf of any op, forward or "
         "backward", G_TRAIN),
    FLAG("no-cache", no_cache, "seq2seq: decode the held-out set without the KV cache (the "
         "whole prefix per token; the same tokens, slower)", G_TRAIN),
    FLAG("unfused", unfused, "build the unfused graph of elementary ops (no flash attention or "
         "other fused kernels; same results to rounding)", G_TRAIN),
    {.name = "text", .kind = CLI_LIST, .offset = TA(text), .metavar = "FILE",
     .help = "train a byte-level language model on these files", .group = G_DATA},
    CHOICE("task", task, "copy|reverse|sort", "built-in task (reverse)", G_DATA),
    PATH("pairs", pairs, "TSV", "translate: train the encoder-decoder on these sentence pairs "
         "(one 'source<TAB>target' per line)", G_DATA),
    PATH("valid", valid, "TSV", "--pairs: validation pairs (loss and greedy BLEU at each "
         "evaluation; required)", G_DATA),
    CHOICE("tokenizer", tokenizer, "sentencepiece|bytes", "--pairs: subwords (a SentencePiece "
           "model trained on both sides of --pairs, or --spm) or UTF-8 bytes (sentencepiece "
           "when built with it)", G_DATA),
    PATH("spm", spm, "FILE.model", "--pairs: use this SentencePiece model instead of "
         "training one", G_DATA),
    INT("vocab-size", vocab_size, "V", 8, TRAIN_MAX_VOCAB, "--pairs: SentencePiece vocabulary "
        "to train (8000)", G_DATA),
    CHOICE("spm-type", spm_type, "unigram|bpe", "--pairs: SentencePiece model type (unigram)",
           G_DATA),
    NUM("spm-alpha", spm_alpha, "A", 0, 100, 0, "--pairs: subword regularization (Kudo "
        "2018): every epoch, each training sentence takes one of its --spm-nbest most probable "
        "segmentations, drawn with probability proportional to P^A (SentencePiece unigram "
        "models; 0.1-0.5 typical; validation and decoding keep the best)", G_DATA),
    INT("spm-nbest", spm_nbest, "L", 1, TG_SAMPLE_MAX_NBEST, "--spm-alpha: sample among the L "
        "best segmentations (64)", G_DATA),
    INT("batch-tokens", batch_tokens, "N", 1, TRAIN_MAX_BATCH_TOKENS, "--pairs: tokens per "
        "batch, padding counted; batches hold sentences of similar length (2048)", G_DATA),
    CHOICE("emb-scale", emb_scale, "none|sqrt", "token embeddings times sqrt(d_model) (sec. "
           "3.4) or not (--pairs: sqrt, else none)", G_MODEL),
    NUM("target-bleu", target_bleu, "B", 0, 100, 0, "--pairs: stop at this validation BLEU "
        "(greedy) (0 = never)", G_TRAIN),
    PATH("checkpoint", checkpoint, "PATH", "save at each evaluation and at the end (default "
         "with --resume: CK)", G_FILES),
    PATH("resume", resume, "PATH", "continue this checkpoint bit-exactly and save back to it",
         G_FILES),
    INT("save-every", save_every, "N", 1, TRAIN_MAX_STEPS, "also save the checkpoint every N "
        "steps", G_FILES),
    FLAG("keep-best", keep_best, "also keep the checkpoint of the best evaluation (--pairs: "
         "the highest validation BLEU; else the lowest validation loss) as CK with .best "
         "before its extension (de-en.best.ckpt)", G_FILES),
    INT("keep-last", keep_last, "N", 1, TRAIN_KEEP_LAST_MAX, "also keep the last N saves as CK "
        "with .stepS before its extension (de-en.step1500.ckpt), removing older ones this run "
        "wrote (for 'tgrad average')", G_FILES),
    FLAG("force", force, "let --checkpoint, --log, --plot, --dot replace existing files "
         "(a resumed run continues its own without it)",
         G_FILES),
    INT("stop-after", stop_after, "N", 1, TRAIN_MAX_STEPS, "stop after step N (to resume "
        "later)", G_FILES),
    PATH("log", log, "CSV", "write step,train_loss,val_loss,lr,tokens_per_s,val_acc (--pairs: "
         "val_bleu, the greedy BLEU, for val_acc)", G_FILES),
    PATH("plot", plot, "SVG", "write the loss curves as SVG (a task run: and the held-out "
         "accuracy it stops on, in a second panel)", G_FILES),
    FLAG("plot-log", plot_log, "--plot: the loss axis on a log scale", G_FILES),
    PATH("dot", dot, "G.dot", "write the training graph as Graphviz DOT, then train (with "
         "--dry-run: the graph only)", G_FILES),
    FLAG("quiet", quiet, "print only the summary", G_FILES),
    {.name = NULL},
};

static const cli_command train_cmd = {
    .name = "train",
    .usage = "[--task T | --text FILE... | --pairs P --valid V] [options]",
    .description =
        "With no arguments, trains an encoder on the built-in 'reverse' task (random\n"
        "digit sequences, predict the reversed sequence at each position) until 99%\n"
        "token accuracy on held-out sequences. With --text, trains a byte-level\n"
        "decoder-only language model on the concatenated files (symlinked duplicates\n"
        "and directories skipped); the last 10% is validation. --arch seq2seq --task T\n"
        "trains an encoder-decoder with teacher forcing (source: the digits; decoder\n"
        "input: BOS and the target shifted right) until 99% of held-out sequences are\n"
        "decoded exactly right (greedy decoding). With --pairs TRAIN --valid VALID,\n"
        "trains a translation model (the encoder-decoder, SentencePiece subwords,\n"
        "length-bucketed batches of --batch-tokens, label smoothing, the paper's\n"
        "schedule) and evaluates validation loss and greedy BLEU.\n"
        "\n"
        "--resume CK takes the model from CK, restores every training option not given\n"
        "again, continues bit-exactly and saves back to CK (atomically); --checkpoint\n"
        "OTHER saves to OTHER instead and leaves CK as it is.\n"
        "\n"
        "--threads N above the CPUs this process may use is lowered to their number,\n"
        "with a warning: more threads than CPUs only wait on each other.\n"
        "\n"
        "Exit status: 0; 2 for a usage error (an unknown option, a value out of range,\n"
        "options that exclude each other or contradict the resumed checkpoint); 1 for a\n"
        "run-time failure (a file missing or corrupt, memory, a non-finite loss); 3\n"
        "when a task run ends below --target-acc; 130 when interrupted: SIGINT\n"
        "(Ctrl-C) or SIGTERM stops the run after the current step and saves the\n"
        "checkpoint first, or during the setup before any step, saving nothing. A\n"
        "signal the process inherits as ignored (SIGINT, in a script's background\n"
        "job) stays ignored.",
    .opts = train_opts,
};

static const cli_option sample_opts[] = {
    {.name = "checkpoint", .kind = CLI_PATH, .offset = SA(checkpoint), .metavar = "PATH",
     .help = "checkpoint of 'tgrad train --text' or '--arch seq2seq' (required)"},
    {.name = "prompt", .kind = CLI_STR, .offset = SA(prompt), .metavar = "TEXT",
     .help = "text to continue (default: a newline)"},
    {.name = "source", .kind = CLI_STR, .offset = SA(source), .metavar = "DIGITS",
     .help = "seq2seq checkpoint: the source sequence (seq_len digits 0-9) to decode"},
    {.name = "tokens", .kind = CLI_INT, .offset = SA(tokens), .metavar = "N",
     .help = "bytes to generate (200)", .imin = 0, .imax = SAMPLE_MAX_TOKENS},
    {.name = "temperature", .kind = CLI_NUM, .offset = SA(temperature), .metavar = "T",
     .help = "softmax temperature, 0 = greedy (0.8)", .fmin = 0, .fmax = 100},
    {.name = "top-k", .kind = CLI_INT, .offset = SA(top_k), .metavar = "K",
     .help = "sample from the K most likely bytes (0 = all)", .imin = 0,
     .imax = SAMPLE_MAX_TOP_K},
    {.name = "seed", .kind = CLI_INT, .offset = SA(seed), .metavar = "S",
     .help = "random seed (0)", .imin = 0, .imax = INT64_MAX},
    {.name = "threads", .kind = CLI_INT, .offset = SA(threads), .metavar = "N",
     .help = "worker threads (all cores)", .imin = 1, .imax = TRAIN_MAX_THREADS},
    {.name = "no-cache", .kind = CLI_FLAG, .offset = SA(no_cache),
     .help = "no KV cache: run the whole window for every byte (slower; for comparison)"},
    {.name = "precision", .kind = CLI_CHOICE, .offset = SA(precision), .choices = "f32|bf16",
     .help = "compute precision of the matrix products: f32, or bf16 operands with f32 "
             "accumulation (f32)"},
    {.name = NULL},
};

static const cli_command sample_cmd = {
    .name = "sample",
    .usage = "--checkpoint PATH [options]",
    .description = "Generates text from a checkpoint of 'tgrad train --text'. Temperature 0 is\n"
                   "greedy decoding. The prompt is prefilled once and each byte then costs one\n"
                   "position through the model (KV cache); when the context reaches the model's\n"
                   "seq_len, its last seq_len/2 bytes are prefilled again and generation goes\n"
                   "on. --no-cache runs the whole window of the last seq_len bytes for every\n"
                   "byte instead (the same bytes while the text fits in one window).\n"
                   "On a checkpoint of 'tgrad train --arch seq2seq', --source DIGITS (exactly\n"
                   "the model's seq_len digits) is encoded once and the target decoded greedily\n"
                   "through the cache (--no-cache: the whole prefix for every digit), printed\n"
                   "as digits.\n"
                   "\n"
                   "Exit status: 0; 2 for a usage error (a bad option, a checkpoint of the\n"
                   "wrong kind for the options: --prompt on a seq2seq one, --source on a text\n"
                   "one, an encoder task; a prompt byte outside the vocabulary); 1 for a\n"
                   "run-time failure (a file missing or corrupt, non-finite logits).",
    .opts = sample_opts,
};

const cli_command *train_command(void)
{
    return &train_cmd;
}

const cli_command *sample_command(void)
{
    return &sample_cmd;
}

void train_defaults(train_args *a)
{
    memset(a, 0, sizeof *a);
    a->layers = 2;
    a->heads = 4;
    a->activation = ACT_RELU;
    a->pos = POS_LEARNED;
    a->dtype = DT_F32;
    a->batch = -1;
    a->grad_accum = 1;
    a->arch = -1;
    a->decoder_layers = -1;
    a->lr = -1; /* 3e-3; noam: 1 (train_resolve) */
    a->beta2 = 0.999;
    a->eps = 1e-8;
    a->schedule = SCHED_COSINE;
    a->precision = TG_PRECISION_F32;
    a->warmup = 100;
    a->weight_decay = 0.01;
    a->clip = 1.0;
    a->min_lr = -1;
    a->val_fraction = 0.1;
    a->target_acc = 0.99;
    a->momentum = 0.9;
    a->optimizer = OPT_ADAMW;
    a->task = 1; /* TASK_REVERSE */
    a->d_model = a->d_ff = a->seq_len = a->steps = a->eval_every = -1;
    a->tokenizer = -1;
    a->emb_scale = -1;
    a->vocab_size = 8000;
    a->batch_tokens = 2048;
    a->attn_dropout = a->act_dropout = -1;
    a->spm_alpha = -1;
    a->spm_nbest = 64;
}

void train_pairs_defaults(train_args *a, const cli_result *r)
{
#define UNLESS(opt) if (!cli_given(&train_cmd, r, opt))
    UNLESS("arch") a->arch = ARCH_SEQ2SEQ;
    UNLESS("layers") a->layers = 3;
    UNLESS("d-model") a->d_model = 256;
    UNLESS("heads") a->heads = 4;
    UNLESS("d-ff") a->d_ff = 4 * a->d_model;
    UNLESS("seq-len") a->seq_len = 128;
    UNLESS("pos") a->pos = POS_SINUSOIDAL;
    UNLESS("emb-scale") a->emb_scale = EMB_SQRT;
    UNLESS("dropout") a->dropout = 0.1;
    UNLESS("label-smoothing") a->label_smoothing = 0.1;
    UNLESS("schedule") a->schedule = SCHED_NOAM;
    UNLESS("warmup") a->warmup = 400;
    UNLESS("lr") a->lr = 0.5; /* noam factor: peak 0.5 (256 * 400)^-0.5 = 1.6e-3 */
    UNLESS("beta2") a->beta2 = 0.98;
    UNLESS("eps") a->eps = 1e-9;
    UNLESS("optimizer") a->optimizer = OPT_ADAM;
    UNLESS("weight-decay") a->weight_decay = 0;
    UNLESS("steps") a->steps = 1000;
    UNLESS("eval-every") a->eval_every = 500;
    UNLESS("target-acc") a->target_acc = 0;
    a->tie = true; /* shared source, target and output embedding (sec. 3.4) */
#undef UNLESS
}

int train_parse(int argc, char **argv, train_args *a, cli_result *r, char *err, size_t n)
{
    train_defaults(a);
    int rc = cli_parse(&train_cmd, argc, argv, a, r, err, n);
    if (rc != CLI_OK)
        return rc;
    if (a->text.n > 0 && cli_given(&train_cmd, r, "task")) {
        snprintf(err, n, "--text and --task exclude each other (give one)");
        return CLI_ERROR;
    }
    if (a->text.n > 0 && (a->arch == ARCH_ENCODER || a->arch == ARCH_SEQ2SEQ)) {
        snprintf(err, n, "--arch %s trains on a built-in --task, not on --text (--text trains "
                 "the decoder-only LM, --arch lm)", a->arch == ARCH_ENCODER ? "encoder" :
                 "seq2seq");
        return CLI_ERROR;
    }
    if (a->pairs && (a->text.n > 0 || cli_given(&train_cmd, r, "task"))) {
        snprintf(err, n, "--pairs and --%s exclude each other (give one)",
                 a->text.n > 0 ? "text" : "task");
        return CLI_ERROR;
    }
    if (a->pairs && (a->arch == ARCH_ENCODER || a->arch == ARCH_LM)) {
        snprintf(err, n, "--pairs trains the encoder-decoder (--arch seq2seq), not --arch %s",
                 a->arch == ARCH_ENCODER ? "encoder" : "lm");
        return CLI_ERROR;
    }
    static const char *const pairs_only[] = {"valid",        "tokenizer", "spm",
                                             "vocab-size",   "spm-type",  "batch-tokens",
                                             "target-bleu",  "spm-alpha", "spm-nbest"};
    for (size_t i = 0; !a->pairs && !a->resume && i < sizeof pairs_only / sizeof *pairs_only;
         i++)
        if (cli_given(&train_cmd, r, pairs_only[i])) {
            snprintf(err, n, "--%s needs --pairs (translation training)", pairs_only[i]);
            return CLI_ERROR;
        }
    if (a->spm && a->tokenizer == TOK_BYTES) {
        snprintf(err, n, "--spm is a SentencePiece model; it excludes --tokenizer bytes");
        return CLI_ERROR;
    }
    if (a->spm && (cli_given(&train_cmd, r, "vocab-size") || cli_given(&train_cmd, r,
                                                                        "spm-type"))) {
        snprintf(err, n, "--spm gives the SentencePiece model; --vocab-size and --spm-type "
                 "only apply when one is trained");
        return CLI_ERROR;
    }
    if (cli_given(&train_cmd, r, "spm-nbest") && !cli_given(&train_cmd, r, "spm-alpha") &&
        !a->resume) {
        snprintf(err, n, "--spm-nbest needs --spm-alpha (subword regularization)");
        return CLI_ERROR;
    }
    if (cli_given(&train_cmd, r, "spm-alpha") &&
        (a->tokenizer == TOK_BYTES || a->spm_type == SPM_BPE)) {
        snprintf(err, n, "--spm-alpha samples the segmentations of a SentencePiece unigram "
                 "model; it excludes --%s", a->tokenizer == TOK_BYTES ? "tokenizer bytes"
                                                                       : "spm-type bpe");
        return CLI_ERROR;
    }
    if (a->arch == ARCH_LM && cli_given(&train_cmd, r, "task")) {
        snprintf(err, n, "--arch lm is the byte-level language model of --text, not a --task "
                 "(tasks train --arch encoder or seq2seq)");
        return CLI_ERROR;
    }
    return CLI_OK;
}

void train_free(train_args *a, cli_result *r)
{
    cli_free(&train_cmd, a, r);
}

bool train_resolve(train_args *a, bool text, char *err, size_t n)
{
    if (a->arch < 0)
        a->arch = text ? ARCH_LM : ARCH_ENCODER;
    if (text != (a->arch == ARCH_LM)) {
        snprintf(err, n, text ? "--arch %s trains on a built-in --task, not on --text"
                              : "--arch %s needs --text FILE (the byte-level language model)",
                 a->arch == ARCH_ENCODER ? "encoder" : a->arch == ARCH_LM ? "lm" : "seq2seq");
        return false;
    }
    bool s2s = a->arch == ARCH_SEQ2SEQ;
    if (!s2s && a->decoder_layers > 0) {
        snprintf(err, n, "--decoder-layers %" PRId64 " needs --arch seq2seq (the %s has no "
                 "decoder stack)", a->decoder_layers, text ? "language model" : "encoder");
        return false;
    }
    if (s2s && a->decoder_layers < 0)
        a->decoder_layers = a->layers;
    if (!s2s)
        a->decoder_layers = 0;
    if (a->batch < 0)
        a->batch = s2s ? 64 : 32;
    if (a->d_model < 0)
        a->d_model = text ? 128 : 64;
    if (a->d_ff < 0)
        a->d_ff = 4 * a->d_model; /* <= 4 * TRAIN_MAX_D_MODEL == TRAIN_MAX_D_FF */
    if (a->seq_len < 0)
        a->seq_len = text ? 64 : 12;
    if (a->steps < 0)
        a->steps = text ? 1500 : 2000;
    if (a->eval_every < 0)
        a->eval_every = text || s2s ? 100 : 50;
    if (a->lr < 0)
        a->lr = a->schedule == SCHED_NOAM ? 1.0 : 3e-3;
    if (a->min_lr < 0)
        a->min_lr = a->lr / 10;
    if (a->precision == TG_PRECISION_BF16 && a->dtype == DT_F64) {
        snprintf(err, n, "--precision bf16 is for --dtype f32 (f64 runs are for exact "
                 "checking)");
        return false;
    }
    if (a->grad_accum > a->batch || a->batch % a->grad_accum != 0) {
        snprintf(err, n, "--batch %" PRId64 " does not split into --grad-accum %" PRId64
                 " equal micro-batches (K must divide the batch)", a->batch, a->grad_accum);
        return false;
    }
    if (a->heads > a->d_model || a->d_model % a->heads != 0) {
        snprintf(err, n, "--heads %" PRId64 " does not divide --d-model %" PRId64
                 " (choose heads among the divisors of d_model)", a->heads, a->d_model);
        return false;
    }
    if (a->resume && !a->checkpoint)
        a->checkpoint = a->resume; /* a resumed run saves back to its own file */
    return true;
}

int sample_parse(int argc, char **argv, sample_args *a, cli_result *r, char *err, size_t n)
{
    memset(a, 0, sizeof *a);
    a->prompt = "";
    a->tokens = 200;
    a->temperature = 0.8;
    int rc = cli_parse(&sample_cmd, argc, argv, a, r, err, n);
    if (rc != CLI_OK)
        return rc;
    if (!a->checkpoint) {
        snprintf(err, n, "--checkpoint PATH is required (a checkpoint of 'tgrad train --text')");
        return CLI_ERROR;
    }
    return CLI_OK;
}

void sample_free(sample_args *a, cli_result *r)
{
    cli_free(&sample_cmd, a, r);
}
