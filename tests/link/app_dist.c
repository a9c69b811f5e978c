/*
 * app_dist.c - an embedder of libtgrad_dist, compiled against the installed headers and linked
 * with `pkg-config tgrad-dist` (tests/link/install_link.sh), run as one MPI process: join
 * MPI_COMM_WORLD, broadcast, and a refused configuration reported through the context.
 */
#include <stdio.h>
#include <string.h>

#include "tgrad_dist.h"

int main(int argc, char **argv)
{
    if (MPI_Init(&argc, &argv) != MPI_SUCCESS)
        return 1;
    tg_ctx *ctx = tg_ctx_new();
    int ok = ctx != NULL;
    /* k = 0 micro-batches: refused as a build error naming the call */
    tg_dist *bad = ok ? tg_dist_new(ctx, MPI_COMM_WORLD, 0) : NULL;
    ok = ok && !bad && tg_ctx_status(ctx) == TG_ERR_ARG &&
         !strncmp(tg_ctx_message(ctx), "tg_dist_new: ", 13);
    if (ctx)
        printf("refused: %s\n", tg_ctx_message(ctx));
    tg_ctx_clear_error(ctx);
    tg_dist *d = ok ? tg_dist_new(ctx, MPI_COMM_WORLD, 2) : NULL;
    int v = 42;
    ok = ok && d && tg_dist_size(d) >= 1 && tg_dist_count(d) >= 1 &&
         tg_dist_bcast(d, &v, sizeof v) == TG_OK && v == 42;
    printf("rank %d of %d, micro-batches %lld..: %s\n", tg_dist_rank(d), tg_dist_size(d),
           (long long)tg_dist_first(d), ok ? "ok" : "WRONG");
    tg_dist_free(d);
    tg_ctx_free(ctx);
    MPI_Finalize();
    return ok ? 0 : 1;
}
