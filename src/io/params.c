/*
 * params.c - load and save parameters by name (PyTorch `state_dict` keys) through safetensors.
 * Strict by default, like `load_state_dict(strict=True)`: a missing, unexpected or mis-shaped
 * tensor is an error naming it, and nothing is modified unless everything matches.
 */
#include "tgrad_io.h"
#include "core.h"
#include "io.h"

#include <stdio.h>

static tg_tensor *const *all_params(tg_ctx *ctx, int64_t *n, tg_tensor *const *params)
{
    if (params)
        return params;
    *n = ctx->n_params;
    return ctx->params;
}

/* Is @p name optimizer state of one of @p params (n of them): "adam.m.<p>", "adam.v.<p>" or
 * "sgd.momentum.<p>", as tg_checkpoint_save() writes it? */
static bool is_optim_state(const char *name, int64_t n, tg_tensor *const *params)
{
    static const char *const prefixes[] = {"adam.m.", "adam.v.", "sgd.momentum."};
    for (size_t k = 0; k < sizeof prefixes / sizeof prefixes[0]; k++) {
        size_t pl = strlen(prefixes[k]);
        if (strncmp(name, prefixes[k], pl) != 0)
            continue;
        for (int64_t i = 0; i < n; i++)
            if (!strcmp(params[i]->name, name + pl))
                return true;
    }
    return false;
}

/* The loader; @p skip_optim: with @p strict, a file tensor that is optimizer state of a
 * loaded parameter is not unexpected (it is skipped). */
static tg_status load_from(tg_ctx *ctx, const char *fn, const tg_safetensors *st, int64_t n,
                           tg_tensor *const *params, bool strict, bool skip_optim)
{
    if (!ctx || !st || n < 0)
        return TG_ERR_ARG;
    params = all_params(ctx, &n, params);
    /* validate everything first so that a mismatch leaves every parameter untouched */
    for (int64_t i = 0; i < n; i++) {
        tg_tensor *p = params[i];
        if (!p || p->ctx != ctx) {
            tg__err(ctx, TG_ERR_ARG, fn, "entry %lld %s", (long long)i,
                    p ? "belongs to another context" : "is NULL");
            return TG_ERR_ARG;
        }
        tg_tensor *f = tg_safetensors_find(st, p->name);
        if (!f) {
            tg__err(ctx, TG_ERR_MISMATCH, fn, "missing tensor '%s' (expected shape %s)", p->name,
                    tg__shape_str(p, (char[128]){0}, 128));
            return TG_ERR_MISMATCH;
        }
        if (f->rank != p->rank || memcmp(f->shape, p->shape, sizeof(int64_t) * (size_t)p->rank)) {
            char a[128], b[128];
            tg__err(ctx, TG_ERR_MISMATCH, fn, "tensor '%s' has shape %s in the file, expected %s",
                    p->name, tg__shape_str(f, a, sizeof a), tg__shape_str(p, b, sizeof b));
            return TG_ERR_MISMATCH;
        }
        if (!tg_dtype_is_float(p->dtype) && tg_dtype_is_float(f->dtype)) {
            /* float -> i32 could fail half-way: refused here, so nothing is modified */
            tg__err(ctx, TG_ERR_MISMATCH, fn, "tensor '%s' is %s in the file, but '%s' is %s",
                    p->name, tg_dtype_str(f->dtype), p->name, tg_dtype_str(p->dtype));
            return TG_ERR_MISMATCH;
        }
        if (p->dtype == TG_F32 && f->dtype == TG_F64) { /* f64 -> f32: within the f32 range */
            const double *v = f->data;
            for (int64_t k = 0; k < f->numel; k++)
                if (!tg__f32_ok(v[k])) {
                    tg__err(ctx, TG_ERR_FORMAT, fn, "tensor '%s' element %lld is %.17g in the "
                            "file, beyond the f32 range of '%s' (largest finite "
                            "3.4028234663852886e+38); nothing was loaded", p->name,
                            (long long)k, v[k], p->name);
                    return TG_ERR_FORMAT;
                }
        }
    }
    if (strict) {
        for (int64_t k = 0; k < tg_safetensors_count(st); k++) {
            const char *name = tg_safetensors_name(st, k);
            bool found = false;
            for (int64_t i = 0; i < n && !found; i++)
                found = strcmp(params[i]->name, name) == 0;
            if (!found && skip_optim)
                found = is_optim_state(name, n, params);
            if (!found) {
                char b[112];
                tg__err(ctx, TG_ERR_MISMATCH, fn, "unexpected tensor '%s' in the file",
                        tg__quote(name, 100, b));
                return TG_ERR_MISMATCH;
            }
        }
    }
    for (int64_t i = 0; i < n; i++) { /* cannot fail after the checks above */
        tg_tensor *f = tg_safetensors_find(st, params[i]->name);
        tg_status s = tg_tensor_copy(params[i], f);
        if (s != TG_OK)
            return s;
    }
    return TG_OK;
}

tg_status tg__params_load_from(tg_ctx *ctx, const char *fn, const tg_safetensors *st, int64_t n,
                               tg_tensor *const *params, bool strict)
{
    return load_from(ctx, fn, st, n, params, strict, false);
}

static tg_status tg_params_load_from_io(tg_ctx *ctx, const tg_safetensors *st, int64_t n,
                                        tg_tensor *const *params, bool strict)
{
    return load_from(ctx, "tg_params_load_from", st, n, params, strict, true);
}

tg_status tg_params_load_from(tg_ctx *ctx, const tg_safetensors *st, int64_t n,
                              tg_tensor *const *params, bool strict)
{
    tg__io_enter(ctx);
    tg_status r = tg_params_load_from_io(ctx, st, n, params, strict);
    tg__io_leave(ctx);
    return r;
}

static tg_status tg_params_load_io(tg_ctx *ctx, const char *path, int64_t n,
                                   tg_tensor *const *params, bool strict)
{
    if (!ctx || !path)
        return TG_ERR_ARG;
    tg_safetensors *st = tg_safetensors_read(ctx, path);
    if (!st)
        return tg_ctx_status(ctx);
    return load_from(ctx, "tg_params_load", st, n, params, strict, true);
}

tg_status tg_params_load(tg_ctx *ctx, const char *path, int64_t n, tg_tensor *const *params,
                         bool strict)
{
    tg__io_enter(ctx);
    tg_status r = tg_params_load_io(ctx, path, n, params, strict);
    tg__io_leave(ctx);
    return r;
}

static tg_status tg_params_save_io(tg_ctx *ctx, const char *path, int64_t n,
                                   tg_tensor *const *params, int64_t n_meta,
                                   const char *const *meta_keys, const char *const *meta_values)
{
    if (!ctx || !path || n < 0)
        return TG_ERR_ARG;
    params = all_params(ctx, &n, params);
    return tg_safetensors_write(ctx, path, n, (const tg_tensor *const *)params, NULL, n_meta,
                                meta_keys, meta_values);
}

tg_status tg_params_save(tg_ctx *ctx, const char *path, int64_t n, tg_tensor *const *params,
                         int64_t n_meta, const char *const *meta_keys,
                         const char *const *meta_values)
{
    tg__io_enter(ctx);
    tg_status r = tg_params_save_io(ctx, path, n, params, n_meta, meta_keys, meta_values);
    tg__io_leave(ctx);
    return r;
}
