/*
 * checkpoint_check.c - a training checkpoint's tensors against the model config it claims
 * (tg_checkpoint_check, include/tgrad_train.h): every parameter of tg_transformer_params
 * present with its shape, nothing else but optimizer state of those parameters shaped like
 * them, every tensor in the parameter dtype, (given the optimizer) exactly the state that
 * optimizer keeps, and every optimizer state value finite (Adam's second moments >= 0). Nothing is allocated in the context; the file is only read, so it may be
 * arbitrary bytes parsed by tg_safetensors_read_mem (the fuzzers call it through tgrad's
 * checkpoint validation). Messages name the checkpoint's metadata fields (model.layers,
 * train.optimizer, ...) a value follows from.
 */
#include "tgrad_train.h"
#include "io/io.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *const fn = "tg_checkpoint_check";

/* @p s on one line for a message: control characters (C0, DEL, C1 as UTF-8) as '?', cut after
 * 60 bytes at a character boundary with "..." (a name of 61 bytes is shown whole). */
static const char *show(const char *s, char *buf, size_t n)
{
    const size_t keep = 60;
    size_t w = 0, max = n - 1, len = strlen(s), cut = len;
    if (len > keep + 1) {
        cut = keep;
        while (cut > 0 && ((unsigned char)s[cut] & 0xc0) == 0x80)
            cut--;
    }
    for (size_t i = 0; i < cut && w < max; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c == 0xc2 && (unsigned char)s[i + 1] >= 0x80 && (unsigned char)s[i + 1] <= 0x9f) {
            buf[w++] = '?';
            i++;
            continue;
        }
        buf[w++] = (c < 0x20 || c == 0x7f) ? '?' : (char)c;
    }
    for (int k = 0; cut < len && k < 3 && w < max; k++)
        buf[w++] = '.';
    buf[w] = 0;
    return buf;
}

static void dims_str(int rank, const int64_t *d, char *buf, size_t n)
{
    size_t w = 0;
    buf[0] = 0;
    w += (size_t)snprintf(buf, n, "(");
    for (int i = 0; i < rank && w < n; i++)
        w += (size_t)snprintf(buf + w, n - w, "%s%" PRId64, i ? ", " : "", d[i]);
    if (w < n)
        snprintf(buf + w, n - w, ")");
}

/* The fields a parameter's shape follows from, for messages. */
static void why_of(const tg_transformer_config *mc, const char *name, char *buf, size_t n)
{
    if (!strncmp(name, "encoder.", 8) || !strncmp(name, "decoder.", 8))
        snprintf(buf, n, "model.layers %" PRId64 ", model.decoder_layers %" PRId64 ", "
                 "model.d_model %" PRId64 " and model.d_ff %" PRId64, mc->n_layers,
                 mc->n_decoder_layers, mc->layer.d_model, mc->layer.d_ff);
    else if (!strncmp(name, "layers.", 7))
        snprintf(buf, n, "model.layers %" PRId64 ", model.d_model %" PRId64 " and model.d_ff %"
                 PRId64, mc->n_layers, mc->layer.d_model, mc->layer.d_ff);
    else if (!strcmp(name, "pos_emb.weight"))
        snprintf(buf, n, "model.seq_len %" PRId64 " and model.d_model %" PRId64,
                 mc->max_seq_len, mc->layer.d_model);
    else if (!strcmp(name, "head.bias"))
        snprintf(buf, n, "model.vocab_size %" PRId64, mc->vocab_size);
    else if (!strncmp(name, "norm.", 5))
        snprintf(buf, n, "model.d_model %" PRId64, mc->layer.d_model);
    else
        snprintf(buf, n, "model.vocab_size %" PRId64 " and model.d_model %" PRId64,
                 mc->vocab_size, mc->layer.d_model);
}

/* Has tensor @p t shape @p p? */
static bool same_shape(const tg_tensor *t, const tg_param_info *p)
{
    if (tg_tensor_rank(t) != p->rank)
        return false;
    for (int i = 0; i < p->rank; i++)
        if (tg_tensor_shape(t)[i] != p->shape[i])
            return false;
    return true;
}

/* "<prefix>layers.<k>.": k, or -1 if @p name is not a layer tensor of that prefix. */
static int64_t layer_of(const char *name, const char *prefix)
{
    size_t pl = strlen(prefix);
    if (strncmp(name, prefix, pl) || strncmp(name + pl, "layers.", 7))
        return -1;
    const char *p = name + pl + 7;
    int64_t k = 0;
    if (*p < '0' || *p > '9')
        return -1;
    for (; *p >= '0' && *p <= '9'; p++) {
        if (k > (INT64_MAX - 9) / 10)
            return INT64_MAX;
        k = 10 * k + (*p - '0');
    }
    return *p == '.' ? k : -1;
}

/* The prefix of optimizer state tensors ("adam.m.<param>", ...), or NULL. */
static const char *optim_prefix(const char *name)
{
    static const char *const prefixes[] = {"adam.m.", "adam.v.", "sgd.momentum."};
    for (size_t i = 0; i < sizeof prefixes / sizeof prefixes[0]; i++)
        if (!strncmp(name, prefixes[i], strlen(prefixes[i])))
            return prefixes[i];
    return NULL;
}

