/*
 * encoder.c - transformer encoder layer (Vaswani et al. 2017, sec. 3.1; PyTorch
 * nn.TransformerEncoderLayer(batch_first=True)):
 *   post-norm (norm_first = false, the paper's):  x = norm1(x + drop(SA(x)))
 *                                                 x = norm2(x + drop(FFN(x)))
 *   pre-norm  (norm_first = true):                x = x + drop(SA(norm1(x)))
 *                                                 x = x + drop(FFN(norm2(x)))
 * FFN here is linear2(drop(act(linear1(x)))), as PyTorch's _ff_block, and SA drops its
 * attention weights (nn.MultiheadAttention(dropout=cfg.dropout)).
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

void tg__nn_layer_plan_add(tg__nn_plan *plan, const tg_encoder_config *cfg, int64_t n_layers,
                           bool decoder)
{
    int64_t D = cfg->d_model, F = cfg->d_ff;
    int64_t n_attn = decoder ? 2 * n_layers : n_layers; /* decoder: self- and cross-attention */
    char why[96];
    snprintf(why, sizeof why, "d_model %lld with d_ff %lld", (long long)D, (long long)F);
    /* one layer: per attention (3D, D) + 3D + (D, D) + D; 2 (F, D) + F + D; 2 D per norm */
    tg__nn_plan_add(plan, n_attn, 3, D, D, "self_attn.in_proj_weight (3 d_model, d_model)", why);
    tg__nn_plan_add(plan, n_attn, 3, D, 0, "self_attn.in_proj_bias (3 d_model)", why);
    tg__nn_plan_add(plan, n_attn, 1, D, D, "self_attn.out_proj.weight (d_model, d_model)", why);
    tg__nn_plan_add(plan, 2 * n_layers, 1, F, D, "linear1.weight (d_ff, d_model)", why);
    tg__nn_plan_add(plan, n_layers, 1, F, 0, "linear1.bias (d_ff)", why);
    /* out_proj.bias per attention, linear2.bias, 2 per norm (2 norms, decoder 3) */
    tg__nn_plan_add(plan, decoder ? 9 * n_layers : 6 * n_layers, 1, D, 0, "norm1.weight (d_model)",
                    why);
}

bool tg__nn_layer_config_ok(tg_ctx *ctx, const char *fn, const tg_encoder_config *cfg)
{
    if (cfg->d_model < 1 || cfg->n_heads < 1 || cfg->d_model % cfg->n_heads != 0 || cfg->d_ff < 1 ||
        !(cfg->layer_norm_eps >= 0) || !isfinite(cfg->layer_norm_eps) ||
        !(cfg->dropout >= 0 && cfg->dropout < 1) ||
        !(cfg->attn_dropout == TG_DROPOUT_OFF ||
          (cfg->attn_dropout >= 0 && cfg->attn_dropout < 1)) ||
        !(cfg->act_dropout == TG_DROPOUT_OFF || (cfg->act_dropout >= 0 && cfg->act_dropout < 1)) ||
        (cfg->activation != TG_ACT_RELU && cfg->activation != TG_ACT_GELU)) {
        tg__err(ctx, TG_ERR_ARG, fn,
                "bad config: d_model %lld, n_heads %lld (must divide d_model), d_ff %lld, "
                "eps %g, dropout %g, attn_dropout %g and act_dropout %g (each in [0, 1) or "
                "TG_DROPOUT_OFF), activation %d",
                (long long)cfg->d_model, (long long)cfg->n_heads, (long long)cfg->d_ff,
                cfg->layer_norm_eps, cfg->dropout, cfg->attn_dropout, cfg->act_dropout,
                (int)cfg->activation);
        return false;
    }
    return true;
}

void tg__nn_norm_params(tg_ctx *ctx, tg_dtype dt, int64_t d, const char *prefix, const char *name,
                        tg_tensor **weight, tg_tensor **bias)
{
    char n[64];
    snprintf(n, sizeof n, "%s.weight", name);
    *weight = tg__nn_param(ctx, dt, TG_DIMS(d), prefix, n, 0, true);
    snprintf(n, sizeof n, "%s.bias", name);
    *bias = tg__nn_param(ctx, dt, TG_DIMS(d), prefix, n, 0, false);
}

tg_status tg__nn_layer_init_begin(tg_ctx *ctx, const char *fn, void *l, size_t size,
                                  const tg_encoder_config *cfg, tg_dtype dt, bool decoder)
{
    tg_status s0 = tg__nn_init_begin(ctx, l, size);
    if (s0 != TG_OK)
        return s0; /* no context, or a build error is pending: stop before allocating */
    if (!l || !cfg)
        return TG_ERR_ARG;
    if (!tg__nn_layer_config_ok(ctx, fn, cfg))
        return TG_ERR_ARG;
    tg__nn_plan plan = tg__nn_plan_begin(ctx, fn, dt);
    tg__nn_layer_plan_add(&plan, cfg, 1, decoder);
    return tg__nn_plan_end(&plan);
}

