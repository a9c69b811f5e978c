/*
 * autodiff.c - layer 3: reverse-mode autodiff over a planned graph.
 *
 * A call zeroes each gradient buffer when it becomes live (outputs' and kept tensors' at the
 * start, others just before the backward rule of their last consumer runs), seeds the outputs
 * (1, or the caller's upstream gradient), then runs, in reverse topological order, the rules of
 * the nodes a seeded output depends on; each rule adds (+=) into its sources' gradients.
 * Leaves receive this call's gradient in a planned buffer that is added to their accumulated
 * one at the end (PyTorch's grad += new_grad: two identical calls give exactly 2x).
 */
#include "graph_internal.h"
#include "vec.h"

#include <math.h>
#include <stdio.h>

/* Is t one of g's nodes? */
static bool in_graph(const tg_graph *g, const tg_tensor *t) { return tg__node_at(g, t) >= 0; }

/* Zero a gradient buffer: split over the threads when it is large (a serial memset of the
 * big activations' gradients was a visible share of a 2-thread backward). */
static void zero(tg__govs *govs, void *p, const tg_tensor *t, int nt)
{
    if (!p)
        return;
    int64_t bytes = t->numel * (int64_t)tg_dtype_size(t->dtype);
    char *c = p;
    TG_PAR_RANGE_IN(govs, nt, bytes > TG_PAR_BYTES, bytes, 4096,
                    { memset(c + lo, 0, (size_t)(hi - lo)); });
}

/* Element i of a gradient buffer (F32 or F64). */
static double grad_at(const void *p, tg_dtype dt, int64_t i)
{
    return dt == TG_F32 ? (double)((const float *)p)[i] : ((const double *)p)[i];
}

static void grad_put(void *p, tg_dtype dt, int64_t i, double v)
{
    if (dt == TG_F32)
        ((float *)p)[i] = (float)v;
    else
        ((double *)p)[i] = v;
}

/* After run_rule_checked's second run of t's rule: did it add to the pre-filled gradient of
 * source s (p: s's gradient before, then after the first run)? Records the first element that
 * was not in g->accum_bad, and puts back the first run's result exactly. */
static void check_second_run(tg_graph *g, const tg_tensor *t, const tg_tensor *s,
                             const double *p)
{
    void *gp = g->gval[tg__node_at(g, s)];
    double rtol = s->dtype == TG_F32 ? 1e-3 : 1e-9;
    for (int64_t e = 0; e < s->numel; e++) {
        double before = p[e], after = p[s->numel + e], c = after - before;
        double fill = (1 + fabs(c)) * (0.75 + 0.0625 * (double)(e % 9));
        double pre = before + fill;
        if (s->dtype == TG_F32)
            pre = (double)(float)pre; /* as stored */
        double got = grad_at(gp, s->dtype, e), want = pre + c;
        bool finite = isfinite(after) && isfinite(before) && isfinite(got);
        if (finite && !g->accum_bad.node &&
            !(fabs(got - want) <= rtol * (fabs(pre) + fabs(c) + fabs(before)))) {
            g->accum_bad.node = t;
            g->accum_bad.src = s;
            g->accum_bad.index = e;
            g->accum_bad.prefill = pre;
            g->accum_bad.got = got;
            g->accum_bad.want = want;
        }
        grad_put(gp, s->dtype, e, after); /* the first run's result, exactly */
    }
}

/*
 * Node i's backward rule, run twice to check that it adds (dx += ...) into its inputs'
 * gradients instead of assigning them (tg_gradcheck, g->check_accum): first as backward runs
 * it (contribution c = after - before), then with every input's gradient buffer pre-filled with
 * before + p, p non-zero and of c's scale, as a second consumer would have left it; the rule
 * must leave before + p + c (to rounding). The first run's results are put back exactly, so
 * the gradients this backward computes are those of a plain one. A rule whose input gradient
 * shares its own gradient's buffer (in place) is run once. The first rule that fails is
 * recorded in g->accum_bad.
 */
