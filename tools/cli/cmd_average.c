/*
 * cmd_average.c - `tgrad average --out OUT CK1 CK2 ... CKn`: the element-wise mean of the
 * parameters of n checkpoints of one model (checkpoint averaging: Vaswani et al. 2017, sec.
 * 6.1; fairseq's scripts/average_checkpoints.py), written as a checkpoint that translates,
 * samples and exports like the others but holds no optimizer state.
 *
 * Each input is read and validated exactly as every command validates a checkpoint
 * (ckpt_config_check: every field, the tokenizer as translate loads it, the tensors against
 * the config, the optimizer state complete and finite), and its parameters must be finite.
 * All inputs describe the same model and tokenizer: the same model.* fields (the dropout
 * probabilities aside: they do not change what the parameters compute), data.mode, the
 * vocabulary (data.vocab, data.task) and tokenizer.* fields; so the same parameter names,
 * shapes and dtypes. An average of checkpoints is not an input (average its checkpoints).
 *
 * The mean: for every element, x_1 + ... + x_n summed in double precision in the order the
 * files are given, divided by n, rounded once to the parameter dtype (f32 or f64). One loop on
 * one thread: the result depends on the files and their order only.
 *
 * The output: the parameters under their names in tg_transformer_params() order, and the
 * metadata of the newest input (the highest optim.step; the last given among equals: model,
 * tokenizer, data and training fields, optim.step, rng) followed by average.n (n) and
 * average.steps (the inputs' optim.step in the order given, comma-separated). average.n marks
 * a checkpoint without optimizer state: `tgrad train --resume` refuses it, the other commands
 * accept it (ckpt_config.c). OUT follows the rule of every output (outpath.h).
 */
#define _POSIX_C_SOURCE 200809L
#include "ckpt_config.h"
#include "cli.h"
#include "climsg.h"
#include "outpath.h"
#include "tgrad_io.h"
#include "train_args.h"

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- parse ---------------------------------------------------------------------------------- */
static const cli_option average_opts[] = {
    {.name = "out",
     .kind = CLI_PATH,
     .offset = offsetof(average_args, out),
     .metavar = "OUT",
     .help = "the checkpoint to write (never one of the inputs)",
     .flags = CLI_REQUIRED},
    {.name = "force",
     .kind = CLI_FLAG,
     .offset = offsetof(average_args, force),
     .help = "replace --out if it exists (a regular file only)"},
    {0},
};

static const cli_command average_cmd = {
    .name = "average",
    .usage = "--out OUT [--force] CK...",
    .description =
        "Writes the element-wise mean of the parameters of the checkpoints CK... (of\n"
        "'tgrad train', of one model and tokenizer) as checkpoint OUT: summed in double\n"
        "precision in the order given, divided by their number, rounded once to the\n"
        "parameter dtype. OUT holds the parameters only (no optimizer state) and the\n"
        "metadata of the newest input, plus average.n and average.steps (the inputs'\n"
        "steps): 'tgrad translate', 'sample', 'export' and 'info' take it, 'tgrad train\n"
        "--resume' refuses it. 'tgrad train --keep-last N' keeps the last N checkpoints\n"
        "of a run (CK.stepS.ckpt) to average. See docs/cli.md, 'tgrad average'.\n"
        "\n"
        "Exit status: 0; 2 for a usage error (options, an existing OUT without --force,\n"
        "OUT naming an input, a file given twice, inputs of different models or\n"
        "tokenizers, an input that is itself an average); 1 for a run-time failure (a\n"
        "file missing, corrupt or not a checkpoint, non-finite parameters, OUT\n"
        "unwritable).",
    .opts = average_opts,
    .positional = "CK...",
    .min_positional = 1,
    .max_positional = CKPT_AVERAGE_MAX,
};

int average_parse(int argc, char **argv, average_args *a, cli_result *r, char *err, size_t n)
{
    memset(a, 0, sizeof *a);
    return cli_parse(&average_cmd, argc, argv, a, r, err, n);
}

void average_free(average_args *a, cli_result *r) { cli_free(&average_cmd, a, r); }

/* ---- run ------------------------------------------------------------------------------------ */
/* A copy of a file's metadata. */
typedef struct meta_copy {
    int64_t n;
    char **keys, **values;
} meta_copy;

