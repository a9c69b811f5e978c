/*
 * batches.c - tokenized sequence-to-sequence data and length-bucketed batches (tgrad_data.h).
 *
 * tg_seq2seq_data holds only token ids: for pair i, ids[off[2i] .. off[2i+1]) is the source
 * (truncated to L - 1 tokens, then EOS) and ids[off[2i+1] .. off[2i+2]) the target tokens
 * (truncated to L - 1, no BOS/EOS: the decoder input adds BOS in front, the labels EOS at the
 * end). Texts are kept only on request (evaluation sets). All memory comes from the context
 * allocator (tg__alloc_owned, owned by the context so a tg_ctx_rewind never frees it) and
 * grows by doubling.
 *
 * The batch plan follows the rule in tgrad_data.h ("Length-bucketed batches") step by step.
 */
#include "data.h"

#include <stdlib.h>

/* ----- growable arrays in context memory ---------------------------------------------------- */
typedef struct grow {
    void *p;
    size_t len, cap; /* elements */
    size_t elem;
} grow;

static bool grow_reserve(tg_ctx *ctx, const char *fn, grow *g, size_t more)
{
    if (g->len + more <= g->cap)
        return true;
    size_t cap = g->cap ? g->cap : 1024;
    while (cap < g->len + more) {
        if (cap > SIZE_MAX / 2 / g->elem) {
            tg__run_err(ctx, TG_ERR_NOMEM, fn, "data too large");
            return false;
        }
        cap *= 2;
    }
    void *p = tg__alloc_owned(ctx, cap * g->elem, fn, TG__OWNER_CTX);
    if (!p)
        return false;
    if (g->len)
        memcpy(p, g->p, g->len * g->elem);
    tg__free(ctx, g->p);
    g->p = p;
    g->cap = cap;
    return true;
}

/* The n-best lists of a training set's sides, which tg_seq2seq_sample keeps for the next
 * epochs: the lists depend on the text and l only, the draws on the epoch, so later epochs
 * skip the tokenizer's search. Side j = 2 i + s has the segmentations seg[j] .. seg[j+1]
 * (their ends relative to ids[idx[j]], and their scores) over ids[idx[j] .. idx[j+1]), ids
 * of 16 bits when the vocabulary allows (most of the memo is ids), else 32. */
typedef struct nbest_memo {
    const tg_tokenizer *tok; /* the lists are of this tokenizer */
    uint64_t tok_hash;       /* (its model's bytes, when it has them) */
    int l;                   /* and this l; */
    bool complete;           /* every side's list is in */
    grow seg, ends, scores, idx, ids;
} nbest_memo;

/* Largest memo kept (bytes allocated); a larger training set samples without one. */
#define TG__NBEST_MEMO_MAX ((size_t)512 << 20)

struct tg_seq2seq_data {
    tg_ctx *ctx;
    tg_seq2seq_info info;
    grow ids;   /* int32_t: all sequences */
    grow off;   /* int64_t: 2N + 1 offsets into ids */
    grow lines; /* int64_t: N line numbers */
    grow text;  /* char: keep_text: source NUL target NUL, per pair */
    grow toff;  /* int64_t: keep_text: 2N offsets into text */
    bool keep_text;
    int32_t bos, eos; /* the tokenizer's */
    nbest_memo memo;  /* tg_seq2seq_sample's, of this (texts') data */
};

/* ----- loading ------------------------------------------------------------------------------- */
typedef struct loader {
    tg_seq2seq_data *d;
    const tg_tokenizer *tok;
    const char *fn, *label;
    int32_t *scratch; /* max_len ids */
    /* tg_seq2seq_sample: draw segmentations (l >= 1) with these keys (tgrad_data.h) */
    int l;
    double alpha;
    uint64_t key;     /* seed XOR (0x9E3779B97F4A7C15 * (epoch + 1)) */
    nbest_memo *memo; /* the lists: read (complete), added to (not yet), or none (NULL) */
    tg_ctx *memo_ctx; /* the memo's (its data's) */
    tg__nbest *nb;    /* scratch while the memo is built */
} loader;

static size_t memo_bytes(const nbest_memo *m)
{
    return m->seg.cap * m->seg.elem + m->ends.cap * m->ends.elem + m->scores.cap * m->scores.elem +
           m->idx.cap * m->idx.elem + m->ids.cap * m->ids.elem;
}

static void memo_reset(tg_ctx *ctx, nbest_memo *m)
{
    grow *g[] = {&m->seg, &m->ends, &m->scores, &m->idx, &m->ids};
    for (size_t k = 0; k < sizeof g / sizeof g[0]; k++)
        tg__free(ctx, g[k]->p);
    memset(m, 0, sizeof *m);
}

/* What tells tokenizers apart beyond their address: their kind, vocabulary and model bytes. */
static uint64_t tok_hash(const tg_tokenizer *tok)
{
    size_t size = 0;
    const void *model = tg_tokenizer_model(tok, &size);
    const char *kind = tg_tokenizer_kind(tok);
    int64_t v = tg_tokenizer_vocab_size(tok);
    uint64_t h = tg__fnv1a(TG__FNV_BASIS, kind, strlen(kind));
    h = tg__fnv1a(h, &v, sizeof v);
    return model ? tg__fnv1a(h, model, size) : h;
}

