/*
 * test_spm.c - tgrad_spm.h: SentencePiece training (deterministic, tgrad's special ids),
 * encoding and decoding through tg_tokenizer, loading bytes and files, and the validation of
 * hostile model bytes. Built only with the meson feature `sentencepiece`.
 */
#define _POSIX_C_SOURCE 200809L /* strdup, mkstemp, popen */
#include "testutil.h"
#include "tgrad_spm.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* A small deterministic corpus: German and English sentences from word lists (umlauts and
 * ß included), 600 lines. */
static const char *de_words[] = {"Grüße", "aus", "Köln", "schöne", "Äpfel", "über", "die",
                                 "Straße", "der", "Bär", "läuft", "schnell", "und", "müde",
                                 "Öl", "ist", "heiß", "wir", "gehen", "nach", "Hause", "heute",
                                 "Mädchen", "Fußball", "spielt", "gern", "im", "Garten"};
static const char *en_words[] = {"greetings", "from", "cologne", "nice", "apples", "over",
                                 "the", "street", "bear", "runs", "fast", "and", "tired",
                                 "oil", "is", "hot", "we", "go", "home", "today", "girl",
                                 "plays", "football", "gladly", "in", "garden"};
#define N_SENT 600

typedef struct corpus {
    char *lines[N_SENT];
} corpus;

static void corpus_make(corpus *c)
{
    uint64_t s = 12345;
    for (int i = 0; i < N_SENT; i++) {
        char buf[256] = "";
        size_t len = 0;
        int de = i % 2 == 0;
        int words = 4 + (int)(s % 6);
        for (int w = 0; w < words; w++) {
            s = s * 6364136223846793005ULL + 1442695040888963407ULL;
            const char *word = de ? de_words[(s >> 33) % (sizeof de_words / sizeof *de_words)]
                                  : en_words[(s >> 33) % (sizeof en_words / sizeof *en_words)];
            len += (size_t)snprintf(buf + len, sizeof buf - len, "%s%s", w ? " " : "", word);
        }
        snprintf(buf + len, sizeof buf - len, "%s", i % 3 ? "." : "?");
        c->lines[i] = strdup(buf);
    }
}

static void corpus_free(corpus *c)
{
    for (int i = 0; i < N_SENT; i++)
        free(c->lines[i]);
}

static tg_tokenizer *train(tg_ctx *ctx, tg_spm_type type, int64_t vocab)
{
    corpus c;
    corpus_make(&c);
    tg_spm_train_opts o = tg_spm_train_defaults();
    o.type = type;
    o.vocab_size = vocab;
    tg_tokenizer *t = tg_spm_train_strings(ctx, &o, (const char *const *)c.lines, NULL, N_SENT);
    corpus_free(&c);
    return t;
}

static void round_trip(tg_tokenizer *t, const char *s)
{
    int32_t ids[256];
    int64_t n = tg_tokenizer_encode(t, s, strlen(s), ids, 256);
    ck_assert_msg(n > 0 && n <= 256, "encode '%s' gave %lld", s, (long long)n);
    char out[512];
    int64_t m = tg_tokenizer_decode(t, ids, n, out, sizeof out);
    ck_assert_int_eq(m, (int64_t)strlen(s));
    ck_assert_str_eq(out, s);
    for (int64_t i = 0; i < n; i++)
        ck_assert(ids[i] >= 4 && ids[i] < tg_tokenizer_vocab_size(t));
}

