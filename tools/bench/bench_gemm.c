/*
 * bench_gemm.c - the GEMM section of `tgrad bench`:
 *   - an FMA peak probe: independent FMA chains in registers (AVX-512, AVX2 or portable C,
 *     chosen at run time), f32 and f64, on 1 and N threads (pthreads, each thread its own
 *     chains), GFLOP/s;
 *   - sgemm and dgemm through tgrad (tg_matmul on a one-op graph), C (M, N) = A (M, K) B (K, N)
 *     ("NN") and A (M, K) B^T with B (N, K) ("NT"), on the benchmark shapes, 1 and N threads;
 *   - OpenBLAS as the reference when libopenblas.so.0 can be dlopen()ed (no link dependency),
 *     with OPENBLAS_CORETYPE removed from the environment first so it picks its best kernels;
 *     tgrad and OpenBLAS alternate sample by sample in this process.
 *   - with --precision bf16, instead of sgemm and dgemm: the bf16 GEMM (tg__gemm_isa_bf16,
 *     the products of TG_PRECISION_BF16: operands rounded to bf16, f32 accumulation) on the
 *     same shapes against tgrad's f32 GEMM through tg_matmul, interleaved; % of the bf16 peak
 *     (vdpbf16ps). OpenBLAS has no bf16 GEMM. The kernel has no public entry, so this file
 *     includes the library's core.h for its prototype (the one tool that does).
 * Each sample times `reps` calls (reps chosen once per shape so a sample lasts >= ~10 ms);
 * rows print the median and the min-max over the samples, % of the probed peak and the ratio
 * tgrad / OpenBLAS of the medians. Speed is only printed here, never asserted.
 */
#define _POSIX_C_SOURCE 200809L
#include "bench_gemm.h"
#include "cli.h"
#include "climsg.h"
#include "gemm.h" /* tg__gemm_isa_bf16, tg__gemm_bf16_hw: the bf16 GEMM has no public entry */

#include <dlfcn.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#if (defined(__x86_64__) || defined(__i386__)) && defined(__GNUC__)
#define BG_X86 1
#include <immintrin.h>
#endif

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static double thread_cpu_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Median of v[0..n) (sorts v). */
static double median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

/* ---- FMA peak probe ------------------------------------------------------------------------- */
/* Each probe runs @p iters iterations of NCH independent chains a = a * b + c (b just under 1,
 * so a converges to c / (1 - b) and never overflows or goes subnormal) and returns a sum of the
 * chains, which the caller keeps so the loop cannot be removed. With FMA latency L cycles and
 * P FMA issues per cycle, L * P chains keep the pipes full (Zen 4: 4 x 2 = 8 for ymm); 12 and
 * 24 chains leave room to spare, 24 zmm chains use 24 of the 32 registers. */
#define BG_FMA4(FMA, i)                                                                       \
    a[i] = FMA(a[i], b, c);                                                                  \
    a[i + 1] = FMA(a[i + 1], b, c);                                                          \
    a[i + 2] = FMA(a[i + 2], b, c);                                                          \
    a[i + 3] = FMA(a[i + 3], b, c);
#define BG_FMA12(FMA) BG_FMA4(FMA, 0) BG_FMA4(FMA, 4) BG_FMA4(FMA, 8)
#define BG_FMA24(FMA) BG_FMA12(FMA) BG_FMA4(FMA, 12) BG_FMA4(FMA, 16) BG_FMA4(FMA, 20)

#ifdef BG_X86
#define BG_FMA_BODY(NCH, T, SET1, FMA, ADD, RED)                                              \
    T a[NCH];                                                                                \
    for (int j = 0; j < NCH; j++)                                                            \
        a[j] = SET1(1.0 + 0.01 * j);                                                         \
    T b = SET1(0.99999), c = SET1(1e-5);                                                     \
    for (long i = 0; i < iters; i++) {                                                       \
        BG_FMA##NCH(FMA)                                                                     \
    }                                                                                        \
    T s = a[0];                                                                              \
    for (int j = 1; j < NCH; j++)                                                            \
        s = ADD(s, a[j]);                                                                    \
    return RED(s);

#define BG_T512 __attribute__((target("avx512f,fma")))
#define BG_T256 __attribute__((target("avx2,fma")))
#define BG_T256VL __attribute__((target("avx512f,avx512vl,fma"))) /* 32 ymm registers */

BG_T512 static double red512s(__m512 s) { return (double)_mm512_reduce_add_ps(s); }
BG_T512 static double red512d(__m512d s) { return _mm512_reduce_add_pd(s); }
BG_T256 static double red256s(__m256 s)
{
    float v[8];
    _mm256_storeu_ps(v, s);
    return (double)v[0] + v[1] + v[2] + v[3] + v[4] + v[5] + v[6] + v[7];
}
BG_T256 static double red256d(__m256d s)
{
    double v[4];
    _mm256_storeu_pd(v, s);
    return v[0] + v[1] + v[2] + v[3];
}
#define BG_ZMM(NCH)                                                                           \
    BG_T512 static double probe_zmm##NCH##_f32(long iters)                                   \
    {                                                                                        \
        BG_FMA_BODY(NCH, __m512, _mm512_set1_ps, _mm512_fmadd_ps, _mm512_add_ps, red512s)    \
    }                                                                                        \
    BG_T512 static double probe_zmm##NCH##_f64(long iters)                                   \
    {                                                                                        \
        BG_FMA_BODY(NCH, __m512d, _mm512_set1_pd, _mm512_fmadd_pd, _mm512_add_pd, red512d)   \
    }
#define BG_YMM(NCH, TGT)                                                                      \
    TGT static double probe_ymm##NCH##_f32(long iters)                                       \
    {                                                                                        \
        BG_FMA_BODY(NCH, __m256, _mm256_set1_ps, _mm256_fmadd_ps, _mm256_add_ps, red256s)    \
    }                                                                                        \
    TGT static double probe_ymm##NCH##_f64(long iters)                                       \
    {                                                                                        \
        BG_FMA_BODY(NCH, __m256d, _mm256_set1_pd, _mm256_fmadd_pd, _mm256_add_pd, red256d)   \
    }
BG_ZMM(12)
BG_ZMM(24)

/* The bf16 peak: 24 chains a = a + x0 y0 + x1 y1 (vdpbf16ps: 16 f32 lanes, two bf16 products
 * each, 64 flops per instruction); x's pairs are (u, -u) and y's (v, v), so the products
 * cancel exactly and a never changes. */
