/*
 * plan.c - layer 3: the memory planner. One arena per graph holds every buffer that is not a
 * leaf's own: op outputs, values saved for backward, gradients of non-leaves, this call's
 * gradients of leaves, kernel workspace. Lifetimes are computed over the joint forward +
 * backward schedule (graph_internal.h) from what each op declares in ops/ops.def:
 *
 *   output of op node i   [i, last read]: forward consumers (reads through a view count as
 *                         reads of its base), backward rules that read it (TG_OPF_SRCk of the
 *                         consumer, TG_OPF_OUT of i itself); unless one_backward, anything a
 *                         backward rule reads outlives backward (never freed or poisoned), so
 *                         backward can run again on the same forward
 *   saved of i            [i, bwd(i)]  ([i, i] without gradients; never ending unless
 *                         one_backward); at least until the last forward node that reads
 *                         them (TG_OPF_SRC_SAVED: grad_mask)
 *   gradient of op node i [bwd(last consumer that requires grad), bwd(i)]
 *   this call's gradient  [bwd(last consumer), end]  (leaves; added to the leaf's own after)
 *   workspace             its one step
 *   outputs, tg_keep      never freed (data; gradient from the start of backward)
 *
 * Placement sweeps the steps: at each step the buffers starting there are placed first-fit in
 * a list of free segments (sorted by offset, coalesced), then the buffers ending there are
 * released. An op declared TG_OPF_INPLACE writes its output over src[0] when src[0]'s output
 * dies at this very step, has the same size and is not read by another operand of the op.
 * tg_graph_opts.no_reuse gives every buffer its own slot (the reference for tests).
 *
 * The arena is the graph's own block, or, with tg_graph_opts.arena, a block shared with other
 * graphs of the context (arena.c), grown here to this plan's need if it is larger.
 */
#include "graph_internal.h"

#include <stdlib.h>

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

/* Greedy by size (Pisarchyk & Lee 2020, "Efficient memory management for deep neural net
 * inference", sec. 4.3; TFLite's arena planner): buffers in decreasing size, each at the
 * lowest offset in the smallest gap between already placed buffers whose lifetimes overlap its
 * own. An in-place chain is one buffer (its members' union lifetime). O(n^2) in buffers, so
 * graphs with more than TG__GREEDY_MAX buffers use the step sweep (first-fit) instead. */
#define TG__GREEDY_MAX 8192

typedef struct {
    int64_t size, start, end, idx;
} greedy_item;

static int by_size_desc(const void *a, const void *b)
{
    const greedy_item *x = a, *y = b;
    if (x->size != y->size)
        return x->size > y->size ? -1 : 1;
    if (x->start != y->start)
        return x->start < y->start ? -1 : 1;
    return x->idx < y->idx ? -1 : x->idx > y->idx;
}

static bool place_greedy(tg_graph *g, int64_t *high, const char *fn)
{
    tg_ctx *ctx = g->ctx;
    int64_t nb = g->n_bufs;
    int64_t *root = tg__alloc(ctx, sizeof(int64_t) * (size_t)(nb + 1), fn);
    greedy_item *it = tg__alloc(ctx, sizeof(greedy_item) * (size_t)(nb + 1), fn);
    int64_t *placed = tg__alloc(ctx, sizeof(int64_t) * (size_t)(nb + 1), fn); /* by offset */
    int64_t *off = tg__alloc(ctx, sizeof(int64_t) * (size_t)(nb + 1), fn);
    bool ok = root && it && placed && off;
    if (ok) {
        for (int64_t b = 0; b < nb; b++) { /* an alias always follows its source */
            root[b] = g->bufs[b].alias >= 0 ? root[g->bufs[b].alias] : b;
            it[b] = (greedy_item){g->bufs[b].size, g->bufs[b].start, g->bufs[b].end, b};
        }
        for (int64_t b = 0; b < nb; b++) {
            greedy_item *r = &it[root[b]];
            if (root[b] != b && g->bufs[b].end > r->end)
                r->end = g->bufs[b].end;
        }
        int64_t nr = 0;
        for (int64_t b = 0; b < nb; b++)
            if (root[b] == b)
                it[nr++] = it[b];
        qsort(it, (size_t)nr, sizeof *it, by_size_desc);
        int64_t np = 0;
        *high = 0;
        for (int64_t k = 0; k < nr; k++) {
            const greedy_item *r = &it[k];
            int64_t prev = 0, best = -1, gap_best = INT64_MAX;
            for (int64_t q = 0; q < np; q++) {
                const greedy_item *p = &it[placed[q]];
                if (p->end < r->start || r->end < p->start)
                    continue; /* never live together */
                int64_t gap = off[placed[q]] - prev;
                if (gap >= r->size && gap < gap_best) {
                    best = prev;
                    gap_best = gap;
                }
                if (off[placed[q]] + p->size > prev)
                    prev = off[placed[q]] + p->size;
            }
            if (best < 0)
                best = prev;
            off[k] = best;
            int64_t q = np++; /* insert k keeping placed[] sorted by offset */
            while (q > 0 && off[placed[q - 1]] > best) {
                placed[q] = placed[q - 1];
                q--;
            }
            placed[q] = k;
            if (best + r->size > *high)
                *high = best + r->size;
        }
        for (int64_t k = 0; k < nr; k++)
            g->bufs[it[k].idx].off = off[k];
        for (int64_t b = 0; b < nb; b++)
            g->bufs[b].off = g->bufs[root[b]].off;
    }
    tg__free(ctx, root);
    tg__free(ctx, it);
    tg__free(ctx, placed);
    tg__free(ctx, off);
    return ok;
}

