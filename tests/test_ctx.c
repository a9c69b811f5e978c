/*
 * test_ctx.c - the context: lifecycle, the pluggable allocator (every byte goes through it and
 * is returned at tg_ctx_free), out-of-memory injection at every allocation of a small workload,
 * the sticky first error, status names, thread count, the context RNG and the training flag.
 */
#include "testutil.h"

#include <limits.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#if defined(__GLIBC__) && (__GLIBC__ > 2 || (__GLIBC__ == 2 && __GLIBC_MINOR__ >= 33))
#include <malloc.h>
#define HAVE_MALLINFO2 1
#endif

/* ---- lifecycle ---------------------------------------------------------------------------- */
START_TEST(test_new_free)
{
    tg_ctx *ctx = tg_ctx_new();
    ck_assert_ptr_nonnull(ctx);
    ck_assert_int_eq(tg_ctx_status(ctx), TG_OK);
    ck_assert_str_eq(tg_ctx_message(ctx), "");
    ck_assert(tg_ctx_training(ctx));
    ck_assert_int_ge(tg_ctx_threads(ctx), 1);
    ck_assert_uint_eq(tg_ctx_bytes(ctx), 0);
    tg_ctx_free(ctx);
    tg_ctx_free(NULL); /* no-op */

    /* NULL allocator, or one with a missing function, means the C library's */
    ctx = tg_ctx_new_with(NULL);
    ck_assert_ptr_nonnull(ctx);
    ck_assert_ptr_nonnull(tg_param(ctx, TG_F32, TG_DIMS(3), "p"));
    tg_ctx_free(ctx);
    tg_allocator half = {NULL, NULL, NULL};
    ctx = tg_ctx_new_with(&half);
    ck_assert_ptr_nonnull(ctx);
    ck_assert_ptr_nonnull(tg_param(ctx, TG_F32, TG_DIMS(3), "p"));
    tg_ctx_free(ctx);
}
END_TEST

START_TEST(test_null_ctx_getters)
{
    ck_assert_int_eq(tg_ctx_status(NULL), TG_ERR_ARG);
    ck_assert_ptr_nonnull(tg_ctx_message(NULL));
    ck_assert_uint_eq(tg_ctx_bytes(NULL), 0);
    ck_assert_int_ge(tg_ctx_threads(NULL), 1);
    tg_ctx_clear_error(NULL);
    tg_ctx_set_threads(NULL, 3);
    tg_ctx_set_training(NULL, false);
    tg_ctx_seed(NULL, 1);
    ck_assert_ptr_null(tg_param(NULL, TG_F32, TG_DIMS(3), "p"));
}
END_TEST

START_TEST(test_dtype_helpers)
{
    ck_assert_uint_eq(tg_dtype_size(TG_F32), 4);
    ck_assert_uint_eq(tg_dtype_size(TG_F64), 8);
    ck_assert_uint_eq(tg_dtype_size((tg_dtype)7), 0);
    ck_assert_str_eq(tg_dtype_str(TG_F32), "f32");
    ck_assert_str_eq(tg_dtype_str(TG_F64), "f64");
    ck_assert_str_eq(tg_dtype_str((tg_dtype)-1), "?");
}
END_TEST

/* ---- allocator ---------------------------------------------------------------------------- */
/* A small workload touching every kind of allocation: leaves, op results, ops that save values
 * at build (matmul map, broadcast mul scratch, layer_norm statistics), a graph with gradient
 * buffers, forward/backward and gradcheck in both modes.
 * Returns true if all of it succeeded. On the first failure, asserts it is a clean
 * TG_ERR_NOMEM with a message and returns false. */
static bool expect_nomem(tg_ctx *ctx, const char *where)
{
    ck_assert_msg(tg_ctx_status(ctx) == TG_ERR_NOMEM, "%s: expected TG_ERR_NOMEM, got %s (%s)",
                  where, tg_status_str(tg_ctx_status(ctx)), tg_ctx_message(ctx));
    ck_assert_msg(tg_ctx_message(ctx)[0] != '\0', "%s: empty message", where);
    return false;
}

