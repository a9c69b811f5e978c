/*
 * test_train_pairs_run.c - tg_train_pairs (tgrad_run.h): translation training on sentence pairs
 * as callbacks of tg_train_run, on a tiny encoder-decoder over UTF-8 bytes:
 * - a run stopped mid-epoch, saved, and resumed in another context from the file alone
 *   (tg_train_pairs_position into the state, tg_train_checkpoint_restore, epoch and batch into
 *   the options) ends with bitwise the parameters, losses and BLEU of one run straight through,
 *   across epoch boundaries; and the same for 1 and 2 threads;
 * - the micro-batch walks the epoch's plan (tg_seq2seq_batches) in order, then the next epoch's;
 * - the evaluation's BLEU and chrF are tg_bleu/tg_chrf of the greedy translations, and
 *   non-finite logits give loss NaN, BLEU 0, no error left;
 * - tg_train_pairs_meta's keys and values after the record's; the argument errors.
 */
#include "testutil.h"
#include "tgrad_run.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const char TRAIN[] = "one two.\teins zwei.\ntwo three.\tzwei drei.\nthree.\tdrei.\n"
                            "four one.\tvier eins.\none.\teins.\ntwo four three.\tzwei vier "
                            "drei.\nfour.\tvier.\nthree one.\tdrei eins.\n";
static const char VALID[] = "one three.\teins drei.\nfour two.\tvier zwei.\n";

typedef struct {
    tg_ctx *ctx;
    tg_tokenizer *tok;
    tg_seq2seq_data *train, *valid;
    tg_transformer model;
    tg_transformer_config cfg;
    tg_optim_config oc;
    tg_optim *opt;
    tg_train_pairs *pairs;
    double losses[64];
    int n_losses;
    const char *ck; /* save here (NULL: no saves) */
} pr_run;

static tg_train_pairs_opts pairs_opts(pr_run *r)
{
    return (tg_train_pairs_opts){.tokenizer = r->tok, .train = r->train, .valid = r->valid,
                                 .batch_tokens = 48, .seed = 7, .label_smoothing = 0.1,
                                 .max_sentences = 1};
}

/* A model, data and optimizer in a fresh context; the run from @p epoch, @p batch. */
static void pr_new(pr_run *r, int threads, int64_t epoch, int64_t batch)
{
    memset(r, 0, sizeof *r);
    r->ctx = tu_ctx_new();
    tg_ctx_set_threads(r->ctx, threads);
    tg_ctx_seed(r->ctx, 11);
    r->tok = tg_tokenizer_bytes(r->ctx);
    tg_seq2seq_opts so = {.max_len = 24}, vo = {.max_len = 24, .keep_text = true};
    r->train = tg_seq2seq_load_mem(r->ctx, TRAIN, strlen(TRAIN), "train", r->tok, &so);
    r->valid = tg_seq2seq_load_mem(r->ctx, VALID, strlen(VALID), "valid", r->tok, &vo);
    ck_assert_ptr_nonnull(r->valid);
    r->cfg = (tg_transformer_config){.vocab_size = tg_tokenizer_vocab_size(r->tok),
                                     .max_seq_len = 24, .n_layers = 1, .n_decoder_layers = 1,
                                     .layer = tg_encoder_config_default(16, 2),
                                     .pos = TG_POS_SINUSOIDAL, .tie_weights = true};
    r->cfg.layer.d_ff = 32;
    r->cfg.layer.dropout = 0.1; /* resume must continue the dropout stream too */
    ck_assert_int_eq(tg_transformer_init(r->ctx, &r->model, TG_F32, &r->cfg), TG_OK);
    tg_train_pairs_opts o = pairs_opts(r);
    o.epoch = epoch;
    o.batch = batch;
    r->pairs = tg_train_pairs_new(r->ctx, &r->model, &o);
    ck_assert_msg(r->pairs, "%s", tg_ctx_message(r->ctx));
    r->oc = tg_optim_defaults(TG_OPTIM_ADAM);
    r->oc.lr = 1.0;
    r->opt = tg_optim_new(r->ctx, &r->oc, 0, NULL);
    ck_assert_ptr_nonnull(r->opt);
}

static void pr_free(pr_run *r)
{
    tg_train_pairs_free(r->pairs);
    tg_seq2seq_free(r->train);
    tg_seq2seq_free(r->valid);
    tg_tokenizer_free(r->tok);
    tu_ctx_free(r->ctx);
}

static tg_status row(void *user, const tg_train_row *rw)
{
    pr_run *r = user;
    if (r->n_losses < 64)
        r->losses[r->n_losses++] = rw->loss;
    return TG_OK;
}

