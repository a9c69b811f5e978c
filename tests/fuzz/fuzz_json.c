/*
 * fuzz_json.c - libFuzzer harness for the internal JSON pull parser (src/io/json.h).
 *
 * Links against the static library, whose internal tg__jp_* symbols are visible (they are
 * hidden only in the shared one). Per input, on a fresh context with a capped allocator:
 * 1. Walk the whole value with the typed calls (objects, arrays, strings, numbers; true, false
 *    and null through tg__jp_skip), then tg__jp_end. Each string must be NUL-terminated valid
 *    UTF-8 no longer than its quoted source, and equal to it when the source has no escape;
 *    each number's source text must match the RFC 8259 grammar and its is_int / neg / big /
 *    mag must be what that text says.
 * 2. Parse the same text with tg__jp_skip alone: same verdict, status and final position.
 * 3. Memory stays proportional to the input (FZ_AMP). A rejection records TG_ERR_JSON (or NOMEM) with a one-line message; after tg__jp_free the
 *    context holds what it held before tg__jp_init.
 */
#include "fuzz_util.h"

#include "io/io.h"
#include "io/json.h"

#include <string.h>

static const char FN[] = "fuzz_json";

static void check_string(const tg__jp *jp, tg__jstr s, size_t src_pos, size_t src_end)
{
    if (s.p[s.len] != '\0')
        fz_die(jp->ctx, "string at byte %zu: not NUL-terminated", src_pos);
    if (!tg__utf8_valid(s.p, s.len, NULL))
        fz_die(jp->ctx, "string at byte %zu: decoded to invalid UTF-8", src_pos);
    size_t inner = src_end - src_pos - 2; /* without the quotes */
    if (s.len > inner)
        fz_die(jp->ctx, "string at byte %zu: %zu bytes decoded from %zu", src_pos, s.len, inner);
    const unsigned char *src = jp->s + src_pos + 1;
    if (!memchr(src, '\\', inner) && (s.len != inner || memcmp(s.p, src, inner) != 0))
        fz_die(jp->ctx, "string at byte %zu: has no escape but decoded differently", src_pos);
}

static bool digit(unsigned char c) { return c >= '0' && c <= '9'; }

/* Check a number against its source text t[0..n): the grammar
 * -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)? and the fields tg__jp_number reports. */
static void check_number(const tg__jp *jp, size_t at, size_t end, tg__jnum v)
{
    const unsigned char *t = jp->s + at;
    size_t n = end - at, i = 0;
    bool neg = false, is_int = true, big = false;
    uint64_t mag = 0;
    if (i < n && t[i] == '-') {
        neg = true;
        i++;
    }
    if (i >= n || !digit(t[i]) || (t[i] == '0' && i + 1 < n && digit(t[i + 1])))
        fz_die(jp->ctx, "number at byte %zu: bad integer part", at);
    for (; i < n && digit(t[i]); i++) {
        unsigned d = (unsigned)(t[i] - '0');
        if (big || mag > (UINT64_MAX - d) / 10)
            big = true;
        else
            mag = mag * 10 + d;
    }
    if (i < n && t[i] == '.') {
        is_int = false;
        if (++i >= n || !digit(t[i]))
            fz_die(jp->ctx, "number at byte %zu: no digit after '.'", at);
        while (i < n && digit(t[i]))
            i++;
    }
    if (i < n && (t[i] == 'e' || t[i] == 'E')) {
        is_int = false;
        i++;
        if (i < n && (t[i] == '+' || t[i] == '-'))
            i++;
        if (i >= n || !digit(t[i]))
            fz_die(jp->ctx, "number at byte %zu: no digit in the exponent", at);
        while (i < n && digit(t[i]))
            i++;
    }
    if (i != n)
        fz_die(jp->ctx, "number at byte %zu: %zu bytes consumed, the grammar takes %zu", at, n, i);
    if (v.is_int != is_int)
        fz_die(jp->ctx, "number at byte %zu: is_int %d, text says %d", at, v.is_int, is_int);
    if (is_int) {
        if (v.big != big || (!big && v.mag != mag))
            fz_die(jp->ctx, "number at byte %zu: big %d mag %llu, text says big %d mag %llu", at,
                   v.big, (unsigned long long)v.mag, big, (unsigned long long)mag);
        bool want_neg = neg && (big || mag != 0); /* -0 is 0 */
        if (v.neg != want_neg)
            fz_die(jp->ctx, "number at byte %zu: neg %d, text says %d", at, v.neg, want_neg);
    }
}

