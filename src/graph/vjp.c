/*
 * vjp.c - layer 3: reverse rules as ops (vjp.h): for each op with one, the gradients of its
 * sources built from ordinary op builders, so their own backward kernels (and rules)
 * differentiate them again. The formulas are the backward kernels' (include/tgrad.h documents
 * each op's gradient); fused ops are written unfused (softmax, log-softmax, layer norm). The
 * ops without a rule yet are listed in docs/autodiff.md; tg_grad refuses them by name.
 */
#include "vjp.h"
#include "registry.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

tg_tensor *tg__filled(tg_ctx *ctx, tg_dtype dt, int rank, const int64_t *shape, double v,
                      const char *name)
{
    tg_tensor *c = tg_const(ctx, dt, rank, shape, name);
    if (c)
        tg_fill(c, v);
    return c;
}

static tg_tensor *scalar(tg_ctx *ctx, tg_dtype dt, double v)
{
    return tg__filled(ctx, dt, 0, NULL, v, v == 1 ? "one" : "constant");
}

tg_tensor *tg__sum_to(tg_ctx *ctx, tg_tensor *g, const tg_tensor *like)
{
    if (!g)
        return NULL;
    if (like->rank == 0)
        return g->rank == 0 ? g : tg_sum_all(ctx, g);
    while (g && g->rank > like->rank) /* leading axes like lacks */
        g = tg_sum(ctx, g, 0, false);
    for (int i = 0; g && i < like->rank; i++)
        if (like->shape[i] == 1 && g->shape[i] != 1)
            g = tg_sum(ctx, g, i, true);
    return g;
}

/* ---- linear and elementwise ops ------------------------------------------------------------ */

static bool vjp_scale(tg_ctx *ctx, tg_tensor *y, tg_tensor *gy, const bool *need, tg_tensor **gx)
{
    (void)need;
    return (gx[0] = tg_scale(ctx, gy, y->p.scale.s)) != NULL;
}

static bool vjp_add_sub(tg_ctx *ctx, tg_tensor *y, tg_tensor *gy, const bool *need, tg_tensor **gx)
{
    if (need[0] && !(gx[0] = tg__sum_to(ctx, gy, y->src[0])))
        return false;
    if (need[1])
        gx[1] = tg__sum_to(ctx, y->op == TG_OP_SUB ? tg_neg(ctx, gy) : gy, y->src[1]);
    return !need[1] || gx[1];
}

static bool vjp_mul(tg_ctx *ctx, tg_tensor *y, tg_tensor *gy, const bool *need, tg_tensor **gx)
{
    tg_tensor *a = y->src[0], *b = y->src[1];
    if (need[0] && !(gx[0] = tg__sum_to(ctx, tg_mul(ctx, gy, b), a)))
        return false;
    return !need[1] || (gx[1] = tg__sum_to(ctx, tg_mul(ctx, gy, a), b));
}

/* y = a / b: da = gy / b, db = -gy y / b. */
static bool vjp_div(tg_ctx *ctx, tg_tensor *y, tg_tensor *gy, const bool *need, tg_tensor **gx)
{
    tg_tensor *a = y->src[0], *b = y->src[1];
    if (need[0] && !(gx[0] = tg__sum_to(ctx, tg_div(ctx, gy, b), a)))
        return false;
    return !need[1] ||
           (gx[1] = tg__sum_to(ctx, tg_neg(ctx, tg_div(ctx, tg_mul(ctx, gy, y), b)), b));
}

static bool vjp_neg(tg_ctx *ctx, tg_tensor *y, tg_tensor *gy, const bool *need, tg_tensor **gx)
{
    (void)y;
    (void)need;
    return (gx[0] = tg_neg(ctx, gy)) != NULL;
}

static bool vjp_identity(tg_ctx *ctx, tg_tensor *y, tg_tensor *gy, const bool *need, tg_tensor **gx)
{
    (void)ctx;
    (void)y;
    (void)need;
    gx[0] = gy;
    return true;
}

