/*
 * model_meta.c - a transformer config as a tgrad checkpoint's `model.*` metadata
 * (tg_transformer_meta, include/tgrad_train.h): the one writer of those keys. Values are
 * decimal integers, 0/1 flags, the option names (relu|gelu, learned|sinusoidal,
 * encoder|lm|seq2seq, f32|f64), and the dropout as the shortest decimal that reads back as the
 * same double, so a resumed run gets exactly the value saved.
 */
#include "tgrad_train.h"
#include "io.h"

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void tg__fmt_double(double v, char *buf, size_t n)
{
    if (!isfinite(v)) {
        snprintf(buf, n, "%g", v);
        return;
    }
    char t[32]; /* "%.17g": at most 24 bytes */
    for (int p = 1; p <= 17; p++) {
        snprintf(t, sizeof t, "%.*g", p, v);
        if (strtod(t, NULL) == v)
            break;
    }
    snprintf(buf, n, "%s", t);
}

bool tg_meta_parse_int(const char *s, int64_t lo, int64_t hi, int64_t *out)
{
    if (!s || !out || lo < 0 || hi < lo)
        return false;
    size_t n = strlen(s);
    if (n == 0 || (n > 1 && s[0] == '0'))
        return false;
    int64_t v = 0;
    for (size_t i = 0; i < n; i++) {
        if (s[i] < '0' || s[i] > '9')
            return false;
        int d = s[i] - '0';
        if (hi - d < 0 || v > (hi - d) / 10) /* v * 10 + d > hi, without overflow */
            return false;
        v = v * 10 + d;
    }
    if (v < lo)
        return false;
    *out = v;
    return true;
}

static void put(tg_meta_kv *out, int *k, const char *key, const char *fmt, int64_t v)
{
    snprintf(out[*k].key, sizeof out[*k].key, "%s", key);
    snprintf(out[*k].value, sizeof out[*k].value, fmt, v);
    (*k)++;
}

static void put_str(tg_meta_kv *out, int *k, const char *key, const char *v)
{
    snprintf(out[*k].key, sizeof out[*k].key, "%s", key);
    snprintf(out[*k].value, sizeof out[*k].value, "%s", v);
    (*k)++;
}

int tg_transformer_meta(const tg_transformer_config *cfg, tg_dtype dt, tg_meta_kv *out)
{
    if (!cfg || !out || tg_transformer_params(cfg, NULL, 0) < 0 ||
        (dt != TG_F32 && dt != TG_F64) ||
        (cfg->layer.activation != TG_ACT_RELU && cfg->layer.activation != TG_ACT_GELU) ||
        (cfg->pos != TG_POS_LEARNED && cfg->pos != TG_POS_SINUSOIDAL))
        return -1;
    bool s2s = cfg->n_decoder_layers > 0;
    int k = 0;
    char d[sizeof out->value];
    put_str(out, &k, "model.arch", s2s ? "seq2seq" : cfg->causal ? "lm" : "encoder");
    put(out, &k, "model.layers", "%" PRId64, cfg->n_layers);
    if (s2s)
        put(out, &k, "model.decoder_layers", "%" PRId64, cfg->n_decoder_layers);
    put(out, &k, "model.d_model", "%" PRId64, cfg->layer.d_model);
    put(out, &k, "model.heads", "%" PRId64, cfg->layer.n_heads);
    put(out, &k, "model.d_ff", "%" PRId64, cfg->layer.d_ff);
    put(out, &k, "model.seq_len", "%" PRId64, cfg->max_seq_len);
    put(out, &k, "model.vocab_size", "%" PRId64, cfg->vocab_size);
    put(out, &k, "model.norm_first", "%" PRId64, cfg->layer.norm_first ? 1 : 0);
    put_str(out, &k, "model.activation", cfg->layer.activation == TG_ACT_GELU ? "gelu" : "relu");
    put_str(out, &k, "model.pos", cfg->pos == TG_POS_SINUSOIDAL ? "sinusoidal" : "learned");
    put(out, &k, "model.causal", "%" PRId64, cfg->causal && !s2s ? 1 : 0);
    put(out, &k, "model.tie_weights", "%" PRId64, cfg->tie_weights ? 1 : 0);
    tg__fmt_double(cfg->layer.dropout, d, sizeof d);
    put_str(out, &k, "model.dropout", d);
    /* set apart from model.dropout only: absent follows it, 0 is none */
    const double apart[2] = {cfg->layer.attn_dropout, cfg->layer.act_dropout};
    for (int i = 0; i < 2; i++)
        if (apart[i] != 0) {
            tg__fmt_double(apart[i] < 0 ? 0 : apart[i], d, sizeof d);
            put_str(out, &k, i ? "model.act_dropout" : "model.attn_dropout", d);
        }
    put_str(out, &k, "model.dtype", tg_dtype_str(dt));
    if (cfg->scale_embeddings) /* absent: 0 (the readers' default) */
        put(out, &k, "model.scale_embeddings", "%" PRId64, (int64_t)1);
    return k;
}