/* Largest arena (and so largest buffer, and largest sum of a graph's buffers): offsets and
 * sums of sizes up to it never wrap in int64_t, and it fits in size_t with the allocator's
 * overhead. Sizes come from shapes, from ops and from user callbacks (a custom op's
 * workspace), so each one is checked before it is used. */
static uint64_t arena_max(void)
{
    uint64_t m = (uint64_t)INT64_MAX;
    if ((uint64_t)SIZE_MAX / 2 < m)
        m = (uint64_t)SIZE_MAX / 2;
    return m & ~(uint64_t)63;
}

static const char *buf_what(int kind)
{
    switch (kind) {
    case TG__BUF_OUT: return "output";
    case TG__BUF_SAVED: return "values saved for backward";
    case TG__BUF_GRAD: return "gradient";
    case TG__BUF_FRESH: return "gradient";
    case TG__BUF_WSF: return "forward workspace";
    default: return "backward workspace";
    }
}

/* Add a buffer of `bytes` (rounded up to 64) to the plan, or record why it cannot be (a size,
 * or the sum of the graph's sizes in *total, beyond arena_max(): TG_ERR_NOMEM naming the node
 * and the buffer) and return -1. */
static int64_t add_buf(tg_graph *g, uint64_t *total, const char *fn, int kind, int64_t node,
                       uint64_t bytes, int64_t start, int64_t end)
{
    const tg_tensor *t = g->nodes[node];
    uint64_t max = arena_max();
    bool user = t->def && (t->def->flags & TG_OPF_USER);
    const char *custom = user ? "custom op" : "op";
    bool ws = kind == TG__BUF_WSF || kind == TG__BUF_WSB;
    if (bytes > max) {
        tg__err(g->ctx, TG_ERR_NOMEM, fn, "%s '%s' ('%s'): %s of %llu bytes is more than an "
                "arena can hold (at most %llu bytes)%s", custom, tg_tensor_op_name(t), t->name,
                buf_what(kind), (unsigned long long)bytes, (unsigned long long)max,
                user && ws ? "; its workspace callback returned this size" : "");
        return -1;
    }
    uint64_t size = (bytes + 63) / 64 * 64;
    if (size > max - *total) {
        tg__err(g->ctx, TG_ERR_NOMEM, fn, "%s '%s' ('%s'): %s of %llu bytes brings the graph's "
                "buffers to more than an arena can hold (%llu bytes)", custom,
                tg_tensor_op_name(t), t->name, buf_what(kind), (unsigned long long)bytes,
                (unsigned long long)max);
        return -1;
    }
    *total += size;
    tg__buf *b = &g->bufs[g->n_bufs];
    b->kind = kind;
    b->node = node;
    b->size = (int64_t)size;
    b->start = start;
    b->end = end;
    b->off = -1;
    b->alias = -1;
    return g->n_bufs++;
}

