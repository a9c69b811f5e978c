/*
 * npy.c - NumPy .npy reader (format versions 1.0, 2.0, 3.0) and version 1.0 writer.
 *
 * Format (NEP 1; numpy.lib.format):
 *   "\x93NUMPY" major minor
 *   HEADER_LEN: little-endian u16 (1.0) or u32 (2.0, 3.0)
 *   HEADER_LEN bytes: a Python dict literal, e.g.
 *       {'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }
 *     padded with spaces and ended by '\n' so the data starts at a multiple of 64 bytes
 *     (ASCII/latin1 in 1.0 and 2.0, UTF-8 in 3.0)
 *   the data: prod(shape) elements, C order unless fortran_order.
 */
#define _POSIX_C_SOURCE 200809L

#include "io.h"

/* ----- element types -------------------------------------------------------------------------- */
typedef struct npy_type {
    const char *code; /* descr without its byte-order character */
    tg__efmt efmt;
    tg_npy_kind kind;
} npy_type;

static const npy_type npy_types[] = {
    {"f2", TG__E_F16, TG_NPY_FLOAT}, {"f4", TG__E_F32, TG_NPY_FLOAT},
    {"f8", TG__E_F64, TG_NPY_FLOAT}, {"b1", TG__E_BOOL, TG_NPY_BOOL},
    {"i1", TG__E_I8, TG_NPY_INT},    {"u1", TG__E_U8, TG_NPY_INT},
    {"i2", TG__E_I16, TG_NPY_INT},   {"u2", TG__E_U16, TG_NPY_INT},
    {"i4", TG__E_I32, TG_NPY_INT},   {"u4", TG__E_U32, TG_NPY_INT},
    {"i8", TG__E_I64, TG_NPY_INT},   {"u8", TG__E_U64, TG_NPY_INT},
};

/* ----- header dict parser -------------------------------------------------------------------- */
typedef struct npy_hdr {
    tg_ctx *ctx;
    const char *fn, *label;
    const unsigned char *s;
    size_t n, pos;
    tg_status err;
    /* results */
    bool has_descr, has_fortran, has_shape, fortran;
    char descr[16];
    int rank;                   /* entries in the shape tuple (may exceed TG_MAX_RANK) */
    uint64_t dims[TG_MAX_RANK];
    bool big;                   /* a dim did not fit 64 bits */
} npy_hdr;

#if defined(__GNUC__)
__attribute__((format(printf, 3, 4)))
#endif
static bool npy_fail(npy_hdr *h, tg_status s, const char *fmt, ...)
{
    if (h->err)
        return false;
    char msg[300];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    h->err = s;
    tg__err(h->ctx, s, h->fn, "%s: %s", h->label, msg);
    return false;
}

static bool bad_header(npy_hdr *h, const char *what)
{
    return npy_fail(h, TG_ERR_FORMAT, "malformed header at byte %zu: %s", h->pos, what);
}

static void hws(npy_hdr *h)
{
    while (h->pos < h->n && (h->s[h->pos] == ' ' || h->s[h->pos] == '\t' ||
                             h->s[h->pos] == '\n' || h->s[h->pos] == '\r'))
        h->pos++;
}

static int hpeek(npy_hdr *h)
{
    hws(h);
    return h->pos < h->n ? h->s[h->pos] : -1;
}

/* A quoted Python string without escapes, copied into out (cap bytes). Too long for out: an
 * unknown key (FORMAT) or, for the descr value, an unsupported dtype. */
