/*
 * seed004_mha.c - seed 004, "How to Implement Multi-Head Attention From Scratch in TensorFlow
 * and Keras" (Machine Learning Mastery, S. Cristina, 2022).
 *
 * Demonstrates multi-head attention with the paper's hyperparameters, h = 8 heads,
 * d_k = d_v = 64 per head, d_model = 512, on a batch of 64 sequences of 5 positions: the output
 * has shape (batch size, sequence length, model dimensionality) = (64, 5, 512); then a backward
 * pass into the projection weights.
 *
 * Tutorial line                                        tgrad
 * queries = random.random((batch_size, seq_len, ...))  tg_input(ctx, TG_F32,
 *   (likewise keys, values)                              TG_DIMS(64, 5, 512), "queries");
 *                                                      tg_fill_uniform(queries, 0, 1)
 * MultiHeadAttention(h, d_k, d_v, d_model)             tg_mha_init(ctx, &mha, TG_F32, 512, 8, NULL)
 * self.W_q(queries), self.W_k(keys), self.W_v(values)  rows [0,512), [512,1024), [1024,1536) of
 *                                                        mha.in_proj_weight (+ in_proj_bias)
 * reshape_tensor(..., flag=True): reshape to            tg_mha_forward: tg_reshape to (B, T, H,
 *   (B, T, h, -1), transpose perm (0, 2, 1, 3)            Dh), tg_transpose(1, 2) -> (B, H, T, Dh)
 * self.attention(q_reshaped, k_reshaped, v_reshaped,    tg_scale(tg_matmul(q, k, false, true),
 *   self.d_k, mask)  (DotProductAttention)                1/sqrt(Dh)), tg_softmax, tg_matmul(w, v)
 * reshape_tensor(o_reshaped, flag=False)               tg_transpose(1, 2), tg_reshape to (B, T, D)
 * self.W_o(output)                                     tg_dense with mha.out_proj_weight / bias
 * print(multihead_attention(queries, keys, values))    tg_mha_forward(ctx, &mha, queries, keys,
 *                                                        values, NULL, NULL), printed below
 *
 * Two deliberate differences from the tutorial's code. (1) Its W_q = Dense(d_k) projects the
 * width-64 inputs to d_k = 64 in total, so each of its 8 heads has depth 8, and W_o = Dense(512)
 * maps 64 -> 512. tgrad's MHA follows the paper (and PyTorch nn.MultiheadAttention): inputs of
 * width d_model = 512 are projected to 512 = h * d_k, so each head has the d_k = d_v = 64 the
 * tutorial names; the output shape (64, 5, 512) is the same. (2) Keras Dense layers start from
 * glorot-uniform weights; tg_mha_init uses PyTorch's (xavier-uniform in_proj_weight, zero biases,
 * out_proj.weight uniform(+-1/sqrt(D))). Inputs come from tgrad's context RNG (float32, as
 * TensorFlow), so the values differ from the tutorial's printout, which it says to expect.
 */
#include "tgrad.h"
#include "tgrad_nn.h"

#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>

enum { H = 8, D_K = 64, D_V = 64, D_MODEL = 512, BATCH = 64, SEQ = 5 };

/* Report a failure (status @p st, or the context's recorded one if @p st is TG_OK) with the
 * context's message, free the context, and return the exit status 1. */
