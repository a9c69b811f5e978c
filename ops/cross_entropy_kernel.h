/*
 * cross_entropy_kernel.h - the kernels of ops/cross_entropy.c (fused log-softmax and NLL) for
 * one float type. A template header: cross_entropy.c includes it once per dtype with T (float /
 * double), SUF (f32 / f64) and EXP (tg__expf / tg__exp) defined; FN(name) is name_f32 or
 * name_f64. No include guard. The math: cross_entropy.c.
 */
#define FN(name) TG__CAT(name, SUF)

/* Rows [lo, hi) per call, each from its own row alone with the row kernels of src/core/vec.h
 * (max, exp-sum and, with smoothing, the row sum in 16 fixed lanes, the vectorizable exp):
 * race-free (row r owns lse[r], row_loss[r], cls[r] and dx[r, :]), independent of the thread
 * count and of the clone. eps = 0 computes exactly the unsmoothed loss (no row sum). */
TG_SIMD_CLONES static void FN(xent_fwd_rows)(const T *X, const int32_t *tg, int64_t ign, double eps,
                                             xent_saved s, int64_t V, int64_t lo, int64_t hi)
{
    for (int64_t r = lo; r < hi; r++) {
        const T *x = X + r * V;
        T m = FN(tg__row_max)(x, V);
        T sum = FN(tg__row_expsum)(x, V, m, NULL);
        double lse = (double)m + log((double)sum);
        bool ignored = tg[r] == ign;
        s.lse[r] = lse;
        s.cls[r] = ignored ? -1 : tg[r];
        if (ignored) {
            s.row_loss[r] = 0.0;
        } else if (eps == 0) {
            s.row_loss[r] = lse - (double)x[tg[r]];
        } else { /* -(1/V) sum_j log softmax(x)_j = lse - mean_j x_j */
            double mean = (double)FN(tg__row_dot)(x, NULL, V) / (double)V;
            s.row_loss[r] = (1 - eps) * (lse - (double)x[tg[r]]) + eps * (lse - mean);
        }
    }
}

/* q_j = off for j != t, hit = 1 - eps + eps / V for j == t (eps = 0: 0 and 1) */
TG_SIMD_CLONES static void FN(xent_bwd_rows)(const T *X, T *DX, xent_saved s, T scale, T hit, T off,
                                             int64_t V, int64_t lo, int64_t hi)
{
    for (int64_t r = lo; r < hi; r++) {
        if (s.cls[r] < 0)
            continue;
        const T *x = X + r * V;
        T *dx = DX + r * V;
        T lse = (T)s.lse[r];
        int64_t t = s.cls[r];
        for (int64_t j = 0; j < V; j++)
            dx[j] += scale * (EXP(x[j] - lse) - (j == t ? hit : off));
    }
}

tg_status FN(tg__xent_forward)(const tg__call *c)
{
    int64_t n = c->src_numel[0], V = c->src_shape[0][c->src_rank[0] - 1], R = n / V;
    int64_t ign = c->p->xent.ignore_index;
    double eps = c->p->xent.label_smoothing;
    xent_saved s = saved_of(c, R);
    TG_PAR_RANGE(c->nt, n * (int64_t)sizeof(T) > TG_PAR_BYTES, R, 1,
                 FN(xent_fwd_rows)(c->in[0], c->in[1], ign,
                                   eps, s, V, lo, hi));
    int64_t nv = 0;
    double total = 0;
    for (int64_t r = 0; r < R; r++) { /* fixed order */
        if (s.cls[r] >= 0)
            nv++;
        total += s.row_loss[r];
    }
    *s.n_valid = nv;
    *(T *)c->out = nv ? (T)(total / (double)nv) : (T)0;
    return TG_OK;
}

tg_status FN(tg__xent_backward)(const tg__call *c)
{
    if (!c->dx[0])
        return TG_OK;
    int64_t n = c->src_numel[0], V = c->src_shape[0][c->src_rank[0] - 1], R = n / V;
    xent_saved s = saved_of(c, R);
    if (*s.n_valid == 0)
        return TG_OK;
    T scale = (T)((double)*(const T *)c->dy / (double)*s.n_valid);
    double eps = c->p->xent.label_smoothing;
    T off = (T)(eps / (double)V), hit = (T)(1 - eps + eps / (double)V);
    TG_PAR_RANGE(c->nt, n * 2 * (int64_t)sizeof(T) > TG_PAR_BYTES,
                 R, 1, FN(xent_bwd_rows)(c->in[0], c->dx[0], s, scale, hit, off, V, lo, hi));
    return TG_OK;
}

#undef FN
