/*
 * test_step.c - tg_train_step and tg_evaluate (tgrad_train.h, "One training step and
 * evaluation") on a tiny model (embedding, dropout, dense, cross-entropy):
 * K = 1 equals a hand-written forward/backward/clip/update bit for bit; K = 2 equals the
 * hand-written accumulation bit for bit (random numbers included) and K = 1 on the
 * concatenated batch to rounding; the sync hooks; thread invariance; failures leave the
 * parameters unchanged; evaluation's weighted mean (generic, seq2seq pairs, text windows).
 */
#include "testutil.h"
#include "tgrad_train.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define V 7
#define D 5
#define T 3
#define B 4 /* the global batch: rows 0..3 */

/* The model over a graph of @p rows rows. */
typedef struct {
    tg_ctx *ctx;
    tg_tensor *emb, *w, *bias, *ids, *tgt, *loss, *share;
    tg_graph *g;
    tg_optim *opt;
    int64_t rows, k;
    double dropout;
    int calls;
    uint64_t rng_seen[8]; /* first draw of each micro-batch's callback */
} model;

static const int32_t IDS[B * T] = {1, 2, 3, 0, 6, 5, 4, 4, 2, 1, 0, 3};
static const int32_t TGT[B * T] = {2, 3, 4, 6, 5, 1, 4, 0, 3, 2, 1, 1};

static void model_new(model *m, int64_t rows, int64_t k, double dropout)
{
    memset(m, 0, sizeof *m);
    m->ctx = tu_ctx_new();
    m->rows = rows;
    m->k = k;
    m->dropout = dropout;
    tg_ctx_seed(m->ctx, 42);
    m->emb = tg_param(m->ctx, TG_F64, TG_DIMS(V, D), "emb");
    m->w = tg_param(m->ctx, TG_F64, TG_DIMS(V, D), "w");
    m->bias = tg_param(m->ctx, TG_F64, TG_DIMS(V), "b");
    tg_fill_normal(m->emb, 0, 1);
    tg_fill_uniform(m->w, -0.5, 0.5);
    tg_fill_uniform(m->bias, -0.1, 0.1);
    m->ids = tg_input(m->ctx, TG_I32, TG_DIMS(rows, T), "ids");
    m->tgt = tg_input(m->ctx, TG_I32, TG_DIMS(rows, T), "tgt");
    tg_tensor *x = tg_embedding(m->ctx, m->ids, m->emb);          /* (rows, T, D) */
    if (dropout > 0)
        x = tg_dropout(m->ctx, x, dropout);
    tg_tensor *logits = tg_dense(m->ctx, x, m->w, m->bias);       /* (rows, T, V) */
    m->loss = tg_cross_entropy(m->ctx, logits, m->tgt, -1);       /* () */
    m->g = tg_graph_new(m->ctx, &m->loss, 1);
    ck_assert_ptr_nonnull(m->g);
    m->share = tg_const(m->ctx, TG_F64, 0, NULL, "share");
    tg_fill(m->share, 1.0 / (double)k);
    tg_optim_config oc = tg_optim_defaults(TG_OPTIM_ADAMW);
    oc.lr = 0.05;
    m->opt = tg_optim_new(m->ctx, &oc, 0, NULL);
    ck_assert_ptr_nonnull(m->opt);
}

/* Rows r0 .. r0 + rows - 1 of the global batch (offset by the step, so steps differ). */
static void set_rows(model *m, int64_t r0, int64_t step)
{
    int32_t ids[B * T], tgt[B * T];
    for (int64_t e = 0; e < m->rows * T; e++) {
        ids[e] = (IDS[r0 * T + e] + (int32_t)step) % V;
        tgt[e] = (TGT[r0 * T + e] + 2 * (int32_t)step) % V;
    }
    ck_assert_int_eq(tg_tensor_set_data(m->ids, ids, TG_I32, (size_t)(m->rows * T)), TG_OK);
    ck_assert_int_eq(tg_tensor_set_data(m->tgt, tgt, TG_I32, (size_t)(m->rows * T)), TG_OK);
}

