/*
 * io.c - shared machinery of the interop formats: byte sources, growable buffers, byte-order
 * and half-precision conversion, UTF-8 validation, item checks and the atomic file writer
 * (temporary file + fsync + rename, so a failed save never damages the previous file).
 */
#define _GNU_SOURCE          /* O_TMPFILE, O_PATH (POSIX.1-2008 otherwise) */
#define _FILE_OFFSET_BITS 64 /* sizes of files over 2 GiB on 32-bit hosts */

#include "io.h"

#include "graph/values.h" /* tg__value, tg__stale: items from tensors */

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <time.h>
#include <unistd.h>

/* Bounce-buffer size for conversions and byte swapping. */
#define TG__CHUNK ((size_t)1 << 16)

/* ----- errors ------------------------------------------------------------------------------ */
const char *tg__strerror(int err, char *buf, size_t n)
{
    if (n == 0)
        return buf;
#if defined(__GLIBC__) && defined(_GNU_SOURCE)
    const char *m = strerror_r(err, buf, n); /* the GNU variant: may return a static string */
    if (m != buf)
        snprintf(buf, n, "%s", m ? m : "unknown error");
#else
    if (strerror_r(err, buf, n) != 0)
        snprintf(buf, n, "error %d", err);
#endif
    return buf;
}

/* ----- byte sources ------------------------------------------------------------------------ */
static tg_status not_regular(tg_ctx *ctx, const char *fn, const char *path, mode_t m)
{
    tg__err(ctx, TG_ERR_IO, fn, "'%s' is not a regular file (%s)", path, tg__ftype_name(m));
    return TG_ERR_IO;
}

/* Only regular files are read by path: a device may never end (/dev/zero) and a FIFO may
 * never get a writer, so both are refused, as are directories and sockets. stat() first, so a
 * device is not even opened; the open itself is O_NONBLOCK (a FIFO swapped in meanwhile does
 * not block) and fstat() confirms what was opened. Streams go through tg__src_open_fd. */
