/*
 * bench_work.c - the module and training workloads of `tgrad bench` and tools/bench/bench_torch.py
 * (see bench_work.h for the list and their exact shapes).
 */
#define _POSIX_C_SOURCE 200809L
#include "bench_work.h"

#include "tgrad.h"
#include "tgrad_nn.h"
#include "tgrad_train.h"

#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#if defined(__GNUC__)
#define BW_EXPORT __attribute__((visibility("default")))
#else
#define BW_EXPORT
#endif

static const char *const bw_names[] = {
    "sdpa-64x5x64-fwd", "sdpa-64x5x64-fwdbwd", "mha-8x128-fwd",     "mha-8x128-fwdbwd",
    "mha-64x5-fwd",     "mha-64x5-fwdbwd",     "encoder-8x128-fwd", "encoder-8x128-fwdbwd",
    "encoder-64x5-fwd", "encoder-64x5-fwdbwd", "encoder-8x128-jvp", "encoder-8x128-hvp",
    "train"};
enum { BW_N = sizeof bw_names / sizeof bw_names[0] };

struct bw_work {
    tg_ctx *ctx;
    tg_graph *g;
    tg_tensor *loss;  /* NULL: forward only */
    tg_optim *opt;    /* train: the AdamW step */
    double tokens;
    char label[96];
    char err[512];
};

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

BW_EXPORT int bw_count(void) { return BW_N; }

BW_EXPORT const char *bw_name(int i) { return i >= 0 && i < BW_N ? bw_names[i] : NULL; }

static bool has_suffix(const char *s, const char *suf)
{
    size_t a = strlen(s), b = strlen(suf);
    return a >= b && strcmp(s + a - b, suf) == 0;
}

/* One run: forward, and backward from the loss (zeroing gradients first), and for training the
 * clip and the optimizer step, exactly as `tgrad train` does a step. */
static bool run_once(bw_work *w)
{
    if (w->loss)
        tg_graph_zero_grad(w->g);
    if (tg_graph_forward(w->g) != TG_OK)
        return false;
    if (w->loss && tg_graph_backward(w->g, w->loss, NULL) != TG_OK)
        return false;
    if (w->opt) {
        double norm;
        if (tg_clip_grad_norm(w->ctx, 0, NULL, 1.0, &norm) != TG_OK ||
            tg_optim_step(w->opt, 3e-3) != TG_OK)
            return false;
    }
    return true;
}

static void set_err(bw_work *w, char *err, size_t n)
{
    const char *m = w && w->ctx ? tg_ctx_message(w->ctx) : NULL;
    snprintf(err, n, "%s", m && *m ? m : "out of memory");
}

/* The nodes a -jvp or -hvp workload runs (forward only): jvp: y and its tangent along a random
 * tangent of x (tg_jvp; the parameters held constant); hvp: the Hessian-vector product of
 * mean(y) along random directions of x and every parameter (tg_hvp, reverse over reverse). One
 * output: the sum of their means. */
static tg_tensor *derivative_nodes(tg_ctx *ctx, tg_tensor *y, tg_tensor *x, bool hvp)
{
    enum { MAXP = 64 };
    tg_tensor *in[MAXP], *dir[MAXP], *res[MAXP], *r = NULL;
    int n = 0;
    in[n++] = x;
    for (int64_t i = 0; hvp && i < tg_ctx_n_params(ctx) && n < MAXP; i++)
        if (tg_ctx_param(ctx, i) != x)
            in[n++] = tg_ctx_param(ctx, i);
    for (int j = 0; j < n; j++) {
        int rank = tg_tensor_rank(in[j]);
        dir[j] = tg_const(ctx, TG_F32, rank, tg_tensor_shape(in[j]), "direction");
        if (!dir[j])
            return NULL;
        tg_fill_uniform(dir[j], -1, 1);
    }
    tg_tensor *loss = tg_mean_all(ctx, y);
    tg_status s = hvp ? tg_hvp(ctx, loss, n, in, dir, res) : tg_jvp(ctx, 1, in, dir, 1, &y, res);
    if (s != TG_OK)
        return NULL;
    r = hvp ? NULL : loss;
    for (int j = 0; j < (hvp ? n : 1); j++) {
        tg_tensor *m = tg_mean_all(ctx, res[j]);
        r = r ? tg_add(ctx, r, m) : m;
    }
    return r;
}

