/*
 * gemv.h - the dense forward for a few rows (ops/gemv.c): y (M, N) = act(x (M, K) W^T + b)
 * with W (N, K) row-major, streamed once, no packing. Used by dense and dense_act (ops/dense.c)
 * when x has at most TG__GEMV_MAX_ROWS rows (a decoding step of the generator).
 * act: TG__EPI_NONE, TG__EPI_RELU or TG__EPI_GELU (core.h); pre (row stride ldy) receives the
 * value before the activation when not NULL; bias may be NULL. Results are bitwise independent
 * of nt and of the SIMD clone (see gemv.c for the order of operations). govs: the caller's
 * governor table (NULL: none).
 */
#ifndef TG_GEMV_H
#define TG_GEMV_H

#include "core.h"

/* Rows up to which dense's forward takes the GEMV instead of the GEMM. */
#define TG__GEMV_MAX_ROWS 4

void tg__gemv_f32(tg__govs *govs, int nt, int64_t M, int64_t N, int64_t K, const float *x,
                  int64_t ldx, const float *W, int64_t ldw, const float *bias, float *y,
                  int64_t ldy, int act, float *pre);
/* The f32 GEMV with x and W rounded to bf16 (TG_PRECISION_BF16), f32 sums in the same order. */
void tg__gemv_bf16(tg__govs *govs, int nt, int64_t M, int64_t N, int64_t K, const float *x,
                   int64_t ldx, const float *W, int64_t ldw, const float *bias, float *y,
                   int64_t ldy, int act, float *pre);
void tg__gemv_f64(tg__govs *govs, int nt, int64_t M, int64_t N, int64_t K, const double *x,
                  int64_t ldx, const double *W, int64_t ldw, const double *bias, double *y,
                  int64_t ldy, int act, double *pre);

#endif
