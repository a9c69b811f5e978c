/*
 * pairs.c - translation training on sentence pairs (include/tgrad_run.h): the batch, micro-batch,
 * tokens and evaluation callbacks tg_train_run drives for `tgrad train --pairs`:
 *   micro-batch: batch `cursor` of epoch `epoch` (tg_seq2seq_batches), filled by
 *     tg_seq2seq_batch_fill, through tg_seq2seq_loss_backward; the cursor moves on
 *   evaluation: tg_seq2seq_evaluate (validation loss per token), then greedy translations of the
 *     validation sources (tg_translator) scored by corpus BLEU and chrF against the targets
 * Layer 9 (run): it assembles the training run (train), decoding (decode) and metrics.
 */
#include "tgrad_run.h"
#include "core.h"

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *FN = "tg_train_pairs_new";

struct tg_train_pairs {
    tg_ctx *ctx;
    tg_train_pairs_opts o;
    tg_batches *plan;      /* the current epoch's batches (NULL until the first is needed) */
    tg_seq2seq_data *sampled; /* sample_nbest > 0: the current epoch's segmentations */
    int64_t epoch, cursor; /* the next batch: batch `cursor` of epoch `epoch` */
    tg_seq2seq_loss *loss;
    tg_translator *greedy; /* validation BLEU */
    /* the current batch's arrays */
    int32_t *src, *tin, *lab;
    int64_t *slen;
    size_t cap_s, cap_t, cap_n;
    int64_t last_tokens;   /* real target tokens (labels) of the last batch */
    bool scored, nonfinite; /* an evaluation ran; its logits were not finite */
    tg_bleu bleu;
    tg_chrf chrf;
    char *tok_values[2];   /* tg_tokenizer_meta's values (tg_train_pairs_meta) */
    char meta_store[5][32]; /* the hashes, batch_tokens, sample_alpha and sample_nbest */
};

/* The longest sequence (source or target, EOS/BOS included) of either set. */
static int64_t longest(const tg_train_pairs_opts *o)
{
    tg_seq2seq_info ti = tg_seq2seq_get_info(o->train), vi = tg_seq2seq_get_info(o->valid);
    int64_t n = ti.max_src > ti.max_tgt ? ti.max_src : ti.max_tgt;
    n = vi.max_src > n ? vi.max_src : n;
    return vi.max_tgt > n ? vi.max_tgt : n;
}

static bool opts_ok(tg_ctx *ctx, const tg_transformer *model, const tg_train_pairs_opts *o)
{
    const char *why = NULL;
    if (!model || !o || !o->tokenizer || !o->train || !o->valid)
        why = "NULL argument";
    else if (model->cfg.n_decoder_layers < 1)
        why = "the model has no decoder (cfg.n_decoder_layers is 0)";
    else if (o->epoch < 0 || o->batch < 0 || o->max_sentences < 0)
        why = "epoch, batch and max_sentences must be >= 0";
    else if (!(o->label_smoothing >= 0 && o->label_smoothing < 1))
        why = "label_smoothing must be in [0, 1)";
    else if (tg_seq2seq_count(o->valid) > 0 && !tg_seq2seq_target_text(o->valid, 0))
        why = "the validation set was loaded without keep_text (BLEU reads its targets' text)";
    else if (o->sample_nbest < 0 || o->sample_nbest > TG_SAMPLE_MAX_NBEST ||
             !(o->sample_alpha >= 0 && o->sample_alpha <= 100))
        why = "sample_nbest must be in [0, TG_SAMPLE_MAX_NBEST] and sample_alpha in [0, 100]";
    else if (o->sample_nbest && tg_seq2seq_count(o->train) > 0 &&
             !tg_seq2seq_source_text(o->train, 0))
        why = "sampling needs the training set loaded with keep_text";
    else if (o->sample_nbest && !tg_tokenizer_can_sample(o->tokenizer))
        why = "sampling needs a tokenizer that can sample (a SentencePiece unigram model)";
    if (why) {
        tg__run_err(ctx, TG_ERR_ARG, FN, "%s", why);
        return false;
    }
    int64_t max_len = tg_seq2seq_get_info(o->train).max_len;
    if (o->sample_nbest && max_len > model->cfg.max_seq_len) {
        tg__run_err(ctx, TG_ERR_ARG, FN, "the training set's max_len %" PRId64 " is above the "
                    "model's max_seq_len %" PRId64 ", which a sampled segmentation can reach",
                    max_len, model->cfg.max_seq_len);
        return false;
    }
    if (o->sample_nbest && o->batch_tokens < max_len) {
        tg__run_err(ctx, TG_ERR_ARG, FN,
                    "batch_tokens %" PRId64 " is smaller than max_len %" PRId64
                    ", which a sampled segmentation can reach",
                    o->batch_tokens, max_len);
        return false;
    }
    if (o->batch_tokens < longest(o)) {
        tg__run_err(ctx, TG_ERR_ARG, FN, "batch_tokens %" PRId64 " is smaller than the longest "
                    "sequence (%" PRId64 " tokens)", o->batch_tokens, longest(o));
        return false;
    }
    return true;
}

