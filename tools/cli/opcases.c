/*
 * opcases.c - gradient-check cases for every registered op (see opcases.h).
 * Inputs are uniform in [-1, 1) unless a case says otherwise; ReLU inputs are kept at least
 * 0.1 away from the kink so central differences never straddle it.
 */
#include "opcases.h"
#include "tgrad_nn.h"
#include "tgrad_train.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

/* A differentiable input filled uniform in [lo, hi). */
static tg_tensor *leaf(tg_ctx *ctx, tg_dtype dt, int rank, const int64_t *shape,
                       const char *name, double lo, double hi)
{
    tg_tensor *t = tg_input(ctx, dt, rank, shape, name);
    if (!t)
        return NULL;
    tg_set_requires_grad(t, true);
    tg_fill_uniform(t, lo, hi);
    return t;
}

#define IN(name, ...) leaf(ctx, dt, TG_DIMS(__VA_ARGS__), name, -1.0, 1.0)
#define PARAM(name, ...) param(ctx, dt, TG_DIMS(__VA_ARGS__), name)

static tg_tensor *param(tg_ctx *ctx, tg_dtype dt, int rank, const int64_t *shape,
                        const char *name)
{
    tg_tensor *t = tg_param(ctx, dt, rank, shape, name);
    if (t)
        tg_fill_uniform(t, -1.0, 1.0);
    return t;
}

/* Push values away from 0 by at least 0.1 (kink of ReLU). */
static tg_tensor *away_from_zero(tg_tensor *t)
{
    for (int64_t i = 0; t && i < tg_tensor_numel(t); i++) {
        double v = tg_get(t, i);
        tg_set(t, i, v >= 0 ? v + 0.1 : v - 0.1);
    }
    return t;
}

/* ---- matmul ---- */
static tg_tensor *mm_2d(tg_ctx *ctx, tg_dtype dt)
{
    return tg_matmul(ctx, IN("a", 3, 4), IN("b", 4, 5), false, false);
}
static tg_tensor *mm_batched(tg_ctx *ctx, tg_dtype dt)
{
    return tg_matmul(ctx, IN("a", 2, 3, 4), IN("b", 2, 4, 2), false, false);
}
static tg_tensor *mm_bcast(tg_ctx *ctx, tg_dtype dt)
{
    return tg_matmul(ctx, IN("a", 2, 1, 3, 4), IN("b", 3, 4, 5), false, false);
}
static tg_tensor *mm_tb(tg_ctx *ctx, tg_dtype dt)
{
    return tg_matmul(ctx, IN("q", 2, 3, 4), IN("k", 2, 5, 4), false, true);
}
static tg_tensor *mm_ta(tg_ctx *ctx, tg_dtype dt)
{
    return tg_matmul(ctx, IN("a", 4, 3), IN("b", 2, 4, 1), true, false);
}
static tg_tensor *mm_tatb(tg_ctx *ctx, tg_dtype dt)
{
    return tg_matmul(ctx, IN("a", 2, 4, 3), IN("b", 1, 2, 4), true, true);
}
static tg_tensor *mm_one(tg_ctx *ctx, tg_dtype dt)
{
    return tg_matmul(ctx, IN("a", 1, 1), IN("b", 1, 1), false, false);
}
static tg_tensor *mm_shared(tg_ctx *ctx, tg_dtype dt)
{
    tg_tensor *x = IN("x", 3, 3);
    return tg_matmul(ctx, x, x, false, true); /* x x^T: both operands are one tensor */
}

/* ---- transpose / permute / reshape / narrow ---- */
static tg_tensor *tr_2d(tg_ctx *ctx, tg_dtype dt) { return tg_transpose(ctx, IN("x", 2, 3), 0, 1); }
static tg_tensor *tr_3d(tg_ctx *ctx, tg_dtype dt) { return tg_transpose(ctx, IN("x", 2, 3, 4), 1, 2); }
static tg_tensor *tr_neg(tg_ctx *ctx, tg_dtype dt) { return tg_transpose(ctx, IN("x", 1, 4, 1, 3), -1, 0); }
static tg_tensor *pm_3d(tg_ctx *ctx, tg_dtype dt)
{
    return tg_permute(ctx, IN("x", 2, 3, 4), (const int[]){2, 0, 1});
}
static tg_tensor *pm_heads(tg_ctx *ctx, tg_dtype dt)
{
    return tg_permute(ctx, IN("x", 2, 5, 3, 2), (const int[]){0, 2, 1, 3});
}
static tg_tensor *pm_1d(tg_ctx *ctx, tg_dtype dt)
{
    return tg_permute(ctx, IN("x", 5), (const int[]){0});
}
static tg_tensor *rs_infer(tg_ctx *ctx, tg_dtype dt)
{
    return tg_reshape(ctx, IN("x", 2, 6), TG_DIMS(3, -1));
}
static tg_tensor *rs_split(tg_ctx *ctx, tg_dtype dt)
{
    return tg_reshape(ctx, IN("x", 24), TG_DIMS(2, 3, 4));
}
static tg_tensor *rs_scalar(tg_ctx *ctx, tg_dtype dt)
{
    return tg_reshape(ctx, IN("x", 1, 1), 0, NULL);
}
/* contiguous: copies of views (permuted, narrowed) and of a contiguous tensor */
static tg_tensor *ct_perm(tg_ctx *ctx, tg_dtype dt)
{
    return tg_contiguous(ctx, tg_permute(ctx, IN("x", 2, 3, 4), (const int[]){1, 2, 0}));
}
static tg_tensor *ct_narrow(tg_ctx *ctx, tg_dtype dt)
{
    return tg_contiguous(ctx, tg_narrow(ctx, IN("x", 3, 5, 2), 1, 1, 3));
}
static tg_tensor *ct_plain(tg_ctx *ctx, tg_dtype dt) { return tg_contiguous(ctx, IN("x", 4)); }
static tg_tensor *nw_rows(tg_ctx *ctx, tg_dtype dt) { return tg_narrow(ctx, IN("x", 5, 3), 0, 1, 3); }
static tg_tensor *nw_mid(tg_ctx *ctx, tg_dtype dt) { return tg_narrow(ctx, IN("x", 2, 6, 2), 1, 4, 2); }
static tg_tensor *nw_one(tg_ctx *ctx, tg_dtype dt) { return tg_narrow(ctx, IN("x", 3), -1, 0, 1); }

/* ---- scale / add / mul ---- */
static tg_tensor *sc_2d(tg_ctx *ctx, tg_dtype dt) { return tg_scale(ctx, IN("x", 3, 4), 2.5); }
static tg_tensor *sc_one(tg_ctx *ctx, tg_dtype dt) { return tg_scale(ctx, IN("x", 1), -1.0); }
static tg_tensor *sc_3d(tg_ctx *ctx, tg_dtype dt) { return tg_scale(ctx, IN("x", 2, 3, 4), 0.125); }
static tg_tensor *add_same(tg_ctx *ctx, tg_dtype dt) { return tg_add(ctx, IN("a", 2, 3), IN("b", 2, 3)); }
static tg_tensor *add_bias(tg_ctx *ctx, tg_dtype dt)
{
    return tg_add(ctx, IN("x", 2, 3, 4), PARAM("bias", 4));
}
static tg_tensor *add_outer(tg_ctx *ctx, tg_dtype dt) { return tg_add(ctx, IN("a", 3, 1), IN("b", 1, 4)); }
static tg_tensor *add_self(tg_ctx *ctx, tg_dtype dt)
{
    tg_tensor *x = IN("x", 2, 2);
    return tg_add(ctx, x, x);
}
static tg_tensor *mul_same(tg_ctx *ctx, tg_dtype dt) { return tg_mul(ctx, IN("a", 2, 3), IN("b", 2, 3)); }
static tg_tensor *mul_bcast(tg_ctx *ctx, tg_dtype dt) { return tg_mul(ctx, IN("a", 2, 3, 4), IN("b", 3, 1)); }
static tg_tensor *mul_scalar(tg_ctx *ctx, tg_dtype dt) { return tg_mul(ctx, IN("a", 1), IN("b", 2, 2)); }
static tg_tensor *mul_self(tg_ctx *ctx, tg_dtype dt)
{
    tg_tensor *x = IN("x", 3, 2);
    return tg_mul(ctx, x, x);
}

/* ---- sum / mean ---- */
static tg_tensor *sum_ax0(tg_ctx *ctx, tg_dtype dt) { return tg_sum(ctx, IN("x", 3, 4), 0, false); }
static tg_tensor *sum_keep(tg_ctx *ctx, tg_dtype dt) { return tg_sum(ctx, IN("x", 2, 3, 4), -1, true); }
static tg_tensor *sum_all(tg_ctx *ctx, tg_dtype dt) { return tg_sum_all(ctx, IN("x", 2, 3)); }
static tg_tensor *sum_one(tg_ctx *ctx, tg_dtype dt) { return tg_sum(ctx, IN("x", 1), 0, false); }
static tg_tensor *mean_ax0(tg_ctx *ctx, tg_dtype dt) { return tg_mean(ctx, IN("x", 3, 4), 0, false); }
static tg_tensor *mean_mid(tg_ctx *ctx, tg_dtype dt) { return tg_mean(ctx, IN("x", 2, 3, 4), 1, true); }
static tg_tensor *mean_all(tg_ctx *ctx, tg_dtype dt) { return tg_mean_all(ctx, IN("x", 2, 3)); }
static tg_tensor *mean_one(tg_ctx *ctx, tg_dtype dt) { return tg_mean(ctx, IN("x", 1, 1), -1, false); }