START_TEST(test_train_round_trip)
{
    tg_ctx *ctx = tu_ctx_new();
    for (int type = 0; type < 2; type++) {
        tg_tokenizer *t = train(ctx, (tg_spm_type)type, 80);
        ck_assert_msg(t != NULL, "%s", tg_ctx_message(ctx));
        ck_assert_str_eq(tg_tokenizer_kind(t), "sentencepiece");
        ck_assert_int_eq(tg_tokenizer_vocab_size(t), 80);
        tg_token_ids sp = tg_tokenizer_special(t);
        ck_assert_int_eq(sp.unk, TG_TOKEN_UNK);
        ck_assert_int_eq(sp.bos, TG_TOKEN_BOS);
        ck_assert_int_eq(sp.eos, TG_TOKEN_EOS);
        ck_assert_int_eq(sp.pad, TG_TOKEN_PAD);
        round_trip(t, "Grüße aus Köln.");
        round_trip(t, "Schöne Äpfel über die Straße?");
        round_trip(t, "the girl plays football in the garden.");
        round_trip(t, "Mädchen und Öl ist heiß.");
        /* a character never seen: unk, which decoding drops */
        int32_t ids[16];
        int64_t n = tg_tokenizer_encode(t, "Z", 1, ids, 16);
        ck_assert_int_ge(n, 1);
        int unk = 0;
        for (int64_t i = 0; i < n; i++)
            unk += ids[i] == TG_TOKEN_UNK;
        ck_assert_int_eq(unk, 1);
        /* the count needed comes back with a short buffer */
        const char *s = "Grüße aus Köln schöne Äpfel über die Straße?";
        int64_t all = tg_tokenizer_encode(t, s, strlen(s), NULL, 0);
        ck_assert_int_gt(all, 2);
        ck_assert_int_eq(tg_tokenizer_encode(t, s, strlen(s), ids, 2), all);
        tg_tokenizer_free(t);
    }
    tu_ctx_free(ctx);
}
END_TEST

START_TEST(test_train_deterministic)
{
    tg_ctx *ctx = tu_ctx_new();
    for (int type = 0; type < 2; type++) {
        tg_tokenizer *a = train(ctx, (tg_spm_type)type, 70);
        tg_tokenizer *b = train(ctx, (tg_spm_type)type, 70);
        ck_assert_ptr_nonnull(a);
        ck_assert_ptr_nonnull(b);
        size_t na, nb;
        const void *ma = tg_tokenizer_model(a, &na), *mb = tg_tokenizer_model(b, &nb);
        ck_assert_uint_gt(na, 70);
        ck_assert_uint_eq(na, nb);
        ck_assert_int_eq(memcmp(ma, mb, na), 0);
        tg_tokenizer_free(a);
        tg_tokenizer_free(b);
    }
    tu_ctx_free(ctx);
}
END_TEST

/* The bytes load again (memory and file) and give the same ids; Python's sentencepiece (if
 * installed) reads the same file and gives the same ids too. */
/* tg_spm_model_type: the type a model was trained as; validated bytes only. */
START_TEST(test_model_type)
{
    tg_ctx *ctx = tu_ctx_new();
    static const tg_spm_type types[2] = {TG_SPM_UNIGRAM, TG_SPM_BPE};
    for (int i = 0; i < 2; i++) {
        tg_tokenizer *t = train(ctx, types[i], 80);
        ck_assert_ptr_nonnull(t);
        size_t n;
        const void *m = tg_tokenizer_model(t, &n);
        tg_spm_type got = types[1 - i];
        ck_assert_int_eq(tg_spm_model_type(ctx, m, n, &got), TG_OK);
        ck_assert_int_eq(got, types[i]);
        ck_assert_int_eq(tg_spm_model_type(ctx, m, n, NULL), TG_ERR_ARG);
        ck_assert_int_ne(tg_spm_model_type(ctx, m, n / 2, &got), TG_OK); /* truncated */
        tu_assert_error(ctx, TG_ERR_FORMAT, "tg_spm_model_type");
        tg_tokenizer_free(t);
    }
    tu_ctx_free(ctx);
}
END_TEST