static bool workload(tg_ctx *ctx)
{
    tg_ctx_seed(ctx, 7);
    tg_tensor *x = tu_input(ctx, TG_F64, TG_DIMS(3, 4), "x", -1, 1);
    tg_tensor *w = tg_param(ctx, TG_F64, TG_DIMS(5, 4), "w");
    tg_tensor *b = tg_param(ctx, TG_F64, TG_DIMS(5), "b");
    tg_tensor *c = tg_const(ctx, TG_F64, TG_DIMS(3, 1), "c");
    tg_fill_uniform(w, -1, 1);
    tg_fill_uniform(b, -1, 1);
    tg_fill(c, 0.5);
    if (!x || !w || !b || !c)
        return expect_nomem(ctx, "leaf");
    tg_tensor *h = tg_layer_norm(ctx, tg_dense(ctx, x, w, b), NULL, NULL, 1e-5); /* (3, 5) */
    tg_tensor *s = tg_softmax(ctx, tg_matmul(ctx, h, h, false, true));          /* (3, 3) */
    tg_tensor *m = tg_mul(ctx, tg_matmul(ctx, s, h, false, false), c);          /* (3, 5) */
    tg_tensor *y = tg_mean_all(ctx, tg_gelu(ctx, m));
    if (!y)
        return expect_nomem(ctx, "op builder");
    tg_graph *g = tg_graph_new(ctx, &y, 1);
    if (!g)
        return expect_nomem(ctx, "tg_graph_new");
    ck_assert_int_eq(tg_graph_forward(g), TG_OK);
    ck_assert_int_eq(tg_graph_backward(g, y, NULL), TG_OK);
    tg_gradcheck_report rep;
    tg_status st = tg_gradcheck(ctx, y, NULL, &rep);
    if (st != TG_OK) {
        ck_assert_msg(st == TG_ERR_NOMEM, "gradcheck returned %s: %s / %s", tg_status_str(st),
                      rep.message, tg_ctx_message(ctx));
        return expect_nomem(ctx, "tg_gradcheck");
    }
    tg_gradcheck_opts o = tg_gradcheck_defaults(TG_F64);
    o.n_projections = 3;
    st = tg_gradcheck(ctx, y, &o, &rep);
    if (st != TG_OK) {
        ck_assert_msg(st == TG_ERR_NOMEM, "gradcheck (proj) returned %s: %s / %s",
                      tg_status_str(st), rep.message, tg_ctx_message(ctx));
        return expect_nomem(ctx, "tg_gradcheck (projections)");
    }
    tg_graph_free(g);
    return true;
}

START_TEST(test_allocator_counts)
{
    tu_failing_alloc st = {-1, 0, 0};
    tg_allocator al = tu_failing_allocator(&st);
    tg_ctx *ctx = tg_ctx_new_with(&al);
    ck_assert_ptr_nonnull(ctx);
    ck_assert_int_eq(st.n_alloc, 1); /* the context record itself */
    ck_assert(workload(ctx));
    ck_assert_int_gt(st.n_alloc, 20);
    ck_assert_int_gt(st.n_alloc, st.n_free); /* the context still holds memory */
    ck_assert_uint_gt(tg_ctx_bytes(ctx), 0);
    tg_ctx_free(ctx);
    ck_assert_int_eq(st.n_alloc, st.n_free);
}
END_TEST

/* A bump allocator over a static arena: proves tensor data and gradients come from the
 * context allocator and (with mallinfo2) that the library does not call malloc behind it. */
static _Alignas(64) unsigned char arena[1 << 22];
typedef struct {
    size_t used;
    long n_alloc, n_free;
} bump_state;

static void *bump_alloc(void *user, size_t size)
{
    bump_state *b = user;
    size = (size + 63) & ~(size_t)63;
    if (size > sizeof arena - b->used)
        return NULL;
    void *p = arena + b->used;
    b->used += size;
    b->n_alloc++;
    return p;
}

static void bump_free(void *user, void *p)
{
    bump_state *b = user;
    if (p)
        b->n_free++;
}

static bool in_arena(const void *p)
{
    return (const unsigned char *)p >= arena && (const unsigned char *)p < arena + sizeof arena;
}

/* One context through the allocator @p al: creation, a graph, forward, backward, a workload;
 * everything must come from the allocator's arena. */
