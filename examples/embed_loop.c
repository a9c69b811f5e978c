/*
 * embed_loop.c - embedding tgrad in a long-running program with bounded memory (public headers
 * only). A service answers requests with a small causal language model: for each request it
 * builds a fresh inference graph over the request's tokens, runs it, reads the answer, and
 * gives back everything the request made, so its memory stays flat however many requests it
 * serves.
 *
 * The pattern:
 *   model = init (or load)                      parameters live for the whole program
 *   mark  = tg_ctx_mark(ctx)                    the point to come back to
 *   for each request:
 *       ids    = tg_input(...)                  fresh input tensors
 *       logits = tg_transformer_forward(...)    fresh op nodes
 *       g      = tg_graph_new_opts(..., no_grad) an inference graph: no gradients, nothing
 *                                                kept for backward, a small arena
 *       tg_graph_forward(g); read logits
 *       tg_ctx_rewind(ctx, mark)                releases the inputs, nodes and graph (with its
 *                                                arena); tg_ctx_bytes() is the mark's again
 *
 * Requests differ in length, so every graph has its own shape; the bytes after each rewind are
 * the same. Loading uses the same idea: the file is read after a mark, its values copied into
 * the parameters, and the rewind gives the file's memory back.
 *
 * Usage: embed_loop [N [PARAMS.safetensors]]
 *   N       requests to serve (default 1000)
 *   PARAMS  parameters saved by tg_params_save() for this model (names as tg_transformer_init
 *           gives them); without it the model keeps its random initialisation, so the
 *           predicted characters are arbitrary: the point is the memory.
 * Prints the memory plan of the first request's graph, a few answers, and the context's bytes
 * at the mark, after the last request and at most during a request; exits 1 if the bytes after
 * a rewind ever differ from the mark's.
 */
#include "tgrad.h"
#include "tgrad_io.h"
#include "tgrad_train.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define VOCAB 128 /* ASCII: a character is its own token id */
#define MAX_T 32

static int fail(tg_ctx *ctx, const char *what)
{
    fprintf(stderr, "embed_loop: %s failed: %s: %s\n", what, tg_status_str(tg_ctx_status(ctx)),
            tg_ctx_message(ctx));
    tg_ctx_free(ctx);
    return 1;
}

/* The most likely next character after the prompt: argmax of the last position's logits. */
static int next_char(tg_tensor *logits, int64_t t)
{
    const float *z = tg_tensor_data(logits); /* (1, T, VOCAB), f32 */
    const float *row = z + (t - 1) * VOCAB;
    int best = 0;
    for (int v = 1; v < VOCAB; v++)
        if (row[v] > row[best])
            best = v;
    return best;
}

int main(int argc, char **argv)
{
    long n = argc > 1 ? strtol(argv[1], NULL, 10) : 1000;
    if (n < 1) {
        fprintf(stderr, "usage: embed_loop [N [PARAMS.safetensors]] (N >= 1)\n");
        return 2;
    }
    tg_ctx *ctx = tg_ctx_new();
    if (!ctx)
        return 1;
    tg_ctx_seed(ctx, 1);
    tg_ctx_set_training(ctx, false); /* serving: dropout (if any) is the identity */

    /* The model: 2 pre-norm layers, d_model 32, 4 heads, causal. */
    tg_transformer_config cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.vocab_size = VOCAB;
    cfg.max_seq_len = MAX_T;
    cfg.n_layers = 2;
    cfg.layer = tg_encoder_config_default(32, 4);
    cfg.layer.d_ff = 64;
    cfg.layer.norm_first = true;
    cfg.causal = true;
    tg_transformer model;
    if (tg_transformer_init(ctx, &model, TG_F32, &cfg) != TG_OK)
        return fail(ctx, "tg_transformer_init");
    if (argc > 2) { /* load: the file's memory is given back by the rewind */
        tg_mark before_load = tg_ctx_mark(ctx);
        if (tg_params_load(ctx, argv[2], 0, NULL, true) != TG_OK)
            return fail(ctx, "loading the parameters");
        tg_ctx_rewind(ctx, before_load);
        printf("parameters loaded from %s\n", argv[2]);
    }
    printf("model: %lld parameters, %zu bytes in the context\n",
           (long long)tg_ctx_n_params(ctx), tg_ctx_bytes(ctx));

    static const char *const prompts[] = {
        "the cat sat on the m", "hello, wor", "tgrad keeps memory fla",
        "a", "once upon a time there was a ", "to be or not to b",
    };
    const int n_prompts = (int)(sizeof prompts / sizeof prompts[0]);

    tg_mark mark = tg_ctx_mark(ctx);
    size_t at_mark = tg_ctx_bytes(ctx), most = at_mark;
    for (long r = 0; r < n; r++) {
        const char *p = prompts[r % n_prompts];
        int64_t t = (int64_t)strlen(p);
        int32_t ids_v[MAX_T];
        for (int64_t i = 0; i < t; i++)
            ids_v[i] = (int32_t)((unsigned char)p[i] % VOCAB);

        tg_tensor *ids = tg_input(ctx, TG_I32, TG_DIMS(1, t), "ids");           /* (1, T) */
        if (!ids || tg_tensor_set_data(ids, ids_v, TG_I32, (size_t)t) != TG_OK)
            return fail(ctx, "setting the ids");
        tg_tensor *logits = tg_transformer_forward(ctx, &model, ids, NULL);    /* (1, T, V) */
        tg_graph *g = tg_graph_new_opts(ctx, &logits, 1, &(tg_graph_opts){.no_grad = true});
        if (!g)
            return fail(ctx, "building the graph");
        if (tg_graph_forward(g) != TG_OK)
            return fail(ctx, "running the graph");
        int c = next_char(logits, t);
        if (r == 0) {
            tg_memory_report m;
            tg_graph_memory(g, &m);
            printf("request graph: %lld nodes; parameters %zu bytes, activations %zu, saved "
                   "%zu, gradients %zu, workspace %zu, arena %zu (shared), peak %zu\n",
                   (long long)tg_graph_size(g), m.parameters, m.activations, m.saved,
                   m.gradients, m.workspace, m.arena, m.peak);
        }
        if (r < n_prompts)
            printf("request %ld: \"%s\" -> next character %d%s%c%s\n", r, p, c,
                   c >= 32 && c < 127 ? " '" : "", c >= 32 && c < 127 ? c : ' ',
                   c >= 32 && c < 127 ? "'" : "");
        if (tg_ctx_bytes(ctx) > most)
            most = tg_ctx_bytes(ctx);

        tg_ctx_rewind(ctx, mark); /* ids, logits, g and every node between: gone */
        if (tg_ctx_bytes(ctx) != at_mark) {
            fprintf(stderr, "embed_loop: request %ld: %zu bytes after the rewind, %zu at the "
                    "mark\n", r, tg_ctx_bytes(ctx), at_mark);
            tg_ctx_free(ctx);
            return 1;
        }
    }
    printf("context bytes: %zu at the mark, %zu after %ld requests, at most %zu during one\n",
           at_mark, tg_ctx_bytes(ctx), n, most);
    tg_ctx_free(ctx);
    return 0;
}
