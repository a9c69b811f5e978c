/*
 * text.c - byte-level text corpora for language-model training (tgrad_data.h, "Byte-level
 * text"): files read whole and concatenated (directories and files reached twice skipped,
 * anything that is not a regular file refused without blocking), the vocabulary of the bytes
 * present, a content hash, training windows from the context RNG and the fixed validation
 * windows.
 */
#define _DEFAULT_SOURCE /* realpath */
#include "data.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

struct tg_text {
    tg_ctx *ctx;
    unsigned char *bytes;     /* (n) the concatenated files */
    tg_text_info info;
    unsigned char vocab[256]; /* id -> byte */
    int32_t id_of[256];       /* byte -> id, -1 if absent */
};

static const char FN[] = "tg_text_load";

/* Append the regular file @p real (given as @p path) to t->bytes. */
static bool read_one(tg_text *t, const char *path, const char *real, size_t *cap)
{
    tg_ctx *ctx = t->ctx;
    /* O_NONBLOCK: opening a FIFO without a writer (or a device) must not hang; fstat on the
     * descriptor then refuses anything that is not a regular file (no race with the stat) */
    int fd = open(real, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0) {
        tg__run_err(ctx, TG_ERR_IO, FN, "'%s': cannot open: %s", path, strerror(errno));
        return false;
    }
    struct stat sb;
    if (fstat(fd, &sb) != 0) {
        tg__run_err(ctx, TG_ERR_IO, FN, "'%s': cannot read: %s", path, strerror(errno));
        close(fd);
        return false;
    }
    if (!S_ISREG(sb.st_mode)) {
        tg__run_err(ctx, TG_ERR_IO, FN, "'%s' is %s, not a regular file", path,
                    tg__ftype_name(sb.st_mode));
        close(fd);
        return false;
    }
    int64_t n = t->info.bytes;
    if ((uint64_t)sb.st_size > (uint64_t)(TG_TEXT_MAX_BYTES - n)) {
        tg__run_err(ctx, TG_ERR_IO, FN, "'%s': the files hold %lld bytes, more than the %lld "
                    "(1 GiB) allowed", path, (long long)n + (long long)sb.st_size,
                    (long long)TG_TEXT_MAX_BYTES);
        close(fd);
        return false;
    }
    for (;;) {
        if ((size_t)n + 65536 > *cap) {
            size_t nc = *cap ? *cap * 2 : (size_t)1 << 20;
            while (nc < (size_t)n + 65536)
                nc *= 2;
            unsigned char *nb = realloc(t->bytes, nc);
            if (!nb) {
                tg__run_err(ctx, TG_ERR_NOMEM, FN, "'%s': out of memory", path);
                close(fd);
                return false;
            }
            t->bytes = nb;
            *cap = nc;
        }
        ssize_t k = read(fd, t->bytes + n, 65536);
        if (k < 0 && errno == EINTR)
            continue;
        if (k < 0) {
            tg__run_err(ctx, TG_ERR_IO, FN, "'%s': read failed: %s", path, strerror(errno));
            close(fd);
            return false;
        }
        if (k == 0)
            break;
        n += k;
        t->info.bytes = n;
        if (n > TG_TEXT_MAX_BYTES) { /* the file grew while we read it */
            tg__run_err(ctx, TG_ERR_IO, FN, "'%s': the files hold more than the %lld bytes "
                        "(1 GiB) allowed (a file grew while it was read)", path,
                        (long long)TG_TEXT_MAX_BYTES);
            close(fd);
            return false;
        }
    }
    close(fd);
    t->info.files++;
    return true;
}

static uint64_t fnv1a_u64(uint64_t h, uint64_t v)
{
    unsigned char b[8];
    for (int i = 0; i < 8; i++)
        b[i] = (unsigned char)(v >> (8 * i));
    return tg__fnv1a(h, b, 8);
}

uint64_t tg_text_hash(const unsigned char *bytes, int64_t n, const int64_t *ends, int n_files)
{
    uint64_t h = tg__fnv1a(TG__FNV_BASIS, bytes, bytes && n > 0 ? (size_t)n : 0);
    for (int i = 0; ends && i < n_files; i++)
        h = fnv1a_u64(h, (uint64_t)ends[i]);
    return fnv1a_u64(h, (uint64_t)(n_files > 0 ? n_files : 0));
}

