/*
 * ckpt_config.c - checkpoint metadata read by the library (tg_train_record_read: data.* and
 * train.*) and mapped to the `tgrad train` option table (restored, the run's identity, options
 * given again that contradict the file), the claimed config checked against the file's tensor
 * shapes, and a memory estimate (see ckpt_config.h). No I/O and nothing printed: safe to call
 * on arbitrary parsed files.
 */
#include "ckpt_config.h"
#include "train_data.h"
#include "tgrad_data.h"
#ifdef TG_HAVE_SPM
#include "tgrad_spm.h"
#endif

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The checkpoint format tgrad train writes (field "format"). */
#define CKPT_FORMAT "tgrad-checkpoint-1"

/* How a metadata field maps to an option of the train table. */
typedef enum {
    F_IDENTITY, /* the run's identity: always from the checkpoint, conflicts are errors */
    F_RESTORE   /* a training option: restored unless given on the command line */
} field_role;

typedef struct {
    const char *key;    /* metadata key */
    const char *option; /* train table option */
    field_role role;
    bool required;
} field;

static const field fields[] = {
    {"model.layers", "layers", F_IDENTITY, true},
    {"model.d_model", "d-model", F_IDENTITY, true},
    {"model.heads", "heads", F_IDENTITY, true},
    {"model.d_ff", "d-ff", F_IDENTITY, true},
    {"model.seq_len", "seq-len", F_IDENTITY, true},
    {"model.activation", "activation", F_IDENTITY, true},
    {"model.pos", "pos", F_IDENTITY, true},
    {"model.tie_weights", "tie-weights", F_IDENTITY, false},
    {"model.dtype", "dtype", F_IDENTITY, false},
    {"train.optimizer", "optimizer", F_IDENTITY, false},
    {"model.dropout", "dropout", F_RESTORE, false},
    /* absent (older checkpoints, or not set apart): as model.dropout */
    {"model.attn_dropout", "attn-dropout", F_RESTORE, false},
    {"model.act_dropout", "act-dropout", F_RESTORE, false},
    {"data.val_fraction", "val-fraction", F_RESTORE, false},
    {"train.steps", "steps", F_RESTORE, false},
    {"train.seed", "seed", F_RESTORE, false},
    {"train.batch", "batch", F_RESTORE, false},
    {"train.grad_accum", "grad-accum", F_RESTORE, false},
    {"train.warmup", "warmup", F_RESTORE, false},
    {"train.eval_every", "eval-every", F_RESTORE, false},
    {"train.save_every", "save-every", F_RESTORE, false},
    {"train.lr", "lr", F_RESTORE, false},
    {"train.min_lr", "min-lr", F_RESTORE, false},
    {"train.weight_decay", "weight-decay", F_RESTORE, false},
    {"train.clip", "clip", F_RESTORE, false},
    {"train.momentum", "momentum", F_RESTORE, false},
    {"train.target_acc", "target-acc", F_RESTORE, false},
    /* absent from older checkpoints: the defaults (cosine, 0.999, 1e-8, 0) */
    {"train.schedule", "schedule", F_RESTORE, false},
    {"train.precision", "precision", F_RESTORE, false},
    {"train.beta2", "beta2", F_RESTORE, false},
    {"train.eps", "eps", F_RESTORE, false},
    {"train.label_smoothing", "label-smoothing", F_RESTORE, false},
    /* translation runs (data.mode pairs) */
    {"train.batch_tokens", "batch-tokens", F_RESTORE, false},
    {"train.target_bleu", "target-bleu", F_RESTORE, false},
    /* written only when sampling: absent = no sampling */
    {"train.spm_alpha", "spm-alpha", F_RESTORE, false},
    {"train.spm_nbest", "spm-nbest", F_RESTORE, false},
    /* --keep-last N: its saves so far are train.kept (check_kept) */
    {"train.keep_last", "keep-last", F_RESTORE, false},
};

static size_t value_size(const cli_option *o)
{
    switch (o->kind) {
    case CLI_FLAG:
        return sizeof(bool);
    case CLI_CHOICE:
        return sizeof(int);
    case CLI_INT:
        return sizeof(int64_t);
    case CLI_NUM:
        return sizeof(double);
    default:
        return sizeof(const char *);
    }
}

/* The command line's value of option @p o in @p a, as the user would have written it. */
static const char *given_value(const cli_option *o, const train_args *a, char *buf, size_t n)
{
    const char *p = (const char *)a + o->offset;
    char c[32];
    switch (o->kind) {
    case CLI_FLAG:
        snprintf(buf, n, "--%s", o->name);
        break;
    case CLI_CHOICE:
        snprintf(buf, n, "--%s %s", o->name, cli_choice_name(o, *(const int *)p, c, sizeof c));
        break;
    case CLI_INT:
        snprintf(buf, n, "--%s %" PRId64, o->name, *(const int64_t *)p);
        break;
    case CLI_NUM:
        snprintf(buf, n, "--%s %.6g", o->name, *(const double *)p);
        break;
    default:
        snprintf(buf, n, "--%s", o->name);
        break;
    }
    return buf;
}

static bool parse_bool01(const char *key, const char *v, bool *out, char *err, size_t n)
{
    char s[80];
    if (!strcmp(v, "0") || !strcmp(v, "1")) {
        *out = v[0] == '1';
        return true;
    }
    snprintf(err, n, "checkpoint field '%s' '%s': expected 0 or 1", key, cli_show(v, s, sizeof s));
    return false;
}

static bool parse_int_field(const char *key, const char *v, int64_t lo, int64_t hi, int64_t *out,
                            char *err, size_t n)
{
    char s[80];
    int64_t x;
    if (!tg_meta_parse_int(v, lo, hi, &x)) { /* the library's rule: digits, no leading zero */
        snprintf(err, n, "checkpoint field '%s' '%s': expected an integer from %" PRId64
                 " to %" PRId64, key, cli_show(v, s, sizeof s), lo, hi);
        return false;
    }
    *out = x;
    return true;
}

/* The message a library call recorded on @p ctx, without its "fn: " and "<memory>: " prefixes
 * (the caller names the file). */
