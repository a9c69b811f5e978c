/*
 * order.c - layer 3: building a graph (topological order, leaf list, the plan), freeing it,
 * and its accessors. Ops are reached only through each node's registry entry (t->def).
 *
 * Life of a graph: builders record nodes -> tg_graph_new (order + plan + arena) ->
 * tg_graph_forward (any number of times) -> tg_graph_backward (leaf grads accumulate) ->
 * tg_graph_zero_grad -> tg_graph_free (or tg_ctx_rewind / tg_ctx_free).
 */
#include "graph_internal.h"
#include "vec.h"

#include <stdio.h>

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

/* Ops that only move values (a -inf stays a -inf). */
static bool is_layout(const tg_tensor *t)
{
    return t->def && (t->def->flags & (TG_OPF_VIEW | TG_OPF_LAYOUT));
}

static void unlink_graph(tg_graph *g)
{
    tg_ctx *ctx = g->ctx;
    if (g->prev)
        g->prev->next = g->next;
    else if (ctx->graphs == g)
        ctx->graphs = g->next;
    if (g->next)
        g->next->prev = g->prev;
    g->next = g->prev = NULL;
}

/* Drop the bindings of op results to this graph (it is being freed or re-planned): their
 * memory was in its plan. */
void tg__unbind(tg_graph *g)
{
    for (int64_t i = 0; g->nodes && i < g->n; i++) {
        tg_tensor *t = g->nodes[i];
        if (t->op != TG_OP_NONE && t->run_graph == g)
            t->run_graph = g->reused && g->reused[i] ? &tg__graph_gone : NULL;
    }
}

void tg_graph_free(tg_graph *g)
{
    if (!g)
        return;
    tg_ctx *ctx = g->ctx;
    if (g->shared)
        tg__arena_leave(g); /* unbinds; the arena keeps its block */
    else
        tg__unbind(g);
    unlink_graph(g);
    tg__plan_free(g);
    void *arrays[] = {g->nodes,   g->leaves, g->leaf_node, g->outputs, g->needed, g->minf_ok,
                      g->persist, g->val,    g->gval,      g->sval,    g->src_at, g->base_at,
                      g->ix_key,  g->ix_val, g->reused,    g->govs};
    for (size_t i = 0; i < sizeof arrays / sizeof arrays[0]; i++)
        tg__free(ctx, arrays[i]);
    tg__free(ctx, g);
}

/* The context's rewind hook (ctx->forget_after): graphs made at or after allocation number
 * seq first (they unbind the tensors they ran), then the shared arenas (every graph using one
 * is newer, so already gone). */
void tg__graph_forget_after(tg_ctx *ctx, uint64_t seq)
{
    while (ctx->graphs && ctx->graphs->seq >= seq)
        tg_graph_free(ctx->graphs);
    while (ctx->arenas && ctx->arenas->seq >= seq)
        tg__arena_forget(ctx->arenas);
}

/* The arguments of tg_graph_new_opts: NULL with the error recorded, else ok. */
static bool new_args_ok(tg_ctx *ctx, tg_tensor *const *outputs, int n_outputs,
                        const tg_graph_opts *opts, const char *fn)
{
    if (n_outputs < 1 || !outputs)
        return tg__err(ctx, TG_ERR_ARG, fn, "need at least one output (got %d)", n_outputs);
    for (int i = 0; i < n_outputs; i++) {
        if (!outputs[i])
            return tg__err(ctx, TG_ERR_ARG, fn, "output %d is NULL", i);
        if (outputs[i]->ctx != ctx)
            return tg__err(ctx, TG_ERR_ARG, fn, "output %d belongs to another context", i);
    }
    if (opts && opts->precision != TG_PRECISION_F32 && opts->precision != TG_PRECISION_BF16)
        return tg__err(ctx, TG_ERR_ARG, fn, "unknown precision %d (TG_PRECISION_F32 or "
                       "TG_PRECISION_BF16)", opts->precision);
    if (opts && opts->arena && opts->arena->ctx != ctx)
        return tg__err(ctx, TG_ERR_ARG, fn, "the shared arena (opts.arena) belongs to another "
                       "context");
    return true;
}

