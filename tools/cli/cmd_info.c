/*
 * cmd_info.c - `tgrad info FILE...`: describe every file given: a safetensors file or tgrad
 * checkpoint (tensors with the dtype the file stores and their shapes, element count, metadata)
 * or an .npy file (the file's dtype as NumPy writes it, e.g. <f4, |b1, <i8, and its shape).
 * A file that cannot be read is one line on stderr naming it; the other files are still
 * described, and the exit status is 1 if any file failed.
 */
#define _POSIX_C_SOURCE 200809L
#include "ckpt_config.h"
#include "cli.h"
#include "climsg.h"
#include "tgrad_io.h"
#include "tgrad_model.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- parse ---------------------------------------------------------------------------------- */
static const cli_option info_opts[] = {{0}};

static const cli_command info_cmd = {
    .name = "info",
    .usage = "FILE...",
    .description =
        "Describes each FILE: a safetensors file or tgrad checkpoint (every tensor with\n"
        "the dtype the file stores and its shape, the element count, the metadata) or an\n"
        ".npy file (its dtype as NumPy writes it, e.g. <f4, |b1, <i8, and its shape).\n"
        "A tgrad checkpoint is validated as train --resume, sample, translate and export\n"
        "validate it (one validation for all): one they would refuse is a failure.\n"
        "Only regular files are read (a FIFO or device is refused, not waited on). A file\n"
        "that cannot be read is one line on stderr; the others are still described, and\n"
        "the exit status is 1.",
    .opts = info_opts,
    .positional = "FILE...",
    .min_positional = 1,
    .max_positional = 0,
};

int info_parse(int argc, char **argv, info_args *a, cli_result *r, char *err, size_t n)
{
    memset(a, 0, sizeof *a);
    return cli_parse(&info_cmd, argc, argv, a, r, err, n);
}

void info_free(info_args *a, cli_result *r) { cli_free(&info_cmd, a, r); }


/* ---- run ------------------------------------------------------------------------------------ */
static bool has_suffix(const char *s, const char *suf)
{
    size_t l = strlen(s), k = strlen(suf);
    return l >= k && !strcmp(s + l - k, suf);
}

/* First @p n bytes of @p path (fewer if the file is shorter); returns the count, -1 on error. */
static long read_prefix(const char *path, unsigned char *buf, size_t n)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return -1;
    size_t k = fread(buf, 1, n, f);
    fclose(f);
    return (long)k;
}

/*
 * The 'descr' of a valid .npy header (the library has already accepted the file): the quoted
 * value after the key, copied verbatim ("<f4", "|b1", ...). Returns false if not found.
 */
static bool npy_descr(const char *path, char *out, size_t n)
{
    unsigned char pre[12];
    if (read_prefix(path, pre, sizeof pre) < 10)
        return false;
    size_t hl, start;
    if (pre[6] == 1) {
        hl = (size_t)pre[8] | (size_t)pre[9] << 8;
        start = 10;
    } else {
        hl = (size_t)pre[8] | (size_t)pre[9] << 8 | (size_t)pre[10] << 16 | (size_t)pre[11] << 24;
        start = 12;
    }
    if (hl > TG_NPY_MAX_HEADER)
        return false;
    unsigned char *buf = malloc(start + hl + 1);
    if (!buf)
        return false;
    long got = read_prefix(path, buf, start + hl);
    bool ok = false;
    if (got == (long)(start + hl)) {
        buf[start + hl] = 0;
        const char *h = (const char *)buf + start;
        const char *k = strstr(h, "descr");
        if (k) {
            k += 5;
            if (*k == '\'' || *k == '"')
                k++;
            while (*k == ' ' || *k == ':')
                k++;
            char q = *k;
            if (q == '\'' || q == '"') {
                const char *e = strchr(k + 1, q);
                if (e && (size_t)(e - k - 1) < n) {
                    snprintf(out, n, "%.*s", (int)(e - k - 1), k + 1);
                    ok = true;
                }
            }
        }
    }
    free(buf);
    return ok;
}

