/*
 * dist.c - data parallelism over MPI (include/tgrad_dist.h): a tg_grad_transport made of MPI
 * point-to-point calls on a duplicated communicator that returns errors instead of aborting.
 * The summation schedule itself is tg_grad_accum_combine()'s (src/train/accum.c); this file
 * only moves bytes. Built into libtgrad_dist with the meson feature `mpi`.
 *
 * This file uses only the public headers (errors through tg_ctx_set_error(), memory from
 * malloc), so libtgrad_dist links against the shared libtgrad.so as well as the static
 * libtgrad.a: the library's internal symbols are hidden in the shared object.
 */
#define _POSIX_C_SOURCE 200809L /* clock_gettime (mpi.h defines it only with some compilers) */
#include "tgrad_dist.h"

#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define TAG_GRAD 7101

struct tg_dist {
    tg_ctx *ctx;
    MPI_Comm comm;
    int rank, size;
    int64_t k;
    size_t bucket;
    tg_dist_stats stats;
};

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* "MPI_Send to rank 1: <MPI's message>" into err. */
static int mpi_fail(int rc, const char *call, int peer, char *err, size_t n)
{
    char msg[MPI_MAX_ERROR_STRING];
    int len = 0;
    if (MPI_Error_string(rc, msg, &len) != MPI_SUCCESS)
        snprintf(msg, sizeof msg, "error %d", rc);
    snprintf(err, n, "%s with rank %d failed: %s", call, peer, msg);
    return 1;
}

static int t_send(void *u, int to, const void *buf, size_t bytes, char *err, size_t n)
{
    tg_dist *d = u;
    int rc = MPI_Send(buf, (int)bytes, MPI_BYTE, to, TAG_GRAD, d->comm);
    return rc == MPI_SUCCESS ? 0 : mpi_fail(rc, "MPI_Send", to, err, n);
}

static int t_recv(void *u, int from, void *buf, size_t bytes, char *err, size_t n)
{
    tg_dist *d = u;
    int rc = MPI_Recv(buf, (int)bytes, MPI_BYTE, from, TAG_GRAD, d->comm, MPI_STATUS_IGNORE);
    return rc == MPI_SUCCESS ? 0 : mpi_fail(rc, "MPI_Recv", from, err, n);
}

static int t_sendrecv(void *u, int peer, const void *sbuf, void *rbuf, size_t bytes, char *err,
                      size_t n)
{
    tg_dist *d = u;
    int rc = MPI_Sendrecv(sbuf, (int)bytes, MPI_BYTE, peer, TAG_GRAD, rbuf, (int)bytes, MPI_BYTE,
                          peer, TAG_GRAD, d->comm, MPI_STATUS_IGNORE);
    return rc == MPI_SUCCESS ? 0 : mpi_fail(rc, "MPI_Sendrecv", peer, err, n);
}

tg_dist *tg_dist_new(tg_ctx *ctx, MPI_Comm comm, int64_t k)
{
    static const char *fn = "tg_dist_new";
    if (!ctx)
        return NULL;
    int inited = 0;
    MPI_Initialized(&inited);
    if (!inited) {
        tg_ctx_set_error(ctx, TG_ERROR_BUILD, TG_ERR_STATE, fn,
                         "MPI is not initialized (call MPI_Init first)");
        return NULL;
    }
    int size = 0, rank = 0;
    if (MPI_Comm_size(comm, &size) != MPI_SUCCESS || MPI_Comm_rank(comm, &rank) != MPI_SUCCESS) {
        tg_ctx_set_error(ctx, TG_ERROR_BUILD, TG_ERR_ARG, fn, "not a valid communicator");
        return NULL;
    }
    if (k < 1 || k % size != 0) {
        tg_ctx_set_error(ctx, TG_ERROR_BUILD, TG_ERR_ARG, fn,
                         "%" PRId64 " micro-batches per step do not split evenly over %d "
                         "processes (the number of processes must divide k)", k, size);
        return NULL;
    }
    tg_dist *d = calloc(1, sizeof *d);
    if (!d) {
        tg_ctx_set_error(ctx, TG_ERROR_BUILD, TG_ERR_NOMEM, fn, "allocating %zu bytes failed",
                         sizeof *d);
        return NULL;
    }
    int rc = MPI_Comm_dup(comm, &d->comm);
    if (rc == MPI_SUCCESS)
        rc = MPI_Comm_set_errhandler(d->comm, MPI_ERRORS_RETURN);
    if (rc != MPI_SUCCESS) {
        char err[600];
        mpi_fail(rc, "MPI_Comm_dup", rank, err, sizeof err);
        free(d);
        tg_ctx_set_error(ctx, TG_ERROR_BUILD, TG_ERR_IO, fn, "%s", err);
        return NULL;
    }
    d->ctx = ctx;
    d->rank = rank;
    d->size = size;
    d->k = k;
    return d;
}

