/*
 * graph.c - layer 3: static graphs. Topological order (iterative, any size), memory planning
 * (every gradient buffer is allocated when the graph is built), the forward executor and
 * reverse-mode autodiff. Ops are reached only through the registry table.
 *
 * Life of a graph: builders record ops -> tg_graph_new (order + plan) -> tg_graph_forward
 * (any number of times) -> tg_graph_backward (leaf grads accumulate) -> tg_graph_zero_grad.
 */
#include "registry.h"

#include <stdio.h>

struct tg_graph {
    tg_ctx *ctx;
    int64_t n;           /* nodes in topological order (leaves included) */
    tg_tensor **nodes;
    int64_t n_leaves;    /* leaves with requires_grad, in topological order */
    tg_tensor **leaves;
    void **fresh;        /* per leaf: this call's gradient, added to the leaf's at the end */
    int n_outputs;
    tg_tensor **outputs;
    bool forwarded;      /* the last forward run completed */
    bool fwd_failed;     /* the last forward run returned an error */
    unsigned char *needed; /* per node, scratch of backward: reached from a seeded output */
    /* shared-gradient mode (tg_graph_opts.share_gradients): intermediate gradients live in one
     * arena, placed by liveness; pointers are swapped in for each backward call */
    bool share;
    char *arena;
    size_t arena_bytes;
    int64_t *offset;     /* per node: byte offset in the arena, -1 for none */
    int64_t *live_from;  /* per node: index of the node whose backward first writes it (n for
                            outputs, -1 for never) */
    void **saved_grad;   /* per node: the tensor's own grad pointer, restored after backward */
    /* NaN/Inf tripwire (tg_graph_opts.detect_anomaly) */
    bool anomaly;
    unsigned char *minf_ok; /* per node: -inf is expected (attention masks and masked scores) */
    tg_anomaly_report report; /* what the last forward or backward run found */
};

/* Grow a pointer array owned by ctx (doubling). Returns false on NOMEM. */
static bool grow(tg_ctx *ctx, void **arr, int64_t *cap, size_t elem)
{
    int64_t nc = *cap ? *cap * 2 : 64;
    void *n = tg__alloc(ctx, (size_t)nc * elem, "tg_graph_new");
    if (!n)
        return false;
    if (*arr) {
        memcpy(n, *arr, (size_t)*cap * elem);
        tg__free(ctx, *arr);
    }
    *arr = n;
    *cap = nc;
    return true;
}

typedef struct {
    tg_tensor *t;
    int next_src;
} frame;


/* ---- the gradient planner (shared mode) -----------------------------------------------------
 * Backward visits nodes in reverse topological order. The gradient of an intermediate node t
 * is written first by the backward of its last consumer (the highest-index op that reads t and
 * requires grad) and read last by t's own backward, so it is live over [t, last_consumer] and
 * two nodes whose intervals do not overlap can share memory. Outputs are seeded before the
 * loop, so they are live from the start. Placement is first-fit over a list of free segments
 * (64-byte aligned), simulated once here; every backward call then only swaps pointers. */
typedef struct {
    int64_t off, size;
} segment;

typedef struct {
    segment *free;
    int64_t n_free, high;
} arena_plan;

static int64_t plan_alloc(arena_plan *p, int64_t size)
{
    for (int64_t i = 0; i < p->n_free; i++) {
        if (p->free[i].size >= size) {
            int64_t off = p->free[i].off;
            p->free[i].off += size;
            p->free[i].size -= size;
            if (p->free[i].size == 0) {
                memmove(&p->free[i], &p->free[i + 1], sizeof(segment) * (size_t)(p->n_free - i - 1));
                p->n_free--;
            }
            return off;
        }
    }
    int64_t off = p->high; /* grow at the end (merging a free tail segment first) */
    if (p->n_free > 0 && p->free[p->n_free - 1].off + p->free[p->n_free - 1].size == p->high) {
        off = p->free[p->n_free - 1].off;
        p->n_free--;
    }
    p->high = off + size;
    return off;
}

