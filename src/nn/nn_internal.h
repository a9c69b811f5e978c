/* nn_internal.h - helpers shared by the module builders (layer 4: public op builders only). */
#ifndef TG_NN_INTERNAL_H
#define TG_NN_INTERNAL_H

#include "tgrad_nn.h"
#include "tgrad_train.h"

/* Parameter @p i of tg_transformer_params(@p cfg) into *p, computed alone (no list); returns
 * the count, or -1 (p untouched) for a config without a list or i out of range. */
int64_t tg__transformer_param(const tg_transformer_config *cfg, int64_t i, tg_param_info *p);

/* A parameter named <prefix><name>, filled uniform in [-bound, bound) (bound 0: zeros;
 * fill_one: ones). Returns NULL with the context error set. */
tg_tensor *tg__nn_param(tg_ctx *ctx, tg_dtype dt, int rank, const int64_t *shape,
                        const char *prefix, const char *name, double bound, bool fill_one);

/* The (t, d) constant of tg_sinusoidal_encoding, sizes checked (values not yet filled). */
tg_tensor *tg__nn_sinusoidal(tg_ctx *ctx, tg_dtype dt, int64_t t, int64_t d);

/* Size plan of a module's parameters, checked before anything is allocated: every parameter
 * must be representable (at most TG_MAX_NUMEL elements, no overflow on the way), and their
 * bytes must fit in size_t and, if the context has a memory limit, in what is left of it. */
typedef struct tg__nn_plan {
    tg_ctx *ctx;
    const char *fn; /* the init function, for messages */
    size_t es;      /* element size */
    size_t bytes;   /* total so far */
    bool ok;        /* false once an error is recorded */
} tg__nn_plan;
tg__nn_plan tg__nn_plan_begin(tg_ctx *ctx, const char *fn, tg_dtype dt);
/* Add `count` parameters of shape (k * a, b) (b = 0: a vector (k * a)); `what` names the
 * parameter with a symbolic shape ("in_proj_weight (3 d_model, d_model)") and `why` the
 * user's values ("d_model 1000000000"), both for the message if it is too large. */
void tg__nn_plan_add(tg__nn_plan *p, int64_t count, int64_t k, int64_t a, int64_t b,
                     const char *what, const char *why);
/* Check the total against size_t and the memory limit; returns the status (recorded). */
tg_status tg__nn_plan_end(tg__nn_plan *p);
/* Add n_layers encoder layers' (decoder = false) or decoder layers' (decoder = true)
 * parameters to a plan (cfg already validated; n_layers small enough that 9 * n_layers cannot
 * overflow). */
void tg__nn_layer_plan_add(tg__nn_plan *plan, const tg_encoder_config *cfg, int64_t n_layers,
                           bool decoder);
#define tg__nn_encoder_plan_add(plan, cfg, n) tg__nn_layer_plan_add(plan, cfg, n, false)
/* The start of tg_encoder_layer_init / tg_decoder_layer_init: tg__nn_init_begin, the config
 * validated, every parameter's size planned. TG_OK to go on, else the status (recorded). */
tg_status tg__nn_layer_init_begin(tg_ctx *ctx, const char *fn, void *l, size_t size,
                                  const tg_encoder_config *cfg, tg_dtype dt, bool decoder);
/* Validate an encoder or decoder layer config; records a TG_ERR_ARG naming fn and returns
 * false if it is bad. */
bool tg__nn_layer_config_ok(tg_ctx *ctx, const char *fn, const tg_encoder_config *cfg);
/* The layer norm pair <prefix><name>.weight (ones), <prefix><name>.bias (zeros), both (d). */
void tg__nn_norm_params(tg_ctx *ctx, tg_dtype dt, int64_t d, const char *prefix,
                        const char *name, tg_tensor **weight, tg_tensor **bias);

/* The pieces of a transformer layer (encoder.c), shared by the encoder and decoder layers:
 * dropout when p > 0 (identity otherwise); a sublayer's input, norm(x) for pre-norm and x
 * for post-norm; its output, x + drop(y) then norm for post-norm; and the feed-forward block
 * linear2(drop(act(linear1(h)))) with the activation in the GEMM epilogue when fusion is on. */
tg_tensor *tg__nn_drop(tg_ctx *ctx, tg_tensor *x, double p);
/* The probability of a dropout with a setting of its own (tg_encoder_config::attn_dropout,
 * act_dropout): 0 = @p dropout, TG_DROPOUT_OFF = none, else @p own. */
double tg__nn_dropout_of(double own, double dropout);
tg_tensor *tg__nn_sublayer_in(tg_ctx *ctx, const tg_encoder_config *cfg, tg_tensor *x,
                              tg_tensor *norm_w, tg_tensor *norm_b);
tg_tensor *tg__nn_sublayer_out(tg_ctx *ctx, const tg_encoder_config *cfg, tg_tensor *x,
                               tg_tensor *y, tg_tensor *norm_w, tg_tensor *norm_b);
tg_tensor *tg__nn_ff_block(tg_ctx *ctx, const tg_ffn *f, tg_tensor *h, double p);
/* The start of every module init function: TG_ERR_ARG without a context; otherwise clear
 * the module struct @p m (@p size bytes, when not NULL) and start a build call, returning the
 * pending build error if there is one (stop before allocating) and TG_OK to go on. */
tg_status tg__nn_init_begin(tg_ctx *ctx, void *m, size_t size);
/* The context's pending build error, or TG_OK (what an init function returns at its end). */
tg_status tg__nn_status(const tg_ctx *ctx);

/* The masks of one attention call, validated and shaped to broadcast over the scores
 * (..., T_q, T_k): attn (or NULL) read as kind; pad, the key padding (B, 1, 1, T_k) (MHA), or
 * NULL; causal. For MHA the scores are (B, H, T_q, T_k): a 3-D attn_mask (B, T_q, T_k) becomes
 * (B, 1, T_q, T_k). mha = false (SDPA): attn_mask as given, key padding refused. Records the
 * error and returns false on failure. */
typedef struct tg__nn_masks {
    tg_tensor *attn;
    tg_mask_kind kind;
    tg_tensor *pad;
    bool causal;
} tg__nn_masks;
bool tg__nn_prepare_masks(tg_ctx *ctx, const char *fn, const tg_attn_masks *masks, bool mha,
                          int64_t b, int64_t t_q, int64_t t_k, tg__nn_masks *out);

/* Apply every mask in `masks` to scores (..., T_q, T_k). For MHA, batch B and heads are the
 * leading dims (B, H, T_q, T_k): 3-D attn masks (B, T_q, T_k) and key padding (B, T_k) are
 * reshaped to broadcast over heads. mha = false (SDPA): attn_mask used as given. */
tg_tensor *tg__nn_apply_masks(tg_ctx *ctx, const char *fn, tg_tensor *scores,
                              const tg_attn_masks *masks, bool mha);

#endif
