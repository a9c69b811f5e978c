/*
 * model.c - a ready model from a tgrad checkpoint or export (include/tgrad_model.h).
 *
 * Stages: read the metadata into a spec (spec_checkpoint / spec_export: every field validated,
 * nothing allocated but the JSON parser's buffer), bound the config by the file (the values
 * its parameters need must not exceed the values the file holds, so a forged config cannot
 * make tg_transformer_init allocate more than the file's size), check every tensor's name and
 * shape against the parameters tg_transformer_init creates (tg_transformer_params; strict:
 * optimizer state and a tied export's head.weight skipped; optimizer state must hold finite
 * values, Adam's second moments >= 0, and a checkpoint's training state, when present, what
 * tg_train_state_read accepts), then copy the values.
 */
#include "tgrad_model.h"
#include "core.h"
#include "data/data.h"
#include "io/io.h"
#include "io/json.h"

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The encoder-decoder's begin-of-sequence id (after the 10 digits). */
#define MODEL_BOS 10
/* Largest vocabulary of a byte-level model (text, task, export). */
#define MODEL_MAX_VOCAB 256
/* Largest vocabulary of a translation model (data.mode pairs): SentencePiece's limit in
 * tgrad_spm.h (TG_SPM_MAX_VOCAB). */
#define MODEL_MAX_PAIRS_VOCAB (1 << 20)

struct tg_model {
    tg_ctx *ctx;
    tg_model_info info;
    tg_transformer tf;
    int64_t first_param, n_params; /* the model's parameters in the context's list */
    tg_tensor **params;
    int16_t byte_of[MODEL_MAX_VOCAB]; /* id -> byte, -1 for BOS */
    int32_t id_of[256];               /* byte -> id, -1 if absent */
    void *tok_model;                  /* pairs, sentencepiece: the decoded tokenizer.model
                                         (context memory), else NULL */
    size_t tok_size;
};

/* What the metadata says: the info and the vocabulary. */
typedef struct spec {
    tg_model_info info;
    int16_t byte_of[MODEL_MAX_VOCAB];
    bool tied_head_copy; /* an export of a tied model: head.weight is a copy of tok_emb */
    void *tok_model;     /* pairs, sentencepiece: tokenizer.model decoded (malloc'd; the
                            caller of read_spec frees it with spec_free) */
    size_t tok_size;
} spec;

typedef struct rd {
    tg_ctx *ctx;
    const char *fn, *label;
    const tg_safetensors *st;
} rd;

#define FAIL(r, ...) (tg__err((r)->ctx, TG_ERR_FORMAT, (r)->fn, __VA_ARGS__), false)

/* ---- metadata fields ------------------------------------------------------------------------ */
static const char *meta(const rd *r, const char *key, bool required, bool *ok)
{
    const char *v = tg_safetensors_meta_get(r->st, key);
    if (!v && required)
        *ok = FAIL(r, "%s: not a complete tgrad checkpoint: metadata '%s' is missing", r->label,
                   key);
    return v;
}

static bool meta_int(const rd *r, const char *key, bool required, int64_t lo, int64_t hi,
                     int64_t *out)
{
    bool ok = true;
    const char *v = meta(r, key, required, &ok);
    if (!v)
        return ok;
    if (!tg_meta_parse_int(v, lo, hi, out)) {
        char q[56];
        return FAIL(r, "%s: metadata '%s' is '%s' (expected an integer from %" PRId64 " to %"
                    PRId64 ")", r->label, key, tg__quote(v, 48, q), lo, hi);
    }
    return true;
}

/* One of the '|'-separated @p choices: its index into *out (absent and not required: kept). */
static bool meta_choice(const rd *r, const char *key, bool required, const char *choices,
                        int *out)
{
    bool ok = true;
    const char *v = meta(r, key, required, &ok);
    if (!v)
        return ok;
    size_t vl = strlen(v);
    int i = 0;
    for (const char *c = choices; *c; i++) {
        size_t cl = strcspn(c, "|");
        if (cl == vl && !strncmp(c, v, vl)) {
            *out = i;
            return true;
        }
        c += cl + (c[cl] == '|');
    }
    char q[56];
    return FAIL(r, "%s: metadata '%s' is '%s' (expected %s)", r->label, key, tg__quote(v, 48, q),
                choices);
}

static bool meta_bool(const rd *r, const char *key, bool required, bool *out)
{
    int i = *out;
    if (!meta_choice(r, key, required, "0|1", &i))
        return false;
    *out = i == 1;
    return true;
}

/* The digits '0'..'9' (ids 0-9), and BOS (no byte) for the encoder-decoder. */
static void task_vocab(spec *s)
{
    for (int i = 0; i < 10; i++)
        s->byte_of[i] = (int16_t)('0' + i);
    s->byte_of[MODEL_BOS] = -1;
}

/* ---- a checkpoint (tgrad train --checkpoint) ------------------------------------------------- */
static bool spec_checkpoint_model(const rd *r, tg_transformer_config *c, bool *f64)
{
    int act = 0, pos = 0, dt = 0;
    bool nf = true, tie = false, scale = false;
    int64_t heads = 1, dff = 1;
    if (!meta_int(r, "model.layers", true, 1, TG_TRANSFORMER_MAX_LAYERS, &c->n_layers) ||
        !meta_int(r, "model.d_model", true, 1, INT32_MAX, &c->layer.d_model) ||
        !meta_int(r, "model.heads", true, 1, INT32_MAX, &heads) ||
        !meta_int(r, "model.d_ff", true, 1, INT32_MAX, &dff) ||
        !meta_int(r, "model.seq_len", true, 1, TG_TRANSFORMER_MAX_SEQ_LEN, &c->max_seq_len) ||
        !meta_int(r, "model.vocab_size", true, 1, MODEL_MAX_PAIRS_VOCAB, &c->vocab_size) ||
        !meta_bool(r, "model.norm_first", true, &nf) ||
        !meta_choice(r, "model.activation", true, "relu|gelu", &act) ||
        !meta_choice(r, "model.pos", true, "learned|sinusoidal", &pos) ||
        !meta_bool(r, "model.tie_weights", false, &tie) ||
        !meta_bool(r, "model.scale_embeddings", false, &scale) ||
        !meta_choice(r, "model.dtype", false, "f32|f64", &dt))
        return false;
    int64_t d = c->layer.d_model;
    c->layer = tg_encoder_config_default(d, heads);
    c->layer.d_ff = dff;
    c->layer.norm_first = nf;
    c->layer.activation = act ? TG_ACT_GELU : TG_ACT_RELU;
    c->pos = pos ? TG_POS_SINUSOIDAL : TG_POS_LEARNED;
    c->tie_weights = tie;
    c->scale_embeddings = scale;
    *f64 = dt == 1;
    if (d % heads != 0)
        return FAIL(r, "%s: metadata 'model.heads' is %" PRId64 ", which does not divide "
                    "model.d_model %" PRId64, r->label, heads, d);
    return true;
}

