/*
 * accum.c - gradient accumulation over micro-batches in a fixed binary tree, in one process or
 * across processes through a byte transport (include/tgrad_train.h, "Gradient accumulation").
 *
 * The tree over micro-batches [0, k): node(a, n) = node(a, s) + node(a + s, n - s), s the
 * largest power of two below n. A process pushes its micro-batches left to right; each push
 * adds a leaf to a stack of nodes, and while the two top nodes are siblings (their union is a
 * node whose left child is the lower one) they are replaced by their sum. The stack then holds
 * the maximal tree nodes inside the pushed range, at most log2(k) + 1 of them, so one process
 * that pushed all k holds the root.
 *
 * Across P parts (combine), the nodes that span parts are added by the part holding their
 * first micro-batch, or, when P and k/P are powers of two, by recursive doubling. Elements are
 * added in the buffer's order by one thread each (static OpenMP split), so the bits never
 * depend on the thread count or on P.
 *
 * A packed copy: every parameter's gradient in the parameters' dtype, back to back in the
 * order given, then the loss as a double at the next 8-byte offset.
 */
#include "tgrad_train.h"
#include "core.h"

#include <assert.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#define MAX_NODES 72 /* log2(INT64_MAX) + 2, and spanning nodes held during a combine */
#define DEFAULT_BUCKET ((size_t)4 << 20)

typedef struct {
    int64_t a, n; /* micro-batches a .. a+n-1 */
    void *buf;    /* packed copy (bytes) */
} node;

struct tg_grad_accum {
    tg_ctx *ctx;
    int64_t np;
    tg_tensor **params;
    tg_dtype dt;
    int64_t elems;   /* gradient elements in a packed copy */
    size_t loss_off; /* byte offset of the loss */
    size_t bytes;    /* bytes of a packed copy */
    int64_t k, first, count, pushed;
    node stack[MAX_NODES];
    int depth;
    void *spare[MAX_NODES]; /* free packed buffers */
    int n_spare;
};

/* ---- the tree ----------------------------------------------------------------------------- */

/* The largest power of two below n (n >= 2). */
static int64_t split_of(int64_t n)
{
    int64_t s = 1;
    while (s * 2 < n)
        s *= 2;
    return s;
}

/* Is (a, n) a node of the tree over [0, k)? */
static bool is_node(int64_t k, int64_t a, int64_t n)
{
    int64_t ca = 0, cn = k;
    for (;;) {
        if (ca == a && cn == n)
            return true;
        if (cn < 2)
            return false;
        int64_t s = split_of(cn);
        if (a + n <= ca + s) {
            cn = s; /* inside the left child */
        } else if (a >= ca + s) {
            ca += s; /* inside the right child */
            cn -= s;
        } else {
            return false; /* straddles the split */
        }
    }
}

/* Are adjacent nodes (a, n1) and (a + n1, n2) the two children of one node? */
static bool siblings(int64_t k, int64_t a, int64_t n1, int64_t n2)
{
    return split_of(n1 + n2) == n1 && is_node(k, a, n1 + n2);
}

/* ---- buffers ------------------------------------------------------------------------------ */

static void *get_buf(tg_grad_accum *acc)
{
    if (acc->n_spare > 0)
        return acc->spare[--acc->n_spare];
    return tg__alloc_owned(acc->ctx, acc->bytes, "tg_grad_accum_push", TG__OWNER_CTX);
}

static void put_buf(tg_grad_accum *acc, void *b)
{
    if (!b)
        return;
    assert(acc->n_spare < MAX_NODES);
    acc->spare[acc->n_spare++] = b;
}

static double buf_loss(const tg_grad_accum *acc, const void *b)
{
    double l;
    memcpy(&l, (const char *)b + acc->loss_off, sizeof l);
    return l;
}

static void set_buf_loss(const tg_grad_accum *acc, void *b, double l)
{
    memcpy((char *)b + acc->loss_off, &l, sizeof l);
}

