/*
 * cmd_export.c - `tgrad export --checkpoint CK --out model.safetensors [--force]`: a trained
 * model as a safetensors file PyTorch loads directly.
 *
 * The file holds the model's parameters only (no optimizer state, step or RNG) under the
 * `state_dict` names of the reference model class in tools/train_reference.py (`LM`), which are
 * the names tgrad gives them:
 *   tok_emb.weight (V, D)        pos_emb.weight (T, D)   (learned positions only)
 *   layers.<i>.self_attn.in_proj_weight (3D, D)   .self_attn.in_proj_bias (3D)
 *   layers.<i>.self_attn.out_proj.weight (D, D)   .self_attn.out_proj.bias (D)
 *   layers.<i>.linear1.weight (F, D)  .linear1.bias (F)  .linear2.weight (D, F)  .linear2.bias (D)
 *   layers.<i>.norm1.weight (D)  .norm1.bias (D)  .norm2.weight (D)  .norm2.bias (D)
 *   norm.weight (D)  norm.bias (D)  head.weight (V, D)  head.bias (V)
 * With tied weights head.weight is written too (a copy of tok_emb.weight), because PyTorch's
 * state_dict of a tied model lists both keys. Values keep the checkpoint's dtype.
 * Metadata (safetensors `__metadata__`, all strings):
 *   format         "tgrad-export-1"
 *   config         JSON object: the keyword arguments of LM(...) (vocab_size, max_seq_len,
 *                  n_layers, d_model, n_heads, d_ff, activation, norm_first, pos, causal,
 *                  tie_weights, layer_norm_eps, dropout) and dtype ("float32" | "float64")
 *   vocab          JSON array of V integers: element i is the byte token id i stands for
 *                  (text models: the corpus's distinct bytes, sorted; built-in tasks: the
 *                  digits '0'..'9', i.e. 48..57)
 *   data           "text" or "task:<name>"
 *   step           optimizer steps taken by the checkpoint
 *   tgrad_version  TGRAD_VERSION_STRING of the exporting program
 * Every value read from the checkpoint is validated (metadata like the command line's options,
 * each tensor's shape against the config) before anything is written; --out is never replaced
 * without --force, and never if it is not a regular file or is the checkpoint itself.
 */
#define _POSIX_C_SOURCE 200809L
#include "cli.h"
#include "climsg.h"
#include "tgrad_io.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

/* ---- parse ---------------------------------------------------------------------------------- */
static const cli_option export_opts[] = {
    {.name = "checkpoint", .kind = CLI_PATH, .offset = offsetof(export_args, checkpoint),
     .metavar = "CK", .help = "a checkpoint written by 'tgrad train'", .flags = CLI_REQUIRED},
    {.name = "out", .kind = CLI_PATH, .offset = offsetof(export_args, out),
     .metavar = "FILE", .help = "the safetensors file to write", .flags = CLI_REQUIRED},
    {.name = "force", .kind = CLI_FLAG, .offset = offsetof(export_args, force),
     .help = "replace --out if it exists (a regular file only)"},
    {0},
};

static const cli_command export_cmd = {
    .name = "export",
    .usage = "--checkpoint CK --out FILE [--force]",
    .description =
        "Writes the model of a 'tgrad train' checkpoint as a safetensors file that PyTorch\n"
        "loads with load_state_dict(..., strict=True) into the LM class of\n"
        "tools/train_reference.py: the parameters only (no optimizer state) under their\n"
        "PyTorch state_dict names, with the model config (metadata 'config', JSON: LM's\n"
        "keyword arguments) and the vocabulary (metadata 'vocab', JSON: the byte of each\n"
        "token id). See README, 'Exporting to PyTorch'.",
    .opts = export_opts,
};