static void allocator_round(tg_allocator *al)
{
    tg_ctx *ctx = tg_ctx_new_with(al);
    ck_assert_ptr_nonnull(ctx);
    ck_assert(in_arena(ctx));
    tg_ctx_set_threads(ctx, 1);
    tg_tensor *p = tg_param(ctx, TG_F32, TG_DIMS(4, 4), "p");
    tg_tensor *y = tg_sum_all(ctx, tg_mul(ctx, p, p));
    tg_graph *g = tg_graph_new(ctx, &y, 1);
    ck_assert_ptr_nonnull(g);
    ck_assert(in_arena(p) && in_arena(y) && in_arena(g));
    ck_assert(in_arena(tg_tensor_data(p)) && in_arena(tg_tensor_grad(p)));
    /* an op result's buffers are the graph's (its arena), bound when it runs */
    ck_assert_int_eq(tg_graph_forward(g), TG_OK);
    ck_assert_int_eq(tg_graph_backward(g, y, NULL), TG_OK);
    ck_assert(in_arena(tg_tensor_data(y)) && in_arena(tg_tensor_grad(y)));
    ck_assert(workload(ctx));
    tg_ctx_free(ctx);
}

START_TEST(test_allocator_used_for_everything)
{
    /* warm up the C library and the OpenMP runtime outside the measured region */
    tg_ctx *warm = tg_ctx_new();
    tg_ctx_set_threads(warm, 1);
    ck_assert(workload(warm));
    tg_ctx_free(warm);

    bump_state bs = {0, 0, 0};
    tg_allocator al = {bump_alloc, bump_free, &bs};
    /* Every round repeats every allocation the library makes, so a library malloc shows in
     * every round; the OpenMP runtime (LLVM's libomp in a clang build) may allocate once,
     * lazily, in any one of them. So: malloc'd bytes unchanged across at least one of three
     * rounds. */
    long long delta[3] = {0, 0, 0};
    bool clean = false;
    for (int r = 0; r < 3 && !clean; r++) {
#ifdef HAVE_MALLINFO2
        struct mallinfo2 before = mallinfo2();
#endif
        allocator_round(&al);
#ifdef HAVE_MALLINFO2
        struct mallinfo2 after = mallinfo2();
        delta[r] = (long long)after.uordblks - (long long)before.uordblks;
#endif
        clean = delta[r] == 0 || tu_under_valgrind();
    }
    ck_assert_msg(clean, "malloc'd bytes changed by %lld, %lld and %lld in three rounds of a "
                  "context in use", delta[0], delta[1], delta[2]);
    ck_assert_int_eq(bs.n_alloc, bs.n_free);
}
END_TEST

START_TEST(test_ctx_bytes_tracks)
{
    tg_ctx *ctx = tg_ctx_new();
    size_t b0 = tg_ctx_bytes(ctx);
    tg_tensor *t = tg_param(ctx, TG_F64, TG_DIMS(100, 10), "t");
    ck_assert_ptr_nonnull(t);
    ck_assert_uint_ge(tg_ctx_bytes(ctx) - b0, 8000);
    tg_ctx_free(ctx);
}
END_TEST

/* ---- out-of-memory injection -------------------------------------------------------------- */
START_TEST(test_oom_every_allocation)
{
    tu_failing_alloc full = {-1, 0, 0};
    tg_allocator al = tu_failing_allocator(&full);
    tg_ctx *ctx = tg_ctx_new_with(&al);
    ck_assert(workload(ctx));
    tg_ctx_free(ctx);
    long needed = full.n_alloc;
    ck_assert_int_eq(full.n_alloc, full.n_free);

    int n_fail = 0;
    for (long budget = 0; budget <= needed; budget++) {
        tu_failing_alloc st = {budget, 0, 0};
        al = tu_failing_allocator(&st);
        ctx = tg_ctx_new_with(&al);
        if (!ctx) {
            ck_assert_int_eq(budget, 0);
            ck_assert_int_eq(st.n_alloc, st.n_free);
            n_fail++;
            continue;
        }
        bool ok = workload(ctx);
        if (!ok)
            n_fail++;
        /* the first error sticks: later failures never overwrite NOMEM */
        if (!ok)
            ck_assert_int_eq(tg_ctx_status(ctx), TG_ERR_NOMEM);
        tg_ctx_free(ctx);
        ck_assert_msg(st.n_alloc == st.n_free, "budget %ld: %ld allocs, %ld frees", budget,
                      st.n_alloc, st.n_free);
        if (budget == needed)
            ck_assert_msg(ok, "workload failed with the full budget %ld", budget);
    }
    ck_assert_int_gt(n_fail, 20);
}
END_TEST