static void plan_free(arena_plan *p, int64_t off, int64_t size)
{
    int64_t i = 0; /* keep segments sorted by offset; coalesce with neighbours */
    while (i < p->n_free && p->free[i].off < off)
        i++;
    memmove(&p->free[i + 1], &p->free[i], sizeof(segment) * (size_t)(p->n_free - i));
    p->free[i] = (segment){off, size};
    p->n_free++;
    if (i + 1 < p->n_free && p->free[i].off + p->free[i].size == p->free[i + 1].off) {
        p->free[i].size += p->free[i + 1].size;
        memmove(&p->free[i + 1], &p->free[i + 2], sizeof(segment) * (size_t)(p->n_free - i - 2));
        p->n_free--;
    }
    if (i > 0 && p->free[i - 1].off + p->free[i - 1].size == p->free[i].off) {
        p->free[i - 1].size += p->free[i].size;
        memmove(&p->free[i], &p->free[i + 1], sizeof(segment) * (size_t)(p->n_free - i - 1));
        p->n_free--;
    }
}

static bool plan_shared(tg_graph *g, const char *fn)
{
    tg_ctx *ctx = g->ctx;
    int64_t n = g->n;
    g->offset = tg__alloc(ctx, sizeof(int64_t) * (size_t)(n + 1), fn);
    g->live_from = tg__alloc(ctx, sizeof(int64_t) * (size_t)(n + 1), fn);
    g->saved_grad = tg__alloc(ctx, sizeof(void *) * (size_t)(n + 1), fn);
    arena_plan p = {tg__alloc(ctx, sizeof(segment) * (size_t)(n + 2), fn), 0, 0};
    if (!g->offset || !g->live_from || !g->saved_grad || !p.free) {
        tg__free(ctx, p.free);
        return false;
    }
    for (int64_t i = 0; i < n; i++) {
        g->offset[i] = -1;
        g->live_from[i] = -1;
        g->nodes[i]->topo = i;
    }
    for (int64_t j = 0; j < n; j++) { /* last consumer of each source */
        tg_tensor *t = g->nodes[j];
        if (t->op == TG_OP_NONE || !t->requires_grad)
            continue;
        for (int k = 0; k < t->n_src; k++)
            if (t->src[k] && t->src[k]->requires_grad && t->src[k]->op != TG_OP_NONE)
                g->live_from[t->src[k]->topo] = j;
    }
    for (int o = 0; o < g->n_outputs; o++)
        if (g->outputs[o]->requires_grad && g->outputs[o]->op != TG_OP_NONE)
            g->live_from[g->outputs[o]->topo] = n;
#define GRAD_BYTES(t) (((int64_t)((size_t)(t)->numel * tg_dtype_size((t)->dtype)) + 63) / 64 * 64)
    for (int64_t i = 0; i < n; i++) /* outputs: live before the first backward rule runs */
        if (g->live_from[i] == n)
            g->offset[i] = plan_alloc(&p, GRAD_BYTES(g->nodes[i]));
    for (int64_t j = n - 1; j >= 0; j--) {
        tg_tensor *t = g->nodes[j];
        if (t->op != TG_OP_NONE && t->requires_grad) {
            for (int k = 0; k < t->n_src; k++) { /* j's rule is the first to write these */
                tg_tensor *s = t->src[k];
                if (s && g->live_from[s->topo] == j && g->offset[s->topo] < 0)
                    g->offset[s->topo] = plan_alloc(&p, GRAD_BYTES(s));
            }
        }
        if (g->offset[j] >= 0) /* after j's own rule its gradient is dead */
            plan_free(&p, g->offset[j], GRAD_BYTES(t));
    }
#undef GRAD_BYTES
    tg__free(ctx, p.free);
    g->arena_bytes = (size_t)p.high;
    g->arena = tg__alloc(ctx, g->arena_bytes ? g->arena_bytes : 1, fn);
    return g->arena != NULL;
}

