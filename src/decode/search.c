/*
 * search.c - greedy and beam search for the encoder-decoder Transformer through the KV cache.
 *
 * One tg_generator of R = N K rows (N sentences, K beams; K = 1 for greedy) in N slots of K
 * rows: sentence i sits in slot slot[i] (rows slot[i] K .. + K - 1, all holding its source;
 * tg_generator_set_sources, padded to the longest source of the call). Step 0 computes one
 * row per slot (all beams of a sentence start alike; W = 1 row per slot), later steps K
 * (W = K). Each step:
 *   feed   tok (S W) -> logits (S W, V)              one token per row of the S live slots
 *   lse    lse[r] = m + log sum_v exp(x_rv - m)      per row of a live sentence (the row
 *                                                    helpers of src/core/vec.h, 16 lanes)
 *   search per sentence: greedy argmax, or beam      lp(v) = x_rv - lse[r] (double)
 *          search's top-2K candidates (fairseq's
 *          sequence_generator.py / BeamSearch.step)
 *   select rows[j] = the row beam j continues        tg_generator_select_rows
 * When finished sentences free enough slots that the generator's row bucket for the live
 * rows falls (tg_generator_graph_rows), the sentences in the slots beyond the live count move
 * into the free slots below it and the generator keeps only those rows: decoding pays for the
 * sentences still searching, not for the batch. The step loop ends when every sentence is
 * done. Memory follows the lengths a call may have, not max_seq_len: the buffers and the
 * generator (tg_generator_new_len) hold L = max(Smax, M) positions, Smax the longest source
 * (opts.max_src_len) and M the longest output such a source may get (tg_translator_length).
 * Beam search's rules (tgrad_decode.h):
 * candidates ranked by score, ties by the flat index beam V + token (lower first); an EOS in
 * the first K candidates finishes a hypothesis (normalized score / len^alpha, len with EOS);
 * the first K non-EOS candidates continue; at the maximum length every beam finishes with EOS.
 *
 * Threads: the log-sum-exp loop writes lse[r] of its own rows (sums in the fixed lanes of
 * vec.h's row helpers), the search loop the next-layout rows, buffers and finished lists of
 * its own sentences, the adoption of the next beams its own slots; compaction is decided on
 * one thread. Any thread count gives the same bits.
 */
#include "tgrad_decode.h"
#include "core.h"
#include "vec.h"

#include <math.h>
#include <string.h>

struct tg_translator {
    tg_ctx *ctx;
    tg_search_opts o;
    int64_t N, K, R, V;     /* sentences, beams (1 for greedy), rows N K, vocab */
    int64_t L;              /* positions the buffers and the generator hold: max(Smax, the
                               longest output a source of Smax or 1 tokens may get) */
    int64_t Lm;             /* the model's max_seq_len (the output bound's) */
    int64_t Smax;           /* the longest source (opts.max_src_len, or max_seq_len) */
    tg_generator *gen;
    int64_t S;              /* live slots (the generator's live rows S W) */
    int64_t W;              /* rows per slot this step: 1 at step 0 of beam search (every beam
                               of a sentence starts alike: one row computes them), else K */
    int64_t *slot;          /* (N) each sentence's slot */
    int64_t *sent;          /* (N) each slot's sentence, or -1 */
    double *lse;            /* (R) log sum exp of each row's logits */
    int64_t *bad;           /* (R) first non-finite logit of a row, or -1 */
    double *score, *nscore; /* (R) each beam's summed log-probability; the next step's */
    int32_t *hyp, *nhyp;    /* (R, L) each beam's tokens after BOS; the next step's */
    int32_t *rows, *tok;    /* (R) the rows beams continue (select); the tokens to feed */
    int32_t *src;           /* (R, L) the padded sources of a call */
    int64_t *slen;          /* (R) their lengths */
    int32_t *fin;           /* (N, K, L) finished hypotheses' tokens (without EOS) */
    int64_t *fin_len;       /* (N, K) their token counts (without EOS) */
    double *fin_score;      /* (N, K) their normalized scores */
    int64_t *nfin;          /* (N) finished hypotheses per sentence */
    int64_t *max_out;       /* (N) maximum output length M_i, EOS included */
    bool f32;               /* the step's logits (S K, V): xf (f32) or xd (f64) */
    const float *xf;
    const double *xd;
    bool *done;             /* (N) */
    int64_t *cbeam;         /* (N, 2K) candidates: beam, token, score (sorted, best first) */
    int32_t *ctok;
    double *cscore;
    int32_t *out;           /* (N, L) the results' tokens */
    int32_t *ban;           /* (R, L + 1) tokens a row may not take this step (no_repeat_ngram) */
    bool freed;
};

