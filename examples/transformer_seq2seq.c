/*
 * transformer_seq2seq.c - the complete encoder-decoder Transformer of "Attention Is All You
 * Need" (Vaswani et al. 2017, Figure 1) trained and decoded through the public headers only,
 * as `tgrad train --arch seq2seq --task reverse` does at a smaller size:
 *
 *   1. the task: source = L random digits, target = the digits reversed; vocabulary the 10
 *      digits and BOS (id 10), which starts every decoder input
 *   2. the model: tg_transformer with n_decoder_layers > 0 (nn.Transformer's encoder.* and
 *      decoder.* parameters, shared token embeddings, learned positions, a head)
 *   3. teacher forcing: decoder input [BOS, y_0 .. y_{L-2}], labels y, cross-entropy over the
 *      L target positions; AdamW with warmup + cosine learning rate and clipping
 *   4. greedy decoding of held-out sources through the KV cache (tg_generator): the source is
 *      encoded once (tg_generator_set_source stores every decoder layer's memory keys and
 *      values), then each step feeds the last token (BOS first) and takes the argmax of the
 *      next-token logits: one position through the decoder per step
 *   5. the same decoding without the cache, for comparison: a no_grad graph over the whole
 *      target prefix, built once and run for every step (the causal target mask makes
 *      position i depend only on decoder inputs <= i); the tokens must be the same
 *
 * Prints the loss, a few decoded sequences and the exact-sequence accuracy; exits 1 if the two
 * decodings differ or fewer than 90% of the held-out sequences are decoded exactly right.
 */
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "tgrad_train.h"

#define CHECK(ctx, cond)                                                                       \
    do {                                                                                       \
        if (!(cond)) {                                                                         \
            fprintf(stderr, "transformer_seq2seq: %s (%s)\n", tg_ctx_message(ctx),             \
                    tg_status_str(tg_ctx_status(ctx)));                                        \
            tg_ctx_free(ctx);                                                                  \
            return 1;                                                                          \
        }                                                                                      \
    } while (0)

enum { L = 6, B = 32, V = 11, BOS = 10, STEPS = 200, N_TEST = 4 };

/* A batch of sources (B, L) and their reversals (B, L), digits from the context RNG. */
static void make_batch(tg_ctx *ctx, int32_t *src, int32_t *y)
{
    for (int b = 0; b < B; b++) {
        for (int t = 0; t < L; t++)
            src[b * L + t] = (int32_t)(tg_rng_u64(ctx) % 10);
        for (int t = 0; t < L; t++)
            y[b * L + t] = src[b * L + L - 1 - t];
    }
}