/* Ops that only move values (a -inf stays a -inf). */
static bool is_layout(int op)
{
    return op == TG_OP_RESHAPE || op == TG_OP_TRANSPOSE || op == TG_OP_PERMUTE ||
           op == TG_OP_NARROW;
}

tg_graph *tg_graph_new_opts(tg_ctx *ctx, tg_tensor *const *outputs, int n_outputs,
                            const tg_graph_opts *opts)
{
    static const char *fn = "tg_graph_new";
    if (!ctx)
        return NULL;
    tg__begin(ctx);
    if (tg__build_failed(ctx))
        return NULL; /* a builder failed: keep its error, never build over it */
    if (n_outputs < 1 || !outputs)
        return tg__err(ctx, TG_ERR_ARG, fn, "need at least one output (got %d)", n_outputs);
    for (int i = 0; i < n_outputs; i++) {
        if (!outputs[i])
            return tg__err(ctx, TG_ERR_ARG, fn, "output %d is NULL", i);
        if (outputs[i]->ctx != ctx)
            return tg__err(ctx, TG_ERR_ARG, fn, "output %d belongs to another context", i);
    }
    tg_graph *g = tg__alloc(ctx, sizeof *g, fn);
    if (!g)
        return NULL;
    g->ctx = ctx;
    g->share = opts && opts->share_gradients;
    g->anomaly = opts && opts->detect_anomaly;
    frame *stack = NULL;
    g->outputs = tg__alloc(ctx, sizeof(tg_tensor *) * (size_t)n_outputs, fn);
    if (!g->outputs)
        goto fail;
    memcpy(g->outputs, outputs, sizeof(tg_tensor *) * (size_t)n_outputs);
    g->n_outputs = n_outputs;

    /* Iterative post-order DFS: a node is emitted after all its sources. Identity is the
     * tensor object; the visit stamp makes each node appear once. */
    uint64_t epoch = ++ctx->mark_epoch;
    int64_t sp = 0, scap = 0, ncap = 0;
    for (int o = 0; o < n_outputs; o++) {
        if (outputs[o]->mark == epoch)
            continue;
        if (sp == scap && !grow(ctx, (void **)&stack, &scap, sizeof *stack))
            goto fail;
        outputs[o]->mark = epoch;
        stack[sp++] = (frame){outputs[o], 0};
        while (sp > 0) {
            frame *f = &stack[sp - 1];
            if (f->next_src < f->t->n_src) {
                tg_tensor *s = f->t->src[f->next_src++];
                if (s && s->mark != epoch) {
                    s->mark = epoch;
                    if (sp == scap && !grow(ctx, (void **)&stack, &scap, sizeof *stack))
                        goto fail;
                    stack[sp++] = (frame){s, 0};
                }
                continue;
            }
            if (g->n == ncap && !grow(ctx, (void **)&g->nodes, &ncap, sizeof(tg_tensor *)))
                goto fail;
            f->t->topo = g->n;
            g->nodes[g->n++] = f->t;
            sp--;
        }
    }
    tg__free(ctx, stack);
    stack = NULL;

    /* Plan memory: a gradient buffer for every tensor on a path to a differentiable leaf. */
    for (int64_t i = 0; i < g->n; i++) {
        tg_tensor *t = g->nodes[i];
        if (t->requires_grad && t->op == TG_OP_NONE)
            g->n_leaves++;
        if (t->requires_grad && t->op != TG_OP_NONE && !t->def->backward) {
            tg__err(ctx, TG_ERR_NOGRAD, fn, "op '%s' ('%s') has no backward rule",
                    t->def->name, t->name);
            goto fail;
        }
        bool own = !g->share || t->op == TG_OP_NONE; /* shared mode: op grads in the arena */
        if (t->requires_grad && own && !t->grad) {
            t->grad = tg__alloc(ctx, (size_t)t->numel * tg_dtype_size(t->dtype), fn);
            if (!t->grad)
                goto fail;
        }
    }
    if (g->share && !plan_shared(g, fn))
        goto fail;
    g->needed = tg__alloc(ctx, (size_t)g->n, fn);
    if (!g->needed)
        goto fail;
    if (g->anomaly) {
        /* -inf is the point of an attention mask: allow it in add_mask's output and mask
         * operand, and through the layout ops (which only move values) that shaped that
         * operand (reverse order: allowed once the consumer is) or that rearrange an allowed
         * tensor (forward order). */
        g->minf_ok = tg__alloc(ctx, (size_t)g->n, fn);
        if (!g->minf_ok)
            goto fail;
        for (int64_t i = g->n - 1; i >= 0; i--) {
            tg_tensor *t = g->nodes[i];
            if (t->op == TG_OP_ADD_MASK) {
                g->minf_ok[i] = 1;
                if (t->src[1])
                    g->minf_ok[t->src[1]->topo] = 1;
            } else if (is_layout(t->op) && g->minf_ok[i]) {
                g->minf_ok[t->src[0]->topo] = 1;
            }
        }
        for (int64_t i = 0; i < g->n; i++) {
            tg_tensor *t = g->nodes[i];
            if (is_layout(t->op) && g->minf_ok[t->src[0]->topo])
                g->minf_ok[i] = 1;
        }
    }
    if (g->n_leaves) {
        g->leaves = tg__alloc(ctx, sizeof(tg_tensor *) * (size_t)g->n_leaves, fn);
        if (!g->leaves)
            goto fail;
        g->fresh = tg__alloc(ctx, sizeof(void *) * (size_t)g->n_leaves, fn);
        if (!g->fresh)
            goto fail;
        int64_t k = 0;
        for (int64_t i = 0; i < g->n; i++) {
            tg_tensor *t = g->nodes[i];
            if (!(t->requires_grad && t->op == TG_OP_NONE))
                continue;
            g->fresh[k] = tg__alloc(ctx, (size_t)t->numel * tg_dtype_size(t->dtype), fn);
            if (!g->fresh[k])
                goto fail;
            g->leaves[k++] = t;
        }
    }
    return g;

fail: /* the error is recorded; give back the graph's own arrays (tensor buffers stay) */
    tg__free(ctx, stack);
    tg_graph_free(g);
    return NULL;
}

