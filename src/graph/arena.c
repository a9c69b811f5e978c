/*
 * arena.c - layer 3: shared arenas (tg_arena_new, tg_graph_opts.arena). Several graphs of one
 * context run in one memory block, since only one of them runs at a time: the block grows at
 * build time to the largest plan (tg__arena_reserve), each run takes the block's current base
 * (tg__arena_enter, from tg__bind), and the arena remembers which graph ran last, so that
 * backward refuses to read values another graph overwrote and reading a stale op result is
 * refused (tensors record the arena's run generation when bound: tg__stale in graph_internal.h).
 */
#include "graph_internal.h"

tg_arena *tg_arena_new(tg_ctx *ctx)
{
    if (!ctx)
        return NULL;
    tg__begin(ctx);
    uint64_t seq = ctx->alloc_seq;
    tg_arena *a = tg__alloc(ctx, sizeof *a, "tg_arena_new");
    if (!a)
        return NULL;
    a->ctx = ctx;
    a->seq = seq;
    ctx->forget_after = tg__graph_forget_after;
    a->next = ctx->arenas;
    if (ctx->arenas)
        ctx->arenas->prev = a;
    ctx->arenas = a;
    return a;
}

size_t tg_arena_bytes(const tg_arena *a) { return a ? a->bytes : 0; }

/* A rewind past the arena's creation: every graph built with it is newer, so already freed. */
void tg__arena_forget(tg_arena *a)
{
    tg_ctx *ctx = a->ctx;
    if (a->prev)
        a->prev->next = a->next;
    else if (ctx->arenas == a)
        ctx->arenas = a->next;
    if (a->next)
        a->next->prev = a->prev;
    tg__free(ctx, a->base);
    tg__free(ctx, a);
}

bool tg__arena_reserve(tg_arena *a, size_t bytes, const char *fn)
{
    if (a->base && bytes <= a->bytes)
        return true;
    tg_ctx *ctx = a->ctx;
    if (bytes < a->bytes)
        bytes = a->bytes;
    /* Owned by the context: a rewind to a mark taken after the arena was made keeps it (the
     * arena outlives the graphs freed); tg__arena_forget frees it explicitly. */
    char *nb = tg__alloc_owned(ctx, bytes ? bytes : 64, fn, TG__OWNER_CTX);
    if (!nb)
        return false;
    char *old = a->base;
    if (old) {
        if (a->last) /* the values of the graph that ran last stay valid */
            memcpy(nb, old, a->bytes);
        for (tg_graph *g = ctx->graphs; g; g = g->next)
            if (g->shared == a) /* op results' memory is found from g->arena: nothing moves */
                g->arena = nb;
        tg__free(ctx, old);
    }
    a->base = nb;
    a->bytes = bytes;
    return true;
}

void tg__arena_enter(tg_graph *g)
{
    tg_arena *a = g->shared;
    if (a->last != g) {
        a->gen++;
        a->last = g;
    }
    g->arena = a->base;
}

void tg__arena_leave(tg_graph *g)
{
    tg_arena *a = g->shared;
    tg__unbind(g);
    if (a->last == g) { /* its values are gone with it: what was bound to them is stale */
        a->last = NULL;
        a->gen++;
    }
    a->n_graphs--;
    g->shared = NULL;
    g->arena = NULL;
}