static tg_status save(void *user, int64_t steps, double best_val)
{
    pr_run *r = user;
    if (!r->ck)
        return TG_OK;
    tg_train_state st = tg_train_state_init();
    st.steps = 30, st.position = steps, st.best_val = best_val;
    tg_train_pairs_position(r->pairs, &st.epoch, &st.batch);
    return tg_train_checkpoint_save(r->ctx, r->ck, r->opt, &r->cfg, TG_F32, &st, 0, NULL, NULL,
                                    NULL);
}

/* Steps start .. stop_after (0: 30) of a 30-step noam run evaluating every 10 steps. */
static tg_train_result pr_train(pr_run *r, int64_t start, int64_t stop_after, double best_val)
{
    tg_train_config c = tg_train_config_default();
    c.steps = 30, c.start = start, c.stop_after = stop_after, c.eval_every = 10;
    c.schedule = TG_LR_NOAM, c.lr = 1.0, c.warmup = 5, c.d_model = 16, c.clip = 1.0;
    c.best_val = best_val;
    tg_train_callbacks cb = {.user = r, .row = row, .save = save};
    tg_train_pairs_bind(r->pairs, &cb, &c);
    tg_train_result res;
    ck_assert_msg(tg_train_run(r->ctx, r->opt, &c, &cb, &res) == TG_OK, "%s",
                  tg_ctx_message(r->ctx));
    return res;
}

static void assert_same_params(tg_ctx *a, tg_ctx *b)
{
    ck_assert_int_eq(tg_ctx_n_params(a), tg_ctx_n_params(b));
    for (int64_t i = 0; i < tg_ctx_n_params(a); i++) {
        tg_tensor *x = tg_ctx_param(a, i), *y = tg_ctx_param(b, i);
        ck_assert_msg(!memcmp(tg_tensor_data(x), tg_tensor_data(y),
                              4 * (size_t)tg_tensor_numel(x)), "parameter %lld differs",
                      (long long)i);
    }
}

START_TEST(resumed_equals_one_run)
{
    char dir[256], ck[300];
    tu_mkdtemp(dir, sizeof dir, "pairs_run");
    snprintf(ck, sizeof ck, "%s/run.safetensors", dir);
    pr_run one, a, b;
    pr_new(&one, 1, 0, 0);
    tg_train_result r1 = pr_train(&one, 0, 0, INFINITY);
    int64_t e1, b1;
    tg_train_pairs_position(one.pairs, &e1, &b1);
    ck_assert_int_ge(e1, 2); /* the run crossed epochs */
    /* 13 steps, saved; then a new context from the file alone */
    pr_new(&a, 1, 0, 0);
    a.ck = ck;
    pr_train(&a, 0, 13, INFINITY);
    tg_ctx *rc = tu_ctx_new();
    tg_safetensors *st = tg_safetensors_read(rc, ck);
    ck_assert_ptr_nonnull(st);
    tg_train_state ts;
    ck_assert_int_eq(tg_train_state_read(rc, st, ck, &ts), TG_OK);
    ck_assert_int_eq(ts.step, 13);
    pr_new(&b, 1, ts.epoch, ts.batch);
    ck_assert_int_eq(tg_train_checkpoint_restore(b.ctx, st, ck, &b.cfg, TG_F32, &b.oc, b.opt,
                                                 NULL), TG_OK);
    tg_train_result r2 = pr_train(&b, ts.step, 0, ts.best_val);
    assert_same_params(one.ctx, b.ctx);
    ck_assert_int_eq(a.n_losses + b.n_losses, one.n_losses);
    for (int i = 0; i < one.n_losses; i++) /* bitwise: the same steps on the same batches */
        ck_assert(one.losses[i] == (i < 13 ? a.losses[i] : b.losses[i - 13]));
    ck_assert(r1.metric == r2.metric && r1.last_val == r2.last_val);
    int64_t e2, b2;
    tg_train_pairs_position(b.pairs, &e2, &b2);
    ck_assert(e1 == e2 && b1 == b2);
    /* and two threads: the same bits */
    pr_run two;
    pr_new(&two, 2, 0, 0);
    tg_train_result r3 = pr_train(&two, 0, 0, INFINITY);
    assert_same_params(one.ctx, two.ctx);
    ck_assert(r1.metric == r3.metric && r1.last_val == r3.last_val);
    pr_free(&one);
    pr_free(&a);
    pr_free(&b);
    pr_free(&two);
    tu_ctx_free(rc);
    unlink(ck);
    rmdir(dir);
}
END_TEST

