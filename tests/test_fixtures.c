#define _POSIX_C_SOURCE 200809L
/*
 * test_fixtures.c - parity with PyTorch: every case in tests/fixtures/ (written by
 * tests/fixtures/gen/gen_fixtures.py with PyTorch 1.13) is rebuilt with tgrad's modules, in f64 and f32;
 * the output and every gradient (parameters and inputs) must satisfy (modules: sdpa, mha, ffn,
 * encoder, decoder, encoder_stack, decoder_stack, transformer = nn.Transformer)
 *   max |ours - ref| / (1 + max |ref|) <= 1e-10 (f64), 1e-4 (f32).
 * The files of tests/fixtures/gen/gen_hvp_fixtures.py are held to the same 1e-10 in f64:
 * tg_hvp and a gradient-penalty step (hvp_<case>), tg_jvp (jvp_<case>), and label-smoothed
 * cross-entropy's tg_hvp and tg_jvp (hvp_xent_<case>).
 */
#include "testutil.h"
#include "tgrad_io.h"
#include "tgrad_nn.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *const cases[] = {
    "sdpa_nomask", "sdpa_nomask_4d", "sdpa_2d", "sdpa_bool_mask", "sdpa_additive_mask",
    "sdpa_causal", "sdpa_custom_scale", "mha_self", "mha_cross", "mha_causal",
    "mha_key_padding", "mha_attn_mask_3d", "mha_combined", "mha_additive_mask", "ffn_relu",
    "ffn_gelu", "enc_post_relu", "enc_pre_relu", "enc_post_gelu", "enc_pre_gelu_eps",
    "enc_key_padding", "enc_causal",
    /* decoder layer, stacks, nn.Transformer */
    "dec_post_relu", "dec_pre_gelu_eps", "dec_causal_tgt_kpm", "dec_memory_kpm", "dec_masks",
    "dec_masked_memory_row", "dec_stack2", "enc_stack2_norm", "transformer_2_2",
    "transformer_pre_gelu",
};
#define N_CASES ((int)(sizeof cases / sizeof cases[0]))

/* A copy of fixture tensor `name` as an input of dtype dt (NULL if absent). */
static tg_tensor *input_from(tg_ctx *ctx, const tg_safetensors *st, const char *name,
                             tg_dtype dt, bool grad)
{
    tg_tensor *f = tg_safetensors_find(st, name);
    if (!f)
        return NULL;
    tg_tensor *t = tg_input(ctx, dt, tg_tensor_rank(f), tg_tensor_shape(f), name);
    ck_assert_ptr_nonnull(t);
    ck_assert_int_eq(tg_tensor_copy(t, f), TG_OK);
    if (grad)
        tg_set_requires_grad(t, true);
    return t;
}

static double rel_err_data(const tg_tensor *ours, const tg_tensor *ref, bool grad)
{
    ck_assert_int_eq(tg_tensor_numel(ours), tg_tensor_numel(ref));
    double md = 0, mr = 0;
    for (int64_t i = 0; i < tg_tensor_numel(ref); i++) {
        double o = grad ? tg_grad_get(ours, i) : tg_get(ours, i), r = tg_get(ref, i);
        double d = fabs(o - r);
        if (!(d <= md))
            md = isnan(d) ? INFINITY : d;
        if (fabs(r) > mr)
            mr = fabs(r);
    }
    return md / (1 + mr);
}

/* The case's inputs (those it has; NULL otherwise) and its module's outputs. */
typedef struct {
    tg_tensor *x, *q, *k, *v, *memory, *src, *tgt, *y, *w;
} built;