/* A failed allocation must leave the context usable once the error is cleared. */
START_TEST(test_oom_then_recover)
{
    tu_failing_alloc st = {-1, 0, 0};
    tg_allocator al = tu_failing_allocator(&st);
    tg_ctx *ctx = tg_ctx_new_with(&al);
    ck_assert_ptr_nonnull(ctx);
    tg_tensor *a = tg_param(ctx, TG_F32, TG_DIMS(2), "a");
    ck_assert_ptr_nonnull(a);
    st.budget = st.n_alloc + 1; /* b's record succeeds, its data buffer fails */
    tg_tensor *b = tg_param(ctx, TG_F32, TG_DIMS(2), "b");
    ck_assert_ptr_null(b);
    tu_assert_error(ctx, TG_ERR_NOMEM, "tg_param");
    /* chained builders on NULL keep the first error */
    ck_assert_ptr_null(tg_add(ctx, a, b));
    tu_assert_error(ctx, TG_ERR_NOMEM, "tg_param");
    st.budget = -1;
    tg_ctx_clear_error(ctx);
    b = tg_param(ctx, TG_F32, TG_DIMS(2), "b");
    ck_assert_ptr_nonnull(b);
    tg_tensor *y = tg_sum_all(ctx, tg_add(ctx, a, b));
    tg_graph *g = tg_graph_new(ctx, &y, 1);
    ck_assert_ptr_nonnull(g);
    ck_assert_int_eq(tg_graph_forward(g), TG_OK);
    ck_assert_int_eq(tg_graph_backward(g, y, NULL), TG_OK);
    ck_assert_double_eq(tg_grad_get(a, 1), 1.0);
    tg_ctx_free(ctx);
    ck_assert_int_eq(st.n_alloc, st.n_free);
}
END_TEST

/* ---- errors ------------------------------------------------------------------------------- */
START_TEST(test_first_error_sticks)
{
    tg_ctx *ctx = tg_ctx_new();
    tg_tensor *a = tg_input(ctx, TG_F64, TG_DIMS(2, 3), "a");
    tg_tensor *b = tg_input(ctx, TG_F64, TG_DIMS(4, 5), "b");
    tg_tensor *ok = tg_sum_all(ctx, a); /* valid, made before the error */
    ck_assert_ptr_nonnull(ok);
    ck_assert_ptr_null(tg_matmul(ctx, a, b, false, false));
    tu_assert_error(ctx, TG_ERR_SHAPE, "tg_matmul: inner dims differ");
    char first[512];
    snprintf(first, sizeof first, "%s", tg_ctx_message(ctx));
    /* a second, different error is ignored */
    ck_assert_ptr_null(tg_sum(ctx, a, 5, false));
    ck_assert_int_eq(tg_ctx_status(ctx), TG_ERR_SHAPE);
    ck_assert_str_eq(tg_ctx_message(ctx), first);
    /* while it is pending, op builders refuse (nothing is allocated) and keep it */
    size_t bytes = tg_ctx_bytes(ctx);
    ck_assert_ptr_null(tg_sum_all(ctx, a));
    ck_assert_ptr_null(tg_scale(ctx, a, 2.0));
    ck_assert_uint_eq(tg_ctx_bytes(ctx), bytes);
    ck_assert_int_eq(tg_ctx_status(ctx), TG_ERR_SHAPE);
    ck_assert_str_eq(tg_ctx_message(ctx), first);
    /* leaf constructors still work (they hold data), and keep it too */
    ck_assert_ptr_nonnull(tg_input(ctx, TG_F64, TG_DIMS(2), "late"));
    ck_assert_ptr_null(tg_input(ctx, TG_F64, TG_DIMS(0), "bad_late"));
    ck_assert_int_eq(tg_ctx_status(ctx), TG_ERR_SHAPE);
    ck_assert_str_eq(tg_ctx_message(ctx), first);
    /* a graph is never built over a failed builder */
    ck_assert_ptr_null(tg_graph_new(ctx, &ok, 1));
    ck_assert_int_eq(tg_ctx_status(ctx), TG_ERR_SHAPE);
    ck_assert_str_eq(tg_ctx_message(ctx), first);

    tg_ctx_clear_error(ctx);
    ck_assert_int_eq(tg_ctx_status(ctx), TG_OK);
    ck_assert_str_eq(tg_ctx_message(ctx), "");
    ck_assert_ptr_nonnull(tg_graph_new(ctx, &ok, 1));
    ck_assert_ptr_null(tg_sum(ctx, a, 5, false));
    tu_assert_error(ctx, TG_ERR_AXIS, "tg_sum");
    tg_ctx_free(ctx);
}
END_TEST


