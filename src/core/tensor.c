/*
 * tensor.c - tensor records: leaves, op results, accessors, data copy with dtype conversion,
 * and the shape/broadcast helpers every op builder uses.
 */
#include "registry.h"
#include "vec.h"

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

static tg_tensor *tensor_new(tg_ctx *ctx, const char *fn, tg_kind kind, tg_dtype dt, int rank,
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
    tg_tensor *t = tensor_new(ctx, "tg_param", TG_KIND_PARAM, dt, rank, shape, name, true);
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
    return tensor_new(ctx, "tg_input", TG_KIND_INPUT, dt, rank, shape, name, true);
}

tg_tensor *tg__input_rows(tg_ctx *ctx, tg_tensor *base, int64_t rows, const char *name)
{
    /* internal: base is one of the caller's contiguous leaves (asserted) */
    assert(base && base->op == TG_OP_NONE && !base->base && base->data && base->rank >= 1);
    assert(rows >= 1 && rows <= base->shape[0]);
    int64_t shape[TG_MAX_RANK];
    for (int i = 0; i < base->rank; i++)
        shape[i] = i == 0 ? rows : base->shape[i];
    tg_tensor *t = tensor_new(ctx, "tg_input", TG_KIND_INPUT, base->dtype, base->rank, shape,
                              name, false);
    if (t)
        t->data = base->data;
    return t;
}

tg_tensor *tg_const(tg_ctx *ctx, tg_dtype dt, int rank, const int64_t *shape, const char *name)
{
    return tensor_new(ctx, "tg_const", TG_KIND_CONST, dt, rank, shape, name, true);
}

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
    tg_tensor *t = tensor_new(ctx, fn, TG_KIND_OP, dt, rank, shape, NULL, false);
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

void tg__bcast_strides(const tg_tensor *x, int rank, const int64_t *out_shape, int64_t *st)
{
    int off = rank - x->rank;
    int64_t s = 1;
    for (int i = rank - 1; i >= 0; i--) {
        int ix = i - off;
        if (ix < 0 || x->shape[ix] == 1) {
            st[i] = 0;
        } else {
            st[i] = s;
        }
        if (ix >= 0)
            s *= x->shape[ix];
        (void)out_shape;
    }
}

/* reduce_to_f32 and reduce_to_f64, written once in tensor_kernel.h. */
#define T float
#define SUF f32
#include "tensor_kernel.h"
#undef T
#undef SUF
#define T double
#define SUF f64
#include "tensor_kernel.h"
#undef T
#undef SUF

