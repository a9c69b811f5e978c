/*
 * json.h - a small strict pull parser for JSON (RFC 8259), used for safetensors headers.
 *
 * No document tree is built: the caller walks the text with begin/next calls, so memory stays
 * proportional to what the caller keeps (decoded strings go to one buffer no larger than the
 * input). Everything the grammar allows is accepted (objects, arrays, strings with every escape
 * including \uXXXX surrogate pairs, numbers, true, false, null) and everything else rejected:
 * raw control characters, invalid UTF-8, leading zeros, trailing commas, nesting deeper than
 * TG__JSON_MAX_DEPTH, anything but whitespace after the top-level value.
 *
 * Errors are sticky: the first one is recorded on the context as
 * "fn: label: invalid JSON header at byte 17: expected ':' after an object key"
 * (TG_ERR_JSON, or TG_ERR_NOMEM), after which every call returns false.
 */
#ifndef TG_JSON_H
#define TG_JSON_H

#include "core.h"

#define TG__JSON_MAX_DEPTH 64

typedef enum tg__jtype {
    TG__J_ERROR = 0, /* end of input or not the start of a value */
    TG__J_NULL,
    TG__J_BOOL,
    TG__J_NUMBER,
    TG__J_STRING,
    TG__J_ARRAY,
    TG__J_OBJECT
} tg__jtype;

/* A decoded string: NUL-terminated, valid UTF-8; may contain NUL bytes (from \u0000), so
 * use len. Valid until tg__jp_free. */
typedef struct tg__jstr {
    const char *p;
    size_t len;
} tg__jstr;

/* A number. Only integers carry a value: is_int (no fraction or exponent), neg, and the
 * magnitude mag, or big if it does not fit 64 bits. */
typedef struct tg__jnum {
    bool is_int, neg, big;
    uint64_t mag;
} tg__jnum;

typedef struct tg__jp {
    tg_ctx *ctx;
    const char *fn, *label;
    const unsigned char *s;
    size_t n, pos;
    int depth;
    bool first[TG__JSON_MAX_DEPTH + 1]; /* per open container: no member read yet */
    char kind[TG__JSON_MAX_DEPTH + 1];  /* '{' or '[' per open container */
    tg_status err;
    char *sbuf; /* decoded strings, capacity n + 1 */
    size_t slen;
} tg__jp;

/* Prepare to parse text[0..n). Allocates the string buffer (TG_ERR_NOMEM; TG_ERR_ARG for a
 * NULL text with n > 0). Any sequence of the calls below is safe on any input (the fuzz
 * harnesses rely on it): a call out of place (obj_next outside an object, arr_next outside an
 * array) is a TG_ERR_JSON error, and after the first error every call returns false. */
tg_status tg__jp_init(tg__jp *jp, tg_ctx *ctx, const char *fn, const char *label,
                      const char *text, size_t n);
void tg__jp_free(tg__jp *jp);
/* Record a TG_ERR_JSON-style error at the current position (first error sticks). */
void tg__jp_fail(tg__jp *jp, tg_status s, const char *what);

/* Type of the next value (whitespace skipped, nothing consumed); TG__J_ERROR if none. */
tg__jtype tg__jp_peek(tg__jp *jp);
/* Containers. *_begin consumes the opening bracket. obj_next reads the next member's key and
 * ':' and returns true, or consumes '}' and returns false (also false on error: check err).
 * arr_next returns true if another element follows, or consumes ']' and returns false. */
bool tg__jp_obj_begin(tg__jp *jp);
bool tg__jp_obj_next(tg__jp *jp, tg__jstr *key);
bool tg__jp_arr_begin(tg__jp *jp);
bool tg__jp_arr_next(tg__jp *jp);
/* Scalars: consume a value of that type (false and an error otherwise). */
bool tg__jp_string(tg__jp *jp, tg__jstr *out);
bool tg__jp_number(tg__jp *jp, tg__jnum *out);
/* Consume any value, fully validated. */
bool tg__jp_skip(tg__jp *jp);
/* After the top-level value: only whitespace may remain. */
bool tg__jp_end(tg__jp *jp);

#endif /* TG_JSON_H */
