/*
 * encoder.c - transformer encoder layer (Vaswani et al. 2017, sec. 3.1; PyTorch
 * nn.TransformerEncoderLayer(batch_first=True)):
 *   post-norm (norm_first = false, the paper's):  x = norm1(x + drop(SA(x)))
 *                                                 x = norm2(x + drop(FFN(x)))
 *   pre-norm  (norm_first = true):                x = x + drop(SA(norm1(x)))
 *                                                 x = x + drop(FFN(norm2(x)))
 * FFN here is linear2(drop(act(linear1(x)))), as PyTorch's _ff_block.
 */
#include "nn_internal.h"
#include "core.h"

#include <math.h>
#include <stdio.h>

tg_encoder_config tg_encoder_config_default(int64_t d_model, int64_t n_heads)
{
    tg_encoder_config c;
    memset(&c, 0, sizeof c);
    c.d_model = d_model;
    c.n_heads = n_heads;
    c.d_ff = 2048;
    c.activation = TG_ACT_RELU;
    c.norm_first = false;
    c.layer_norm_eps = 1e-5;
    c.dropout = 0.0;
    return c;
}

void tg__nn_encoder_plan_add(tg__nn_plan *plan, const tg_encoder_config *cfg,
                             int64_t n_layers)
{
    int64_t D = cfg->d_model, F = cfg->d_ff;
    char why[96];
    snprintf(why, sizeof why, "d_model %lld with d_ff %lld", (long long)D, (long long)F);
    /* one layer: (3D, D) + 3D + (D, D) + D + 2 (F, D) + F + D + 4 D */
    tg__nn_plan_add(plan, n_layers, 3, D, D, "self_attn.in_proj_weight (3 d_model, d_model)",
                    why);
    tg__nn_plan_add(plan, n_layers, 3, D, 0, "self_attn.in_proj_bias (3 d_model)", why);
    tg__nn_plan_add(plan, n_layers, 1, D, D, "self_attn.out_proj.weight (d_model, d_model)",
                    why);
    tg__nn_plan_add(plan, 2 * n_layers, 1, F, D, "linear1.weight (d_ff, d_model)", why);
    tg__nn_plan_add(plan, n_layers, 1, F, 0, "linear1.bias (d_ff)", why);
    tg__nn_plan_add(plan, 6 * n_layers, 1, D, 0, "norm1.weight (d_model)", why);
}

tg_status tg_encoder_layer_init(tg_ctx *ctx, tg_encoder_layer *l, tg_dtype dt,
                                const tg_encoder_config *cfg, const char *prefix)
{
    static const char *fn = "tg_encoder_layer_init";
    tg_status s0 = tg__nn_init_begin(ctx, l, sizeof *l);
    if (s0 != TG_OK)
        return s0; /* no context, or a build error is pending: stop before allocating */
    if (!l || !cfg)
        return TG_ERR_ARG;
    if (cfg->d_model < 1 || cfg->n_heads < 1 || cfg->d_model % cfg->n_heads != 0 ||
        cfg->d_ff < 1 || !(cfg->layer_norm_eps >= 0) || !isfinite(cfg->layer_norm_eps) ||
        !(cfg->dropout >= 0 && cfg->dropout < 1) ||
        (cfg->activation != TG_ACT_RELU && cfg->activation != TG_ACT_GELU)) {
        tg__err(ctx, TG_ERR_ARG, fn,
                "bad config: d_model %lld, n_heads %lld (must divide d_model), d_ff %lld, "
                "eps %g, dropout %g, activation %d",
                (long long)cfg->d_model, (long long)cfg->n_heads, (long long)cfg->d_ff,
                cfg->layer_norm_eps, cfg->dropout, (int)cfg->activation);
        return TG_ERR_ARG;
    }
    tg__nn_plan plan = tg__nn_plan_begin(ctx, fn, dt);
    tg__nn_encoder_plan_add(&plan, cfg, 1);
    tg_status ps = tg__nn_plan_end(&plan);
    if (ps != TG_OK)
        return ps;
    l->cfg = *cfg;
    const char *p = prefix ? prefix : "";
    char sub[2 * TG_NAME_MAX];
    snprintf(sub, sizeof sub, "%sself_attn.", p);
    if (tg_mha_init(ctx, &l->self_attn, dt, cfg->d_model, cfg->n_heads, sub) != TG_OK ||
        tg_ffn_init(ctx, &l->ffn, dt, cfg->d_model, cfg->d_ff, cfg->activation, p) != TG_OK)
        return tg__nn_status(ctx); /* stop at the first failure */
    int64_t D = cfg->d_model;
    l->norm1_weight = tg__nn_param(ctx, dt, TG_DIMS(D), p, "norm1.weight", 0, true);
    l->norm1_bias = tg__nn_param(ctx, dt, TG_DIMS(D), p, "norm1.bias", 0, false);
    l->norm2_weight = tg__nn_param(ctx, dt, TG_DIMS(D), p, "norm2.weight", 0, true);
    l->norm2_bias = tg__nn_param(ctx, dt, TG_DIMS(D), p, "norm2.bias", 0, false);
    return tg__nn_status(ctx);
}

static tg_tensor *drop(tg_ctx *ctx, const tg_encoder_layer *l, tg_tensor *x)
{
    return l->cfg.dropout > 0 ? tg_dropout(ctx, x, l->cfg.dropout) : x;
}

tg_tensor *tg_encoder_layer_forward(tg_ctx *ctx, const tg_encoder_layer *l, tg_tensor *x,
                                    const tg_attn_masks *masks)
{
    static const char *fn = "tg_encoder_layer_forward";
    if (!ctx || !x)
        return NULL;
    if (!l || !l->norm1_weight || !l->norm2_weight)
        return tg__err(ctx, TG_ERR_ARG, fn, "layer is NULL or not initialised");
    double eps = l->cfg.layer_norm_eps;
    const tg_ffn *f = &l->ffn;
    tg_tensor *h, *sa, *ff;
    if (l->cfg.norm_first) {
        h = tg_layer_norm(ctx, x, l->norm1_weight, l->norm1_bias, eps);
        sa = tg_mha_forward(ctx, &l->self_attn, h, h, h, masks, NULL);
        x = tg_add(ctx, x, drop(ctx, l, sa));                              /* (B, T, D) */
        h = tg_layer_norm(ctx, x, l->norm2_weight, l->norm2_bias, eps);
    } else {
        sa = tg_mha_forward(ctx, &l->self_attn, x, x, x, masks, NULL);
        x = tg_layer_norm(ctx, tg_add(ctx, x, drop(ctx, l, sa)), l->norm1_weight,
                          l->norm1_bias, eps);                             /* (B, T, D) */
        h = x;
    }
    /* feed-forward block: linear2(dropout(act(linear1(h)))) */
    if (tg_ctx_fusion(ctx)) { /* (B, T, F), activation in the GEMM epilogue */
        ff = tg_dense_act(ctx, h, f->linear1_weight, f->linear1_bias, f->activation);
    } else {
        ff = tg_dense(ctx, h, f->linear1_weight, f->linear1_bias);
        ff = f->activation == TG_ACT_GELU ? tg_gelu(ctx, ff) : tg_relu(ctx, ff);
    }
    ff = tg_dense(ctx, drop(ctx, l, ff), f->linear2_weight, f->linear2_bias); /* (B, T, D) */
    if (l->cfg.norm_first)
        return tg_add(ctx, x, drop(ctx, l, ff));
    return tg_layer_norm(ctx, tg_add(ctx, x, drop(ctx, l, ff)), l->norm2_weight, l->norm2_bias,
                         eps);
}
