/*
 * bench_gemm.h - the machine, peak and GEMM sections of `tgrad bench` (bench_gemm.c): the CPU
 * and OpenBLAS core, the FMA peak probe, sgemm and dgemm through tg_matmul with OpenBLAS
 * (dlopen) interleaved as the reference.
 */
#ifndef TG_BENCH_GEMM_H
#define TG_BENCH_GEMM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

/* Print the CPU (/proc/cpuinfo model name, family, model, MHz), the CPUs online and the
 * OpenBLAS core it picks with OPENBLAS_CORETYPE unset (or why it is not available). */
void bench_machine_print(void);

/* The peaks the GEMM tables compare against, from the FMA peak probe (bench_peak). */
typedef struct bench_peaks {
    double gflops[2][2]; /* [f64][thread index: 1, threads_all]: the best sample, GFLOP/s */
    int threads_all, samples;
    bool tiny;
    int form; /* the fastest instruction form (index into bench_gemm.c's probe list) */
    double bf16[2]; /* the bf16 peak (vdpbf16ps) on 1 and threads_all threads; NAN without
                       AVX512_BF16 */
} bench_peaks;

/* The FMA peak probe on 1 and @p threads_all threads: every instruction form this CPU runs
 * (512-bit and 256-bit FMA, 12 and 24 independent chains), f32, then f64 on the fastest form,
 * the bf16 peak (24 chains of vdpbf16ps, where the CPU has AVX512_BF16) and the core clock
 * under load. A peak is an upper bound, so each is the best of the samples
 * (the tables show the median and the range too); when the threads_all-thread peak comes out
 * below 0.9 x threads_all x the 1-thread peak, that thread count is probed again, up to twice,
 * keeping the best. @p tiny: short probes (a smoke test). 0, or 1 after printing an error. */
int bench_peak(int threads_all, int samples, bool tiny, bench_peaks *pk);

/* Print the sgemm and dgemm tables for 1 and @p threads_all threads, @p samples samples per
 * number, % of the probed peak (bench_pct_cell: never above 100; a rate above the peak probes
 * that peak once more, and if it is still above, the cell says n/a and a note says the probe
 * failed); @p tiny runs one tiny shape (a smoke test of the code path, its numbers mean
 * nothing). @p precision TG_PRECISION_BF16: instead, the bf16 GEMM's tables on the same
 * shapes (% of the bf16 peak, the ratio to tgrad's f32 GEMM, the medians over the shapes).
 * 0, or 1 after printing an error. */
int bench_gemm(int threads_all, int samples, bool tiny, int precision, bench_peaks *pk);

/* The 6-character "%peak" cell of a GEMM row into @p cell: 100 * gflops / peak, rounded
 * ("   87%"), when 0 <= gflops <= peak and peak is positive and finite; else "   n/a" (a rate
 * above the peak means the probe failed: a percentage above 100 is never printed). Returns
 * whether a percentage was written. */
static inline bool bench_pct_cell(double gflops, double peak, char *cell, size_t n)
{
    /* written so that NaN fails every comparison */
    bool ok = peak > 0 && peak <= 1e300 && gflops >= 0 && gflops <= peak;
    if (ok)
        snprintf(cell, n, "%5.0f%%", 100 * (gflops / peak)); /* gflops / peak <= 1 exactly */
    else
        snprintf(cell, n, "%6s", "n/a");
    return ok;
}

#endif
