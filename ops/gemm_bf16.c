/*
 * gemm_bf16.c - matrix products with bf16 operands and f32 accumulation (the compute precision
 * TG_PRECISION_BF16: PyTorch's `fp32_precision = "bf16"`, oneDNN's `fpmath_mode=bf16`).
 *
 * C (M, N) = (acc ? C : 0) + bf16(op(A)) (M, K) . bf16(op(B)) (K, N) in f32, optionally
 * followed by the epilogue of ops/gemm.c (+ bias per column, then ReLU or GELU, the
 * pre-activation kept when asked). bf16(x) rounds an f32 to the nearest bf16 (the upper 16
 * bits of its encoding), ties to even; a NaN stays a (quiet) NaN. Kalamkar et al. 2019
 * (arXiv 1905.12322) for bf16 training with f32 accumulation.
 *
 * Algorithm: ops/gemm.c's blocking (one rectangle of C per thread, columns split first; K in
 * chunks of KC, columns in blocks of NC; op(B)'s block packed once per (chunk, block) and
 * reused for every MR-row strip of op(A)), with the conversion to bf16 folded into the
 * packing: both operands are packed as K-interleaved pairs, element (k, k + 1) of a row of
 * op(A) in one 32-bit word, and of op(B) (k, j), (k + 1, j) side by side, so that the AVX512_BF16
 * micro-kernel's vdpbf16ps multiplies two k per f32 lane per instruction (twice the products
 * of an f32 FMA). An odd K is padded with a zero pair element.
 *
 * Order of operations (determinism): for each K chunk [k0, k0 + KC) an element's chain is
 *   s = init;  for each pair (k, k + 1), k = k0, k0 + 2, ...:  s = s + a_{k+1} b_{k+1};
 *                                                             s = s + a_k b_k
 * (init = bias[j] in the first chunk of a biased epilogue, else 0), then C = C + s (acc or a
 * later chunk) or C = s: vdpbf16ps's order (Intel SDM: the odd product added first). A product
 * of two bf16 is exact in f32, so each step rounds once. The portable kernel (CPUs without
 * AVX512_BF16) computes the same chain with f32 multiplies and adds; the two paths agree to
 * the last bit except where the hardware flushes subnormal inputs or results to zero (vdpbf16ps
 * does; the portable path does not). The result depends neither on the thread count nor on
 * the split.
 */
#include "par.h"
#include "gemm.h"
#include "registry.h"
#include "vec.h"

#include <assert.h>
#include <math.h>

#if defined(__GNUC__) && defined(__x86_64__) /* GCC and clang */
#define TG_X86_BF16 1
#include <immintrin.h>
#endif

/* Blocking: a packed B block of KC x NC bf16 (512 KiB) stays in L2; an A strip (MR x KC bf16)
 * and the B panel being read stay in L1. */
#define KC 512
#define NC 512
#define MR 12
#define NR 32

#define MK_LOAD 1 /* store C + chain (else the chain) */
#define MK_BIAS 2 /* start from bias[j] (first chunk of an epilogue with bias) */
#define MK_RELU 4 /* store max(c, 0) (last chunk of a ReLU epilogue) */


/* One micro-kernel: C[0:MR, 0:NR] (row stride ldc) from a packed A strip (ap[(q MR + r) 2 + e]
 * = bf16 of row r, k = 2q + e) and a B panel (bp[(q NR + j) 2 + e] = bf16 of (2q + e, j)), kp
 * pairs. */
typedef void (*kern_bf16)(int64_t kp, const uint16_t *ap, const uint16_t *bp, float *c,
                          int64_t ldc, int mode, const float *bias);

