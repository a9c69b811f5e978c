/*
 * fuzz_npy.c - libFuzzer harness for the .npy reader and writer.
 *
 * Per input, on a fresh context with a capped allocator (fuzz_util.h):
 * 1. tg_npy_read_mem() for each wanted dtype (f32, f64, i32), its peak memory bounded by the
 *    input's size (FZ_AMP). A failure has a documented status, one clean line and leaves the
 *    context as it was; a success gives a tensor of the wanted dtype whose values fit the
 *    file's element kind (bools are 0/1, integers are integers).
 * 2. The wanted float dtype does not decide whether a file is valid: both reads fail with the
 *    same status or both succeed, with the same kind and shape, and the f32 values are the f64
 *    values rounded to float. The i32 read fails with the same status when they fail; when they
 *    succeed, it succeeds exactly when every f64 value is an integer in the i32 range (then
 *    with those values), and fails with TG_ERR_UNSUPPORTED otherwise.
 * 3. Round trip of each result through tg_npy_write_to() and back: same shape and bytes, kind
 *    float (int for i32).
 * 4. The same bytes through the path-based tg_npy_read() (a memfd on Linux): same verdict and
 *    array.
 * 5. An invalid wanted dtype is TG_ERR_DTYPE.
 * 6. Out-of-memory pass: the f32 read again with one of its allocations failing: NULL,
 *    TG_ERR_NOMEM, nothing kept.
 * Every context must give back every byte on tg_ctx_free.
 */
#include "fuzz_util.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static const char FN[] = "tg_npy_read_mem";

static const tg_status read_errors[] = {TG_ERR_FORMAT,    TG_ERR_UNSUPPORTED, TG_ERR_HEADER_SIZE,
                                        TG_ERR_TRUNCATED, TG_ERR_TRAILING,    TG_ERR_OVERFLOW,
                                        TG_ERR_NOMEM,     TG_OK};

static double elem(const tg_tensor *t, int64_t i)
{
    const void *d = tg_tensor_data((tg_tensor *)t);
    switch (tg_tensor_dtype(t)) {
    case TG_F32: return (double)((const float *)d)[i];
    case TG_I32: return (double)((const int32_t *)d)[i];
    default: return ((const double *)d)[i];
    }
}

static void check_tensor(const tg_ctx *ctx, const tg_tensor *t, tg_dtype want, tg_npy_kind kind)
{
    if (tg_tensor_dtype(t) != want)
        fz_die(ctx, "asked for %s, got %s", tg_dtype_str(want), tg_dtype_str(tg_tensor_dtype(t)));
    if (kind != TG_NPY_FLOAT && kind != TG_NPY_BOOL && kind != TG_NPY_INT)
        fz_die(ctx, "kind_out is %d", (int)kind);
    if (!tg_tensor_name(t))
        fz_die(ctx, "the tensor has no name");
    int rank = tg_tensor_rank(t);
    const int64_t *shape = tg_tensor_shape(t);
    if (rank < 0 || rank > TG_MAX_RANK)
        fz_die(ctx, "rank %d", rank);
    int64_t numel = 1;
    for (int d = 0; d < rank; d++) {
        if (shape[d] < 1)
            fz_die(ctx, "dim %d is %lld", d, (long long)shape[d]);
        numel *= shape[d];
    }
    if (tg_tensor_numel(t) != numel || !tg_tensor_data((tg_tensor *)t))
        fz_die(ctx, "numel %lld, shape gives %lld (or no data)", (long long)tg_tensor_numel(t),
               (long long)numel);
    for (int64_t i = 0; i < numel; i++) {
        double v = elem(t, i);
        if (kind == TG_NPY_BOOL && v != 0 && v != 1)
            fz_die(ctx, "bool element %lld is %g", (long long)i, v);
        if (kind == TG_NPY_INT && v != floor(v))
            fz_die(ctx, "integer element %lld is %g", (long long)i, v);
    }
}

