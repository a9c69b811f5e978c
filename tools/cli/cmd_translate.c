/*
 * cmd_translate.c - `tgrad translate`: translate sentences with a translation checkpoint
 * (`tgrad train --pairs`: data.mode pairs, the encoder-decoder with its tokenizer).
 *
 * Two modes:
 * - streaming (FILE or standard input): one sentence per line in, one translation per line
 *   out, in order. The input is read with read(2) into a buffer of our own; a batch is
 *   translated as soon as it holds --batch lines, or no more input is available right now
 *   (poll(2) with timeout 0), or at the end of the input; its translations are then written
 *   and flushed. So `echo ... | tgrad translate` prints at once, and a line typed into an
 *   interactive pipe is answered without waiting for --batch lines.
 * - --eval PAIRS.tsv: the sources of a pairs file (tg_seq2seq_load) translated in batches,
 *   the corpus BLEU and chrF of the hypotheses against the targets printed in sacreBLEU's
 *   format (tgrad_metrics.h), with the wall time; --out writes the hypotheses.
 *
 * A line break the model generates (a byte tokenizer can) is written as a space, so every
 * translation is one line.
 * Sources are tokenized as in training (tgrad_data.h): tok(line)[:L-1] + EOS, L = the model's
 * max_seq_len. Decoding is tg_translate_batch (tgrad_decode.h): greedy for --beam 1, else
 * fairseq's beam search.
 *
 * parse (translate_parse) -> load (tg_model_load; the tokenizer from the checkpoint:
 * tg_model_tokenizer for bytes, tg_spm_load of the stored model for sentencepiece) -> run ->
 * report. Exit status: 0; 2 for a usage error (options, a checkpoint that is not a translation
 * model); 1 for a run-time failure (a file missing or corrupt, bad input, a failed write).
 */
#define _POSIX_C_SOURCE 200809L
#include "ckpt_config.h"
#include "cli.h"
#include "climsg.h"
#include "train_data.h"
#include "outpath.h"
#include "tgrad_data.h"
#include "tgrad_decode.h"
#include "tgrad_metrics.h"
#include "tgrad_model.h"
#ifdef TG_HAVE_SPM
#include "tgrad_spm.h"
#endif

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <math.h>
#include <poll.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* Most generator rows (sentences x beam) of one tg_translate_batch call: memory grows with
 * them (measured: ~6 MB a row for d_model 256, 3 decoder layers, max length 256, f32), the
 * speed per sentence hardly beyond. */
#define TRANSLATE_MAX_ROWS 128

/* The translator's first source length (tokens); it doubles as longer sources come, up to the
 * model's max_seq_len. */
#define TRANSLATE_MIN_SRC 16

/* Longest input line (bytes, without its line end), as the pairs reader's default. */
#define TRANSLATE_MAX_LINE TG_PAIRS_MAX_LINE

/* ---- parse ---------------------------------------------------------------------------------- */
#define TA(f) offsetof(translate_args, f)

static const cli_option translate_opts[] = {
    {.name = "checkpoint", .kind = CLI_PATH, .offset = TA(checkpoint), .metavar = "CK",
     .help = "a translation checkpoint of 'tgrad train --pairs'", .flags = CLI_REQUIRED,
     .group = "model"},
    {.name = "beam", .kind = CLI_INT, .offset = TA(beam), .metavar = "K",
     .help = "beam size; 1 = greedy decoding (5)", .imin = 1, .imax = TRANSLATE_MAX_BEAM,
     .group = "search"},
    {.name = "lenpen", .kind = CLI_NUM, .offset = TA(lenpen), .metavar = "A",
     .help = "length penalty: a hypothesis scores sum log p / len^A (1.0)", .fmin = 0,
     .fmax = 10},
    {.name = "no-repeat-ngram", .kind = CLI_INT, .offset = TA(no_repeat_ngram), .metavar = "N",
     .help = "no output repeats an n-gram of N tokens (fairseq's --no-repeat-ngram-size), in "
             "beam and greedy search; 0 = off (0)", .imin = 0, .imax = 1 << 20},
    {.name = "max-len-a", .kind = CLI_NUM, .offset = TA(max_len_a), .metavar = "A",
     .help = "maximum output length A * source length + B tokens (1.5)", .fmin = 0,
     .fmax = 1000},
    {.name = "max-len-b", .kind = CLI_NUM, .offset = TA(max_len_b), .metavar = "B",
     .help = "(10); never more than the model's max length - 1", .fmin = 0, .fmax = 1e6},
    {.name = "batch", .kind = CLI_INT, .offset = TA(batch), .metavar = "N",
     .help = "lines per batch (64); decoded side by side in groups of at most 128 / K "
             "sentences (K beams: 128 generator rows, a memory bound)", .imin = 1,
     .imax = TRANSLATE_MAX_BATCH},
    {.name = "threads", .kind = CLI_INT, .offset = TA(threads), .metavar = "N",
     .help = "worker threads (all cores)", .imin = 1, .imax = CLI_MAX_THREADS},
    {.name = "precision", .kind = CLI_CHOICE, .offset = TA(precision), .choices = "f32|bf16",
     .help = "compute precision of the matrix products: f32, or bf16 operands with f32 "
             "accumulation (f32)"},
    {.name = "eval", .kind = CLI_PATH, .offset = TA(eval), .metavar = "PAIRS",
     .help = "translate the sources of a pairs file (source<TAB>target lines) and print BLEU "
             "and chrF against its targets", .group = "evaluation"},
    {.name = "out", .kind = CLI_PATH, .offset = TA(out), .metavar = "FILE",
     .help = "--eval: write the hypotheses, one per line"},
    {.name = "force", .kind = CLI_FLAG, .offset = TA(force),
     .help = "replace --out if it exists (a regular file only)"},
    {0},
};

