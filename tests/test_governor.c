/*
 * test_governor.c - the region governors' state, owned by the graph (its kernels' parallel
 * sites, reached through the call record) and by the context (the optimizer's step), and
 * visible through tg_graph_par_site / tg_ctx_par_site: which sites ran, for which node, with
 * how many threads, whether backing off. A site that backs off runs on one thread and gives
 * the same bits; a kernel called from a record filled by hand (no table) runs ungoverned and
 * touches no table. White box (core.h, registry.h) for the forced back-off and the record.
 */
#include "testutil.h"
#include "tgrad_train.h"

#include "core.h"
#include "registry.h"

#include <stdio.h>
#include <string.h>

enum { N = 256 }; /* a 256 x 256 product (2^25 flops: two threads) and relu (512 KiB touched) */

/* Contexts of 2 threads; false (with a message) when this build cannot run 2 threads. */
static bool two_threads(tg_ctx *ctx)
{
    tg_ctx_set_threads(ctx, 2);
    if (tg_ctx_threads(ctx) < 2) {
        fprintf(stderr, "skipped: this build runs one thread (no OpenMP): no parallel sites\n");
        return false;
    }
    return true;
}

static void fill(tg_tensor *t, int64_t n, int seed)
{
    static float v[N * N];
    for (int64_t i = 0; i < n; i++)
        v[i] = (float)((i * 7 + seed) % 13) * 0.125f - 0.75f;
    ck_assert_int_eq(tg_tensor_set_data(t, v, TG_F32, (size_t)n), TG_OK);
}

/* s = sum(relu(x . w)) over (N, N) operands. */
static tg_tensor *build(tg_ctx *ctx, tg_tensor **relu)
{
    tg_tensor *x = tg_input(ctx, TG_F32, TG_DIMS(N, N), "x");
    tg_tensor *w = tg_param(ctx, TG_F32, TG_DIMS(N, N), "w");
    fill(x, N * N, 1);
    fill(w, N * N, 5);
    *relu = tg_relu(ctx, tg_matmul(ctx, x, w, false, false));
    return tg_sum_all(ctx, *relu);
}

/* Index of the site of g whose name contains `part` (-1: none). */
static int64_t find_site(const tg_graph *g, const char *part, tg_par_site *out)
{
    for (int64_t i = 0; i < tg_graph_par_sites(g); i++) {
        ck_assert_int_eq(tg_graph_par_site(g, i, out), TG_OK);
        if (strstr(out->site, part))
            return i;
    }
    return -1;
}

START_TEST(test_graph_sites)
{
    tg_ctx *ctx = tu_ctx_new();
    if (!two_threads(ctx)) {
        tu_ctx_free(ctx);
        return;
    }
    tg_tensor *r;
    tg_tensor *s = build(ctx, &r);
    tg_graph *g = tg_graph_new(ctx, &s, 1);
    ck_assert_ptr_nonnull(g);
    ck_assert_int_eq(tg_graph_par_sites(g), 0); /* nothing ran yet */
    ck_assert_int_eq(tg_graph_forward(g), TG_OK);
    ck_assert_int_eq(tg_graph_backward(g, s, NULL), TG_OK);
    int64_t n = tg_graph_par_sites(g);
    ck_assert_int_ge(n, 3); /* the product, relu forward and backward at least */
    for (int64_t i = 0; i < n; i++) {
        tg_par_site e;
        ck_assert_int_eq(tg_graph_par_site(g, i, &e), TG_OK);
        ck_assert_ptr_nonnull(e.site);
        ck_assert_msg(strncmp(e.site, "../", 3) != 0 && strncmp(e.site, "./", 2) != 0, "%s",
                      e.site);
        ck_assert_int_ge(e.node, -1);
        ck_assert_int_lt(e.node, tg_graph_size(g));
        if (e.node >= 0)
            ck_assert_str_eq(e.op, tg_tensor_op_name(tg_graph_node(g, e.node)));
        ck_assert_int_ge(e.threads, 1);
        ck_assert_int_le(e.threads, 2);
        ck_assert_int_ge(e.regions + e.serial, 1); /* it ran, in a team or backed off */
    }
    /* the product: one record for its size class (2 * 256^3 = 2^25 flops), run by forward
     * and by w's gradient (the same size; x needs none), last for the matmul node */
    tg_par_site e;
    ck_assert_int_ge(find_site(g, "gemm", &e), 0);
    ck_assert_int_eq(e.size_class, 25);
    ck_assert_str_eq(e.op, "matmul");
    ck_assert_int_eq(e.regions + e.serial, 2);
    /* relu's forward loop, for the relu node */
    ck_assert_int_ge(find_site(g, "ops/elementwise_kernel.h:", &e), 0);
    ck_assert_str_eq(e.op, "relu");
    ck_assert_ptr_eq(tg_graph_node(g, e.node), r);
    ck_assert_int_eq(e.size_class, 0);
    /* out of range, NULL */
    ck_assert_int_eq(tg_graph_par_site(g, n, &e), TG_ERR_ARG);
    ck_assert_int_eq(tg_graph_par_site(g, -1, &e), TG_ERR_ARG);
    ck_assert_int_eq(tg_graph_par_site(NULL, 0, &e), TG_ERR_ARG);
    ck_assert_int_eq(tg_graph_par_site(g, 0, NULL), TG_ERR_ARG);
    ck_assert_int_eq(tg_graph_par_sites(NULL), 0);
    /* the kernels' sites are the graph's, not the context's */
    ck_assert_int_eq(tg_ctx_par_sites(ctx), 0);
    tu_ctx_free(ctx);
}
END_TEST

