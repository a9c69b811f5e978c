/* data.c - corpora and algorithmic tasks (see data.h). */
#define _DEFAULT_SOURCE
#include "data.h"
#include "climsg.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

bool data_check_regular(const char *path, double max_bytes, char *err, size_t err_size)
{
    struct stat sb;
    if (!cli_regular_file(path, err, err_size))
        return false;
    if (max_bytes > 0 && stat(path, &sb) == 0 && (double)sb.st_size > max_bytes) {
        snprintf(err, err_size, "'%s' holds %lld bytes, more than the memory it may use (%.0f "
                 "bytes: this machine's, or ulimit -v if lower)", path, (long long)sb.st_size,
                 max_bytes);
        return false;
    }
    return true;
}

double phys_memory_bytes(void)
{
    long pages = sysconf(_SC_PHYS_PAGES), size = sysconf(_SC_PAGE_SIZE);
    double b = pages > 0 && size > 0 ? (double)pages * (double)size : 1e18; /* unknown: none */
    /* ulimit -v / -d: allocations beyond them fail however much memory the machine has */
    static const int res[] = {RLIMIT_AS, RLIMIT_DATA};
    for (size_t i = 0; i < sizeof res / sizeof res[0]; i++) {
        struct rlimit rl;
        if (getrlimit(res[i], &rl) == 0 && rl.rlim_cur != RLIM_INFINITY &&
            (double)rl.rlim_cur < b)
            b = (double)rl.rlim_cur;
    }
    return b;
}

/* Append the regular file @p real (given as @p path) to c->bytes. */
static bool read_one(corpus *c, const char *path, const char *real, size_t *cap, char *err,
                     size_t err_size)
{
    /* O_NONBLOCK: opening a FIFO without a writer (or a device) must not hang; fstat on the
     * descriptor then refuses anything that is not a regular file (no race with the stat) */
    int fd = open(real, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0) {
        snprintf(err, err_size, "--text '%s': cannot open: %s", path, strerror(errno));
        return false;
    }
    struct stat sb;
    if (fstat(fd, &sb) != 0) {
        snprintf(err, err_size, "--text '%s': cannot read: %s", path, strerror(errno));
        close(fd);
        return false;
    }
    if (!S_ISREG(sb.st_mode)) {
        snprintf(err, err_size, "--text '%s' is %s, not a regular file", path,
                 cli_file_kind(sb.st_mode));
        close(fd);
        return false;
    }
    if ((uint64_t)sb.st_size > (uint64_t)(CORPUS_MAX_BYTES - c->n)) {
        snprintf(err, err_size, "--text '%s': the files hold %lld bytes, more than the %lld "
                 "(1 GiB) allowed", path, (long long)c->n + (long long)sb.st_size,
                 (long long)CORPUS_MAX_BYTES);
        close(fd);
        return false;
    }
    for (;;) {
        if ((size_t)c->n + 65536 > *cap) {
            size_t nc = *cap ? *cap * 2 : (size_t)1 << 20;
            while (nc < (size_t)c->n + 65536)
                nc *= 2;
            unsigned char *nb = realloc(c->bytes, nc);
            if (!nb) {
                snprintf(err, err_size, "--text '%s': out of memory", path);
                close(fd);
                return false;
            }
            c->bytes = nb;
            *cap = nc;
        }
        ssize_t k = read(fd, c->bytes + c->n, 65536);
        if (k < 0 && errno == EINTR)
            continue;
        if (k < 0) {
            snprintf(err, err_size, "--text '%s': read failed: %s", path, strerror(errno));
            close(fd);
            return false;
        }
        if (k == 0)
            break;
        c->n += k;
        if (c->n > CORPUS_MAX_BYTES) { /* the file grew while we read it */
            snprintf(err, err_size, "--text '%s': the files hold more than the %lld bytes "
                     "(1 GiB) allowed (a file grew while it was read)", path,
                     (long long)CORPUS_MAX_BYTES);
            close(fd);
            return false;
        }
    }
    close(fd);
    c->n_files++;
    return true;
}

static uint64_t fnv1a(uint64_t h, const unsigned char *p, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        h ^= p[i];
        h *= 0x100000001b3ULL; /* the 64-bit FNV prime */
    }
    return h;
}

static uint64_t fnv1a_u64(uint64_t h, uint64_t v)
{
    unsigned char b[8];
    for (int i = 0; i < 8; i++)
        b[i] = (unsigned char)(v >> (8 * i));
    return fnv1a(h, b, 8);
}

