/*
 * par.c - the blocked products' task scheduler (par.h): one atomic task counter, per-buffer
 * and per-row-group completion counters, waits only on tasks that are already taken.
 */
#define _POSIX_C_SOURCE 200809L /* sched_yield */
#include "par.h"
#include "core.h"

#include <stdatomic.h>
#if defined(__unix__)
#include <sched.h>
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
} sched_state;

/* Waits until *x >= v: the task that makes it so is running on another thread (it was taken
 * earlier), usually for microseconds; past ~1000 polls the CPU is given up between polls, in
 * case that thread waits for this core. */
static void wait_ge(atomic_llong *x, int64_t v)
{
    for (int spins = 0; atomic_load_explicit(x, memory_order_acquire) < v; spins++) {
        if (spins < 1000) {
#if defined(__x86_64__) || defined(__i386__)
            _mm_pause();
#endif
        } else {
#if defined(__unix__)
            sched_yield();
#endif
        }
    }
}

/* Task t: block b = t / (np + nr); within a block the np pack tasks come first. */
static void run_task(sched_state *st, int64_t t, int thread)
{
    const tg__sched *s = st->s;
    int64_t per = s->np + s->nr, b = t / per, o = t % per;
    int buf = (int)(b % 2);
    if (o < s->np) {
        /* the row tasks of blocks b - 2, b - 4, ... (this buffer's earlier blocks) are done */
        wait_ge(&st->done[buf], (b / 2) * s->nr);
        s->pack(s->arg, b, o, buf);
        atomic_fetch_add_explicit(&st->packed[buf], 1, memory_order_release);
        return;
    }
    int64_t r = o - s->np;
    wait_ge(&st->packed[buf], (b / 2 + 1) * s->np); /* block b is packed */
    wait_ge(&st->rowdone[r], b);                    /* row group r has blocks 0 .. b-1 */
    s->rows(s->arg, b, r, buf, thread);
    atomic_store_explicit(&st->rowdone[r], b + 1, memory_order_release);
    atomic_fetch_add_explicit(&st->done[buf], 1, memory_order_release);
}

void tg__sched_run(int nth, const tg__sched *s)
{
    sched_state st;
    st.s = s;
    atomic_init(&st.next, 0);
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
        TG__PRAGMA(omp parallel num_threads(nth))
        {
            int thread = omp_get_thread_num();
            for (;;) {
                int64_t t = atomic_fetch_add_explicit(&st.next, 1, memory_order_relaxed);
                if (t >= total)
                    break;
                run_task(&st, t, thread);
            }
        }
        return;
    }
#endif
    (void)nth;
    for (int64_t t = 0; t < total; t++)
        run_task(&st, t, 0);
}