/* The data the current epoch trains on: its sampled segmentations, or the training set. */
static const tg_seq2seq_data *epoch_data(const tg_train_pairs *m)
{
    return m->sampled ? m->sampled : m->o.train;
}

/* The batches of epoch m->epoch (and its segmentations when sampling). */
static bool plan_epoch(tg_train_pairs *m)
{
    tg_batches_free(m->plan);
    m->plan = NULL;
    tg_seq2seq_free(m->sampled);
    m->sampled = NULL;
    if (m->o.sample_nbest) {
        m->sampled = tg_seq2seq_sample(m->ctx, m->o.train, m->o.tokenizer, m->o.sample_nbest,
                                       m->o.sample_alpha, m->o.seed, m->epoch);
        if (!m->sampled)
            return false;
    }
    m->plan = tg_seq2seq_batches(epoch_data(m), m->o.batch_tokens, m->o.seed, m->epoch);
    return m->plan != NULL;
}

/* A resumed run: the plan of its epoch, and its cursor within it. */
static bool start_at(tg_train_pairs *m)
{
    m->epoch = m->o.epoch;
    m->cursor = m->o.batch;
    if (m->epoch == 0 && m->cursor == 0)
        return true; /* a fresh run makes its first plan at its first step */
    if (!plan_epoch(m))
        return false;
    if (m->cursor > tg_batches_count(m->plan)) {
        tg__run_err(m->ctx, TG_ERR_ARG, FN, "batch %" PRId64 " is beyond the %" PRId64
                    " batches of epoch %" PRId64, m->cursor, tg_batches_count(m->plan),
                    m->epoch);
        return false;
    }
    return true;
}

static bool build(tg_train_pairs *m, const tg_transformer *model)
{
    tg_seq2seq_loss_opts lo = tg_seq2seq_loss_defaults();
    lo.label_smoothing = m->o.label_smoothing;
    lo.precision = m->o.precision;
    m->loss = tg_seq2seq_loss_new(m->ctx, model, &lo);
    if (!m->loss)
        return false;
    tg_search_opts so = tg_search_defaults();
    so.method = TG_SEARCH_GREEDY;
    so.beam = 1;
    m->greedy = tg_translator_new(m->ctx, model, m->o.max_sentences, &so);
    return m->greedy && tg_generator_set_precision(tg_translator_generator(m->greedy),
                                                   m->o.precision) == TG_OK;
}

tg_train_pairs *tg_train_pairs_new(tg_ctx *ctx, const tg_transformer *model,
                                   const tg_train_pairs_opts *o)
{
    if (!ctx)
        return NULL;
    tg__begin(ctx);
    if (!opts_ok(ctx, model, o))
        return NULL;
    tg_train_pairs *m = calloc(1, sizeof *m);
    if (!m) {
        tg__run_err(ctx, TG_ERR_NOMEM, FN, "out of memory");
        return NULL;
    }
    m->ctx = ctx;
    m->o = *o;
    if (!m->o.max_sentences)
        m->o.max_sentences = 64;
    if (!start_at(m) || !build(m, model)) {
        if (tg_ctx_status(ctx) == TG_OK)
            tg__run_err(ctx, TG_ERR_STATE, FN, "building the translation run failed");
        tg_train_pairs_free(m);
        return NULL;
    }
    return m;
}

