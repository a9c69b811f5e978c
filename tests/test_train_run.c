/*
 * test_train_run.c - tg_train_run (tgrad_train.h, "The training run") on a tiny model
 * (embedding, dense, cross-entropy): the run equals the loop written out by hand bit for bit
 * (schedule, clipping, step); its cadences (evaluation, save, the row and progress order);
 * best-so-far; a run stopped at stop_after and continued from there equals one run; the stop
 * flag and a reached target end the run after the step with a save; the first callback;
 * several processes: only the process of micro-batch 0 evaluates, the others take its outcome;
 * configuration errors; the CSV header and row of a training log; the checkpoint's record of
 * the data and options (tg_train_record_meta); the built-in text and task runs
 * (tg_train_tokens; the seq2seq task with its own greedy decoder) write the same checkpoint
 * bytes as `tgrad train` on the same options;
 * greedy decoding of a fixed length (tg_greedy): both paths agree, non-finite logits refused;
 * the padded arrays of a sentence-pair batch (tg_seq2seq_batch_fill) equal tg_seq2seq_fill's.
 */
#include "testutil.h"
#include "tgrad_decode.h"
#include "tgrad_train.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define V 7
#define D 5
#define T 3
#define B 4

static const int32_t IDS[B * T] = {1, 2, 3, 0, 6, 5, 4, 4, 2, 1, 0, 3};
static const int32_t TGT[B * T] = {2, 3, 4, 6, 5, 1, 4, 0, 3, 2, 1, 1};

typedef struct {
    tg_ctx *ctx;
    tg_tensor *ids, *tgt, *loss;
    tg_graph *g;
    tg_optim *opt;
    char events[512]; /* what the callbacks saw, in order */
    int64_t saves[16], n_saves;
    double vals[16]; /* evaluation i's validation loss */
    int64_t n_evals, reach_at, stop_at;
    volatile sig_atomic_t flag;
} model;

static void model_new(model *m)
{
    memset(m, 0, sizeof *m);
    m->ctx = tu_ctx_new();
    tg_ctx_seed(m->ctx, 7);
    tg_tensor *emb = tg_param(m->ctx, TG_F32, TG_DIMS(V, D), "emb");
    tg_tensor *w = tg_param(m->ctx, TG_F32, TG_DIMS(V, D), "w");
    tg_fill_normal(emb, 0, 1);
    tg_fill_uniform(w, -0.5, 0.5);
    m->ids = tg_input(m->ctx, TG_I32, TG_DIMS(B, T), "ids");
    m->tgt = tg_input(m->ctx, TG_I32, TG_DIMS(B, T), "tgt");
    tg_tensor *logits = tg_dense(m->ctx, tg_embedding(m->ctx, m->ids, emb), w, NULL);
    m->loss = tg_cross_entropy(m->ctx, logits, m->tgt, -1);
    m->g = tg_graph_new(m->ctx, &m->loss, 1);
    ck_assert_ptr_nonnull(m->g);
    tg_optim_config oc = tg_optim_defaults(TG_OPTIM_ADAMW);
    m->opt = tg_optim_new(m->ctx, &oc, 0, NULL);
    ck_assert_ptr_nonnull(m->opt);
    ck_assert_int_eq(tg_tensor_set_data(m->ids, IDS, TG_I32, B * T), TG_OK);
    ck_assert_int_eq(tg_tensor_set_data(m->tgt, TGT, TG_I32, B * T), TG_OK);
    m->reach_at = m->stop_at = -1;
}

static void event(model *m, const char *fmt, long long v)
{
    size_t n = strlen(m->events);
    snprintf(m->events + n, sizeof m->events - n, fmt, v);
}

static tg_status micro(void *user, int64_t i, double *loss)
{
    model *m = user;
    (void)i;
    tg_graph_zero_grad(m->g);
    tg_status s = tg_graph_forward(m->g);
    if (s == TG_OK)
        s = tg_graph_backward(m->g, m->loss, NULL);
    *loss = tg_get(m->loss, 0);
    return s;
}