static const cli_command translate_cmd = {
    .name = "translate",
    .usage = "--checkpoint CK [options] [FILE|-]\n"
             "       tgrad translate --checkpoint CK --eval PAIRS [--out FILE] [options]",
    .description =
        "Translates with a checkpoint of 'tgrad train --pairs' (the encoder-decoder\n"
        "and its tokenizer: UTF-8 bytes, or the SentencePiece model the checkpoint\n"
        "holds). Reads FILE (default or '-': standard input), one sentence per line\n"
        "(UTF-8; CRLF accepted), and writes one translation per line, in order; an\n"
        "empty or blank (only spaces, tabs) line gives an empty line without running\n"
        "the model. Lines are translated in batches of --batch,\n"
        "and a batch is also translated as soon as no more input is waiting, so a\n"
        "pipe gets each answer at once. A source is cut to the model's max length - 1\n"
        "tokens plus EOS, as in training. A line over 64 KiB, invalid UTF-8 or a NUL\n"
        "byte stops the command with one line naming the line number (the earlier\n"
        "lines' translations are written first).\n"
        "--beam 1 is greedy decoding, otherwise fairseq's beam search with the length\n"
        "penalty len^A; an output has at most min(A * S + B, max length - 1) tokens\n"
        "(S: source tokens with EOS). Results do not depend on --threads.\n"
        "--eval PAIRS prints sacreBLEU's lines 'BLEU = ...' (13a tokens, exp\n"
        "smoothing) and 'chrF2 = ...' (character 6-grams, beta 2), how many\n"
        "hypotheses repeat a word 3 times in a row where the source does not\n"
        "(13a words), and the speed.\n"
        "\n"
        "Exit status: 0; 2 for a usage error (a bad option, a checkpoint that is not a\n"
        "translation model, --out that exists without --force); 1 for a run-time\n"
        "failure (a file missing or corrupt, bad input, a failed write).",
    .opts = translate_opts,
    .positional = "FILE",
    .min_positional = 0,
    .max_positional = 1,
};

const cli_command *translate_command(void) { return &translate_cmd; }

int translate_parse(int argc, char **argv, translate_args *a, cli_result *r, char *err,
                    size_t n)
{
    memset(a, 0, sizeof *a);
    a->beam = 5;
    a->lenpen = 1.0;
    a->max_len_a = 1.5;
    a->max_len_b = 10;
    a->batch = 64;
    int pr = cli_parse(&translate_cmd, argc, argv, a, r, err, n);
    if (pr != CLI_OK)
        return pr;
    if (a->eval && r->n_positional > 0) {
        snprintf(err, n, "--eval translates the pairs file's sources: no input FILE too");
        return CLI_ERROR;
    }
    if (!a->eval && (a->out || a->force)) {
        snprintf(err, n, "%s needs --eval (translations of FILE go to standard output)",
                 a->out ? "--out" : "--force");
        return CLI_ERROR;
    }
    if (r->n_positional > 0)
        a->input = r->positional[0];
    /* --out never names an input, even with --force (device and inode: links too) */
    if (!outpath_not_input("--out", a->out, "--eval", a->eval, err, n) ||
        !outpath_not_input("--out", a->out, "--checkpoint", a->checkpoint, err, n))
        return CLI_ERROR;
    return CLI_OK;
}

void translate_free(translate_args *a, cli_result *r) { cli_free(&translate_cmd, a, r); }

/* ---- load ----------------------------------------------------------------------------------- */

typedef struct translator_state {
    tg_ctx *ctx;
    tg_model *m;
    tg_tokenizer *tok;
    /* the translator of `batch` sentences, made when first needed (a call of fewer sentences
     * decodes only their rows: tg_translate_batch drops the others at once) */
    tg_translator *tr;
    tg_search_opts opts;
    int64_t cap;        /* the longest source tr takes (its opts.max_src_len) */
    int64_t tr_n;       /* the sentences tr takes per call (at most batch) */
    double limit;       /* the memory the command may use (phys_memory_bytes) */
    int64_t L;          /* the model's max_seq_len */
    int precision;      /* --precision (tg_precision) */
    int64_t batch;      /* sentences per tg_translate_batch: --batch, at most
                           max(1, TRANSLATE_MAX_ROWS / K) (the memory bound) */
    int32_t eos;
    char *text;         /* decoded output, grown as needed */
    size_t text_cap;
} translator_state;

static void say(const char *fmt, const char *a, const char *b)
{
    char line[2048];
    snprintf(line, sizeof line, fmt, a, b);
    fprintf(stderr, "tgrad translate: %s\n", line);
}

