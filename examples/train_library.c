/*
 * train_library.c - a training run as `tgrad train --text` runs it, from the public headers:
 * tg_text_load reads a corpus (written into a temporary directory), tg_train_run runs the
 * loop (noam schedule, K = 2 micro-batches summed in a fixed tree, clipping, AdamW, an
 * evaluation every 40 steps, the best validation loss, a checkpoint at each evaluation) with
 * this program's batch, micro-batch, evaluation and save as callbacks; then the checkpoint is
 * restored, from the file alone, into another context and compared with the run.
 * Exits 1 unless the validation loss fell and the restored run equals the saved one.
 */
#define _POSIX_C_SOURCE 200809L /* mkdtemp */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "tgrad_data.h"
#include "tgrad_train.h"

enum { B = 8, K = 2, BM = B / K, T = 16, STEPS = 120 };

typedef struct {
    tg_ctx *ctx;
    const tg_text *text;
    tg_graph *g;
    tg_tensor *ids, *targets, *loss, *share;
    tg_optim *opt;
    tg_transformer_config cfg;
    const char *ck;
    int32_t x[B * T], y[B * T]; /* the step's batch: K micro-batches of BM rows */
} run;

static tg_status batch(void *u, int64_t step)
{
    run *r = u;
    (void)step;
    return tg_text_train_batch(r->ctx, r->text, B, T, r->x, r->y);
}

/* Rows i BM .. (i+1) BM - 1 of the batch, forward and backward of loss / K. */
static tg_status micro(void *u, int64_t i, double *loss)
{
    run *r = u;
    tg_graph_zero_grad(r->g);
    tg_status s = tg_tensor_set_data(r->ids, r->x + i * BM * T, TG_I32, BM * T);
    if (s == TG_OK)
        s = tg_tensor_set_data(r->targets, r->y + i * BM * T, TG_I32, BM * T);
    if (s == TG_OK)
        s = tg_graph_forward(r->g);
    if (s == TG_OK)
        s = tg_graph_backward(r->g, r->loss, r->share);
    *loss = tg_get(r->loss, 0) / K;
    return s;
}

static tg_status evaluate(void *u, int64_t step, double *val, double *metric, bool *reached)
{
    run *r = u;
    (void)step, (void)metric, (void)reached;
    return tg_text_evaluate(r->ctx, r->text, r->g, r->ids, r->targets, r->loss, val, NULL);
}

static tg_status save(void *u, int64_t steps, double best_val)
{
    run *r = u;
    tg_train_state st = tg_train_state_init();
    st.steps = STEPS;
    st.position = steps * B;
    st.best_val = best_val;
    const char *keys[1] = {"data.mode"}, *values[1] = {"text"};
    return tg_train_checkpoint_save(r->ctx, r->ck, r->opt, &r->cfg, TG_F32, &st, 1, keys, values,
                                    NULL);
}

static tg_status row(void *u, const tg_train_row *w)
{
    (void)u;
    if (w->eval)
        printf("step %3lld  loss %.4f  lr %.2e  validation %.4f\n", (long long)w->step, w->loss,
               w->lr, w->val_loss);
    return TG_OK;
}

/* The checkpoint in a new context; 0 when its parameters equal the run's. */
static int restore(tg_ctx *saved, const char *ck, const tg_optim_config *oc)
{
    tg_ctx *ctx = tg_ctx_new();
    tg_safetensors *st = ctx ? tg_safetensors_read(ctx, ck) : NULL;
    tg_transformer_config cfg;
    tg_dtype dt;
    tg_transformer m;
    tg_optim *opt = NULL;
    tg_train_state s;
    bool same = st && tg_transformer_meta_read(ctx, st, ck, &cfg, &dt) == TG_OK &&
                tg_transformer_init(ctx, &m, dt, &cfg) == TG_OK &&
                (opt = tg_optim_new(ctx, oc, 0, NULL)) &&
                tg_train_checkpoint_restore(ctx, st, ck, &cfg, dt, oc, opt, &s) == TG_OK;
    for (int64_t i = 0; same && i < tg_ctx_n_params(ctx); i++) {
        tg_tensor *a = tg_ctx_param(ctx, i), *b = tg_ctx_param(saved, i);
        same = !memcmp(tg_tensor_data(a), tg_tensor_data(b), 4 * (size_t)tg_tensor_numel(a));
    }
    printf("restored: step %lld, parameters %s\n", same ? (long long)s.step : -1LL,
           same ? "equal" : "DIFFERENT");
    tg_ctx_free(ctx);
    return same ? 0 : 1;
}

