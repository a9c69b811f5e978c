/*
 * one_hot.c - one-hot rows of class ids (PyTorch F.one_hot, as floats, with an ignored id).
 *
 * Forward:  y[n, c] = 1 if ids[n] == c else 0     ids (...) i32 -> y (..., C) f32 or f64
 *           a row whose id is ignore_index is all zeros
 * No gradient: the only source is integer. Its use is the reverse rules written as ops
 * (src/graph/vjp.c: cross-entropy's target distribution, embedding's scatter-add as a product).
 * Check (before each forward): every id is in [0, C) or is ignore_index.
 */
#include "registry.h"

#include <stdio.h>
#include <string.h>

tg_tensor *tg_one_hot(tg_ctx *ctx, tg_tensor *ids, int64_t n_classes, int64_t ignore_index,
                      tg_dtype dt)
{
    static const char *fn = "tg_one_hot";
    tg_tensor *src[1] = {ids};
    if (!tg__check_srcs_ids(ctx, fn, 1, src, 0, "ids"))
        return NULL;
    char b[128];
    if (dt != TG_F32 && dt != TG_F64)
        return tg__err(ctx, TG_ERR_DTYPE, fn, "the output dtype must be f32 or f64");
    if (n_classes < 1 || n_classes > INT32_MAX)
        return tg__err(ctx, TG_ERR_ARG, fn, "n_classes %lld is not in [1, 2^31)",
                       (long long)n_classes);
    if (ids->rank + 1 > TG_MAX_RANK)
        return tg__err(ctx, TG_ERR_SHAPE, fn, "ids %s: rank too large",
                       tg__shape_str(ids, b, sizeof b));
    int64_t shape[TG_MAX_RANK];
    memcpy(shape, ids->shape, sizeof(int64_t) * (size_t)ids->rank);
    shape[ids->rank] = n_classes;
    tg_tensor *y = tg__op_new(ctx, TG_OP_ONE_HOT, dt, ids->rank + 1, shape, 1, src);
    if (!y)
        return NULL;
    y->p.one_hot.n_classes = n_classes;
    y->p.one_hot.ignore_index = ignore_index;
    y->requires_grad = false;
    return y;
}

tg_status tg__one_hot_check(const tg__call *c)
{
    const int32_t *id = c->in[0];
    int64_t C = c->p->one_hot.n_classes, ig = c->p->one_hot.ignore_index;
    for (int64_t n = 0; n < c->src_numel[0]; n++) {
        if ((id[n] < 0 || id[n] >= C) && id[n] != ig) {
            tg__run_err(c->ctx, TG_ERR_ARG, "tg_one_hot",
                        "'%s'[%lld] = %lld is not a class id in [0, %lld) nor the ignored id "
                        "%lld",
                        c->src_name[0], (long long)n, (long long)id[n], (long long)C,
                        (long long)ig);
            return TG_ERR_ARG;
        }
    }
    return TG_OK;
}

/* y = the one-hot rows, elements of @p es bytes, 1 written as @p one. */
static void one_hot_rows(const tg__call *c, size_t es, const void *one)
{
    const int32_t *id = c->in[0];
    unsigned char *y = c->out;
    int64_t C = c->p->one_hot.n_classes, N = c->src_numel[0], ig = c->p->one_hot.ignore_index;
    memset(y, 0, es * (size_t)(N * C));
    for (int64_t n = 0; n < N; n++)
        if (id[n] != ig) /* checked: in [0, C); the ignored id (even a class) a row of zeros */
            memcpy(y + es * (size_t)(n * C + id[n]), one, es);
}

/* The kernels, registered per dtype in ops/ops_dtype.def. */
tg_status tg__one_hot_forward_f32(const tg__call *c)
{
    static const float one = 1;
    one_hot_rows(c, sizeof one, &one);
    return TG_OK;
}

tg_status tg__one_hot_forward_f64(const tg__call *c)
{
    static const double one = 1;
    one_hot_rows(c, sizeof one, &one);
    return TG_OK;
}
