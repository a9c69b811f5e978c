/*
 * generator.c - incremental decoding through a KV cache: prefill a prompt, then one token at a
 * time, for the decoder-only LM (tg_transformer with cfg.causal) and the encoder-decoder model
 * (cfg.n_decoder_layers > 0; see "The encoder-decoder model" below).
 *
 * max_len is the generator's length: the model's max_seq_len (tg_generator_new), or less
 * (tg_generator_new_len: caches, memory keys and tables of that many positions, for a caller
 * that knows how long its sequences get).
 * Graphs have static shapes, so a feed of n tokens runs a graph built for n:
 *   ids (B, n) i32, pos_ids (n) i32 = pos..pos+n-1, pos (1) i32
 *   x      = tok_emb[ids] + P[pos_ids]             (B, n, D)   P: pos_emb.weight or the
 *                                                              sinusoidal table (max_len, D)
 *   x      = layer_i(x)  with self-attention       (B, n, D)   tg_kv_attention over layer i's
 *            over the cache (tg_kv_attention)                  cache (writes rows pos..pos+n-1)
 *   logits = LN(x[:, n-1]) head_w^T + head_b       (B, 1, V)   the last position only
 * Each layer is tg_encoder_layer_forward()'s (post-norm or pre-norm, relu/gelu, dense_act when
 * fusion is on) with the attention replaced and no dropout (inference); the tests compare every
 * configuration against tg_transformer_forward() on the whole sequence.
 * Graphs: the step graph (n = 1) is built by tg_generator_new() (for fewer live rows on first
 * use, below) and kept, and for the decoder-only LM the refill graph (n = max(1, max_len / 2),
 * what the wrap at max_len re-prefills); a feed of any other length (a prompt, or an
 * encoder-decoder's re-prefill, which a translation never needs) gets a graph built after
 * tg_ctx_mark() and released by tg_ctx_rewind() once its logits are copied, so feeding any
 * number of tokens does not grow the context.
 *
 * The encoder-decoder model. tg_generator_set_source() runs the encode graph once per source:
 *   src (B, s) i32, src_pos_ids (s) i32 = 0..s-1
 *   memory = encoder(tok_emb[src] + P[src_pos_ids])  (B, s, D)  nn.Transformer's encoder.*,
 *                                                               its final norm, no dropout
 *   kv_i   = memory [W_k; W_v]_i^T + [b_k; b_v]_i    (B, s, 2D) rows [D, 3D) of decoder layer
 *                                                               i's multihead_attn.in_proj
 * and copies each kv_i into the leaf mkv_i (B, max_len, 2D) (rows >= s: blocked by mem_mask
 * (B, 1, 1, max_len)), so no step recomputes W_k memory or W_v memory. A feed then runs the
 * decoder layers (tg_decoder_layer_forward's sublayers) with the cached self-attention and the
 * cross-attention of the new positions over the stored memory keys and values, the decoder's
 * final norm (m->norm_w) and the head. The encode graph, for the call's distinct sources
 * (a sentence's beams share one), is built after a mark and released by a rewind: its plan
 * (sources x s x d_ff activations) is not kept between calls.
 * Sources of different lengths (tg_generator_set_sources): the encode graph takes a key
 * padding mask pad (B, s) (1 at row b's positions >= src_len[b], as nn.Transformer's
 * src_key_padding_mask) and mem_mask blocks each row's own padded positions.
 *
 * Live rows (tg_generator_select_rows): a search whose sentences finish keeps only the rows
 * still decoding, moved to the front; a feed then runs the step graph built for the smallest
 * row bucket (1..8, then 4 sizes per doubling: 10, 12, 14, 16, 20, ...; at most B) that
 * holds them. A bucket's graphs read and write the first rows of the same cache leaves
 * (tg__input_rows: no copy) and are built on first use; every step graph (any rows, any
 * memory width) and the refill graph share one arena, so the generator holds the largest
 * plan, not their sum.
 *
 * Row reordering (tg_generator_select, beam search): row b takes row rows[b]'s cache positions
 * 0..len-1, token history and, if the rows hold different sources (src_id), its memory keys,
 * values and mask. Each tensor is gathered through a scratch buffer (every source row read
 * before any destination is written), so rows may repeat or be permuted in cycles.
 */
#include "nn_internal.h"
#include "tgrad_train.h"
#include "core.h"

#include <math.h>
#include <stdio.h>

/* Step graphs over shorter memory widths: 16, 32, ..., at most this many. */
#define GEN_MAX_WSTEP 16

typedef struct gen_graph {
    int64_t n;                          /* new positions per run */
    int64_t rows;                       /* rows it computes */
    tg_tensor *ids, *pos_ids, *pos;     /* (B, n), (n), (1) i32 inputs */
    tg_tensor *logits;                  /* (B, 1, V) */
    tg_graph *g;
} gen_graph;

/* The encode graph of set_sources (built per call, released after it). */
struct enc_graph {
    int64_t s;                          /* source length (padded width) */
    int64_t nb;                         /* sources encoded (rows of ids) */
    tg_tensor *ids, *pos_ids;           /* (nb, s), (s) i32 inputs */
    tg_tensor *pad;                     /* (nb, s) key padding mask (1 = padding) */
    tg_tensor **kv;                     /* per decoder layer (nb, s, 2D) outputs */
    tg_graph *g;
};

/* A row bucket: the leaves its graphs read (the generator's own for B rows, else the first n
 * rows of them) and its step graph per memory width (built on first use). */
typedef struct gen_rows {
    int64_t n;
    tg_tensor **kc, **vc, **mkv, *mem_mask;
    gen_graph *step;                    /* (n_wstep + 1): widths 16 << k, then max_len */
} gen_rows;

struct tg_generator {
    tg_ctx *ctx;
    const tg_transformer *m;
    int64_t B, L, V, D, H, n_layers;
    int64_t len;                        /* positions the caches hold */
    int64_t refill_n;                   /* tokens kept at the wrap: max(1, L / 2) */
    tg_tensor **kc, **vc;               /* per layer: (B, H, Dh, L) keys transposed, (B, H, L, Dh) */
    tg_tensor *pe;                      /* (L, D) sinusoidal table, or NULL (learned) */
    tg_tensor *logits;                  /* (B, V): the last feed's last-position logits */
    int32_t *hist;                      /* (B, L): tokens at positions 0..len-1 of each row */
    int32_t *buf;                       /* (B, L): tokens of a wrap's re-prefill */
    int32_t *pbuf;                      /* (L): position ids */
    int64_t rows;                       /* live rows (B unless tg_generator_select_rows) */
    gen_rows *bk;                       /* (n_bk) row buckets, ascending; bk[n_bk - 1].n = B */
    int64_t n_bk;
    int64_t n_wstep;                    /* s2s: memory widths 16 << k < L (step graph widths) */
    int64_t cur_w;                      /* the width the live rows' sources fit (n_wstep: L) */
    tg_arena *arena;                    /* shared by the step graphs and the refill graph */
    gen_graph refill;                   /* decoder-only LM: the wrap's re-prefill (B rows) */
    bool freed;
    /* the encoder-decoder model (s2s); n_layers above counts its decoder layers */
    bool s2s;
    bool has_src;                       /* a source is set (every row holds one) */
    int64_t *src_len;                   /* (B): each row's source length */
    uint64_t *src_id;                   /* (B): which encoded source each row holds */
    int64_t *uniq;                      /* (B): set_sources: each row's distinct source */
    uint64_t next_src_id;               /* the next source's id (unique per generator) */
    tg_tensor **mkv;                    /* per decoder layer (B, L, 2D): memory [K | V] */
    tg_tensor *mem_mask;                /* (B, 1, 1, L) block mask: 1 at row b's positions
                                         * >= src_len[b] */
    /* tg_generator_select's gather buffer (grown on demand, released with the generator) */
    void *scratch;
    size_t scratch_bytes;
    int64_t *sel_rows;                  /* (B): scratch row lists */
    int64_t *sel_mem, *sel_src;         /* (B) */
    int precision;                      /* tg_generator_set_precision (TG_PRECISION_*) */
};