/* The workspace a kernel call of t asks for (its tg_ws_fn, with the call's settings). */
static size_t ws_bytes(const tg_graph *g, const tg_tensor *t, bool backward)
{
    if (!t->def || !t->def->workspace)
        return 0;
    tg__call c;
    memset(&c, 0, sizeof c);
    tg__call_describe(&c, t);
    c.ctx = g->ctx;
    c.n_src = t->n_src;
    c.nt = g->nt;
    c.precision = g->precision;
    c.backward = backward;
    c.dy_scratch = backward && !g->persist[tg__node_at(g, t)];
    return t->def->workspace(&c);
}

/* Bytes of t's data (numel <= TG_MAX_NUMEL, so this never wraps). */
static uint64_t data_bytes(const tg_tensor *t)
{
    return (uint64_t)t->numel * (uint64_t)tg_dtype_size(t->dtype);
}

/* The tensor whose buffer t's data lives in (t itself unless t is a view). */
static const tg_tensor *owner_of(const tg_tensor *t) { return t->base ? t->base : t; }
/* The node index of node i's memory owner (its base for a view). */
static int64_t owner_at(const tg_graph *g, int64_t i)
{
    return g->base_at[i] >= 0 ? g->base_at[i] : i;
}

/* The blocks a plan allocates (the plan's arrays and the arena), for freeing or re-owning
 * them together; *n gets their count. */
static void **plan_blocks(tg_graph *g, void **out, size_t *n)
{
    void *b[] = {g->bufs,      g->out_buf,  g->saved_buf, g->grad_buf, g->wsf_buf, g->wsb_buf,
                 g->fresh_buf, g->leaf_buf, g->end_ptr,   g->end_list,
                 g->shared ? NULL : g->arena}; /* a shared arena's block is the arena's */
    memcpy(out, b, sizeof b);
    *n = sizeof b / sizeof b[0];
    return out;
}

void tg__plan_free(tg_graph *g)
{
    void *b[16];
    size_t n;
    plan_blocks(g, b, &n);
    for (size_t i = 0; i < n; i++)
        tg__free(g->ctx, b[i]);
    g->bufs = NULL;
    g->out_buf = g->saved_buf = g->grad_buf = g->wsf_buf = g->wsb_buf = g->fresh_buf = NULL;
    g->leaf_buf = g->end_ptr = g->end_list = NULL;
    g->arena = NULL;
    g->arena_bytes = 0;
    g->n_bufs = 0;
}

void tg__plan_set_owner(tg_graph *g, uint64_t owner)
{
    void *b[16];
    size_t n;
    plan_blocks(g, b, &n);
    for (size_t i = 0; i < n; i++)
        tg__set_owner(b[i], owner);
}

/* Per-node scratch of the lifetime stages (freed before placement). */
typedef struct {
    int64_t *end;    /* last read of each node's output */
    int64_t *gstart; /* first write of each node's gradient */
    int64_t *lastc;  /* that first writer (last grad-consumer) */
    int64_t *prevc;  /* the grad-consumer before it, or -1 */
    int64_t *ncons;  /* grad-consumer edges */
    int64_t *shared; /* per gradient buffer node: the src[1] sharing it (add), or -1 */
    int64_t *sread;  /* last forward step reading the node's saved values (TG_OPF_SRC_SAVED) */
} plan_scratch;

static void scratch_free(tg_ctx *ctx, plan_scratch *sc)
{
    tg__free(ctx, sc->end);
    tg__free(ctx, sc->gstart);
    tg__free(ctx, sc->lastc);
    tg__free(ctx, sc->prevc);
    tg__free(ctx, sc->ncons);
    tg__free(ctx, sc->shared);
    tg__free(ctx, sc->sread);
}

