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

#define DEFINE_GEMV(T, SUF, RND)                                                               \
    /* Columns [j0, j1) of every row: four columns at a time share each load of x. */          \
    TG_SIMD_CLONES static void gv_cols_##SUF(int64_t M, int64_t j0, int64_t j1, int64_t K,      \
                                             const T *x, int64_t ldx, const T *W, int64_t ldw, \
                                             const T *bias, T *y, int64_t ldy, int act, T *pre) \
    {                                                                                          \
        int64_t K16 = K / GV_LANES * GV_LANES;                                                 \
        for (int64_t r = 0; r < M; r++) {                                                      \
            const T *xr = x + r * ldx;                                                         \
            for (int64_t j = j0; j < j1; j += 4) {                                             \
                int nj = j1 - j < 4 ? (int)(j1 - j) : 4;                                       \
                T acc[4][GV_LANES];                                                            \
                const T *w[4];                                                                 \
                for (int c = 0; c < 4; c++) {                                                  \
                    w[c] = W + (j + (c < nj ? c : 0)) * ldw;                                   \
                    for (int l = 0; l < GV_LANES; l++)                                         \
                        acc[c][l] = 0;                                                         \
                }                                                                              \
                for (int64_t k = 0; k < K16; k += GV_LANES)                                    \
                    for (int l = 0; l < GV_LANES; l++) {                                       \
                        T xv = RND(xr[k + l]);                                                 \
                        acc[0][l] += xv * RND(w[0][k + l]);                                    \
                        acc[1][l] += xv * RND(w[1][k + l]);                                    \
                        acc[2][l] += xv * RND(w[2][k + l]);                                    \
                        acc[3][l] += xv * RND(w[3][k + l]);                                    \
                    }                                                                          \
                for (int l = 0; K16 + l < K; l++) /* the tail, in the same lanes */            \
                    for (int c = 0; c < 4; c++)                                                \
                        acc[c][l] += RND(xr[K16 + l]) * RND(w[c][K16 + l]);                    \
                /* the lane trees of the four columns, level by level (whole vectors) */       \
                for (int c = 0; c < 4; c++)                                                    \
                    for (int l = 0; l < 8; l++)                                                \
                        acc[c][l] += acc[c][l + 8];                                            \
                for (int c = 0; c < 4; c++)                                                    \
                    for (int l = 0; l < 4; l++)                                                \
                        acc[c][l] += acc[c][l + 4];                                            \
                for (int c = 0; c < 4; c++)                                                    \
                    for (int l = 0; l < 2; l++)                                                \
                        acc[c][l] += acc[c][l + 2];                                            \
                T z[4];                                                                        \
                for (int c = 0; c < 4; c++)                                                    \
                    z[c] = acc[c][0] + acc[c][1];                                              \
                T *yr = y + r * ldy + j;                                                       \
                if (bias)                                                                      \
                    for (int c = 0; c < nj; c++)                                               \
                        z[c] = z[c] + bias[j + c];                                             \
                if (pre)                                                                       \
                    for (int c = 0; c < nj; c++)                                               \
                        pre[r * ldy + j + c] = z[c];                                           \
                if (act == TG__EPI_GELU)                                                       \
                    for (int c = 0; c < nj; c++)                                               \
                        yr[c] = (T)gv_gelu((double)z[c]);                                      \
                else if (act == TG__EPI_RELU)                                                  \
                    for (int c = 0; c < nj; c++)                                               \
                        yr[c] = z[c] > 0 ? z[c] : (z[c] != z[c] ? z[c] : 0);                   \
                else                                                                           \
                    for (int c = 0; c < nj; c++)                                               \
                        yr[c] = z[c];                                                          \
            }                                                                                  \
        }                                                                                      \
    }                                                                                          \
    void tg__gemv_##SUF(int nt, int64_t M, int64_t N, int64_t K, const T *x, int64_t ldx,       \
                        const T *W, int64_t ldw, const T *bias, T *y, int64_t ldy, int act,    \
                        T *pre)                                                                \
    {                                                                                          \
        /* W streamed once from cache or memory (~30-50 GB/s on one core): a thread per 2 MiB of \
         * weights (~50 us), so a decoding step's layers (a few hundred KiB each) run on one     \
         * thread without entering a region; the columns in fixed chunks taken dynamically. */  \
        nt = tg__threads_for(nt, (double)sizeof(T) * (double)N * (double)K, 2097152.0);        \
        bool par = nt > 1;                                                                     \
        TG_PAR_RANGE(nt, par, N, 4,                                                            \
                     gv_cols_##SUF(M, lo, hi, K, x, ldx, W, ldw, bias, y, ldy, act, pre));     \
    }
#define GV_EXACT(v) (v)
DEFINE_GEMV(float, f32, GV_EXACT)
DEFINE_GEMV(double, f64, GV_EXACT)
DEFINE_GEMV(float, bf16, tg__bf16_round)