/* A translation model's vocabulary (data.mode pairs): its tokenizer (tokenizer.kind, and
 * tokenizer.model decoded for sentencepiece); BOS is the tokenizers' id 1. A byte tokenizer
 * fixes the vocabulary size; a SentencePiece model's size is checked by whoever loads it. */
static bool spec_pairs_vocab(const rd *r, spec *s)
{
    const char *kind = NULL;
    if (tg_tokenizer_meta_read(r->ctx, r->st, &kind, &s->tok_model, &s->tok_size) != TG_OK) {
        char msg[1024];
        snprintf(msg, sizeof msg, "%s", tg_ctx_message(r->ctx));
        const char *m = strncmp(msg, "tg_tokenizer_meta_read: ", 24) ? msg : msg + 24;
        tg__err_replace(r->ctx, tg_ctx_status(r->ctx), r->fn, "%s: %s", r->label, m);
        return false;
    }
    bool spm = !strcmp(kind, "sentencepiece");
    snprintf(s->info.tokenizer, sizeof s->info.tokenizer, "%s", kind);
    s->info.bos_id = TG_TOKEN_BOS;
    for (int i = 0; i < MODEL_MAX_VOCAB; i++)
        s->byte_of[i] = -1; /* ids stand for tokenizer pieces, not bytes */
    int64_t V = s->info.config.vocab_size;
    if (!spm && V != TG_BYTE_VOCAB)
        return FAIL(r, "%s: metadata disagrees: model.vocab_size %" PRId64 " but the byte "
                    "tokenizer (tokenizer.kind bytes) has %d", r->label, V, TG_BYTE_VOCAB);
    if (spm && V < 4)
        return FAIL(r, "%s: metadata 'model.vocab_size' is %" PRId64 " (a SentencePiece "
                    "vocabulary has at least the 4 special pieces)", r->label, V);
    return true;
}

/* The whole config of a checkpoint's model.* metadata (the reader of tg_transformer_meta's
 * keys): the sizes and options (spec_checkpoint_model), then data.mode (@p mode_required, or
 * absent: *mode -1), model.arch (absent in older checkpoints: data.mode's own, or without
 * data.mode lm for model.causal 1, else encoder) against data.mode, model.causal,
 * model.decoder_layers. *arch: 0 encoder, 1 lm, 2 seq2seq; *mode: 0 text, 1 task, 2 pairs. */
static bool read_model_meta(const rd *r, bool mode_required, tg_transformer_config *c,
                            bool *f64, int *mode, int *arch)
{
    static const char *const modes[] = {"text", "task", "pairs"};
    static const char *const archs[] = {"encoder", "lm", "seq2seq"};
    *mode = -1;
    *arch = -1;
    if (!spec_checkpoint_model(r, c, f64) ||
        !meta_choice(r, "data.mode", mode_required, "text|task|pairs", mode) ||
        !meta_choice(r, "model.arch", false, "encoder|lm|seq2seq", arch))
        return false;
    bool text = *mode == 0, pairs = *mode == 2;
    if (*arch < 0 && *mode >= 0) {
        *arch = text ? 1 : pairs ? 2 : 0; /* older checkpoints: the mode's own */
    } else if (*arch < 0) {
        bool cz = false;
        if (!meta_bool(r, "model.causal", false, &cz))
            return false;
        *arch = cz ? 1 : 0;
    }
    if (*mode >= 0 && ((*arch == 1) != text || (pairs && *arch != 2)))
        return FAIL(r, "%s: metadata disagrees: model.arch %s but data.mode %s", r->label,
                    archs[*arch], modes[*mode]);
    c->causal = *arch == 1;
    bool causal = c->causal;
    if (!meta_bool(r, "model.causal", false, &causal))
        return false;
    if (causal != c->causal)
        return FAIL(r, "%s: metadata disagrees: model.causal %d but %s %s", r->label, causal,
                    *mode >= 0 ? "data.mode" : "model.arch",
                    *mode >= 0 ? modes[*mode] : archs[*arch]);
    int64_t nd = 0;
    if (!meta_int(r, "model.decoder_layers", *arch == 2, *arch == 2, TG_TRANSFORMER_MAX_LAYERS,
                  &nd))
        return false;
    c->n_decoder_layers = nd;
    return true;
}

/* The vocabulary of data.mode @p mode (0 text, 1 task, 2 pairs) and architecture @p arch. */
static bool spec_checkpoint_data(const rd *r, spec *s, int mode, int arch)
{
    tg_transformer_config *c = &s->info.config;
    int task = 0;
    bool text = mode == 0, pairs = mode == 2;
    s->info.kind = arch == 1 ? TG_MODEL_LM : arch == 0 ? TG_MODEL_ENCODER : TG_MODEL_SEQ2SEQ;
    if (pairs)
        return spec_pairs_vocab(r, s) &&
               meta_int(r, "optim.step", false, 0, (int64_t)1 << 53, &s->info.step);
    int64_t want_v;
    if (text) {
        bool ok = true;
        const char *hex = meta(r, "data.vocab", true, &ok);
        if (!hex)
            return false;
        size_t len = strlen(hex);
        bool good = len >= 2 && len % 2 == 0 && len <= 2 * MODEL_MAX_VOCAB;
        for (size_t i = 0; good && i < len / 2; i++) {
            int hi = tg__hex_digit((unsigned char)hex[2 * i]);
            int lo = tg__hex_digit((unsigned char)hex[2 * i + 1]);
            good = hi >= 0 && lo >= 0;
            s->byte_of[i] = (int16_t)(16 * hi + lo);
            good = good && (i == 0 || s->byte_of[i] > s->byte_of[i - 1]);
        }
        if (!good) {
            char q[56];
            return FAIL(r, "%s: metadata 'data.vocab' is '%s' (expected 1 to 256 distinct bytes "
                        "in increasing order as hex)", r->label, tg__quote(hex, 48, q));
        }
        want_v = (int64_t)(len / 2);
    } else {
        if (!meta_choice(r, "data.task", true, "copy|reverse|sort", &task))
            return false;
        snprintf(s->info.task, sizeof s->info.task, "%s",
                 task == 0 ? "copy" : task == 1 ? "reverse" : "sort");
        task_vocab(s);
        want_v = arch == 2 ? MODEL_BOS + 1 : 10;
        if (arch == 2)
            s->info.bos_id = MODEL_BOS;
    }
    if (c->vocab_size != want_v)
        return FAIL(r, "%s: metadata disagrees: model.vocab_size %" PRId64 " but the vocabulary "
                    "(%s) has %" PRId64, r->label, c->vocab_size,
                    text ? "data.vocab" : "the digits, and BOS for seq2seq", want_v);
    return meta_int(r, "optim.step", false, 0, (int64_t)1 << 53, &s->info.step);
}

