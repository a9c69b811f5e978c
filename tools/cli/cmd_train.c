/*
 * cmd_train.c - `tgrad train`: train a transformer on a built-in algorithmic task (the
 * default: an encoder predicting the reversed digit sequence; --arch seq2seq: an
 * encoder-decoder with teacher forcing, evaluated by greedy decoding), a byte-level language
 * model (--text) or a translation model (--pairs); progress, CSV log, SVG plot, atomic
 * checkpoints and bit-exact resume.
 *
 * parse (train_parse, train_args.c: one option table) -> setup (train_setup.c: the plan, the
 * data, the model and the library's run of the mode, tg_train_tokens or tg_train_pairs) ->
 * the run (tg_train_run, tgrad_train.h, owns the loop; the mode's batches and evaluation are
 * the library's; this file's callbacks write the log row, save the checkpoint, train_save.c,
 * show progress, train_progress.c, and agree on a stop request, train_signal.c) -> report
 * (train_report.c). Every error is one line on stderr.
 */
#include "trainer.h"
#include "climsg.h"
#include "train_plan.h"
#include "train_signal.h"

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define errf train_errf /* train_plan.h */

/* ---- progress (train_progress.c) -------------------------------------------------------- */
#define now_s tprog_now

/* Before an error message: end a live line so the message starts on its own line. */
static void end_live(trainer *t)
{
    tprog_end_live(&t->pg);
}

/* The progress line of step @p s with where the run is now. */
static void progress(trainer *t, int64_t s, double l, double lr, bool final)
{
    train_progress *p = &t->pg;
    p->trained = t->trained;
    int64_t batch;
    tg_train_pairs_position(t->pr.run, &p->epoch, &batch);
    p->tok_s = t->tok_s;
    p->last_val = t->last_val;
    p->acc = t->acc;
    p->tok_acc = t->tok_acc;
    p->bleu = t->pairs ? t->pr.bleu : NAN;
    tprog_line(p, s, l, lr, final);
}

/* ---- the loop ----------------------------------------------------------------------------- */

/* A signal arrived during the setup: stop it between two stages (cmd_train says so). */

/* tg_train_callbacks first: a signal after the setup's last check said "before the first
 * step": one process keeps its word; under mpirun the ranks stop together after it. */
static bool cb_first(void *user, int64_t step)
{
    trainer *t = user;
    return tsig_arm(step + 1, t->pg.tty, t->a.checkpoint != NULL, t->mp.rank == 0) &&
           t->mp.size == 1;
}

/* tg_train_callbacks after_step: this step's stop check and the next step's message in one
 * atomic switch (a signal before it stops the run after this step, as its message said, one
 * after it after the next step); under mpirun every rank agrees on it. */
static tg_status cb_after_step(void *user, int64_t step, bool last, bool *stop)
{
    trainer *t = user;
    t->trained++;
    bool print = t->mp.rank == 0, ck = t->a.checkpoint != NULL;
    bool signalled = !last ? tsig_arm(step + 2, t->pg.tty, ck, print) : tsig_stop_requested();
    bool agreed = tmpi_any(&t->mp, signalled, &t->interrupted);
    if (agreed && t->interrupted && !signalled) /* another rank's signal: the last step */
        tsig_arm(step + 1, t->pg.tty, ck, print);
    if (!agreed) { /* every rank stops */
        errf("step %" PRId64 ": %s", step + 1, tg_ctx_message(t->ctx));
        return TG_ERR_STATE;
    }
    *stop = t->interrupted;
    return TG_OK;
}

/* tg_train_callbacks row: the plot's points and the log's line (one write). */
static tg_status cb_row(void *user, const tg_train_row *r)
{
    trainer *t = user;
    t->tok_s = r->tokens_per_s;
    double x = (double)r->step;
    bool ok = !t->a.plot || svg_series_add(&t->train_curve, x, r->loss);
    if (r->eval) { /* the library's evaluation ran (every process: the evaluator's outcome) */
        t->acc = t->text ? t->acc : r->metric;
        if (t->pairs)
            pairs_scores(&t->pr); /* BLEU and chrF for the progress line and the summary */
        else
            t->tok_acc = tg_train_tokens_token_accuracy(t->tok_run);
        t->last_val = r->val_loss;
        /* --keep-best: the highest BLEU (--pairs), else the lowest validation loss */
        t->best_due = t->a.keep_best &&
                      (t->pairs ? isfinite(r->metric) && r->metric > t->best_bleu
                                : r->val_loss < t->best_val);
        if (t->best_due && t->pairs)
            t->best_bleu = r->metric;
        t->best_val = r->best_val;
        if (ok && t->a.plot)
            ok = (t->text || svg_series_add(&t->acc_curve, x, t->pairs ? t->acc / 100 : t->acc))
                 && svg_series_add(&t->val_curve, x, r->val_loss);
    }
    if (!ok) {
        errf("out of memory");
        return TG_ERR_NOMEM;
    }
    if (t->log.fd >= 0) {
        char row[200];
        int k = tg_train_log_row(r, !t->log.no_acc, row, sizeof row);
        if (k > 0 && !tlog_write(&t->log, row, (size_t)k)) {
            end_live(t);
            errf("%s", t->log.err);
            return TG_ERR_IO;
        }
    }
    return TG_OK;
}

