/*
 * registry.h - internal layer 2 (ops), read by layer 3 (graph): the op table built from ops/ops.def.
 * The engine (graph, autodiff, gradcheck) reaches ops only through tg__op_table.
 */
#ifndef TG_REGISTRY_H
#define TG_REGISTRY_H

#include "core.h"

/* ----- op ids: one per line of ops/ops.def --------------------------------------------- */
enum {
    TG_OP_NONE = TG__OP_LEAF, /* leaf */
#define TG_OP(id, name, fwd, bwd, check, flags, ws) TG_OP_##id,
#include "ops.def"
#undef TG_OP
    TG_OP_COUNT_
};

/* The kernel call record: everything a kernel reads or writes in one call, filled by the
 * executor (src/graph/exec.c) from the graph's plan. The record describes the node
 * (tg__call_describe: dtype, shape, the op parameters and aux, the sources' dtypes, shapes,
 * strides and names, the training flag and the RNG stream) and gives this run's memory; it
 * holds no pointer to a tensor, so a kernel reads no tensor at all and can be called from a
 * record filled by hand.
 *
 * Forward computes out from in[0..n_src) (and may fill saved, use ws). Backward ACCUMULATES
 * (+=) into dx[k] for every source k whose dx is non-NULL, reading dy (and what the op's
 * TG_OPF_SRC* / TG_OPF_OUT flags declare: in[k], out; the other values' memory may already
 * hold something else). Sources are contiguous unless the op declares TG_OPF_STRIDED (then
 * in[k] points at the view's first element and src_stride[k] gives the layout). in[k] is
 * read only, except where the op says otherwise (kv_attention writes its cache leaves).
 * Kernels return TG_OK; a failure (a custom op's callback) is returned with its message
 * recorded by tg__kernel_fail. */
typedef struct tg__call {
    tg_ctx *ctx;              /* where a failure's message goes (tg__kernel_fail, tg__run_err) */
    int n_src;
    void *in[TG_MAX_SRC];     /* sources' values (view: its first element) */
    void *dx[TG_MAX_SRC];     /* backward: sources' gradients to accumulate into; NULL: none */
    void *out;                /* y's values: written by forward, read by backward (TG_OPF_OUT) */
    void *dy;                 /* backward: y's gradient (dx[0] == dy in place: BWD_INPLACE) */
    void *saved;              /* values forward saves for backward (the builder's tg__op_save) */
    const void *src_saved;    /* src[0]'s saved values (ops flagged TG_OPF_SRC_SAVED), or NULL */
    void *ws;                 /* workspace of this call, ws_bytes (the op's tg_ws_fn) */
    size_t ws_bytes;
    bool backward;            /* a backward call (and the workspace query's question) */
    bool dy_scratch;          /* backward: nobody reads dy after this call, so it may be
                                 overwritten (the workspace was sized knowing it) */
    int nt;                   /* threads the kernel may use (the graph's) */
    int precision;            /* TG_PRECISION_F32 | TG_PRECISION_BF16 (the graph's) */
    /* the node, as tg__call_describe fills it from y */
    int op;                   /* TG_OP_* */
    tg_dtype dtype;           /* y's */
    int rank;
    int64_t numel;
    const int64_t *shape;     /* y's shape (rank entries, outermost first) */
    const tg_op_params *p;    /* the op's parameters */
    const void *aux;          /* the node's builder metadata (matmul's batch maps, a custom
                                 op's definition), or NULL */
    tg_dtype src_dtype[TG_MAX_SRC];
    int src_rank[TG_MAX_SRC];
    int64_t src_numel[TG_MAX_SRC];
    const int64_t *src_shape[TG_MAX_SRC], *src_stride[TG_MAX_SRC]; /* NULL: no source */
    const char *name;         /* y's name and its sources', for messages (NULL: none) */
    const char *src_name[TG_MAX_SRC];
    bool src_requires_grad[TG_MAX_SRC]; /* whether source k takes a gradient (workspace
                                 queries: backward's dx[k] is non-NULL only then) */
    bool training;            /* the context's mode when the call was filled (dropout) */
    uint64_t *rng;            /* the RNG stream a kernel draws from (xoshiro256** state:
                                 tg__rng_next; the context's) */
    tg__govs *govs;           /* the governors of the kernel's parallel sites (TG_PAR_RANGE,
                                 the GEMM): the graph's table; NULL: ungoverned */
} tg__call;