static tg_status evaluate(void *user, int64_t step, double *val, double *metric, bool *reached)
{
    model *m = user;
    *val = m->vals[m->n_evals++];
    *metric = 0.5;
    *reached = step == m->reach_at;
    event(m, "e%lld ", (long long)step + 1);
    return TG_OK;
}

static tg_status row(void *user, const tg_train_row *r)
{
    model *m = user;
    event(m, "r%lld ", (long long)r->step);
    if (r->step == m->stop_at)
        m->flag = 1; /* seen after the next step */
    return TG_OK;
}

static tg_status save(void *user, int64_t steps, double best)
{
    model *m = user;
    (void)best;
    m->saves[m->n_saves++] = steps;
    event(m, "s%lld ", (long long)steps);
    return TG_OK;
}

static tg_train_config config(model *m)
{
    tg_train_config c = tg_train_config_default();
    c.steps = 10;
    c.eval_every = 4;
    c.save_every = 3;
    c.schedule = TG_LR_NOAM;
    c.lr = 1.0;
    c.warmup = 3;
    c.d_model = D;
    c.clip = 0.5;
    c.tokens_per_step = B * T;
    c.stop = &m->flag;
    return c;
}

static const tg_train_callbacks CB = {.micro = micro, .evaluate = evaluate, .row = row,
                                      .save = save};

static tg_status run(model *m, const tg_train_config *c, tg_train_result *res)
{
    tg_train_callbacks cb = CB;
    cb.user = m;
    return tg_train_run(m->ctx, m->opt, c, &cb, res);
}

static void assert_params_equal(tg_ctx *a, tg_ctx *b)
{
    ck_assert_int_eq(tg_ctx_n_params(a), tg_ctx_n_params(b));
    for (int64_t i = 0; i < tg_ctx_n_params(a); i++) {
        tg_tensor *x = tg_ctx_param(a, i), *y = tg_ctx_param(b, i);
        ck_assert_int_eq(memcmp(tg_tensor_data(x), tg_tensor_data(y),
                                sizeof(float) * (size_t)tg_tensor_numel(x)), 0);
    }
}

START_TEST(run_equals_hand_loop)
{
    model m, h;
    model_new(&m);
    model_new(&h);
    double vals[] = {3.0, 2.0, NAN, 2.5};
    memcpy(m.vals, vals, sizeof vals);
    tg_train_config c = config(&m);
    tg_train_result res;
    ck_assert_int_eq(run(&m, &c, &res), TG_OK);
    ck_assert_str_eq(m.events, "r1 r2 r3 s3 e4 r4 s4 r5 r6 s6 r7 e8 r8 s8 r9 s9 e10 r10 s10 ");
    ck_assert_int_eq(res.step, 10);
    ck_assert_int_eq(res.trained, 10);
    ck_assert(res.best_val == 2.0); /* the evaluations: 3, 2, and NaN at the end */
    ck_assert(isnan(res.last_val));
    ck_assert(!res.reached && !res.stopped && res.failed == TG_TRAIN_FAIL_NONE);
    tg_train_step_opts o = {.clip = 0.5};
    for (int64_t s = 0; s < 10; s++)
        ck_assert_int_eq(tg_train_step(h.ctx, h.opt, &o, micro, &h, tg_lr_noam(s, D, 3, 1.0),
                                       NULL), TG_OK);
    assert_params_equal(m.ctx, h.ctx);
    tu_ctx_free(m.ctx);
    tu_ctx_free(h.ctx);
}
END_TEST

/* stop_after 6, then the rest from start 6 with the best so far: one run's bits. */
START_TEST(run_continued_equals_one_run)
{
    model a, b;
    model_new(&a);
    model_new(&b);
    double vals[] = {3.0, 2.0, 1.0, 1.0};
    memcpy(a.vals, vals, sizeof vals);
    memcpy(b.vals, vals, sizeof vals);
    tg_train_config c = config(&a);
    tg_train_result ra, rb;
    ck_assert_int_eq(run(&a, &c, &ra), TG_OK);
    tg_train_config c1 = config(&b);
    c1.stop_after = 6;
    ck_assert_int_eq(run(&b, &c1, &rb), TG_OK);
    ck_assert_int_eq(rb.step, 6);
    ck_assert_str_eq(b.events, "r1 r2 r3 s3 e4 r4 s4 r5 e6 r6 s6 ");
    b.n_evals = 1; /* the evaluation at step 6 was an extra one */
    tg_train_config c2 = config(&b);
    c2.start = rb.step;
    c2.best_val = rb.best_val;
    ck_assert_int_eq(run(&b, &c2, &rb), TG_OK);
    ck_assert_int_eq(rb.step, 10);
    ck_assert_int_eq(rb.trained, 4);
    ck_assert(rb.best_val == ra.best_val);
    assert_params_equal(a.ctx, b.ctx);
    tu_ctx_free(a.ctx);
    tu_ctx_free(b.ctx);
}
END_TEST

