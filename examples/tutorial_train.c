/*
 * tutorial_train.c - the library's own tutorial: a complete training loop embedded in a C
 * program, using only the public headers. It trains a tiny byte-level language model on a
 * built-in string, the way `tgrad train --text` does, and shows each piece:
 *
 *   1. a context (owns all memory; seeded RNG; thread count)
 *   2. a model: tg_transformer_init creates named parameters (PyTorch state_dict keys)
 *   3. a static graph: ids -> logits -> cross-entropy, built once, run every step
 *   4. AdamW with warmup + cosine learning rate and gradient clipping
 *   5. an atomic checkpoint, and greedy generation in eval mode
 *
 * Every call is checked; on error the context's message says what went wrong.
 */
#include <stdio.h>
#include <string.h>

#include "tgrad_train.h"

static const char text[] =
    "the cat sat on the mat. the dog sat on the log. the cat saw the dog. "
    "the dog saw the cat. the cat and the dog sat on the mat and the log. ";

#define CHECK(ctx, cond)                                                                       \
    do {                                                                                       \
        if (!(cond)) {                                                                         \
            fprintf(stderr, "tutorial_train: %s (%s)\n", tg_ctx_message(ctx),                  \
                    tg_status_str(tg_ctx_status(ctx)));                                        \
            tg_ctx_free(ctx);                                                                  \
            return 1;                                                                          \
        }                                                                                      \
    } while (0)

enum { B = 8, T = 16, STEPS = 300 };

int main(void)
{
    /* 1. context */
    tg_ctx *ctx = tg_ctx_new();
    if (!ctx)
        return 1;
    tg_ctx_seed(ctx, 1);

    /* vocabulary: the distinct bytes of the text, in order of appearance */
    int id_of[256], n_vocab = 0;
    unsigned char vocab[256];
    for (int b = 0; b < 256; b++)
        id_of[b] = -1;
    int64_t n = (int64_t)strlen(text);
    for (int64_t i = 0; i < n; i++)
        if (id_of[(unsigned char)text[i]] < 0) {
            id_of[(unsigned char)text[i]] = n_vocab;
            vocab[n_vocab++] = (unsigned char)text[i];
        }

    /* 2. model: 1 pre-norm layer, d_model 32, 4 heads, causal mask (a language model) */
    tg_transformer_config cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.vocab_size = n_vocab;
    cfg.max_seq_len = T;
    cfg.n_layers = 1;
    cfg.layer = tg_encoder_config_default(32, 4);
    cfg.layer.d_ff = 64;
    cfg.layer.norm_first = true;
    cfg.causal = true;
    tg_transformer model;
    CHECK(ctx, tg_transformer_init(ctx, &model, TG_F32, &cfg) == TG_OK);

    /* 3. graph: built once; each step only sets new input data. Token ids and targets are
     *    integers (TG_I32); the model computes in f32. */
    tg_tensor *ids = tg_input(ctx, TG_I32, TG_DIMS(B, T), "ids");
    tg_tensor *targets = tg_input(ctx, TG_I32, TG_DIMS(B, T), "targets");
    tg_tensor *logits = tg_transformer_forward(ctx, &model, ids, NULL); /* (B, T, V) */
    tg_tensor *loss = tg_cross_entropy(ctx, logits, targets, -1);       /* () */
    tg_keep(logits); /* sampling below reads it after a forward: not reused by the planner */
    tg_graph *g = tg_graph_new(ctx, &loss, 1);
    CHECK(ctx, g != NULL);
    int64_t n_weights = 0;
    for (int64_t i = 0; i < tg_ctx_n_params(ctx); i++)
        n_weights += tg_tensor_numel(tg_ctx_param(ctx, i));
    printf("model: %lld parameters in %lld tensors (e.g. '%s'), vocabulary %d\n",
           (long long)n_weights, (long long)tg_ctx_n_params(ctx),
           tg_tensor_name(tg_ctx_param(ctx, 2)), n_vocab);

    /* 4. optimizer: AdamW over every parameter of the context */
    tg_optim_config oc = tg_optim_defaults(TG_OPTIM_ADAMW);
    oc.lr = 1e-2;
    tg_optim *opt = tg_optim_new(ctx, &oc, 0, NULL);
    CHECK(ctx, opt != NULL);

    int32_t x[B * T], y[B * T];
    double first = 0, last = 0;
    for (int step = 0; step < STEPS; step++) {
        /* a batch of random windows of the text: predict each next byte */
        for (int b = 0; b < B; b++) {
            int64_t s = (int64_t)(tg_rng_u64(ctx) % (uint64_t)(n - T - 1));
            for (int t = 0; t < T; t++) {
                x[b * T + t] = id_of[(unsigned char)text[s + t]];
                y[b * T + t] = id_of[(unsigned char)text[s + t + 1]];
            }
        }
        CHECK(ctx, tg_tensor_set_data(ids, x, TG_I32, B * T) == TG_OK);
        CHECK(ctx, tg_tensor_set_data(targets, y, TG_I32, B * T) == TG_OK);
        tg_graph_zero_grad(g);
        CHECK(ctx, tg_graph_forward(g) == TG_OK);
        CHECK(ctx, tg_graph_backward(g, loss, NULL) == TG_OK);
        double norm;
        CHECK(ctx, tg_clip_grad_norm(ctx, 0, NULL, 1.0, &norm) == TG_OK);
        double lr = tg_lr_warmup_cosine(step, STEPS, 20, oc.lr, oc.lr / 10);
        CHECK(ctx, tg_optim_step(opt, lr) == TG_OK); /* refuses non-finite gradients */
        if (step == 0)
            first = tg_get(loss, 0);
        last = tg_get(loss, 0);
        if (step % 100 == 0 || step == STEPS - 1)
            printf("step %3d  loss %.4f  grad norm %.3f  lr %.2e\n", step + 1, last, norm, lr);
    }
    printf("loss %.4f -> %.4f\n", first, last);

    /* 5. checkpoint (atomic: temporary file, fsync, rename) and greedy generation */
    const char *keys[] = {"note"}, *values[] = {"tutorial_train"};
    CHECK(ctx, tg_checkpoint_save(ctx, "tutorial_train.safetensors", opt, 1, keys, values,
                                  NULL) == TG_OK);
    remove("tutorial_train.safetensors");
    tg_ctx_set_training(ctx, false);
    const char *prompt = "the dog ";
    int len = (int)strlen(prompt);
    char out[T + 1];
    memcpy(out, prompt, (size_t)len);
    while (len < T) {
        /* the causal mask lets row 0 of the batch hold the context left-aligned */
        for (int t = 0; t < B * T; t++)
            x[t] = t < len ? id_of[(unsigned char)out[t]] : 0;
        CHECK(ctx, tg_tensor_set_data(ids, x, TG_I32, B * T) == TG_OK);
        CHECK(ctx, tg_graph_forward(g) == TG_OK);
        const float *row = (const float *)tg_tensor_data(logits) + (len - 1) * n_vocab;
        int best = 0;
        for (int v = 1; v < n_vocab; v++)
            if (row[v] > row[best])
                best = v;
        out[len++] = (char)vocab[best];
    }
    out[len] = 0;
    printf("greedy: \"%s\"\n", out);
    tg_ctx_free(ctx);
    return last < first / 2 ? 0 : 1; /* the loss must have fallen */
}
