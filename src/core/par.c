/*
 * par.c - the blocked products' task scheduler (par.h): one atomic task counter, per-buffer
 * and per-row-group completion counters, waits only on tasks that are already taken.
 */
#if defined(__linux__)
#define _GNU_SOURCE /* syscall */
#else
#define _POSIX_C_SOURCE 200809L /* nanosleep */
#endif
#include "par.h"
#include "core.h"

#include <stdatomic.h>
#include <string.h>
#include <time.h>
#if defined(__linux__)
#include <linux/futex.h>
#include <sys/syscall.h>
#include <unistd.h>
#endif
#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif

typedef struct {
    const tg__sched *s;
    atomic_llong next;                        /* the next task number to hand out */
    atomic_llong packed[2];                   /* pack tasks done, per buffer (all blocks) */
    atomic_llong done[2];                     /* row tasks done, per buffer (all blocks) */
    atomic_llong rowdone[TG__SCHED_MAX_ROWS]; /* blocks done, per row group */
    atomic_int waiters;                       /* threads asleep (or going to sleep) in wait_ge */
    atomic_int epoch;                         /* bumped by completions while someone waits */
} sched_state;

double tg__now_us(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec * 1e6 + (double)t.tv_nsec * 1e-3;
}

/* ----- the region governor (core.h) ----------------------------------------------------- */
#define GOV_MIN_OFF 1000.0   /* us */
#define GOV_MAX_OFF 256000.0 /* us */

int tg__gov_threads(tg__par_gov *g, int nth)
{
    if (!g || nth <= 1)
        return nth;
    int th = nth;
    if (TG_PAR_MIN != 1 && g->off_until != 0) {
        if (tg__now_us() < g->off_until)
            th = 1;
        else
            g->off_until = 0;
    }
    g->threads = th;
    g->serial += th == 1;
    return th;
}

/* ----- governor tables (core.h) ------------------------------------------------------------ */
void tg__govs_init(tg__govs *t)
{
    memset(t, 0, sizeof *t);
    t->node = -1;
}

static unsigned gov_hash(const char *site, int cls)
{
    uint64_t h =
        ((uint64_t)(uintptr_t)site ^ ((uint64_t)(unsigned)cls << 48)) * 0x9E3779B97F4A7C15ull;
    return (unsigned)(h >> 56); /* 0 .. 255: 2 * TG__GOV_SLOTS buckets */
}

tg__par_gov *tg__gov_at(tg__govs *t, const char *site, int cls)
{
    if (!t)
        return NULL;
    unsigned h = gov_hash(site, cls), mask = 2 * TG__GOV_SLOTS - 1;
    for (unsigned k = 0; k <= mask; k++) {
        unsigned b = (h + k) & mask;
        tg__gov_slot *s;
        if (t->ix[b] == 0) {
            if (t->n == TG__GOV_SLOTS)
                return NULL;
            s = &t->slot[t->n++];
            t->ix[b] = (int16_t)t->n;
            s->site = site;
            s->cls = cls;
        } else {
            s = &t->slot[t->ix[b] - 1];
            if (s->site != site || s->cls != cls)
                continue;
        }
        s->node = t->node;
        return &s->g;
    }
    return NULL;
}

/* A site's name without the build directory's "../" or "./" (__FILE__ is relative to it). */
static const char *site_name(const char *s)
{
    while (s[0] == '.' && (s[1] == '/' || (s[1] == '.' && s[2] == '/')))
        s += s[1] == '/' ? 2 : 3;
    return s;
}

bool tg__govs_entry(const tg__govs *t, int64_t i, tg_par_site *out)
{
    if (!t || !out || i < 0 || i >= t->n)
        return false;
    const tg__gov_slot *s = &t->slot[i];
    memset(out, 0, sizeof *out);
    out->site = site_name(s->site);
    out->size_class = s->cls;
    out->node = s->node;
    out->op = "";
    out->threads = s->g.threads;
    out->regions = s->g.regions;
    out->serial = s->g.serial;
    out->mean_gain_us = s->g.gain;
    out->backoff_us = s->g.backoff;
    out->backing_off = s->g.off_until != 0 && tg__now_us() < s->g.off_until;
    return true;
}

int tg__gemm_gov_class(double flops)
{
    int c = 0;
    while (c < 39 && flops >= 2.0)
        flops /= 2, c++;
    return c;
}

void tg__acct_init(tg__par_acct *a)
{
    memset(a, 0, sizeof *a);
    a->t0 = tg__now_us();
}

void tg__gov_report(tg__par_gov *g, const tg__par_acct *a, int64_t chunks)
{
    if (!g)
        return;
    g->regions++;
    if (TG_PAR_MIN == 1)
        return;
    double t1 = tg__now_us(), pace = 0;
    for (int i = 0; i < TG__ACCT_THREADS; i++)
        if (a->chunks[i] > 0 && a->done[i] > a->first[i]) {
            double p = (a->done[i] - a->first[i]) / (double)a->chunks[i];
            pace = pace == 0 || p < pace ? p : pace;
        }
    if (pace == 0)
        return;
    /* one thread at the fastest thread's pace would have taken pace * chunks */
    double gain = pace * (double)chunks - (t1 - a->t0);
    g->gain = g->judged++ ? 0.75 * g->gain + 0.25 * gain : gain;
    if (g->gain >= 0) {
        g->backoff = 0;
        return;
    }
    g->backoff = g->backoff > 0 ? (2 * g->backoff < GOV_MAX_OFF ? 2 * g->backoff : GOV_MAX_OFF)
                                : GOV_MIN_OFF;
    g->off_until = t1 + g->backoff;
    g->judged = 0;
}