/* dst = left + right, element by element (dst may be either operand). */
static void add_bufs(const tg_grad_accum *acc, void *dst, const void *left, const void *right)
{
    int64_t n = acc->elems;
    int nt = tg__threads(acc->ctx);
    int64_t chunk = 16384, nc = (n + chunk - 1) / chunk;
    if (acc->dt == TG_F32) {
        float *d = dst;
        const float *l = left, *r = right;
        TG_OMP_FOR(nt, nt > 1 && n >= TG_PAR_MIN)
        for (int64_t c = 0; c < nc; c++) {
            int64_t e = (c + 1) * chunk < n ? (c + 1) * chunk : n;
            for (int64_t i = c * chunk; i < e; i++)
                d[i] = l[i] + r[i];
        }
    } else {
        double *d = dst;
        const double *l = left, *r = right;
        TG_OMP_FOR(nt, nt > 1 && n >= TG_PAR_MIN)
        for (int64_t c = 0; c < nc; c++) {
            int64_t e = (c + 1) * chunk < n ? (c + 1) * chunk : n;
            for (int64_t i = c * chunk; i < e; i++)
                d[i] = l[i] + r[i];
        }
    }
    set_buf_loss(acc, dst, buf_loss(acc, left) + buf_loss(acc, right));
}

/* ---- one process -------------------------------------------------------------------------- */

tg_grad_accum *tg_grad_accum_new(tg_ctx *ctx, int64_t n, tg_tensor *const *params, int64_t k,
                                 int64_t first, int64_t count)
{
    static const char *fn = "tg_grad_accum_new";
    if (!ctx)
        return NULL;
    tg__begin(ctx);
    if (tg__build_failed(ctx))
        return NULL;
    if (!params) {
        n = ctx->n_params;
        params = ctx->params;
    }
    if (n < 1)
        return tg__err(ctx, TG_ERR_ARG, fn, "no parameters to accumulate");
    if (k < 1)
        return tg__err(ctx, TG_ERR_ARG, fn, "k = %" PRId64 " micro-batches; need at least 1", k);
    if (first < 0 || count < 1 || first >= k || count > k - first)
        return tg__err(ctx, TG_ERR_ARG, fn,
                       "micro-batches %" PRId64 " .. %" PRId64 " are not inside 0 .. %" PRId64,
                       first, first + count - 1, k - 1);
    tg_dtype dt = TG_F32;
    int64_t elems = 0;
    for (int64_t i = 0; i < n; i++) {
        const tg_tensor *p = params[i];
        if (!p)
            return tg__err(ctx, TG_ERR_ARG, fn, "parameter %" PRId64 " is NULL", i);
        if (p->ctx != ctx)
            return tg__err(ctx, TG_ERR_ARG, fn, "parameter '%s' belongs to another context",
                           p->name);
        if (p->dtype == TG_I32)
            return tg__err(ctx, TG_ERR_DTYPE, fn, "parameter '%s' is i32", p->name);
        if (i == 0)
            dt = p->dtype;
        else if (p->dtype != dt)
            return tg__err(ctx, TG_ERR_DTYPE, fn, "parameter '%s' is %s, '%s' is %s", p->name,
                           tg_dtype_str(p->dtype), params[0]->name, tg_dtype_str(dt));
        if (p->numel > INT64_MAX / 16 - elems)
            return tg__err(ctx, TG_ERR_NOMEM, fn, "gradients too large to pack");
        elems += p->numel;
    }
    tg_grad_accum *acc = tg__alloc_owned(ctx, sizeof *acc, fn, TG__OWNER_CTX);
    tg_tensor **ps = acc ? tg__alloc_owned(ctx, sizeof *ps * (size_t)n, fn, TG__OWNER_CTX) : NULL;
    if (!ps) {
        tg__free(ctx, acc);
        return NULL;
    }
    memcpy(ps, params, sizeof *ps * (size_t)n);
    acc->ctx = ctx;
    acc->np = n;
    acc->params = ps;
    acc->dt = dt;
    acc->elems = elems;
    acc->loss_off = ((size_t)elems * tg_dtype_size(dt) + 7) / 8 * 8;
    acc->bytes = acc->loss_off + sizeof(double);
    acc->k = k;
    acc->first = first;
    acc->count = count;
    return acc;
}