/* The portable kernel: the chain of the file comment with f32 multiplies and adds. */
static void kern_bf16_c(int64_t kp, const uint16_t *ap, const uint16_t *bp, float *c,
                        int64_t ldc, int mode, const float *bias)
{
    float acc[MR][NR];
    for (int r = 0; r < MR; r++)
        for (int j = 0; j < NR; j++)
            acc[r][j] = (mode & MK_BIAS) ? bias[j] : 0.0f;
    for (int64_t q = 0; q < kp; q++) {
        float b0[NR], b1[NR];
        for (int j = 0; j < NR; j++) {
            b0[j] = tg__bf16_to_f32(bp[(q * NR + j) * 2]);
            b1[j] = tg__bf16_to_f32(bp[(q * NR + j) * 2 + 1]);
        }
        for (int r = 0; r < MR; r++) {
            float a0 = tg__bf16_to_f32(ap[(q * MR + r) * 2]);
            float a1 = tg__bf16_to_f32(ap[(q * MR + r) * 2 + 1]);
            for (int j = 0; j < NR; j++) {
                float p1 = a1 * b1[j], p0 = a0 * b0[j]; /* exact */
                acc[r][j] = acc[r][j] + p1;
                acc[r][j] = acc[r][j] + p0;
            }
        }
    }
    for (int r = 0; r < MR; r++)
        for (int j = 0; j < NR; j++) {
            float v = acc[r][j];
            if (mode & MK_LOAD)
                v = c[r * ldc + j] + v;
            if (mode & MK_RELU)
                v = v > 0 ? v : (v != v ? v : 0.0f);
            c[r * ldc + j] = v;
        }
}

#ifdef TG_X86_BF16
/* The AVX512_BF16 kernel: 12 x 32, 24 zmm accumulators, per pair two B vectors and one
 * broadcast 32-bit pair of A per row. */
__attribute__((target("avx512f,avx512bw,avx512bf16"))) static void
kern_bf16_avx512(int64_t kp, const uint16_t *ap, const uint16_t *bp, float *c, int64_t ldc,
                 int mode, const float *bias)
{
    __m512 acc[MR][2];
    for (int r = 0; r < MR; r++)
        for (int v = 0; v < 2; v++)
            acc[r][v] = (mode & MK_BIAS) ? _mm512_loadu_ps(bias + 16 * v) : _mm512_setzero_ps();
    const int32_t *a32 = (const int32_t *)(const void *)ap;
    for (int64_t q = 0; q < kp; q++) {
        __m512bh b0 = (__m512bh)_mm512_loadu_si512(bp + q * 2 * NR);
        __m512bh b1 = (__m512bh)_mm512_loadu_si512(bp + q * 2 * NR + 32);
        _Pragma("GCC unroll 12") for (int r = 0; r < MR; r++) {
            __m512bh av = (__m512bh)_mm512_set1_epi32(a32[q * MR + r]);
            acc[r][0] = _mm512_dpbf16_ps(acc[r][0], av, b0);
            acc[r][1] = _mm512_dpbf16_ps(acc[r][1], av, b1);
        }
    }
    for (int r = 0; r < MR; r++)
        for (int v = 0; v < 2; v++) {
            __m512 x = acc[r][v];
            if (mode & MK_LOAD)
                x = _mm512_add_ps(_mm512_loadu_ps(c + r * ldc + 16 * v), x);
            if (mode & MK_RELU) /* as tg_relu: NaN stays, -0 gives +0 */
                x = _mm512_add_ps(_mm512_max_ps(_mm512_setzero_ps(), x), _mm512_setzero_ps());
            _mm512_storeu_ps(c + r * ldc + 16 * v, x);
        }
}

/* 16 rounded pairs of a row: f32 x[0..31] -> 32 bf16 in order (x[2i], x[2i+1] one word). */
__attribute__((target("avx512f,avx512bw,avx512bf16"))) static inline __m512i cvt32(const float *x)
{
    /* cvtne2ps_pbh(hi, lo): bf16 of lo in elements 0..15, of hi in 16..31 */
    return (__m512i)_mm512_cvtne2ps_pbh(_mm512_loadu_ps(x + 16), _mm512_loadu_ps(x));
}

/* Transposes the 16 x 16 matrix of 32-bit words whose row j is r[j] (a word here is one bf16
 * pair): 32-bit, then 64-bit interleaves within 128-bit lanes, then two rounds of lane
 * shuffles. */