/* exp: gy y; log: gy / x; sqrt: gy / (2 y). */
static bool vjp_exp_log_sqrt(tg_ctx *ctx, tg_tensor *y, tg_tensor *gy, const bool *need,
                             tg_tensor **gx)
{
    (void)need;
    if (y->op == TG_OP_EXP)
        gx[0] = tg_mul(ctx, gy, y);
    else if (y->op == TG_OP_LOG)
        gx[0] = tg_div(ctx, gy, y->src[0]);
    else
        gx[0] = tg_div(ctx, gy, tg_scale(ctx, y, 2.0));
    return gx[0] != NULL;
}

/* tanh: gy (1 - y^2); sigmoid: gy y (1 - y). */
static bool vjp_tanh_sigmoid(tg_ctx *ctx, tg_tensor *y, tg_tensor *gy, const bool *need,
                             tg_tensor **gx)
{
    (void)need;
    tg_tensor *one = scalar(ctx, y->dtype, 1.0);
    tg_tensor *d = y->op == TG_OP_TANH ? tg_sub(ctx, one, tg_mul(ctx, y, y))
                                       : tg_mul(ctx, y, tg_sub(ctx, one, y));
    return (gx[0] = tg_mul(ctx, gy, d)) != NULL;
}

/* silu(x) = x s, s = sigmoid(x): d = s (1 + x (1 - s)). */
static bool vjp_silu(tg_ctx *ctx, tg_tensor *y, tg_tensor *gy, const bool *need, tg_tensor **gx)
{
    (void)need;
    tg_tensor *x = y->src[0], *s = tg_sigmoid(ctx, x), *one = scalar(ctx, y->dtype, 1.0);
    tg_tensor *d = tg_mul(ctx, s, tg_add(ctx, one, tg_mul(ctx, x, tg_sub(ctx, one, s))));
    return (gx[0] = tg_mul(ctx, gy, d)) != NULL;
}

/* gelu_tanh(x) = x/2 (1 + t), t = tanh(u), u = c (x + k x^3):
 * d = (1 + t)/2 + x/2 (1 - t^2) c (1 + 3 k x^2). */
static bool vjp_gelu_tanh(tg_ctx *ctx, tg_tensor *y, tg_tensor *gy, const bool *need,
                          tg_tensor **gx)
{
    (void)need;
    const double c = 0.79788456080286535588, k = 0.044715; /* sqrt(2/pi): ops/unary.c */
    tg_tensor *x = y->src[0], *one = scalar(ctx, y->dtype, 1.0);
    tg_tensor *x2 = tg_mul(ctx, x, x);
    tg_tensor *u = tg_scale(ctx, tg_add(ctx, x, tg_scale(ctx, tg_mul(ctx, x2, x), k)), c);
    tg_tensor *t = tg_tanh(ctx, u);
    tg_tensor *du = tg_scale(ctx, tg_add(ctx, one, tg_scale(ctx, x2, 3 * k)), c);
    tg_tensor *d = tg_add(
        ctx, tg_scale(ctx, tg_add(ctx, one, t), 0.5),
        tg_mul(ctx, tg_scale(ctx, x, 0.5), tg_mul(ctx, tg_sub(ctx, one, tg_mul(ctx, t, t)), du)));
    return (gx[0] = tg_mul(ctx, gy, d)) != NULL;
}

/* ---- reductions and losses ----------------------------------------------------------------- */

/* gy with the reduced axis of @p y (a reduction over axis @p ax without keepdim) back as size 1. */
static tg_tensor *keep_axis(tg_ctx *ctx, tg_tensor *gy, const tg_tensor *y, int ax)
{
    const tg_tensor *x = y->src[0];
    if (y->rank == x->rank)
        return gy;
    int64_t sh[TG_MAX_RANK];
    memcpy(sh, x->shape, sizeof sh);
    sh[ax] = 1;
    return tg_reshape(ctx, gy, x->rank, sh);
}

