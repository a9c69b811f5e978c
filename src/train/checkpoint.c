/*
 * checkpoint.c - training checkpoints as safetensors: parameters by name, optimizer state
 * (adam.m.*, adam.v.*, sgd.momentum.*), and metadata (caller's config plus optim.step and the
 * context RNG state). Saving is atomic through the safetensors writer (temporary file in the
 * same directory, fsync, rename), so a failed save never damages the previous checkpoint.
 */
#include "tgrad_train.h"
#include "io/io.h"
#include "vec.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Are opt's parameters (and so its state) ctx's? Otherwise a run error (the I/O calls'
 * kind) naming fn. NULL opt: yes. */
static bool optim_of(tg_ctx *ctx, const char *fn, const tg_optim *opt)
{
    for (int64_t i = 0; i < tg_optim_n_params(opt); i++) {
        const tg_tensor *p = tg_optim_param(opt, i);
        if (tg_tensor_ctx(p) != ctx) {
            tg__err(ctx, TG_ERR_ARG, fn, "the optimizer belongs to another context (its "
                    "parameter %lld, '%s')", (long long)i, tg_tensor_name(p));
            return false;
        }
    }
    return true;
}

int64_t tg__optim_state_bad(const char *name, const tg_tensor *f)
{
    if (f->dtype != TG_F32 && f->dtype != TG_F64)
        return -1; /* integers are finite */
    bool nonneg = strncmp(name, "adam.v.", 7) == 0;
    int64_t bad = f->dtype == TG_F32 ? tg__first_nonfinite_f32(f->data, f->numel, false)
                                     : tg__first_nonfinite_f64(f->data, f->numel, false);
    for (int64_t k = 0; nonneg && k < (bad < 0 ? f->numel : bad); k++)
        if (tg_get(f, k) < 0)
            return k;
    return bad;
}

void tg__optim_state_msg(char *buf, size_t n, const char *name, const tg_tensor *f,
                         int64_t bad)
{
    snprintf(buf, n, "optimizer state '%s' element %lld is %g (expected a finite value%s)",
             name, (long long)bad, tg_get(f, bad),
             strncmp(name, "adam.v.", 7) == 0 ? " >= 0, as a second moment is" : "");
}

/* Optimizer state from a file must be finite, and Adam's second moments (adam.v.*) >= 0
 * (tg__optim_state_bad). Records TG_ERR_FORMAT naming the tensor, the element and its value;
 * false if any is refused. */
static bool state_values_ok(tg_ctx *ctx, const char *fn, const tg_safetensors *st,
                            const tg_optim *opt)
{
    for (int64_t i = 0; i < tg_optim_n_state(opt); i++) {
        const tg_tensor *s = tg_optim_state(opt, i);
        const tg_tensor *f = tg_safetensors_find(st, s->name);
        if (!f)
            continue; /* missing: refused by the loader */
        int64_t bad = tg__optim_state_bad(s->name, f);
        if (bad >= 0) {
            char m[TG_NAME_MAX + 160];
            tg__optim_state_msg(m, sizeof m, s->name, f, bad);
            tg__err(ctx, TG_ERR_FORMAT, fn, "%s; nothing was restored", m);
            return false;
        }
    }
    return true;
}

static tg_status tg_checkpoint_save_io(tg_ctx *ctx, const char *path, const tg_optim *opt,
                                       int64_t n_meta, const char *const *keys,
                                       const char *const *values, const tg_write_opts *opts)
{
    static const char *fn = "tg_checkpoint_save";
    if (!ctx)
        return TG_ERR_ARG;
    if (!path || n_meta < 0 || (n_meta > 0 && (!keys || !values)) ||
        (uint64_t)n_meta > SIZE_MAX / sizeof(char *) / 2 - 2) {
        tg__err(ctx, TG_ERR_ARG, fn, "%s",
                !path        ? "path is NULL"
                : n_meta < 0 ? "n_meta is negative"
                : n_meta > 0 && (!keys || !values) ? "keys or values is NULL"
                                                   : "n_meta is too large");
        return TG_ERR_ARG;
    }
    if (!optim_of(ctx, fn, opt))
        return TG_ERR_ARG;
    int64_t np = ctx->n_params, ns = tg_optim_n_state(opt), n = np + ns;
    tg_io_item *items = tg__alloc(ctx, sizeof *items * (size_t)(n ? n : 1), fn);
    const char **mk = tg__alloc(ctx, sizeof *mk * (size_t)(n_meta + 2), fn);
    const char **mv = tg__alloc(ctx, sizeof *mv * (size_t)(n_meta + 2), fn);
    if (!items || !mk || !mv) {
        tg__free(ctx, items);
        tg__free(ctx, mk);
        tg__free(ctx, mv);
        return TG_ERR_NOMEM;
    }
    for (int64_t i = 0; i < np; i++)
        items[i] = tg_io_item_data(ctx->params[i], NULL);
    for (int64_t i = 0; i < ns; i++)
        items[np + i] = tg_io_item_data(tg_optim_state(opt, i), NULL);
    char step[32], rng[4 * 17 + 1];
    snprintf(step, sizeof step, "%" PRId64, tg_optim_steps(opt));
    uint64_t st[4];
    tg_rng_get_state(ctx, st);
    snprintf(rng, sizeof rng, "%016" PRIx64 "%016" PRIx64 "%016" PRIx64 "%016" PRIx64, st[0],
             st[1], st[2], st[3]);
    for (int64_t i = 0; i < n_meta; i++) {
        mk[i] = keys[i];
        mv[i] = values[i];
    }
    mk[n_meta] = "optim.step";
    mv[n_meta] = step;
    mk[n_meta + 1] = "rng";
    mv[n_meta + 1] = rng;
    tg_status s = tg__st_write_items(ctx, fn, path, n, items, n_meta + 2, mk, mv, opts);
    tg__free(ctx, items);
    tg__free(ctx, mk);
    tg__free(ctx, mv);
    return s;
}

