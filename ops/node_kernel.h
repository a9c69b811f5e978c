/*
 * node_kernel.h - the kernel of tg__reduce_to (ops/node.c: a gradient summed over the
 * dims broadcast from x) for one float type. A template header: node.c includes it once per
 * dtype with T (float / double) and SUF (f32 / f64) defined; FN(name) is name_f32 or name_f64.
 * No include guard.
 */
#define FN(name) TG__CAT(name, SUF)

/* dx (x's shape: xrank, xshape) += sum of dy over the dims broadcast from x to out_shape.
 * Each dx element is owned by one iteration; the broadcast positions are visited in
 * row-major order, so the sum order is fixed whatever the thread count. */
static void FN(reduce_to)(tg__govs *govs, int nt, const T *dy, int rank, const int64_t *out_shape,
                          int xrank, const int64_t *xshape, T *dx)
{
    int64_t ost[TG_MAX_RANK], xst[TG_MAX_RANK];
    int64_t s = 1;
    for (int i = rank - 1; i >= 0; i--) {
        ost[i] = s;
        s *= out_shape[i];
    }
    int64_t outn = s;
    tg__bcast_strides(xrank, xshape, rank, xst);
    /* broadcast axes (x contributes stride 0 but out dim > 1) */
    int bax[TG_MAX_RANK], nb = 0, kax[TG_MAX_RANK], nk = 0;
    int64_t bcount = 1;
    for (int i = 0; i < rank; i++) {
        if (xst[i] == 0 && out_shape[i] > 1) {
            bax[nb++] = i;
            bcount *= out_shape[i];
        } else if (out_shape[i] > 1) {
            kax[nk++] = i;
        }
    }
    int64_t xn = 1;
    for (int i = 0; i < xrank; i++)
        xn *= xshape[i];
    if (bcount == 1) { /* same shape: plain accumulate */
        TG_OMP_FOR(nt, xn > TG_PAR_MIN)
        for (int64_t i = 0; i < xn; i++)
            dx[i] += dy[i];
        return;
    }
    (void)outn;
    if (nk == 0 || bax[nb - 1] < kax[0]) {
        /* broadcast over leading axes only (a bias): dy is (bcount, xn) row-major, and
         * the row-blocked column sum adds its rows in the same order as the loop below */
        FN(tg__sum_rows)(govs, nt, bcount, xn, dy, xn, dx);
        return;
    }
    TG_OMP_FOR(nt, xn * bcount > TG_PAR_MIN)
    for (int64_t i = 0; i < xn; i++) {
        /* base offset in dy of x element i: decode i over the kept axes */
        int64_t base = 0, rem = i;
        for (int k = nk - 1; k >= 0; k--) {
            int64_t d = out_shape[kax[k]];
            base += (rem % d) * ost[kax[k]];
            rem /= d;
        }
        T acc = 0;
        for (int64_t j = 0; j < bcount; j++) {
            int64_t off = 0, r2 = j;
            for (int k = nb - 1; k >= 0; k--) {
                int64_t d = out_shape[bax[k]];
                off += (r2 % d) * ost[bax[k]];
                r2 /= d;
            }
            acc += dy[base + off];
        }
        dx[i] += acc;
    }
}

#undef FN
