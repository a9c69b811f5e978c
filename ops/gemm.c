/*
 * gemm.c - the single internal matrix-product entry point used by matmul and dense.
 *
 * C (M, N) = (acc ? C : 0) + op(A) (M, K) . op(B) (K, N), op = transpose when the flag is set.
 *
 * Algorithm (Goto/BLIS style): C is cut into tiles of MC x NC, each owned by one thread. For
 * each K chunk of KC, the tile's slice of op(B) is packed into NR-wide column panels and each
 * MR-row panel of op(A) into an MR-wide strip; a register-blocked micro-kernel then computes an
 * MR x NR block with one accumulator per element, k increasing.
 *
 * Determinism: every C element is computed by one thread as
 *   C = ((C_or_0 + sum_{k in chunk 0}) + sum_{k in chunk 1}) + ...
 * with each chunk summed in increasing k and chunk boundaries fixed (multiples of KC), so the
 * result does not depend on the number of threads or on how tiles are scheduled. The code is
 * ISO C (no FMA contraction), so results are also the same on every x86-64 machine; the
 * micro-kernel is compiled for several instruction sets (target_clones) and picked at run time.
 */
#include "registry.h"

#define KC 128
#define MC 96   /* multiple of MR */
#define NC 128  /* multiple of both NR values; packing uses (KC*NC + MR*KC) elements of stack */
#define MR 6

typedef float v8f __attribute__((vector_size(32)));
typedef double v4d __attribute__((vector_size(32)));

#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__) && defined(__linux__)
#define TG_CLONES __attribute__((target_clones("avx512f", "avx2", "default")))
#else
#define TG_CLONES
#endif

/* ---- f32: MR x 16 micro-kernel (12 vector accumulators) ---------------------------------- */
#define NR32 16
TG_CLONES
static void kernel_f32(int64_t kc, const float *restrict ap, const float *restrict bp,
                       float *restrict out /* MR x NR32 */)
{
    v8f c[MR][2];
    for (int r = 0; r < MR; r++)
        c[r][0] = c[r][1] = (v8f){0};
    for (int64_t k = 0; k < kc; k++) {
        v8f b0, b1;
        __builtin_memcpy(&b0, bp + k * NR32, sizeof b0);
        __builtin_memcpy(&b1, bp + k * NR32 + 8, sizeof b1);
        for (int r = 0; r < MR; r++) {
            float a = ap[k * MR + r];
            v8f av = {a, a, a, a, a, a, a, a};
            c[r][0] += av * b0;
            c[r][1] += av * b1;
        }
    }
    for (int r = 0; r < MR; r++) {
        __builtin_memcpy(out + r * NR32, &c[r][0], sizeof c[r][0]);
        __builtin_memcpy(out + r * NR32 + 8, &c[r][1], sizeof c[r][1]);
    }
}

/* ---- f64: MR x 8 micro-kernel ------------------------------------------------------------- */
#define NR64 8
TG_CLONES
static void kernel_f64(int64_t kc, const double *restrict ap, const double *restrict bp,
                       double *restrict out /* MR x NR64 */)
{
    v4d c[MR][2];
    for (int r = 0; r < MR; r++)
        c[r][0] = c[r][1] = (v4d){0};
    for (int64_t k = 0; k < kc; k++) {
        v4d b0, b1;
        __builtin_memcpy(&b0, bp + k * NR64, sizeof b0);
        __builtin_memcpy(&b1, bp + k * NR64 + 4, sizeof b1);
        for (int r = 0; r < MR; r++) {
            double a = ap[k * MR + r];
            v4d av = {a, a, a, a};
            c[r][0] += av * b0;
            c[r][1] += av * b1;
        }
    }
    for (int r = 0; r < MR; r++) {
        __builtin_memcpy(out + r * NR64, &c[r][0], sizeof c[r][0]);
        __builtin_memcpy(out + r * NR64 + 4, &c[r][1], sizeof c[r][1]);
    }
}

/* One C tile [i0, i0+mc) x [j0, j0+nc), all of K, on the calling thread. `work` holds the
 * packing buffers (KC x NC and MR x KC elements) and the micro-kernel's output block: a slice of
 * the graph's planned workspace (per thread), or the caller's stack without one. */
