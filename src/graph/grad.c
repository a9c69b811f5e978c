/*
 * grad.c - layer 3: gradients as graph nodes (tg_grad, include/tgrad.h). The nodes between
 * the chosen inputs and the outputs are visited in reverse topological order; each one's
 * gradient (the sum, in a fixed order, of what its consumers' rules gave it) goes through its
 * op's reverse rule written as ops (ops/vjp.c). The result is ordinary nodes: run them in any
 * graph, draw them, and differentiate them again (tg_graph_backward or tg_grad).
 */
#include "graph_internal.h"
#include "vjp.h"
#include "walk.h"

#include <stdlib.h>
#include <string.h>

static const char *FN = "tg_grad";

static bool is_float(const tg_tensor *t) { return t->dtype == TG_F32 || t->dtype == TG_F64; }

/* An op whose value is piecewise constant in its sources (grad_mask): no gradient through it. */
static bool is_constant(const tg_tensor *t)
{
    return t->op != TG__OP_LEAF && (t->def->flags & TG_OPF_CONSTANT);
}

/* The arguments' rules (tg_grad's Errors). */
static bool args_ok(tg_ctx *ctx, int n_out, tg_tensor *const *outputs, tg_tensor *const *seeds,
                    int n_wrt, tg_tensor *const *wrt, tg_tensor **grads)
{
    if (n_out < 1 || n_wrt < 1 || !outputs || !wrt || !grads) {
        tg__err(ctx, TG_ERR_ARG, FN,
                "needs at least one output and one input to "
                "differentiate by, and an array for the gradients");
        return false;
    }
    for (int i = 0; i < n_out + n_wrt; i++) {
        const tg_tensor *t = i < n_out ? outputs[i] : wrt[i - n_out];
        const char *what = i < n_out ? "output" : "wrt";
        int k = i < n_out ? i : i - n_out;
        if (!t || t->ctx != ctx || !is_float(t)) {
            tg__err(ctx, !t || t->ctx != ctx ? TG_ERR_ARG : TG_ERR_DTYPE, FN, "%s %d %s", what, k,
                    !t              ? "is NULL"
                    : t->ctx != ctx ? "belongs to another context"
                                    : "is not f32 or f64 (no gradient)");
            return false;
        }
        const tg_tensor *s = i < n_out && seeds ? seeds[i] : NULL;
        if (i < n_out && !seeds && t->numel != 1) {
            tg__err(ctx, TG_ERR_SHAPE, FN,
                    "output %d ('%s') has %lld elements: give its "
                    "upstream gradient (seeds) or reduce it to a scalar",
                    k, t->name, (long long)t->numel);
            return false;
        }
        if (i < n_out && seeds &&
            (!s || s->ctx != ctx || s->dtype != t->dtype || s->rank != t->rank ||
             memcmp(s->shape, t->shape, sizeof s->shape) != 0)) {
            tg__err(ctx, TG_ERR_SHAPE, FN,
                    "seed %d must be a tensor of output %d's shape and "
                    "dtype ('%s')",
                    k, k, t->name);
            return false;
        }
    }
    return true;
}

/* @p *acc += @p g (a new add node; the first contribution is taken as is). */
static bool accumulate(tg_ctx *ctx, tg_tensor **acc, tg_tensor *g)
{
    *acc = *acc ? tg_add(ctx, *acc, g) : g;
    return *acc != NULL;
}

/* Node @p i's rule: its gradient g[i] pushed to the sources that lead to an input. */
static bool pull(tg_ctx *ctx, const walk *w, const bool *reach, tg_tensor **g, int64_t i)
{
    tg_tensor *y = w->node[i];
    tg__vjp_fn rule = tg__vjp_rule(y);
    if (!rule) {
        tg__err(ctx, TG_ERR_NOGRAD, FN, "op '%s' (node '%s') has no reverse rule written as ops%s",
                y->def ? y->def->name : "?", y->name,
                y->op == TG_OP_CUSTOM ? ": give its tg_custom_def a vjp"
                                      : " yet (docs/autodiff.md lists the ops that have one)");
        return false;
    }
    bool need[TG_MAX_SRC] = {false};
    tg_tensor *gx[TG_MAX_SRC] = {NULL};
    for (int k = 0; k < y->n_src; k++)
        need[k] = y->src[k] && is_float(y->src[k]) && reach[tg__walk_find(w, y->src[k])];
    if (!rule(ctx, y, g[i], need, gx))
        return false;
    for (int k = 0; k < y->n_src; k++)
        if (need[k] && gx[k] && !accumulate(ctx, &g[tg__walk_find(w, y->src[k])], gx[k]))
            return false;
    return true;
}

/* A zero constant like @p t (an input the outputs do not depend on). */
static tg_tensor *zeros_like(tg_ctx *ctx, const tg_tensor *t)
{
    return tg__filled(ctx, t->dtype, t->rank, t->shape, 0.0, "zero_grad");
}

