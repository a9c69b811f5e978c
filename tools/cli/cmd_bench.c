/*
 * cmd_bench.c - `tgrad bench`: speed measured in a benchmark, never in a test. Every number is
 * printed beside a reference measured in the same run, each at 1 thread and at N threads:
 *   peak    - the machine's FMA peak (its own probe, bench_gemm.c);
 *   gemm    - the probe, then sgemm and dgemm through tg_matmul (NN, NT) on the benchmark shapes
 *             against OpenBLAS when it can be dlopen()ed, samples interleaved (bench_gemm.c);
 *   dense   - tgrad's dense op against a plain triple loop in C;
 *   sdpa, mha, encoder, train - the module and training workloads of bench_work.c (the same
 *             code tools/bench/bench_torch.py times through libtgbench.so against PyTorch): median
 *             (min-max) ms per call, 1 and N threads interleaved sample by sample;
 *   sample  - greedy generation of 500 bytes on the default text model (random weights):
 *             through the KV cache (tg_generator, what `tgrad sample` does) against the
 *             window path of `tgrad sample --no-cache`, samples interleaved; the speedup.
 * --precision bf16 builds the dense, sdpa, mha, encoder and train graphs with
 * tg_graph_opts.precision = TG_PRECISION_BF16 and makes the gemm section time the bf16 GEMM
 * against tgrad's f32 one (bench_gemm.c); peak and sample are the same either way.
 */
#define _POSIX_C_SOURCE 200809L
#include "cli.h"
#include "bench_gemm.h"
#include "bench_work.h"
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

/* x rounded to the nearest bf16 (ties to even; NaN stays NaN), as an f32: what
 * TG_PRECISION_BF16 does to a product's operands. */