static int64_t g_step; /* the step the callbacks fill */

/* tg_micro_batch_fn: rows i rows .. of the global batch, seeded 1/k when k > 1. */
static tg_status micro(void *user, int64_t i, double *loss)
{
    model *m = user;
    uint64_t st[4];
    tg_rng_get_state(m->ctx, st);
    if (m->calls < 8)
        m->rng_seen[m->calls] = st[0];
    m->calls++;
    tg_graph_zero_grad(m->g);
    set_rows(m, i * m->rows, g_step);
    tg_status s = tg_graph_forward(m->g);
    if (s == TG_OK)
        s = tg_graph_backward(m->g, m->loss, m->k > 1 ? m->share : NULL);
    *loss = tg_get(m->loss, 0) / (double)m->k;
    return s;
}

static void assert_params_equal(const model *a, const model *b)
{
    tg_tensor *pa[3] = {a->emb, a->w, a->bias}, *pb[3] = {b->emb, b->w, b->bias};
    for (int i = 0; i < 3; i++)
        ck_assert_msg(memcmp(tg_tensor_data(pa[i]), tg_tensor_data(pb[i]),
                             sizeof(double) * (size_t)tg_tensor_numel(pa[i])) == 0,
                      "parameter %d differs", i);
}

/* K = 1: the same bits as zero_grad, forward, backward, clip, update written out. */
START_TEST(test_k1_equals_hand)
{
    model a, b;
    model_new(&a, B, 1, 0.2);
    model_new(&b, B, 1, 0.2);
    for (g_step = 0; g_step < 4; g_step++) {
        tg_train_step_opts o = {.clip = 0.3};
        tg_train_step_result r;
        ck_assert_int_eq(tg_train_step(a.ctx, a.opt, &o, micro, &a, 0.01 * (double)(g_step + 1),
                                       &r), TG_OK);
        ck_assert_int_eq(r.failed, TG_TRAIN_STAGE_NONE);
        tg_graph_zero_grad(b.g);
        set_rows(&b, 0, g_step);
        ck_assert_int_eq(tg_graph_forward(b.g), TG_OK);
        ck_assert_int_eq(tg_graph_backward(b.g, b.loss, NULL), TG_OK);
        double norm;
        ck_assert_int_eq(tg_clip_grad_norm(b.ctx, 0, NULL, 0.3, &norm), TG_OK);
        ck_assert_int_eq(tg_optim_step(b.opt, 0.01 * (double)(g_step + 1)), TG_OK);
        ck_assert(r.loss == tg_get(b.loss, 0));
        ck_assert(r.grad_norm == norm);
        assert_params_equal(&a, &b);
    }
    ck_assert_int_eq(tg_optim_steps(a.opt), 4);
    /* without clipping: no norm */
    tg_train_step_result r;
    ck_assert_int_eq(tg_train_step(a.ctx, a.opt, NULL, micro, &a, -1, &r), TG_OK);
    ck_assert(isnan(r.grad_norm));
    tu_ctx_free(a.ctx);
    tu_ctx_free(b.ctx);
}
END_TEST

/* K = 2: bitwise the hand-written accumulation with its random-number rule, and K = 1 on the
 * concatenated batch to rounding (without dropout, whose masks differ by design). */
