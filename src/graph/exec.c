/*
 * exec.c - layer 3: running a planned graph. Binding (every node's data, saved values and
 * gradients point into the graph's arena; views into their base), the forward executor, the
 * kernel call (workspace bound, thread count capped at the planned one, a custom op's failure
 * collected), the poison debug mode and the NaN/Inf tripwire shared with autodiff.c.
 */
#include "graph_internal.h"
#include "vec.h"

#include <stdio.h>

tg_graph tg__graph_gone;

void tg__bind(tg_graph *g, bool grads)
{
    if (g->shared) /* the arena's current base; g now owns its contents */
        tg__arena_enter(g);
    /* (tg__stale: valid until another graph of the arena runs) */
    g->gen_at = g->shared ? g->shared->gen : 0;
    for (int64_t i = 0; i < g->n; i++) {
        tg_tensor *t = g->nodes[i];
        if (t->op == TG_OP_NONE) {
            g->val[i] = t->data;
            g->sval[i] = NULL;
            continue;
        }
        g->reused[i] = 0; /* readable while the graph runs */
        t->run_graph = g;
        if (t->base) { /* base precedes t in topological order: already bound */
            const void *bd = g->val[g->base_at[i]];
            g->val[i] = bd ? (char *)bd + t->offset * (int64_t)tg_dtype_size(t->dtype) : NULL;
        } else {
            g->val[i] = tg__buf_ptr(g, g->out_buf[i]);
        }
        g->sval[i] = tg__buf_ptr(g, g->saved_buf[i]);
    }
    if (!grads)
        return;
    for (int64_t i = 0; i < g->n; i++)
        g->gval[i] = g->nodes[i]->op == TG_OP_NONE ? NULL : tg__buf_ptr(g, g->grad_buf[i]);
    for (int64_t l = 0; l < g->n_leaves; l++) /* this call's gradient of each leaf */
        g->gval[g->leaf_node[l]] = tg__buf_ptr(g, g->fresh_buf[l]);
}

void *tg__value(const tg_tensor *t)
{
    if (t->op == TG_OP_NONE)
        return t->data;
    if (t->base) {
        char *b = tg__value(t->base);
        return b ? b + t->offset * (int64_t)tg_dtype_size(t->dtype) : NULL;
    }
    const tg_graph *g = t->run_graph;
    return g && g->arena ? tg__buf_ptr(g, g->out_buf[tg__node_at(g, t)]) : NULL;
}

void *tg__grad_value(const tg_tensor *t)
{
    if (t->op == TG_OP_NONE)
        return t->grad;
    const tg_graph *g = t->run_graph;
    return g && g->arena && g->grad_buf && g->bwd_ran
               ? tg__buf_ptr(g, g->grad_buf[tg__node_at(g, t)])
               : NULL;
}

int tg__stale_why(const tg_tensor *t)
{
    const tg_graph *g = t->op == TG_OP_NONE ? NULL : t->run_graph;
    if (!g)
        return TG__FRESH;
    if (g == &tg__graph_gone || g->reused[tg__node_at(g, t)])
        return TG__STALE_REUSED;
    return g->shared && g->shared->gen != g->gen_at ? TG__STALE_ARENA : TG__FRESH;
}

void tg__poison_step(tg_graph *g, int64_t step)
{
    for (int64_t q = g->end_ptr[step]; q < g->end_ptr[step + 1]; q++) {
        const tg__buf *b = &g->bufs[g->end_list[q]];
        tg_dtype dt = g->nodes[b->node]->dtype;
        char *p = g->arena + b->off;
        if (dt == TG_F64) {
            for (int64_t k = 0; k + 8 <= b->size; k += 8)
                *(double *)(p + k) = NAN;
        } else {
            for (int64_t k = 0; k + 4 <= b->size; k += 4)
                *(float *)(p + k) = NAN;
        }
    }
}

void tg__mark_reused(tg_graph *g)
{
    if (g->no_reuse) /* every value has memory of its own: all stay readable */
        return;
    for (int64_t i = 0; i < g->n; i++) {
        tg_tensor *t = g->nodes[i];
        /* a view reads its base's memory: a leaf's, or a kept value's, is never reused */
        if (t->op != TG_OP_NONE && !g->persist[i] &&
            !(t->base && (t->base->op == TG_OP_NONE || g->persist[g->base_at[i]])))
            g->reused[i] = 1;
    }
}

tg_status tg__run_kernel(tg_graph *g, int64_t i, bool backward)
{
    tg_tensor *t = g->nodes[i];
    tg__call c;
    tg__fill_call(g, i, backward, &c);
    g->govs->node = i; /* the sites it runs record it */
    tg_status s = tg__kernel(t->def, t->op, t->dtype, backward)(&c);
    g->govs->node = -1;
    return s;
}

