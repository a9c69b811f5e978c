/*
 * state.c - a training run's state in its checkpoint (include/tgrad_train.h): the one writer
 * (tg_train_state_meta) and reader (tg_train_state_read) of the state keys, and checkpoint
 * save / restore by model config (tg_train_checkpoint_save, tg_train_checkpoint_restore):
 * format + model.* + the caller's fields + the state + parameters + optimizer state, through
 * tg_checkpoint_save(); restore = the state's metadata, tg_checkpoint_check(), then
 * tg_checkpoint_restore(), so nothing changes unless the whole file is valid.
 */
#include "tgrad_train.h"
#include "core.h"
#include "io/io.h"

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Largest count a state field may hold: 2^53, exact as a double (as optim.step). */
#define ST_MAX ((int64_t)1 << 53)

tg_train_state tg_train_state_init(void)
{
    tg_train_state s = {.steps = -1, .position = -1, .epoch = -1, .batch = -1,
                        .best_val = INFINITY, .step = -1, .best_bleu = -1};
    return s;
}

int tg_train_state_meta(const tg_train_state *s, tg_meta_kv *out)
{
    if (!s || !out || s->steps == 0 || s->steps < -1 || s->position < -1 || s->epoch < -1 ||
        s->batch < -1 || (s->epoch < 0) != (s->batch < 0) || isnan(s->best_val) ||
        s->best_val < 0 || !(s->best_bleu == -1 || (s->best_bleu >= 0 && s->best_bleu <= 100)))
        return -1;
    int k = 0;
    if (s->position >= 0) {
        snprintf(out[k].key, sizeof out[k].key, "data.position");
        snprintf(out[k++].value, sizeof out[0].value, "%" PRId64, s->position);
    }
    if (s->steps >= 0) {
        snprintf(out[k].key, sizeof out[k].key, "train.steps");
        snprintf(out[k++].value, sizeof out[0].value, "%" PRId64, s->steps);
    }
    snprintf(out[k].key, sizeof out[k].key, "train.best_val");
    tg__fmt_double(s->best_val, out[k].value, sizeof out[k].value);
    k++;
    if (s->epoch >= 0) {
        snprintf(out[k].key, sizeof out[k].key, "data.epoch");
        snprintf(out[k++].value, sizeof out[0].value, "%" PRId64, s->epoch);
        snprintf(out[k].key, sizeof out[k].key, "data.batch");
        snprintf(out[k++].value, sizeof out[0].value, "%" PRId64, s->batch);
    }
    if (s->best_bleu >= 0) {
        snprintf(out[k].key, sizeof out[k].key, "train.best_bleu");
        tg__fmt_double(s->best_bleu, out[k].value, sizeof out[k].value);
        k++;
    }
    return k;
}

typedef struct rd {
    tg_ctx *ctx;
    const char *fn, *label;
    const tg_safetensors *st;
} rd;

/* An optional (or required) count field; *out untouched when absent. */
static bool get_count(const rd *r, const char *key, bool required, int64_t lo, int64_t hi,
                      int64_t *out)
{
    const char *v = tg_safetensors_meta_get(r->st, key);
    char q[80];
    if (!v) {
        if (required)
            tg__err(r->ctx, TG_ERR_FORMAT, r->fn, "%s: metadata '%s' is missing (not a tgrad "
                    "training checkpoint)", r->label, key);
        return !required;
    }
    if (!tg_meta_parse_int(v, lo, hi, out)) {
        tg__err(r->ctx, TG_ERR_FORMAT, r->fn, "%s: metadata '%s' is '%s' (expected decimal "
                "digits, %" PRId64 " to %" PRId64 ")", r->label, key, tg__quote(v, 48, q), lo,
                hi);
        return false;
    }
    return true;
}

