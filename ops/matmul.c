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
#include "registry.h"

#include <stdio.h>

/* saved: int64 amap[nb], bmap[nb] - matrix index in a and b for each output batch index. */
typedef struct {
    int64_t nb;              /* output batch count */
    int64_t na, nbm;         /* matrix counts in a and b */
    int64_t M, N, K;
} mm_dims;

static void dims(const tg_tensor *y, mm_dims *d)
{
    const tg_tensor *a = y->src[0], *b = y->src[1];
    bool ta = y->p.matmul.ta, tb = y->p.matmul.tb;
    d->M = y->shape[y->rank - 2];
    d->N = y->shape[y->rank - 1];
    d->K = ta ? a->shape[a->rank - 2] : a->shape[a->rank - 1];
    (void)tb;
    d->nb = y->numel / (d->M * d->N);
    d->na = a->numel / (a->shape[a->rank - 2] * a->shape[a->rank - 1]);
    d->nbm = b->numel / (b->shape[b->rank - 2] * b->shape[b->rank - 1]);
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
    tg_tensor *y = tg__op_new(ctx, TG_OP_MATMUL, a->dtype, rb + 2, shape, 2, src);
    if (!y)
        return NULL;
    y->p.matmul.ta = transpose_a;
    y->p.matmul.tb = transpose_b;
    /* Precompute, per output batch, which matrix of a and of b it reads (broadcast map). */
    int64_t nb = y->numel / (M * N);
    if (!tg__op_save_n(y, nb, 2 * sizeof(int64_t), 0))
        return NULL;
    int64_t *amap = y->saved, *bmap = amap + nb;
    int64_t ast[TG_MAX_RANK], bst[TG_MAX_RANK];
    /* strides over batch dims only (in matrices), 0 where broadcast */
    tg_tensor ab = *a, bb = *b;
    ab.rank = a->rank - 2;
    bb.rank = b->rank - 2;
    tg__bcast_strides(&ab, rb, shape, ast);
    tg__bcast_strides(&bb, rb, shape, bst);
    for (int64_t o = 0; o < nb; o++) {
        int64_t rem = o, ia = 0, ib = 0;
        for (int d = rb - 1; d >= 0; d--) {
            int64_t idx = rem % shape[d];
            rem /= shape[d];
            ia += idx * ast[d];
            ib += idx * bst[d];
        }
        amap[o] = ia;
        bmap[o] = ib;
    }
    return y;
}

