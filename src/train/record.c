/*
 * record.c - the checkpoint's record of a training run (include/tgrad_train.h, "The training
 * run"): tg_train_record_meta, the one writer of a training checkpoint's `data.*` and
 * `train.*` keys, in the order `tgrad train` has always written them; tg_train_record_read,
 * their one reader (untrusted input, messages naming the key); tg_train_record_check_data, a
 * record against the data a resumed run loads. Apart from run.c because it reads a text
 * corpus (src/data/), which the minimal runtime build leaves out.
 */
#include "tgrad_train.h"
#include "core.h"
#include "io/io.h"

#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *FN = "tg_train_record_meta";

static void add(tg_train_meta_list *m, const char *k, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 3, 4)))
#endif
    ;
static void add(tg_train_meta_list *m, const char *k, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(m->store[m->n], sizeof m->store[0], fmt, ap);
    va_end(ap);
    m->keys[m->n] = k;
    m->values[m->n] = m->store[m->n];
    m->n++;
}

/* A training-state key placed here (its value written by tg_train_checkpoint_save). */
static void place(tg_train_meta_list *m, const char *k)
{
    m->keys[m->n] = k;
    m->values[m->n++] = NULL;
}

/* @p v as the shortest decimal that reads back as the same double (0.003, not
 * 0.0030000000000000001), so a resumed run gets exactly the value saved. */
static void num(tg_train_meta_list *m, const char *k, double v)
{
    char t[40];
    if (!isfinite(v)) {
        snprintf(t, sizeof t, "%g", v);
    } else {
        for (int p = 1; p <= 17; p++) { /* %.17g always round-trips a double */
            snprintf(t, sizeof t, "%.*g", p, v);
            if (strtod(t, NULL) == v)
                break;
        }
    }
    add(m, k, "%s", t);
}

/* data.mode and the data's keys. */
static void data_keys(const tg_train_record *r, tg_train_meta_list *m)
{
    add(m, "data.mode", "%s", r->mode);
    if (!strcmp(r->mode, "pairs"))
        num(m, "train.target_bleu", r->target_bleu);
    if (!strcmp(r->mode, "text")) {
        /* the corpus, or (none) the record's own fields, each when the record holds it */
        tg_text_info in = r->text ? tg_text_get_info(r->text) : (tg_text_info){0};
        const unsigned char *v = r->text ? tg_text_vocab(r->text) : r->vocab;
        int nv = r->text ? in.vocab_size : r->vocab_size;
        char *hex = m->store[m->n];
        for (int i = 0; i < nv && 2 * i + 2 < (int)sizeof m->store[0]; i++)
            snprintf(hex + 2 * i, 3, "%02x", v[i]);
        hex[2 * nv] = 0;
        m->keys[m->n] = "data.vocab";
        m->values[m->n] = hex;
        m->n++;
        if (r->text || tg_train_record_has(r, "data.bytes"))
            add(m, "data.bytes", "%" PRId64, r->text ? in.bytes : r->bytes);
        if (r->text || tg_train_record_has(r, "data.files"))
            add(m, "data.files", "%" PRId64, r->text ? (int64_t)in.files : r->files);
        if (r->text || tg_train_record_has(r, "data.text_hash"))
            add(m, "data.text_hash", "fnv1a64:%016" PRIx64, r->text ? in.hash : r->text_hash);
    } else if (!strcmp(r->mode, "task")) {
        add(m, "data.task", "%s", tg_task_name(r->task));
    }
}