tg_status tg_checkpoint_save(tg_ctx *ctx, const char *path, const tg_optim *opt, int64_t n_meta,
                             const char *const *keys, const char *const *values,
                             const tg_write_opts *opts)
{
    tg__io_enter(ctx);
    tg_status r = tg_checkpoint_save_io(ctx, path, opt, n_meta, keys, values, opts);
    tg__io_leave(ctx);
    return r;
}

/* Largest step count a checkpoint may claim: 2^53, so that it is exact as a double (the Adam
 * bias corrections use beta^t) and far from overflowing the int64 counter as training goes on. */
#define CK_MAX_STEP ((int64_t)1 << 53)

/* rng: exactly 64 hex digits, the four 64-bit words of the xoshiro256** state, most significant
 * digit first; the all-zero state (a fixed point of the generator) is refused. */
static bool parse_rng(const char *s, uint64_t st[4])
{
    if (strlen(s) != 64)
        return false;
    uint64_t any = 0;
    for (int i = 0; i < 4; i++) {
        uint64_t w = 0;
        for (int j = 0; j < 16; j++) {
            int h = tg__hex_digit((unsigned char)s[16 * i + j]);
            if (h < 0)
                return false;
            w = w << 4 | (uint64_t)h;
        }
        st[i] = w;
        any |= w;
    }
    return any != 0;
}

static tg_status tg_checkpoint_restore_io(tg_ctx *ctx, const tg_safetensors *st, tg_optim *opt)
{
    static const char *fn = "tg_checkpoint_restore";
    if (!ctx)
        return TG_ERR_ARG;
    if (!st) {
        tg__err(ctx, TG_ERR_ARG, fn, "the checkpoint is NULL");
        return TG_ERR_ARG;
    }
    /* metadata first: a malformed value changes nothing */
    const char *step_s = tg_safetensors_meta_get(st, "optim.step");
    const char *rng_s = tg_safetensors_meta_get(st, "rng");
    int64_t step = 0;
    uint64_t rng[4];
    char q[48];
    if (!step_s || !rng_s) {
        tg__err(ctx, TG_ERR_FORMAT, fn, "not a checkpoint: metadata '%s' is missing",
                !step_s ? "optim.step" : "rng");
        return TG_ERR_FORMAT;
    }
    if (!tg_meta_parse_int(step_s, 0, CK_MAX_STEP, &step)) { /* optim.step */
        tg__err(ctx, TG_ERR_FORMAT, fn,
                "metadata 'optim.step' is '%s' (expected a step count: decimal digits, 0 to "
                "%lld)", tg__quote(step_s, 40, q), (long long)CK_MAX_STEP);
        return TG_ERR_FORMAT;
    }
    if (!parse_rng(rng_s, rng)) {
        tg__err(ctx, TG_ERR_FORMAT, fn,
                "metadata 'rng' is '%s' (expected the RNG state: 64 hex digits, not all zero)",
                tg__quote(rng_s, 40, q));
        return TG_ERR_FORMAT;
    }
    if (!optim_of(ctx, fn, opt) || !state_values_ok(ctx, fn, st, opt))
        return tg_ctx_status(ctx);
    /* parameters and optimizer state together, strictly: validate all, then copy */
    int64_t np = ctx->n_params, ns = tg_optim_n_state(opt);
    tg_tensor **all = tg__alloc(ctx, sizeof *all * (size_t)(np + ns + 1), fn);
    if (!all)
        return TG_ERR_NOMEM;
    for (int64_t i = 0; i < np; i++)
        all[i] = ctx->params[i];
    for (int64_t i = 0; i < ns; i++)
        all[np + i] = tg_optim_state(opt, i);
    /* reuse the strict name/shape matching of tg_params_load_from (works for any tensors) */
    tg_status s = tg__params_load_from(ctx, fn, st, np + ns, all, true);
    tg__free(ctx, all);
    if (s != TG_OK)
        return s;
    if (opt)
        tg_optim_set_steps(opt, step);
    tg_rng_set_state(ctx, rng);
    return TG_OK;
}

tg_status tg_checkpoint_restore(tg_ctx *ctx, const tg_safetensors *st, tg_optim *opt)
{
    tg__io_enter(ctx);
    tg_status r = tg_checkpoint_restore_io(ctx, st, opt);
    tg__io_leave(ctx);
    return r;
}
