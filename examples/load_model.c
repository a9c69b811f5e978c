/*
 * load_model.c - an embedder's whole use of a trained model: load any file `tgrad train
 * --checkpoint` or `tgrad export` wrote with one call, then continue a prompt through the KV
 * cache, greedily (temperature 0: the same text every run).
 *
 *   load_model MODEL [SAME]
 *
 * MODEL: a checkpoint (optimizer state included or not) or an export of a byte-level LM
 * (`tgrad train --text ...`). The config, the vocabulary and the weights all come from the
 * file (tgrad_model.h); nothing is hard-coded. The prompt is "the " if the vocabulary has
 * those bytes, else its first few letters. With a second file SAME (A and SAME a checkpoint and
 * its export) it also checks that both give bitwise the same logits.
 */
#include "tgrad.h"
#include "tgrad_model.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int fail(tg_ctx *ctx, const char *what)
{
    fprintf(stderr, "load_model: %s: %s\n", what, tg_ctx_message(ctx));
    tg_ctx_free(ctx);
    return 1;
}

/* The id with the largest logit. */
static int32_t argmax(const tg_tensor *logits, int64_t V)
{
    int32_t best = 0;
    for (int64_t v = 1; v < V; v++)
        if (tg_get(logits, v) > tg_get(logits, best))
            best = (int32_t)v;
    return best;
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: load_model MODEL [SAME]\n");
        return 2;
    }
    tg_ctx *ctx = tg_ctx_new();
    if (!ctx)
        return 1;
    tg_ctx_set_training(ctx, false); /* inference: no dropout */
    tg_model *m = tg_model_load(ctx, argv[1]); /* config, vocabulary, weights */
    if (!m)
        return fail(ctx, argv[1]);
    const tg_model_info *info = tg_model_get_info(m);
    const tg_transformer_config *c = &info->config;
    printf("%s: %s, %s, %lld layer(s), d_model %lld, %lld heads, vocabulary %lld, step %lld\n",
           argv[1], info->format == TG_MODEL_EXPORT ? "export" : "checkpoint",
           info->kind == TG_MODEL_LM        ? "byte LM"
           : info->kind == TG_MODEL_ENCODER ? "task encoder"
                                            : "encoder-decoder",
           (long long)c->n_layers, (long long)c->layer.d_model, (long long)c->layer.n_heads,
           (long long)c->vocab_size, (long long)info->step);
    if (info->kind != TG_MODEL_LM) {
        printf("(not a language model: nothing to continue)\n");
        tg_ctx_free(ctx);
        return 0;
    }

    /* the prompt: "the " if the vocabulary has it, else its first letters */
    char prompt[9] = "the ";
    if (tg_model_encode(m, prompt, 4, NULL, 0) < 0) {
        int64_t n = 0;
        for (int32_t i = 0; i < tg_model_vocab_size(m) && n < 8; i++)
            if (tg_model_token_byte(m, i) > ' ')
                prompt[n++] = (char)tg_model_token_byte(m, i);
        prompt[n] = 0;
    }
    int64_t n_new = 40;
    int64_t len = (int64_t)strlen(prompt);
    int32_t *ids = malloc(sizeof *ids * (size_t)(len + n_new + 1));
    char *text = malloc((size_t)(len + n_new + 1));
    if (!ids || !text || tg_model_encode(m, prompt, (size_t)len, ids, len) != len) {
        free(ids);
        free(text);
        return fail(ctx, "the prompt");
    }

    /* decoding: prefill the prompt once, then one position per byte */
    tg_generator *gen = tg_model_generator(m, 1);
    if (!gen || tg_generator_feed(gen, ids, len) != TG_OK)
        return fail(ctx, "prefill");
    for (int64_t k = 0; k < n_new; k++) {
        ids[len + k] = argmax(tg_generator_logits(gen), c->vocab_size);
        if (tg_generator_feed(gen, &ids[len + k], 1) != TG_OK)
            return fail(ctx, "decode");
    }
    if (tg_model_decode(m, ids, len + n_new, text) != len + n_new)
        return fail(ctx, "decode");
    text[len + n_new] = 0;
    for (char *p = text; *p; p++) /* one line of output */
        if (*p == '\n' || *p == '\r')
            *p = ' ';
    printf("greedy: \"%s\"\n", text);

    /* with a second file (the export of the same checkpoint): bitwise the same logits */
    int rc = 0;
    if (argc > 2) {
        tg_model *e = tg_model_load(ctx, argv[2]);
        tg_generator *g2 = e ? tg_model_generator(e, 1) : NULL;
        if (!g2 || tg_generator_feed(g2, ids, len) != TG_OK)
            return fail(ctx, argv[2]);
        tg_generator_reset(gen);
        if (tg_generator_feed(gen, ids, len) != TG_OK)
            return fail(ctx, "prefill");
        for (int64_t v = 0; v < c->vocab_size; v++)
            if (tg_get(tg_generator_logits(g2), v) != tg_get(tg_generator_logits(gen), v))
                rc = 1;
        printf("%s: %s logits\n", argv[2], rc ? "DIFFERENT" : "the same");
    }
    free(ids);
    free(text);
    tg_ctx_free(ctx);
    return rc;
}
