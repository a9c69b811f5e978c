/*
 * transformer.c - a stack of encoder layers with embeddings and an output projection:
 *   x      = tok_emb[ids] + pos                 (B, T, D)   pos: learned rows or sinusoidal
 *   x      = layer_i(x, masks)  i = 0..L-1      causal mask for the decoder-only LM
 *   logits = LN(x) head_w^T + head_b            (B, T, V)
 * (Vaswani et al. 2017 sec. 3.1, 3.4, 3.5; a GPT-style LM is the causal case.)
 * The encoder-decoder model (n_decoder_layers > 0) embeds source and target with the same
 * tables, runs nn.Transformer's encoder and decoder stacks (decoder.c) and the head:
 *   memory = encoder(emb(src));  logits = decoder(emb(tgt), memory) head_w^T + head_b
 */
#include "nn_internal.h"
#include "tgrad_train.h"
#include "core.h"

#include <assert.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

tg_tensor *tg_sinusoidal_encoding(tg_ctx *ctx, tg_dtype dt, int64_t t, int64_t d)
{
    tg_tensor *pe = tg__nn_sinusoidal(ctx, dt, t, d); /* (t, d), sizes checked */
    if (!pe)
        return NULL;
    for (int64_t p = 0; p < t; p++)
        for (int64_t i = 0; i < d; i++) {
            double freq = pow(10000.0, -(double)(i - i % 2) / (double)d);
            tg_set(pe, p * d + i, i % 2 ? cos((double)p * freq) : sin((double)p * freq));
        }
    return pe;
}

/* The configuration's counts and sizes, one by one (the messages name the field). */
static tg_status transformer_check_config(tg_ctx *ctx, const char *fn,
                                          const tg_transformer_config *cfg)
{
    if (cfg->n_layers > TG_TRANSFORMER_MAX_LAYERS ||
        cfg->n_decoder_layers > TG_TRANSFORMER_MAX_LAYERS) {
        bool dec = cfg->n_layers <= TG_TRANSFORMER_MAX_LAYERS;
        tg__err(ctx, TG_ERR_ARG, fn, "%s %lld too large (at most %d)",
                dec ? "n_decoder_layers" : "n_layers",
                (long long)(dec ? cfg->n_decoder_layers : cfg->n_layers),
                TG_TRANSFORMER_MAX_LAYERS);
        return TG_ERR_ARG;
    }
    bool s2s = cfg->n_decoder_layers > 0;
    if (cfg->n_decoder_layers < 0 || (s2s && cfg->n_layers < 1)) {
        tg__err(ctx, TG_ERR_ARG, fn, "n_decoder_layers %lld must be >= 0, and the "
                "encoder-decoder model needs n_layers >= 1 encoder layers (got %lld)",
                (long long)cfg->n_decoder_layers, (long long)cfg->n_layers);
        return TG_ERR_ARG;
    }
    if (cfg->vocab_size < 1 || cfg->max_seq_len < 1 || cfg->n_layers < 0 ||
        (cfg->pos != TG_POS_LEARNED && cfg->pos != TG_POS_SINUSOIDAL)) {
        tg__err(ctx, TG_ERR_ARG, fn,
                "bad config: vocab %lld (>= 1), max_seq_len %lld (>= 1), n_layers %lld (>= 0), "
                "pos %d (learned or sinusoidal)",
                (long long)cfg->vocab_size, (long long)cfg->max_seq_len,
                (long long)cfg->n_layers, (int)cfg->pos);
        return TG_ERR_ARG;
    }
    int64_t D = cfg->layer.d_model, S = cfg->max_seq_len;
    if (S > TG_TRANSFORMER_MAX_SEQ_LEN) {
        tg__err(ctx, TG_ERR_ARG, fn, "max_seq_len %lld is more than %d "
                "(TG_TRANSFORMER_MAX_SEQ_LEN)", (long long)S, TG_TRANSFORMER_MAX_SEQ_LEN);
        return TG_ERR_ARG;
    }
    if (D < 1) {
        tg__err(ctx, TG_ERR_ARG, fn, "d_model %lld must be >= 1", (long long)D);
        return TG_ERR_ARG;
    }
    double eps = cfg->layer.layer_norm_eps, p = cfg->layer.dropout;
    if (!(eps >= 0) || !isfinite(eps) || !(p >= 0 && p < 1)) {
        tg__err(ctx, TG_ERR_ARG, fn, "layer_norm_eps %g must be finite and >= 0, dropout %g in "
                "[0, 1)", eps, p);
        return TG_ERR_ARG;
    }
    return TG_OK;
}