/* Begin a memo of tok's l-best lists (the first entries of the offsets); false if not. */
static bool memo_begin(tg_ctx *ctx, nbest_memo *m, const tg_tokenizer *tok, int l)
{
    memo_reset(ctx, m);
    m->tok = tok;
    m->tok_hash = tok_hash(tok);
    m->l = l;
    m->seg.elem = m->idx.elem = sizeof(int64_t);
    m->ends.elem = sizeof(int32_t);
    m->ids.elem = tg_tokenizer_vocab_size(tok) <= 65536 ? sizeof(uint16_t) : sizeof(int32_t);
    m->scores.elem = sizeof(double);
    if (!grow_reserve(ctx, "tg_seq2seq_sample", &m->seg, 1) ||
        !grow_reserve(ctx, "tg_seq2seq_sample", &m->idx, 1)) {
        memo_reset(ctx, m);
        return false;
    }
    ((int64_t *)m->seg.p)[m->seg.len++] = 0;
    ((int64_t *)m->idx.p)[m->idx.len++] = 0;
    return true;
}

/* Add the next side's list to the memo; false (nothing added) if it would pass the memo's
 * bound or the context's memory limit. */
static bool memo_add(tg_ctx *ctx, nbest_memo *m, const tg__nbest *nb)
{
    size_t need = (size_t)nb->count * (sizeof(int32_t) + sizeof(double)) +
                  (size_t)nb->n_ids * m->ids.elem + 2 * sizeof(int64_t);
    size_t limit = tg_ctx_memory_limit(ctx), have = memo_bytes(m);
    /* room for the doubling of the largest array, so the checks below never fail */
    size_t grow_by = m->ids.cap * m->ids.elem + need;
    if (have + grow_by > TG__NBEST_MEMO_MAX || (limit && tg_ctx_bytes(ctx) + grow_by * 2 > limit))
        return false;
    static const char fn[] = "tg_seq2seq_sample";
    if (!grow_reserve(ctx, fn, &m->seg, 1) || !grow_reserve(ctx, fn, &m->idx, 1) ||
        !grow_reserve(ctx, fn, &m->ends, (size_t)nb->count) ||
        !grow_reserve(ctx, fn, &m->scores, (size_t)nb->count) ||
        !grow_reserve(ctx, fn, &m->ids, (size_t)nb->n_ids))
        return false;
    int32_t *e = (int32_t *)m->ends.p + m->ends.len;
    for (int k = 0; k < nb->count; k++)
        e[k] = (int32_t)nb->ends[k];
    memcpy((double *)m->scores.p + m->scores.len, nb->scores, (size_t)nb->count * sizeof(double));
    if (m->ids.elem == sizeof(int32_t)) {
        memcpy((int32_t *)m->ids.p + m->ids.len, nb->ids, (size_t)nb->n_ids * sizeof(int32_t));
    } else {
        uint16_t *u = (uint16_t *)m->ids.p + m->ids.len;
        for (int64_t k = 0; k < nb->n_ids; k++)
            u[k] = (uint16_t)nb->ids[k]; /* checked in [0, vocab) by the tokenizer */
    }
    m->ends.len += (size_t)nb->count;
    m->scores.len += (size_t)nb->count;
    m->ids.len += (size_t)nb->n_ids;
    ((int64_t *)m->seg.p)[m->seg.len++] = (int64_t)m->ends.len;
    ((int64_t *)m->idx.p)[m->idx.len++] = (int64_t)m->ids.len;
    return true;
}

/* Side j's draw from the complete memo (tg_tokenizer_encode_sampled's rule and errors). */
static int64_t memo_pick(const loader *l, uint64_t j, uint64_t key, int32_t *ids, int64_t cap)
{
    const nbest_memo *m = l->memo;
    int64_t s0 = ((const int64_t *)m->seg.p)[j], s1 = ((const int64_t *)m->seg.p)[j + 1];
    int k =
        tg__tokenizer_draw(m->tok, (const double *)m->scores.p + s0, (int)(s1 - s0), l->alpha, key);
    if (k < 0)
        return -1;
    const int32_t *ends = (const int32_t *)m->ends.p + s0;
    int64_t b = ((const int64_t *)m->idx.p)[j] + (k > 0 ? ends[k - 1] : 0);
    int64_t len = ends[k] - (k > 0 ? ends[k - 1] : 0), n = len < cap ? len : cap;
    for (int64_t t = 0; t < n; t++)
        ids[t] = m->ids.elem == sizeof(int32_t) ? ((const int32_t *)m->ids.p)[b + t]
                                                : ((const uint16_t *)m->ids.p)[b + t];
    return len;
}

/* Side j's list from the tokenizer, added to the memo being built (which stops, freed, at the
 * first list that does not fit), and the draw from it. */
static int64_t memo_build(loader *l, const char *s, size_t n, uint64_t key, int32_t *ids,
                          int64_t cap)
{
    tg__nbest *nb = l->nb;
    if (tg__tokenizer_nbest(l->tok, s, n, l->l, nb) != TG_OK)
        return -1;
    int64_t k = tg__tokenizer_pick(l->tok, nb->ends, nb->scores, nb->count, nb->ids, l->alpha, key,
                                   ids, cap);
    if (k >= 0 && !memo_add(l->memo_ctx, l->memo, nb)) {
        if (tg_ctx_status(l->memo_ctx) == TG_ERR_NOMEM) /* the memo's own allocation only */
            tg_ctx_clear_error(l->memo_ctx);
        memo_reset(l->memo_ctx, l->memo);
        l->memo = NULL;
    }
    free(nb->ids);
    nb->ids = NULL;
    return k;
}

