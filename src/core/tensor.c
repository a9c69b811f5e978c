/*
 * tensor.c - layer 1: tensor records (leaves and the record of an op result), their metadata
 * accessors and the shape helpers. Recording an op is ops/node.c's; reading and writing
 * values, src/graph/values.c's (an op result's memory is its graph's).
 */
#include "core.h"

#include <assert.h>
#include <stdio.h>

const char *tg__dims_str(int rank, const int64_t *shape, char *buf, size_t n)
{
    size_t k = 0;
    if (n == 0)
        return buf;
    buf[0] = '\0';
    k += (size_t)snprintf(buf + k, n - k, "(");
    for (int i = 0; i < rank && k < n; i++)
        k += (size_t)snprintf(buf + k, n - k, i ? ", %lld" : "%lld", (long long)shape[i]);
    if (k < n)
        snprintf(buf + k, n - k, ")");
    return buf;
}

const char *tg__shape_str(const tg_tensor *t, char *buf, size_t n)
{
    return tg__dims_str(t->rank, t->shape, buf, n);
}

const char *tg_tensor_shape_str(const tg_tensor *t, char *buf, size_t n)
{
    if (!t || !buf)
        return "";
    return tg__shape_str(t, buf, n);
}

void tg__contiguous_strides(int rank, const int64_t *shape, int64_t *stride)
{
    int64_t s = 1;
    for (int i = TG_MAX_RANK - 1; i >= 0; i--) {
        stride[i] = i < rank ? s : 1;
        if (i < rank)
            s *= shape[i];
    }
}

bool tg__is_contiguous(const tg_tensor *t)
{
    int64_t s = 1;
    for (int i = t->rank - 1; i >= 0; i--) {
        if (t->shape[i] != 1 && t->stride[i] != s)
            return false;
        s *= t->shape[i];
    }
    return true;
}

int tg__axis(int axis, int rank)
{
    if (axis < 0)
        axis += rank;
    return (axis >= 0 && axis < rank) ? axis : -1;
}

/* Validate rank/shape, compute numel with overflow check: numel <= TG__MAX_NUMEL, so numel
 * times the element size fits in int64, and it must fit in size_t too. */
static bool shape_ok(tg_ctx *ctx, const char *fn, int rank, const int64_t *shape, size_t es,
                     int64_t *numel)
{
    if (rank < 0 || rank > TG_MAX_RANK) {
        tg__err(ctx, TG_ERR_ARG, fn, "rank %d out of range 0..%d", rank, TG_MAX_RANK);
        return false;
    }
    if (rank > 0 && !shape) {
        tg__err(ctx, TG_ERR_ARG, fn, "shape is NULL for rank %d", rank);
        return false;
    }
    char b[160];
    int64_t n = 1;
    for (int i = 0; i < rank; i++) {
        if (shape[i] < 1) {
            tg__err(ctx, TG_ERR_SHAPE, fn, "dim %d is %lld in shape %s (every dim must be >= 1)",
                    i, (long long)shape[i], tg__dims_str(rank, shape, b, sizeof b));
            return false;
        }
        if (!tg__mul_i64(n, shape[i], &n) || n > TG__MAX_NUMEL) {
            tg__err(ctx, TG_ERR_OVERFLOW, fn,
                    "shape %s is too large (at most %lld elements)",
                    tg__dims_str(rank, shape, b, sizeof b), (long long)TG__MAX_NUMEL);
            return false;
        }
    }
    size_t bytes;
    if (!tg__bytes(n, es, &bytes)) {
        tg__err(ctx, TG_ERR_OVERFLOW, fn, "shape %s: %lld elements of %zu bytes overflow size_t",
                tg__dims_str(rank, shape, b, sizeof b), (long long)n, es);
        return false;
    }
    *numel = n;
    return true;
}

tg_tensor *tg__tensor_new(tg_ctx *ctx, const char *fn, tg_kind kind, tg_dtype dt, int rank,
                         const int64_t *shape, const char *name, bool alloc_data)
{
    if (!ctx)
        return NULL;
    tg__begin(ctx);
    if (tg_dtype_size(dt) == 0)
        return tg__err(ctx, TG_ERR_DTYPE, fn, "unknown dtype %d", (int)dt);
    if (kind == TG_KIND_PARAM && !tg_dtype_is_float(dt))
        return tg__err(ctx, TG_ERR_DTYPE, fn,
                       "dtype %s for '%s': parameters are f32 or f64 (integer tensors have no "
                       "gradient)", tg_dtype_str(dt), name ? name : "(unnamed)");
    int64_t numel;
    if (!shape_ok(ctx, fn, rank, shape, tg_dtype_size(dt), &numel))
        return NULL;
    tg_tensor *t = tg__alloc(ctx, sizeof *t, fn);
    if (!t)
        return NULL;
    t->ctx = ctx;
    t->id = ctx->next_id++;
    t->dtype = dt;
    t->kind = kind;
    t->rank = rank;
    for (int i = 0; i < TG_MAX_RANK; i++)
        t->shape[i] = i < rank ? shape[i] : 1;
    tg__contiguous_strides(rank, t->shape, t->stride);
    t->numel = numel;
    t->requires_grad = (kind == TG_KIND_PARAM);
    if (name) {
        snprintf(t->name, sizeof t->name, "%s", name);
    } else {
        static const char *const kinds[] = {"param", "input", "const", "op"};
        snprintf(t->name, sizeof t->name, "%s%llu", kinds[kind], (unsigned long long)t->id);
        t->auto_name = true;
    }
    if (alloc_data) {
        t->data = tg__alloc(ctx, (size_t)numel * tg_dtype_size(dt), fn);
        if (!t->data) {
            tg__free(ctx, t);
            return NULL;
        }
    }
    return t;
}

