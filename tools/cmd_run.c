/*
 * cmd_run.c - `tgrad run`: one module on .npy inputs, forward and optional backward.
 *
 *   tgrad run sdpa    --q Q.npy --k K.npy --v V.npy [--mask M.npy] [--causal] [--attn-out A.npy]
 *   tgrad run mha     --weights W.safetensors --heads H (--x X.npy | --q Q.npy --k K.npy --v V.npy)
 *                     [--attn-mask M.npy] [--key-padding-mask P.npy] [--causal]
 *   tgrad run ffn     --weights W.safetensors --x X.npy [--activation relu|gelu]
 *   tgrad run encoder --weights W.safetensors --heads H --x X.npy [--norm-first] [--eps E]
 *                     [--activation relu|gelu] [--key-padding-mask P.npy] [--causal]
 *   common:           --dtype f32|f64  --out O.npy  [--grad-out dO.npy --grads G.safetensors]
 *
 * Masks: a bool .npy is TG_MASK_BLOCK (true = blocked), a float .npy is additive; integer masks
 * are refused as ambiguous. Every error is one line on stderr and exit status 1.
 */
#include "cli.h"
#include "tgrad_io.h"
#include "tgrad_nn.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    const char *module;
    const char *q, *k, *v, *x, *mask, *attn_mask, *kpm, *weights, *out, *attn_out, *grad_out,
        *grads, *activation;
    long heads;
    bool causal, norm_first, has_eps;
    double eps;
    tg_dtype dt;
} run_args;

static void help(FILE *f)
{
    fprintf(f,
            "usage: tgrad run sdpa    --q Q.npy --k K.npy --v V.npy [--mask M.npy] [--causal]\n"
            "                         [--attn-out A.npy]\n"
            "       tgrad run mha     --weights W.safetensors --heads H\n"
            "                         (--x X.npy | --q Q.npy --k K.npy --v V.npy)\n"
            "                         [--attn-mask M.npy] [--key-padding-mask P.npy] [--causal]\n"
            "       tgrad run ffn     --weights W.safetensors --x X.npy [--activation relu|gelu]\n"
            "       tgrad run encoder --weights W.safetensors --heads H --x X.npy [--norm-first]\n"
            "                         [--eps E] [--activation relu|gelu]\n"
            "                         [--key-padding-mask P.npy] [--causal]\n"
            "common options: --dtype f32|f64 (compute dtype, default f32; inputs converted)\n"
            "                --out O.npy  [--grad-out dO.npy --grads G.safetensors]\n"
            "\n"
            "Shapes are batch-first: x (B, T, d_model); sdpa takes any leading dims.\n"
            "A bool mask .npy blocks where true; a float mask is added to the scores.\n"
            "key_padding_mask is bool (B, T_k), true = padding. --causal adds the look-ahead\n"
            "mask. With --grad-out, backward runs with that upstream gradient and --grads\n"
            "receives every parameter's gradient under its state_dict name and the inputs'\n"
            "under q, k, v or x (for self-attention x gets the sum over its three uses).\n"
            "Weights use PyTorch state_dict names (nn.MultiheadAttention, linear1/linear2,\n"
            "nn.TransformerEncoderLayer).\n");
}

static int fail(tg_ctx *ctx, const char *what)
{
    if (ctx && tg_ctx_status(ctx) != TG_OK)
        fprintf(stderr, "tgrad run: %s: %s\n", what, tg_ctx_message(ctx));
    else
        fprintf(stderr, "tgrad run: %s\n", what);
    return 1;
}