tg_status tg_grad_accum_push(tg_grad_accum *acc, double loss)
{
    static const char *fn = "tg_grad_accum_push";
    if (!acc)
        return TG_ERR_ARG;
    tg_ctx *ctx = acc->ctx;
    tg__begin(ctx);
    if (acc->pushed >= acc->count) {
        tg__run_err(ctx, TG_ERR_STATE, fn,
                    "all %" PRId64 " micro-batches of this step were pushed; finish or combine "
                    "the step first", acc->count);
        return TG_ERR_STATE;
    }
    assert(acc->depth < MAX_NODES);
    void *b = get_buf(acc);
    if (!b) {
        tg__run_err(ctx, TG_ERR_NOMEM, fn, "out of memory for a packed gradient copy (%zu bytes)",
                    acc->bytes);
        return TG_ERR_NOMEM;
    }
    size_t es = tg_dtype_size(acc->dt), off = 0;
    for (int64_t i = 0; i < acc->np; i++) {
        const tg_tensor *p = acc->params[i];
        size_t nb = (size_t)p->numel * es;
        if (p->grad)
            memcpy((char *)b + off, p->grad, nb);
        else
            memset((char *)b + off, 0, nb);
        off += nb;
    }
    set_buf_loss(acc, b, loss);
    node *s = acc->stack;
    s[acc->depth++] = (node){acc->first + acc->pushed, 1, b};
    acc->pushed++;
    while (acc->depth >= 2) {
        node *l = &s[acc->depth - 2], *r = &s[acc->depth - 1];
        if (!siblings(acc->k, l->a, l->n, r->n))
            break;
        add_bufs(acc, l->buf, l->buf, r->buf);
        l->n += r->n;
        put_buf(acc, r->buf);
        acc->depth--;
    }
    return TG_OK;
}

/* Packed copy @p b into the parameters' gradient buffers (those without one are skipped) and
 * its loss into @p loss (may be NULL). */
static void unpack(const tg_grad_accum *acc, const void *b, double *loss)
{
    size_t es = tg_dtype_size(acc->dt), off = 0;
    for (int64_t i = 0; i < acc->np; i++) {
        tg_tensor *p = acc->params[i];
        size_t nb = (size_t)p->numel * es;
        if (p->grad)
            memcpy(p->grad, (const char *)b + off, nb);
        off += nb;
    }
    if (loss)
        *loss = buf_loss(acc, b);
}

/* Unpack @p b; reset the accumulator for the next step. */
static void unpack_and_reset(tg_grad_accum *acc, const void *b, double *loss)
{
    unpack(acc, b, loss);
    for (int i = 0; i < acc->depth; i++)
        put_buf(acc, acc->stack[i].buf);
    acc->depth = 0;
    acc->pushed = 0;
}

tg_status tg_grad_accum_finish(tg_grad_accum *acc, double *loss)
{
    static const char *fn = "tg_grad_accum_finish";
    if (!acc)
        return TG_ERR_ARG;
    tg__begin(acc->ctx);
    if (acc->count != acc->k || acc->pushed != acc->k) {
        tg__run_err(acc->ctx, TG_ERR_STATE, fn,
                    "%" PRId64 " of %" PRId64 " micro-batches pushed%s", acc->pushed, acc->k,
                    acc->count != acc->k ? " (this accumulator holds a part of them: use "
                                           "tg_grad_accum_combine)" : "");
        return TG_ERR_STATE;
    }
    assert(acc->depth == 1 && acc->stack[0].a == 0 && acc->stack[0].n == acc->k);
    unpack_and_reset(acc, acc->stack[0].buf, loss);
    return TG_OK;
}

int64_t tg_grad_accum_k(const tg_grad_accum *acc) { return acc ? acc->k : 0; }
int64_t tg_grad_accum_first(const tg_grad_accum *acc) { return acc ? acc->first : 0; }
int64_t tg_grad_accum_count(const tg_grad_accum *acc) { return acc ? acc->count : 0; }
size_t tg_grad_accum_bytes(const tg_grad_accum *acc) { return acc ? acc->bytes : 0; }

void tg_grad_accum_free(tg_grad_accum *acc)
{
    if (!acc)
        return;
    tg_ctx *ctx = acc->ctx;
    for (int i = 0; i < acc->depth; i++)
        tg__free(ctx, acc->stack[i].buf);
    for (int i = 0; i < acc->n_spare; i++)
        tg__free(ctx, acc->spare[i]);
    tg__free(ctx, acc->params);
    tg__free(ctx, acc);
}

/* ---- several processes -------------------------------------------------------------------- */