/* The workload's kinds of run, from its name's suffix. */
typedef struct {
    bool bwd, jvp, hvp, tiny;
} bw_kind;

/* sdpa: q, k, v (64, 5, 64) = (batch x heads, T, d_k), no mask; the output. */
static tg_tensor *build_sdpa(bw_work *w, bw_kind k)
{
    tg_ctx *ctx = w->ctx;
    int64_t BH = k.tiny ? 2 : 64, T = k.tiny ? 3 : 5, dk = k.tiny ? 4 : 64;
    tg_tensor *qkv[3];
    for (int i = 0; i < 3; i++) {
        const char *nm = i == 0 ? "q" : i == 1 ? "k" : "v";
        qkv[i] = k.bwd ? tg_param(ctx, TG_F32, TG_DIMS(BH, T, dk), nm)
                       : tg_input(ctx, TG_F32, TG_DIMS(BH, T, dk), nm);
        if (qkv[i])
            tg_fill_uniform(qkv[i], -1, 1);
    }
    w->tokens = (double)(BH * T);
    snprintf(w->label, sizeof w->label, "sdpa (%lld, %lld, %lld) %s", (long long)BH,
             (long long)T, (long long)dk, k.bwd ? "fwd+bwd" : "fwd");
    return tg_sdpa(ctx, qkv[0], qkv[1], qkv[2], NULL, 0, NULL);
}

/* mha or encoder layer (D 512, 8 heads, d_ff 2048; tiny: D 16, 2 heads, d_ff 32) on x of
 * (8, 128) or (64, 5): the output, or for -jvp / -hvp its derivative nodes. */
static tg_tensor *build_module(bw_work *w, const char *name, bw_kind k)
{
    tg_ctx *ctx = w->ctx;
    int64_t D = k.tiny ? 16 : 512, H = k.tiny ? 2 : 8, F = k.tiny ? 32 : 2048;
    bool enc = name[0] == 'e', big = strstr(name, "8x128") != NULL;
    int64_t B = k.tiny ? 2 : big ? 8 : 64, T = k.tiny ? (big ? 6 : 3) : big ? 128 : 5;
    tg_tensor *x = k.bwd || k.hvp ? tg_param(ctx, TG_F32, TG_DIMS(B, T, D), "x")
                                  : tg_input(ctx, TG_F32, TG_DIMS(B, T, D), "x");
    tg_tensor *out = NULL;
    if (x)
        tg_fill_uniform(x, -1, 1);
    if (enc) {
        tg_encoder_config c = tg_encoder_config_default(D, H);
        c.d_ff = F;
        tg_encoder_layer l;
        if (tg_encoder_layer_init(ctx, &l, TG_F32, &c, NULL) == TG_OK)
            out = tg_encoder_layer_forward(ctx, &l, x, NULL);
    } else {
        tg_mha m;
        if (tg_mha_init(ctx, &m, TG_F32, D, H, NULL) == TG_OK)
            out = tg_mha_forward(ctx, &m, x, x, x, NULL, NULL);
    }
    w->tokens = (double)(B * T);
    snprintf(w->label, sizeof w->label, "%s (%lld, %lld) %s", enc ? "encoder" : "mha",
             (long long)B, (long long)T,
             k.bwd ? "fwd+bwd" : k.jvp ? "JVP" : k.hvp ? "HVP" : "fwd");
    return (k.jvp || k.hvp) && out ? derivative_nodes(ctx, out, x, k.hvp) : out;
}

/* train: the default text model's step (its loss in w->loss, AdamW in w->opt); false when it
 * could not be built. */
static bool build_train(bw_work *w, bw_kind k)
{
    tg_ctx *ctx = w->ctx;
    int64_t B = k.tiny ? 2 : 32, T = k.tiny ? 8 : 64, V = 86;
    tg_transformer_config c = bw_text_model_config(V, T, k.tiny);
    tg_transformer m;
    if (tg_transformer_init(ctx, &m, TG_F32, &c) == TG_OK) {
        tg_tensor *ids = tg_input(ctx, TG_I32, TG_DIMS(B, T), "ids");
        tg_tensor *tgt = tg_input(ctx, TG_I32, TG_DIMS(B, T), "targets");
        if (ids && tgt)
            for (int64_t i = 0; i < B * T; i++) {
                tg_set(ids, i, (double)(tg_rng_u64(ctx) % (uint64_t)V));
                tg_set(tgt, i, (double)(tg_rng_u64(ctx) % (uint64_t)V));
            }
        w->loss = tg_cross_entropy(ctx, tg_transformer_forward(ctx, &m, ids, NULL), tgt, -1);
        tg_optim_config oc = tg_optim_defaults(TG_OPTIM_ADAMW);
        oc.lr = 3e-3;
        oc.weight_decay = 0.01;
        w->opt = w->loss ? tg_optim_new(ctx, &oc, 0, NULL) : NULL;
    }
    tg_ctx_set_training(ctx, true);
    w->tokens = (double)(B * T);
    snprintf(w->label, sizeof w->label, "train step (B %lld, T %lld)", (long long)B,
             (long long)T);
    return w->opt != NULL;
}

