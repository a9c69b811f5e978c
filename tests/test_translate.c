#define _POSIX_C_SOURCE 200809L
/*
 * test_translate.c - translation checkpoints (data.mode pairs) and `tgrad translate`.
 * - tg_model_load of translation checkpoints written through the library (tg_transformer_init
 *   with random weights + tg_checkpoint_save with the metadata `tgrad train --pairs` writes):
 *   the byte tokenizer and (built with SentencePiece) a tiny SentencePiece model trained here;
 *   hostile metadata refused, the context unchanged;
 * - `tgrad translate`: one output line per input line (empty and blank lines give empty
 *   ones, CRLF), greedy and beam, batch size invariance, a pipe answered line by line before
 *   its end, --eval's BLEU and chrF lines equal to tg_bleu_corpus / tg_chrf_corpus of the
 *   hypotheses it wrote (--out, --force), hostile input (invalid UTF-8, NUL, an over-long
 *   line: one line, exit 1, earlier output kept), checkpoints that are not translation models
 *   (exit 2), hostile tokenizer bytes (exit 1, one line), usage errors.
 */
#include "testutil.h"
#include "tgrad_data.h"
#include "tgrad_decode.h"
#include "tgrad_metrics.h"
#include "tgrad_model.h"
#ifdef TG_HAVE_SPM
#include "tgrad_spm.h"
#endif

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static char dir[256];

static void setup(void) { tu_mkdtemp(dir, sizeof dir, "translate"); }
/* TU_KEEP=1 keeps the scratch directory (to look at its checkpoints). */
static void teardown(void)
{
    if (!getenv("TU_KEEP"))
        tu_rm_tree(dir);
}

/* ---- checkpoints made through the library ---------------------------------------------------- */
#define MAX_META 40
typedef struct meta {
    const char *k[MAX_META];
    const char *v[MAX_META];
    int n;
} meta;

static void meta_set(meta *m, const char *k, const char *v)
{
    for (int i = 0; i < m->n; i++)
        if (!strcmp(m->k[i], k)) {
            if (v) {
                m->v[i] = v;
            } else {
                m->k[i] = m->k[m->n - 1];
                m->v[i] = m->v[m->n - 1];
                m->n--;
            }
            return;
        }
    if (v) {
        m->k[m->n] = k;
        m->v[m->n++] = v;
    }
}

#ifdef TG_HAVE_SPM
static const char *const corpus_lines[] = {
    "I am thirsty.", "Ich habe Durst.", "The cat sleeps.", "Die Katze schläft.",
    "Where is the station?", "Wo ist der Bahnhof?", "We are going home.",
    "Wir gehen nach Hause.", "It is raining today.", "Heute regnet es.", "I like music.",
    "Ich mag Musik.", "The house is big.", "Das Haus ist groß.", "She reads a book.",
    "Sie liest ein Buch.",
};

static tg_tokenizer *tiny_spm(tg_ctx *ctx)
{
    tg_spm_train_opts o = tg_spm_train_defaults();
    o.vocab_size = 60;
    o.hard_vocab_limit = 0;
    tg_tokenizer *t = tg_spm_train_strings(ctx, &o, corpus_lines, NULL,
                                           (int64_t)(sizeof corpus_lines / sizeof *corpus_lines));
    ck_assert_msg(t != NULL, "%s", tg_ctx_message(ctx));
    return t;
}
#endif

/* make_ckpt's d_model (d_ff twice it): 16 unless a test widens the model. */
static int64_t ckpt_width = 16;

/*
 * Write a translation checkpoint dir/@p name: the encoder-decoder (1 + 1 layers, d_model
 * ckpt_width (16), max length 24, tied, scaled embeddings) with random weights and Adam's (zero)
 * state, tokenizer @p tok (NULL: bytes), the metadata edited by (@p key, @p value) pairs (value
 * NULL: removed), n_edits of them.
 */
static const char *make_ckpt(const char *name, tg_tokenizer *tok, int n_edits,
                             const char *const *edits)
{
    static char path[512];
    tg_ctx *ctx = tg_ctx_new();
    tg_ctx_seed(ctx, 7);
    tg_tokenizer *own = tok ? NULL : tg_tokenizer_bytes(ctx);
    const tg_tokenizer *t = tok ? tok : own;
    char vocab[32];
    snprintf(vocab, sizeof vocab, "%lld", (long long)tg_tokenizer_vocab_size(t));
    tg_transformer_config c = {0};
    c.vocab_size = tg_tokenizer_vocab_size(t);
    c.max_seq_len = 24;
    c.n_layers = 1;
    c.n_decoder_layers = 1;
    c.layer = tg_encoder_config_default(ckpt_width, 2);
    c.layer.d_ff = 2 * ckpt_width;
    char dm[24], dff[24];
    snprintf(dm, sizeof dm, "%lld", (long long)ckpt_width);
    snprintf(dff, sizeof dff, "%lld", (long long)(2 * ckpt_width));
    c.layer.dropout = 0;
    c.pos = TG_POS_SINUSOIDAL;
    c.tie_weights = true;
    c.scale_embeddings = true;
    tg_transformer m;
    ck_assert_msg(tg_transformer_init(ctx, &m, TG_F32, &c) == TG_OK, "%s", tg_ctx_message(ctx));
    meta md = {.n = 0};
    static const char *const base[][2] = {
        {"format", "tgrad-checkpoint-1"}, {"model.arch", "seq2seq"}, {"model.layers", "1"},
        {"model.decoder_layers", "1"}, {"model.d_model", "16"}, {"model.heads", "2"},
        {"model.d_ff", "32"}, {"model.seq_len", "24"}, {"model.norm_first", "1"},
        {"model.activation", "relu"}, {"model.pos", "sinusoidal"}, {"model.causal", "0"},
        {"model.tie_weights", "1"}, {"model.dropout", "0"}, {"model.dtype", "f32"},
        {"model.scale_embeddings", "1"}, {"data.mode", "pairs"},
        {"data.pairs_hash", "fnv1a64:0123456789abcdef"},
        {"data.valid_hash", "fnv1a64:fedcba9876543210"}, {"data.epoch", "0"},
        {"data.batch", "0"}, {"train.batch_tokens", "256"}, {"train.optimizer", "adam"},
    };
    for (size_t i = 0; i < sizeof base / sizeof base[0]; i++)
        meta_set(&md, base[i][0], base[i][1]);
    meta_set(&md, "model.vocab_size", vocab);
    meta_set(&md, "model.d_model", dm);
    meta_set(&md, "model.d_ff", dff);
    const char *tk[2];
    char *tv[2];
    int nt = tg_tokenizer_meta(t, tk, tv);
    ck_assert_int_ge(nt, 1);
    for (int i = 0; i < nt; i++)
        meta_set(&md, tk[i], tv[i]);
    for (int i = 0; i < n_edits; i++)
        meta_set(&md, edits[2 * i], edits[2 * i + 1]);
    tu_path(path, sizeof path, dir, name);
    /* with Adam's state, as tgrad train writes it (every command validates a checkpoint as
     * train --resume does) */
    tg_optim_config oc = tg_optim_defaults(TG_OPTIM_ADAM);
    tg_optim *opt = tg_optim_new(ctx, &oc, 0, NULL);
    ck_assert_msg(opt != NULL, "%s", tg_ctx_message(ctx));
    ck_assert_msg(tg_checkpoint_save(ctx, path, opt, md.n, md.k, md.v, NULL) == TG_OK, "%s",
                  tg_ctx_message(ctx));
    for (int i = 0; i < nt; i++)
        free(tv[i]);
    tg_tokenizer_free(own);
    tg_ctx_free(ctx);
    return path;
}

