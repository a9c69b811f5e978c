/*
 * custom.c - user-defined ops (tg_custom_op): y = f(x_0, ..., x_{n-1}) with the caller's forward
 * and backward callbacks, per dtype.
 *
 * forward:  the callback writes y from the inputs;
 * backward: the callback adds (+=) dL/dx_i into call->grad_input[i] from dL/dy (and what it
 *           declared it reads: inputs, output), exactly the contract of the built-in rules.
 *
 * One registry line (ops/ops.def, "custom") holds the trampolines below. Each custom node gets
 * its own tg_op_def (in its record, owned by the node through y->aux): the user's name, the
 * trampolines, and planner flags from what backward reads, so the engine, which dispatches
 * through y->def, treats it as any op. A callback's failure is the kernel's returned status,
 * its message recorded by tg__kernel_fail.
 */
#include "registry.h"

#include <stdio.h>

_Static_assert(TG_CUSTOM_MAX_INPUTS <= TG_MAX_SRC, "a custom op's inputs are node sources");
_Static_assert(TG_OPF_SRC0 << (TG_CUSTOM_MAX_INPUTS - 1) == TG_OPF_SRC3,
               "TG_CUSTOM_READS_INPUT(i) maps to TG_OPF_SRC0 << i");

/* The node's definition: a copy of the user's, resolved for the node's dtype. */
typedef struct tg__custom {
    tg_op_def def;                      /* y->def: name, trampolines, flags */
    char name[TG_CUSTOM_NAME_MAX];
    tg_custom_fn forward, backward;     /* for y's dtype (backward may be NULL) */
    size_t (*workspace)(const tg_custom_call *call);
    unsigned reads;                     /* TG_CUSTOM_READS_* */
    tg__custom_vjp_fn vjp;              /* the rules written as ops, or NULL */
    tg__custom_jvp_fn jvp;
    void *user;
    /* Workspace when the running graph did not bind c->ws (engines without a planner for
     * it): grown on demand, owned by the record. */
} tg__custom;

/* What tg_custom_error writes into (call->internal_). */
typedef struct {
    char msg[301];
} custom_run;

/* Length of the valid UTF-8 sequence at s (n bytes left), or 0 (overlong, surrogate, beyond
 * U+10FFFF, truncated, a stray continuation byte). */
static size_t utf8_len(const unsigned char *s, size_t n)
{
    unsigned c = s[0];
    size_t len = c < 0x80 ? 1 : (c & 0xe0) == 0xc0 ? 2 : (c & 0xf0) == 0xe0 ? 3
                               : (c & 0xf8) == 0xf0 ? 4 : 0;
    if (len == 0 || len > n)
        return 0;
    uint32_t cp = len == 1 ? c : len == 2 ? c & 0x1f : len == 3 ? c & 0x0f : c & 0x07;
    for (size_t i = 1; i < len; i++) {
        if ((s[i] & 0xc0) != 0x80)
            return 0;
        cp = cp << 6 | (s[i] & 0x3f);
    }
    static const uint32_t min_cp[5] = {0, 0, 0x80, 0x800, 0x10000};
    if (cp < min_cp[len] || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff))
        return 0;
    return len;
}

/* A callback's message as one printable line, in place: a newline or tab becomes a space,
 * another control character (C0, DEL, C1) or a byte that is not valid UTF-8 becomes '?'. */
static void one_line(char *msg)
{
    unsigned char *s = (unsigned char *)msg;
    size_t n = strlen(msg);
    for (size_t i = 0; i < n;) {
        size_t len = utf8_len(s + i, n - i);
        if (len == 0) {
            s[i++] = '?';
        } else if (len == 1) {
            if (s[i] == '\n' || s[i] == '\r' || s[i] == '\t')
                s[i] = ' ';
            else if (s[i] < 0x20 || s[i] == 0x7f)
                s[i] = '?';
            i++;
        } else {
            if (len == 2 && s[i] == 0xc2 && s[i + 1] < 0xa0) /* C1: U+0080..U+009F */
                s[i] = s[i + 1] = '?';
            i += len;
        }
    }
}

tg_status tg_custom_error(tg_custom_call *call, tg_status status, const char *fmt, ...)
{
    if (status == TG_OK)
        status = TG_ERR_ARG;
    if (!call || !call->internal_ || !fmt)
        return status;
    custom_run *r = call->internal_;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(r->msg, sizeof r->msg, fmt, ap);
    va_end(ap);
    one_line(r->msg);
    return status;
}

