/*
 * jvp.c - layer 3: forward mode as graph nodes (tg_jvp, include/tgrad.h). The nodes between
 * the inputs and the outputs are visited in topological order; each one's tangent is built
 * from its sources' tangents by its op's forward rule written as ops: linear ops apply
 * themselves to the tangents, multilinear ops sum their terms, elementwise functions multiply
 * by their derivative (the reverse rule's factor: their Jacobian is diagonal). The ops without
 * a forward rule yet are refused by name (docs/autodiff.md lists them).
 */
#include "graph_internal.h"
#include "registry.h"
#include "vjp.h"
#include "walk.h"

#include <stdlib.h>
#include <string.h>

static const char *FN = "tg_jvp";

/* a + b where either may be NULL (a zero tangent). */
static tg_tensor *plus(tg_ctx *ctx, tg_tensor *a, tg_tensor *b)
{
    return !a ? b : !b ? a : tg_add(ctx, a, b);
}

/* @p t broadcast to @p y's shape (a source's tangent of an op that broadcasts). */
static tg_tensor *expand(tg_ctx *ctx, tg_tensor *t, const tg_tensor *y)
{
    if (!t || (t->rank == y->rank && !memcmp(t->shape, y->shape, sizeof(int64_t) * y->rank)))
        return t;
    return tg_add(ctx, tg__filled(ctx, y->dtype, y->rank, y->shape, 0.0, "zeros"), t);
}

/* Elementwise functions: t f'(x), the reverse rule applied to t (a diagonal Jacobian). */
static tg_tensor *jvp_diagonal(tg_ctx *ctx, tg_tensor *y, tg_tensor *const *t)
{
    bool need[TG_MAX_SRC] = {true};
    tg_tensor *gx[TG_MAX_SRC] = {NULL};
    return tg__vjp_rule(y)(ctx, y, t[0], need, gx) ? gx[0] : NULL;
}

static tg_tensor *jvp_arith(tg_ctx *ctx, tg_tensor *y, tg_tensor *const *t)
{
    tg_tensor *a = y->src[0], *b = y->n_src > 1 ? y->src[1] : NULL, *r = NULL;
    switch (y->op) {
    case TG_OP_SCALE:
        return tg_scale(ctx, t[0], y->p.scale.s);
    case TG_OP_NEG:
        return tg_neg(ctx, t[0]);
    case TG_OP_ADD:
        r = plus(ctx, t[0], t[1]);
        break;
    case TG_OP_SUB:
        r = plus(ctx, t[0], t[1] ? tg_neg(ctx, t[1]) : NULL);
        break;
    case TG_OP_MUL:
        r = plus(ctx, t[0] ? tg_mul(ctx, t[0], b) : NULL, t[1] ? tg_mul(ctx, a, t[1]) : NULL);
        break;
    default: /* DIV: t_a / b - y t_b / b */
        r = plus(ctx, t[0] ? tg_div(ctx, t[0], b) : NULL,
                 t[1] ? tg_neg(ctx, tg_div(ctx, tg_mul(ctx, y, t[1]), b)) : NULL);
    }
    return expand(ctx, r, y);
}

/* sum, mean: the same reduction of the tangent. */
static tg_tensor *jvp_reduce(tg_ctx *ctx, tg_tensor *y, tg_tensor *const *t)
{
    bool mean = y->op == TG_OP_MEAN;
    if (y->p.reduce.all)
        return mean ? tg_mean_all(ctx, t[0]) : tg_sum_all(ctx, t[0]);
    bool keep = y->rank == y->src[0]->rank;
    return mean ? tg_mean(ctx, t[0], y->p.reduce.axis, keep)
                : tg_sum(ctx, t[0], y->p.reduce.axis, keep);
}

/* relu_gate(t, r): linear in t, constant in r. */
static tg_tensor *jvp_relu_gate(tg_ctx *ctx, tg_tensor *y, tg_tensor *const *t)
{
    return t[0] ? tg_relu_gate(ctx, t[0], y->src[1])
                : tg__filled(ctx, y->dtype, y->rank, y->shape, 0.0, "zero_tangent");
}

