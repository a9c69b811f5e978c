/*
 * arith.c - sub and div with broadcasting (NumPy/PyTorch rules, like add and mul).
 *
 * sub: y = a - b       da = reduce(dy),        db = -reduce(dy)
 * div: y = a / b       da = reduce(dy / b),    db = -reduce(dy (a / b) / b)
 * reduce() sums over the dims broadcast from the operand to y (tg__reduce_to), in a fixed order
 * per element. div's backward reads a and b (as PyTorch's); b = 0 gives inf/NaN as IEEE-754.
 *
 * backward workspace (tg__arith_ws, planned for that one call):
 *   sub: b's numel elements when b is broadcast (reduce(dy) onto b's shape, then subtracted);
 *   div: y's numel elements when a or b is broadcast (the per-element gradient of the
 *        broadcast operand before it is reduced onto its shape).
 */
#include "registry.h"


size_t tg__arith_ws(const tg__call *c)
{
    const tg_tensor *y = c->y;
    int nt = c->nt;
    bool backward = c->backward;
    (void)nt;
    const tg_tensor *a = y->src[0], *b = y->src[1];
    size_t es = tg_dtype_size(y->dtype);
    if (!backward)
        return 0;
    if (y->op == TG_OP_SUB)
        return b->numel != y->numel ? (size_t)b->numel * es : 0;
    return a->numel != y->numel || b->numel != y->numel ? (size_t)y->numel * es : 0;
}

tg_tensor *tg_sub(tg_ctx *ctx, tg_tensor *a, tg_tensor *b)
{
    return tg__binary_new(ctx, TG_OP_SUB, "tg_sub", a, b);
}

tg_tensor *tg_div(tg_ctx *ctx, tg_tensor *a, tg_tensor *b)
{
    return tg__binary_new(ctx, TG_OP_DIV, "tg_div", a, b);
}

/* Offsets into a and b of the first element of row `row` of y (rows: y's last dim), for
 * broadcast strides as and bs. */
static void row_offsets(const tg_tensor *y, int64_t row, const int64_t *as, const int64_t *bs,
                        int64_t *ao, int64_t *bo)
{
    int64_t rem = row;
    *ao = *bo = 0;
    for (int d = y->rank - 2; d >= 0; d--) {
        int64_t idx = rem % y->shape[d];
        rem /= y->shape[d];
        *ao += idx * as[d];
        *bo += idx * bs[d];
    }
}

/* Forward: ops/elementwise.c (the broadcasting loop of add and mul).
 * Backward (div): one row per iteration writing its own row of dst, which is either the
 * operand's gradient (the operand has y's shape: dst[i] += v) or the scratch (dst[i] = v) that
 * tg__reduce_to then sums in its fixed order. Race-free and thread-count independent. */
#define DEFINE_ARITH(T, SUF)                                                                   \
    /* dst (y's shape) (+)= d y / d src[s] * dy per element */                                 \
    static void div_grad_##SUF(const tg__call *c, int s, T *dst, bool acc)                    \
    {                                                                                          \
        const tg_tensor *y = c->y;                                                             \
        const tg_tensor *a = y->src[0], *b = y->src[1];                                        \
        const T *A = c->in[0], *B = c->in[1], *G = c->dy;                                           \
        int nt = c->nt;                                                          \
        int r = y->rank;                                                                       \
        int64_t as[TG_MAX_RANK], bs[TG_MAX_RANK];                                              \
        tg__bcast_strides(a, r, y->shape, as);                                                 \
        tg__bcast_strides(b, r, y->shape, bs);                                                 \
        int64_t L = r ? y->shape[r - 1] : 1, rows = y->numel / L;                              \
        int64_t asl = r ? as[r - 1] : 0, bsl = r ? bs[r - 1] : 0;                              \
        TG_OMP_FOR(nt, y->numel > TG_PAR_MIN)                                                  \
        for (int64_t row = 0; row < rows; row++) {                                             \
            int64_t ao, bo;                                                                    \
            row_offsets(y, row, as, bs, &ao, &bo);                                             \
            for (int64_t j = 0; j < L; j++) {                                                  \
                T va = A[ao + j * asl], vb = B[bo + j * bsl], g = G[row * L + j];              \
                T v = s == 0 ? g / vb : -(g * (va / vb)) / vb;                                 \
                if (acc)                                                                       \
                    dst[row * L + j] += v;                                                     \
                else                                                                           \
                    dst[row * L + j] = v;                                                      \
            }                                                                                  \
        }                                                                                      \
    }                                                                                          \
    static void div_bwd_##SUF(const tg__call *c)                                              \
    {                                                                                          \
        const tg_tensor *y = c->y;                                                             \
        for (int s = 0; s < 2; s++) {                                                          \
            tg_tensor *x = y->src[s];                                                          \
            if (!c->dx[s])                                                                     \
                continue;                                                                      \
            if (x->numel == y->numel) { /* x has y's layout: accumulate directly */            \
                div_grad_##SUF(c, s, c->dx[s], true);                                          \
                continue;                                                                      \
            }                                                                                  \
            div_grad_##SUF(c, s, c->ws, false);                                             \
            tg__reduce_to(c->nt, y->dtype, c->ws, y->rank, y->shape, x, c->dx[s]);          \
        }                                                                                      \
    }                                                                                          \
    /* db -= dy (b has y's layout) or db -= scratch (b's numel). Each element by one iteration. */ \
    static void sub_from_##SUF(int nt, int64_t n, const T *v, T *db)                           \
    {                                                                                          \
        TG_OMP_FOR(nt, n > TG_PAR_MIN)                                                         \
        for (int64_t i = 0; i < n; i++)                                                        \
            db[i] -= v[i];                                                                     \
    }
DEFINE_ARITH(float, f32)
DEFINE_ARITH(double, f64)


tg_status tg__sub_backward(const tg__call *c)
{
    const tg_tensor *y = c->y;
    tg_tensor *a = y->src[0], *b = y->src[1];
    if (c->dx[0])
        tg__reduce_to(c->nt, y->dtype, c->dy, y->rank, y->shape, a, c->dx[0]);
    if (!c->dx[1])
        return TG_OK;
    const void *v = c->dy;
    if (b->numel != y->numel) { /* reduce dy onto b's shape in the scratch, then subtract */
        memset(c->ws, 0, (size_t)b->numel * tg_dtype_size(y->dtype));
        tg__reduce_to(c->nt, y->dtype, c->dy, y->rank, y->shape, b, c->ws);
        v = c->ws;
    }
    int nt = c->nt;
    if (y->dtype == TG_F32)
        sub_from_f32(nt, b->numel, v, c->dx[1]);
    else
        sub_from_f64(nt, b->numel, v, c->dx[1]);
    return TG_OK;
}


tg_status tg__div_backward(const tg__call *c)
{
    const tg_tensor *y = c->y;
    if (y->dtype == TG_F32)
        div_bwd_f32(c);
    else
        div_bwd_f64(c);
    return TG_OK;
}
