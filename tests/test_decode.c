/*
 * test_decode.c - greedy and beam search (tgrad_decode.h): beam search against a slow,
 * unbatched reimplementation of the algorithm written here (tg_transformer_forward_seq2seq on
 * whole prefixes, no cache, candidates by a full sort), beam 1 against greedy, batched against
 * one sentence at a time, mixed source lengths, the maximum output length, bitwise identity
 * across 1 and 2 threads, non-finite logits, argument errors.
 */
#include "testutil.h"
#include "tgrad_decode.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { BOS = 1, EOS = 2, PAD = 3, MAXL = 12 };

/* A small encoder-decoder model with random weights (N(0, sd) matrices). */
static void init_model(tg_ctx *ctx, tg_transformer *m, tg_dtype dt, int64_t V, int64_t L, int64_t D,
                       bool norm_first, tg_pos_kind pos, double sd)
{
    tg_transformer_config mc;
    memset(&mc, 0, sizeof mc);
    mc.vocab_size = V;
    mc.max_seq_len = L;
    mc.n_layers = 2;
    mc.n_decoder_layers = 2;
    mc.layer = tg_encoder_config_default(D, 2);
    mc.layer.d_ff = 2 * D;
    mc.layer.norm_first = norm_first;
    mc.pos = pos;
    ck_assert_msg(tg_transformer_init(ctx, m, dt, &mc) == TG_OK, "%s", tg_ctx_message(ctx));
    for (int64_t i = 0; i < tg_ctx_n_params(ctx); i++) {
        tg_tensor *p = tg_ctx_param(ctx, i);
        if (tg_tensor_rank(p) == 2)
            tg_fill_normal(p, 0, sd);
    }
    tg_ctx_set_training(ctx, false);
}

/* ---- the reference: SPEC's beam search, slowly ------------------------------------------- */

typedef struct {
    int32_t tok[MAXL];
    int64_t n;
    double score;
} ref_hyp;

typedef struct {
    double score;
    int64_t flat; /* beam V + token */
} ref_cand;

static int cand_cmp(const void *a, const void *b)
{
    const ref_cand *x = a, *y = b;
    if (x->score != y->score)
        return x->score > y->score ? -1 : 1;
    return x->flat < y->flat ? -1 : x->flat > y->flat;
}

/* log_softmax in double of the last position's logits of [BOS, h] given src, uncached. */
static void ref_logprobs(tg_ctx *ctx, const tg_transformer *m, const int32_t *src, int64_t S,
                         const int32_t *h, int64_t n, double *lp)
{
    int64_t V = m->cfg.vocab_size;
    tg_mark mk = tg_ctx_mark(ctx);
    tg_tensor *s = tg_input(ctx, TG_I32, TG_DIMS(1, S), "ref.src");
    tg_tensor *t = tg_input(ctx, TG_I32, TG_DIMS(1, n + 1), "ref.tgt");
    int32_t buf[MAXL + 1];
    buf[0] = BOS;
    memcpy(buf + 1, h, sizeof(int32_t) * (size_t)n);
    ck_assert_int_eq(tg_tensor_set_data(s, src, TG_I32, (size_t)S), TG_OK);
    ck_assert_int_eq(tg_tensor_set_data(t, buf, TG_I32, (size_t)(n + 1)), TG_OK);
    tg_tensor *lg = tg_transformer_forward_seq2seq(ctx, m, s, t, NULL, NULL);
    tg_graph_opts go = {.no_grad = true};
    tg_graph *g = tg_graph_new_opts(ctx, &lg, 1, &go);
    ck_assert_msg(g != NULL, "%s", tg_ctx_message(ctx));
    ck_assert_int_eq(tg_graph_forward(g), TG_OK);
    double mx = -INFINITY, sum = 0;
    for (int64_t v = 0; v < V; v++) {
        lp[v] = tg_get(lg, n * V + v);
        mx = lp[v] > mx ? lp[v] : mx;
    }
    for (int64_t v = 0; v < V; v++)
        sum += exp(lp[v] - mx);
    double lse = mx + log(sum);
    for (int64_t v = 0; v < V; v++)
        lp[v] -= lse;
    ck_assert_int_eq(tg_ctx_rewind(ctx, mk), TG_OK);
}