/* The graph's per-node buffer tables and the scratch, initialised (-1: no buffer). */
static bool plan_tables(tg_graph *g, plan_scratch *sc, const char *fn)
{
    tg_ctx *ctx = g->ctx;
    int64_t n = g->n;
    size_t pn = sizeof(int64_t) * (size_t)(n + 1);
    g->out_buf = tg__alloc(ctx, pn, fn);
    g->saved_buf = tg__alloc(ctx, pn, fn);
    g->grad_buf = tg__alloc(ctx, pn, fn);
    g->wsf_buf = tg__alloc(ctx, pn, fn);
    g->wsb_buf = tg__alloc(ctx, pn, fn);
    g->fresh_buf = tg__alloc(ctx, sizeof(int64_t) * (size_t)(g->n_leaves + 1), fn);
    g->leaf_buf = tg__alloc(ctx, pn, fn);
    g->bufs = tg__alloc(ctx, sizeof(tg__buf) * (size_t)(6 * n + 1), fn);
    *sc = (plan_scratch){tg__alloc(ctx, pn, fn), tg__alloc(ctx, pn, fn), tg__alloc(ctx, pn, fn),
                         tg__alloc(ctx, pn, fn), tg__alloc(ctx, pn, fn), tg__alloc(ctx, pn, fn),
                         tg__alloc(ctx, pn, fn)};
    if (!g->leaf_buf || !sc->lastc || !sc->prevc || !sc->ncons || !sc->shared || !sc->sread ||
        !g->out_buf ||
        !g->saved_buf || !g->grad_buf || !g->wsf_buf || !g->wsb_buf || !g->fresh_buf ||
        !g->bufs || !sc->end || !sc->gstart) {
        scratch_free(ctx, sc);
        return false;
    }
    for (int64_t i = 0; i < n; i++) {
        g->out_buf[i] = g->saved_buf[i] = g->grad_buf[i] = g->wsf_buf[i] = g->wsb_buf[i] = -1;
        g->leaf_buf[i] = -1;
        sc->end[i] = i;
        sc->gstart[i] = -1;
        sc->lastc[i] = sc->prevc[i] = sc->shared[i] = sc->sread[i] = -1;
        sc->ncons[i] = 0;
    }
    return true;
}

/* Last reads of every output and first gradient writes, over the joint schedule. */
static void plan_lifetimes(tg_graph *g, plan_scratch *sc)
{
    int64_t n = g->n;
    bool grads = !g->no_grad;
    int64_t *end = sc->end, *gstart = sc->gstart;
    for (int64_t j = 0; j < n; j++) {
        tg_tensor *t = g->nodes[j];
        if (t->op == TG_OP_NONE)
            continue;
        bool bw = grads && t->requires_grad;
        unsigned fl = t->def->flags;
        if ((fl & TG_OPF_SRC_SAVED) && g->src_at[j * TG_MAX_SRC] >= 0)
            sc->sread[g->src_at[j * TG_MAX_SRC]] = j; /* ascending j: the last reader wins */
        for (int k = 0; k < t->n_src; k++) {
            tg_tensor *s = t->src[k];
            if (!s)
                continue;
            int64_t si = g->src_at[j * TG_MAX_SRC + k], b = owner_at(g, si);
            if (end[b] < j)
                end[b] = j;
            if (bw && tg__opf_reads_src(fl, k) && end[b] < tg__bwd_step(g, j))
                end[b] = tg__bwd_step(g, j);
            if (bw && s->requires_grad) {
                gstart[si] = tg__bwd_step(g, j); /* ascending j: the last consumer wins */
                if (sc->lastc[si] != j)
                    sc->prevc[si] = sc->lastc[si];
                sc->lastc[si] = j;
                sc->ncons[si]++;
            }
        }
        if (bw && (fl & TG_OPF_OUT)) {
            int64_t b = owner_at(g, j);
            if (end[b] < tg__bwd_step(g, j))
                end[b] = tg__bwd_step(g, j);
        }
    }
    /* By default (not one_backward), backward may run again without a new forward, so what any
     * backward rule reads outlives backward (a gradient never takes the memory of a value a
     * later backward call still needs). Its lifetime never ends (TG__FOREVER, as an output's):
     * nothing is placed after backward anyway, and poison mode must not fill it with NaN at
     * the end of the first backward call. */
    for (int64_t i = 0; g->retain && i < n; i++)
        if (end[i] >= n)
            end[i] = TG__FOREVER;
    for (int64_t i = 0; i < n; i++)
        if (g->persist[i]) {
            end[owner_at(g, i)] = TG__FOREVER;
            if (grads && g->nodes[i]->requires_grad)
                gstart[i] = n;
        }
}

/* The forward buffers, in node order (placement order within a step follows it): outputs,
 * saved values, forward workspace; leaves only counted. False with the error recorded. */
