/*
 * test_memory.c - inference graphs and bounded memory, tested as an embedder
 * would use them, and as an adversary would:
 * - the embedder loop: a counting allocator under the context, a mark, then >= 10,000
 *   iterations of build a fresh no_grad graph over fresh inputs / forward / read / rewind;
 *   after every rewind the live bytes and blocks equal those at the mark, and the peak over
 *   the last 1,000 iterations equals the peak over the first 1,000; the same over op nodes
 *   built before the mark (their data binding is dropped by the rewind, a new graph runs
 *   them again);
 * - tg_ctx_mark / tg_ctx_rewind semantics: nesting, rewinding to an older mark, twice to one
 *   mark, stale marks refused (also after the context grew again, and with parameters that
 *   would dangle), parameters after the mark dropped, a gradient allocated after the mark for
 *   a parameter made before it kept, graphs after the mark freed and graphs before it still
 *   running (also after re-planning for a new thread count), the error state untouched, a
 *   long history of nested rewinds, tg_ctx_free after rewinds returning every byte;
 * - no_grad graphs: forward bitwise equal to a training graph's for every op case, backward
 *   refused, no gradient memory, a smaller arena for a transformer, dropout following the
 *   context's training mode;
 * - tg_graph_memory on a graph small enough to compute by hand, planned and no_reuse;
 * - shared arenas: graphs of several batch shapes over the same parameters in one arena give
 *   bitwise the results of the same graphs with their own arenas, in any run order and debug
 *   mode; the arena is the largest graph's need; backward after another graph of the arena
 *   ran, and reading a stale output, are refused; growing keeps the last graph's values;
 *   rewinds and tg_graph_free leave the arena usable.
 */
#include "opcases.h"
#include "testutil.h"
#include "tgrad_nn.h"
#include "tgrad_train.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- a counting allocator ----------------------------------------------------------------
 * Every block carries a 16-byte header (its size and a magic word), so the allocator knows the
 * live bytes and blocks at any time, the peak since the last reset, and notices a free of
 * something it did not hand out (or freed twice). */
typedef struct {
    size_t live, peak;
    long blocks, n_alloc, n_free, bad_free;
    bool fail; /* refuse every allocation while set */
} counter;

#define CT_MAGIC 0x636f756e74657221ULL /* "counter!" */
#define CT_HDR 16

static void *ct_alloc(void *user, size_t size)
{
    counter *c = user;
    if (c->fail)
        return NULL;
    unsigned char *p = malloc(size + CT_HDR);
    if (!p)
        return NULL;
    uint64_t h[2] = {(uint64_t)size, CT_MAGIC};
    memcpy(p, h, sizeof h);
    c->live += size;
    c->blocks++;
    c->n_alloc++;
    if (c->live > c->peak)
        c->peak = c->live;
    return p + CT_HDR;
}

static void ct_free(void *user, void *ptr)
{
    counter *c = user;
    if (!ptr)
        return;
    unsigned char *p = (unsigned char *)ptr - CT_HDR;
    uint64_t h[2];
    memcpy(h, p, sizeof h);
    if (h[1] != CT_MAGIC) {
        c->bad_free++;
        return;
    }
    h[1] = 0;
    memcpy(p, h, sizeof h);
    c->live -= (size_t)h[0];
    c->blocks--;
    c->n_free++;
    free(p);
}

static tg_ctx *counted_ctx(counter *c)
{
    memset(c, 0, sizeof *c);
    tg_allocator al = {ct_alloc, ct_free, c};
    tg_ctx *ctx = tg_ctx_new_with(&al);
    ck_assert_ptr_nonnull(ctx);
    return ctx;
}

/* Free ctx and check every block came back exactly once. */
static void free_counted(tg_ctx *ctx, counter *c)
{
    tg_ctx_free(ctx);
    ck_assert_int_eq(c->bad_free, 0);
    ck_assert_int_eq(c->blocks, 0);
    ck_assert_uint_eq(c->live, 0);
    ck_assert_int_eq(c->n_alloc, c->n_free);
}

/* What the context and its allocator hold right now. */
typedef struct {
    size_t ctx_bytes, live;
    long blocks;
} snapshot;

static snapshot snap(const tg_ctx *ctx, const counter *c)
{
    return (snapshot){tg_ctx_bytes(ctx), c->live, c->blocks};
}

static void assert_snap_eq(snapshot a, snapshot b, const char *what, long iter)
{
    ck_assert_msg(a.ctx_bytes == b.ctx_bytes && a.live == b.live && a.blocks == b.blocks,
                  "%s (iteration %ld): context bytes %zu vs %zu, allocator bytes %zu vs %zu, "
                  "blocks %ld vs %ld", what, iter, a.ctx_bytes, b.ctx_bytes, a.live, b.live,
                  a.blocks, b.blocks);
}

/* Iterations of the embedder loops: >= 10,000, far fewer under valgrind. */
static long loop_iters(void) { return tu_under_valgrind() ? 200 : 10000; }

/* ---- the embedder loop ------------------------------------------------------------------- */
#define LM_V 16
#define LM_T 8

static void lm_init(tg_ctx *ctx, tg_transformer *m)
{
    tg_transformer_config c;
    memset(&c, 0, sizeof c);
    c.vocab_size = LM_V;
    c.max_seq_len = LM_T;
    c.n_layers = 1;
    c.layer = tg_encoder_config_default(16, 2);
    c.layer.d_ff = 32;
    c.layer.norm_first = true;
    c.causal = true;
    ck_assert_int_eq(tg_transformer_init(ctx, m, TG_F32, &c), TG_OK);
}

/* Ids of iteration `it`: one of four patterns. */
static void lm_ids(int32_t *ids, long it)
{
    for (int i = 0; i < LM_T; i++)
        ids[i] = (int32_t)((i * 5 + (it % 4) * 3) % LM_V);
}

/* A fresh graph over fresh inputs every iteration, rewound every iteration: memory is flat and
 * outputs never drift (each iteration's logits equal, bitwise, those of the first iteration
 * with the same ids). */
START_TEST(test_embedder_loop_flat)
{
    counter c;
    tg_ctx *ctx = counted_ctx(&c);
    tg_ctx_seed(ctx, 3);
    tg_transformer m;
    lm_init(ctx, &m);
    tg_mark mark = tg_ctx_mark(ctx);
    snapshot at_mark = snap(ctx, &c);
    long n = loop_iters(), win = n / 10;
    float ref[4][LM_T * LM_V];
    size_t peak_first = 0, peak_last = 0;
    for (long it = 0; it < n; it++) {
        if (it == 0 || it == n - win)
            c.peak = c.live; /* start a window */
        int32_t idv[LM_T];
        lm_ids(idv, it);
        tg_tensor *ids = tg_input(ctx, TG_I32, TG_DIMS(1, LM_T), "ids");
        ck_assert_ptr_nonnull(ids);
        ck_assert_int_eq(tg_tensor_set_data(ids, idv, TG_I32, LM_T), TG_OK);
        tg_tensor *logits = tg_transformer_forward(ctx, &m, ids, NULL);
        tg_graph *g = tg_graph_new_opts(ctx, &logits, 1, &(tg_graph_opts){.no_grad = true});
        ck_assert_msg(g != NULL, "%s", tg_ctx_message(ctx));
        ck_assert_int_eq(tg_graph_forward(g), TG_OK);
        float out[LM_T * LM_V];
        ck_assert_int_eq(tg_tensor_get_data(logits, out, TG_F32, LM_T * LM_V), TG_OK);
        if (it < 4)
            memcpy(ref[it], out, sizeof out);
        else
            ck_assert_msg(memcmp(ref[it % 4], out, sizeof out) == 0,
                          "iteration %ld: logits differ from iteration %ld", it, it % 4);
        ck_assert_int_eq(tg_ctx_rewind(ctx, mark), TG_OK);
        assert_snap_eq(snap(ctx, &c), at_mark, "after rewind", it);
        if (it == win - 1)
            peak_first = c.peak;
        if (it == n - 1)
            peak_last = c.peak;
    }
    ck_assert_uint_gt(peak_first, at_mark.live);
    ck_assert_msg(peak_first == peak_last, "peak over the first %ld iterations %zu bytes, over "
                  "the last %ld %zu bytes", win, peak_first, win, peak_last);
    ck_assert_int_eq(tg_ctx_status(ctx), TG_OK);
    free_counted(ctx, &c);
}
END_TEST

/* The same over op nodes built BEFORE the mark: each iteration binds them to a new graph that
 * the rewind frees. After every rewind their data binding is gone (NULL), memory is back to the
 * mark's, and a new graph runs them again. MHA (f64) with a fresh op on top each iteration. */