tg_graph *tg_graph_new(tg_ctx *ctx, tg_tensor *const *outputs, int n_outputs)
{
    return tg_graph_new_opts(ctx, outputs, n_outputs, NULL);
}

size_t tg_graph_grad_bytes(const tg_graph *g)
{
    if (!g)
        return 0;
    if (g->share)
        return g->arena_bytes;
    size_t b = 0;
    for (int64_t i = 0; i < g->n; i++)
        if (g->nodes[i]->op != TG_OP_NONE && g->nodes[i]->requires_grad)
            b += (size_t)g->nodes[i]->numel * tg_dtype_size(g->nodes[i]->dtype);
    return b;
}

void tg_graph_free(tg_graph *g)
{
    if (!g)
        return;
    tg_ctx *ctx = g->ctx;
    tg__free(ctx, g->nodes);
    for (int64_t l = 0; g->fresh && l < g->n_leaves; l++)
        tg__free(ctx, g->fresh[l]);
    tg__free(ctx, g->fresh);
    tg__free(ctx, g->leaves);
    tg__free(ctx, g->outputs);
    tg__free(ctx, g->needed);
    tg__free(ctx, g->offset);
    tg__free(ctx, g->live_from);
    tg__free(ctx, g->saved_grad);
    tg__free(ctx, g->arena);
    tg__free(ctx, g->minf_ok);
    tg__free(ctx, g);
}

int64_t tg_graph_size(const tg_graph *g) { return g ? g->n : 0; }