/* ---- add_mask / softmax ---- */
static tg_tensor *block_mask(tg_ctx *ctx, tg_dtype dt, int rank, const int64_t *shape,
                             const int *blocked)
{
    tg_tensor *m = tg_const(ctx, dt, rank, shape, "mask");
    for (int64_t i = 0; m && i < tg_tensor_numel(m); i++)
        tg_set(m, i, blocked[i]);
    return m;
}
static tg_tensor *am_additive(tg_ctx *ctx, tg_dtype dt)
{
    tg_tensor *bias = IN("bias", 3, 4); /* a learned additive bias: differentiable */
    return tg_add_mask(ctx, IN("scores", 2, 3, 4), bias, TG_MASK_ADDITIVE);
}
static tg_tensor *am_padding(tg_ctx *ctx, tg_dtype dt)
{
    /* key padding (B, 1, 1, T_k) over scores (B, H, T_q, T_k), then softmax */
    static const int pad[] = {0, 0, 0, 1, 0, 0, 1, 1};
    tg_tensor *m = block_mask(ctx, dt, TG_DIMS(2, 1, 1, 4), pad);
    return tg_softmax(ctx, tg_add_mask(ctx, IN("scores", 2, 2, 3, 4), m, TG_MASK_BLOCK));
}
static tg_tensor *am_causal(tg_ctx *ctx, tg_dtype dt)
{
    static const int causal[] = {0, 1, 1, 0, 0, 1, 0, 0, 0};
    tg_tensor *m = block_mask(ctx, dt, TG_DIMS(3, 3), causal);
    return tg_softmax(ctx, tg_add_mask(ctx, IN("scores", 2, 3, 3), m, TG_MASK_BLOCK));
}
static tg_tensor *am_seed(tg_ctx *ctx, tg_dtype dt)
{
    /* the seeds' convention: scores += -1e9 * mask */
    static const int mk[] = {0, 0, 1, 0, 1, 1};
    tg_tensor *m = block_mask(ctx, dt, TG_DIMS(2, 3), mk);
    tg_tensor *s = tg_add_mask(ctx, IN("scores", 2, 2, 3), tg_scale(ctx, m, -1e9),
                               TG_MASK_ADDITIVE);
    return tg_softmax(ctx, s);
}
static tg_tensor *sm_rows(tg_ctx *ctx, tg_dtype dt) { return tg_softmax(ctx, IN("x", 2, 5)); }
static tg_tensor *sm_one(tg_ctx *ctx, tg_dtype dt) { return tg_softmax(ctx, IN("x", 3, 1)); }
static tg_tensor *sm_4d(tg_ctx *ctx, tg_dtype dt) { return tg_softmax(ctx, IN("x", 1, 2, 3, 7)); }
static tg_tensor *sm_masked_row(tg_ctx *ctx, tg_dtype dt)
{
    /* row 1 of each batch is fully masked: zeros and zero gradient, never NaN */
    static const int mk[] = {0, 0, 1, 1, 1, 1, 1, 1, 0, 1, 0, 0};
    tg_tensor *m = block_mask(ctx, dt, TG_DIMS(3, 4), mk);
    return tg_softmax(ctx, tg_add_mask(ctx, IN("scores", 2, 3, 4), m, TG_MASK_BLOCK));
}

/* ---- relu / gelu ---- */
static tg_tensor *relu_2d(tg_ctx *ctx, tg_dtype dt) { return tg_relu(ctx, away_from_zero(IN("x", 3, 4))); }
static tg_tensor *relu_one(tg_ctx *ctx, tg_dtype dt) { return tg_relu(ctx, away_from_zero(IN("x", 1))); }
static tg_tensor *relu_3d(tg_ctx *ctx, tg_dtype dt) { return tg_relu(ctx, away_from_zero(IN("x", 2, 3, 5))); }
/* relu_gate: t gated by r > 0; r (away from 0) takes a gradient too, which is 0 */
static tg_tensor *gate_2d(tg_ctx *ctx, tg_dtype dt) { return tg_relu_gate(ctx, IN("t", 3, 4), away_from_zero(IN("r", 3, 4))); }
static tg_tensor *gate_param(tg_ctx *ctx, tg_dtype dt) { return tg_relu_gate(ctx, PARAM("t", 2, 3, 5), away_from_zero(IN("r", 2, 3, 5))); }
static tg_tensor *gate_of_relu(tg_ctx *ctx, tg_dtype dt)
{
    tg_tensor *x = away_from_zero(IN("x", 4, 3));
    return tg_relu_gate(ctx, tg_mul(ctx, x, x), tg_relu(ctx, x)); /* r = relu(x), t from x too */
}
static tg_tensor *gelu_2d(tg_ctx *ctx, tg_dtype dt)
{
    tg_tensor *x = IN("x", 3, 4);
    tg_fill_uniform(x, -3, 3);
    return tg_gelu(ctx, x);
}
static tg_tensor *gelu_one(tg_ctx *ctx, tg_dtype dt) { return tg_gelu(ctx, IN("x", 1)); }
static tg_tensor *gelu_3d(tg_ctx *ctx, tg_dtype dt) { return tg_gelu(ctx, IN("x", 2, 2, 3)); }

/* ---- dense ---- */
static tg_tensor *dense_2d(tg_ctx *ctx, tg_dtype dt)
{
    return tg_dense(ctx, IN("x", 4, 3), PARAM("weight", 5, 3), PARAM("bias", 5));
}
static tg_tensor *dense_nobias(tg_ctx *ctx, tg_dtype dt)
{
    return tg_dense(ctx, IN("x", 2, 3, 4), PARAM("weight", 2, 4), NULL);
}
static tg_tensor *dense_one(tg_ctx *ctx, tg_dtype dt)
{
    return tg_dense(ctx, IN("x", 1), PARAM("weight", 1, 1), PARAM("bias", 1));
}
static tg_tensor *dense_4d(tg_ctx *ctx, tg_dtype dt)
{
    return tg_dense(ctx, IN("x", 2, 1, 2, 3), PARAM("weight", 6, 3), PARAM("bias", 6));
}
/* dense_act: dense with ReLU / GELU in the GEMM epilogue (the ReLU case has no pre-activation
 * within the finite-difference step of 0 for these draws; ffn relu covers it in a module) */
static tg_tensor *dense_gelu(tg_ctx *ctx, tg_dtype dt)
{
    return tg_dense_act(ctx, IN("x", 2, 3, 4), PARAM("weight", 5, 4), PARAM("bias", 5),
                        TG_ACT_GELU);
}
static tg_tensor *dense_gelu_nobias(tg_ctx *ctx, tg_dtype dt)
{
    return tg_dense_act(ctx, IN("x", 3, 4), PARAM("weight", 2, 4), NULL, TG_ACT_GELU);
}
static tg_tensor *dense_relu(tg_ctx *ctx, tg_dtype dt)
{
    return tg_dense_act(ctx, IN("x", 4, 3), PARAM("weight", 5, 3), PARAM("bias", 5),
                        TG_ACT_RELU);
}

/* ---- layer_norm ---- */
static tg_tensor *ln_affine(tg_ctx *ctx, tg_dtype dt)
{
    return tg_layer_norm(ctx, IN("x", 3, 5), PARAM("weight", 5), PARAM("bias", 5), 1e-5);
}
static tg_tensor *ln_plain(tg_ctx *ctx, tg_dtype dt)
{
    return tg_layer_norm(ctx, IN("x", 2, 3, 4), NULL, NULL, 1e-5);
}
static tg_tensor *ln_one(tg_ctx *ctx, tg_dtype dt)
{
    /* D = 1: every row is constant, y = beta, dx = 0 */
    return tg_layer_norm(ctx, IN("x", 4, 1), PARAM("weight", 1), PARAM("bias", 1), 1e-5);
}
static tg_tensor *ln_const_row(tg_ctx *ctx, tg_dtype dt)
{
    tg_tensor *x = IN("x", 2, 6);
    for (int j = 0; j < 6; j++)
        tg_set(x, j, 0.75); /* row 0 constant */
    return tg_layer_norm(ctx, x, PARAM("weight", 6), PARAM("bias", 6), 1e-5);
}


/* ---- dropout (the RNG is replayed for every forward, so the mask is fixed) ---- */
static tg_tensor *do_2d(tg_ctx *ctx, tg_dtype dt) { return tg_dropout(ctx, IN("x", 4, 5), 0.3); }
static tg_tensor *do_one(tg_ctx *ctx, tg_dtype dt) { return tg_dropout(ctx, IN("x", 1), 0.5); }
static tg_tensor *do_3d(tg_ctx *ctx, tg_dtype dt) { return tg_dropout(ctx, IN("x", 2, 3, 4), 0.1); }
static tg_tensor *do_eval(tg_ctx *ctx, tg_dtype dt)
{
    tg_ctx_set_training(ctx, false);
    return tg_dropout(ctx, IN("x", 3, 2), 0.5);
}

