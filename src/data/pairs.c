/*
 * pairs.c - the sentence-pair file reader (tgrad_data.h, "Sentence-pair files").
 *
 * A pairs file is `source<TAB>target` lines of UTF-8. The reader streams it: a 64 KiB chunk
 * buffer and one line buffer of at most max_line + 1 bytes (a CR before the newline is the +1),
 * so a file of any size is never held in memory; the FNV-1a 64 hash of every byte is kept on
 * the way (the content check of a resumed run). Each complete line is checked (no NUL, strict
 * UTF-8, exactly one tab, two non-empty sides) and handed to the callback; the first refusal
 * stops the read with "label:line: why".
 */
#include "data.h"

#include <stdio.h>

#define CHUNK 65536

uint64_t tg__fnv1a(uint64_t h, const void *p, size_t n)
{
    const unsigned char *b = p;
    for (size_t i = 0; i < n; i++) {
        h ^= b[i];
        h *= 0x100000001b3ULL;
    }
    return h;
}

typedef struct reader {
    tg_ctx *ctx;
    const char *fn, *label;
    size_t max_line;
    tg_pair_fn cb;
    void *user;
    int64_t line; /* number of the line being assembled */
    int64_t pairs;
} reader;

/* One complete line (without '\n'; a final '\r' still there), n bytes at s (s[n] writable). */
static tg_status take_line(reader *r, char *s, size_t n)
{
    if (n && s[n - 1] == '\r')
        n--;
    if (n > r->max_line) {
        tg__run_err(r->ctx, TG_ERR_FORMAT, r->fn,
                    "%s:%lld: the line is longer than the limit of %zu bytes", r->label,
                    (long long)r->line, r->max_line);
        return TG_ERR_FORMAT;
    }
    const char *nul = n ? memchr(s, 0, n) : NULL;
    if (nul) {
        tg__run_err(r->ctx, TG_ERR_FORMAT, r->fn, "%s:%lld: a NUL byte (column %zu)", r->label,
                    (long long)r->line, (size_t)(nul - s) + 1);
        return TG_ERR_FORMAT;
    }
    size_t bad;
    if (!tg__utf8_valid(s, n, &bad)) {
        tg__run_err(r->ctx, TG_ERR_FORMAT, r->fn,
                    "%s:%lld: not valid UTF-8 (byte %zu of the line, 0x%02x)", r->label,
                    (long long)r->line, bad + 1, (unsigned)(unsigned char)s[bad]);
        return TG_ERR_FORMAT;
    }
    size_t tabs = 0, tab = 0;
    for (size_t i = 0; i < n; i++)
        if (s[i] == '\t') {
            if (!tabs)
                tab = i;
            tabs++;
        }
    if (tabs != 1) {
        tg__run_err(r->ctx, TG_ERR_FORMAT, r->fn,
                    "%s:%lld: %s; a pair is source<TAB>target with exactly one tab", r->label,
                    (long long)r->line,
                    n == 0 ? "an empty line" : tabs == 0 ? "no tab" : tabs == 2 ? "2 tabs"
                                                                               : "3 or more tabs");
        return TG_ERR_FORMAT;
    }
    if (tab == 0 || tab + 1 == n) {
        tg__run_err(r->ctx, TG_ERR_FORMAT, r->fn, "%s:%lld: the %s side is empty", r->label,
                    (long long)r->line, tab == 0 ? "source (first)" : "target (second)");
        return TG_ERR_FORMAT;
    }
    r->pairs++;
    if (!r->cb)
        return TG_OK;
    s[tab] = '\0';
    s[n] = '\0';
    tg_pair p = {s, tab, s + tab + 1, n - tab - 1, r->line};
    tg_status st = r->cb(r->user, &p);
    if (st != TG_OK && tg_ctx_status(r->ctx) == TG_OK)
        tg__run_err(r->ctx, st, r->fn, "%s:%lld: the callback stopped the read (%s)", r->label,
                    (long long)r->line, tg_status_str(st));
    return st;
}

