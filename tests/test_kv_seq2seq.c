/*
 * test_kv_seq2seq.c - incremental decoding of the encoder-decoder model (
 * the seq2seq side): tg_generator_set_source() encodes the source once and stores each decoder
 * layer's memory keys and values; each feed then runs the decoder over the new target tokens
 * only (cached self-attention, cross-attention over the stored memory). Checked against
 * tg_transformer_forward_seq2seq() on the whole target prefix at every step (1e-5 relative in
 * f32, 1e-12 in f64) with identical greedy tokens, for post-/pre-norm, relu/gelu,
 * learned/sinusoidal positions, tied heads, the unfused graph, a source shorter than
 * max_seq_len, the wrap at max_seq_len; bitwise identity across 1, 2 and 3 threads; errors;
 * flat memory over many sources.
 */
#include "testutil.h"
#include "tgrad_train.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    tg_pos_kind pos;
    bool norm_first, gelu, tie, unfused;
    int64_t B, H, enc, dec;
} s2s_case;

static const s2s_case cases[] = {
    {TG_POS_LEARNED, true, false, false, false, 2, 2, 2, 2},
    {TG_POS_SINUSOIDAL, false, true, false, false, 1, 4, 1, 2},
    {TG_POS_LEARNED, false, false, true, true, 3, 1, 2, 1},
    {TG_POS_SINUSOIDAL, true, true, true, false, 2, 2, 1, 3},
};
#define N_CASES ((int)(sizeof cases / sizeof cases[0]))
enum { V = 11, BOS = 10 };

static void init_model(tg_ctx *ctx, tg_transformer *m, tg_dtype dt, const s2s_case *c,
                       int64_t L, int64_t D)
{
    tg_transformer_config mc;
    memset(&mc, 0, sizeof mc);
    mc.vocab_size = V;
    mc.max_seq_len = L;
    mc.n_layers = c->enc;
    mc.n_decoder_layers = c->dec;
    mc.layer = tg_encoder_config_default(D, c->H);
    mc.layer.d_ff = 2 * D;
    mc.layer.norm_first = c->norm_first;
    mc.layer.activation = c->gelu ? TG_ACT_GELU : TG_ACT_RELU;
    mc.pos = c->pos;
    mc.tie_weights = c->tie;
    mc.scale_embeddings = c->enc != c->dec; /* sqrt(d_model) scaling in cases 2-4 */
    ck_assert_msg(tg_transformer_init(ctx, m, dt, &mc) == TG_OK, "%s", tg_ctx_message(ctx));
    /* sharper distributions than the default init, so greedy choices are well separated */
    for (int64_t i = 0; i < tg_ctx_n_params(ctx); i++) {
        tg_tensor *p = tg_ctx_param(ctx, i);
        if (tg_tensor_rank(p) == 2)
            tg_fill_normal(p, 0, 0.5);
    }
}

/* The uncached reference: tg_transformer_forward_seq2seq on src (B, S) and the target prefix
 * tgt (B, T) (row stride ld), the logits of target position T - 1 into out (B, V). */
static void reference(tg_ctx *ctx, const tg_transformer *m, int64_t B, const int32_t *src,
                      int64_t S, const int32_t *tgt, int64_t ld, int64_t T, double *out)
{
    tg_mark mk = tg_ctx_mark(ctx);
    tg_tensor *s = tg_input(ctx, TG_I32, TG_DIMS(B, S), "ref.src");
    tg_tensor *t = tg_input(ctx, TG_I32, TG_DIMS(B, T), "ref.tgt");
    int32_t *buf = malloc(sizeof(int32_t) * (size_t)(B * T));
    for (int64_t b = 0; b < B; b++)
        memcpy(buf + b * T, tgt + b * ld, sizeof(int32_t) * (size_t)T);
    ck_assert_int_eq(tg_tensor_set_data(s, src, TG_I32, (size_t)(B * S)), TG_OK);
    ck_assert_int_eq(tg_tensor_set_data(t, buf, TG_I32, (size_t)(B * T)), TG_OK);
    free(buf);
    tg_tensor *lg = tg_transformer_forward_seq2seq(ctx, m, s, t, NULL, NULL);
    tg_graph_opts go = {.no_grad = true};
    tg_graph *g = tg_graph_new_opts(ctx, &lg, 1, &go);
    ck_assert_msg(g != NULL, "%s", tg_ctx_message(ctx));
    ck_assert_int_eq(tg_graph_forward(g), TG_OK);
    for (int64_t b = 0; b < B; b++)
        for (int64_t v = 0; v < V; v++)
            out[b * V + v] = tg_get(lg, (b * T + T - 1) * V + v);
    ck_assert_int_eq(tg_ctx_rewind(ctx, mk), TG_OK);
}