/* ---- flash_attention ---- */
static tg_tensor *fa_plain(tg_ctx *ctx, tg_dtype dt)
{
    return tg_flash_attention(ctx, IN("q", 2, 3, 4), IN("k", 2, 5, 4), IN("v", 2, 5, 3), NULL,
                              TG_MASK_ADDITIVE, NULL, false, 0);
}
static tg_tensor *fa_masks(tg_ctx *ctx, tg_dtype dt)
{
    /* a learned additive bias (differentiable), key padding computed by an op (read in
     * backward: the planner keeps it) and causal; batch 1 pads key 0, so its query row 0 is
     * fully masked (zeros, zero gradient) */
    static const int pad[] = {0, 0, 0, 1, 1, 0, 0, 0};
    tg_tensor *p = tg_scale(ctx, block_mask(ctx, dt, TG_DIMS(2, 1, 1, 4), pad), 2.0);
    return tg_flash_attention(ctx, IN("q", 2, 2, 4, 3), IN("k", 2, 2, 4, 3),
                              IN("v", 2, 2, 4, 2), IN("bias", 4, 4), TG_MASK_ADDITIVE, p, true,
                              0.8);
}
static tg_tensor *fa_bcast(tg_ctx *ctx, tg_dtype dt)
{
    /* k shared by the heads, v by the batch (their gradients sum over the broadcast), and a
     * boolean (T_q, T_k) mask computed by an op */
    static const int mk[] = {0, 1, 0, 0, 1, 1, 0, 0, 0, 1, 0, 0, 0, 1, 0};
    tg_tensor *m = tg_scale(ctx, block_mask(ctx, dt, TG_DIMS(3, 5), mk), 1.0);
    return tg_flash_attention(ctx, IN("q", 2, 2, 3, 4), IN("k", 2, 1, 5, 4), IN("v", 5, 2), m,
                              TG_MASK_BLOCK, NULL, false, 0);
}
static tg_tensor *fa_views(tg_ctx *ctx, tg_dtype dt)
{
    /* heads split by views as MHA does: (B, T, H, Dh) transposed to (B, H, T, Dh) */
    tg_tensor *q = tg_transpose(ctx, IN("q", 2, 3, 2, 2), 1, 2);
    tg_tensor *kv = tg_transpose(ctx, IN("kv", 2, 4, 2, 2), 1, 2);
    return tg_flash_attention(ctx, q, kv, kv, NULL, TG_MASK_ADDITIVE, NULL, true, 0);
}
static tg_tensor *fa_one(tg_ctx *ctx, tg_dtype dt)
{
    return tg_flash_attention(ctx, IN("q", 1, 1), IN("k", 1, 1), IN("v", 1, 2), NULL,
                              TG_MASK_ADDITIVE, NULL, false, 0);
}
static tg_tensor *fa_small_lanes(tg_ctx *ctx, tg_dtype dt)
{
    /* the small-T path (T_k <= 32) with d_k 19 and d_v 17 (full and partial 16-lane chunks of
     * the dot products), T_q > T_k, a learned additive mask and causal */
    return tg_flash_attention(ctx, IN("q", 2, 6, 19), IN("k", 2, 4, 19), IN("v", 2, 4, 17),
                              IN("bias", 6, 4), TG_MASK_ADDITIVE, NULL, true, 0.3);
}
static tg_tensor *fa_small_self(tg_ctx *ctx, tg_dtype dt)
{
    /* MHA's self-attention layout on the small-T path: q, k, v narrow views of one
     * (B, T, 3 d) tensor; a boolean key mask blocks every key of query row 0 in batch 1 */
    static const int mk[] = {0, 0, 1, 0, 0, 0, 1, 0, 0, 1, 1, 1, 0, 1, 0, 0, 0, 0};
    tg_tensor *x = IN("x", 2, 3, 12);
    tg_tensor *m = tg_scale(ctx, block_mask(ctx, dt, TG_DIMS(2, 3, 3), mk), 1.0);
    return tg_flash_attention(ctx, tg_narrow(ctx, x, -1, 0, 4), tg_narrow(ctx, x, -1, 4, 4),
                              tg_narrow(ctx, x, -1, 8, 4), m, TG_MASK_BLOCK, NULL, false, 0);
}
static tg_tensor *fa_tiled(tg_ctx *ctx, tg_dtype dt)
{
    /* T_k 33 > 32: the tiled path (two key blocks), causal, T_q 34 (two query blocks) */
    return tg_flash_attention(ctx, IN("q", 34, 2), IN("k", 33, 2), IN("v", 33, 1), NULL,
                              TG_MASK_ADDITIVE, NULL, true, 0);
}

/* ---- modules: every input and parameter is checked ---- */
static tg_tensor *sdpa_plain(tg_ctx *ctx, tg_dtype dt)
{
    return tg_sdpa(ctx, IN("q", 2, 3, 4), IN("k", 2, 5, 4), IN("v", 2, 5, 3), NULL, 0, NULL);
}
static tg_tensor *sdpa_nobatch(tg_ctx *ctx, tg_dtype dt)
{
    return tg_sdpa(ctx, IN("q", 1, 2), IN("k", 3, 2), IN("v", 3, 1), NULL, 0, NULL);
}
static tg_tensor *sdpa_causal(tg_ctx *ctx, tg_dtype dt)
{
    tg_attn_masks m = {0};
    m.causal = true;
    return tg_sdpa(ctx, IN("q", 2, 2, 4, 3), IN("k", 2, 2, 4, 3), IN("v", 2, 2, 4, 2), &m, 0, NULL);
}
static tg_tensor *sdpa_masked_row(tg_ctx *ctx, tg_dtype dt)
{
    static const int mk[] = {0, 1, 1, 1, 1, 1, 0, 0, 1}; /* query row 1 sees nothing */
    tg_attn_masks m = {0};
    m.attn_mask = block_mask(ctx, dt, TG_DIMS(3, 3), mk);
    m.attn_mask_kind = TG_MASK_BLOCK;
    return tg_sdpa(ctx, IN("q", 2, 3, 4), IN("k", 2, 3, 4), IN("v", 2, 3, 2), &m, 0.7, NULL);
}
static tg_tensor *mha_build(tg_ctx *ctx, tg_dtype dt, int64_t D, int64_t H, bool self,
                            tg_attn_masks *m)
{
    tg_mha mha;
    if (tg_mha_init(ctx, &mha, dt, D, H, NULL) != TG_OK)
        return NULL;
    /* non-zero biases so their gradients are exercised like the weights' */
    tg_fill_uniform(mha.in_proj_bias, -0.5, 0.5);
    tg_fill_uniform(mha.out_proj_bias, -0.5, 0.5);
    if (self) {
        tg_tensor *x = IN("x", 2, 3, D);
        return tg_mha_forward(ctx, &mha, x, x, x, m, NULL);
    }
    return tg_mha_forward(ctx, &mha, IN("query", 2, 2, D), IN("key", 2, 4, D),
                          IN("value", 2, 4, D), m, NULL);
}
static tg_tensor *mha_self(tg_ctx *ctx, tg_dtype dt) { return mha_build(ctx, dt, 4, 2, true, NULL); }
static tg_tensor *mha_cross(tg_ctx *ctx, tg_dtype dt) { return mha_build(ctx, dt, 6, 3, false, NULL); }
static tg_tensor *mha_masks(tg_ctx *ctx, tg_dtype dt)
{
    /* causal + key padding, batch 1 pads key 0: its query row 0 is fully masked */
    static const int pad[] = {0, 0, 0, 1, 0, 0};
    tg_attn_masks m = {0};
    m.causal = true;
    m.key_padding_mask = block_mask(ctx, dt, TG_DIMS(2, 3), pad);
    return mha_build(ctx, dt, 4, 2, true, &m);
}
static tg_tensor *mha_one_head(tg_ctx *ctx, tg_dtype dt) { return mha_build(ctx, dt, 3, 1, true, NULL); }
static tg_tensor *ffn_case(tg_ctx *ctx, tg_dtype dt, tg_activation act)
{
    tg_ffn f;
    if (tg_ffn_init(ctx, &f, dt, 4, 6, act, NULL) != TG_OK)
        return NULL;
    return tg_ffn_forward(ctx, &f, IN("x", 2, 3, 4));
}
static tg_tensor *ffn_relu(tg_ctx *ctx, tg_dtype dt) { return ffn_case(ctx, dt, TG_ACT_RELU); }
static tg_tensor *ffn_gelu(tg_ctx *ctx, tg_dtype dt) { return ffn_case(ctx, dt, TG_ACT_GELU); }
static tg_tensor *ffn_one(tg_ctx *ctx, tg_dtype dt)
{
    tg_ffn f;
    if (tg_ffn_init(ctx, &f, dt, 1, 1, TG_ACT_GELU, NULL) != TG_OK)
        return NULL;
    return tg_ffn_forward(ctx, &f, IN("x", 1, 1));
}
static tg_tensor *enc_case(tg_ctx *ctx, tg_dtype dt, bool pre, tg_activation act, bool masked)
{
    tg_encoder_config c = tg_encoder_config_default(4, 2);
    c.d_ff = 6;
    c.norm_first = pre;
    c.activation = act;
    tg_encoder_layer l;
    if (tg_encoder_layer_init(ctx, &l, dt, &c, NULL) != TG_OK)
        return NULL;
    tg_fill_uniform(l.norm1_weight, 0.5, 1.5);
    tg_fill_uniform(l.norm2_bias, -0.5, 0.5);
    tg_fill_uniform(l.self_attn.in_proj_bias, -0.5, 0.5);
    tg_attn_masks m = {0};
    static const int pad[] = {0, 0, 1, 1, 0, 0};
    if (masked) {
        m.causal = true;
        m.key_padding_mask = block_mask(ctx, dt, TG_DIMS(2, 3), pad);
    }
    return tg_encoder_layer_forward(ctx, &l, IN("x", 2, 3, 4), masked ? &m : NULL);
}
static tg_tensor *enc_post(tg_ctx *ctx, tg_dtype dt) { return enc_case(ctx, dt, false, TG_ACT_RELU, false); }
static tg_tensor *enc_pre(tg_ctx *ctx, tg_dtype dt) { return enc_case(ctx, dt, true, TG_ACT_GELU, false); }
static tg_tensor *enc_masked(tg_ctx *ctx, tg_dtype dt) { return enc_case(ctx, dt, true, TG_ACT_RELU, true); }