static void lib_message(tg_ctx *ctx, char *err, size_t n)
{
    const char *m = tg_ctx_message(ctx), *c = strstr(m, ": ");
    if (c && !memchr(m, ' ', (size_t)(c - m))) /* "tg_fn: " */
        m = c + 2;
    if (!strncmp(m, "<memory>: ", 10))
        m += 10;
    snprintf(err, n, "%s", m);
}

/* Checkpoint field @p key's value @p v into @p tmp through option @p o of the train table (so
 * with the command line's bounds and messages); an integer by the library's rule first (no
 * sign, no leading zero). */
static bool set_option(const cli_option *o, const char *key, const char *v, train_args *tmp,
                       char *err, size_t n)
{
    char src[96], s[80];
    int64_t iv;
    if (o->kind == CLI_INT && !tg_meta_parse_int(v, 0, INT64_MAX, &iv)) {
        snprintf(err, n, "checkpoint field '%s' '%s': expected an integer from %" PRId64
                 " to %" PRId64 " (decimal digits, no leading zero)", key,
                 cli_show(v, s, sizeof s), o->imin, o->imax);
        return false;
    }
    snprintf(src, sizeof src, "checkpoint field '%s'", key);
    return cli_set(train_command(), o, v, tmp, src, err, n);
}

/* The option of the train table checkpoint field @p key maps to, or NULL. */
static const cli_option *option_of(const char *key)
{
    if (!strcmp(key, "data.task"))
        return cli_find(train_command(), "task");
    for (size_t i = 0; i < sizeof fields / sizeof fields[0]; i++)
        if (!strcmp(fields[i].key, key))
            return cli_find(train_command(), fields[i].option);
    return NULL;
}

/*
 * The data.* and train.* fields as the library reads them (tg_train_record_read) into
 * info->rec: data.mode and its data (vocabulary, size, files and hash of a text; the task; a
 * translation's data hashes), every train.* value parsed and in range. A field the library
 * refuses that is an option of the train table gets the option's message, as the other
 * options do (apply_options). Returns 1, or on a refusal 0 (no data.mode: nothing known) or
 * -1 (data.mode known, the refusal in @p err).
 */
static int read_record(const tg_safetensors *st, ckpt_info *info, char *err, size_t n)
{
    tg_ctx *ctx = tg_ctx_new();
    if (!ctx) {
        snprintf(err, n, "out of memory");
        return 0;
    }
    const char *bad = NULL;
    bool ok = tg_train_record_read(ctx, st, NULL, &info->rec, &bad) == TG_OK;
    if (!ok) {
        lib_message(ctx, err, n);
        const cli_option *o = bad ? option_of(bad) : NULL;
        const char *v = bad ? tg_safetensors_meta_get(st, bad) : NULL;
        char e[1024];
        train_args tmp;
        train_defaults(&tmp);
        if (o && v && !set_option(o, bad, v, &tmp, e, sizeof e))
            snprintf(err, n, "%s", e);
    }
    tg_ctx_free(ctx);
    if (!ok && (!bad || !strcmp(bad, "data.mode") || !info->rec.mode))
        return 0;
    info->text = !strcmp(info->rec.mode, "text");
    info->pairs = !strcmp(info->rec.mode, "pairs");
    return ok ? 1 : -1;
}

/* A field absent from the file: an identity field is the default, for every command alike, and
 * a command line giving another value contradicts the file. */
static bool apply_absent(const field *f, const cli_option *o, train_args *a,
                         const train_args *defaults, bool on_cmdline, ckpt_info *info,
                         char *err, size_t n)
{
    if (f->required) {
        snprintf(err, n, "not a tgrad training checkpoint: it lacks the field '%s'", f->key);
        return false;
    }
    if (f->role != F_IDENTITY)
        return true;
    char *dst = (char *)a + o->offset;
    const char *def = (const char *)defaults + o->offset;
    if (on_cmdline && memcmp(dst, def, value_size(o)) != 0) {
        char s[96], gv[96];
        info->usage = true; /* the command line contradicts the file */
        snprintf(err, n, "checkpoint is from a different config: it has no '%s' (the default, "
                 "%s), %s given", f->key, given_value(o, defaults, s, sizeof s),
                 given_value(o, a, gv, sizeof gv));
        return false;
    }
    memcpy(dst, def, value_size(o));
    return true;
}

/* Field @p f with value @p v, validated through its option: the run's identity always comes
 * from the file (a command line giving another value contradicts it), a training option unless
 * given again. */
static bool apply_field(const field *f, const cli_option *o, const char *v, train_args *a,
                        bool on_cmdline, ckpt_info *info, char *err, size_t n)
{
    train_args tmp = *a; /* validate into a copy: the command line's value may win */
    if (!set_option(o, f->key, v, &tmp, err, n))
        return false;
    char *dst = (char *)a + o->offset;
    const char *got = (const char *)&tmp + o->offset;
    if (f->role == F_IDENTITY && on_cmdline && memcmp(dst, got, value_size(o)) != 0) {
        char s[80], gv[96];
        info->usage = true; /* the command line contradicts the file */
        snprintf(err, n, "checkpoint is from a different config: %s '%s' there, %s given",
                 f->key, cli_show(v, s, sizeof s), given_value(o, a, gv, sizeof gv));
        return false;
    }
    if (f->role == F_IDENTITY || !on_cmdline)
        memcpy(dst, got, value_size(o));
    return true;
}

/* model.norm_first (1 = pre-norm, the inverse of --post-norm); heads divide d_model. */
static bool apply_norm(const tg_safetensors *st, train_args *a, const cli_result *given,
                       ckpt_info *info, char *err, size_t n)
{
    const char *nf = tg_safetensors_meta_get(st, "model.norm_first");
    bool pre;
    if (!nf) {
        snprintf(err, n, "not a tgrad training checkpoint: it lacks the field 'model.norm_first'");
        return false;
    }
    if (!parse_bool01("model.norm_first", nf, &pre, err, n))
        return false;
    if (given && cli_given(train_command(), given, "post-norm") && pre) {
        info->usage = true; /* the command line contradicts the file */
        snprintf(err, n, "checkpoint is from a different config: model.norm_first 1 (pre-norm) "
                 "there, --post-norm given");
        return false;
    }
    a->post_norm = !pre;
    if (a->d_model % a->heads != 0) {
        snprintf(err, n, "checkpoint fields model.heads %" PRId64 " and model.d_model %" PRId64
                 " disagree: heads must divide d_model", a->heads, a->d_model);
        return false;
    }
    return true;
}