START_TEST(test_embedder_loop_old_nodes)
{
    counter c;
    tg_ctx *ctx = counted_ctx(&c);
    tg_ctx_seed(ctx, 4);
    tg_mha m;
    ck_assert_int_eq(tg_mha_init(ctx, &m, TG_F64, 8, 2, NULL), TG_OK);
    tg_tensor *x = tg_input(ctx, TG_F64, TG_DIMS(2, 3, 8), "x");
    tg_tensor *w = NULL;
    tg_tensor *y = tg_mha_forward(ctx, &m, x, x, x, NULL, &w);
    ck_assert_ptr_nonnull(y);
    ck_assert_ptr_nonnull(w);
    /* a graph built before the mark over the same nodes keeps working throughout */
    tg_graph *g0 = tg_graph_new_opts(ctx, &y, 1, &(tg_graph_opts){.no_grad = true});
    ck_assert_ptr_nonnull(g0);
    tg_mark mark = tg_ctx_mark(ctx);
    snapshot at_mark = snap(ctx, &c);
    long n = loop_iters(), win = n / 10;
    size_t peak_first = 0, peak_last = 0;
    double ref[2][48];
    for (long it = 0; it < n; it++) {
        if (it == 0 || it == n - win)
            c.peak = c.live;
        for (int64_t i = 0; i < 48; i++)
            tg_set(x, i, sin(0.3 * (double)i + (double)(it % 2)));
        tg_tensor *z = tg_scale(ctx, y, 2.0); /* a fresh node over an old one */
        tg_tensor *outs[3] = {y, z, w};
        tg_graph *g = tg_graph_new_opts(ctx, outs, 3, &(tg_graph_opts){.no_grad = true});
        ck_assert_msg(g != NULL, "%s", tg_ctx_message(ctx));
        ck_assert_int_eq(tg_graph_forward(g), TG_OK);
        ck_assert_ptr_nonnull(tg_tensor_data(y));
        for (int64_t i = 0; i < 48; i++) {
            double v = tg_get(y, i);
            ck_assert(tg_get(z, i) == 2.0 * v);
            if (it < 2)
                ref[it][i] = v;
            else
                ck_assert_msg(v == ref[it % 2][i], "iteration %ld: y[%lld] drifted", it,
                              (long long)i);
        }
        ck_assert_int_eq(tg_ctx_rewind(ctx, mark), TG_OK);
        ck_assert_ptr_null(tg_tensor_data(y)); /* bound to the freed graph: dropped */
        ck_assert_ptr_null(tg_tensor_data(w));
        assert_snap_eq(snap(ctx, &c), at_mark, "after rewind", it);
        if (it == win - 1)
            peak_first = c.peak;
        if (it == n - 1)
            peak_last = c.peak;
    }
    ck_assert_msg(peak_first == peak_last, "peak %zu vs %zu", peak_first, peak_last);
    /* the graph built before the mark runs the old nodes again (same values) */
    ck_assert_int_eq(tg_graph_forward(g0), TG_OK);
    for (int64_t i = 0; i < 48; i++)
        ck_assert(tg_get(y, i) == ref[(n - 1) % 2][i]);
    /* and so does a new training graph over them, after the loop */
    tg_tensor *loss = tg_sum_all(ctx, y);
    tg_graph *g1 = tg_graph_new(ctx, &loss, 1);
    ck_assert_ptr_nonnull(g1);
    ck_assert_int_eq(tg_graph_forward(g1), TG_OK);
    ck_assert_int_eq(tg_graph_backward(g1, loss, NULL), TG_OK);
    ck_assert(isfinite(tg_grad_get(m.in_proj_weight, 0)));
    free_counted(ctx, &c);
}
END_TEST

/* ---- mark / rewind semantics ------------------------------------------------------------- */
static tg_tensor *vec(tg_ctx *ctx, const char *name, double v)
{
    tg_tensor *t = tg_input(ctx, TG_F64, TG_DIMS(4), name);
    ck_assert_ptr_nonnull(t);
    tg_fill(t, v);
    return t;
}

START_TEST(test_rewind_nested)
{
    counter c;
    tg_ctx *ctx = counted_ctx(&c);
    tg_tensor *a = vec(ctx, "a", 1);
    tg_mark m1 = tg_ctx_mark(ctx);
    snapshot s1 = snap(ctx, &c);
    tg_tensor *b = vec(ctx, "b", 2);
    tg_mark m2 = tg_ctx_mark(ctx);
    snapshot s2 = snap(ctx, &c);
    tg_tensor *y = tg_sum_all(ctx, tg_mul(ctx, a, b));
    tg_graph *g = tg_graph_new(ctx, &y, 1);
    ck_assert_int_eq(tg_graph_forward(g), TG_OK);
    ck_assert(tg_get(y, 0) == 8.0);
    ck_assert_int_eq(tg_ctx_rewind(ctx, m2), TG_OK);
    assert_snap_eq(snap(ctx, &c), s2, "inner rewind", 0);
    ck_assert(tg_get(a, 3) == 1.0 && tg_get(b, 3) == 2.0); /* made before m2: alive */
    /* the inner mark again, with other work in between */
    tg_tensor *y2 = tg_sum_all(ctx, b);
    tg_graph *g2 = tg_graph_new(ctx, &y2, 1);
    ck_assert_int_eq(tg_graph_forward(g2), TG_OK);
    ck_assert(tg_get(y2, 0) == 8.0);
    ck_assert_int_eq(tg_ctx_rewind(ctx, m2), TG_OK);
    assert_snap_eq(snap(ctx, &c), s2, "inner rewind again", 0);
    ck_assert_int_eq(tg_ctx_rewind(ctx, m1), TG_OK);
    assert_snap_eq(snap(ctx, &c), s1, "outer rewind", 0);
    ck_assert(tg_get(a, 0) == 1.0);
    ck_assert_int_eq(tg_ctx_status(ctx), TG_OK);
    free_counted(ctx, &c);
}
END_TEST

/* Rewinding to an older mark after a newer one releases the newer one's objects too; the newer
 * mark is then stale: refused with TG_ERR_ARG (nothing released, nothing else changed). */
START_TEST(test_rewind_older_then_newer_refused)
{
    counter c;
    tg_ctx *ctx = counted_ctx(&c);
    vec(ctx, "a", 1);
    tg_mark m1 = tg_ctx_mark(ctx);
    snapshot s1 = snap(ctx, &c);
    vec(ctx, "b", 2);
    tg_mark m2 = tg_ctx_mark(ctx);
    vec(ctx, "c", 3);
    ck_assert_int_eq(tg_ctx_rewind(ctx, m1), TG_OK);
    assert_snap_eq(snap(ctx, &c), s1, "rewind to the older mark", 0);
    ck_assert_int_eq(tg_ctx_rewind(ctx, m2), TG_ERR_ARG);
    tu_assert_error(ctx, TG_ERR_ARG, "tg_ctx_rewind");
    assert_snap_eq(snap(ctx, &c), s1, "refused rewind", 0);
    tg_ctx_clear_error(ctx);
    /* rewinding twice to one mark is fine; so is a mark taken after the rewind */
    ck_assert_int_eq(tg_ctx_rewind(ctx, m1), TG_OK);
    ck_assert_int_eq(tg_ctx_rewind(ctx, m1), TG_OK);
    tg_mark m3 = tg_ctx_mark(ctx);
    vec(ctx, "d", 4);
    ck_assert_int_eq(tg_ctx_rewind(ctx, m3), TG_OK);
    assert_snap_eq(snap(ctx, &c), s1, "rewind to a mark taken after a rewind", 0);
    ck_assert_int_eq(tg_ctx_rewind(ctx, m2), TG_ERR_ARG); /* still stale */
    ck_assert_int_eq(tg_ctx_rewind(NULL, m1), TG_ERR_ARG);
    free_counted(ctx, &c);
}
END_TEST

/* A stale mark stays stale after the context has grown past the point it names again: a rewind
 * to it would free half of objects made since (a tensor made just before that point keeping
 * a pointer to data made just after it). */
START_TEST(test_rewind_stale_after_regrowth)
{
    counter c;
    tg_ctx *ctx = counted_ctx(&c);
    tg_mark m1 = tg_ctx_mark(ctx);
    vec(ctx, "a", 1);
    tg_mark m2 = tg_ctx_mark(ctx);
    vec(ctx, "b", 2);
    ck_assert_int_eq(tg_ctx_rewind(ctx, m1), TG_OK);
    tg_tensor *keep[8];
    for (int i = 0; i < 8; i++) /* many more objects than before m2 */
        keep[i] = vec(ctx, "regrown", (double)i);
    snapshot s = snap(ctx, &c);
    ck_assert_int_eq(tg_ctx_rewind(ctx, m2), TG_ERR_ARG);
    tu_assert_error(ctx, TG_ERR_ARG, "rewound past");
    assert_snap_eq(snap(ctx, &c), s, "refused rewind", 0);
    for (int i = 0; i < 8; i++)
        ck_assert(tg_get(keep[i], 3) == (double)i);
    free_counted(ctx, &c);
}
END_TEST

/* The same with parameters: accepting the stale mark would leave the context's parameter list
 * pointing at freed tensors. */
START_TEST(test_rewind_stale_params)
{
    counter c;
    tg_ctx *ctx = counted_ctx(&c);
    tg_mark m1 = tg_ctx_mark(ctx);
    ck_assert_ptr_nonnull(tg_param(ctx, TG_F32, TG_DIMS(3), "p1"));
    tg_mark m2 = tg_ctx_mark(ctx);
    ck_assert_int_eq(tg_ctx_rewind(ctx, m1), TG_OK);
    ck_assert_int_eq(tg_ctx_n_params(ctx), 0);
    tg_tensor *q = tg_param(ctx, TG_F32, TG_DIMS(3), "q");
    ck_assert_ptr_nonnull(q);
    ck_assert_int_eq(tg_ctx_rewind(ctx, m2), TG_ERR_ARG);
    ck_assert_int_eq(tg_ctx_n_params(ctx), 1);
    ck_assert_ptr_eq(tg_ctx_find_param(ctx, "q"), q);
    ck_assert_ptr_null(tg_ctx_find_param(ctx, "p1"));
    tg_fill(q, 1.5);
    ck_assert(tg_get(q, 2) == 1.5);
    free_counted(ctx, &c);
}
END_TEST

START_TEST(test_rewind_drops_params)
{
    tg_ctx *ctx = tu_ctx_new();
    tg_tensor *p = tg_param(ctx, TG_F32, TG_DIMS(2), "early");
    tg_mark m = tg_ctx_mark(ctx);
    size_t bytes = tg_ctx_bytes(ctx);
    for (int i = 0; i < 40; i++) { /* enough to grow the context's parameter array */
        char name[32];
        snprintf(name, sizeof name, "late%d", i);
        ck_assert_ptr_nonnull(tg_param(ctx, TG_F32, TG_DIMS(2), name));
    }
    ck_assert_int_eq(tg_ctx_n_params(ctx), 41);
    ck_assert_int_eq(tg_ctx_rewind(ctx, m), TG_OK);
    ck_assert_int_eq(tg_ctx_n_params(ctx), 1);
    ck_assert_ptr_eq(tg_ctx_param(ctx, 0), p);
    ck_assert_ptr_null(tg_ctx_param(ctx, 1));
    ck_assert_ptr_eq(tg_ctx_find_param(ctx, "early"), p);
    ck_assert_ptr_null(tg_ctx_find_param(ctx, "late0"));
    ck_assert_ptr_null(tg_ctx_find_param(ctx, "late39"));
    /* the parameter array grew after the mark and is the context's own: kept, larger */
    ck_assert_uint_ge(tg_ctx_bytes(ctx), bytes);
    /* new parameters after the rewind are listed again */
    tg_tensor *p2 = tg_param(ctx, TG_F32, TG_DIMS(2), "again");
    ck_assert_int_eq(tg_ctx_n_params(ctx), 2);
    ck_assert_ptr_eq(tg_ctx_param(ctx, 1), p2);
    tu_ctx_free(ctx);
}
END_TEST

/* A parameter made before the mark whose gradient a graph made after the mark allocated keeps
 * that gradient (and its value) through the rewind, and training it goes on working. */