BW_EXPORT bw_work *bw_new(const char *name, int threads, int unfused, int precision, int tiny,
                          char *err, size_t n)
{
    int which = -1;
    for (int i = 0; i < BW_N && name; i++)
        if (strcmp(name, bw_names[i]) == 0)
            which = i;
    if (which < 0) {
        snprintf(err, n, "unknown workload '%s'", name ? name : "(null)");
        return NULL;
    }
    bw_work *w = calloc(1, sizeof *w);
    if (!w || !(w->ctx = tg_ctx_new())) {
        snprintf(err, n, "out of memory");
        free(w);
        return NULL;
    }
    tg_ctx_seed(w->ctx, 1234);
    tg_ctx_set_fusion(w->ctx, !unfused);
    tg_ctx_set_threads(w->ctx, threads < 1 ? 1 : threads);
    bw_kind k = {has_suffix(name, "-fwdbwd"), has_suffix(name, "-jvp"), has_suffix(name, "-hvp"),
                 tiny != 0};
    tg_tensor *out = NULL;
    bool ok = true;
    if (strncmp(name, "sdpa", 4) == 0)
        out = build_sdpa(w, k);
    else if (strncmp(name, "mha", 3) == 0 || strncmp(name, "encoder", 7) == 0)
        out = build_module(w, name, k);
    else
        ok = build_train(w, k);
    if (ok && !w->loss && out && k.bwd)
        w->loss = tg_mean_all(w->ctx, out);
    tg_tensor *root = w->loss ? w->loss : out;
    tg_graph_opts go = {.precision = precision};
    w->g = ok && root ? tg_graph_new_opts(w->ctx, &root, 1, &go) : NULL;
    if (!w->g || !run_once(w)) { /* the warm-up run */
        set_err(w, err, n);
        bw_free(w);
        return NULL;
    }
    return w;
}

BW_EXPORT void bw_set_threads(bw_work *w, int threads)
{
    tg_ctx_set_threads(w->ctx, threads < 1 ? 1 : threads);
}

BW_EXPORT double bw_sample(bw_work *w, int reps)
{
    reps = reps < 1 ? 1 : reps;
    double t0 = now_s();
    for (int r = 0; r < reps; r++)
        if (!run_once(w)) {
            set_err(w, w->err, sizeof w->err);
            return NAN;
        }
    return (now_s() - t0) / reps;
}

BW_EXPORT int bw_reps(bw_work *w, double target_s)
{
    double t = bw_sample(w, 1);
    if (isnan(t))
        return 1;
    if (t < target_s / 4) /* a second look once caches and the thread team are warm */
        t = fmin(t, bw_sample(w, 1));
    return t >= target_s ? 1 : (int)fmin(100000.0, ceil(target_s / fmax(t, 1e-7)));
}

BW_EXPORT double bw_tokens(const bw_work *w) { return w->tokens; }
BW_EXPORT const char *bw_label(const bw_work *w) { return w->label; }
BW_EXPORT const char *bw_error(const bw_work *w) { return w->err; }

BW_EXPORT void bw_free(bw_work *w)
{
    if (!w)
        return;
    tg_ctx_free(w->ctx);
    free(w);
}

tg_transformer_config bw_text_model_config(int64_t vocab, int64_t seq_len, int tiny)
{
    tg_transformer_config c;
    memset(&c, 0, sizeof c);
    c.vocab_size = vocab;
    c.max_seq_len = seq_len;
    c.n_layers = tiny ? 1 : 2;
    c.layer = tg_encoder_config_default(tiny ? 16 : 128, tiny ? 2 : 4);
    c.layer.d_ff = tiny ? 32 : 512;
    c.layer.norm_first = true;
    c.pos = TG_POS_LEARNED;
    c.causal = true;
    return c;
}