/* Side s of pair i, as tg_seq2seq_sample's rule says: sampled when l >= 1, else the best. */
static int64_t encode_side(loader *l, const char *s, size_t n, int side, int32_t *ids, int64_t cap)
{
    if (l->l < 1)
        return tg_tokenizer_encode(l->tok, s, n, ids, cap);
    uint64_t i = (uint64_t)l->d->lines.len, j = 2 * i + (uint64_t)side;
    uint64_t key = l->key ^ (0xD1B54A32D192ED03ULL * (j + 1));
    if (l->memo && l->memo->complete)
        return memo_pick(l, j, key, ids, cap);
    if (l->memo)
        return memo_build(l, s, n, key, ids, cap);
    return tg_tokenizer_encode_sampled(l->tok, s, n, l->l, l->alpha, key, ids, cap);
}

/* Tokenize one side into d->ids: at most L - 1 ids, then EOS if @p eos. */
static tg_status add_side(loader *l, const tg_pair *p, const char *s, size_t n, bool eos,
                          const char *side, bool *truncated)
{
    tg_seq2seq_data *d = l->d;
    int64_t cap = d->info.max_len - 1;
    int64_t k = encode_side(l, s, n, eos ? 0 : 1, l->scratch, cap);
    if (k < 0) {
        tg_status st = tg_ctx_status(tg_tokenizer_ctx(l->tok));
        st = st == TG_OK ? TG_ERR_ARG : st;
        tg__err_replace(d->ctx, st, l->fn, "%s:%lld: %s: %s", l->label, (long long)p->line, side,
                        tg_ctx_message(tg_tokenizer_ctx(l->tok)));
        return st;
    }
    *truncated = k > cap;
    int64_t m = k < cap ? k : cap;
    if (!grow_reserve(d->ctx, l->fn, &d->ids, (size_t)m + 1))
        return TG_ERR_NOMEM;
    int32_t *ids = (int32_t *)d->ids.p + d->ids.len;
    memcpy(ids, l->scratch, (size_t)m * sizeof *ids);
    if (eos)
        ids[m++] = d->eos;
    d->ids.len += (size_t)m;
    return TG_OK;
}

static bool put_text(tg_seq2seq_data *d, const char *fn, const char *s, size_t n)
{
    if (!grow_reserve(d->ctx, fn, &d->text, n + 1) || !grow_reserve(d->ctx, fn, &d->toff, 1))
        return false;
    ((int64_t *)d->toff.p)[d->toff.len++] = (int64_t)d->text.len;
    memcpy((char *)d->text.p + d->text.len, s, n);
    d->text.len += n;
    ((char *)d->text.p)[d->text.len++] = '\0';
    return true;
}

static tg_status load_pair(void *user, const tg_pair *p)
{
    loader *l = user;
    tg_seq2seq_data *d = l->d;
    if (!grow_reserve(d->ctx, l->fn, &d->off, 2) || !grow_reserve(d->ctx, l->fn, &d->lines, 1))
        return TG_ERR_NOMEM;
    bool ts, tt;
    tg_status st = add_side(l, p, p->source, p->source_len, true, "source", &ts);
    if (st != TG_OK)
        return st;
    int64_t *off = d->off.p;
    off[d->off.len++] = (int64_t)d->ids.len;
    st = add_side(l, p, p->target, p->target_len, false, "target", &tt);
    if (st != TG_OK)
        return st;
    off[d->off.len++] = (int64_t)d->ids.len;
    ((int64_t *)d->lines.p)[d->lines.len++] = p->line;
    if (d->keep_text && (!put_text(d, l->fn, p->source, p->source_len) ||
                         !put_text(d, l->fn, p->target, p->target_len)))
        return TG_ERR_NOMEM;
    int64_t i = (int64_t)d->lines.len - 1;
    int64_t S = off[2 * i + 1] - off[2 * i], T = off[2 * i + 2] - off[2 * i + 1] + 1;
    tg_seq2seq_info *in = &d->info;
    in->pairs++;
    in->truncated_src += ts;
    in->truncated_tgt += tt;
    in->src_tokens += S;
    in->tgt_tokens += T;
    if (S > in->max_src)
        in->max_src = S;
    if (T > in->max_tgt)
        in->max_tgt = T;
    return TG_OK;
}

static void data_release(tg_seq2seq_data *d)
{
    tg_ctx *ctx = d->ctx;
    memo_reset(ctx, &d->memo);
    tg__free(ctx, d->ids.p);
    tg__free(ctx, d->off.p);
    tg__free(ctx, d->lines.p);
    tg__free(ctx, d->text.p);
    tg__free(ctx, d->toff.p);
    tg__free(ctx, d);
}

/* An empty data set of sequences up to @p max_len tokens with @p tok's specials, and a
 * scratch array of max_len ids (*scratch, freed by the caller). */