tg_search_opts tg_search_defaults(void)
{
    tg_search_opts o;
    memset(&o, 0, sizeof o);
    o.method = TG_SEARCH_BEAM;
    o.beam = 5;
    o.lenpen = 1.0;
    o.max_len_a = 1.5;
    o.max_len_b = 10;
    o.bos = 1;
    o.eos = 2;
    o.pad = 3;
    return o;
}

/* Options and model checks of tg_translator_new; false with the error recorded. */
static bool opts_ok(tg_ctx *ctx, const char *fn, const tg_transformer *m,
                    const tg_search_opts *o, int64_t n)
{
    if (!m || !m->tok_emb || m->cfg.n_decoder_layers < 1) {
        tg__err(ctx, TG_ERR_ARG, fn, "the model is %s: translation needs an encoder-decoder "
                "(cfg.n_decoder_layers > 0)", m && m->tok_emb ? "decoder-only" : "NULL or not "
                "initialised");
        return false;
    }
    int64_t V = m->cfg.vocab_size, L = m->cfg.max_seq_len;
    const char *bad = NULL;
    if (L < 2)
        bad = "max_seq_len must be >= 2 (BOS and one output token)";
    else if (n < 1 || n > TG_MAX_NUMEL)
        bad = "max_sentences must be >= 1";
    else if (o->method != TG_SEARCH_GREEDY && o->method != TG_SEARCH_BEAM)
        bad = "method must be TG_SEARCH_GREEDY or TG_SEARCH_BEAM";
    else if (o->method == TG_SEARCH_BEAM && (o->beam < 1 || o->beam > TG_MAX_NUMEL / n))
        bad = "beam must be >= 1 (and max_sentences beam rows must fit)";
    else if (!isfinite(o->lenpen) || !isfinite(o->max_len_a) || !isfinite(o->max_len_b))
        bad = "lenpen, max_len_a and max_len_b must be finite";
    else if (o->max_src_len < 0 || o->max_src_len > L)
        bad = "max_src_len must be in [1, max_seq_len] (or 0: max_seq_len)";
    else if (o->bos < 0 || o->bos >= V || o->eos < 0 || o->eos >= V)
        bad = "bos and eos must be token ids in [0, vocab_size)";
    else if (o->pad >= V || (o->pad >= 0 && (o->pad == o->bos || o->pad == o->eos)))
        bad = "pad must be < 0 (none) or a token id other than bos and eos";
    else if (o->method == TG_SEARCH_BEAM && V - (o->pad >= 0 ? 1 : 0) < 2 * o->beam)
        bad = "the vocabulary (without pad) must hold at least 2 beam tokens (the candidates)";
    else if (o->no_repeat_ngram < 0 || o->no_repeat_ngram > L)
        bad = "no_repeat_ngram must be in [0, max_seq_len] (0: off)";
    else if (o->no_repeat_ngram && o->method == TG_SEARCH_BEAM &&
             V - (o->pad >= 0 ? 1 : 0) - L < 2 * o->beam)
        bad = "with no_repeat_ngram, the vocabulary (without pad) must hold 2 beam tokens "
              "beyond max_seq_len (a row bans fewer than max_seq_len tokens)";
    if (bad) {
        tg__err(ctx, TG_ERR_ARG, fn, "%s (max_sentences %lld, beam %lld, vocab_size %lld, "
                "max_seq_len %lld, max_src_len %lld, bos %d, eos %d, pad %d)", bad, (long long)n,
                (long long)o->beam, (long long)V, (long long)L, (long long)o->max_src_len,
                (int)o->bos, (int)o->eos, (int)o->pad);
        return false;
    }
    return true;
}

/* The maximum output length, EOS included, of a source of @p S tokens:
 * max(1, min(floor(a S + b), max_seq_len - 1)). */
static int64_t max_output(const tg_search_opts *o, int64_t S, int64_t Lm)
{
    double m = floor(o->max_len_a * (double)S + o->max_len_b);
    return m >= (double)(Lm - 1) ? Lm - 1 : m < 1 ? 1 : (int64_t)m;
}

