/*
 * layer_norm_kernel.h - the kernels of ops/layer_norm.c (LayerNorm) for one float type. A template
 * header: layer_norm.c includes it once per dtype with T (float / double) and SUF (f32 / f64)
 * defined; FN(name) is name_f32 or name_f64. No include guard. The math: layer_norm.c.
 */
#define FN(name) TG__CAT(name, SUF)

/* Each kernel works on its own range: rows [lo, hi) of y, dx (one row-kernel call per row; a row
 * of D elements stays in L1 across its passes) or columns [lo, hi) of dgamma, dbeta (rows walked
 * in order over contiguous row segments). Race-free: a range owns its outputs. */
TG_SIMD_CLONES static void FN(ln_fwd_rows)(const T *X, const T *G, const T *B, T *Y, T *mean,
                                           T *rstd, T eps, int64_t D, int64_t lo, int64_t hi)
{
    for (int64_t r = lo; r < hi; r++) {
        const T *xr = X + r * D;
        T *yr = Y + r * D;
        /* statistics in double, also for f32 (exact for constant rows) */
        double a[LANES] = {0};
        int64_t j = 0;
        for (; j + LANES <= D; j += LANES)
            for (int k = 0; k < LANES; k++)
                a[k] += (double)xr[j + k];
        for (int k = 0; j + k < D; k++)
            a[k] += (double)xr[j + k];
        LANE_TREE(a);
        double md = a[0] / (double)D, v[LANES] = {0};
        for (j = 0; j + LANES <= D; j += LANES)
            for (int k = 0; k < LANES; k++) {
                double c = (double)xr[j + k] - md;
                v[k] += c * c;
            }
        for (int k = 0; j + k < D; k++) {
            double c = (double)xr[j + k] - md;
            v[k] += c * c;
        }
        LANE_TREE(v);
        double var = v[0] / (double)D + (double)eps;
        T m = (T)md, rs = var > 0 ? (T)(1.0 / sqrt(var)) : (T)0; /* eps 0, constant row */
        mean[r] = m;
        rstd[r] = rs;
        if (G && B) {
            for (j = 0; j < D; j++)
                yr[j] = ((xr[j] - m) * rs) * G[j] + B[j];
        } else {
            for (j = 0; j < D; j++) {
                T h = (xr[j] - m) * rs;
                yr[j] = (G ? h * G[j] : h) + (B ? B[j] : 0);
            }
        }
    }
}

TG_SIMD_CLONES static void FN(ln_bwd_rows)(const T *X, const T *G, const T *DY, const T *mean,
                                           const T *rstd, T *DX, int64_t D, int64_t lo, int64_t hi)
{
    for (int64_t r = lo; r < hi; r++) {
        const T *xr = X + r * D, *dy = DY + r * D;
        T *dx = DX + r * D;
        T m = mean[r], rs = rstd[r];
        double a[LANES] = {0}, b[LANES] = {0};
        int64_t j = 0;
        for (; j + LANES <= D; j += LANES)
            for (int k = 0; k < LANES; k++) {
                T g = G ? dy[j + k] * G[j + k] : dy[j + k];
                a[k] += (double)g;
                b[k] += (double)(g * ((xr[j + k] - m) * rs));
            }
        for (int k = 0; j + k < D; k++) {
            T g = G ? dy[j + k] * G[j + k] : dy[j + k];
            a[k] += (double)g;
            b[k] += (double)(g * ((xr[j + k] - m) * rs));
        }
        LANE_TREE(a);
        LANE_TREE(b);
        T sg = (T)(a[0] / (double)D), sgh = (T)(b[0] / (double)D);
        for (j = 0; j < D; j++) {
            T g = G ? dy[j] * G[j] : dy[j];
            T h = (xr[j] - m) * rs;
            dx[j] += rs * (g - sg - h * sgh);
        }
    }
}

TG_SIMD_CLONES static void FN(param_cols)(const T *X, const T *DY, const T *mean, const T *rstd,
                                          T *DG, T *DB, int64_t R, int64_t D, int64_t lo,
                                          int64_t hi)
{
    T ag[CB], ab[CB];
    for (int64_t c0 = lo; c0 < hi; c0 += CB) {
        int64_t w = hi - c0 < CB ? hi - c0 : CB;
        for (int64_t c = 0; c < w; c++)
            ag[c] = ab[c] = 0;
        for (int64_t r = 0; r < R; r++) {
            const T *dy = DY + r * D + c0, *xr = X + r * D + c0;
            T m = mean[r], rs = rstd[r];
            for (int64_t c = 0; c < w; c++) {
                ag[c] += dy[c] * (xr[c] - m) * rs;
                ab[c] += dy[c];
            }
        }
        for (int64_t c = 0; c < w; c++) {
            if (DG)
                DG[c0 + c] += ag[c];
            if (DB)
                DB[c0 + c] += ab[c];
        }
    }
}

/* From the record alone: y (and x) of c->shape; gamma, beta present where their shapes are. */
tg_status FN(tg__layer_norm_forward)(const tg__call *c)
{
    bool gm = c->src_shape[1] != NULL, bt = c->src_shape[2] != NULL;
    int64_t D = c->shape[c->rank - 1], R = c->numel / D;
    const T *G = gm ? c->in[1] : NULL, *B = bt ? c->in[2] : NULL;
    T *mean = c->saved, *rstd = mean + R;
    T eps = (T)c->p->layer_norm.eps;
    TG_PAR_RANGE(c->nt, c->numel * 2 * (int64_t)sizeof(T) > TG_PAR_BYTES,
                 R, 1,
                 FN(ln_fwd_rows)(c->in[0], G, B, c->out, mean, rstd, eps, D, lo, hi));
    return TG_OK;
}

tg_status FN(tg__layer_norm_backward)(const tg__call *c)
{
    bool gm = c->src_shape[1] != NULL, bt = c->src_shape[2] != NULL;
    int64_t D = c->shape[c->rank - 1], R = c->numel / D;
    const T *G = gm ? c->in[1] : NULL;
    const T *mean = c->saved, *rstd = mean + R;
    int nt = c->nt;
    if (c->dx[0])
        TG_PAR_RANGE(nt, c->numel * 3 * (int64_t)sizeof(T) > TG_PAR_BYTES, R, 1,
                     FN(ln_bwd_rows)(c->in[0], G, c->dy, mean, rstd, c->dx[0], D, lo, hi));
    T *DG = gm ? c->dx[1] : NULL, *DB = bt ? c->dx[2] : NULL;
    if (DG || DB) /* columns walked by blocks, rows in order: fixed order per column */
        TG_PAR_RANGE(nt, c->numel * 2 * (int64_t)sizeof(T) > TG_PAR_BYTES, D, 16,
                     FN(param_cols)(c->in[0], c->dy, mean, rstd, DG, DB, R, D, lo, hi));
    return TG_OK;
}

#undef FN