START_TEST(test_load_again)
{
    tg_ctx *ctx = tu_ctx_new();
    tg_tokenizer *t = train(ctx, TG_SPM_UNIGRAM, 80);
    ck_assert_ptr_nonnull(t);
    size_t n;
    const void *m = tg_tokenizer_model(t, &n);
    tg_tokenizer *u = tg_spm_load(ctx, m, n);
    ck_assert_msg(u != NULL, "%s", tg_ctx_message(ctx));
    char path[] = "/tmp/tgrad-spm-XXXXXX";
    int fd = mkstemp(path);
    ck_assert_int_ge(fd, 0);
    close(fd);
    ck_assert_int_eq(tg_spm_save(t, path), TG_OK);
    tg_tokenizer *v = tg_spm_load_file(ctx, path);
    ck_assert_msg(v != NULL, "%s", tg_ctx_message(ctx));
    size_t nv;
    const void *mv = tg_tokenizer_model(v, &nv);
    ck_assert_uint_eq(nv, n);
    ck_assert_int_eq(memcmp(mv, m, n), 0);
    const char *s = "Grüße aus Köln schöne Äpfel über die Straße?";
    int32_t a[64], b[64], c[64];
    int64_t k = tg_tokenizer_encode(t, s, strlen(s), a, 64);
    ck_assert_int_eq(tg_tokenizer_encode(u, s, strlen(s), b, 64), k);
    ck_assert_int_eq(tg_tokenizer_encode(v, s, strlen(s), c, 64), k);
    ck_assert_int_eq(memcmp(a, b, (size_t)k * sizeof *a), 0);
    ck_assert_int_eq(memcmp(a, c, (size_t)k * sizeof *a), 0);
    if (system("/usr/bin/python3 -c 'import sentencepiece' >/dev/null 2>&1") == 0) {
        char cmd[1024], want[1024] = "", got[1024] = "";
        size_t len = 0;
        for (int64_t i = 0; i < k; i++)
            len += (size_t)snprintf(want + len, sizeof want - len, "%s%d", i ? " " : "", a[i]);
        snprintf(cmd, sizeof cmd,
                 "/usr/bin/python3 -c 'import sentencepiece as s; p = "
                 "s.SentencePieceProcessor(model_file=\"%s\"); "
                 "print(p.bos_id(), p.eos_id(), p.pad_id(), p.unk_id(), p.get_piece_size()); "
                 "print(*p.encode(\"%s\"))'",
                 path, s);
        FILE *p = popen(cmd, "r");
        ck_assert_ptr_nonnull(p);
        char line1[256] = "";
        ck_assert_ptr_nonnull(fgets(line1, sizeof line1, p));
        ck_assert_ptr_nonnull(fgets(got, sizeof got, p));
        ck_assert_int_eq(pclose(p), 0);
        got[strcspn(got, "\n")] = 0;
        ck_assert_str_eq(line1, "1 2 3 0 80\n");
        ck_assert_str_eq(got, want);
    }
    unlink(path);
    tg_tokenizer_free(t);
    tg_tokenizer_free(u);
    tg_tokenizer_free(v);
    tu_ctx_free(ctx);
}
END_TEST

static int fail_at_3(void *user, const char **text, size_t *n)
{
    int *i = user;
    if ((*i)++ == 3)
        return -1;
    *text = "hallo welt";
    *n = 10;
    return 1;
}

START_TEST(test_train_errors)
{
    tg_ctx *ctx = tu_ctx_new();
    tg_spm_train_opts o = tg_spm_train_defaults();
    ck_assert_int_eq(o.vocab_size, 8000);
    ck_assert_int_eq(o.type, TG_SPM_UNIGRAM);
    ck_assert(o.character_coverage == 1.0);
    ck_assert_ptr_null(tg_spm_train_strings(ctx, &o, NULL, NULL, 0));
    tu_assert_error(ctx, TG_ERR_ARG, "no sentences");
    const char *empty[] = {"", ""};
    ck_assert_ptr_null(tg_spm_train_strings(ctx, &o, empty, NULL, 2));
    tu_assert_error(ctx, TG_ERR_ARG, "no sentences");
    const char *bad[] = {"gut", "schlecht \xff"};
    ck_assert_ptr_null(tg_spm_train_strings(ctx, &o, bad, NULL, 2));
    tu_assert_error(ctx, TG_ERR_ARG, "sentence 1 is not UTF-8");
    /* only spaces: SentencePiece's trainer would exit the process (a CHECK failure) */
    const char *spaces[] = {" ", "   ", "\t"};
    ck_assert_ptr_null(tg_spm_train_strings(ctx, &o, spaces, NULL, 3));
    tu_assert_error(ctx, TG_ERR_ARG, "letter or digit");
    /* nothing but a character the normalization removes (U+200B zero width space, a
     * format character): passes the check above, and the trainer, in its child process,
     * stops; the caller gets its message */
    const char *zw[] = {"\xe2\x80\x8b", "\xe2\x80\x8b\xe2\x80\x8b"};
    ck_assert_ptr_null(tg_spm_train_strings(ctx, &o, zw, NULL, 2));
    ck_assert_int_eq(tg_ctx_status(ctx), TG_ERR_ARG);
    ck_assert_msg(strstr(tg_ctx_message(ctx), "SentencePiece"), "%s", tg_ctx_message(ctx));
    int i = 0;
    ck_assert_ptr_null(tg_spm_train(ctx, &o, fail_at_3, &i));
    tu_assert_error(ctx, TG_ERR_ARG, "source failed");
    /* more pieces than the data allows */
    const char *few[] = {"ab ab ab", "ba"};
    ck_assert_ptr_null(tg_spm_train_strings(ctx, &o, few, NULL, 2));
    tu_assert_error(ctx, TG_ERR_ARG, "SentencePiece");
    tg_spm_train_opts r = o;
    r.vocab_size = 4;
    ck_assert_ptr_null(tg_spm_train_strings(ctx, &r, few, NULL, 2));
    tu_assert_error(ctx, TG_ERR_ARG, "vocab_size");
    r = o;
    r.character_coverage = 0.5;
    ck_assert_ptr_null(tg_spm_train_strings(ctx, &r, few, NULL, 2));
    tu_assert_error(ctx, TG_ERR_ARG, "character_coverage");
    r = o;
    r.type = (tg_spm_type)7;
    ck_assert_ptr_null(tg_spm_train_strings(ctx, &r, few, NULL, 2));
    tu_assert_error(ctx, TG_ERR_ARG, "type");
    tu_ctx_free(ctx);
}
END_TEST