/* Build fixture @p st's module in @p dt with its parameters loaded, on its inputs. */
static built build_case(tg_ctx *ctx, const tg_safetensors *st, tg_dtype dt, const char *name)
{
    const char *module = tg_safetensors_meta_get(st, "module");
    ck_assert_ptr_nonnull(module);
    const char *mk = tg_safetensors_meta_get(st, "mask_kind");
    const char *causal = tg_safetensors_meta_get(st, "causal");
    tg_attn_masks masks;
    memset(&masks, 0, sizeof masks);
    masks.causal = causal && strcmp(causal, "1") == 0;
    if (!masks.causal) /* causal cases also store the causal mask: use the flag alone */
        masks.attn_mask = input_from(ctx, st, "attn_mask", dt, false);
    masks.attn_mask_kind =
        mk && strcmp(mk, "additive") == 0 ? TG_MASK_ADDITIVE : TG_MASK_BLOCK;
    masks.key_padding_mask = input_from(ctx, st, "key_padding_mask", dt, false);

    built b;
    memset(&b, 0, sizeof b);
    tg_tensor *x = input_from(ctx, st, "x", dt, true);
    tg_tensor *q = input_from(ctx, st, "q", dt, true);
    tg_tensor *k = input_from(ctx, st, "k", dt, true);
    tg_tensor *v = input_from(ctx, st, "v", dt, true);
    tg_tensor *memory = input_from(ctx, st, "memory", dt, true);
    tg_tensor *src = input_from(ctx, st, "src", dt, true);
    tg_tensor *tgt = input_from(ctx, st, "tgt", dt, true);
    tg_tensor *y = NULL, *w = NULL;
    const char *act = tg_safetensors_meta_get(st, "activation");
    tg_activation a = act && strcmp(act, "gelu") == 0 ? TG_ACT_GELU : TG_ACT_RELU;
    const char *heads_s = tg_safetensors_meta_get(st, "heads");
    int64_t H = heads_s ? atoll(heads_s) : 0;
    if (strcmp(module, "sdpa") == 0) {
        const char *sc = tg_safetensors_meta_get(st, "scale");
        y = tg_sdpa(ctx, q, k, v, &masks, sc ? atof(sc) : 0, &w);
    } else if (strcmp(module, "mha") == 0) {
        tg_tensor *query = x ? x : q;
        int64_t D = tg_tensor_dim(query, -1);
        tg_mha m;
        ck_assert_int_eq(tg_mha_init(ctx, &m, dt, D, H, NULL), TG_OK);
        y = tg_mha_forward(ctx, &m, query, x ? x : k, x ? x : v, &masks, NULL);
    } else if (strcmp(module, "ffn") == 0) {
        int64_t F = tg_tensor_dim(tg_safetensors_find(st, "linear1.weight"), 0);
        tg_ffn f;
        ck_assert_int_eq(tg_ffn_init(ctx, &f, dt, tg_tensor_dim(x, -1), F, a, NULL), TG_OK);
        y = tg_ffn_forward(ctx, &f, x);
    } else {
        tg_encoder_config c = tg_encoder_config_default(tg_tensor_dim(x ? x : src, -1), H);
        const char *ff = strcmp(module, "encoder") && strcmp(module, "decoder")
                             ? (strcmp(module, "transformer") ? "layers.0.linear1.weight"
                                                              : "encoder.layers.0.linear1.weight")
                             : "linear1.weight";
        c.d_ff = tg_tensor_dim(tg_safetensors_find(st, ff), 0);
        c.activation = a;
        c.norm_first = strcmp(tg_safetensors_meta_get(st, "norm_first"), "1") == 0;
        c.layer_norm_eps = atof(tg_safetensors_meta_get(st, "eps"));
        const char *nl = tg_safetensors_meta_get(st, "layers");
        int64_t L = nl && strcmp(nl, "n/a") ? atoll(nl) : 1;
        /* decoder masks, PyTorch's names (the causal flag stands for tgt_mask when set) */
        tg_attn_masks tm, mm, sm;
        memset(&tm, 0, sizeof tm);
        memset(&mm, 0, sizeof mm);
        memset(&sm, 0, sizeof sm);
        const char *tk = tg_safetensors_meta_get(st, "tgt_mask_kind");
        tm.causal = masks.causal;
        tm.attn_mask = input_from(ctx, st, "tgt_mask", dt, false);
        tm.attn_mask_kind = tk && !strcmp(tk, "additive") ? TG_MASK_ADDITIVE : TG_MASK_BLOCK;
        tm.key_padding_mask = input_from(ctx, st, "tgt_key_padding_mask", dt, false);
        mm.attn_mask = input_from(ctx, st, "memory_mask", dt, false);
        mm.attn_mask_kind = TG_MASK_BLOCK;
        mm.key_padding_mask = input_from(ctx, st, "memory_key_padding_mask", dt, false);
        sm.key_padding_mask = input_from(ctx, st, "src_key_padding_mask", dt, false);
        if (strcmp(module, "encoder") == 0) {
            tg_encoder_layer l;
            ck_assert_int_eq(tg_encoder_layer_init(ctx, &l, dt, &c, NULL), TG_OK);
            y = tg_encoder_layer_forward(ctx, &l, x, &masks);
        } else if (strcmp(module, "encoder_stack") == 0) {
            tg_encoder e;
            ck_assert_int_eq(tg_encoder_init(ctx, &e, dt, &c, L, true, NULL), TG_OK);
            y = tg_encoder_forward(ctx, &e, x, &masks);
        } else if (strcmp(module, "decoder") == 0) {
            tg_decoder_layer l;
            ck_assert_int_eq(tg_decoder_layer_init(ctx, &l, dt, &c, NULL), TG_OK);
            y = tg_decoder_layer_forward(ctx, &l, x, memory, &tm, &mm);
        } else if (strcmp(module, "decoder_stack") == 0) {
            tg_decoder d;
            ck_assert_int_eq(tg_decoder_init(ctx, &d, dt, &c, L, true, NULL), TG_OK);
            y = tg_decoder_forward(ctx, &d, x, memory, &tm, &mm);
        } else {
            ck_assert_str_eq(module, "transformer");
            tg_encoder_decoder m;
            ck_assert_int_eq(tg_encoder_decoder_init(
                                 ctx, &m, dt, &c,
                                 atoll(tg_safetensors_meta_get(st, "encoder_layers")),
                                 atoll(tg_safetensors_meta_get(st, "decoder_layers")), NULL),
                             TG_OK);
            y = tg_encoder_decoder_forward(ctx, &m, src, tgt, &sm, &tm, &mm);
        }
    }
    ck_assert_msg(y != NULL, "%s: %s", name, tg_ctx_message(ctx));
    /* parameters from the file by state_dict name (the file also holds inputs: not strict) */
    ck_assert_msg(tg_params_load_from(ctx, st, 0, NULL, false) == TG_OK, "%s: %s", name,
                  tg_ctx_message(ctx));
    b = (built){x, q, k, v, memory, src, tgt, y, w};
    return b;
}

