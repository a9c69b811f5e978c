/*
 * fuzz_safetensors.c - libFuzzer harness for the safetensors reader and writer.
 *
 * Per input, on a fresh context with a capped allocator (fuzz_util.h):
 * 1. tg_safetensors_read_mem(). On failure: a documented status, one clean line naming the
 *    function, the context back to its size before the call. Either way its peak memory is
 *    bounded by the input's size (FZ_AMP).
 * 2. On success, walk every tensor (name, full key, file dtype, dtype mapping, shape, element
 *    values: BOOL reads as 0/1, integer dtypes as i32 integers in their range, a value outside
 *    i32 being a TG_ERR_UNSUPPORTED failure of the read) and every metadata
 *    entry (lookups by key and by name find the same entries), and the accessors' range checks.
 * 3. Round trip: write it all back with tg_safetensors_write_to() into memory, read that, and
 *    require identical names, metadata, shapes and bytes; writing the re-read file again must
 *    give the same bytes (the writer's output is canonical).
 * 4. The same bytes through the path-based reader tg_safetensors_read() (a memfd on Linux):
 *    the same verdict, message (after the label), and contents.
 * 5. Out-of-memory pass: read again on a new context whose k-th allocation fails (k chosen from
 *    the input's hash among the allocations step 1 made): NULL, TG_ERR_NOMEM, nothing kept.
 * Every context must give back every byte on tg_ctx_free.
 */
#include "fuzz_util.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char FN[] = "tg_safetensors_read_mem";

static const tg_status read_errors[] = {
    TG_ERR_TRUNCATED,     TG_ERR_HEADER_SIZE, TG_ERR_JSON,    TG_ERR_DUPLICATE,
    TG_ERR_UNSUPPORTED,   TG_ERR_OVERFLOW,    TG_ERR_OUT_OF_BOUNDS, TG_ERR_SIZE_MISMATCH,
    TG_ERR_OVERLAP,       TG_ERR_GAP,         TG_ERR_TRAILING, TG_ERR_NOMEM,
    TG_OK};

/* What the reader makes of each readable file dtype (tgrad_io.h, tg_safetensors_read). */
typedef struct fdtype {
    const char *name;
    tg_dtype to;
    double lo, hi; /* value range for BOOL and integers; lo > hi: floating point */
} fdtype;

static const fdtype fdtypes[] = {
    {"F64", TG_F64, 1, 0},
    {"F32", TG_F32, 1, 0},
    {"F16", TG_F32, 1, 0},
    {"BF16", TG_F32, 1, 0},
    {"BOOL", TG_I32, 0, 1},
    {"U8", TG_I32, 0, 255},
    {"I8", TG_I32, -128, 127},
    {"I16", TG_I32, -32768, 32767},
    {"U16", TG_I32, 0, 65535},
    {"I32", TG_I32, -2147483648.0, 2147483647.0},
    {"U32", TG_I32, 0, 2147483647.0},
    {"I64", TG_I32, -2147483648.0, 2147483647.0},
    {"U64", TG_I32, 0, 2147483647.0},
};

static double elem(const void *data, tg_dtype dt, int64_t i)
{
    switch (dt) {
    case TG_F32: return (double)((const float *)data)[i];
    case TG_I32: return (double)((const int32_t *)data)[i];
    default: return ((const double *)data)[i];
    }
}

