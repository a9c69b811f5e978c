/*
 * concat_kernel.h - the kernels of ops/concat.c (concatenation) for one float type. A template
 * header: concat.c includes it once per dtype with T (float / double) and SUF (f32 / f64) defined;
 * FN(name) is name_f32 or name_f64. No include guard. The math: concat.c.
 */
#define FN(name) TG__CAT(name, SUF)

/* One source at a time; within it one row o of (outer, N_k * inner) per iteration, writing its
 * own span of y (forward) or of dx_k (backward). Sources run in order, so the same tensor
 * given twice accumulates twice without a race. Thread-count independent. */
static void FN(copy)(const tg__call *c, bool backward)
{
    int64_t outer, inner;
    split(c, &outer, &inner);
    int a = c->p->concat.axis;
    int64_t row = c->shape[a] * inner, off = 0; /* off: c_k * inner */
    int nt = c->nt;
    for (int k = 0; k < c->n_src; k++) {
        int64_t xrow = c->src_shape[k][a] * inner, xn = c->src_numel[k];
        if (!backward) {
            const T *X = c->in[k];
            T *Y = c->out;
            TG_OMP_FOR(nt, outer > 1 && xn > TG_PAR_MIN)
            for (int64_t o = 0; o < outer; o++)
                memcpy(Y + o * row + off, X + o * xrow, (size_t)xrow * sizeof(T));
        } else if (c->dx[k]) {
            const T *G = c->dy;
            T *DX = c->dx[k];
            TG_OMP_FOR(nt, outer > 1 && xn > TG_PAR_MIN)
            for (int64_t o = 0; o < outer; o++) {
                const T *g = G + o * row + off;
                T *dx = DX + o * xrow;
                for (int64_t j = 0; j < xrow; j++)
                    dx[j] += g[j];
            }
        }
        off += xrow;
    }
}

tg_status FN(tg__concat_forward)(const tg__call *c)
{
    FN(copy)(c, false);
    return TG_OK;
}

tg_status FN(tg__concat_backward)(const tg__call *c)
{
    FN(copy)(c, true);
    return TG_OK;
}

#undef FN
