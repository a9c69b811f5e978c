/* data.c - the command line's side of training data (see data.h). */
#define _DEFAULT_SOURCE
#include "train_data.h"
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

tg_text *corpus_load(tg_ctx *ctx, const char *const *paths, int n_paths, double val_fraction,
                     char *err, size_t err_size)
{
    tg_text *t = tg_text_load(ctx, paths, n_paths, val_fraction);
    if (!t) { /* the library names the file as given: "'x': ..." -> "--text 'x': ..." */
        char msg[1200];
        cli_message(ctx, NULL, msg, sizeof msg);
        snprintf(err, err_size, "%s%s", msg[0] == '\'' ? "--text " : "", msg);
    }
    return t;
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
    return tg_task_name(k);
}