/* The stop flag set during step 4's row ends the run after step 5 (evaluated and saved); a
 * target reached at step 8 ends it after step 8. */
START_TEST(run_stop_flag_and_target)
{
    model m;
    model_new(&m);
    m.stop_at = 4;
    tg_train_config c = config(&m);
    tg_train_result res;
    ck_assert_int_eq(run(&m, &c, &res), TG_OK);
    ck_assert_int_eq(res.step, 5);
    ck_assert(res.stopped && !res.reached);
    ck_assert_str_eq(m.events, "r1 r2 r3 s3 e4 r4 s4 e5 r5 s5 ");
    tu_ctx_free(m.ctx);
    model_new(&m);
    m.reach_at = 7; /* 0-based: the evaluation after step 8 */
    c = config(&m);
    ck_assert_int_eq(run(&m, &c, &res), TG_OK);
    ck_assert_int_eq(res.step, 8);
    ck_assert(res.reached && !res.stopped);
    ck_assert_int_eq(m.saves[m.n_saves - 1], 8);
    tu_ctx_free(m.ctx);
}
END_TEST

static bool first_stops(void *user, int64_t step)
{
    (void)user;
    return step == 0;
}

START_TEST(run_first_and_errors)
{
    model m;
    model_new(&m);
    tg_train_config c = config(&m);
    tg_train_callbacks cb = CB;
    cb.user = &m;
    cb.first = first_stops;
    tg_train_result res;
    ck_assert_int_eq(tg_train_run(m.ctx, m.opt, &c, &cb, &res), TG_OK);
    ck_assert(res.before_first);
    ck_assert_int_eq(res.trained, 0);
    ck_assert_str_eq(m.events, "");
    c.start = 10;
    ck_assert_int_eq(run(&m, &c, &res), TG_ERR_ARG);
    ck_assert_ptr_nonnull(strstr(tg_ctx_message(m.ctx), "tg_train_run"));
    c = config(&m);
    c.eval_every = 0;
    ck_assert_int_eq(run(&m, &c, &res), TG_ERR_ARG);
    c = config(&m);
    c.d_model = 0;
    ck_assert_int_eq(run(&m, &c, &res), TG_ERR_ARG);
    cb.micro = NULL;
    c = config(&m);
    ck_assert_int_eq(tg_train_run(m.ctx, m.opt, &c, &cb, &res), TG_ERR_ARG);
    tu_ctx_free(m.ctx);
}
END_TEST

/* A fake transport for one step (eval_every 1): the step's broadcast (the RNG state after
 * micro-batch 0), then the evaluation's (ok, val_loss, metric, reached). `recv`: what the
 * process of micro-batch 0 sent (written into the buffer); `fail`: the evaluation's
 * broadcast fails. */
typedef struct {
    int calls;
    bool fail, write;
    double recv[4], seen[4];
} fake_sync;

static tg_status fake_bcast(void *user, void *buf, size_t bytes)
{
    fake_sync *f = user;
    if (++f->calls % 2 == 1) { /* the step's RNG state: any non-zero state will do here */
        uint64_t st[4] = {1, 2, 3, 4};
        if (f->write)
            memcpy(buf, st, bytes);
        return TG_OK;
    }
    ck_assert_int_eq(bytes, sizeof f->seen);
    memcpy(f->seen, buf, bytes);
    if (f->write)
        memcpy(buf, f->recv, bytes);
    return f->fail ? TG_ERR_IO : TG_OK;
}

