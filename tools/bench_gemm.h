/*
 * bench_gemm.h - the machine, peak and GEMM sections of `tgrad bench` (bench_gemm.c): the CPU
 * and OpenBLAS core, the FMA peak probe, sgemm and dgemm through tg_matmul with OpenBLAS
 * (dlopen) interleaved as the reference.
 */
#ifndef TG_BENCH_GEMM_H
#define TG_BENCH_GEMM_H

#include <stdbool.h>

/* Print the CPU (/proc/cpuinfo model name, family, model, MHz), the CPUs online and the
 * OpenBLAS core it picks with OPENBLAS_CORETYPE unset (or why it is not available). */
void bench_machine_print(void);

/* The FMA peak probe on 1 and @p threads_all threads: every instruction form this CPU runs
 * (512-bit and 256-bit FMA, 12 and 24 independent chains), f32, then f64 on the fastest form,
 * and the core clock under load; peak[f64][thread index] receives the medians of the fastest
 * form. @p tiny: short probes (a smoke test). 0, or 1 after printing an error. */
int bench_peak(int threads_all, int samples, bool tiny, double peak[2][2]);

/* Print the sgemm and dgemm tables for 1 and @p threads_all threads, @p samples samples per
 * number, % of @p peak; @p tiny runs one tiny shape (a smoke test of the code path, its
 * numbers mean nothing). 0, or 1 after printing an error. */
int bench_gemm(int threads_all, int samples, bool tiny, double peak[2][2]);

#endif