/* A new graph record, linked into the context's list, with the options and the outputs.
 * NULL with the error recorded. */
static tg_graph *graph_record(tg_ctx *ctx, tg_tensor *const *outputs, int n_outputs,
                              const tg_graph_opts *opts, const char *fn)
{
    uint64_t seq = ctx->alloc_seq;
    tg_graph *g = tg__alloc(ctx, sizeof *g, fn);
    if (!g)
        return NULL;
    g->ctx = ctx;
    g->seq = seq;
    ctx->forget_after = tg__graph_forget_after;
    g->next = ctx->graphs;
    if (ctx->graphs)
        ctx->graphs->prev = g;
    ctx->graphs = g;
    g->no_grad = opts && opts->no_grad;
    g->no_reuse = opts && opts->no_reuse;
    g->poison = opts && opts->poison;
    g->anomaly = opts && opts->detect_anomaly;
    g->retain = !(opts && opts->one_backward);
    g->precision = opts ? opts->precision : TG_PRECISION_F32;
    if (opts && opts->arena) {
        g->shared = opts->arena;
        g->shared->n_graphs++;
    }
    g->nt = tg__threads(ctx);
    g->outputs = tg__alloc(ctx, sizeof(tg_tensor *) * (size_t)n_outputs, fn);
    if (!g->outputs) {
        tg_graph_free(g);
        return NULL;
    }
    memcpy(g->outputs, outputs, sizeof(tg_tensor *) * (size_t)n_outputs);
    g->n_outputs = n_outputs;
    return g;
}

/* The nodes in order: an iterative post-order DFS from the outputs, a node emitted after all
 * its sources. Identity is the tensor object; the visit stamp makes each node appear once.
 * False with the error recorded. */
static bool order_nodes(tg_graph *g)
{
    tg_ctx *ctx = g->ctx;
    frame *stack = NULL;
    uint64_t epoch = ++ctx->mark_epoch;
    int64_t sp = 0, scap = 0, ncap = 0;
    for (int o = 0; o < g->n_outputs; o++) {
        tg_tensor *out = g->outputs[o];
        if (out->mark == epoch)
            continue;
        if (sp == scap && !grow(ctx, (void **)&stack, &scap, sizeof *stack))
            goto fail;
        out->mark = epoch;
        stack[sp++] = (frame){out, 0};
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
            g->nodes[g->n++] = f->t;
            sp--;
        }
    }
    tg__free(ctx, stack);
    return true;
fail:
    tg__free(ctx, stack);
    return false;
}

static uint64_t ix_hash(const tg_tensor *t, uint64_t mask)
{
    return ((uint64_t)(uintptr_t)t >> 4) * 0x9E3779B97F4A7C15ull >> 20 & mask;
}

int64_t tg__node_at(const tg_graph *g, const tg_tensor *t)
{
    if (!g->ix_key)
        return -1;
    for (uint64_t h = ix_hash(t, g->ix_mask);; h = (h + 1) & g->ix_mask) {
        if (g->ix_key[h] == t)
            return g->ix_val[h];
        if (!g->ix_key[h])
            return -1;
    }
}

/* The node index (tg__node_at): each node's slot in a table at most half full. False with the
 * error recorded. */
static bool index_nodes(tg_graph *g, const char *fn)
{
    uint64_t cap = 16;
    while (cap < 2 * (uint64_t)g->n)
        cap *= 2;
    g->ix_key = tg__alloc(g->ctx, sizeof(tg_tensor *) * cap, fn);
    g->ix_val = tg__alloc(g->ctx, sizeof(int64_t) * cap, fn);
    g->reused = tg__alloc(g->ctx, (size_t)(g->n ? g->n : 1), fn);
    g->govs = tg__alloc(g->ctx, sizeof *g->govs, fn);
    if (!g->ix_key || !g->ix_val || !g->reused || !g->govs)
        return false;
    tg__govs_init(g->govs);
    g->ix_mask = cap - 1;
    for (int64_t i = 0; i < g->n; i++) {
        uint64_t h = ix_hash(g->nodes[i], g->ix_mask);
        while (g->ix_key[h])
            h = (h + 1) & g->ix_mask;
        g->ix_key[h] = g->nodes[i];
        g->ix_val[h] = i;
    }
    return true;
}