/* This process's micro-batches only (the others' arrive in a real transport). */
static tg_status fake_reduce(void *user, tg_grad_accum *acc, double *loss)
{
    (void)user;
    (void)acc;
    *loss = 1.0;
    return TG_OK;
}

/* Several processes: the process of micro-batch 0 evaluates and sends the outcome; another
 * process never evaluates, takes what it receives, and fails with it; a failed send is
 * TG_TRAIN_FAIL_SYNC. */
START_TEST(run_evaluation_across_processes)
{
    model m;
    model_new(&m);
    m.vals[0] = 2.5;
    m.reach_at = 0;
    tg_train_config c = config(&m);
    c.steps = 3, c.eval_every = 1, c.save_every = 0, c.stop = NULL;
    fake_sync f = {0};
    tg_train_sync sync = {&f, fake_reduce, fake_bcast};
    c.sync = &sync;
    /* the process of micro-batch 0 (K = 2, both here): it evaluates; the outcome goes out */
    c.accum = tg_grad_accum_new(m.ctx, 0, NULL, 2, 0, 2);
    tg_train_result res;
    ck_assert_msg(run(&m, &c, &res) == TG_OK, "%s", tg_ctx_message(m.ctx));
    ck_assert(m.n_evals == 1 && res.reached && res.step == 1);
    ck_assert(f.seen[0] == 1 && f.seen[1] == 2.5 && f.seen[2] == 0.5 && f.seen[3] == 1);
    tg_grad_accum_free(c.accum);
    /* another process (micro-batch 1; one step: the fake reduce leaves its accumulator
     * full): no evaluation here, the received outcome counts */
    c.steps = 1;
    c.accum = tg_grad_accum_new(m.ctx, 0, NULL, 2, 1, 1);
    f = (fake_sync){.write = true, .recv = {1, 1.25, 0.75, 0}};
    m.n_evals = 0;
    ck_assert_int_eq(run(&m, &c, &res), TG_OK);
    ck_assert(m.n_evals == 0 && res.best_val == 1.25 && res.metric == 0.75 && !res.reached);
    ck_assert_int_eq(res.step, 1);
    tg_grad_accum_free(c.accum);
    c.accum = tg_grad_accum_new(m.ctx, 0, NULL, 2, 1, 1);
    /* the evaluator failed: every process stops at the evaluation */
    f = (fake_sync){.write = true, .recv = {0, NAN, NAN, 0}};
    ck_assert_int_eq(run(&m, &c, &res), TG_ERR_STATE);
    ck_assert(res.failed == TG_TRAIN_FAIL_EVAL && res.step == 0 && m.n_evals == 0);
    tu_assert_error(m.ctx, TG_ERR_STATE, "the evaluation failed on the process of micro-batch 0");
    tg_grad_accum_free(c.accum);
    c.accum = tg_grad_accum_new(m.ctx, 0, NULL, 2, 1, 1);
    /* the send failed: the processes may disagree */
    f = (fake_sync){.write = true, .fail = true, .recv = {1, 1, 1, 0}};
    ck_assert_int_eq(run(&m, &c, &res), TG_ERR_IO);
    ck_assert(res.failed == TG_TRAIN_FAIL_SYNC);
    tg_grad_accum_free(c.accum);
    tu_ctx_free(m.ctx);
}
END_TEST

START_TEST(log_header_and_row)
{
    char buf[200];
    ck_assert_int_eq(tg_train_log_header("val_acc", buf, sizeof buf), 49);
    ck_assert_str_eq(buf, "step,train_loss,val_loss,lr,tokens_per_s,val_acc\n");
    tg_train_log_header(NULL, buf, sizeof buf);
    ck_assert_str_eq(buf, "step,train_loss,val_loss,lr,tokens_per_s\n");
    ck_assert_int_eq(tg_train_log_header("val_bleu", buf, 10), -1);
    tg_train_row r = {.step = 30, .loss = 2.484587, .lr = 0.0009, .tokens_per_s = 54860.94,
                      .eval = true, .val_loss = 2.500014, .metric = NAN};
    tg_train_log_row(&r, true, buf, sizeof buf);
    ck_assert_str_eq(buf, "30,2.484587,2.500014,0.0009,54860.9,\n");
    r.metric = 0.25;
    tg_train_log_row(&r, true, buf, sizeof buf);
    ck_assert_str_eq(buf, "30,2.484587,2.500014,0.0009,54860.9,0.250000\n");
    r.eval = false;
    tg_train_log_row(&r, false, buf, sizeof buf);
    ck_assert_str_eq(buf, "30,2.484587,,0.0009,54860.9\n");
}
END_TEST

