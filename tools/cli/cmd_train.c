/*
 * cmd_train.c - `tgrad train`: train a transformer on a built-in algorithmic task (the
 * default: an encoder predicting the reversed digit sequence; --arch seq2seq: an
 * encoder-decoder with teacher forcing, evaluated by greedy decoding) or, with --text, a
 * byte-level language model; progress, CSV log, SVG plot, atomic checkpoints and bit-exact
 * resume.
 *
 * parse (train_parse, train_args.c: one option table) -> plan (the checkpoint validated by
 * ckpt_config_load, defaults, memory estimate, every output path checked by train_plan.c,
 * the checkpoint's lock taken) -> data (a resumed run's text checked against the
 * checkpoint's size, file count and content hash) -> build (the library's run of the model,
 * tg_train_tokens, or train_pairs.c; a resumed run's log cut at the checkpoint's step,
 * train_log.c) -> the run (tg_train_run, tgrad_train.h: the loop; this file's callbacks write
 * the log row, save the checkpoint through tg_train_record_meta, show progress,
 * train_progress.c, and agree on a stop request, train_signal.c) -> report (train_report.c).
 * Every error is one line on stderr.
 */
#define _GNU_SOURCE /* sigset_t, pthread_sigmask */
#include "trainer.h"
#include "climsg.h"
#include "train_plan.h"
#include "train_signal.h"

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>


#define errf train_errf /* train_plan.h */

/* ---- plan: checkpoint, defaults, memory, outputs ------------------------------------------ */

/* --resume: read and validate the checkpoint; the model and the training options come from it. */
static bool plan_resume(trainer *t)
{
    train_args *a = &t->a;
    char err[1200];
    if (!data_check_regular(a->resume, phys_memory_bytes(), err, sizeof err)) {
        errf("--resume %s", err);
        return false;
    }
    t->ck = tg_safetensors_read(t->ctx, a->resume);
    if (!t->ck) {
        cli_report("train", "--resume", a->resume, t->ctx);
        return false;
    }
    if (!ckpt_config_load(t->ck, a, &t->r, false, phys_memory_bytes(), &t->info, &t->mc, err,
                          sizeof err)) {
        errf("--resume '%s': %s", a->resume, err);
        t->usage = t->info.usage;
        return false;
    }
    t->start = t->info.step;
    t->best_val = t->info.best_val;
    t->pairs = t->info.pairs;
    if (t->pairs && (!a->pairs || !a->valid)) {
        t->usage = true;
        errf("--resume '%s' is a translation checkpoint: pass its --pairs and --valid files "
             "again", a->resume);
        return false;
    }
    if (!t->pairs && a->pairs) {
        t->usage = true;
        errf("--resume '%s' is not a translation checkpoint; --pairs needs one of "
             "'tgrad train --pairs'", a->resume);
        return false;
    }
    if (a->stop_after > 0 && a->stop_after <= t->start) {
        t->usage = true;
        errf("--resume '%s' is at step %" PRId64 " already; --stop-after %" PRId64
             " must be later", a->resume, t->start, a->stop_after);
        return false;
    }
    if (t->start >= a->steps) {
        t->usage = true;
        errf("--resume '%s' is at step %" PRId64 " already; raise --steps (now %" PRId64 ")",
             a->resume, t->start, a->steps);
        return false;
    }
    return true;
}

/* A fresh run: the mode's defaults and the memory estimate (vocabulary: at most 256 bytes). */
static bool plan_fresh(trainer *t)
{
    char err[1200];
    if (t->pairs) {
        train_pairs_defaults(&t->a, &t->r);
        if (!t->a.valid) {
            errf("--pairs needs --valid TSV (validation pairs: loss and BLEU at each "
                 "evaluation)");
            t->usage = true;
            return false;
        }
    }
    if (!train_resolve(&t->a, t->text, err, sizeof err)) {
        errf("%s", err);
        t->usage = true;
        return false;
    }
    if (t->pairs) { /* the vocabulary is known once the tokenizer is (load_data) */
        t->best_val = INFINITY;
        return true;
    }
    train_model_config(&t->a, t->text, t->text ? 256 : 10, &t->mc);
    if (!model_memory_check(&t->mc, train_dtype(&t->a), t->a.batch / t->a.grad_accum,
                            train_n_state(&t->a), true,
                            phys_memory_bytes(), err, sizeof err)) {
        errf("%s", err);
        return false;
    }
    t->best_val = INFINITY;
    return true;
}

