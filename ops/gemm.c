/*
 * gemm.c - the single internal matrix-product entry point used by matmul and dense.
 *
 * C (M, N) = (acc ? C : 0) + op(A) (M, K) . op(B) (K, N), op = transpose when the flag is set,
 * optionally followed by an epilogue on the finished C: + bias (per column), then ReLU or GELU,
 * keeping the pre-activation in a second matrix when asked (dense forward, ops/dense.c).
 *
 * Algorithm (Goto & van de Geijn 2008; BLIS, Van Zee & van de Geijn 2015): C is cut into one
 * rectangle per thread. A thread walks its columns in blocks of NC and K in chunks of KC; for
 * each (K chunk, column block) it packs that slice of op(B) once into NR-wide panels (kept in
 * L2) and reuses it for every MR-row strip of its rows: the strip of op(A) is packed k-major
 * (MR x KC, kept in L1) and a register-blocked micro-kernel computes each MR x NR block of C,
 * streaming the B panels. The micro-kernels (AVX-512 and AVX2 with FMA, portable C) are picked
 * once per call from CPUID; every layout (NN, NT, TN, TT) goes through the same packing, so
 * no transposed copy is ever made.
 *
 * Order of operations (determinism): for each K chunk [k0, k0 + KC) an element's chain is
 *   s = init;  s = s + a_k b_k  for k = k0, ..., k0 + KC - 1 (in increasing k)
 * (init = bias[j] in the first chunk of a biased epilogue, else 0), each step one fused
 * multiply-add on CPUs with FMA, a multiply then an add in the portable kernel; then
 * C = C + s (acc or a later chunk) or C = s. So C = ((C_or_0 + s_0) + s_1) + ... with chunk
 * boundaries at multiples of KC: the result depends neither on the number of threads nor on how
 * the work is split, only on whether the CPU has FMA; and for K <= KC, accumulating into C
 * equals adding a separately computed product (gradient sums do not depend on whether two
 * contributions share a buffer). The epilogue's activation is applied once, after the last
 * chunk.
 */
#include "par.h"
#include "gemm.h"
#include "registry.h"
#include "vec.h"

#include <assert.h>
#include <math.h>

#if defined(__GNUC__) && defined(__x86_64__) /* GCC and clang */
#define TG_X86_KERNELS 1
#include <immintrin.h>
#endif

/* Blocking: the packed B block (KC x NC) stays in L2 (512 KiB f32 and f64), an A strip
 * (MR x KC) and the B panel being read stay in L1 (Zen 4 / Skylake: 32-48 KiB L1d, >= 1 MiB
 * L2). Safe constants rather than a cache query: the same on every machine. */
#define KC32 256
#define NC32 512
#define KC64 256
#define NC64 256
#define MR_MAX 12
#define NR_MAX 32

/* Micro-kernel modes: how the accumulators start and what the store does. */
#define MK_LOAD 1 /* store C + chain (else the chain) */
#define MK_BIAS 2 /* start from bias[j] (first chunk of an epilogue with bias) */
#define MK_RELU 4 /* store max(c, 0) (last chunk of a ReLU epilogue) */

/* One micro-kernel: C[0:MR, 0:NR] (row stride ldc) from a packed A strip (a[k * MR + r]) and
 * a B panel (b[k * ldb + j]), kc steps. */
typedef void (*kern_f32)(int64_t kc, const float *a, const float *b, int64_t ldb, float *c,
                         int64_t ldc, int mode, const float *bias);
typedef void (*kern_f64)(int64_t kc, const double *a, const double *b, int64_t ldb, double *c,
                         int64_t ldc, int mode, const double *bias);

/* ---- portable kernels (ISO C vector extension, no FMA) ----------------------------------- */
typedef float v8f __attribute__((vector_size(32)));
typedef double v4d __attribute__((vector_size(32)));

#define T float
#define SUF f32
#define V v8f
#define VL 8
#define MR 6
#define NR 16
#include "gemm_portable_kernel.h"
#undef T
#undef SUF
#undef V
#undef VL
#undef MR
#undef NR
#define T double
#define SUF f64
#define V v4d
#define VL 4
#define MR 6
#define NR 8
#include "gemm_portable_kernel.h"
#undef T
#undef SUF
#undef V
#undef VL
#undef MR
#undef NR