static void describe_npy(const char *path, const tg_tensor *t, FILE *f)
{
    char shape[160], descr[32];
    if (!npy_descr(path, descr, sizeof descr))
        snprintf(descr, sizeof descr, "?");
    /* NumPy's shape notation: (2, 3), (5,), () */
    int r = tg_tensor_rank(t);
    size_t w = 0;
    shape[w++] = '(';
    shape[w] = 0;
    for (int i = 0; i < r; i++)
        w += (size_t)snprintf(shape + w, sizeof shape - w, "%s%" PRId64, i ? ", " : "",
                              tg_tensor_shape(t)[i]);
    snprintf(shape + w, sizeof shape - w, "%s)", r == 1 ? "," : "");
    fprintf(f, "%s: .npy %s %s, %" PRId64 " elements\n", path, descr, shape,
            tg_tensor_numel(t));
}

/* A metadata value that is a decimal fraction (a '.' in it, e.g. "0.0030000000000000001" as
 * older checkpoints wrote %.17g) as the shortest decimal that reads back as the same double
 * ("0.003"); any other value as it is. */
static const char *shortest_number(const char *v, char *buf, size_t n)
{
    double d;
    if (!v || !strchr(v, '.') || strlen(v) >= n || !cli_parse_f64(v, &d))
        return v;
    cli_fmt_double(d, buf, n);
    return strlen(buf) < strlen(v) ? buf : v;
}

static void describe_safetensors(const char *path, const tg_safetensors *st, FILE *f)
{
    char b[160], name[260], value[80];
    const char *format = tg_safetensors_meta_get(st, "format");
    bool ck = format && !strncmp(format, "tgrad-checkpoint", 16);
    bool ex = format && !strncmp(format, "tgrad-export", 12);
    fprintf(f, "%s: %s, %" PRId64 " tensors\n", path,
            ck ? "tgrad checkpoint (safetensors)" : ex ? "tgrad export (safetensors)"
                                                   : "safetensors",
            tg_safetensors_count(st));
    int64_t total = 0;
    for (int64_t i = 0; i < tg_safetensors_count(st); i++) {
        tg_tensor *t = tg_safetensors_tensor(st, i);
        total += tg_tensor_numel(t);
        /* names and values from the file: one printable line each, whatever they hold */
        fprintf(f, "  %-40s %-4s %s\n",
                cli_show_max(tg_safetensors_name(st, i), 256, name, sizeof name),
                tg_safetensors_file_dtype(st, i), tg_tensor_shape_str(t, b, sizeof b));
    }
    fprintf(f, "  %" PRId64 " elements in all\n", total);
    if (tg_safetensors_meta_count(st)) {
        fprintf(f, "metadata:\n");
        for (int64_t i = 0; i < tg_safetensors_meta_count(st); i++) {
            char num[40];
            fprintf(f, "  %-24s %s\n",
                    cli_show_max(tg_safetensors_meta_key(st, i), 256, name, sizeof name),
                    cli_show_max(shortest_number(tg_safetensors_meta_value(st, i), num,
                                                 sizeof num), 72, value, sizeof value));
        }
    }
}

/* A translation checkpoint (data.mode pairs, `tgrad train --pairs`), validated already, loaded
 * as `tgrad translate` loads it (tg_model_load_from) and summarized on @p out. */
static bool check_pairs(const char *path, const tg_safetensors *st, FILE *out, char *err,
                        size_t n)
{
    tg_ctx *ctx = tg_ctx_new();
    tg_model *m = ctx ? tg_model_load_from(ctx, st, path) : NULL;
    if (!m) {
        char msg[1024];
        if (ctx)
            cli_message(ctx, path, msg, sizeof msg);
        snprintf(err, n, "'%s': not a valid translation checkpoint (translate refuses it): %s",
                 path, ctx ? msg : "out of memory");
        tg_ctx_free(ctx);
        return false;
    }
    const tg_model_info *mi = tg_model_get_info(m);
    size_t tok_bytes = 0;
    tg_model_tokenizer_bytes(m, &tok_bytes);
    fprintf(out, "translation model: %" PRId64 "+%" PRId64 " layers, d_model %" PRId64
            ", tokenizer %s", mi->config.n_layers, mi->config.n_decoder_layers,
            mi->config.layer.d_model, mi->tokenizer);
    if (tok_bytes)
        fprintf(out, " (%zu bytes of model)", tok_bytes);
    fprintf(out, ", vocabulary %" PRId64 ", max length %" PRId64 " tokens, step %" PRId64 "\n",
            mi->config.vocab_size, mi->config.max_seq_len, mi->step);
    tg_ctx_free(ctx);
    return true;
}

