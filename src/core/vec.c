/*
 * vec.c - fixed-order column sums, the finiteness scan and the softmax-family row kernels
 * (src/core/vec.h). Each hot function is compiled for x86-64-v4, v3 and the baseline
 * (TG_SIMD_CLONES); the loops are plain C the compiler vectorizes, with sums split into a
 * fixed number of lanes written out, so every clone computes the same bits. The f32 and f64
 * functions are written once, in vec_kernel.h (included once per dtype).
 */
#include "vec.h"

/* Column block of tg__sum_rows: accumulators for CB columns stay in L1 while the rows stream
 * past. Thread chunks of columns start at multiples of 16 (a cache line of f32). */
#define CB 512
#define LANES 16

/* Adds the 16 lanes in a fixed tree: (l0 + l8) ..., then 4, 2, 1 apart. */
#define LANE_TREE(acc)                                                                         \
    do {                                                                                       \
        for (int w_ = LANES / 2; w_ >= 1; w_ /= 2)                                             \
            for (int k_ = 0; k_ < w_; k_++)                                                    \
                (acc)[k_] += (acc)[k_ + w_];                                                   \
    } while (0)

/* The kernels, written once in vec_kernel.h, for f32 and for f64. */
#define T float
#define SUF f32
#define EXP tg__expf
#define NINF (-INFINITY)
#include "vec_kernel.h"
#undef T
#undef SUF
#undef EXP
#undef NINF
#define T double
#define SUF f64
#define EXP tg__exp
#define NINF (-(double)INFINITY)
#include "vec_kernel.h"
#undef T
#undef SUF
#undef EXP
#undef NINF