/* For every case and dtype: source lengths L and L - 3; target prefix [BOS, 3 tokens]
 * prefilled, then greedy decoding one token at a time to max_seq_len, then two feeds past it
 * (the wrap). At every feed the cached logits equal the reference on the same prefix, and the
 * greedy token is the same. */
START_TEST(test_cached_matches_uncached)
{
    tg_dtype dt = tu_dtypes[_i];
    double tol = dt == TG_F64 ? 1e-12 : 1e-5;
    const int64_t L = 9, D = 8;
    for (int ci = 0; ci < N_CASES; ci++) {
        const s2s_case *c = &cases[ci];
        tg_ctx *ctx = tu_ctx_new();
        tg_ctx_seed(ctx, 100 + (uint64_t)ci);
        if (c->unfused)
            tg_ctx_set_fusion(ctx, false);
        tg_transformer m;
        init_model(ctx, &m, dt, c, L, D);
        tg_ctx_set_training(ctx, false);
        tg_generator *gen = tg_generator_new(ctx, &m, c->B);
        ck_assert_msg(gen != NULL, "case %d: %s", ci, tg_ctx_message(ctx));
        int64_t B = c->B, ld = L + 2;
        int32_t src[3 * 9], hist[3 * 11], step[3];
        double got[3 * V], want[3 * V];
        for (int si = 0; si < 2; si++) {
            int64_t S = si == 0 ? L : L - 3;
            for (int64_t i = 0; i < B * S; i++)
                src[i] = (int32_t)(tg_rng_u64(ctx) % 10);
            ck_assert_msg(tg_generator_set_source(gen, src, S) == TG_OK, "%s",
                          tg_ctx_message(ctx));
            ck_assert_int_eq(tg_generator_length(gen), 0);
            for (int64_t b = 0; b < B; b++) {
                hist[b * ld] = BOS;
                for (int64_t t = 1; t < 4; t++)
                    hist[b * ld + t] = (int32_t)(tg_rng_u64(ctx) % V);
            }
            int32_t pre[3 * 4];
            for (int64_t b = 0; b < B; b++)
                memcpy(pre + b * 4, hist + b * ld, 4 * sizeof(int32_t));
            ck_assert_int_eq(tg_generator_feed(gen, pre, 4), TG_OK);
            for (int64_t T = 4; T <= L; T++) {
                tu_generator_logits(gen, B * V, got);
                reference(ctx, &m, B, src, S, hist, ld, T, want);
                double e = tu_rel_err(got, want, B * V);
                ck_assert_msg(e <= tol, "case %d %s S %lld T %lld: rel err %g", ci,
                              tg_dtype_str(dt), (long long)S, (long long)T, e);
                for (int64_t b = 0; b < B; b++) {
                    int a = tu_argmax(got + b * V, V), r = tu_argmax(want + b * V, V);
                    ck_assert_msg(a == r, "case %d T %lld row %lld: greedy %d vs %d", ci,
                                  (long long)T, (long long)b, a, r);
                    step[b] = (int32_t)a;
                    hist[b * ld + T] = step[b];
                }
                if (T < L)
                    ck_assert_int_eq(tg_generator_feed(gen, step, 1), TG_OK);
            }
            /* past max_seq_len: the last h = L / 2 tokens are prefilled again */
            ck_assert_int_eq(tg_generator_feed(gen, step, 1), TG_OK);
            int64_t h = L / 2;
            ck_assert_int_eq(tg_generator_length(gen), h);
            int32_t win[3 * 4];
            for (int64_t b = 0; b < B; b++)
                memcpy(win + b * h, hist + b * ld + L + 1 - h, sizeof(int32_t) * (size_t)h);
            tu_generator_logits(gen, B * V, got);
            reference(ctx, &m, B, src, S, win, h, h, want);
            ck_assert_msg(tu_rel_err(got, want, B * V) <= tol, "case %d: after the wrap", ci);
        }
        tu_ctx_free(ctx);
    }
}
END_TEST