START_TEST(test_k2_equals_hand_and_k1)
{
    model a, b;
    model_new(&a, B / 2, 2, 0.3);
    model_new(&b, B / 2, 2, 0.3);
    tg_grad_accum *acc_a = tg_grad_accum_new(a.ctx, 0, NULL, 2, 0, 2);
    tg_grad_accum *acc_b = tg_grad_accum_new(b.ctx, 0, NULL, 2, 0, 2);
    ck_assert_ptr_nonnull(acc_a);
    ck_assert_ptr_nonnull(acc_b);
    for (g_step = 0; g_step < 3; g_step++) {
        tg_train_step_opts o = {.clip = 0.5, .accum = acc_a};
        tg_train_step_result r;
        a.calls = 0;
        ck_assert_int_eq(tg_train_step(a.ctx, a.opt, &o, micro, &a, 0.02, &r), TG_OK);
        ck_assert_int_eq(a.calls, 2);
        /* by hand: micro-batch i from the step's state jumped i times; then the state
         * micro-batch 0 left */
        uint64_t after0[4];
        for (int64_t i = 0; i < 2; i++) {
            uint64_t cur[4];
            tg_rng_get_state(b.ctx, cur);
            ck_assert(cur[0] == a.rng_seen[i]);
            tg_graph_zero_grad(b.g);
            set_rows(&b, i * b.rows, g_step);
            ck_assert_int_eq(tg_graph_forward(b.g), TG_OK);
            ck_assert_int_eq(tg_graph_backward(b.g, b.loss, b.share), TG_OK);
            ck_assert_int_eq(tg_grad_accum_push(acc_b, tg_get(b.loss, 0) / 2), TG_OK);
            if (i == 0)
                tg_rng_get_state(b.ctx, after0);
            tg_rng_set_state(b.ctx, cur);
            tg_rng_jump(b.ctx);
        }
        double l, norm;
        ck_assert_int_eq(tg_grad_accum_finish(acc_b, &l), TG_OK);
        tg_rng_set_state(b.ctx, after0);
        ck_assert_int_eq(tg_clip_grad_norm(b.ctx, 0, NULL, 0.5, &norm), TG_OK);
        ck_assert_int_eq(tg_optim_step(b.opt, 0.02), TG_OK);
        ck_assert(r.loss == l);
        ck_assert(r.grad_norm == norm);
        assert_params_equal(&a, &b);
        uint64_t sa[4], sb[4];
        tg_rng_get_state(a.ctx, sa);
        tg_rng_get_state(b.ctx, sb);
        ck_assert(memcmp(sa, sb, sizeof sa) == 0);
    }
    tu_ctx_free(a.ctx);
    tu_ctx_free(b.ctx);

    /* K = 2 of 2 rows against K = 1 of 4 rows, no dropout: equal to rounding */
    model k2, k1;
    model_new(&k2, B / 2, 2, 0);
    model_new(&k1, B, 1, 0);
    tg_grad_accum *acc = tg_grad_accum_new(k2.ctx, 0, NULL, 2, 0, 2);
    for (g_step = 0; g_step < 3; g_step++) {
        tg_train_step_opts o2 = {.clip = 0.5, .accum = acc}, o1 = {.clip = 0.5};
        tg_train_step_result r2, r1;
        ck_assert_int_eq(tg_train_step(k2.ctx, k2.opt, &o2, micro, &k2, 0.02, &r2), TG_OK);
        ck_assert_int_eq(tg_train_step(k1.ctx, k1.opt, &o1, micro, &k1, 0.02, &r1), TG_OK);
        ck_assert_msg(fabs(r2.loss - r1.loss) < 1e-13, "loss %.17g vs %.17g", r2.loss, r1.loss);
        ck_assert_msg(fabs(r2.grad_norm - r1.grad_norm) < 1e-13, "norm %.17g vs %.17g",
                      r2.grad_norm, r1.grad_norm);
        ck_assert_double_le(tu_max_abs_diff(k2.emb, k1.emb), 1e-12);
        ck_assert_double_le(tu_max_abs_diff(k2.w, k1.w), 1e-12);
        ck_assert_double_le(tu_max_abs_diff(k2.bias, k1.bias), 1e-12);
    }
    tu_ctx_free(k2.ctx);
    tu_ctx_free(k1.ctx);
}
END_TEST

/* A sync: its reduce ends the step (here by tg_grad_accum_finish) and its broadcast carries
 * the RNG state of micro-batch 0 (32 bytes). */
typedef struct {
    int reduces, broadcasts;
    size_t bytes;
    tg_status fail;
} fake_sync;

