/*
 * seed003_masked_sdpa_ffn.c - seed 003, "Another Annotated Transformer" (blog post,
 * TensorFlow): scaled dot-product attention with a boolean mask, and the position-wise
 * feed-forward network.
 *
 * Demonstrates (1) masked SDPA on a batch of B = 2 sequences of N = 4 positions with d' = 16,
 * the boolean mask (True = masked) combining the look-ahead mask with key padding (sequence 1
 * has only 3 real positions), and (2) FFN(x) = max(0, x W1 + b1) W2 + b2 with
 * d_model = 512 -> d_ff = 2048 -> 512 on a B x N x 512 input; then one backward pass through
 * both (two scalar losses seeded together).
 *
 * Tutorial line                                         tgrad
 * key_t = tf.transpose(x.key, [0, 2, 1])                tg_sdpa(ctx, q, k, v, &masks, scale,
 * alpha_term = scale_factor * (x.query @ key_t)           &alpha); inside it:
 *                                                         tg_scale(tg_matmul(q, k, false, true),
 *                                                         scale)
 * tf.where(mask, mask_value, alpha_term)                masks.attn_mask = mask (0/1),
 *                                                         masks.attn_mask_kind = TG_MASK_BLOCK
 * tf.nn.softmax(..., axis=-1)                           tg_softmax (last axis)
 * alpha @ x.value                                       tg_matmul(alpha, v, false, false)
 * scale_factor = (1 / tf.shape(x.query)[-1])            scale = 1.0 / d'  (see below)
 * FeedForward(hidden_dim=2048, output_dim=512)          tg_ffn_init(ctx, &ffn, TG_F32, 512, 2048,
 *                                                         TG_ACT_RELU, NULL)
 * self.dense2(self.dense1(x))  (dense1 has relu)        tg_ffn_forward(ctx, &ffn, x)
 *
 * Masking: which convention, and why. The tutorial *replaces* a masked score by -1e9
 * (tf.where); the paper (which it quotes) sets it to -inf; the Keras layers of "Scaled dot
 * product attention" and "How to Implement Multi-Head Attention From Scratch in TensorFlow and
 * Keras" *add* -1e9 * mask. tgrad offers TG_MASK_BLOCK (score becomes -inf: a replacement, like tf.where, with
 * the paper's value) and TG_MASK_ADDITIVE (score + m). This example uses TG_MASK_BLOCK, the
 * closest match to "replace", and also runs the additive form
 * tg_add_mask(s, tg_scale(mask, -1e9), TG_MASK_ADDITIVE) to show that the weights agree: every
 * |score| here is << 1e9, so exp(-1e9 + s - max) underflows to exactly 0 just as exp(-1e9 - max)
 * and exp(-inf) do (in float32, s - 1e9 even rounds to -1e9 itself: the float spacing there is
 * 64). The three conventions differ only on a row whose keys are *all* masked: tf.where gives
 * uniform weights 1/N, additive -1e9 gives softmax(s) shifted (about the same), and BLOCK gives
 * zeros (tgrad's safe softmax). The look-ahead mask always leaves the diagonal, so no row here is
 * fully masked.
 *
 * Scale: the tutorial's code multiplies by 1/d' (`1 / tf.shape(x.query)[-1]`), although the
 * paper it quotes divides by sqrt(d_k). This example reproduces the code (scale = 1/d');
 * tg_sdpa's default (scale argument 0) is the paper's 1/sqrt(d_k).
 *
 * The post prints nothing and generates no data; inputs here are standard normal from tgrad's
 * context RNG (float32, as TensorFlow). Keras Dense layers start from glorot-uniform weights and
 * zero biases; tg_ffn_init uses PyTorch nn.Linear's initialisation, uniform(+-1/sqrt(fan_in)).
 */
#include "tgrad.h"
#include "tgrad_nn.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

enum { B = 2, N = 4, D_ATT = 16, D_MODEL = 512, D_FF = 2048 };

/* Report a failure (status @p st, or the context's recorded one if @p st is TG_OK) with the
 * context's message, free the context, and return the exit status 1. */
static int fail(tg_ctx *ctx, const char *what, tg_status st)
{
    if (st == TG_OK)
        st = tg_ctx_status(ctx);
    fprintf(stderr, "seed003_masked_sdpa_ffn: %s failed: %s: %s\n", what, tg_status_str(st),
            tg_ctx_message(ctx));
    tg_ctx_free(ctx);
    return 1;
}

