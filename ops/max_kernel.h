/*
 * max_kernel.h - the kernels of ops/max.c (max over an axis) for one float type. A template
 * header: max.c includes it once per dtype with T (float / double) and SUF (f32 / f64) defined;
 * FN(name) is name_f32 or name_f64. No include guard. The math: max.c.
 */
#define FN(name) TG__CAT(name, SUF)

/* One output element (o, i) per iteration, scanning a ascending; backward: each iteration adds
 * into its own element of dx (distinct (o, i) give distinct (o, k, i)). Race-free and
 * thread-count independent. */
tg_status FN(tg__max_forward)(const tg__call *c)
{
    int64_t outer, A, inner;
    split(c, &outer, &A, &inner);
    const T *X = c->in[0];
    T *out = c->out;
    int64_t *K = c->saved;
    int nt = c->nt;
    TG_OMP_FOR(nt, outer * inner > 1 && c->src_numel[0] > TG_PAR_MIN)
    for (int64_t oi = 0; oi < outer * inner; oi++) {
        int64_t o = oi / inner, i = oi % inner;
        const T *p = X + o * A * inner + i;
        T best = p[0];
        int64_t k = 0;
        for (int64_t a = 1; a < A && best == best; a++) { /* stop at the first NaN */
            T v = p[a * inner];
            if (v > best || v != v) {
                best = v;
                k = a;
            }
        }
        out[oi] = best;
        K[oi] = k;
    }
    return TG_OK;
}

tg_status FN(tg__max_backward)(const tg__call *c)
{
    if (!c->dx[0])
        return TG_OK;
    int64_t outer, A, inner;
    split(c, &outer, &A, &inner);
    T *dx = c->dx[0];
    const T *dy = c->dy;
    const int64_t *K = c->saved;
    int nt = c->nt;
    TG_OMP_FOR(nt, outer * inner > TG_PAR_MIN)
    for (int64_t oi = 0; oi < outer * inner; oi++) {
        int64_t o = oi / inner, i = oi % inner;
        dx[(o * A + K[oi]) * inner + i] += dy[oi];
    }
    return TG_OK;
}

#undef FN