/* The record's keys and values, in the order tgrad train writes them. */
START_TEST(record_meta)
{
    tg_ctx *ctx = tu_ctx_new();
    tg_train_record r = {.mode = "task", .task = TG_TASK_REVERSE, .seed = 5, .batch = 8,
                         .grad_accum = 2, .warmup = 10, .eval_every = 20, .lr = 0.003,
                         .min_lr = 0.0003, .weight_decay = 0.01, .clip = 1, .momentum = 0.9,
                         .val_fraction = 0.1, .target_acc = 0.99, .beta2 = 0.999, .eps = 1e-8,
                         .optimizer = TG_OPTIM_ADAMW, .schedule = TG_LR_NOAM};
    tg_train_meta_list *m = calloc(1, sizeof *m);
    ck_assert_int_eq(tg_train_record_meta(ctx, &r, m), TG_OK);
    char all[2048] = "";
    for (int i = 0; i < m->n; i++) {
        size_t n = strlen(all);
        snprintf(all + n, sizeof all - n, "%s=%s ", m->keys[i], m->values[i] ? m->values[i]
                                                                           : "@");
    }
    ck_assert_str_eq(all, "data.mode=task data.task=reverse data.position=@ train.steps=@ "
                     "train.best_val=@ train.seed=5 train.optimizer=adamw train.batch=8 "
                     "train.grad_accum=2 train.warmup=10 train.eval_every=20 train.lr=0.003 "
                     "train.min_lr=0.0003 train.weight_decay=0.01 train.clip=1 "
                     "train.momentum=0.9 data.val_fraction=0.1 train.target_acc=0.99 "
                     "train.schedule=noam train.precision=f32 train.beta2=0.999 train.eps=1e-08 "
                     "train.label_smoothing=0 ");
    char dir[256], path[300];
    tu_mkdtemp(dir, sizeof dir, "record");
    tu_write_file(dir, "c.txt", "abcab");
    tu_path(path, sizeof path, dir, "c.txt");
    const char *p = path;
    tg_text *text = tg_text_load(ctx, &p, 1, 0.0);
    ck_assert_ptr_nonnull(text);
    r.mode = "text";
    r.text = text;
    r.save_every = 7;
    ck_assert_int_eq(tg_train_record_meta(ctx, &r, m), TG_OK);
    ck_assert_str_eq(m->keys[1], "data.vocab");
    ck_assert_str_eq(m->values[1], "616263");
    ck_assert_str_eq(m->values[2], "5");
    ck_assert_str_eq(m->values[3], "1");
    ck_assert_int_eq(strncmp(m->values[4], "fnv1a64:", 8), 0);
    ck_assert_str_eq(m->keys[14], "train.save_every");
    r.mode = "pairs";
    r.target_bleu = 12.5;
    ck_assert_int_eq(tg_train_record_meta(ctx, &r, m), TG_OK);
    ck_assert_str_eq(m->keys[1], "train.target_bleu");
    ck_assert_str_eq(m->values[1], "12.5");
    r.mode = "other";
    ck_assert_int_eq(tg_train_record_meta(ctx, &r, m), TG_ERR_ARG);
    r.mode = "text";
    r.text = NULL;
    ck_assert_int_eq(tg_train_record_meta(ctx, &r, m), TG_ERR_ARG);
    tg_text_free(text);
    free(m);
    unlink(path);
    rmdir(dir);
}
END_TEST

/* ---- the library run and `tgrad train` on one configuration: the same checkpoint bytes ---- */

typedef struct {
    tg_ctx *ctx;
    tg_optim *opt;
    tg_transformer_config mc;
    tg_train_record rec;
    const char *path;
} lib_run;