static int parse(int argc, char **argv, run_args *a)
{
    memset(a, 0, sizeof *a);
    a->dt = TG_F32;
    a->heads = -1;
    if (argc < 2) {
        help(stderr);
        return 2;
    }
    a->module = argv[1];
    if (strcmp(a->module, "--help") == 0 || strcmp(a->module, "-h") == 0) {
        help(stdout);
        return -1;
    }
    if (strcmp(a->module, "sdpa") && strcmp(a->module, "mha") && strcmp(a->module, "ffn") &&
        strcmp(a->module, "encoder")) {
        fprintf(stderr, "tgrad run: unknown module '%s' (sdpa, mha, ffn or encoder)\n",
                a->module);
        return 2;
    }
    struct {
        const char *flag;
        const char **dst;
    } files[] = {
        {"--q", &a->q},           {"--k", &a->k},
        {"--v", &a->v},           {"--x", &a->x},
        {"--mask", &a->mask},     {"--attn-mask", &a->attn_mask},
        {"--key-padding-mask", &a->kpm}, {"--weights", &a->weights},
        {"--out", &a->out},       {"--attn-out", &a->attn_out},
        {"--grad-out", &a->grad_out}, {"--grads", &a->grads},
        {"--activation", &a->activation},
    };
    for (int i = 2; i < argc; i++) {
        const char *f = argv[i];
        bool done = false;
        if (strcmp(f, "--help") == 0 || strcmp(f, "-h") == 0) {
            help(stdout);
            return -1;
        }
        if (strcmp(f, "--causal") == 0) {
            a->causal = true;
            continue;
        }
        if (strcmp(f, "--norm-first") == 0) {
            a->norm_first = true;
            continue;
        }
        if (i + 1 >= argc) {
            fprintf(stderr, "tgrad run: option '%s' needs a value or is unknown (try --help)\n", f);
            return 2;
        }
        for (size_t k = 0; k < sizeof files / sizeof files[0]; k++) {
            if (strcmp(f, files[k].flag) == 0) {
                *files[k].dst = argv[++i];
                done = true;
            }
        }
        if (done)
            continue;
        const char *val = argv[++i];
        char *end = NULL;
        if (strcmp(f, "--heads") == 0) {
            a->heads = strtol(val, &end, 10);
            if (!*val || *end || a->heads < 1) {
                fprintf(stderr, "tgrad run: --heads must be a positive integer, not '%s'\n", val);
                return 2;
            }
        } else if (strcmp(f, "--eps") == 0) {
            a->eps = strtod(val, &end);
            a->has_eps = true;
            if (!*val || *end || !(a->eps >= 0)) {
                fprintf(stderr, "tgrad run: --eps must be a non-negative number, not '%s'\n", val);
                return 2;
            }
        } else if (strcmp(f, "--dtype") == 0) {
            if (strcmp(val, "f32") == 0)
                a->dt = TG_F32;
            else if (strcmp(val, "f64") == 0)
                a->dt = TG_F64;
            else {
                fprintf(stderr, "tgrad run: --dtype must be f32 or f64, not '%s'\n", val);
                return 2;
            }
        } else {
            fprintf(stderr, "tgrad run: unknown option '%s' (try --help)\n", f);
            return 2;
        }
    }
    if (a->activation && strcmp(a->activation, "relu") && strcmp(a->activation, "gelu")) {
        fprintf(stderr, "tgrad run: --activation must be relu or gelu, not '%s'\n",
                a->activation);
        return 2;
    }
    if ((a->grad_out == NULL) != (a->grads == NULL)) {
        fprintf(stderr, "tgrad run: --grad-out and --grads go together\n");
        return 2;
    }
    return 0;
}

/* Read an .npy input; mark it differentiable when gradients are requested. */
static tg_tensor *read_input(tg_ctx *ctx, const char *path, const char *name, tg_dtype dt,
                             bool grad, tg_npy_kind *kind)
{
    tg_npy_kind k;
    tg_tensor *t = tg_npy_read(ctx, path, dt, &k);
    if (!t)
        return NULL;
    tg_tensor_set_name(t, name);
    if (kind)
        *kind = k;
    if (grad)
        tg_set_requires_grad(t, true);
    return t;
}