/* Room for @p n examples of lengths S, T in the batch arrays. */
static bool reserve(tg_train_pairs *m, int64_t n, int64_t S, int64_t T)
{
    size_t ns = (size_t)(n * S), nt = (size_t)(n * T);
    if (ns > m->cap_s) {
        int32_t *s = realloc(m->src, ns * sizeof *s);
        if (!s)
            return false;
        m->src = s;
        m->cap_s = ns;
    }
    if (nt > m->cap_t) {
        int32_t *a = realloc(m->tin, nt * sizeof *a);
        if (a)
            m->tin = a;
        int32_t *b = a ? realloc(m->lab, nt * sizeof *b) : NULL;
        if (b)
            m->lab = b;
        if (!a || !b)
            return false;
        m->cap_t = nt;
    }
    if ((size_t)n > m->cap_n) {
        int64_t *l = realloc(m->slen, (size_t)n * sizeof *l);
        if (!l)
            return false;
        m->slen = l;
        m->cap_n = (size_t)n;
    }
    return true;
}

/* Batch @p bt of the training data into the arrays (tg_seq2seq_batch_fill: source + EOS;
 * BOS + target; target + EOS; padding: pad id, labels -100). */
static tg_status fill(tg_train_pairs *m, tg_batch bt, tg_seq2seq_batch *b)
{
    if (!reserve(m, bt.n, bt.src_len, bt.tgt_len)) {
        tg__run_err(m->ctx, TG_ERR_NOMEM, "tg_train_pairs", "out of memory");
        return TG_ERR_NOMEM;
    }
    int64_t tokens = tg_seq2seq_batch_fill(epoch_data(m), bt.examples, bt.n, bt.src_len, bt.tgt_len,
                                           -100, m->src, m->slen, m->tin, m->lab, b);
    if (tokens < 0) {
        tg__run_err(m->ctx, TG_ERR_STATE, "tg_train_pairs", "a batch does not fit its shape");
        return TG_ERR_STATE;
    }
    m->last_tokens = tokens;
    return TG_OK;
}

/* The status of a call that failed with its error on the context. */
static tg_status failed(const tg_ctx *ctx)
{
    tg_status s = tg_ctx_status(ctx);
    return s != TG_OK ? s : TG_ERR_STATE;
}

/* The plan of the epoch the cursor is in (the next epoch's after the last batch). */
static tg_status plan_next(tg_train_pairs *m)
{
    if (m->plan && m->cursor < tg_batches_count(m->plan))
        return TG_OK;
    if (m->plan) {
        m->epoch++;
        m->cursor = 0;
    }
    return plan_epoch(m) ? TG_OK : failed(m->ctx);
}

const tg_graph *tg_train_pairs_graph(tg_train_pairs *m)
{
    if (!m)
        return NULL;
    if (!m->plan && !plan_epoch(m)) /* the first epoch's plan, as the first step makes it */
        return NULL;
    int64_t n = tg_batches_count(m->plan);
    tg_seq2seq_batch b;
    if (fill(m, tg_batches_get(m->plan, m->cursor < n ? m->cursor : n - 1), &b) != TG_OK)
        return NULL;
    return tg_seq2seq_loss_graph(m->loss, &b, true);
}

static tg_status batch(void *user, int64_t step)
{
    tg_train_pairs *m = user;
    (void)step; /* the micro-batch draws: the cursor is the run's position */
    tg_ctx_set_training(m->ctx, true);
    return TG_OK;
}

/* The next batch of the epoch's plan: forward and backward (tg_micro_batch_fn). */
static tg_status micro(void *user, int64_t i, double *l)
{
    tg_train_pairs *m = user;
    (void)i; /* one micro-batch per step */
    tg_seq2seq_batch b;
    tg_status s = plan_next(m);
    if (s == TG_OK)
        s = fill(m, tg_batches_get(m->plan, m->cursor), &b);
    if (s != TG_OK)
        return s;
    m->cursor++;
    return tg_seq2seq_loss_backward(m->loss, &b, l) == TG_OK ? TG_OK : failed(m->ctx);
}

static int64_t tokens(void *user) { return ((const tg_train_pairs *)user)->last_tokens; }