/* ----- hostile bytes ---------------------------------------------------------------------------- */

static size_t get_varint(const unsigned char *p, size_t *at)
{
    size_t v = 0;
    for (int s = 0;; s += 7) {
        unsigned char b = p[(*at)++];
        v |= (size_t)(b & 0x7F) << s;
        if (!(b & 0x80))
            return v;
    }
}

/* Offset and length of the value of the first top-level length-delimited field @p field. */
static int find_field(const unsigned char *p, size_t n, unsigned field, size_t *off, size_t *len)
{
    size_t at = 0;
    while (at < n) {
        size_t key = get_varint(p, &at);
        ck_assert_uint_eq(key & 7, 2); /* ModelProto's top-level fields are all messages */
        size_t l = get_varint(p, &at);
        if ((key >> 3) == field) {
            *off = at, *len = l;
            return 1;
        }
        at += l;
    }
    return 0;
}

static unsigned char *model_copy(const tg_tokenizer *t, size_t extra, size_t *n)
{
    const void *m = tg_tokenizer_model(t, n);
    unsigned char *c = malloc(*n + extra);
    memcpy(c, m, *n);
    return c;
}

static void refused(tg_ctx *ctx, const void *m, size_t n, tg_status s, const char *needle)
{
    tg_status got = tg_spm_validate(ctx, m, n);
    ck_assert_msg(got == s, "'%s': validate gave %s", needle, tg_status_str(got));
    tu_assert_error(ctx, s, needle);
    ck_assert_ptr_null(tg_spm_load(ctx, m, n));
    tu_assert_error(ctx, s, needle);
}