typedef struct avg_run {
    const char *out;
    const char *const *in; /* the n inputs */
    int n;
    tg_transformer_config mc; /* the model (the first input's) */
    tg_dtype dt;
    tg_param_info *ps; /* its parameters */
    int64_t np;
    double **acc;     /* acc[j]: the running sum of parameter j's elements */
    int64_t *steps;   /* each input's optim.step */
    int newest;       /* the input with the highest step (the last among equals) */
    meta_copy first;  /* the first input's metadata (what the others must match) */
    meta_copy latest; /* the newest input's (the output's) */
} avg_run;

static void meta_free(meta_copy *m)
{
    for (int64_t i = 0; i < m->n; i++) {
        free(m->keys[i]);
        free(m->values[i]);
    }
    free(m->keys);
    free(m->values);
    memset(m, 0, sizeof *m);
}

static bool meta_take(meta_copy *m, const tg_safetensors *st)
{
    meta_free(m);
    int64_t n = tg_safetensors_meta_count(st);
    m->keys = calloc((size_t)n + 1, sizeof *m->keys);
    m->values = calloc((size_t)n + 1, sizeof *m->values);
    if (!m->keys || !m->values)
        return false;
    for (m->n = 0; m->n < n; m->n++) {
        m->keys[m->n] = strdup(tg_safetensors_meta_key(st, m->n));
        m->values[m->n] = strdup(tg_safetensors_meta_value(st, m->n));
        if (!m->keys[m->n] || !m->values[m->n])
            return m->n++, false;
    }
    return true;
}

static const char *meta_find(const meta_copy *m, const char *key)
{
    for (int64_t i = 0; i < m->n; i++)
        if (!strcmp(m->keys[i], key))
            return m->values[i];
    return NULL;
}

/* Does metadata key @p key say what the parameters are and how ids map to text? The model's
 * fields but its dropout probabilities, the data's kind and vocabulary, the tokenizer. */
static bool identity_key(const char *key)
{
    static const char *const dropouts[] = {"model.dropout", "model.attn_dropout",
                                           "model.act_dropout"};
    for (size_t i = 0; i < sizeof dropouts / sizeof dropouts[0]; i++)
        if (!strcmp(key, dropouts[i]))
            return false;
    return !strncmp(key, "model.", 6) || !strncmp(key, "tokenizer.", 10) ||
           !strcmp(key, "data.mode") || !strcmp(key, "data.vocab") || !strcmp(key, "data.task");
}

/* The first identity field on which input @p i's metadata @p st and the first input's differ:
 * one line in @p err (a tokenizer's model is not shown, only named). */
static bool same_model(const avg_run *r, int i, const tg_safetensors *st, char *err, size_t n)
{
    char s1[80], s2[80], s3[80];
    for (int pass = 0; pass < 2; pass++) {
        int64_t count = pass ? r->first.n : tg_safetensors_meta_count(st);
        for (int64_t k = 0; k < count; k++) {
            const char *key = pass ? r->first.keys[k] : tg_safetensors_meta_key(st, k);
            if (!identity_key(key))
                continue;
            const char *v0 = meta_find(&r->first, key), *v = tg_safetensors_meta_get(st, key);
            if (v0 && v && !strcmp(v0, v))
                continue;
            const char *what = !strncmp(key, "tokenizer.", 10) ? "tokenizers" : "models";
            if (v0 && v && !strcmp(key, "tokenizer.model"))
                snprintf(err, n,
                         "'%s' and '%s' have different %s: their tokenizer.model "
                         "differs",
                         r->in[i], r->in[0], what);
            else
                snprintf(err, n,
                         "'%s' and '%s' have different %s: %s is %s%s%s in '%s' and "
                         "%s%s%s in '%s'",
                         r->in[i], r->in[0], what, cli_show(key, s1, 80), v ? "'" : "",
                         v ? cli_show(v, s2, 80) : "absent", v ? "'" : "", r->in[i], v0 ? "'" : "",
                         v0 ? cli_show(v0, s3, 80) : "absent", v0 ? "'" : "", r->in[0]);
            return false;
        }
    }
    return true;
}

/* The first input: the model and its parameter list, the sums (zero). */
static bool avg_setup(avg_run *r, const tg_transformer_config *mc, const train_args *ta)
{
    r->mc = *mc;
    r->dt = train_dtype(ta);
    r->np = tg_transformer_params(mc, NULL, 0);
    r->ps = calloc((size_t)r->np, sizeof *r->ps);
    r->acc = calloc((size_t)r->np, sizeof *r->acc);
    if (!r->ps || !r->acc)
        return false;
    tg_transformer_params(mc, r->ps, r->np);
    for (int64_t j = 0; j < r->np; j++) {
        int64_t numel = r->ps[j].shape[0] * (r->ps[j].rank > 1 ? r->ps[j].shape[1] : 1);
        if (!(r->acc[j] = calloc((size_t)numel, sizeof **r->acc)))
            return false;
    }
    return true;
}

