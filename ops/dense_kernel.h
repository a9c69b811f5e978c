/*
 * dense_kernel.h - the kernels of ops/dense.c (dense and dense_act forward and backward) for one
 * float type. A template header: dense.c includes it once per instantiation with T, SUF defined.
 * No include guard.
 */
#define FN(name) TG__CAT(name, SUF)

static void FN(fwd)(const tg__call *c, int act)
{
    bool b = c->n_src > 2;
    int64_t I = c->src_shape[1][1], O = c->src_shape[1][0], R = c->src_numel[0] / I;
    if (R <= TG__GEMV_MAX_ROWS) {
        FN(pgemv)
        (c, R, O, I, c->in[0], c->in[1], b ? c->in[2] : NULL, c->out, act,
         act == TG__EPI_GELU ? c->saved : NULL);
        return;
    }
    tg__gemm_epi epi = {b ? c->in[2] : NULL, act, act == TG__EPI_GELU ? c->saved : NULL};
    FN(pgemm)(c, false, true, R, O, I, c->in[0], I, c->in[1], I, c->out, O, false, c->ws, &epi);
}
static void FN(bwd_from)(const tg__call *c, const T *G, void *ws)
{
    bool b = c->n_src > 2;
    int64_t I = c->src_shape[1][1], O = c->src_shape[1][0], R = c->src_numel[0] / I;
    if (c->dx[0]) /* dx (R, I) += dz (R, O) W (O, I) */
        FN(pgemm)(c, false, false, R, I, O, G, O, c->in[1], I, c->dx[0], I, true, ws, NULL);
    if (c->dx[1]) /* dW (O, I) += dz^T (O, R) x (R, I) */
        FN(pgemm)(c, true, false, O, I, R, G, O, c->in[0], I, c->dx[1], I, true, ws, NULL);
    if (b && c->dx[2]) /* db (O) += sum_r dz[r, :]: row-blocked, fixed order per column */
        FN(tg__sum_rows)(c->govs, c->nt, R, O, G, O, c->dx[2]);
}
/* dz = dy [y > 0] (y > 0 exactly where z > 0); dz may be dy itself. */
TG_SIMD_CLONES static void FN(relu_dz)(int64_t lo, int64_t hi, const T *out, const T *dy, T *dz)
{
    for (int64_t i = lo; i < hi; i++) {
        T g = dy[i];
        dz[i] = (T)0 + (out[i] > 0 ? g : (T)0);
    }
}
/* dz = dy * act'(z) over dy or into the workspace's tail, then dense's rules. */
tg_status FN(tg__dense_act_backward)(const tg__call *c)
{
    int64_t n = c->numel;
    size_t gws = gemm_ws(c);
    /* dz over dy when nobody reads dy after this rule, else in the workspace */
    T *dz = c->dy_scratch ? (T *)c->dy : (T *)(void *)((char *)c->ws + gws);
    const T *dy = c->dy, *out = c->out, *z = c->saved;
    int nt = c->nt;
    if (c->p->dense.act == TG_ACT_RELU) {
        TG_PAR_RANGE(nt, n * 3 * (int64_t)sizeof(T) > TG_PAR_BYTES, n, 16,
                     FN(relu_dz)(lo, hi, out, dy, dz));
    } else {
        TG_OMP_FOR(nt, n > TG_PAR_MIN / 16)
        for (int64_t i = 0; i < n; i++) {
            double v = (double)z[i];
            double cdf = 0.5 * (1.0 + erf(v * INV_SQRT2));
            double pdf = INV_SQRT2PI * exp(-0.5 * v * v);
            dz[i] = (T)((double)dy[i] * (cdf + v * pdf));
        }
    }
    FN(bwd_from)(c, dz, c->ws);
    return TG_OK;
}

tg_status FN(tg__dense_forward)(const tg__call *c)
{
    FN(fwd)(c, TG__EPI_NONE);
    return TG_OK;
}

tg_status FN(tg__dense_backward)(const tg__call *c)
{
    FN(bwd_from)(c, c->dy, c->ws);
    return TG_OK;
}

tg_status FN(tg__dense_act_forward)(const tg__call *c)
{
    FN(fwd)(c, c->p->dense.act == TG_ACT_RELU ? TG__EPI_RELU : TG__EPI_GELU);
    return TG_OK;
}

#undef FN