START_TEST(test_hostile_bytes)
{
    tg_ctx *ctx = tu_ctx_new();
    tg_tokenizer *t = train(ctx, TG_SPM_UNIGRAM, 70);
    ck_assert_ptr_nonnull(t);
    size_t n;
    const unsigned char *m = tg_tokenizer_model(t, &n);
    ck_assert_int_eq(tg_spm_validate(ctx, m, n), TG_OK);
    refused(ctx, m, 0, TG_ERR_FORMAT, "empty");
    /* truncations: a cut inside a field is refused; a cut between fields is a smaller
     * model, which may load (then with fewer pieces) */
    int refused_cuts = 0;
    for (size_t k = 1; k < n; k += 1 + k / 8) {
        tg_tokenizer *cut = tg_spm_load(ctx, m, k);
        if (cut) {
            ck_assert_int_lt(tg_tokenizer_vocab_size(cut), tg_tokenizer_vocab_size(t));
            tg_tokenizer_free(cut);
        } else {
            ck_assert(tg_ctx_status(ctx) == TG_ERR_FORMAT ||
                      tg_ctx_status(ctx) == TG_ERR_UNSUPPORTED);
            refused_cuts++;
        }
    }
    ck_assert_int_gt(refused_cuts, 10);
    unsigned char *c = model_copy(t, 64, &n);
    /* a custom normalization table (a double-array trie SentencePiece follows unchecked) */
    size_t off, len, o2, l2;
    ck_assert(find_field(c, n, 3, &off, &len));
    ck_assert_int_eq(c[off], 0x0a); /* name */
    size_t at = off + 1;
    at += get_varint(c, &at);
    ck_assert_int_eq(c[at], 0x12); /* precompiled_charsmap */
    at++;
    l2 = get_varint(c, &at);
    ck_assert_uint_gt(l2, 1000);
    c[at + 100] ^= 0x55;
    refused(ctx, c, n, TG_ERR_UNSUPPORTED, "normalization table");
    c[at + 100] ^= 0x55;
    ck_assert_int_eq(tg_spm_validate(ctx, c, n), TG_OK);
    /* appended fields (protobuf merges them into the model) */
    static const unsigned char self_test[] = {0x22, 0x00};
    static const unsigned char trainer_again[] = {0x12, 0x02, 0x18, 0x03};
    static const unsigned char nul_piece[] = {0x0a, 0x05, 0x0a, 0x03, 'a', 0, 'b'};
    static const unsigned char nan_piece[] = {0x0a, 0x08, 0x0a, 0x01, 'q', 0x15, 0, 0, 0xc0, 0x7f};
    static const unsigned char bad_type[] = {0x0a, 0x05, 0x0a, 0x01, 'q', 0x18, 0x07};
    static const unsigned char second_unk[] = {0x0a, 0x05, 0x0a, 0x01, 'q', 0x18, 0x02};
    static const unsigned char group[] = {0x0b};
    static const unsigned char long_len[] = {0x0a, 0xff, 0xff, 0xff, 0xff, 0x0f};
    static const unsigned char dup_piece[] = {0x0a, 0x03, 0x0a, 0x01, 'e'};
    struct {
        const unsigned char *b;
        size_t n;
        tg_status s;
        const char *needle;
    } app[] = {
        {self_test, sizeof self_test, TG_ERR_UNSUPPORTED, "self-test"},
        {trainer_again, sizeof trainer_again, TG_ERR_FORMAT, "appears twice"},
        {nul_piece, sizeof nul_piece, TG_ERR_FORMAT, "not UTF-8 without NUL"},
        {nan_piece, sizeof nan_piece, TG_ERR_FORMAT, "not finite"},
        {bad_type, sizeof bad_type, TG_ERR_FORMAT, "has type 7"},
        {second_unk, sizeof second_unk, TG_ERR_FORMAT, "2 unknown pieces"},
        {group, sizeof group, TG_ERR_FORMAT, "wire type 3"},
        {long_len, sizeof long_len, TG_ERR_FORMAT, "past the end"},
        /* well-formed but refused by SentencePiece itself */
        {dup_piece, sizeof dup_piece, TG_ERR_FORMAT, "already defined"},
    };
    for (size_t i = 0; i < sizeof app / sizeof *app; i++) {
        memcpy(c + n, app[i].b, app[i].n);
        if (app[i].b == dup_piece) {
            ck_assert_int_eq(tg_spm_validate(ctx, c, n + app[i].n), TG_OK);
            ck_assert_ptr_null(tg_spm_load(ctx, c, n + app[i].n));
            tu_assert_error(ctx, app[i].s, app[i].needle);
        } else {
            refused(ctx, c, n + app[i].n, app[i].s, app[i].needle);
        }
    }
    /* word and char models are not taken */
    ck_assert(find_field(c, n, 2, &o2, &l2));
    for (at = o2; at < o2 + l2;) {
        size_t key = get_varint(c, &at);
        if (key == 0x18) { /* model_type */
            c[at] = 3;
            refused(ctx, c, n, TG_ERR_UNSUPPORTED, "word");
            c[at] = 1;
            break;
        }
        if ((key & 7) == 0)
            get_varint(c, &at);
        else if ((key & 7) == 2)
            at += get_varint(c, &at);
        else
            at += (key & 7) == 5 ? 4 : 8;
    }
    /* a model without bos: piece 1 ("<s>") made USER_DEFINED (type 4) */
    ck_assert(find_field(c, n, 1, &off, &len));
    at = off + len;
    ck_assert_int_eq(c[at], 0x0a);
    at++;
    size_t plen = get_varint(c, &at);
    ck_assert_int_eq(c[at + plen - 2], 0x18);
    ck_assert_int_eq(c[at + plen - 1], 3);
    c[at + plen - 1] = 4;
    ck_assert_int_eq(tg_spm_validate(ctx, c, n), TG_OK);
    ck_assert_ptr_null(tg_spm_load(ctx, c, n));
    tu_assert_error(ctx, TG_ERR_UNSUPPORTED, "bos");
    free(c);
    /* too large: refused before a byte is read */
    unsigned char *big = calloc(1, TG_SPM_MAX_MODEL_BYTES + 1);
    refused(ctx, big, TG_SPM_MAX_MODEL_BYTES + 1, TG_ERR_HEADER_SIZE, "at most");
    free(big);
    ck_assert_ptr_null(tg_spm_load_file(ctx, "/nonexistent/x.model"));
    tu_assert_error(ctx, TG_ERR_IO, "cannot open '/nonexistent/x.model'");
    tg_tokenizer_free(t);
    tu_ctx_free(ctx);
}
END_TEST