/* max: the tangent at the first arg-max, sum(m t, axis) with m its one-hot (grad_mask). */
static tg_tensor *jvp_max(tg_ctx *ctx, tg_tensor *y, tg_tensor *const *t)
{
    bool keep = y->rank == y->src[0]->rank;
    return tg_sum(ctx, tg_mul(ctx, tg__grad_mask(ctx, y), t[0]), y->p.max.axis, keep);
}

/* softmax: y (t - <y, t>); log_softmax: t - <e^y, t> (rows of the last axis). */
static tg_tensor *jvp_softmax(tg_ctx *ctx, tg_tensor *y, tg_tensor *const *t)
{
    int ax = y->rank - 1;
    if (y->op == TG_OP_SOFTMAX)
        return tg_mul(ctx, y, tg_sub(ctx, t[0], tg_sum(ctx, tg_mul(ctx, y, t[0]), ax, true)));
    return tg_sub(ctx, t[0], tg_sum(ctx, tg_mul(ctx, tg_exp(ctx, y), t[0]), ax, true));
}

static tg_tensor *jvp_products(tg_ctx *ctx, tg_tensor *y, tg_tensor *const *t)
{
    tg_tensor *a = y->src[0], *b = y->src[1];
    if (y->op == TG_OP_MATMUL) {
        bool ta = y->p.matmul.ta, tb = y->p.matmul.tb;
        return expand(ctx,
                      plus(ctx, t[0] ? tg_matmul(ctx, t[0], b, ta, tb) : NULL,
                           t[1] ? tg_matmul(ctx, a, t[1], ta, tb) : NULL),
                      y);
    }
    if (y->op == TG_OP_EMBEDDING) /* linear in the weight */
        return tg_embedding(ctx, a, t[1]);
    /* dense: dense(t_x, W) + dense(x, t_W, t_b) */
    tg_tensor *bias = y->n_src > 2 ? t[2] : NULL, *r = t[0] ? tg_dense(ctx, t[0], b, NULL) : NULL;
    if (t[1])
        r = plus(ctx, r, tg_dense(ctx, a, t[1], bias));
    else if (bias)
        r = plus(ctx, r, expand(ctx, bias, y));
    return r;
}

static tg_tensor *jvp_shape(tg_ctx *ctx, tg_tensor *y, tg_tensor *const *t)
{
    switch (y->op) {
    case TG_OP_PERMUTE:
    case TG_OP_TRANSPOSE:
        return tg_permute(ctx, t[0], y->p.permute.perm);
    case TG_OP_RESHAPE:
        return tg_reshape(ctx, t[0], y->rank, y->shape);
    case TG_OP_CONTIGUOUS:
        return t[0];
    case TG_OP_NARROW:
        return tg_narrow(ctx, t[0], y->p.narrow.axis, y->p.narrow.start,
                         y->shape[y->p.narrow.axis]);
    default: { /* CONCAT: zeros for a source without a tangent */
        tg_tensor *parts[TG_MAX_SRC];
        for (int k = 0; k < y->n_src; k++) {
            const tg_tensor *x = y->src[k];
            parts[k] = t[k] ? t[k] : tg__filled(ctx, y->dtype, x->rank, x->shape, 0.0, "zeros");
        }
        return tg_concat(ctx, parts, y->n_src, y->p.concat.axis);
    }
    }
}

/* add_mask: additive: t_s + t_m (broadcast); block: t_s where the mask keeps (a block mask
 * has no derivative: with only its tangent, the result's is zero). */
static tg_tensor *jvp_add_mask(tg_ctx *ctx, tg_tensor *y, tg_tensor *const *t)
{
    if (y->p.mask.kind == TG_MASK_ADDITIVE)
        return expand(ctx, plus(ctx, t[0], t[1]), y);
    if (t[0])
        return jvp_diagonal(ctx, y, t);
    return tg__filled(ctx, y->dtype, y->rank, y->shape, 0.0, "zeros");
}

static bool push_all(tg_ctx *ctx, walk *w, int n_in, tg_tensor *const *inputs,
                     tg_tensor *const *tangents, int n_out, tg_tensor *const *outputs,
                     tg_tensor **out_tangents, bool stop);

/* layer_norm: xh = (x - mean) r: t_xh = r (t_c - xh mean(xh t_c)), t_c = t_x - mean(t_x);
 * t_y = t_xh gamma + xh t_gamma + t_beta. */