/* Sentence @p i's greedy translation, decoded into *hyp (grown as needed); its length, or -1. */
static int64_t decode_text(tg_train_pairs *m, const tg_translation *t, char **hyp, size_t *cap)
{
    int64_t k = tg_tokenizer_decode(m->o.tokenizer, t->ids, t->len, *hyp, *cap);
    if (k >= 0 && (size_t)k >= *cap) {
        char *h = realloc(*hyp, (size_t)k + 1);
        if (!h) {
            tg__run_err(m->ctx, TG_ERR_NOMEM, "tg_train_pairs_evaluate", "out of memory");
            return -1;
        }
        *hyp = h;
        *cap = (size_t)k + 1;
        k = tg_tokenizer_decode(m->o.tokenizer, t->ids, t->len, *hyp, *cap);
    }
    return k;
}

/* The BLEU and chrF statistics of the validation set's greedy translations, in file order;
 * TG_ERR_NONFINITE when the logits were not finite (the error stays on the context). */
static tg_status translate_valid(tg_train_pairs *m, tg_bleu_stats *bs, tg_chrf_stats *cs)
{
    int64_t N = tg_seq2seq_count(m->o.valid), B = m->o.max_sentences;
    const int32_t **src = malloc(sizeof *src * (size_t)B);
    int64_t *len = malloc(sizeof *len * (size_t)B);
    tg_translation *out = malloc(sizeof *out * (size_t)B);
    size_t cap = 4096;
    char *hyp = malloc(cap);
    tg_status s = src && len && out && hyp ? TG_OK : TG_ERR_NOMEM;
    if (s != TG_OK)
        tg__run_err(m->ctx, s, "tg_train_pairs_evaluate", "out of memory");
    for (int64_t i = 0; s == TG_OK && i < N; i += B) {
        int64_t nb = N - i < B ? N - i : B;
        for (int64_t j = 0; j < nb; j++)
            src[j] = tg_seq2seq_source(m->o.valid, i + j, &len[j]);
        s = tg_translate_batch(m->greedy, nb, src, len, out);
        for (int64_t j = 0; s == TG_OK && j < nb; j++) {
            int64_t k = decode_text(m, &out[j], &hyp, &cap);
            const char *ref = tg_seq2seq_target_text(m->o.valid, i + j);
            s = k < 0 ? failed(m->ctx)
                      : tg_bleu_stats_add(m->ctx, bs, hyp, (size_t)k, ref, strlen(ref));
            if (s == TG_OK)
                s = tg_chrf_stats_add(m->ctx, cs, hyp, (size_t)k, ref, strlen(ref));
        }
    }
    free(src);
    free(len);
    free(out);
    free(hyp);
    return s;
}

tg_status tg_train_pairs_evaluate(tg_train_pairs *m, double *val, double *bleu, bool *reached)
{
    *val = *bleu = NAN;
    *reached = false;
    tg_ctx_set_training(m->ctx, false);
    /* validation loss: the validation set in epoch 0's batches, unsmoothed, per token */
    tg_status s = tg_seq2seq_evaluate(m->loss, m->o.valid, m->o.batch_tokens, m->o.seed, val,
                                      NULL);
    if (s != TG_OK)
        return s;
    tg_bleu_stats bs;
    tg_chrf_stats cs;
    memset(&bs, 0, sizeof bs);
    memset(&cs, 0, sizeof cs);
    s = translate_valid(m, &bs, &cs);
    m->scored = s == TG_OK || s == TG_ERR_NONFINITE;
    m->nonfinite = s == TG_ERR_NONFINITE;
    memset(&m->bleu, 0, sizeof m->bleu);
    memset(&m->chrf, 0, sizeof m->chrf);
    if (m->nonfinite) { /* NaN or inf logits: nothing counts as translated */
        tg_ctx_clear_error(m->ctx);
        *val = NAN;
        *bleu = 0;
    } else if (s != TG_OK) {
        return s;
    } else if ((s = tg_bleu_stats_score(m->ctx, &bs, &m->bleu)) != TG_OK ||
               (s = tg_chrf_stats_score(m->ctx, &cs, &m->chrf)) != TG_OK) {
        return s; /* cannot happen: the statistics are tg_*_stats_add's sums */
    } else {
        *bleu = m->bleu.score;
        *reached = m->o.target_bleu > 0 && m->bleu.score >= m->o.target_bleu;
    }
    tg_ctx_set_training(m->ctx, true);
    return TG_OK;
}

