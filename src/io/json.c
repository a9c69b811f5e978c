/*
 * json.c - strict JSON pull parser (RFC 8259 grammar), see json.h.
 */
#include "json.h"

#include "io.h"

tg_status tg__jp_init(tg__jp *jp, tg_ctx *ctx, const char *fn, const char *label,
                      const char *text, size_t n)
{
    memset(jp, 0, sizeof *jp);
    jp->ctx = ctx;
    jp->fn = fn ? fn : "json";
    jp->label = label ? label : "<json>";
    jp->s = (const unsigned char *)text;
    jp->n = n;
    if (!text && n) {
        jp->err = TG_ERR_ARG;
        tg__err(ctx, TG_ERR_ARG, jp->fn, "%s: JSON text is NULL", jp->label);
        return TG_ERR_ARG;
    }
    if (n == SIZE_MAX) {
        jp->err = TG_ERR_NOMEM;
        tg__err(ctx, TG_ERR_NOMEM, jp->fn, "%s: JSON text too large", jp->label);
        return TG_ERR_NOMEM;
    }
    /* Every decoded string plus its NUL is no longer than its quoted source, so n + 1 bytes
     * hold all strings of the text. */
    jp->sbuf = tg__alloc(ctx, n + 1, jp->fn);
    if (!jp->sbuf) {
        jp->err = TG_ERR_NOMEM;
        return TG_ERR_NOMEM;
    }
    return TG_OK;
}

void tg__jp_free(tg__jp *jp)
{
    if (jp->ctx)
        tg__free(jp->ctx, jp->sbuf);
    jp->sbuf = NULL;
}

void tg__jp_fail(tg__jp *jp, tg_status s, const char *what)
{
    if (jp->err)
        return;
    jp->err = s;
    tg__err(jp->ctx, s, jp->fn, "%s: invalid JSON header at byte %zu: %s", jp->label, jp->pos,
            what);
}

static void skip_ws(tg__jp *jp)
{
    while (jp->pos < jp->n) {
        unsigned char c = jp->s[jp->pos];
        if (c != ' ' && c != '\t' && c != '\n' && c != '\r')
            break;
        jp->pos++;
    }
}

/* Next byte after whitespace, or -1 at the end. */
static int look(tg__jp *jp)
{
    skip_ws(jp);
    return jp->pos < jp->n ? jp->s[jp->pos] : -1;
}

tg__jtype tg__jp_peek(tg__jp *jp)
{
    if (jp->err)
        return TG__J_ERROR;
    int c = look(jp);
    switch (c) {
    case '{': return TG__J_OBJECT;
    case '[': return TG__J_ARRAY;
    case '"': return TG__J_STRING;
    case 't': case 'f': return TG__J_BOOL;
    case 'n': return TG__J_NULL;
    default: return (c == '-' || (c >= '0' && c <= '9')) ? TG__J_NUMBER : TG__J_ERROR;
    }
}

static bool open_container(tg__jp *jp, char kind)
{
    if (jp->err)
        return false;
    if (look(jp) != kind) {
        tg__jp_fail(jp, TG_ERR_JSON, kind == '{' ? "expected an object" : "expected an array");
        return false;
    }
    if (jp->depth >= TG__JSON_MAX_DEPTH) {
        tg__jp_fail(jp, TG_ERR_JSON, "nesting deeper than 64 levels");
        return false;
    }
    jp->pos++;
    jp->depth++;
    jp->first[jp->depth] = true;
    jp->kind[jp->depth] = kind;
    return true;
}

bool tg__jp_obj_begin(tg__jp *jp) { return open_container(jp, '{'); }
bool tg__jp_arr_begin(tg__jp *jp) { return open_container(jp, '['); }

/* Shared by obj_next and arr_next: returns 1 if a member/element follows, 0 at the closing
 * bracket (consumed), -1 on error. */
static int next_member(tg__jp *jp, char close)
{
    if (jp->err)
        return -1;
    /* misuse by a caller (a next without its begin, or an object's next inside an array) is an
     * error, never a read outside first[] / kind[] */
    if (jp->depth < 1 || jp->kind[jp->depth] != (close == '}' ? '{' : '[')) {
        tg__jp_fail(jp, TG_ERR_JSON, close == '}' ? "not inside an object" : "not inside an array");
        return -1;
    }
    int c = look(jp);
    if (c < 0) {
        tg__jp_fail(jp, TG_ERR_JSON, close == '}' ? "unterminated object" : "unterminated array");
        return -1;
    }
    if (c == close) {
        jp->pos++;
        jp->depth--;
        return 0;
    }
    if (jp->first[jp->depth]) {
        jp->first[jp->depth] = false;
        return 1;
    }
    if (c != ',') {
        tg__jp_fail(jp, TG_ERR_JSON, close == '}' ? "expected ',' or '}' in an object"
                                                  : "expected ',' or ']' in an array");
        return -1;
    }
    jp->pos++;
    c = look(jp);
    if (c == close) {
        tg__jp_fail(jp, TG_ERR_JSON, "trailing comma");
        return -1;
    }
    return 1;
}