tg_status tg_encoder_layer_init(tg_ctx *ctx, tg_encoder_layer *l, tg_dtype dt,
                                const tg_encoder_config *cfg, const char *prefix)
{
    tg_status s0 =
        tg__nn_layer_init_begin(ctx, "tg_encoder_layer_init", l, sizeof *l, cfg, dt, false);
    if (s0 != TG_OK)
        return s0;
    l->cfg = *cfg;
    const char *p = prefix ? prefix : "";
    char sub[2 * TG_NAME_MAX];
    snprintf(sub, sizeof sub, "%sself_attn.", p);
    if (tg_mha_init(ctx, &l->self_attn, dt, cfg->d_model, cfg->n_heads, sub) != TG_OK ||
        tg_ffn_init(ctx, &l->ffn, dt, cfg->d_model, cfg->d_ff, cfg->activation, p) != TG_OK)
        return tg__nn_status(ctx); /* stop at the first failure */
    /* on the attention weights, as PyTorch's layer (or its own probability) */
    l->self_attn.dropout = tg__nn_dropout_of(cfg->attn_dropout, cfg->dropout);
    tg__nn_norm_params(ctx, dt, cfg->d_model, p, "norm1", &l->norm1_weight, &l->norm1_bias);
    tg__nn_norm_params(ctx, dt, cfg->d_model, p, "norm2", &l->norm2_weight, &l->norm2_bias);
    return tg__nn_status(ctx);
}

double tg__nn_dropout_of(double own, double dropout)
{
    return own == 0 ? dropout : own < 0 ? 0 : own;
}

tg_tensor *tg__nn_drop(tg_ctx *ctx, tg_tensor *x, double p)
{
    return p > 0 ? tg_dropout(ctx, x, p) : x;
}

tg_tensor *tg__nn_sublayer_in(tg_ctx *ctx, const tg_encoder_config *cfg, tg_tensor *x,
                              tg_tensor *norm_w, tg_tensor *norm_b)
{
    return cfg->norm_first ? tg_layer_norm(ctx, x, norm_w, norm_b, cfg->layer_norm_eps) : x;
}

tg_tensor *tg__nn_sublayer_out(tg_ctx *ctx, const tg_encoder_config *cfg, tg_tensor *x,
                               tg_tensor *y, tg_tensor *norm_w, tg_tensor *norm_b)
{
    x = tg_add(ctx, x, tg__nn_drop(ctx, y, cfg->dropout)); /* (B, T, D) */
    return cfg->norm_first ? x : tg_layer_norm(ctx, x, norm_w, norm_b, cfg->layer_norm_eps);
}

tg_tensor *tg__nn_ff_block(tg_ctx *ctx, const tg_ffn *f, tg_tensor *h, double p)
{
    tg_tensor *ff;
    if (tg_ctx_fusion(ctx)) { /* (..., F), activation in the GEMM epilogue */
        ff = tg_dense_act(ctx, h, f->linear1_weight, f->linear1_bias, f->activation);
    } else {
        ff = tg_dense(ctx, h, f->linear1_weight, f->linear1_bias);
        ff = f->activation == TG_ACT_GELU ? tg_gelu(ctx, ff) : tg_relu(ctx, ff);
    }
    return tg_dense(ctx, tg__nn_drop(ctx, ff, p), f->linear2_weight, f->linear2_bias);
}

tg_tensor *tg_encoder_layer_forward(tg_ctx *ctx, const tg_encoder_layer *l, tg_tensor *x,
                                    const tg_attn_masks *masks)
{
    static const char *fn = "tg_encoder_layer_forward";
    if (!ctx || !x)
        return NULL;
    if (!l || !l->norm1_weight || !l->norm2_weight)
        return tg__err(ctx, TG_ERR_ARG, fn, "layer is NULL or not initialised");
    const tg_encoder_config *c = &l->cfg;
    /* self-attention block */
    tg_tensor *h = tg__nn_sublayer_in(ctx, c, x, l->norm1_weight, l->norm1_bias);
    tg_tensor *sa = tg_mha_forward(ctx, &l->self_attn, h, h, h, masks, NULL);
    x = tg__nn_sublayer_out(ctx, c, x, sa, l->norm1_weight, l->norm1_bias); /* (B, T, D) */
    /* feed-forward block: linear2(dropout(act(linear1(h)))) */
    h = tg__nn_sublayer_in(ctx, c, x, l->norm2_weight, l->norm2_bias);
    tg_tensor *ff = tg__nn_ff_block(ctx, &l->ffn, h, tg__nn_dropout_of(c->act_dropout, c->dropout));
    return tg__nn_sublayer_out(ctx, c, x, ff, l->norm2_weight, l->norm2_bias);
}