tg_status tg_train_record_meta(tg_ctx *ctx, const tg_train_record *r, tg_train_meta_list *m)
{
    static const char *const opt[3] = {"sgd", "adam", "adamw"}; /* tg_optim_kind's order */
    if (!ctx)
        return TG_ERR_ARG;
    tg__begin(ctx);
    const char *why = NULL;
    if (!r || !m || !r->mode)
        why = "NULL argument";
    else if (strcmp(r->mode, "text") && strcmp(r->mode, "task") && strcmp(r->mode, "pairs"))
        why = "mode must be text, task or pairs";
    else if (!strcmp(r->mode, "text") &&
             (r->text ? tg_text_get_info(r->text).vocab_size > 256
                      : r->vocab_size < 1 || r->vocab_size > 256))
        why = "mode text needs its corpus (or its vocabulary)";
    else if (!strcmp(r->mode, "task") && !tg_task_name(r->task))
        why = "unknown task";
    else if ((unsigned)r->optimizer > 2 || (unsigned)r->schedule > 1 || (unsigned)r->precision > 1)
        why = "unknown optimizer, schedule or precision";
    if (why) {
        tg__run_err(ctx, TG_ERR_ARG, FN, "%s", why);
        return TG_ERR_ARG;
    }
    m->n = 0;
    data_keys(r, m);
    place(m, "data.position");
    place(m, "train.steps");
    place(m, "train.best_val");
    add(m, "train.seed", "%" PRId64, r->seed);
    add(m, "train.optimizer", "%s", opt[r->optimizer]);
    add(m, "train.batch", "%" PRId64, r->batch);
    add(m, "train.grad_accum", "%" PRId64, r->grad_accum);
    add(m, "train.warmup", "%" PRId64, r->warmup);
    add(m, "train.eval_every", "%" PRId64, r->eval_every);
    if (r->save_every > 0)
        add(m, "train.save_every", "%" PRId64, r->save_every);
    num(m, "train.lr", r->lr);
    num(m, "train.min_lr", r->min_lr);
    num(m, "train.weight_decay", r->weight_decay);
    num(m, "train.clip", r->clip);
    num(m, "train.momentum", r->momentum);
    num(m, "data.val_fraction", r->val_fraction);
    num(m, "train.target_acc", r->target_acc);
    add(m, "train.schedule", "%s", r->schedule == TG_LR_NOAM ? "noam" : "cosine");
    add(m, "train.precision", "%s", r->precision == TG_PRECISION_BF16 ? "bf16" : "f32");
    num(m, "train.beta2", r->beta2);
    num(m, "train.eps", r->eps);
    num(m, "train.label_smoothing", r->label_smoothing);
    if (r->keep_best)
        add(m, "train.keep_best", "%d", 1);
    if (!strcmp(r->mode, "pairs") && tg_train_record_has(r, "data.pairs_hash"))
        add(m, "data.pairs_hash", "fnv1a64:%016" PRIx64, r->pairs_hash);
    if (!strcmp(r->mode, "pairs") && tg_train_record_has(r, "data.valid_hash"))
        add(m, "data.valid_hash", "fnv1a64:%016" PRIx64, r->valid_hash);
    return TG_OK;
}

/* ---- the reader --------------------------------------------------------------------------- */

/* Every key of the record, in the order tg_train_record_meta writes them (the pairs' hashes
 * last); bit i of tg_train_record.has is key i. */
static const char *const rkeys[] = {
    "data.mode",         "data.vocab",        "data.bytes",         "data.files",
    "data.text_hash",    "data.task",         "train.seed",         "train.optimizer",
    "train.batch",       "train.grad_accum",  "train.warmup",       "train.eval_every",
    "train.save_every",  "train.lr",          "train.min_lr",       "train.weight_decay",
    "train.clip",        "train.momentum",    "data.val_fraction",  "train.target_acc",
    "train.target_bleu", "train.schedule",    "train.precision",    "train.beta2",
    "train.eps",         "train.label_smoothing", "data.pairs_hash", "data.valid_hash",
    "train.keep_best",
};
#define N_RKEYS ((int)(sizeof rkeys / sizeof rkeys[0]))

static int rkey_index(const char *key)
{
    for (int i = 0; key && i < N_RKEYS; i++)
        if (!strcmp(rkeys[i], key))
            return i;
    return -1;
}

bool tg_train_record_has(const tg_train_record *r, const char *key)
{
    int i = rkey_index(key);
    return r && i >= 0 && (r->has >> i & 1);
}

bool tg_train_record_mark(tg_train_record *r, const char *key)
{
    int i = rkey_index(key);
    if (!r || i < 0)
        return false;
    r->has |= (uint64_t)1 << i;
    return true;
}

/* Largest count a record field may hold: 2^53, exact as a double (as optim.step). */
#define REC_MAX ((int64_t)1 << 53)