static tg_status cb_save(void *user, int64_t steps_done, double best_val)
{
    trainer *t = user;
    t->best_val = best_val;
    bool keep = train_keep_due(t, steps_done);
    if (keep)
        train_keep_begin(t, steps_done);
    if (t->a.checkpoint && !train_save(t, steps_done))
        return TG_ERR_IO;
    if (keep && !train_keep_save(t, steps_done))
        return TG_ERR_IO;
    if (t->best_due && t->best_path && !train_save_best(t, steps_done))
        return TG_ERR_IO;
    t->best_due = false;
    return TG_OK;
}

/* tg_train_callbacks progress: the live line (at most 10 updates/s), and a line that stays at
 * an evaluation, the last step and every twentieth of the run. */
static tg_status cb_progress(void *user, const tg_train_row *r)
{
    trainer *t = user;
    int64_t print_every = t->a.steps / 20 > 0 ? t->a.steps / 20 : 1;
    double el = now_s() - t->pg.t0;
    bool redraw = t->pg.tty && el - t->last_draw >= 0.1;
    bool stays = r->eval || r->stop;
    if (!t->a.quiet && (redraw || r->step % print_every == 0 || stays)) {
        t->last_draw = el;
        if (t->pg.tty || stays || r->step % print_every == 0)
            progress(t, r->step, r->loss, r->lr, stays);
    }
    return TG_OK;
}

/* A failed step's message (the callbacks said theirs). */
static void step_failed(trainer *t, const tg_train_result *res)
{
    char msg[1200];
    int64_t step = res->step + 1;
    end_live(t);
    if (res->failed == TG_TRAIN_FAIL_BATCH) {
        errf("step %" PRId64 ": %s", step, cli_message(t->ctx, NULL, msg, sizeof msg));
        return;
    }
    /* every rank holds the same loss and gradients: all stop here, rank 0 says why */
    t->agreed_failure = true;
    const char *why = isfinite(res->loss) ? cli_message(t->ctx, NULL, msg, sizeof msg)
                                          : "loss is not finite";
    if (t->mp.rank == 0) /* the optimizer's message says what it left unchanged */
        errf("step %" PRId64 ": %s (%s)%s, stopping", step,
             strstr(why, "the update of") ? "non-finite update" : "non-finite loss or gradients",
             why, strstr(why, "left unchanged") ? "" : "; parameters left unchanged");
    tg_ctx_clear_error(t->ctx);
}

/* The run's configuration from the options. */
static tg_train_config run_config(const trainer *t, tg_train_sync *sync)
{
    const train_args *a = &t->a;
    tg_train_config c = tg_train_config_default();
    c.steps = a->steps;
    c.start = t->start;
    c.stop_after = a->stop_after;
    c.eval_every = a->eval_every;
    c.save_every = a->save_every;
    c.schedule = a->schedule == SCHED_NOAM ? TG_LR_NOAM : TG_LR_WARMUP_COSINE;
    c.lr = a->lr;
    c.min_lr = a->min_lr;
    c.warmup = a->warmup;
    c.d_model = a->d_model;
    c.clip = a->clip;
    c.accum = t->accum;
    c.sync = t->accum ? sync : NULL;
    c.tokens_per_step = t->B * t->T;
    c.best_val = t->best_val;
    c.last_val = t->last_val;
    return c;
}

/* Returns 0 when the loop ran to its end (or was interrupted cleanly), 1 on error, 2 when a
 * signal stopped it before its first step (nothing done). */