/* A kernel's parallel loop (TG_PAR_RANGE_IN, src/core/vec.h) governed by the table of the
 * call record `c` in scope: the graph's (per site, shared by its nodes; the node that ran a
 * site last is recorded), or none for a record filled by hand (govs NULL: the loop uses the
 * threads it is given). */
#define TG_PAR_RANGE(nt, par, n, align, ...)                                                  \
    TG_PAR_RANGE_IN((c)->govs, nt, par, n, align, __VA_ARGS__)

/* Fill c's node description (dtype ... rng above) from node y and its context. */
void tg__call_describe(tg__call *c, const tg_tensor *y);

typedef tg_status (*tg_kernel_fn)(const tg__call *c);

/* Data check run before forward (ops reading ids from data set after building): returns
 * TG_OK or records an error on c->ctx and returns its status. */
typedef tg_status (*tg_check_fn)(const tg__call *c);

/* Workspace bytes a kernel call needs, from the record's description and settings (nt,
 * backward, dy_scratch, precision; its memory pointers are NULL in this query). Workspace is
 * live during that one kernel call only. */
typedef size_t (*tg_ws_fn)(const tg__call *c);

/* Op flags (ops.def column 6), read by the planner. */
enum {
    TG_OPF_SRC0 = 1u << 0,   /* backward reads src[0]->data */
    TG_OPF_SRC1 = 1u << 1,   /* ... src[1]->data */
    TG_OPF_SRC2 = 1u << 2,
    TG_OPF_SRC3 = 1u << 3,
    TG_OPF_OUT = 1u << 4,    /* backward reads y->data */
    TG_OPF_INPLACE = 1u << 5,/* forward may write y over src[0] when src[0] dies at this op
                                (same byte size; element i of y depends only on element i of
                                src[0]) */
    TG_OPF_STRIDED = 1u << 6,/* kernels read sources through their strides (views allowed) */
    TG_OPF_VIEW = 1u << 7,   /* forward does nothing: y is a view into src[0]'s buffer when
                                the builder made it one (y->base != NULL) */
    TG_OPF_SRC4 = 1u << 9,   /* ... src[4]->data (bit 9: sources 0..3 keep bits 0..3) */
    TG_OPF_BWD_INPLACE = 1u << 8, /* backward may find src[0]->grad == y->grad (the planner
                                put src[0]'s gradient over y's, which dies here): the rule then
                                WRITES dx[i] = 0 + f(dy[i]) in place (element i of dx depends
                                only on element i of dy), instead of accumulating */
    TG_OPF_NO_BACKWARD = 1u << 10, /* inference only (kv_attention): the table's backward is
                                NULL whatever ops.def names (tg__no_backward), so a graph that
                                would differentiate through it is refused (TG_ERR_NOGRAD) */
    TG_OPF_LAYOUT = 1u << 11, /* only moves values (as the views do): a -inf of src[0] stays a
                                -inf (the anomaly tripwire lets it through) */
    TG_OPF_MINF_OUT = 1u << 12, /* its output may hold -inf by design (a mask applied) */
    TG_OPF_MINF_SRC1 = 1u << 13, /* src[1] is a mask: may hold -inf */
    TG_OPF_MINF_SRC3 = 1u << 14, /* sources 3 and up are masks: may hold -inf */
    TG_OPF_USER = 1u << 15,  /* a user-defined op (tg_custom_op): messages name its callbacks */
    TG_OPF_BWD_SHARE1 = 1u << 16, /* backward's gradient of src[1] is dy itself (add): src[1]'s
                                gradient buffer may be y's (the planner's sharing rule) */
    TG_OPF_ALIAS = 1u << 17, /* y always shares src[0]'s buffer (reshape): a view for
                                tg_tensor_is_view even without a base */
    TG_OPF_SRC_SAVED = 1u << 18, /* forward reads src[0]'s saved values (grad_mask): the
                                planner keeps them until this step */
    TG_OPF_CONSTANT = 1u << 19, /* y is piecewise constant in its float sources (grad_mask):
                                tg_grad and tg_jvp carry nothing through it */
};
#define TG_OPF_SRCS (TG_OPF_SRC0 | TG_OPF_SRC1 | TG_OPF_SRC2 | TG_OPF_SRC3)
/* Does backward read source k's data (flags fl)? */
static inline bool tg__opf_reads_src(unsigned fl, int k)
{
    return k < 4 ? (fl & (TG_OPF_SRC0 << k)) != 0 : k == 4 && (fl & TG_OPF_SRC4) != 0;
}
#define TG_OPF_NONE 0u