static void round_trip(tg_ctx *ctx, const tg_tensor *t)
{
    fz_membuf out;
    tg_writer w = fz_membuf_writer(&out);
    tg_io_item it = tg_io_item_data(t, NULL);
    size_t before = tg_ctx_bytes(ctx);
    tg_status s = tg_npy_write_to(ctx, &w, &it);
    if (s == TG_ERR_NOMEM) {
        tg_ctx_clear_error(ctx);
        fz_membuf_free(&out);
        return;
    }
    if (s != TG_OK)
        fz_die(ctx, "tg_npy_write_to refused what the reader gave (%s)", tg_status_str(s));
    if (tg_ctx_bytes(ctx) != before)
        fz_die(ctx, "tg_npy_write_to kept context memory");
    tg_npy_kind kind = (tg_npy_kind)-1;
    tg_dtype dt = tg_tensor_dtype(t);
    tg_tensor *u = tg_npy_read_mem(ctx, out.p, out.len, dt, &kind);
    if (!u)
        fz_die(ctx, "round trip: the written %s file (%zu bytes) does not read back",
               tg_dtype_str(dt), out.len);
    if (kind != (dt == TG_I32 ? TG_NPY_INT : TG_NPY_FLOAT))
        fz_die(ctx, "round trip: kind %d for %s", (int)kind, tg_dtype_str(dt));
    int r = tg_tensor_rank(t);
    if (tg_tensor_rank(u) != r ||
        (r > 0 && memcmp(tg_tensor_shape(t), tg_tensor_shape(u), (size_t)r * 8) != 0))
        fz_die(ctx, "round trip: the shape changed");
    size_t nbytes = (size_t)tg_tensor_numel(t) * tg_dtype_size(dt);
    if (memcmp(tg_tensor_data((tg_tensor *)t), tg_tensor_data(u), nbytes) != 0)
        fz_die(ctx, "round trip: the bytes changed");
    fz_membuf_free(&out);
}

/* The path-based reader (it streams a regular file) must agree with the in-memory read as
 * f32: t (or NULL with status mem_status). */