/* ---- decoder layer and encoder-decoder ---- */
static void dec_randomise(tg_decoder_layer *l)
{
    /* non-trivial norms and biases so their gradients are exercised like the weights' */
    tg_fill_uniform(l->norm1_weight, 0.5, 1.5);
    tg_fill_uniform(l->norm2_bias, -0.5, 0.5);
    tg_fill_uniform(l->norm3_weight, 0.5, 1.5);
    tg_fill_uniform(l->self_attn.in_proj_bias, -0.5, 0.5);
    tg_fill_uniform(l->multihead_attn.in_proj_bias, -0.5, 0.5);
}
static tg_tensor *dec_case(tg_ctx *ctx, tg_dtype dt, bool pre, tg_activation act, bool masked)
{
    tg_decoder_config c = tg_encoder_config_default(4, 2);
    c.d_ff = 6;
    c.norm_first = pre;
    c.activation = act;
    tg_decoder_layer l;
    if (tg_decoder_layer_init(ctx, &l, dt, &c, NULL) != TG_OK)
        return NULL;
    dec_randomise(&l);
    tg_attn_masks tm = {0}, mm = {0};
    /* causal + target padding; memory padding, and memory_mask row 1 fully blocked */
    static const int tpad[] = {0, 0, 1, 0, 0, 0};
    static const int mpad[] = {0, 0, 0, 1, 0, 1, 0, 0};
    static const int mrow[] = {0, 1, 0, 0, 1, 1, 1, 1, 0, 0, 1, 0};
    if (masked) {
        tm.causal = true;
        tm.key_padding_mask = block_mask(ctx, dt, TG_DIMS(2, 3), tpad);
        mm.key_padding_mask = block_mask(ctx, dt, TG_DIMS(2, 4), mpad);
        mm.attn_mask = block_mask(ctx, dt, TG_DIMS(3, 4), mrow);
        mm.attn_mask_kind = TG_MASK_BLOCK;
    }
    return tg_decoder_layer_forward(ctx, &l, IN("x", 2, 3, 4), IN("memory", 2, 4, 4),
                                    masked ? &tm : NULL, masked ? &mm : NULL);
}
static tg_tensor *dec_post(tg_ctx *ctx, tg_dtype dt) { return dec_case(ctx, dt, false, TG_ACT_RELU, false); }
static tg_tensor *dec_pre(tg_ctx *ctx, tg_dtype dt) { return dec_case(ctx, dt, true, TG_ACT_GELU, false); }
static tg_tensor *dec_masked(tg_ctx *ctx, tg_dtype dt) { return dec_case(ctx, dt, true, TG_ACT_RELU, true); }
static tg_tensor *encdec_case(tg_ctx *ctx, tg_dtype dt)
{
    tg_encoder_config c = tg_encoder_config_default(4, 2);
    c.d_ff = 6;
    c.activation = TG_ACT_GELU;
    tg_encoder_decoder m;
    if (tg_encoder_decoder_init(ctx, &m, dt, &c, 1, 2, NULL) != TG_OK)
        return NULL;
    for (int i = 0; i < 2; i++)
        dec_randomise(&m.decoder.layers[i]);
    tg_fill_uniform(m.encoder.norm_bias, -0.5, 0.5);
    static const int spad[] = {0, 0, 0, 0, 0, 1};
    tg_attn_masks sm = {0}, tm = {0}, mm = {0};
    sm.key_padding_mask = block_mask(ctx, dt, TG_DIMS(2, 3), spad);
    mm.key_padding_mask = sm.key_padding_mask;
    tm.causal = true;
    return tg_encoder_decoder_forward(ctx, &m, IN("src", 2, 3, 4), IN("tgt", 2, 2, 4), &sm, &tm,
                                      &mm);
}

/* ---- embedding / cross_entropy (ids and targets are i32 constants) ---- */
static tg_tensor *ids_const(tg_ctx *ctx, int rank, const int64_t *shape, int64_t V,
                            const char *name)
{
    tg_tensor *t = tg_const(ctx, TG_I32, rank, shape, name);
    for (int64_t i = 0; t && i < tg_tensor_numel(t); i++)
        tg_set(t, i, (double)(tg_rng_u64(ctx) % (uint64_t)V));
    return t;
}
static tg_tensor *emb_2d(tg_ctx *ctx, tg_dtype dt)
{
    tg_tensor *ids = ids_const(ctx, TG_DIMS(2, 6), 4, "ids"); /* repeats guaranteed */
    return tg_embedding(ctx, ids, PARAM("weight", 4, 3));
}
static tg_tensor *emb_one(tg_ctx *ctx, tg_dtype dt)
{
    return tg_embedding(ctx, ids_const(ctx, TG_DIMS(1), 1, "ids"), PARAM("weight", 1, 1));
}
static tg_tensor *emb_1d(tg_ctx *ctx, tg_dtype dt)
{
    return tg_embedding(ctx, ids_const(ctx, TG_DIMS(5), 7, "ids"), PARAM("weight", 7, 2));
}
static tg_tensor *xent_2d(tg_ctx *ctx, tg_dtype dt)
{
    return tg_cross_entropy(ctx, IN("logits", 4, 5), ids_const(ctx, TG_DIMS(4), 5, "targets"), -100);
}
static tg_tensor *xent_ignore(tg_ctx *ctx, tg_dtype dt)
{
    tg_tensor *t = ids_const(ctx, TG_DIMS(2, 3), 6, "targets");
    tg_set(t, 1, -100);
    tg_set(t, 4, -100);
    return tg_cross_entropy(ctx, IN("logits", 2, 3, 6), t, -100);
}
static tg_tensor *xent_one(tg_ctx *ctx, tg_dtype dt)
{
    return tg_cross_entropy(ctx, IN("logits", 1, 1), ids_const(ctx, TG_DIMS(1), 1, "targets"), -1);
}
static tg_tensor *xent_large(tg_ctx *ctx, tg_dtype dt)
{
    /* logits around +-1e4: still finite, gradients exact. (In f32 a 1e4 logit has an ulp of
     * 1e-3, the size of the f32 difference step, so f32 uses +-30.) */
    double big = dt == TG_F64 ? 1e4 : 30;
    tg_tensor *x = IN("logits", 3, 4);
    for (int64_t i = 0; i < 12; i++)
        tg_set(x, i, tg_get(x, i) + (i % 2 ? big : -big));
    return tg_cross_entropy(ctx, x, ids_const(ctx, TG_DIMS(3), 4, "targets"), -100);
}

/* label smoothing (tg_cross_entropy_smoothed) */
static tg_tensor *xent_ls(tg_ctx *ctx, tg_dtype dt)
{
    return tg_cross_entropy_smoothed(ctx, IN("logits", 4, 5),
                                     ids_const(ctx, TG_DIMS(4), 5, "targets"), -100, 0.1);
}
static tg_tensor *xent_ls_ignore(tg_ctx *ctx, tg_dtype dt)
{
    tg_tensor *t = ids_const(ctx, TG_DIMS(2, 3), 6, "targets");
    tg_set(t, 1, -100);
    tg_set(t, 4, -100);
    return tg_cross_entropy_smoothed(ctx, IN("logits", 2, 3, 6), t, -100, 0.3);
}
static tg_tensor *xent_ls_class_ignored(tg_ctx *ctx, tg_dtype dt)
{
    /* ignore_index 2 is also a class: rows with target 2 are skipped */
    tg_tensor *t = ids_const(ctx, TG_DIMS(5), 4, "targets");
    tg_set(t, 0, 2);
    tg_set(t, 3, 1);
    return tg_cross_entropy_smoothed(ctx, IN("logits", 5, 4), t, 2, 1.0);
}
static tg_tensor *xent_ls_all_ignored(tg_ctx *ctx, tg_dtype dt)
{
    tg_tensor *t = ids_const(ctx, TG_DIMS(2), 3, "targets");
    tg_fill(t, -1);
    return tg_cross_entropy_smoothed(ctx, IN("logits", 2, 3), t, -1, 0.2);
}
static tg_tensor *xent_ls_large(tg_ctx *ctx, tg_dtype dt)
{
    double big = dt == TG_F64 ? 1e4 : 30; /* as the "large" case above */
    tg_tensor *x = IN("logits", 3, 4);
    for (int64_t i = 0; i < 12; i++)
        tg_set(x, i, tg_get(x, i) + (i % 2 ? big : -big));
    return tg_cross_entropy_smoothed(ctx, x, ids_const(ctx, TG_DIMS(3), 4, "targets"), -100,
                                     0.1);
}

/* ---- transformer (embedding, layers, final norm, head; ids are constants) ---- */
static tg_tensor *tf_case(tg_ctx *ctx, tg_dtype dt, bool causal, bool tied, tg_pos_kind pos)
{
    tg_transformer_config c;
    memset(&c, 0, sizeof c);
    c.vocab_size = 5;
    c.max_seq_len = 4;
    c.n_layers = 1;
    c.layer = tg_encoder_config_default(4, 2);
    c.layer.d_ff = 6;
    c.layer.norm_first = true;
    c.causal = causal;
    c.tie_weights = tied;
    c.pos = pos;
    tg_transformer m;
    if (tg_transformer_init(ctx, &m, dt, &c) != TG_OK)
        return NULL;
    tg_tensor *ids = ids_const(ctx, TG_DIMS(2, 3), 5, "ids");
    tg_tensor *tgt = ids_const(ctx, TG_DIMS(2, 3), 5, "targets");
    return tg_cross_entropy(ctx, tg_transformer_forward(ctx, &m, ids, NULL), tgt, -1);
}
static tg_tensor *tf_lm(tg_ctx *ctx, tg_dtype dt) { return tf_case(ctx, dt, true, false, TG_POS_LEARNED); }
static tg_tensor *tf_tied(tg_ctx *ctx, tg_dtype dt) { return tf_case(ctx, dt, true, true, TG_POS_SINUSOIDAL); }
static tg_tensor *tf_enc(tg_ctx *ctx, tg_dtype dt) { return tf_case(ctx, dt, false, false, TG_POS_LEARNED); }
static tg_tensor *tf_seq2seq(tg_ctx *ctx, tg_dtype dt)
{
    tg_transformer_config c;
    memset(&c, 0, sizeof c);
    c.vocab_size = 5;
    c.max_seq_len = 4;
    c.n_layers = 1;
    c.n_decoder_layers = 1;
    c.layer = tg_encoder_config_default(4, 2);
    c.layer.d_ff = 6;
    c.layer.norm_first = true;
    c.pos = TG_POS_SINUSOIDAL;
    tg_transformer m;
    if (tg_transformer_init(ctx, &m, dt, &c) != TG_OK)
        return NULL;
    static const int spad[] = {0, 0, 0, 0, 0, 1, 1, 0};
    tg_tensor *src = ids_const(ctx, TG_DIMS(2, 4), 5, "src_ids");
    tg_tensor *tgt = ids_const(ctx, TG_DIMS(2, 3), 5, "tgt_ids");
    tg_tensor *y = ids_const(ctx, TG_DIMS(2, 3), 5, "targets");
    return tg_cross_entropy(ctx, tg_transformer_forward_seq2seq(
                                     ctx, &m, src, tgt, block_mask(ctx, dt, TG_DIMS(2, 4), spad),
                                     NULL), y, -1);
}