void tg__reduce_to(int nt, tg_dtype dt, const void *dy, int rank, const int64_t *out_shape,
                   const tg_tensor *x, void *dx)
{
    if (dt == TG_F32)
        reduce_to_f32(nt, dy, rank, out_shape, x, dx);
    else
        reduce_to_f64(nt, dy, rank, out_shape, x, dx);
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

void tg__plus_zero(int nt, tg_dtype dt, int64_t n, void *p)
{
    /* Race-free: each element by one range. */
    size_t es = tg_dtype_size(dt);
    if (dt == TG_F32)
        TG_PAR_RANGE(nt, n * 2 * (int64_t)es > TG_PAR_BYTES, n, 16, plus_zero_f32(p, lo, hi));
    else
        TG_PAR_RANGE(nt, n * 2 * (int64_t)es > TG_PAR_BYTES, n, 16, plus_zero_f64(p, lo, hi));
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
/* Refuse reading an op result whose bytes are not its own (tg__stale): an intermediate value
 * of the graph that computed it (neither an output nor kept: the planner gave its memory to
 * later values), or one whose shared arena another graph has run in since. TG_ERR_STATE
 * naming fn, or TG_OK. */
static tg_status fresh_ok(const tg_tensor *t, const char *fn)
{
    if (!tg__stale(t))
        return TG_OK;
    if (t->reused)
        tg__run_err(t->ctx, TG_ERR_STATE, fn,
                    "'%s' is an intermediate value of its graph (neither an output nor kept): "
                    "its memory went to later values; call tg_keep('%s') before tg_graph_new "
                    "to read it after the run", t->name, t->name);
    else
        tg__run_err(t->ctx, TG_ERR_STATE, fn,
                    "'%s' was computed by a graph whose arena is shared (tg_graph_opts.arena), "
                    "and another graph sharing that arena ran since: its values are gone; run "
                    "its graph again to read it", t->name);
    return TG_ERR_STATE;
}

/* Op results whose bytes are not their own (tg__stale) have no data to give: NULL, with the
 * reason recorded. */
void *tg_tensor_data(tg_tensor *t)
{
    return t && fresh_ok(t, "tg_tensor_data") == TG_OK ? tg__value(t) : NULL;
}
void *tg_tensor_grad(tg_tensor *t)
{
    return t && fresh_ok(t, "tg_tensor_grad") == TG_OK ? tg__grad_value(t) : NULL;
}

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

/* Element i of p (dtype dt) as a double (exact for every dtype but the f32 rounding of
 * nothing: f32 and i32 values are all doubles). */
static double load(const void *p, tg_dtype dt, int64_t i)
{
    switch (dt) {
    case TG_F32: return (double)((const float *)p)[i];
    case TG_I32: return (double)((const int32_t *)p)[i];
    default: return ((const double *)p)[i];
    }
}

/* Store v as element i of p (dtype dt). For i32 the caller has checked tg__i32_ok(v). */
static void store(void *p, tg_dtype dt, int64_t i, double v)
{
    switch (dt) {
    case TG_F32: ((float *)p)[i] = (float)v; break;
    case TG_I32: ((int32_t *)p)[i] = (int32_t)v; break;
    default: ((double *)p)[i] = v; break;
    }
}

/* Convert n elements of sdt at src to ddt at dst (the conversion rule of tg_dtype in tgrad.h).
 * A float to i32 must be an integer in range, an f64 to f32 within the f32 range (tg__f32_ok):
 * every element is checked before anything is written, and the index of the first bad one is
 * returned (nothing written); -1 on success.
 * view: NULL, or a strided view whose data src is: element i is read through its strides. */
static int64_t convert(void *dst, tg_dtype ddt, const void *src, tg_dtype sdt, size_t n,
                       const tg_tensor *view)
{
    if (ddt == sdt && !view) {
        memcpy(dst, src, n * tg_dtype_size(ddt));
        return -1;
    }
#define SRC_AT(i) (view ? tg__elem(view, (int64_t)(i)) : (int64_t)(i))
    if (ddt == TG_I32 && sdt != TG_I32)
        for (size_t i = 0; i < n; i++)
            if (!tg__i32_ok(load(src, sdt, SRC_AT(i))))
                return (int64_t)i;
    if (ddt == TG_F32 && sdt == TG_F64) /* a finite f64 beyond the f32 range: refused */
        for (size_t i = 0; i < n; i++)
            if (!tg__f32_ok(load(src, sdt, SRC_AT(i))))
                return (int64_t)i;
    for (size_t i = 0; i < n; i++)
        store(dst, ddt, (int64_t)i, load(src, sdt, SRC_AT(i)));
#undef SRC_AT
    return -1;
}

/* Record the run error of a failed conversion into ddt: element `bad` of the values copied
 * (from `whose`, e.g. "the source") is not an integer in the i32 range (ddt TG_I32), or is a
 * finite value beyond the f32 range (ddt TG_F32). */
static tg_status convert_err(const tg_tensor *t, const char *fn, const char *whose, int64_t bad,
                             double v, tg_dtype ddt)
{
    if (ddt == TG_F32)
        tg__run_err(t->ctx, TG_ERR_ARG, fn,
                    "element %lld of %s is %.17g, beyond the f32 range (largest finite "
                    "3.4028234663852886e+38) ('%s' %s); nothing was copied",
                    (long long)bad, whose, v, t->name,
                    t->dtype == TG_F32 ? "is f32" : "is read as f32");
    else
        tg__run_err(t->ctx, TG_ERR_ARG, fn,
                    "element %lld of %s is %.17g, not an integer in the i32 range [-2147483648, "
                    "2147483647] ('%s' %s); nothing was copied",
                    (long long)bad, whose, v, t->name,
                    t->dtype == TG_I32 ? "is i32" : "is read as i32");
    return TG_ERR_ARG;
}

/* view: NULL, or the strided view src is the data of (read through its strides). */
static tg_status set_data(tg_tensor *t, const void *src, tg_dtype src_dtype, size_t n,
                          const char *fn, const tg_tensor *view)
{
    if (!t)
        return TG_ERR_ARG;
    tg__begin(t->ctx);
    if (!src || tg_dtype_size(src_dtype) == 0) {
        tg__run_err(t->ctx, TG_ERR_ARG, fn, "NULL source or unknown dtype %d for '%s'",
                    (int)src_dtype, t->name);
        return TG_ERR_ARG;
    }
    if (t->kind == TG_KIND_OP) {
        tg__run_err(t->ctx, TG_ERR_STATE, fn, "'%s' is computed by op '%s'", t->name,
                    tg_tensor_op_name(t));
        return TG_ERR_STATE;
    }
    if (n > (size_t)INT64_MAX || (int64_t)n != t->numel) {
        char b[128];
        tg__run_err(t->ctx, TG_ERR_SHAPE, fn, "'%s' %s has %lld elements, got %zu", t->name,
                    tg__shape_str(t, b, sizeof b), (long long)t->numel, n);
        return TG_ERR_SHAPE;
    }
    int64_t bad = convert(tg__value(t), t->dtype, src, src_dtype, n, view);
    if (bad >= 0)
        return convert_err(t, fn, "the source", bad,
                           load(src, src_dtype, view ? tg__elem(view, bad) : bad), t->dtype);
    return TG_OK;
}

tg_status tg_tensor_set_data(tg_tensor *t, const void *src, tg_dtype src_dtype, size_t n)
{
    return set_data(t, src, src_dtype, n, "tg_tensor_set_data", NULL);
}

/* Shared checks of the copy-out functions; records a message on t's context. */
static tg_status copy_out_ok(const tg_tensor *t, const void *dst, tg_dtype dst_dtype, size_t n,
                             const char *fn)
{
    if (!t)
        return TG_ERR_ARG;
    tg__begin(t->ctx);
    if (!dst || tg_dtype_size(dst_dtype) == 0) {
        tg__run_err(t->ctx, TG_ERR_ARG, fn, "NULL destination or unknown dtype %d",
                    (int)dst_dtype);
        return TG_ERR_ARG;
    }
    if (n > (size_t)INT64_MAX || (int64_t)n != t->numel) {
        char b[128];
        tg__run_err(t->ctx, TG_ERR_SHAPE, fn, "'%s' %s has %lld elements, asked for %zu", t->name,
                tg__shape_str(t, b, sizeof b), (long long)t->numel, n);
        return TG_ERR_SHAPE;
    }
    return TG_OK;
}

tg_status tg_tensor_get_data(const tg_tensor *t, void *dst, tg_dtype dst_dtype, size_t n)
{
    tg_status s = copy_out_ok(t, dst, dst_dtype, n, "tg_tensor_get_data");
    if (s == TG_OK)
        s = fresh_ok(t, "tg_tensor_get_data");
    if (s != TG_OK)
        return s;
    if (!tg__value(t)) {
        tg__run_err(t->ctx, TG_ERR_STATE, "tg_tensor_get_data",
                    "'%s' has no data (an op result not computed by a live graph)", t->name);
        return TG_ERR_STATE;
    }
    if (!tg__is_contiguous(t)) { /* a strided view: element by element */
        for (size_t i = 0; i < n; i++) {
            double v = load(tg__value(t), t->dtype, tg__elem(t, (int64_t)i));
            if ((dst_dtype == TG_I32 && !tg__i32_ok(v)) ||
                (dst_dtype == TG_F32 && t->dtype == TG_F64 && !tg__f32_ok(v)))
                return convert_err(t, "tg_tensor_get_data", "the data", (int64_t)i, v,
                                   dst_dtype);
            store(dst, dst_dtype, (int64_t)i, v);
        }
        return TG_OK;
    }
    int64_t bad = convert(dst, dst_dtype, tg__value(t), t->dtype, n, NULL);
    if (bad >= 0)
        return convert_err(t, "tg_tensor_get_data", "the data", bad, load(tg__value(t), t->dtype, bad),
                           dst_dtype);
    return TG_OK;
}

tg_status tg_tensor_get_grad(const tg_tensor *t, void *dst, tg_dtype dst_dtype, size_t n)
{
    tg_status s = copy_out_ok(t, dst, dst_dtype, n, "tg_tensor_get_grad");
    if (s == TG_OK)
        s = fresh_ok(t, "tg_tensor_get_grad");
    if (s != TG_OK)
        return s;
    if (!tg__grad_value(t)) {
        tg__run_err(t->ctx, TG_ERR_NOGRAD, "tg_tensor_get_grad",
                "'%s' has no gradient (not differentiable, or no graph built with it)", t->name);
        return TG_ERR_NOGRAD;
    }
    int64_t bad = convert(dst, dst_dtype, tg__grad_value(t), t->dtype, n, NULL);
    if (bad >= 0)
        return convert_err(t, "tg_tensor_get_grad", "the gradient", bad,
                           load(tg__grad_value(t), t->dtype, bad), dst_dtype);
    return TG_OK;
}

tg_status tg_tensor_copy(tg_tensor *dst, const tg_tensor *src)
{
    if (!dst || !src)
        return TG_ERR_ARG;
    tg__begin(dst->ctx);
    if (dst->rank != src->rank || dst->numel != src->numel ||
        memcmp(dst->shape, src->shape, sizeof(int64_t) * (size_t)dst->rank) != 0) {
        char a[128], b[128];
        tg__run_err(dst->ctx, TG_ERR_SHAPE, "tg_tensor_copy", "'%s' is %s but '%s' is %s",
                dst->name, tg__shape_str(dst, a, sizeof a), src->name,
                tg__shape_str(src, b, sizeof b));
        return TG_ERR_SHAPE;
    }
    if (fresh_ok(src, "tg_tensor_copy") != TG_OK)
        return TG_ERR_STATE;
    const tg_tensor *view = NULL;
    if (tg__value(src) && !tg__is_contiguous(src)) { /* a strided view: read through its strides */
        if (src->base == dst) { /* its elements would be overwritten while being read */
            tg__run_err(dst->ctx, TG_ERR_ARG, "tg_tensor_copy",
                        "'%s' is a strided view of '%s' itself; copy it into another tensor "
                        "first", src->name, dst->name);
            return TG_ERR_ARG;
        }
        view = src;
    }
    return set_data(dst, tg__value(src), src->dtype, (size_t)src->numel, "tg_tensor_copy", view);
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

/* Can v be stored in t? (Integer tensors take integers in range, f32 tensors values within the
 * f32 range (tg__f32_ok); records a run error naming fn otherwise.) */
static bool value_ok(tg_tensor *t, const char *fn, double v)
{
    if (t->dtype == TG_F32 && !tg__f32_ok(v)) {
        tg__run_err(t->ctx, TG_ERR_ARG, fn,
                    "%.17g is beyond the f32 range (largest finite 3.4028234663852886e+38; "
                    "'%s' is f32); nothing was changed", v, t->name);
        return false;
    }
    if (t->dtype != TG_I32 || tg__i32_ok(v))
        return true;
    tg__run_err(t->ctx, TG_ERR_ARG, fn,
                "%.17g is not an integer in the i32 range [-2147483648, 2147483647] ('%s' is "
                "i32); nothing was changed", v, t->name);
    return false;
}

double tg_get(const tg_tensor *t, int64_t flat)
{
    if (!t || flat < 0 || flat >= t->numel || !tg__value(t) || fresh_ok(t, "tg_get") != TG_OK)
        return NAN;
    return load(tg__value(t), t->dtype, tg__elem(t, flat));
}

void tg_set(tg_tensor *t, int64_t flat, double v)
{
    if (!t || flat < 0 || flat >= t->numel || !tg__value(t) || fresh_ok(t, "tg_set") != TG_OK)
        return;
    if (value_ok(t, "tg_set", v))
        store(tg__value(t), t->dtype, tg__elem(t, flat), v);
}

double tg_grad_get(const tg_tensor *t, int64_t flat)
{
    if (!t || flat < 0 || flat >= t->numel || !tg__grad_value(t) || fresh_ok(t, "tg_grad_get") != TG_OK)
        return NAN;
    return load(tg__grad_value(t), t->dtype, flat);
}

double tg_get_at(const tg_tensor *t, const int64_t *idx)
{
    if (!t || (t->rank > 0 && !idx))
        return NAN;
    int64_t flat = 0;
    for (int i = 0; i < t->rank; i++) {
        if (idx[i] < 0 || idx[i] >= t->shape[i])
            return NAN;
        flat = flat * t->shape[i] + idx[i];
    }
    return tg_get(t, flat);
}

void tg_fill(tg_tensor *t, double v)
{
    if (!t || !tg__value(t))
        return;
    if (!value_ok(t, "tg_fill", v))
        return;
    for (int64_t i = 0; i < t->numel; i++) /* a view of a leaf: through its strides */
        store(tg__value(t), t->dtype, tg__elem(t, i), v);
}

/* Random fills make non-integers: an integer tensor is refused (run error, nothing changed). */
static bool fill_float_ok(tg_tensor *t, const char *fn)
{
    if (tg_dtype_is_float(t->dtype))
        return true;
    tg__run_err(t->ctx, TG_ERR_DTYPE, fn,
                "'%s' is %s: random values are not integers (use tg_set or tg_tensor_set_data)",
                t->name, tg_dtype_str(t->dtype));
    return false;
}

/* The random values must be finite in the tensor's dtype: @p lo and @p hi (uniform) or the
 * reach of a normal draw, |mean| + 40 std (tg_rng_normal never goes past ~38.5 std), within
 * the dtype's finite range, and the width hi - lo finite in f64. Checked before any value is drawn, so a
 * refusal changes neither the tensor nor the RNG (run error TG_ERR_ARG). */
static bool fill_range_ok(tg_tensor *t, const char *fn, const char *what, double a, double b,
                          double reach, double width)
{
    bool f32 = t->dtype == TG_F32;
    if (isfinite(a) && isfinite(b) && isfinite(reach) && isfinite(width) &&
        (!f32 || tg__f32_ok(reach)))
        return true;
    tg__run_err(t->ctx, TG_ERR_ARG, fn,
                "%s %.17g, %.17g give values beyond the %s range of '%s' (largest finite %s); "
                "nothing was changed", what, a, b, tg_dtype_str(t->dtype), t->name,
                f32 ? "3.4028234663852886e+38" : "1.7976931348623157e+308");
    return false;
}

void tg_fill_uniform(tg_tensor *t, double lo, double hi)
{
    if (!t || !tg__value(t) || !fill_float_ok(t, "tg_fill_uniform"))
        return;
    if (!fill_range_ok(t, "tg_fill_uniform", "bounds", lo, hi,
                       fabs(lo) > fabs(hi) ? fabs(lo) : fabs(hi), hi - lo))
        return;
    for (int64_t i = 0; i < t->numel; i++)
        store(tg__value(t), t->dtype, tg__elem(t, i), lo + (hi - lo) * tg_rng_uniform(t->ctx));
}

void tg_fill_normal(tg_tensor *t, double mean, double std)
{
    if (!t || !tg__value(t) || !fill_float_ok(t, "tg_fill_normal"))
        return;
    if (!fill_range_ok(t, "tg_fill_normal", "mean and std", mean, std,
                       fabs(mean) + 40 * fabs(std), 0))
        return;
    for (int64_t i = 0; i < t->numel; i++)
        store(tg__value(t), t->dtype, tg__elem(t, i), mean + std * tg_rng_normal(t->ctx));
}

void tg_zero_grad(tg_tensor *t)
{
    if (t && tg__grad_value(t))
        memset(tg__grad_value(t), 0, (size_t)t->numel * tg_dtype_size(t->dtype));
}
