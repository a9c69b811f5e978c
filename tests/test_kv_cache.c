/*
 * test_kv_cache.c - incremental decoding through the KV cache: the
 * kv_attention op against the fused attention on the whole sequence, the generator's logits
 * against tg_transformer_forward() at every step of prefill + decode (1e-5 relative in f32,
 * 1e-12 in f64) with identical greedy tokens, bitwise identity across 1, 2 and 3 threads, the
 * wrap at max_seq_len, errors, flat memory over many steps, and `tgrad sample` with and
 * without --no-cache.
 */
#include "testutil.h"
#include "tgrad_train.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- helpers ------------------------------------------------------------------------------ */

typedef struct {
    tg_pos_kind pos;
    bool norm_first, gelu, tie, unfused;
    int64_t B, H, layers;
} model_case;

static const model_case cases[] = {
    {TG_POS_LEARNED, true, false, false, false, 2, 2, 2},
    {TG_POS_SINUSOIDAL, false, true, false, false, 1, 4, 2},
    {TG_POS_LEARNED, false, false, true, true, 3, 1, 1},
    {TG_POS_SINUSOIDAL, true, true, true, false, 2, 2, 3},
};
#define N_CASES ((int)(sizeof cases / sizeof cases[0]))

static tg_transformer_config small_config(const model_case *c, int64_t L, int64_t D)
{
    tg_transformer_config mc;
    memset(&mc, 0, sizeof mc);
    mc.vocab_size = 13;
    mc.max_seq_len = L;
    mc.n_layers = c->layers;
    mc.layer = tg_encoder_config_default(D, c->H);
    mc.layer.d_ff = 2 * D;
    mc.layer.norm_first = c->norm_first;
    mc.layer.activation = c->gelu ? TG_ACT_GELU : TG_ACT_RELU;
    mc.pos = c->pos;
    mc.causal = true;
    mc.tie_weights = c->tie;
    return mc;
}

/* The uncached reference: tg_transformer_forward on ids (B, T) (row stride ld), the logits of
 * position T - 1 into out (B, V). Graph built and released (mark / rewind). */
static void reference(tg_ctx *ctx, const tg_transformer *m, int64_t B, const int32_t *ids,
                      int64_t ld, int64_t T, double *out)
{
    tg_mark mk = tg_ctx_mark(ctx);
    int64_t V = m->cfg.vocab_size;
    tg_tensor *x = tg_input(ctx, TG_I32, TG_DIMS(B, T), "ref.ids");
    int32_t *buf = malloc(sizeof(int32_t) * (size_t)(B * T));
    for (int64_t b = 0; b < B; b++)
        memcpy(buf + b * T, ids + b * ld, sizeof(int32_t) * (size_t)T);
    ck_assert_int_eq(tg_tensor_set_data(x, buf, TG_I32, (size_t)(B * T)), TG_OK);
    free(buf);
    tg_tensor *lg = tg_transformer_forward(ctx, m, x, NULL);
    tg_graph_opts go = {.no_grad = true};
    tg_graph *g = tg_graph_new_opts(ctx, &lg, 1, &go);
    ck_assert_msg(g != NULL, "%s", tg_ctx_message(ctx));
    ck_assert_int_eq(tg_graph_forward(g), TG_OK);
    for (int64_t b = 0; b < B; b++)
        for (int64_t v = 0; v < V; v++)
            out[b * V + v] = tg_get(lg, (b * T + T - 1) * V + v);
    ck_assert_int_eq(tg_ctx_rewind(ctx, mk), TG_OK);
}

/* ---- the op against the fused attention ------------------------------------------------- */

/* kv_attention fed in chunks (sizes @p chunks) equals flash_attention (causal) on the whole
 * sequence, row for row; caches hold every key/value afterwards. */
