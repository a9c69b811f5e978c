/*
 * utf8.c - strict UTF-8 validation and decoding (RFC 3629: no overlong forms, no surrogates,
 * nothing above U+10FFFF), shared by the tokenizers, the pairs reader and the metrics.
 */
#include "core.h"

size_t tg__utf8_next(const unsigned char *s, size_t n, uint32_t *cp)
{
    if (n == 0)
        return 0;
    unsigned c = s[0];
    if (c < 0x80) {
        *cp = c;
        return 1;
    }
    size_t len;
    uint32_t v, min;
    if (c >= 0xC2 && c <= 0xDF) {
        len = 2;
        v = c & 0x1F;
        min = 0x80;
    } else if (c >= 0xE0 && c <= 0xEF) {
        len = 3;
        v = c & 0x0F;
        min = 0x800;
    } else if (c >= 0xF0 && c <= 0xF4) {
        len = 4;
        v = c & 0x07;
        min = 0x10000;
    } else {
        return 0;
    }
    if (n < len)
        return 0;
    for (size_t i = 1; i < len; i++) {
        if ((s[i] & 0xC0) != 0x80)
            return 0;
        v = (v << 6) | (s[i] & 0x3F);
    }
    if (v < min || v > 0x10FFFF || (v >= 0xD800 && v <= 0xDFFF))
        return 0;
    *cp = v;
    return len;
}

bool tg__utf8_valid(const char *s, size_t n, size_t *bad)
{
    const unsigned char *p = (const unsigned char *)s;
    size_t i = 0;
    while (i < n) {
        if (p[i] < 0x80) { /* ASCII run: the common case */
            i++;
            continue;
        }
        uint32_t cp;
        size_t k = tg__utf8_next(p + i, n - i, &cp);
        if (k == 0) {
            if (bad)
                *bad = i;
            return false;
        }
        i += k;
    }
    return true;
}

size_t tg__utf8_len(const unsigned char *s, size_t n)
{
    uint32_t cp;
    return tg__utf8_next(s, n, &cp);
}