/* The tokenizer the checkpoint names; NULL after printing why. */
static tg_tokenizer *load_tokenizer(translator_state *s, const translate_args *a)
{
    const tg_model_info *mi = tg_model_get_info(s->m);
    char sh[80];
    if (!strcmp(mi->tokenizer, "bytes")) {
        tg_tokenizer *t = tg_model_tokenizer(s->m);
        if (!t)
            cli_report("translate", "--checkpoint", a->checkpoint, s->ctx);
        return t;
    }
#ifdef TG_HAVE_SPM
    size_t n = 0;
    const void *bytes = tg_model_tokenizer_bytes(s->m, &n);
    tg_tokenizer *t = tg_spm_load(s->ctx, bytes, n);
    if (!t) {
        char msg[1024];
        say("--checkpoint '%s': its SentencePiece model (tokenizer.model) is refused: %s",
            cli_show(a->checkpoint, sh, sizeof sh), cli_message(s->ctx, NULL, msg, sizeof msg));
    }
    return t;
#else
    say("--checkpoint '%s': its tokenizer is SentencePiece, but this tgrad was built without "
        "it; install libsentencepiece-dev and rebuild with 'meson setup build "
        "-Dsentencepiece=enabled'%s", cli_show(a->checkpoint, sh, sizeof sh), "");
    return NULL;
#endif
}

/* A training checkpoint (format tgrad-checkpoint-*) is validated as every command validates it
 * (ckpt_config_check: what train --resume, info and export accept), then released: the model
 * is loaded by tg_model_load, which keeps no copy of the file. 0, or the exit status after
 * printing why. */
static int validate_checkpoint(translator_state *s, const translate_args *a)
{
    tg_mark mk = tg_ctx_mark(s->ctx);
    tg_safetensors *st = tg_safetensors_read(s->ctx, a->checkpoint);
    if (!st) {
        cli_report("translate", "--checkpoint", a->checkpoint, s->ctx);
        return 1;
    }
    const char *format = tg_safetensors_meta_get(st, "format");
    int rc = 0;
    if (format && !strncmp(format, "tgrad-checkpoint", 16)) { /* else: tg_model_load says */
        train_args ta;
        train_defaults(&ta);
        ckpt_info info;
        tg_transformer_config mc;
        char e[1200], sh[80];
        if (!ckpt_config_check(st, &ta, &info, &mc, e, sizeof e)) {
            say("--checkpoint '%s': %s", cli_show(a->checkpoint, sh, sizeof sh), e);
            rc = info.usage ? 2 : 1;
        }
    }
    tg_ctx_rewind(s->ctx, mk);
    return rc;
}

/* --beam and --no-repeat-ngram against the model (vocabulary V, special ids sp, max_seq_len
 * Lm): 0, or the exit status after printing why. */
static int search_args_fit(const translate_args *a, int64_t V, tg_token_ids sp, int64_t Lm)
{
    char err[1024];
    /* beam search ranks 2K candidates among the tokens other than padding */
    int64_t max_beam = (V - (sp.pad >= 0 && sp.pad < V ? 1 : 0)) / 2;
    if (a->beam > 1 && a->beam > max_beam) {
        snprintf(err, sizeof err, "--beam %" PRId64 ": the model's vocabulary of %" PRId64
                 " pieces allows at most --beam %" PRId64 " (beam search ranks 2 K candidates "
                 "among the pieces other than padding)", a->beam, V, max_beam > 1 ? max_beam : 1);
        say("%s%s", err, "");
        return 2;
    }
    int64_t room = V - (sp.pad >= 0 && sp.pad < V ? 1 : 0) - Lm;
    if (a->no_repeat_ngram > Lm || (a->no_repeat_ngram && a->beam > 1 && room < 2 * a->beam)) {
        snprintf(err, sizeof err, "--no-repeat-ngram %" PRId64 ": %s", a->no_repeat_ngram,
                 a->no_repeat_ngram > Lm ? "at most the model's max_seq_len" : "the vocabulary "
                 "is too small for this --beam (2 K candidates beyond the max_seq_len tokens a "
                 "hypothesis may ban)");
        say("%s%s", err, "");
        return 2;
    }
    return 0;
}

/* Read and check the checkpoint, its tokenizer, and make the translator. 0, or the exit
 * status after printing why. */