/* The outputs, checked before anything is trained (train_plan.c). */
static bool plan_outputs(trainer *t)
{
    train_plan p = {.a = &t->a, .lock = &t->lock};
    bool ok = train_plan_outputs(&p);
    t->usage |= p.usage;
    return ok;
}

/* ---- data and model ----------------------------------------------------------------------- */
static bool setup_interrupted(void);

/* --pairs: the tokenizer (trained or read) and the tokenized pairs (train_pairs.c). */
static bool load_pairs(trainer *t)
{
    char err[4400];
    if (t->K != 1 || t->mp.size != 1) {
        errf("--pairs trains in one process without --grad-accum (not supported yet)");
        t->usage = true;
        return false;
    }
    if (!pairs_tokenizer(&t->pr, t->ctx, &t->a, t->ck, t->a.quiet, err, sizeof err,
                         &t->usage)) {
        errf("%s", err);
        return false;
    }
    if (setup_interrupted()) /* between the tokenizer and the tokenized data */
        return false;
    if (!pairs_load(&t->pr, t->ctx, &t->a, t->ck, err, sizeof err, &t->usage)) {
        errf("%s", err);
        return false;
    }
    t->V = tg_tokenizer_vocab_size(t->pr.tok);
    if (t->ck && t->info.vocab_size != t->V) {
        errf("--resume '%s': model.vocab_size %d but its tokenizer has %" PRId64 " ids",
             t->a.resume, t->info.vocab_size, t->V);
        return false;
    }
    return true;
}

/* --resume with --text: the files are the ones the checkpoint's run trained on (the library's
 * check of its record: size, file count, content hash, vocabulary); a usage error otherwise. */
static bool resumed_text(trainer *t)
{
    const tg_text_info *c = &t->ci;
    const tg_train_record *r = &t->info.rec;
    tg_train_record here = {.mode = "text", .text = t->corp};
    const char *bad = NULL;
    if (tg_train_record_check_data(t->ctx, r, &here, &bad) != TG_OK && !bad) {
        errf("--resume '%s': %s", t->a.resume, tg_ctx_message(t->ctx));
        return false;
    }
    if (bad)
        t->usage = true; /* --text contradicts the resumed checkpoint (exit 2) */
    if (bad && !strcmp(bad, "data.bytes"))
        errf("--resume '%s' was trained on %" PRId64 " bytes of text, these files hold %" PRId64
             "; pass the same --text files (in the same order)", t->a.resume, r->bytes,
             c->bytes);
    else if (bad && !strcmp(bad, "data.files"))
        errf("--resume '%s' was trained on %" PRId64 " text file%s, %d given; pass the same "
             "--text files (in the same order)", t->a.resume, r->files, r->files == 1 ? "" : "s",
             c->files);
    else if (bad && !strcmp(bad, "data.text_hash"))
        errf("--resume '%s' was trained on other text: the same %" PRId64 " bytes in %d "
             "file%s, but their content or order differs (data.text_hash fnv1a64:%016" PRIx64
             " there, fnv1a64:%016" PRIx64 " here); pass the same --text files in the same "
             "order", t->a.resume, c->bytes, c->files, c->files == 1 ? "" : "s", r->text_hash,
             c->hash);
    else if (bad && strcmp(bad, "data.vocab") != 0)
        errf("--resume '%s': %s", t->a.resume, tg_ctx_message(t->ctx));
    if (bad && strcmp(bad, "data.vocab") != 0)
        return false;
    if (!tg_train_record_has(r, "data.text_hash") && !t->a.quiet)
        fprintf(stderr, "tgrad train: note: --resume '%s' records no hash of its text (an older "
                "checkpoint): only the text's size and vocabulary can be checked\n",
                t->a.resume);
    if (bad)
        errf("--resume '%s' was trained on text with a different vocabulary (%d bytes, these "
             "files have %d); pass the same --text files", t->a.resume, r->vocab_size,
             c->vocab_size);
    return !bad;
}