/* ---- the builder ------------------------------------------------------------------------ */
static bool name_ok(const char *s)
{
    size_t n = 0;
    for (; s[n]; n++) {
        char c = s[n];
        bool alpha = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_';
        bool digit = c >= '0' && c <= '9';
        if (!(alpha || (digit && n > 0)) || n + 1 >= TG_CUSTOM_NAME_MAX)
            return false;
    }
    return n > 0;
}

/* The definition against its inputs: name, dtype, callbacks, backward_reads. Sets the forward
 * (*fwd_out) and the backward (*bwd_out, maybe NULL) for the inputs' dtype, or returns false
 * with the error recorded. */
static bool custom_check(tg_ctx *ctx, const char *fn, const tg_custom_def *def, int n_inputs,
                         tg_tensor *const *inputs, tg_custom_fn *fwd_out, tg_custom_fn *bwd_out)
{
    if (!def)
        return (bool)tg__err(ctx, TG_ERR_ARG, fn, "definition is NULL");
    if (n_inputs < 1 || n_inputs > TG_CUSTOM_MAX_INPUTS || !inputs)
        return (bool)tg__err(ctx, TG_ERR_ARG, fn, "%d inputs%s: a custom op takes 1 to %d",
                       n_inputs, inputs ? "" : " (array NULL)", TG_CUSTOM_MAX_INPUTS);
    if (!def->name || !name_ok(def->name))
        return (bool)tg__err(ctx, TG_ERR_ARG, fn, "op name must be 1 to %d characters of "
                       "[A-Za-z0-9_] not starting with a digit", TG_CUSTOM_NAME_MAX - 1);
    const char *name = def->name;
    if (tg_op_find(name) >= 0 || !strcmp(name, "param") || !strcmp(name, "input") ||
        !strcmp(name, "const") || !strcmp(name, "leaf"))
        return (bool)tg__err(ctx, TG_ERR_ARG, fn, "op name '%s' is taken by a built-in op or leaf "
                       "kind; choose another", name);
    if (!tg__check_srcs(ctx, fn, n_inputs, inputs))
        return false;
    tg_dtype dt = inputs[0]->dtype;
    if (dt != TG_F32 && dt != TG_F64)
        return (bool)tg__err(ctx, TG_ERR_DTYPE, fn, "op '%s': inputs are %s; custom ops take "
                             "f32 or f64", name, tg_dtype_str(dt));
    tg_custom_fn fwd = dt == TG_F32 ? def->forward_f32 : def->forward_f64;
    *bwd_out = dt == TG_F32 ? def->backward_f32 : def->backward_f64;
    if (!fwd)
        return (bool)tg__err(ctx, TG_ERR_DTYPE, fn,
                             "op '%s' has no %s forward (forward_%s is NULL)", name,
                             tg_dtype_str(dt), tg_dtype_str(dt));
    unsigned known = TG_CUSTOM_READS_OUTPUT;
    for (int i = 0; i < n_inputs; i++)
        known |= TG_CUSTOM_READS_INPUT(i);
    if (def->backward_reads & ~known)
        return (bool)tg__err(ctx, TG_ERR_ARG, fn, "op '%s': backward_reads 0x%x names inputs it "
                             "does not have (%d inputs)", name, def->backward_reads, n_inputs);
    *fwd_out = fwd;
    return true;
}

/* The output's shape (rank *rank_out): from the shape function, the first input's, or the
 * definition's fixed one; every dim >= 1 and the count within limits. */
