/*
 * train_pairs.c - `tgrad train --pairs` (see train_pairs.h): the translation parts of the
 * training run, over the library's tokenizers, tokenized data, batch plans, seq2seq loss,
 * translator and metrics.
 */
#include "train_pairs.h"

#include "climsg.h"
#ifdef TG_HAVE_SPM
#include "tgrad_spm.h"
#endif

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- the tokenizer ------------------------------------------------------------------------ */

#ifdef TG_HAVE_SPM
/* Both sides of every training pair, in file order, for SentencePiece training. */
typedef struct {
    char **s;
    size_t *len;
    int64_t n, cap;
} sentences;

static tg_status collect(void *user, const tg_pair *pr)
{
    sentences *c = user;
    if (c->n + 2 > c->cap) {
        int64_t cap = c->cap ? 2 * c->cap : 4096;
        char **s = realloc(c->s, sizeof *s * (size_t)cap);
        if (s)
            c->s = s;
        size_t *l = s ? realloc(c->len, sizeof *l * (size_t)cap) : NULL;
        if (l)
            c->len = l;
        if (!s || !l)
            return TG_ERR_NOMEM;
        c->cap = cap;
    }
    const char *side[2] = {pr->source, pr->target};
    size_t n[2] = {pr->source_len, pr->target_len};
    for (int k = 0; k < 2; k++) {
        char *d = malloc(n[k] + 1);
        if (!d)
            return TG_ERR_NOMEM;
        memcpy(d, side[k], n[k] + 1);
        c->s[c->n] = d;
        c->len[c->n++] = n[k];
    }
    return TG_OK;
}

static void sentences_free(sentences *c)
{
    for (int64_t i = 0; i < c->n; i++)
        free(c->s[i]);
    free(c->s);
    free(c->len);
}
#endif

/* --spm with --resume: the checkpoint keeps its tokenizer, so --spm must name the very model
 * it holds (the same bytes); anything else contradicts it (a usage error). */
static bool same_spm(pairs_run *p, tg_ctx *ctx, const train_args *a, char *err, size_t n,
                     bool *usage)
{
    size_t have = 0, got = 0;
    const void *mine = tg_tokenizer_model(p->tok, &have);
    *usage = true;
    if (!mine) {
        snprintf(err, n, "--resume '%s': checkpoint is from a different config: "
                 "tokenizer.kind 'bytes' there, --spm '%s' given (a resumed run keeps its "
                 "tokenizer: leave out --spm)", a->resume, a->spm);
        return false;
    }
#ifdef TG_HAVE_SPM
    tg_tokenizer *t = tg_spm_load_file(ctx, a->spm);
    const void *theirs = t ? tg_tokenizer_model(t, &got) : NULL;
    bool same = theirs && got == have && !memcmp(theirs, mine, have);
    tg_tokenizer_free(t);
    if (same) {
        *usage = false;
        return true;
    }
    char m[1024];
    if (!t)
        cli_message(ctx, a->spm, m, sizeof m);
    snprintf(err, n, "--resume '%s' keeps its own SentencePiece model (tokenizer.model, %zu "
             "bytes), and --spm '%s' %s%s; leave out --spm", a->resume, have, a->spm,
             t ? "is another model" : "cannot be loaded: ", t ? "" : m);
#else
    (void)ctx;
    (void)got;
    snprintf(err, n, "--spm needs SentencePiece, and this tgrad was built without it");
#endif
    return false;
}

/* --resume: the checkpoint's own tokenizer (and --spm, if given, the same model). */
static bool checkpoint_tokenizer(pairs_run *p, tg_ctx *ctx, const train_args *a,
                                 const tg_safetensors *ck, char *err, size_t n, bool *usage)
{
    const char *kind;
    void *model = NULL;
    size_t size = 0;
    if (tg_tokenizer_meta_read(ctx, ck, &kind, &model, &size) != TG_OK) {
        cli_format("--resume", a->resume, ctx, err, n);
        return false;
    }
    if (!strcmp(kind, "bytes")) {
        p->tok = tg_tokenizer_bytes(ctx);
    } else {
#ifdef TG_HAVE_SPM
        p->tok = tg_spm_load(ctx, model, size);
#else
        free(model);
        snprintf(err, n, "--resume '%s' uses a SentencePiece tokenizer, and this tgrad was "
                 "built without SentencePiece (install libsentencepiece-dev and rebuild: "
                 "meson setup --reconfigure build -Dsentencepiece=enabled)", a->resume);
        return false;
#endif
    }
    free(model);
    if (!p->tok) {
        cli_format("--resume: its tokenizer", a->resume, ctx, err, n);
        return false;
    }
    return !a->spm || same_spm(p, ctx, a, err, n, usage);
}