/* sum / mean: gy broadcast back over the reduced axis (or all), mean divided by its count. */
static bool vjp_sum_mean(tg_ctx *ctx, tg_tensor *y, tg_tensor *gy, const bool *need, tg_tensor **gx)
{
    (void)need;
    tg_tensor *x = y->src[0];
    int64_t n = x->numel;
    tg_tensor *g = gy;
    if (!y->p.reduce.all) {
        n = x->shape[y->p.reduce.axis];
        g = keep_axis(ctx, gy, y, y->p.reduce.axis); /* keepdim false: the axis back */
    }
    if (y->op == TG_OP_MEAN)
        g = tg_scale(ctx, g, 1.0 / (double)n);
    tg_tensor *ones = tg__filled(ctx, x->dtype, x->rank, x->shape, 1.0, "ones");
    return (gx[0] = tg_mul(ctx, ones, g)) != NULL;
}

/* dropout: gy keep s; max: gy at the first arg-max. Both through the mask of the same run
 * (grad_mask, read from the node's saved values), so the rule is the backward kernel's. */
static bool vjp_dropout_max(tg_ctx *ctx, tg_tensor *y, tg_tensor *gy, const bool *need,
                            tg_tensor **gx)
{
    (void)need;
    tg_tensor *g = y->op == TG_OP_MAX ? keep_axis(ctx, gy, y, y->p.max.axis) : gy;
    return (gx[0] = tg_mul(ctx, tg__grad_mask(ctx, y), g)) != NULL;
}

/* mse: d input = 2 (input - target) gy / N (mean; sum and none: N = 1), d target = -that. */
static bool vjp_mse(tg_ctx *ctx, tg_tensor *y, tg_tensor *gy, const bool *need, tg_tensor **gx)
{
    tg_tensor *a = y->src[0], *b = y->src[1];
    double k = y->p.mse.reduction == TG_REDUCTION_MEAN ? 2.0 / (double)a->numel : 2.0;
    tg_tensor *d = tg_scale(ctx, tg_mul(ctx, tg_sub(ctx, a, b), gy), k);
    if (need[0])
        gx[0] = d;
    if (need[1])
        gx[1] = tg_neg(ctx, d);
    return d && (!need[1] || gx[1]);
}

/* softmax over the last axis: gy y - y sum(gy y). */
static bool vjp_softmax(tg_ctx *ctx, tg_tensor *y, tg_tensor *gy, const bool *need, tg_tensor **gx)
{
    (void)need;
    tg_tensor *gyy = tg_mul(ctx, gy, y);
    return (gx[0] = tg_sub(ctx, gyy, tg_mul(ctx, y, tg_sum(ctx, gyy, -1, true)))) != NULL;
}

/* log_softmax over the last axis: gy - exp(y) sum(gy). */
static bool vjp_log_softmax(tg_ctx *ctx, tg_tensor *y, tg_tensor *gy, const bool *need,
                            tg_tensor **gx)
{
    (void)need;
    tg_tensor *s = tg_sum(ctx, gy, -1, true);
    return (gx[0] = tg_sub(ctx, gy, tg_mul(ctx, tg_exp(ctx, y), s))) != NULL;
}

/* layer norm over the last axis, recomputed unfused: xh = (x - mu) r, r = (var + eps)^-1/2;
 * dxh = gy gamma; dx = r (dxh - mean(dxh) - xh mean(dxh xh)); dgamma = sum(gy xh);
 * dbeta = sum(gy). */
tg_tensor *tg__layer_norm_xhat(tg_ctx *ctx, const tg_tensor *y, tg_tensor **inv)
{
    tg_tensor *x = y->src[0];
    tg_tensor *xc = tg_sub(ctx, x, tg_mean(ctx, x, -1, true));
    tg_tensor *var = tg_mean(ctx, tg_mul(ctx, xc, xc), -1, true);
    *inv = tg_div(ctx, scalar(ctx, y->dtype, 1.0),
                  tg_sqrt(ctx, tg_add(ctx, var, scalar(ctx, y->dtype, y->p.layer_norm.eps))));
    return tg_mul(ctx, xc, *inv);
}