typedef struct {
    tg_grad_accum *acc;
    const tg_grad_transport *tr;
    int64_t m;           /* micro-batches per part */
    size_t bucket, sent;
    char err[512];
    node held[MAX_NODES]; /* nodes this part holds: its stack, then spanning ones it added */
    int n_held;
    void *tmp;           /* receive buffer */
} combine_state;

static int owner(const combine_state *c, int64_t micro) { return (int)(micro / c->m); }

static node *find_held(combine_state *c, int64_t a, int64_t n)
{
    for (int i = 0; i < c->n_held; i++)
        if (c->held[i].a == a && c->held[i].n == n)
            return &c->held[i];
    return NULL;
}

/* Remove and return the buffer of held node (a, n) (it exists: the schedule guarantees it). */
static void *take_held(combine_state *c, int64_t a, int64_t n)
{
    node *h = find_held(c, a, n);
    assert(h);
    void *b = h->buf;
    *h = c->held[--c->n_held];
    return b;
}

/* Bucketed point-to-point calls. */
static bool do_send(combine_state *c, int to, const void *buf)
{
    const char *p = buf;
    for (size_t off = 0; off < c->acc->bytes; off += c->bucket) {
        size_t nb = c->acc->bytes - off < c->bucket ? c->acc->bytes - off : c->bucket;
        if (c->tr->send(c->tr->user, to, p + off, nb, c->err, sizeof c->err) != 0)
            return false;
        c->sent += nb;
    }
    return true;
}

static bool do_recv(combine_state *c, int from, void *buf)
{
    char *p = buf;
    for (size_t off = 0; off < c->acc->bytes; off += c->bucket) {
        size_t nb = c->acc->bytes - off < c->bucket ? c->acc->bytes - off : c->bucket;
        if (c->tr->recv(c->tr->user, from, p + off, nb, c->err, sizeof c->err) != 0)
            return false;
    }
    return true;
}

/* The spanning node (a, n): its value ends up held by owner(a). Every part runs the same
 * recursion, acting only where it is the sender or the receiver. */
static bool walk(combine_state *c, int64_t a, int64_t n)
{
    int me = c->tr->part;
    int64_t s = split_of(n);
    int lo = owner(c, a), ro = owner(c, a + s);
    if (lo != owner(c, a + s - 1) && !walk(c, a, s))
        return false;
    if (ro != owner(c, a + n - 1) && !walk(c, a + s, n - s))
        return false;
    if (ro != lo) { /* the right child travels to the left child's part */
        if (me == ro && !do_send(c, lo, find_held(c, a + s, n - s)->buf))
            return false;
        if (me == ro)
            put_buf(c->acc, take_held(c, a + s, n - s));
        if (me == lo && !do_recv(c, ro, c->tmp))
            return false;
    }
    if (me == lo) {
        void *l = take_held(c, a, s);
        const void *r = ro == lo ? find_held(c, a + s, n - s)->buf : c->tmp;
        add_bufs(c->acc, l, l, r);
        if (ro == lo)
            put_buf(c->acc, take_held(c, a + s, n - s));
        assert(c->n_held < MAX_NODES);
        c->held[c->n_held++] = (node){a, n, l};
    }
    return true;
}

static bool is_pow2(int64_t x) { return x > 0 && (x & (x - 1)) == 0; }

/* P and m powers of two: recursive doubling; each part's stack is the single node (me m, m),
 * which ends as the root (@p *root). */
static bool doubling(combine_state *c, int me, int P, void **root)
{
    tg_grad_accum *acc = c->acc;
    const tg_grad_transport *tr = c->tr;
    assert(c->n_held == 1);
    void *mine = c->held[0].buf;
    bool ok = true;
    for (int bit = 1; bit < P && ok; bit <<= 1) {
        int peer = me ^ bit;
        const char *sp = mine;
        char *rp = c->tmp;
        for (size_t off = 0; off < acc->bytes && ok; off += c->bucket) {
            size_t nb = acc->bytes - off < c->bucket ? acc->bytes - off : c->bucket;
            ok = tr->sendrecv(tr->user, peer, sp + off, rp + off, nb, c->err,
                              sizeof c->err) == 0;
            c->sent += nb;
        }
        if (ok) {
            if (me < peer)
                add_bufs(acc, mine, mine, c->tmp);
            else
                add_bufs(acc, mine, c->tmp, mine);
        }
    }
    *root = mine;
    return ok;
}