int64_t tg_translator_length(const tg_transformer *m, const tg_search_opts *opts)
{
    if (!m || m->cfg.max_seq_len < 2)
        return 0;
    tg_search_opts o = opts ? *opts : tg_search_defaults();
    int64_t Lm = m->cfg.max_seq_len;
    if (o.max_src_len < 0 || o.max_src_len > Lm || !isfinite(o.max_len_a) ||
        !isfinite(o.max_len_b))
        return 0;
    int64_t S = o.max_src_len > 0 ? o.max_src_len : Lm;
    /* floor(a S + b) is linear in S: its largest over 1..S is at an end */
    int64_t M1 = max_output(&o, 1, Lm), MS = max_output(&o, S, Lm);
    int64_t M = M1 > MS ? M1 : MS;
    return S > M ? S : M;
}

tg_translator *tg_translator_new(tg_ctx *ctx, const tg_transformer *m, int64_t max_sentences,
                                 const tg_search_opts *opts)
{
    static const char *fn = "tg_translator_new";
    if (!ctx)
        return NULL;
    tg__begin(ctx);
    if (tg__build_failed(ctx))
        return NULL;
    tg_search_opts o = opts ? *opts : tg_search_defaults();
    if (!opts_ok(ctx, fn, m, &o, max_sentences))
        return NULL;
    int64_t N = max_sentences, K = o.method == TG_SEARCH_BEAM ? o.beam : 1, R = N * K;
    int64_t L = tg_translator_length(m, &o), V = m->cfg.vocab_size, rv, rl;
    size_t b_rl;
    if (!tg__mul_i64(R, V, &rv) || !tg__mul_i64(R, L, &rl) ||
        !tg__bytes(rl, sizeof(int32_t), &b_rl))
        return tg__err(ctx, TG_ERR_OVERFLOW, fn, "%lld rows of vocab_size %lld and length %lld: "
                       "buffers too large", (long long)R, (long long)V, (long long)L);
    tg_mark mark = tg_ctx_mark(ctx);
    tg_translator *tr = tg__alloc(ctx, sizeof *tr, fn);
    if (!tr)
        return NULL;
    tr->ctx = ctx;
    tr->o = o;
    tr->o.beam = K;
    tr->N = N;
    tr->K = K;
    tr->R = R;
    tr->L = L;
    tr->Lm = m->cfg.max_seq_len;
    tr->Smax = o.max_src_len > 0 ? o.max_src_len : tr->Lm;
    tr->V = V;
    size_t r8 = sizeof(double) * (size_t)R, n8 = sizeof(int64_t) * (size_t)N;
    size_t nk = (size_t)N * (size_t)K;
    tr->slot = tg__alloc(ctx, n8, fn);
    tr->sent = tg__alloc(ctx, n8, fn);
    tr->lse = tg__alloc(ctx, r8, fn);
    tr->bad = tg__alloc(ctx, r8, fn);
    tr->score = tg__alloc(ctx, r8, fn);
    tr->nscore = tg__alloc(ctx, r8, fn);
    tr->hyp = tg__alloc(ctx, b_rl, fn);
    tr->nhyp = tg__alloc(ctx, b_rl, fn);
    tr->src = tg__alloc(ctx, b_rl, fn);
    tr->fin = tg__alloc(ctx, b_rl, fn);
    tr->rows = tg__alloc(ctx, sizeof(int32_t) * (size_t)R, fn);
    tr->tok = tg__alloc(ctx, sizeof(int32_t) * (size_t)R, fn);
    tr->slen = tg__alloc(ctx, r8, fn);
    tr->fin_len = tg__alloc(ctx, sizeof(int64_t) * nk, fn);
    tr->fin_score = tg__alloc(ctx, sizeof(double) * nk, fn);
    tr->nfin = tg__alloc(ctx, n8, fn);
    tr->max_out = tg__alloc(ctx, n8, fn);
    tr->done = tg__alloc(ctx, sizeof(bool) * (size_t)N, fn);
    tr->cbeam = tg__alloc(ctx, sizeof(int64_t) * 2 * nk, fn);
    tr->ctok = tg__alloc(ctx, sizeof(int32_t) * 2 * nk, fn);
    tr->cscore = tg__alloc(ctx, sizeof(double) * 2 * nk, fn);
    tr->out = tg__alloc(ctx, sizeof(int32_t) * (size_t)(N * L), fn);
    tr->ban = tr->o.no_repeat_ngram ? tg__alloc(ctx, sizeof(int32_t) * (size_t)(R * (L + 1)), fn)
                                    : NULL;
    if ((tr->o.no_repeat_ngram && !tr->ban) || !tr->slot || !tr->sent || !tr->lse || !tr->bad ||
        !tr->score || !tr->nscore || !tr->hyp || !tr->nhyp || !tr->src || !tr->fin ||
        !tr->rows || !tr->tok || !tr->slen || !tr->fin_len || !tr->fin_score || !tr->nfin ||
        !tr->max_out || !tr->done || !tr->cbeam || !tr->ctok || !tr->cscore || !tr->out)
        goto fail;
    tr->gen = tg_generator_new_len(ctx, m, R, L);
    if (!tr->gen)
        goto fail;
    return tr;
fail:
    if (tg_ctx_status(ctx) == TG_OK)
        tg__err(ctx, TG_ERR_NOMEM, fn, "out of memory");
    tg_ctx_rewind(ctx, mark); /* the error stays recorded */
    return NULL;
}