tg_status tg__pairs_read_src(tg_ctx *ctx, const char *fn, tg__src *src, size_t max_line,
                             tg_pair_fn cb, void *user, tg_pairs_info *info)
{
    if (!max_line)
        max_line = TG_PAIRS_MAX_LINE;
    tg_pairs_info inf = {0, 0, TG__FNV_BASIS};
    reader r = {ctx, fn, src->label, max_line, cb, user, 1, 0};
    /* the line buffer: max_line bytes, a CR, a NUL */
    size_t lcap = max_line + 2;
    if (lcap < max_line) {
        tg__run_err(ctx, TG_ERR_ARG, fn, "max_line %zu is too large", max_line);
        return TG_ERR_ARG;
    }
    size_t ccap = src->mem ? 0 : CHUNK;
    unsigned char *chunk = ccap ? tg__alloc(ctx, ccap, fn) : NULL;
    char *line = tg__alloc(ctx, lcap, fn);
    tg_status st = TG_OK;
    if ((ccap && !chunk) || !line)
        st = TG_ERR_NOMEM;
    size_t len = 0;   /* bytes of the current line in `line` */
    bool any = false; /* bytes since the last newline */
    while (st == TG_OK && tg__src_left(src) > 0) {
        const unsigned char *c;
        size_t got;
        if (src->mem) { /* a buffer: scan it in place, CHUNK bytes at a time */
            got = tg__src_left(src) < CHUNK ? (size_t)tg__src_left(src) : CHUNK;
            c = src->mem + src->pos;
            src->pos += got;
        } else {
            got = tg__src_left(src) < ccap ? (size_t)tg__src_left(src) : ccap;
            st = tg__src_read(ctx, src, chunk, got, "pairs");
            if (st != TG_OK)
                break;
            c = chunk;
        }
        inf.hash = tg__fnv1a(inf.hash, c, got);
        inf.bytes += got;
        size_t i = 0;
        while (st == TG_OK && i < got) {
            const unsigned char *nl = memchr(c + i, '\n', got - i);
            size_t seg = nl ? (size_t)(nl - (c + i)) : got - i;
            if (seg > max_line + 1 - len) { /* longer than any allowed line (CR included) */
                tg__run_err(ctx, TG_ERR_FORMAT, fn,
                            "%s:%lld: the line is longer than the limit of %zu bytes",
                            src->label, (long long)r.line, max_line);
                st = TG_ERR_FORMAT;
                break;
            }
            memcpy(line + len, c + i, seg);
            len += seg;
            any = any || seg > 0;
            i += seg;
            if (nl) {
                st = take_line(&r, line, len);
                r.line++;
                len = 0;
                any = false;
                i++;
            }
        }
    }
    if (st == TG_OK && any)
        st = take_line(&r, line, len); /* a last line without its newline */
    if (st == TG_OK && r.pairs == 0) {
        tg__run_err(ctx, TG_ERR_FORMAT, fn, "%s: no sentence pairs (the file is empty)",
                    src->label);
        st = TG_ERR_FORMAT;
    }
    tg__free(ctx, chunk);
    tg__free(ctx, line);
    inf.pairs = r.pairs;
    if (info)
        *info = inf;
    return st;
}

tg_status tg_pairs_read(tg_ctx *ctx, const char *path, size_t max_line, tg_pair_fn cb,
                        void *user, tg_pairs_info *info)
{
    static const char fn[] = "tg_pairs_read";
    if (info)
        memset(info, 0, sizeof *info);
    if (!ctx)
        return TG_ERR_ARG;
    tg__io_enter(ctx);
    tg_status st;
    tg__src src;
    if (!path) {
        tg__run_err(ctx, TG_ERR_ARG, fn, "path is NULL");
        st = TG_ERR_ARG;
    } else if ((st = tg__src_open_file(ctx, &src, fn, path)) == TG_OK) {
        st = tg__pairs_read_src(ctx, fn, &src, max_line, cb, user, info);
        tg__src_close(ctx, &src);
    }
    tg__io_leave(ctx);
    return st;
}

tg_status tg_pairs_read_mem(tg_ctx *ctx, const void *data, size_t size, const char *label,
                            size_t max_line, tg_pair_fn cb, void *user, tg_pairs_info *info)
{
    static const char fn[] = "tg_pairs_read_mem";
    if (info)
        memset(info, 0, sizeof *info);
    if (!ctx)
        return TG_ERR_ARG;
    tg__io_enter(ctx);
    tg_status st;
    if (!data && size) {
        tg__run_err(ctx, TG_ERR_ARG, fn, "data is NULL");
        st = TG_ERR_ARG;
    } else {
        tg__src src;
        tg__src_open_mem(&src, fn, data ? data : "", size);
        if (label)
            src.label = label;
        st = tg__pairs_read_src(ctx, fn, &src, max_line, cb, user, info);
    }
    tg__io_leave(ctx);
    return st;
}
