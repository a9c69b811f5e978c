/*
 * tokens.c - the built-in run of a per-position model (include/tgrad_train.h): the graph of
 * `tgrad train --text` and of its tasks, and the batch, micro-batch and evaluation callbacks
 * tg_train_run drives:
 *   ids, targets (Bm, T) -> logits (Bm, T, V) -> loss = mean CE (smoothed for training)
 *   micro-batch i: rows i Bm .. (i+1) Bm - 1 of the step's (B, T) batch, backward seeded 1/K
 *   evaluation: text: tg_text_evaluate; task: loss and token accuracy over 8 held-out batches;
 *   seq2seq (teacher forcing: decoder input = BOS + targets shifted right): loss, and the
 *   exact-sequence and token accuracy of greedy decoding (tg_greedy, made at the first
 *   evaluation, or the caller's decoder) over the same batches
 * Layer 9 (run): the seq2seq evaluation decodes (layer 8).
 */
#include "tgrad_decode.h"
#include "tgrad_train.h"
#include "core.h"

#include <math.h>
#include <stdlib.h>

static const char *FN = "tg_train_tokens_new";

struct tg_train_tokens {
    tg_ctx *ctx;
    tg_train_tokens_opts o;
    const tg_transformer *model; /* borrowed: the seq2seq evaluation's greedy decoder */
    int64_t Bm, V;
    tg_tensor *ids, *tgt, *dec, *logits, *loss, *val_loss, *dy;
    tg_graph *g;
    tg_grad_accum *accum;
    int32_t *ids_buf, *tgt_buf; /* (B, T): the step's batch, or a held-out batch */
    int32_t *dec_buf, *out_buf; /* seq2seq (B, T): decoder inputs; greedy decoding's output */
    tg_status (*decode)(void *user, const int32_t *src, int32_t *out);
    void *decode_user;
    tg_greedy *greedy; /* seq2seq without a caller's decoder: tg_greedy over the model */
    double tok_acc; /* seq2seq: the last evaluation's token accuracy */
};

static bool opts_ok(tg_ctx *ctx, const tg_transformer *model, const tg_train_tokens_opts *o)
{
    const char *why = NULL;
    if (!model || !o)
        why = "NULL argument";
    else if (o->batch < 1 || o->seq_len < 1 || o->grad_accum < 1 || o->batch % o->grad_accum)
        why = "batch, seq_len and grad_accum must be >= 1, grad_accum dividing batch";
    else if (o->first < 0 || o->count < 1 || o->first + o->count > o->grad_accum)
        why = "first and count must name micro-batches in [0, grad_accum)";
    else if (!o->text && !tg_task_name(o->task))
        why = "no corpus and no task";
    else if (o->seq2seq && (o->text || model->cfg.n_decoder_layers < 1))
        why = "seq2seq trains an encoder-decoder model on a task";
    if (why)
        tg__run_err(ctx, TG_ERR_ARG, FN, "%s", why);
    return why == NULL;
}