/* Self-attention of one layer over its cache: one in_proj product read as q, k, v head views
 * (as tg_mha_forward's fused path), tg_kv_attention, heads merged, out_proj. */
static tg_tensor *self_attn_cached(tg_ctx *ctx, const tg_mha *a, tg_tensor *x, tg_tensor *kc,
                                   tg_tensor *vc, tg_tensor *pos)
{
    int64_t B = tg_tensor_dim(x, 0), n = tg_tensor_dim(x, 1), D = a->d_model, H = a->n_heads;
    int64_t Dh = D / H;
    tg_tensor *qkv = tg_dense(ctx, x, a->in_proj_weight, a->in_proj_bias); /* (B, n, 3D) */
    qkv = tg_transpose(ctx, tg_reshape(ctx, qkv, TG_DIMS(B, n, 3 * H, Dh)), 1, 2);
    tg_tensor *q = tg_narrow(ctx, qkv, 1, 0, H);                        /* (B, H, n, Dh) each */
    tg_tensor *k = tg_narrow(ctx, qkv, 1, H, H);
    tg_tensor *v = tg_narrow(ctx, qkv, 1, 2 * H, H);
    tg_tensor *o = tg_kv_attention(ctx, q, k, v, kc, vc, pos, 1.0 / sqrt((double)Dh));
    o = tg_reshape(ctx, tg_transpose(ctx, o, 1, 2), TG_DIMS(B, n, D));  /* (B, n, D) */
    return tg_dense(ctx, o, a->out_proj_weight, a->out_proj_bias);
}

/* tg_encoder_layer_forward() (its sublayer pieces, encoder.c) with the cached self-attention
 * and no dropout. */
static tg_tensor *layer_cached(tg_ctx *ctx, const tg_encoder_layer *l, tg_tensor *x,
                               tg_tensor *kc, tg_tensor *vc, tg_tensor *pos)
{
    tg_encoder_config c = l->cfg;
    c.dropout = 0; /* inference */
    tg_tensor *h = tg__nn_sublayer_in(ctx, &c, x, l->norm1_weight, l->norm1_bias);
    tg_tensor *sa = self_attn_cached(ctx, &l->self_attn, h, kc, vc, pos);
    x = tg__nn_sublayer_out(ctx, &c, x, sa, l->norm1_weight, l->norm1_bias); /* (B, n, D) */
    h = tg__nn_sublayer_in(ctx, &c, x, l->norm2_weight, l->norm2_bias);
    tg_tensor *ff = tg__nn_ff_block(ctx, &l->ffn, h, 0);
    return tg__nn_sublayer_out(ctx, &c, x, ff, l->norm2_weight, l->norm2_bias);
}

/* Cross-attention of the new positions x (B, n, D) over one decoder layer's stored memory
 * keys and values kv (B, L, 2D) = [memory W_k^T + b_k | memory W_v^T + b_v], with the rows
 * beyond the source blocked by mem_mask (B, 1, 1, L): q from rows [0, D) of in_proj (as
 * tg_mha_forward's cross-attention), heads as views, SDPA, heads merged, out_proj. */
static tg_tensor *cross_attn_cached(tg_ctx *ctx, const tg_mha *a, tg_tensor *x, tg_tensor *kv,
                                    tg_tensor *mem_mask, int64_t w)
{
    int64_t B = tg_tensor_dim(x, 0), n = tg_tensor_dim(x, 1), D = a->d_model, H = a->n_heads;
    int64_t Dh = D / H, L = tg_tensor_dim(kv, 1);
    tg_tensor *q = tg_dense(ctx, x, tg_narrow(ctx, a->in_proj_weight, 0, 0, D),
                            tg_narrow(ctx, a->in_proj_bias, 0, 0, D));    /* (B, n, D) */
    q = tg_transpose(ctx, tg_reshape(ctx, q, TG_DIMS(B, n, H, Dh)), 1, 2); /* (B, H, n, Dh) */
    tg_tensor *m = tg_transpose(ctx, tg_reshape(ctx, kv, TG_DIMS(B, L, 2 * H, Dh)), 1, 2);
    if (w < L) /* the first w memory positions only (views: nothing copied) */
        m = tg_narrow(ctx, m, 2, 0, w);
    tg_tensor *k = tg_narrow(ctx, m, 1, 0, H);                           /* (B, H, w, Dh) each */
    tg_tensor *v = tg_narrow(ctx, m, 1, H, H);
    tg_attn_masks mm;
    memset(&mm, 0, sizeof mm);
    /* positions beyond the source are never attended */
    mm.attn_mask = w < L ? tg_narrow(ctx, mem_mask, 3, 0, w) : mem_mask;
    mm.attn_mask_kind = TG_MASK_BLOCK;
    tg_tensor *o = tg_sdpa(ctx, q, k, v, &mm, 1.0 / sqrt((double)Dh), NULL); /* (B, H, n, Dh) */
    o = tg_reshape(ctx, tg_transpose(ctx, o, 1, 2), TG_DIMS(B, n, D));  /* (B, n, D) */
    return tg_dense(ctx, o, a->out_proj_weight, a->out_proj_bias);
}

/* tg_decoder_layer_forward() (its sublayer pieces) with the cached self-attention, the
 * cross-attention over the stored memory keys and values, and no dropout. */
static tg_tensor *dec_layer_cached(tg_ctx *ctx, const tg_decoder_layer *l, tg_tensor *x,
                                   tg_tensor *kc, tg_tensor *vc, tg_tensor *pos, tg_tensor *kv,
                                   tg_tensor *mem_mask, int64_t w)
{
    tg_encoder_config c = l->cfg;
    c.dropout = 0; /* inference */
    tg_tensor *h = tg__nn_sublayer_in(ctx, &c, x, l->norm1_weight, l->norm1_bias);
    tg_tensor *y = self_attn_cached(ctx, &l->self_attn, h, kc, vc, pos);
    x = tg__nn_sublayer_out(ctx, &c, x, y, l->norm1_weight, l->norm1_bias); /* (B, n, D) */
    h = tg__nn_sublayer_in(ctx, &c, x, l->norm2_weight, l->norm2_bias);
    y = cross_attn_cached(ctx, &l->multihead_attn, h, kv, mem_mask, w);
    x = tg__nn_sublayer_out(ctx, &c, x, y, l->norm2_weight, l->norm2_bias);
    h = tg__nn_sublayer_in(ctx, &c, x, l->norm3_weight, l->norm3_bias);
    y = tg__nn_ff_block(ctx, &l->ffn, h, 0);
    return tg__nn_sublayer_out(ctx, &c, x, y, l->norm3_weight, l->norm3_bias);
}

/* Build the encode graph for sources of length s (no_grad): the encoder stack without dropout,
 * then each decoder layer's memory keys and values. Returns the status (error recorded). */