static int translate_load(translator_state *s, const translate_args *a)
{
    char err[1024], sh[80];
    if (!cli_regular_file(a->checkpoint, err, sizeof err)) {
        say("--checkpoint %s%s", err, "");
        return 1;
    }
    int vc = validate_checkpoint(s, a);
    if (vc)
        return vc;
    /* nothing the context allocates may pass the memory the command may use: a need beyond it
     * is refused with a message, never met by the OOM killer */
    s->limit = phys_memory_bytes();
    if (s->limit < (double)SIZE_MAX)
        tg_ctx_set_memory_limit(s->ctx, (size_t)s->limit);
    s->m = tg_model_load(s->ctx, a->checkpoint);
    if (!s->m) {
        cli_report("translate", "--checkpoint", a->checkpoint, s->ctx);
        return 1;
    }
    const tg_model_info *mi = tg_model_get_info(s->m);
    if (!mi->tokenizer[0]) {
        const char *what = mi->kind == TG_MODEL_LM        ? "a byte-level language model"
                           : mi->kind == TG_MODEL_ENCODER ? "a built-in task's encoder"
                                                          : "a built-in task's seq2seq model";
        snprintf(err, sizeof err, "--checkpoint '%s' is %s, not a translation model (train "
                 "one with 'tgrad train --arch seq2seq --pairs TSV')",
                 cli_show(a->checkpoint, sh, sizeof sh), what);
        say("%s%s", err, "");
        return 2;
    }
    s->tok = load_tokenizer(s, a);
    if (!s->tok)
        return 1;
    int64_t V = tg_model_vocab_size(s->m);
    tg_token_ids sp = tg_tokenizer_special(s->tok);
    int sc = search_args_fit(a, V, sp, mi->config.max_seq_len);
    if (sc)
        return sc;
    if (tg_tokenizer_vocab_size(s->tok) != V) {
        snprintf(err, sizeof err, "--checkpoint '%s': its tokenizer has %" PRId64 " pieces "
                 "but model.vocab_size is %" PRId64, cli_show(a->checkpoint, sh, sizeof sh),
                 tg_tokenizer_vocab_size(s->tok), V);
        say("%s%s", err, "");
        return 1;
    }
    tg_search_opts o = tg_search_defaults();
    o.method = a->beam == 1 ? TG_SEARCH_GREEDY : TG_SEARCH_BEAM;
    o.beam = a->beam;
    o.lenpen = a->lenpen;
    o.no_repeat_ngram = a->no_repeat_ngram;
    o.max_len_a = a->max_len_a;
    o.max_len_b = a->max_len_b;
    o.bos = sp.bos;
    o.eos = sp.eos;
    o.pad = sp.pad;
    s->eos = sp.eos;
    s->L = mi->config.max_seq_len;
    /* a generator row costs ~L D (4 n_decoder_layers + activations) values: bound the rows of
     * one call, whatever --batch reads at a time */
    int64_t per_call = TRANSLATE_MAX_ROWS / a->beam;
    s->batch = a->batch < per_call ? a->batch : per_call > 0 ? per_call : 1;
    s->precision = a->precision;
    tg_ctx_set_training(s->ctx, false);
    if (a->threads)
        tg_ctx_set_threads(s->ctx, cli_threads_cap("translate", a->threads));
    s->opts = o;
    return 0;
}

static void human_bytes(double b, char *buf, size_t n)
{
    if (b >= 1e9)
        snprintf(buf, n, "%.1f GB", b / 1e9);
    else
        snprintf(buf, n, "%.0f MB", b / 1e6 > 1 ? b / 1e6 : 1.0);
}

/* A rough upper bound of the bytes a translator of @p n sentences with options @p o needs
 * beyond the model: R = n K rows of P = tg_translator_length() positions. The generator's
 * caches and memory keys (4 n_decoder_layers R P D values), the encoder graph of a call
 * (n + 1 sources of up to P tokens: ~16 D + 4 F values per token and layer, and the keys
 * and values of every decoder layer), a step graph (R rows: ~16 D + 4 F per decoder layer,
 * 3 V, the cross-attention's H P), and the ids of the search and the generator (~8 R P). */
static double translator_bytes(const translator_state *s, int64_t n, const tg_search_opts *o)
{
    const tg_model_info *mi = tg_model_get_info(s->m);
    const tg_transformer_config *c = &mi->config;
    double P = (double)tg_translator_length(tg_model_transformer(s->m), o);
    double R = (double)n * (double)(o->method == TG_SEARCH_BEAM ? o->beam : 1);
    double D = (double)c->layer.d_model, F = (double)c->layer.d_ff, H = (double)c->layer.n_heads;
    double Le = (double)c->n_layers, Ld = (double)c->n_decoder_layers, V = (double)c->vocab_size;
    double es = mi->dtype == TG_F64 ? 8 : 4, nb = (double)n + 1;
    double values = 4 * Ld * R * P * D + R * P +                      /* caches, memory, mask */
                    nb * P * ((16 * D + 4 * F) * Le + 2 * D * Ld) +    /* the encoder graph */
                    R * ((16 * D + 4 * F) * Ld + 3 * V + 4 * H * P);   /* a step graph */
    return values * es + 8 * R * P * (double)sizeof(int32_t);
}

/* The translator for @p k sentences of up to @p need tokens, made the first time it is needed
 * and again, larger, for more sentences or a longer source: sentences and source tokens
 * (from TRANSLATE_MIN_SRC) double as needed, at most `batch` sentences and max_seq_len tokens,
 * so memory follows the input, not the model's max_seq_len. A translator that would not fit in
 * the memory the command may use is refused before it is made. NULL after printing why. */