/* Per-node tables: sources and bases by index, which values persist (outputs, tg_keep and
 * their bases), the leaves that take gradients (with their accumulated gradient allocated);
 * refuses f64 at bf16 precision and a node without a backward rule that needs one. False
 * with the error recorded. */
static bool node_tables(tg_graph *g, const char *fn)
{
    tg_ctx *ctx = g->ctx;
    g->needed = tg__alloc(ctx, (size_t)g->n, fn);
    g->persist = tg__alloc(ctx, (size_t)g->n, fn);
    g->val = tg__alloc(ctx, sizeof(void *) * (size_t)g->n, fn);
    g->gval = tg__alloc(ctx, sizeof(void *) * (size_t)g->n, fn);
    g->sval = tg__alloc(ctx, sizeof(void *) * (size_t)g->n, fn);
    g->src_at = tg__alloc(ctx, sizeof(int64_t) * TG_MAX_SRC * (size_t)g->n, fn);
    g->base_at = tg__alloc(ctx, sizeof(int64_t) * (size_t)g->n, fn);
    if (!g->needed || !g->persist || !g->val || !g->gval || !g->sval || !g->src_at ||
        !g->base_at)
        return false;
    for (int64_t i = 0; i < g->n; i++) {
        const tg_tensor *t = g->nodes[i];
        for (int k = 0; k < TG_MAX_SRC; k++)
            g->src_at[i * TG_MAX_SRC + k] =
                k < t->n_src && t->src[k] ? tg__node_at(g, t->src[k]) : -1;
        g->base_at[i] = t->base ? tg__node_at(g, t->base) : -1;
    }
    for (int o = 0; o < g->n_outputs; o++)
        g->persist[tg__node_at(g, g->outputs[o])] = 1;
    for (int64_t i = 0; i < g->n; i++) {
        tg_tensor *t = g->nodes[i];
        if (g->precision == TG_PRECISION_BF16 && t->dtype == TG_F64) {
            tg__err(ctx, TG_ERR_DTYPE, fn, "bf16 precision is for f32 graphs; '%s' is f64 (f64 "
                    "graphs are for exact checking: build them with TG_PRECISION_F32)", t->name);
            return false;
        }
        if (t->keep)
            g->persist[i] = 1;
        if (g->no_grad)
            continue;
        if (t->requires_grad && t->op == TG_OP_NONE)
            g->n_leaves++;
        if (t->requires_grad && t->op != TG_OP_NONE && !t->def->backward) {
            tg__err(ctx, TG_ERR_NOGRAD, fn, "op '%s' ('%s') has no backward rule", t->def->name,
                    t->name);
            return false;
        }
    }
    /* A persistent view keeps its base readable too. */
    for (int64_t i = 0; i < g->n; i++)
        if (g->persist[i] && g->nodes[i]->base)
            g->persist[g->base_at[i]] = 1;
    if (!g->n_leaves)
        return true;
    g->leaves = tg__alloc(ctx, sizeof(tg_tensor *) * (size_t)g->n_leaves, fn);
    g->leaf_node = tg__alloc(ctx, sizeof(int64_t) * (size_t)g->n_leaves, fn);
    if (!g->leaves || !g->leaf_node)
        return false;
    int64_t k = 0;
    for (int64_t i = 0; i < g->n; i++) {
        tg_tensor *t = g->nodes[i];
        if (!(t->requires_grad && t->op == TG_OP_NONE))
            continue;
        if (!t->grad) { /* the leaf's accumulated gradient belongs to the leaf */
            t->grad = tg__alloc_owned(ctx, (size_t)t->numel * tg_dtype_size(t->dtype), fn,
                                      t->id + 1);
            if (!t->grad)
                return false;
        }
        g->leaf_node[k] = i;
        g->leaves[k++] = t;
    }
    return true;
}