bool tg__jp_obj_next(tg__jp *jp, tg__jstr *key)
{
    if (next_member(jp, '}') != 1)
        return false;
    if (look(jp) != '"') {
        tg__jp_fail(jp, TG_ERR_JSON, "expected a string key");
        return false;
    }
    if (!tg__jp_string(jp, key))
        return false;
    if (look(jp) != ':') {
        tg__jp_fail(jp, TG_ERR_JSON, "expected ':' after an object key");
        return false;
    }
    jp->pos++;
    return true;
}

bool tg__jp_arr_next(tg__jp *jp) { return next_member(jp, ']') == 1; }

/* Four hex digits at pos (after "\u"); -1 if malformed. */
static long hex4(tg__jp *jp)
{
    if (jp->n - jp->pos < 4)
        return -1;
    long v = 0;
    for (int i = 0; i < 4; i++) {
        int h = tg__hex_digit((unsigned char)jp->s[jp->pos + (size_t)i]);
        if (h < 0)
            return -1;
        v = v * 16 + h;
    }
    jp->pos += 4;
    return v;
}

static void put_utf8(tg__jp *jp, uint32_t cp)
{
    char *o = jp->sbuf + jp->slen;
    if (cp < 0x80) {
        o[0] = (char)cp;
        jp->slen += 1;
    } else if (cp < 0x800) {
        o[0] = (char)(0xc0 | cp >> 6);
        o[1] = (char)(0x80 | (cp & 0x3f));
        jp->slen += 2;
    } else if (cp < 0x10000) {
        o[0] = (char)(0xe0 | cp >> 12);
        o[1] = (char)(0x80 | (cp >> 6 & 0x3f));
        o[2] = (char)(0x80 | (cp & 0x3f));
        jp->slen += 3;
    } else {
        o[0] = (char)(0xf0 | cp >> 18);
        o[1] = (char)(0x80 | (cp >> 12 & 0x3f));
        o[2] = (char)(0x80 | (cp >> 6 & 0x3f));
        o[3] = (char)(0x80 | (cp & 0x3f));
        jp->slen += 4;
    }
}

/* A \uXXXX escape (jp->pos after the 'u'), a surrogate pair joined, as UTF-8 into sbuf. */
static bool unicode_escape(tg__jp *jp)
{
    long cp = hex4(jp);
    if (cp < 0) {
        tg__jp_fail(jp, TG_ERR_JSON, "\\u must be followed by four hex digits");
        return false;
    }
    if (cp >= 0xdc00 && cp <= 0xdfff) {
        tg__jp_fail(jp, TG_ERR_JSON, "unpaired low surrogate in \\u escape");
        return false;
    }
    if (cp >= 0xd800 && cp <= 0xdbff) {
        long lo = -1;
        if (jp->n - jp->pos >= 2 && jp->s[jp->pos] == '\\' && jp->s[jp->pos + 1] == 'u') {
            jp->pos += 2;
            lo = hex4(jp);
        }
        if (lo < 0xdc00 || lo > 0xdfff) {
            tg__jp_fail(jp, TG_ERR_JSON, "unpaired high surrogate in \\u escape");
            return false;
        }
        cp = 0x10000 + ((cp - 0xd800) << 10) + (lo - 0xdc00);
    }
    put_utf8(jp, (uint32_t)cp);
    return true;
}

/* An escape sequence (jp->pos after the backslash) into sbuf. */
static bool escape(tg__jp *jp)
{
    if (jp->pos >= jp->n) {
        tg__jp_fail(jp, TG_ERR_JSON, "unterminated string");
        return false;
    }
    unsigned char e = jp->s[jp->pos++];
    char lit;
    switch (e) {
    case '"': lit = '"'; break;
    case '\\': lit = '\\'; break;
    case '/': lit = '/'; break;
    case 'b': lit = '\b'; break;
    case 'f': lit = '\f'; break;
    case 'n': lit = '\n'; break;
    case 'r': lit = '\r'; break;
    case 't': lit = '\t'; break;
    case 'u': return unicode_escape(jp);
    default:
        jp->pos--;
        tg__jp_fail(jp, TG_ERR_JSON, "invalid escape sequence");
        return false;
    }
    jp->sbuf[jp->slen++] = lit;
    return true;
}

