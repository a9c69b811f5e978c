/*
 * dot.h - internal: the Graphviz DOT text of a graph (src/graph/dot.c), written through a byte
 * sink. The path-based and stream writers (tg_graph_write_dot*, src/io/dotfile.c) wrap it.
 */
#ifndef TG_DOT_H
#define TG_DOT_H

#include "core.h"

/* A byte sink: consume all @p size bytes and return 0, or return an errno value. (The same
 * signature as tg_writer's write function, tgrad_io.h.) */
typedef int (*tg__dot_put_fn)(void *user, const void *data, size_t size);

/* Every TG_DOT_* flag. */
#define TG__DOT_ALL_FLAGS (TG_DOT_BACKWARD | TG_DOT_LEFT_RIGHT)

/* The context of @p g (NULL for a NULL or empty graph). */
tg_ctx *tg__dot_ctx(const tg_graph *g);

/* Validate the arguments (records TG_ERR_ARG naming fn on the graph's context). */
tg_status tg__dot_check(const tg_graph *g, int flags, const char *fn);

/* Write the DOT text of @p g through @p put. Returns TG_OK; TG_ERR_NOMEM (recorded, naming
 * fn); or TG_ERR_IO with the sink's errno in *put_errno and nothing recorded (the caller words
 * the message). Arguments must have passed tg__dot_check. */
tg_status tg__dot_emit(const tg_graph *g, int flags, const char *fn, tg__dot_put_fn put,
                       void *user, int *put_errno);

#endif