/* The graph over Bm rows and, K > 1, the seed 1/K and the accumulator. */
static bool build(tg_train_tokens *m, const tg_transformer *model)
{
    tg_ctx *ctx = m->ctx;
    const tg_train_tokens_opts *o = &m->o;
    m->ids = tg_input(ctx, TG_I32, TG_DIMS(m->Bm, o->seq_len), o->seq2seq ? "src_ids" : "ids");
    m->tgt = tg_input(ctx, TG_I32, TG_DIMS(m->Bm, o->seq_len), "targets");
    if (o->seq2seq) { /* teacher forcing: decoder input = BOS + the target shifted right */
        m->dec = tg_input(ctx, TG_I32, TG_DIMS(m->Bm, o->seq_len), "tgt_ids");
        m->logits = tg_transformer_forward_seq2seq(ctx, model, m->ids, m->dec, NULL, NULL);
    } else {
        m->logits = tg_transformer_forward(ctx, model, m->ids, NULL); /* (Bm, T, V) */
    }
    /* mean over Bm T targets; with label smoothing, evaluation reads the plain loss */
    m->loss = m->val_loss = tg_cross_entropy(ctx, m->logits, m->tgt, -1);
    if (!o->text) /* the held-out accuracy reads the logits after a forward */
        tg_keep(m->logits);
    if (o->label_smoothing > 0)
        m->loss = tg_cross_entropy_smoothed(ctx, m->logits, m->tgt, -1, o->label_smoothing);
    tg_tensor *outs[2] = {m->loss, m->val_loss};
    /* one backward per forward: what backward reads is freed as soon as it was read */
    tg_graph_opts go = {.one_backward = true, .precision = o->precision};
    go.detect_anomaly = o->detect_anomaly; /* first NaN/inf named by op and tensor */
    m->g = tg_graph_new_opts(ctx, outs, m->loss == m->val_loss ? 1 : 2, &go);
    if (!m->g)
        return false;
    if (o->grad_accum > 1) {
        /* each micro-batch's mean loss counts 1/K of the global batch's mean */
        m->dy = tg_const(ctx, tg_tensor_dtype(m->loss), 0, NULL, "loss_share");
        if (m->dy)
            tg_fill(m->dy, 1.0 / (double)o->grad_accum);
        m->accum = tg_grad_accum_new(ctx, 0, NULL, o->grad_accum, o->first, o->count);
        if (!m->dy || !m->accum)
            return false;
    }
    size_t bt = (size_t)(o->batch * o->seq_len);
    m->ids_buf = malloc(sizeof(int32_t) * bt);
    m->tgt_buf = malloc(sizeof(int32_t) * bt);
    if (o->seq2seq) {
        m->dec_buf = malloc(sizeof(int32_t) * bt);
        m->out_buf = malloc(sizeof(int32_t) * bt);
    }
    if (!m->ids_buf || !m->tgt_buf || (o->seq2seq && (!m->dec_buf || !m->out_buf))) {
        tg__run_err(ctx, TG_ERR_NOMEM, FN, "out of memory");
        return false;
    }
    return true;
}

tg_train_tokens *tg_train_tokens_new(tg_ctx *ctx, const tg_transformer *model,
                                     const tg_train_tokens_opts *o)
{
    if (!ctx)
        return NULL;
    tg__begin(ctx);
    if (!opts_ok(ctx, model, o))
        return NULL;
    tg_train_tokens *m = calloc(1, sizeof *m);
    if (!m) {
        tg__run_err(ctx, TG_ERR_NOMEM, FN, "out of memory");
        return NULL;
    }
    m->ctx = ctx;
    m->o = *o;
    m->model = model;
    m->Bm = o->batch / o->grad_accum;
    m->V = model->cfg.vocab_size;
    m->tok_acc = NAN;
    if (!build(m, model)) {
        if (tg_ctx_status(ctx) == TG_OK)
            tg__run_err(ctx, TG_ERR_STATE, FN, "building the training graph failed");
        tg_train_tokens_free(m);
        return NULL;
    }
    return m;
}

/* The graph's inputs from rows @p row .. row + Bm - 1 of the batch buffers. */
static tg_status set_rows(tg_train_tokens *m, int64_t row)
{
    size_t bt = (size_t)(m->Bm * m->o.seq_len), off = (size_t)(row * m->o.seq_len);
    if (m->o.seq2seq) { /* teacher forcing */
        tg_shift_right(m->Bm, m->o.seq_len, m->tgt_buf + off, m->o.bos, m->dec_buf + off);
        tg_status s = tg_tensor_set_data(m->dec, m->dec_buf + off, TG_I32, bt);
        if (s != TG_OK)
            return s;
    }
    tg_status s = tg_tensor_set_data(m->ids, m->ids_buf + off, TG_I32, bt);
    return s != TG_OK ? s : tg_tensor_set_data(m->tgt, m->tgt_buf + off, TG_I32, bt);
}