tg_tensor *tg_graph_node(const tg_graph *g, int64_t i)
{
    return (g && i >= 0 && i < g->n) ? g->nodes[i] : NULL;
}

int64_t tg_graph_n_grad_leaves(const tg_graph *g) { return g ? g->n_leaves : 0; }

tg_tensor *tg_graph_grad_leaf(const tg_graph *g, int64_t i)
{
    return (g && i >= 0 && i < g->n_leaves) ? g->leaves[i] : NULL;
}

/* ---- the NaN/Inf tripwire (tg_graph_opts.detect_anomaly) --------------------------------------
 * Forward checks every node's output (leaves included) in topological order as it is computed;
 * backward checks the upstream gradients it seeds, then after each backward rule the gradients
 * that rule wrote (its sources'), then the leaves' accumulated gradients. The first non-finite
 * value stops the call with TG_ERR_NONFINITE and is kept in g->report. -inf is accepted where
 * it is the point (minf_ok: attention masks and masked scores), NaN and +inf never are. */

/* Index of the first non-finite element of p (n elements of dt), or -1. */
static int64_t first_bad(const void *p, tg_dtype dt, int64_t n, bool minf_ok, double *val)
{
    if (dt == TG_F32) {
        const float *x = p;
        for (int64_t i = 0; i < n; i++)
            if (!isfinite(x[i]) && !(minf_ok && x[i] == -INFINITY)) {
                *val = (double)x[i];
                return i;
            }
    } else {
        const double *x = p;
        for (int64_t i = 0; i < n; i++)
            if (!isfinite(x[i]) && !(minf_ok && x[i] == -INFINITY)) {
                *val = x[i];
                return i;
            }
    }
    return -1;
}

