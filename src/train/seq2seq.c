/*
 * seq2seq.c - the loss of the encoder-decoder model on batches of any shape
 * (include/tgrad_train.h, "Sequence-to-sequence batches").
 *
 * Graphs have static shapes, and length-bucketed batches come in many shapes (n, S, T). Each
 * shape gets its graph the first time it is seen:
 *   src (n, S) i32, src_pad (n, S) float (1 at padding), tgt_in (n, T) i32, labels (n, T) i32
 *   logits = tg_transformer_forward_seq2seq(src, tgt_in, src_key_padding_mask = src_pad)
 *   loss   = cross-entropy(logits, labels, ignore_index, label smoothing)   mean over tokens
 * a training graph (gradients; the caller's label smoothing) or an evaluation graph (no_grad,
 * no smoothing), kept for the rest of the object's life: bucketing by length gives a fixed
 * set of shapes when the sorted lengths are the same every epoch, so after the first epoch no
 * step builds a graph. Sampled segmentations (tg_seq2seq_sample) change the lengths every
 * epoch, so the set keeps growing (docs/training.md, "Subword regularization"). All graphs
 * share one arena (tg_arena), so memory is the largest graph's arena plus each graph's
 * records (about 1 MB for the translation defaults).
 */
#include "tgrad_train.h"
#include "core.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    int64_t n, S, T;
    bool train;
    tg_tensor *src, *src_pad, *tgt_in, *labels, *loss;
    tg_graph *g;
} s2s_graph;

struct tg_seq2seq_loss {
    tg_ctx *ctx;
    const tg_transformer *m;
    tg_seq2seq_loss_opts opts;
    s2s_graph *graphs;
    int64_t n_graphs, cap;
    tg_arena *arena; /* shared by every graph: only one runs at a time */
    float *mask32;  /* (n S) mask staging, grown as needed */
    double *mask64;
    size_t mask_cap;
};

tg_seq2seq_loss_opts tg_seq2seq_loss_defaults(void)
{
    tg_seq2seq_loss_opts o = {0.0, -100, TG_PRECISION_F32};
    return o;
}

tg_seq2seq_loss *tg_seq2seq_loss_new(tg_ctx *ctx, const tg_transformer *m,
                                     const tg_seq2seq_loss_opts *opts)
{
    static const char *fn = "tg_seq2seq_loss_new";
    if (!ctx)
        return NULL;
    tg__begin(ctx);
    tg_seq2seq_loss_opts o = opts ? *opts : tg_seq2seq_loss_defaults();
    if (!m || !m->tok_emb || m->cfg.n_decoder_layers < 1)
        return tg__run_err(ctx, TG_ERR_ARG, fn, "the model is not an initialised "
                           "encoder-decoder (cfg.n_decoder_layers > 0)");
    if (o.precision != TG_PRECISION_F32 && o.precision != TG_PRECISION_BF16)
        return tg__run_err(ctx, TG_ERR_ARG, fn, "unknown precision %d (TG_PRECISION_F32 or "
                           "TG_PRECISION_BF16)", o.precision);
    if (o.precision == TG_PRECISION_BF16 && m && m->tok_emb &&
        tg_tensor_dtype(m->tok_emb) == TG_F64)
        return tg__run_err(ctx, TG_ERR_DTYPE, fn, "bf16 precision is for f32 models; this one "
                           "is f64");
    if (!(o.label_smoothing >= 0 && o.label_smoothing <= 1))
        return tg__run_err(ctx, TG_ERR_ARG, fn, "label_smoothing is %g (expected 0 to 1)",
                           o.label_smoothing);
    if (o.ignore_index >= 0 && o.ignore_index < m->cfg.vocab_size)
        return tg__run_err(ctx, TG_ERR_ARG, fn, "ignore_index %lld is a token id (expected "
                           "a value outside [0, %lld), e.g. -100)", (long long)o.ignore_index,
                           (long long)m->cfg.vocab_size);
    tg_seq2seq_loss *L = calloc(1, sizeof *L);
    if (!L)
        return tg__run_err(ctx, TG_ERR_NOMEM, fn, "out of memory");
    L->ctx = ctx;
    L->m = m;
    L->opts = o;
    L->arena = tg_arena_new(ctx);
    if (!L->arena) {
        free(L);
        return NULL;
    }
    return L;
}

