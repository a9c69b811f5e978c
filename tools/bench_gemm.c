/*
 * bench_gemm.c - the GEMM section of `tgrad bench` (issue 9, item 6):
 *   - an FMA peak probe: independent FMA chains in registers (AVX-512, AVX2 or portable C,
 *     chosen at run time), f32 and f64, on 1 and N threads (pthreads, each thread its own
 *     chains), GFLOP/s;
 *   - sgemm and dgemm through tgrad (tg_matmul on a one-op graph), C (M, N) = A (M, K) B (K, N)
 *     ("NN") and A (M, K) B^T with B (N, K) ("NT"), on the shapes of issue 9, 1 and N threads;
 *   - OpenBLAS as the reference when libopenblas.so.0 can be dlopen()ed (no link dependency),
 *     with OPENBLAS_CORETYPE removed from the environment first so it picks its best kernels;
 *     tgrad and OpenBLAS alternate sample by sample in this process.
 * Each sample times `reps` calls (reps chosen once per shape so a sample lasts >= ~10 ms);
 * rows print the median and the min-max over the samples, % of the probed peak and the ratio
 * tgrad / OpenBLAS of the medians. Speed is only printed here, never asserted.
 */
#define _POSIX_C_SOURCE 200809L
#include "bench_gemm.h"
#include "cli.h"
#include "climsg.h"

#include <dlfcn.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

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
/* Each probe runs @p iters iterations of BG_CHAINS independent chains a = a * b + c (b just
 * under 1, so a converges to c / (1 - b) and never overflows or goes subnormal) and returns a
 * sum of the chains, which the caller keeps so the loop cannot be removed. 12 chains hide a
 * 4-cycle FMA latency on 2 FMA pipes with room to spare. */
#define BG_CHAINS 12

#ifdef BG_X86
#define BG_FMA_BODY(T, SET1, FMA, ADD, RED)                                                   \
    T a[BG_CHAINS];                                                                          \
    for (int j = 0; j < BG_CHAINS; j++)                                                      \
        a[j] = SET1(1.0 + 0.01 * j);                                                         \
    T b = SET1(0.99999), c = SET1(1e-5);                                                     \
    for (long i = 0; i < iters; i++) {                                                       \
        a[0] = FMA(a[0], b, c); a[1] = FMA(a[1], b, c); a[2] = FMA(a[2], b, c);              \
        a[3] = FMA(a[3], b, c); a[4] = FMA(a[4], b, c); a[5] = FMA(a[5], b, c);              \
        a[6] = FMA(a[6], b, c); a[7] = FMA(a[7], b, c); a[8] = FMA(a[8], b, c);              \
        a[9] = FMA(a[9], b, c); a[10] = FMA(a[10], b, c); a[11] = FMA(a[11], b, c);          \
    }                                                                                        \
    T s = a[0];                                                                              \
    for (int j = 1; j < BG_CHAINS; j++)                                                      \
        s = ADD(s, a[j]);                                                                    \
    return RED(s);

__attribute__((target("avx512f,fma"))) static double red512s(__m512 s)
{
    return (double)_mm512_reduce_add_ps(s);
}
__attribute__((target("avx512f,fma"))) static double red512d(__m512d s)
{
    return _mm512_reduce_add_pd(s);
}
__attribute__((target("avx2,fma"))) static double red256s(__m256 s)
{
    float v[8];
    _mm256_storeu_ps(v, s);
    return (double)v[0] + v[1] + v[2] + v[3] + v[4] + v[5] + v[6] + v[7];
}
__attribute__((target("avx2,fma"))) static double red256d(__m256d s)
{
    double v[4];
    _mm256_storeu_pd(v, s);
    return v[0] + v[1] + v[2] + v[3];
}
__attribute__((target("avx512f,fma"))) static double probe_avx512_f32(long iters)
{
    BG_FMA_BODY(__m512, _mm512_set1_ps, _mm512_fmadd_ps, _mm512_add_ps, red512s)
}
__attribute__((target("avx512f,fma"))) static double probe_avx512_f64(long iters)
{
    BG_FMA_BODY(__m512d, _mm512_set1_pd, _mm512_fmadd_pd, _mm512_add_pd, red512d)
}
__attribute__((target("avx2,fma"))) static double probe_avx2_f32(long iters)
{
    BG_FMA_BODY(__m256, _mm256_set1_ps, _mm256_fmadd_ps, _mm256_add_ps, red256s)
}
__attribute__((target("avx2,fma"))) static double probe_avx2_f64(long iters)
{
    BG_FMA_BODY(__m256d, _mm256_set1_pd, _mm256_fmadd_pd, _mm256_add_pd, red256d)
}
#endif