static void ref_finish(ref_hyp *fin, int64_t *nfin, int64_t K, const ref_hyp *h, double sc,
                       double alpha)
{
    if (*nfin >= K)
        return;
    fin[*nfin] = *h;
    fin[*nfin].score = sc / pow((double)(h->n + 1), alpha);
    (*nfin)++;
}

/* fairseq's NGramRepeatBlock, written plainly: set lp[w] = -inf for each token w such that the
 * n-gram (the last n - 1 tokens of [BOS, h[0 .. t-1]], w) occurs in that sequence already. */
static void ref_block(const int32_t *h, int64_t t, int64_t n, double *lp)
{
    int32_t s[MAXL + 1];
    s[0] = BOS;
    memcpy(s + 1, h, sizeof(int32_t) * (size_t)t);
    for (int64_t j = 0; n > 0 && j + n - 1 <= t; j++)
        if (memcmp(s + j, s + t + 2 - n, sizeof(int32_t) * (size_t)(n - 1)) == 0)
            lp[s[j + n - 1]] = -INFINITY;
}

/* One sentence, K beams, as tgrad_decode.h states it (K = 0: greedy). */
static ref_hyp ref_search(tg_ctx *ctx, const tg_transformer *m, const int32_t *src, int64_t S,
                          int64_t K, const tg_search_opts *o)
{
    int64_t V = m->cfg.vocab_size, L = m->cfg.max_seq_len;
    double mm = floor(o->max_len_a * (double)S + o->max_len_b);
    int64_t M = mm >= (double)(L - 1) ? L - 1 : mm < 1 ? 1 : (int64_t)mm;
    bool greedy = K == 0;
    if (greedy)
        K = 1;
    ref_hyp beams[8], next[8], fin[8];
    int64_t nfin = 0;
    memset(beams, 0, sizeof beams);
    double *lp = malloc(sizeof(double) * (size_t)(8 * V));
    ref_cand *c = malloc(sizeof(ref_cand) * (size_t)(8 * V));
    for (int64_t t = 0; t < M; t++) {
        int64_t nb = t == 0 ? 1 : K;
        for (int64_t j = 0; j < nb; j++) {
            ref_logprobs(ctx, m, src, S, beams[j].tok, t, lp + j * V);
            ref_block(beams[j].tok, t, o->no_repeat_ngram, lp + j * V);
        }
        int64_t nc = 0;
        if (t == M - 1) { /* every beam ends with EOS */
            for (int64_t j = 0; j < nb; j++)
                c[nc++] = (ref_cand){beams[j].score + lp[j * V + o->eos], j * V + o->eos};
            qsort(c, (size_t)nc, sizeof *c, cand_cmp);
            for (int64_t k = 0; k < nc; k++)
                ref_finish(fin, &nfin, K, &beams[c[k].flat / V], c[k].score, o->lenpen);
            break;
        }
        if (greedy) { /* argmax of the log-probabilities, lowest id first */
            int64_t best = -1;
            for (int64_t v = 0; v < V; v++)
                if (v != o->pad && lp[v] > -INFINITY && (best < 0 || lp[v] > lp[best]))
                    best = v;
            double sc = beams[0].score + lp[best];
            if (best == o->eos) {
                ref_finish(fin, &nfin, 1, &beams[0], sc, o->lenpen);
                break;
            }
            beams[0].tok[t] = (int32_t)best;
            beams[0].n = t + 1;
            beams[0].score = sc;
            continue;
        }
        for (int64_t j = 0; j < nb; j++)
            for (int64_t v = 0; v < V; v++)
                if (v != o->pad && lp[j * V + v] > -INFINITY)
                    c[nc++] = (ref_cand){beams[j].score + lp[j * V + v], j * V + v};
        qsort(c, (size_t)nc, sizeof *c, cand_cmp);
        int64_t nn = 0;
        for (int64_t k = 0; k < 2 * K && k < nc; k++) {
            const ref_hyp *h = &beams[c[k].flat / V];
            int32_t tok = (int32_t)(c[k].flat % V);
            if (tok == o->eos) {
                if (k < K)
                    ref_finish(fin, &nfin, K, h, c[k].score, o->lenpen);
            } else if (nn < K) {
                next[nn] = *h;
                next[nn].tok[t] = tok;
                next[nn].n = t + 1;
                next[nn].score = c[k].score;
                nn++;
            }
        }
        if (nfin >= K)
            break;
        ck_assert_int_eq(nn, K);
        memcpy(beams, next, sizeof beams);
    }
    free(lp);
    free(c);
    ck_assert_int_ge(nfin, 1);
    int64_t b = 0;
    for (int64_t f = 1; f < nfin; f++)
        if (fin[f].score > fin[b].score)
            b = f;
    return fin[b];
}

