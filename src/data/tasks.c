/*
 * tasks.c - the built-in algorithmic tasks over digits 0-9 (tgrad_data.h, "Algorithmic
 * tasks"): random digit sequences and their copy, reversal or sorted order as targets.
 */
#include "data.h"

#include <string.h>

/* splitmix64 (Steele et al. 2014): the held-out sequences' private generator. */
static uint64_t sm64(uint64_t *s)
{
    uint64_t z = (*s += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

/* The targets of one sequence x (T digits): copy, reversal, or the digits sorted (counting). */
static void make_targets(tg_task_kind k, int64_t T, const int32_t *x, int32_t *y)
{
    if (k == TG_TASK_COPY) {
        memcpy(y, x, sizeof(int32_t) * (size_t)T);
    } else if (k == TG_TASK_REVERSE) {
        for (int64_t t = 0; t < T; t++)
            y[t] = x[T - 1 - t];
    } else {
        int64_t count[10] = {0};
        for (int64_t t = 0; t < T; t++)
            count[x[t]]++;
        int64_t o = 0;
        for (int d = 0; d < 10; d++)
            for (int64_t j = 0; j < count[d]; j++)
                y[o++] = d;
    }
}

static bool args_ok(tg_task_kind k, int64_t B, int64_t T, const int32_t *ids,
                    const int32_t *targets)
{
    return (k == TG_TASK_COPY || k == TG_TASK_REVERSE || k == TG_TASK_SORT) && B >= 1 &&
           T >= 1 && ids && targets;
}

const char *tg_task_name(tg_task_kind k)
{
    return k == TG_TASK_COPY ? "copy" : k == TG_TASK_REVERSE ? "reverse"
                                      : k == TG_TASK_SORT    ? "sort"
                                                             : NULL;
}

tg_status tg_task_batch(tg_task_kind k, uint64_t *rng_state, int64_t B, int64_t T,
                        int32_t *ids, int32_t *targets)
{
    if (!rng_state || !args_ok(k, B, T, ids, targets))
        return TG_ERR_ARG;
    for (int64_t b = 0; b < B; b++) {
        for (int64_t t = 0; t < T; t++)
            ids[b * T + t] = (int32_t)(sm64(rng_state) % 10);
        make_targets(k, T, ids + b * T, targets + b * T);
    }
    return TG_OK;
}

tg_status tg_task_train_batch(tg_ctx *ctx, tg_task_kind k, int64_t B, int64_t T, int32_t *ids,
                              int32_t *targets)
{
    if (!ctx)
        return TG_ERR_ARG;
    tg__begin(ctx);
    if (!args_ok(k, B, T, ids, targets)) {
        tg__run_err(ctx, TG_ERR_ARG, "tg_task_train_batch", "unknown task %d, B %lld or T %lld "
                    "< 1, or NULL arrays", (int)k, (long long)B, (long long)T);
        return TG_ERR_ARG;
    }
    for (int64_t b = 0; b < B; b++) {
        for (int64_t t = 0; t < T; t++)
            ids[b * T + t] = (int32_t)(tg_rng_u64(ctx) % 10);
        make_targets(k, T, ids + b * T, targets + b * T);
    }
    return TG_OK;
}