__attribute__((target("avx512f"))) static inline void tr16x16(__m512i r[16])
{
    __m512i t[16];
    for (int i = 0; i < 8; i++) {
        t[2 * i] = _mm512_unpacklo_epi32(r[2 * i], r[2 * i + 1]);
        t[2 * i + 1] = _mm512_unpackhi_epi32(r[2 * i], r[2 * i + 1]);
    }
    /* r[4i + e], lane L: rows 4i .. 4i + 3 of column 4L + e */
    for (int i = 0; i < 4; i++) {
        r[4 * i] = _mm512_unpacklo_epi64(t[4 * i], t[4 * i + 2]);
        r[4 * i + 1] = _mm512_unpackhi_epi64(t[4 * i], t[4 * i + 2]);
        r[4 * i + 2] = _mm512_unpacklo_epi64(t[4 * i + 1], t[4 * i + 3]);
        r[4 * i + 3] = _mm512_unpackhi_epi64(t[4 * i + 1], t[4 * i + 3]);
    }
    for (int e = 0; e < 4; e++) {
        __m512i u0 = _mm512_shuffle_i32x4(r[e], r[4 + e], 0x44);
        __m512i u1 = _mm512_shuffle_i32x4(r[e], r[4 + e], 0xEE);
        __m512i u2 = _mm512_shuffle_i32x4(r[8 + e], r[12 + e], 0x44);
        __m512i u3 = _mm512_shuffle_i32x4(r[8 + e], r[12 + e], 0xEE);
        t[e] = _mm512_shuffle_i32x4(u0, u2, 0x88);
        t[4 + e] = _mm512_shuffle_i32x4(u0, u2, 0xDD);
        t[8 + e] = _mm512_shuffle_i32x4(u1, u3, 0x88);
        t[12 + e] = _mm512_shuffle_i32x4(u1, u3, 0xDD);
    }
    for (int i = 0; i < 16; i++)
        r[i] = t[i];
}

/* A full panel of op(B) = B^T (B stored (N, K)): the pairs q < 16 floor(kc / 32) of NR
 * columns (each converted row gives 16 pairs; two 16 x 16 word transposes per 16 pairs, in
 * registers);
 * returns how many pairs it packed. */
__attribute__((target("avx512f,avx512bw,avx512bf16"))) static int64_t
pack_bt_full(const float *B, int64_t ldb, int64_t kc, uint16_t *dst)
{
    int64_t q = 0;
    int32_t *d32 = (int32_t *)(void *)dst;
    for (; q + 16 <= kc / 2; q += 16)
        for (int64_t jj = 0; jj < NR; jj += 16) {
            __m512i r[16];
            for (int j = 0; j < 16; j++)
                r[j] = cvt32(B + (jj + j) * ldb + 2 * q);
            tr16x16(r);
            for (int i = 0; i < 16; i++)
                _mm512_storeu_si512(d32 + (q + i) * NR + jj, r[i]);
        }
    return q;
}

/* A full panel of a row-major op(B) (K, N): pair q of columns j..j+15 is rows 2q and 2q + 1
 * converted together and interleaved (one word permute). Returns the pairs packed
 * (floor(kc / 2)). */
__attribute__((target("avx512f,avx512bw,avx512bf16"))) static int64_t
pack_bn_full(const float *B, int64_t ldb, int64_t kc, uint16_t *dst)
{
    /* element 2j of the result is element j of the low half, 2j + 1 element j of the high */
    static const uint16_t inter[32] = {0, 16, 1, 17, 2, 18, 3, 19, 4, 20, 5, 21, 6, 22, 7, 23,
                                       8, 24, 9, 25, 10, 26, 11, 27, 12, 28, 13, 29, 14, 30, 15,
                                       31};
    __m512i idx = _mm512_loadu_si512(inter);
    int64_t q = 0;
    for (; q < kc / 2; q++) {
        const float *r0 = B + 2 * q * ldb, *r1 = r0 + ldb;
        for (int64_t jj = 0; jj < NR; jj += 16) {
            __m512i v = (__m512i)_mm512_cvtne2ps_pbh(_mm512_loadu_ps(r1 + jj),
                                                      _mm512_loadu_ps(r0 + jj));
            _mm512_storeu_si512(dst + (q * NR + jj) * 2, _mm512_permutexvar_epi16(idx, v));
        }
    }
    return q;
}

/* A strip of h <= MR rows of a transposed op(A) (A stored (K, M): the strip's rows of op(A)
 * are h adjacent columns of A; rows h.. zero): pair q is rows 2q and 2q + 1 of A, h elements
 * each, converted together and interleaved (one word permute), as pack_bn_full with MR
 * columns. Returns the pairs packed (floor(kc / 2)). */
