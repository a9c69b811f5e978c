/*
 * test_io.c - interop formats (include/tgrad_io.h): safetensors and .npy round trips, byte-exact
 * agreement with the reference writers (huggingface safetensors, numpy.save), tables of malformed
 * files each rejected with its own status and a message (from memory and from disk), writer
 * refusals, atomic writes under injected failures (old file byte-identical, no temporary file
 * left), out-of-memory at every allocation of a read or write, and the strict JSON parser.
 */
#define _POSIX_C_SOURCE 200809L

#include "testutil.h"
#include "tgrad_io.h"
#include "tgrad_train.h"

#include "io/json.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

/* ----- helpers -------------------------------------------------------------------------------- */
typedef struct bytes {
    unsigned char *p;
    size_t n;
} bytes;

static void b_put(bytes *b, const void *data, size_t n)
{
    b->p = realloc(b->p, b->n + n + 1);
    ck_assert_ptr_nonnull(b->p);
    if (n)
        memcpy(b->p + b->n, data, n);
    b->n += n;
}

static void b_puts(bytes *b, const char *s) { b_put(b, s, strlen(s)); }

static void b_le(bytes *b, uint64_t v, int nbytes)
{
    unsigned char t[8];
    for (int i = 0; i < nbytes; i++)
        t[i] = (unsigned char)(v >> (8 * i));
    b_put(b, t, (size_t)nbytes);
}

/* n filler bytes 0, 1, 2, ... */
static void b_fill(bytes *b, size_t n)
{
    unsigned char *t = malloc(n + 1);
    ck_assert_ptr_nonnull(t);
    for (size_t i = 0; i < n; i++)
        t[i] = (unsigned char)i;
    b_put(b, t, n);
    free(t);
}

/* A safetensors file: le64(len(header)) + header + data_len filler bytes. */
static bytes st_file(const char *header, size_t data_len)
{
    bytes b = {0};
    b_le(&b, strlen(header), 8);
    b_puts(&b, header);
    b_fill(&b, data_len);
    return b;
}

static char tmpdir[64];

static void make_tmpdir(void)
{
    snprintf(tmpdir, sizeof tmpdir, "/tmp/tgrad_io.XXXXXX");
    ck_assert_ptr_nonnull(mkdtemp(tmpdir));
}

static void rm_tmpdir(void)
{
    DIR *d = opendir(tmpdir);
    if (!d)
        return;
    struct dirent *e;
    char p[512];
    while ((e = readdir(d))) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, ".."))
            continue;
        snprintf(p, sizeof p, "%s/%s", tmpdir, e->d_name);
        if (unlink(p) != 0)
            rmdir(p);
    }
    closedir(d);
    rmdir(tmpdir);
}

static const char *tpath(const char *name)
{
    static char p[4][512];
    static int k;
    k = (k + 1) % 4;
    snprintf(p[k], sizeof p[k], "%s/%s", tmpdir, name);
    return p[k];
}

static void write_file(const char *path, const void *data, size_t n)
{
    FILE *f = fopen(path, "wb");
    ck_assert_ptr_nonnull(f);
    ck_assert_uint_eq(fwrite(data, 1, n, f), n);
    ck_assert_int_eq(fclose(f), 0);
}

static bytes read_file(const char *path)
{
    bytes b = {0};
    FILE *f = fopen(path, "rb");
    ck_assert_msg(f != NULL, "cannot open %s", path);
    unsigned char buf[4096];
    size_t k;
    while ((k = fread(buf, 1, sizeof buf, f)) > 0)
        b_put(&b, buf, k);
    fclose(f);
    if (!b.p)
        b_put(&b, "", 0);
    return b;
}

static bool file_exists(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0;
}

/* Directory entries containing ".tmp." (leftover temporary files). */
static int count_tmp_files(void)
{
    DIR *d = opendir(tmpdir);
    ck_assert_ptr_nonnull(d);
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)))
        if (strstr(e->d_name, ".tmp."))
            n++;
    closedir(d);
    return n;
}

static void assert_fails(tg_ctx *ctx, tg_status want, const char *fn, const char *what)
{
    ck_assert_msg(tg_ctx_status(ctx) == want, "%s: expected %s, got %s (%s)", what,
                  tg_status_str(want), tg_status_str(tg_ctx_status(ctx)), tg_ctx_message(ctx));
    const char *m = tg_ctx_message(ctx);
    ck_assert_msg(m[0] != '\0', "%s: empty message", what);
    ck_assert_msg(strstr(m, fn) == m, "%s: message '%s' does not start with '%s'", what, m, fn);
}

/* A memory tg_writer, optionally failing with `fail_errno` after `limit` bytes. */
typedef struct mem_sink {
    bytes b;
    size_t limit;
    int fail_errno;
} mem_sink;

static int mem_write(void *user, const void *data, size_t n)
{
    mem_sink *s = user;
    if (s->fail_errno && s->b.n + n > s->limit)
        return s->fail_errno;
    b_put(&s->b, data, n);
    return 0;
}

static const float f32_vals[6] = {0, 1, 2, 3, 4, 5};

/* ----- safetensors: reference bytes ---------------------------------------------------------- */
/* Byte sequences the reference implementation's own tests (safetensors/src/tensor.rs:
 * test_serialization, test_serialization_forced_alignement, test_empty) expect. */
static bytes ref_attn_dot0(void)
{
    bytes b = {0};
    const char *h = "{\"attn.0\":{\"dtype\":\"F32\",\"shape\":[1,2,3],\"data_offsets\":[0,24]}}";
    ck_assert_uint_eq(strlen(h), 64); /* already a multiple of 8: no padding */
    b_le(&b, 64, 8);
    b_puts(&b, h);
    b_put(&b, (const unsigned char[]){0, 0, 0, 0, 0, 0, 128, 63, 0, 0, 0, 64, 0, 0, 64, 64, 0, 0,
                                      128, 64, 0, 0, 160, 64},
          24);
    return b;
}

START_TEST(test_st_reference_bytes)
{
    make_tmpdir();
    tg_ctx *ctx = tg_ctx_new();
    /* 1. "attn.0" F32 (1, 2, 3): 64-byte header, no padding */
    tg_tensor *t = tg_const(ctx, TG_F32, TG_DIMS(1, 2, 3), "attn.0");
    ck_assert_int_eq(tg_tensor_set_data(t, f32_vals, TG_F32, 6), TG_OK);
    const tg_tensor *ts[1] = {t};
    ck_assert_int_eq(tg_safetensors_write(ctx, tpath("a.st"), 1, ts, NULL, 0, NULL, NULL), TG_OK);
    bytes want = ref_attn_dot0();
    bytes got = read_file(tpath("a.st"));
    ck_assert_uint_eq(got.n, want.n);
    ck_assert(memcmp(got.p, want.p, want.n) == 0);
    /* the same bytes through a tg_writer */
    mem_sink ms = {{0}, 0, 0};
    tg_writer w = {mem_write, &ms};
    tg_io_item it = tg_io_item_data(t, NULL);
    ck_assert_int_eq(tg_safetensors_write_to(ctx, &w, 1, &it, 0, NULL, NULL), TG_OK);
    ck_assert_uint_eq(ms.b.n, want.n);
    ck_assert(memcmp(ms.b.p, want.p, want.n) == 0);
    /* and the reference bytes read back */
    tg_safetensors *st = tg_safetensors_read_mem(ctx, want.p, want.n);
    ck_assert_msg(st != NULL, "%s", tg_ctx_message(ctx));
    ck_assert_int_eq(tg_safetensors_count(st), 1);
    ck_assert_str_eq(tg_safetensors_name(st, 0), "attn.0");
    tg_tensor *r = tg_safetensors_find(st, "attn.0");
    ck_assert_ptr_nonnull(r);
    ck_assert_int_eq(tg_tensor_rank(r), 3);
    ck_assert_int_eq(tg_tensor_dim(r, 2), 3);
    ck_assert(memcmp(tg_tensor_data(r), f32_vals, sizeof f32_vals) == 0);
    free(want.p);
    free(got.p);
    free(ms.b.p);

    /* 2. "attn0" F32 (1, 1, 2, 3): 65-byte JSON padded with 7 spaces to 72 */
    t = tg_const(ctx, TG_F32, TG_DIMS(1, 1, 2, 3), "attn0");
    tg_tensor_set_data(t, f32_vals, TG_F32, 6);
    ts[0] = t;
    ck_assert_int_eq(tg_safetensors_write(ctx, tpath("b.st"), 1, ts, NULL, 0, NULL, NULL), TG_OK);
    got = read_file(tpath("b.st"));
    const char *h2 = "{\"attn0\":{\"dtype\":\"F32\",\"shape\":[1,1,2,3],\"data_offsets\":[0,24]}}"
                     "       ";
    ck_assert_uint_eq(got.n, 8 + 72 + 24);
    ck_assert_uint_eq(got.p[0], 72);
    for (int i = 1; i < 8; i++)
        ck_assert_uint_eq(got.p[i], 0);
    ck_assert(memcmp(got.p + 8, h2, 72) == 0);
    ck_assert(memcmp(got.p + 80, f32_vals, 24) == 0);
    free(got.p);

    /* 3. no tensors, no metadata: "{}" + 6 spaces */
    ck_assert_int_eq(tg_safetensors_write(ctx, tpath("c.st"), 0, NULL, NULL, 0, NULL, NULL), TG_OK);
    got = read_file(tpath("c.st"));
    const unsigned char empty[] = {8, 0, 0, 0, 0, 0, 0, 0, '{', '}', ' ', ' ', ' ', ' ', ' ', ' '};
    ck_assert_uint_eq(got.n, sizeof empty);
    ck_assert(memcmp(got.p, empty, sizeof empty) == 0);
    free(got.p);

    /* 4. no tensors, metadata {"framework": "pt"}: 40-byte header */
    const char *k = "framework", *v = "pt";
    ck_assert_int_eq(tg_safetensors_write(ctx, tpath("d.st"), 0, NULL, NULL, 1, &k, &v), TG_OK);
    got = read_file(tpath("d.st"));
    ck_assert_uint_eq(got.n, 48);
    ck_assert_uint_eq(got.p[0], 40);
    ck_assert(memcmp(got.p + 8, "{\"__metadata__\":{\"framework\":\"pt\"}}     ", 40) == 0);
    st = tg_safetensors_read(ctx, tpath("d.st"));
    ck_assert_ptr_nonnull(st);
    ck_assert_int_eq(tg_safetensors_count(st), 0);
    ck_assert_int_eq(tg_safetensors_meta_count(st), 1);
    ck_assert_str_eq(tg_safetensors_meta_get(st, "framework"), "pt");
    free(got.p);
    ck_assert_int_eq(count_tmp_files(), 0);
    tg_ctx_free(ctx);
    rm_tmpdir();
}
END_TEST

/* ----- safetensors: round trips --------------------------------------------------------------- */
START_TEST(test_st_roundtrip)
{
    make_tmpdir();
    tg_ctx *ctx = tg_ctx_new();
    tg_ctx_seed(ctx, 42);
    /* rank 0..4 in both dtypes, including size-1 and non-square dims */
    const int64_t shapes[5][4] = {{0}, {5}, {3, 1}, {2, 3, 4}, {1, 2, 3, 2}};
    tg_tensor *src[10];
    const char *names[10] = {"s32", "v32", "m32", "t32", "q32", "s64", "v64", "m64", "t64", "q64"};
    for (int i = 0; i < 10; i++) {
        int rank = i % 5;
        src[i] = tg_param(ctx, i < 5 ? TG_F32 : TG_F64, rank, shapes[rank], names[i]);
        ck_assert_ptr_nonnull(src[i]);
        tg_fill_normal(src[i], 0, 10);
    }
    tg_set(src[5], 0, -0.0);          /* signed zero survives */
    tg_set(src[6], 1, 1e-310);        /* f64 subnormal */
    tg_set(src[1], 2, (double)INFINITY);
    const char *mk[3] = {"format", "note", "empty"};
    const char *mv[3] = {"pt", "quote \" backslash \\ tab \t newline \n unicode \xc3\xa9", ""};
    ck_assert_int_eq(tg_safetensors_write(ctx, tpath("rt.safetensors"), 10,
                                          (const tg_tensor *const *)src, NULL, 3, mk, mv),
                     TG_OK);
    tg_safetensors *st = tg_safetensors_read(ctx, tpath("rt.safetensors"));
    ck_assert_msg(st != NULL, "%s", tg_ctx_message(ctx));
    ck_assert_int_eq(tg_safetensors_count(st), 10);
    for (int i = 0; i < 10; i++) {
        ck_assert_str_eq(tg_safetensors_name(st, i), names[i]); /* header order */
        tg_tensor *r = tg_safetensors_tensor(st, i);
        ck_assert_ptr_eq(tg_safetensors_find(st, names[i]), r);
        ck_assert_str_eq(tg_tensor_name(r), names[i]);
        ck_assert_int_eq(tg_tensor_kind(r), TG_KIND_CONST);
        ck_assert_int_eq(tg_tensor_dtype(r), tg_tensor_dtype(src[i]));
        ck_assert_str_eq(tg_safetensors_file_dtype(st, i), i < 5 ? "F32" : "F64");
        ck_assert_int_eq(tg_tensor_rank(r), tg_tensor_rank(src[i]));
        for (int d = 0; d < tg_tensor_rank(r); d++)
            ck_assert_int_eq(tg_tensor_dim(r, d), tg_tensor_dim(src[i], d));
        size_t nb = (size_t)tg_tensor_numel(r) * tg_dtype_size(tg_tensor_dtype(r));
        ck_assert_msg(memcmp(tg_tensor_data(r), tg_tensor_data(src[i]), nb) == 0,
                      "data of %s differs", names[i]);
    }
    ck_assert(signbit(tg_get(tg_safetensors_find(st, "s64"), 0)));
    ck_assert_int_eq(tg_safetensors_meta_count(st), 3);
    for (int i = 0; i < 3; i++) {
        ck_assert_str_eq(tg_safetensors_meta_key(st, i), mk[i]);
        ck_assert_str_eq(tg_safetensors_meta_value(st, i), mv[i]);
        ck_assert_str_eq(tg_safetensors_meta_get(st, mk[i]), mv[i]);
    }
    ck_assert_ptr_null(tg_safetensors_meta_get(st, "nope"));
    ck_assert_ptr_null(tg_safetensors_find(st, "nope"));
    ck_assert_ptr_null(tg_safetensors_name(st, 10));
    ck_assert_ptr_null(tg_safetensors_tensor(st, -1));
    ck_assert_ptr_null(tg_safetensors_meta_key(st, 3));
    ck_assert_int_eq(tg_safetensors_count(NULL), 0);
    ck_assert_ptr_null(tg_safetensors_find(NULL, "x"));

    /* the same file from memory gives the same tensors */
    bytes fb = read_file(tpath("rt.safetensors"));
    tg_safetensors *sm = tg_safetensors_read_mem(ctx, fb.p, fb.n);
    ck_assert_ptr_nonnull(sm);
    for (int i = 0; i < 10; i++) {
        size_t nb = (size_t)tg_tensor_numel(src[i]) * tg_dtype_size(tg_tensor_dtype(src[i]));
        ck_assert(memcmp(tg_tensor_data(tg_safetensors_tensor(sm, i)), tg_tensor_data(src[i]),
                         nb) == 0);
    }

    /* explicit names override tensor names; writing again is deterministic */
    const char *alt[2] = {"encoder.w", "encoder.b"};
    const tg_tensor *two[2] = {src[3], src[6]};
    ck_assert_int_eq(tg_safetensors_write(ctx, tpath("n1.st"), 2, two, alt, 0, NULL, NULL), TG_OK);
    ck_assert_int_eq(tg_safetensors_write(ctx, tpath("n2.st"), 2, two, alt, 0, NULL, NULL), TG_OK);
    bytes a = read_file(tpath("n1.st")), b = read_file(tpath("n2.st"));
    ck_assert_uint_eq(a.n, b.n);
    ck_assert(memcmp(a.p, b.p, a.n) == 0);
    ck_assert_uint_eq(a.p[0] % 8, 0); /* header padded to a multiple of 8 */
    st = tg_safetensors_read(ctx, tpath("n1.st"));
    ck_assert_ptr_nonnull(tg_safetensors_find(st, "encoder.w"));
    ck_assert_ptr_null(tg_safetensors_find(st, "t32"));
    ck_assert_int_eq(tg_ctx_status(ctx), TG_OK);
    free(fb.p);
    free(a.p);
    free(b.p);
    ck_assert_int_eq(count_tmp_files(), 0);
    tg_ctx_free(ctx);
    rm_tmpdir();
}
END_TEST