/* model.*, data.* and train.* fields that map to options. */
static bool apply_options(const tg_safetensors *st, train_args *a, const cli_result *given,
                          ckpt_info *info, char *err, size_t n)
{
    const cli_command *cmd = train_command();
    train_args defaults;
    train_defaults(&defaults);
    for (size_t i = 0; i < sizeof fields / sizeof fields[0]; i++) {
        const field *f = &fields[i];
        const cli_option *o = cli_find(cmd, f->option);
        const char *v = tg_safetensors_meta_get(st, f->key);
        if (!o)
            continue; /* cannot happen: the table has every option named above */
        bool on_cmdline = given && given->given[cli_index(cmd, o)];
        if (v ? !apply_field(f, o, v, a, on_cmdline, info, err, n)
              : !apply_absent(f, o, a, &defaults, on_cmdline, info, err, n))
            return false;
    }
    /* SGD keeps momentum buffers (sgd.momentum.*) only with a momentum other than 0: a resumed
     * run may change the momentum, but not to or from 0, or the optimizer state in the file
     * would not be the one the run has */
    double ck_momentum = tg_train_record_has(&info->rec, "train.momentum") ? info->rec.momentum
                                                                            : defaults.momentum;
    if (a->optimizer == OPT_SGD && (ck_momentum == 0) != (a->momentum == 0)) {
        info->usage = true; /* the command line contradicts the file */
        snprintf(err, n, "checkpoint is from SGD with momentum %.6g (train.momentum), --momentum "
                 "%.6g given: a momentum of 0 keeps no momentum buffers, so it cannot change to "
                 "or from 0 on resume", ck_momentum, a->momentum);
        return false;
    }
    return apply_norm(st, a, given, info, err, n);
}

/* The field "format": the checkpoint format tgrad train writes. */
static bool check_format(const tg_safetensors *st, char *err, size_t n)
{
    char s[80];
    const char *fmt = tg_safetensors_meta_get(st, "format");
    if (!fmt) {
        snprintf(err, n, "not a tgrad checkpoint: it lacks the field 'format' (checkpoints are "
                 "written by 'tgrad train --checkpoint')");
        return false;
    }
    if (strncmp(fmt, "tgrad-checkpoint-", 17) != 0) {
        snprintf(err, n, "checkpoint field 'format' '%s': not a tgrad checkpoint (expected "
                 "'%s', written by 'tgrad train --checkpoint')", cli_show(fmt, s, sizeof s),
                 CKPT_FORMAT);
        return false;
    }
    if (strcmp(fmt, CKPT_FORMAT) != 0) {
        snprintf(err, n, "checkpoint field 'format' '%s': expected '%s' (a newer tgrad?)",
                 cli_show(fmt, s, sizeof s), CKPT_FORMAT);
        return false;
    }
    return true;
}

/* model.arch (absent in older checkpoints: the mode's own architecture) against data.mode. */
static bool apply_arch(const tg_safetensors *st, train_args *a, const cli_result *given,
                       ckpt_info *info, char *err, size_t n)
{
    const cli_command *cmd = train_command();
    char s[80];
    const char *mode = info->rec.mode;
    const cli_option *ao = cli_find(cmd, "arch");
    const char *arch = tg_safetensors_meta_get(st, "model.arch");
    train_args at = *a;
    at.arch = info->text ? ARCH_LM : info->pairs ? ARCH_SEQ2SEQ : ARCH_ENCODER;
    if (arch && !cli_set(cmd, ao, arch, &at, "checkpoint field 'model.arch'", err, n))
        return false;
    if (info->pairs && at.arch != ARCH_SEQ2SEQ) {
        snprintf(err, n, "checkpoint fields disagree: model.arch %s but data.mode pairs "
                 "(translation trains the encoder-decoder, seq2seq)", cli_show(arch, s,
                                                                              sizeof s));
        return false;
    }
    if (arch && info->text != (at.arch == ARCH_LM)) {
        snprintf(err, n, "checkpoint fields disagree: model.arch %s but data.mode %s",
                 cli_show(arch, s, sizeof s), mode);
        return false;
    }
    if (given && cli_given(cmd, given, "arch") && at.arch != a->arch) {
        char gv[96], c2[32];
        info->usage = true; /* the command line contradicts the file */
        snprintf(err, n, "checkpoint is from a different config: model.arch '%s' there, %s "
                 "given", cli_choice_name(ao, at.arch, c2, sizeof c2),
                 given_value(ao, a, gv, sizeof gv));
        return false;
    }
    a->arch = at.arch;
    info->seq2seq = a->arch == ARCH_SEQ2SEQ;
    return true;
}

/* model.decoder_layers: the seq2seq decoder stack (absent or 0 for the other models). */
static bool apply_decoder(const tg_safetensors *st, train_args *a, const cli_result *given,
                          ckpt_info *info, char *err, size_t n)
{
    const cli_command *cmd = train_command();
    char s[80];
    const char *dl = tg_safetensors_meta_get(st, "model.decoder_layers");
    if (info->seq2seq) {
        const cli_option *o = cli_find(cmd, "decoder-layers");
        train_args dt = *a;
        if (!dl) {
            snprintf(err, n, "not a tgrad seq2seq checkpoint: it lacks the field "
                     "'model.decoder_layers'");
            return false;
        }
        if (!cli_set(cmd, o, dl, &dt, "checkpoint field 'model.decoder_layers'", err, n))
            return false;
        if (given && cli_given(cmd, given, "decoder-layers") &&
            dt.decoder_layers != a->decoder_layers) {
            char gv[96];
            info->usage = true; /* the command line contradicts the file */
            snprintf(err, n, "checkpoint is from a different config: model.decoder_layers '%s' "
                     "there, %s given", cli_show(dl, s, sizeof s),
                     given_value(o, a, gv, sizeof gv));
            return false;
        }
        a->decoder_layers = dt.decoder_layers;
    } else if (dl) {
        int64_t nd;
        if (!parse_int_field("model.decoder_layers", dl, 0, TRAIN_MAX_LAYERS, &nd, err, n))
            return false;
        if (nd > 0) {
            char c2[32];
            snprintf(err, n, "checkpoint fields disagree: model.decoder_layers %" PRId64 " but "
                     "model.arch %s (no decoder stack)", nd,
                     cli_choice_name(cli_find(cmd, "arch"), a->arch, c2, sizeof c2));
            return false;
        }
    }
    return true;
}

