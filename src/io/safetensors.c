/*
 * safetensors.c - strict reader and deterministic atomic writer for the safetensors format.
 *
 * Format (huggingface/safetensors README; reference implementation safetensors/src/tensor.rs):
 *   [8 bytes]  N, unsigned little-endian 64-bit: size of the header
 *   [N bytes]  UTF-8 JSON object: name -> {"dtype": "F32", "shape": [2, 3],
 *              "data_offsets": [begin, end]}, plus optional "__metadata__": {string: string};
 *              may be padded with trailing spaces (writers pad to a multiple of 8)
 *   [rest]     data section; offsets are relative to its start; tensors are little-endian,
 *              row-major, and their byte ranges tile the section exactly (no holes, no overlap,
 *              nothing after the last one).
 *
 * The reader validates everything before allocating any tensor, then reads the data in offset
 * order (one sequential pass over the file). Tensors are exposed in header (JSON) order.
 */
#define _POSIX_C_SOURCE 200809L

#include "io.h"
#include "json.h"

#include <stdlib.h>

/* ----- dtypes -------------------------------------------------------------------------------- */
typedef struct st_dtype {
    const char *name;
    unsigned size; /* bytes per element */
    int efmt;      /* tg__efmt we convert from, or -1 if tgrad cannot read it */
    tg_dtype to;   /* tgrad dtype the tensor gets */
} st_dtype;

/* Every dtype of the reference implementation. Floats become f32 or f64, BOOL and integers i32
 * (U32, I64 and U64 values are range-checked when the data is read). */
static const st_dtype st_dtypes[] = {
    {"F64", 8, TG__E_F64, TG_F64},   {"F32", 4, TG__E_F32, TG_F32},
    {"F16", 2, TG__E_F16, TG_F32},   {"BF16", 2, TG__E_BF16, TG_F32},
    {"BOOL", 1, TG__E_BOOL, TG_I32}, {"U8", 1, TG__E_U8, TG_I32},
    {"I8", 1, TG__E_I8, TG_I32},     {"I16", 2, TG__E_I16, TG_I32},
    {"U16", 2, TG__E_U16, TG_I32},   {"I32", 4, TG__E_I32, TG_I32},
    {"U32", 4, TG__E_U32, TG_I32},   {"I64", 8, TG__E_I64, TG_I32},
    {"U64", 8, TG__E_U64, TG_I32},   {"F8_E5M2", 1, -1, TG_F32},
    {"F8_E4M3", 1, -1, TG_F32},      {"F8_E8M0", 1, -1, TG_F32},
    {"C64", 8, -1, TG_F32},
};

static const st_dtype *st_dtype_find(const char *s, size_t len)
{
    for (size_t i = 0; i < sizeof st_dtypes / sizeof st_dtypes[0]; i++)
        if (strlen(st_dtypes[i].name) == len && memcmp(st_dtypes[i].name, s, len) == 0)
            return &st_dtypes[i];
    return NULL;
}

/* ----- the result record ---------------------------------------------------------------------- */
typedef struct st_key {
    const char *key;
    int64_t idx;
} st_key;

struct tg_safetensors {
    tg_ctx *ctx;
    int64_t n, n_meta;
    tg_tensor **tensors;        /* (n) header order */
    const char **names;         /* (n) full keys */
    const char **dtypes;        /* (n) dtype strings as stored in the file */
    st_key *by_name;            /* (n) sorted by key, for find */
    const char **meta_keys;     /* (n_meta) header order */
    const char **meta_values;   /* (n_meta) */
    st_key *meta_by_key;        /* (n_meta) sorted by key */
};

static int st_key_cmp(const void *a, const void *b)
{
    return strcmp(((const st_key *)a)->key, ((const st_key *)b)->key);
}