int export_parse(int argc, char **argv, export_args *a, cli_result *r, char *err, size_t n)
{
    memset(a, 0, sizeof *a);
    int rc = cli_parse(&export_cmd, argc, argv, a, r, err, n);
    if (rc == CLI_OK && !strcmp(a->checkpoint, a->out)) {
        char sh[80];
        snprintf(err, n, "--out '%s' is the checkpoint itself (choose another file)",
                 cli_show(a->out, sh, sizeof sh));
        return CLI_ERROR;
    }
    return rc;
}

void export_free(export_args *a, cli_result *r) { cli_free(&export_cmd, a, r); }

void export_help(FILE *f) { cli_help(&export_cmd, f); }

/* ---- the checkpoint's model config, validated like command-line options ---------------------- */
#define CK_MAX_LAYERS 1024
#define CK_MAX_DIM 65536
#define CK_MAX_FF 1048576
#define CK_MAX_SEQ 1048576

typedef struct {
    int64_t layers, d_model, heads, d_ff, seq_len, vocab_size, step;
    bool norm_first, causal, tie;
    int activation; /* relu|gelu */
    int pos;        /* learned|sinusoidal */
    int dtype;      /* f32|f64 */
    int mode;       /* text|task */
    int task;       /* copy|reverse|sort */
    double dropout;
} ck_config;

enum { F_REQUIRED = 1u << 8 }; /* (in cli_option.flags, beyond cliopt's own bits) */

static const cli_option ck_fields[] = {
    {.name = "model.layers", .kind = CLI_INT, .offset = offsetof(ck_config, layers),
     .imin = 0, .imax = CK_MAX_LAYERS, .flags = F_REQUIRED},
    {.name = "model.d_model", .kind = CLI_INT, .offset = offsetof(ck_config, d_model),
     .imin = 1, .imax = CK_MAX_DIM, .flags = F_REQUIRED},
    {.name = "model.heads", .kind = CLI_INT, .offset = offsetof(ck_config, heads), .imin = 1,
     .imax = CLI_MAX_HEADS, .flags = F_REQUIRED},
    {.name = "model.d_ff", .kind = CLI_INT, .offset = offsetof(ck_config, d_ff), .imin = 1,
     .imax = CK_MAX_FF, .flags = F_REQUIRED},
    {.name = "model.seq_len", .kind = CLI_INT, .offset = offsetof(ck_config, seq_len),
     .imin = 1, .imax = CK_MAX_SEQ, .flags = F_REQUIRED},
    {.name = "model.vocab_size", .kind = CLI_INT, .offset = offsetof(ck_config, vocab_size),
     .imin = 1, .imax = 256, .flags = F_REQUIRED},
    {.name = "model.norm_first", .kind = CLI_FLAG, .offset = offsetof(ck_config, norm_first),
     .flags = F_REQUIRED},
    {.name = "model.activation", .kind = CLI_CHOICE, .offset = offsetof(ck_config, activation),
     .choices = "relu|gelu", .flags = F_REQUIRED},
    {.name = "model.pos", .kind = CLI_CHOICE, .offset = offsetof(ck_config, pos),
     .choices = "learned|sinusoidal", .flags = F_REQUIRED},
    {.name = "model.causal", .kind = CLI_FLAG, .offset = offsetof(ck_config, causal),
     .flags = F_REQUIRED},
    {.name = "model.tie_weights", .kind = CLI_FLAG, .offset = offsetof(ck_config, tie)},
    {.name = "model.dropout", .kind = CLI_NUM, .offset = offsetof(ck_config, dropout),
     .fmin = 0, .fmax = 1, .flags = CLI_FMAX_OPEN},
    {.name = "model.dtype", .kind = CLI_CHOICE, .offset = offsetof(ck_config, dtype),
     .choices = "f32|f64"},
    {.name = "data.mode", .kind = CLI_CHOICE, .offset = offsetof(ck_config, mode),
     .choices = "text|task", .flags = F_REQUIRED},
    {.name = "optim.step", .kind = CLI_INT, .offset = offsetof(ck_config, step), .imin = 0,
     .imax = INT64_MAX, .flags = F_REQUIRED},
    {0},
};