/* Check a batch against the model; false with a run-time error. */
static bool batch_ok(tg_seq2seq_loss *L, const char *fn, const tg_seq2seq_batch *b)
{
    tg_ctx *ctx = L->ctx;
    const tg_transformer_config *c = &L->m->cfg;
    if (!b || !b->src || !b->src_len || !b->tgt_in || !b->labels) {
        tg__run_err(ctx, TG_ERR_ARG, fn, "the batch or one of its arrays is NULL");
        return false;
    }
    if (b->n < 1 || b->S < 1 || b->T < 1 || b->S > c->max_seq_len || b->T > c->max_seq_len ||
        b->n > TG_MAX_NUMEL / (b->S > b->T ? b->S : b->T)) {
        tg__run_err(ctx, TG_ERR_SHAPE, fn, "batch shape n %lld, S %lld, T %lld (expected "
                    "n >= 1 and 1 <= S, T <= max_seq_len %lld)", (long long)b->n,
                    (long long)b->S, (long long)b->T, (long long)c->max_seq_len);
        return false;
    }
    for (int64_t i = 0; i < b->n; i++)
        if (b->src_len[i] < 1 || b->src_len[i] > b->S) {
            tg__run_err(ctx, TG_ERR_ARG, fn, "src_len[%lld] is %lld (expected 1 to S = %lld)",
                        (long long)i, (long long)b->src_len[i], (long long)b->S);
            return false;
        }
    return true;
}

static s2s_graph *graph_for(tg_seq2seq_loss *L, const char *fn, const tg_seq2seq_batch *b,
                            bool train)
{
    for (int64_t i = 0; i < L->n_graphs; i++) {
        s2s_graph *q = &L->graphs[i];
        if (q->n == b->n && q->S == b->S && q->T == b->T && q->train == train)
            return q;
    }
    tg_ctx *ctx = L->ctx;
    if (L->n_graphs == L->cap) {
        int64_t cap = L->cap ? 2 * L->cap : 16;
        s2s_graph *g = realloc(L->graphs, sizeof *g * (size_t)cap);
        if (!g)
            return tg__run_err(ctx, TG_ERR_NOMEM, fn, "out of memory");
        L->graphs = g;
        L->cap = cap;
    }
    s2s_graph q = {b->n, b->S, b->T, train, NULL, NULL, NULL, NULL, NULL, NULL};
    tg_dtype dt = tg_tensor_dtype(L->m->tok_emb);
    q.src = tg_input(ctx, TG_I32, TG_DIMS(b->n, b->S), "src_ids");
    q.src_pad = tg_input(ctx, dt, TG_DIMS(b->n, b->S), "src_key_padding_mask");
    q.tgt_in = tg_input(ctx, TG_I32, TG_DIMS(b->n, b->T), "tgt_ids");
    q.labels = tg_input(ctx, TG_I32, TG_DIMS(b->n, b->T), "labels");
    tg_tensor *logits = tg_transformer_forward_seq2seq(ctx, L->m, q.src, q.tgt_in, q.src_pad,
                                                       NULL);
    q.loss = tg_cross_entropy_smoothed(ctx, logits, q.labels, L->opts.ignore_index,
                                       train ? L->opts.label_smoothing : 0.0);
    tg_graph_opts go = {0};
    go.no_grad = !train;
    go.one_backward = train;
    go.precision = L->opts.precision;
    go.arena = L->arena;
    q.g = tg_graph_new_opts(ctx, &q.loss, 1, &go);
    if (!q.g) {
        /* a build error: keep it as this call's run-time error, so later builds still work */
        char msg[512];
        snprintf(msg, sizeof msg, "%s", tg_ctx_message(ctx));
        tg_status s = tg_ctx_status(ctx);
        tg_ctx_clear_error(ctx);
        return tg__run_err(ctx, s, fn, "building the graph for batch shape (%lld, %lld, %lld): "
                           "%s", (long long)b->n, (long long)b->S, (long long)b->T, msg);
    }
    L->graphs[L->n_graphs] = q;
    return &L->graphs[L->n_graphs++];
}