/* Subword regularization's draw (tg_tokenizer_encode_sampled): a function of the key; every
 * draw a segmentation of the text; l = 1 and a large alpha give the best one; alpha = 0 draws
 * the l best uniformly. */
START_TEST(test_sampled_segmentations)
{
    tg_ctx *ctx = tu_ctx_new();
    tg_tokenizer *t = train(ctx, TG_SPM_UNIGRAM, 80);
    ck_assert_ptr_nonnull(t);
    ck_assert(tg_tokenizer_can_sample(t));
    const char *s = "Grüße aus Köln schöne Äpfel über die Straße?";
    size_t n = strlen(s);
    int32_t best[256], ids[256], again[256];
    int64_t nb = tg_tokenizer_encode(t, s, n, best, 256);
    ck_assert_int_gt(nb, 8);
    int64_t k = tg_tokenizer_encode_sampled(t, s, n, 1, 0.5, 7, ids, 256);
    ck_assert(k == nb && !memcmp(ids, best, (size_t)k * sizeof *ids));
    k = tg_tokenizer_encode_sampled(t, s, n, 64, 100, 7, ids, 256);
    ck_assert(k == nb && !memcmp(ids, best, (size_t)k * sizeof *ids));
    /* l = 4, alpha = 0: four segmentations, each drawn about 1/4 of the time */
    int32_t seen[4][256];
    int64_t seen_n[4];
    int count[4] = {0}, distinct = 0, draws = 4000;
    for (uint64_t key = 0; key < (uint64_t)draws; key++) {
        k = tg_tokenizer_encode_sampled(t, s, n, 4, 0, key, ids, 256);
        ck_assert_int_gt(k, 0);
        ck_assert_int_eq(tg_tokenizer_encode_sampled(t, s, n, 4, 0, key, again, 256), k);
        ck_assert(!memcmp(ids, again, (size_t)k * sizeof *ids));
        char out[512];
        ck_assert_int_eq(tg_tokenizer_decode(t, ids, k, out, sizeof out), (int64_t)n);
        ck_assert_str_eq(out, s);
        int j = 0;
        while (j < distinct && !(seen_n[j] == k && !memcmp(seen[j], ids, (size_t)k * 4)))
            j++;
        ck_assert_int_lt(j, 4);
        if (j == distinct) {
            memcpy(seen[j], ids, (size_t)k * sizeof *ids);
            seen_n[distinct++] = k;
        }
        count[j]++;
    }
    ck_assert_int_eq(distinct, 4);
    for (int j = 0; j < 4; j++) /* 1000 expected, sd 27 */
        ck_assert_msg(count[j] > 880 && count[j] < 1120, "segmentation %d drawn %d times", j,
                      count[j]);
    /* a short capacity still reports the whole length */
    k = tg_tokenizer_encode_sampled(t, s, n, 64, 0.1, 3, ids, 2);
    ck_assert_int_gt(k, 2);
    /* errors */
    ck_assert_int_eq(tg_tokenizer_encode_sampled(t, s, n, 0, 0.1, 1, ids, 256), -1);
    tu_assert_error(ctx, TG_ERR_ARG, "l 0");
    ck_assert_int_eq(
        tg_tokenizer_encode_sampled(t, s, n, TG_SAMPLE_MAX_NBEST + 1, 0.1, 1, ids, 256), -1);
    ck_assert_int_eq(tg_tokenizer_encode_sampled(t, s, n, 8, NAN, 1, ids, 256), -1);
    ck_assert_int_eq(tg_tokenizer_encode_sampled(t, s, n, 8, -0.5, 1, ids, 256), -1);
    ck_assert_int_eq(tg_tokenizer_encode_sampled(t, "caf\xe9", 4, 8, 0.1, 1, ids, 256), -1);
    tu_assert_error(ctx, TG_ERR_ARG, "UTF-8");
    tg_tokenizer_free(t);
    /* what cannot sample: a BPE model, the byte tokenizer */
    tg_tokenizer *bpe = train(ctx, TG_SPM_BPE, 80), *bytes = tg_tokenizer_bytes(ctx);
    ck_assert(!tg_tokenizer_can_sample(bpe) && !tg_tokenizer_can_sample(bytes));
    ck_assert_int_eq(tg_tokenizer_encode_sampled(bpe, s, n, 8, 0.1, 1, ids, 256), -1);
    tu_assert_error(ctx, TG_ERR_UNSUPPORTED, "one segmentation");
    ck_assert_int_eq(tg_tokenizer_encode_sampled(bytes, s, n, 8, 0.1, 1, ids, 256), -1);
    ck_assert(!tg_tokenizer_can_sample(NULL));
    tg_tokenizer_free(bpe);
    tg_tokenizer_free(bytes);
    tu_ctx_free(ctx);
}
END_TEST