static tg_status fake_reduce(void *u, tg_grad_accum *acc, double *loss)
{
    fake_sync *f = u;
    f->reduces++;
    return f->fail != TG_OK ? f->fail : tg_grad_accum_finish(acc, loss);
}

static tg_status fake_bcast(void *u, void *buf, size_t bytes)
{
    fake_sync *f = u;
    (void)buf;
    f->broadcasts++;
    f->bytes = bytes;
    return TG_OK;
}

START_TEST(test_sync_hooks)
{
    model a, b;
    model_new(&a, B / 2, 2, 0.3);
    model_new(&b, B / 2, 2, 0.3);
    tg_grad_accum *acc_a = tg_grad_accum_new(a.ctx, 0, NULL, 2, 0, 2);
    tg_grad_accum *acc_b = tg_grad_accum_new(b.ctx, 0, NULL, 2, 0, 2);
    fake_sync f = {0};
    tg_train_sync sync = {&f, fake_reduce, fake_bcast};
    g_step = 0;
    tg_train_step_opts oa = {.accum = acc_a, .sync = &sync}, ob = {.accum = acc_b};
    ck_assert_int_eq(tg_train_step(a.ctx, a.opt, &oa, micro, &a, 0.02, NULL), TG_OK);
    ck_assert_int_eq(tg_train_step(b.ctx, b.opt, &ob, micro, &b, 0.02, NULL), TG_OK);
    ck_assert_int_eq(f.reduces, 1);
    ck_assert_int_eq(f.broadcasts, 1);
    ck_assert_uint_eq(f.bytes, 4 * sizeof(uint64_t));
    assert_params_equal(&a, &b);
    /* a failing reduce: the batch stage, its status, parameters unchanged */
    f.fail = TG_ERR_IO;
    tg_ctx_set_error(a.ctx, TG_ERROR_RUN, TG_ERR_IO, "fake", "peer died");
    tg_train_step_result r;
    ck_assert_int_eq(tg_train_step(a.ctx, a.opt, &oa, micro, &a, 0.02, &r), TG_ERR_IO);
    ck_assert_int_eq(r.failed, TG_TRAIN_STAGE_BATCH);
    ck_assert_int_eq(tg_optim_steps(a.opt), 1);
    assert_params_equal(&a, &b);
    tu_ctx_free(a.ctx);
    tu_ctx_free(b.ctx);
}
END_TEST

/* The same bits for 1 and 2 threads (K = 2, dropout, clipping). */
START_TEST(test_threads)
{
    model a, b;
    model_new(&a, B / 2, 2, 0.3);
    model_new(&b, B / 2, 2, 0.3);
    tg_ctx_set_threads(a.ctx, 1);
    tg_ctx_set_threads(b.ctx, 2);
    tg_grad_accum *acc_a = tg_grad_accum_new(a.ctx, 0, NULL, 2, 0, 2);
    tg_grad_accum *acc_b = tg_grad_accum_new(b.ctx, 0, NULL, 2, 0, 2);
    for (g_step = 0; g_step < 3; g_step++) {
        tg_train_step_opts oa = {.clip = 0.4, .accum = acc_a}, ob = {.clip = 0.4, .accum = acc_b};
        ck_assert_int_eq(tg_train_step(a.ctx, a.opt, &oa, micro, &a, 0.02, NULL), TG_OK);
        ck_assert_int_eq(tg_train_step(b.ctx, b.opt, &ob, micro, &b, 0.02, NULL), TG_OK);
        assert_params_equal(&a, &b);
    }
    tu_ctx_free(a.ctx);
    tu_ctx_free(b.ctx);
}
END_TEST

static tg_status nan_micro(void *user, int64_t i, double *loss)
{
    tg_status s = micro(user, i, loss);
    *loss = NAN;
    return s;
}

static tg_status inf_grad_micro(void *user, int64_t i, double *loss)
{
    model *m = user;
    tg_status s = micro(user, i, loss);
    ((double *)tg_tensor_grad(m->w))[3] = INFINITY;
    return s;
}