/* ---- more elementwise ops, reductions and losses: sub, div, neg, exp, log, sqrt, tanh, sigmoid, silu, gelu_tanh,
 * log_softmax, max, concat, mse_loss ---- */
/* A differentiable input uniform in [lo, hi). */
#define INR(name, lo, hi, ...) leaf(ctx, dt, TG_DIMS(__VA_ARGS__), name, lo, hi)

/* |values| pushed into [m, 1 + m) keeping their sign (denominators away from 0). */
static tg_tensor *away_by(tg_tensor *t, double m)
{
    for (int64_t i = 0; t && i < tg_tensor_numel(t); i++) {
        double v = tg_get(t, i);
        tg_set(t, i, v >= 0 ? v + m : v - m);
    }
    return t;
}

/* Distinct values at least 2/n - 0.01 apart, in a scrambled order ((37 i + 3) mod n is a
 * permutation for n not a multiple of 37), plus a little of the random fill: max's arg-max
 * never changes under the central-difference steps. */
static tg_tensor *distinct(tg_tensor *t)
{
    int64_t n = t ? tg_tensor_numel(t) : 0;
    for (int64_t i = 0; i < n; i++)
        tg_set(t, i, -1 + 2.0 * (double)((37 * i + 3) % n) / (double)n +
                         0.005 * (tg_get(t, i) + 1));
    return t;
}

static tg_tensor *sub_same(tg_ctx *ctx, tg_dtype dt) { return tg_sub(ctx, IN("a", 2, 3), IN("b", 2, 3)); }
static tg_tensor *sub_bcast(tg_ctx *ctx, tg_dtype dt) { return tg_sub(ctx, IN("a", 2, 3, 4), IN("b", 3, 1)); }
static tg_tensor *sub_left(tg_ctx *ctx, tg_dtype dt) { return tg_sub(ctx, IN("a", 1), IN("b", 2, 2)); }
static tg_tensor *sub_outer(tg_ctx *ctx, tg_dtype dt) { return tg_sub(ctx, IN("a", 3, 1), IN("b", 1, 4)); }
static tg_tensor *sub_self(tg_ctx *ctx, tg_dtype dt)
{
    tg_tensor *x = IN("x", 2, 3);
    return tg_sub(ctx, tg_mul(ctx, x, x), x); /* x^2 - x: x on both sides */
}
static tg_tensor *div_same(tg_ctx *ctx, tg_dtype dt)
{
    return tg_div(ctx, IN("a", 2, 3), away_by(IN("b", 2, 3), 0.5));
}
static tg_tensor *div_bcast(tg_ctx *ctx, tg_dtype dt)
{
    return tg_div(ctx, IN("a", 2, 3, 4), away_by(IN("b", 3, 1), 0.5));
}
static tg_tensor *div_left(tg_ctx *ctx, tg_dtype dt)
{
    return tg_div(ctx, IN("a", 1), away_by(IN("b", 2, 2), 0.5));
}
static tg_tensor *div_outer(tg_ctx *ctx, tg_dtype dt)
{
    return tg_div(ctx, IN("a", 3, 1), away_by(IN("b", 1, 4), 0.5));
}
static tg_tensor *div_self(tg_ctx *ctx, tg_dtype dt)
{
    tg_tensor *x = away_by(IN("x", 3, 2), 0.5);
    return tg_div(ctx, tg_add(ctx, x, tg_mul(ctx, x, x)), x); /* (x + x^2) / x */
}
static tg_tensor *neg_2d(tg_ctx *ctx, tg_dtype dt) { return tg_neg(ctx, IN("x", 3, 4)); }
static tg_tensor *neg_one(tg_ctx *ctx, tg_dtype dt) { return tg_neg(ctx, IN("x", 1)); }
static tg_tensor *neg_scalar(tg_ctx *ctx, tg_dtype dt) { return tg_neg(ctx, leaf(ctx, dt, 0, NULL, "x", -1, 1)); }
static tg_tensor *exp_2d(tg_ctx *ctx, tg_dtype dt) { return tg_exp(ctx, INR("x", -2, 2, 3, 4)); }
static tg_tensor *exp_one(tg_ctx *ctx, tg_dtype dt) { return tg_exp(ctx, IN("x", 1)); }
static tg_tensor *exp_3d(tg_ctx *ctx, tg_dtype dt) { return tg_exp(ctx, IN("x", 2, 2, 3)); }
static tg_tensor *log_2d(tg_ctx *ctx, tg_dtype dt) { return tg_log(ctx, INR("x", 0.5, 2, 3, 4)); }
static tg_tensor *log_one(tg_ctx *ctx, tg_dtype dt) { return tg_log(ctx, INR("x", 0.5, 2, 1)); }
static tg_tensor *log_3d(tg_ctx *ctx, tg_dtype dt) { return tg_log(ctx, INR("x", 0.2, 3, 2, 3, 2)); }
static tg_tensor *sqrt_2d(tg_ctx *ctx, tg_dtype dt) { return tg_sqrt(ctx, INR("x", 0.5, 2, 3, 4)); }
static tg_tensor *sqrt_one(tg_ctx *ctx, tg_dtype dt) { return tg_sqrt(ctx, INR("x", 0.5, 2, 1)); }
static tg_tensor *sqrt_3d(tg_ctx *ctx, tg_dtype dt) { return tg_sqrt(ctx, INR("x", 0.2, 4, 2, 3, 2)); }
static tg_tensor *tanh_2d(tg_ctx *ctx, tg_dtype dt) { return tg_tanh(ctx, INR("x", -2, 2, 3, 4)); }
static tg_tensor *tanh_one(tg_ctx *ctx, tg_dtype dt) { return tg_tanh(ctx, IN("x", 1)); }
static tg_tensor *tanh_3d(tg_ctx *ctx, tg_dtype dt) { return tg_tanh(ctx, IN("x", 2, 2, 3)); }
static tg_tensor *sigmoid_2d(tg_ctx *ctx, tg_dtype dt) { return tg_sigmoid(ctx, INR("x", -3, 3, 3, 4)); }
static tg_tensor *sigmoid_one(tg_ctx *ctx, tg_dtype dt) { return tg_sigmoid(ctx, IN("x", 1)); }
static tg_tensor *sigmoid_3d(tg_ctx *ctx, tg_dtype dt) { return tg_sigmoid(ctx, IN("x", 2, 3, 2)); }
static tg_tensor *silu_2d(tg_ctx *ctx, tg_dtype dt) { return tg_silu(ctx, INR("x", -4, 4, 3, 4)); }
static tg_tensor *silu_one(tg_ctx *ctx, tg_dtype dt) { return tg_silu(ctx, IN("x", 1)); }
static tg_tensor *silu_3d(tg_ctx *ctx, tg_dtype dt) { return tg_silu(ctx, IN("x", 2, 3, 2)); }
static tg_tensor *gelu_tanh_2d(tg_ctx *ctx, tg_dtype dt) { return tg_gelu_tanh(ctx, INR("x", -3, 3, 3, 4)); }
static tg_tensor *gelu_tanh_one(tg_ctx *ctx, tg_dtype dt) { return tg_gelu_tanh(ctx, IN("x", 1)); }
static tg_tensor *gelu_tanh_3d(tg_ctx *ctx, tg_dtype dt) { return tg_gelu_tanh(ctx, IN("x", 2, 2, 3)); }
static tg_tensor *erf_2d(tg_ctx *ctx, tg_dtype dt) { return tg_erf(ctx, INR("x", -3, 3, 3, 4)); }
static tg_tensor *erf_one(tg_ctx *ctx, tg_dtype dt) { return tg_erf(ctx, IN("x", 1)); }
static tg_tensor *erf_3d(tg_ctx *ctx, tg_dtype dt) { return tg_erf(ctx, IN("x", 2, 2, 3)); }
static tg_tensor *lsm_rows(tg_ctx *ctx, tg_dtype dt) { return tg_log_softmax(ctx, INR("x", -2, 2, 2, 5)); }
static tg_tensor *lsm_one(tg_ctx *ctx, tg_dtype dt) { return tg_log_softmax(ctx, IN("x", 3, 1)); }
static tg_tensor *lsm_4d(tg_ctx *ctx, tg_dtype dt) { return tg_log_softmax(ctx, IN("x", 1, 2, 3, 7)); }
static tg_tensor *lsm_large(tg_ctx *ctx, tg_dtype dt)
{
    double big = dt == TG_F64 ? 1e4 : 30; /* as cross_entropy's "large" case */
    tg_tensor *x = IN("x", 3, 4);
    for (int64_t i = 0; i < 12; i++)
        tg_set(x, i, tg_get(x, i) + (i % 3 ? big : -big));
    return tg_log_softmax(ctx, x);
}
static tg_tensor *max_ax0(tg_ctx *ctx, tg_dtype dt) { return tg_max(ctx, distinct(IN("x", 3, 4)), 0, false); }
static tg_tensor *max_keep(tg_ctx *ctx, tg_dtype dt) { return tg_max(ctx, distinct(IN("x", 2, 3, 4)), -1, true); }
static tg_tensor *max_mid(tg_ctx *ctx, tg_dtype dt) { return tg_max(ctx, distinct(IN("x", 2, 3, 4)), 1, false); }
static tg_tensor *max_1d(tg_ctx *ctx, tg_dtype dt) { return tg_max(ctx, distinct(IN("x", 5)), 0, false); }
static tg_tensor *max_one(tg_ctx *ctx, tg_dtype dt) { return tg_max(ctx, IN("x", 2, 1), 1, false); }
static tg_tensor *cat_rows(tg_ctx *ctx, tg_dtype dt)
{
    tg_tensor *xs[2] = {IN("a", 2, 3), IN("b", 4, 3)};
    return tg_concat(ctx, xs, 2, 0);
}
static tg_tensor *cat_mid(tg_ctx *ctx, tg_dtype dt)
{
    tg_tensor *xs[3] = {IN("a", 2, 1, 3), IN("b", 2, 4, 3), IN("c", 2, 2, 3)};
    return tg_concat(ctx, xs, 3, 1);
}
static tg_tensor *cat_last(tg_ctx *ctx, tg_dtype dt)
{
    tg_tensor *xs[2] = {IN("a", 2, 2), PARAM("b", 2, 3)};
    return tg_concat(ctx, xs, 2, -1);
}
static tg_tensor *cat_one(tg_ctx *ctx, tg_dtype dt)
{
    tg_tensor *x = IN("x", 3);
    return tg_concat(ctx, &x, 1, 0);
}
static tg_tensor *cat_self(tg_ctx *ctx, tg_dtype dt)
{
    tg_tensor *x = IN("x", 2, 2);
    tg_tensor *xs[3] = {x, IN("y", 2, 1), x};
    return tg_concat(ctx, xs, 3, 1);
}
static tg_tensor *cat_eight(tg_ctx *ctx, tg_dtype dt)
{
    tg_tensor *xs[8];
    for (int k = 0; k < 8; k++)
        xs[k] = IN("x", 1 + k % 3, 2);
    return tg_concat(ctx, xs, 8, 0);
}
static tg_tensor *mse_mean(tg_ctx *ctx, tg_dtype dt)
{
    return tg_mse_loss(ctx, IN("input", 3, 4), IN("target", 3, 4), TG_REDUCTION_MEAN);
}
static tg_tensor *mse_sum(tg_ctx *ctx, tg_dtype dt)
{
    tg_tensor *t = tg_const(ctx, dt, TG_DIMS(2, 3, 2), "target");
    tg_fill_uniform(t, -1, 1);
    return tg_mse_loss(ctx, IN("input", 2, 3, 2), t, TG_REDUCTION_SUM);
}
static tg_tensor *mse_none(tg_ctx *ctx, tg_dtype dt)
{
    return tg_mse_loss(ctx, IN("input", 4), IN("target", 4), TG_REDUCTION_NONE);
}
static tg_tensor *mse_one(tg_ctx *ctx, tg_dtype dt)
{
    return tg_mse_loss(ctx, IN("input", 1), IN("target", 1), TG_REDUCTION_MEAN);
}

