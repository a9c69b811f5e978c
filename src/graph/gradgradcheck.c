/*
 * gradgradcheck.c - layer 3: the second-order check (tg_gradgradcheck, include/tgrad.h;
 * PyTorch `torch.autograd.gradgradcheck`). The first-order gradients g_j = d<r, y>/dx_j are
 * built as graph nodes (tg_grad) with the upstream gradient r an input that takes a gradient,
 * reduced to S = sum_j <g_j, v_j> with fixed random v_j, and S is checked by tg_gradcheck:
 * against central differences in every x_j (the Hessian-vector products of <r, y>) and in r
 * (the Jacobian applied to v). A graph built here that fails (an op without a reverse rule
 * written as ops) is a run-time error of this call.
 */
#include "graph_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *FN = "tg_gradgradcheck";

/* A tensor of @p like's shape and dtype (an input that takes a gradient, or a constant) with
 * values uniform in [lo, hi) from the private stream @p s. */
static tg_tensor *random_like(tg_ctx *ctx, const tg_tensor *like, bool input, double lo, double hi,
                              uint64_t *s, const char *name)
{
    tg_tensor *t = input ? tg_input(ctx, like->dtype, like->rank, like->shape, name)
                         : tg_const(ctx, like->dtype, like->rank, like->shape, name);
    if (!t || (input && tg_set_requires_grad(t, true) != TG_OK))
        return NULL;
    for (int64_t i = 0; i < t->numel; i++)
        tg_set(t, i, lo + (hi - lo) * (double)(tg__splitmix64(s) >> 11) * 0x1.0p-53);
    return t;
}

/* S = sum_j <g_j, v_j> for the differentiable leaves of @p y, or NULL (error recorded). */
static tg_tensor *build_s(tg_ctx *ctx, tg_tensor *y, uint64_t seed)
{
    tg_graph *g = tg_graph_new(ctx, &y, 1);
    if (!g)
        return NULL;
    int64_t n = tg_graph_n_grad_leaves(g);
    tg_tensor **wrt = n > 0 && n <= INT32_MAX ? calloc((size_t)n * 2, sizeof *wrt) : NULL;
    if (!wrt) {
        tg_graph_free(g);
        return tg__run_err(ctx, n > 0 ? TG_ERR_NOMEM : TG_ERR_NOGRAD, FN,
                           n > 0 ? "out of memory" : "no differentiable leaves");
    }
    for (int64_t j = 0; j < n; j++)
        wrt[j] = tg_graph_grad_leaf(g, j);
    tg_graph_free(g);
    uint64_t s = seed ^ 0x6772616467726164ULL; /* "gradgrad" */
    tg_tensor *r = random_like(ctx, y, true, 0.5, 1.5, &s, "grad_output"), *S = NULL;
    tg_tensor **grads = wrt + n;
    bool ok = r && tg_grad(ctx, 1, &y, &r, (int)n, wrt, grads) == TG_OK;
    for (int64_t j = 0; ok && j < n; j++) {
        tg_tensor *v = random_like(ctx, grads[j], false, -1.0, 1.0, &s, "v");
        tg_tensor *t = tg_sum_all(ctx, tg_mul(ctx, grads[j], v));
        ok = (S = S ? tg_add(ctx, S, t) : t) != NULL;
    }
    free(wrt);
    return ok ? S : NULL;
}

tg_status tg_gradgradcheck(tg_ctx *ctx, tg_tensor *y, const tg_gradcheck_opts *opts,
                           tg_gradcheck_report *report)
{
    if (!ctx || !y || !report || y->ctx != ctx)
        return TG_ERR_ARG;
    memset(report, 0, sizeof *report);
    tg__begin(ctx);
    if (tg__build_failed(ctx))
        return ctx->status;
    if (y->dtype != TG_F32 && y->dtype != TG_F64) {
        tg__run_err(ctx, TG_ERR_DTYPE, FN, "'%s' is not f32 or f64", y->name);
        return TG_ERR_DTYPE;
    }
    tg_gradcheck_opts o = opts ? *opts : tg_gradcheck_defaults(y->dtype);
    tg__io_enter(ctx); /* the graphs built here fail as this call, not as a build */
    tg_tensor *S = build_s(ctx, y, o.seed);
    tg__io_leave(ctx);
    if (!S) {
        snprintf(report->message, sizeof report->message, "%s", tg_ctx_message(ctx));
        return ctx->status != TG_OK ? ctx->status : TG_ERR_STATE;
    }
    return tg_gradcheck(ctx, S, &o, report);
}
