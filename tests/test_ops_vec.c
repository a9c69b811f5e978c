/*
 * test_ops_vec.c - the vectorized kernels (src/core/vec.h) against plain scalar
 * references: the vectorizable exp against libm (a dense sweep, special values), the row
 * kernels (max, exp-sum, dot) at odd sizes with inf, -inf, NaN, subnormals and huge values,
 * the fixed-order column sums (bitwise equal to the scalar column loop, for 1, 2, 3 and 8
 * threads), the finiteness scan (same index as a scalar scan), and softmax / log_softmax /
 * relu backward through the op graph at odd row lengths, fully masked rows included.
 */
#include "testutil.h"
#include "vec.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const int64_t k_sizes[] = {1, 7, 15, 16, 17, 33, 1000};
#define N_SIZES ((int)(sizeof k_sizes / sizeof k_sizes[0]))

static int64_t ulp_f32(float a, float b)
{
    if (a == b || (a != a && b != b))
        return 0;
    if (a != a || b != b)
        return INT32_MAX;
    int32_t ia, ib;
    memcpy(&ia, &a, 4);
    memcpy(&ib, &b, 4);
    int64_t la = ia < 0 ? (int64_t)INT32_MIN - ia : ia, lb = ib < 0 ? (int64_t)INT32_MIN - ib : ib;
    return la > lb ? la - lb : lb - la;
}

static int64_t ulp_f64(double a, double b)
{
    if (a == b || (a != a && b != b))
        return 0;
    if (a != a || b != b)
        return INT64_MAX;
    int64_t ia, ib;
    memcpy(&ia, &a, 8);
    memcpy(&ib, &b, 8);
    if ((ia < 0) != (ib < 0))
        return INT64_MAX; /* exp is never negative: a sign difference is a bug */
    return ia > ib ? ia - ib : ib - ia;
}

/* ---- exp ------------------------------------------------------------------------------------ */
/* Every float bit pattern with stride 61 (70 million, every 4096th under valgrind), both signs:
 * at most 1 ulp from expf (the full 2^32 sweep measured 1, docs/kernels.md). */
START_TEST(test_expf_sweep)
{
    uint64_t stride = tu_under_valgrind() ? 4093 : 61;
    int64_t worst = 0;
    float at = 0;
    for (uint64_t u = 0; u < 0x100000000ull; u += stride) {
        uint32_t b = (uint32_t)u;
        float x;
        memcpy(&x, &b, 4);
        int64_t e = ulp_f32(tg__expf(x), expf(x));
        if (e > worst) {
            worst = e;
            at = x;
        }
    }
    ck_assert_msg(worst <= 1, "tg__expf is %lld ulp from expf at %a", (long long)worst, at);
}
END_TEST

/* 4 million doubles over [-760, 720] (and scaled towards 0): at most 1 ulp from exp. */
START_TEST(test_exp_sweep)
{
    int64_t n = tu_big(4000000, 100000), worst = 0;
    double at = 0;
    uint64_t s = 88172645463325252ull;
    for (int64_t i = 0; i < n; i++) {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        double x = -760.0 + 1480.0 * ((double)(s >> 11) * 0x1p-53);
        if (i % 4 == 1)
            x = ldexp(x, -(int)(s % 60));
        int64_t e = ulp_f64(tg__exp(x), exp(x));
        if (e > worst) {
            worst = e;
            at = x;
        }
    }
    ck_assert_msg(worst <= 1, "tg__exp is %lld ulp from exp at %a", (long long)worst, at);
}
END_TEST

