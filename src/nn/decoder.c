/*
 * decoder.c - transformer decoder layer (Vaswani et al. 2017, sec. 3.1 "Decoder"; PyTorch
 * nn.TransformerDecoderLayer(batch_first=True)), with SA the masked self-attention over the
 * target x (B, T, D) and CA the cross-attention from x to memory (B, S, D):
 *   post-norm (norm_first = false, the paper's):  x = norm1(x + drop(SA(x)))
 *                                                 x = norm2(x + drop(CA(x, memory)))
 *                                                 x = norm3(x + drop(FFN(x)))
 *   pre-norm  (norm_first = true):                x = x + drop(SA(norm1(x)))
 *                                                 x = x + drop(CA(norm2(x), memory))
 *                                                 x = x + drop(FFN(norm3(x)))
 * The sublayer pieces (pre/post-norm residual, the FFN block) are the encoder layer's
 * (encoder.c), so both layers take the same fused paths.
 */
#include "nn_internal.h"
#include "core.h"

#include <math.h>
#include <stdio.h>

tg_status tg_decoder_layer_init(tg_ctx *ctx, tg_decoder_layer *l, tg_dtype dt,
                                const tg_decoder_config *cfg, const char *prefix)
{
    tg_status s0 =
        tg__nn_layer_init_begin(ctx, "tg_decoder_layer_init", l, sizeof *l, cfg, dt, true);
    if (s0 != TG_OK)
        return s0;
    l->cfg = *cfg;
    const char *p = prefix ? prefix : "";
    char sa[2 * TG_NAME_MAX], ca[2 * TG_NAME_MAX];
    snprintf(sa, sizeof sa, "%sself_attn.", p);
    snprintf(ca, sizeof ca, "%smultihead_attn.", p);
    if (tg_mha_init(ctx, &l->self_attn, dt, cfg->d_model, cfg->n_heads, sa) != TG_OK ||
        tg_mha_init(ctx, &l->multihead_attn, dt, cfg->d_model, cfg->n_heads, ca) != TG_OK ||
        tg_ffn_init(ctx, &l->ffn, dt, cfg->d_model, cfg->d_ff, cfg->activation, p) != TG_OK)
        return tg__nn_status(ctx); /* stop at the first failure */
    /* both attentions drop their weights, as nn.TransformerDecoderLayer's */
    l->self_attn.dropout = l->multihead_attn.dropout =
        tg__nn_dropout_of(cfg->attn_dropout, cfg->dropout);
    int64_t D = cfg->d_model;
    tg__nn_norm_params(ctx, dt, D, p, "norm1", &l->norm1_weight, &l->norm1_bias);
    tg__nn_norm_params(ctx, dt, D, p, "norm2", &l->norm2_weight, &l->norm2_bias);
    tg__nn_norm_params(ctx, dt, D, p, "norm3", &l->norm3_weight, &l->norm3_bias);
    return tg__nn_status(ctx);
}

/* The masks of one decoder attention, checked with PyTorch's names for them (@p attn_name
 * for attn_mask, @p pad_name for key_padding_mask) before tg_mha_forward() sees them:
 * attn (T_q, T_k) or (B, T_q, T_k), padding (B, T_k). */
static bool masks_ok(tg_ctx *ctx, const char *fn, const tg_attn_masks *m, const char *attn_name,
                     const char *pad_name, int64_t b, int64_t t_q, int64_t t_k)
{
    if (!m)
        return true;
    char bm[128];
    if (m->attn_mask) {
        int r = tg_tensor_rank(m->attn_mask);
        const int64_t *s = tg_tensor_shape(m->attn_mask);
        if (!((r == 2 && s[0] == t_q && s[1] == t_k) ||
              (r == 3 && s[0] == b && s[1] == t_q && s[2] == t_k))) {
            tg__err(ctx, TG_ERR_SHAPE, fn,
                    "%s %s must be (T_q, T_k) = (%lld, %lld) or (B, T_q, T_k) = (%lld, %lld, "
                    "%lld)",
                    attn_name, tg_tensor_shape_str(m->attn_mask, bm, sizeof bm), (long long)t_q,
                    (long long)t_k, (long long)b, (long long)t_q, (long long)t_k);
            return false;
        }
    }
    if (m->key_padding_mask) {
        const int64_t *s = tg_tensor_shape(m->key_padding_mask);
        if (tg_tensor_rank(m->key_padding_mask) != 2 || s[0] != b || s[1] != t_k) {
            tg__err(ctx, TG_ERR_SHAPE, fn, "%s %s must be (B, T_k) = (%lld, %lld)", pad_name,
                    tg_tensor_shape_str(m->key_padding_mask, bm, sizeof bm), (long long)b,
                    (long long)t_k);
            return false;
        }
    }
    return true;
}

