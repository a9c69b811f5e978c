/*
 * gemv.c - the dense forward for a few rows (matrix-vector products): y = act(x W^T + b).
 *
 * Shapes: x (M, K) (row stride ldx), W (N, K) row-major as nn.Linear stores it (row stride
 * ldw), b (N) or NULL -> y (M, N) (row stride ldy); pre (M, N) (row stride ldy), if not NULL,
 * receives x W^T + b before the activation (GELU's backward reads it).
 *
 * Why: at M = 1 (a decoding step of the generator: B rows through every dense layer) the GEMM
 * (gemm.c) packs the whole W^T into panels on every call and runs its 12-row micro-kernel on one
 * real row; perf showed ~80% of a step there. Here each output is a dot product of x's row with
 * W's row j, both contiguous: W is streamed once, nothing is packed.
 *
 * Order of operations (determinism): y[r, j] = T(lane tree of s_0..s_15) + b[j], where lane l
 * sums x[r, k] W[j, k] for k = l, l + 16, l + 32, ... in increasing k (a multiply, then an add:
 * -ffp-contract=off, no FMA), and the 16 lanes are added in the fixed tree (l, l + 8), then
 * (l, l + 4), (l, l + 2), (l, l + 1), as tg__row_dot (src/core/vec.c). The result depends on
 * neither the thread count, the SIMD clone nor M, but it is not the GEMM's FMA chain: the last
 * bits differ from the GEMM's for the same product (dense's tests compare to rounding).
 * bf16 (tg__gemv_bf16, the compute precision TG_PRECISION_BF16): the same order with x and W
 * rounded to bf16 as they are read (each product then exact in f32).
 * Threading: a thread per 2 MiB of weights (tg__threads_for); the columns in fixed chunks
 * (TG_PAR_RANGE) taken dynamically, each y[r, j] computed by one thread; no region at all for
 * the few hundred KiB of a small model's layer.
 */
#include "gemm.h"
#include "gemv.h"
#include "vec.h"

#define GV_LANES 16

static double gv_gelu(double v) { return 0.5 * v * (1.0 + erf(v * 0.70710678118654752440)); }

/* The bf16 variant reads x and W through tg__bf16_round (core.h): a product of two such values
 * is exact in f32, so the bf16 GEMV rounds only where it adds. */

#define GV_EXACT(v) (v)
#define T float
#define SUF f32
#define RND GV_EXACT
#include "gemv_kernel.h"
#undef T
#undef SUF
#undef RND
#define T double
#define SUF f64
#define RND GV_EXACT
#include "gemv_kernel.h"
#undef T
#undef SUF
#undef RND
#define T float
#define SUF bf16
#define RND tg__bf16_round
#include "gemv_kernel.h"
#undef T
#undef SUF
#undef RND