tg_status tg__src_open_file(tg_ctx *ctx, tg__src *s, const char *fn, const char *path)
{
    memset(s, 0, sizeof *s);
    s->fn = fn;
    s->label = path;
    char eb[128];
    struct stat st;
    errno = 0;
    if (stat(path, &st) != 0) {
        int e = errno ? errno : EIO;
        tg__err(ctx, TG_ERR_IO, fn, "cannot open '%s': %s", path, tg__strerror(e, eb, sizeof eb));
        return TG_ERR_IO;
    }
    if (!S_ISREG(st.st_mode))
        return not_regular(ctx, fn, path, st.st_mode);
    int fd = open(path, O_RDONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
    if (fd < 0) {
        int e = errno ? errno : EIO;
        tg__err(ctx, TG_ERR_IO, fn, "cannot open '%s': %s", path, tg__strerror(e, eb, sizeof eb));
        return TG_ERR_IO;
    }
    if (fstat(fd, &st) != 0) {
        int e = errno ? errno : EIO;
        (void)close(fd);
        tg__err(ctx, TG_ERR_IO, fn, "cannot stat '%s': %s", path, tg__strerror(e, eb, sizeof eb));
        return TG_ERR_IO;
    }
    if (!S_ISREG(st.st_mode)) {
        (void)close(fd);
        return not_regular(ctx, fn, path, st.st_mode);
    }
    int fl = fcntl(fd, F_GETFL);
    if (fl < 0 || fcntl(fd, F_SETFL, fl & ~O_NONBLOCK) != 0) {
        int e = errno ? errno : EIO;
        (void)close(fd);
        tg__err(ctx, TG_ERR_IO, fn, "cannot open '%s': %s", path, tg__strerror(e, eb, sizeof eb));
        return TG_ERR_IO;
    }
    FILE *f = fdopen(fd, "rb");
    if (!f) {
        int e = errno ? errno : EIO;
        (void)close(fd);
        tg__err(ctx, TG_ERR_IO, fn, "cannot open '%s': %s", path, tg__strerror(e, eb, sizeof eb));
        return TG_ERR_IO;
    }
    s->f = f;
    s->size = (uint64_t)st.st_size;
    return TG_OK;
}

tg_status tg__src_open_fd(tg_ctx *ctx, tg__src *s, const char *fn, int fd, const char *label,
                          uint64_t max_bytes)
{
    memset(s, 0, sizeof *s);
    s->fn = fn;
    if (!label) {
        snprintf(s->label_buf, sizeof s->label_buf, "<fd %d>", fd);
        label = s->label_buf;
    }
    s->label = label;
    char eb[128];
    if (fd < 0) {
        tg__err(ctx, TG_ERR_ARG, fn, "file descriptor %d is invalid", fd);
        return TG_ERR_ARG;
    }
    tg__buf b = {0};
    b.fn = fn;
    unsigned char tmp[4096];
    for (;;) {
        /* never ask for more than one byte past the limit */
        uint64_t room = max_bytes - b.len;
        size_t k = room < sizeof tmp ? (size_t)room + 1 : sizeof tmp;
        ssize_t got = read(fd, tmp, k);
        if (got < 0) {
            int e = errno ? errno : EIO;
            if (e == EINTR)
                continue;
            tg__buf_free(ctx, &b);
            if (e == EAGAIN || e == EWOULDBLOCK)
                tg__err(ctx, TG_ERR_IO, fn,
                        "%s: no data ready on a non-blocking descriptor (give a blocking one)",
                        label);
            else
                tg__err(ctx, TG_ERR_IO, fn, "cannot read '%s': %s", label,
                        tg__strerror(e, eb, sizeof eb));
            return TG_ERR_IO;
        }
        if (got == 0)
            break;
        if ((uint64_t)got > max_bytes - b.len) {
            tg__buf_free(ctx, &b);
            tg__err(ctx, TG_ERR_IO, fn, "%s: the stream holds more than the limit of %llu bytes",
                    label,
                    (unsigned long long)max_bytes);
            return TG_ERR_IO;
        }
        if (!tg__buf_put(ctx, &b, tmp, (size_t)got)) {
            tg__buf_free(ctx, &b);
            return TG_ERR_NOMEM;
        }
    }
    s->owned = (unsigned char *)b.p;
    s->mem = s->owned ? s->owned : (const unsigned char *)"";
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

int tg__hex_digit(int c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1;
}

const char *tg__quote(const char *s, size_t max, char *buf)
{
    size_t len = strlen(s), k = len > max ? max : len, w = 0;
    while (k < len && k > 0 && ((unsigned char)s[k] & 0xc0) == 0x80)
        k--; /* do not split a multi-byte character */
    for (size_t i = 0; i < k; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c == 0xc2 && i + 1 < k && (unsigned char)s[i + 1] >= 0x80 &&
            (unsigned char)s[i + 1] <= 0x9f) {
            buf[w++] = '?'; /* a C1 control as UTF-8 (U+0080..U+009F, e.g. CSI) */
            i++;
        } else {
            buf[w++] = c < 0x20 || c == 0x7f ? '?' : (char)c;
        }
    }
    if (k < len)
        memcpy(buf + w, "...", 3), w += 3;
    buf[w] = '\0';
    return buf;
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

static bool efmt_is_int(tg__efmt e)
{
    return e != TG__E_F16 && e != TG__E_BF16 && e != TG__E_F32 && e != TG__E_F64;
}

/* Element of integer format e at p as an int64; a U64 above INT64_MAX sets *big. */
static int64_t load_le_int(const unsigned char *p, tg__efmt e, bool *big)
{
    *big = false;
    switch (e) {
    case TG__E_BOOL: return p[0] != 0;
    case TG__E_U8: return p[0];
    case TG__E_I8: return (int8_t)p[0];
    case TG__E_U16: return tg__le16(p);
    case TG__E_I16: return (int16_t)tg__le16(p);
    case TG__E_U32: return tg__le32(p);
    case TG__E_I32: return (int32_t)tg__le32(p);
    case TG__E_I64: return (int64_t)tg__le64(p);
    case TG__E_U64: {
        uint64_t v = tg__le64(p);
        *big = v > (uint64_t)INT64_MAX;
        return *big ? INT64_MAX : (int64_t)v;
    }
    default: return 0;
    }
}

/* Element i32 conversion: n elements of e into int32 at d; index of the first one that is not
 * an integer in the i32 range (nothing more is written), or -1. */
static int64_t convert_le_i32(int32_t *d, const unsigned char *src, tg__efmt e, size_t n)
{
    size_t es = tg__efmt_size(e);
    bool is_int = efmt_is_int(e);
    for (size_t i = 0; i < n; i++) {
        const unsigned char *p = src + es * i;
        if (is_int) {
            bool big;
            int64_t v = load_le_int(p, e, &big);
            if (big || v < INT32_MIN || v > INT32_MAX)
                return (int64_t)i;
            d[i] = (int32_t)v;
        } else {
            double v = load_le(p, e);
            if (!tg__i32_ok(v))
                return (int64_t)i;
            d[i] = (int32_t)v;
        }
    }
    return -1;
}

int64_t tg__convert_le(void *dst, tg_dtype dt, const unsigned char *src, tg__efmt e, size_t n)
{
    size_t es = tg__efmt_size(e);
    if (dt == TG_I32)
        return convert_le_i32(dst, src, e, n);
    if (tg__host_is_le() &&
        ((e == TG__E_F32 && dt == TG_F32) || (e == TG__E_F64 && dt == TG_F64))) {
        memcpy(dst, src, n * es);
        return -1;
    }
    if (e == TG__E_F32 && dt == TG_F32) { /* big-endian host: keep NaN payloads bit-exact */
        uint32_t *d = dst;
        for (size_t i = 0; i < n; i++)
            d[i] = tg__le32(src + 4 * i);
        return -1;
    }
    if (e == TG__E_F64 && dt == TG_F64) {
        uint64_t *d = dst;
        for (size_t i = 0; i < n; i++)
            d[i] = tg__le64(src + 8 * i);
        return -1;
    }
    if (dt == TG_F32) {
        float *d = dst;
        for (size_t i = 0; i < n; i++) {
            double v = load_le(src + es * i, e);
            if (!tg__f32_ok(v)) /* only F64 can be beyond the f32 range */
                return (int64_t)i;
            d[i] = (float)v;
        }
    } else {
        double *d = dst;
        for (size_t i = 0; i < n; i++)
            d[i] = load_le(src + es * i, e);
    }
    return -1;
}

/* Name of an element format as the files spell it (safetensors style). */
static const char *efmt_name(tg__efmt e)
{
    static const char *const names[] = {"BOOL", "U8",  "I8",  "U16", "I16", "U32", "I32",
                                        "U64",  "I64", "F16", "BF16", "F32", "F64"};
    return (unsigned)e < sizeof names / sizeof names[0] ? names[e] : "?";
}

/* Record the error of element `idx` (at p, format e) not fitting dt: i32, or (a finite F64
 * beyond the f32 range) f32. */
static tg_status not_dtype(tg_ctx *ctx, const tg__src *s, const char *what, uint64_t idx,
                         const unsigned char *p, tg__efmt e, tg_dtype dt)
{
    if (dt == TG_F32) {
        tg__err(ctx, TG_ERR_FORMAT, s->fn,
                "%s: %s: element %llu (%s) is %.17g, beyond the f32 range (largest finite "
                "3.4028234663852886e+38), and it is read as f32", s->label, what,
                (unsigned long long)idx, efmt_name(e), load_le(p, e));
        return TG_ERR_FORMAT;
    }
    char v[48];
    if (efmt_is_int(e)) {
        bool big;
        int64_t x = load_le_int(p, e, &big);
        if (big)
            snprintf(v, sizeof v, "%llu", (unsigned long long)tg__le64(p));
        else
            snprintf(v, sizeof v, "%lld", (long long)x);
    } else {
        snprintf(v, sizeof v, "%.17g", load_le(p, e));
    }
    tg__err(ctx, TG_ERR_UNSUPPORTED, s->fn,
            "%s: %s: element %llu (%s) is %s, not an integer in the i32 range [-2147483648, "
            "2147483647]", s->label, what, (unsigned long long)idx, efmt_name(e), v);
    return TG_ERR_UNSUPPORTED;
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
        int64_t bad = tg__convert_le(dst, dt, s->mem + s->pos, e, (size_t)n);
        if (bad >= 0)
            return not_dtype(ctx, s, what, (uint64_t)bad, s->mem + s->pos + (size_t)bad * es, e,
                           dt);
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
        int64_t bad = tg__convert_le(out + done * ds, dt, buf, e, k);
        if (bad >= 0) {
            st = not_dtype(ctx, s, what, done + (uint64_t)bad, buf + (size_t)bad * es, e, dt);
            break;
        }
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
    if (tg_dtype_size(it->dtype) == 0) {
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
        tg__err(ctx, TG_ERR_ARG, fn, "%s: data is NULL (a tensor without a gradient buffer, an "
                "op result no graph has computed, or a strided view: write tg_contiguous() of "
                "it)", who);
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

/* ----- the atomic file writer ---------------------------------------------------------------- */
/*
 * A save of PATH, step by step (the guarantees are documented in tgrad_io.h):
 *  1. resolve PATH: a regular file, or nothing, is the target; a symbolic link is followed by
 *     the kernel (O_PATH, so fs.protected_symlinks applies and no device is opened) to the
 *     regular file it names, which becomes the target and is replaced in its own directory (the
 *     link survives); anything else (a directory, device, FIFO, socket, a link to one of those
 *     or to nothing) is refused before anything is created;
 *  2. allocate the write buffer, open the target's directory DIRFD;
 *  3. create the temporary: an unnamed O_TMPFILE inode in DIRFD (Linux; nothing can be left
 *     behind while it has no name) or else a new "BASE.tmp.XXXXXX" made with O_EXCL, with a
 *     second descriptor kept until the end (for the linkat of step 5). No save ever removes a
 *     file it did not create itself: a temporary left by a killed save stays, under its name;
 *  4. write through a buffer with write(2) (every call checked), fsync, close;
 *  5. O_TMPFILE only: name the inode BASE.tmp.XXXXXX with linkat(/proc/self/fd/N);
 *  6. re-check that the target is still a regular file (or absent), renameat() the temporary
 *     over it, fsync DIRFD.
 * A failure at any step before the rename removes the temporary and leaves the target
 * untouched. Only a failed directory fsync comes after the replacement, and its message says so.
 */
#define TG__SINK_BUF ((size_t)1 << 16)
#define TG__TMP_SUFFIX ".tmp."
#define TG__TMP_SUFFIX_LEN 5
#define TG__TMP_RAND 6

const char *tg__ftype_name(unsigned mode)
{
    mode_t m = (mode_t)mode;
    if (S_ISREG(m))
        return "a regular file";
    if (S_ISDIR(m))
        return "a directory";
    if (S_ISCHR(m))
        return "a character device";
    if (S_ISBLK(m))
        return "a block device";
    if (S_ISFIFO(m))
        return "a FIFO";
    if (S_ISSOCK(m))
        return "a socket";
    if (S_ISLNK(m))
        return "a symbolic link";
    return "of an unknown type";
}

/* The temporary file as a tg_writer: a buffer in front of write(2), with the injected
 * failures of tg_write_opts. */
typedef struct fd_sink {
    int fd;
    const tg_write_opts *o;
    uint64_t accepted; /* bytes taken from the emitter (for fail_after_bytes) */
    uint64_t calls;    /* write(2) calls made, or injected */
    unsigned char *buf; /* (TG__SINK_BUF) */
    size_t len;
} fd_sink;

static int inj_errno(const tg_write_opts *o) { return o->fail_errno ? o->fail_errno : EIO; }

/* write(2) all n bytes; returns 0 or an errno value. */
static int sink_raw(fd_sink *s, const unsigned char *p, size_t n)
{
    while (n) {
        if (s->o->fail_step == TG_WRITE_STEP_WRITE && s->calls == s->o->fail_at) {
            s->calls++;
            return inj_errno(s->o);
        }
        s->calls++;
        size_t k = n > ((size_t)1 << 30) ? (size_t)1 << 30 : n;
        ssize_t r = write(s->fd, p, k);
        if (r < 0) {
            if (errno == EINTR)
                continue;
            return errno ? errno : EIO;
        }
        if (r == 0)
            return ENOSPC; /* no progress on a regular file: the device is full */
        p += r;
        n -= (size_t)r;
    }
    return 0;
}

static int sink_flush(fd_sink *s)
{
    int e = s->len ? sink_raw(s, s->buf, s->len) : 0;
    s->len = 0;
    return e;
}

static int sink_put(fd_sink *s, const unsigned char *p, size_t n)
{
    if (n <= TG__SINK_BUF - s->len) {
        if (n)
            memcpy(s->buf + s->len, p, n);
        s->len += n;
        return 0;
    }
    int e = sink_flush(s);
    if (e)
        return e;
    if (n >= TG__SINK_BUF)
        return sink_raw(s, p, n);
    memcpy(s->buf, p, n);
    s->len = n;
    return 0;
}

static int fd_sink_write(void *user, const void *data, size_t n)
{
    fd_sink *s = user;
    const tg_write_opts *o = s->o;
    if (o->inject_write_failure) {
        uint64_t room = s->accepted >= o->fail_after_bytes ? 0 : o->fail_after_bytes - s->accepted;
        if ((uint64_t)n > room) { /* a full disk: what fits is written, then ENOSPC */
            int e = room ? sink_put(s, data, (size_t)room) : 0;
            s->accepted += room;
            return e ? e : ENOSPC;
        }
    }
    int e = sink_put(s, data, n);
    if (!e)
        s->accepted += n;
    return e;
}

/* "BASE.tmp.XXXXXX" into out (bl + 12 bytes), X from [A-Za-z0-9] as mkstemp uses. */
static void tmp_name(char *out, const char *base, size_t bl, uint64_t *seed)
{
    static const char abc[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
    memcpy(out, base, bl);
    memcpy(out + bl, TG__TMP_SUFFIX, TG__TMP_SUFFIX_LEN);
    uint64_t r = tg__splitmix64(seed);
    for (int i = 0; i < TG__TMP_RAND; i++) {
        out[bl + TG__TMP_SUFFIX_LEN + (size_t)i] = abc[r % 62];
        r /= 62;
    }
    out[bl + TG__TMP_SUFFIX_LEN + TG__TMP_RAND] = '\0';
}

static bool same_inode(const struct stat *a, const struct stat *b)
{
    return a->st_dev == b->st_dev && a->st_ino == b->st_ino;
}

/* Copy s into context memory (NULL and TG_ERR_NOMEM recorded on failure). */
static char *ctx_strdup(tg_ctx *ctx, const char *fn, const char *s, size_t n)
{
    char *p = tg__alloc(ctx, n + 1, fn);
    if (p) {
        memcpy(p, s, n);
        p[n] = '\0';
    }
    return p;
}

/* What a save of path replaces: *target (context memory), and if it exists, its mode. */
static tg_status resolve_target(tg_ctx *ctx, const char *fn, const char *path, char **target,
                                bool *exists, mode_t *mode)
{
    char eb[128];
    struct stat st;
    *target = NULL;
    *exists = false;
    if (lstat(path, &st) != 0) {
        int e = errno ? errno : EIO;
        if (e != ENOENT) {
            tg__err(ctx, TG_ERR_IO, fn, "cannot stat '%s': %s", path,
                    tg__strerror(e, eb, sizeof eb));
            return TG_ERR_IO;
        }
        *target = ctx_strdup(ctx, fn, path, strlen(path));
        return *target ? TG_OK : TG_ERR_NOMEM;
    }
    if (S_ISREG(st.st_mode)) {
        *exists = true;
        *mode = st.st_mode & 07777;
        *target = ctx_strdup(ctx, fn, path, strlen(path));
        return *target ? TG_OK : TG_ERR_NOMEM;
    }
    if (!S_ISLNK(st.st_mode)) {
        tg__err(ctx, TG_ERR_IO, fn, "'%s' is not a regular file (%s): refusing to replace it",
                path, tg__ftype_name(st.st_mode));
        return TG_ERR_IO;
    }
    /* A symbolic link: write through it, so the link survives. The kernel follows it (with its
     * protections against links planted in shared directories, and without opening a device:
     * O_PATH) before we name its target. */
    struct stat ft;
    int fd = -1;
#ifdef O_PATH
    fd = open(path, O_PATH | O_CLOEXEC);
    bool followed = fd >= 0 && fstat(fd, &ft) == 0;
#else
    bool followed = stat(path, &ft) == 0;
#endif
    int e = errno ? errno : EIO;
    if (!followed) {
        if (fd >= 0)
            (void)close(fd);
        if (e == ENOENT)
            tg__err(ctx, TG_ERR_IO, fn,
                    "'%s' is a symbolic link to a file that does not exist: refusing to write "
                    "through it", path);
        else
            tg__err(ctx, TG_ERR_IO, fn, "cannot follow the symbolic link '%s': %s", path,
                    tg__strerror(e, eb, sizeof eb));
        return TG_ERR_IO;
    }
    if (!S_ISREG(ft.st_mode)) {
        if (fd >= 0)
            (void)close(fd);
        tg__err(ctx, TG_ERR_IO, fn,
                "'%s' is a symbolic link to %s, not to a regular file: refusing to replace it",
                path, tg__ftype_name(ft.st_mode));
        return TG_ERR_IO;
    }
    char *real = realpath(path, NULL);
    struct stat rs;
    bool ok = real && stat(real, &rs) == 0 && same_inode(&rs, &ft);
    e = errno ? errno : EIO;
    if (fd >= 0)
        (void)close(fd);
    if (!ok) {
        free(real);
        tg__err(ctx, TG_ERR_IO, fn, "cannot resolve the symbolic link '%s': %s", path,
                real ? "it changed while being followed" : tg__strerror(e, eb, sizeof eb));
        return TG_ERR_IO;
    }
    *exists = true;
    *mode = ft.st_mode & 07777;
    *target = ctx_strdup(ctx, fn, real, strlen(real));
    free(real); /* from realpath(): the C library's allocation */
    return *target ? TG_OK : TG_ERR_NOMEM;
}

/* What tg__write_atomic's stages share. */
typedef struct {
    tg_ctx *ctx;
    const char *fn, *path;
    tg_write_opts o;
    char *target, *dir, *tmp; /* the resolved target, its directory, the temporary's name */
    const char *base;         /* the target's last component, bl bytes */
    size_t bl;
    unsigned char *buf;
    int dirfd, fd, keepfd;
    bool exists, named, anon;
    mode_t mode; /* of the file replaced */
    uint64_t seed;
    char eb[128];
} write_atomic;

/* Record "cannot create a temporary file" with errno @p e. */
static tg_status wa_create_failed(write_atomic *s, int e)
{
    tg__err(s->ctx, TG_ERR_IO, s->fn, "cannot create a temporary file next to '%s': %s",
            s->path, tg__strerror(e, s->eb, sizeof s->eb));
    return TG_ERR_IO;
}

/* 1 and 2. The directory of the resolved target and the buffers; the directory opened, and the
 * litter of earlier saves that were killed cleaned. */
static tg_status wa_open_dir(write_atomic *s)
{
    const char *slash = strrchr(s->target, '/');
    s->base = slash ? slash + 1 : s->target;
    s->bl = strlen(s->base);
    if (s->bl == 0) {
        tg__err(s->ctx, TG_ERR_IO, s->fn, "'%s' ends with '/': it names a directory, not a file",
                s->path);
        return TG_ERR_IO;
    }
    if (!slash)
        s->dir = ctx_strdup(s->ctx, s->fn, ".", 1);
    else
        s->dir = ctx_strdup(s->ctx, s->fn, s->target,
                            slash == s->target ? 1 : (size_t)(slash - s->target));
    s->tmp = tg__alloc(s->ctx, s->bl + TG__TMP_SUFFIX_LEN + TG__TMP_RAND + 1, s->fn);
    s->buf = tg__alloc(s->ctx, TG__SINK_BUF, s->fn);
    if (!s->dir || !s->tmp || !s->buf)
        return TG_ERR_NOMEM;
    s->dirfd = open(s->dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (s->dirfd < 0) {
        int e = errno ? errno : EIO;
        tg__err(s->ctx, TG_ERR_IO, s->fn, "cannot open the directory of '%s': %s", s->path,
                tg__strerror(e, s->eb, sizeof s->eb));
        return TG_ERR_IO;
    }
    return TG_OK;
}

/* 3a. An unnamed temporary file (O_TMPFILE), if the file system has them and it can
 * be named later through /proc/self/fd; else s->fd stays -1. */
static void wa_create_anon(write_atomic *s)
{
#ifdef O_TMPFILE
    if (s->o.no_tmpfile)
        return;
    s->fd = openat(s->dirfd, ".", O_TMPFILE | O_WRONLY | O_CLOEXEC, 0666);
    if (s->fd < 0)
        return;
    /* it can only be named later through /proc/self/fd: check that works now */
    char pp[64];
    struct stat a, b;
    snprintf(pp, sizeof pp, "/proc/self/fd/%d", s->fd);
    if (fstat(s->fd, &a) == 0 && stat(pp, &b) == 0 && same_inode(&a, &b)) {
        s->anon = true;
    } else {
        (void)close(s->fd);
        s->fd = -1;
    }
#else
    (void)s;
#endif
}

/* 3. The temporary file (unnamed if it can be, else under a fresh name), with a second
 * descriptor that keeps it open, and the mode of the file it replaces. */
static tg_status wa_create_tmp(write_atomic *s)
{
    struct timespec now;
    (void)clock_gettime(CLOCK_REALTIME, &now);
    s->seed = (uint64_t)now.tv_sec * 1000000007u ^ (uint64_t)now.tv_nsec ^
              (uint64_t)getpid() << 32 ^ (uint64_t)(uintptr_t)&s->seed;
    if (s->o.fail_step == TG_WRITE_STEP_CREATE)
        return wa_create_failed(s, inj_errno(&s->o));
    wa_create_anon(s);
    for (int tries = 0; s->fd < 0 && tries < 100; tries++) {
        tmp_name(s->tmp, s->base, s->bl, &s->seed);
        s->fd = openat(s->dirfd, s->tmp,
                       O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_NOCTTY | O_CLOEXEC, 0666);
        if (s->fd < 0) {
            if (errno == EEXIST)
                continue;
            return wa_create_failed(s, errno ? errno : EIO);
        }
        s->named = true;
    }
    if (s->fd < 0)
        return wa_create_failed(s, EEXIST);
    s->keepfd = fcntl(s->fd, F_DUPFD_CLOEXEC, 0); /* the inode, open after fd is closed */
    if (s->keepfd < 0)
        return wa_create_failed(s, errno ? errno : EIO);
    if (s->exists && fchmod(s->fd, s->mode) != 0) { /* keep the permissions of the file replaced */
        int e = errno ? errno : EIO;
        tg__err(s->ctx, TG_ERR_IO, s->fn, "cannot set the mode of the new '%s': %s", s->path,
                tg__strerror(e, s->eb, sizeof s->eb));
        return TG_ERR_IO;
    }
    return TG_OK;
}

/* 4. Contents, fsync, close. */
static tg_status wa_write(write_atomic *s, tg__emit_fn emit, void *user)
{
    tg_ctx *ctx = s->ctx;
    fd_sink sink = {s->fd, &s->o, 0, 0, s->buf, 0};
    tg_writer w = {fd_sink_write, &sink};
    tg_status st = emit(ctx, &w, user);
    if (st != TG_OK)
        return st;
    int e = sink_flush(&sink);
    if (e) {
        tg__err(ctx, TG_ERR_IO, s->fn, "cannot write '%s': %s", s->path,
                tg__strerror(e, s->eb, sizeof s->eb));
        return TG_ERR_IO;
    }
    if (!s->o.no_fsync) {
        e = s->o.fail_step == TG_WRITE_STEP_FSYNC ? inj_errno(&s->o)
            : fsync(s->fd) != 0                   ? (errno ? errno : EIO)
                                                  : 0;
        if (e) {
            tg__err(ctx, TG_ERR_IO, s->fn, "cannot fsync the new '%s': %s", s->path,
                    tg__strerror(e, s->eb, sizeof s->eb));
            return TG_ERR_IO;
        }
    }
    int rc = close(s->fd); /* reports late write errors (NFS); keepfd stays open */
    s->fd = -1;
    e = s->o.fail_step == TG_WRITE_STEP_CLOSE ? inj_errno(&s->o)
        : rc != 0                             ? (errno ? errno : EIO)
                                              : 0;
    if (e) {
        tg__err(ctx, TG_ERR_IO, s->fn, "cannot close the new '%s': %s", s->path,
                tg__strerror(e, s->eb, sizeof s->eb));
        return TG_ERR_IO;
    }
    return TG_OK;
}

/* 5. An unnamed temporary gets its name only now. */
static tg_status wa_link_anon(write_atomic *s)
{
#ifdef O_TMPFILE
    if (!s->anon)
        return TG_OK;
    char pp[64];
    snprintf(pp, sizeof pp, "/proc/self/fd/%d", s->keepfd);
    for (int tries = 0; !s->named; tries++) {
        tmp_name(s->tmp, s->base, s->bl, &s->seed);
        if (linkat(AT_FDCWD, pp, s->dirfd, s->tmp, AT_SYMLINK_FOLLOW) == 0) {
            s->named = true;
        } else if (errno != EEXIST || tries >= 100) {
            int e = errno ? errno : EIO;
            tg__err(s->ctx, TG_ERR_IO, s->fn, "cannot link the new '%s' into its directory: %s",
                    s->path, tg__strerror(e, s->eb, sizeof s->eb));
            return TG_ERR_IO;
        }
    }
#else
    (void)s;
#endif
    return TG_OK;
}

/* 6. Replace the target, unless something that is not a regular file took its place; fsync
 * the directory. */
static tg_status wa_replace(write_atomic *s)
{
    tg_ctx *ctx = s->ctx;
    struct stat cur;
    if (fstatat(s->dirfd, s->base, &cur, AT_SYMLINK_NOFOLLOW) == 0 && !S_ISREG(cur.st_mode) &&
        !S_ISLNK(cur.st_mode)) {
        tg__err(ctx, TG_ERR_IO, s->fn, "'%s' is not a regular file (%s): refusing to replace it",
                s->target, tg__ftype_name(cur.st_mode));
        return TG_ERR_IO;
    }
    int e = s->o.fail_step == TG_WRITE_STEP_RENAME              ? inj_errno(&s->o)
            : renameat(s->dirfd, s->tmp, s->dirfd, s->base) != 0 ? (errno ? errno : EIO)
                                                                  : 0;
    if (e) {
        tg__err(ctx, TG_ERR_IO, s->fn, "cannot rename the new '%s' into place: %s", s->path,
                tg__strerror(e, s->eb, sizeof s->eb));
        return TG_ERR_IO;
    }
    s->named = false;
    if (!s->o.no_fsync) {
        bool injected = s->o.fail_step == TG_WRITE_STEP_DIR_FSYNC;
        e = injected ? inj_errno(&s->o) : fsync(s->dirfd) != 0 ? (errno ? errno : EIO) : 0;
        /* some file systems cannot fsync a directory at all (EINVAL): nothing to report */
        if (e && (injected || (e != EINVAL && e != ENOTSUP))) {
            tg__err(ctx, TG_ERR_IO, s->fn,
                    "'%s' was replaced, but the fsync of its directory failed: %s (the new "
                    "file may not survive a crash)", s->path, tg__strerror(e, s->eb, sizeof s->eb));
            return TG_ERR_IO;
        }
    }
    return TG_OK;
}

/* Remove the temporary file if it still has a name, close and free everything. */
static void wa_release(write_atomic *s)
{
    if (s->named)
        (void)unlinkat(s->dirfd, s->tmp, 0); /* the temporary this call created */
    if (s->fd >= 0)
        (void)close(s->fd);
    if (s->keepfd >= 0)
        (void)close(s->keepfd);
    if (s->dirfd >= 0)
        (void)close(s->dirfd);
    tg__free(s->ctx, s->buf);
    tg__free(s->ctx, s->tmp);
    tg__free(s->ctx, s->dir);
    tg__free(s->ctx, s->target);
}

tg_status tg__write_atomic(tg_ctx *ctx, const char *fn, const char *path,
                           const tg_write_opts *opts, tg__emit_fn emit, void *user)
{
    write_atomic s = {.ctx = ctx, .fn = fn, .path = path, .dirfd = -1, .fd = -1, .keepfd = -1};
    if (opts)
        s.o = *opts;
    bool fresh = ctx->status == TG_OK; /* any error recorded below is ours */
    if (!path || !*path) {
        tg__err(ctx, TG_ERR_ARG, fn, "path is %s", path ? "empty" : "NULL");
        return TG_ERR_ARG;
    }
    /* 1. what is replaced (refusals here leave no trace) */
    tg_status st = resolve_target(ctx, fn, path, &s.target, &s.exists, &s.mode);
    if (st != TG_OK)
        return st;
    st = wa_open_dir(&s);
    if (st == TG_OK)
        st = wa_create_tmp(&s);
    if (st == TG_OK)
        st = wa_write(&s, emit, user);
    if (st == TG_OK)
        st = wa_link_anon(&s);
    if (st == TG_OK)
        st = wa_replace(&s);
    wa_release(&s);
    if (fresh && st == TG_ERR_IO && ctx->status == TG_ERR_IO) {
        /* an emitter's message ("cannot write the header: ...") lacks the path: add it */
        size_t ml = strlen(ctx->msg), pl = strlen(path);
        if (!strstr(ctx->msg, path) && ml + pl + 16 < sizeof ctx->msg)
            snprintf(ctx->msg + ml, sizeof ctx->msg - ml, " (writing '%s')", path);
    }
    return st;
}

tg_status tg_file_write(tg_ctx *ctx, const char *path, tg_emit_fn emit, void *user,
                        const tg_write_opts *opts)
{
    static const char fn[] = "tg_file_write";
    if (!ctx)
        return TG_ERR_ARG;
    tg__io_enter(ctx);
    tg_status s;
    if (!emit) {
        tg__err(ctx, TG_ERR_ARG, fn, "emit is NULL");
        s = TG_ERR_ARG;
    } else {
        s = tg__write_atomic(ctx, fn, path, opts, emit, user);
    }
    tg__io_leave(ctx);
    return s;
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
    /* a strided view has no contiguous buffer of its own: the writers refuse NULL data */
    it.data = tg__is_contiguous(t) && !tg__stale(t) ? tg__value(t) : NULL;
    return it;
}

tg_io_item tg_io_item_grad(const tg_tensor *t, const char *name)
{
    tg_io_item it = tg_io_item_data(t, name);
    it.data = t && !tg__stale(t) ? tg__grad_value(t) : NULL;
    return it;
}