START_TEST(test_op_matches_flash)
{
    tg_dtype dt = tu_dtypes[_i];
    double tol = dt == TG_F64 ? 1e-13 : 2e-6;
    int64_t B = 2, H = 3, T = 11, L = 13, dk = 5, dv = 4;
    int64_t chunks[] = {4, 1, 1, 3, 2};
    tg_ctx *ctx = tu_ctx_new();
    tg_ctx_seed(ctx, 7);
    tg_tensor *Q = tu_input(ctx, dt, TG_DIMS(B, H, T, dk), "Q", -1, 1);
    tg_tensor *K = tu_input(ctx, dt, TG_DIMS(B, H, T, dk), "K", -1, 1);
    tg_tensor *Vv = tu_input(ctx, dt, TG_DIMS(B, H, T, dv), "V", -1, 1);
    tg_tensor *ref = tg_flash_attention(ctx, Q, K, Vv, NULL, TG_MASK_BLOCK, NULL, true, 0);
    tg_graph *gr = tu_fwd(ctx, ref);
    ck_assert_ptr_nonnull(gr);
    tg_tensor *kc = tg_input(ctx, dt, TG_DIMS(B, H, dk, L), "kc");
    tg_tensor *vc = tg_input(ctx, dt, TG_DIMS(B, H, L, dv), "vc");
    int64_t start = 0;
    for (size_t c = 0; c < sizeof chunks / sizeof chunks[0]; c++) {
        int64_t n = chunks[c];
        tg_mark mk = tg_ctx_mark(ctx);
        tg_tensor *q = tg_narrow(ctx, Q, 2, start, n), *k = tg_narrow(ctx, K, 2, start, n);
        tg_tensor *v = tg_narrow(ctx, Vv, 2, start, n);
        tg_tensor *pos = tg_input(ctx, TG_I32, TG_DIMS(1), "pos");
        int32_t p = (int32_t)start;
        tg_tensor_set_data(pos, &p, TG_I32, 1);
        tg_tensor *y = tg_kv_attention(ctx, q, k, v, kc, vc, pos, 0);
        ck_assert_msg(y != NULL, "%s", tg_ctx_message(ctx));
        EXPECT_SHAPE(y, B, H, n, dv);
        tg_graph_opts go = {.no_grad = true};
        tg_graph *g = tg_graph_new_opts(ctx, &y, 1, &go);
        ck_assert_msg(g != NULL, "%s", tg_ctx_message(ctx));
        ck_assert_int_eq(tg_graph_forward(g), TG_OK);
        for (int64_t b = 0; b < B; b++)
            for (int64_t h = 0; h < H; h++)
                for (int64_t i = 0; i < n; i++)
                    for (int64_t c2 = 0; c2 < dv; c2++) {
                        double got = tg_get(y, ((b * H + h) * n + i) * dv + c2);
                        double want = tg_get(ref, ((b * H + h) * T + start + i) * dv + c2);
                        ck_assert_msg(fabs(got - want) <= tol, "chunk %zu (b %lld h %lld i "
                                      "%lld): %.17g vs %.17g", c, (long long)b, (long long)h,
                                      (long long)i, got, want);
                    }
        ck_assert_int_eq(tg_ctx_rewind(ctx, mk), TG_OK);
        start += n;
    }
    /* the caches hold the keys (transposed) and values of every position fed */
    for (int64_t b = 0; b < B; b++)
        for (int64_t h = 0; h < H; h++)
            for (int64_t t = 0; t < T; t++) {
                for (int64_t c = 0; c < dk; c++)
                    ck_assert(tg_get(kc, ((b * H + h) * dk + c) * L + t) ==
                              tg_get(K, ((b * H + h) * T + t) * dk + c));
                for (int64_t c = 0; c < dv; c++)
                    ck_assert(tg_get(vc, ((b * H + h) * L + t) * dv + c) ==
                              tg_get(Vv, ((b * H + h) * T + t) * dv + c));
            }
    tu_ctx_free(ctx);
}
END_TEST

/* ---- dense at a few rows (the GEMV path of a decoding step) ------------------------------- */

/* dense / dense_act with 1..6 rows (the GEMV below TG__GEMV_MAX_ROWS + 1, the GEMM above)
 * against a long-double loop: K not a multiple of 16, N not a multiple of 4, with and without
 * bias, each activation; GELU's saved pre-activation feeds a correct backward. */
