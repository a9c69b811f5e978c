/*
 * io.c - shared machinery of the interop formats: byte sources, growable buffers, byte-order
 * and half-precision conversion, UTF-8 validation, item checks and the atomic file writer
 * (temporary file + fsync + rename, so a failed save never damages the previous file).
 */
#define _POSIX_C_SOURCE 200809L
#define _FILE_OFFSET_BITS 64 /* sizes of files over 2 GiB on 32-bit hosts */

#include "io.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <unistd.h>

/* Bounce-buffer size for conversions and byte swapping. */
#define TG__CHUNK ((size_t)1 << 16)

/* ----- errors ------------------------------------------------------------------------------ */
const char *tg__strerror(int err, char *buf, size_t n)
{
    if (n == 0)
        return buf;
    if (strerror_r(err, buf, n) != 0)
        snprintf(buf, n, "error %d", err);
    return buf;
}

/* ----- byte sources ------------------------------------------------------------------------ */
tg_status tg__src_open_file(tg_ctx *ctx, tg__src *s, const char *fn, const char *path)
{
    memset(s, 0, sizeof *s);
    s->fn = fn;
    s->label = path;
    char eb[128];
    errno = 0;
    FILE *f = fopen(path, "rb");
    if (!f) {
        int e = errno ? errno : EIO;
        tg__err(ctx, TG_ERR_IO, fn, "cannot open '%s': %s", path, tg__strerror(e, eb, sizeof eb));
        return TG_ERR_IO;
    }
    struct stat st;
    if (fstat(fileno(f), &st) != 0) {
        int e = errno ? errno : EIO;
        fclose(f);
        tg__err(ctx, TG_ERR_IO, fn, "cannot stat '%s': %s", path, tg__strerror(e, eb, sizeof eb));
        return TG_ERR_IO;
    }
    if (S_ISDIR(st.st_mode)) {
        fclose(f);
        tg__err(ctx, TG_ERR_IO, fn, "'%s' is a directory", path);
        return TG_ERR_IO;
    }
    if (S_ISREG(st.st_mode)) {
        s->f = f;
        s->size = (uint64_t)st.st_size;
        return TG_OK;
    }
    /* A pipe or device: its size is unknown, so read it whole first. */
    tg__buf b = {0};
    b.fn = fn;
    char tmp[4096];
    for (;;) {
        size_t got = fread(tmp, 1, sizeof tmp, f);
        if (got && !tg__buf_put(ctx, &b, tmp, got)) {
            fclose(f);
            tg__buf_free(ctx, &b);
            return TG_ERR_NOMEM;
        }
        if (got < sizeof tmp)
            break;
    }
    if (ferror(f)) {
        int e = errno ? errno : EIO;
        fclose(f);
        tg__buf_free(ctx, &b);
        tg__err(ctx, TG_ERR_IO, fn, "cannot read '%s': %s", path, tg__strerror(e, eb, sizeof eb));
        return TG_ERR_IO;
    }
    fclose(f);
    s->owned = (unsigned char *)b.p;
    s->mem = s->owned;
    s->size = b.len;
    return TG_OK;
}

void tg__src_open_mem(tg__src *s, const char *fn, const void *data, size_t size)
{
    memset(s, 0, sizeof *s);
    s->fn = fn;
    s->label = "<memory>";
    s->mem = data;
    s->size = size;
}

void tg__src_close(tg_ctx *ctx, tg__src *s)
{
    if (s->f)
        fclose(s->f);
    s->f = NULL;
    tg__free(ctx, s->owned);
    s->owned = NULL;
    s->mem = NULL;
}

tg_status tg__src_read(tg_ctx *ctx, tg__src *s, void *dst, size_t n, const char *what)
{
    if (n > tg__src_left(s)) {
        tg__err(ctx, TG_ERR_TRUNCATED, s->fn, "%s: file ends inside the %s", s->label, what);
        return TG_ERR_TRUNCATED;
    }
    if (s->mem) {
        if (n)
            memcpy(dst, s->mem + s->pos, n);
        s->pos += n;
        return TG_OK;
    }
    errno = 0;
    size_t got = n ? fread(dst, 1, n, s->f) : 0;
    if (got != n) {
        char eb[128];
        if (ferror(s->f)) {
            int e = errno ? errno : EIO;
            tg__err(ctx, TG_ERR_IO, s->fn, "%s: cannot read the %s: %s", s->label, what,
                    tg__strerror(e, eb, sizeof eb));
            return TG_ERR_IO;
        }
        tg__err(ctx, TG_ERR_TRUNCATED, s->fn,
                "%s: file ends inside the %s (it shrank while being read)", s->label, what);
        return TG_ERR_TRUNCATED;
    }
    s->pos += n;
    return TG_OK;
}