/* ---- tg_model_load ---------------------------------------------------------------------------- */
START_TEST(test_load_bytes)
{
    const char *p = make_ckpt("b.ckpt", NULL, 0, NULL);
    tg_ctx *ctx = tg_ctx_new();
    tg_model *m = tg_model_load(ctx, p);
    ck_assert_msg(m != NULL, "%s", tg_ctx_message(ctx));
    const tg_model_info *mi = tg_model_get_info(m);
    ck_assert_int_eq(mi->kind, TG_MODEL_SEQ2SEQ);
    ck_assert_str_eq(mi->tokenizer, "bytes");
    ck_assert_int_eq(mi->bos_id, TG_TOKEN_BOS);
    ck_assert(mi->config.scale_embeddings);
    ck_assert_int_eq(mi->config.n_decoder_layers, 1);
    ck_assert_int_eq(tg_model_vocab_size(m), TG_BYTE_VOCAB);
    ck_assert_int_eq(tg_model_token_byte(m, 259), -1);
    size_t n = 1;
    ck_assert_ptr_null(tg_model_tokenizer_bytes(m, &n));
    ck_assert_uint_eq(n, 0);
    tg_tokenizer *t = tg_model_tokenizer(m);
    ck_assert_ptr_nonnull(t);
    ck_assert_str_eq(tg_tokenizer_kind(t), "bytes");
    tg_tokenizer_free(t);
    tg_ctx_free(ctx);
    /* absent model.scale_embeddings is 0 */
    const char *e[] = {"model.scale_embeddings", NULL};
    p = make_ckpt("b0.ckpt", NULL, 1, e);
    ctx = tg_ctx_new();
    m = tg_model_load(ctx, p);
    ck_assert_msg(m != NULL, "%s", tg_ctx_message(ctx));
    ck_assert(!tg_model_get_info(m)->config.scale_embeddings);
    tg_ctx_free(ctx);
}
END_TEST

static void expect_refused(const char *path, tg_status status, const char *needle)
{
    tg_ctx *ctx = tg_ctx_new();
    size_t bytes = tg_ctx_bytes(ctx);
    ck_assert_ptr_null(tg_model_load(ctx, path));
    tu_assert_error(ctx, status, needle);
    ck_assert_msg(!strncmp(tg_ctx_message(ctx), "tg_model_load: ", 15) &&
                  strstr(tg_ctx_message(ctx), path), "%s", tg_ctx_message(ctx));
    ck_assert_uint_eq(tg_ctx_bytes(ctx), bytes);
    tg_ctx_free(ctx);
}

START_TEST(test_load_hostile)
{
    static const struct {
        const char *key, *value;
        tg_status st;
        const char *needle;
    } rows[] = {
        {"model.vocab_size", "259", TG_ERR_FORMAT, "model.vocab_size 259 but the byte tokenizer"},
        {"tokenizer.kind", NULL, TG_ERR_FORMAT, "'tokenizer.kind' is missing"},
        {"tokenizer.kind", "wordpiece", TG_ERR_FORMAT, "'tokenizer.kind' is 'wordpiece'"},
        {"tokenizer.model", "AAAA", TG_ERR_FORMAT, "present but tokenizer.kind is bytes"},
        {"model.arch", "lm", TG_ERR_FORMAT, "model.arch lm but data.mode pairs"},
        {"model.arch", "encoder", TG_ERR_FORMAT, "model.arch encoder but data.mode pairs"},
        {"model.causal", "1", TG_ERR_FORMAT, "model.causal 1 but data.mode pairs"},
        {"model.decoder_layers", NULL, TG_ERR_FORMAT, "'model.decoder_layers' is missing"},
        {"model.scale_embeddings", "2", TG_ERR_FORMAT, "'model.scale_embeddings' is '2'"},
        {"data.mode", "pair", TG_ERR_FORMAT, "expected text|task|pairs"},
        {"model.vocab_size", "2000000", TG_ERR_FORMAT, "'model.vocab_size' is '2000000'"},
        /* the training state, as tg_train_state_read reads it */
        {"data.epoch", "-1", TG_ERR_FORMAT, "metadata 'data.epoch' is '-1'"},
        {"data.batch", NULL, TG_ERR_FORMAT, "metadata 'data.batch' is missing"},
        {"train.best_val", "nan", TG_ERR_FORMAT, "'train.best_val' is 'nan'"},
    };
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
        const char *e[] = {rows[i].key, rows[i].value};
        expect_refused(make_ckpt("h.ckpt", NULL, 1, e), rows[i].st, rows[i].needle);
    }
    /* sentencepiece without a model, bad base64, a model too large to be one */
    const char *e1[] = {"tokenizer.kind", "sentencepiece"};
    expect_refused(make_ckpt("h.ckpt", NULL, 1, e1), TG_ERR_FORMAT,
                   "'tokenizer.model' is missing");
    const char *e2[] = {"tokenizer.kind", "sentencepiece", "tokenizer.model", "AB!D"};
    expect_refused(make_ckpt("h.ckpt", NULL, 2, e2), TG_ERR_FORMAT,
                   "byte 0x21 at offset 2 is not a base64 character");
    /* optimizer state that is not finite, a negative second moment; a malformed RNG state */
    static const struct {
        tu_st_edit e;
        const char *needle;
    } st[] = {
        {{.poison = "adam.m.tok_emb.weight"}, "optimizer state 'adam.m.tok_emb.weight' element "
                                              "0 is nan (expected a finite value)"},
        {{.fill = "adam.v.tok_emb.weight", .fill_value = -1}, "'adam.v.tok_emb.weight' "
         "element 0 is -1 (expected a finite value >= 0, as a second moment is)"},
        {{.key = "rng", .value = "00"}, "metadata 'rng' is '00'"},
    };
    const char *src = make_ckpt("ok.ckpt", NULL, 0, NULL);
    char bad[512];
    tu_path(bad, sizeof bad, dir, "h.ckpt");
    for (size_t i = 0; i < sizeof st / sizeof st[0]; i++) {
        tu_st_rewrite(src, bad, &st[i].e);
        expect_refused(bad, TG_ERR_FORMAT, st[i].needle);
    }
}
END_TEST