static bool load_data(trainer *t)
{
    t->T = t->a.seq_len;
    t->B = t->a.batch;
    t->K = t->a.grad_accum; /* divides B (train_resolve) */
    t->Bm = t->B / t->K;
    t->first = t->mp.rank * (t->K / t->mp.size); /* P divides K (plan_parallel) */
    t->count = t->K / t->mp.size;
    t->V = t->s2s ? SEQ2SEQ_VOCAB : 10;
    char err[4400];
    if (t->pairs)
        return load_pairs(t);
    if (!t->text)
        return true;
    t->corp = corpus_load(t->ctx, (const char *const *)t->a.text.v, t->a.text.n,
                          t->a.val_fraction, err, sizeof err);
    if (!t->corp) {
        errf("%s", err);
        return false;
    }
    t->ci = tg_text_get_info(t->corp);
    const tg_text_info *c = &t->ci;
    int64_t need = t->T + 2; /* T <= TRAIN_MAX_SEQ_LEN: no overflow */
    if (c->train_bytes < need || (t->a.val_fraction > 0 && c->bytes - c->train_bytes < need)) {
        errf("text too short: %" PRId64 " bytes give %" PRId64 " for training and %" PRId64
             " for validation; one window needs %" PRId64 " (lower --seq-len)", c->bytes,
             c->train_bytes, c->bytes - c->train_bytes, need);
        return false;
    }
    t->V = c->vocab_size;
    return !t->ck || resumed_text(t);
}

static void end_live(trainer *t);

/* --log: a new log with its header, or (--resume) the run's own log cut at the checkpoint, its
 * kept rows given to the plot (train_log.c). */
static bool open_log(trainer *t)
{
    bool plot = t->a.plot != NULL;
    t->log = (train_log){.path = t->a.log, .pairs = t->pairs, .text = t->text,
                         .force = t->a.force, .start = t->start,
                         .train = plot ? &t->train_curve : NULL,
                         .val = plot ? &t->val_curve : NULL,
                         .metric = plot ? &t->acc_curve : NULL};
    if (tlog_open(&t->log, t->ctx, t->ck != NULL))
        return true;
    errf("%s", t->log.err);
    t->usage |= t->log.usage;
    return false;
}

/* --resume: parameters, optimizer state and step, RNG and the training state from the
 * checkpoint (validated by ckpt_config_load already, so only I/O-level surprises fail here). */
static bool restore(trainer *t, tg_dtype dt, const tg_optim_config *oc)
{
    tg_train_state ts;
    if (tg_train_checkpoint_restore(t->ctx, t->ck, t->a.resume, &t->mc, dt, oc, t->opt, &ts) !=
        TG_OK) {
        cli_report("train", "--resume", t->a.resume, t->ctx);
        return false;
    }
    t->start = ts.step;
    t->best_val = ts.best_val;
    return true;
}

/* --pairs: graphs per batch shape (tg_seq2seq_loss, train_pairs.c); the optimizer over every
 * parameter; --dot: the training graph of the first batch's shape. */
static bool build_pairs(trainer *t, const tg_optim_config *oc)
{
    t->opt = tg_optim_new(t->ctx, oc, 0, NULL);
    if (!t->opt || !pairs_build(&t->pr, t->ctx, &t->model, &t->a)) {
        cli_report("train", "building the model", NULL, t->ctx);
        return false;
    }
    const tg_graph *g = t->a.dot ? tg_train_pairs_graph(t->pr.run) : NULL;
    if (t->a.dot && (!g || tg_graph_write_dot(g, t->a.dot, TG_DOT_BACKWARD) != TG_OK)) {
        cli_report("train", "--dot", t->a.dot, t->ctx);
        return false;
    }
    return true;
}

/* Text, task and seq2seq: the library's run of the model (tg_train_tokens: the graph, the
 * batches, the evaluation; for seq2seq the held-out greedy decoding, with --no-cache a no_grad
 * graph over the whole target prefix instead of the KV cache), the optimizer; --dot: the
 * graph as built (forward and backward). */