/* A numeric or named key of the record: where it goes and what it may be. */
typedef enum { K_INT, K_NUM, K_NAME } rkind;
typedef struct {
    const char *key;
    rkind kind;
    size_t off;
    int64_t lo, hi;          /* K_INT */
    double flo, fhi;         /* K_NUM: [flo, fhi], open where said */
    bool lo_open, hi_open;
    const char *expected;    /* K_NUM: the range in words; K_NAME: the names, '|'-separated,
                                the enum's values in order */
} rfield;

#define RO(f) offsetof(tg_train_record, f)
_Static_assert(sizeof(tg_optim_kind) == sizeof(int) && sizeof(tg_lr_schedule) == sizeof(int) &&
                   sizeof(tg_precision) == sizeof(int),
               "a name's index is stored as an int");
static const rfield rfields[] = {
    {"train.seed", K_INT, RO(seed), 0, INT64_MAX, 0, 0, false, false, NULL},
    {"train.optimizer", K_NAME, RO(optimizer), 0, 0, 0, 0, false, false, "sgd|adam|adamw"},
    {"train.batch", K_INT, RO(batch), 1, REC_MAX, 0, 0, false, false, NULL},
    {"train.grad_accum", K_INT, RO(grad_accum), 1, REC_MAX, 0, 0, false, false, NULL},
    {"train.warmup", K_INT, RO(warmup), 0, REC_MAX, 0, 0, false, false, NULL},
    {"train.eval_every", K_INT, RO(eval_every), 1, REC_MAX, 0, 0, false, false, NULL},
    {"train.save_every", K_INT, RO(save_every), 1, REC_MAX, 0, 0, false, false, NULL},
    {"train.lr", K_NUM, RO(lr), 0, 0, 0, INFINITY, false, false, ">= 0"},
    {"train.min_lr", K_NUM, RO(min_lr), 0, 0, 0, INFINITY, false, false, ">= 0"},
    {"train.weight_decay", K_NUM, RO(weight_decay), 0, 0, 0, INFINITY, false, false, ">= 0"},
    {"train.clip", K_NUM, RO(clip), 0, 0, 0, INFINITY, false, false, ">= 0"},
    {"train.momentum", K_NUM, RO(momentum), 0, 0, 0, 1, false, false, "in [0, 1]"},
    {"data.val_fraction", K_NUM, RO(val_fraction), 0, 0, 0, 1, false, true, "in [0, 1)"},
    {"train.target_acc", K_NUM, RO(target_acc), 0, 0, 0, 1, false, false, "in [0, 1]"},
    {"train.target_bleu", K_NUM, RO(target_bleu), 0, 0, 0, 100, false, false, "in [0, 100]"},
    {"train.schedule", K_NAME, RO(schedule), 0, 0, 0, 0, false, false, "cosine|noam"},
    {"train.precision", K_NAME, RO(precision), 0, 0, 0, 0, false, false, "f32|bf16"},
    {"train.beta2", K_NUM, RO(beta2), 0, 0, 0, 1, false, true, "in [0, 1)"},
    {"train.eps", K_NUM, RO(eps), 0, 0, 0, 1, true, false, "in (0, 1]"},
    {"train.label_smoothing", K_NUM, RO(label_smoothing), 0, 0, 0, 1, false, false,
     "in [0, 1]"},
    {"train.keep_best", K_INT, RO(keep_best), 1, 1, 0, 0, false, false, NULL},
};

typedef struct rd {
    tg_ctx *ctx;
    const char *label;
    const tg_safetensors *st;
    tg_train_record *r;
    const char *bad; /* the key at fault */
} rd;

static const char *const RFN = "tg_train_record_read";

/* @p v on one line for a message, as the command line shows values (cut after 60 bytes, a
 * value of 61 shown whole). */
static const char *shown(const char *v, char *q)
{
    return tg__quote(v, strlen(v) == 61 ? 61 : 60, q);
}

static bool fail(rd *d, const char *key, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 3, 4)))
#endif
    ;
static bool fail(rd *d, const char *key, const char *fmt, ...)
{
    char msg[600];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    tg__run_err(d->ctx, TG_ERR_FORMAT, RFN, "%s: %s", d->label, msg);
    d->bad = key;
    return false;
}

/* Key @p key's value, its bit set in r->has when present. */
static const char *get(rd *d, const char *key)
{
    const char *v = tg_safetensors_meta_get(d->st, key);
    if (v)
        d->r->has |= (uint64_t)1 << rkey_index(key);
    return v;
}

