/*
 * cmd_sample.c - `tgrad sample`: generate text from a byte-level LM checkpoint written by
 * `tgrad train --text`.
 * By default through the KV cache (tg_generator, tgrad_train.h): the prompt is prefilled once,
 * then each byte is one step of one position; at the model's seq_len the generator keeps the
 * last seq_len / 2 bytes and prefills them again. Memory does not grow with --tokens.
 * --no-cache (the path before the cache): the model runs on a window of seq_len positions for
 * every byte; the causal mask makes position i depend only on tokens <= i, so the context is
 * left-aligned in the window and the logits at its last position give the next token; only
 * the last seq_len tokens are kept (a sliding window, so past the window the two paths see
 * different contexts).
 *
 * On a checkpoint of `tgrad train --arch seq2seq`, --source DIGITS is decoded greedily
 * (seq2seq.c) and the target sequence printed as digits. A translation checkpoint (`tgrad train
 * --pairs`, or its export) is refused with a pointer to `tgrad translate`: its ids are
 * tokenizer pieces, neither bytes nor digits. Nothing here is sized by the vocabulary's
 * assumed size: the output byte of an id is asked of the model (tg_model_token_byte).
 *
 * parse (sample_parse, train_args.c) -> load (a checkpoint is validated by ckpt_config_load
 * before the model is built; the model itself, config, vocabulary and weights, comes from
 * tg_model_load_from (tgrad_model.h), the loader embedders use, which also reads an export of
 * `tgrad export`) -> generate (every library status checked; non-finite logits are an error,
 * never an index).
 */
#include "ckpt_config.h"
#include "cli.h"
#include "climsg.h"
#include "train_data.h"
#include "tgrad_decode.h"
#include "tgrad_model.h"
#include "tgrad_train.h"
#include "train_args.h"

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    tg_ctx *ctx;
    tg_model *m;
    const tg_transformer *model;
    tg_tensor *ids, *logits;       /* --no-cache: the window graph */
    tg_graph *g;
    tg_generator *gen;             /* default: the KV cache */
    int64_t T;         /* window (model.seq_len) */
    int nv;            /* vocabulary size */
    int id_of[256];    /* byte -> id, -1 if absent */
    bool s2s;          /* a seq2seq checkpoint: decode --source */
    tg_greedy *dec;
    int32_t *src, *out; /* (1, T) --source, decoded */
    bool nomem;         /* check_source failed for want of memory (not a usage error) */
} sampler;

static void fail(const char *fmt, const char *a, const char *b)
{
    fprintf(stderr, "tgrad sample: ");
    fprintf(stderr, fmt, a, b);
    fputc('\n', stderr);
}

/* --source against the checkpoint: required by a seq2seq one (exactly T digits), refused by
 * a text one; --prompt only for text. */
static bool check_source(sampler *s, const sample_args *a, char *err, size_t n)
{
    char shown[80];
    if (!s->s2s) {
        if (a->source)
            snprintf(err, n, "'%s' is a text model (model.arch lm), not a seq2seq checkpoint: "
                     "it continues --prompt text, not --source digits", a->checkpoint);
        return !a->source;
    }
    if (!a->source || a->prompt[0]) {
        if (a->prompt[0])
            snprintf(err, n, "'%s' is a seq2seq checkpoint (model.arch seq2seq): it decodes "
                     "--source DIGITS (%" PRId64 " digits 0-9), not --prompt text",
                     a->checkpoint, s->T);
        else
            snprintf(err, n, "'%s' is a seq2seq checkpoint (model.arch seq2seq): give --source "
                     "DIGITS (%" PRId64 " digits 0-9) to decode", a->checkpoint, s->T);
        return false;
    }
    size_t len = strlen(a->source);
    for (size_t i = 0; i < len; i++)
        if (a->source[i] < '0' || a->source[i] > '9') {
            unsigned char c = (unsigned char)a->source[i];
            if (c >= 0x20 && c < 0x7f)
                snprintf(shown, sizeof shown, "'%c'", c);
            else
                snprintf(shown, sizeof shown, "byte %u", c);
            snprintf(err, n, "--source: %s at offset %zu is not a digit 0-9", shown, i);
            return false;
        }
    if ((int64_t)len != s->T) {
        snprintf(err, n, "--source has %zu digit%s; the model decodes sequences of exactly %"
                 PRId64 " (model.seq_len)", len, len == 1 ? "" : "s", s->T);
        return false;
    }
    s->src = malloc(sizeof(int32_t) * len);
    s->out = malloc(sizeof(int32_t) * len);
    if (!s->src || !s->out) {
        s->nomem = true;
        snprintf(err, n, "out of memory");
        return false;
    }
    for (size_t i = 0; i < len; i++)
        s->src[i] = a->source[i] - '0';
    return true;
}