/* Greedy decoding with the cache, every logit of every step, for @p threads threads. */
static void decode_all(int threads, tg_dtype dt, double *out, int64_t n_out)
{
    const s2s_case *c = &cases[0];
    const int64_t L = 12, D = 16, B = 3;
    tg_ctx *ctx = tu_ctx_new();
    tg_ctx_seed(ctx, 5);
    tg_ctx_set_threads(ctx, threads);
    tg_transformer m;
    s2s_case cc = *c;
    cc.B = B;
    init_model(ctx, &m, dt, &cc, L, D);
    tg_ctx_set_training(ctx, false);
    tg_generator *gen = tg_generator_new(ctx, &m, B);
    ck_assert_ptr_nonnull(gen);
    int32_t src[3 * 12], tok[3] = {BOS, BOS, BOS};
    for (int64_t i = 0; i < B * L; i++)
        src[i] = (int32_t)((7 * i + 3) % 10);
    ck_assert_int_eq(tg_generator_set_source(gen, src, L), TG_OK);
    int64_t k = 0;
    for (int64_t t = 0; t < L; t++) {
        ck_assert_int_eq(tg_generator_feed(gen, tok, 1), TG_OK);
        ck_assert(k + B * V <= n_out);
        tu_generator_logits(gen, B * V, out + k);
        for (int64_t b = 0; b < B; b++)
            tok[b] = (int32_t)tu_argmax(out + k + b * V, V);
        k += B * V;
    }
    tu_ctx_free(ctx);
}

START_TEST(test_threads_bitwise)
{
    tg_dtype dt = tu_dtypes[_i];
    enum { N = 12 * 3 * V };
    static double a[N], b[N];
    decode_all(1, dt, a, N);
    for (int th = 2; th <= 3; th++) {
        decode_all(th, dt, b, N);
        ck_assert_msg(memcmp(a, b, sizeof a) == 0, "%s: %d threads differ from 1",
                      tg_dtype_str(dt), th);
    }
}
END_TEST

START_TEST(test_errors)
{
    tg_ctx *ctx = tu_ctx_new();
    tg_transformer m;
    init_model(ctx, &m, TG_F32, &cases[0], 6, 8);
    tg_generator *gen = tg_generator_new(ctx, &m, 2);
    ck_assert_ptr_nonnull(gen);
    int32_t ids[12] = {0};
    /* a target before any source */
    ck_assert_int_eq(tg_generator_feed(gen, ids, 1), TG_ERR_STATE);
    tu_assert_error(ctx, TG_ERR_STATE, "tg_generator_set_source");
    tg_ctx_clear_error(ctx);
    ck_assert_int_eq(tg_generator_set_source(gen, ids, 0), TG_ERR_ARG);
    tg_ctx_clear_error(ctx);
    ck_assert_int_eq(tg_generator_set_source(gen, ids, 7), TG_ERR_ARG);
    tu_assert_error(ctx, TG_ERR_ARG, "max_seq_len");
    tg_ctx_clear_error(ctx);
    ck_assert_int_eq(tg_generator_set_source(gen, NULL, 3), TG_ERR_ARG);
    tg_ctx_clear_error(ctx);
    ids[5] = 11;
    ck_assert_int_eq(tg_generator_set_source(gen, ids, 6), TG_ERR_ARG);
    tu_assert_error(ctx, TG_ERR_ARG, "src_ids[0][5] = 11");
    tg_ctx_clear_error(ctx);
    ids[5] = 3;
    ck_assert_int_eq(tg_generator_set_source(gen, ids, 6), TG_OK);
    ck_assert_int_eq(tg_generator_feed(gen, ids, 1), TG_OK);
    ck_assert_int_eq(tg_generator_length(gen), 1);
    /* reset keeps the source */
    tg_generator_reset(gen);
    ck_assert_int_eq(tg_generator_feed(gen, ids, 2), TG_OK);
    tg_generator_free(gen);
    ck_assert_int_eq(tg_generator_set_source(gen, ids, 6), TG_ERR_ARG);
    tg_ctx_clear_error(ctx);
    tu_ctx_free(ctx);
    /* a decoder-only LM has no source */
    ctx = tu_ctx_new();
    tg_transformer lm;
    tg_transformer_config mc;
    memset(&mc, 0, sizeof mc);
    mc.vocab_size = 5;
    mc.max_seq_len = 4;
    mc.n_layers = 1;
    mc.layer = tg_encoder_config_default(8, 2);
    mc.causal = true;
    ck_assert_int_eq(tg_transformer_init(ctx, &lm, TG_F32, &mc), TG_OK);
    gen = tg_generator_new(ctx, &lm, 1);
    ck_assert_ptr_nonnull(gen);
    ck_assert_int_eq(tg_generator_set_source(gen, ids, 2), TG_ERR_ARG);
    tu_assert_error(ctx, TG_ERR_ARG, "encoder-decoder");
    tu_ctx_free(ctx);
}
END_TEST