/* ----- growable buffer --------------------------------------------------------------------- */
bool tg__buf_put(tg_ctx *ctx, tg__buf *b, const void *data, size_t n)
{
    if (b->failed)
        return false;
    if (n > SIZE_MAX / 2 - b->len) {
        b->failed = true;
        tg__err(ctx, TG_ERR_NOMEM, b->fn ? b->fn : "tgrad io", "buffer too large");
        return false;
    }
    if (b->len + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < b->len + n + 1)
            cap *= 2;
        char *p = tg__alloc(ctx, cap, b->fn ? b->fn : "tgrad io");
        if (!p) {
            b->failed = true;
            return false;
        }
        if (b->len)
            memcpy(p, b->p, b->len);
        tg__free(ctx, b->p);
        b->p = p;
        b->cap = cap;
    }
    if (n)
        memcpy(b->p + b->len, data, n);
    b->len += n;
    b->p[b->len] = '\0'; /* always NUL-terminated (cap > len) */
    return true;
}

bool tg__buf_puts(tg_ctx *ctx, tg__buf *b, const char *s)
{
    return tg__buf_put(ctx, b, s, strlen(s));
}

bool tg__buf_putc(tg_ctx *ctx, tg__buf *b, char c) { return tg__buf_put(ctx, b, &c, 1); }

bool tg__buf_put_u64(tg_ctx *ctx, tg__buf *b, uint64_t v)
{
    char d[24];
    int k = (int)sizeof d;
    do {
        d[--k] = (char)('0' + v % 10);
        v /= 10;
    } while (v);
    return tg__buf_put(ctx, b, d + k, sizeof d - (size_t)k);
}

void tg__buf_free(tg_ctx *ctx, tg__buf *b)
{
    const char *fn = b->fn;
    tg__free(ctx, b->p);
    memset(b, 0, sizeof *b);
    b->fn = fn;
}

/* ----- encodings ---------------------------------------------------------------------------- */
bool tg__host_is_le(void)
{
    const uint16_t one = 1;
    unsigned char c;
    memcpy(&c, &one, 1);
    return c == 1;
}

uint16_t tg__le16(const unsigned char *p) { return (uint16_t)(p[0] | (unsigned)p[1] << 8); }

uint32_t tg__le32(const unsigned char *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

uint64_t tg__le64(const unsigned char *p)
{
    return (uint64_t)tg__le32(p) | (uint64_t)tg__le32(p + 4) << 32;
}

void tg__put_le16(unsigned char *p, uint16_t v)
{
    p[0] = (unsigned char)v;
    p[1] = (unsigned char)(v >> 8);
}

void tg__put_le32(unsigned char *p, uint32_t v)
{
    for (int i = 0; i < 4; i++)
        p[i] = (unsigned char)(v >> (8 * i));
}

void tg__put_le64(unsigned char *p, uint64_t v)
{
    for (int i = 0; i < 8; i++)
        p[i] = (unsigned char)(v >> (8 * i));
}

/* binary16: 1 sign, 5 exponent (bias 15), 10 mantissa bits. Every value is exact in binary32. */
float tg__f16_to_f32(uint16_t h)
{
    uint32_t sign = (uint32_t)(h >> 15) << 31;
    uint32_t exp = (h >> 10) & 0x1f, man = h & 0x3ffu, bits;
    if (exp == 0x1f) { /* inf / NaN (payload kept) */
        bits = sign | 0x7f800000u | man << 13;
    } else if (exp != 0) { /* normal */
        bits = sign | (exp + 112) << 23 | man << 13;
    } else if (man == 0) { /* signed zero */
        bits = sign;
    } else { /* subnormal: renormalise */
        int e = -1;
        do {
            man <<= 1;
            e++;
        } while (!(man & 0x400u));
        bits = sign | (uint32_t)(112 - e) << 23 | (man & 0x3ffu) << 13;
    }
    float f;
    memcpy(&f, &bits, sizeof f);
    return f;
}

/* bfloat16 is the top half of a binary32. */
float tg__bf16_to_f32(uint16_t h)
{
    uint32_t bits = (uint32_t)h << 16;
    float f;
    memcpy(&f, &bits, sizeof f);
    return f;
}

size_t tg__utf8_len(const unsigned char *s, size_t n)
{
    if (n == 0)
        return 0;
    unsigned c = s[0];
    if (c < 0x80)
        return 1;
    size_t len;
    uint32_t cp, min;
    if (c >= 0xc2 && c <= 0xdf) {
        len = 2, cp = c & 0x1f, min = 0x80;
    } else if (c >= 0xe0 && c <= 0xef) {
        len = 3, cp = c & 0x0f, min = 0x800;
    } else if (c >= 0xf0 && c <= 0xf4) {
        len = 4, cp = c & 0x07, min = 0x10000;
    } else {
        return 0; /* continuation byte, overlong C0/C1 lead, or > U+10FFFF lead */
    }
    if (n < len)
        return 0;
    for (size_t i = 1; i < len; i++) {
        if ((s[i] & 0xc0) != 0x80)
            return 0;
        cp = cp << 6 | (s[i] & 0x3f);
    }
    if (cp < min || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff))
        return 0;
    return len;
}

