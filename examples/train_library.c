/*
 * train_library.c - the training loop from the library's pieces, as `tgrad train --text` runs
 * it (public headers only):
 *
 *   1. data: tg_text_load reads a corpus (here a file this program writes), with its byte
 *      vocabulary, validation split and content hash; tg_text_train_batch draws windows
 *   2. one step: tg_train_step runs K = 2 micro-batches through a callback (fill, forward,
 *      backward seeded 1/K), sums their gradients in tg_grad_accum's fixed tree, clips and
 *      updates with AdamW at the noam schedule's learning rate
 *   3. evaluation: tg_evaluate averages the loss over every validation target (batches
 *      weighted by their targets), in evaluation mode
 *   4. a checkpoint by config: tg_train_checkpoint_save writes the model's metadata, the run's
 *      state (steps, data position, best validation loss), the program's own fields, the
 *      parameters and the optimizer state; tg_train_checkpoint_restore puts them into a model
 *      and optimizer built from the file alone, in another context
 *
 * Exits 1 unless the validation loss fell and the restored run equals the saved one.
 */
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include "tgrad_data.h"
#include "tgrad_train.h"

enum { B = 8, K = 2, BM = B / K, T = 16, STEPS = 120 };

typedef struct {
    tg_ctx *ctx;
    const tg_text *text;
    tg_graph *g;
    tg_tensor *ids, *targets, *loss, *share;
    int32_t x[B * T], y[B * T]; /* the step's batch: K micro-batches of BM rows */
    int64_t val_rows;           /* real windows in the current validation batch */
} run;

/* tg_micro_batch_fn: rows i BM .. (i+1) BM - 1 of the batch, forward and backward. */
static tg_status micro(void *user, int64_t i, double *loss)
{
    run *r = user;
    tg_graph_zero_grad(r->g);
    tg_status s = tg_tensor_set_data(r->ids, r->x + i * BM * T, TG_I32, BM * T);
    if (s == TG_OK)
        s = tg_tensor_set_data(r->targets, r->y + i * BM * T, TG_I32, BM * T);
    if (s == TG_OK)
        s = tg_graph_forward(r->g);
    if (s == TG_OK)
        s = tg_graph_backward(r->g, r->loss, r->share); /* d(loss / K) */
    *loss = tg_get(r->loss, 0) / K;
    return s;
}

/* tg_eval_batch_fn: validation batch i of BM windows; its summed loss and targets. */
static tg_status eval_batch(void *user, int64_t i, double *sum, int64_t *tokens)
{
    run *r = user;
    r->val_rows = tg_text_val_batch(r->text, i, BM, T, r->x, r->y);
    tg_status s = tg_tensor_set_data(r->ids, r->x, TG_I32, BM * T);
    if (s == TG_OK)
        s = tg_tensor_set_data(r->targets, r->y, TG_I32, BM * T);
    if (s == TG_OK)
        s = tg_graph_forward(r->g);
    *sum = tg_get(r->loss, 0) * (double)(r->val_rows * T); /* padding rows are ignored */
    *tokens = r->val_rows * T;
    return s;
}

#define CHECK(ctx, cond)                                                                       \
    do {                                                                                       \
        if (!(cond)) {                                                                         \
            fprintf(stderr, "train_library: %s\n", tg_ctx_message(ctx));                       \
            return 1;                                                                          \
        }                                                                                      \
    } while (0)

/* 4. the checkpoint at @p ck into a new context: config from its metadata, then the model,
 * the optimizer and tg_train_checkpoint_restore; compared with the run that saved it. */
static int resume(tg_ctx *saved, const char *ck, const tg_optim_config *oc, double best_val)
{
    tg_ctx *ctx = tg_ctx_new();
    if (!ctx)
        return 1;
    int rc = 1;
    tg_safetensors *st = tg_safetensors_read(ctx, ck);
    tg_transformer_config cfg;
    tg_dtype dt;
    tg_transformer model;
    tg_optim *opt = NULL;
    tg_train_state s;
    if (st && tg_transformer_meta_read(ctx, st, ck, &cfg, &dt) == TG_OK &&
        tg_transformer_init(ctx, &model, dt, &cfg) == TG_OK &&
        (opt = tg_optim_new(ctx, oc, 0, NULL)) != NULL &&
        tg_train_checkpoint_restore(ctx, st, ck, &cfg, dt, oc, opt, &s) == TG_OK) {
        bool same = tg_ctx_n_params(ctx) == tg_ctx_n_params(saved) && s.best_val == best_val;
        for (int64_t i = 0; same && i < tg_ctx_n_params(ctx); i++) {
            tg_tensor *a = tg_ctx_param(ctx, i), *b = tg_ctx_param(saved, i);
            same = !strcmp(tg_tensor_name(a), tg_tensor_name(b)) &&
                   !memcmp(tg_tensor_data(a), tg_tensor_data(b),
                           sizeof(float) * (size_t)tg_tensor_numel(a));
        }
        printf("restored from %s: step %lld of %lld, data position %lld, best validation loss "
               "%.4f, parameters %s\n", ck, (long long)s.step, (long long)s.steps,
               (long long)s.position, s.best_val, same ? "equal" : "DIFFERENT");
        rc = same ? 0 : 1;
    } else {
        fprintf(stderr, "train_library: %s\n", tg_ctx_message(ctx));
    }
    tg_ctx_free(ctx);
    return rc;
}

