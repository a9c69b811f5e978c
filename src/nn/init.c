/*
 * init.c - parameter creation with PyTorch's default initialisations, and the shared mask
 * application used by SDPA and MHA.
 */
#include "nn_internal.h"
#include "core.h"

#include <math.h>
#include <stdio.h>

tg_tensor *tg__nn_param(tg_ctx *ctx, tg_dtype dt, int rank, const int64_t *shape,
                        const char *prefix, const char *name, double bound, bool fill_one)
{
    char full[TG_NAME_MAX];
    if (!ctx || tg__build_failed(ctx))
        return NULL; /* a module build stops at its first failure */
    if (!prefix)
        prefix = "";
    size_t pl = strlen(prefix), nl = strlen(name);
    if (pl > TG_NAME_MAX - 1 - nl) /* a truncated name could collide with another */
        return tg__err(ctx, TG_ERR_ARG, "tg_param",
                       "parameter name '%.40s...%s' would be %zu bytes (at most %d): prefix too "
                       "long", prefix, name, pl + nl, TG_NAME_MAX - 1);
    snprintf(full, sizeof full, "%s%s", prefix, name);
    tg_tensor *t = tg_param(ctx, dt, rank, shape, full);
    if (!t)
        return NULL;
    if (fill_one)
        tg_fill(t, 1.0);
    else if (bound > 0)
        tg_fill_uniform(t, -bound, bound);
    return t;
}

tg__nn_plan tg__nn_plan_begin(tg_ctx *ctx, const char *fn, tg_dtype dt)
{
    tg__nn_plan p = {ctx, fn, tg_dtype_size(dt) ? tg_dtype_size(dt) : 8, 0, true};
    return p;
}

void tg__nn_plan_add(tg__nn_plan *p, int64_t count, int64_t k, int64_t a, int64_t b,
                     const char *what, const char *why)
{
    if (!p->ok)
        return;
    int64_t n;
    size_t bytes;
    if (!tg__mul_i64(k, a, &n) || (b > 0 && !tg__mul_i64(n, b, &n)) || n > TG_MAX_NUMEL) {
        tg__err(p->ctx, TG_ERR_ARG, p->fn,
                "%s too large: %s would hold more than %lld elements", why, what,
                (long long)TG_MAX_NUMEL);
        p->ok = false;
        return;
    }
    if (!tg__bytes(n, p->es, &bytes) || !tg__mul_size(bytes, (size_t)count, &bytes) ||
        bytes > SIZE_MAX - p->bytes) {
        tg__err(p->ctx, TG_ERR_ARG, p->fn, "%s too large: the parameters would need more than "
                "%zu bytes", why, (size_t)SIZE_MAX);
        p->ok = false;
        return;
    }
    p->bytes += bytes;
}

tg_status tg__nn_plan_end(tg__nn_plan *p)
{
    tg_ctx *ctx = p->ctx;
    if (!p->ok)
        return ctx->status;
    size_t lim = ctx->mem_limit, used = ctx->bytes;
    if (lim && (used > lim || p->bytes > lim - used)) {
        tg__err(ctx, TG_ERR_NOMEM, p->fn,
                "the parameters need %zu bytes, which would exceed the memory limit of %zu bytes "
                "(%zu in use)", p->bytes, lim, used);
        p->ok = false;
        return TG_ERR_NOMEM;
    }
    return TG_OK;
}

tg_status tg__nn_init_begin(tg_ctx *ctx, void *m, size_t size)
{
    if (!ctx)
        return TG_ERR_ARG;
    if (m)
        memset(m, 0, size);
    tg__begin(ctx);
    return tg__build_failed(ctx) ? ctx->status : TG_OK;
}

tg_status tg__nn_status(const tg_ctx *ctx)
{
    return tg__build_failed(ctx) ? ctx->status : TG_OK;
}

/* (t_q, t_k) for a constant built by fn: sizes >= 1 and representable. */
static bool square_ok(tg_ctx *ctx, const char *fn, int64_t a, int64_t b, const char *na,
                      const char *nb)
{
    int64_t n;
    if (a < 1 || b < 1) {
        tg__err(ctx, TG_ERR_SHAPE, fn, "%s %lld and %s %lld must both be >= 1", na,
                (long long)a, nb, (long long)b);
        return false;
    }
    if (!tg__mul_i64(a, b, &n) || n > TG_MAX_NUMEL) {
        tg__err(ctx, TG_ERR_SHAPE, fn, "(%s, %s) = (%lld, %lld) is too large (at most %lld "
                "elements)", na, nb, (long long)a, (long long)b, (long long)TG_MAX_NUMEL);
        return false;
    }
    return true;
}

tg_tensor *tg_causal_mask(tg_ctx *ctx, tg_dtype dt, int64_t t_q, int64_t t_k)
{
    if (!ctx)
        return NULL;
    tg__begin(ctx);
    if (tg__build_failed(ctx) || !square_ok(ctx, "tg_causal_mask", t_q, t_k, "t_q", "t_k"))
        return NULL;
    tg_tensor *m = tg_const(ctx, dt, TG_DIMS(t_q, t_k), "causal_mask");
    if (!m)
        return NULL;
    for (int64_t i = 0; i < t_q; i++)
        for (int64_t j = 0; j < t_k; j++)
            tg_set(m, i * t_k + j, j > i ? 1.0 : 0.0);
    return m;
}

