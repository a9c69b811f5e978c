/*
 * test_data.c - tgrad_data.h: tokenizers (the byte tokenizer, the generic wrappers' checks,
 * a custom implementation through tg_tokenizer_new), the sentence-pair reader, tokenized
 * sequence-to-sequence data and length-bucketed batches.
 */
#include "testutil.h"
#include "tgrad_data.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

START_TEST(test_bytes_round_trip)
{
    tg_ctx *ctx = tu_ctx_new();
    tg_tokenizer *t = tg_tokenizer_bytes(ctx);
    ck_assert_ptr_nonnull(t);
    ck_assert_int_eq(tg_tokenizer_vocab_size(t), TG_BYTE_VOCAB);
    ck_assert_str_eq(tg_tokenizer_kind(t), "bytes");
    tg_token_ids sp = tg_tokenizer_special(t);
    ck_assert_int_eq(sp.unk, 0);
    ck_assert_int_eq(sp.bos, 1);
    ck_assert_int_eq(sp.eos, 2);
    ck_assert_int_eq(sp.pad, 3);
    size_t msize = 1;
    ck_assert_ptr_null(tg_tokenizer_model(t, &msize));
    ck_assert_uint_eq(msize, 0);
    const char *s = "Grüße, 世界! 🙂";
    size_t n = strlen(s);
    ck_assert_int_eq(tg_tokenizer_encode(t, s, n, NULL, 0), (int64_t)n);
    int32_t ids[64];
    ck_assert_int_eq(tg_tokenizer_encode(t, s, n, ids, 64), (int64_t)n);
    ck_assert_int_eq(ids[0], 4 + 'G');
    /* specials are skipped in decoding */
    int32_t with[66];
    with[0] = TG_TOKEN_BOS;
    memcpy(with + 1, ids, n * sizeof *ids);
    with[n + 1] = TG_TOKEN_EOS;
    char out[128];
    ck_assert_int_eq(tg_tokenizer_decode(t, with, (int64_t)n + 2, out, sizeof out), (int64_t)n);
    ck_assert_str_eq(out, s);
    /* a short buffer: the length needed, a prefix written */
    ck_assert_int_eq(tg_tokenizer_decode(t, ids, (int64_t)n, out, 3), (int64_t)n);
    ck_assert_int_eq(memcmp(out, "Gr", 2), 0);
    tg_tokenizer_free(t);
    tu_ctx_free(ctx);
}
END_TEST

START_TEST(test_encode_refuses_bad_text)
{
    tg_ctx *ctx = tu_ctx_new();
    tg_tokenizer *t = tg_tokenizer_bytes(ctx);
    int32_t ids[16];
    const char *cases[] = {"ab\xff", "\xc3", "\xed\xa0\x80", "\xc0\xaf", "\xf4\x90\x80\x80"};
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        ck_assert_int_eq(tg_tokenizer_encode(t, cases[i], strlen(cases[i]), ids, 16), -1);
        tu_assert_error(ctx, TG_ERR_ARG, "not valid UTF-8");
    }
    ck_assert_int_eq(tg_tokenizer_encode(t, "a\0b", 3, ids, 16), -1);
    tu_assert_error(ctx, TG_ERR_ARG, "NUL byte at offset 1");
    /* a run-time error: the next call works */
    ck_assert_int_eq(tg_tokenizer_encode(t, "ok", 2, ids, 16), 2);
    ck_assert_int_eq(tg_ctx_status(ctx), TG_OK);
    int32_t bad = TG_BYTE_VOCAB;
    char out[8];
    ck_assert_int_eq(tg_tokenizer_decode(t, &bad, 1, out, sizeof out), -1);
    tu_assert_error(ctx, TG_ERR_ARG, "outside [0, 260)");
    tg_tokenizer_free(t);
    tu_ctx_free(ctx);
}
END_TEST

/* Decoding makes valid UTF-8 of any ids: one U+FFFD per maximal invalid subpart, as Python's
 * bytes.decode(errors="replace"). */