/* The micro-batches walk epoch 0's plan in order, then epoch 1's, counting real tokens. */
START_TEST(micro_batches_follow_the_plan)
{
    pr_run r;
    pr_new(&r, 1, 0, 0);
    tg_train_config c = tg_train_config_default();
    tg_train_callbacks cb = {0};
    tg_train_pairs_bind(r.pairs, &cb, &c);
    ck_assert(cb.micro && cb.batch && cb.tokens && cb.evaluate && !c.accum);
    tg_batches *p0 = tg_seq2seq_batches(r.train, 48, 7, 0);
    int64_t n0 = tg_batches_count(p0);
    ck_assert_int_ge(n0, 2);
    for (int64_t k = 0; k <= n0; k++) {
        int64_t e, bt;
        tg_train_pairs_position(r.pairs, &e, &bt);
        ck_assert(e == 0 && bt == k);
        if (k == n0)
            break;
        double loss;
        ck_assert_int_eq(cb.batch(cb.model_user, k), TG_OK);
        ck_assert_int_eq(cb.micro(cb.model_user, 0, &loss), TG_OK);
        ck_assert(isfinite(loss));
        tg_batch b = tg_batches_get(p0, k);
        int64_t want = 0;
        for (int64_t j = 0; j < b.n; j++)
            want += tg_seq2seq_tgt_len(r.train, b.examples[j]);
        ck_assert_int_eq(cb.tokens(cb.model_user), want); /* target + EOS per sentence */
    }
    double loss;
    ck_assert_int_eq(cb.micro(cb.model_user, 0, &loss), TG_OK); /* epoch 1's first batch */
    int64_t e, bt;
    tg_train_pairs_position(r.pairs, &e, &bt);
    ck_assert(e == 1 && bt == 1);
    tg_batches_free(p0);
    pr_free(&r);
}
END_TEST

/* BLEU and chrF of the greedy translations, as the metrics compute them; then NaN weights. */
START_TEST(evaluation_scores_and_nonfinite)
{
    pr_run r;
    pr_new(&r, 1, 0, 0);
    tg_bleu bl;
    ck_assert(!tg_train_pairs_scores(r.pairs, &bl, NULL)); /* none yet */
    pr_train(&r, 0, 0, INFINITY); /* 30 steps: translations with some right characters */
    double val, bleu;
    bool reached;
    ck_assert_int_eq(tg_train_pairs_evaluate(r.pairs, &val, &bleu, &reached), TG_OK);
    tg_chrf cf;
    ck_assert(tg_train_pairs_scores(r.pairs, &bl, &cf));
    ck_assert(isfinite(val) && bleu == bl.score && !reached && cf.score >= 0);
    ck_assert(tg_ctx_training(r.ctx)); /* evaluation leaves training mode on */
    /* the same BLEU from the greedy translations scored by hand */
    tg_search_opts so = tg_search_defaults();
    so.method = TG_SEARCH_GREEDY, so.beam = 1;
    tg_translator *tr = tg_translator_new(r.ctx, &r.model, 2, &so);
    const int32_t *src[2];
    int64_t len[2];
    for (int i = 0; i < 2; i++)
        src[i] = tg_seq2seq_source(r.valid, i, &len[i]);
    tg_translation out[2];
    tg_ctx_set_training(r.ctx, false);
    ck_assert_int_eq(tg_translate_batch(tr, 2, src, len, out), TG_OK);
    char hyp[2][256];
    const char *hyps[2] = {hyp[0], hyp[1]}, *refs[2];
    for (int i = 0; i < 2; i++) {
        int64_t k = tg_tokenizer_decode(r.tok, out[i].ids, out[i].len, hyp[i], sizeof hyp[i]);
        ck_assert(k >= 0 && k < 256);
        refs[i] = tg_seq2seq_target_text(r.valid, i);
    }
    tg_bleu want;
    ck_assert_int_eq(tg_bleu_corpus(r.ctx, 2, hyps, NULL, refs, NULL, &want), TG_OK);
    tg_chrf wantc;
    ck_assert_int_eq(tg_chrf_corpus(r.ctx, 2, hyps, NULL, refs, NULL, &wantc), TG_OK);
    ck_assert(want.score == bl.score && wantc.score == cf.score && cf.score > 0);
    tg_translator_free(tr);
    /* NaN weights: loss NaN, BLEU 0, no error left on the context */
    tg_fill(tg_ctx_param(r.ctx, 0), NAN);
    ck_assert_int_eq(tg_train_pairs_evaluate(r.pairs, &val, &bleu, &reached), TG_OK);
    ck_assert(isnan(val) && bleu == 0 && !reached);
    ck_assert(!tg_train_pairs_scores(r.pairs, &bl, &cf) && bl.score == 0 && cf.score == 0);
    ck_assert_int_eq(tg_ctx_status(r.ctx), TG_OK);
    pr_free(&r);
}
END_TEST