__attribute__((target("avx512f,avx512bw,avx512bf16"))) static int64_t
pack_at_full(const float *A, int64_t lda, int64_t kc, int64_t h, uint16_t *apack)
{
    static const uint16_t inter[32] = {0, 16, 1, 17, 2, 18, 3, 19, 4, 20, 5, 21, 6, 22, 7, 23,
                                       8, 24, 9, 25, 10, 26, 11, 27, 12, 28, 13, 29, 14, 30, 15,
                                       31};
    _Static_assert(MR <= 16, "one masked vector per row of A");
    __m512i idx = _mm512_loadu_si512(inter);
    __mmask16 in = (__mmask16)((1u << h) - 1);
    __mmask32 out = (__mmask32)((1u << (2 * MR)) - 1);
    int64_t q = 0;
    for (; q < kc / 2; q++) {
        const float *r0 = A + 2 * q * lda, *r1 = r0 + lda;
        __m512i v = (__m512i)_mm512_cvtne2ps_pbh(_mm512_maskz_loadu_ps(in, r1),
                                                  _mm512_maskz_loadu_ps(in, r0));
        _mm512_mask_storeu_epi16(apack + q * MR * 2, out, _mm512_permutexvar_epi16(idx, v));
    }
    return q;
}

/* A strip of h <= MR rows of a row-major op(A) (rows h.. zero): the pairs q < 16 floor(kc /
 * 32). Returns the pairs packed. */
__attribute__((target("avx512f,avx512bw,avx512bf16"))) static int64_t
pack_a_full(const float *A, int64_t lda, int64_t kc, int64_t h, uint16_t *apack)
{
    int64_t q = 0;
    int32_t *d32 = (int32_t *)(void *)apack;
    for (; q + 16 <= kc / 2; q += 16) {
        __m512i t[16];
        for (int r = 0; r < 16; r++)
            t[r] = r < h ? cvt32(A + r * lda + 2 * q) : _mm512_setzero_si512();
        tr16x16(t);
        for (int i = 0; i < 16; i++)
            _mm512_mask_storeu_epi32(d32 + (q + i) * MR, (__mmask16)((1u << MR) - 1), t[i]);
    }
    return q;
}
#endif

int tg__gemm_bf16_hw(void)
{
#ifdef TG_X86_BF16
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
           __builtin_cpu_supports("avx512bf16");
#else
    return 0;
#endif
}

static double gelu(double v) { return 0.5 * v * (1.0 + erf(v * 0.70710678118654752440)); }

/* Pack op(B)[k0:k0+kc, j0:j0+nc] as panels of NR columns of kp = ceil(kc / 2) pairs, zero
 * padded. */
static void pack_b(bool tb, const float *B, int64_t ldb, int64_t k0, int64_t kc, int64_t j0,
                   int64_t nc, bool hw, uint16_t *bpack)
{
    int64_t kp = (kc + 1) / 2, npanels = (nc + NR - 1) / NR;
    for (int64_t p = 0; p < npanels; p++) {
        uint16_t *dst = bpack + p * kp * 2 * NR;
        int64_t jb = j0 + p * NR, w = nc - p * NR < NR ? nc - p * NR : NR, q = 0;
#ifdef TG_X86_BF16
        /* B^T: rows of B are columns of op(B), pairs contiguous; B: two rows per pair */
        if (hw && w == NR)
            q = tb ? pack_bt_full(B + jb * ldb + k0, ldb, kc, dst)
                   : pack_bn_full(B + k0 * ldb + jb, ldb, kc, dst);
#endif
        (void)hw;
        for (; q < kp; q++)
            for (int64_t j = 0; j < NR; j++)
                for (int e = 0; e < 2; e++) {
                    int64_t k = 2 * q + e;
                    float v = 0;
                    if (k < kc && j < w)
                        v = tb ? B[(jb + j) * ldb + k0 + k] : B[(k0 + k) * ldb + jb + j];
                    dst[(q * NR + j) * 2 + e] = tg__bf16_from_f32(v);
                }
    }
}

/* Pack op(A)[ib:ib+h, k0:k0+kc] as kp pairs of MR rows (rows >= h zero). */
static void pack_a(bool ta, const float *A, int64_t lda, int64_t ib, int64_t h, int64_t k0,
                   int64_t kc, bool hw, uint16_t *apack)
{
    int64_t kp = (kc + 1) / 2, q = 0;
#ifdef TG_X86_BF16
    if (hw)
        q = ta ? pack_at_full(A + k0 * lda + ib, lda, kc, h, apack)
               : pack_a_full(A + ib * lda + k0, lda, kc, h, apack);
#endif
    (void)hw;
    for (; q < kp; q++)
        for (int64_t r = 0; r < MR; r++)
            for (int e = 0; e < 2; e++) {
                int64_t k = 2 * q + e;
                float v = 0;
                if (k < kc && r < h)
                    v = ta ? A[(k0 + k) * lda + ib + r] : A[(ib + r) * lda + k0 + k];
                apack[(q * MR + r) * 2 + e] = tg__bf16_from_f32(v);
            }
}