/* Overwriting keeps the old file's permissions. */
START_TEST(test_st_overwrite_keeps_mode)
{
    make_tmpdir();
    tg_ctx *ctx = tg_ctx_new();
    tg_tensor *t = tg_const(ctx, TG_F64, TG_DIMS(2), "x");
    const tg_tensor *ts[1] = {t};
    mode_t um = umask(022); /* a new file gets 0666 minus the umask */
    ck_assert_int_eq(tg_safetensors_write(ctx, tpath("m.st"), 1, ts, NULL, 0, NULL, NULL), TG_OK);
    umask(um);
    struct stat sb;
    ck_assert_int_eq(stat(tpath("m.st"), &sb), 0);
    ck_assert_int_eq(sb.st_mode & 0777, 0644);
    ck_assert_int_eq(chmod(tpath("m.st"), 0600), 0);
    tg_set(t, 0, 3.0);
    ck_assert_int_eq(tg_safetensors_write(ctx, tpath("m.st"), 1, ts, NULL, 0, NULL, NULL), TG_OK);
    ck_assert_int_eq(stat(tpath("m.st"), &sb), 0);
    ck_assert_int_eq(sb.st_mode & 0777, 0600);
    tg_safetensors *st = tg_safetensors_read(ctx, tpath("m.st"));
    ck_assert_double_eq(tg_get(tg_safetensors_find(st, "x"), 0), 3.0);
    tg_ctx_free(ctx);
    rm_tmpdir();
}
END_TEST

/* JSON escaping on write; every escape form on read. */
START_TEST(test_st_json_strings)
{
    tg_ctx *ctx = tg_ctx_new();
    const double one = 1.0;
    const char *name = "a\"b\\c/d\n\x01\x1f\t\b\f\r \xc3\xa9\xf0\x9f\x98\x80";
    tg_io_item it = {name, TG_F64, 0, NULL, &one};
    mem_sink ms = {{0}, 0, 0};
    tg_writer w = {mem_write, &ms};
    ck_assert_int_eq(tg_safetensors_write_to(ctx, &w, 1, &it, 0, NULL, NULL), TG_OK);
    const char *want = "{\"a\\\"b\\\\c/d\\n\\u0001\\u001f\\t\\b\\f\\r \xc3\xa9\xf0\x9f\x98\x80\":"
                       "{\"dtype\":\"F64\",\"shape\":[],\"data_offsets\":[0,8]}}";
    ck_assert(ms.b.n >= 8 + strlen(want));
    ck_assert(memcmp(ms.b.p + 8, want, strlen(want)) == 0);
    tg_safetensors *st = tg_safetensors_read_mem(ctx, ms.b.p, ms.b.n);
    ck_assert_msg(st != NULL, "%s", tg_ctx_message(ctx));
    ck_assert_str_eq(tg_safetensors_name(st, 0), name);
    ck_assert_int_eq(tg_tensor_rank(tg_safetensors_tensor(st, 0)), 0);
    ck_assert_double_eq(tg_get(tg_safetensors_find(st, name), 0), 1.0);
    free(ms.b.p);

    /* \u escapes (BMP, surrogate pair, escaped slash), whitespace between tokens */
    bytes f = st_file(" {\r\n\t\"\\u00e9\\ud83d\\ude00\\/x\" : { \"shape\" : [ 1 ] ,"
                      " \"data_offsets\" : [ 0 , 4 ] , \"dtype\" : \"F32\" } , "
                      "\"__metadata__\" : { \"k\\u0041\" : \"\\\"v\\\"\" } }   ", 4);
    st = tg_safetensors_read_mem(ctx, f.p, f.n);
    ck_assert_msg(st != NULL, "%s", tg_ctx_message(ctx));
    ck_assert_str_eq(tg_safetensors_name(st, 0), "\xc3\xa9\xf0\x9f\x98\x80/x");
    ck_assert_str_eq(tg_safetensors_meta_get(st, "kA"), "\"v\"");
    free(f.p);
    tg_ctx_free(ctx);
}
END_TEST

/* F16 and BF16 convert exactly to f32; integer and bool dtypes become i32 (exact: values in
 * range). */
START_TEST(test_st_dtype_conversions)
{
    tg_ctx *ctx = tg_ctx_new();
    bytes b = {0};
    const char *h = "{\"h\":{\"dtype\":\"F16\",\"shape\":[7],\"data_offsets\":[0,14]},"
                    "\"bf\":{\"dtype\":\"BF16\",\"shape\":[3],\"data_offsets\":[14,20]},"
                    "\"i64\":{\"dtype\":\"I64\",\"shape\":[2],\"data_offsets\":[20,36]},"
                    "\"mask\":{\"dtype\":\"BOOL\",\"shape\":[2,2],\"data_offsets\":[36,40]},"
                    "\"u8\":{\"dtype\":\"U8\",\"shape\":[],\"data_offsets\":[40,41]},"
                    "\"i32\":{\"dtype\":\"I32\",\"shape\":[1],\"data_offsets\":[41,45]}}";
    b_le(&b, strlen(h), 8);
    b_puts(&b, h);
    const uint16_t f16[7] = {0x3c00, 0xc000, 0x7bff, 0x0001, 0x7c00, 0x3800, 0x8000};
    for (int i = 0; i < 7; i++)
        b_le(&b, f16[i], 2);
    const uint16_t bf16[3] = {0x3f80, 0xc040, 0x4049};
    for (int i = 0; i < 3; i++)
        b_le(&b, bf16[i], 2);
    b_le(&b, (uint64_t)-5, 8);
    b_le(&b, (uint64_t)2147483647, 8);
    b_put(&b, (const unsigned char[]){0, 1, 2, 0}, 4);
    b_put(&b, (const unsigned char[]){200}, 1);
    b_le(&b, (uint32_t)-7, 4);
    tg_safetensors *st = tg_safetensors_read_mem(ctx, b.p, b.n);
    ck_assert_msg(st != NULL, "%s", tg_ctx_message(ctx));
    tg_tensor *t = tg_safetensors_find(st, "h");
    ck_assert_int_eq(tg_tensor_dtype(t), TG_F32);
    ck_assert_str_eq(tg_safetensors_file_dtype(st, 0), "F16");
    const double hv[7] = {1.0, -2.0, 65504.0, ldexp(1, -24), (double)INFINITY, 0.5, -0.0};
    for (int i = 0; i < 7; i++)
        ck_assert_double_eq(tg_get(t, i), hv[i]);
    ck_assert(signbit(tg_get(t, 6)));
    t = tg_safetensors_find(st, "bf");
    ck_assert_int_eq(tg_tensor_dtype(t), TG_F32);
    ck_assert_double_eq(tg_get(t, 0), 1.0);
    ck_assert_double_eq(tg_get(t, 1), -3.0);
    ck_assert_double_eq(tg_get(t, 2), 3.140625);
    t = tg_safetensors_find(st, "i64");
    ck_assert_int_eq(tg_tensor_dtype(t), TG_I32);
    ck_assert_int_eq(((const int32_t *)tg_tensor_data(t))[0], -5);
    ck_assert_int_eq(((const int32_t *)tg_tensor_data(t))[1], 2147483647);
    t = tg_safetensors_find(st, "mask");
    ck_assert_int_eq(tg_tensor_dtype(t), TG_I32);
    tu_assert_data(t, (const double[]){0, 1, 1, 0}, 0);
    ck_assert_int_eq(tg_tensor_dtype(tg_safetensors_find(st, "u8")), TG_I32);
    ck_assert_double_eq(tg_get(tg_safetensors_find(st, "u8"), 0), 200.0);
    ck_assert_int_eq(tg_tensor_dtype(tg_safetensors_find(st, "i32")), TG_I32);
    ck_assert_double_eq(tg_get(tg_safetensors_find(st, "i32"), 0), -7.0);
    ck_assert_str_eq(tg_safetensors_file_dtype(st, 5), "I32");
    free(b.p);
    tg_ctx_free(ctx);
}
END_TEST

/* ----- safetensors: malformed files ----------------------------------------------------------- */
#define T1 "{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}"
#define T2(b, e) "{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[" #b "," #e "]}"

typedef struct st_case {
    const char *what;
    const char *header; /* NULL: raw bytes below */
    size_t data_len;
    tg_status want;
    const char *needle; /* expected in the message (NULL: anything) */
} st_case;