static bool bad_value(rd *d, const char *key, const char *v, const char *expected)
{
    char q[80];
    return fail(d, key, "checkpoint field '%s' '%s': expected %s", key, shown(v, q), expected);
}

/* A plain finite decimal, as the command line reads numbers: no leading space or '+', no inf,
 * nan or hex float. */
static bool parse_num(const char *s, double *out)
{
    if (!*s || !(*s == '-' || *s == '.' || (*s >= '0' && *s <= '9')) || strpbrk(s, "xXpPnNiI"))
        return false;
    char *end;
    double v = strtod(s, &end);
    if (*end || end == s || !isfinite(v))
        return false;
    *out = v;
    return true;
}

static bool parse_hash(const char *v, uint64_t *out)
{
    bool ok = strlen(v) == 24 && !strncmp(v, "fnv1a64:", 8);
    uint64_t h = 0;
    for (int i = 8; ok && i < 24; i++) {
        int x = tg__hex_digit((unsigned char)v[i]);
        ok = x >= 0 && !(v[i] >= 'A' && v[i] <= 'F');
        h = h << 4 | (uint64_t)(x < 0 ? 0 : x);
    }
    *out = h;
    return ok;
}

static bool read_hash(rd *d, const char *key, bool required, const char *kind, uint64_t *out)
{
    const char *v = get(d, key);
    if (!v)
        return !required || fail(d, key, "not a tgrad %s checkpoint: it lacks the field '%s'",
                                 kind, key);
    return parse_hash(v, out) ||
           bad_value(d, key, v, "'fnv1a64:' and 16 lowercase hex digits");
}

static bool read_count(rd *d, const char *key, int64_t lo, int64_t hi, int64_t *out)
{
    char what[96];
    const char *v = get(d, key);
    if (!v || tg_meta_parse_int(v, lo, hi, out))
        return true;
    snprintf(what, sizeof what, "an integer from %" PRId64 " to %" PRId64, lo, hi);
    return bad_value(d, key, v, what);
}

/* Name @p v among the '|'-separated @p names: its index, or -1. */
static int name_index(const char *names, const char *v)
{
    size_t n = strlen(v);
    int i = 0;
    for (const char *p = names; *p; i++) {
        size_t l = strcspn(p, "|");
        if (l == n && !strncmp(p, v, n))
            return i;
        p += l + (p[l] == '|');
    }
    return -1;
}

/* "a, b or c" of '|'-separated @p names. */
static const char *name_list(const char *names, char *buf, size_t n)
{
    size_t w = 0;
    int count = 1;
    for (const char *p = names; *p; p++)
        count += *p == '|';
    int i = 0;
    for (const char *p = names; *p && w < n; i++) {
        size_t l = strcspn(p, "|");
        const char *sep = i == 0 ? "" : i == count - 1 ? " or " : ", ";
        w += (size_t)snprintf(buf + w, n - w, "%s%.*s", sep, (int)l, p);
        p += l + (p[l] == '|');
    }
    return buf;
}

static bool read_field(rd *d, const rfield *f)
{
    const char *v = get(d, f->key);
    char *dst = (char *)d->r + f->off, what[96];
    if (!v)
        return true;
    if (f->kind == K_INT) {
        int64_t x;
        if (!tg_meta_parse_int(v, f->lo, f->hi, &x)) {
            snprintf(what, sizeof what, "an integer from %" PRId64 " to %" PRId64
                     " (decimal digits, no leading zero)", f->lo, f->hi);
            return bad_value(d, f->key, v, what);
        }
        memcpy(dst, &x, sizeof x);
    } else if (f->kind == K_NUM) {
        double x;
        if (!parse_num(v, &x) || (f->lo_open ? !(x > f->flo) : !(x >= f->flo)) ||
            (f->hi_open ? !(x < f->fhi) : !(x <= f->fhi))) {
            snprintf(what, sizeof what, "a number %s", f->expected);
            return bad_value(d, f->key, v, what);
        }
        memcpy(dst, &x, sizeof x);
    } else {
        int i = name_index(f->expected, v);
        if (i < 0)
            return bad_value(d, f->key, v, name_list(f->expected, what, sizeof what));
        memcpy(dst, &i, sizeof i); /* the record's enums are int-sized */
    }
    return true;
}

