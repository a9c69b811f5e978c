/*
 * cmd_bench.c - `tgrad bench`: speed measured in a benchmark, never in a test. Every number is
 * printed beside a reference measured in the same run:
 *   gemm   - FMA peak probe, sgemm and dgemm through tg_matmul (NN, NT) on issue 9's shapes
 *            against OpenBLAS when it can be dlopen()ed (bench_gemm.c);
 *   dense  - tgrad's dense op (the GEMM entry point) against a plain triple loop in C, in
 *            GFLOP/s, on 1 thread and on all threads;
 *   attn   - MHA forward + backward on a (32, 64, 128) batch, 1 thread vs all threads;
 *   train  - training steps of the default text model (2 pre-norm layers, d_model 128, 4
 *            heads, d_ff 512, seq 64, batch 32) on random bytes, tokens/s, 1 vs all threads.
 */
#define _POSIX_C_SOURCE 200809L
#include "cli.h"
#include "bench_gemm.h"
#include "climsg.h"
#include "tgrad_train.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Reference: y (M, N) = x (M, K) w^T (N, K), the obvious loop nest. */
static void naive_dense(int64_t M, int64_t N, int64_t K, const float *x, const float *w,
                        float *y)
{
    for (int64_t i = 0; i < M; i++)
        for (int64_t j = 0; j < N; j++) {
            float s = 0;
            for (int64_t k = 0; k < K; k++)
                s += x[i * K + k] * w[j * K + k];
            y[i * N + j] = s;
        }
}

/* Seconds per forward (+ backward with @p loss) of a graph, best of `reps` after one warm-up;
 * NAN if a pass fails (the context keeps the message). */
static double time_graph(tg_graph *g, int reps, tg_tensor *loss)
{
    if (tg_graph_forward(g) != TG_OK || (loss && tg_graph_backward(g, loss, NULL) != TG_OK))
        return NAN;
    double best = INFINITY;
    for (int r = 0; r < reps; r++) {
        double t0 = now_s();
        if (tg_graph_forward(g) != TG_OK)
            return NAN;
        if (loss) {
            tg_graph_zero_grad(g);
            if (tg_graph_backward(g, loss, NULL) != TG_OK)
                return NAN;
        }
        double dt = now_s() - t0;
        best = dt < best ? dt : best;
    }
    return best;
}

static int bench_dense(int threads_all)
{
    static const int64_t shapes[][3] = {{2048, 512, 128}, {2048, 128, 512}, {2048, 86, 128}};
    printf("%-22s %10s %12s %12s %9s %9s\n", "dense (M, N, K)", "naive", "tgrad 1 thr",
           "tgrad all", "x naive", "x 1 thr");
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
        int64_t M = shapes[s][0], N = shapes[s][1], K = shapes[s][2];
        double flops = 2.0 * (double)M * (double)N * (double)K;
        tg_ctx *ctx = tg_ctx_new();
        if (!ctx) {
            fprintf(stderr, "tgrad bench: out of memory\n");
            return 1;
        }
        tg_tensor *x = tg_input(ctx, TG_F32, TG_DIMS(M, K), "x");
        tg_tensor *w = tg_param(ctx, TG_F32, TG_DIMS(N, K), "w");
        tg_fill_uniform(x, -1, 1);
        tg_fill_uniform(w, -1, 1);
        tg_tensor *y = tg_dense(ctx, x, w, NULL);
        tg_graph *g = tg_graph_new(ctx, &y, 1);
        if (!g) {
            cli_report("bench", NULL, NULL, ctx);
            tg_ctx_free(ctx);
            return 1;
        }
        float *ref = malloc(sizeof(float) * (size_t)(M * N));
        if (!ref) {
            fprintf(stderr, "tgrad bench: out of memory\n");
            tg_ctx_free(ctx);
            return 1;
        }
        double best_naive = INFINITY;
        for (int r = 0; r < 3; r++) {
            double t0 = now_s();
            naive_dense(M, N, K, tg_tensor_data(x), tg_tensor_data(w), ref);
            double dt = now_s() - t0;
            best_naive = dt < best_naive ? dt : best_naive;
        }
        tg_ctx_set_threads(ctx, 1);
        double t1 = time_graph(g, 5, NULL);
        tg_ctx_set_threads(ctx, threads_all);
        double tn = time_graph(g, 5, NULL);
        if (isnan(t1) || isnan(tn)) {
            cli_report("bench", NULL, NULL, ctx);
            free(ref);
            tg_ctx_free(ctx);
            return 1;
        }
        double maxd = 0;
        for (int64_t i = 0; i < M * N; i++)
            maxd = fmax(maxd, fabs(ref[i] - tg_get(y, i)));
        char label[64];
        snprintf(label, sizeof label, "(%lld, %lld, %lld)", (long long)M, (long long)N,
                 (long long)K);
        printf("%-22s %7.2f GF %9.2f GF %9.2f GF %8.1fx %8.2fx   (max |diff| %.1e)\n", label,
               flops / best_naive * 1e-9, flops / t1 * 1e-9, flops / tn * 1e-9, best_naive / tn,
               t1 / tn, maxd);
        free(ref);
        tg_ctx_free(ctx);
    }
    return 0;
}