static tg_status failing_micro(void *user, int64_t i, double *loss)
{
    model *m = user;
    (void)i;
    *loss = 0;
    return tg_ctx_set_error(m->ctx, TG_ERROR_RUN, TG_ERR_IO, "fill", "batch file vanished");
}

/* Failures: nothing is updated; the stage says where; argument errors. */
START_TEST(test_failures)
{
    model a, b;
    model_new(&a, B, 1, 0);
    model_new(&b, B, 1, 0);
    g_step = 0;
    tg_train_step_opts o = {.clip = 1};
    tg_train_step_result r;
    ck_assert_int_eq(tg_train_step(a.ctx, a.opt, &o, nan_micro, &a, 0.1, &r), TG_ERR_NONFINITE);
    ck_assert_int_eq(r.failed, TG_TRAIN_STAGE_UPDATE);
    ck_assert(isnan(r.loss));
    tu_assert_error(a.ctx, TG_ERR_NONFINITE, "loss is not finite");
    ck_assert_int_eq(tg_optim_steps(a.opt), 0);
    assert_params_equal(&a, &b);
    ck_assert_int_eq(tg_train_step(a.ctx, a.opt, &o, failing_micro, &a, 0.1, &r), TG_ERR_IO);
    ck_assert_int_eq(r.failed, TG_TRAIN_STAGE_BATCH);
    tu_assert_error(a.ctx, TG_ERR_IO, "batch file vanished");
    assert_params_equal(&a, &b);
    /* an infinite gradient with a finite loss: clipping refuses, stage UPDATE */
    ck_assert_int_eq(tg_train_step(a.ctx, a.opt, &o, inf_grad_micro, &a, 0.1, &r),
                     TG_ERR_NONFINITE);
    ck_assert_int_eq(r.failed, TG_TRAIN_STAGE_UPDATE);
    ck_assert(isfinite(r.loss));
    assert_params_equal(&a, &b);
    ck_assert_int_eq(tg_train_step(a.ctx, NULL, &o, micro, &a, 0.1, &r), TG_ERR_ARG);
    tu_assert_error(a.ctx, TG_ERR_ARG, "optimizer");
    ck_assert_int_eq(tg_train_step(a.ctx, a.opt, &o, NULL, &a, 0.1, &r), TG_ERR_ARG);
    tu_assert_error(a.ctx, TG_ERR_ARG, "callback");
    fake_sync f = {0};
    tg_train_sync sync = {&f, fake_reduce, fake_bcast};
    tg_train_step_opts os = {.sync = &sync};
    ck_assert_int_eq(tg_train_step(a.ctx, a.opt, &os, micro, &a, 0.1, &r), TG_ERR_ARG);
    tu_assert_error(a.ctx, TG_ERR_ARG, "accumulator");
    ck_assert_int_eq(tg_train_step(NULL, a.opt, &o, micro, &a, 0.1, NULL), TG_ERR_ARG);
    assert_params_equal(&a, &b);
    tu_ctx_free(a.ctx);
    tu_ctx_free(b.ctx);
}
END_TEST


/* ---- evaluation --------------------------------------------------------------------------- */

typedef struct {
    tg_ctx *ctx;
    int calls;
    bool saw_training;
    tg_status fail_at_2;
    int64_t bad_tokens;
} eval_user;

/* Batch i: summed loss 0.5 (i + 1), i + 1 tokens... except batch 1, which has none. */
static tg_status eval_fn(void *user, int64_t i, double *sum, int64_t *tokens)
{
    eval_user *u = user;
    u->calls++;
    u->saw_training |= tg_ctx_training(u->ctx);
    if (i == 2 && u->fail_at_2 != TG_OK)
        return tg_ctx_set_error(u->ctx, TG_ERROR_RUN, u->fail_at_2, "eval", "bad batch");
    *sum = i == 1 ? 0 : 0.5 * (double)(i + 1);
    *tokens = i == 1 ? (u->bad_tokens ? u->bad_tokens : 0) : i + 1;
    return TG_OK;
}

