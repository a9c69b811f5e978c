#define _POSIX_C_SOURCE 200809L
/*
 * test_ckpt_verdict.c - one validation for every command that reads a checkpoint.
 * - A table of checkpoints of every kind (a text LM in f32, a task encoder in f64, a seq2seq
 *   task trained with bf16 products, translation models with UTF-8 bytes and with
 *   SentencePiece), each valid and mutated (model.seq_len 1, data.epoch -1, data.batch
 *   999999999, NaN / inf / -inf Adam moments, negative second moments; for SentencePiece a
 *   truncated, a bit-flipped, an over-2^20-piece and a NaN-score model in tokenizer.model), times every
 *   command that reads that kind (info, export, sample or translate, train --resume): every
 *   command gives the same verdict (all accept, or all refuse with one line and exit status 1).
 * - Tokenizer options that contradict a resumed translation checkpoint (--tokenizer,
 *   --vocab-size, --spm-type, --spm) are usage errors (exit 2) naming the option and the
 *   checkpoint's value; the same options agreeing with it are accepted.
 * - train --pairs --dot writes the DOT file (and --dry-run too).
 * - train --resume of the wrong kind of checkpoint (text, task, seq2seq task, translation
 *   resumed as another) names the checkpoint's kind and what resumes it.
 */
#include "testutil.h"
#include "tgrad_data.h"
#include "tgrad_io.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static char dir[256];
static bool have_spm; /* this tgrad trains SentencePiece models */

static int run(const char *args) { return tu_run_tgrad(dir, args, 120, NULL); }

/* ---- the checkpoints ------------------------------------------------------------------------- */
#define SMALL "--d-model 16 --heads 2 --d-ff 32 --layers 1 --threads 1 --quiet"
#define PAIRS "--pairs train.tsv --valid valid.tsv"
#define PSMALL SMALL " --seq-len 40 --batch-tokens 200"

typedef struct kind {
    const char *name;
    const char *train;  /* writes NAME.ckpt (with " --checkpoint NAME.ckpt") */
    const char *reader; /* sample / translate of %s, or NULL */
    const char *resume; /* train --resume %s */
    bool pairs, spm;
} kind;

static const kind kinds[] = {
    {"text", "train --text corpus.txt " SMALL " --seq-len 16 --batch 4 --steps 2",
     "sample --checkpoint %s --tokens 2", "train --text corpus.txt --resume %s --steps 3 --quiet",
     false, false},
    {"task", "train --task reverse " SMALL " --seq-len 8 --batch 4 --steps 2 --dtype f64 "
     "--target-acc 0", NULL, "train --resume %s --steps 3 --target-acc 0 --quiet", false,
     false},
    {"s2s", "train --task reverse --arch seq2seq --decoder-layers 1 " SMALL " --seq-len 8 "
     "--batch 4 --steps 2 --precision bf16 --target-acc 0", "sample --checkpoint %s --source "
     "12345678", "train --resume %s --steps 3 --target-acc 0 --quiet", false, false},
    {"bytes", "train " PAIRS " --tokenizer bytes " PSMALL " --steps 4 --eval-every 4",
     "translate --checkpoint %s in.txt", "train " PAIRS " --resume %s --steps 5 --quiet", true,
     false},
    {"spm", "train " PAIRS " --tokenizer sentencepiece --vocab-size 40 " PSMALL " --steps 4 "
     "--eval-every 4", "translate --checkpoint %s in.txt", "train " PAIRS " --resume %s "
     "--steps 5 --quiet", true, true},
};
#define N_KINDS (sizeof kinds / sizeof kinds[0])

/* n pairs of a toy translation: English number words -> German. */
static void write_pairs(const char *name, int n, int offset)
{
    tu_write_pairs(dir, name, n, offset);
}

static void expect_rc(const char *args, int want)
{
    int rc = run(args);
    char *err = tu_slurp_in(dir, "err.txt", NULL);
    ck_assert_msg(rc == want, "tgrad %s: exit %d (want %d): %s", args, rc, want, err ? err : "");
    free(err);
}

