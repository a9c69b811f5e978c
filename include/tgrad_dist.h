/**
 * @file tgrad_dist.h
 * @brief Data-parallel training over MPI: the micro-batches of each optimizer step split over
 *        the ranks of a communicator, gradients combined in the single-process tree order, so
 *        the parameters after N steps on P processes are bitwise those of one process.
 *
 * Built only with the meson feature `-Dmpi=enabled` (or `auto` when Open MPI's development
 * files are installed) as libtgrad_dist.so and libtgrad_dist.a, described by `tgrad-dist.pc`
 * (which requires `tgrad` and Open MPI's `ompi-c`):
 * `cc app.c $(pkg-config --cflags --libs tgrad-dist)` links the shared libraries,
 * `cc -static app.c $(pkg-config --static --cflags --libs tgrad-dist)` (or `-Wl,-Bstatic`
 * around the tgrad libraries) the static ones. The core library never depends on MPI.
 *
 * The pattern, per optimizer step of k micro-batches (tgrad_train.h, "Gradient accumulation"):
 * @code
 *   tg_dist *d = tg_dist_new(ctx, MPI_COMM_WORLD, k);
 *   tg_grad_accum *acc = tg_grad_accum_new(ctx, 0, NULL, k, tg_dist_first(d), tg_dist_count(d));
 *   // every rank draws the same global batch; rank r runs micro-batches first .. first+count-1
 *   for (int64_t i = tg_dist_first(d); i < tg_dist_first(d) + tg_dist_count(d); i++) {
 *       // zero grads, set micro-batch i, forward, backward seeded 1/k
 *       tg_grad_accum_push(acc, loss_i / k);
 *   }
 *   double loss; tg_dist_reduce(d, acc, &loss); // every rank: the global gradients and loss
 *   tg_optim_step(opt, lr);                     // identical on every rank
 * @endcode
 *
 * **Why not MPI_Allreduce(MPI_SUM).** The MPI standard leaves the order (and grouping) of a
 * reduction to the implementation; Open MPI picks its algorithm by message size and process
 * count, so the float sum, and with it the trained parameters, would change with P and even
 * with the message size. tg_dist_reduce() moves bytes with point-to-point calls and adds them
 * itself, in the fixed tree (tg_grad_accum_combine()), in buckets of a few MiB.
 *
 * **Guarantees.** For any P dividing k, every rank ends each step with the bits one process
 * gets running all k micro-batches (same CPU type: FMA and SIMD paths must match across hosts;
 * thread counts may differ). Errors in MPI calls are returned, never fatal: tgrad's
 * communicator is a duplicate with MPI_ERRORS_RETURN. A rank that dies mid-step is noticed by
 * the MPI runtime (`mpirun` ends the job); tgrad never waits on a dead peer with a timeout.
 */
#ifndef TGRAD_DIST_H
#define TGRAD_DIST_H

#include <mpi.h>

#include "tgrad_train.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct tg_dist tg_dist;

/**
 * Join @p comm (duplicated; MPI must be initialized) for steps of @p k micro-batches: rank r of
 * P holds micro-batches r k/P .. (r+1) k/P - 1. Collective over @p comm.
 * Errors (NULL, message on @p ctx): ::TG_ERR_ARG (k < 1, P does not divide k),
 * ::TG_ERR_IO (an MPI call failed: its message), ::TG_ERR_NOMEM. Free with tg_dist_free()
 * (before or after tg_ctx_free(): the record comes from malloc, not from the context).
 */
TG_API tg_dist *tg_dist_new(tg_ctx *ctx, MPI_Comm comm, int64_t k);
/** This process's rank r and the number of processes P. */
TG_API int tg_dist_rank(const tg_dist *d);
TG_API int tg_dist_size(const tg_dist *d);
/** This rank's micro-batches: first = r k / P, count = k / P. */
TG_API int64_t tg_dist_first(const tg_dist *d);
TG_API int64_t tg_dist_count(const tg_dist *d);
/** Largest message in bytes (0: 4 MiB, the default). Gradients go out in buckets this big. */
TG_API void tg_dist_set_bucket_bytes(tg_dist *d, size_t bytes);

/**
 * End a step: @p acc (made for this rank's micro-batches, all pushed) is combined with every
 * other rank's by tg_grad_accum_combine() over MPI point-to-point calls; then every rank's
 * parameter gradients and @p loss (may be NULL) hold the single-process tree sum. Collective.
 * Errors (run-time): those of tg_grad_accum_combine(); ::TG_ERR_IO names the failing MPI call.
 */
TG_API tg_status tg_dist_reduce(tg_dist *d, tg_grad_accum *acc, double *loss);
/** Copy @p bytes at @p buf from rank 0 to every rank (MPI_Bcast). Collective. ::TG_ERR_IO. */
TG_API tg_status tg_dist_bcast(tg_dist *d, void *buf, size_t bytes);
/** @p any = whether @p flag is true on some rank (an integer MPI_LOR). Collective. */
TG_API tg_status tg_dist_any(tg_dist *d, bool flag, bool *any);

/** Communication of the last tg_dist_reduce() and the totals since tg_dist_new(). */
typedef struct tg_dist_stats {
    int64_t steps;            /**< tg_dist_reduce() calls that succeeded */
    size_t last_bytes_sent;   /**< bytes this rank sent in the last one */
    double last_seconds;      /**< wall seconds in the last one (waiting for peers included) */
    double total_bytes_sent;  /**< bytes this rank sent in all of them */
    double total_seconds;     /**< wall seconds in all of them */
} tg_dist_stats;
TG_API tg_dist_stats tg_dist_get_stats(const tg_dist *d);

/** Free the duplicated communicator (collective) and @p d. NULL: no-op. */
TG_API void tg_dist_free(tg_dist *d);

#ifdef __cplusplus
}
#endif

#endif
