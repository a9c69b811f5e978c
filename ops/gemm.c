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

#define DEFINE_PORTABLE(T, SUF, V, VL, MR, NR)                                                 \
    static void kern_##SUF##_c(int64_t kc, const T *a, const T *b, int64_t ldb, T *c,          \
                               int64_t ldc, int mode, const T *bias)                           \
    {                                                                                          \
        enum { NV = NR / VL };                                                                 \
        V acc[MR][NV];                                                                         \
        for (int r = 0; r < MR; r++)                                                           \
            for (int v = 0; v < NV; v++) {                                                     \
                if (mode & MK_BIAS)                                                            \
                    __builtin_memcpy(&acc[r][v], bias + v * VL, sizeof(V));                    \
                else                                                                           \
                    acc[r][v] = (V){0};                                                        \
            }                                                                                  \
        for (int64_t k = 0; k < kc; k++) {                                                     \
            V bv[NV];                                                                          \
            for (int v = 0; v < NV; v++)                                                       \
                __builtin_memcpy(&bv[v], b + k * ldb + v * VL, sizeof(V));                     \
            for (int r = 0; r < MR; r++) {                                                     \
                V av = (V){0} + a[k * MR + r];                                                 \
                for (int v = 0; v < NV; v++)                                                   \
                    acc[r][v] += av * bv[v];                                                   \
            }                                                                                  \
        }                                                                                      \
        for (int r = 0; r < MR; r++)                                                           \
            for (int v = 0; v < NV; v++) {                                                     \
                T *o = c + r * ldc + v * VL;                                                   \
                if (mode & MK_LOAD) {                                                          \
                    V cv;                                                                      \
                    __builtin_memcpy(&cv, o, sizeof(V));                                       \
                    acc[r][v] = cv + acc[r][v];                                                \
                }                                                                              \
                __builtin_memcpy(o, &acc[r][v], sizeof(V));                                    \
                if (mode & MK_RELU)                                                            \
                    for (int j = 0; j < VL; j++)                                               \
                        o[j] = o[j] > 0 ? o[j] : (o[j] != o[j] ? o[j] : 0);                    \
            }                                                                                  \
    }
DEFINE_PORTABLE(float, f32, v8f, 8, 6, 16)
DEFINE_PORTABLE(double, f64, v4d, 4, 6, 8)

#ifdef TG_X86_KERNELS
/* ---- AVX-512 kernels: 12 x 32 f32 / 12 x 16 f64, 24 zmm accumulators ---------------------- */
/* The body is instantiated twice per ISA: A packed k-major (a[k * MR + r]) and A read in place
 * from MR rows of a row-major matrix (a[r * rsa + k]: no packing). Rows are addressed from four
 * base pointers (rows 0, 3, 6, 9) plus 0, 1 or 2 row strides, so every broadcast is one load
 * with a base + index * scale address whatever rsa is. */