static int train(tg_ctx *ctx, const char *path)
{
    /* 1. data: 10% of the bytes held out */
    tg_text *text = tg_text_load(ctx, &path, 1, 0.1);
    CHECK(ctx, text != NULL);
    tg_text_info in = tg_text_get_info(text);
    printf("corpus: %lld bytes (%lld train), vocabulary %d, hash %016llx\n",
           (long long)in.bytes, (long long)in.train_bytes, in.vocab_size,
           (unsigned long long)in.hash);

    tg_transformer_config cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.vocab_size = in.vocab_size;
    cfg.max_seq_len = T;
    cfg.n_layers = 1;
    cfg.layer = tg_encoder_config_default(32, 4);
    cfg.layer.d_ff = 64;
    cfg.layer.norm_first = true;
    cfg.layer.dropout = 0.1; /* micro-batch i's masks: the step's RNG state jumped i times */
    cfg.causal = true;
    tg_transformer model;
    CHECK(ctx, tg_transformer_init(ctx, &model, TG_F32, &cfg) == TG_OK);
    run r = {.ctx = ctx, .text = text};
    r.ids = tg_input(ctx, TG_I32, TG_DIMS(BM, T), "ids");
    r.targets = tg_input(ctx, TG_I32, TG_DIMS(BM, T), "targets");
    tg_tensor *logits = tg_transformer_forward(ctx, &model, r.ids, NULL); /* (BM, T, V) */
    r.loss = tg_cross_entropy(ctx, logits, r.targets, -1);                /* () */
    r.g = tg_graph_new(ctx, &r.loss, 1);
    r.share = tg_const(ctx, TG_F32, 0, NULL, "share");
    CHECK(ctx, r.g && r.share);
    tg_fill(r.share, 1.0 / K);
    tg_optim_config oc = tg_optim_defaults(TG_OPTIM_ADAMW);
    oc.beta2 = 0.98;
    tg_optim *opt = tg_optim_new(ctx, &oc, 0, NULL);
    tg_grad_accum *acc = tg_grad_accum_new(ctx, 0, NULL, K, 0, K);
    CHECK(ctx, opt && acc);

    /* 3. evaluation before and after */
    int64_t nb = tg_text_val_batches(text, BM, T), tokens;
    double before, after;
    CHECK(ctx, tg_evaluate(ctx, nb, eval_batch, &r, &before, &tokens) == TG_OK);

    /* 2. the steps */
    tg_train_step_opts so = {.clip = 1.0, .accum = acc};
    for (int64_t step = 0; step < STEPS; step++) {
        CHECK(ctx, tg_text_train_batch(ctx, text, B, T, r.x, r.y) == TG_OK);
        double lr = tg_lr_noam(step, 32, 20, 1.0);
        tg_train_step_result res;
        CHECK(ctx, tg_train_step(ctx, opt, &so, micro, &r, lr, &res) == TG_OK);
        if (step % 40 == 0 || step == STEPS - 1)
            printf("step %3lld  loss %.4f  grad norm %.3f  lr %.2e\n", (long long)step + 1,
                   res.loss, res.grad_norm, lr);
    }
    CHECK(ctx, tg_evaluate(ctx, nb, eval_batch, &r, &after, &tokens) == TG_OK);
    printf("validation loss per byte over %lld targets: %.4f -> %.4f\n", (long long)tokens,
           before, after);

    /* 4. a checkpoint by config, and the run restored from it */
    tg_train_state state = tg_train_state_init();
    state.steps = STEPS;
    state.position = STEPS * B;
    state.best_val = after < before ? after : before;
    char hash[32];
    snprintf(hash, sizeof hash, "fnv1a64:%016llx", (unsigned long long)in.hash);
    const char *keys[2] = {"data.mode", "data.text_hash"}, *values[2] = {"text", hash};
    const char *ck = "train_library.safetensors";
    CHECK(ctx, tg_train_checkpoint_save(ctx, ck, opt, &cfg, TG_F32, &state, 2, keys, values,
                                        NULL) == TG_OK);
    int rc = resume(ctx, ck, &oc, state.best_val);
    remove(ck);
    tg_text_free(text);
    return after < before ? rc : 1;
}

int main(void)
{
    const char *path = "train_library.txt";
    FILE *f = fopen(path, "w");
    if (!f)
        return 1;
    for (int i = 0; i < 60; i++)
        fprintf(f, "the %s sat on the %s. ", i % 3 ? "cat" : "dog", i % 2 ? "mat" : "log");
    fclose(f);
    tg_ctx *ctx = tg_ctx_new();
    if (!ctx)
        return 1;
    tg_ctx_seed(ctx, 3);
    int rc = train(ctx, path);
    tg_ctx_free(ctx);
    remove(path);
    return rc;
}
