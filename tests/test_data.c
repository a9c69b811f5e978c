/*
 * test_data.c - tgrad_data.h: tokenizers (the byte tokenizer, the generic wrappers' checks,
 * a custom implementation through tg_tokenizer_new).
 */
#include "testutil.h"
#include "tgrad_data.h"

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

START_TEST(test_custom_tokenizer)
{
    tg_ctx *ctx = tu_ctx_new();
    tg_tokenizer_ops ops = {"upper", upper_encode, upper_decode, upper_free};
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

int main(void)
{
    Suite *s = suite_create("data");
    TCase *tc = tu_tcase(s, "tokenizer", 0);
    tcase_add_test(tc, test_bytes_round_trip);
    tcase_add_test(tc, test_encode_refuses_bad_text);
    tcase_add_test(tc, test_decode_replaces_invalid);
    tcase_add_test(tc, test_custom_tokenizer);
    return tu_run(s);
}
