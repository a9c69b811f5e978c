/*
 * dotfile.c - layer 5: a graph's DOT text (src/graph/dot.c) saved like every tgrad file, through
 * the atomic writer (io.c: temporary file, fsync, rename), or sent to a caller's byte sink.
 */
#include "graph/dot.h"
#include "io.h"

typedef struct {
    const tg_graph *g;
    int flags;
    const char *fn;
} dot_args;

static tg_status dot_emit(tg_ctx *ctx, const tg_writer *w, void *user)
{
    const dot_args *a = user;
    int e = 0;
    tg_status s = tg__dot_emit(a->g, a->flags, a->fn, w->write, w->user, &e);
    if (s == TG_ERR_IO) {
        char eb[128];
        tg__err(ctx, TG_ERR_IO, a->fn, "cannot write the graph: %s",
                tg__strerror(e, eb, sizeof eb));
    }
    return s;
}

/* Exactly one of path and w. */
static tg_status write_dot_io(tg_ctx *ctx, const tg_graph *g, const char *path,
                              const tg_writer *w, int flags, const tg_write_opts *opts,
                              const char *fn)
{
    tg_status s = tg__dot_check(g, flags, fn);
    if (s != TG_OK)
        return s;
    dot_args a = {g, flags, fn};
    if (!path && !w) {
        tg__err(ctx, TG_ERR_ARG, fn, "%s is NULL", "path");
        return TG_ERR_ARG;
    }
    if (w) {
        if (!w->write) {
            tg__err(ctx, TG_ERR_ARG, fn, "the writer's write function is NULL");
            return TG_ERR_ARG;
        }
        return dot_emit(ctx, w, &a);
    }
    return tg__write_atomic(ctx, fn, path, opts, dot_emit, &a);
}

/* Common entry; its errors are run-time errors (tg__io_enter). */
static tg_status write_dot(const tg_graph *g, const char *path, const tg_writer *w, int flags,
                           const tg_write_opts *opts, const char *fn)
{
    tg_ctx *ctx = tg__dot_ctx(g);
    if (!ctx)
        return TG_ERR_ARG;
    tg__io_enter(ctx);
    tg_status s = write_dot_io(ctx, g, path, w, flags, opts, fn);
    tg__io_leave(ctx);
    return s;
}

tg_status tg_graph_write_dot(const tg_graph *g, const char *path, int flags)
{
    return write_dot(g, path, NULL, flags, NULL, "tg_graph_write_dot");
}

tg_status tg_graph_write_dot_opts(const tg_graph *g, const char *path, int flags,
                                  const tg_write_opts *opts)
{
    return write_dot(g, path, NULL, flags, opts, "tg_graph_write_dot");
}

tg_status tg_graph_write_dot_to(const tg_graph *g, const tg_writer *w, int flags)
{
    if (!w) {
        tg_ctx *ctx = tg__dot_ctx(g);
        if (ctx) {
            tg__io_enter(ctx);
            tg__err(ctx, TG_ERR_ARG, "tg_graph_write_dot_to", "writer is NULL");
            tg__io_leave(ctx);
        }
        return TG_ERR_ARG;
    }
    return write_dot(g, NULL, w, flags, NULL, "tg_graph_write_dot_to");
}