typedef struct tg_op_def {
    const char *name;
    tg_kernel_fn forward;
    tg_kernel_fn backward;
    tg_check_fn check;
    unsigned flags;          /* TG_OPF_* */
    tg_ws_fn workspace;      /* NULL: no workspace */
} tg_op_def;

#define TG_OP(id, name, fwd, bwd, check, flags, ws)                                             \
    tg_status fwd(const tg__call *c);                                                          \
    tg_status bwd(const tg__call *c);                                                          \
    tg_status check(const tg__call *c);                                                        \
    size_t ws(const tg__call *c);

#include "ops.def"
#undef TG_OP

/* Per-dtype kernels (ops/ops_dtype.def): fwd[d], bwd[d] for d = 0 (f32), 1 (f64); NULL for the
 * ops that register one kernel for every dtype in ops.def. */
typedef struct tg__op_dt {
    tg_kernel_fn fwd[2], bwd[2];
} tg__op_dt;
#define TG_OP_DT(id, f32_fwd, f32_bwd, f64_fwd, f64_bwd)                                      \
    tg_status f32_fwd(const tg__call *c);                                                      \
    tg_status f32_bwd(const tg__call *c);                                                      \
    tg_status f64_fwd(const tg__call *c);                                                      \
    tg_status f64_bwd(const tg__call *c);
#include "ops_dtype.def"
#undef TG_OP_DT
extern const tg__op_dt tg__op_dt_table[TG_OP_COUNT_];
/* The kernel the executor runs for op `op` (its def) at dtype dt: the op's per-dtype kernel
 * if it registers them, else def's one forward or backward. */
static inline tg_kernel_fn tg__kernel(const tg_op_def *def, int op, tg_dtype dt, bool backward)
{
    if (op > TG_OP_NONE && op < TG_OP_COUNT_ && (dt == TG_F32 || dt == TG_F64)) {
        const tg__op_dt *k = &tg__op_dt_table[op];
        tg_kernel_fn f = backward ? k->bwd[dt == TG_F64] : k->fwd[dt == TG_F64];
        if (f)
            return f;
    }
    return backward ? def->backward : def->forward;
}

/* The backward column of an inference-only op (TG_OPF_NO_BACKWARD); never called. */
tg_status tg__no_backward(const tg__call *c);

extern const tg_op_def tg__op_table[TG_OP_COUNT_];

/* ----- builder helpers (node.c) --------------------------------------------------------------- */
/* True if every one of the n tensors is non-NULL, belongs to ctx, is float (f32/f64) and shares
 * dtype (records TG_ERR_ARG / TG_ERR_DTYPE naming fn otherwise, e.g. "tg_add: 'ids' is i32;
 * this op needs f32 or f64"; NULL inputs return false silently). */
bool tg__check_srcs(tg_ctx *ctx, const char *fn, int n, tg_tensor *const *src);
/* tg__check_srcs for an op with one integer operand: src[ids] must be TG_I32 (a float one is
 * refused with a message calling it @p role, e.g. "ids"); the others float and of one dtype. */
bool tg__check_srcs_ids(tg_ctx *ctx, const char *fn, int n, tg_tensor *const *src, int ids,
                        const char *role);
/* Create an op result tensor with its data buffer. requires_grad = any src requires it.
 * Returns NULL (error recorded) on failure. */
tg_tensor *tg__op_new(tg_ctx *ctx, int op, tg_dtype dt, int rank, const int64_t *shape,
                      int n_src, tg_tensor *const *src);