/* Greedy decoding of --source; the digits on stdout. */
static int sample_seq2seq(sampler *s, const sample_args *a)
{
    tg_status st = tg_greedy_decode(s->dec, s->src, s->out);
    if (st == TG_ERR_NONFINITE) {
        fprintf(stderr, "tgrad sample: --checkpoint '%s': the model's logits are not finite; "
                "its parameters hold NaN or inf\n", a->checkpoint);
        return 1;
    }
    if (st != TG_OK) {
        cli_report("sample", NULL, NULL, s->ctx);
        return 1;
    }
    for (int64_t i = 0; i < s->T; i++) {
        if (s->out[i] == SEQ2SEQ_BOS)
            fputs("<bos>", stdout); /* an untrained model may predict it */
        else
            fputc('0' + s->out[i], stdout);
    }
    fputc('\n', stdout);
    return 0;
}

/* Read and validate checkpoint or export --checkpoint, and load its model into s->m. Returns 0,
 * or the exit status after printing why. */
static int sample_read_model(sampler *s, const sample_args *a)
{
    char err[1024];
    if (!data_check_regular(a->checkpoint, phys_memory_bytes(), err, sizeof err)) {
        fail("--checkpoint %s%s", err, "");
        return 1;
    }
    tg_safetensors *st = tg_safetensors_read(s->ctx, a->checkpoint);
    if (!st) {
        cli_report("sample", "--checkpoint", a->checkpoint, s->ctx);
        return 1;
    }
    /* a checkpoint: every field validated with the train option table (its messages); an
     * export (`tgrad export`): validated by the library loader, memory estimated here */
    const char *format = tg_safetensors_meta_get(st, "format");
    bool is_export = format && !strcmp(format, "tgrad-export-1");
    if (!is_export) {
        train_args ta;
        train_defaults(&ta);
        ckpt_info info;
        tg_transformer_config mc;
        if (!ckpt_config_load(st, &ta, NULL, true, phys_memory_bytes(), &info, &mc, err,
                              sizeof err)) {
            fail("--checkpoint '%s': %s", a->checkpoint, err);
            return info.usage ? 2 : 1;
        }
    }
    s->m = tg_model_load_from(s->ctx, st, a->checkpoint);
    if (!s->m) {
        cli_report("sample", "--checkpoint", a->checkpoint, s->ctx);
        return 1;
    }
    const tg_model_info *mi = tg_model_get_info(s->m);
    if (is_export && (mi->kind == TG_MODEL_ENCODER ||
                      !model_memory_check(&mi->config, mi->dtype, 1, 0, false,
                                          phys_memory_bytes(), err, sizeof err))) {
        if (mi->kind == TG_MODEL_ENCODER)
            snprintf(err, sizeof err, "an export of a built-in task's encoder (data '%s'): "
                     "nothing to sample", tg_safetensors_meta_get(st, "data"));
        fail("--checkpoint '%s': %s", a->checkpoint, err);
        return mi->kind == TG_MODEL_ENCODER ? 2 : 1; /* the wrong kind of file: usage */
    }
    return 0;
}

/* The model against the command line: not a translation model, --source or --prompt fit it,
 * and a seq2seq model takes none of the sampling options. Returns 0, or 2 (1 out of memory)
 * after printing why. */