#ifdef TG_X86_KERNELS
/* ---- AVX-512 kernels: 12 x 32 f32 / 12 x 16 f64, 24 zmm accumulators ---------------------- */
/* The body is instantiated twice per ISA: A packed k-major (a[k * MR + r]) and A read in place
 * from MR rows of a row-major matrix (a[r * rsa + k]: no packing). Rows are addressed from four
 * base pointers (rows 0, 3, 6, 9) plus 0, 1 or 2 row strides, so every broadcast is one load
 * with a base + index * scale address whatever rsa is. */
#define T float
#define SUF f32
#define ISA avx512
#define VT __m512
#define VL 16
#define MR 12
#define NV 2
#define LOADU _mm512_loadu_ps
#define STOREU _mm512_storeu_ps
#define SET1 _mm512_set1_ps
#define ZERO _mm512_setzero_ps
#define FMA _mm512_fmadd_ps
#define ADD _mm512_add_ps
#define MAX _mm512_max_ps
#define TGT "avx512f,fma"
#include "gemm_x86_kernel.h"
#undef T
#undef SUF
#undef ISA
#undef VT
#undef VL
#undef MR
#undef NV
#undef LOADU
#undef STOREU
#undef SET1
#undef ZERO
#undef FMA
#undef ADD
#undef MAX
#undef TGT
#define T double
#define SUF f64
#define ISA avx512
#define VT __m512d
#define VL 8
#define MR 12
#define NV 2
#define LOADU _mm512_loadu_pd
#define STOREU _mm512_storeu_pd
#define SET1 _mm512_set1_pd
#define ZERO _mm512_setzero_pd
#define FMA _mm512_fmadd_pd
#define ADD _mm512_add_pd
#define MAX _mm512_max_pd
#define TGT "avx512f,fma"
#include "gemm_x86_kernel.h"
#undef T
#undef SUF
#undef ISA
#undef VT
#undef VL
#undef MR
#undef NV
#undef LOADU
#undef STOREU
#undef SET1
#undef ZERO
#undef FMA
#undef ADD
#undef MAX
#undef TGT
/* ---- AVX2 kernels: 6 x 16 f32 / 6 x 8 f64, 12 ymm accumulators (16 registers) ------------- */
#define T float
#define SUF f32
#define ISA avx2
#define VT __m256
#define VL 8
#define MR 6
#define NV 2
#define LOADU _mm256_loadu_ps
#define STOREU _mm256_storeu_ps
#define SET1 _mm256_set1_ps
#define ZERO _mm256_setzero_ps
#define FMA _mm256_fmadd_ps
#define ADD _mm256_add_ps
#define MAX _mm256_max_ps
#define TGT "avx2,fma"
#include "gemm_x86_kernel.h"
#undef T
#undef SUF
#undef ISA
#undef VT
#undef VL
#undef MR
#undef NV
#undef LOADU
#undef STOREU
#undef SET1
#undef ZERO
#undef FMA
#undef ADD
#undef MAX
#undef TGT
#define T double
#define SUF f64
#define ISA avx2
#define VT __m256d
#define VL 4
#define MR 6
#define NV 2
#define LOADU _mm256_loadu_pd
#define STOREU _mm256_storeu_pd
#define SET1 _mm256_set1_pd
#define ZERO _mm256_setzero_pd
#define FMA _mm256_fmadd_pd
#define ADD _mm256_add_pd
#define MAX _mm256_max_pd
#define TGT "avx2,fma"
#include "gemm_x86_kernel.h"
#undef T
#undef SUF
#undef ISA
#undef VT
#undef VL
#undef MR
#undef NV
#undef LOADU
#undef STOREU
#undef SET1
#undef ZERO
#undef FMA
#undef ADD
#undef MAX
#undef TGT
#endif

/* The kernel for this CPU: chosen from CPUID on every call (a few loads of libgcc's cached
 * cpu model; no state of ours). MR and NR are the kernel's register block. */
/* A micro-kernel reading A in place: a[r * stride + k] (rows) or a[k * stride + r] (cols). */
typedef void (*skern_f32)(int64_t kc, const float *a, int64_t stride, const float *b,
                          int64_t ldb, float *c, int64_t ldc, int mode, const float *bias);
typedef void (*skern_f64)(int64_t kc, const double *a, int64_t stride, const double *b,
                          int64_t ldb, double *c, int64_t ldc, int mode, const double *bias);

