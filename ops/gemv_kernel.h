/*
 * gemv_kernel.h - the few-row matrix-vector kernel of ops/gemv.c for one float type and rounding
 * (RND: the exact value, or bf16 rounding of the operands). A template header: gemv.c includes it
 * once per instantiation with T, SUF, RND defined. No include guard.
 */
#define FN(name) TG__CAT(name, SUF)

/* Columns [j0, j1) of every row: four columns at a time share each load of x. */
TG_SIMD_CLONES static void FN(gv_cols)(int64_t M, int64_t j0, int64_t j1, int64_t K, const T *x,
                                       int64_t ldx, const T *W, int64_t ldw, const T *bias, T *y,
                                       int64_t ldy, int act, T *pre)
{
    int64_t K16 = K / GV_LANES * GV_LANES;
    for (int64_t r = 0; r < M; r++) {
        const T *xr = x + r * ldx;
        for (int64_t j = j0; j < j1; j += 4) {
            int nj = j1 - j < 4 ? (int)(j1 - j) : 4;
            T acc[4][GV_LANES];
            const T *w[4];
            for (int c = 0; c < 4; c++) {
                w[c] = W + (j + (c < nj ? c : 0)) * ldw;
                for (int l = 0; l < GV_LANES; l++)
                    acc[c][l] = 0;
            }
            for (int64_t k = 0; k < K16; k += GV_LANES)
                for (int l = 0; l < GV_LANES; l++) {
                    T xv = RND(xr[k + l]);
                    acc[0][l] += xv * RND(w[0][k + l]);
                    acc[1][l] += xv * RND(w[1][k + l]);
                    acc[2][l] += xv * RND(w[2][k + l]);
                    acc[3][l] += xv * RND(w[3][k + l]);
                }
            for (int l = 0; K16 + l < K; l++) /* the tail, in the same lanes */
                for (int c = 0; c < 4; c++)
                    acc[c][l] += RND(xr[K16 + l]) * RND(w[c][K16 + l]);
            /* the lane trees of the four columns, level by level (whole vectors) */
            for (int c = 0; c < 4; c++)
                for (int l = 0; l < 8; l++)
                    acc[c][l] += acc[c][l + 8];
            for (int c = 0; c < 4; c++)
                for (int l = 0; l < 4; l++)
                    acc[c][l] += acc[c][l + 4];
            for (int c = 0; c < 4; c++)
                for (int l = 0; l < 2; l++)
                    acc[c][l] += acc[c][l + 2];
            T z[4];
            for (int c = 0; c < 4; c++)
                z[c] = acc[c][0] + acc[c][1];
            T *yr = y + r * ldy + j;
            if (bias)
                for (int c = 0; c < nj; c++)
                    z[c] = z[c] + bias[j + c];
            if (pre)
                for (int c = 0; c < nj; c++)
                    pre[r * ldy + j + c] = z[c];
            if (act == TG__EPI_GELU)
                for (int c = 0; c < nj; c++)
                    yr[c] = (T)gv_gelu((double)z[c]);
            else if (act == TG__EPI_RELU)
                for (int c = 0; c < nj; c++)
                    yr[c] = z[c] > 0 ? z[c] : (z[c] != z[c] ? z[c] : 0);
            else
                for (int c = 0; c < nj; c++)
                    yr[c] = z[c];
        }
    }
}
void FN(tg__gemv)(tg__govs *govs, int nt, int64_t M, int64_t N, int64_t K, const T *x, int64_t ldx,
                  const T *W, int64_t ldw, const T *bias, T *y, int64_t ldy, int act, T *pre)
{
    /* W streamed once from cache or memory (~30-50 GB/s on one core): a thread per 2 MiB of
     * weights (~50 us), so a decoding step's layers (a few hundred KiB each) run on one
     * thread without entering a region; the columns in fixed chunks taken dynamically. */
    nt = tg__threads_for(nt, (double)sizeof(T) * (double)N * (double)K, 2097152.0);
    bool par = nt > 1;
    TG_PAR_RANGE_IN(govs, nt, par, N, 4,
                    FN(gv_cols)(M, lo, hi, K, x, ldx, W, ldw, bias, y, ldy, act, pre));
}

#undef FN
