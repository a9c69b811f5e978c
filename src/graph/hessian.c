/*
 * hessian.c - layer 3: second derivatives and dense derivative matrices from gradients built
 * as graph nodes (include/tgrad.h): tg_hvp (Hessian-vector products, reverse over reverse:
 * the gradient of <grad y, v>), tg_jacobian (a dense Jacobian by rows: one VJP per output
 * element), tg_jacobian_fwd (by columns: one JVP per input element) and tg_hessian (a dense Hessian: one HVP per input element). The matrices run a
 * graph once per row, the context RNG restored before each run so stochastic ops see the same
 * draws; their graphs fail as the call (run-time errors), never as a pending build.
 */
#include "graph_internal.h"

#include <string.h>

tg_status tg_hvp(tg_ctx *ctx, tg_tensor *y, int n, tg_tensor *const *wrt, tg_tensor *const *v,
                 tg_tensor **hv)
{
    static const char *fn = "tg_hvp";
    if (!ctx)
        return TG_ERR_ARG;
    tg__begin(ctx);
    if (tg__build_failed(ctx))
        return tg_ctx_status(ctx);
    if (!y || n < 1 || !wrt || !v || !hv) {
        tg__err(ctx, TG_ERR_ARG, fn, "NULL argument, or n < 1");
        return TG_ERR_ARG;
    }
    for (int j = 0; j < n; j++)
        hv[j] = NULL;
    if (y->numel != 1) {
        tg__err(ctx, TG_ERR_SHAPE, fn, "y ('%s') has %lld elements: the Hessian is of a scalar",
                y->name, (long long)y->numel);
        return TG_ERR_SHAPE;
    }
    tg_tensor *g[64], **gs = n <= 64 ? g : tg__alloc(ctx, sizeof *gs * (size_t)n, fn);
    if (!gs)
        return tg_ctx_status(ctx);
    tg_status s = tg_grad(ctx, 1, &y, NULL, n, wrt, gs);
    tg_tensor *S = NULL;
    for (int j = 0; s == TG_OK && j < n; j++) {
        if (!v[j] || v[j]->dtype != wrt[j]->dtype || v[j]->numel != wrt[j]->numel ||
            v[j]->rank != wrt[j]->rank ||
            memcmp(v[j]->shape, wrt[j]->shape, sizeof(int64_t) * (size_t)v[j]->rank) != 0) {
            tg__err(ctx, TG_ERR_SHAPE, fn, "v[%d] must have wrt[%d]'s shape and dtype ('%s')", j, j,
                    wrt[j]->name);
            return TG_ERR_SHAPE;
        }
        tg_tensor *t = tg_sum_all(ctx, tg_mul(ctx, gs[j], v[j]));
        S = S ? tg_add(ctx, S, t) : t;
        s = S ? TG_OK : tg_ctx_status(ctx);
    }
    if (s == TG_OK)
        s = tg_grad(ctx, 1, &S, NULL, n, wrt, hv);
    return s;
}

/* Rows (or with @p cols, columns) of a dense matrix: @p row_out (built from @p probe, an input
 * of m elements) run once per unit probe e_i; its k values (f64) are row i of the m x k matrix
 * @p out, or column i of the k x m one. */
static tg_status rows(tg_ctx *ctx, const char *fn, tg_tensor *probe, tg_tensor *row_out,
                      double *out, bool cols)
{
    tg_graph *g = tg_graph_new(ctx, &row_out, 1);
    double *col = g && cols ? tg__alloc(ctx, sizeof *col * (size_t)row_out->numel, fn) : NULL;
    if (!g || (cols && !col)) {
        tg_graph_free(g);
        return tg_ctx_status(ctx);
    }
    uint64_t rng[4];
    tg_rng_get_state(ctx, rng);
    tg_status s = TG_OK;
    int64_t m = probe->numel, k = row_out->numel;
    for (int64_t i = 0; i < m && s == TG_OK; i++) {
        tg_fill(probe, 0.0);
        tg_set(probe, i, 1.0);
        tg_rng_set_state(ctx, rng);
        s = tg_graph_forward(g);
        if (s == TG_OK)
            s = tg_tensor_get_data(row_out, cols ? col : out + i * k, TG_F64, (size_t)k);
        for (int64_t r = 0; cols && s == TG_OK && r < k; r++)
            out[r * m + i] = col[r];
    }
    tg_rng_set_state(ctx, rng);
    tg__free(ctx, col);
    tg_graph_free(g);
    if (s != TG_OK && tg_ctx_status(ctx) == TG_OK)
        tg__run_err(ctx, s, fn, "a row's run failed");
    return s;
}