/* The anomaly tripwire's -inf allowance: -inf is the point of an attention mask, so allow it
 * in add_mask's output and mask operand, in flash_attention's masks, and through the layout ops
 * (which only move values) that shaped that operand (reverse order: allowed once the consumer
 * is) or that rearrange an allowed tensor (forward order). False with the error recorded. */
static bool minf_allowance(tg_graph *g, const char *fn)
{
    g->minf_ok = tg__alloc(g->ctx, (size_t)g->n, fn);
    if (!g->minf_ok)
        return false;
    for (int64_t i = g->n - 1; i >= 0; i--) {
        tg_tensor *t = g->nodes[i];
        unsigned fl = t->def ? t->def->flags : 0;
        if (fl & (TG_OPF_MINF_OUT | TG_OPF_MINF_SRC1 | TG_OPF_MINF_SRC3)) {
            if (fl & TG_OPF_MINF_OUT)
                g->minf_ok[i] = 1;
            if ((fl & TG_OPF_MINF_SRC1) && t->n_src > 1 && t->src[1])
                g->minf_ok[g->src_at[i * TG_MAX_SRC + 1]] = 1;
            for (int k = 3; (fl & TG_OPF_MINF_SRC3) && k < t->n_src; k++) /* its masks */
                if (t->src[k])
                    g->minf_ok[g->src_at[i * TG_MAX_SRC + k]] = 1;
        } else if (is_layout(t) && g->minf_ok[i]) {
            g->minf_ok[g->src_at[i * TG_MAX_SRC]] = 1;
        }
    }
    for (int64_t i = 0; i < g->n; i++) {
        tg_tensor *t = g->nodes[i];
        if (is_layout(t) && g->minf_ok[g->src_at[i * TG_MAX_SRC]])
            g->minf_ok[i] = 1;
    }
    return true;
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
    if (!new_args_ok(ctx, outputs, n_outputs, opts, fn))
        return NULL;
    tg_graph *g = graph_record(ctx, outputs, n_outputs, opts, fn);
    if (!g)
        return NULL;
    if (order_nodes(g) && index_nodes(g, fn) && node_tables(g, fn) &&
        (!g->anomaly || minf_allowance(g, fn)) && tg__plan(g, fn))
        return g;
    tg_graph_free(g); /* the error is recorded; give back the graph's own arrays */
    return NULL;
}

tg_graph *tg_graph_new(tg_ctx *ctx, tg_tensor *const *outputs, int n_outputs)
{
    return tg_graph_new_opts(ctx, outputs, n_outputs, NULL);
}

size_t tg_graph_grad_bytes(const tg_graph *g) { return g ? g->mem.gradients : 0; }

tg_status tg_graph_memory(const tg_graph *g, tg_memory_report *report)
{
    if (!g || !report)
        return TG_ERR_ARG;
    *report = g->mem;
    report->arena_shared = g->shared ? g->shared->bytes : 0;
    return TG_OK;
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

void tg_graph_zero_grad(tg_graph *g)
{
    if (!g)
        return;
    int nt = tg__threads(g->ctx);
    for (int64_t i = 0; i < g->n_leaves; i++) {
        tg_tensor *t = g->leaves[i];
        if (!t->grad)
            continue;
        /* large gradients (the weight matrices) zeroed over the threads */
        int64_t bytes = t->numel * (int64_t)tg_dtype_size(t->dtype);
        char *c = t->grad;
        TG_PAR_RANGE_IN(g->govs, nt, bytes > TG_PAR_BYTES, bytes, 4096,
                        { memset(c + lo, 0, (size_t)(hi - lo)); });
    }
}

int64_t tg_graph_par_sites(const tg_graph *g) { return g ? g->govs->n : 0; }

tg_status tg_graph_par_site(const tg_graph *g, int64_t i, tg_par_site *out)
{
    if (!g || !tg__govs_entry(g->govs, i, out))
        return TG_ERR_ARG;
    if (out->node >= 0 && out->node < g->n)
        out->op = tg_tensor_op_name(g->nodes[out->node]);
    return TG_OK;
}

tg_status tg_keep(tg_tensor *t)
{
    if (!t)
        return TG_ERR_ARG;
    t->keep = true;
    return TG_OK;
}