tg_tensor *tg_decoder_layer_forward(tg_ctx *ctx, const tg_decoder_layer *l, tg_tensor *x,
                                    tg_tensor *memory, const tg_attn_masks *tgt_masks,
                                    const tg_attn_masks *memory_masks)
{
    static const char *fn = "tg_decoder_layer_forward";
    if (!ctx || !x || !memory)
        return NULL;
    if (!l || !l->norm1_weight || !l->norm2_weight || !l->norm3_weight)
        return tg__err(ctx, TG_ERR_ARG, fn, "layer is NULL or not initialised");
    int64_t D = l->cfg.d_model;
    char bx[128], bm[128];
    if (tg_tensor_rank(x) != 3 || tg_tensor_rank(memory) != 3 || tg_tensor_dim(x, 2) != D ||
        tg_tensor_dim(memory, 2) != D || tg_tensor_dim(x, 0) != tg_tensor_dim(memory, 0))
        return tg__err(ctx, TG_ERR_SHAPE, fn,
                       "need x (B, T, %lld) and memory (B, S, %lld) with the same batch B; got "
                       "x %s, memory %s",
                       (long long)D, (long long)D, tg_tensor_shape_str(x, bx, sizeof bx),
                       tg_tensor_shape_str(memory, bm, sizeof bm));
    if (memory_masks && memory_masks->causal)
        return tg__err(ctx, TG_ERR_ARG, fn,
                       "memory_masks.causal: the cross-attention has no look-ahead mask (the "
                       "target is causal through tgt_masks.causal); pass a memory_mask instead");
    int64_t B = tg_tensor_dim(x, 0), T = tg_tensor_dim(x, 1), S = tg_tensor_dim(memory, 1);
    if (!masks_ok(ctx, fn, tgt_masks, "tgt_mask", "tgt_key_padding_mask", B, T, T) ||
        !masks_ok(ctx, fn, memory_masks, "memory_mask", "memory_key_padding_mask", B, T, S))
        return NULL;
    const tg_encoder_config *c = &l->cfg;
    /* masked self-attention block */
    tg_tensor *h = tg__nn_sublayer_in(ctx, c, x, l->norm1_weight, l->norm1_bias);
    tg_tensor *y = tg_mha_forward(ctx, &l->self_attn, h, h, h, tgt_masks, NULL);
    x = tg__nn_sublayer_out(ctx, c, x, y, l->norm1_weight, l->norm1_bias); /* (B, T, D) */
    /* cross-attention block: queries from the target, keys and values from memory */
    h = tg__nn_sublayer_in(ctx, c, x, l->norm2_weight, l->norm2_bias);
    y = tg_mha_forward(ctx, &l->multihead_attn, h, memory, memory, memory_masks, NULL);
    x = tg__nn_sublayer_out(ctx, c, x, y, l->norm2_weight, l->norm2_bias); /* (B, T, D) */
    /* feed-forward block */
    h = tg__nn_sublayer_in(ctx, c, x, l->norm3_weight, l->norm3_bias);
    y = tg__nn_ff_block(ctx, &l->ffn, h, tg__nn_dropout_of(c->act_dropout, c->dropout));
    return tg__nn_sublayer_out(ctx, c, x, y, l->norm3_weight, l->norm3_bias);
}

/* ---- stacks (nn.TransformerEncoder, nn.TransformerDecoder) and nn.Transformer ------------- */

/* "<prefix>layers.<i>." into buf, refused (recorded) when too long for a parameter name. */
static bool layer_prefix(tg_ctx *ctx, const char *fn, const char *prefix, int64_t i, char *buf,
                         size_t n)
{
    int k = snprintf(buf, n, "%slayers.%lld.", prefix ? prefix : "", (long long)i);
    if (k < 0 || (size_t)k >= n) {
        tg__err(ctx, TG_ERR_ARG, fn, "prefix '%.40s...' too long", prefix);
        return false;
    }
    return true;
}