/* The layer configuration, then every parameter's size and the whole parameter size against
 * the memory limit, before the first allocation. */
static tg_status transformer_plan(tg_ctx *ctx, const char *fn, tg_dtype dt,
                                  const tg_transformer_config *cfg)
{
    bool s2s = cfg->n_decoder_layers > 0;
    int64_t V = cfg->vocab_size, D = cfg->layer.d_model, S = cfg->max_seq_len;
    char why[96];
    tg__nn_plan plan = tg__nn_plan_begin(ctx, fn, dt);
    snprintf(why, sizeof why, "vocab_size %lld with d_model %lld", (long long)V, (long long)D);
    tg__nn_plan_add(&plan, cfg->tie_weights ? 1 : 2, 1, V, D, "tok_emb.weight (vocab, d_model)",
                    why);
    tg__nn_plan_add(&plan, 1, 1, V, 0, "head.bias (vocab)", why);
    snprintf(why, sizeof why, "max_seq_len %lld with d_model %lld", (long long)S, (long long)D);
    if (cfg->pos == TG_POS_LEARNED)
        tg__nn_plan_add(&plan, 1, 1, S, D, "pos_emb.weight (max_seq_len, d_model)", why);
    snprintf(why, sizeof why, "d_model %lld", (long long)D);
    tg__nn_plan_add(&plan, s2s ? 4 : 2, 1, D, 0, "norm.weight (d_model)", why);
    if (cfg->n_layers > 0) {
        const tg_encoder_config *lc = &cfg->layer;
        if (lc->n_heads < 1 || D % lc->n_heads != 0 || lc->d_ff < 1 ||
            (lc->activation != TG_ACT_RELU && lc->activation != TG_ACT_GELU)) {
            tg__err(ctx, TG_ERR_ARG, fn, "bad layer config: d_model %lld, n_heads %lld (must "
                    "divide d_model), d_ff %lld (>= 1), activation %d", (long long)D,
                    (long long)lc->n_heads, (long long)lc->d_ff, (int)lc->activation);
            return TG_ERR_ARG;
        }
        tg__nn_encoder_plan_add(&plan, lc, cfg->n_layers);
        if (s2s)
            tg__nn_layer_plan_add(&plan, lc, cfg->n_decoder_layers, true);
    }
    return tg__nn_plan_end(&plan);
}

/* The layer stacks: nn.Transformer's encoder.* and decoder.* (both with final norms) for an
 * encoder-decoder, else layers.N.* and the final norm. */
static tg_status transformer_stacks(tg_ctx *ctx, const char *fn, tg_transformer *m,
                                    tg_dtype dt, const tg_transformer_config *cfg)
{
    bool s2s = cfg->n_decoder_layers > 0;
    if (s2s) { /* nn.Transformer's encoder.* and decoder.*, both with final norms */
        if (tg_encoder_decoder_init(ctx, &m->seq2seq, dt, &cfg->layer, cfg->n_layers,
                                    cfg->n_decoder_layers, NULL) != TG_OK)
            return tg__nn_status(ctx);
        m->norm_w = m->seq2seq.decoder.norm_weight; /* the norm before the head */
        m->norm_b = m->seq2seq.decoder.norm_bias;
    } else if (cfg->n_layers > 0) {
        /* n_layers <= TG_TRANSFORMER_MAX_LAYERS: the product cannot wrap */
        m->layers = tg__alloc(ctx, sizeof *m->layers * (size_t)cfg->n_layers, fn);
        if (!m->layers)
            return TG_ERR_NOMEM;
    }
    for (int64_t i = 0; !s2s && i < cfg->n_layers; i++) {
        char prefix[64];
        snprintf(prefix, sizeof prefix, "layers.%lld.", (long long)i);
        if (tg_encoder_layer_init(ctx, &m->layers[i], dt, &cfg->layer, prefix) != TG_OK)
            return tg__nn_status(ctx); /* stop at the first failure */
    }
    if (!s2s)
        tg__nn_norm_params(ctx, dt, cfg->layer.d_model, NULL, "norm", &m->norm_w, &m->norm_b);
    return TG_OK;
}

