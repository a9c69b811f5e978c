/*
 * test_threads.c - thread invariance for 1, 2, 3, 4 and 8 threads (tg_ctx_set_threads):
 *  - every case of the gradient-check table (tools/cli/opcases.c: every registered op and every
 *    module), in f32 and f64: forward + backward with a fixed upstream gradient give
 *    bitwise-identical values of every node and gradients of every tensor that has one;
 *  - a few training steps of a small transformer LM (dropout, gradient clipping, AdamW
 *    tg_optim_step): bitwise-identical losses, gradients, parameters and optimizer state.
 * Under valgrind (TG_UNDER_VALGRIND) 1, 3 and 8 threads and a smaller model.
 *
 * The suite is built twice (tests/meson.build): `threads` against the library as shipped, with
 * a transformer big enough for its kernels' parallel paths (TG_PAR_MIN in src/core.h), and
 * `threads_all_parallel` with the library compiled in at TG_PAR_MIN=1, so every OpenMP loop runs
 * split across threads even for the op cases' tiny shapes (and with more threads than rows).
 */
#include "opcases.h"
#include "testutil.h"
#include "tgrad_train.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const int thread_counts[] = {1, 2, 3, 4, 8};
/* Under valgrind (which runs threads one at a time anyway) 1, 3 and 8 threads. */
static const int thread_counts_vg[] = {1, 3, 8};
static int n_counts(void) { return tu_under_valgrind() ? 3 : 5; }
static int count_at(int k) { return tu_under_valgrind() ? thread_counts_vg[k] : thread_counts[k]; }

/* ---- byte records compared across thread counts --------------------------------------------- */

/* One labelled chunk of bytes (a tensor's data or gradient), so a mismatch names its tensor. */
typedef struct rec {
    char label[TG_NAME_MAX + 32];
    size_t off, n;
} rec;

typedef struct trace {
    unsigned char *p;
    size_t n, cap;
    rec *recs;
    int n_recs, cap_recs;
} trace;

static void trace_put(trace *t, const char *what, const char *name, const void *src, size_t n)
{
    if (t->n + n > t->cap) {
        size_t cap = t->cap ? t->cap : 1024;
        while (cap < t->n + n)
            cap *= 2;
        t->p = realloc(t->p, cap);
        ck_assert_ptr_nonnull(t->p);
        t->cap = cap;
    }
    if (t->n_recs == t->cap_recs) {
        t->cap_recs = t->cap_recs ? 2 * t->cap_recs : 64;
        t->recs = realloc(t->recs, sizeof *t->recs * (size_t)t->cap_recs);
        ck_assert_ptr_nonnull(t->recs);
    }
    rec *r = &t->recs[t->n_recs++];
    snprintf(r->label, sizeof r->label, "%s of '%s'", what, name);
    r->off = t->n;
    r->n = n;
    if (n)
        memcpy(t->p + t->n, src, n);
    t->n += n;
}

static size_t tensor_bytes(tg_tensor *x)
{
    return (size_t)tg_tensor_numel(x) * tg_dtype_size(tg_tensor_dtype(x));
}

static void trace_data(trace *t, const char *what, tg_tensor *x)
{
    trace_put(t, what, tg_tensor_name(x), tg_tensor_data(x), tensor_bytes(x));
}

static void trace_grad(trace *t, const char *what, tg_tensor *x)
{
    const void *g = tg_tensor_grad(x);
    if (g)
        trace_put(t, what, tg_tensor_name(x), g, tensor_bytes(x));
}

static void trace_free(trace *t)
{
    free(t->p);
    free(t->recs);
    memset(t, 0, sizeof *t);
}

/* Assert got == ref bitwise, naming the first differing record. */
static void trace_expect_eq(const trace *ref, const trace *got, const char *what, int nt)
{
    ck_assert_msg(ref->n_recs == got->n_recs && ref->n == got->n,
                  "%s: %d threads recorded %d tensors (%zu bytes), 1 thread %d (%zu bytes)",
                  what, nt, got->n_recs, got->n, ref->n_recs, ref->n);
    for (int i = 0; i < ref->n_recs; i++) {
        const rec *a = &ref->recs[i], *b = &got->recs[i];
        ck_assert_msg(a->n == b->n && !strcmp(a->label, b->label),
                      "%s: record %d is %s with 1 thread, %s with %d", what, i, a->label,
                      b->label, nt);
        if (memcmp(ref->p + a->off, got->p + b->off, a->n) != 0) {
            size_t k = 0;
            while (ref->p[a->off + k] == got->p[b->off + k])
                k++;
            ck_assert_msg(0, "%s: %s differs between 1 and %d threads (first at byte %zu of %zu)",
                          what, a->label, nt, k, a->n);
        }
    }
}

