/*
 * embedding.c - token embedding lookup (PyTorch nn.Embedding).
 *
 * Forward:  y[n, :] = W[ids[n], :]              ids (...) i32 -> y (..., D), W (V, D)
 * Backward: dW[v, :] += sum over n with ids[n] == v of dy[n, :]
 *   Deterministic scatter-add without atomics: forward groups the positions by id with a stable
 *   counting sort (serial, O(N + V)) and saves it; backward gives each vocabulary row v to one
 *   thread, which sums its positions in increasing n. ids carry no gradient.
 *   Backward reads only the saved sort and dy, never the ids: changing the ids between forward
 *   and backward cannot change the gradient of the forward that ran.
 * Check (before each forward): every id is in [0, V).
 * saved: int64 order[N] (positions grouped by id, increasing within an id), start[V + 1]
 *        (positions of id v are order[start[v] .. start[v + 1])).
 */
#include "registry.h"

#include <stdio.h>

tg_tensor *tg_embedding(tg_ctx *ctx, tg_tensor *ids, tg_tensor *weight)
{
    static const char *fn = "tg_embedding";
    tg_tensor *src[2] = {ids, weight};
    if (!tg__check_srcs_ids(ctx, fn, 2, src, 0, "ids"))
        return NULL;
    char bw[128], bi[128];
    if (weight->rank != 2)
        return tg__err(ctx, TG_ERR_SHAPE, fn, "weight must be (num_embeddings, dim), got %s",
                       tg__shape_str(weight, bw, sizeof bw));
    if (ids->rank + 1 > TG_MAX_RANK)
        return tg__err(ctx, TG_ERR_SHAPE, fn, "ids %s: rank too large",
                       tg__shape_str(ids, bi, sizeof bi));
    int64_t shape[TG_MAX_RANK];
    memcpy(shape, ids->shape, sizeof(int64_t) * (size_t)ids->rank);
    shape[ids->rank] = weight->shape[1];
    tg_tensor *y = tg__op_new(ctx, TG_OP_EMBEDDING, weight->dtype, ids->rank + 1, shape, 2, src);
    if (!y)
        return NULL;
    y->requires_grad = weight->requires_grad; /* ids are i32: never differentiable */
    if (!tg__op_save_n(y, ids->numel + weight->shape[0] + 1, sizeof(int64_t), 0))
        return NULL;
    return y;
}

tg_status tg__embedding_check(const tg__call *c)
{
    const int32_t *id = c->in[0];
    int64_t V = c->src_shape[1][0];
    for (int64_t n = 0; n < c->src_numel[0]; n++) {
        if (id[n] < 0 || id[n] >= V) {
            tg__run_err(c->ctx, TG_ERR_ARG, "tg_embedding",
                    "'%s'[%lld] = %lld is not a token id in [0, %lld)", c->src_name[0], (long long)n,
                    (long long)id[n], (long long)V);
            return TG_ERR_ARG;
        }
    }
    return TG_OK;
}

/* The stable counting sort of the ids (checked to be in [0, V)) into c->saved. Serial. */
static void sort_ids(const tg__call *c)
{
    const int32_t *ids = c->in[0];
    int64_t N = c->src_numel[0], V = c->src_shape[1][0];
    int64_t *order = c->saved, *start = order + N;
    memset(start, 0, sizeof(int64_t) * (size_t)(V + 1));
    for (int64_t n = 0; n < N; n++)
        start[ids[n] + 1]++;
    for (int64_t v = 0; v < V; v++)
        start[v + 1] += start[v];
    for (int64_t n = 0; n < N; n++) /* stable: positions in increasing order */
        order[start[ids[n]]++] = n;
    for (int64_t v = V; v > 0; v--) /* restore the start offsets */
        start[v] = start[v - 1];
    start[0] = 0;
}

/* The kernels, written once in embedding_kernel.h, for f32 and for f64: tg__embedding_forward_f32
 * ... _backward_f64, registered per dtype in ops/ops_dtype.def under the output's (the weight's)
 * dtype; the ids are i32 whatever it is. */
#define T float
#define SUF f32
#include "embedding_kernel.h"
#undef T
#undef SUF
#define T double
#define SUF f64
#include "embedding_kernel.h"
#undef T
#undef SUF