static bool vjp_layer_norm(tg_ctx *ctx, tg_tensor *y, tg_tensor *gy, const bool *need,
                           tg_tensor **gx)
{
    tg_tensor *gamma = y->src[1], *beta = y->src[2], *r;
    tg_tensor *xh = tg__layer_norm_xhat(ctx, y, &r);
    if (need[0]) {
        tg_tensor *dxh = gamma ? tg_mul(ctx, gy, gamma) : gy;
        tg_tensor *m1 = tg_mean(ctx, dxh, -1, true);
        tg_tensor *m2 = tg_mean(ctx, tg_mul(ctx, dxh, xh), -1, true);
        gx[0] = tg_mul(ctx, r, tg_sub(ctx, tg_sub(ctx, dxh, m1), tg_mul(ctx, xh, m2)));
        if (!gx[0])
            return false;
    }
    if (gamma && need[1] && !(gx[1] = tg__sum_to(ctx, tg_mul(ctx, gy, xh), gamma)))
        return false;
    return !(beta && need[2]) || (gx[2] = tg__sum_to(ctx, gy, beta));
}

/* ---- products and layout ------------------------------------------------------------------- */

/* y = op(A) op(B) (op: transpose when ta / tb), batch dims broadcast:
 * dA = gy op(B)^T (or its transpose), dB = op(A)^T gy (or its transpose), summed over the
 * broadcast batch dims. */
static bool vjp_matmul(tg_ctx *ctx, tg_tensor *y, tg_tensor *gy, const bool *need, tg_tensor **gx)
{
    tg_tensor *a = y->src[0], *b = y->src[1];
    bool ta = y->p.matmul.ta, tb = y->p.matmul.tb;
    if (need[0]) {
        tg_tensor *d = !ta ? tg_matmul(ctx, gy, b, false, !tb) : tg_matmul(ctx, b, gy, tb, true);
        if (!(gx[0] = tg__sum_to(ctx, d, a)))
            return false;
    }
    if (need[1]) {
        tg_tensor *d = !tb ? tg_matmul(ctx, a, gy, !ta, false) : tg_matmul(ctx, gy, a, true, ta);
        if (!(gx[1] = tg__sum_to(ctx, d, b)))
            return false;
    }
    return true;
}

/* dense: y = x W^T + b over the last axis: dx = gy W, dW = gy^T x (rows of every leading
 * index), db = sum of gy over the rows. */
static bool vjp_dense(tg_ctx *ctx, tg_tensor *y, tg_tensor *gy, const bool *need, tg_tensor **gx)
{
    tg_tensor *x = y->src[0], *w = y->src[1], *b = y->src[2];
    int64_t in = x->shape[x->rank - 1], out = w->shape[0];
    tg_tensor *g2 = tg_reshape(ctx, gy, 2, (const int64_t[]){-1, out}); /* (rows, out) */
    if (need[0] &&
        !(gx[0] = tg_reshape(ctx, tg_matmul(ctx, g2, w, false, false), x->rank, x->shape)))
        return false;
    if (need[1]) {
        tg_tensor *x2 = tg_reshape(ctx, x, 2, (const int64_t[]){-1, in});
        if (!(gx[1] = tg_matmul(ctx, g2, x2, true, false)))
            return false;
    }
    return !(b && need[2]) || (gx[2] = tg_sum(ctx, g2, 0, false));
}

/* permute / transpose: gy permuted back (the inverse permutation). */
static bool vjp_permute(tg_ctx *ctx, tg_tensor *y, tg_tensor *gy, const bool *need, tg_tensor **gx)
{
    (void)need;
    int inv[TG_MAX_RANK];
    for (int i = 0; i < y->rank; i++)
        inv[y->p.permute.perm[i]] = i;
    return (gx[0] = tg_permute(ctx, gy, inv)) != NULL;
}

static bool vjp_reshape(tg_ctx *ctx, tg_tensor *y, tg_tensor *gy, const bool *need, tg_tensor **gx)
{
    (void)need;
    const tg_tensor *x = y->src[0];
    return (gx[0] = tg_reshape(ctx, gy, x->rank, x->shape)) != NULL;
}