/* A mask file: bool -> BLOCK, float -> ADDITIVE; ints refused. */
static tg_tensor *read_mask(tg_ctx *ctx, const char *path, const char *name, tg_dtype dt,
                            bool bool_only, tg_mask_kind *kind)
{
    tg_npy_kind k;
    tg_tensor *m = read_input(ctx, path, name, dt, false, &k);
    if (!m)
        return NULL;
    if (k == TG_NPY_INT || (bool_only && k != TG_NPY_BOOL)) {
        fprintf(stderr, "tgrad run: %s '%s' must be %s (got %s array)\n", name, path,
                bool_only ? "a bool array (true = padding)"
                          : "bool (true = blocked) or float (additive)",
                k == TG_NPY_INT ? "an integer" : "a float");
        return NULL;
    }
    *kind = k == TG_NPY_BOOL ? TG_MASK_BLOCK : TG_MASK_ADDITIVE;
    return m;
}

static const int64_t *shape_of(const tg_tensor *t) { return tg_tensor_shape(t); }

/* d_model from a weight in the file, for building the module before loading. */
static int64_t file_dim(const tg_safetensors *st, const char *name, int axis)
{
    tg_tensor *t = tg_safetensors_find(st, name);
    if (!t || axis >= tg_tensor_rank(t))
        return -1;
    return shape_of(t)[axis];
}