/* A file whose metadata claims a training checkpoint is held to what train --resume, sample,
 * translate and export accept (ckpt_config_check, the one validation they all use): false
 * with one line in @p err when they would refuse it. */
static bool check_checkpoint(const char *path, const tg_safetensors *st, FILE *out, char *err,
                             size_t n)
{
    const char *format = tg_safetensors_meta_get(st, "format");
    if (!format || strncmp(format, "tgrad-checkpoint", 16) != 0)
        return true;
    const char *mode = tg_safetensors_meta_get(st, "data.mode");
    bool pairs = mode && !strcmp(mode, "pairs");
    train_args ta;
    train_defaults(&ta);
    ckpt_info info;
    tg_transformer_config mc;
    char e[1200];
    if (ckpt_config_check(st, &ta, &info, &mc, e, sizeof e))
        return !pairs || check_pairs(path, st, out, err, n);
    snprintf(err, n, "'%s': not a valid %s checkpoint (train --resume, %s and export refuse "
             "it): %s", path, pairs ? "translation" : "tgrad", pairs ? "translate" : "sample",
             e);
    return false;
}

/* Describe one file to @p out; on failure write one line (without the command prefix) to
 * @p err and return false. */
static bool info_file(const char *path, FILE *out, char *err, size_t n)
{
    if (!cli_regular_file(path, err, n))
        return false;
    tg_ctx *ctx = tg_ctx_new();
    if (!ctx) {
        snprintf(err, n, "'%s': out of memory", path);
        return false;
    }
    unsigned char magic[9] = {0};
    long got = read_prefix(path, magic, sizeof magic);
    bool ok = false;
    if (got < 0) {
        /* unreadable: let the library say why (permission denied, ...) */
        if (!tg_safetensors_read(ctx, path))
            cli_format(NULL, path, ctx, err, n);
        else
            ok = true; /* raced with a chmod: describe nothing rather than fail */
    } else if ((got >= 6 && !memcmp(magic, "\x93NUMPY", 6)) || has_suffix(path, ".npy")) {
        tg_npy_kind k;
        tg_tensor *t = tg_npy_read(ctx, path, TG_F32, &k);
        if (!t) {
            cli_format(NULL, path, ctx, err, n);
        } else {
            describe_npy(path, t, out);
            ok = true;
        }
    } else {
        tg_safetensors *st = tg_safetensors_read(ctx, path);
        if (st) {
            describe_safetensors(path, st, out);
            ok = check_checkpoint(path, st, out, err, n);
        } else if (got >= 9 && magic[8] != '{' && magic[8] != ' ') {
            /* not even the start of a safetensors JSON header */
            snprintf(err, n, "'%s': not a safetensors, checkpoint or .npy file", path);
        } else {
            cli_format(NULL, path, ctx, err, n);
        }
    }
    tg_ctx_free(ctx);
    return ok;
}

/* ---- report --------------------------------------------------------------------------------- */
int cmd_info(int argc, char **argv)
{
    info_args a;
    cli_result r;
    char err[1600];
    int ex = cli_parse_exit(info_parse(argc, argv, &a, &r, err, sizeof err), &info_cmd, err);
    if (ex >= 0) {
        info_free(&a, &r);
        return ex;
    }
    int failed = 0;
    for (int i = 0; i < r.n_positional; i++) {
        fflush(stdout);
        if (!info_file(r.positional[i], stdout, err, sizeof err)) {
            fflush(stdout);
            fprintf(stderr, "tgrad info: %s\n", err);
            failed++;
        }
    }
    info_free(&a, &r);
    return failed ? 1 : 0;
}
