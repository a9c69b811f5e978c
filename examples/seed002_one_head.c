/*
 * seed002_one_head.c - seed 002, "Transformer and Transformer-Based Models (Part 1)", task 1:
 * one head of the multi-head attention sub-layer (numpy + torch notebook).
 *
 * Demonstrates one attention head from a (n_inputs, d_model) = (3, 512) input: xavier-uniform
 * (d_model, d_k) = (512, 64) projection matrices W_query, W_key, W_value, Q = x W_query (and K,
 * V), the (3, 3) scores Q K^T / sqrt(d_k), their softmax and the (3, 64) weighted output; then
 * the same head as the tg_sdpa module, and a backward pass into the three weight matrices.
 *
 * Tutorial line                                   tgrad
 * np.random.seed(0); torch.manual_seed(0..2)      tg_ctx_seed(ctx, 0) (one RNG for everything)
 * x = np.random.rand(n_inputs, d_model)           tg_input(ctx, TG_F64, TG_DIMS(3, 512), "x");
 *                                                 tg_fill_uniform(x, 0, 1)
 * W = torch.empty(d_model, d_k);                  tg_param(ctx, TG_F64, TG_DIMS(512, 64),
 * nn.init.xavier_uniform_(W)                      "W_query"); tg_fill_uniform(W, -a, a) with
 *                                                 a = sqrt(6 / (fan_in + fan_out)) (gain 1)
 * Q = np.matmul(x, W_query)  (likewise K, V)      tg_matmul(ctx, x, W_query, false, false)
 * attn_scores = np.dot(Q, K.T) / math.sqrt(d_k)   tg_scale(ctx, tg_matmul(ctx, Q, K, false, true),
 *                                                          1 / sqrt(d_k))
 * softmax(attn_scores, axis=1)                    tg_softmax(ctx, attn_scores) (last axis = 1)
 * weighted_output = np.matmul(attn_scores_norm, V) tg_matmul(ctx, attn_scores_norm, V, ...)
 * (all of step 3 in one call)                     tg_sdpa(ctx, Q, K, V, NULL, 0, &weights)
 *
 * numpy's float64 is TG_F64. The numbers come from tgrad's context RNG, not numpy's/torch's, so
 * they differ from the notebook's; shapes, initialisation bounds and formulas are the same.
 */
#include "tgrad.h"
#include "tgrad_nn.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

enum { N_INPUTS = 3, D_MODEL = 512, N_HEADS = 8, D_K = D_MODEL / N_HEADS };

/* Report a failure (status @p st, or the context's recorded one if @p st is TG_OK) with the
 * context's message, free the context, and return the exit status 1. */