static tg_status batch(void *user, int64_t step)
{
    tg_train_tokens *m = user;
    const tg_train_tokens_opts *o = &m->o;
    (void)step;
    tg_status s = o->text ? tg_text_train_batch(m->ctx, o->text, o->batch, o->seq_len,
                                                m->ids_buf, m->tgt_buf)
                          : tg_task_train_batch(m->ctx, o->task, o->batch, o->seq_len,
                                                m->ids_buf, m->tgt_buf);
    if (s == TG_OK)
        tg_ctx_set_training(m->ctx, true);
    return s;
}

/* The status of a call that failed with its error on the context. */
static tg_status failed(const tg_ctx *ctx)
{
    tg_status s = tg_ctx_status(ctx);
    return s != TG_OK ? s : TG_ERR_STATE;
}

/* Micro-batch @p i: forward and backward, its loss counted 1/K (tg_micro_batch_fn). */
static tg_status micro(void *user, int64_t i, double *l)
{
    tg_train_tokens *m = user;
    int64_t K = m->o.grad_accum;
    tg_graph_zero_grad(m->g);
    if (set_rows(m, i * m->Bm) != TG_OK || tg_graph_forward(m->g) != TG_OK ||
        tg_graph_backward(m->g, m->loss, K > 1 ? m->dy : NULL) != TG_OK)
        return failed(m->ctx);
    *l = K == 1 ? tg_get(m->loss, 0) : tg_get(m->loss, 0) / (double)K;
    return TG_OK;
}

/* The rows r of the micro-batch whose argmax over the logits equals the target. */
static int64_t count_right(const tg_train_tokens *m, const int32_t *tgt)
{
    int64_t right = 0;
    for (int64_t r = 0; r < m->Bm * m->o.seq_len; r++) {
        int64_t arg = 0;
        double bestv = -INFINITY;
        for (int64_t v = 0; v < m->V; v++) {
            double x = tg_get(m->logits, r * m->V + v);
            if (x > bestv) {
                bestv = x;
                arg = v;
            }
        }
        right += arg == tgt[r];
    }
    return right;
}

/* The held-out loss of the batch in ids_buf/tgt_buf, added to *sum (the graph runs Bm rows at
 * a time, K chunks, each added in order); with right, also the right tokens of each chunk. */
static tg_status batch_loss(tg_train_tokens *m, double *sum, int64_t *right, int64_t *total)
{
    int64_t K = m->o.grad_accum, T = m->o.seq_len;
    for (int64_t c = 0; c < K; c++) {
        if (set_rows(m, c * m->Bm) != TG_OK || tg_graph_forward(m->g) != TG_OK)
            return failed(m->ctx);
        *sum += K == 1 ? tg_get(m->val_loss, 0) : tg_get(m->val_loss, 0) / (double)K;
        if (right) {
            *right += count_right(m, m->tgt_buf + c * m->Bm * T);
            *total += m->Bm * T;
        }
    }
    return TG_OK;
}

/* The task's held-out loss and token accuracy over 8 fixed batches of unseen sequences. */
static tg_status evaluate_task(tg_train_tokens *m, double *val, double *acc)
{
    const tg_train_tokens_opts *o = &m->o;
    uint64_t rs = o->eval_seed ^ 0x5eed5eedULL;
    int64_t B = o->batch, T = o->seq_len, correct = 0, total = 0;
    double sum = 0;
    for (int k = 0; k < 8; k++) {
        tg_task_batch(o->task, &rs, B, T, m->ids_buf, m->tgt_buf);
        tg_status s = batch_loss(m, &sum, &correct, &total);
        if (s != TG_OK)
            return s;
    }
    *val = sum / 8;
    *acc = (double)correct / (double)total;
    return TG_OK;
}