#define DEFINE_MATMUL(T, SUF)                                                                  \
    static void fwd_##SUF(tg_tensor *y)                                                        \
    {                                                                                          \
        const tg_tensor *a = y->src[0], *b = y->src[1];                                        \
        bool ta = y->p.matmul.ta, tb = y->p.matmul.tb;                                         \
        mm_dims d;                                                                             \
        dims(y, &d);                                                                           \
        const int64_t *amap = y->saved, *bmap = amap + d.nb;                                   \
        const T *A = a->data, *B = b->data;                                                    \
        T *C = y->data;                                                                        \
        int64_t lda = a->shape[a->rank - 1], ldb = b->shape[b->rank - 1];                      \
        int64_t sa = a->shape[a->rank - 2] * lda, sb = b->shape[b->rank - 2] * ldb;            \
        int nt = tg__threads(y->ctx);                                                          \
        if (d.nb >= nt && nt > 1) {                                                            \
            /* Race-free: batch o owns C[o]; each GEMM runs on one thread. */                  \
            TG_OMP_FOR(nt, d.nb * d.M * d.N * d.K > TG_PAR_MIN)                                \
            for (int64_t o = 0; o < d.nb; o++)                                                 \
                tg__gemm_##SUF(1, ta, tb, d.M, d.N, d.K, A + amap[o] * sa, lda,                \
                               B + bmap[o] * sb, ldb, C + o * d.M * d.N, d.N, false);          \
        } else {                                                                               \
            for (int64_t o = 0; o < d.nb; o++)                                                 \
                tg__gemm_##SUF(nt, ta, tb, d.M, d.N, d.K, A + amap[o] * sa, lda,               \
                               B + bmap[o] * sb, ldb, C + o * d.M * d.N, d.N, false);          \
        }                                                                                      \
    }                                                                                          \
    /* dA for matrix ia = sum over output batches o with amap[o] == ia (o ascending). */       \
    static void grad_a_##SUF(int nt, const tg_tensor *y, const mm_dims *d, int64_t ia)         \
    {                                                                                          \
        const tg_tensor *a = y->src[0], *b = y->src[1];                                        \
        bool ta = y->p.matmul.ta, tb = y->p.matmul.tb;                                         \
        const int64_t *amap = y->saved, *bmap = amap + d->nb;                                  \
        int64_t lda = a->shape[a->rank - 1], ldb = b->shape[b->rank - 1];                      \
        int64_t sa = a->shape[a->rank - 2] * lda, sb = b->shape[b->rank - 2] * ldb;            \
        T *dA = (T *)a->grad + ia * sa;                                                        \
        const T *G = y->grad, *B = b->data;                                                    \
        for (int64_t o = 0; o < d->nb; o++) {                                                  \
            if (amap[o] != ia)                                                                 \
                continue;                                                                      \
            const T *Go = G + o * d->M * d->N, *Bo = B + bmap[o] * sb;                         \
            if (!ta) /* dA (M,K) += dC (M,N) . op(B)^T (N,K) */                                \
                tg__gemm_##SUF(nt, false, !tb, d->M, d->K, d->N, Go, d->N, Bo, ldb, dA, lda,   \
                               true);                                                          \
            else /* dA (K,M) += op(B) (K,N) . dC^T (N,M) */                                    \
                tg__gemm_##SUF(nt, tb, true, d->K, d->M, d->N, Bo, ldb, Go, d->N, dA, lda,     \
                               true);                                                          \
        }                                                                                      \
    }                                                                                          \
    static void grad_b_##SUF(int nt, const tg_tensor *y, const mm_dims *d, int64_t ib)         \
    {                                                                                          \
        const tg_tensor *a = y->src[0], *b = y->src[1];                                        \
        bool ta = y->p.matmul.ta, tb = y->p.matmul.tb;                                         \
        const int64_t *amap = y->saved, *bmap = amap + d->nb;                                  \
        int64_t lda = a->shape[a->rank - 1], ldb = b->shape[b->rank - 1];                      \
        int64_t sa = a->shape[a->rank - 2] * lda, sb = b->shape[b->rank - 2] * ldb;            \
        T *dB = (T *)b->grad + ib * sb;                                                        \
        const T *G = y->grad, *A = a->data;                                                    \
        for (int64_t o = 0; o < d->nb; o++) {                                                  \
            if (bmap[o] != ib)                                                                 \
                continue;                                                                      \
            const T *Go = G + o * d->M * d->N, *Ao = A + amap[o] * sa;                         \
            if (!tb) /* dB (K,N) += op(A)^T (K,M) . dC (M,N) */                                \
                tg__gemm_##SUF(nt, !ta, false, d->K, d->N, d->M, Ao, lda, Go, d->N, dB, ldb,   \
                               true);                                                          \
            else /* dB (N,K) += dC^T (N,M) . op(A) (M,K) */                                    \
                tg__gemm_##SUF(nt, true, ta, d->N, d->K, d->M, Go, d->N, Ao, lda, dB, ldb,     \
                               true);                                                          \
        }                                                                                      \
    }                                                                                          \
    static void bwd_##SUF(tg_tensor *y)                                                        \
    {                                                                                          \
        mm_dims d;                                                                             \
        dims(y, &d);                                                                           \
        int nt = tg__threads(y->ctx);                                                          \
        int64_t work = d.nb * d.M * d.N * d.K;                                                 \
        if (y->src[0]->grad) {                                                                 \
            if (d.na >= nt && nt > 1) {                                                        \
                /* Race-free: iteration ia owns dA[ia]. */                                     \
                TG_OMP_FOR(nt, work > TG_PAR_MIN)                                              \
                for (int64_t ia = 0; ia < d.na; ia++)                                          \
                    grad_a_##SUF(1, y, &d, ia);                                                \
            } else {                                                                           \
                for (int64_t ia = 0; ia < d.na; ia++)                                          \
                    grad_a_##SUF(nt, y, &d, ia);                                               \
            }                                                                                  \
        }                                                                                      \
        if (y->src[1]->grad) {                                                                 \
            if (d.nbm >= nt && nt > 1) {                                                       \
                /* Race-free: iteration ib owns dB[ib]. */                                     \
                TG_OMP_FOR(nt, work > TG_PAR_MIN)                                              \
                for (int64_t ib = 0; ib < d.nbm; ib++)                                         \
                    grad_b_##SUF(1, y, &d, ib);                                                \
            } else {                                                                           \
                for (int64_t ib = 0; ib < d.nbm; ib++)                                         \
                    grad_b_##SUF(nt, y, &d, ib);                                               \
            }                                                                                  \
        }                                                                                      \
    }

DEFINE_MATMUL(float, f32)
DEFINE_MATMUL(double, f64)

void tg__matmul_forward(tg_tensor *y)
{
    if (y->dtype == TG_F32)
        fwd_f32(y);
    else
        fwd_f64(y);
}

void tg__matmul_backward(tg_tensor *y)
{
    if (y->dtype == TG_F32)
        bwd_f32(y);
    else
        bwd_f64(y);
}
