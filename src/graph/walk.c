/*
 * walk.c - layer 3: the nodes a set of outputs depends on, in a topological order (sources
 * first), with an index by pointer (walk.h); shared by the reverse (grad.c) and forward
 * (jvp.c) walkers of gradients built as graph nodes.
 */
#include "walk.h"

#include <stdlib.h>

static uint64_t hash_ptr(const void *p)
{
    uint64_t x = (uint64_t)(uintptr_t)p;
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdULL;
    return x ^ (x >> 33);
}

/* Index of @p t in the walk, or -1. */
int64_t tg__walk_find(const walk *w, const tg_tensor *t)
{
    uint64_t mask = (uint64_t)(w->n_slots - 1);
    for (uint64_t h = hash_ptr(t) & mask;; h = (h + 1) & mask) {
        if (!w->slot[h])
            return -1;
        if (w->slot[h] == t)
            return w->slot_i[h];
    }
}

bool tg__walk_grow(walk *w)
{
    int64_t cap = w->cap ? 2 * w->cap : 64, slots = 2 * cap;
    tg_tensor **node = realloc(w->node, sizeof *node * (size_t)cap);
    if (!node)
        return false;
    w->node = node;
    w->cap = cap;
    free(w->slot);
    free(w->slot_i);
    w->slot = calloc((size_t)slots, sizeof *w->slot);
    w->slot_i = malloc(sizeof *w->slot_i * (size_t)slots);
    if (!w->slot || !w->slot_i)
        return false;
    w->n_slots = slots;
    for (int64_t i = 0; i < w->n; i++) { /* rehash */
        uint64_t h = hash_ptr(w->node[i]) & (uint64_t)(slots - 1);
        while (w->slot[h])
            h = (h + 1) & (uint64_t)(slots - 1);
        w->slot[h] = w->node[i];
        w->slot_i[h] = i;
    }
    return true;
}

bool tg__walk_add(walk *w, tg_tensor *t)
{
    if (w->n == w->cap && !tg__walk_grow(w))
        return false;
    uint64_t h = hash_ptr(t) & (uint64_t)(w->n_slots - 1);
    while (w->slot[h])
        h = (h + 1) & (uint64_t)(w->n_slots - 1);
    w->slot[h] = t;
    w->slot_i[h] = w->n;
    w->node[w->n++] = t;
    return true;
}

/* Post-order depth-first walk from @p root (an explicit stack: graphs may be deep). */
bool tg__walk_visit(walk *w, tg_tensor *root)
{
    if (tg__walk_find(w, root) >= 0)
        return true;
    int64_t cap = 64, n = 0;
    struct frame {
        tg_tensor *t;
        int k;
    } *st = malloc(sizeof *st * (size_t)cap);
    if (!st)
        return false;
    st[n++] = (struct frame){root, 0};
    bool ok = true;
    while (ok && n > 0) {
        struct frame *f = &st[n - 1];
        if (f->k < f->t->n_src) {
            tg_tensor *s = f->t->src[f->k++];
            if (!s || tg__walk_find(w, s) >= 0)
                continue; /* (no cycles: a node's sources exist before it) */
            if (n == cap) {
                void *p = realloc(st, sizeof *st * (size_t)(cap *= 2));
                ok = p != NULL;
                if (p)
                    st = p;
            }
            if (ok)
                st[n++] = (struct frame){s, 0};
        } else {
            ok = tg__walk_find(w, f->t) >= 0 || tg__walk_add(w, f->t);
            n--;
        }
    }
    free(st);
    return ok;
}

void tg__walk_free(walk *w)
{
    free(w->node);
    free(w->slot);
    free(w->slot_i);
}