tg_status tg_transformer_init(tg_ctx *ctx, tg_transformer *m, tg_dtype dt,
                              const tg_transformer_config *cfg)
{
    static const char *fn = "tg_transformer_init";
    tg_status s0 = tg__nn_init_begin(ctx, m, sizeof *m);
    if (s0 != TG_OK)
        return s0; /* no context, or a build error is pending: stop before allocating */
    if (!m || !cfg)
        return TG_ERR_ARG;
    tg_status s = transformer_check_config(ctx, fn, cfg);
    if (s == TG_OK)
        s = transformer_plan(ctx, fn, dt, cfg);
    if (s != TG_OK)
        return s;
    int64_t D = cfg->layer.d_model;
    m->cfg = *cfg;
    /* The embeddings and the head are named and shaped by the parameter list (params.c);
     * the stacks by their module builders, checked against the list at the end. */
    int64_t first = tg_ctx_n_params(ctx), np;
    tg_param_info pi;
    np = tg__transformer_param(cfg, 0, &pi); /* tok_emb.weight (V, D) */
    assert(np >= 4);                         /* every size was checked above */
    m->tok_emb = tg_param(ctx, dt, pi.rank, pi.shape, pi.name);
    if (!m->tok_emb)
        return ctx->status; /* stop at the first failure */
    tg_fill_normal(m->tok_emb, 0, cfg->scale_embeddings ? 1.0 / sqrt((double)D) : 1.0);
    if (cfg->pos == TG_POS_LEARNED) {
        tg__transformer_param(cfg, 1, &pi); /* pos_emb.weight (T, D) */
        m->pos_emb = tg_param(ctx, dt, pi.rank, pi.shape, pi.name);
        if (m->pos_emb)
            tg_fill_normal(m->pos_emb, 0, 1);
    }
    if (tg__build_failed(ctx))
        return ctx->status;
    s = transformer_stacks(ctx, fn, m, dt, cfg);
    if (s != TG_OK)
        return s;
    double bound = 1.0 / sqrt((double)D);
    if (cfg->tie_weights) {
        m->head_w = m->tok_emb;
    } else {
        tg__transformer_param(cfg, np - 2, &pi); /* head.weight (V, D) */
        m->head_w = tg__nn_param(ctx, dt, pi.rank, pi.shape, NULL, pi.name, bound, false);
    }
    tg__transformer_param(cfg, np - 1, &pi); /* head.bias (V) */
    m->head_b = tg__nn_param(ctx, dt, pi.rank, pi.shape, NULL, pi.name, bound, false);
    if (tg__build_failed(ctx))
        return ctx->status;
    /* Inside an I/O call (tg_model_load) a failed allocation is not a sticky build error, so
     * the builders above went on past it: a parameter is then missing. */
    if (tg_ctx_n_params(ctx) - first != np) {
        if (ctx->status == TG_OK) /* the allocation's message was dropped by a later call */
            tg__err(ctx, TG_ERR_NOMEM, fn, "created %lld of the %lld parameters: out of memory",
                    (long long)(tg_ctx_n_params(ctx) - first), (long long)np);
        return ctx->status;
    }
#ifndef NDEBUG
    /* what was created is the list, name by name and shape by shape (an invariant) */
    for (int64_t i = 0; i < np; i++) {
        const tg_tensor *t = tg_ctx_param(ctx, first + i);
        tg__transformer_param(cfg, i, &pi);
        assert(!strcmp(tg_tensor_name(t), pi.name) && tg_tensor_rank(t) == pi.rank &&
               tg_tensor_shape(t)[0] == pi.shape[0] &&
               (pi.rank < 2 || tg_tensor_shape(t)[1] == pi.shape[1]));
    }
#endif
    return TG_OK;
}

/* x = tok_emb[ids] (times sqrt(D) if cfg.scale_embeddings) + pos(T), then dropout:
 * (B, T) -> (B, T, D). */
static tg_tensor *embed(tg_ctx *ctx, const tg_transformer *m, tg_tensor *ids)
{
    int64_t T = tg_tensor_dim(ids, 1), D = m->cfg.layer.d_model;
    tg_tensor *x = tg_embedding(ctx, ids, m->tok_emb);                 /* (B, T, D) */
    if (m->cfg.scale_embeddings)
        x = tg_scale(ctx, x, sqrt((double)D));
    tg_tensor *pos = m->pos_emb ? tg_narrow(ctx, m->pos_emb, 0, 0, T)  /* (T, D) */
                                : tg_sinusoidal_encoding(ctx, tg_tensor_dtype(m->tok_emb), T, D);
    x = tg_add(ctx, x, pos);
    if (m->cfg.layer.dropout > 0)
        x = tg_dropout(ctx, x, m->cfg.layer.dropout);
    return x;
}