static tg_seq2seq_data *data_new(tg_ctx *ctx, const char *fn, int64_t max_len, bool keep_text,
                                 const tg_tokenizer *tok, int32_t **scratch)
{
    tg_seq2seq_data *d = tg__alloc_owned(ctx, sizeof *d, fn, TG__OWNER_CTX);
    *scratch = tg__alloc(ctx, (size_t)max_len * sizeof **scratch, fn);
    if (!d || !*scratch) {
        tg__free(ctx, d);
        tg__free(ctx, *scratch);
        return NULL;
    }
    memset(d, 0, sizeof *d);
    d->ctx = ctx;
    d->keep_text = keep_text;
    d->ids.elem = sizeof(int32_t);
    d->off.elem = d->lines.elem = d->toff.elem = sizeof(int64_t);
    d->text.elem = 1;
    d->info.max_len = max_len;
    tg_token_ids sp = tg_tokenizer_special(tok);
    d->bos = sp.bos;
    d->eos = sp.eos;
    d->info.pad_id = sp.pad >= 0 ? sp.pad : sp.unk >= 0 ? sp.unk : 0;
    if (!grow_reserve(ctx, fn, &d->off, 1)) {
        data_release(d);
        tg__free(ctx, *scratch);
        return NULL;
    }
    ((int64_t *)d->off.p)[d->off.len++] = 0;
    return d;
}

/* path != NULL: the file; else the buffer. */
static tg_seq2seq_data *load(tg_ctx *ctx, const char *fn, const char *path, const void *data,
                             size_t size, const char *label, const tg_tokenizer *tok,
                             const tg_seq2seq_opts *opts)
{
    tg_seq2seq_opts o = opts ? *opts : (tg_seq2seq_opts){0};
    if (!o.max_len)
        o.max_len = 256;
    if (!tok || (!path && !data && size)) {
        tg__run_err(ctx, TG_ERR_ARG, fn, "NULL %s", tok ? "data" : "tokenizer");
        return NULL;
    }
    if (o.max_len < 2 || o.max_len > ((int64_t)1 << 30)) {
        tg__run_err(ctx, TG_ERR_ARG, fn, "max_len %lld is outside [2, 2^30]",
                    (long long)o.max_len);
        return NULL;
    }
    int32_t *scratch = NULL;
    tg_seq2seq_data *d = data_new(ctx, fn, o.max_len, o.keep_text, tok, &scratch);
    if (!d)
        return NULL;
    tg_status st = TG_OK;
    tg__src src;
    loader l = {.d = d, .tok = tok, .fn = fn, .scratch = scratch};
    tg_pairs_info pi = {0, 0, 0};
    if (st == TG_OK) {
        if (path)
            st = tg__src_open_file(ctx, &src, fn, path);
        else {
            tg__src_open_mem(&src, fn, data ? data : "", size);
            if (label)
                src.label = label;
        }
    }
    if (st == TG_OK) {
        l.label = src.label;
        st = tg__pairs_read_src(ctx, fn, &src, o.max_line, load_pair, &l, &pi);
        tg__src_close(ctx, &src);
    }
    tg__free(ctx, scratch);
    if (st != TG_OK) {
        data_release(d);
        return NULL;
    }
    d->info.hash = pi.hash;
    d->info.bytes = pi.bytes;
    return d;
}

tg_seq2seq_data *tg_seq2seq_load(tg_ctx *ctx, const char *path, const tg_tokenizer *tok,
                                 const tg_seq2seq_opts *opts)
{
    static const char fn[] = "tg_seq2seq_load";
    if (!ctx)
        return NULL;
    tg__io_enter(ctx);
    tg_seq2seq_data *d = NULL;
    if (!path)
        tg__run_err(ctx, TG_ERR_ARG, fn, "path is NULL");
    else
        d = load(ctx, fn, path, NULL, 0, NULL, tok, opts);
    tg__io_leave(ctx);
    return d;
}

tg_seq2seq_data *tg_seq2seq_load_mem(tg_ctx *ctx, const void *data, size_t size,
                                     const char *label, const tg_tokenizer *tok,
                                     const tg_seq2seq_opts *opts)
{
    static const char fn[] = "tg_seq2seq_load_mem";
    if (!ctx)
        return NULL;
    tg__io_enter(ctx);
    tg_seq2seq_data *d = load(ctx, fn, NULL, data, size, label, tok, opts);
    tg__io_leave(ctx);
    return d;
}

/* Whether tg_seq2seq_sample can run on @p d with @p tok (else an error on ctx). */
static bool sample_ok(tg_ctx *ctx, const char *fn, const tg_seq2seq_data *d,
                      const tg_tokenizer *tok, int l, double alpha, int64_t epoch)
{
    const char *why = NULL;
    tg_token_ids sp = tg_tokenizer_special(tok);
    if (!d || !tok)
        why = "NULL data or tokenizer";
    else if (!d->keep_text)
        why = "the data were loaded without keep_text (sampling re-reads the texts)";
    else if (sp.bos != d->bos || sp.eos != d->eos)
        why = "the tokenizer's bos and eos ids differ from the data's";
    else if (epoch < 0)
        why = "epoch must be >= 0";
    else if (l < 1 || l > TG_SAMPLE_MAX_NBEST || !(alpha >= 0 && alpha <= 100))
        why = "l must be in [1, TG_SAMPLE_MAX_NBEST] and alpha in [0, 100]";
    if (why) {
        tg__run_err(ctx, TG_ERR_ARG, fn, "%s", why);
        return false;
    }
    if (!tg_tokenizer_can_sample(tok)) {
        tg__run_err(ctx, TG_ERR_UNSUPPORTED, fn,
                    "the %s tokenizer cannot sample segmentations "
                    "(a SentencePiece unigram model can)",
                    tg_tokenizer_kind(tok));
        return false;
    }
    return true;
}