static int bench_model(int threads_all, bool train)
{
    int64_t B = 32, T = 64, D = 128;
    tg_ctx *ctx = tg_ctx_new();
    if (!ctx)
        return 1;
    tg_graph *g = NULL;
    tg_tensor *loss = NULL;
    if (train) {
        tg_transformer_config c;
        memset(&c, 0, sizeof c);
        c.vocab_size = 86;
        c.max_seq_len = T;
        c.n_layers = 2;
        c.layer = tg_encoder_config_default(D, 4);
        c.layer.d_ff = 512;
        c.layer.norm_first = true;
        c.causal = true;
        tg_transformer m;
        if (tg_transformer_init(ctx, &m, TG_F32, &c) == TG_OK) {
            tg_tensor *ids = tg_input(ctx, TG_I32, TG_DIMS(B, T), "ids");
            tg_tensor *tg = tg_input(ctx, TG_I32, TG_DIMS(B, T), "targets");
            for (int64_t i = 0; i < B * T; i++) {
                tg_set(ids, i, (double)(tg_rng_u64(ctx) % 86));
                tg_set(tg, i, (double)(tg_rng_u64(ctx) % 86));
            }
            loss = tg_cross_entropy(ctx, tg_transformer_forward(ctx, &m, ids, NULL), tg, -1);
        }
    } else {
        tg_mha m;
        tg_mha_init(ctx, &m, TG_F32, D, 4, NULL);
        tg_tensor *x = tg_input(ctx, TG_F32, TG_DIMS(B, T, D), "x");
        tg_fill_uniform(x, -1, 1);
        tg_attn_masks mk;
        memset(&mk, 0, sizeof mk);
        mk.causal = true;
        loss = tg_mean_all(ctx, tg_mha_forward(ctx, &m, x, x, x, &mk, NULL));
    }
    g = loss ? tg_graph_new(ctx, &loss, 1) : NULL;
    if (!g) {
        cli_report("bench", NULL, NULL, ctx);
        tg_ctx_free(ctx);
        return 1;
    }
    tg_ctx_set_threads(ctx, 1);
    double t1 = time_graph(g, train ? 3 : 5, loss);
    tg_ctx_set_threads(ctx, threads_all);
    double tn = time_graph(g, train ? 5 : 10, loss);
    if (isnan(t1) || isnan(tn)) {
        cli_report("bench", NULL, NULL, ctx);
        tg_ctx_free(ctx);
        return 1;
    }
    double tokens = (double)(B * T);
    printf("%-22s %12.0f tok/s (1 thread) %12.0f tok/s (%d threads) %8.2fx\n",
           train ? "train step (fwd+bwd)" : "mha fwd+bwd", tokens / t1, tokens / tn,
           threads_all, t1 / tn);
    tg_ctx_free(ctx);
    return 0;
}