static const st_case st_cases[] = {
    /* JSON syntax */
    {"empty object member", "{\"a\":}", 0, TG_ERR_JSON, "expected an object"},
    {"missing colon", "{\"a\" " T1 "}", 4, TG_ERR_JSON, "':'"},
    {"lone comma", "{,}", 0, TG_ERR_JSON, "string key"},
    {"trailing comma", "{\"a\":" T1 ",}", 4, TG_ERR_JSON, "trailing comma"},
    {"trailing garbage", "{\"a\":" T1 "} x", 4, TG_ERR_JSON, "after the top-level value"},
    {"two objects", "{\"a\":" T1 "}{}", 4, TG_ERR_JSON, "after the top-level value"},
    {"tab padding", "{\"a\":" T1 "}\t\t", 4, TG_OK, NULL}, /* tabs are JSON whitespace */
    {"single quotes", "{'a':1}", 0, TG_ERR_JSON, "string key"},
    {"unterminated string", "{\"a", 0, TG_ERR_JSON, "unterminated string"},
    {"unterminated object", "{\"a\":" T1, 4, TG_ERR_JSON, "unterminated object"},
    {"bad escape", "{\"a\\x\":" T1 "}", 4, TG_ERR_JSON, "escape"},
    {"short unicode escape", "{\"a\\u12\":" T1 "}", 4, TG_ERR_JSON, "four hex digits"},
    {"lone high surrogate", "{\"a\\ud800\":" T1 "}", 4, TG_ERR_JSON, "surrogate"},
    {"lone low surrogate", "{\"a\\udc00\":" T1 "}", 4, TG_ERR_JSON, "surrogate"},
    {"raw newline in string", "{\"a\nb\":" T1 "}", 4, TG_ERR_JSON, "control character"},
    {"invalid UTF-8", "{\"a\xff\":" T1 "}", 4, TG_ERR_JSON, "UTF-8"},
    {"overlong UTF-8", "{\"a\xc0\xaf\":" T1 "}", 4, TG_ERR_JSON, "UTF-8"},
    {"UTF-8 surrogate", "{\"a\xed\xa0\x80\":" T1 "}", 4, TG_ERR_JSON, "UTF-8"},
    {"bad literal", "{\"a\":" "{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4],\"x\":tru}}",
     4, TG_ERR_JSON, NULL},
    {"leading zero", "{\"a\":{\"dtype\":\"F32\",\"shape\":[01],\"data_offsets\":[0,4]}}", 4,
     TG_ERR_JSON, "leading zero"},
    {"bare minus", "{\"a\":{\"dtype\":\"F32\",\"shape\":[-],\"data_offsets\":[0,4]}}", 4,
     TG_ERR_JSON, NULL},
    {"dot without digits", "{\"a\":{\"dtype\":\"F32\",\"shape\":[1.],\"data_offsets\":[0,4]}}", 4,
     TG_ERR_JSON, "digit"},
    {"exponent without digits", "{\"a\":{\"dtype\":\"F32\",\"shape\":[1e],\"data_offsets\":[0,4]}}",
     4, TG_ERR_JSON, "exponent"},
    /* JSON of the wrong form */
    {"header is an array", "[]", 0, TG_ERR_JSON, "not a JSON object"},
    {"header is a string", "\"abc\"", 0, TG_ERR_JSON, "not a JSON object"},
    {"header is a number", "12345678", 0, TG_ERR_JSON, "not a JSON object"},
    {"header is null", "null", 0, TG_ERR_JSON, "not a JSON object"},
    {"header is blank", "        ", 0, TG_ERR_JSON, "not a JSON object"},
    {"entry not an object", "{\"a\":[1,2]}", 0, TG_ERR_JSON, "expected an object"},
    {"missing dtype", "{\"a\":{\"shape\":[1],\"data_offsets\":[0,4]}}", 4, TG_ERR_JSON,
     "missing field 'dtype'"},
    {"missing shape", "{\"a\":{\"dtype\":\"F32\",\"data_offsets\":[0,4]}}", 4, TG_ERR_JSON,
     "missing field 'shape'"},
    {"missing offsets", "{\"a\":{\"dtype\":\"F32\",\"shape\":[1]}}", 4, TG_ERR_JSON,
     "missing field 'data_offsets'"},
    {"unknown field", "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4],\"x\":1}}", 4,
     TG_ERR_JSON, "unknown field 'x'"},
    {"dtype not a string", "{\"a\":{\"dtype\":32,\"shape\":[1],\"data_offsets\":[0,4]}}", 4,
     TG_ERR_JSON, "dtype must be a string"},
    {"shape not an array", "{\"a\":{\"dtype\":\"F32\",\"shape\":1,\"data_offsets\":[0,4]}}", 4,
     TG_ERR_JSON, "shape must be an array"},
    {"negative dim", "{\"a\":{\"dtype\":\"F32\",\"shape\":[-1],\"data_offsets\":[0,4]}}", 4,
     TG_ERR_JSON, "negative"},
    {"float dim", "{\"a\":{\"dtype\":\"F32\",\"shape\":[1.0],\"data_offsets\":[0,4]}}", 4,
     TG_ERR_JSON, "fraction"},
    {"string dim", "{\"a\":{\"dtype\":\"F32\",\"shape\":[\"1\"],\"data_offsets\":[0,4]}}", 4,
     TG_ERR_JSON, "non-negative integers"},
    {"negative offset", "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[-4,0]}}", 4,
     TG_ERR_JSON, "negative"},
    {"float offset", "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4.0]}}", 4,
     TG_ERR_JSON, "fraction"},
    {"exponent offset", "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4e0]}}", 4,
     TG_ERR_JSON, "fraction"},
    {"one offset", "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4]}}", 4,
     TG_ERR_JSON, "[begin, end]"},
    {"three offsets", "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4,8]}}", 8,
     TG_ERR_JSON, "[begin, end]"},
    {"offsets not an array", "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":4}}", 4,
     TG_ERR_JSON, "[begin, end]"},
    {"metadata not an object", "{\"__metadata__\":[],\"a\":" T1 "}", 4, TG_ERR_JSON,
     "__metadata__"},
    {"metadata a string", "{\"__metadata__\":\"x\"}", 0, TG_ERR_JSON, "__metadata__"},
    {"metadata number value", "{\"__metadata__\":{\"k\":1}}", 0, TG_ERR_JSON, "not a string"},
    {"metadata nested value", "{\"__metadata__\":{\"k\":{\"a\":\"b\"}}}", 0, TG_ERR_JSON,
     "not a string"},
    {"metadata null value", "{\"__metadata__\":{\"k\":null}}", 0, TG_ERR_JSON, "not a string"},
    /* duplicates */
    {"duplicate tensor", "{\"a\":" T1 ",\"a\":" T2(4, 12) "}", 12, TG_ERR_DUPLICATE,
     "'a' appears twice"},
    {"duplicate field",
     "{\"a\":{\"dtype\":\"F32\",\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}", 4,
     TG_ERR_DUPLICATE, "'dtype' appears twice"},
    {"duplicate metadata", "{\"__metadata__\":{},\"__metadata__\":{}}", 0, TG_ERR_DUPLICATE,
     "__metadata__"},
    {"duplicate metadata key", "{\"__metadata__\":{\"k\":\"1\",\"k\":\"2\"}}", 0, TG_ERR_DUPLICATE,
     "'k' appears twice"},
    /* unsupported */
    {"unknown dtype", "{\"a\":{\"dtype\":\"F17\",\"shape\":[1],\"data_offsets\":[0,4]}}", 4,
     TG_ERR_UNSUPPORTED, "unknown dtype 'F17'"},
    {"lowercase dtype", "{\"a\":{\"dtype\":\"f32\",\"shape\":[1],\"data_offsets\":[0,4]}}", 4,
     TG_ERR_UNSUPPORTED, "unknown dtype"},
    {"fp8 dtype", "{\"a\":{\"dtype\":\"F8_E4M3\",\"shape\":[4],\"data_offsets\":[0,4]}}", 4,
     TG_ERR_UNSUPPORTED, "F8_E4M3"},
    {"rank 7", "{\"a\":{\"dtype\":\"F32\",\"shape\":[1,1,1,1,1,1,1],\"data_offsets\":[0,4]}}", 4,
     TG_ERR_UNSUPPORTED, "rank 7"},
    {"zero dim", "{\"a\":{\"dtype\":\"F32\",\"shape\":[2,0],\"data_offsets\":[0,0]}}", 0,
     TG_ERR_UNSUPPORTED, "zero-size dim"},
    {"NUL in name", "{\"a\\u0000b\":" T1 "}", 4, TG_ERR_UNSUPPORTED, "NUL"},
    /* sizes */
    {"shape product overflow",
     "{\"a\":{\"dtype\":\"F32\",\"shape\":[4294967296,4294967296,16],\"data_offsets\":[0,4]}}", 4,
     TG_ERR_OVERFLOW, "overflows"},
    {"dim over int64",
     "{\"a\":{\"dtype\":\"F32\",\"shape\":[18446744073709551615],\"data_offsets\":[0,4]}}", 4,
     TG_ERR_OVERFLOW, "overflows"},
    {"dim over uint64",
     "{\"a\":{\"dtype\":\"F32\",\"shape\":[99999999999999999999999],\"data_offsets\":[0,4]}}", 4,
     TG_ERR_OVERFLOW, "overflows"},
    {"byte size too big for the bytes", "{\"a\":{\"dtype\":\"F64\",\"shape\":[1152921504606846976],"
                                        "\"data_offsets\":[0,8]}}",
     8, TG_ERR_OVERFLOW, "overflows"},
    {"size mismatch", "{\"a\":{\"dtype\":\"F32\",\"shape\":[2,3],\"data_offsets\":[0,20]}}", 20,
     TG_ERR_SIZE_MISMATCH, "hold 20 bytes but F32 [2, 3] needs 24"},
    {"size mismatch rank 0", "{\"a\":{\"dtype\":\"F64\",\"shape\":[],\"data_offsets\":[0,4]}}", 4,
     TG_ERR_SIZE_MISMATCH, "needs 8"},
    /* offsets and layout */
    {"offsets reversed", "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[8,4]}}", 8,
     TG_ERR_OUT_OF_BOUNDS, "[8, 4]"},
    {"offsets out of bounds",
     "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[100,104]}}", 4,
     TG_ERR_OUT_OF_BOUNDS, "past the data section"},
    {"offset over uint64",
     "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,99999999999999999999]}}", 4,
     TG_ERR_OUT_OF_BOUNDS, NULL},
    {"second tensor out of bounds", "{\"a\":" T1 ",\"b\":" T2(12, 20) "}", 12,
     TG_ERR_OUT_OF_BOUNDS, "'b'"},
    {"overlap", "{\"a\":" T2(0, 8) ",\"b\":" T2(4, 12) "}", 16, TG_ERR_OVERLAP, "overlap"},
    {"same range twice", "{\"a\":" T2(0, 8) ",\"b\":" T2(0, 8) "}", 16, TG_ERR_OVERLAP,
     "overlap"},
    {"same small range twice", "{\"a\":" T1 ",\"b\":" T1 "}", 8, TG_ERR_OVERLAP, NULL},
    {"hole between", "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
                     "\"b\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[8,12]}}",
     12, TG_ERR_GAP, "[4, 8)"},
    {"first not at 0", "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}", 8,
     TG_ERR_GAP, "[0, 4)"},
    {"trailing bytes", "{\"a\":" T1 "}", 7, TG_ERR_TRAILING, "3 bytes after"},
    {"trailing bytes, no tensors", "{}", 1, TG_ERR_TRAILING, "1 bytes after"},
    {"truncated data", "{\"a\":" T2(0, 8) "}", 7, TG_ERR_TRUNCATED,
     "holds 7 bytes but the tensors need 8"},
    {"truncated data, second tensor", "{\"a\":" T1 ",\"b\":" T2(4, 12) "}", 10, TG_ERR_TRUNCATED,
     NULL},
    {"out-of-order offsets are fine", "{\"b\":" T2(4, 12) ",\"a\":" T1 "}", 12, TG_OK, NULL},
};

/* Raw-prefix cases: the header-size field itself. */
typedef struct st_raw_case {
    const char *what;
    uint64_t n_field;   /* value of the 8-byte field */
    size_t field_bytes; /* how many of its bytes the file has (< 8: truncated) */
    const char *rest;   /* bytes after the field */
    tg_status want;
} st_raw_case;

static const st_raw_case st_raw_cases[] = {
    {"empty file", 0, 0, "", TG_ERR_TRUNCATED},
    {"size field truncated", 16, 3, "", TG_ERR_TRUNCATED},
    {"header size 0", 0, 8, "{}", TG_ERR_HEADER_SIZE},
    {"header size 1", 1, 8, "{}", TG_ERR_HEADER_SIZE},
    {"header size huge", (uint64_t)1 << 63, 8, "{}", TG_ERR_HEADER_SIZE},
    {"header size all ones", UINT64_MAX, 8, "{}", TG_ERR_HEADER_SIZE},
    {"header size just over 100 MB", 100000001, 8, "{}", TG_ERR_HEADER_SIZE},
    {"header truncated", 100, 8, "{\"a\":{\"dtype\":\"F32\"", TG_ERR_TRUNCATED},
    {"header 1 byte short", 3, 8, "{}", TG_ERR_TRUNCATED},
};

/* Read `b` from memory and from a file; both must give `want` (and a message naming the
 * function), leave no bytes allocated on failure, and agree with each other. */
static void check_st_bytes(const bytes *b, tg_status want, const char *needle, const char *what)
{
    tg_ctx *ctx = tg_ctx_new();
    tg_safetensors *st = tg_safetensors_read_mem(ctx, b->p, b->n);
    if (want == TG_OK) {
        ck_assert_msg(st != NULL, "%s: %s", what, tg_ctx_message(ctx));
    } else {
        ck_assert_msg(st == NULL, "%s: accepted", what);
        assert_fails(ctx, want, "tg_safetensors_read_mem: <memory>: ", what);
        if (needle)
            ck_assert_msg(strstr(tg_ctx_message(ctx), needle), "%s: message '%s' lacks '%s'",
                          what, tg_ctx_message(ctx), needle);
        ck_assert_msg(tg_ctx_bytes(ctx) == 0, "%s: %zu bytes left allocated", what,
                      tg_ctx_bytes(ctx));
    }
    tg_ctx_free(ctx);

    ctx = tg_ctx_new();
    write_file(tpath("bad.safetensors"), b->p, b->n);
    st = tg_safetensors_read(ctx, tpath("bad.safetensors"));
    if (want == TG_OK) {
        ck_assert_msg(st != NULL, "%s (file): %s", what, tg_ctx_message(ctx));
    } else {
        ck_assert_msg(st == NULL, "%s (file): accepted", what);
        assert_fails(ctx, want, "tg_safetensors_read: ", what);
        ck_assert_msg(strstr(tg_ctx_message(ctx), "bad.safetensors"), "%s: no path in '%s'", what,
                      tg_ctx_message(ctx));
        ck_assert_msg(tg_ctx_bytes(ctx) == 0, "%s (file): %zu bytes left allocated", what,
                      tg_ctx_bytes(ctx));
    }
    tg_ctx_free(ctx);
}

START_TEST(test_st_malformed)
{
    make_tmpdir();
    for (size_t i = 0; i < sizeof st_cases / sizeof st_cases[0]; i++) {
        const st_case *c = &st_cases[i];
        bytes b = st_file(c->header, c->data_len);
        check_st_bytes(&b, c->want, c->needle, c->what);
        free(b.p);
    }
    for (size_t i = 0; i < sizeof st_raw_cases / sizeof st_raw_cases[0]; i++) {
        const st_raw_case *c = &st_raw_cases[i];
        bytes b = {0};
        b_le(&b, c->n_field, 8);
        b.n = c->field_bytes;
        b_puts(&b, c->rest);
        check_st_bytes(&b, c->want, NULL, c->what);
        free(b.p);
    }
    /* every proper prefix of a valid file is rejected cleanly */
    tg_ctx *ctx = tg_ctx_new();
    tg_tensor *t = tg_const(ctx, TG_F32, TG_DIMS(2, 3), "w");
    const tg_tensor *ts[1] = {t};
    const char *k = "a", *v = "b";
    ck_assert_int_eq(tg_safetensors_write(ctx, tpath("ok.st"), 1, ts, NULL, 1, &k, &v), TG_OK);
    bytes full = read_file(tpath("ok.st"));
    for (size_t n = 0; n < full.n; n++) {
        tg_ctx *c2 = tg_ctx_new();
        ck_assert_ptr_null(tg_safetensors_read_mem(c2, full.p, n));
        tg_status s = tg_ctx_status(c2);
        ck_assert_msg(s == TG_ERR_TRUNCATED || s == TG_ERR_JSON, "prefix %zu: %s", n,
                      tg_ctx_message(c2));
        ck_assert_uint_eq(tg_ctx_bytes(c2), 0);
        tg_ctx_free(c2);
    }
    /* every single-byte corruption is either accepted or rejected cleanly (never a crash) */
    for (size_t i = 0; i < full.n; i++) {
        for (int x = 1; x < 256; x <<= 1) {
            full.p[i] ^= (unsigned char)x;
            tg_ctx *c2 = tg_ctx_new();
            tg_safetensors *st = tg_safetensors_read_mem(c2, full.p, full.n);
            ck_assert(st != NULL || (tg_ctx_status(c2) != TG_OK && tg_ctx_message(c2)[0]));
            tg_ctx_free(c2);
            full.p[i] ^= (unsigned char)x;
        }
    }
    free(full.p);
    tg_ctx_free(ctx);
    rm_tmpdir();
}
END_TEST

START_TEST(test_st_read_errors)
{
    make_tmpdir();
    tg_ctx *ctx = tg_ctx_new();
    ck_assert_ptr_null(tg_safetensors_read(ctx, tpath("missing.st")));
    assert_fails(ctx, TG_ERR_IO, "tg_safetensors_read: ", "missing file");
    ck_assert_ptr_nonnull(strstr(tg_ctx_message(ctx), strerror(ENOENT)));
    tg_ctx_clear_error(ctx);
    ck_assert_ptr_null(tg_safetensors_read(ctx, tmpdir));
    assert_fails(ctx, TG_ERR_IO, "tg_safetensors_read: ", "directory");
    tg_ctx_clear_error(ctx);
    ck_assert_ptr_null(tg_safetensors_read(ctx, NULL));
    assert_fails(ctx, TG_ERR_ARG, "tg_safetensors_read: ", "NULL path");
    tg_ctx_clear_error(ctx);
    ck_assert_ptr_null(tg_safetensors_read_mem(ctx, NULL, 5));
    assert_fails(ctx, TG_ERR_ARG, "tg_safetensors_read_mem: ", "NULL data");
    ck_assert_ptr_null(tg_safetensors_read(NULL, "x"));
    ck_assert_ptr_null(tg_safetensors_read_mem(NULL, "x", 1));
    tg_ctx_free(ctx);
    rm_tmpdir();
}
END_TEST

/* Another kind of file (text, .npy) given to the safetensors reader is named as such, not by
 * the header size its first 8 bytes happen to spell. */