START_TEST(test_rewind_keeps_old_param_grad)
{
    counter c;
    tg_ctx *ctx = counted_ctx(&c);
    tg_tensor *w = tg_param(ctx, TG_F64, TG_DIMS(4), "w");
    for (int i = 0; i < 4; i++)
        tg_set(w, i, (double)(i + 1));
    tg_optim_config oc = tg_optim_defaults(TG_OPTIM_SGD);
    tg_optim *opt = tg_optim_new(ctx, &oc, 0, NULL);
    ck_assert_ptr_nonnull(opt);
    ck_assert_ptr_null(tg_tensor_grad(w));
    tg_mark m = tg_ctx_mark(ctx);
    snapshot s = snap(ctx, &c);
    tg_tensor *x = vec(ctx, "x", 2.0);
    tg_tensor *y = tg_sum_all(ctx, tg_mul(ctx, w, x)); /* dy/dw = x = 2 */
    tg_graph *g = tg_graph_new(ctx, &y, 1);
    ck_assert_ptr_nonnull(g);
    ck_assert_ptr_nonnull(tg_tensor_grad(w));
    ck_assert_int_eq(tg_graph_forward(g), TG_OK);
    ck_assert_int_eq(tg_graph_backward(g, y, NULL), TG_OK);
    ck_assert_int_eq(tg_ctx_rewind(ctx, m), TG_OK);
    /* the gradient stays: 4 doubles more than at the mark, one block more */
    ck_assert_ptr_nonnull(tg_tensor_grad(w));
    ck_assert_uint_eq(tg_ctx_bytes(ctx), s.ctx_bytes + 4 * sizeof(double));
    ck_assert_int_eq(c.blocks, s.blocks + 1);
    for (int i = 0; i < 4; i++)
        ck_assert(tg_grad_get(w, i) == 2.0);
    /* training goes on: SGD step with the kept gradient, then a new graph accumulates into it */
    ck_assert_int_eq(tg_optim_step(opt, 0.5), TG_OK);
    for (int i = 0; i < 4; i++)
        ck_assert(tg_get(w, i) == (double)(i + 1) - 1.0);
    tg_zero_grad(w);
    snapshot s2 = snap(ctx, &c);
    for (int round = 0; round < 3; round++) {
        tg_tensor *x2 = vec(ctx, "x2", 3.0);
        tg_tensor *y2 = tg_sum_all(ctx, tg_mul(ctx, tg_mul(ctx, w, x2), w)); /* 2 w x */
        tg_graph *g2 = tg_graph_new(ctx, &y2, 1);
        ck_assert_int_eq(tg_graph_forward(g2), TG_OK);
        ck_assert_int_eq(tg_graph_backward(g2, y2, NULL), TG_OK);
        for (int i = 0; i < 4; i++)
            ck_assert(tg_grad_get(w, i) == 6.0 * (double)i * (double)(round + 1));
        ck_assert_int_eq(tg_ctx_rewind(ctx, m), TG_OK);
        assert_snap_eq(snap(ctx, &c), s2, "rewind after training", round);
    }
    ck_assert_int_eq(tg_optim_step(opt, 0.5), TG_OK);
    for (int i = 0; i < 4; i++) /* w_i = i - 0.5 * 18 i */
        ck_assert(tg_get(w, i) == (double)i - 9.0 * (double)i);
    free_counted(ctx, &c);
}
END_TEST

/* Graphs built after the mark are freed by the rewind; graphs built before it keep running
 * (forward and backward), also when they were run (and so re-bound) after the mark. */
START_TEST(test_rewind_graphs)
{
    counter c;
    tg_ctx *ctx = counted_ctx(&c);
    tg_tensor *w = tg_param(ctx, TG_F64, TG_DIMS(4), "w");
    tg_fill(w, 0.5);
    tg_tensor *x = vec(ctx, "x", 2.0);
    tg_tensor *h = tg_relu(ctx, tg_mul(ctx, w, x));
    tg_tensor *y = tg_sum_all(ctx, tg_mul(ctx, h, h)); /* sum (w x)^2: dy/dw = 2 w x^2 = 4 */
    tg_graph *g0 = tg_graph_new(ctx, &y, 1);
    ck_assert_ptr_nonnull(g0);
    tg_mark m = tg_ctx_mark(ctx);
    snapshot s = snap(ctx, &c);
    for (int round = 0; round < 3; round++) {
        tg_graph *ga = tg_graph_new(ctx, &y, 1); /* same nodes, graph after the mark */
        tg_tensor *z = tg_scale(ctx, h, 3.0);
        tg_graph *gb = tg_graph_new_opts(ctx, &z, 1, &(tg_graph_opts){.no_grad = true});
        ck_assert(ga && gb);
        ck_assert_int_eq(tg_graph_forward(ga), TG_OK);
        ck_assert_int_eq(tg_graph_forward(gb), TG_OK);
        ck_assert(tg_get(z, 1) == 3.0);
        ck_assert_int_eq(tg_graph_forward(g0), TG_OK);
        ck_assert_int_eq(tg_ctx_rewind(ctx, m), TG_OK);
        assert_snap_eq(snap(ctx, &c), s, "graphs after the mark freed", round);
        tg_zero_grad(w);
        ck_assert_int_eq(tg_graph_forward(g0), TG_OK);
        ck_assert(tg_get(y, 0) == 4.0);
        ck_assert_int_eq(tg_graph_backward(g0, y, NULL), TG_OK);
        ck_assert(tg_grad_get(w, 2) == 4.0);
    }
    /* a graph freed explicitly after the mark, then the rewind */
    tg_graph *gc = tg_graph_new(ctx, &y, 1);
    tg_graph_free(gc);
    ck_assert_int_eq(tg_ctx_rewind(ctx, m), TG_OK);
    assert_snap_eq(snap(ctx, &c), s, "explicit free, then rewind", 0);
    /* and a graph made before the mark, freed after it */
    tg_graph_free(g0);
    ck_assert_int_eq(tg_ctx_rewind(ctx, m), TG_OK);
    ck_assert_uint_lt(tg_ctx_bytes(ctx), s.ctx_bytes);
    free_counted(ctx, &c);
}
END_TEST

/* A graph built before the mark but re-planned after it (the thread count grew, so its
 * workspace and arena were allocated again) must survive the rewind. */
START_TEST(test_rewind_replanned_graph)
{
    counter c;
    tg_ctx *ctx = counted_ctx(&c);
    tg_ctx_set_threads(ctx, 1);
    tg_ctx_seed(ctx, 9);
    tg_tensor *w = tg_param(ctx, TG_F64, TG_DIMS(6, 5), "w");
    tg_fill_uniform(w, -1, 1);
    tg_tensor *x = tg_input(ctx, TG_F64, TG_DIMS(4, 5), "x");
    tg_fill_uniform(x, -1, 1);
    tg_tensor *y = tg_sum_all(ctx, tg_relu(ctx, tg_dense(ctx, x, w, NULL)));
    tg_graph *g = tg_graph_new(ctx, &y, 1);
    ck_assert_int_eq(tg_graph_forward(g), TG_OK);
    double ref = tg_get(y, 0);
    tg_memory_report r1, r;
    ck_assert_int_eq(tg_graph_memory(g, &r1), TG_OK);
    for (int round = 0; round < 3; round++) {
        tg_mark m = tg_ctx_mark(ctx);
        int nt = round + 2;
        tg_ctx_set_threads(ctx, nt); /* more threads than planned: forward plans again */
        ck_assert_int_eq(tg_graph_forward(g), TG_OK);
        ck_assert(tg_get(y, 0) == ref);
        /* the report follows the new plan: workspace is per thread */
        ck_assert_int_eq(tg_graph_memory(g, &r), TG_OK);
        ck_assert_uint_eq(r.workspace, (size_t)nt * r1.workspace);
        ck_assert_uint_eq(r.activations, r1.activations);
        ck_assert_uint_eq(r.gradients, r1.gradients);
        ck_assert_int_eq(tg_ctx_rewind(ctx, m), TG_OK);
        ck_assert_int_eq(c.bad_free, 0);
        ck_assert_int_eq(tg_graph_forward(g), TG_OK); /* same thread count: no new plan */
        ck_assert(tg_get(y, 0) == ref);
        ck_assert_int_eq(tg_graph_backward(g, y, NULL), TG_OK);
    }
    tg_graph_free(g);
    free_counted(ctx, &c);
}
END_TEST

/* An input read only by ops that a rewind released is free again: tg_set_requires_grad (which
 * refuses while an op reads the input) accepts it; while an op made before the mark still
 * reads it, it refuses. */
START_TEST(test_rewind_releases_consumers)
{
    tg_ctx *ctx = tu_ctx_new();
    tg_tensor *x = vec(ctx, "x", 1.0);
    tg_tensor *k = vec(ctx, "k", 3.0);
    tg_mark m = tg_ctx_mark(ctx);
    for (int round = 0; round < 2; round++) {
        ck_assert_ptr_nonnull(tg_sum_all(ctx, x));
        ck_assert_ptr_nonnull(tg_sum_all(ctx, x));
        ck_assert_int_eq(tg_set_requires_grad(x, true), TG_ERR_STATE);
        tu_assert_error(ctx, TG_ERR_STATE, "already read by an op");
        tg_ctx_clear_error(ctx);
        ck_assert_int_eq(tg_ctx_rewind(ctx, m), TG_OK);
    }
    ck_assert_int_eq(tg_set_requires_grad(x, true), TG_OK);
    tg_tensor *y = tg_sum_all(ctx, tg_mul(ctx, x, k)); /* now it requires grad */
    tg_graph *g = tg_graph_new(ctx, &y, 1);
    ck_assert_int_eq(tg_graph_forward(g), TG_OK);
    ck_assert_int_eq(tg_graph_backward(g, y, NULL), TG_OK);
    ck_assert(tg_grad_get(x, 0) == 3.0);
    /* k: read by an op made before the next mark; a rewind to that mark leaves it read */
    tg_mark m2 = tg_ctx_mark(ctx);
    ck_assert_ptr_nonnull(tg_scale(ctx, k, 2.0));
    ck_assert_int_eq(tg_ctx_rewind(ctx, m2), TG_OK);
    ck_assert_int_eq(tg_set_requires_grad(k, true), TG_ERR_STATE);
    tg_ctx_clear_error(ctx);
    /* and after a rewind past that op too, also when new objects were made since */
    ck_assert_int_eq(tg_ctx_rewind(ctx, m), TG_OK);
    for (int i = 0; i < 5; i++)
        vec(ctx, "filler", (double)i);
    ck_assert_int_eq(tg_set_requires_grad(k, true), TG_OK);
    tu_ctx_free(ctx);
}
END_TEST