START_TEST(test_decode_replaces_invalid)
{
    tg_ctx *ctx = tu_ctx_new();
    tg_tokenizer *t = tg_tokenizer_bytes(ctx);
    struct {
        const char *in, *want;
    } cases[] = {
        {"a\xff" "b", "a\xef\xbf\xbd" "b"},
        {"\xe2\x82", "\xef\xbf\xbd"},                    /* truncated: one replacement */
        {"\xe2\x82" "x", "\xef\xbf\xbd" "x"},
        {"\xed\xa0\x80", "\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd"}, /* surrogate: three */
        {"\xf0\x9f\x99", "\xef\xbf\xbd"},
        {"\xc3\xa4", "\xc3\xa4"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        int32_t ids[8];
        size_t n = strlen(cases[i].in);
        for (size_t j = 0; j < n; j++)
            ids[j] = 4 + (unsigned char)cases[i].in[j];
        char out[32];
        int64_t k = tg_tokenizer_decode(t, ids, (int64_t)n, out, sizeof out);
        ck_assert_int_eq(k, (int64_t)strlen(cases[i].want));
        ck_assert_str_eq(out, cases[i].want);
    }
    int32_t nul = 4;
    char out[8];
    ck_assert_int_eq(tg_tokenizer_decode(t, &nul, 1, out, sizeof out), 3);
    tg_tokenizer_free(t);
    tu_ctx_free(ctx);
}
END_TEST

/* A custom implementation: its ids are checked, its errors are reported, impl is freed. */
static int g_freed;
static int64_t upper_encode(void *impl, const char *text, size_t n, int32_t *ids, int64_t cap,
                            char *err, size_t err_size)
{
    (void)impl;
    if (n && text[0] == '!') {
        snprintf(err, err_size, "no exclamations");
        return -1;
    }
    for (size_t i = 0; i < n && (int64_t)i < cap; i++)
        ids[i] = text[0] == '?' ? 999 : 4 + (text[i] & 7);
    return (int64_t)n;
}
static int64_t upper_decode(void *impl, const int32_t *ids, int64_t n, char *out, size_t cap,
                            char *err, size_t err_size)
{
    (void)impl, (void)err, (void)err_size;
    for (int64_t i = 0; i < n && (size_t)i < cap; i++)
        out[i] = (char)('A' + ids[i] - 4);
    return n;
}
static void upper_free(void *impl)
{
    g_freed++;
    free(impl);
}

/* An embedder's nbest operation, well-formed (mode 0) or broken in one way (modes 1..7). */
static int g_nbest_mode;
static int64_t fake_nbest(void *impl, const char *text, size_t n, int l, int32_t *ids,
                          int64_t cap, int64_t *ends, double *scores, int *count, char *err,
                          size_t err_size)
{
    (void)impl, (void)text, (void)n, (void)l, (void)err, (void)err_size;
    static const int32_t seg[5] = {4, 5, 6, 7, 8}; /* "ab" | "c" and "a" | "bc" style */
    switch (g_nbest_mode) {
    case 5: /* always wants one more */
        return cap + 1;
    case 6: /* an impossible length */
        return (int64_t)1 << 62;
    default:
        break;
    }
    for (int64_t i = 0; i < 5 && i < cap; i++)
        ids[i] = g_nbest_mode == 4 && i == 3 ? 99999 : seg[i];
    *count = g_nbest_mode == 1 ? 0 : 2;
    ends[0] = g_nbest_mode == 2 ? 4 : 2;
    ends[1] = g_nbest_mode == 2 ? 3 : 5;
    scores[0] = g_nbest_mode == 7 ? -1e308 : -1.0;
    scores[1] = g_nbest_mode == 3 ? NAN : g_nbest_mode == 7 ? 1e308 : -3.0;
    return 5;
}

/* tg_tokenizer_encode_sampled through an embedder's nbest: the draw follows the weights; a
 * malformed list is refused, never read out of bounds; a length query needs no buffer. */
START_TEST(test_sampled_custom_nbest)
{
    tg_ctx *ctx = tu_ctx_new();
    tg_tokenizer_ops ops = {"fake", upper_encode, upper_decode, NULL, fake_nbest};
    tg_tokenizer *t = tg_tokenizer_new(ctx, &ops, NULL, 16, (tg_token_ids){0, 1, 2, 3}, NULL, 0);
    ck_assert_ptr_nonnull(t);
    ck_assert(tg_tokenizer_can_sample(t));
    int32_t ids[8];
    g_nbest_mode = 0;
    ck_assert_int_eq(tg_tokenizer_encode_sampled(t, "abc", 3, 2, 0, 1, NULL, 0) > 0, 1);
    int first = 0, n = 2000;
    for (uint64_t key = 0; key < (uint64_t)n; key++) {
        int64_t k = tg_tokenizer_encode_sampled(t, "abc", 3, 2, 1.0, key, ids, 8);
        ck_assert(k == 2 || k == 3);
        first += k == 2;
    }
    /* P(first) = 1 / (1 + e^-2) = 0.881: 1762 expected, sd 14 */
    ck_assert_msg(first > 1700 && first < 1825, "first drawn %d of %d", first, n);
    static const char *const needles[8] = {NULL, "malformed", "malformed", "malformed",
                                           "outside", "asks for", "asks for", "not in order"};
    for (g_nbest_mode = 1; g_nbest_mode <= 7; g_nbest_mode++) {
        ck_assert_int_eq(tg_tokenizer_encode_sampled(t, "abc", 3, 2, 1.0, 3, ids, 8), -1);
        tu_assert_error(ctx, TG_ERR_ARG, needles[g_nbest_mode]);
    }
    tg_tokenizer_free(t);
    tu_ctx_free(ctx);
}
END_TEST

/* An nbest that depends on the text: segmentation k (k = 0, 1, 2) of a text of n bytes has
 * max(n - k, 1) ids, from the bytes and k, and score -k; a text starting with '#' fails while
 * g_text_fail is set. Counts its calls. */
static int g_text_nbest_calls, g_text_fail;
static int64_t text_nbest(void *impl, const char *text, size_t n, int l, int32_t *ids,
                          int64_t cap, int64_t *ends, double *scores, int *count, char *err,
                          size_t err_size)
{
    (void)impl;
    g_text_nbest_calls++;
    if (g_text_fail && n && text[0] == '#') {
        snprintf(err, err_size, "no exclamations");
        return -1;
    }
    int m = l < 3 ? l : 3;
    int64_t total = 0;
    for (int k = 0; k < m; k++) {
        int64_t len = (int64_t)n > k ? (int64_t)n - k : 1;
        for (int64_t t = 0; t < len; t++, total++)
            if (total < cap)
                ids[total] = 4 + (int32_t)(((unsigned char)text[t < (int64_t)n ? t : 0] + k) % 11);
        ends[k] = total;
        scores[k] = -k;
    }
    *count = m;
    return total;
}

static bool same_data(const tg_seq2seq_data *a, const tg_seq2seq_data *b)
{
    if (tg_seq2seq_count(a) != tg_seq2seq_count(b))
        return false;
    for (int64_t i = 0; i < tg_seq2seq_count(a); i++) {
        int64_t la, lb, ta, tb;
        const int32_t *sa = tg_seq2seq_source(a, i, &la), *sb = tg_seq2seq_source(b, i, &lb);
        const int32_t *xa = tg_seq2seq_target(a, i, &ta), *xb = tg_seq2seq_target(b, i, &tb);
        if (la != lb || ta != tb || memcmp(sa, sb, (size_t)la * sizeof *sa) ||
            (ta && memcmp(xa, xb, (size_t)ta * sizeof *xa)))
            return false;
    }
    return true;
}

/* tg_seq2seq_sample keeps the n-best lists with the data: later epochs ask the tokenizer
 * nothing and draw exactly what a fresh search gives; another l, another context or a failed
 * epoch start again from the tokenizer. */
START_TEST(test_sample_memo)
{
    static const char text[] = "hello\tHallo\nabc\tabcd\nx\tyz\n#bang\tpeng\nlonger one\tlänger\n";
    tg_ctx *ctx = tu_ctx_new(), *other = tu_ctx_new();
    tg_tokenizer_ops ops = {"textnb", upper_encode, upper_decode, NULL, text_nbest};
    tg_tokenizer *t = tg_tokenizer_new(ctx, &ops, NULL, 16, (tg_token_ids){0, 1, 2, 3}, NULL, 0);
    tg_seq2seq_opts o = {.max_len = 6, .keep_text = true}; /* some sides truncated */
    tg_seq2seq_data *d = tg_seq2seq_load_mem(ctx, text, sizeof text - 1, "p.tsv", t, &o);
    /* sampled through another context: no memo (it would be in its data's context) */
    tg_seq2seq_data *fresh = tg_seq2seq_load_mem(ctx, text, sizeof text - 1, "p.tsv", t, &o);
    ck_assert_ptr_nonnull(d);
    ck_assert_ptr_nonnull(fresh);
    const int sides = 2 * (int)tg_seq2seq_count(d);
    for (int64_t e = 0; e < 4; e++) {
        for (int l = 3; l >= 2; l--) { /* a new l starts again: 3, 2, 3, 2, ... */
            g_text_nbest_calls = 0;
            tg_seq2seq_data *a = tg_seq2seq_sample(ctx, d, t, l, 0.7, 11, e);
            int calls = g_text_nbest_calls;
            g_text_nbest_calls = 0;
            tg_seq2seq_data *b = tg_seq2seq_sample(ctx, d, t, l, 0.7, 11, e + 1);
            ck_assert_int_eq(g_text_nbest_calls, 0); /* the memo of the call before */
            ck_assert_int_eq(calls, sides);          /* l changed: the tokenizer again */
            /* the same draws as without a memo (another context: no memo) */
            tg_seq2seq_data *fa = tg_seq2seq_sample(other, fresh, t, l, 0.7, 11, e);
            tg_seq2seq_data *fb = tg_seq2seq_sample(other, fresh, t, l, 0.7, 11, e + 1);
            ck_assert_int_eq(g_text_nbest_calls, 2 * sides);
            ck_assert_ptr_nonnull(a);
            ck_assert_ptr_nonnull(b);
            ck_assert(same_data(a, fa) && same_data(b, fb));
            ck_assert(!same_data(a, b)); /* epochs differ */
            tg_seq2seq_free(a), tg_seq2seq_free(b), tg_seq2seq_free(fa), tg_seq2seq_free(fb);
        }
    }
    /* a failed epoch leaves no memo: the next one asks the tokenizer again */
    size_t bytes0 = tg_ctx_bytes(ctx);
    tg_seq2seq_data *d2 = tg_seq2seq_load_mem(ctx, text, sizeof text - 1, "p.tsv", t, &o);
    g_text_fail = 1;
    ck_assert_ptr_null(tg_seq2seq_sample(ctx, d2, t, 3, 0.7, 11, 0));
    tu_assert_error(ctx, TG_ERR_ARG, "no exclamations");
    g_text_fail = 0;
    g_text_nbest_calls = 0;
    tg_seq2seq_data *a = tg_seq2seq_sample(ctx, d2, t, 3, 0.7, 11, 0);
    ck_assert_int_eq(g_text_nbest_calls, sides);
    tg_seq2seq_data *fa = tg_seq2seq_sample(other, fresh, t, 3, 0.7, 11, 0);
    ck_assert(same_data(a, fa));
    ck_assert_int_eq(tg_ctx_status(ctx), TG_OK);
    tg_seq2seq_free(a), tg_seq2seq_free(fa);
    /* the memo's memory goes with its data */
    tg_seq2seq_free(d2);
    ck_assert_uint_eq(tg_ctx_bytes(ctx), bytes0);
    tg_seq2seq_free(d);
    tg_seq2seq_free(fresh);
    tg_tokenizer_free(t);
    tu_ctx_free(other);
    tu_ctx_free(ctx);
}
END_TEST

START_TEST(test_custom_tokenizer)
{
    tg_ctx *ctx = tu_ctx_new();
    tg_tokenizer_ops ops = {"upper", upper_encode, upper_decode, upper_free, NULL};
    tg_token_ids sp = {0, 1, 2, -1};
    g_freed = 0;
    tg_tokenizer *t = tg_tokenizer_new(ctx, &ops, malloc(8), 12, sp, "abc", 3);
    ck_assert_ptr_nonnull(t);
    size_t n;
    const char *m = tg_tokenizer_model(t, &n);
    ck_assert_uint_eq(n, 3);
    ck_assert_int_eq(memcmp(m, "abc", 3), 0);
    int32_t ids[8];
    ck_assert_int_eq(tg_tokenizer_encode(t, "!x", 2, ids, 8), -1);
    tu_assert_error(ctx, TG_ERR_ARG, "upper: no exclamations");
    ck_assert_int_eq(tg_tokenizer_encode(t, "?x", 2, ids, 8), -1);
    tu_assert_error(ctx, TG_ERR_ARG, "upper returned id 999 outside [0, 12)");
    ck_assert_int_eq(tg_tokenizer_encode(t, "ab", 2, ids, 8), 2);
    char out[8];
    ck_assert_int_eq(tg_tokenizer_decode(t, ids, 2, out, sizeof out), 2);
    ck_assert_str_eq(out, "BC");
    tg_tokenizer_free(t);
    ck_assert_int_eq(g_freed, 1);
    /* refused: no bos; impl is released all the same */
    tg_token_ids nobos = {0, -1, 2, 3};
    ck_assert_ptr_null(tg_tokenizer_new(ctx, &ops, malloc(8), 12, nobos, NULL, 0));
    tu_assert_error(ctx, TG_ERR_ARG, "needs bos and eos");
    ck_assert_int_eq(g_freed, 2);
    tg_token_ids big = {0, 1, 12, 3};
    ck_assert_ptr_null(tg_tokenizer_new(ctx, &ops, NULL, 12, big, NULL, 0));
    tu_assert_error(ctx, TG_ERR_ARG, "outside [-1, vocab_size)");
    tu_ctx_free(ctx);
}
END_TEST

/* ===== checkpoint metadata: tokenizer.kind, tokenizer.model ================================= */
typedef struct membuf {
    char *p;
    size_t n, cap;
} membuf;

static int membuf_write(void *user, const void *data, size_t size)
{
    membuf *m = user;
    if (m->n + size > m->cap) {
        m->cap = 2 * (m->n + size);
        m->p = realloc(m->p, m->cap);
        ck_assert_ptr_nonnull(m->p);
    }
    memcpy(m->p + m->n, data, size);
    m->n += size;
    return 0;
}

/* A safetensors file (one small tensor) with @p n metadata pairs, parsed in @p ctx (made in
 * memory: no file). */
static tg_safetensors *st_with_meta(tg_ctx *ctx, int64_t n, const char *const *keys,
                                    const char *const *values)
{
    tg_tensor *t = tg_param(ctx, TG_F32, TG_DIMS(2), "w");
    ck_assert_ptr_nonnull(t);
    tg_io_item item = tg_io_item_data(t, "w");
    membuf m = {0};
    tg_writer w = {membuf_write, &m};
    ck_assert_msg(tg_safetensors_write_to(ctx, &w, 1, &item, n, keys, values) == TG_OK, "%s",
                  tg_ctx_message(ctx));
    tg_safetensors *st = tg_safetensors_read_mem(ctx, m.p, m.n);
    ck_assert_msg(st != NULL, "%s", tg_ctx_message(ctx));
    free(m.p);
    return st;
}

/* RFC 4648's test vectors, every byte value, every length mod 3: meta -> file -> meta_read. */
START_TEST(test_tokenizer_meta_round_trip)
{
    tg_ctx *ctx = tu_ctx_new();
    tg_tokenizer_ops ops = {"sentencepiece", upper_encode, upper_decode, upper_free, NULL};
    tg_token_ids sp = {0, 1, 2, 3};
    static const char *const vec[][2] = {{"f", "Zg=="}, {"fo", "Zm8="}, {"foo", "Zm9v"},
                                         {"foob", "Zm9vYg=="}, {"fooba", "Zm9vYmE="},
                                         {"foobar", "Zm9vYmFy"}};
    unsigned char all[259];
    for (int i = 0; i < 259; i++)
        all[i] = (unsigned char)(i * 7 + 3);
    for (int k = 0; k < 9; k++) {
        const void *model = k < 6 ? (const void *)vec[k][0] : (const void *)all;
        size_t size = k < 6 ? strlen(vec[k][0]) : (size_t)(257 + k - 6);
        tg_tokenizer *t = tg_tokenizer_new(ctx, &ops, malloc(8), 12, sp, model, size);
        ck_assert_ptr_nonnull(t);
        const char *keys[2];
        char *values[2];
        ck_assert_int_eq(tg_tokenizer_meta(t, keys, values), 2);
        ck_assert_str_eq(keys[0], "tokenizer.kind");
        ck_assert_str_eq(values[0], "sentencepiece");
        ck_assert_str_eq(keys[1], "tokenizer.model");
        ck_assert_uint_eq(strlen(values[1]), 4 * ((size + 2) / 3));
        if (k < 6)
            ck_assert_str_eq(values[1], vec[k][1]);
        tg_safetensors *st = st_with_meta(ctx, 2, keys, (const char *const *)values);
        const char *kind;
        void *back;
        size_t n;
        ck_assert_msg(tg_tokenizer_meta_read(ctx, st, &kind, &back, &n) == TG_OK, "%s",
                      tg_ctx_message(ctx));
        ck_assert_str_eq(kind, "sentencepiece");
        ck_assert_uint_eq(n, size);
        ck_assert_int_eq(memcmp(back, model, size), 0);
        free(back);
        free(values[0]);
        free(values[1]);
        tg_tokenizer_free(t);
    }
    /* the byte tokenizer: the kind only */
    tg_tokenizer *b = tg_tokenizer_bytes(ctx);
    const char *keys[2];
    char *values[2];
    ck_assert_int_eq(tg_tokenizer_meta(b, keys, values), 1);
    ck_assert_str_eq(values[0], "bytes");
    ck_assert_ptr_null(values[1]);
    tg_safetensors *st = st_with_meta(ctx, 1, keys, (const char *const *)values);
    const char *kind;
    void *back = (void *)1;
    size_t n = 9;
    ck_assert_int_eq(tg_tokenizer_meta_read(ctx, st, &kind, &back, &n), TG_OK);
    ck_assert_str_eq(kind, "bytes");
    ck_assert_ptr_null(back);
    ck_assert_uint_eq(n, 0);
    free(values[0]);
    tg_tokenizer_free(b);
    tu_ctx_free(ctx);
}
END_TEST

START_TEST(test_tokenizer_meta_refusals)
{
    static const struct {
        const char *kind, *model, *needle;
    } rows[] = {
        {NULL, NULL, "'tokenizer.kind' is missing"},
        {NULL, "Zg==", "'tokenizer.kind' is missing"},
        {"wordpiece", NULL, "'tokenizer.kind' is 'wordpiece' (expected bytes or sentencepiece)"},
        {"Bytes", NULL, "'tokenizer.kind' is 'Bytes'"},
        {"bytes", "Zg==", "present but tokenizer.kind is bytes"},
        {"sentencepiece", NULL, "'tokenizer.model' is missing"},
        {"sentencepiece", "", "'tokenizer.model' is empty"},
        {"sentencepiece", "Zm9", "base64 of 3 characters (expected a multiple of 4"},
        {"sentencepiece", "Zm9vY", "base64 of 5 characters"},
        {"sentencepiece", "Zm9v!A==", "byte 0x21 at offset 4 is not a base64 character"},
        {"sentencepiece", "Zm9v-A==", "byte 0x2d at offset 4 is not a base64 character"},
        {"sentencepiece", "Zm9 ", "byte 0x20 at offset 3"},
        {"sentencepiece", "Zm9v\nZg=", "byte 0x0a at offset 4"},
        {"sentencepiece", "Zg==Zm8=", "padding '=' at offset 2 before the end"},
        {"sentencepiece", "Z===", "padding '=' at offset 1 before the end"},
        {"sentencepiece", "====", "padding '=' at offset 0 before the end"},
        {"sentencepiece", "Zh==", "non-canonical base64 (nonzero padding bits at offset 1)"},
        {"sentencepiece", "Zm9=", "non-canonical base64 (nonzero padding bits at offset 2)"},
    };
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
        tg_ctx *ctx = tu_ctx_new();
        const char *k[3] = {"other"}, *v[3] = {"1"};
        int n = 1;
        if (rows[i].kind) {
            k[n] = "tokenizer.kind";
            v[n++] = rows[i].kind;
        }
        if (rows[i].model) {
            k[n] = "tokenizer.model";
            v[n++] = rows[i].model;
        }
        tg_safetensors *st = st_with_meta(ctx, n, k, v);
        const char *kind = "x";
        void *model = (void *)1;
        size_t size = 5;
        ck_assert_int_eq(tg_tokenizer_meta_read(ctx, st, &kind, &model, &size), TG_ERR_FORMAT);
        tu_assert_error(ctx, TG_ERR_FORMAT, rows[i].needle);
        ck_assert_ptr_null(kind);
        ck_assert_ptr_null(model);
        ck_assert_uint_eq(size, 0);
        tu_ctx_free(ctx);
    }
    /* over 64 MiB decoded: refused from the length, before anything is allocated or scanned */
    tg_ctx *ctx = tu_ctx_new();
    size_t len = 4 * ((TG_TOKENIZER_MAX_MODEL_BYTES + 3) / 3);
    char *big = malloc(len + 1);
    ck_assert_ptr_nonnull(big);
    memset(big, '!', len);
    big[len] = 0;
    const char *k[2] = {"tokenizer.kind", "tokenizer.model"}, *v[2] = {"sentencepiece", big};
    tg_safetensors *st = st_with_meta(ctx, 2, k, v);
    free(big);
    const char *kind;
    void *model;
    size_t size;
    ck_assert_int_eq(tg_tokenizer_meta_read(ctx, st, &kind, &model, &size), TG_ERR_FORMAT);
    tu_assert_error(ctx, TG_ERR_FORMAT, "bytes of model (at most 67108864)");
    /* NULL arguments */
    ck_assert_int_eq(tg_tokenizer_meta_read(ctx, NULL, &kind, &model, &size), TG_ERR_ARG);
    ck_assert_int_eq(tg_tokenizer_meta_read(NULL, st, &kind, &model, &size), TG_ERR_ARG);
    const char *keys[2];
    char *values[2];
    ck_assert_int_eq(tg_tokenizer_meta(NULL, keys, values), -1);
    tu_ctx_free(ctx);
}
END_TEST