START_TEST(test_st_not_safetensors)
{
    make_tmpdir();
    const char *texts[] = {"                    GNU GENERAL PUBLIC LICENSE\n"
                           "                       Version 3, 29 June 2007\n",
                           "\x93NUMPY\x01\x00v\x00{'descr': '<f4', 'fortran_order': False, "
                           "'shape': (1,), }      \n\x00\x00\x80?"};
    for (int i = 0; i < 2; i++) {
        tg_ctx *ctx = tg_ctx_new();
        size_t n = i ? 78 : strlen(texts[i]); /* the .npy file holds NUL bytes */
        write_file(tpath("text.safetensors"), texts[i], n);
        ck_assert_ptr_null(tg_safetensors_read(ctx, tpath("text.safetensors")));
        const char *m = tg_ctx_message(ctx);
        ck_assert_msg(strstr(m, "text.safetensors: not a safetensors file") && !strstr(m, "size "),
                      "%s", m);
        ck_assert_uint_eq(tg_ctx_bytes(ctx), 0);
        ck_assert_ptr_null(tg_safetensors_read_mem(ctx, texts[i], n));
        ck_assert_msg(strstr(tg_ctx_message(ctx), "<memory>: not a safetensors file"), "%s",
                      tg_ctx_message(ctx));
        tg_ctx_free(ctx);
    }
    rm_tmpdir();
}
END_TEST

/* I/O failures are run-time errors: they do not block later builders, graphs or tg_gradcheck
 * (no tg_ctx_clear_error), and they never replace a pending build error. */
START_TEST(test_io_errors_do_not_stick)
{
    make_tmpdir();
    tg_ctx *ctx = tg_ctx_new();
    tg_tensor *x = tg_param(ctx, TG_F64, TG_DIMS(3), "x");
    tg_fill_uniform(x, -1, 1);
    tg_tensor *y = tg_sum_all(ctx, tg_mul(ctx, x, x));
    tg_graph *g = tg_graph_new(ctx, &y, 1);
    ck_assert_ptr_nonnull(g);
    for (int k = 0; k < 5; k++) {
        tg_status s = TG_OK;
        if (k == 0) {
            ck_assert_ptr_null(tg_safetensors_read(ctx, tpath("missing.safetensors")));
            s = tg_ctx_status(ctx);
        } else if (k == 1) {
            s = tg_graph_write_dot(g, tmpdir, 0); /* a directory */
        } else if (k == 2) {
            s = tg_params_save(ctx, tpath("no/such/dir/p.safetensors"), 0, NULL, 0, NULL, NULL);
        } else if (k == 3) {
            s = tg_checkpoint_save(ctx, tpath("no/such/dir/c.ckpt"), NULL, 0, NULL, NULL, NULL);
        } else {
            ck_assert_ptr_null(tg_npy_read(ctx, tpath("missing.npy"), TG_F32, NULL));
            s = tg_ctx_status(ctx);
        }
        ck_assert_msg(s == TG_ERR_IO, "case %d: %s", k, tg_status_str(s));
        tu_assert_error(ctx, TG_ERR_IO, NULL); /* described right after the call */
        /* then building, running and gradcheck go on */
        tg_tensor *z = tg_scale(ctx, y, 2);
        ck_assert_msg(z != NULL, "case %d: %s", k, tg_ctx_message(ctx));
        ck_assert_int_eq(tg_ctx_status(ctx), TG_OK);
        tg_gradcheck_report rep;
        ck_assert_int_eq(tg_gradcheck(ctx, y, NULL, &rep), TG_OK);
        ck_assert_int_eq(tg_graph_forward(g), TG_OK);
    }
    /* a pending build error stays what it was */
    ck_assert_ptr_null(tg_add(ctx, x, tg_param(ctx, TG_F64, TG_DIMS(4), "w")));
    tu_assert_error(ctx, TG_ERR_SHAPE, "tg_add");
    ck_assert_ptr_null(tg_safetensors_read(ctx, tpath("missing.safetensors")));
    tu_assert_error(ctx, TG_ERR_SHAPE, "tg_add");
    ck_assert_ptr_null(tg_scale(ctx, y, 2));
    tg_ctx_free(ctx);
    rm_tmpdir();
}
END_TEST

/* A finite f64 beyond the f32 range (1e308) is refused where it would become an f32 (loading a
 * parameter, reading .npy as f32), naming the value; nothing is written. */
START_TEST(test_f64_beyond_f32)
{
    make_tmpdir();
    tg_ctx *ctx = tg_ctx_new();
    tg_tensor *w64 = tg_param(ctx, TG_F64, TG_DIMS(3), "w");
    tg_set(w64, 0, 1);
    tg_set(w64, 1, -1e308);
    tg_set(w64, 2, 2);
    ck_assert_int_eq(tg_params_save(ctx, tpath("w.safetensors"), 1, &w64, 0, NULL, NULL), TG_OK);
    ck_assert_int_eq(tg_npy_write(ctx, tpath("w.npy"), w64), TG_OK);
    tg_ctx *c32 = tg_ctx_new();
    tg_tensor *w = tg_param(c32, TG_F32, TG_DIMS(3), "w");
    tg_fill(w, 7);
    ck_assert_int_eq(tg_params_load(c32, tpath("w.safetensors"), 1, &w, true), TG_ERR_FORMAT);
    tu_assert_error(c32, TG_ERR_FORMAT, "tensor 'w' element 1 is -1e+308 in the file, beyond the "
                                        "f32 range");
    for (int i = 0; i < 3; i++)
        ck_assert_double_eq(tg_get(w, i), 7);
    ck_assert_ptr_null(tg_npy_read(c32, tpath("w.npy"), TG_F32, NULL));
    tu_assert_error(c32, TG_ERR_FORMAT, "element 1 (F64) is -1e+308, beyond "
                                        "the f32 range");
    ck_assert_msg(strstr(tg_ctx_message(c32), "and it is read as f32"), "says why f32: %s",
                  tg_ctx_message(c32));
    ck_assert_int_eq(tg_npy_write(c32, tpath("x.npy"), w64), TG_ERR_ARG); /* ctx's tensors only */
    tu_assert_error(c32, TG_ERR_ARG, "tg_npy_write: tensor 'w' belongs to another context");
    tg_tensor *r = tg_npy_read(c32, tpath("w.npy"), TG_F64, NULL); /* as f64: fine */
    ck_assert_ptr_nonnull(r);
    ck_assert_double_eq(tg_get(r, 1), -1e308);
    /* NaN and the infinities are values of f32 too */
    tg_set(w64, 1, INFINITY);
    ck_assert_int_eq(tg_npy_write(ctx, tpath("inf.npy"), w64), TG_OK);
    r = tg_npy_read(c32, tpath("inf.npy"), TG_F32, NULL);
    ck_assert_msg(r != NULL, "%s", tg_ctx_message(c32));
    ck_assert(isinf(tg_get(r, 1)));
    tg_ctx_free(c32);
    tg_ctx_free(ctx);
    rm_tmpdir();
}
END_TEST

/* Paths name regular files only: a FIFO without a writer, a device that never ends, a
 * directory and a socket are refused at once with one line (none of them may hang or read
 * without limit; before the fix the FIFO blocked forever and /dev/zero was read until memory ran
 * out). */
