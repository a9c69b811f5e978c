/*
 * test_precision.c - the compute precision of graphs (tg_graph_opts.precision).
 *
 * TG_PRECISION_BF16: the matrix products (dense and dense_act on the GEMM and the GEMV path,
 * matmul, flash attention, forward and backward) equal an f64 product of the bf16-rounded
 * operands within the f32 accumulation bound |err| <= (K + 2) 2^-24 sum_k |a_k b_k| (+ the
 * bias's rounding); they differ from the f32 products (the rounding is in effect); results are
 * bitwise identical for 1, 2, 3 and 8 threads; f64 graphs and unknown values are refused; and
 * TG_PRECISION_F32 (the default) gives today's bits.
 */
#include "testutil.h"

#include "core.h"
#include "tgrad_nn.h"
#include "tgrad_train.h"

#include <stdlib.h>
#include <string.h>

static double bf16r(double v) { return (double)tg__bf16_to_f32(tg__bf16_from_f32((float)v)); }

static double *values(tg_tensor *t)
{
    int64_t n = tg_tensor_numel(t);
    double *v = malloc(sizeof(double) * (size_t)n);
    ck_assert_int_eq(tg_tensor_get_data(t, v, TG_F64, (size_t)n), TG_OK);
    return v;
}

static double *grads(tg_tensor *t)
{
    int64_t n = tg_tensor_numel(t);
    double *v = malloc(sizeof(double) * (size_t)n);
    ck_assert_int_eq(tg_tensor_get_grad(t, v, TG_F64, (size_t)n), TG_OK);
    return v;
}

/* got (R, C) against sum_k a(r, k) b(k, c) of the rounded operands (a at a[r sar + k sak], b
 * at b[k sbk + c sbc]) plus bias[c] (or none), within the accumulation bound. Returns the
 * largest |got - f32-free reference| seen, for the "differs from f32" checks. */
static void check_product(const char *what, const double *got, int64_t R, int64_t C, int64_t K,
                          const double *a, int64_t sar, int64_t sak, const double *b,
                          int64_t sbk, int64_t sbc, const double *bias)
{
    for (int64_t r = 0; r < R; r++)
        for (int64_t c = 0; c < C; c++) {
            double s = bias ? bias[c] : 0, mag = bias ? fabs(bias[c]) : 0;
            for (int64_t k = 0; k < K; k++) {
                double p = bf16r(a[r * sar + k * sak]) * bf16r(b[k * sbk + c * sbc]);
                s += p;
                mag += fabs(p);
            }
            double bound = (double)(K + 2) * 0x1p-24 * mag + 1e-30;
            double e = fabs(got[r * C + c] - s);
            ck_assert_msg(e <= bound, "%s[%lld, %lld] = %.9g, reference %.9g (error %.3g > "
                          "bound %.3g)", what, (long long)r, (long long)c, got[r * C + c], s,
                          e, bound);
        }
}

static tg_graph *graph_at(tg_ctx *ctx, tg_tensor *y, int precision)
{
    tg_graph_opts o = {0};
    o.precision = precision;
    tg_graph *g = tg_graph_new_opts(ctx, &y, 1, &o);
    ck_assert_msg(g != NULL, "%s", tg_ctx_message(ctx));
    return g;
}

/* dense (and dense_act with ReLU): forward and the gradients of x, W and b, against the
 * rounded-operand reference, for rows on the GEMM path (R > 4) and on the GEMV path. */