static tg_translator *translator_get(translator_state *s, int64_t k, int64_t need)
{
    if (s->tr && k <= s->tr_n && need <= s->cap)
        return s->tr;
    int64_t cap = s->cap > TRANSLATE_MIN_SRC ? s->cap : TRANSLATE_MIN_SRC;
    int64_t n = s->tr_n > 1 ? s->tr_n : 1;
    while (cap < need)
        cap *= 2;
    while (n < k)
        n *= 2;
    n = n < s->batch ? n : s->batch;
    tg_search_opts o = s->opts;
    o.max_src_len = cap < s->L ? cap : s->L;
    tg_translator_free(s->tr); /* its memory is released before the next one is made */
    s->tr = NULL;
    double need_b = translator_bytes(s, n, &o), have = s->limit - (double)tg_ctx_bytes(s->ctx);
    if (!(need_b <= have)) {
        char nb[32], lb[32];
        double mo = floor(o.max_len_a * (double)need + o.max_len_b); /* need's output bound */
        int64_t out_max = mo >= (double)(s->L - 1) ? s->L - 1 : mo < 1 ? 1 : (int64_t)mo;
        human_bytes(need_b, nb, sizeof nb);
        human_bytes(s->limit, lb, sizeof lb);
        fprintf(stderr, "tgrad translate: sources of up to %" PRId64 " tokens (outputs of up to "
                "%" PRId64 ") in groups of %" PRId64 " sentences x %" PRId64 " beams need about "
                "%s of memory beyond the model, more than the %s the command may use (this "
                "machine's memory, or ulimit -v if lower; lower --batch, --beam or "
                "--max-len-a/-b, or give shorter lines)\n", need, out_max, n,
                o.method == TG_SEARCH_BEAM ? o.beam : (int64_t)1, nb, lb);
        return NULL;
    }
    s->tr = tg_translator_new(s->ctx, tg_model_transformer(s->m), n, &o);
    if (s->tr && tg_generator_set_precision(tg_translator_generator(s->tr), s->precision) !=
                     TG_OK) {
        tg_translator_free(s->tr);
        s->tr = NULL;
    }
    if (!s->tr)
        cli_report("translate", NULL, NULL, s->ctx);
    s->cap = s->tr ? o.max_src_len : 0;
    s->tr_n = s->tr ? n : 0;
    return s->tr;
}

/* ---- run: translating a batch --------------------------------------------------------------- */
/* Translate @p n sources (ids with EOS) in chunks of s->batch (@p res: room for s->batch
 * results); text_of[i] receives the text of sentence i (malloc'd; also after a failure, the
 * texts made so far: the caller frees them). */
static bool translate_sorted(translator_state *s, int64_t n, const int32_t **src,
                             const int64_t *len, tg_translation *res, char **text_of)
{
    for (int64_t i0 = 0; i0 < n; i0 += s->batch) {
        int64_t k = n - i0 < s->batch ? n - i0 : s->batch, longest = 1;
        for (int64_t i = i0; i < i0 + k; i++) /* the chunk's longest source */
            longest = len[i] > longest ? len[i] : longest;
        tg_translator *tr = translator_get(s, k, longest);
        if (!tr)
            return false;
        if (tg_translate_batch(tr, k, src + i0, len + i0, res) != TG_OK) {
            cli_report("translate", NULL, NULL, s->ctx);
            return false;
        }
        for (int64_t i = 0; i < k; i++) {
            int64_t need = tg_tokenizer_decode(s->tok, res[i].ids, res[i].len, NULL, 0);
            char *t = need >= 0 ? malloc((size_t)need + 1) : NULL;
            if (!t || tg_tokenizer_decode(s->tok, res[i].ids, res[i].len, t,
                                          (size_t)need + 1) != need) {
                free(t);
                if (need < 0)
                    cli_report("translate", NULL, NULL, s->ctx);
                else
                    fprintf(stderr, "tgrad translate: out of memory\n");
                return false;
            }
            for (int64_t c = 0; c < need; c++) /* one line per translation, always */
                if (t[c] == '\n' || t[c] == '\r')
                    t[c] = ' ';
            text_of[i0 + i] = t;
        }
    }
    return true;
}

typedef struct by_len {
    int64_t len, index;
} by_len;

static int by_len_cmp(const void *a, const void *b)
{
    const by_len *x = a, *y = b;
    if (x->len != y->len)
        return x->len < y->len ? -1 : 1;
    return x->index < y->index ? -1 : x->index > y->index;
}

/* A line of nothing but ASCII whitespace (a byte tokenizer would hand its spaces to the
 * model, SentencePiece none of them): translated as an empty line. */
static bool blank_line(const char *p, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (!strchr(" \t\r\v\f", p[i]) || !p[i])
            return false;
    return true;
}

/* Translate @p n sources (ids with EOS); on success text_of[i] holds the text of sentence i
 * (malloc'd strings, the caller frees them). A source without a token (length 0, or EOS
 * alone: a blank line) gives an empty text without running the model. */