START_TEST(test_read_refuses_non_regular)
{
    make_tmpdir();
    tg_ctx *ctx = tg_ctx_new();
    ck_assert_int_eq(mkfifo(tpath("fifo"), 0600), 0);
    ck_assert_int_eq(mkfifo(tpath("fifo.npy"), 0600), 0);
    ck_assert_int_eq(symlink("/dev/zero", tpath("zero.st")), 0);
    struct {
        const char *path, *kind;
    } cases[] = {
        {tpath("fifo"), "a FIFO"},
        {"/dev/zero", "a character device"},
        {"/dev/null", "a character device"},
        {tpath("zero.st"), "a character device"}, /* a link to a device: what it names counts */
        {tmpdir, "a directory"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char want[600];
        snprintf(want, sizeof want, "tg_safetensors_read: '%s' is not a regular file (%s)",
                 cases[i].path, cases[i].kind);
        tg_ctx_clear_error(ctx);
        size_t before = tg_ctx_bytes(ctx);
        ck_assert_ptr_null(tg_safetensors_read(ctx, cases[i].path));
        ck_assert_int_eq(tg_ctx_status(ctx), TG_ERR_IO);
        ck_assert_str_eq(tg_ctx_message(ctx), want);
        ck_assert_uint_eq(tg_ctx_bytes(ctx), before);
        snprintf(want, sizeof want, "tg_npy_read: '%s' is not a regular file (%s)",
                 cases[i].path, cases[i].kind);
        tg_ctx_clear_error(ctx);
        ck_assert_ptr_null(tg_npy_read(ctx, cases[i].path, TG_F32, NULL));
        ck_assert_int_eq(tg_ctx_status(ctx), TG_ERR_IO);
        ck_assert_str_eq(tg_ctx_message(ctx), want);
        tg_ctx_clear_error(ctx);
        ck_assert_int_eq(tg_params_load(ctx, cases[i].path, 0, NULL, true), TG_ERR_IO);
        ck_assert_ptr_nonnull(strstr(tg_ctx_message(ctx), "is not a regular file"));
    }
    /* a FIFO named like an .npy file, with no writer either */
    tg_ctx_clear_error(ctx);
    ck_assert_ptr_null(tg_npy_read(ctx, tpath("fifo.npy"), TG_F64, NULL));
    tu_assert_error(ctx, TG_ERR_IO, "is not a regular file (a FIFO)");
    tg_ctx_free(ctx);
    rm_tmpdir();
}
END_TEST

/* Write want to the write end of a pipe from a child process (so a large stream cannot fill
 * the pipe and block the test); returns the read end. */
static int pipe_from_child(const bytes *want, pid_t *pid)
{
    int p[2];
    ck_assert_int_eq(pipe(p), 0);
    *pid = fork();
    ck_assert_int_ge(*pid, 0);
    if (*pid == 0) {
        close(p[0]);
        size_t off = 0;
        while (off < want->n) {
            ssize_t k = write(p[1], want->p + off, want->n - off);
            if (k <= 0)
                _exit(1);
            off += (size_t)k;
        }
        _exit(0);
    }
    close(p[1]);
    return p[0];
}

/* A stream has no size: the descriptor readers take it whole first, up to a limit. */
START_TEST(test_read_fd_streams)
{
    bytes want = ref_attn_dot0();
    tg_ctx *ctx = tg_ctx_new();
    pid_t pid;
    int wst;
    /* a pipe, whole */
    int fd = pipe_from_child(&want, &pid);
    tg_safetensors *st = tg_safetensors_read_fd(ctx, fd, "<pipe>", 1 << 20);
    close(fd);
    waitpid(pid, &wst, 0);
    ck_assert_msg(st != NULL, "%s", tg_ctx_message(ctx));
    ck_assert(memcmp(tg_tensor_data(tg_safetensors_find(st, "attn.0")), f32_vals, 24) == 0);
    /* exactly at the limit is fine; one byte less is refused, naming the stream and the limit */
    fd = pipe_from_child(&want, &pid);
    ck_assert_ptr_nonnull(tg_safetensors_read_fd(ctx, fd, "<pipe>", want.n));
    close(fd);
    waitpid(pid, &wst, 0);
    fd = pipe_from_child(&want, &pid);
    size_t before = tg_ctx_bytes(ctx);
    ck_assert_ptr_null(tg_safetensors_read_fd(ctx, fd, "<pipe>", want.n - 1));
    close(fd);
    waitpid(pid, &wst, 0);
    char msg[200];
    snprintf(msg, sizeof msg,
             "tg_safetensors_read_fd: <pipe>: the stream holds more than the limit of %zu bytes",
             want.n - 1);
    ck_assert_str_eq(tg_ctx_message(ctx), msg);
    ck_assert_int_eq(tg_ctx_status(ctx), TG_ERR_IO);
    ck_assert_uint_eq(tg_ctx_bytes(ctx), before);
    /* /dev/zero through the descriptor API: bounded, not read until memory runs out */
    tg_ctx_clear_error(ctx);
    fd = open("/dev/zero", O_RDONLY);
    ck_assert_int_ge(fd, 0);
    ck_assert_ptr_null(tg_safetensors_read_fd(ctx, fd, NULL, 1 << 16));
    char zl[64];
    snprintf(zl, sizeof zl, "<fd %d>: the stream holds more", fd);
    tu_assert_error(ctx, TG_ERR_IO, zl);
    close(fd);
    /* an .npy through a pipe; a regular file's descriptor works too, from its position */
    tg_ctx_clear_error(ctx);
    bytes nb = {0};
    tg_tensor *x = tg_const(ctx, TG_F32, TG_DIMS(2, 3), "x");
    tg_tensor_set_data(x, f32_vals, TG_F32, 6);
    mem_sink ms = {{0}, 0, 0};
    tg_writer w = {mem_write, &ms};
    tg_io_item it = tg_io_item_data(x, NULL);
    ck_assert_int_eq(tg_npy_write_to(ctx, &w, &it), TG_OK);
    nb = ms.b;
    fd = pipe_from_child(&nb, &pid);
    tg_npy_kind kind = TG_NPY_INT;
    tg_tensor *r = tg_npy_read_fd(ctx, fd, "<stdin>", 4096, TG_F64, &kind);
    close(fd);
    waitpid(pid, &wst, 0);
    ck_assert_msg(r != NULL, "%s", tg_ctx_message(ctx));
    ck_assert_int_eq(kind, TG_NPY_FLOAT);
    tu_assert_data(r, (const double[]){0, 1, 2, 3, 4, 5}, 0);
    make_tmpdir();
    write_file(tpath("pre.st"), "junk", 4);
    FILE *f = fopen(tpath("pre.st"), "ab");
    fwrite(want.p, 1, want.n, f);
    fclose(f);
    fd = open(tpath("pre.st"), O_RDONLY);
    ck_assert_int_eq(lseek(fd, 4, SEEK_SET), 4);
    ck_assert_ptr_nonnull(tg_safetensors_read_fd(ctx, fd, "pre.st", 1 << 20));
    close(fd);
    /* errors: a bad descriptor, and a non-blocking pipe with nothing in it */
    ck_assert_ptr_null(tg_npy_read_fd(ctx, -1, NULL, 10, TG_F32, NULL));
    tu_assert_error(ctx, TG_ERR_ARG, "tg_npy_read_fd: file descriptor -1 is invalid");
    tg_ctx_clear_error(ctx);
    int p[2];
    ck_assert_int_eq(pipe(p), 0);
    fcntl(p[0], F_SETFL, O_NONBLOCK);
    ck_assert_ptr_null(tg_safetensors_read_fd(ctx, p[0], "<nb>", 100));
    tu_assert_error(ctx, TG_ERR_IO, "non-blocking");
    close(p[0]);
    close(p[1]);
    ck_assert_ptr_null(tg_safetensors_read_fd(NULL, 0, NULL, 1));
    free(nb.p);
    free(want.p);
    tg_ctx_free(ctx);
    rm_tmpdir();
}
END_TEST

/* ----- safetensors: writer -------------------------------------------------------------------- */
START_TEST(test_st_writer_refusals)
{
    make_tmpdir();
    tg_ctx *ctx = tg_ctx_new();
    const double d[4] = {1, 2, 3, 4};
    const int64_t s2[1] = {2}, s0[2] = {2, 0}, s7[7] = {1, 1, 1, 1, 1, 1, 1};
    struct {
        const char *what;
        tg_io_item it[2];
        int n;
        tg_status want;
    } cases[] = {
        {"empty name", {{"", TG_F64, 1, s2, d}}, 1, TG_ERR_ARG},
        {"NULL name", {{NULL, TG_F64, 1, s2, d}}, 1, TG_ERR_ARG},
        {"reserved name", {{"__metadata__", TG_F64, 1, s2, d}}, 1, TG_ERR_ARG},
        {"duplicate names", {{"a", TG_F64, 1, s2, d}, {"a", TG_F64, 1, s2, d + 2}}, 2,
         TG_ERR_DUPLICATE},
        {"NULL data", {{"a", TG_F64, 1, s2, NULL}}, 1, TG_ERR_ARG},
        {"bad dtype", {{"a", (tg_dtype)9, 1, s2, d}}, 1, TG_ERR_DTYPE},
        {"rank 7", {{"a", TG_F64, 7, s7, d}}, 1, TG_ERR_ARG},
        {"negative rank", {{"a", TG_F64, -1, s2, d}}, 1, TG_ERR_ARG},
        {"NULL shape", {{"a", TG_F64, 1, NULL, d}}, 1, TG_ERR_ARG},
        {"zero dim", {{"a", TG_F64, 2, s0, d}}, 1, TG_ERR_SHAPE},
        {"invalid UTF-8 name", {{"a\xff", TG_F64, 1, s2, d}}, 1, TG_ERR_ARG},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        tg_ctx_clear_error(ctx);
        tg_status s = tg_safetensors_write_items(ctx, tpath("w.st"), cases[i].n, cases[i].it, 0,
                                                 NULL, NULL, NULL);
        ck_assert_msg(s == cases[i].want, "%s: %s", cases[i].what, tg_status_str(s));
        assert_fails(ctx, cases[i].want, "tg_safetensors_write_items: ", cases[i].what);
        ck_assert_msg(!file_exists(tpath("w.st")), "%s: file created", cases[i].what);
    }
    tg_io_item ok = {"a", TG_F64, 1, s2, d};
    const char *k2[2] = {"k", "k"}, *v2[2] = {"1", "2"}, *kn[1] = {NULL}, *kbad[1] = {"\xc3"};
    struct {
        const char *what;
        const char *path;
        int64_t n, n_meta;
        const char *const *k, *const *v;
        tg_status want;
    } mc[] = {
        {"duplicate metadata key", tpath("w.st"), 1, 2, k2, v2, TG_ERR_DUPLICATE},
        {"NULL metadata key", tpath("w.st"), 1, 1, kn, v2, TG_ERR_ARG},
        {"metadata not UTF-8", tpath("w.st"), 1, 1, kbad, v2, TG_ERR_ARG},
        {"NULL metadata arrays", tpath("w.st"), 1, 1, NULL, NULL, TG_ERR_ARG},
        {"negative n", tpath("w.st"), -1, 0, NULL, NULL, TG_ERR_ARG},
        {"negative n_meta", tpath("w.st"), 1, -1, NULL, NULL, TG_ERR_ARG},
        {"NULL path", NULL, 1, 0, NULL, NULL, TG_ERR_ARG},
        {"empty path", "", 1, 0, NULL, NULL, TG_ERR_ARG},
    };
    for (size_t i = 0; i < sizeof mc / sizeof mc[0]; i++) {
        tg_ctx_clear_error(ctx);
        tg_status s = tg_safetensors_write_items(ctx, mc[i].path, mc[i].n, &ok, mc[i].n_meta,
                                                 mc[i].k, mc[i].v, NULL);
        ck_assert_msg(s == mc[i].want, "%s: %s", mc[i].what, tg_status_str(s));
        assert_fails(ctx, mc[i].want, "tg_safetensors_write_items: ", mc[i].what);
        ck_assert(!file_exists(tpath("w.st")));
    }
    /* the tensor wrappers */
    tg_tensor *t = tg_const(ctx, TG_F32, TG_DIMS(2), "t");
    const tg_tensor *ts[2] = {t, t};
    tg_ctx_clear_error(ctx);
    ck_assert_int_eq(tg_safetensors_write(ctx, tpath("w.st"), 2, ts, NULL, 0, NULL, NULL),
                     TG_ERR_DUPLICATE);
    const char *nm[2] = {"x", "y"};
    tg_ctx_clear_error(ctx);
    ck_assert_int_eq(tg_safetensors_write(ctx, tpath("w.st"), 2, ts, nm, 0, NULL, NULL), TG_OK);
    tg_ctx_clear_error(ctx);
    ts[1] = NULL;
    ck_assert_int_eq(tg_safetensors_write(ctx, tpath("w2.st"), 2, ts, nm, 0, NULL, NULL),
                     TG_ERR_ARG);
    tg_ctx_clear_error(ctx);
    ts[1] = t;
    ck_assert_int_eq(tg_safetensors_write_grads(ctx, tpath("w2.st"), 1, ts, NULL, 0, NULL, NULL),
                     TG_ERR_NOGRAD);
    assert_fails(ctx, TG_ERR_NOGRAD, "tg_safetensors_write_grads: ", "no grad");
    tg_ctx *other = tg_ctx_new();
    const tg_tensor *foreign[1] = {tg_const(other, TG_F32, TG_DIMS(1), "f")};
    tg_ctx_clear_error(ctx);
    ck_assert_int_eq(tg_safetensors_write(ctx, tpath("w2.st"), 1, foreign, NULL, 0, NULL, NULL),
                     TG_ERR_ARG);
    ck_assert(!file_exists(tpath("w2.st")));
    ck_assert_int_eq(tg_safetensors_write(NULL, tpath("w2.st"), 1, ts, NULL, 0, NULL, NULL),
                     TG_ERR_ARG);
    tg_ctx_clear_error(ctx);
    ck_assert_int_eq(tg_safetensors_write_to(ctx, NULL, 1, &ok, 0, NULL, NULL), TG_ERR_ARG);
    ck_assert_int_eq(count_tmp_files(), 0);
    tg_ctx_free(other);
    tg_ctx_free(ctx);
    rm_tmpdir();
}
END_TEST

/* Gradient buffers under given names, as the CLI saves them. */
START_TEST(test_st_write_grads)
{
    make_tmpdir();
    tg_ctx *ctx = tg_ctx_new();
    tg_tensor *w = tg_param(ctx, TG_F64, TG_DIMS(2, 3), "w");
    tu_set(w, (const double[]){1, -2, 3, -4, 5, -6});
    tg_tensor *y = tg_sum_all(ctx, tg_mul(ctx, w, w)); /* dy/dw = 2 w */
    ck_assert_msg(y != NULL, "%s", tg_ctx_message(ctx));
    tg_graph *g = tg_graph_new(ctx, &y, 1);
    ck_assert_msg(g != NULL, "%s", tg_ctx_message(ctx));
    ck_assert_int_eq(tg_graph_forward(g), TG_OK);
    ck_assert_int_eq(tg_graph_backward(g, y, NULL), TG_OK);
    const tg_tensor *ts[1] = {w};
    const char *nm[1] = {"encoder.w.grad"};
    ck_assert_int_eq(tg_safetensors_write_grads(ctx, tpath("g.st"), 1, ts, nm, 0, NULL, NULL),
                     TG_OK);
    tg_safetensors *st = tg_safetensors_read(ctx, tpath("g.st"));
    ck_assert_ptr_nonnull(st);
    tu_assert_data(tg_safetensors_find(st, "encoder.w.grad"),
                   (const double[]){2, -4, 6, -8, 10, -12}, 0);
    /* the same through an item, and as .npy */
    tg_io_item it = tg_io_item_grad(w, "gw");
    ck_assert_str_eq(it.name, "gw");
    ck_assert_ptr_eq(it.data, tg_tensor_grad(w));
    ck_assert_int_eq(tg_npy_write_data(ctx, tpath("gw.npy"), it.dtype, it.rank, it.shape, it.data),
                     TG_OK);
    tg_tensor *r = tg_npy_read(ctx, tpath("gw.npy"), TG_F64, NULL);
    ck_assert_ptr_nonnull(r);
    ck_assert_str_eq(tg_tensor_name(r), "gw");
    tu_assert_data(r, (const double[]){2, -4, 6, -8, 10, -12}, 0);
    tg_io_item none = tg_io_item_grad(NULL, "x");
    ck_assert_ptr_null(none.data);
    tg_ctx_free(ctx);
    rm_tmpdir();
}
END_TEST

/* Failure at every byte of the write: TG_ERR_IO, old file byte-identical, no temporary left. */
START_TEST(test_st_atomic_failure)
{
    make_tmpdir();
    tg_ctx *ctx = tg_ctx_new();
    tg_tensor *a = tg_const(ctx, TG_F32, TG_DIMS(3), "a");
    tg_fill(a, 1.5);
    const tg_tensor *ts[1] = {a};
    const char *path = tpath("model.safetensors");
    ck_assert_int_eq(tg_safetensors_write(ctx, path, 1, ts, NULL, 0, NULL, NULL), TG_OK);
    bytes old = read_file(path);

    tg_tensor *b = tg_const(ctx, TG_F64, TG_DIMS(4, 5), "b");
    tg_fill(b, -2.0);
    tg_io_item items[2] = {tg_io_item_data(a, NULL), tg_io_item_data(b, NULL)};
    const char *k = "step", *v = "2";
    /* the new file's size */
    mem_sink ms = {{0}, 0, 0};
    tg_writer w = {mem_write, &ms};
    ck_assert_int_eq(tg_safetensors_write_to(ctx, &w, 2, items, 1, &k, &v), TG_OK);
    size_t total = ms.b.n;
    ck_assert_uint_gt(total, old.n);
    for (uint64_t lim = 0; lim < total; lim += (lim < 16 ? 1 : 13)) {
        tg_ctx_clear_error(ctx);
        tg_write_opts o = {.inject_write_failure = true, .fail_after_bytes = lim};
        tg_status s = tg_safetensors_write_items(ctx, path, 2, items, 1, &k, &v, &o);
        ck_assert_msg(s == TG_ERR_IO, "limit %llu: %s", (unsigned long long)lim, tg_status_str(s));
        assert_fails(ctx, TG_ERR_IO, "tg_safetensors_write_items: ", "injected");
        ck_assert_ptr_nonnull(strstr(tg_ctx_message(ctx), strerror(ENOSPC)));
        ck_assert_ptr_nonnull(strstr(tg_ctx_message(ctx), path));
        bytes now = read_file(path);
        ck_assert_uint_eq(now.n, old.n);
        ck_assert(memcmp(now.p, old.p, old.n) == 0);
        free(now.p);
        ck_assert_int_eq(count_tmp_files(), 0);
    }
    /* exactly enough room succeeds and gives the stream bytes */
    tg_ctx_clear_error(ctx);
    tg_write_opts o = {.inject_write_failure = true, .fail_after_bytes = total, .no_fsync = true};
    ck_assert_int_eq(tg_safetensors_write_items(ctx, path, 2, items, 1, &k, &v, &o), TG_OK);
    bytes now = read_file(path);
    ck_assert_uint_eq(now.n, total);
    ck_assert(memcmp(now.p, ms.b.p, total) == 0);
    free(now.p);

    /* a missing directory and a directory in the way fail cleanly too */
    tg_ctx_clear_error(ctx);
    ck_assert_int_eq(tg_safetensors_write(ctx, tpath("nodir/x.st"), 1, ts, NULL, 0, NULL, NULL),
                     TG_ERR_IO);
    ck_assert_ptr_nonnull(strstr(tg_ctx_message(ctx), strerror(ENOENT)));
    ck_assert_int_eq(mkdir(tpath("adir"), 0700), 0);
    tg_ctx_clear_error(ctx);
    ck_assert_int_eq(tg_safetensors_write(ctx, tpath("adir"), 1, ts, NULL, 0, NULL, NULL),
                     TG_ERR_IO);
    assert_fails(ctx, TG_ERR_IO, "tg_safetensors_write: ", "a directory in the way");
    /* refused before anything is created (it used to fail only at the rename) */
    ck_assert_ptr_nonnull(strstr(tg_ctx_message(ctx),
                                 "adir' is not a regular file (a directory): refusing"));
    ck_assert_int_eq(count_tmp_files(), 0);

    /* a failing user writer */
    tg_ctx_clear_error(ctx);
    mem_sink bad = {{0}, 20, EPIPE};
    tg_writer bw = {mem_write, &bad};
    ck_assert_int_eq(tg_safetensors_write_to(ctx, &bw, 2, items, 1, &k, &v), TG_ERR_IO);
    assert_fails(ctx, TG_ERR_IO, "tg_safetensors_write_to: ", "writer");
    ck_assert_ptr_nonnull(strstr(tg_ctx_message(ctx), strerror(EPIPE)));
    free(bad.b.p);
    free(ms.b.p);
    free(old.p);
    tg_ctx_free(ctx);
    rm_tmpdir();
}
END_TEST

/* Out of memory at every allocation of a read and of a write. */
START_TEST(test_st_nomem)
{
    make_tmpdir();
    tg_ctx *ctx = tg_ctx_new();
    tg_tensor *a = tg_const(ctx, TG_F32, TG_DIMS(2, 3), "a");
    tg_tensor *b = tg_const(ctx, TG_F64, TG_DIMS(4), "b");
    tg_fill(a, 0.25);
    tg_fill(b, 4.0);
    const tg_tensor *ts[2] = {a, b};
    const char *k[2] = {"x", "y"}, *v[2] = {"1", "2"};
    ck_assert_int_eq(tg_safetensors_write(ctx, tpath("n.st"), 2, ts, NULL, 2, k, v), TG_OK);
    bytes f = read_file(tpath("n.st"));
    /* a file holding an F16 tensor too, to exercise the conversion buffer */
    bytes h = st_file("{\"h\":{\"dtype\":\"F16\",\"shape\":[2],\"data_offsets\":[0,4]}}", 4);
    write_file(tpath("h.st"), h.p, h.n);
    for (int mode = 0; mode < 4; mode++) {
        bool done = false;
        for (long budget = 1; !done && budget < 200; budget++) {
            tu_failing_alloc fa = {budget, 0, 0};
            tg_allocator al = tu_failing_allocator(&fa);
            tg_ctx *c = tg_ctx_new_with(&al);
            ck_assert_ptr_nonnull(c);
            bool ok;
            if (mode == 0) {
                ok = tg_safetensors_read_mem(c, f.p, f.n) != NULL;
            } else if (mode == 1) {
                ok = tg_safetensors_read(c, tpath("n.st")) != NULL;
            } else if (mode == 2) {
                ok = tg_safetensors_read(c, tpath("h.st")) != NULL;
            } else {
                tg_io_item it[2] = {tg_io_item_data(a, NULL), tg_io_item_data(b, NULL)};
                ok = tg_safetensors_write_items(c, tpath("out.st"), 2, it, 2, k, v, NULL) == TG_OK;
                ck_assert_int_eq(count_tmp_files(), 0);
            }
            if (ok) {
                done = true;
            } else {
                assert_fails(c, TG_ERR_NOMEM, "", "nomem");
                ck_assert_msg(tg_ctx_bytes(c) == 0, "mode %d budget %ld: %zu bytes held", mode,
                              budget, tg_ctx_bytes(c));
                if (mode == 3)
                    ck_assert(!file_exists(tpath("out.st")));
            }
            tg_ctx_free(c);
            ck_assert_int_eq(fa.n_alloc, fa.n_free);
        }
        ck_assert_msg(done, "mode %d never succeeded", mode);
    }
    free(f.p);
    free(h.p);
    tg_ctx_free(ctx);
    rm_tmpdir();
}
END_TEST

/* ----- .npy ----------------------------------------------------------------------------------- */
/* An .npy file: magic, version, header length (u16 for 1.x, u32 otherwise), the dict padded
 * with spaces and '\n' to a multiple of 64 (if align), then data_len filler bytes. */
static bytes npy_file(int major, const char *dict, bool align, size_t data_len)
{
    bytes b = {0};
    b_put(&b, "\x93NUMPY", 6);
    unsigned char ver[2] = {(unsigned char)major, 0};
    b_put(&b, ver, 2);
    size_t pre = major == 1 ? 10 : 12;
    size_t hl = strlen(dict) + 1;
    size_t pad = align ? (64 - (pre + hl) % 64) % 64 : 0;
    b_le(&b, hl + pad, major == 1 ? 2 : 4);
    b_puts(&b, dict);
    for (size_t i = 0; i < pad; i++)
        b_puts(&b, " ");
    b_puts(&b, "\n");
    b_fill(&b, data_len);
    return b;
}

START_TEST(test_npy_roundtrip)
{
    make_tmpdir();
    tg_ctx *ctx = tg_ctx_new();
    tg_ctx_seed(ctx, 3);
    const int64_t shapes[5][4] = {{0}, {7}, {3, 1}, {2, 3, 4}, {1, 2, 1, 3}};
    for (int i = 0; i < 10; i++) {
        int rank = i % 5;
        tg_dtype dt = i < 5 ? TG_F32 : TG_F64;
        tg_tensor *t = tg_param(ctx, dt, rank, shapes[rank], "p");
        tg_fill_normal(t, 1, 5);
        char name[32];
        snprintf(name, sizeof name, "arr%d.npy", i);
        ck_assert_int_eq(tg_npy_write(ctx, tpath(name), t), TG_OK);
        bytes f = read_file(tpath(name));
        ck_assert_uint_eq((f.n - (size_t)tg_tensor_numel(t) * tg_dtype_size(dt)) % 64, 0);
        free(f.p);
        tg_npy_kind kind = TG_NPY_INT;
        tg_tensor *r = tg_npy_read(ctx, tpath(name), dt, &kind);
        ck_assert_msg(r != NULL, "%s", tg_ctx_message(ctx));
        ck_assert_int_eq(kind, TG_NPY_FLOAT);
        ck_assert_int_eq(tg_tensor_kind(r), TG_KIND_INPUT);
        snprintf(name, sizeof name, "arr%d", i);
        ck_assert_str_eq(tg_tensor_name(r), name);
        ck_assert_int_eq(tg_tensor_rank(r), rank);
        for (int d = 0; d < rank; d++)
            ck_assert_int_eq(tg_tensor_dim(r, d), shapes[rank][d]);
        ck_assert(memcmp(tg_tensor_data(r), tg_tensor_data(t),
                         (size_t)tg_tensor_numel(t) * tg_dtype_size(dt)) == 0);
        /* and converted to the other dtype */
        snprintf(name, sizeof name, "arr%d.npy", i);
        tg_tensor *c = tg_npy_read(ctx, tpath(name), dt == TG_F32 ? TG_F64 : TG_F32, NULL);
        ck_assert_ptr_nonnull(c);
        ck_assert_double_le(tu_max_abs_diff(c, t), dt == TG_F32 ? 0 : 1e-5);
    }
    ck_assert_int_eq(count_tmp_files(), 0);
    tg_ctx_free(ctx);
    rm_tmpdir();
}
END_TEST

/* The bytes numpy.save writes (format 1.0, NumPy's growth padding, 64-byte alignment). */
START_TEST(test_npy_header_bytes)
{
    tg_ctx *ctx = tg_ctx_new();
    struct {
        tg_dtype dt;
        int rank;
        int64_t shape[3];
        size_t numel;
        const char *dict;
    } cases[] = {
        {TG_F32, 2, {2, 3}, 6, "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }"},
        {TG_F64, 0, {0}, 1, "{'descr': '<f8', 'fortran_order': False, 'shape': (), }"},
        {TG_F32, 1, {5}, 5, "{'descr': '<f4', 'fortran_order': False, 'shape': (5,), }"},
        {TG_F64, 3, {1000, 1, 7}, 7000,
         "{'descr': '<f8', 'fortran_order': False, 'shape': (1000, 1, 7), }"},
    };
    const double data[7000] = {0};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        mem_sink ms = {{0}, 0, 0};
        tg_writer w = {mem_write, &ms};
        tg_io_item it = {NULL, cases[i].dt, cases[i].rank, cases[i].shape, data};
        ck_assert_int_eq(tg_npy_write_to(ctx, &w, &it), TG_OK);
        /* expected: dict + (21 - digits of shape[0]) spaces (rank > 0), then spaces and '\n' */
        char hdr[256];
        size_t k = (size_t)snprintf(hdr, sizeof hdr, "%s", cases[i].dict);
        if (cases[i].rank > 0) {
            int digits = snprintf(NULL, 0, "%lld", (long long)cases[i].shape[0]);
            for (int s = digits; s < 21; s++)
                hdr[k++] = ' ';
        }
        size_t hlen = k + 1;
        size_t pad = 64 - (10 + hlen) % 64;
        ck_assert_uint_eq(ms.b.n - (10 + hlen + pad), tg_dtype_size(cases[i].dt) * cases[i].numel);
        ck_assert(memcmp(ms.b.p, "\x93NUMPY\x01\x00", 8) == 0);
        ck_assert_uint_eq(ms.b.p[8] | ms.b.p[9] << 8, hlen + pad);
        ck_assert(memcmp(ms.b.p + 10, hdr, k) == 0);
        for (size_t s = 0; s < pad; s++)
            ck_assert_uint_eq(ms.b.p[10 + k + s], ' ');
        ck_assert_uint_eq(ms.b.p[10 + k + pad], '\n');
        ck_assert_uint_eq((10 + hlen + pad) % 64, 0);
        free(ms.b.p);
    }
    /* numpy.save((2, 3) float32) is 128 + 24 bytes */
    mem_sink ms = {{0}, 0, 0};
    tg_writer w = {mem_write, &ms};
    tg_io_item it = {NULL, TG_F32, 2, (const int64_t[]){2, 3}, f32_vals};
    ck_assert_int_eq(tg_npy_write_to(ctx, &w, &it), TG_OK);
    ck_assert_uint_eq(ms.b.n, 128 + 24);
    ck_assert(memcmp(ms.b.p + 128, f32_vals, 24) == 0);
    free(ms.b.p);
    tg_ctx_free(ctx);
}
END_TEST

