/*
 * embedding_kernel.h - the kernels of ops/embedding.c (embedding lookup) for one float type. A
 * template header: embedding.c includes it once per dtype with T (float / double) and SUF (f32 /
 * f64) defined; FN(name) is name_f32 or name_f64. No include guard. The math: embedding.c.
 */
#define FN(name) TG__CAT(name, SUF)

tg_status FN(tg__embedding_forward)(const tg__call *c)
{
    sort_ids(c);
    const int32_t *ids = c->in[0];
    const T *W = c->in[1];
    T *Y = c->out;
    int64_t N = c->src_numel[0], D = c->src_shape[1][1];
    int nt = c->nt;
    /* Race-free: position n owns Y[n, :]. */
    TG_OMP_FOR(nt, N * D > TG_PAR_MIN)
    for (int64_t n = 0; n < N; n++)
        memcpy(Y + n * D, W + (int64_t)ids[n] * D, sizeof(T) * (size_t)D);
    return TG_OK;
}

tg_status FN(tg__embedding_backward)(const tg__call *c)
{
    if (!c->dx[1])
        return TG_OK;
    const T *G = c->dy;
    T *dW = c->dx[1];
    int64_t N = c->src_numel[0], V = c->src_shape[1][0], D = c->src_shape[1][1];
    const int64_t *order = c->saved, *start = order + N;
    int nt = c->nt;
    /* Race-free: vocabulary row v owns dW[v, :]; its positions are summed in order. */
    TG_OMP_FOR(nt, N * D > TG_PAR_MIN)
    for (int64_t v = 0; v < V; v++) {
        T *row = dW + v * D;
        for (int64_t k = start[v]; k < start[v + 1]; k++) {
            const T *g = G + order[k] * D;
            for (int64_t d = 0; d < D; d++)
                row[d] += g[d];
        }
    }
    return TG_OK;
}

#undef FN