__attribute__((target("avx512f,avx512bf16"))) static double probe_bf16(long iters)
{
    __m512 a[24];
    for (int j = 0; j < 24; j++)
        a[j] = _mm512_set1_ps(1.0f + 0.01f * (float)j);
    __m512bh x = (__m512bh)_mm512_set1_epi32((int)0xbc003c00u); /* bf16 pairs (1/128, -1/128) */
    __m512bh y = (__m512bh)_mm512_set1_epi32(0x3f803f80);        /* (1, 1) */
    for (long i = 0; i < iters; i++)
        for (int j = 0; j < 24; j++)
            a[j] = _mm512_dpbf16_ps(a[j], x, y);
    __m512 s = a[0];
    for (int j = 1; j < 24; j++)
        s = _mm512_add_ps(s, a[j]);
    return (double)_mm512_reduce_add_ps(s);
}
BG_YMM(12, BG_T256)
BG_YMM(24, BG_T256VL)

/* The core clock in GHz from a chain of dependent integer adds (one per cycle on every x86-64
 * core), ~20 ms of this thread's CPU time: what the core runs at under load, unlike
 * /proc/cpuinfo's MHz (often the nominal or TSC frequency in a VM). */
static double clock_ghz(void)
{
    long n = 1000000, x = 0;
    for (int pass = 0; pass < 2; pass++) {
        double t0 = thread_cpu_s();
        long k = n;
        __asm__ volatile("1:\n\t"
                         "add $1, %0\n\tadd $1, %0\n\tadd $1, %0\n\tadd $1, %0\n\t"
                         "add $1, %0\n\tadd $1, %0\n\tadd $1, %0\n\tadd $1, %0\n\t"
                         "dec %1\n\tjnz 1b"
                         : "+r"(x), "+r"(k)
                         :
                         : "cc");
        double dt = thread_cpu_s() - t0;
        if (pass == 0) /* calibrate to ~20 ms */
            n = (long)fmax(1e5, fmin(1e9, n * 0.02 / fmax(dt, 1e-6)));
        else
            return 8.0 * (double)n / dt * 1e-9;
    }
    return NAN;
}
#endif

/* Portable fallback: scalar fma() chains (the compiler may or may not vectorize them). */
static double probe_c_f32(long iters)
{
    float a[12], s = 0;
    for (int j = 0; j < 12; j++)
        a[j] = 1.0f + 0.01f * (float)j;
    for (long i = 0; i < iters; i++)
        for (int j = 0; j < 12; j++)
            a[j] = fmaf(a[j], 0.99999f, 1e-5f);
    for (int j = 0; j < 12; j++)
        s += a[j];
    return s;
}
static double probe_c_f64(long iters)
{
    double a[12], s = 0;
    for (int j = 0; j < 12; j++)
        a[j] = 1.0 + 0.01 * j;
    for (long i = 0; i < iters; i++)
        for (int j = 0; j < 12; j++)
            a[j] = fma(a[j], 0.99999, 1e-5);
    for (int j = 0; j < 12; j++)
        s += a[j];
    return s;
}

typedef double (*probe_fn)(long iters);
typedef struct {
    probe_fn f32, f64;
    int lanes32; /* f32 lanes per FMA (f64: half) */
    int chains;
    const char *name;
} probe_impl;

/* The instruction forms this CPU runs, best guess first; returns how many (>= 1). */
static int probe_forms(probe_impl *p)
{
    int n = 0;
#ifdef BG_X86
    __builtin_cpu_init();
    bool f = __builtin_cpu_supports("fma");
    if (f && __builtin_cpu_supports("avx512f")) {
        p[n++] = (probe_impl){probe_zmm24_f32, probe_zmm24_f64, 16, 24, "512-bit vfmadd (zmm)"};
        p[n++] = (probe_impl){probe_zmm12_f32, probe_zmm12_f64, 16, 12, "512-bit vfmadd (zmm)"};
    }
    if (f && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512vl"))
        p[n++] = (probe_impl){probe_ymm24_f32, probe_ymm24_f64, 8, 24, "256-bit vfmadd (ymm)"};
    if (f && __builtin_cpu_supports("avx2"))
        p[n++] = (probe_impl){probe_ymm12_f32, probe_ymm12_f64, 8, 12, "256-bit vfmadd (ymm)"};
#endif
    if (n == 0)
        p[n++] = (probe_impl){probe_c_f32, probe_c_f64, 1, 12, "portable C fma()"};
    return n;
}

/* Start gate of the probe threads: they wait until `go`, so all start together. */
typedef struct {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    bool go;
} probe_gate;

typedef struct {
    probe_fn f;
    long iters;
    probe_gate *gate;
    double sink;
    double cpu; /* seconds of this thread's CPU time for f(iters) */
} probe_job;


static void *probe_thread(void *arg)
{
    probe_job *j = arg;
    pthread_mutex_lock(&j->gate->mu);
    while (!j->gate->go)
        pthread_cond_wait(&j->gate->cv, &j->gate->mu);
    pthread_mutex_unlock(&j->gate->mu);
    double c0 = thread_cpu_s();
    j->sink = j->f(j->iters);
    j->cpu = thread_cpu_s() - c0;
    return NULL;
}

/* Seconds for @p nt threads to each run f(iters), from the common start to the last join;
 * NAN if threads cannot be started. @p rate (may be NULL) receives the sum over the threads
 * of 1 / (the thread's CPU seconds): runs per CPU-second, which time spent descheduled while
 * other processes run does not lower. */
static double probe_run(probe_fn f, long iters, int nt, double *sink, double *rate)
{
    pthread_t th[CLI_MAX_THREADS];
    probe_job jobs[CLI_MAX_THREADS];
    probe_gate gate = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, false};
    int started = 0;
    for (int t = 0; t < nt; t++) {
        jobs[t] = (probe_job){f, iters, &gate, 0, 0};
        if (pthread_create(&th[t], NULL, probe_thread, &jobs[t]) != 0)
            break;
        started++;
    }
    double t0 = now_s();
    pthread_mutex_lock(&gate.mu);
    gate.go = true;
    pthread_cond_broadcast(&gate.cv);
    pthread_mutex_unlock(&gate.mu);
    double r = 0;
    for (int t = 0; t < started; t++) {
        pthread_join(th[t], NULL);
        *sink += jobs[t].sink;
        r += 1.0 / fmax(jobs[t].cpu, 1e-9);
    }
    double dt = now_s() - t0;
    if (rate)
        *rate = r;
    return started < nt ? NAN : dt;
}