/* The draws of the PyTorch reference's sampled_ids (tests/fixtures/spm_sample/
 * gen_spm_sample.py): the same ids for every (text, l, alpha, key). */
START_TEST(test_sampled_reference_fixture)
{
    tg_ctx *ctx = tu_ctx_new();
    tg_tokenizer *t = tg_spm_load_file(ctx, TG_FIXTURES "/spm_sample/tiny.model");
    ck_assert_msg(t != NULL, "%s", tg_ctx_message(ctx));
    FILE *f = fopen(TG_FIXTURES "/spm_sample/expected.txt", "r");
    ck_assert_ptr_nonnull(f);
    char line[4096];
    int cases = 0;
    while (fgets(line, sizeof line, f)) {
        if (line[0] == '#')
            continue;
        line[strcspn(line, "\n")] = 0;
        char *text = strchr(line, '\t'), *want = text ? strchr(text + 1, '\t') : NULL;
        ck_assert_ptr_nonnull(want);
        *text++ = 0;
        *want++ = 0;
        int l;
        double alpha;
        unsigned long long key;
        ck_assert_int_eq(sscanf(line, "%d %lf %llu", &l, &alpha, &key), 3);
        int32_t ids[512];
        int64_t k = tg_tokenizer_encode_sampled(t, text, strlen(text), l, alpha, key, ids, 512);
        ck_assert_msg(k >= 0, "%s", tg_ctx_message(ctx));
        char got[4096];
        size_t at = 0;
        got[0] = 0;
        for (int64_t i = 0; i < k; i++)
            at += (size_t)snprintf(got + at, sizeof got - at, "%s%d", i ? " " : "", ids[i]);
        ck_assert_msg(!strcmp(got, want), "'%s' l %d alpha %g key %llu: %s, reference %s", text,
                      l, alpha, key, got, want);
        cases++;
    }
    fclose(f);
    ck_assert_int_eq(cases, 320);
    tg_tokenizer_free(t);
    tu_ctx_free(ctx);
}
END_TEST

/* tg_seq2seq_sample: the same (seed, epoch) the same data, another epoch other segmentations,
 * each a segmentation of the pair's text, cut at max_len as tg_seq2seq_load does. */
