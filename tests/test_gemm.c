/*
 * test_gemm.c - the internal GEMM (ops/gemm.c) against a long-double reference, at shapes that
 * hit every edge of its blocking (M, N not multiples of the register block, K across chunk
 * boundaries), all four layouts, accumulate mode, the epilogue, every micro-kernel family this
 * CPU runs, and 1/2/3/8 threads.
 *
 * What is promised and tested:
 * - error bound: |C - C_exact| <= (K + K/KC + 3) eps (sum_k |a_ik b_kj| + |C0_ij| + |bias_j|);
 * - integer data: exact (every partial sum is an integer below 2^24);
 * - bitwise the same for any thread count; AVX-512 and AVX2 kernels bitwise equal (both FMA
 *   chains in the same order);
 * - for K <= KC, accumulating into C equals C + (the product computed alone), bitwise;
 * - epilogue: bias + ReLU equals bias then max(., 0); the saved pre-activation equals the
 *   biased product; GELU applied to it.
 */
#include "testutil.h"

#include "gemm.h"

#include <float.h>
#include <stdlib.h>
#include <string.h>

static uint64_t rng_state = 88172645463325252ull;
static double urand(void)
{
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return (double)(rng_state >> 11) / 9007199254740992.0;
}

typedef struct {
    int64_t M, N, K;
    bool ta, tb, acc;
    int64_t lda, ldb, ldc;
    bool integer;
    bool bias;
    int act;
} gcase;

/* Operands stored as doubles; converted per dtype. op(A)[i,k] at A[ta ? k*lda+i : i*lda+k]. */
typedef struct {
    double *A, *B, *C0, *bias;
    size_t na, nb, nc;
} gdata;

static void make_data(const gcase *c, gdata *d)
{
    int64_t ar = c->ta ? c->K : c->M, br = c->tb ? c->N : c->K;
    d->na = (size_t)(ar * c->lda);
    d->nb = (size_t)(br * c->ldb);
    d->nc = (size_t)(c->M * c->ldc);
    d->A = malloc(sizeof(double) * d->na);
    d->B = malloc(sizeof(double) * d->nb);
    d->C0 = malloc(sizeof(double) * d->nc);
    d->bias = malloc(sizeof(double) * (size_t)c->N);
    ck_assert(d->A && d->B && d->C0 && d->bias);
    for (size_t i = 0; i < d->na; i++)
        d->A[i] = c->integer ? (double)((int)(urand() * 7) - 3) : urand() * 2 - 1;
    for (size_t i = 0; i < d->nb; i++)
        d->B[i] = c->integer ? (double)((int)(urand() * 5) - 2) : urand() * 2 - 1;
    for (size_t i = 0; i < d->nc; i++)
        d->C0[i] = c->integer ? (double)((int)(urand() * 9) - 4) : urand() * 2 - 1;
    for (int64_t j = 0; j < c->N; j++)
        d->bias[j] = c->integer ? (double)((int)(urand() * 9) - 4) : urand() * 2 - 1;
}

static void free_data(gdata *d)
{
    free(d->A);
    free(d->B);
    free(d->C0);
    free(d->bias);
}

/* Run the GEMM in dtype dt with kernel family isa on nt threads; result as doubles in out
 * (M x ldc), pre-activation in pre when the epilogue keeps it. */