/* ---- OpenBLAS through dlopen ---------------------------------------------------------------- */
enum { BG_ROW_MAJOR = 101, BG_NO_TRANS = 111, BG_TRANS = 112 }; /* CBLAS enum values */
typedef void (*sgemm_fn)(int, int, int, int, int, int, float, const float *, int,
                         const float *, int, float, float *, int);
typedef void (*dgemm_fn)(int, int, int, int, int, int, double, const double *, int,
                         const double *, int, double, double *, int);
typedef void (*setthreads_fn)(int);
typedef char *(*corename_fn)(void);

typedef struct {
    void *h;
    sgemm_fn sgemm;
    dgemm_fn dgemm;
    setthreads_fn set_threads; /* may be NULL */
    corename_fn corename;      /* may be NULL */
} blas_lib;

/* Load libopenblas.so.0; false (and a message in @p why) if absent or incomplete. */
static bool blas_load(blas_lib *b, char *why, size_t n)
{
    memset(b, 0, sizeof *b);
    /* This machine's environment pins OpenBLAS to Haswell kernels; the reference must run
     * its best ones, so the variable goes before the library reads it (at load time). */
    unsetenv("OPENBLAS_CORETYPE");
    /* Idle OpenBLAS workers spin 2^28 TSC cycles (~0.1 s) before they sleep, and idle OpenMP
     * workers spin too: on a 2-CPU machine either team spinning steals a core from the other
     * library's next sample. Workers that park after 2^20 cycles (~0.4 ms), plus a pause of
     * a few ms between the two libraries' samples (idle_pause), keep the interleaving fair;
     * back-to-back calls inside a sample never wait that long. A user's value is kept. */
    setenv("OPENBLAS_THREAD_TIMEOUT", "20", 0);
    b->h = dlopen("libopenblas.so.0", RTLD_NOW | RTLD_LOCAL);
    if (!b->h) {
        const char *e = dlerror();
        snprintf(why, n, "%s", e ? e : "dlopen failed");
        return false;
    }
    /* POSIX's idiom for dlsym into a function pointer (ISO C has no object-to-function
     * pointer conversion). */
    *(void **)&b->sgemm = dlsym(b->h, "cblas_sgemm");
    *(void **)&b->dgemm = dlsym(b->h, "cblas_dgemm");
    *(void **)&b->set_threads = dlsym(b->h, "openblas_set_num_threads");
    *(void **)&b->corename = dlsym(b->h, "openblas_get_corename");
    if (!b->sgemm || !b->dgemm) {
        snprintf(why, n, "libopenblas.so.0 has no cblas_sgemm / cblas_dgemm");
        dlclose(b->h);
        b->h = NULL;
        return false;
    }
    return true;
}

/* ---- one shape ------------------------------------------------------------------------------ */
typedef struct {
    int64_t M, N, K;
    bool nt;        /* B is (N, K), C = A B^T */
    bool f64;
    int threads;
    int samples;
} gemm_case;

typedef struct {
    double tg[3], bl[3]; /* GFLOP/s: median, min, max (bl: NAN without OpenBLAS) */
    double maxdiff;      /* max |tgrad - OpenBLAS| / max |OpenBLAS| (NAN without OpenBLAS) */
    double ratio;        /* median over samples of OpenBLAS time / tgrad time (NAN: none) */
} gemm_result;

static void blas_call(const blas_lib *bl, const gemm_case *c, const void *a, const void *b,
                      void *y)
{
    int M = (int)c->M, N = (int)c->N, K = (int)c->K;
    int tb = c->nt ? BG_TRANS : BG_NO_TRANS, ldb = c->nt ? K : N;
    if (c->f64)
        bl->dgemm(BG_ROW_MAJOR, BG_NO_TRANS, tb, M, N, K, 1.0, a, K, b, ldb, 0.0, y, N);
    else
        bl->sgemm(BG_ROW_MAJOR, BG_NO_TRANS, tb, M, N, K, 1.0f, a, K, b, ldb, 0.0f, y, N);
}

/* Let the other library's idle workers stop spinning (see blas_load) before a sample. */
static void idle_pause(void)
{
    struct timespec ts = {0, 5000000}; /* 5 ms: past libgomp's default spin and OpenBLAS's */
    nanosleep(&ts, NULL);
}