static const cli_command ck_cmd = {.name = "export", .opts = ck_fields};

static const char *const task_names[] = {"copy", "reverse", "sort"};

static bool hexval(char c, unsigned *v)
{
    if (c >= '0' && c <= '9')
        *v = (unsigned)(c - '0');
    else if (c >= 'a' && c <= 'f')
        *v = (unsigned)(c - 'a' + 10);
    else if (c >= 'A' && c <= 'F')
        *v = (unsigned)(c - 'A' + 10);
    else
        return false;
    return true;
}

/* Read and validate the config and vocabulary (vocab[i] = byte of token i). */
static bool read_config(const tg_safetensors *st, const char *path, ck_config *c,
                        unsigned char *vocab, char *err, size_t n)
{
    memset(c, 0, sizeof *c);
    char sh[80]; /* a value from the file, quoted as one short printable line */
    const char *format = tg_safetensors_meta_get(st, "format");
    if (!format || strcmp(format, "tgrad-checkpoint-1") != 0) {
        if (format)
            snprintf(err, n, "--checkpoint '%s': format '%s' is not a tgrad checkpoint "
                     "(expected 'tgrad-checkpoint-1')", path, cli_show(format, sh, sizeof sh));
        else
            snprintf(err, n, "--checkpoint '%s': not a tgrad checkpoint (no 'format' metadata; "
                     "checkpoints are written by 'tgrad train --checkpoint')", path);
        return false;
    }
    char src[96], e[512];
    for (const cli_option *o = ck_fields; o->name; o++) {
        const char *v = tg_safetensors_meta_get(st, o->name);
        if (!v) {
            if (!(o->flags & F_REQUIRED))
                continue;
            snprintf(err, n, "--checkpoint '%s': metadata field '%s' is missing", path, o->name);
            return false;
        }
        snprintf(src, sizeof src, "metadata field '%s'", o->name);
        if (!cli_set(&ck_cmd, o, v, c, src, e, sizeof e)) {
            snprintf(err, n, "--checkpoint '%s': %s", path, e);
            return false;
        }
    }
    if (c->d_model % c->heads != 0) {
        snprintf(err, n, "--checkpoint '%s': metadata field 'model.heads' %" PRId64 " does not "
                 "divide 'model.d_model' %" PRId64, path, c->heads, c->d_model);
        return false;
    }
    if (c->mode == 0) { /* text: the vocabulary as hex, sorted distinct bytes */
        const char *hex = tg_safetensors_meta_get(st, "data.vocab");
        size_t len = hex ? strlen(hex) : 0;
        if (!hex || len != 2 * (size_t)c->vocab_size) {
            snprintf(err, n, "--checkpoint '%s': metadata field 'data.vocab' must hold %" PRId64
                     " bytes as hex (%" PRId64 " digits), got %s%zu digits", path,
                     c->vocab_size, 2 * c->vocab_size, hex ? "" : "none: ", len);
            return false;
        }
        for (int64_t i = 0; i < c->vocab_size; i++) {
            unsigned hi, lo;
            if (!hexval(hex[2 * i], &hi) || !hexval(hex[2 * i + 1], &lo)) {
                char two[3] = {hex[2 * i], hex[2 * i + 1], 0};
                snprintf(err, n, "--checkpoint '%s': metadata field 'data.vocab' has '%s' at "
                         "digit %" PRId64 " (expected hex digits)", path,
                         cli_show(two, sh, sizeof sh), 2 * i);
                return false;
            }
            vocab[i] = (unsigned char)(hi << 4 | lo);
            if (i > 0 && vocab[i] <= vocab[i - 1]) {
                snprintf(err, n, "--checkpoint '%s': metadata field 'data.vocab' is not sorted "
                         "distinct bytes (byte %" PRId64 ")", path, i);
                return false;
            }
        }
    } else { /* a built-in task: digits */
        const char *task = tg_safetensors_meta_get(st, "data.task");
        c->task = -1;
        for (int i = 0; task && i < 3; i++)
            if (!strcmp(task, task_names[i]))
                c->task = i;
        if (c->task < 0) {
            snprintf(err, n, "--checkpoint '%s': metadata field 'data.task' '%s': expected "
                     "copy, reverse or sort", path, cli_show(task ? task : "", sh, sizeof sh));
            return false;
        }
        if (c->vocab_size != 10) {
            snprintf(err, n, "--checkpoint '%s': metadata field 'model.vocab_size' %" PRId64
                     ": a task model has 10 (the digits)", path, c->vocab_size);
            return false;
        }
        for (int i = 0; i < 10; i++)
            vocab[i] = (unsigned char)('0' + i);
    }
    return true;
}