static tg_status build_encoder(tg_generator *gen, int64_t nb, int64_t s, struct enc_graph *eg)
{
    static const char *fn = "tg_generator_set_source";
    tg_ctx *ctx = gen->ctx;
    const tg_transformer *m = gen->m;
    const tg_encoder *enc = &m->seq2seq.encoder;
    int64_t D = gen->D;
    memset(eg, 0, sizeof *eg);
    eg->s = s;
    eg->nb = nb;
    eg->kv = tg__alloc(ctx, sizeof(tg_tensor *) * (size_t)gen->n_layers, fn);
    eg->ids = tg_input(ctx, TG_I32, TG_DIMS(nb, s), "generator.src_ids");
    eg->pos_ids = tg_input(ctx, TG_I32, TG_DIMS(s), "generator.src_pos_ids");
    eg->pad = tg_input(ctx, tg_tensor_dtype(m->tok_emb), TG_DIMS(nb, s),
                       "generator.src_key_padding_mask");
    if (!eg->kv || !eg->ids || !eg->pos_ids || !eg->pad)
        return tg_ctx_status(ctx) != TG_OK ? tg_ctx_status(ctx) : TG_ERR_NOMEM;
    tg_tensor *x = tg_embedding(ctx, eg->ids, m->tok_emb);               /* (B, s, D) */
    if (m->cfg.scale_embeddings)
        x = tg_scale(ctx, x, sqrt((double)m->cfg.layer.d_model));
    x = tg_add(ctx, x, tg_embedding(ctx, eg->pos_ids, m->pos_emb ? m->pos_emb : gen->pe));
    tg_attn_masks sm; /* the source key padding mask, as tg_transformer_forward_seq2seq's */
    memset(&sm, 0, sizeof sm);
    sm.key_padding_mask = eg->pad;
    for (int64_t i = 0; i < enc->n_layers; i++) {
        tg_encoder_layer l = enc->layers[i]; /* a copy without dropout (inference) */
        l.cfg.dropout = 0;
        l.cfg.act_dropout = TG_DROPOUT_OFF;
        l.self_attn.dropout = 0;
        x = tg_encoder_layer_forward(ctx, &l, x, &sm);                   /* (B, s, D) */
    }
    if (enc->norm_weight)
        x = tg_layer_norm(ctx, x, enc->norm_weight, enc->norm_bias, enc->cfg.layer_norm_eps);
    for (int64_t i = 0; i < gen->n_layers; i++) {
        const tg_mha *a = &m->seq2seq.decoder.layers[i].multihead_attn;
        eg->kv[i] = tg_dense(ctx, x, tg_narrow(ctx, a->in_proj_weight, 0, D, 2 * D),
                             tg_narrow(ctx, a->in_proj_bias, 0, D, 2 * D)); /* (B, s, 2D) */
    }
    if (tg__build_failed(ctx))
        return tg_ctx_status(ctx);
    tg_graph_opts go;
    memset(&go, 0, sizeof go);
    go.no_grad = true;
    go.precision = gen->precision;
    eg->g = tg_graph_new_opts(ctx, eg->kv, gen->n_layers, &go);
    return eg->g ? TG_OK : tg_ctx_status(ctx);
}

/* Build the graph that feeds n tokens (no_grad) to the br->n rows of bucket @p br, its
 * cross-attention over the first w memory positions (encoder-decoder), in the shared arena
 * when @p shared. Returns the status (error recorded). */
static tg_status build_graph(tg_generator *gen, const gen_rows *br, int64_t n, int64_t w,
                             bool shared, gen_graph *gg)
{
    tg_ctx *ctx = gen->ctx;
    const tg_transformer *m = gen->m;
    memset(gg, 0, sizeof *gg);
    gg->n = n;
    gg->rows = br->n;
    gg->ids = tg_input(ctx, TG_I32, TG_DIMS(br->n, n), "generator.ids");
    gg->pos_ids = tg_input(ctx, TG_I32, TG_DIMS(n), "generator.pos_ids");
    gg->pos = tg_input(ctx, TG_I32, TG_DIMS(1), "generator.pos");
    if (!gg->ids || !gg->pos_ids || !gg->pos)
        return tg_ctx_status(ctx);
    tg_tensor *x = tg_embedding(ctx, gg->ids, m->tok_emb);               /* (B, n, D) */
    if (m->cfg.scale_embeddings)
        x = tg_scale(ctx, x, sqrt((double)m->cfg.layer.d_model));
    x = tg_add(ctx, x, tg_embedding(ctx, gg->pos_ids, m->pos_emb ? m->pos_emb : gen->pe));
    for (int64_t i = 0; i < gen->n_layers; i++)
        x = gen->s2s ? dec_layer_cached(ctx, &m->seq2seq.decoder.layers[i], x, br->kc[i],
                                        br->vc[i], gg->pos, br->mkv[i], br->mem_mask, w)
                     : layer_cached(ctx, &m->layers[i], x, br->kc[i], br->vc[i], gg->pos);
    x = tg_narrow(ctx, x, 1, n - 1, 1);                                  /* (B, 1, D) */
    /* the final norm: the LM's norm.*, the encoder-decoder's decoder.norm.* */
    x = tg_layer_norm(ctx, x, m->norm_w, m->norm_b, m->cfg.layer.layer_norm_eps);
    gg->logits = tg_dense(ctx, x, m->head_w, m->head_b);                 /* (B, 1, V) */
    if (!gg->logits)
        return tg__nn_status(ctx) != TG_OK ? tg__nn_status(ctx) : TG_ERR_ARG;
    tg_graph_opts go;
    memset(&go, 0, sizeof go);
    go.no_grad = true;
    go.precision = gen->precision;
    go.arena = shared ? gen->arena : NULL;
    gg->g = tg_graph_new_opts(ctx, &gg->logits, 1, &go);
    return gg->g ? TG_OK : tg_ctx_status(ctx);
}

/* The row buckets up to B: 1..8, then 2^k (1, 1.25, 1.5, 1.75), then B. Writes them to @p out
 * (when not NULL) in ascending order; returns how many. */
static int64_t row_buckets(int64_t B, int64_t *out)
{
    int64_t n = 0;
    for (int64_t v = 1; v < B && v <= 8; v++) {
        if (out)
            out[n] = v;
        n++;
    }
    for (int64_t p = 8; p < B && p <= INT64_MAX / 4; p *= 2)
        for (int64_t q = 1; q <= 4; q++) {
            int64_t v = p + q * (p / 4);
            if (v >= B)
                break;
            if (out)
                out[n] = v;
            n++;
        }
    if (out)
        out[n] = B;
    return n + 1;
}

/* The bucket for @p n live rows (1 <= n <= B): the smallest that holds them. */
static gen_rows *bucket_for(const tg_generator *gen, int64_t n)
{
    int64_t k = 0;
    while (gen->bk[k].n < n)
        k++;
    return &gen->bk[k];
}

/* The step graph of bucket @p br for memory width index @p wi, built on first use (the
 * bucket's leaves too: the first br->n rows of the generator's). NULL with the error
 * recorded. */
static gen_graph *step_graph(tg_generator *gen, gen_rows *br, int64_t wi, const char *fn)
{
    tg_ctx *ctx = gen->ctx;
    if (br->step && br->step[wi].g)
        return &br->step[wi];
    int64_t NL = gen->n_layers, nw = gen->n_wstep + 1;
    size_t nl = sizeof(tg_tensor *) * (size_t)(NL > 0 ? NL : 1);
    tg_mark mark = tg_ctx_mark(ctx); /* a failure releases what this call made */
    bool new_step = !br->step, new_leaves = !br->kc;
    if (new_step && !(br->step = tg__alloc(ctx, sizeof(gen_graph) * (size_t)nw, fn)))
        goto fail;
    if (new_leaves) { /* a bucket below B: the first br->n rows of the generator's leaves */
        br->kc = tg__alloc(ctx, nl, fn);
        br->vc = tg__alloc(ctx, nl, fn);
        br->mkv = tg__alloc(ctx, nl, fn);
        if (!br->kc || !br->vc || !br->mkv)
            goto fail;
        for (int64_t i = 0; i < NL; i++) {
            br->kc[i] = tg__input_rows(ctx, gen->kc[i], br->n, "generator.k_cache.rows");
            br->vc[i] = tg__input_rows(ctx, gen->vc[i], br->n, "generator.v_cache.rows");
            if (!br->kc[i] || !br->vc[i])
                goto fail;
            if (gen->s2s && !(br->mkv[i] = tg__input_rows(ctx, gen->mkv[i], br->n,
                                                          "generator.memory_kv.rows")))
                goto fail;
        }
        if (gen->s2s && !(br->mem_mask = tg__input_rows(ctx, gen->mem_mask, br->n,
                                                         "generator.memory_mask.rows")))
            goto fail;
    }
    int64_t w = wi < gen->n_wstep ? (int64_t)16 << wi : gen->L;
    if (build_graph(gen, br, 1, w, true, &br->step[wi]) != TG_OK)
        goto fail;
    return &br->step[wi];
fail:
    if (tg_ctx_status(ctx) == TG_OK)
        tg__run_err(ctx, TG_ERR_NOMEM, fn, "out of memory");
    tg_ctx_rewind(ctx, mark); /* keeps the error state */
    if (new_step)
        br->step = NULL;
    else
        memset(&br->step[wi], 0, sizeof br->step[wi]);
    if (new_leaves) {
        br->kc = br->vc = br->mkv = NULL;
        br->mem_mask = NULL;
    }
    return NULL;
}