static tg_status run_rule_checked(tg_graph *g, int64_t i)
{
    tg_tensor *t = g->nodes[i];
    tg_ctx *ctx = g->ctx;
    const tg_tensor *srcs[TG_MAX_SRC];
    int64_t at[TG_MAX_SRC]; /* where srcs[j]'s before (numel) and after (numel) are kept */
    int ns = 0;
    int64_t total = t->numel; /* the upstream gradient, kept for the second run */
    for (int k = 0; k < t->n_src; k++) {
        tg_tensor *s = t->src[k];
        if (!s || !s->requires_grad || !g->gval[tg__node_at(g, s)])
            continue;
        if (g->gval[tg__node_at(g, s)] == g->gval[i])
            return tg__run_kernel(g, i, true); /* in place */
        bool dup = false;
        for (int j = 0; j < ns; j++)
            dup = dup || srcs[j] == s;
        if (!dup) {
            at[ns] = total;
            srcs[ns++] = s;
            total += 2 * s->numel; /* before, after the first run */
        }
    }
    if (ns == 0 || t->dtype == TG_I32)
        return tg__run_kernel(g, i, true);
    size_t bytes = SIZE_MAX; /* unreachable if the size overflows: NOMEM below */
    if (!tg__bytes(total, sizeof(double), &bytes))
        bytes = SIZE_MAX;
    double *keep = tg__alloc(ctx, bytes, "tg_gradcheck");
    if (!keep)
        return ctx->status;
    double *dy = keep;
    for (int64_t e = 0; e < t->numel; e++)
        dy[e] = grad_at(g->gval[i], t->dtype, e);
    for (int j = 0; j < ns; j++)
        for (int64_t e = 0; e < srcs[j]->numel; e++)
            keep[at[j] + e] = grad_at(g->gval[tg__node_at(g, srcs[j])], srcs[j]->dtype, e);
    tg_status st = tg__run_kernel(g, i, true);
    if (st != TG_OK)
        goto out;
    for (int j = 0; j < ns; j++) { /* after; then the pre-fill */
        const tg_tensor *s = srcs[j];
        double *p = keep + at[j];
        void *gp = g->gval[tg__node_at(g, s)];
        for (int64_t e = 0; e < s->numel; e++) {
            double after = grad_at(gp, s->dtype, e);
            p[s->numel + e] = after;
            double c = after - p[e];
            double fill = (1 + fabs(c)) * (0.75 + 0.0625 * (double)(e % 9)); /* not 0 */
            grad_put(gp, s->dtype, e, p[e] + fill);
        }
    }
    for (int64_t e = 0; e < t->numel; e++) /* the upstream gradient, as the first run saw it */
        grad_put(g->gval[i], t->dtype, e, dy[e]);
    st = tg__run_kernel(g, i, true);
    if (st != TG_OK)
        goto out;
    for (int j = 0; j < ns; j++)
        check_second_run(g, t, srcs[j], keep + at[j]);
out:
    tg__free(ctx, keep);
    return st;
}

/* Can g run backward now (built with gradients, forwarded, its values still there)? n, ys:
 * the outputs to start from. TG_OK, or the run error recorded naming fn. */
static tg_status backward_state_ok(tg_graph *g, int n, tg_tensor *const *ys, const char *fn)
{
    tg_ctx *ctx = g->ctx;
    if (n < 1 || !ys) {
        tg__run_err(ctx, TG_ERR_ARG, fn, "need at least one output to start from (got %d%s)",
                    n, ys ? "" : ", outputs NULL");
        return TG_ERR_ARG;
    }
    if (g->no_grad) {
        tg__run_err(ctx, TG_ERR_STATE, fn,
                    "the graph was built with no_grad (inference only): it has no gradients");
        return TG_ERR_STATE;
    }
    if (!g->forwarded) {
        tg__run_err(ctx, TG_ERR_STATE, fn,
                    g->fwd_failed ? "the last tg_graph_forward failed; run it successfully "
                                    "before backward"
                                  : "run tg_graph_forward before backward");
        return TG_ERR_STATE;
    }
    if (g->shared && g->shared->last != g) {
        tg__run_err(ctx, TG_ERR_STATE, fn,
                    "another graph sharing this graph's arena (tg_graph_opts.arena) ran after "
                    "its forward and overwrote the values backward reads; run tg_graph_forward "
                    "on this graph again first");
        return TG_ERR_STATE;
    }
    if (g->backwarded && !g->retain) {
        tg__run_err(ctx, TG_ERR_STATE, fn,
                    "backward already ran on this forward and its values may have been "
                    "overwritten (the graph was built with one_backward); run tg_graph_forward "
                    "again first");
        return TG_ERR_STATE;
    }
    return TG_OK;
}