static bool hstr(npy_hdr *h, char *out, size_t cap, bool is_descr)
{
    int q = hpeek(h);
    if (q != '\'' && q != '"')
        return bad_header(h, "expected a quoted string");
    size_t start = ++h->pos;
    while (h->pos < h->n && h->s[h->pos] != q) {
        if (h->s[h->pos] == '\\' || h->s[h->pos] < 0x20 || h->s[h->pos] >= 0x7f)
            return bad_header(h, "unsupported character in a string");
        h->pos++;
    }
    if (h->pos >= h->n)
        return bad_header(h, "unterminated string");
    size_t len = h->pos - start;
    h->pos++;
    if (len >= cap) {
        memcpy(out, h->s + start, cap - 1);
        out[cap - 1] = '\0';
        if (is_descr)
            return npy_fail(h, TG_ERR_UNSUPPORTED, "dtype '%s...' is not supported", out);
        return npy_fail(h, TG_ERR_FORMAT,
                        "unknown header key '%s...' (expected descr, fortran_order, shape)", out);
    }
    memcpy(out, h->s + start, len);
    out[len] = '\0';
    return true;
}

static bool hword(npy_hdr *h, const char *w)
{
    size_t k = strlen(w);
    if (h->n - h->pos >= k && memcmp(h->s + h->pos, w, k) == 0) {
        h->pos += k;
        return true;
    }
    return false;
}

/* A non-negative Python int literal (legacy 'L' suffix accepted). */
static bool hint(npy_hdr *h, uint64_t *out)
{
    hws(h);
    if (h->pos >= h->n || h->s[h->pos] < '0' || h->s[h->pos] > '9')
        return bad_header(h, "expected a non-negative integer in the shape");
    if (h->s[h->pos] == '0' && h->pos + 1 < h->n && h->s[h->pos + 1] >= '0' &&
        h->s[h->pos + 1] <= '9')
        return bad_header(h, "integer with a leading zero");
    uint64_t v = 0;
    while (h->pos < h->n && h->s[h->pos] >= '0' && h->s[h->pos] <= '9') {
        unsigned d = (unsigned)(h->s[h->pos] - '0');
        if (v > (UINT64_MAX - d) / 10)
            h->big = true;
        else
            v = v * 10 + d;
        h->pos++;
    }
    if (h->pos < h->n && h->s[h->pos] == 'L')
        h->pos++;
    *out = v;
    return true;
}

static bool hshape(npy_hdr *h)
{
    if (hpeek(h) != '(')
        return bad_header(h, "shape must be a tuple of integers");
    h->pos++;
    if (hpeek(h) == ')') {
        h->pos++;
        return true; /* () : rank 0 */
    }
    for (;;) {
        uint64_t d = 0;
        if (!hint(h, &d))
            return false;
        if (h->rank < TG_MAX_RANK)
            h->dims[h->rank] = d;
        if (h->rank < 1000000)
            h->rank++;
        int c = hpeek(h);
        if (c == ',') {
            h->pos++;
            if (hpeek(h) == ')') {
                h->pos++;
                return true;
            }
            continue;
        }
        if (c == ')') {
            if (h->rank == 1)
                return bad_header(h, "shape (n) is not a tuple; a 1-d shape is written (n,)");
            h->pos++;
            return true;
        }
        return bad_header(h, "expected ',' or ')' in the shape");
    }
}

