/*
 * cmd_train.c - `tgrad train`: train a transformer on a built-in algorithmic task (the
 * default: an encoder predicting the reversed digit sequence) or, with --text, a byte-level
 * language model; progress, CSV log, SVG plot, atomic checkpoints and bit-exact resume.
 */
#define _DEFAULT_SOURCE
#include "cli.h"
#include "data.h"
#include "svgplot.h"
#include "tgrad_train.h"

#include <errno.h>
#include <signal.h>
#include <stddef.h>
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

typedef struct {
    /* model */
    int64_t layers, d_model, heads, d_ff, seq_len;
    bool post_norm, tie;
    const char *activation, *pos;
    double dropout;
    /* optimisation */
    int64_t batch, steps, warmup, eval_every, stop_after;
    double lr, weight_decay, clip, min_lr, val_fraction, target_acc, momentum;
    const char *optimizer;
    uint64_t seed;
    int threads;
    tg_dtype dt;
    /* data and outputs */
    const char **text;
    int n_text;
    const char *task, *checkpoint, *resume, *log, *plot;
    bool quiet;
    /* which model options were given explicitly (for --resume consistency) */
    bool set_layers, set_d_model, set_heads, set_d_ff, set_seq_len, set_norm, set_act, set_pos,
        set_task, set_tie, set_optimizer;
    /* every option given on the command line, so --resume can restore the others */
    const char *given[64];
    int n_given;
} train_args;

static bool given(const train_args *a, const char *flag)
{
    for (int i = 0; i < a->n_given; i++)
        if (!strcmp(a->given[i], flag))
            return true;
    return false;
}

/* Training hyperparameters saved in checkpoints and restored by --resume unless given again
 * (so that a resumed run continues the same schedule). */
typedef struct {
    const char *flag, *key;
    bool is_int;
    size_t offset;
} hyper;

static const hyper hypers[] = {
    {"--steps", "train.steps", true, offsetof(train_args, steps)},
    {"--seed", "train.seed", true, offsetof(train_args, seed)},
    {"--batch", "train.batch", true, offsetof(train_args, batch)},
    {"--warmup", "train.warmup", true, offsetof(train_args, warmup)},
    {"--eval-every", "train.eval_every", true, offsetof(train_args, eval_every)},
    {"--lr", "train.lr", false, offsetof(train_args, lr)},
    {"--min-lr", "train.min_lr", false, offsetof(train_args, min_lr)},
    {"--weight-decay", "train.weight_decay", false, offsetof(train_args, weight_decay)},
    {"--clip", "train.clip", false, offsetof(train_args, clip)},
    {"--momentum", "train.momentum", false, offsetof(train_args, momentum)},
    {"--dropout", "model.dropout", false, offsetof(train_args, dropout)},
    {"--val-fraction", "data.val_fraction", false, offsetof(train_args, val_fraction)},
    {"--target-acc", "train.target_acc", false, offsetof(train_args, target_acc)},
};

static void help(FILE *f)
{
    fprintf(f,
        "usage: tgrad train [--task copy|reverse|sort | --text FILE...] [options]\n"
        "\n"
        "With no arguments, trains an encoder on the built-in 'reverse' task (random digit\n"
        "sequences, predict the reversed sequence at each position) until 99%% token accuracy\n"
        "on held-out sequences. With --text, trains a byte-level decoder-only language model\n"
        "on the concatenated files (symlinked duplicates skipped); the last 10%% is validation.\n"
        "\n"
        "model:     --layers N (2)  --d-model D (text 128, task 64)  --heads H (4)\n"
        "           --d-ff F (4*D)  --seq-len T (text 64, task 12)  --post-norm (default pre-norm)\n"
        "           --activation relu|gelu (relu)  --pos learned|sinusoidal (learned)\n"
        "           --dropout P (0)  --tie-weights (output projection = token embedding)\n"
        "training:  --batch B (32)  --steps N (text 1500, task 2000 max)  --lr LR (3e-3)\n"
        "           --optimizer adamw|adam|sgd (adamw)  --momentum M (sgd, 0.9)\n"
        "           --warmup N (100)  --weight-decay W (0.01)  --clip C (1.0, 0 = off)\n"
        "           --min-lr LR (lr/10)  --seed S (0)  --threads N  --dtype f32|f64 (f32)\n"
        "           --eval-every N (text 100, task 50)  --val-fraction F (0.1)\n"
        "           --target-acc A (task: stop at this held-out accuracy, 0.99)\n"
        "files:     --checkpoint PATH (saved atomically at each eval and at the end)\n"
        "           --resume PATH (continue bit-exactly; model options, and training options\n"
        "           not given again, come from the checkpoint)\n"
        "           --stop-after N (stop after step N, e.g. to resume later)\n"
        "           --log CSV (step,train_loss,val_loss,lr,tokens_per_s)  --plot SVG\n"
        "           --quiet (only the summary)\n");
}