START_TEST(test_npy_read_variants)
{
    tg_ctx *ctx = tg_ctx_new();
    struct {
        const char *what;
        int major;
        const char *dict;
        bool align;
        const void *data;
        size_t n;
        tg_npy_kind kind;
        double expect[4];
        int count;
    } cases[] = {
        {"v1 <f4", 1, "{'descr': '<f4', 'fortran_order': False, 'shape': (2,), }", true,
         (const float[]){1.5f, -2.0f}, 8, TG_NPY_FLOAT, {1.5, -2.0}, 2},
        {"v2 <f8", 2, "{'descr': '<f8', 'fortran_order': False, 'shape': (1, 2), }", true,
         (const double[]){3.25, 1e300}, 16, TG_NPY_FLOAT, {3.25, 1e300}, 2},
        {"v3 |b1", 3, "{'descr': '|b1', 'fortran_order': False, 'shape': (2, 2), }", true,
         (const unsigned char[]){0, 1, 2, 0}, 4, TG_NPY_BOOL, {0, 1, 1, 0}, 4},
        {"<i4", 1, "{'descr': '<i4', 'fortran_order': False, 'shape': (3,), }", true,
         (const int32_t[]){-1, 7, 2147483647}, 12, TG_NPY_INT, {-1, 7, 2147483647.0}, 3},
        {"<i8", 1, "{'descr': '<i8', 'fortran_order': False, 'shape': (2,), }", true,
         (const int64_t[]){-9007199254740992LL, 42}, 16, TG_NPY_INT, {-9007199254740992.0, 42}, 2},
        {"|u1", 1, "{'descr': '|u1', 'fortran_order': False, 'shape': (2,), }", true,
         (const unsigned char[]){255, 3}, 2, TG_NPY_INT, {255, 3}, 2},
        {"<f2", 1, "{'descr': '<f2', 'fortran_order': False, 'shape': (2,), }", true,
         (const uint16_t[]){0x3c00, 0xc100}, 4, TG_NPY_FLOAT, {1.0, -2.5}, 2},
        {"rank 0", 1, "{'descr': '<f8', 'fortran_order': False, 'shape': (), }", true,
         (const double[]){-0.5}, 8, TG_NPY_FLOAT, {-0.5}, 1},
        {"double quotes, other key order, no trailing comma", 1,
         "{\"shape\": (2,), \"fortran_order\": False, \"descr\": \"<f4\"}", false,
         (const float[]){1, 2}, 8, TG_NPY_FLOAT, {1, 2}, 2},
        {"legacy long ints", 1, "{'descr': '<f4', 'fortran_order': False, 'shape': (1L, 2L), }",
         true, (const float[]){1, 2}, 8, TG_NPY_FLOAT, {1, 2}, 2},
        {"fortran order of a vector", 1, "{'descr': '<f4', 'fortran_order': True, 'shape': (2,), }",
         true, (const float[]){4, 5}, 8, TG_NPY_FLOAT, {4, 5}, 2},
        {"fortran order with one long dim", 1,
         "{'descr': '<f4', 'fortran_order': True, 'shape': (1, 2, 1), }", true,
         (const float[]){4, 5}, 8, TG_NPY_FLOAT, {4, 5}, 2},
        {"unaligned header", 1, "{'descr':'<f4','fortran_order':False,'shape':(1,)}", false,
         (const float[]){9}, 4, TG_NPY_FLOAT, {9}, 1},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        bytes b = npy_file(cases[i].major, cases[i].dict, cases[i].align, 0);
        b_put(&b, cases[i].data, cases[i].n);
        tg_npy_kind kind = (tg_npy_kind)99;
        tg_tensor *t = tg_npy_read_mem(ctx, b.p, b.n, TG_F64, &kind);
        ck_assert_msg(t != NULL, "%s: %s", cases[i].what, tg_ctx_message(ctx));
        ck_assert_msg(kind == cases[i].kind, "%s: kind %d", cases[i].what, (int)kind);
        ck_assert_int_eq(tg_tensor_numel(t), cases[i].count);
        tu_assert_data(t, cases[i].expect, 0);
        free(b.p);
    }
    tg_ctx_free(ctx);
}
END_TEST

typedef struct npy_case {
    const char *what;
    int major, minor;
    const char *dict;
    size_t data_len;
    tg_status want;
    const char *needle;
} npy_case;

#define NPD(descr, fo, shape)                                                                    \
    "{'descr': '" descr "', 'fortran_order': " fo ", 'shape': " shape ", }"

static const npy_case npy_cases[] = {
    {"version 4.0", 4, 0, NPD("<f4", "False", "(1,)"), 4, TG_ERR_UNSUPPORTED, "version 4.0"},
    {"version 1.1", 1, 1, NPD("<f4", "False", "(1,)"), 4, TG_ERR_UNSUPPORTED, "version 1.1"},
    {"fortran order", 1, 0, NPD("<f4", "True", "(2, 3)"), 24, TG_ERR_UNSUPPORTED, "fortran_order"},
    {"object dtype", 1, 0, NPD("|O", "False", "(2,)"), 16, TG_ERR_UNSUPPORTED, "object"},
    {"big-endian f4", 1, 0, NPD(">f4", "False", "(2,)"), 8, TG_ERR_UNSUPPORTED, "big-endian"},
    {"big-endian i8", 1, 0, NPD(">i8", "False", "(2,)"), 16, TG_ERR_UNSUPPORTED, "big-endian"},
    {"native order", 1, 0, NPD("=f4", "False", "(2,)"), 8, TG_ERR_UNSUPPORTED, "byte order"},
    {"complex", 1, 0, NPD("<c8", "False", "(2,)"), 16, TG_ERR_UNSUPPORTED, "'<c8'"},
    {"unicode", 1, 0, NPD("<U3", "False", "(2,)"), 24, TG_ERR_UNSUPPORTED, "'<U3'"},
    {"long descr", 1, 0, NPD("<f4abcdefghijklmnopqrstuvwxyz", "False", "(2,)"), 8,
     TG_ERR_UNSUPPORTED, NULL},
    {"structured", 1, 0, "{'descr': [('a', '<f4')], 'fortran_order': False, 'shape': (2,), }", 8,
     TG_ERR_UNSUPPORTED, "structured"},
    {"rank 7", 1, 0, NPD("<f4", "False", "(1, 1, 1, 1, 1, 1, 1)"), 4, TG_ERR_UNSUPPORTED,
     "rank 7"},
    {"zero dim", 1, 0, NPD("<f4", "False", "(0, 3)"), 0, TG_ERR_UNSUPPORTED, "zero-size dim"},
    {"shape overflow", 1, 0, NPD("<f4", "False", "(4294967296, 4294967296, 16)"), 4,
     TG_ERR_OVERFLOW, "overflows"},
    {"dim over uint64", 1, 0, NPD("<f4", "False", "(99999999999999999999999,)"), 4,
     TG_ERR_OVERFLOW, "overflows"},
    {"truncated data", 1, 0, NPD("<f8", "False", "(2, 2)"), 31, TG_ERR_TRUNCATED,
     "the data is 31 bytes but <f8 (2, 2) needs 32"},
    {"trailing data", 1, 0, NPD("<f4", "False", "(2,)"), 9, TG_ERR_TRAILING, "1 bytes after"},
    {"not a dict", 1, 0, "[1, 2]", 0, TG_ERR_FORMAT, "dict"},
    {"missing shape", 1, 0, "{'descr': '<f4', 'fortran_order': False}", 4, TG_ERR_FORMAT,
     "'shape'"},
    {"missing descr", 1, 0, "{'fortran_order': False, 'shape': (1,)}", 4, TG_ERR_FORMAT,
     "'descr'"},
    {"unknown key", 1, 0, "{'descr': '<f4', 'fortran_order': False, 'shape': (1,), 'x': 1}", 4,
     TG_ERR_FORMAT, "unknown header key 'x'"},
    {"duplicate key", 1, 0,
     "{'descr': '<f4', 'descr': '<f4', 'fortran_order': False, 'shape': (1,)}", 4,
     TG_ERR_FORMAT, "twice"},
    {"shape not a tuple", 1, 0, NPD("<f4", "False", "(3)"), 12, TG_ERR_FORMAT, "(n,)"},
    {"shape a list", 1, 0, NPD("<f4", "False", "[3]"), 12, TG_ERR_FORMAT, "tuple"},
    {"negative dim", 1, 0, NPD("<f4", "False", "(-1,)"), 4, TG_ERR_FORMAT, "non-negative"},
    {"float dim", 1, 0, NPD("<f4", "False", "(1.0,)"), 4, TG_ERR_FORMAT, NULL},
    {"fortran_order not a bool", 1, 0, NPD("<f4", "'no'", "(1,)"), 4, TG_ERR_FORMAT,
     "True or False"},
    {"garbage after dict", 1, 0, NPD("<f4", "False", "(1,)") " x", 4, TG_ERR_FORMAT,
     "after the dict"},
    {"unterminated string", 1, 0, "{'descr", 0, TG_ERR_FORMAT, NULL},
    {"escape in string", 1, 0, NPD("<f\\x34", "False", "(1,)"), 4, TG_ERR_FORMAT, NULL},
    {"missing colon", 1, 0, "{'descr' '<f4'}", 0, TG_ERR_FORMAT, "':'"},
};

