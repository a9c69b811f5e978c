/*
 * seed000_sdpa.c - seed 000, "Scaled dot product attention" (TensorFlow/Keras notebook,
 * 2024_journal_club_Transformer_AI/Scaled_dot_product_attention.ipynb).
 *
 * Demonstrates the scaled dot-product attention layer, attention(Q, K, V) =
 * softmax(Q K^T / sqrt(d_k)) V, on random queries, keys and values of shape
 * (batch_size, input_seq_length, d_k) = (64, 5, 64), printing the output shape and values as
 * `print(attention_scores.shape); print(attention_scores)` does; then a backward pass.
 *
 * Tutorial line                                          tgrad
 * queries = random.random((batch_size, seq_len, d_k))    tg_input(ctx, TG_F32,
 *   (likewise keys, values)                                TG_DIMS(64, 5, 64), "queries");
 *                                                        tg_fill_uniform(queries, 0, 1)
 * scores = matmul(queries, keys, transpose_b=True)       tg_sdpa(ctx, q, k, v, NULL, 0, NULL)
 *          / math.sqrt(cast(d_k, float32))                 scale 0 = 1/sqrt(d_k); inside it is
 * weights = softmax(scores)                                tg_scale(tg_matmul(q, k, false, true)),
 * return matmul(weights, values)                           tg_softmax, tg_matmul(w, v)
 * mask=None (so `scores += -1e9 * mask` is skipped)      masks = NULL
 * attention_scores.shape                                 tg_tensor_shape_str(out, ...)
 *
 * TensorFlow computes in float32, so this uses TG_F32. The inputs come from tgrad's context RNG,
 * not numpy's, so the values differ from the notebook's; the shape and the character of the
 * output (averages of uniform [0, 1) values, so all near 0.5) are the same.
 */
#include "tgrad.h"
#include "tgrad_nn.h"

#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>

enum { BATCH = 64, SEQ = 5, D_K = 64, D_V = 64 };

/* Report a failure (status @p st, or the context's recorded one if @p st is TG_OK) with the
 * context's message, free the context, and return the exit status 1. */
static int fail(tg_ctx *ctx, const char *what, tg_status st)
{
    if (st == TG_OK)
        st = tg_ctx_status(ctx);
    fprintf(stderr, "seed000_sdpa: %s failed: %s: %s\n", what, tg_status_str(st),
            tg_ctx_message(ctx));
    tg_ctx_free(ctx);
    return 1;
}

/* Euclidean norm of t's gradient. */
static tg_status grad_norm(const tg_tensor *t, double *norm)
{
    size_t n = (size_t)tg_tensor_numel(t);
    double *g = malloc(n * sizeof *g);
    if (!g)
        return TG_ERR_NOMEM;
    tg_status st = tg_tensor_get_grad(t, g, TG_F64, n);
    if (st == TG_OK) {
        double ss = 0;
        for (size_t i = 0; i < n; i++)
            ss += g[i] * g[i];
        *norm = sqrt(ss);
    }
    free(g);
    return st;
}

/* One (T, D) slice of a (B, T, D) tensor in TensorFlow's summarised style: the first three and
 * last three values of each row. */
static void print_batch(const tg_tensor *t, int64_t b, bool last)
{
    int64_t T = tg_tensor_dim(t, 1), D = tg_tensor_dim(t, 2);
    for (int64_t i = 0; i < T; i++) {
        const int64_t row = (b * T + i) * D;
        printf("%s", i == 0 ? (b == 0 ? "[[[" : " [[") : "  [");
        printf("%.8f %.8f %.8f ... %.8f %.8f %.8f]", tg_get(t, row), tg_get(t, row + 1),
               tg_get(t, row + 2), tg_get(t, row + D - 3), tg_get(t, row + D - 2),
               tg_get(t, row + D - 1));
        printf("%s", i == T - 1 ? "]" : "\n");
    }
    printf("%s", last ? "]" : "\n");
}

int main(void)
{
    tg_ctx *ctx = tg_ctx_new();
    if (!ctx) {
        fprintf(stderr, "seed000_sdpa: out of memory\n");
        return 1;
    }
    tg_ctx_seed(ctx, 0);

    /* queries, keys, values = random.random((batch_size, input_seq_length, d)) */
    tg_tensor *queries = tg_input(ctx, TG_F32, TG_DIMS(BATCH, SEQ, D_K), "queries");
    tg_tensor *keys = tg_input(ctx, TG_F32, TG_DIMS(BATCH, SEQ, D_K), "keys");
    tg_tensor *values = tg_input(ctx, TG_F32, TG_DIMS(BATCH, SEQ, D_V), "values");
    if (!queries || !keys || !values)
        return fail(ctx, "creating the inputs", TG_OK);
    tg_fill_uniform(queries, 0, 1);
    tg_fill_uniform(keys, 0, 1);
    tg_fill_uniform(values, 0, 1);
    tg_status st = tg_set_requires_grad(queries, true); /* to print ||dL/dqueries|| */
    if (st != TG_OK)
        return fail(ctx, "tg_set_requires_grad", st);

    /* attention_scores = attention(queries, keys, values, d_k)      (64, 5, 64) */
    tg_tensor *attention_scores = tg_sdpa(ctx, queries, keys, values, NULL, 0, NULL);
    tg_tensor *loss = tg_mean_all(ctx, attention_scores); /* scalar loss for backward */
    tg_graph *g = tg_graph_new(ctx, &loss, 1);            /* reports any builder error */
    if (!g)
        return fail(ctx, "building the graph", TG_OK);
    if ((st = tg_graph_forward(g)) != TG_OK)
        return fail(ctx, "tg_graph_forward", st);

    char shape[64];
    printf("%s\n", tg_tensor_shape_str(attention_scores, shape, sizeof shape));
    printf("tgrad tensor(\n");
    print_batch(attention_scores, 0, false);
    printf("\n");
    print_batch(attention_scores, 1, false);
    printf("\n ...\n\n");
    print_batch(attention_scores, BATCH - 1, true);
    printf(", shape=%s, dtype=%s)\n", shape, tg_dtype_str(tg_tensor_dtype(attention_scores)));

    /* backward: L = mean(attention(queries, keys, values)) */
    if ((st = tg_graph_backward(g, loss, NULL)) != TG_OK)
        return fail(ctx, "tg_graph_backward", st);
    double norm;
    if ((st = grad_norm(queries, &norm)) != TG_OK)
        return fail(ctx, "reading dL/dqueries", st);
    printf("\nloss = mean(attention_scores) = %.8f\n", tg_get(loss, 0));
    printf("||dL/dqueries|| = %.8g\n", norm);

    tg_ctx_free(ctx);
    return 0;
}