/* Time one case; 0, or 1 after reporting an error. */
static int gemm_run(const gemm_case *c, const blas_lib *bl, gemm_result *res)
{
    tg_dtype dt = c->f64 ? TG_F64 : TG_F32;
    size_t esz = c->f64 ? sizeof(double) : sizeof(float);
    double flops = 2.0 * (double)c->M * (double)c->N * (double)c->K;
    tg_ctx *ctx = tg_ctx_new();
    if (!ctx) {
        fprintf(stderr, "tgrad bench: out of memory\n");
        return 1;
    }
    tg_tensor *a = tg_input(ctx, dt, TG_DIMS(c->M, c->K), "a");
    tg_tensor *b = c->nt ? tg_input(ctx, dt, TG_DIMS(c->N, c->K), "b")
                         : tg_input(ctx, dt, TG_DIMS(c->K, c->N), "b");
    tg_tensor *y = tg_matmul(ctx, a, b, false, c->nt); /* (M, N) */
    tg_graph *g = y ? tg_graph_new(ctx, &y, 1) : NULL;
    void *ybl = bl->h ? malloc(esz * (size_t)(c->M * c->N)) : NULL;
    int nsmp = c->samples;
    double *ttg = malloc(sizeof(double) * (size_t)nsmp * 2), *tbl = ttg ? ttg + nsmp : NULL;
    if (!g || (bl->h && !ybl) || !ttg) {
        if (!g)
            cli_report("bench", NULL, NULL, ctx);
        else
            fprintf(stderr, "tgrad bench: out of memory\n");
        free(ybl);
        free(ttg);
        tg_ctx_free(ctx);
        return 1;
    }
    tg_fill_uniform(a, -1, 1);
    tg_fill_uniform(b, -1, 1);
    tg_ctx_set_threads(ctx, c->threads);
    if (bl->set_threads)
        bl->set_threads(c->threads);
    /* warm-up (first touch, OpenMP team, OpenBLAS buffers) and the repetitions per sample */
    int rc = 0;
    double t0 = now_s();
    if (tg_graph_forward(g) != TG_OK)
        rc = 1;
    double t1 = now_s() - t0;
    if (!rc && bl->h)
        blas_call(bl, c, tg_tensor_data(a), tg_tensor_data(b), ybl);
    t0 = now_s();
    if (!rc && tg_graph_forward(g) != TG_OK)
        rc = 1;
    t1 = fmin(t1, now_s() - t0);
    int reps = t1 > 0.01 ? 1 : (int)fmin(1000.0, ceil(0.01 / fmax(t1, 1e-6)));
    for (int s = 0; s < nsmp && !rc; s++) {
        if (bl->h)
            idle_pause();
        t0 = now_s();
        for (int r = 0; r < reps && !rc; r++)
            if (tg_graph_forward(g) != TG_OK)
                rc = 1;
        ttg[s] = (now_s() - t0) / reps;
        if (bl->h) {
            idle_pause();
            t0 = now_s();
            for (int r = 0; r < reps; r++)
                blas_call(bl, c, tg_tensor_data(a), tg_tensor_data(b), ybl);
            tbl[s] = (now_s() - t0) / reps;
        }
    }
    if (rc) {
        cli_report("bench", NULL, NULL, ctx);
    } else {
        res->maxdiff = NAN;
        if (bl->h) {
            double md = 0, mx = 0;
            for (int64_t i = 0; i < c->M * c->N; i++) {
                double r = c->f64 ? ((double *)ybl)[i] : (double)((float *)ybl)[i];
                md = fmax(md, fabs(tg_get(y, i) - r));
                mx = fmax(mx, fabs(r));
            }
            res->maxdiff = md / fmax(mx, 1e-300);
        }
        res->ratio = NAN;
        if (bl->h) { /* per-sample ratios first: median() below sorts the times */
            double *rs = malloc(sizeof(double) * (size_t)nsmp);
            if (rs) {
                for (int s = 0; s < nsmp; s++)
                    rs[s] = tbl[s] / ttg[s];
                res->ratio = median(rs, nsmp);
                free(rs);
            }
        }
        double lo = ttg[0], hi = ttg[0];
        for (int s = 1; s < nsmp; s++)
            lo = fmin(lo, ttg[s]), hi = fmax(hi, ttg[s]);
        res->tg[0] = flops / median(ttg, nsmp) * 1e-9;
        res->tg[1] = flops / hi * 1e-9;
        res->tg[2] = flops / lo * 1e-9;
        res->bl[0] = res->bl[1] = res->bl[2] = NAN;
        if (bl->h) {
            lo = hi = tbl[0];
            for (int s = 1; s < nsmp; s++)
                lo = fmin(lo, tbl[s]), hi = fmax(hi, tbl[s]);
            res->bl[0] = flops / median(tbl, nsmp) * 1e-9;
            res->bl[1] = flops / hi * 1e-9;
            res->bl[2] = flops / lo * 1e-9;
        }
    }
    free(ybl);
    free(ttg);
    tg_ctx_free(ctx);
    return rc;
}

/* ---- one shape in bf16 ---------------------------------------------------------------------- */
typedef struct {
    double bf[3], f32[3]; /* GFLOP/s: median, min, max */
    double ratio;         /* median over samples of f32 time / bf16 time */
    double maxdiff;       /* max |bf16 - f32| / max |f32| */
} bf16_result;

/* The two sides of a bf16 case: the f32 graph and the bf16 kernel's operands and buffers. */
typedef struct {
    tg_graph *g;   /* f32: tg_matmul's graph */
    const gemm_case *c;
    const float *a, *b;
    float *y;      /* bf16 output */
    void *ws;
    bool failed;
} bf16_pair;

static void bf16_call(bf16_pair *p)
{
    const gemm_case *c = p->c;
    tg__gemm_isa_bf16(TG__ISA_BEST, c->threads, false, c->nt, c->M, c->N, c->K, p->a, c->K,
                      p->b, c->nt ? c->K : c->N, p->y, c->N, false, p->ws, NULL);
}

/* Seconds per call over a sample of @p reps calls of the bf16 kernel or of the f32 graph. */
static double bf16_sample(bf16_pair *p, bool bf16, int reps)
{
    double t0 = now_s();
    for (int r = 0; r < reps; r++) {
        if (bf16)
            bf16_call(p);
        else if (tg_graph_forward(p->g) != TG_OK)
            p->failed = true;
    }
    return (now_s() - t0) / reps;
}

/* Calls per sample so that one lasts >= ~10 ms, from the better of two timed calls. */
static int bf16_reps(bf16_pair *p, bool bf16)
{
    double t = fmin(bf16_sample(p, bf16, 1), bf16_sample(p, bf16, 1));
    return t > 0.01 ? 1 : (int)fmin(1000.0, ceil(0.01 / fmax(t, 1e-6)));
}

/* Time one case: the bf16 GEMM (called directly, its workspace allocated once) against the f32
 * GEMM through tg_matmul on a one-op graph (as gemm_run times it), both on c->threads threads,
 * samples interleaved (one process, one OpenMP team: no pause needed). 0, or 1 after reporting
 * an error. */