/* The model's own length, for tg_generator_new(). */
#define GEN_MODEL_LEN INT64_MIN

/* The model and the sizes: the caches' length *L and the token history's bytes *hist_bytes.
 * False with the error recorded. */
static bool generator_check(tg_ctx *ctx, const tg_transformer *m, int64_t batch,
                            int64_t max_len, const char *fn, int64_t *L_out,
                            size_t *hist_bytes)
{
    bool s2s = m && m->cfg.n_decoder_layers > 0;
    if (!m || !m->tok_emb || !m->head_w || !m->norm_w || m->cfg.n_layers < 0 ||
        m->cfg.n_layers > TG_TRANSFORMER_MAX_LAYERS ||
        (!s2s && m->cfg.n_layers > 0 && !m->layers) ||
        (s2s && (m->cfg.n_decoder_layers > TG_TRANSFORMER_MAX_LAYERS ||
                 !m->seq2seq.encoder.layers || !m->seq2seq.decoder.layers ||
                 m->seq2seq.decoder.n_layers != m->cfg.n_decoder_layers)))
        return tg__err(ctx, TG_ERR_ARG, fn, "model is NULL or not initialised") != NULL;
    if (!s2s && !m->cfg.causal)
        return tg__err(ctx, TG_ERR_ARG, fn,
                       "the model is not causal (an encoder classifier): only the decoder-only "
                       "LM (cfg.causal) generates") != NULL;
    if (batch < 1 || batch > TG_MAX_NUMEL)
        return tg__err(ctx, TG_ERR_ARG, fn, "batch %lld is not in [1, %lld]", (long long)batch,
                       (long long)TG_MAX_NUMEL) != NULL;
    if (max_len != GEN_MODEL_LEN && (max_len < 1 || max_len > m->cfg.max_seq_len))
        return tg__err(ctx, TG_ERR_ARG, fn, "max_len %lld is not in [1, max_seq_len %lld]",
                       (long long)max_len, (long long)m->cfg.max_seq_len) != NULL;
    int64_t L = max_len != GEN_MODEL_LEN ? max_len : m->cfg.max_seq_len;
    int64_t D = m->cfg.layer.d_model;
    int64_t cells, hb;
    if (!tg__mul_i64(batch, L, &cells) || !tg__bytes(cells, sizeof(int32_t), hist_bytes) ||
        !tg__mul_i64(batch, D, &hb) || !tg__mul_i64(hb, L, &hb) ||
        hb > (s2s ? TG_MAX_NUMEL / 2 : TG_MAX_NUMEL)) /* s2s: memory [K | V] (B, L, 2D) */
        return tg__err(ctx, TG_ERR_OVERFLOW, fn,
                       "batch %lld with length %lld and d_model %lld: caches too large",
                       (long long)batch, (long long)L, (long long)D) != NULL;
    *L_out = L;
    return true;
}

/* The token history and its buffers, the key and value caches of every layer, the positional
 * table if the model has none to learn, and an encoder-decoder's memory keys and values. */
static bool generator_caches(tg_generator *gen, tg_dtype dt, size_t hist_bytes, const char *fn)
{
    tg_ctx *ctx = gen->ctx;
    int64_t batch = gen->B, L = gen->L, D = gen->D, H = gen->H, NL = gen->n_layers;
    gen->hist = tg__alloc(ctx, hist_bytes, fn);
    gen->buf = tg__alloc(ctx, hist_bytes, fn);
    gen->pbuf = tg__alloc(ctx, sizeof(int32_t) * (size_t)L, fn);
    if (NL > 0) {
        gen->kc = tg__alloc(ctx, sizeof(tg_tensor *) * (size_t)NL, fn);
        gen->vc = tg__alloc(ctx, sizeof(tg_tensor *) * (size_t)NL, fn);
    }
    if (!gen->hist || !gen->buf || !gen->pbuf || (NL > 0 && (!gen->kc || !gen->vc)))
        return false;
    int64_t Dh = D / H;
    for (int64_t i = 0; i < NL; i++) {
        char name[64];
        snprintf(name, sizeof name, "generator.k_cache.%lld", (long long)i);
        gen->kc[i] = tg_input(ctx, dt, TG_DIMS(batch, H, Dh, L), name);
        snprintf(name, sizeof name, "generator.v_cache.%lld", (long long)i);
        gen->vc[i] = tg_input(ctx, dt, TG_DIMS(batch, H, L, Dh), name);
        if (!gen->kc[i] || !gen->vc[i])
            return false;
    }
    if (!gen->m->pos_emb && !(gen->pe = tg_sinusoidal_encoding(ctx, dt, L, D)))
        return false;
    if (gen->s2s) { /* memory keys/values per decoder layer (zero until a source is set) */
        gen->mkv = tg__alloc(ctx, sizeof(tg_tensor *) * (size_t)NL, fn);
        gen->mem_mask = tg_input(ctx, dt, TG_DIMS(batch, 1, 1, L), "generator.memory_mask");
        gen->src_len = tg__alloc(ctx, sizeof(int64_t) * (size_t)batch, fn);
        gen->src_id = tg__alloc(ctx, sizeof(uint64_t) * (size_t)batch, fn);
        gen->uniq = tg__alloc(ctx, sizeof(int64_t) * (size_t)batch, fn);
        if (!gen->mkv || !gen->mem_mask || !gen->src_len || !gen->src_id || !gen->uniq)
            return false;
        for (int64_t i = 0; i < NL; i++) {
            char name[64];
            snprintf(name, sizeof name, "generator.memory_kv.%lld", (long long)i);
            if (!(gen->mkv[i] = tg_input(ctx, dt, TG_DIMS(batch, L, 2 * D), name)))
                return false;
        }
    }
    return true;
}

/* The logits, the row selection, the row buckets, and the step graphs of all B rows (every
 * memory width), with the LM's re-prefill graph. */