static void run(const gcase *c, const gdata *d, tg_dtype dt, int isa, int nt, double *out,
                double *pre)
{
    size_t es = tg_dtype_size(dt);
    void *A = malloc(es * d->na), *B = malloc(es * d->nb), *C = malloc(es * d->nc);
    void *P = pre ? malloc(es * d->nc) : NULL, *bias = malloc(es * (size_t)c->N);
    void *ws = aligned_alloc(64, tg__gemm_ws_bytes_nk(dt, nt, c->N, c->K)); /* tight: ASan checks */
    ck_assert(A && B && C && bias && ws);
    for (size_t i = 0; i < d->na; i++)
        dt == TG_F32 ? (void)(((float *)A)[i] = (float)d->A[i]) : (void)(((double *)A)[i] = d->A[i]);
    for (size_t i = 0; i < d->nb; i++)
        dt == TG_F32 ? (void)(((float *)B)[i] = (float)d->B[i]) : (void)(((double *)B)[i] = d->B[i]);
    for (size_t i = 0; i < d->nc; i++)
        dt == TG_F32 ? (void)(((float *)C)[i] = (float)d->C0[i])
                     : (void)(((double *)C)[i] = d->C0[i]);
    for (int64_t j = 0; j < c->N; j++)
        dt == TG_F32 ? (void)(((float *)bias)[j] = (float)d->bias[j])
                     : (void)(((double *)bias)[j] = d->bias[j]);
    if (P)
        memset(P, 0, es * d->nc);
    tg__gemm_epi epi = {c->bias ? bias : NULL, c->act, P};
    const tg__gemm_epi *e = (c->bias || c->act || P) ? &epi : NULL;
    if (dt == TG_F32)
        tg__gemm_isa_f32(isa, nt, c->ta, c->tb, c->M, c->N, c->K, A, c->lda, B, c->ldb, C, c->ldc,
                         c->acc, ws, e);
    else
        tg__gemm_isa_f64(isa, nt, c->ta, c->tb, c->M, c->N, c->K, A, c->lda, B, c->ldb, C, c->ldc,
                         c->acc, ws, e);
    for (size_t i = 0; i < d->nc; i++) {
        out[i] = dt == TG_F32 ? ((float *)C)[i] : ((double *)C)[i];
        if (pre)
            pre[i] = dt == TG_F32 ? ((float *)P)[i] : ((double *)P)[i];
    }
    free(A);
    free(B);
    free(C);
    free(P);
    free(bias);
    free(ws);
}

static double opA(const gcase *c, const gdata *d, int64_t i, int64_t k)
{
    return c->ta ? d->A[k * c->lda + i] : d->A[i * c->lda + k];
}
static double opB(const gcase *c, const gdata *d, int64_t k, int64_t j)
{
    return c->tb ? d->B[j * c->ldb + k] : d->B[k * c->ldb + j];
}

/* Check out against the exact product (long double), within the error bound of the file
 * comment (0 for integer data); columns beyond N (padding of ldc) must be untouched. */
static void check_against_reference(const gcase *c, const gdata *d, tg_dtype dt,
                                    const double *out)
{
    double eps = dt == TG_F32 ? FLT_EPSILON / 2 : DBL_EPSILON / 2;
    int64_t kc = 256; /* KC32, KC64 in ops/gemm.c */
    for (int64_t i = 0; i < c->M; i++) {
        for (int64_t j = 0; j < c->ldc; j++) {
            double got = out[i * c->ldc + j], c0 = d->C0[i * c->ldc + j];
            if (dt == TG_F32)
                c0 = (float)c0;
            if (j >= c->N) {
                ck_assert_msg(got == c0, "padding column %lld of row %lld changed",
                              (long long)j, (long long)i);
                continue;
            }
            long double s = 0, mag = 0;
            for (int64_t k = 0; k < c->K; k++) {
                double a = opA(c, d, i, k), b = opB(c, d, k, j);
                if (dt == TG_F32) {
                    a = (float)a;
                    b = (float)b;
                }
                s += (long double)a * b;
                mag += fabsl((long double)a * b);
            }
            double bj = dt == TG_F32 ? (float)d->bias[j] : d->bias[j];
            if (c->acc) {
                s += c0;
                mag += fabs(c0);
            }
            if (c->bias) {
                s += bj;
                mag += fabs(bj);
            }
            if (c->act == TG__EPI_RELU && s < 0)
                s = 0;
            double tol = c->integer ? 0 : (double)((c->K + c->K / kc + 3) * eps * mag);
            if (c->act == TG__EPI_GELU) /* checked against pre below */
                continue;
            ck_assert_msg(fabs(got - (double)s) <= tol,
                          "%s M %lld N %lld K %lld ta %d tb %d acc %d: C[%lld,%lld] = %.17g, "
                          "exact %.17g, bound %.3g",
                          dt == TG_F32 ? "f32" : "f64", (long long)c->M, (long long)c->N,
                          (long long)c->K, c->ta, c->tb, c->acc, (long long)i, (long long)j,
                          got, (double)s, tol);
        }
    }
}