/* The weighted mean over tokens, in evaluation mode, the mode restored; errors. */
START_TEST(test_evaluate)
{
    tg_ctx *ctx = tu_ctx_new();
    eval_user u = {ctx, 0, false, TG_OK, 0};
    double l;
    int64_t n;
    ck_assert(tg_ctx_training(ctx));
    ck_assert_int_eq(tg_evaluate(ctx, 4, eval_fn, &u, &l, &n), TG_OK);
    ck_assert_int_eq(u.calls, 4);
    ck_assert(!u.saw_training);
    ck_assert(tg_ctx_training(ctx));
    ck_assert_int_eq(n, 1 + 3 + 4);
    ck_assert(l == (0.5 + 1.5 + 2.0) / 8.0);
    /* evaluation mode stays off when it was off */
    tg_ctx_set_training(ctx, false);
    ck_assert_int_eq(tg_evaluate(ctx, 1, eval_fn, &u, &l, NULL), TG_OK);
    ck_assert(!tg_ctx_training(ctx));
    tg_ctx_set_training(ctx, true);
    /* no batches, or no tokens: NaN */
    ck_assert_int_eq(tg_evaluate(ctx, 0, eval_fn, &u, &l, &n), TG_OK);
    ck_assert(isnan(l));
    ck_assert_int_eq(n, 0);
    /* a failing batch: its status, the mode restored */
    u.fail_at_2 = TG_ERR_IO;
    ck_assert_int_eq(tg_evaluate(ctx, 4, eval_fn, &u, &l, &n), TG_ERR_IO);
    ck_assert(isnan(l));
    ck_assert(tg_ctx_training(ctx));
    tu_assert_error(ctx, TG_ERR_IO, "bad batch");
    u.fail_at_2 = TG_OK;
    u.bad_tokens = -3;
    ck_assert_int_eq(tg_evaluate(ctx, 4, eval_fn, &u, &l, &n), TG_ERR_ARG);
    tu_assert_error(ctx, TG_ERR_ARG, "batch 1 reported -3 tokens");
    ck_assert_int_eq(tg_evaluate(ctx, -1, eval_fn, &u, &l, &n), TG_ERR_ARG);
    ck_assert_int_eq(tg_evaluate(ctx, 1, NULL, &u, &l, &n), TG_ERR_ARG);
    ck_assert_int_eq(tg_evaluate(ctx, 1, eval_fn, &u, NULL, &n), TG_ERR_ARG);
    ck_assert_int_eq(tg_evaluate(NULL, 1, eval_fn, &u, &l, &n), TG_ERR_ARG);
    tu_ctx_free(ctx);
}
END_TEST

/* tg_seq2seq_evaluate: the batches' summed losses over their tokens, written out by hand;
 * another batching gives the same value to rounding; dropout is off. */