static int bf16_run(const gemm_case *c, bf16_result *res)
{
    double flops = 2.0 * (double)c->M * (double)c->N * (double)c->K;
    tg_ctx *ctx = tg_ctx_new();
    if (!ctx) {
        fprintf(stderr, "tgrad bench: out of memory\n");
        return 1;
    }
    tg_tensor *a = tg_input(ctx, TG_F32, TG_DIMS(c->M, c->K), "a");
    tg_tensor *b = c->nt ? tg_input(ctx, TG_F32, TG_DIMS(c->N, c->K), "b")
                         : tg_input(ctx, TG_F32, TG_DIMS(c->K, c->N), "b");
    tg_tensor *y = tg_matmul(ctx, a, b, false, c->nt); /* (M, N) */
    tg_graph *g = y ? tg_graph_new(ctx, &y, 1) : NULL;
    size_t wsb = (tg__gemm_bf16_ws_bytes_nk(c->threads, c->N, c->K) + 63) / 64 * 64;
    void *ws = aligned_alloc(64, wsb);
    float *ybf = malloc(sizeof(float) * (size_t)(c->M * c->N));
    int nsmp = c->samples;
    double *tf = malloc(sizeof(double) * (size_t)nsmp * 3), *tb = tf ? tf + nsmp : NULL;
    double *rs = tf ? tf + 2 * nsmp : NULL;
    if (!g || !ws || !ybf || !tf) {
        if (!g)
            cli_report("bench", NULL, NULL, ctx);
        else
            fprintf(stderr, "tgrad bench: out of memory\n");
        free(ws);
        free(ybf);
        free(tf);
        tg_ctx_free(ctx);
        return 1;
    }
    tg_fill_uniform(a, -1, 1);
    tg_fill_uniform(b, -1, 1);
    tg_ctx_set_threads(ctx, c->threads);
    bf16_pair p = {g, c, tg_tensor_data(a), tg_tensor_data(b), ybf, ws, false};
    /* warm-up (first touch, the OpenMP team) and the calls per sample of each */
    int rf = bf16_reps(&p, false), rb = bf16_reps(&p, true);
    for (int s = 0; s < nsmp && !p.failed; s++) {
        tf[s] = bf16_sample(&p, false, rf);
        tb[s] = bf16_sample(&p, true, rb);
        rs[s] = tf[s] / tb[s];
    }
    int rc = p.failed;
    if (rc) {
        cli_report("bench", NULL, NULL, ctx);
    } else {
        double md = 0, mx = 0;
        for (int64_t i = 0; i < c->M * c->N; i++) {
            double r = tg_get(y, i);
            md = fmax(md, fabs((double)ybf[i] - r));
            mx = fmax(mx, fabs(r));
        }
        res->maxdiff = md / fmax(mx, 1e-300);
        res->ratio = median(rs, nsmp);
        double *v[2] = {tb, tf}, *out[2] = {res->bf, res->f32};
        for (int k = 0; k < 2; k++) { /* median() sorts: v[k][0] is the min time */
            out[k][0] = flops / median(v[k], nsmp) * 1e-9;
            out[k][1] = flops / v[k][nsmp - 1] * 1e-9;
            out[k][2] = flops / v[k][0] * 1e-9;
        }
    }
    free(ws);
    free(ybf);
    free(tf);
    tg_ctx_free(ctx);
    return rc;
}

/* ---- the machine ---------------------------------------------------------------------------- */
/* The value of the first "key : value" line of /proc/cpuinfo whose key is @p key, or "?". */
static void cpuinfo_field(const char *key, char *out, size_t n)
{
    snprintf(out, n, "?");
    FILE *f = fopen("/proc/cpuinfo", "r");
    if (!f)
        return;
    char line[512];
    size_t kl = strlen(key);
    while (fgets(line, sizeof line, f)) {
        char *colon = strchr(line, ':');
        if (strncmp(line, key, kl) != 0 || !colon)
            continue;
        char *e = colon;
        while (e > line + kl && (e[-1] == ' ' || e[-1] == '\t'))
            e--;
        if (e != line + kl)
            continue;
        char *v = colon + 1;
        while (*v == ' ')
            v++;
        v[strcspn(v, "\n")] = 0;
        snprintf(out, n, "%s", v);
        break;
    }
    fclose(f);
}

void bench_machine_print(void)
{
    char model[256], mhz[64], fam[32], mod[32];
    cpuinfo_field("model name", model, sizeof model);
    cpuinfo_field("cpu MHz", mhz, sizeof mhz);
    cpuinfo_field("cpu family", fam, sizeof fam);
    cpuinfo_field("model", mod, sizeof mod);
    long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    printf("Machine: %s (family %s, model %s), %ld CPUs online, /proc/cpuinfo %s MHz\n", model,
           fam, mod, cpus, mhz);
    blas_lib bl;
    char why[256];
    if (blas_load(&bl, why, sizeof why)) {
        char *(*config)(void);
        *(void **)&config = dlsym(bl.h, "openblas_get_config");
        printf("OpenBLAS: core %s, %s\n", bl.corename ? bl.corename() : "?",
               config ? config() : "?");
        dlclose(bl.h);
    } else {
        printf("OpenBLAS: not available (%s)\n", why);
    }
}

/* ---- the sections --------------------------------------------------------------------------- */
/* Median (min-max) GFLOP/s of @p samples runs of form @p f on @p nt threads into g[3], from
 * each thread's CPU time (flops per CPU-second, summed over the threads), and the median from
 * the wall clock into *wall; iters per thread calibrated to ~0.1 s per run (tiny: 1000).
 * 0, or 1 after printing an error. */
static int probe_measure(probe_fn f, double flops_per_iter, int nt, int samples, bool tiny,
                         double *sink, double g[3], double *wall)
{
    long iters = 1000;
    if (!tiny) {
        double dt = probe_run(f, 100000, 1, sink, NULL);
        iters = isnan(dt) ? 100000 : (long)fmax(1e5, fmin(1e10, 1e5 * 0.1 / fmax(dt, 1e-6)));
    }
    double *v = malloc(sizeof(double) * (size_t)samples * 2), *w = v ? v + samples : NULL;
    if (!v) {
        fprintf(stderr, "tgrad bench: out of memory\n");
        return 1;
    }
    for (int s = 0; s < samples; s++) {
        double rate;
        double dt = probe_run(f, iters, nt, sink, &rate);
        if (isnan(dt)) {
            free(v);
            fprintf(stderr, "tgrad bench: cannot start %d threads\n", nt);
            return 1;
        }
        v[s] = flops_per_iter * (double)iters * rate * 1e-9;
        w[s] = flops_per_iter * (double)iters * nt / dt * 1e-9;
    }
    g[0] = median(v, samples); /* sorted: v[0] min, v[samples - 1] max */
    g[1] = v[0];
    g[2] = v[samples - 1];
    *wall = median(w, samples);
    free(v);
    return 0;
}

/* A peak below this share of nt x the 1-thread peak on nt threads is probed again: with every
 * thread on its own core the FMA peak scales with the threads (two threads on the two
 * hyperthreads of one core, or a busy machine, give less). */
#define PEAK_SCALING 0.9
#define PEAK_RETRIES 2

/* Probe form @p fm (f64 or f32) on @p nt threads again; raise *best to the best sample if it is
 * higher. 0, or 1 after printing an error. */