/* ===== sentence-pair files ================================================================== */
static void write_bytes(const char *dir, const char *name, const char *data, size_t n,
                        char *path, size_t path_size)
{
    tu_path(path, path_size, dir, name);
    FILE *f = fopen(path, "wb");
    ck_assert_ptr_nonnull(f);
    ck_assert_uint_eq(fwrite(data, 1, n, f), n);
    ck_assert_int_eq(fclose(f), 0);
}

typedef struct collected {
    int n;
    char src[8][64], tgt[8][64];
    int64_t line[8];
    int stop_at; /* return TG_ERR_ARG at this pair (0: never) */
} collected;

static tg_status collect(void *user, const tg_pair *p)
{
    collected *c = user;
    ck_assert_uint_eq(strlen(p->source), p->source_len);
    ck_assert_uint_eq(strlen(p->target), p->target_len);
    if (c->n < 8) {
        snprintf(c->src[c->n], 64, "%s", p->source);
        snprintf(c->tgt[c->n], 64, "%s", p->target);
        c->line[c->n] = p->line;
    }
    c->n++;
    return c->stop_at == c->n ? TG_ERR_ARG : TG_OK;
}

static uint64_t fnv1a_ref(const char *s, size_t n)
{
    uint64_t h = 0xcbf29ce484222325ULL;
    for (size_t i = 0; i < n; i++) {
        h ^= (unsigned char)s[i];
        h *= 0x100000001b3ULL;
    }
    return h;
}