/* Once per test case (in the parent): the data and a checkpoint of every kind. */
static void make_all(void)
{
    tu_mkdtemp(dir, sizeof dir, "ckpt_verdict");
    tu_write_corpus(dir, "corpus.txt", 2000);
    write_pairs("train.tsv", 60, 0);
    write_pairs("valid.tsv", 10, 3);
    tu_write_file(dir, "in.txt", "one two three.\n");
    /* SentencePiece: only when this tgrad was built with it */
    int rc = run("train " PAIRS " --tokenizer sentencepiece --vocab-size 40 " PSMALL
                 " --dry-run");
    char *err = tu_slurp_in(dir, "err.txt", NULL);
    have_spm = !(rc == 2 && err && strstr(err, "built without"));
    free(err);
    if (!have_spm)
        fprintf(stderr, "test_ckpt_verdict: this tgrad has no SentencePiece: its translation "
                        "checkpoints are not tested\n");
    for (size_t k = 0; k < N_KINDS; k++) {
        if (kinds[k].spm && !have_spm)
            continue;
        char args[512];
        snprintf(args, sizeof args, "%s --checkpoint %s.ckpt", kinds[k].train, kinds[k].name);
        expect_rc(args, 0);
    }
}

static void remove_all(void) { tu_rm_tree(dir); }

/* ---- mutations of tokenizer.model --------------------------------------------------------------- */
typedef struct bytes {
    unsigned char *p;
    size_t n;
} bytes;