#ifdef TG_HAVE_SPM
START_TEST(test_load_spm)
{
    tg_ctx *tctx = tg_ctx_new();
    tg_tokenizer *tok = tiny_spm(tctx);
    const char *p = make_ckpt("s.ckpt", tok, 0, NULL);
    tg_ctx *ctx = tg_ctx_new();
    tg_model *m = tg_model_load(ctx, p);
    ck_assert_msg(m != NULL, "%s", tg_ctx_message(ctx));
    ck_assert_str_eq(tg_model_get_info(m)->tokenizer, "sentencepiece");
    size_t n = 0, want = 0;
    const void *b = tg_model_tokenizer_bytes(m, &n);
    const void *orig = tg_tokenizer_model(tok, &want);
    ck_assert_uint_eq(n, want);
    ck_assert(memcmp(b, orig, n) == 0);
    ck_assert_ptr_null(tg_model_tokenizer(m));
    tu_assert_error(ctx, TG_ERR_UNSUPPORTED, "tg_spm_load");
    tg_tokenizer *t2 = tg_spm_load(ctx, b, n);
    ck_assert_msg(t2 != NULL, "%s", tg_ctx_message(ctx));
    ck_assert_int_eq(tg_tokenizer_vocab_size(t2), tg_model_vocab_size(m));
    tg_tokenizer_free(t2);
    tg_ctx_free(ctx);
    tg_tokenizer_free(tok);
    tg_ctx_free(tctx);
}
END_TEST
#endif

/* ---- tgrad translate -------------------------------------------------------------------------- */
static int run(const char *args)
{
    return tu_run_tgrad(dir, args, 120, NULL);
}

static char *out_txt(void) { return tu_slurp_in(dir, "out.txt", NULL); }
static char *err_txt(void) { return tu_slurp_in(dir, "err.txt", NULL); }

static void expect_exit(const char *args, int code, const char *needle)
{
    int rc = run(args);
    char *err = err_txt();
    ck_assert_msg(rc == code, "tgrad %s: exit %d (expected %d): %s", args, rc, code, err);
    if (needle) {
        ck_assert_msg(strstr(err, needle), "tgrad %s: stderr lacks '%s': %s", args, needle, err);
        ck_assert_int_eq(tu_count_lines(err), 1);
    }
    free(err);
}

START_TEST(test_stream_lines)
{
    make_ckpt("b.ckpt", NULL, 0, NULL);
    tu_write_file(dir, "in.txt", "Hello.\n\nI am thirsty.\r\nA longer sentence than the model's "
                  "maximum length of twenty-four tokens is cut.\n\r\nlast line without end");
    static const char *const opts[] = {"--beam 1", "--beam 3", "--beam 3 --batch 1",
                                       "--beam 1 --batch 2 --threads 1"};
    char *first[2] = {NULL, NULL};
    for (int k = 0; k < 4; k++) {
        char args[256];
        snprintf(args, sizeof args, "translate --checkpoint b.ckpt %s in.txt", opts[k]);
        expect_exit(args, 0, NULL);
        char *o = out_txt();
        ck_assert_int_eq(tu_count_lines(o), 6);
        char *l2 = strchr(o, '\n');
        ck_assert(l2[1] == '\n'); /* the empty line stays empty */
        char *l4 = strchr(strchr(l2 + 2, '\n') + 1, '\n'); /* the end of line 4 */
        ck_assert(l4[1] == '\n'); /* CRLF alone: empty too */
        int which = k == 0 || k == 3 ? 0 : 1; /* greedy, beam: --batch changes nothing */
        if (!first[which])
            first[which] = o;
        else {
            ck_assert_str_eq(o, first[which]);
            free(o);
        }
    }
    free(first[0]);
    free(first[1]);
    /* standard input, '-' */
    ck_assert_int_eq(tu_run_sh(dir, "(printf 'Hi\\n\\nthere\\n' | '" TG_TGRAD_EXE
                               "' translate --checkpoint b.ckpt --beam 2 - >out.txt 2>err.txt)",
                               120, NULL), 0);
    char *o = out_txt();
    ck_assert_int_eq(tu_count_lines(o), 3);
    free(o);
    /* no input at all: no output */
    tu_write_file(dir, "empty.txt", "");
    expect_exit("translate --checkpoint b.ckpt empty.txt", 0, NULL);
    o = out_txt();
    ck_assert_str_eq(o, "");
    free(o);
}
END_TEST

/* A blank line (only spaces, tabs, a CR) gives an empty line, as an empty line does, without
 * running the model (a byte tokenizer would hand the model its spaces, SentencePiece nothing
 * but EOS, and the model would invent a sentence); --eval treats a blank source alike. */