/* Two graphs over the same nodes keep their own records: running one leaves the other's
 * table as it was. */
START_TEST(test_tables_per_graph)
{
    tg_ctx *ctx = tu_ctx_new();
    if (!two_threads(ctx)) {
        tu_ctx_free(ctx);
        return;
    }
    tg_tensor *r;
    tg_tensor *s = build(ctx, &r);
    tg_graph *a = tg_graph_new(ctx, &s, 1), *b = tg_graph_new(ctx, &s, 1);
    ck_assert_ptr_nonnull(a);
    ck_assert_ptr_nonnull(b);
    ck_assert_int_eq(tg_graph_forward(a), TG_OK);
    ck_assert_int_eq(tg_graph_forward(a), TG_OK);
    ck_assert_int_eq(tg_graph_par_sites(b), 0);
    ck_assert_int_eq(tg_graph_forward(b), TG_OK);
    tg_par_site ea, eb;
    ck_assert_int_ge(find_site(a, "gemm", &ea), 0);
    ck_assert_int_ge(find_site(b, "gemm", &eb), 0);
    ck_assert_int_eq(ea.regions + ea.serial, 2);
    ck_assert_int_eq(eb.regions + eb.serial, 1);
    tu_ctx_free(ctx);
}
END_TEST

/* The optimizer's step (a direct call) keeps its record in the context. Forced to back off
 * (a losing region reported, as when a worker is descheduled), the next step runs on one
 * thread, shows it, and gives the bits of an ungoverned run. */