/* ---- parse ---------------------------------------------------------------------------------- */
static const cli_option bench_opts[] = {
    {.name = "threads", .kind = CLI_INT, .offset = offsetof(bench_args, threads), .metavar = "N",
     .help = "threads of the 'all threads' column (default: OpenMP's)", .imin = 1,
     .imax = CLI_MAX_THREADS},
    {.name = "only", .kind = CLI_CHOICE, .offset = offsetof(bench_args, only),
     .metavar = "SECTION", .choices = "all|gemm|dense|attn|train",
     .help = "all, gemm, dense, attn or train (default: all)"},
    {.name = "samples", .kind = CLI_INT, .offset = offsetof(bench_args, samples),
     .metavar = "N", .help = "samples per GEMM number, reported as median (min-max) (default: 7)",
     .imin = 1, .imax = 1000},
    {.name = "tiny", .kind = CLI_FLAG, .offset = offsetof(bench_args, tiny),
     .help = "GEMM section on one tiny shape (a smoke test; its numbers mean nothing)",
     .flags = CLI_HIDDEN},
    {0},
};

static const cli_command bench_cmd = {
    .name = "bench",
    .usage = "[--only gemm|dense|attn|train] [--samples N] [--threads N]",
    .description =
        "Sections, each on 1 thread and on N threads (default: all):\n"
        "  gemm   the FMA peak of this machine (its own probe), then sgemm and dgemm through\n"
        "         tg_matmul, C = A B (NN) and C = A B^T (NT), on issue 9's shapes: GFLOP/s as\n"
        "         median (min-max) of --samples samples, % of the peak, and the ratio to\n"
        "         OpenBLAS (libopenblas.so.0 loaded with dlopen when installed, with\n"
        "         OPENBLAS_CORETYPE unset; samples interleaved in this process);\n"
        "  dense  the dense kernel against a naive loop;\n"
        "  attn   MHA forward + backward;\n"
        "  train  a training step of the default text model.\n"
        "Prints ratios only against references measured in the same run. All sections take\n"
        "a few minutes.",
    .opts = bench_opts,
};

int bench_parse(int argc, char **argv, bench_args *a, cli_result *r, char *err, size_t n)
{
    memset(a, 0, sizeof *a);
    return cli_parse(&bench_cmd, argc, argv, a, r, err, n);
}

void bench_free(bench_args *a, cli_result *r) { cli_free(&bench_cmd, a, r); }


/* ---- run and report (each benchmark prints its own rows) ------------------------------------ */
int cmd_bench(int argc, char **argv)
{
    bench_args a;
    cli_result r;
    char err[512];
    int ex = cli_parse_exit(bench_parse(argc, argv, &a, &r, err, sizeof err), &bench_cmd, err);
    bench_free(&a, &r);
    if (ex >= 0)
        return ex;
    int threads = (int)a.threads;
    if (threads < 1) {
        tg_ctx *probe = tg_ctx_new();
        if (!probe) {
            fprintf(stderr, "tgrad bench: out of memory\n");
            return 1;
        }
        threads = tg_ctx_threads(probe);
        tg_ctx_free(probe);
    }
    int only = a.only, samples = a.samples > 0 ? (int)a.samples : 7;
    int rc = 0;
    if (only == 0 || only == 1) {
        rc = bench_gemm(threads, samples, a.tiny);
        if (only == 0)
            printf("\n");
    }
    if (!rc && (only == 0 || only == 2))
        rc = bench_dense(threads);
    if (!rc && (only == 0 || only == 3))
        rc = bench_model(threads, false);
    if (!rc && (only == 0 || only == 4))
        rc = bench_model(threads, true);
    return rc;
}