START_TEST(meta_after_the_record)
{
    pr_run r;
    pr_new(&r, 1, 0, 0);
    tg_train_meta_list *m = calloc(1, sizeof *m);
    tg_train_record rec = {.mode = "pairs", .optimizer = TG_OPTIM_ADAM};
    ck_assert_int_eq(tg_train_record_meta(r.ctx, &rec, m), TG_OK);
    int n0 = m->n;
    ck_assert_int_eq(tg_train_pairs_meta(r.pairs, m), TG_OK);
    ck_assert_int_eq(m->n, n0 + 6); /* bytes: tokenizer.kind alone */
    static const char *const keys[6] = {"tokenizer.kind", "data.pairs_hash", "data.valid_hash",
                                        "data.epoch", "data.batch", "train.batch_tokens"};
    for (int i = 0; i < 6; i++)
        ck_assert_str_eq(m->keys[n0 + i], keys[i]);
    ck_assert_str_eq(m->values[n0], "bytes");
    char h[40];
    snprintf(h, sizeof h, "fnv1a64:%016llx",
             (unsigned long long)tg_seq2seq_get_info(r.train).hash);
    ck_assert_str_eq(m->values[n0 + 1], h);
    ck_assert(m->values[n0 + 3] == NULL && m->values[n0 + 4] == NULL);
    ck_assert_str_eq(m->values[n0 + 5], "48");
    /* a full list is refused */
    m->n = TG_TRAIN_RECORD_META_MAX - 2;
    ck_assert_int_eq(tg_train_pairs_meta(r.pairs, m), TG_ERR_ARG);
    tu_assert_error(r.ctx, TG_ERR_ARG, "full");
    free(m);
    pr_free(&r);
}
END_TEST

START_TEST(argument_errors)
{
    pr_run r;
    pr_new(&r, 1, 0, 0);
    tg_train_pairs_opts o = pairs_opts(&r);
    ck_assert_ptr_null(tg_train_pairs_new(r.ctx, NULL, &o));
    tu_assert_error(r.ctx, TG_ERR_ARG, "NULL argument");
    o.batch_tokens = 10;
    ck_assert_ptr_null(tg_train_pairs_new(r.ctx, &r.model, &o));
    tu_assert_error(r.ctx, TG_ERR_ARG, "smaller than the longest sequence");
    o = pairs_opts(&r);
    o.batch = 1000;
    ck_assert_ptr_null(tg_train_pairs_new(r.ctx, &r.model, &o));
    tu_assert_error(r.ctx, TG_ERR_ARG, "batch 1000 is beyond the");
    o = pairs_opts(&r);
    o.label_smoothing = 1;
    ck_assert_ptr_null(tg_train_pairs_new(r.ctx, &r.model, &o));
    tu_assert_error(r.ctx, TG_ERR_ARG, "label_smoothing");
    o = pairs_opts(&r);
    o.valid = r.train; /* loaded without keep_text */
    ck_assert_ptr_null(tg_train_pairs_new(r.ctx, &r.model, &o));
    tu_assert_error(r.ctx, TG_ERR_ARG, "keep_text");
    o = pairs_opts(&r);
    tg_transformer lm = r.model;
    lm.cfg.n_decoder_layers = 0;
    ck_assert_ptr_null(tg_train_pairs_new(r.ctx, &lm, &o));
    tu_assert_error(r.ctx, TG_ERR_ARG, "no decoder");
    /* subword regularization: texts, a tokenizer that samples, lengths a sample can reach */
    o = pairs_opts(&r);
    o.sample_nbest = 8;
    o.sample_alpha = 0.1;
    ck_assert_ptr_null(tg_train_pairs_new(r.ctx, &r.model, &o));
    tu_assert_error(r.ctx, TG_ERR_ARG, "keep_text");
    o.train = r.valid; /* with texts, but the byte tokenizer has one segmentation */
    ck_assert_ptr_null(tg_train_pairs_new(r.ctx, &r.model, &o));
    tu_assert_error(r.ctx, TG_ERR_ARG, "can sample");
    o.sample_nbest = TG_SAMPLE_MAX_NBEST + 1;
    ck_assert_ptr_null(tg_train_pairs_new(r.ctx, &r.model, &o));
    tu_assert_error(r.ctx, TG_ERR_ARG, "sample_nbest");
    o.sample_nbest = 8;
    o.sample_alpha = NAN;
    ck_assert_ptr_null(tg_train_pairs_new(r.ctx, &r.model, &o));
    tu_assert_error(r.ctx, TG_ERR_ARG, "sample_alpha");
    pr_free(&r);
}
END_TEST

static Suite *pairs_run_suite(void)
{
    Suite *s = suite_create("train_pairs_run");
    TCase *tc = tu_tcase(s, "pairs", 60);
    tcase_add_test(tc, resumed_equals_one_run);
    tcase_add_test(tc, micro_batches_follow_the_plan);
    tcase_add_test(tc, evaluation_scores_and_nonfinite);
    tcase_add_test(tc, meta_after_the_record);
    tcase_add_test(tc, argument_errors);
    return s;
}

int main(void) { return tu_run(pairs_run_suite()); }