/* A rewind does not touch the error state: a pending build error stays (status and message),
 * a run error stays, and no error stays none. */
START_TEST(test_rewind_error_state)
{
    tg_ctx *ctx = tu_ctx_new();
    tg_tensor *a = vec(ctx, "a", 1);
    tg_mark m = tg_ctx_mark(ctx);
    tg_tensor *b = tg_input(ctx, TG_F64, TG_DIMS(3), "b");
    ck_assert_ptr_null(tg_add(ctx, a, b)); /* (4) + (3): build error */
    char msg[512];
    snprintf(msg, sizeof msg, "%s", tg_ctx_message(ctx));
    tg_status st = tg_ctx_status(ctx);
    ck_assert_int_ne(st, TG_OK);
    ck_assert_int_eq(tg_ctx_rewind(ctx, m), TG_OK);
    ck_assert_int_eq(tg_ctx_status(ctx), st);
    ck_assert_str_eq(tg_ctx_message(ctx), msg);
    ck_assert_ptr_null(tg_scale(ctx, a, 2.0)); /* still sticky */
    tg_ctx_clear_error(ctx);
    /* a run error */
    tg_tensor *y = tg_sum_all(ctx, a);
    tg_graph *g = tg_graph_new(ctx, &y, 1);
    ck_assert_int_eq(tg_graph_backward(g, y, NULL), TG_ERR_STATE); /* no forward yet */
    snprintf(msg, sizeof msg, "%s", tg_ctx_message(ctx));
    ck_assert_int_eq(tg_ctx_rewind(ctx, m), TG_OK);
    ck_assert_int_eq(tg_ctx_status(ctx), TG_ERR_STATE);
    ck_assert_str_eq(tg_ctx_message(ctx), msg);
    tg_ctx_clear_error(ctx);
    ck_assert_int_eq(tg_ctx_rewind(ctx, m), TG_OK);
    ck_assert_int_eq(tg_ctx_status(ctx), TG_OK);
    ck_assert_str_eq(tg_ctx_message(ctx), "");
    tu_ctx_free(ctx);
}
END_TEST

/* A long history: each "epoch" keeps something, marks, and rewinds a few times to that mark
 * (many more nested rewind points than a context keeps inline). Every epoch's mark stays
 * usable, marks of later epochs become stale once an earlier one is rewound to, and memory
 * comes back exactly. */
START_TEST(test_rewind_long_history)
{
    counter c;
    tg_ctx *ctx = counted_ctx(&c);
    enum { EPOCHS = 100 };
    tg_mark marks[EPOCHS];
    snapshot snaps[EPOCHS];
    for (int e = 0; e < EPOCHS; e++) {
        vec(ctx, "epoch", (double)e); /* kept: made before this epoch's mark */
        marks[e] = tg_ctx_mark(ctx);
        vec(ctx, "step", -1.0);
        ck_assert_int_eq(tg_ctx_rewind(ctx, marks[e]), TG_OK);
        snaps[e] = snap(ctx, &c); /* after the epoch's first rewind point is recorded */
        for (int k = 0; k < 3; k++) {
            vec(ctx, "step", (double)k);
            ck_assert_int_eq(tg_ctx_rewind(ctx, marks[e]), TG_OK);
            /* the same bytes after every rewind of the epoch (its history entry is replaced) */
            assert_snap_eq(snap(ctx, &c), snaps[e], "rewind within an epoch", e);
        }
    }
    /* every mark is still valid: go back to epoch 60's, then 10's. Memory comes back but for
       the context's history of rewind points, which grew with the epochs (two 64-bit words per
       point, in an array that doubles) */
    size_t history = 2 * EPOCHS * 2 * sizeof(uint64_t);
    ck_assert_int_eq(tg_ctx_rewind(ctx, marks[60]), TG_OK);
    ck_assert_uint_ge(tg_ctx_bytes(ctx), snaps[60].ctx_bytes);
    ck_assert_uint_le(tg_ctx_bytes(ctx), snaps[60].ctx_bytes + history);
    ck_assert_int_eq(tg_ctx_rewind(ctx, marks[61]), TG_ERR_ARG);
    tg_ctx_clear_error(ctx);
    ck_assert_int_eq(tg_ctx_rewind(ctx, marks[60]), TG_OK);
    ck_assert_int_eq(tg_ctx_rewind(ctx, marks[10]), TG_OK);
    ck_assert_uint_le(tg_ctx_bytes(ctx), snaps[10].ctx_bytes + history);
    for (int e = 11; e < EPOCHS; e++)
        ck_assert_int_eq(tg_ctx_rewind(ctx, marks[e]), TG_ERR_ARG);
    tg_ctx_clear_error(ctx);
    for (int e = 10; e >= 0; e--)
        ck_assert_int_eq(tg_ctx_rewind(ctx, marks[e]), TG_OK);
    free_counted(ctx, &c);
}
END_TEST

/* The same history when the context cannot get memory for it (every allocation refused during
 * the rewinds): rewinds still succeed and change no error state; stale marks are still
 * refused, and the newest and the oldest marks still work. */
START_TEST(test_rewind_history_without_memory)
{
    counter c;
    tg_ctx *ctx = counted_ctx(&c);
    enum { EPOCHS = 40 };
    tg_mark marks[EPOCHS];
    tg_mark m0 = tg_ctx_mark(ctx);
    for (int e = 0; e < EPOCHS; e++) {
        vec(ctx, "epoch", (double)e);
        marks[e] = tg_ctx_mark(ctx);
        for (int k = 0; k < 2; k++) {
            vec(ctx, "step", (double)k);
            c.fail = true;
            ck_assert_int_eq(tg_ctx_rewind(ctx, marks[e]), TG_OK);
            c.fail = false;
            ck_assert_int_eq(tg_ctx_status(ctx), TG_OK);
            ck_assert_str_eq(tg_ctx_message(ctx), "");
        }
    }
    /* a pending build error stays through such a rewind */
    ck_assert_ptr_null(tg_input(ctx, TG_F64, 1, (const int64_t[]){-1}, "bad"));
    ck_assert_int_eq(tg_ctx_status(ctx), TG_ERR_SHAPE);
    char msg[512];
    snprintf(msg, sizeof msg, "%s", tg_ctx_message(ctx));
    c.fail = true;
    ck_assert_int_eq(tg_ctx_rewind(ctx, marks[EPOCHS - 1]), TG_OK);
    ck_assert_int_eq(tg_ctx_rewind(ctx, marks[EPOCHS - 2]), TG_OK);
    c.fail = false;
    ck_assert_str_eq(tg_ctx_message(ctx), msg);
    tg_ctx_clear_error(ctx);
    ck_assert_int_eq(tg_ctx_rewind(ctx, marks[EPOCHS - 1]), TG_ERR_ARG); /* stale */
    tg_ctx_clear_error(ctx);
    c.fail = true;
    ck_assert_int_eq(tg_ctx_rewind(ctx, m0), TG_OK);
    c.fail = false;
    for (int e = 0; e < EPOCHS; e++)
        ck_assert_int_eq(tg_ctx_rewind(ctx, marks[e]), TG_ERR_ARG);
    tg_ctx_clear_error(ctx);
    ck_assert_uint_eq(tg_ctx_bytes(ctx), 0);
    free_counted(ctx, &c);
}
END_TEST

/* Many rewinds, then tg_ctx_free: every block returned once (and valgrind finds nothing). */
START_TEST(test_free_after_rewinds)
{
    counter c;
    tg_ctx *ctx = counted_ctx(&c);
    tg_mha m;
    ck_assert_int_eq(tg_mha_init(ctx, &m, TG_F32, 8, 2, NULL), TG_OK);
    tg_mark m0 = tg_ctx_mark(ctx);
    for (int i = 0; i < 5; i++) {
        tg_tensor *x = tg_input(ctx, TG_F32, TG_DIMS(1, 2, 8), "x");
        tg_fill(x, 0.25 * i);
        tg_tensor *y = tg_mean_all(ctx, tg_mha_forward(ctx, &m, x, x, x, NULL, NULL));
        tg_graph *g = tg_graph_new(ctx, &y, 1); /* allocates the parameters' gradients */
        ck_assert_int_eq(tg_graph_forward(g), TG_OK);
        ck_assert_int_eq(tg_graph_backward(g, y, NULL), TG_OK);
        tg_mark m1 = tg_ctx_mark(ctx);
        tg_param(ctx, TG_F32, TG_DIMS(5), "late");
        ck_assert_int_eq(tg_ctx_rewind(ctx, i % 2 ? m1 : m0), TG_OK);
    }
    free_counted(ctx, &c); /* after a rewind to m0 was the last */
}
END_TEST

/* ---- no_grad graphs ---------------------------------------------------------------------- */
/* Output values of op case c, built in a fresh context (same seed), run once through a
 * training graph (default options) or a no_grad graph (with poison: a buffer read after the
 * planner gave it away reads NaN); returned malloc'd. */
static double *case_forward(const tg_opcase *c, bool no_grad, int nt, size_t *len)
{
    tg_ctx *ctx = tg_ctx_new();
    tg_ctx_seed(ctx, 123);
    tg_ctx_set_threads(ctx, nt);
    tg_tensor *y = c->build(ctx, TG_F64);
    ck_assert_msg(y != NULL, "%s/%s: %s", c->op, c->name, tg_ctx_message(ctx));
    tg_graph_opts o = {.no_grad = no_grad, .poison = no_grad};
    tg_graph *g = tg_graph_new_opts(ctx, &y, 1, &o);
    ck_assert_msg(g != NULL, "%s/%s: %s", c->op, c->name, tg_ctx_message(ctx));
    ck_assert_int_eq(tg_graph_forward(g), TG_OK);
    if (no_grad) {
        tg_memory_report r;
        ck_assert_int_eq(tg_graph_memory(g, &r), TG_OK);
        ck_assert_uint_eq(r.gradients, 0);
        ck_assert_uint_eq(r.parameter_grads, 0);
        ck_assert_uint_eq(r.input_grads, 0);
        ck_assert_int_eq(tg_graph_n_grad_leaves(g), 0);
    }
    size_t n = (size_t)tg_tensor_numel(y);
    double *out = malloc(sizeof(double) * n);
    for (size_t i = 0; i < n; i++)
        out[i] = tg_get(y, (int64_t)i);
    *len = n;
    tg_ctx_free(ctx);
    return out;
}

