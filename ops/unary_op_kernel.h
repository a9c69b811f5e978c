/*
 * unary_op_kernel.h - the forward and backward loops of one op of ops/unary.c for one float
 * type. A template header: unary_kernel.h includes it once per op, inside its own inclusion per
 * dtype (T, SUF), with these defined (this header #undefs them at its end):
 *   UN_NAME     the op: the loops are UN_NAME_fwd_SUF and UN_NAME_bwd_SUF (e.g. exp_fwd_f32)
 *   UN_Y        y[i] as an expression of v = x[i]
 *   UN_DX       what backward adds to dx[i], an expression of g = dy[i] and v = r[i]
 *   UN_FWD_PAR, UN_BWD_PAR   the forward's and the backward's loop fork above this many elements
 * No include guard.
 */
#define UN_FN(name) TG__CAT(TG__CAT(UN_NAME, name), SUF)

/* y (n) = UN_Y, v = x[i]; may run in place (x == y). */
static void UN_FN(fwd)(int nt, int64_t n, const T *x, T *y)
{
    TG_OMP_FOR(nt, n > (UN_FWD_PAR))
    for (int64_t i = 0; i < n; i++) {
        T v = x[i];
        y[i] = (UN_Y);
    }
}

/* dx (n) += UN_DX, g = dy[i], v = r[i] where r is x or y (what the op's backward reads). */
static void UN_FN(bwd)(int nt, int64_t n, const T *r, const T *dy, T *dx)
{
    (void)r;
    TG_OMP_FOR(nt, n > (UN_BWD_PAR))
    for (int64_t i = 0; i < n; i++) {
        T v = r ? r[i] : 0, g = dy[i];
        (void)v;
        dx[i] += (UN_DX);
    }
}

#undef UN_FN
#undef UN_NAME
#undef UN_Y
#undef UN_DX
#undef UN_FWD_PAR
#undef UN_BWD_PAR