static int train_loop(trainer *t)
{
    t->acc = NAN;
    t->last_val = t->ck && isfinite(t->best_val) ? t->best_val : NAN; /* until it evaluates */
    t->last_draw = -1;
    t->end = t->a.stop_after > 0 && t->a.stop_after < t->a.steps ? t->a.stop_after : t->a.steps;
    t->pg = (train_progress){.text = t->text, .s2s = t->s2s, .pairs = t->pairs,
                             .no_val = t->text && !(t->a.val_fraction > 0),
                             .steps = t->a.steps, .end = t->end,
                             .tty = isatty(STDERR_FILENO) && !t->a.quiet,
                             .width = tprog_line_width(), .t0 = now_s()};
    tg_train_sync sync = tmpi_sync(&t->mp);
    tg_train_config c = run_config(t, &sync);
    tg_train_callbacks cb = {.user = t, .first = cb_first, .after_step = cb_after_step,
                             .row = cb_row, .save = cb_save, .progress = cb_progress};
    /* the mode's batches, micro-batches and evaluation are the library's (--pairs: the real
     * target tokens of each step count for tokens/s) */
    if (t->tok_run)
        tg_train_tokens_bind(t->tok_run, &cb, &c);
    else
        tg_train_pairs_bind(t->pr.run, &cb, &c);
    tg_train_result res;
    tg_status s = tg_train_run(t->ctx, t->opt, &c, &cb, &res);
    t->step = res.step;
    t->tok_s = res.tokens_per_s;
    t->best_val = res.best_val;
    t->reached |= res.reached; /* every process: the evaluator's */
    if (res.before_first)
        return 2;
    if (s != TG_OK) {
        if (res.failed == TG_TRAIN_FAIL_BATCH || res.failed == TG_TRAIN_FAIL_UPDATE)
            step_failed(t, &res);
        else if (res.failed == TG_TRAIN_FAIL_NONE) /* the configuration */
            errf("%s", tg_ctx_message(t->ctx));
        if (res.failed == TG_TRAIN_FAIL_EVAL) { /* every process stops; the evaluator says why */
            char msg[1200];
            t->agreed_failure = true;
            end_live(t);
            if (t->mp.rank == 0)
                errf("evaluation at step %" PRId64 ": %s", res.step + 1,
                     cli_message(t->ctx, NULL, msg, sizeof msg));
        }
        if (res.failed == TG_TRAIN_FAIL_SYNC) { /* not an agreed stop: abort the job */
            char msg[1200];
            t->comm_failed = true;
            errf("evaluation at step %" PRId64 ": %s", res.step + 1,
                 cli_message(t->ctx, NULL, msg, sizeof msg));
        }
        return 1;
    }
    return 0;
}

static void trainer_free(trainer *t)
{
    tsig_restore();
    if (t->log.fd >= 0)
        close(t->log.fd);
    tg_train_tokens_free(t->tok_run);
    svg_series_free(&t->train_curve);
    svg_series_free(&t->val_curve);
    svg_series_free(&t->acc_curve);
    tg_text_free(t->corp);
    pairs_free(&t->pr);
    outpath_lock_release(&t->lock);
    free(t->best_path);
    tg_ctx_free(t->ctx);
    train_free(&t->a, &t->r);
}

/* ---- the command --------------------------------------------------------------------------- */
int cmd_train(int argc, char **argv)
{
    /* whole lines, each as it is printed: under mpirun the launcher forwards stdout and stderr
     * separately, and a line never mixes with the other stream's */
    setvbuf(stdout, NULL, _IOLBF, 0);
    trainer *t = calloc(1, sizeof *t);
    if (!t) {
        errf("out of memory");
        return 1;
    }
    t->best_bleu = -1; /* none yet (a resumed run: its checkpoint's) */
    char err[1200];
    if (!tmpi_begin(&t->mp, err, sizeof err)) {
        errf("%s", err);
        free(t);
        return 1;
    }
    int ex = cli_parse_exit(train_parse(argc, argv, &t->a, &t->r, err, sizeof err),
                            train_command(), err);
    if (ex >= 0) {
        tmpi_agree(&t->mp, ex == 0, NULL, 1);
        tmpi_end(&t->mp, true);
        train_free(&t->a, &t->r);
        free(t);
        return ex;
    }
    if (t->mp.rank > 0)
        t->a.quiet = true; /* rank 0 prints progress, the summary and the errors all share */
    tsig_install(t->mp.rank == 0); /* from here SIGINT/SIGTERM stop the setup as they stop
                                    * training (train_signal.c) */
    t->argc = argc;
    t->argv = argv;
    int rc = 1;
    bool ready = train_setup(t, &rc);
    if (ready) {
        if (!t->a.quiet)
            train_print_banner(t);
        if (t->a.dry_run && t->pairs)
            rc = train_dry_run_pairs(t);
        else if (t->a.dry_run)
            rc = t->mp.rank == 0 ? train_dry_run(t) : 0;
        else if ((rc = train_loop(t)) == 0)
            rc = t->mp.rank == 0 ? train_report(t) : train_report_rc(t);
        else if (rc == 2) { /* stopped before its first step */
            errf("interrupted during the setup, before the first step: nothing was saved");
            rc = 130;
        }
    }
    if (t->log.fd >= 0) {
        int fd = t->log.fd;
        t->log.fd = -1;
        if (close(fd) != 0 && (rc == 0 || rc == 3 || rc == 130)) {
            errf("--log '%s': %s", t->a.log, strerror(errno));
            rc = 1;
        }
    }
    /* a failure after the setup agreement ends the whole job (MPI_Abort): no rank waits on
     * this one */
    tmpi_end(&t->mp, !ready || t->agreed_failure || rc == 0 || rc == 3 || rc == 130);
    trainer_free(t);
    free(t);
    return rc;
}