static bool spec_checkpoint(const rd *r, spec *s)
{
    bool f64 = false;
    int mode, arch;
    /* the training state (data.epoch, ..., when present) as tg_train_state_read checks it:
     * a checkpoint `tgrad train --resume` would refuse is refused here too */
    if (!read_model_meta(r, true, &s->info.config, &f64, &mode, &arch) ||
        !spec_checkpoint_data(r, s, mode, arch) ||
        tg__train_state_fields(r->ctx, r->fn, r->label, r->st, false, NULL) != TG_OK)
        return false;
    s->info.format = TG_MODEL_CHECKPOINT;
    s->info.dtype = f64 ? TG_F64 : TG_F32;
    return true;
}

static tg_status meta_read_io(tg_ctx *ctx, const tg_safetensors *st, const char *label,
                              tg_transformer_config *cfg, tg_dtype *dt)
{
    static const char *fn = "tg_transformer_meta_read";
    if (!ctx)
        return TG_ERR_ARG;
    if (!st || !cfg) {
        tg__err(ctx, TG_ERR_ARG, fn, "%s is NULL", !st ? "the file" : "cfg");
        return TG_ERR_ARG;
    }
    rd r = {ctx, fn, label ? label : "<memory>", st};
    tg_transformer_config c;
    memset(&c, 0, sizeof c);
    bool f64 = false;
    int mode, arch;
    if (!read_model_meta(&r, false, &c, &f64, &mode, &arch))
        return tg_ctx_status(ctx);
    static const char *const keys[3] = {"model.dropout", "model.attn_dropout",
                                        "model.act_dropout"}; /* training only */
    double *to[3] = {&c.layer.dropout, &c.layer.attn_dropout, &c.layer.act_dropout};
    for (int i = 0; i < 3; i++) {
        const char *dv = tg_safetensors_meta_get(st, keys[i]);
        if (!dv)
            continue; /* 0: none; the other two: as model.dropout */
        char *end = NULL;
        double p = strtod(dv, &end);
        if (!*dv || *end || !(p >= 0 && p < 1)) {
            char q[56];
            tg__err(ctx, TG_ERR_FORMAT, fn, "%s: metadata '%s' is '%s' (expected a number "
                    "from 0 to below 1)", r.label, keys[i], tg__quote(dv, 48, q));
            return TG_ERR_FORMAT;
        }
        *to[i] = i > 0 && p == 0 ? TG_DROPOUT_OFF : p; /* set apart: 0 is none */
    }
    *cfg = c;
    if (dt)
        *dt = f64 ? TG_F64 : TG_F32;
    return TG_OK;
}

tg_status tg_transformer_meta_read(tg_ctx *ctx, const tg_safetensors *st, const char *label,
                                   tg_transformer_config *cfg, tg_dtype *dt)
{
    if (!ctx)
        return TG_ERR_ARG;
    tg__io_enter(ctx); /* a run-time error, like every file call's */
    tg_status r = meta_read_io(ctx, st, label, cfg, dt);
    tg__io_leave(ctx);
    return r;
}

/* ---- an export (tgrad export) --------------------------------------------------------------- */
/* The number just parsed, from its text (validated JSON): strtod of text[start..jp->pos). */
static double number_text(const tg__jp *jp, size_t start)
{
    char buf[64];
    size_t n = jp->pos - start;
    while (n > 0 && (jp->s[start] == ' ' || jp->s[start] == '\t' || jp->s[start] == '\n' ||
                     jp->s[start] == '\r')) {
        start++;
        n--;
    }
    if (n >= sizeof buf)
        return NAN; /* longer than any number tgrad writes */
    memcpy(buf, jp->s + start, n);
    buf[n] = 0;
    return strtod(buf, NULL);
}

/* The keys of the export's config, in the order of the bit in `seen`. An LM's or encoder's
 * config has causal and not the last two; an encoder-decoder's has n_decoder_layers and
 * scale_embedding (absent: false) instead of causal. */
static const char *const config_keys[] = {
    "vocab_size", "max_seq_len", "n_layers", "d_model", "n_heads", "d_ff", "activation",
    "norm_first", "pos", "causal", "tie_weights", "layer_norm_eps", "dropout", "dtype",
    "n_decoder_layers", "scale_embedding"};
enum {
    N_CONFIG_KEYS = 16,
    N_REQUIRED_KEYS = 11, /* the first 11 (but causal for an encoder-decoder) are required */
    KEY_CAUSAL = 9,
    KEY_DECODER_LAYERS = 14,
    KEY_SCALE = 15
};

/* Config keys 0 to 5: integers from 1 to their limit, into their fields. */
static bool config_int(tg__jp *jp, int k, spec *s, int64_t *heads)
{
    tg_transformer_config *c = &s->info.config;
    static const int64_t hi[6] = {MODEL_MAX_PAIRS_VOCAB, TG_TRANSFORMER_MAX_SEQ_LEN,
                                  TG_TRANSFORMER_MAX_LAYERS, INT32_MAX, INT32_MAX, INT32_MAX};
    int64_t *dst[6] = {&c->vocab_size, &c->max_seq_len, &c->n_layers, &c->layer.d_model, heads,
                       &c->layer.d_ff};
    tg__jnum v;
    if (!tg__jp_number(jp, &v))
        return false;
    if (!v.is_int || v.neg || v.big || v.mag < 1 || v.mag > (uint64_t)hi[k]) {
        char what[96];
        snprintf(what, sizeof what, "config '%s' out of range (an integer from 1 to %" PRId64
                 ")", config_keys[k], hi[k]);
        tg__jp_fail(jp, TG_ERR_FORMAT, what);
        return false;
    }
    *dst[k] = (int64_t)v.mag;
    return true;
}

