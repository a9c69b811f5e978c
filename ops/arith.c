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
    size_t es = tg_dtype_size(c->dtype);
    int64_t n = c->numel, na = c->src_numel[0], nb = c->src_numel[1];
    if (!c->backward)
        return 0;
    if (c->op == TG_OP_SUB)
        return nb != n ? (size_t)nb * es : 0;
    return na != n || nb != n ? (size_t)n * es : 0;
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
static void row_offsets(const tg__call *c, int64_t row, const int64_t *as, const int64_t *bs,
                        int64_t *ao, int64_t *bo)
{
    int64_t rem = row;
    *ao = *bo = 0;
    for (int d = c->rank - 2; d >= 0; d--) {
        int64_t idx = rem % c->shape[d];
        rem /= c->shape[d];
        *ao += idx * as[d];
        *bo += idx * bs[d];
    }
}

/* The kernels, written once in arith_kernel.h, for f32 and for f64: tg__sub_backward_f32 ...
 * tg__div_backward_f64, registered per dtype in ops/ops_dtype.def (the forwards are
 * ops/elementwise.c's broadcasting loop). */
#define T float
#define SUF f32
#include "arith_kernel.h"
#undef T
#undef SUF
#define T double
#define SUF f64
#include "arith_kernel.h"
#undef T
#undef SUF