START_TEST(test_exp_special)
{
    const double xd[] = {-INFINITY, INFINITY, NAN, 0.0, -0.0, 709.782712893384, 709.79,
                         -708.4, -745.1, -745.2, -1e300, 1e300, 1e-310, -1e-310};
    for (size_t i = 0; i < sizeof xd / sizeof xd[0]; i++)
        ck_assert_msg(ulp_f64(tg__exp(xd[i]), exp(xd[i])) <= 1, "exp(%a): %a vs %a", xd[i],
                      tg__exp(xd[i]), exp(xd[i]));
    const float xf[] = {-INFINITY, INFINITY, NAN, 0.0f, -0.0f, 88.7228f, 88.73f, -87.4f,
                        -103.9f, -104.0f, -1e30f, 1e30f, 1e-40f, -1e-40f};
    for (size_t i = 0; i < sizeof xf / sizeof xf[0]; i++)
        ck_assert_msg(ulp_f32(tg__expf(xf[i]), expf(xf[i])) <= 1, "expf(%a): %a vs %a",
                      (double)xf[i], (double)tg__expf(xf[i]), (double)expf(xf[i]));
    ck_assert(tg__exp(-INFINITY) == 0 && tg__expf(-INFINITY) == 0);
    ck_assert(isinf(tg__exp(INFINITY)) && isnan(tg__exp(NAN)) && isnan(tg__expf(NAN)));
}
END_TEST

/* ---- row kernels ---------------------------------------------------------------------------- */
static double rnd(uint64_t *s)
{
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return (double)(*s >> 11) * 0x1p-53;
}

/* max, exp-sum (with and without stored exps) and dots of random rows, f32 and f64, against
 * double loops with libm; a NaN or +inf anywhere, an all -inf row, subnormals and huge values. */
START_TEST(test_rows)
{
    uint64_t s = 12345;
    for (int k = 0; k < N_SIZES; k++) {
        int64_t L = k_sizes[k];
        float *xf = malloc(sizeof(float) * (size_t)L * 3);
        double *xd = malloc(sizeof(double) * (size_t)L * 3);
        ck_assert(xf && xd);
        float *ef = xf + L, *bf = xf + 2 * L;
        double *ed = xd + L, *bd = xd + 2 * L;
        for (int variant = 0; variant < 5; variant++) {
            for (int64_t j = 0; j < L; j++) {
                double v = 20 * rnd(&s) - 10;
                if (variant == 1 && j % 3 == 0)
                    v = -INFINITY;
                if (variant == 2)
                    v = j % 2 ? 1e-310 : -1e-41; /* subnormal (f64; f32 too for the odd) */
                if (variant == 3)
                    v = j % 2 ? 3e38 : -3e38;
                if (variant == 4)
                    v = -INFINITY;
                xd[j] = v;
                xf[j] = (float)v;
                bd[j] = 2 * rnd(&s) - 1;
                bf[j] = (float)bd[j];
            }
            double md = -INFINITY, mf = -INFINITY;
            for (int64_t j = 0; j < L; j++) {
                md = xd[j] > md ? xd[j] : md;
                mf = xf[j] > mf ? xf[j] : mf;
            }
            ck_assert(tg__row_max_f64(xd, L) == md);
            ck_assert(tg__row_max_f32(xf, L) == (float)mf);
            if (md == -INFINITY)
                continue; /* all -inf (variant 4, or L = 1 in variant 1): callers stop here */
            double sd = 0, sf = 0, df = 0;
            for (int64_t j = 0; j < L; j++) {
                sd += exp(xd[j] - md);
                sf += exp((double)(xf[j] - (float)mf));
                df += (double)bf[j] * (double)bf[j];
            }
            double gd = tg__row_expsum_f64(xd, L, md, ed);
            float gf = tg__row_expsum_f32(xf, L, (float)mf, ef);
            ck_assert_msg(fabs(gd - sd) <= 1e-14 * sd, "L %lld: %g vs %g", (long long)L, gd, sd);
            ck_assert_msg(fabs(gf - sf) <= 1e-6 * sf, "L %lld: %g vs %g", (long long)L, gf, sf);
            ck_assert(tg__row_expsum_f64(xd, L, md, NULL) == gd);
            ck_assert(tg__row_expsum_f32(xf, L, (float)mf, NULL) == gf);
            for (int64_t j = 0; j < L; j++) {
                ck_assert(ed[j] == tg__exp(xd[j] - md));
                ck_assert(ef[j] == tg__expf(xf[j] - (float)mf));
            }
            double got = tg__row_dot_f32(bf, bf, L);
            ck_assert_msg(fabs(got - df) <= 1e-6 * df, "dot %g vs %g", got, df);
            if (variant == 0) {
                double sum = 0, dot = 0;
                for (int64_t j = 0; j < L; j++) {
                    sum += xd[j];
                    dot += xd[j] * bd[j];
                }
                ck_assert(fabs(tg__row_dot_f64(xd, NULL, L) - sum) <= 1e-13 * (1 + fabs(sum)) * L);
                ck_assert(fabs(tg__row_dot_f64(xd, bd, L) - dot) <= 1e-13 * (1 + fabs(dot)) * L);
            }
        }
        /* NaN anywhere makes the max NaN */
        for (int64_t j = 0; j < L; j++)
            xd[j] = (double)j;
        xd[L / 2] = NAN;
        ck_assert(isnan(tg__row_max_f64(xd, L)));
        free(xf);
        free(xd);
    }
}
END_TEST

