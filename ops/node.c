/*
 * node.c - layer 2: recording an op node (the builders' common path: source checks, contiguous
 * copies of views, the registry entry), op-node introspection, and the broadcast helpers the
 * op kernels share.
 */
#include "registry.h"
#include "vec.h"

#include <assert.h>
#include <stdio.h>

tg_tensor *tg__op_new(tg_ctx *ctx, int op, tg_dtype dt, int rank, const int64_t *shape,
                      int n_src, tg_tensor *const *src)
{
    const tg_op_def *def = &tg__op_table[op];
    char fn[64]; /* errors name the builder, e.g. "tg_matmul" */
    snprintf(fn, sizeof fn, "tg_%s", def->name);
    if (tg__build_failed(ctx))
        return NULL; /* a build error is pending: record nothing more, allocate nothing */
    /* A kernel that does not read strides gets contiguous sources: copy views first. */
    tg_tensor *s2[TG_MAX_SRC];
    for (int i = 0; i < n_src; i++) {
        s2[i] = src[i];
        if (src[i] && !(def->flags & TG_OPF_STRIDED) && !tg__is_contiguous(src[i])) {
            s2[i] = tg__contiguous(ctx, src[i]);
            if (!s2[i])
                return NULL;
        }
    }
    /* The output buffer belongs to the graph that runs the node (planned, bound at run). */
    tg_tensor *t = tg__tensor_new(ctx, fn, TG_KIND_OP, dt, rank, shape, NULL, false);
    if (!t)
        return NULL;
    /* the op's name and the tensor's own id, unique in the context: taken after the
     * contiguous copies above, which have ids of their own ("contiguous19" then
     * "reshape20", never two nodes numbered 19) */
    snprintf(t->name, sizeof t->name, "%s%llu", def->name, (unsigned long long)t->id);
    t->auto_name = true;
    t->op = op;
    t->def = def;
    t->n_src = n_src;
    tg_mark made = tg_ctx_mark(ctx); /* just after t: stale once a rewind releases t */
    for (int i = 0; i < n_src; i++) {
        t->src[i] = s2[i];
        if (s2[i]) {
            if (!tg__consumed(s2[i])) { /* keep the oldest op still reading it */
                s2[i]->consumed = true;
                s2[i]->consumed_by = made;
            }
            if (s2[i]->requires_grad)
                t->requires_grad = true;
        }
    }
    return t;
}

bool tg__op_save(tg_tensor *y, size_t bytes)
{
    /* Declared here, placed by the planner, bound by the graph at run time. */
    y->saved_bytes = bytes;
    return true;
}

bool tg__op_save_n(tg_tensor *y, int64_t n, size_t es, size_t extra)
{
    size_t bytes;
    if (!tg__bytes(n, es, &bytes) || bytes > SIZE_MAX - extra ||
        bytes + extra > (size_t)TG__MAX_NUMEL) {
        char b[160], fn[64];
        snprintf(fn, sizeof fn, "tg_%s", y->def->name);
        tg__err(y->ctx, TG_ERR_OVERFLOW, fn,
                "values saved for backward of %s: %lld x %zu bytes overflow",
                tg__shape_str(y, b, sizeof b), (long long)n, es);
        tg__free(y->ctx, y);
        return false;
    }
    return tg__op_save(y, bytes + extra);
}

bool tg__check_srcs_ids(tg_ctx *ctx, const char *fn, int n, tg_tensor *const *src, int ids,
                        const char *role)
{
    if (!ctx)
        return false;
    tg__begin(ctx);
    if (tg__build_failed(ctx))
        return false; /* a build error is pending: refuse silently, keep it */
    for (int i = 0; i < n; i++)
        if (!src[i])
            return false; /* propagate NULL silently: the first error is already recorded */
    const tg_tensor *first = NULL; /* the first float operand: the others must match it */
    for (int i = 0; i < n; i++) {
        if (src[i]->ctx != ctx) {
            tg__err(ctx, TG_ERR_ARG, fn, "operand %d ('%s') belongs to another context", i,
                    src[i]->name);
            return false;
        }
        if (i == ids) {
            if (src[i]->dtype != TG_I32) {
                tg__err(ctx, TG_ERR_DTYPE, fn,
                        "%s '%s' is %s; %s must be i32 (copy float values into a TG_I32 "
                        "tensor with tg_tensor_set_data, which checks they are integers)",
                        role, src[i]->name, tg_dtype_str(src[i]->dtype), role);
                return false;
            }
            continue;
        }
        if (!tg_dtype_is_float(src[i]->dtype)) {
            tg__err(ctx, TG_ERR_DTYPE, fn, "'%s' is %s; this op needs f32 or f64", src[i]->name,
                    tg_dtype_str(src[i]->dtype));
            return false;
        }
        if (!first)
            first = src[i];
        if (src[i]->dtype != first->dtype) {
            tg__err(ctx, TG_ERR_DTYPE, fn, "dtypes differ: '%s' is %s, '%s' is %s", first->name,
                    tg_dtype_str(first->dtype), src[i]->name, tg_dtype_str(src[i]->dtype));
            return false;
        }
    }
    return true;
}

bool tg__check_srcs(tg_ctx *ctx, const char *fn, int n, tg_tensor *const *src)
{
    return tg__check_srcs_ids(ctx, fn, n, src, -1, NULL);
}

