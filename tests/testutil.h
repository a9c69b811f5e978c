/*
 * testutil.h - helpers shared by the Check suites.
 */
#ifndef TG_TESTUTIL_H
#define TG_TESTUTIL_H

#include <check.h>
#include <math.h>
#include <stdbool.h>
#include <stdint.h>

#include "tgrad.h"

/* Run one suite and return the process exit status (0 if every test passed). */
int tu_run(Suite *s);

/* An allocator that fails after `budget` successful allocations (budget < 0: never fails).
 * Counts allocations and frees so tests can assert nothing leaked. */
typedef struct {
    long budget;
    long n_alloc, n_free;
} tu_failing_alloc;
tg_allocator tu_failing_allocator(tu_failing_alloc *state);

/* Input with requires_grad, uniform in [lo, hi) from the context RNG. */
tg_tensor *tu_input(tg_ctx *ctx, tg_dtype dt, int rank, const int64_t *shape, const char *name,
                    double lo, double hi);
/* Set data from a double array of numel values. */
void tu_set(tg_tensor *t, const double *values);
/* Max |a - b| over the data of two tensors of equal numel. */
double tu_max_abs_diff(const tg_tensor *a, const tg_tensor *b);
/* Assert tensor data equals `expect` (numel values) within tol. */
void tu_assert_data(const tg_tensor *t, const double *expect, double tol);
/* Run f64 gradcheck on y with defaults; fail the test with the report message if it fails. */
void tu_assert_gradcheck(tg_ctx *ctx, tg_tensor *y);
/* Assert that the context recorded `status` and a message containing `needle` (NULL: any
 * non-empty message). */
void tu_assert_error(tg_ctx *ctx, tg_status status, const char *needle);

/* Thread invariance: build the case with `build` in fresh contexts using 1, 2 and 3 threads
 * (same seed), run forward and backward (upstream gradient = fixed pseudo-random values), and
 * assert every output value and every leaf gradient is bitwise identical across thread counts.
 * Shapes should be big enough for the parallel paths to engage (> TG_PAR_MIN work). */
void tu_assert_thread_invariant(tg_tensor *(*build)(tg_ctx *ctx, tg_dtype dt), tg_dtype dt);

#endif
