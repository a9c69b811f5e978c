/*
 * fuzz_util.c - see fuzz_util.h.
 */
#if defined(__linux__)
#define _GNU_SOURCE /* memfd_create */
#endif
#include "fuzz_util.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#if defined(__linux__)
#include <sys/mman.h>
#include <unistd.h>
#endif

/* Each block carries its size in a 16-byte header (keeps malloc's alignment for double), so
 * fz_free can return it to the live count. */
#define FZ_HDR 16

static void *fz_alloc_fn(void *user, size_t size)
{
    fz_alloc *a = user;
    a->count++;
    if (a->fail_at && a->count == a->fail_at)
        return NULL;
    if (size > a->cap - a->live)
        return NULL;
    unsigned char *p = malloc(FZ_HDR + size);
    if (!p)
        return NULL;
    memcpy(p, &size, sizeof size);
    a->live += size;
    if (a->live > a->peak)
        a->peak = a->live;
    return p + FZ_HDR;
}

static void fz_free_fn(void *user, void *ptr)
{
    fz_alloc *a = user;
    if (!ptr)
        return;
    unsigned char *p = (unsigned char *)ptr - FZ_HDR;
    size_t size;
    memcpy(&size, p, sizeof size);
    if (size > a->live)
        fz_die(NULL, "allocator: freeing %zu bytes but only %zu are live", size, a->live);
    a->live -= size;
    free(p);
}

tg_ctx *fz_ctx_new(fz_alloc *a, size_t cap)
{
    memset(a, 0, sizeof *a);
    a->al.alloc = fz_alloc_fn;
    a->al.free = fz_free_fn;
    a->al.user = a;
    a->cap = cap;
    tg_ctx *ctx = tg_ctx_new_with(&a->al);
    if (!ctx)
        fz_die(NULL, "tg_ctx_new_with failed");
    return ctx;
}

void fz_ctx_free(tg_ctx *ctx, fz_alloc *a)
{
    tg_ctx_free(ctx);
    if (a->live != 0)
        fz_die(NULL, "%zu bytes not returned to the allocator after tg_ctx_free", a->live);
}

void fz_check_failure(tg_ctx *ctx, const char *fn, size_t bytes_before, const tg_status *allowed)
{
    tg_status s = tg_ctx_status(ctx);
    const char *msg = tg_ctx_message(ctx);
    if (s == TG_OK)
        fz_die(ctx, "%s failed but recorded no status", fn);
    bool ok = false;
    for (const tg_status *p = allowed; *p != TG_OK; p++)
        ok = ok || *p == s;
    if (!ok)
        fz_die(ctx, "%s failed with %s, which it does not document", fn, tg_status_str(s));
    /* Out of memory inside a helper may be reported by the helper (e.g. "tg_const: out of
     * memory ..."); every other failure names the function called. */
    size_t k = strlen(fn);
    if (s == TG_ERR_NOMEM) {
        if (strncmp(msg, "tg", 2) != 0 || !strstr(msg, ": "))
            fz_die(ctx, "%s: the message does not start with a function name", fn);
    } else if (strncmp(msg, fn, k) != 0 || msg[k] != ':' || msg[k + 1] != ' ') {
        fz_die(ctx, "%s: the message does not start with \"%s: \"", fn, fn);
    }
    for (const unsigned char *c = (const unsigned char *)msg; *c; c++)
        if (*c < 0x20 || *c == 0x7f || (c[0] == 0xc2 && c[1] >= 0x80 && c[1] <= 0x9f))
            fz_die(ctx, "%s: the message holds control character %s%02x (not one clean line)",
                   fn, *c == 0xc2 ? "U+00" : "0x", *c == 0xc2 ? c[1] : *c);
    if (tg_ctx_bytes(ctx) != bytes_before)
        fz_die(ctx, "%s failed but the context grew from %zu to %zu bytes", fn, bytes_before,
               tg_ctx_bytes(ctx));
}