typedef struct {
    int mr, nr;
    kern_f32 kf32;   /* A packed */
    kern_f64 kf64;
    skern_f32 rowsf32, colsf32; /* A in place (NULL: always pack) */
    skern_f64 rowsf64, colsf64;
} kern_set;

static kern_set pick(tg_dtype dt, int isa)
{
    kern_set k = {6, dt == TG_F32 ? 16 : 8, kern_f32_c, kern_f64_c, NULL, NULL, NULL, NULL};
#ifdef TG_X86_KERNELS
    __builtin_cpu_init();
    bool fma = __builtin_cpu_supports("fma");
    if ((isa == TG__ISA_BEST || isa >= TG__ISA_AVX512) && fma && __builtin_cpu_supports("avx512f"))
        k = (kern_set){12, dt == TG_F32 ? 32 : 16, kern_f32_avx512, kern_f64_avx512,
                       rows_f32_avx512, cols_f32_avx512, rows_f64_avx512, cols_f64_avx512};
    else if ((isa == TG__ISA_BEST || isa >= TG__ISA_AVX2) && fma && __builtin_cpu_supports("avx2"))
        k = (kern_set){6, dt == TG_F32 ? 16 : 8, kern_f32_avx2, kern_f64_avx2,
                       rows_f32_avx2, cols_f32_avx2, rows_f64_avx2, cols_f64_avx2};
#endif
    (void)isa;
    return k;
}

int tg__gemm_isa(void)
{
    kern_set k = pick(TG_F32, TG__ISA_BEST);
    return k.rowsf32 == NULL    ? TG__ISA_PORTABLE
           : k.mr == 12         ? TG__ISA_AVX512
                                : TG__ISA_AVX2;
}

/* Per-thread workspace for products with at most `n` columns and `k` inner steps: the packed
 * B block (min(k, KC) x min(n rounded up to NR_MAX, NC)), one packed A strip and an edge tile.
 * Sized by the shapes, so small products (tiny models, attention blocks) take little. */
static int64_t ws_kc(tg_dtype dt, int64_t k)
{
    int64_t kc = dt == TG_F32 ? KC32 : KC64;
    return k < 1 ? 1 : k < kc ? k : kc;
}
static int64_t ws_nc(tg_dtype dt, int64_t n)
{
    int64_t nc = dt == TG_F32 ? NC32 : NC64, r = (n + NR_MAX - 1) / NR_MAX * NR_MAX;
    return r < NR_MAX ? NR_MAX : r < nc ? r : nc;
}
static size_t per_thread_bytes(tg_dtype dt, int64_t n, int64_t k)
{
    size_t kc = (size_t)ws_kc(dt, k), nc = (size_t)ws_nc(dt, n);
    size_t elems = kc * nc + MR_MAX * kc + MR_MAX * NR_MAX;
    return (elems * tg_dtype_size(dt) + 63) / 64 * 64;
}

size_t tg__gemm_ws_bytes_nk(tg_dtype dt, int nt, int64_t n, int64_t k)
{
    return per_thread_bytes(dt, n, k) * (size_t)(nt > 0 ? nt : 1);
}

size_t tg__gemm_ws_bytes(tg_dtype dt, int nt)
{
    return tg__gemm_ws_bytes_nk(dt, nt, INT64_MAX / 2, INT64_MAX / 2);
}