/* The memo tg_seq2seq_sample reads or builds for d (NULL: sample without one). The memo is
 * d's, in d's context; it is kept only when that is the caller's (errors stay the call's). */
static nbest_memo *sample_memo(tg_ctx *ctx, const tg_seq2seq_data *d, const tg_tokenizer *tok,
                               int l)
{
    nbest_memo *m = (nbest_memo *)&d->memo; /* a cache: d's contents do not change */
    if (d->ctx != ctx)
        return NULL;
    if (m->complete && m->tok == tok && m->l == l && m->tok_hash == tok_hash(tok))
        return m;
    return memo_begin(ctx, m, tok, l) ? m : NULL;
}

tg_seq2seq_data *tg_seq2seq_sample(tg_ctx *ctx, const tg_seq2seq_data *d,
                                   const tg_tokenizer *tok, int l, double alpha, uint64_t seed,
                                   int64_t epoch)
{
    static const char fn[] = "tg_seq2seq_sample";
    if (!ctx)
        return NULL;
    tg__begin(ctx);
    if (!sample_ok(ctx, fn, d, tok, l, alpha, epoch))
        return NULL;
    int32_t *scratch = NULL;
    tg_seq2seq_data *o = data_new(ctx, fn, d->info.max_len, false, tok, &scratch);
    if (!o)
        return NULL;
    loader ld = {.d = o,
                 .tok = tok,
                 .fn = fn,
                 .label = "pairs",
                 .scratch = scratch,
                 .l = l,
                 .alpha = alpha,
                 .key = seed ^ (0x9E3779B97F4A7C15ULL * ((uint64_t)epoch + 1)),
                 .memo = sample_memo(ctx, d, tok, l),
                 .memo_ctx = ctx};
    if (ld.memo && !ld.memo->complete && !(ld.nb = malloc(sizeof *ld.nb))) {
        memo_reset(ctx, ld.memo);
        ld.memo = NULL;
    }
    tg_status st = TG_OK;
    for (int64_t i = 0; st == TG_OK && i < d->info.pairs; i++) {
        const char *a = tg_seq2seq_source_text(d, i), *b = tg_seq2seq_target_text(d, i);
        tg_pair p = {a, strlen(a), b, strlen(b), tg_seq2seq_line(d, i)};
        st = load_pair(&ld, &p);
    }
    free(ld.nb);
    tg__free(ctx, scratch);
    if (ld.memo && !ld.memo->complete) {
        if (st == TG_OK)
            ld.memo->complete = true;
        else
            memo_reset(ctx, ld.memo);
    }
    if (st != TG_OK) {
        data_release(o);
        return NULL;
    }
    o->info.hash = d->info.hash;
    o->info.bytes = d->info.bytes;
    return o;
}

void tg_seq2seq_free(tg_seq2seq_data *d)
{
    if (d)
        data_release(d);
}

tg_seq2seq_info tg_seq2seq_get_info(const tg_seq2seq_data *d)
{
    tg_seq2seq_info z;
    memset(&z, 0, sizeof z);
    return d ? d->info : z;
}

int64_t tg_seq2seq_count(const tg_seq2seq_data *d) { return d ? d->info.pairs : 0; }

static bool in_range(const tg_seq2seq_data *d, int64_t i)
{
    return d && i >= 0 && i < d->info.pairs;
}

const int32_t *tg_seq2seq_source(const tg_seq2seq_data *d, int64_t i, int64_t *len)
{
    if (len)
        *len = 0;
    if (!in_range(d, i))
        return NULL;
    const int64_t *off = d->off.p;
    if (len)
        *len = off[2 * i + 1] - off[2 * i];
    return (const int32_t *)d->ids.p + off[2 * i];
}

const int32_t *tg_seq2seq_target(const tg_seq2seq_data *d, int64_t i, int64_t *len)
{
    if (len)
        *len = 0;
    if (!in_range(d, i))
        return NULL;
    const int64_t *off = d->off.p;
    if (len)
        *len = off[2 * i + 2] - off[2 * i + 1];
    return (const int32_t *)d->ids.p + off[2 * i + 1];
}

int64_t tg_seq2seq_src_len(const tg_seq2seq_data *d, int64_t i)
{
    if (!in_range(d, i))
        return 0;
    const int64_t *off = d->off.p;
    return off[2 * i + 1] - off[2 * i];
}

int64_t tg_seq2seq_tgt_len(const tg_seq2seq_data *d, int64_t i)
{
    if (!in_range(d, i))
        return 0;
    const int64_t *off = d->off.p;
    return off[2 * i + 2] - off[2 * i + 1] + 1;
}

int64_t tg_seq2seq_line(const tg_seq2seq_data *d, int64_t i)
{
    return in_range(d, i) ? ((const int64_t *)d->lines.p)[i] : 0;
}

const char *tg_seq2seq_source_text(const tg_seq2seq_data *d, int64_t i)
{
    if (!in_range(d, i) || !d->keep_text)
        return NULL;
    return (const char *)d->text.p + ((const int64_t *)d->toff.p)[2 * i];
}

const char *tg_seq2seq_target_text(const tg_seq2seq_data *d, int64_t i)
{
    if (!in_range(d, i) || !d->keep_text)
        return NULL;
    return (const char *)d->text.p + ((const int64_t *)d->toff.p)[2 * i + 1];
}

