/*
 * matmul.c - batched matrix product with broadcasting and transpose flags.
 *
 * Forward:  C = op(A) op(B)        op(X) = X^T (last two axes) when its flag is set
 * Backward: dA' = dC op(B)^T,  dB' = op(A)^T dC, summed over broadcast batch dims, written with
 *           the transpose flags of the GEMM so no transposed copy is ever made:
 *   !ta: dA += dC . op(B)^T            ta: dA += op(B) . dC^T
 *   !tb: dB += op(A)^T . dC            tb: dB += dC^T . op(A)
 * Source: the Keras attention tutorials' `matmul(q, k, transpose_b=True)`; PyTorch `torch.matmul` broadcasting.
 */
#include "gemm.h"
#include "registry.h"

#include <stdio.h>

/* aux (builder metadata owned by the node), per output batch o: amap/bmap, the matrix index
 * of a and b it reads (for their contiguous gradients), and aoff/boff, the element offset of
 * that matrix in a's and b's data (views: through their strides). */
typedef struct {
    int64_t nb;              /* output batch count */
    int64_t na, nbm;         /* matrix counts in a and b */
    int64_t M, N, K;
    bool fa, fb;             /* a / b stored transposed (a view whose last two axes swapped) */
    int64_t lda, ldb;        /* row stride of a / b as stored */
} mm_dims;

typedef struct {
    int64_t *amap, *bmap, *aoff, *boff;
} mm_maps;

static mm_maps maps(const void *aux, int64_t nb)
{
    int64_t *p = (int64_t *)aux;
    return (mm_maps){p, p + nb, p + 2 * nb, p + 3 * nb};
}

/* How the last two axes (r, c) of a tensor of rank n, shape and strides st are laid out:
 * row-major with row stride *ld (flip false), or column-major, i.e. x^T stored row-major with
 * row stride *ld (flip true). False if neither (then x must be made contiguous). */
static bool mat_layout(int n, const int64_t *shape, const int64_t *st, bool *flip, int64_t *ld)
{
    int64_t r = shape[n - 2], c = shape[n - 1];
    int64_t sr = st[n - 2], sc = st[n - 1];
    if (c == 1)
        sc = 1;
    if (r == 1 && sc != 1)
        sr = 1;
    if (sc == 1 && (r == 1 || sr >= c)) {
        *flip = false;
        *ld = r == 1 ? c : sr;
        return true;
    }
    if (sr == 1 && sc >= r) {
        *flip = true;
        *ld = sc;
        return true;
    }
    return false;
}

static void dims(const tg__call *c, mm_dims *d)
{
    const int64_t *as = c->src_shape[0], *bs = c->src_shape[1];
    int ra = c->src_rank[0], rb = c->src_rank[1];
    bool ta = c->p->matmul.ta;
    d->M = c->shape[c->rank - 2];
    d->N = c->shape[c->rank - 1];
    d->K = ta ? as[ra - 2] : as[ra - 1];
    d->nb = c->numel / (d->M * d->N);
    d->na = c->src_numel[0] / (as[ra - 2] * as[ra - 1]);
    d->nbm = c->src_numel[1] / (bs[rb - 2] * bs[rb - 1]);
    mat_layout(ra, as, c->src_stride[0], &d->fa, &d->lda);
    mat_layout(rb, bs, c->src_stride[1], &d->fb, &d->ldb);
}

/* One thread's GEMM workspace for every product this op makes (forward and both gradients
 * swap M, N and K around, so size for the largest of the three), at precision prec. */
static size_t ws_per_thread(const tg__call *c, int prec)
{
    const int64_t *as = c->src_shape[0];
    int ra = c->src_rank[0];
    int64_t M = c->shape[c->rank - 2], N = c->shape[c->rank - 1];
    int64_t K = c->p->matmul.ta ? as[ra - 2] : as[ra - 1];
    int64_t d = M > N ? M : N;
    d = d > K ? d : K;
    return tg__gemm_ws_bytes_prec(c->dtype, prec, 1, d, d);
}

