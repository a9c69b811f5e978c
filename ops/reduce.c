/*
 * reduce.c - sum and mean over one axis or over all elements.
 *
 * sum:  y[o, i] = sum_a x[o, a, i]            dx[o, a, i] += dy[o, i]
 * mean: y[o, i] = (1/A) sum_a x[o, a, i]      dx[o, a, i] += dy[o, i] / A
 * (x viewed as (outer, A, inner); "all" is outer = inner = 1, A = numel.)
 */
#include "registry.h"
#include "vec.h"

#include <stdio.h>

static tg_tensor *reduce(tg_ctx *ctx, const char *fn, int op, tg_tensor *x, int axis, bool all,
                         bool keepdim)
{
    if (!tg__check_srcs(ctx, fn, 1, &x))
        return NULL;
    int64_t shape[TG_MAX_RANK];
    int r = 0, a = 0;
    if (!all) {
        a = tg__axis(axis, x->rank);
        if (a < 0) {
            char b[128];
            return tg__err(ctx, TG_ERR_AXIS, fn, "axis %d out of range for x %s", axis,
                           tg__shape_str(x, b, sizeof b));
        }
        for (int i = 0; i < x->rank; i++) {
            if (i == a && !keepdim)
                continue;
            shape[r++] = i == a ? 1 : x->shape[i];
        }
    }
    tg_tensor *y = tg__op_new(ctx, op, x->dtype, r, shape, 1, &x);
    if (y) {
        y->p.reduce.axis = a;
        y->p.reduce.all = all;
    }
    return y;
}

tg_tensor *tg_sum(tg_ctx *ctx, tg_tensor *x, int axis, bool keepdim)
{
    return reduce(ctx, "tg_sum", TG_OP_SUM, x, axis, false, keepdim);
}
tg_tensor *tg_mean(tg_ctx *ctx, tg_tensor *x, int axis, bool keepdim)
{
    return reduce(ctx, "tg_mean", TG_OP_MEAN, x, axis, false, keepdim);
}
tg_tensor *tg_sum_all(tg_ctx *ctx, tg_tensor *x)
{
    return reduce(ctx, "tg_sum_all", TG_OP_SUM, x, 0, true, false);
}
tg_tensor *tg_mean_all(tg_ctx *ctx, tg_tensor *x)
{
    return reduce(ctx, "tg_mean_all", TG_OP_MEAN, x, 0, true, false);
}

static void split(const tg_tensor *y, int64_t *outer, int64_t *A, int64_t *inner)
{
    const tg_tensor *x = y->src[0];
    *outer = *inner = 1;
    if (y->p.reduce.all) {
        *A = x->numel;
        return;
    }
    int a = y->p.reduce.axis;
    for (int i = 0; i < a; i++)
        *outer *= x->shape[i];
    for (int i = a + 1; i < x->rank; i++)
        *inner *= x->shape[i];
    *A = x->shape[a];
}

/* Each output element is accumulated by one iteration, a ascending: thread-count independent.
 * (A full reduction runs on one thread: a split across threads would change the order.) */
#define DEFINE_REDUCE(T, SUF)                                                                  \
    static void fwd_##SUF(const tg__call *c, bool mean)                                             \
    {                                                                                          \
        const tg_tensor *y = c->y;                                                             \
        int64_t outer, A, inner;                                                               \
        split(y, &outer, &A, &inner);                                                          \
        const T *x = c->in[0];                                                          \
        T *out = c->out;                                                                      \
        int nt = c->nt;                                                          \
        TG_OMP_FOR(nt, outer * inner > 1 && y->src[0]->numel > TG_PAR_MIN)                     \
        for (int64_t oi = 0; oi < outer * inner; oi++) {                                       \
            int64_t o = oi / inner, i = oi % inner;                                            \
            const T *p = x + o * A * inner + i;                                                \
            T acc = 0;                                                                         \
            for (int64_t a = 0; a < A; a++)                                                    \
                acc += p[a * inner];                                                           \
            out[oi] = mean ? acc / (T)A : acc;                                                 \
        }                                                                                      \
    }                                                                                          \
    /* dx[o, a, i] += dy[o, i] (/ A for mean), each element once, the same expression whatever \
     * the split: the (o, i) of a chunk's first element is found once, then walked (no integer  \
     * division per element). */                                                             \
    static void bwd_##SUF(const tg__call *c, bool mean)                                             \
    {                                                                                          \
        const tg_tensor *y = c->y;                                                             \
        int64_t outer, A, inner;                                                               \
        split(y, &outer, &A, &inner);                                                          \
        T *dx = c->dx[0];                                                               \
        const T *dy = c->dy;                                                                 \
        int nt = c->nt;                                                          \
        int64_t n = y->src[0]->numel;                                                          \
        TG_PAR_RANGE(nt, n > TG_PAR_MIN, n, 16, {                                              \
            if (inner == 1) { /* runs of A elements share dy[o] */                             \
                int64_t o = lo / A, a = lo % A;                                                \
                for (int64_t j = lo; j < hi; o++, a = 0) {                                     \
                    int64_t len = A - a < hi - j ? A - a : hi - j;                             \
                    T g = mean ? dy[o] / (T)A : dy[o];                                         \
                    for (int64_t k = 0; k < len; k++)                                          \
                        dx[j + k] += g;                                                        \
                    j += len;                                                                  \
                }                                                                              \
            } else { /* rows of inner elements, row = o A + a */                               \
                int64_t row = lo / inner, i = lo % inner;                                      \
                for (int64_t j = lo; j < hi; row++, i = 0) {                                   \
                    int64_t len = inner - i < hi - j ? inner - i : hi - j;                      \
                    const T *g = dy + (row / A) * inner + i;                                   \
                    T *d = dx + j;                                                             \
                    if (mean)                                                                  \
                        for (int64_t k = 0; k < len; k++)                                      \
                            d[k] += g[k] / (T)A;                                               \
                    else                                                                       \
                        for (int64_t k = 0; k < len; k++)                                      \
                            d[k] += g[k];                                                      \
                    j += len;                                                                  \
                }                                                                              \
            }                                                                                  \
        });                                                                                    \
    }
DEFINE_REDUCE(float, f32)
DEFINE_REDUCE(double, f64)

tg_status tg__reduce_forward(const tg__call *c)
{
    const tg_tensor *y = c->y;
    bool mean = y->op == TG_OP_MEAN;
    if (y->dtype == TG_F32)
        fwd_f32(c, mean);
    else
        fwd_f64(c, mean);
    return TG_OK;
}

tg_status tg__reduce_backward(const tg__call *c)
{
    const tg_tensor *y = c->y;
    if (!c->dx[0])
        return TG_OK;
    bool mean = y->op == TG_OP_MEAN;
    if (y->dtype == TG_F32)
        bwd_f32(c, mean);
    else
        bwd_f64(c, mean);
    return TG_OK;
}