/* ---- helpers -------------------------------------------------------------------------------- */

/* n random sources with lengths 1 + (i * 3) % maxs, each ending in EOS. */
static void make_sources(tg_ctx *ctx, int64_t V, int64_t n, int64_t maxs, int32_t *buf,
                         const int32_t **src, int64_t *len)
{
    for (int64_t i = 0; i < n; i++) {
        len[i] = 1 + (i * 3 + 1) % maxs;
        src[i] = buf + i * maxs;
        for (int64_t j = 0; j < len[i]; j++)
            buf[i * maxs + j] = (int32_t)(4 + tg_rng_u64(ctx) % (uint64_t)(V - 4));
        buf[i * maxs + len[i] - 1] = EOS;
    }
}

static tg_search_opts opts(tg_search_method method, int64_t K, double lenpen, double a, double b)
{
    tg_search_opts o = tg_search_defaults();
    o.method = method;
    o.beam = K;
    o.lenpen = lenpen;
    o.max_len_a = a;
    o.max_len_b = b;
    return o;
}

/* ---- tests ---------------------------------------------------------------------------------- */

/* Beam search (K = 1, 2, 3; length penalties 1, 0.6, 0; post-/pre-norm; learned and
 * sinusoidal positions) and greedy equal the reference on every sentence of a mixed-length
 * batch: the same tokens, the same score to 1e-10. */
START_TEST(test_matches_reference)
{
    static const struct {
        tg_search_method method;
        int64_t K;
        double lenpen, a, b;
        bool norm_first;
        tg_pos_kind pos;
    } rows[] = {
        {TG_SEARCH_BEAM, 2, 1.0, 1.5, 2, false, TG_POS_LEARNED},
        {TG_SEARCH_BEAM, 3, 0.6, 1.0, 3, true, TG_POS_SINUSOIDAL},
        {TG_SEARCH_BEAM, 3, 0.0, 0.0, 11, false, TG_POS_SINUSOIDAL},
        {TG_SEARCH_BEAM, 1, 1.0, 1.5, 10, true, TG_POS_LEARNED},
        {TG_SEARCH_GREEDY, 1, 1.0, 1.5, 10, false, TG_POS_LEARNED},
        {TG_SEARCH_BEAM, 2, 2.0, 0.5, 1, true, TG_POS_LEARNED},
    };
    const int64_t V = 7, n = 5, maxs = 6;
    int64_t ends_at_max = 0, ends_early = 0;
    for (size_t ci = 0; ci < sizeof rows / sizeof rows[0]; ci++) {
        tg_ctx *ctx = tu_ctx_new();
        tg_ctx_seed(ctx, 40 + ci);
        tg_transformer m;
        init_model(ctx, &m, TG_F64, V, MAXL, 8, rows[ci].norm_first, rows[ci].pos, 0.7);
        tg_search_opts o =
            opts(rows[ci].method, rows[ci].K, rows[ci].lenpen, rows[ci].a, rows[ci].b);
        tg_translator *tr = tg_translator_new(ctx, &m, n + 1, &o);
        ck_assert_msg(tr != NULL, "%s", tg_ctx_message(ctx));
        int32_t buf[5 * 6];
        const int32_t *src[5];
        int64_t len[5];
        make_sources(ctx, V, n, maxs, buf, src, len);
        tg_translation out[5];
        ck_assert_msg(tg_translate_batch(tr, n, src, len, out) == TG_OK, "%s", tg_ctx_message(ctx));
        for (int64_t i = 0; i < n; i++) {
            ref_hyp r = ref_search(ctx, &m, src[i], len[i],
                                   rows[ci].method == TG_SEARCH_GREEDY ? 0 : rows[ci].K, &o);
            ck_assert_msg(out[i].len == r.n,
                          "case %zu sentence %lld: length %lld, reference "
                          "%lld",
                          ci, (long long)i, (long long)out[i].len, (long long)r.n);
            for (int64_t k = 0; k < r.n; k++)
                ck_assert_msg(out[i].ids[k] == r.tok[k], "case %zu sentence %lld token %lld", ci,
                              (long long)i, (long long)k);
            ck_assert_msg(fabs(out[i].score - r.score) <= 1e-10 * (1 + fabs(r.score)),
                          "case %zu sentence %lld: score %.17g, reference %.17g", ci, (long long)i,
                          out[i].score, r.score);
            double mm = floor(o.max_len_a * (double)len[i] + o.max_len_b);
            int64_t M = mm > MAXL - 1 ? MAXL - 1 : mm < 1 ? 1 : (int64_t)mm;
            ck_assert_int_le(out[i].len, M - 1);
            if (out[i].len == M - 1)
                ends_at_max++;
            else
                ends_early++;
        }
        tu_ctx_free(ctx);
    }
    /* both stopping rules were exercised */
    ck_assert_int_gt(ends_at_max, 0);
    ck_assert_int_gt(ends_early, 0);
}
END_TEST