/* The parameter named @p name among @p ps (n of them), or NULL. */
static const tg_param_info *find_param(const tg_param_info *ps, int64_t n, const char *name)
{
    for (int64_t i = 0; i < n; i++)
        if (!strcmp(ps[i].name, name))
            return &ps[i];
    return NULL;
}

/* Tensor @p name of the file is not a parameter of @p mc (nor optimizer state of one): the
 * reason, recorded. @p base is the name without an optimizer-state prefix. */
static void stray(tg_ctx *ctx, const tg_transformer_config *mc, const char *name,
                  const char *base)
{
    char s[80];
    show(name, s, sizeof s);
    bool s2s = mc->n_decoder_layers > 0;
    if (layer_of(base, s2s ? "encoder." : "") >= mc->n_layers)
        tg__run_err(ctx, TG_ERR_MISMATCH, fn, "the file has tensor '%s' but model.layers is %"
                    PRId64, s, mc->n_layers);
    else if (s2s && layer_of(base, "decoder.") >= mc->n_decoder_layers)
        tg__run_err(ctx, TG_ERR_MISMATCH, fn, "the file has tensor '%s' but "
                    "model.decoder_layers is %" PRId64, s, mc->n_decoder_layers);
    else if (!strcmp(base, "pos_emb.weight") && mc->pos != TG_POS_LEARNED)
        tg__run_err(ctx, TG_ERR_MISMATCH, fn, "the file has tensor '%s' but model.pos is "
                    "sinusoidal", s);
    else if (!strcmp(base, "head.weight") && mc->tie_weights)
        tg__run_err(ctx, TG_ERR_MISMATCH, fn, "the file has tensor '%s' but model.tie_weights "
                    "is 1", s);
    else
        tg__run_err(ctx, TG_ERR_MISMATCH, fn, "the file has tensor '%s', which is neither a "
                    "parameter of the model its fields describe nor optimizer state", s);
}

/* Every parameter with its shape; nothing else but optimizer state shaped like its
 * parameter. */
static bool check_shapes(tg_ctx *ctx, const tg_safetensors *st, const tg_transformer_config *mc,
                         const tg_param_info *ps, int64_t np)
{
    char why[160], ws[96], hs[96];
    for (int64_t i = 0; i < np; i++) {
        const tg_param_info *p = &ps[i];
        tg_tensor *t = tg_safetensors_find(st, p->name);
        why_of(mc, p->name, why, sizeof why);
        dims_str(p->rank, p->shape, ws, sizeof ws);
        if (!t)
            return tg__run_err(ctx, TG_ERR_MISMATCH, fn, "the file lacks tensor '%s' %s that "
                               "%s need", p->name, ws, why), false;
        if (!same_shape(t, p)) {
            dims_str(tg_tensor_rank(t), tg_tensor_shape(t), hs, sizeof hs);
            return tg__run_err(ctx, TG_ERR_MISMATCH, fn, "tensor '%s' is %s in the file, but "
                               "%s need %s", p->name, hs, why, ws), false;
        }
    }
    for (int64_t j = 0; j < tg_safetensors_count(st); j++) {
        const char *name = tg_safetensors_name(st, j);
        if (find_param(ps, np, name))
            continue;
        const char *pre = optim_prefix(name), *base = pre ? name + strlen(pre) : name;
        const tg_param_info *p = pre ? find_param(ps, np, base) : NULL;
        if (!p)
            return stray(ctx, mc, name, base), false;
        tg_tensor *t = tg_safetensors_tensor(st, j);
        if (!same_shape(t, p)) {
            char s[80];
            dims_str(tg_tensor_rank(t), tg_tensor_shape(t), hs, sizeof hs);
            dims_str(p->rank, p->shape, ws, sizeof ws);
            return tg__run_err(ctx, TG_ERR_MISMATCH, fn, "optimizer state '%s' is %s in the "
                               "file, but its parameter is %s", show(name, s, sizeof s), hs,
                               ws), false;
        }
    }
    return true;
}

/* Every tensor of the file in the parameter dtype @p dt (model.dtype). */
static bool check_dtypes(tg_ctx *ctx, const tg_safetensors *st, tg_dtype dt)
{
    const char *want = dt == TG_F64 ? "F64" : "F32";
    for (int64_t j = 0; j < tg_safetensors_count(st); j++) {
        const char *fd = tg_safetensors_file_dtype(st, j);
        if (strcmp(fd, want) != 0) {
            char s[80];
            return tg__run_err(ctx, TG_ERR_MISMATCH, fn, "tensor '%s' is %s in the file, but "
                               "model.dtype is %s", show(tg_safetensors_name(st, j), s,
                                                         sizeof s), fd,
                               dt == TG_F64 ? "f64" : "f32"), false;
        }
    }
    return true;
}

/* Every optimizer state value finite, Adam's second moments >= 0 (tg__optim_state_bad): what
 * tg_checkpoint_restore() would refuse after the model is built, refused here before. */