static void expect_blank_lines_empty(const char *ckpt)
{
    tu_write_file(dir, "in.txt", "Hello.\n   \n\t \r\n\n \t\nI am thirsty.\n");
    char args[256];
    snprintf(args, sizeof args, "translate --checkpoint %s --beam 2 in.txt", ckpt);
    expect_exit(args, 0, NULL);
    char *o = out_txt();
    ck_assert_int_eq(tu_count_lines(o), 6);
    char *l2 = strchr(o, '\n') + 1;
    ck_assert_msg(!strncmp(l2, "\n\n\n\n", 4) && l2[4] != '\n',
                  "%s: blank lines not translated as empty ones: %s", ckpt, o);
    free(o);
    tu_write_file(dir, "blank.tsv", "  \tIch.\nI am thirsty.\tIch habe Durst.\n");
    snprintf(args, sizeof args, "translate --checkpoint %s --beam 2 --eval blank.tsv --out "
             "hyp.txt --force", ckpt);
    expect_exit(args, 0, NULL);
    tu_write_file(dir, "src.txt", "  \nI am thirsty.\n");
    snprintf(args, sizeof args, "translate --checkpoint %s --beam 2 src.txt", ckpt);
    expect_exit(args, 0, NULL);
    o = out_txt();
    char *hyp = tu_slurp_in(dir, "hyp.txt", NULL);
    ck_assert_msg(o[0] == '\n' && !strcmp(o, hyp), "%s: --eval '%s', streaming '%s'", ckpt, hyp,
                  o);
    free(o);
    free(hyp);
}

START_TEST(test_blank_lines)
{
    make_ckpt("b.ckpt", NULL, 0, NULL);
    expect_blank_lines_empty("b.ckpt");
#ifdef TG_HAVE_SPM
    tg_ctx *tctx = tg_ctx_new();
    tg_tokenizer *tok = tiny_spm(tctx);
    make_ckpt("s.ckpt", tok, 0, NULL);
    tg_tokenizer_free(tok);
    tg_ctx_free(tctx);
    expect_blank_lines_empty("s.ckpt");
#endif
}
END_TEST

/* A pipe gets each line's translation before the input ends. */
START_TEST(test_stream_interactive)
{
    make_ckpt("b.ckpt", NULL, 0, NULL);
    char ck[512];
    tu_path(ck, sizeof ck, dir, "b.ckpt");
    int in[2], out[2];
    ck_assert_int_eq(pipe(in), 0);
    ck_assert_int_eq(pipe(out), 0);
    pid_t pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        dup2(in[0], 0);
        dup2(out[1], 1);
        close(in[1]);
        close(out[0]);
        execl(tu_tgrad_exe(), "tgrad", "translate", "--checkpoint", ck, "--beam", "2",
              (char *)NULL);
        _exit(127);
    }
    close(in[0]);
    close(out[1]);
    for (int line = 0; line < 2; line++) {
        ck_assert_int_eq(write(in[1], "I am thirsty.\n", 14), 14);
        char buf[4096];
        size_t got = 0;
        while (!memchr(buf, '\n', got)) {
            struct pollfd p = {.fd = out[0], .events = POLLIN};
            int r = poll(&p, 1, 60000);
            ck_assert_msg(r == 1, "no translation of line %d within 60 s (stdin still open)",
                          line + 1);
            ssize_t k = read(out[0], buf + got, sizeof buf - got);
            ck_assert_int_gt(k, 0);
            got += (size_t)k;
        }
        ck_assert(buf[got - 1] == '\n' && memchr(buf, '\n', got) == buf + got - 1);
    }
    close(in[1]);
    int status;
    ck_assert_int_eq(waitpid(pid, &status, 0), pid);
    ck_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    close(out[0]);
}
END_TEST

START_TEST(test_eval)
{
    make_ckpt("b.ckpt", NULL, 0, NULL);
    tu_write_file(dir, "test.tsv", "I am thirsty.\tIch habe Durst.\nThe cat sleeps.\tDie Katze "
                  "schläft.\nWhere is it?\tWo ist es?\r\n");
    expect_exit("translate --checkpoint b.ckpt --eval test.tsv --beam 2 --out hyp.txt", 0, NULL);
    char *o = out_txt();
    ck_assert_int_eq(tu_count_lines(o), 4);
    ck_assert(!strncmp(o, "BLEU = ", 7));
    char *chrf_line = strchr(o, '\n') + 1;
    ck_assert(!strncmp(chrf_line, "chrF2 = ", 8));
    char *rep_line = strchr(chrf_line, '\n') + 1;
    long rep = -1;
    ck_assert_msg(sscanf(rep_line, "repeats: %ld of 3 hypotheses repeat a word 3 times", &rep) ==
                      1 && rep >= 0 && rep <= 3, "%s", rep_line);
    ck_assert(strstr(chrf_line, "sentences 3, "));
    size_t hl;
    char *hyp = tu_slurp_in(dir, "hyp.txt", &hl);
    ck_assert_int_eq(tu_count_lines(hyp), 3);
    const char *hyps[3], *refs[3] = {"Ich habe Durst.", "Die Katze schläft.", "Wo ist es?"};
    char *p = hyp;
    for (int i = 0; i < 3; i++) {
        hyps[i] = p;
        p = strchr(p, '\n');
        *p++ = 0;
    }
    tg_ctx *ctx = tg_ctx_new();
    tg_bleu b;
    tg_chrf c;
    ck_assert_int_eq(tg_bleu_corpus(ctx, 3, hyps, NULL, refs, NULL, &b), TG_OK);
    ck_assert_int_eq(tg_chrf_corpus(ctx, 3, hyps, NULL, refs, NULL, &c), TG_OK);
    char want[512];
    tg_bleu_format(&b, want, sizeof want);
    ck_assert(!strncmp(o, want, strlen(want)) && o[strlen(want)] == '\n');
    tg_chrf_format(&c, want, sizeof want);
    ck_assert(!strncmp(chrf_line, want, strlen(want)) && chrf_line[strlen(want)] == '\n');
    tg_ctx_free(ctx);
    free(o);
    /* the same hypotheses as the streaming mode */
    tu_write_file(dir, "src.txt", "I am thirsty.\nThe cat sleeps.\nWhere is it?\n");
    expect_exit("translate --checkpoint b.ckpt --beam 2 src.txt", 0, NULL);
    o = out_txt();
    char *again = tu_slurp_in(dir, "hyp.txt", NULL);
    ck_assert_str_eq(o, again);
    free(o);
    free(again);
    free(hyp);
    /* --out exists: --force needed */
    expect_exit("translate --checkpoint b.ckpt --eval test.tsv --out hyp.txt", 2, "--force");
    expect_exit("translate --checkpoint b.ckpt --eval test.tsv --out hyp.txt --force --beam 1",
                0, NULL);
    /* --no-repeat-ngram: no output line repeats a token (n = 1; the byte model's outputs do
     * otherwise), greedy and beam; out of range refused naming the option */
    for (int beam = 1; beam <= 2; beam++) {
        char args[160];
        snprintf(args, sizeof args, "translate --checkpoint b.ckpt --beam %d --no-repeat-ngram 1 "
                 "src.txt", beam);
        expect_exit(args, 0, NULL);
        o = out_txt();
        for (char *line = o; *line;) {
            char *end = strchr(line, '\n');
            for (char *a = line; a < end; a++) /* (ASCII bytes are tokens here; other bytes
                                                   may be U+FFFD, written for invalid UTF-8) */
                for (char *b2 = a + 1; b2 < end && (unsigned char)*a < 0x80; b2++)
                    ck_assert_msg(*a != *b2, "'%.*s' repeats '%c'", (int)(end - line), line, *a);
            line = end + 1;
        }
        free(o);
    }
    expect_exit("translate --checkpoint b.ckpt --no-repeat-ngram 100000 src.txt", 2,
                "--no-repeat-ngram 100000: at most the model's max_seq_len");
    /* a bad pairs file: one line naming it */
    tu_write_file(dir, "bad.tsv", "no tab here\n");
    expect_exit("translate --checkpoint b.ckpt --eval bad.tsv", 1, "bad.tsv:1");
}
END_TEST