/* The fixture's input or parameter named @p target. */
static tg_tensor *lookup(tg_ctx *ctx, const built *b, const char *target)
{
    tg_tensor *t = tg_ctx_find_param(ctx, target);
    return t                                ? t
           : strcmp(target, "x") == 0      ? b->x
           : strcmp(target, "q") == 0      ? b->q
           : strcmp(target, "k") == 0      ? b->k
           : strcmp(target, "v") == 0      ? b->v
           : strcmp(target, "memory") == 0 ? b->memory
           : strcmp(target, "src") == 0    ? b->src
           : strcmp(target, "tgt") == 0    ? b->tgt
                                           : NULL;
}

static void run_case(const char *name, tg_dtype dt)
{
    double tol = dt == TG_F64 ? 1e-10 : 1e-4;
    char path[1024];
    snprintf(path, sizeof path, "%s/%s.safetensors", TG_FIXTURES, name);
    tg_ctx *ctx = tg_ctx_new();
    tg_safetensors *st = tg_safetensors_read(ctx, path);
    ck_assert_msg(st != NULL, "%s: %s", path, tg_ctx_message(ctx));
    built b = build_case(ctx, st, dt, name);
    tg_tensor *y = b.y, *w = b.w;
    tg_tensor *outs[2] = {y, w};
    tg_graph *g = tg_graph_new(ctx, outs, w ? 2 : 1);
    ck_assert_ptr_nonnull(g);
    ck_assert_int_eq(tg_graph_forward(g), TG_OK);
    double e = rel_err_data(y, tg_safetensors_find(st, "out"), false);
    ck_assert_msg(e <= tol, "%s %s: output error %.3g > %.0e", name, tg_dtype_str(dt), e, tol);
    if (w && tg_safetensors_find(st, "attn_weights")) {
        e = rel_err_data(w, tg_safetensors_find(st, "attn_weights"), false);
        ck_assert_msg(e <= tol, "%s: attention weights error %.3g", name, e);
    }
    tg_tensor *dy = input_from(ctx, st, "grad_out", dt, false);
    ck_assert_ptr_nonnull(dy);
    ck_assert_int_eq(tg_graph_backward(g, y, dy), TG_OK);
    int n_grads = 0;
    for (int64_t i = 0; i < tg_safetensors_count(st); i++) {
        const char *key = tg_safetensors_name(st, i);
        if (strncmp(key, "grad.", 5) != 0)
            continue;
        const char *target = key + 5;
        tg_tensor *t = lookup(ctx, &b, target);
        ck_assert_msg(t != NULL, "%s: no tensor for %s", name, key);
        e = rel_err_data(t, tg_safetensors_tensor(st, i), true);
        ck_assert_msg(e <= tol, "%s %s: %s error %.3g > %.0e", name, tg_dtype_str(dt), key, e,
                      tol);
        n_grads++;
    }
    ck_assert_int_gt(n_grads, 0);
    /* every parameter tgrad created is in the file (same names as PyTorch's state_dict) */
    for (int64_t i = 0; i < tg_ctx_n_params(ctx); i++) {
        char key[TG_NAME_MAX + 8];
        snprintf(key, sizeof key, "grad.%s", tg_tensor_name(tg_ctx_param(ctx, i)));
        ck_assert_msg(tg_safetensors_find(st, key) != NULL, "%s: no %s", name, key);
    }
    tg_ctx_free(ctx);
}

