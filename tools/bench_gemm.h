/*
 * bench_gemm.h - the GEMM section of `tgrad bench` (bench_gemm.c): FMA peak probe, sgemm and
 * dgemm through tg_matmul, OpenBLAS (dlopen) interleaved as the reference.
 */
#ifndef TG_BENCH_GEMM_H
#define TG_BENCH_GEMM_H

#include <stdbool.h>

/* Print the probe and the GEMM tables for 1 and @p threads_all threads, @p samples samples per
 * number; @p tiny runs one tiny shape and short probes (a smoke test of the code path, its
 * numbers mean nothing). 0, or 1 after printing an error. */
int bench_gemm(int threads_all, int samples, bool tiny);

#endif
