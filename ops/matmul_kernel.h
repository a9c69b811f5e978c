/*
 * matmul_kernel.h - the kernels of ops/matmul.c (batched matrix product and its gradients) for
 * one float type. A template header: matmul.c includes it once per instantiation with T, SUF
 * defined. No include guard.
 */
#define FN(name) TG__CAT(name, SUF)

static void FN(rows)(int prec, bool tx, bool ty, int64_t r0, int64_t r1, int64_t N, int64_t K,
                     const T *X, int64_t ldx, const T *Y, int64_t ldy, T *C, int64_t ldc, bool acc,
                     void *ws)
{
    FN(pg)
    (NULL, prec, 1, tx, ty, r1 - r0, N, K, X + (tx ? r0 : r0 * ldx), ldx, Y, ldy, C + r0 * ldc, ldc,
     acc, ws);
}
tg_status FN(tg__matmul_forward)(const tg__call *c)
{
    mm_dims d;
    dims(c, &d);
    bool ta = c->p->matmul.ta != d.fa, tb = c->p->matmul.tb != d.fb;
    mm_maps mp = maps(c->aux, d.nb);
    const T *A = c->in[0], *B = c->in[1];
    T *C = c->out;
    int nt = c->nt;
    if (d.nb * d.M * d.N * d.K <= TG_PAR_MIN)
        nt = 1;
    if (d.nb == 1) {
        FN(pg)
        (c->govs, c->precision, nt, ta, tb, d.M, d.N, d.K, A + mp.aoff[0], d.lda, B + mp.boff[0], d.ldb, C,
         d.N, false, c->ws);
        return TG_OK;
    }
    size_t per = ws_per_thread(c, c->precision);
    int64_t mb = row_blocks(d.nb, d.M, nt), items = d.nb * mb;
    /* Race-free: item (o, blk) owns rows of C[o]; each a one-thread GEMM. */
    TG_OMP_FOR(nt, nt > 1)
    for (int64_t it = 0; it < items; it++) {
        int64_t o = it / mb, blk = it % mb;
        FN(rows)
        (c->precision, ta, tb, d.M * blk / mb, d.M * (blk + 1) / mb, d.N, d.K, A + mp.aoff[o],
         d.lda, B + mp.boff[o], d.ldb, C + o * d.M * d.N, d.N, false,
         (char *)c->ws + (size_t)TG_THREAD_NUM() * per);
    }
    return TG_OK;
}
/* Rows [r0, r1) of dA for matrix ia = sum over output batches o with amap[o] == ia (o
 * ascending). */
static void FN(grad_a)(int nt, const tg__call *c, const mm_dims *d, int64_t ia, int64_t r0,
                       int64_t r1, void *ws)
{
    const int64_t *as = c->src_shape[0];
    int ra = c->src_rank[0];
    bool ta = c->p->matmul.ta, tb = c->p->matmul.tb != d->fb;
    mm_maps mp = maps(c->aux, d->nb);
    int64_t lga = as[ra - 1], sa = as[ra - 2] * lga;
    T *dA = (T *)c->dx[0] + ia * sa;
    const T *G = c->dy, *B = c->in[1];
    for (int64_t o = 0; o < d->nb; o++) {
        if (mp.amap[o] != ia)
            continue;
        const T *Go = G + o * d->M * d->N, *Bo = B + mp.boff[o];
        if (nt > 1) { /* whole matrix on nt threads */
            if (!ta)
                FN(pg)
            (c->govs, c->precision, nt, false, !tb, d->M, d->K, d->N, Go, d->N, Bo, d->ldb, dA, lga,
             true, ws);
            else FN(pg)(c->govs, c->precision, nt, tb, true, d->K, d->M, d->N, Bo, d->ldb, Go, d->N,
                        dA, lga, true, ws);
        } else if (!ta) /* dA (M,K) += dC (M,N) . op(B)^T (N,K) */
            FN(rows)
            (c->precision, false, !tb, r0, r1, d->K, d->N, Go, d->N, Bo, d->ldb, dA, lga, true, ws);
        else /* dA (K,M) += op(B) (K,N) . dC^T (N,M) */
            FN(rows)
            (c->precision, tb, true, r0, r1, d->M, d->N, Bo, d->ldb, Go, d->N, dA, lga, true, ws);
    }
}
static void FN(grad_b)(int nt, const tg__call *c, const mm_dims *d, int64_t ib, int64_t r0,
                       int64_t r1, void *ws)
{
    const int64_t *bs = c->src_shape[1];
    int rb = c->src_rank[1];
    bool ta = c->p->matmul.ta != d->fa, tb = c->p->matmul.tb;
    mm_maps mp = maps(c->aux, d->nb);
    int64_t lgb = bs[rb - 1], sb = bs[rb - 2] * lgb;
    T *dB = (T *)c->dx[1] + ib * sb;
    const T *G = c->dy, *A = c->in[0];
    for (int64_t o = 0; o < d->nb; o++) {
        if (mp.bmap[o] != ib)
            continue;
        const T *Go = G + o * d->M * d->N, *Ao = A + mp.aoff[o];
        if (nt > 1) {
            if (!tb)
                FN(pg)
            (c->govs, c->precision, nt, !ta, false, d->K, d->N, d->M, Ao, d->lda, Go, d->N, dB, lgb,
             true, ws);
            else FN(pg)(c->govs, c->precision, nt, true, ta, d->N, d->K, d->M, Go, d->N, Ao, d->lda,
                        dB, lgb, true, ws);
        } else if (!tb) /* dB (K,N) += op(A)^T (K,M) . dC (M,N) */
            FN(rows)
            (c->precision, !ta, false, r0, r1, d->N, d->M, Ao, d->lda, Go, d->N, dB, lgb, true, ws);
        else /* dB (N,K) += dC^T (N,M) . op(A) (M,K) */
            FN(rows)
            (c->precision, true, ta, r0, r1, d->K, d->M, Go, d->N, Ao, d->lda, dB, lgb, true, ws);
    }
}
/* One operand's gradient: n matrices of `rows` rows, in one region over (matrix, row
 * block) items of one-thread GEMMs (item owns rows of its matrix: race-free); a single
 * output matrix (nb == 1) uses the GEMM's own threads. */
static void
FN(grads)(void (*g)(int, const tg__call *, const mm_dims *, int64_t, int64_t, int64_t, void *),
          int nt, const tg__call *c, const mm_dims *d, int64_t n, int64_t rows, size_t per)
{
    if (d->nb == 1) {
        g(nt, c, d, 0, 0, rows, c->ws);
        return;
    }
    int64_t mb = row_blocks(n, rows, nt), items = n * mb;
    TG_OMP_FOR_ITEMS(nt, nt > 1)
    for (int64_t it = 0; it < items; it++) {
        int64_t m = it / mb, blk = it % mb;
        g(1, c, d, m, rows * blk / mb, rows * (blk + 1) / mb,
          (char *)c->ws + (size_t)TG_THREAD_NUM() * per);
    }
}
tg_status FN(tg__matmul_backward)(const tg__call *c)
{
    mm_dims d;
    dims(c, &d);
    int nt = c->nt;
    if (d.nb * d.M * d.N * d.K <= TG_PAR_MIN)
        nt = 1;
    size_t per = ws_per_thread(c, c->precision);
    if (c->dx[0])
        FN(grads)(FN(grad_a), nt, c, &d, d.na, c->src_shape[0][c->src_rank[0] - 2], per);
    if (c->dx[1])
        FN(grads)(FN(grad_b), nt, c, &d, d.nbm, c->src_shape[1][c->src_rank[1] - 2], per);
    return TG_OK;
}

#undef FN