#define DEFINE_X86(T, SUF, ISA, VT, VL, MR, NV, LOADU, STOREU, SET1, ZERO, FMA, ADD, MAX, TGT)   \
    __attribute__((target(TGT), always_inline)) static inline void body_##SUF##_##ISA(          \
        int64_t kc, const T *a, int64_t rsa, int64_t csa, const T *b, int64_t ldb, T *c,        \
        int64_t ldc, int mode, const T *bias)                                                   \
    {                                                                                           \
        VT acc[MR][NV];                                                                         \
        _Pragma("GCC unroll 16") for (int r = 0; r < MR; r++)                                   \
            _Pragma("GCC unroll 4") for (int v = 0; v < NV; v++)                                \
                acc[r][v] = (mode & MK_BIAS) ? LOADU(bias + v * VL) : ZERO();                   \
        const T *base[4] = {a, a + (MR > 3 ? 3 : 0) * rsa, a + (MR > 6 ? 6 : 0) * rsa,         \
                            a + (MR > 9 ? 9 : 0) * rsa};                                        \
        _Pragma("GCC unroll 4") for (int64_t k = 0; k < kc; k++) {                                                    \
            VT bv[NV];                                                                          \
            _Pragma("GCC unroll 4") for (int v = 0; v < NV; v++)                                \
                bv[v] = LOADU(b + k * ldb + v * VL);                                            \
            _Pragma("GCC unroll 16") for (int r = 0; r < MR; r++) {                             \
                VT av = SET1(base[r / 3][(r % 3) * rsa + k * csa]);                              \
                _Pragma("GCC unroll 4") for (int v = 0; v < NV; v++)                            \
                    acc[r][v] = FMA(av, bv[v], acc[r][v]);                                      \
            }                                                                                   \
        }                                                                                       \
        if (mode & MK_LOAD) {                                                                   \
            _Pragma("GCC unroll 16") for (int r = 0; r < MR; r++)                               \
                _Pragma("GCC unroll 4") for (int v = 0; v < NV; v++)                            \
                    acc[r][v] = ADD(LOADU(c + r * ldc + v * VL), acc[r][v]);                    \
        }                                                                                       \
        if (mode & MK_RELU) {                                                                   \
            _Pragma("GCC unroll 16") for (int r = 0; r < MR; r++)                               \
                _Pragma("GCC unroll 4") for (int v = 0; v < NV; v++)                            \
                    acc[r][v] = ADD(MAX(ZERO(), acc[r][v]), ZERO()); /* as tg_relu: NaN     \
                                                                        stays, -0 gives +0 */   \
        }                                                                                       \
        _Pragma("GCC unroll 16") for (int r = 0; r < MR; r++)                                   \
            _Pragma("GCC unroll 4") for (int v = 0; v < NV; v++)                                \
                STOREU(c + r * ldc + v * VL, acc[r][v]);                                        \
    }                                                                                           \
    __attribute__((target(TGT))) static void kern_##SUF##_##ISA(                                 \
        int64_t kc, const T *a, const T *b, int64_t ldb, T *c, int64_t ldc, int mode,           \
        const T *bias)                                                                          \
    {                                                                                           \
        body_##SUF##_##ISA(kc, a, 1, MR, b, ldb, c, ldc, mode, bias);                           \
    }                                                                                           \
    __attribute__((target(TGT))) static void rows_##SUF##_##ISA(                                 \
        int64_t kc, const T *a, int64_t rsa, const T *b, int64_t ldb, T *c, int64_t ldc,        \
        int mode, const T *bias)                                                                \
    {                                                                                           \
        body_##SUF##_##ISA(kc, a, rsa, 1, b, ldb, c, ldc, mode, bias);                          \
    }                                                                                           \
    __attribute__((target(TGT))) static void cols_##SUF##_##ISA(                                 \
        int64_t kc, const T *a, int64_t csa, const T *b, int64_t ldb, T *c, int64_t ldc,        \
        int mode, const T *bias)                                                                \
    {                                                                                           \
        body_##SUF##_##ISA(kc, a, 1, csa, b, ldb, c, ldc, mode, bias);                          \
    }
DEFINE_X86(float, f32, avx512, __m512, 16, 12, 2, _mm512_loadu_ps, _mm512_storeu_ps,
           _mm512_set1_ps, _mm512_setzero_ps, _mm512_fmadd_ps, _mm512_add_ps, _mm512_max_ps, "avx512f,fma")
DEFINE_X86(double, f64, avx512, __m512d, 8, 12, 2, _mm512_loadu_pd, _mm512_storeu_pd,
           _mm512_set1_pd, _mm512_setzero_pd, _mm512_fmadd_pd, _mm512_add_pd, _mm512_max_pd, "avx512f,fma")
/* ---- AVX2 kernels: 6 x 16 f32 / 6 x 8 f64, 12 ymm accumulators (16 registers) ------------- */
DEFINE_X86(float, f32, avx2, __m256, 8, 6, 2, _mm256_loadu_ps, _mm256_storeu_ps,
           _mm256_set1_ps, _mm256_setzero_ps, _mm256_fmadd_ps, _mm256_add_ps, _mm256_max_ps, "avx2,fma")