/* no_repeat_ngram n = 1, 2, 3 in greedy and beam search equals the reference with fairseq's
 * blocking, on a random model that repeats itself without it: no output holds an n-gram twice
 * (BOS counted first), and blocking changed some outputs. Out of range values are refused. */
START_TEST(test_no_repeat_ngram)
{
    const int64_t V = 40, n = 6, maxs = 6;
    int64_t changed = 0, repeats_without = 0;
    for (int ci = 0; ci < 6; ci++) {
        int64_t ng = 1 + ci % 3;
        bool beam = ci >= 3;
        tg_ctx *ctx = tu_ctx_new();
        tg_ctx_seed(ctx, 70 + ci);
        tg_transformer m;
        init_model(ctx, &m, TG_F64, V, MAXL, 8, ci % 2, TG_POS_LEARNED, 1.5);
        tg_search_opts o = opts(beam ? TG_SEARCH_BEAM : TG_SEARCH_GREEDY, beam ? 3 : 1, 1.0, 2.0,
                                4),
                       o0 = o;
        o.no_repeat_ngram = ng;
        tg_translator *tr = tg_translator_new(ctx, &m, n, &o),
                      *t0 = tg_translator_new(ctx, &m, n, &o0);
        ck_assert_msg(tr && t0, "%s", tg_ctx_message(ctx));
        int32_t buf[6 * 6];
        const int32_t *src[6];
        int64_t len[6];
        make_sources(ctx, V, n, maxs, buf, src, len);
        tg_translation out[6], out0[6];
        ck_assert_int_eq(tg_translate_batch(tr, n, src, len, out), TG_OK);
        int32_t keep[6][MAXL];
        for (int64_t i = 0; i < n; i++)
            memcpy(keep[i], out[i].ids, sizeof(int32_t) * (size_t)out[i].len);
        ck_assert_int_eq(tg_translate_batch(t0, n, src, len, out0), TG_OK);
        for (int64_t i = 0; i < n; i++) {
            ref_hyp r = ref_search(ctx, &m, src[i], len[i], beam ? 3 : 0, &o);
            ck_assert_msg(out[i].len == r.n, "case %d sentence %lld: length %lld, reference %lld",
                          ci, (long long)i, (long long)out[i].len, (long long)r.n);
            ck_assert(memcmp(keep[i], r.tok, sizeof(int32_t) * (size_t)r.n) == 0);
            ck_assert(fabs(out[i].score - r.score) <= 1e-10 * (1 + fabs(r.score)));
            int32_t s[MAXL + 1] = {BOS}; /* no n-gram of [BOS, output] twice */
            memcpy(s + 1, keep[i], sizeof(int32_t) * (size_t)r.n);
            for (int64_t a = 0; a + ng <= r.n + 1; a++)
                for (int64_t b = a + 1; b + ng <= r.n + 1; b++)
                    ck_assert(memcmp(s + a, s + b, sizeof(int32_t) * (size_t)ng) != 0);
            changed += out0[i].len != r.n ||
                       memcmp(out0[i].ids, r.tok, sizeof(int32_t) * (size_t)r.n) != 0;
            for (int64_t a = 1; a < out0[i].len; a++)
                repeats_without += out0[i].ids[a] == out0[i].ids[a - 1];
        }
        o.no_repeat_ngram = MAXL + 1;
        ck_assert_ptr_null(tg_translator_new(ctx, &m, n, &o));
        ck_assert_ptr_nonnull(strstr(tg_ctx_message(ctx), "no_repeat_ngram"));
        tu_ctx_free(ctx);
    }
    ck_assert_int_gt(repeats_without, 0);
    ck_assert_int_gt(changed, 0);
}
END_TEST