/* Arguments of tg_translate_batch; false with the run error recorded. */
static bool batch_ok(tg_translator *tr, int64_t n, const int32_t *const *src,
                     const int64_t *src_len, const tg_translation *out)
{
    static const char *fn = "tg_translate_batch";
    tg_ctx *ctx = tr->ctx;
    if (n < 1 || n > tr->N || !src || !src_len || !out) {
        tg__run_err(ctx, TG_ERR_ARG, fn, "n = %lld (need 1 <= n <= max_sentences %lld), src %s, "
                    "src_len %s, out %s", (long long)n, (long long)tr->N, src ? "given" : "NULL",
                    src_len ? "given" : "NULL", out ? "given" : "NULL");
        return false;
    }
    for (int64_t i = 0; i < n; i++) {
        if (!src[i] || src_len[i] < 1 || src_len[i] > tr->Smax) {
            tg__run_err(ctx, TG_ERR_ARG, fn, "sentence %lld: src %s with length %lld (need 1 <= "
                        "length <= %lld, %s)", (long long)i, src[i] ? "given" : "NULL",
                        (long long)src_len[i], (long long)tr->Smax,
                        tr->Smax < tr->Lm ? "the translator's max_src_len" : "max_seq_len");
            return false;
        }
        for (int64_t j = 0; j < src_len[i]; j++)
            if (src[i][j] < 0 || src[i][j] >= tr->V) {
                tg__run_err(ctx, TG_ERR_ARG, fn, "sentence %lld: src[%lld] = %lld is not a "
                            "token id in [0, %lld)", (long long)i, (long long)j,
                            (long long)src[i][j], (long long)tr->V);
                return false;
            }
    }
    return true;
}

/* Logit v of row r of the step's logits (f32 or f64) as a double. */
static inline double logit(const tg_translator *tr, int64_t r, int64_t v)
{
    return tr->f32 ? (double)tr->xf[r * tr->V + v] : tr->xd[r * tr->V + v];
}

/* The log-sum-exp of each live sentence's rows (W per slot); bad[r] = the first non-finite
 * logit's token or -1. */
static void row_lse(tg_translator *tr, int64_t t)
{
    int64_t R = tr->S * tr->W, W = tr->W, V = tr->V;
    int nt = tg__threads(tr->ctx);
    bool par = (double)R * (double)V >= (double)TG_PAR_MIN;
    (void)t;
    /* each iteration writes lse and bad of its own row r; the sums run in fixed lanes of the
     * row alone (vec.h) */
    TG_OMP_FOR(nt, par)
    for (int64_t r = 0; r < R; r++) {
        tr->bad[r] = -1;
        int64_t i = tr->sent[r / W];
        if (i < 0 || tr->done[i])
            continue;
        /* a sum that is not finite: an inf or a nan among the logits (or an overflow) */
        double sum = tr->f32 ? (double)tg__row_dot_f32(tr->xf + r * V, NULL, V)
                             : tg__row_dot_f64(tr->xd + r * V, NULL, V);
        if (!isfinite(sum)) {
            for (int64_t v = 0; v < V; v++)
                if (!isfinite(logit(tr, r, v))) {
                    tr->bad[r] = v;
                    break;
                }
            if (tr->bad[r] >= 0)
                continue;
        }
        double mx, s;
        if (tr->f32) {
            const float *x = tr->xf + r * V;
            float m = tg__row_max_f32(x, V);
            mx = m;
            s = tg__row_expsum_f32(x, V, m, NULL);
        } else {
            const double *x = tr->xd + r * V;
            mx = tg__row_max_f64(x, V);
            s = tg__row_expsum_f64(x, V, mx, NULL);
        }
        tr->lse[r] = mx + log(s);
    }
}