/* data.task: the run's identity (the command line's --task must agree). */
static bool apply_task(train_args *a, const cli_result *given, ckpt_info *info, char *err,
                       size_t n)
{
    const cli_command *cmd = train_command();
    const cli_option *o = cli_find(cmd, "task");
    const char *tk = tg_task_name(info->rec.task); /* the file's name, as the library read it */
    train_args tmp = *a;
    if (!tk || !cli_set(cmd, o, tk, &tmp, "checkpoint field 'data.task'", err, n))
        return false;
    if (given && cli_given(cmd, given, "task") && tmp.task != a->task) {
        char gv[96];
        info->usage = true; /* the command line contradicts the file */
        snprintf(err, n, "checkpoint is from a different config: data.task '%s' there, %s "
                 "given", tk, given_value(o, a, gv, sizeof gv));
        return false;
    }
    a->task = tmp.task;
    return true;
}

/* model.causal (a causal model is a text one). */
static bool check_causal(const tg_safetensors *st, const ckpt_info *info, char *err, size_t n)
{
    const char *causal = tg_safetensors_meta_get(st, "model.causal");
    bool c;
    if (causal) {
        if (!parse_bool01("model.causal", causal, &c, err, n))
            return false;
        if (c != info->text) {
            snprintf(err, n, "checkpoint fields disagree: model.causal %d but data.mode %s",
                     c ? 1 : 0, info->rec.mode);
            return false;
        }
    }
    return true;
}

/* model.scale_embeddings, the vocabulary (data.vocab, the task's, the tokenizer's) and
 * model.vocab_size. */
static bool apply_vocab(const tg_safetensors *st, train_args *a, const cli_result *given,
                        ckpt_info *info, char *err, size_t n)
{
    if (info->pairs) {
        /* the vocabulary is the tokenizer's (tokenizer.*, checked when it is loaded) */
        const char *es = tg_safetensors_meta_get(st, "model.scale_embeddings");
        bool sc = false;
        if (es && !parse_bool01("model.scale_embeddings", es, &sc, err, n))
            return false;
        a->emb_scale = sc ? EMB_SQRT : EMB_NONE;
        info->vocab_size = 0; /* from model.vocab_size below */
    } else if (info->text) {
        info->vocab_size = info->rec.vocab_size;
    } else {
        info->vocab_size = info->seq2seq ? SEQ2SEQ_VOCAB : 10; /* digits (and BOS) */
        if (!apply_task(a, given, info, err, n))
            return false;
    }
    const char *vs = tg_safetensors_meta_get(st, "model.vocab_size");
    int64_t v;
    if (!vs) {
        snprintf(err, n, "not a tgrad training checkpoint: it lacks the field 'model.vocab_size'");
        return false;
    }
    if (!parse_int_field("model.vocab_size", vs, 1, info->pairs ? TRAIN_MAX_VOCAB : 256, &v,
                         err, n))
        return false;
    if (info->pairs)
        info->vocab_size = (int)v;
    if (v != info->vocab_size) {
        snprintf(err, n, "checkpoint fields disagree: model.vocab_size %" PRId64 " but %s %d",
                 v, info->text      ? "data.vocab holds"
                    : info->seq2seq ? "a seq2seq task's vocabulary (digits and BOS) is"
                                    : "a task's vocabulary is", info->vocab_size);
        return false;
    }
    return true;
}

/* The training state's fields with the command line's messages: data.position, optim.step,
 * rng (64 hex digits, not all zero: the generator's fixed point; tg_checkpoint_restore refuses
 * it too, but only after the model is built), train.best_val. */
static bool check_state_fields(const tg_safetensors *st, ckpt_info *info, char *err, size_t n)
{
    char s[80];
    int64_t v;
    const char *p = tg_safetensors_meta_get(st, "data.position");
    if (p && !parse_int_field("data.position", p, 0, INT64_MAX, &v, err, n))
        return false;
    const char *step = tg_safetensors_meta_get(st, "optim.step");
    if (!step) {
        snprintf(err, n, "not a tgrad training checkpoint: it lacks the field 'optim.step'");
        return false;
    }
    if (!parse_int_field("optim.step", step, 0, TRAIN_MAX_STEPS, &info->step, err, n))
        return false;
    /* rng: the xoshiro256** state as 64 hex digits; all zero is the generator's fixed point
     * (tg_checkpoint_restore refuses it too, but only after the model is built) */
    const char *rng = tg_safetensors_meta_get(st, "rng");
    if (!rng) {
        snprintf(err, n, "not a tgrad training checkpoint: it lacks the field 'rng'");
        return false;
    }
    bool rng_ok = strlen(rng) == 64, nonzero = false;
    for (int i = 0; rng_ok && i < 64; i++) {
        int h = hex_digit(rng[i]);
        rng_ok = h >= 0;
        nonzero |= h > 0;
    }
    if (!rng_ok || !nonzero) {
        snprintf(err, n, "checkpoint field 'rng' '%s': expected 64 hex digits, not all zero",
                 cli_show(rng, s, sizeof s));
        return false;
    }
    info->best_val = INFINITY;
    const char *bv = tg_safetensors_meta_get(st, "train.best_val");
    if (bv && strcmp(bv, "inf") != 0) {
        double x;
        if (!cli_parse_f64(bv, &x) || x < 0) {
            snprintf(err, n, "checkpoint field 'train.best_val' '%s': expected a loss >= 0 or "
                     "inf", cli_show(bv, s, sizeof s));
            return false;
        }
        info->best_val = x;
    }
    return true;
}