static tg_status lib_save(void *user, int64_t steps_done, double best_val)
{
    lib_run *r = user;
    tg_train_state st = tg_train_state_init();
    st.position = steps_done * r->rec.batch;
    st.steps = 20;
    st.best_val = best_val;
    tg_train_meta_list *m = calloc(1, sizeof *m);
    ck_assert_ptr_nonnull(m);
    tg_status s = tg_train_record_meta(r->ctx, &r->rec, m);
    if (s == TG_OK)
        s = tg_train_checkpoint_save(r->ctx, r->path, r->opt, &r->mc, TG_F32, &st, m->n, m->keys,
                                     m->values, NULL);
    free(m);
    return s;
}

/* What `tgrad train [--text CORPUS] --steps 20 --eval-every 10 --batch 4 --seq-len 16
 * --layers 1 --d-model 32 --heads 2 --d-ff 64 --seed 5 --grad-accum 2` does, in the library
 * (its defaults: AdamW, cosine from 3e-3 to 3e-3 / 10, warmup 100, clip 1), saved to @p ck. */
static void lib_train(const char *corpus, bool s2s, const char *ck)
{
    lib_run r = {.ctx = tu_ctx_new(), .path = ck};
    tg_ctx_seed(r.ctx, 5);
    tg_text *text = corpus ? tg_text_load(r.ctx, &corpus, 1, 0.1) : NULL;
    ck_assert(!corpus || text);
    r.mc = (tg_transformer_config){.vocab_size = text ? tg_text_get_info(text).vocab_size : 10,
                                   .max_seq_len = 16, .n_layers = 1, .causal = text != NULL,
                                   .layer = tg_encoder_config_default(32, 2)};
    r.mc.layer.d_ff = 64;
    r.mc.layer.norm_first = true;
    if (s2s) { /* --arch seq2seq: digits and BOS */
        r.mc.vocab_size = 11;
        r.mc.n_decoder_layers = 1;
    }
    tg_transformer tm;
    ck_assert_int_eq(tg_transformer_init(r.ctx, &tm, TG_F32, &r.mc), TG_OK);
    tg_train_tokens_opts to = {.text = text, .task = TG_TASK_REVERSE, .eval_seed = 5,
                               .batch = 4, .seq_len = 16, .grad_accum = 2, .count = 2,
                               .target_acc = 0.99, .seq2seq = s2s, .bos = 10};
    tg_train_tokens *run = tg_train_tokens_new(r.ctx, &tm, &to);
    ck_assert_ptr_nonnull(run);
    tg_optim_config oc = tg_optim_defaults(TG_OPTIM_ADAMW);
    oc.lr = 3e-3;
    r.opt = tg_optim_new(r.ctx, &oc, 0, NULL);
    ck_assert_ptr_nonnull(r.opt);
    r.rec = (tg_train_record){.mode = text ? "text" : "task", .text = text,
                              .task = TG_TASK_REVERSE, .seed = 5, .optimizer = TG_OPTIM_ADAMW,
                              .batch = 4, .grad_accum = 2, .warmup = 100, .eval_every = 10,
                              .lr = 3e-3, .min_lr = 3e-3 / 10, .weight_decay = 0.01, .clip = 1,
                              .momentum = 0.9, .val_fraction = 0.1, .target_acc = 0.99,
                              .beta2 = 0.999, .eps = 1e-8};
    tg_train_config c = tg_train_config_default();
    c.steps = 20, c.eval_every = 10, c.lr = 3e-3, c.min_lr = 3e-3 / 10, c.warmup = 100, c.clip = 1;
    tg_train_callbacks cb = {.user = &r, .save = lib_save};
    tg_train_tokens_bind(run, &cb, &c);
    tg_train_result res;
    ck_assert_int_eq(tg_train_run(r.ctx, r.opt, &c, &cb, &res), TG_OK);
    ck_assert_int_eq(res.step, 20);
    tg_train_tokens_free(run);
    tg_text_free(text);
    tu_ctx_free(r.ctx);
}

/* The same run through the library and through `tgrad train`: the same checkpoint bytes
 * (seq2seq: the library's own greedy decoder, as the command's evaluation). */