void tg__gemm_plan_make(tg__gemm_plan *p, tg__govs *govs, int nt, int64_t M, int64_t N, int64_t K,
                        int mr, int nr, int64_t kc, int64_t nc, double flops, double per_thread,
                        double gov_flops)
{
    memset(p, 0, sizeof *p);
    int64_t panels = (N + nr - 1) / nr, strips = (M + mr - 1) / mr;
    p->n = N;
    p->nr = nr;
    int nth = tg__threads_for(nt, flops, per_thread);
    /* Few rows: groups of `cw` column panels (fixed by N), each one task over every row
     * and all of K on the thread that takes it, packing its own op(B) columns (or reading
     * them in place). */
    int64_t cw = (panels + TG_PAR_CHUNKS - 1) / TG_PAR_CHUNKS;
    cw = cw < 4 ? 4 : cw;
    int64_t groups = (panels + cw - 1) / cw;
    if (strips < 8 && groups < nth)
        nth = (int)groups;
    if (nth > 1)
        p->gov = tg__gov_at(govs, "gemm", tg__gemm_gov_class(gov_flops));
    p->nth = tg__gov_threads(p->gov, nth);
    p->columns = strips < 8;
    p->cw = cw;
    p->groups = groups;
    /* Row groups of whole strips, at most TG__SCHED_MAX_ROWS of them (fixed by M). */
    int64_t spg = (strips + TG__SCHED_MAX_ROWS - 1) / TG__SCHED_MAX_ROWS;
    int64_t nkb = K > 0 ? (K + kc - 1) / kc : 1, ncb = (N + nc - 1) / nc;
    int64_t bpanels = ((N < nc ? N : nc) + nr - 1) / nr;
    p->nkb = nkb;
    p->rows = spg * mr;
    p->ppt = TG__GEMM_PANELS_PER_PACK;
    p->sched.nb = ncb * nkb;
    p->sched.np = (bpanels + p->ppt - 1) / p->ppt;
    p->sched.nr = (strips + spg - 1) / spg;
    p->sched.gov = p->gov;
}

void tg__gemm_run_columns(const tg__gemm_plan *p,
                          void (*part)(void *arg, int64_t n0, int64_t n1, int thread), void *arg)
{
    tg__par_loop l;
    tg__loop_init(&l, p->groups);
    int64_t step = p->cw * p->nr;
    TG__PRAGMA(omp parallel num_threads(p->nth))
    {
        int me = TG_THREAD_NUM();
        for (int64_t gi; (gi = tg__loop_next(&l, me)) >= 0;) {
            int64_t n0 = gi * step, n1 = (gi + 1) * step;
            part(arg, n0, n1 < p->n ? n1 : p->n, me);
        }
    }
    tg__gov_report(p->gov, &l.acct, p->groups);
}

static double gelu(double v) { return 0.5 * v * (1.0 + erf(v * 0.70710678118654752440)); }

#ifdef TG_X86_KERNELS
/* 16 x 16 f32 transpose in registers (row i of the result = column i of the input): unpack,
 * shuffle within 128-bit lanes, then two rounds of 128-bit lane shuffles. */
__attribute__((target("avx512f"), always_inline)) static inline void tr16_f32(__m512 r[16])
{
    __m512 t[16];
    for (int i = 0; i < 8; i++) {
        t[2 * i] = _mm512_unpacklo_ps(r[2 * i], r[2 * i + 1]);
        t[2 * i + 1] = _mm512_unpackhi_ps(r[2 * i], r[2 * i + 1]);
    }
    for (int i = 0; i < 4; i++) {
        r[4 * i + 0] = _mm512_shuffle_ps(t[4 * i], t[4 * i + 2], _MM_SHUFFLE(1, 0, 1, 0));
        r[4 * i + 1] = _mm512_shuffle_ps(t[4 * i], t[4 * i + 2], _MM_SHUFFLE(3, 2, 3, 2));
        r[4 * i + 2] = _mm512_shuffle_ps(t[4 * i + 1], t[4 * i + 3], _MM_SHUFFLE(1, 0, 1, 0));
        r[4 * i + 3] = _mm512_shuffle_ps(t[4 * i + 1], t[4 * i + 3], _MM_SHUFFLE(3, 2, 3, 2));
    }
    for (int i = 0; i < 4; i++) {
        t[i] = _mm512_shuffle_f32x4(r[i], r[i + 4], 0x88);
        t[i + 4] = _mm512_shuffle_f32x4(r[i], r[i + 4], 0xdd);
        t[i + 8] = _mm512_shuffle_f32x4(r[i + 8], r[i + 12], 0x88);
        t[i + 12] = _mm512_shuffle_f32x4(r[i + 8], r[i + 12], 0xdd);
    }
    for (int i = 0; i < 4; i++) {
        r[i] = _mm512_shuffle_f32x4(t[i], t[i + 8], 0x88);
        r[i + 8] = _mm512_shuffle_f32x4(t[i], t[i + 8], 0xdd);
        r[i + 4] = _mm512_shuffle_f32x4(t[i + 4], t[i + 12], 0x88);
        r[i + 12] = _mm512_shuffle_f32x4(t[i + 4], t[i + 12], 0xdd);
    }
}

/* A full 12-row strip of a row-major A, k-major: apack[k * 12 + r] for k in [0, kc16), kc16 a
 * multiple of 16; rows 12..15 of each transposed block are padding never stored. */