static bool hparse(npy_hdr *h)
{
    if (hpeek(h) != '{')
        return bad_header(h, "the header is not a dict literal");
    h->pos++;
    for (;;) {
        if (hpeek(h) == '}') {
            h->pos++;
            break;
        }
        char key[32];
        if (!hstr(h, key, sizeof key, false))
            return false;
        if (hpeek(h) != ':')
            return bad_header(h, "expected ':' after a key");
        h->pos++;
        if (strcmp(key, "descr") == 0) {
            if (h->has_descr)
                return bad_header(h, "key 'descr' appears twice");
            h->has_descr = true;
            int c = hpeek(h);
            if (c == '[')
                return npy_fail(h, TG_ERR_UNSUPPORTED,
                                "structured dtypes (a list 'descr') are not supported");
            if (!hstr(h, h->descr, sizeof h->descr, true))
                return false;
        } else if (strcmp(key, "fortran_order") == 0) {
            if (h->has_fortran)
                return bad_header(h, "key 'fortran_order' appears twice");
            h->has_fortran = true;
            hws(h);
            if (hword(h, "True"))
                h->fortran = true;
            else if (hword(h, "False"))
                h->fortran = false;
            else
                return bad_header(h, "fortran_order must be True or False");
        } else if (strcmp(key, "shape") == 0) {
            if (h->has_shape)
                return bad_header(h, "key 'shape' appears twice");
            h->has_shape = true;
            if (!hshape(h))
                return false;
        } else {
            return npy_fail(h, TG_ERR_FORMAT,
                            "unknown header key '%s' (expected descr, fortran_order, shape)", key);
        }
        int c = hpeek(h);
        if (c == ',') {
            h->pos++;
            continue;
        }
        if (c == '}') {
            h->pos++;
            break;
        }
        return bad_header(h, "expected ',' or '}' after a value");
    }
    if (hpeek(h) >= 0)
        return bad_header(h, "unexpected data after the dict");
    if (!h->has_descr || !h->has_fortran || !h->has_shape)
        return npy_fail(h, TG_ERR_FORMAT, "header lacks the key '%s'",
                        !h->has_descr ? "descr" : !h->has_fortran ? "fortran_order" : "shape");
    return true;
}

static const npy_type *npy_type_of(npy_hdr *h)
{
    const char *d = h->descr;
    char order = d[0];
    if (order == '\0' || !strchr("<>|=", order)) {
        npy_fail(h, TG_ERR_UNSUPPORTED, "dtype '%s' is not supported", d);
        return NULL;
    }
    if (d[1] == 'O') {
        npy_fail(h, TG_ERR_UNSUPPORTED,
                 "object arrays ('%s') are not supported (their data is a Python pickle)", d);
        return NULL;
    }
    const npy_type *t = NULL;
    for (size_t i = 0; i < sizeof npy_types / sizeof npy_types[0]; i++)
        if (strcmp(d + 1, npy_types[i].code) == 0)
            t = &npy_types[i];
    if (!t) {
        npy_fail(h, TG_ERR_UNSUPPORTED,
                 "dtype '%s' is not supported (tgrad reads f2, f4, f8, b1 and integer dtypes)", d);
        return NULL;
    }
    if (tg__efmt_size(t->efmt) > 1 && order != '<') {
        if (order == '>')
            npy_fail(h, TG_ERR_UNSUPPORTED, "big-endian dtype '%s' is not supported", d);
        else
            npy_fail(h, TG_ERR_UNSUPPORTED,
                     "dtype '%s' has no explicit little-endian byte order", d);
        return NULL;
    }
    return t;
}

/* ----- reading -------------------------------------------------------------------------------- */
static const unsigned char npy_magic[6] = {0x93, 'N', 'U', 'M', 'P', 'Y'};

/* The preamble: magic string, version and header length (*hl). False with the error recorded. */
static bool npy_preamble(tg_ctx *ctx, tg__src *src, uint64_t *hl_out)
{
    const char *fn = src->fn, *label = src->label;
    unsigned char pre[12];
    size_t k = src->size < 6 ? (size_t)src->size : 6;
    if (tg__src_read(ctx, src, pre, k, "magic string") != TG_OK)
        return false;
    if (memcmp(pre, npy_magic, k) != 0)
        return tg__err(ctx, TG_ERR_FORMAT, fn, "%s: not an .npy file (bad magic string)",
                       label) != NULL;
    if (src->size < 10)
        return tg__err(ctx, TG_ERR_TRUNCATED, fn, "%s: file is %llu bytes, too short for the "
                       ".npy preamble", label, (unsigned long long)src->size) != NULL;
    if (tg__src_read(ctx, src, pre + 6, 2, "version") != TG_OK)
        return false;
    int major = pre[6], minor = pre[7];
    uint64_t hl;
    if (major == 1 && minor == 0) {
        if (tg__src_read(ctx, src, pre + 8, 2, "header length") != TG_OK)
            return false;
        hl = tg__le16(pre + 8);
    } else if ((major == 2 || major == 3) && minor == 0) {
        if (tg__src_read(ctx, src, pre + 8, 4, "header length") != TG_OK)
            return false;
        hl = tg__le32(pre + 8);
    } else {
        return tg__err(ctx, TG_ERR_UNSUPPORTED, fn,
                       "%s: .npy format version %d.%d is not supported (1.0, 2.0, 3.0 are)",
                       label, major, minor) != NULL;
    }
    if (hl > TG_NPY_MAX_HEADER)
        return tg__err(ctx, TG_ERR_HEADER_SIZE, fn,
                       "%s: header length %llu exceeds the limit of %u bytes", label,
                       (unsigned long long)hl, TG_NPY_MAX_HEADER) != NULL;
    if (hl > tg__src_left(src))
        return tg__err(ctx, TG_ERR_TRUNCATED, fn,
                       "%s: header length is %llu bytes but only %llu bytes follow", label,
                       (unsigned long long)hl, (unsigned long long)tg__src_left(src)) != NULL;
    *hl_out = hl;
    return true;
}

