/*
 * gemm_portable_kernel.h - the portable micro-kernel of ops/gemm.c (ISO C vector extension, no
 * FMA) for one float type. A template header: gemm.c includes it once per instantiation with T,
 * SUF, V, VL, MR, NR defined. No include guard.
 */
#define FN(name) TG__CAT(name, SUF)

static void TG__CAT(FN(kern), c)(int64_t kc, const T *a, const T *b, int64_t ldb, T *c, int64_t ldc,
                                 int mode, const T *bias)
{
    enum { NV = NR / VL };
    V acc[MR][NV];
    for (int r = 0; r < MR; r++)
        for (int v = 0; v < NV; v++) {
            if (mode & MK_BIAS)
                __builtin_memcpy(&acc[r][v], bias + v * VL, sizeof(V));
            else
                acc[r][v] = (V){0};
        }
    for (int64_t k = 0; k < kc; k++) {
        V bv[NV];
        for (int v = 0; v < NV; v++)
            __builtin_memcpy(&bv[v], b + k * ldb + v * VL, sizeof(V));
        for (int r = 0; r < MR; r++) {
            V av = (V){0} + a[k * MR + r];
            for (int v = 0; v < NV; v++)
                acc[r][v] += av * bv[v];
        }
    }
    for (int r = 0; r < MR; r++)
        for (int v = 0; v < NV; v++) {
            T *o = c + r * ldc + v * VL;
            if (mode & MK_LOAD) {
                V cv;
                __builtin_memcpy(&cv, o, sizeof(V));
                acc[r][v] = cv + acc[r][v];
            }
            __builtin_memcpy(o, &acc[r][v], sizeof(V));
            if (mode & MK_RELU)
                for (int j = 0; j < VL; j++)
                    o[j] = o[j] > 0 ? o[j] : (o[j] != o[j] ? o[j] : 0);
        }
}

#undef FN