bool tg__utf8_valid(const char *s, size_t n)
{
    const unsigned char *p = (const unsigned char *)s;
    size_t i = 0;
    while (i < n) {
        size_t k = tg__utf8_len(p + i, n - i);
        if (!k)
            return false;
        i += k;
    }
    return true;
}

size_t tg__efmt_size(tg__efmt e)
{
    switch (e) {
    case TG__E_BOOL: case TG__E_U8: case TG__E_I8: return 1;
    case TG__E_U16: case TG__E_I16: case TG__E_F16: case TG__E_BF16: return 2;
    case TG__E_U32: case TG__E_I32: case TG__E_F32: return 4;
    case TG__E_U64: case TG__E_I64: case TG__E_F64: return 8;
    }
    return 0;
}

/* Decode element i of format e at p. */
static double load_le(const unsigned char *p, tg__efmt e)
{
    switch (e) {
    case TG__E_BOOL: return p[0] != 0;
    case TG__E_U8: return p[0];
    case TG__E_I8: return (int8_t)p[0];
    case TG__E_U16: return tg__le16(p);
    case TG__E_I16: return (int16_t)tg__le16(p);
    case TG__E_U32: return tg__le32(p);
    case TG__E_I32: return (int32_t)tg__le32(p);
    case TG__E_U64: return (double)tg__le64(p);
    case TG__E_I64: return (double)(int64_t)tg__le64(p);
    case TG__E_F16: return tg__f16_to_f32(tg__le16(p));
    case TG__E_BF16: return tg__bf16_to_f32(tg__le16(p));
    case TG__E_F32: {
        uint32_t b = tg__le32(p);
        float f;
        memcpy(&f, &b, sizeof f);
        return f;
    }
    case TG__E_F64: {
        uint64_t b = tg__le64(p);
        double d;
        memcpy(&d, &b, sizeof d);
        return d;
    }
    }
    return 0;
}

void tg__convert_le(void *dst, tg_dtype dt, const unsigned char *src, tg__efmt e, size_t n)
{
    size_t es = tg__efmt_size(e);
    if (tg__host_is_le() &&
        ((e == TG__E_F32 && dt == TG_F32) || (e == TG__E_F64 && dt == TG_F64))) {
        memcpy(dst, src, n * es);
        return;
    }
    if (e == TG__E_F32 && dt == TG_F32) { /* big-endian host: keep NaN payloads bit-exact */
        uint32_t *d = dst;
        for (size_t i = 0; i < n; i++)
            d[i] = tg__le32(src + 4 * i);
        return;
    }
    if (e == TG__E_F64 && dt == TG_F64) {
        uint64_t *d = dst;
        for (size_t i = 0; i < n; i++)
            d[i] = tg__le64(src + 8 * i);
        return;
    }
    if (dt == TG_F32) {
        float *d = dst;
        for (size_t i = 0; i < n; i++)
            d[i] = (float)load_le(src + es * i, e);
    } else {
        double *d = dst;
        for (size_t i = 0; i < n; i++)
            d[i] = load_le(src + es * i, e);
    }
}