/* Add input @p i's parameters (validated: present, shaped and typed as the model's) to the
 * sums; a non-finite element is refused (one line in @p err). */
static bool accumulate(avg_run *r, int i, const tg_safetensors *st, char *err, size_t n)
{
    for (int64_t j = 0; j < r->np; j++) {
        tg_tensor *t = tg_safetensors_find(st, r->ps[j].name);
        int64_t numel = tg_tensor_numel(t);
        const float *f = r->dt == TG_F32 ? tg_tensor_data(t) : NULL;
        const double *d = r->dt == TG_F64 ? tg_tensor_data(t) : NULL;
        double *acc = r->acc[j];
        for (int64_t k = 0; k < numel; k++) {
            double x = f ? (double)f[k] : d[k];
            if (!isfinite(x)) {
                snprintf(err, n,
                         "'%s': parameter '%s' element %" PRId64 " is %g (a checkpoint "
                         "to average holds finite parameters)",
                         r->in[i], r->ps[j].name, k, x);
                return false;
            }
            acc[k] += x;
        }
    }
    return true;
}

/* Read, validate and add input @p i. Returns 0, or the exit status with one line in @p err. */
static int avg_input(avg_run *r, int i, char *err, size_t n)
{
    char e[1400];
    if (!cli_regular_file(r->in[i], e, sizeof e))
        return snprintf(err, n, "%s", e), 1;
    tg_ctx *ctx = tg_ctx_new();
    if (!ctx)
        return snprintf(err, n, "out of memory"), 1;
    int rc = 1;
    tg_safetensors *st = tg_safetensors_read(ctx, r->in[i]);
    train_args ta;
    train_defaults(&ta);
    ckpt_info info;
    tg_transformer_config mc;
    const char *format = st ? tg_safetensors_meta_get(st, "format") : NULL;
    if (!st) {
        cli_format(NULL, r->in[i], ctx, err, n);
    } else if (!format || strncmp(format, "tgrad-checkpoint", 16) != 0) {
        snprintf(err, n,
                 "'%s': not a checkpoint of 'tgrad train' (its metadata has no "
                 "format 'tgrad-checkpoint-1')",
                 r->in[i]);
    } else if (!ckpt_config_check(st, &ta, &info, &mc, e, sizeof e)) {
        snprintf(err, n, "'%s': %s", r->in[i], e);
    } else if (info.average_n > 0) {
        snprintf(err, n,
                 "'%s' is itself an average of %" PRId64 " checkpoints (average.n): "
                 "average the checkpoints it was made from",
                 r->in[i], info.average_n);
        rc = 2;
    } else if (i == 0 && (!avg_setup(r, &mc, &ta) || !meta_take(&r->first, st))) {
        snprintf(err, n, "out of memory");
    } else if (i > 0 && !same_model(r, i, st, err, n)) {
        rc = 2;
    } else if (accumulate(r, i, st, err, n)) {
        r->steps[i] = info.step;
        rc = 0;
        if (i == 0 || info.step >= r->steps[r->newest]) {
            r->newest = i;
            if (!meta_take(&r->latest, st))
                rc = (snprintf(err, n, "out of memory"), 1);
        }
    }
    tg_ctx_free(ctx);
    return rc;
}

/* OUT: absent, or (with --force) a regular file, never an input; no input given twice.
 * Returns 0, or the exit status with one line in @p err. */
static int check_files(const avg_run *r, bool force, char *err, size_t n)
{
    for (int i = 0; i < r->n; i++) {
        if (!outpath_not_input("--out", r->out, "checkpoint", r->in[i], err, n))
            return 2; /* a usage error, even with --force */
        for (int k = 0; k < i; k++)
            if (cli_same_file(r->in[k], r->in[i])) {
                snprintf(err, n,
                         "'%s' is given twice (as '%s' too): each checkpoint is "
                         "averaged once",
                         r->in[i], r->in[k]);
                return 2;
            }
    }
    bool exists;
    outpath_status os = outpath_check("--out", r->out, force, &exists, err, n);
    return (int)os;
}

/* The means, rounded once to the dtype, and OUT written with the newest input's metadata,
 * average.n and average.steps. Returns 0, or 1 with one line in @p err. */