/* CRLF, a last line without its newline, UTF-8, the hash; the same from a file and memory. */
START_TEST(test_pairs_read_ok)
{
    tg_ctx *ctx = tu_ctx_new();
    char dir[64], path[4400];
    tu_mkdtemp(dir, sizeof dir, "pairs");
    static const char text[] = "Hello.\tHallo.\r\nI am thirsty.\tIch habe Durst.\n"
                               "Grüße!\tGrüße!\r\nno newline\tkein Zeilenende";
    size_t n = sizeof text - 1;
    write_bytes(dir, "a.tsv", text, n, path, sizeof path);
    for (int mem = 0; mem < 2; mem++) {
        collected c = {0};
        tg_pairs_info info;
        tg_status st = mem ? tg_pairs_read_mem(ctx, text, n, "a.tsv", 0, collect, &c, &info)
                           : tg_pairs_read(ctx, path, 0, collect, &c, &info);
        ck_assert_msg(st == TG_OK, "%s", tg_ctx_message(ctx));
        ck_assert_int_eq(c.n, 4);
        ck_assert_str_eq(c.src[0], "Hello.");
        ck_assert_str_eq(c.tgt[0], "Hallo.");
        ck_assert_str_eq(c.tgt[1], "Ich habe Durst.");
        ck_assert_str_eq(c.src[2], "Grüße!");
        ck_assert_str_eq(c.tgt[2], "Grüße!");
        ck_assert_str_eq(c.src[3], "no newline");
        ck_assert_str_eq(c.tgt[3], "kein Zeilenende");
        ck_assert_int_eq(c.line[3], 4);
        ck_assert_int_eq(info.pairs, 4);
        ck_assert_uint_eq(info.bytes, n);
        ck_assert(info.hash == fnv1a_ref(text, n));
    }
    /* no callback: validation and counting only */
    tg_pairs_info info;
    ck_assert_int_eq(tg_pairs_read(ctx, path, 0, NULL, NULL, &info), TG_OK);
    ck_assert_int_eq(info.pairs, 4);
    /* a line of exactly the limit passes, with CRLF too; one byte more does not */
    ck_assert_int_eq(tg_pairs_read_mem(ctx, "abc\tdefg\r\n", 10, NULL, 8, NULL, NULL, NULL), TG_OK);
    ck_assert_int_eq(tg_pairs_read_mem(ctx, "abc\tdefg", 8, NULL, 8, NULL, NULL, NULL), TG_OK);
    ck_assert_int_eq(tg_pairs_read_mem(ctx, "abc\tdefgh", 9, NULL, 8, NULL, NULL, NULL),
                     TG_ERR_FORMAT);
    ck_assert_int_eq(tg_pairs_read_mem(ctx, "abc\tdefgh\r\n", 11, NULL, 8, NULL, NULL, NULL),
                     TG_ERR_FORMAT);
    tu_assert_error(ctx, TG_ERR_FORMAT, "<memory>:1: the line is longer than the limit of 8 bytes");
    /* a line longer than the read chunk (64 KiB) with a larger limit */
    size_t big = 200000;
    char *b = malloc(big + 8);
    memset(b, 'x', big);
    memcpy(b + big, "\ty\nz\tw\n", 7);
    collected c = {0};
    ck_assert_int_eq(tg_pairs_read_mem(ctx, b, big + 7, NULL, big + 2, collect, &c, &info), TG_OK);
    ck_assert_int_eq(c.n, 2);
    ck_assert_int_eq(tg_pairs_read_mem(ctx, b, big + 7, NULL, 0, NULL, NULL, NULL), TG_ERR_FORMAT);
    tu_assert_error(ctx, TG_ERR_FORMAT, "<memory>:1: the line is longer than the limit of 65536");
    free(b);
    tu_rm_tree(dir);
    tu_ctx_free(ctx);
}
END_TEST