/* The fixture's tensors named <prefix><name> (directions or tangents) as inputs in dir[], the
 * input or parameter <name> each belongs to in wrt[] and <name> in names[] (pointing into the
 * file's key); returns their count. */
static int with_prefix(tg_ctx *ctx, const tg_safetensors *st, const built *b, const char *prefix,
                       tg_tensor **wrt, tg_tensor **dir, const char **names, int cap)
{
    size_t np = strlen(prefix);
    int n = 0;
    for (int64_t i = 0; i < tg_safetensors_count(st); i++) {
        const char *key = tg_safetensors_name(st, i);
        if (strncmp(key, prefix, np) != 0)
            continue;
        ck_assert_int_lt(n, cap);
        names[n] = key + np;
        wrt[n] = lookup(ctx, b, key + np);
        ck_assert_msg(wrt[n] != NULL, "no tensor for %s", key);
        dir[n++] = input_from(ctx, st, key, TG_F64, false);
    }
    return n;
}

/* max |ours - ref| / (1 + max |ref|) of @p ours against the file's tensor <prefix><name>. */
static double err_of(const tg_safetensors *st, const char *prefix, const char *name,
                     const tg_tensor *ours, bool grad)
{
    char key[TG_NAME_MAX + 8];
    snprintf(key, sizeof key, "%s%s", prefix, name);
    tg_tensor *ref = tg_safetensors_find(st, key);
    ck_assert_msg(ref != NULL, "no %s", key);
    return rel_err_data(ours, ref, grad);
}

/* Second order (tests/fixtures/gen/gen_hvp_fixtures.py): Hessian-vector products of
 * L = <grad_out, out> along every input's and parameter's v (tg_hvp), and the gradients of the
 * penalized loss L + lambda |dL/dx|^2 (tg_grad in the loss), f64, within 1e-10. Forward mode
 * (jvp_<case>, the same cases): the JVP of out along the tangents u of every input and
 * parameter together (tg_jvp), f64, within 1e-10. */
static const char *const hvp_cases[] = {"mha_self",         "mha_combined",  "enc_post_relu",
                                        "enc_pre_gelu_eps", "dec_post_relu", "transformer_2_2"};

static void run_hvp_case(const char *name)
{
    enum { MAXW = 256 };
    char path[1024];
    snprintf(path, sizeof path, "%s/hvp_%s.safetensors", TG_FIXTURES, name);
    tg_ctx *ctx = tg_ctx_new();
    tg_safetensors *st = tg_safetensors_read(ctx, path);
    ck_assert_msg(st != NULL, "%s: %s", path, tg_ctx_message(ctx));
    built b = build_case(ctx, st, TG_F64, name);
    tg_tensor *r = input_from(ctx, st, "grad_out", TG_F64, false);
    tg_tensor *L = tg_sum_all(ctx, tg_mul(ctx, b.y, r));
    tg_tensor *wrt[MAXW], *dir[MAXW], *hv[MAXW], *gx;
    const char *names[MAXW];
    int n = with_prefix(ctx, st, &b, "v.", wrt, dir, names, MAXW);
    ck_assert_int_eq(tg_hvp(ctx, L, n, wrt, dir, hv), TG_OK);
    tg_tensor *px = lookup(ctx, &b, tg_safetensors_meta_get(st, "penalty_input"));
    ck_assert_int_eq(tg_grad(ctx, 1, &L, NULL, 1, &px, &gx), TG_OK);
    double lam = atof(tg_safetensors_meta_get(st, "penalty_lambda"));
    tg_tensor *P = tg_add(ctx, L, tg_scale(ctx, tg_sum_all(ctx, tg_mul(ctx, gx, gx)), lam));
    tg_tensor *outs[1 + MAXW] = {P};
    memcpy(outs + 1, hv, sizeof *hv * (size_t)n);
    tg_graph *g = tg_graph_new(ctx, outs, 1 + n);
    ck_assert_msg(g != NULL, "%s: %s", name, tg_ctx_message(ctx));
    ck_assert_int_eq(tg_graph_forward(g), TG_OK);
    tg_graph_zero_grad(g);
    ck_assert_int_eq(tg_graph_backward(g, P, NULL), TG_OK);
    for (int j = 0; j < n; j++) {
        double e = err_of(st, "hvp.", names[j], hv[j], false);
        ck_assert_msg(e <= 1e-10, "%s: hvp.%s error %.3g", name, names[j], e);
        e = err_of(st, "gp.", names[j], wrt[j], true);
        ck_assert_msg(e <= 1e-10, "%s: gp.%s error %.3g", name, names[j], e);
    }
    tg_ctx_free(ctx);
}

