/*
 * opcases.h - the gradient-check case table: at least three shape cases per registered op
 * (size-1 and non-square dims, the fully masked softmax row), and one or more per module.
 * Shared by `tgrad gradcheck` and tests/test_registry.c, which fails if an op has fewer than
 * three cases.
 */
#ifndef TG_OPCASES_H
#define TG_OPCASES_H

#include "tgrad.h"

typedef struct tg_opcase {
    const char *op;     /* registry op name, or a module name ("sdpa", "mha", ...) */
    const char *name;   /* case name */
    const char *shapes; /* human-readable operand shapes */
    /* Build inputs (filled from the context RNG, differentiable ones marked) and the op;
     * return the output, or NULL with the context error set. */
    tg_tensor *(*build)(tg_ctx *ctx, tg_dtype dt);
} tg_opcase;

extern const tg_opcase tg_opcases[];
extern const int tg_n_opcases;

/* Number of cases whose op is @p op. */
int tg_opcase_count(const char *op);

#endif