START_TEST(test_dense_few_rows)
{
    tg_dtype dt = tu_dtypes[_i];
    double tol = dt == TG_F64 ? 1e-13 : 2e-6;
    int64_t K = 37, N = 11;
    for (int64_t M = 1; M <= 6; M++)
        for (int act = 0; act < 3; act++)
            for (int hb = 0; hb < 2; hb++) {
                tg_ctx *ctx = tu_ctx_new();
                tg_ctx_seed(ctx, (uint64_t)(M * 10 + act));
                tg_tensor *x = tu_input(ctx, dt, TG_DIMS(M, K), "x", -1, 1);
                tg_tensor *w = tu_input(ctx, dt, TG_DIMS(N, K), "w", -1, 1);
                tg_tensor *b = hb ? tu_input(ctx, dt, TG_DIMS(N), "b", -1, 1) : NULL;
                tg_tensor *y = act == 0 ? tg_dense(ctx, x, w, b)
                                        : tg_dense_act(ctx, x, w, b,
                                                       act == 1 ? TG_ACT_RELU : TG_ACT_GELU);
                ck_assert_msg(y != NULL, "%s", tg_ctx_message(ctx));
                tg_graph *g = tu_fwd(ctx, y);
                ck_assert_ptr_nonnull(g);
                for (int64_t r = 0; r < M; r++)
                    for (int64_t j = 0; j < N; j++) {
                        long double z = hb ? tg_get(b, j) : 0;
                        for (int64_t k = 0; k < K; k++)
                            z += (long double)tg_get(x, r * K + k) * tg_get(w, j * K + k);
                        double want = (double)z;
                        if (act == 1)
                            want = want > 0 ? want : 0;
                        else if (act == 2)
                            want = 0.5 * want * (1.0 + erf(want / sqrt(2.0)));
                        double got = tg_get(y, r * N + j);
                        ck_assert_msg(fabs(got - want) <= tol * (1 + fabs(want)),
                                      "M %lld act %d bias %d [%lld, %lld]: %.17g vs %.17g",
                                      (long long)M, act, hb, (long long)r, (long long)j, got,
                                      want);
                    }
                if (dt == TG_F64 && act == 2)
                    tu_assert_gradcheck(ctx, y); /* backward reads the saved z */
                tu_ctx_free(ctx);
            }
}
END_TEST

/* ---- the generator against the uncached forward ---------------------------------------- */

/* Prefill P tokens, then greedy decoding one token at a time up to max_seq_len: the logits
 * match the uncached forward on the whole sequence at every step, and the greedy tokens of the
 * two agree. Loop index: case * 2 + dtype. */
START_TEST(test_generator_matches_forward)
{
    const model_case *c = &cases[_i / 2];
    tg_dtype dt = tu_dtypes[_i % 2];
    double tol = dt == TG_F64 ? 1e-12 : 1e-5;
    int64_t L = 12, B = c->B, P = 5;
    tg_ctx *ctx = tu_ctx_new();
    tg_ctx_seed(ctx, 100 + (uint64_t)_i);
    tg_ctx_set_training(ctx, false);
    if (c->unfused)
        tg_ctx_set_fusion(ctx, false);
    tg_transformer m;
    tg_transformer_config mc = small_config(c, L, 8 * c->H);
    ck_assert_int_eq(tg_transformer_init(ctx, &m, dt, &mc), TG_OK);
    int64_t V = mc.vocab_size;
    tg_generator *gen = tg_generator_new(ctx, &m, B);
    ck_assert_msg(gen != NULL, "%s", tg_ctx_message(ctx));
    ck_assert_int_eq(tg_generator_length(gen), 0);
    int32_t ids[4 * 12];
    for (int64_t b = 0; b < B; b++)
        for (int64_t t = 0; t < P; t++)
            ids[b * L + t] = (int32_t)((b * 5 + t * 7 + 3) % V);
    int32_t prompt[4 * 12];
    for (int64_t b = 0; b < B; b++)
        memcpy(prompt + b * P, ids + b * L, sizeof(int32_t) * (size_t)P);
    ck_assert_int_eq(tg_generator_feed(gen, prompt, P), TG_OK);
    double got[4 * 13], want[4 * 13], worst = 0;
    for (int64_t T = P; T <= L; T++) {
        ck_assert_int_eq(tg_generator_length(gen), T);
        tu_generator_logits(gen, B * V, got);
        reference(ctx, &m, B, ids, L, T, want);
        double e = tu_rel_err(got, want, B * V);
        worst = e > worst ? e : worst;
        ck_assert_msg(e <= tol, "case %d %s, length %lld: relative error %.3g > %.0e", _i / 2,
                      tg_dtype_str(dt), (long long)T, e, tol);
        if (T == L)
            break;
        int32_t next[4];
        for (int64_t b = 0; b < B; b++) {
            next[b] = (int32_t)tu_argmax(got + b * V, V);
            ck_assert_int_eq(next[b], tu_argmax(want + b * V, V)); /* greedy tokens agree */
            ids[b * L + T] = next[b];
        }
        ck_assert_int_eq(tg_generator_feed(gen, next, 1), TG_OK);
    }
    (void)worst;
    tg_generator_free(gen);
    tg_generator_free(gen); /* a second call is a no-op */
    ck_assert_ptr_null(tg_generator_logits(gen));
    /* feeding a freed generator fails, and the context says why (a run-time error) */
    int32_t one[4] = {1, 1, 1, 1};
    ck_assert_int_eq(tg_generator_feed(gen, one, 1), TG_ERR_ARG);
    tu_assert_error(ctx, TG_ERR_ARG, "tg_generator_feed: the generator was freed");
    ck_assert_int_eq(tg_generator_set_source(gen, one, 1), TG_ERR_ARG);
    tu_assert_error(ctx, TG_ERR_ARG, "tg_generator_set_source: the generator was freed");
    ck_assert_ptr_nonnull(tg_input(ctx, TG_F32, TG_DIMS(2), "after"));
    ck_assert_ptr_nonnull(tg_scale(ctx, tg_input(ctx, TG_F32, TG_DIMS(2), "z"), 2));
    tu_ctx_free(ctx);
}
END_TEST

