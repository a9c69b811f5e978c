/*
 * seed001_self_attention.c - seed 001, "Self Attention in Transformers" (numpy notebook,
 * NLP_class_2023/Self_Attention_for_Transformer_Neural_Networks.ipynb).
 *
 * Demonstrates single-head self-attention step by step on L = 4 tokens with d_k = d_v = 8:
 * raw scores q k^T, why the scores are scaled by 1/sqrt(d_k) (their variance before and after),
 * the look-ahead (causal) mask as 0 / -inf, the softmax attention weights and new V; then the
 * tutorial's `scaled_dot_product_attention` function as the tg_sdpa module; then a backward pass.
 *
 * Tutorial line                                  tgrad
 * q = np.random.randn(L, d_k)  (likewise k, v)   tg_input(ctx, TG_F64, TG_DIMS(L, d_k), "q");
 *                                                tg_fill_normal(q, 0, 1)
 * np.matmul(q, k.T)                              tg_matmul(ctx, q, k, false, true)
 * q.var()                                        variance() below, on tg_tensor_get_data
 * np.matmul(q, k.T) / math.sqrt(d_k)             tg_scale(ctx, scores, 1 / sqrt(d_k))
 * mask = np.tril(np.ones((L, L)));               a (L, L) tg_const holding 0 on and below the
 * mask[mask == 0] = -inf; mask[mask == 1] = 0    diagonal and -INFINITY above it
 * scaled + mask                                  tg_add_mask(ctx, scaled, mask, TG_MASK_ADDITIVE)
 * softmax(scaled + mask)                         tg_softmax(ctx, masked)   (over the last axis)
 * np.matmul(attention, v)                        tg_matmul(ctx, attention, v, false, false)
 * scaled_dot_product_attention(q, k, v, mask=1)  tg_sdpa(ctx, q, k, v, NULL, 0, &attention)
 *                                                (mask=1 adds 1 to every score, which softmax
 *                                                ignores, so it is the unmasked attention)
 * (causal version of the same function)          tg_sdpa with tg_attn_masks.causal = true,
 *                                                checked equal to the step-by-step new V
 *
 * numpy's float64 is TG_F64. The RNG is tgrad's context RNG (xoshiro256**), not numpy's, so the
 * numbers differ from the notebook's; the formulas and shapes are the same.
 */
#include "tgrad.h"
#include "tgrad_nn.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

enum { L = 4, D_K = 8, D_V = 8 };

/* Report a failure (status @p st, or the context's recorded one if @p st is TG_OK) with the
 * context's message, free the context, and return the exit status 1. */
static int fail(tg_ctx *ctx, const char *what, tg_status st)
{
    if (st == TG_OK)
        st = tg_ctx_status(ctx);
    fprintf(stderr, "seed001_self_attention: %s failed: %s: %s\n", what, tg_status_str(st),
            tg_ctx_message(ctx));
    tg_ctx_free(ctx);
    return 1;
}

/* Print a rank-2 tensor the way numpy prints an array: title, then rows of "%11.8f". */
static void print_matrix(const char *title, const tg_tensor *t)
{
    int64_t rows = tg_tensor_dim(t, 0), cols = tg_tensor_dim(t, 1);
    printf("%s\n", title);
    for (int64_t i = 0; i < rows; i++) {
        printf("%s", i == 0 ? " [[" : "  [");
        for (int64_t j = 0; j < cols; j++)
            printf("%s%11.8f", j ? " " : "", tg_get(t, i * cols + j));
        printf("]%s\n", i == rows - 1 ? "]" : "");
    }
}