/* Beam 1 gives greedy's tokens and scores, bitwise (f32 and f64). */
START_TEST(test_beam1_is_greedy)
{
    tg_dtype dt = tu_dtypes[_i];
    const int64_t V = 40, n = 7;
    tg_ctx *ctx = tu_ctx_new();
    tg_ctx_seed(ctx, 9);
    tg_transformer m;
    init_model(ctx, &m, dt, V, MAXL, 16, false, TG_POS_SINUSOIDAL, 0.5);
    tg_search_opts og = opts(TG_SEARCH_GREEDY, 1, 1.0, 1.5, 10);
    tg_search_opts ob = opts(TG_SEARCH_BEAM, 1, 1.0, 1.5, 10);
    tg_translator *g = tg_translator_new(ctx, &m, n, &og), *b = tg_translator_new(ctx, &m, n, &ob);
    ck_assert_ptr_nonnull(g);
    ck_assert_ptr_nonnull(b);
    int32_t buf[7 * 8];
    const int32_t *src[7];
    int64_t len[7];
    make_sources(ctx, V, n, 8, buf, src, len);
    tg_translation a[7], c[7];
    ck_assert_int_eq(tg_translate_batch(g, n, src, len, a), TG_OK);
    ck_assert_int_eq(tg_translate_batch(b, n, src, len, c), TG_OK);
    for (int64_t i = 0; i < n; i++) {
        ck_assert_int_eq(a[i].len, c[i].len);
        ck_assert(memcmp(a[i].ids, c[i].ids, sizeof(int32_t) * (size_t)a[i].len) == 0);
        ck_assert(memcmp(&a[i].score, &c[i].score, sizeof(double)) == 0);
    }
    tu_ctx_free(ctx);
}
END_TEST

/* A batch of sentences of mixed lengths (and unused rows) equals each sentence alone. */
START_TEST(test_batched_equals_single)
{
    const int64_t V = 30, n = 6;
    for (int method = 0; method < 2; method++) {
        tg_ctx *ctx = tu_ctx_new();
        tg_ctx_seed(ctx, 77);
        tg_transformer m;
        init_model(ctx, &m, TG_F64, V, MAXL, 16, true, TG_POS_LEARNED, 0.5);
        tg_search_opts o = opts(method ? TG_SEARCH_BEAM : TG_SEARCH_GREEDY, 4, 1.0, 1.5, 10);
        tg_translator *all = tg_translator_new(ctx, &m, n + 2, &o);
        tg_translator *one = tg_translator_new(ctx, &m, 1, &o);
        ck_assert_ptr_nonnull(all);
        ck_assert_ptr_nonnull(one);
        int32_t buf[6 * 9];
        const int32_t *src[6];
        int64_t len[6];
        make_sources(ctx, V, n, 9, buf, src, len);
        tg_translation a[6], s;
        ck_assert_int_eq(tg_translate_batch(all, n, src, len, a), TG_OK);
        int32_t keep[6][MAXL];
        for (int64_t i = 0; i < n; i++)
            memcpy(keep[i], a[i].ids, sizeof(int32_t) * (size_t)a[i].len);
        for (int64_t i = 0; i < n; i++) {
            ck_assert_int_eq(tg_translate_batch(one, 1, &src[i], &len[i], &s), TG_OK);
            ck_assert_msg(s.len == a[i].len, "method %d sentence %lld", method, (long long)i);
            ck_assert(memcmp(s.ids, keep[i], sizeof(int32_t) * (size_t)s.len) == 0);
            ck_assert_msg(fabs(s.score - a[i].score) <= 1e-12 * fabs(s.score),
                          "method %d sentence %lld: %.17g vs %.17g", method, (long long)i, s.score,
                          a[i].score);
        }
        tu_ctx_free(ctx);
    }
}
END_TEST