static int peak_again(const probe_impl *fm, bool f64, int nt, int samples, bool tiny,
                      double *sink, double *best)
{
    int lanes = f64 ? (fm->lanes32 > 1 ? fm->lanes32 / 2 : 1) : fm->lanes32;
    double g[3], wall;
    if (probe_measure(f64 ? fm->f64 : fm->f32, 2.0 * fm->chains * lanes, nt, samples, tiny,
                      sink, g, &wall))
        return 1;
    *best = fmax(*best, g[2]);
    return 0;
}

int bench_peak(int threads_all, int samples, bool tiny, bench_peaks *pk)
{
    probe_impl forms[8];
    int nf = probe_forms(forms);
    int tcounts[2] = {1, threads_all}, ntc = threads_all > 1 ? 2 : 1;
    double sink = 0, gf[8][2][3]; /* [form][thread index] median, min, max f32 */
    double wall[8][2], wall64[2];
    printf("FMA peak probe: independent chains a = a * b + c per thread, ~0.1 s per sample, "
           "median of %d samples (min-max),\nGFLOP/s per CPU-second of the probing threads "
           "(summed over them; time other processes take\nfrom the CPUs does not lower it)\n",
           samples);
    printf("  %-24s %6s", "instruction form", "chains");
    for (int ti = 0; ti < ntc; ti++)
        printf("   %10s %2d thread%s", "f32", tcounts[ti], tcounts[ti] == 1 ? " " : "s");
    printf("\n");
    int best = 0;
    for (int fi = 0; fi < nf; fi++) {
        printf("  %-24s %6d", forms[fi].name, forms[fi].chains);
        for (int ti = 0; ti < ntc; ti++) {
            if (probe_measure(forms[fi].f32, 2.0 * forms[fi].chains * forms[fi].lanes32,
                              tcounts[ti], samples, tiny, &sink, gf[fi][ti], &wall[fi][ti]))
                return 1;
            char cell[64];
            snprintf(cell, sizeof cell, "%.1f (%.1f-%.1f)", gf[fi][ti][0], gf[fi][ti][1],
                     gf[fi][ti][2]);
            printf("   %22s", cell);
            fflush(stdout);
        }
        printf("\n");
        if (gf[fi][0][0] > 1.02 * gf[best][0][0]) /* the first of forms within 2% */
            best = fi;
    }
    /* f64 on the best form */
    double g64[2][3];
    for (int ti = 0; ti < ntc; ti++) {
        int lanes = forms[best].lanes32 > 1 ? forms[best].lanes32 / 2 : 1;
        if (probe_measure(forms[best].f64, 2.0 * forms[best].chains * lanes, tcounts[ti],
                          samples, tiny, &sink, g64[ti], &wall64[ti]))
            return 1;
    }
    printf("  %-24s %6d", "same, f64", forms[best].chains);
    for (int ti = 0; ti < ntc; ti++) {
        char cell[64];
        snprintf(cell, sizeof cell, "%.1f (%.1f-%.1f)", g64[ti][0], g64[ti][1], g64[ti][2]);
        printf("   %22s", cell);
    }
    printf("\n");
    /* The peaks: the best sample of each (an upper bound: a sample can only be slowed down). */
    *pk = (bench_peaks){{{gf[best][0][2], gf[best][ntc - 1][2]}, {g64[0][2], g64[ntc - 1][2]}},
                        threads_all, samples, tiny, best, {NAN, NAN}};
    for (int d = 0; d < 2 && ntc > 1; d++) {
        int tries = 0;
        while (tries < PEAK_RETRIES &&
               pk->gflops[d][1] < PEAK_SCALING * threads_all * pk->gflops[d][0]) {
            if (peak_again(&forms[best], d == 1, threads_all, samples, tiny, &sink,
                           &pk->gflops[d][1]))
                return 1;
            tries++;
        }
        if (tries > 0)
            printf("  %s on %d threads came out below %.1f x the 1-thread peak: probed %d "
                   "more time%s, best %.1f GFLOP/s (%.2f x)\n", d ? "f64" : "f32",
                   threads_all, PEAK_SCALING * threads_all, tries, tries == 1 ? "" : "s",
                   pk->gflops[d][1], pk->gflops[d][1] / pk->gflops[d][0]);
    }
#ifdef BG_X86
    /* bf16 products (vdpbf16ps), where the CPU has AVX512_BF16 */
    pk->bf16[0] = pk->bf16[1] = NAN;
    if (__builtin_cpu_supports("avx512bf16")) {
        double gb[2][3], wb[2];
        for (int ti = 0; ti < ntc; ti++)
            if (probe_measure(probe_bf16, 24.0 * 64, tcounts[ti], samples, tiny, &sink, gb[ti],
                              &wb[ti]))
                return 1;
        printf("  %-24s %6d", "512-bit vdpbf16ps (bf16)", 24);
        for (int ti = 0; ti < ntc; ti++) {
            char cell[64];
            snprintf(cell, sizeof cell, "%.1f (%.1f-%.1f)", gb[ti][0], gb[ti][1], gb[ti][2]);
            printf("   %22s", cell);
            pk->bf16[ti] = gb[ti][2];
        }
        printf("\n");
        if (ntc == 1)
            pk->bf16[1] = pk->bf16[0];
    }
#endif
    if (sink == 12345.678) /* keeps the probes' results alive */
        printf(" \n");
    printf("Peak (used for %%peak below), the best sample of each: %s, %d chains:\n  f32 %.1f, "
           "f64 %.1f GFLOP/s on 1 thread", forms[best].name, forms[best].chains,
           pk->gflops[0][0], pk->gflops[1][0]);
    if (ntc > 1)
        printf("; f32 %.1f, f64 %.1f on %d threads", pk->gflops[0][1], pk->gflops[1][1],
               threads_all);
    printf("\n  (medians by the wall clock: f32 %.1f, f64 %.1f on 1 thread", wall[best][0],
           wall64[0]);
    if (ntc > 1)
        printf("; f32 %.1f, f64 %.1f on %d threads", wall[best][1], wall64[1], threads_all);
    printf("; lower when other processes share the CPUs)\n");
    if (!isnan(pk->bf16[0])) {
        printf("  bf16 products (vdpbf16ps, 2 products per f32 lane): %.1f GFLOP/s on 1 thread",
               pk->bf16[0]);
        if (ntc > 1)
            printf(", %.1f on %d threads", pk->bf16[1], threads_all);
        printf(" (%.2f x the f32 peak)\n", pk->bf16[0] / pk->gflops[0][0]);
    }
#ifdef BG_X86
    double ghz = clock_ghz();
    printf("Core clock under load: %.2f GHz (a chain of dependent integer adds), so %.1f f32 "
           "flops per cycle per core\n  (2 FMA pipes x 16 lanes x 2 flops would be 64 per "
           "cycle = %.0f GFLOP/s at this clock;\n  32 per cycle is one 512-bit or two 256-bit "
           "FMAs per cycle, e.g. Zen 4's double-pumped AVX-512)\n",
           ghz, pk->gflops[0][0] / ghz, 64 * ghz);
#endif
    return 0;
}