static void lib_equals_cli(bool text, bool s2s)
{
    char dir[256], a[300], b[300], corpus[300];
    tu_mkdtemp(dir, sizeof dir, "train_run");
    tu_write_corpus(dir, "c.txt", 800);
    tu_path(corpus, sizeof corpus, dir, "c.txt");
    char args[400];
    snprintf(args, sizeof args, "train %s --steps 20 --eval-every 10 --batch 4 --seq-len 16 "
             "--layers 1 --d-model 32 --heads 2 --d-ff 64 --seed 5 --grad-accum 2 "
             "--checkpoint cli.st --quiet",
             text ? "--text c.txt" : s2s ? "--arch seq2seq" : "");
    int rc = tu_run_tgrad(dir, args, 120, NULL);
    ck_assert_int_eq(rc, text ? 0 : 3); /* the task misses its 99% target in 20 steps */
    lib_train(text ? corpus : NULL, s2s, tu_path(b, sizeof b, dir, "lib.st"));
    size_t na, nb;
    char *x = tu_slurp(tu_path(a, sizeof a, dir, "cli.st"), &na), *y = tu_slurp(b, &nb);
    ck_assert_ptr_nonnull(x);
    ck_assert_ptr_nonnull(y);
    ck_assert_uint_eq(na, nb);
    ck_assert_int_eq(memcmp(x, y, na), 0);
    free(x);
    free(y);
    tu_rm_tree(dir);
}

START_TEST(library_run_equals_cli_text) { lib_equals_cli(true, false); }
END_TEST

START_TEST(library_run_equals_cli_task) { lib_equals_cli(false, false); }
END_TEST

START_TEST(library_run_equals_cli_seq2seq) { lib_equals_cli(false, true); }
END_TEST

/* tg_greedy: the cached and the uncached path decode the same tokens; a NaN parameter gives
 * TG_ERR_NONFINITE with its message. */
START_TEST(greedy_paths_agree)
{
    tg_ctx *ctx = tu_ctx_new();
    tg_ctx_seed(ctx, 11);
    tg_transformer_config mc = {.vocab_size = 11, .max_seq_len = 6, .n_layers = 1,
                                .n_decoder_layers = 1, .layer = tg_encoder_config_default(8, 2)};
    mc.layer.d_ff = 16;
    tg_transformer m;
    ck_assert_int_eq(tg_transformer_init(ctx, &m, TG_F32, &mc), TG_OK);
    tg_ctx_set_training(ctx, false);
    int32_t src[2 * 6] = {1, 2, 3, 4, 5, 6, 9, 8, 7, 0, 0, 1}, a[12], b[12];
    tg_greedy *c = tg_greedy_new(ctx, &m, 2, 6, 10, false, TG_PRECISION_F32);
    tg_greedy *g = tg_greedy_new(ctx, &m, 2, 6, 10, true, TG_PRECISION_F32);
    ck_assert_ptr_nonnull(c);
    ck_assert_ptr_nonnull(g);
    ck_assert_int_eq(tg_greedy_decode(c, src, a), TG_OK);
    ck_assert_int_eq(tg_greedy_decode(g, src, b), TG_OK);
    ck_assert_int_eq(memcmp(a, b, sizeof a), 0);
    for (int i = 0; i < 12; i++)
        ck_assert(a[i] >= 0 && a[i] < 11);
    ((float *)tg_tensor_data(m.head_b))[3] = NAN;
    ck_assert_int_eq(tg_greedy_decode(c, src, a), TG_ERR_NONFINITE);
    ck_assert_ptr_nonnull(strstr(tg_ctx_message(ctx), "row 0, step 0: a logit is not finite"));
    tg_ctx_clear_error(ctx);
    ck_assert_int_eq(tg_greedy_decode(g, src, b), TG_ERR_NONFINITE);
    ck_assert_ptr_null(tg_greedy_new(ctx, &m, 2, 6, 11, false, TG_PRECISION_F32)); /* bos */
    tg_greedy_free(c);
    tg_greedy_free(g);
    tu_ctx_free(ctx);
}
END_TEST