/* ----- the batch plan ------------------------------------------------------------------------ */
#define GOLDEN 0x9E3779B97F4A7C15ULL

static uint64_t splitmix64_next(uint64_t *s)
{
    *s += GOLDEN;
    uint64_t z = *s;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
}

struct tg_batches {
    tg_ctx *ctx;
    int64_t n_batches, n;
    int64_t *order;  /* (n) example indices, batch by batch in epoch order */
    int64_t *start;  /* (n_batches + 1) */
    int64_t *S, *T;  /* (n_batches) */
};

typedef struct key {
    int64_t T, S, rank, idx;
} key;

static int cmp_key(const void *a, const void *b)
{
    const key *x = a, *y = b;
    if (x->T != y->T)
        return x->T < y->T ? -1 : 1;
    if (x->S != y->S)
        return x->S < y->S ? -1 : 1;
    return x->rank < y->rank ? -1 : x->rank > y->rank; /* ranks are distinct */
}

void tg_batches_free(tg_batches *b)
{
    if (!b)
        return;
    tg_ctx *ctx = b->ctx;
    tg__free(ctx, b->order);
    tg__free(ctx, b->start);
    tg__free(ctx, b->S);
    tg__free(ctx, b->T);
    tg__free(ctx, b);
}

/* The arguments, and each example's lengths against the budget. lines: NULL, or the line of
 * each example (messages). */
static bool plan_check(tg_ctx *ctx, const char *fn, const int64_t *S, const int64_t *T,
                       const int64_t *lines, int64_t n, int64_t budget, int64_t epoch)
{
    if (!S || !T || n < 1 || epoch < 0 || budget < 1) {
        tg__run_err(ctx, TG_ERR_ARG, fn, "%s",
                    !S || !T ? "NULL lengths" : n < 1 ? "no examples"
                    : epoch < 0 ? "epoch < 0" : "batch_tokens < 1");
        return false;
    }
    if ((uint64_t)n > SIZE_MAX / sizeof(key)) {
        tg__run_err(ctx, TG_ERR_NOMEM, fn, "too many examples");
        return false;
    }
    for (int64_t i = 0; i < n; i++) {
        if (S[i] < 1 || T[i] < 1) {
            tg__run_err(ctx, TG_ERR_ARG, fn, "example %lld has a length < 1", (long long)i);
            return false;
        }
        int64_t m = S[i] > T[i] ? S[i] : T[i];
        if (m > budget) {
            if (lines)
                tg__run_err(ctx, TG_ERR_ARG, fn,
                            "batch_tokens %lld is smaller than the pair on line %lld (length "
                            "%lld, the max of source and target)",
                            (long long)budget, (long long)lines[i], (long long)m);
            else
                tg__run_err(ctx, TG_ERR_ARG, fn,
                            "batch_tokens %lld is smaller than example %lld's length %lld (the "
                            "max of source and target)",
                            (long long)budget, (long long)i, (long long)m);
            return false;
        }
    }
    return true;
}

/* 1-3: the permutation from the RNG *s, then the keys sorted by (T, S, rank). */
static void plan_keys(key *k, const int64_t *S, const int64_t *T, int64_t n, uint64_t *s)
{
    for (int64_t i = 0; i < n; i++)
        k[i].idx = i;
    for (int64_t i = n - 1; i >= 1; i--) { /* k[].idx holds perm for now */
        int64_t j = (int64_t)(splitmix64_next(s) % (uint64_t)(i + 1));
        int64_t t = k[i].idx;
        k[i].idx = k[j].idx;
        k[j].idx = t;
    }
    /* rank[perm[r]] = r: the keys are made in a second array order (idx = example) */
    for (int64_t r = 0; r < n; r++)
        k[r].rank = r; /* k[r].idx = perm[r], whose rank is r */
    for (int64_t r = 0; r < n; r++) {
        k[r].S = S[k[r].idx];
        k[r].T = T[k[r].idx];
    }
    qsort(k, (size_t)n, sizeof *k, cmp_key);
}

/* 4: greedy packing of the sorted keys. With start NULL, only counts the batches; else fills
 * start (nb + 1), and each batch's source and target lengths bs, bt (nb). Returns nb. */
static int64_t plan_pack(const key *k, int64_t n, int64_t budget, int64_t *start, int64_t *bs,
                         int64_t *bt)
{
    int64_t cur = 0;
    if (start)
        start[0] = 0;
    for (int64_t i = 0, cnt = 0, ms = 0, mt = 0; i < n; i++) {
        int64_t s2 = k[i].S > ms ? k[i].S : ms, t2 = k[i].T > mt ? k[i].T : mt;
        int64_t w = s2 > t2 ? s2 : t2;
        if (cnt > 0 && (cnt + 1) > budget / w) { /* (cnt + 1) * w > budget, without overflow */
            if (start) {
                bs[cur] = ms, bt[cur] = mt;
                start[cur + 1] = i;
            }
            cur++;
            cnt = 0, s2 = k[i].S, t2 = k[i].T;
        }
        cnt++, ms = s2, mt = t2;
        if (start && i == n - 1)
            bs[cur] = ms, bt[cur] = mt;
    }
    if (start)
        start[cur + 1] = n;
    return cur + 1;
}