/* ---- memory limit ------------------------------------------------------------------------- */
START_TEST(test_memory_limit)
{
    tg_ctx *ctx = tg_ctx_new();
    ck_assert_uint_eq(tg_ctx_memory_limit(ctx), 0);
    ck_assert_uint_eq(tg_ctx_memory_limit(NULL), 0);
    tg_ctx_set_memory_limit(NULL, 5); /* no-op */
    tg_ctx_set_memory_limit(ctx, 10000);
    ck_assert_uint_eq(tg_ctx_memory_limit(ctx), 10000);
    tg_tensor *a = tg_param(ctx, TG_F64, TG_DIMS(500), "a"); /* 4000 bytes + its record */
    ck_assert_ptr_nonnull(a);
    size_t used = tg_ctx_bytes(ctx);
    ck_assert_uint_le(used, 10000);
    tg_tensor *b = tg_param(ctx, TG_F64, TG_DIMS(1000), "b"); /* 8000 more: over */
    ck_assert_ptr_null(b);
    tu_assert_error(ctx, TG_ERR_NOMEM, "tg_param: allocating 8000 bytes would exceed the memory "
                    "limit of 10000 bytes (");
    ck_assert_uint_eq(tg_ctx_bytes(ctx), used); /* b's record was given back */
    ck_assert_int_eq(tg_ctx_n_params(ctx), 1);
    /* an op builder and a graph are held to it too */
    tg_ctx_clear_error(ctx);
    /* (op results take memory when a graph plans them: the graph is refused) */
    tg_tensor *mm = tg_matmul(ctx, tg_reshape(ctx, a, TG_DIMS(500, 1)),
                              tg_reshape(ctx, a, TG_DIMS(1, 500)), false, false);
    ck_assert_ptr_nonnull(mm);
    ck_assert_ptr_null(tg_graph_new_opts(ctx, &mm, 1, &(tg_graph_opts){.no_grad = true}));
    tu_assert_error(ctx, TG_ERR_NOMEM, "tg_graph_new: allocating ");
    tg_ctx_clear_error(ctx);
    tg_tensor *y = tg_sum_all(ctx, a);
    ck_assert_ptr_nonnull(y);
    ck_assert_ptr_null(tg_graph_new(ctx, &y, 1)); /* a's gradient: 4000 bytes, twice */
    tu_assert_error(ctx, TG_ERR_NOMEM, "would exceed the memory limit of 10000 bytes");
    /* raising the limit (or 0: none) lets the same calls succeed */
    tg_ctx_clear_error(ctx);
    tg_ctx_set_memory_limit(ctx, 0);
    ck_assert_ptr_nonnull(tg_param(ctx, TG_F64, TG_DIMS(1000), "b"));
    tg_graph *g = tg_graph_new(ctx, &y, 1);
    ck_assert_ptr_nonnull(g);
    /* a limit below what is held frees nothing; the next allocation fails */
    tg_ctx_set_memory_limit(ctx, 100);
    ck_assert_ptr_null(tg_input(ctx, TG_F32, TG_DIMS(1), "tiny"));
    tu_assert_error(ctx, TG_ERR_NOMEM, "memory limit of 100 bytes");
    ck_assert_int_eq(tg_graph_forward(g), TG_OK); /* running allocates nothing */
    ck_assert_int_eq(tg_graph_backward(g, y, NULL), TG_OK);
    tg_ctx_free(ctx);
}
END_TEST

/* Public entry points take NULL without crashing. */
START_TEST(test_null_entry_points)
{
    ck_assert_uint_eq(tg_rng_u64(NULL), 0);
    (void)tg_rng_uniform(NULL);
    (void)tg_rng_normal(NULL);
    uint64_t st[4] = {1, 2, 3, 4};
    tg_rng_get_state(NULL, st);
    tg_rng_set_state(NULL, st);
    tg_ctx *ctx = tg_ctx_new();
    tg_rng_get_state(ctx, NULL);
    tg_rng_set_state(ctx, NULL);
    ck_assert_int_eq(tg_graph_forward(NULL), TG_ERR_ARG);
    ck_assert_int_eq(tg_graph_backward(NULL, NULL, NULL), TG_ERR_ARG);
    ck_assert_ptr_null(tg_graph_new(ctx, NULL, 1));
    tg_ctx_free(ctx);
}
END_TEST