static bool plan_forward_bufs(tg_graph *g, const plan_scratch *sc, uint64_t *total,
                              const char *fn)
{
    bool grads = !g->no_grad;
    for (int64_t i = 0; i < g->n; i++) {
        tg_tensor *t = g->nodes[i];
        size_t bytes = (size_t)data_bytes(t);
        if (t->op == TG_OP_NONE) {
            if (t->kind == TG_KIND_PARAM) {
                g->mem.parameters += bytes;
                if (grads)
                    g->mem.parameter_grads += bytes;
            } else {
                g->mem.inputs += bytes;
                if (grads && t->requires_grad)
                    g->mem.input_grads += bytes;
            }
            continue;
        }
        bool bw = grads && t->requires_grad;
        if (!t->base) {
            g->out_buf[i] = add_buf(g, total, fn, TG__BUF_OUT, i, bytes, i, sc->end[i]);
            if (g->out_buf[i] < 0)
                return false;
            g->mem.activations += (size_t)g->bufs[g->out_buf[i]].size;
        }
        if (t->saved_bytes) {
            int64_t end = !bw ? i : g->retain ? TG__FOREVER : tg__bwd_step(g, i);
            g->saved_buf[i] = add_buf(g, total, fn, TG__BUF_SAVED, i, t->saved_bytes, i,
                                      end < sc->sread[i] ? sc->sread[i] : end);
            if (g->saved_buf[i] < 0)
                return false;
            g->mem.saved += (size_t)g->bufs[g->saved_buf[i]].size;
        }
        size_t w = ws_bytes(g, t, false);
        if (w) {
            g->wsf_buf[i] = add_buf(g, total, fn, TG__BUF_WSF, i, w, i, i);
            if (g->wsf_buf[i] < 0)
                return false;
            g->mem.workspace += (size_t)g->bufs[g->wsf_buf[i]].size;
        }
    }
    return true;
}

/* Backward in place: node i's gradient buffer takes the gradient of the consumer c that writes
 * it first when c's own gradient dies at that very step (src[0] of a TG_OPF_BWD_INPLACE rule,
 * which then writes it in place), or shares an add's gradient as its src[1]. */
static void grad_alias(tg_graph *g, plan_scratch *sc, int64_t i)
{
    tg_tensor *t = g->nodes[i];
    int64_t j = g->persist[i] ? -1 : sc->lastc[i];
    tg_tensor *c = j >= 0 ? g->nodes[j] : NULL;
    int64_t G = c ? g->grad_buf[j] : -1;
    bool fits = !g->no_reuse && G >= 0 && g->bufs[G].end == sc->gstart[i] &&
                g->bufs[G].alias < 0 && g->bufs[G].size == g->bufs[g->grad_buf[i]].size &&
                c->numel == t->numel;
    bool twice = false;
    for (int k = 0; fits && k < c->n_src; k++)
        for (int k2 = k + 1; k2 < c->n_src; k2++)
            twice = twice || (c->src[k] == t && c->src[k2] == t);
    if (fits && !twice && (c->def->flags & TG_OPF_BWD_INPLACE) && c->src[0] == t &&
        (sc->shared[j] < 0 || sc->prevc[i] < sc->shared[j])) {
        /* (if src[1] already shares c's gradient, t's other consumers must run their
         * backward after src[1]'s rule has read it, i.e. come before it in order) */
        g->bufs[g->grad_buf[i]].alias = G;
    } else if (fits && !twice && (c->def->flags & TG_OPF_BWD_SHARE1) && c->n_src == 2 &&
               c->src[1] == t && sc->ncons[i] == 1 && sc->shared[j] < 0 &&
               g->src_at[j * TG_MAX_SRC] < i) {
        /* add: src[1]'s gradient is dy too. It shares c's gradient (which src[0] may
         * take later, see above) when c is t's only consumer and src[0] comes earlier
         * (its rule, which may rewrite the buffer in place, runs after t's). The add's
         * rule normalizes the buffer in place (0 + dy) before t's rule reads it. */
        g->bufs[g->grad_buf[i]].alias = G;
        sc->shared[j] = i;
    }
}

/* The backward buffers, in step order: gradients of op results (with their in-place
 * aliases), this call's gradients of leaves, backward workspace. False with the error
 * recorded. */