static bool build_tokens(trainer *t, const tg_optim_config *oc)
{
    const train_args *a = &t->a;
    tg_train_tokens_opts to = {.text = t->corp, .task = (tg_task_kind)t->task,
                               .eval_seed = (uint64_t)a->seed, .batch = t->B, .seq_len = t->T,
                               .grad_accum = t->K, .first = t->first, .count = t->count,
                               .label_smoothing = a->label_smoothing,
                               .precision = a->precision, .detect_anomaly = a->detect_anomaly,
                               .target_acc = a->target_acc, .seq2seq = t->s2s,
                               .bos = SEQ2SEQ_BOS, .no_cache = a->no_cache};
    t->tok_run = tg_train_tokens_new(t->ctx, &t->model, &to);
    t->opt = t->tok_run ? tg_optim_new(t->ctx, oc, 0, NULL) : NULL;
    t->g = tg_train_tokens_graph(t->tok_run);
    t->accum = tg_train_tokens_accum(t->tok_run);
    if (!t->g || !t->opt) {
        cli_report("train", "building the model", NULL, t->ctx);
        return false;
    }
    if (a->dot && tg_graph_write_dot(t->g, a->dot, TG_DOT_BACKWARD) != TG_OK) {
        cli_report("train", "--dot", a->dot, t->ctx);
        return false;
    }
    return true;
}

static bool build(trainer *t)
{
    const train_args *a = &t->a;
    tg_ctx *ctx = t->ctx;
    tg_ctx_seed(ctx, (uint64_t)a->seed);
    if (a->threads)
        tg_ctx_set_threads(ctx, cli_threads_cap("train", a->threads));
    else if (t->mp.size > 1) /* ranks sharing a host split its CPUs */
        tg_ctx_set_threads(ctx, tmpi_default_threads(&t->mp, tg_ctx_threads(ctx)));
    if (a->unfused)
        tg_ctx_set_fusion(ctx, false); /* before any module is built */
    train_model_config(a, t->text, t->V, &t->mc);
    tg_dtype dt = train_dtype(a);
    tg_optim_kind ok = a->optimizer == OPT_SGD    ? TG_OPTIM_SGD
                       : a->optimizer == OPT_ADAM ? TG_OPTIM_ADAM
                                                  : TG_OPTIM_ADAMW;
    tg_optim_config oc = tg_optim_defaults(ok);
    oc.lr = a->lr;
    oc.weight_decay = a->weight_decay;
    if (ok == TG_OPTIM_SGD) {
        oc.momentum = a->momentum;
    } else {
        oc.beta2 = a->beta2;
        oc.eps = a->eps;
    }
    if (tg_transformer_init(ctx, &t->model, dt, &t->mc) != TG_OK) {
        cli_report("train", "building the model", NULL, ctx);
        return false;
    }
    if (!(t->pairs ? build_pairs(t, &oc) : build_tokens(t, &oc)))
        return false;
    for (int64_t i = 0; i < tg_ctx_n_params(ctx); i++)
        t->n_params += tg_tensor_numel(tg_ctx_param(ctx, i));
    if (t->ck && !restore(t, dt, &oc))
        return false;
    if (setup_interrupted() || (a->log && !a->dry_run && !open_log(t)))
        return false;
    return true;
}

/* ---- checkpoint --------------------------------------------------------------------------- */
static void end_live(trainer *t);

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
                         .label_smoothing = a->label_smoothing};
    r.optimizer = a->optimizer == OPT_SGD    ? TG_OPTIM_SGD
                  : a->optimizer == OPT_ADAM ? TG_OPTIM_ADAM
                                             : TG_OPTIM_ADAMW;
    r.schedule = a->schedule == SCHED_NOAM ? TG_LR_NOAM : TG_LR_WARMUP_COSINE;
    r.precision = a->precision == TG_PRECISION_BF16 ? TG_PRECISION_BF16 : TG_PRECISION_F32;
    return r;
}