/* reference() with a source key padding mask: row b's source is src[b S .. b S + len[b] - 1]. */
static void reference_padded(tg_ctx *ctx, const tg_transformer *m, tg_dtype dt, int64_t B,
                             const int32_t *src, int64_t S, const int64_t *len,
                             const int32_t *tgt, int64_t ld, int64_t T, double *out)
{
    tg_mark mk = tg_ctx_mark(ctx);
    tg_tensor *s = tg_input(ctx, TG_I32, TG_DIMS(B, S), "ref.src");
    tg_tensor *t = tg_input(ctx, TG_I32, TG_DIMS(B, T), "ref.tgt");
    tg_tensor *pad = tg_input(ctx, dt, TG_DIMS(B, S), "ref.pad");
    int32_t *buf = malloc(sizeof(int32_t) * (size_t)(B * T));
    for (int64_t b = 0; b < B; b++) {
        memcpy(buf + b * T, tgt + b * ld, sizeof(int32_t) * (size_t)T);
        for (int64_t j = 0; j < S; j++)
            tg_set(pad, b * S + j, j >= len[b] ? 1.0 : 0.0);
    }
    ck_assert_int_eq(tg_tensor_set_data(s, src, TG_I32, (size_t)(B * S)), TG_OK);
    ck_assert_int_eq(tg_tensor_set_data(t, buf, TG_I32, (size_t)(B * T)), TG_OK);
    free(buf);
    tg_tensor *lg = tg_transformer_forward_seq2seq(ctx, m, s, t, pad, NULL);
    tg_graph_opts go = {.no_grad = true};
    tg_graph *g = tg_graph_new_opts(ctx, &lg, 1, &go);
    ck_assert_msg(g != NULL, "%s", tg_ctx_message(ctx));
    ck_assert_int_eq(tg_graph_forward(g), TG_OK);
    for (int64_t b = 0; b < B; b++)
        for (int64_t v = 0; v < V; v++)
            out[b * V + v] = tg_get(lg, (b * T + T - 1) * V + v);
    ck_assert_int_eq(tg_ctx_rewind(ctx, mk), TG_OK);
}

/* Sources of mixed lengths in one batch (tg_generator_set_sources): at every step the cached
 * logits equal tg_transformer_forward_seq2seq with the source key padding mask, for every
 * case (post-/pre-norm, learned/sinusoidal positions) and both widths (max_seq_len: the
 * prebuilt encoder; shorter: one built for the call). Padding holds arbitrary ids. */
START_TEST(test_mixed_lengths)
{
    tg_dtype dt = tu_dtypes[_i];
    double tol = dt == TG_F64 ? 1e-12 : 1e-5;
    const int64_t L = 9, D = 8, B = 3;
    for (int ci = 0; ci < N_CASES; ci++) {
        s2s_case c = cases[ci];
        c.B = B;
        tg_ctx *ctx = tu_ctx_new();
        tg_ctx_seed(ctx, 300 + (uint64_t)ci);
        if (c.unfused)
            tg_ctx_set_fusion(ctx, false);
        tg_transformer m;
        init_model(ctx, &m, dt, &c, L, D);
        tg_ctx_set_training(ctx, false);
        tg_generator *gen = tg_generator_new(ctx, &m, B);
        ck_assert_msg(gen != NULL, "case %d: %s", ci, tg_ctx_message(ctx));
        int32_t src[3 * 9], hist[3 * 9], step[3];
        double got[3 * V], want[3 * V];
        for (int si = 0; si < 2; si++) {
            int64_t S = si == 0 ? L : 6;
            int64_t len[3] = {S, 2, S - 1};
            for (int64_t b = 0; b < B; b++)
                for (int64_t j = 0; j < S; j++)
                    src[b * S + j] = j < len[b] ? (int32_t)(tg_rng_u64(ctx) % 10) : 7;
            ck_assert_msg(tg_generator_set_sources(gen, src, S, len) == TG_OK, "%s",
                          tg_ctx_message(ctx));
            for (int64_t b = 0; b < B; b++)
                step[b] = hist[b * L] = BOS;
            for (int64_t T = 1; T <= L; T++) {
                ck_assert_int_eq(tg_generator_feed(gen, step, 1), TG_OK);
                tu_generator_logits(gen, B * V, got);
                reference_padded(ctx, &m, dt, B, src, S, len, hist, L, T, want);
                double e = tu_rel_err(got, want, B * V);
                ck_assert_msg(e <= tol, "case %d %s S %lld T %lld: rel err %g", ci,
                              tg_dtype_str(dt), (long long)S, (long long)T, e);
                for (int64_t b = 0; T < L && b < B; b++)
                    step[b] = hist[b * L + T] = (int32_t)tu_argmax(got + b * V, V);
            }
        }
        tu_ctx_free(ctx);
    }
}
END_TEST

/* Sources of at most 16 and 32 tokens run step graphs whose cross-attention reads only the
 * first 16 or 32 memory positions (max_seq_len 40): the same logits as the reference. */