/* Per-thread workspace: the packed B block, one A strip, an edge tile (bytes, 64-aligned). */
static size_t per_thread(int64_t n, int64_t k)
{
    int64_t kc = k < 1 ? 1 : k < KC ? k : KC, kp = (kc + 1) / 2;
    int64_t nc = (n + NR - 1) / NR * NR;
    nc = nc < NR ? NR : nc < NC ? nc : NC;
    size_t bytes = (size_t)(kp * 2 * nc + kp * 2 * MR) * sizeof(uint16_t) +
                   (size_t)(MR * NR) * sizeof(float) + 64;
    return (bytes + 63) / 64 * 64;
}

size_t tg__gemm_bf16_ws_bytes_nk(int nt, int64_t n, int64_t k)
{
    return per_thread(n, k) * (size_t)(nt > 0 ? nt : 1);
}

/* Row strips [m0, m1) of C over one block: columns [j0, j0 + nc), the K chunk [k0, k0 + kc),
 * op(B)'s block packed at bpack (panel p at bpack + p * kp * 2 * NR). apack and edge are the
 * calling thread's own. */
static void block_rows(kern_bf16 kern, bool hw, bool ta, int64_t m0, int64_t m1, int64_t j0,
                       int64_t nc, int64_t k0, int64_t kc, int64_t K, const float *A,
                       int64_t lda, const uint16_t *bpack, float *C, int64_t ldc, bool acc,
                       const tg__gemm_epi *epi, uint16_t *apack, float *edge)
{
    const float *bias = epi ? (const float *)epi->bias : NULL;
    int act = epi ? epi->act : TG__EPI_NONE;
    float *pre = epi ? (float *)epi->pre : NULL;
    int64_t kp = (kc + 1) / 2, npanels = (nc + NR - 1) / NR;
    bool first = k0 == 0, last = k0 + kc >= K;
    for (int64_t ib = m0; ib < m1; ib += MR) {
        int64_t h = m1 - ib < MR ? m1 - ib : MR;
        pack_a(ta, A, lda, ib, h, k0, kc, hw, apack);
        for (int64_t p = 0; p < npanels; p++) {
            int64_t jb = j0 + p * NR, w = nc - p * NR < NR ? nc - p * NR : NR;
            int mode = (!first || acc) ? MK_LOAD : bias ? MK_BIAS : 0;
            if (last && act == TG__EPI_RELU && !pre)
                mode |= MK_RELU;
            float *c = C + ib * ldc + jb;
            const uint16_t *bp = bpack + p * kp * 2 * NR;
            const float *bj = bias ? bias + jb : NULL;
            if (h == MR && w == NR) {
                kern(kp, apack, bp, c, ldc, mode, bj);
            } else { /* edge block: through a zero-padded MR x NR tile */
                float bz[NR];
                for (int64_t j = 0; j < NR; j++)
                    bz[j] = bj && j < w ? bj[j] : 0;
                for (int64_t r = 0; r < MR; r++)
                    for (int64_t j = 0; j < NR; j++)
                        edge[r * NR + j] =
                            (mode & MK_LOAD) && r < h && j < w ? c[r * ldc + j] : 0;
                kern(kp, apack, bp, edge, NR, mode, bz);
                for (int64_t r = 0; r < h; r++)
                    memcpy(c + r * ldc, edge + r * NR, sizeof(float) * (size_t)w);
            }
            if (last && (pre || act == TG__EPI_GELU))
                for (int64_t r = 0; r < h; r++) {
                    float *cr = c + r * ldc;
                    float *pr = pre ? pre + (ib + r) * ldc + jb : NULL;
                    for (int64_t j = 0; j < w; j++) {
                        float z = cr[j];
                        if (pr)
                            pr[j] = z;
                        cr[j] = act == TG__EPI_GELU ? (float)gelu((double)z)
                                : act == TG__EPI_RELU ? (z > 0 ? z : (z != z ? z : 0))
                                                      : z;
                    }
                }
        }
    }
}