/* narrow: gy placed at its start along the axis, zeros before and after (a concat). */
static bool vjp_narrow(tg_ctx *ctx, tg_tensor *y, tg_tensor *gy, const bool *need, tg_tensor **gx)
{
    (void)need;
    const tg_tensor *x = y->src[0];
    int ax = y->p.narrow.axis;
    int64_t start = y->p.narrow.start, len = y->shape[ax], after = x->shape[ax] - start - len;
    tg_tensor *parts[3];
    int n = 0;
    int64_t sh[TG_MAX_RANK];
    memcpy(sh, x->shape, sizeof sh);
    if (start > 0) {
        sh[ax] = start;
        parts[n++] = tg__filled(ctx, y->dtype, x->rank, sh, 0.0, "zeros");
    }
    parts[n++] = gy;
    if (after > 0) {
        sh[ax] = after;
        parts[n++] = tg__filled(ctx, y->dtype, x->rank, sh, 0.0, "zeros");
    }
    return (gx[0] = n == 1 ? gy : tg_concat(ctx, parts, n, ax)) != NULL;
}

/* concat: source k's slice of gy along the axis. */
static bool vjp_concat(tg_ctx *ctx, tg_tensor *y, tg_tensor *gy, const bool *need, tg_tensor **gx)
{
    int ax = y->p.concat.axis;
    int64_t at = 0;
    for (int k = 0; k < y->n_src; k++) {
        int64_t len = y->src[k]->shape[ax];
        if (need[k] && !(gx[k] = tg_narrow(ctx, gy, ax, at, len)))
            return false;
        at += len;
    }
    return true;
}

/* erf: gy 2/sqrt(pi) e^{-x^2}. */
static bool vjp_erf(tg_ctx *ctx, tg_tensor *y, tg_tensor *gy, const bool *need, tg_tensor **gx)
{
    (void)need;
    tg_tensor *x = y->src[0];
    tg_tensor *d = tg_scale(ctx, tg_exp(ctx, tg_neg(ctx, tg_mul(ctx, x, x))),
                            1.12837916709551257390); /* 2 / sqrt(pi) */
    return (gx[0] = tg_mul(ctx, gy, d)) != NULL;
}

/* gelu (exact): gy (Phi(x) + x phi(x)), Phi(x) = (1 + erf(x / sqrt 2)) / 2,
 * phi(x) = e^{-x^2 / 2} / sqrt(2 pi). */
static bool vjp_gelu(tg_ctx *ctx, tg_tensor *y, tg_tensor *gy, const bool *need, tg_tensor **gx)
{
    (void)need;
    tg_tensor *x = y->src[0];
    tg_tensor *cdf = tg_scale(ctx,
                              tg_add(ctx, scalar(ctx, y->dtype, 1.0),
                                     tg_erf(ctx, tg_scale(ctx, x, 0.70710678118654752440))),
                              0.5);
    tg_tensor *pdf = tg_scale(ctx, tg_exp(ctx, tg_scale(ctx, tg_mul(ctx, x, x), -0.5)),
                              0.39894228040143267794); /* 1 / sqrt(2 pi) */
    return (gx[0] = tg_mul(ctx, gy, tg_add(ctx, cdf, tg_mul(ctx, x, pdf)))) != NULL;
}

/* ---- masks, rectifiers and fused ops, through existing ops ---------------------------------- */

/* 1 where @p mask (broadcast to @p like's shape) is 0, else 0: exp of a blocked zero score
 * (exp(0) = 1, exp(-inf) = 0, both exact). Constant in everything (no gradient flows). */
static tg_tensor *keep_where_zero(tg_ctx *ctx, tg_tensor *mask, const tg_tensor *like)
{
    tg_tensor *z = tg__filled(ctx, like->dtype, like->rank, like->shape, 0.0, "zeros");
    return tg_exp(ctx, tg_add_mask(ctx, z, mask, TG_MASK_BLOCK));
}

/* add_mask: additive: ds = gy, dm = gy summed onto the mask's shape; block: ds = gy where the
 * mask keeps (0 where it blocks), the mask has no gradient. */
static bool vjp_add_mask(tg_ctx *ctx, tg_tensor *y, tg_tensor *gy, const bool *need, tg_tensor **gx)
{
    tg_tensor *m = y->src[1];
    if (y->p.mask.kind == TG_MASK_BLOCK)
        return !need[0] || (gx[0] = tg_mul(ctx, gy, keep_where_zero(ctx, m, y))) != NULL;
    if (need[0] && !(gx[0] = gy))
        return false;
    return !need[1] || (gx[1] = tg__sum_to(ctx, gy, m)) != NULL;
}

