/*
 * attention_kernel.h - the kernels of ops/attention.c (add_mask and softmax) for one float type. A
 * template header: attention.c includes it once per dtype with T (float / double) and SUF (f32 /
 * f64) defined; FN(name) is name_f32 or name_f64. No include guard. The math: attention.c.
 */
#define FN(name) TG__CAT(name, SUF)

/* ---- add_mask -------------------------------------------------------------------------------- */
/* Each row of the last axis is written by one iteration. */
static void FN(mask_rows)(const tg__call *c, bool backward)
{
    const T *M = c->in[1];
    bool block = c->p->mask.kind == TG_MASK_BLOCK;
    int r = c->rank;
    int64_t ms[TG_MAX_RANK];
    tg__bcast_strides(c->src_rank[1], c->src_shape[1], r, ms);
    int64_t L = r ? c->shape[r - 1] : 1, rows = c->numel / L, msl = r ? ms[r - 1] : 0;
    const T *S = c->in[0], *G = c->dy;
    T *Y = c->out, *dS = c->dx[0];
    int nt = c->nt;
    TG_OMP_FOR(nt, c->numel > TG_PAR_MIN)
    for (int64_t row = 0; row < rows; row++) {
        int64_t rem = row, mo = 0;
        for (int d = r - 2; d >= 0; d--) {
            mo += (rem % c->shape[d]) * ms[d];
            rem /= c->shape[d];
        }
        int64_t o = row * L;
        for (int64_t j = 0; j < L; j++) {
            T mv = M[mo + j * msl];
            if (!backward) {
                if (block)
                    Y[o + j] = mv != 0 ? (T)-INFINITY : S[o + j];
                else
                    Y[o + j] = S[o + j] + mv;
            } else if (dS == G) { /* in place (TG_OPF_BWD_INPLACE): write */
                dS[o + j] = (!block || mv == 0) ? (T)0 + G[o + j] : (T)0;
            } else if (!block || mv == 0) {
                dS[o + j] += G[o + j];
            }
        }
    }
}

tg_status FN(tg__add_mask_forward)(const tg__call *c)
{
    FN(mask_rows)(c, false);
    return TG_OK;
}

/* dscores: dy where the mask keeps (block) or everywhere (additive); an additive mask's
 * gradient is dy summed onto its shape. */
tg_status FN(tg__add_mask_backward)(const tg__call *c)
{
    if (c->dx[0])
        FN(mask_rows)(c, true);
    if (c->p->mask.kind == TG_MASK_ADDITIVE && c->dx[1])
        tg__reduce_to(c->govs, c->nt, c->dtype, c->dy, c->rank, c->shape, c->src_rank[1], c->src_shape[1],
                      c->dx[1]);
    return TG_OK;
}

/* ---- softmax --------------------------------------------------------------------------------- */
/* Rows [lo, hi) of x, y (rows, L). Each row is computed by one call from that row alone, with
 * the shared row kernels (src/core/vec.h: NaN-propagating max, exp-sum in 16 fixed lanes), so
 * results are independent of the thread count and of the SIMD clone. */
TG_SIMD_CLONES static void FN(softmax_rows)(const T *X, T *Y, int64_t L, int64_t lo, int64_t hi)
{
    for (int64_t r = lo; r < hi; r++) {
        const T *x = X + r * L;
        T *o = Y + r * L;
        T m = FN(tg__row_max)(x, L);
        if (m == (T)-INFINITY) { /* every entry masked: zeros, not NaN */
            for (int64_t j = 0; j < L; j++)
                o[j] = 0;
            continue;
        }
        T inv = (T)1 / FN(tg__row_expsum)(x, L, m, o);
        for (int64_t j = 0; j < L; j++)
            o[j] *= inv;
    }
}

TG_SIMD_CLONES static void FN(softmax_bwd_rows)(const T *Y, const T *G, T *DX, int64_t L,
                                                int64_t lo, int64_t hi)
{
    for (int64_t r = lo; r < hi; r++) {
        const T *o = Y + r * L, *g = G + r * L;
        T *dx = DX + r * L;
        T dot = FN(tg__row_dot)(g, o, L);
        for (int64_t j = 0; j < L; j++)
            dx[j] += o[j] * (g[j] - dot);
    }
}

tg_status FN(tg__softmax_forward)(const tg__call *c)
{
    const T *X = c->in[0];
    T *Y = c->out;
    int64_t L = c->shape[c->rank - 1], rows = c->numel / L;
    /* Race-free: a thread owns the rows [lo, hi) of y. */
    TG_PAR_RANGE(c->nt, c->numel * 2 * (int64_t)sizeof(T) > TG_PAR_BYTES,
                 rows, 1, FN(softmax_rows)(X, Y, L, lo, hi));
    return TG_OK;
}

tg_status FN(tg__softmax_backward)(const tg__call *c)
{
    if (!c->dx[0])
        return TG_OK;
    int64_t L = c->shape[c->rank - 1], rows = c->numel / L;
    /* Race-free: a thread owns the rows [lo, hi) of dx. */
    TG_PAR_RANGE(c->nt, c->numel * 3 * (int64_t)sizeof(T) > TG_PAR_BYTES,
                 rows, 1,
                 FN(softmax_bwd_rows)(c->out, c->dy, c->dx[0], L, lo, hi));
    return TG_OK;
}

#undef FN