/* Record a finished hypothesis of sentence i: tokens h[0..n-1] then EOS, summed score sc. */
static void finish(tg_translator *tr, int64_t i, const int32_t *h, int64_t n, double sc)
{
    int64_t K = tr->K, L = tr->L, f = tr->nfin[i];
    if (f >= K)
        return;
    memcpy(tr->fin + (i * K + f) * L, h, sizeof(int32_t) * (size_t)n);
    tr->fin_len[i * K + f] = n;
    tr->fin_score[i * K + f] = sc / pow((double)(n + 1), tr->o.lenpen);
    tr->nfin[i] = f + 1;
}

/* no_repeat_ngram n (fairseq's NGramRepeatBlock): the tokens that would repeat an n-gram of
 * the row's sequence s = [BOS, h[0 .. t-1]], those that followed an earlier occurrence of its
 * last n - 1 tokens, into row r's ban list (-1 ends it). None while s is shorter than n - 1. */
static void ban_list(tg_translator *tr, int64_t r, const int32_t *h, int64_t t)
{
    int64_t n = tr->o.no_repeat_ngram, nb = 0;
    int32_t *ban = tr->ban + r * (tr->L + 1);
#define S_AT(k) ((k) == 0 ? tr->o.bos : h[(k) - 1])
    for (int64_t j = 0; n > 0 && j + n - 1 <= t; j++) { /* the n-gram s[j .. j + n - 1] */
        int64_t m = 0;
        while (m < n - 1 && S_AT(j + m) == S_AT(t + 2 - n + m))
            m++;
        if (m == n - 1)
            ban[nb++] = S_AT(j + n - 1);
    }
#undef S_AT
    ban[nb] = -1;
}

/* Whether row r may not take token v this step. */
static bool banned(const tg_translator *tr, int64_t r, int64_t v)
{
    if (!tr->o.no_repeat_ngram)
        return false;
    for (const int32_t *b = tr->ban + r * (tr->L + 1); *b >= 0; b++)
        if (*b == v)
            return true;
    return false;
}

/* Greedy step t of sentence i (row r = its slot): the argmax (lowest id on ties, never pad nor
 * a banned token), or EOS at the maximum length. */
static void greedy_step(tg_translator *tr, int64_t i, int64_t t)
{
    int64_t V = tr->V, L = tr->L, r = tr->slot[i];
    int32_t best = tr->o.eos;
    if (tr->o.no_repeat_ngram)
        ban_list(tr, r, tr->hyp + r * L, t);
    if (t < tr->max_out[i] - 1) {
        best = -1;
        double xb = 0;
        for (int64_t v = 0; v < V; v++) {
            double xv = logit(tr, r, v);
            if (v != tr->o.pad && (best < 0 || xv > xb) && !banned(tr, r, v)) {
                best = (int32_t)v;
                xb = xv;
            }
        }
    }
    tr->score[r] += logit(tr, r, best) - tr->lse[r];
    if (best == tr->o.eos) {
        finish(tr, i, tr->hyp + r * L, t, tr->score[r]);
        tr->done[i] = true;
        return;
    }
    tr->hyp[r * L + t] = best;
    tr->tok[r] = best;
}

/* Insert candidate (beam, token, score) into sentence i's list of at most k, best first; an
 * equal score keeps the earlier (lower beam V + token) ahead. */
static void cand_insert(int64_t *cb, int32_t *ct, double *cs, int64_t *nc, int64_t k,
                        int64_t beam, int32_t token, double score)
{
    int64_t n = *nc;
    if (n == k && !(score > cs[n - 1]))
        return;
    int64_t p = n < k ? n : k - 1; /* the slot freed at the end */
    while (p > 0 && score > cs[p - 1]) {
        cb[p] = cb[p - 1];
        ct[p] = ct[p - 1];
        cs[p] = cs[p - 1];
        p--;
    }
    cb[p] = beam;
    ct[p] = token;
    cs[p] = score;
    if (n < k)
        *nc = n + 1;
}

/* Beam search step t of sentence i: fairseq's BeamSearch.step and the finalization of
 * sequence_generator.py. Its beams are the rows r0 .. r0 + nb - 1 (r0 = slot W: at step 0 one
 * row, since all beams start alike); the next beams go to rows q0 .. q0 + K - 1 of the next
 * step's layout (q0 = slot K) in nhyp, nscore, tok and rows (the row each continues). */
