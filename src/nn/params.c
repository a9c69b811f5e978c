/*
 * params.c - the parameter list of a transformer config: every parameter tg_transformer_init
 * creates, in creation order, with its state_dict name and shape (include/tgrad_train.h).
 * The one place the list is spelled out: tg_transformer_init names its embeddings and head
 * from it and checks every parameter it created against it; checkpoint validation, tgrad
 * export and tg_model_load read it.
 *
 * Order (V vocab_size, T max_seq_len, D d_model, F d_ff, L n_layers, M n_decoder_layers):
 *   tok_emb.weight (V, D); pos_emb.weight (T, D) with learned positions;
 *   M = 0:  layers.<i>.<12 encoder layer parameters>, i < L; norm.weight (D), norm.bias (D)
 *   M > 0:  encoder.layers.<i>.<12>, i < L; encoder.norm.{weight,bias} (D);
 *           decoder.layers.<j>.<18 decoder layer parameters>, j < M; decoder.norm.{weight,bias}
 *   head.weight (V, D) unless tied; head.bias (V)
 * An encoder layer (nn.TransformerEncoderLayer): self_attn.{in_proj_weight (3D, D),
 * in_proj_bias (3D), out_proj.weight (D, D), out_proj.bias (D)}, linear1.{weight (F, D),
 * bias (F)}, linear2.{weight (D, F), bias (D)}, norm1.*, norm2.* (D). A decoder layer
 * (nn.TransformerDecoderLayer): self_attn.* and multihead_attn.* (4 each, as above), linear1.*,
 * linear2.*, norm1.*, norm2.*, norm3.*.
 */
#include "nn_internal.h"
#include "tgrad_train.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

/* A layer's parameters after its "<stack>layers.<i>." prefix: the encoder layer's are the
 * first 4 and the last 8 of the decoder layer's (no multihead_attn.*, no norm3.*). */
static const char *const decoder_layer_names[18] = {
    "self_attn.in_proj_weight", "self_attn.in_proj_bias", "self_attn.out_proj.weight",
    "self_attn.out_proj.bias", "multihead_attn.in_proj_weight", "multihead_attn.in_proj_bias",
    "multihead_attn.out_proj.weight", "multihead_attn.out_proj.bias", "linear1.weight",
    "linear1.bias", "linear2.weight", "linear2.bias", "norm1.weight", "norm1.bias",
    "norm2.weight", "norm2.bias", "norm3.weight", "norm3.bias"};

/* Rank and shape of @p p (its name is written by the caller). */
static void set(tg_param_info *p, int rank, int64_t d0, int64_t d1)
{
    memset(p, 0, sizeof *p);
    p->rank = rank;
    p->shape[0] = d0;
    p->shape[1] = rank > 1 ? d1 : 0;
}

/* Parameter @p j (0..17) of decoder layer @p i, or (encoder) parameter j of 12 mapped onto
 * the decoder's table; "<stack>layers.<i>.<name>". */
static void layer_param(const tg_transformer_config *c, const char *stack, int64_t i, int j,
                        bool decoder, tg_param_info *p)
{
    int64_t D = c->layer.d_model, F = c->layer.d_ff;
    int k = decoder || j < 4 ? j : j + 4; /* the decoder table's index */
    const char *name = decoder_layer_names[k];
    static const int rank[4] = {2, 1, 2, 1}; /* weight, bias, weight, bias */
    if (k < 8) /* attention: in_proj_weight (3D, D), in_proj_bias (3D), out_proj.* (D, D), (D) */
        set(p, rank[k % 4], k % 4 < 2 ? 3 * D : D, D);
    else if (k < 12) /* linear1.weight (F, D), .bias (F), linear2.weight (D, F), .bias (D) */
        set(p, rank[k - 8], k < 10 ? F : D, k < 10 ? D : F);
    else /* norms (D) */
        set(p, 1, D, 0);
    snprintf(p->name, sizeof p->name, "%slayers.%" PRId64 ".%s", stack, i, name);
}

/* Parameter @p i (0 <= i < n) of @p c (n its count). */
static void param_at(const tg_transformer_config *c, int64_t n, int64_t i, tg_param_info *p)
{
    int64_t V = c->vocab_size, D = c->layer.d_model;
    bool learned = c->pos == TG_POS_LEARNED, s2s = c->n_decoder_layers > 0;
    const char *name = NULL;
    if (i == 0) {
        set(p, 2, V, D);
        name = "tok_emb.weight";
    } else if (i == n - 1) {
        set(p, 1, V, 0);
        name = "head.bias";
    } else if (i == n - 2 && !c->tie_weights) {
        set(p, 2, V, D);
        name = "head.weight";
    } else if (learned && i == 1) {
        set(p, 2, c->max_seq_len, D);
        name = "pos_emb.weight";
    }
    if (name) {
        snprintf(p->name, sizeof p->name, "%s", name);
        return;
    }
    int64_t k = i - 1 - learned; /* index among the stacks' parameters */
    int64_t ne = 12 * c->n_layers;
    const char *enc = s2s ? "encoder." : "";
    if (k < ne) {
        layer_param(c, enc, k / 12, (int)(k % 12), false, p);
        return;
    }
    k -= ne;
    if (k < 2) {
        set(p, 1, D, 0);
        snprintf(p->name, sizeof p->name, "%snorm.%s", enc, k ? "bias" : "weight");
        return;
    }
    k -= 2; /* the decoder stack (s2s) */
    int64_t nd = 18 * c->n_decoder_layers;
    if (k < nd) {
        layer_param(c, "decoder.", k / 18, (int)(k % 18), true, p);
        return;
    }
    k -= nd;
    set(p, 1, D, 0);
    snprintf(p->name, sizeof p->name, "decoder.norm.%s", k ? "bias" : "weight");
}

int64_t tg_transformer_params(const tg_transformer_config *cfg, tg_param_info *out, int64_t cap)
{
    if (!cfg || cfg->n_layers < 0 || cfg->n_layers > TG_TRANSFORMER_MAX_LAYERS ||
        cfg->n_decoder_layers < 0 || cfg->n_decoder_layers > TG_TRANSFORMER_MAX_LAYERS ||
        cfg->layer.d_model > INT64_MAX / 3)
        return -1;
    int64_t n = 4 + 12 * cfg->n_layers + (cfg->pos == TG_POS_LEARNED) + !cfg->tie_weights;
    if (cfg->n_decoder_layers > 0)
        n += 2 + 18 * cfg->n_decoder_layers;
    for (int64_t i = 0; out && i < n && i < cap; i++)
        param_at(cfg, n, i, &out[i]);
    return n;
}

int64_t tg__transformer_param(const tg_transformer_config *cfg, int64_t i, tg_param_info *p)
{
    int64_t n = tg_transformer_params(cfg, NULL, 0);
    if (n < 0 || i < 0 || i >= n)
        return -1;
    param_at(cfg, n, i, p);
    return n;
}