tg_status tg__train_state_fields(tg_ctx *ctx, const char *fn, const char *label,
                                 const tg_safetensors *st, bool required, tg_train_state *out)
{
    rd r = {ctx, fn, label ? label : "<memory>", st};
    tg_train_state s = tg_train_state_init();
    char q[80];
    if (!get_count(&r, "optim.step", required, 0, ST_MAX, &s.step))
        return TG_ERR_FORMAT;
    const char *rng = tg_safetensors_meta_get(st, "rng");
    bool ok = rng && strlen(rng) == 64, nonzero = false;
    for (int i = 0; ok && i < 64; i++) {
        int h = tg__hex_digit((unsigned char)rng[i]);
        ok = h >= 0;
        nonzero |= h > 0;
    }
    if ((rng || required) && (!ok || !nonzero)) {
        if (!rng)
            tg__err(ctx, TG_ERR_FORMAT, r.fn, "%s: metadata 'rng' is missing (not a tgrad "
                    "training checkpoint)", r.label);
        else
            tg__err(ctx, TG_ERR_FORMAT, r.fn, "%s: metadata 'rng' is '%s' (expected 64 hex "
                    "digits, not all zero)", r.label, tg__quote(rng, 48, q));
        return TG_ERR_FORMAT;
    }
    if (!get_count(&r, "train.steps", false, 1, ST_MAX, &s.steps) ||
        !get_count(&r, "data.position", false, 0, ST_MAX, &s.position) ||
        !get_count(&r, "data.epoch", false, 0, INT32_MAX, &s.epoch) ||
        !get_count(&r, "data.batch", false, 0, INT32_MAX, &s.batch))
        return TG_ERR_FORMAT;
    if ((s.epoch < 0) != (s.batch < 0)) {
        tg__err(ctx, TG_ERR_FORMAT, r.fn, "%s: metadata '%s' is missing ('%s' is there: a "
                "data cursor has both)", r.label, s.epoch < 0 ? "data.epoch" : "data.batch",
                s.epoch < 0 ? "data.batch" : "data.epoch");
        return TG_ERR_FORMAT;
    }
    const char *bv = tg_safetensors_meta_get(st, "train.best_val");
    if (bv && strcmp(bv, "inf") != 0) {
        /* a plain decimal: no sign, space, hex, inf or nan spelled otherwise */
        bool plain = (bv[0] >= '0' && bv[0] <= '9') || bv[0] == '.';
        char *end = NULL;
        double x = plain && !strpbrk(bv, "xXpPnNiI") ? strtod(bv, &end) : NAN;
        if (!plain || !end || *end || !isfinite(x) || x < 0) {
            tg__err(ctx, TG_ERR_FORMAT, r.fn, "%s: metadata 'train.best_val' is '%s' (expected "
                    "a loss >= 0 or inf)", r.label, tg__quote(bv, 48, q));
            return TG_ERR_FORMAT;
        }
        s.best_val = x;
    }
    const char *bb = tg_safetensors_meta_get(st, "train.best_bleu");
    if (bb) {
        bool plain = (bb[0] >= '0' && bb[0] <= '9') || bb[0] == '.';
        char *end = NULL;
        double x = plain && !strpbrk(bb, "xXpPnNiI") ? strtod(bb, &end) : NAN;
        if (!plain || !end || *end || !(x >= 0 && x <= 100)) {
            tg__err(ctx, TG_ERR_FORMAT, r.fn, "%s: metadata 'train.best_bleu' is '%s' (expected "
                    "a BLEU score from 0 to 100)", r.label, tg__quote(bb, 48, q));
            return TG_ERR_FORMAT;
        }
        s.best_bleu = x;
    }
    if (out)
        *out = s;
    return TG_OK;
}

static tg_status state_read(tg_ctx *ctx, const tg_safetensors *st, const char *label,
                            tg_train_state *out)
{
    if (!st || !out) {
        tg__err(ctx, TG_ERR_ARG, "tg_train_state_read", "%s is NULL",
                !st ? "the checkpoint" : "the state");
        return TG_ERR_ARG;
    }
    return tg__train_state_fields(ctx, "tg_train_state_read", label, st, true, out);
}

tg_status tg_train_state_read(tg_ctx *ctx, const tg_safetensors *st, const char *label,
                              tg_train_state *s)
{
    if (!ctx)
        return TG_ERR_ARG;
    tg__io_enter(ctx);
    tg_status r = state_read(ctx, st, label, s);
    tg__io_leave(ctx);
    return r;
}

static bool is_state_key(const char *k)
{
    static const char *const sk[] = {"data.position", "train.steps", "train.best_val",
                                     "data.epoch", "data.batch", "train.best_bleu"};
    for (size_t i = 0; i < sizeof sk / sizeof sk[0]; i++)
        if (!strcmp(k, sk[i]))
            return true;
    return false;
}

/* Step 3 of tg_train_checkpoint_save: the caller's @p n_extra entries after the @p *n in @p k /
 * @p v, each NULL value placing the training state's key of that name (of @p sk, @p ns;
 * @p placed marks them). */
static tg_status place_extras(tg_ctx *ctx, int64_t n_extra, const char *const *keys,
                              const char *const *values, const tg_meta_kv *sk, int ns,
                              bool *placed, const char **k, const char **v, size_t *n)
{
    static const char *fn = "tg_train_checkpoint_save";
    for (int64_t i = 0; i < n_extra; i++) {
        const char *key = keys[i];
        if (!key) {
            tg__err(ctx, TG_ERR_ARG, fn, "extra entry %" PRId64 " has a NULL key", i);
            return TG_ERR_ARG;
        }
        if (!values[i]) { /* a state key's place */
            int j = 0;
            while (j < ns && strcmp(sk[j].key, key) != 0)
                j++;
            if (j == ns || placed[j]) {
                char q[80];
                tg__err(ctx, TG_ERR_ARG, fn, "extra entry %" PRId64 " '%s' has a NULL value but "
                        "is not a key of the training state%s", i, tg__quote(key, 40, q),
                        j < ns ? " (placed twice)" : is_state_key(key) ? " that is set" : "");
                return TG_ERR_ARG;
            }
            placed[j] = true;
            k[*n] = sk[j].key;
            v[(*n)++] = sk[j].value;
            continue;
        }
        if (!strcmp(key, "format") || !strncmp(key, "model.", 6) ||
            !strcmp(key, "optim.step") || !strcmp(key, "rng") || is_state_key(key)) {
            char q[80];
            tg__err(ctx, TG_ERR_ARG, fn, "extra key '%s' is written by the library",
                    tg__quote(key, 40, q));
            return TG_ERR_ARG;
        }
        k[*n] = key;
        v[(*n)++] = values[i];
    }
    return TG_OK;
}