/* The %peak cell of @p gflops against peak pk->gflops[d][ti]. Above the peak, that peak is
 * probed once more (the best sample kept); still above: "n/a", and *failed is set. 0, or 1
 * after printing an error. */
static int pct_cell(bench_peaks *pk, int d, int ti, bool *reprobed, double gflops, char *cell,
                    size_t n, bool *failed)
{
    if (bench_pct_cell(gflops, pk->gflops[d][ti], cell, n))
        return 0;
    if (!*reprobed && isfinite(gflops)) {
        probe_impl forms[8];
        probe_forms(forms);
        double sink = 0;
        int nt = ti ? pk->threads_all : 1;
        if (peak_again(&forms[pk->form], d == 1, nt, pk->samples, pk->tiny, &sink,
                       &pk->gflops[d][ti]))
            return 1;
        *reprobed = true;
        if (sink == 12345.678)
            printf(" ");
        if (bench_pct_cell(gflops, pk->gflops[d][ti], cell, n))
            return 0;
    }
    *failed = true;
    return 0;
}

/* Probe the bf16 peak on @p nt threads again; raise *best to the best sample if higher (no
 * change without AVX512_BF16). 0, or 1 after printing an error. */
static int bf16_peak_again(int nt, int samples, bool tiny, double *best)
{
#ifdef BG_X86
    if (__builtin_cpu_supports("avx512bf16")) {
        double g[3], wall, sink = 0;
        if (probe_measure(probe_bf16, 24.0 * 64, nt, samples, tiny, &sink, g, &wall))
            return 1;
        if (sink == 12345.678)
            printf(" ");
        *best = isnan(*best) ? g[2] : fmax(*best, g[2]);
    }
#else
    (void)nt, (void)samples, (void)tiny, (void)best;
#endif
    return 0;
}

/* The bf16 GEMM tables (--precision bf16): per thread count, each shape NN and NT, bf16
 * GFLOP/s and % of the bf16 peak beside tgrad's f32 GEMM and % of the f32 peak, the ratio,
 * the relative difference; then the medians over the shapes. 0, or 1 after an error. */
static int bench_gemm_bf16(const int64_t (*sh)[3], size_t nshapes, int threads_all,
                           int samples, bench_peaks *pk)
{
    int tcounts[2] = {1, threads_all}, ntc = threads_all > 1 ? 2 : 1;
    bool hw = tg__gemm_bf16_hw();
    printf("\nbf16 GEMM: tg__gemm_isa_bf16, the products of --precision bf16 (operands rounded to "
           "bf16, f32\naccumulation), %s;\nagainst tgrad's f32 GEMM through tg_matmul (as the "
           "f32 sgemm table times it), samples\ninterleaved in this process; ratio = median over "
           "samples of f32 time / bf16 time (> 1: bf16\nfaster); rel.diff = max |bf16 - f32| / "
           "max |f32| (the bf16 rounding of the operands);\nOpenBLAS has no bf16 GEMM to compare "
           "with\n", hw ? "AVX512_BF16 kernel (vdpbf16ps)"
                        : "portable kernel (this CPU has no AVX512_BF16; no bf16 peak)");
    size_t nrow = nshapes * 2;
    double *col = malloc(sizeof(double) * nrow * 3);
    if (!col) {
        fprintf(stderr, "tgrad bench: out of memory\n");
        return 1;
    }
    int rc = 0;
    for (int ti = 0; ti < ntc && !rc; ti++) {
        int nt = tcounts[ti];
        bool reprobed = false, failed = false;
        double peak0 = pk->bf16[ti];
        printf("\nbf16 GEMM, %d thread%s, bf16 peak %.1f GFLOP/s (f32 %.1f); median of %d "
               "samples (min-max)\n", nt, nt == 1 ? "" : "s", peak0, pk->gflops[0][ti],
               samples);
        printf("%-20s %-3s %22s %6s %22s %6s %7s %8s\n", "(M, N, K)", "op", "bf16 GFLOP/s",
               "%peak", "tgrad f32 GFLOP/s", "%peak", "ratio", "rel.diff");
        double *gf = col, *pc = col + nrow, *ra = col + 2 * nrow;
        int nr = 0, np = 0;
        for (size_t s = 0; s < nshapes && !rc; s++)
            for (int t_ = 0; t_ < 2 && !rc; t_++) {
                gemm_case c = {sh[s][0], sh[s][1], sh[s][2], t_ == 1, false, nt, samples};
                bf16_result r;
                if ((rc = bf16_run(&c, &r)))
                    break;
                char label[64], cb[64], cf[64], pb[16], pf[16];
                if (!bench_pct_cell(r.bf[0], pk->bf16[ti], pb, sizeof pb) && hw && !reprobed &&
                    isfinite(r.bf[0])) { /* above the peak: probe it once more */
                    if ((rc = bf16_peak_again(nt, samples, pk->tiny, &pk->bf16[ti])))
                        break;
                    reprobed = true;
                }
                if (!bench_pct_cell(r.bf[0], pk->bf16[ti], pb, sizeof pb) && hw)
                    failed = true;
                if ((rc = pct_cell(pk, 0, ti, &reprobed, r.f32[0], pf, sizeof pf, &failed)))
                    break;
                snprintf(label, sizeof label, "(%lld, %lld, %lld)", (long long)c.M,
                         (long long)c.N, (long long)c.K);
                snprintf(cb, sizeof cb, "%.1f (%.1f-%.1f)", r.bf[0], r.bf[1], r.bf[2]);
                snprintf(cf, sizeof cf, "%.1f (%.1f-%.1f)", r.f32[0], r.f32[1], r.f32[2]);
                printf("%-20s %-3s %22s %s %22s %s %6.2fx %8.1e\n", label, c.nt ? "NT" : "NN",
                       cb, pb, cf, pf, r.ratio, r.maxdiff);
                fflush(stdout);
                gf[nr] = r.bf[0];
                ra[nr] = r.ratio;
                nr++;
                if (bench_pct_cell(r.bf[0], pk->bf16[ti], pb, sizeof pb))
                    pc[np++] = 100 * r.bf[0] / pk->bf16[ti];
            }
        if (rc)
            break;
        if (reprobed && pk->bf16[ti] > peak0)
            printf("(a rate above the peak: probed again, %.1f GFLOP/s from that row on)\n",
                   pk->bf16[ti]);
        if (failed)
            printf("n/a: the peak probe failed (a rate above its %.1f GFLOP/s, probed twice)\n",
                   pk->bf16[ti]);
        if (nr > 0) {
            printf("median over shapes (bf16, %d thread%s, NN and NT): %.1f GFLOP/s", nt,
                   nt == 1 ? "" : "s", median(gf, nr));
            if (np > 0)
                printf(", %.0f%% of the bf16 peak", median(pc, np));
            printf(", %.2fx tgrad's f32\n", median(ra, nr));
        }
    }
    free(col);
    return rc;
}