/* ---- the parameters the config implies, in the reference model's state_dict order ----------- */
typedef struct {
    char name[96];
    int rank;
    int64_t shape[2];
} param_spec;

static const char *const layer_params[12] = {
    "self_attn.in_proj_weight", "self_attn.in_proj_bias", "self_attn.out_proj.weight",
    "self_attn.out_proj.bias", "linear1.weight", "linear1.bias", "linear2.weight",
    "linear2.bias", "norm1.weight", "norm1.bias", "norm2.weight", "norm2.bias"};

static void spec(param_spec *p, const char *name, int rank, int64_t d0, int64_t d1)
{
    snprintf(p->name, sizeof p->name, "%s", name);
    p->rank = rank;
    p->shape[0] = d0;
    p->shape[1] = d1;
}

/* Fill @p out (room for 6 + 12 * layers) and return the count. All products stay far below
 * 2^63: every dim is bounded by read_config. */
static int64_t param_specs(const ck_config *c, param_spec *out)
{
    int64_t k = 0, V = c->vocab_size, D = c->d_model, F = c->d_ff;
    spec(&out[k++], "tok_emb.weight", 2, V, D);
    if (c->pos == 0)
        spec(&out[k++], "pos_emb.weight", 2, c->seq_len, D);
    for (int64_t i = 0; i < c->layers; i++) {
        const int64_t shapes[12][3] = {{2, 3 * D, D}, {1, 3 * D, 0}, {2, D, D}, {1, D, 0},
                                       {2, F, D},     {1, F, 0},     {2, D, F}, {1, D, 0},
                                       {1, D, 0},     {1, D, 0},     {1, D, 0}, {1, D, 0}};
        for (int j = 0; j < 12; j++) {
            char name[96];
            snprintf(name, sizeof name, "layers.%" PRId64 ".%s", i, layer_params[j]);
            spec(&out[k++], name, (int)shapes[j][0], shapes[j][1], shapes[j][2]);
        }
    }
    spec(&out[k++], "norm.weight", 1, D, 0);
    spec(&out[k++], "norm.bias", 1, D, 0);
    spec(&out[k++], "head.weight", 2, V, D); /* tied: a copy of tok_emb.weight */
    spec(&out[k++], "head.bias", 1, V, 0);
    return k;
}

static void spec_shape(const param_spec *p, char *buf, size_t n)
{
    if (p->rank == 1)
        snprintf(buf, n, "(%" PRId64 ")", p->shape[0]);
    else
        snprintf(buf, n, "(%" PRId64 ", %" PRId64 ")", p->shape[0], p->shape[1]);
}

static bool is_optim_state(const char *name)
{
    return !strncmp(name, "adam.m.", 7) || !strncmp(name, "adam.v.", 7) ||
           !strncmp(name, "sgd.momentum.", 13);
}

static int cmp_str(const void *x, const void *y)
{
    return strcmp(*(const char *const *)x, *(const char *const *)y);
}

/* ---- run ------------------------------------------------------------------------------------ */
typedef struct {
    int64_t n_tensors, n_values, n_dropped, step;
} export_result;

