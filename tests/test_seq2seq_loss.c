/*
 * test_seq2seq_loss.c - tg_seq2seq_loss (tgrad_train.h): the encoder-decoder's loss on padded
 * batches of any shape.
 * - padding changes nothing: a padded batch of sentences of different lengths gives the
 *   token-weighted mean of the sentences' own losses, and the same gradients (f64, 1e-12);
 * - one graph per shape and mode, reused; evaluation's sum and token count;
 * - label smoothing applies to training only;
 * - bad batches are refused with a run-time error and nothing built.
 */
#include "testutil.h"
#include "tgrad_train.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

enum { V = 13, L = 12, D = 8 };

static void init_model(tg_ctx *ctx, tg_transformer *m, tg_dtype dt, bool norm_first)
{
    tg_transformer_config mc;
    memset(&mc, 0, sizeof mc);
    mc.vocab_size = V;
    mc.max_seq_len = L;
    mc.n_layers = 2;
    mc.n_decoder_layers = 1;
    mc.layer = tg_encoder_config_default(D, 2);
    mc.layer.d_ff = 16;
    mc.layer.norm_first = norm_first;
    mc.pos = TG_POS_SINUSOIDAL;
    mc.tie_weights = true;
    mc.scale_embeddings = true;
    ck_assert_msg(tg_transformer_init(ctx, m, dt, &mc) == TG_OK, "%s", tg_ctx_message(ctx));
}

/* Sentence i: source of length sl[i] (EOS-terminated ids), target of length tl[i]. */
static const int64_t sl[3] = {5, 2, 4}, tl[3] = {3, 6, 1};

static void sentence(int i, int32_t *src, int32_t *tin, int32_t *lab)
{
    for (int64_t j = 0; j < sl[i]; j++)
        src[j] = (int32_t)(4 + (i * 7 + j * 3) % (V - 4));
    src[sl[i] - 1] = 2;
    tin[0] = 1;
    for (int64_t j = 0; j < tl[i]; j++) {
        lab[j] = (int32_t)(4 + (i * 5 + j * 2) % (V - 4));
        if (j + 1 < tl[i])
            tin[j + 1] = lab[j];
    }
    lab[tl[i] - 1] = 2;
}

static double *grads(tg_ctx *ctx, int64_t *n)
{
    int64_t total = 0;
    for (int64_t i = 0; i < tg_ctx_n_params(ctx); i++)
        total += tg_tensor_numel(tg_ctx_param(ctx, i));
    double *g = malloc(sizeof *g * (size_t)total);
    int64_t k = 0;
    for (int64_t i = 0; i < tg_ctx_n_params(ctx); i++) {
        tg_tensor *p = tg_ctx_param(ctx, i);
        for (int64_t j = 0; j < tg_tensor_numel(p); j++)
            g[k++] = tg_grad_get(p, j);
    }
    *n = total;
    return g;
}

START_TEST(test_padding_changes_nothing)
{
    tg_ctx *ctx = tu_ctx_new();
    tg_transformer m;
    init_model(ctx, &m, TG_F64, _i == 1);
    tg_ctx_set_training(ctx, false); /* no dropout configured anyway */
    tg_seq2seq_loss_opts o = tg_seq2seq_loss_defaults();
    tg_seq2seq_loss *Ls = tg_seq2seq_loss_new(ctx, &m, &o);
    ck_assert_ptr_nonnull(Ls);
    /* each sentence alone, unpadded: loss_i (mean over its tl[i] tokens), grads g_i */
    double want = 0, *gsum = NULL;
    int64_t ng = 0, toks = 0;
    for (int i = 0; i < 3; i++) {
        int32_t src[L], tin[L], lab[L];
        sentence(i, src, tin, lab);
        tg_seq2seq_batch b = {1, sl[i], tl[i], src, &sl[i], tin, lab};
        double l;
        ck_assert_msg(tg_seq2seq_loss_backward(Ls, &b, &l) == TG_OK, "%s", tg_ctx_message(ctx));
        double *g = grads(ctx, &ng);
        if (!gsum)
            gsum = calloc((size_t)ng, sizeof *gsum);
        for (int64_t k = 0; k < ng; k++)
            gsum[k] += g[k] * (double)tl[i];
        free(g);
        want += l * (double)tl[i];
        toks += tl[i];
    }
    want /= (double)toks;
    /* the padded batch: S = 5, T = 6, padding ids arbitrary (3 and 9), labels -100 */
    enum { S = 5, T = 6 };
    int32_t src[3 * S], tin[3 * T], lab[3 * T];
    for (int i = 0; i < 3; i++) {
        int32_t s1[L], t1[L], l1[L];
        sentence(i, s1, t1, l1);
        for (int64_t j = 0; j < S; j++)
            src[i * S + j] = j < sl[i] ? s1[j] : (j % 2 ? 3 : 9);
        for (int64_t j = 0; j < T; j++) {
            tin[i * T + j] = j < tl[i] ? t1[j] : 3;
            lab[i * T + j] = j < tl[i] ? l1[j] : -100;
        }
    }
    tg_seq2seq_batch b = {3, S, T, src, sl, tin, lab};
    double l;
    ck_assert_int_eq(tg_seq2seq_loss_backward(Ls, &b, &l), TG_OK);
    ck_assert_msg(fabs(l - want) < 1e-12, "padded %.15g, sentences %.15g", l, want);
    double *g = grads(ctx, &ng);
    for (int64_t k = 0; k < ng; k++)
        ck_assert_msg(fabs(g[k] - gsum[k] / (double)toks) < 1e-12, "grad %lld: %g vs %g",
                      (long long)k, g[k], gsum[k] / (double)toks);
    free(g);
    free(gsum);
    /* evaluation: sum and tokens */
    double sum;
    int64_t nt;
    ck_assert_int_eq(tg_seq2seq_loss_eval(Ls, &b, &sum, &nt), TG_OK);
    ck_assert_int_eq(nt, toks);
    ck_assert_msg(fabs(sum / (double)nt - want) < 1e-12, "eval %.15g", sum / (double)nt);
    /* shapes: 3 training graphs (1x5x3, 1x2x6, 1x4x1) + the batch's + one evaluation graph */
    ck_assert_int_eq(tg_seq2seq_loss_graphs(Ls), 5);
    ck_assert_int_eq(tg_seq2seq_loss_backward(Ls, &b, NULL), TG_OK);
    ck_assert_int_eq(tg_seq2seq_loss_graphs(Ls), 5);
    tg_seq2seq_loss_free(Ls);
    tu_ctx_free(ctx);
}
END_TEST