static int fail(tg_ctx *ctx, const char *what, tg_status st)
{
    if (st == TG_OK)
        st = tg_ctx_status(ctx);
    fprintf(stderr, "seed004_mha: %s failed: %s: %s\n", what, tg_status_str(st),
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
 * last three values of each row; @p last closes the outer bracket. */
static void print_batch(const tg_tensor *t, int64_t b, bool last)
{
    int64_t T = tg_tensor_dim(t, 1), D = tg_tensor_dim(t, 2);
    for (int64_t i = 0; i < T; i++) {
        const int64_t row = (b * T + i) * D;
        printf("%s", i == 0 ? (b == 0 ? "[[[" : " [[") : "  [");
        printf("%11.8f %11.8f %11.8f ... %11.8f %11.8f %11.8f]", tg_get(t, row),
               tg_get(t, row + 1), tg_get(t, row + 2), tg_get(t, row + D - 3),
               tg_get(t, row + D - 2), tg_get(t, row + D - 1));
        printf("%s", i == T - 1 ? "]" : "\n");
    }
    printf("%s", last ? "]" : "\n");
}

int main(void)
{
    tg_ctx *ctx = tg_ctx_new();
    if (!ctx) {
        fprintf(stderr, "seed004_mha: out of memory\n");
        return 1;
    }
    tg_ctx_seed(ctx, 4);
    tg_status st;

    /* multihead_attention = MultiHeadAttention(h, d_k, d_v, d_model): parameters
     * in_proj_weight (3D, D), in_proj_bias (3D), out_proj.weight (D, D), out_proj.bias (D) */
    tg_mha mha;
    if ((st = tg_mha_init(ctx, &mha, TG_F32, D_MODEL, H, NULL)) != TG_OK)
        return fail(ctx, "tg_mha_init", st);

    /* queries, keys, values = random.random((batch_size, input_seq_length, d_model)) */
    tg_tensor *queries = tg_input(ctx, TG_F32, TG_DIMS(BATCH, SEQ, D_MODEL), "queries");
    tg_tensor *keys = tg_input(ctx, TG_F32, TG_DIMS(BATCH, SEQ, D_MODEL), "keys");
    tg_tensor *values = tg_input(ctx, TG_F32, TG_DIMS(BATCH, SEQ, D_MODEL), "values");
    if (!queries || !keys || !values)
        return fail(ctx, "creating the inputs", TG_OK);
    tg_fill_uniform(queries, 0, 1);
    tg_fill_uniform(keys, 0, 1);
    tg_fill_uniform(values, 0, 1);

    /* multihead_attention(queries, keys, values)                       (64, 5, 512) */
    tg_tensor *out = tg_mha_forward(ctx, &mha, queries, keys, values, NULL, NULL);
    tg_tensor *loss = tg_mean_all(ctx, out); /* scalar loss for backward */
    tg_graph *g = tg_graph_new(ctx, &loss, 1); /* reports any builder error above */
    if (!g)
        return fail(ctx, "building the graph", TG_OK);
    if ((st = tg_graph_forward(g)) != TG_OK)
        return fail(ctx, "tg_graph_forward", st);

    char shape[64];
    printf("h = %d, d_k = %d, d_v = %d, d_model = %d, batch_size = %d, input_seq_length = %d\n",
           H, D_K, D_V, D_MODEL, BATCH, SEQ);
    printf("tgrad tensor(\n");
    print_batch(out, 0, false);
    printf(" ...\n\n");
    print_batch(out, BATCH - 1, true);
    printf(", shape=%s, dtype=%s)\n", tg_tensor_shape_str(out, shape, sizeof shape),
           tg_dtype_str(tg_tensor_dtype(out)));

    /* backward: L = mean(multihead_attention(queries, keys, values)) */
    if ((st = tg_graph_backward(g, loss, NULL)) != TG_OK)
        return fail(ctx, "tg_graph_backward", st);
    double n_in, n_out;
    if ((st = grad_norm(mha.in_proj_weight, &n_in)) != TG_OK ||
        (st = grad_norm(mha.out_proj_weight, &n_out)) != TG_OK)
        return fail(ctx, "reading gradients", st);
    printf("\nloss = mean(output) = %.8f\n", tg_get(loss, 0));
    printf("||dL/d in_proj_weight|| = %.8g  ||dL/d out_proj.weight|| = %.8g\n", n_in, n_out);

    tg_ctx_free(ctx);
    return 0;
}