START_TEST(test_hostile_input)
{
    make_ckpt("b.ckpt", NULL, 0, NULL);
    static const struct {
        const char *printf_arg, *needle;
    } rows[] = {
        {"ok\\nfine\\nbad \\377 byte\\nnever\\n", ":3: the text is not valid UTF-8"},
        {"ok\\nfine\\nnul \\000 byte\\nnever\\n", ":3: the text has a NUL byte at offset 4"},
    };
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
        char cmd[512];
        snprintf(cmd, sizeof cmd, "(printf '%s' | '%s' translate --checkpoint b.ckpt --beam 1 "
                 ">out.txt 2>err.txt)", rows[i].printf_arg, tu_tgrad_exe());
        ck_assert_int_eq(tu_run_sh(dir, cmd, 120, NULL), 1);
        char *o = out_txt(), *e = err_txt();
        ck_assert_int_eq(tu_count_lines(o), 2); /* the two lines before it */
        ck_assert_msg(strstr(e, rows[i].needle), "%s", e);
        ck_assert_int_eq(tu_count_lines(e), 1);
        free(o);
        free(e);
    }
    /* a line over 64 KiB (line 2), with and without its line end */
    size_t n = 70000;
    char *big = malloc(n + 16);
    memcpy(big, "short\n", 6);
    memset(big + 6, 'a', n);
    strcpy(big + 6 + n, "\nnever\n");
    tu_write_file(dir, "long.txt", big);
    expect_exit("translate --checkpoint b.ckpt --beam 1 long.txt", 1,
                "long.txt:2: the line is longer than 65536 bytes");
    char *o = out_txt();
    ck_assert_int_eq(tu_count_lines(o), 1);
    free(o);
    big[6 + n] = 0;
    tu_write_file(dir, "long.txt", big);
    expect_exit("translate --checkpoint b.ckpt --beam 1 long.txt", 1,
                "long.txt:2: the line is longer than 65536 bytes");
    free(big);
    /* exactly 64 KiB with CRLF is fine */
    big = malloc(65536 + 3);
    memset(big, 'b', 65536);
    strcpy(big + 65536, "\r\n");
    tu_write_file(dir, "edge.txt", big);
    free(big);
    expect_exit("translate --checkpoint b.ckpt --beam 1 edge.txt", 0, NULL);
}
END_TEST

START_TEST(test_wrong_checkpoints)
{
    char ck[512];
    snprintf(ck, sizeof ck, "translate --checkpoint '%s/export_lm.ckpt'", TG_FIXTURES);
    expect_exit(ck, 2, "a byte-level language model, not a translation model");
    snprintf(ck, sizeof ck, "translate --checkpoint '%s/export_task.ckpt'", TG_FIXTURES);
    expect_exit(ck, 2, "not a translation model");
    expect_exit("translate --checkpoint missing.ckpt", 1, "missing.ckpt");
    tu_write_file(dir, "junk.ckpt", "not a checkpoint at all");
    expect_exit("translate --checkpoint junk.ckpt", 1, "junk.ckpt");
    /* hostile tokenizer bytes: valid base64 of garbage, invalid base64 */
    const char *e1[] = {"tokenizer.kind", "sentencepiece", "tokenizer.model", "/////w=="};
    make_ckpt("h1.ckpt", NULL, 2, e1);
#ifdef TG_HAVE_SPM
    expect_exit("translate --checkpoint h1.ckpt", 1, "SentencePiece model (tokenizer.model) is "
                                                     "refused");
#else
    expect_exit("translate --checkpoint h1.ckpt", 1, "-Dsentencepiece=enabled");
#endif
    const char *e2[] = {"tokenizer.kind", "sentencepiece", "tokenizer.model", "/////w="};
    make_ckpt("h2.ckpt", NULL, 2, e2);
    expect_exit("translate --checkpoint h2.ckpt", 1, "base64 of 7 characters");
    /* usage */
    make_ckpt("b.ckpt", NULL, 0, NULL);
    expect_exit("translate", 2, "--checkpoint");
    expect_exit("translate --checkpoint b.ckpt --out x.txt", 2, "--out needs --eval");
    expect_exit("translate --checkpoint b.ckpt --eval a.tsv b.txt", 2, "no input FILE too");
    expect_exit("translate --checkpoint b.ckpt --beam 0", 2, "--beam");
    expect_exit("translate --checkpoint b.ckpt a.txt b.txt", 2, NULL);
    expect_exit("translate --checkpoint b.ckpt nonexistent.txt", 1, "nonexistent.txt");
}
END_TEST