/* relu: gy where y > 0 (the kernel's rule: 0 at x = 0), i.e. 1 - [y == 0]. */
static bool vjp_relu(tg_ctx *ctx, tg_tensor *y, tg_tensor *gy, const bool *need, tg_tensor **gx)
{
    (void)need;
    return (gx[0] = tg_relu_gate(ctx, gy, y)) != NULL;
}

/* relu_gate(t, r): gt = relu_gate(gy, r); r gets none (the indicator is piecewise constant). */
static bool vjp_relu_gate(tg_ctx *ctx, tg_tensor *y, tg_tensor *gy, const bool *need,
                          tg_tensor **gx)
{
    return !need[0] || (gx[0] = tg_relu_gate(ctx, gy, y->src[1])) != NULL;
}

/* cross_entropy (label smoothing eps, ignore_index): dz = gy (softmax(z) [row kept] - q) / N,
 * q = (1 - eps) onehot(t) + eps / V on the rows kept (zero rows where t is ignored), N the
 * rows kept (taken as 1 when none is, as the kernel gives 0 then). */
static bool vjp_cross_entropy(tg_ctx *ctx, tg_tensor *y, tg_tensor *gy, const bool *need,
                              tg_tensor **gx)
{
    if (!need[0])
        return true;
    tg_tensor *z = y->src[0];
    int ax = z->rank - 1;
    int64_t V = z->shape[ax];
    double eps = y->p.xent.label_smoothing;
    tg_tensor *oh = tg_one_hot(ctx, y->src[1], V, y->p.xent.ignore_index, y->dtype);
    tg_tensor *kept = tg_sum(ctx, oh, ax, true); /* 1 per row kept, 0 per row ignored */
    tg_tensor *q =
        eps > 0 ? tg_add(ctx, tg_scale(ctx, oh, 1 - eps), tg_scale(ctx, kept, eps / (double)V))
                : oh;
    tg_tensor *n = tg_sum_all(ctx, kept), *one = scalar(ctx, y->dtype, 1.0);
    tg_tensor *n1 = tg_add(ctx, n, tg_relu(ctx, tg_sub(ctx, one, n))); /* max(n, 1) */
    tg_tensor *d = tg_sub(ctx, tg_mul(ctx, tg_softmax(ctx, z), kept), q);
    return (gx[0] = tg_mul(ctx, d, tg_div(ctx, gy, n1))) != NULL;
}

/* embedding: dW = onehot(ids)^T gy over the positions (the scatter-add as a product). */
static bool vjp_embedding(tg_ctx *ctx, tg_tensor *y, tg_tensor *gy, const bool *need,
                          tg_tensor **gx)
{
    if (!need[1])
        return true;
    tg_tensor *w = y->src[1];
    int64_t V = w->shape[0], D = w->shape[1];
    tg_tensor *oh =
        tg_reshape(ctx, tg_one_hot(ctx, y->src[0], V, -1, y->dtype), 2, (const int64_t[]){-1, V});
    tg_tensor *g2 = tg_reshape(ctx, gy, 2, (const int64_t[]){-1, D});
    return (gx[1] = tg_matmul(ctx, oh, g2, true, false)) != NULL;
}

bool tg__mark_unfused(tg_ctx *ctx, tg_tensor *const *r, int n, uint64_t id0, const tg_tensor *y)
{
    size_t cap = 64, top = 0;
    tg_tensor **st = malloc(cap * sizeof *st);
    for (int i = 0; st && i < n; i++)
        if (r[i] && r[i]->id >= id0 && !r[i]->unfused_of) {
            r[i]->unfused_of = y;
            st[top++] = r[i];
            while (st && top) { /* depth first over what it was made from since id0 */
                tg_tensor *t = st[--top];
                for (int k = 0; k < t->n_src; k++) {
                    tg_tensor *s = t->src[k];
                    if (!s || s->id < id0 || s->unfused_of)
                        continue;
                    s->unfused_of = y;
                    tg_tensor **grown = top == cap ? realloc(st, (cap *= 2) * sizeof *st) : st;
                    if (!grown)
                        free(st);
                    st = grown;
                    if (st)
                        st[top++] = s;
                }
            }
        }
    free(st);
    if (!st)
        tg__err(ctx, TG_ERR_NOMEM, "tg_grad", "out of memory");
    return st != NULL;
}