/* The training state as the library reads it on restore (tg_train_state_read): data.epoch,
 * data.batch, data.position, train.steps, train.best_val; data.epoch and data.batch (a
 * translation run's cursor) only in a translation checkpoint. */
static bool check_state(const tg_safetensors *st, ckpt_info *info, char *err, size_t n)
{
    tg_ctx *ctx = tg_ctx_new();
    tg_train_state ts;
    bool st_ok = ctx && tg_train_state_read(ctx, st, NULL, &ts) == TG_OK;
    if (!st_ok) {
        if (ctx)
            lib_message(ctx, err, n);
        else
            snprintf(err, n, "out of memory");
    }
    tg_ctx_free(ctx);
    if (!st_ok)
        return false;
    info->epoch = ts.epoch;
    info->batch = ts.batch;
    if (!info->pairs && ts.epoch >= 0) {
        snprintf(err, n, "checkpoint fields disagree: data.mode %s but the file has the fields "
                 "'data.epoch' and 'data.batch' of a translation checkpoint",
                 info->text ? "text" : "task");
        return false;
    }
    return true;
}

/* The option @p name of the train table given on the command line with a value other than the
 * checkpoint's @p there: a usage error naming both. */
static bool contradicts(const cli_result *given, const char *name, bool differs,
                        const char *there, const train_args *a, ckpt_info *info, char *err,
                        size_t n)
{
    const cli_command *cmd = train_command();
    if (!given || !cli_given(cmd, given, name) || !differs)
        return false;
    char gv[96];
    info->usage = true; /* the command line contradicts the file */
    snprintf(err, n, "checkpoint is from a different config: %s there, %s given", there,
             given_value(cli_find(cmd, name), a, gv, sizeof gv));
    return true;
}

/* format, data.mode, model.arch, model.decoder_layers, model.causal, the rest of data.* and
 * train.* (the library's reader: its refusal after the model fields that name data.mode), the
 * vocabulary and model.vocab_size, and the state's fields. */
static bool apply_data(const tg_safetensors *st, train_args *a, const cli_result *given,
                       ckpt_info *info, char *err, size_t n)
{
    if (!check_format(st, err, n))
        return false;
    int rec = read_record(st, info, err, n);
    char refused[1024];
    if (rec == 0)
        return false;
    snprintf(refused, sizeof refused, "%s", rec < 0 ? err : "");
    if (!apply_arch(st, a, given, info, err, n) || !apply_decoder(st, a, given, info, err, n) ||
        !check_causal(st, info, err, n))
        return false;
    if (rec < 0) {
        snprintf(err, n, "%s", refused);
        return false;
    }
    return apply_vocab(st, a, given, info, err, n) && check_state_fields(st, info, err, n);
}

/* A SentencePiece tokenizer (tokenizer.model, @p size bytes at @p model) loaded as `tgrad
 * translate` loads it: its size in @p have; --vocab-size and --spm-type given on the command
 * line must agree with model.vocab_size and the model's type. */
static bool check_spm(tg_ctx *ctx, const void *model, size_t size, const train_args *a,
                      const cli_result *given, ckpt_info *info, int64_t *have, char *err,
                      size_t n)
{
    char there[120];
    int64_t V = info->vocab_size;
    snprintf(there, sizeof there, "model.vocab_size %" PRId64, V);
    if (contradicts(given, "vocab-size", a->vocab_size != V, there, a, info, err, n))
        return false;
#ifdef TG_HAVE_SPM
    tg_spm_type type;
    tg_tokenizer *tok = tg_spm_load(ctx, model, size);
    if (!tok) {
        char m[1024];
        lib_message(ctx, m, sizeof m);
        snprintf(err, n, "its SentencePiece model (tokenizer.model) is refused: %s", m);
        return false;
    }
    *have = tg_tokenizer_vocab_size(tok);
    tg_tokenizer_free(tok);
    if (tg_spm_model_type(ctx, model, size, &type) == TG_OK) {
        snprintf(there, sizeof there, "a SentencePiece %s model (tokenizer.model)",
                 type == TG_SPM_BPE ? "bpe" : "unigram");
        if (contradicts(given, "spm-type", a->spm_type != (type == TG_SPM_BPE ? SPM_BPE
                                                                             : SPM_UNIGRAM),
                        there, a, info, err, n))
            return false;
    }
    return true;
#else
    (void)ctx, (void)model, (void)size, (void)have;
    snprintf(err, n, "its tokenizer is SentencePiece, and this tgrad was built without it "
             "(install libsentencepiece-dev and rebuild: meson setup --reconfigure build "
             "-Dsentencepiece=enabled)");
    return false;
#endif
}

/*
 * A translation checkpoint (data.mode pairs; its data hashes are the library reader's): the
 * tokenizer as `tgrad translate` loads it (tokenizer.kind and tokenizer.model through
 * tg_tokenizer_meta_read; a SentencePiece model through tg_spm_load) with exactly
 * model.vocab_size ids; --tokenizer, --vocab-size and --spm-type given on the command line
 * (@p given) must agree with it; data.epoch and data.batch (a cursor a run of optim.step steps,
 * one batch each, can have reached: epoch + batch <= step) are there.
 */