/* Output k, y, may start backward with upstream gradient dy (NULL: 1 for a scalar)? TG_OK, or
 * the run error recorded naming fn. */
static tg_status seed_ok(tg_graph *g, int k, tg_tensor *y, const tg_tensor *dy, const char *fn)
{
    tg_ctx *ctx = g->ctx;
    if (!y || !in_graph(g, y)) {
        tg__run_err(ctx, TG_ERR_ARG, fn, "output %d is not a tensor of this graph", k);
        return TG_ERR_ARG;
    }
    if (!y->requires_grad) {
        tg__run_err(ctx, TG_ERR_NOGRAD, fn,
                "'%s' does not depend on any parameter or input that requires grad", y->name);
        return TG_ERR_NOGRAD;
    }
    if (!g->persist[tg__node_at(g, y)]) {
        tg__run_err(ctx, TG_ERR_ARG, fn,
                "'%s' is not an output of the graph and was not kept (tg_keep "
                "before tg_graph_new): backward starts only from those", y->name);
        return TG_ERR_ARG;
    }
    char b1[128], b2[128];
    if (!dy && y->numel != 1) {
        tg__run_err(ctx, TG_ERR_SHAPE, fn,
                "'%s' %s is not a scalar: pass an upstream gradient of that shape", y->name,
                tg__shape_str(y, b1, sizeof b1));
        return TG_ERR_SHAPE;
    }
    if (dy && (dy->numel != y->numel || dy->rank != y->rank ||
               memcmp(dy->shape, y->shape, sizeof y->shape) != 0)) {
        tg__run_err(ctx, TG_ERR_SHAPE, fn, "upstream gradient '%s' is %s but '%s' is %s",
                dy->name, tg__shape_str(dy, b1, sizeof b1), y->name,
                tg__shape_str(y, b2, sizeof b2));
        return TG_ERR_SHAPE;
    }
    if (dy && dy->ctx != ctx) {
        tg__run_err(ctx, TG_ERR_ARG, fn, "upstream gradient '%s' belongs to another context",
                    dy->name);
        return TG_ERR_ARG;
    }
    if (dy && dy->dtype != y->dtype) {
        tg__run_err(ctx, TG_ERR_DTYPE, fn, "upstream gradient is %s but '%s' is %s",
                tg_dtype_str(dy->dtype), y->name, tg_dtype_str(y->dtype));
        return TG_ERR_DTYPE;
    }
    if (dy && tg__stale(dy)) {
        tg__run_err(ctx, TG_ERR_STATE, fn, "upstream gradient '%s' was computed by a graph "
                    "whose shared arena another graph has run in since: its values are "
                    "gone", dy->name);
        return TG_ERR_STATE;
    }
    if (dy && !tg__value(dy)) {
        tg__run_err(ctx, TG_ERR_STATE, fn, "upstream gradient '%s' has no data (an op "
                    "result that no graph has computed)", dy->name);
        return TG_ERR_STATE;
    }
    return TG_OK;
}

/* Zero the gradient buffers that live from the start of backward, then add each output's
 * seed (its upstream gradient, or 1); with the tripwire, check the seeds. */