static void dense_case(int64_t R, int64_t I, int64_t O, bool act)
{
    tg_ctx *ctx = tu_ctx_new();
    tg_ctx_seed(ctx, (uint64_t)(R * 131 + I));
    tg_tensor *x = tu_input(ctx, TG_F32, TG_DIMS(R, I), "x", -2, 2);
    tg_tensor *w = tg_param(ctx, TG_F32, TG_DIMS(O, I), "w");
    tg_tensor *b = tg_param(ctx, TG_F32, TG_DIMS(O), "b");
    tg_fill_uniform(w, -1, 1);
    tg_fill_uniform(b, -1, 1);
    tg_tensor *y = act ? tg_dense_act(ctx, x, w, b, TG_ACT_RELU) : tg_dense(ctx, x, w, b);
    tg_tensor *dy = tg_const(ctx, TG_F32, TG_DIMS(R, O), "dy");
    tg_fill_uniform(dy, -1, 1);
    double *xv = values(x), *wv = values(w), *bv = values(b), *dyv = values(dy);

    tg_graph *g32 = graph_at(ctx, y, TG_PRECISION_F32);
    ck_assert_int_eq(tg_graph_forward(g32), TG_OK);
    double *y32 = values(y);
    tg_graph *g = graph_at(ctx, y, TG_PRECISION_BF16);
    ck_assert_int_eq(tg_graph_forward(g), TG_OK);
    double *yv = values(y);
    /* forward: z = x W^T + b (for ReLU, where z > 0) */
    double *z = malloc(sizeof(double) * (size_t)(R * O));
    for (int64_t i = 0; i < R * O; i++)
        z[i] = yv[i];
    if (!act) {
        check_product("y", z, R, O, I, xv, I, 1, wv, 1, I, bv);
    } else { /* the positive outputs are z itself */
        for (int64_t r = 0; r < R; r++)
            for (int64_t c = 0; c < O; c++)
                if (yv[r * O + c] > 0)
                    check_product("relu(z)", &yv[r * O + c], 1, 1, I, xv + r * I, I, 1,
                                  wv + c * I, 1, 1, bv + c);
    }
    double diff = 0;
    for (int64_t i = 0; i < R * O; i++)
        diff = fmax(diff, fabs(yv[i] - y32[i]));
    ck_assert_msg(diff > 1e-4, "bf16 and f32 outputs agree to %g: no rounding happened", diff);

    /* backward from dy: dz = dy (dense) or dy [y > 0] */
    ck_assert_int_eq(tg_graph_backward(g, y, dy), TG_OK);
    double *dz = malloc(sizeof(double) * (size_t)(R * O));
    for (int64_t i = 0; i < R * O; i++)
        dz[i] = act && !(yv[i] > 0) ? 0 : dyv[i];
    double *dx = grads(x), *dw = grads(w);
    check_product("dx", dx, R, I, O, dz, O, 1, wv, I, 1, NULL);  /* dz (R, O) W (O, I) */
    check_product("dW", dw, O, I, R, dz, 1, O, xv, I, 1, NULL);  /* dz^T (O, R) x (R, I) */
    free(xv), free(wv), free(bv), free(dyv), free(y32), free(yv), free(z), free(dz), free(dx),
        free(dw);
    tu_ctx_free(ctx);
}

START_TEST(dense_bf16)
{
    dense_case(9, 37, 19, false); /* the GEMM */
    dense_case(3, 70, 21, false); /* the GEMV (<= 4 rows) */
    dense_case(13, 33, 40, true); /* dense_act */
    dense_case(1, 64, 9, true);
}
END_TEST

/* Batched matmul with a broadcast operand, forward and both gradients. */
START_TEST(matmul_bf16)
{
    tg_ctx *ctx = tu_ctx_new();
    tg_ctx_seed(ctx, 7);
    int64_t B = 3, M = 14, K = 29, N = 17;
    tg_tensor *a = tu_input(ctx, TG_F32, TG_DIMS(B, M, K), "a", -1, 1);
    tg_tensor *b = tu_input(ctx, TG_F32, TG_DIMS(K, N), "b", -1, 1);
    tg_tensor *y = tg_matmul(ctx, a, b, false, false);
    tg_tensor *dy = tg_const(ctx, TG_F32, TG_DIMS(B, M, N), "dy");
    tg_fill_uniform(dy, -1, 1);
    tg_graph *g = graph_at(ctx, y, TG_PRECISION_BF16);
    ck_assert_int_eq(tg_graph_forward(g), TG_OK);
    ck_assert_int_eq(tg_graph_backward(g, y, dy), TG_OK);
    double *av = values(a), *bv = values(b), *yv = values(y), *dyv = values(dy);
    double *da = grads(a), *db = grads(b);
    for (int64_t o = 0; o < B; o++) {
        check_product("y", yv + o * M * N, M, N, K, av + o * M * K, K, 1, bv, N, 1, NULL);
        /* dA[o] (M, K) = dY[o] (M, N) B^T */
        check_product("da", da + o * M * K, M, K, N, dyv + o * M * N, N, 1, bv, 1, N, NULL);
    }
    /* dB (K, N) = sum_o A[o]^T dY[o]: the sum over batches is f32 adds of rounded products */
    for (int64_t k = 0; k < K; k++)
        for (int64_t n = 0; n < N; n++) {
            double s = 0, mag = 0;
            for (int64_t o = 0; o < B; o++)
                for (int64_t m = 0; m < M; m++) {
                    double p = bf16r(av[o * M * K + m * K + k]) * bf16r(dyv[o * M * N + m * N + n]);
                    s += p;
                    mag += fabs(p);
                }
            ck_assert_msg(fabs(db[k * N + n] - s) <= (double)(B * M + 2) * 0x1p-24 * mag,
                          "db[%lld, %lld] = %.9g, reference %.9g", (long long)k, (long long)n,
                          db[k * N + n], s);
        }
    free(av), free(bv), free(yv), free(dyv), free(da), free(db);
    tu_ctx_free(ctx);
}
END_TEST

