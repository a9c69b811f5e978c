/*
 * vec.h - internal helpers for the vectorized non-GEMM kernels: parallel regions
 * only for work that pays for the fork, fixed-order row-blocked column sums, a vectorizable
 * exp, and the row kernels shared by softmax, log_softmax and cross-entropy.
 *
 * Determinism: every helper computes each output with a fixed sequence of IEEE operations that
 * depends neither on the thread count nor on the SIMD clone (the project builds with
 * -ffp-contract=off and no helper reorders a sum by vector width: sums that are split into
 * lanes use a fixed lane count written out in C).
 */
#ifndef TG_VEC_H
#define TG_VEC_H

#include "core.h"

#include <stdatomic.h>
#include <stdint.h>
#include <string.h>

/* ----- parallel regions ----------------------------------------------------------------------
 * A region forks only when the loop does at least `work` units worth ~20 us on one core (the
 * fork/join of a libgomp team costs a few microseconds, more when a worker has gone to sleep).
 * TG_PAR_WORK(units) scales a per-kernel threshold by TG_PAR_MIN / 32768, so the TG_PAR_MIN=1
 * builds of tests/meson.build still take every parallel path. Units are "bytes touched" for
 * memory-bound loops and elements for loops with a transcendental per element. */
#define TG_PAR_WORK(units) (TG_PAR_MIN == 1 ? (int64_t)0 : (int64_t)(units) * TG_PAR_MIN / 32768)
/* Memory-bound loops: fork above 256 KiB touched. */
#define TG_PAR_BYTES TG_PAR_WORK(262144)

/* Fixed chunks. A parallel loop over n items is cut into tg__nchunks(n, align) chunks whose
 * count and bounds depend on n and align only (never on the thread count), and the threads
 * take chunks one at a time as they come free (OpenMP's dynamic schedule): a thread that the
 * OS deschedules holds up only the chunk it is in, the others take the rest. What a chunk
 * computes does not depend on which thread runs it or when, so results are the same for every
 * thread count and every schedule. */
#define TG_PAR_CHUNKS 32

/* Chunks for n items in blocks of `align` items: one per block, at most TG_PAR_CHUNKS. */
static inline int64_t tg__nchunks(int64_t n, int64_t align)
{
    int64_t blocks = (n + align - 1) / align;
    return blocks < TG_PAR_CHUNKS ? blocks : TG_PAR_CHUNKS;
}

/* [lo, hi) of chunk c of the nc chunks of n items: chunk boundaries on multiples of `align`
 * items, the blocks spread evenly (the last chunk ends at n). */
static inline void tg__chunk(int64_t n, int64_t nc, int64_t c, int64_t align, int64_t *lo,
                             int64_t *hi)
{
    int64_t blocks = (n + align - 1) / align;
    int64_t b0 = blocks * c / nc, b1 = blocks * (c + 1) / nc;
    *lo = b0 * align < n ? b0 * align : n;
    *hi = b1 * align < n ? b1 * align : n;
}

/* One region's dynamic loop over n chunks: threads take chunk numbers from `next`, and the
 * region's accounting (core.h) feeds the region governor. */
typedef struct tg__par_loop {
    atomic_llong next;
    int64_t n;
    tg__par_acct acct;
} tg__par_loop;

static inline void tg__loop_init(tg__par_loop *l, int64_t n)
{
    atomic_init(&l->next, 0);
    l->n = n;
    tg__acct_init(&l->acct);
}

/* The next chunk for thread `me`, or -1 when none is left. */
static inline int64_t tg__loop_next(tg__par_loop *l, int me)
{
    int64_t c = atomic_fetch_add_explicit(&l->next, 1, memory_order_relaxed);
    if (c >= l->n) {
        tg__acct_done(&l->acct, me);
        return -1;
    }
    tg__acct_chunk(&l->acct, me);
    return c;
}

/* Runs the statement given last (it uses int64_t lo, hi; commas allowed) over [0, n): when
 * `par` is true, nt > 1 and n > 1, once per fixed chunk (tg__chunk) in one parallel region of
 * min(nt, chunks) threads taking the chunks dynamically (unless this call site's governor
 * record in table `govs` says one thread does better for now; govs NULL: no governor); else
 * once over the whole range on the calling thread, without entering a parallel region at all.
 * The site's record is found by its source position (a string literal) the first time a
 * region is considered, on the calling thread. The statement must write only the outputs of
 * its items (and may use TG_THREAD_NUM()'s workspace slice), which makes the result
 * independent of the chunking, the thread count and the schedule. Kernels use TG_PAR_RANGE
 * (ops/registry.h: the table of their call record). */