void fz_check_line(const char *what, const char *msg)
{
    if (!msg || !*msg)
        fz_die(NULL, "%s: empty message", what);
    size_t len = strlen(msg);
    for (const unsigned char *c = (const unsigned char *)msg; *c; c++)
        if (*c < 0x20 || *c == 0x7f || (c[0] == 0xc2 && c[1] >= 0x80 && c[1] <= 0x9f)) {
            fputs("fuzz: message: ", stderr);
            for (const unsigned char *d = (const unsigned char *)msg; *d; d++)
                fprintf(stderr, *d < 0x20 || *d >= 0x7f ? "\\x%02x" : "%c", *d);
            fputc('\n', stderr);
            fz_die(NULL, "%s: the message holds control character %s%02x at byte %zu (not "
                   "one clean line)", what, *c == 0xc2 ? "U+00" : "0x", *c == 0xc2 ? c[1] : *c,
                   (size_t)(c - (const unsigned char *)msg));
        }
    if (len > FZ_LINE_MAX)
        fz_die(NULL, "%s: a message of %zu bytes (more than %d: a value quoted without bound?): "
               "%.200s...", what, len, FZ_LINE_MAX, msg);
}

size_t fz_peak_start(fz_alloc *a)
{
    a->peak = a->live;
    return a->live;
}

void fz_check_peak(const fz_alloc *a, size_t live0, size_t size, const char *fn)
{
    size_t used = a->peak - live0;
    if (used > FZ_AMP_SLACK && (used - FZ_AMP_SLACK) / FZ_AMP > size)
        fz_die(NULL, "%s: an input of %zu bytes made the context hold %zu bytes at its peak "
               "(more than %d x + %zu)", fn, size, used, FZ_AMP, FZ_AMP_SLACK);
}

static int fz_membuf_write(void *user, const void *data, size_t size)
{
    fz_membuf *b = user;
    if (size > FZ_CAP - b->len)
        return ENOMEM;
    if (b->len + size > b->cap) {
        size_t nc = b->cap ? b->cap : 4096;
        while (nc < b->len + size)
            nc *= 2;
        unsigned char *q = realloc(b->p, nc);
        if (!q)
            return ENOMEM;
        b->p = q;
        b->cap = nc;
    }
    if (size)
        memcpy(b->p + b->len, data, size);
    b->len += size;
    return 0;
}

tg_writer fz_membuf_writer(fz_membuf *b)
{
    memset(b, 0, sizeof *b);
    tg_writer w = {fz_membuf_write, b};
    return w;
}

void fz_membuf_free(fz_membuf *b)
{
    free(b->p);
    memset(b, 0, sizeof *b);
}

/* One memfd for the whole process, refilled per input (creating one per input costs more than
 * most inputs take to parse). */
int fz_file_open(const uint8_t *data, size_t size, char *path, size_t path_size)
{
#if defined(__linux__) && defined(MFD_CLOEXEC)
    static int fd = -1;
    if (fd < 0)
        fd = memfd_create("fuzz-input", MFD_CLOEXEC);
    if (fd < 0 || ftruncate(fd, 0) != 0)
        return -1;
    for (size_t done = 0; done < size;) {
        ssize_t k = pwrite(fd, data + done, size - done, (off_t)done);
        if (k <= 0)
            return -1;
        done += (size_t)k;
    }
    snprintf(path, path_size, "/proc/self/fd/%d", fd);
    return fd;
#else
    (void)data;
    (void)size;
    (void)path;
    (void)path_size;
    return -1;
#endif
}

void fz_file_close(int fd)
{
    (void)fd; /* kept open for the next input */
}

uint64_t fz_hash(const uint8_t *data, size_t size)
{
    uint64_t h = 14695981039346656037u;
    for (size_t i = 0; i < size; i++) {
        h ^= data[i];
        h *= 1099511628211u;
    }
    return h;
}

void fz_die(const tg_ctx *ctx, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fputs("fuzz: ", stderr);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    if (ctx && tg_ctx_status(ctx) != TG_OK) {
        fprintf(stderr, " [%s: ", tg_status_str(tg_ctx_status(ctx)));
        for (const unsigned char *c = (const unsigned char *)tg_ctx_message(ctx); *c; c++)
            fprintf(stderr, *c < 0x20 || *c == 0x7f ? "\\x%02x" : "%c", *c);
        fputc(']', stderr);
    }
    fputc('\n', stderr);
    abort();
}