/* Portable fallback: scalar fma() chains (the compiler may or may not vectorize them). */
static double probe_c_f32(long iters)
{
    float a[BG_CHAINS], s = 0;
    for (int j = 0; j < BG_CHAINS; j++)
        a[j] = 1.0f + 0.01f * (float)j;
    for (long i = 0; i < iters; i++)
        for (int j = 0; j < BG_CHAINS; j++)
            a[j] = fmaf(a[j], 0.99999f, 1e-5f);
    for (int j = 0; j < BG_CHAINS; j++)
        s += a[j];
    return s;
}
static double probe_c_f64(long iters)
{
    double a[BG_CHAINS], s = 0;
    for (int j = 0; j < BG_CHAINS; j++)
        a[j] = 1.0 + 0.01 * j;
    for (long i = 0; i < iters; i++)
        for (int j = 0; j < BG_CHAINS; j++)
            a[j] = fma(a[j], 0.99999, 1e-5);
    for (int j = 0; j < BG_CHAINS; j++)
        s += a[j];
    return s;
}

typedef double (*probe_fn)(long iters);
typedef struct {
    probe_fn f32, f64;
    int lanes32; /* f32 lanes per FMA (f64: half) */
    const char *name;
} probe_impl;

static probe_impl probe_pick(void)
{
    probe_impl p = {probe_c_f32, probe_c_f64, 1, "portable C fma()"};
#ifdef BG_X86
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx512f"))
        p = (probe_impl){probe_avx512_f32, probe_avx512_f64, 16, "AVX-512 FMA (zmm)"};
    else if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"))
        p = (probe_impl){probe_avx2_f32, probe_avx2_f64, 8, "AVX2 FMA (ymm)"};
#endif
    return p;
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
} probe_job;

static void *probe_thread(void *arg)
{
    probe_job *j = arg;
    pthread_mutex_lock(&j->gate->mu);
    while (!j->gate->go)
        pthread_cond_wait(&j->gate->cv, &j->gate->mu);
    pthread_mutex_unlock(&j->gate->mu);
    j->sink = j->f(j->iters);
    return NULL;
}

/* Seconds for @p nt threads to each run f(iters), from the common start to the last join;
 * NAN if threads cannot be started. */
static double probe_run(probe_fn f, long iters, int nt, double *sink)
{
    pthread_t th[CLI_MAX_THREADS];
    probe_job jobs[CLI_MAX_THREADS];
    probe_gate gate = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, false};
    int started = 0;
    for (int t = 0; t < nt; t++) {
        jobs[t] = (probe_job){f, iters, &gate, 0};
        if (pthread_create(&th[t], NULL, probe_thread, &jobs[t]) != 0)
            break;
        started++;
    }
    double t0 = now_s();
    pthread_mutex_lock(&gate.mu);
    gate.go = true;
    pthread_cond_broadcast(&gate.cv);
    pthread_mutex_unlock(&gate.mu);
    for (int t = 0; t < started; t++) {
        pthread_join(th[t], NULL);
        *sink += jobs[t].sink;
    }
    double dt = now_s() - t0;
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