/* ---- custom (tg_custom_op: user callbacks, public API only) ---- */
/* Element i of a call array of the call's dtype, and += into one. */
static double cget(const tg_custom_call *c, const void *p, int64_t i)
{
    return c->dtype == TG_F32 ? (double)((const float *)p)[i] : ((const double *)p)[i];
}
static void cset(const tg_custom_call *c, void *p, int64_t i, double v)
{
    if (c->dtype == TG_F32)
        ((float *)p)[i] = (float)v;
    else
        ((double *)p)[i] = v;
}
static void cacc(const tg_custom_call *c, void *p, int64_t i, double v)
{
    cset(c, p, i, cget(c, p, i) + v);
}

/* softplus: y = log(1 + e^x) (stable form), dx += dy * sigmoid(x); backward reads x */
static tg_status softplus_fwd(tg_custom_call *c)
{
    for (int64_t i = 0; i < c->output_numel; i++) {
        double x = cget(c, c->input[0], i);
        cset(c, c->output, i, (x > 0 ? x : 0) + log1p(exp(-fabs(x))));
    }
    return TG_OK;
}
static tg_status softplus_bwd(tg_custom_call *c)
{
    if (!c->grad_input[0])
        return TG_OK;
    for (int64_t i = 0; i < c->output_numel; i++) {
        double x = cget(c, c->input[0], i);
        cacc(c, c->grad_input[0], i, cget(c, c->grad_output, i) / (1 + exp(-x)));
    }
    return TG_OK;
}
/* its rules as ops (second order, forward mode): gy sigmoid(x), t sigmoid(x) */
static tg_status softplus_vjp(tg_ctx *ctx, tg_tensor *y, int n, tg_tensor *const *in,
                              tg_tensor *gy, const bool *need, tg_tensor **gx, void *user)
{
    (void)y, (void)n, (void)need, (void)user;
    return (gx[0] = tg_mul(ctx, gy, tg_sigmoid(ctx, in[0]))) ? TG_OK : tg_ctx_status(ctx);
}
static tg_tensor *softplus_jvp(tg_ctx *ctx, tg_tensor *y, int n, tg_tensor *const *in,
                               tg_tensor *const *t, void *user)
{
    (void)y, (void)n, (void)user;
    return tg_mul(ctx, t[0], tg_sigmoid(ctx, in[0]));
}
static tg_tensor *custom_softplus(tg_ctx *ctx, tg_tensor *x)
{
    tg_custom_def d = {.name = "softplus", .out_rank = TG_CUSTOM_SAME_SHAPE,
                       .forward_f32 = softplus_fwd, .backward_f32 = softplus_bwd,
                       .forward_f64 = softplus_fwd, .backward_f64 = softplus_bwd,
                       .backward_reads = TG_CUSTOM_READS_INPUT(0),
                       .vjp = softplus_vjp, .jvp = softplus_jvp};
    return tg_custom_op(ctx, &d, 1, &x);
}
static tg_tensor *cu_softplus(tg_ctx *ctx, tg_dtype dt) { return custom_softplus(ctx, IN("x", 3, 4)); }
static tg_tensor *cu_softplus_one(tg_ctx *ctx, tg_dtype dt) { return custom_softplus(ctx, IN("x", 1)); }

/* exp from its output: y = e^x, dx += dy * y; backward reads only the output */
static tg_status cexp_fwd(tg_custom_call *c)
{
    for (int64_t i = 0; i < c->output_numel; i++)
        cset(c, c->output, i, exp(cget(c, c->input[0], i)));
    return TG_OK;
}
static tg_status cexp_bwd(tg_custom_call *c)
{
    for (int64_t i = 0; c->grad_input[0] && i < c->output_numel; i++)
        cacc(c, c->grad_input[0], i, cget(c, c->grad_output, i) * cget(c, c->output, i));
    return TG_OK;
}
static tg_tensor *cu_exp(tg_ctx *ctx, tg_dtype dt)
{
    tg_tensor *x = IN("x", 2, 3, 2);
    tg_custom_def d = {.name = "exp_from_output", .out_rank = TG_CUSTOM_SAME_SHAPE,
                       .forward_f32 = cexp_fwd, .backward_f32 = cexp_bwd,
                       .forward_f64 = cexp_fwd, .backward_f64 = cexp_bwd,
                       .backward_reads = TG_CUSTOM_READS_OUTPUT};
    return tg_custom_op(ctx, &d, 1, &x);
}

/* rowdot: a, b (..., N) -> y (...) = sum_j a_j b_j; da += dy b, db += dy a (reads a and b).
 * The shape comes from a shape function. */