static void run_jvp_case(const char *name)
{
    enum { MAXW = 256 };
    char path[1024];
    snprintf(path, sizeof path, "%s/jvp_%s.safetensors", TG_FIXTURES, name);
    tg_ctx *ctx = tg_ctx_new();
    tg_safetensors *st = tg_safetensors_read(ctx, path);
    ck_assert_msg(st != NULL, "%s: %s", path, tg_ctx_message(ctx));
    built b = build_case(ctx, st, TG_F64, name);
    tg_tensor *in[MAXW], *u[MAXW], *ty;
    const char *names[MAXW];
    int n = with_prefix(ctx, st, &b, "u.", in, u, names, MAXW);
    /* every parameter tgrad created has its tangent */
    for (int64_t i = 0; i < tg_ctx_n_params(ctx); i++) {
        char key[TG_NAME_MAX + 8];
        snprintf(key, sizeof key, "u.%s", tg_tensor_name(tg_ctx_param(ctx, i)));
        ck_assert_msg(tg_safetensors_find(st, key) != NULL, "%s: no %s", name, key);
    }
    ck_assert_msg(tg_jvp(ctx, n, in, u, 1, &b.y, &ty) == TG_OK, "%s: %s", name,
                  tg_ctx_message(ctx));
    tg_tensor *outs[2] = {b.y, ty};
    tg_graph *g = tg_graph_new(ctx, outs, 2);
    ck_assert_msg(g != NULL, "%s: %s", name, tg_ctx_message(ctx));
    ck_assert_int_eq(tg_graph_forward(g), TG_OK);
    double e = err_of(st, "", "out", b.y, false);
    ck_assert_msg(e <= 1e-10, "%s: out error %.3g", name, e);
    e = err_of(st, "jvp.", "out", ty, false);
    ck_assert_msg(e <= 1e-10, "%s: jvp.out error %.3g", name, e);
    tg_ctx_free(ctx);
}

/* Label-smoothed cross-entropy on its own (gen_hvp_fixtures.py's hvp_xent_<case>): the loss of
 * the file's `logits`, or of tg_dense(x, weight, bias), against i32 targets with the file's
 * ignore_index and label_smoothing; its HVP along v (tg_hvp) and its JVP along u (tg_jvp), f64,
 * within 1e-10. Each tensor with a direction is made a parameter of its file name, so lookup()
 * finds it. */
static const char *const xent_cases[] = {"xent_ls", "xent_ls_dense"};

/* The loss of fixture @p st, its differentiated tensors made parameters. */
static tg_tensor *build_xent(tg_ctx *ctx, const tg_safetensors *st)
{
    for (int64_t i = 0; i < tg_safetensors_count(st); i++) {
        const char *key = tg_safetensors_name(st, i);
        if (strncmp(key, "v.", 2) != 0)
            continue;
        tg_tensor *f = tg_safetensors_find(st, key + 2);
        ck_assert_ptr_nonnull(f);
        tg_tensor *p = tg_param(ctx, TG_F64, tg_tensor_rank(f), tg_tensor_shape(f), key + 2);
        ck_assert_ptr_nonnull(p);
        ck_assert_int_eq(tg_tensor_copy(p, f), TG_OK);
    }
    tg_tensor *z = tg_ctx_find_param(ctx, "logits");
    if (!z)
        z = tg_dense(ctx, tg_ctx_find_param(ctx, "x"), tg_ctx_find_param(ctx, "weight"),
                     tg_ctx_find_param(ctx, "bias"));
    tg_tensor *t = input_from(ctx, st, "targets", TG_I32, false); /* integers stored as F64 */
    ck_assert_ptr_nonnull(t);
    int64_t ign = atoll(tg_safetensors_meta_get(st, "ignore_index"));
    double eps = atof(tg_safetensors_meta_get(st, "label_smoothing"));
    tg_tensor *L = tg_cross_entropy_smoothed(ctx, z, t, ign, eps);
    ck_assert_msg(L != NULL, "%s", tg_ctx_message(ctx));
    return L;
}

