/*
 * values.c - layer 3: reading and writing tensor values. A leaf's values are its own; an op
 * result's live in the plan of the graph that last ran it (tg__value, exec.c), so every access
 * first asks whether those bytes are still the tensor's (tg__stale).
 */
#include "graph_internal.h"

#include <math.h>
#include <stdio.h>

/* Refuse reading an op result whose bytes are not its own (tg__stale): an intermediate value
 * of the graph that computed it (neither an output nor kept: the planner gave its memory to
 * later values), or one whose shared arena another graph has run in since. TG_ERR_STATE
 * naming fn, or TG_OK. */
static tg_status fresh_ok(const tg_tensor *t, const char *fn)
{
    int why = tg__stale_why(t);
    if (why == TG__FRESH)
        return TG_OK;
    if (why == TG__STALE_REUSED)
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