static bool generator_graphs(tg_generator *gen, tg_dtype dt, const char *fn)
{
    tg_ctx *ctx = gen->ctx;
    int64_t batch = gen->B, L = gen->L;
    gen->logits = tg_input(ctx, dt, TG_DIMS(batch, gen->V), "generator.logits");
    gen->sel_rows = tg__alloc(ctx, sizeof(int64_t) * (size_t)batch, fn);
    gen->sel_mem = tg__alloc(ctx, sizeof(int64_t) * (size_t)batch, fn);
    gen->sel_src = tg__alloc(ctx, sizeof(int64_t) * (size_t)batch, fn);
    /* encoder-decoder: step graphs whose cross-attention reads only the first 16, 32, 64, ...
     * (< L) memory positions too, for sources that short */
    for (int64_t w = 16; gen->s2s && w < L && gen->n_wstep < GEN_MAX_WSTEP; w *= 2)
        gen->n_wstep++;
    gen->n_bk = row_buckets(batch, NULL);
    gen->bk = tg__alloc(ctx, sizeof(gen_rows) * (size_t)gen->n_bk, fn);
    int64_t *sizes = tg__alloc(ctx, sizeof(int64_t) * (size_t)gen->n_bk, fn);
    gen->arena = tg_arena_new(ctx);
    if (!gen->logits || !gen->sel_rows || !gen->sel_mem || !gen->sel_src || !gen->bk ||
        !sizes || !gen->arena)
        return false;
    row_buckets(batch, sizes);
    for (int64_t k = 0; k < gen->n_bk; k++)
        gen->bk[k].n = sizes[k];
    tg__free(ctx, sizes);
    gen_rows *all = &gen->bk[gen->n_bk - 1]; /* B rows: the generator's own leaves */
    all->kc = gen->kc;
    all->vc = gen->vc;
    all->mkv = gen->mkv;
    all->mem_mask = gen->mem_mask;
    gen->rows = batch;
    for (int64_t wi = 0; wi <= gen->n_wstep; wi++) /* B rows, every width: built here */
        if (!step_graph(gen, all, wi, fn))
            return false;
    /* the decoder-only LM wraps every L - L/2 tokens of a long generation: its re-prefill
     * graph is kept (a translation never wraps: its outputs stay below max_seq_len) */
    if (!gen->s2s && gen->refill_n > 1 &&
        build_graph(gen, all, gen->refill_n, L, true, &gen->refill) != TG_OK)
        return false;
    gen->cur_w = gen->n_wstep;
    return true;
}

/* tg_generator_new_len(): caches of @p max_len positions (GEN_MODEL_LEN: max_seq_len). */
static tg_generator *generator_new(tg_ctx *ctx, const tg_transformer *m, int64_t batch,
                                   int64_t max_len, const char *fn)
{
    if (!ctx)
        return NULL;
    tg__begin(ctx);
    if (tg__build_failed(ctx))
        return NULL; /* a build error is pending: keep it, allocate nothing */
    int64_t L = 0;
    size_t hist_bytes = 0;
    if (!generator_check(ctx, m, batch, max_len, fn, &L, &hist_bytes))
        return NULL;
    bool s2s = m->cfg.n_decoder_layers > 0;
    tg_dtype dt = tg_tensor_dtype(m->tok_emb);
    tg_mark mark = tg_ctx_mark(ctx); /* on failure everything made here is released */
    tg_generator *gen = tg__alloc(ctx, sizeof *gen, fn);
    if (!gen)
        return NULL;
    gen->ctx = ctx;
    gen->m = m;
    gen->B = batch;
    gen->L = L;
    gen->V = m->cfg.vocab_size;
    gen->D = m->cfg.layer.d_model;
    gen->H = m->cfg.n_layers > 0 ? m->cfg.layer.n_heads : 1;
    gen->n_layers = s2s ? m->cfg.n_decoder_layers : m->cfg.n_layers; /* layers with a cache */
    gen->s2s = s2s;
    gen->refill_n = L / 2 > 1 ? L / 2 : 1;
    if (generator_caches(gen, dt, hist_bytes, fn) && generator_graphs(gen, dt, fn))
        return gen;
    if (tg_ctx_status(ctx) == TG_OK)
        tg__err(ctx, TG_ERR_NOMEM, fn, "out of memory");
    tg_ctx_rewind(ctx, mark); /* the error stays recorded */
    return NULL;
}

tg_generator *tg_generator_new(tg_ctx *ctx, const tg_transformer *m, int64_t batch)
{
    return generator_new(ctx, m, batch, GEN_MODEL_LEN, "tg_generator_new");
}

tg_generator *tg_generator_new_len(tg_ctx *ctx, const tg_transformer *m, int64_t batch,
                                   int64_t max_len)
{
    return generator_new(ctx, m, batch, max_len == GEN_MODEL_LEN ? 0 : max_len,
                         "tg_generator_new_len");
}

/* Run @p gg (built for gg->n tokens on gg->rows rows) on tokens (gen->rows, gg->n) at
 * positions start..; the rows beyond gen->rows get token 0 (their results are never read).
 * Copies the live rows' logits into gen->logits. */
static tg_status run_graph(tg_generator *gen, gen_graph *gg, const int32_t *tokens,
                           int64_t start)
{
    int64_t n = gg->n, live = gen->rows * n, all = gg->rows * n;
    if (all > live) { /* padded in buf ((B, L) ints; n <= L): tokens may already be there */
        if (tokens != gen->buf)
            memcpy(gen->buf, tokens, sizeof(int32_t) * (size_t)live);
        memset(gen->buf + live, 0, sizeof(int32_t) * (size_t)(all - live));
        tokens = gen->buf;
    }
    for (int64_t i = 0; i < n; i++)
        gen->pbuf[i] = (int32_t)(start + i);
    int32_t p = (int32_t)start;
    tg_status s = tg_tensor_set_data(gg->ids, tokens, TG_I32, (size_t)all);
    if (s == TG_OK)
        s = tg_tensor_set_data(gg->pos_ids, gen->pbuf, TG_I32, (size_t)n);
    if (s == TG_OK)
        s = tg_tensor_set_data(gg->pos, &p, TG_I32, 1);
    if (s == TG_OK)
        s = tg_graph_forward(gg->g);
    if (s == TG_OK)
        memcpy(tg_tensor_data(gen->logits), tg_tensor_data(gg->logits),
               (size_t)(gen->rows * gen->V) * tg_dtype_size(tg_tensor_dtype(gen->logits)));
    return s;
}

/* Feed tokens (live rows, n) at positions start..start+n-1 through the right graph: one token
 * through the step graph of the live rows' bucket, more through B-row graphs. */
static tg_status run_tokens(tg_generator *gen, const int32_t *tokens, int64_t n, int64_t start)
{
    if (n == 1) {
        gen_graph *gg = step_graph(gen, bucket_for(gen, gen->rows), gen->cur_w,
                                   "tg_generator_feed");
        return gg ? run_graph(gen, gg, tokens, start) : tg_ctx_status(gen->ctx);
    }
    if (n == gen->refill_n && gen->refill.g)
        return run_graph(gen, &gen->refill, tokens, start);
    /* more tokens (a prompt, or an encoder-decoder's re-prefill at the wrap): a graph of its
     * own, released before returning */
    tg_ctx *ctx = gen->ctx;
    tg_mark mark = tg_ctx_mark(ctx);
    gen_graph gg;
    tg_status s = build_graph(gen, &gen->bk[gen->n_bk - 1], n, gen->L, false, &gg);
    if (s == TG_OK)
        s = run_graph(gen, &gg, tokens, start);
    tg_ctx_rewind(ctx, mark); /* keeps the error state */
    return s;
}

/* Run encode graph @p eg on the distinct sources src (nb, eg->s) (padding already replaced by
 * id 0) with source u's positions >= len[u] masked as padding, and store each decoder layer's
 * memory keys and values in its leaf: row b gets source gen->uniq[b]'s, rows 0..s-1. */
static tg_status run_encoder(tg_generator *gen, struct enc_graph *eg, const int32_t *src,
                             const int64_t *len)
{
    int64_t s = eg->s, nb = eg->nb, B = gen->B, L = gen->L, D = gen->D;
    for (int64_t i = 0; i < s; i++)
        gen->pbuf[i] = (int32_t)i;
    for (int64_t b = 0; b < nb; b++)
        for (int64_t j = 0; j < s; j++)
            tg_set(eg->pad, b * s + j, j >= len[b] ? 1.0 : 0.0);
    tg_status st = tg_tensor_set_data(eg->ids, src, TG_I32, (size_t)(nb * s));
    if (st == TG_OK)
        st = tg_tensor_set_data(eg->pos_ids, gen->pbuf, TG_I32, (size_t)s);
    if (st == TG_OK)
        st = tg_graph_forward(eg->g);
    if (st != TG_OK)
        return st;
    size_t es = tg_dtype_size(tg_tensor_dtype(gen->mkv[0])), row = (size_t)(2 * D) * es;
    for (int64_t i = 0; i < gen->n_layers; i++) {
        char *dst = tg_tensor_data(gen->mkv[i]);
        const char *srcp = tg_tensor_data(eg->kv[i]);             /* (B, s, 2D) contiguous */
        for (int64_t b = 0; b < B; b++)
            memcpy(dst + (size_t)(b * L) * row, srcp + (size_t)(gen->uniq[b] * s) * row,
                   (size_t)s * row);
    }
    return TG_OK;
}