START_TEST(test_memory_widths)
{
    tg_dtype dt = tu_dtypes[_i];
    double tol = dt == TG_F64 ? 1e-12 : 1e-5;
    const int64_t L = 40, D = 8, B = 3, T_MAX = 6;
    s2s_case c = cases[1];
    c.B = B;
    tg_ctx *ctx = tu_ctx_new();
    tg_ctx_seed(ctx, 700);
    tg_transformer m;
    init_model(ctx, &m, dt, &c, L, D);
    tg_ctx_set_training(ctx, false);
    tg_generator *gen = tg_generator_new(ctx, &m, B);
    ck_assert_ptr_nonnull(gen);
    static const int64_t widths[4] = {16, 20, 32, 40};
    int32_t src[3 * 40], hist[3 * 40], step[3];
    double got[3 * V], want[3 * V];
    for (int si = 0; si < 4; si++) {
        int64_t S = widths[si];
        int64_t len[3] = {S, 1 + S / 3, S - 1};
        for (int64_t i = 0; i < B * S; i++)
            src[i] = (int32_t)(tg_rng_u64(ctx) % 10);
        ck_assert_int_eq(tg_generator_set_sources(gen, src, S, len), TG_OK);
        for (int64_t b = 0; b < B; b++)
            step[b] = hist[b * L] = BOS;
        for (int64_t T = 1; T <= T_MAX; T++) {
            ck_assert_int_eq(tg_generator_feed(gen, step, 1), TG_OK);
            tu_generator_logits(gen, B * V, got);
            reference_padded(ctx, &m, dt, B, src, S, len, hist, L, T, want);
            ck_assert_msg(tu_rel_err(got, want, B * V) <= tol, "S %lld T %lld", (long long)S,
                          (long long)T);
            for (int64_t b = 0; b < B; b++)
                step[b] = hist[b * L + T] = (int32_t)tu_argmax(got + b * V, V);
        }
    }
    tu_ctx_free(ctx);
}
END_TEST

/* tg_generator_select: rows reordered (repeated, dropped, swapped; sources changing and not)
 * in the middle of decoding; every later step equals the reference on the selected rows'
 * sources and token histories, i.e. decoding them from scratch. */
START_TEST(test_select)
{
    tg_dtype dt = tu_dtypes[_i];
    double tol = dt == TG_F64 ? 1e-12 : 1e-5;
    const int64_t L = 9, D = 8, B = 4;
    static const int32_t sel[3][4] = {{1, 1, 3, 0}, {0, 1, 2, 3}, {3, 2, 2, 2}};
    for (int ci = 0; ci < 2; ci++) {
        s2s_case c = cases[ci];
        tg_ctx *ctx = tu_ctx_new();
        tg_ctx_seed(ctx, 500 + (uint64_t)ci);
        tg_transformer m;
        init_model(ctx, &m, dt, &c, L, D);
        tg_ctx_set_training(ctx, false);
        tg_generator *gen = tg_generator_new(ctx, &m, B);
        ck_assert_ptr_nonnull(gen);
        const int64_t S = 5;
        int32_t src[4 * 5], nsrc[4 * 5], hist[4 * 9], nhist[4 * 9], step[4];
        int64_t len[4] = {5, 3, 1, 4}, nlen[4];
        double got[4 * V], want[4 * V];
        for (int64_t i = 0; i < B * S; i++)
            src[i] = (int32_t)(tg_rng_u64(ctx) % 10);
        /* rows 0 and 1 share a source */
        memcpy(src + S, src, sizeof(int32_t) * S);
        len[1] = len[0];
        ck_assert_int_eq(tg_generator_set_sources(gen, src, S, len), TG_OK);
        for (int64_t b = 0; b < B; b++)
            step[b] = hist[b * L] = BOS;
        int64_t T = 1;
        for (int k = 0; k < 3; k++) {
            for (int r = 0; r < (k == 2 ? 3 : 2); r++, T++) { /* the last select at length 7 */
                ck_assert_int_eq(tg_generator_feed(gen, step, 1), TG_OK);
                tu_generator_logits(gen, B * V, got);
                reference_padded(ctx, &m, dt, B, src, S, len, hist, L, T, want);
                ck_assert_msg(tu_rel_err(got, want, B * V) <= tol, "case %d sel %d T %lld", ci,
                              k, (long long)T);
                for (int64_t b = 0; b < B; b++) /* the second-best token: rows diverge */
                    step[b] = hist[b * L + T] = (int32_t)((tu_argmax(got + b * V, V) + b) % V);
            }
            ck_assert_int_eq(tg_generator_select(gen, sel[k]), TG_OK);
            ck_assert_int_eq(tg_generator_length(gen), T - 1);
            for (int64_t b = 0; b < B; b++) {
                int64_t r = sel[k][b];
                memcpy(nsrc + b * S, src + r * S, sizeof(int32_t) * S);
                memcpy(nhist + b * L, hist + r * L, sizeof(int32_t) * L);
                nlen[b] = len[r];
                step[b] = hist[r * L + T - 1]; /* the tokens not yet fed */
            }
            for (int64_t b = 0; b < B; b++) {
                memcpy(hist + b * L, nhist + b * L, sizeof(int32_t) * L);
                len[b] = nlen[b];
            }
            memcpy(src, nsrc, sizeof src);
        }
        /* on to max_seq_len and past it: the wrap re-prefills each row's own history */
        for (; T <= L; T++) {
            ck_assert_int_eq(tg_generator_feed(gen, step, 1), TG_OK);
            tu_generator_logits(gen, B * V, got);
            reference_padded(ctx, &m, dt, B, src, S, len, hist, L, T, want);
            ck_assert_msg(tu_rel_err(got, want, B * V) <= tol, "case %d T %lld", ci,
                          (long long)T);
            for (int64_t b = 0; b < B; b++) {
                step[b] = (int32_t)tu_argmax(got + b * V, V);
                if (T < L)
                    hist[b * L + T] = step[b];
            }
        }
        ck_assert_int_eq(tg_generator_feed(gen, step, 1), TG_OK);
        const int64_t h = L / 2;
        int32_t win[4 * 4];
        for (int64_t b = 0; b < B; b++) {
            memcpy(win + b * h, hist + b * L + L + 1 - h, sizeof(int32_t) * (size_t)(h - 1));
            win[b * h + h - 1] = step[b];
        }
        tu_generator_logits(gen, B * V, got);
        reference_padded(ctx, &m, dt, B, src, S, len, win, h, h, want);
        ck_assert_msg(tu_rel_err(got, want, B * V) <= tol, "case %d: after the wrap", ci);
        tu_ctx_free(ctx);
    }
}
END_TEST