/* n_decoder_layers: an integer from 1 to TG_TRANSFORMER_MAX_LAYERS. */
static bool config_decoder_layers(tg__jp *jp, spec *s)
{
    tg_transformer_config *c = &s->info.config;
    tg__jnum v;
    if (!tg__jp_number(jp, &v))
        return false;
    if (!v.is_int || v.neg || v.big || v.mag < 1 || v.mag > TG_TRANSFORMER_MAX_LAYERS) {
        tg__jp_fail(jp, TG_ERR_FORMAT, "n_decoder_layers out of range");
        return false;
    }
    c->n_decoder_layers = (int64_t)v.mag;
    return true;
}

/* layer_norm_eps (11) in (0, 1), dropout (12) in [0, 1). */
static bool config_float(tg__jp *jp, int k, spec *s)
{
    tg_transformer_config *c = &s->info.config;
    size_t start = jp->pos;
    tg__jnum v;
    if (!tg__jp_number(jp, &v))
        return false;
    double x = number_text(jp, start);
    if (k == 11 ? !(x > 0 && x < 1) : !(x >= 0 && x < 1)) {
        tg__jp_fail(jp, TG_ERR_FORMAT, k == 11 ? "layer_norm_eps not in (0, 1)"
                                               : "dropout not in [0, 1)");
        return false;
    }
    if (k == 11)
        c->layer.layer_norm_eps = x;
    return true;
}

/* The booleans: norm_first (7), causal (9), tie_weights (10), scale_embedding. */
static bool config_bool(tg__jp *jp, int k, spec *s)
{
    tg_transformer_config *c = &s->info.config;
    if (tg__jp_peek(jp) != TG__J_BOOL) {
        tg__jp_fail(jp, TG_ERR_FORMAT, "expected true or false");
        return false;
    }
    size_t start = jp->pos; /* the literal true or false (and whitespace before it) */
    if (!tg__jp_skip(jp))
        return false;
    bool b = memchr(jp->s + start, 't', jp->pos - start) != NULL;
    if (k == KEY_SCALE)
        c->scale_embeddings = b; /* token embeddings times sqrt(d_model) */
    else if (k == 7)
        c->layer.norm_first = b;
    else if (k == 9)
        c->causal = b;
    else
        c->tie_weights = b;
    return true;
}

/* The strings: activation (6), pos (8), dtype. */
static bool config_string(tg__jp *jp, int k, spec *s)
{
    tg_transformer_config *c = &s->info.config;
    tg__jstr v; /* activation, pos, dtype */
    if (!tg__jp_string(jp, &v))
        return false;
    const char *a = k == 6 ? "relu" : k == 8 ? "learned" : "float32";
    const char *b = k == 6 ? "gelu" : k == 8 ? "sinusoidal" : "float64";
    bool second = !strcmp(v.p, b);
    if (strlen(v.p) != v.len || (strcmp(v.p, a) && !second)) {
        tg__jp_fail(jp, TG_ERR_FORMAT, k == 6 ? "activation not relu or gelu"
                                       : k == 8 ? "pos not learned or sinusoidal"
                                                : "dtype not float32 or float64");
        return false;
    }
    if (k == 6)
        c->layer.activation = second ? TG_ACT_GELU : TG_ACT_RELU;
    else if (k == 8)
        c->pos = second ? TG_POS_SINUSOIDAL : TG_POS_LEARNED;
    else
        s->info.dtype = second ? TG_F64 : TG_F32;
    return true;
}

/* One member of the config object: key @p k (index into config_keys). */
static bool config_member(tg__jp *jp, int k, spec *s, int64_t *heads)
{
    if (k < 6)
        return config_int(jp, k, s, heads);
    if (k == KEY_DECODER_LAYERS)
        return config_decoder_layers(jp, s);
    if (k == 11 || k == 12) /* layer_norm_eps > 0, dropout in [0, 1) */
        return config_float(jp, k, s);
    if (k == 7 || k == 9 || k == 10 || k == KEY_SCALE) /* booleans */
        return config_bool(jp, k, s);
    return config_string(jp, k, s); /* activation, pos, dtype */
}

static bool spec_export_config(const rd *r, const char *text, spec *s)
{
    char label[160];
    snprintf(label, sizeof label, "%s: metadata 'config'", r->label);
    tg__jp jp;
    if (tg__jp_init(&jp, r->ctx, r->fn, label, text, strlen(text)) != TG_OK)
        return false;
    int64_t heads = 1;
    unsigned seen = 0;
    tg_transformer_config *c = &s->info.config;
    c->layer = tg_encoder_config_default(1, 1);
    s->info.dtype = TG_F32;
    bool ok = tg__jp_obj_begin(&jp);
    tg__jstr key;
    while (ok && tg__jp_obj_next(&jp, &key)) {
        int k = 0;
        while (k < N_CONFIG_KEYS && (strlen(key.p) != key.len || strcmp(key.p, config_keys[k])))
            k++;
        if (k == N_CONFIG_KEYS || (seen >> k & 1u)) {
            tg__jp_fail(&jp, TG_ERR_FORMAT, k == N_CONFIG_KEYS ? "an unknown key"
                                                               : "a repeated key");
            ok = false;
            break;
        }
        seen |= 1u << k;
        ok = config_member(&jp, k, s, &heads);
    }
    ok = ok && jp.err == TG_OK && tg__jp_end(&jp);
    tg__jp_free(&jp);
    if (!ok)
        return false;
    bool s2s = seen >> KEY_DECODER_LAYERS & 1u;
    for (int k = 0; k < N_REQUIRED_KEYS; k++)
        if (!(seen >> k & 1u) && !(s2s && k == KEY_CAUSAL))
            return FAIL(r, "%s: metadata 'config' lacks \"%s\"", r->label, config_keys[k]);
    if (s2s && (seen >> KEY_CAUSAL & 1u))
        return FAIL(r, "%s: metadata 'config' has both \"n_decoder_layers\" and \"causal\" "
                    "(an encoder-decoder's target is always causal)", r->label);
    if (!s2s && (seen >> KEY_SCALE & 1u))
        return FAIL(r, "%s: metadata 'config' has \"scale_embedding\" without "
                    "\"n_decoder_layers\"", r->label);
    c->layer.n_heads = heads;
    if (c->layer.d_model % heads != 0)
        return FAIL(r, "%s: metadata 'config': n_heads %" PRId64 " does not divide d_model %"
                    PRId64, r->label, heads, c->layer.d_model);
    return true;
}