/* data.mode and the keys of the other modes. */
static bool read_mode(rd *d)
{
    const char *mode = get(d, "data.mode");
    if (!mode)
        return fail(d, "data.mode", "not a tgrad training checkpoint: it lacks the field "
                    "'data.mode'");
    static const char *const modes[3] = {"text", "task", "pairs"};
    d->r->mode = NULL;
    for (int i = 0; i < 3; i++)
        if (!strcmp(mode, modes[i]))
            d->r->mode = modes[i];
    if (!d->r->mode)
        return bad_value(d, "data.mode", mode, "text, task or pairs");
    bool text = d->r->mode == modes[0], pairs = d->r->mode == modes[2];
    const char *vh = tg_safetensors_meta_get(d->st, "data.vocab");
    const char *tk = tg_safetensors_meta_get(d->st, "data.task");
    if (pairs && (tk || vh))
        return fail(d, tk ? "data.task" : "data.vocab", "checkpoint fields disagree: data.mode "
                    "pairs but the file has the field '%s' of a %s checkpoint",
                    tk ? "data.task" : "data.vocab", tk ? "task" : "text");
    if (!pairs && (text ? tk != NULL : vh != NULL))
        return fail(d, text ? "data.task" : "data.vocab", "checkpoint fields disagree: "
                    "data.mode %s but the file has the field '%s' of a %s checkpoint", mode,
                    text ? "data.task" : "data.vocab", text ? "task" : "text");
    static const char *const text_keys[3] = {"data.bytes", "data.text_hash", "data.files"};
    for (int i = 0; i < 3 && !text; i++)
        if (tg_safetensors_meta_get(d->st, text_keys[i]))
            return fail(d, text_keys[i], "checkpoint fields disagree: data.mode %s but the "
                        "file has the field '%s' of a text checkpoint", mode, text_keys[i]);
    return true;
}

/* data.vocab, data.bytes, data.files, data.text_hash of a text checkpoint. */
static bool read_text(rd *d)
{
    tg_train_record *r = d->r;
    const char *vh = get(d, "data.vocab");
    if (!vh)
        return fail(d, "data.vocab", "not a tgrad text checkpoint: it lacks the field "
                    "'data.vocab'");
    size_t len = strlen(vh);
    bool ok = len >= 2 && len <= 512 && len % 2 == 0;
    for (size_t i = 0; ok && i < len / 2; i++) {
        int hi = tg__hex_digit((unsigned char)vh[2 * i]);
        int lo = tg__hex_digit((unsigned char)vh[2 * i + 1]);
        ok = hi >= 0 && lo >= 0;
        r->vocab[i] = (unsigned char)(16 * (hi & 15) + (lo & 15));
        ok = ok && (i == 0 || r->vocab[i - 1] < r->vocab[i]);
    }
    if (!ok)
        return bad_value(d, "data.vocab", vh, "1 to 256 distinct bytes in increasing order as "
                         "hex");
    r->vocab_size = (int)(len / 2);
    return read_count(d, "data.bytes", 1, TG_TEXT_MAX_BYTES, &r->bytes) &&
           read_hash(d, "data.text_hash", false, "text", &r->text_hash) &&
           read_count(d, "data.files", 1, INT32_MAX, &r->files);
}

static bool read_task(rd *d)
{
    const char *tk = get(d, "data.task");
    if (!tk)
        return fail(d, "data.task", "not a tgrad task checkpoint: it lacks the field "
                    "'data.task'");
    for (int k = 0; tg_task_name((tg_task_kind)k); k++)
        if (!strcmp(tk, tg_task_name((tg_task_kind)k))) {
            d->r->task = (tg_task_kind)k;
            return true;
        }
    return bad_value(d, "data.task", tk, "copy, reverse or sort");
}

static bool read_all(rd *d)
{
    if (!read_mode(d))
        return false;
    const char *mode = d->r->mode;
    bool ok = !strcmp(mode, "text")   ? read_text(d)
              : !strcmp(mode, "task") ? read_task(d)
                                      : true;
    for (size_t i = 0; ok && i < sizeof rfields / sizeof rfields[0]; i++)
        ok = read_field(d, &rfields[i]);
    if (ok && !strcmp(mode, "pairs"))
        ok = read_hash(d, "data.pairs_hash", true, "translation", &d->r->pairs_hash) &&
             read_hash(d, "data.valid_hash", true, "translation", &d->r->valid_hash);
    return ok;
}