/* The header dictionary (hl bytes) parsed into *h. */
static bool npy_header(tg_ctx *ctx, tg__src *src, uint64_t hl, npy_hdr *h)
{
    const char *fn = src->fn;
    memset(h, 0, sizeof *h);
    h->ctx = ctx;
    h->fn = fn;
    h->label = src->label;
    h->n = (size_t)hl;
    unsigned char *owned = NULL;
    if (src->mem) {
        h->s = src->mem + src->pos;
        src->pos += hl;
    } else {
        owned = tg__alloc(ctx, (size_t)hl + 1, fn);
        if (!owned)
            return false;
        if (tg__src_read(ctx, src, owned, (size_t)hl, "header") != TG_OK) {
            tg__free(ctx, owned);
            return false;
        }
        h->s = owned;
    }
    bool ok = hparse(h);
    tg__free(ctx, owned);
    h->s = NULL;
    return ok;
}

/* The header's shape: rank, every dim >= 1, C order, the element count (*numel) within 64-bit
 * sizes. */
static bool npy_shape(tg_ctx *ctx, const char *fn, const char *label, npy_hdr *h,
                      int64_t shape[TG_MAX_RANK], int64_t *numel_out)
{
    if (h->rank > TG_MAX_RANK)
        return tg__err(ctx, TG_ERR_UNSUPPORTED, fn, "%s: rank %d exceeds TG_MAX_RANK (%d)",
                       label, h->rank, TG_MAX_RANK) != NULL;
    char sb[200];
    int n_long_dims = 0;
    for (int i = 0; i < h->rank; i++) {
        if (h->dims[i] > (uint64_t)INT64_MAX)
            h->big = true;
        shape[i] = h->dims[i] > (uint64_t)INT64_MAX ? INT64_MAX : (int64_t)h->dims[i];
        n_long_dims += h->dims[i] > 1;
    }
    for (int i = 0; i < h->rank; i++)
        if (h->dims[i] == 0)
            return tg__err(ctx, TG_ERR_UNSUPPORTED, fn,
                           "%s: shape %s has a zero-size dim (tgrad tensors need every dim >= 1)",
                           label, tg__dims_str(h->rank, shape, sb, sizeof sb)) != NULL;
    if (h->fortran && n_long_dims > 1)
        return tg__err(ctx, TG_ERR_UNSUPPORTED, fn,
                       "%s: fortran_order True (column-major data) is not supported; save with "
                       "np.ascontiguousarray", label) != NULL;
    if (h->big)
        return tg__err(ctx, TG_ERR_OVERFLOW, fn, "%s: a dim of the shape overflows 64 bits",
                       label) != NULL;
    int64_t numel = 1;
    for (int i = 0; i < h->rank; i++) {
        if (numel > INT64_MAX / 8 / shape[i])
            return tg__err(ctx, TG_ERR_OVERFLOW, fn,
                           "%s: shape %s: element count overflows 64-bit sizes", label,
                           tg__dims_str(h->rank, shape, sb, sizeof sb)) != NULL;
        numel *= shape[i];
    }
    *numel_out = numel;
    return true;
}