static tg_tensor *jvp_layer_norm(tg_ctx *ctx, tg_tensor *y, tg_tensor *const *t)
{
    tg_tensor *gamma = y->n_src > 1 ? y->src[1] : NULL, *r = NULL, *inv;
    tg_tensor *xh = tg__layer_norm_xhat(ctx, y, &inv);
    if (t[0]) {
        tg_tensor *tc = tg_sub(ctx, t[0], tg_mean(ctx, t[0], -1, true));
        tg_tensor *txh =
            tg_mul(ctx, inv,
                   tg_sub(ctx, tc, tg_mul(ctx, xh, tg_mean(ctx, tg_mul(ctx, xh, tc), -1, true))));
        r = gamma ? tg_mul(ctx, txh, gamma) : txh;
    }
    if (gamma && t[1])
        r = plus(ctx, r, tg_mul(ctx, xh, t[1]));
    if (y->n_src > 2 && t[2])
        r = plus(ctx, r, t[2]);
    return expand(ctx, r, y);
}

/* Ops with a scalar result (cross-entropy, mse_loss with a reduction): the tangent is
 * sum_k <d y / d src_k, t_k>, the reverse rule's gradients seeded 1. mse_loss 'none':
 * 2 (a - b) (t_a - t_b). */
static tg_tensor *jvp_scalar(tg_ctx *ctx, tg_tensor *y, tg_tensor *const *t)
{
    if (y->rank > 0) /* mse_loss, reduction none */
        return tg_mul(ctx, tg_scale(ctx, tg_sub(ctx, y->src[0], y->src[1]), 2.0),
                      expand(ctx, plus(ctx, t[0], t[1] ? tg_neg(ctx, t[1]) : NULL), y));
    bool need[TG_MAX_SRC];
    tg_tensor *gx[TG_MAX_SRC] = {NULL}, *r = NULL;
    tg_tensor *one = tg__filled(ctx, y->dtype, 0, NULL, 1.0, "one");
    if (!one)
        return NULL;
    for (int k = 0; k < y->n_src; k++)
        need[k] = t[k] != NULL;
    if (!tg__vjp_rule(y)(ctx, y, one, need, gx))
        return NULL;
    for (int k = 0; k < y->n_src; k++)
        if (t[k] && gx[k])
            r = plus(ctx, r, tg_sum_all(ctx, tg_mul(ctx, gx[k], t[k])));
    return r;
}

/* dense_act, flash_attention: the tangent of their unfused form (tg__unfused), its walk
 * stopping at y's sources (distinct, each with its tangent). */
static tg_tensor *jvp_fused(tg_ctx *ctx, tg_tensor *y, tg_tensor *const *t)
{
    uint64_t id0 = ctx->next_id;
    tg_tensor *in[TG_MAX_SRC], *tan[TG_MAX_SRC], *u = tg__unfused(ctx, y), *r = NULL;
    int n = 0;
    for (int k = 0; k < y->n_src; k++) {
        bool again = false;
        for (int j = 0; j < n; j++)
            again |= in[j] == y->src[k];
        if (t[k] && !again) {
            in[n] = y->src[k];
            tan[n++] = t[k];
        }
    }
    walk w = {0};
    bool ok = u && push_all(ctx, &w, n, in, tan, 1, &u, &r, true);
    tg__walk_free(&w);
    return ok && tg__mark_unfused(ctx, &r, 1, id0, y) ? r : NULL;
}

/* dense_act: with ReLU, dense's tangent gated by y > 0 (no recomputed product); GELU through
 * the unfused form (its derivative needs the pre-activation). */
static tg_tensor *jvp_dense_act(tg_ctx *ctx, tg_tensor *y, tg_tensor *const *t)
{
    if (y->p.dense.act != TG_ACT_RELU)
        return jvp_fused(ctx, y, t);
    tg_tensor *tz = jvp_products(ctx, y, t); /* dense's rule reads only the sources */
    return tz ? tg_relu_gate(ctx, tz, y) : NULL;
}

typedef tg_tensor *(*jvp_fn)(tg_ctx *ctx, tg_tensor *y, tg_tensor *const *t);