START_TEST(test_no_grad_matches_training)
{
    const tg_opcase *c = &tg_opcases[_i];
    size_t n0, n1;
    double *a = case_forward(c, false, 1, &n0);
    for (int nt = 1; nt <= 2; nt++) {
        double *b = case_forward(c, true, nt, &n1);
        ck_assert_uint_eq(n0, n1);
        ck_assert_msg(memcmp(a, b, sizeof(double) * n0) == 0,
                      "%s/%s: no_grad forward differs from the training graph's (%d threads)",
                      c->op, c->name, nt);
        free(b);
    }
    free(a);
}
END_TEST

START_TEST(test_no_grad_backward_refused)
{
    tg_ctx *ctx = tu_ctx_new();
    tg_tensor *w = tg_param(ctx, TG_F64, TG_DIMS(3), "w");
    tg_fill(w, 2.0);
    tg_tensor *y = tg_sum_all(ctx, tg_mul(ctx, w, w));
    tg_graph *g = tg_graph_new_opts(ctx, &y, 1, &(tg_graph_opts){.no_grad = true});
    ck_assert_ptr_nonnull(g);
    ck_assert_ptr_null(tg_tensor_grad(w)); /* no gradient buffer for the parameter */
    ck_assert_uint_eq(tg_graph_grad_bytes(g), 0);
    ck_assert_int_eq(tg_graph_forward(g), TG_OK);
    ck_assert(tg_get(y, 0) == 12.0);
    ck_assert_int_eq(tg_graph_backward(g, y, NULL), TG_ERR_STATE);
    tu_assert_error(ctx, TG_ERR_STATE, "tg_graph_backward: the graph was built with no_grad");
    ck_assert_ptr_null(tg_tensor_grad(w));
    /* a training graph over the same nodes afterwards works */
    tg_ctx_clear_error(ctx);
    tg_graph *gt = tg_graph_new(ctx, &y, 1);
    ck_assert_int_eq(tg_graph_forward(gt), TG_OK);
    ck_assert_int_eq(tg_graph_backward(gt, y, NULL), TG_OK);
    ck_assert(tg_grad_get(w, 1) == 4.0);
    /* and the no_grad graph still runs after it, leaving the gradient alone */
    ck_assert_int_eq(tg_graph_forward(g), TG_OK);
    ck_assert(tg_get(y, 0) == 12.0);
    ck_assert(tg_grad_get(w, 1) == 4.0);
    ck_assert_int_eq(tg_graph_backward(g, y, NULL), TG_ERR_STATE);
    tu_ctx_free(ctx);
}
END_TEST

/* A custom op with a forward callback only (not differentiable): a training graph over a
 * parameter through it is refused, a no_grad graph runs it, with its workspace planned. */
static size_t sq_ws(const tg_custom_call *c) { return c->backward ? 0 : 8 * sizeof(double); }
static tg_status sq_fwd(tg_custom_call *c)
{
    if (!c->workspace || c->workspace_bytes != 8 * sizeof(double))
        return tg_custom_error(c, TG_ERR_STATE, "no workspace");
    const double *x = c->input[0];
    double *y = c->output, *w = c->workspace;
    for (int64_t i = 0; i < c->output_numel; i++) {
        w[i % 8] = x[i] * x[i];
        y[i] = w[i % 8];
    }
    return TG_OK;
}

START_TEST(test_no_grad_forward_only_op)
{
    tg_ctx *ctx = tu_ctx_new();
    tg_custom_def d;
    memset(&d, 0, sizeof d);
    d.name = "square_fwd";
    d.out_rank = TG_CUSTOM_SAME_SHAPE;
    d.forward_f64 = sq_fwd;
    d.workspace = sq_ws;
    tg_tensor *p = tg_param(ctx, TG_F64, TG_DIMS(5), "p");
    for (int i = 0; i < 5; i++)
        tg_set(p, i, (double)i - 2.0);
    tg_tensor *y = tg_sum_all(ctx, tg_custom_op(ctx, &d, 1, &p));
    ck_assert_ptr_nonnull(y);
    ck_assert_ptr_null(tg_graph_new(ctx, &y, 1));
    tu_assert_error(ctx, TG_ERR_NOGRAD, "square_fwd");
    tg_ctx_clear_error(ctx);
    tg_graph *g = tg_graph_new_opts(ctx, &y, 1, &(tg_graph_opts){.no_grad = true,
                                                                  .poison = true});
    ck_assert_msg(g != NULL, "%s", tg_ctx_message(ctx));
    tg_memory_report r;
    ck_assert_int_eq(tg_graph_memory(g, &r), TG_OK);
    ck_assert_uint_eq(r.workspace, 64);
    ck_assert_int_eq(tg_graph_forward(g), TG_OK);
    ck_assert(tg_get(y, 0) == 10.0);
    ck_assert_ptr_null(tg_tensor_grad(p));
    tu_ctx_free(ctx);
}
END_TEST

/* tg_keep in a no_grad graph: a kept intermediate stays readable after forward (with dead
 * buffers poisoned), while one not kept is given away. */
START_TEST(test_no_grad_keep)
{
    tg_ctx *ctx = tu_ctx_new();
    tg_tensor *x = tg_input(ctx, TG_F64, TG_DIMS(4, 4), "x");
    for (int i = 0; i < 16; i++)
        tg_set(x, i, (double)i);
    tg_tensor *a = tg_scale(ctx, x, 2.0);
    tg_tensor *b = tg_relu(ctx, tg_scale(ctx, a, -1.0)); /* in place over a's buffer if dead */
    tg_tensor *c = tg_scale(ctx, b, 3.0);
    tg_tensor *y = tg_sum_all(ctx, tg_add(ctx, c, a));
    ck_assert_int_eq(tg_keep(b), TG_OK);
    tg_graph *g = tg_graph_new_opts(ctx, &y, 1, &(tg_graph_opts){.no_grad = true,
                                                                  .poison = true});
    ck_assert_int_eq(tg_graph_forward(g), TG_OK);
    for (int i = 0; i < 16; i++)
        ck_assert(tg_get(b, i) == 0.0);
    ck_assert_int_gt(tu_count_nan(a, false), 0); /* a was not kept: poisoned when it died */
    ck_assert(tg_get(y, 0) == 240.0);
    tu_ctx_free(ctx);
}
END_TEST

/* A transformer LM: the no_grad plan has no gradients and a smaller arena than the training
 * plan, the same parameters and inputs, and the same logits. */
START_TEST(test_no_grad_transformer_memory)
{
    tg_memory_report r[2];
    float out[2][LM_T * LM_V];
    for (int ng = 0; ng < 2; ng++) {
        tg_ctx *ctx = tu_ctx_new();
        tg_ctx_seed(ctx, 11);
        tg_transformer m;
        lm_init(ctx, &m);
        tg_tensor *ids = tg_input(ctx, TG_I32, TG_DIMS(1, LM_T), "ids");
        int32_t idv[LM_T];
        lm_ids(idv, 1);
        ck_assert_int_eq(tg_tensor_set_data(ids, idv, TG_I32, LM_T), TG_OK);
        tg_tensor *logits = tg_transformer_forward(ctx, &m, ids, NULL);
        tg_graph *g = tg_graph_new_opts(ctx, &logits, 1, &(tg_graph_opts){.no_grad = ng == 1});
        ck_assert_ptr_nonnull(g);
        ck_assert_int_eq(tg_graph_memory(g, &r[ng]), TG_OK);
        ck_assert_int_eq(tg_graph_forward(g), TG_OK);
        ck_assert_int_eq(tg_tensor_get_data(logits, out[ng], TG_F32, LM_T * LM_V), TG_OK);
        tu_ctx_free(ctx);
    }
    ck_assert_uint_gt(r[0].gradients, 0);
    ck_assert_uint_gt(r[0].parameter_grads, 0);
    ck_assert_uint_eq(r[1].gradients, 0);
    ck_assert_uint_eq(r[1].parameter_grads, 0);
    ck_assert_uint_eq(r[0].parameters, r[1].parameters);
    ck_assert_uint_eq(r[0].inputs, r[1].inputs);
    ck_assert_uint_eq(r[0].activations, r[1].activations);
    ck_assert_msg(r[1].arena < r[0].arena, "no_grad arena %zu vs training %zu", r[1].arena,
                  r[0].arena);
    ck_assert_uint_lt(r[1].peak, r[0].peak);
    ck_assert_uint_le(r[1].workspace, r[0].workspace);
    ck_assert(memcmp(out[0], out[1], sizeof out[0]) == 0);
}
END_TEST

/* Dropout in a no_grad graph follows the context's training mode at each forward: training
 * drops and scales, evaluation is the identity. */
START_TEST(test_no_grad_dropout_mode)
{
    tg_ctx *ctx = tu_ctx_new();
    tg_ctx_seed(ctx, 2);
    tg_tensor *x = tg_input(ctx, TG_F64, TG_DIMS(256), "x");
    tg_fill(x, 1.0);
    tg_tensor *y = tg_dropout(ctx, x, 0.5);
    tg_graph *g = tg_graph_new_opts(ctx, &y, 1, &(tg_graph_opts){.no_grad = true});
    ck_assert_ptr_nonnull(g);
    for (int round = 0; round < 2; round++) {
        tg_ctx_set_training(ctx, true);
        ck_assert_int_eq(tg_graph_forward(g), TG_OK);
        int zeros = 0, twos = 0;
        for (int64_t i = 0; i < 256; i++) {
            double v = tg_get(y, i);
            zeros += v == 0.0;
            twos += v == 2.0;
        }
        ck_assert_int_eq(zeros + twos, 256);
        ck_assert_int_gt(zeros, 64);
        ck_assert_int_gt(twos, 64);
        tg_ctx_set_training(ctx, false);
        ck_assert_int_eq(tg_graph_forward(g), TG_OK);
        for (int64_t i = 0; i < 256; i++)
            ck_assert(tg_get(y, i) == 1.0);
    }
    tu_ctx_free(ctx);
}
END_TEST

