/*
 * gemm.c - the single internal matrix-product entry point used by matmul and dense.
 *
 * C (M, N) = (acc ? C : 0) + op(A) (M, K) . op(B) (K, N), op = transpose when the flag is set.
 *
 * Determinism: rows of C are split statically across threads; every C element is accumulated
 * by one thread over k in increasing order (the tb path keeps 8 partial sums by k mod 8 and adds
 * them in a fixed order), so the result does not depend on the thread count. This is the place
 * to swap in a packed, register-blocked kernel; callers never see the loop order.
 */
#include "registry.h"

#define ROWS 4 /* C rows processed together so each B row is loaded once per 4 rows */

#define DEFINE_GEMM(T, SUF)                                                                    \
    /* op(B) rows contiguous (tb == false): C[i,:] += A'(i,k) * B[k,:], k ascending. */         \
    static void axpy_rows_##SUF(bool ta, int64_t i0, int64_t nr, int64_t N, int64_t K,         \
                                const T *A, int64_t lda, const T *B, int64_t ldb, T *C,        \
                                int64_t ldc)                                                   \
    {                                                                                          \
        for (int64_t k = 0; k < K; k++) {                                                      \
            const T *brow = B + k * ldb;                                                       \
            for (int64_t r = 0; r < nr; r++) {                                                 \
                int64_t i = i0 + r;                                                            \
                T a = ta ? A[k * lda + i] : A[i * lda + k];                                    \
                T *crow = C + i * ldc;                                                         \
                for (int64_t j = 0; j < N; j++)                                                \
                    crow[j] += a * brow[j];                                                    \
            }                                                                                  \
        }                                                                                      \
    }                                                                                          \
    /* op(B) = B^T: C[i,j] += dot(A'(i,:), B[j,:]) with 8 lanes summed in fixed order. */       \
    static void dot_rows_##SUF(bool ta, int64_t i0, int64_t nr, int64_t N, int64_t K,          \
                               const T *A, int64_t lda, const T *B, int64_t ldb, T *C,         \
                               int64_t ldc)                                                    \
    {                                                                                          \
        for (int64_t r = 0; r < nr; r++) {                                                     \
            int64_t i = i0 + r;                                                                \
            T *crow = C + i * ldc;                                                             \
            for (int64_t j = 0; j < N; j++) {                                                  \
                const T *brow = B + j * ldb;                                                   \
                T s[8] = {0, 0, 0, 0, 0, 0, 0, 0};                                             \
                int64_t k = 0;                                                                 \
                if (!ta) {                                                                     \
                    const T *arow = A + i * lda;                                               \
                    for (; k + 8 <= K; k += 8)                                                 \
                        for (int l = 0; l < 8; l++)                                            \
                            s[l] += arow[k + l] * brow[k + l];                                 \
                    for (; k < K; k++)                                                         \
                        s[k & 7] += arow[k] * brow[k];                                         \
                } else {                                                                       \
                    for (; k < K; k++)                                                         \
                        s[k & 7] += A[k * lda + i] * brow[k];                                  \
                }                                                                              \
                crow[j] += ((s[0] + s[1]) + (s[2] + s[3])) + ((s[4] + s[5]) + (s[6] + s[7])); \
            }                                                                                  \
        }                                                                                      \
    }                                                                                          \
    void tg__gemm_##SUF(int nt, bool ta, bool tb, int64_t M, int64_t N, int64_t K, const T *A, \
                        int64_t lda, const T *B, int64_t ldb, T *C, int64_t ldc, bool acc)     \
    {                                                                                          \
        int64_t nblk = (M + ROWS - 1) / ROWS;                                                  \
        /* Race-free: block b owns rows [b*ROWS, b*ROWS+ROWS) of C. */                         \
        TG_OMP_FOR(nt, M * N * K > TG_PAR_MIN && nblk > 1)                                     \
        for (int64_t b = 0; b < nblk; b++) {                                                   \
            int64_t i0 = b * ROWS, nr = M - i0 < ROWS ? M - i0 : ROWS;                         \
            if (!acc)                                                                          \
                for (int64_t r = 0; r < nr; r++)                                               \
                    memset(C + (i0 + r) * ldc, 0, sizeof(T) * (size_t)N);                      \
            if (tb)                                                                            \
                dot_rows_##SUF(ta, i0, nr, N, K, A, lda, B, ldb, C, ldc);                      \
            else                                                                               \
                axpy_rows_##SUF(ta, i0, nr, N, K, A, lda, B, ldb, C, ldc);                     \
        }                                                                                      \
    }

DEFINE_GEMM(float, f32)
DEFINE_GEMM(double, f64)