tg_status tg_train_record_read(tg_ctx *ctx, const tg_safetensors *st, const char *label,
                               tg_train_record *out, const char **bad)
{
    if (bad)
        *bad = NULL;
    if (!ctx)
        return TG_ERR_ARG;
    tg__begin(ctx);
    if (!st || !out) {
        tg__run_err(ctx, TG_ERR_ARG, RFN, "%s is NULL", !st ? "st" : "out");
        return TG_ERR_ARG;
    }
    memset(out, 0, sizeof *out);
    rd d = {ctx, label ? label : "<memory>", st, out, NULL};
    if (read_all(&d))
        return TG_OK;
    if (bad)
        *bad = d.bad;
    return TG_ERR_FORMAT;
}

/* ---- a record against the data loaded ----------------------------------------------------- */

static const char *const CFN = "tg_train_record_check_data";

static tg_status differs(tg_ctx *ctx, const char **bad, const char *key, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 4, 5)))
#endif
    ;
static tg_status differs(tg_ctx *ctx, const char **bad, const char *key, const char *fmt, ...)
{
    char msg[400];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    tg__run_err(ctx, TG_ERR_ARG, CFN, "%s: %s", key, msg);
    if (bad)
        *bad = key;
    return TG_ERR_ARG;
}

/* Mode text: the corpus against the record's size, files, hash and vocabulary. */
static tg_status check_text(tg_ctx *ctx, const tg_train_record *r, const tg_text *t,
                            const char **bad)
{
    tg_text_info in = tg_text_get_info(t);
    if (tg_train_record_has(r, "data.bytes") && r->bytes != in.bytes)
        return differs(ctx, bad, "data.bytes", "the run trained on %" PRId64 " bytes of text, "
                       "this corpus holds %" PRId64, r->bytes, in.bytes);
    if (tg_train_record_has(r, "data.files") && r->files != in.files)
        return differs(ctx, bad, "data.files", "the run trained on %" PRId64 " text files, "
                       "this corpus has %d", r->files, in.files);
    if (tg_train_record_has(r, "data.text_hash") && r->text_hash != in.hash)
        return differs(ctx, bad, "data.text_hash", "the run trained on text of hash fnv1a64:%016"
                       PRIx64 ", this corpus's is fnv1a64:%016" PRIx64, r->text_hash, in.hash);
    if (r->vocab_size != in.vocab_size ||
        memcmp(r->vocab, tg_text_vocab(t), (size_t)in.vocab_size) != 0)
        return differs(ctx, bad, "data.vocab", "the run trained on a vocabulary of %d bytes, "
                       "this corpus has %s%d", r->vocab_size,
                       r->vocab_size == in.vocab_size ? "other bytes, " : "", in.vocab_size);
    return TG_OK;
}

tg_status tg_train_record_check_data(tg_ctx *ctx, const tg_train_record *r,
                                     const tg_train_record *data, const char **bad)
{
    if (bad)
        *bad = NULL;
    if (!ctx)
        return TG_ERR_ARG;
    tg__begin(ctx);
    const char *why = !r || !data         ? "NULL argument"
                      : !r->mode || !data->mode ? "a record without its mode"
                      : !strcmp(data->mode, "text") && !data->text ? "mode text needs its corpus"
                                                    : NULL;
    if (why) {
        tg__run_err(ctx, TG_ERR_ARG, CFN, "%s", why);
        return TG_ERR_ARG;
    }
    if (strcmp(r->mode, data->mode) != 0)
        return differs(ctx, bad, "data.mode", "the run trained in mode %s, the data is of mode %s",
                       r->mode, data->mode);
    if (!strcmp(r->mode, "text"))
        return check_text(ctx, r, data->text, bad);
    if (!strcmp(r->mode, "task") && r->task != data->task)
        return differs(ctx, bad, "data.task", "the run trained on task %s, the data is task %s",
                       tg_task_name(r->task) ? tg_task_name(r->task) : "?",
                       tg_task_name(data->task) ? tg_task_name(data->task) : "?");
    return TG_OK;
}
