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


size_t tg__arith_ws(const tg_tensor *y, int nt, bool backward)
{
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
    static void div_grad_##SUF(const tg_tensor *y, int s, T *dst, bool acc)                    \
    {                                                                                          \
        const tg_tensor *a = y->src[0], *b = y->src[1];                                        \
        const T *A = a->data, *B = b->data, *G = y->grad;                                      \
        int nt = tg__threads(y->ctx);                                                          \
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
    static void div_bwd_##SUF(const tg_tensor *y)                                              \
    {                                                                                          \
        for (int s = 0; s < 2; s++) {                                                          \
            tg_tensor *x = y->src[s];                                                          \
            if (!x->grad)                                                                      \
                continue;                                                                      \
            if (x->numel == y->numel) { /* x has y's layout: accumulate directly */            \
                div_grad_##SUF(y, s, x->grad, true);                                           \
                continue;                                                                      \
            }                                                                                  \
            div_grad_##SUF(y, s, y->ws, false);                                             \
            tg__reduce_to(y->ctx, y->dtype, y->ws, y->rank, y->shape, x, x->grad);          \
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


void tg__sub_backward(tg_tensor *y)
{
    tg_tensor *a = y->src[0], *b = y->src[1];
    if (a->grad)
        tg__reduce_to(y->ctx, y->dtype, y->grad, y->rank, y->shape, a, a->grad);
    if (!b->grad)
        return;
    const void *v = y->grad;
    if (b->numel != y->numel) { /* reduce dy onto b's shape in the scratch, then subtract */
        memset(y->ws, 0, (size_t)b->numel * tg_dtype_size(y->dtype));
        tg__reduce_to(y->ctx, y->dtype, y->grad, y->rank, y->shape, b, y->ws);
        v = y->ws;
    }
    int nt = tg__threads(y->ctx);
    if (y->dtype == TG_F32)
        sub_from_f32(nt, b->numel, v, b->grad);
    else
        sub_from_f64(nt, b->numel, v, b->grad);
}


void tg__div_backward(tg_tensor *y)
{
    if (y->dtype == TG_F32)
        div_bwd_f32(y);
    else
        div_bwd_f64(y);
}