/* ---- model.seq_len: one bound for every reader; decoding memory follows the input ----------- */
/* Run `tgrad ARGS` in dir (output in out.txt, err.txt) under a 4 GB address-space limit:
 * ulimit -v, or under ASan (which reserves terabytes of address space, so no ulimit -v) its
 * own limit of 4 GB resident memory (hard_rss_limit_mb: beyond it the process dies). */
static int run_limited(const char *args, double *secs)
{
    char cmd[2048];
#ifdef __SANITIZE_ADDRESS__
    snprintf(cmd, sizeof cmd, "(ASAN_OPTIONS=\"${ASAN_OPTIONS:+$ASAN_OPTIONS:}"
             "hard_rss_limit_mb=4000\" exec '%s' %s) >out.txt 2>err.txt </dev/null",
             TG_TGRAD_EXE, args);
#else
    snprintf(cmd, sizeof cmd, "(ulimit -v 4000000; exec '%s' %s) >out.txt 2>err.txt </dev/null",
             TG_TGRAD_EXE, args);
#endif
    return tu_run_sh(dir, cmd, 120, secs);
}

/* `tgrad ARGS` under the 4 GB limit exits @p code (1 or 2: refused) with one line holding
 * @p needle (NULL: any). */
static void expect_limited(const char *args, int code, const char *needle)
{
    int rc = run_limited(args, NULL);
    char *err = err_txt();
    ck_assert_msg(rc == code && tu_count_lines(err) == 1 && (!needle || strstr(err, needle)),
                  "tgrad %s: exit %d (expected %d), stderr (expected one line with '%s'): %s",
                  args, rc, code, needle ? needle : "", err);
    free(err);
}

/* A forged model.seq_len (beyond TG_TRANSFORMER_MAX_SEQ_LEN) and a metadata integer with a
 * leading zero are refused by every reader, library and command line, in one line; the
 * commands that read a checkpoint do so under a 4 GB limit (a forged 1048577 used to make
 * translate grow to 23 GB). */
START_TEST(test_seq_len_bound)
{
    ck_assert_int_eq(TG_TRANSFORMER_MAX_SEQ_LEN, 65536);
    tu_write_file(dir, "p.tsv", "I am thirsty.\tIch habe Durst.\nThe cat.\tDie Katze.\n");
    static const struct {
        const char *key, *value, *lib; /* lib: the library's message */
    } rows[] = {
        {"model.seq_len", "1048577", "'model.seq_len' is '1048577' (expected an integer from 1 "
                                     "to 65536)"},
        {"model.seq_len", "65537", "'model.seq_len' is '65537'"},
        {"model.seq_len", "024", "'model.seq_len' is '024'"},
        {"model.layers", "01", "'model.layers' is '01'"},
        {"model.vocab_size", "0260", "'model.vocab_size' is '0260'"},
    };
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
        const char *e[] = {rows[i].key, rows[i].value};
        const char *p = make_ckpt("f.ckpt", NULL, 1, e);
        expect_refused(p, TG_ERR_FORMAT, rows[i].lib);
        tg_ctx *ctx = tg_ctx_new();
        tg_safetensors *st = tg_safetensors_read(ctx, p);
        ck_assert_msg(st != NULL, "%s", tg_ctx_message(ctx));
        tg_transformer_config c;
        ck_assert_int_eq(tg_transformer_meta_read(ctx, st, "f.ckpt", &c, NULL), TG_ERR_FORMAT);
        ck_assert_msg(strstr(tg_ctx_message(ctx), rows[i].lib), "%s", tg_ctx_message(ctx));
        tg_ctx_free(ctx);
        /* the commands that read checkpoints: the field named, in one line */
        expect_limited("translate --checkpoint f.ckpt", 1, rows[i].key);
        expect_limited("info f.ckpt", 1, rows[i].key);
        expect_limited("export --checkpoint f.ckpt --out x.safetensors", 1, rows[i].key);
        int rc = run_limited("train --pairs p.tsv --resume f.ckpt --steps 1 --quiet", NULL);
        char *err = err_txt();
        ck_assert_msg((rc == 1 || rc == 2) && tu_count_lines(err) == 1 &&
                      strstr(err, rows[i].key), "train --resume: exit %d: %s", rc, err);
        free(err);
        /* sample is for the byte-level models: it refuses a translation checkpoint in one
         * line, whatever it says about it */
        rc = run_limited("sample --checkpoint f.ckpt", NULL);
        err = err_txt();
        ck_assert_msg((rc == 1 || rc == 2) && tu_count_lines(err) == 1, "sample: exit %d: %s",
                      rc, err);
        free(err);
    }
    /* the largest legal length loads */
    const char *e[] = {"model.seq_len", "65536"};
    tg_ctx *ctx = tg_ctx_new();
    tg_model *m = tg_model_load(ctx, make_ckpt("l.ckpt", NULL, 1, e));
    ck_assert_msg(m != NULL, "%s", tg_ctx_message(ctx));
    ck_assert_int_eq(tg_model_get_info(m)->config.max_seq_len, 65536);
    /* tg_transformer_init refuses beyond the bound too */
    tg_transformer_config c = tg_model_get_info(m)->config;
    c.max_seq_len = TG_TRANSFORMER_MAX_SEQ_LEN + 1;
    tg_transformer tf;
    ck_assert_int_eq(tg_transformer_init(ctx, &tf, TG_F32, &c), TG_ERR_ARG);
    tu_assert_error(ctx, TG_ERR_ARG, "max_seq_len 65537 is more than 65536");
    tg_ctx_clear_error(ctx); /* a build error sticks */
    tg_ctx_free(ctx);
}
END_TEST