static void run_xent_case(const char *name)
{
    enum { MAXW = 8 };
    char path[1024];
    snprintf(path, sizeof path, "%s/hvp_%s.safetensors", TG_FIXTURES, name);
    tg_ctx *ctx = tg_ctx_new();
    tg_safetensors *st = tg_safetensors_read(ctx, path);
    ck_assert_msg(st != NULL, "%s: %s", path, tg_ctx_message(ctx));
    tg_tensor *L = build_xent(ctx, st);
    built b;
    memset(&b, 0, sizeof b);
    tg_tensor *wrt[MAXW], *v[MAXW], *hv[MAXW], *in[MAXW], *u[MAXW], *outs[2 + MAXW];
    const char *names[MAXW], *unames[MAXW];
    int n = with_prefix(ctx, st, &b, "v.", wrt, v, names, MAXW);
    int nu = with_prefix(ctx, st, &b, "u.", in, u, unames, MAXW);
    ck_assert_int_eq(tg_hvp(ctx, L, n, wrt, v, hv), TG_OK);
    ck_assert_int_eq(tg_jvp(ctx, nu, in, u, 1, &L, &outs[1]), TG_OK);
    outs[0] = L;
    memcpy(outs + 2, hv, sizeof *hv * (size_t)n);
    tg_graph *g = tg_graph_new(ctx, outs, 2 + n);
    ck_assert_msg(g != NULL, "%s: %s", name, tg_ctx_message(ctx));
    ck_assert_int_eq(tg_graph_forward(g), TG_OK);
    double e = err_of(st, "", "out", L, false);
    ck_assert_msg(e <= 1e-10, "%s: out error %.3g", name, e);
    e = err_of(st, "jvp.", "out", outs[1], false);
    ck_assert_msg(e <= 1e-10, "%s: jvp.out error %.3g", name, e);
    for (int j = 0; j < n; j++) {
        e = err_of(st, "hvp.", names[j], hv[j], false);
        ck_assert_msg(e <= 1e-10, "%s: hvp.%s error %.3g", name, names[j], e);
    }
    tg_ctx_free(ctx);
}

START_TEST(test_jvp_case) { run_jvp_case(hvp_cases[_i]); }
END_TEST

START_TEST(test_xent_case) { run_xent_case(xent_cases[_i]); }
END_TEST

START_TEST(test_hvp_case) { run_hvp_case(hvp_cases[_i]); }
END_TEST

START_TEST(test_case_f64) { run_case(cases[_i], TG_F64); }
END_TEST

START_TEST(test_case_f32) { run_case(cases[_i], TG_F32); }
END_TEST

/* The module builders create exactly PyTorch's state_dict keys and shapes. */
START_TEST(test_state_dict_names)
{
    tg_ctx *ctx = tg_ctx_new();
    char path[1024];
    snprintf(path, sizeof path, "%s/enc_post_relu.safetensors", TG_FIXTURES);
    tg_safetensors *st = tg_safetensors_read(ctx, path);
    ck_assert_ptr_nonnull(st);
    tg_encoder_config c = tg_encoder_config_default(8, 2);
    c.d_ff = 16;
    tg_encoder_layer l;
    ck_assert_int_eq(tg_encoder_layer_init(ctx, &l, TG_F64, &c, "layers.0."), TG_OK);
    ck_assert_int_eq(tg_ctx_n_params(ctx), 12);
    for (int64_t i = 0; i < tg_ctx_n_params(ctx); i++) {
        const char *n = tg_tensor_name(tg_ctx_param(ctx, i));
        ck_assert(strncmp(n, "layers.0.", 9) == 0);
        tg_tensor *f = tg_safetensors_find(st, n + 9);
        ck_assert_msg(f != NULL, "PyTorch has no key %s", n + 9);
        ck_assert_int_eq(tg_tensor_numel(f), tg_tensor_numel(tg_ctx_param(ctx, i)));
    }
    tg_ctx_free(ctx);
}
END_TEST

