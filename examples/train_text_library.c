/*
 * train_text_library.c - `tgrad train --text corpus.txt --steps 120 --eval-every 40 --batch 8
 * --grad-accum 2 --seq-len 16 --layers 1 --d-model 32 --heads 4 --d-ff 64 --schedule noam
 * --warmup 20 --beta2 0.98 --seed 3 --checkpoint run.safetensors` from the public headers, with
 * no loop of its own: tg_train_tokens (graph, batches, evaluation) and tg_train_run (the loop),
 * the save through tg_train_record_meta, so the checkpoint is the command's, byte for byte
 * (tests/train_library_same.sh); then restored, from the file alone, into another context.
 * Usage: train_text_library [DIR] (default: a temporary directory, removed afterwards).
 */
#define _POSIX_C_SOURCE 200809L /* mkdtemp */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "tgrad_data.h"
#include "tgrad_train.h"

typedef struct {
    tg_ctx *ctx;
    tg_optim *opt;
    tg_transformer_config cfg;
    tg_train_record rec; /* what the checkpoint records of the data and options */
    const char *ck;
} run;

static tg_status save(void *u, int64_t steps, double best_val)
{
    run *r = u;
    tg_train_state st = tg_train_state_init();
    st.steps = 120, st.position = steps * 8, st.best_val = best_val;
    tg_train_meta_list *m = calloc(1, sizeof *m);
    tg_status s = m ? tg_train_record_meta(r->ctx, &r->rec, m) : TG_ERR_NOMEM;
    if (s == TG_OK)
        s = tg_train_checkpoint_save(r->ctx, r->ck, r->opt, &r->cfg, TG_F32, &st, m->n, m->keys,
                                     m->values, NULL);
    free(m);
    return s;
}

/* The checkpoint in a new context: true when its parameters equal the run's. */
static bool restored_equal(tg_ctx *saved, const char *ck, const tg_optim_config *oc)
{
    tg_ctx *ctx = tg_ctx_new();
    tg_safetensors *st = ctx ? tg_safetensors_read(ctx, ck) : NULL;
    tg_transformer_config cfg;
    tg_dtype dt;
    tg_transformer m;
    tg_optim *opt = NULL;
    bool same = st && tg_transformer_meta_read(ctx, st, ck, &cfg, &dt) == TG_OK &&
                tg_transformer_init(ctx, &m, dt, &cfg) == TG_OK &&
                (opt = tg_optim_new(ctx, oc, 0, NULL)) &&
                tg_train_checkpoint_restore(ctx, st, ck, &cfg, dt, oc, opt, NULL) == TG_OK;
    for (int64_t i = 0; same && i < tg_ctx_n_params(ctx); i++) {
        tg_tensor *a = tg_ctx_param(ctx, i), *b = tg_ctx_param(saved, i);
        same = !memcmp(tg_tensor_data(a), tg_tensor_data(b), 4 * (size_t)tg_tensor_numel(a));
    }
    tg_ctx_free(ctx);
    return same;
}

static int train(run *r, const char *corpus)
{
    tg_text *text = tg_text_load(r->ctx, &corpus, 1, 0.1); /* 10% of the bytes validate */
    if (!text)
        return 1;
    r->cfg = (tg_transformer_config){.vocab_size = tg_text_get_info(text).vocab_size,
                                     .max_seq_len = 16, .n_layers = 1, .causal = true,
                                     .layer = tg_encoder_config_default(32, 4)};
    r->cfg.layer.d_ff = 64, r->cfg.layer.norm_first = true;
    tg_transformer model;
    tg_train_tokens_opts to = {.text = text, .batch = 8, .seq_len = 16, .grad_accum = 2,
                               .count = 2};
    tg_train_tokens *tokens = tg_transformer_init(r->ctx, &model, TG_F32, &r->cfg) == TG_OK
                                  ? tg_train_tokens_new(r->ctx, &model, &to) : NULL;
    tg_optim_config oc = tg_optim_defaults(TG_OPTIM_ADAMW);
    oc.lr = 1.0, oc.beta2 = 0.98;
    r->opt = tokens ? tg_optim_new(r->ctx, &oc, 0, NULL) : NULL;
    r->rec = (tg_train_record){.mode = "text", .text = text, .seed = 3, .batch = 8,
                               .grad_accum = 2, .warmup = 20, .eval_every = 40, .lr = 1.0,
                               .min_lr = 0.1, .weight_decay = 0.01, .clip = 1, .momentum = 0.9,
                               .val_fraction = 0.1, .target_acc = 0.99, .beta2 = 0.98,
                               .eps = 1e-8, .optimizer = TG_OPTIM_ADAMW, .schedule = TG_LR_NOAM};
    tg_train_config c = tg_train_config_default();
    c.steps = 120, c.eval_every = 40, c.schedule = TG_LR_NOAM, c.lr = 1.0, c.min_lr = 0.1;
    c.warmup = 20, c.d_model = 32, c.clip = 1.0;
    tg_train_callbacks cb = {.user = r, .save = save};
    tg_train_result res;
    int rc = 1;
    if (r->opt) {
        tg_train_tokens_bind(tokens, &cb, &c);
        if (tg_train_run(r->ctx, r->opt, &c, &cb, &res) == TG_OK) {
            bool same = restored_equal(r->ctx, r->ck, &oc);
            printf("best validation loss %.4f; restored from %s: %s\n", res.best_val, r->ck,
                   same ? "equal" : "DIFFERENT");
            rc = same ? 0 : 1;
        }
    }
    tg_train_tokens_free(tokens);
    tg_text_free(text);
    return rc;
}

int main(int argc, char **argv)
{
    char tmp[] = "/tmp/train_text_library.XXXXXX", corpus[4096], ck[4096];
    const char *dir = argc > 1 ? argv[1] : mkdtemp(tmp);
    if (!dir)
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
        if ((rc = train(&r, corpus)) != 0)
            fprintf(stderr, "train_text_library: %s\n", tg_ctx_message(r.ctx));
    }
    tg_ctx_free(r.ctx);
    if (argc <= 1) { /* our own temporary directory */
        unlink(ck);
        unlink(corpus);
        rmdir(dir);
    }
    return rc;
}