static bool plan_backward_bufs(tg_graph *g, plan_scratch *sc, uint64_t *total, const char *fn)
{
    int64_t n = g->n;
    for (int64_t i = n - 1; i >= 0; i--) {
        tg_tensor *t = g->nodes[i];
        if (!t->requires_grad || t->op == TG_OP_NONE || sc->gstart[i] < 0)
            continue;
        int64_t e = g->persist[i] ? TG__FOREVER : tg__bwd_step(g, i);
        g->grad_buf[i] = add_buf(g, total, fn, TG__BUF_GRAD, i, data_bytes(t), sc->gstart[i], e);
        if (g->grad_buf[i] < 0)
            return false;
        g->mem.gradients += (size_t)g->bufs[g->grad_buf[i]].size;
        grad_alias(g, sc, i);
    }
    for (int64_t l = 0; l < g->n_leaves; l++) {
        int64_t i = g->leaf_node[l];
        int64_t s = sc->gstart[i] >= 0 ? sc->gstart[i] : n;
        g->fresh_buf[l] = add_buf(g, total, fn, TG__BUF_FRESH, i, data_bytes(g->nodes[i]), s,
                                  TG__FOREVER);
        if (g->fresh_buf[l] < 0)
            return false;
        g->leaf_buf[i] = g->fresh_buf[l];
        g->mem.gradients += (size_t)g->bufs[g->fresh_buf[l]].size;
    }
    for (int64_t i = n - 1; i >= 0; i--) {
        tg_tensor *t = g->nodes[i];
        if (!t->requires_grad || t->op == TG_OP_NONE)
            continue;
        size_t w = ws_bytes(g, t, true);
        if (w) {
            int64_t s = tg__bwd_step(g, i);
            g->wsb_buf[i] = add_buf(g, total, fn, TG__BUF_WSB, i, w, s, s);
            if (g->wsb_buf[i] < 0)
                return false;
            g->mem.workspace += (size_t)g->bufs[g->wsb_buf[i]].size;
        }
    }
    return true;
}

/* Forward in place: an TG_OPF_INPLACE op's output takes src[0]'s slot when it dies here. */
static void plan_inplace(tg_graph *g)
{
    for (int64_t i = 0; i < g->n; i++) {
        tg_tensor *t = g->nodes[i];
        if (g->out_buf[i] < 0 || !(t->def->flags & TG_OPF_INPLACE) || t->n_src < 1)
            continue;
        tg_tensor *x = t->src[0];
        int64_t xi = g->src_at[i * TG_MAX_SRC];
        if (!x || x->op == TG_OP_NONE || x->base || g->out_buf[xi] < 0)
            continue;
        tg__buf *xb = &g->bufs[g->out_buf[xi]];
        if (xb->end != i || xb->size != g->bufs[g->out_buf[i]].size)
            continue;
        bool other = false;
        for (int k = 1; k < t->n_src; k++)
            other = other || (t->src[k] && owner_of(t->src[k]) == x);
        if (!other)
            g->bufs[g->out_buf[i]].alias = g->out_buf[xi];
    }
}

/* The sweep over the steps once the buckets are made: the buffers starting at a step placed
 * first-fit (an alias at its root's offset), then those ending there released. */
static void sweep(tg_graph *g, arena_plan *p, const int64_t *sp, const int64_t *sl,
                  const int64_t *root, int64_t steps)
{
    for (int64_t s = 0; s < steps; s++) {
        for (int64_t q = sp[s]; q < sp[s + 1]; q++) {
            tg__buf *b = &g->bufs[sl[q]];
            if (root[sl[q]] != sl[q]) /* the root starts no later and comes first */
                b->off = g->bufs[root[sl[q]]].off;
            else if (g->no_reuse) {
                b->off = p->high;
                p->high += b->size;
            } else
                b->off = plan_alloc(p, b->size);
        }
        for (int64_t q = g->end_ptr[s]; q < g->end_ptr[s + 1] && !g->no_reuse; q++) {
            tg__buf *b = &g->bufs[g->end_list[q]];
            plan_free(p, b->off, b->size);
        }
    }
}

/* Placement: buckets by start step and by end step (counting sort keeps node order), then the
 * sweep. An in-place chain (a buffer and the buffers that took its slot, possibly several) is
 * one slot: placed at its root's start, released (and poisoned) at its last member's end.
 * *high: the arena's size. False with the error recorded. */