/* At max_seq_len the generator keeps the last max(1, L/2) tokens and prefills them again: the
 * logits are those of the uncached forward on those tokens. Covers a step past L, a multi-token
 * feed past L, a prompt longer than L, and reset. */
START_TEST(test_wrap_at_max_len)
{
    tg_dtype dt = tu_dtypes[_i];
    double tol = dt == TG_F64 ? 1e-12 : 1e-5;
    int64_t L = 9, h = 4, B = 2;
    tg_ctx *ctx = tu_ctx_new();
    tg_ctx_seed(ctx, 5);
    tg_transformer m;
    tg_transformer_config mc = small_config(&cases[0], L, 16);
    ck_assert_int_eq(tg_transformer_init(ctx, &m, dt, &mc), TG_OK);
    int64_t V = mc.vocab_size;
    tg_generator *gen = tg_generator_new(ctx, &m, B);
    ck_assert_msg(gen != NULL, "%s", tg_ctx_message(ctx));
    /* the whole stream of each row, and where the context starts in it */
    int32_t stream[2][64];
    int64_t len = 0, ctx_start = 0;
    double got[2 * 13], want[2 * 13];
    int32_t win[2 * 64];
    /* feeds: 7 (prompt), 1, 1 (reaches L), 1 (wraps: 4), 3, 1, 1 (reach 9), 3 (wraps) */
    int64_t feeds[] = {7, 1, 1, 1, 3, 1, 1, 3};
    for (size_t f = 0; f < sizeof feeds / sizeof feeds[0]; f++) {
        int64_t n = feeds[f];
        int32_t in[2 * 8];
        for (int64_t b = 0; b < B; b++)
            for (int64_t i = 0; i < n; i++) {
                in[b * n + i] = (int32_t)((len + i) * 5 + b * 3 + 1) % (int32_t)V;
                stream[b][len + i] = in[b * n + i];
            }
        ck_assert_int_eq(tg_generator_feed(gen, in, n), TG_OK);
        int64_t clen = len - ctx_start + n;
        len += n;
        if (clen > L) {
            ctx_start = len - h;
            clen = h;
        }
        ck_assert_int_eq(tg_generator_length(gen), clen);
        for (int64_t b = 0; b < B; b++)
            memcpy(win + b * 64, stream[b] + ctx_start, sizeof(int32_t) * (size_t)clen);
        tu_generator_logits(gen, B * V, got);
        reference(ctx, &m, B, win, 64, clen, want);
        double e = tu_rel_err(got, want, B * V);
        ck_assert_msg(e <= tol, "feed %zu (n %lld, length %lld): relative error %.3g", f,
                      (long long)n, (long long)clen, e);
    }
    /* a prompt longer than max_seq_len after reset: its last h tokens */
    tg_generator_reset(gen);
    ck_assert_int_eq(tg_generator_length(gen), 0);
    int32_t longp[2 * 11];
    for (int64_t b = 0; b < B; b++)
        for (int64_t i = 0; i < 11; i++)
            longp[b * 11 + i] = (int32_t)((i * 3 + b) % V);
    ck_assert_int_eq(tg_generator_feed(gen, longp, 11), TG_OK);
    ck_assert_int_eq(tg_generator_length(gen), h);
    for (int64_t b = 0; b < B; b++)
        memcpy(win + b * 64, longp + b * 11 + 11 - h, sizeof(int32_t) * (size_t)h);
    tu_generator_logits(gen, B * V, got);
    reference(ctx, &m, B, win, 64, h, want);
    ck_assert(tu_rel_err(got, want, B * V) <= tol);
    tu_ctx_free(ctx);
}
END_TEST