static int fail(tg_ctx *ctx, const char *what, tg_status st)
{
    if (st == TG_OK)
        st = tg_ctx_status(ctx);
    fprintf(stderr, "seed002_one_head: %s failed: %s: %s\n", what, tg_status_str(st),
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

/* numpy-style `label [a b c d e]`: @p n values of t from flat index @p start. */
static void print_row(const char *label, const tg_tensor *t, int64_t start, int64_t n)
{
    printf("%s [", label);
    for (int64_t j = 0; j < n; j++)
        printf("%s%11.8f", j ? " " : "", tg_get(t, start + j));
    printf("]\n");
}

/* numpy's summarised print of a wide rank-2 array: first and last three values of each row. */
static void print_summary(const char *label, const tg_tensor *t)
{
    int64_t rows = tg_tensor_dim(t, 0), cols = tg_tensor_dim(t, 1);
    printf("%s ", label);
    for (int64_t i = 0; i < rows; i++) {
        const int64_t r = i * cols;
        printf("%s%.8f %.8f %.8f ... %.8f %.8f %.8f]%s\n", i == 0 ? "[[" : " [", tg_get(t, r),
               tg_get(t, r + 1), tg_get(t, r + 2), tg_get(t, r + cols - 3),
               tg_get(t, r + cols - 2), tg_get(t, r + cols - 1), i == rows - 1 ? "]" : "");
    }
}

/* numpy-style `label (3, 64)`. */
static void print_shape(const char *label, const tg_tensor *t)
{
    char buf[64];
    printf("%s %s\n", label, tg_tensor_shape_str(t, buf, sizeof buf));
}

/* numpy-style rank-2 matrix after a label. */
static void print_matrix(const char *label, const tg_tensor *t)
{
    int64_t rows = tg_tensor_dim(t, 0), cols = tg_tensor_dim(t, 1);
    printf("%s ", label);
    for (int64_t i = 0; i < rows; i++) {
        printf("%s", i == 0 ? "[[" : "  [");
        for (int64_t j = 0; j < cols; j++)
            printf("%s%11.8f", j ? " " : "", tg_get(t, i * cols + j));
        printf("]%s\n", i == rows - 1 ? "]" : "");
    }
}

int main(void)
{
    tg_ctx *ctx = tg_ctx_new();
    if (!ctx) {
        fprintf(stderr, "seed002_one_head: out of memory\n");
        return 1;
    }
    tg_ctx_seed(ctx, 0);

    /* 1.1 x = np.random.rand(n_inputs, d_model)                                   (3, 512) */
    tg_tensor *x = tg_input(ctx, TG_F64, TG_DIMS(N_INPUTS, D_MODEL), "x");
    /* 1.2 W = torch.empty(d_model, d_k); nn.init.xavier_uniform_(W)              (512, 64) */
    tg_tensor *W_query = tg_param(ctx, TG_F64, TG_DIMS(D_MODEL, D_K), "W_query");
    tg_tensor *W_key = tg_param(ctx, TG_F64, TG_DIMS(D_MODEL, D_K), "W_key");
    tg_tensor *W_value = tg_param(ctx, TG_F64, TG_DIMS(D_MODEL, D_K), "W_value");
    if (!x || !W_query || !W_key || !W_value)
        return fail(ctx, "creating x and the weights", TG_OK);
    tg_fill_uniform(x, 0, 1);
    const double xavier = sqrt(6.0 / (double)(D_MODEL + D_K)); /* gain 1: 0.1020620726 */
    tg_fill_uniform(W_query, -xavier, xavier);
    tg_fill_uniform(W_key, -xavier, xavier);
    tg_fill_uniform(W_value, -xavier, xavier);

    tg_tensor *Q = tg_matmul(ctx, x, W_query, false, false); /* x W_query (3, 64) */
    tg_tensor *K = tg_matmul(ctx, x, W_key, false, false);   /* x W_key   (3, 64) */
    tg_tensor *V = tg_matmul(ctx, x, W_value, false, false); /* x W_value (3, 64) */

    /* 1.3 attention scores and weighted output, step by step */
    tg_tensor *attn_scores = tg_scale(ctx, tg_matmul(ctx, Q, K, false, true),
                                      1.0 / sqrt((double)D_K));     /* (3, 3) */
    tg_tensor *attn_scores_norm = tg_softmax(ctx, attn_scores);     /* (3, 3), rows sum to 1 */
    tg_tensor *weighted_output = tg_matmul(ctx, attn_scores_norm, V, false, false); /* (3, 64) */
    /* ... and as one module call */
    tg_tensor *sdpa_weights = NULL;
    tg_tensor *sdpa_output = tg_sdpa(ctx, Q, K, V, NULL, 0, &sdpa_weights); /* (3, 64) */

    tg_tensor *loss = tg_sum_all(ctx, weighted_output); /* scalar loss for backward */
    tg_tensor *outs[] = {loss, sdpa_output};
    tg_graph *g = tg_graph_new(ctx, outs, 2); /* reports any builder error above */
    if (!g)
        return fail(ctx, "building the graph", TG_OK);
    tg_status st = tg_graph_forward(g);
    if (st != TG_OK)
        return fail(ctx, "tg_graph_forward", st);

    print_summary("x:", x);
    print_shape("x.shape:", x);
    print_row("W_query[0,:5]:", W_query, 0, 5);
    print_shape("W_query.shape:", W_query);
    print_row("Q[0, :5]:", Q, 0, 5);
    print_shape("Q.shape:", Q);
    print_row("K[0,:5]", K, 0, 5);
    print_shape("K.shape", K);
    print_row("V[0,:5]", V, 0, 5);
    print_shape("V.shape", V);
    print_shape("attn_scores.shape:", attn_scores);
    print_matrix("Unnormalized attn_scores:", attn_scores);
    print_matrix("Normalized atten_scores:", attn_scores_norm);
    print_row("weighted_output[0,:5]:", weighted_output, 0, 5);
    print_shape("weighted_output.shape:", weighted_output);

    double diff = 0;
    for (int64_t i = 0; i < tg_tensor_numel(weighted_output); i++)
        diff = fmax(diff, fabs(tg_get(weighted_output, i) - tg_get(sdpa_output, i)));
    for (int64_t i = 0; i < tg_tensor_numel(attn_scores_norm); i++)
        diff = fmax(diff, fabs(tg_get(attn_scores_norm, i) - tg_get(sdpa_weights, i)));
    printf("tg_sdpa(Q, K, V) vs step by step: max |diff| = %.3g\n", diff);

    /* backward: L = sum(weighted_output); the W_* are parameters, so they get gradients */
    if ((st = tg_graph_backward(g, loss, NULL)) != TG_OK)
        return fail(ctx, "tg_graph_backward", st);
    double nq, nk, nv;
    if ((st = grad_norm(W_query, &nq)) != TG_OK || (st = grad_norm(W_key, &nk)) != TG_OK ||
        (st = grad_norm(W_value, &nv)) != TG_OK)
        return fail(ctx, "reading gradients", st);
    printf("\nloss = sum(weighted_output) = %.8f\n", tg_get(loss, 0));
    printf("||dL/dW_query|| = %.8f  ||dL/dW_key|| = %.8f  ||dL/dW_value|| = %.8f\n", nq, nk, nv);

    tg_ctx_free(ctx);
    return 0;
}