static int sample_check_use(sampler *s, const sample_args *a, const cli_result *r)
{
    char err[1024];
    const tg_model_info *mi = tg_model_get_info(s->m);
    if (mi->tokenizer[0]) { /* a translation model: its ids are pieces, not bytes or digits */
        snprintf(err, sizeof err, "--checkpoint '%s' is a translation checkpoint (data.mode "
                 "pairs, %s tokenizer): sample takes a text or seq2seq task model; translate "
                 "sentences with 'tgrad translate --checkpoint %s' (one per line on stdin)",
                 a->checkpoint, mi->tokenizer, a->checkpoint);
        fail("%s%s", err, "");
        return 2;
    }
    if (!check_source(s, a, err, sizeof err)) {
        fail("%s%s", err, "");
        return s->nomem ? 1 : 2; /* --source or --prompt does not fit the checkpoint */
    }
    /* greedy decoding of exactly seq_len digits: the sampling options have nothing to do */
    static const char *const sampling[] = {"tokens", "temperature", "top-k", "seed"};
    for (size_t i = 0; s->s2s && i < sizeof sampling / sizeof sampling[0]; i++)
        if (cli_given(sample_command(), r, sampling[i])) {
            char msg[600];
            snprintf(msg, sizeof msg, "--%s: '%s' is a seq2seq checkpoint: --source is decoded "
                     "greedily into exactly %" PRId64 " digits (model.seq_len), so --tokens, "
                     "--temperature, --top-k and --seed do not apply", sampling[i],
                     a->checkpoint, s->T);
            fail("%s%s", msg, "");
            return 2;
        }
    return 0;
}

/* The decoder: a seq2seq model's, else the generator (or the whole-window graph with
 * --no-cache). Returns 0, or 1 after printing why. */
static int sample_build(sampler *s, const sample_args *a)
{
    for (int b = 0; b < 256; b++)
        s->id_of[b] = tg_model_byte_token(s->m, b);
    if (s->s2s) {
        if (!(s->dec = tg_greedy_new(s->ctx, s->model, 1, s->T, SEQ2SEQ_BOS, a->no_cache,
                                     (tg_precision)a->precision))) {
            cli_report("sample", "--checkpoint", a->checkpoint, s->ctx);
            return 1;
        }
        return 0;
    }
    if (a->no_cache) {
        s->ids = tg_input(s->ctx, TG_I32, TG_DIMS(1, s->T), "ids");
        s->logits = tg_transformer_forward(s->ctx, s->model, s->ids, NULL);
        /* inference: no gradients, nothing saved */
        tg_graph_opts go = {.no_grad = true, .precision = a->precision};
        s->g = tg_graph_new_opts(s->ctx, &s->logits, 1, &go);
    } else {
        /* the cache holds the positions the run reaches (the prompt's window and --tokens),
         * at most seq_len: below it the logits are those of a seq_len cache, without its
         * memory */
        int64_t plen = (int64_t)strlen(a->prompt), w = plen < s->T ? plen : s->T;
        int64_t len = s->T - (w > 0 ? w : 1) > a->tokens ? (w > 0 ? w : 1) + a->tokens : s->T;
        s->gen = tg_generator_new_len(s->ctx, s->model, 1, len);
        if (s->gen && tg_generator_set_precision(s->gen, a->precision) != TG_OK)
            s->gen = NULL;
    }
    if (!s->g && !s->gen) {
        cli_report("sample", "--checkpoint", a->checkpoint, s->ctx);
        return 1;
    }
    return 0;
}

/* Read, validate and build the model of checkpoint @p path. Returns 0, or the exit status
 * after printing why: 2 when the command line is at fault (the wrong kind of checkpoint for
 * the options given, a bad --source), 1 when the file is (missing, corrupt). */
static int sample_load(sampler *s, const sample_args *a, const cli_result *r)
{
    int rc = sample_read_model(s, a);
    if (rc)
        return rc;
    const tg_model_info *mi = tg_model_get_info(s->m);
    s->model = tg_model_transformer(s->m);
    s->T = mi->config.max_seq_len;
    s->nv = (int)mi->config.vocab_size;
    s->s2s = mi->kind == TG_MODEL_SEQ2SEQ;
    rc = sample_check_use(s, a, r);
    return rc ? rc : sample_build(s, a);
}

