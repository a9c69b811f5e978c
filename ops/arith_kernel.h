/*
 * arith_kernel.h - the kernels of ops/arith.c (div's and sub's backward) for one float type. A
 * template header: arith.c includes it once per dtype with T (float / double) and SUF (f32 / f64)
 * defined; FN(name) is name_f32 or name_f64. No include guard. The math: arith.c.
 */
#define FN(name) TG__CAT(name, SUF)

/* Forward: ops/elementwise.c (the broadcasting loop of add and mul).
 * Backward (div): one row per iteration writing its own row of dst, which is either the
 * operand's gradient (the operand has y's shape: dst[i] += v) or the scratch (dst[i] = v) that
 * tg__reduce_to then sums in its fixed order. Race-free and thread-count independent. */
/* dst (y's shape) (+)= d y / d src[s] * dy per element */
static void FN(div_grad)(const tg__call *c, int s, T *dst, bool acc)
{
    const T *A = c->in[0], *B = c->in[1], *G = c->dy;
    int nt = c->nt;
    int r = c->rank;
    int64_t as[TG_MAX_RANK], bs[TG_MAX_RANK];
    tg__bcast_strides(c->src_rank[0], c->src_shape[0], r, as);
    tg__bcast_strides(c->src_rank[1], c->src_shape[1], r, bs);
    int64_t L = r ? c->shape[r - 1] : 1, rows = c->numel / L;
    int64_t asl = r ? as[r - 1] : 0, bsl = r ? bs[r - 1] : 0;
    TG_OMP_FOR(nt, c->numel > TG_PAR_MIN)
    for (int64_t row = 0; row < rows; row++) {
        int64_t ao, bo;
        row_offsets(c, row, as, bs, &ao, &bo);
        for (int64_t j = 0; j < L; j++) {
            T va = A[ao + j * asl], vb = B[bo + j * bsl], g = G[row * L + j];
            T v = s == 0 ? g / vb : -(g * (va / vb)) / vb;
            if (acc)
                dst[row * L + j] += v;
            else
                dst[row * L + j] = v;
        }
    }
}

tg_status FN(tg__div_backward)(const tg__call *c)
{
    for (int s = 0; s < 2; s++) {
        if (!c->dx[s])
            continue;
        if (c->src_numel[s] == c->numel) { /* x has y's layout: accumulate directly */
            FN(div_grad)(c, s, c->dx[s], true);
            continue;
        }
        FN(div_grad)(c, s, c->ws, false);
        tg__reduce_to(c->govs, c->nt, c->dtype, c->ws, c->rank, c->shape, c->src_rank[s], c->src_shape[s],
                      c->dx[s]);
    }
    return TG_OK;
}

/* db -= dy (b has y's layout) or db -= scratch (b's numel). Each element by one iteration. */
static void FN(sub_from)(int nt, int64_t n, const T *v, T *db)
{
    TG_OMP_FOR(nt, n > TG_PAR_MIN)
    for (int64_t i = 0; i < n; i++)
        db[i] -= v[i];
}

tg_status FN(tg__sub_backward)(const tg__call *c)
{
    if (c->dx[0])
        tg__reduce_to(c->govs, c->nt, c->dtype, c->dy, c->rank, c->shape, c->src_rank[0], c->src_shape[0],
                      c->dx[0]);
    if (!c->dx[1])
        return TG_OK;
    const T *v = c->dy;
    int64_t nb = c->src_numel[1];
    if (nb != c->numel) { /* reduce dy onto b's shape in the scratch, then subtract */
        memset(c->ws, 0, (size_t)nb * sizeof(T));
        tg__reduce_to(c->govs, c->nt, c->dtype, c->dy, c->rank, c->shape, c->src_rank[1], c->src_shape[1],
                      c->ws);
        v = c->ws;
    }
    FN(sub_from)(c->nt, nb, v, c->dx[1]);
    return TG_OK;
}

#undef FN
