/*
 * custom_op.c - a user-defined op: softplus written as C callbacks, used in a graph like any
 * built-in op and checked with tg_gradcheck in f64 (public headers only).
 *
 *   softplus(x) = log(1 + e^x) = max(x, 0) + log1p(e^-|x|)      (stable for any x)
 *   d softplus / dx = sigmoid(x) = 1 / (1 + e^-x)
 *
 * The op: a tg_custom_def naming the callbacks (f32 and f64), the output shape (that of the
 * input), and what backward reads (the input x). The callbacks get a tg_custom_call: data
 * pointers, shapes, the thread count, and in backward dL/dy plus dL/dx to ADD INTO (+=).
 * Then: y = softplus(x W^T + b) -> mean; forward, backward, the gradient compared with
 * central differences (tg_gradcheck, f64), and the same op with a deliberately wrong backward
 * (the sigmoid factor forgotten), which tg_gradcheck catches.
 * Its rules written as ops (d.vjp, d.jvp: dy sigmoid(x) and t sigmoid(x), from tgrad's own
 * builders) let tg_grad, tg_jvp and tg_hvp go through it too: forward mode and second
 * derivatives, checked by tg_gradgradcheck in both modes.
 *
 * Usage: custom_op [G.dot]   (with a path: also write the graph as Graphviz DOT)
 */
#include "tgrad.h"

#include <math.h>
#include <stdio.h>

/* One definition per element type: T is float or double. Each element is computed by one
 * thread (static schedule), so the result does not depend on the thread count. */
#ifdef _OPENMP
#define PARALLEL_FOR(nt) _Pragma("omp parallel for schedule(static) num_threads(nt)")
#else
#define PARALLEL_FOR(nt) (void)(nt); /* serial: the thread count is unused */
#endif

#define DEFINE_SOFTPLUS(T, SUF)                                                                \
    static tg_status softplus_forward_##SUF(tg_custom_call *c)                                 \
    {                                                                                          \
        const T *x = c->input[0];                                                              \
        T *y = c->output;                                                                      \
        int nt = c->n_threads;                                                                 \
        PARALLEL_FOR(nt)                                                                       \
        for (int64_t i = 0; i < c->output_numel; i++) {                                        \
            double v = (double)x[i];                                                           \
            y[i] = (T)((v > 0 ? v : 0) + log1p(exp(-fabs(v))));                                \
        }                                                                                      \
        return TG_OK;                                                                          \
    }                                                                                          \
    static tg_status softplus_backward_##SUF(tg_custom_call *c)                                \
    {                                                                                          \
        const T *x = c->input[0]; /* declared in backward_reads */                            \
        const T *dy = c->grad_output;                                                          \
        T *dx = c->grad_input[0];                                                              \
        if (!dx)                                                                               \
            return TG_OK; /* x needs no gradient */                                            \
        int nt = c->n_threads;                                                                 \
        PARALLEL_FOR(nt)                                                                       \
        for (int64_t i = 0; i < c->output_numel; i++)                                          \
            dx[i] += (T)((double)dy[i] / (1 + exp(-(double)x[i]))); /* += : accumulate */     \
        return TG_OK;                                                                          \
    }                                                                                          \
    /* the same with the sigmoid factor forgotten: dx += dy (wrong on purpose) */              \
    static tg_status wrong_backward_##SUF(tg_custom_call *c)                                   \
    {                                                                                          \
        const T *dy = c->grad_output;                                                          \
        T *dx = c->grad_input[0];                                                              \
        for (int64_t i = 0; dx && i < c->output_numel; i++)                                    \
            dx[i] += dy[i];                                                                    \
        return TG_OK;                                                                          \
    }
DEFINE_SOFTPLUS(float, f32)
DEFINE_SOFTPLUS(double, f64)

/* The rules as ops: dL/dx = dL/dy sigmoid(x) (reverse), t_y = t_x sigmoid(x) (forward). */
static tg_status softplus_vjp(tg_ctx *ctx, tg_tensor *y, int n, tg_tensor *const *inputs,
                              tg_tensor *grad_output, const bool *need, tg_tensor **grad_inputs,
                              void *user)
{
    (void)y, (void)n, (void)need, (void)user;
    grad_inputs[0] = tg_mul(ctx, grad_output, tg_sigmoid(ctx, inputs[0]));
    return grad_inputs[0] ? TG_OK : tg_ctx_status(ctx);
}
static tg_tensor *softplus_jvp(tg_ctx *ctx, tg_tensor *y, int n, tg_tensor *const *inputs,
                               tg_tensor *const *tangents, void *user)
{
    (void)y, (void)n, (void)user;
    return tg_mul(ctx, tangents[0], tg_sigmoid(ctx, inputs[0]));
}

