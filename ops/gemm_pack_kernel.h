/*
 * gemm_pack_kernel.h - the packing of op(A) and op(B) of ops/gemm.c for one float type. A
 * template header: gemm.c includes it once per instantiation with T, SUF defined. No include
 * guard.
 */
#define FN(name) TG__CAT(name, SUF)

__attribute__((noinline)) static void FN(pack_b)(bool tb, const T *B, int64_t ldb, int64_t k0,
                                                 int64_t kc, int64_t j0, int64_t nc, int NR,
                                                 bool skip_full, T *bpack)
{
    int64_t npanels = (nc + NR - 1) / NR;
    for (int64_t p = 0; p < npanels; p++) {
        T *dst = bpack + p * kc * NR;
        if (skip_full && !tb && nc - p * NR >= NR)
            continue; /* read in place */
        int64_t jb = j0 + p * NR, w = nc - p * NR < NR ? nc - p * NR : NR;
        if (!tb) {
            for (int64_t k = 0; k < kc; k++) {
                const T *src = B + (k0 + k) * ldb + jb;
                T *d = dst + k * NR;
                if (w == NR && NR == 32) /* constant sizes: inlined moves */
                    memcpy(d, src, sizeof(T) * 32);
                else if (w == NR && NR == 16)
                    memcpy(d, src, sizeof(T) * 16);
                else if (w == NR)
                    memcpy(d, src, sizeof(T) * (size_t)NR);
                else
                    for (int64_t j = 0; j < NR; j++)
                        d[j] = j < w ? src[j] : 0;
            }
            continue;
        }
        /* op(B) = B^T: dst[k * NR + j] = B[(jb + j) * ldb + k0 + k] */
        int64_t kf = w == NR ? FN(fast_pack_bt)(B + jb * ldb + k0, ldb, kc, NR, dst) : 0;
        for (int64_t jj = 0; jj < NR; jj += 8) {
            int64_t jw = w - jj < 8 ? (w - jj > 0 ? w - jj : 0) : 8;
            for (int64_t kk = kf; kk < kc; kk += 8) {
                int64_t kw = kc - kk < 8 ? kc - kk : 8;
                T blk[8][8];
                for (int64_t j = 0; j < 8; j++)
                    for (int64_t k = 0; k < 8; k++)
                        blk[k][j] = j < jw && k < kw ? B[(jb + jj + j) * ldb + k0 + kk + k] : 0;
                for (int64_t k = 0; k < kw; k++)
                    memcpy(dst + (kk + k) * NR + jj, blk[k], sizeof(T) * 8);
            }
        }
    }
}
/* Pack op(A)[ib:ib+h, k0:k0+kc] k-major (apack[k * MR + r]), zero padded to MR rows. */
__attribute__((noinline)) static void FN(pack_a)(bool ta, const T *A, int64_t lda, int64_t ib,
                                                 int64_t h, int64_t k0, int64_t kc, int MR,
                                                 T *apack)
{
    if (ta) { /* rows of the strip are contiguous in each stored row k */
        for (int64_t k = 0; k < kc; k++) {
            const T *src = A + (k0 + k) * lda + ib;
            T *d = apack + k * MR;
            if (h == 12 && MR == 12)
                memcpy(d, src, sizeof(T) * 12);
            else if (h == 6 && MR == 6)
                memcpy(d, src, sizeof(T) * 6);
            else
                for (int64_t r = 0; r < MR; r++)
                    d[r] = r < h ? src[r] : 0;
        }
        return;
    }
    int64_t kf = h == MR ? FN(fast_pack_a)(A + ib * lda + k0, lda, kc, MR, apack) : 0;
    for (int64_t kk = kf; kk < kc; kk += 8) {
        int64_t kw = kc - kk < 8 ? kc - kk : 8;
        T blk[8][MR_MAX];
        for (int64_t r = 0; r < MR; r++)
            for (int64_t k = 0; k < 8; k++)
                blk[k][r] = r < h && k < kw ? A[(ib + r) * lda + k0 + kk + k] : 0;
        for (int64_t k = 0; k < kw; k++) { /* constant sizes: inlined moves */
            if (MR == 12)
                memcpy(apack + (kk + k) * 12, blk[k], sizeof(T) * 12);
            else if (MR == 6)
                memcpy(apack + (kk + k) * 6, blk[k], sizeof(T) * 6);
            else
                memcpy(apack + (kk + k) * MR, blk[k], sizeof(T) * (size_t)MR);
        }
    }
}

#undef FN