static tg_status save_io(tg_ctx *ctx, const char *path, const tg_optim *opt,
                         const tg_transformer_config *cfg, tg_dtype dt,
                         const tg_train_state *state, int64_t n_extra, const char *const *keys,
                         const char *const *values, const tg_write_opts *opts)
{
    static const char *fn = "tg_train_checkpoint_save";
    tg_meta_kv mk[TG_TRANSFORMER_META_MAX], sk[TG_TRAIN_STATE_META_MAX];
    int nm = cfg ? tg_transformer_meta(cfg, dt, mk) : -1;
    int ns = state ? tg_train_state_meta(state, sk) : -1;
    if (!cfg || !state || nm < 0 || ns < 0 || n_extra < 0 ||
        (n_extra > 0 && (!keys || !values)) || n_extra > (int64_t)TG_SAFETENSORS_MAX_META) {
        tg__err(ctx, TG_ERR_ARG, fn, "%s",
                !cfg     ? "cfg is NULL"
                : !state ? "state is NULL"
                : nm < 0 ? "the model config has no checkpoint metadata (tg_transformer_meta)"
                : ns < 0 ? "the training state is invalid (tg_train_state_meta)"
                : n_extra < 0 || n_extra > (int64_t)TG_SAFETENSORS_MAX_META ? "n_extra is out of range"
                                                                   : "keys or values is NULL");
        return TG_ERR_ARG;
    }
    size_t cap = 1 + (size_t)nm + (size_t)n_extra + (size_t)ns;
    const char **k = malloc(cap * sizeof *k), **v = malloc(cap * sizeof *v);
    if (!k || !v) {
        free(k);
        free(v);
        tg__err(ctx, TG_ERR_NOMEM, fn, "out of memory");
        return TG_ERR_NOMEM;
    }
    bool placed[TG_TRAIN_STATE_META_MAX] = {false};
    size_t n = 0;
    k[n] = "format";
    v[n++] = TG_CHECKPOINT_FORMAT;
    for (int i = 0; i < nm; i++) {
        k[n] = mk[i].key;
        v[n++] = mk[i].value;
    }
    tg_status s = place_extras(ctx, n_extra, keys, values, sk, ns, placed, k, v, &n);
    for (int j = 0; j < ns && s == TG_OK; j++)
        if (!placed[j]) {
            k[n] = sk[j].key;
            v[n++] = sk[j].value;
        }
    if (s == TG_OK)
        s = tg_checkpoint_save(ctx, path, opt, (int64_t)n, k, v, opts);
    free(k);
    free(v);
    return s;
}

tg_status tg_train_checkpoint_save(tg_ctx *ctx, const char *path, const tg_optim *opt,
                                   const tg_transformer_config *cfg, tg_dtype dt,
                                   const tg_train_state *state, int64_t n_extra,
                                   const char *const *keys, const char *const *values,
                                   const tg_write_opts *opts)
{
    if (!ctx)
        return TG_ERR_ARG;
    tg__io_enter(ctx);
    tg_status r = save_io(ctx, path, opt, cfg, dt, state, n_extra, keys, values, opts);
    tg__io_leave(ctx);
    return r;
}

static tg_status restore_io(tg_ctx *ctx, const tg_safetensors *st, const char *label,
                            const tg_transformer_config *cfg, tg_dtype dt,
                            const tg_optim_config *optim, tg_optim *opt, tg_train_state *state)
{
    if (!st || !cfg) {
        tg__err(ctx, TG_ERR_ARG, "tg_train_checkpoint_restore", "%s is NULL",
                !st ? "the checkpoint" : "cfg");
        return TG_ERR_ARG;
    }
    tg_train_state s;
    tg_status r = state_read(ctx, st, label, &s);
    if (r == TG_OK)
        r = tg_checkpoint_check(ctx, st, cfg, dt, optim);
    if (r == TG_OK)
        r = tg_checkpoint_restore(ctx, st, opt);
    if (r == TG_OK && state)
        *state = s;
    return r;
}

tg_status tg_train_checkpoint_restore(tg_ctx *ctx, const tg_safetensors *st, const char *label,
                                      const tg_transformer_config *cfg, tg_dtype dt,
                                      const tg_optim_config *optim, tg_optim *opt,
                                      tg_train_state *state)
{
    if (!ctx)
        return TG_ERR_ARG;
    tg__io_enter(ctx);
    tg_status r = restore_io(ctx, st, label, cfg, dt, optim, opt, state);
    tg__io_leave(ctx);
    return r;
}