/* A file is streamed: reading 8 MB of pairs stays under a 256 KiB memory limit (64 KiB chunk
 * + 64 KiB line buffer), and the tokenized data holds ids, not text. */
START_TEST(test_pairs_bounded_memory)
{
    tg_ctx *ctx = tu_ctx_new();
    char dir[64], path[4400];
    tu_mkdtemp(dir, sizeof dir, "pairs");
    tu_path(path, sizeof path, dir, "big.tsv");
    FILE *f = fopen(path, "wb");
    ck_assert_ptr_nonnull(f);
    static const char line[] = "The quick brown fox jumps over the lazy dog, again and again.\t"
                               "Der schnelle braune Fuchs springt immer wieder.\n";
    int64_t lines = 8 * 1024 * 1024 / (int64_t)(sizeof line - 1) + 1;
    for (int64_t i = 0; i < lines; i++)
        ck_assert_int_eq(fputs(line, f) >= 0, 1);
    ck_assert_int_eq(fclose(f), 0);
    tg_ctx_set_memory_limit(ctx, 256 << 10);
    tg_pairs_info info;
    ck_assert_msg(tg_pairs_read(ctx, path, 0, NULL, NULL, &info) == TG_OK, "%s",
                  tg_ctx_message(ctx));
    ck_assert_int_eq(info.pairs, lines);
    ck_assert_uint_eq(tg_ctx_bytes(ctx), 0);
    /* tokenized: per pair 8 + 1 source ids and 8 target ids (4 bytes each), two offsets and a
     * line number (8 bytes each), each array at most twice its length (growth by doubling) */
    tg_ctx_set_memory_limit(ctx, 0);
    tg_tokenizer *tok = tg_tokenizer_bytes(ctx);
    tg_seq2seq_opts o = {.max_len = 9};
    tg_seq2seq_data *d = tg_seq2seq_load(ctx, path, tok, &o);
    ck_assert_ptr_nonnull(d);
    ck_assert_int_eq(tg_seq2seq_get_info(d).truncated_src, lines);
    ck_assert_int_le(tg_ctx_bytes(ctx), (size_t)lines * (17 * 4 + 3 * 8) * 2 + (256 << 10));
    tg_seq2seq_free(d);
    ck_assert_uint_eq(tg_ctx_bytes(ctx), 0);
    tg_tokenizer_free(tok);
    tu_rm_tree(dir);
    tu_ctx_free(ctx);
}
END_TEST

/* Every refusal names the file and the line; a refusal is a run-time error. */
START_TEST(test_pairs_refusals)
{
    tg_ctx *ctx = tu_ctx_new();
    char dir[64], path[4400];
    tu_mkdtemp(dir, sizeof dir, "pairs");
    static const struct {
        const char *text;
        size_t n;
        const char *want;
    } cases[] = {
        {"a\tb\nno tab here\n", 16, "bad.tsv:2: no tab; a pair is source<TAB>target"},
        {"a\tb\tc\n", 6, "bad.tsv:1: 2 tabs"},
        {"a\tb\n\na\tb\n", 9, "bad.tsv:2: an empty line"},
        {"a\tb\n\tb\n", 7, "bad.tsv:2: the source (first) side is empty"},
        {"a\tb\na\t\r\n", 8, "bad.tsv:2: the target (second) side is empty"},
        {"a\tb\nx\tb\xff\n", 9, "bad.tsv:2: not valid UTF-8 (byte 4 of the line, 0xff)"},
        {"a\tb\n\xc3\x28\tb\n", 9, "bad.tsv:2: not valid UTF-8"},
        {"a\tb\na\0c\tb\n", 10, "bad.tsv:2: a NUL byte (column 2)"},
        {"", 0, "bad.tsv: no sentence pairs (the file is empty)"},
        {"a\tb\r\nc\td\r", 9, NULL}, /* a final CR without LF: fine */
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        write_bytes(dir, "bad.tsv", cases[i].text, cases[i].n, path, sizeof path);
        tg_status st = tg_pairs_read(ctx, path, 0, NULL, NULL, NULL);
        if (!cases[i].want) {
            ck_assert_msg(st == TG_OK, "case %zu: %s", i, tg_ctx_message(ctx));
            continue;
        }
        ck_assert_msg(st == TG_ERR_FORMAT, "case %zu: %d", i, (int)st);
        tu_assert_error(ctx, TG_ERR_FORMAT, cases[i].want);
        ck_assert_ptr_nonnull(strstr(tg_ctx_message(ctx), "tg_pairs_read: "));
        ck_assert_ptr_nonnull(strstr(tg_ctx_message(ctx), dir));
        /* from memory, the label names it */
        st = tg_pairs_read_mem(ctx, cases[i].text, cases[i].n, "bad.tsv", 0, NULL, NULL, NULL);
        ck_assert_int_eq(st, TG_ERR_FORMAT);
        tu_assert_error(ctx, TG_ERR_FORMAT, cases[i].want);
    }
    /* file errors */
    ck_assert_int_eq(tg_pairs_read(ctx, "/nonexistent/x.tsv", 0, NULL, NULL, NULL), TG_ERR_IO);
    tu_assert_error(ctx, TG_ERR_IO, "cannot open '/nonexistent/x.tsv'");
    ck_assert_int_eq(tg_pairs_read(ctx, dir, 0, NULL, NULL, NULL), TG_ERR_IO);
    tu_assert_error(ctx, TG_ERR_IO, "is not a regular file (a directory)");
    /* run-time errors: the next call works */
    write_bytes(dir, "ok.tsv", "a\tb\n", 4, path, sizeof path);
    ck_assert_int_eq(tg_pairs_read(ctx, path, 0, NULL, NULL, NULL), TG_OK);
    ck_assert_int_eq(tg_ctx_status(ctx), TG_OK);
    /* the callback stops the read */
    collected c = {0};
    c.stop_at = 1;
    ck_assert_int_eq(tg_pairs_read(ctx, path, 0, collect, &c, NULL), TG_ERR_ARG);
    tu_assert_error(ctx, TG_ERR_ARG, "ok.tsv:1: the callback stopped the read");
    tu_rm_tree(dir);
    tu_ctx_free(ctx);
}
END_TEST

/* ===== tokenized pairs ======================================================================== */
static const char pairs_text[] = "ab\tXYZ\nabcdef\tQ\nx\tLONGER\n";