/* vocab: a JSON array of V distinct integers 0-255. */
static bool spec_export_vocab(const rd *r, const char *text, spec *s)
{
    char label[160];
    snprintf(label, sizeof label, "%s: metadata 'vocab'", r->label);
    tg__jp jp;
    if (tg__jp_init(&jp, r->ctx, r->fn, label, text, strlen(text)) != TG_OK)
        return false;
    bool used[256] = {false};
    int64_t n = 0, V = s->info.config.vocab_size;
    bool s2s = s->info.config.n_decoder_layers > 0;
    bool ok = tg__jp_arr_begin(&jp);
    while (ok && tg__jp_arr_next(&jp)) {
        if (s2s && n == V - 1 && tg__jp_peek(&jp) == TG__J_NULL) { /* BOS stands for no byte */
            ok = tg__jp_skip(&jp);
            s->byte_of[n++] = -1;
            continue;
        }
        tg__jnum v;
        ok = tg__jp_number(&jp, &v);
        if (ok && (!v.is_int || v.neg || v.big || v.mag > 255 || used[v.mag] || n >= V)) {
            tg__jp_fail(&jp, TG_ERR_FORMAT, n >= V ? "more entries than config's vocab_size"
                                                   : "not a distinct byte 0-255");
            ok = false;
        }
        if (ok) {
            used[v.mag] = true;
            s->byte_of[n++] = (int16_t)v.mag;
        }
    }
    ok = ok && jp.err == TG_OK && tg__jp_end(&jp);
    tg__jp_free(&jp);
    if (ok && n != V)
        return FAIL(r, "%s: metadata 'vocab' has %" PRId64 " entries, config's vocab_size is %"
                    PRId64, r->label, n, V);
    return ok;
}

static bool spec_export(const rd *r, spec *s)
{
    bool ok = true;
    const char *config = meta(r, "config", true, &ok), *data = meta(r, "data", true, &ok);
    if (!ok || !spec_export_config(r, config, s) ||
        !meta_int(r, "step", false, 0, (int64_t)1 << 53, &s->info.step))
        return false;
    s->info.format = TG_MODEL_EXPORT;
    bool s2s = s->info.config.n_decoder_layers > 0;
    s->info.kind = s2s ? TG_MODEL_SEQ2SEQ : s->info.config.causal ? TG_MODEL_LM
                                                                   : TG_MODEL_ENCODER;
    s->tied_head_copy = s->info.config.tie_weights;
    if (!strcmp(data, "pairs")) { /* a translation model: its tokenizer, no byte vocabulary */
        int64_t bos = -1;
        if (!s2s)
            return FAIL(r, "%s: metadata 'data' is 'pairs' but 'config' is not an "
                        "encoder-decoder's (it lacks \"n_decoder_layers\")", r->label);
        if (tg_safetensors_meta_get(r->st, "vocab"))
            return FAIL(r, "%s: metadata 'vocab' in a translation model's export (data "
                        "'pairs': the ids are its tokenizer's)", r->label);
        if (!meta_int(r, "bos_id", true, 0, MODEL_MAX_PAIRS_VOCAB, &bos))
            return false;
        if (bos != TG_TOKEN_BOS)
            return FAIL(r, "%s: metadata 'bos_id' is %" PRId64 " (a translation model's BOS is "
                        "its tokenizer's id %d)", r->label, bos, TG_TOKEN_BOS);
        return spec_pairs_vocab(r, s);
    }
    if (s->info.config.vocab_size > MODEL_MAX_VOCAB) {
        char q[56];
        return FAIL(r, "%s: metadata 'config': vocab_size %" PRId64 " is more than a byte "
                    "vocabulary's %d (data '%s')", r->label, s->info.config.vocab_size,
                    MODEL_MAX_VOCAB, tg__quote(data, 48, q));
    }
    const char *vocab = meta(r, "vocab", true, &ok);
    if (!ok || !spec_export_vocab(r, vocab, s))
        return false;
    if (s2s) { /* a task's encoder-decoder: the digits, then BOS */
        int64_t bos = -1;
        if (!meta_int(r, "bos_id", true, 0, MODEL_BOS, &bos))
            return false;
        spec want;
        task_vocab(&want);
        if (bos != MODEL_BOS || s->info.config.vocab_size != MODEL_BOS + 1 ||
            memcmp(want.byte_of, s->byte_of, sizeof(int16_t) * (MODEL_BOS + 1)) != 0)
            return FAIL(r, "%s: metadata 'vocab' and 'bos_id' are not an encoder-decoder "
                        "task's (the digits 48-57, then null for BOS, bos_id %d)", r->label,
                        MODEL_BOS);
        s->info.bos_id = MODEL_BOS;
    }
    if (!strncmp(data, "task:", 5) && !s->info.config.causal &&
        (!strcmp(data + 5, "copy") || !strcmp(data + 5, "reverse") || !strcmp(data + 5, "sort")))
        snprintf(s->info.task, sizeof s->info.task, "%s", data + 5);
    else if (strcmp(data, "text") != 0 || !s->info.config.causal) {
        char q[56];
        return FAIL(r, "%s: metadata 'data' is '%s' (expected text for a causal model, "
                    "task:copy, task:reverse or task:sort for an encoder, pairs for a "
                    "translation model)", r->label, tg__quote(data, 48, q));
    }
    return true;
}