static void check_tensor(const tg_ctx *ctx, const tg_safetensors *st, int64_t i)
{
    const char *name = tg_safetensors_name(st, i);
    tg_tensor *t = tg_safetensors_tensor(st, i);
    const char *fd = tg_safetensors_file_dtype(st, i);
    if (!name || !t || !fd)
        fz_die(ctx, "tensor %lld: NULL name, tensor or file dtype", (long long)i);
    size_t nl = strlen(name);
    const char *tn = tg_tensor_name(t);
    size_t want = nl < TG_NAME_MAX - 1 ? nl : TG_NAME_MAX - 1;
    if (strlen(tn) != want || memcmp(tn, name, want) != 0)
        fz_die(ctx, "tensor %lld: tensor name '%s' is not its key '%s' truncated", (long long)i,
               tn, name);
    if (tg_safetensors_find(st, name) != t)
        fz_die(ctx, "tensor %lld: tg_safetensors_find('%s') does not find it", (long long)i, name);
    const fdtype *f = NULL;
    for (size_t k = 0; k < sizeof fdtypes / sizeof fdtypes[0]; k++)
        if (strcmp(fdtypes[k].name, fd) == 0)
            f = &fdtypes[k];
    if (!f)
        fz_die(ctx, "tensor %lld: unexpected file dtype '%s'", (long long)i, fd);
    tg_dtype dt = tg_tensor_dtype(t);
    if (dt != f->to)
        fz_die(ctx, "tensor %lld: file dtype %s read as %s", (long long)i, fd, tg_dtype_str(dt));
    int rank = tg_tensor_rank(t);
    const int64_t *shape = tg_tensor_shape(t);
    if (rank < 0 || rank > TG_MAX_RANK)
        fz_die(ctx, "tensor %lld: rank %d", (long long)i, rank);
    int64_t numel = 1;
    for (int d = 0; d < rank; d++) {
        if (shape[d] < 1)
            fz_die(ctx, "tensor %lld: dim %d is %lld", (long long)i, d, (long long)shape[d]);
        numel *= shape[d];
    }
    if (tg_tensor_numel(t) != numel)
        fz_die(ctx, "tensor %lld: numel %lld, shape gives %lld", (long long)i,
               (long long)tg_tensor_numel(t), (long long)numel);
    const void *data = tg_tensor_data(t);
    if (!data)
        fz_die(ctx, "tensor %lld: no data", (long long)i);
    for (int64_t e = 0; e < numel; e++) {
        double v = elem(data, dt, e);
        if (f->lo <= f->hi && !(v >= f->lo && v <= f->hi && v == floor(v)))
            fz_die(ctx, "tensor %lld (%s): element %lld is %g, not an integer in [%g, %g]",
                   (long long)i, fd, (long long)e, v, f->lo, f->hi);
    }
}

static void walk(const tg_ctx *ctx, const tg_safetensors *st)
{
    int64_t n = tg_safetensors_count(st), m = tg_safetensors_meta_count(st);
    if (n < 0 || m < 0)
        fz_die(ctx, "negative count %lld or meta count %lld", (long long)n, (long long)m);
    for (int64_t i = 0; i < n; i++)
        check_tensor(ctx, st, i);
    for (int64_t i = 0; i < m; i++) {
        const char *k = tg_safetensors_meta_key(st, i), *v = tg_safetensors_meta_value(st, i);
        if (!k || !v)
            fz_die(ctx, "metadata %lld: NULL key or value", (long long)i);
        if (tg_safetensors_meta_get(st, k) != v)
            fz_die(ctx, "metadata %lld: tg_safetensors_meta_get('%s') gives another value",
                   (long long)i, k);
    }
    if (tg_safetensors_name(st, n) || tg_safetensors_tensor(st, -1) ||
        tg_safetensors_file_dtype(st, n) || tg_safetensors_meta_key(st, m) ||
        tg_safetensors_meta_value(st, -1))
        fz_die(ctx, "an accessor answered an out-of-range index");
}

/* Write st to out. Returns false (and clears the error) if the writer may legitimately refuse
 * it: a tensor named "" (the reader takes it, the writer's contract refuses it) or memory. */
static bool write_back(tg_ctx *ctx, const tg_safetensors *st, fz_membuf *out)
{
    int64_t n = tg_safetensors_count(st), m = tg_safetensors_meta_count(st);
    tg_io_item *items = calloc((size_t)n + 1, sizeof *items);
    const char **keys = calloc((size_t)m + 1, sizeof *keys);
    const char **vals = calloc((size_t)m + 1, sizeof *vals);
    if (!items || !keys || !vals)
        fz_die(NULL, "out of memory in the harness");
    bool empty_name = false;
    for (int64_t i = 0; i < n; i++) {
        items[i] = tg_io_item_data(tg_safetensors_tensor(st, i), tg_safetensors_name(st, i));
        empty_name = empty_name || !*items[i].name;
    }
    for (int64_t i = 0; i < m; i++) {
        keys[i] = tg_safetensors_meta_key(st, i);
        vals[i] = tg_safetensors_meta_value(st, i);
    }
    tg_writer w = fz_membuf_writer(out);
    size_t before = tg_ctx_bytes(ctx);
    tg_status s = tg_safetensors_write_to(ctx, &w, n, items, m, keys, vals);
    free(items);
    free(keys);
    free(vals);
    if (tg_ctx_bytes(ctx) != before)
        fz_die(ctx, "tg_safetensors_write_to kept %zu bytes of context memory",
               tg_ctx_bytes(ctx) - before);
    if (s == TG_OK)
        return true;
    if ((s == TG_ERR_ARG && empty_name) || s == TG_ERR_NOMEM) {
        tg_ctx_clear_error(ctx);
        return false;
    }
    fz_die(ctx, "tg_safetensors_write_to refused what the reader accepted (%s)",
           tg_status_str(s));
}