static tg_status seed(tg_graph *g, int n, tg_tensor *const *ys, const tg_tensor *const *dys)
{
    tg_ctx *ctx = g->ctx;
    int64_t begin = g->n; /* step at which backward begins */
    for (int64_t i = 0; i < g->n; i++) { /* gradients live from the start */
        int64_t b = g->nodes[i]->op == TG_OP_NONE ? -1 : g->grad_buf[i];
        if (b >= 0 && g->bufs[b].start == begin)
            zero(g->govs, tg__buf_ptr(g, b), g->nodes[i], tg__threads(ctx));
    }
    for (int64_t l = 0; l < g->n_leaves; l++)
        if (g->bufs[g->fresh_buf[l]].start == begin)
            zero(g->govs, g->gval[g->leaf_node[l]], g->leaves[l], tg__threads(ctx));
    for (int k = 0; k < n; k++) {
        tg_tensor *y = ys[k];
        const tg_tensor *dy = dys ? dys[k] : NULL;
        void *yg = g->gval[tg__node_at(g, y)];
        const void *dyv = dy ? tg__value(dy) : NULL;
        if (dy && !tg__is_contiguous(dy)) { /* a view as upstream gradient: walk its strides */
            for (int64_t i = 0; i < y->numel; i++) {
                double v = tg_get(dy, i);
                if (y->dtype == TG_F32)
                    ((float *)yg)[i] += (float)v;
                else
                    ((double *)yg)[i] += v;
            }
        } else if (y->dtype == TG_F32) {
            float *gp = yg;
            for (int64_t i = 0; i < y->numel; i++)
                gp[i] += dy ? ((const float *)dyv)[i] : 1.0f;
        } else {
            double *gp = yg;
            for (int64_t i = 0; i < y->numel; i++)
                gp[i] += dy ? ((const double *)dyv)[i] : 1.0;
        }
    }
    tg_status st = TG_OK;
    for (int k = 0; g->anomaly && st == TG_OK && k < n; k++) { /* the seeds */
        double v;
        int64_t i = tg__first_bad(g->gval[tg__node_at(g, ys[k])], ys[k]->dtype, ys[k]->numel,
                                  false, &v);
        if (i >= 0)
            st = tg__anomaly(g, TG_ANOMALY_BACKWARD, ys[k], NULL, "upstream", i, v);
    }
    return st;
}

/* Zero the gradients of node i's sources whose buffers start at its backward step. */
static void zero_starting_sources(tg_graph *g, int64_t i, int64_t step)
{
    tg_tensor *t = g->nodes[i];
    for (int k = 0; k < t->n_src; k++) { /* sources whose gradient starts here */
        tg_tensor *s = t->src[k];
        int64_t si = g->src_at[i * TG_MAX_SRC + k];
        if (!s || !s->requires_grad || !g->gval[si])
            continue;
        bool dup = false;
        for (int j = 0; j < k; j++)
            dup = dup || t->src[j] == s;
        int64_t b = s->op == TG_OP_NONE ? g->leaf_buf[si] : g->grad_buf[si];
        int64_t start = b >= 0 ? g->bufs[b].start : -1;
        if (!dup && start == step && g->gval[si] != g->gval[i]) /* (in place: no zeroing) */
            zero(g->govs, g->gval[si], s, tg__threads(g->ctx));
    }
}

/* The tripwire after node i's rule: each gradient it wrote, once. */
static tg_status check_rule_grads(tg_graph *g, int64_t i)
{
    tg_tensor *t = g->nodes[i];
    tg_status st = TG_OK;
    for (int k = 0; st == TG_OK && k < t->n_src; k++) {
        tg_tensor *s = t->src[k]; /* each gradient this rule wrote, once */
        bool dup = false;
        for (int j = 0; j < k; j++)
            dup = dup || t->src[j] == s;
        int64_t si = g->src_at[i * TG_MAX_SRC + k];
        if (!s || !g->gval[si] || dup)
            continue;
        double v;
        int64_t e = tg__first_bad(g->gval[si], s->dtype, s->numel, false, &v);
        if (e >= 0)
            st = tg__anomaly(g, TG_ANOMALY_BACKWARD, s, t, NULL, e, v);
    }
    return st;
}

/* The rules in reverse order. Only nodes that a seeded output depends on can receive a
 * non-zero gradient: mark them (reverse order: a node is needed if a needed op reads it) and
 * run just their rules. */