tg_status tg__src_read_elems(tg_ctx *ctx, tg__src *s, void *dst, tg_dtype dt, tg__efmt e,
                             uint64_t n, const char *what)
{
    size_t es = tg__efmt_size(e), ds = tg_dtype_size(dt);
    uint64_t bytes = n * es; /* callers checked n * 8 fits */
    if (bytes > tg__src_left(s)) {
        tg__err(ctx, TG_ERR_TRUNCATED, s->fn, "%s: file ends inside the %s", s->label, what);
        return TG_ERR_TRUNCATED;
    }
    if (s->mem) {
        tg__convert_le(dst, dt, s->mem + s->pos, e, (size_t)n);
        s->pos += bytes;
        return TG_OK;
    }
    bool same = (e == TG__E_F32 && dt == TG_F32) || (e == TG__E_F64 && dt == TG_F64);
    if (same && tg__host_is_le())
        return tg__src_read(ctx, s, dst, (size_t)bytes, what);
    size_t per = TG__CHUNK / es;
    size_t cap = (uint64_t)per < n ? per : (size_t)n;
    unsigned char *buf = tg__alloc(ctx, cap * es, s->fn);
    if (!buf)
        return TG_ERR_NOMEM;
    unsigned char *out = dst;
    uint64_t done = 0;
    tg_status st = TG_OK;
    while (done < n) {
        size_t k = (n - done) < (uint64_t)cap ? (size_t)(n - done) : cap;
        st = tg__src_read(ctx, s, buf, k * es, what);
        if (st != TG_OK)
            break;
        tg__convert_le(out + done * ds, dt, buf, e, k);
        done += k;
    }
    tg__free(ctx, buf);
    return st;
}

/* ----- writing ------------------------------------------------------------------------------ */
tg_status tg__item_check(tg_ctx *ctx, const char *fn, const tg_io_item *it, int64_t idx,
                         uint64_t *nbytes)
{
    char who[TG_NAME_MAX + 32];
    if (!it) {
        tg__err(ctx, TG_ERR_ARG, fn, "item is NULL");
        return TG_ERR_ARG;
    }
    if (idx >= 0)
        snprintf(who, sizeof who, "item %lld ('%.*s')", (long long)idx, TG_NAME_MAX - 1,
                 it->name ? it->name : "(null)");
    else
        snprintf(who, sizeof who, "array");
    if (it->dtype != TG_F32 && it->dtype != TG_F64) {
        tg__err(ctx, TG_ERR_DTYPE, fn, "%s: unknown dtype %d", who, (int)it->dtype);
        return TG_ERR_DTYPE;
    }
    if (it->rank < 0 || it->rank > TG_MAX_RANK) {
        tg__err(ctx, TG_ERR_ARG, fn, "%s: rank %d out of range 0..%d", who, it->rank,
                TG_MAX_RANK);
        return TG_ERR_ARG;
    }
    if (it->rank > 0 && !it->shape) {
        tg__err(ctx, TG_ERR_ARG, fn, "%s: shape is NULL for rank %d", who, it->rank);
        return TG_ERR_ARG;
    }
    int64_t numel = 1;
    for (int i = 0; i < it->rank; i++) {
        if (it->shape[i] < 1) {
            char b[160];
            tg__err(ctx, TG_ERR_SHAPE, fn,
                    "%s: dim %d is %lld in shape %s (every dim must be >= 1)", who, i,
                    (long long)it->shape[i], tg__dims_str(it->rank, it->shape, b, sizeof b));
            return TG_ERR_SHAPE;
        }
        if (numel > INT64_MAX / 8 / it->shape[i]) {
            tg__err(ctx, TG_ERR_OVERFLOW, fn, "%s: shape too large", who);
            return TG_ERR_OVERFLOW;
        }
        numel *= it->shape[i];
    }
    if (!it->data) {
        tg__err(ctx, TG_ERR_ARG, fn, "%s: data is NULL (a tensor without a gradient buffer?)",
                who);
        return TG_ERR_ARG;
    }
    *nbytes = (uint64_t)numel * tg_dtype_size(it->dtype);
    return TG_OK;
}