void tg__fill_call(const tg_graph *g, int64_t i, bool backward, tg__call *c)
{
    const tg_tensor *t = g->nodes[i];
    memset(c, 0, sizeof *c);
    tg__call_describe(c, t);
    c->ctx = g->ctx;
    c->n_src = t->n_src;
    const int64_t *at = g->src_at + i * TG_MAX_SRC;
    for (int k = 0; k < t->n_src; k++) {
        if (at[k] < 0)
            continue;
        c->in[k] = g->val[at[k]];
        if (backward)
            c->dx[k] = g->gval[at[k]];
    }
    c->out = g->val[i];
    c->saved = g->sval[i];
    if ((t->def->flags & TG_OPF_SRC_SAVED) && at[0] >= 0)
        c->src_saved = g->sval[at[0]];
    int64_t wb = backward ? g->wsb_buf[i] : g->wsf_buf[i];
    c->ws = tg__buf_ptr(g, wb);
    c->ws_bytes = wb >= 0 ? (size_t)g->bufs[wb].size : 0;
    c->backward = backward;
    if (backward) {
        c->dy = g->gval[i];
        c->dy_scratch = !g->persist[i]; /* as when the workspace was planned */
    }
    c->nt = g->nt < tg__threads(g->ctx) ? g->nt : tg__threads(g->ctx);
    c->precision = g->precision;
    c->govs = g->govs;
}

/* ---- the NaN/Inf tripwire (tg_graph_opts.detect_anomaly) --------------------------------------
 * Forward checks every node's output (leaves included) in topological order as it is computed;
 * backward checks the upstream gradients it seeds, then after each backward rule the gradients
 * that rule wrote (its sources'), then the leaves' accumulated gradients. The first non-finite
 * value stops the call with TG_ERR_NONFINITE and is kept in g->report. -inf is accepted where
 * it is the point (minf_ok: attention masks and masked scores), NaN and +inf never are. */

/* Index of the first non-finite element of p (n elements of dt), or -1. */
int64_t tg__first_bad(const void *p, tg_dtype dt, int64_t n, bool minf_ok, double *val)
{
    if (!tg_dtype_is_float(dt))
        return -1; /* integers (ids, targets) are always finite */
    /* vectorized block scan (src/core/vec.h), same index as an element-by-element scan */
    int64_t i = dt == TG_F32 ? tg__first_nonfinite_f32(p, n, minf_ok)
                             : tg__first_nonfinite_f64(p, n, minf_ok);
    if (i >= 0)
        *val = dt == TG_F32 ? (double)((const float *)p)[i] : ((const double *)p)[i];
    return i;
}

/* Index of the first element where a + b is not finite (a and b of n elements), or -1. */
int64_t tg__first_bad_sum(const void *a, const void *b, tg_dtype dt, int64_t n, double *val)
{
    if (dt == TG_F32) {
        const float *x = a, *y = b;
        for (int64_t i = 0; i < n; i++) {
            float v = x[i] + y[i];
            if (!isfinite(v)) {
                *val = (double)v;
                return i;
            }
        }
    } else {
        const double *x = a, *y = b;
        for (int64_t i = 0; i < n; i++) {
            double v = x[i] + y[i];
            if (!isfinite(v)) {
                *val = v;
                return i;
            }
        }
    }
    return -1;
}

static const char *leaf_kind(const tg_tensor *t)
{
    return t->kind == TG_KIND_PARAM ? "parameter" : t->kind == TG_KIND_INPUT ? "input" : "constant";
}

/* "input 'x' (2, 3)", "op 'softmax' output 'scores' (2, 4, 3, 3)" (with_shape), and for a
 * generated name also what it was computed from: "op 'scale' output 'scale3' (2), computed
 * from 'x'" (then returns true, so the caller can close the clause with a comma). */
static bool describe(const tg_tensor *t, bool with_shape, char *buf, size_t n)
{
    char sh[160] = "";
    if (with_shape) {
        sh[0] = ' ';
        tg__shape_str(t, sh + 1, sizeof sh - 1);
    }
    if (t->op == TG_OP_NONE) {
        snprintf(buf, n, "%s '%s'%s", leaf_kind(t), t->name, sh);
        return false;
    }
    int k = snprintf(buf, n, "op '%s' output '%s'%s", t->def->name, t->name, sh);
    if (!t->auto_name || k < 0 || (size_t)k >= n)
        return false;
    const char *sep = ", computed from ";
    bool any = false;
    for (int i = 0; i < t->n_src; i++) {
        if (!t->src[i])
            continue;
        int m = snprintf(buf + k, n - (size_t)k, "%s'%s'", sep, t->src[i]->name);
        if (m < 0 || (size_t)m >= n - (size_t)k)
            return any;
        k += m;
        sep = ", ";
        any = true;
    }
    return any;
}

static const char *value_str(double v)
{
    return isnan(v) ? "nan" : v > 0 ? "inf" : "-inf";
}

/* Fill g->report and record the run error. `by` is the node whose backward rule wrote the
 * gradient (NULL in forward; for the seed and the leaf accumulation, `what` says so). */