/* --out: absent, or (with --force) a regular file that is not the checkpoint. */
static bool check_out(const export_args *a, char *err, size_t n)
{
    struct stat so, sc;
    if (lstat(a->out, &so) != 0) {
        if (errno == ENOENT)
            return true;
        snprintf(err, n, "--out '%s': %s", a->out, strerror(errno));
        return false;
    }
    if (!S_ISREG(so.st_mode)) {
        snprintf(err, n, "--out '%s' exists and is %s; refusing to replace it", a->out,
                 S_ISDIR(so.st_mode) ? "a directory" : S_ISLNK(so.st_mode) ? "a symbolic link"
                                                                           : "not a regular file");
        return false;
    }
    if (stat(a->checkpoint, &sc) == 0 && sc.st_dev == so.st_dev && sc.st_ino == so.st_ino) {
        snprintf(err, n, "--out '%s' is the checkpoint itself (choose another file)", a->out);
        return false;
    }
    if (!a->force) {
        snprintf(err, n, "--out '%s' exists (pass --force to replace it)", a->out);
        return false;
    }
    return true;
}

static int export_exec(const export_args *a, export_result *res, char *err, size_t n)
{
    memset(res, 0, sizeof *res);
    char e[1200];
    if (!check_out(a, err, n))
        return 1;
    if (!cli_regular_file(a->checkpoint, e, sizeof e)) {
        snprintf(err, n, "--checkpoint %s", e);
        return 1;
    }
    tg_ctx *ctx = tg_ctx_new();
    if (!ctx) {
        snprintf(err, n, "out of memory");
        return 1;
    }
    int rc = 1;
    param_spec *specs = NULL;
    tg_io_item *items = NULL;
    const char **names = NULL; /* the parameters found in the file, for the stray check */
    int64_t n_names = 0;
    tg_safetensors *st = tg_safetensors_read(ctx, a->checkpoint);
    if (!st) {
        cli_format("--checkpoint", a->checkpoint, ctx, err, n);
        goto done;
    }
    ck_config c;
    unsigned char vocab[256];
    if (!read_config(st, a->checkpoint, &c, vocab, err, n))
        goto done;
    int64_t cap = 6 + 12 * c.layers, count = tg_safetensors_count(st);
    specs = calloc((size_t)cap, sizeof *specs);
    items = calloc((size_t)cap, sizeof *items);
    names = calloc((size_t)cap, sizeof *names);
    if (!specs || !items || !names) {
        snprintf(err, n, "out of memory");
        goto done;
    }
    int64_t np = param_specs(&c, specs);
    char b1[160], b2[160];
    for (int64_t i = 0; i < np; i++) {
        const param_spec *p = &specs[i];
        bool tied_head = c.tie && !strcmp(p->name, "head.weight");
        const char *src = tied_head ? "tok_emb.weight" : p->name;
        tg_tensor *t = tg_safetensors_find(st, src);
        if (!t) { /* (tok_emb.weight comes first, so a tied head always finds it) */
            snprintf(err, n, "--checkpoint '%s': no parameter '%s', which the model its "
                     "metadata describes has", a->checkpoint, p->name);
            goto done;
        }
        spec_shape(p, b2, sizeof b2);
        if (tg_tensor_rank(t) != p->rank || tg_tensor_shape(t)[0] != p->shape[0] ||
            (p->rank == 2 && tg_tensor_shape(t)[1] != p->shape[1])) {
            snprintf(err, n, "--checkpoint '%s': parameter '%s' is %s, but the model its "
                     "metadata describes needs %s", a->checkpoint, p->name,
                     tg_tensor_shape_str(t, b1, sizeof b1), b2);
            goto done;
        }
        items[i] = tg_io_item_data(t, p->name);
        if (!tied_head) {
            res->n_values += tg_tensor_numel(t);
            names[n_names++] = p->name;
        }
        res->n_tensors++;
    }
    /* every other tensor must be optimizer state: a stray one means the metadata is wrong */
    qsort(names, (size_t)n_names, sizeof *names, cmp_str);
    for (int64_t j = 0; j < count; j++) {
        const char *name = tg_safetensors_name(st, j);
        if (bsearch(&name, names, (size_t)n_names, sizeof *names, cmp_str))
            continue;
        if (!is_optim_state(name)) {
            char sh[80];
            snprintf(err, n, "--checkpoint '%s': tensor '%s' is neither a parameter of the "
                     "model its metadata describes nor optimizer state", a->checkpoint,
                     cli_show(name, sh, sizeof sh));
            goto done;
        }
        res->n_dropped++;
    }

    /* metadata */
    char config[1024], vjson[256 * 4 + 8], step[32], data[32];
    snprintf(config, sizeof config,
             "{\"vocab_size\": %" PRId64 ", \"max_seq_len\": %" PRId64 ", \"n_layers\": %" PRId64
             ", \"d_model\": %" PRId64 ", \"n_heads\": %" PRId64 ", \"d_ff\": %" PRId64
             ", \"activation\": \"%s\", \"norm_first\": %s, \"pos\": \"%s\", \"causal\": %s"
             ", \"tie_weights\": %s, \"layer_norm_eps\": %.17g, \"dropout\": %.17g"
             ", \"dtype\": \"%s\"}",
             c.vocab_size, c.seq_len, c.layers, c.d_model, c.heads, c.d_ff,
             c.activation ? "gelu" : "relu", c.norm_first ? "true" : "false",
             c.pos ? "sinusoidal" : "learned", c.causal ? "true" : "false",
             c.tie ? "true" : "false", 1e-5, c.dropout,
             tg_tensor_dtype(tg_safetensors_find(st, "tok_emb.weight")) == TG_F64 ? "float64"
                                                                                : "float32");
    size_t w = 0;
    vjson[w++] = '[';
    for (int64_t i = 0; i < c.vocab_size; i++)
        w += (size_t)snprintf(vjson + w, sizeof vjson - w, "%s%u", i ? ", " : "", vocab[i]);
    snprintf(vjson + w, sizeof vjson - w, "]");
    snprintf(step, sizeof step, "%" PRId64, c.step);
    snprintf(data, sizeof data, "%s%s", c.mode == 0 ? "text" : "task:",
             c.mode == 0 ? "" : task_names[c.task]);
    res->step = c.step;
    const char *keys[] = {"format", "config", "vocab", "data", "step", "tgrad_version"};
    const char *vals[] = {"tgrad-export-1", config, vjson, data, step, TGRAD_VERSION_STRING};
    if (tg_safetensors_write_items(ctx, a->out, np, items, 6, keys, vals, NULL) != TG_OK) {
        cli_format("--out", a->out, ctx, err, n);
        goto done;
    }
    rc = 0;
done:
    free(specs);
    free(items);
    free(names);
    tg_ctx_free(ctx);
    return rc;
}

/* ---- report --------------------------------------------------------------------------------- */
int cmd_export(int argc, char **argv)
{
    export_args a;
    cli_result r;
    char err[1600];
    int pr = export_parse(argc, argv, &a, &r, err, sizeof err);
    if (pr != CLI_OK) {
        if (pr == CLI_HELP)
            export_help(stdout);
        else
            fprintf(stderr, "tgrad export: %s\n", err);
        export_free(&a, &r);
        return pr == CLI_HELP ? 0 : 2;
    }
    export_result res;
    int rc = export_exec(&a, &res, err, sizeof err);
    if (rc)
        fprintf(stderr, "tgrad export: %s\n", err);
    else
        printf("exported %" PRId64 " tensors (%" PRId64 " parameters, step %" PRId64 ") to '%s'; "
               "%" PRId64 " optimizer-state tensors left out\n", res.n_tensors, res.n_values,
               res.step, a.out, res.n_dropped);
    export_free(&a, &r);
    return rc;
}