static gcase random_case(int idx)
{
    static const int64_t Ms[] = {1, 5, 12, 13, 25, 61};
    static const int64_t Ns[] = {1, 7, 16, 32, 33, 86};
    static const int64_t Ks[] = {1, 3, 127, 128, 129, 256, 257, 300};
    gcase c;
    memset(&c, 0, sizeof c);
    c.M = Ms[(idx * 7 + (int)(urand() * 6)) % 6];
    c.N = Ns[(idx * 5 + (int)(urand() * 6)) % 6];
    c.K = Ks[(idx * 3 + (int)(urand() * 8)) % 8];
    c.ta = idx & 1;
    c.tb = (idx >> 1) & 1;
    c.acc = (idx >> 2) & 1;
    c.integer = (idx % 5) == 0;
    int64_t pad = (int64_t)(urand() * 3);
    c.lda = (c.ta ? c.M : c.K) + pad;
    c.ldb = (c.tb ? c.K : c.N) + pad;
    c.ldc = c.N + (int64_t)(urand() * 3);
    return c;
}

START_TEST(test_against_reference)
{
    tg_dtype dt = tu_dtypes[_i];
    int n = getenv("TG_UNDER_VALGRIND") ? 16 : 64;
    for (int idx = 0; idx < n; idx++) {
        gcase c = random_case(idx);
        gdata d;
        make_data(&c, &d);
        double *out = malloc(sizeof(double) * d.nc);
        run(&c, &d, dt, TG__ISA_BEST, 1, out, NULL);
        check_against_reference(&c, &d, dt, out);
        free(out);
        free_data(&d);
    }
}
END_TEST

/* Every kernel family this CPU has, on the same cases: each within the bound; AVX-512 and AVX2
 * bitwise equal. */
START_TEST(test_kernel_families)
{
    tg_dtype dt = tu_dtypes[_i];
    int best = tg__gemm_isa();
    int n = getenv("TG_UNDER_VALGRIND") ? 8 : 32;
    for (int idx = 0; idx < n; idx++) {
        gcase c = random_case(idx + 1000);
        gdata d;
        make_data(&c, &d);
        double *ref = malloc(sizeof(double) * d.nc), *out = malloc(sizeof(double) * d.nc);
        run(&c, &d, dt, TG__ISA_BEST, 1, ref, NULL);
        for (int isa = TG__ISA_PORTABLE; isa <= best; isa++) {
            run(&c, &d, dt, isa, 1, out, NULL);
            check_against_reference(&c, &d, dt, out);
            if (isa != TG__ISA_PORTABLE && best != TG__ISA_PORTABLE)
                ck_assert_msg(memcmp(ref, out, sizeof(double) * d.nc) == 0,
                              "kernel family %d differs from %d (case %d)", isa, best, idx);
        }
        free(ref);
        free(out);
        free_data(&d);
    }
}
END_TEST

/* The SIMD kernels are compiled by every x86-64 compiler the project builds with (GCC and
 * clang) and picked from CPUID: a CPU with AVX2 and FMA never runs the portable kernels. */
START_TEST(test_simd_selected)
{
#if defined(__x86_64__) && defined(__GNUC__)
    __builtin_cpu_init();
    bool fma = __builtin_cpu_supports("fma");
    int want = fma && __builtin_cpu_supports("avx512f") ? TG__ISA_AVX512
               : fma && __builtin_cpu_supports("avx2") ? TG__ISA_AVX2
                                                       : TG__ISA_PORTABLE;
    ck_assert_msg(tg__gemm_isa() == want, "kernel family %d on a CPU that runs %d",
                  tg__gemm_isa(), want);
#endif
}
END_TEST

/* Large enough to be split between threads (by columns and by rows). */
/* Shape sh of a thread-invariance table in layout lay (bit 0: A transposed, bit 1: B):
 * shape 1 accumulates, shape 2 has bias and ReLU. */
static gcase thread_case(const int64_t shape[3], int sh, int lay)
{
    gcase c;
    memset(&c, 0, sizeof c);
    c.M = shape[0];
    c.N = shape[1];
    c.K = shape[2];
    c.ta = lay & 1;
    c.tb = lay >> 1;
    c.acc = sh == 1;
    c.lda = c.ta ? c.M : c.K;
    c.ldb = c.tb ? c.K : c.N;
    c.ldc = c.N;
    c.bias = sh == 2;
    c.act = sh == 2 ? TG__EPI_RELU : TG__EPI_NONE;
    return c;
}