int main(void)
{
    tg_ctx *ctx = tg_ctx_new();
    if (!ctx)
        return 1;
    tg_ctx_seed(ctx, 1);
    tg_ctx_set_threads(ctx, 1);

    /* 2. model: 1 encoder + 1 decoder pre-norm layer, d_model 16, 2 heads */
    tg_transformer_config cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.vocab_size = V;
    cfg.max_seq_len = L;
    cfg.n_layers = 1;         /* encoder layers */
    cfg.n_decoder_layers = 1; /* > 0: the encoder-decoder model */
    cfg.layer = tg_encoder_config_default(16, 2);
    cfg.layer.d_ff = 32;
    cfg.layer.norm_first = true;
    tg_transformer model;
    CHECK(ctx, tg_transformer_init(ctx, &model, TG_F32, &cfg) == TG_OK);
    printf("model: %lld parameter tensors, e.g. '%s'\n", (long long)tg_ctx_n_params(ctx),
           tg_tensor_name(model.seq2seq.decoder.layers[0].multihead_attn.in_proj_weight));

    /* 3. the training graph (teacher forcing), built once */
    tg_tensor *src = tg_input(ctx, TG_I32, TG_DIMS(B, L), "src_ids");
    tg_tensor *dec = tg_input(ctx, TG_I32, TG_DIMS(B, L), "tgt_ids");
    tg_tensor *labels = tg_input(ctx, TG_I32, TG_DIMS(B, L), "targets");
    tg_tensor *logits = tg_transformer_forward_seq2seq(ctx, &model, src, dec, NULL, NULL);
    tg_tensor *loss = tg_cross_entropy(ctx, logits, labels, -1); /* mean over B L targets */
    tg_graph *g = tg_graph_new(ctx, &loss, 1);
    CHECK(ctx, g != NULL);
    tg_optim_config oc = tg_optim_defaults(TG_OPTIM_ADAMW);
    oc.lr = 1e-2;
    tg_optim *opt = tg_optim_new(ctx, &oc, 0, NULL);
    CHECK(ctx, opt != NULL);

    int32_t s[B * L], y[B * L], d[B * L];
    for (int step = 0; step < STEPS; step++) {
        make_batch(ctx, s, y);
        for (int b = 0; b < B; b++) { /* decoder input: BOS, then the target shifted right */
            d[b * L] = BOS;
            for (int t = 1; t < L; t++)
                d[b * L + t] = y[b * L + t - 1];
        }
        CHECK(ctx, tg_tensor_set_data(src, s, TG_I32, B * L) == TG_OK);
        CHECK(ctx, tg_tensor_set_data(dec, d, TG_I32, B * L) == TG_OK);
        CHECK(ctx, tg_tensor_set_data(labels, y, TG_I32, B * L) == TG_OK);
        tg_graph_zero_grad(g);
        CHECK(ctx, tg_graph_forward(g) == TG_OK);
        CHECK(ctx, tg_graph_backward(g, loss, NULL) == TG_OK);
        double norm;
        CHECK(ctx, tg_clip_grad_norm(ctx, 0, NULL, 1.0, &norm) == TG_OK);
        CHECK(ctx, tg_optim_step(opt, tg_lr_warmup_cosine(step, STEPS, 20, oc.lr,
                                                          oc.lr / 10)) == TG_OK);
        if (step % 50 == 0 || step == STEPS - 1)
            printf("step %3d  loss %.4f\n", step + 1, tg_get(loss, 0));
    }

    /* 4. greedy decoding of B held-out sources through the KV cache; dropout off */
    tg_ctx_set_training(ctx, false);
    make_batch(ctx, s, y);
    tg_generator *gen = tg_generator_new(ctx, &model, B);
    CHECK(ctx, gen != NULL);
    CHECK(ctx, tg_generator_set_source(gen, s, L) == TG_OK); /* the encoder runs once */
    int32_t out[B * L], tok[B];
    for (int b = 0; b < B; b++)
        tok[b] = BOS;
    for (int i = 0; i < L; i++) {
        CHECK(ctx, tg_generator_feed(gen, tok, 1) == TG_OK); /* one position per row */
        tg_tensor *next = tg_generator_logits(gen);          /* (B, V) */
        for (int b = 0; b < B; b++) {
            int best = 0;
            for (int v = 1; v < V; v++)
                if (tg_get(next, b * V + v) > tg_get(next, b * V + best))
                    best = v;
            out[b * L + i] = tok[b] = best;
        }
    }

    /* 5. the same without the cache: an inference graph over the whole target prefix */
    tg_tensor *isrc = tg_input(ctx, TG_I32, TG_DIMS(B, L), "src_ids");
    tg_tensor *itgt = tg_input(ctx, TG_I32, TG_DIMS(B, L), "tgt_ids");
    tg_tensor *ilogits = tg_transformer_forward_seq2seq(ctx, &model, isrc, itgt, NULL, NULL);
    tg_graph_opts go = {.no_grad = true};
    tg_graph *ig = tg_graph_new_opts(ctx, &ilogits, 1, &go);
    CHECK(ctx, ig != NULL);
    for (int i = 0; i < B * L; i++)
        d[i] = BOS; /* positions not decoded yet: never seen by the ones before them */
    CHECK(ctx, tg_tensor_set_data(isrc, s, TG_I32, B * L) == TG_OK);
    int32_t out2[B * L];
    for (int i = 0; i < L; i++) {
        CHECK(ctx, tg_tensor_set_data(itgt, d, TG_I32, B * L) == TG_OK);
        CHECK(ctx, tg_graph_forward(ig) == TG_OK);
        for (int b = 0; b < B; b++) {
            int best = 0;
            for (int v = 1; v < V; v++)
                if (tg_get(ilogits, (b * L + i) * V + v) > tg_get(ilogits, (b * L + i) * V + best))
                    best = v;
            out2[b * L + i] = best;
            if (i + 1 < L)
                d[b * L + i + 1] = best;
        }
    }
    int exact = 0;
    for (int b = 0; b < B; b++) {
        int ok = 1;
        for (int t = 0; t < L; t++)
            ok &= out[b * L + t] == y[b * L + t];
        exact += ok;
        if (b < N_TEST) {
            printf("source ");
            for (int t = 0; t < L; t++)
                printf("%d", s[b * L + t]);
            printf("  decoded ");
            for (int t = 0; t < L; t++)
                printf("%c", out[b * L + t] == BOS ? '^' : '0' + out[b * L + t]);
            printf("%s\n", ok ? "" : "  (wrong)");
        }
    }
    int same = memcmp(out, out2, sizeof out) == 0;
    printf("exact-sequence accuracy %d/%d; cached and uncached decoding %s\n", exact, B,
           same ? "agree" : "DIFFER");
    tg_ctx_free(ctx);
    return same && 10 * exact >= 9 * B ? 0 : 1;
}
