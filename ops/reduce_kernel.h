/*
 * reduce_kernel.h - the kernels of ops/reduce.c (sum and mean) for one float type. A template
 * header: reduce.c includes it once per dtype with T (float / double) and SUF (f32 / f64) defined;
 * FN(name) is name_f32 or name_f64. No include guard. The math: reduce.c.
 */
#define FN(name) TG__CAT(name, SUF)

/* Each output element is accumulated by one iteration, a ascending: thread-count independent.
 * (A full reduction runs on one thread: a split across threads would change the order.) */
tg_status FN(tg__reduce_forward)(const tg__call *c)
{
    bool mean = c->op == TG_OP_MEAN;
    int64_t outer, A, inner;
    split(c, &outer, &A, &inner);
    const T *x = c->in[0];
    T *out = c->out;
    int nt = c->nt;
    TG_OMP_FOR(nt, outer * inner > 1 && c->src_numel[0] > TG_PAR_MIN)
    for (int64_t oi = 0; oi < outer * inner; oi++) {
        int64_t o = oi / inner, i = oi % inner;
        const T *p = x + o * A * inner + i;
        T acc = 0;
        for (int64_t a = 0; a < A; a++)
            acc += p[a * inner];
        out[oi] = mean ? acc / (T)A : acc;
    }
    return TG_OK;
}

/* dx[o, a, i] += dy[o, i] (/ A for mean), each element once, the same expression whatever
 * the split: the (o, i) of a chunk's first element is found once, then walked (no integer
 * division per element). */
tg_status FN(tg__reduce_backward)(const tg__call *c)
{
    if (!c->dx[0])
        return TG_OK;
    bool mean = c->op == TG_OP_MEAN;
    int64_t outer, A, inner;
    split(c, &outer, &A, &inner);
    T *dx = c->dx[0];
    const T *dy = c->dy;
    int nt = c->nt;
    int64_t n = c->src_numel[0];
    TG_PAR_RANGE(nt, n > TG_PAR_MIN, n, 16, {
        if (inner == 1) { /* runs of A elements share dy[o] */
            int64_t o = lo / A, a = lo % A;
            for (int64_t j = lo; j < hi; o++, a = 0) {
                int64_t len = A - a < hi - j ? A - a : hi - j;
                T g = mean ? dy[o] / (T)A : dy[o];
                for (int64_t k = 0; k < len; k++)
                    dx[j + k] += g;
                j += len;
            }
        } else { /* rows of inner elements, row = o A + a */
            int64_t row = lo / inner, i = lo % inner;
            for (int64_t j = lo; j < hi; row++, i = 0) {
                int64_t len = inner - i < hi - j ? inner - i : hi - j;
                const T *g = dy + (row / A) * inner + i;
                T *d = dx + j;
                if (mean)
                    for (int64_t k = 0; k < len; k++)
                        d[k] += g[k] / (T)A;
                else
                    for (int64_t k = 0; k < len; k++)
                        d[k] += g[k];
                j += len;
            }
        }
    });
    return TG_OK;
}

#undef FN
