/*
 * train_mpi.h - `tgrad train` under an MPI launcher (`mpirun -np P tgrad train ...`): data
 * parallelism through tgrad_dist.h when tgrad was built with -Dmpi, and a clear error when it
 * was launched by mpirun without it. Without MPI every call is a one-process no-op, so
 * cmd_train.c and train_setup.c have no #ifdef.
 *
 * Ranks > 0 hold their stderr until the setup agreement (tmpi_agree): when every rank fails
 * the same way (a bad option) only rank 0's message is printed; a failure of rank r alone (a
 * file it cannot read) is printed by rank r.
 */
#ifndef TG_TRAIN_MPI_H
#define TG_TRAIN_MPI_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "tgrad_train.h"

typedef struct train_mpi {
    int rank, size;   /* 0 and 1 in one process */
    bool started;     /* MPI_Init was called here */
    void *dist;       /* tg_dist * (with MPI) */
    FILE *real_stderr; /* ranks > 0 before tmpi_agree: stderr is a memory stream */
    char *held;
    size_t held_len;
} train_mpi;

/* Join the MPI job when an MPI launcher started this process (OMPI_COMM_WORLD_SIZE,
 * PMIX_RANK or PMI_SIZE in the environment). False with one line in @p err when launched as
 * one of several processes by a tgrad built without MPI. */
bool tmpi_begin(train_mpi *m, char *err, size_t n);
/* Every rank reports whether its setup succeeded (@p ok); true when all did. On success with
 * P > 1 the data-parallel communicator for @p k micro-batches is made (false, message on
 * @p ctx, if that fails). Releases the held stderr (printed unless rank 0 failed too). */
bool tmpi_agree(train_mpi *m, bool ok, tg_ctx *ctx, int64_t k);
/* The run's step end and broadcast over the ranks (tg_train_sync, tgrad_train.h): reduce ends
 * a step (tg_dist_reduce; P = 1: tg_grad_accum_finish), broadcast sends rank 0's bytes to
 * every rank (P = 1: nothing to do). */
tg_train_sync tmpi_sync(train_mpi *m);
/* Whether @p flag holds on some rank (P = 1: flag). False if the call failed. */
bool tmpi_any(train_mpi *m, bool flag, bool *any);
/* Bytes this rank sent and seconds it spent in the gradient exchange, per step so far. */
void tmpi_stats(const train_mpi *m, double *bytes_per_step, double *seconds_per_step);
/* Threads per process when --threads is not given: @p omp_default (OpenMP's, which follows the
 * CPU binding mpirun chose) capped at the host's CPUs divided by the processes on this host
 * (OMPI_COMM_WORLD_LOCAL_SIZE), so ranks sharing a host never oversubscribe it. */
int tmpi_default_threads(const train_mpi *m, int omp_default);
/* Leave the job: MPI_Finalize after a run every rank finished (@p clean); after a failure on
 * this rank with P > 1, abort the job (MPI_Abort) so no peer waits on it. */
void tmpi_end(train_mpi *m, bool clean);

#endif
