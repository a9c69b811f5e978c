/*
 * fuzz_checkpoint.c - libFuzzer harness for checkpoint restore as `tgrad` does it: the
 * metadata validation of tools/cli/ckpt_config.c, the model built from what it accepted,
 * tg_checkpoint_restore / tg_params_load_from, and a training step or forward pass; plus the
 * checkpoint handling of `tgrad export` and `tgrad info`.
 *
 * The input is a checkpoint file (seeds: small checkpoints of `tgrad train`). Per input:
 * 1. `tgrad sample`: on a fresh context (capped, leak-checking allocator of fuzz_util.h, and
 *    tg_ctx_set_memory_limit(LIMIT)), tg_safetensors_read_mem, then ckpt_config_load(sample)
 *    from train_defaults() with a memory limit of LIMIT. A rejection must be one clean line
 *    (fz_check_line). If accepted: the resolved options are all within the train table's
 *    bounds and the config agrees with the file; then, as cmd_sample.c's sample_load does,
 *    tg_transformer_init, an (1, seq_len) input, the forward graph and tg_params_load_from
 *    (not strict), which must all succeed (the validation promised they would); one forward
 *    pass in evaluation mode must succeed; with finite logits, cmd_sample.c's pick() must
 *    give an index into the vocabulary for several temperatures and top-k.
 * 2. `tgrad train --resume`: on another fresh context, train_parse() of one of a few command
 *    lines (chosen by the input's hash: the checkpoint's mode alone, with training options
 *    given again, with model options that may conflict, or the other mode), then
 *    ckpt_config_load(train) with the parse's `given`. If accepted, the model is built as
 *    cmd_train.c's build() does with a batch of 1 (transformer, inputs, cross-entropy loss,
 *    the graph with shared gradients and --detect-anomaly as restored, the optimizer the
 *    metadata names with its restored hyperparameters), which must succeed; then
 *    tg_checkpoint_restore (it may still refuse, with a documented status and one clean line:
 *    its checks of optim.step and rng are stricter, and strict names catch stray tensors);
 *    options given again must never turn a checkpoint that restores without them into one
 *    that fails with TG_ERR_MISMATCH (a changed training option the validation let through);
 *    then forward, backward, gradient clipping and one optimizer step at the learning rate
 *    tg_lr_warmup_cosine (or tg_lr_noam, train.schedule noam) gives for the restored step
 *    (finite and within [0, max(lr, min_lr)]; noam: [0, lr]):
 *    each succeeds, or fails with TG_ERR_NONFINITE (restored NaN/inf) in one clean line.
 *    Each path's peak memory (beyond the parsed file) must stay within the estimate
 *    ckpt_config made for it (model_memory_estimate for batch 1) plus 1 MB.
 * 3. `tgrad export` (cmd_export.c's export_exec, reached through tools_access.h) on the same
 *    bytes as a file, writing into a new private directory (removed afterwards; export must
 *    leave nothing else in it, temporaries included): a refusal is one clean line and writes
 *    nothing;
 *    a success writes a file that reads back with format tgrad-export-1, the tensor count it
 *    reported, and 'config' and 'vocab' metadata that are valid JSON. A checkpoint that
 *    `train --resume` restored in full (and that has the fields export requires or defaults
 *    but train takes from its defaults or command line: format, model.causal,
 *    model.tie_weights, data.task) must export.
 * 4. `tgrad info` (cmd_info.c's info_file) on the same file: it describes every file the
 *    library reads, and what it prints is clean lines (a hostile tensor name or metadata
 *    value must not put control characters on the terminal); a refusal is one clean line.
 * Every context gives back every byte (fz_ctx_free); the CLI's own allocations are checked by
 * LeakSanitizer (libFuzzer) and valgrind (the replay test).
 */
#define _GNU_SOURCE /* open_memstream, mkdtemp */
#include "ckpt_config.h"
#include "cli.h"
#include "fuzz_util.h"
#include "tgrad_train.h"
#include "tools_access.h"
#include "train_args.h"