/* ---- column sums ---------------------------------------------------------------------------- */
/* Bitwise equal to the scalar column loop (sum from 0 over rows in order, then added), for 1, 2,
 * 3 and 8 threads, at odd widths, a row stride larger than the width, and a size big enough to
 * take the parallel path. */
START_TEST(test_sum_rows)
{
    const int nts[] = {1, 2, 3, 8};
    uint64_t s = 777;
    for (int k = 0; k < N_SIZES + 1; k++) {
        int64_t C = k < N_SIZES ? k_sizes[k] : 1500, R = k < N_SIZES ? 37 : tu_big(200, 40);
        int64_t ld = C + 3;
        float *xf = malloc(sizeof(float) * (size_t)(R * ld));
        double *xd = malloc(sizeof(double) * (size_t)(R * ld));
        float *of = malloc(sizeof(float) * (size_t)C), *rf = malloc(sizeof(float) * (size_t)C);
        double *od = malloc(sizeof(double) * (size_t)C), *rd = malloc(sizeof(double) * (size_t)C);
        ck_assert(xf && xd && of && rf && od && rd);
        for (int64_t i = 0; i < R * ld; i++) {
            xd[i] = 2 * rnd(&s) - 1;
            xf[i] = (float)xd[i];
        }
        if (C > 5) {
            xf[2 * ld + 5] = INFINITY;
            xd[3 * ld + 4] = NAN;
        }
        for (int64_t c = 0; c < C; c++) {
            float af = 0;
            double ad = 0;
            for (int64_t r = 0; r < R; r++) {
                af += xf[r * ld + c];
                ad += xd[r * ld + c];
            }
            rf[c] = 0.5f + af;
            rd[c] = 0.5 + ad;
        }
        for (int t = 0; t < 4; t++) {
            for (int64_t c = 0; c < C; c++) {
                of[c] = 0.5f;
                od[c] = 0.5;
            }
            tg__sum_rows_f32(NULL, nts[t], R, C, xf, ld, of);
            tg__sum_rows_f64(NULL, nts[t], R, C, xd, ld, od);
            ck_assert_msg(memcmp(of, rf, sizeof(float) * (size_t)C) == 0, "f32 C %lld nt %d",
                          (long long)C, nts[t]);
            ck_assert_msg(memcmp(od, rd, sizeof(double) * (size_t)C) == 0, "f64 C %lld nt %d",
                          (long long)C, nts[t]);
        }
        free(xf);
        free(xd);
        free(of);
        free(rf);
        free(od);
        free(rd);
    }
}
END_TEST

