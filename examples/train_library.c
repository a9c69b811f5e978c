/*
 * train_library.c - `tgrad train --pairs train.tsv --valid valid.tsv --tokenizer bytes --steps 200
 * --eval-every 100 --layers 1 --d-model 32 --heads 4 --d-ff 64 --seq-len 32 --batch-tokens 256
 * --warmup 20 --seed 3 --checkpoint run.safetensors` from the public headers, with no loop of
 * its own: tg_train_pairs (batches, loss, validation BLEU) and tg_train_run (the loop); the
 * checkpoint is the command's, byte for byte (tests/train_library_same.sh). The data: numbers
 * in English and German, written by the program. Usage: train_library [DIR] (default: a
 * temporary directory, removed afterwards).
 */
#define _POSIX_C_SOURCE 200809L /* mkdtemp */
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "tgrad_run.h"

typedef struct {
    tg_ctx *ctx;
    tg_optim *opt;
    tg_transformer_config cfg;
    tg_train_pairs *pairs;
    char ck[4200];
} run;

/* What `tgrad train --pairs` records: the options (its defaults for translation), the data. */
static tg_status save(void *u, int64_t steps, double best_val)
{
    run *r = u;
    tg_train_record rec = {.mode = "pairs", .seed = 3, .optimizer = TG_OPTIM_ADAM, .batch = 64,
                           .grad_accum = 1, .warmup = 20, .eval_every = 100, .lr = 0.5,
                           .min_lr = 0.05, .clip = 1, .momentum = 0.9, .val_fraction = 0.1,
                           .schedule = TG_LR_NOAM, .beta2 = 0.98, .eps = 1e-9,
                           .label_smoothing = 0.1};
    tg_train_state st = tg_train_state_init();
    st.steps = 200, st.position = steps * 64, st.best_val = best_val;
    tg_train_pairs_position(r->pairs, &st.epoch, &st.batch);
    tg_train_meta_list *m = calloc(1, sizeof *m);
    tg_status s = m ? tg_train_record_meta(r->ctx, &rec, m) : TG_ERR_NOMEM;
    if (s == TG_OK)
        s = tg_train_pairs_meta(r->pairs, m);
    if (s == TG_OK)
        s = tg_train_checkpoint_save(r->ctx, r->ck, r->opt, &r->cfg, TG_F32, &st, m->n, m->keys,
                                     m->values, NULL);
    free(m);
    return s;
}

static int train(run *r, tg_tokenizer *tok, const char *train_tsv, const char *valid_tsv)
{
    tg_seq2seq_opts so = {.max_len = 32}, vo = {.max_len = 32, .keep_text = true}; /* BLEU */
    tg_seq2seq_data *tr = tg_seq2seq_load(r->ctx, train_tsv, tok, &so);
    tg_seq2seq_data *va = tr ? tg_seq2seq_load(r->ctx, valid_tsv, tok, &vo) : NULL;
    r->cfg = (tg_transformer_config){.vocab_size = tg_tokenizer_vocab_size(tok),
                                     .max_seq_len = 32, .n_layers = 1, .n_decoder_layers = 1,
                                     .layer = tg_encoder_config_default(32, 4),
                                     .pos = TG_POS_SINUSOIDAL, .tie_weights = true,
                                     .scale_embeddings = true};
    r->cfg.layer.d_ff = 64, r->cfg.layer.norm_first = true, r->cfg.layer.dropout = 0.1;
    tg_transformer model;
    tg_train_pairs_opts po = {.tokenizer = tok, .train = tr, .valid = va, .batch_tokens = 256,
                              .seed = 3, .label_smoothing = 0.1};
    if (va && tg_transformer_init(r->ctx, &model, TG_F32, &r->cfg) == TG_OK)
        r->pairs = tg_train_pairs_new(r->ctx, &model, &po);
    tg_optim_config oc = tg_optim_defaults(TG_OPTIM_ADAM);
    oc.lr = 0.5, oc.beta2 = 0.98, oc.eps = 1e-9, oc.weight_decay = 0;
    r->opt = r->pairs ? tg_optim_new(r->ctx, &oc, 0, NULL) : NULL;
    tg_train_config c = tg_train_config_default();
    c.steps = 200, c.eval_every = 100, c.schedule = TG_LR_NOAM, c.lr = 0.5, c.min_lr = 0.05;
    c.warmup = 20, c.d_model = 32, c.clip = 1.0;
    tg_train_callbacks cb = {.user = r, .save = save};
    tg_train_result res;
    int rc = 1;
    if (r->opt)
        tg_train_pairs_bind(r->pairs, &cb, &c);
    if (r->opt && tg_train_run(r->ctx, r->opt, &c, &cb, &res) == TG_OK) {
        tg_bleu bleu;
        tg_train_pairs_scores(r->pairs, &bleu, NULL);
        printf("validation loss %.4f (best %.4f), greedy BLEU %.2f\n", res.last_val,
               res.best_val, bleu.score);
        rc = 0;
    }
    tg_train_pairs_free(r->pairs);
    tg_seq2seq_free(tr);
    tg_seq2seq_free(va);
    return rc;
}

/* Pairs "two five." -> "zwei fünf."; validation: the eight with (i + j) % 8 == 0. */
static int write_data(const char *train_tsv, const char *valid_tsv)
{
    static const char *en[8] = {"one", "two", "three", "four", "five", "six", "seven", "eight"};
    static const char *de[8] = {"eins", "zwei", "drei", "vier", "fünf", "sechs", "sieben",
                                "acht"};
    FILE *f[2] = {fopen(train_tsv, "w"), fopen(valid_tsv, "w")};
    for (int i = 0; f[0] && f[1] && i < 64; i++)
        fprintf(f[(i / 8 + i % 8) % 8 == 0], "%s %s.\t%s %s.\n", en[i / 8], en[i % 8],
                de[i / 8], de[i % 8]);
    int bad = !f[0] || !f[1];
    int e0 = f[0] && fclose(f[0]), e1 = f[1] && fclose(f[1]); /* both closed */
    return e0 || e1 || bad;
}

int main(int argc, char **argv)
{
    char tmp[] = "/tmp/train_library.XXXXXX", tsv[2][4200];
    const char *dir = argc > 1 ? argv[1] : mkdtemp(tmp);
    if (!dir)
        return 1;
    run r = {.ctx = tg_ctx_new()};
    snprintf(tsv[0], sizeof tsv[0], "%s/train.tsv", dir);
    snprintf(tsv[1], sizeof tsv[1], "%s/valid.tsv", dir);
    snprintf(r.ck, sizeof r.ck, "%s/run.safetensors", dir);
    tg_tokenizer *tok = r.ctx ? tg_tokenizer_bytes(r.ctx) : NULL; /* UTF-8 bytes */
    int rc = !tok || write_data(tsv[0], tsv[1]);
    if (!rc) {
        tg_ctx_seed(r.ctx, 3);
        if ((rc = train(&r, tok, tsv[0], tsv[1])) != 0)
            fprintf(stderr, "train_library: %s\n", tg_ctx_message(r.ctx));
    }
    tg_tokenizer_free(tok);
    tg_ctx_free(r.ctx);
    for (int k = 0; argc <= 1 && k < 4; k++) /* our own temporary directory */
        k < 3 ? unlink(k < 2 ? tsv[k] : r.ck) : rmdir(dir);
    return rc;
}