/* ---- the file against the config ------------------------------------------------------------ */
/* Parameter values the config needs (as model_memory_estimate counts them), in double. */
static double config_values(const tg_transformer_config *c)
{
    double V = (double)c->vocab_size, T = (double)c->max_seq_len, L = (double)c->n_layers;
    double D = (double)c->layer.d_model, F = (double)c->layer.d_ff;
    double Ld = (double)c->n_decoder_layers;
    double layer = 4 * D * D + 2 * D * F + 9 * D + F; /* attention, FFN, biases, two norms */
    return V * D + (c->pos == TG_POS_LEARNED ? T * D : 0) + L * layer + 2 * D +
           (c->tie_weights ? 0 : V * D) + V + Ld * (layer + 4 * D * D + 6 * D) +
           (Ld > 0 ? 2 * D : 0);
}

/* Optimizer state of a parameter: the name without its prefix, or NULL. */
static const char *optim_base(const char *name)
{
    static const char *const prefixes[] = {"adam.m.", "adam.v.", "sgd.momentum."};
    for (size_t k = 0; k < sizeof prefixes / sizeof prefixes[0]; k++)
        if (!strncmp(name, prefixes[k], strlen(prefixes[k])))
            return name + strlen(prefixes[k]);
    return NULL;
}

/* The values the file holds for parameters (optimizer state and a tied copy not counted). */
static double file_values(const rd *r, const spec *s)
{
    double n = 0;
    for (int64_t i = 0; i < tg_safetensors_count(r->st); i++) {
        const char *name = tg_safetensors_name(r->st, i);
        if (optim_base(name) || (s->tied_head_copy && !strcmp(name, "head.weight")))
            continue;
        n += (double)tg_tensor_numel(tg_safetensors_tensor(r->st, i));
    }
    return n;
}

static void spec_free(spec *s)
{
    free(s->tok_model);
    s->tok_model = NULL;
    s->tok_size = 0;
}

static bool read_spec(const rd *r, spec *s)
{
    memset(s, 0, sizeof *s);
    s->info.bos_id = -1;
    const char *fmt = tg_safetensors_meta_get(r->st, "format");
    bool ok;
    if (fmt && !strcmp(fmt, "tgrad-checkpoint-1"))
        ok = spec_checkpoint(r, s);
    else if (fmt && !strcmp(fmt, "tgrad-export-1"))
        ok = spec_export(r, s);
    else {
        char q[56];
        return FAIL(r, "%s: not a tgrad checkpoint or export (metadata 'format' is %s%s%s; "
                    "expected tgrad-checkpoint-1 or tgrad-export-1)", r->label, fmt ? "'" : "",
                    fmt ? tg__quote(fmt, 48, q) : "missing", fmt ? "'" : "");
    }
    double need = ok ? config_values(&s->info.config) : 0, have = ok ? file_values(r, s) : 0;
    if (ok && need > have)
        ok = (tg__err(r->ctx, TG_ERR_MISMATCH, r->fn, "%s: the config needs %.17g parameter "
                      "values but the file holds %.17g", r->label, need, have), false);
    if (!ok)
        spec_free(s);
    return ok;
}

static bool same_shape(const tg_tensor *a, const tg_tensor *b)
{
    return tg_tensor_rank(a) == tg_tensor_rank(b) &&
           memcmp(tg_tensor_shape(a), tg_tensor_shape(b),
                  sizeof(int64_t) * (size_t)tg_tensor_rank(a)) == 0;
}

/* Strict: every parameter present with its shape, nothing else but optimizer state of a
 * parameter and (tied export) a head.weight equal to tok_emb.weight. */
static bool check_tensors(const rd *r, const tg_model *m, bool tied_copy)
{
    char a[128], b[128], q[112];
    for (int64_t i = 0; i < m->n_params; i++) {
        const tg_tensor *p = m->params[i];
        const tg_tensor *f = tg_safetensors_find(r->st, tg_tensor_name(p));
        if (!f)
            return (tg__err(r->ctx, TG_ERR_MISMATCH, r->fn, "%s: the file lacks tensor '%s' %s "
                            "that its config needs", r->label, tg_tensor_name(p),
                            tg__shape_str(p, a, sizeof a)), false);
        if (!same_shape(f, p))
            return (tg__err(r->ctx, TG_ERR_MISMATCH, r->fn, "%s: tensor '%s' is %s in the file "
                            "but its config needs %s", r->label, tg_tensor_name(p),
                            tg__shape_str(f, a, sizeof a), tg__shape_str(p, b, sizeof b)),
                    false);
    }
    for (int64_t j = 0; j < tg_safetensors_count(r->st); j++) {
        const char *name = tg_safetensors_name(r->st, j), *base = optim_base(name);
        const tg_tensor *t = tg_safetensors_tensor(r->st, j);
        bool known = false, same = true;
        for (int64_t i = 0; i < m->n_params && !known; i++) {
            const tg_tensor *p = m->params[i];
            known = !strcmp(tg_tensor_name(p), base ? base : name);
            same = !known || same_shape(t, p);
        }
        if (!known && tied_copy && !strcmp(name, "head.weight")) {
            const tg_tensor *e = tg_safetensors_find(r->st, "tok_emb.weight");
            known = e && tg_tensor_numel(e) == tg_tensor_numel(t);
            for (int64_t k = 0; known && k < tg_tensor_numel(t); k++)
                known = tg_get(e, k) == tg_get(t, k);
            if (!known)
                return (tg__err(r->ctx, TG_ERR_MISMATCH, r->fn, "%s: the model ties its output "
                                "projection, but head.weight differs from tok_emb.weight",
                                r->label), false);
        }
        if (!known || !same)
            return (tg__err(r->ctx, TG_ERR_MISMATCH, r->fn, "%s: unexpected tensor '%s' in the "
                            "file (%s)", r->label, tg__quote(name, 100, q),
                            !known ? "neither a parameter of its config nor optimizer state"
                                   : "optimizer state shaped unlike its parameter"), false);
        int64_t bad = base ? tg__optim_state_bad(name, t) : -1;
        if (bad >= 0) {
            char msg[256];
            tg__optim_state_msg(msg, sizeof msg, tg__quote(name, 100, q), t, bad);
            return (tg__err(r->ctx, TG_ERR_FORMAT, r->fn, "%s: %s", r->label, msg), false);
        }
    }
    return true;
}