static bool parse_i64(const char *s, int64_t min, int64_t *out)
{
    char *end;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (!*s || *end || errno || v < min)
        return false;
    *out = v;
    return true;
}

static bool parse_f64(const char *s, double min, double *out)
{
    char *end;
    double v = strtod(s, &end);
    if (!*s || *end || !(v >= min) || v != v || v > 1e300)
        return false;
    *out = v;
    return true;
}

static int bad(const char *opt, const char *val, const char *what)
{
    fprintf(stderr, "tgrad train: %s '%s': %s\n", opt, val, what);
    return 2;
}

static int parse(int argc, char **argv, train_args *a)
{
    memset(a, 0, sizeof *a);
    a->layers = 2;
    a->heads = 4;
    a->activation = "relu";
    a->pos = "learned";
    a->batch = 32;
    a->lr = 3e-3;
    a->warmup = 100;
    a->weight_decay = 0.01;
    a->clip = 1.0;
    a->min_lr = -1;
    a->val_fraction = 0.1;
    a->target_acc = 0.99;
    a->momentum = 0.9;
    a->optimizer = "adamw";
    a->dt = TG_F32;
    a->d_model = a->d_ff = a->seq_len = a->steps = a->eval_every = -1;
    for (int i = 1; i < argc; i++) {
        const char *o = argv[i];
        if (!strcmp(o, "--help") || !strcmp(o, "-h")) {
            help(stdout);
            return -1;
        }
        if (a->n_given < 64 && !strncmp(o, "--", 2))
            a->given[a->n_given++] = o;
        if (!strcmp(o, "--post-norm")) {
            a->post_norm = a->set_norm = true;
            continue;
        }
        if (!strcmp(o, "--quiet")) {
            a->quiet = true;
            continue;
        }
        if (!strcmp(o, "--tie-weights")) {
            a->tie = a->set_tie = true;
            continue;
        }
        if (!strcmp(o, "--text")) {
            a->text = (const char **)&argv[i + 1];
            while (i + 1 < argc && strncmp(argv[i + 1], "--", 2) != 0) {
                a->n_text++;
                i++;
            }
            if (a->n_text == 0) {
                fprintf(stderr, "tgrad train: --text needs at least one file\n");
                return 2;
            }
            continue;
        }
        if (i + 1 >= argc) {
            fprintf(stderr, "tgrad train: option '%s' needs a value or is unknown (try --help)\n", o);
            return 2;
        }
        const char *v = argv[++i];
        int64_t n;
        double d;
#define I64(flag, field, min, setflag)                                                         \
    if (!strcmp(o, flag)) {                                                                    \
        if (!parse_i64(v, min, &n))                                                            \
            return bad(o, v, "expected an integer >= " #min);                                  \
        a->field = n;                                                                          \
        setflag;                                                                               \
        continue;                                                                              \
    }
#define F64(flag, field, min)                                                                  \
    if (!strcmp(o, flag)) {                                                                    \
        if (!parse_f64(v, min, &d))                                                            \
            return bad(o, v, "expected a number >= " #min);                                    \
        a->field = d;                                                                          \
        continue;                                                                              \
    }
        I64("--layers", layers, 1, a->set_layers = true)
        I64("--d-model", d_model, 1, a->set_d_model = true)
        I64("--heads", heads, 1, a->set_heads = true)
        I64("--d-ff", d_ff, 1, a->set_d_ff = true)
        I64("--seq-len", seq_len, 2, a->set_seq_len = true)
        I64("--batch", batch, 1, (void)0)
        I64("--steps", steps, 1, (void)0)
        I64("--warmup", warmup, 0, (void)0)
        I64("--eval-every", eval_every, 1, (void)0)
        I64("--stop-after", stop_after, 1, (void)0)
        F64("--lr", lr, 0)
        F64("--weight-decay", weight_decay, 0)
        F64("--clip", clip, 0)
        F64("--min-lr", min_lr, 0)
        F64("--dropout", dropout, 0)
        F64("--val-fraction", val_fraction, 0)
        F64("--target-acc", target_acc, 0)
        F64("--momentum", momentum, 0)
#undef I64
#undef F64
        if (!strcmp(o, "--seed")) {
            if (!parse_i64(v, 0, &n))
                return bad(o, v, "expected a non-negative integer");
            a->seed = (uint64_t)n;
        } else if (!strcmp(o, "--threads")) {
            if (!parse_i64(v, 1, &n) || n > 1024)
                return bad(o, v, "expected an integer in 1..1024");
            a->threads = (int)n;
        } else if (!strcmp(o, "--dtype")) {
            if (!strcmp(v, "f32"))
                a->dt = TG_F32;
            else if (!strcmp(v, "f64"))
                a->dt = TG_F64;
            else
                return bad(o, v, "expected f32 or f64");
        } else if (!strcmp(o, "--activation")) {
            if (strcmp(v, "relu") && strcmp(v, "gelu"))
                return bad(o, v, "expected relu or gelu");
            a->activation = v;
            a->set_act = true;
        } else if (!strcmp(o, "--pos")) {
            if (strcmp(v, "learned") && strcmp(v, "sinusoidal"))
                return bad(o, v, "expected learned or sinusoidal");
            a->pos = v;
            a->set_pos = true;
        } else if (!strcmp(o, "--task")) {
            task_kind k;
            if (!task_parse(v, &k))
                return bad(o, v, "expected copy, reverse or sort");
            a->task = v;
            a->set_task = true;
        } else if (!strcmp(o, "--optimizer")) {
            if (strcmp(v, "adamw") && strcmp(v, "adam") && strcmp(v, "sgd"))
                return bad(o, v, "expected adamw, adam or sgd");
            a->optimizer = v;
            a->set_optimizer = true;
        } else if (!strcmp(o, "--checkpoint")) {
            a->checkpoint = v;
        } else if (!strcmp(o, "--resume")) {
            a->resume = v;
        } else if (!strcmp(o, "--log")) {
            a->log = v;
        } else if (!strcmp(o, "--plot")) {
            a->plot = v;
        } else {
            fprintf(stderr, "tgrad train: unknown option '%s' (try --help)\n", o);
            return 2;
        }
    }
    if (a->text && a->task) {
        fprintf(stderr, "tgrad train: --text and --task exclude each other\n");
        return 2;
    }
    if (a->dropout >= 1)
        return bad("--dropout", "p", "must be < 1");
    if (a->val_fraction >= 1)
        return bad("--val-fraction", "f", "must be < 1");
    return 0;
}

/* ---- metadata helpers ------------------------------------------------------------------- */
typedef struct {
    int n;
    char key[40][32];
    char val[40][600];
} meta;

static void meta_add(meta *m, const char *k, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 3, 4)))
#endif
    ;