/* A thread's workspace slice sized for products with n columns and k inner steps: the packed
 * B block, then one A strip, then the edge tile (64-byte aligned). */
typedef struct {
    uint16_t *bpack, *apack;
    float *edge;
} slice;
static slice slice_at(char *work, int64_t n, int64_t K)
{
    int64_t kcap = K < 1 ? 1 : K < KC ? K : KC, kpcap = (kcap + 1) / 2;
    int64_t ncap = (n + NR - 1) / NR * NR;
    ncap = ncap < NR ? NR : ncap < NC ? ncap : NC;
    slice s;
    s.bpack = (uint16_t *)(void *)work;
    s.apack = s.bpack + kpcap * 2 * ncap;
    s.edge = (float *)(void *)((char *)(s.apack + kpcap * 2 * MR) +
                               (64 - ((uintptr_t)(s.apack + kpcap * 2 * MR) & 63)) % 64);
    return s;
}

/* A rectangle of C on the calling thread: rows [m0, m1), columns [n0, n1), all of K. */
static void part(kern_bf16 kern, bool hw, bool ta, bool tb, int64_t m0, int64_t m1, int64_t n0,
                 int64_t n1, int64_t K, const float *A, int64_t lda, const float *B, int64_t ldb,
                 float *C, int64_t ldc, bool acc, const tg__gemm_epi *epi, char *work)
{
    slice s = slice_at(work, n1 - n0, K);
    for (int64_t j0 = n0; j0 < n1; j0 += NC) {
        int64_t nc = n1 - j0 < NC ? n1 - j0 : NC;
        for (int64_t k0 = 0; k0 < K || k0 == 0; k0 += KC) {
            int64_t kc = K - k0 < KC ? K - k0 : KC;
            pack_b(tb, B, ldb, k0, kc, j0, nc, hw, s.bpack);
            block_rows(kern, hw, ta, m0, m1, j0, nc, k0, kc, K, A, lda, s.bpack, C, ldc, acc,
                       epi, s.apack, s.edge);
            if (K == 0)
                break;
        }
    }
}

/* The shared-B schedule (src/core/par.h), planned by tg__gemm_plan_make as ops/gemm.c's: blocks
 * b = (column block b / nkb, K chunk b % nkb) packed into the B area of slice 0 or 1 by pack
 * tasks of PANELS_PER_PACK panels; row groups of `rows` rows; A strips and edge tiles in each
 * thread's own slice. */
typedef struct {
    kern_bf16 kern;
    bool hw, ta, tb, acc;
    int64_t M, N, K, lda, ldb, ldc, nkb, rows;
    const float *A, *B;
    float *C;
    const tg__gemm_epi *epi;
    char *ws;
    size_t per;
} sched_arg;
enum { PANELS_PER_PACK = TG__GEMM_PANELS_PER_PACK };
static void sched_block(const sched_arg *g, int64_t b, int64_t *j0, int64_t *nc, int64_t *k0,
                        int64_t *kc)
{
    *j0 = b / g->nkb * NC;
    *nc = g->N - *j0 < NC ? g->N - *j0 : NC;
    *k0 = b % g->nkb * KC;
    *kc = g->K - *k0 < KC ? g->K - *k0 : KC;
}
static void sched_pack(void *arg, int64_t b, int64_t i, int buf)
{
    const sched_arg *g = arg;
    int64_t j0, nc, k0, kc;
    sched_block(g, b, &j0, &nc, &k0, &kc);
    int64_t p0 = i * PANELS_PER_PACK, kp = (kc + 1) / 2;
    if (p0 * NR >= nc)
        return;
    int64_t w = nc - p0 * NR < PANELS_PER_PACK * NR ? nc - p0 * NR : PANELS_PER_PACK * NR;
    slice s = slice_at(g->ws + (size_t)buf * g->per, g->N, g->K);
    pack_b(g->tb, g->B, g->ldb, k0, kc, j0 + p0 * NR, w, g->hw, s.bpack + p0 * kp * 2 * NR);
}
static void sched_rows(void *arg, int64_t b, int64_t r, int buf, int thread)
{
    const sched_arg *g = arg;
    int64_t m0 = r * g->rows, m1 = m0 + g->rows < g->M ? m0 + g->rows : g->M;
    if (m0 >= m1)
        return;
    int64_t j0, nc, k0, kc;
    sched_block(g, b, &j0, &nc, &k0, &kc);
    slice sb = slice_at(g->ws + (size_t)buf * g->per, g->N, g->K);
    slice st = slice_at(g->ws + (size_t)thread * g->per, g->N, g->K);
    block_rows(g->kern, g->hw, g->ta, m0, m1, j0, nc, k0, kc, g->K, g->A, g->lda, sb.bpack,
               g->C, g->ldc, g->acc, g->epi, st.apack, st.edge);
}