/* Reference attention weights of row i of batch o under the causal mask: p[j] = softmax_j
 * (scale q_i . k_j) for j <= i, the scores from bf16-rounded q and k, in f64. q, k (B, T, d). */
static void causal_probs(const double *qv, const double *kv, int64_t o, int64_t i, int64_t T,
                         int64_t d, double scale, double *p)
{
    double mx = -INFINITY, sum = 0;
    for (int64_t j = 0; j <= i; j++) {
        double a = 0;
        for (int64_t c = 0; c < d; c++)
            a += bf16r(qv[(o * T + i) * d + c]) * bf16r(kv[(o * T + j) * d + c]);
        p[j] = a * scale;
        mx = fmax(mx, p[j]);
    }
    for (int64_t j = 0; j <= i; j++)
        sum += (p[j] = exp(p[j] - mx));
    for (int64_t j = 0; j <= i; j++)
        p[j] /= sum;
}

/* Flash attention: out = softmax(scale q k^T) v with bf16 q, k and bf16 weights p times bf16
 * v. The weights are rounded after an f32 softmax, so the reference rounds f64 weights: one
 * rounding may fall the other way, hence a bound of a few bf16 ulps of max |v|. */
START_TEST(flash_attention_bf16)
{
    for (int64_t T = 5; T <= 80; T += 75) { /* one key block and several */
        tg_ctx *ctx = tu_ctx_new();
        tg_ctx_seed(ctx, (uint64_t)T);
        int64_t B = 2, d = 16;
        tg_tensor *q = tu_input(ctx, TG_F32, TG_DIMS(B, T, d), "q", -1, 1);
        tg_tensor *k = tu_input(ctx, TG_F32, TG_DIMS(B, T, d), "k", -1, 1);
        tg_tensor *v = tu_input(ctx, TG_F32, TG_DIMS(B, T, d), "v", -1, 1);
        double scale = 0.25;
        tg_tensor *y = tg_flash_attention(ctx, q, k, v, NULL, TG_MASK_ADDITIVE, NULL, true,
                                          scale);
        ck_assert_msg(y != NULL, "%s", tg_ctx_message(ctx));
        tg_keep(y);
        tg_tensor *l = tg_sum_all(ctx, tg_mul(ctx, y, y));
        tg_graph *g32 = graph_at(ctx, l, TG_PRECISION_F32);
        ck_assert_int_eq(tg_graph_forward(g32), TG_OK);
        ck_assert_int_eq(tg_graph_backward(g32, l, NULL), TG_OK);
        double *y32 = values(y), *dq32 = grads(q);
        tg_graph_zero_grad(g32);
        tg_graph *g = graph_at(ctx, l, TG_PRECISION_BF16);
        ck_assert_int_eq(tg_graph_forward(g), TG_OK);
        ck_assert_int_eq(tg_graph_backward(g, l, NULL), TG_OK);
        double *qv = values(q), *kv = values(k), *vv = values(v), *yv = values(y);
        double *dq = grads(q);
        double diff = 0, gdiff = 0;
        for (int64_t o = 0; o < B; o++)
            for (int64_t i = 0; i < T; i++) {
                double p[80];
                causal_probs(qv, kv, o, i, T, d, scale, p);
                for (int64_t c = 0; c < d; c++) {
                    double r = 0;
                    for (int64_t j = 0; j <= i; j++)
                        r += bf16r(p[j]) * bf16r(vv[(o * T + j) * d + c]);
                    double e = fabs(yv[(o * T + i) * d + c] - r);
                    ck_assert_msg(e <= 4 * 0x1p-8, "out[%lld, %lld, %lld] = %.7g, reference "
                                  "%.7g (T %lld)", (long long)o, (long long)i, (long long)c,
                                  yv[(o * T + i) * d + c], r, (long long)T);
                    diff = fmax(diff, fabs(yv[(o * T + i) * d + c] - y32[(o * T + i) * d + c]));
                }
            }
        /* Gradients of l = sum y^2 (dO = 2 y): dV_j = sum_i p_ij dO_i and dQ_i = scale sum_j
         * dS_ij k_j, dS_ij = p_ij (dP_ij - D_i), dP_ij = dO_i . v_j, D_i = dO_i . O_i, each
         * product of bf16-rounded operands (p and dS rounded after they are computed). */
        double *dvv = grads(v);
        for (int64_t o = 0; o < B; o++) {
            double P[80][80] = {{0}}, dS[80][80] = {{0}};
            for (int64_t i = 0; i < T; i++) {
                double D = 0;
                causal_probs(qv, kv, o, i, T, d, scale, P[i]);
                for (int64_t c = 0; c < d; c++)
                    D += 2 * yv[(o * T + i) * d + c] * yv[(o * T + i) * d + c];
                for (int64_t j = 0; j <= i; j++) {
                    double dp = 0;
                    for (int64_t c = 0; c < d; c++)
                        dp += bf16r(2 * yv[(o * T + i) * d + c]) * bf16r(vv[(o * T + j) * d + c]);
                    dS[i][j] = P[i][j] * (dp - D);
                }
            }
            for (int64_t j = 0; j < T; j++)
                for (int64_t c = 0; c < d; c++) {
                    double r = 0, mag = 0;
                    for (int64_t i = j; i < T; i++) {
                        double t = bf16r(P[i][j]) * bf16r(2 * yv[(o * T + i) * d + c]);
                        r += t, mag += fabs(t);
                    }
                    double e = fabs(dvv[(o * T + j) * d + c] - r);
                    ck_assert_msg(e <= 4 * 0x1p-8 * mag + 1e-6, "dv[%lld, %lld, %lld] = %.7g, "
                                  "reference %.7g (T %lld)", (long long)o, (long long)j,
                                  (long long)c, dvv[(o * T + j) * d + c], r, (long long)T);
                }
            for (int64_t i = 0; i < T; i++)
                for (int64_t c = 0; c < d; c++) {
                    double r = 0, mag = 0;
                    for (int64_t j = 0; j <= i; j++) {
                        double t = bf16r(scale * dS[i][j]) * bf16r(kv[(o * T + j) * d + c]);
                        r += t, mag += fabs(t);
                    }
                    double e = fabs(dq[(o * T + i) * d + c] - r);
                    ck_assert_msg(e <= 8 * 0x1p-8 * mag + 1e-5, "dq[%lld, %lld, %lld] = %.7g, "
                                  "reference %.7g (T %lld)", (long long)o, (long long)i,
                                  (long long)c, dq[(o * T + i) * d + c], r, (long long)T);
                }
        }
        free(dvv);
        for (int64_t i = 0; i < B * T * d; i++)
            gdiff = fmax(gdiff, fabs(dq[i] - dq32[i]));
        ck_assert_msg(diff > 1e-5 && diff < 0.05, "bf16 vs f32 output: %g", diff);
        ck_assert_msg(gdiff > 1e-6 && gdiff < 0.1, "bf16 vs f32 dq: %g", gdiff);
        free(y32), free(dq32), free(qv), free(kv), free(vv), free(yv), free(dq);
        tu_ctx_free(ctx);
    }
}
END_TEST