tg_status tg__write(tg_ctx *ctx, const char *fn, const tg_writer *w, const void *p, size_t n,
                    const char *what)
{
    if (n == 0)
        return TG_OK;
    int e = w->write(w->user, p, n);
    if (e != 0) {
        char eb[128];
        tg__err(ctx, TG_ERR_IO, fn, "cannot write the %s: %s", what,
                tg__strerror(e, eb, sizeof eb));
        return TG_ERR_IO;
    }
    return TG_OK;
}

tg_status tg__write_data(tg_ctx *ctx, const char *fn, const tg_writer *w, const void *data,
                         tg_dtype dt, uint64_t nbytes)
{
    if (tg__host_is_le()) {
        /* write in bounded pieces so a size_t larger than the writer expects never occurs */
        const unsigned char *p = data;
        while (nbytes) {
            size_t k = nbytes > ((uint64_t)1 << 30) ? (size_t)1 << 30 : (size_t)nbytes;
            tg_status st = tg__write(ctx, fn, w, p, k, "tensor data");
            if (st != TG_OK)
                return st;
            p += k;
            nbytes -= k;
        }
        return TG_OK;
    }
    unsigned char buf[4096];
    size_t es = tg_dtype_size(dt);
    const unsigned char *p = data;
    while (nbytes) {
        size_t k = nbytes > sizeof buf ? sizeof buf : (size_t)nbytes;
        for (size_t i = 0; i < k; i += es) {
            if (es == 4) {
                uint32_t v;
                memcpy(&v, p + i, 4);
                tg__put_le32(buf + i, v);
            } else {
                uint64_t v;
                memcpy(&v, p + i, 8);
                tg__put_le64(buf + i, v);
            }
        }
        tg_status st = tg__write(ctx, fn, w, buf, k, "tensor data");
        if (st != TG_OK)
            return st;
        p += k;
        nbytes -= k;
    }
    return TG_OK;
}

/* The temporary file as a tg_writer, with optional injected ENOSPC. */
typedef struct file_sink {
    FILE *f;
    uint64_t written;
    bool inject;
    uint64_t limit;
} file_sink;

static int file_sink_write(void *user, const void *data, size_t n)
{
    file_sink *s = user;
    if (s->inject) {
        uint64_t room = s->written >= s->limit ? 0 : s->limit - s->written;
        if ((uint64_t)n > room) {
            errno = 0;
            if (room && fwrite(data, 1, (size_t)room, s->f) != (size_t)room)
                return errno ? errno : EIO;
            s->written += room;
            return ENOSPC;
        }
    }
    errno = 0;
    if (fwrite(data, 1, n, s->f) != n)
        return errno ? errno : EIO;
    s->written += n;
    return 0;
}

/* Best effort: make the rename itself durable. Some file systems refuse fsync on a directory;
 * the new file is already in place, so a failure here is not reported. */
static void fsync_dir_of(const char *path, char *scratch, size_t cap)
{
    const char *slash = strrchr(path, '/');
    if (!slash) {
        snprintf(scratch, cap, ".");
    } else if (slash == path) {
        snprintf(scratch, cap, "/");
    } else {
        snprintf(scratch, cap, "%.*s", (int)(slash - path), path);
    }
    int fd = open(scratch, O_RDONLY);
    if (fd >= 0) {
        (void)fsync(fd);
        (void)close(fd);
    }
}