static tg_status evaluate(void *user, int64_t step, double *val, double *metric, bool *reached)
{
    (void)step;
    return tg_train_pairs_evaluate(user, val, metric, reached);
}

void tg_train_pairs_bind(tg_train_pairs *m, tg_train_callbacks *cb, tg_train_config *cfg)
{
    cb->model_user = m;
    cb->batch = batch;
    cb->micro = micro;
    cb->tokens = tokens;
    cb->evaluate = evaluate;
    cfg->accum = NULL;
    cfg->tokens_per_step = 0;
}

bool tg_train_pairs_scores(const tg_train_pairs *m, tg_bleu *bleu, tg_chrf *chrf)
{
    if (bleu)
        *bleu = m ? m->bleu : (tg_bleu){0};
    if (chrf)
        *chrf = m ? m->chrf : (tg_chrf){0};
    return m && m->scored && !m->nonfinite;
}

void tg_train_pairs_position(const tg_train_pairs *m, int64_t *epoch, int64_t *batch)
{
    *epoch = m ? m->epoch : 0;
    *batch = m ? m->cursor : 0;
}

int64_t tg_train_pairs_last_tokens(const tg_train_pairs *m) { return m ? m->last_tokens : 0; }

tg_status tg_train_pairs_meta(tg_train_pairs *m, tg_train_meta_list *list)
{
    if (!m || !list)
        return TG_ERR_ARG;
    const char *tk[2];
    free(m->tok_values[0]);
    free(m->tok_values[1]);
    m->tok_values[0] = m->tok_values[1] = NULL;
    int nt = tg_tokenizer_meta(m->o.tokenizer, tk, m->tok_values);
    int ns = m->o.sample_nbest ? 2 : 0;
    if (nt < 0 || list->n + nt + 5 + ns > TG_TRAIN_RECORD_META_MAX) {
        tg__run_err(m->ctx, nt < 0 ? TG_ERR_NOMEM : TG_ERR_ARG, "tg_train_pairs_meta",
                    nt < 0 ? "out of memory" : "the list is full");
        return nt < 0 ? TG_ERR_NOMEM : TG_ERR_ARG;
    }
    for (int i = 0; i < nt; i++) {
        list->keys[list->n] = tk[i];
        list->values[list->n++] = m->tok_values[i];
    }
    tg_seq2seq_info ti = tg_seq2seq_get_info(m->o.train), vi = tg_seq2seq_get_info(m->o.valid);
    snprintf(m->meta_store[0], sizeof m->meta_store[0], "fnv1a64:%016" PRIx64, ti.hash);
    snprintf(m->meta_store[1], sizeof m->meta_store[1], "fnv1a64:%016" PRIx64, vi.hash);
    snprintf(m->meta_store[2], sizeof m->meta_store[2], "%" PRId64, m->o.batch_tokens);
    /* data.epoch, data.batch: the training state's (tg_train_checkpoint_save), placed here */
    static const char *const keys[5] = {"data.pairs_hash", "data.valid_hash", "data.epoch",
                                        "data.batch", "train.batch_tokens"};
    const char *vals[5] = {m->meta_store[0], m->meta_store[1], NULL, NULL, m->meta_store[2]};
    for (int i = 0; i < 5; i++) {
        list->keys[list->n] = keys[i];
        list->values[list->n++] = vals[i];
    }
    if (ns) { /* subword regularization: only when on */
        snprintf(m->meta_store[3], sizeof m->meta_store[3], "%.17g", m->o.sample_alpha);
        snprintf(m->meta_store[4], sizeof m->meta_store[4], "%d", m->o.sample_nbest);
        list->keys[list->n] = "train.spm_alpha";
        list->values[list->n++] = m->meta_store[3];
        list->keys[list->n] = "train.spm_nbest";
        list->values[list->n++] = m->meta_store[4];
    }
    return TG_OK;
}

void tg_train_pairs_free(tg_train_pairs *m)
{
    if (!m)
        return;
    tg_seq2seq_loss_free(m->loss);
    tg_translator_free(m->greedy);
    tg_batches_free(m->plan);
    tg_seq2seq_free(m->sampled);
    free(m->tok_values[0]);
    free(m->tok_values[1]);
    free(m->src);
    free(m->tin);
    free(m->lab);
    free(m->slen);
    free(m);
}