/* tg_seq2seq_batch_fill: the arrays of tg_seq2seq_fill's tensors, the target tokens, refusals. */
START_TEST(seq2seq_batch_fill)
{
    tg_ctx *ctx = tu_ctx_new();
    tg_tokenizer *tok = tg_tokenizer_bytes(ctx);
    static const char tsv[] = "ab\tcde\nhello\tworld!\nx\ty\n";
    tg_seq2seq_opts so = {.max_len = 12};
    tg_seq2seq_data *d = tg_seq2seq_load_mem(ctx, tsv, sizeof tsv - 1, "v.tsv", tok, &so);
    ck_assert_msg(d != NULL, "%s", tg_ctx_message(ctx));
    tg_seq2seq_info in = tg_seq2seq_get_info(d);
    int64_t ex[3] = {2, 0, 1}, ns = in.max_src, nt = in.max_tgt, slen[3];
    int32_t src[3 * 16], tin[3 * 16], lab[3 * 16];
    tg_seq2seq_batch b;
    int64_t tokens = tg_seq2seq_batch_fill(d, ex, 3, ns, nt, -100, src, slen, tin, lab, &b);
    ck_assert_int_eq(tokens, in.tgt_tokens);
    ck_assert(b.n == 3 && b.S == ns && b.tgt_in == tin && b.src == src && b.labels == lab);
    tg_seq2seq_batch want = {3, ns, nt, src, slen, tin, lab};
    ck_assert_int_eq(memcmp(&b, &want, sizeof b), 0);
    tg_tensor *ts = tg_input(ctx, TG_I32, TG_DIMS(3, ns), "src");
    tg_tensor *ti = tg_input(ctx, TG_I32, TG_DIMS(3, nt), "tin");
    tg_tensor *tl = tg_input(ctx, TG_I32, TG_DIMS(3, nt), "lab");
    ck_assert_int_eq(tg_seq2seq_fill(d, ex, 3, ts, NULL, ti, tl), TG_OK);
    ck_assert_int_eq(memcmp(tg_tensor_data(ts), src, sizeof(int32_t) * (size_t)(3 * ns)), 0);
    ck_assert_int_eq(memcmp(tg_tensor_data(ti), tin, sizeof(int32_t) * (size_t)(3 * nt)), 0);
    ck_assert_int_eq(memcmp(tg_tensor_data(tl), lab, sizeof(int32_t) * (size_t)(3 * nt)), 0);
    for (int r = 0; r < 3; r++)
        ck_assert_int_eq(slen[r], tg_seq2seq_src_len(d, ex[r]));
    ck_assert_int_eq(tg_seq2seq_batch_fill(d, ex, 3, ns - 1, nt, -100, src, slen, tin, lab, NULL),
                     -1);
    ck_assert_int_eq(tg_seq2seq_batch_fill(d, ex, 3, ns, nt - 1, -100, src, slen, tin, lab, NULL),
                     -1);
    int64_t bad = 3;
    ck_assert_int_eq(tg_seq2seq_batch_fill(d, &bad, 1, ns, nt, -100, src, slen, tin, lab, NULL),
                     -1);
    tg_seq2seq_free(d);
    tg_tokenizer_free(tok);
    tu_ctx_free(ctx);
}
END_TEST

static Suite *train_run_suite(void)
{
    Suite *s = suite_create("train_run");
    TCase *tc = tcase_create("train_run");
    tcase_add_checked_fixture(tc, NULL, tu_ctx_teardown);
    tcase_set_timeout(tc, 30);
    tcase_add_test(tc, run_equals_hand_loop);
    tcase_add_test(tc, run_continued_equals_one_run);
    tcase_add_test(tc, run_stop_flag_and_target);
    tcase_add_test(tc, run_first_and_errors);
    tcase_add_test(tc, run_evaluation_across_processes);
    tcase_add_test(tc, log_header_and_row);
    tcase_add_test(tc, record_meta);
    tcase_add_test(tc, greedy_paths_agree);
    tcase_add_test(tc, seq2seq_batch_fill);
    tcase_add_test(tc, library_run_equals_cli_text);
    tcase_add_test(tc, library_run_equals_cli_task);
    tcase_add_test(tc, library_run_equals_cli_seq2seq);
    suite_add_tcase(s, tc);
    return s;
}

int main(void) { return tu_run(train_run_suite()); }