static bool check_pairs(const tg_safetensors *st, const train_args *a, const cli_result *given,
                        ckpt_info *info, char *err, size_t n)
{
    if (info->epoch < 0) {
        snprintf(err, n, "not a tgrad translation checkpoint: it lacks the fields 'data.epoch' "
                 "and 'data.batch'");
        return false;
    }
    if (info->epoch + info->batch > info->step) {
        snprintf(err, n, "checkpoint fields disagree: data.epoch %" PRId64 " and data.batch %"
                 PRId64 " but optim.step %" PRId64 " (a translation run takes one batch per "
                 "step, so epoch + batch <= step)", info->epoch, info->batch, info->step);
        return false;
    }
    tg_ctx *ctx = tg_ctx_new();
    if (!ctx) {
        snprintf(err, n, "out of memory");
        return false;
    }
    const char *kind = NULL;
    void *model = NULL;
    size_t size = 0;
    bool ok = tg_tokenizer_meta_read(ctx, st, &kind, &model, &size) == TG_OK;
    if (!ok)
        lib_message(ctx, err, n);
    bool spm = ok && !strcmp(kind, "sentencepiece");
    char there[120];
    snprintf(there, sizeof there, "tokenizer.kind '%s'", ok ? kind : "");
    int64_t V = info->vocab_size, have = spm ? -1 : TG_BYTE_VOCAB;
    if (ok && (contradicts(given, "tokenizer", a->tokenizer != (spm ? TOK_SENTENCEPIECE
                                                                    : TOK_BYTES), there, a,
                           info, err, n) ||
               (!spm && (contradicts(given, "vocab-size", true, there, a, info, err, n) ||
                         contradicts(given, "spm-type", true, there, a, info, err, n)))))
        ok = false;
    if (ok && spm)
        ok = check_spm(ctx, model, size, a, given, info, &have, err, n);
    if (ok && have != V) {
        snprintf(err, n, "checkpoint fields disagree: model.vocab_size %" PRId64 " but its "
                 "tokenizer (tokenizer.kind %s) has %" PRId64 " ids", V, kind, have);
        ok = false;
    }
    free(model);
    tg_ctx_free(ctx);
    return ok;
}

/* An average of checkpoints (`tgrad average`): average.n, 1 to CKPT_AVERAGE_MAX, and
 * average.steps, the optim.step of each checkpoint averaged as n comma-separated decimals (0
 * to TRAIN_MAX_STEPS), both or neither; info->average_n receives n (0: neither). */
static bool check_average(const tg_safetensors *st, ckpt_info *info, char *err, size_t n)
{
    const char *an = tg_safetensors_meta_get(st, "average.n");
    const char *as = tg_safetensors_meta_get(st, "average.steps");
    char s[80];
    if (!an && !as)
        return true;
    if (!an || !as) {
        snprintf(err, n,
                 "checkpoint has the field '%s' but not '%s' (an average of "
                 "checkpoints has both)",
                 an ? "average.n" : "average.steps", an ? "average.steps" : "average.n");
        return false;
    }
    if (!parse_int_field("average.n", an, 1, CKPT_AVERAGE_MAX, &info->average_n, err, n))
        return false;
    int64_t count = 0, v;
    bool ok = true;
    for (const char *p = as; ok; p += strcspn(p, ",") + 1) {
        size_t len = strcspn(p, ",");
        char d[24];
        ok = len < sizeof d && count < info->average_n;
        if (ok) {
            memcpy(d, p, len);
            d[len] = 0;
            ok = tg_meta_parse_int(d, 0, TRAIN_MAX_STEPS, &v);
        }
        count += ok;
        if (!p[len])
            break;
    }
    if (ok && count == info->average_n)
        return true;
    snprintf(err, n,
             "checkpoint field 'average.steps' '%s': expected %" PRId64 " step counts "
             "(average.n) separated by commas",
             cli_show(as, s, sizeof s), info->average_n);
    return false;
}

/* train.kept: the steps of a --keep-last run's saves it keeps (CK.stepS.ckpt), oldest first:
 * 1 to train.keep_last + 1 (the newest save's step file is written before the oldest is
 * removed) strictly increasing decimals up to optim.step, comma-separated; only with
 * train.keep_last. Read into info->kept. */
static bool check_kept(const tg_safetensors *st, ckpt_info *info, char *err, size_t n)
{
    const char *v = tg_safetensors_meta_get(st, "train.kept");
    const char *kl = tg_safetensors_meta_get(st, "train.keep_last");
    int64_t keep = 0, step;
    info->n_kept = 0;
    if (!v)
        return true;
    char s[80];
    bool ok = kl && tg_meta_parse_int(kl, 1, TRAIN_KEEP_LAST_MAX, &keep);
    for (const char *p = v; ok; p += strcspn(p, ",") + 1) {
        size_t len = strcspn(p, ",");
        char d[24];
        ok = len < sizeof d && info->n_kept <= keep;
        if (ok) {
            memcpy(d, p, len);
            d[len] = 0;
            ok = tg_meta_parse_int(d, 0, info->step, &step) &&
                 (info->n_kept == 0 || step > info->kept[info->n_kept - 1]);
        }
        if (ok)
            info->kept[info->n_kept++] = step;
        if (!p[len])
            break;
    }
    if (ok)
        return true;
    snprintf(err, n,
             "checkpoint field 'train.kept' '%s': expected up to train.keep_last + 1 "
             "increasing steps up to optim.step %" PRId64 ", separated by commas (with "
             "train.keep_last)",
             cli_show(v, s, sizeof s), info->step);
    info->n_kept = 0;
    return false;
}

/* Who reads the checkpoint: what it may be and what is checked. */
typedef enum {
    USE_TRAIN,  /* tgrad train --resume: the mode must match --text; memory for training */
    USE_SAMPLE, /* tgrad sample: a text checkpoint; memory for inference */
    USE_EXPORT, /* tgrad export: any model; nothing is built, so no memory check */
    USE_INFO    /* tgrad info: any checkpoint; nothing is built */
} ckpt_use;

static bool apply(const tg_safetensors *st, train_args *a, const cli_result *given,
                  ckpt_use use, ckpt_info *info, char *err, size_t n)
{
    memset(info, 0, sizeof *info);
    if (!st) {
        snprintf(err, n, "no checkpoint");
        return false;
    }
    if (!apply_data(st, a, given, info, err, n))
        return false;
    if (use == USE_SAMPLE && !info->text && !info->seq2seq) {
        info->usage = true; /* the wrong kind of checkpoint for the command */
        snprintf(err, n, "a checkpoint of a built-in task's encoder, not of 'tgrad train --text' "
                 "or '--arch seq2seq' (data.mode task, model.arch encoder): nothing to sample");
        return false;
    }
    return apply_options(st, a, given, info, err, n) && check_state(st, info, err, n) &&
           (!info->pairs || check_pairs(st, a, given, info, err, n)) &&
           check_average(st, info, err, n) && check_kept(st, info, err, n);
}