/* One column group [n0, n1) over every row and all of K, packing its own op(B) columns, in
 * thread `thread`'s slice. */
static void sched_columns(void *arg, int64_t n0, int64_t n1, int thread)
{
    const sched_arg *g = arg;
    part(g->kern, g->hw, g->ta, g->tb, 0, g->M, n0, n1, g->K, g->A, g->lda, g->B, g->ldb, g->C,
         g->ldc, g->acc, g->epi, g->ws + (size_t)thread * g->per);
}

static void bf16_run(tg__govs *govs, int isa, int nt, bool ta, bool tb, int64_t M, int64_t N,
                     int64_t K, const float *A, int64_t lda, const float *B, int64_t ldb, float *C,
                     int64_t ldc, bool acc, void *ws, const tg__gemm_epi *epi)
{
    if (M <= 0 || N <= 0)
        return;
    bool hw = (isa == TG__ISA_BEST || isa >= TG__ISA_AVX512) && tg__gemm_bf16_hw();
    kern_bf16 kern = kern_bf16_c;
#ifdef TG_X86_BF16
    if (hw)
        kern = kern_bf16_avx512;
#endif
    size_t per = per_thread(N, K);
    assert(ws != NULL);
    /* bf16 products run at about twice the f32 rate: twice the flops per thread */
    double flops = 2.0 * (double)M * (double)N * (double)K;
    tg__gemm_plan pl;
    tg__gemm_plan_make(&pl, govs, nt, M, N, K, MR, NR, KC, NC, flops, 2 * TG_GEMM_FLOPS_PER_THREAD,
                       flops / 2);
    if (pl.nth == 1) {
        part(kern, hw, ta, tb, 0, M, 0, N, K, A, lda, B, ldb, C, ldc, acc, epi, ws);
        return;
    }
    sched_arg g = {kern, hw, ta, tb, acc, M, N, K, lda, ldb, ldc, pl.nkb, pl.rows,
                   A, B, C, epi, (char *)ws, per};
    if (pl.columns) {
        tg__gemm_run_columns(&pl, sched_columns, &g);
        return;
    }
    pl.sched.pack = sched_pack;
    pl.sched.rows = sched_rows;
    pl.sched.arg = &g;
    tg__sched_run(pl.nth, &pl.sched);
}

void tg__gemm_isa_bf16(int isa, int nt, bool ta, bool tb, int64_t M, int64_t N, int64_t K,
                       const float *A, int64_t lda, const float *B, int64_t ldb, float *C,
                       int64_t ldc, bool acc, void *ws, const tg__gemm_epi *epi)
{
    bf16_run(NULL, isa, nt, ta, tb, M, N, K, A, lda, B, ldb, C, ldc, acc, ws, epi);
}

/* ---- products at a graph's compute precision ----------------------------------------------- */
void tg__gemm_prec_f32(tg__govs *govs, int prec, int nt, bool ta, bool tb, int64_t M, int64_t N,
                       int64_t K, const float *A, int64_t lda, const float *B, int64_t ldb,
                       float *C, int64_t ldc, bool acc, void *ws, const tg__gemm_epi *epi)
{
    if (prec == TG_PRECISION_BF16)
        bf16_run(govs, TG__ISA_BEST, nt, ta, tb, M, N, K, A, lda, B, ldb, C, ldc, acc, ws, epi);
    else
        tg__gemm_gov_f32(govs, nt, ta, tb, M, N, K, A, lda, B, ldb, C, ldc, acc, ws, epi);
}

size_t tg__gemm_ws_bytes_prec(tg_dtype dt, int prec, int nt, int64_t n, int64_t k)
{
    if (dt == TG_F32 && prec == TG_PRECISION_BF16)
        return tg__gemm_bf16_ws_bytes_nk(nt, n, k);
    return tg__gemm_ws_bytes_nk(dt, nt, n, k);
}