/* tg_encoder_init (enc) or tg_decoder_init (dec): the two stack structs have the same fields
 * but their layers' type. Config, layer count and every parameter's size checked first; then
 * the layers `<prefix>layers.{i}.` and the optional final norm `<prefix>norm.`. */
static tg_status stack_init(tg_ctx *ctx, const char *fn, tg_encoder *enc, tg_decoder *dec,
                            tg_dtype dt, const tg_encoder_config *cfg, int64_t n_layers,
                            bool final_norm, const char *prefix)
{
    bool decoder = dec != NULL;
    tg_status s0 = decoder ? tg__nn_init_begin(ctx, dec, sizeof *dec)
                           : tg__nn_init_begin(ctx, enc, sizeof *enc);
    if (s0 != TG_OK)
        return s0;
    if ((!enc && !dec) || !cfg)
        return TG_ERR_ARG;
    if (!tg__nn_layer_config_ok(ctx, fn, cfg))
        return TG_ERR_ARG;
    if (n_layers < 1 || n_layers > TG_NN_MAX_LAYERS) {
        tg__err(ctx, TG_ERR_ARG, fn, "n_layers %lld must be from 1 to %d", (long long)n_layers,
                TG_NN_MAX_LAYERS);
        return TG_ERR_ARG;
    }
    tg__nn_plan plan = tg__nn_plan_begin(ctx, fn, dt);
    tg__nn_layer_plan_add(&plan, cfg, n_layers, decoder);
    if (final_norm)
        tg__nn_plan_add(&plan, 2, 1, cfg->d_model, 0, "norm.weight (d_model)", "d_model");
    tg_status ps = tg__nn_plan_end(&plan);
    if (ps != TG_OK)
        return ps;
    /* n_layers <= TG_NN_MAX_LAYERS: the products cannot wrap */
    tg_encoder_layer *el = NULL;
    tg_decoder_layer *dl = NULL;
    if (decoder)
        dl = dec->layers = tg__alloc(ctx, sizeof *dl * (size_t)n_layers, fn);
    else
        el = enc->layers = tg__alloc(ctx, sizeof *el * (size_t)n_layers, fn);
    if (!el && !dl)
        return TG_ERR_NOMEM;
    char p[TG_NAME_MAX];
    for (int64_t i = 0; i < n_layers; i++)
        if (!layer_prefix(ctx, fn, prefix, i, p, sizeof p) ||
            (decoder ? tg_decoder_layer_init(ctx, &dl[i], dt, cfg, p)
                     : tg_encoder_layer_init(ctx, &el[i], dt, cfg, p)) != TG_OK)
            return tg__nn_status(ctx); /* stop at the first failure */
    tg_tensor *nw = NULL, *nb = NULL;
    if (final_norm)
        tg__nn_norm_params(ctx, dt, cfg->d_model, prefix, "norm", &nw, &nb);
    if (decoder) {
        dec->cfg = *cfg;
        dec->n_layers = n_layers;
        dec->norm_weight = nw;
        dec->norm_bias = nb;
    } else {
        enc->cfg = *cfg;
        enc->n_layers = n_layers;
        enc->norm_weight = nw;
        enc->norm_bias = nb;
    }
    return tg__nn_status(ctx);
}

tg_status tg_encoder_init(tg_ctx *ctx, tg_encoder *s, tg_dtype dt, const tg_encoder_config *cfg,
                          int64_t n_layers, bool final_norm, const char *prefix)
{
    return stack_init(ctx, "tg_encoder_init", s, NULL, dt, cfg, n_layers, final_norm, prefix);
}

tg_status tg_decoder_init(tg_ctx *ctx, tg_decoder *s, tg_dtype dt, const tg_decoder_config *cfg,
                          int64_t n_layers, bool final_norm, const char *prefix)
{
    return stack_init(ctx, "tg_decoder_init", NULL, s, dt, cfg, n_layers, final_norm, prefix);
}

/* The final norm of a stack, if it has one. */
static tg_tensor *final_norm(tg_ctx *ctx, const tg_encoder_config *cfg, tg_tensor *x, tg_tensor *w,
                             tg_tensor *b)
{
    return w ? tg_layer_norm(ctx, x, w, b, cfg->layer_norm_eps) : x;
}

