/*
 * vjp.h - internal to layer 3 (graph), read by src/graph/grad.c: each op's reverse rule
 * written as ops, so a gradient is an ordinary part of a graph (tg_grad, include/tgrad.h) that
 * can be run, inspected and differentiated again. docs/autodiff.md lists the ops that have one.
 */
#ifndef TG_VJP_H
#define TG_VJP_H

#include "core.h"

/* The reverse rule of op node @p y as new nodes: given @p gy (y's shape and dtype), set gx[k]
 * for every source k with need[k] to d<gy, y>/d src[k] (src[k]'s shape and y's dtype); gx[k]
 * stays NULL where that gradient is zero. Returns false with a build error on the context. */
typedef bool (*tg__vjp_fn)(tg_ctx *ctx, tg_tensor *y, tg_tensor *gy, const bool *need,
                           tg_tensor **gx);

/* The rule of @p y's op, or NULL when it has none yet. */
tg__vjp_fn tg__vjp_rule(const tg_tensor *y);

/* A constant of dtype @p dt and shape (@p rank, @p shape) filled with @p v (rank 0: a
 * scalar); NULL on a build error. */
tg_tensor *tg__filled(tg_ctx *ctx, tg_dtype dt, int rank, const int64_t *shape, double v,
                      const char *name);

/* Layer norm node @p y recomputed from its input: x_hat = (x - mean) / sqrt(var + eps) over the
 * last axis, and 1 / sqrt(var + eps) in @p inv. */
tg_tensor *tg__layer_norm_xhat(tg_ctx *ctx, const tg_tensor *y, tg_tensor **inv);

/* @p g (a broadcast result's shape) summed down to @p like's shape (the leading axes @p like
 * lacks and the axes where it has 1), as tg_add's backward reduces: NULL on a build error. */
tg_tensor *tg__sum_to(tg_ctx *ctx, tg_tensor *g, const tg_tensor *like);

/* The unfused equivalent of fused node @p y (dense_act: act(dense); flash_attention:
 * softmax(scale q k^T + masks) v), built from y's sources; NULL for other ops. */
tg_tensor *tg__unfused(tg_ctx *ctx, tg_tensor *y);

/* The partial derivatives of @p y (a fused node's unfused equivalent, built from the fused
 * node's @p n sources @p src) with respect to those sources, each taken as an independent
 * variable (the walk stops at them), seeded @p gy: gx[k] for need[k] (NULL: zero; a source
 * given twice gets its total on its first slot). src/graph/grad.c. False with a build error. */
bool tg__grad_partial(tg_ctx *ctx, tg_tensor *y, tg_tensor *gy, int n, tg_tensor *const *src,
                      const bool *need, tg_tensor **gx);

/* Whether a custom op's rule result @p r (gradient k, or the tangent: k = -1) has the shape,
 * dtype and context of @p like; records TG_ERR_SHAPE naming the op and @p rule (the calling
 * function: "tg_grad" or "tg_jvp") otherwise. */
bool tg__custom_result_ok(tg_ctx *ctx, const tg_tensor *y, const char *rule, int k,
                          const tg_tensor *r, const tg_tensor *like);

/* Mark the nodes made since creation number @p id0 that any of @p r[0..n) (NULL entries
 * skipped) depends on as part of fused node @p y's unfused form (tg_tensor_unfused_of). False
 * with TG_ERR_NOMEM recorded. */
bool tg__mark_unfused(tg_ctx *ctx, tg_tensor *const *r, int n, uint64_t id0, const tg_tensor *y);

#endif