/*
 * The next id from logits @p lg (nv finite values): greedy at temperature 0, else softmax of
 * lg / temp over the top_k largest (0: all) and the inverse CDF at @p u in [0, 1). @p p is
 * scratch of nv doubles. Always returns an index in [0, nv).
 */
static int pick(const double *lg, int nv, double temp, int64_t top_k, double u, double *p)
{
    int best = 0;
    for (int v = 1; v < nv; v++)
        if (lg[v] > lg[best])
            best = v;
    if (temp == 0)
        return best;
    double kth = -INFINITY; /* top-k threshold: the k-th largest logit */
    if (top_k > 0 && top_k < nv) {
        for (int v = 0; v < nv; v++)
            p[v] = lg[v];
        for (int64_t j = 0; j < top_k; j++) { /* partial selection of the k largest */
            int m = -1;
            for (int v = 0; v < nv; v++)
                if (p[v] > -INFINITY && (m < 0 || p[v] > p[m]))
                    m = v;
            if (m < 0)
                break; /* cannot happen with finite logits; never index p[-1] */
            kth = p[m];
            p[m] = -INFINITY;
        }
    }
    double sum = 0, mx = lg[best];
    for (int v = 0; v < nv; v++) {
        p[v] = lg[v] >= kth ? exp((lg[v] - mx) / temp) : 0;
        sum += p[v];
    }
    /* p[best] = 1, so sum >= 1 */
    double target = u * sum, c = 0;
    for (int v = 0; v < nv; v++) {
        c += p[v];
        if (target < c && p[v] > 0)
            return v;
    }
    return best;
}

/* Feed n ids to the generator (the prompt, or the byte just picked). */
static bool gen_feed(sampler *s, const int32_t *ids, int64_t n)
{
    if (tg_generator_feed(s->gen, ids, n) == TG_OK)
        return true;
    fflush(stdout);
    cli_report("sample", NULL, NULL, s->ctx);
    return false;
}

/* The prompt's ids (its last T) in win[0..*n), or a newline (else the first symbol) without
 * one. Returns 0, or 2 after printing which byte the model does not know. */
static int prompt_window(const sampler *s, const sample_args *a, int32_t *win, int64_t *n_out)
{
    size_t plen = strlen(a->prompt);
    int64_t n = 0; /* ids in win */
    for (size_t i = 0; i < plen; i++) {
        unsigned char c = (unsigned char)a->prompt[i];
        int id = s->id_of[c];
        if (id < 0) {
            char shown[8] = "";
            if (c >= 0x20 && c < 0x7f)
                snprintf(shown, sizeof shown, " '%c'", c);
            fprintf(stderr, "tgrad sample: --prompt: byte %u%s at offset %zu is not in the "
                    "model's vocabulary of %d bytes\n", c, shown, i, s->nv);
            return 2; /* a value the model cannot take: a usage error */
        }
        if (n == s->T) {
            memmove(win, win + 1, sizeof(int32_t) * (size_t)(s->T - 1));
            n--;
        }
        win[n++] = id;
    }
    if (n == 0) /* no prompt: start from a newline if known, else the first symbol */
        win[n++] = s->id_of['\n'] >= 0 ? s->id_of['\n'] : 0;
    *n_out = n;
    return 0;
}

/* The logits of the next byte after win[0..n) into lg (k: the bytes generated so far): from
 * the generator, fed the byte picked last, or from the whole window's graph (buf: scratch of
 * T ids). False after printing why. */
