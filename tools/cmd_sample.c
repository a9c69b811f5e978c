/*
 * cmd_sample.c - `tgrad sample`: generate text from a byte-level LM checkpoint written by
 * `tgrad train --text`. The model runs on a window of seq_len positions; the causal mask makes
 * position i depend only on tokens <= i, so the context is left-aligned in the window and the
 * logits at its last position give the next token.
 */
#include "cli.h"
#include "data.h"
#include "tgrad_train.h"

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void help(FILE *f)
{
    fprintf(f, "usage: tgrad sample --checkpoint PATH [--prompt TEXT] [--tokens N (200)]\n"
               "                    [--temperature T (0.8)] [--top-k K (0 = all)] [--seed S (0)]\n"
               "Generates text from a checkpoint of 'tgrad train --text'. Temperature 0 is\n"
               "greedy decoding.\n");
}

static int meta_int(const tg_safetensors *st, const char *k, int64_t *out)
{
    const char *v = tg_safetensors_meta_get(st, k);
    char *end;
    if (!v)
        return -1;
    long long x = strtoll(v, &end, 10);
    if (*end || x < 0)
        return -1;
    *out = x;
    return 0;
}

int cmd_sample(int argc, char **argv)
{
    const char *path = NULL, *prompt = "";
    long tokens = 200, top_k = 0;
    double temp = 0.8;
    unsigned long long seed = 0;
    for (int i = 1; i < argc; i++) {
        const char *o = argv[i];
        if (!strcmp(o, "--help") || !strcmp(o, "-h")) {
            help(stdout);
            return 0;
        }
        if (i + 1 >= argc) {
            fprintf(stderr, "tgrad sample: option '%s' needs a value or is unknown\n", o);
            return 2;
        }
        const char *v = argv[++i];
        char *end = NULL;
        if (!strcmp(o, "--checkpoint"))
            path = v;
        else if (!strcmp(o, "--prompt"))
            prompt = v;
        else if (!strcmp(o, "--tokens") && (tokens = strtol(v, &end, 10), *v && !*end && tokens >= 0))
            ;
        else if (!strcmp(o, "--temperature") && (temp = strtod(v, &end), *v && !*end && temp >= 0))
            ;
        else if (!strcmp(o, "--top-k") && (top_k = strtol(v, &end, 10), *v && !*end && top_k >= 0))
            ;
        else if (!strcmp(o, "--seed") && (seed = strtoull(v, &end, 10), *v && !*end))
            ;
        else {
            fprintf(stderr, "tgrad sample: bad option or value: %s %s (try --help)\n", o, v);
            return 2;
        }
    }
    if (!path) {
        fprintf(stderr, "tgrad sample: --checkpoint PATH is required\n");
        return 2;
    }
    tg_ctx *ctx = tg_ctx_new();
    if (!ctx)
        return 1;
    int rc = 1;
    float *win = NULL, *buf = NULL;
    double *p = NULL;
    tg_safetensors *st = tg_safetensors_read(ctx, path);
    if (!st) {
        fprintf(stderr, "tgrad sample: %s\n", tg_ctx_message(ctx));
        goto out;
    }
    const char *mode = tg_safetensors_meta_get(st, "data.mode");
    const char *vh = tg_safetensors_meta_get(st, "data.vocab");
    unsigned char vocab[256];
    int nv = vh ? vocab_from_hex(vh, vocab) : -1;
    tg_transformer_config mc;
    memset(&mc, 0, sizeof mc);
    int64_t layers, d, h, ff, T;
    if (!mode || strcmp(mode, "text") != 0 || nv < 1 || meta_int(st, "model.layers", &layers) ||
        meta_int(st, "model.d_model", &d) || meta_int(st, "model.heads", &h) ||
        meta_int(st, "model.d_ff", &ff) || meta_int(st, "model.seq_len", &T)) {
        fprintf(stderr, "tgrad sample: '%s' is not a checkpoint of 'tgrad train --text'\n", path);
        goto out;
    }
    const char *pos = tg_safetensors_meta_get(st, "model.pos");
    const char *act = tg_safetensors_meta_get(st, "model.activation");
    const char *nf = tg_safetensors_meta_get(st, "model.norm_first");
    mc.vocab_size = nv;
    mc.max_seq_len = T;
    mc.n_layers = layers;
    mc.layer = tg_encoder_config_default(d, h);
    mc.layer.d_ff = ff;
    mc.layer.norm_first = !nf || strcmp(nf, "0") != 0;
    mc.layer.activation = act && !strcmp(act, "gelu") ? TG_ACT_GELU : TG_ACT_RELU;
    mc.pos = pos && !strcmp(pos, "sinusoidal") ? TG_POS_SINUSOIDAL : TG_POS_LEARNED;
    mc.causal = true;
    const char *tie = tg_safetensors_meta_get(st, "model.tie_weights");
    mc.tie_weights = tie && !strcmp(tie, "1");
    tg_transformer m;
    tg_tensor *ids = NULL, *logits = NULL;
    tg_graph *g = NULL;
    if (tg_transformer_init(ctx, &m, TG_F32, &mc) == TG_OK) {
        ids = tg_input(ctx, TG_F32, TG_DIMS(1, T), "ids");
        logits = tg_transformer_forward(ctx, &m, ids, NULL);
        g = tg_graph_new(ctx, &logits, 1);
    }
    if (!g || tg_params_load_from(ctx, st, 0, NULL, false) != TG_OK) {
        fprintf(stderr, "tgrad sample: %s: %s\n", path, tg_ctx_message(ctx));
        goto out;
    }
    tg_ctx_set_training(ctx, false);
    tg_ctx_seed(ctx, seed);
    int id_of[256];
    for (int b = 0; b < 256; b++)
        id_of[b] = -1;
    for (int i = 0; i < nv; i++)
        id_of[vocab[i]] = i;
    size_t plen = strlen(prompt);
    int64_t cap = (int64_t)plen + tokens + 1;
    win = malloc(sizeof(float) * (size_t)cap);
    p = malloc(sizeof(double) * (size_t)nv);
    buf = malloc(sizeof(float) * (size_t)T);
    if (!win || !p || !buf) {
        fprintf(stderr, "tgrad sample: out of memory\n");
        goto out;
    }
    int64_t n = 0;
    for (size_t i = 0; i < plen; i++) {
        int id = id_of[(unsigned char)prompt[i]];
        if (id < 0) {
            fprintf(stderr, "tgrad sample: the prompt's character '%c' (byte %u) is not in the "
                    "model's vocabulary\n", prompt[i], (unsigned char)prompt[i]);
            goto out;
        }
        win[n++] = (float)id;
    }
    if (n == 0) /* no prompt: start from a newline if known, else the first symbol */
        win[n++] = (float)(id_of['\n'] >= 0 ? id_of['\n'] : 0);
    fwrite(prompt, 1, plen, stdout);
    for (long k = 0; k < tokens; k++) {
        int64_t ctx_len = n < T ? n : T, off = n - ctx_len;
        for (int64_t t = 0; t < T; t++)
            buf[t] = t < ctx_len ? win[off + t] : 0;
        tg_tensor_set_data(ids, buf, TG_F32, (size_t)T);
        tg_graph_forward(g);
        const float *lg = (const float *)tg_tensor_data(logits) + (ctx_len - 1) * nv;
        int next = 0;
        if (temp == 0) {
            for (int v = 1; v < nv; v++)
                if (lg[v] > lg[next])
                    next = v;
        } else {
            double mx = -INFINITY, sum = 0;
            for (int v = 0; v < nv; v++)
                mx = fmax(mx, lg[v]);
            double kth = -INFINITY; /* top-k threshold */
            if (top_k > 0 && top_k < nv) {
                for (int v = 0; v < nv; v++)
                    p[v] = lg[v];
                for (long j = 0; j < top_k; j++) { /* partial selection of the k largest */
                    int best = -1;
                    for (int v = 0; v < nv; v++)
                        if (p[v] > -INFINITY && (best < 0 || p[v] > p[best]))
                            best = v;
                    kth = p[best];
                    p[best] = -INFINITY;
                }
            }
            for (int v = 0; v < nv; v++) {
                p[v] = lg[v] >= kth ? exp((lg[v] - mx) / temp) : 0;
                sum += p[v];
            }
            double u = tg_rng_uniform(ctx) * sum, c = 0;
            next = nv - 1;
            for (int v = 0; v < nv; v++) {
                c += p[v];
                if (u < c && p[v] > 0) {
                    next = v;
                    break;
                }
            }
        }
        win[n++] = (float)next;
        fputc(vocab[next], stdout);
    }
    fputc('\n', stdout);
    rc = 0;
out:
    free(win);
    free(buf);
    free(p);
    tg_ctx_free(ctx);
    return rc;
}