bool pairs_tokenizer(pairs_run *p, tg_ctx *ctx, const train_args *a, const tg_safetensors *ck,
                     bool quiet, char *err, size_t n, bool *usage)
{
    p->bleu = p->chrf = NAN;
    *usage = false;
    if (ck) /* the checkpoint's own tokenizer */
        return checkpoint_tokenizer(p, ctx, a, ck, err, n, usage);
    if (a->tokenizer == TOK_BYTES) {
        p->tok = tg_tokenizer_bytes(ctx);
        if (!p->tok)
            snprintf(err, n, "out of memory");
        return p->tok != NULL;
    }
#ifdef TG_HAVE_SPM
    if (a->spm) {
        p->tok = tg_spm_load_file(ctx, a->spm);
        if (!p->tok) {
            cli_format("--spm", a->spm, ctx, err, n);
            return false;
        }
        return true;
    }
    sentences c = {0};
    tg_status s = tg_pairs_read(ctx, a->pairs, 0, collect, &c, NULL);
    if (s != TG_OK) {
        sentences_free(&c);
        cli_format("--pairs", a->pairs, ctx, err, n);
        return false;
    }
    if (!quiet) {
        char line[200];
        snprintf(line, sizeof line, "training a SentencePiece %s model of %" PRId64 " pieces on "
                 "%" PRId64 " sentences", a->spm_type == SPM_BPE ? "bpe" : "unigram",
                 a->vocab_size, c.n);
        cli_say(stderr, "tgrad train: ", line);
    }
    tg_spm_train_opts o = tg_spm_train_defaults();
    o.vocab_size = a->vocab_size;
    o.type = a->spm_type == SPM_BPE ? TG_SPM_BPE : TG_SPM_UNIGRAM;
    p->tok = tg_spm_train_strings(ctx, &o, (const char *const *)c.s, c.len, c.n);
    sentences_free(&c);
    if (!p->tok) {
        cli_format("training the SentencePiece model on --pairs", a->pairs, ctx, err, n);
        return false;
    }
    return true;
#else
    if (a->spm || a->tokenizer == TOK_SENTENCEPIECE) {
        *usage = true;
        snprintf(err, n, "%s needs SentencePiece, and this tgrad was built without it: install "
                 "libsentencepiece-dev and rebuild (meson setup --reconfigure build "
                 "-Dsentencepiece=enabled), or train on UTF-8 bytes with --tokenizer bytes",
                 a->spm ? "--spm" : "--tokenizer sentencepiece");
        return false;
    }
    if (!quiet)
        cli_say(stderr, "tgrad train: ", "note: built without SentencePiece: the tokenizer is "
                "UTF-8 bytes (--tokenizer bytes)");
    p->tok = tg_tokenizer_bytes(ctx);
    if (!p->tok)
        snprintf(err, n, "out of memory");
    return p->tok != NULL;
#endif
}

/* ---- data ------------------------------------------------------------------------------------ */

static bool parse_hash(const char *s, uint64_t *h)
{
    if (!s || strncmp(s, "fnv1a64:", 8) != 0 || strlen(s) != 24)
        return false;
    uint64_t v = 0;
    for (int i = 8; i < 24; i++) {
        char c = s[i];
        int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
        if (d < 0)
            return false;
        v = v << 4 | (uint64_t)d;
    }
    *h = v;
    return true;
}

static bool meta_i64(const tg_safetensors *ck, const char *key, int64_t lo, int64_t hi,
                     int64_t *v, char *err, size_t n)
{
    const char *s = tg_safetensors_meta_get(ck, key);
    if (!s || !cli_parse_i64(s, v) || *v < lo || *v > hi) {
        snprintf(err, n, "checkpoint field '%s' is %s (expected an integer %" PRId64 " to %"
                 PRId64 ")", key, s ? s : "missing", lo, hi);
        return false;
    }
    return true;
}

/* --spm-alpha: a tokenizer that can sample, and batches that hold any sample. */
static bool sampling_ok(const pairs_run *p, const train_args *a, char *err, size_t n)
{
    if (!tg_tokenizer_can_sample(p->tok)) {
        snprintf(err, n, "sampling segmentations (--spm-alpha, or the resumed checkpoint's "
                 "train.spm_alpha) needs a SentencePiece unigram model; this run's tokenizer "
                 "(%s%s) has one segmentation per sentence",
                 tg_tokenizer_kind(p->tok),
                 strcmp(tg_tokenizer_kind(p->tok), "bytes") ? ", bpe" : "");
        return false;
    }
    if (a->batch_tokens < a->seq_len) {
        snprintf(err, n,
                 "--batch-tokens %" PRId64 " is smaller than --seq-len %" PRId64 ", "
                 "which a sampled segmentation (--spm-alpha) can reach; raise it",
                 a->batch_tokens, a->seq_len);
        return false;
    }
    return true;
}