/* An encoder layer (MHA with flash attention, the FFN, layer norms) in bf16: every parameter
 * gradient bitwise equal for 1, 2, 3 and 8 threads. */
static void encoder_run(int nt, double *out, size_t *n)
{
    tg_ctx *ctx = tu_ctx_new();
    tg_ctx_set_threads(ctx, nt);
    tg_ctx_seed(ctx, 99);
    tg_encoder_config cfg = tg_encoder_config_default(64, 4);
    cfg.d_ff = 128;
    tg_encoder_layer el;
    ck_assert_int_eq(tg_encoder_layer_init(ctx, &el, TG_F32, &cfg, ""), TG_OK);
    tg_tensor *x = tu_input(ctx, TG_F32, TG_DIMS(3, 37, 64), "x", -1, 1);
    tg_tensor *y = tg_encoder_layer_forward(ctx, &el, x, NULL);
    tg_tensor *l = tg_sum_all(ctx, tg_mul(ctx, y, y));
    tg_graph *g = graph_at(ctx, l, TG_PRECISION_BF16);
    ck_assert_int_eq(tg_graph_forward(g), TG_OK);
    ck_assert_int_eq(tg_graph_backward(g, l, NULL), TG_OK);
    *n = 0;
    out[(*n)++] = tg_get(l, 0);
    tg_tensor *ps[] = {el.self_attn.in_proj_weight, el.ffn.linear1_weight, el.norm1_weight, x};
    for (size_t p = 0; p < sizeof ps / sizeof ps[0]; p++) {
        int64_t m = tg_tensor_numel(ps[p]);
        ck_assert_int_eq(tg_tensor_get_grad(ps[p], out + *n, TG_F64, (size_t)m), TG_OK);
        *n += (size_t)m;
    }
    tu_ctx_free(ctx);
}