static void free_seen(char **seen, int n)
{
    for (int i = 0; seen && i < n; i++)
        free(seen[i]);
    free(seen);
}

/* The files in order into t (skipping directories and real paths already read); each file's
 * end offset into ends[]. A directory given is remembered in *a_dir. */
static bool read_all(tg_text *t, const char *const *paths, int n_paths, int64_t *ends,
                     const char **a_dir)
{
    char **seen = calloc((size_t)n_paths + 1, sizeof *seen); /* real paths read so far */
    int n_seen = 0;
    size_t cap = 0;
    bool ok = seen != NULL;
    if (!ok)
        tg__run_err(t->ctx, TG_ERR_NOMEM, FN, "out of memory");
    for (int i = 0; ok && i < n_paths; i++) {
        char real[PATH_MAX];
        struct stat sb;
        if (!paths[i]) {
            tg__run_err(t->ctx, TG_ERR_ARG, FN, "path %d is NULL", i);
            ok = false;
        } else if (!realpath(paths[i], real) || stat(real, &sb) != 0) {
            tg__run_err(t->ctx, TG_ERR_IO, FN, "'%s': cannot read: %s", paths[i],
                        strerror(errno));
            ok = false;
        } else if (S_ISDIR(sb.st_mode)) { /* a glob like dir/x* may match directories */
            *a_dir = paths[i];
            t->info.dirs++;
        } else if (!S_ISREG(sb.st_mode)) {
            tg__run_err(t->ctx, TG_ERR_IO, FN, "'%s' is %s, not a regular file", paths[i],
                        tg__ftype_name(sb.st_mode));
            ok = false;
        } else {
            bool dup = false;
            for (int k = 0; k < n_seen && !dup; k++)
                dup = strcmp(seen[k], real) == 0;
            if (dup)
                continue;
            if (!(seen[n_seen] = strdup(real))) {
                tg__run_err(t->ctx, TG_ERR_NOMEM, FN, "out of memory");
                ok = false;
                break;
            }
            n_seen++;
            ok = read_one(t, paths[i], real, &cap);
            if (ok)
                ends[t->info.files - 1] = t->info.bytes;
        }
    }
    free_seen(seen, n_seen);
    return ok;
}

tg_text *tg_text_load(tg_ctx *ctx, const char *const *paths, int n_paths, double val_fraction)
{
    if (!ctx)
        return NULL;
    tg__begin(ctx);
    if (!(val_fraction >= 0 && val_fraction < 1)) {
        tg__run_err(ctx, TG_ERR_ARG, FN, "validation fraction %g outside [0, 1)", val_fraction);
        return NULL;
    }
    if (n_paths < 0 || (n_paths > 0 && !paths)) {
        tg__run_err(ctx, TG_ERR_ARG, FN, "no paths (%d)", n_paths);
        return NULL;
    }
    tg_text *t = calloc(1, sizeof *t);
    int64_t *ends = calloc((size_t)n_paths + 1, sizeof *ends); /* each file's end offset */
    if (!t || !ends) {
        free(t);
        free(ends);
        tg__run_err(ctx, TG_ERR_NOMEM, FN, "out of memory");
        return NULL;
    }
    t->ctx = ctx;
    const char *a_dir = NULL;
    if (!read_all(t, paths, n_paths, ends, &a_dir))
        goto fail;
    t->info.hash = tg_text_hash(t->bytes, t->info.bytes, ends, t->info.files);
    if (t->info.files == 0 && a_dir) {
        tg__run_err(ctx, TG_ERR_ARG, FN, "'%s' is a directory; give the files in it (e.g. "
                    "'%s'/*)", a_dir, a_dir);
        goto fail;
    }
    if (t->info.bytes == 0) {
        tg__run_err(ctx, TG_ERR_ARG, FN, "no text: the input %s empty",
                    t->info.files == 1 ? "file is" : "files are");
        goto fail;
    }
    for (int b = 0; b < 256; b++)
        t->id_of[b] = -1;
    bool present[256] = {false};
    for (int64_t i = 0; i < t->info.bytes; i++)
        present[t->bytes[i]] = true;
    for (int b = 0; b < 256; b++)
        if (present[b]) {
            t->id_of[b] = t->info.vocab_size;
            t->vocab[t->info.vocab_size++] = (unsigned char)b;
        }
    t->info.train_bytes = t->info.bytes - (int64_t)((double)t->info.bytes * val_fraction);
    free(ends);
    return t;
fail:
    free(ends);
    tg_text_free(t);
    return NULL;
}

