/**
 * @file tgrad_nn.h
 * @brief Transformer modules built as graphs of registered ops: scaled dot-product attention
 *        (SDPA), multi-head attention (MHA), the position-wise feed-forward network (FFN) and
 *        the transformer encoder and decoder layers, their stacks and the encoder-decoder
 *        model (nn.Transformer). No module has a hand-written backward: autodiff
 *        derives it from the ops.
 *
 * Layout is batch-first, outermost first: x (B, T, D) with B batch, T seq_len, D d_model,
 * H n_heads, Dh = d_k = d_v = D / H, F d_ff.
 *
 * **Mask convention.** Every mask is either boolean (::TG_MASK_BLOCK: stored as 0/1, 1 = true =
 * "may not be attended") or additive (::TG_MASK_ADDITIVE: a float added to the scores). This
 * maps onto PyTorch's three conventions:
 * | PyTorch                                          | tgrad                                 |
 * |--------------------------------------------------|---------------------------------------|
 * | `nn.MultiheadAttention` bool `attn_mask` (True = blocked) | ::TG_MASK_BLOCK, same values |
 * | float `attn_mask` (added to scores)              | ::TG_MASK_ADDITIVE, same values        |
 * | `key_padding_mask` (B, T_k), True = padding      | tg_attn_masks::key_padding_mask (BLOCK) |
 * | `F.scaled_dot_product_attention` bool `attn_mask` (True = **attend**) | BLOCK with the mask negated |
 * | `is_causal=True` / `generate_square_subsequent_mask` | tg_attn_masks::causal / tg_causal_mask() |
 * | Keras tutorials: `scores += -1e9 * mask`     | ADDITIVE with tg_scale(mask, -1e9)      |
 *
 * Masks are float tensors in the dtype of the inputs. A 0/1 mask held as integers (an ::TG_I32
 * tensor, e.g. read from a `|b1` or `<i8` file) is converted explicitly into a float constant
 * with tg_tensor_copy() (exact); `tgrad run` reads bool and 0/1 integer mask files as floats.
 *
 * **Fully masked rows.** When every key of a query row is blocked, tgrad's attention weights
 * for that row are zeros, the row of the attention output is zero before the output projection
 * (so the MHA output is out_proj.bias there), and gradients through the row are zero.
 * PyTorch's `nn.MultiheadAttention` and `nn.TransformerEncoderLayer` return NaN there.
 *
 * **Parameters** are created by the *_init functions as ::TG_KIND_PARAM tensors named with
 * PyTorch `state_dict` keys (with an optional prefix, e.g. "layers.0."), initialised as PyTorch
 * does by default from the context RNG, and can be found again with tg_ctx_find_param().
 */
#ifndef TGRAD_NN_H
#define TGRAD_NN_H

#include "tgrad.h"