bool tg__jp_string(tg__jp *jp, tg__jstr *out)
{
    if (jp->err)
        return false;
    if (look(jp) != '"') {
        tg__jp_fail(jp, TG_ERR_JSON, "expected a string");
        return false;
    }
    jp->pos++;
    size_t start = jp->slen;
    for (;;) {
        if (jp->pos >= jp->n) {
            tg__jp_fail(jp, TG_ERR_JSON, "unterminated string");
            return false;
        }
        unsigned char c = jp->s[jp->pos];
        if (c == '"') {
            jp->pos++;
            break;
        }
        if (c < 0x20) {
            tg__jp_fail(jp, TG_ERR_JSON, "raw control character in a string");
            return false;
        }
        if (c == '\\') {
            jp->pos++;
            if (!escape(jp))
                return false;
            continue;
        }
        size_t k = tg__utf8_len(jp->s + jp->pos, jp->n - jp->pos);
        if (!k) {
            tg__jp_fail(jp, TG_ERR_JSON, "invalid UTF-8 in a string");
            return false;
        }
        memcpy(jp->sbuf + jp->slen, jp->s + jp->pos, k);
        jp->slen += k;
        jp->pos += k;
    }
    jp->sbuf[jp->slen++] = '\0';
    out->p = jp->sbuf + start;
    out->len = jp->slen - start - 1;
    return true;
}

static bool is_digit(tg__jp *jp)
{
    return jp->pos < jp->n && jp->s[jp->pos] >= '0' && jp->s[jp->pos] <= '9';
}

bool tg__jp_number(tg__jp *jp, tg__jnum *out)
{
    if (jp->err)
        return false;
    int c = look(jp);
    tg__jnum v = {true, false, false, 0};
    if (c == '-') {
        v.neg = true;
        jp->pos++;
    }
    if (!is_digit(jp)) {
        tg__jp_fail(jp, TG_ERR_JSON, "expected a number");
        return false;
    }
    if (jp->s[jp->pos] == '0') {
        jp->pos++;
        if (is_digit(jp)) {
            tg__jp_fail(jp, TG_ERR_JSON, "number with a leading zero");
            return false;
        }
    } else {
        while (is_digit(jp)) {
            unsigned d = (unsigned)(jp->s[jp->pos] - '0');
            if (v.mag > (UINT64_MAX - d) / 10)
                v.big = true;
            else
                v.mag = v.mag * 10 + d;
            jp->pos++;
        }
    }
    if (jp->pos < jp->n && jp->s[jp->pos] == '.') {
        jp->pos++;
        v.is_int = false;
        if (!is_digit(jp)) {
            tg__jp_fail(jp, TG_ERR_JSON, "expected a digit after '.'");
            return false;
        }
        while (is_digit(jp))
            jp->pos++;
    }
    if (jp->pos < jp->n && (jp->s[jp->pos] == 'e' || jp->s[jp->pos] == 'E')) {
        jp->pos++;
        v.is_int = false;
        if (jp->pos < jp->n && (jp->s[jp->pos] == '+' || jp->s[jp->pos] == '-'))
            jp->pos++;
        if (!is_digit(jp)) {
            tg__jp_fail(jp, TG_ERR_JSON, "expected a digit in the exponent");
            return false;
        }
        while (is_digit(jp))
            jp->pos++;
    }
    if (v.neg && v.mag == 0 && !v.big)
        v.neg = false; /* -0 is 0 */
    *out = v;
    return true;
}

static bool literal(tg__jp *jp, const char *word)
{
    size_t k = strlen(word);
    if (jp->n - jp->pos < k || memcmp(jp->s + jp->pos, word, k) != 0) {
        tg__jp_fail(jp, TG_ERR_JSON, "invalid literal (expected true, false or null)");
        return false;
    }
    jp->pos += k;
    return true;
}

bool tg__jp_skip(tg__jp *jp)
{
    tg__jstr str;
    tg__jnum num;
    switch (tg__jp_peek(jp)) {
    case TG__J_OBJECT:
        if (!tg__jp_obj_begin(jp))
            return false;
        while (tg__jp_obj_next(jp, &str))
            if (!tg__jp_skip(jp))
                return false;
        return !jp->err;
    case TG__J_ARRAY:
        if (!tg__jp_arr_begin(jp))
            return false;
        while (tg__jp_arr_next(jp))
            if (!tg__jp_skip(jp))
                return false;
        return !jp->err;
    case TG__J_STRING: return tg__jp_string(jp, &str);
    case TG__J_NUMBER: return tg__jp_number(jp, &num);
    case TG__J_BOOL: return literal(jp, jp->s[jp->pos] == 't' ? "true" : "false");
    case TG__J_NULL: return literal(jp, "null");
    case TG__J_ERROR: break;
    }
    tg__jp_fail(jp, TG_ERR_JSON, jp->pos < jp->n ? "expected a value" : "unexpected end of header");
    return false;
}

bool tg__jp_end(tg__jp *jp)
{
    if (jp->err)
        return false;
    if (look(jp) >= 0) {
        tg__jp_fail(jp, TG_ERR_JSON, "unexpected data after the top-level value");
        return false;
    }
    return true;
}