/* A custom op: the user's rule (tg_custom_def.jvp), its result checked. */
static tg_tensor *jvp_custom(tg_ctx *ctx, tg_tensor *y, tg_tensor *const *t)
{
    tg__custom_vjp_fn vjp;
    tg__custom_jvp_fn jvp;
    void *user;
    tg__custom_rules(y, &vjp, &jvp, &user);
    tg_tensor *r = jvp(ctx, y, y->n_src, y->src, t, user);
    return tg__custom_result_ok(ctx, y, FN, -1, r, y) ? r : NULL;
}

/* The custom op's jvp rule, or NULL. */
static jvp_fn custom_rule(const tg_tensor *y)
{
    tg__custom_vjp_fn vjp;
    tg__custom_jvp_fn jvp;
    void *user;
    tg__custom_rules(y, &vjp, &jvp, &user);
    return jvp ? jvp_custom : NULL;
}

static jvp_fn rule_of(const tg_tensor *y)
{
    switch (y->op) {
    case TG_OP_SCALE:
    case TG_OP_NEG:
    case TG_OP_ADD:
    case TG_OP_SUB:
    case TG_OP_MUL:
    case TG_OP_DIV:
        return jvp_arith;
    case TG_OP_EXP:
    case TG_OP_LOG:
    case TG_OP_SQRT:
    case TG_OP_TANH:
    case TG_OP_SIGMOID:
    case TG_OP_SILU:
    case TG_OP_GELU_TANH:
    case TG_OP_RELU:
    case TG_OP_ERF:
    case TG_OP_GELU:
    case TG_OP_DROPOUT:
        return jvp_diagonal;
    case TG_OP_SUM:
    case TG_OP_MEAN:
        return jvp_reduce;
    case TG_OP_SOFTMAX:
    case TG_OP_LOG_SOFTMAX:
        return jvp_softmax;
    case TG_OP_MAX:
        return jvp_max;
    case TG_OP_RELU_GATE:
        return jvp_relu_gate;
    case TG_OP_CUSTOM:
        return custom_rule(y);
    case TG_OP_MATMUL:
    case TG_OP_DENSE:
    case TG_OP_EMBEDDING:
        return jvp_products;
    case TG_OP_PERMUTE:
    case TG_OP_TRANSPOSE:
    case TG_OP_RESHAPE:
    case TG_OP_CONTIGUOUS:
    case TG_OP_NARROW:
    case TG_OP_CONCAT:
        return jvp_shape;
    case TG_OP_ADD_MASK:
        return jvp_add_mask;
    case TG_OP_LAYER_NORM:
        return jvp_layer_norm;
    case TG_OP_XENT:
    case TG_OP_MSE_LOSS:
        return jvp_scalar;
    case TG_OP_DENSE_ACT:
        return jvp_dense_act;
    case TG_OP_FLASH_ATTN:
        return jvp_fused;
    default:
        return NULL;
    }
}

/* The arguments' rules (tg_jvp's Errors). */
static bool args_ok(tg_ctx *ctx, int n_in, tg_tensor *const *inputs, tg_tensor *const *tangents,
                    int n_out, tg_tensor *const *outputs, tg_tensor **out_tangents)
{
    if (n_in < 1 || n_out < 1 || !inputs || !tangents || !outputs || !out_tangents) {
        tg__err(ctx, TG_ERR_ARG, FN,
                "needs at least one input with its tangent, one output "
                "and an array for the output tangents");
        return false;
    }
    for (int i = 0; i < n_in + n_out; i++) {
        const tg_tensor *x = i < n_in ? inputs[i] : outputs[i - n_in];
        const tg_tensor *u = i < n_in ? tangents[i] : NULL;
        if (!x || x->ctx != ctx || (x->dtype != TG_F32 && x->dtype != TG_F64)) {
            tg__err(ctx, !x || x->ctx != ctx ? TG_ERR_ARG : TG_ERR_DTYPE, FN, "%s %d %s",
                    i < n_in ? "input" : "output", i < n_in ? i : i - n_in,
                    !x              ? "is NULL"
                    : x->ctx != ctx ? "belongs to another context"
                                    : "is not f32 or f64");
            return false;
        }
        if (i < n_in && (!u || u->ctx != ctx || u->dtype != x->dtype || u->rank != x->rank ||
                         memcmp(u->shape, x->shape, sizeof(int64_t) * x->rank) != 0)) {
            tg__err(ctx, TG_ERR_SHAPE, FN,
                    "tangent %d must be a tensor of input %d's shape "
                    "and dtype ('%s')",
                    i, i, x->name);
            return false;
        }
    }
    return true;
}

