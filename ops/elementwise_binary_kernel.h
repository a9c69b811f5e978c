/*
 * elementwise_binary_kernel.h - the broadcasting forward of one binary op (add, mul, sub or div)
 * for one float type. A template header: elementwise_kernel.h includes it once per op with
 * BIN_NAME (add, mul, sub, div) and BIN_OP (+ * - /) defined, inside its own inclusion per
 * dtype (T, SUF), and it #undefs both at its end; BIN_FN(name) is BIN_NAME_name_SUF, e.g.
 * add_rows_f32. The forward is the registry's kernel tg__BIN_NAME_forward_SUF (e.g.
 * tg__add_forward_f32, listed in ops/ops_dtype.def). No include guard.
 *
 * y = a BIN_OP b over y's shape: same-shape operands as one flat loop; broadcast ones by rows of
 * the last axis (each row of y written by one call, its operand offsets decoded from the row
 * index), with a contiguous inner loop. Ranges [lo, hi) of elements resp. rows: race-free.
 */
#define BIN_FN(name) TG__CAT(TG__CAT(BIN_NAME, name), SUF)

TG_SIMD_CLONES static void BIN_FN(flat)(const T *A, const T *B, T *Y, int64_t lo, int64_t hi)
{
    for (int64_t i = lo; i < hi; i++)
        Y[i] = A[i] BIN_OP B[i];
}

TG_SIMD_CLONES static void BIN_FN(rows)(const tg__call *c, const int64_t *as, const int64_t *bs,
                                        int64_t lo, int64_t hi)
{
    const T *A = c->in[0], *B = c->in[1];
    T *Y = c->out;
    int r = c->rank;
    int64_t L = r ? c->shape[r - 1] : 1;
    int64_t asl = r ? as[r - 1] : 0, bsl = r ? bs[r - 1] : 0;
    for (int64_t row = lo; row < hi; row++) {
        int64_t rem = row, ao = 0, bo = 0;
        for (int d = r - 2; d >= 0; d--) {
            int64_t idx = rem % c->shape[d];
            rem /= c->shape[d];
            ao += idx * as[d];
            bo += idx * bs[d];
        }
        BCAST_ROW(BIN_OP, Y + row * L, A + ao, B + bo, asl, bsl, L);
    }
}

tg_status FN(TG__CAT(TG__CAT(tg_, BIN_NAME), forward))(const tg__call *c)
{
    int nt = c->nt;
    int64_t n = c->numel;
    bool par = n * 3 * (int64_t)sizeof(T) > TG_PAR_BYTES;
    if (c->src_numel[0] == n && c->src_numel[1] == n) {
        TG_PAR_RANGE(nt, par, n, 16, BIN_FN(flat)(c->in[0], c->in[1], c->out, lo, hi));
        return TG_OK;
    }
    int r = c->rank;
    int64_t as[TG_MAX_RANK], bs[TG_MAX_RANK];
    tg__bcast_strides(c->src_rank[0], c->src_shape[0], r, as);
    tg__bcast_strides(c->src_rank[1], c->src_shape[1], r, bs);
    int64_t L = r ? c->shape[r - 1] : 1;
    TG_PAR_RANGE(nt, par, n / L, 1, BIN_FN(rows)(c, as, bs, lo, hi));
    return TG_OK;
}

#undef BIN_FN
#undef BIN_NAME
#undef BIN_OP