tg_tensor *tg__nn_sinusoidal(tg_ctx *ctx, tg_dtype dt, int64_t t, int64_t d)
{
    if (!ctx)
        return NULL;
    tg__begin(ctx);
    if (tg__build_failed(ctx) || !square_ok(ctx, "tg_sinusoidal_encoding", t, d, "t", "d"))
        return NULL;
    return tg_const(ctx, dt, TG_DIMS(t, d), "sinusoidal_pe");
}

bool tg__nn_prepare_masks(tg_ctx *ctx, const char *fn, const tg_attn_masks *masks, bool mha,
                          int64_t b, int64_t t_q, int64_t t_k, tg__nn_masks *out)
{
    memset(out, 0, sizeof *out);
    out->kind = TG_MASK_ADDITIVE;
    if (!masks)
        return true;
    if (masks->key_padding_mask && !mha) {
        tg__err(ctx, TG_ERR_ARG, fn,
                "key_padding_mask is an MHA option; for SDPA pass the padding as attn_mask "
                "shaped to broadcast over the scores, e.g. (B, 1, T_k)");
        return false;
    }
    /* Masks are float tensors (tgrad_nn.h): an integer mask is named here, not by the op that
     * would first refuse it (a reshape inside this module). */
    tg_tensor *const given[2] = {masks->attn_mask, mha ? masks->key_padding_mask : NULL};
    static const char *const field[2] = {"attn_mask", "key_padding_mask"};
    for (int i = 0; i < 2; i++)
        if (given[i] && !tg_dtype_is_float(tg_tensor_dtype(given[i]))) {
            tg__err(ctx, TG_ERR_DTYPE, fn, "%s '%s' is %s; masks are float tensors in the "
                    "inputs' dtype (convert a 0/1 integer mask with tg_tensor_copy() into a "
                    "float constant)", field[i], tg_tensor_name(given[i]),
                    tg_dtype_str(tg_tensor_dtype(given[i])));
            return false;
        }
    if (masks->attn_mask) {
        tg_tensor *m = masks->attn_mask;
        if (mha) {
            int mr = tg_tensor_rank(m);
            const int64_t *ms = tg_tensor_shape(m);
            bool ok2 = mr == 2 && ms[0] == t_q && ms[1] == t_k;
            bool ok3 = mr == 3 && ms[0] == b && ms[1] == t_q && ms[2] == t_k;
            if (!ok2 && !ok3) {
                char bm[128];
                tg__err(ctx, TG_ERR_SHAPE, fn,
                        "attn_mask %s must be (T_q, T_k) = (%lld, %lld) or (B, T_q, T_k) = "
                        "(%lld, %lld, %lld)",
                        tg_tensor_shape_str(m, bm, sizeof bm), (long long)t_q, (long long)t_k,
                        (long long)b, (long long)t_q, (long long)t_k);
                return false;
            }
            if (ok3) /* (B, T_q, T_k) -> (B, 1, T_q, T_k): same mask for every head */
                m = tg_reshape(ctx, m, TG_DIMS(ms[0], 1, t_q, t_k));
            if (!m)
                return false;
        }
        out->attn = m;
        out->kind = masks->attn_mask_kind;
    }
    if (masks->key_padding_mask && mha) {
        tg_tensor *p = masks->key_padding_mask;
        const int64_t *ps = tg_tensor_shape(p);
        if (tg_tensor_rank(p) != 2 || ps[0] != b || ps[1] != t_k) {
            char bp[128];
            tg__err(ctx, TG_ERR_SHAPE, fn, "key_padding_mask %s must be (B, T_k) = (%lld, %lld)",
                    tg_tensor_shape_str(p, bp, sizeof bp), (long long)b, (long long)t_k);
            return false;
        }
        out->pad = tg_reshape(ctx, p, TG_DIMS(ps[0], 1, 1, t_k)); /* (B, 1, 1, T_k) */
        if (!out->pad)
            return false;
    }
    out->causal = masks->causal;
    return true;
}

tg_tensor *tg__nn_apply_masks(tg_ctx *ctx, const char *fn, tg_tensor *scores,
                              const tg_attn_masks *masks, bool mha)
{
    if (!scores || !masks)
        return scores;
    int r = tg_tensor_rank(scores);
    const int64_t *s = tg_tensor_shape(scores);
    int64_t t_q = s[r - 2], t_k = s[r - 1];
    tg__nn_masks pm;
    if (!tg__nn_prepare_masks(ctx, fn, masks, mha, s[0], t_q, t_k, &pm))
        return NULL;
    tg_tensor *out = scores;
    if (pm.attn)
        out = tg_add_mask(ctx, out, pm.attn, pm.kind);
    if (pm.pad)
        out = tg_add_mask(ctx, out, pm.pad, TG_MASK_BLOCK);
    if (pm.causal && out)
        out = tg_add_mask(ctx, out, tg_causal_mask(ctx, tg_tensor_dtype(scores), t_q, t_k),
                          TG_MASK_BLOCK);
    return out;
}