/* The batch into the graph's inputs. */
static bool set_inputs(tg_seq2seq_loss *L, const char *fn, s2s_graph *q,
                       const tg_seq2seq_batch *b)
{
    size_t ns = (size_t)(b->n * b->S), nt = (size_t)(b->n * b->T);
    tg_dtype dt = tg_tensor_dtype(q->src_pad);
    if (ns > L->mask_cap) {
        float *f = dt == TG_F32 ? realloc(L->mask32, ns * sizeof *f) : L->mask32;
        double *d = dt == TG_F64 ? realloc(L->mask64, ns * sizeof *d) : L->mask64;
        if (!f || !d) {
            if (f)
                L->mask32 = f;
            if (d)
                L->mask64 = d;
            if ((dt == TG_F32 && !f) || (dt == TG_F64 && !d)) {
                tg__run_err(L->ctx, TG_ERR_NOMEM, fn, "out of memory");
                return false;
            }
        }
        L->mask32 = f;
        L->mask64 = d;
        L->mask_cap = ns;
    }
    for (int64_t i = 0; i < b->n; i++)
        for (int64_t j = 0; j < b->S; j++) {
            size_t k = (size_t)(i * b->S + j);
            if (dt == TG_F32)
                L->mask32[k] = j >= b->src_len[i] ? 1.0f : 0.0f;
            else
                L->mask64[k] = j >= b->src_len[i] ? 1.0 : 0.0;
        }
    const void *mask = dt == TG_F32 ? (const void *)L->mask32 : (const void *)L->mask64;
    return tg_tensor_set_data(q->src, b->src, TG_I32, ns) == TG_OK &&
           tg_tensor_set_data(q->src_pad, mask, dt, ns) == TG_OK &&
           tg_tensor_set_data(q->tgt_in, b->tgt_in, TG_I32, nt) == TG_OK &&
           tg_tensor_set_data(q->labels, b->labels, TG_I32, nt) == TG_OK;
}

static int64_t count_tokens(const tg_seq2seq_batch *b, int64_t ignore)
{
    int64_t k = 0;
    for (int64_t i = 0; i < b->n * b->T; i++)
        k += b->labels[i] != ignore;
    return k;
}

const tg_graph *tg_seq2seq_loss_graph(tg_seq2seq_loss *L, const tg_seq2seq_batch *b,
                                      bool train)
{
    static const char *fn = "tg_seq2seq_loss_graph";
    if (!L)
        return NULL;
    tg__begin(L->ctx);
    if (!batch_ok(L, fn, b))
        return NULL;
    s2s_graph *q = graph_for(L, fn, b, train);
    return q ? q->g : NULL;
}

tg_status tg_seq2seq_loss_backward(tg_seq2seq_loss *L, const tg_seq2seq_batch *b, double *loss)
{
    static const char *fn = "tg_seq2seq_loss_backward";
    if (!L)
        return TG_ERR_ARG;
    tg__begin(L->ctx);
    if (!batch_ok(L, fn, b))
        return tg_ctx_status(L->ctx);
    s2s_graph *q = graph_for(L, fn, b, true);
    if (!q || !set_inputs(L, fn, q, b))
        return tg_ctx_status(L->ctx);
    tg_graph_zero_grad(q->g);
    tg_status s = tg_graph_forward(q->g);
    if (s == TG_OK)
        s = tg_graph_backward(q->g, q->loss, NULL);
    if (s == TG_OK && loss)
        *loss = tg_get(q->loss, 0);
    return s;
}

tg_status tg_seq2seq_loss_eval(tg_seq2seq_loss *L, const tg_seq2seq_batch *b, double *sum,
                               int64_t *tokens)
{
    static const char *fn = "tg_seq2seq_loss_eval";
    if (!L)
        return TG_ERR_ARG;
    tg__begin(L->ctx);
    if (!batch_ok(L, fn, b))
        return tg_ctx_status(L->ctx);
    s2s_graph *q = graph_for(L, fn, b, false);
    if (!q || !set_inputs(L, fn, q, b))
        return tg_ctx_status(L->ctx);
    tg_status s = tg_graph_forward(q->g);
    if (s != TG_OK)
        return s;
    int64_t k = count_tokens(b, L->opts.ignore_index);
    if (sum)
        *sum = tg_get(q->loss, 0) * (double)k; /* the graph's mean, times its tokens */
    if (tokens)
        *tokens = k;
    return TG_OK;
}

int64_t tg_seq2seq_loss_graphs(const tg_seq2seq_loss *L)
{
    return L ? L->n_graphs : 0;
}

void tg_seq2seq_loss_free(tg_seq2seq_loss *L)
{
    if (!L)
        return;
    for (int64_t i = 0; i < L->n_graphs; i++)
        tg_graph_free(L->graphs[i].g);
    free(L->graphs);
    free(L->mask32);
    free(L->mask64);
    free(L);
}

/* ---- padded batches of sentence pairs ------------------------------------------------------ */