uint64_t corpus_hash(const unsigned char *bytes, int64_t n, const int64_t *ends, int n_files)
{
    uint64_t h = fnv1a(0xcbf29ce484222325ULL, bytes, (size_t)n); /* the FNV offset basis */
    for (int i = 0; i < n_files; i++)
        h = fnv1a_u64(h, (uint64_t)ends[i]);
    return fnv1a_u64(h, (uint64_t)n_files);
}

static void free_seen(char **seen, int n)
{
    for (int i = 0; seen && i < n; i++)
        free(seen[i]);
    free(seen);
}

bool corpus_load(corpus *c, const char *const *paths, int n_paths, double val_fraction,
                 char *err, size_t err_size)
{
    memset(c, 0, sizeof *c);
    if (!(val_fraction >= 0 && val_fraction < 1)) {
        snprintf(err, err_size, "validation fraction %g outside [0, 1)", val_fraction);
        return false;
    }
    char **seen = calloc((size_t)n_paths + 1, sizeof *seen); /* real paths read so far */
    int64_t *ends = calloc((size_t)n_paths + 1, sizeof *ends); /* each file's end offset */
    int n_seen = 0;
    size_t cap = 0;
    const char *a_dir = NULL;
    if (!seen || !ends) {
        free(seen);
        free(ends);
        snprintf(err, err_size, "out of memory");
        return false;
    }
    for (int i = 0; i < n_paths; i++) {
        char real[PATH_MAX];
        struct stat sb;
        if (!realpath(paths[i], real) || stat(real, &sb) != 0) {
            snprintf(err, err_size, "--text '%s': cannot read: %s", paths[i], strerror(errno));
            goto fail;
        }
        if (S_ISDIR(sb.st_mode)) { /* a glob like dir/x* may match directories: skip them */
            a_dir = paths[i];
            c->n_dirs++;
            continue;
        }
        if (!S_ISREG(sb.st_mode)) {
            snprintf(err, err_size, "--text '%s' is %s, not a regular file", paths[i],
                     cli_file_kind(sb.st_mode));
            goto fail;
        }
        bool dup = false;
        for (int k = 0; k < n_seen && !dup; k++)
            dup = strcmp(seen[k], real) == 0;
        if (dup)
            continue;
        if (!(seen[n_seen] = strdup(real))) {
            snprintf(err, err_size, "out of memory");
            goto fail;
        }
        n_seen++;
        if (!read_one(c, paths[i], real, &cap, err, err_size))
            goto fail;
        ends[c->n_files - 1] = c->n;
    }
    free_seen(seen, n_seen);
    seen = NULL;
    c->hash = corpus_hash(c->bytes, c->n, ends, c->n_files);
    free(ends);
    ends = NULL;
    if (c->n_files == 0 && a_dir) {
        snprintf(err, err_size, "--text '%s' is a directory; give the files in it (e.g. "
                 "'%s'/*)", a_dir, a_dir);
        goto fail;
    }
    if (c->n == 0) {
        snprintf(err, err_size, "no text: the input %s empty",
                 c->n_files == 1 ? "file is" : "files are");
        goto fail;
    }
    for (int b = 0; b < 256; b++)
        c->id_of[b] = -1;
    bool present[256] = {false};
    for (int64_t i = 0; i < c->n; i++)
        present[c->bytes[i]] = true;
    for (int b = 0; b < 256; b++)
        if (present[b]) {
            c->id_of[b] = c->vocab_size;
            c->vocab[c->vocab_size++] = (unsigned char)b;
        }
    c->n_train = c->n - (int64_t)((double)c->n * val_fraction);
    return true;
fail:
    free_seen(seen, n_seen);
    free(ends);
    free(c->bytes);
    c->bytes = NULL;
    c->n = 0;
    return false;
}

void corpus_free(corpus *c)
{
    free(c->bytes);
    c->bytes = NULL;
}

void vocab_to_hex(const unsigned char *vocab, int n, char *out)
{
    for (int i = 0; i < n; i++)
        sprintf(out + 2 * i, "%02x", vocab[i]);
    out[2 * n] = 0;
}

int hex_digit(char c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1;
}

int vocab_from_hex(const char *hex, unsigned char *vocab)
{
    size_t len = strlen(hex);
    if (len % 2 || len > 512 || len == 0)
        return -1;
    for (size_t i = 0; i < len / 2; i++) {
        int hi = hex_digit(hex[2 * i]), lo = hex_digit(hex[2 * i + 1]);
        if (hi < 0 || lo < 0)
            return -1;
        vocab[i] = (unsigned char)(16 * hi + lo);
    }
    return (int)(len / 2);
}