START_TEST(test_status_str)
{
    const char *seen[TG_STATUS_COUNT_];
    for (int s = 0; s < TG_STATUS_COUNT_; s++) {
        const char *n = tg_status_str((tg_status)s);
        ck_assert_ptr_nonnull(n);
        ck_assert_msg(strncmp(n, "TG_", 3) == 0, "status %d named '%s'", s, n);
        for (int j = 0; j < s; j++)
            ck_assert_msg(strcmp(seen[j], n) != 0, "codes %d and %d both named '%s'", j, s, n);
        seen[s] = n;
    }
    ck_assert_str_eq(tg_status_str(TG_OK), "TG_OK");
    ck_assert_str_eq(tg_status_str(TG_ERR_SHAPE), "TG_ERR_SHAPE");
    ck_assert_str_eq(tg_status_str(TG_ERR_NOMEM), "TG_ERR_NOMEM");
    ck_assert_str_eq(tg_status_str(TG_ERR_MISMATCH), "TG_ERR_MISMATCH");
    const tg_status bad[] = {(tg_status)-1, TG_STATUS_COUNT_, (tg_status)1000};
    for (size_t k = 0; k < sizeof bad / sizeof bad[0]; k++) {
        const char *n = tg_status_str(bad[k]);
        ck_assert_ptr_nonnull(n);
        ck_assert(n[0] != '\0');
        for (int j = 0; j < TG_STATUS_COUNT_; j++)
            ck_assert_str_ne(seen[j], n);
    }
}
END_TEST

/* ---- threads ------------------------------------------------------------------------------ */
START_TEST(test_threads)
{
    tg_ctx *ctx = tg_ctx_new();
    int def = tg_ctx_threads(ctx);
    ck_assert_int_ge(def, 1);
    tg_ctx_set_threads(ctx, 3);
    ck_assert_int_eq(tg_ctx_threads(ctx), 3);
    tg_ctx_set_threads(ctx, 1);
    ck_assert_int_eq(tg_ctx_threads(ctx), 1);
    tg_ctx_set_threads(ctx, 0);
    ck_assert_int_eq(tg_ctx_threads(ctx), def);
    tg_ctx_set_threads(ctx, 5);
    tg_ctx_set_threads(ctx, -4);
    ck_assert_int_eq(tg_ctx_threads(ctx), def);
    /* capped: a team of 100000 made libgomp overflow its stack (OMP_NUM_THREADS=100000) */
    ck_assert_int_le(def, TG_MAX_THREADS);
    tg_ctx_set_threads(ctx, 100000);
    ck_assert_int_eq(tg_ctx_threads(ctx), TG_MAX_THREADS);
    tg_ctx_set_threads(ctx, INT_MAX);
    ck_assert_int_eq(tg_ctx_threads(ctx), TG_MAX_THREADS);
    /* per context */
    tg_ctx *other = tg_ctx_new();
    tg_ctx_set_threads(ctx, 2);
    ck_assert_int_eq(tg_ctx_threads(other), def);
    tg_ctx_free(other);
    tg_ctx_free(ctx);
}
END_TEST

/* ---- RNG ---------------------------------------------------------------------------------- */
START_TEST(test_rng_seed_reproducible)
{
    tg_ctx *a = tg_ctx_new(), *b = tg_ctx_new();
    tg_ctx_seed(a, 1234);
    tg_ctx_seed(b, 1234);
    for (int i = 0; i < 1000; i++)
        ck_assert_uint_eq(tg_rng_u64(a), tg_rng_u64(b));
    /* reseeding restarts the sequence */
    tg_ctx_seed(a, 1234);
    tg_ctx_seed(b, 1234);
    uint64_t first = tg_rng_u64(a);
    ck_assert_uint_eq(first, tg_rng_u64(b));
    /* default seed is 0 */
    tg_ctx *c = tg_ctx_new(), *d = tg_ctx_new();
    tg_ctx_seed(d, 0);
    for (int i = 0; i < 10; i++)
        ck_assert_uint_eq(tg_rng_u64(c), tg_rng_u64(d));
    tg_ctx_free(a);
    tg_ctx_free(b);
    tg_ctx_free(c);
    tg_ctx_free(d);
}
END_TEST