/* tg_generator_select_rows: the live rows shrink (12 -> 7 -> 3, the sources changing), grow
 * back (3 -> 9, rows repeated) and shrink to 1, in the middle of decoding and across the
 * wrap; every feed equals the reference on the live rows' sources and token histories. */
START_TEST(test_select_rows)
{
    tg_dtype dt = tu_dtypes[_i];
    double tol = dt == TG_F64 ? 1e-12 : 1e-5;
    enum { B = 12, S = 5, L = 9 };
    const int64_t D = 8;
    static const int32_t sel0[7] = {11, 3, 3, 0, 7, 10, 5}, sel1[3] = {6, 1, 2},
                         sel2[9] = {2, 2, 0, 1, 0, 2, 1, 1, 0}, sel3[1] = {7};
    static const int32_t *const sel[4] = {sel0, sel1, sel2, sel3};
    static const int64_t nsel[4] = {7, 3, 9, 1};
    s2s_case c = cases[dt == TG_F64 ? 0 : 3];
    tg_ctx *ctx = tu_ctx_new();
    tg_ctx_seed(ctx, 900 + (uint64_t)_i);
    tg_transformer m;
    init_model(ctx, &m, dt, &c, L, D);
    tg_ctx_set_training(ctx, false);
    tg_generator *gen = tg_generator_new(ctx, &m, B);
    ck_assert_ptr_nonnull(gen);
    ck_assert_int_eq(tg_generator_rows(gen), B);
    ck_assert_int_eq(tg_generator_graph_rows(gen, 9), 10);
    ck_assert_int_eq(tg_generator_graph_rows(gen, 11), 12);
    ck_assert_int_eq(tg_generator_graph_rows(gen, 5), 5);
    ck_assert_int_eq(tg_generator_graph_rows(gen, 13), 0);
    ck_assert_int_eq(tg_generator_graph_rows(gen, 0), 0);
    int32_t src[B * S], nsrc[B * S], hist[B * L], nhist[B * L], step[B];
    int64_t len[B], nlen[B], n = B;
    double got[B * V], want[B * V];
    for (int64_t i = 0; i < B * S; i++)
        src[i] = (int32_t)(tg_rng_u64(ctx) % 10);
    for (int64_t b = 0; b < B; b++)
        len[b] = 1 + b % S;
    ck_assert_int_eq(tg_generator_set_sources(gen, src, S, len), TG_OK);
    for (int64_t b = 0; b < B; b++)
        step[b] = hist[b * L] = BOS;
    int64_t T = 1;
    for (int k = 0; k <= 4; k++) {
        for (int r = 0; r < 2 && T <= L + 1; r++, T++) { /* T = L + 1: past the wrap */
            ck_assert_int_eq(tg_generator_feed(gen, step, 1), TG_OK);
            tu_generator_logits(gen, n * V, got);
            if (T <= L) {
                reference_padded(ctx, &m, dt, n, src, S, len, hist, L, T, want);
            } else { /* the wrap re-prefilled each row's last h tokens */
                const int64_t h = L / 2;
                int32_t win[B * (L / 2)];
                for (int64_t b = 0; b < n; b++) {
                    memcpy(win + b * h, hist + b * L + L + 1 - h,
                           sizeof(int32_t) * (size_t)(h - 1));
                    win[b * h + h - 1] = step[b];
                }
                reference_padded(ctx, &m, dt, n, src, S, len, win, h, h, want);
            }
            ck_assert_msg(tu_rel_err(got, want, n * V) <= tol, "select %d T %lld", k,
                          (long long)T);
            for (int64_t b = 0; b < n && T < L; b++) /* the second-best token: rows diverge */
                step[b] = hist[b * L + T] = (int32_t)((tu_argmax(got + b * V, V) + b) % V);
        }
        if (k == 4 || T > L)
            break;
        ck_assert_int_eq(tg_generator_select_rows(gen, sel[k], nsel[k]), TG_OK);
        ck_assert_int_eq(tg_generator_rows(gen), nsel[k]);
        ck_assert_int_eq(tg_generator_length(gen), T - 1);
        for (int64_t b = 0; b < nsel[k]; b++) {
            int64_t r = sel[k][b];
            memcpy(nsrc + b * S, src + r * S, sizeof(int32_t) * S);
            memcpy(nhist + b * L, hist + r * L, sizeof(int32_t) * L);
            nlen[b] = len[r];
            step[b] = hist[r * L + T - 1]; /* the tokens not yet fed */
        }
        n = nsel[k];
        memcpy(hist, nhist, sizeof(int32_t) * (size_t)(n * L));
        memcpy(len, nlen, sizeof(int64_t) * (size_t)n);
        memcpy(src, nsrc, sizeof(int32_t) * (size_t)(n * S));
    }
    ck_assert_int_eq(n, 1);
    /* a new source makes every row live again */
    for (int64_t b = 0; b < B; b++)
        len[b] = S;
    ck_assert_int_eq(tg_generator_set_sources(gen, src, S, len), TG_OK);
    ck_assert_int_eq(tg_generator_rows(gen), B);
    /* errors change nothing */
    int32_t bad[2] = {0, 12};
    ck_assert_int_eq(tg_generator_select_rows(gen, bad, 2), TG_ERR_ARG);
    tu_assert_error(ctx, TG_ERR_ARG, "rows[1] = 12 is not a live row in [0, 12)");
    ck_assert_int_eq(tg_generator_select_rows(gen, bad, 0), TG_ERR_ARG);
    tu_assert_error(ctx, TG_ERR_ARG, "n_rows = 0 is not in [1, batch 12]");
    ck_assert_int_eq(tg_generator_select_rows(gen, bad, 13), TG_ERR_ARG);
    tu_assert_error(ctx, TG_ERR_ARG, "n_rows = 13");
    ck_assert_int_eq(tg_generator_rows(gen), B);
    bad[1] = 1;
    ck_assert_int_eq(tg_generator_select_rows(gen, bad, 2), TG_OK);
    bad[0] = 2; /* rows beyond the 2 live ones */
    ck_assert_int_eq(tg_generator_select_rows(gen, bad, 1), TG_ERR_ARG);
    tu_assert_error(ctx, TG_ERR_ARG, "rows[0] = 2 is not a live row in [0, 2)");
    ck_assert_int_eq(tg_generator_select_rows(NULL, bad, 1), TG_ERR_ARG);
    ck_assert_int_eq(tg_generator_rows(NULL), 0);
    ck_assert_int_eq(tg_generator_graph_rows(NULL, 1), 0);
    tu_ctx_free(ctx);
}
END_TEST

