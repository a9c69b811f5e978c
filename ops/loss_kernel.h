/*
 * loss_kernel.h - the kernels of ops/loss.c (mse_loss) for one float type. A template header:
 * loss.c includes it once per dtype with T (float / double) and SUF (f32 / f64) defined; FN(name)
 * is name_f32 or name_f64. No include guard. The math: loss.c.
 */
#define FN(name) TG__CAT(name, SUF)

/* Elementwise loops: each element by one iteration. Reductions: see loss.c's header
 * comment. */
tg_status FN(tg__mse_loss_forward)(const tg__call *c)
{
    const T *X = c->in[0], *Tg = c->in[1];
    T *Y = c->out;
    int64_t n = c->src_numel[0];
    int nt = c->nt;
    if (c->p->mse.reduction == TG_REDUCTION_NONE) {
        TG_OMP_FOR(nt, n > TG_PAR_MIN)
        for (int64_t i = 0; i < n; i++) {
            T d = X[i] - Tg[i];
            Y[i] = d * d;
        }
        return TG_OK;
    }
    int64_t bs = (n + MSE_BLOCKS - 1) / MSE_BLOCKS;
    if (bs < MSE_MIN_BLOCK)
        bs = MSE_MIN_BLOCK;
    int64_t nb = (n + bs - 1) / bs;
    double part[MSE_BLOCKS];
    TG_OMP_FOR(nt, nb > 1)
    for (int64_t b = 0; b < nb; b++) {
        int64_t lo = b * bs, hi = lo + bs < n ? lo + bs : n;
        double acc = 0;
        for (int64_t i = lo; i < hi; i++) {
            double d = (double)X[i] - (double)Tg[i];
            acc += d * d;
        }
        part[b] = acc;
    }
    double sum = 0;
    for (int64_t b = 0; b < nb; b++)
        sum += part[b];
    Y[0] = (T)(c->p->mse.reduction == TG_REDUCTION_MEAN ? sum / (double)n : sum);
    return TG_OK;
}

/* dst += sign * norm * (x - t) * dy (dy per element for none, else the scalar) */
static void FN(bwd)(const tg__call *c, T *dst, bool negate)
{
    const T *X = c->in[0], *Tg = c->in[1], *G = c->dy;
    int64_t n = c->src_numel[0];
    int nt = c->nt;
    bool none = c->p->mse.reduction == TG_REDUCTION_NONE;
    T norm = (T)(c->p->mse.reduction == TG_REDUCTION_MEAN ? 2.0 / (double)n : 2.0);
    TG_OMP_FOR(nt, n > TG_PAR_MIN)
    for (int64_t i = 0; i < n; i++) {
        T v = norm * (X[i] - Tg[i]) * G[none ? i : 0];
        dst[i] += negate ? -v : v;
    }
}

tg_status FN(tg__mse_loss_backward)(const tg__call *c)
{
    for (int s = 0; s < 2; s++) /* input, then target: one tensor given twice is safe */
        if (c->dx[s])
            FN(bwd)(c, c->dx[s], s == 1);
    return TG_OK;
}

#undef FN
