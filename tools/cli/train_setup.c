/*
 * train_setup.c - `tgrad train`'s setup, before the first step: plan (--resume: the checkpoint
 * validated by ckpt_config_load and its record read; a fresh run: the mode's defaults and the
 * memory estimate; the processes under mpirun; every output path checked by train_plan.c and
 * the checkpoint's lock taken) -> data (the text, the task or the tokenized pairs; a resumed
 * run's text checked against the checkpoint's record by tg_train_record_check_data) -> build
 * (the model, the library's run of the mode: tg_train_tokens or tg_train_pairs, the optimizer,
 * a resumed run's state restored, the log opened or cut at the checkpoint's step). A signal
 * stops the setup between two stages. Every error is one line on stderr.
 */
#include "trainer.h"
#include "climsg.h"
#include "train_plan.h"
#include "train_signal.h"

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#define errf train_errf /* train_plan.h */

/* A signal arrived during the setup: stop it between two stages. */
static bool setup_interrupted(void) { return tsig_stop_requested(); }

/* ---- plan: checkpoint, defaults, memory, processes, outputs ------------------------------- */
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
    t->a.keep_best |= t->info.rec.keep_best == 1; /* as the run was started */
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
    if (t->mp.rank > 0) {
        a->checkpoint = a->log = a->plot = a->dot = NULL;
        a->keep_best = false;
        a->keep_last = 0;
    }
    return true;
}

/* The outputs, checked before anything is trained (train_plan.c). */
static bool plan_outputs(trainer *t)
{
    /* --keep-last: the resumed run's step files are this run's when it saves back to the same
     * --checkpoint (the same name, so the same step file names) */
    const train_args *a = &t->a;
    if (t->ck && a->checkpoint && !strcmp(a->checkpoint, a->resume)) {
        t->n_kept = t->info.n_kept;
        memcpy(t->kept, t->info.kept, sizeof t->kept[0] * (size_t)t->n_kept);
    }
    train_plan p = {.a = &t->a,
                    .lock = &t->lock,
                    .resumed_best = t->ck && t->info.rec.keep_best == 1,
                    .kept = t->kept,
                    .n_kept = t->n_kept};
    bool ok = train_plan_outputs(&p);
    t->usage |= p.usage;
    t->best_path = p.best_path;
    return ok;
}

/* ---- data and model ----------------------------------------------------------------------- */

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
    t->best_bleu = ts.best_bleu;
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
/* plan -> data -> build, agreed by every rank under mpirun: true when the run can start;
 * otherwise @p rc is the exit status (1; 2: the command line; 130: a signal). */
bool train_setup(trainer *t, int *rc)
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