static float round_bf16(float x)
{
    uint32_t u;
    memcpy(&u, &x, sizeof u);
    if ((u & 0x7fffffffu) > 0x7f800000u)
        return x;
    u += 0x7fffu + ((u >> 16) & 1u);
    u &= 0xffff0000u;
    memcpy(&x, &u, sizeof x);
    return x;
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

/* The naive loop's output y = x w^T (M, N) in a new array (NULL: out of memory) and its best
 * time of 3 in *best; with bf16 it multiplies the bf16-rounded operands. */
static float *naive_reference(int64_t M, int64_t N, int64_t K, tg_tensor *x, tg_tensor *w,
                              int precision, double *best)
{
    float *ref = malloc(sizeof(float) * (size_t)(M * N));
    float *xr = NULL, *wr = NULL;
    if (ref && precision == TG_PRECISION_BF16) {
        xr = malloc(sizeof(float) * (size_t)(M * K));
        wr = malloc(sizeof(float) * (size_t)(N * K));
    }
    if (!ref || (precision == TG_PRECISION_BF16 && (!xr || !wr))) {
        free(ref);
        free(xr);
        free(wr);
        return NULL;
    }
    const float *xa = tg_tensor_data(x), *wa = tg_tensor_data(w);
    if (xr) {
        for (int64_t i = 0; i < M * K; i++)
            xr[i] = round_bf16(xa[i]);
        for (int64_t i = 0; i < N * K; i++)
            wr[i] = round_bf16(wa[i]);
        xa = xr;
        wa = wr;
    }
    double best_naive = INFINITY;
    for (int r = 0; r < 3; r++) {
        double t0 = now_s();
        naive_dense(M, N, K, xa, wa, ref);
        double dt = now_s() - t0;
        best_naive = dt < best_naive ? dt : best_naive;
    }
    free(xr);
    free(wr);
    *best = best_naive;
    return ref;
}

/* One row of bench_dense: the shape (M, N, K). Returns 0, or 1 after printing why. */
static int bench_dense_shape(int64_t M, int64_t N, int64_t K, int threads_all, int precision)
{
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
    tg_graph_opts go = {.precision = precision};
    tg_graph *g = tg_graph_new_opts(ctx, &y, 1, &go);
    if (!g) {
        cli_report("bench", NULL, NULL, ctx);
        tg_ctx_free(ctx);
        return 1;
    }
    double best_naive;
    float *ref = naive_reference(M, N, K, x, w, precision, &best_naive);
    if (!ref) {
        fprintf(stderr, "tgrad bench: out of memory\n");
        tg_ctx_free(ctx);
        return 1;
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
    return 0;
}

/* The dense op (bias-free, graph of compute precision @p precision) at 1 and @p threads_all
 * threads against the naive loop; with bf16 the loop multiplies the bf16-rounded operands, so
 * the max |diff| column stays at f32 rounding when the graph computes in bf16. */
static int bench_dense(int threads_all, bool tiny, int precision)
{
    static const int64_t shapes[][3] = {{2048, 512, 128}, {2048, 128, 512}, {2048, 86, 128}};
    static const int64_t tiny_shape[][3] = {{16, 8, 4}};
    const int64_t(*sh)[3] = tiny ? tiny_shape : shapes;
    size_t nshapes = tiny ? 1 : sizeof shapes / sizeof shapes[0];
    if (precision == TG_PRECISION_BF16)
        printf("dense, bf16 graph; the naive loop multiplies the bf16-rounded operands in f32\n");
    printf("%-22s %10s %12s %12s %9s %9s\n", "dense (M, N, K)", "naive", "tgrad 1 thr",
           "tgrad all", "x naive", "x 1 thr");
    for (size_t s = 0; s < nshapes; s++)
        if (bench_dense_shape(sh[s][0], sh[s][1], sh[s][2], threads_all, precision))
            return 1;
    return 0;
}

static int cmp_dbl(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Sorts v; median, v[0] is the min, v[n - 1] the max. */
static double med(double *v, int n)
{
    qsort(v, (size_t)n, sizeof *v, cmp_dbl);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

/* The workloads of bench_work.c whose names start with one of @p prefixes ("" = all): a
 * table of ms per call at 1 and @p threads_all threads, median (min-max) of @p samples samples
 * (each of enough calls to last ~20 ms), the thread counts interleaved sample by sample. */
static int bench_modules(const char *const *prefixes, int np, int threads_all, int samples,
                         bool tiny, bool unfused, int precision)
{
    int tcounts[2] = {1, threads_all}, ntc = threads_all > 1 ? 2 : 1;
    double *t = malloc(sizeof(double) * (size_t)samples * 2);
    if (!t) {
        fprintf(stderr, "tgrad bench: out of memory\n");
        return 1;
    }
    printf("Modules and training, %s, %s ops; ms per call, median of %d samples (min-max), "
           "thread counts interleaved\n", precision == TG_PRECISION_BF16 ? "bf16" : "f32",
           unfused ? "unfused (--unfused)" : "fused", samples);
    char h[32];
    snprintf(h, sizeof h, "%d threads", threads_all);
    printf("%-30s %24s", "workload", "1 thread");
    if (ntc > 1)
        printf(" %24s %8s", h, "speedup");
    snprintf(h, sizeof h, "tok/s %d thr", threads_all);
    printf(" %12s\n", h);
    int rc = 0;
    for (int i = 0; i < bw_count() && !rc; i++) {
        const char *name = bw_name(i);
        bool want = false;
        for (int p = 0; p < np; p++)
            want |= strncmp(name, prefixes[p], strlen(prefixes[p])) == 0;
        if (!want)
            continue;
        char err[512];
        bw_work *w = bw_new(name, 1, unfused, precision, tiny, err, sizeof err);
        if (!w) {
            fprintf(stderr, "tgrad bench: %s: %s\n", name, err);
            rc = 1;
            break;
        }
        int reps = tiny ? 1 : bw_reps(w, 0.02);
        for (int s = 0; s < samples && !rc; s++)
            for (int ti = 0; ti < ntc && !rc; ti++) {
                bw_set_threads(w, tcounts[ti]);
                t[ti * samples + s] = bw_sample(w, reps);
                if (isnan(t[ti * samples + s])) {
                    fprintf(stderr, "tgrad bench: %s: %s\n", name, bw_error(w));
                    rc = 1;
                }
            }
        if (!rc) {
            double m[2];
            printf("%-30s", bw_label(w));
            for (int ti = 0; ti < ntc; ti++) {
                double *v = t + ti * samples;
                m[ti] = med(v, samples);
                char cell[64];
                int dg = 1e3 * v[samples - 1] >= 100 ? 1 : 1e3 * v[samples - 1] >= 10 ? 2 : 3;
                snprintf(cell, sizeof cell, "%.*f (%.*f-%.*f)", dg, 1e3 * m[ti], dg, 1e3 * v[0],
                         dg, 1e3 * v[samples - 1]);
                printf(" %24s", cell);
            }
            if (ntc > 1)
                printf(" %7.2fx", m[0] / m[1]);
            printf(" %12.0f\n", bw_tokens(w) / m[ntc - 1]);
            fflush(stdout);
        }
        bw_free(w);
    }
    free(t);
    return rc;
}


/* ---- sample: 500 tokens through the KV cache vs the window path ---------------------------- */

/* The index of the largest of n f32 logits (the first on ties). */
static int argmax_f32(const float *x, int64_t n)
{
    int best = 0;
    for (int64_t i = 1; i < n; i++)
        if (x[i] > x[best])
            best = (int)i;
    return best;
}

typedef struct {
    tg_ctx *ctx;
    tg_transformer m;
    tg_generator *gen;       /* cached path */
    tg_tensor *ids, *logits; /* window path: ids (1, T) -> logits (1, T, V) */
    tg_graph *g;
    int64_t T, V;
} sample_bench;

/* Seconds to generate @p n_tok bytes greedily after a prompt of @p n_prompt, through the
 * generator (cached) or the window graph; NAN on failure. Both paths do what cmd_sample.c does
 * per byte (the window path: set the window, forward, read the last row). */
static double sample_run(sample_bench *b, bool cached, const int32_t *prompt, int64_t n_prompt,
                         int64_t n_tok)
{
    int32_t win[4096], buf[4096];
    int64_t n = n_prompt, T = b->T;
    memcpy(win, prompt, sizeof(int32_t) * (size_t)n);
    double t0 = now_s();
    if (cached) {
        tg_generator_reset(b->gen);
        if (tg_generator_feed(b->gen, win, n) != TG_OK)
            return NAN;
    }
    for (int64_t k = 0; k < n_tok; k++) {
        const float *lg;
        if (cached) {
            if (k > 0 && tg_generator_feed(b->gen, win + n - 1, 1) != TG_OK)
                return NAN;
            lg = tg_tensor_data(tg_generator_logits(b->gen));
        } else {
            for (int64_t t = 0; t < T; t++)
                buf[t] = t < n ? win[t] : 0;
            if (tg_tensor_set_data(b->ids, buf, TG_I32, (size_t)T) != TG_OK ||
                tg_graph_forward(b->g) != TG_OK)
                return NAN;
            lg = (const float *)tg_tensor_data(b->logits) + (n - 1) * b->V;
        }
        int next = argmax_f32(lg, b->V);
        if (n == T) {
            memmove(win, win + 1, sizeof(int32_t) * (size_t)(T - 1));
            n--;
        }
        win[n++] = next;
    }
    return now_s() - t0;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* One row of bench_sample: @p samples runs of each path, interleaved, on nt threads (v:
 * scratch of 3 samples doubles). Returns 0, or 1 after printing why. */
static int sample_row(sample_bench *b, int nt, const int32_t *prompt, int64_t n_prompt,
                      int64_t n_tok, int samples, double *v)
{
    int rc = 0;
    tg_ctx_set_threads(b->ctx, nt);
    /* warm-up, and the same tokens both ways while the text fits the window */
    if (isnan(sample_run(b, true, prompt, n_prompt, 4)) ||
        isnan(sample_run(b, false, prompt, n_prompt, 4))) {
        cli_report("bench", NULL, NULL, b->ctx);
        return 1;
    }
    double *vc = v, *vw = v + samples, *vr = v + 2 * samples;
    for (int s = 0; s < samples && !rc; s++) {
        vc[s] = sample_run(b, true, prompt, n_prompt, n_tok);
        vw[s] = sample_run(b, false, prompt, n_prompt, n_tok);
        vr[s] = vw[s] / vc[s];
        if (isnan(vr[s])) {
            cli_report("bench", NULL, NULL, b->ctx);
            rc = 1;
        }
    }
    if (rc)
        return rc;
    qsort(vc, (size_t)samples, sizeof *vc, cmp_double);
    qsort(vw, (size_t)samples, sizeof *vw, cmp_double);
    qsort(vr, (size_t)samples, sizeof *vr, cmp_double);
    char c1[64], c2[64];
    int mid = samples / 2;
    snprintf(c1, sizeof c1, "%.2f (%.2f-%.2f)", 1e3 * vc[mid], 1e3 * vc[0],
             1e3 * vc[samples - 1]);
    snprintf(c2, sizeof c2, "%.2f (%.2f-%.2f)", 1e3 * vw[mid], 1e3 * vw[0],
             1e3 * vw[samples - 1]);
    printf("%-8d %26s %26s %11.1fx %12.0f\n", nt, c1, c2, vr[mid],
           (double)n_tok / vc[mid]);
    fflush(stdout);
    return 0;
}

static int bench_sample(int threads_all, int samples, bool tiny)
{
    int64_t T = tiny ? 8 : 64, V = 86, n_tok = tiny ? 20 : 500, n_prompt = tiny ? 3 : 16;
    sample_bench b;
    memset(&b, 0, sizeof b);
    b.ctx = tg_ctx_new();
    if (!b.ctx) {
        fprintf(stderr, "tgrad bench: out of memory\n");
        return 1;
    }
    tg_ctx_seed(b.ctx, 1);
    tg_ctx_set_training(b.ctx, false);
    tg_transformer_config c = bw_text_model_config(V, T, tiny);
    b.T = T;
    b.V = V;
    tg_graph_opts go = {.no_grad = true};
    if (tg_transformer_init(b.ctx, &b.m, TG_F32, &c) == TG_OK) {
        b.gen = tg_generator_new(b.ctx, &b.m, 1);
        b.ids = tg_input(b.ctx, TG_I32, TG_DIMS(1, T), "ids");
        b.logits = tg_transformer_forward(b.ctx, &b.m, b.ids, NULL);
        b.g = b.logits ? tg_graph_new_opts(b.ctx, &b.logits, 1, &go) : NULL;
    }
    if (!b.gen || !b.g) {
        cli_report("bench", NULL, NULL, b.ctx);
        tg_ctx_free(b.ctx);
        return 1;
    }
    int32_t prompt[16];
    for (int64_t i = 0; i < n_prompt; i++)
        prompt[i] = (int32_t)((i * 37 + 11) % V);
    printf("sample: greedy generation of %lld bytes after a %lld-byte prompt, the default text "
           "model\n(2 pre-norm layers, d_model 128, 4 heads, d_ff 512, seq_len 64, vocab 86, "
           "random weights, f32);\nms per %lld bytes, median (min-max) of %d samples, the two "
           "paths interleaved\n", (long long)n_tok, (long long)n_prompt, (long long)n_tok,
           samples);
    printf("%-8s %26s %26s %12s %12s\n", "threads", "KV cache", "--no-cache (window)",
           "speedup", "cached B/s");
    int nts[2] = {1, threads_all}, ntc = threads_all > 1 ? 2 : 1, rc = 0;
    double *v = malloc(sizeof(double) * 3 * (size_t)samples);
    if (!v) {
        tg_ctx_free(b.ctx);
        return 1;
    }
    for (int ti = 0; ti < ntc && !rc; ti++)
        rc = sample_row(&b, nts[ti], prompt, n_prompt, n_tok, samples, v);
    printf("(speedup: the median of the per-sample ratios window / cached)\n");
    free(v);
    tg_ctx_free(b.ctx);
    return rc;
}

/* ---- parse ---------------------------------------------------------------------------------- */
static const cli_option bench_opts[] = {
    {.name = "threads", .kind = CLI_INT, .offset = offsetof(bench_args, threads), .metavar = "N",
     .help = "measure on 1 thread and on N threads (default: OpenMP's, all CPUs)", .imin = 1,
     .imax = CLI_MAX_THREADS},
    {.name = "only", .kind = CLI_CHOICE, .offset = offsetof(bench_args, only),
     .metavar = "SECTION", .choices = "all|peak|gemm|dense|sdpa|mha|encoder|train|sample",
     .help = "all, peak, gemm, dense, sdpa, mha, encoder, train or sample (default: all)"},
    {.name = "samples", .kind = CLI_INT, .offset = offsetof(bench_args, samples),
     .metavar = "N", .help = "samples per number, reported as median (min-max) (default: 7)",
     .imin = 1, .imax = 1000},
    {.name = "unfused", .kind = CLI_FLAG, .offset = offsetof(bench_args, unfused),
     .help = "module and training sections with fused ops off (tg_ctx_set_fusion)"},
    {.name = "precision", .kind = CLI_CHOICE, .offset = offsetof(bench_args, precision),
     .metavar = "P", .choices = "f32|bf16",
     .help = "compute precision of the gemm, dense, sdpa, mha, encoder and train sections "
             "(tg_graph_opts.precision): f32 or bf16 (default: f32)"},
    {.name = "tiny", .kind = CLI_FLAG, .offset = offsetof(bench_args, tiny),
     .help = "every section on tiny shapes (a smoke test; its numbers mean nothing)",
     .flags = CLI_HIDDEN},
    {0},
};

static const cli_command bench_cmd = {
    .name = "bench",
    .usage = "[--only SECTION] [--samples N] [--threads N] [--unfused] [--precision f32|bf16]",
    .description =
        "Prints the machine (CPU, CPUs online, OpenBLAS core), then sections, each on 1\n"
        "thread and on N threads, every number the median (min-max) of --samples samples:\n"
        "  peak     the FMA peak of this machine: its own probe of 512-bit and 256-bit\n"
        "           FMA with 12 and 24 independent chains; the fastest form is the peak;\n"
        "           also the bf16 peak (vdpbf16ps) where the CPU has AVX512_BF16;\n"
        "  gemm     the probe, then sgemm and dgemm through tg_matmul, C = A B (NN) and\n"
        "           C = A B^T (NT), on the benchmark shapes: GFLOP/s, % of the peak, and\n"
        "           the ratio to OpenBLAS (libopenblas.so.0 loaded with dlopen when\n"
        "           installed, with OPENBLAS_CORETYPE unset; samples interleaved in this\n"
        "           process);\n"
        "  dense    the dense kernel against a naive loop;\n"
        "  sdpa     scaled dot-product attention, q, k, v (64, 5, 64) = (batch x heads,\n"
        "           T, d_k), forward and forward + backward;\n"
        "  mha      self-attention, d_model 512, 8 heads, (batch, seq) (8, 128) and\n"
        "           (64, 5);\n"
        "  encoder  encoder layer, d_model 512, 8 heads, d_ff 2048, at (8, 128) and\n"
        "           (64, 5); at (8, 128) also its JVP along x (tg_jvp, with the\n"
        "           forward) and the HVP of its mean along x and the parameters\n"
        "           (tg_hvp);\n"
        "  train    a training step of the default text model (tokens/s);\n"
        "  sample   greedy generation of 500 bytes on the default text model through the\n"
        "           KV cache against `tgrad sample --no-cache`'s window path: the\n"
        "           speedup.\n"
        "With --precision bf16 the dense, sdpa, mha, encoder and train graphs are built\n"
        "with bf16 products (tg_graph_opts.precision), and gemm times the bf16 GEMM\n"
        "(bf16 operands, f32 accumulation) on the same shapes: GFLOP/s, % of the bf16\n"
        "peak (vdpbf16ps) and the ratio to tgrad's f32 GEMM, samples interleaved\n"
        "(OpenBLAS has no bf16 GEMM to compare with); peak and sample are unchanged.\n"
        "Ratios only against references measured in the same run; tools/bench/bench_torch.py\n"
        "runs the sdpa, mha, encoder and train workloads against PyTorch. All sections\n"
        "take a few minutes.",
    .opts = bench_opts,
};

int bench_parse(int argc, char **argv, bench_args *a, cli_result *r, char *err, size_t n)
{
    memset(a, 0, sizeof *a);
    return cli_parse(&bench_cmd, argc, argv, a, r, err, n);
}

void bench_free(bench_args *a, cli_result *r) { cli_free(&bench_cmd, a, r); }


/* ---- run and report (each section prints its own rows) -------------------------------------- */
enum { SEC_ALL, SEC_PEAK, SEC_GEMM, SEC_DENSE, SEC_SDPA, SEC_MHA, SEC_ENCODER, SEC_TRAIN,
       SEC_SAMPLE };

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
    int precision = a.precision == 1 ? TG_PRECISION_BF16 : TG_PRECISION_F32;
    bool all = only == SEC_ALL;
    bench_machine_print();
    printf("Threads: 1 and %d; %d samples per number%s\n", threads, samples,
           a.tiny ? "; --tiny: tiny shapes, the numbers mean nothing" : "");
    if (precision == TG_PRECISION_BF16)
        printf("Precision: bf16 (--precision bf16: tg_graph_opts.precision = TG_PRECISION_BF16,\n"
               "bf16 operands and f32 accumulation in the matrix products of the dense, sdpa,\n"
               "mha, encoder and train graphs; gemm times the bf16 GEMM; peak and sample as "
               "with f32)\n");
    printf("\n");
    fflush(stdout);
    int rc = 0;
    if (all || only == SEC_PEAK || only == SEC_GEMM) {
        bench_peaks pk;
        rc = bench_peak(threads, samples, a.tiny, &pk);
        if (!rc && (all || only == SEC_GEMM))
            rc = bench_gemm(threads, samples, a.tiny, precision, &pk);
        printf("\n");
    }
    if (!rc && (all || only == SEC_DENSE)) {
        rc = bench_dense(threads, a.tiny, precision);
        printf("\n");
    }
    static const char *const secs[] = {"sdpa", "mha", "encoder", "train"};
    if (!rc && (all || (only >= SEC_SDPA && only <= SEC_TRAIN))) {
        if (all)
            rc = bench_modules(secs, 4, threads, samples, a.tiny, a.unfused, precision);
        else
            rc = bench_modules(&secs[only - SEC_SDPA], 1, threads, samples, a.tiny, a.unfused,
                               precision);
    }
    if (!rc && (all || only == SEC_SAMPLE)) {
        if (all)
            printf("\n");
        rc = bench_sample(threads, samples, a.tiny);
    }
    fflush(stdout);
    return rc;
}
