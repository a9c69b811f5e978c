/*
 * record.c - tg_train_record_meta (include/tgrad_train.h, "The training run"): the one writer
 * of a training checkpoint's `data.*` and `train.*` keys, in the order `tgrad train` has
 * always written them. Apart from run.c because it reads a text corpus (src/data/), which the
 * minimal runtime build leaves out.
 */
#include "tgrad_train.h"
#include "core.h"

#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
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
        tg_text_info in = tg_text_get_info(r->text);
        const unsigned char *v = tg_text_vocab(r->text);
        char *hex = m->store[m->n];
        for (int i = 0; i < in.vocab_size && 2 * i + 2 < (int)sizeof m->store[0]; i++)
            snprintf(hex + 2 * i, 3, "%02x", v[i]);
        hex[2 * in.vocab_size] = 0;
        m->keys[m->n] = "data.vocab";
        m->values[m->n] = hex;
        m->n++;
        add(m, "data.bytes", "%" PRId64, in.bytes);
        add(m, "data.files", "%d", in.files);
        add(m, "data.text_hash", "fnv1a64:%016" PRIx64, in.hash);
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
    else if (!strcmp(r->mode, "text") && (!r->text || tg_text_get_info(r->text).vocab_size > 256))
        why = "mode text needs its corpus";
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
    return TG_OK;
}