static void beam_step(tg_translator *tr, int64_t i, int64_t t)
{
    int64_t K = tr->K, V = tr->V, L = tr->L, r0 = tr->slot[i] * tr->W, q0 = tr->slot[i] * K;
    int64_t nb = t == 0 ? 1 : K;
    int32_t eos = tr->o.eos, pad = tr->o.pad;
    int64_t *cb = tr->cbeam + 2 * i * K, nc = 0;
    int32_t *ct = tr->ctok + 2 * i * K;
    double *cs = tr->cscore + 2 * i * K;
    if (t == tr->max_out[i] - 1) { /* the maximum length: every beam ends with EOS */
        for (int64_t j = 0; j < nb; j++)
            cand_insert(cb, ct, cs, &nc, nb, j, eos,
                        tr->score[r0 + j] + (logit(tr, r0 + j, eos) - tr->lse[r0 + j]));
        for (int64_t c = 0; c < nc; c++)
            finish(tr, i, tr->hyp + (r0 + cb[c]) * L, t, cs[c]);
        tr->done[i] = true;
        return; /* its rows: next_rows */
    }
    for (int64_t j = 0; j < nb; j++) { /* beams and tokens in flat order */
        double sc = tr->score[r0 + j], lse = tr->lse[r0 + j];
        if (tr->o.no_repeat_ngram)
            ban_list(tr, r0 + j, tr->hyp + (r0 + j) * L, t);
        if (!tr->f32) {
            for (int64_t v = 0; v < V; v++) {
                double c = sc + (logit(tr, r0 + j, v) - lse);
                if (v != pad && (nc < 2 * K || c > cs[nc - 1]) && !banned(tr, r0 + j, v))
                    cand_insert(cb, ct, cs, &nc, 2 * K, j, (int32_t)v, c);
            }
            continue;
        }
        /* f32 logits: once the list is full, a token enters only if sc + (x - lse) beats the
         * last score, so logits at or below a float bound under cs_last - sc + lse (minus a
         * margin far above the rounding of that sum) are skipped 16 at a time; the rest go
         * through the exact test of cand_insert (the same candidates as testing every one) */
        const float *x = tr->xf + (r0 + j) * V;
        float bound = -INFINITY;
        for (int64_t v0 = 0; v0 < V; v0 += 16) {
            int64_t v1 = v0 + 16 < V ? v0 + 16 : V;
            bool any = false;
            for (int64_t v = v0; v < v1; v++)
                any |= x[v] > bound;
            if (!any)
                continue;
            for (int64_t v = v0; v < v1; v++) {
                if (v == pad || !(x[v] > bound) || banned(tr, r0 + j, v))
                    continue;
                cand_insert(cb, ct, cs, &nc, 2 * K, j, (int32_t)v, sc + ((double)x[v] - lse));
                if (nc == 2 * K) {
                    double th = cs[nc - 1] - sc + lse;
                    th -= 1e-6 * (fabs(th) + fabs(sc) + fabs(lse) + 1.0);
                    bound = isfinite(th) ? nextafterf((float)th, -INFINITY) : -INFINITY;
                }
            }
        }
    }
    int64_t next = 0;
    for (int64_t c = 0; c < nc; c++) {
        const int32_t *h = tr->hyp + (r0 + cb[c]) * L;
        if (ct[c] == eos) {
            if (c < K)
                finish(tr, i, h, t, cs[c]);
        } else if (next < K) {
            int32_t *nh = tr->nhyp + (q0 + next) * L;
            memcpy(nh, h, sizeof(int32_t) * (size_t)t);
            nh[t] = ct[c];
            tr->nscore[q0 + next] = cs[c];
            tr->rows[q0 + next] = (int32_t)(r0 + cb[c]);
            tr->tok[q0 + next] = ct[c];
            next++;
        }
    }
    if (tr->nfin[i] >= K)
        tr->done[i] = true;
    /* else next == K: at most K of the 2K candidates end in EOS (one per beam); nhyp and
     * nscore become hyp and score after every sentence's step (beams_adopt) */
}

/* The next beams of the sentences that go on: nhyp and nscore into hyp and score (rows of the
 * next layout; at step 0 they overlap other sentences' current rows, hence after all). */
static void beams_adopt(tg_translator *tr, int64_t t)
{
    int64_t K = tr->K, L = tr->L;
    int nt = tg__threads(tr->ctx);
    bool par = (double)tr->S * (double)K * (double)(t + 1) >= (double)TG_PAR_MIN;
    /* each iteration writes the rows of its own slot */
    TG_OMP_FOR(nt, par)
    for (int64_t f = 0; f < tr->S; f++) {
        int64_t i = tr->sent[f];
        if (i < 0 || tr->done[i])
            continue;
        memcpy(tr->hyp + f * K * L, tr->nhyp + f * K * L,
               sizeof(int32_t) * (size_t)((K - 1) * L + t + 1));
        memcpy(tr->score + f * K, tr->nscore + f * K, sizeof(double) * (size_t)K);
    }
}