START_TEST(threads_bitwise_bf16)
{
    size_t cap = 1 + 3 * 64 * 64 + 128 * 64 + 64 + 3 * 37 * 64, n1, n;
    double *a = malloc(sizeof(double) * cap), *b = malloc(sizeof(double) * cap);
    encoder_run(1, a, &n1);
    static const int nts[] = {2, 3, 8};
    for (size_t t = 0; t < 3; t++) {
        encoder_run(nts[t], b, &n);
        ck_assert_int_eq(n, n1);
        ck_assert_msg(memcmp(a, b, sizeof(double) * n) == 0, "%d threads differ from 1",
                      nts[t]);
    }
    free(a), free(b);
}
END_TEST

START_TEST(refused)
{
    tg_ctx *ctx = tu_ctx_new();
    tg_tensor *x = tu_input(ctx, TG_F64, TG_DIMS(2, 3), "x", -1, 1);
    tg_tensor *y = tg_sum_all(ctx, tg_mul(ctx, x, x));
    tg_graph_opts o = {0};
    o.precision = TG_PRECISION_BF16;
    ck_assert_ptr_null(tg_graph_new_opts(ctx, &y, 1, &o));
    tu_assert_error(ctx, TG_ERR_DTYPE, "bf16 precision is for f32 graphs");
    tu_ctx_free(ctx);
    ctx = tu_ctx_new(); /* (a failed build's error stays on its context) */
    x = tu_input(ctx, TG_F32, TG_DIMS(2, 3), "x", -1, 1);
    y = tg_sum_all(ctx, tg_mul(ctx, x, x));
    o.precision = 7;
    ck_assert_ptr_null(tg_graph_new_opts(ctx, &y, 1, &o));
    tu_assert_error(ctx, TG_ERR_ARG, "unknown precision 7");
    tu_ctx_free(ctx);
}
END_TEST

/* The default precision is today's f32: the same bits as a graph built without options. */
START_TEST(f32_default_unchanged)
{
    tg_ctx *ctx = tu_ctx_new();
    tg_tensor *x = tu_input(ctx, TG_F32, TG_DIMS(6, 40), "x", -1, 1);
    tg_tensor *w = tg_param(ctx, TG_F32, TG_DIMS(30, 40), "w");
    tg_fill_uniform(w, -1, 1);
    tg_tensor *y = tg_dense(ctx, x, w, NULL);
    tg_graph *g = tg_graph_new(ctx, &y, 1);
    ck_assert_int_eq(tg_graph_forward(g), TG_OK);
    double *a = values(y);
    tg_graph *g2 = graph_at(ctx, y, TG_PRECISION_F32);
    ck_assert_int_eq(tg_graph_forward(g2), TG_OK);
    double *b = values(y);
    ck_assert(memcmp(a, b, sizeof(double) * 6 * 30) == 0);
    free(a), free(b);
    tu_ctx_free(ctx);
}
END_TEST

/* The generator at bf16: its logits are within bf16 rounding of the uncached forward graph's
 * at bf16 (its dense products are bf16 too, but its attention over the cache stays f32 while
 * the graph's flash attention rounds P and V), and differ from the f32 logits (the rounding is
 * in effect); the setter's errors. The GEMV path (one row) and the GEMM path (the prompt)
 * both run. */
static void lm_logits(tg_ctx *ctx, const tg_transformer *m, const int32_t *ids, int64_t T,
                      int precision, double *out)
{
    tg_mark mk = tg_ctx_mark(ctx);
    tg_tensor *x = tg_input(ctx, TG_I32, TG_DIMS(1, T), "ids");
    ck_assert_int_eq(tg_tensor_set_data(x, ids, TG_I32, (size_t)T), TG_OK);
    tg_tensor *lg = tg_transformer_forward(ctx, m, x, NULL);
    tg_graph_opts o = {0};
    o.no_grad = true;
    o.precision = precision;
    tg_graph *g = tg_graph_new_opts(ctx, &lg, 1, &o);
    ck_assert_msg(g != NULL, "%s", tg_ctx_message(ctx));
    ck_assert_int_eq(tg_graph_forward(g), TG_OK);
    int64_t V = m->cfg.vocab_size;
    for (int64_t v = 0; v < V; v++)
        out[v] = tg_get(lg, (T - 1) * V + v);
    tg_ctx_rewind(ctx, mk);
}