START_TEST(test_thread_invariance)
{
    tg_dtype dt = tu_dtypes[_i];
    static const int64_t shapes[][3] = {{150, 301, 300}, {301, 40, 260}, {37, 530, 20}};
    int nts[] = {2, 3, 8};
    for (int s = 0; s < 3; s++) {
        for (int lay = 0; lay < 4; lay++) {
            gcase c = thread_case(shapes[s], s, lay);
            gdata d;
            make_data(&c, &d);
            double *ref = malloc(sizeof(double) * d.nc), *out = malloc(sizeof(double) * d.nc);
            run(&c, &d, dt, TG__ISA_BEST, 1, ref, NULL);
            if (lay == 0)
                check_against_reference(&c, &d, dt, ref);
            for (int t = 0; t < 3; t++) {
                run(&c, &d, dt, TG__ISA_BEST, nts[t], out, NULL);
                ck_assert_msg(memcmp(ref, out, sizeof(double) * d.nc) == 0,
                              "shape %d layout %d: %d threads differ from 1", s, lay, nts[t]);
            }
            free(ref);
            free(out);
            free_data(&d);
        }
    }
}
END_TEST

/* For K <= KC, accumulating equals adding the separately computed product. */
START_TEST(test_accumulate_equals_add)
{
    tg_dtype dt = tu_dtypes[_i];
    for (int idx = 0; idx < 16; idx++) {
        gcase c = random_case(idx + 2000);
        c.K = 1 + (int64_t)(urand() * 120);
        c.lda = c.ta ? c.M : c.K;
        c.ldb = c.tb ? c.K : c.N;
        c.ldc = c.N;
        c.integer = false;
        gdata d;
        make_data(&c, &d);
        double *sum = malloc(sizeof(double) * d.nc), *alone = malloc(sizeof(double) * d.nc);
        c.acc = true;
        run(&c, &d, dt, TG__ISA_BEST, 1, sum, NULL);
        c.acc = false;
        run(&c, &d, dt, TG__ISA_BEST, 1, alone, NULL);
        for (size_t i = 0; i < d.nc; i++) {
            double expect = dt == TG_F32 ? (double)((float)d.C0[i] + (float)alone[i])
                                         : d.C0[i] + alone[i];
            ck_assert_msg(sum[i] == expect, "element %zu: %.17g vs %.17g", i, sum[i], expect);
        }
        free(sum);
        free(alone);
        free_data(&d);
    }
}
END_TEST

/* Epilogue: bias + ReLU bitwise equals bias then max(., 0); GELU keeps the pre-activation
 * (bitwise the biased product) and applies exact GELU to it. */
START_TEST(test_epilogue)
{
    tg_dtype dt = tu_dtypes[_i];
    for (int idx = 0; idx < 12; idx++) {
        gcase c = random_case(idx + 3000);
        c.acc = false;
        c.bias = idx % 3 != 2;
        gdata d;
        make_data(&c, &d);
        size_t n = d.nc;
        double *plain = malloc(sizeof(double) * n), *relu = malloc(sizeof(double) * n);
        double *gelu = malloc(sizeof(double) * n), *pre = malloc(sizeof(double) * n);
        c.act = TG__EPI_NONE;
        run(&c, &d, dt, TG__ISA_BEST, 1, plain, NULL);
        check_against_reference(&c, &d, dt, plain);
        c.act = TG__EPI_RELU;
        run(&c, &d, dt, TG__ISA_BEST, 1, relu, NULL);
        c.act = TG__EPI_GELU;
        run(&c, &d, dt, TG__ISA_BEST, 1, gelu, pre);
        for (int64_t i = 0; i < c.M; i++)
            for (int64_t j = 0; j < c.N; j++) {
                size_t e = (size_t)(i * c.ldc + j);
                ck_assert(relu[e] == (plain[e] > 0 ? plain[e] : 0));
                ck_assert(pre[e] == plain[e]);
                double v = pre[e], g = 0.5 * v * (1.0 + erf(v * 0.70710678118654752440));
                if (dt == TG_F32)
                    g = (float)g;
                ck_assert_msg(gelu[e] == g, "gelu %.17g vs %.17g", gelu[e], g);
            }
        free(plain);
        free(relu);
        free(gelu);
        free(pre);
        free_data(&d);
    }
}
END_TEST

