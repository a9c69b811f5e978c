/*
 * graph_internal.h - layer 3: the graph record shared by order.c (build, accessors), plan.c
 * (lifetimes and placement over the joint forward + backward schedule), exec.c (binding and
 * forward, the NaN/Inf tripwire) and autodiff.c (backward).
 *
 * Steps of the joint schedule: forward of node i is step i; backward of node i is step
 * 2n - 1 - i; "backward begins" is step n (seeds are written before node n-1's rule runs).
 */
#ifndef TG_GRAPH_INTERNAL_H
#define TG_GRAPH_INTERNAL_H

#include "registry.h"
#include "values.h"

#define TG__FOREVER INT64_MAX

/* One planned buffer: bytes at arena + off, live over steps [start, end]. */
typedef struct tg__buf {
    int64_t start, end;
    int64_t size;       /* bytes, multiple of 64 */
    int64_t off;        /* byte offset in the arena (set by placement) */
    int64_t node;       /* owning node (index), for in-place transfer and poison */
    int kind;           /* TG__BUF_* */
    int64_t alias;      /* in place: index of the buffer whose slot this one takes, or -1 */
} tg__buf;

enum { TG__BUF_OUT, TG__BUF_SAVED, TG__BUF_GRAD, TG__BUF_FRESH, TG__BUF_WSF, TG__BUF_WSB };

/* A shared arena (tg_arena_new; arena.c): one memory block for several graphs of a context, of
 * which one runs at a time. */
struct tg_arena {
    tg_ctx *ctx;
    tg_arena *next, *prev;  /* the context's list of live arenas */
    uint64_t seq;           /* allocation number at creation (tg_ctx_rewind) */
    char *base;             /* the block (owned by the context: a rewind to a mark after the
                               arena's creation keeps it), or NULL while empty */
    size_t bytes;           /* its size: the largest planned need of the arena's graphs */
    uint64_t gen;           /* run generation: +1 each time a graph other than `last` starts
                               running (a graph records it when it binds: tg__stale) */
    tg_graph *last;         /* the graph whose values the block holds (it ran last), or NULL */
    int64_t n_graphs;       /* live graphs built with it */
};

struct tg_graph {
    tg_ctx *ctx;
    tg_graph *next, *prev;  /* the context's list of live graphs */
    uint64_t seq;           /* allocation number at creation (tg_ctx_rewind) */
    int64_t n;              /* nodes in topological order (leaves included) */
    tg_tensor **nodes;
    int64_t n_leaves;       /* leaves that receive gradients, in topological order */
    tg_tensor **leaves;
    int64_t *leaf_node;     /* per leaf: its node index */
    int n_outputs;
    tg_tensor **outputs;
    bool no_grad, no_reuse, poison, anomaly, retain;
    /* tg_gradcheck's accumulation check (autodiff.c): backward runs each rule a second time on
     * its inputs' gradient buffers pre-filled with non-zero values, as a second consumer would
     * have left them, and records the first rule whose contribution was not added */
    bool check_accum;
    struct {
        const tg_tensor *node, *src; /* the rule's node and the input it did not add into */
        int64_t index;               /* the element */
        double prefill, got, want;   /* its value before, after, and prefill + contribution */
    } accum_bad;
    bool forwarded, fwd_failed;
    bool bwd_ran;           /* a backward has run (op results' gradients are readable) */
    bool backwarded;        /* a backward ran since the last forward (without retain: the
                               values it read may be overwritten) */
    int nt;                 /* thread count the workspace was planned for */
    int precision;          /* tg_graph_opts.precision (TG_PRECISION_*) */
    /* this run's memory, per node (bound by tg__bind; what the kernels' call records and the
     * accessors read): values (views: their first element), gradients (leaves: this call's,
     * in backward), saved values; NULL where none */
    void **val, **gval, **sval;
    /* the node index of a tensor (tg__node_at): open addressing over the node pointers,
     * ix_mask + 1 slots (a power of two, at least twice the nodes) */
    tg_tensor **ix_key;
    int64_t *ix_val;
    uint64_t ix_mask;
    /* this graph's run-time state of its nodes (not the tensors': two graphs over one node
     * keep their own) */
    tg__govs *govs;         /* the governors of the parallel sites its kernels and its own
                               loops ran (the call record's govs; tg_graph_par_site) */
    unsigned char *reused;  /* per node: after this graph's last run, an op result that was
                               neither an output nor kept: its bytes went to other values */
    uint64_t gen_at;        /* the shared arena's generation when this graph last bound its
                               nodes: differing, their bytes are another graph's (tg__stale) */
    int64_t *src_at;        /* node index of source k of node i at [i * TG_MAX_SRC + k], or -1 */
    int64_t *base_at;       /* per node: its base's node index (views), or -1 */
    unsigned char *needed;  /* per node, scratch of backward */
    unsigned char *minf_ok; /* per node: -inf is expected (attention masks) */
    unsigned char *persist; /* per node: output or kept (data and grad never freed) */
    tg_anomaly_report report;
    /* the plan */
    int64_t n_bufs;
    tg__buf *bufs;
    int64_t *out_buf, *saved_buf, *grad_buf, *wsf_buf, *wsb_buf; /* per node: buffer or -1 */
    int64_t *fresh_buf;     /* per leaf: this call's gradient, or -1 */
    int64_t *leaf_buf;      /* per node: fresh_buf of the leaf it is, or -1 */
    int64_t *end_ptr, *end_list; /* poison: buffers whose lifetime ends at each step (CSR) */
    char *arena;            /* own arena, or the shared one's base as of the last bind */
    size_t arena_bytes;     /* the plan's need (with a shared arena: <= shared->bytes) */
    tg_arena *shared;       /* tg_graph_opts.arena, or NULL */
    tg_memory_report mem;
};