/* The step graph for the longest source the rows hold: the narrowest memory width >= it. */
static void set_width(tg_generator *gen)
{
    int64_t s = 1;
    for (int64_t r = 0; r < gen->rows; r++)
        if (gen->src_len[r] > s)
            s = gen->src_len[r];
    gen->cur_w = gen->n_wstep;
    for (int64_t k = 0, w = 16; k < gen->n_wstep; k++, w *= 2)
        if (s <= w) {
            gen->cur_w = k;
            break;
        }
}

tg_status tg_generator_set_source(tg_generator *gen, const int32_t *src_ids, int64_t s)
{
    return tg_generator_set_sources(gen, src_ids, s, NULL);
}

/* The sources against the generator (an encoder-decoder) and the vocabulary, all checked
 * before anything changes. */
static tg_status check_sources(tg_generator *gen, const int32_t *src_ids, int64_t s,
                               const int64_t *src_len, const char *fn)
{
    tg_ctx *ctx = gen->ctx;
    if (!gen->s2s) {
        tg__run_err(ctx, TG_ERR_ARG, fn, "the model is not an encoder-decoder (n_decoder_layers "
                    "0): a decoder-only LM has no source");
        return TG_ERR_ARG;
    }
    if (!src_ids || s < 1 || s > gen->L) {
        tg__run_err(ctx, TG_ERR_ARG, fn, "src_ids %s with s = %lld (need 1 <= s <= %s %lld)",
                    src_ids ? "given" : "is NULL", (long long)s,
                    gen->L == gen->m->cfg.max_seq_len ? "max_seq_len" : "the generator's max_len",
                    (long long)gen->L);
        return TG_ERR_ARG;
    }
    for (int64_t r = 0; r < gen->B; r++) /* everything checked first: an error changes nothing */
        if (src_len && (src_len[r] < 1 || src_len[r] > s)) {
            tg__run_err(ctx, TG_ERR_ARG, fn, "src_len[%lld] = %lld is not in [1, s = %lld]",
                        (long long)r, (long long)src_len[r], (long long)s);
            return TG_ERR_ARG;
        }
    for (int64_t r = 0; r < gen->B; r++)
        for (int64_t i = 0; i < (src_len ? src_len[r] : s); i++) {
            int32_t id = src_ids[r * s + i];
            if (id < 0 || id >= gen->V) {
                tg__run_err(ctx, TG_ERR_ARG, fn,
                            "src_ids[%lld][%lld] = %lld is not a token id in [0, %lld)",
                            (long long)r, (long long)i, (long long)id, (long long)gen->V);
                return TG_ERR_ARG;
            }
        }
    return TG_OK;
}

/* The ids the encoder reads and the row lengths, in the generator's own buffers; a row equal
 * to the one before it shares its encoding. Returns the number of distinct sources. */
static int64_t unique_sources(tg_generator *gen, const int32_t *src_ids, int64_t s,
                              const int64_t *src_len)
{
    int64_t B = gen->B;
    /* the ids the encoder reads (padding as id 0: masked, so its value never matters) and the
     * row lengths, in the generator's own buffers */
    for (int64_t r = 0; r < B; r++) {
        int64_t n = src_len ? src_len[r] : s;
        gen->src_len[r] = n;
        for (int64_t i = 0; i < s; i++)
            gen->buf[r * s + i] = i < n ? src_ids[r * s + i] : 0;
    }
    /* a row equal to the one before it (length and ids: a sentence's beams) shares its
     * encoding: the distinct sources are moved to the front of buf, ulen their lengths */
    int64_t nu = 0, *ulen = gen->sel_src;
    for (int64_t r = 0; r < B; r++) {
        if (r > 0 && gen->src_len[r] == gen->src_len[r - 1] &&
            memcmp(gen->buf + r * s, gen->buf + gen->uniq[r - 1] * s,
                   sizeof(int32_t) * (size_t)s) == 0) {
            gen->uniq[r] = gen->uniq[r - 1];
            continue;
        }
        if (nu != r)
            memmove(gen->buf + nu * s, gen->buf + r * s, sizeof(int32_t) * (size_t)s);
        ulen[nu] = gen->src_len[r];
        gen->uniq[r] = nu++;
    }
    return nu;
}

tg_status tg_generator_set_sources(tg_generator *gen, const int32_t *src_ids, int64_t s,
                                   const int64_t *src_len)
{
    static const char *fn = "tg_generator_set_source";
    if (!gen)
        return TG_ERR_ARG; /* no context to record on */
    tg_ctx *ctx = gen->ctx;
    tg__begin(ctx);
    if (gen->freed) {
        tg__run_err(ctx, TG_ERR_ARG, fn, "the generator was freed (tg_generator_free); make a "
                    "new one with tg_generator_new");
        return TG_ERR_ARG;
    }
    tg_status st = check_sources(gen, src_ids, s, src_len, fn);
    if (st != TG_OK)
        return st;
    int64_t B = gen->B, L = gen->L;
    int64_t nu = unique_sources(gen, src_ids, s, src_len), *ulen = gen->sel_src;
    gen->has_src = false; /* until the new memory is stored */
    gen->len = 0;         /* a new source starts a new target */
    gen->rows = B;        /* every row holds a source */
    /* an encode graph for these nu sources of s tokens, released before returning */
    tg_mark mark = tg_ctx_mark(ctx);
    struct enc_graph eg;
    st = build_encoder(gen, nu, s, &eg);
    if (st == TG_OK)
        st = run_encoder(gen, &eg, gen->buf, ulen);
    tg_ctx_rewind(ctx, mark); /* keeps the error state */
    if (st != TG_OK)
        return st;
    /* the cross-attention of row b sees its source positions 0..src_len[b]-1 only */
    for (int64_t r = 0; r < B; r++) {
        for (int64_t j = 0; j < L; j++)
            tg_set(gen->mem_mask, r * L + j, j >= gen->src_len[r] ? 1.0 : 0.0);
        gen->src_id[r] = gen->next_src_id + (uint64_t)gen->uniq[r];
    }
    gen->next_src_id += (uint64_t)nu;
    gen->has_src = true;
    set_width(gen);
    return TG_OK;
}

/* Make room for @p bytes of gather buffer (owned like the generator's own leaves: a rewind
 * past the generator releases it). */
static bool scratch_reserve(tg_generator *gen, size_t bytes, const char *fn)
{
    if (bytes <= gen->scratch_bytes)
        return true;
    tg__free(gen->ctx, gen->scratch);
    gen->scratch_bytes = 0;
    gen->scratch = tg__alloc_owned(gen->ctx, bytes, fn, gen->logits->id + 1);
    if (!gen->scratch)
        return false;
    gen->scratch_bytes = bytes;
    return true;
}

/* dst rows[c] <- src rows from[c] for c < n of a tensor (B, ...) seen as B rows of @p nchunk
 * chunks of @p chunk bytes, chunk k of a row at offset k * @p stride (bytes) in the row of
 * @p row bytes. Entries c < @p nbuf (sources that are themselves destinations) go through
 * scratch: gathered first, written last; the others (sources never written) are copied
 * directly in between. */