/* Degenerate sizes: K = 0 gives C = 0 (or C0 when accumulating, bias with the epilogue);
 * M = 0 or N = 0 touch nothing. */
START_TEST(test_degenerate)
{
    float A[4] = {1, 2, 3, 4}, B[4] = {1, 1, 1, 1}, C[4] = {5, 5, 5, 5}, bias[2] = {7, 8};
    void *ws = aligned_alloc(64, tg__gemm_ws_bytes(TG_F32, 2));
    ck_assert(ws != NULL);
    tg__gemm_f32(1, false, false, 2, 2, 0, A, 1, B, 2, C, 2, false, ws);
    for (int i = 0; i < 4; i++)
        ck_assert(C[i] == 0);
    C[0] = 3;
    tg__gemm_f32(2, false, false, 2, 2, 0, A, 1, B, 2, C, 2, true, ws);
    ck_assert(C[0] == 3 && C[1] == 0);
    tg__gemm_epi epi = {bias, TG__EPI_NONE, NULL};
    tg__gemm_ex_f32(1, false, false, 2, 2, 0, A, 1, B, 2, C, 2, false, ws, &epi);
    ck_assert(C[0] == 7 && C[1] == 8 && C[2] == 7 && C[3] == 8);
    tg__gemm_f32(1, false, false, 0, 2, 2, A, 2, B, 2, C, 2, false, ws);
    tg__gemm_f32(1, false, false, 2, 0, 2, A, 2, B, 2, C, 2, false, ws);
    ck_assert(C[0] == 7 && C[3] == 8);
    free(ws);
}
END_TEST

/* ---- bf16 products (ops/gemm_bf16.c) ---------------------------------------------------- */

static double bf16v(double x) { return tg__bf16_to_f32(tg__bf16_from_f32((float)x)); }

/* tg__gemm_isa_bf16 on f32 copies of the data; result as doubles in out. */
static void run_bf16(const gcase *c, const gdata *d, int isa, int nt, double *out)
{
    float *A = malloc(sizeof(float) * d->na), *B = malloc(sizeof(float) * d->nb);
    float *C = malloc(sizeof(float) * d->nc), *bias = malloc(sizeof(float) * (size_t)c->N);
    void *ws = aligned_alloc(64, tg__gemm_bf16_ws_bytes_nk(nt, c->N, c->K));
    ck_assert(A && B && C && bias && ws);
    for (size_t i = 0; i < d->na; i++)
        A[i] = (float)d->A[i];
    for (size_t i = 0; i < d->nb; i++)
        B[i] = (float)d->B[i];
    for (size_t i = 0; i < d->nc; i++)
        C[i] = (float)d->C0[i];
    for (int64_t j = 0; j < c->N; j++)
        bias[j] = (float)d->bias[j];
    tg__gemm_epi epi = {c->bias ? bias : NULL, c->act, NULL};
    tg__gemm_isa_bf16(isa, nt, c->ta, c->tb, c->M, c->N, c->K, A, c->lda, B, c->ldb, C, c->ldc,
                      c->acc, ws, (c->bias || c->act) ? &epi : NULL);
    for (size_t i = 0; i < d->nc; i++)
        out[i] = C[i];
    free(A);
    free(B);
    free(C);
    free(bias);
    free(ws);
}

/* out against the exact product of the bf16-rounded operands (f32 C0 and bias): within
 * (K + K / 512 + 3) eps_f32 (sum |a b| + |C0| + |bias|), exact for integer data. */