/* Euclidean norm of t's gradient over flat elements [start, start + n). */
static tg_status grad_norm_range(const tg_tensor *t, int64_t start, int64_t n, double *norm)
{
    size_t total = (size_t)tg_tensor_numel(t);
    double *g = malloc(total * sizeof *g);
    if (!g)
        return TG_ERR_NOMEM;
    tg_status st = tg_tensor_get_grad(t, g, TG_F64, total);
    if (st == TG_OK) {
        double ss = 0;
        for (int64_t i = start; i < start + n; i++)
            ss += g[i] * g[i];
        *norm = sqrt(ss);
    }
    free(g);
    return st;
}

/* Print a (B, R, C) tensor batch by batch; @p as_bool prints 0/1 as False/True. */
static void print_batched(const char *title, const tg_tensor *t, bool as_bool)
{
    int64_t nb = tg_tensor_dim(t, 0), R = tg_tensor_dim(t, 1), C = tg_tensor_dim(t, 2);
    printf("%s\n", title);
    for (int64_t b = 0; b < nb; b++)
        for (int64_t i = 0; i < R; i++) {
            printf("%s", i == 0 ? (b == 0 ? "[[[" : " [[") : "  [");
            for (int64_t j = 0; j < C; j++) {
                double x = tg_get(t, (b * R + i) * C + j);
                if (as_bool)
                    printf("%s%5s", j ? " " : "", x != 0 ? "True" : "False");
                else
                    printf("%s%10.8f", j ? " " : "", x);
            }
            printf("]%s%s\n", i == R - 1 ? "]" : "", i == R - 1 && b == nb - 1 ? "]" : "");
        }
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
        fprintf(stderr, "seed003_masked_sdpa_ffn: out of memory\n");
        return 1;
    }
    tg_ctx_seed(ctx, 3);
    tg_status st;

    /* ---- Scaled Dot-Product Attention with a boolean mask ---- */
    tg_tensor *query = tg_input(ctx, TG_F32, TG_DIMS(B, N, D_ATT), "query"); /* (B, N_q, d') */
    tg_tensor *key = tg_input(ctx, TG_F32, TG_DIMS(B, N, D_ATT), "key");     /* (B, N_kv, d') */
    tg_tensor *value = tg_input(ctx, TG_F32, TG_DIMS(B, N, D_ATT), "value"); /* (B, N_kv, d') */
    tg_tensor *mask = tg_const(ctx, TG_F32, TG_DIMS(B, N, N), "mask");       /* (B, N_q, N_kv) */
    if (!query || !key || !value || !mask)
        return fail(ctx, "creating the attention inputs", TG_OK);
    tg_fill_normal(query, 0, 1);
    tg_fill_normal(key, 0, 1);
    tg_fill_normal(value, 0, 1);
    /* True (1) = masked: key j is in the future of query i, or key j is padding */
    const int length[B] = {4, 3};
    for (int b = 0; b < B; b++)
        for (int i = 0; i < N; i++)
            for (int j = 0; j < N; j++)
                tg_set(mask, (b * N + i) * N + j, (j > i || j >= length[b]) ? 1.0 : 0.0);
    if ((st = tg_set_requires_grad(query, true)) != TG_OK ||
        (st = tg_set_requires_grad(key, true)) != TG_OK)
        return fail(ctx, "tg_set_requires_grad", st);

    const double scale_factor = 1.0 / D_ATT; /* the tutorial's 1 / tf.shape(x.query)[-1] */
    tg_attn_masks block = {.attn_mask = mask, .attn_mask_kind = TG_MASK_BLOCK};
    tg_tensor *alpha = NULL;
    tg_tensor *attn_out = tg_sdpa(ctx, query, key, value, &block, scale_factor, &alpha);
    /* the same with -1e9 added instead: (B, N_q, N_kv) additive bias -1e9 * mask */
    tg_attn_masks additive = {.attn_mask = tg_scale(ctx, mask, -1e9),
                              .attn_mask_kind = TG_MASK_ADDITIVE};
    tg_tensor *alpha_add = NULL;
    tg_tensor *attn_out_add = tg_sdpa(ctx, query, key, value, &additive, scale_factor, &alpha_add);

    /* ---- Position-wise Feed-Forward Network, B x N x 512 -> 2048 -> 512 ---- */
    tg_ffn ffn;
    if ((st = tg_ffn_init(ctx, &ffn, TG_F32, D_MODEL, D_FF, TG_ACT_RELU, NULL)) != TG_OK)
        return fail(ctx, "tg_ffn_init", st);
    tg_tensor *x = tg_input(ctx, TG_F32, TG_DIMS(B, N, D_MODEL), "x"); /* (B, N, D) */
    if (!x)
        return fail(ctx, "creating x", TG_OK);
    tg_fill_normal(x, 0, 1);
    tg_tensor *ffn_out = tg_ffn_forward(ctx, &ffn, x); /* (B, N, D) */

    /* two scalar losses, seeded together by tg_graph_backward_multi */
    tg_tensor *losses[] = {tg_sum_all(ctx, attn_out), tg_mean_all(ctx, ffn_out)};
    tg_tensor *outs[] = {losses[0], losses[1], attn_out_add};
    tg_graph *g = tg_graph_new(ctx, outs, 3); /* reports any builder error above */
    if (!g)
        return fail(ctx, "building the graph", TG_OK);
    if ((st = tg_graph_forward(g)) != TG_OK)
        return fail(ctx, "tg_graph_forward", st);

    char shape[64];
    printf("## Scaled Dot-Product Attention (scale_factor = 1/d' = %g; the paper's 1/sqrt(d') "
           "would be %g)\n\n", scale_factor, 1.0 / sqrt((double)D_ATT));
    print_batched("mask (True = masked: look-ahead, and key 3 of sequence 1 is padding)", mask,
                  true);
    print_batched("alpha = softmax(where(mask, -inf, alpha_term))  [TG_MASK_BLOCK]", alpha, false);
    printf("alpha with -1e9 * mask added [TG_MASK_ADDITIVE]: max |diff| = %.3g, "
           "output max |diff| = %.3g\n",
           max_abs_diff(alpha, alpha_add), max_abs_diff(attn_out, attn_out_add));
    printf("(alpha @ x.value).shape: %s\n", tg_tensor_shape_str(attn_out, shape, sizeof shape));
    printf("(alpha @ x.value)[1, 3, :4]: [%.8f %.8f %.8f %.8f]\n",
           tg_get(attn_out, (1 * N + 3) * D_ATT + 0), tg_get(attn_out, (1 * N + 3) * D_ATT + 1),
           tg_get(attn_out, (1 * N + 3) * D_ATT + 2), tg_get(attn_out, (1 * N + 3) * D_ATT + 3));

    printf("\n## Position-wise Feed-Forward Network\n\n");
    char s1[64], s2[64], s3[64];
    printf("FFN: x %s -> hidden (..., %d) -> out %s  (linear1.weight %s, linear2.weight %s)\n",
           tg_tensor_shape_str(x, s1, sizeof s1), D_FF,
           tg_tensor_shape_str(ffn_out, shape, sizeof shape),
           tg_tensor_shape_str(ffn.linear1_weight, s2, sizeof s2),
           tg_tensor_shape_str(ffn.linear2_weight, s3, sizeof s3));
    printf("FFN(x)[0, 0, :4]: [%.8f %.8f %.8f %.8f]\n", tg_get(ffn_out, 0), tg_get(ffn_out, 1),
           tg_get(ffn_out, 2), tg_get(ffn_out, 3));

    /* ---- Backward: L1 = sum(attention output), L2 = mean(FFN output) ---- */
    if ((st = tg_graph_backward_multi(g, 2, losses, NULL)) != TG_OK)
        return fail(ctx, "tg_graph_backward_multi", st);
    double n_query, n_pad_key, n_real_key, n_w1;
    if ((st = grad_norm_range(query, 0, tg_tensor_numel(query), &n_query)) != TG_OK ||
        (st = grad_norm_range(key, (1 * N + 3) * D_ATT, D_ATT, &n_pad_key)) != TG_OK ||
        (st = grad_norm_range(key, (1 * N + 2) * D_ATT, D_ATT, &n_real_key)) != TG_OK ||
        (st = grad_norm_range(ffn.linear1_weight, 0, tg_tensor_numel(ffn.linear1_weight),
                              &n_w1)) != TG_OK)
        return fail(ctx, "reading gradients", st);
    printf("\nL1 = sum(attention output) = %.6f, L2 = mean(FFN(x)) = %.6f\n",
           tg_get(losses[0], 0), tg_get(losses[1], 0));
    printf("||dL1/dquery|| = %.8f\n", n_query);
    printf("||dL1/dkey[1, 3, :]|| = %g (padding: masked for every query)  "
           "||dL1/dkey[1, 2, :]|| = %.8f\n", n_pad_key, n_real_key);
    printf("||dL2/d linear1.weight|| = %.8f\n", n_w1);

    tg_ctx_free(ctx);
    return 0;
}