/* A fused node's rule as its unfused equivalent (built from y's sources) differentiated with
 * respect to those sources; the nodes made for it are marked as y's unfused form. */
static bool unfused(tg_ctx *ctx, tg_tensor *y, tg_tensor *gy, const bool *need, tg_tensor **gx)
{
    uint64_t id0 = ctx->next_id;
    tg_tensor *u = tg__unfused(ctx, y);
    return u && tg__grad_partial(ctx, u, gy, y->n_src, y->src, need, gx) &&
           tg__mark_unfused(ctx, gx, y->n_src, id0, y);
}

/* dense_act: act(dense(x, W, b)). */
static tg_tensor *dense_act_unfused(tg_ctx *ctx, tg_tensor *y)
{
    tg_tensor *z = tg_dense(ctx, y->src[0], y->src[1], y->n_src > 2 ? y->src[2] : NULL);
    return y->p.dense.act == TG_ACT_GELU ? tg_gelu(ctx, z) : tg_relu(ctx, z);
}

/* flash_attention: softmax(scale q k^T (+ mask) (+ block mask) (+ causal mask)) v. */
static tg_tensor *flash_attention_unfused(tg_ctx *ctx, tg_tensor *y)
{
    tg__flash_attn_desc d;
    tg__flash_attn_describe(y, &d);
    tg_tensor *q = y->src[0], *k = y->src[1], *v = y->src[2];
    tg_tensor *s = tg_scale(ctx, tg_matmul(ctx, q, k, false, true), d.scale);
    if (d.src_mask >= 0)
        s = tg_add_mask(ctx, s, y->src[d.src_mask], d.kind);
    if (d.src_block >= 0)
        s = tg_add_mask(ctx, s, y->src[d.src_block], TG_MASK_BLOCK);
    if (d.causal && s) {
        int64_t tq = q->shape[q->rank - 2], tk = k->shape[k->rank - 2];
        tg_tensor *c = tg__filled(ctx, y->dtype, 2, (const int64_t[]){tq, tk}, 0.0, "causal_mask");
        for (int64_t i = 0; c && i < tq; i++)
            for (int64_t j = i + 1; j < tk; j++)
                tg_set(c, i * tk + j, 1.0);
        s = tg_add_mask(ctx, s, c, TG_MASK_BLOCK);
    }
    return tg_matmul(ctx, tg_softmax(ctx, s), v, false, false);
}

tg_tensor *tg__unfused(tg_ctx *ctx, tg_tensor *y)
{
    return y->op == TG_OP_DENSE_ACT    ? dense_act_unfused(ctx, y)
           : y->op == TG_OP_FLASH_ATTN ? flash_attention_unfused(ctx, y)
                                       : NULL;
}

static bool vjp_fused(tg_ctx *ctx, tg_tensor *y, tg_tensor *gy, const bool *need, tg_tensor **gx)
{
    /* dense_act with ReLU: dense's rule on gy gated by y > 0 (no recomputed product) */
    if (y->op == TG_OP_DENSE_ACT && y->p.dense.act == TG_ACT_RELU)
        return vjp_dense(ctx, y, tg_relu_gate(ctx, gy, y), need, gx);
    return unfused(ctx, y, gy, need, gx);
}

bool tg__custom_result_ok(tg_ctx *ctx, const tg_tensor *y, const char *rule, int k,
                          const tg_tensor *r, const tg_tensor *like)
{
    if (r && r->ctx == ctx && r->dtype == like->dtype && r->rank == like->rank &&
        !memcmp(r->shape, like->shape, sizeof(int64_t) * (size_t)like->rank))
        return true;
    if (tg_ctx_status(ctx) != TG_OK)
        return false; /* a builder's error is already there */
    char what[48] = "the tangent";
    if (k >= 0)
        snprintf(what, sizeof what, "the gradient of input %d", k);
    tg__err(ctx, TG_ERR_SHAPE, rule, "custom op '%s' (node '%s'): its %s rule gave %s %s",
            y->def->name, y->name, k < 0 ? "jvp" : "vjp", what,
            r ? "of another shape, dtype or context than the op's" : "as NULL");
    return false;
}