/* tg_meta_parse_int: the one rule for metadata integers. */
START_TEST(test_meta_parse_int)
{
    static const struct {
        const char *s;
        int64_t lo, hi;
        bool ok;
        int64_t want;
    } rows[] = {
        {"0", 0, 5, true, 0}, {"12", 0, 12, true, 12}, {"13", 0, 12, false, 0},
        {"012", 0, 100, false, 0}, {"00", 0, 100, false, 0}, {"-0", 0, 100, false, 0},
        {"+1", 0, 100, false, 0}, {" 1", 0, 100, false, 0}, {"1 ", 0, 100, false, 0},
        {"", 0, 100, false, 0}, {"0x10", 0, 100, false, 0}, {"5", 0, 0, false, 0},
        {"9", 0, 8, false, 0}, {"1", 2, 100, false, 0},
        {"9223372036854775807", 0, INT64_MAX, true, INT64_MAX},
        {"9223372036854775808", 0, INT64_MAX, false, 0},
        {"99999999999999999999", 0, INT64_MAX, false, 0},
    };
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
        int64_t v = -7;
        bool ok = tg_meta_parse_int(rows[i].s, rows[i].lo, rows[i].hi, &v);
        ck_assert_msg(ok == rows[i].ok, "'%s' in [%lld, %lld]", rows[i].s,
                      (long long)rows[i].lo, (long long)rows[i].hi);
        ck_assert(ok ? v == rows[i].want : v == -7);
    }
    int64_t v;
    ck_assert(!tg_meta_parse_int(NULL, 0, 1, &v));
}
END_TEST

/* A model of a large legal max length (65536) translating short sentences allocates for the
 * lengths it uses (the source and the output bound, not max_seq_len), so it runs in a few MB
 * (before: caches of 128 rows x 65536 positions, ~9 GB at d_model 64, beyond the 4 GB limit)
 * and translates exactly as the same weights with max length 24. */
START_TEST(test_seq_len_memory)
{
    ckpt_width = 64;
    make_ckpt("s24.ckpt", NULL, 0, NULL);
    const char *e[] = {"model.seq_len", "65536"};
    const char *big = make_ckpt("s64k.ckpt", NULL, 1, e);
    char small[512];
    tu_path(small, sizeof small, dir, "s24.ckpt");
    ckpt_width = 16;
    /* the library: a translator for sources of up to 16 tokens */
    tg_ctx *ctx = tg_ctx_new();
    tg_model *m = tg_model_load(ctx, big), *m24 = tg_model_load(ctx, small);
    ck_assert_msg(m && m24, "%s", tg_ctx_message(ctx));
    tg_search_opts o = tg_search_defaults();
    o.beam = 2;
    o.max_len_a = 0;
    o.max_len_b = 12;
    o.max_src_len = 16;
    ck_assert_int_eq(tg_translator_length(tg_model_transformer(m), &o), 16);
    o.max_len_b = 40;
    ck_assert_int_eq(tg_translator_length(tg_model_transformer(m), &o), 40);
    ck_assert_int_eq(tg_translator_length(tg_model_transformer(m24), &o), 23);
    o.max_len_a = 1.5;
    o.max_len_b = 10;
    ck_assert_int_eq(tg_translator_length(tg_model_transformer(m), &o), 34);
    o.max_src_len = 0; /* max_seq_len */
    ck_assert_int_eq(tg_translator_length(tg_model_transformer(m), &o), 65536);
    o.max_src_len = 65537;
    ck_assert_int_eq(tg_translator_length(tg_model_transformer(m), &o), 0);
    ck_assert_ptr_null(tg_translator_new(ctx, tg_model_transformer(m), 4, &o));
    tu_assert_error(ctx, TG_ERR_ARG, "max_src_len must be in [1, max_seq_len]");
    tg_ctx_clear_error(ctx); /* a build error sticks */
    o.max_src_len = 16;
    o.max_len_a = 0;
    o.max_len_b = 12;
    size_t before = tg_ctx_bytes(ctx);
    tg_translator *tr = tg_translator_new(ctx, tg_model_transformer(m), 4, &o);
    ck_assert_msg(tr != NULL, "%s", tg_ctx_message(ctx));
    ck_assert_msg(tg_ctx_bytes(ctx) - before < ((size_t)16 << 20), "%zu bytes",
                  tg_ctx_bytes(ctx) - before);
    tg_translator *tr24 = tg_translator_new(ctx, tg_model_transformer(m24), 4, &o);
    ck_assert_msg(tr24 != NULL, "%s", tg_ctx_message(ctx));
    const int32_t s0[] = {60, 70, 80, 2}, s1[16] = {90, 91, 92, 93, 94, 95, 96, 97, 98, 99,
                                                    100, 101, 102, 103, 104, 2};
    const int32_t *src[2] = {s0, s1};
    int64_t len[2] = {4, 16};
    tg_translation a[2], b[2];
    ck_assert_int_eq(tg_translate_batch(tr, 2, src, len, a), TG_OK);
    ck_assert_int_eq(tg_translate_batch(tr24, 2, src, len, b), TG_OK);
    for (int i = 0; i < 2; i++) {
        ck_assert_int_eq(a[i].len, b[i].len);
        ck_assert(memcmp(a[i].ids, b[i].ids, sizeof(int32_t) * (size_t)a[i].len) == 0);
        ck_assert(a[i].score == b[i].score);
    }
    len[1] = 17; /* longer than the translator takes */
    const int32_t s2[17] = {90, 91, 92, 93, 94, 95, 96, 97, 98, 99, 100, 101, 102, 103, 104,
                            105, 2};
    src[1] = s2;
    ck_assert_int_eq(tg_translate_batch(tr, 2, src, len, a), TG_ERR_ARG);
    tu_assert_error(ctx, TG_ERR_ARG, "length <= 16, the translator's max_src_len");
    /* a generator for fewer positions than max_seq_len; the bounds named */
    tg_generator *g = tg_generator_new_len(ctx, tg_model_transformer(m), 2, 40);
    ck_assert_msg(g != NULL, "%s", tg_ctx_message(ctx));
    int32_t ids[2 * 41] = {0};
    ck_assert_int_eq(tg_generator_set_source(g, ids, 41), TG_ERR_ARG);
    tu_assert_error(ctx, TG_ERR_ARG, "need 1 <= s <= the generator's max_len 40");
    ck_assert_ptr_null(tg_generator_new_len(ctx, tg_model_transformer(m), 2, 0));
    tu_assert_error(ctx, TG_ERR_ARG, "max_len 0 is not in [1, max_seq_len 65536]");
    tg_ctx_clear_error(ctx); /* a build error sticks */
    ck_assert_ptr_null(tg_generator_new_len(ctx, tg_model_transformer(m), 2, 65537));
    tu_assert_error(ctx, TG_ERR_ARG, "max_len 65537 is not in [1, max_seq_len 65536]");
    tg_ctx_clear_error(ctx); /* a build error sticks */
    ck_assert_ptr_null(tg_model_generator(m, (int64_t)1 << 62));
    tu_assert_error(ctx, TG_ERR_ARG, "batch 4611686018427387904 is not in [1, ");
    tg_ctx_clear_error(ctx); /* a build error sticks */
    tg_ctx_free(ctx);
    /* the command line, under the 4 GB limit: the same translations, in well under the time
     * 65536 positions took (38 s for one line) */
    tu_write_file(dir, "in.txt", "the cat\n\nI am thirsty.\n");
    static const char *const opts[] = {"--beam 2", "--beam 1", "--beam 3 --batch 1"};
    for (int k = 0; k < 3; k++) {
        char args[256];
        snprintf(args, sizeof args, "translate --checkpoint s24.ckpt --max-len-a 0 "
                 "--max-len-b 12 %s in.txt", opts[k]);
        expect_exit(args, 0, NULL);
        char *want = out_txt();
        snprintf(args, sizeof args, "translate --checkpoint s64k.ckpt --max-len-a 0 "
                 "--max-len-b 12 %s in.txt", opts[k]);
        double secs = 0;
        int rc = run_limited(args, &secs);
        char *err = err_txt(), *got = out_txt();
        ck_assert_msg(rc == 0, "tgrad %s: exit %d: %s", args, rc, err);
        ck_assert_str_eq(got, want);
        ck_assert_msg(secs < 20, "took %.1f s", secs);
        free(err);
        free(got);
        free(want);
    }
#ifndef __SANITIZE_ADDRESS__ /* (a limit only ulimit -v sets: the machine may have more) */
    /* sources so long that their translator would not fit (16 sentences x 5 beams of 60001
     * tokens and outputs of 65535: caches alone 5 GB): refused before it is made, in one line */
    char *text = malloc(16 * 60001 + 1);
    for (int i = 0; i < 16; i++) {
        memset(text + i * 60001, 'a', 60000);
        text[i * 60001 + 60000] = '\n';
    }
    text[16 * 60001] = 0;
    tu_write_file(dir, "long.txt", text);
    free(text);
    expect_limited("translate --checkpoint s64k.ckpt long.txt", 1, "more than the");
    char *err = err_txt();
    ck_assert_msg(strstr(err, "sources of up to 60001 tokens (outputs of up to 65535) in groups "
                          "of 16 sentences x 5 beams") && strstr(err, "ulimit -v"), "%s", err);
    free(err);
#endif
}
END_TEST