__attribute__((target("avx512f"))) static void pack_a12_f32_avx512(const float *A, int64_t lda,
                                                                    int64_t kc16, float *apack)
{
    for (int64_t kk = 0; kk < kc16; kk += 16) {
        __m512 r[16];
        for (int i = 0; i < 12; i++)
            r[i] = _mm512_loadu_ps(A + i * lda + kk);
        for (int i = 12; i < 16; i++)
            r[i] = _mm512_setzero_ps();
        tr16_f32(r);
        for (int k = 0; k < 16; k++)
            _mm512_mask_storeu_ps(apack + (kk + k) * 12, 0x0FFF, r[k]);
    }
}

/* A full 32-column panel of op(B) = B^T (B stored (N, K) row-major), k-major: dst[k * 32 + j]
 * for k in [0, kc16), kc16 a multiple of 16. */
__attribute__((target("avx512f"))) static void pack_bt32_f32_avx512(const float *B, int64_t ldb,
                                                                    int64_t kc16, float *dst)
{
    for (int64_t jj = 0; jj < 32; jj += 16)
        for (int64_t kk = 0; kk < kc16; kk += 16) {
            __m512 r[16];
            for (int i = 0; i < 16; i++)
                r[i] = _mm512_loadu_ps(B + (jj + i) * ldb + kk);
            tr16_f32(r);
            for (int k = 0; k < 16; k++)
                _mm512_storeu_ps(dst + (kk + k) * 32 + jj, r[k]);
        }
}
#endif

/* AVX-512 transposing packs for f32 when the kernel is the AVX-512 one (MR 12, NR 32); they
 * return how many k (a multiple of 16) they packed, the generic loops do the rest. */
static int64_t fast_pack_a_f32(const float *A, int64_t lda, int64_t kc, int MR, float *apack)
{
#ifdef TG_X86_KERNELS
    if (MR == 12) {
        int64_t kc16 = kc / 16 * 16;
        pack_a12_f32_avx512(A, lda, kc16, apack);
        return kc16;
    }
#endif
    (void)A, (void)lda, (void)kc, (void)MR, (void)apack;
    return 0;
}
static int64_t fast_pack_a_f64(const double *A, int64_t lda, int64_t kc, int MR, double *ap)
{
    (void)A, (void)lda, (void)kc, (void)MR, (void)ap;
    return 0;
}
static int64_t fast_pack_bt_f32(const float *B, int64_t ldb, int64_t kc, int NR, float *dst)
{
#ifdef TG_X86_KERNELS
    if (NR == 32) {
        int64_t kc16 = kc / 16 * 16;
        pack_bt32_f32_avx512(B, ldb, kc16, dst);
        return kc16;
    }
#endif
    (void)B, (void)ldb, (void)kc, (void)NR, (void)dst;
    return 0;
}
static int64_t fast_pack_bt_f64(const double *B, int64_t ldb, int64_t kc, int NR, double *dst)
{
    (void)B, (void)ldb, (void)kc, (void)NR, (void)dst;
    return 0;
}

/* Pack op(B)[k0:k0+kc, j0:j0+nc] as panels of NR columns (panel p: kc rows of NR, k-major),
 * zero padded. B^T is read in blocks of 8 stored rows x 8 k so that each load and each store
 * touches one cache line of a few (the naive transposing loop was a strided-store stream). */
#define T float
#define SUF f32
#include "gemm_pack_kernel.h"
#undef T
#undef SUF
#define T double
#define SUF f64
#include "gemm_pack_kernel.h"
#undef T
#undef SUF

/* Row strips [m0, m1) of C over one block of the product: columns [j0, j0 + nc), the K chunk
 * [k0, k0 + kc). op(B)'s block is packed at bpack (panel p at bpack + p * kc * NR); with
 * bdirect, full panels of a row-major op(B) are read in place instead. apack (MR_MAX x kc) and
 * edge (MR_MAX x NR_MAX) are the calling thread's own. */
#define T float
#define SUF f32
#define KC KC32
#define NC NC32
#include "gemm_part_kernel.h"
#undef T
#undef SUF
#undef KC
#undef NC
#define T double
#define SUF f64
#define KC KC64
#define NC NC64
#include "gemm_part_kernel.h"
#undef T
#undef SUF
#undef KC
#undef NC