static void gather_rows(tg_generator *gen, char *base, size_t row, int64_t nchunk, size_t stride,
                        size_t chunk, const int64_t *dst, const int64_t *from, int64_t n,
                        int64_t nbuf)
{
    char *tmp = gen->scratch;
    size_t per = (size_t)nchunk * chunk;
    int nt = tg__threads(gen->ctx);
    bool par = (double)n * (double)per >= (double)TG_PAR_MIN * 8;
    /* each iteration writes its own scratch slot or its own destination row: any thread
     * count copies the same bytes */
    TG_OMP_FOR(nt, par)
    for (int64_t c = 0; c < nbuf; c++)
        for (int64_t k = 0; k < nchunk; k++)
            memcpy(tmp + (size_t)c * per + (size_t)k * chunk,
                   base + (size_t)from[c] * row + (size_t)k * stride, chunk);
    TG_OMP_FOR(nt, par)
    for (int64_t c = nbuf; c < n; c++)
        for (int64_t k = 0; k < nchunk; k++)
            memcpy(base + (size_t)dst[c] * row + (size_t)k * stride,
                   base + (size_t)from[c] * row + (size_t)k * stride, chunk);
    TG_OMP_FOR(nt, par)
    for (int64_t c = 0; c < nbuf; c++)
        for (int64_t k = 0; k < nchunk; k++)
            memcpy(base + (size_t)dst[c] * row + (size_t)k * stride,
                   tmp + (size_t)c * per + (size_t)k * chunk, chunk);
}

tg_status tg_generator_select(tg_generator *gen, const int32_t *rows)
{
    return tg_generator_select_rows(gen, rows, gen ? gen->rows : 0);
}

int64_t tg_generator_rows(const tg_generator *gen)
{
    return gen && !gen->freed ? gen->rows : 0;
}

int64_t tg_generator_graph_rows(const tg_generator *gen, int64_t n)
{
    if (!gen || gen->freed || n < 1 || n > gen->B)
        return 0;
    return bucket_for(gen, n)->n;
}

/* The scratch bytes select_rows needs: n rows change, nbuf of them through a buffer, nm
 * memories change; grown once to one layer's key cache (B D L), not step by step as len grows. */
static size_t select_scratch(const tg_generator *gen, int64_t n, int64_t nbuf, int64_t nm)
{
    int64_t B = gen->B, L = gen->L, D = gen->D, len = gen->len;
    size_t es = tg_dtype_size(tg_tensor_dtype(gen->logits));
    size_t need = (size_t)nbuf * (size_t)(D * (len > 0 ? len : 1)) * es;
    size_t need_m = (size_t)nm * (size_t)(L * 2 * D) * es;
    size_t need_h = (size_t)n * (size_t)L * sizeof(int32_t) + (size_t)n * sizeof(uint64_t);
    if (need_m > need)
        need = need_m;
    if (need_h > need)
        need = need_h;
    size_t full = (size_t)(B * D * L) * es;
    if (need > gen->scratch_bytes && need < full)
        need = full;
    return need;
}

/* Rows mdst[0..nm) take the memory (keys and values, mask, source length and id) of the row
 * rows[] names. */
static void gather_memory(tg_generator *gen, const int32_t *rows, int64_t nm, size_t es)
{
    int64_t L = gen->L, D = gen->D, *src = gen->sel_src;
    int64_t *mdst = gen->sel_mem, smax = 1;
    for (int64_t c = 0; c < nm; c++) {
        src[c] = rows[mdst[c]];
        smax = gen->src_len[src[c]] > smax ? gen->src_len[src[c]] : smax;
    }
    /* memory positions < the source's length (those beyond are masked: whatever finite
     * values an earlier source left there are never attended) */
    for (int64_t i = 0; i < gen->n_layers; i++)
        gather_rows(gen, tg_tensor_data(gen->mkv[i]), (size_t)(L * 2 * D) * es, 1, 0,
                    (size_t)(smax * 2 * D) * es, mdst, src, nm, nm);
    gather_rows(gen, tg_tensor_data(gen->mem_mask), (size_t)L * es, 1, 0, (size_t)L * es,
                mdst, src, nm, nm);
    gather_rows(gen, (char *)gen->src_len, sizeof(int64_t), 1, 0, sizeof(int64_t), mdst,
                src, nm, nm);
    gather_rows(gen, (char *)gen->src_id, sizeof(uint64_t), 1, 0, sizeof(uint64_t), mdst,
                src, nm, nm);
}

tg_status tg_generator_select_rows(tg_generator *gen, const int32_t *rows, int64_t n_rows)
{
    static const char *fn = "tg_generator_select";
    if (!gen)
        return TG_ERR_ARG; /* no context to record on */
    tg_ctx *ctx = gen->ctx;
    tg__begin(ctx);
    if (gen->freed) {
        tg__run_err(ctx, TG_ERR_ARG, fn, "the generator was freed (tg_generator_free); make a "
                    "new one with tg_generator_new");
        return TG_ERR_ARG;
    }
    if (!rows) {
        tg__run_err(ctx, TG_ERR_ARG, fn, "rows is NULL");
        return TG_ERR_ARG;
    }
    int64_t B = gen->B, L = gen->L, D = gen->D, H = gen->H, Dh = D / H, len = gen->len;
    int64_t live = gen->rows, nr = n_rows;
    if (nr < 1 || nr > B) {
        tg__run_err(ctx, TG_ERR_ARG, fn, "n_rows = %lld is not in [1, batch %lld]",
                    (long long)nr, (long long)B);
        return TG_ERR_ARG;
    }
    for (int64_t b = 0; b < nr; b++)
        if (rows[b] < 0 || rows[b] >= live) {
            tg__run_err(ctx, TG_ERR_ARG, fn, "rows[%lld] = %lld is not a live row in [0, %lld)",
                        (long long)b, (long long)rows[b], (long long)live);
            return TG_ERR_ARG;
        }
    /* rows that change (n: first the nbuf whose source row changes too, then those whose
     * source row stays or is beyond the rows kept), and those whose source changes too (nm) */
    int64_t n = 0, nbuf = 0, nm = 0;
    int64_t *dst = gen->sel_rows, *src = gen->sel_src;
#define SRC_CHANGES(b) (rows[b] < nr && rows[rows[b]] != rows[b])
    for (int64_t b = 0; b < nr; b++)
        if (rows[b] != b && SRC_CHANGES(b))
            dst[n++] = b;
    nbuf = n;
    for (int64_t b = 0; b < nr; b++)
        if (rows[b] != b && !SRC_CHANGES(b))
            dst[n++] = b;
#undef SRC_CHANGES
    if (n == 0) {
        if (nr != live) {
            gen->rows = nr;
            if (gen->s2s && gen->has_src)
                set_width(gen);
        }
        return TG_OK;
    }
    if (gen->s2s && gen->has_src)
        for (int64_t c = 0; c < n; c++)
            if (gen->src_id[dst[c]] != gen->src_id[rows[dst[c]]])
                gen->sel_mem[nm++] = dst[c];
    size_t es = tg_dtype_size(tg_tensor_dtype(gen->logits));
    if (!scratch_reserve(gen, select_scratch(gen, n, nbuf, nm), fn))
        return tg_ctx_status(ctx) != TG_OK ? tg_ctx_status(ctx) : TG_ERR_NOMEM;
    for (int64_t c = 0; c < n; c++)
        src[c] = rows[dst[c]];
    if (len > 0)
        for (int64_t i = 0; i < gen->n_layers; i++) {
            /* keys (B, H, Dh, L): per row D chunks of len positions; values (B, H, L, Dh):
             * per row H chunks of len * Dh */
            gather_rows(gen, tg_tensor_data(gen->kc[i]), (size_t)(D * L) * es, D,
                        (size_t)L * es, (size_t)len * es, dst, src, n, nbuf);
            gather_rows(gen, tg_tensor_data(gen->vc[i]), (size_t)(D * L) * es, H,
                        (size_t)(L * Dh) * es, (size_t)(len * Dh) * es, dst, src, n, nbuf);
        }
    if (len > 0)
        gather_rows(gen, (char *)gen->hist, (size_t)L * sizeof(int32_t), 1, 0,
                    (size_t)len * sizeof(int32_t), dst, src, n, nbuf);
    if (nm > 0)
        gather_memory(gen, rows, nm, es);
    gen->rows = nr;
    if (gen->s2s && gen->has_src && (nm > 0 || nr != live))
        set_width(gen);
    return TG_OK;
}

