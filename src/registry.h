/*
 * registry.h - internal layer 2/3 boundary: the op table built from ops/ops.def.
 * The engine (graph, autodiff, gradcheck) reaches ops only through tg__op_table.
 */
#ifndef TG_REGISTRY_H
#define TG_REGISTRY_H

#include "core.h"

/* Kernel signatures: forward computes y->data from y->src[*]->data (and may fill y->saved);
 * backward ACCUMULATES (+=) into y->src[i]->grad for every source whose grad is non-NULL,
 * reading y->grad. Neither can fail: shapes were validated and memory planned at build. */
typedef void (*tg_kernel_fn)(tg_tensor *y);

/* Data check run before forward (ops reading ids from data set after building): returns
 * TG_OK or records an error on y->ctx and returns its status. */
typedef tg_status (*tg_check_fn)(tg_tensor *y);

typedef struct tg_op_def {
    const char *name;
    tg_kernel_fn forward;
    tg_kernel_fn backward;
    tg_check_fn check;
} tg_op_def;

#define TG_OP(id, name, fwd, bwd, check)                                                        \
    void fwd(tg_tensor *y);                                                                    \
    void bwd(tg_tensor *y);                                                                    \
    tg_status check(tg_tensor *y);

#include "../ops/ops.def"
#undef TG_OP

extern const tg_op_def tg__op_table[TG_OP_COUNT_];

#endif