size_t tg__matmul_ws(const tg__call *c)
{
    return ws_per_thread(c, c->precision) * (size_t)(c->nt > 0 ? c->nt : 1);
}

/* The products at a graph's precision: f32 graphs may take bf16 operands (tg_precision), f64
 * graphs never do (refused when the graph is built). */
static void pg_f32(tg__govs *govs, int prec, int nt, bool ta, bool tb, int64_t M, int64_t N,
                   int64_t K, const float *A, int64_t lda, const float *B, int64_t ldb, float *C,
                   int64_t ldc, bool acc, void *ws)
{
    tg__gemm_prec_f32(govs, prec, nt, ta, tb, M, N, K, A, lda, B, ldb, C, ldc, acc, ws, NULL);
}
static void pg_f64(tg__govs *govs, int prec, int nt, bool ta, bool tb, int64_t M, int64_t N,
                   int64_t K, const double *A, int64_t lda, const double *B, int64_t ldb, double *C,
                   int64_t ldc, bool acc, void *ws)
{
    (void)prec;
    tg__gemm_gov_f64(govs, nt, ta, tb, M, N, K, A, lda, B, ldb, C, ldc, acc, ws, NULL);
}

/* Per output batch o of y (nb of them; batch dims rb, shape of y): which matrix of a and of b it
 * reads (the broadcast map) and at which element offset through their strides. */
static void batch_maps(tg_tensor *y, const tg_tensor *a, const tg_tensor *b, int rb,
                       const int64_t *shape, int64_t nb)
{
    mm_maps mp = maps(y->aux, nb);
    int64_t ast[TG_MAX_RANK], bst[TG_MAX_RANK];
    /* strides over batch dims only (in matrices), 0 where broadcast */
    tg__bcast_strides(a->rank - 2, a->shape, rb, ast);
    tg__bcast_strides(b->rank - 2, b->shape, rb, bst);
    int oa = rb - (a->rank - 2), ob = rb - (b->rank - 2); /* a's batch axis k: output k + oa */
    for (int64_t o = 0; o < nb; o++) {
        int64_t rem = o, ia = 0, ib = 0, ea = 0, eb = 0;
        for (int d = rb - 1; d >= 0; d--) {
            int64_t idx = rem % shape[d];
            rem /= shape[d];
            ia += idx * ast[d];
            ib += idx * bst[d];
            if (d >= oa && a->shape[d - oa] > 1)
                ea += idx * a->stride[d - oa];
            if (d >= ob && b->shape[d - ob] > 1)
                eb += idx * b->stride[d - ob];
        }
        mp.amap[o] = ia;
        mp.bmap[o] = ib;
        mp.aoff[o] = ea;
        mp.boff[o] = eb;
    }
}