static bool custom_shape(tg_ctx *ctx, const char *fn, const tg_custom_def *def, int n_inputs,
                         tg_tensor *const *inputs, int *rank_out, int64_t shape[TG_MAX_RANK])
{
    const char *name = def->name;
    int rank = 0;
    char b[160];
    if (def->shape) {
        char msg[200] = "";
        for (int i = 0; i < TG_MAX_RANK; i++)
            shape[i] = 1;
        rank = -1;
        tg_status s = def->shape(n_inputs, (const tg_tensor *const *)inputs, &rank, shape, msg,
                                 sizeof msg, def->user);
        msg[sizeof msg - 1] = '\0';
        one_line(msg);
        if (s != TG_OK) {
            if ((int)s < 0 || s >= TG_STATUS_COUNT_)
                s = TG_ERR_SHAPE;
            return tg__err(ctx, s, fn, "op '%s': the shape function refused input 0 %s: %s",
                           name, tg__shape_str(inputs[0], b, sizeof b),
                           msg[0] ? msg : tg_status_str(s)) != NULL;
        }
    } else if (def->out_rank == TG_CUSTOM_SAME_SHAPE) {
        rank = inputs[0]->rank;
        memcpy(shape, inputs[0]->shape, sizeof(int64_t) * TG_MAX_RANK);
    } else {
        rank = def->out_rank;
        if (rank >= 0 && rank <= TG_MAX_RANK)
            for (int i = 0; i < rank; i++)
                shape[i] = def->out_shape[i];
    }
    if (rank < 0 || rank > TG_MAX_RANK)
        return tg__err(ctx, TG_ERR_SHAPE, fn, "op '%s': output rank %d out of range 0..%d",
                       name, rank, TG_MAX_RANK) != NULL;
    int64_t numel = 1;
    for (int i = 0; i < rank; i++) {
        if (shape[i] < 1)
            return tg__err(ctx, TG_ERR_SHAPE, fn, "op '%s': output shape %s has dim %d < 1",
                           name, tg__dims_str(rank, shape, b, sizeof b), i) != NULL;
        if (!tg__mul_i64(numel, shape[i], &numel) || numel > TG__MAX_NUMEL)
            return tg__err(ctx, TG_ERR_OVERFLOW, fn, "op '%s': output shape %s is too large",
                           name, tg__dims_str(rank, shape, b, sizeof b)) != NULL;
    }
    *rank_out = rank;
    return true;
}

tg_tensor *tg_custom_op(tg_ctx *ctx, const tg_custom_def *def, int n_inputs,
                        tg_tensor *const *inputs)
{
    static const char *fn = "tg_custom_op";
    if (!ctx)
        return NULL;
    tg__begin(ctx);
    if (tg__build_failed(ctx))
        return NULL;
    tg_custom_fn fwd = NULL, bwd = NULL;
    if (!custom_check(ctx, fn, def, n_inputs, inputs, &fwd, &bwd))
        return NULL;
    const char *name = def->name;
    tg_dtype dt = inputs[0]->dtype;
    int rank = 0;
    int64_t shape[TG_MAX_RANK];
    if (!custom_shape(ctx, fn, def, n_inputs, inputs, &rank, shape))
        return NULL;
    tg__custom *r = tg__alloc(ctx, sizeof *r, fn);
    if (!r)
        return NULL;
    snprintf(r->name, sizeof r->name, "%s", name);
    r->forward = fwd;
    r->backward = bwd;
    r->workspace = def->workspace;
    r->reads = def->backward_reads;
    r->vjp = def->vjp;
    r->jvp = def->jvp;
    r->user = def->user;
    r->def = tg__op_table[TG_OP_CUSTOM];
    r->def.name = r->name;
    r->def.backward = bwd ? tg__op_table[TG_OP_CUSTOM].backward : NULL;
    r->def.flags = (def->backward_reads & TG_CUSTOM_READS_OUTPUT) ? TG_OPF_OUT : 0;
    for (int i = 0; i < n_inputs; i++)
        if (def->backward_reads & TG_CUSTOM_READS_INPUT(i))
            r->def.flags |= TG_OPF_SRC0 << i;
    tg_tensor *y = tg__op_new(ctx, TG_OP_CUSTOM, dt, rank, shape, n_inputs, inputs);
    if (!y) {
        tg__free(ctx, r);
        return NULL;
    }
    y->def = &r->def;
    y->aux = r;
    y->p.custom.rec = r;
    snprintf(y->name, sizeof y->name, "%s%llu", r->name, (unsigned long long)y->id);
    return y;
}

/* ---- the trampolines --------------------------------------------------------------------
 * The user's tg_custom_call is a view of the kernel call record (ops/registry.h): the
 * same fields one to one (input = in, output = out, grad_output = dy, grad_input = dx,
 * workspace = ws, n_threads = nt), plus the shapes and the user pointer. */

/* The user's record of kernel call k (memory pointers as k has them; NULL in a workspace
 * query). */