START_TEST(test_seq2seq_sample)
{
    tg_ctx *ctx = tu_ctx_new();
    tg_tokenizer *t = train(ctx, TG_SPM_UNIGRAM, 80);
    ck_assert_ptr_nonnull(t);
    corpus c;
    corpus_make(&c);
    size_t cap = 64 * 1024, len = 0;
    char *tsv = malloc(cap);
    for (int i = 0; i + 1 < 200; i += 2)
        len += (size_t)snprintf(tsv + len, cap - len, "%s\t%s\n", c.lines[i + 1], c.lines[i]);
    corpus_free(&c);
    tg_seq2seq_opts o = {.max_len = 12, .keep_text = true};
    tg_seq2seq_data *d = tg_seq2seq_load_mem(ctx, tsv, len, "p.tsv", t, &o);
    ck_assert_ptr_nonnull(d);
    tg_seq2seq_data *a = tg_seq2seq_sample(ctx, d, t, 16, 0, 5, 0),
                    *b = tg_seq2seq_sample(ctx, d, t, 16, 0, 5, 0);
    tg_seq2seq_data *e1 = tg_seq2seq_sample(ctx, d, t, 16, 0, 5, 1);
    ck_assert(a && b && e1);
    ck_assert_int_eq(tg_seq2seq_count(a), 100);
    ck_assert(tg_seq2seq_get_info(a).hash == tg_seq2seq_get_info(d).hash);
    int differ = 0, cut = 0;
    for (int64_t i = 0; i < 100; i++) {
        int64_t na, nb2, ne;
        const int32_t *sa = tg_seq2seq_source(a, i, &na), *sb = tg_seq2seq_source(b, i, &nb2);
        const int32_t *se = tg_seq2seq_source(e1, i, &ne);
        ck_assert(na == nb2 && !memcmp(sa, sb, (size_t)na * sizeof *sa));
        differ += na != ne || memcmp(sa, se, (size_t)na * sizeof *sa);
        ck_assert(na <= 12 && sa[na - 1] == TG_TOKEN_EOS);
        ck_assert_int_eq(tg_seq2seq_line(a, i), tg_seq2seq_line(d, i));
        ck_assert_ptr_null(tg_seq2seq_source_text(a, i));
        int64_t nt;
        const int32_t *ta = tg_seq2seq_target(a, i, &nt);
        ck_assert_int_le(nt, 11);
        char out[512], want[512];
        tg_tokenizer_decode(t, ta, nt, out, sizeof out);
        snprintf(want, sizeof want, "%s", tg_seq2seq_target_text(d, i));
        if (nt < 11)
            ck_assert_str_eq(out, want);
        else
            cut++;
    }
    ck_assert_msg(differ > 20, "only %d of 100 sources changed between epochs", differ);
    ck_assert_int_lt(cut, 100);
    tg_seq2seq_free(a);
    tg_seq2seq_free(b);
    tg_seq2seq_free(e1);
    /* errors */
    ck_assert_ptr_null(tg_seq2seq_sample(ctx, d, t, 0, 0.2, 5, 0));
    tu_assert_error(ctx, TG_ERR_ARG, "tg_seq2seq_sample");
    ck_assert_ptr_null(tg_seq2seq_sample(ctx, d, t, 16, 0.2, 5, -1));
    tg_tokenizer *bytes = tg_tokenizer_bytes(ctx);
    ck_assert_ptr_null(tg_seq2seq_sample(ctx, d, bytes, 16, 0.2, 5, 0));
    tu_assert_error(ctx, TG_ERR_UNSUPPORTED, "cannot sample");
    o.keep_text = false;
    tg_seq2seq_data *no_text = tg_seq2seq_load_mem(ctx, tsv, len, "p.tsv", t, &o);
    ck_assert_ptr_null(tg_seq2seq_sample(ctx, no_text, t, 16, 0.2, 5, 0));
    tu_assert_error(ctx, TG_ERR_ARG, "keep_text");
    ck_assert_ptr_null(tg_seq2seq_sample(ctx, NULL, t, 16, 0.2, 5, 0));
    tg_seq2seq_free(no_text);
    tg_seq2seq_free(d);
    tg_tokenizer_free(bytes);
    tg_tokenizer_free(t);
    free(tsv);
    tu_ctx_free(ctx);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("spm");
    TCase *tc = tu_tcase(s, "spm", 60);
    tcase_add_test(tc, test_train_round_trip);
    tcase_add_test(tc, test_train_deterministic);
    tcase_add_test(tc, test_load_again);
    tcase_add_test(tc, test_model_type);
    tcase_add_test(tc, test_train_errors);
    tcase_add_test(tc, test_hostile_bytes);
    tcase_add_test(tc, test_sampled_segmentations);
    tcase_add_test(tc, test_seq2seq_sample);
    tcase_add_test(tc, test_sampled_reference_fixture);
    return tu_run(s);
}