tg_tensor *tg_encoder_forward(tg_ctx *ctx, const tg_encoder *s, tg_tensor *x,
                              const tg_attn_masks *masks)
{
    if (!ctx || !x)
        return NULL;
    if (!s || !s->layers || s->n_layers < 1 || s->n_layers > TG_NN_MAX_LAYERS)
        return tg__err(ctx, TG_ERR_ARG, "tg_encoder_forward", "stack is NULL or not initialised");
    for (int64_t i = 0; i < s->n_layers; i++)
        x = tg_encoder_layer_forward(ctx, &s->layers[i], x, masks); /* (B, T, D) */
    return final_norm(ctx, &s->cfg, x, s->norm_weight, s->norm_bias);
}

tg_tensor *tg_decoder_forward(tg_ctx *ctx, const tg_decoder *s, tg_tensor *x, tg_tensor *memory,
                              const tg_attn_masks *tgt_masks, const tg_attn_masks *memory_masks)
{
    if (!ctx || !x || !memory)
        return NULL;
    if (!s || !s->layers || s->n_layers < 1 || s->n_layers > TG_NN_MAX_LAYERS)
        return tg__err(ctx, TG_ERR_ARG, "tg_decoder_forward", "stack is NULL or not initialised");
    for (int64_t i = 0; i < s->n_layers; i++)
        x = tg_decoder_layer_forward(ctx, &s->layers[i], x, memory, tgt_masks,
                                     memory_masks); /* (B, T, D) */
    return final_norm(ctx, &s->cfg, x, s->norm_weight, s->norm_bias);
}

tg_status tg_encoder_decoder_init(tg_ctx *ctx, tg_encoder_decoder *m, tg_dtype dt,
                                  const tg_encoder_config *cfg, int64_t n_encoder_layers,
                                  int64_t n_decoder_layers, const char *prefix)
{
    static const char *fn = "tg_encoder_decoder_init";
    tg_status s0 = tg__nn_init_begin(ctx, m, sizeof *m);
    if (s0 != TG_OK)
        return s0;
    if (!m || !cfg)
        return TG_ERR_ARG;
    if (!tg__nn_layer_config_ok(ctx, fn, cfg))
        return TG_ERR_ARG;
    if (n_encoder_layers < 1 || n_encoder_layers > TG_NN_MAX_LAYERS || n_decoder_layers < 1 ||
        n_decoder_layers > TG_NN_MAX_LAYERS) {
        tg__err(ctx, TG_ERR_ARG, fn,
                "n_encoder_layers %lld and n_decoder_layers %lld must be "
                "from 1 to %d",
                (long long)n_encoder_layers, (long long)n_decoder_layers, TG_NN_MAX_LAYERS);
        return TG_ERR_ARG;
    }
    /* both halves' sizes against the memory limit before either allocates */
    tg__nn_plan plan = tg__nn_plan_begin(ctx, fn, dt);
    tg__nn_layer_plan_add(&plan, cfg, n_encoder_layers, false);
    tg__nn_layer_plan_add(&plan, cfg, n_decoder_layers, true);
    tg__nn_plan_add(&plan, 4, 1, cfg->d_model, 0, "norm.weight (d_model)", "d_model");
    tg_status ps = tg__nn_plan_end(&plan);
    if (ps != TG_OK)
        return ps;
    const char *p = prefix ? prefix : "";
    char sub[2 * TG_NAME_MAX];
    snprintf(sub, sizeof sub, "%sencoder.", p);
    if (tg_encoder_init(ctx, &m->encoder, dt, cfg, n_encoder_layers, true, sub) != TG_OK)
        return tg__nn_status(ctx);
    snprintf(sub, sizeof sub, "%sdecoder.", p);
    tg_decoder_init(ctx, &m->decoder, dt, cfg, n_decoder_layers, true, sub);
    return tg__nn_status(ctx);
}

tg_tensor *tg_encoder_decoder_forward(tg_ctx *ctx, const tg_encoder_decoder *m, tg_tensor *src,
                                      tg_tensor *tgt, const tg_attn_masks *src_masks,
                                      const tg_attn_masks *tgt_masks,
                                      const tg_attn_masks *memory_masks)
{
    if (!ctx || !src || !tgt)
        return NULL;
    if (!m)
        return tg__err(ctx, TG_ERR_ARG, "tg_encoder_decoder_forward", "model is NULL");
    tg_tensor *memory = tg_encoder_forward(ctx, &m->encoder, src, src_masks); /* (B, S, D) */
    return tg_decoder_forward(ctx, &m->decoder, tgt, memory, tgt_masks, memory_masks);
}