static void check_npy_bytes(const bytes *b, tg_status want, const char *needle, const char *what)
{
    tg_ctx *ctx = tg_ctx_new();
    ck_assert_msg(tg_npy_read_mem(ctx, b->p, b->n, TG_F32, NULL) == NULL, "%s: accepted", what);
    assert_fails(ctx, want, "tg_npy_read_mem: <memory>: ", what);
    if (needle)
        ck_assert_msg(strstr(tg_ctx_message(ctx), needle), "%s: message '%s' lacks '%s'", what,
                      tg_ctx_message(ctx), needle);
    ck_assert_uint_eq(tg_ctx_bytes(ctx), 0);
    tg_ctx_free(ctx);
    ctx = tg_ctx_new();
    write_file(tpath("bad.npy"), b->p, b->n);
    ck_assert_msg(tg_npy_read(ctx, tpath("bad.npy"), TG_F64, NULL) == NULL, "%s: accepted", what);
    assert_fails(ctx, want, "tg_npy_read: ", what);
    ck_assert_ptr_nonnull(strstr(tg_ctx_message(ctx), "bad.npy"));
    ck_assert_uint_eq(tg_ctx_bytes(ctx), 0);
    tg_ctx_free(ctx);
}

START_TEST(test_npy_malformed)
{
    make_tmpdir();
    for (size_t i = 0; i < sizeof npy_cases / sizeof npy_cases[0]; i++) {
        const npy_case *c = &npy_cases[i];
        bytes b = npy_file(c->major, c->dict, true, c->data_len);
        b.p[7] = (unsigned char)c->minor;
        check_npy_bytes(&b, c->want, c->needle, c->what);
        free(b.p);
    }
    struct {
        const char *what;
        const char *raw;
        size_t n;
        tg_status want;
    } raw[] = {
        {"empty file", "", 0, TG_ERR_TRUNCATED},
        {"bad magic", "\x93NUMPZ\x01\x00\x10\x00{}", 12, TG_ERR_FORMAT},
        {"text file", "hello world, not numpy", 22, TG_ERR_FORMAT},
        {"magic prefix only", "\x93NUM", 4, TG_ERR_TRUNCATED},
        {"no header length", "\x93NUMPY\x01\x00\x10", 9, TG_ERR_TRUNCATED},
        {"v2 header length cut", "\x93NUMPY\x02\x00\x10\x00", 10, TG_ERR_TRUNCATED},
        {"header past the end", "\x93NUMPY\x01\x00\x40\x00{}", 12, TG_ERR_TRUNCATED},
        {"header too long", "\x93NUMPY\x02\x00\x00\x00\x10\x00{}", 14, TG_ERR_HEADER_SIZE},
    };
    for (size_t i = 0; i < sizeof raw / sizeof raw[0]; i++) {
        bytes b = {0};
        b_put(&b, raw[i].raw, raw[i].n);
        check_npy_bytes(&b, raw[i].want, NULL, raw[i].what);
        free(b.p);
    }
    /* every prefix of a valid file fails cleanly */
    bytes ok = npy_file(1, NPD("<f4", "False", "(2, 3)"), true, 24);
    for (size_t n = 0; n < ok.n; n++) {
        tg_ctx *ctx = tg_ctx_new();
        ck_assert_ptr_null(tg_npy_read_mem(ctx, ok.p, n, TG_F32, NULL));
        ck_assert(tg_ctx_status(ctx) != TG_OK && tg_ctx_message(ctx)[0]);
        ck_assert_uint_eq(tg_ctx_bytes(ctx), 0);
        tg_ctx_free(ctx);
    }
    /* bad requested dtype, NULL arguments, missing file */
    tg_ctx *ctx = tg_ctx_new();
    ck_assert_ptr_null(tg_npy_read_mem(ctx, ok.p, ok.n, (tg_dtype)5, NULL));
    assert_fails(ctx, TG_ERR_DTYPE, "tg_npy_read_mem: ", "bad want");
    tg_ctx_clear_error(ctx);
    ck_assert_ptr_null(tg_npy_read(ctx, NULL, TG_F32, NULL));
    assert_fails(ctx, TG_ERR_ARG, "tg_npy_read: ", "NULL path");
    tg_ctx_clear_error(ctx);
    ck_assert_ptr_null(tg_npy_read(ctx, tpath("nope.npy"), TG_F32, NULL));
    assert_fails(ctx, TG_ERR_IO, "tg_npy_read: ", "missing");
    ck_assert_ptr_null(tg_npy_read(NULL, "x", TG_F32, NULL));
    tg_ctx_free(ctx);
    free(ok.p);
    rm_tmpdir();
}
END_TEST

START_TEST(test_npy_writer)
{
    make_tmpdir();
    tg_ctx *ctx = tg_ctx_new();
    const double d[6] = {1, 2, 3, 4, 5, 6};
    const int64_t s23[2] = {2, 3}, s0[1] = {0};
    ck_assert_int_eq(tg_npy_write_data(ctx, tpath("a.npy"), TG_F64, 2, s23, d), TG_OK);
    bytes old = read_file(tpath("a.npy"));
    /* refusals */
    struct {
        const char *what;
        const char *path;
        tg_dtype dt;
        int rank;
        const int64_t *shape;
        const void *data;
        tg_status want;
    } cases[] = {
        {"NULL data", tpath("b.npy"), TG_F64, 2, s23, NULL, TG_ERR_ARG},
        {"rank 7", tpath("b.npy"), TG_F64, 7, s23, d, TG_ERR_ARG},
        {"NULL shape", tpath("b.npy"), TG_F64, 2, NULL, d, TG_ERR_ARG},
        {"zero dim", tpath("b.npy"), TG_F64, 1, s0, d, TG_ERR_SHAPE},
        {"bad dtype", tpath("b.npy"), (tg_dtype)3, 2, s23, d, TG_ERR_DTYPE},
        {"NULL path", NULL, TG_F64, 2, s23, d, TG_ERR_ARG},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        tg_ctx_clear_error(ctx);
        tg_status s = tg_npy_write_data(ctx, cases[i].path, cases[i].dt, cases[i].rank,
                                        cases[i].shape, cases[i].data);
        ck_assert_msg(s == cases[i].want, "%s: %s", cases[i].what, tg_status_str(s));
        assert_fails(ctx, cases[i].want, "tg_npy_write_data: ", cases[i].what);
        ck_assert(!file_exists(tpath("b.npy")));
    }
    tg_ctx_clear_error(ctx);
    ck_assert_int_eq(tg_npy_write(ctx, tpath("b.npy"), NULL), TG_ERR_ARG);
    ck_assert_int_eq(tg_npy_write(NULL, tpath("b.npy"), NULL), TG_ERR_ARG);
    tg_ctx_clear_error(ctx);
    ck_assert_int_eq(tg_npy_write_to(ctx, NULL, NULL), TG_ERR_ARG);

    /* injected failure at many points: old file intact, no temporary left */
    const float big[40] = {0};
    tg_io_item it = {NULL, TG_F32, 2, (const int64_t[]){5, 8}, big};
    for (uint64_t lim = 0; lim < 128 + 160; lim += 7) {
        tg_ctx_clear_error(ctx);
        tg_write_opts o = {.inject_write_failure = true, .fail_after_bytes = lim};
        ck_assert_int_eq(tg_npy_write_item(ctx, tpath("a.npy"), &it, &o), TG_ERR_IO);
        assert_fails(ctx, TG_ERR_IO, "tg_npy_write_item: ", "injected");
        bytes now = read_file(tpath("a.npy"));
        ck_assert_uint_eq(now.n, old.n);
        ck_assert(memcmp(now.p, old.p, old.n) == 0);
        free(now.p);
        ck_assert_int_eq(count_tmp_files(), 0);
    }
    tg_ctx_clear_error(ctx);
    ck_assert_int_eq(tg_npy_write_item(ctx, tpath("a.npy"), &it, NULL), TG_OK);
    tg_tensor *r = tg_npy_read(ctx, tpath("a.npy"), TG_F32, NULL);
    ck_assert_int_eq(tg_tensor_dim(r, 0), 5);
    ck_assert_int_eq(tg_tensor_dim(r, 1), 8);
    free(old.p);
    tg_ctx_free(ctx);
    rm_tmpdir();
}
END_TEST

START_TEST(test_npy_nomem)
{
    make_tmpdir();
    bytes b = npy_file(1, NPD("<f2", "False", "(3, 2)"), true, 12);
    write_file(tpath("h.npy"), b.p, b.n);
    for (int mode = 0; mode < 3; mode++) {
        bool done = false;
        for (long budget = 1; !done && budget < 50; budget++) {
            tu_failing_alloc fa = {budget, 0, 0};
            tg_allocator al = tu_failing_allocator(&fa);
            tg_ctx *c = tg_ctx_new_with(&al);
            bool ok;
            if (mode == 0)
                ok = tg_npy_read_mem(c, b.p, b.n, TG_F32, NULL) != NULL;
            else if (mode == 1)
                ok = tg_npy_read(c, tpath("h.npy"), TG_F64, NULL) != NULL;
            else
                ok = tg_npy_write_data(c, tpath("o.npy"), TG_F32, 1, (const int64_t[]){6},
                                       f32_vals) == TG_OK;
            if (ok) {
                done = true;
            } else {
                assert_fails(c, TG_ERR_NOMEM, "", "nomem");
                ck_assert_uint_eq(tg_ctx_bytes(c), 0);
                ck_assert_int_eq(count_tmp_files(), 0);
            }
            tg_ctx_free(c);
            ck_assert_int_eq(fa.n_alloc, fa.n_free);
        }
        ck_assert_msg(done, "mode %d never succeeded", mode);
    }
    free(b.p);
    rm_tmpdir();
}
END_TEST

/* ----- the JSON parser ------------------------------------------------------------------------ */
static tg_status json_check(const char *text, size_t n)
{
    tg_ctx *ctx = tg_ctx_new();
    tg__jp jp;
    ck_assert_int_eq(tg__jp_init(&jp, ctx, "json", "<t>", text, n), TG_OK);
    bool ok = tg__jp_skip(&jp) && tg__jp_end(&jp);
    tg_status s = ok ? TG_OK : jp.err;
    if (!ok)
        ck_assert_msg(tg_ctx_message(ctx)[0], "no message for %s", text);
    tg__jp_free(&jp);
    ck_assert_uint_eq(tg_ctx_bytes(ctx), 0);
    tg_ctx_free(ctx);
    return s;
}

