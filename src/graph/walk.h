/*
 * walk.h - internal to layer 3 (graph): the nodes the outputs of a gradient or tangent
 * computation depend on, in a topological order (sources first), indexed by pointer (open
 * addressing). src/graph/walk.c; used by grad.c (tg_grad) and jvp.c (tg_jvp).
 */
#ifndef TG_WALK_H
#define TG_WALK_H

#include "core.h"

typedef struct {
    tg_tensor **node;
    int64_t n, cap;
    tg_tensor **slot; /* hash table of nodes: node pointers or NULL */
    int64_t *slot_i;  /* their index in node[] */
    int64_t n_slots;
} walk;

/* Index of @p t in the walk, or -1. */
int64_t tg__walk_find(const walk *w, const tg_tensor *t);
/* Room for more nodes (the first call makes the table); false when out of memory. */
bool tg__walk_grow(walk *w);
/* Append @p t (not yet in the walk). */
bool tg__walk_add(walk *w, tg_tensor *t);
/* Add @p root and every node it depends on that is not in the walk yet, sources first
 * (post-order, an explicit stack: graphs may be deep). */
bool tg__walk_visit(walk *w, tg_tensor *root);
void tg__walk_free(walk *w);

#endif