bool pairs_load(pairs_run *p, tg_ctx *ctx, const train_args *a, const tg_safetensors *ck,
                char *err, size_t n, bool *usage)
{
    tg_seq2seq_opts o = {0};
    o.max_len = a->seq_len;
    o.keep_text = a->spm_alpha >= 0; /* sampling segments the texts again every epoch */
    if (a->spm_alpha >= 0 && !sampling_ok(p, a, err, n)) {
        *usage = true;
        return false;
    }
    p->train = tg_seq2seq_load(ctx, a->pairs, p->tok, &o);
    if (!p->train) {
        cli_format("--pairs", a->pairs, ctx, err, n);
        return false;
    }
    o.keep_text = true;
    p->valid = tg_seq2seq_load(ctx, a->valid, p->tok, &o);
    if (!p->valid) {
        cli_format("--valid", a->valid, ctx, err, n);
        return false;
    }
    tg_seq2seq_info ti = tg_seq2seq_get_info(p->train), vi = tg_seq2seq_get_info(p->valid);
    int64_t longest = ti.max_src > ti.max_tgt ? ti.max_src : ti.max_tgt;
    if (vi.max_src > longest)
        longest = vi.max_src;
    if (vi.max_tgt > longest)
        longest = vi.max_tgt;
    if (a->batch_tokens < longest) {
        *usage = true;
        snprintf(err, n, "--batch-tokens %" PRId64 " is smaller than the longest sequence (%"
                 PRId64 " tokens, at most --seq-len %" PRId64 "); raise it", a->batch_tokens,
                 longest, a->seq_len);
        return false;
    }
    if (!ck) {
        p->epoch = p->cursor = 0;
        return true;
    }
    /* resume: the same files, and where the run was */
    const char *keys[2] = {"data.pairs_hash", "data.valid_hash"};
    const uint64_t have[2] = {ti.hash, vi.hash};
    const char *opt[2] = {"--pairs", "--valid"};
    for (int k = 0; k < 2; k++) {
        uint64_t h;
        if (!parse_hash(tg_safetensors_meta_get(ck, keys[k]), &h)) {
            snprintf(err, n, "checkpoint field '%s' is missing or malformed (expected "
                     "fnv1a64: and 16 hex digits)", keys[k]);
            return false;
        }
        if (h != have[k]) {
            *usage = true;
            snprintf(err, n, "--resume '%s' was trained with other %s data (%s fnv1a64:%016"
                     PRIx64 " there, fnv1a64:%016" PRIx64 " here); pass the same file",
                     a->resume, opt[k], keys[k], h, have[k]);
            return false;
        }
    }
    if (!meta_i64(ck, "data.epoch", 0, INT32_MAX, &p->epoch, err, n) ||
        !meta_i64(ck, "data.batch", 0, INT32_MAX, &p->cursor, err, n))
        return false;
    if (a->spm_alpha >= 0)
        return true; /* the epoch's batches come from its sampled segmentations: the run's
                        start (tg_train_pairs_new) checks data.batch against them */
    tg_batches *plan = tg_seq2seq_batches(p->train, a->batch_tokens, (uint64_t)a->seed,
                                          p->epoch);
    if (!plan) {
        cli_format("--pairs", a->pairs, ctx, err, n);
        return false;
    }
    int64_t count = tg_batches_count(plan);
    tg_batches_free(plan);
    if (p->cursor > count) {
        snprintf(err, n, "checkpoint field 'data.batch' is %" PRId64 ", beyond the %" PRId64
                 " batches of epoch %" PRId64, p->cursor, count, p->epoch);
        return false;
    }
    return true;
}

bool pairs_build(pairs_run *p, tg_ctx *ctx, const tg_transformer *m, const train_args *a)
{
    tg_train_pairs_opts o = {.tokenizer = p->tok,
                             .train = p->train,
                             .valid = p->valid,
                             .batch_tokens = a->batch_tokens,
                             .seed = (uint64_t)a->seed,
                             .epoch = p->epoch,
                             .batch = p->cursor,
                             .label_smoothing = a->label_smoothing,
                             .precision = (tg_precision)a->precision,
                             .target_bleu = a->target_bleu,
                             .sample_nbest = a->spm_alpha >= 0 ? (int)a->spm_nbest : 0,
                             .sample_alpha = a->spm_alpha >= 0 ? a->spm_alpha : 0};
    p->run = tg_train_pairs_new(ctx, m, &o);
    return p->run != NULL;
}

void pairs_scores(pairs_run *p)
{
    tg_bleu bl;
    tg_chrf cf;
    if (tg_train_pairs_scores(p->run, &bl, &cf)) {
        p->bleu = bl.score;
        p->chrf = cf.score;
        tg_bleu_format(&bl, p->bleu_line, sizeof p->bleu_line);
    } else {
        p->bleu = p->chrf = 0;
        snprintf(p->bleu_line, sizeof p->bleu_line, "BLEU = 0 (non-finite logits)");
    }
}

void pairs_free(pairs_run *p)
{
    tg_train_pairs_free(p->run);
    tg_seq2seq_free(p->train);
    tg_seq2seq_free(p->valid);
    tg_tokenizer_free(p->tok);
    memset(p, 0, sizeof *p);
}