/* ---- tg_graph_memory by hand ------------------------------------------------------------- */
/* y = sum(relu(x W^T + b)), f64, x (4, 3) input, W (5, 3) and b (5) parameters: nodes x, W, b,
 * h = dense (4, 5), r = relu (4, 5), y (). Buffers are rounded up to 64 bytes:
 *   parameters 120 + 40 = 160, parameter_grads 160 (training) or 0 (no_grad), inputs 96;
 *   activations h 192 + r 192 + y 64 = 448; saved 0;
 *   gradients (training): y 64, r 192, h 192, this call's W 128 and b 64 = 640;
 *   workspace: dense forward (and backward, training) GEMM packing, ws1 bytes per thread each.
 * The arena cannot be below the most memory live at one step, nor above the sum of the parts:
 *   training, at dense's backward: its workspace ws1, r (read by relu's backward, kept to the
 *   end of backward by default), h's gradient 192, W's 128, b's 64, y and its gradient 64 + 64
 *   = ws1 + 704;  no_grad, at dense's forward: ws1 + h 192. */
static tg_graph *hand_graph(tg_ctx *ctx, const tg_graph_opts *o, tg_tensor **yout)
{
    tg_tensor *x = tg_input(ctx, TG_F64, TG_DIMS(4, 3), "x");
    tg_tensor *w = tg_param(ctx, TG_F64, TG_DIMS(5, 3), "W");
    tg_tensor *b = tg_param(ctx, TG_F64, TG_DIMS(5), "b");
    tg_fill_uniform(x, -1, 1);
    tg_fill_uniform(w, -1, 1);
    tg_fill_uniform(b, -1, 1);
    tg_tensor *y = tg_sum_all(ctx, tg_relu(ctx, tg_dense(ctx, x, w, b)));
    tg_graph *g = tg_graph_new_opts(ctx, &y, 1, o);
    ck_assert_msg(g != NULL, "%s", tg_ctx_message(ctx));
    ck_assert_int_eq(tg_graph_size(g), 6);
    *yout = y;
    return g;
}

START_TEST(test_memory_report_by_hand)
{
    size_t ws1 = 0;
    for (int nt = 1; nt <= 2; nt++) {
        for (int mode = 0; mode < 4; mode++) {
            /* mode 0 planned, 1 no_reuse, 2 no_grad planned, 3 no_grad no_reuse */
            bool no_grad = mode >= 2, no_reuse = mode % 2 == 1;
            tg_ctx *ctx = tu_ctx_new();
            tg_ctx_seed(ctx, 1);
            tg_ctx_set_threads(ctx, nt);
            tg_graph_opts o = {.no_grad = no_grad, .no_reuse = no_reuse};
            tg_tensor *y;
            tg_graph *g = hand_graph(ctx, &o, &y);
            tg_memory_report r;
            ck_assert_int_eq(tg_graph_memory(g, &r), TG_OK);
            ck_assert_int_eq(tg_graph_memory(NULL, &r), TG_ERR_ARG);
            ck_assert_int_eq(tg_graph_memory(g, NULL), TG_ERR_ARG);
            ck_assert_uint_eq(r.parameters, 160);
            ck_assert_uint_eq(r.parameter_grads, no_grad ? 0 : 160);
            ck_assert_uint_eq(r.inputs, 96);
            ck_assert_uint_eq(r.input_grads, 0);
            ck_assert_uint_eq(r.activations, 448);
            ck_assert_uint_eq(r.saved, 0);
            ck_assert_uint_eq(r.gradients, no_grad ? 0 : 640);
            ck_assert_uint_eq(tg_graph_grad_bytes(g), r.gradients);
            /* workspace: one GEMM packing buffer per dense call, per thread */
            size_t calls = no_grad ? 1 : 2;
            ck_assert_uint_gt(r.workspace, 0);
            ck_assert_uint_eq(r.workspace % (calls * (size_t)nt), 0);
            size_t per = r.workspace / (calls * (size_t)nt);
            if (ws1 == 0)
                ws1 = per;
            ck_assert_uint_eq(per, ws1);
            ck_assert_uint_eq(per % 64, 0);
            size_t sum = r.activations + r.saved + r.gradients + r.workspace;
            size_t lower = no_grad ? (size_t)nt * ws1 + 192 : (size_t)nt * ws1 + 704;
            if (no_reuse)
                ck_assert_uint_eq(r.arena, sum);
            else
                ck_assert_msg(r.arena >= lower && r.arena <= sum,
                              "mode %d, %d threads: arena %zu outside [%zu, %zu]", mode, nt,
                              r.arena, lower, sum);
            ck_assert_uint_eq(r.peak, r.parameters + r.parameter_grads + r.inputs +
                                          r.input_grads + r.arena);
            /* and the graph computes what it should, whatever the plan */
            ck_assert_int_eq(tg_graph_forward(g), TG_OK);
            ck_assert(isfinite(tg_get(y, 0)));
            if (!no_grad)
                ck_assert_int_eq(tg_graph_backward(g, y, NULL), TG_OK);
            tu_ctx_free(ctx);
        }
    }
}
END_TEST

/* An input that requires grad counts under inputs and input_grads; a constant under inputs. */
START_TEST(test_memory_report_input_grads)
{
    tg_ctx *ctx = tu_ctx_new();
    tg_tensor *x = tg_input(ctx, TG_F32, TG_DIMS(10), "x");
    tg_set_requires_grad(x, true);
    tg_tensor *k = tg_const(ctx, TG_F32, TG_DIMS(10), "k");
    tg_tensor *y = tg_sum_all(ctx, tg_mul(ctx, x, k));
    for (int ng = 0; ng < 2; ng++) {
        tg_graph *g = tg_graph_new_opts(ctx, &y, 1, &(tg_graph_opts){.no_grad = ng == 1,
                                                                      .no_reuse = true});
        tg_memory_report r;
        ck_assert_int_eq(tg_graph_memory(g, &r), TG_OK);
        ck_assert_uint_eq(r.parameters, 0);
        ck_assert_uint_eq(r.inputs, 80);
        ck_assert_uint_eq(r.input_grads, ng ? 0 : 40);
        ck_assert_uint_eq(r.activations, 64 + 64);
        ck_assert_uint_eq(r.arena, r.activations + r.saved + r.gradients + r.workspace);
        tg_graph_free(g);
    }
    tu_ctx_free(ctx);
}
END_TEST

/* ---- shared arenas (tg_arena_new, tg_graph_opts.arena) -------------------------------------
 * A small encoder-decoder trained on batches of three shapes (n, S, T), as the translation
 * trainer's length buckets give: one graph per shape over the same parameters. */
#define S2S_SHAPES 3
static const int s2s_dims[S2S_SHAPES][3] = {{3, 5, 4}, {2, 7, 6}, {4, 3, 2}}; /* n, S, T */
#define S2S_V 11

typedef struct {
    tg_tensor *loss;
    tg_graph *g;
} s2s_graph;

/* The model (same seed: the same parameters in every context). */
static void s2s_model(tg_ctx *ctx, tg_transformer *m)
{
    tg_ctx_seed(ctx, 5);
    tg_transformer_config c;
    memset(&c, 0, sizeof c);
    c.vocab_size = S2S_V;
    c.max_seq_len = 8;
    c.n_layers = 1;
    c.n_decoder_layers = 1;
    c.layer = tg_encoder_config_default(8, 2);
    c.layer.d_ff = 16;
    c.layer.dropout = 0.1;
    c.pos = TG_POS_SINUSOIDAL;
    c.tie_weights = true;
    ck_assert_int_eq(tg_transformer_init(ctx, m, TG_F32, &c), TG_OK);
}

/* The graph of shape k (padded source positions, ignored targets) with options o. */
static s2s_graph s2s_build(tg_ctx *ctx, const tg_transformer *m, int k, tg_graph_opts o)
{
    int n = s2s_dims[k][0], S = s2s_dims[k][1], T = s2s_dims[k][2];
    tg_tensor *src = tg_input(ctx, TG_I32, TG_DIMS(n, S), "src");
    tg_tensor *tgt = tg_input(ctx, TG_I32, TG_DIMS(n, T), "tgt");
    tg_tensor *lab = tg_input(ctx, TG_I32, TG_DIMS(n, T), "lab");
    tg_tensor *mask = tg_input(ctx, TG_F32, TG_DIMS(n, S), "mask");
    for (int b = 0; b < n; b++) {
        for (int s = 0; s < S; s++) {
            bool pad = b > 0 && s >= S - b; /* row b has b padded positions */
            tg_set(src, b * S + s, pad ? 0 : (b * 7 + s * 3 + k) % (S2S_V - 1) + 1);
            tg_set(mask, b * S + s, pad ? 1.0 : 0.0);
        }
        for (int t = 0; t < T; t++) {
            tg_set(tgt, b * T + t, (b * 5 + t * 2 + k) % S2S_V);
            tg_set(lab, b * T + t, t == T - 1 && b % 2 ? -100 : (b + t * 3 + k) % S2S_V);
        }
    }
    s2s_graph r;
    r.loss = tg_cross_entropy(ctx, tg_transformer_forward_seq2seq(ctx, m, src, tgt, mask, NULL),
                              lab, -100);
    ck_assert_msg(r.loss != NULL, "%s", tg_ctx_message(ctx));
    r.g = tg_graph_new_opts(ctx, &r.loss, 1, &o);
    ck_assert_msg(r.g != NULL, "%s", tg_ctx_message(ctx));
    return r;
}

/* Elements of every parameter's gradient. */
static size_t s2s_n_grads(tg_ctx *ctx)
{
    size_t n = 0;
    for (int64_t i = 0; i < tg_ctx_n_params(ctx); i++)
        n += (size_t)tg_tensor_numel(tg_ctx_param(ctx, i));
    return n;
}

/* One training step of shape k on zeroed gradients (dropout seeded by k): out[0] the loss,
 * then every parameter's gradient. */
static void s2s_step(tg_ctx *ctx, s2s_graph *G, int k, float *out)
{
    for (int64_t i = 0; i < tg_ctx_n_params(ctx); i++)
        tg_zero_grad(tg_ctx_param(ctx, i));
    tg_ctx_seed(ctx, 1000 + (uint64_t)k);
    ck_assert_msg(tg_graph_forward(G->g) == TG_OK, "%s", tg_ctx_message(ctx));
    ck_assert_msg(tg_graph_backward(G->g, G->loss, NULL) == TG_OK, "%s", tg_ctx_message(ctx));
    ck_assert_int_eq(tg_tensor_get_data(G->loss, out, TG_F32, 1), TG_OK);
    size_t off = 1;
    for (int64_t i = 0; i < tg_ctx_n_params(ctx); i++) {
        tg_tensor *p = tg_ctx_param(ctx, i);
        size_t n = (size_t)tg_tensor_numel(p);
        ck_assert_int_eq(tg_tensor_get_grad(p, out + off, TG_F32, n), TG_OK);
        off += n;
    }
}