/* The arguments of tg_jacobian / tg_hessian: @p rows_n x @p cols_n values fit in @p cap. */
static bool matrix_args(tg_ctx *ctx, const char *fn, tg_tensor *y, tg_tensor *x, double *out,
                        size_t cap, int64_t rows_n)
{
    if (!y || !x || !out || y->ctx != ctx || x->ctx != ctx) {
        tg__run_err(ctx, TG_ERR_ARG, fn, "NULL argument, or a tensor of another context");
        return false;
    }
    size_t need;
    if (!tg__mul_size((size_t)rows_n, (size_t)x->numel, &need) || need > cap) {
        tg__run_err(ctx, TG_ERR_ARG, fn, "the matrix needs %lld x %lld values; out holds %zu",
                    (long long)rows_n, (long long)x->numel, cap);
        return false;
    }
    return true;
}

/* The dense matrices: the Jacobian by rows (VJPs seeded e_i), by columns (JVPs along e_j), or
 * the Hessian by rows (HVPs along e_i); one graph built here, run once per row or column. */
typedef enum { MAT_JACOBIAN_ROWS, MAT_JACOBIAN_COLS, MAT_HESSIAN } mat_kind;

static tg_status dense_matrix(tg_ctx *ctx, mat_kind k, tg_tensor *y, tg_tensor *x, double *out,
                              size_t cap)
{
    static const char *const fns[] = {"tg_jacobian", "tg_jacobian_fwd", "tg_hessian"};
    static const char *const probes[] = {"jacobian_row", "jacobian_column", "hessian_row"};
    const char *fn = fns[k];
    if (!ctx)
        return TG_ERR_ARG;
    tg__begin(ctx);
    if (tg__build_failed(ctx))
        return tg_ctx_status(ctx);
    int64_t n = k == MAT_HESSIAN ? (x ? x->numel : 0) : (y ? y->numel : 0);
    if (!matrix_args(ctx, fn, y, x, out, cap, n))
        return TG_ERR_ARG;
    tg__io_enter(ctx); /* the nodes and graph built here fail as this call */
    const tg_tensor *like = k == MAT_JACOBIAN_ROWS ? y : x;
    tg_tensor *p = tg_input(ctx, like->dtype, like->rank, like->shape, probes[k]), *r = NULL;
    tg_status s = !p                       ? tg_ctx_status(ctx)
                  : k == MAT_JACOBIAN_ROWS ? tg_grad(ctx, 1, &y, &p, 1, &x, &r)
                  : k == MAT_JACOBIAN_COLS ? tg_jvp(ctx, 1, &x, &p, 1, &y, &r)
                                           : tg_hvp(ctx, y, 1, &x, &p, &r);
    if (s == TG_OK)
        s = rows(ctx, fn, p, r, out, k == MAT_JACOBIAN_COLS);
    tg__io_leave(ctx);
    return s;
}

tg_status tg_jacobian(tg_ctx *ctx, tg_tensor *y, tg_tensor *x, double *out, size_t cap)
{
    return dense_matrix(ctx, MAT_JACOBIAN_ROWS, y, x, out, cap);
}

tg_status tg_jacobian_fwd(tg_ctx *ctx, tg_tensor *y, tg_tensor *x, double *out, size_t cap)
{
    return dense_matrix(ctx, MAT_JACOBIAN_COLS, y, x, out, cap);
}

tg_status tg_hessian(tg_ctx *ctx, tg_tensor *y, tg_tensor *x, double *out, size_t cap)
{
    return dense_matrix(ctx, MAT_HESSIAN, y, x, out, cap);
}
