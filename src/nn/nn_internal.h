/* nn_internal.h - helpers shared by the module builders (layer 4: public op builders only). */
#ifndef TG_NN_INTERNAL_H
#define TG_NN_INTERNAL_H

#include "tgrad_nn.h"

/* A parameter named <prefix><name>, filled uniform in [-bound, bound) (bound 0: zeros;
 * fill_one: ones). Returns NULL with the context error set. */
tg_tensor *tg__nn_param(tg_ctx *ctx, tg_dtype dt, int rank, const int64_t *shape,
                        const char *prefix, const char *name, double bound, bool fill_one);

/* Apply every mask in `masks` to scores (..., T_q, T_k). For MHA, batch B and heads are the
 * leading dims (B, H, T_q, T_k): 3-D attn masks (B, T_q, T_k) and key padding (B, T_k) are
 * reshaped to broadcast over heads. mha = false (SDPA): attn_mask used as given. */
tg_tensor *tg__nn_apply_masks(tg_ctx *ctx, const char *fn, tg_tensor *scores,
                              const tg_attn_masks *masks, bool mha);

#endif