static bool save_checkpoint(trainer *t, int64_t steps_done)
{
    const train_args *a = &t->a;
    struct stat sb; /* what a failed save leaves: the previous checkpoint, or none */
    bool resumed = a->resume && cli_same_file(a->checkpoint, a->resume);
    const char *kept = stat(a->checkpoint, &sb) != 0 ? "no checkpoint was written"
                       : t->saved || resumed         ? "previous checkpoint kept"
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
    bool ok = tg_train_checkpoint_save(t->ctx, a->checkpoint, t->opt, &t->mc, train_dtype(a),
                                       &ts, m->n, m->keys, m->values, NULL) == TG_OK;
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    free(m);
    t->saved |= ok;
    if (!ok) {
        char msg[1200];
        end_live(t);
        errf("--checkpoint '%s': %s (%s)", a->checkpoint,
             cli_message(t->ctx, a->checkpoint, msg, sizeof msg), kept);
    }
    return ok;
}

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
static bool setup_interrupted(void) { return tsig_stop_requested(); }

/* Validation loss (text) or held-out loss and accuracy (task) into @p val. */
static bool evaluate(trainer *t, double *val)
{
    tg_ctx_set_training(t->ctx, false);
    *val = NAN;
    if (t->pairs) {
        bool reached; /* BLEU, the metric the run may stop on (--target-bleu) */
        if (tg_train_pairs_evaluate(t->pr.run, val, &t->acc, &reached) != TG_OK)
            return false;
        pairs_scores(&t->pr);
        t->reached |= reached;
    } else { /* text, task, seq2seq: the library's evaluation (tgrad_train.h) */
        bool reached;
        if (tg_train_tokens_evaluate(t->tok_run, val, &t->acc, &reached) != TG_OK)
            return false;
        t->tok_acc = tg_train_tokens_token_accuracy(t->tok_run);
        t->reached |= reached;
    }
    tg_ctx_set_training(t->ctx, true);
    return true;
}

/*
 * Micro-batch @p i of the step (tg_micro_batch_fn): rows i Bm .. (i+1) Bm - 1 of the batch in
 * ids_buf/tgt_buf, forward and backward; with K > 1 the backward is seeded 1/K and the loss
 * counted 1/K (the micro-batch's share of the global batch's mean). tg_train_step sums the
 * micro-batches in the fixed tree and keeps their dropout masks a function of i alone.
 */
static tg_status micro_batch(void *user, int64_t i, double *l)
{
    trainer *t = user;
    return t->tok_cb.micro(t->tok_cb.model_user, i, l); /* the library's run of the mode */
}

/* The step's end over the MPI ranks (one process: tg_grad_accum_finish, nothing to send). */
static tg_status sync_reduce(void *user, tg_grad_accum *acc, double *loss)
{
    return tmpi_reduce(user, acc, loss);
}

static tg_status sync_broadcast(void *user, void *buf, size_t bytes)
{
    return tmpi_bcast(user, buf, bytes);
}

/* tg_train_callbacks batch: step @p step's batch (the library's run of the mode). */
static tg_status cb_batch(void *user, int64_t step)
{
    trainer *t = user;
    return t->tok_cb.batch(t->tok_cb.model_user, step);
}

/* tg_train_callbacks tokens (--pairs): the real target tokens of the step. */
static int64_t cb_tokens(void *user)
{
    const trainer *t = user;
    return t->tok_cb.tokens(t->tok_cb.model_user);
}

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

/* tg_train_callbacks evaluate (the process of micro-batch 0: the run sends the outcome to the
 * others), its failure said here. */
static tg_status cb_evaluate(void *user, int64_t step, double *val, double *metric,
                             bool *reached)
{
    trainer *t = user;
    if (!evaluate(t, val)) {
        char msg[1200];
        end_live(t);
        errf("evaluation at step %" PRId64 ": %s", step + 1,
             cli_message(t->ctx, NULL, msg, sizeof msg));
        return TG_ERR_STATE;
    }
    *metric = t->text ? NAN : t->acc; /* val_acc (val_bleu): a task run's evaluations */
    *reached = t->reached;
    return TG_OK;
}

