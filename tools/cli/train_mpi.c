/*
 * train_mpi.c - `tgrad train` under an MPI launcher (train_mpi.h).
 */
#define _GNU_SOURCE /* open_memstream */
#include "train_mpi.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#ifdef TG_HAVE_MPI
#include "tgrad_dist.h"
#endif

/* The launcher's process count, 0 when no MPI launcher started this process. */
static int launched_size(void)
{
    static const char *vars[] = {"OMPI_COMM_WORLD_SIZE", "PMIX_SIZE", "PMI_SIZE"};
    for (size_t i = 0; i < sizeof vars / sizeof vars[0]; i++) {
        const char *v = getenv(vars[i]);
        if (v && *v)
            return atoi(v) > 0 ? atoi(v) : 1;
    }
    return getenv("PMIX_RANK") ? 1 : 0;
}

bool tmpi_begin(train_mpi *m, char *err, size_t n)
{
    memset(m, 0, sizeof *m);
    m->size = 1;
    int ls = launched_size();
#ifdef TG_HAVE_MPI
    if (ls == 0)
        return true;
    if (MPI_Init(NULL, NULL) != MPI_SUCCESS) {
        snprintf(err, n, "MPI_Init failed");
        return false;
    }
    m->started = true;
    MPI_Comm_rank(MPI_COMM_WORLD, &m->rank);
    MPI_Comm_size(MPI_COMM_WORLD, &m->size);
    if (m->rank > 0) {
        FILE *f = open_memstream(&m->held, &m->held_len);
        if (f) {
            m->real_stderr = stderr;
            stderr = f;
        }
    }
    return true;
#else
    if (ls > 1) {
        snprintf(err, n, "started by an MPI launcher as one of %d processes, but this tgrad was "
                 "built without MPI; every process would train alone and write the same files "
                 "(install libopenmpi-dev and rebuild with meson configure -Dmpi=enabled)", ls);
        return false;
    }
    return true;
#endif
}

/* Ranks > 0: stderr back to the terminal; the held text printed when @p print. */
static void release_stderr(train_mpi *m, bool print)
{
    if (!m->real_stderr)
        return;
    fclose(stderr);
    stderr = m->real_stderr;
    m->real_stderr = NULL;
    if (print && m->held && m->held_len)
        fwrite(m->held, 1, m->held_len, stderr);
    free(m->held);
    m->held = NULL;
}

bool tmpi_agree(train_mpi *m, bool ok, tg_ctx *ctx, int64_t k)
{
#ifdef TG_HAVE_MPI
    if (!m->started) {
        (void)ctx;
        (void)k;
        return ok;
    }
    /* [rank 0 failed, some rank failed] */
    int mine[2] = {m->rank == 0 && !ok, !ok}, all[2] = {0, 0};
    MPI_Allreduce(mine, all, 2, MPI_INT, MPI_LOR, MPI_COMM_WORLD);
    release_stderr(m, !ok && !all[0]);
    if (all[1])
        return false;
    if (m->size > 1) {
        m->dist = tg_dist_new(ctx, MPI_COMM_WORLD, k);
        if (!m->dist)
            return false;
    }
    return true;
#else
    (void)m;
    (void)ctx;
    (void)k;
    return ok;
#endif
}

static tg_status tmpi_reduce(void *user, tg_grad_accum *acc, double *loss)
{
    train_mpi *m = user;
#ifdef TG_HAVE_MPI
    if (m->dist)
        return tg_dist_reduce(m->dist, acc, loss);
#else
    (void)m;
#endif
    return tg_grad_accum_finish(acc, loss);
}

static tg_status tmpi_bcast(void *user, void *buf, size_t bytes)
{
    train_mpi *m = user;
#ifdef TG_HAVE_MPI
    if (m->dist)
        return tg_dist_bcast(m->dist, buf, bytes);
#else
    (void)m;
    (void)buf;
    (void)bytes;
#endif
    return TG_OK;
}

bool tmpi_any(train_mpi *m, bool flag, bool *any)
{
#ifdef TG_HAVE_MPI
    if (m->dist)
        return tg_dist_any(m->dist, flag, any) == TG_OK;
#else
    (void)m;
#endif
    *any = flag;
    return true;
}

void tmpi_stats(const train_mpi *m, double *bytes_per_step, double *seconds_per_step)
{
    *bytes_per_step = *seconds_per_step = 0;
#ifdef TG_HAVE_MPI
    if (m->dist) {
        tg_dist_stats s = tg_dist_get_stats(m->dist);
        if (s.steps > 0) {
            *bytes_per_step = s.total_bytes_sent / (double)s.steps;
            *seconds_per_step = s.total_seconds / (double)s.steps;
        }
    }
#else
    (void)m;
#endif
}

int tmpi_default_threads(const train_mpi *m, int omp_default)
{
    if (m->size <= 1)
        return omp_default;
    const char *v = getenv("OMPI_COMM_WORLD_LOCAL_SIZE");
    long local = v ? atol(v) : 0, cpus = sysconf(_SC_NPROCESSORS_ONLN);
    if (local < 1 || cpus < 1)
        return omp_default;
    long share = cpus / local > 0 ? cpus / local : 1;
    return share < omp_default ? (int)share : omp_default;
}

void tmpi_end(train_mpi *m, bool clean)
{
    release_stderr(m, true);
#ifdef TG_HAVE_MPI
    if (!m->started)
        return;
    if (!clean && m->size > 1) {
        fflush(stdout);
        fflush(stderr);
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    if (m->dist)
        tg_dist_free(m->dist);
    m->dist = NULL;
    MPI_Finalize();
#else
    (void)clean;
#endif
}

tg_train_sync tmpi_sync(train_mpi *m)
{
    return (tg_train_sync){m, tmpi_reduce, tmpi_bcast};
}