/* Sources into the generator: sentence i's on its K rows, a one-token dummy (EOS) on the rows
 * of sentences beyond n; the per-sentence state reset. */
static tg_status start(tg_translator *tr, int64_t n, const int32_t *const *src,
                       const int64_t *src_len)
{
    int64_t K = tr->K, R = tr->R, s = 1;
    for (int64_t i = 0; i < n; i++)
        if (src_len[i] > s)
            s = src_len[i];
    for (int64_t r = 0; r < R; r++) {
        int64_t i = r / K;
        int64_t len = i < n ? src_len[i] : 1;
        for (int64_t j = 0; j < s; j++)
            tr->src[r * s + j] = i < n && j < len ? src[i][j] : tr->o.eos;
        tr->slen[r] = len;
        tr->score[r] = 0;
        tr->rows[r] = (int32_t)r;
        tr->tok[r] = tr->o.bos;
    }
    for (int64_t i = 0; i < tr->N; i++) {
        tr->nfin[i] = 0;
        tr->done[i] = i >= n;
        tr->slot[i] = i;
        tr->sent[i] = i < n ? i : -1;
        tr->max_out[i] = i < n ? max_output(&tr->o, src_len[i], tr->Lm) : 1;
    }
    tr->S = n;
    tr->W = 1; /* step 0: one row per sentence (for beam search, its first beam's) */
    tg_status st = tg_generator_set_sources(tr->gen, tr->src, s, tr->slen);
    for (int64_t i = 0; i < n; i++)
        tr->rows[i] = (int32_t)(i * K);
    if (st == TG_OK && (n < tr->N || K > 1)) /* rows i K -> i (K = 1 greedy: identity) */
        st = tg_generator_select_rows(tr->gen, tr->rows, n);
    return st;
}

/* After step t's search: the next layout's rows (K per slot) and the row each continues
 * from (tr->rows; a finished slot's rows, and greedy's, continue from themselves, or at step
 * 0 from the slot's one row) and, when the live sentences fit a smaller row bucket, the
 * sentences of the slots beyond their count moved into the free slots below it (their rows,
 * hypotheses, scores and next tokens); then tg_generator_select_rows. */
static tg_status next_rows(tg_translator *tr, int64_t t, bool beam)
{
    int64_t K = tr->K, L = tr->L, S = tr->S, W = tr->W, live = 0;
    for (int64_t f = 0; f < S; f++) {
        int64_t i = tr->sent[f];
        bool on = i >= 0 && !tr->done[i];
        live += on;
        if (!on || !beam)
            for (int64_t j = 0; j < K; j++)
                tr->rows[f * K + j] = (int32_t)(W == K ? f * K + j : f * W);
    }
    tr->W = K; /* after step 0 of beam search, each slot's one row becomes K */
    int64_t S2 = S;
    if (tg_generator_graph_rows(tr->gen, live * K) < tg_generator_graph_rows(tr->gen, S * K)) {
        S2 = live;
        int64_t f = 0; /* the next free slot below S2 */
        for (int64_t g = S2; g < S; g++) {
            int64_t i = tr->sent[g];
            if (i < 0 || tr->done[i])
                continue;
            while (tr->sent[f] >= 0 && !tr->done[tr->sent[f]])
                f++;
            for (int64_t j = 0; j < K; j++) { /* slot g's rows into slot f's */
                int64_t a = f * K + j, b = g * K + j;
                tr->rows[a] = tr->rows[b];
                memcpy(tr->hyp + a * L, tr->hyp + b * L, sizeof(int32_t) * (size_t)(t + 1));
                tr->score[a] = tr->score[b];
                tr->tok[a] = tr->tok[b];
            }
            tr->sent[f] = i;
            tr->slot[i] = f;
            tr->sent[g] = -1;
        }
        for (int64_t g = S2; g < S; g++)
            tr->sent[g] = -1;
        tr->S = S2;
    } else if (!beam) {
        return TG_OK; /* greedy rows never move */
    }
    return tg_generator_select_rows(tr->gen, tr->rows, S2 * K);
}