/* Every result of a batch, with @p threads threads. */
static void translate_all(int threads, tg_search_method method, int32_t *ids, double *scores,
                          int64_t *lens)
{
    const int64_t V = 1100, n = 8;
    tg_ctx *ctx = tu_ctx_new();
    tg_ctx_seed(ctx, 3);
    tg_ctx_set_threads(ctx, threads);
    tg_transformer m;
    init_model(ctx, &m, TG_F32, V, 16, 16, false, TG_POS_SINUSOIDAL, 0.4);
    tg_search_opts o = opts(method, 4, 1.0, 1.5, 4);
    tg_translator *tr = tg_translator_new(ctx, &m, n, &o);
    ck_assert_ptr_nonnull(tr);
    int32_t buf[8 * 10];
    const int32_t *src[8];
    int64_t len[8];
    make_sources(ctx, V, n, 10, buf, src, len);
    tg_translation out[8];
    ck_assert_int_eq(tg_translate_batch(tr, n, src, len, out), TG_OK);
    for (int64_t i = 0; i < n; i++) {
        lens[i] = out[i].len;
        scores[i] = out[i].score;
        memcpy(ids + i * 16, out[i].ids, sizeof(int32_t) * (size_t)out[i].len);
    }
    tu_ctx_free(ctx);
}

START_TEST(test_threads_bitwise)
{
    for (int method = 0; method < 2; method++) {
        int32_t ia[8 * 16] = {0}, ib[8 * 16] = {0};
        double sa[8], sb[8];
        int64_t la[8], lb[8];
        tg_search_method mt = method ? TG_SEARCH_BEAM : TG_SEARCH_GREEDY;
        translate_all(1, mt, ia, sa, la);
        translate_all(2, mt, ib, sb, lb);
        ck_assert(memcmp(ia, ib, sizeof ia) == 0);
        ck_assert(memcmp(sa, sb, sizeof sa) == 0);
        ck_assert(memcmp(la, lb, sizeof la) == 0);
    }
}
END_TEST

/* A NaN in the head's bias: TG_ERR_NONFINITE with a message, no output written. */
START_TEST(test_nonfinite)
{
    tg_ctx *ctx = tu_ctx_new();
    tg_transformer m;
    init_model(ctx, &m, TG_F32, 12, MAXL, 8, false, TG_POS_LEARNED, 0.5);
    tg_translator *tr = tg_translator_new(ctx, &m, 2, NULL);
    ck_assert_ptr_nonnull(tr);
    tg_set(m.head_b, 5, NAN);
    int32_t s0[3] = {4, 5, EOS};
    const int32_t *src[1] = {s0};
    int64_t len[1] = {3};
    tg_translation out[1] = {{NULL, -7, 0}};
    ck_assert_int_eq(tg_translate_batch(tr, 1, src, len, out), TG_ERR_NONFINITE);
    tu_assert_error(ctx, TG_ERR_NONFINITE, "sentence 0, step 0: the logit of token 5 is nan");
    ck_assert_int_eq(out[0].len, -7);
    tg_set(m.head_b, 5, 0);
    ck_assert_int_eq(tg_translate_batch(tr, 1, src, len, out), TG_OK);
    tu_ctx_free(ctx);
}
END_TEST