static void check_bf16(const gcase *c, const gdata *d, const double *out)
{
    double eps = FLT_EPSILON / 2;
    for (int64_t i = 0; i < c->M; i++)
        for (int64_t j = 0; j < c->ldc; j++) {
            double got = out[i * c->ldc + j], c0 = (float)d->C0[i * c->ldc + j];
            if (j >= c->N) {
                ck_assert_msg(got == c0, "bf16: padding column %lld changed", (long long)j);
                continue;
            }
            long double sum = 0, mag = 0;
            for (int64_t k = 0; k < c->K; k++) {
                long double p = (long double)bf16v(opA(c, d, i, k)) * bf16v(opB(c, d, k, j));
                sum += p;
                mag += fabsl(p);
            }
            if (c->acc) {
                sum += c0;
                mag += fabs(c0);
            }
            if (c->bias) {
                double bj = (float)d->bias[j];
                sum += bj;
                mag += fabs(bj);
            }
            if (c->act == TG__EPI_RELU && sum < 0)
                sum = 0;
            double tol = c->integer ? 0 : (double)((c->K + c->K / 512 + 3) * eps * mag);
            ck_assert_msg(fabs(got - (double)sum) <= tol,
                          "bf16 M %lld N %lld K %lld ta %d tb %d acc %d: C[%lld,%lld] = %.17g, "
                          "exact %.17g, bound %.3g", (long long)c->M, (long long)c->N,
                          (long long)c->K, c->ta, c->tb, c->acc, (long long)i, (long long)j, got,
                          (double)sum, tol);
        }
}

/* Rounding to bf16: nearest, ties to even, overflow to infinity, NaN kept. */
START_TEST(test_bf16_rounding)
{
    static const struct {
        uint32_t in;
        uint16_t out;
    } cases[] = {
        {0x3f800000u, 0x3f80}, /* 1 */
        {0x3f808000u, 0x3f80}, /* halfway, even below */
        {0x3f818000u, 0x3f82}, /* halfway, even above */
        {0x3f808001u, 0x3f81}, /* above halfway */
        {0xbf807fffu, 0xbf80}, /* below halfway, negative */
        {0x7f7fffffu, 0x7f80}, /* the largest float rounds to infinity */
        {0xff800000u, 0xff80}, /* -inf */
        {0x00000001u, 0x0000}, /* the smallest subnormal rounds to 0 */
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        float x;
        memcpy(&x, &cases[i].in, sizeof x);
        ck_assert_msg(tg__bf16_from_f32(x) == cases[i].out, "0x%08x -> 0x%04x, want 0x%04x",
                      (unsigned)cases[i].in, (unsigned)tg__bf16_from_f32(x),
                      (unsigned)cases[i].out);
    }
    uint16_t n = tg__bf16_from_f32(NAN);
    ck_assert((n & 0x7f80) == 0x7f80 && (n & 0x7f) != 0);
}
END_TEST

/* Random shapes and layouts (edges of every block; K across the 512-deep chunk), integer data
 * exactly: each within the bound, with the kernel this CPU picks and the portable one; the two
 * bitwise equal (no subnormal values here). */
START_TEST(test_bf16_against_reference)
{
    int n = getenv("TG_UNDER_VALGRIND") ? 16 : 64;
    for (int idx = 0; idx < n; idx++) {
        gcase c = random_case(idx + 3000);
        if (idx % 7 == 3)
            c.K = 513 + idx % 5;
        c.lda = (c.ta ? c.M : c.K) + idx % 3;
        c.ldb = (c.tb ? c.K : c.N) + idx % 2;
        c.bias = idx % 4 == 1 && !c.acc;
        c.act = idx % 8 == 1 && !c.acc ? TG__EPI_RELU : TG__EPI_NONE;
        gdata d;
        make_data(&c, &d);
        double *best = malloc(sizeof(double) * d.nc), *port = malloc(sizeof(double) * d.nc);
        run_bf16(&c, &d, TG__ISA_BEST, 1, best);
        run_bf16(&c, &d, TG__ISA_PORTABLE, 1, port);
        check_bf16(&c, &d, best);
        check_bf16(&c, &d, port);
        ck_assert_msg(memcmp(best, port, sizeof(double) * d.nc) == 0,
                      "case %d: the AVX512_BF16 and portable kernels differ", idx);
        free(best);
        free(port);
        free_data(&d);
    }
}
END_TEST