/* A model of max_seq_len 1 and 2 wraps to 1 token. */
START_TEST(test_wrap_tiny)
{
    for (int64_t L = 1; L <= 2; L++) {
        tg_ctx *ctx = tu_ctx_new();
        tg_transformer m;
        tg_transformer_config mc = small_config(&cases[1], L, 8);
        ck_assert_int_eq(tg_transformer_init(ctx, &m, TG_F64, &mc), TG_OK);
        tg_generator *gen = tg_generator_new(ctx, &m, 1);
        ck_assert_msg(gen != NULL, "%s", tg_ctx_message(ctx));
        double got[13], want[13];
        for (int32_t t = 0; t < 5; t++) {
            ck_assert_int_eq(tg_generator_feed(gen, &t, 1), TG_OK);
            int64_t len = tg_generator_length(gen);
            ck_assert_int_eq(len, L == 1 ? 1 : (t == 0 ? 1 : (t % 2 ? 2 : 1)));
            tu_generator_logits(gen, 13, got);
            int32_t w[2] = {len == 2 ? t - 1 : t, t};
            reference(ctx, &m, 1, len == 2 ? w : &t, 2, len, want);
            ck_assert(tu_rel_err(got, want, 13) <= 1e-12);
        }
        tu_ctx_free(ctx);
    }
}
END_TEST

/* ---- threads -------------------------------------------------------------------------------- */

/* Prefill 24 then 8 steps with 1, 2 and 3 threads: every logit bitwise identical. The shapes
 * are large enough for kv_attention's and the dense layers' parallel paths. */
static void run_threads(tg_dtype dt, int nt, double *out, int64_t n_out)
{
    tg_ctx *ctx = tu_ctx_new();
    tg_ctx_seed(ctx, 42);
    tg_ctx_set_threads(ctx, nt);
    int64_t L = 40, B = 2, P = tu_big(24, 6), steps = tu_big(8, 2);
    model_case c = {TG_POS_LEARNED, true, false, false, false, B, 4, 2};
    tg_transformer m;
    tg_transformer_config mc = small_config(&c, L, 64);
    mc.vocab_size = 50;
    ck_assert_int_eq(tg_transformer_init(ctx, &m, dt, &mc), TG_OK);
    tg_generator *gen = tg_generator_new(ctx, &m, B);
    ck_assert_msg(gen != NULL, "%s", tg_ctx_message(ctx));
    int32_t prompt[2 * 24];
    for (int64_t i = 0; i < B * P; i++)
        prompt[i] = (int32_t)((i * 11 + 5) % 50);
    ck_assert_int_eq(tg_generator_feed(gen, prompt, P), TG_OK);
    int64_t k = 0, V = 50;
    for (int64_t s = 0; s <= steps; s++) {
        tg_tensor *lg = tg_generator_logits(gen);
        ck_assert_int_eq(tg_tensor_get_data(lg, out + k, TG_F64, (size_t)(B * V)), TG_OK);
        k += B * V;
        int32_t next[2] = {(int32_t)((s * 7) % V), (int32_t)((s * 13 + 1) % V)};
        ck_assert_int_eq(tg_generator_feed(gen, next, 1), TG_OK);
    }
    ck_assert_int_le(k, n_out);
    tu_ctx_free(ctx);
}

START_TEST(test_threads_bitwise)
{
    tg_dtype dt = tu_dtypes[_i];
    enum { N = 2 * 50 * 9 };
    static double r[3][N];
    memset(r, 0, sizeof r);
    for (int t = 0; t < 3; t++)
        run_threads(dt, t + 1, r[t], N);
    ck_assert_msg(memcmp(r[0], r[1], sizeof r[0]) == 0, "1 vs 2 threads differ");
    ck_assert_msg(memcmp(r[0], r[2], sizeof r[0]) == 0, "1 vs 3 threads differ");
}
END_TEST

/* ---- errors --------------------------------------------------------------------------------- */