tg_tensor *tg_matmul(tg_ctx *ctx, tg_tensor *a, tg_tensor *b, bool transpose_a, bool transpose_b)
{
    static const char *fn = "tg_matmul";
    tg_tensor *src[2] = {a, b};
    if (!tg__check_srcs(ctx, fn, 2, src))
        return NULL;
    char sa[128], sb[128];
    if (a->rank < 2 || b->rank < 2)
        return tg__err(ctx, TG_ERR_SHAPE, fn, "operands need rank >= 2: a is %s, b is %s",
                       tg__shape_str(a, sa, sizeof sa), tg__shape_str(b, sb, sizeof sb));
    int64_t M = transpose_a ? a->shape[a->rank - 1] : a->shape[a->rank - 2];
    int64_t Ka = transpose_a ? a->shape[a->rank - 2] : a->shape[a->rank - 1];
    int64_t Kb = transpose_b ? b->shape[b->rank - 1] : b->shape[b->rank - 2];
    int64_t N = transpose_b ? b->shape[b->rank - 2] : b->shape[b->rank - 1];
    if (Ka != Kb)
        return tg__err(ctx, TG_ERR_SHAPE, fn,
                       "inner dims differ: a is %s%s, b is %s%s (%lld vs %lld)",
                       tg__shape_str(a, sa, sizeof sa), transpose_a ? " transposed" : "",
                       tg__shape_str(b, sb, sizeof sb), transpose_b ? " transposed" : "",
                       (long long)Ka, (long long)Kb);
    int64_t shape[TG_MAX_RANK];
    int rb;
    if (!tg__broadcast_shape(a->rank - 2, a->shape, b->rank - 2, b->shape, &rb, shape) ||
        rb + 2 > TG_MAX_RANK)
        return tg__err(ctx, TG_ERR_SHAPE, fn, "batch dims do not broadcast: a is %s, b is %s",
                       tg__shape_str(a, sa, sizeof sa), tg__shape_str(b, sb, sizeof sb));
    shape[rb] = M;
    shape[rb + 1] = N;
    /* Views are read in place when each matrix is row- or column-major (heads split by
     * narrow/reshape/permute); any other layout is copied first. */
    bool f;
    int64_t ld;
    for (int i = 0; i < 2; i++)
        if (!tg__is_contiguous(src[i]) &&
            !mat_layout(src[i]->rank, src[i]->shape, src[i]->stride, &f, &ld) &&
            !(src[i] = tg__contiguous(ctx, src[i])))
            return NULL;
    a = src[0];
    b = src[1];
    tg_tensor *y = tg__op_new(ctx, TG_OP_MATMUL, a->dtype, rb + 2, shape, 2, src);
    if (!y)
        return NULL;
    y->p.matmul.ta = transpose_a;
    y->p.matmul.tb = transpose_b;
    /* Precompute, per output batch, which matrix of a and of b it reads (broadcast map). */
    int64_t nb = y->numel / (M * N);
    size_t bytes;
    if (!tg__bytes(nb, 4 * sizeof(int64_t), &bytes)) {
        tg__free(ctx, y);
        return tg__err(ctx, TG_ERR_OVERFLOW, fn, "%lld batches overflow", (long long)nb);
    }
    y->aux = tg__alloc_owned(ctx, bytes, fn, y->id + 1);
    if (!y->aux) {
        tg__free(ctx, y);
        return NULL;
    }
    batch_maps(y, a, b, rb, shape, nb);
    return y;
}

/* How many row blocks to cut each of n matrices of `rows` rows into for a parallel region over
 * (matrix, row block) items: a function of the shapes only (>= 32 items while blocks keep
 * >= 16 rows), so the items are the same for any thread count > 1; 1 on one thread (whole
 * matrices, no region). Row blocks never change a bit of C (each row is one GEMM's rows). */
static int64_t row_blocks(int64_t n, int64_t rows, int nt)
{
    int64_t mb = 1;
    while (nt > 1 && n * mb < 32 && rows / (mb * 2) >= 16)
        mb *= 2;
    return mb;
}

/* In the kernels, a stored-transposed operand flips its GEMM transpose flag: op(a) = ta ? a^T
 * : a, and a = S^T for the stored matrix S, so op(a) = (ta != fa) ? S^T : S. Gradients are
 * contiguous row-major buffers of the operand's logical shape.
 *
 * Batches run in one parallel region over (matrix, row block) items, each item a one-thread
 * GEMM (no nested regions); a single matrix uses the GEMM's own threads. Rows [r0, r1) of
 * C = op(X) op(Y) read op(X) from X + (tx ? r0 : r0 * ldx).
 *
 * The kernels, written once in matmul_kernel.h, for f32 and for f64: tg__matmul_forward_f32 ...
 * _backward_f64, registered per dtype in ops/ops_dtype.def. */
#define T float
#define SUF f32
#include "matmul_kernel.h"
#undef T
#undef SUF
#define T double
#define SUF f64
#include "matmul_kernel.h"
#undef T
#undef SUF