START_TEST(test_errors)
{
    tg_ctx *ctx = tu_ctx_new();
    tg_transformer m;
    init_model(ctx, &m, TG_F32, 7, MAXL, 8, false, TG_POS_LEARNED, 0.5);
    tg_search_opts o = tg_search_defaults();
    ck_assert_int_eq(o.beam, 5);
    ck_assert_int_eq(o.method, TG_SEARCH_BEAM);
    /* 7 tokens without pad: 6 < 2 K = 10 */
    ck_assert_ptr_null(tg_translator_new(ctx, &m, 2, &o));
    tu_assert_error(ctx, TG_ERR_ARG, "at least 2 beam tokens");
    tg_ctx_clear_error(ctx);
    o.beam = 3;
    o.eos = 7;
    ck_assert_ptr_null(tg_translator_new(ctx, &m, 2, &o));
    tu_assert_error(ctx, TG_ERR_ARG, "bos and eos");
    tg_ctx_clear_error(ctx);
    o.eos = EOS;
    o.lenpen = NAN;
    ck_assert_ptr_null(tg_translator_new(ctx, &m, 2, &o));
    tu_assert_error(ctx, TG_ERR_ARG, "finite");
    tg_ctx_clear_error(ctx);
    o.lenpen = 1;
    ck_assert_ptr_null(tg_translator_new(ctx, &m, 0, &o));
    tu_assert_error(ctx, TG_ERR_ARG, "max_sentences");
    tg_ctx_clear_error(ctx);
    tg_translator *tr = tg_translator_new(ctx, &m, 2, &o);
    ck_assert_ptr_nonnull(tr);
    int32_t s0[3] = {4, 5, EOS}, s1[2] = {7, EOS};
    const int32_t *src[3] = {s0, s1, s0};
    int64_t len[3] = {3, 2, 3};
    tg_translation out[3];
    ck_assert_int_eq(tg_translate_batch(tr, 3, src, len, out), TG_ERR_ARG);
    tu_assert_error(ctx, TG_ERR_ARG, "max_sentences 2");
    ck_assert_int_eq(tg_translate_batch(tr, 2, src, len, out), TG_ERR_ARG);
    tu_assert_error(ctx, TG_ERR_ARG, "sentence 1: src[0] = 7 is not a token id in [0, 7)");
    len[1] = 0;
    ck_assert_int_eq(tg_translate_batch(tr, 2, src, len, out), TG_ERR_ARG);
    tu_assert_error(ctx, TG_ERR_ARG, "sentence 1");
    len[1] = MAXL + 1;
    ck_assert_int_eq(tg_translate_batch(tr, 2, src, len, out), TG_ERR_ARG);
    ck_assert_int_eq(tg_translate_batch(tr, 1, src, len, NULL), TG_ERR_ARG);
    ck_assert_int_eq(tg_translate_batch(tr, 1, src, len, out), TG_OK);
    ck_assert_int_eq(tg_translate_batch(NULL, 1, src, len, out), TG_ERR_ARG);
    ck_assert_ptr_nonnull(tg_translator_generator(tr));
    tg_translator_free(tr);
    tg_translator_free(tr);
    ck_assert_ptr_null(tg_translator_generator(tr));
    ck_assert_int_eq(tg_translate_batch(tr, 1, src, len, out), TG_ERR_ARG);
    tu_assert_error(ctx, TG_ERR_ARG, "freed");
    /* a decoder-only model */
    tg_ctx *c2 = tu_ctx_new();
    tg_transformer lm;
    tg_transformer_config mc;
    memset(&mc, 0, sizeof mc);
    mc.vocab_size = 9;
    mc.max_seq_len = 4;
    mc.n_layers = 1;
    mc.layer = tg_encoder_config_default(8, 2);
    mc.causal = true;
    ck_assert_int_eq(tg_transformer_init(c2, &lm, TG_F32, &mc), TG_OK);
    ck_assert_ptr_null(tg_translator_new(c2, &lm, 1, NULL));
    tu_assert_error(c2, TG_ERR_ARG, "encoder-decoder");
    tu_ctx_free(c2);
    tu_ctx_free(ctx);
}
END_TEST

static Suite *suite(void)
{
    Suite *s = suite_create("decode");
    TCase *tc = tcase_create("search");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_matches_reference);
    tcase_add_test(tc, test_no_repeat_ngram);
    tcase_add_loop_test(tc, test_beam1_is_greedy, 0, 2);
    tcase_add_test(tc, test_batched_equals_single);
    tcase_add_test(tc, test_threads_bitwise);
    tcase_add_test(tc, test_nonfinite);
    tcase_add_test(tc, test_errors);
    suite_add_tcase(s, tc);
    return s;
}

int main(void) { return tu_run(suite()); }
