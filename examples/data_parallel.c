/*
 * data_parallel.c - an embedder's data-parallel training loop over MPI (include/tgrad_dist.h):
 * a small transformer encoder learns to copy digit sequences; every optimizer step's global
 * batch is K micro-batches, rank r of P runs micro-batches r K/P .. (r+1) K/P - 1, and
 * tg_dist_reduce() leaves every rank with the gradient of the global mean loss, summed in
 * tgrad's fixed tree. Rank 0 also trains a copy of the model alone on all K micro-batches and
 * checks that the parameters stay bitwise identical, step after step.
 *
 *   mpirun -np 2 build/examples/data_parallel      (any P dividing K = 4: 1, 2, 4)
 *
 * Exit status 0 when the runs agree. Public headers only; built with -Dmpi.
 */
#include "tgrad_dist.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { K = 4, BM = 8, T = 8, V = 10, STEPS = 40 };

typedef struct {
    tg_ctx *ctx;
    tg_transformer model;
    tg_tensor *ids, *tgt, *loss, *dy;
    tg_graph *g;
    tg_optim *opt;
} trainer;

static int trainer_init(trainer *t)
{
    t->ctx = tg_ctx_new();
    if (!t->ctx)
        return 1;
    tg_ctx_seed(t->ctx, 42); /* every rank: the same initial parameters */
    tg_transformer_config mc;
    memset(&mc, 0, sizeof mc);
    mc.vocab_size = V;
    mc.max_seq_len = T;
    mc.n_layers = 1;
    mc.layer = tg_encoder_config_default(32, 4);
    mc.layer.norm_first = true;
    if (tg_transformer_init(t->ctx, &t->model, TG_F32, &mc) != TG_OK)
        return 1;
    t->ids = tg_input(t->ctx, TG_I32, TG_DIMS(BM, T), "ids");
    t->tgt = tg_input(t->ctx, TG_I32, TG_DIMS(BM, T), "targets");
    tg_tensor *logits = tg_transformer_forward(t->ctx, &t->model, t->ids, NULL);
    t->loss = tg_cross_entropy(t->ctx, logits, t->tgt, -1); /* mean over the micro-batch */
    t->g = tg_graph_new(t->ctx, &t->loss, 1);
    /* backward seeded with 1/K: the K micro-batch gradients sum to the global mean's */
    t->dy = tg_const(t->ctx, TG_F32, 0, NULL, "share");
    tg_fill(t->dy, 1.0 / K);
    tg_optim_config oc = tg_optim_defaults(TG_OPTIM_ADAMW);
    oc.lr = 3e-3;
    t->opt = tg_optim_new(t->ctx, &oc, 0, NULL);
    return t->g && t->opt ? 0 : 1;
}

/* Micro-batch i of step s: the same digits on every rank (a hash of step, row and position). */
static void micro_batch(int step, int i, int32_t *ids)
{
    for (int r = 0; r < BM * T; r++) {
        unsigned x = (unsigned)(step * 7919 + (i * BM * T + r) * 104729) * 2654435761u;
        ids[r] = (int32_t)((x >> 16) % V);
    }
}

/* Forward and backward of micro-batch i, its gradients pushed into @p acc. */
static int run_micro_batch(trainer *t, tg_grad_accum *acc, int step, int i)
{
    int32_t ids[BM * T];
    micro_batch(step, i, ids);
    tg_graph_zero_grad(t->g);
    if (tg_tensor_set_data(t->ids, ids, TG_I32, BM * T) != TG_OK ||
        tg_tensor_set_data(t->tgt, ids, TG_I32, BM * T) != TG_OK || /* copy task */
        tg_graph_forward(t->g) != TG_OK || tg_graph_backward(t->g, t->loss, t->dy) != TG_OK)
        return 1;
    return tg_grad_accum_push(acc, tg_get(t->loss, 0) / K) != TG_OK;
}

/* Are the parameters of two trainers bitwise equal? */
static int same_params(trainer *a, trainer *b)
{
    for (int64_t j = 0; j < tg_ctx_n_params(a->ctx); j++) {
        tg_tensor *p = tg_ctx_param(a->ctx, j), *q = tg_ctx_param(b->ctx, j);
        size_t n = (size_t)tg_tensor_numel(p) * sizeof(float);
        if (memcmp(tg_tensor_data(p), tg_tensor_data(q), n) != 0)
            return 0;
    }
    return 1;
}

int main(void)
{
    MPI_Init(NULL, NULL);
    int rank = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    trainer t, ref;
    memset(&ref, 0, sizeof ref);
    if (trainer_init(&t) != 0 || (rank == 0 && trainer_init(&ref) != 0)) {
        fprintf(stderr, "data_parallel: %s\n", tg_ctx_message(t.ctx));
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    tg_dist *d = tg_dist_new(t.ctx, MPI_COMM_WORLD, K);
    if (!d) { /* P does not divide K: every rank gets the same error */
        if (rank == 0)
            fprintf(stderr, "data_parallel: %s\n", tg_ctx_message(t.ctx));
        MPI_Finalize();
        return 1;
    }
    int64_t first = tg_dist_first(d), count = tg_dist_count(d);
    tg_grad_accum *acc = tg_grad_accum_new(t.ctx, 0, NULL, K, first, count);
    tg_grad_accum *acc_ref = rank == 0 ? tg_grad_accum_new(ref.ctx, 0, NULL, K, 0, K) : NULL;
    int ok = acc && (rank != 0 || acc_ref), agree = 1;
    double loss = 0, loss_ref = 0;
    for (int s = 0; ok && s < STEPS; s++) {
        for (int64_t i = first; ok && i < first + count; i++)
            ok = run_micro_batch(&t, acc, s, (int)i) == 0;
        ok = ok && tg_dist_reduce(d, acc, &loss) == TG_OK && tg_optim_step(t.opt, -1) == TG_OK;
        if (ok && rank == 0) { /* the same step in one process */
            for (int i = 0; ok && i < K; i++)
                ok = run_micro_batch(&ref, acc_ref, s, i) == 0;
            ok = ok && tg_grad_accum_finish(acc_ref, &loss_ref) == TG_OK &&
                 tg_optim_step(ref.opt, -1) == TG_OK;
            agree = agree && loss == loss_ref && same_params(&t, &ref);
            if (s % 10 == 9 || s == 0)
                printf("step %2d  loss %.6f  (one process: %.6f)\n", s + 1, loss, loss_ref);
        }
    }
    if (!ok) {
        fprintf(stderr, "data_parallel: rank %d: %s\n", rank, tg_ctx_message(t.ctx));
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    tg_dist_stats st = tg_dist_get_stats(d);
    if (rank == 0) {
        printf("%d processes: parameters after %d steps %s one process's (%.0f bytes sent and "
               "%.3f ms in the exchange per step, rank 0)\n", tg_dist_size(d), STEPS,
               agree ? "bitwise identical to" : "DIFFER from",
               st.total_bytes_sent / STEPS, 1e3 * st.total_seconds / STEPS);
        fflush(stdout);
    }
    /* every rank learns whether rank 0 saw agreement */
    tg_dist_bcast(d, &agree, sizeof agree);
    tg_dist_free(d);
    tg_ctx_free(t.ctx);
    if (rank == 0)
        tg_ctx_free(ref.ctx);
    MPI_Finalize();
    return agree ? 0 : 1;
}