int bench_gemm(int threads_all, int samples, bool tiny, int precision, bench_peaks *pk)
{
    static const int64_t shapes[][3] = {
        {640, 512, 512},   {640, 2048, 512}, {640, 512, 2048}, {4096, 512, 512},
        {1024, 1024, 1024}, {2048, 128, 512}, {2048, 512, 128}, {2048, 86, 128}};
    static const int64_t tiny_shape[][3] = {{16, 8, 4}};
    const int64_t(*sh)[3] = tiny ? tiny_shape : shapes;
    size_t nshapes = tiny ? 1 : sizeof shapes / sizeof shapes[0];
    if (precision == TG_PRECISION_BF16)
        return bench_gemm_bf16(sh, nshapes, threads_all, samples, pk);
    int tcounts[2] = {1, threads_all};
    int ntc = threads_all > 1 ? 2 : 1;

    blas_lib bl;
    char why[256];
    bool have_blas = blas_load(&bl, why, sizeof why);
    if (have_blas)
        printf("\nReference: OpenBLAS (libopenblas.so.0, core %s), OPENBLAS_CORETYPE unset, "
               "OPENBLAS_THREAD_TIMEOUT=%s;\nsamples interleaved, 5 ms pause between the two "
               "libraries' samples; ratio = median over samples of\nOpenBLAS time / tgrad time "
               "(> 1: tgrad faster)\n", bl.corename ? bl.corename() : "?",
               getenv("OPENBLAS_THREAD_TIMEOUT"));
    else
        printf("\nOpenBLAS not available (%s): tgrad's numbers only\n", why);

    double *ratios = malloc(sizeof(double) * nshapes * 2);
    if (!ratios) {
        fprintf(stderr, "tgrad bench: out of memory\n");
        if (have_blas)
            dlclose(bl.h);
        return 1;
    }
    int rc = 0;
    for (int d = 0; d < 2 && !rc; d++) {
        for (int ti = 0; ti < ntc && !rc; ti++) {
            int nt = tcounts[ti];
            bool reprobed = false, failed = false;
            double peak0 = pk->gflops[d][ti];
            printf("\n%s, %d thread%s, peak %.1f GFLOP/s; median of %d samples (min-max)\n",
                   d ? "dgemm" : "sgemm", nt, nt == 1 ? "" : "s", peak0, samples);
            printf("%-20s %-3s %22s %6s", "(M, N, K)", "op", "tgrad GFLOP/s", "%peak");
            if (have_blas)
                printf(" %22s %6s %7s %8s", "OpenBLAS GFLOP/s", "%peak", "ratio", "rel.diff");
            printf("\n");
            int nr = 0;
            for (size_t s = 0; s < nshapes && !rc; s++)
                for (int nt_ = 0; nt_ < 2 && !rc; nt_++) {
                    gemm_case c = {sh[s][0], sh[s][1], sh[s][2], nt_ == 1, d == 1, nt, samples};
                    gemm_result r;
                    rc = gemm_run(&c, have_blas ? &bl : &(blas_lib){0}, &r);
                    if (rc)
                        break;
                    char label[64], ct[64];
                    snprintf(label, sizeof label, "(%lld, %lld, %lld)", (long long)c.M,
                             (long long)c.N, (long long)c.K);
                    snprintf(ct, sizeof ct, "%.1f (%.1f-%.1f)", r.tg[0], r.tg[1], r.tg[2]);
                    char pt[16], pb[16];
                    rc = pct_cell(pk, d, ti, &reprobed, r.tg[0], pt, sizeof pt, &failed);
                    if (!rc && have_blas)
                        rc = pct_cell(pk, d, ti, &reprobed, r.bl[0], pb, sizeof pb, &failed);
                    if (rc)
                        break;
                    printf("%-20s %-3s %22s %s", label, c.nt ? "NT" : "NN", ct, pt);
                    if (have_blas) {
                        snprintf(ct, sizeof ct, "%.1f (%.1f-%.1f)", r.bl[0], r.bl[1], r.bl[2]);
                        ratios[nr] = r.ratio;
                        printf(" %22s %s %6.2fx %8.1e", ct, pb, ratios[nr], r.maxdiff);
                        nr++;
                    }
                    printf("\n");
                    fflush(stdout);
                }
            if (!rc && reprobed && pk->gflops[d][ti] > peak0)
                printf("(a rate above the peak: probed again, %.1f GFLOP/s from that row "
                       "on)\n", pk->gflops[d][ti]);
            if (!rc && failed)
                printf("n/a: the peak probe failed (a rate above its %.1f GFLOP/s, probed "
                       "twice)\n", pk->gflops[d][ti]);
            if (!rc && have_blas && nr > 0)
                printf("median ratio tgrad / OpenBLAS (%s, %d thread%s, NN and NT): %.2fx\n",
                       d ? "dgemm" : "sgemm", nt, nt == 1 ? "" : "s", median(ratios, nr));
        }
    }
    free(ratios);
    if (have_blas)
        dlclose(bl.h);
    return rc;
}