#ifdef __cplusplus
extern "C" {
#endif

/* tg_activation (the feed-forward activation) is declared in tgrad.h, beside tg_dense_act. */

/** Masks for attention; every field is optional and they combine (all blocks apply). */
typedef struct tg_attn_masks {
    /** (T_q, T_k), or (B, T_q, T_k) (broadcast over heads) for MHA; anything broadcastable to
     *  the scores (..., T_q, T_k) for SDPA. NULL for none. Same dtype as the inputs. */
    tg_tensor *attn_mask;
    tg_mask_kind attn_mask_kind; /**< how attn_mask is read */
    /** (B, T_k), 1 = padding (blocked). NULL for none. MHA / encoder only. */
    tg_tensor *key_padding_mask;
    /** Block key j for query i when j > i (look-ahead mask, top-left aligned as PyTorch's
     *  `is_causal`). */
    bool causal;
} tg_attn_masks;

/**
 * Causal (look-ahead) mask as a ::TG_MASK_BLOCK constant: m[i][j] = 1 if j > i else 0.
 * Shapes: -> (T_q, T_k). Errors: ::TG_ERR_SHAPE if a size < 1 or T_q T_k is more than
 * ::TG_MAX_NUMEL, ::TG_ERR_NOMEM. Owned by the context.
 * Source: Vaswani et al. 2017, sec. 3.2.3 ("masking out ... illegal connections").
 */
TG_API tg_tensor *tg_causal_mask(tg_ctx *ctx, tg_dtype dt, int64_t t_q, int64_t t_k);

/**
 * Scaled dot-product attention: softmax(Q K^T * scale + mask) V.
 * Shapes: q (..., T_q, d_k), k (..., T_k, d_k), v (..., T_k, d_v) with broadcastable leading
 * dims (none at all is fine) -> (..., T_q, d_v); attention weights (..., T_q, T_k).
 * @param masks NULL or masks; key_padding_mask is refused (::TG_ERR_ARG): pass padding as
 *        attn_mask shaped to broadcast, e.g. (B, 1, T_k). causal uses T_q, T_k of q and k.
 * @param scale 0 means 1/sqrt(d_k) (the paper's); otherwise the factor used.
 * @param attn_weights if not NULL, receives the softmax weights tensor (part of the graph).
 * Errors: ::TG_ERR_SHAPE (d_k differ, T_k of k and v differ, mask not broadcastable),
 * ::TG_ERR_ARG (scale not finite), ::TG_ERR_DTYPE (an integer attn_mask is named as such).
 * Source: Vaswani et al. 2017, "Attention Is All You Need", sec. 3.2.1, eq. (1).
 */
TG_API tg_tensor *tg_sdpa(tg_ctx *ctx, tg_tensor *q, tg_tensor *k, tg_tensor *v,
                          const tg_attn_masks *masks, double scale, tg_tensor **attn_weights);

/** Multi-head attention parameters (PyTorch `nn.MultiheadAttention`, batch_first=True). */
typedef struct tg_mha {
    int64_t d_model; /**< D */
    int64_t n_heads; /**< H; d_k = d_v = D / H */
    tg_tensor *in_proj_weight;  /**< (3D, D)  `in_proj_weight`: rows [W_q; W_k; W_v] */
    tg_tensor *in_proj_bias;    /**< (3D)     `in_proj_bias` */
    tg_tensor *out_proj_weight; /**< (D, D)   `out_proj.weight` */
    tg_tensor *out_proj_bias;   /**< (D)      `out_proj.bias` */
    /** Dropout probability on the attention weights in training mode, in [0, 1)
     *  (`nn.MultiheadAttention(dropout=)`); 0 after tg_mha_init(). The encoder and decoder
     *  layers set it to their config's dropout, as `nn.TransformerEncoderLayer` does. */
    double dropout;
} tg_mha;

/**
 * Create MHA parameters named `<prefix>in_proj_weight`, `<prefix>in_proj_bias`,
 * `<prefix>out_proj.weight`, `<prefix>out_proj.bias` (prefix may be NULL or ""), initialised as
 * PyTorch: xavier-uniform in_proj_weight (bound sqrt(6 / (D + 3D))), zero biases,
 * out_proj.weight uniform(+-1/sqrt(D)) (nn.Linear's kaiming-uniform with a = sqrt 5).
 * Errors: ::TG_ERR_ARG (m NULL: nothing recorded; d_model or n_heads < 1, n_heads not dividing d_model, d_model
 * so large that in_proj_weight (3D, D) would hold more than ::TG_MAX_NUMEL elements),
 * ::TG_ERR_NOMEM (allocation failed, or the parameters would exceed the context's memory
 * limit: checked before anything is allocated), or the pending build error (nothing is
 * allocated while one is pending; see "Errors come in two kinds" in tgrad.h).
 */
TG_API tg_status tg_mha_init(tg_ctx *ctx, tg_mha *m, tg_dtype dt, int64_t d_model,
                             int64_t n_heads, const char *prefix);

/**
 * Multi-head attention (Vaswani et al. 2017, sec. 3.2.2; PyTorch `nn.MultiheadAttention`
 * with batch_first=True, dropout = m->dropout):
 *   q_h = (query W_q^T + b_q) split into H heads, likewise k_h, v_h (reshape + transpose);
 *   a_h = dropout(softmax(q_h k_h^T / sqrt(Dh) + masks), m->dropout);
 *   o_h = a_h v_h;  out = concat_h(o_h) W_o^T + b_o.
 * The dropout acts in training mode only (tg_ctx_set_training()); with m->dropout > 0 the
 * attention runs unfused (scores, softmax, dropout, product) whatever tg_ctx_fusion() says,
 * and the returned weights are those after dropout, as PyTorch's.
 * Self-attention: pass the same tensor as query, key and value (its gradient sums all uses).
 * Shapes: query (B, T_q, D), key (B, T_k, D), value (B, T_k, D) -> (B, T_q, D);
 * attention weights per head (B, H, T_q, T_k) (PyTorch averages over heads by default).
 * Errors: ::TG_ERR_SHAPE (widths differ from d_model, batch or T_k mismatch, mask shapes),
 * ::TG_ERR_ARG (m NULL or uninitialised), ::TG_ERR_DTYPE (inputs of different dtypes, or an
 * integer attn_mask or key_padding_mask: the message names the mask and its dtype).
 */
TG_API tg_tensor *tg_mha_forward(tg_ctx *ctx, const tg_mha *m, tg_tensor *query,
                                 tg_tensor *key, tg_tensor *value, const tg_attn_masks *masks,
                                 tg_tensor **attn_weights);

/** Position-wise feed-forward network parameters. */
typedef struct tg_ffn {
    int64_t d_model, d_ff;
    tg_activation activation;
    tg_tensor *linear1_weight; /**< (F, D) `linear1.weight` */
    tg_tensor *linear1_bias;   /**< (F)    `linear1.bias` */
    tg_tensor *linear2_weight; /**< (D, F) `linear2.weight` */
    tg_tensor *linear2_bias;   /**< (D)    `linear2.bias` */
} tg_ffn;

/**
 * Create FFN parameters `<prefix>linear1.weight`, `.bias`, `<prefix>linear2.weight`, `.bias`,
 * initialised as nn.Linear (weight and bias uniform(+-1/sqrt(fan_in))).
 * Errors: ::TG_ERR_ARG (f NULL: nothing recorded; sizes < 1, unknown activation, linear1.weight (F, D) more than
 * ::TG_MAX_NUMEL elements), ::TG_ERR_NOMEM (as tg_mha_init()), or the pending build error.
 */
TG_API tg_status tg_ffn_init(tg_ctx *ctx, tg_ffn *f, tg_dtype dt, int64_t d_model, int64_t d_ff,
                             tg_activation act, const char *prefix);

/**
 * FFN(x) = linear2(act(linear1(x))) = act(x W1^T + b1) W2^T + b2 (Vaswani et al. 2017,
 * sec. 3.3, eq. (2)). Shapes: x (..., D) -> (..., D), hidden (..., F).
 * Errors: ::TG_ERR_SHAPE (x's last dim != d_model), ::TG_ERR_ARG.
 */
TG_API tg_tensor *tg_ffn_forward(tg_ctx *ctx, const tg_ffn *f, tg_tensor *x);

/** tg_encoder_config::attn_dropout and ::act_dropout: no dropout there, whatever
 *  tg_encoder_config::dropout is. */
#define TG_DROPOUT_OFF (-1.0)

/** Encoder layer hyperparameters (PyTorch `nn.TransformerEncoderLayer` arguments). */
typedef struct tg_encoder_config {
    int64_t d_model;        /**< D */
    int64_t n_heads;        /**< H, must divide D */
    int64_t d_ff;           /**< F (PyTorch dim_feedforward, default 2048) */
    tg_activation activation;
    bool norm_first;        /**< false: post-norm (the paper's); true: pre-norm */
    double layer_norm_eps;  /**< PyTorch default 1e-5 */
    double dropout;         /**< dropout probability in training mode (0 = none): after each
                             *   sublayer, before the residual add, and, unless set apart
                             *   below, on the attention weights and inside the FFN (PyTorch's
                             *   one dropout) */
    double attn_dropout;    /**< on the attention weights (fairseq's --attention-dropout): 0 =
                             *   as dropout; in (0, 1): this probability; ::TG_DROPOUT_OFF:
                             *   none */
    double act_dropout;     /**< inside the FFN, after the activation (fairseq's
                             *   --activation-dropout): the same convention */
} tg_encoder_config;

/** PyTorch's defaults for a given d_model and n_heads: d_ff 2048, relu, post-norm, eps 1e-5,
 *  dropout 0 (PyTorch's default is 0.1; tgrad's is 0 so that runs are exact by default). */
TG_API tg_encoder_config tg_encoder_config_default(int64_t d_model, int64_t n_heads);

/** Encoder layer parameters. */
typedef struct tg_encoder_layer {
    tg_encoder_config cfg;
    tg_mha self_attn;       /**< `self_attn.*` */
    tg_ffn ffn;             /**< `linear1.*`, `linear2.*` */
    tg_tensor *norm1_weight, *norm1_bias; /**< (D) `norm1.weight`, `norm1.bias` */
    tg_tensor *norm2_weight, *norm2_bias; /**< (D) `norm2.weight`, `norm2.bias` */
} tg_encoder_layer;

/**
 * Create an encoder layer's parameters with exactly PyTorch's `state_dict` keys after
 * @p prefix: `self_attn.in_proj_weight (3D, D)`, `self_attn.in_proj_bias (3D)`,
 * `self_attn.out_proj.weight (D, D)`, `self_attn.out_proj.bias (D)`, `linear1.weight (F, D)`,
 * `linear1.bias (F)`, `linear2.weight (D, F)`, `linear2.bias (D)`, `norm1.weight (D)`,
 * `norm1.bias (D)`, `norm2.weight (D)`, `norm2.bias (D)`; PyTorch default initialisation.
 * Errors: ::TG_ERR_ARG (bad config: sizes, heads not dividing d_model, eps < 0, dropout
 * outside [0, 1), a parameter more than ::TG_MAX_NUMEL elements), ::TG_ERR_NOMEM (as
 * tg_mha_init()), or the pending build error. Stops at its first failure.
 */
TG_API tg_status tg_encoder_layer_init(tg_ctx *ctx, tg_encoder_layer *l, tg_dtype dt,
                                       const tg_encoder_config *cfg, const char *prefix);

/**
 * Transformer encoder layer (Vaswani et al. 2017, sec. 3.1; PyTorch
 * `nn.TransformerEncoderLayer(batch_first=True)`):
 *   post-norm: x = norm1(x + SA(x)); x = norm2(x + FFN(x))
 *   pre-norm:  x = x + SA(norm1(x)); x = x + FFN(norm2(x))
 * with dropout on the attention weights (self_attn.dropout, set by tg_encoder_layer_init()),
 * after attention, inside the FFN and after the FFN when cfg.dropout > 0 and the context is in
 * training mode. Shapes: x (B, T, D) -> (B, T, D). Masks as tg_mha_forward().
 * Errors: ::TG_ERR_SHAPE, ::TG_ERR_ARG.
 */
TG_API tg_tensor *tg_encoder_layer_forward(tg_ctx *ctx, const tg_encoder_layer *l, tg_tensor *x,
                                           const tg_attn_masks *masks);

/* ------------------------------------------------------------------------------------------ */
/** Most layers a stack (tg_encoder_init(), tg_decoder_init()) accepts. */
#define TG_NN_MAX_LAYERS 65536

/** Decoder layer hyperparameters: the same as the encoder layer's (PyTorch
 *  `nn.TransformerDecoderLayer` takes the same arguments as `nn.TransformerEncoderLayer`).
 *  tg_encoder_config_default() gives PyTorch's defaults for both. */
typedef tg_encoder_config tg_decoder_config;

/** Decoder layer parameters (PyTorch `nn.TransformerDecoderLayer`, batch_first=True). */
typedef struct tg_decoder_layer {
    tg_decoder_config cfg;
    tg_mha self_attn;       /**< `self_attn.*` (masked self-attention over the target) */
    tg_mha multihead_attn;  /**< `multihead_attn.*` (cross-attention over memory) */
    tg_ffn ffn;             /**< `linear1.*`, `linear2.*` */
    tg_tensor *norm1_weight, *norm1_bias; /**< (D) `norm1.weight`, `norm1.bias` */
    tg_tensor *norm2_weight, *norm2_bias; /**< (D) `norm2.weight`, `norm2.bias` */
    tg_tensor *norm3_weight, *norm3_bias; /**< (D) `norm3.weight`, `norm3.bias` */
} tg_decoder_layer;

/**
 * Create a decoder layer's parameters with exactly PyTorch's `state_dict` keys after
 * @p prefix (NULL or "" for none): `self_attn.in_proj_weight (3D, D)`, `self_attn.in_proj_bias
 * (3D)`, `self_attn.out_proj.weight (D, D)`, `self_attn.out_proj.bias (D)`, the same four under
 * `multihead_attn.`, `linear1.weight (F, D)`, `linear1.bias (F)`, `linear2.weight (D, F)`,
 * `linear2.bias (D)`, `norm1.weight`, `norm1.bias`, `norm2.weight`, `norm2.bias`,
 * `norm3.weight`, `norm3.bias` (each (D)), in that order; PyTorch default initialisation (as
 * tg_mha_init(), tg_ffn_init(); layer norms weight 1, bias 0).
 * Errors: as tg_encoder_layer_init() (::TG_ERR_ARG for a bad config or NULL @p l or @p cfg,
 * ::TG_ERR_NOMEM, or the pending build error). Stops at its first failure.
 */
TG_API tg_status tg_decoder_layer_init(tg_ctx *ctx, tg_decoder_layer *l, tg_dtype dt,
                                       const tg_decoder_config *cfg, const char *prefix);

/**
 * Transformer decoder layer (Vaswani et al. 2017, sec. 3.1 "Decoder"; PyTorch
 * `nn.TransformerDecoderLayer(batch_first=True)`), with SA the masked self-attention, CA the
 * cross-attention (queries from the target, keys and values from @p memory):
 *   post-norm: x = norm1(x + SA(x)); x = norm2(x + CA(x, memory)); x = norm3(x + FFN(x))
 *   pre-norm:  x = x + SA(norm1(x)); x = x + CA(norm2(x), memory); x = x + FFN(norm3(x))
 * with dropout on both attentions' weights, after each sublayer and inside the FFN when
 * cfg.dropout > 0 and the context is in training mode (as the encoder layer). Attention and the
 * FFN take the same fused paths as tg_encoder_layer_forward() (flash attention, tg_dense_act)
 * when tg_ctx_fusion() is on (attention unfused when dropout > 0).
 *
 * **Shapes:** x (B, T, D) (the target), memory (B, S, D) (the encoder output) -> (B, T, D).
 * @param tgt_masks NULL or the self-attention masks: attn_mask = PyTorch `tgt_mask` (T, T)
 *        or (B, T, T), key_padding_mask = `tgt_key_padding_mask` (B, T), causal = the
 *        look-ahead mask (`tgt_is_causal` / generate_square_subsequent_mask).
 * @param memory_masks NULL or the cross-attention masks: attn_mask = `memory_mask` (T, S) or
 *        (B, T, S), key_padding_mask = `memory_key_padding_mask` (B, S); causal must be false.
 * Masks follow this header's one convention. A query row whose keys are all blocked gets zero
 * attention weights (the attention's contribution is its out_proj.bias), never NaN; PyTorch
 * gives NaN there.
 * Errors: ::TG_ERR_SHAPE (x or memory not rank 3 with last dim d_model, batch sizes differ, a
 * mask of the wrong shape: the message names tgt_mask, memory_mask, tgt_key_padding_mask or
 * memory_key_padding_mask), ::TG_ERR_ARG (layer NULL or not initialised, causal memory
 * masks), ::TG_ERR_DTYPE. Dtype: f32 or f64, all inputs alike.
 */
TG_API tg_tensor *tg_decoder_layer_forward(tg_ctx *ctx, const tg_decoder_layer *l,
                                           tg_tensor *x, tg_tensor *memory,
                                           const tg_attn_masks *tgt_masks,
                                           const tg_attn_masks *memory_masks);

/** A stack of encoder layers (PyTorch `nn.TransformerEncoder`). */
typedef struct tg_encoder {
    tg_encoder_config cfg;
    int64_t n_layers;
    tg_encoder_layer *layers;  /**< n_layers, parameters `layers.{i}.*` (context memory) */
    tg_tensor *norm_weight;    /**< (D) `norm.weight`, NULL without a final norm */
    tg_tensor *norm_bias;      /**< (D) `norm.bias`, NULL without a final norm */
} tg_encoder;

/**
 * Create an encoder stack: @p n_layers encoder layers named `<prefix>layers.{i}.<layer names>`
 * and, if @p final_norm, a final layer norm `<prefix>norm.weight`, `<prefix>norm.bias` (D)
 * (PyTorch `nn.TransformerEncoder(layer, n_layers, norm=nn.LayerNorm(D, eps))`). Every size
 * is checked before anything is allocated.
 * Errors: ::TG_ERR_ARG (bad config, n_layers < 1 or > ::TG_NN_MAX_LAYERS, NULL @p s or
 * @p cfg), ::TG_ERR_NOMEM, or the pending build error.
 */
TG_API tg_status tg_encoder_init(tg_ctx *ctx, tg_encoder *s, tg_dtype dt,
                                 const tg_encoder_config *cfg, int64_t n_layers,
                                 bool final_norm, const char *prefix);
/**
 * x = layer_{L-1}(... layer_0(x, masks) ..., masks); then norm(x) when the final norm exists.
 * Shapes: x (B, T, D) -> (B, T, D). Masks as tg_encoder_layer_forward() (the same for every
 * layer). Errors: as tg_encoder_layer_forward(); ::TG_ERR_ARG (stack not initialised).
 */
TG_API tg_tensor *tg_encoder_forward(tg_ctx *ctx, const tg_encoder *s, tg_tensor *x,
                                     const tg_attn_masks *masks);

/** A stack of decoder layers (PyTorch `nn.TransformerDecoder`). */
typedef struct tg_decoder {
    tg_decoder_config cfg;
    int64_t n_layers;
    tg_decoder_layer *layers;  /**< n_layers, parameters `layers.{i}.*` (context memory) */
    tg_tensor *norm_weight;    /**< (D) `norm.weight`, NULL without a final norm */
    tg_tensor *norm_bias;      /**< (D) `norm.bias`, NULL without a final norm */
} tg_decoder;

/** As tg_encoder_init() with decoder layers (`<prefix>layers.{i}.*`, `<prefix>norm.*`). */
TG_API tg_status tg_decoder_init(tg_ctx *ctx, tg_decoder *s, tg_dtype dt,
                                 const tg_decoder_config *cfg, int64_t n_layers,
                                 bool final_norm, const char *prefix);
/**
 * x = layer_{L-1}(... layer_0(x, memory) ..., memory), every layer reading the same
 * @p memory and masks; then norm(x) when the final norm exists.
 * Shapes: x (B, T, D), memory (B, S, D) -> (B, T, D).
 * Errors: as tg_decoder_layer_forward(); ::TG_ERR_ARG (stack not initialised).
 */
TG_API tg_tensor *tg_decoder_forward(tg_ctx *ctx, const tg_decoder *s, tg_tensor *x,
                                     tg_tensor *memory, const tg_attn_masks *tgt_masks,
                                     const tg_attn_masks *memory_masks);

/** The encoder-decoder Transformer (PyTorch `nn.Transformer`, batch_first=True). */
typedef struct tg_encoder_decoder {
    tg_encoder encoder; /**< `encoder.layers.{i}.*`, `encoder.norm.*` */
    tg_decoder decoder; /**< `decoder.layers.{i}.*`, `decoder.norm.*` */
} tg_encoder_decoder;

/**
 * Create the encoder-decoder model with `nn.Transformer`'s `state_dict` names after
 * @p prefix: `encoder.layers.{i}.*` (i < @p n_encoder_layers), `encoder.norm.*`,
 * `decoder.layers.{i}.*` (i < @p n_decoder_layers), `decoder.norm.*`. Both final norms
 * always exist, as in PyTorch.
 * Errors: as tg_encoder_init() for either count.
 */
TG_API tg_status tg_encoder_decoder_init(tg_ctx *ctx, tg_encoder_decoder *m, tg_dtype dt,
                                         const tg_encoder_config *cfg,
                                         int64_t n_encoder_layers, int64_t n_decoder_layers,
                                         const char *prefix);
/**
 * memory = encoder(src, src_masks); out = decoder(tgt, memory, tgt_masks, memory_masks)
 * (Vaswani et al. 2017, sec. 3.1, Figure 1; `nn.Transformer.forward` with src_mask and
 * src_key_padding_mask in @p src_masks, tgt_mask, tgt_key_padding_mask and causal in
 * @p tgt_masks, memory_mask and memory_key_padding_mask in @p memory_masks). Any of the
 * three may be NULL.
 * Shapes: src (B, S, D), tgt (B, T, D) -> (B, T, D).
 * Errors: as tg_encoder_forward() and tg_decoder_forward().
 */
TG_API tg_tensor *tg_encoder_decoder_forward(tg_ctx *ctx, const tg_encoder_decoder *m,
                                             tg_tensor *src, tg_tensor *tgt,
                                             const tg_attn_masks *src_masks,
                                             const tg_attn_masks *tgt_masks,
                                             const tg_attn_masks *memory_masks);

#ifdef __cplusplus
}
#endif
#endif /* TGRAD_NN_H */