/* The model is initialised; ids (B, T) with T <= max_seq_len (named @p what). */
static bool ids_ok(tg_ctx *ctx, const char *fn, const tg_transformer *m, tg_tensor *ids,
                   const char *what)
{
    char b[128];
    if (tg_tensor_rank(ids) != 2 || tg_tensor_dim(ids, 1) > m->cfg.max_seq_len) {
        tg__err(ctx, TG_ERR_SHAPE, fn, "%s %s must be (B, T) with T <= %lld", what,
                tg_tensor_shape_str(ids, b, sizeof b), (long long)m->cfg.max_seq_len);
        return false;
    }
    return true;
}

tg_tensor *tg_transformer_forward(tg_ctx *ctx, const tg_transformer *m, tg_tensor *ids,
                                  tg_tensor *key_padding_mask)
{
    static const char *fn = "tg_transformer_forward";
    if (!ctx || !ids)
        return NULL;
    if (m && m->tok_emb && m->cfg.n_decoder_layers > 0)
        return tg__err(ctx, TG_ERR_ARG, fn, "an encoder-decoder model (n_decoder_layers %lld): "
                       "use tg_transformer_forward_seq2seq", (long long)m->cfg.n_decoder_layers);
    if (!m || !m->tok_emb || !m->head_w || m->cfg.n_layers < 0 ||
        m->cfg.n_layers > TG_TRANSFORMER_MAX_LAYERS || (m->cfg.n_layers > 0 && !m->layers))
        return tg__err(ctx, TG_ERR_ARG, fn, "model is NULL or not initialised");
    if (!ids_ok(ctx, fn, m, ids, "ids"))
        return NULL;
    tg_tensor *x = embed(ctx, m, ids);                                 /* (B, T, D) */
    tg_attn_masks masks;
    memset(&masks, 0, sizeof masks);
    masks.causal = m->cfg.causal;
    masks.key_padding_mask = key_padding_mask;
    for (int64_t i = 0; i < m->cfg.n_layers; i++)
        x = tg_encoder_layer_forward(ctx, &m->layers[i], x, &masks);  /* (B, T, D) */
    x = tg_layer_norm(ctx, x, m->norm_w, m->norm_b, m->cfg.layer.layer_norm_eps);
    return tg_dense(ctx, x, m->head_w, m->head_b);                     /* (B, T, V) */
}

tg_tensor *tg_transformer_forward_seq2seq(tg_ctx *ctx, const tg_transformer *m,
                                          tg_tensor *src_ids, tg_tensor *tgt_ids,
                                          tg_tensor *src_key_padding_mask,
                                          tg_tensor *tgt_key_padding_mask)
{
    static const char *fn = "tg_transformer_forward_seq2seq";
    if (!ctx || !src_ids || !tgt_ids)
        return NULL;
    if (!m || !m->tok_emb || !m->head_w)
        return tg__err(ctx, TG_ERR_ARG, fn, "model is NULL or not initialised");
    if (m->cfg.n_decoder_layers < 1 || !m->seq2seq.decoder.layers)
        return tg__err(ctx, TG_ERR_ARG, fn, "not an encoder-decoder model (n_decoder_layers "
                       "%lld): use tg_transformer_forward", (long long)m->cfg.n_decoder_layers);
    if (!ids_ok(ctx, fn, m, src_ids, "src_ids") || !ids_ok(ctx, fn, m, tgt_ids, "tgt_ids"))
        return NULL;
    char b1[128], b2[128];
    if (tg_tensor_dim(src_ids, 0) != tg_tensor_dim(tgt_ids, 0))
        return tg__err(ctx, TG_ERR_SHAPE, fn, "src_ids %s and tgt_ids %s differ in batch size",
                       tg_tensor_shape_str(src_ids, b1, sizeof b1),
                       tg_tensor_shape_str(tgt_ids, b2, sizeof b2));
    tg_attn_masks sm, tm, mm;
    memset(&sm, 0, sizeof sm);
    memset(&tm, 0, sizeof tm);
    memset(&mm, 0, sizeof mm);
    sm.key_padding_mask = src_key_padding_mask;  /* the encoder's self-attention */
    tm.key_padding_mask = tgt_key_padding_mask;  /* the decoder's masked self-attention */
    tm.causal = true;
    mm.key_padding_mask = src_key_padding_mask;  /* cross-attention: padded source keys */
    tg_tensor *y = tg_encoder_decoder_forward(ctx, &m->seq2seq, embed(ctx, m, src_ids),
                                              embed(ctx, m, tgt_ids), &sm, &tm, &mm);
    return tg_dense(ctx, y, m->head_w, m->head_b);                     /* (B, T, V) */
}