/* Loading is strict: missing, unexpected and mis-shaped tensors are named errors. */
START_TEST(test_load_errors)
{
    tg_ctx *ctx = tg_ctx_new();
    char path[1024];
    snprintf(path, sizeof path, "%s/ffn_relu.safetensors", TG_FIXTURES);
    tg_ffn f;
    ck_assert_int_eq(tg_ffn_init(ctx, &f, TG_F32, 8, 16, TG_ACT_RELU, NULL), TG_OK);
    /* the fixture also holds inputs and expected values: strict loading refuses them */
    ck_assert_int_eq(tg_params_load(ctx, path, 0, NULL, true), TG_ERR_MISMATCH);
    tu_assert_error(ctx, TG_ERR_MISMATCH, "unexpected tensor");
    tg_ctx_clear_error(ctx);
    ck_assert_int_eq(tg_params_load(ctx, path, 0, NULL, false), TG_OK);
    tg_ctx_free(ctx);

    ctx = tg_ctx_new();
    ck_assert_int_eq(tg_ffn_init(ctx, &f, TG_F32, 8, 17, TG_ACT_RELU, NULL), TG_OK);
    ck_assert_int_eq(tg_params_load(ctx, path, 0, NULL, false), TG_ERR_MISMATCH);
    tu_assert_error(ctx, TG_ERR_MISMATCH, "linear1.weight");
    tg_ctx_free(ctx);

    ctx = tg_ctx_new();
    ck_assert_int_eq(tg_ffn_init(ctx, &f, TG_F32, 8, 16, TG_ACT_RELU, "ffn."), TG_OK);
    ck_assert_int_eq(tg_params_load(ctx, path, 0, NULL, false), TG_ERR_MISMATCH);
    tu_assert_error(ctx, TG_ERR_MISMATCH, "missing tensor 'ffn.linear1.weight'");
    tg_ctx_free(ctx);
}
END_TEST

/* Save then load gives back the same values, bitwise. */
START_TEST(test_save_load_roundtrip)
{
    char path[] = "/tmp/tgrad_params_XXXXXX";
    int fd = mkstemp(path);
    ck_assert_int_ge(fd, 0);
    tg_ctx *a = tg_ctx_new(), *b = tg_ctx_new();
    tg_ctx_seed(a, 1);
    tg_ctx_seed(b, 2);
    tg_mha ma, mb;
    ck_assert_int_eq(tg_mha_init(a, &ma, TG_F64, 8, 2, "attn."), TG_OK);
    ck_assert_int_eq(tg_mha_init(b, &mb, TG_F64, 8, 2, "attn."), TG_OK);
    ck_assert_int_eq(tg_params_save(a, path, 0, NULL, 0, NULL, NULL), TG_OK);
    ck_assert_int_eq(tg_params_load(b, path, 0, NULL, true), TG_OK);
    for (int64_t i = 0; i < tg_ctx_n_params(a); i++) {
        tg_tensor *pa = tg_ctx_param(a, i), *pb = tg_ctx_param(b, i);
        ck_assert(memcmp(tg_tensor_data(pa), tg_tensor_data(pb),
                         8 * (size_t)tg_tensor_numel(pa)) == 0);
    }
    tg_ctx_free(a);
    tg_ctx_free(b);
    remove(path);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("fixtures");
    TCase *tc = tcase_create("pytorch_parity");
    tcase_set_timeout(tc, 120);
    tcase_add_loop_test(tc, test_case_f64, 0, N_CASES);
    tcase_add_loop_test(tc, test_case_f32, 0, N_CASES);
    tcase_add_loop_test(tc, test_hvp_case, 0, (int)(sizeof hvp_cases / sizeof *hvp_cases));
    tcase_add_loop_test(tc, test_jvp_case, 0, (int)(sizeof hvp_cases / sizeof *hvp_cases));
    tcase_add_loop_test(tc, test_xent_case, 0, (int)(sizeof xent_cases / sizeof *xent_cases));
    tcase_add_test(tc, test_state_dict_names);
    tcase_add_test(tc, test_load_errors);
    tcase_add_test(tc, test_save_load_roundtrip);
    suite_add_tcase(s, tc);
    return tu_run(s);
}