static bool translate_ids(translator_state *s, int64_t n, const int32_t *const *src_in,
                          const int64_t *len_in, char **text_of)
{
    /* sentences of similar lengths side by side (a call runs until its longest is done):
     * sorted by source length, each sentence's result is the same in any company */
    tg_translation *res = malloc(sizeof *res * (size_t)(s->batch));
    by_len *order = malloc(sizeof *order * (size_t)n);
    const int32_t **src = malloc(sizeof *src * (size_t)n);
    int64_t *len = malloc(sizeof *len * (size_t)n);
    char **sorted_text = calloc((size_t)n, sizeof *sorted_text);
    bool ok = res && order && src && len && sorted_text;
    if (!ok)
        fprintf(stderr, "tgrad translate: out of memory\n");
    int64_t m = 0; /* the sources with a token */
    for (int64_t i = 0; ok && i < n; i++)
        if (len_in[i] > 1)
            order[m++] = (by_len){len_in[i], i};
    if (ok)
        qsort(order, (size_t)m, sizeof *order, by_len_cmp);
    for (int64_t i = 0; ok && i < m; i++) {
        src[i] = src_in[order[i].index];
        len[i] = order[i].len;
    }
    ok = ok && (m == 0 || translate_sorted(s, m, src, len, res, sorted_text));
    for (int64_t i = 0; ok && i < m; i++) {
        text_of[order[i].index] = sorted_text[i];
        sorted_text[i] = NULL;
    }
    for (int64_t i = 0; ok && i < n; i++)
        if (len_in[i] <= 1 && !(text_of[i] = strdup(""))) {
            fprintf(stderr, "tgrad translate: out of memory\n");
            ok = false;
        }
    for (int64_t i = 0; sorted_text && i < n; i++)
        free(sorted_text[i]);
    free(sorted_text);
    free(len);
    free(src);
    free(order);
    free(res);
    return ok;
}

/* Source ids of @p n bytes of @p text: tok(text)[:L-1] + EOS into @p ids (room for L);
 * returns the count, or -1 (the tokenizer's message on the context). */
static int64_t source_ids(translator_state *s, const char *text, size_t n, int32_t *ids)
{
    int64_t k = tg_tokenizer_encode(s->tok, text, n, ids, s->L - 1);
    if (k < 0)
        return -1;
    if (k > s->L - 1)
        k = s->L - 1;
    ids[k] = s->eos;
    return k + 1;
}

/* ---- run: streaming ------------------------------------------------------------------------- */
typedef struct line_reader {
    int fd;
    char *buf;          /* [0, len): bytes read, not yet consumed from `start` */
    size_t start, len, cap;
    bool eof;
    int64_t line_no;    /* lines handed out so far */
} line_reader;

/* Is more input available right now (without blocking)? */
static bool input_ready(int fd)
{
    struct pollfd p = {.fd = fd, .events = POLLIN};
    int r;
    do
        r = poll(&p, 1, 0);
    while (r < 0 && errno == EINTR);
    return r != 0; /* an error: let read() say it */
}

/* Read more bytes (blocking). false on a read error (errno set). */
static bool reader_fill(line_reader *lr)
{
    if (lr->start > 0 && lr->start == lr->len)
        lr->start = lr->len = 0;
    if (lr->start > 0 && lr->len - lr->start < lr->cap / 2) {
        memmove(lr->buf, lr->buf + lr->start, lr->len - lr->start);
        lr->len -= lr->start;
        lr->start = 0;
    }
    if (lr->len == lr->cap) {
        size_t nc = lr->cap * 2;
        char *nb = realloc(lr->buf, nc);
        if (!nb) {
            errno = ENOMEM;
            return false;
        }
        lr->buf = nb;
        lr->cap = nc;
    }
    ssize_t got;
    do
        got = read(lr->fd, lr->buf + lr->len, lr->cap - lr->len);
    while (got < 0 && errno == EINTR);
    if (got < 0)
        return false;
    if (got == 0)
        lr->eof = true;
    lr->len += (size_t)got;
    return true;
}

enum { LINE_OK, LINE_NONE, LINE_LONG, LINE_ERR };

/* The next complete line in the buffer (or the last one at EOF), without its line end:
 * LINE_OK with *p, *n; LINE_NONE if no complete line is buffered; LINE_LONG if the line
 * exceeds the limit. */
static int reader_take(line_reader *lr, const char **p, size_t *n)
{
    const char *b = lr->buf + lr->start;
    size_t avail = lr->len - lr->start;
    const char *nl = memchr(b, '\n', avail);
    size_t ln;
    if (nl)
        ln = (size_t)(nl - b);
    else if (lr->eof && avail > 0)
        ln = avail;
    else if (avail > TRANSLATE_MAX_LINE + 1) { /* even a '\r' cannot bring it back */
        lr->line_no++;
        return LINE_LONG;
    } else
        return LINE_NONE;
    size_t content = ln > 0 && b[ln - 1] == '\r' ? ln - 1 : ln;
    lr->line_no++;
    if (content > TRANSLATE_MAX_LINE)
        return LINE_LONG;
    lr->start += ln + (nl != NULL);
    *p = b;
    *n = content;
    return LINE_OK;
}

/* One batch of lines: their ids (or empty) until translated and written. */
typedef struct pending {
    int32_t **ids;   /* (batch) arrays of L ids */
    int64_t *len;    /* 0: an empty line */
    int64_t n;
} pending;