START_TEST(test_seq2seq_load)
{
    tg_ctx *ctx = tu_ctx_new();
    tg_tokenizer *tok = tg_tokenizer_bytes(ctx);
    tg_seq2seq_opts o = {.max_len = 5, .keep_text = true};
    tg_seq2seq_data *d = tg_seq2seq_load_mem(ctx, pairs_text, sizeof pairs_text - 1, "p.tsv",
                                             tok, &o);
    ck_assert_msg(d != NULL, "%s", tg_ctx_message(ctx));
    tg_seq2seq_info in = tg_seq2seq_get_info(d);
    ck_assert_int_eq(in.pairs, 3);
    ck_assert_int_eq(tg_seq2seq_count(d), 3);
    ck_assert_int_eq(in.max_len, 5);
    /* sources: "ab"+EOS (3), "abcd"+EOS (5, truncated), "x"+EOS (2)
     * targets: "XYZ" (T 4), "Q" (T 2), "LONG" (T 5, truncated) */
    ck_assert_int_eq(in.truncated_src, 1);
    ck_assert_int_eq(in.truncated_tgt, 1);
    ck_assert_int_eq(in.max_src, 5);
    ck_assert_int_eq(in.max_tgt, 5);
    ck_assert_int_eq(in.src_tokens, 3 + 5 + 2);
    ck_assert_int_eq(in.tgt_tokens, 4 + 2 + 5);
    ck_assert_int_eq(in.pad_id, TG_TOKEN_PAD);
    ck_assert(in.hash == fnv1a_ref(pairs_text, sizeof pairs_text - 1));
    ck_assert_uint_eq(in.bytes, sizeof pairs_text - 1);
    int64_t len;
    const int32_t *s = tg_seq2seq_source(d, 1, &len);
    ck_assert_int_eq(len, 5);
    const int32_t want_s[5] = {4 + 'a', 4 + 'b', 4 + 'c', 4 + 'd', TG_TOKEN_EOS};
    ck_assert_int_eq(memcmp(s, want_s, sizeof want_s), 0);
    const int32_t *t = tg_seq2seq_target(d, 2, &len);
    ck_assert_int_eq(len, 4);
    const int32_t want_t[4] = {4 + 'L', 4 + 'O', 4 + 'N', 4 + 'G'};
    ck_assert_int_eq(memcmp(t, want_t, sizeof want_t), 0);
    ck_assert_int_eq(tg_seq2seq_src_len(d, 0), 3);
    ck_assert_int_eq(tg_seq2seq_tgt_len(d, 0), 4);
    ck_assert_int_eq(tg_seq2seq_tgt_len(d, 1), 2);
    ck_assert_int_eq(tg_seq2seq_line(d, 2), 3);
    ck_assert_str_eq(tg_seq2seq_source_text(d, 1), "abcdef");
    ck_assert_str_eq(tg_seq2seq_target_text(d, 2), "LONGER");
    ck_assert_ptr_null(tg_seq2seq_source(d, 3, &len));
    ck_assert_int_eq(len, 0);
    ck_assert_ptr_null(tg_seq2seq_source_text(d, -1));
    tg_seq2seq_free(d);
    /* without keep_text: no texts */
    o.keep_text = false;
    d = tg_seq2seq_load_mem(ctx, pairs_text, sizeof pairs_text - 1, NULL, tok, &o);
    ck_assert_ptr_nonnull(d);
    ck_assert_ptr_null(tg_seq2seq_target_text(d, 0));
    tg_seq2seq_free(d);
    /* from a file: the same; refusals keep their file:line */
    char dir[64], path[4400];
    tu_mkdtemp(dir, sizeof dir, "s2s");
    write_bytes(dir, "p.tsv", pairs_text, sizeof pairs_text - 1, path, sizeof path);
    d = tg_seq2seq_load(ctx, path, tok, NULL);
    ck_assert_ptr_nonnull(d);
    ck_assert_int_eq(tg_seq2seq_get_info(d).max_len, 256);
    ck_assert_int_eq(tg_seq2seq_get_info(d).truncated_src, 0);
    tg_seq2seq_free(d);
    write_bytes(dir, "p.tsv", "a\tb\nc\n", 6, path, sizeof path);
    ck_assert_ptr_null(tg_seq2seq_load(ctx, path, tok, NULL));
    tu_assert_error(ctx, TG_ERR_FORMAT, "p.tsv:2: no tab");
    ck_assert_ptr_null(tg_seq2seq_load(ctx, "/nonexistent.tsv", tok, NULL));
    tu_assert_error(ctx, TG_ERR_IO, "cannot open");
    o.max_len = 1;
    ck_assert_ptr_null(tg_seq2seq_load_mem(ctx, "a\tb\n", 4, NULL, tok, &o));
    tu_assert_error(ctx, TG_ERR_ARG, "max_len 1 is outside [2, 2^30]");
    tu_rm_tree(dir);
    tg_tokenizer_free(tok);
    tu_ctx_free(ctx);
}
END_TEST

/* A tokenizer refusal names the file, line and side. */
static int64_t fail_encode(void *impl, const char *text, size_t n, int32_t *ids, int64_t cap,
                           char *err, size_t err_size)
{
    (void)impl, (void)ids, (void)cap;
    if (n && text[0] == '!') {
        snprintf(err, err_size, "no exclamations");
        return -1;
    }
    for (size_t i = 0; i < n && (int64_t)i < cap; i++)
        ids[i] = 4;
    return (int64_t)n;
}

START_TEST(test_seq2seq_tokenizer_error)
{
    tg_ctx *ctx = tu_ctx_new();
    tg_tokenizer_ops ops = {"strict", fail_encode, upper_decode, NULL, NULL};
    tg_token_ids sp = {0, 1, 2, -1};
    tg_tokenizer *tok = tg_tokenizer_new(ctx, &ops, NULL, 12, sp, NULL, 0);
    ck_assert_ptr_nonnull(tok);
    const char *t = "a\tb\nc\t!d\n";
    ck_assert_ptr_null(tg_seq2seq_load_mem(ctx, t, strlen(t), "x.tsv", tok, NULL));
    tu_assert_error(ctx, TG_ERR_ARG, "tg_seq2seq_load_mem: x.tsv:2: target: "
                                     "tg_tokenizer_encode: strict: no exclamations");
    /* pad -1: padding uses unk */
    tg_seq2seq_data *d = tg_seq2seq_load_mem(ctx, "a\tb\n", 4, NULL, tok, NULL);
    ck_assert_ptr_nonnull(d);
    ck_assert_int_eq(tg_seq2seq_get_info(d).pad_id, 0);
    tg_seq2seq_free(d);
    tg_tokenizer_free(tok);
    tu_ctx_free(ctx);
}
END_TEST