START_TEST(test_seq2seq_evaluate)
{
    tg_ctx *ctx = tu_ctx_new();
    tg_tokenizer *tok = tg_tokenizer_bytes(ctx);
    ck_assert_ptr_nonnull(tok);
    static const char tsv[] = "ab\tcde\nhello\tworld!\nx\ty\nabcabc\tcc\nzz top\tq r s\n"
                              "one two\tdrei\n";
    tg_seq2seq_opts so = {.max_len = 12};
    tg_seq2seq_data *d = tg_seq2seq_load_mem(ctx, tsv, sizeof tsv - 1, "v.tsv", tok, &so);
    ck_assert_msg(d != NULL, "%s", tg_ctx_message(ctx));
    tg_transformer_config mc;
    memset(&mc, 0, sizeof mc);
    mc.vocab_size = tg_tokenizer_vocab_size(tok);
    mc.max_seq_len = 12;
    mc.n_layers = 1;
    mc.n_decoder_layers = 1;
    mc.layer = tg_encoder_config_default(8, 2);
    mc.layer.d_ff = 16;
    mc.layer.dropout = 0.3;
    mc.pos = TG_POS_SINUSOIDAL;
    mc.tie_weights = true;
    tg_transformer m;
    ck_assert_msg(tg_transformer_init(ctx, &m, TG_F64, &mc) == TG_OK, "%s", tg_ctx_message(ctx));
    tg_seq2seq_loss_opts lo = tg_seq2seq_loss_defaults();
    lo.label_smoothing = 0.1; /* evaluation never smooths */
    tg_seq2seq_loss *L = tg_seq2seq_loss_new(ctx, &m, &lo);
    ck_assert_ptr_nonnull(L);
    double l1, l2;
    int64_t n1, n2;
    ck_assert_msg(tg_seq2seq_evaluate(L, d, 30, 7, &l1, &n1) == TG_OK, "%s", tg_ctx_message(ctx));
    ck_assert(tg_ctx_training(ctx));
    /* by hand: epoch 0's batches, filled by the rule, no dropout */
    tg_batches *plan = tg_seq2seq_batches(d, 30, 7, 0);
    ck_assert_ptr_nonnull(plan);
    ck_assert_int_gt(tg_batches_count(plan), 1);
    tg_ctx_set_training(ctx, false);
    double sum = 0;
    int64_t tokens = 0;
    for (int64_t k = 0; k < tg_batches_count(plan); k++) {
        tg_batch bt = tg_batches_get(plan, k);
        int64_t Sb = bt.src_len, Tb = bt.tgt_len;
        int32_t src[64], tin[64], lab[64];
        int64_t slen[16];
        int32_t pad = tg_seq2seq_get_info(d).pad_id;
        for (int64_t r = 0; r < bt.n; r++) {
            int64_t sl, tl;
            const int32_t *s = tg_seq2seq_source(d, bt.examples[r], &sl);
            const int32_t *t = tg_seq2seq_target(d, bt.examples[r], &tl);
            slen[r] = sl;
            for (int64_t j = 0; j < Sb; j++)
                src[r * Sb + j] = j < sl ? s[j] : pad;
            for (int64_t j = 0; j < Tb; j++) {
                tin[r * Tb + j] = j == 0 ? TG_TOKEN_BOS : j <= tl ? t[j - 1] : pad;
                lab[r * Tb + j] = j < tl ? t[j] : j == tl ? TG_TOKEN_EOS : -100;
            }
        }
        tg_seq2seq_batch b = {bt.n, Sb, Tb, src, slen, tin, lab};
        double s;
        int64_t t;
        ck_assert_int_eq(tg_seq2seq_loss_eval(L, &b, &s, &t), TG_OK);
        sum += s;
        tokens += t;
    }
    tg_ctx_set_training(ctx, true);
    tg_batches_free(plan);
    ck_assert_int_eq(n1, tokens);
    ck_assert_int_eq(n1, tg_seq2seq_get_info(d).tgt_tokens);
    ck_assert(l1 == sum / (double)tokens);
    /* one batch for everything: the same mean to rounding */
    ck_assert_int_eq(tg_seq2seq_evaluate(L, d, 1000, 7, &l2, &n2), TG_OK);
    ck_assert_int_eq(n2, n1);
    ck_assert_msg(fabs(l1 - l2) < 1e-12, "%.17g vs %.17g", l1, l2);
    /* errors: a budget below the longest example; NULL arguments */
    ck_assert_int_ne(tg_seq2seq_evaluate(L, d, 3, 7, &l2, NULL), TG_OK);
    ck_assert(isnan(l2));
    ck_assert_int_eq(tg_seq2seq_evaluate(L, NULL, 30, 7, &l2, NULL), TG_ERR_ARG);
    ck_assert_int_eq(tg_seq2seq_evaluate(NULL, d, 30, 7, &l2, NULL), TG_ERR_ARG);
    tg_seq2seq_loss_free(L);
    tg_seq2seq_free(d);
    tg_tokenizer_free(tok);
    tu_ctx_free(ctx);
}
END_TEST

/* tg_text_evaluate: the validation windows Bm at a time, weighted by real windows; equal to
 * the loop written out, and to another Bm to rounding; shape errors. */