/* tgrad info accepts and summarizes translation checkpoints, and refuses broken ones. */
START_TEST(test_info)
{
    make_ckpt("b.ckpt", NULL, 0, NULL);
    expect_exit("info b.ckpt", 0, NULL);
    char *o = out_txt();
    ck_assert_msg(strstr(o, "translation model: 1+1 layers, d_model 16, tokenizer bytes, "
                            "vocabulary 260, max length 24 tokens, step 0"), "%s", o);
    ck_assert(strstr(o, "tokenizer.kind"));
    free(o);
    const char *e[] = {"model.vocab_size", "259"};
    make_ckpt("h.ckpt", NULL, 1, e);
    expect_exit("info h.ckpt", 1, "not a valid translation checkpoint (train --resume, translate "
                                "and export refuse it)");
}
END_TEST

#ifdef TG_HAVE_SPM
START_TEST(test_translate_spm)
{
    tg_ctx *tctx = tg_ctx_new();
    tg_tokenizer *tok = tiny_spm(tctx);
    make_ckpt("s.ckpt", tok, 0, NULL);
    tg_tokenizer_free(tok);
    tg_ctx_free(tctx);
    tu_write_file(dir, "in.txt", "I am thirsty.\n\nThe cat sleeps.\n");
    expect_exit("translate --checkpoint s.ckpt --beam 3 in.txt", 0, NULL);
    char *o = out_txt();
    ck_assert_int_eq(tu_count_lines(o), 3);
    free(o);
    expect_exit("translate --checkpoint s.ckpt --beam 1 in.txt", 0, NULL);
    o = out_txt();
    ck_assert_int_eq(tu_count_lines(o), 3);
    free(o);
    /* --beam is bounded by the vocabulary (60 pieces, pad excluded: 2 K candidates among 59)
     * up front, as a usage error; the largest it allows works */
    expect_exit("translate --checkpoint s.ckpt --beam 64 in.txt", 2,
                "--beam 64: the model's vocabulary of 60 pieces allows at most --beam 29");
    expect_exit("translate --checkpoint s.ckpt --beam 30 in.txt", 2, "at most --beam 29");
    expect_exit("translate --checkpoint s.ckpt --beam 29 --max-len-b 3 in.txt", 0, NULL);
    expect_exit("info s.ckpt", 0, NULL);
    o = out_txt();
    ck_assert_msg(strstr(o, "tokenizer sentencepiece ("), "%s", o);
    free(o);
}
END_TEST
#endif

int main(void)
{
    Suite *s = suite_create("translate");
    TCase *tc = tcase_create("translate");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_load_bytes);
    tcase_add_test(tc, test_load_hostile);
    tcase_add_test(tc, test_stream_lines);
    tcase_add_test(tc, test_blank_lines);
    tcase_add_test(tc, test_stream_interactive);
    tcase_add_test(tc, test_eval);
    tcase_add_test(tc, test_hostile_input);
    tcase_add_test(tc, test_wrong_checkpoints);
    tcase_add_test(tc, test_info);
    tcase_add_test(tc, test_meta_parse_int);
    tcase_add_test(tc, test_seq_len_bound);
    tcase_add_test(tc, test_seq_len_memory);
#ifdef TG_HAVE_SPM
    tcase_add_test(tc, test_load_spm);
    tcase_add_test(tc, test_translate_spm);
#endif
    suite_add_tcase(s, tc);
    return tu_run(s);
}