static tg_status rowdot_shape(int n, const tg_tensor *const *in, int *rank, int64_t *shape,
                              char *msg, size_t msg_size, void *user)
{
    (void)n;
    (void)user;
    int r = tg_tensor_rank(in[0]);
    if (r < 1 || r != tg_tensor_rank(in[1]) || tg_tensor_dim(in[0], -1) != tg_tensor_dim(in[1], -1)) {
        snprintf(msg, msg_size, "a and b must have the same shape");
        return TG_ERR_SHAPE;
    }
    *rank = r - 1;
    for (int i = 0; i < r - 1; i++)
        shape[i] = tg_tensor_shape(in[0])[i];
    return TG_OK;
}
static tg_status rowdot_fwd(tg_custom_call *c)
{
    int64_t N = c->input_shape[0][c->input_rank[0] - 1];
    for (int64_t r = 0; r < c->output_numel; r++) {
        double acc = 0;
        for (int64_t j = 0; j < N; j++)
            acc += cget(c, c->input[0], r * N + j) * cget(c, c->input[1], r * N + j);
        cset(c, c->output, r, acc);
    }
    return TG_OK;
}
static tg_status rowdot_bwd(tg_custom_call *c)
{
    int64_t N = c->input_shape[0][c->input_rank[0] - 1];
    for (int64_t r = 0; r < c->output_numel; r++) {
        double g = cget(c, c->grad_output, r);
        for (int64_t j = 0; j < N; j++) { /* a and b may be one tensor: += both */
            if (c->grad_input[0])
                cacc(c, c->grad_input[0], r * N + j, g * cget(c, c->input[1], r * N + j));
            if (c->grad_input[1])
                cacc(c, c->grad_input[1], r * N + j, g * cget(c, c->input[0], r * N + j));
        }
    }
    return TG_OK;
}
/* its rules as ops: da = gy[..., None] b, db = gy[..., None] a; t_y = sum(t_a b + a t_b) */
static tg_status rowdot_vjp(tg_ctx *ctx, tg_tensor *y, int n, tg_tensor *const *in,
                            tg_tensor *gy, const bool *need, tg_tensor **gx, void *user)
{
    (void)n, (void)user;
    int r = tg_tensor_rank(in[0]);
    int64_t sh[TG_MAX_RANK];
    for (int i = 0; i < r - 1; i++)
        sh[i] = tg_tensor_dim(y, i);
    sh[r - 1] = 1;
    tg_tensor *g = tg_reshape(ctx, gy, r, sh);
    for (int k = 0; k < 2; k++)
        if (need[k] && !(gx[k] = tg_mul(ctx, g, in[1 - k])))
            return tg_ctx_status(ctx);
    return TG_OK;
}
static tg_tensor *rowdot_jvp(tg_ctx *ctx, tg_tensor *y, int n, tg_tensor *const *in,
                             tg_tensor *const *t, void *user)
{
    (void)y, (void)n, (void)user;
    tg_tensor *a = t[0] ? tg_mul(ctx, t[0], in[1]) : NULL;
    tg_tensor *b = t[1] ? tg_mul(ctx, in[0], t[1]) : NULL;
    return tg_sum(ctx, a && b ? tg_add(ctx, a, b) : a ? a : b, -1, false);
}
static tg_tensor *custom_rowdot(tg_ctx *ctx, tg_tensor *a, tg_tensor *b)
{
    tg_custom_def d = {.name = "rowdot", .shape = rowdot_shape,
                       .forward_f32 = rowdot_fwd, .backward_f32 = rowdot_bwd,
                       .forward_f64 = rowdot_fwd, .backward_f64 = rowdot_bwd,
                       .backward_reads = TG_CUSTOM_READS_INPUT(0) | TG_CUSTOM_READS_INPUT(1),
                       .vjp = rowdot_vjp, .jvp = rowdot_jvp};
    tg_tensor *in[2] = {a, b};
    return tg_custom_op(ctx, &d, 2, in);
}
static tg_tensor *cu_rowdot(tg_ctx *ctx, tg_dtype dt)
{
    return custom_rowdot(ctx, IN("a", 2, 3, 4), PARAM("b", 2, 3, 4));
}
static tg_tensor *cu_rowdot_self(tg_ctx *ctx, tg_dtype dt)
{
    tg_tensor *x = IN("x", 3, 2);
    return custom_rowdot(ctx, x, x); /* both operands one tensor: gradients accumulate */
}