static tg_tensor *npy_read(tg_ctx *ctx, tg__src *src, tg_dtype want, tg_npy_kind *kind_out,
                           const char *name)
{
    const char *fn = src->fn, *label = src->label;
    if (tg_dtype_size(want) == 0)
        return tg__err(ctx, TG_ERR_DTYPE, fn, "unknown dtype %d requested", (int)want);
    uint64_t hl = 0;
    npy_hdr h;
    if (!npy_preamble(ctx, src, &hl) || !npy_header(ctx, src, hl, &h))
        return NULL;
    const npy_type *et = npy_type_of(&h);
    if (!et)
        return NULL;
    int64_t shape[TG_MAX_RANK], numel = 0;
    char sb[200];
    if (!npy_shape(ctx, fn, label, &h, shape, &numel))
        return NULL;
    uint64_t nbytes = (uint64_t)numel * tg__efmt_size(et->efmt);
    uint64_t left = tg__src_left(src);
    if (left < nbytes)
        return tg__err(ctx, TG_ERR_TRUNCATED, fn,
                       "%s: the data is %llu bytes but %s %s needs %llu", label,
                       (unsigned long long)left, h.descr,
                       tg__dims_str(h.rank, shape, sb, sizeof sb), (unsigned long long)nbytes);
    if (left > nbytes)
        return tg__err(ctx, TG_ERR_TRAILING, fn, "%s: %llu bytes after the array data", label,
                       (unsigned long long)(left - nbytes));
    tg_tensor *t = tg_input(ctx, want, h.rank, shape, name);
    if (!t)
        return NULL;
    if (tg__src_read_elems(ctx, src, t->data, want, et->efmt, (uint64_t)numel, "array data") !=
        TG_OK) {
        tg__tensor_discard(ctx, t);
        return NULL;
    }
    if (kind_out)
        *kind_out = et->kind;
    return t;
}

static tg_tensor *tg_npy_read_io(tg_ctx *ctx, const char *path, tg_dtype want,
                                 tg_npy_kind *kind_out)
{
    static const char fn[] = "tg_npy_read";
    if (!ctx)
        return NULL;
    if (!path)
        return tg__err(ctx, TG_ERR_ARG, fn, "path is NULL");
    /* tensor name: base name without a ".npy" suffix */
    char name[TG_NAME_MAX];
    const char *base = strrchr(path, '/');
    base = base ? base + 1 : path;
    size_t bl = strlen(base);
    if (bl > 4 && strcmp(base + bl - 4, ".npy") == 0)
        bl -= 4;
    if (bl >= sizeof name)
        bl = sizeof name - 1;
    memcpy(name, base, bl);
    name[bl] = '\0';
    tg__src src;
    if (tg__src_open_file(ctx, &src, fn, path) != TG_OK)
        return NULL;
    tg_tensor *t = npy_read(ctx, &src, want, kind_out, bl ? name : NULL);
    tg__src_close(ctx, &src);
    return t;
}

tg_tensor *tg_npy_read(tg_ctx *ctx, const char *path, tg_dtype want, tg_npy_kind *kind_out)
{
    tg__io_enter(ctx);
    tg_tensor *r = tg_npy_read_io(ctx, path, want, kind_out);
    tg__io_leave(ctx);
    return r;
}

static tg_tensor *tg_npy_read_fd_io(tg_ctx *ctx, int fd, const char *label, uint64_t max_bytes,
                                    tg_dtype want, tg_npy_kind *kind_out)
{
    static const char fn[] = "tg_npy_read_fd";
    if (!ctx)
        return NULL;
    tg__src src;
    if (tg__src_open_fd(ctx, &src, fn, fd, label, max_bytes) != TG_OK)
        return NULL;
    tg_tensor *t = npy_read(ctx, &src, want, kind_out, NULL);
    tg__src_close(ctx, &src);
    return t;
}