static bool plan_place(tg_graph *g, int64_t steps, int64_t *high, const char *fn)
{
    tg_ctx *ctx = g->ctx;
    int64_t nb = g->n_bufs;
    int64_t *sp = tg__alloc(ctx, sizeof(int64_t) * (size_t)(steps + 2), fn);
    int64_t *sl = tg__alloc(ctx, sizeof(int64_t) * (size_t)(nb + 1), fn);
    g->end_ptr = tg__alloc(ctx, sizeof(int64_t) * (size_t)(steps + 2), fn);
    g->end_list = tg__alloc(ctx, sizeof(int64_t) * (size_t)(nb + 1), fn);
    int64_t *root = tg__alloc(ctx, sizeof(int64_t) * (size_t)(nb + 1), fn);
    int64_t *cend = tg__alloc(ctx, sizeof(int64_t) * (size_t)(nb + 1), fn);
    arena_plan p = {tg__alloc(ctx, sizeof(segment) * (size_t)(nb + 2), fn), 0, 0};
    int64_t *fill = tg__alloc(ctx, sizeof(int64_t) * (size_t)(steps + 2), fn);
    int64_t *fille = tg__alloc(ctx, sizeof(int64_t) * (size_t)(steps + 2), fn);
    bool ok = sp && sl && g->end_ptr && g->end_list && root && cend && p.free && fill && fille;
    if (ok) {
        for (int64_t b = 0; b < nb; b++) { /* an alias always follows its source */
            root[b] = g->bufs[b].alias >= 0 ? root[g->bufs[b].alias] : b;
            cend[b] = g->bufs[b].end;
            if (root[b] != b && cend[b] > cend[root[b]])
                cend[root[b]] = cend[b];
        }
        for (int64_t b = 0; b < nb; b++) {
            sp[g->bufs[b].start + 1]++;
            if (root[b] == b && cend[b] != TG__FOREVER)
                g->end_ptr[cend[b] + 1]++;
        }
        for (int64_t s = 0; s <= steps; s++) {
            sp[s + 1] += sp[s];
            g->end_ptr[s + 1] += g->end_ptr[s];
        }
        memcpy(fill, sp, sizeof(int64_t) * (size_t)(steps + 1));
        memcpy(fille, g->end_ptr, sizeof(int64_t) * (size_t)(steps + 1));
        for (int64_t b = 0; b < nb; b++) {
            sl[fill[g->bufs[b].start]++] = b;
            if (root[b] == b && cend[b] != TG__FOREVER)
                g->end_list[fille[cend[b]]++] = b;
        }
        sweep(g, &p, sp, sl, root, steps);
    }
    tg__free(ctx, fill);
    tg__free(ctx, fille);
    tg__free(ctx, root);
    tg__free(ctx, cend);
    tg__free(ctx, sp);
    tg__free(ctx, sl);
    tg__free(ctx, p.free);
    *high = p.high;
    return ok;
}

bool tg__plan(tg_graph *g, const char *fn)
{
    tg_ctx *ctx = g->ctx;
    bool grads = !g->no_grad;
    int64_t steps = grads ? 2 * g->n : g->n;
    plan_scratch sc;
    if (!plan_tables(g, &sc, fn))
        return false;
    plan_lifetimes(g, &sc);
    memset(&g->mem, 0, sizeof g->mem);
    uint64_t total = 0; /* sum of the buffers' sizes so far (add_buf) */
    bool ok = plan_forward_bufs(g, &sc, &total, fn) &&
              (!grads || plan_backward_bufs(g, &sc, &total, fn));
    scratch_free(ctx, &sc);
    if (!ok)
        return false; /* the error is recorded */
    if (!g->no_reuse)
        plan_inplace(g);
    int64_t high;
    if (!plan_place(g, steps, &high, fn))
        return false;
    if (!g->no_reuse && g->n_bufs <= TG__GREEDY_MAX) { /* better packing than first-fit */
        if (!place_greedy(g, &high, fn))
            return false;
    }
    g->arena_bytes = (size_t)high;
    g->mem.arena = g->arena_bytes;
    g->mem.peak = g->mem.parameters + g->mem.parameter_grads + g->mem.inputs +
                  g->mem.input_grads + g->mem.arena;
    if (g->shared) { /* grow the shared arena to this plan (no arena of its own) */
        if (!tg__arena_reserve(g->shared, g->arena_bytes, fn))
            return false;
        g->arena = g->shared->base;
        return true;
    }
    g->arena = tg__alloc(ctx, g->arena_bytes ? g->arena_bytes : 64, fn);
    return g->arena != NULL;
}