#define TG__STR_(x) #x
#define TG__STR(x) TG__STR_(x)
#define TG__SITE __FILE__ ":" TG__STR(__LINE__)
#ifdef TG_HAVE_OPENMP
#define TG_PAR_RANGE_IN(govs, nt, par, n, align, ...)                                         \
    do {                                                                                       \
        int tg__nt_ = (nt);                                                                    \
        int64_t tg__n_ = (n), tg__al_ = (align);                                               \
        int64_t tg__nc_ = tg__nt_ > 1 && (par) && tg__n_ > 1 ? tg__nchunks(tg__n_, tg__al_) : 1; \
        int tg__th_ = tg__nc_ < tg__nt_ ? (int)tg__nc_ : tg__nt_;                              \
        tg__par_gov *tg__gov_ = NULL;                                                          \
        if (tg__th_ > 1) {                                                                     \
            tg__gov_ = tg__gov_at((govs), TG__SITE, 0);                                        \
            tg__th_ = tg__gov_threads(tg__gov_, tg__th_);                                      \
        }                                                                                      \
        if (tg__th_ > 1) {                                                                     \
            tg__par_loop tg__l_;                                                               \
            tg__loop_init(&tg__l_, tg__nc_);                                                   \
            TG__PRAGMA(omp parallel num_threads(tg__th_))                                      \
            {                                                                                  \
                int tg__me_ = omp_get_thread_num();                                            \
                for (int64_t tg__c_; (tg__c_ = tg__loop_next(&tg__l_, tg__me_)) >= 0;) {       \
                    int64_t lo, hi;                                                            \
                    tg__chunk(tg__n_, tg__nc_, tg__c_, tg__al_, &lo, &hi);                     \
                    if (lo < hi) {                                                             \
                        __VA_ARGS__;                                                           \
                    }                                                                          \
                }                                                                              \
            }                                                                                  \
            tg__gov_report(tg__gov_, &tg__l_.acct, tg__nc_);                                   \
        } else {                                                                               \
            int64_t lo = 0, hi = tg__n_;                                                       \
            __VA_ARGS__;                                                                       \
        }                                                                                      \
    } while (0)
#else
#define TG_PAR_RANGE_IN(govs, nt, par, n, align, ...)                                         \
    do {                                                                                       \
        (void)(govs);                                                                          \
        (void)(nt);                                                                            \
        (void)(par);                                                                           \
        (void)(align);                                                                         \
        int64_t lo = 0, hi = (n);                                                              \
        __VA_ARGS__;                                                                           \
    } while (0)
#endif

/* ----- fixed-order column sums ---------------------------------------------------------------
 * out[c] += sum_{r = 0..R-1} x[r * ld + c] for c in [0, C): each column's sum starts at 0 and
 * adds the rows in increasing r, then is added to out[c] once. Threads own blocks of columns
 * and walk the rows in order reading contiguous row segments (no strided column walk). The
 * result is bitwise independent of the thread count and of the SIMD clone. govs: the
 * governor table of the caller (NULL: none). */
void tg__sum_rows_f32(tg__govs *govs, int nt, int64_t R, int64_t C, const float *x, int64_t ld,
                      float *out);
void tg__sum_rows_f64(tg__govs *govs, int nt, int64_t R, int64_t C, const double *x, int64_t ld,
                      double *out);

/* Index of the first element of x (n) that is not finite (NaN, +-inf; -inf allowed when
 * minf_ok), or -1. Vectorized scan over blocks; the answer is the same as a scalar scan's. */
int64_t tg__first_nonfinite_f32(const float *x, int64_t n, bool minf_ok);
int64_t tg__first_nonfinite_f64(const double *x, int64_t n, bool minf_ok);

/* ----- exp that vectorizes ------------------------------------------------------------------
 * e^x = 2^n e^r with n = round(x / ln 2), r = x - n ln 2 (Cody & Waite 1980: ln 2 split in a
 * short high part, so n ln2_hi is exact, and a low correction), e^r by its Taylor polynomial
 * (Horner; degree 7 for f32, 13 for f64, truncation below 2^-30 resp. 2^-58 relative on
 * |r| <= ln2/2), and the scaling by 2^n done as two exact power-of-two factors 2^(n/2) and
 * 2^(n - n/2), so results in the subnormal range are rounded once. Branch-free (selects only),
 * integer-exact scaling, no FMA: the same bits on every CPU and clone.
 * Accuracy against glibc's expf / exp: at most 1 ulp apart, measured over every one of the 2^32
 * floats and 2 x 10^8 random doubles in [-760, 720] (docs/kernels.md); tests/test_ops_vec.c
 * checks a dense sweep. Special
 * values: exp(-inf) = 0, exp(+inf) = +inf, exp(NaN) = NaN, overflow gives +inf, underflow
 * gives subnormals then 0. Used inside row kernels (softmax, log_softmax, cross-entropy); the
 * tg_exp op keeps libm. */
/* Out-of-range inputs (|x| > 104 for f32, > 746 for f64, inf and NaN) are sorted out on the bit
 * pattern and blended in with integer masks: no floating-point compare or branch, so the compiler if-converts and
 * vectorizes the loops these are inlined into (-ftrapping-math forbids it for FP compares). */