START_TEST(test_select_errors)
{
    tg_ctx *ctx = tu_ctx_new();
    tg_transformer m;
    init_model(ctx, &m, TG_F64, &cases[0], 6, 8);
    tg_ctx_set_training(ctx, false);
    tg_generator *gen = tg_generator_new(ctx, &m, 2);
    ck_assert_ptr_nonnull(gen);
    int32_t src[6] = {1, 2, 3, 4, 5, 6}, tok[2] = {BOS, BOS}, rows[2] = {1, 2};
    int64_t len[2] = {3, 4};
    ck_assert_int_eq(tg_generator_set_sources(gen, src, 3, len), TG_ERR_ARG);
    tu_assert_error(ctx, TG_ERR_ARG, "src_len[1] = 4 is not in [1, s = 3]");
    len[1] = 0;
    ck_assert_int_eq(tg_generator_set_sources(gen, src, 3, len), TG_ERR_ARG);
    tu_assert_error(ctx, TG_ERR_ARG, "src_len[1] = 0");
    len[1] = 2;
    src[5] = -1; /* padding is not checked */
    ck_assert_int_eq(tg_generator_set_sources(gen, src, 3, len), TG_OK);
    src[4] = 11;
    ck_assert_int_eq(tg_generator_set_sources(gen, src, 3, len), TG_ERR_ARG);
    tu_assert_error(ctx, TG_ERR_ARG, "src_ids[1][1] = 11");
    /* gen2: the same decoding without the select calls below */
    tg_generator *gen2 = tg_generator_new(ctx, &m, 2);
    ck_assert_ptr_nonnull(gen2);
    src[4] = 5;
    ck_assert_int_eq(tg_generator_set_sources(gen, src, 3, len), TG_OK);
    ck_assert_int_eq(tg_generator_set_sources(gen2, src, 3, len), TG_OK);
    for (int k = 0; k < 2; k++) {
        ck_assert_int_eq(tg_generator_feed(gen, tok, 1), TG_OK);
        ck_assert_int_eq(tg_generator_feed(gen2, tok, 1), TG_OK);
    }
    ck_assert_int_eq(tg_generator_select(gen, rows), TG_ERR_ARG);
    tu_assert_error(ctx, TG_ERR_ARG, "rows[1] = 2 is not a live row in [0, 2)");
    ck_assert_int_eq(tg_generator_select(gen, NULL), TG_ERR_ARG);
    ck_assert_int_eq(tg_generator_length(gen), 2);
    rows[0] = 0; /* the identity, then a swap twice: back as it was */
    rows[1] = 1;
    ck_assert_int_eq(tg_generator_select(gen, rows), TG_OK);
    rows[0] = 1;
    rows[1] = 0;
    ck_assert_int_eq(tg_generator_select(gen, rows), TG_OK);
    ck_assert_int_eq(tg_generator_select(gen, rows), TG_OK);
    double a[2 * V], b[2 * V];
    tok[0] = 4;
    ck_assert_int_eq(tg_generator_feed(gen, tok, 1), TG_OK);
    ck_assert_int_eq(tg_generator_feed(gen2, tok, 1), TG_OK);
    tu_generator_logits(gen, 2 * V, a);
    tu_generator_logits(gen2, 2 * V, b);
    ck_assert(memcmp(a, b, sizeof a) == 0);
    tg_generator_free(gen);
    ck_assert_int_eq(tg_generator_select(gen, rows), TG_ERR_ARG);
    tu_assert_error(ctx, TG_ERR_ARG, "freed");
    ck_assert_int_eq(tg_generator_select(NULL, rows), TG_ERR_ARG);
    tu_ctx_free(ctx);
}
END_TEST