/* ---- every op case ----------------------------------------------------------------------- */

/* Forward + backward of case c in dtype dt with nt threads; records every node's value and
 * every gradient buffer, in topological order. The graph is built with no_reuse so that every
 * intermediate value and gradient stays readable after backward (planned execution equals
 * no_reuse bitwise: tests/test_planner.c). */
static void run_case(const tg_opcase *c, tg_dtype dt, int nt, trace *out)
{
    tg_ctx *ctx = tu_ctx_new();
    tg_ctx_set_threads(ctx, nt);
    ck_assert_int_eq(tg_ctx_threads(ctx), nt);
    tg_ctx_seed(ctx, 42);
    tg_tensor *y = c->build(ctx, dt);
    ck_assert_msg(y != NULL, "%s/%s: build failed: %s", c->op, c->name, tg_ctx_message(ctx));
    tg_graph *g = tg_graph_new_opts(ctx, &y, 1, &(tg_graph_opts){.no_reuse = true});
    ck_assert_msg(g != NULL, "%s/%s: tg_graph_new: %s", c->op, c->name, tg_ctx_message(ctx));
    tg_tensor *dy = tg_const(ctx, dt, tg_tensor_rank(y), tg_tensor_shape(y), "dy");
    ck_assert_ptr_nonnull(dy);
    for (int64_t i = 0; i < tg_tensor_numel(dy); i++)
        tg_set(dy, i, sin(0.37 * (double)i + 0.1));
    tg_status s = tg_graph_forward(g);
    ck_assert_msg(s == TG_OK, "%s/%s: forward: %s", c->op, c->name, tg_ctx_message(ctx));
    s = tg_graph_backward(g, y, dy);
    ck_assert_msg(s == TG_OK, "%s/%s: backward: %s", c->op, c->name, tg_ctx_message(ctx));
    for (int64_t i = 0; i < tg_graph_size(g); i++) {
        tg_tensor *x = tg_graph_node(g, i);
        trace_data(out, "value", x);
        trace_grad(out, "gradient", x);
    }
    /* a second backward accumulates into the leaves: the sums must agree too */
    s = tg_graph_backward(g, y, dy);
    ck_assert_msg(s == TG_OK, "%s/%s: second backward: %s", c->op, c->name, tg_ctx_message(ctx));
    for (int64_t l = 0; l < tg_graph_n_grad_leaves(g); l++)
        trace_grad(out, "accumulated gradient", tg_graph_grad_leaf(g, l));
    tu_ctx_free(ctx);
}

static trace g_ref, g_got;

static void traces_free(void)
{
    trace_free(&g_ref);
    trace_free(&g_got);
    tu_ctx_teardown();
}

START_TEST(test_opcase_threads)
{
    const tg_opcase *c = &tg_opcases[_i / 2];
    tg_dtype dt = tu_dtypes[_i % 2];
    char what[256];
    snprintf(what, sizeof what, "%s/%s (%s) %s", c->op, c->name, c->shapes, tg_dtype_str(dt));
    run_case(c, dt, count_at(0), &g_ref);
    ck_assert_int_gt(g_ref.n_recs, 0);
    for (int k = 1; k < n_counts(); k++) {
        run_case(c, dt, count_at(k), &g_got);
        trace_expect_eq(&g_ref, &g_got, what, count_at(k));
        trace_free(&g_got);
    }
    trace_free(&g_ref);
}
END_TEST

/* ---- a few training steps of a transformer LM ------------------------------------------------ */

typedef struct tf_size {
    int64_t B, T, V, D, H, F, L;
    int steps;
} tf_size;

/* With the shipped thresholds the model must be big enough for the parallel paths to engage
 * (dense R * O, GEMM tiles of 96 rows, attention (B, H, T, T), cross-entropy logits all above
 * TG_PAR_MIN = 32768 or its fractions); with TG_PAR_MIN = 1 a small one suffices. Valgrind
 * runs the small one. */
static tf_size tf_sizes(void)
{
#ifdef TG_THREADS_ALL_PARALLEL
    tf_size s = {2, 5, 11, 8, 2, 12, 2, 3};
#else
    tf_size s = {8, 32, 96, 64, 4, 256, 2, 3};
    if (tu_under_valgrind()) {
        s.B = 4;
        s.T = 16;
        s.D = 32;
        s.F = 128;
        s.L = 1;
        s.steps = 2;
    }
#endif
    return s;
}