START_TEST(test_op_errors)
{
    tg_ctx *ctx = tu_ctx_new();
    tg_dtype dt = TG_F64;
    int64_t B = 1, H = 2, L = 4, d = 3;
    tg_tensor *q = tu_input(ctx, dt, TG_DIMS(B, H, 2, d), "q", -1, 1);
    tg_tensor *k = tu_input(ctx, dt, TG_DIMS(B, H, 2, d), "k", -1, 1);
    tg_tensor *v = tu_input(ctx, dt, TG_DIMS(B, H, 2, d), "v", -1, 1);
    tg_tensor *kc = tg_input(ctx, dt, TG_DIMS(B, H, d, L), "kc");
    tg_tensor *vc = tg_input(ctx, dt, TG_DIMS(B, H, L, d), "vc");
    tg_tensor *pos = tg_input(ctx, TG_I32, TG_DIMS(1), "pos");
    /* shapes: the key cache not transposed */
    tg_tensor *bad = tg_input(ctx, dt, TG_DIMS(B, H, L, d), "kc_rows");
    ck_assert_ptr_null(tg_kv_attention(ctx, q, k, v, bad, vc, pos, 0));
    tu_assert_error(ctx, TG_ERR_SHAPE, "k_cache (B, H, d_k, max_len)");
    tg_ctx_clear_error(ctx);
    /* pos must be i32 with one element */
    tg_tensor *fpos = tg_input(ctx, dt, TG_DIMS(1), "fpos");
    ck_assert_ptr_null(tg_kv_attention(ctx, q, k, v, kc, vc, fpos, 0));
    tu_assert_error(ctx, TG_ERR_DTYPE, "pos");
    tg_ctx_clear_error(ctx);
    tg_tensor *pos2 = tg_input(ctx, TG_I32, TG_DIMS(2), "pos2");
    ck_assert_ptr_null(tg_kv_attention(ctx, q, k, v, kc, vc, pos2, 0));
    tu_assert_error(ctx, TG_ERR_SHAPE, "one element");
    tg_ctx_clear_error(ctx);
    /* the cache must be a leaf (the op writes it) */
    tg_tensor *opc = tg_scale(ctx, kc, 1.0);
    ck_assert_ptr_null(tg_kv_attention(ctx, q, k, v, opc, vc, pos, 0));
    tu_assert_error(ctx, TG_ERR_ARG, "contiguous leaf");
    tg_ctx_clear_error(ctx);
    /* a gradient through the op: refused when the graph is built */
    tg_tensor *y = tg_kv_attention(ctx, q, k, v, kc, vc, pos, 0);
    ck_assert_msg(y != NULL, "%s", tg_ctx_message(ctx));
    ck_assert(tg_tensor_requires_grad(y));
    tg_tensor *loss = tg_sum_all(ctx, y);
    ck_assert_ptr_null(tg_graph_new(ctx, &loss, 1));
    tu_assert_error(ctx, TG_ERR_NOGRAD, "op 'kv_attention'");
    ck_assert(!tg_op_has_backward(tg_op_find("kv_attention")));
    tg_ctx_clear_error(ctx);
    /* pos past the cache: a run error, nothing written; a good pos then runs */
    tg_graph_opts go = {.no_grad = true};
    tg_graph *g = tg_graph_new_opts(ctx, &y, 1, &go);
    ck_assert_msg(g != NULL, "%s", tg_ctx_message(ctx));
    int32_t p = 3; /* 3 + 2 > 4 */
    tg_tensor_set_data(pos, &p, TG_I32, 1);
    ck_assert_int_eq(tg_graph_forward(g), TG_ERR_ARG);
    tu_assert_error(ctx, TG_ERR_ARG, "do not fit in the cache of max_len 4");
    for (int64_t i = 0; i < tg_tensor_numel(kc); i++)
        ck_assert(tg_get(kc, i) == 0 && tg_get(vc, i) == 0);
    p = -1;
    tg_tensor_set_data(pos, &p, TG_I32, 1);
    ck_assert_int_eq(tg_graph_forward(g), TG_ERR_ARG);
    p = 2;
    tg_tensor_set_data(pos, &p, TG_I32, 1);
    ck_assert_int_eq(tg_graph_forward(g), TG_OK);
    ck_assert_int_eq(tg_ctx_status(ctx), TG_OK);
    tu_ctx_free(ctx);
}
END_TEST