tg_tensor *tg_param(tg_ctx *ctx, tg_dtype dt, int rank, const int64_t *shape, const char *name)
{
    tg_tensor *t = tg__tensor_new(ctx, "tg_param", TG_KIND_PARAM, dt, rank, shape, name, true);
    if (!t)
        return NULL;
    if (ctx->n_params == ctx->cap_params) {
        int64_t nc = ctx->cap_params ? 2 * ctx->cap_params : 32;
        tg_tensor **np = tg__alloc_owned(ctx, sizeof *np * (size_t)nc, "tg_param", TG__OWNER_CTX);
        if (!np) {
            tg__free(ctx, t->data);
            tg__free(ctx, t);
            return NULL;
        }
        if (ctx->params)
            memcpy(np, ctx->params, sizeof *np * (size_t)ctx->n_params);
        tg__free(ctx, ctx->params);
        ctx->params = np;
        ctx->cap_params = nc;
    }
    ctx->params[ctx->n_params++] = t;
    return t;
}

int64_t tg_ctx_n_params(const tg_ctx *ctx) { return ctx ? ctx->n_params : 0; }

tg_tensor *tg_ctx_param(const tg_ctx *ctx, int64_t i)
{
    return (ctx && i >= 0 && i < ctx->n_params) ? ctx->params[i] : NULL;
}

tg_tensor *tg_ctx_find_param(const tg_ctx *ctx, const char *name)
{
    if (!ctx || !name)
        return NULL;
    for (int64_t i = 0; i < ctx->n_params; i++)
        if (strcmp(ctx->params[i]->name, name) == 0)
            return ctx->params[i];
    return NULL;
}

tg_tensor *tg_input(tg_ctx *ctx, tg_dtype dt, int rank, const int64_t *shape, const char *name)
{
    return tg__tensor_new(ctx, "tg_input", TG_KIND_INPUT, dt, rank, shape, name, true);
}

tg_tensor *tg__input_rows(tg_ctx *ctx, tg_tensor *base, int64_t rows, const char *name)
{
    /* internal: base is one of the caller's contiguous leaves (asserted) */
    assert(base && base->op == TG__OP_LEAF && !base->base && base->data && base->rank >= 1);
    assert(rows >= 1 && rows <= base->shape[0]);
    int64_t shape[TG_MAX_RANK];
    for (int i = 0; i < base->rank; i++)
        shape[i] = i == 0 ? rows : base->shape[i];
    tg_tensor *t = tg__tensor_new(ctx, "tg_input", TG_KIND_INPUT, base->dtype, base->rank, shape,
                              name, false);
    if (t)
        t->data = base->data;
    return t;
}

tg_tensor *tg_const(tg_ctx *ctx, tg_dtype dt, int rank, const int64_t *shape, const char *name)
{
    return tg__tensor_new(ctx, "tg_const", TG_KIND_CONST, dt, rank, shape, name, true);
}

/* ----- accessors ------------------------------------------------------------------------- */
tg_ctx *tg_tensor_ctx(const tg_tensor *t) { return t ? t->ctx : NULL; }
tg_dtype tg_tensor_dtype(const tg_tensor *t) { return t ? t->dtype : TG_F32; }
tg_kind tg_tensor_kind(const tg_tensor *t) { return t ? t->kind : TG_KIND_CONST; }
int tg_tensor_rank(const tg_tensor *t) { return t ? t->rank : 0; }
const int64_t *tg_tensor_shape(const tg_tensor *t) { return t ? t->shape : NULL; }
int64_t tg_tensor_numel(const tg_tensor *t) { return t ? t->numel : 0; }
bool tg_tensor_requires_grad(const tg_tensor *t) { return t && t->requires_grad; }
const char *tg_tensor_name(const tg_tensor *t) { return t ? t->name : ""; }
int64_t tg_tensor_dim(const tg_tensor *t, int axis)
{
    if (!t)
        return -1;
    int a = tg__axis(axis, t->rank);
    return a < 0 ? -1 : t->shape[a];
}

tg_status tg_tensor_set_name(tg_tensor *t, const char *name)
{
    if (!t || !name)
        return TG_ERR_ARG;
    snprintf(t->name, sizeof t->name, "%s", name);
    t->auto_name = false;
    return TG_OK;
}

int64_t tg__elem(const tg_tensor *t, int64_t flat)
{
    if (!t->base)
        return flat;
    int64_t off = 0; /* a view: walk the strides (offset is already in tg__value(t)) */
    for (int i = t->rank - 1; i >= 0; i--) {
        off += (flat % t->shape[i]) * t->stride[i];
        flat /= t->shape[i];
    }
    return off;
}