static int avg_write(avg_run *r, char *err, size_t n)
{
    size_t es = r->dt == TG_F64 ? sizeof(double) : sizeof(float);
    tg_io_item *items = calloc((size_t)r->np, sizeof *items);
    void **out = calloc((size_t)r->np, sizeof *out);
    char **keys = calloc((size_t)r->latest.n + 2, sizeof *keys);
    char **vals = calloc((size_t)r->latest.n + 2, sizeof *vals);
    char *steps = calloc((size_t)r->n, 24), count[24];
    tg_ctx *ctx = tg_ctx_new();
    int rc = 1;
    if (!items || !out || !keys || !vals || !steps || !ctx) {
        snprintf(err, n, "out of memory");
        goto done;
    }
    for (int64_t j = 0; j < r->np; j++) {
        const tg_param_info *p = &r->ps[j];
        int64_t numel = p->shape[0] * (p->rank > 1 ? p->shape[1] : 1);
        if (!(out[j] = malloc((size_t)numel * es))) {
            snprintf(err, n, "out of memory");
            goto done;
        }
        for (int64_t k = 0; k < numel; k++) {
            double mean = r->acc[j][k] / r->n;
            if (r->dt == TG_F64)
                ((double *)out[j])[k] = mean;
            else
                ((float *)out[j])[k] = (float)mean;
        }
        items[j] = (tg_io_item){p->name, r->dt, p->rank, p->shape, out[j]};
    }
    for (int64_t i = 0; i < r->latest.n; i++) {
        keys[i] = r->latest.keys[i];
        vals[i] = r->latest.values[i];
    }
    size_t w = 0;
    for (int i = 0; i < r->n; i++)
        w += (size_t)sprintf(steps + w, "%s%" PRId64, i ? "," : "", r->steps[i]);
    snprintf(count, sizeof count, "%d", r->n);
    keys[r->latest.n] = "average.n";
    vals[r->latest.n] = count;
    keys[r->latest.n + 1] = "average.steps";
    vals[r->latest.n + 1] = steps;
    if (tg_safetensors_write_items(ctx, r->out, r->np, items, r->latest.n + 2,
                                   (const char *const *)keys, (const char *const *)vals,
                                   NULL) != TG_OK)
        cli_format("--out", r->out, ctx, err, n);
    else
        rc = 0;
done:
    for (int64_t j = 0; out && j < r->np; j++)
        free(out[j]);
    free(out);
    free(items);
    free(keys);
    free(vals);
    free(steps);
    tg_ctx_free(ctx);
    return rc;
}

static void avg_free(avg_run *r)
{
    for (int64_t j = 0; r->acc && j < r->np; j++)
        free(r->acc[j]);
    free(r->acc);
    free(r->ps);
    free(r->steps);
    meta_free(&r->first);
    meta_free(&r->latest);
}

static int average_exec(avg_run *r, bool force, char *err, size_t n)
{
    int rc = check_files(r, force, err, n);
    if (rc)
        return rc;
    if (!(r->steps = calloc((size_t)r->n, sizeof *r->steps)))
        return snprintf(err, n, "out of memory"), 1;
    for (int i = 0; i < r->n && !rc; i++)
        rc = avg_input(r, i, err, n);
    return rc ? rc : avg_write(r, err, n);
}

/* ---- report --------------------------------------------------------------------------------- */
int cmd_average(int argc, char **argv)
{
    average_args a;
    cli_result res;
    char err[1600];
    int ex =
        cli_parse_exit(average_parse(argc, argv, &a, &res, err, sizeof err), &average_cmd, err);
    if (ex >= 0) {
        average_free(&a, &res);
        return ex;
    }
    avg_run r = {.out = a.out, .in = res.positional, .n = res.n_positional};
    int rc = average_exec(&r, a.force, err, sizeof err);
    if (rc) {
        fprintf(stderr, "tgrad average: %s\n", err);
    } else {
        printf("averaged %d checkpoint%s (steps ", r.n, r.n == 1 ? "" : "s");
        for (int i = 0; i < r.n; i++)
            printf("%s%" PRId64, i ? ", " : "", r.steps[i]);
        printf("; %" PRId64 " parameter tensors) into '%s'\n", r.np, r.out);
        if (fflush(stdout) != 0 || ferror(stdout)) {
            fprintf(stderr, "tgrad average: writing the report failed\n");
            rc = 1;
        }
    }
    avg_free(&r);
    average_free(&a, &res);
    return rc;
}