void tg_text_free(tg_text *t)
{
    if (!t)
        return;
    free(t->bytes);
    free(t);
}

tg_text_info tg_text_get_info(const tg_text *t)
{
    tg_text_info z;
    memset(&z, 0, sizeof z);
    return t ? t->info : z;
}

const unsigned char *tg_text_data(const tg_text *t)
{
    return t ? t->bytes : NULL;
}

const unsigned char *tg_text_vocab(const tg_text *t)
{
    return t ? t->vocab : NULL;
}

int32_t tg_text_id(const tg_text *t, unsigned char byte)
{
    return t ? t->id_of[byte] : -1;
}

tg_status tg_text_train_batch(tg_ctx *ctx, const tg_text *t, int64_t B, int64_t T, int32_t *ids,
                              int32_t *targets)
{
    static const char fn[] = "tg_text_train_batch";
    if (!ctx)
        return TG_ERR_ARG;
    tg__begin(ctx);
    if (!t || !ids || !targets || B < 1 || T < 1) {
        tg__run_err(ctx, TG_ERR_ARG, fn, "NULL text or arrays, or B %lld / T %lld < 1",
                    (long long)B, (long long)T);
        return TG_ERR_ARG;
    }
    if (t->info.train_bytes < T + 1) {
        tg__run_err(ctx, TG_ERR_ARG, fn, "the training split holds %lld bytes; a window of "
                    "T = %lld needs %lld", (long long)t->info.train_bytes, (long long)T,
                    (long long)T + 1);
        return TG_ERR_ARG;
    }
    uint64_t span = (uint64_t)(t->info.train_bytes - T); /* starts in [0, n_train - T - 1] */
    for (int64_t b = 0; b < B; b++) {
        int64_t s = (int64_t)(tg_rng_u64(ctx) % span);
        for (int64_t j = 0; j < T; j++) {
            ids[b * T + j] = t->id_of[t->bytes[s + j]];
            targets[b * T + j] = t->id_of[t->bytes[s + j + 1]];
        }
    }
    return TG_OK;
}

/* Validation uses the non-overlapping windows of the split, or, for a large split, at most
 * TG_TEXT_MAX_VAL_WINDOWS of them spread evenly over it, so evaluation cost stays bounded. */
static int64_t val_windows(const tg_text *t, int64_t T, int64_t *stride)
{
    int64_t all = T >= 1 ? (t->info.bytes - t->info.train_bytes - 1) / T : 0;
    if (all < 0)
        all = 0;
    *stride = all > TG_TEXT_MAX_VAL_WINDOWS ? all / TG_TEXT_MAX_VAL_WINDOWS : 1;
    return all > TG_TEXT_MAX_VAL_WINDOWS ? TG_TEXT_MAX_VAL_WINDOWS : all;
}

int64_t tg_text_val_windows(const tg_text *t, int64_t T)
{
    int64_t stride;
    return t ? val_windows(t, T, &stride) : 0;
}

int64_t tg_text_val_batches(const tg_text *t, int64_t B, int64_t T)
{
    return t && B >= 1 ? (tg_text_val_windows(t, T) + B - 1) / B : 0;
}

int64_t tg_text_val_batch(const tg_text *t, int64_t k, int64_t B, int64_t T, int32_t *ids,
                          int32_t *targets)
{
    if (!t || !ids || !targets || B < 1 || T < 1 || k < 0)
        return 0;
    int64_t stride, windows = val_windows(t, T, &stride), got = 0;
    for (int64_t b = 0; b < B; b++) {
        int64_t w = k * B + b;
        for (int64_t j = 0; j < T; j++) {
            if (w < windows) {
                int64_t s = t->info.train_bytes + w * stride * T + j;
                ids[b * T + j] = t->id_of[t->bytes[s]];
                targets[b * T + j] = t->id_of[t->bytes[s + 1]];
            } else {
                ids[b * T + j] = 0;
                targets[b * T + j] = -1; /* ignored */
            }
        }
        got += w < windows;
    }
    return got;
}