int cmd_run(int argc, char **argv)
{
    run_args a;
    int pr = parse(argc, argv, &a);
    if (pr != 0)
        return pr < 0 ? 0 : pr;
    bool want_grad = a.grad_out != NULL;
    bool is_sdpa = strcmp(a.module, "sdpa") == 0, is_mha = strcmp(a.module, "mha") == 0;
    bool is_ffn = strcmp(a.module, "ffn") == 0, is_enc = strcmp(a.module, "encoder") == 0;
    /* option sanity per module */
    if (is_sdpa && (!a.q || !a.k || !a.v))
        return fail(NULL, "sdpa needs --q, --k and --v");
    if (!is_sdpa && !a.weights)
        return fail(NULL, "this module needs --weights W.safetensors");
    if ((is_mha || is_enc) && a.heads < 1)
        return fail(NULL, "this module needs --heads H");
    if (is_mha && !a.x && (!a.q || !a.k || !a.v))
        return fail(NULL, "mha needs --x (self-attention) or --q, --k and --v");
    if (is_mha && a.x && (a.q || a.k || a.v))
        return fail(NULL, "mha takes either --x or --q/--k/--v, not both");
    if ((is_ffn || is_enc) && !a.x)
        return fail(NULL, "this module needs --x X.npy");
    if (a.mask && !is_sdpa)
        return fail(NULL, "--mask is for sdpa (mha uses --attn-mask)");
    if (a.attn_mask && !is_mha)
        return fail(NULL, "--attn-mask is for mha");
    if (a.kpm && !(is_mha || is_enc))
        return fail(NULL, "--key-padding-mask is for mha and encoder");
    if (a.attn_out && !is_sdpa)
        return fail(NULL, "--attn-out is for sdpa");
    if ((a.norm_first || a.has_eps) && !is_enc)
        return fail(NULL, "--norm-first and --eps are for encoder");
    if (a.activation && !(is_ffn || is_enc))
        return fail(NULL, "--activation is for ffn and encoder");
    if (a.causal && is_ffn)
        return fail(NULL, "--causal is not an ffn option");

    tg_ctx *ctx = tg_ctx_new();
    if (!ctx)
        return fail(NULL, "out of memory");
    int rc = 1;
    tg_dtype dt = a.dt;
    tg_attn_masks masks;
    memset(&masks, 0, sizeof masks);
    masks.causal = a.causal;
    tg_tensor *inputs[3] = {NULL, NULL, NULL};
    const char *input_names[3] = {NULL, NULL, NULL};
    int n_inputs = 0;
    tg_tensor *y = NULL, *attn = NULL;
    tg_safetensors *st = NULL;
    tg_activation act = a.activation && strcmp(a.activation, "gelu") == 0 ? TG_ACT_GELU
                                                                          : TG_ACT_RELU;
    if (a.weights) {
        st = tg_safetensors_read(ctx, a.weights);
        if (!st) {
            rc = fail(ctx, a.weights);
            goto done;
        }
    }
    if (a.x) {
        inputs[n_inputs] = read_input(ctx, a.x, "x", dt, want_grad, NULL);
        input_names[n_inputs++] = "x";
        if (!inputs[0]) {
            rc = fail(ctx, a.x);
            goto done;
        }
    } else if (a.q) {
        const char *paths[3] = {a.q, a.k, a.v}, *names[3] = {"q", "k", "v"};
        for (int i = 0; i < 3; i++) {
            inputs[n_inputs] = read_input(ctx, paths[i], names[i], dt, want_grad, NULL);
            input_names[n_inputs++] = names[i];
            if (!inputs[i]) {
                rc = fail(ctx, paths[i]);
                goto done;
            }
        }
    }
    if (a.mask || a.attn_mask) {
        const char *p = a.mask ? a.mask : a.attn_mask;
        masks.attn_mask = read_mask(ctx, p, "attn_mask", dt, false, &masks.attn_mask_kind);
        if (!masks.attn_mask) {
            if (tg_ctx_status(ctx) != TG_OK)
                rc = fail(ctx, p);
            goto done;
        }
    }
    if (a.kpm) {
        tg_mask_kind kk;
        masks.key_padding_mask = read_mask(ctx, a.kpm, "key_padding_mask", dt, true, &kk);
        if (!masks.key_padding_mask) {
            if (tg_ctx_status(ctx) != TG_OK)
                rc = fail(ctx, a.kpm);
            goto done;
        }
    }

    if (is_sdpa) {
        y = tg_sdpa(ctx, inputs[0], inputs[1], inputs[2], &masks, 0, &attn);
    } else if (is_mha || is_enc) {
        const char *wname = is_mha ? "in_proj_weight" : "self_attn.in_proj_weight";
        int64_t D = file_dim(st, wname, 1);
        if (D < 1) {
            fprintf(stderr, "tgrad run: %s: no '%s' tensor of shape (3*d_model, d_model)\n",
                    a.weights, wname);
            goto done;
        }
        if (D % a.heads != 0) {
            fprintf(stderr, "tgrad run: --heads %ld does not divide d_model %lld of %s\n",
                    a.heads, (long long)D, a.weights);
            goto done;
        }
        int64_t xw = tg_tensor_dim(inputs[0], -1);
        if (xw != D) {
            fprintf(stderr, "tgrad run: input width %lld does not match d_model %lld of %s\n",
                    (long long)xw, (long long)D, a.weights);
            goto done;
        }
        if (is_mha) {
            tg_mha m;
            if (tg_mha_init(ctx, &m, dt, D, a.heads, NULL) != TG_OK) {
                rc = fail(ctx, "mha");
                goto done;
            }
            tg_tensor *q = inputs[0], *k = a.x ? inputs[0] : inputs[1],
                      *v = a.x ? inputs[0] : inputs[2];
            if (tg_params_load_from(ctx, st, 0, NULL, true) != TG_OK) {
                rc = fail(ctx, a.weights);
                goto done;
            }
            y = tg_mha_forward(ctx, &m, q, k, v, &masks, NULL);
        } else {
            tg_encoder_config c = tg_encoder_config_default(D, a.heads);
            c.d_ff = file_dim(st, "linear1.weight", 0);
            if (c.d_ff < 1) {
                fprintf(stderr, "tgrad run: %s: no 'linear1.weight' tensor\n", a.weights);
                goto done;
            }
            c.norm_first = a.norm_first;
            c.activation = act;
            if (a.has_eps)
                c.layer_norm_eps = a.eps;
            tg_encoder_layer l;
            if (tg_encoder_layer_init(ctx, &l, dt, &c, NULL) != TG_OK ||
                tg_params_load_from(ctx, st, 0, NULL, true) != TG_OK) {
                rc = fail(ctx, a.weights);
                goto done;
            }
            y = tg_encoder_layer_forward(ctx, &l, inputs[0], &masks);
        }
    } else { /* ffn */
        int64_t D = file_dim(st, "linear1.weight", 1), F = file_dim(st, "linear1.weight", 0);
        if (D < 1) {
            fprintf(stderr, "tgrad run: %s: no 'linear1.weight' tensor of shape (d_ff, d_model)\n",
                    a.weights);
            goto done;
        }
        if (tg_tensor_dim(inputs[0], -1) != D) {
            fprintf(stderr, "tgrad run: input width %lld does not match d_model %lld of %s\n",
                    (long long)tg_tensor_dim(inputs[0], -1), (long long)D, a.weights);
            goto done;
        }
        tg_ffn f;
        if (tg_ffn_init(ctx, &f, dt, D, F, act, NULL) != TG_OK ||
            tg_params_load_from(ctx, st, 0, NULL, true) != TG_OK) {
            rc = fail(ctx, a.weights);
            goto done;
        }
        y = tg_ffn_forward(ctx, &f, inputs[0]);
    }
    if (!y) {
        rc = fail(ctx, a.module);
        goto done;
    }
    tg_tensor *outs[2] = {y, attn};
    tg_graph *g = tg_graph_new(ctx, outs, attn ? 2 : 1);
    if (!g || tg_graph_forward(g) != TG_OK) {
        rc = fail(ctx, a.module);
        goto done;
    }
    if (a.out && tg_npy_write(ctx, a.out, y) != TG_OK) {
        rc = fail(ctx, a.out);
        goto done;
    }
    if (a.attn_out && tg_npy_write(ctx, a.attn_out, attn) != TG_OK) {
        rc = fail(ctx, a.attn_out);
        goto done;
    }
    if (want_grad) {
        tg_tensor *dy = read_input(ctx, a.grad_out, "grad_out", dt, false, NULL);
        if (!dy) {
            rc = fail(ctx, a.grad_out);
            goto done;
        }
        if (tg_tensor_rank(dy) != tg_tensor_rank(y) ||
            memcmp(tg_tensor_shape(dy), tg_tensor_shape(y),
                   sizeof(int64_t) * (size_t)tg_tensor_rank(y)) != 0) {
            char b1[128], b2[128];
            fprintf(stderr, "tgrad run: --grad-out %s has shape %s but the output is %s\n",
                    a.grad_out, tg_tensor_shape_str(dy, b1, sizeof b1),
                    tg_tensor_shape_str(y, b2, sizeof b2));
            goto done;
        }
        if (tg_graph_backward(g, y, dy) != TG_OK) {
            rc = fail(ctx, "backward");
            goto done;
        }
        int64_t np = tg_ctx_n_params(ctx), n = 0;
        const tg_tensor **ts = malloc(sizeof *ts * (size_t)(np + 3));
        const char **names = malloc(sizeof *names * (size_t)(np + 3));
        if (!ts || !names) {
            free(ts);
            free(names);
            rc = fail(NULL, "out of memory");
            goto done;
        }
        for (int64_t i = 0; i < np; i++) {
            ts[n] = tg_ctx_param(ctx, i);
            names[n++] = tg_tensor_name(tg_ctx_param(ctx, i));
        }
        for (int i = 0; i < n_inputs; i++) {
            ts[n] = inputs[i];
            names[n++] = input_names[i];
        }
        tg_status s = tg_safetensors_write_grads(ctx, a.grads, n, ts, names, 0, NULL, NULL);
        free(ts);
        free(names);
        if (s != TG_OK) {
            rc = fail(ctx, a.grads);
            goto done;
        }
    }
    if (!a.out && !want_grad) {
        /* nothing to write: describe the result */
        char b[128];
        printf("%s output %s %s\n", a.module, tg_tensor_shape_str(y, b, sizeof b),
               tg_dtype_str(dt));
    }
    rc = 0;
done:
    tg_ctx_free(ctx);
    return rc;
}