static void user_call(tg_custom_call *u, const tg__call *k, const tg__custom *r)
{
    memset(u, 0, sizeof *u);
    u->name = r->name;
    u->dtype = k->dtype;
    u->n_threads = k->nt;
    u->backward = k->backward;
    u->n_inputs = k->n_src;
    for (int i = 0; i < k->n_src; i++) {
        u->input_rank[i] = k->src_rank[i];
        u->input_shape[i] = k->src_shape[i];
        u->input_numel[i] = k->src_numel[i];
        /* backward: only what it declared it reads (the rest may be reused memory) */
        if (!k->backward || (r->reads & TG_CUSTOM_READS_INPUT(i)))
            u->input[i] = k->in[i];
        u->grad_input[i] = k->backward ? k->dx[i] : NULL;
    }
    u->output_rank = k->rank;
    u->output_shape = k->shape;
    u->output_numel = k->numel;
    if (!k->backward || (r->reads & TG_CUSTOM_READS_OUTPUT))
        u->output = k->out;
    u->grad_output = k->backward ? k->dy : NULL;
    u->workspace = k->ws;
    u->workspace_bytes = k->ws_bytes;
    u->user = r->user;
}

size_t tg__custom_ws(const tg__call *c)
{
    const tg__custom *r = c->p->custom.rec;
    if (!r->workspace || (c->backward && !r->backward))
        return 0;
    tg__call q = *c; /* shapes only: the query sees no memory */
    memset(q.in, 0, sizeof q.in);
    memset(q.dx, 0, sizeof q.dx);
    q.out = q.dy = q.saved = q.ws = NULL;
    q.ws_bytes = 0;
    tg_custom_call u;
    user_call(&u, &q, r);
    return r->workspace(&u);
}

/* Workspace for this call: the planned one (c->ws), checked against what the callback asks
 * now. A failure is a run error of this call (never a sticky build error). */
static tg_status bind_ws(const tg__call *c, tg__custom *r, tg_custom_call *u, const char *fn)
{
    size_t bytes = tg__custom_ws(c);
    u->workspace_bytes = bytes;
    u->workspace = NULL;
    if (bytes == 0)
        return TG_OK;
    if (bytes > c->ws_bytes) /* the callback's size changed since the graph was planned */
        return tg__kernel_fail(c->ctx, TG_ERR_ARG, fn, "custom op '%s' ('%s'): the workspace "
                               "callback asked for %zu bytes of %s workspace, but %zu when the "
                               "graph was planned (it must depend only on the shapes and "
                               "n_threads)", r->name, c->name, bytes,
                               c->backward ? "backward" : "forward", c->ws_bytes);
    u->workspace = c->ws;
    return TG_OK;
}

/* Run callback f; a failure becomes the run's error, naming the op and its result. */
static tg_status invoke(const tg__call *c, tg__custom *r, tg_custom_fn f, const char *fn)
{
    tg_custom_call u;
    user_call(&u, c, r);
    custom_run run;
    run.msg[0] = '\0';
    u.internal_ = &run;
    tg_status s = bind_ws(c, r, &u, fn);
    if (s != TG_OK)
        return s;
    s = f(&u);
    if (s == TG_OK)
        return TG_OK;
    if ((int)s < 0 || s >= TG_STATUS_COUNT_)
        return tg__kernel_fail(c->ctx, TG_ERR_ARG, fn, "custom op '%s' ('%s'): %s callback "
                               "returned %d, not a tg_status", r->name, c->name,
                               c->backward ? "backward" : "forward", (int)s);
    if (run.msg[0])
        return tg__kernel_fail(c->ctx, s, fn, "custom op '%s' ('%s'): %s", r->name, c->name,
                               run.msg);
    return tg__kernel_fail(c->ctx, s, fn, "custom op '%s' ('%s'): %s callback failed with %s",
                           r->name, c->name, c->backward ? "backward" : "forward",
                           tg_status_str(s));
}

tg_status tg__custom_forward(const tg__call *c)
{
    tg__custom *r = c->p->custom.rec;
    return invoke(c, r, r->forward, "tg_graph_forward");
}

tg_status tg__custom_backward(const tg__call *c)
{
    tg__custom *r = c->p->custom.rec;
    if (!r->backward)
        return TG_OK; /* unreachable: the node's def has no backward, so graphs refuse it */
    return invoke(c, r, r->backward, "tg_graph_backward");
}

void tg__custom_rules(const tg_tensor *y, tg__custom_vjp_fn *vjp, tg__custom_jvp_fn *jvp,
                      void **user)
{
    const tg__custom *r = y->p.custom.rec;
    *vjp = r->vjp;
    *jvp = r->jvp;
    *user = r->user;
}