static bool next_logits(sampler *s, int64_t k, const int32_t *win, int64_t n, int32_t *buf,
                        double *lg)
{
    if (s->gen) {
        if (k > 0 && !gen_feed(s, win + n - 1, 1)) /* the byte picked last */
            return false;
        if (tg_tensor_get_data(tg_generator_logits(s->gen), lg, TG_F64, (size_t)s->nv) !=
            TG_OK) {
            fflush(stdout);
            cli_report("sample", NULL, NULL, s->ctx);
            return false;
        }
        return true;
    }
    for (int64_t t = 0; t < s->T; t++)
        buf[t] = t < n ? win[t] : 0;
    if (tg_tensor_set_data(s->ids, buf, TG_I32, (size_t)s->T) != TG_OK ||
        tg_graph_forward(s->g) != TG_OK) {
        fflush(stdout);
        cli_report("sample", NULL, NULL, s->ctx);
        return false;
    }
    int64_t row = (n - 1) * s->nv;
    for (int v = 0; v < s->nv; v++)
        lg[v] = tg_get(s->logits, row + v);
    return true;
}

static int sample_generate(sampler *s, const sample_args *a)
{
    size_t plen = strlen(a->prompt);
    int32_t *win = malloc(sizeof(int32_t) * (size_t)s->T); /* the last T ids, oldest first */
    int32_t *buf = malloc(sizeof(int32_t) * (size_t)s->T);
    double *lg = malloc(sizeof(double) * (size_t)s->nv), *p = malloc(sizeof(double) * (size_t)s->nv);
    int rc = 1;
    int64_t n = 0; /* ids in win */
    if (!win || !buf || !lg || !p) {
        fprintf(stderr, "tgrad sample: out of memory\n");
        goto out;
    }
    if ((rc = prompt_window(s, a, win, &n)) != 0)
        goto out;
    rc = 1;
    fwrite(a->prompt, 1, plen, stdout);
    /* cached: the prompt (or its last seq_len / 2 bytes if longer) is prefilled once */
    if (s->gen && a->tokens > 0 && !gen_feed(s, win, n))
        goto out;
    for (int64_t k = 0; k < a->tokens; k++) {
        if (!next_logits(s, k, win, n, buf, lg))
            goto out;
        for (int v = 0; v < s->nv; v++) {
            if (!isfinite(lg[v])) {
                fputc('\n', stdout); /* end the text printed so far */
                fflush(stdout);
                fprintf(stderr, "tgrad sample: --checkpoint '%s': the model's logits are not "
                        "finite (%g) at generated byte %" PRId64 "; its parameters hold NaN or "
                        "inf\n", a->checkpoint, lg[v], k + 1);
                goto out;
            }
        }
        int next = pick(lg, s->nv, a->temperature, a->top_k, tg_rng_uniform(s->ctx), p);
        if (n == s->T) {
            memmove(win, win + 1, sizeof(int32_t) * (size_t)(s->T - 1));
            n--;
        }
        win[n++] = next;
        int byte = tg_model_token_byte(s->m, next); /* a text model's every id is a byte */
        if (byte >= 0)
            fputc(byte, stdout);
    }
    fputc('\n', stdout); /* (a failed write of the output is reported by main) */
    rc = 0;
out:
    free(win);
    free(buf);
    free(lg);
    free(p);
    return rc;
}

int cmd_sample(int argc, char **argv)
{
    sample_args a;
    cli_result r;
    char err[1024];
    int ex = cli_parse_exit(sample_parse(argc, argv, &a, &r, err, sizeof err),
                            sample_command(), err);
    if (ex >= 0) {
        sample_free(&a, &r);
        return ex;
    }
    sampler s;
    memset(&s, 0, sizeof s);
    s.ctx = tg_ctx_new();
    int rc = 1;
    if (!s.ctx) {
        fprintf(stderr, "tgrad sample: out of memory\n");
    } else if ((rc = sample_load(&s, &a, &r)) == 0) {
        tg_ctx_set_training(s.ctx, false);
        if (a.threads)
            tg_ctx_set_threads(s.ctx, cli_threads_cap("sample", a.threads));
        tg_ctx_seed(s.ctx, (uint64_t)a.seed);
        rc = s.s2s ? sample_seq2seq(&s, &a) : sample_generate(&s, &a);
    }
    tg_greedy_free(s.dec);
    free(s.src);
    free(s.out);
    tg_ctx_free(s.ctx);
    sample_free(&a, &r);
    return rc;
}
