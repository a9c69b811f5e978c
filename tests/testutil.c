/* testutil.c - helpers shared by the Check suites (see testutil.h). */
#include "testutil.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int tu_run(Suite *s)
{
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}

static void *fail_alloc(void *user, size_t size)
{
    tu_failing_alloc *st = user;
    if (st->budget >= 0 && st->n_alloc >= st->budget)
        return NULL;
    st->n_alloc++;
    return malloc(size);
}

static void fail_free(void *user, void *p)
{
    tu_failing_alloc *st = user;
    if (p)
        st->n_free++;
    free(p);
}

tg_allocator tu_failing_allocator(tu_failing_alloc *state)
{
    tg_allocator a = {fail_alloc, fail_free, state};
    return a;
}

tg_tensor *tu_input(tg_ctx *ctx, tg_dtype dt, int rank, const int64_t *shape, const char *name,
                    double lo, double hi)
{
    tg_tensor *t = tg_input(ctx, dt, rank, shape, name);
    if (t) {
        tg_set_requires_grad(t, true);
        tg_fill_uniform(t, lo, hi);
    }
    return t;
}

void tu_set(tg_tensor *t, const double *values)
{
    ck_assert_ptr_nonnull(t);
    ck_assert_int_eq(tg_tensor_set_data(t, values, TG_F64, (size_t)tg_tensor_numel(t)), TG_OK);
}

double tu_max_abs_diff(const tg_tensor *a, const tg_tensor *b)
{
    ck_assert_int_eq(tg_tensor_numel(a), tg_tensor_numel(b));
    double m = 0;
    for (int64_t i = 0; i < tg_tensor_numel(a); i++) {
        double d = fabs(tg_get(a, i) - tg_get(b, i));
        if (d > m || isnan(d))
            m = isnan(d) ? INFINITY : d;
    }
    return m;
}

void tu_assert_data(const tg_tensor *t, const double *expect, double tol)
{
    ck_assert_ptr_nonnull(t);
    for (int64_t i = 0; i < tg_tensor_numel(t); i++) {
        double v = tg_get(t, i);
        ck_assert_msg(fabs(v - expect[i]) <= tol || (isinf(v) && v == expect[i]),
                      "'%s'[%lld] = %.17g, expected %.17g (tol %g)", tg_tensor_name(t),
                      (long long)i, v, expect[i], tol);
    }
}

void tu_assert_gradcheck(tg_ctx *ctx, tg_tensor *y)
{
    ck_assert_msg(y != NULL, "build failed: %s", tg_ctx_message(ctx));
    tg_gradcheck_report rep;
    tg_status s = tg_gradcheck(ctx, y, NULL, &rep);
    ck_assert_msg(s == TG_OK, "gradcheck %s: %s (%s)", tg_status_str(s), rep.message,
                  tg_ctx_message(ctx));
}

void tu_assert_error(tg_ctx *ctx, tg_status status, const char *needle)
{
    ck_assert_msg(tg_ctx_status(ctx) == status, "expected %s, got %s (%s)",
                  tg_status_str(status), tg_status_str(tg_ctx_status(ctx)),
                  tg_ctx_message(ctx));
    const char *m = tg_ctx_message(ctx);
    ck_assert_msg(m && m[0], "empty error message");
    if (needle)
        ck_assert_msg(strstr(m, needle) != NULL, "message '%s' lacks '%s'", m, needle);
}

void tu_assert_thread_invariant(tg_tensor *(*build)(tg_ctx *ctx, tg_dtype dt), tg_dtype dt)
{
    size_t es = tg_dtype_size(dt);
    void *ref_y = NULL, *ref_g = NULL;
    size_t ny = 0, ng = 0;
    for (int nt = 1; nt <= 3; nt++) {
        tg_ctx *ctx = tg_ctx_new();
        tg_ctx_set_threads(ctx, nt);
        tg_ctx_seed(ctx, 42);
        tg_tensor *y = build(ctx, dt);
        ck_assert_msg(y != NULL, "build failed: %s", tg_ctx_message(ctx));
        tg_graph *g = tg_graph_new(ctx, &y, 1);
        ck_assert_ptr_nonnull(g);
        tg_tensor *dy = tg_const(ctx, dt, tg_tensor_rank(y), tg_tensor_shape(y), "dy");
        for (int64_t i = 0; i < tg_tensor_numel(dy); i++)
            tg_set(dy, i, sin(0.37 * (double)i + 0.1));
        ck_assert_int_eq(tg_graph_forward(g), TG_OK);
        ck_assert_int_eq(tg_graph_backward(g, y, dy), TG_OK);
        /* gather output and all leaf grads */
        size_t gsz = 0;
        for (int64_t l = 0; l < tg_graph_n_grad_leaves(g); l++)
            gsz += (size_t)tg_tensor_numel(tg_graph_grad_leaf(g, l)) * es;
        size_t ysz = (size_t)tg_tensor_numel(y) * es;
        char *gb = malloc(gsz ? gsz : 1);
        size_t off = 0;
        for (int64_t l = 0; l < tg_graph_n_grad_leaves(g); l++) {
            tg_tensor *t = tg_graph_grad_leaf(g, l);
            size_t n = (size_t)tg_tensor_numel(t) * es;
            memcpy(gb + off, tg_tensor_grad(t), n);
            off += n;
        }
        if (nt == 1) {
            ref_y = malloc(ysz);
            memcpy(ref_y, tg_tensor_data(y), ysz);
            ref_g = gb;
            ny = ysz;
            ng = gsz;
        } else {
            ck_assert_uint_eq(ysz, ny);
            ck_assert_uint_eq(gsz, ng);
            ck_assert_msg(memcmp(ref_y, tg_tensor_data(y), ysz) == 0,
                          "forward differs between 1 and %d threads", nt);
            ck_assert_msg(memcmp(ref_g, gb, gsz) == 0,
                          "gradients differ between 1 and %d threads", nt);
            free(gb);
        }
        tg_ctx_free(ctx);
    }
    free(ref_y);
    free(ref_g);
}