static void meta_add(meta *m, const char *k, const char *fmt, ...)
{
    if (m->n >= 40)
        return;
    snprintf(m->key[m->n], sizeof m->key[0], "%s", k);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(m->val[m->n], sizeof m->val[0], fmt, ap);
    va_end(ap);
    m->n++;
}

/* Can we create files in the checkpoint's directory? (Fail before training, not after.) */
static bool dir_writable(const char *path, char *err, size_t n)
{
    char dir[4096];
    snprintf(dir, sizeof dir, "%s", path);
    char *slash = strrchr(dir, '/');
    if (slash)
        *(slash == dir ? slash + 1 : slash) = 0;
    else
        snprintf(dir, sizeof dir, ".");
    char probe[4200];
    snprintf(probe, sizeof probe, "%s/.tgrad-probe-XXXXXX", dir);
    int fd = mkstemp(probe);
    if (fd < 0) {
        snprintf(err, n, "cannot write checkpoint '%s': %s", path, strerror(errno));
        return false;
    }
    close(fd);
    unlink(probe);
    return true;
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void fmt_time(double s, char *buf, size_t n)
{
    if (s < 0 || s != s)
        s = 0;
    int m = (int)(s / 60);
    snprintf(buf, n, "%d:%02d", m, (int)s - 60 * m);
}

/* Ctrl-C (SIGINT) or SIGTERM: finish the current step, save the checkpoint, print the summary,
 * exit 130. A second signal falls back to the default action. */
static volatile sig_atomic_t g_interrupted;

static void on_signal(int sig)
{
    g_interrupted = 1;
    signal(sig, SIG_DFL);
}

/* ---- the command ------------------------------------------------------------------------- */
int cmd_train(int argc, char **argv)
{
    train_args a;
    int pr = parse(argc, argv, &a);
    if (pr)
        return pr < 0 ? 0 : pr;
    bool text = a.text != NULL;
    task_kind task = TASK_REVERSE;
    if (a.task)
        task_parse(a.task, &task);

    /* --resume: model config and data description come from the checkpoint */
    tg_ctx *ctx = tg_ctx_new();
    if (!ctx) {
        fprintf(stderr, "tgrad train: out of memory\n");
        return 1;
    }
    int rc = 1;
    corpus corp;
    memset(&corp, 0, sizeof corp);
    FILE *logf = NULL;
    float *ids_buf = NULL, *tgt_buf = NULL;
    double *curve = NULL;
    tg_safetensors *ck = NULL;
    if (a.resume) {
        ck = tg_safetensors_read(ctx, a.resume);
        if (!ck) {
            fprintf(stderr, "tgrad train: --resume: %s\n", tg_ctx_message(ctx));
            goto out;
        }
        const char *mode = tg_safetensors_meta_get(ck, "data.mode");
        if (!mode || !tg_safetensors_meta_get(ck, "model.d_model")) {
            fprintf(stderr, "tgrad train: --resume '%s' is not a tgrad training checkpoint\n",
                    a.resume);
            goto out;
        }
        bool ck_text = strcmp(mode, "text") == 0;
        if (ck_text != text) {
            fprintf(stderr, "tgrad train: checkpoint '%s' is from a %s run; pass %s\n", a.resume,
                    ck_text ? "--text" : "task", ck_text ? "the same --text files" : "no --text");
            goto out;
        }
        struct {
            const char *key;
            int64_t *field;
            bool set;
            const char *flag;
        } ints[] = {
            {"model.layers", &a.layers, a.set_layers, "--layers"},
            {"model.d_model", &a.d_model, a.set_d_model, "--d-model"},
            {"model.heads", &a.heads, a.set_heads, "--heads"},
            {"model.d_ff", &a.d_ff, a.set_d_ff, "--d-ff"},
            {"model.seq_len", &a.seq_len, a.set_seq_len, "--seq-len"},
        };
        for (size_t i = 0; i < sizeof ints / sizeof ints[0]; i++) {
            const char *v = tg_safetensors_meta_get(ck, ints[i].key);
            int64_t x;
            if (!v || !parse_i64(v, 1, &x)) {
                fprintf(stderr, "tgrad train: checkpoint '%s' lacks %s\n", a.resume, ints[i].key);
                goto out;
            }
            if (ints[i].set && *ints[i].field != x) {
                fprintf(stderr, "tgrad train: checkpoint '%s' is from a different config: "
                        "%s %" PRId64 " there, %s %" PRId64 " given\n", a.resume, ints[i].key, x,
                        ints[i].flag, *ints[i].field);
                goto out;
            }
            *ints[i].field = x;
        }
        const char *pn = tg_safetensors_meta_get(ck, "model.norm_first");
        const char *act = tg_safetensors_meta_get(ck, "model.activation");
        const char *pos = tg_safetensors_meta_get(ck, "model.pos");
        const char *tk = tg_safetensors_meta_get(ck, "data.task");
        const char *tie = tg_safetensors_meta_get(ck, "model.tie_weights");
        bool ck_tie = tie && strcmp(tie, "1") == 0;
        if (a.set_tie && a.tie != ck_tie) {
            fprintf(stderr, "tgrad train: checkpoint '%s' is from a different config "
                    "(tie_weights %d)\n", a.resume, ck_tie);
            goto out;
        }
        a.tie = ck_tie;
        const char *ck_opt = tg_safetensors_meta_get(ck, "train.optimizer");
        if (ck_opt && !a.set_optimizer && (!strcmp(ck_opt, "sgd") || !strcmp(ck_opt, "adam")))
            a.optimizer = !strcmp(ck_opt, "sgd") ? "sgd" : "adam";
        if (ck_opt && strcmp(ck_opt, a.optimizer) != 0) {
            fprintf(stderr, "tgrad train: checkpoint '%s' was trained with --optimizer %s, not "
                    "%s\n", a.resume, ck_opt, a.optimizer);
            goto out;
        }
        if (!pn || !act || !pos) {
            fprintf(stderr, "tgrad train: checkpoint '%s' lacks model metadata\n", a.resume);
            goto out;
        }
        if ((a.set_norm && a.post_norm != (strcmp(pn, "0") == 0)) ||
            (a.set_act && strcmp(a.activation, act)) || (a.set_pos && strcmp(a.pos, pos)) ||
            (a.set_task && tk && strcmp(a.task, tk))) {
            fprintf(stderr, "tgrad train: checkpoint '%s' is from a different config "
                    "(norm_first %s, activation %s, pos %s%s%s)\n", a.resume, pn, act, pos,
                    tk ? ", task " : "", tk ? tk : "");
            goto out;
        }
        a.post_norm = strcmp(pn, "0") == 0;
        a.activation = strcmp(act, "gelu") == 0 ? "gelu" : "relu";
        a.pos = strcmp(pos, "sinusoidal") == 0 ? "sinusoidal" : "learned";
        if (tk && !task_parse(tk, &task)) {
            fprintf(stderr, "tgrad train: checkpoint '%s' has unknown task '%s'\n", a.resume, tk);
            goto out;
        }
    }
    if (ck) { /* hyperparameters not given again come from the checkpoint */
        for (size_t i = 0; i < sizeof hypers / sizeof hypers[0]; i++) {
            const char *v = tg_safetensors_meta_get(ck, hypers[i].key);
            if (!v || given(&a, hypers[i].flag))
                continue;
            char *field = (char *)&a + hypers[i].offset;
            if (hypers[i].is_int)
                *(int64_t *)field = strtoll(v, NULL, 10);
            else
                *(double *)field = strtod(v, NULL);
        }
    }
    /* defaults that depend on the mode */
    if (a.d_model < 0)
        a.d_model = text ? 128 : 64;
    if (a.d_ff < 0)
        a.d_ff = 4 * a.d_model;
    if (a.seq_len < 0)
        a.seq_len = text ? 64 : 12;
    if (a.steps < 0)
        a.steps = text ? 1500 : 2000;
    if (a.eval_every < 0)
        a.eval_every = text ? 100 : 50;
    if (a.min_lr < 0)
        a.min_lr = a.lr / 10;
    if (a.d_model % a.heads != 0) {
        fprintf(stderr, "tgrad train: --heads %" PRId64 " does not divide --d-model %" PRId64 "\n",
                a.heads, a.d_model);
        goto out;
    }
    if (a.checkpoint) {
        char err[4400];
        if (!dir_writable(a.checkpoint, err, sizeof err)) {
            fprintf(stderr, "tgrad train: %s\n", err);
            goto out;
        }
    }
    int64_t V = 10, T = a.seq_len, B = a.batch;
    if (text) {
        char err[4400];
        if (!corpus_load(&corp, a.text, a.n_text, a.val_fraction, err, sizeof err)) {
            fprintf(stderr, "tgrad train: %s\n", err);
            goto out;
        }
        if (corp.n_train < T + 2 || (a.val_fraction > 0 && corp.n - corp.n_train < T + 2)) {
            fprintf(stderr, "tgrad train: text too short: %" PRId64 " bytes give %" PRId64
                    " for training and %" PRId64 " for validation; one window needs %" PRId64
                    " (lower --seq-len)\n", corp.n, corp.n_train, corp.n - corp.n_train, T + 2);
            goto out;
        }
        V = corp.vocab_size;
        if (ck) {
            const char *vh = tg_safetensors_meta_get(ck, "data.vocab");
            char mine[513];
            vocab_to_hex(corp.vocab, corp.vocab_size, mine);
            if (!vh || strcmp(vh, mine) != 0) {
                fprintf(stderr, "tgrad train: checkpoint '%s' was trained on text with a "
                        "different vocabulary; pass the same --text files\n", a.resume);
                goto out;
            }
        }
    }

    tg_ctx_seed(ctx, a.seed);
    if (a.threads)
        tg_ctx_set_threads(ctx, a.threads);
    tg_transformer_config mc;
    memset(&mc, 0, sizeof mc);
    mc.vocab_size = V;
    mc.max_seq_len = T;
    mc.n_layers = a.layers;
    mc.layer = tg_encoder_config_default(a.d_model, a.heads);
    mc.layer.d_ff = a.d_ff;
    mc.layer.norm_first = !a.post_norm;
    mc.layer.activation = strcmp(a.activation, "gelu") == 0 ? TG_ACT_GELU : TG_ACT_RELU;
    mc.layer.dropout = a.dropout;
    mc.pos = strcmp(a.pos, "sinusoidal") == 0 ? TG_POS_SINUSOIDAL : TG_POS_LEARNED;
    mc.causal = text;
    mc.tie_weights = a.tie;
    tg_transformer model;
    tg_optim_kind ok = !strcmp(a.optimizer, "sgd")    ? TG_OPTIM_SGD
                       : !strcmp(a.optimizer, "adam") ? TG_OPTIM_ADAM
                                                      : TG_OPTIM_ADAMW;
    tg_optim_config oc = tg_optim_defaults(ok);
    oc.lr = a.lr;
    oc.weight_decay = a.weight_decay;
    if (ok == TG_OPTIM_SGD)
        oc.momentum = a.momentum;
    tg_tensor *ids = NULL, *tgt = NULL, *logits = NULL, *loss = NULL;
    tg_graph *g = NULL;
    tg_optim *opt = NULL;
    if (tg_transformer_init(ctx, &model, a.dt, &mc) == TG_OK) {
        ids = tg_input(ctx, a.dt, TG_DIMS(B, T), "ids");
        tgt = tg_input(ctx, a.dt, TG_DIMS(B, T), "targets");
        logits = tg_transformer_forward(ctx, &model, ids, NULL);
        loss = tg_cross_entropy(ctx, logits, tgt, -1);
        tg_graph_opts go = {.share_gradients = true}; /* intermediate grads by liveness */
        g = tg_graph_new_opts(ctx, &loss, 1, &go);
        opt = tg_optim_new(ctx, &oc, 0, NULL);
    }
    if (!g || !opt) {
        fprintf(stderr, "tgrad train: building the model: %s\n", tg_ctx_message(ctx));
        goto out;
    }
    int64_t n_params = 0;
    for (int64_t i = 0; i < tg_ctx_n_params(ctx); i++)
        n_params += tg_tensor_numel(tg_ctx_param(ctx, i));
    int64_t start = 0;
    double best_val = INFINITY;
    if (ck) {
        if (tg_checkpoint_restore(ctx, ck, opt) != TG_OK) {
            fprintf(stderr, "tgrad train: checkpoint '%s' does not fit this model (a different "
                    "config?): %s\n", a.resume, tg_ctx_message(ctx));
            goto out;
        }
        start = tg_optim_steps(opt);
        const char *bv = tg_safetensors_meta_get(ck, "train.best_val");
        if (bv)
            best_val = strtod(bv, NULL);
        if (a.stop_after > 0 && a.stop_after <= start) {
            fprintf(stderr, "tgrad train: checkpoint is at step %" PRId64 " already; "
                    "--stop-after %" PRId64 " must be later\n", start, a.stop_after);
            goto out;
        }
        if (start >= a.steps) {
            fprintf(stderr, "tgrad train: checkpoint is at step %" PRId64 " already; "
                    "raise --steps (now %" PRId64 ")\n", start, a.steps);
            goto out;
        }
    }
    if (a.log) {
        logf = fopen(a.log, ck ? "a" : "w");
        if (!logf) {
            fprintf(stderr, "tgrad train: cannot write --log '%s': %s\n", a.log, strerror(errno));
            goto out;
        }
        if (!ck)
            fprintf(logf, "step,train_loss,val_loss,lr,tokens_per_s\n");
    }
    ids_buf = malloc(sizeof(float) * (size_t)(B * T));
    tgt_buf = malloc(sizeof(float) * (size_t)(B * T));
    curve = malloc(sizeof(double) * 3 * (size_t)a.steps);
    if (!ids_buf || !tgt_buf || !curve) {
        fprintf(stderr, "tgrad train: out of memory\n");
        goto out;
    }
    for (int64_t i = 0; i < 3 * a.steps; i++)
        curve[i] = NAN; /* train loss, val loss, unused */

    bool tty = isatty(2) && !a.quiet;
    if (!a.quiet) {
        if (text)
            fprintf(stderr, "tgrad train: byte-level LM on %d file%s, %" PRId64 " bytes (%" PRId64
                    " train, %" PRId64 " validation), vocabulary %d\n", corp.n_files,
                    corp.n_files == 1 ? "" : "s", corp.n, corp.n_train, corp.n - corp.n_train,
                    corp.vocab_size);
        else
            fprintf(stderr, "tgrad train: task '%s' on %" PRId64 "-digit sequences\n",
                    task_name(task), T);
        fprintf(stderr, "tgrad train: %" PRId64 " layers, d_model %" PRId64 ", %" PRId64
                " heads, d_ff %" PRId64 ", %s, %" PRId64 " parameters, batch %" PRId64
                ", %d threads%s\n", a.layers, a.d_model, a.heads, a.d_ff,
                a.post_norm ? "post-norm" : "pre-norm", n_params, B, tg_ctx_threads(ctx),
                ck ? ", resumed" : "");
    }

    g_interrupted = 0;
    signal(SIGINT, on_signal);
    signal(SIGTERM, on_signal);
    double t0 = now_s(), tok_s = 0, last_val = NAN, acc = NAN, last_draw = -1;
    int64_t step = start, trained = 0;
    uint64_t held_seed = a.seed ^ 0x5eed5eedULL;
    bool reached = false;
    int64_t end = a.stop_after > 0 && a.stop_after < a.steps ? a.stop_after : a.steps;
    int64_t print_every = a.steps / 20 > 0 ? a.steps / 20 : 1;
    for (; step < end; step++) {
        double lr = tg_lr_warmup_cosine(step, a.steps, a.warmup, a.lr, a.min_lr);
        if (text)
            corpus_train_batch(ctx, &corp, B, T, ids_buf, tgt_buf);
        else
            task_train_batch(ctx, task, B, T, ids_buf, tgt_buf);
        tg_tensor_set_data(ids, ids_buf, TG_F32, (size_t)(B * T));
        tg_tensor_set_data(tgt, tgt_buf, TG_F32, (size_t)(B * T));
        tg_ctx_set_training(ctx, true);
        tg_graph_zero_grad(g);
        if (tg_graph_forward(g) != TG_OK || tg_graph_backward(g, loss, NULL) != TG_OK) {
            fprintf(stderr, "tgrad train: step %" PRId64 ": %s\n", step + 1, tg_ctx_message(ctx));
            goto out;
        }
        double l = tg_get(loss, 0), norm = 0;
        tg_status s = TG_OK;
        if (a.clip > 0)
            s = tg_clip_grad_norm(ctx, 0, NULL, a.clip, &norm);
        if (s == TG_OK)
            s = tg_optim_step(opt, lr);
        if (s != TG_OK || !isfinite(l)) {
            fprintf(stderr, "tgrad train: step %" PRId64 ": non-finite loss or gradients (%s); "
                    "parameters left unchanged, stopping\n", step + 1,
                    isfinite(l) ? tg_ctx_message(ctx) : "loss is not finite");
            tg_ctx_clear_error(ctx);
            goto out;
        }
        trained++;
        curve[3 * step] = l;
        double el = now_s() - t0;
        tok_s = (double)(trained * B * T) / (el > 0 ? el : 1e-9);
        bool last = step + 1 == end || g_interrupted;
        bool eval = (step + 1) % a.eval_every == 0 || last;
        double val = NAN;
        if (eval) {
            tg_ctx_set_training(ctx, false);
            if (text) {
                double sum = 0;
                int64_t nb = corpus_val_batches(&corp, B, T), tokens = 0;
                for (int64_t k = 0; k < nb; k++) {
                    int64_t w = corpus_val_batch(&corp, k, B, T, ids_buf, tgt_buf);
                    tg_tensor_set_data(ids, ids_buf, TG_F32, (size_t)(B * T));
                    tg_tensor_set_data(tgt, tgt_buf, TG_F32, (size_t)(B * T));
                    tg_graph_forward(g);
                    sum += tg_get(loss, 0) * (double)(w * T);
                    tokens += w * T;
                }
                if (tokens)
                    val = sum / (double)tokens;
            } else {
                /* held-out accuracy over 8 fixed batches of unseen random sequences */
                uint64_t rs = held_seed;
                int64_t correct = 0, total = 0;
                double sum = 0;
                for (int k = 0; k < 8; k++) {
                    task_batch(task, &rs, B, T, ids_buf, tgt_buf);
                    tg_tensor_set_data(ids, ids_buf, TG_F32, (size_t)(B * T));
                    tg_tensor_set_data(tgt, tgt_buf, TG_F32, (size_t)(B * T));
                    tg_graph_forward(g);
                    sum += tg_get(loss, 0);
                    for (int64_t r = 0; r < B * T; r++) {
                        int64_t arg = 0;
                        double bestv = -INFINITY;
                        for (int64_t v = 0; v < V; v++) {
                            double x = tg_get(logits, r * V + v);
                            if (x > bestv) {
                                bestv = x;
                                arg = v;
                            }
                        }
                        correct += arg == (int64_t)tgt_buf[r];
                        total++;
                    }
                }
                val = sum / 8;
                acc = (double)correct / (double)total;
                if (acc >= a.target_acc && a.target_acc > 0)
                    reached = true;
            }
            tg_ctx_set_training(ctx, true);
            last_val = val;
            curve[3 * step + 1] = val;
            if (val < best_val)
                best_val = val;
        }
        if (logf) {
            if (eval)
                fprintf(logf, "%" PRId64 ",%.6f,%.6f,%.6g,%.1f\n", step + 1, l, val, lr, tok_s);
            else
                fprintf(logf, "%" PRId64 ",%.6f,,%.6g,%.1f\n", step + 1, l, lr, tok_s);
        }
        bool stop = reached || last;
        if (a.checkpoint && (eval || stop)) {
            meta m;
            m.n = 0;
            meta_add(&m, "format", "tgrad-checkpoint-1");
            meta_add(&m, "model.layers", "%" PRId64, a.layers);
            meta_add(&m, "model.d_model", "%" PRId64, a.d_model);
            meta_add(&m, "model.heads", "%" PRId64, a.heads);
            meta_add(&m, "model.d_ff", "%" PRId64, a.d_ff);
            meta_add(&m, "model.seq_len", "%" PRId64, T);
            meta_add(&m, "model.vocab_size", "%" PRId64, V);
            meta_add(&m, "model.norm_first", "%d", a.post_norm ? 0 : 1);
            meta_add(&m, "model.activation", "%s", a.activation);
            meta_add(&m, "model.pos", "%s", a.pos);
            meta_add(&m, "model.causal", "%d", text ? 1 : 0);
            meta_add(&m, "model.tie_weights", "%d", a.tie ? 1 : 0);
            meta_add(&m, "model.dropout", "%.17g", a.dropout);
            meta_add(&m, "model.dtype", "%s", tg_dtype_str(a.dt));
            meta_add(&m, "data.mode", "%s", text ? "text" : "task");
            if (text) {
                char hex[513];
                vocab_to_hex(corp.vocab, corp.vocab_size, hex);
                meta_add(&m, "data.vocab", "%s", hex);
                meta_add(&m, "data.bytes", "%" PRId64, corp.n);
            } else {
                meta_add(&m, "data.task", "%s", task_name(task));
            }
            meta_add(&m, "data.position", "%" PRId64, (step + 1) * B);
            meta_add(&m, "train.steps", "%" PRId64, a.steps);
            meta_add(&m, "train.best_val", "%.17g", best_val);
            meta_add(&m, "train.seed", "%" PRIu64, a.seed);
            meta_add(&m, "train.optimizer", "%s", a.optimizer);
            meta_add(&m, "train.batch", "%" PRId64, B);
            meta_add(&m, "train.warmup", "%" PRId64, a.warmup);
            meta_add(&m, "train.eval_every", "%" PRId64, a.eval_every);
            meta_add(&m, "train.lr", "%.17g", a.lr);
            meta_add(&m, "train.min_lr", "%.17g", a.min_lr);
            meta_add(&m, "train.weight_decay", "%.17g", a.weight_decay);
            meta_add(&m, "train.clip", "%.17g", a.clip);
            meta_add(&m, "train.momentum", "%.17g", a.momentum);
            meta_add(&m, "data.val_fraction", "%.17g", a.val_fraction);
            meta_add(&m, "train.target_acc", "%.17g", a.target_acc);
            const char *keys[40], *vals[40];
            for (int i = 0; i < m.n; i++) {
                keys[i] = m.key[i];
                vals[i] = m.val[i];
            }
            if (tg_checkpoint_save(ctx, a.checkpoint, opt, m.n, keys, vals, NULL) != TG_OK) {
                fprintf(stderr, "\ntgrad train: saving checkpoint: %s (previous checkpoint "
                        "kept)\n", tg_ctx_message(ctx));
                goto out;
            }
        }
        bool redraw = tty && el - last_draw >= 0.1; /* live line: at most 10 updates/s */
        if (!a.quiet && (redraw || (step + 1) % print_every == 0 || eval || stop)) {
            last_draw = el;
            char el_s[32], eta_s[32];
            fmt_time(el, el_s, sizeof el_s);
            fmt_time(el / (double)trained * (double)(end - step - 1), eta_s, sizeof eta_s);
            char vbuf[64] = "-";
            if (text && last_val == last_val)
                snprintf(vbuf, sizeof vbuf, "%.4f", last_val);
            else if (!text && acc == acc)
                snprintf(vbuf, sizeof vbuf, "%.4f acc %.2f%%", last_val, 100 * acc);
            if (tty && !(eval || stop))
                fprintf(stderr, "\rstep %" PRId64 "/%" PRId64 "  loss %.4f  val %s  %.0f tok/s  "
                        "%s elapsed  ETA %s   ", step + 1, a.steps, l, vbuf, tok_s, el_s, eta_s);
            else if (!tty || eval || stop)
                fprintf(stderr, "%sstep %" PRId64 "/%" PRId64 "  loss %.4f  val %s  lr %.2e  "
                        "%.0f tok/s  %s elapsed  ETA %s\n", tty ? "\r" : "", step + 1, a.steps,
                        l, vbuf, lr, tok_s, el_s, eta_s);
        }
        if (stop) {
            step++;
            break;
        }
    }
    double wall = now_s() - t0;
    if (a.plot) {
        if (svg_loss_plot(a.plot, curve, step, text ? "validation loss" : "held-out loss") != 0) {
            fprintf(stderr, "tgrad train: cannot write --plot '%s': %s\n", a.plot,
                    strerror(errno));
            goto out;
        }
    }
    printf("parameters %" PRId64 "  steps %" PRId64 "  wall %.1f s  %.0f tokens/s",
           n_params, step, wall, tok_s);
    if (text)
        printf("  validation loss %.4f nats/char (best %.4f)\n", last_val, best_val);
    else
        printf("  held-out token accuracy %.2f%%%s\n", 100 * acc,
               reached ? "" : " (target not reached)");
    if (a.checkpoint)
        printf("checkpoint %s\n", a.checkpoint);
    rc = (!text && a.target_acc > 0 && !reached && step == a.steps) ? 3 : 0;
    if (g_interrupted) {
        fprintf(stderr, "tgrad train: interrupted at step %" PRId64 "%s\n", step,
                a.checkpoint ? "; resume with --resume" : "");
        rc = 130;
    }
    if (rc == 3)
        fprintf(stderr, "tgrad train: accuracy target %.2f%% not reached in %" PRId64 " steps\n",
                100 * a.target_acc, a.steps);
out:
    signal(SIGINT, SIG_DFL);
    signal(SIGTERM, SIG_DFL);
    if (logf && fclose(logf) != 0 && rc == 0) {
        fprintf(stderr, "tgrad train: writing --log failed\n");
        rc = 1;
    }
    free(ids_buf);
    free(tgt_buf);
    free(curve);
    corpus_free(&corp);
    tg_ctx_free(ctx);
    return rc;
}