static tg_status run_rules(tg_graph *g, int n, tg_tensor *const *ys, tg_status st)
{
    int64_t begin = g->n; /* step at which backward begins */
    memset(g->needed, 0, (size_t)g->n);
    for (int k = 0; k < n; k++)
        g->needed[tg__node_at(g, ys[k])] = 1;
    for (int64_t i = g->n - 1; i >= 0 && st == TG_OK; i--) {
        tg_tensor *t = g->nodes[i];
        int64_t step = tg__bwd_step(g, i);
        if (t->op != TG_OP_NONE && t->requires_grad && step != begin)
            zero_starting_sources(g, i, step);
        if (g->needed[i] && t->op != TG_OP_NONE && t->requires_grad) {
            for (int k = 0; k < t->n_src; k++)
                if (t->src[k] && t->src[k]->requires_grad)
                    g->needed[g->src_at[i * TG_MAX_SRC + k]] = 1;
            tg_status ks = g->check_accum ? run_rule_checked(g, i) : tg__run_kernel(g, i, true);
            if (ks != TG_OK) {
                st = ks;
                break;
            }
            if (g->anomaly)
                st = check_rule_grads(g, i);
        }
        if (g->poison)
            tg__poison_step(g, step);
    }
    return st;
}

/* Add this call's gradient of each leaf to its accumulated one (none if st is an error; with
 * the tripwire, none if any sum would overflow). */
static tg_status accumulate_leaves(tg_graph *g, tg_status st)
{
    for (int64_t l = 0; g->anomaly && st == TG_OK && l < g->n_leaves; l++) {
        tg_tensor *t = g->leaves[l]; /* would the accumulation overflow? (checked first, so
                                        a failed call changes no accumulated gradient) */
        double v;
        int64_t e = tg__first_bad_sum(g->gval[g->leaf_node[l]], t->grad, t->dtype, t->numel,
                                      &v);
        if (e >= 0)
            st = tg__anomaly(g, TG_ANOMALY_BACKWARD, t, NULL, "accumulated", e, v);
    }
    g->backwarded = true;
    tg__mark_reused(g);
    int nt = tg__threads(g->ctx);
    for (int64_t l = 0; l < g->n_leaves; l++) {
        tg_tensor *t = g->leaves[l];
        const void *fresh = g->gval[g->leaf_node[l]];
        if (st != TG_OK)
            continue; /* an error: this call's gradient is dropped */
        int64_t cnt = t->numel;
        /* Race-free: element i is owned by one iteration. */
        if (t->dtype == TG_F32) {
            float *a = t->grad;
            const float *f = fresh;
            /* one thread below TG_PAR_BYTES: no parallel region at all */
            TG_PAR_RANGE_IN(g->govs, nt, cnt * 3 * (int64_t)sizeof(*a) > TG_PAR_BYTES, cnt, 16, {
                for (int64_t i = lo; i < hi; i++)
                    a[i] += f[i];
            });
        } else {
            double *a = t->grad;
            const double *f = fresh;
            /* one thread below TG_PAR_BYTES: no parallel region at all */
            TG_PAR_RANGE_IN(g->govs, nt, cnt * 3 * (int64_t)sizeof(*a) > TG_PAR_BYTES, cnt, 16, {
                for (int64_t i = lo; i < hi; i++)
                    a[i] += f[i];
            });
        }
    }
    return st;
}

tg_status tg_graph_backward_multi(tg_graph *g, int n, tg_tensor *const *ys,
                                  const tg_tensor *const *dys)
{
    static const char *fn = "tg_graph_backward";
    if (!g)
        return TG_ERR_ARG;
    tg__begin(g->ctx);
    tg_status st = backward_state_ok(g, n, ys, fn);
    for (int k = 0; st == TG_OK && k < n; k++)
        st = seed_ok(g, k, ys[k], dys ? dys[k] : NULL, fn);
    if (st != TG_OK)
        return st;
    if (g->anomaly)
        memset(&g->report, 0, sizeof g->report);
    tg__bind(g, true);
    g->bwd_ran = true;
    st = seed(g, n, ys, dys);
    st = run_rules(g, n, ys, st);
    return accumulate_leaves(g, st);
}

tg_status tg_graph_backward(tg_graph *g, tg_tensor *y, const tg_tensor *dy)
{
    return tg_graph_backward_multi(g, 1, &y, &dy);
}
