/*
 * par.h - the task scheduler of the blocked matrix products (ops/gemm.c, ops/gemm_bf16.c).
 *
 * A product C = op(A) op(B) on several threads is a fixed list of tasks whose count and bounds
 * depend on the shapes only. Blocks b = 0 .. nb-1 (column block, K chunk) in the serial loop
 * order; each block has np pack tasks (slices of op(B)'s block packed into buffer b % 2, shared
 * by every thread) and nr row tasks (row group r of C over that block, reading the packed
 * buffer). The tasks are numbered (block 0's pack tasks; then per block half its row tasks,
 * the next block's pack tasks, the other half) and handed out from one atomic counter: a
 * thread takes the next number when it comes free, so a thread the OS deschedules holds up
 * only the task it is in (and, later, the tasks that need that one).
 *
 * Dependencies, each on tasks with lower numbers (so every task's dependencies are already
 * taken, and the lowest unfinished task can always run: no deadlock):
 *   - pack task of block b: every row task of block b - 2 is done (they read buffer b % 2);
 *   - row task r of block b: every pack task of block b is done, and row task r of block b - 1
 *     is done (a K chunk adds to the C rows the previous chunk wrote, in the serial order).
 * The numbering puts half a block of row tasks between a task and what it needs, so it is
 * usually done already; otherwise the task waits (polling ~20 us, then asleep until a task
 * completes, which frees the core for the thread it waits for).
 *
 * Determinism: every C element is computed by the row tasks of its row group, one block after
 * the other in the serial order, each by one thread; packing only copies. The result is the
 * serial product's, bit for bit, whatever the thread count or the order tasks run in.
 */
#ifndef TG_PAR_H
#define TG_PAR_H

#include "core.h"

#include <stdint.h>

/* At most this many row groups (the caller sizes the groups; the scheduler keeps one counter
 * per group). */
#define TG__SCHED_MAX_ROWS 64

typedef struct tg__sched {
    int64_t nb;  /* blocks */
    int64_t np;  /* pack tasks per block (>= 1; a task may have nothing to pack) */
    int64_t nr;  /* row tasks per block, 1 .. TG__SCHED_MAX_ROWS */
    /* pack task i of block b into buffer buf (0 or 1) */
    void (*pack)(void *arg, int64_t b, int64_t i, int buf);
    /* row task r of block b reading buffer buf, on thread `thread` of the region (its index for
     * private workspace) */
    void (*rows)(void *arg, int64_t b, int64_t r, int buf, int thread);
    void *arg;
    tg__par_gov *gov; /* the governor record the region reports to (core.h), or NULL */
} tg__sched;

/* The GEMM's governor size class of products of about `flops`: one per power of two (0 .. 39),
 * the `cls` of its records in a governor table (core.h, tg__gov_at with site "gemm"). */
int tg__gemm_gov_class(double flops);

/* Runs every task of s in one parallel region of nth threads (nth >= 2 for two buffers to make
 * sense; nth == 1 or no OpenMP: all tasks in order on the calling thread). */
void tg__sched_run(int nth, const tg__sched *s);

#endif
