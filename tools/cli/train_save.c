/*
 * train_save.c - `tgrad train`'s checkpoint: the model, the optimizer's state and the run's
 * state (tg_train_checkpoint_save), the record of its data and options (tg_train_record_meta;
 * --pairs: tg_train_pairs_meta adds the tokenizer and the cursor), written atomically with
 * SIGINT and SIGTERM held until it is done. A failed save says what it left: the previous
 * checkpoint, or none.
 */
#define _GNU_SOURCE /* sigset_t, pthread_sigmask */
#include "trainer.h"
#include "climsg.h"
#include "train_plan.h"

#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <signal.h>
#include <stdlib.h>
#include <errno.h>
#include <sys/stat.h>
#include <unistd.h>

#define errf train_errf /* train_plan.h */

/* What the checkpoint records of the run's data and options (tg_train_record_meta). */
static tg_train_record run_record(const trainer *t)
{
    const train_args *a = &t->a;
    tg_train_record r = {.mode = t->text ? "text" : t->pairs ? "pairs" : "task",
                         .text = t->corp, .task = (tg_task_kind)t->task, .seed = a->seed,
                         .batch = t->B, .grad_accum = t->K, .warmup = a->warmup,
                         .eval_every = a->eval_every, .save_every = a->save_every,
                         .lr = a->lr, .min_lr = a->min_lr, .weight_decay = a->weight_decay,
                         .clip = a->clip, .momentum = a->momentum,
                         .val_fraction = a->val_fraction, .target_acc = a->target_acc,
                         .target_bleu = a->target_bleu, .beta2 = a->beta2, .eps = a->eps,
                         .label_smoothing = a->label_smoothing, .keep_best = a->keep_best};
    r.optimizer = a->optimizer == OPT_SGD    ? TG_OPTIM_SGD
                  : a->optimizer == OPT_ADAM ? TG_OPTIM_ADAM
                                             : TG_OPTIM_ADAMW;
    r.schedule = a->schedule == SCHED_NOAM ? TG_LR_NOAM : TG_LR_WARMUP_COSINE;
    r.precision = a->precision == TG_PRECISION_BF16 ? TG_PRECISION_BF16 : TG_PRECISION_F32;
    return r;
}

/* --keep-last N: train.keep_last and train.kept (the steps of the step files the run keeps,
 * oldest first) after the record's entries. */
static bool keep_meta(const trainer *t, tg_train_meta_list *m)
{
    if (t->a.keep_last <= 0)
        return true;
    if (m->n + 2 > TG_TRAIN_RECORD_META_MAX)
        return false;
    char *v = m->store[m->n];
    snprintf(v, sizeof m->store[0], "%" PRId64, t->a.keep_last);
    m->keys[m->n] = "train.keep_last";
    m->values[m->n++] = v;
    if (t->n_kept == 0)
        return true;
    v = m->store[m->n];
    size_t w = 0;
    for (int i = 0; i < t->n_kept; i++)
        w +=
            (size_t)snprintf(v + w, sizeof m->store[0] - w, "%s%" PRId64, i ? "," : "", t->kept[i]);
    m->keys[m->n] = "train.kept";
    m->values[m->n++] = v;
    return true;
}

/* The run's state after @p steps_done steps into @p path (--checkpoint, or --keep-best's file:
 * @p opt names it in messages). */