START_TEST(test_seq2seq_fill)
{
    tg_ctx *ctx = tu_ctx_new();
    tg_tokenizer *tok = tg_tokenizer_bytes(ctx);
    tg_seq2seq_opts o = {.max_len = 5};
    tg_seq2seq_data *d = tg_seq2seq_load_mem(ctx, pairs_text, sizeof pairs_text - 1, NULL, tok, &o);
    ck_assert_ptr_nonnull(d);
    const int64_t ex[2] = {2, 0}; /* "x" -> "LONG", "ab" -> "XYZ": S 3, T 5 */
    tg_tensor *src = tg_input(ctx, TG_I32, TG_DIMS(2, 3), "src");
    tg_tensor *mask = tg_input(ctx, TG_F32, TG_DIMS(2, 3), "mask");
    tg_tensor *dec = tg_input(ctx, TG_I32, TG_DIMS(2, 5), "dec");
    tg_tensor *lab = tg_input(ctx, TG_I32, TG_DIMS(2, 5), "lab");
    ck_assert_int_eq(tg_seq2seq_fill(d, ex, 2, src, mask, dec, lab), TG_OK);
    const int32_t P = TG_TOKEN_PAD, B = TG_TOKEN_BOS, E = TG_TOKEN_EOS;
    const int32_t want_src[6] = {4 + 'x', E, P, 4 + 'a', 4 + 'b', E};
    const float want_mask[6] = {0, 0, 1, 0, 0, 0};
    const int32_t want_dec[10] = {B, 4 + 'L', 4 + 'O', 4 + 'N', 4 + 'G',
                                  B, 4 + 'X', 4 + 'Y', 4 + 'Z', P};
    const int32_t want_lab[10] = {4 + 'L', 4 + 'O', 4 + 'N', 4 + 'G', E,
                                  4 + 'X', 4 + 'Y', 4 + 'Z', E, -100};
    ck_assert_int_eq(memcmp(tg_tensor_data(src), want_src, sizeof want_src), 0);
    ck_assert_int_eq(memcmp(tg_tensor_data(mask), want_mask, sizeof want_mask), 0);
    ck_assert_int_eq(memcmp(tg_tensor_data(dec), want_dec, sizeof want_dec), 0);
    ck_assert_int_eq(memcmp(tg_tensor_data(lab), want_lab, sizeof want_lab), 0);
    /* a wider f64 mask and source, NULL decoder tensors */
    tg_tensor *src4 = tg_input(ctx, TG_I32, TG_DIMS(2, 4), "src4");
    tg_tensor *mask4 = tg_input(ctx, TG_F64, TG_DIMS(2, 4), "mask4");
    ck_assert_int_eq(tg_seq2seq_fill(d, ex, 2, src4, mask4, NULL, NULL), TG_OK);
    const double want_m4[8] = {0, 0, 1, 1, 0, 0, 0, 1};
    ck_assert_int_eq(memcmp(tg_tensor_data(mask4), want_m4, sizeof want_m4), 0);
    ck_assert_int_eq(((int32_t *)tg_tensor_data(src4))[3], P);
    /* refusals, nothing written */
    tg_tensor *short_dec = tg_input(ctx, TG_I32, TG_DIMS(2, 4), "short");
    ck_assert_int_eq(tg_seq2seq_fill(d, ex, 2, src, mask, short_dec, lab), TG_ERR_SHAPE);
    tu_assert_error(ctx, TG_ERR_SHAPE, "dec_in is (2, 4); it must be (2, L) with L >= 5");
    ck_assert_int_eq(tg_seq2seq_fill(d, ex, 1, src, NULL, NULL, NULL), TG_ERR_SHAPE);
    tu_assert_error(ctx, TG_ERR_SHAPE, "src_ids is (2, 3)");
    ck_assert_int_eq(tg_seq2seq_fill(d, ex, 2, mask, NULL, NULL, NULL), TG_ERR_DTYPE);
    tu_assert_error(ctx, TG_ERR_DTYPE, "src_ids must be i32");
    ck_assert_int_eq(tg_seq2seq_fill(d, ex, 2, NULL, src, NULL, NULL), TG_ERR_DTYPE);
    tu_assert_error(ctx, TG_ERR_DTYPE, "src_pad_mask must be f32 or f64");
    ck_assert_int_eq(tg_seq2seq_fill(d, ex, 2, src, mask4, NULL, NULL), TG_ERR_SHAPE);
    tu_assert_error(ctx, TG_ERR_SHAPE, "differ in length");
    tg_tensor *op = tg_scale(ctx, mask, 2.0);
    ck_assert_ptr_nonnull(op);
    ck_assert_int_eq(tg_seq2seq_fill(d, ex, 2, NULL, op, NULL, NULL), TG_ERR_ARG);
    tu_assert_error(ctx, TG_ERR_ARG, "src_pad_mask must be a leaf (tg_input) with its own data");
    const int64_t bad[2] = {0, 3};
    ck_assert_int_eq(tg_seq2seq_fill(d, bad, 2, src, NULL, NULL, NULL), TG_ERR_ARG);
    tu_assert_error(ctx, TG_ERR_ARG, "example 3 (row 1) is outside [0, 3)");
    ck_assert_int_eq(memcmp(tg_tensor_data(src), want_src, sizeof want_src), 0);
    tg_seq2seq_free(d);
    tg_tokenizer_free(tok);
    tu_ctx_free(ctx);
}
END_TEST

/* ===== length-bucketed batches ================================================================== */
/* S = (3, 1, 2, 5), T = (2, 4, 2, 1), budget 8, seed 1, epoch 0, by hand:
 * sorted by (T, S): 3 (T 1), 2 (T 2, S 2), 0 (T 2, S 3), 1 (T 4) (no ties: rank unused);
 * packing: [3] (width 5; + example 2 would be 2 x 5 = 10 > 8), [2, 0] (2 x 3 = 6; + example 1
 * would be 3 x 4 = 12), [1]; the batch shuffle (splitmix64 continuing after the 3 draws of the
 * permutation) gives [1], [2, 0], [3] (also batch_plans.txt's first case). */
START_TEST(test_batches_by_hand)
{
    tg_ctx *ctx = tu_ctx_new();
    const int64_t S[4] = {3, 1, 2, 5}, T[4] = {2, 4, 2, 1};
    tg_batches *b = tg_batches_plan(ctx, S, T, 4, 8, 1, 0);
    ck_assert_ptr_nonnull(b);
    ck_assert_int_eq(tg_batches_count(b), 3);
    tg_batch x = tg_batches_get(b, 0);
    ck_assert_int_eq(x.n, 1);
    ck_assert_int_eq(x.examples[0], 1);
    ck_assert_int_eq(x.src_len, 1);
    ck_assert_int_eq(x.tgt_len, 4);
    x = tg_batches_get(b, 1);
    ck_assert_int_eq(x.n, 2);
    ck_assert_int_eq(x.examples[0], 2);
    ck_assert_int_eq(x.examples[1], 0);
    ck_assert_int_eq(x.src_len, 3);
    ck_assert_int_eq(x.tgt_len, 2);
    x = tg_batches_get(b, 2);
    ck_assert_int_eq(x.n, 1);
    ck_assert_int_eq(x.examples[0], 3);
    x = tg_batches_get(b, 3);
    ck_assert_int_eq(x.n, 0);
    ck_assert_ptr_null(x.examples);
    tg_batches_free(b);
    tu_ctx_free(ctx);
}
END_TEST

/* Plans made by an independent Python implementation (tests/fixtures/batches/
 * gen_batch_plans.py, what the PyTorch reference does). */
START_TEST(test_batches_fixture)
{
    tg_ctx *ctx = tu_ctx_new();
    FILE *f = fopen(TG_FIXTURES "/batches/batch_plans.txt", "r");
    ck_assert_ptr_nonnull(f);
    char word[16];
    int cases = 0;
    while (fscanf(f, "%15s", word) == 1) {
        ck_assert_str_eq(word, "case");
        long long n, budget, epoch;
        unsigned long long seed;
        ck_assert_int_eq(fscanf(f, "%lld %lld %llu %lld", &n, &budget, &seed, &epoch), 4);
        int64_t *S = malloc((size_t)n * sizeof *S), *T = malloc((size_t)n * sizeof *T);
        ck_assert(fscanf(f, "%15s", word) == 1 && !strcmp(word, "S"));
        for (long long i = 0; i < n; i++)
            ck_assert_int_eq(fscanf(f, "%" SCNd64, &S[i]), 1);
        ck_assert(fscanf(f, "%15s", word) == 1 && !strcmp(word, "T"));
        for (long long i = 0; i < n; i++)
            ck_assert_int_eq(fscanf(f, "%" SCNd64, &T[i]), 1);
        tg_batches *b = tg_batches_plan(ctx, S, T, n, budget, seed, epoch);
        ck_assert_msg(b != NULL, "%s", tg_ctx_message(ctx));
        int64_t nb = 0, seen = 0;
        while (fscanf(f, "%15s", word) == 1 && strcmp(word, "end") == 0 ? false : true) {
            ck_assert_str_eq(word, "batch");
            long long bs, bt;
            ck_assert_int_eq(fscanf(f, "%lld %lld", &bs, &bt), 2);
            tg_batch x = tg_batches_get(b, nb);
            ck_assert_msg(x.src_len == bs && x.tgt_len == bt, "case %d batch %lld", cases,
                          (long long)nb);
            for (int64_t k = 0; k < x.n; k++) {
                long long e;
                ck_assert_int_eq(fscanf(f, "%lld", &e), 1);
                ck_assert_msg(x.examples[k] == e, "case %d batch %lld item %lld", cases,
                              (long long)nb, (long long)k);
            }
            seen += x.n;
            nb++;
        }
        ck_assert_int_eq(nb, tg_batches_count(b));
        ck_assert_int_eq(seen, n);
        tg_batches_free(b);
        free(S);
        free(T);
        cases++;
    }
    fclose(f);
    ck_assert_int_eq(cases, 18);
    tu_ctx_free(ctx);
}
END_TEST