/* Split between 2, 3 and 8 threads (by columns and by rows): the bits of 1 thread. */
START_TEST(test_bf16_threads)
{
    static const int64_t shapes[][3] = {{150, 301, 600}, {301, 40, 260}, {37, 530, 20}};
    int nts[] = {2, 3, 8};
    for (int sh = 0; sh < 3; sh++)
        for (int lay = 0; lay < 4; lay++) {
            gcase c = thread_case(shapes[sh], sh, lay);
            gdata d;
            make_data(&c, &d);
            double *ref = malloc(sizeof(double) * d.nc), *out = malloc(sizeof(double) * d.nc);
            run_bf16(&c, &d, TG__ISA_BEST, 1, ref);
            if (lay == 0)
                check_bf16(&c, &d, ref);
            for (int t = 0; t < 3; t++) {
                run_bf16(&c, &d, TG__ISA_BEST, nts[t], out);
                ck_assert_msg(memcmp(ref, out, sizeof(double) * d.nc) == 0,
                              "bf16 shape %d layout %d: %d threads differ from 1", sh, lay,
                              nts[t]);
            }
            free(ref);
            free(out);
            free_data(&d);
        }
}
END_TEST

/* Products big enough for every thread of 2, 3 and 8 (the thread count a product gets depends
 * on its flops): many rows over several column blocks and K chunks (the shared-B task schedule:
 * pack tasks, row groups, two buffers, a row group's K chunks in order), and few rows over many
 * column panels (column groups); with accumulation, bias + ReLU, and GELU keeping the
 * pre-activation. f32, f64 and bf16: the bits of 1 thread. */
START_TEST(test_thread_invariance_schedules)
{
    static const int64_t shapes[][3] = {{250, 1100, 600}, {40, 3000, 300}, {1000, 200, 100}};
    int nts[] = {2, 3, 8};
    for (int sh = 0; sh < 3; sh++)
        for (int lay = 0; lay < 4; lay++) {
            gcase c = thread_case(shapes[sh], sh, lay);
            if (sh == 2 && lay >= 2)
                c.act = TG__EPI_GELU;
            gdata d;
            make_data(&c, &d);
            double *ref = malloc(sizeof(double) * d.nc), *out = malloc(sizeof(double) * d.nc);
            double *pref = malloc(sizeof(double) * d.nc), *pout = malloc(sizeof(double) * d.nc);
            for (int v = 0; v < 3; v++) { /* f32, f64, bf16 */
                bool keep = c.act == TG__EPI_GELU && v < 2;
                if (v < 2)
                    run(&c, &d, v ? TG_F64 : TG_F32, TG__ISA_BEST, 1, ref, keep ? pref : NULL);
                else
                    run_bf16(&c, &d, TG__ISA_BEST, 1, ref);
                for (int t = 0; t < 3; t++) {
                    if (v < 2)
                        run(&c, &d, v ? TG_F64 : TG_F32, TG__ISA_BEST, nts[t], out,
                            keep ? pout : NULL);
                    else
                        run_bf16(&c, &d, TG__ISA_BEST, nts[t], out);
                    ck_assert_msg(memcmp(ref, out, sizeof(double) * d.nc) == 0,
                                  "shape %d layout %d variant %d: %d threads differ from 1", sh,
                                  lay, v, nts[t]);
                    ck_assert(!keep || memcmp(pref, pout, sizeof(double) * d.nc) == 0);
                }
            }
            free(ref);
            free(out);
            free(pref);
            free(pout);
            free_data(&d);
        }
}
END_TEST

int main(void)
{
    Suite *s = suite_create("gemm");
    TCase *tc = tu_tcase(s, "gemm", 300);
    tcase_add_loop_test(tc, test_against_reference, 0, 2);
    tcase_add_loop_test(tc, test_kernel_families, 0, 2);
    tcase_add_loop_test(tc, test_thread_invariance, 0, 2);
    tcase_add_loop_test(tc, test_accumulate_equals_add, 0, 2);
    tcase_add_loop_test(tc, test_epilogue, 0, 2);
    tcase_add_test(tc, test_degenerate);
    tcase_add_test(tc, test_simd_selected);
    tcase_add_test(tc, test_bf16_rounding);
    tcase_add_test(tc, test_bf16_against_reference);
    tcase_add_test(tc, test_bf16_threads);
    tcase_add_test(tc, test_thread_invariance_schedules);
    return tu_run(s);
}