/* Translate and write the pending lines (empty lines stay empty). */
static bool flush_pending(translator_state *s, pending *pd, const int32_t **src, int64_t *slen)
{
    int64_t k = 0;
    for (int64_t i = 0; i < pd->n; i++) {
        if (pd->len[i] > 0) {
            src[k] = pd->ids[i];
            slen[k++] = pd->len[i];
        }
    }
    char **out = calloc((size_t)(k ? k : 1), sizeof *out);
    bool ok = out && (k == 0 || translate_ids(s, k, src, slen, out));
    if (!out)
        fprintf(stderr, "tgrad translate: out of memory\n");
    for (int64_t i = 0, j = 0; ok && i < pd->n; i++) {
        const char *t = pd->len[i] > 0 ? out[j++] : "";
        fputs(t, stdout);
        fputc('\n', stdout);
    }
    for (int64_t j = 0; out && j < k; j++)
        free(out[j]);
    free(out);
    pd->n = 0;
    if (ok && fflush(stdout) != 0) {
        fprintf(stderr, "tgrad translate: writing the output failed: %s\n", strerror(errno));
        return false;
    }
    return ok;
}

/* Translate the lines of @p lr in batches of B as they come (a partial batch when no more
 * input is waiting). A line that cannot be read or encoded ends the stream with its message
 * in @p bad (nb bytes); false if a batch failed (reported). */
static bool stream_lines(translator_state *s, line_reader *lr, pending *pd, int64_t B,
                         const int32_t **src, int64_t *slen, const char *label, char *bad,
                         size_t nb)
{
    char sh[80];
    for (;;) {
        const char *p;
        size_t n;
        int t = reader_take(lr, &p, &n);
        if (t == LINE_OK) {
            int64_t k = !blank_line(p, n) ? source_ids(s, p, n, pd->ids[pd->n]) : 0;
            if (k < 0) {
                char msg[1024];
                snprintf(bad, nb, "%s:%" PRId64 ": %s", cli_show(label, sh, sizeof sh),
                         lr->line_no, cli_message(s->ctx, NULL, msg, sizeof msg));
                break;
            }
            pd->len[pd->n++] = k;
            if (pd->n == B && !flush_pending(s, pd, src, slen))
                return false;
            continue;
        }
        if (t == LINE_LONG) {
            snprintf(bad, nb, "%s:%" PRId64 ": the line is longer than %d bytes",
                     cli_show(label, sh, sizeof sh), lr->line_no, TRANSLATE_MAX_LINE);
            break;
        }
        if (lr->eof)
            break;
        /* no complete line buffered: translate what we have if nothing more is waiting */
        if (pd->n > 0 && !input_ready(lr->fd) && !flush_pending(s, pd, src, slen))
            return false;
        if (!reader_fill(lr)) {
            snprintf(bad, nb, "reading %s failed: %s", cli_show(label, sh, sizeof sh),
                     strerror(errno));
            break;
        }
    }
    return true;
}

static int translate_stream(translator_state *s, const translate_args *a)
{
    const char *name = a->input && strcmp(a->input, "-") ? a->input : NULL;
    char sh[80];
    line_reader lr = {.fd = 0, .cap = 1 << 16};
    if (name) {
        char err[1024];
        if (!cli_regular_file(name, err, sizeof err)) {
            say("%s%s", err, "");
            return 1;
        }
        lr.fd = open(name, O_RDONLY | O_CLOEXEC);
        if (lr.fd < 0) {
            say("cannot open '%s': %s", cli_show(name, sh, sizeof sh), strerror(errno));
            return 1;
        }
    }
    const char *label = name ? name : "<stdin>";
    pending pd = {0};
    int64_t B = a->batch;
    lr.buf = malloc(lr.cap);
    pd.ids = calloc((size_t)B, sizeof *pd.ids);
    pd.len = calloc((size_t)B, sizeof *pd.len);
    const int32_t **src = calloc((size_t)B, sizeof *src);
    int64_t *slen = calloc((size_t)B, sizeof *slen);
    bool ok = lr.buf && pd.ids && pd.len && src && slen;
    for (int64_t i = 0; ok && i < B; i++)
        ok = (pd.ids[i] = malloc(sizeof(int32_t) * (size_t)s->L)) != NULL;
    int rc = 1;
    if (!ok) {
        fprintf(stderr, "tgrad translate: out of memory\n");
        goto out;
    }
    char bad[1200] = "";
    if (!stream_lines(s, &lr, &pd, B, src, slen, label, bad, sizeof bad))
        goto out;
    if (pd.n > 0 && !flush_pending(s, &pd, src, slen))
        goto out;
    if (bad[0]) {
        fprintf(stderr, "tgrad translate: %s\n", bad);
        goto out;
    }
    rc = 0;
out:
    for (int64_t i = 0; pd.ids && i < B; i++)
        free(pd.ids[i]);
    free(pd.ids);
    free(pd.len);
    free(src);
    free(slen);
    free(lr.buf);
    if (name && lr.fd >= 0)
        close(lr.fd);
    return rc;
}

/* ---- run: --eval ---------------------------------------------------------------------------- */
static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

typedef struct {
    char *const *hyps;
    int64_t n;
} hyps_out;

static bool emit_hyps(FILE *f, void *user)
{
    const hyps_out *h = user;
    for (int64_t i = 0; i < h->n; i++) {
        fputs(h->hyps[i], f);
        fputc('\n', f);
    }
    return true;
}