const tg_opcase tg_opcases[] = {
    {"matmul", "2d", "a (3, 4) b (4, 5)", mm_2d},
    {"matmul", "batched", "a (2, 3, 4) b (2, 4, 2)", mm_batched},
    {"matmul", "broadcast", "a (2, 1, 3, 4) b (3, 4, 5)", mm_bcast},
    {"matmul", "transpose_b", "q (2, 3, 4) k^T (2, 5, 4)", mm_tb},
    {"matmul", "transpose_a", "a^T (4, 3) b (2, 4, 1)", mm_ta},
    {"matmul", "transpose_ab", "a^T (2, 4, 3) b^T (1, 2, 4)", mm_tatb},
    {"matmul", "size1", "a (1, 1) b (1, 1)", mm_one},
    {"matmul", "shared", "x (3, 3) x^T", mm_shared},
    {"transpose", "2d", "x (2, 3) 0<->1", tr_2d},
    {"transpose", "3d", "x (2, 3, 4) 1<->2", tr_3d},
    {"transpose", "size1-neg", "x (1, 4, 1, 3) -1<->0", tr_neg},
    {"permute", "3d", "x (2, 3, 4) (2, 0, 1)", pm_3d},
    {"permute", "heads", "x (2, 5, 3, 2) (0, 2, 1, 3)", pm_heads},
    {"permute", "1d", "x (5) (0)", pm_1d},
    {"contiguous", "permuted", "x (2, 3, 4) permuted (1, 2, 0)", ct_perm},
    {"contiguous", "narrowed", "x (3, 5, 2) narrowed on axis 1 [1, 4)", ct_narrow},
    {"contiguous", "plain", "x (4)", ct_plain},
    {"reshape", "infer", "x (2, 6) -> (3, -1)", rs_infer},
    {"reshape", "split", "x (24) -> (2, 3, 4)", rs_split},
    {"reshape", "scalar", "x (1, 1) -> ()", rs_scalar},
    {"narrow", "rows", "x (5, 3) axis 0 [1, 4)", nw_rows},
    {"narrow", "middle", "x (2, 6, 2) axis 1 [4, 6)", nw_mid},
    {"narrow", "size1", "x (3) axis -1 [0, 1)", nw_one},
    {"scale", "2d", "x (3, 4) * 2.5", sc_2d},
    {"scale", "size1", "x (1) * -1", sc_one},
    {"scale", "3d", "x (2, 3, 4) * 0.125", sc_3d},
    {"add", "same", "a (2, 3) b (2, 3)", add_same},
    {"add", "bias", "x (2, 3, 4) bias (4)", add_bias},
    {"add", "outer", "a (3, 1) b (1, 4)", add_outer},
    {"add", "self", "x (2, 2) + x", add_self},
    {"mul", "same", "a (2, 3) b (2, 3)", mul_same},
    {"mul", "broadcast", "a (2, 3, 4) b (3, 1)", mul_bcast},
    {"mul", "size1", "a (1) b (2, 2)", mul_scalar},
    {"mul", "self", "x (3, 2) * x", mul_self},
    {"sum", "axis0", "x (3, 4) axis 0", sum_ax0},
    {"sum", "keepdim", "x (2, 3, 4) axis -1 keepdim", sum_keep},
    {"sum", "all", "x (2, 3) all", sum_all},
    {"sum", "size1", "x (1) axis 0", sum_one},
    {"mean", "axis0", "x (3, 4) axis 0", mean_ax0},
    {"mean", "keepdim", "x (2, 3, 4) axis 1 keepdim", mean_mid},
    {"mean", "all", "x (2, 3) all", mean_all},
    {"mean", "size1", "x (1, 1) axis -1", mean_one},
    {"add_mask", "additive", "scores (2, 3, 4) bias (3, 4)", am_additive},
    {"add_mask", "key_padding", "scores (2, 2, 3, 4) mask (2, 1, 1, 4) +softmax", am_padding},
    {"add_mask", "causal", "scores (2, 3, 3) mask (3, 3) +softmax", am_causal},
    {"add_mask", "seed-1e9", "scores (2, 2, 3) -1e9*mask (2, 3) +softmax", am_seed},
    {"softmax", "rows", "x (2, 5)", sm_rows},
    {"softmax", "size1", "x (3, 1)", sm_one},
    {"softmax", "4d", "x (1, 2, 3, 7)", sm_4d},
    {"softmax", "masked-row", "scores (2, 3, 4), row 1 fully masked", sm_masked_row},
    {"relu", "2d", "x (3, 4)", relu_2d},
    {"relu", "size1", "x (1)", relu_one},
    {"relu", "3d", "x (2, 3, 5)", relu_3d},
    {"relu_gate", "2d", "t r (3, 4)", gate_2d},
    {"relu_gate", "param", "t param, r (2, 3, 5)", gate_param},
    {"relu_gate", "of_relu", "x (4, 3): x^2 gated by relu(x)", gate_of_relu},
    {"gelu", "2d", "x (3, 4) in [-3, 3)", gelu_2d},
    {"gelu", "size1", "x (1)", gelu_one},
    {"gelu", "3d", "x (2, 2, 3)", gelu_3d},
    {"dense", "2d", "x (4, 3) w (5, 3) b (5)", dense_2d},
    {"dense", "nobias", "x (2, 3, 4) w (2, 4)", dense_nobias},
    {"dense", "size1", "x (1) w (1, 1) b (1)", dense_one},
    {"dense", "4d", "x (2, 1, 2, 3) w (6, 3) b (6)", dense_4d},
    {"dense_act", "gelu", "x (2, 3, 4) w (5, 4) b (5) gelu", dense_gelu},
    {"dense_act", "gelu-nobias", "x (3, 4) w (2, 4) gelu", dense_gelu_nobias},
    {"dense_act", "relu", "x (4, 3) w (5, 3) b (5) relu", dense_relu},
    {"layer_norm", "affine", "x (3, 5) gamma beta (5)", ln_affine},
    {"layer_norm", "plain", "x (2, 3, 4) no affine", ln_plain},
    {"layer_norm", "size1", "x (4, 1) gamma beta (1)", ln_one},
    {"layer_norm", "const-row", "x (2, 6), row 0 constant", ln_const_row},
    {"dropout", "2d", "x (4, 5) p 0.3", do_2d},
    {"dropout", "size1", "x (1) p 0.5", do_one},
    {"dropout", "3d", "x (2, 3, 4) p 0.1", do_3d},
    {"dropout", "eval", "x (3, 2) p 0.5, eval mode", do_eval},
    {"embedding", "2d", "ids (2, 6) weight (4, 3), repeated ids", emb_2d},
    {"embedding", "size1", "ids (1) weight (1, 1)", emb_one},
    {"embedding", "1d", "ids (5) weight (7, 2)", emb_1d},
    {"cross_entropy", "2d", "logits (4, 5) targets (4)", xent_2d},
    {"cross_entropy", "ignore", "logits (2, 3, 6) targets (2, 3), 2 ignored", xent_ignore},
    {"cross_entropy", "size1", "logits (1, 1) targets (1)", xent_one},
    {"cross_entropy", "large", "logits (3, 4) +-1e4 (f32: +-30)", xent_large},
    {"sdpa", "plain", "q (2, 3, 4) k (2, 5, 4) v (2, 5, 3)", sdpa_plain},
    {"sdpa", "no-batch", "q (1, 2) k (3, 2) v (3, 1)", sdpa_nobatch},
    {"sdpa", "causal", "q k (2, 2, 4, 3) v (2, 2, 4, 2) causal", sdpa_causal},
    {"sdpa", "masked-row", "q k (2, 3, 4) v (2, 3, 2), row 1 fully masked", sdpa_masked_row},
    {"mha", "self", "x (2, 3, 4) H 2", mha_self},
    {"mha", "cross", "q (2, 2, 6) k v (2, 4, 6) H 3", mha_cross},
    {"mha", "masks", "x (2, 3, 4) H 2 causal+padding, a row fully masked", mha_masks},
    {"mha", "one-head", "x (2, 3, 3) H 1", mha_one_head},
    {"ffn", "relu", "x (2, 3, 4) F 6", ffn_relu},
    {"ffn", "gelu", "x (2, 3, 4) F 6", ffn_gelu},
    {"ffn", "size1", "x (1, 1) F 1 gelu", ffn_one},
    {"encoder", "post-norm", "x (2, 3, 4) H 2 F 6 relu", enc_post},
    {"encoder", "pre-norm", "x (2, 3, 4) H 2 F 6 gelu", enc_pre},
    {"encoder", "masked", "x (2, 3, 4) pre-norm causal+padding", enc_masked},
    {"transformer", "lm", "ids (2, 3) V 5 D 4, causal, learned pos, loss", tf_lm},
    {"transformer", "tied", "ids (2, 3) V 5 D 4, tied head, sinusoidal", tf_tied},
    {"transformer", "encoder", "ids (2, 3) V 5 D 4, bidirectional", tf_enc},
    /* decoder layer and encoder-decoder */
    {"decoder", "post-norm", "x (2, 3, 4) memory (2, 4, 4) H 2 F 6 relu", dec_post},
    {"decoder", "pre-norm", "x (2, 3, 4) memory (2, 4, 4) H 2 F 6 gelu", dec_pre},
    {"decoder", "masked", "pre-norm causal+padding, memory padding, memory_mask row 1 fully "
     "blocked", dec_masked},
    {"encoder_decoder", "1+2", "src (2, 3, 4) tgt (2, 2, 4) causal, source padding", encdec_case},
    {"transformer", "seq2seq", "src (2, 4) tgt (2, 3) V 5 D 4, 1+1 layers, padding, loss",
     tf_seq2seq},
    /* more elementwise ops, reductions and losses */
    {"sub", "same", "a (2, 3) b (2, 3)", sub_same},
    {"sub", "broadcast", "a (2, 3, 4) b (3, 1)", sub_bcast},
    {"sub", "size1", "a (1) b (2, 2)", sub_left},
    {"sub", "outer", "a (3, 1) b (1, 4)", sub_outer},
    {"sub", "self", "x (2, 3): x*x - x", sub_self},
    {"div", "same", "a (2, 3) b (2, 3), |b| >= 0.5", div_same},
    {"div", "broadcast", "a (2, 3, 4) b (3, 1), |b| >= 0.5", div_bcast},
    {"div", "size1", "a (1) b (2, 2), |b| >= 0.5", div_left},
    {"div", "outer", "a (3, 1) b (1, 4), |b| >= 0.5", div_outer},
    {"div", "self", "x (3, 2): (x + x*x) / x", div_self},
    {"neg", "2d", "x (3, 4)", neg_2d},
    {"neg", "size1", "x (1)", neg_one},
    {"neg", "rank0", "x ()", neg_scalar},
    {"exp", "2d", "x (3, 4) in [-2, 2)", exp_2d},
    {"exp", "size1", "x (1)", exp_one},
    {"exp", "3d", "x (2, 2, 3)", exp_3d},
    {"log", "2d", "x (3, 4) in [0.5, 2)", log_2d},
    {"log", "size1", "x (1) in [0.5, 2)", log_one},
    {"log", "3d", "x (2, 3, 2) in [0.2, 3)", log_3d},
    {"sqrt", "2d", "x (3, 4) in [0.5, 2)", sqrt_2d},
    {"sqrt", "size1", "x (1) in [0.5, 2)", sqrt_one},
    {"sqrt", "3d", "x (2, 3, 2) in [0.2, 4)", sqrt_3d},
    {"tanh", "2d", "x (3, 4) in [-2, 2)", tanh_2d},
    {"tanh", "size1", "x (1)", tanh_one},
    {"tanh", "3d", "x (2, 2, 3)", tanh_3d},
    {"sigmoid", "2d", "x (3, 4) in [-3, 3)", sigmoid_2d},
    {"sigmoid", "size1", "x (1)", sigmoid_one},
    {"sigmoid", "3d", "x (2, 3, 2)", sigmoid_3d},
    {"silu", "2d", "x (3, 4) in [-4, 4)", silu_2d},
    {"silu", "size1", "x (1)", silu_one},
    {"silu", "3d", "x (2, 3, 2)", silu_3d},
    {"gelu_tanh", "2d", "x (3, 4) in [-3, 3)", gelu_tanh_2d},
    {"gelu_tanh", "size1", "x (1)", gelu_tanh_one},
    {"gelu_tanh", "3d", "x (2, 2, 3)", gelu_tanh_3d},
    {"erf", "2d", "x (3, 4) in [-3, 3)", erf_2d},
    {"erf", "size1", "x (1)", erf_one},
    {"erf", "3d", "x (2, 2, 3)", erf_3d},
    {"log_softmax", "rows", "x (2, 5) in [-2, 2)", lsm_rows},
    {"log_softmax", "size1", "x (3, 1)", lsm_one},
    {"log_softmax", "4d", "x (1, 2, 3, 7)", lsm_4d},
    {"log_softmax", "large", "x (3, 4) +-1e4 (f32: +-30)", lsm_large},
    {"max", "axis0", "x (3, 4) axis 0, distinct values", max_ax0},
    {"max", "keepdim", "x (2, 3, 4) axis -1 keepdim, distinct", max_keep},
    {"max", "middle", "x (2, 3, 4) axis 1, distinct", max_mid},
    {"max", "1d", "x (5) axis 0 -> (), distinct", max_1d},
    {"max", "size1", "x (2, 1) axis 1", max_one},
    {"concat", "rows", "a (2, 3) b (4, 3) axis 0", cat_rows},
    {"concat", "middle", "(2, 1, 3) (2, 4, 3) (2, 2, 3) axis 1", cat_mid},
    {"concat", "last", "a (2, 2) param b (2, 3) axis -1", cat_last},
    {"concat", "size1", "x (3) alone, axis 0", cat_one},
    {"concat", "self", "x (2, 2), y (2, 1), x axis 1", cat_self},
    {"concat", "eight", "8 tensors (1..3, 2) axis 0", cat_eight},
    {"mse_loss", "mean", "input target (3, 4) mean", mse_mean},
    {"mse_loss", "sum", "input (2, 3, 2) const target, sum", mse_sum},
    {"mse_loss", "none", "input target (4) none", mse_none},
    {"mse_loss", "size1", "input target (1) mean", mse_one},
    {"custom", "softplus", "x (3, 4), user callbacks reading x", cu_softplus},
    {"custom", "size1", "x (1) softplus", cu_softplus_one},
    {"custom", "reads-output", "x (2, 3, 2) exp, backward reads y; no rules as ops", cu_exp},
    {"custom", "two-inputs", "a b (2, 3, 4) -> (2, 3), shape fn", cu_rowdot},
    {"custom", "shared", "x (3, 2) rowdot(x, x)", cu_rowdot_self},
    /* fused attention (appended: the seeds of the cases above, derived from their index, stay) */
    {"flash_attention", "plain", "q (2, 3, 4) k (2, 5, 4) v (2, 5, 3)", fa_plain},
    {"flash_attention", "masks", "q k (2, 2, 4, 3) v (.., 2) bias (4, 4) pad causal, a row "
     "fully masked", fa_masks},
    {"flash_attention", "broadcast", "q (2, 2, 3, 4) k (2, 1, 5, 4) v (5, 2) bool mask (3, 5)",
     fa_bcast},
    {"flash_attention", "views", "q (2, 2, 3, 2) kv (2, 2, 4, 2) transposed views, causal",
     fa_views},
    {"flash_attention", "size1", "q k (1, 1) v (1, 2)", fa_one},
    {"flash_attention", "small-lanes", "q (2, 6, 19) k (2, 4, 19) v (2, 4, 17) bias (6, 4) "
     "causal", fa_small_lanes},
    {"flash_attention", "small-self", "x (2, 3, 12) narrowed to q k v, bool mask (2, 3, 3), "
     "a row fully masked", fa_small_self},
    {"flash_attention", "tiled", "q (34, 2) k (33, 2) v (33, 1) causal", fa_tiled},
    /* label smoothing (appended, as above) */
    {"cross_entropy", "smooth", "logits (4, 5) targets (4), label_smoothing 0.1", xent_ls},
    {"cross_entropy", "smooth-ignore", "logits (2, 3, 6) targets (2, 3), 2 ignored, "
     "label_smoothing 0.3", xent_ls_ignore},
    {"cross_entropy", "smooth-class-ignored", "logits (5, 4), ignore_index 2 (a class), "
     "label_smoothing 1", xent_ls_class_ignored},
    {"cross_entropy", "smooth-all-ignored", "logits (2, 3), every target ignored, "
     "label_smoothing 0.2", xent_ls_all_ignored},
    {"cross_entropy", "smooth-large", "logits (3, 4) +-1e4 (f32: +-30), label_smoothing 0.1",
     xent_ls_large},
};
const int tg_n_opcases = (int)(sizeof tg_opcases / sizeof tg_opcases[0]);

int tg_opcase_count(const char *op)
{
    int n = 0;
    for (int i = 0; i < tg_n_opcases; i++)
        if (strcmp(tg_opcases[i].op, op) == 0)
            n++;
    return n;
}