static bool save_to(trainer *t, int64_t steps_done, const char *path, const char *opt)
{
    const train_args *a = &t->a;
    struct stat sb; /* what a failed save leaves: the previous checkpoint, or none */
    bool resumed = a->resume && cli_same_file(a->checkpoint, a->resume);
    const char *kept = stat(path, &sb) != 0 ? "no checkpoint was written"
                       : t->saved || resumed ? "previous checkpoint kept"
                                             : "the existing file is unchanged";
    tg_train_meta_list *m = calloc(1, sizeof *m);
    if (!m) {
        errf("saving checkpoint: out of memory (%s)", kept);
        return false;
    }
    /* format and model.* come first from the library (tg_train_checkpoint_save); the
     * training state's keys go where the record places them */
    tg_train_state ts = tg_train_state_init();
    ts.position = steps_done * t->B;
    ts.steps = a->steps;
    ts.best_val = t->best_val;
    ts.best_bleu = a->keep_best && t->pairs ? t->best_bleu : -1;
    if (t->pairs)
        tg_train_pairs_position(t->pr.run, &ts.epoch, &ts.batch);
    tg_train_record rec = run_record(t);
    if (tg_train_record_meta(t->ctx, &rec, m) != TG_OK ||
        (t->pairs && tg_train_pairs_meta(t->pr.run, m) != TG_OK) || !keep_meta(t, m)) {
        free(m);
        errf("saving checkpoint: out of memory (%s)", kept);
        return false;
    }
    /* SIGINT and SIGTERM wait until the save is done (their handler only sets a flag; this
     * keeps even that from touching the save's system calls) */
    sigset_t block, old;
    sigemptyset(&block);
    sigaddset(&block, SIGINT);
    sigaddset(&block, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &block, &old);
    bool ok = tg_train_checkpoint_save(t->ctx, path, t->opt, &t->mc, train_dtype(a), &ts, m->n,
                                       m->keys, m->values, NULL) == TG_OK;
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    free(m);
    t->saved |= ok;
    if (!ok) {
        char msg[1200];
        tprog_end_live(&t->pg);
        errf("%s '%s': %s (%s)", opt, path, cli_message(t->ctx, path, msg, sizeof msg), kept);
    }
    return ok;
}

bool train_save(trainer *t, int64_t steps_done)
{
    return save_to(t, steps_done, t->a.checkpoint, "--checkpoint");
}

bool train_save_best(trainer *t, int64_t steps_done)
{
    return save_to(t, steps_done, t->best_path, "--keep-best");
}

/* Step file @p path, about to be removed as the oldest of --keep-last's: still what this run
 * (or the run it resumed) wrote there? A tgrad checkpoint of step @p step whose train.kept ends
 * with it, as every step file is written. Anything else is left in place, with a warning. */
static bool still_ours(const char *path, int64_t step)
{
    tg_ctx *c = tg_ctx_new();
    tg_safetensors *st = c ? tg_safetensors_read(c, path) : NULL;
    const char *s = st ? tg_safetensors_meta_get(st, "optim.step") : NULL;
    const char *kept = st ? tg_safetensors_meta_get(st, "train.kept") : NULL;
    const char *last = kept ? strrchr(kept, ',') : NULL;
    last = last ? last + 1 : kept;
    int64_t v, w;
    bool ours = s && last && tg_meta_parse_int(s, 0, INT64_MAX, &v) && v == step &&
                tg_meta_parse_int(last, 0, INT64_MAX, &w) && w == step;
    tg_ctx_free(c);
    return ours;
}

/* Remove the oldest kept step files until at most @p keep remain (by exact name; one that is
 * gone already is fine; one that is no longer this run's stays, with a warning). */
static void trim_kept(trainer *t, int64_t keep)
{
    while (t->n_kept > keep) {
        char *p = train_plan_step_path(t->a.checkpoint, t->kept[0]);
        bool ours = p && still_ours(p, t->kept[0]);
        if (ours && unlink(p) != 0 && errno != ENOENT) {
            int e = errno;
            tprog_end_live(&t->pg);
            errf("--keep-last: cannot remove '%s': %s (left in place)", p, strerror(e));
        } else if (!ours && p && access(p, F_OK) == 0) {
            tprog_end_live(&t->pg);
            errf("--keep-last: '%s' is no longer the checkpoint this run wrote there; left in "
                 "place",
                 p);
        }
        free(p);
        memmove(t->kept, t->kept + 1, sizeof t->kept[0] * (size_t)--t->n_kept);
    }
}

bool train_keep_due(const trainer *t, int64_t steps_done)
{
    const train_args *a = &t->a;
    return a->keep_last > 0 && a->checkpoint &&
           (steps_done % a->eval_every == 0 || steps_done == a->steps ||
            (a->save_every > 0 && steps_done % a->save_every == 0));
}

void train_keep_begin(trainer *t, int64_t steps_done)
{
    trim_kept(t, t->a.keep_last);
    if (t->n_kept == 0 || t->kept[t->n_kept - 1] < steps_done)
        t->kept[t->n_kept++] = steps_done;
}

bool train_keep_save(trainer *t, int64_t steps_done)
{
    char *p = train_plan_step_path(t->a.checkpoint, steps_done);
    if (!p) {
        errf("--keep-last: out of memory");
        return false;
    }
    bool ok = save_to(t, steps_done, p, "--keep-last");
    free(p);
    if (ok)
        trim_kept(t, t->a.keep_last);
    return ok;
}