static inline float tg__expf(float x)
{
    uint32_t xi;
    memcpy(&xi, &x, sizeof xi);
    uint32_t ax = xi & 0x7fffffffu;
    int big = ax > 0x42d00000u; /* |x| > 104, inf or NaN */
    uint32_t mask = 0u - (uint32_t)big; /* all ones when big */
    uint32_t xci = xi & ~mask;
    float xc;
    memcpy(&xc, &xci, sizeof xc);
    const float magic = 12582912.0f; /* 1.5 * 2^23: adding it rounds to an integer */
    float t = xc * 1.44269504088896341f + magic;
    float nf = t - magic;
    int32_t tb;
    memcpy(&tb, &t, sizeof tb);
    int32_t n = tb - 0x4B400000; /* the integer nf, in [-151, 151] */
    float r = (xc - nf * 0.693359375f) - nf * -2.12194440e-4f;
    float p = 1.98412698e-4f; /* 1/7! */
    p = p * r + 1.38888889e-3f;
    p = p * r + 8.33333333e-3f;
    p = p * r + 4.16666667e-2f;
    p = p * r + 1.66666667e-1f;
    p = p * r + 0.5f;
    p = p * r + 1.0f;
    p = p * r + 1.0f;
    int32_t n1 = n / 2, n2 = n - n1;
    int32_t b1 = (n1 + 127) * (1 << 23), b2 = (n2 + 127) * (1 << 23);
    float s1, s2;
    memcpy(&s1, &b1, sizeof s1);
    memcpy(&s2, &b2, sizeof s2);
    float y = p * s1 * s2;
    uint32_t yi;
    memcpy(&yi, &y, sizeof yi);
    /* big: NaN stays, -inf or x < -104 gives +0, +inf or x > 104 gives +inf */
    uint32_t spec = ax > 0x7f800000u ? xi : (xi >> 31) ? 0u : 0x7f800000u;
    yi = (yi & ~mask) | (spec & mask); /* a blend, not a branch: y is always computed */
    memcpy(&y, &yi, sizeof y);
    return y;
}

static inline double tg__exp(double x)
{
    uint64_t xi;
    memcpy(&xi, &x, sizeof xi);
    uint64_t ax = xi & 0x7fffffffffffffffull;
    int big = ax > 0x4087500000000000ull; /* |x| > 746, inf or NaN */
    uint64_t mask = 0u - (uint64_t)big;
    uint64_t xci = xi & ~mask;
    double xc;
    memcpy(&xc, &xci, sizeof xc);
    const double magic = 6755399441055744.0; /* 1.5 * 2^52 */
    double t = xc * 1.44269504088896338700e+00 + magic;
    double nf = t - magic;
    int64_t tb, mb;
    memcpy(&tb, &t, sizeof tb);
    memcpy(&mb, &magic, sizeof mb);
    int64_t n = tb - mb;
    /* fdlibm's ln2_hi (low 32 bits of its significand zero) and ln2_lo */
    double r = (xc - nf * 6.93147180369123816490e-01) - nf * 1.90821492927058770002e-10;
    double p = 1.0 / 6227020800.0; /* 1/13! */
    p = p * r + 1.0 / 479001600.0;
    p = p * r + 1.0 / 39916800.0;
    p = p * r + 1.0 / 3628800.0;
    p = p * r + 1.0 / 362880.0;
    p = p * r + 1.0 / 40320.0;
    p = p * r + 1.0 / 5040.0;
    p = p * r + 1.0 / 720.0;
    p = p * r + 1.0 / 120.0;
    p = p * r + 1.0 / 24.0;
    p = p * r + 1.0 / 6.0;
    p = p * r + 0.5;
    p = p * r + 1.0;
    p = p * r + 1.0;
    int64_t n1 = n / 2, n2 = n - n1;
    int64_t b1 = (n1 + 1023) * ((int64_t)1 << 52), b2 = (n2 + 1023) * ((int64_t)1 << 52);
    double s1, s2;
    memcpy(&s1, &b1, sizeof s1);
    memcpy(&s2, &b2, sizeof s2);
    double y = p * s1 * s2;
    uint64_t yi;
    memcpy(&yi, &y, sizeof yi);
    uint64_t spec = ax > 0x7ff0000000000000ull ? xi : (xi >> 63) ? 0u : 0x7ff0000000000000ull;
    yi = (yi & ~mask) | (spec & mask);
    memcpy(&y, &yi, sizeof y);
    return y;
}

/* ----- row kernels (softmax, log_softmax, cross-entropy) ------------------------------------
 * Row max: NaN if the row has a NaN, else the largest entry (-inf for an all -inf row).
 * Row exp-sum: s = sum_j exp(x_j - m) accumulated in 16 fixed lanes (lane j mod 16, then the
 * lanes added pairwise in a fixed tree); when e is not NULL it also stores e_j = exp(x_j - m).
 * Each call handles one row; results depend only on the row. */
float tg__row_max_f32(const float *x, int64_t L);
double tg__row_max_f64(const double *x, int64_t L);
float tg__row_expsum_f32(const float *x, int64_t L, float m, float *e);
double tg__row_expsum_f64(const double *x, int64_t L, double m, double *e);
/* sum_j a_j (b == NULL) or sum_j a_j b_j, in 16 fixed lanes as above. */
float tg__row_dot_f32(const float *a, const float *b, int64_t L);
double tg__row_dot_f64(const double *a, const double *b, int64_t L);

#endif