/* ---- the section ---------------------------------------------------------------------------- */
int bench_gemm(int threads_all, int samples, bool tiny)
{
    static const int64_t shapes[][3] = {
        {640, 512, 512},   {640, 2048, 512}, {640, 512, 2048}, {4096, 512, 512},
        {1024, 1024, 1024}, {2048, 128, 512}, {2048, 512, 128}, {2048, 86, 128}};
    static const int64_t tiny_shape[][3] = {{16, 8, 4}};
    const int64_t(*sh)[3] = tiny ? tiny_shape : shapes;
    size_t nshapes = tiny ? 1 : sizeof shapes / sizeof shapes[0];
    int tcounts[2] = {1, threads_all};
    int ntc = threads_all > 1 ? 2 : 1;
    double sink = 0;

    /* FMA peak: f32 and f64 per thread count, median of `samples` runs of ~0.1 s each. */
    probe_impl pi = probe_pick();
    long iters = tiny ? 1000 : 4000000; /* 12 chains x 4e6 ~ 5e7 FMAs ~ 0.1 s at 2 per cycle */
    double peak[2][2]; /* [f64][thread index] GFLOP/s */
    printf("FMA peak probe: %s, %d independent chains per thread, %d samples\n", pi.name,
           BG_CHAINS, samples);
    printf("  %-8s %26s %26s\n", "threads", "f32 GFLOP/s (min-max)", "f64 GFLOP/s (min-max)");
    for (int ti = 0; ti < ntc; ti++) {
        int nt = tcounts[ti];
        double gf[2][3];
        for (int d = 0; d < 2; d++) {
            double *v = malloc(sizeof(double) * (size_t)samples);
            if (!v) {
                fprintf(stderr, "tgrad bench: out of memory\n");
                return 1;
            }
            probe_fn f = d ? pi.f64 : pi.f32;
            int lanes = d && pi.lanes32 > 1 ? pi.lanes32 / 2 : pi.lanes32;
            double per = 2.0 * BG_CHAINS * lanes * (double)iters; /* flops per thread */
            for (int s = 0; s < samples; s++) {
                double dt = probe_run(f, iters, nt, &sink);
                if (isnan(dt)) {
                    free(v);
                    fprintf(stderr, "tgrad bench: cannot start %d threads\n", nt);
                    return 1;
                }
                v[s] = per * nt / dt * 1e-9;
            }
            gf[d][0] = median(v, samples); /* sorted: v[0] min, v[samples - 1] max */
            gf[d][1] = v[0];
            gf[d][2] = v[samples - 1];
            peak[d][ti] = gf[d][0];
            free(v);
        }
        char c32[64], c64[64];
        snprintf(c32, sizeof c32, "%.1f (%.1f-%.1f)", gf[0][0], gf[0][1], gf[0][2]);
        snprintf(c64, sizeof c64, "%.1f (%.1f-%.1f)", gf[1][0], gf[1][1], gf[1][2]);
        printf("  %-8d %26s %26s\n", nt, c32, c64);
    }
    if (sink == 12345.678) /* keeps the probes' results alive */
        printf(" \n");

    blas_lib bl;
    char why[256];
    bool have_blas = blas_load(&bl, why, sizeof why);
    if (have_blas)
        printf("\nReference: OpenBLAS (libopenblas.so.0, core %s), OPENBLAS_CORETYPE unset, "
               "OPENBLAS_THREAD_TIMEOUT=%s;\nsamples interleaved, 5 ms pause between the two "
               "libraries' samples\n", bl.corename ? bl.corename() : "?",
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
            printf("\n%s, %d thread%s, peak %.1f GFLOP/s; median of %d samples (min-max)\n",
                   d ? "dgemm" : "sgemm", nt, nt == 1 ? "" : "s", peak[d][ti], samples);
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
                    printf("%-20s %-3s %22s %5.0f%%", label, c.nt ? "NT" : "NN", ct,
                           100 * r.tg[0] / peak[d][ti]);
                    if (have_blas) {
                        snprintf(ct, sizeof ct, "%.1f (%.1f-%.1f)", r.bl[0], r.bl[1], r.bl[2]);
                        ratios[nr] = r.tg[0] / r.bl[0];
                        printf(" %22s %5.0f%% %6.2fx %8.1e", ct, 100 * r.bl[0] / peak[d][ti],
                               ratios[nr], r.maxdiff);
                        nr++;
                    }
                    printf("\n");
                    fflush(stdout);
                }
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