/* tg_train_callbacks row: the plot's points and the log's line (one write). */
static tg_status cb_row(void *user, const tg_train_row *r)
{
    trainer *t = user;
    t->tok_s = r->tokens_per_s;
    double x = (double)r->step;
    bool ok = !t->a.plot || svg_series_add(&t->train_curve, x, r->loss);
    if (r->eval) {
        t->acc = t->text ? t->acc : r->metric; /* every process: the evaluator's */
        t->last_val = r->val_loss;
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
    if (t->a.checkpoint && !save_checkpoint(t, steps_done))
        return TG_ERR_IO;
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
    tg_train_sync sync = {&t->mp, sync_reduce, sync_broadcast};
    tg_train_config c = run_config(t, &sync);
    if (t->tok_run)
        tg_train_tokens_bind(t->tok_run, &t->tok_cb, &c);
    else /* --pairs: the real target tokens of each step count for tokens/s */
        tg_train_pairs_bind(t->pr.run, &t->tok_cb, &c);
    tg_train_callbacks cb = {.user = t, .first = cb_first, .batch = cb_batch,
                             .micro = micro_batch, .tokens = t->tok_cb.tokens ? cb_tokens : NULL,
                             .after_step = cb_after_step, .evaluate = cb_evaluate,
                             .row = cb_row, .save = cb_save, .progress = cb_progress};
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
        t->agreed_failure |= res.failed == TG_TRAIN_FAIL_EVAL; /* the evaluator said why */
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
    tg_ctx_free(t->ctx);
    train_free(&t->a, &t->r);
}

/* ---- the command -------------------------------------------------------------------------- */
/* Under mpirun: K defaults to P on a fresh run, P must divide K; ranks > 0 write nothing
 * (rank 0 writes the checkpoint, the log, the plot and the DOT file). */
static bool plan_parallel(trainer *t)
{
    train_args *a = &t->a;
    /* a fresh run without --grad-accum: one micro-batch per process (K = P) */
    if (t->mp.size > 1 && !a->resume && !cli_given(train_command(), &t->r, "grad-accum")) {
        a->grad_accum = t->mp.size;
        if (a->batch % a->grad_accum != 0) {
            t->usage = true;
            errf("--batch %" PRId64 " does not split over %d processes (one micro-batch each "
                 "without --grad-accum); choose a batch the number of processes divides",
                 a->batch, t->mp.size);
            return false;
        }
    }
    if (a->grad_accum % t->mp.size != 0) {
        t->usage = true;
        errf("--grad-accum %" PRId64 " does not split over %d processes: each process runs "
             "K/P micro-batches of every step, so the number of processes must divide K (try "
             "--grad-accum %" PRId64 ")", a->grad_accum, t->mp.size,
             ((a->grad_accum + t->mp.size - 1) / t->mp.size) * t->mp.size);
        return false;
    }
    if (t->mp.rank > 0)
        a->checkpoint = a->log = a->plot = a->dot = NULL;
    return true;
}

/* plan -> data -> build, agreed by every rank under mpirun: true when the run can start;
 * otherwise @p rc is the exit status (1; 2: the command line; 130: a signal). */
static bool setup(trainer *t, int *rc)
{
    t->text = t->a.text.n > 0;
    t->pairs = t->a.pairs != NULL;
    svg_series_init(&t->train_curve);
    svg_series_init(&t->val_curve);
    svg_series_init(&t->acc_curve);
    t->ctx = tg_ctx_new();
    t->lock.fd = -1;
    t->log.fd = -1;
    bool ready = false;
    if (!t->ctx) {
        errf("out of memory");
    } else if ((t->a.resume ? plan_resume(t) : plan_fresh(t)) && plan_parallel(t) &&
               plan_outputs(t)) {
        t->task = (task_kind)t->a.task;
        t->s2s = t->a.arch == ARCH_SEQ2SEQ;
        ready = !setup_interrupted() && load_data(t) && !setup_interrupted() && build(t);
    }
    /* under mpirun: every rank's setup succeeded, or all stop here */
    if (!tmpi_agree(&t->mp, ready, t->ctx, t->K)) {
        if (ready)
            cli_report("train", "joining the MPI job", NULL, t->ctx);
        ready = false;
    }
    if (!ready && t->usage)
        *rc = 2; /* the command line, not a file or the run, is at fault */
    if (!ready && setup_interrupted()) {
        if (t->mp.rank == 0)
            errf("interrupted during the setup, before the first step: nothing was saved");
        *rc = 130;
    }
    return ready;
}

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
    bool ready = setup(t, &rc);
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
