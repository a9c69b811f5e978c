/*
 * maml_sine.c - second-order MAML (Finn et al. 2017, "Model-Agnostic Meta-Learning for Fast
 * Adaptation of Deep Networks", sec. 5.1) on sine-wave regression, against first-order MAML
 * (sec. 5.2: the inner gradient held constant). Tasks: y = A sin(x - phi), A in [0.1, 5],
 * phi in [0, pi], x in [-5, 5]. Model: an MLP 1-40-40-1 with ReLU. Inner loop: one SGD step of
 * alpha = 0.01 on the MSE of K = 10 points. Outer loop: Adam (1e-3) on the mean, over a
 * meta-batch of 25 tasks, of the MSE after adaptation on 10 other points of each task.
 *
 * The inner gradient is built as graph nodes (tg_grad), so the meta-gradient of the outer
 * loss flows through it: second derivatives, with no loop of our own over the model. First-
 * order MAML feeds the inner gradient's values back in as inputs. Both start from the same
 * weights and see the same tasks. Meta-test: the MSE after one step on 10 points, measured
 * on 100 points of each of 500 new tasks (the same tasks for both), and before any step.
 * Usage: maml_sine [META_STEPS] (300 by default, the test suite's; the paper ran 70,000).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "tgrad_train.h"

enum { K = 10, TASKS = 25, HIDDEN = 40, NP = 6, EVAL_POINTS = 100, EVAL_ROUNDS = 20 };
static const double ALPHA = 0.01, PI = 3.14159265358979323846;

/* The task stream: splitmix64, so both methods see the same tasks. */
static double uniform(uint64_t *s, double lo, double hi)
{
    uint64_t z = (*s += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return lo + (hi - lo) * (double)((z ^ (z >> 31)) >> 11) * 0x1.0p-53;
}

/* The MLP with weights w[0..5] = W1 (40, 1), b1, W2 (40, 40), b2, W3 (1, 40), b3. */
static tg_tensor *mlp(tg_ctx *ctx, tg_tensor *const *w, tg_tensor *x)
{
    tg_tensor *h = tg_relu(ctx, tg_dense(ctx, x, w[0], w[1]));
    h = tg_relu(ctx, tg_dense(ctx, h, w[2], w[3]));
    return tg_dense(ctx, h, w[4], w[5]);
}

/* One method's graph over @p n tasks: inputs xa, ya (K, 1) to adapt on, xb, yb (nb, 1) to
 * score; the meta-loss, mean over tasks of the MSE after one step. @p given (first order):
 * the inner gradients are inputs the caller fills; NULL: they are nodes (second order). */
typedef struct {
    tg_tensor *xa[TASKS], *ya[TASKS], *xb[TASKS], *yb[TASKS], *inner[TASKS], *grad[TASKS][NP];
    tg_tensor *given[TASKS][NP], *meta, *before;
    tg_graph *inner_graph, *graph;
} method;

static int build(tg_ctx *ctx, tg_tensor *const *w, method *m, int64_t nb, bool first_order)
{
    tg_tensor *meta = NULL, *before = NULL;
    for (int t = 0; t < TASKS; t++) {
        m->xa[t] = tg_input(ctx, TG_F64, TG_DIMS(K, 1), "xa");
        m->ya[t] = tg_input(ctx, TG_F64, TG_DIMS(K, 1), "ya");
        m->xb[t] = tg_input(ctx, TG_F64, TG_DIMS(nb, 1), "xb");
        m->yb[t] = tg_input(ctx, TG_F64, TG_DIMS(nb, 1), "yb");
        m->inner[t] = tg_mse_loss(ctx, mlp(ctx, w, m->xa[t]), m->ya[t], TG_REDUCTION_MEAN);
        if (tg_grad(ctx, 1, &m->inner[t], NULL, NP, w, m->grad[t]) != TG_OK)
            return 1;
        tg_tensor *adapted[NP];
        for (int p = 0; p < NP; p++) {
            tg_tensor *g = m->grad[t][p];
            if (first_order) { /* the gradient's values, a constant for the outer loss */
                int64_t shape[2] = {tg_tensor_dim(w[p], 0),
                                    tg_tensor_rank(w[p]) > 1 ? tg_tensor_dim(w[p], 1) : 1};
                g = m->given[t][p] = tg_input(ctx, TG_F64, tg_tensor_rank(w[p]), shape, "g");
            }
            adapted[p] = tg_sub(ctx, w[p], tg_scale(ctx, g, ALPHA));
        }
        tg_tensor *lb = tg_mse_loss(ctx, mlp(ctx, adapted, m->xb[t]), m->yb[t], TG_REDUCTION_MEAN);
        tg_tensor *l0 = tg_mse_loss(ctx, mlp(ctx, w, m->xb[t]), m->yb[t], TG_REDUCTION_MEAN);
        meta = meta ? tg_add(ctx, meta, lb) : lb;
        before = before ? tg_add(ctx, before, l0) : l0;
    }
    m->meta = tg_scale(ctx, meta, 1.0 / TASKS);
    m->before = tg_scale(ctx, before, 1.0 / TASKS);
    if (first_order) /* the inner gradients, run first; their values fill the inputs */
        m->inner_graph = tg_graph_new(ctx, &m->grad[0][0], TASKS * NP);
    tg_tensor *outs[2] = {m->meta, m->before};
    m->graph = tg_graph_new(ctx, outs, 2);
    return m->graph && (!first_order || m->inner_graph) ? 0 : 1;
}

/* New tasks into the method's inputs (n points to score per task). */
static void sample(method *m, uint64_t *s, int64_t n)
{
    for (int t = 0; t < TASKS; t++) {
        double a = uniform(s, 0.1, 5.0), phi = uniform(s, 0, PI);
        for (int i = 0; i < K + n; i++) {
            double x = uniform(s, -5, 5), y = a * sin(x - phi);
            tg_set(i < K ? m->xa[t] : m->xb[t], i < K ? i : i - K, x);
            tg_set(i < K ? m->ya[t] : m->yb[t], i < K ? i : i - K, y);
        }
    }
}

/* One run: forward (first order: the inner gradients' values copied in first). */
static tg_status forward(method *m, bool first_order)
{
    if (first_order) {
        tg_status s = tg_graph_forward(m->inner_graph);
        for (int t = 0; t < TASKS && s == TG_OK; t++)
            for (int p = 0; p < NP && s == TG_OK; p++)
                s = tg_tensor_copy(m->given[t][p], m->grad[t][p]);
        if (s != TG_OK)
            return s;
    }
    return tg_graph_forward(m->graph);
}

static int run(bool first_order, long steps, double *after, double *before)
{
    tg_ctx *ctx = tg_ctx_new();
    if (!ctx)
        return 1;
    tg_ctx_seed(ctx, 1);
    tg_tensor *w[NP] = {tg_param(ctx, TG_F64, TG_DIMS(HIDDEN, 1), "W1"),
                        tg_param(ctx, TG_F64, TG_DIMS(HIDDEN), "b1"),
                        tg_param(ctx, TG_F64, TG_DIMS(HIDDEN, HIDDEN), "W2"),
                        tg_param(ctx, TG_F64, TG_DIMS(HIDDEN), "b2"),
                        tg_param(ctx, TG_F64, TG_DIMS(1, HIDDEN), "W3"),
                        tg_param(ctx, TG_F64, TG_DIMS(1), "b3")};
    for (int p = 0; p < NP; p += 2) /* PyTorch nn.Linear's init: U(-1/sqrt(in), 1/sqrt(in)) */
        for (int q = 0; q < 2; q++) {
            double r = 1 / sqrt((double)tg_tensor_dim(w[p], 1));
            tg_fill_uniform(w[p + q], -r, r);
        }
    static method train, test;
    tg_optim_config oc = tg_optim_defaults(TG_OPTIM_ADAM);
    oc.lr = 1e-3;
    int rc = build(ctx, w, &train, K, first_order) || build(ctx, w, &test, EVAL_POINTS, false);
    tg_optim *opt = rc ? NULL : tg_optim_new(ctx, &oc, NP, w);
    uint64_t tasks = 7, eval_tasks = 99;
    for (long i = 0; opt && i < steps && rc == 0; i++) {
        sample(&train, &tasks, K);
        tg_graph_zero_grad(train.graph);
        rc = forward(&train, first_order) != TG_OK ||
             tg_graph_backward(train.graph, train.meta, NULL) != TG_OK ||
             tg_optim_step(opt, -1) != TG_OK;
    }
    *after = *before = 0;
    for (int r = 0; opt && r < EVAL_ROUNDS && rc == 0; r++) { /* 500 new tasks */
        sample(&test, &eval_tasks, EVAL_POINTS);
        rc = forward(&test, false) != TG_OK;
        *after += tg_get(test.meta, 0) / EVAL_ROUNDS;
        *before += tg_get(test.before, 0) / EVAL_ROUNDS;
    }
    if (rc || !opt)
        fprintf(stderr, "maml_sine: %s\n", tg_ctx_message(ctx));
    tg_ctx_free(ctx);
    return rc || !opt;
}

int main(int argc, char **argv)
{
    long steps = argc > 1 ? strtol(argv[1], NULL, 10) : 300;
    if (steps < 1 || steps > 10000000) {
        fprintf(stderr, "usage: maml_sine [META_STEPS in 1..10000000]\n");
        return 2;
    }
    double so, so0, fo, fo0;
    if (run(false, steps, &so, &so0) || run(true, steps, &fo, &fo0))
        return 1;
    printf("sine-wave MAML, %ld meta-steps of %d tasks, K = %d, one step of %g\n", steps, TASKS, K,
           ALPHA);
    printf("meta-test MSE (500 new tasks): second order %.4f (before the step %.4f), first "
           "order %.4f (before %.4f)\n",
           so, so0, fo, fo0);
    return isfinite(so) && isfinite(fo) ? 0 : 1;
}