/* Index of the first element where a + b is not finite (a and b of n elements), or -1. */
static int64_t first_bad_sum(const void *a, const void *b, tg_dtype dt, int64_t n, double *val)
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
static tg_status anomaly(tg_graph *g, tg_anomaly_phase phase, const tg_tensor *t,
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

tg_status tg_graph_forward(tg_graph *g)
{
    if (!g)
        return TG_ERR_ARG;
    tg__begin(g->ctx);
    g->forwarded = false;
    g->fwd_failed = true;
    if (g->anomaly)
        memset(&g->report, 0, sizeof g->report);
    for (int64_t i = 0; i < g->n; i++) {
        tg_tensor *t = g->nodes[i];
        if (t->op != TG_OP_NONE) {
            tg_status s = t->def->check(t);
            if (s != TG_OK)
                return s;
            t->def->forward(t);
            s = tg__kernel_take(g->ctx); /* a custom op's callback may fail */
            if (s != TG_OK)
                return s;
        }
        if (g->anomaly) {
            double v;
            int64_t k = first_bad(t->data, t->dtype, t->numel, g->minf_ok[i], &v);
            if (k >= 0)
                return anomaly(g, TG_ANOMALY_FORWARD, t, NULL, NULL, k, v);
        }
    }
    g->forwarded = true;
    g->fwd_failed = false;
    return TG_OK;
}

/* Is t one of g's nodes? (topo is scratch shared by graphs, so confirm identity.) */
static bool in_graph(const tg_graph *g, const tg_tensor *t)
{
    return t->topo >= 0 && t->topo < g->n && g->nodes[t->topo] == t;
}

static void refresh_topo(tg_graph *g)
{
    for (int64_t i = 0; i < g->n; i++)
        g->nodes[i]->topo = i;
}

tg_status tg_graph_backward_multi(tg_graph *g, int n, tg_tensor *const *ys,
                                  const tg_tensor *const *dys)
{
    static const char *fn = "tg_graph_backward";
    if (!g)
        return TG_ERR_ARG;
    tg_ctx *ctx = g->ctx;
    tg__begin(ctx);
    if (n < 1 || !ys) {
        tg__run_err(ctx, TG_ERR_ARG, fn, "need at least one output to start from (got %d%s)",
                    n, ys ? "" : ", outputs NULL");
        return TG_ERR_ARG;
    }
    if (!g->forwarded) {
        tg__run_err(ctx, TG_ERR_STATE, fn,
                    g->fwd_failed ? "the last tg_graph_forward failed; run it successfully "
                                    "before backward"
                                  : "run tg_graph_forward before backward");
        return TG_ERR_STATE;
    }
    refresh_topo(g);
    for (int k = 0; k < n; k++) {
        tg_tensor *y = ys[k];
        const tg_tensor *dy = dys ? dys[k] : NULL;
        if (!y || !in_graph(g, y)) {
            tg__run_err(ctx, TG_ERR_ARG, fn, "output %d is not a tensor of this graph", k);
            return TG_ERR_ARG;
        }
        if (!y->requires_grad || (!g->share && !y->grad)) {
            tg__run_err(ctx, TG_ERR_NOGRAD, fn,
                    "'%s' does not depend on any parameter or input that requires grad", y->name);
            return TG_ERR_NOGRAD;
        }
        if (g->share && y->op != TG_OP_NONE && g->live_from[y->topo] != g->n) {
            tg__run_err(ctx, TG_ERR_ARG, fn,
                    "'%s' is not an output: a graph with shared gradients starts backward only "
                    "from the outputs it was built for", y->name);
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
    }
    /* Every gradient of this call starts from zero. Leaves get this call's gradient in a
     * fresh buffer that is added to their accumulated one at the end, so accumulation across
     * calls is exactly grad += new_grad, as in PyTorch (two identical calls give exactly 2x). */
    if (g->anomaly)
        memset(&g->report, 0, sizeof g->report);
    if (g->share) { /* swap in the planned arena slices; zero each when it becomes live */
        for (int64_t i = 0; i < g->n; i++) {
            tg_tensor *t = g->nodes[i];
            if (t->op == TG_OP_NONE)
                continue;
            g->saved_grad[i] = t->grad;
            t->grad = g->offset[i] >= 0 ? g->arena + g->offset[i] : NULL;
            if (g->live_from[i] == g->n)
                memset(t->grad, 0, (size_t)t->numel * tg_dtype_size(t->dtype));
        }
    } else {
        for (int64_t i = 0; i < g->n; i++) {
            tg_tensor *t = g->nodes[i];
            if (t->op != TG_OP_NONE && t->grad)
                memset(t->grad, 0, (size_t)t->numel * tg_dtype_size(t->dtype));
        }
    }
    for (int64_t l = 0; l < g->n_leaves; l++) {
        tg_tensor *t = g->leaves[l];
        void *acc = t->grad;
        t->grad = g->fresh[l];
        g->fresh[l] = acc;
        memset(t->grad, 0, (size_t)t->numel * tg_dtype_size(t->dtype));
    }
    for (int k = 0; k < n; k++) {
        tg_tensor *y = ys[k];
        const tg_tensor *dy = dys ? dys[k] : NULL;
        if (y->dtype == TG_F32) {
            float *gp = y->grad;
            for (int64_t i = 0; i < y->numel; i++)
                gp[i] += dy ? ((const float *)dy->data)[i] : 1.0f;
        } else {
            double *gp = y->grad;
            for (int64_t i = 0; i < y->numel; i++)
                gp[i] += dy ? ((const double *)dy->data)[i] : 1.0;
        }
    }
    tg_status st = TG_OK;
    for (int k = 0; g->anomaly && st == TG_OK && k < n; k++) { /* the seeds */
        double v;
        int64_t i = first_bad(ys[k]->grad, ys[k]->dtype, ys[k]->numel, false, &v);
        if (i >= 0)
            st = anomaly(g, TG_ANOMALY_BACKWARD, ys[k], NULL, "upstream", i, v);
    }
    /* Only nodes that a seeded output depends on can receive a non-zero gradient: mark them
     * (reverse order: a node is needed if a needed op reads it) and run just their rules. */
    if (g->n > 0)
        memset(g->needed, 0, (size_t)g->n);
    for (int k = 0; k < n; k++)
        g->needed[ys[k]->topo] = 1;
    for (int64_t i = g->n - 1; i >= 0 && st == TG_OK; i--) {
        tg_tensor *t = g->nodes[i];
        if (g->share && t->op != TG_OP_NONE && t->requires_grad) {
            for (int k = 0; k < t->n_src; k++) { /* sources whose gradient starts here */
                tg_tensor *s = t->src[k];
                if (s && s->op != TG_OP_NONE && g->live_from[s->topo] == i &&
                    (k == 0 || t->src[k - 1] != s))
                    memset(s->grad, 0, (size_t)s->numel * tg_dtype_size(s->dtype));
            }
        }
        if (!g->needed[i] || t->op == TG_OP_NONE || !t->requires_grad)
            continue;
        for (int k = 0; k < t->n_src; k++)
            if (t->src[k] && t->src[k]->requires_grad)
                g->needed[t->src[k]->topo] = 1;
        t->def->backward(t);
        st = tg__kernel_take(ctx); /* a custom op's callback may fail: stop, drop this call */
        for (int k = 0; g->anomaly && st == TG_OK && k < t->n_src; k++) {
            tg_tensor *s = t->src[k]; /* each gradient this rule wrote, once */
            bool dup = false;
            for (int j = 0; j < k; j++)
                dup = dup || t->src[j] == s;
            if (!s || !s->grad || dup)
                continue;
            double v;
            int64_t e = first_bad(s->grad, s->dtype, s->numel, false, &v);
            if (e >= 0)
                st = anomaly(g, TG_ANOMALY_BACKWARD, s, t, NULL, e, v);
        }
    }
    if (g->share) /* other graphs over these tensors keep their own buffers */
        for (int64_t i = 0; i < g->n; i++)
            if (g->nodes[i]->op != TG_OP_NONE)
                g->nodes[i]->grad = g->saved_grad[i];
    for (int64_t l = 0; g->anomaly && st == TG_OK && l < g->n_leaves; l++) {
        tg_tensor *t = g->leaves[l]; /* would the accumulation overflow? (checked first, so
                                        a failed call changes no accumulated gradient) */
        double v;
        int64_t e = first_bad_sum(g->fresh[l], t->grad, t->dtype, t->numel, &v);
        if (e >= 0)
            st = anomaly(g, TG_ANOMALY_BACKWARD, t, NULL, "accumulated", e, v);
    }
    int nt = tg__threads(ctx);
    for (int64_t l = 0; l < g->n_leaves; l++) {
        tg_tensor *t = g->leaves[l];
        void *fresh = t->grad;
        t->grad = g->fresh[l];
        g->fresh[l] = fresh;
        if (st != TG_OK)
            continue; /* an anomaly: this call's gradient is dropped */
        int64_t cnt = t->numel;
        /* Race-free: element i is owned by one iteration. */
        if (t->dtype == TG_F32) {
            float *a = t->grad;
            const float *f = fresh;
            TG_OMP_FOR(nt, cnt > TG_PAR_MIN)
            for (int64_t i = 0; i < cnt; i++)
                a[i] += f[i];
        } else {
            double *a = t->grad;
            const double *f = fresh;
            TG_OMP_FOR(nt, cnt > TG_PAR_MIN)
            for (int64_t i = 0; i < cnt; i++)
                a[i] += f[i];
        }
    }
    return st;
}

tg_status tg_graph_backward(tg_graph *g, tg_tensor *y, const tg_tensor *dy)
{
    return tg_graph_backward_multi(g, 1, &y, &dy);
}

void tg_graph_zero_grad(tg_graph *g)
{
    if (!g)
        return;
    for (int64_t i = 0; i < g->n_leaves; i++)
        tg_zero_grad(g->leaves[i]);
}
