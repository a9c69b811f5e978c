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

/* Are t's data, grad and saved bytes another graph's? (An op result whose plan gave its bytes
 * to later values, or last bound by a graph with a shared arena after another graph of that
 * arena started running.) */
static inline bool tg__stale(const tg_tensor *t)
{
    return t->reused || (t->run_gen && *t->run_gen != t->run_gen_at);
}

#endif /* TG_VALUES_H */