/* 5: shuffle the nb batches (the RNG *s continuing) into b. */
static void plan_shuffle(tg_batches *b, const key *k, int64_t nb, const int64_t *sorted_start,
                         const int64_t *bs, const int64_t *bt, int64_t *border, uint64_t *s)
{
    for (int64_t i = 0; i < nb; i++)
        border[i] = i;
    for (int64_t i = nb - 1; i >= 1; i--) {
        int64_t j = (int64_t)(splitmix64_next(s) % (uint64_t)(i + 1));
        int64_t t = border[i];
        border[i] = border[j];
        border[j] = t;
    }
    int64_t pos = 0;
    for (int64_t q = 0; q < nb; q++) {
        int64_t src = border[q];
        b->start[q] = pos;
        b->S[q] = bs[src];
        b->T[q] = bt[src];
        for (int64_t i = sorted_start[src]; i < sorted_start[src + 1]; i++)
            b->order[pos++] = k[i].idx;
    }
    b->start[nb] = pos;
    b->n_batches = nb;
}

/* lines: NULL, or the line of each example (messages). */
static tg_batches *plan(tg_ctx *ctx, const char *fn, const int64_t *S, const int64_t *T,
                        const int64_t *lines, int64_t n, int64_t budget, uint64_t seed,
                        int64_t epoch)
{
    if (!plan_check(ctx, fn, S, T, lines, n, budget, epoch))
        return NULL;
    tg_batches *b = tg__alloc_owned(ctx, sizeof *b, fn, TG__OWNER_CTX);
    key *k = tg__alloc(ctx, (size_t)n * sizeof *k, fn);
    if (!b || !k) {
        tg__free(ctx, b);
        tg__free(ctx, k);
        return NULL;
    }
    b->ctx = ctx;
    b->n = n;
    uint64_t s = seed ^ (GOLDEN * ((uint64_t)epoch + 1));
    plan_keys(k, S, T, n, &s);
    int64_t nb = plan_pack(k, n, budget, NULL, NULL, NULL);
    int64_t *sorted_start = tg__alloc(ctx, (size_t)(nb + 1) * sizeof(int64_t), fn);
    b->order = tg__alloc_owned(ctx, (size_t)n * sizeof(int64_t), fn, TG__OWNER_CTX);
    b->start = tg__alloc_owned(ctx, (size_t)(nb + 1) * sizeof(int64_t), fn, TG__OWNER_CTX);
    b->S = tg__alloc_owned(ctx, (size_t)nb * sizeof(int64_t), fn, TG__OWNER_CTX);
    b->T = tg__alloc_owned(ctx, (size_t)nb * sizeof(int64_t), fn, TG__OWNER_CTX);
    int64_t *bs = tg__alloc(ctx, (size_t)nb * sizeof(int64_t), fn);
    int64_t *bt = tg__alloc(ctx, (size_t)nb * sizeof(int64_t), fn);
    int64_t *border = tg__alloc(ctx, (size_t)nb * sizeof(int64_t), fn);
    bool ok = sorted_start && b->order && b->start && b->S && b->T && bs && bt && border;
    if (ok) {
        plan_pack(k, n, budget, sorted_start, bs, bt);
        plan_shuffle(b, k, nb, sorted_start, bs, bt, border, &s);
    }
    tg__free(ctx, sorted_start);
    tg__free(ctx, bs);
    tg__free(ctx, bt);
    tg__free(ctx, border);
    tg__free(ctx, k);
    if (!ok) {
        tg_batches_free(b);
        return NULL;
    }
    return b;
}

tg_batches *tg_batches_plan(tg_ctx *ctx, const int64_t *src_len, const int64_t *tgt_len,
                            int64_t n, int64_t batch_tokens, uint64_t seed, int64_t epoch)
{
    if (!ctx)
        return NULL;
    tg__begin(ctx);
    return plan(ctx, "tg_batches_plan", src_len, tgt_len, NULL, n, batch_tokens, seed, epoch);
}

tg_batches *tg_seq2seq_batches(const tg_seq2seq_data *d, int64_t batch_tokens, uint64_t seed,
                               int64_t epoch)
{
    static const char fn[] = "tg_seq2seq_batches";
    if (!d)
        return NULL;
    tg_ctx *ctx = d->ctx;
    tg__begin(ctx);
    int64_t n = d->info.pairs;
    int64_t *S = tg__alloc(ctx, (size_t)n * sizeof *S, fn);
    int64_t *T = tg__alloc(ctx, (size_t)n * sizeof *T, fn);
    tg_batches *b = NULL;
    if (S && T) {
        for (int64_t i = 0; i < n; i++) {
            S[i] = tg_seq2seq_src_len(d, i);
            T[i] = tg_seq2seq_tgt_len(d, i);
        }
        b = plan(ctx, fn, S, T, d->lines.p, n, batch_tokens, seed, epoch);
    }
    tg__free(ctx, S);
    tg__free(ctx, T);
    return b;
}

int64_t tg_batches_count(const tg_batches *b) { return b ? b->n_batches : 0; }

tg_batch tg_batches_get(const tg_batches *b, int64_t i)
{
    tg_batch r = {0, 0, 0, NULL};
    if (!b || i < 0 || i >= b->n_batches)
        return r;
    r.n = b->start[i + 1] - b->start[i];
    r.src_len = b->S[i];
    r.tgt_len = b->T[i];
    r.examples = b->order + b->start[i];
    return r;
}