/* The walk and the pushes (after the argument checks). With @p stop the walk ends at the
 * inputs (distinct; each an independent variable: the tangent of a fused node's unfused form). */
static bool push_all(tg_ctx *ctx, walk *w, int n_in, tg_tensor *const *inputs,
                     tg_tensor *const *tangents, int n_out, tg_tensor *const *outputs,
                     tg_tensor **out_tangents, bool stop)
{
    bool ok = tg__walk_grow(w);
    for (int j = 0; ok && stop && j < n_in; j++)
        ok = tg__walk_find(w, inputs[j]) >= 0 || tg__walk_add(w, inputs[j]);
    for (int i = 0; ok && i < n_out; i++)
        ok = tg__walk_visit(w, outputs[i]);
    tg_tensor **tan = ok ? calloc((size_t)w->n + 1, sizeof *tan) : NULL;
    if (!tan) {
        tg__err(ctx, TG_ERR_NOMEM, FN, "out of memory");
        return false;
    }
    for (int j = 0; j < n_in; j++) { /* an input given twice: its tangents add */
        int64_t k = tg__walk_find(w, inputs[j]);
        if (k >= 0)
            ok = ok && (tan[k] = plus(ctx, tan[k], tangents[j])) != NULL;
    }
    for (int64_t i = 0; ok && i < w->n; i++) {
        tg_tensor *y = w->node[i], *t[TG_MAX_SRC] = {NULL};
        bool any = false;
        for (int k = 0; k < y->n_src; k++) {
            int64_t s = y->src[k] ? tg__walk_find(w, y->src[k]) : -1;
            t[k] = s >= 0 && s != i ? tan[s] : NULL;
            any |= t[k] != NULL;
        }
        if (!any || y->op == TG__OP_LEAF || tan[i] || (stop && i < n_in) ||
            (y->def->flags & TG_OPF_CONSTANT))
            continue; /* no tangent flows in (or an input: given; or a constant of its
                         sources: none flows out) */
        jvp_fn rule = rule_of(y);
        if (!rule) {
            tg__err(ctx, TG_ERR_NOGRAD, FN,
                    "op '%s' (node '%s') has no forward-mode rule written as ops%s",
                    y->def ? y->def->name : "?", y->name,
                    y->op == TG_OP_CUSTOM ? ": give its tg_custom_def a jvp"
                                          : " yet (docs/autodiff.md lists the ops that have one)");
            ok = false;
        } else {
            ok = (tan[i] = rule(ctx, y, t)) != NULL;
        }
    }
    for (int i = 0; ok && i < n_out; i++) {
        const tg_tensor *o = outputs[i];
        tg_tensor *u = tan[tg__walk_find(w, o)];
        if (!u)
            u = tg__filled(ctx, o->dtype, o->rank, o->shape, 0.0, "zero_tangent");
        ok = (out_tangents[i] = u) != NULL;
    }
    free(tan);
    return ok;
}

tg_status tg_jvp(tg_ctx *ctx, int n_in, tg_tensor *const *inputs, tg_tensor *const *tangents,
                 int n_out, tg_tensor *const *outputs, tg_tensor **out_tangents)
{
    if (!ctx)
        return TG_ERR_ARG;
    tg__begin(ctx);
    if (tg__build_failed(ctx))
        return tg_ctx_status(ctx);
    for (int i = 0; out_tangents && i < n_out; i++)
        out_tangents[i] = NULL;
    if (!args_ok(ctx, n_in, inputs, tangents, n_out, outputs, out_tangents))
        return tg_ctx_status(ctx);
    walk w = {0};
    bool ok = push_all(ctx, &w, n_in, inputs, tangents, n_out, outputs, out_tangents, false);
    tg__walk_free(&w);
    if (!ok) {
        for (int i = 0; i < n_out; i++)
            out_tangents[i] = NULL;
        return tg_ctx_status(ctx) != TG_OK ? tg_ctx_status(ctx) : TG_ERR_STATE;
    }
    return TG_OK;
}