/* seq2seq: the exact sequences and the right tokens of one greedy decoding of the batch. */
static tg_status decode_count(tg_train_tokens *m, int64_t *exact, int64_t *right)
{
    int64_t B = m->o.batch, T = m->o.seq_len;
    if (!m->decode && !m->greedy) { /* the first evaluation: the library's greedy decoder */
        m->greedy = tg_greedy_new(m->ctx, m->model, B, T, m->o.bos, m->o.no_cache,
                                  m->o.precision);
        if (!m->greedy)
            return failed(m->ctx);
    }
    tg_status s = m->decode ? m->decode(m->decode_user, m->ids_buf, m->out_buf)
                            : tg_greedy_decode(m->greedy, m->ids_buf, m->out_buf);
    if (s != TG_OK)
        return s;
    for (int64_t b = 0; b < B; b++) {
        int64_t ok = 0;
        for (int64_t i = 0; i < T; i++)
            ok += m->out_buf[b * T + i] == m->tgt_buf[b * T + i];
        *right += ok;
        *exact += ok == T;
    }
    return TG_OK;
}

/* seq2seq: held-out loss (teacher forcing), and exact-sequence and token accuracy of greedy
 * decoding, over 8 fixed batches of unseen random sequences. */
static tg_status evaluate_seq2seq(tg_train_tokens *m, double *val, double *acc)
{
    const tg_train_tokens_opts *o = &m->o;
    uint64_t rs = o->eval_seed ^ 0x5eed5eedULL;
    int64_t B = o->batch, T = o->seq_len, exact = 0, right = 0;
    double sum = 0;
    for (int k = 0; k < 8; k++) {
        tg_task_batch(o->task, &rs, B, T, m->ids_buf, m->tgt_buf);
        tg_status s = batch_loss(m, &sum, NULL, NULL);
        if (s != TG_OK)
            return s;
        s = decode_count(m, &exact, &right);
        if (s == TG_ERR_NONFINITE) { /* NaN or inf logits: nothing counts as decoded */
            tg_ctx_clear_error(m->ctx);
            *val = NAN;
            *acc = m->tok_acc = 0;
            return TG_OK;
        }
        if (s != TG_OK)
            return s;
    }
    *val = sum / 8;
    *acc = (double)exact / (double)(8 * B);
    m->tok_acc = (double)right / (double)(8 * B * T);
    return TG_OK;
}

tg_status tg_train_tokens_evaluate(tg_train_tokens *m, double *val, double *acc, bool *reached)
{
    *val = *acc = NAN;
    *reached = false;
    tg_ctx_set_training(m->ctx, false);
    tg_status s = m->o.text      ? tg_text_evaluate(m->ctx, m->o.text, m->g, m->ids, m->tgt,
                                                    m->val_loss, val, NULL)
                  : m->o.seq2seq ? evaluate_seq2seq(m, val, acc)
                                 : evaluate_task(m, val, acc);
    if (s != TG_OK)
        return s;
    *reached = !m->o.text && m->o.target_acc > 0 && *acc >= m->o.target_acc;
    tg_ctx_set_training(m->ctx, true);
    return TG_OK;
}

static tg_status evaluate(void *user, int64_t step, double *val, double *metric, bool *reached)
{
    (void)step;
    return tg_train_tokens_evaluate(user, val, metric, reached);
}

void tg_train_tokens_bind(tg_train_tokens *m, tg_train_callbacks *cb, tg_train_config *cfg)
{
    cb->model_user = m;
    cb->batch = batch;
    cb->micro = micro;
    cb->evaluate = evaluate;
    cfg->accum = m->accum;
    cfg->tokens_per_step = m->o.batch * m->o.seq_len;
}

void tg_train_tokens_set_decoder(tg_train_tokens *m,
                                 tg_status (*decode)(void *user, const int32_t *src,
                                                     int32_t *out),
                                 void *user)
{
    if (!m)
        return;
    m->decode = decode;
    m->decode_user = user;
}

double tg_train_tokens_token_accuracy(const tg_train_tokens *m) { return m ? m->tok_acc : NAN; }

tg_graph *tg_train_tokens_graph(const tg_train_tokens *m) { return m ? m->g : NULL; }

tg_grad_accum *tg_train_tokens_accum(const tg_train_tokens *m) { return m ? m->accum : NULL; }

void tg_train_tokens_free(tg_train_tokens *m)
{
    if (!m)
        return;
    free(m->ids_buf);
    free(m->tgt_buf);
    free(m->dec_buf);
    free(m->out_buf);
    tg_greedy_free(m->greedy);
    free(m);
}