/* The same model (a file replaced between the two reads of tg_model_load is refused). */
static bool same_spec(const spec *a, const spec *b)
{
    const tg_transformer_config *x = &a->info.config, *y = &b->info.config;
    return x->vocab_size == y->vocab_size && x->max_seq_len == y->max_seq_len &&
           x->n_layers == y->n_layers && x->n_decoder_layers == y->n_decoder_layers &&
           x->layer.d_model == y->layer.d_model && x->layer.n_heads == y->layer.n_heads &&
           x->layer.d_ff == y->layer.d_ff && x->layer.activation == y->layer.activation &&
           x->layer.norm_first == y->layer.norm_first &&
           x->layer.layer_norm_eps == y->layer.layer_norm_eps && x->pos == y->pos &&
           x->causal == y->causal && x->tie_weights == y->tie_weights &&
           x->scale_embeddings == y->scale_embeddings &&
           !strcmp(a->info.tokenizer, b->info.tokenizer) && a->tok_size == b->tok_size &&
           (!a->tok_size || !memcmp(a->tok_model, b->tok_model, a->tok_size)) &&
           a->info.dtype == b->info.dtype && a->info.kind == b->info.kind &&
           a->info.bos_id == b->info.bos_id && a->info.step == b->info.step &&
           !strcmp(a->info.task, b->info.task) && a->tied_head_copy == b->tied_head_copy &&
           !memcmp(a->byte_of, b->byte_of, sizeof a->byte_of);
}

/* The context's parameter list before reserve_params moved it (restored by a failed load). */
typedef struct saved_list {
    tg_tensor **old;
    int64_t old_cap;
    bool moved;
} saved_list;

/* Grow the context's parameter list for @p more parameters now, before the mark (a rewind
 * keeps a list that grew after its mark). The old list is kept until finish_params. */
static bool reserve_params(tg_ctx *ctx, const char *fn, int64_t more, saved_list *sv)
{
    sv->moved = false;
    if (ctx->cap_params - ctx->n_params >= more)
        return true;
    int64_t nc = ctx->cap_params ? ctx->cap_params : 32;
    while (nc - ctx->n_params < more)
        nc *= 2; /* more <= 6 + 30 * 65536: no overflow */
    tg_tensor **np = tg__alloc_owned(ctx, sizeof *np * (size_t)nc, fn, TG__OWNER_CTX);
    if (!np)
        return false;
    if (ctx->params)
        memcpy(np, ctx->params, sizeof *np * (size_t)ctx->n_params);
    *sv = (saved_list){ctx->params, ctx->cap_params, true};
    ctx->params = np;
    ctx->cap_params = nc;
    return true;
}

/* After the load: free the old list (@p ok), or go back to it (the failed load's parameters
 * were rewound, so the old list holds every parameter left), so the context holds exactly
 * the bytes it held before the call. */
static void finish_params(tg_ctx *ctx, const saved_list *sv, bool ok)
{
    if (!sv->moved)
        return;
    if (ok) {
        tg__free(ctx, sv->old);
        return;
    }
    tg__free(ctx, ctx->params);
    ctx->params = sv->old;
    ctx->cap_params = sv->old_cap;
}

/* ---- the model ------------------------------------------------------------------------------ */
static tg_model *build(tg_ctx *ctx, const char *fn, const spec *s)
{
    tg_model *m = tg__alloc(ctx, sizeof *m, fn);
    if (!m)
        return NULL;
    m->ctx = ctx;
    m->info = s->info;
    m->first_param = tg_ctx_n_params(ctx);
    if (tg_transformer_init(ctx, &m->tf, s->info.dtype, &s->info.config) != TG_OK)
        return NULL;
    m->n_params = tg_ctx_n_params(ctx) - m->first_param;
    m->params = tg__alloc(ctx, sizeof *m->params * (size_t)(m->n_params + 1), fn);
    if (!m->params)
        return NULL;
    for (int64_t i = 0; i < m->n_params; i++)
        m->params[i] = tg_ctx_param(ctx, m->first_param + i);
    for (int b = 0; b < 256; b++)
        m->id_of[b] = -1;
    for (int64_t i = 0; i < s->info.config.vocab_size && i < MODEL_MAX_VOCAB; i++) {
        m->byte_of[i] = s->byte_of[i];
        if (s->byte_of[i] >= 0)
            m->id_of[s->byte_of[i]] = (int32_t)i;
    }
    if (s->tok_size) {
        m->tok_model = tg__alloc(ctx, s->tok_size, fn);
        if (!m->tok_model)
            return NULL;
        memcpy(m->tok_model, s->tok_model, s->tok_size);
        m->tok_size = s->tok_size;
    }
    return m;
}

/* Check @p r's tensors against @p m and copy them in. */
static bool fill(const rd *r, tg_model *m, bool tied_copy)
{
    if (!check_tensors(r, m, tied_copy))
        return false;
    return tg__params_load_from(r->ctx, r->fn, r->st, m->n_params, m->params, false) == TG_OK;
}

static tg_model *load_from_io(tg_ctx *ctx, const tg_safetensors *st, const char *label)
{
    static const char *fn = "tg_model_load_from";
    if (!st)
        return tg__err(ctx, TG_ERR_ARG, fn, "the file is NULL");
    rd r = {ctx, fn, label ? label : "<memory>", st};
    spec s;
    saved_list sv = {NULL, 0, false};
    if (!read_spec(&r, &s))
        return NULL;
    if (!reserve_params(ctx, fn, tg_transformer_params(&s.info.config, NULL, 0), &sv))
        return (spec_free(&s), NULL);
    tg_mark mk = tg_ctx_mark(ctx);
    tg_model *m = build(ctx, fn, &s);
    bool ok = m && fill(&r, m, s.tied_head_copy);
    if (!ok)
        tg_ctx_rewind(ctx, mk);
    finish_params(ctx, &sv, ok);
    spec_free(&s);
    return ok ? m : NULL;
}