static inline int64_t tg__bwd_step(const tg_graph *g, int64_t i) { return 2 * g->n - 1 - i; }
static inline void *tg__buf_ptr(const tg_graph *g, int64_t b)
{
    return b >= 0 ? g->arena + g->bufs[b].off : NULL;
}

/* order.c: op results last run by g no longer find their memory in it (g is being freed or
 * re-planned); those whose bytes had gone to other values bind to tg__graph_gone (so reading
 * them is refused as before). */
void tg__unbind(tg_graph *g);
/* exec.c: the binding of op results whose graph dropped them after giving their bytes to
 * other values (no arena, no nodes). */
extern tg_graph tg__graph_gone;
/* order.c: t's node index in g, or -1 if t is not one of g's nodes. */
int64_t tg__node_at(const tg_graph *g, const tg_tensor *t);
/* arena.c: grow g's shared arena to at least `bytes` (a new block; the old one's contents are
 * carried over and every binding into it moved). false: TG_ERR_NOMEM recorded (naming fn),
 * the arena unchanged. */
bool tg__arena_reserve(tg_arena *a, size_t bytes, const char *fn);
/* A rewind past the arena's creation frees it and its block (arena.c). */
void tg__arena_forget(tg_arena *a);
/* The context's rewind hook (order.c): frees the graphs, then the arenas, made at or after
 * allocation number seq. */
void tg__graph_forget_after(tg_ctx *ctx, uint64_t seq);
/* arena.c: g (with a shared arena) starts running: it becomes the arena's last graph (a new
 * generation if it was not) and g->arena its current base. */
void tg__arena_enter(tg_graph *g);
/* arena.c: g (with a shared arena) is being freed: unbind what it bound, leave the arena. */
void tg__arena_leave(tg_graph *g);
/* plan.c: free the plan (its arrays and the arena; NULLs them), or give its blocks an owner
 * (tg__set_owner: TG__OWNER_CTX keeps them through a rewind). */
void tg__plan_free(tg_graph *g);
void tg__plan_set_owner(tg_graph *g, uint64_t owner);
/* plan.c: compute lifetimes and place every buffer; allocates g->arena. false: error recorded */
bool tg__plan(tg_graph *g, const char *fn);
/* exec.c: bind every node's data and saved pointers to this graph's arena (and views to
 * their bases); with grads, also gradients (non-leaf from the arena, leaves to `fresh`). */
void tg__bind(tg_graph *g, bool grads);
/* After a run: flag every op result that is neither an output nor kept (tg_keep) as reused,
 * so that reading it (tg_get, tg_tensor_data, ...) is refused instead of returning bytes the
 * planner gave to other values. */
void tg__mark_reused(tg_graph *g);
/* exec.c: fill the buffers whose lifetime ends at `step` with NaN (poison mode). */
void tg__poison_step(tg_graph *g, int64_t step);
/* exec.c: run node t's forward or backward kernel with its workspace bound; returns the
 * status a custom op's callback reported (TG_OK for built-in ops). */
tg_status tg__run_kernel(tg_graph *g, int64_t i, bool backward);
/* exec.c: the call record of node i's kernel in this run (forward or backward). */
void tg__fill_call(const tg_graph *g, int64_t i, bool backward, tg__call *c);
/* exec.c: anomaly helpers shared with autodiff.c */
int64_t tg__first_bad(const void *p, tg_dtype dt, int64_t n, bool minf_ok, double *val);
int64_t tg__first_bad_sum(const void *a, const void *b, tg_dtype dt, int64_t n, double *val);
tg_status tg__anomaly(tg_graph *g, tg_anomaly_phase phase, const tg_tensor *t,
                      const tg_tensor *by, const char *what, int64_t idx, double val);

#endif
