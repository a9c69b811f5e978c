/*
 * values.h - layer 3: where a tensor's values and gradient live (exec.c) and whether those bytes
 * are still its own, for the layers above that read tensors (io's items from tensors).
 */
#ifndef TG_VALUES_H
#define TG_VALUES_H

#include "core.h"

/* The memory of t's values: a leaf's own; a view's, its base's at its offset; an op result's,
 * in the plan of the graph that last ran it (NULL if none did, or it was freed). Whether those
 * bytes are still t's is tg__stale's question. (src/graph/exec.c) */
void *tg__value(const tg_tensor *t);
/* The memory of t's gradient: a leaf's accumulated one; an op result's, in the plan of the
 * graph that last ran backward over it (NULL if none). (src/graph/exec.c) */
void *tg__grad_value(const tg_tensor *t);

/* Are t's data, grad and saved bytes another graph's, and why? TG__STALE_REUSED: an op result
 * whose plan (of the graph that last ran it) gave its bytes to later values; TG__STALE_ARENA:
 * last bound by a graph with a shared arena, and another graph of that arena started running
 * since. Both are the state of the graph that last ran t, not of t. (src/graph/exec.c) */
enum { TG__FRESH, TG__STALE_REUSED, TG__STALE_ARENA };
int tg__stale_why(const tg_tensor *t);
static inline bool tg__stale(const tg_tensor *t) { return tg__stale_why(t) != TG__FRESH; }

#endif /* TG_VALUES_H */