/* ---- finiteness scan ------------------------------------------------------------------------ */
START_TEST(test_first_nonfinite)
{
    const int64_t n = 1000;
    float xf[1000];
    double xd[1000];
    const double bad[] = {NAN, INFINITY, -INFINITY};
    for (int64_t pos = 0; pos < n; pos += 37) {
        for (int b = 0; b < 3; b++) {
            for (int64_t i = 0; i < n; i++) {
                xf[i] = i % 5 ? 1e-40f : 3e38f;
                xd[i] = i % 5 ? 1e-310 : 1e308;
            }
            ck_assert_int_eq(tg__first_nonfinite_f32(xf, n, false), -1);
            ck_assert_int_eq(tg__first_nonfinite_f64(xd, n, false), -1);
            xf[pos] = (float)bad[b];
            xd[pos] = bad[b];
            xf[n - 1] = NAN;
            xd[n - 1] = NAN;
            ck_assert_int_eq(tg__first_nonfinite_f32(xf, n, false), pos);
            ck_assert_int_eq(tg__first_nonfinite_f64(xd, n, false), pos);
            int64_t want = b == 2 ? n - 1 : pos; /* -inf allowed: the NaN at the end */
            ck_assert_int_eq(tg__first_nonfinite_f32(xf, n, true), want);
            ck_assert_int_eq(tg__first_nonfinite_f64(xd, n, true), want);
        }
    }
    ck_assert_int_eq(tg__first_nonfinite_f32(xf, 0, false), -1);
}
END_TEST

/* ---- ops through the graph ------------------------------------------------------------------ */
/* softmax and log_softmax of (3, L) rows: a random row, a row with -inf entries, an all -inf
 * row (softmax zeros, log_softmax -inf, no gradient), against double references; backward
 * with a random upstream gradient. */
START_TEST(test_softmax_rows)
{
    tg_dtype dt = tu_dtypes[_i % 2];
    int64_t L = k_sizes[_i / 2];
    double tol = dt == TG_F32 ? 2e-6 : 1e-14;
    int64_t n = 3 * L;
    double *x = malloc(sizeof(double) * (size_t)n * 4), *dy = x + n, *ys = x + 2 * n,
           *yl = x + 3 * n;
    ck_assert_ptr_nonnull(x);
    uint64_t s = 99 + (uint64_t)L;
    for (int64_t i = 0; i < n; i++) {
        x[i] = 8 * rnd(&s) - 4;
        dy[i] = rnd(&s) - 0.5;
        if (i >= L && i < 2 * L && i % 2)
            x[i] = -INFINITY;
        if (i >= 2 * L)
            x[i] = -INFINITY;
    }
    if (dt == TG_F32)
        for (int64_t i = 0; i < n; i++)
            x[i] = (double)(float)x[i];
    for (int r = 0; r < 3; r++) {
        const double *xr = x + r * L;
        double m = -INFINITY, sum = 0;
        for (int64_t j = 0; j < L; j++)
            m = xr[j] > m ? xr[j] : m;
        for (int64_t j = 0; j < L; j++)
            sum += m == -INFINITY ? 0 : exp(xr[j] - m);
        for (int64_t j = 0; j < L; j++) {
            ys[r * L + j] = m == -INFINITY ? 0 : exp(xr[j] - m) / sum;
            yl[r * L + j] = m == -INFINITY ? -INFINITY : (xr[j] - m) - log(sum);
        }
    }
    tg_ctx *ctx = tu_ctx_new();
    tg_tensor *xt = tu_in(ctx, dt, TG_DIMS(3, L), "x", x);
    tg_set_requires_grad(xt, true);
    tg_tensor *y1 = tg_softmax(ctx, xt), *y2 = tg_log_softmax(ctx, xt);
    tg_tensor *outs[2] = {y1, y2};
    tg_graph *g = tg_graph_new(ctx, outs, 2);
    ck_assert_ptr_nonnull(g);
    ck_assert_int_eq(tg_graph_forward(g), TG_OK);
    for (int64_t i = 0; i < n; i++) {
        double a = tg_get(y1, i), b = tg_get(y2, i);
        ck_assert_msg(fabs(a - ys[i]) <= tol * (1 + fabs(ys[i])), "softmax[%lld] %g vs %g",
                      (long long)i, a, ys[i]);
        if (isinf(yl[i]))
            ck_assert(b == yl[i]);
        else
            ck_assert_msg(fabs(b - yl[i]) <= tol * (1 + fabs(yl[i])), "log_softmax[%lld]",
                          (long long)i);
    }
    /* backward of softmax alone: dx = y (dy - sum dy y) */
    tg_graph *g1 = tu_fwd(ctx, y1);
    tu_bwd(ctx, g1, y1, dy);
    for (int r = 0; r < 3; r++) {
        double dot = 0;
        for (int64_t j = 0; j < L; j++)
            dot += dy[r * L + j] * ys[r * L + j];
        for (int64_t j = 0; j < L; j++) {
            double want = ys[r * L + j] * (dy[r * L + j] - dot), got = tg_grad_get(xt, r * L + j);
            ck_assert_msg(fabs(got - want) <= tol * 4, "dsoftmax %g vs %g", got, want);
            if (r == 2)
                ck_assert(got == 0);
        }
    }
    free(x);
    tu_ctx_free(ctx);
}
END_TEST