static int train(run *r, const char *corpus)
{
    tg_text *text = tg_text_load(r->ctx, &corpus, 1, 0.1); /* 10% of the bytes validate */
    r->text = text;
    r->cfg = (tg_transformer_config){.vocab_size = text ? tg_text_get_info(text).vocab_size : 1,
                                     .max_seq_len = T, .n_layers = 1, .causal = true,
                                     .layer = tg_encoder_config_default(32, 4)};
    r->cfg.layer.d_ff = 64;
    r->cfg.layer.norm_first = true;
    tg_transformer model;
    if (!text || tg_transformer_init(r->ctx, &model, TG_F32, &r->cfg) != TG_OK)
        return 1;
    r->ids = tg_input(r->ctx, TG_I32, TG_DIMS(BM, T), "ids");
    r->targets = tg_input(r->ctx, TG_I32, TG_DIMS(BM, T), "targets");
    tg_tensor *logits = tg_transformer_forward(r->ctx, &model, r->ids, NULL); /* (BM, T, V) */
    r->loss = tg_cross_entropy(r->ctx, logits, r->targets, -1);              /* () */
    r->g = tg_graph_new(r->ctx, &r->loss, 1);
    r->share = tg_const(r->ctx, TG_F32, 0, NULL, "share");
    tg_optim_config oc = tg_optim_defaults(TG_OPTIM_ADAMW);
    r->opt = tg_optim_new(r->ctx, &oc, 0, NULL);
    tg_train_config c = tg_train_config_default();
    c.accum = tg_grad_accum_new(r->ctx, 0, NULL, K, 0, K);
    if (!r->g || !r->share || !r->opt || !c.accum)
        return 1;
    tg_fill(r->share, 1.0 / K);
    c.steps = STEPS, c.eval_every = 40, c.schedule = TG_LR_NOAM, c.lr = 1.0, c.warmup = 20;
    c.d_model = 32, c.clip = 1.0, c.tokens_per_step = B * T;
    tg_train_callbacks cb = {.user = r, .batch = batch, .micro = micro, .evaluate = evaluate,
                             .row = row, .save = save};
    tg_train_result res;
    double before = NAN;
    tg_text_evaluate(r->ctx, text, r->g, r->ids, r->targets, r->loss, &before, NULL);
    if (tg_train_run(r->ctx, r->opt, &c, &cb, &res) != TG_OK)
        return 1;
    printf("validation loss per byte: %.4f -> %.4f (best %.4f)\n", before, res.last_val,
           res.best_val);
    return res.last_val < before ? restore(r->ctx, r->ck, &oc) : 1;
}

int main(void)
{
    char dir[] = "/tmp/train_library.XXXXXX", corpus[64], ck[64];
    if (!mkdtemp(dir))
        return 1;
    snprintf(corpus, sizeof corpus, "%s/corpus.txt", dir);
    snprintf(ck, sizeof ck, "%s/run.safetensors", dir);
    FILE *f = fopen(corpus, "w");
    for (int i = 0; f && i < 60; i++)
        fprintf(f, "the %s sat on the %s. ", i % 3 ? "cat" : "dog", i % 2 ? "mat" : "log");
    run r = {.ctx = tg_ctx_new(), .ck = ck};
    int rc = !f || fclose(f) != 0 || !r.ctx;
    if (!rc) {
        tg_ctx_seed(r.ctx, 3);
        rc = train(&r, corpus);
        if (rc)
            fprintf(stderr, "train_library: %s\n", tg_ctx_message(r.ctx));
    }
    tg_text_free((tg_text *)r.text);
    tg_ctx_free(r.ctx);
    unlink(ck);
    unlink(corpus);
    rmdir(dir);
    return rc;
}