START_TEST(test_rng_seeds_differ)
{
    tg_ctx *ctx = tg_ctx_new();
    uint64_t seqs[4][8];
    const uint64_t seeds[4] = {0, 1, 2, UINT64_MAX};
    for (int s = 0; s < 4; s++) {
        tg_ctx_seed(ctx, seeds[s]);
        for (int i = 0; i < 8; i++)
            seqs[s][i] = tg_rng_u64(ctx);
    }
    for (int s = 0; s < 4; s++)
        for (int t = s + 1; t < 4; t++) {
            int same = 0;
            for (int i = 0; i < 8; i++)
                same += seqs[s][i] == seqs[t][i];
            ck_assert_msg(same == 0, "seeds %d and %d share %d outputs", s, t, same);
        }
    /* consecutive outputs are not constant */
    ck_assert_uint_ne(seqs[0][0], seqs[0][1]);
    tg_ctx_free(ctx);
}
END_TEST

START_TEST(test_rng_state_roundtrip)
{
    tg_ctx *ctx = tg_ctx_new();
    tg_ctx_seed(ctx, 99);
    for (int i = 0; i < 37; i++)
        tg_rng_u64(ctx);
    uint64_t st[4];
    tg_rng_get_state(ctx, st);
    uint64_t expect[100];
    double u = tg_rng_uniform(ctx), n = tg_rng_normal(ctx);
    for (int i = 0; i < 100; i++)
        expect[i] = tg_rng_u64(ctx);
    /* disturb, then restore and resume exactly */
    tg_ctx_seed(ctx, 5);
    tg_rng_u64(ctx);
    tg_rng_set_state(ctx, st);
    ck_assert(tg_rng_uniform(ctx) == u);
    ck_assert(tg_rng_normal(ctx) == n);
    for (int i = 0; i < 100; i++)
        ck_assert_uint_eq(tg_rng_u64(ctx), expect[i]);
    /* into another context too */
    tg_ctx *other = tg_ctx_new();
    tg_rng_set_state(other, st);
    uint64_t st2[4];
    tg_rng_get_state(other, st2);
    ck_assert_mem_eq(st, st2, sizeof st);
    ck_assert(tg_rng_uniform(other) == u);
    tg_ctx_free(other);
    tg_ctx_free(ctx);
}
END_TEST

/* The all-zero state is a fixed point of xoshiro256** (it would return 0 for ever): refused,
 * the state unchanged, as a run-time error. */
START_TEST(test_rng_zero_state_refused)
{
    tg_ctx *ctx = tg_ctx_new();
    tg_ctx_seed(ctx, 4);
    uint64_t before[4], after[4], zero[4] = {0, 0, 0, 0};
    tg_rng_get_state(ctx, before);
    ck_assert_int_eq(tg_rng_set_state(ctx, zero), TG_ERR_ARG);
    tu_assert_error(ctx, TG_ERR_ARG, "tg_rng_set_state: the all-zero state");
    tg_rng_get_state(ctx, after);
    ck_assert_mem_eq(before, after, sizeof before);
    ck_assert_uint_ne(tg_rng_u64(ctx), 0);
    ck_assert_int_eq(tg_rng_set_state(ctx, NULL), TG_ERR_ARG);
    ck_assert_int_eq(tg_rng_set_state(NULL, before), TG_ERR_ARG);
    /* one non-zero bit anywhere is a valid state */
    uint64_t one[4] = {0, 0, 0, 1};
    ck_assert_int_eq(tg_rng_set_state(ctx, one), TG_OK);
    tg_rng_get_state(ctx, after);
    ck_assert_mem_eq(one, after, sizeof one);
    ck_assert_ptr_nonnull(tg_input(ctx, TG_F32, TG_DIMS(2), "x")); /* not sticky */
    tg_ctx_free(ctx);
}
END_TEST

