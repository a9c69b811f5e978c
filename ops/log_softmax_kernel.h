/*
 * log_softmax_kernel.h - the kernels of ops/log_softmax.c (log_softmax) for one float type. A
 * template header: log_softmax.c includes it once per dtype with T (float / double), SUF (f32 /
 * f64), EXP (tg__expf / tg__exp) and LOG (logf / log) defined; FN(name) is name_f32 or name_f64.
 * No include guard. The math: log_softmax.c.
 */
#define FN(name) TG__CAT(name, SUF)

/* x, y (rows, L); rows [lo, hi) per call. Each row is computed from that row alone with the
 * row kernels softmax shares (src/core/vec.h: NaN-propagating max, exp-sum and sums in 16
 * fixed lanes, the vectorizable exp): race-free, independent of the thread count and clone. */
TG_SIMD_CLONES static void FN(lsm_fwd_rows)(const T *X, T *Y, int64_t L, int64_t lo, int64_t hi)
{
    for (int64_t r = lo; r < hi; r++) {
        const T *x = X + r * L;
        T *o = Y + r * L;
        T m = FN(tg__row_max)(x, L);
        if (m == (T)-INFINITY) { /* every entry -inf: log of tg_softmax's zeros */
            for (int64_t j = 0; j < L; j++)
                o[j] = (T)-INFINITY;
            continue;
        }
        T lse = LOG(FN(tg__row_expsum)(x, L, m, NULL));
        for (int64_t j = 0; j < L; j++)
            o[j] = (x[j] - m) - lse;
    }
}

TG_SIMD_CLONES static void FN(lsm_bwd_rows)(const T *Y, const T *G, T *DX, int64_t L, int64_t lo,
                                            int64_t hi)
{
    for (int64_t r = lo; r < hi; r++) {
        const T *o = Y + r * L, *g = G + r * L;
        T *dx = DX + r * L;
        /* every y -inf (the max is -inf): the row was all -inf, no gradient */
        if (FN(tg__row_max)(o, L) == (T)-INFINITY)
            continue;
        T sum = FN(tg__row_dot)(g, NULL, L);
        for (int64_t j = 0; j < L; j++)
            dx[j] += g[j] - EXP(o[j]) * sum;
    }
}

tg_status FN(tg__log_softmax_forward)(const tg__call *c)
{
    int64_t L = c->shape[c->rank - 1], rows = c->numel / L;
    /* Race-free: a thread owns the rows [lo, hi) of y. */
    TG_PAR_RANGE(c->nt, c->numel * 2 * (int64_t)sizeof(T) > TG_PAR_BYTES,
                 rows, 1, FN(lsm_fwd_rows)(c->in[0], c->out, L, lo, hi));
    return TG_OK;
}

tg_status FN(tg__log_softmax_backward)(const tg__call *c)
{
    if (!c->dx[0])
        return TG_OK;
    int64_t L = c->shape[c->rank - 1], rows = c->numel / L;
    /* Race-free: a thread owns the rows [lo, hi) of dx. */
    TG_PAR_RANGE(c->nt, c->numel * 3 * (int64_t)sizeof(T) > TG_PAR_BYTES,
                 rows, 1,
                 FN(lsm_bwd_rows)(c->out, c->dy, c->dx[0], L, lo, hi));
    return TG_OK;
}

#undef FN