tg_status tg__anomaly(tg_graph *g, tg_anomaly_phase phase, const tg_tensor *t,
                         const tg_tensor *by, const char *what, int64_t idx, double val)
{
    tg_anomaly_report *r = &g->report;
    memset(r, 0, sizeof *r);
    r->phase = phase;
    const char *op = by ? by->def->name
                        : what ? what
                               : t->op == TG_OP_NONE ? leaf_kind(t) : t->def->name;
    snprintf(r->op, sizeof r->op, "%s", op);
    snprintf(r->tensor, sizeof r->tensor, "%s", t->name);
    if (by)
        snprintf(r->writer, sizeof r->writer, "%s", by->name);
    r->rank = t->rank;
    for (int i = 0; i < TG_MAX_RANK; i++)
        r->shape[i] = i < t->rank ? t->shape[i] : 1;
    r->index = idx;
    r->value = val;
    char d[600], db[600], msg[1600];
    const char *comma = describe(t, true, d, sizeof d) ? "," : "";
    const char *fn = phase == TG_ANOMALY_FORWARD ? "tg_graph_forward" : "tg_graph_backward";
    if (phase == TG_ANOMALY_FORWARD) {
        snprintf(msg, sizeof msg, "%s: anomaly in forward: %s%s has %s at flat index %lld", fn,
                 d, comma, value_str(val), (long long)idx);
    } else if (by) {
        describe(by, false, db, sizeof db);
        snprintf(msg, sizeof msg,
                 "%s: anomaly in backward: gradient of %s%s has %s at flat index %lld, written "
                 "by the backward of %s", fn, d, comma, value_str(val), (long long)idx, db);
    } else {
        snprintf(msg, sizeof msg, "%s: anomaly in backward: %s gradient of %s%s has %s at flat "
                 "index %lld", fn, what, d, comma, value_str(val), (long long)idx);
    }
    size_t ml = strlen(msg);
    if (ml >= sizeof r->message)
        ml = sizeof r->message - 1;
    memcpy(r->message, msg, ml);
    r->message[ml] = '\0';
    /* the report's message already names the function */
    tg__run_err(g->ctx, TG_ERR_NONFINITE, fn, "%s", msg + strlen(fn) + 2);
    return TG_ERR_NONFINITE;
}

tg_status tg_graph_anomaly(const tg_graph *g, tg_anomaly_report *report)
{
    if (!g || !report)
        return TG_ERR_ARG;
    *report = g->report;
    return TG_OK;
}

/* The context now uses more threads than the plan has workspace for: plan again for the new
 * count (workspace is sized per thread; fewer threads just leave slices unused, so switching
 * between 1 and N threads plans once, not at every switch). Forward rewrites every planned
 * value, so nothing is lost. */
static tg_status replan(tg_graph *g)
{
    tg_ctx *ctx = g->ctx;
    tg__unbind(g);
    tg__plan_free(g);
    g->nt = tg__threads(ctx);
    bool pending = tg__build_failed(ctx);
    bool planned = tg__plan(g, "tg_graph_forward");
    /* The new plan belongs to the graph, made before or after any mark: a rewind must not
     * release it unless it frees the graph (tg_graph_free, which frees the plan). */
    tg__plan_set_owner(g, TG__OWNER_CTX);
    if (!planned) {
        g->nt = 0; /* the next forward tries again */
        tg_status s = ctx->status;
        if (!pending) /* a failed plan is a run-time error of this call, not a build error */
            ctx->sticky = false;
        return s != TG_OK ? s : TG_ERR_NOMEM;
    }
    return TG_OK;
}

tg_status tg_graph_forward(tg_graph *g)
{
    if (!g)
        return TG_ERR_ARG;
    tg__begin(g->ctx);
    if (g->nt < tg__threads(g->ctx)) {
        g->forwarded = false;
        tg_status s = replan(g);
        if (s != TG_OK)
            return s;
    }
    g->forwarded = false;
    g->fwd_failed = true;
    if (g->anomaly)
        memset(&g->report, 0, sizeof g->report);
    tg__bind(g, false);
    for (int64_t i = 0; i < g->n; i++) {
        tg_tensor *t = g->nodes[i];
        if (t->op != TG_OP_NONE) {
            tg_status s = TG_OK;
            if (t->def->check) {
                tg__call c;
                tg__fill_call(g, i, false, &c);
                s = t->def->check(&c);
            }
            if (s == TG_OK)
                s = tg__run_kernel(g, i, false);
            if (s != TG_OK)
                return s;
        }
        if (g->anomaly && !t->base) {
            double v;
            int64_t k = tg__first_bad(g->val[i], t->dtype, t->numel, g->minf_ok[i], &v);
            if (k >= 0)
                return tg__anomaly(g, TG_ANOMALY_FORWARD, t, NULL, NULL, k, v);
        }
        if (g->poison)
            tg__poison_step(g, i);
    }
    g->forwarded = true;
    g->fwd_failed = false;
    g->backwarded = false;
    tg__mark_reused(g);
    return TG_OK;
}