START_TEST(test_rng_uniform_range)
{
    tg_ctx *ctx = tg_ctx_new();
    tg_ctx_seed(ctx, 3);
    const int n = 100000;
    double sum = 0, mn = 1, mx = 0;
    int below_half = 0;
    for (int i = 0; i < n; i++) {
        double u = tg_rng_uniform(ctx);
        ck_assert_msg(u >= 0.0 && u < 1.0, "uniform %.17g out of [0, 1)", u);
        sum += u;
        mn = u < mn ? u : mn;
        mx = u > mx ? u : mx;
        below_half += u < 0.5;
    }
    ck_assert_double_lt(fabs(sum / n - 0.5), 0.01);
    ck_assert_double_lt(mn, 1e-3);
    ck_assert_double_gt(mx, 1 - 1e-3);
    ck_assert_int_lt(abs(below_half - n / 2), 1000);
    tg_ctx_free(ctx);
}
END_TEST

START_TEST(test_rng_normal_moments)
{
    tg_ctx *ctx = tg_ctx_new();
    tg_ctx_seed(ctx, 11);
    const int n = 100000;
    double s = 0, s2 = 0, s4 = 0;
    int beyond2 = 0;
    for (int i = 0; i < n; i++) {
        double z = tg_rng_normal(ctx);
        ck_assert(isfinite(z));
        s += z;
        s2 += z * z;
        s4 += z * z * z * z;
        beyond2 += fabs(z) > 2;
    }
    double mean = s / n, var = s2 / n - mean * mean;
    ck_assert_msg(fabs(mean) < 0.02, "mean %g", mean); /* std error 0.003 */
    ck_assert_msg(fabs(var - 1) < 0.03, "variance %g", var);
    ck_assert_msg(fabs(s4 / n - 3) < 0.15, "fourth moment %g", s4 / n);
    /* P(|z| > 2) = 0.0455 */
    ck_assert_msg(fabs((double)beyond2 / n - 0.0455) < 0.004, "tail %g", (double)beyond2 / n);
    tg_ctx_free(ctx);
}
END_TEST

/* Contexts are independent: drawing from one does not move another. */
START_TEST(test_rng_per_context)
{
    tg_ctx *a = tg_ctx_new(), *b = tg_ctx_new();
    tg_ctx_seed(a, 8);
    tg_ctx_seed(b, 8);
    for (int i = 0; i < 50; i++)
        tg_rng_u64(a);
    tg_ctx *c = tg_ctx_new();
    tg_ctx_seed(c, 8);
    ck_assert_uint_eq(tg_rng_u64(b), tg_rng_u64(c));
    tg_ctx_free(a);
    tg_ctx_free(b);
    tg_ctx_free(c);
}
END_TEST

START_TEST(test_training_flag)
{
    tg_ctx *ctx = tg_ctx_new();
    ck_assert(tg_ctx_training(ctx));
    tg_ctx_set_training(ctx, false);
    ck_assert(!tg_ctx_training(ctx));
    tg_ctx_set_training(ctx, true);
    ck_assert(tg_ctx_training(ctx));
    ck_assert(!tg_ctx_training(NULL));
    tg_ctx_free(ctx);
}
END_TEST

static Suite *ctx_suite(void)
{
    Suite *s = suite_create("ctx");
    TCase *tc = tcase_create("lifecycle");
    tcase_add_test(tc, test_new_free);
    tcase_add_test(tc, test_null_ctx_getters);
    tcase_add_test(tc, test_dtype_helpers);
    tcase_add_test(tc, test_training_flag);
    tcase_add_test(tc, test_threads);
    suite_add_tcase(s, tc);

    tc = tcase_create("allocator");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_allocator_counts);
    tcase_add_test(tc, test_allocator_used_for_everything);
    tcase_add_test(tc, test_ctx_bytes_tracks);
    tcase_add_test(tc, test_oom_every_allocation);
    tcase_add_test(tc, test_oom_then_recover);
    suite_add_tcase(s, tc);

    tc = tcase_create("errors");
    tcase_add_test(tc, test_first_error_sticks);
    tcase_add_test(tc, test_status_str);
    tcase_add_test(tc, test_memory_limit);
    tcase_add_test(tc, test_null_entry_points);
    suite_add_tcase(s, tc);

    tc = tcase_create("rng");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_rng_seed_reproducible);
    tcase_add_test(tc, test_rng_seeds_differ);
    tcase_add_test(tc, test_rng_state_roundtrip);
    tcase_add_test(tc, test_rng_zero_state_refused);
    tcase_add_test(tc, test_rng_uniform_range);
    tcase_add_test(tc, test_rng_normal_moments);
    tcase_add_test(tc, test_rng_per_context);
    suite_add_tcase(s, tc);
    return s;
}

int main(void) { return tu_run(ctx_suite()); }