START_TEST(test_text_evaluate)
{
    char dir[256], path[512];
    tu_mkdtemp(dir, sizeof dir, "step");
    char text[301];
    for (int i = 0; i < 300; i++)
        text[i] = (char)('a' + (i * 5 + i / 7) % V); /* V distinct bytes: ids < V */
    text[300] = 0;
    tu_write_file(dir, "t.txt", text);
    tu_path(path, sizeof path, dir, "t.txt");
    model a, b;
    model_new(&a, 2, 1, 0.3);
    model_new(&b, B, 1, 0.3);
    const char *p = path;
    tg_text *t = tg_text_load(a.ctx, &p, 1, 0.25); /* 75 bytes: 24 windows of 3 */
    ck_assert_ptr_nonnull(t);
    ck_assert_int_eq(tg_text_get_info(t).vocab_size, V);
    ck_assert_int_eq(tg_text_val_windows(t, T), 24);
    double l2, l4;
    int64_t n2, n4;
    ck_assert_msg(tg_text_evaluate(a.ctx, t, a.g, a.ids, a.tgt, a.loss, &l2, &n2) == TG_OK,
                  "%s", tg_ctx_message(a.ctx));
    ck_assert(tg_ctx_training(a.ctx));
    ck_assert_int_eq(n2, 24 * T);
    ck_assert_int_eq(tg_text_evaluate(b.ctx, t, b.g, b.ids, b.tgt, b.loss, &l4, &n4), TG_OK);
    ck_assert_int_eq(n4, n2);
    ck_assert_msg(fabs(l2 - l4) < 1e-12, "%.17g vs %.17g", l2, l4);
    /* by hand, 2 windows at a time, dropout off */
    tg_ctx_set_training(a.ctx, false);
    double sum = 0;
    int64_t tokens = 0;
    for (int64_t k = 0; k < 12; k++) {
        int32_t x[2 * T], y[2 * T];
        int64_t w = tg_text_val_batch(t, k, 2, T, x, y);
        ck_assert_int_eq(tg_tensor_set_data(a.ids, x, TG_I32, 2 * T), TG_OK);
        ck_assert_int_eq(tg_tensor_set_data(a.tgt, y, TG_I32, 2 * T), TG_OK);
        ck_assert_int_eq(tg_graph_forward(a.g), TG_OK);
        sum += tg_get(a.loss, 0) * (double)(w * T);
        tokens += w * T;
    }
    ck_assert(l2 == sum / (double)tokens);
    /* errors */
    ck_assert_int_eq(tg_text_evaluate(a.ctx, t, a.g, a.ids, a.emb, a.loss, &l2, NULL),
                     TG_ERR_DTYPE);
    ck_assert_int_eq(tg_text_evaluate(a.ctx, t, a.g, a.ids, a.tgt, a.w, &l2, NULL),
                     TG_ERR_SHAPE);
    ck_assert_int_eq(tg_text_evaluate(a.ctx, NULL, a.g, a.ids, a.tgt, a.loss, &l2, NULL),
                     TG_ERR_ARG);
    ck_assert(isnan(l2));
    tg_text_free(t);
    tu_ctx_free(a.ctx);
    tu_ctx_free(b.ctx);
    tu_rm_tree(dir);
}
END_TEST

static Suite *step_suite(void)
{
    Suite *s = suite_create("step");
    TCase *tc = tcase_create("step");
    tcase_add_checked_fixture(tc, NULL, tu_ctx_teardown);
    tcase_add_test(tc, test_k1_equals_hand);
    tcase_add_test(tc, test_k2_equals_hand_and_k1);
    tcase_add_test(tc, test_sync_hooks);
    tcase_add_test(tc, test_threads);
    tcase_add_test(tc, test_failures);
    tcase_add_test(tc, test_evaluate);
    tcase_add_test(tc, test_seq2seq_evaluate);
    tcase_add_test(tc, test_text_evaluate);
    suite_add_tcase(s, tc);
    return s;
}

int main(void) { return tu_run(step_suite()); }