/* A custom op: the user's rule (tg_custom_def.vjp), its results checked. */
static bool vjp_custom(tg_ctx *ctx, tg_tensor *y, tg_tensor *gy, const bool *need, tg_tensor **gx)
{
    tg__custom_vjp_fn vjp;
    tg__custom_jvp_fn jvp;
    void *user;
    tg__custom_rules(y, &vjp, &jvp, &user);
    if (vjp(ctx, y, y->n_src, y->src, gy, need, gx, user) != TG_OK) {
        if (tg_ctx_status(ctx) == TG_OK)
            tg__err(ctx, TG_ERR_ARG, "tg_grad", "custom op '%s' (node '%s'): its vjp rule failed",
                    y->def->name, y->name);
        return false;
    }
    for (int k = 0; k < y->n_src; k++)
        if (need[k] && !tg__custom_result_ok(ctx, y, "tg_grad", k, gx[k], y->src[k]))
            return false;
    return true;
}

/* The custom op's vjp rule, or NULL. */
static tg__vjp_fn custom_rule(const tg_tensor *y)
{
    tg__custom_vjp_fn vjp;
    tg__custom_jvp_fn jvp;
    void *user;
    tg__custom_rules(y, &vjp, &jvp, &user);
    return vjp ? vjp_custom : NULL;
}

tg__vjp_fn tg__vjp_rule(const tg_tensor *y)
{
    switch (y->op) {
    case TG_OP_CUSTOM:
        return custom_rule(y);
    case TG_OP_SCALE:
        return vjp_scale;
    case TG_OP_ADD:
    case TG_OP_SUB:
        return vjp_add_sub;
    case TG_OP_MUL:
        return vjp_mul;
    case TG_OP_DIV:
        return vjp_div;
    case TG_OP_NEG:
        return vjp_neg;
    case TG_OP_CONTIGUOUS:
        return vjp_identity;
    case TG_OP_EXP:
    case TG_OP_LOG:
    case TG_OP_SQRT:
        return vjp_exp_log_sqrt;
    case TG_OP_TANH:
    case TG_OP_SIGMOID:
        return vjp_tanh_sigmoid;
    case TG_OP_SILU:
        return vjp_silu;
    case TG_OP_GELU_TANH:
        return vjp_gelu_tanh;
    case TG_OP_SUM:
    case TG_OP_MEAN:
        return vjp_sum_mean;
    case TG_OP_MSE_LOSS:
        return vjp_mse;
    case TG_OP_SOFTMAX:
        return vjp_softmax;
    case TG_OP_LOG_SOFTMAX:
        return vjp_log_softmax;
    case TG_OP_LAYER_NORM:
        return vjp_layer_norm;
    case TG_OP_MATMUL:
        return vjp_matmul;
    case TG_OP_DENSE:
        return vjp_dense;
    case TG_OP_PERMUTE:
    case TG_OP_TRANSPOSE:
        return vjp_permute;
    case TG_OP_RESHAPE:
        return vjp_reshape;
    case TG_OP_NARROW:
        return vjp_narrow;
    case TG_OP_CONCAT:
        return vjp_concat;
    case TG_OP_ADD_MASK:
        return vjp_add_mask;
    case TG_OP_RELU:
        return vjp_relu;
    case TG_OP_RELU_GATE:
        return vjp_relu_gate;
    case TG_OP_ERF:
        return vjp_erf;
    case TG_OP_GELU:
        return vjp_gelu;
    case TG_OP_XENT:
        return vjp_cross_entropy;
    case TG_OP_EMBEDDING:
        return vjp_embedding;
    case TG_OP_DENSE_ACT:
    case TG_OP_FLASH_ATTN:
        return vjp_fused;
    case TG_OP_DROPOUT:
    case TG_OP_MAX:
        return vjp_dropout_max;
    default:
        return NULL;
    }
}