START_TEST(test_json_parser)
{
    const char *good[] = {
        "{}", "[]", "0", "-0", "1.5e-3", "-12E+4", "\"\"", "true", "false", "null",
        (" { \"a\" : [ 1 , 2.0 , { } , [ ] , null , true ,"
         " \"x\\\"\\\\\\/\\b\\f\\n\\r\\t\\u00Ff\" ] } "),
        "\"\\ud834\\udd1e\"", "\"\xe2\x82\xac\xf0\x9d\x84\x9e\"", "123456789012345678901234567890",
    };
    for (size_t i = 0; i < sizeof good / sizeof good[0]; i++)
        ck_assert_msg(json_check(good[i], strlen(good[i])) == TG_OK, "rejected %s", good[i]);
    const char *bad[] = {
        "", " ", "{", "}", "[1,]", "[,1]", "[1 2]", "{\"a\"}", "{\"a\":1,}", "{1:2}", "01", "1.",
        ".5", "-", "+1", "1e", "0x10", "tru", "nul", "True", "NaN", "Infinity", "\"abc",
        "\"\\a\"", "\"\\u12G4\"", "\"\\udc00\"", "\"\\ud800x\"", "\"\\ud800\\u0041\"", "\"\t\"",
        "\"\xc3\"", "\"\xf5\x80\x80\x80\"", "[] []", "{} x", "[1]]", "'a'",
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        ck_assert_msg(json_check(bad[i], strlen(bad[i])) == TG_ERR_JSON, "accepted %s", bad[i]);
    /* embedded NUL is not whitespace */
    ck_assert_int_eq(json_check("{}\0", 3), TG_ERR_JSON);
    /* depth limit: 64 nested arrays parse, 65 do not */
    char deep[200];
    for (int depth = 63; depth <= 66; depth++) {
        int k = 0;
        for (int i = 0; i < depth; i++)
            deep[k++] = '[';
        for (int i = 0; i < depth; i++)
            deep[k++] = ']';
        ck_assert_int_eq(json_check(deep, (size_t)k),
                         depth <= TG__JSON_MAX_DEPTH ? TG_OK : TG_ERR_JSON);
    }
    /* integers: value, sign, and the 64-bit overflow flag */
    tg_ctx *ctx = tg_ctx_new();
    tg__jp jp;
    const char *nums = "[18446744073709551615, 18446744073709551616, -7, 2.5, -0]";
    ck_assert_int_eq(tg__jp_init(&jp, ctx, "json", "<t>", nums, strlen(nums)), TG_OK);
    ck_assert(tg__jp_arr_begin(&jp));
    tg__jnum v[5];
    for (int i = 0; i < 5; i++) {
        ck_assert(tg__jp_arr_next(&jp));
        ck_assert(tg__jp_number(&jp, &v[i]));
    }
    ck_assert(!tg__jp_arr_next(&jp));
    ck_assert(tg__jp_end(&jp));
    ck_assert(v[0].is_int && !v[0].big && v[0].mag == UINT64_MAX);
    ck_assert(v[1].is_int && v[1].big);
    ck_assert(v[2].is_int && v[2].neg && v[2].mag == 7);
    ck_assert(!v[3].is_int);
    ck_assert(v[4].is_int && !v[4].neg && v[4].mag == 0);
    tg__jp_free(&jp);
    tg_ctx_free(ctx);
}
END_TEST

/* ----- hostile sizes: fail before allocating ------------------------------------------------ */
/* An allocator that tracks the bytes held and their peak. */
typedef struct peak_alloc {
    size_t cur, peak;
} peak_alloc;

static void *peak_malloc(void *user, size_t n)
{
    peak_alloc *a = user;
    unsigned char *p = malloc(n + 16);
    if (!p)
        return NULL;
    memcpy(p, &n, sizeof n);
    a->cur += n;
    if (a->cur > a->peak)
        a->peak = a->cur;
    return p + 16;
}

static void peak_free(void *user, void *q)
{
    if (!q)
        return;
    peak_alloc *a = user;
    unsigned char *p = (unsigned char *)q - 16;
    size_t n;
    memcpy(&n, p, sizeof n);
    a->cur -= n;
    free(p);
}

/* Parse from memory with a fresh context; return the peak bytes it held. */
static size_t st_peak(const bytes *b, tg_status want, const char *needle)
{
    peak_alloc pa = {0, 0};
    tg_allocator al = {peak_malloc, peak_free, &pa};
    tg_ctx *c = tg_ctx_new_with(&al);
    size_t base = pa.peak;
    tg_safetensors *st = tg_safetensors_read_mem(c, b->p, b->n);
    if (want == TG_OK) {
        ck_assert_msg(st != NULL, "%s", tg_ctx_message(c));
    } else {
        ck_assert_ptr_null(st);
        tu_assert_error(c, want, needle);
        ck_assert_uint_eq(tg_ctx_bytes(c), 0);
    }
    tg_ctx_free(c);
    return pa.peak - base;
}

/* A header of many tensors (or metadata entries) with no data used to be parsed whole,
 * allocating ~140 bytes per entry (doubling), before the data section's size was compared;
 * now more than 1024 tensors with fewer data bytes than tensors fail as soon as that is
 * seen, and metadata is capped at TG_SAFETENSORS_MAX_META entries. */
START_TEST(test_st_hostile_counts)
{
    int n = tu_under_valgrind() ? 5000 : 50000;
    /* built with one allocation (b_put reallocates per call: quadratic under sanitizers) */
    size_t cap = (size_t)n * 80 + 16, len = 0;
    char *h = malloc(cap);
    ck_assert_ptr_nonnull(h);
    len += (size_t)snprintf(h, cap, "{");
    for (int i = 0; i < n; i++)
        len += (size_t)snprintf(h + len, cap - len,
                                "%s\"t%d\":{\"dtype\":\"U8\",\"shape\":[],\"data_offsets\":[%d,%d]}",
                                i ? "," : "", i, i, i + 1);
    snprintf(h + len, cap - len, "}");
    ck_assert_uint_lt(len + 2, cap);
    bytes f = st_file(h, 0);
    size_t peak = st_peak(&f, TG_ERR_TRUNCATED,
                          "the header lists more than 1024 tensors but the data section holds 0 "
                          "bytes (every tensor needs at least one)");
    /* the header's copy for the decoded strings plus 1024 entries, not n entries */
    ck_assert_msg(peak < f.n + 400000, "peak %zu for a %zu-byte file", peak, f.n);
    free(f.p);
    /* the same header with its data is read (the check costs nothing to valid files) */
    f = st_file(h, (size_t)n);
    st_peak(&f, TG_OK, NULL);
    free(f.p);
    /* fewer than 1024 tensors keep the documented order: the entries' own errors first */
    f = st_file("{\"a\":{\"dtype\":\"F8_E4M3\",\"shape\":[],\"data_offsets\":[0,1]}}", 0);
    st_peak(&f, TG_ERR_UNSUPPORTED, "dtype F8_E4M3 is not supported");
    free(f.p);
    free(h);

    /* metadata: TG_SAFETENSORS_MAX_META entries are read, one more is refused */
    for (unsigned extra = 0; extra < 2; extra++) {
        cap = (size_t)TG_SAFETENSORS_MAX_META * 16 + 64;
        len = 0;
        char *m = malloc(cap);
        ck_assert_ptr_nonnull(m);
        len += (size_t)snprintf(m, cap, "{\"__metadata__\":{");
        for (unsigned i = 0; i < TG_SAFETENSORS_MAX_META + extra; i++)
            len += (size_t)snprintf(m + len, cap - len, "%s\"%x\":\"\"", i ? "," : "", i);
        snprintf(m + len, cap - len, "}}");
        ck_assert_uint_lt(len + 3, cap);
        f = st_file(m, 0);
        if (extra)
            st_peak(&f, TG_ERR_UNSUPPORTED, "__metadata__ has more than 65536 entries");
        else
            st_peak(&f, TG_OK, NULL);
        free(f.p);
        free(m);
    }
    /* and the writer will not produce such a file */
    tg_ctx *ctx = tg_ctx_new();
    const char *k[1] = {"k"};
    mem_sink ms = {{0}, 0, 0};
    tg_writer w = {mem_write, &ms};
    ck_assert_int_eq(tg_safetensors_write_to(ctx, &w, 0, NULL, TG_SAFETENSORS_MAX_META + 1, k, k),
                     TG_ERR_ARG);
    tu_assert_error(ctx, TG_ERR_ARG, "n_meta 65537 is more than readers accept (65536)");
    tg_ctx_free(ctx);
}
END_TEST

/* Shapes and offsets claiming terabytes fail on the arithmetic, before any tensor or data
 * buffer is allocated (a small, constant peak whatever the claim). */
START_TEST(test_hostile_sizes_allocate_nothing)
{
    struct {
        const char *hdr;
        tg_status want;
        const char *needle;
    } sts[] = {
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1073741824,1048576],"
         "\"data_offsets\":[0,4503599627370496]}}",
         TG_ERR_TRUNCATED, "the data section holds 8 bytes but the tensors need 4503599627370496"},
        {"{\"a\":{\"dtype\":\"F64\",\"shape\":[4294967296,4294967296],\"data_offsets\":[0,8]}}",
         TG_ERR_OVERFLOW, "element count overflows"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[99999999999999999999],\"data_offsets\":[0,8]}}",
         TG_ERR_OVERFLOW, "element count overflows"},
        {"{\"a\":{\"dtype\":\"U8\",\"shape\":[8],\"data_offsets\":[18446744073709551607,"
         "18446744073709551615]}}",
         TG_ERR_OUT_OF_BOUNDS, "invalid data_offsets"},
        {"{\"a\":{\"dtype\":\"U8\",\"shape\":[8],\"data_offsets\":[0,99999999999999999999]}}",
         TG_ERR_OUT_OF_BOUNDS, "invalid data_offsets"},
    };
    for (size_t i = 0; i < sizeof sts / sizeof sts[0]; i++) {
        bytes f = st_file(sts[i].hdr, 8);
        size_t peak = st_peak(&f, sts[i].want, sts[i].needle);
        ck_assert_msg(peak < 16384, "case %zu: peak %zu", i, peak);
        free(f.p);
    }
    struct {
        const char *dict;
        tg_status want;
        const char *needle;
    } npys[] = {
        {"{'descr': '<f4', 'fortran_order': False, 'shape': (1073741824, 1048576), }",
         TG_ERR_TRUNCATED, "needs 4503599627370496"},
        {"{'descr': '<f8', 'fortran_order': False, 'shape': (4294967296, 4294967296), }",
         TG_ERR_OVERFLOW, "element count overflows"},
        {"{'descr': '<f8', 'fortran_order': False, 'shape': (99999999999999999999999,), }",
         TG_ERR_OVERFLOW, "overflows 64 bits"},
        {"{'descr': '<f8', 'fortran_order': False, 'shape': (2, 2, 2, 2, 2, 2, 2, 2), }",
         TG_ERR_UNSUPPORTED, "rank 8 exceeds"},
    };
    for (size_t i = 0; i < sizeof npys / sizeof npys[0]; i++) {
        bytes f = npy_file(1, npys[i].dict, true, 16);
        peak_alloc pa = {0, 0};
        tg_allocator al = {peak_malloc, peak_free, &pa};
        tg_ctx *c = tg_ctx_new_with(&al);
        size_t base = pa.peak;
        ck_assert_ptr_null(tg_npy_read_mem(c, f.p, f.n, TG_F32, NULL));
        tu_assert_error(c, npys[i].want, npys[i].needle);
        ck_assert_msg(pa.peak - base < 16384, "npy case %zu: peak %zu", i, pa.peak - base);
        tg_ctx_free(c);
        free(f.p);
    }
}
END_TEST

/* The pull parser is safe under any sequence of calls (the fuzz harnesses drive it directly):
 * a next without its begin, an object's next inside an array, calls after an error. */
START_TEST(test_json_misuse)
{
    tg_ctx *ctx = tg_ctx_new();
    tg__jp jp;
    tg__jstr k;
    const char *t = "[1, {\"a\": 2}]";
    ck_assert_int_eq(tg__jp_init(&jp, ctx, "json", "<t>", t, strlen(t)), TG_OK);
    ck_assert(!tg__jp_obj_next(&jp, &k)); /* no container open */
    ck_assert_int_eq(jp.err, TG_ERR_JSON);
    tu_assert_error(ctx, TG_ERR_JSON, "json: <t>: invalid JSON header at byte 0: not inside an "
                                      "object");
    ck_assert(!tg__jp_arr_begin(&jp)); /* sticky */
    tg__jp_free(&jp);
    tg_ctx_clear_error(ctx);
    ck_assert_int_eq(tg__jp_init(&jp, ctx, NULL, NULL, t, strlen(t)), TG_OK);
    ck_assert(tg__jp_arr_begin(&jp));
    ck_assert(!tg__jp_obj_next(&jp, &k)); /* inside an array */
    tu_assert_error(ctx, TG_ERR_JSON, "json: <json>: invalid JSON header at byte 1: not inside "
                                      "an object");
    tg__jp_free(&jp);
    tg_ctx_clear_error(ctx);
    ck_assert_int_eq(tg__jp_init(&jp, ctx, "json", "<t>", t, strlen(t)), TG_OK);
    ck_assert(tg__jp_arr_begin(&jp));
    ck_assert(tg__jp_arr_next(&jp));
    tg__jnum num;
    ck_assert(tg__jp_number(&jp, &num));
    ck_assert(tg__jp_arr_next(&jp));
    ck_assert(tg__jp_obj_begin(&jp));
    ck_assert(!tg__jp_arr_next(&jp)); /* inside an object */
    tu_assert_error(ctx, TG_ERR_JSON, "not inside an array");
    ck_assert(!tg__jp_skip(&jp) && !tg__jp_end(&jp) && !tg__jp_string(&jp, &k));
    ck_assert_int_eq(tg__jp_peek(&jp), TG__J_ERROR);
    tg__jp_free(&jp);
    tg_ctx_clear_error(ctx);
    /* closing more than was opened */
    ck_assert_int_eq(tg__jp_init(&jp, ctx, "json", "<t>", "[]]", 3), TG_OK);
    ck_assert(tg__jp_arr_begin(&jp));
    ck_assert(!tg__jp_arr_next(&jp));
    ck_assert(!jp.err);
    ck_assert(!tg__jp_arr_next(&jp));
    ck_assert_int_eq(jp.err, TG_ERR_JSON);
    tg__jp_free(&jp);
    tg_ctx_clear_error(ctx);
    /* a NULL text */
    ck_assert_int_eq(tg__jp_init(&jp, ctx, "json", "<t>", NULL, 5), TG_ERR_ARG);
    ck_assert(!tg__jp_skip(&jp));
    tg__jp_free(&jp);
    tg_ctx_clear_error(ctx);
    ck_assert_int_eq(tg__jp_init(&jp, ctx, "json", "<t>", NULL, 0), TG_OK);
    ck_assert(!tg__jp_skip(&jp));
    tu_assert_error(ctx, TG_ERR_JSON, "unexpected end of header");
    tg__jp_free(&jp);
    ck_assert_uint_eq(tg_ctx_bytes(ctx), 0);
    tg_ctx_free(ctx);
}
END_TEST

static Suite *io_suite(void)
{
    Suite *s = suite_create("io");
    TCase *tc = tcase_create("safetensors");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_st_reference_bytes);
    tcase_add_test(tc, test_st_roundtrip);
    tcase_add_test(tc, test_st_overwrite_keeps_mode);
    tcase_add_test(tc, test_st_json_strings);
    tcase_add_test(tc, test_st_dtype_conversions);
    tcase_add_test(tc, test_st_malformed);
    tcase_add_test(tc, test_st_read_errors);
    tcase_add_test(tc, test_st_not_safetensors);
    tcase_add_test(tc, test_io_errors_do_not_stick);
    tcase_add_test(tc, test_f64_beyond_f32);
    tcase_add_test(tc, test_read_refuses_non_regular);
    tcase_add_test(tc, test_read_fd_streams);
    tcase_add_test(tc, test_st_writer_refusals);
    tcase_add_test(tc, test_st_write_grads);
    tcase_add_test(tc, test_st_atomic_failure);
    tcase_add_test(tc, test_st_nomem);
    suite_add_tcase(s, tc);
    tc = tcase_create("npy");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_npy_roundtrip);
    tcase_add_test(tc, test_npy_header_bytes);
    tcase_add_test(tc, test_npy_read_variants);
    tcase_add_test(tc, test_npy_malformed);
    tcase_add_test(tc, test_npy_writer);
    tcase_add_test(tc, test_npy_nomem);
    suite_add_tcase(s, tc);
    tc = tcase_create("json");
    tcase_add_test(tc, test_json_parser);
    tcase_add_test(tc, test_json_misuse);
    suite_add_tcase(s, tc);
    tc = tcase_create("hostile");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_st_hostile_counts);
    tcase_add_test(tc, test_hostile_sizes_allocate_nothing);
    suite_add_tcase(s, tc);
    return s;
}

int main(void) { return tu_run(io_suite()); }