static void run_training(tg_dtype dt, int nt, trace *out)
{
    tf_size z = tf_sizes();
    tg_ctx *ctx = tu_ctx_new();
    tg_ctx_set_threads(ctx, nt);
    tg_ctx_seed(ctx, 7);
    tg_transformer_config c;
    memset(&c, 0, sizeof c);
    c.vocab_size = z.V;
    c.max_seq_len = z.T;
    c.n_layers = z.L;
    c.layer = tg_encoder_config_default(z.D, z.H);
    c.layer.d_ff = z.F;
    c.layer.norm_first = true;
    c.layer.activation = TG_ACT_GELU;
    c.layer.dropout = 0.1;
    c.pos = TG_POS_LEARNED;
    c.causal = true;
    tg_transformer m;
    ck_assert_int_eq(tg_transformer_init(ctx, &m, dt, &c), TG_OK);
    tg_tensor *ids = tg_input(ctx, TG_I32, TG_DIMS(z.B, z.T), "ids");
    tg_tensor *tgt = tg_input(ctx, TG_I32, TG_DIMS(z.B, z.T), "targets");
    tg_tensor *loss =
        tg_cross_entropy(ctx, tg_transformer_forward(ctx, &m, ids, NULL), tgt, -1);
    ck_assert_msg(loss != NULL, "build: %s", tg_ctx_message(ctx));
    tg_graph_opts go = {.one_backward = true};
    tg_graph *g = tg_graph_new_opts(ctx, &loss, 1, &go);
    ck_assert_msg(g != NULL, "tg_graph_new_opts: %s", tg_ctx_message(ctx));
    tg_optim_config oc = tg_optim_defaults(TG_OPTIM_ADAMW);
    oc.lr = 3e-3;
    tg_optim *opt = tg_optim_new(ctx, &oc, 0, NULL);
    ck_assert_ptr_nonnull(opt);
    uint64_t lcg = 12345;
    for (int step = 0; step < z.steps; step++) {
        for (int64_t i = 0; i < z.B * z.T; i++) {
            lcg = lcg * 6364136223846793005ULL + 1442695040888963407ULL;
            tg_set(ids, i, (double)((lcg >> 33) % (uint64_t)z.V));
            tg_set(tgt, i, (double)((lcg >> 17) % (uint64_t)z.V));
        }
        tg_graph_zero_grad(g);
        ck_assert_int_eq(tg_graph_forward(g), TG_OK);
        ck_assert_int_eq(tg_graph_backward(g, loss, NULL), TG_OK);
        trace_data(out, "loss", loss);
        double norm = 0;
        ck_assert_int_eq(tg_clip_grad_norm(ctx, 0, NULL, 0.5, &norm), TG_OK);
        trace_put(out, "norm", "all parameters", &norm, sizeof norm);
        for (int64_t i = 0; i < tg_ctx_n_params(ctx); i++)
            trace_grad(out, "clipped gradient", tg_ctx_param(ctx, i));
        ck_assert_int_eq(tg_optim_step(opt, -1), TG_OK);
        for (int64_t i = 0; i < tg_ctx_n_params(ctx); i++)
            trace_data(out, "parameter", tg_ctx_param(ctx, i));
        for (int64_t i = 0; i < tg_optim_n_state(opt); i++)
            trace_data(out, "optimizer state", tg_optim_state(opt, i));
    }
    uint64_t rng[4];
    tg_rng_get_state(ctx, rng);
    trace_put(out, "state", "rng", rng, sizeof rng);
    tu_ctx_free(ctx);
}

START_TEST(test_training_threads)
{
    tg_dtype dt = tu_dtypes[_i];
    char what[64];
    snprintf(what, sizeof what, "transformer training (%s)", tg_dtype_str(dt));
    run_training(dt, count_at(0), &g_ref);
    for (int k = 1; k < n_counts(); k++) {
        run_training(dt, count_at(k), &g_got);
        trace_expect_eq(&g_ref, &g_got, what, count_at(k));
        trace_free(&g_got);
    }
    trace_free(&g_ref);
}
END_TEST

static Suite *threads_suite(void)
{
    Suite *s = suite_create("threads");
    TCase *tc = tcase_create("opcases");
    tcase_add_checked_fixture(tc, NULL, traces_free);
    tcase_set_timeout(tc, 120);
    tcase_add_loop_test(tc, test_opcase_threads, 0, 2 * tg_n_opcases);
    suite_add_tcase(s, tc);

    tc = tcase_create("training");
    tcase_add_checked_fixture(tc, NULL, traces_free);
    tcase_set_timeout(tc, 300);
    tcase_add_loop_test(tc, test_training_threads, 0, 2);
    suite_add_tcase(s, tc);
    return s;
}

int main(void) { return tu_run(threads_suite()); }