START_TEST(test_label_smoothing_training_only)
{
    tg_ctx *ctx = tu_ctx_new();
    tg_transformer m;
    init_model(ctx, &m, TG_F64, false);
    tg_seq2seq_loss_opts o = tg_seq2seq_loss_defaults();
    o.label_smoothing = 0.1;
    tg_seq2seq_loss *Ls = tg_seq2seq_loss_new(ctx, &m, &o);
    tg_seq2seq_loss *L0 = tg_seq2seq_loss_new(ctx, &m, NULL);
    int32_t src[L], tin[L], lab[L];
    sentence(0, src, tin, lab);
    tg_seq2seq_batch b = {1, sl[0], tl[0], src, &sl[0], tin, lab};
    double ls, l0, sum;
    int64_t nt;
    ck_assert_int_eq(tg_seq2seq_loss_backward(Ls, &b, &ls), TG_OK);
    ck_assert_int_eq(tg_seq2seq_loss_backward(L0, &b, &l0), TG_OK);
    ck_assert_msg(ls != l0, "smoothing changes the training loss");
    ck_assert_int_eq(tg_seq2seq_loss_eval(Ls, &b, &sum, &nt), TG_OK);
    ck_assert_msg(fabs(sum / (double)nt - l0) < 1e-12, "evaluation is unsmoothed");
    tg_seq2seq_loss_free(Ls);
    tg_seq2seq_loss_free(L0);
    tu_ctx_free(ctx);
}
END_TEST

START_TEST(test_bad_batches)
{
    tg_ctx *ctx = tu_ctx_new();
    tg_transformer m;
    init_model(ctx, &m, TG_F32, false);
    tg_seq2seq_loss *Ls = tg_seq2seq_loss_new(ctx, &m, NULL);
    int32_t src[2 * L] = {0}, tin[2 * L] = {0}, lab[2 * L] = {0};
    int64_t len[2] = {2, 0};
    tg_seq2seq_batch b = {2, 3, 3, src, len, tin, lab};
    ck_assert_int_eq(tg_seq2seq_loss_backward(Ls, &b, NULL), TG_ERR_ARG);
    tu_assert_error(ctx, TG_ERR_ARG, "src_len[1] is 0");
    len[1] = 3;
    b.S = L + 1;
    ck_assert_int_eq(tg_seq2seq_loss_backward(Ls, &b, NULL), TG_ERR_SHAPE);
    tu_assert_error(ctx, TG_ERR_SHAPE, "max_seq_len 12");
    b.S = 3;
    lab[1] = V; /* a label out of range: the forward run refuses it */
    ck_assert_int_ne(tg_seq2seq_loss_backward(Ls, &b, NULL), TG_OK);
    ck_assert_int_eq(tg_seq2seq_loss_graphs(Ls), 1);
    lab[1] = 4;
    ck_assert_int_eq(tg_seq2seq_loss_backward(Ls, &b, NULL), TG_OK);
    /* the graph of a shape, built without running (the one backward used, or a new one) */
    const tg_graph *g = tg_seq2seq_loss_graph(Ls, &b, true);
    ck_assert_ptr_nonnull(g);
    ck_assert_int_eq(tg_seq2seq_loss_graphs(Ls), 1);
    b.T = 2;
    ck_assert_ptr_nonnull(tg_seq2seq_loss_graph(Ls, &b, false));
    ck_assert_int_eq(tg_seq2seq_loss_graphs(Ls), 2);
    b.S = L + 1;
    ck_assert_ptr_null(tg_seq2seq_loss_graph(Ls, &b, true));
    tu_assert_error(ctx, TG_ERR_SHAPE, "tg_seq2seq_loss_graph: batch shape");
    ck_assert_int_eq(tg_seq2seq_loss_graphs(Ls), 2);
    b.S = 3;
    b.T = 3;
    tg_seq2seq_loss_opts o = tg_seq2seq_loss_defaults();
    o.ignore_index = 3;
    ck_assert_ptr_null(tg_seq2seq_loss_new(ctx, &m, &o));
    tu_assert_error(ctx, TG_ERR_ARG, "ignore_index 3 is a token id");
    o = tg_seq2seq_loss_defaults();
    o.label_smoothing = 1.5;
    ck_assert_ptr_null(tg_seq2seq_loss_new(ctx, &m, &o));
    tu_assert_error(ctx, TG_ERR_ARG, "label_smoothing");
    tg_seq2seq_loss_free(Ls);
    tu_ctx_free(ctx);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("seq2seq_loss");
    TCase *tc = tu_tcase(s, "loss", 0);
    tcase_add_loop_test(tc, test_padding_changes_nothing, 0, 2);
    tcase_add_test(tc, test_label_smoothing_training_only);
    tcase_add_test(tc, test_bad_batches);
    return tu_run(s);
}