/* Reference results of each shape's step, every graph with its own arena. */
static float *s2s_reference(size_t *len)
{
    tg_ctx *ctx = tu_ctx_new();
    tg_transformer m;
    s2s_model(ctx, &m);
    *len = 1 + s2s_n_grads(ctx);
    float *ref = malloc(sizeof(float) * *len * S2S_SHAPES);
    for (int k = 0; k < S2S_SHAPES; k++) {
        s2s_graph G = s2s_build(ctx, &m, k, (tg_graph_opts){.one_backward = true});
        s2s_step(ctx, &G, k, ref + (size_t)k * *len);
        ck_assert(isfinite(ref[(size_t)k * *len]) && ref[(size_t)k * *len] > 0);
    }
    tu_ctx_free(ctx);
    return ref;
}

static void assert_step_eq(const float *got, const float *want, size_t len, const char *what,
                           int k)
{
    ck_assert_msg(memcmp(got, want, sizeof(float) * len) == 0,
                  "%s: shape %d: loss %.9g vs %.9g (or a gradient) differs", what, k,
                  (double)got[0], (double)want[0]);
}

/* Graphs of three shapes over the same parameters in one arena give bitwise the loss and
 * parameter gradients of the same graphs with their own arenas, in several run orders, with
 * each debug option (poison, no_reuse, detect_anomaly, several backward calls). */
START_TEST(test_arena_matches_own)
{
    static const int orders[][6] = {{0, 1, 2, 0, 1, 2}, {2, 1, 0, 0, 2, 1}, {1, 1, 2, 0, 2, 0}};
    size_t len;
    float *ref = s2s_reference(&len);
    float *got = malloc(sizeof(float) * len);
    int mode = _i;
    tg_ctx *ctx = tu_ctx_new();
    tg_transformer m;
    s2s_model(ctx, &m);
    tg_arena *a = tg_arena_new(ctx);
    ck_assert_ptr_nonnull(a);
    ck_assert_uint_eq(tg_arena_bytes(a), 0);
    tg_graph_opts o = {.arena = a, .one_backward = mode != 1, .poison = mode == 1,
                       .no_reuse = mode == 2, .detect_anomaly = mode == 3};
    s2s_graph G[S2S_SHAPES];
    for (int k = 0; k < S2S_SHAPES; k++)
        G[k] = s2s_build(ctx, &m, k, o);
    for (size_t r = 0; r < sizeof orders / sizeof orders[0]; r++)
        for (int q = 0; q < 6; q++) {
            int k = orders[r][q];
            s2s_step(ctx, &G[k], k, got);
            assert_step_eq(got, ref + (size_t)k * len, len, "shared arena", k);
        }
    /* Leaf gradients live outside the arena: they accumulate across graphs of any shape. */
    for (int64_t i = 0; i < tg_ctx_n_params(ctx); i++)
        tg_zero_grad(tg_ctx_param(ctx, i));
    for (int k = 0; k < 2; k++) {
        tg_ctx_seed(ctx, 1000 + (uint64_t)k);
        ck_assert_int_eq(tg_graph_forward(G[k].g), TG_OK);
        ck_assert_int_eq(tg_graph_backward(G[k].g, G[k].loss, NULL), TG_OK);
    }
    size_t off = 1;
    for (int64_t i = 0; i < tg_ctx_n_params(ctx); i++) {
        tg_tensor *p = tg_ctx_param(ctx, i);
        for (int64_t e = 0; e < tg_tensor_numel(p); e++, off++) {
            float want = ref[off] + ref[len + off];
            ck_assert_msg(memcmp(&(float){(float)tg_grad_get(p, e)}, &want, sizeof want) == 0,
                          "accumulated gradient of '%s'[%lld]", tg_tensor_name(p),
                          (long long)e);
        }
    }
    tu_ctx_free(ctx);
    free(got);
    free(ref);
}
END_TEST

/* The arena is the largest graph's need (each graph's own plan is unchanged by sharing), the
 * report says both, and the context holds one arena instead of three. */
START_TEST(test_arena_size)
{
    tg_ctx *own = tu_ctx_new(), *ctx = tu_ctx_new();
    tg_transformer mo, m;
    s2s_model(own, &mo);
    s2s_model(ctx, &m);
    tg_arena *a = tg_arena_new(ctx);
    size_t own0 = tg_ctx_bytes(own), sh0 = tg_ctx_bytes(ctx), sum = 0, max = 0;
    for (int k = 0; k < S2S_SHAPES; k++) {
        s2s_graph Go = s2s_build(own, &mo, k, (tg_graph_opts){.one_backward = true});
        s2s_graph G = s2s_build(ctx, &m, k, (tg_graph_opts){.one_backward = true, .arena = a});
        tg_memory_report ro, r;
        ck_assert_int_eq(tg_graph_memory(Go.g, &ro), TG_OK);
        ck_assert_int_eq(tg_graph_memory(G.g, &r), TG_OK);
        ck_assert_uint_eq(r.arena, ro.arena);
        ck_assert_uint_eq(r.peak, ro.peak);
        ck_assert_uint_eq(ro.arena_shared, 0);
        sum += ro.arena;
        if (ro.arena > max)
            max = ro.arena;
        ck_assert_uint_eq(tg_arena_bytes(a), max); /* grown at build time */
        ck_assert_uint_eq(r.arena_shared, max);
    }
    ck_assert_uint_gt(sum, max);
    size_t saved = (tg_ctx_bytes(own) - own0) - (tg_ctx_bytes(ctx) - sh0);
    /* three arenas against one, less the arena record itself */
    ck_assert_msg(saved <= sum - max && saved + 256 > sum - max, "saved %zu, expected %zu",
                  saved, sum - max);
    tu_ctx_free(own);
    tu_ctx_free(ctx);
}
END_TEST

/* Forward A, forward B, backward A: refused (nothing accumulated); reading A's loss after B
 * ran is refused; forward A again and all is well. A graph of another context's arena is
 * refused. */
START_TEST(test_arena_interleave_refused)
{
    size_t len;
    float *ref = s2s_reference(&len);
    float *got = malloc(sizeof(float) * len);
    tg_ctx *ctx = tu_ctx_new();
    tg_transformer m;
    s2s_model(ctx, &m);
    tg_arena *a = tg_arena_new(ctx);
    tg_graph_opts o = {.arena = a, .one_backward = true};
    s2s_graph A = s2s_build(ctx, &m, 0, o), B = s2s_build(ctx, &m, 1, o);
    for (int64_t i = 0; i < tg_ctx_n_params(ctx); i++)
        tg_zero_grad(tg_ctx_param(ctx, i));
    tg_ctx_seed(ctx, 3); /* (dropout) */
    ck_assert_int_eq(tg_graph_forward(A.g), TG_OK);
    double la = tg_get(A.loss, 0);
    ck_assert(la > 0 && tg_tensor_data(A.loss) != NULL);
    ck_assert_int_eq(tg_graph_forward(B.g), TG_OK);
    ck_assert_int_eq(tg_graph_backward(A.g, A.loss, NULL), TG_ERR_STATE);
    ck_assert_msg(strstr(tg_ctx_message(ctx), "another graph sharing this graph's arena") &&
                  strstr(tg_ctx_message(ctx), "tg_graph_forward"), "%s", tg_ctx_message(ctx));
    /* A's loss as B's upstream gradient: stale, refused */
    ck_assert_int_eq(tg_graph_backward(B.g, B.loss, A.loss), TG_ERR_STATE);
    ck_assert_msg(strstr(tg_ctx_message(ctx), "whose shared arena another graph"), "%s",
                  tg_ctx_message(ctx));
    tg_tensor *w = tg_ctx_param(ctx, 0);
    for (int64_t e = 0; e < tg_tensor_numel(w); e++)
        ck_assert(tg_grad_get(w, e) == 0.0);
    /* A's loss is B's bytes now: every reader refuses */
    ck_assert_ptr_null(tg_tensor_data(A.loss));
    ck_assert(isnan(tg_get(A.loss, 0)));
    ck_assert_int_eq(tg_ctx_status(ctx), TG_ERR_STATE);
    ck_assert_msg(strstr(tg_ctx_message(ctx), "another graph sharing that arena ran since"),
                  "%s", tg_ctx_message(ctx));
    float v;
    ck_assert_int_eq(tg_tensor_get_data(A.loss, &v, TG_F32, 1), TG_ERR_STATE);
    tg_tensor *dst = tg_input(ctx, TG_F32, 0, NULL, "dst");
    ck_assert_int_eq(tg_tensor_copy(dst, A.loss), TG_ERR_STATE);
    ck_assert(tg_get(B.loss, 0) > 0); /* B's own output is fine */
    ck_assert_int_eq(tg_tensor_copy(dst, B.loss), TG_OK);
    /* run A again: readable, and backward works */
    tg_ctx_seed(ctx, 3);
    ck_assert_int_eq(tg_graph_forward(A.g), TG_OK);
    ck_assert(tg_get(A.loss, 0) == la);
    ck_assert_ptr_null(tg_tensor_data(B.loss));
    ck_assert_int_eq(tg_graph_backward(A.g, A.loss, NULL), TG_OK);
    s2s_step(ctx, &A, 0, got);
    assert_step_eq(got, ref, len, "after the refusal", 0);
    /* an arena of another context */
    tg_ctx *other = tu_ctx_new();
    tg_arena *oa = tg_arena_new(other);
    tg_tensor *y = tg_sum_all(ctx, tg_ctx_param(ctx, 0));
    ck_assert_ptr_null(tg_graph_new_opts(ctx, &y, 1, &(tg_graph_opts){.arena = oa}));
    ck_assert_int_eq(tg_ctx_status(ctx), TG_ERR_ARG);
    ck_assert_msg(strstr(tg_ctx_message(ctx), "another context"), "%s", tg_ctx_message(ctx));
    tu_ctx_free(other);
    tu_ctx_free(ctx);
    free(got);
    free(ref);
}
END_TEST