/* b is a re-read of a: from the file a was written to (rewritten: dtypes became F32/F64/I32), or
 * of the same bytes through the path-based reader. */
static void same_file(const tg_ctx *ctx, const tg_safetensors *a, const tg_safetensors *b,
                      bool rewritten)
{
    int64_t n = tg_safetensors_count(a), m = tg_safetensors_meta_count(a);
    if (tg_safetensors_count(b) != n || tg_safetensors_meta_count(b) != m)
        fz_die(ctx, "round trip: %lld tensors and %lld metadata became %lld and %lld",
               (long long)n, (long long)m, (long long)tg_safetensors_count(b),
               (long long)tg_safetensors_meta_count(b));
    for (int64_t i = 0; i < n; i++) {
        const char *na = tg_safetensors_name(a, i), *nb = tg_safetensors_name(b, i);
        if (strcmp(na, nb) != 0)
            fz_die(ctx, "round trip: tensor %lld '%s' came back as '%s'", (long long)i, na, nb);
        tg_tensor *ta = tg_safetensors_tensor(a, i), *tb = tg_safetensors_tensor(b, i);
        tg_dtype dt = tg_tensor_dtype(ta);
        const char *fd = tg_safetensors_file_dtype(b, i);
        const char *want_fd = rewritten ? (dt == TG_F32 ? "F32" : dt == TG_I32 ? "I32" : "F64")
                                        : tg_safetensors_file_dtype(a, i);
        if (tg_tensor_dtype(tb) != dt || strcmp(fd, want_fd) != 0)
            fz_die(ctx, "round trip: tensor '%s' (%s) came back as %s stored %s", na,
                   tg_dtype_str(dt), tg_dtype_str(tg_tensor_dtype(tb)), fd);
        int r = tg_tensor_rank(ta);
        if (tg_tensor_rank(tb) != r ||
            (r > 0 && memcmp(tg_tensor_shape(ta), tg_tensor_shape(tb), (size_t)r * 8) != 0))
            fz_die(ctx, "round trip: tensor '%s' changed shape", na);
        size_t nbytes = (size_t)tg_tensor_numel(ta) * tg_dtype_size(dt);
        if (memcmp(tg_tensor_data(ta), tg_tensor_data(tb), nbytes) != 0)
            fz_die(ctx, "round trip: tensor '%s' changed its bytes", na);
    }
    for (int64_t i = 0; i < m; i++)
        if (strcmp(tg_safetensors_meta_key(a, i), tg_safetensors_meta_key(b, i)) != 0 ||
            strcmp(tg_safetensors_meta_value(a, i), tg_safetensors_meta_value(b, i)) != 0)
            fz_die(ctx, "round trip: metadata entry %lld changed", (long long)i);
}

static void round_trip(tg_ctx *ctx, const tg_safetensors *st)
{
    fz_membuf out1, out2;
    if (!write_back(ctx, st, &out1)) {
        fz_membuf_free(&out1);
        return;
    }
    tg_safetensors *st2 = tg_safetensors_read_mem(ctx, out1.p, out1.len);
    if (!st2)
        fz_die(ctx, "round trip: the written file (%zu bytes) does not read back", out1.len);
    same_file(ctx, st, st2, true);
    if (!write_back(ctx, st2, &out2))
        fz_die(ctx, "round trip: the re-read file does not write");
    if (out1.len != out2.len || memcmp(out1.p, out2.p, out1.len) != 0)
        fz_die(ctx, "round trip: writing the re-read file gives other bytes (%zu vs %zu)",
               out1.len, out2.len);
    fz_membuf_free(&out1);
    fz_membuf_free(&out2);
}

/* The path-based reader (it streams a regular file instead of reading memory) must give the
 * same verdict, message and contents as the in-memory one did (st, or NULL and the error now
 * recorded on ctx). */