bool ckpt_apply(const tg_safetensors *st, train_args *a, const cli_result *given, bool sample,
                ckpt_info *info, char *err, size_t n)
{
    return apply(st, a, given, sample ? USE_SAMPLE : USE_TRAIN, info, err, n);
}

tg_dtype train_dtype(const train_args *a)
{
    return a->dtype == DT_F64 ? TG_F64 : TG_F32;
}

int train_n_state(const train_args *a)
{
    int n = a->optimizer == OPT_SGD ? 1 : 2;
    /* --grad-accum K > 1: at most log2(K) + 2 packed gradient copies (tg_grad_accum) */
    if (a->grad_accum > 1) {
        n += 2;
        for (int64_t k = 1; k < a->grad_accum; k *= 2)
            n++;
    }
    return n;
}

void train_model_config(const train_args *a, bool text, int64_t vocab_size,
                        tg_transformer_config *mc)
{
    memset(mc, 0, sizeof *mc);
    mc->vocab_size = vocab_size;
    mc->max_seq_len = a->seq_len;
    mc->n_layers = a->layers;
    mc->layer = tg_encoder_config_default(a->d_model, a->heads);
    mc->layer.d_ff = a->d_ff;
    mc->layer.norm_first = !a->post_norm;
    mc->layer.activation = a->activation == ACT_GELU ? TG_ACT_GELU : TG_ACT_RELU;
    mc->layer.dropout = a->dropout;
    /* -1 (not given): 0, as dropout; 0 given: none */
    mc->layer.attn_dropout = a->attn_dropout < 0 ? 0 : a->attn_dropout == 0 ? TG_DROPOUT_OFF
                                                                             : a->attn_dropout;
    mc->layer.act_dropout = a->act_dropout < 0 ? 0 : a->act_dropout == 0 ? TG_DROPOUT_OFF
                                                                          : a->act_dropout;
    mc->pos = a->pos == POS_SINUSOIDAL ? TG_POS_SINUSOIDAL : TG_POS_LEARNED;
    mc->causal = text;
    mc->tie_weights = a->tie;
    mc->n_decoder_layers = a->arch == ARCH_SEQ2SEQ ? a->decoder_layers : 0;
    mc->scale_embeddings = a->emb_scale == EMB_SQRT;
}

/* ---- tensors ------------------------------------------------------------------------------ */
bool ckpt_check_tensors(const tg_safetensors *st, const tg_transformer_config *mc,
                        const train_args *a, char *err, size_t n)
{
    /* the library's check records on a context; the file may belong to any, so a small one of
     * its own keeps the caller's free of the message */
    tg_ctx *ctx = tg_ctx_new();
    if (!ctx) {
        snprintf(err, n, "out of memory");
        return false;
    }
    tg_optim_config oc = tg_optim_defaults(a->optimizer == OPT_SGD    ? TG_OPTIM_SGD
                                           : a->optimizer == OPT_ADAM ? TG_OPTIM_ADAM
                                                                      : TG_OPTIM_ADAMW);
    oc.momentum = a->momentum;
    bool ok = tg_checkpoint_check(ctx, st, mc, train_dtype(a), &oc) == TG_OK;
    if (!ok) /* the message without the function's name */
        lib_message(ctx, err, n);
    tg_ctx_free(ctx);
    return ok;
}

/* An average's tensors (average.n): every parameter of @p mc with its shape and dtype
 * (tg_checkpoint_check without an optimizer) and nothing else: no optimizer state. */
static bool check_params_only(const tg_safetensors *st, const tg_transformer_config *mc,
                              const train_args *a, char *err, size_t n)
{
    tg_ctx *ctx = tg_ctx_new();
    if (!ctx) {
        snprintf(err, n, "out of memory");
        return false;
    }
    bool ok = tg_checkpoint_check(ctx, st, mc, train_dtype(a), NULL) == TG_OK;
    if (!ok)
        lib_message(ctx, err, n);
    tg_ctx_free(ctx);
    int64_t np = tg_transformer_params(mc, NULL, 0);
    for (int64_t j = 0; ok && np != tg_safetensors_count(st) && j < tg_safetensors_count(st); j++) {
        const char *name = tg_safetensors_name(st, j);
        if (!strncmp(name, "adam.", 5) || !strncmp(name, "sgd.", 4)) {
            char s[80];
            snprintf(err, n,
                     "the file has optimizer state '%s', but an average of checkpoints "
                     "(average.n) holds parameters only",
                     cli_show(name, s, sizeof s));
            ok = false;
        }
    }
    return ok;
}

/* ---- memory ------------------------------------------------------------------------------ */
double model_memory_estimate(const tg_transformer_config *mc, tg_dtype dt, int64_t batch,
                             int n_state, bool train)
{
    double V = (double)mc->vocab_size, T = (double)mc->max_seq_len, L = (double)mc->n_layers;
    double D = (double)mc->layer.d_model, F = (double)mc->layer.d_ff;
    double H = (double)mc->layer.n_heads, B = (double)batch;
    double es = dt == TG_F64 ? 8 : 4;
    /* parameters: embeddings, per layer in_proj (3D, D) + out_proj (D, D) + FFN (F, D) and
     * (D, F) + biases and norms, final norm, head */
    double layer = 4 * D * D + 2 * D * F + 9 * D + F;
    /* a decoder layer: the encoder layer's, cross-attention (4D^2 + 4D) and norm3; its
     * activations are counted as those of two encoder layers (an upper bound) */
    double Ld = (double)mc->n_decoder_layers;
    double params = V * D + (mc->pos == TG_POS_LEARNED ? T * D : 0) + L * layer + 2 * D +
                    (mc->tie_weights ? 0 : V * D) + V + Ld * (layer + 4 * D * D + 6 * D) +
                    (Ld > 0 ? 2 * D : 0);
    L += 2 * Ld;
    /* each parameter: its value and gradient (+ optimizer state when training) */
    double bytes = params * es * (2 + (train ? n_state : 0));
    /* activations kept by the graph, per layer: ~16 (B, T, D) tensors (norms, q/k/v and their
     * head views, attention output, projections, residuals), 4 (B, T, F) (linear1, activation,
     * dropout) and 4 (B, H, T, T) (scores, mask, softmax, dropout); embeddings and the head:
     * ~4 (B, T, D) and 3 (B, T, V). Training keeps a gradient for each. */
    double N = B * T;
    double acts = L * (N * (16 * D + 4 * F) + 4 * B * H * T * T) + N * (4 * D + 3 * V);
    bytes += acts * es * (train ? 2 : 1);
    bytes += 2 * N * sizeof(int32_t); /* the id and target batches (i32) */
    return bytes;
}