/* The arena grows when a larger graph is built after a smaller one ran: the smaller one's
 * values survive the move (its loss still reads the same), and it runs correctly afterwards;
 * also when more threads make a graph plan again (and grow the arena) inside forward. */
START_TEST(test_arena_grow)
{
    size_t len;
    float *ref = s2s_reference(&len);
    float *got = malloc(sizeof(float) * len);
    tg_ctx *ctx = tu_ctx_new();
    tg_ctx_set_threads(ctx, 1);
    tg_transformer m;
    s2s_model(ctx, &m);
    tg_arena *a = tg_arena_new(ctx);
    tg_graph_opts o = {.arena = a, .one_backward = true};
    s2s_graph small = s2s_build(ctx, &m, 2, o); /* (4, 3, 2): the smallest */
    size_t b0 = tg_arena_bytes(a);
    s2s_step(ctx, &small, 2, got);
    assert_step_eq(got, ref + 2 * len, len, "small", 2);
    s2s_graph big = s2s_build(ctx, &m, 1, o);
    ck_assert_uint_gt(tg_arena_bytes(a), b0);
    float l;
    ck_assert_int_eq(tg_tensor_get_data(small.loss, &l, TG_F32, 1), TG_OK);
    ck_assert(l == ref[2 * len]); /* carried over into the new block */
    for (int r = 0; r < 2; r++) {
        s2s_step(ctx, &small, 2, got);
        assert_step_eq(got, ref + 2 * len, len, "small after growing", 2);
        s2s_step(ctx, &big, 1, got);
        assert_step_eq(got, ref + 1 * len, len, "big", 1);
    }
    /* more threads: forward plans again (workspace is per thread) and may grow the arena */
    tg_ctx_set_threads(ctx, 3);
    s2s_step(ctx, &small, 2, got);
    assert_step_eq(got, ref + 2 * len, len, "small, 3 threads", 2);
    s2s_step(ctx, &big, 1, got);
    assert_step_eq(got, ref + 1 * len, len, "big, 3 threads", 1);
    tg_memory_report r;
    ck_assert_int_eq(tg_graph_memory(big.g, &r), TG_OK);
    ck_assert_uint_ge(tg_arena_bytes(a), r.arena);
    tu_ctx_free(ctx);
    free(got);
    free(ref);
}
END_TEST

/* tg_ctx_rewind: graphs built after a mark (one of them growing the arena made before it) are
 * freed; the arena stays usable at its grown size, and the graphs built before the mark still
 * run correctly; a rewind past the arena's creation releases it, every byte. */
START_TEST(test_arena_rewind)
{
    size_t len;
    float *ref = s2s_reference(&len);
    float *got = malloc(sizeof(float) * len);
    counter c;
    tg_ctx *ctx = counted_ctx(&c);
    tg_transformer m;
    s2s_model(ctx, &m);
    tg_graph_free(s2s_build(ctx, &m, 0, (tg_graph_opts){0}).g); /* allocates the gradients */
    snapshot s0 = snap(ctx, &c);
    tg_mark m0 = tg_ctx_mark(ctx);
    tg_arena *a = tg_arena_new(ctx);
    tg_graph_opts o = {.arena = a, .one_backward = true};
    s2s_graph small = s2s_build(ctx, &m, 2, o);
    s2s_step(ctx, &small, 2, got);
    tg_mark m1 = tg_ctx_mark(ctx);
    size_t at_mark = tg_ctx_bytes(ctx), b_small = tg_arena_bytes(a);
    for (int round = 0; round < 3; round++) {
        s2s_graph G = s2s_build(ctx, &m, round % 2 ? 0 : 1, o); /* 1 grows the arena */
        s2s_step(ctx, &G, round % 2 ? 0 : 1, got);
        assert_step_eq(got, ref + (size_t)(round % 2 ? 0 : 1) * len, len, "after the mark",
                       round);
        ck_assert_int_eq(tg_ctx_rewind(ctx, m1), TG_OK);
        ck_assert_uint_eq(tg_ctx_bytes(ctx), at_mark + tg_arena_bytes(a) - b_small);
        s2s_step(ctx, &small, 2, got); /* the graph of before the mark runs on */
        assert_step_eq(got, ref + 2 * len, len, "before the mark, after the rewind", round);
    }
    ck_assert_int_eq(c.bad_free, 0);
    ck_assert_int_eq(tg_ctx_rewind(ctx, m0), TG_OK); /* past the arena: all of it released */
    assert_snap_eq(snap(ctx, &c), s0, "rewound past the arena", 0);
    free_counted(ctx, &c);
    free(got);
    free(ref);
}
END_TEST

/* tg_graph_free of a sharing graph: the arena keeps its block (and size); the graph's op
 * results lose their binding; the other graphs run on, and a new graph fits in the arena. */
START_TEST(test_arena_graph_free)
{
    size_t len;
    float *ref = s2s_reference(&len);
    float *got = malloc(sizeof(float) * len);
    tg_ctx *ctx = tu_ctx_new();
    tg_transformer m;
    s2s_model(ctx, &m);
    tg_arena *a = tg_arena_new(ctx);
    tg_graph_opts o = {.arena = a, .one_backward = true};
    /* what freeing the same graph with its own arena gives back: its arrays and its arena */
    s2s_graph own = s2s_build(ctx, &m, 1, (tg_graph_opts){.one_backward = true});
    tg_memory_report r;
    ck_assert_int_eq(tg_graph_memory(own.g, &r), TG_OK);
    size_t before = tg_ctx_bytes(ctx);
    tg_graph_free(own.g);
    size_t own_freed = before - tg_ctx_bytes(ctx);
    s2s_graph big = s2s_build(ctx, &m, 1, o), small = s2s_build(ctx, &m, 2, o);
    size_t bytes = tg_arena_bytes(a);
    ck_assert_uint_eq(bytes, r.arena);
    s2s_step(ctx, &big, 1, got);
    before = tg_ctx_bytes(ctx);
    tg_graph_free(big.g); /* it ran last */
    ck_assert_uint_eq(tg_arena_bytes(a), bytes);
    ck_assert_uint_eq(before - tg_ctx_bytes(ctx), own_freed - r.arena); /* not the block */
    ck_assert_ptr_null(tg_tensor_data(big.loss));
    s2s_step(ctx, &small, 2, got);
    assert_step_eq(got, ref + 2 * len, len, "after freeing the other graph", 2);
    tg_graph_free(small.g); /* free a graph that did not run last, then one that did */
    s2s_graph again = s2s_build(ctx, &m, 0, o);
    ck_assert_uint_eq(tg_arena_bytes(a), bytes);
    s2s_step(ctx, &again, 0, got);
    assert_step_eq(got, ref, len, "a graph built after the frees", 0);
    tu_ctx_free(ctx);
    free(got);
    free(ref);
}
END_TEST

/* An inference graph (no_grad) shares the training graphs' arena: evaluation between training
 * steps gives the training forward's loss bitwise and disturbs no training step. */
START_TEST(test_arena_inference_graph)
{
    size_t len;
    float *ref = s2s_reference(&len);
    float *got = malloc(sizeof(float) * len);
    tg_ctx *ctx = tu_ctx_new();
    tg_transformer m;
    s2s_model(ctx, &m);
    tg_arena *a = tg_arena_new(ctx);
    s2s_graph train = s2s_build(ctx, &m, 1, (tg_graph_opts){.arena = a, .one_backward = true});
    size_t bytes = tg_arena_bytes(a);
    s2s_graph eval = s2s_build(ctx, &m, 1, (tg_graph_opts){.arena = a, .no_grad = true});
    ck_assert_uint_eq(tg_arena_bytes(a), bytes); /* a fraction of the training plan: no growth */
    for (int r = 0; r < 2; r++) {
        s2s_step(ctx, &train, 1, got);
        assert_step_eq(got, ref + len, len, "training step between evaluations", r);
        tg_ctx_seed(ctx, 1001);
        ck_assert_int_eq(tg_graph_forward(eval.g), TG_OK);
        ck_assert(tg_get(eval.loss, 0) == (double)ref[len]);
        ck_assert_int_eq(tg_graph_backward(train.g, train.loss, NULL), TG_ERR_STATE);
    }
    tu_ctx_free(ctx);
    free(got);
    free(ref);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("memory");
    TCase *tc = tu_tcase(s, "embedder", 120);
    tcase_add_test(tc, test_embedder_loop_flat);
    tcase_add_test(tc, test_embedder_loop_old_nodes);
    tc = tu_tcase(s, "rewind", 60);
    tcase_add_test(tc, test_rewind_nested);
    tcase_add_test(tc, test_rewind_older_then_newer_refused);
    tcase_add_test(tc, test_rewind_stale_after_regrowth);
    tcase_add_test(tc, test_rewind_stale_params);
    tcase_add_test(tc, test_rewind_drops_params);
    tcase_add_test(tc, test_rewind_keeps_old_param_grad);
    tcase_add_test(tc, test_rewind_graphs);
    tcase_add_test(tc, test_rewind_replanned_graph);
    tcase_add_test(tc, test_rewind_error_state);
    tcase_add_test(tc, test_rewind_releases_consumers);
    tcase_add_test(tc, test_rewind_long_history);
    tcase_add_test(tc, test_rewind_history_without_memory);
    tcase_add_test(tc, test_free_after_rewinds);
    tc = tu_tcase(s, "no_grad", 120);
    tcase_add_loop_test(tc, test_no_grad_matches_training, 0, tg_n_opcases);
    tcase_add_test(tc, test_no_grad_backward_refused);
    tcase_add_test(tc, test_no_grad_transformer_memory);
    tcase_add_test(tc, test_no_grad_forward_only_op);
    tcase_add_test(tc, test_no_grad_keep);
    tcase_add_test(tc, test_no_grad_dropout_mode);
    tc = tu_tcase(s, "report", 60);
    tcase_add_test(tc, test_memory_report_by_hand);
    tcase_add_test(tc, test_memory_report_input_grads);
    tc = tu_tcase(s, "arena", 60);
    tcase_add_loop_test(tc, test_arena_matches_own, 0, 4);
    tcase_add_test(tc, test_arena_size);
    tcase_add_test(tc, test_arena_interleave_refused);
    tcase_add_test(tc, test_arena_grow);
    tcase_add_test(tc, test_arena_rewind);
    tcase_add_test(tc, test_arena_graph_free);
    tcase_add_test(tc, test_arena_inference_graph);
    return tu_run(s);
}