/* Random lengths: every batch within budget and sorted, each example once per epoch, same
 * seed same plan, other epochs and seeds other plans. */
START_TEST(test_batches_properties)
{
    tg_ctx *ctx = tu_ctx_new();
    enum { N = 500 };
    int64_t S[N], T[N];
    uint64_t r = 12345;
    for (int i = 0; i < N; i++) {
        r = r * 6364136223846793005ULL + 1442695040888963407ULL;
        S[i] = 1 + (int64_t)((r >> 33) % 40);
        T[i] = 1 + (int64_t)((r >> 13) % 40);
    }
    const int64_t budget = 200;
    int64_t first[N];
    for (int epoch = 0; epoch < 3; epoch++) {
        tg_batches *b = tg_batches_plan(ctx, S, T, N, budget, 7, epoch);
        ck_assert_ptr_nonnull(b);
        int count[N] = {0};
        int64_t pos = 0, flat[N];
        for (int64_t q = 0; q < tg_batches_count(b); q++) {
            tg_batch x = tg_batches_get(b, q);
            ck_assert_int_ge(x.n, 1);
            int64_t ms = 0, mt = 0;
            for (int64_t k = 0; k < x.n; k++) {
                int64_t e = x.examples[k];
                count[e]++;
                flat[pos++] = e;
                ms = S[e] > ms ? S[e] : ms;
                mt = T[e] > mt ? T[e] : mt;
                if (k > 0) {
                    int64_t p = x.examples[k - 1];
                    ck_assert(T[p] < T[e] || (T[p] == T[e] && S[p] <= S[e]));
                }
            }
            ck_assert_int_eq(ms, x.src_len);
            ck_assert_int_eq(mt, x.tgt_len);
            ck_assert_int_le(x.n * (ms > mt ? ms : mt), budget);
        }
        ck_assert_int_eq(pos, N);
        for (int i = 0; i < N; i++)
            ck_assert_int_eq(count[i], 1);
        /* the same seed and epoch: the same plan */
        tg_batches *again = tg_batches_plan(ctx, S, T, N, budget, 7, epoch);
        ck_assert_int_eq(tg_batches_count(again), tg_batches_count(b));
        for (int64_t q = 0; q < tg_batches_count(b); q++) {
            tg_batch x = tg_batches_get(b, q), y = tg_batches_get(again, q);
            ck_assert_int_eq(x.n, y.n);
            ck_assert_int_eq(memcmp(x.examples, y.examples, (size_t)x.n * sizeof(int64_t)), 0);
        }
        tg_batches_free(again);
        if (epoch == 0)
            memcpy(first, flat, sizeof flat);
        else
            ck_assert_int_ne(memcmp(first, flat, sizeof flat), 0);
        tg_batches_free(b);
    }
    /* another seed, same epoch: another order */
    tg_batches *b = tg_batches_plan(ctx, S, T, N, budget, 8, 0);
    int64_t pos = 0, flat[N];
    for (int64_t q = 0; q < tg_batches_count(b); q++) {
        tg_batch x = tg_batches_get(b, q);
        for (int64_t k = 0; k < x.n; k++)
            flat[pos++] = x.examples[k];
    }
    ck_assert_int_ne(memcmp(first, flat, sizeof flat), 0);
    tg_batches_free(b);
    tu_ctx_free(ctx);
}
END_TEST

START_TEST(test_batches_errors)
{
    tg_ctx *ctx = tu_ctx_new();
    const int64_t S[3] = {3, 9, 2}, T[3] = {4, 1, 2};
    ck_assert_ptr_null(tg_batches_plan(ctx, S, T, 3, 8, 0, 0));
    tu_assert_error(ctx, TG_ERR_ARG, "batch_tokens 8 is smaller than example 1's length 9");
    ck_assert_ptr_null(tg_batches_plan(ctx, S, T, 3, 9, 0, -1));
    tu_assert_error(ctx, TG_ERR_ARG, "epoch < 0");
    ck_assert_ptr_null(tg_batches_plan(ctx, S, T, 0, 9, 0, 0));
    tu_assert_error(ctx, TG_ERR_ARG, "no examples");
    const int64_t Z[1] = {0};
    ck_assert_ptr_null(tg_batches_plan(ctx, Z, T, 1, 9, 0, 0));
    tu_assert_error(ctx, TG_ERR_ARG, "length < 1");
    tg_batches *b = tg_batches_plan(ctx, S, T, 3, 9, 0, 0);
    ck_assert_ptr_nonnull(b);
    ck_assert_int_eq(tg_ctx_status(ctx), TG_OK);
    tg_batches_free(b);
    /* from data: the message names the line */
    tg_tokenizer *tok = tg_tokenizer_bytes(ctx);
    tg_seq2seq_data *d = tg_seq2seq_load_mem(ctx, pairs_text, sizeof pairs_text - 1, NULL, tok,
                                             NULL);
    ck_assert_ptr_null(tg_seq2seq_batches(d, 6, 1, 0));
    tu_assert_error(ctx, TG_ERR_ARG, "batch_tokens 6 is smaller than the pair on line 2 (length 7");
    b = tg_seq2seq_batches(d, 7, 1, 0);
    ck_assert_ptr_nonnull(b);
    int64_t total = 0;
    for (int64_t q = 0; q < tg_batches_count(b); q++)
        total += tg_batches_get(b, q).n;
    ck_assert_int_eq(total, 3);
    tg_batches_free(b);
    tg_seq2seq_free(d);
    tg_tokenizer_free(tok);
    tu_ctx_free(ctx);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("data");
    TCase *tc = tu_tcase(s, "tokenizer", 0);
    tcase_add_test(tc, test_bytes_round_trip);
    tcase_add_test(tc, test_encode_refuses_bad_text);
    tcase_add_test(tc, test_decode_replaces_invalid);
    tcase_add_test(tc, test_custom_tokenizer);
    tcase_add_test(tc, test_sampled_custom_nbest);
    tcase_add_test(tc, test_tokenizer_meta_round_trip);
    tcase_add_test(tc, test_tokenizer_meta_refusals);
    tc = tu_tcase(s, "pairs", 0);
    tcase_add_test(tc, test_pairs_read_ok);
    tcase_add_test(tc, test_pairs_refusals);
    tcase_add_test(tc, test_pairs_bounded_memory);
    tcase_add_test(tc, test_seq2seq_load);
    tcase_add_test(tc, test_seq2seq_tokenizer_error);
    tcase_add_test(tc, test_seq2seq_fill);
    tcase_add_test(tc, test_sample_memo);
    tc = tu_tcase(s, "batches", 0);
    tcase_add_test(tc, test_batches_by_hand);
    tcase_add_test(tc, test_batches_fixture);
    tcase_add_test(tc, test_batches_properties);
    tcase_add_test(tc, test_batches_errors);
    return tu_run(s);
}