static void from_file(tg_ctx *ctx, const uint8_t *data, size_t size, const tg_safetensors *st)
{
    char path[64];
    int fd = fz_file_open(data, size, path, sizeof path);
    if (fd < 0)
        return;
    char mem_msg[512] = "";
    tg_status mem_status = tg_ctx_status(ctx);
    /* the message without its "fn: <memory>: " prefix */
    const char *tail = strstr(tg_ctx_message(ctx), "<memory>: ");
    if (tail)
        snprintf(mem_msg, sizeof mem_msg, "%s", tail + strlen("<memory>: "));
    tg_ctx_clear_error(ctx);
    size_t before = tg_ctx_bytes(ctx);
    tg_safetensors *sf = tg_safetensors_read(ctx, path);
    if (!sf) {
        static const tg_status allowed[] = {
            TG_ERR_TRUNCATED, TG_ERR_HEADER_SIZE, TG_ERR_JSON,     TG_ERR_DUPLICATE,
            TG_ERR_UNSUPPORTED, TG_ERR_OVERFLOW, TG_ERR_OUT_OF_BOUNDS, TG_ERR_SIZE_MISMATCH,
            TG_ERR_OVERLAP,   TG_ERR_GAP,         TG_ERR_TRAILING, TG_ERR_NOMEM,
            TG_OK};
        fz_check_failure(ctx, "tg_safetensors_read", before, allowed);
        if (st)
            fz_die(ctx, "tg_safetensors_read rejects what tg_safetensors_read_mem accepted");
        if (tg_ctx_status(ctx) != mem_status && mem_status != TG_ERR_NOMEM &&
            tg_ctx_status(ctx) != TG_ERR_NOMEM)
            fz_die(ctx, "tg_safetensors_read fails with %s, tg_safetensors_read_mem with %s",
                   tg_status_str(tg_ctx_status(ctx)), tg_status_str(mem_status));
        const char *ftail = strstr(tg_ctx_message(ctx), path);
        if (tail && ftail && strncmp(ftail + strlen(path), ": ", 2) == 0 &&
            strcmp(ftail + strlen(path) + 2, mem_msg) != 0)
            fz_die(ctx, "the path reader says '%s' where the memory reader said '%s'",
                   ftail + strlen(path) + 2, mem_msg);
    } else {
        if (!st)
            fz_die(ctx, "tg_safetensors_read accepts what tg_safetensors_read_mem rejected (%s)",
                   mem_msg);
        same_file(ctx, st, sf, false);
    }
    fz_file_close(fd);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fz_alloc A;
    tg_ctx *ctx = fz_ctx_new(&A, FZ_CAP);
    size_t before = tg_ctx_bytes(ctx);
    uint64_t count0 = A.count;
    size_t live0 = fz_peak_start(&A);
    tg_safetensors *st = tg_safetensors_read_mem(ctx, data, size);
    uint64_t n_alloc = A.count - count0;
    fz_check_peak(&A, live0, size, FN);
    bool ok = st != NULL;
    if (!ok) {
        fz_check_failure(ctx, FN, before, read_errors);
    } else {
        if (tg_ctx_status(ctx) != TG_OK)
            fz_die(ctx, "%s succeeded with an error recorded", FN);
        walk(ctx, st);
        round_trip(ctx, st);
    }
    /* Files cost syscalls: every accepted input, one rejected input in 16. */
    if (ok || fz_hash(data, size) % 16 == 0)
        from_file(ctx, data, size, ok ? st : NULL);
    fz_ctx_free(ctx, &A);

    /* Out-of-memory pass: fail one of the allocations the successful read made. */
    if (ok && n_alloc > 0) {
        ctx = fz_ctx_new(&A, FZ_CAP);
        before = tg_ctx_bytes(ctx);
        A.fail_at = A.count + 1 + fz_hash(data, size) % n_alloc;
        if (tg_safetensors_read_mem(ctx, data, size))
            fz_die(ctx, "%s succeeded although allocation %llu failed", FN,
                   (unsigned long long)A.fail_at);
        static const tg_status nomem[] = {TG_ERR_NOMEM, TG_OK};
        fz_check_failure(ctx, FN, before, nomem);
        fz_ctx_free(ctx, &A);
    }
    return 0;
}