/* Many sources of different lengths and targets: the context does not grow. */
START_TEST(test_memory_flat)
{
    tg_ctx *ctx = tu_ctx_new();
    tg_transformer m;
    init_model(ctx, &m, TG_F32, &cases[1], 8, 8);
    tg_generator *gen = tg_generator_new(ctx, &m, 1);
    ck_assert_ptr_nonnull(gen);
    int32_t src[8] = {1, 2, 3, 4, 5, 6, 7, 8}, tok = BOS;
    ck_assert_int_eq(tg_generator_set_source(gen, src, 8), TG_OK);
    ck_assert_int_eq(tg_generator_set_source(gen, src, 3), TG_OK);
    size_t bytes = tg_ctx_bytes(ctx);
    int n = tu_under_valgrind() ? 5 : 40;
    for (int r = 0; r < n; r++) {
        ck_assert_int_eq(tg_generator_set_source(gen, src, 1 + r % 8), TG_OK);
        for (int t = 0; t < 10; t++)
            ck_assert_int_eq(tg_generator_feed(gen, &tok, 1), TG_OK);
        ck_assert_uint_eq(tg_ctx_bytes(ctx), bytes);
    }
    tu_ctx_free(ctx);
}
END_TEST

static Suite *suite(void)
{
    Suite *s = suite_create("kv_seq2seq");
    TCase *tc = tcase_create("generator");
    tcase_set_timeout(tc, 300);
    tcase_add_loop_test(tc, test_cached_matches_uncached, 0, 2);
    tcase_add_loop_test(tc, test_threads_bitwise, 0, 2);
    tcase_add_test(tc, test_errors);
    tcase_add_loop_test(tc, test_mixed_lengths, 0, 2);
    tcase_add_loop_test(tc, test_select, 0, 2);
    tcase_add_loop_test(tc, test_memory_widths, 0, 2);
    tcase_add_loop_test(tc, test_select_rows, 0, 2);
    tcase_add_test(tc, test_select_errors);
    tcase_add_test(tc, test_memory_flat);
    suite_add_tcase(s, tc);
    return s;
}

int main(void) { return tu_run(suite()); }
