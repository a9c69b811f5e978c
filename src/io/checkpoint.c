/*
 * checkpoint.c - training checkpoints as safetensors: parameters by name, optimizer state
 * (adam.m.*, adam.v.*, sgd.momentum.*), and metadata (caller's config plus optim.step and the
 * context RNG state). Saving is atomic through the safetensors writer (temporary file in the
 * same directory, fsync, rename), so a failed save never damages the previous checkpoint.
 */
#include "tgrad_train.h"
#include "../core.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>

tg_status tg_checkpoint_save(tg_ctx *ctx, const char *path, const tg_optim *opt, int64_t n_meta,
                             const char *const *keys, const char *const *values,
                             const tg_write_opts *opts)
{
    static const char *fn = "tg_checkpoint_save";
    if (!ctx || !path || n_meta < 0 || (n_meta > 0 && (!keys || !values)))
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
    tg_status s = tg_safetensors_write_items(ctx, path, n, items, n_meta + 2, mk, mv, opts);
    tg__free(ctx, items);
    tg__free(ctx, mk);
    tg__free(ctx, mv);
    return s;
}

static bool parse_rng(const char *s, uint64_t st[4])
{
    if (!s || strlen(s) != 64)
        return false;
    for (int i = 0; i < 4; i++) {
        char part[17];
        memcpy(part, s + 16 * i, 16);
        part[16] = 0;
        char *end;
        st[i] = strtoull(part, &end, 16);
        if (*end)
            return false;
    }
    return true;
}

tg_status tg_checkpoint_restore(tg_ctx *ctx, const tg_safetensors *st, tg_optim *opt)
{
    static const char *fn = "tg_checkpoint_restore";
    if (!ctx || !st)
        return TG_ERR_ARG;
    const char *step_s = tg_safetensors_meta_get(st, "optim.step");
    uint64_t rng[4];
    char *end = NULL;
    long long step = step_s ? strtoll(step_s, &end, 10) : -1;
    if (!step_s || *end || step < 0 || !parse_rng(tg_safetensors_meta_get(st, "rng"), rng)) {
        tg__err(ctx, TG_ERR_FORMAT, fn, "checkpoint lacks valid 'optim.step' and 'rng' metadata");
        return TG_ERR_FORMAT;
    }
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
    tg_status s = tg_params_load_from(ctx, st, np + ns, all, true);
    tg__free(ctx, all);
    if (s != TG_OK)
        return s;
    if (opt)
        tg_optim_set_steps(opt, step);
    tg_rng_set_state(ctx, rng);
    return TG_OK;
}
