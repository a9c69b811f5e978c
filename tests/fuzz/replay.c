/*
 * replay.c - run a fuzz harness without libFuzzer: feed every file named on the command line,
 * and every file in every directory named there (sorted, dot files skipped, not recursive), to
 * LLVMFuzzerTestOneInput(), in this process, with whatever compiler built it.
 *
 *     replay_fuzz_npy tests/fuzz/regress/fuzz_npy tests/fuzz/corpus/fuzz_npy
 *
 * `meson test` runs one per harness over its regression inputs and its seed corpus; a finding
 * aborts, and the last "replay: <file>" line on stderr names the input. Exit status: 0 if every
 * input ran, 1 if a path cannot be read or no input was found, 2 for a usage error.
 */
#define _POSIX_C_SOURCE 200809L

#include "fuzz_util.h"

#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

/* Read a whole file into a malloc'ed buffer (an empty file gives a non-NULL buffer). */
static unsigned char *slurp(const char *path, size_t *size)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    size_t cap = 4096, n = 0;
    unsigned char *buf = malloc(cap);
    while (buf) {
        n += fread(buf + n, 1, cap - n, f);
        if (n < cap)
            break;
        unsigned char *q = realloc(buf, cap * 2);
        if (!q) {
            free(buf);
            buf = NULL;
            break;
        }
        buf = q;
        cap *= 2;
    }
    int bad = ferror(f);
    fclose(f);
    if (bad) {
        free(buf);
        errno = EIO;
        return NULL;
    }
    *size = n;
    return buf;
}

static int run_file(const char *path)
{
    size_t size = 0;
    unsigned char *data = slurp(path, &size);
    if (!data) {
        fprintf(stderr, "replay: cannot read %s: %s\n", path, strerror(errno));
        return -1;
    }
    fprintf(stderr, "replay: %s (%zu bytes)\n", path, size);
    LLVMFuzzerTestOneInput(data, size);
    free(data);
    return 1;
}

static int not_dot(const struct dirent *d) { return d->d_name[0] != '.'; }

/* Returns the number of inputs run, or -1 if something could not be read. */
static long run_path(const char *path)
{
    struct stat sb;
    if (stat(path, &sb) != 0) {
        fprintf(stderr, "replay: cannot open %s: %s\n", path, strerror(errno));
        return -1;
    }
    if (!S_ISDIR(sb.st_mode))
        return run_file(path);
    struct dirent **list;
    int n = scandir(path, &list, not_dot, alphasort);
    if (n < 0) {
        fprintf(stderr, "replay: cannot list %s: %s\n", path, strerror(errno));
        return -1;
    }
    long count = 0;
    for (int i = 0; i < n; i++) {
        size_t len = strlen(path) + strlen(list[i]->d_name) + 2;
        char *p = malloc(len);
        if (p) {
            snprintf(p, len, "%s/%s", path, list[i]->d_name);
            struct stat fb;
            if (stat(p, &fb) == 0 && S_ISREG(fb.st_mode)) {
                if (run_file(p) < 0)
                    count = -1;
                else if (count >= 0)
                    count++;
            }
            free(p);
        }
        free(list[i]);
    }
    free(list);
    return count;
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: %s FILE_OR_DIR...\n", argv[0]);
        return 2;
    }
    long total = 0;
    int status = 0;
    for (int i = 1; i < argc; i++) {
        long k = run_path(argv[i]);
        if (k < 0)
            status = 1;
        else
            total += k;
    }
    if (total == 0) {
        fprintf(stderr, "replay: no inputs found\n");
        status = 1;
    }
    if (status == 0)
        printf("replay: %ld inputs ran clean\n", total);
    return status;
}