/* --out: the hypotheses, one a line, through the atomic writer (outpath_write). */
static bool write_hyps(tg_ctx *ctx, const char *path, char *const *hyps, int64_t n)
{
    hyps_out h = {hyps, n};
    char err[1600];
    if (!outpath_write(ctx, "--out", path, emit_hyps, &h, err, sizeof err)) {
        say("%s%s", err, "");
        return false;
    }
    return true;
}

/* The hypotheses that repeat a word 3 or more times in a row (tg_word_run) where their source
 * does not; -1 with the error on ctx. */
static int64_t count_repeats(tg_ctx *ctx, const tg_seq2seq_data *d, char *const *hyps,
                             int64_t n)
{
    int64_t count = 0;
    for (int64_t i = 0; i < n; i++) {
        const char *src = tg_seq2seq_source_text(d, i);
        int64_t rh = 0, rs = 0;
        if (tg_word_run(ctx, hyps[i], strlen(hyps[i]), &rh) != TG_OK ||
            (rh >= 3 && tg_word_run(ctx, src, strlen(src), &rs) != TG_OK))
            return -1;
        count += rh >= 3 && rs < 3;
    }
    return count;
}

static int translate_eval(translator_state *s, const translate_args *a)
{
    char sh[80], line[512];
    if (a->out) {
        char err[1024];
        outpath_status os = outpath_check("--out", a->out, a->force, NULL, err, sizeof err);
        if (os != OUTPATH_OK) {
            say("%s%s", err, "");
            return os == OUTPATH_EXISTS ? 2 : 1;
        }
    }
    tg_seq2seq_opts so = {.max_len = s->L, .keep_text = true};
    tg_seq2seq_data *d = tg_seq2seq_load(s->ctx, a->eval, s->tok, &so);
    if (!d) {
        cli_report("translate", "--eval", a->eval, s->ctx);
        return 1;
    }
    int64_t n = tg_seq2seq_count(d);
    const int32_t **src = calloc((size_t)n, sizeof *src);
    int64_t *len = calloc((size_t)n, sizeof *len);
    char **hyps = calloc((size_t)n, sizeof *hyps);
    const char **refs = malloc(sizeof *refs * (size_t)n);
    int rc = 1;
    if (!src || !len || !hyps || !refs) {
        fprintf(stderr, "tgrad translate: out of memory\n");
        goto out;
    }
    for (int64_t i = 0; i < n; i++) {
        src[i] = tg_seq2seq_source(d, i, &len[i]);
        refs[i] = tg_seq2seq_target_text(d, i);
        const char *st = tg_seq2seq_source_text(d, i);
        if (st && blank_line(st, strlen(st)))
            len[i] = 0; /* as the streaming mode translates a blank line */
    }
    double t0 = now_s();
    if (!translate_ids(s, n, src, len, hyps))
        goto out;
    double secs = now_s() - t0;
    tg_bleu bleu;
    tg_chrf chrf;
    int64_t repeats = 0;
    if (tg_bleu_corpus(s->ctx, (size_t)n, (const char *const *)hyps, NULL, refs, NULL,
                       &bleu) != TG_OK ||
        tg_chrf_corpus(s->ctx, (size_t)n, (const char *const *)hyps, NULL, refs, NULL,
                       &chrf) != TG_OK ||
        (repeats = count_repeats(s->ctx, d, hyps, n)) < 0) {
        cli_report("translate", NULL, NULL, s->ctx);
        goto out;
    }
    if (a->out && !write_hyps(s->ctx, a->out, hyps, n))
        goto out;
    tg_bleu_format(&bleu, line, sizeof line);
    printf("%s\n", line);
    tg_chrf_format(&chrf, line, sizeof line);
    printf("%s\n", line);
    printf("repeats: %" PRId64 " of %" PRId64 " hypotheses repeat a word 3 times in a row "
           "where the source does not\n", repeats, n);
    printf("sentences %" PRId64 ", %.2f s, %.1f sentences/s (%s, %s)\n", n, secs,
           secs > 0 ? (double)n / secs : 0.0, a->beam == 1 ? "greedy" : "beam",
           cli_show(a->eval, sh, sizeof sh));
    rc = 0;
out:
    for (int64_t i = 0; hyps && i < n; i++)
        free(hyps[i]);
    free(hyps);
    free(src);
    free(len);
    free(refs);
    tg_seq2seq_free(d);
    return rc;
}

/* ---- report --------------------------------------------------------------------------------- */
int cmd_translate(int argc, char **argv)
{
    translate_args a;
    cli_result r;
    char err[1024];
    int ex = cli_parse_exit(translate_parse(argc, argv, &a, &r, err, sizeof err),
                            &translate_cmd, err);
    if (ex >= 0) {
        translate_free(&a, &r);
        return ex;
    }
    translator_state s;
    memset(&s, 0, sizeof s);
    s.ctx = tg_ctx_new();
    int rc = 1;
    if (!s.ctx)
        fprintf(stderr, "tgrad translate: out of memory\n");
    else if ((rc = translate_load(&s, &a)) == 0)
        rc = a.eval ? translate_eval(&s, &a) : translate_stream(&s, &a);
    tg_translator_free(s.tr);
    tg_tokenizer_free(s.tok);
    tg_ctx_free(s.ctx);
    translate_free(&a, &r);
    return rc;
}