static bool check_state_values(tg_ctx *ctx, const tg_safetensors *st)
{
    for (int64_t j = 0; j < tg_safetensors_count(st); j++) {
        const char *name = tg_safetensors_name(st, j);
        if (!optim_prefix(name))
            continue;
        const tg_tensor *t = tg_safetensors_tensor(st, j);
        int64_t bad = tg__optim_state_bad(name, t);
        if (bad >= 0) {
            char s[80], m[256];
            tg__optim_state_msg(m, sizeof m, show(name, s, sizeof s), t, bad);
            return tg__run_err(ctx, TG_ERR_FORMAT, fn, "%s", m), false;
        }
    }
    return true;
}

/* The optimizer state of @p oc: adam.m.<p> and adam.v.<p> for every parameter (Adam, AdamW),
 * sgd.momentum.<p> (SGD with a momentum other than 0), nothing (SGD without momentum). */
static bool check_optim_state(tg_ctx *ctx, const tg_safetensors *st, const tg_optim_config *oc,
                              const tg_param_info *ps, int64_t np)
{
    bool sgd = oc->kind == TG_OPTIM_SGD, adam = !sgd, sgd_m = sgd && oc->momentum != 0;
    const char *on = sgd ? "sgd" : oc->kind == TG_OPTIM_ADAM ? "adam" : "adamw";
    /* none of another optimizer's state (shapes were checked by check_shapes) */
    for (int64_t j = 0; j < tg_safetensors_count(st); j++) {
        const char *pre = optim_prefix(tg_safetensors_name(st, j));
        bool want = pre && (!strcmp(pre, "sgd.momentum.") ? sgd_m : adam);
        if (pre && !want) {
            char s[80];
            return tg__run_err(ctx, TG_ERR_MISMATCH, fn, "optimizer state '%s' is %s state, "
                               "which the optimizer restored into (%s%s) does not keep",
                               show(tg_safetensors_name(st, j), s, sizeof s),
                               !strcmp(pre, "sgd.momentum.") ? "SGD momentum" : "Adam/AdamW",
                               on, sgd && !sgd_m ? " with momentum 0" : ""), false;
        }
    }
    static const char *const adam_pre[] = {"adam.m.", "adam.v."}, *const sgd_pre[] = {
        "sgd.momentum."};
    const char *const *pres = adam ? adam_pre : sgd_pre;
    int npre = adam ? 2 : sgd_m ? 1 : 0;
    for (int64_t i = 0; i < np; i++)
        for (int k = 0; k < npre; k++) {
            char name[TG_NAME_MAX + 16];
            snprintf(name, sizeof name, "%s%s", pres[k], ps[i].name);
            if (!tg_safetensors_find(st, name))
                return tg__run_err(ctx, TG_ERR_MISMATCH, fn, "the file lacks optimizer state "
                                   "'%s' that the optimizer restored into (%s) keeps for every "
                                   "parameter (a training checkpoint holds it; 'tgrad train "
                                   "--resume' restores it)", name, on), false;
        }
    return true;
}

static tg_status check_io(tg_ctx *ctx, const tg_safetensors *st,
                          const tg_transformer_config *cfg, tg_dtype dt,
                          const tg_optim_config *optim)
{
    if (!ctx)
        return TG_ERR_ARG;
    int64_t np = tg_transformer_params(cfg, NULL, 0);
    if (!st || np < 0 || (dt != TG_F32 && dt != TG_F64) ||
        (optim && optim->kind != TG_OPTIM_SGD && optim->kind != TG_OPTIM_ADAM &&
         optim->kind != TG_OPTIM_ADAMW)) {
        tg__run_err(ctx, TG_ERR_ARG, fn, "%s", !st ? "the checkpoint is NULL"
                    : np < 0 ? "the config is NULL or its layer counts or d_model out of range"
                    : optim && (dt == TG_F32 || dt == TG_F64) ? "unknown optimizer kind"
                                                             : "dtype is not f32 or f64");
        return TG_ERR_ARG;
    }
    /* the list: n_layers <= TG_TRANSFORMER_MAX_LAYERS bounds it (tgrad's configs: a few MB) */
    tg_param_info *ps = malloc(sizeof *ps * (size_t)np);
    if (!ps) {
        tg__run_err(ctx, TG_ERR_NOMEM, fn, "out of memory");
        return TG_ERR_NOMEM;
    }
    tg_transformer_params(cfg, ps, np);
    bool ok = check_shapes(ctx, st, cfg, ps, np) && check_dtypes(ctx, st, dt) &&
              (!optim || check_optim_state(ctx, st, optim, ps, np)) &&
              check_state_values(ctx, st);
    free(ps);
    return ok ? TG_OK : tg_ctx_status(ctx);
}

tg_status tg_checkpoint_check(tg_ctx *ctx, const tg_safetensors *st,
                              const tg_transformer_config *cfg, tg_dtype dt,
                              const tg_optim_config *optim)
{
    if (!ctx)
        return TG_ERR_ARG;
    tg__io_enter(ctx); /* a run-time error, like every file call's: none stays from before */
    tg_status r = check_io(ctx, st, cfg, dt, optim);
    tg__io_leave(ctx);
    return r;
}