void corpus_train_batch(tg_ctx *ctx, const corpus *c, int64_t B, int64_t T, int32_t *ids,
                        int32_t *targets)
{
    uint64_t span = (uint64_t)(c->n_train - T); /* starts in [0, n_train - T - 1] */
    for (int64_t b = 0; b < B; b++) {
        int64_t s = (int64_t)(tg_rng_u64(ctx) % span);
        for (int64_t t = 0; t < T; t++) {
            ids[b * T + t] = c->id_of[c->bytes[s + t]];
            targets[b * T + t] = c->id_of[c->bytes[s + t + 1]];
        }
    }
}

/* Validation uses the non-overlapping windows of the split, or, for a large split, at most
 * CORPUS_MAX_VAL_WINDOWS of them spread evenly over it, so evaluation cost stays bounded. */
#define CORPUS_MAX_VAL_WINDOWS 4096

static int64_t val_windows(const corpus *c, int64_t T, int64_t *stride)
{
    int64_t all = (c->n - c->n_train - 1) / T;
    *stride = all > CORPUS_MAX_VAL_WINDOWS ? all / CORPUS_MAX_VAL_WINDOWS : 1;
    return all > CORPUS_MAX_VAL_WINDOWS ? CORPUS_MAX_VAL_WINDOWS : all;
}

int64_t corpus_val_windows(const corpus *c, int64_t T)
{
    int64_t stride;
    return val_windows(c, T, &stride);
}

int64_t corpus_val_batches(const corpus *c, int64_t B, int64_t T)
{
    int64_t stride, windows = val_windows(c, T, &stride);
    return (windows + B - 1) / B;
}

int64_t corpus_val_batch(const corpus *c, int64_t k, int64_t B, int64_t T, int32_t *ids,
                         int32_t *targets)
{
    int64_t stride, windows = val_windows(c, T, &stride), got = 0;
    for (int64_t b = 0; b < B; b++) {
        int64_t w = k * B + b;
        for (int64_t t = 0; t < T; t++) {
            if (w < windows) {
                int64_t s = c->n_train + w * stride * T + t;
                ids[b * T + t] = c->id_of[c->bytes[s]];
                targets[b * T + t] = c->id_of[c->bytes[s + 1]];
            } else {
                ids[b * T + t] = 0;
                targets[b * T + t] = -1; /* ignored */
            }
        }
        got += w < windows;
    }
    return got;
}

bool task_parse(const char *name, task_kind *k)
{
    if (strcmp(name, "copy") == 0)
        *k = TASK_COPY;
    else if (strcmp(name, "reverse") == 0)
        *k = TASK_REVERSE;
    else if (strcmp(name, "sort") == 0)
        *k = TASK_SORT;
    else
        return false;
    return true;
}

const char *task_name(task_kind k)
{
    return k == TASK_COPY ? "copy" : k == TASK_REVERSE ? "reverse" : "sort";
}

static uint64_t sm64(uint64_t *s)
{
    uint64_t z = (*s += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

static void make_targets(task_kind k, int64_t T, const int32_t *x, int32_t *y)
{
    if (k == TASK_COPY) {
        memcpy(y, x, sizeof(int32_t) * (size_t)T);
    } else if (k == TASK_REVERSE) {
        for (int64_t t = 0; t < T; t++)
            y[t] = x[T - 1 - t];
    } else {
        int count[10] = {0};
        for (int64_t t = 0; t < T; t++)
            count[x[t]]++;
        int64_t o = 0;
        for (int d = 0; d < 10; d++)
            for (int j = 0; j < count[d]; j++)
                y[o++] = d;
    }
}

void task_batch(task_kind k, uint64_t *rng_state, int64_t B, int64_t T, int32_t *ids,
                int32_t *targets)
{
    for (int64_t b = 0; b < B; b++) {
        for (int64_t t = 0; t < T; t++)
            ids[b * T + t] = (int32_t)(sm64(rng_state) % 10);
        make_targets(k, T, ids + b * T, targets + b * T);
    }
}

void task_train_batch(tg_ctx *ctx, task_kind k, int64_t B, int64_t T, int32_t *ids,
                      int32_t *targets)
{
    for (int64_t b = 0; b < B; b++) {
        for (int64_t t = 0; t < T; t++)
            ids[b * T + t] = (int32_t)(tg_rng_u64(ctx) % 10);
        make_targets(k, T, ids + b * T, targets + b * T);
    }
}