static int64_t st_key_find(const st_key *keys, int64_t n, const char *key)
{
    int64_t lo = 0, hi = n;
    while (lo < hi) {
        int64_t mid = lo + (hi - lo) / 2;
        int c = strcmp(keys[mid].key, key);
        if (c == 0)
            return keys[mid].idx;
        if (c < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    return -1;
}

int64_t tg_safetensors_count(const tg_safetensors *st) { return st ? st->n : 0; }

const char *tg_safetensors_name(const tg_safetensors *st, int64_t i)
{
    return st && i >= 0 && i < st->n ? st->names[i] : NULL;
}

tg_tensor *tg_safetensors_tensor(const tg_safetensors *st, int64_t i)
{
    return st && i >= 0 && i < st->n ? st->tensors[i] : NULL;
}

const char *tg_safetensors_file_dtype(const tg_safetensors *st, int64_t i)
{
    return st && i >= 0 && i < st->n ? st->dtypes[i] : NULL;
}

tg_tensor *tg_safetensors_find(const tg_safetensors *st, const char *name)
{
    if (!st || !name)
        return NULL;
    int64_t i = st_key_find(st->by_name, st->n, name);
    return i < 0 ? NULL : st->tensors[i];
}

int64_t tg_safetensors_meta_count(const tg_safetensors *st) { return st ? st->n_meta : 0; }

const char *tg_safetensors_meta_key(const tg_safetensors *st, int64_t i)
{
    return st && i >= 0 && i < st->n_meta ? st->meta_keys[i] : NULL;
}

const char *tg_safetensors_meta_value(const tg_safetensors *st, int64_t i)
{
    return st && i >= 0 && i < st->n_meta ? st->meta_values[i] : NULL;
}

const char *tg_safetensors_meta_get(const tg_safetensors *st, const char *key)
{
    if (!st || !key)
        return NULL;
    int64_t i = st_key_find(st->meta_by_key, st->n_meta, key);
    return i < 0 ? NULL : st->meta_values[i];
}

/* ----- parsing -------------------------------------------------------------------------------- */
#define ST_BIG UINT64_MAX /* an integer that did not fit 64 bits */

typedef struct st_entry {
    tg__jstr name;
    tg__jstr dtype_str;
    const st_dtype *dt;
    int rank;                   /* entries listed in "shape" (may exceed TG_MAX_RANK) */
    uint64_t dims[TG_MAX_RANK]; /* the first TG_MAX_RANK of them */
    uint64_t begin, end;
    int64_t numel;
    uint64_t nbytes;
    tg_tensor *t;
} st_entry;

typedef struct st_kv {
    tg__jstr key, value;
} st_kv;

/* A header listing more tensors than this is checked against the data section's size as it
 * is parsed (every tensor needs at least one byte), so a huge header with no data cannot make
 * the reader allocate its entries first. Small headers keep the documented order of checks. */
#define ST_EARLY_COUNT 1024

typedef struct st_parse {
    tg_ctx *ctx;
    const char *fn, *label;
    uint64_t data_len; /* bytes after the header */
    tg__jp jp;
    st_entry *e;
    int64_t n, cap;
    st_kv *m;
    int64_t nm, mcap;
} st_parse;

/* Copy src to dst (cap bytes) with control characters (C0, DEL and, as UTF-8, C1) written as
 * escapes ("\n", "\x1b", "\u009b"): names and strings from the file appear in messages, which
 * must stay one printable line whatever the file holds. */
static void st_escape(char *dst, size_t cap, const char *src)
{
    size_t k = 0;
    for (const unsigned char *p = (const unsigned char *)src; *p && k + 7 < cap; p++) {
        if (*p == '\n' || *p == '\t' || *p == '\r') {
            dst[k++] = '\\';
            dst[k++] = *p == '\n' ? 'n' : *p == '\t' ? 't' : 'r';
        } else if (*p < 0x20 || *p == 0x7f) {
            k += (size_t)snprintf(dst + k, cap - k, "\\x%02x", *p);
        } else if (*p == 0xc2 && p[1] >= 0x80 && p[1] <= 0x9f) {
            k += (size_t)snprintf(dst + k, cap - k, "\\u%04x", p[1]);
            p++;
        } else {
            dst[k++] = (char)*p;
        }
    }
    dst[k] = '\0';
}

/* Record an error "fn: label: message" and stop the parser. Returns false. */
#if defined(__GNUC__)
__attribute__((format(printf, 3, 4)))
#endif
static bool st_fail(st_parse *P, tg_status s, const char *fmt, ...)
{
    char raw[400], msg[400];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(raw, sizeof raw, fmt, ap);
    va_end(ap);
    st_escape(msg, sizeof msg, raw);
    tg__err(P->ctx, s, P->fn, "%s: %s", P->label, msg);
    if (!P->jp.err)
        P->jp.err = s;
    return false;
}

/* Names in messages: at most 100 bytes. */
#define NM(js) (int)((js).len > 100 ? 100 : (js).len), (js).p

static bool str_is(tg__jstr s, const char *lit)
{
    return s.len == strlen(lit) && memcmp(s.p, lit, s.len) == 0;
}

/* Grow an array of elem-byte records to hold need entries (context memory). */
static bool grow(tg_ctx *ctx, const char *fn, void **p, int64_t *cap, size_t elem, int64_t need)
{
    if (need <= *cap)
        return true;
    int64_t nc = *cap ? *cap * 2 : 16;
    while (nc < need)
        nc *= 2;
    if ((uint64_t)nc > SIZE_MAX / elem) {
        tg__err(ctx, TG_ERR_NOMEM, fn, "too many entries");
        return false;
    }
    void *q = tg__alloc(ctx, (size_t)nc * elem, fn);
    if (!q)
        return false;
    if (*cap)
        memcpy(q, *p, (size_t)*cap * elem);
    tg__free(ctx, *p);
    *p = q;
    *cap = nc;
    return true;
}

/* A non-negative JSON integer (ST_BIG if it does not fit 64 bits). */
static bool st_uint(st_parse *P, const st_entry *e, const char *field, uint64_t *out)
{
    tg__jnum v;
    if (tg__jp_peek(&P->jp) != TG__J_NUMBER) {
        if (!P->jp.err)
            st_fail(P, TG_ERR_JSON, "tensor '%.*s': %s must hold non-negative integers",
                    NM(e->name), field);
        return false;
    }
    if (!tg__jp_number(&P->jp, &v))
        return false;
    if (!v.is_int || v.neg) {
        st_fail(P, TG_ERR_JSON, "tensor '%.*s': %s must hold non-negative integers, not %s",
                NM(e->name), field, v.neg ? "a negative number" : "a fraction or exponent");
        return false;
    }
    *out = v.big ? ST_BIG : v.mag;
    return true;
}

/* An entry's "shape": an array of non-negative integers (the rank counted past TG_MAX_RANK, for
 * the message). */
static bool st_parse_shape(st_parse *P, st_entry *e)
{
    tg__jp *jp = &P->jp;
    if (tg__jp_peek(jp) != TG__J_ARRAY) {
        if (!jp->err)
            st_fail(P, TG_ERR_JSON,
                    "tensor '%.*s': shape must be an array of non-negative integers",
                    NM(e->name));
        return false;
    }
    tg__jp_arr_begin(jp);
    while (tg__jp_arr_next(jp)) {
        uint64_t d;
        if (!st_uint(P, e, "shape", &d))
            return false;
        if (e->rank < TG_MAX_RANK)
            e->dims[e->rank] = d;
        if (e->rank < INT32_MAX)
            e->rank++;
    }
    return true;
}

/* An entry's "data_offsets": [begin, end]. */
static bool st_parse_offsets(st_parse *P, st_entry *e)
{
    tg__jp *jp = &P->jp;
    if (tg__jp_peek(jp) != TG__J_ARRAY) {
        if (!jp->err)
            st_fail(P, TG_ERR_JSON, "tensor '%.*s': data_offsets must be [begin, end]",
                    NM(e->name));
        return false;
    }
    tg__jp_arr_begin(jp);
    int k = 0;
    while (tg__jp_arr_next(jp)) {
        uint64_t v;
        if (k >= 2)
            return st_fail(P, TG_ERR_JSON,
                           "tensor '%.*s': data_offsets must be [begin, end] (2 entries)",
                           NM(e->name));
        if (!st_uint(P, e, "data_offsets", &v))
            return false;
        if (k == 0)
            e->begin = v;
        else
            e->end = v;
        k++;
    }
    if (jp->err)
        return false;
    if (k != 2)
        return st_fail(P, TG_ERR_JSON,
                       "tensor '%.*s': data_offsets must be [begin, end], got %d entr%s",
                       NM(e->name), k, k == 1 ? "y" : "ies");
    return true;
}

static bool st_parse_entry(st_parse *P, st_entry *e)
{
    tg__jp *jp = &P->jp;
    if (tg__jp_peek(jp) != TG__J_OBJECT) {
        if (!jp->err)
            st_fail(P, TG_ERR_JSON,
                    "tensor '%.*s': expected an object with dtype, shape and data_offsets",
                    NM(e->name));
        return false;
    }
    tg__jp_obj_begin(jp);
    bool has_dtype = false, has_shape = false, has_off = false;
    tg__jstr f;
    while (tg__jp_obj_next(jp, &f)) {
        if (str_is(f, "dtype")) {
            if (has_dtype)
                return st_fail(P, TG_ERR_DUPLICATE, "tensor '%.*s': field 'dtype' appears twice",
                               NM(e->name));
            has_dtype = true;
            if (tg__jp_peek(jp) != TG__J_STRING) {
                if (!jp->err)
                    st_fail(P, TG_ERR_JSON, "tensor '%.*s': dtype must be a string", NM(e->name));
                return false;
            }
            if (!tg__jp_string(jp, &e->dtype_str))
                return false;
        } else if (str_is(f, "shape")) {
            if (has_shape)
                return st_fail(P, TG_ERR_DUPLICATE, "tensor '%.*s': field 'shape' appears twice",
                               NM(e->name));
            has_shape = true;
            if (!st_parse_shape(P, e))
                return false;
        } else if (str_is(f, "data_offsets")) {
            if (has_off)
                return st_fail(P, TG_ERR_DUPLICATE,
                               "tensor '%.*s': field 'data_offsets' appears twice", NM(e->name));
            has_off = true;
            if (!st_parse_offsets(P, e))
                return false;
        } else {
            return st_fail(P, TG_ERR_JSON, "tensor '%.*s': unknown field '%.*s'", NM(e->name),
                           NM(f));
        }
    }
    if (jp->err)
        return false;
    const char *missing = !has_dtype   ? "dtype"
                          : !has_shape ? "shape"
                          : !has_off   ? "data_offsets"
                                       : NULL;
    if (missing)
        return st_fail(P, TG_ERR_JSON, "tensor '%.*s': missing field '%s'", NM(e->name), missing);
    return true;
}

static bool st_parse_meta(st_parse *P)
{
    tg__jp *jp = &P->jp;
    if (tg__jp_peek(jp) != TG__J_OBJECT) {
        if (!jp->err)
            st_fail(P, TG_ERR_JSON, "__metadata__ must be an object mapping strings to strings");
        return false;
    }
    tg__jp_obj_begin(jp);
    tg__jstr k;
    while (tg__jp_obj_next(jp, &k)) {
        if (tg__jp_peek(jp) != TG__J_STRING) {
            if (!jp->err)
                st_fail(P, TG_ERR_JSON, "__metadata__ value of '%.*s' is not a string", NM(k));
            return false;
        }
        tg__jstr v;
        if (!tg__jp_string(jp, &v))
            return false;
        if (memchr(k.p, 0, k.len) || memchr(v.p, 0, v.len))
            return st_fail(P, TG_ERR_UNSUPPORTED,
                           "__metadata__ entry '%.*s' contains a NUL character", NM(k));
        if (P->nm >= TG_SAFETENSORS_MAX_META)
            return st_fail(P, TG_ERR_UNSUPPORTED, "__metadata__ has more than %u entries",
                           TG_SAFETENSORS_MAX_META);
        if (!grow(P->ctx, P->fn, (void **)&P->m, &P->mcap, sizeof *P->m, P->nm + 1)) {
            P->jp.err = TG_ERR_NOMEM;
            return false;
        }
        P->m[P->nm].key = k;
        P->m[P->nm].value = v;
        P->nm++;
    }
    return !jp->err;
}

static bool st_parse_header(st_parse *P)
{
    tg__jp *jp = &P->jp;
    if (tg__jp_peek(jp) != TG__J_OBJECT) {
        if (!jp->err)
            st_fail(P, TG_ERR_JSON, "the header is not a JSON object");
        return false;
    }
    tg__jp_obj_begin(jp);
    bool have_meta = false;
    tg__jstr key;
    while (tg__jp_obj_next(jp, &key)) {
        if (str_is(key, "__metadata__")) {
            if (have_meta)
                return st_fail(P, TG_ERR_DUPLICATE, "key '__metadata__' appears twice");
            have_meta = true;
            if (!st_parse_meta(P))
                return false;
            continue;
        }
        if (memchr(key.p, 0, key.len))
            return st_fail(P, TG_ERR_UNSUPPORTED, "tensor name '%.*s' contains a NUL character",
                           NM(key));
        if (P->n >= ST_EARLY_COUNT && (uint64_t)P->n >= P->data_len)
            return st_fail(P, TG_ERR_TRUNCATED,
                           "the header lists more than %lld tensors but the data section holds "
                           "%llu bytes (every tensor needs at least one)", (long long)P->n,
                           (unsigned long long)P->data_len);
        if (!grow(P->ctx, P->fn, (void **)&P->e, &P->cap, sizeof *P->e, P->n + 1)) {
            P->jp.err = TG_ERR_NOMEM;
            return false;
        }
        st_entry *e = &P->e[P->n++];
        memset(e, 0, sizeof *e);
        e->name = key;
        if (!st_parse_entry(P, e))
            return false;
    }
    if (jp->err)
        return false;
    return tg__jp_end(jp);
}

/* "[2, 3]" from raw dims. */
static const char *udims_str(const st_entry *e, char *buf, size_t n)
{
    size_t k = 0;
    int r = e->rank < TG_MAX_RANK ? e->rank : TG_MAX_RANK;
    k += (size_t)snprintf(buf, n, "[");
    for (int i = 0; i < r && k < n; i++)
        k += (size_t)snprintf(buf + k, n - k, i ? ", %llu" : "%llu",
                              (unsigned long long)e->dims[i]);
    if (k < n)
        snprintf(buf + k, n - k, "%s]", e->rank > r ? ", ..." : "");
    return buf;
}

/* Per-tensor checks: dtype, rank, dims, sizes, offsets. */
static bool st_check_entry(st_parse *P, st_entry *e)
{
    char sb[200];
    e->dt = st_dtype_find(e->dtype_str.p, e->dtype_str.len);
    if (!e->dt)
        return st_fail(P, TG_ERR_UNSUPPORTED, "tensor '%.*s': unknown dtype '%.*s'", NM(e->name),
                       NM(e->dtype_str));
    if (e->dt->efmt < 0)
        return st_fail(P, TG_ERR_UNSUPPORTED,
                       "tensor '%.*s': dtype %s is not supported (tgrad reads F64, F32, F16, BF16, "
                       "BOOL and integer dtypes)", NM(e->name), e->dt->name);
    if (e->rank > TG_MAX_RANK)
        return st_fail(P, TG_ERR_UNSUPPORTED, "tensor '%.*s': rank %d exceeds TG_MAX_RANK (%d)",
                       NM(e->name), e->rank, TG_MAX_RANK);
    for (int i = 0; i < e->rank; i++)
        if (e->dims[i] == 0)
            return st_fail(P, TG_ERR_UNSUPPORTED,
                           "tensor '%.*s': shape %s has a zero-size dim (tgrad tensors need every "
                           "dim >= 1)", NM(e->name), udims_str(e, sb, sizeof sb));
    int64_t numel = 1;
    for (int i = 0; i < e->rank; i++) {
        uint64_t d = e->dims[i];
        if (d > (uint64_t)INT64_MAX || (uint64_t)numel > (uint64_t)(INT64_MAX / 8) / d)
            return st_fail(P, TG_ERR_OVERFLOW,
                           "tensor '%.*s': shape %s: element count overflows 64-bit sizes",
                           NM(e->name), udims_str(e, sb, sizeof sb));
        numel *= (int64_t)d;
    }
    e->numel = numel;
    e->nbytes = (uint64_t)numel * e->dt->size; /* <= INT64_MAX: numel <= INT64_MAX / 8 */
    if (e->begin > e->end || e->end > (uint64_t)INT64_MAX)
        return st_fail(P, TG_ERR_OUT_OF_BOUNDS, "tensor '%.*s': invalid data_offsets [%llu, %llu]",
                       NM(e->name), (unsigned long long)e->begin, (unsigned long long)e->end);
    if (e->end - e->begin != e->nbytes)
        return st_fail(P, TG_ERR_SIZE_MISMATCH,
                       "tensor '%.*s': data_offsets [%llu, %llu] hold %llu bytes but %s %s needs "
                       "%llu", NM(e->name), (unsigned long long)e->begin,
                       (unsigned long long)e->end, (unsigned long long)(e->end - e->begin),
                       e->dt->name, udims_str(e, sb, sizeof sb), (unsigned long long)e->nbytes);
    return true;
}

static int st_entry_ptr_cmp(const void *a, const void *b)
{
    const st_entry *x = *(const st_entry *const *)a, *y = *(const st_entry *const *)b;
    if (x->begin != y->begin)
        return x->begin < y->begin ? -1 : 1;
    if (x->end != y->end)
        return x->end < y->end ? -1 : 1;
    return 0;
}

/* Sorted key arrays; DUPLICATE if a key repeats. */
static bool st_sorted_keys(st_parse *P, st_key *keys, int64_t n, const char *what)
{
    if (n > 1)
        qsort(keys, (size_t)n, sizeof *keys, st_key_cmp);
    for (int64_t i = 1; i < n; i++)
        if (strcmp(keys[i - 1].key, keys[i].key) == 0)
            return st_fail(P, TG_ERR_DUPLICATE, "%s '%.100s' appears twice", what, keys[i].key);
    return true;
}

static size_t round16(size_t x) { return (x + 15) & ~(size_t)15; }

/* When the header size field is impossible for this file, look at the first bytes after it, so
 * that another kind of file (text, an image, .npy) is named as such rather than by the size its
 * first 8 bytes happen to spell: the header (JSON) starts with '{', possibly after JSON
 * whitespace. @p left bytes follow the size field. Returns false with the error recorded. */
static bool st_sniff(tg_ctx *ctx, tg__src *src, uint64_t left)
{
    unsigned char look[64];
    size_t k = left < sizeof look ? (size_t)left : sizeof look, i = 0;
    if (src->mem)
        memcpy(look, src->mem + src->pos, k);
    else if (tg__src_read(ctx, src, look, k, "header") != TG_OK)
        return false;
    while (i < k && (look[i] == ' ' || look[i] == '\t' || look[i] == '\r' || look[i] == '\n'))
        i++;
    if (i < k && look[i] != '{') {
        char q[8];
        if (look[i] >= 0x20 && look[i] < 0x7f)
            snprintf(q, sizeof q, "'%c'", look[i]);
        else
            snprintf(q, sizeof q, "0x%02x", (unsigned)look[i]);
        tg__err(ctx, TG_ERR_HEADER_SIZE, src->fn,
                "%s: not a safetensors file (one starts with an 8-byte header size, then a "
                "JSON header '{'; here byte %zu is %s)", src->label, 8 + i, q);
        return false;
    }
    return true;
}

/* 1. The header size and the header's bytes: *hdr points into a memory source, or to
 * *hdr_owned; *N is its length and P->data_len what follows it. */
static bool st_read_header(st_parse *P, tg__src *src, const char **hdr, char **hdr_owned,
                           uint64_t *N_out)
{
    tg_ctx *ctx = P->ctx;
    const char *fn = src->fn, *label = src->label;
    unsigned char szb[8];
    if (src->size < 8) {
        tg__err(ctx, TG_ERR_TRUNCATED, fn,
                "%s: file is %llu bytes, shorter than the 8-byte header size field", label,
                (unsigned long long)src->size);
        return false;
    }
    if (tg__src_read(ctx, src, szb, 8, "header size field") != TG_OK)
        return false;
    uint64_t N = tg__le64(szb);
    uint64_t left = tg__src_left(src); /* (a file source consumes what is looked at) */
    if ((N > TG_SAFETENSORS_MAX_HEADER || N < 2 || N > left) && left > 0 &&
        !st_sniff(ctx, src, left))
        return false;
    if (N > TG_SAFETENSORS_MAX_HEADER || N < 2) {
        tg__err(ctx, TG_ERR_HEADER_SIZE, fn,
                "%s: header size %llu is %s (a header is 2 to %u bytes)", label,
                (unsigned long long)N, N < 2 ? "too small" : "too large",
                TG_SAFETENSORS_MAX_HEADER);
        return false;
    }
    if (N > left) {
        tg__err(ctx, TG_ERR_TRUNCATED, fn,
                "%s: header size is %llu bytes but only %llu bytes follow the size field", label,
                (unsigned long long)N, (unsigned long long)left);
        return false;
    }
    if (src->mem) {
        *hdr = (const char *)src->mem + src->pos;
        src->pos += N;
    } else {
        *hdr_owned = tg__alloc(ctx, (size_t)N, fn);
        if (!*hdr_owned)
            return false;
        if (tg__src_read(ctx, src, *hdr_owned, (size_t)N, "header") != TG_OK)
            return false;
        *hdr = *hdr_owned;
    }
    P->data_len = tg__src_left(src);
    *N_out = N;
    return true;
}

/* 4. The result record: one block for the arrays and all strings, the names and metadata
 * copied in and their sorted keys. NULL on failure (the block freed). */
static tg_safetensors *st_new_record(st_parse *P)
{
    tg_ctx *ctx = P->ctx;
    tg_safetensors *st = NULL;
    size_t chars = 0;
    for (int64_t i = 0; i < P->n; i++)
        chars += P->e[i].name.len + 1;
    for (int64_t i = 0; i < P->nm; i++)
        chars += P->m[i].key.len + 1 + P->m[i].value.len + 1;
    size_t n = (size_t)P->n, m = (size_t)P->nm;
    size_t off_t_ = round16(sizeof *st);
    size_t off_names = off_t_ + round16(n * sizeof(tg_tensor *));
    size_t off_dtypes = off_names + round16(n * sizeof(char *));
    size_t off_by = off_dtypes + round16(n * sizeof(char *));
    size_t off_mk = off_by + round16(n * sizeof(st_key));
    size_t off_mv = off_mk + round16(m * sizeof(char *));
    size_t off_mb = off_mv + round16(m * sizeof(char *));
    size_t off_chars = off_mb + round16(m * sizeof(st_key));
    /* counts are bounded by the header size (<= 100 MB), so none of this overflows */
    char *blob = tg__alloc(ctx, off_chars + chars, P->fn);
    if (!blob)
        return NULL;
    st = (tg_safetensors *)blob;
    st->ctx = ctx;
    st->n = P->n;
    st->n_meta = P->nm;
    st->tensors = (tg_tensor **)(blob + off_t_);
    st->names = (const char **)(blob + off_names);
    st->dtypes = (const char **)(blob + off_dtypes);
    st->by_name = (st_key *)(blob + off_by);
    st->meta_keys = (const char **)(blob + off_mk);
    st->meta_values = (const char **)(blob + off_mv);
    st->meta_by_key = (st_key *)(blob + off_mb);
    char *cp = blob + off_chars;
    for (int64_t i = 0; i < P->n; i++) {
        memcpy(cp, P->e[i].name.p, P->e[i].name.len + 1);
        st->names[i] = cp;
        st->dtypes[i] = P->e[i].dt->name;
        st->by_name[i].key = cp;
        st->by_name[i].idx = i;
        cp += P->e[i].name.len + 1;
    }
    for (int64_t i = 0; i < P->nm; i++) {
        memcpy(cp, P->m[i].key.p, P->m[i].key.len + 1);
        st->meta_keys[i] = cp;
        st->meta_by_key[i].key = cp;
        st->meta_by_key[i].idx = i;
        cp += P->m[i].key.len + 1;
        memcpy(cp, P->m[i].value.p, P->m[i].value.len + 1);
        st->meta_values[i] = cp;
        cp += P->m[i].value.len + 1;
    }
    if (!st_sorted_keys(P, st->by_name, P->n, "tensor name") ||
        !st_sorted_keys(P, st->meta_by_key, P->nm, "__metadata__ key")) {
        tg__free(ctx, st);
        return NULL;
    }
    return st;
}

/* 5. Layout of the data section: the tensors fill it exactly, without overlap or gap, in the
 * order *order (allocated here, file order) gives. */
static bool st_check_layout(st_parse *P, st_entry ***order_out)
{
    tg_ctx *ctx = P->ctx;
    const char *fn = P->fn, *label = P->label;
    uint64_t data_len = P->data_len, total = 0;
    size_t n = (size_t)P->n;
    for (int64_t i = 0; i < P->n; i++) {
        if (P->e[i].nbytes > UINT64_MAX - total) {
            tg__err(ctx, TG_ERR_OVERFLOW, fn, "%s: total data size overflows 64 bits", label);
            return false;
        }
        total += P->e[i].nbytes;
    }
    if (total > data_len) {
        tg__err(ctx, TG_ERR_TRUNCATED, fn,
                "%s: the data section holds %llu bytes but the tensors need %llu", label,
                (unsigned long long)data_len, (unsigned long long)total);
        return false;
    }
    for (int64_t i = 0; i < P->n; i++) {
        const st_entry *e = &P->e[i];
        if (e->end > data_len)
            return st_fail(P, TG_ERR_OUT_OF_BOUNDS,
                           "tensor '%.*s': data_offsets [%llu, %llu] end past the data section "
                           "(%llu bytes)", NM(e->name), (unsigned long long)e->begin,
                           (unsigned long long)e->end, (unsigned long long)data_len);
    }
    st_entry **order = NULL;
    if (P->n) {
        order = *order_out = tg__alloc(ctx, n * sizeof *order, fn);
        if (!order)
            return false;
    }
    for (int64_t i = 0; i < P->n; i++)
        order[i] = &P->e[i];
    if (n > 1)
        qsort(order, n, sizeof *order, st_entry_ptr_cmp);
    uint64_t expect = 0;
    for (size_t i = 0; i < n; i++) {
        const st_entry *e = order[i];
        if (e->begin < expect) {
            const st_entry *p = order[i - 1];
            return st_fail(P, TG_ERR_OVERLAP,
                           "tensors '%.*s' [%llu, %llu] and '%.*s' [%llu, %llu] overlap",
                           NM(p->name), (unsigned long long)p->begin,
                           (unsigned long long)p->end, NM(e->name),
                           (unsigned long long)e->begin, (unsigned long long)e->end);
        }
        if (e->begin > expect)
            return st_fail(P, TG_ERR_GAP,
                           "data bytes [%llu, %llu) before tensor '%.*s' belong to no tensor",
                           (unsigned long long)expect, (unsigned long long)e->begin,
                           NM(e->name));
        expect = e->end;
    }
    if (data_len > expect) {
        tg__err(ctx, TG_ERR_TRAILING, fn, "%s: %llu bytes after the last tensor's data", label,
                (unsigned long long)(data_len - expect));
        return false;
    }
    return true;
}

/* 6. Tensors (header order), then their data in file order. */
static bool st_load_tensors(st_parse *P, tg_safetensors *st, st_entry **order, tg__src *src)
{
    tg_ctx *ctx = P->ctx;
    for (int64_t i = 0; i < P->n; i++) {
        st_entry *e = &P->e[i];
        int64_t shape[TG_MAX_RANK];
        for (int d = 0; d < e->rank; d++)
            shape[d] = (int64_t)e->dims[d];
        e->t = tg_const(ctx, e->dt->to, e->rank, shape, st->names[i]);
        if (!e->t)
            return false;
        st->tensors[i] = e->t;
    }
    for (size_t i = 0; i < (size_t)P->n; i++) {
        st_entry *e = order[i];
        char raw[104], esc[720], what[760]; /* the name as one printable line */
        snprintf(raw, sizeof raw, "%.*s", NM(e->name));
        st_escape(esc, sizeof esc, raw);
        snprintf(what, sizeof what, "data of tensor '%s'", esc);
        if (tg__src_read_elems(ctx, src, e->t->data, e->t->dtype, (tg__efmt)e->dt->efmt,
                               (uint64_t)e->numel, what) != TG_OK)
            return false;
    }
    return true;
}

static tg_safetensors *st_read(tg_ctx *ctx, tg__src *src)
{
    st_parse P;
    memset(&P, 0, sizeof P);
    P.ctx = ctx;
    P.fn = src->fn;
    P.label = src->label;
    char *hdr_owned = NULL;
    const char *hdr = NULL;
    uint64_t N = 0;
    st_entry **order = NULL;
    tg_safetensors *st = NULL;
    bool ok = st_read_header(&P, src, &hdr, &hdr_owned, &N) && /* 1. header size */
              tg__jp_init(&P.jp, ctx, P.fn, P.label, hdr, (size_t)N) == TG_OK &&
              st_parse_header(&P); /* 2. JSON */
    for (int64_t i = 0; ok && i < P.n; i++) /* 3. per-tensor checks, in header order */
        ok = st_check_entry(&P, &P.e[i]);
    if (ok)
        ok = (st = st_new_record(&P)) != NULL && st_check_layout(&P, &order) &&
             st_load_tensors(&P, st, order, src);
    if (!ok) {
        for (int64_t i = P.n - 1; i >= 0; i--)
            tg__tensor_discard(ctx, P.e[i].t);
        tg__free(ctx, st);
        st = NULL;
    }
    tg__free(ctx, order);
    tg__jp_free(&P.jp);
    tg__free(ctx, P.e);
    tg__free(ctx, P.m);
    tg__free(ctx, hdr_owned);
    return st;
}

static tg_safetensors *tg_safetensors_read_io(tg_ctx *ctx, const char *path)
{
    static const char fn[] = "tg_safetensors_read";
    if (!ctx)
        return NULL;
    if (!path)
        return tg__err(ctx, TG_ERR_ARG, fn, "path is NULL");
    tg__src src;
    if (tg__src_open_file(ctx, &src, fn, path) != TG_OK)
        return NULL;
    tg_safetensors *st = st_read(ctx, &src);
    tg__src_close(ctx, &src);
    return st;
}

tg_safetensors *tg_safetensors_read(tg_ctx *ctx, const char *path)
{
    tg__io_enter(ctx);
    tg_safetensors *r = tg_safetensors_read_io(ctx, path);
    tg__io_leave(ctx);
    return r;
}

static tg_safetensors *tg_safetensors_read_fd_io(tg_ctx *ctx, int fd, const char *label,
                                                 uint64_t max_bytes)
{
    static const char fn[] = "tg_safetensors_read_fd";
    if (!ctx)
        return NULL;
    tg__src src;
    if (tg__src_open_fd(ctx, &src, fn, fd, label, max_bytes) != TG_OK)
        return NULL;
    tg_safetensors *st = st_read(ctx, &src);
    tg__src_close(ctx, &src);
    return st;
}

tg_safetensors *tg_safetensors_read_fd(tg_ctx *ctx, int fd, const char *label,
                                       uint64_t max_bytes)
{
    tg__io_enter(ctx);
    tg_safetensors *r = tg_safetensors_read_fd_io(ctx, fd, label, max_bytes);
    tg__io_leave(ctx);
    return r;
}

static tg_safetensors *tg_safetensors_read_mem_io(tg_ctx *ctx, const void *data, size_t size)
{
    static const char fn[] = "tg_safetensors_read_mem";
    if (!ctx)
        return NULL;
    if (!data && size)
        return tg__err(ctx, TG_ERR_ARG, fn, "data is NULL");
    tg__src src;
    tg__src_open_mem(&src, fn, data ? data : "", size);
    return st_read(ctx, &src);
}

tg_safetensors *tg_safetensors_read_mem(tg_ctx *ctx, const void *data, size_t size)
{
    tg__io_enter(ctx);
    tg_safetensors *r = tg_safetensors_read_mem_io(ctx, data, size);
    tg__io_leave(ctx);
    return r;
}

/* ----- writing -------------------------------------------------------------------------------- */
/* JSON string with the escapes serde_json uses. */
static bool json_put_str(tg_ctx *ctx, tg__buf *b, const char *s)
{
    static const char hex[] = "0123456789abcdef";
    tg__buf_putc(ctx, b, '"');
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        char esc[7];
        switch (*p) {
        case '"': tg__buf_puts(ctx, b, "\\\""); break;
        case '\\': tg__buf_puts(ctx, b, "\\\\"); break;
        case '\b': tg__buf_puts(ctx, b, "\\b"); break;
        case '\t': tg__buf_puts(ctx, b, "\\t"); break;
        case '\n': tg__buf_puts(ctx, b, "\\n"); break;
        case '\f': tg__buf_puts(ctx, b, "\\f"); break;
        case '\r': tg__buf_puts(ctx, b, "\\r"); break;
        default:
            if (*p < 0x20) {
                memcpy(esc, "\\u00", 4);
                esc[4] = hex[*p >> 4];
                esc[5] = hex[*p & 15];
                tg__buf_put(ctx, b, esc, 6);
            } else {
                tg__buf_putc(ctx, b, (char)*p);
            }
        }
    }
    return tg__buf_putc(ctx, b, '"');
}

static int cstr_cmp(const void *a, const void *b)
{
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* Duplicate check over n strings (context scratch). Returns the repeated string or NULL;
 * *nomem set on allocation failure. */
static const char *find_dup(tg_ctx *ctx, const char *fn, const char *const *s, int64_t n,
                            bool *nomem)
{
    *nomem = false;
    if (n < 2)
        return NULL;
    const char **tmp = tg__alloc(ctx, (size_t)n * sizeof *tmp, fn);
    if (!tmp) {
        *nomem = true;
        return NULL;
    }
    memcpy(tmp, s, (size_t)n * sizeof *tmp);
    qsort(tmp, (size_t)n, sizeof *tmp, cstr_cmp);
    const char *dup = NULL;
    for (int64_t i = 1; i < n && !dup; i++)
        if (strcmp(tmp[i - 1], tmp[i]) == 0)
            dup = tmp[i];
    tg__free(ctx, tmp);
    return dup;
}

typedef struct st_out {
    const tg_io_item *items;
    int64_t n;
    uint64_t *nbytes; /* (n) */
    tg__buf hdr;      /* header JSON incl. padding */
} st_out;

static void st_out_free(tg_ctx *ctx, st_out *o)
{
    tg__free(ctx, o->nbytes);
    tg__buf_free(ctx, &o->hdr);
}

/* Each item's name and tensor, each metadata entry (o->nbytes[i] set). */
static tg_status st_check_items(tg_ctx *ctx, const char *fn, int64_t n, const tg_io_item *items,
                                int64_t n_meta, const char *const *keys,
                                const char *const *vals, st_out *o)
{
    for (int64_t i = 0; i < n; i++) {
        const char *nm = items[i].name;
        if (!nm || !*nm) {
            tg__err(ctx, TG_ERR_ARG, fn, "item %lld has %s name", (long long)i,
                    nm ? "an empty" : "a NULL");
            return TG_ERR_ARG;
        }
        if (strcmp(nm, "__metadata__") == 0) {
            tg__err(ctx, TG_ERR_ARG, fn,
                    "item %lld: '__metadata__' is reserved and cannot name a tensor",
                    (long long)i);
            return TG_ERR_ARG;
        }
        if (!tg__utf8_valid(nm, strlen(nm), NULL)) {
            tg__err(ctx, TG_ERR_ARG, fn, "item %lld: name is not valid UTF-8", (long long)i);
            return TG_ERR_ARG;
        }
        tg_status s = tg__item_check(ctx, fn, &items[i], i, &o->nbytes[i]);
        if (s != TG_OK)
            return s;
    }
    for (int64_t i = 0; i < n_meta; i++) {
        if (!keys[i] || !vals[i]) {
            tg__err(ctx, TG_ERR_ARG, fn, "metadata entry %lld has a NULL %s", (long long)i,
                    keys[i] ? "value" : "key");
            return TG_ERR_ARG;
        }
        if (!tg__utf8_valid(keys[i], strlen(keys[i]), NULL) ||
            !tg__utf8_valid(vals[i], strlen(vals[i]), NULL)) {
            tg__err(ctx, TG_ERR_ARG, fn, "metadata entry %lld is not valid UTF-8", (long long)i);
            return TG_ERR_ARG;
        }
    }
    return TG_OK;
}

/* No tensor name and no metadata key twice. */
static tg_status st_check_dups(tg_ctx *ctx, const char *fn, int64_t n, const tg_io_item *items,
                               int64_t n_meta, const char *const *keys)
{
    bool nomem;
    const char **names = NULL;
    if (n > 1) {
        names = tg__alloc(ctx, (size_t)n * sizeof *names, fn);
        if (!names)
            return TG_ERR_NOMEM;
        for (int64_t i = 0; i < n; i++)
            names[i] = items[i].name;
    }
    const char *dup = find_dup(ctx, fn, names, n, &nomem);
    tg__free(ctx, names);
    if (nomem)
        return TG_ERR_NOMEM;
    if (dup) {
        tg__err(ctx, TG_ERR_DUPLICATE, fn, "tensor name '%.100s' appears twice", dup);
        return TG_ERR_DUPLICATE;
    }
    dup = find_dup(ctx, fn, keys, n_meta, &nomem);
    if (nomem)
        return TG_ERR_NOMEM;
    if (dup) {
        tg__err(ctx, TG_ERR_DUPLICATE, fn, "metadata key '%.100s' appears twice", dup);
        return TG_ERR_DUPLICATE;
    }
    return TG_OK;
}

/* The header JSON, padded with spaces to a multiple of 8 bytes, in o->hdr. */
static tg_status st_put_header(tg_ctx *ctx, const char *fn, int64_t n, const tg_io_item *items,
                               int64_t n_meta, const char *const *keys, const char *const *vals,
                               st_out *o)
{
    tg__buf *b = &o->hdr;
    b->fn = fn;
    tg__buf_putc(ctx, b, '{');
    if (n_meta > 0) {
        tg__buf_puts(ctx, b, "\"__metadata__\":{");
        for (int64_t i = 0; i < n_meta; i++) {
            if (i)
                tg__buf_putc(ctx, b, ',');
            json_put_str(ctx, b, keys[i]);
            tg__buf_putc(ctx, b, ':');
            json_put_str(ctx, b, vals[i]);
        }
        tg__buf_putc(ctx, b, '}');
        if (n > 0)
            tg__buf_putc(ctx, b, ',');
    }
    uint64_t off = 0;
    for (int64_t i = 0; i < n; i++) {
        const tg_io_item *it = &items[i];
        if (o->nbytes[i] > UINT64_MAX - off) {
            tg__err(ctx, TG_ERR_OVERFLOW, fn, "total data size overflows 64 bits");
            return TG_ERR_OVERFLOW;
        }
        if (i)
            tg__buf_putc(ctx, b, ',');
        json_put_str(ctx, b, it->name);
        tg__buf_puts(ctx, b, it->dtype == TG_F32   ? ":{\"dtype\":\"F32\",\"shape\":["
                             : it->dtype == TG_I32 ? ":{\"dtype\":\"I32\",\"shape\":["
                                                   : ":{\"dtype\":\"F64\",\"shape\":[");
        for (int d = 0; d < it->rank; d++) {
            if (d)
                tg__buf_putc(ctx, b, ',');
            tg__buf_put_u64(ctx, b, (uint64_t)it->shape[d]);
        }
        tg__buf_puts(ctx, b, "],\"data_offsets\":[");
        tg__buf_put_u64(ctx, b, off);
        tg__buf_putc(ctx, b, ',');
        off += o->nbytes[i];
        tg__buf_put_u64(ctx, b, off);
        tg__buf_puts(ctx, b, "]}");
    }
    tg__buf_putc(ctx, b, '}');
    while (!b->failed && b->len % 8)
        tg__buf_putc(ctx, b, ' ');
    if (b->failed)
        return TG_ERR_NOMEM;
    if (b->len > TG_SAFETENSORS_MAX_HEADER) {
        tg__err(ctx, TG_ERR_HEADER_SIZE, fn,
                "the header would be %zu bytes, more than readers accept (%u)", b->len,
                TG_SAFETENSORS_MAX_HEADER);
        return TG_ERR_HEADER_SIZE;
    }
    return TG_OK;
}

/* Validate everything and build the header. */
static tg_status st_prepare(tg_ctx *ctx, const char *fn, int64_t n, const tg_io_item *items,
                            int64_t n_meta, const char *const *keys, const char *const *vals,
                            st_out *o)
{
    memset(o, 0, sizeof *o);
    o->items = items;
    o->n = n;
    if (n < 0 || (n > 0 && !items)) {
        tg__err(ctx, TG_ERR_ARG, fn, n < 0 ? "n is negative" : "items is NULL");
        return TG_ERR_ARG;
    }
    if (n_meta < 0 || (n_meta > 0 && (!keys || !vals))) {
        tg__err(ctx, TG_ERR_ARG, fn,
                n_meta < 0 ? "n_meta is negative" : "meta_keys or meta_values is NULL");
        return TG_ERR_ARG;
    }
    if (n_meta > TG_SAFETENSORS_MAX_META) {
        tg__err(ctx, TG_ERR_ARG, fn, "n_meta %lld is more than readers accept (%u)",
                (long long)n_meta, TG_SAFETENSORS_MAX_META);
        return TG_ERR_ARG;
    }
    if ((uint64_t)n > SIZE_MAX / sizeof(const char *) / 2) {
        tg__err(ctx, TG_ERR_ARG, fn, "too many items");
        return TG_ERR_ARG;
    }
    if (n > 0) {
        o->nbytes = tg__alloc(ctx, (size_t)n * sizeof *o->nbytes, fn);
        if (!o->nbytes)
            return TG_ERR_NOMEM;
    }
    tg_status s = st_check_items(ctx, fn, n, items, n_meta, keys, vals, o);
    if (s == TG_OK)
        s = st_check_dups(ctx, fn, n, items, n_meta, keys);
    if (s == TG_OK)
        s = st_put_header(ctx, fn, n, items, n_meta, keys, vals, o);
    return s;
}

typedef struct st_emit_arg {
    const char *fn;
    st_out *o;
} st_emit_arg;

static tg_status st_emit(tg_ctx *ctx, const tg_writer *w, void *user)
{
    st_emit_arg *a = user;
    st_out *o = a->o;
    unsigned char szb[8];
    tg__put_le64(szb, (uint64_t)o->hdr.len);
    tg_status s = tg__write(ctx, a->fn, w, szb, 8, "header size");
    if (s == TG_OK)
        s = tg__write(ctx, a->fn, w, o->hdr.p, o->hdr.len, "header");
    for (int64_t i = 0; i < o->n && s == TG_OK; i++)
        s = tg__write_data(ctx, a->fn, w, o->items[i].data, o->items[i].dtype, o->nbytes[i]);
    return s;
}

static tg_status st_write_items(tg_ctx *ctx, const char *fn, const char *path,
                                const tg_writer *w, int64_t n, const tg_io_item *items,
                                int64_t n_meta, const char *const *keys,
                                const char *const *vals, const tg_write_opts *opts)
{
    st_out o;
    tg_status s = st_prepare(ctx, fn, n, items, n_meta, keys, vals, &o);
    if (s == TG_OK) {
        st_emit_arg a = {fn, &o};
        if (w) {
            s = st_emit(ctx, w, &a);
        } else {
            s = tg__write_atomic(ctx, fn, path, opts, st_emit, &a);
        }
    }
    st_out_free(ctx, &o);
    return s;
}

tg_status tg__st_write_items(tg_ctx *ctx, const char *fn, const char *path, int64_t n,
                            const tg_io_item *items, int64_t n_meta, const char *const *keys,
                            const char *const *vals, const tg_write_opts *opts)
{
    if (!path || !*path) {
        tg__err(ctx, TG_ERR_ARG, fn, "path is %s", path ? "empty" : "NULL");
        return TG_ERR_ARG;
    }
    return st_write_items(ctx, fn, path, NULL, n, items, n_meta, keys, vals, opts);
}

static tg_status tg_safetensors_write_items_io(tg_ctx *ctx, const char *path, int64_t n,
                                               const tg_io_item *items, int64_t n_meta,
                                               const char *const *meta_keys,
                                               const char *const *meta_values,
                                               const tg_write_opts *opts)
{
    static const char fn[] = "tg_safetensors_write_items";
    if (!ctx)
        return TG_ERR_ARG;
    if (!path || !*path) {
        tg__err(ctx, TG_ERR_ARG, fn, "path is %s", path ? "empty" : "NULL");
        return TG_ERR_ARG;
    }
    return st_write_items(ctx, fn, path, NULL, n, items, n_meta, meta_keys, meta_values, opts);
}

tg_status tg_safetensors_write_items(tg_ctx *ctx, const char *path, int64_t n,
                                     const tg_io_item *items, int64_t n_meta,
                                     const char *const *meta_keys,
                                     const char *const *meta_values, const tg_write_opts *opts)
{
    tg__io_enter(ctx);
    tg_status r =
        tg_safetensors_write_items_io(ctx, path, n, items, n_meta, meta_keys, meta_values, opts);
    tg__io_leave(ctx);
    return r;
}

static tg_status tg_safetensors_write_to_io(tg_ctx *ctx, const tg_writer *w, int64_t n,
                                            const tg_io_item *items, int64_t n_meta,
                                            const char *const *meta_keys,
                                            const char *const *meta_values)
{
    static const char fn[] = "tg_safetensors_write_to";
    if (!ctx)
        return TG_ERR_ARG;
    if (!w || !w->write) {
        tg__err(ctx, TG_ERR_ARG, fn, "writer is NULL");
        return TG_ERR_ARG;
    }
    return st_write_items(ctx, fn, NULL, w, n, items, n_meta, meta_keys, meta_values, NULL);
}

tg_status tg_safetensors_write_to(tg_ctx *ctx, const tg_writer *w, int64_t n,
                                  const tg_io_item *items, int64_t n_meta,
                                  const char *const *meta_keys, const char *const *meta_values)
{
    tg__io_enter(ctx);
    tg_status r = tg_safetensors_write_to_io(ctx, w, n, items, n_meta, meta_keys, meta_values);
    tg__io_leave(ctx);
    return r;
}

/* Items for tensors' values or gradients, then the item writer. */
static tg_status st_write_tensors(tg_ctx *ctx, const char *fn, const char *path, int64_t n,
                                  const tg_tensor *const *tensors, const char *const *names,
                                  bool grads, int64_t n_meta, const char *const *keys,
                                  const char *const *vals)
{
    if (!ctx)
        return TG_ERR_ARG;
    if (!path || !*path) {
        tg__err(ctx, TG_ERR_ARG, fn, "path is %s", path ? "empty" : "NULL");
        return TG_ERR_ARG;
    }
    if (n < 0 || (n > 0 && !tensors)) {
        tg__err(ctx, TG_ERR_ARG, fn, n < 0 ? "n is negative" : "tensors is NULL");
        return TG_ERR_ARG;
    }
    if ((uint64_t)n > SIZE_MAX / sizeof(tg_io_item)) {
        tg__err(ctx, TG_ERR_ARG, fn, "too many tensors");
        return TG_ERR_ARG;
    }
    tg_io_item *items = NULL;
    if (n > 0) {
        items = tg__alloc(ctx, (size_t)n * sizeof *items, fn);
        if (!items)
            return TG_ERR_NOMEM;
    }
    tg_status s = TG_OK;
    for (int64_t i = 0; i < n && s == TG_OK; i++) {
        const tg_tensor *t = tensors[i];
        if (!t) {
            tg__err(ctx, TG_ERR_ARG, fn, "tensor %lld is NULL", (long long)i);
            s = TG_ERR_ARG;
        } else if (t->ctx != ctx) {
            tg__err(ctx, TG_ERR_ARG, fn, "tensor %lld ('%s') belongs to another context",
                    (long long)i, t->name);
            s = TG_ERR_ARG;
        } else if (grads && !t->grad) {
            tg__err(ctx, TG_ERR_NOGRAD, fn, "tensor %lld ('%s') has no gradient buffer",
                    (long long)i, t->name);
            s = TG_ERR_NOGRAD;
        } else {
            const char *nm = names ? names[i] : NULL;
            items[i] = grads ? tg_io_item_grad(t, nm) : tg_io_item_data(t, nm);
            if (names && !nm)
                items[i].name = NULL; /* refused by the item check */
        }
    }
    if (s == TG_OK)
        s = st_write_items(ctx, fn, path, NULL, n, items, n_meta, keys, vals, NULL);
    tg__free(ctx, items);
    return s;
}

static tg_status tg_safetensors_write_io(tg_ctx *ctx, const char *path, int64_t n,
                                         const tg_tensor *const *tensors, const char *const *names,
                                         int64_t n_meta, const char *const *meta_keys,
                                         const char *const *meta_values)
{
    return st_write_tensors(ctx, "tg_safetensors_write", path, n, tensors, names, false, n_meta,
                            meta_keys, meta_values);
}

tg_status tg_safetensors_write(tg_ctx *ctx, const char *path, int64_t n,
                               const tg_tensor *const *tensors, const char *const *names,
                               int64_t n_meta, const char *const *meta_keys,
                               const char *const *meta_values)
{
    tg__io_enter(ctx);
    tg_status r =
        tg_safetensors_write_io(ctx, path, n, tensors, names, n_meta, meta_keys, meta_values);
    tg__io_leave(ctx);
    return r;
}

static tg_status tg_safetensors_write_grads_io(tg_ctx *ctx, const char *path, int64_t n,
                                               const tg_tensor *const *tensors,
                                               const char *const *names, int64_t n_meta,
                                               const char *const *meta_keys,
                                               const char *const *meta_values)
{
    return st_write_tensors(ctx, "tg_safetensors_write_grads", path, n, tensors, names, true,
                            n_meta, meta_keys, meta_values);
}

tg_status tg_safetensors_write_grads(tg_ctx *ctx, const char *path, int64_t n,
                                     const tg_tensor *const *tensors, const char *const *names,
                                     int64_t n_meta, const char *const *meta_keys,
                                     const char *const *meta_values)
{
    tg__io_enter(ctx);
    tg_status r =
        tg_safetensors_write_grads_io(ctx, path, n, tensors, names, n_meta, meta_keys, meta_values);
    tg__io_leave(ctx);
    return r;
}
