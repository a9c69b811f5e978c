/*
 * test_views.c - views, tested against references computed here by hand:
 *
 * - random chains (seeded) of permute / transpose / narrow / reshape, ranks 1..4, depth 1..4,
 *   f32 and f64: every link is a view (no copy; data pointing into the leaf, readable before
 *   any graph runs), except that reshape of a non-contiguous tensor gets a `contiguous` node;
 *   values (tg_get, tg_tensor_get_data, and through a following tg_scale or tg_add) and
 *   gradients (backward from sum(y * W), W fixed) equal the hand-computed gather / scatter
 *   through an index map of the leaf, bitwise;
 * - matmul on strided views (transposed, narrowed along either of the last two axes, permuted
 *   and broadcast batch dims, with transpose_a / transpose_b): values and gradients bitwise
 *   equal to the same matmul on tg_contiguous copies, f32 and f64, 1/2/3 threads; layouts
 *   matmul cannot read in place (no unit stride in the last two axes) get a `contiguous` node,
 *   the others none;
 * - MHA self-attention splits and merges heads without copying the projections (at most one
 *   `contiguous` node, to merge heads before the output projection).
 */
#include "testutil.h"
#include "tgrad_io.h"
#include "tgrad_nn.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* ---- helpers ------------------------------------------------------------------------------ */
static uint64_t rnext(uint64_t *s)
{
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

/* Uniform integer in [0, n). */
static int rint_(uint64_t *s, int n) { return (int)(rnext(s) % (uint64_t)n); }

/* Number of nodes of g whose op is `op`. */
static int count_op(const tg_graph *g, const char *op)
{
    int c = 0;
    for (int64_t i = 0; i < tg_graph_size(g); i++)
        c += strcmp(tg_tensor_op_name(tg_graph_node(g, i)), op) == 0;
    return c;
}

/* ---- 1. random view chains ------------------------------------------------------------------
 * The model of a tensor: its shape and, per logical (row-major) element, the flat index of the
 * leaf element it is. permute/transpose/narrow gather through the map; reshape keeps it. */
#define VMAX 256
typedef struct {
    int rank;
    int64_t shape[TG_MAX_RANK];
    int64_t numel;
    int64_t map[VMAX]; /* leaf element of each logical element */
    int64_t pos[VMAX]; /* its position in the buffer the tensor views (the leaf's, or the
                          copy that the last copying reshape made) */
} vmodel;

static void decode(const vmodel *m, int64_t f, int64_t *idx)
{
    for (int d = m->rank - 1; d >= 0; d--) {
        idx[d] = f % m->shape[d];
        f /= m->shape[d];
    }
}

static int64_t encode(int rank, const int64_t *shape, const int64_t *idx)
{
    int64_t f = 0;
    for (int d = 0; d < rank; d++)
        f = f * shape[d] + idx[d];
    return f;
}

/* y = permute(x, p): y.shape[k] = x.shape[p[k]], y[i] = x[j] with j[p[k]] = i[k]. */
static void m_permute(const vmodel *x, const int *p, vmodel *y)
{
    y->rank = x->rank;
    y->numel = x->numel;
    for (int k = 0; k < x->rank; k++)
        y->shape[k] = x->shape[p[k]];
    for (int64_t f = 0; f < y->numel; f++) {
        int64_t i[TG_MAX_RANK], j[TG_MAX_RANK];
        decode(y, f, i);
        for (int k = 0; k < x->rank; k++)
            j[p[k]] = i[k];
        int64_t src = encode(x->rank, x->shape, j);
        y->map[f] = x->map[src];
        y->pos[f] = x->pos[src];
    }
}

static void m_narrow(const vmodel *x, int axis, int64_t start, int64_t len, vmodel *y)
{
    *y = *x;
    y->shape[axis] = len;
    y->numel = x->numel / x->shape[axis] * len;
    for (int64_t f = 0; f < y->numel; f++) {
        int64_t i[TG_MAX_RANK];
        decode(y, f, i);
        i[axis] += start;
        int64_t src = encode(x->rank, x->shape, i);
        y->map[f] = x->map[src];
        y->pos[f] = x->pos[src];
    }
}

/* Elements laid out one after the other in the buffer (what tg__is_contiguous means). */
static bool consecutive(const vmodel *m)
{
    for (int64_t f = 1; f < m->numel; f++)
        if (m->pos[f] != m->pos[0] + f)
            return false;
    return true;
}

/* Check t against model m: shape, and (if `direct`, a view of the leaf x) every value, the
 * data pointer into x, and tg_tensor_get_data. */
static void check_view(tg_tensor *t, const vmodel *m, tg_tensor *x, const double *xv, bool values)
{
    ck_assert_int_eq(tg_tensor_rank(t), m->rank);
    ck_assert_int_eq(tg_tensor_numel(t), m->numel);
    for (int d = 0; d < m->rank; d++)
        ck_assert_int_eq(tg_tensor_dim(t, d), m->shape[d]);
    if (!values)
        return;
    size_t es = tg_dtype_size(tg_tensor_dtype(t));
    ck_assert_ptr_eq(tg_tensor_data(t), (char *)tg_tensor_data(x) + m->map[0] * (int64_t)es);
    double got[VMAX];
    ck_assert_int_eq(tg_tensor_get_data(t, got, TG_F64, (size_t)m->numel), TG_OK);
    for (int64_t f = 0; f < m->numel; f++) {
        ck_assert_msg(tg_get(t, f) == xv[m->map[f]], "%s: element %lld is %g, want %g",
                      tg_tensor_name(t), (long long)f, tg_get(t, f), xv[m->map[f]]);
        ck_assert(got[f] == xv[m->map[f]]);
    }
}

/* One random chain: leaf x (param) -> depth view ops -> v; y = scale(v, 2) or v + c;
 * loss = sum(y * W). */
static void view_chain_trial(tg_dtype dt, uint64_t seed)
{
    uint64_t rs = seed;
    tg_ctx *ctx = tu_ctx_new();
    tg_ctx_set_threads(ctx, 1 + rint_(&rs, 3));
    vmodel m[5];
    m[0].rank = 1 + rint_(&rs, 4);
    m[0].numel = 1;
    for (int d = 0; d < m[0].rank; d++) {
        m[0].shape[d] = 1 + rint_(&rs, 4);
        m[0].numel *= m[0].shape[d];
    }
    for (int64_t f = 0; f < m[0].numel; f++)
        m[0].map[f] = m[0].pos[f] = f;
    tg_tensor *x = tg_param(ctx, dt, m[0].rank, m[0].shape, "x");
    ck_assert_ptr_nonnull(x);
    double xv[VMAX];
    for (int64_t f = 0; f < m[0].numel; f++) {
        xv[f] = 0.5 * (double)f - 3.0 + 0.25 * (double)(f % 3); /* exact in f32 */
        tg_set(x, f, xv[f]);
    }
    int depth = 1 + rint_(&rs, 4);
    tg_tensor *v[5] = {x};
    bool direct[5] = {true};
    int copies = 0, n_perm = 0, n_narrow = 0, n_reshape = 0;
    char trace[256] = "";
    size_t tl = 0;
    for (int s = 1; s <= depth; s++) {
        const vmodel *a = &m[s - 1];
        vmodel *b = &m[s];
        int r = a->rank, kind = rint_(&rs, 4);
        tg_tensor *t = NULL;
        bool copy = false;
        if (kind == 0) { /* permute, entries sometimes negative */
            int p[TG_MAX_RANK], pa[TG_MAX_RANK];
            for (int k = 0; k < r; k++)
                p[k] = k;
            for (int k = r - 1; k > 0; k--) {
                int j = rint_(&rs, k + 1), tmp = p[k];
                p[k] = p[j];
                p[j] = tmp;
            }
            for (int k = 0; k < r; k++)
                pa[k] = rint_(&rs, 2) ? p[k] - r : p[k];
            m_permute(a, p, b);
            t = tg_permute(ctx, v[s - 1], pa);
            n_perm++;
            tl += (size_t)snprintf(trace + tl, sizeof trace - tl, " permute");
        } else if (kind == 1) { /* transpose (the same axis twice is the identity) */
            int a0 = rint_(&rs, r), a1 = rint_(&rs, r), p[TG_MAX_RANK];
            for (int k = 0; k < r; k++)
                p[k] = k;
            p[a0] = a1;
            p[a1] = a0;
            m_permute(a, p, b);
            t = tg_transpose(ctx, v[s - 1], rint_(&rs, 2) ? a0 - r : a0, a1);
            n_perm++;
            tl += (size_t)snprintf(trace + tl, sizeof trace - tl, " transpose(%d,%d)", a0, a1);
        } else if (kind == 2) { /* narrow */
            int ax = rint_(&rs, r);
            int64_t len = 1 + rint_(&rs, (int)a->shape[ax]);
            int64_t st = rint_(&rs, (int)(a->shape[ax] - len + 1));
            m_narrow(a, ax, st, len, b);
            t = tg_narrow(ctx, v[s - 1], rint_(&rs, 2) ? ax - r : ax, st, len);
            n_narrow++;
            tl += (size_t)snprintf(trace + tl, sizeof trace - tl, " narrow(%d,%lld,%lld)", ax,
                                   (long long)st, (long long)len);
        } else { /* reshape into a random factorisation, sometimes with a -1 */
            *b = *a;
            b->rank = 1 + rint_(&rs, 4);
            int64_t rem = a->numel, req[TG_MAX_RANK];
            for (int k = 0; k < b->rank; k++) {
                int64_t d = rem;
                if (k < b->rank - 1) {
                    int64_t divs[VMAX], nd = 0;
                    for (int64_t q = 1; q <= rem; q++)
                        if (rem % q == 0)
                            divs[nd++] = q;
                    d = divs[rint_(&rs, (int)nd)];
                }
                b->shape[k] = req[k] = d;
                rem /= d;
            }
            if (rint_(&rs, 2))
                req[rint_(&rs, b->rank)] = -1;
            copy = !consecutive(a);
            for (int64_t f = 0; copy && f < a->numel; f++)
                b->pos[f] = f; /* a view of the fresh copy */
            t = tg_reshape(ctx, v[s - 1], b->rank, req);
            n_reshape++;
            tl += (size_t)snprintf(trace + tl, sizeof trace - tl, " reshape%s",
                                   copy ? "(copy)" : "");
        }
        ck_assert_msg(t != NULL, "%s: %s", trace, tg_ctx_message(ctx));
        v[s] = t;
        copies += copy;
        direct[s] = direct[s - 1] && !copy;
        /* every link is a view; a reshape that needed a copy views a `contiguous` node */
        ck_assert_msg(tg_tensor_is_view(t), "%s: not a view", trace);
        if (copy) {
            tg_tensor *cp = tg_tensor_src(t, 0);
            ck_assert_str_eq(tg_tensor_op_name(cp), "contiguous");
            ck_assert(!tg_tensor_is_view(cp));
            ck_assert_ptr_eq(tg_tensor_src(cp, 0), v[s - 1]);
        } else {
            ck_assert_ptr_eq(tg_tensor_src(t, 0), v[s - 1]);
        }
        /* a view of the leaf reads the leaf's buffer at once, before any graph */
        check_view(t, b, x, xv, direct[s]);
    }
    const vmodel *fm = &m[depth];
    tg_tensor *vf = v[depth];
    int64_t n = fm->numel;
    bool use_add = rint_(&rs, 2);
    double cv[VMAX], wv[VMAX];
    int64_t shp[TG_MAX_RANK];
    memcpy(shp, fm->shape, sizeof shp);
    tg_tensor *c = tg_const(ctx, dt, fm->rank, shp, "c");
    tg_tensor *W = tg_const(ctx, dt, fm->rank, shp, "W");
    for (int64_t f = 0; f < n; f++) {
        cv[f] = 0.125 * (double)(f % 7) - 0.375;
        wv[f] = 0.25 * (double)((f * 37) % 11) - 1.25;
        tg_set(c, f, cv[f]);
        tg_set(W, f, wv[f]);
    }
    tg_tensor *y = use_add ? tg_add(ctx, vf, c) : tg_scale(ctx, vf, 2.0);
    tg_tensor *loss = tg_sum_all(ctx, tg_mul(ctx, y, W));
    ck_assert_msg(loss != NULL, "%s: %s", trace, tg_ctx_message(ctx));
    ck_assert_int_eq(tg_keep(vf), TG_OK);
    tg_tensor *outs[2] = {loss, y};
    tg_graph *g = tg_graph_new(ctx, outs, 2);
    ck_assert_msg(g != NULL, "%s: %s", trace, tg_ctx_message(ctx));
    /* the graph copies only where a consumer needs contiguity: a reshape of a strided view,
     * and the elementwise op (not strided) reading a strided view */
    int follow_copy = !consecutive(fm);
    ck_assert_msg(count_op(g, "contiguous") == copies + follow_copy,
                  "%s: %d contiguous nodes, want %d + %d", trace, count_op(g, "contiguous"),
                  copies, follow_copy);
    ck_assert_int_eq(count_op(g, "permute") + count_op(g, "transpose"), n_perm);
    ck_assert_int_eq(count_op(g, "narrow"), n_narrow);
    ck_assert_int_eq(count_op(g, "reshape"), n_reshape);
    ck_assert_int_eq(tg_graph_forward(g), TG_OK);
    for (int s = 1; s <= depth; s++)
        if (direct[s]) /* still the leaf's buffer after a graph ran */
            check_view(v[s], &m[s], x, xv, true);
    /* the kept view and the op after it */
    for (int64_t f = 0; f < n; f++) {
        double xe = xv[fm->map[f]];
        ck_assert_msg(tg_get(vf, f) == xe, "%s: view element %lld", trace, (long long)f);
        double want = use_add ? (dt == TG_F32 ? (double)((float)xe + (float)cv[f]) : xe + cv[f])
                              : 2.0 * xe;
        ck_assert_msg(tg_get(y, f) == want, "%s: y[%lld] = %.17g, want %.17g", trace,
                      (long long)f, tg_get(y, f), want);
    }
    double got[VMAX];
    ck_assert_int_eq(tg_tensor_get_data(vf, got, TG_F64, (size_t)n), TG_OK);
    for (int64_t f = 0; f < n; f++)
        ck_assert(got[f] == xv[fm->map[f]]);
    /* gradients: dL/dy = W, dL/dv = W (add) or 2 W (scale), scattered into x through the map
     * (each leaf element at most once: views never repeat an element) */
    ck_assert_int_eq(tg_graph_backward(g, loss, NULL), TG_OK);
    double gx[VMAX] = {0};
    for (int64_t f = 0; f < n; f++) {
        double gv = use_add ? wv[f] : 2.0 * wv[f];
        ck_assert_msg(tg_grad_get(vf, f) == gv, "%s: dv[%lld] = %g, want %g", trace,
                      (long long)f, tg_grad_get(vf, f), gv);
        ck_assert(gx[fm->map[f]] == 0);
        gx[fm->map[f]] = gv;
    }
    for (int64_t f = 0; f < m[0].numel; f++)
        ck_assert_msg(tg_grad_get(x, f) == gx[f], "%s: dx[%lld] = %g, want %g", trace,
                      (long long)f, tg_grad_get(x, f), gx[f]);
    tu_ctx_free(ctx);
}

START_TEST(test_view_chains)
{
    tg_dtype dt = tu_dtypes[_i];
    const char *env = getenv("TG_VIEWS_N"); /* more trials for a longer local search */
    int trials = env && atoi(env) > 0 ? atoi(env) : tu_under_valgrind() ? 40 : 600;
    for (int t = 0; t < trials; t++)
        view_chain_trial(dt, 1000003ull * (uint64_t)t + (uint64_t)_i);
}
END_TEST

/* Hand-written cases: reshape of a contiguous narrow (rows of a matrix) is a view of the leaf
 * with an offset; a view of a view of a view composes offset and strides; a reshape of a
 * transpose gets a copy and is a view of it; views of a leaf survive tg_graph_free. */
START_TEST(test_view_compose)
{
    tg_dtype dt = tu_dtypes[_i];
    size_t es = tg_dtype_size(dt);
    tg_ctx *ctx = tu_ctx_new();
    tg_tensor *x = tg_param(ctx, dt, TG_DIMS(4, 3, 5), "x"); /* x[i,j,k] = 15 i + 5 j + k */
    for (int i = 0; i < 60; i++)
        tg_set(x, i, i);
    /* narrow rows 1..2 of axis 0 -> (2, 3, 5), contiguous at offset 15; reshape (6, 5) */
    tg_tensor *r = tg_reshape(ctx, tg_narrow(ctx, x, 0, 1, 2), TG_DIMS(6, 5));
    ck_assert(tg_tensor_is_view(r));
    ck_assert_str_eq(tg_tensor_op_name(tg_tensor_src(r, 0)), "narrow");
    ck_assert_ptr_eq(tg_tensor_data(r), (char *)tg_tensor_data(x) + 15 * es);
    for (int i = 0; i < 30; i++)
        ck_assert(tg_get(r, i) == 15 + i);
    /* t = permute(x, (2, 0, 1)) (5, 4, 3); n = narrow(t, 2, 1, 2) (5, 4, 2);
     * u = transpose(n, 0, 1) (4, 5, 2); w = narrow(u, 1, 3, 2) (4, 2, 2):
     * w[a, b, c] = u[a, 3 + b, c] = n[3 + b, a, c] = t[3 + b, a, 1 + c] = x[a, 1 + c, 3 + b] */
    int p[3] = {2, 0, 1};
    tg_tensor *w = tg_narrow(ctx, tg_transpose(ctx, tg_narrow(ctx, tg_permute(ctx, x, p), 2, 1, 2),
                                               0, 1), 1, 3, 2);
    EXPECT_SHAPE(w, 4, 2, 2);
    ck_assert(tg_tensor_is_view(w));
    ck_assert_ptr_eq(tg_tensor_data(w), (char *)tg_tensor_data(x) + (5 + 3) * es);
    for (int a = 0; a < 4; a++)
        for (int b = 0; b < 2; b++)
            for (int c = 0; c < 2; c++) {
                int64_t idx[3] = {a, b, c};
                ck_assert(tg_get_at(w, idx) == 15 * a + 5 * (1 + c) + 3 + b);
            }
    /* writes through a view of a leaf land in the leaf */
    int64_t i0[3] = {1, 0, 1};
    tg_set(w, 5, -1.0); /* w[1, 0, 1] = x[1, 2, 3] */
    ck_assert(tg_get_at(w, i0) == -1.0);
    ck_assert(tg_get(x, 15 + 10 + 3) == -1.0);
    tg_set(x, 28, 28.0);
    /* reshape of the strided w: a contiguous copy, and the reshape views the copy */
    tg_tensor *f = tg_reshape(ctx, w, TG_DIMS(16));
    ck_assert(tg_tensor_is_view(f));
    tg_tensor *cp = tg_tensor_src(f, 0);
    ck_assert_str_eq(tg_tensor_op_name(cp), "contiguous");
    ck_assert(!tg_tensor_is_view(cp));
    ck_assert_ptr_eq(tg_tensor_src(cp, 0), w);
    ck_assert_ptr_null(tg_tensor_data(f)); /* an op result: no data before a graph runs it */
    tg_tensor *loss = tg_sum_all(ctx, tg_mul(ctx, f, f));
    tg_graph *g = tg_graph_new(ctx, &loss, 1);
    ck_assert_ptr_nonnull(g);
    ck_assert_int_eq(tg_graph_forward(g), TG_OK);
    ck_assert_int_eq(tg_graph_backward(g, loss, NULL), TG_OK);
    for (int a = 0; a < 4; a++) /* d/dx sum w^2 = 2 x on the 16 elements w reads, else 0 */
        for (int j = 0; j < 3; j++)
            for (int k = 0; k < 5; k++) {
                bool in = j >= 1 && j <= 2 && k >= 3;
                double xe = 15 * a + 5 * j + k;
                ck_assert(tg_grad_get(x, 15 * a + 5 * j + k) == (in ? 2 * xe : 0.0));
            }
    tg_graph_free(g);
    ck_assert(tg_get(w, 0) == 8.0); /* still the leaf's buffer */
    ck_assert(tg_get(r, 0) == 15.0);
    tu_ctx_free(ctx);
}
END_TEST

/* Copies through a strided view follow its strides: tg_tensor_copy from a transposed or
 * narrowed view, and tg_fill / tg_fill_uniform on a view of a leaf (which writes into the leaf,
 * as tg_set does) touch exactly the view's elements. */
START_TEST(test_view_copy_fill)
{
    tg_dtype dt = tu_dtypes[_i];
    tg_ctx *ctx = tu_ctx_new();
    tg_tensor *x = tg_param(ctx, dt, TG_DIMS(3, 4), "x"); /* x[i, j] = 4 i + j */
    for (int i = 0; i < 12; i++)
        tg_set(x, i, i);
    tg_tensor *xt = tg_transpose(ctx, x, 0, 1);             /* (4, 3): xt[j, i] = 4 i + j */
    tg_tensor *d = tg_input(ctx, dt, TG_DIMS(4, 3), "d");
    ck_assert_int_eq(tg_tensor_copy(d, xt), TG_OK);
    for (int j = 0; j < 4; j++)
        for (int i = 0; i < 3; i++)
            ck_assert_msg(tg_get(d, j * 3 + i) == 4 * i + j, "d[%d, %d] = %g", j, i,
                          tg_get(d, j * 3 + i));
    /* a strided view of the destination itself is refused (it would read what it wrote) */
    tg_tensor *sq = tg_param(ctx, dt, TG_DIMS(2, 2), "sq");
    ck_assert_int_eq(tg_tensor_copy(sq, tg_transpose(ctx, sq, 0, 1)), TG_ERR_ARG);
    tu_assert_error(ctx, TG_ERR_ARG, "tg_tensor_copy: 'transpose");
    tg_tensor *nw = tg_narrow(ctx, x, 1, 1, 2);             /* (3, 2): x[i, 1 + j] */
    tg_tensor *d2 = tg_input(ctx, TG_F64, TG_DIMS(3, 2), "d2");
    ck_assert_int_eq(tg_tensor_copy(d2, nw), TG_OK);
    for (int k = 0; k < 6; k++)
        ck_assert(tg_get(d2, k) == 4 * (k / 2) + 1 + k % 2);
    /* fill the middle two columns: only they change */
    tg_fill(nw, -7.0);
    for (int k = 0; k < 12; k++)
        ck_assert_msg(tg_get(x, k) == (k % 4 == 1 || k % 4 == 2 ? -7.0 : k), "x[%d] = %g", k,
                      tg_get(x, k));
    tg_fill_uniform(tg_narrow(ctx, xt, 0, 3, 1), 10, 11); /* column 3 of x */
    tg_fill_normal(tg_narrow(ctx, xt, 0, 0, 1), 100, 0.5); /* column 0 of x */
    for (int k = 0; k < 12; k++) {
        double v = tg_get(x, k);
        if (k % 4 == 3)
            ck_assert(v >= 10 && v < 11);
        else if (k % 4 == 0)
            ck_assert(v > 90 && v < 110);
        else
            ck_assert(v == -7.0);
    }
    tu_ctx_free(ctx);
}
END_TEST

/* ---- 2. strided matmul ------------------------------------------------------------------------
 * An operand of logical shape S (rank r) is built from a leaf L as permute(narrow(L), P): the
 * narrowed leaf has shape N[j] = S[Pinv[j]], and L is N padded by pad[j] on axes narrowed at
 * start[j]. */
typedef struct {
    int rank;
    int64_t shape[4]; /* logical shape S */
    int perm[4];      /* P */
    int64_t pad[4], start[4];
    bool use_transpose; /* P swaps the last two axes only: build it with tg_transpose */
} oplayout;

typedef struct {
    oplayout a, b;
    bool ta, tb;
    uint64_t seed;
} mmcase;

/* Strides of the operand view (elements): leaf row-major strides, permuted. */
static void op_strides(const oplayout *o, int64_t *st)
{
    int64_t ls[4], s = 1, L[4];
    int inv[4];
    for (int k = 0; k < o->rank; k++)
        inv[o->perm[k]] = k;
    for (int j = 0; j < o->rank; j++)
        L[j] = o->shape[inv[j]] + o->pad[j];
    for (int j = o->rank - 1; j >= 0; j--) {
        ls[j] = s;
        s *= L[j];
    }
    for (int k = 0; k < o->rank; k++)
        st[k] = ls[o->perm[k]];
}

/* Can matmul read this operand in place? Only if one of its last two axes has unit stride
 * (size-1 axes always can). */
static bool op_needs_copy(const oplayout *o)
{
    int64_t st[4];
    op_strides(o, st);
    int r = o->rank;
    return o->shape[r - 2] > 1 && o->shape[r - 1] > 1 && st[r - 2] != 1 && st[r - 1] != 1;
}

static tg_tensor *build_operand(tg_ctx *ctx, tg_dtype dt, const oplayout *o, const char *name,
                                bool contig)
{
    int inv[4];
    for (int k = 0; k < o->rank; k++)
        inv[o->perm[k]] = k;
    int64_t L[4];
    for (int j = 0; j < o->rank; j++)
        L[j] = o->shape[inv[j]] + o->pad[j];
    tg_tensor *t = tg_param(ctx, dt, o->rank, L, name);
    tg_fill_uniform(t, -1, 1);
    for (int j = 0; j < o->rank; j++)
        if (o->pad[j])
            t = tg_narrow(ctx, t, j, o->start[j], L[j] - o->pad[j]);
    bool ident = true;
    for (int k = 0; k < o->rank; k++)
        ident = ident && o->perm[k] == k;
    if (o->use_transpose)
        t = tg_transpose(ctx, t, -1, -2);
    else if (!ident)
        t = tg_permute(ctx, t, o->perm);
    return contig ? tg_contiguous(ctx, t) : t;
}

/* A random layout for logical shape (batch..., R, C). */
static void random_layout(uint64_t *rs, oplayout *o, int rank, const int64_t *shape)
{
    memset(o, 0, sizeof *o);
    o->rank = rank;
    memcpy(o->shape, shape, sizeof(int64_t) * (size_t)rank);
    for (int k = 0; k < rank; k++)
        o->perm[k] = k;
    int kind = rint_(rs, 4);
    if (kind == 1) { /* transposed: stored (.., C, R) */
        o->perm[rank - 2] = rank - 1;
        o->perm[rank - 1] = rank - 2;
        o->use_transpose = rint_(rs, 2);
    } else if (kind >= 2) { /* any permutation of all axes (batch ones included) */
        for (int k = rank - 1; k > 0; k--) {
            int j = rint_(rs, k + 1), tmp = o->perm[k];
            o->perm[k] = o->perm[j];
            o->perm[j] = tmp;
        }
    }
    for (int j = 0; j < rank; j++)
        if (rint_(rs, 3) == 0) {
            o->pad[j] = 1 + rint_(rs, 3);
            o->start[j] = rint_(rs, (int)o->pad[j] + 1);
        }
}

/* Output values then leaf gradients (a's, b's) of case c, as a malloc'd f64 array; mode 0:
 * views, 1: tg_contiguous copies. *n_contig: contiguous nodes in the graph. */
static double *run_mm(const mmcase *c, tg_dtype dt, int mode, int nt, size_t *len, int *n_contig)
{
    tg_ctx *ctx = tu_ctx_new();
    tg_ctx_seed(ctx, c->seed);
    tg_ctx_set_threads(ctx, nt);
    tg_tensor *a = build_operand(ctx, dt, &c->a, "A", mode == 1);
    tg_tensor *b = build_operand(ctx, dt, &c->b, "B", mode == 1);
    tg_tensor *y = tg_matmul(ctx, a, b, c->ta, c->tb);
    ck_assert_msg(y != NULL, "%s", tg_ctx_message(ctx));
    tg_graph *g = tg_graph_new(ctx, &y, 1);
    ck_assert_msg(g != NULL, "%s", tg_ctx_message(ctx));
    *n_contig = count_op(g, "contiguous");
    tg_tensor *dy = tg_const(ctx, dt, tg_tensor_rank(y), tg_tensor_shape(y), "dy");
    tg_fill_uniform(dy, -1, 1);
    ck_assert_int_eq(tg_graph_forward(g), TG_OK);
    ck_assert_int_eq(tg_graph_backward(g, y, dy), TG_OK);
    size_t n = (size_t)tg_tensor_numel(y);
    for (int64_t l = 0; l < tg_graph_n_grad_leaves(g); l++)
        n += (size_t)tg_tensor_numel(tg_graph_grad_leaf(g, l));
    double *out = malloc(sizeof(double) * n);
    size_t k = 0;
    for (int64_t i = 0; i < tg_tensor_numel(y); i++)
        out[k++] = tg_get(y, i);
    for (int64_t l = 0; l < tg_graph_n_grad_leaves(g); l++) {
        tg_tensor *t = tg_graph_grad_leaf(g, l);
        for (int64_t i = 0; i < tg_tensor_numel(t); i++)
            out[k++] = tg_grad_get(t, i);
    }
    *len = n;
    tu_ctx_free(ctx);
    return out;
}

static void describe_layout(const oplayout *o, char *buf, size_t n)
{
    int k = snprintf(buf, n, "(");
    for (int d = 0; d < o->rank; d++)
        k += snprintf(buf + k, n - (size_t)k, "%s%lld", d ? "," : "", (long long)o->shape[d]);
    k += snprintf(buf + k, n - (size_t)k, ") perm");
    for (int d = 0; d < o->rank; d++)
        k += snprintf(buf + k, n - (size_t)k, " %d", o->perm[d]);
    k += snprintf(buf + k, n - (size_t)k, " pad");
    for (int d = 0; d < o->rank; d++)
        k += snprintf(buf + k, n - (size_t)k, " %lld@%lld", (long long)o->pad[d],
                      (long long)o->start[d]);
}

/* Views vs contiguous copies, bitwise, at 1, 2, 3 threads; the copy count. Returns the number
 * of operands that needed a copy. */
static int check_mm(const mmcase *c, tg_dtype dt)
{
    char da[160], db[160];
    describe_layout(&c->a, da, sizeof da);
    describe_layout(&c->b, db, sizeof db);
    size_t n0, n1;
    int k0, k1;
    double *ref = run_mm(c, dt, 1, 1, &n0, &k0);
    ck_assert_int_eq(k0, 2);
    int want = op_needs_copy(&c->a) + op_needs_copy(&c->b);
    for (int nt = 1; nt <= 3; nt++)
        for (int mode = 0; mode < 2; mode++) {
            if (mode == 1 && nt == 1)
                continue;
            double *got = run_mm(c, dt, mode, nt, &n1, &k1);
            ck_assert_uint_eq(n0, n1);
            if (mode == 0)
                ck_assert_msg(k1 == want, "a %s, b %s: %d contiguous nodes, want %d", da, db,
                              k1, want);
            size_t bad = n0;
            for (size_t i = 0; i < n0 && bad == n0; i++)
                if (memcmp(&ref[i], &got[i], sizeof(double)) != 0)
                    bad = i;
            ck_assert_msg(bad == n0, "%s ta %d tb %d a %s, b %s, %s, %d threads: element %zu "
                          "is %.17g, want %.17g", dt == TG_F32 ? "f32" : "f64", c->ta, c->tb,
                          da, db, mode ? "contiguous" : "views", nt, bad, got[bad], ref[bad]);
            free(got);
        }
    free(ref);
    return want;
}

START_TEST(test_matmul_strided_random)
{
    tg_dtype dt = tu_dtypes[_i];
    const char *env = getenv("TG_VIEWS_N");
    int trials = env && atoi(env) > 0 ? atoi(env) / 5 : tu_under_valgrind() ? 6 : 120;
    int copies = 0, flips = 0;
    uint64_t rs = 4242 + (uint64_t)_i;
    for (int t = 0; t < trials; t++) {
        mmcase c;
        memset(&c, 0, sizeof c);
        c.seed = rnext(&rs);
        c.ta = rint_(&rs, 2);
        c.tb = rint_(&rs, 2);
        bool big = t % 10 == 0 && !tu_under_valgrind(); /* parallel paths (> TG_PAR_MIN) */
        int64_t M = big ? 20 + rint_(&rs, 6) : 1 + rint_(&rs, 5);
        int64_t N = big ? 20 + rint_(&rs, 6) : 1 + rint_(&rs, 5);
        int64_t K = big ? 20 + rint_(&rs, 6) : 1 + rint_(&rs, 5);
        if (!big && rint_(&rs, 2)) /* mostly matrices (not vectors) */
            M = 2 + rint_(&rs, 4), N = 2 + rint_(&rs, 4), K = 2 + rint_(&rs, 4);
        int rb = rint_(&rs, 3); /* output batch rank 0..2 */
        int64_t bat[2];
        for (int d = 0; d < rb; d++)
            bat[d] = big ? 2 + rint_(&rs, 2) : 1 + rint_(&rs, 3);
        /* each operand: a suffix of the batch dims, some broadcast (1) */
        int64_t sa[4], sb[4];
        int ra = 2 + rb - rint_(&rs, rb + 1), rbb = 2 + rb - rint_(&rs, rb + 1);
        for (int d = 0; d < ra - 2; d++)
            sa[d] = rint_(&rs, 3) == 0 ? 1 : bat[rb - (ra - 2) + d];
        for (int d = 0; d < rbb - 2; d++)
            sb[d] = rint_(&rs, 3) == 0 ? 1 : bat[rb - (rbb - 2) + d];
        sa[ra - 2] = c.ta ? K : M;
        sa[ra - 1] = c.ta ? M : K;
        sb[rbb - 2] = c.tb ? N : K;
        sb[rbb - 1] = c.tb ? K : N;
        random_layout(&rs, &c.a, ra, sa);
        random_layout(&rs, &c.b, rbb, sb);
        int64_t st[4];
        op_strides(&c.a, st);
        flips += st[ra - 2] == 1 && sa[ra - 2] > 1 && sa[ra - 1] > 1;
        copies += check_mm(&c, dt);
    }
    if (!tu_under_valgrind()) /* the generator covers both kinds of layout */
        ck_assert(copies > 0 && flips > 0);
}
END_TEST

/* Hand-picked layouts: each of the named kinds, with both transpose flags. */
START_TEST(test_matmul_strided_named)
{
    tg_dtype dt = tu_dtypes[_i];
    for (int flags = 0; flags < 4; flags++) {
        bool ta = flags & 1, tb = flags & 2;
        int64_t M = 3, K = 4, N = 5;
        mmcase c;
        /* a: transposed (stored (K, M) row-major), b: narrowed along its last axis */
        memset(&c, 0, sizeof c);
        c.seed = 11;
        c.ta = ta;
        c.tb = tb;
        c.a = (oplayout){2, {ta ? K : M, ta ? M : K}, {1, 0}, {0}, {0}, true};
        c.b = (oplayout){2, {tb ? N : K, tb ? K : N}, {0, 1}, {0, 2}, {0, 1}, false};
        ck_assert_int_eq(check_mm(&c, dt), 0);
        /* a narrowed along its second-to-last axis in a batch, b with permuted batch dims
         * (2, 3) stored as (3, 2) and broadcast against a's (2, 1) batch */
        memset(&c, 0, sizeof c);
        c.seed = 12;
        c.ta = ta;
        c.tb = tb;
        c.a = (oplayout){4, {2, 1, ta ? K : M, ta ? M : K}, {0, 1, 2, 3}, {0, 0, 3, 0},
                         {0, 0, 2, 0}, false};
        c.b = (oplayout){4, {2, 3, tb ? N : K, tb ? K : N}, {1, 0, 2, 3}, {0}, {0}, false};
        ck_assert_int_eq(check_mm(&c, dt), 0);
        /* layouts matmul cannot read: the matrix axes come from the leaf's outer axes (no unit
         * stride), e.g. a leaf (R, C, 3) narrowed along its last axis to 1 and permuted to
         * (1, R, C); and b's last axis narrowed then the two moved before a batch axis */
        memset(&c, 0, sizeof c);
        c.seed = 13;
        c.ta = ta;
        c.tb = tb;
        c.a = (oplayout){3, {1, ta ? K : M, ta ? M : K}, {2, 0, 1}, {0, 0, 2}, {0, 0, 1}, false};
        c.b = (oplayout){3, {2, tb ? N : K, tb ? K : N}, {2, 1, 0}, {0, 0, 1}, {0, 0, 1}, false};
        ck_assert_int_eq(check_mm(&c, dt), 2);
    }
}
END_TEST

/* One view as both operands (x^T x^T^T and, through a layout matmul cannot read, twice copied):
 * bitwise the same as on one contiguous copy, values and the leaf's gradient. */
static void self_mm(tg_dtype dt, int kind, int nt, bool contig, double *out, int *n_contig)
{
    tg_ctx *ctx = tu_ctx_new();
    tg_ctx_seed(ctx, 99);
    tg_ctx_set_threads(ctx, nt);
    tg_tensor *x = tg_param(ctx, dt, TG_DIMS(6, 5, 3), "x");
    tg_fill_uniform(x, -1, 1);
    int p[3] = {2, 0, 1};
    tg_tensor *v = kind == 0 ? tg_transpose(ctx, tg_narrow(ctx, x, 2, 1, 1), 0, 1) /* (5,6,1) */
                             : tg_permute(ctx, tg_narrow(ctx, x, 2, 2, 1), p);    /* (1,6,5) */
    if (contig)
        v = tg_contiguous(ctx, v);
    tg_tensor *y = kind == 0 ? tg_matmul(ctx, v, v, true, false)  /* (5, 1, 1) */
                             : tg_matmul(ctx, v, v, false, true); /* (1, 6, 6) */
    tg_tensor *loss = tg_sum_all(ctx, tg_mul(ctx, y, y));
    tg_tensor *outs[2] = {loss, y};
    tg_graph *g = tg_graph_new(ctx, outs, 2);
    ck_assert_msg(g != NULL, "%s", tg_ctx_message(ctx));
    *n_contig = count_op(g, "contiguous");
    ck_assert_int_eq(tg_graph_forward(g), TG_OK);
    ck_assert_int_eq(tg_graph_backward(g, loss, NULL), TG_OK);
    int k = 0;
    for (int64_t i = 0; i < tg_tensor_numel(y); i++)
        out[k++] = tg_get(y, i);
    for (int64_t i = 0; i < 90; i++)
        out[k++] = tg_grad_get(x, i);
    tu_ctx_free(ctx);
}

START_TEST(test_matmul_same_view_twice)
{
    tg_dtype dt = tu_dtypes[_i];
    for (int kind = 0; kind < 2; kind++) {
        double ref[200], got[200];
        int nc;
        memset(ref, 0, sizeof ref);
        self_mm(dt, kind, 1, true, ref, &nc);
        ck_assert_int_eq(nc, 1);
        for (int nt = 1; nt <= 3; nt++) {
            memset(got, 0, sizeof got);
            self_mm(dt, kind, nt, false, got, &nc);
            ck_assert_int_eq(nc, kind == 0 ? 0 : 2); /* kind 1: (6, 5) with strides (3, 15) */
            ck_assert_msg(memcmp(ref, got, sizeof ref) == 0, "kind %d, %d threads", kind, nt);
        }
    }
}
END_TEST

/* ---- 3. MHA splits heads with views ------------------------------------------------------- */
START_TEST(test_mha_no_projection_copies)
{
    tg_dtype dt = tu_dtypes[_i];
    for (int masked = 0; masked < 4; masked++) {
        bool fused = masked >= 2; /* the flash_attention node reads the views too */
        tg_ctx *ctx = tu_ctx_new();
        tg_ctx_set_fusion(ctx, fused);
        tg_ctx_seed(ctx, 3);
        tg_mha m;
        ck_assert_int_eq(tg_mha_init(ctx, &m, dt, 8, 2, NULL), TG_OK);
        tg_tensor *x = tu_input(ctx, dt, TG_DIMS(2, 5, 8), "x", -1, 1);
        tg_attn_masks mk = {.causal = masked % 2 == 1};
        tg_tensor *y = tg_mha_forward(ctx, &m, x, x, x, &mk, NULL);
        ck_assert_msg(y != NULL, "%s", tg_ctx_message(ctx));
        tg_tensor *loss = tg_sum_all(ctx, tg_mul(ctx, y, y));
        tg_graph *g = tg_graph_new(ctx, &loss, 1);
        ck_assert_ptr_nonnull(g);
        /* at most one copy: merging the heads before the output projection */
        int nc = count_op(g, "contiguous");
        ck_assert_msg(nc <= 1, "%d contiguous nodes", nc);
        int views = 0, copies_of_views = 0;
        for (int64_t i = 0; i < tg_graph_size(g); i++) {
            tg_tensor *t = tg_graph_node(g, i);
            const char *op = tg_tensor_op_name(t);
            if (!strcmp(op, "reshape") || !strcmp(op, "transpose") || !strcmp(op, "permute") ||
                !strcmp(op, "narrow")) {
                ck_assert_msg(tg_tensor_is_view(t), "%s is not a view", op);
                views++;
            }
            if (!strcmp(op, "contiguous")) {
                /* the one copy reads the attention output (B, H, T, Dh) moved to (B, T, H, Dh) */
                tg_tensor *s = tg_tensor_src(t, 0);
                ck_assert_str_eq(tg_tensor_op_name(s), "transpose");
                ck_assert_str_eq(tg_tensor_op_name(tg_tensor_src(s, 0)),
                                 fused ? "flash_attention" : "matmul");
                copies_of_views++;
            }
            /* nothing reads a projection through a copy: every matmul operand is the
             * projection's own buffer, viewed */
            if (!strcmp(op, "matmul"))
                for (int k = 0; k < 2; k++)
                    ck_assert_str_ne(tg_tensor_op_name(tg_tensor_src(t, k)), "contiguous");
            if (!strcmp(op, "flash_attention"))
                for (int k = 0; k < 3; k++)
                    ck_assert_str_ne(tg_tensor_op_name(tg_tensor_src(t, k)), "contiguous");
            ck_assert(!fused || (strcmp(op, "softmax") && strcmp(op, "matmul")));
        }
        ck_assert_int_ge(views, 6);
        ck_assert_int_eq(copies_of_views, nc);
        ck_assert_int_eq(tg_graph_forward(g), TG_OK);
        ck_assert_int_eq(tg_graph_backward(g, loss, NULL), TG_OK);
        ck_assert_int_eq(tu_count_nan(m.in_proj_weight, true), 0);
        tu_ctx_free(ctx);
    }
}
END_TEST

/* Writing a strided view to a file is refused (its buffer is not the view's row-major values);
 * its contiguous copy writes and reads back in view order. */
START_TEST(test_write_strided_view)
{
    tg_ctx *ctx = tu_ctx_new();
    tg_tensor *x = tu_input(ctx, TG_F64, TG_DIMS(2, 3), "x", -1, 1);
    tg_tensor *v = tg_transpose(ctx, x, 0, 1);
    ck_assert_ptr_nonnull(v);
    char dir[256], path[300];
    tu_mkdtemp(dir, sizeof dir, "view");
    snprintf(path, sizeof path, "%s/v.npy", dir);
    ck_assert_int_eq(tg_npy_write(ctx, path, v), TG_ERR_ARG);
    tu_assert_error(ctx, TG_ERR_ARG, "strided view");
    tg_ctx_clear_error(ctx);
    tg_tensor *c = tg_contiguous(ctx, v);
    tg_graph *g = tg_graph_new(ctx, &c, 1);
    ck_assert_int_eq(tg_graph_forward(g), TG_OK);
    ck_assert_int_eq(tg_npy_write(ctx, path, c), TG_OK);
    tg_tensor *back = tg_npy_read(ctx, path, TG_F64, NULL);
    ck_assert_ptr_nonnull(back);
    for (int64_t i = 0; i < 6; i++)
        ck_assert(tg_get(back, i) == tg_get(v, i));
    unlink(path);
    rmdir(dir);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("views");
    TCase *tc = tu_tcase(s, "chains", 120);
    tcase_add_loop_test(tc, test_view_chains, 0, 2);
    tcase_add_loop_test(tc, test_view_compose, 0, 2);
    tcase_add_loop_test(tc, test_view_copy_fill, 0, 2);
    tc = tu_tcase(s, "matmul", 300);
    tcase_add_loop_test(tc, test_matmul_strided_random, 0, 2);
    tcase_add_loop_test(tc, test_matmul_strided_named, 0, 2);
    tcase_add_loop_test(tc, test_matmul_same_view_twice, 0, 2);
    tc = tu_tcase(s, "mha", 60);
    tcase_add_loop_test(tc, test_mha_no_projection_copies, 0, 2);
    tcase_add_test(tc, test_write_strided_view);
    return tu_run(s);
}