/* Sleeps until st->epoch may differ from e (or ~1 ms passed: the caller checks again). */
static void sleep_on(sched_state *st, int e)
{
#if defined(__linux__)
    struct timespec to = {0, 1000000};
    syscall(SYS_futex, (int *)&st->epoch, FUTEX_WAIT_PRIVATE, e, &to, NULL, 0);
#else
    (void)st, (void)e;
    struct timespec to = {0, 50000};
    nanosleep(&to, NULL);
#endif
}

/* After a task's completion counters are updated: wakes the threads waiting for them. */
static void notify(sched_state *st)
{
    if (atomic_load(&st->waiters) > 0) {
        atomic_fetch_add(&st->epoch, 1);
#if defined(__linux__)
        syscall(SYS_futex, (int *)&st->epoch, FUTEX_WAKE_PRIVATE, 1 << 30, NULL, NULL, 0);
#endif
    }
}

/* Waits until *x >= v. The task that makes it so was taken earlier by another thread and
 * usually ends within microseconds: poll for ~20 us, then sleep until a completion. Sleeping
 * matters when other processes want the cores: it frees this core, so the OS can move the
 * thread that holds the task here instead of leaving it queued behind another process. */
static void wait_ge(sched_state *st, atomic_llong *x, int64_t v)
{
    if (atomic_load(x) >= v)
        return;
    double t0 = tg__now_us();
    while (tg__now_us() - t0 < 20)
        for (int i = 0; i < 64; i++) {
            if (atomic_load(x) >= v)
                return;
#if defined(__x86_64__) || defined(__i386__)
            _mm_pause();
#endif
        }
    atomic_fetch_add(&st->waiters, 1);
    for (;;) {
        int e = atomic_load(&st->epoch);
        if (atomic_load(x) >= v)
            break;
        sleep_on(st, e);
    }
    atomic_fetch_sub(&st->waiters, 1);
}

/* Pack task i of block b: the row tasks of blocks b - 2, b - 4, ... (this buffer's earlier
 * blocks) must be done. */
static void pack_task(sched_state *st, int64_t b, int64_t i)
{
    const tg__sched *s = st->s;
    int buf = (int)(b % 2);
    wait_ge(st, &st->done[buf], (b / 2) * s->nr);
    s->pack(s->arg, b, i, buf);
    atomic_fetch_add(&st->packed[buf], 1);
    notify(st);
}

/* Row task r of block b: block b must be packed and row group r done with blocks 0 .. b-1. */
static void rows_task(sched_state *st, int64_t b, int64_t r, int thread)
{
    const tg__sched *s = st->s;
    int buf = (int)(b % 2);
    wait_ge(st, &st->packed[buf], (b / 2 + 1) * s->np);
    wait_ge(st, &st->rowdone[r], b);
    s->rows(s->arg, b, r, buf, thread);
    atomic_store(&st->rowdone[r], b + 1);
    atomic_fetch_add(&st->done[buf], 1);
    notify(st);
}

/* Task number t. The order: block 0's pack tasks; then per block b its first h = nr / 2 row
 * tasks, block b + 1's pack tasks (none after the last block), its other row tasks. A pack
 * task of block b + 1 then comes at least h tasks after the last row task of block b - 1 (the
 * buffer it overwrites), and a row task of block b + 1 at least h tasks after the pack tasks
 * it reads: with tasks of similar length, what a task needs is done by the time it is taken
 * unless the thread doing it was stopped. */
static void run_task(sched_state *st, int64_t t, int thread)
{
    const tg__sched *s = st->s;
    int64_t np = s->np, nr = s->nr, h = nr / 2;
    if (t < np) {
        pack_task(st, 0, t);
        return;
    }
    int64_t b = (t - np) / (nr + np), o = (t - np) % (nr + np);
    if (o >= h && o < h + np && b + 1 < s->nb)
        pack_task(st, b + 1, o - h);
    else
        rows_task(st, b, o < h ? o : b + 1 < s->nb ? o - np : o, thread);
}

void tg__sched_run(int nth, const tg__sched *s)
{
    sched_state st;
    st.s = s;
    atomic_init(&st.next, 0);
    atomic_init(&st.waiters, 0);
    atomic_init(&st.epoch, 0);
    for (int i = 0; i < 2; i++) {
        atomic_init(&st.packed[i], 0);
        atomic_init(&st.done[i], 0);
    }
    for (int64_t r = 0; r < s->nr; r++)
        atomic_init(&st.rowdone[r], 0);
    int64_t total = s->nb * (s->np + s->nr);
#ifdef TG_HAVE_OPENMP
    if (nth > 1) {
        /* Race-free: tasks write disjoint memory (a pack task its panels of one buffer, a row
         * task its C rows and its thread's workspace) and are ordered by the waits above. */
        tg__par_acct acct;
        tg__acct_init(&acct);
        TG__PRAGMA(omp parallel num_threads(nth))
        {
            int thread = omp_get_thread_num();
            for (;;) {
                int64_t t = atomic_fetch_add_explicit(&st.next, 1, memory_order_relaxed);
                if (t >= total)
                    break;
                tg__acct_chunk(&acct, thread);
                run_task(&st, t, thread);
            }
            tg__acct_done(&acct, thread);
        }
        if (s->gov)
            tg__gov_report(s->gov, &acct, total);
        return;
    }
#endif
    (void)nth;
    for (int64_t t = 0; t < total; t++)
        run_task(&st, t, 0);
}
