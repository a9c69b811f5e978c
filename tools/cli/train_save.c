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

#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/stat.h>

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
        (t->pairs && tg_train_pairs_meta(t->pr.run, m) != TG_OK)) {
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
