/*
 * vec_kernel.h - the kernels of src/core/vec.c (fixed-order column sums, the finiteness scan,
 * the softmax-family row kernels) for one float type. A template header: vec.c includes it once
 * per dtype with T (float / double), SUF (f32 / f64), EXP (tg__expf / tg__exp) and NINF (-inf
 * as a T) defined; FN(name) is name_f32 or name_f64. No include guard. The contracts of the
 * entry points: src/core/vec.h.
 */
#define FN(name) TG__CAT(name, SUF)

TG_SIMD_CLONES static void FN(sum_rows_range)(int64_t R, int64_t c0, int64_t c1, const T *x,
                                              int64_t ld, T *out)
{
    T acc[CB];
    for (int64_t b = c0; b < c1; b += CB) {
        int64_t w = c1 - b < CB ? c1 - b : CB;
        for (int64_t c = 0; c < w; c++)
            acc[c] = 0;
        for (int64_t r = 0; r < R; r++) {
            const T *xr = x + r * ld + b;
            for (int64_t c = 0; c < w; c++)
                acc[c] += xr[c];
        }
        for (int64_t c = 0; c < w; c++)
            out[b + c] += acc[c];
    }
}

void FN(tg__sum_rows)(tg__govs *govs, int nt, int64_t R, int64_t C, const T *x, int64_t ld, T *out)
{
    /* Race-free: a thread owns the columns [lo, hi) of out; each column's sum runs over
     * r = 0..R-1 in order whatever the chunking. */
    TG_PAR_RANGE_IN(govs, nt, R * C * (int64_t)sizeof(T) > TG_PAR_BYTES, C, 16,
                    FN(sum_rows_range)(R, lo, hi, x, ld, out));
}

/* x - x is 0 exactly for finite x and NaN for +-inf and NaN: a branch-free finiteness test
 * (the build never assumes finite math). Blocks of 256 are scanned with an OR of the flags;
 * only a block with a bad element is rescanned element by element for its index. */
TG_SIMD_CLONES static int FN(block_bad)(const T *x, int64_t n, bool minf_ok)
{
    int bad = 0;
    if (minf_ok) {
        for (int64_t i = 0; i < n; i++)
            bad |= (x[i] - x[i] != 0) & (x[i] != NINF);
    } else {
        for (int64_t i = 0; i < n; i++)
            bad |= x[i] - x[i] != 0;
    }
    return bad;
}

int64_t FN(tg__first_nonfinite)(const T *x, int64_t n, bool minf_ok)
{
    for (int64_t b = 0; b < n; b += 256) {
        int64_t w = n - b < 256 ? n - b : 256;
        if (!FN(block_bad)(x + b, w, minf_ok))
            continue;
        for (int64_t i = b; i < b + w; i++)
            if (!isfinite(x[i]) && !(minf_ok && x[i] == NINF))
                return i;
    }
    return -1;
}

TG_SIMD_CLONES static T FN(row_max)(const T *x, int64_t L)
{
    T m[LANES];
    for (int k = 0; k < LANES; k++)
        m[k] = NINF;
    int64_t j = 0;
    for (; j + LANES <= L; j += LANES)
        for (int k = 0; k < LANES; k++) {
            T v = x[j + k];
            m[k] = ((v > m[k]) | (v != v)) ? v : m[k]; /* NaN sticks */
        }
    for (int k = 0; j + k < L; k++) {
        T v = x[j + k];
        m[k] = (v > m[k] || v != v) ? v : m[k];
    }
    T r = m[0];
    for (int k = 1; k < LANES; k++)
        r = ((m[k] > r) | (m[k] != m[k])) ? m[k] : r;
    return r;
}

TG_SIMD_CLONES static T FN(row_expsum)(const T *x, int64_t L, T mx, T *e)
{
    T acc[LANES] = {0};
    int64_t j = 0;
    if (e) {
        for (; j + LANES <= L; j += LANES)
            for (int k = 0; k < LANES; k++) {
                T v = EXP(x[j + k] - mx);
                e[j + k] = v;
                acc[k] += v;
            }
        for (int k = 0; j + k < L; k++) {
            T v = EXP(x[j + k] - mx);
            e[j + k] = v;
            acc[k] += v;
        }
    } else {
        for (; j + LANES <= L; j += LANES)
            for (int k = 0; k < LANES; k++)
                acc[k] += EXP(x[j + k] - mx);
        for (int k = 0; j + k < L; k++)
            acc[k] += EXP(x[j + k] - mx);
    }
    LANE_TREE(acc);
    return acc[0];
}

TG_SIMD_CLONES static T FN(row_dot)(const T *a, const T *b, int64_t L)
{
    T acc[LANES] = {0};
    int64_t j = 0;
    if (b) {
        for (; j + LANES <= L; j += LANES)
            for (int k = 0; k < LANES; k++)
                acc[k] += a[j + k] * b[j + k];
        for (int k = 0; j + k < L; k++)
            acc[k] += a[j + k] * b[j + k];
    } else {
        for (; j + LANES <= L; j += LANES)
            for (int k = 0; k < LANES; k++)
                acc[k] += a[j + k];
        for (int k = 0; j + k < L; k++)
            acc[k] += a[j + k];
    }
    LANE_TREE(acc);
    return acc[0];
}

/* The entry points of the other files: plain functions, so a caller elsewhere never
 * names a cloned one (clang 14 calls a cloned function of another file by the wrong
 * symbol; the clones are resolved here, in vec.c). */
T FN(tg__row_max)(const T *x, int64_t L) { return FN(row_max)(x, L); }
T FN(tg__row_expsum)(const T *x, int64_t L, T mx, T *e)
{
    return FN(row_expsum)(x, L, mx, e);
}

T FN(tg__row_dot)(const T *a, const T *b, int64_t L) { return FN(row_dot)(a, b, L); }

#undef FN