tg_status tg_generator_feed(tg_generator *gen, const int32_t *ids, int64_t n)
{
    static const char *fn = "tg_generator_feed";
    if (!gen)
        return TG_ERR_ARG; /* no context to record on */
    tg_ctx *ctx = gen->ctx;
    tg__begin(ctx);
    if (gen->freed) {
        tg__run_err(ctx, TG_ERR_ARG, fn, "the generator was freed (tg_generator_free); make a "
                    "new one with tg_generator_new");
        return TG_ERR_ARG;
    }
    if (gen->s2s && !gen->has_src) {
        tg__run_err(ctx, TG_ERR_STATE, fn, "no source: an encoder-decoder generator decodes "
                    "after tg_generator_set_source()");
        return TG_ERR_STATE;
    }
    if (!ids || n < 1 || n > TG_MAX_NUMEL / gen->B) {
        tg__run_err(ctx, TG_ERR_ARG, fn, "ids %s with n = %lld (need n >= 1 tokens per row)",
                    ids ? "given" : "is NULL", (long long)n);
        return TG_ERR_ARG;
    }
    /* every id checked first: a bad one changes nothing */
    for (int64_t r = 0; r < gen->rows; r++)
        for (int64_t i = 0; i < n; i++) {
            int32_t id = ids[r * n + i];
            if (id < 0 || id >= gen->V) {
                tg__run_err(ctx, TG_ERR_ARG, fn,
                            "ids[%lld][%lld] = %lld is not a token id in [0, %lld)",
                            (long long)r, (long long)i, (long long)id, (long long)gen->V);
                return TG_ERR_ARG;
            }
        }
    int64_t B = gen->rows, L = gen->L, len = gen->len; /* the live rows */
    if (len + n <= L) { /* append at positions len..len+n-1 */
        tg_status s = run_tokens(gen, ids, n, len);
        if (s != TG_OK)
            return s; /* rows >= len are never read before being written again */
        for (int64_t r = 0; r < B; r++)
            memcpy(gen->hist + r * L + len, ids + r * n, sizeof(int32_t) * (size_t)n);
        gen->len = len + n;
        return TG_OK;
    }
    /* the context would pass max_seq_len: keep the last h tokens of (history, ids) and
     * prefill them again at positions 0..h-1 */
    int64_t h = gen->refill_n, total = len + n;
    for (int64_t r = 0; r < B; r++)
        for (int64_t t = 0; t < h; t++) {
            int64_t gi = total - h + t;
            gen->buf[r * h + t] = gi < len ? gen->hist[r * L + gi] : ids[r * n + gi - len];
        }
    tg_status s = run_tokens(gen, gen->buf, h, 0);
    if (s != TG_OK) {
        gen->len = 0; /* rows 0..h-1 may hold the new keys: the old context is gone */
        return s;
    }
    for (int64_t r = 0; r < B; r++)
        memcpy(gen->hist + r * L, gen->buf + r * h, sizeof(int32_t) * (size_t)h);
    gen->len = h;
    return TG_OK;
}

tg_tensor *tg_generator_logits(const tg_generator *gen)
{
    return gen && !gen->freed ? gen->logits : NULL;
}

int64_t tg_generator_length(const tg_generator *gen)
{
    return gen && !gen->freed ? gen->len : 0;
}

void tg_generator_reset(tg_generator *gen)
{
    if (gen)
        gen->len = 0; /* rows are overwritten before they are read again */
}

/* Free every step graph and the refill graph (they are built again at the next use). */
static void drop_graphs(tg_generator *gen)
{
    tg_graph_free(gen->refill.g);
    gen->refill.g = NULL;
    for (int64_t k = 0; k < gen->n_bk; k++)
        for (int64_t wi = 0; gen->bk[k].step && wi <= gen->n_wstep; wi++) {
            tg_graph_free(gen->bk[k].step[wi].g);
            gen->bk[k].step[wi].g = NULL;
        }
}

tg_status tg_generator_set_precision(tg_generator *gen, int precision)
{
    static const char *fn = "tg_generator_set_precision";
    if (!gen || gen->freed)
        return TG_ERR_ARG;
    tg_ctx *ctx = gen->ctx;
    tg__begin(ctx);
    if (precision != TG_PRECISION_F32 && precision != TG_PRECISION_BF16) {
        tg__run_err(ctx, TG_ERR_ARG, fn, "unknown precision %d (TG_PRECISION_F32 or "
                    "TG_PRECISION_BF16)", precision);
        return TG_ERR_ARG;
    }
    if (precision == TG_PRECISION_BF16 && tg_tensor_dtype(gen->m->tok_emb) == TG_F64) {
        tg__run_err(ctx, TG_ERR_DTYPE, fn, "bf16 precision is for f32 models; this one is f64");
        return TG_ERR_DTYPE;
    }
    if (precision == gen->precision)
        return TG_OK;
    drop_graphs(gen);
    gen->precision = precision;
    gen_rows *all = &gen->bk[gen->n_bk - 1];
    for (int64_t wi = 0; wi <= gen->n_wstep; wi++) /* as tg_generator_new: built here */
        if (!step_graph(gen, all, wi, fn))
            return tg_ctx_status(ctx);
    if (!gen->s2s && gen->refill_n > 1 &&
        build_graph(gen, all, gen->refill_n, gen->L, true, &gen->refill) != TG_OK)
        return tg_ctx_status(ctx);
    return TG_OK;
}

int tg_generator_precision(const tg_generator *gen)
{
    return gen ? gen->precision : TG_PRECISION_F32;
}

void tg_generator_free(tg_generator *gen)
{
    if (!gen || gen->freed)
        return;
    tg_ctx *ctx = gen->ctx;
    tg_graph_free(gen->refill.g);
    gen->refill.g = NULL;
    for (int64_t k = 0; k < gen->n_bk; k++) {
        gen_rows *br = &gen->bk[k];
        for (int64_t wi = 0; br->step && wi <= gen->n_wstep; wi++) {
            tg_graph_free(br->step[wi].g);
            br->step[wi].g = NULL;
        }
        if (k == gen->n_bk - 1 || !br->kc)
            continue; /* the generator's own leaves: freed below */
        for (int64_t i = 0; i < gen->n_layers; i++) { /* views of rows: never their own data */
            br->kc[i]->data = br->vc[i]->data = NULL;
            if (gen->s2s)
                br->mkv[i]->data = NULL;
        }
        if (br->mem_mask)
            br->mem_mask->data = NULL;
    }
    for (int64_t i = 0; gen->s2s && i < gen->n_layers; i++) {
        tg__free(ctx, gen->mkv[i]->data);
        gen->mkv[i]->data = NULL;
    }
    if (gen->mem_mask) {
        tg__free(ctx, gen->mem_mask->data);
        gen->mem_mask->data = NULL;
    }
    gen->has_src = false;
    tg__free(ctx, gen->scratch);
    gen->scratch = NULL;
    gen->scratch_bytes = 0;
    for (int64_t i = 0; i < gen->n_layers; i++) {
        tg__free(ctx, gen->kc[i]->data);
        tg__free(ctx, gen->vc[i]->data);
        gen->kc[i]->data = gen->vc[i]->data = NULL;
    }
    tg__free(ctx, gen->hist);
    tg__free(ctx, gen->buf);
    tg__free(ctx, gen->pbuf);
    gen->hist = gen->buf = gen->pbuf = NULL;
    gen->len = 0;
    gen->freed = true; /* the record itself stays (small) until the context goes */
}