/* Otherwise: the tree walked over the parts to part 0, which holds the root; a binomial-tree
 * broadcast copies it to every part (in round `bit`, the parts below `bit` send to part +
 * bit) into @p *root. */
static bool walk_and_broadcast(combine_state *c, int me, int P, void **root)
{
    tg_grad_accum *acc = c->acc;
    bool ok = walk(c, 0, acc->k);
    *root = me == 0 ? find_held(c, 0, acc->k)->buf : c->tmp;
    for (int bit = 1; bit < P && ok; bit <<= 1) {
        if (me < bit && me + bit < P)
            ok = do_send(c, me + bit, *root);
        else if (me >= bit && me < 2 * bit)
            ok = do_recv(c, me - bit, *root);
    }
    return ok;
}

tg_status tg_grad_accum_combine(tg_grad_accum *acc, const tg_grad_transport *tr, double *loss,
                                size_t *bytes_sent)
{
    static const char *fn = "tg_grad_accum_combine";
    if (bytes_sent)
        *bytes_sent = 0;
    if (!acc)
        return TG_ERR_ARG;
    tg_ctx *ctx = acc->ctx;
    tg__begin(ctx);
    if (!tr || !tr->send || !tr->recv || !tr->sendrecv || tr->n_parts < 1 || tr->part < 0 ||
        tr->part >= tr->n_parts) {
        tg__run_err(ctx, TG_ERR_ARG, fn, "incomplete transport (callbacks, part, n_parts)");
        return TG_ERR_ARG;
    }
    int P = tr->n_parts, me = tr->part;
    if (acc->k % P != 0 || acc->first != (int64_t)me * (acc->k / P) ||
        acc->count != acc->k / P) {
        tg__run_err(ctx, TG_ERR_ARG, fn,
                    "part %d of %d must hold micro-batches %" PRId64 " .. %" PRId64
                    " of k = %" PRId64 " (P must divide k); this accumulator holds %" PRId64
                    " .. %" PRId64, me, P, acc->k % P ? 0 : me * (acc->k / P),
                    acc->k % P ? 0 : (me + 1) * (acc->k / P) - 1, acc->k, acc->first,
                    acc->first + acc->count - 1);
        return TG_ERR_ARG;
    }
    if (acc->pushed != acc->count) {
        tg__run_err(ctx, TG_ERR_STATE, fn, "%" PRId64 " of this part's %" PRId64
                    " micro-batches pushed", acc->pushed, acc->count);
        return TG_ERR_STATE;
    }
    if (P == 1)
        return tg_grad_accum_finish(acc, loss);
    combine_state *c = tg__alloc_owned(ctx, sizeof *c, fn, TG__OWNER_CTX);
    if (!c || !(c->tmp = get_buf(acc))) {
        tg__free(ctx, c);
        tg__run_err(ctx, TG_ERR_NOMEM, fn, "out of memory for a receive buffer (%zu bytes)",
                    acc->bytes);
        return TG_ERR_NOMEM;
    }
    c->acc = acc;
    c->tr = tr;
    c->m = acc->k / P;
    c->bucket = tr->bucket_bytes ? tr->bucket_bytes : DEFAULT_BUCKET;
    for (int i = 0; i < acc->depth; i++)
        c->held[c->n_held++] = acc->stack[i];
    acc->depth = 0; /* the nodes are c->held's now */
    void *root = NULL;
    bool ok = is_pow2(P) && is_pow2(c->m) ? doubling(c, me, P, &root)
                                          : walk_and_broadcast(c, me, P, &root);
    if (ok) {
        unpack(acc, root, loss); /* the buffers go back to the accumulator below */
    } else {
        tg__run_err(ctx, TG_ERR_IO, fn, "part %d of %d: %s", me, P,
                    c->err[0] ? c->err : "the transport failed");
    }
    for (int i = 0; i < c->n_held; i++)
        put_buf(acc, c->held[i].buf);
    put_buf(acc, c->tmp);
    acc->pushed = 0;
    if (bytes_sent)
        *bytes_sent = c->sent;
    tg__free(ctx, c);
    return ok ? TG_OK : TG_ERR_IO;
}