tg_tensor *tg__binary_new(tg_ctx *ctx, int op, const char *fn, tg_tensor *a, tg_tensor *b)
{
    tg_tensor *src[2] = {a, b};
    if (!tg__check_srcs(ctx, fn, 2, src))
        return NULL;
    int64_t shape[TG_MAX_RANK];
    int r;
    if (!tg__broadcast_shape(a->rank, a->shape, b->rank, b->shape, &r, shape)) {
        char sa[128], sb[128];
        return tg__err(ctx, TG_ERR_SHAPE, fn, "shapes do not broadcast: a is %s, b is %s",
                       tg__shape_str(a, sa, sizeof sa), tg__shape_str(b, sb, sizeof sb));
    }
    return tg__op_new(ctx, op, a->dtype, r, shape, 2, src);
}

bool tg__broadcast_shape(int ra, const int64_t *a, int rb, const int64_t *b, int *rout,
                         int64_t *out)
{
    int r = ra > rb ? ra : rb;
    if (r > TG_MAX_RANK)
        return false;
    for (int i = 0; i < r; i++) {
        int ia = i - (r - ra), ib = i - (r - rb);
        int64_t da = ia >= 0 ? a[ia] : 1, db = ib >= 0 ? b[ib] : 1;
        if (da != db && da != 1 && db != 1)
            return false;
        out[i] = da > db ? da : db;
    }
    *rout = r;
    return true;
}

void tg__bcast_strides(int xrank, const int64_t *xshape, int rank, int64_t *st)
{
    int off = rank - xrank;
    int64_t s = 1;
    for (int i = rank - 1; i >= 0; i--) {
        int ix = i - off;
        if (ix < 0 || xshape[ix] == 1) {
            st[i] = 0;
        } else {
            st[i] = s;
        }
        if (ix >= 0)
            s *= xshape[ix];
    }
}

/* reduce_to_f32 and reduce_to_f64, written once in node_kernel.h. */
#define T float
#define SUF f32
#include "node_kernel.h"
#undef T
#undef SUF
#define T double
#define SUF f64
#include "node_kernel.h"
#undef T
#undef SUF

void tg__reduce_to(tg__govs *govs, int nt, tg_dtype dt, const void *dy, int rank, const int64_t *out_shape,
                   int xrank, const int64_t *xshape, void *dx)
{
    if (dt == TG_F32)
        reduce_to_f32(govs, nt, dy, rank, out_shape, xrank, xshape, dx);
    else
        reduce_to_f64(govs, nt, dy, rank, out_shape, xrank, xshape, dx);
}

TG_SIMD_CLONES static void plus_zero_f32(float *x, int64_t lo, int64_t hi)
{
    for (int64_t i = lo; i < hi; i++)
        x[i] = 0.0f + x[i];
}

TG_SIMD_CLONES static void plus_zero_f64(double *x, int64_t lo, int64_t hi)
{
    for (int64_t i = lo; i < hi; i++)
        x[i] = 0.0 + x[i];
}

void tg__plus_zero(tg__govs *govs, int nt, tg_dtype dt, int64_t n, void *p)
{
    /* Race-free: each element by one range. */
    size_t es = tg_dtype_size(dt);
    if (dt == TG_F32)
        TG_PAR_RANGE_IN(govs, nt, n * 2 * (int64_t)es > TG_PAR_BYTES, n, 16,
                        plus_zero_f32(p, lo, hi));
    else
        TG_PAR_RANGE_IN(govs, nt, n * 2 * (int64_t)es > TG_PAR_BYTES, n, 16,
                        plus_zero_f64(p, lo, hi));
}

const char *tg_tensor_op_name(const tg_tensor *t)
{
    if (!t)
        return "";
    if (t->op != TG_OP_NONE)
        return t->def->name; /* a custom op's own name */
    static const char *const kinds[] = {"param", "input", "const", "op"};
    return kinds[t->kind];
}

int tg_tensor_op_index(const tg_tensor *t)
{
    return (t && t->op != TG_OP_NONE) ? t->op - 1 : -1; /* registry slot 0 is the leaf */
}

int tg_tensor_n_srcs(const tg_tensor *t) { return t ? t->n_src : 0; }

tg_tensor *tg_tensor_src(const tg_tensor *t, int i)
{
    return (t && i >= 0 && i < t->n_src) ? t->src[i] : NULL;
}

bool tg_tensor_is_view(const tg_tensor *t)
{
    /* base: a view made by the builder; an aliasing op (reshape) shares its source's buffer in
     * every engine */
    return t && (t->base != NULL || (t->def && (t->def->flags & TG_OPF_ALIAS)));
}

const tg_tensor *tg_tensor_unfused_of(const tg_tensor *t) { return t ? t->unfused_of : NULL; }

tg_status tg_set_requires_grad(tg_tensor *t, bool requires_grad)
{
    if (!t)
        return TG_ERR_ARG;
    if (requires_grad && !tg_dtype_is_float(t->dtype)) {
        tg__err(t->ctx, TG_ERR_DTYPE, "tg_set_requires_grad",
                "'%s' is %s: integer tensors have no gradient", t->name, tg_dtype_str(t->dtype));
        return TG_ERR_DTYPE;
    }
    if (t->kind == TG_KIND_INPUT) {
        if (t->requires_grad == requires_grad)
            return TG_OK;
        if (tg__consumed(t)) {
            /* The ops built on t recorded whether they need gradients; changing t now would
             * leave them stale (backward silently gave a zero gradient). */
            tg__err(t->ctx, TG_ERR_STATE, "tg_set_requires_grad",
                    "input '%s' is already read by an op; call it before building ops on '%s'",
                    t->name, t->name);
            return TG_ERR_STATE;
        }
        t->requires_grad = requires_grad;
        return TG_OK;
    }
    if (t->kind == TG_KIND_PARAM && requires_grad)
        return TG_OK;
    tg__err(t->ctx, TG_ERR_ARG, "tg_set_requires_grad",
            "'%s' is a %s; only inputs can change whether they require grad", t->name,
            tg_tensor_op_name(t));
    return TG_ERR_ARG;
}