#define DEFINE_TILE(T, SUF, NR)                                                                \
    static void tile_##SUF(bool ta, bool tb, int64_t i0, int64_t mc, int64_t j0, int64_t nc,   \
                           int64_t K, const T *A, int64_t lda, const T *B, int64_t ldb, T *C,  \
                           int64_t ldc, bool acc, T *work)                                     \
    {                                                                                          \
        T *bpack = work, *apack = work + KC * NC, *out = apack + MR * KC;                      \
        int64_t npanels = (nc + NR - 1) / NR;                                                  \
        for (int64_t k0 = 0; k0 < K || k0 == 0; k0 += KC) {                                    \
            int64_t kc = K - k0 < KC ? K - k0 : KC;                                            \
            bool first = k0 == 0;                                                              \
            /* pack op(B)[k0:k0+kc, j0:j0+nc] as panels of NR columns, zero padded */          \
            for (int64_t p = 0; p < npanels; p++) {                                            \
                T *dst = bpack + p * kc * NR;                                                  \
                int64_t jb = j0 + p * NR, w = nc - p * NR < NR ? nc - p * NR : NR;             \
                if (!tb && w == NR) { /* full panel: fixed-size row copies (vector moves) */   \
                    for (int64_t k = 0; k < kc; k++)                                           \
                        __builtin_memcpy(dst + k * NR, B + (k0 + k) * ldb + jb, sizeof(T) * NR); \
                } else if (!tb) {                                                              \
                    for (int64_t k = 0; k < kc; k++) {                                         \
                        const T *src = B + (k0 + k) * ldb + jb;                                \
                        T *d = dst + k * NR;                                                   \
                        for (int64_t j = 0; j < NR; j++)                                       \
                            d[j] = j < w ? src[j] : 0;                                         \
                    }                                                                          \
                } else { /* op(B) = B^T: read each stored row of B contiguously */             \
                    for (int64_t j = 0; j < NR; j++) {                                         \
                        if (j < w) {                                                           \
                            const T *src = B + (jb + j) * ldb + k0;                            \
                            for (int64_t k = 0; k < kc; k++)                                   \
                                dst[k * NR + j] = src[k];                                      \
                        } else {                                                               \
                            for (int64_t k = 0; k < kc; k++)                                   \
                                dst[k * NR + j] = 0;                                           \
                        }                                                                      \
                    }                                                                          \
                }                                                                              \
            }                                                                                  \
            for (int64_t ir = 0; ir < mc; ir += MR) {                                          \
                int64_t h = mc - ir < MR ? mc - ir : MR, ib = i0 + ir;                         \
                /* pack op(A)[ib:ib+h, k0:k0+kc] as an MR-wide strip, zero padded */           \
                for (int64_t k = 0; k < kc; k++) {                                             \
                    T *d = apack + k * MR;                                                     \
                    for (int64_t r = 0; r < h; r++)                                            \
                        d[r] = ta ? A[(k0 + k) * lda + ib + r] : A[(ib + r) * lda + k0 + k];   \
                    for (int64_t r = h; r < MR; r++)                                           \
                        d[r] = 0;                                                              \
                }                                                                              \
                for (int64_t p = 0; p < npanels; p++) {                                        \
                    int64_t jb = j0 + p * NR, w = nc - p * NR < NR ? nc - p * NR : NR;         \
                    kernel_##SUF(kc, apack, bpack + p * kc * NR, out);                         \
                    for (int64_t r = 0; r < h; r++) {                                          \
                        T *c = C + (ib + r) * ldc + jb;                                        \
                        const T *o = out + r * NR;                                             \
                        if (first && !acc)                                                     \
                            for (int64_t j = 0; j < w; j++)                                    \
                                c[j] = o[j];                                                   \
                        else                                                                   \
                            for (int64_t j = 0; j < w; j++)                                    \
                                c[j] += o[j];                                                  \
                    }                                                                          \
                }                                                                              \
            }                                                                                  \
            if (K == 0)                                                                        \
                break;                                                                         \
        }                                                                                      \
    }                                                                                          \
    void tg__gemm_##SUF(int nt, bool ta, bool tb, int64_t M, int64_t N, int64_t K, const T *A, \
                        int64_t lda, const T *B, int64_t ldb, T *C, int64_t ldc, bool acc,     \
                        void *ws)                                                              \
    {                                                                                          \
        if (M <= 0 || N <= 0)                                                                  \
            return;                                                                            \
        int64_t mt = (M + MC - 1) / MC, ntl = (N + NC - 1) / NC;                               \
        size_t per = tg__gemm_ws_bytes(sizeof(T) == 4 ? TG_F32 : TG_F64, 1);                   \
        /* Race-free: tile t owns C[rows of t, cols of t]; see the file comment for order. */  \
        TG_OMP_FOR(nt, M * N * K > TG_PAR_MIN && mt * ntl > 1)                                 \
        for (int64_t t = 0; t < mt * ntl; t++) {                                               \
            int64_t i0 = (t / ntl) * MC, j0 = (t % ntl) * NC;                                  \
            int64_t mc = M - i0 < MC ? M - i0 : MC, nc = N - j0 < NC ? N - j0 : NC;            \
            if (ws) {                                                                          \
                T *w = (T *)(void *)((char *)ws + (size_t)TG_THREAD_NUM() * per);              \
                tile_##SUF(ta, tb, i0, mc, j0, nc, K, A, lda, B, ldb, C, ldc, acc, w);         \
            } else {                                                                           \
                _Alignas(64) T w[KC * NC + MR * KC + MR * NR];                                 \
                tile_##SUF(ta, tb, i0, mc, j0, nc, K, A, lda, B, ldb, C, ldc, acc, w);         \
            }                                                                                  \
        }                                                                                      \
    }

size_t tg__gemm_ws_bytes(tg_dtype dt, int nt)
{
    size_t es = tg_dtype_size(dt), nr = dt == TG_F32 ? NR32 : NR64;
    size_t per = ((KC * NC + MR * KC + MR * nr) * es + 63) / 64 * 64;
    return per * (size_t)(nt > 0 ? nt : 1);
}

DEFINE_TILE(float, f32, NR32)
DEFINE_TILE(double, f64, NR64)