#include "io/json.h"

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* Memory limit of the contexts and of the estimate (the CLI uses the machine's memory). */
#define LIMIT ((size_t)256 << 20)
/* Peak memory beyond the estimate that is still fine (fixed overheads: records, graphs). */
#define EST_SLACK ((double)(1 << 20))

static const tg_status run_errors[] = {TG_ERR_NONFINITE, TG_OK};

/* A status and message the failed run-time call @p fn left: documented, one clean line. */
static void check_run_failure(tg_ctx *ctx, const char *fn, tg_status s, const tg_status *ok)
{
    bool allowed = false;
    for (const tg_status *p = ok; *p != TG_OK; p++)
        allowed = allowed || *p == s;
    if (!allowed)
        fz_die(ctx, "%s failed with %s", fn, tg_status_str(s));
    if (tg_ctx_status(ctx) != s)
        fz_die(ctx, "%s returned %s but the context says %s", fn, tg_status_str(s),
               tg_status_str(tg_ctx_status(ctx)));
    fz_check_line(fn, tg_ctx_message(ctx));
    tg_ctx_clear_error(ctx);
}

/* After ckpt_config_load accepted: every option within the train table's bounds (the
 * command line's rules), and the config the model is built from agrees with them. */
static void check_resolved(const train_args *a, const ckpt_info *info,
                           const tg_transformer_config *mc)
{
    const cli_command *cmd = train_command();
    for (const cli_option *o = cmd->opts; o->name; o++) {
        const char *p = (const char *)a + o->offset;
        if (o->kind == CLI_INT) {
            int64_t v;
            memcpy(&v, p, sizeof v);
            bool unset = v == 0 && (!strcmp(o->name, "threads") ||
                                    !strcmp(o->name, "save-every") ||
                                    !strcmp(o->name, "stop-after") ||
                                    !strcmp(o->name, "keep-last") ||
                                    (!strcmp(o->name, "decoder-layers") && !info->seq2seq));
            if (!unset && (v < o->imin || v > o->imax))
                fz_die(NULL, "restored --%s %" PRId64 " outside [%" PRId64 ", %" PRId64 "]",
                       o->name, v, o->imin, o->imax);
        } else if (o->kind == CLI_NUM) {
            double v;
            memcpy(&v, p, sizeof v);
            bool lo = (o->flags & CLI_FMIN_OPEN) ? v > o->fmin : v >= o->fmin;
            bool hi = (o->flags & CLI_FMAX_OPEN) ? v < o->fmax : v <= o->fmax;
            /* --attn-dropout, --act-dropout not set apart: -1 (as --dropout) */
            bool unset =
                v == -1 && (!strcmp(o->name, "attn-dropout") || !strcmp(o->name, "act-dropout") ||
                            !strcmp(o->name, "spm-alpha"));
            if (!unset && !(isfinite(v) && lo && hi))
                fz_die(NULL, "restored --%s %g outside its range", o->name, v);
        }
    }
    if (a->d_model % a->heads != 0)
        fz_die(NULL, "restored heads %" PRId64 " do not divide d_model %" PRId64, a->heads,
               a->d_model);
    if (info->vocab_size < 1 || info->vocab_size > 256 || info->step < 0 ||
        info->step > TRAIN_MAX_STEPS || !(info->best_val >= 0))
        fz_die(NULL, "ckpt_info: vocab %d step %" PRId64 " best_val %g", info->vocab_size,
               info->step, info->best_val);
    if (mc->vocab_size != info->vocab_size || mc->max_seq_len != a->seq_len ||
        mc->n_layers != a->layers || mc->layer.d_model != a->d_model ||
        mc->layer.n_heads != a->heads || mc->layer.d_ff != a->d_ff || mc->causal != info->text ||
        (info->seq2seq != (a->arch == ARCH_SEQ2SEQ)) ||
        mc->n_decoder_layers != (info->seq2seq ? a->decoder_layers : 0))
        fz_die(NULL, "the model config differs from the resolved options");
}

/* Peak bytes since @p live0 within the estimate for this build. */
static void check_estimate(const fz_alloc *A, size_t live0, double est, const char *what)
{
    double used = (double)(A->peak - live0);
    if (used > est + EST_SLACK)
        fz_die(NULL, "%s used %.0f bytes at its peak, more than the estimate %.0f + %.0f",
               what, used, est, EST_SLACK);
}

/* (1, T) or (B, T) ids i mod V (i32, as cmd_sample.c and cmd_train.c give them). */
static int32_t *ids_for(int64_t n, int64_t V)
{
    int32_t *ids = malloc(sizeof *ids * (size_t)n);
    if (!ids)
        fz_die(NULL, "out of memory in the harness");
    for (int64_t i = 0; i < n; i++)
        ids[i] = (int32_t)(i % V);
    return ids;
}

/* ---- 1. tgrad sample ---------------------------------------------------------------------- */
static void sample_path(const uint8_t *data, size_t size)
{
    fz_alloc A;
    tg_ctx *ctx = fz_ctx_new(&A, FZ_CAP);
    tg_ctx_set_memory_limit(ctx, LIMIT);
    tg_safetensors *st = tg_safetensors_read_mem(ctx, data, size);
    if (!st) {
        fz_ctx_free(ctx, &A);
        return;
    }
    train_args ta;
    train_defaults(&ta);
    ckpt_info info;
    tg_transformer_config mc;
    char err[1200];
    if (!ckpt_config_load(st, &ta, NULL, true, (double)LIMIT, &info, &mc, err, sizeof err)) {
        fz_check_line("ckpt_config_load (sample)", err);
        fz_ctx_free(ctx, &A);
        return;
    }
    check_resolved(&ta, &info, &mc);
    if (!info.text && !info.seq2seq)
        fz_die(NULL, "ckpt_config_load (sample) accepted an encoder task checkpoint");
    tg_dtype dt = train_dtype(&ta);
    int64_t T = mc.max_seq_len, V = mc.vocab_size;
    size_t live0 = fz_peak_start(&A);
    /* cmd_sample.c sample_load */
    tg_transformer model;
    tg_tensor *ids = NULL, *logits = NULL;
    tg_graph *g = NULL;
    if (tg_transformer_init(ctx, &model, dt, &mc) == TG_OK) {
        ids = tg_input(ctx, TG_I32, TG_DIMS(1, T), "ids");
        /* seq2seq (seq2seq.c's greedy decoder): the same ids as source and target prefix */
        logits = info.seq2seq ? tg_transformer_forward_seq2seq(ctx, &model, ids, ids, NULL, NULL)
                              : tg_transformer_forward(ctx, &model, ids, NULL);
        g = tg_graph_new(ctx, &logits, 1);
    }
    if (!g)
        fz_die(ctx, "sample: building the model ckpt_config_load accepted failed");
    if (tg_params_load_from(ctx, st, 0, NULL, false) != TG_OK)
        fz_die(ctx, "sample: tg_params_load_from failed after ckpt_check_tensors passed");
    /* cmd_sample.c sample_generate: one step */
    tg_ctx_set_training(ctx, false);
    int32_t *buf = ids_for(T, V);
    tg_status s = tg_tensor_set_data(ids, buf, TG_I32, (size_t)T);
    free(buf);
    if (s != TG_OK || (s = tg_graph_forward(g)) != TG_OK)
        fz_die(ctx, "sample: forward failed (%s)", tg_status_str(s));
    check_estimate(&A, live0, model_memory_estimate(&mc, dt, 1, 0, false), "sample");
    double lg[256], p[256];
    bool finite = true;
    for (int64_t v = 0; v < V; v++) {
        lg[v] = tg_get(logits, (T - 1) * V + v);
        finite = finite && isfinite(lg[v]);
    }
    if (finite) {
        static const double temps[] = {0, 1e-300, 0.8, 100};
        static const int64_t ks[] = {0, 1, 3, SAMPLE_MAX_TOP_K};
        for (int i = 0; i < 4; i++)
            for (int j = 0; j < 4; j++) {
                int id = fz_sample_pick(lg, (int)V, temps[i], ks[j], (i * 4 + j) / 16.0, p);
                if (id < 0 || id >= V)
                    fz_die(NULL, "pick(temperature %g, top-k %" PRId64 ") gave %d of %" PRId64,
                           temps[i], ks[j], id, V);
            }
    }
    if (info.seq2seq) { /* seq2seq.c's default path (the above is --no-cache): the generator
                         * (KV cache), batch 1, after the uncached graph is released */
        tg_graph_free(g);
        tg_generator *gen = tg_generator_new(ctx, &model, 1);
        if (!gen)
            fz_die(ctx, "sample: tg_generator_new on a model ckpt_config_load accepted failed");
        int32_t *src = ids_for(T, 10), bos = (int32_t)(V - 1);
        s = tg_generator_set_source(gen, src, T);
        free(src);
        if (s != TG_OK || (s = tg_generator_feed(gen, &bos, 1)) != TG_OK)
            fz_die(ctx, "sample: the generator failed (%s)", tg_status_str(s));
        for (int64_t v = 0; v < V; v++) /* NaN or inf parameters give non-finite logits */
            (void)tg_get(tg_generator_logits(gen), v);
        check_estimate(&A, live0, model_memory_estimate(&mc, dt, 1, 0, false), "sample (cached)");
    }
    fz_ctx_free(ctx, &A);
}

/* ---- 2. tgrad train --resume --------------------------------------------------------------- */

/* The command lines `train --resume ck` may come with (argv[1..] after the mode's options). */
static const char *const extra_args[][12] = {
    {NULL},
    {"--steps", "1000000000", "--lr", "0.01", "--batch", "1", "--warmup", "0", "--clip", "0",
     NULL},
    {"--d-model", "8", "--layers", "1", "--heads", "2", "--optimizer", "sgd", "--seq-len", "4",
     NULL},
    {"--post-norm", "--dtype", "f64", "--pos", "sinusoidal", "--tie-weights", "--activation",
     "gelu", "--detect-anomaly", NULL},
    {"--min-lr", "0", "--eval-every", "1", "--val-fraction", "0", "--dropout", "0.5",
     "--momentum", "0", NULL},
};
enum { N_EXTRA = sizeof extra_args / sizeof extra_args[0] };

/* What train_path got to. */
typedef enum { TP_REJECTED, TP_MISMATCH, TP_RESTORE_FAILED, TP_RESTORED } tp_result;

/* `train --resume` with command line @p variant of extra_args (in the other mode if @p flip). */
static tp_result train_path(const uint8_t *data, size_t size, bool flip, int variant)
{
    fz_alloc A;
    tg_ctx *ctx = fz_ctx_new(&A, FZ_CAP);
    tg_ctx_set_memory_limit(ctx, LIMIT);
    tg_safetensors *st = tg_safetensors_read_mem(ctx, data, size);
    if (!st) {
        fz_ctx_free(ctx, &A);
        return TP_REJECTED;
    }
    /* the command line: the checkpoint's mode (or the other one) */
    const char *mode = tg_safetensors_meta_get(st, "data.mode");
    bool text = mode && !strcmp(mode, "text");
    if (flip)
        text = !text;
    char *argv[24];
    int argc = 0;
    argv[argc++] = (char *)"train";
    if (text) {
        argv[argc++] = (char *)"--text";
        argv[argc++] = (char *)"corpus.txt";
    }
    argv[argc++] = (char *)"--resume";
    argv[argc++] = (char *)"ck.ckpt";
    for (const char *const *e = extra_args[variant]; *e; e++)
        argv[argc++] = (char *)*e;
    argv[argc] = NULL;
    train_args ta;
    cli_result r;
    char err[1200];
    if (train_parse(argc, argv, &ta, &r, err, sizeof err) != CLI_OK)
        fz_die(NULL, "train_parse refused the harness's command line: %s", err);
    ckpt_info info;
    tg_transformer_config mc;
    tp_result res = TP_REJECTED;
    if (!ckpt_config_load(st, &ta, &r, false, (double)LIMIT, &info, &mc, err, sizeof err)) {
        fz_check_line("ckpt_config_load (train)", err);
        goto out;
    }
    check_resolved(&ta, &info, &mc);
    if (info.text != text)
        fz_die(NULL, "ckpt_config_load (train) accepted a %s checkpoint for a %s run",
               info.text ? "text" : "task", text ? "text" : "task");
    if (!ta.checkpoint || strcmp(ta.checkpoint, "ck.ckpt") != 0)
        fz_die(NULL, "a resumed run does not save back to the resumed file");
    /* cmd_train.c build(), with a batch of 1 */
    size_t live0 = fz_peak_start(&A);
    tg_ctx_seed(ctx, (uint64_t)ta.seed);
    tg_dtype dt = train_dtype(&ta);
    int64_t T = mc.max_seq_len, V = mc.vocab_size;
    tg_optim_kind ok = ta.optimizer == OPT_SGD    ? TG_OPTIM_SGD
                       : ta.optimizer == OPT_ADAM ? TG_OPTIM_ADAM
                                                  : TG_OPTIM_ADAMW;
    tg_optim_config oc = tg_optim_defaults(ok);
    oc.lr = ta.lr;
    oc.weight_decay = ta.weight_decay;
    if (ok == TG_OPTIM_SGD) {
        oc.momentum = ta.momentum;
    } else {
        oc.beta2 = ta.beta2;
        oc.eps = ta.eps;
    }
    tg_transformer model;
    tg_tensor *ids = NULL, *tgt = NULL, *loss = NULL;
    tg_graph *g = NULL;
    tg_optim *opt = NULL;
    if (tg_transformer_init(ctx, &model, dt, &mc) == TG_OK) {
        ids = tg_input(ctx, TG_I32, TG_DIMS(1, T), "ids");
        tgt = tg_input(ctx, TG_I32, TG_DIMS(1, T), "targets");
        tg_tensor *logits = info.seq2seq
                                ? tg_transformer_forward_seq2seq(ctx, &model, ids, tgt, NULL, NULL)
                                : tg_transformer_forward(ctx, &model, ids, NULL);
        loss = tg_cross_entropy(ctx, logits, tgt, -1);
        tg_tensor *outs[2] = {loss, loss};
        if (ta.label_smoothing > 0)
            outs[0] = loss = tg_cross_entropy_smoothed(ctx, logits, tgt, -1, ta.label_smoothing);
        tg_graph_opts go = {.one_backward = true, .detect_anomaly = ta.detect_anomaly};
        g = tg_graph_new_opts(ctx, outs, outs[0] == outs[1] ? 1 : 2, &go);
        opt = tg_optim_new(ctx, &oc, 0, NULL);
    }
    if (!g || !opt)
        fz_die(ctx, "train: building the model ckpt_config_load accepted failed");
    size_t before = tg_ctx_bytes(ctx);
    tg_status s = tg_checkpoint_restore(ctx, st, opt);
    if (s != TG_OK) {
        static const tg_status allowed[] = {TG_ERR_MISMATCH, TG_ERR_FORMAT, TG_OK};
        fz_check_failure(ctx, "tg_checkpoint_restore", before, allowed);
        res = s == TG_ERR_MISMATCH ? TP_MISMATCH : TP_RESTORE_FAILED;
        goto out;
    }
    if (tg_optim_steps(opt) != info.step)
        fz_die(ctx, "restored step %" PRId64 ", metadata says %" PRId64, tg_optim_steps(opt),
               info.step);
    /* one training step (train_step) */
    int32_t *buf = ids_for(T, V);
    s = tg_tensor_set_data(ids, buf, TG_I32, (size_t)T);
    if (s == TG_OK)
        s = tg_tensor_set_data(tgt, buf, TG_I32, (size_t)T);
    free(buf);
    if (s != TG_OK)
        fz_die(ctx, "train: setting the batch failed");
    tg_ctx_set_training(ctx, true);
    tg_graph_zero_grad(g);
    res = TP_RESTORED;
    if ((s = tg_graph_forward(g)) != TG_OK) {
        check_run_failure(ctx, "tg_graph_forward", s, run_errors);
        goto out;
    }
    if ((s = tg_graph_backward(g, loss, NULL)) != TG_OK) {
        check_run_failure(ctx, "tg_graph_backward", s, run_errors);
        goto out;
    }
    double norm = 0;
    if (ta.clip > 0 && (s = tg_clip_grad_norm(ctx, 0, NULL, ta.clip, &norm)) != TG_OK) {
        check_run_failure(ctx, "tg_clip_grad_norm", s, run_errors);
        goto out;
    }
    bool noam = ta.schedule == SCHED_NOAM;
    double lr = noam ? tg_lr_noam(info.step, ta.d_model, ta.warmup, ta.lr)
                     : tg_lr_warmup_cosine(info.step, ta.steps, ta.warmup, ta.lr, ta.min_lr);
    double top = noam ? ta.lr : ta.lr > ta.min_lr ? ta.lr : ta.min_lr; /* noam: <= factor */
    if (!(lr >= 0 && lr <= top * (1 + 1e-12)))
        fz_die(NULL, "%s(step %" PRId64 ", steps %" PRId64 ", warmup %" PRId64 ", lr %g, "
               "min_lr %g) = %g", noam ? "tg_lr_noam" : "tg_lr_warmup_cosine", info.step,
               ta.steps, ta.warmup, ta.lr, ta.min_lr, lr);
    if ((s = tg_optim_step(opt, lr)) != TG_OK)
        check_run_failure(ctx, "tg_optim_step", s, run_errors);
    check_estimate(&A, live0, model_memory_estimate(&mc, dt, 1, train_n_state(&ta), true),
                   "train");
out:
    train_free(&ta, &r);
    fz_ctx_free(ctx, &A);
    return res;
}

/* ---- 3. tgrad export and 4. tgrad info ------------------------------------------------------ */

/* A new private directory for export's output, in @p dir (tmpfs if there is one: export
 * fsyncs). Made and removed for each input (libFuzzer ends with _Exit, so nothing made once
 * per process would be removed). */
static void scratch_dir(char *dir, size_t n)
{
    struct stat sb;
    const char *base = getenv("FUZZ_TMPDIR");
    if (!base)
        base = stat("/dev/shm", &sb) == 0 && S_ISDIR(sb.st_mode) ? "/dev/shm" : NULL;
    if (!base)
        base = getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp";
    snprintf(dir, n, "%s/tgrad-fuzz-export.XXXXXX", base);
    if (!mkdtemp(dir))
        fz_die(NULL, "mkdtemp %s: %s", dir, strerror(errno));
}

/* The metadata value @p key of @p st is one valid JSON value. */
static void check_json(tg_ctx *ctx, const tg_safetensors *st, const char *key)
{
    const char *v = tg_safetensors_meta_get(st, key);
    if (!v)
        fz_die(NULL, "export wrote no '%s' metadata", key);
    tg__jp jp;
    if (tg__jp_init(&jp, ctx, "fuzz", key, v, strlen(v)) != TG_OK)
        fz_die(ctx, "JSON parser");
    bool ok = tg__jp_skip(&jp) && tg__jp_end(&jp);
    tg__jp_free(&jp);
    if (!ok)
        fz_die(ctx, "export's '%s' metadata is not valid JSON: %.200s", key, v);
}

static void export_file(const char *path, bool must_export)
{
    char dir[256], out[320], err[1600];
    scratch_dir(dir, sizeof dir);
    snprintf(out, sizeof out, "%s/model.safetensors", dir);
    int64_t n_tensors = 0;
    int rc = fz_export_exec(path, out, false, &n_tensors, err, sizeof err);
    if (rc != 0) {
        fz_check_line("export", err);
        if (must_export)
            fz_die(NULL, "export refuses a checkpoint that train --resume restored: %s", err);
        if (unlink(out) == 0)
            fz_die(NULL, "export failed but left '%s'", out);
        if (rmdir(dir) != 0)
            fz_die(NULL, "export failed and left files in %s: %s", dir, strerror(errno));
        return;
    }
    fz_alloc A;
    tg_ctx *ctx = fz_ctx_new(&A, FZ_CAP);
    tg_safetensors *st = tg_safetensors_read(ctx, out);
    if (!st)
        fz_die(ctx, "export wrote a file that does not read back");
    const char *fmt = tg_safetensors_meta_get(st, "format");
    if (!fmt || strcmp(fmt, "tgrad-export-1") != 0 || tg_safetensors_count(st) != n_tensors)
        fz_die(NULL, "export: format '%s', %" PRId64 " tensors (reported %" PRId64 ")",
               fmt ? fmt : "(none)", tg_safetensors_count(st), n_tensors);
    check_json(ctx, st, "config");
    check_json(ctx, st, "vocab");
    fz_ctx_free(ctx, &A);
    if (unlink(out) != 0)
        fz_die(NULL, "unlink %s: %s", out, strerror(errno));
    if (rmdir(dir) != 0) /* a temporary of the atomic write left behind? */
        fz_die(NULL, "export left files in %s: %s", dir, strerror(errno));
}

/* info must describe what the library reads (@p readable), in clean lines; it refuses such a
 * file only when the file claims to be a training checkpoint that train --resume, sample and
 * export would refuse (it is held to their rules). */
static void info_file(const char *path, bool readable)
{
    char *buf = NULL, err[1600];
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    if (!f)
        fz_die(NULL, "open_memstream: %s", strerror(errno));
    bool ok = fz_info_file(path, f, err, sizeof err);
    fclose(f);
    if (!ok) {
        fz_check_line("info", err);
        if (readable && !strstr(err, "not a valid tgrad checkpoint (train --resume, sample "
                                     "and export refuse it): "))
            fz_die(NULL, "info refuses a file the library reads: %s", err);
    } else {
        /* each line clean (fz_check_line on each) */
        for (char *line = buf, *nl; line < buf + len; line = nl + 1) {
            nl = memchr(line, '\n', (size_t)(buf + len - line));
            if (!nl)
                fz_die(NULL, "info: the output does not end with a newline");
            *nl = 0;
            if (*line)
                fz_check_line("info (output line)", line);
        }
    }
    free(buf);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    uint64_t h = fz_hash(data, size);
    /* is it a safetensors file at all? (the reader itself is fuzz_safetensors' job) */
    fz_alloc A;
    tg_ctx *ctx = fz_ctx_new(&A, FZ_CAP);
    tg_safetensors *st = tg_safetensors_read_mem(ctx, data, size);
    bool readable = st != NULL;
    /* the fields export requires (or defaults) that train takes from its command line when
     * absent: a file without model.tie_weights resumed with --tie-weights is tied for train,
     * untied for export (which has no command line) */
    bool export_fields = st && tg_safetensors_meta_get(st, "format") &&
                         tg_safetensors_meta_get(st, "model.causal") &&
                         tg_safetensors_meta_get(st, "model.tie_weights") &&
                         (tg_safetensors_meta_get(st, "data.task") ||
                          !tg_safetensors_meta_get(st, "data.mode") ||
                          !strcmp(tg_safetensors_meta_get(st, "data.mode"), "text"));
    /* export writes the LM and the encoder only: a seq2seq checkpoint (model.arch seq2seq)
     * that train restores is refused by export, by design */
    const char *arch = st ? tg_safetensors_meta_get(st, "model.arch") : NULL;
    if (arch && !strcmp(arch, "seq2seq"))
        export_fields = false;
    fz_ctx_free(ctx, &A);

    sample_path(data, size);
    int variant = (int)((h / 8) % N_EXTRA);
    tp_result tr = train_path(data, size, h % 8 == 7, variant);
    /* options given again on the command line (training options, or the checkpoint's own
     * model options) must not make a checkpoint that restores without them unrestorable */
    if (tr == TP_MISMATCH && variant != 0 && h % 8 != 7 &&
        train_path(data, size, false, 0) == TP_RESTORED)
        fz_die(NULL, "train --resume with the options '%s ...' cannot restore a checkpoint that "
               "restores without them (tg_checkpoint_restore: TG_ERR_MISMATCH)",
               extra_args[variant][0]);
    bool restored = tr == TP_RESTORED;

    /* the file-based commands: every readable input, one rejected input in 16 */
    if (readable || h % 16 == 0) {
        char path[64];
        int fd = fz_file_open(data, size, path, sizeof path);
        if (fd >= 0) {
            if (readable)
                export_file(path, restored && export_fields);
            info_file(path, readable);
            fz_file_close(fd);
        }
    }
    return 0;
}