tg_tensor *tg_npy_read_fd(tg_ctx *ctx, int fd, const char *label, uint64_t max_bytes,
                          tg_dtype want, tg_npy_kind *kind_out)
{
    tg__io_enter(ctx);
    tg_tensor *r = tg_npy_read_fd_io(ctx, fd, label, max_bytes, want, kind_out);
    tg__io_leave(ctx);
    return r;
}

static tg_tensor *tg_npy_read_mem_io(tg_ctx *ctx, const void *data, size_t size, tg_dtype want,
                                     tg_npy_kind *kind_out)
{
    static const char fn[] = "tg_npy_read_mem";
    if (!ctx)
        return NULL;
    if (!data && size)
        return tg__err(ctx, TG_ERR_ARG, fn, "data is NULL");
    tg__src src;
    tg__src_open_mem(&src, fn, data ? data : "", size);
    return npy_read(ctx, &src, want, kind_out, NULL);
}

tg_tensor *tg_npy_read_mem(tg_ctx *ctx, const void *data, size_t size, tg_dtype want,
                           tg_npy_kind *kind_out)
{
    tg__io_enter(ctx);
    tg_tensor *r = tg_npy_read_mem_io(ctx, data, size, want, kind_out);
    tg__io_leave(ctx);
    return r;
}

/* ----- writing -------------------------------------------------------------------------------- */
/* numpy.lib.format: spare spaces after the dict so the first dim can grow in place. */
#define NPY_GROWTH_AXIS_MAX_DIGITS 21
#define NPY_ARRAY_ALIGN 64

typedef struct npy_out {
    const char *fn;
    const tg_io_item *it;
    uint64_t nbytes;
    unsigned char hdr[512];
    size_t hlen; /* bytes of hdr to write: preamble + header */
} npy_out;

/* The exact preamble and header numpy.save writes for a C-order '<f4'/'<f8'/'<i4' array. */
static void npy_build_header(npy_out *o)
{
    char dict[400];
    size_t k = (size_t)snprintf(dict, sizeof dict,
                                "{'descr': '%s', 'fortran_order': False, 'shape': (",
                                o->it->dtype == TG_F32   ? "<f4"
                                : o->it->dtype == TG_I32 ? "<i4"
                                                         : "<f8");
    int first_digits = 0;
    for (int i = 0; i < o->it->rank; i++) {
        int w = snprintf(dict + k, sizeof dict - k, i ? ", %lld" : "%lld",
                         (long long)o->it->shape[i]);
        if (i == 0)
            first_digits = w;
        k += (size_t)w;
    }
    k += (size_t)snprintf(dict + k, sizeof dict - k, "%s), }", o->it->rank == 1 ? "," : "");
    if (o->it->rank > 0)
        for (int i = first_digits; i < NPY_GROWTH_AXIS_MAX_DIGITS; i++)
            dict[k++] = ' ';
    size_t hlen = k + 1; /* + '\n' */
    size_t pad = NPY_ARRAY_ALIGN - ((8 + 2 + hlen) % NPY_ARRAY_ALIGN);
    unsigned char *p = o->hdr;
    memcpy(p, npy_magic, 6);
    p[6] = 1;
    p[7] = 0;
    tg__put_le16(p + 8, (uint16_t)(hlen + pad));
    memcpy(p + 10, dict, k);
    memset(p + 10 + k, ' ', pad);
    p[10 + k + pad] = '\n';
    o->hlen = 10 + hlen + pad;
}

static tg_status npy_emit(tg_ctx *ctx, const tg_writer *w, void *user)
{
    npy_out *o = user;
    tg_status s = tg__write(ctx, o->fn, w, o->hdr, o->hlen, "header");
    if (s == TG_OK)
        s = tg__write_data(ctx, o->fn, w, o->it->data, o->it->dtype, o->nbytes);
    return s;
}