/* The first non-finite logit of a live row as a run error, or TG_OK. */
static tg_status check_finite(tg_translator *tr, int64_t t)
{
    for (int64_t r = 0; r < tr->S * tr->W; r++)
        if (tr->bad[r] >= 0) {
            double v = logit(tr, r, tr->bad[r]);
            tg__run_err(tr->ctx, TG_ERR_NONFINITE, "tg_translate_batch",
                        "sentence %lld, step %lld: the logit of token %lld is %s (beam %lld)",
                        (long long)tr->sent[r / tr->W], (long long)t, (long long)tr->bad[r],
                        isnan(v) ? "nan" : v > 0 ? "inf" : "-inf", (long long)(r % tr->W));
            return TG_ERR_NONFINITE;
        }
    return TG_OK;
}

tg_status tg_translate_batch(tg_translator *tr, int64_t n, const int32_t *const *src,
                             const int64_t *src_len, tg_translation *out)
{
    static const char *fn = "tg_translate_batch";
    if (!tr)
        return TG_ERR_ARG;
    tg__begin(tr->ctx);
    if (tr->freed) {
        tg__run_err(tr->ctx, TG_ERR_ARG, fn, "the translator was freed (tg_translator_free)");
        return TG_ERR_ARG;
    }
    if (!batch_ok(tr, n, src, src_len, out))
        return TG_ERR_ARG;
    tg_status st = start(tr, n, src, src_len);
    int64_t steps = 0, N = tr->N, K = tr->K;
    for (int64_t i = 0; i < n; i++)
        if (tr->max_out[i] > steps)
            steps = tr->max_out[i];
    bool beam = tr->o.method == TG_SEARCH_BEAM;
    int nt = tg__threads(tr->ctx);
    bool par = (double)n * (double)K * (double)tr->V >= (double)TG_PAR_MIN;
    for (int64_t t = 0; st == TG_OK && t < steps; t++) {
        st = tg_generator_feed(tr->gen, tr->tok, 1);
        if (st != TG_OK)
            break;
        tg_tensor *lg = tg_generator_logits(tr->gen);
        tr->f32 = tg_tensor_dtype(lg) == TG_F32;
        tr->xf = tr->f32 ? tg_tensor_data(lg) : NULL;
        tr->xd = tr->f32 ? NULL : tg_tensor_data(lg);
        row_lse(tr, t);
        if ((st = check_finite(tr, t)) != TG_OK)
            break;
        /* each iteration reads and writes only sentence i's rows, candidates and results */
        TG_OMP_FOR(nt, par)
        for (int64_t i = 0; i < N; i++) {
            if (tr->done[i])
                continue;
            if (beam)
                beam_step(tr, i, t);
            else
                greedy_step(tr, i, t);
        }
        bool all = true;
        for (int64_t i = 0; i < n; i++)
            all = all && tr->done[i];
        if (all)
            break;
        if (beam)
            beams_adopt(tr, t);
        st = next_rows(tr, t, beam);
    }
    if (st != TG_OK)
        return st;
    for (int64_t i = 0; i < n; i++) { /* the best finished hypothesis, the first on ties */
        int64_t b = 0;
        for (int64_t f = 1; f < tr->nfin[i]; f++)
            if (tr->fin_score[i * K + f] > tr->fin_score[i * K + b])
                b = f;
        int32_t *o = tr->out + i * tr->L;
        int64_t len = tr->fin_len[i * K + b];
        memcpy(o, tr->fin + (i * K + b) * tr->L, sizeof(int32_t) * (size_t)len);
        out[i].ids = o;
        out[i].len = len;
        out[i].score = tr->fin_score[i * K + b];
    }
    return TG_OK;
}

tg_search_opts tg_translator_opts(const tg_translator *tr)
{
    return tr ? tr->o : tg_search_defaults();
}

tg_generator *tg_translator_generator(const tg_translator *tr)
{
    return tr && !tr->freed ? tr->gen : NULL;
}

void tg_translator_free(tg_translator *tr)
{
    if (!tr || tr->freed)
        return;
    tg_ctx *ctx = tr->ctx;
    tg_generator_free(tr->gen);
    void *bufs[] = {tr->slot, tr->sent, tr->lse, tr->bad, tr->score, tr->nscore, tr->hyp, tr->nhyp,
                    tr->src, tr->fin, tr->rows, tr->tok, tr->slen, tr->fin_len, tr->fin_score,
                    tr->nfin, tr->max_out, tr->done, tr->cbeam, tr->ctok, tr->cscore, tr->out};
    for (size_t k = 0; k < sizeof bufs / sizeof bufs[0]; k++)
        tg__free(ctx, bufs[k]);
    tr->freed = true; /* the record itself stays (small) until the context goes */
}