/* ----- filling a batch's tensors -------------------------------------------------------------- */
static bool check_2d(tg_ctx *ctx, const char *fn, const tg_tensor *t, const char *what,
                     int64_t n, int64_t min_cols, bool ints, tg_status *st)
{
    if (!t)
        return true;
    char sh[64];
    tg_dtype dt = tg_tensor_dtype(t);
    if (ints ? dt != TG_I32 : (dt != TG_F32 && dt != TG_F64)) {
        tg__run_err(ctx, TG_ERR_DTYPE, fn, "%s must be %s", what, ints ? "i32" : "f32 or f64");
        *st = TG_ERR_DTYPE;
        return false;
    }
    if (tg_tensor_kind(t) == TG_KIND_OP || tg_tensor_is_view(t) ||
        tg_tensor_data((tg_tensor *)t) == NULL) {
        tg__run_err(ctx, TG_ERR_ARG, fn, "%s must be a leaf (tg_input) with its own data", what);
        *st = TG_ERR_ARG;
        return false;
    }
    if (tg_tensor_rank(t) != 2 || tg_tensor_dim(t, 0) != n || tg_tensor_dim(t, 1) < min_cols) {
        tg__run_err(ctx, TG_ERR_SHAPE, fn,
                    "%s is %s; it must be (%lld, L) with L >= %lld (the longest sequence)", what,
                    tg_tensor_shape_str(t, sh, sizeof sh), (long long)n, (long long)min_cols);
        *st = TG_ERR_SHAPE;
        return false;
    }
    return true;
}

tg_status tg_seq2seq_fill(const tg_seq2seq_data *d, const int64_t *examples, int64_t n,
                          tg_tensor *src_ids, tg_tensor *src_pad_mask, tg_tensor *dec_in,
                          tg_tensor *labels)
{
    static const char fn[] = "tg_seq2seq_fill";
    if (!d)
        return TG_ERR_ARG;
    tg_ctx *ctx = d->ctx;
    tg__begin(ctx);
    if (!examples || n < 1) {
        tg__run_err(ctx, TG_ERR_ARG, fn, "no examples");
        return TG_ERR_ARG;
    }
    int64_t ms = 0, mt = 0;
    for (int64_t r = 0; r < n; r++) {
        if (!in_range(d, examples[r])) {
            tg__run_err(ctx, TG_ERR_ARG, fn, "example %lld (row %lld) is outside [0, %lld)",
                        (long long)examples[r], (long long)r, (long long)d->info.pairs);
            return TG_ERR_ARG;
        }
        int64_t s = tg_seq2seq_src_len(d, examples[r]), t = tg_seq2seq_tgt_len(d, examples[r]);
        ms = s > ms ? s : ms;
        mt = t > mt ? t : mt;
    }
    tg_status st = TG_OK;
    if (!check_2d(ctx, fn, src_ids, "src_ids", n, ms, true, &st) ||
        !check_2d(ctx, fn, src_pad_mask, "src_pad_mask", n, ms, false, &st) ||
        !check_2d(ctx, fn, dec_in, "dec_in", n, mt, true, &st) ||
        !check_2d(ctx, fn, labels, "labels", n, mt, true, &st))
        return st;
    if (src_ids && src_pad_mask && tg_tensor_dim(src_pad_mask, 1) != tg_tensor_dim(src_ids, 1)) {
        tg__run_err(ctx, TG_ERR_SHAPE, fn, "src_pad_mask and src_ids differ in length (%lld, %lld)",
                    (long long)tg_tensor_dim(src_pad_mask, 1), (long long)tg_tensor_dim(src_ids, 1));
        return TG_ERR_SHAPE;
    }
    const int32_t pad = d->info.pad_id;
    for (int64_t r = 0; r < n; r++) {
        int64_t sl, tl;
        const int32_t *s = tg_seq2seq_source(d, examples[r], &sl);
        const int32_t *t = tg_seq2seq_target(d, examples[r], &tl);
        if (src_ids) {
            int64_t S = tg_tensor_dim(src_ids, 1);
            int32_t *o = (int32_t *)tg_tensor_data(src_ids) + r * S;
            for (int64_t j = 0; j < S; j++)
                o[j] = j < sl ? s[j] : pad;
        }
        if (src_pad_mask) {
            int64_t S = tg_tensor_dim(src_pad_mask, 1);
            if (tg_tensor_dtype(src_pad_mask) == TG_F32) {
                float *o = (float *)tg_tensor_data(src_pad_mask) + r * S;
                for (int64_t j = 0; j < S; j++)
                    o[j] = j < sl ? 0.0f : 1.0f;
            } else {
                double *o = (double *)tg_tensor_data(src_pad_mask) + r * S;
                for (int64_t j = 0; j < S; j++)
                    o[j] = j < sl ? 0.0 : 1.0;
            }
        }
        if (dec_in) {
            int64_t T = tg_tensor_dim(dec_in, 1);
            int32_t *o = (int32_t *)tg_tensor_data(dec_in) + r * T;
            for (int64_t j = 0; j < T; j++)
                o[j] = j == 0 ? d->bos : j <= tl ? t[j - 1] : pad;
        }
        if (labels) {
            int64_t T = tg_tensor_dim(labels, 1);
            int32_t *o = (int32_t *)tg_tensor_data(labels) + r * T;
            for (int64_t j = 0; j < T; j++)
                o[j] = j < tl ? t[j] : j == tl ? d->eos : -100;
        }
    }
    return TG_OK;
}