static bool walk(tg__jp *jp)
{
    tg__jstr s;
    tg__jnum num;
    tg__jtype ty = tg__jp_peek(jp);
    size_t at = jp->pos; /* peek skipped the whitespace */
    switch (ty) {
    case TG__J_OBJECT:
        if (!tg__jp_obj_begin(jp))
            return false;
        for (;;) {
            size_t kat = jp->pos;
            if (!tg__jp_obj_next(jp, &s))
                break;
            if (s.p[s.len] != '\0' || !tg__utf8_valid(s.p, s.len, NULL))
                fz_die(jp->ctx, "object key after byte %zu: bad decoded key", kat);
            if (!walk(jp))
                return false;
        }
        return !jp->err;
    case TG__J_ARRAY:
        if (!tg__jp_arr_begin(jp))
            return false;
        while (tg__jp_arr_next(jp))
            if (!walk(jp))
                return false;
        return !jp->err;
    case TG__J_STRING:
        if (!tg__jp_string(jp, &s))
            return false;
        check_string(jp, s, at, jp->pos);
        return true;
    case TG__J_NUMBER:
        if (!tg__jp_number(jp, &num))
            return false;
        check_number(jp, at, jp->pos, num);
        return true;
    case TG__J_BOOL:
    case TG__J_NULL:
    case TG__J_ERROR:
        break;
    }
    return tg__jp_skip(jp);
}

static void check_rejection(tg_ctx *ctx, const tg__jp *jp)
{
    if (jp->err != TG_ERR_JSON && jp->err != TG_ERR_NOMEM)
        fz_die(ctx, "rejected with jp->err %s", tg_status_str(jp->err));
    if (tg_ctx_status(ctx) != jp->err)
        fz_die(ctx, "jp->err %s but the context has %s", tg_status_str(jp->err),
               tg_status_str(tg_ctx_status(ctx)));
    if (jp->err == TG_ERR_JSON && !strstr(tg_ctx_message(ctx), ": invalid JSON header at byte "))
        fz_die(ctx, "the message does not give the byte offset");
    static const tg_status allowed[] = {TG_ERR_JSON, TG_ERR_NOMEM, TG_OK};
    fz_check_failure(ctx, FN, tg_ctx_bytes(ctx), allowed);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fz_alloc A;
    tg_ctx *ctx = fz_ctx_new(&A, FZ_CAP);
    size_t before = tg_ctx_bytes(ctx);
    const char *text = (const char *)data;

    tg__jp jp;
    size_t live0 = fz_peak_start(&A);
    bool ok1 = tg__jp_init(&jp, ctx, FN, "<fuzz>", text, size) == TG_OK && walk(&jp) &&
               tg__jp_end(&jp);
    if (ok1 && (jp.err != TG_OK || jp.depth != 0 || jp.pos != size))
        fz_die(ctx, "accepted with err %s, depth %d, position %zu of %zu",
               tg_status_str(jp.err), jp.depth, jp.pos, size);
    if (!ok1)
        check_rejection(ctx, &jp);
    fz_check_peak(&A, live0, size, FN);
    tg_status err1 = jp.err;
    size_t pos1 = jp.pos;
    tg__jp_free(&jp);
    if (tg_ctx_bytes(ctx) != before)
        fz_die(ctx, "tg__jp_free left %zu bytes", tg_ctx_bytes(ctx) - before);
    tg_ctx_clear_error(ctx);

    tg__jp jp2;
    bool ok2 = tg__jp_init(&jp2, ctx, FN, "<fuzz>", text, size) == TG_OK && tg__jp_skip(&jp2) &&
               tg__jp_end(&jp2);
    if (ok1 != ok2 || jp2.err != err1 || jp2.pos != pos1)
        fz_die(ctx, "typed walk: %s (%s at byte %zu); tg__jp_skip: %s (%s at byte %zu)",
               ok1 ? "accepted" : "rejected", tg_status_str(err1), pos1,
               ok2 ? "accepted" : "rejected", tg_status_str(jp2.err), jp2.pos);
    tg__jp_free(&jp2);
    fz_ctx_free(ctx, &A);
    return 0;
}
