/* registry.c - the op dispatch table, generated from ops/ops.def. */
#include "registry.h"

const tg_op_def tg__op_table[TG_OP_COUNT_] = {
    [TG_OP_NONE] = {"leaf", NULL, NULL, NULL, 0, NULL},
#define TG_OP(id, name, fwd, bwd, check, flags, ws)                                             \
    [TG_OP_##id] = {name, fwd, ((flags) & TG_OPF_NO_BACKWARD) ? NULL : bwd, check, flags, ws},
#include "ops.def"
#undef TG_OP
};

void tg__call_describe(tg__call *c, const tg_tensor *y)
{
    c->op = y->op;
    c->dtype = y->dtype;
    c->rank = y->rank;
    c->numel = y->numel;
    c->shape = y->shape;
    c->p = &y->p;
    c->aux = y->aux;
    c->name = y->name;
    for (int k = 0; k < y->n_src && k < TG_MAX_SRC; k++) {
        const tg_tensor *s = y->src[k];
        if (!s)
            continue;
        c->src_dtype[k] = s->dtype;
        c->src_rank[k] = s->rank;
        c->src_numel[k] = s->numel;
        c->src_shape[k] = s->shape;
        c->src_stride[k] = s->stride;
        c->src_name[k] = s->name;
        c->src_requires_grad[k] = s->requires_grad;
    }
    c->training = y->ctx->training;
    c->rng = y->ctx->rng;
}

/* Each op's flags (ops.def), for the per-dtype table: an inference-only op's backward entries
 * are NULL whatever ops_dtype.def names (tg__no_backward), as in tg__op_table. */
enum {
#define TG_OP(id, name, fwd, bwd, check, flags, ws) TG__OPFL_##id = (int)(flags),
#include "ops.def"
#undef TG_OP
};

const tg__op_dt tg__op_dt_table[TG_OP_COUNT_] = {
#define TG_OP_DT(id, f32_fwd, f32_bwd, f64_fwd, f64_bwd)                                      \
    [TG_OP_##id] = {{f32_fwd, f64_fwd},                                                        \
                    {(TG__OPFL_##id & TG_OPF_NO_BACKWARD) ? NULL : f32_bwd,                    \
                     (TG__OPFL_##id & TG_OPF_NO_BACKWARD) ? NULL : f64_bwd}},
#include "ops_dtype.def"
#undef TG_OP_DT
};

/* ops.def's columns for an op registered per dtype: its kernel for the record's dtype. */
tg_status tg__dt_forward(const tg__call *c)
{
    return tg__op_dt_table[c->op].fwd[c->dtype == TG_F64](c);
}
tg_status tg__dt_backward(const tg__call *c)
{
    return tg__op_dt_table[c->op].bwd[c->dtype == TG_F64](c);
}

tg_status tg__no_check(const tg__call *c)
{
    (void)c;
    return TG_OK;
}

tg_status tg__no_backward(const tg__call *c)
{
    (void)c; /* never called: a TG_OPF_NO_BACKWARD op's table entry has a NULL backward */
    return TG_OK;
}

size_t tg__no_ws(const tg__call *c)
{
    (void)c;
    return 0;
}

int tg_op_count(void) { return TG_OP_COUNT_ - 1; }

const char *tg_op_name(int i)
{
    if (i < 0 || i >= TG_OP_COUNT_ - 1)
        return NULL;
    return tg__op_table[i + 1].name;
}

bool tg_op_has_backward(int i)
{
    if (i < 0 || i >= TG_OP_COUNT_ - 1)
        return false;
    return tg__op_table[i + 1].backward != NULL;
}

int tg_op_find(const char *name)
{
    if (!name)
        return -1;
    for (int i = 1; i < TG_OP_COUNT_; i++)
        if (strcmp(tg__op_table[i].name, name) == 0)
            return i - 1;
    return -1;
}