/* softplus(x), any shape, f32 or f64; with @p wrong, the broken backward. */
static tg_tensor *softplus(tg_ctx *ctx, tg_tensor *x, int wrong)
{
    tg_custom_def d = {0};
    d.name = wrong ? "softplus_wrong" : "softplus";
    d.out_rank = TG_CUSTOM_SAME_SHAPE;           /* y has x's shape */
    d.forward_f32 = softplus_forward_f32;
    d.forward_f64 = softplus_forward_f64;
    d.backward_f32 = wrong ? wrong_backward_f32 : softplus_backward_f32;
    d.backward_f64 = wrong ? wrong_backward_f64 : softplus_backward_f64;
    d.backward_reads = TG_CUSTOM_READS_INPUT(0); /* backward needs x (not y) */
    d.vjp = softplus_vjp;                        /* second order and forward mode */
    d.jvp = softplus_jvp;
    return tg_custom_op(ctx, &d, 1, &x);
}

static int fail(tg_ctx *ctx, const char *what)
{
    fprintf(stderr, "custom_op: %s failed: %s: %s\n", what, tg_status_str(tg_ctx_status(ctx)),
            tg_ctx_message(ctx));
    tg_ctx_free(ctx);
    return 1;
}

int main(int argc, char **argv)
{
    tg_ctx *ctx = tg_ctx_new();
    if (!ctx)
        return 1;
    tg_ctx_seed(ctx, 7);
    /* y = mean(softplus(x W^T + b)): x (4, 3), W (5, 3), b (5) */
    tg_tensor *x = tg_input(ctx, TG_F64, TG_DIMS(4, 3), "x");
    tg_tensor *w = tg_param(ctx, TG_F64, TG_DIMS(5, 3), "weight");
    tg_tensor *b = tg_param(ctx, TG_F64, TG_DIMS(5), "bias");
    if (!x || !w || !b)
        return fail(ctx, "creating the tensors");
    tg_set_requires_grad(x, 1);
    tg_fill_uniform(x, -2, 2);
    tg_fill_uniform(w, -1, 1);
    tg_fill_uniform(b, -1, 1);
    tg_tensor *h = softplus(ctx, tg_dense(ctx, x, w, b), 0); /* (4, 5) */
    tg_tensor *loss = tg_mean_all(ctx, h);                    /* () */
    tg_graph *g = tg_graph_new(ctx, &loss, 1);
    if (!g)
        return fail(ctx, "building the graph");
    if (tg_graph_forward(g) != TG_OK || tg_graph_backward(g, loss, NULL) != TG_OK)
        return fail(ctx, "running the graph");
    printf("op '%s' on %lld elements: loss %.12f, dL/dx[0] %.12f, dL/dweight[0] %.12f\n",
           tg_tensor_op_name(h), (long long)tg_tensor_numel(h), tg_get(loss, 0),
           tg_grad_get(x, 0), tg_grad_get(w, 0));
    if (argc > 1 && tg_graph_write_dot(g, argv[1], TG_DOT_BACKWARD) != TG_OK)
        return fail(ctx, "writing the DOT file");

    /* the gradient against central differences, PyTorch's gradcheck tolerances (f64) */
    tg_gradcheck_report rep;
    tg_status s = tg_gradcheck(ctx, loss, NULL, &rep);
    printf("gradcheck softplus:       %s\n", rep.message);
    if (s != TG_OK)
        return fail(ctx, "gradcheck of softplus");

    /* second derivatives and forward mode through the rules as ops (gradgradcheck) */
    tg_gradcheck_opts o = tg_gradcheck_defaults(TG_F64);
    o.mode = TG_GRADCHECK_BOTH;
    s = tg_gradgradcheck(ctx, loss, &o, &rep);
    printf("gradgradcheck softplus:   %s\n", rep.message);
    if (s != TG_OK)
        return fail(ctx, "gradgradcheck of softplus");

    /* a wrong backward rule does not go unnoticed */
    tg_tensor *bad = tg_mean_all(ctx, softplus(ctx, tg_dense(ctx, x, w, b), 1));
    if (!bad)
        return fail(ctx, "building the wrong op");
    s = tg_gradcheck(ctx, bad, NULL, &rep);
    printf("gradcheck softplus_wrong: %s\n", rep.message);
    if (s != TG_ERR_GRADCHECK) {
        fprintf(stderr, "custom_op: the wrong backward was not caught (%s)\n", tg_status_str(s));
        tg_ctx_free(ctx);
        return 1;
    }
    tg_ctx_free(ctx);
    return 0;
}
