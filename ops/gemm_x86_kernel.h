/*
 * gemm_x86_kernel.h - the AVX-512 and AVX2 micro-kernels of ops/gemm.c for one float type and
 * ISA: the body (A packed k-major, or read in place by rows or columns) and its three entry
 * points. A template header: gemm.c includes it once per instantiation with T, SUF, ISA, VT, VL,
 * MR, NV, LOADU, STOREU, SET1, ZERO, FMA, ADD, MAX, TGT defined. No include guard.
 */
#define FN(name) TG__CAT(name, SUF)
#define FNI(name) TG__CAT(TG__CAT(name, SUF), ISA)

__attribute__((target(TGT), always_inline)) static inline void
FNI(body)(int64_t kc, const T *a, int64_t rsa, int64_t csa, const T *b, int64_t ldb, T *c,
          int64_t ldc, int mode, const T *bias)
{
    VT acc[MR][NV];
#pragma GCC unroll 16
    for (int r = 0; r < MR; r++)
#pragma GCC unroll 4
        for (int v = 0; v < NV; v++)
            acc[r][v] = (mode & MK_BIAS) ? LOADU(bias + v * VL) : ZERO();
    const T *base[4] = {a, a + (MR > 3 ? 3 : 0) * rsa, a + (MR > 6 ? 6 : 0) * rsa,
                        a + (MR > 9 ? 9 : 0) * rsa};
#pragma GCC unroll 4
    for (int64_t k = 0; k < kc; k++) {
        VT bv[NV];
#pragma GCC unroll 4
        for (int v = 0; v < NV; v++)
            bv[v] = LOADU(b + k * ldb + v * VL);
#pragma GCC unroll 16
        for (int r = 0; r < MR; r++) {
            VT av = SET1(base[r / 3][(r % 3) * rsa + k * csa]);
#pragma GCC unroll 4
            for (int v = 0; v < NV; v++)
                acc[r][v] = FMA(av, bv[v], acc[r][v]);
        }
    }
    if (mode & MK_LOAD) {
#pragma GCC unroll 16
        for (int r = 0; r < MR; r++)
#pragma GCC unroll 4
            for (int v = 0; v < NV; v++)
                acc[r][v] = ADD(LOADU(c + r * ldc + v * VL), acc[r][v]);
    }
    if (mode & MK_RELU) {
#pragma GCC unroll 16
        for (int r = 0; r < MR; r++)
#pragma GCC unroll 4
            for (int v = 0; v < NV; v++)
                acc[r][v] = ADD(MAX(ZERO(), acc[r][v]), ZERO()); /* as tg_relu: NaN
                                                                    stays, -0 gives +0 */
    }
#pragma GCC unroll 16
    for (int r = 0; r < MR; r++)
#pragma GCC unroll 4
        for (int v = 0; v < NV; v++)
            STOREU(c + r * ldc + v * VL, acc[r][v]);
}
__attribute__((target(TGT))) static void FNI(kern)(int64_t kc, const T *a, const T *b, int64_t ldb,
                                                   T *c, int64_t ldc, int mode, const T *bias)
{
    FNI(body)(kc, a, 1, MR, b, ldb, c, ldc, mode, bias);
}
__attribute__((target(TGT))) static void FNI(rows)(int64_t kc, const T *a, int64_t rsa, const T *b,
                                                   int64_t ldb, T *c, int64_t ldc, int mode,
                                                   const T *bias)
{
    FNI(body)(kc, a, rsa, 1, b, ldb, c, ldc, mode, bias);
}
__attribute__((target(TGT))) static void FNI(cols)(int64_t kc, const T *a, int64_t csa, const T *b,
                                                   int64_t ldb, T *c, int64_t ldc, int mode,
                                                   const T *bias)
{
    FNI(body)(kc, a, 1, csa, b, ldb, c, ldc, mode, bias);
}

#undef FN
#undef FNI