DEFINE_X86(double, f64, avx2, __m256d, 4, 6, 2, _mm256_loadu_pd, _mm256_storeu_pd,
           _mm256_set1_pd, _mm256_setzero_pd, _mm256_fmadd_pd, _mm256_add_pd, _mm256_max_pd, "avx2,fma")
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
#define DEFINE_PACK(T, SUF)                                                                     \
    __attribute__((noinline)) static void pack_b_##SUF(bool tb, const T *B, int64_t ldb,        \
                                                       int64_t k0, int64_t kc, int64_t j0,      \
                                                       int64_t nc, int NR, bool skip_full,      \
                                                       T *bpack)                                \
    {                                                                                           \
        int64_t npanels = (nc + NR - 1) / NR;                                                   \
        for (int64_t p = 0; p < npanels; p++) {                                                 \
            T *dst = bpack + p * kc * NR;                                                       \
            if (skip_full && !tb && nc - p * NR >= NR)                                          \
                continue; /* read in place */                                                   \
            int64_t jb = j0 + p * NR, w = nc - p * NR < NR ? nc - p * NR : NR;                  \
            if (!tb) {                                                                          \
                for (int64_t k = 0; k < kc; k++) {                                              \
                    const T *src = B + (k0 + k) * ldb + jb;                                     \
                    T *d = dst + k * NR;                                                        \
                    if (w == NR && NR == 32) /* constant sizes: inlined moves */                \
                        memcpy(d, src, sizeof(T) * 32);                                         \
                    else if (w == NR && NR == 16)                                               \
                        memcpy(d, src, sizeof(T) * 16);                                         \
                    else if (w == NR)                                                           \
                        memcpy(d, src, sizeof(T) * (size_t)NR);                                 \
                    else                                                                        \
                        for (int64_t j = 0; j < NR; j++)                                        \
                            d[j] = j < w ? src[j] : 0;                                          \
                }                                                                               \
                continue;                                                                       \
            }                                                                                   \
            /* op(B) = B^T: dst[k * NR + j] = B[(jb + j) * ldb + k0 + k] */                     \
            int64_t kf = w == NR ? fast_pack_bt_##SUF(B + jb * ldb + k0, ldb, kc, NR, dst) : 0;  \
            for (int64_t jj = 0; jj < NR; jj += 8) {                                            \
                int64_t jw = w - jj < 8 ? (w - jj > 0 ? w - jj : 0) : 8;                         \
                for (int64_t kk = kf; kk < kc; kk += 8) {                                       \
                    int64_t kw = kc - kk < 8 ? kc - kk : 8;                                     \
                    T blk[8][8];                                                                \
                    for (int64_t j = 0; j < 8; j++)                                             \
                        for (int64_t k = 0; k < 8; k++)                                         \
                            blk[k][j] = j < jw && k < kw                                        \
                                            ? B[(jb + jj + j) * ldb + k0 + kk + k] : 0;        \
                    for (int64_t k = 0; k < kw; k++)                                            \
                        memcpy(dst + (kk + k) * NR + jj, blk[k], sizeof(T) * 8);                \
                }                                                                               \
            }                                                                                   \
        }                                                                                       \
    }                                                                                           \
    /* Pack op(A)[ib:ib+h, k0:k0+kc] k-major (apack[k * MR + r]), zero padded to MR rows. */   \
    __attribute__((noinline)) static void pack_a_##SUF(bool ta, const T *A, int64_t lda, int64_t ib, int64_t h,           \
                             int64_t k0, int64_t kc, int MR, T *apack)                          \
    {                                                                                           \
        if (ta) { /* rows of the strip are contiguous in each stored row k */                  \
            for (int64_t k = 0; k < kc; k++) {                                                  \
                const T *src = A + (k0 + k) * lda + ib;                                         \
                T *d = apack + k * MR;                                                          \
                if (h == 12 && MR == 12)                                                        \
                    memcpy(d, src, sizeof(T) * 12);                                             \
                else if (h == 6 && MR == 6)                                                     \
                    memcpy(d, src, sizeof(T) * 6);                                              \
                else                                                                            \
                    for (int64_t r = 0; r < MR; r++)                                            \
                        d[r] = r < h ? src[r] : 0;                                              \
            }                                                                                   \
            return;                                                                             \
        }                                                                                       \
        int64_t kf = h == MR ? fast_pack_a_##SUF(A + ib * lda + k0, lda, kc, MR, apack) : 0;    \
        for (int64_t kk = kf; kk < kc; kk += 8) {                                               \
            int64_t kw = kc - kk < 8 ? kc - kk : 8;                                             \
            T blk[8][MR_MAX];                                                                   \
            for (int64_t r = 0; r < MR; r++)                                                    \
                for (int64_t k = 0; k < 8; k++)                                                 \
                    blk[k][r] = r < h && k < kw ? A[(ib + r) * lda + k0 + kk + k] : 0;          \
            for (int64_t k = 0; k < kw; k++) { /* constant sizes: inlined moves */              \
                if (MR == 12)                                                                   \
                    memcpy(apack + (kk + k) * 12, blk[k], sizeof(T) * 12);                      \
                else if (MR == 6)                                                               \
                    memcpy(apack + (kk + k) * 6, blk[k], sizeof(T) * 6);                        \
                else                                                                            \
                    memcpy(apack + (kk + k) * MR, blk[k], sizeof(T) * (size_t)MR);              \
            }                                                                                   \
        }                                                                                       \
    }