START_TEST(test_generator_errors)
{
    tg_ctx *ctx = tu_ctx_new();
    tg_transformer m;
    tg_transformer_config mc = small_config(&cases[0], 8, 8);
    ck_assert_int_eq(tg_transformer_init(ctx, &m, TG_F32, &mc), TG_OK);
    ck_assert_ptr_null(tg_generator_new(NULL, &m, 1));
    ck_assert_ptr_null(tg_generator_new(ctx, NULL, 1));
    tu_assert_error(ctx, TG_ERR_ARG, "not initialised");
    tg_ctx_clear_error(ctx);
    ck_assert_ptr_null(tg_generator_new(ctx, &m, 0));
    tu_assert_error(ctx, TG_ERR_ARG, "batch 0");
    tg_ctx_clear_error(ctx);
    /* an encoder classifier does not generate */
    tg_transformer enc = m;
    enc.cfg.causal = false;
    size_t before = tg_ctx_bytes(ctx);
    ck_assert_ptr_null(tg_generator_new(ctx, &enc, 1));
    tu_assert_error(ctx, TG_ERR_ARG, "not causal");
    ck_assert_uint_eq(tg_ctx_bytes(ctx), before);
    tg_ctx_clear_error(ctx);
    /* a failed allocation leaves nothing behind */
    tg_ctx_set_memory_limit(ctx, before + 1000);
    ck_assert_ptr_null(tg_generator_new(ctx, &m, 2));
    ck_assert_int_eq(tg_ctx_status(ctx), TG_ERR_NOMEM);
    ck_assert_uint_eq(tg_ctx_bytes(ctx), before);
    tg_ctx_clear_error(ctx);
    tg_ctx_set_memory_limit(ctx, 0);

    tg_generator *gen = tg_generator_new(ctx, &m, 2);
    ck_assert_msg(gen != NULL, "%s", tg_ctx_message(ctx));
    int32_t ids[4] = {1, 2, 3, 4};
    ck_assert_int_eq(tg_generator_feed(gen, ids, 2), TG_OK);
    int32_t bad[4] = {1, 2, 13, 0}; /* row 1, position 0 is out of range */
    ck_assert_int_eq(tg_generator_feed(gen, bad, 2), TG_ERR_ARG);
    tu_assert_error(ctx, TG_ERR_ARG, "ids[1][0] = 13 is not a token id in [0, 13)");
    ck_assert_int_eq(tg_generator_length(gen), 2); /* nothing changed */
    ck_assert_int_eq(tg_generator_feed(gen, ids, 0), TG_ERR_ARG);
    tu_assert_error(ctx, TG_ERR_ARG, "n = 0");
    ck_assert_int_eq(tg_generator_feed(gen, NULL, 1), TG_ERR_ARG);
    ck_assert_int_eq(tg_generator_feed(NULL, ids, 1), TG_ERR_ARG);
    ck_assert_int_eq(tg_generator_length(gen), 2);
    /* run errors do not stick: the next feed works */
    ck_assert_int_eq(tg_generator_feed(gen, ids, 1), TG_OK);
    ck_assert_int_eq(tg_generator_length(gen), 3);
    tg_generator_free(gen);
    ck_assert_int_eq(tg_generator_feed(gen, ids, 1), TG_ERR_ARG);
    ck_assert_int_eq(tg_generator_length(gen), 0);
    tg_generator_free(NULL);
    tg_generator_reset(NULL);
    ck_assert_int_eq(tg_generator_length(NULL), 0);
    ck_assert_ptr_null(tg_generator_logits(NULL));
    tu_ctx_free(ctx);
}
END_TEST

/* ---- memory --------------------------------------------------------------------------------- */

/* Many steps, several wraps and prompts of new lengths: the context's bytes never change after
 * tg_generator_new. */
START_TEST(test_memory_flat)
{
    tg_ctx *ctx = tu_ctx_new();
    tg_transformer m;
    tg_transformer_config mc = small_config(&cases[0], 16, 16);
    ck_assert_int_eq(tg_transformer_init(ctx, &m, TG_F32, &mc), TG_OK);
    tg_generator *gen = tg_generator_new(ctx, &m, 2);
    ck_assert_msg(gen != NULL, "%s", tg_ctx_message(ctx));
    size_t bytes = tg_ctx_bytes(ctx);
    int64_t steps = tu_big(400, 60);
    for (int64_t s = 0; s < steps; s++) {
        int32_t ids[2 * 7];
        int64_t n = s % 50 == 0 ? 1 + (s / 50) % 7 : 1; /* new prompt lengths now and then */
        if (s % 50 == 0)
            tg_generator_reset(gen);
        for (int64_t i = 0; i < 2 * n; i++)
            ids[i] = (int32_t)((s + i) % 13);
        ck_assert_int_eq(tg_generator_feed(gen, ids, n), TG_OK);
        ck_assert_msg(tg_ctx_bytes(ctx) == bytes, "step %lld: %zu bytes, %zu at the start",
                      (long long)s, tg_ctx_bytes(ctx), bytes);
    }
    tu_ctx_free(ctx);
}
END_TEST

