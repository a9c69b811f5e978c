/*
 * shape_kernel.h - the kernels of ops/shape.c (permute, narrow and contiguous) for one float type.
 * A template header: shape.c includes it once per dtype with T (float / double) and SUF (f32 /
 * f64) defined; FN(name) is name_f32 or name_f64. No include guard. The math: shape.c.
 */
#define FN(name) TG__CAT(name, SUF)

/* ---- permute and transpose (backward) -------------------------------------------------------- */
/* Copy with permuted axes: dst (dshape) from src where dst axis k walks src axis perm[k].
 * If acc, dst += instead of =. Each dst row is written by one iteration. */
static void FN(permute)(int nt, int r, const int64_t *dshape, const int *perm,
                        const int64_t *sshape, const T *src, T *dst, bool inverse, bool acc)
{
    int64_t sst[TG_MAX_RANK], st[TG_MAX_RANK], s = 1, n = 1;
    for (int i = r - 1; i >= 0; i--) {
        sst[i] = s;
        s *= sshape[i];
        n *= dshape[i];
    }
    /* st[k]: stride in src of dst axis k */
    for (int k = 0; k < r; k++) {
        if (!inverse)
            st[k] = sst[perm[k]];
        else
            for (int j = 0; j < r; j++)
                if (perm[j] == k)
                    st[k] = sst[j];
    }
    int64_t L = r ? dshape[r - 1] : 1, rows = n / L, sl = r ? st[r - 1] : 1;
    TG_OMP_FOR(nt, n > TG_PAR_MIN)
    for (int64_t row = 0; row < rows; row++) {
        int64_t rem = row, so = 0;
        for (int d = r - 2; d >= 0; d--) {
            so += (rem % dshape[d]) * st[d];
            rem /= dshape[d];
        }
        T *dr = dst + row * L;
        if (acc)
            for (int64_t j = 0; j < L; j++)
                dr[j] += src[so + j * sl];
        else
            for (int64_t j = 0; j < L; j++)
                dr[j] = src[so + j * sl];
    }
}

/* dx (x's shape) += dy permuted back: dst axis j of x is walked by dy axis k with perm[k]==j */
tg_status FN(tg__permute_backward)(const tg__call *c)
{
    if (c->dx[0])
        FN(permute)(c->nt, c->src_rank[0], c->src_shape[0], c->p->permute.perm, c->shape, c->dy,
                    c->dx[0], true, true);
    return TG_OK;
}

/* ---- reshape (backward) ---------------------------------------------------------------------- */
/* dx += dy (same layout); in place (TG_OPF_BWD_INPLACE) dx is dy already, as 0 + dy. Each
 * element by one iteration. */
tg_status FN(tg__reshape_backward)(const tg__call *c)
{
    if (!c->dx[0])
        return TG_OK;
    if (c->dx[0] == c->dy) {
        tg__plus_zero(c->govs, c->nt, c->dtype, c->numel, c->dx[0]);
        return TG_OK;
    }
    int nt = c->nt;
    int64_t n = c->numel;
    T *dx = c->dx[0];
    const T *dy = c->dy;
    TG_OMP_FOR(nt, n > TG_PAR_MIN)
    for (int64_t i = 0; i < n; i++)
        dx[i] += dy[i];
    return TG_OK;
}

/* ---- narrow (backward) ----------------------------------------------------------------------- */
/* x viewed as (outer, X, inner), y as (outer, len, inner): y[o, l, :] = x[o, start + l, :]. */
static void FN(narrow)(const tg__call *c)
{
    const int64_t *xs = c->src_shape[0];
    int a = c->p->narrow.axis;
    int64_t outer = 1, inner = 1;
    for (int i = 0; i < a; i++)
        outer *= xs[i];
    for (int i = a + 1; i < c->src_rank[0]; i++)
        inner *= xs[i];
    int64_t X = xs[a], len = c->shape[a], st = c->p->narrow.start;
    int nt = c->nt;
    /* Race-free: iteration (o, l) owns one row of y (and the matching row of dx). */
    /* one thread below TG_PAR_BYTES: no parallel region at all */
    TG_PAR_RANGE(nt, c->numel * 3 * (int64_t)sizeof(T) > TG_PAR_BYTES, outer * len, 1, {
        for (int64_t ol = lo; ol < hi; ol++) {
            int64_t o = ol / len, l = ol % len;
            int64_t xo = (o * X + st + l) * inner, yo = ol * inner;
            T *dx = (T *)c->dx[0] + xo;
            const T *dy = (const T *)c->dy + yo;
            for (int64_t i = 0; i < inner; i++)
                dx[i] += dy[i];
        }
    });
}

tg_status FN(tg__narrow_backward)(const tg__call *c)
{
    if (c->dx[0])
        FN(narrow)(c);
    return TG_OK;
}

/* ---- contiguous ------------------------------------------------------------------------------ */
/* y (row-major) = x (c's source 0) read through its strides; one row of y per iteration. */
static void FN(gather)(int nt, const tg__call *c, const T *src, T *y)
{
    int r = c->src_rank[0];
    const int64_t *xs = c->src_shape[0], *xst = c->src_stride[0];
    int64_t n = c->src_numel[0];
    int64_t L = r ? xs[r - 1] : 1, rows = n / L, sl = r ? xst[r - 1] : 1;
    TG_OMP_FOR(nt, n > TG_PAR_MIN)
    for (int64_t row = 0; row < rows; row++) {
        int64_t rem = row, so = 0;
        for (int d = r - 2; d >= 0; d--) {
            so += (rem % xs[d]) * xst[d];
            rem /= xs[d];
        }
        T *dr = y + row * L;
        for (int64_t j = 0; j < L; j++)
            dr[j] = src[so + j * sl];
    }
}

/* contiguous backward: dx += dy, each element by one iteration */
static void FN(add_into)(int nt, int64_t n, const T *dy, T *dx)
{
    TG_OMP_FOR(nt, n > TG_PAR_MIN)
    for (int64_t i = 0; i < n; i++)
        dx[i] += dy[i];
}

tg_status FN(tg__contiguous_forward)(const tg__call *c)
{
    FN(gather)(c->nt, c, c->in[0], c->out);
    return TG_OK;
}

/* dx += dy; in place (TG_OPF_BWD_INPLACE) dx is dy already, as 0 + dy. */
tg_status FN(tg__contiguous_backward)(const tg__call *c)
{
    if (!c->dx[0])
        return TG_OK;
    if (c->dx[0] == c->dy) {
        tg__plus_zero(c->govs, c->nt, c->dtype, c->numel, c->dx[0]);
        return TG_OK;
    }
    FN(add_into)(c->nt, c->numel, c->dy, c->dx[0]);
    return TG_OK;
}

#undef FN