/* The walk, reachability and pulls: g_out[j] = d<seeds, outputs>/d wrt[j] as nodes (NULL when
 * the outputs do not depend on it). With @p stop the walk ends at the wrt nodes (each is taken
 * as an independent variable: partial derivatives, for the rule of a fused node), so wrt must
 * be distinct. */
static bool grad_core(tg_ctx *ctx, walk *w, int n_out, tg_tensor *const *outputs,
                      tg_tensor *const *seeds, int n_wrt, tg_tensor *const *wrt, tg_tensor **g_out,
                      bool stop)
{
    int64_t n_stop = 0;
    bool ok = tg__walk_grow(w);
    for (int j = 0; ok && stop && j < n_wrt; j++)
        ok = tg__walk_find(w, wrt[j]) >= 0 || (tg__walk_add(w, wrt[j]) && ++n_stop);
    for (int i = 0; ok && i < n_out; i++)
        ok = tg__walk_visit(w, outputs[i]);
    bool *reach = ok ? calloc((size_t)w->n + 1, sizeof *reach) : NULL;
    tg_tensor **g = ok ? calloc((size_t)w->n + 1, sizeof *g) : NULL;
    if (!(ok = reach && g))
        tg__err(ctx, TG_ERR_NOMEM, FN, "out of memory");
    for (int j = 0; ok && j < n_wrt; j++) { /* the inputs, then whatever uses them */
        int64_t k = tg__walk_find(w, wrt[j]);
        if (k >= 0)
            reach[k] = true;
    }
    for (int64_t i = n_stop; ok && i < w->n; i++) /* (a constant of its sources: none) */
        for (int k = 0; !reach[i] && k < w->node[i]->n_src && !is_constant(w->node[i]); k++)
            reach[i] = w->node[i]->src[k] && reach[tg__walk_find(w, w->node[i]->src[k])];
    for (int i = 0; ok && i < n_out; i++) {
        const tg_tensor *o = outputs[i];
        tg_tensor *seed =
            seeds ? seeds[i] : tg__filled(ctx, o->dtype, o->rank, o->shape, 1.0, "seed");
        ok = seed && accumulate(ctx, &g[tg__walk_find(w, outputs[i])], seed);
    }
    for (int64_t i = w->n - 1; ok && i >= n_stop; i--)
        if (g[i] && reach[i] && w->node[i]->op != TG__OP_LEAF)
            ok = pull(ctx, w, reach, g, i);
    for (int j = 0; ok && j < n_wrt; j++) {
        int64_t k = tg__walk_find(w, wrt[j]);
        g_out[j] = k >= 0 ? g[k] : NULL;
    }
    free(reach);
    free(g);
    return ok;
}

bool tg__grad_partial(tg_ctx *ctx, tg_tensor *y, tg_tensor *gy, int n, tg_tensor *const *src,
                      const bool *need, tg_tensor **gx)
{
    tg_tensor *wrt[TG_MAX_SRC] = {NULL}, *g[TG_MAX_SRC] = {NULL};
    int slot[TG_MAX_SRC], m = 0;
    for (int k = 0; k < n; k++) {
        gx[k] = NULL;
        bool again = false; /* a source given twice: its total on the first slot */
        for (int j = 0; j < m; j++)
            again |= wrt[j] == src[k];
        if (need[k] && src[k] && !again) {
            wrt[m] = src[k];
            slot[m++] = k;
        }
    }
    walk w = {0};
    bool ok = grad_core(ctx, &w, 1, &y, &gy, m, wrt, g, true);
    tg__walk_free(&w);
    for (int j = 0; ok && j < m; j++)
        gx[slot[j]] = g[j];
    return ok;
}

tg_status tg_grad(tg_ctx *ctx, int n_out, tg_tensor *const *outputs, tg_tensor *const *seeds,
                  int n_wrt, tg_tensor *const *wrt, tg_tensor **grads)
{
    if (!ctx)
        return TG_ERR_ARG;
    tg__begin(ctx);
    if (tg__build_failed(ctx))
        return tg_ctx_status(ctx);
    for (int j = 0; grads && j < n_wrt; j++)
        grads[j] = NULL;
    if (!args_ok(ctx, n_out, outputs, seeds, n_wrt, wrt, grads))
        return tg_ctx_status(ctx);
    walk w = {0};
    bool ok = grad_core(ctx, &w, n_out, outputs, seeds, n_wrt, wrt, grads, false);
    tg__walk_free(&w);
    for (int j = 0; ok && j < n_wrt; j++) /* an input the outputs do not use: zeros */
        ok = grads[j] || (grads[j] = zeros_like(ctx, wrt[j])) != NULL;
    if (!ok) {
        for (int j = 0; j < n_wrt; j++)
            grads[j] = NULL;
        return tg_ctx_status(ctx) != TG_OK ? tg_ctx_status(ctx) : TG_ERR_STATE;
    }
    return TG_OK;
}