/* numpy's x.var(): population variance over every element. */
static tg_status variance(const tg_tensor *t, double *var)
{
    size_t n = (size_t)tg_tensor_numel(t);
    double *x = malloc(n * sizeof *x);
    if (!x)
        return TG_ERR_NOMEM;
    tg_status st = tg_tensor_get_data(t, x, TG_F64, n);
    if (st == TG_OK) {
        double mean = 0, ss = 0;
        for (size_t i = 0; i < n; i++)
            mean += x[i];
        mean /= (double)n;
        for (size_t i = 0; i < n; i++)
            ss += (x[i] - mean) * (x[i] - mean);
        *var = ss / (double)n;
    }
    free(x);
    return st;
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

/* Largest |a - b| over two tensors of the same shape. */
static double max_abs_diff(const tg_tensor *a, const tg_tensor *b)
{
    double m = 0;
    for (int64_t i = 0; i < tg_tensor_numel(a); i++)
        m = fmax(m, fabs(tg_get(a, i) - tg_get(b, i)));
    return m;
}

int main(void)
{
    tg_ctx *ctx = tg_ctx_new();
    if (!ctx) {
        fprintf(stderr, "seed001_self_attention: out of memory\n");
        return 1;
    }
    tg_ctx_seed(ctx, 1);

    /* ---- Generate Data: q, k, v = np.random.randn(L, d) ---- */
    tg_tensor *q = tg_input(ctx, TG_F64, TG_DIMS(L, D_K), "q"); /* (L, d_k) */
    tg_tensor *k = tg_input(ctx, TG_F64, TG_DIMS(L, D_K), "k"); /* (L, d_k) */
    tg_tensor *v = tg_input(ctx, TG_F64, TG_DIMS(L, D_V), "v"); /* (L, d_v) */
    /* The causal mask the tutorial builds from np.tril: 0 = keep, -inf = blocked. */
    tg_tensor *mask = tg_const(ctx, TG_F64, TG_DIMS(L, L), "mask"); /* (L, L) */
    if (!q || !k || !v || !mask)
        return fail(ctx, "creating q, k, v, mask", TG_OK);
    tg_fill_normal(q, 0, 1);
    tg_fill_normal(k, 0, 1);
    tg_fill_normal(v, 0, 1);
    for (int i = 0; i < L; i++)
        for (int j = 0; j < L; j++)
            tg_set(mask, i * L + j, j <= i ? 0.0 : -INFINITY);
    /* We want dL/dq, dL/dk, dL/dv at the end. */
    tg_status st = tg_set_requires_grad(q, true);
    if (st == TG_OK)
        st = tg_set_requires_grad(k, true);
    if (st == TG_OK)
        st = tg_set_requires_grad(v, true);
    if (st != TG_OK)
        return fail(ctx, "tg_set_requires_grad", st);

    /* ---- Self attention, step by step (record only; nothing runs yet) ---- */
    tg_tensor *scores = tg_matmul(ctx, q, k, false, true);            /* q k^T (L, L) */
    tg_tensor *scaled = tg_scale(ctx, scores, 1.0 / sqrt((double)D_K)); /* (L, L) */
    tg_tensor *masked = tg_add_mask(ctx, scaled, mask, TG_MASK_ADDITIVE); /* scaled + mask */
    tg_tensor *attention = tg_softmax(ctx, masked);                   /* (L, L), rows sum to 1 */
    tg_tensor *new_v = tg_matmul(ctx, attention, v, false, false);    /* (L, d_v) */

    /* ---- The tutorial's function, as the SDPA module ---- */
    /* scaled_dot_product_attention(q, k, v, mask=1): +1 on every score leaves softmax unchanged */
    tg_tensor *fn_attention = NULL;
    tg_tensor *fn_values = tg_sdpa(ctx, q, k, v, NULL, 0, &fn_attention); /* (L, d_v) */
    /* the same function with the look-ahead mask, as a decoder would call it */
    tg_attn_masks causal = {.causal = true};
    tg_tensor *causal_values = tg_sdpa(ctx, q, k, v, &causal, 0, NULL); /* (L, d_v) */

    /* A scalar loss so that we can run backward: L = sum(new V). */
    tg_tensor *loss = tg_sum_all(ctx, new_v);
    tg_tensor *outs[] = {loss, fn_values, causal_values};
    /* The steps printed below are intermediate values: kept, or the planner would give their
     * memory to later values and reading them after the run would be refused. */
    tg_tensor *shown[] = {scores, scaled, masked, attention, new_v, fn_attention};
    for (size_t i = 0; i < sizeof shown / sizeof shown[0]; i++)
        tg_keep(shown[i]);
    tg_graph *g = tg_graph_new(ctx, outs, 3); /* also reports any builder error above */
    if (!g)
        return fail(ctx, "building the graph", TG_OK);
    if ((st = tg_graph_forward(g)) != TG_OK)
        return fail(ctx, "tg_graph_forward", st);

    print_matrix("Q", q);
    print_matrix("K", k);
    print_matrix("V", v);

    printf("\n## Self Attention\n\n");
    print_matrix("np.matmul(q, k.T)", scores);

    double var_q, var_k, var_s, var_scaled;
    if ((st = variance(q, &var_q)) != TG_OK || (st = variance(k, &var_k)) != TG_OK ||
        (st = variance(scores, &var_s)) != TG_OK || (st = variance(scaled, &var_scaled)) != TG_OK)
        return fail(ctx, "reading data for the variances", st);
    printf("\n# Why we need sqrt(d_k) in denominator\n");
    printf("q.var(), k.var(), np.matmul(q, k.T).var()\n(%.16g, %.16g, %.16g)\n", var_q, var_k,
           var_s);
    printf("q.var(), k.var(), scaled.var()\n(%.16g, %.16g, %.16g)\n", var_q, var_k, var_scaled);
    printf("Notice the reduction in variance of the product (by d_k = %d).\n\n", D_K);
    print_matrix("scaled", scaled);

    printf("\n## Masking\n\n");
    print_matrix("mask", mask);
    print_matrix("scaled + mask", masked);

    printf("\n## Softmax\n\n");
    print_matrix("attention", attention);
    print_matrix("new_v", new_v);

    printf("\n# Function: scaled_dot_product_attention(q, k, v, mask=1) = tg_sdpa\n");
    print_matrix("New V", fn_values);
    print_matrix("Attention", fn_attention);
    printf("causal tg_sdpa vs step-by-step new_v: max |diff| = %.3g\n",
           max_abs_diff(causal_values, new_v));

    /* ---- Backward: d sum(new V) / d q, k, v ---- */
    if ((st = tg_graph_backward(g, loss, NULL)) != TG_OK)
        return fail(ctx, "tg_graph_backward", st);
    double nq, nk, nv;
    if ((st = grad_norm(q, &nq)) != TG_OK || (st = grad_norm(k, &nk)) != TG_OK ||
        (st = grad_norm(v, &nv)) != TG_OK)
        return fail(ctx, "reading gradients", st);
    printf("\nloss = sum(new_v) = %.8f\n", tg_get(loss, 0));
    printf("||dL/dq|| = %.8f  ||dL/dk|| = %.8f  ||dL/dv|| = %.8f\n", nq, nk, nv);

    tg_ctx_free(ctx);
    return 0;
}