static char *base64(const bytes *b)
{
    static const char al[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    char *o = malloc(4 * ((b->n + 2) / 3) + 1), *w = o;
    ck_assert_ptr_nonnull(o);
    for (size_t i = 0; i < b->n; i += 3) {
        unsigned v = (unsigned)b->p[i] << 16 | (i + 1 < b->n ? (unsigned)b->p[i + 1] << 8 : 0) |
                     (i + 2 < b->n ? b->p[i + 2] : 0);
        *w++ = al[v >> 18 & 63];
        *w++ = al[v >> 12 & 63];
        *w++ = i + 1 < b->n ? al[v >> 6 & 63] : '=';
        *w++ = i + 2 < b->n ? al[v & 63] : '=';
    }
    *w = 0;
    return o;
}

static uint64_t varint(const unsigned char *p, size_t *i)
{
    uint64_t v = 0;
    for (int s = 0; s < 64; s += 7) {
        unsigned char c = p[(*i)++];
        v |= (uint64_t)(c & 0x7f) << s;
        if (c < 0x80)
            break;
    }
    return v;
}

/* The first piece's score (ModelProto.pieces = 1, SentencePiece.score = 2, fixed32) := NaN. */
static void nan_score(bytes *b)
{
    size_t i = 0;
    while (i < b->n) {
        uint64_t tag = varint(b->p, &i);
        ck_assert_int_eq(tag & 7, 2); /* the pieces and specs come first, all length-delimited */
        size_t len = (size_t)varint(b->p, &i), end = i + len;
        if (tag >> 3 == 1) {
            for (size_t j = i; j < end;) {
                uint64_t t2 = varint(b->p, &j);
                if (t2 == 0x15) {
                    float nan = NAN;
                    memcpy(b->p + j, &nan, 4);
                    return;
                }
                if ((t2 & 7) == 2)
                    j += (size_t)varint(b->p, &j);
                else if ((t2 & 7) == 5)
                    j += 4;
                else
                    varint(b->p, &j);
            }
        }
        i = end;
    }
    ck_abort_msg("no piece with a score");
}

enum { SPM_NONE, SPM_TRUNCATED, SPM_FLIPPED, SPM_MANY_PIECES, SPM_NAN_SCORE };

/* @p src's tokenizer.model mutated by @p how, base64 (malloc'd). */
static char *mutated_model(const char *src, int how)
{
    tg_ctx *ctx = tg_ctx_new();
    tg_safetensors *st = tg_safetensors_read(ctx, src);
    const char *tk;
    void *model = NULL;
    size_t size = 0;
    ck_assert_msg(st && tg_tokenizer_meta_read(ctx, st, &tk, &model, &size) == TG_OK, "%s",
                  tg_ctx_message(ctx));
    tg_ctx_free(ctx);
    bytes b = {model, size};
    if (how == SPM_TRUNCATED) {
        b.n /= 2;
    } else if (how == SPM_FLIPPED) {
        b.p[0] ^= 1; /* field 1's tag: wire type 2 -> 3 */
    } else if (how == SPM_MANY_PIECES) {
        static const unsigned char piece[] = {0x0a, 8, 0x0a, 1, 'q', 0x15, 0, 0, 0, 0};
        size_t extra = ((size_t)1 << 20) + 1; /* over TG_SPM_MAX_VOCAB with the model own */
        b.p = realloc(b.p, b.n + extra * sizeof piece);
        ck_assert_ptr_nonnull(b.p);
        for (size_t i = 0; i < extra; i++)
            memcpy(b.p + b.n + i * sizeof piece, piece, sizeof piece);
        b.n += extra * sizeof piece;
    } else if (how == SPM_NAN_SCORE) {
        nan_score(&b);
    }
    char *s = base64(&b);
    free(b.p);
    return s;
}

/* ---- the verdict table ------------------------------------------------------------------------ */
typedef struct mutation {
    const char *name;
    tu_st_edit e;
    int spm;  /* SPM_*: a mutation of tokenizer.model (SentencePiece checkpoints only) */
    int want; /* exit status of every command: 0 accepted, 1 refused */
} mutation;

static const mutation mutations[] = {
    {"valid", {0}, SPM_NONE, 0},
    {"model.seq_len 1", {.key = "model.seq_len", .value = "1"}, SPM_NONE, 1},
    {"data.epoch -1", {.key = "data.epoch", .value = "-1"}, SPM_NONE, 1},
    {"data.batch 999999999", {.key = "data.batch", .value = "999999999"}, SPM_NONE, 1},
    {"adam.m NaN", {.poison = "adam.m.tok_emb.weight"}, SPM_NONE, 1},
    {"adam.m inf", {.fill = "adam.m.tok_emb.weight", .fill_value = INFINITY}, SPM_NONE, 1},
    {"adam.m -inf", {.fill = "adam.m.layers.0.linear1.bias", .fill_value = -INFINITY},
     SPM_NONE, 1},
    {"adam.v NaN", {.poison = "adam.v.tok_emb.weight"}, SPM_NONE, 1},
    {"adam.v negative", {.fill = "adam.v.tok_emb.weight", .fill_value = -1}, SPM_NONE, 1},
    {"tokenizer.model truncated", {0}, SPM_TRUNCATED, 1},
    {"tokenizer.model bit-flipped", {0}, SPM_FLIPPED, 1},
    {"tokenizer.model with over 2^20 pieces", {0}, SPM_MANY_PIECES, 1},
    {"tokenizer.model NaN score", {0}, SPM_NAN_SCORE, 1},
};
#define N_MUTATIONS (sizeof mutations / sizeof mutations[0])

/* The encoder-decoders name their layers encoder.layers.* (the -inf case's tensor). */
static const char *layer_name(const kind *k, const char *name, char *buf, size_t n)
{
    const char *l = strstr(name, "layers.0.");
    if (!l || !(k->pairs || !strcmp(k->name, "s2s")))
        return name;
    snprintf(buf, n, "%.*sencoder.%s", (int)(l - name), name, l);
    return buf;
}

/* Mutation @p m of kind @p k: every command that reads that kind exits m->want, a refusal in
 * one line; each command that does not appends a line to @p bad (cap bytes). */
static void check_row(const kind *k, const mutation *m, char *bad, size_t cap)
{
    char src[512], ck[64], path[512], args[768], buf[160];
    tu_path(src, sizeof src, dir, k->name);
    strcat(src, ".ckpt");
    snprintf(ck, sizeof ck, "m_%s.ckpt", k->name);
    tu_path(path, sizeof path, dir, ck);
    tu_st_edit e = m->e;
    if (e.fill)
        e.fill = layer_name(k, e.fill, buf, sizeof buf);
    char *model = NULL;
    if (m->spm) {
        model = mutated_model(src, m->spm);
        e.key = "tokenizer.model";
        e.value = model;
    }
    tu_st_rewrite(src, path, &e);
    free(model);
    const char *cmds[4] = {"info %s", "export --checkpoint %s --out x.safetensors --force",
                           k->reader, k->resume}; /* resume last: it rewrites the file */
    for (int c = 0; c < 4; c++) {
        if (!cmds[c])
            continue;
        snprintf(args, sizeof args, cmds[c], ck);
        int rc = run(args);
        char *err = tu_slurp_in(dir, "err.txt", NULL);
        bool one_line = err && tu_count_lines(err) == 1;
        if (rc != m->want || (rc && !one_line)) {
            size_t w = strlen(bad);
            snprintf(bad + w, cap - w, "%s checkpoint, %s: tgrad %s: exit %d, want %d%s: "
                     "%.160s\n", k->name, m->name, args, rc, m->want,
                     rc == m->want ? " in one line" : "", err ? err : "");
        }
        free(err);
    }
}

START_TEST(test_one_verdict)
{
    const kind *k = &kinds[_i];
    if (k->spm && !have_spm)
        return;
    char bad[3000] = ""; /* Check carries a few KB of message */
    for (size_t j = 0; j < N_MUTATIONS; j++) {
        if (mutations[j].spm == SPM_MANY_PIECES && tu_under_valgrind())
            continue; /* 14 MB of metadata rewritten under valgrind: too slow (ASan runs it) */
        if (!mutations[j].spm || k->spm)
            check_row(k, &mutations[j], bad, sizeof bad);
    }
    ck_assert_msg(!bad[0], "commands disagree (every one should give the verdict):\n%s", bad);
}
END_TEST

/* ---- tokenizer options against a resumed translation checkpoint ------------------------------- */
static void expect_usage(const char *args, const char *needle1, const char *needle2)
{
    int rc = run(args);
    char *err = tu_slurp_in(dir, "err.txt", NULL);
    ck_assert_msg(rc == 2, "tgrad %s: exit %d (want 2): %s", args, rc, err ? err : "");
    ck_assert_msg(err && tu_count_lines(err) == 1 && strstr(err, needle1) &&
                  (!needle2 || strstr(err, needle2)), "tgrad %s: '%s' lacks '%s' / '%s'", args,
                  err ? err : "", needle1, needle2 ? needle2 : "");
    free(err);
}

START_TEST(test_tokenizer_options)
{
    /* a byte checkpoint: every SentencePiece option contradicts it */
    expect_usage("train " PAIRS " --resume bytes.ckpt --steps 9 --tokenizer sentencepiece",
                 "tokenizer.kind 'bytes' there", "--tokenizer sentencepiece given");
    expect_usage("train " PAIRS " --resume bytes.ckpt --steps 9 --vocab-size 100",
                 "tokenizer.kind 'bytes' there", "--vocab-size 100 given");
    expect_usage("train " PAIRS " --resume bytes.ckpt --steps 9 --spm-type bpe",
                 "tokenizer.kind 'bytes' there", "--spm-type bpe given");
    expect_usage("train " PAIRS " --resume bytes.ckpt --steps 9 --spm /nonexistent.model",
                 "tokenizer.kind 'bytes' there", "--spm '/nonexistent.model' given");
    /* the same tokenizer again is fine */
    tu_st_edit none = {0};
    char src[512], dst[512];
    tu_st_rewrite(tu_path(src, sizeof src, dir, "bytes.ckpt"),
                  tu_path(dst, sizeof dst, dir, "b2.ckpt"), &none);
    expect_rc("train " PAIRS " --resume b2.ckpt --steps 5 --tokenizer bytes --quiet", 0);
    if (!have_spm)
        return;
    /* a SentencePiece checkpoint (unigram, 40 pieces) */
    expect_usage("train " PAIRS " --resume spm.ckpt --steps 9 --tokenizer bytes",
                 "tokenizer.kind 'sentencepiece' there", "--tokenizer bytes given");
    expect_usage("train " PAIRS " --resume spm.ckpt --steps 9 --vocab-size 100",
                 "model.vocab_size 40 there", "--vocab-size 100 given");
    expect_usage("train " PAIRS " --resume spm.ckpt --steps 9 --spm-type bpe",
                 "a SentencePiece unigram model (tokenizer.model) there", "--spm-type bpe given");
    expect_usage("train " PAIRS " --resume spm.ckpt --steps 9 --spm /nonexistent.model",
                 "--spm '/nonexistent.model' cannot be loaded", "leave out --spm");
    /* --spm naming another model: one trained with a different vocabulary size */
    expect_rc("train " PAIRS " --tokenizer sentencepiece --vocab-size 36 " PSMALL " --steps 1 "
              "--eval-every 1 --checkpoint other.ckpt", 0);
    tg_ctx *ctx = tg_ctx_new();
    char p[512];
    tg_safetensors *st = tg_safetensors_read(ctx, tu_path(p, sizeof p, dir, "other.ckpt"));
    const char *tk;
    void *model = NULL;
    size_t size = 0;
    ck_assert(st && tg_tokenizer_meta_read(ctx, st, &tk, &model, &size) == TG_OK);
    FILE *f = fopen(tu_path(p, sizeof p, dir, "other.model"), "wb");
    ck_assert(f && fwrite(model, 1, size, f) == size && fclose(f) == 0);
    free(model);
    tg_ctx_free(ctx);
    expect_usage("train " PAIRS " --resume spm.ckpt --steps 9 --spm other.model",
                 "--spm 'other.model' is another model", "leave out --spm");
    /* the checkpoint's own model, type and size agree */
    tu_st_rewrite(tu_path(src, sizeof src, dir, "spm.ckpt"),
                  tu_path(dst, sizeof dst, dir, "s2.ckpt"), &none);
    ctx = tg_ctx_new();
    st = tg_safetensors_read(ctx, dst);
    ck_assert(st && tg_tokenizer_meta_read(ctx, st, &tk, &model, &size) == TG_OK);
    f = fopen(tu_path(p, sizeof p, dir, "own.model"), "wb");
    ck_assert(f && fwrite(model, 1, size, f) == size && fclose(f) == 0);
    free(model);
    tg_ctx_free(ctx);
    expect_rc("train " PAIRS " --resume s2.ckpt --steps 5 --tokenizer sentencepiece "
              "--vocab-size 40 --spm-type unigram --quiet", 0);
    expect_rc("train " PAIRS " --resume s2.ckpt --steps 6 --spm own.model --quiet", 0);
}
END_TEST

/* ---- train --pairs --dot ------------------------------------------------------------------------ */
/* dir/@p name is a DOT graph of the translation model (its embedding a parameter). */
static void expect_dot(const char *name)
{
    char *g = tu_slurp_in(dir, name, NULL);
    ck_assert_msg(g != NULL, "no %s written", name);
    ck_assert_msg(strstr(g, "digraph tgrad {") && strstr(g, "tok_emb.weight") &&
                  strstr(g, "tgt_ids"), "%s: %.200s", name, g);
    free(g);
}

START_TEST(test_pairs_dot)
{
    expect_rc("train " PAIRS " --tokenizer bytes " PSMALL " --steps 1 --eval-every 1 "
              "--dot g.dot", 0);
    expect_dot("g.dot");
    expect_rc("train " PAIRS " --tokenizer bytes " PSMALL " --dry-run --dot d.dot", 0);
    expect_dot("d.dot");
    /* a resumed run too */
    tu_st_edit none = {0};
    char src[512], dst[512];
    tu_st_rewrite(tu_path(src, sizeof src, dir, "bytes.ckpt"),
                  tu_path(dst, sizeof dst, dir, "b3.ckpt"), &none);
    expect_rc("train " PAIRS " --resume b3.ckpt --steps 5 --quiet --dot r.dot", 0);
    expect_dot("r.dot");
}
END_TEST

/* ---- resuming the wrong kind ---------------------------------------------------------------------- */
START_TEST(test_wrong_kind)
{
    static const struct {
        const char *ck, *args, *kind, *pass;
    } cases[] = {
        {"text", "--task copy", "from a --text run", "pass the same --text files"},
        {"text", PAIRS, "from a --text run", "not --pairs"},
        {"task", "--text corpus.txt", "from a built-in task run (data.mode task, model.arch "
         "encoder)", "not --text"},
        {"task", PAIRS, "from a built-in task run", "pass neither --text nor --pairs"},
        {"s2s", "--text corpus.txt", "model.arch seq2seq", "not --text"},
        {"s2s", PAIRS, "model.arch seq2seq", "not --pairs"},
        {"bytes", "--text corpus.txt", "from a translation run (data.mode pairs",
         "pass its --pairs and --valid files again, not --text"},
        {"bytes", "--task copy", "from a translation run", "(neither was given)"},
        {"bytes", "", "from a translation run", "(neither was given)"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char args[512];
        snprintf(args, sizeof args, "train %s --resume %s.ckpt --steps 9", cases[i].args,
                 cases[i].ck);
        expect_usage(args, cases[i].kind, cases[i].pass);
    }
}
END_TEST

int main(void)
{
    Suite *s = suite_create("ckpt_verdict");
    TCase *tc = tu_tcase(s, "verdict", 600);
    tcase_add_unchecked_fixture(tc, make_all, remove_all);
    tcase_add_loop_test(tc, test_one_verdict, 0, (int)N_KINDS);
    tcase_add_test(tc, test_tokenizer_options);
    tcase_add_test(tc, test_pairs_dot);
    tcase_add_test(tc, test_wrong_kind);
    return tu_run(s);
}