/* ---- tgrad sample --------------------------------------------------------------------------- */

static char dir[256];
static void cli_setup(void) { tu_mkdtemp(dir, sizeof dir, "kv_cache"); }
static void cli_teardown(void) { tu_rm_tree(dir); }

static char *sample_out(const char *args)
{
    char cmd[512];
    snprintf(cmd, sizeof cmd, "sample --checkpoint t.ckpt %s", args);
    int rc = tu_run_tgrad(dir, cmd, 120, NULL);
    char *err = tu_slurp_in(dir, "err.txt", NULL);
    ck_assert_msg(rc == 0, "'%s' exited %d: %s", cmd, rc, err ? err : "");
    free(err);
    char *out = tu_slurp_in(dir, "out.txt", NULL);
    ck_assert_ptr_nonnull(out);
    return out;
}

/* A tiny model trained in the test (seq_len 16): greedy decoding with and without the cache
 * prints the same text within one window (prompt + tokens <= 16), at --top-k 1 and at
 * temperature 0; with the cache, generation past the window goes on (wraps) and stays valid. */
START_TEST(test_sample_cli)
{
    tu_write_corpus(dir, "c.txt", 1500);
    int rc = tu_run_tgrad(dir, "train --text c.txt --steps 40 --d-model 16 --heads 2 --layers 1 "
                               "--seq-len 16 --batch 8 --eval-every 40 --checkpoint t.ckpt "
                               "--quiet", 120, NULL);
    char *err = tu_slurp_in(dir, "err.txt", NULL);
    ck_assert_msg(rc == 0, "train exited %d: %s", rc, err ? err : "");
    free(err);
    const char *modes[] = {"--top-k 1", "--temperature 0"};
    for (int i = 0; i < 2; i++) {
        char a[128], b[128];
        snprintf(a, sizeof a, "--prompt 'the ' %s --tokens 12", modes[i]);
        snprintf(b, sizeof b, "--prompt 'the ' %s --tokens 12 --no-cache", modes[i]);
        char *x = sample_out(a), *y = sample_out(b);
        ck_assert_msg(strcmp(x, y) == 0, "%s: cached '%s' vs --no-cache '%s'", modes[i], x, y);
        ck_assert_int_eq((int)strlen(x), 4 + 12 + 1);
        free(x);
        free(y);
    }
    /* past the window (16): 60 tokens, several wraps */
    char *z = sample_out("--prompt 'the ' --tokens 60 --seed 3");
    ck_assert_int_eq((int)strlen(z), 4 + 60 + 1);
    free(z);
    z = sample_out("--tokens 40 --no-cache --seed 3");
    ck_assert_int_eq((int)strlen(z), 40 + 1);
    free(z);
}
END_TEST

static Suite *kv_suite(void)
{
    Suite *s = suite_create("kv_cache");
    TCase *tc = tu_tcase(s, "op", 60);
    tcase_add_loop_test(tc, test_op_matches_flash, 0, 2);
    tcase_add_test(tc, test_op_errors);
    tcase_add_loop_test(tc, test_dense_few_rows, 0, 2);
    tc = tu_tcase(s, "generator", 120);
    tcase_add_loop_test(tc, test_generator_matches_forward, 0, 2 * N_CASES);
    tcase_add_loop_test(tc, test_wrap_at_max_len, 0, 2);
    tcase_add_test(tc, test_wrap_tiny);
    tcase_add_test(tc, test_generator_errors);
    tcase_add_test(tc, test_memory_flat);
    tc = tu_tcase(s, "threads", 120);
    tcase_add_loop_test(tc, test_threads_bitwise, 0, 2);
    tc = tcase_create("cli");
    tcase_add_checked_fixture(tc, cli_setup, cli_teardown);
    tcase_set_timeout(tc, 300);
    tcase_add_test(tc, test_sample_cli);
    suite_add_tcase(s, tc);
    return s;
}

int main(void) { return tu_run(kv_suite()); }