tg_status tg__write_atomic(tg_ctx *ctx, const char *fn, const char *path,
                           const tg_write_opts *opts, tg__emit_fn emit, void *user)
{
    static const char suffix[] = ".tmp.XXXXXX";
    tg_write_opts o = {0};
    if (opts)
        o = *opts;
    bool fresh = ctx->status == TG_OK; /* any error recorded below is ours */
    if (!path || !*path) {
        tg__err(ctx, TG_ERR_ARG, fn, "path is %s", path ? "empty" : "NULL");
        return TG_ERR_ARG;
    }
    size_t plen = strlen(path);
    if (plen > SIZE_MAX - sizeof suffix) {
        tg__err(ctx, TG_ERR_ARG, fn, "path too long");
        return TG_ERR_ARG;
    }
    char *tmp = tg__alloc(ctx, plen + sizeof suffix, fn);
    if (!tmp)
        return TG_ERR_NOMEM;
    memcpy(tmp, path, plen);
    memcpy(tmp + plen, suffix, sizeof suffix);

    /* Keep the permissions of the file being replaced; a new file gets 0644. */
    mode_t mode = 0644;
    struct stat old;
    if (stat(path, &old) == 0 && S_ISREG(old.st_mode))
        mode = old.st_mode & 07777;

    char eb[128];
    tg_status st = TG_OK;
    FILE *f = NULL;
    errno = 0;
    int fd = mkstemp(tmp);
    if (fd < 0) {
        int e = errno ? errno : EIO;
        tg__err(ctx, TG_ERR_IO, fn, "cannot create a temporary file next to '%s': %s", path,
                tg__strerror(e, eb, sizeof eb));
        tg__free(ctx, tmp);
        return TG_ERR_IO;
    }
    if (fchmod(fd, mode) != 0) {
        int e = errno ? errno : EIO;
        tg__err(ctx, TG_ERR_IO, fn, "cannot set the mode of '%s': %s", tmp,
                tg__strerror(e, eb, sizeof eb));
        (void)close(fd);
        st = TG_ERR_IO;
        goto fail;
    }
    f = fdopen(fd, "wb");
    if (!f) {
        int e = errno ? errno : EIO;
        tg__err(ctx, TG_ERR_IO, fn, "cannot open '%s' for writing: %s", tmp,
                tg__strerror(e, eb, sizeof eb));
        (void)close(fd);
        st = TG_ERR_IO;
        goto fail;
    }
    file_sink sink = {f, 0, o.inject_write_failure, o.fail_after_bytes};
    tg_writer w = {file_sink_write, &sink};
    st = emit(ctx, &w, user);
    if (st != TG_OK)
        goto fail;
    errno = 0;
    if (fflush(f) != 0) {
        int e = errno ? errno : EIO;
        tg__err(ctx, TG_ERR_IO, fn, "cannot write '%s': %s", tmp, tg__strerror(e, eb, sizeof eb));
        st = TG_ERR_IO;
        goto fail;
    }
    if (!o.no_fsync && fsync(fileno(f)) != 0) {
        int e = errno ? errno : EIO;
        tg__err(ctx, TG_ERR_IO, fn, "cannot fsync '%s': %s", tmp, tg__strerror(e, eb, sizeof eb));
        st = TG_ERR_IO;
        goto fail;
    }
    errno = 0;
    int rc = fclose(f);
    f = NULL;
    if (rc != 0) {
        int e = errno ? errno : EIO;
        tg__err(ctx, TG_ERR_IO, fn, "cannot close '%s': %s", tmp, tg__strerror(e, eb, sizeof eb));
        st = TG_ERR_IO;
        goto fail;
    }
    if (rename(tmp, path) != 0) {
        int e = errno ? errno : EIO;
        tg__err(ctx, TG_ERR_IO, fn, "cannot rename '%s' to '%s': %s", tmp, path,
                tg__strerror(e, eb, sizeof eb));
        st = TG_ERR_IO;
        goto fail;
    }
    if (!o.no_fsync)
        fsync_dir_of(path, tmp, plen + sizeof suffix);
    tg__free(ctx, tmp);
    return TG_OK;

fail:
    if (f)
        (void)fclose(f);
    (void)unlink(tmp);
    tg__free(ctx, tmp);
    if (fresh && st == TG_ERR_IO && ctx->status == TG_ERR_IO) {
        /* the writer's message lacks the path: add it if there is room */
        size_t ml = strlen(ctx->msg), pl = strlen(path);
        if (!strstr(ctx->msg, path) && ml + pl + 16 < sizeof ctx->msg)
            snprintf(ctx->msg + ml, sizeof ctx->msg - ml, " (writing '%s')", path);
    }
    return st;
}

void tg__tensor_discard(tg_ctx *ctx, tg_tensor *t)
{
    if (!t)
        return;
    tg__free(ctx, t->data);
    tg__free(ctx, t);
}

/* ----- items from tensors ------------------------------------------------------------------- */
tg_io_item tg_io_item_data(const tg_tensor *t, const char *name)
{
    tg_io_item it = {0};
    if (!t)
        return it;
    it.name = name ? name : t->name;
    it.dtype = t->dtype;
    it.rank = t->rank;
    it.shape = t->shape;
    it.data = t->data;
    return it;
}

tg_io_item tg_io_item_grad(const tg_tensor *t, const char *name)
{
    tg_io_item it = tg_io_item_data(t, name);
    it.data = t ? t->grad : NULL;
    return it;
}