static tg_model *load_io(tg_ctx *ctx, const char *path)
{
    static const char *fn = "tg_model_load";
    if (!path)
        return tg__err(ctx, TG_ERR_ARG, fn, "path is NULL");
    /* read once for the spec and release it, build, read again for the values and release
     * that: the context keeps only the model (the file's tensors would double its memory) */
    tg_mark m0 = tg_ctx_mark(ctx);
    rd r = {ctx, fn, path, tg_safetensors_read(ctx, path)};
    if (!r.st)
        return NULL;
    spec s, again;
    bool ok = read_spec(&r, &s);
    tg_ctx_rewind(ctx, m0);
    saved_list sv = {NULL, 0, false};
    if (!ok)
        return NULL;
    if (!reserve_params(ctx, fn, tg_transformer_params(&s.info.config, NULL, 0), &sv))
        return (spec_free(&s), NULL);
    m0 = tg_ctx_mark(ctx);
    tg_model *m = build(ctx, fn, &s);
    tg_mark m1 = tg_ctx_mark(ctx);
    r.st = m ? tg_safetensors_read(ctx, path) : NULL;
    bool read2 = r.st && read_spec(&r, &again);
    ok = read2;
    if (ok && !same_spec(&s, &again))
        ok = (tg__err(ctx, TG_ERR_IO, fn, "%s: the file changed while it was read", path), false);
    if (read2)
        spec_free(&again);
    spec_free(&s);
    ok = ok && fill(&r, m, s.tied_head_copy);
    tg_ctx_rewind(ctx, m1);
    if (!ok)
        tg_ctx_rewind(ctx, m0);
    finish_params(ctx, &sv, ok);
    return ok ? m : NULL;
}

/* Loading is a file call: its errors are run-time errors (they never stick), like every
 * other file call's (tg__io_enter). */
tg_model *tg_model_load_from(tg_ctx *ctx, const tg_safetensors *st, const char *label)
{
    if (!ctx)
        return NULL;
    tg__io_enter(ctx);
    tg_model *m = load_from_io(ctx, st, label);
    tg__io_leave(ctx);
    return m;
}

tg_model *tg_model_load(tg_ctx *ctx, const char *path)
{
    if (!ctx)
        return NULL;
    tg__io_enter(ctx);
    tg_model *m = load_io(ctx, path);
    tg__io_leave(ctx);
    return m;
}

/* ---- accessors ------------------------------------------------------------------------------ */
const tg_model_info *tg_model_get_info(const tg_model *m) { return m ? &m->info : NULL; }

tg_transformer *tg_model_transformer(tg_model *m) { return m ? &m->tf : NULL; }

int64_t tg_model_n_params(const tg_model *m) { return m ? m->n_params : 0; }

tg_tensor *tg_model_param(const tg_model *m, int64_t i)
{
    return m && i >= 0 && i < m->n_params ? m->params[i] : NULL;
}

int64_t tg_model_vocab_size(const tg_model *m) { return m ? m->info.config.vocab_size : 0; }

int tg_model_token_byte(const tg_model *m, int32_t id)
{
    return m && id >= 0 && id < m->info.config.vocab_size && id < MODEL_MAX_VOCAB
               ? m->byte_of[id] : -1;
}

const void *tg_model_tokenizer_bytes(const tg_model *m, size_t *size)
{
    if (size)
        *size = m ? m->tok_size : 0;
    return m ? m->tok_model : NULL;
}

tg_tokenizer *tg_model_tokenizer(const tg_model *m)
{
    static const char *fn = "tg_model_tokenizer";
    if (!m)
        return NULL;
    tg__begin(m->ctx);
    if (!strcmp(m->info.tokenizer, "bytes"))
        return tg_tokenizer_bytes(m->ctx);
    if (!m->info.tokenizer[0])
        return tg__run_err(m->ctx, TG_ERR_ARG, fn, "not a translation model (its ids stand "
                           "for bytes: tg_model_encode, tg_model_decode)");
    return tg__run_err(m->ctx, TG_ERR_UNSUPPORTED, fn, "a %s tokenizer: load it with "
                       "tg_spm_load(ctx, tg_model_tokenizer_bytes(m, &size), size) "
                       "(tgrad_spm.h, libtgrad_spm)", m->info.tokenizer);
}

int32_t tg_model_byte_token(const tg_model *m, int byte)
{
    return m && byte >= 0 && byte < 256 ? m->id_of[byte] : -1;
}

int64_t tg_model_encode(const tg_model *m, const char *text, size_t n, int32_t *ids, int64_t cap)
{
    static const char *fn = "tg_model_encode";
    if (!m)
        return -1;
    tg_ctx *ctx = m->ctx;
    tg__begin(ctx);
    if ((!text && n > 0) || cap < 0 || (!ids && cap > 0))
        return (tg__run_err(ctx, TG_ERR_ARG, fn, "text or ids is NULL, or cap < 0"), -1);
    if (ids && (n > (uint64_t)INT64_MAX || (int64_t)n > cap)) /* ids NULL: only the length */
        return (tg__run_err(ctx, TG_ERR_ARG, fn, "%zu bytes do not fit in %" PRId64 " ids", n,
                            cap), -1);
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)text[i];
        if (m->id_of[c] < 0) {
            char shown[8] = "";
            if (c >= 0x20 && c < 0x7f)
                snprintf(shown, sizeof shown, " '%c'", c);
            return (tg__run_err(ctx, TG_ERR_ARG, fn, "byte 0x%02x%s at offset %zu is not in the "
                                "model's vocabulary of %" PRId64 " bytes", c, shown, i,
                                m->info.config.vocab_size), -1);
        }
        if (ids)
            ids[i] = m->id_of[c];
    }
    return (int64_t)n;
}

int64_t tg_model_decode(const tg_model *m, const int32_t *ids, int64_t n, char *out)
{
    static const char *fn = "tg_model_decode";
    if (!m)
        return -1;
    tg_ctx *ctx = m->ctx;
    tg__begin(ctx);
    if (n < 0 || (n > 0 && (!ids || !out)))
        return (tg__run_err(ctx, TG_ERR_ARG, fn, "ids or out is NULL, or n < 0"), -1);
    for (int64_t i = 0; i < n; i++) {
        int b = tg_model_token_byte(m, ids[i]);
        if (b < 0)
            return (tg__run_err(ctx, TG_ERR_ARG, fn, "id %" PRId32 " at index %" PRId64 " is "
                                "%s", ids[i], i, ids[i] == m->info.bos_id
                                ? "BOS, which stands for no byte" : "out of the vocabulary"),
                    -1);
        out[i] = (char)b;
    }
    return n;
}

tg_generator *tg_model_generator(tg_model *m, int64_t batch)
{
    if (!m)
        return NULL;
    return tg_generator_new(m->ctx, &m->tf, batch);
}