int tg_dist_rank(const tg_dist *d) { return d ? d->rank : 0; }
int tg_dist_size(const tg_dist *d) { return d ? d->size : 1; }
int64_t tg_dist_first(const tg_dist *d) { return d ? d->rank * (d->k / d->size) : 0; }
int64_t tg_dist_count(const tg_dist *d) { return d ? d->k / d->size : 0; }

void tg_dist_set_bucket_bytes(tg_dist *d, size_t bytes)
{
    if (d)
        d->bucket = bytes > INT_MAX ? (size_t)INT_MAX : bytes;
}

tg_status tg_dist_reduce(tg_dist *d, tg_grad_accum *acc, double *loss)
{
    if (!d || !acc)
        return TG_ERR_ARG;
    tg_grad_transport tr = {d, d->rank, d->size, d->bucket, t_send, t_recv, t_sendrecv};
    double t0 = now_s();
    size_t sent = 0;
    tg_status s = tg_grad_accum_combine(acc, &tr, loss, &sent);
    double dt = now_s() - t0;
    if (s == TG_OK) {
        d->stats.steps++;
        d->stats.last_bytes_sent = sent;
        d->stats.last_seconds = dt;
        d->stats.total_bytes_sent += (double)sent;
        d->stats.total_seconds += dt;
    }
    return s;
}

tg_status tg_dist_bcast(tg_dist *d, void *buf, size_t bytes)
{
    if (!d || (!buf && bytes) || bytes > INT_MAX)
        return TG_ERR_ARG;
    int rc = MPI_Bcast(buf, (int)bytes, MPI_BYTE, 0, d->comm);
    if (rc != MPI_SUCCESS) {
        char err[600];
        mpi_fail(rc, "MPI_Bcast", 0, err, sizeof err);
        return tg_ctx_set_error(d->ctx, TG_ERROR_RUN, TG_ERR_IO, "tg_dist_bcast", "%s", err);
    }
    return TG_OK;
}

tg_status tg_dist_any(tg_dist *d, bool flag, bool *any)
{
    if (!d || !any)
        return TG_ERR_ARG;
    int in = flag, out = 0;
    int rc = MPI_Allreduce(&in, &out, 1, MPI_INT, MPI_LOR, d->comm);
    if (rc != MPI_SUCCESS) {
        char err[600];
        mpi_fail(rc, "MPI_Allreduce", -1, err, sizeof err);
        return tg_ctx_set_error(d->ctx, TG_ERROR_RUN, TG_ERR_IO, "tg_dist_any", "%s", err);
    }
    *any = out != 0;
    return TG_OK;
}

tg_dist_stats tg_dist_get_stats(const tg_dist *d)
{
    tg_dist_stats s;
    memset(&s, 0, sizeof s);
    return d ? d->stats : s;
}

void tg_dist_free(tg_dist *d)
{
    if (!d)
        return;
    MPI_Comm_free(&d->comm);
    free(d);
}