static void from_file(tg_ctx *ctx, const uint8_t *data, size_t size, const tg_tensor *t,
                      tg_npy_kind kind, tg_status mem_status)
{
    char path[64];
    int fd = fz_file_open(data, size, path, sizeof path);
    if (fd < 0)
        return;
    size_t before = tg_ctx_bytes(ctx);
    tg_npy_kind fkind = (tg_npy_kind)-1;
    tg_tensor *u = tg_npy_read(ctx, path, TG_F32, &fkind);
    if (!u) {
        static const tg_status allowed[] = {TG_ERR_FORMAT,    TG_ERR_UNSUPPORTED,
                                            TG_ERR_HEADER_SIZE, TG_ERR_TRUNCATED,
                                            TG_ERR_TRAILING,  TG_ERR_OVERFLOW,
                                            TG_ERR_NOMEM,     TG_OK};
        fz_check_failure(ctx, "tg_npy_read", before, allowed);
        tg_status fs = tg_ctx_status(ctx);
        if (t)
            fz_die(ctx, "tg_npy_read rejects what tg_npy_read_mem accepted");
        if (fs != mem_status && fs != TG_ERR_NOMEM && mem_status != TG_ERR_NOMEM)
            fz_die(ctx, "tg_npy_read fails with %s, tg_npy_read_mem with %s", tg_status_str(fs),
                   tg_status_str(mem_status));
        tg_ctx_clear_error(ctx);
    } else {
        if (!t)
            fz_die(ctx, "tg_npy_read accepts what tg_npy_read_mem rejected (%s)",
                   tg_status_str(mem_status));
        int r = tg_tensor_rank(t);
        if (fkind != kind || tg_tensor_rank(u) != r ||
            (r > 0 && memcmp(tg_tensor_shape(t), tg_tensor_shape(u), (size_t)r * 8) != 0) ||
            memcmp(tg_tensor_data((tg_tensor *)t), tg_tensor_data(u),
                   (size_t)tg_tensor_numel(t) * 4) != 0)
            fz_die(ctx, "tg_npy_read and tg_npy_read_mem read different arrays");
    }
    fz_file_close(fd);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static const tg_dtype wants[3] = {TG_F32, TG_F64, TG_I32};
    fz_alloc A;
    tg_ctx *ctx = fz_ctx_new(&A, FZ_CAP);
    tg_tensor *t[3];
    tg_npy_kind kind[3];
    tg_status st[3];
    uint64_t n_alloc = 0;
    for (int w = 0; w < 3; w++) {
        size_t before = tg_ctx_bytes(ctx);
        uint64_t c0 = A.count;
        kind[w] = (tg_npy_kind)-1;
        size_t live0 = fz_peak_start(&A);
        t[w] = tg_npy_read_mem(ctx, data, size, wants[w], &kind[w]);
        fz_check_peak(&A, live0, size, FN);
        if (w == 0)
            n_alloc = A.count - c0;
        st[w] = tg_ctx_status(ctx);
        if (!t[w]) {
            fz_check_failure(ctx, FN, before, read_errors);
            tg_ctx_clear_error(ctx);
        } else {
            if (st[w] != TG_OK)
                fz_die(ctx, "%s succeeded with an error recorded", FN);
            check_tensor(ctx, t[w], wants[w], kind[w]);
        }
    }
    bool nomem = st[0] == TG_ERR_NOMEM || st[1] == TG_ERR_NOMEM;
    /* as f32 it fails with TG_ERR_FORMAT exactly when a finite value is beyond the f32 range
     * (|v| >= 2^128 - 2^103 rounds to an infinity; tgrad.h, tg_dtype); otherwise as f64 */
    bool beyond_f32 = false;
    for (int64_t i = 0; t[1] && i < tg_tensor_numel(t[1]); i++) {
        double v = elem(t[1], i);
        beyond_f32 = beyond_f32 || (isfinite(v) && fabs(v) >= 0x1.ffffffp+127);
    }
    if (!nomem && beyond_f32 && st[0] != TG_ERR_FORMAT)
        fz_die(ctx, "a value beyond the f32 range reads as f32 with %s", tg_status_str(st[0]));
    if (!nomem && !beyond_f32 && st[0] != st[1])
        fz_die(ctx, "the file reads as f32 with %s but as f64 with %s", tg_status_str(st[0]),
               tg_status_str(st[1]));
    if (t[0] && t[1]) {
        if (kind[0] != kind[1])
            fz_die(ctx, "kind %d as f32, %d as f64", (int)kind[0], (int)kind[1]);
        int r = tg_tensor_rank(t[0]);
        if (tg_tensor_rank(t[1]) != r ||
            (r > 0 && memcmp(tg_tensor_shape(t[0]), tg_tensor_shape(t[1]), (size_t)r * 8) != 0))
            fz_die(ctx, "the shape depends on the wanted dtype");
        const float *a = tg_tensor_data(t[0]);
        const double *b = tg_tensor_data(t[1]);
        for (int64_t i = 0; i < tg_tensor_numel(t[0]); i++)
            if (!(isnan(a[i]) && isnan(b[i])) && a[i] != (float)b[i])
                fz_die(ctx, "element %lld: f32 %.9g is not f64 %.17g rounded", (long long)i,
                       (double)a[i], b[i]);
        round_trip(ctx, t[0]);
        round_trip(ctx, t[1]);
    }
    /* i32: valid iff the float reads are and every value is an integer in range */
    bool i32_ok = t[1] != NULL;
    for (int64_t i = 0; i32_ok && i < tg_tensor_numel(t[1]); i++) {
        double v = elem(t[1], i);
        i32_ok = v >= -2147483648.0 && v <= 2147483647.0 && v == floor(v);
    }
    bool nomem3 = nomem || st[2] == TG_ERR_NOMEM;
    if (!nomem3) {
        if (!t[1] && st[2] != st[1])
            fz_die(ctx, "the file reads as f64 with %s but as i32 with %s", tg_status_str(st[1]),
                   tg_status_str(st[2]));
        if (t[1] && i32_ok != (t[2] != NULL))
            fz_die(ctx, "the f64 values %s i32, but the i32 read %s (%s)",
                   i32_ok ? "fit" : "do not fit", t[2] ? "succeeded" : "failed",
                   tg_status_str(st[2]));
        if (t[1] && !t[2] && st[2] != TG_ERR_UNSUPPORTED)
            fz_die(ctx, "values that do not fit i32 gave %s", tg_status_str(st[2]));
    }
    if (t[1] && t[2]) {
        if (kind[2] != kind[1] || tg_tensor_numel(t[2]) != tg_tensor_numel(t[1]))
            fz_die(ctx, "the i32 read differs in kind or size");
        for (int64_t i = 0; i < tg_tensor_numel(t[1]); i++)
            if (elem(t[2], i) != elem(t[1], i))
                fz_die(ctx, "element %lld: i32 %.17g is not f64 %.17g", (long long)i,
                       elem(t[2], i), elem(t[1], i));
        round_trip(ctx, t[2]);
    }
    /* Files cost syscalls: every accepted input, one rejected input in 16. */
    if (t[0] || fz_hash(data, size) % 16 == 0)
        from_file(ctx, data, size, t[0], kind[0], st[0]);
    size_t before = tg_ctx_bytes(ctx);
    if (tg_npy_read_mem(ctx, data, size, (tg_dtype)3, NULL))
        fz_die(ctx, "an invalid wanted dtype was accepted");
    static const tg_status dtype_err[] = {TG_ERR_DTYPE, TG_OK};
    fz_check_failure(ctx, FN, before, dtype_err);
    fz_ctx_free(ctx, &A);

    /* Out-of-memory pass: fail one of the allocations the successful f32 read made. */
    if (st[0] == TG_OK && n_alloc > 0) {
        ctx = fz_ctx_new(&A, FZ_CAP);
        before = tg_ctx_bytes(ctx);
        A.fail_at = A.count + 1 + fz_hash(data, size) % n_alloc;
        if (tg_npy_read_mem(ctx, data, size, TG_F32, NULL))
            fz_die(ctx, "%s succeeded although allocation %llu failed", FN,
                   (unsigned long long)A.fail_at);
        static const tg_status nomem_err[] = {TG_ERR_NOMEM, TG_OK};
        fz_check_failure(ctx, FN, before, nomem_err);
        fz_ctx_free(ctx, &A);
    }
    return 0;
}