static void human(double b, char *buf, size_t n)
{
    if (b >= 1e15)
        snprintf(buf, n, "%.0f TB", b / 1e12);
    else if (b >= 1e12)
        snprintf(buf, n, "%.3g TB", b / 1e12);
    else if (b >= 1e9)
        snprintf(buf, n, "%.1f GB", b / 1e9);
    else
        snprintf(buf, n, "%.0f MB", b / 1e6);
}

bool model_memory_check(const tg_transformer_config *mc, tg_dtype dt, int64_t batch,
                        int n_state, bool train, double limit_bytes, char *err, size_t n)
{
    double need = model_memory_estimate(mc, dt, batch, n_state, train);
    if (!(need <= limit_bytes)) {
        char a[32], b[32];
        human(need, a, sizeof a);
        human(limit_bytes, b, sizeof b);
        snprintf(err, n, "%s %" PRId64 " layer%s of d_model %" PRId64 ", %" PRId64 " head%s, "
                 "d_ff %" PRId64 " on %" PRId64 " x %" PRId64 " tokens needs about %s of memory, "
                 "more than the %s it may use (this machine's memory, or ulimit -v if lower; "
                 "lower --batch, --seq-len, --d-model, --d-ff or --layers)",
                 train ? "training" : "running", mc->n_layers, mc->n_layers == 1 ? "" : "s",
                 mc->layer.d_model, mc->layer.n_heads, mc->layer.n_heads == 1 ? "" : "s",
                 mc->layer.d_ff, batch, mc->max_seq_len, a, b);
        return false;
    }
    return true;
}

/* train --resume: the checkpoint's kind of run (text, task, translation) is the command
 * line's (--text, --pairs, neither); otherwise a usage error naming the checkpoint's kind and
 * the options that resume it. */
static bool same_kind(const train_args *a, ckpt_info *info, char *err, size_t n)
{
    int have = info->text ? 0 : info->pairs ? 2 : 1;
    int want = a->text.n > 0 ? 0 : a->pairs ? 2 : 1;
    if (have == want)
        return true;
    static const char *const given[3] = {"--text", "", "--pairs"};
    char what[96];
    if (have == 1)
        snprintf(what, sizeof what, "a built-in task run (data.mode task, model.arch %s)",
                 info->seq2seq ? "seq2seq" : "encoder");
    info->usage = true; /* the command line contradicts the file */
    char tail[32];
    snprintf(tail, sizeof tail, want != 1 ? ", not %s" : have == 0 ? " (none was given)"
                                                                   : " (neither was given)",
             given[want]);
    snprintf(err, n, "checkpoint is from %s; pass %s%s",
             have == 0   ? "a --text run (data.mode text)"
             : have == 2 ? "a translation run (data.mode pairs, 'tgrad train --pairs')"
                         : what,
             have == 0   ? "the same --text files"
             : have == 2 ? "its --pairs and --valid files again"
                         : "neither --text nor --pairs (the task comes from the checkpoint)",
             tail);
    return false;
}

static bool validate(const tg_safetensors *st, train_args *a, const cli_result *given,
                     ckpt_use use, double limit_bytes, ckpt_info *info,
                     tg_transformer_config *mc, char *err, size_t n)
{
    if (!apply(st, a, given, use, info, err, n))
        return false;
    if (use == USE_TRAIN && !same_kind(a, info, err, n))
        return false;
    if (!train_resolve(a, info->text, err, n)) {
        info->usage = true; /* options that do not fit the checkpoint's model */
        return false;
    }
    if (use == USE_TRAIN && info->average_n > 0) {
        info->usage = true; /* the wrong kind of checkpoint for the command */
        snprintf(err, n,
                 "an average of %" PRId64 " checkpoints (average.n; 'tgrad average') "
                 "holds parameters only, no optimizer state, so training cannot resume from "
                 "it; translate or sample with it, or resume one of the checkpoints it "
                 "averages",
                 info->average_n);
        return false;
    }
    train_model_config(a, info->text, info->vocab_size, mc);
    if (info->average_n > 0 ? !check_params_only(st, mc, a, err, n)
                            : !ckpt_check_tensors(st, mc, a, err, n))
        return false;
    if (use == USE_EXPORT || use == USE_INFO)
        return true;
    bool sample = use == USE_SAMPLE;
    return model_memory_check(mc, train_dtype(a), sample ? 1 : a->batch / a->grad_accum,
                              sample ? 0 : train_n_state(a), !sample, limit_bytes, err, n);
}

bool ckpt_config_load(const tg_safetensors *st, train_args *a, const cli_result *given,
                      bool sample, double limit_bytes, ckpt_info *info,
                      tg_transformer_config *mc, char *err, size_t n)
{
    return validate(st, a, given, sample ? USE_SAMPLE : USE_TRAIN, limit_bytes, info, mc, err,
                    n);
}

bool ckpt_config_export(const tg_safetensors *st, train_args *a, ckpt_info *info,
                        tg_transformer_config *mc, char *err, size_t n)
{
    return validate(st, a, NULL, USE_EXPORT, 0, info, mc, err, n);
}

bool ckpt_config_check(const tg_safetensors *st, train_args *a, ckpt_info *info,
                       tg_transformer_config *mc, char *err, size_t n)
{
    return validate(st, a, NULL, USE_INFO, 0, info, mc, err, n);
}