/* relu backward with special upstream values: dy passes where y > 0 (inf and NaN too), 0 where
 * y <= 0 whatever dy is (also NaN), at odd lengths. */
START_TEST(test_relu_special)
{
    tg_dtype dt = tu_dtypes[_i % 2];
    int64_t L = k_sizes[_i / 2];
    double *x = malloc(sizeof(double) * (size_t)L * 2), *dy = x + L;
    ck_assert_ptr_nonnull(x);
    const double sp[] = {NAN, INFINITY, -INFINITY, 1e-310, -0.0, 3e38};
    for (int64_t j = 0; j < L; j++) {
        x[j] = j % 3 == 0 ? -1.0 - (double)j : j % 3 == 1 ? 0.5 + (double)j : 0.0;
        dy[j] = sp[j % 6];
    }
    tg_ctx *ctx = tu_ctx_new();
    tg_tensor *xt = tu_in(ctx, dt, TG_DIMS(L), "x", x);
    tg_set_requires_grad(xt, true);
    tg_tensor *y = tg_relu(ctx, xt);
    tg_graph *g = tu_fwd(ctx, y);
    tu_bwd(ctx, g, y, dy);
    for (int64_t j = 0; j < L; j++) {
        double got = tg_grad_get(xt, j), want = x[j] > 0 ? (double)(dt == TG_F32 ? (double)(float)dy[j] : dy[j]) : 0.0;
        if (isnan(want))
            ck_assert(isnan(got));
        else
            ck_assert_msg(got == want, "relu'[%lld]: %g vs %g", (long long)j, got, want);
    }
    free(x);
    tu_ctx_free(ctx);
}
END_TEST

static Suite *vec_suite(void)
{
    Suite *s = suite_create("ops_vec");
    TCase *tc = tu_tcase(s, "exp", 300);
    tcase_add_test(tc, test_expf_sweep);
    tcase_add_test(tc, test_exp_sweep);
    tcase_add_test(tc, test_exp_special);
    tc = tu_tcase(s, "kernels", 120);
    tcase_add_test(tc, test_rows);
    tcase_add_test(tc, test_sum_rows);
    tcase_add_test(tc, test_first_nonfinite);
    tc = tu_tcase(s, "ops", 120);
    tcase_add_loop_test(tc, test_softmax_rows, 0, 2 * N_SIZES);
    tcase_add_loop_test(tc, test_relu_special, 0, 2 * N_SIZES);
    return s;
}

int main(void) { return tu_run(vec_suite()); }