/* Declare that forward saves `bytes` for backward in y->saved (placed by the planner, bound
 * at run; NOT zeroed: forward writes every byte backward reads). Returns true. */
bool tg__op_save(tg_tensor *y, size_t bytes);
/* tg__op_save of n * es + extra bytes, overflow-checked (TG_ERR_OVERFLOW recorded and y
 * freed: the builder must return NULL without touching y again). */
bool tg__op_save_n(tg_tensor *y, int64_t n, size_t es, size_t extra);
/* The multiplier that the backward of dropout or max node y applies to its gradient, as a
 * tensor of y's source's shape and y's dtype (op "grad_mask"; ops/grad_mask.c): dropout's
 * keep * scale of the run, max's one-hot of the arg-max along its axis. Constant for
 * differentiation. NULL on error (recorded). */
tg_tensor *tg__grad_mask(tg_ctx *ctx, tg_tensor *y);
/* Its kernels' halves, where the saved layouts live (dropout.c, max.c): y = the mask. */
void tg__dropout_grad_mask(const tg__call *c);
void tg__max_grad_mask(const tg__call *c);
/* A contiguous copy of x (op "contiguous"; ops/shape.c). NULL on error (recorded). */
tg_tensor *tg__contiguous(tg_ctx *ctx, tg_tensor *x);
/* The node of a broadcasting binary op (add, mul, sub, div): operands checked, shape
 * broadcast (TG_ERR_SHAPE naming fn otherwise). NULL on error (recorded). */
tg_tensor *tg__binary_new(tg_ctx *ctx, int op, const char *fn, tg_tensor *a, tg_tensor *b);
/* Broadcast shapes a and b (right-aligned) into out; returns false if incompatible. */
bool tg__broadcast_shape(int ra, const int64_t *a, int rb, const int64_t *b, int *rout,
                         int64_t *out);

/* ----- broadcasting kernels (shared by add, mul, add_mask, matmul) -------------------------- */
/* Row-major strides of x's shape (xrank entries) right-aligned inside an output of rank
 * `rank`, with stride 0 on broadcast dims: st[i] for output axis i. */
void tg__bcast_strides(int xrank, const int64_t *xshape, int rank, int64_t *st);
/* dx (x's shape: xrank, xshape) += dy (shape out_shape, rank) summed over broadcast dims, fixed
 * order per element of dx (thread-count independent). dtype dt for both; nt threads. */
void tg__reduce_to(tg__govs *govs, int nt, tg_dtype dt, const void *dy, int rank, const int64_t *out_shape,
                   int xrank, const int64_t *xshape, void *dx);

/* p[i] = 0 + p[i] for n elements: what accumulating into a zeroed gradient gives (-0 becomes
 * +0), for backward rules whose in-place identity must match the accumulating path bitwise.
 * govs: the call record's governor table. */
void tg__plus_zero(tg__govs *govs, int nt, tg_dtype dt, int64_t n, void *p);

/* What a flash_attention node computes (its builder's arguments, for rules that rebuild it
 * unfused, src/graph/vjp.c): the scale, the causal flag, the first mask's kind and the source
 * indices of the mask and the block mask (-1: none). */
typedef struct tg__flash_attn_desc {
    double scale;
    bool causal;
    tg_mask_kind kind;
    int src_mask, src_block;
} tg__flash_attn_desc;
void tg__flash_attn_describe(const tg_tensor *y, tg__flash_attn_desc *d);

/* A custom op node's rules written as ops (tg_custom_def's vjp, jvp; NULL: none) and its user
 * pointer (ops/custom.c). */
typedef tg_status (*tg__custom_vjp_fn)(tg_ctx *ctx, tg_tensor *y, int n_inputs,
                                       tg_tensor *const *inputs, tg_tensor *grad_output,
                                       const bool *need, tg_tensor **grad_inputs, void *user);
typedef tg_tensor *(*tg__custom_jvp_fn)(tg_ctx *ctx, tg_tensor *y, int n_inputs,
                                        tg_tensor *const *inputs, tg_tensor *const *tangents,
                                        void *user);
void tg__custom_rules(const tg_tensor *y, tg__custom_vjp_fn *vjp, tg__custom_jvp_fn *jvp,
                      void **user);

#endif
