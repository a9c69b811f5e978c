/*
 * vec.c - fixed-order column sums, the finiteness scan and the softmax-family row kernels
 * (src/core/vec.h). Each hot function is compiled for x86-64-v4, v3 and the baseline
 * (TG_SIMD_CLONES); the loops are plain C the compiler vectorizes, with sums split into a
 * fixed number of lanes written out here, so every clone computes the same bits.
 */
#include "vec.h"

/* Column block of tg__sum_rows: accumulators for CB columns stay in L1 while the rows stream
 * past. Thread chunks of columns start at multiples of 16 (a cache line of f32). */
#define CB 512
#define LANES 16

#define DEFINE_SUM_ROWS(T, SUF)                                                                \
    TG_SIMD_CLONES static void sum_rows_range_##SUF(int64_t R, int64_t c0, int64_t c1,         \
                                                    const T *x, int64_t ld, T *out)            \
    {                                                                                          \
        T acc[CB];                                                                             \
        for (int64_t b = c0; b < c1; b += CB) {                                                \
            int64_t w = c1 - b < CB ? c1 - b : CB;                                             \
            for (int64_t c = 0; c < w; c++)                                                    \
                acc[c] = 0;                                                                    \
            for (int64_t r = 0; r < R; r++) {                                                  \
                const T *xr = x + r * ld + b;                                                  \
                for (int64_t c = 0; c < w; c++)                                                \
                    acc[c] += xr[c];                                                           \
            }                                                                                  \
            for (int64_t c = 0; c < w; c++)                                                    \
                out[b + c] += acc[c];                                                          \
        }                                                                                      \
    }                                                                                          \
    void tg__sum_rows_##SUF(int nt, int64_t R, int64_t C, const T *x, int64_t ld, T *out)      \
    {                                                                                          \
        /* Race-free: a thread owns the columns [lo, hi) of out; each column's sum runs over   \
         * r = 0..R-1 in order whatever the chunking. */                                       \
        TG_PAR_RANGE(nt, R * C * (int64_t)sizeof(T) > TG_PAR_BYTES, C, 16,                     \
                     sum_rows_range_##SUF(R, lo, hi, x, ld, out));                             \
    }
DEFINE_SUM_ROWS(float, f32)
DEFINE_SUM_ROWS(double, f64)

/* x - x is 0 exactly for finite x and NaN for +-inf and NaN: a branch-free finiteness test
 * (the build never assumes finite math). Blocks of 256 are scanned with an OR of the flags;
 * only a block with a bad element is rescanned element by element for its index. */
#define DEFINE_FINITE(T, SUF, NINF)                                                            \
    TG_SIMD_CLONES static int block_bad_##SUF(const T *x, int64_t n, bool minf_ok)             \
    {                                                                                          \
        int bad = 0;                                                                           \
        if (minf_ok) {                                                                         \
            for (int64_t i = 0; i < n; i++)                                                    \
                bad |= (x[i] - x[i] != 0) & (x[i] != NINF);                                    \
        } else {                                                                               \
            for (int64_t i = 0; i < n; i++)                                                    \
                bad |= x[i] - x[i] != 0;                                                       \
        }                                                                                      \
        return bad;                                                                            \
    }                                                                                          \
    int64_t tg__first_nonfinite_##SUF(const T *x, int64_t n, bool minf_ok)                     \
    {                                                                                          \
        for (int64_t b = 0; b < n; b += 256) {                                                 \
            int64_t w = n - b < 256 ? n - b : 256;                                             \
            if (!block_bad_##SUF(x + b, w, minf_ok))                                           \
                continue;                                                                      \
            for (int64_t i = b; i < b + w; i++)                                                \
                if (!isfinite(x[i]) && !(minf_ok && x[i] == NINF))                             \
                    return i;                                                                  \
        }                                                                                      \
        return -1;                                                                             \
    }
DEFINE_FINITE(float, f32, -INFINITY)
DEFINE_FINITE(double, f64, -(double)INFINITY)

/* Adds the 16 lanes in a fixed tree: (l0 + l8) ..., then 4, 2, 1 apart. */
#define LANE_TREE(acc)                                                                         \
    do {                                                                                       \
        for (int w_ = LANES / 2; w_ >= 1; w_ /= 2)                                             \
            for (int k_ = 0; k_ < w_; k_++)                                                    \
                (acc)[k_] += (acc)[k_ + w_];                                                   \
    } while (0)

#define DEFINE_ROWS(T, SUF, EXP, NINF)                                                         \
    TG_SIMD_CLONES static T row_max_##SUF(const T *x, int64_t L)                               \
    {                                                                                          \
        T m[LANES];                                                                            \
        for (int k = 0; k < LANES; k++)                                                        \
            m[k] = NINF;                                                                       \
        int64_t j = 0;                                                                         \
        for (; j + LANES <= L; j += LANES)                                                     \
            for (int k = 0; k < LANES; k++) {                                                  \
                T v = x[j + k];                                                                \
                m[k] = ((v > m[k]) | (v != v)) ? v : m[k]; /* NaN sticks */                    \
            }                                                                                  \
        for (int k = 0; j + k < L; k++) {                                                      \
            T v = x[j + k];                                                                    \
            m[k] = (v > m[k] || v != v) ? v : m[k];                                            \
        }                                                                                      \
        T r = m[0];                                                                            \
        for (int k = 1; k < LANES; k++)                                                        \
            r = ((m[k] > r) | (m[k] != m[k])) ? m[k] : r;                                      \
        return r;                                                                              \
    }                                                                                          \
    TG_SIMD_CLONES static T row_expsum_##SUF(const T *x, int64_t L, T mx, T *e)                \
    {                                                                                          \
        T acc[LANES] = {0};                                                                    \
        int64_t j = 0;                                                                         \
        if (e) {                                                                               \
            for (; j + LANES <= L; j += LANES)                                                 \
                for (int k = 0; k < LANES; k++) {                                              \
                    T v = EXP(x[j + k] - mx);                                                  \
                    e[j + k] = v;                                                              \
                    acc[k] += v;                                                               \
                }                                                                              \
            for (int k = 0; j + k < L; k++) {                                                  \
                T v = EXP(x[j + k] - mx);                                                      \
                e[j + k] = v;                                                                  \
                acc[k] += v;                                                                   \
            }                                                                                  \
        } else {                                                                               \
            for (; j + LANES <= L; j += LANES)                                                 \
                for (int k = 0; k < LANES; k++)                                                \
                    acc[k] += EXP(x[j + k] - mx);                                              \
            for (int k = 0; j + k < L; k++)                                                    \
                acc[k] += EXP(x[j + k] - mx);                                                  \
        }                                                                                      \
        LANE_TREE(acc);                                                                        \
        return acc[0];                                                                         \
    }                                                                                          \
    TG_SIMD_CLONES static T row_dot_##SUF(const T *a, const T *b, int64_t L)                   \
    {                                                                                          \
        T acc[LANES] = {0};                                                                    \
        int64_t j = 0;                                                                         \
        if (b) {                                                                               \
            for (; j + LANES <= L; j += LANES)                                                 \
                for (int k = 0; k < LANES; k++)                                                \
                    acc[k] += a[j + k] * b[j + k];                                             \
            for (int k = 0; j + k < L; k++)                                                    \
                acc[k] += a[j + k] * b[j + k];                                                 \
        } else {                                                                               \
            for (; j + LANES <= L; j += LANES)                                                 \
                for (int k = 0; k < LANES; k++)                                                \
                    acc[k] += a[j + k];                                                        \
            for (int k = 0; j + k < L; k++)                                                    \
                acc[k] += a[j + k];                                                            \
        }                                                                                      \
        LANE_TREE(acc);                                                                        \
        return acc[0];                                                                         \
    }                                                                                          \
    /* The entry points of the other files: plain functions, so a caller elsewhere never       \
     * names a cloned one (clang 14 calls a cloned function of another file by the wrong       \
     * symbol; the clones are resolved here, in this file). */                                 \
    T tg__row_max_##SUF(const T *x, int64_t L) { return row_max_##SUF(x, L); }                 \
    T tg__row_expsum_##SUF(const T *x, int64_t L, T mx, T *e)                                  \
    {                                                                                          \
        return row_expsum_##SUF(x, L, mx, e);                                                  \
    }                                                                                          \
    T tg__row_dot_##SUF(const T *a, const T *b, int64_t L) { return row_dot_##SUF(a, b, L); }
DEFINE_ROWS(float, f32, tg__expf, -INFINITY)
DEFINE_ROWS(double, f64, tg__exp, -(double)INFINITY)