DEFINE_PACK(float, f32)
DEFINE_PACK(double, f64)

/* Row strips [m0, m1) of C over one block of the product: columns [j0, j0 + nc), the K chunk
 * [k0, k0 + kc). op(B)'s block is packed at bpack (panel p at bpack + p * kc * NR); with
 * bdirect, full panels of a row-major op(B) are read in place instead. apack (MR_MAX x kc) and
 * edge (MR_MAX x NR_MAX) are the calling thread's own. */
#define DEFINE_PART(T, SUF, KC, NC)                                                                 \
    static void block_rows_##SUF(const kern_set *ks, bool ta, int64_t m0, int64_t m1,               \
                                 int64_t j0, int64_t nc, int64_t k0, int64_t kc, int64_t K,         \
                                 const T *A, int64_t lda, const T *B, int64_t ldb,                  \
                                 const T *bpack, bool bdirect, T *C, int64_t ldc, bool acc,         \
                                 const tg__gemm_epi *epi, T *apack, T *edge)                        \
    {                                                                                               \
        const int MR = ks->mr, NR = ks->nr;                                                         \
        const T *bias = epi ? (const T *)epi->bias : NULL;                                          \
        int act = epi ? epi->act : TG__EPI_NONE;                                                    \
        T *pre = epi ? (T *)epi->pre : NULL;                                                        \
        bool first = k0 == 0, last = k0 + kc >= K;                                                  \
        int64_t npanels = (nc + NR - 1) / NR;                                                       \
        for (int64_t ib = m0; ib < m1; ib += MR) {                                                  \
            int64_t h = m1 - ib < MR ? m1 - ib : MR;                                                \
            /* With few column panels to amortise packing over, a full strip is read in place (a    \
             * short-lived stream); otherwise, and for an edge strip (zero padded), it is packed    \
             * into a contiguous k-major strip that stays in L1 (in place, rows a multiple of       \
             * 4 KiB apart fight over L1 sets). */                                                  \
            skern_##SUF sk = h < MR || npanels >= 8 ? NULL : ta ? ks->cols##SUF : ks->rows##SUF;    \
            const T *astrip = ta ? A + k0 * lda + ib : A + ib * lda + k0;                           \
            if (!sk)                                                                                \
                pack_a_##SUF(ta, A, lda, ib, h, k0, kc, MR, apack);                                 \
            for (int64_t p = 0; p < npanels; p++) {                                                 \
                int64_t jb = j0 + p * NR, w = nc - p * NR < NR ? nc - p * NR : NR;                  \
                int mode = (!first || acc) ? MK_LOAD : bias ? MK_BIAS : 0;                          \
                if (last && act == TG__EPI_RELU && !pre)                                            \
                    mode |= MK_RELU;                                                                \
                T *c = C + ib * ldc + jb;                                                           \
                const T *bp = bpack + p * kc * NR;                                                  \
                int64_t bld = NR;                                                                   \
                if (bdirect && w == NR) {                                                           \
                    bp = B + k0 * ldb + jb;                                                         \
                    bld = ldb;                                                                      \
                }                                                                                   \
                const T *bj = bias ? bias + jb : NULL;                                              \
                if (h == MR && w == NR) {                                                           \
                    if (sk)                                                                         \
                        sk(kc, astrip, lda, bp, bld, c, ldc, mode, bj);                             \
                    else                                                                            \
                        ks->k##SUF(kc, apack, bp, bld, c, ldc, mode, bj);                           \
                } else { /* edge block: through a zero-padded MR x NR tile */                       \
                    T bz[NR_MAX];                                                                   \
                    for (int64_t j = 0; j < NR; j++)                                                \
                        bz[j] = bj && j < w ? bj[j] : 0;                                            \
                    for (int64_t r = 0; r < MR; r++)                                                \
                        for (int64_t j = 0; j < NR; j++)                                            \
                            edge[r * NR + j] = (mode & MK_LOAD) && r < h && j < w                   \
                                                   ? c[r * ldc + j] : 0;                            \
                    if (sk)                                                                         \
                        sk(kc, astrip, lda, bp, bld, edge, NR, mode, bz);                           \
                    else                                                                            \
                        ks->k##SUF(kc, apack, bp, bld, edge, NR, mode, bz);                         \
                    for (int64_t r = 0; r < h; r++)                                                 \
                        memcpy(c + r * ldc, edge + r * NR, sizeof(T) * (size_t)w);                  \
                }                                                                                   \
                if (last && (pre || act == TG__EPI_GELU)) {                                         \
                    for (int64_t r = 0; r < h; r++) {                                               \
                        T *cr = c + r * ldc;                                                        \
                        T *pr = pre ? pre + (ib + r) * ldc + jb : NULL;                             \
                        for (int64_t j = 0; j < w; j++) {                                           \
                            T z = cr[j];                                                            \
                            if (pr)                                                                 \
                                pr[j] = z;                                                          \
                            cr[j] = act == TG__EPI_GELU ? (T)gelu((double)z)                        \
                                    : act == TG__EPI_RELU ? (z > 0 ? z : (z != z ? z : 0))          \
                                                          : z;                                      \
                        }                                                                           \
                    }                                                                               \
                }                                                                                   \
            }                                                                                       \
        }                                                                                           \
    }                                                                                               \
    /* A rectangle of C on the calling thread: rows [m0, m1), columns [n0, n1), all of K; for       \
     * each (column block, K chunk) it packs that slice of op(B) once into its own workspace and    \
     * runs every row strip over it. */                                                             \
    static void part_##SUF(const kern_set *ks, bool ta, bool tb, int64_t m0, int64_t m1,            \
                           int64_t n0, int64_t n1, int64_t K, const T *A, int64_t lda,              \
                           const T *B, int64_t ldb, T *C, int64_t ldc, bool acc,                    \
                           const tg__gemm_epi *epi, T *work)                                        \
    {                                                                                               \
        const int MR = ks->mr, NR = ks->nr;                                                         \
        tg_dtype dt_ = sizeof(T) == 4 ? TG_F32 : TG_F64;                                            \
        int64_t kcap = ws_kc(dt_, K), ncap = ws_nc(dt_, n1 - n0);                                   \
        T *bpack = work, *apack = work + kcap * ncap, *edge = apack + MR_MAX * kcap;                \
        /* Few row strips to reuse it: full panels of a row-major op(B) are read in place (the      \
         * kernel takes B's row stride); only the edge panel is packed. */                          \
        bool bdirect = !tb && m1 - m0 <= 4 * (int64_t)MR;                                           \
        for (int64_t j0 = n0; j0 < n1; j0 += NC) {                                                  \
            int64_t nc = n1 - j0 < NC ? n1 - j0 : NC;                                               \
            for (int64_t k0 = 0; k0 < K || k0 == 0; k0 += KC) {                                     \
                int64_t kc = K - k0 < KC ? K - k0 : KC;                                             \
                pack_b_##SUF(tb, B, ldb, k0, kc, j0, nc, NR, bdirect, bpack);                       \
                block_rows_##SUF(ks, ta, m0, m1, j0, nc, k0, kc, K, A, lda, B, ldb, bpack,          \
                                 bdirect, C, ldc, acc, epi, apack, edge);                           \
                if (K == 0)                                                                         \
                    break;                                                                          \
            }                                                                                       \
        }                                                                                           \
    }                                                                                               \
    /* The shared-B schedule (src/core/par.h): blocks b = (column block b / nkb, K chunk            \
     * b % nkb); op(B)'s block is packed into the B area of workspace slice 0 or 1 by pack tasks    \
     * of `ppt` panels each, and row groups of `rows` rows run over it; each thread's A strip       \
     * and edge tile are in its own slice. */                                                       \
    typedef struct {                                                                                \
        const kern_set *ks;                                                                         \
        bool ta, tb, acc;                                                                           \
        int64_t M, N, K, lda, ldb, ldc, nkb, rows, ppt, kcap, ncap;                                 \
        const T *A, *B;                                                                             \
        T *C;                                                                                       \
        const tg__gemm_epi *epi;                                                                    \
        char *ws;                                                                                   \
        size_t per;                                                                                 \
    } sched_##SUF;                                                                                  \
    static void sched_block_##SUF(const sched_##SUF *g, int64_t b, int64_t *j0, int64_t *nc,        \
                                  int64_t *k0, int64_t *kc)                                         \
    {                                                                                               \
        *j0 = b / g->nkb * NC;                                                                      \
        *nc = g->N - *j0 < NC ? g->N - *j0 : NC;                                                    \
        *k0 = b % g->nkb * KC;                                                                      \
        *kc = g->K - *k0 < KC ? g->K - *k0 : KC;                                                    \
    }                                                                                               \
    static void sched_pack_##SUF(void *arg, int64_t b, int64_t i, int buf)                          \
    {                                                                                               \
        const sched_##SUF *g = arg;                                                                 \
        const int NR = g->ks->nr;                                                                   \
        int64_t j0, nc, k0, kc;                                                                     \
        sched_block_##SUF(g, b, &j0, &nc, &k0, &kc);                                                \
        int64_t p0 = i * g->ppt;                                                                    \
        if (p0 * NR >= nc)                                                                          \
            return;                                                                                 \
        int64_t w = nc - p0 * NR < g->ppt * NR ? nc - p0 * NR : g->ppt * NR;                        \
        T *bpack = (T *)(void *)(g->ws + (size_t)buf * g->per);                                     \
        pack_b_##SUF(g->tb, g->B, g->ldb, k0, kc, j0 + p0 * NR, w, NR, false,                       \
                     bpack + p0 * kc * NR);                                                         \
    }                                                                                               \
    static void sched_rows_##SUF(void *arg, int64_t b, int64_t r, int buf, int thread)              \
    {                                                                                               \
        const sched_##SUF *g = arg;                                                                 \
        int64_t m0 = r * g->rows, m1 = m0 + g->rows < g->M ? m0 + g->rows : g->M;                   \
        if (m0 >= m1)                                                                               \
            return;                                                                                 \
        int64_t j0, nc, k0, kc;                                                                     \
        sched_block_##SUF(g, b, &j0, &nc, &k0, &kc);                                                \
        const T *bpack = (const T *)(const void *)(g->ws + (size_t)buf * g->per);                   \
        T *apack = (T *)(void *)(g->ws + (size_t)thread * g->per) + g->kcap * g->ncap;              \
        block_rows_##SUF(g->ks, g->ta, m0, m1, j0, nc, k0, kc, g->K, g->A, g->lda, g->B,            \
                         g->ldb, bpack, false, g->C, g->ldc, g->acc, g->epi, apack,                 \
                         apack + MR_MAX * g->kcap);                                                 \
    }                                                                                               \
    void tg__gemm_isa_##SUF(int isa, int nt, bool ta, bool tb, int64_t M, int64_t N, int64_t K,     \
                            const T *A, int64_t lda, const T *B, int64_t ldb, T *C, int64_t ldc,    \
                            bool acc, void *ws, const tg__gemm_epi *epi)                            \
    {                                                                                               \
        if (M <= 0 || N <= 0)                                                                       \
            return;                                                                                 \
        tg_dtype dt_ = sizeof(T) == 4 ? TG_F32 : TG_F64;                                            \
        kern_set ks = pick(dt_, isa);                                                               \
        size_t per = per_thread_bytes(dt_, N, K);                                                   \
        int64_t panels = (N + ks.nr - 1) / ks.nr, strips = (M + ks.mr - 1) / ks.mr;                 \
        /* ws holds nt per-thread slices of at least tg__gemm_ws_bytes_nk(dt, 1, N, K) bytes;       \
         * never a stack buffer (up to 512 KiB) in an OpenMP worker's stack. */                     \
        assert(ws != NULL);                                                                         \
        double flops = 2.0 * (double)M * (double)N * (double)K;                                     \
        tg__par_gov *gov = tg__gemm_gov(flops);                                                     \
        int nth = tg__threads_for(nt, flops, TG_GEMM_FLOPS_PER_THREAD);                             \
        /* Few rows: groups of `cw` column panels (fixed by N), each one task over every row        \
         * and all of K on the thread that takes it, packing its own op(B) columns (or reading      \
         * them in place). */                                                                       \
        int64_t cw = (panels + TG_PAR_CHUNKS - 1) / TG_PAR_CHUNKS;                                  \
        cw = cw < 4 ? 4 : cw;                                                                       \
        int64_t groups = (panels + cw - 1) / cw;                                                    \
        if (strips < 8 && groups < nth)                                                             \
            nth = (int)groups;                                                                      \
        nth = tg__gov_threads(gov, nth);                                                            \
        if (nth == 1) {                                                                             \
            part_##SUF(&ks, ta, tb, 0, M, 0, N, K, A, lda, B, ldb, C, ldc, acc, epi, ws);           \
            return;                                                                                 \
        }                                                                                           \
        if (strips < 8) {                                                                           \
            /* Race-free: a group owns its columns of C. */                                         \
            tg__par_loop l;                                                                         \
            tg__loop_init(&l, groups);                                                              \
            TG__PRAGMA(omp parallel num_threads(nth))                                               \
            {                                                                                       \
                int me = TG_THREAD_NUM();                                                           \
                T *w = (T *)(void *)((char *)ws + (size_t)me * per);                                \
                for (int64_t gi; (gi = tg__loop_next(&l, me)) >= 0;) {                              \
                    int64_t n0 = gi * cw * ks.nr, n1 = (gi + 1) * cw * ks.nr;                       \
                    part_##SUF(&ks, ta, tb, 0, M, n0, n1 < N ? n1 : N, K, A, lda, B, ldb, C,        \
                               ldc, acc, epi, w);                                                   \
                }                                                                                   \
            }                                                                                       \
            tg__gov_report(gov, &l.acct, groups);                                                   \
            return;                                                                                 \
        }                                                                                           \
        /* Row groups of whole strips, at most TG__SCHED_MAX_ROWS of them (fixed by M). */          \
        int64_t spg = (strips + TG__SCHED_MAX_ROWS - 1) / TG__SCHED_MAX_ROWS;                       \
        int64_t nkb = K > 0 ? (K + KC - 1) / KC : 1, ncb = (N + NC - 1) / NC;                       \
        sched_##SUF g = {&ks, ta, tb, acc, M, N, K, lda, ldb, ldc, nkb, spg * ks.mr, 4,             \
                         ws_kc(dt_, K), ws_nc(dt_, N), A, B, C, epi, ws, per};                      \
        int64_t bpanels = ((N < NC ? N : NC) + ks.nr - 1) / ks.nr;                                  \
        tg__sched s = {ncb * nkb, (bpanels + g.ppt - 1) / g.ppt, (strips + spg - 1) / spg,          \
                       sched_pack_##SUF, sched_rows_##SUF, &g, gov};                                \
        tg__sched_run(nth, &s);                                                                     \
    }                                                                                               \
    void tg__gemm_ex_##SUF(int nt, bool ta, bool tb, int64_t M, int64_t N, int64_t K,               \
                           const T *A, int64_t lda, const T *B, int64_t ldb, T *C, int64_t ldc,     \
                           bool acc, void *ws, const tg__gemm_epi *epi)                             \
    {                                                                                               \
        tg__gemm_isa_##SUF(TG__ISA_BEST, nt, ta, tb, M, N, K, A, lda, B, ldb, C, ldc, acc, ws,      \
                           epi);                                                                    \
    }                                                                                               \
    void tg__gemm_##SUF(int nt, bool ta, bool tb, int64_t M, int64_t N, int64_t K, const T *A,      \
                        int64_t lda, const T *B, int64_t ldb, T *C, int64_t ldc, bool acc,          \
                        void *ws)                                                                   \
    {                                                                                               \
        tg__gemm_isa_##SUF(TG__ISA_BEST, nt, ta, tb, M, N, K, A, lda, B, ldb, C, ldc, acc, ws,      \
                           NULL);                                                                   \
    }

DEFINE_PART(float, f32, KC32, NC32)
DEFINE_PART(double, f64, KC64, NC64)