START_TEST(generator_bf16)
{
    tg_ctx *ctx = tu_ctx_new();
    tg_ctx_seed(ctx, 5);
    tg_ctx_set_training(ctx, false);
    tg_transformer_config mc;
    memset(&mc, 0, sizeof mc);
    mc.vocab_size = 29;
    mc.max_seq_len = 16;
    mc.n_layers = 2;
    mc.layer = tg_encoder_config_default(64, 4);
    mc.layer.d_ff = 128;
    mc.layer.norm_first = true;
    mc.causal = true;
    tg_transformer m;
    ck_assert_int_eq(tg_transformer_init(ctx, &m, TG_F32, &mc), TG_OK);
    tg_generator *gen = tg_generator_new(ctx, &m, 1);
    ck_assert_msg(gen != NULL, "%s", tg_ctx_message(ctx));
    ck_assert_int_eq(tg_generator_precision(gen), TG_PRECISION_F32);
    ck_assert_int_eq(tg_generator_set_precision(gen, 9), TG_ERR_ARG);
    tu_assert_error(ctx, TG_ERR_ARG, "unknown precision 9");
    ck_assert_int_eq(tg_generator_set_precision(gen, TG_PRECISION_BF16), TG_OK);
    ck_assert_int_eq(tg_generator_precision(gen), TG_PRECISION_BF16);
    int32_t ids[8] = {3, 7, 1, 12, 28, 5, 9, 2};
    ck_assert_int_eq(tg_generator_feed(gen, ids, 5), TG_OK); /* the prompt */
    for (int64_t t = 5; t < 8; t++)
        ck_assert_int_eq(tg_generator_feed(gen, ids + t, 1), TG_OK);
    double got[29], bf[29], f32[29], d_ref = 0, d_f32 = 0, d_gen = 0;
    const float *lg = tg_tensor_data(tg_generator_logits(gen));
    for (int v = 0; v < 29; v++)
        got[v] = lg[v];
    lm_logits(ctx, &m, ids, 8, TG_PRECISION_BF16, bf);
    lm_logits(ctx, &m, ids, 8, TG_PRECISION_F32, f32);
    for (int v = 0; v < 29; v++) {
        d_ref = fmax(d_ref, fabs(got[v] - bf[v]));
        d_f32 = fmax(d_f32, fabs(bf[v] - f32[v]));
        d_gen = fmax(d_gen, fabs(got[v] - f32[v]));
    }
    ck_assert_msg(d_ref < 0.02, "generator vs graph at bf16: %g", d_ref);
    ck_assert_msg(d_gen > 1e-4, "generator at bf16 vs f32: %g (no rounding?)", d_gen);
    ck_assert_msg(d_f32 > 1e-4 && d_f32 < 0.2, "bf16 vs f32 logits: %g", d_f32);
    tg_generator_free(gen);
    tu_ctx_free(ctx);

    /* an f64 model refuses bf16 */
    ctx = tu_ctx_new();
    ck_assert_int_eq(tg_transformer_init(ctx, &m, TG_F64, &mc), TG_OK);
    gen = tg_generator_new(ctx, &m, 1);
    ck_assert_ptr_nonnull(gen);
    ck_assert_int_eq(tg_generator_set_precision(gen, TG_PRECISION_BF16), TG_ERR_DTYPE);
    tu_assert_error(ctx, TG_ERR_DTYPE, "bf16 precision is for f32 models");
    tg_generator_free(gen);
    tu_ctx_free(ctx);
}
END_TEST

static Suite *precision_suite(void)
{
    Suite *s = suite_create("precision");
    TCase *tc = tcase_create("precision");
    tcase_add_checked_fixture(tc, NULL, tu_ctx_teardown);
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, dense_bf16);
    tcase_add_test(tc, matmul_bf16);
    tcase_add_test(tc, flash_attention_bf16);
    tcase_add_test(tc, threads_bitwise_bf16);
    tcase_add_test(tc, refused);
    tcase_add_test(tc, f32_default_unchanged);
    tcase_add_test(tc, generator_bf16);
    suite_add_tcase(s, tc);
    return s;
}

int main(void) { return tu_run(precision_suite()); }
