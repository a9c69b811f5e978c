/*
 * app_spm.c - an embedder's SentencePiece program, compiled against the installed headers and
 * linked with `pkg-config tgrad-spm` (tests/link/install_link.sh): train a small unigram
 * model, encode and decode a sentence, and an error reported through the context.
 */
#include <stdio.h>
#include <string.h>

#include "tgrad_spm.h"

int main(void)
{
    tg_ctx *ctx = tg_ctx_new();
    if (!ctx)
        return 1;
    const char *lines[] = {"Grüße aus Köln.", "schöne Äpfel über die Straße.",
                           "greetings from cologne.", "nice apples over the street."};
    tg_spm_train_opts o = tg_spm_train_defaults();
    o.vocab_size = 40;
    o.hard_vocab_limit = 0;
    tg_tokenizer *t = tg_spm_train_strings(ctx, &o, lines, NULL, 4);
    if (!t) {
        fprintf(stderr, "%s\n", tg_ctx_message(ctx));
        return 1;
    }
    const char *s = "Grüße über die Straße.";
    int32_t ids[64];
    char out[128];
    int64_t n = tg_tokenizer_encode(t, s, strlen(s), ids, 64);
    if (n < 1 || n > 64 || tg_tokenizer_decode(t, ids, n, out, sizeof out) != (int64_t)strlen(s) ||
        strcmp(out, s) != 0) {
        fprintf(stderr, "round trip failed: %s\n", tg_ctx_message(ctx));
        return 1;
    }
    if (tg_spm_load(ctx, "junk", 4) != NULL || tg_ctx_status(ctx) != TG_ERR_FORMAT) {
        fprintf(stderr, "junk model accepted\n");
        return 1;
    }
    printf("app_spm: %lld pieces, '%s' -> %lld ids -> '%s'; junk: %s\n",
           (long long)tg_tokenizer_vocab_size(t), s, (long long)n, out, tg_ctx_message(ctx));
    tg_tokenizer_free(t);
    tg_ctx_free(ctx);
    return 0;
}