START_TEST(test_ctx_site_backoff)
{
    enum { P = 65536 }; /* Adam over 1 MiB of parameter, gradient and moments: a region */
    static float want[P], got[P];
    for (int run = 0; run < 2; run++) {
        tg_ctx *ctx = tu_ctx_new();
        if (!two_threads(ctx)) {
            tu_ctx_free(ctx);
            return;
        }
        tg_tensor *w = tg_param(ctx, TG_F32, TG_DIMS(P), "w");
        fill(w, P, 3);
        tg_tensor *l = tg_sum_all(ctx, tg_mul(ctx, w, w));
        tg_graph *g = tg_graph_new(ctx, &l, 1);
        ck_assert_ptr_nonnull(g);
        tg_optim_config cfg = tg_optim_defaults(TG_OPTIM_ADAM);
        tg_optim *o = tg_optim_new(ctx, &cfg, 0, NULL);
        ck_assert_ptr_nonnull(o);
        for (int step = 0; step < 3; step++) {
            ck_assert_int_eq(tg_graph_forward(g), TG_OK);
            ck_assert_int_eq(tg_graph_backward(g, l, NULL), TG_OK);
            ck_assert_int_eq(tg_optim_step(o, 0.01), TG_OK);
            if (step == 0 && run == 1) {
                /* the site's record: one step ran, in a team (or backed off already) */
                ck_assert_int_eq(tg_ctx_par_sites(ctx), 1);
                tg_par_site e;
                ck_assert_int_eq(tg_ctx_par_site(ctx, 0, &e), TG_OK);
                ck_assert_ptr_nonnull(strstr(e.site, "optim_update_kernel.h:"));
                ck_assert_int_eq(e.node, -1);
                ck_assert_str_eq(e.op, "");
                ck_assert_int_eq(e.regions + e.serial, 1);
                /* a region that lost 1 ms against one thread */
                tg__par_acct acct;
                tg__acct_init(&acct);
                acct.chunks[0] = 32;
                acct.first[0] = acct.t0;
                acct.done[0] = acct.t0 + 10;
                acct.t0 -= 1000;
                tg__gov_report(&ctx->govs.slot[0].g, &acct, 32);
                ck_assert_int_eq(tg_ctx_par_site(ctx, 0, &e), TG_OK);
                ck_assert(e.backing_off);
                ck_assert(e.mean_gain_us < 0);
                ck_assert(e.backoff_us >= 1000);
                ck_assert_int_eq(e.regions + e.serial, 2);
                ctx->govs.slot[0].g.off_until = tg__now_us() + 60e6; /* stays off */
            }
        }
        if (run == 1) {
            tg_par_site e;
            ck_assert_int_eq(tg_ctx_par_site(ctx, 0, &e), TG_OK);
            ck_assert_int_eq(e.threads, 1);
            ck_assert_int_ge(e.serial, 2); /* steps 2 and 3 on one thread */
            ck_assert_int_eq(tg_ctx_par_site(ctx, 1, &e), TG_ERR_ARG);
            ck_assert_int_eq(tg_ctx_par_site(NULL, 0, &e), TG_ERR_ARG);
            ck_assert_int_eq(tg_ctx_par_sites(NULL), 0);
        }
        ck_assert_int_eq(tg_tensor_get_data(w, run ? got : want, TG_F32, P), TG_OK);
        tu_ctx_free(ctx);
    }
    ck_assert_mem_eq(got, want, sizeof got);
}
END_TEST

/* A kernel called from a record filled by hand (no graph, no table) runs ungoverned on the
 * threads it is given: the same bits on 1 and 2 threads, and no table is touched. */
START_TEST(test_kernel_without_table)
{
    enum { M = 1 << 17 }; /* dropout over 512 KiB: a parallel region at 2 threads */
    static float x[M], out1[M], out2[M];
    static _Alignas(64) unsigned char saved[64 + M];
    for (int i = 0; i < M; i++)
        x[i] = (float)(i % 17) - 8.5f;
    tg_ctx *ctx = tu_ctx_new();
    if (!two_threads(ctx)) {
        tu_ctx_free(ctx);
        return;
    }
    tg_op_params p = {.dropout = {.p = 0.3}};
    int64_t shape[1] = {M}, stride[1] = {1};
    float *outs[2] = {out1, out2};
    for (int nt = 1; nt <= 2; nt++) {
        uint64_t rng[4] = {1, 2, 3, 4};
        tg__call c = {.ctx = ctx,
                      .n_src = 1,
                      .in = {x},
                      .out = outs[nt - 1],
                      .saved = saved,
                      .nt = nt,
                      .dtype = TG_F32,
                      .rank = 1,
                      .numel = M,
                      .shape = shape,
                      .p = &p,
                      .src_dtype = {TG_F32},
                      .src_rank = {1},
                      .src_numel = {M},
                      .src_shape = {shape},
                      .src_stride = {stride},
                      .training = true,
                      .rng = rng};
        ck_assert_ptr_null(c.govs);
        tg_kernel_fn fwd =
            tg__kernel(&tg__op_table[TG_OP_DROPOUT], TG_OP_DROPOUT, TG_F32, false);
        ck_assert_int_eq(fwd(&c), TG_OK);
    }
    ck_assert_mem_eq(out1, out2, sizeof out1);
    ck_assert_int_eq(tg_ctx_par_sites(ctx), 0);
    tu_ctx_free(ctx);
}
END_TEST

static Suite *governor_suite(void)
{
    Suite *s = suite_create("governor");
    TCase *tc = tcase_create("tables");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_graph_sites);
    tcase_add_test(tc, test_tables_per_graph);
    tcase_add_test(tc, test_ctx_site_backoff);
    tcase_add_test(tc, test_kernel_without_table);
    suite_add_tcase(s, tc);
    return s;
}

int main(void) { return tu_run(governor_suite()); }