int64_t tg_seq2seq_batch_fill(const tg_seq2seq_data *d, const int64_t *examples, int64_t n,
                              int64_t S, int64_t T, int32_t ignore_index, int32_t *src,
                              int64_t *src_len, int32_t *tgt_in, int32_t *labels,
                              tg_seq2seq_batch *out)
{
    if (!d || !examples || n < 1 || !src || !src_len || !tgt_in || !labels)
        return -1;
    int64_t pairs = tg_seq2seq_get_info(d).pairs;
    for (int64_t r = 0; r < n; r++)
        if (examples[r] < 0 || examples[r] >= pairs ||
            tg_seq2seq_src_len(d, examples[r]) > S || tg_seq2seq_tgt_len(d, examples[r]) > T)
            return -1;
    int32_t pad = tg_seq2seq_get_info(d).pad_id;
    int64_t tokens = 0;
    for (int64_t r = 0; r < n; r++) {
        int64_t sl, tl;
        const int32_t *s = tg_seq2seq_source(d, examples[r], &sl);
        const int32_t *t = tg_seq2seq_target(d, examples[r], &tl);
        src_len[r] = sl;
        for (int64_t j = 0; j < S; j++)
            src[r * S + j] = j < sl ? s[j] : pad;
        for (int64_t j = 0; j < T; j++) {
            tgt_in[r * T + j] = j == 0 ? TG_TOKEN_BOS : j <= tl ? t[j - 1] : pad;
            labels[r * T + j] = j < tl ? t[j] : j == tl ? TG_TOKEN_EOS : ignore_index;
        }
        tokens += tl + 1;
    }
    if (out)
        *out = (tg_seq2seq_batch){n, S, T, src, src_len, tgt_in, labels};
    return tokens;
}

/* ---- evaluation over a data set ------------------------------------------------------------ */

/* tg_seq2seq_evaluate's batches: epoch 0's plan and one set of arrays for the largest batch. */
typedef struct {
    tg_seq2seq_loss *L;
    const tg_seq2seq_data *d;
    tg_batches *plan;
    int32_t *src, *tin, *lab;
    int64_t *slen;
} eval_run;

/* tg_eval_batch_fn: batch i of the plan, filled by tgrad_data.h's rule, scored. */
static tg_status eval_batch(void *user, int64_t i, double *sum, int64_t *tokens)
{
    eval_run *e = user;
    tg_batch bt = tg_batches_get(e->plan, i);
    tg_seq2seq_batch b;
    if (tg_seq2seq_batch_fill(e->d, bt.examples, bt.n, bt.src_len, bt.tgt_len,
                              (int32_t)e->L->opts.ignore_index, e->src, e->slen, e->tin, e->lab,
                              &b) < 0) {
        tg__run_err(e->L->ctx, TG_ERR_STATE, "tg_seq2seq_evaluate", "batch %lld does not fit "
                    "its shape", (long long)i);
        return TG_ERR_STATE;
    }
    return tg_seq2seq_loss_eval(e->L, &b, sum, tokens);
}

tg_status tg_seq2seq_evaluate(tg_seq2seq_loss *L, const tg_seq2seq_data *d,
                              int64_t batch_tokens, uint64_t seed, double *loss_per_token,
                              int64_t *tokens)
{
    static const char *fn = "tg_seq2seq_evaluate";
    if (loss_per_token)
        *loss_per_token = NAN;
    if (tokens)
        *tokens = 0;
    if (!L)
        return TG_ERR_ARG;
    tg__begin(L->ctx);
    if (!d || !loss_per_token) {
        tg__run_err(L->ctx, TG_ERR_ARG, fn, "%s is NULL", !d ? "the data" : "the result");
        return TG_ERR_ARG;
    }
    eval_run e = {L, d, tg_seq2seq_batches(d, batch_tokens, seed, 0), NULL, NULL, NULL, NULL};
    if (!e.plan)
        return tg_ctx_status(L->ctx) != TG_OK ? tg_ctx_status(L->ctx) : TG_ERR_ARG;
    int64_t nb = tg_batches_count(e.plan), ms = 1, mt = 1, mn = 1;
    for (int64_t i = 0; i < nb; i++) { /* each batch holds at most batch_tokens positions */
        tg_batch bt = tg_batches_get(e.plan, i);
        ms = bt.n * bt.src_len > ms ? bt.n * bt.src_len : ms;
        mt = bt.n * bt.tgt_len > mt ? bt.n * bt.tgt_len : mt;
        mn = bt.n > mn ? bt.n : mn;
    }
    e.src = malloc(sizeof *e.src * (size_t)ms);
    e.tin = malloc(sizeof *e.tin * (size_t)mt);
    e.lab = malloc(sizeof *e.lab * (size_t)mt);
    e.slen = malloc(sizeof *e.slen * (size_t)mn);
    tg_status s;
    if (!e.src || !e.tin || !e.lab || !e.slen) {
        tg__run_err(L->ctx, TG_ERR_NOMEM, fn, "out of memory");
        s = TG_ERR_NOMEM;
    } else {
        s = tg_evaluate(L->ctx, nb, eval_batch, &e, loss_per_token, tokens);
    }
    free(e.src);
    free(e.tin);
    free(e.lab);
    free(e.slen);
    tg_batches_free(e.plan);
    return s;
}