static tg_status npy_write(tg_ctx *ctx, const char *fn, const char *path, const tg_writer *w,
                           const tg_io_item *it, const tg_write_opts *opts)
{
    if (!ctx)
        return TG_ERR_ARG;
    if (!w && (!path || !*path)) {
        tg__err(ctx, TG_ERR_ARG, fn, "path is %s", path ? "empty" : "NULL");
        return TG_ERR_ARG;
    }
    npy_out o;
    memset(&o, 0, sizeof o);
    o.fn = fn;
    o.it = it;
    tg_status s = tg__item_check(ctx, fn, it, -1, &o.nbytes);
    if (s != TG_OK)
        return s;
    npy_build_header(&o);
    if (w)
        return npy_emit(ctx, w, &o);
    return tg__write_atomic(ctx, fn, path, opts, npy_emit, &o);
}

static tg_status tg_npy_write_io(tg_ctx *ctx, const char *path, const tg_tensor *t)
{
    static const char fn[] = "tg_npy_write";
    if (!ctx)
        return TG_ERR_ARG;
    if (!t) {
        tg__err(ctx, TG_ERR_ARG, fn, "tensor is NULL");
        return TG_ERR_ARG;
    }
    if (t->ctx != ctx) {
        tg__err(ctx, TG_ERR_ARG, fn, "tensor '%s' belongs to another context", t->name);
        return TG_ERR_ARG;
    }
    tg_io_item it = tg_io_item_data(t, NULL);
    return npy_write(ctx, fn, path, NULL, &it, NULL);
}

tg_status tg_npy_write(tg_ctx *ctx, const char *path, const tg_tensor *t)
{
    tg__io_enter(ctx);
    tg_status r = tg_npy_write_io(ctx, path, t);
    tg__io_leave(ctx);
    return r;
}

static tg_status tg_npy_write_data_io(tg_ctx *ctx, const char *path, tg_dtype dtype, int rank,
                                      const int64_t *shape, const void *data)
{
    tg_io_item it = {NULL, dtype, rank, shape, data};
    return npy_write(ctx, "tg_npy_write_data", path, NULL, &it, NULL);
}

tg_status tg_npy_write_data(tg_ctx *ctx, const char *path, tg_dtype dtype, int rank,
                            const int64_t *shape, const void *data)
{
    tg__io_enter(ctx);
    tg_status r = tg_npy_write_data_io(ctx, path, dtype, rank, shape, data);
    tg__io_leave(ctx);
    return r;
}

static tg_status tg_npy_write_item_io(tg_ctx *ctx, const char *path, const tg_io_item *item,
                                      const tg_write_opts *opts)
{
    return npy_write(ctx, "tg_npy_write_item", path, NULL, item, opts);
}

tg_status tg_npy_write_item(tg_ctx *ctx, const char *path, const tg_io_item *item,
                            const tg_write_opts *opts)
{
    tg__io_enter(ctx);
    tg_status r = tg_npy_write_item_io(ctx, path, item, opts);
    tg__io_leave(ctx);
    return r;
}

static tg_status tg_npy_write_to_io(tg_ctx *ctx, const tg_writer *w, const tg_io_item *item)
{
    static const char fn[] = "tg_npy_write_to";
    if (!ctx)
        return TG_ERR_ARG;
    if (!w || !w->write) {
        tg__err(ctx, TG_ERR_ARG, fn, "writer is NULL");
        return TG_ERR_ARG;
    }
    return npy_write(ctx, fn, NULL, w, item, NULL);
}

tg_status tg_npy_write_to(tg_ctx *ctx, const tg_writer *w, const tg_io_item *item)
{
    tg__io_enter(ctx);
    tg_status r = tg_npy_write_to_io(ctx, w, item);
    tg__io_leave(ctx);
    return r;
}
