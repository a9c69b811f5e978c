/*
 * gemm_part_kernel.h - the blocked product of ops/gemm.c for one float type: row strips over one
 * block, the task schedule, and the entry points tg__gemm_isa, tg__gemm_ex and tg__gemm. A
 * template header: gemm.c includes it once per instantiation with T, SUF, KC, NC defined. No
 * include guard.
 */
#define FN(name) TG__CAT(name, SUF)
#define FNX__(pre, suf) pre##suf
#define FNX_(pre, suf) FNX__(pre, suf)
#define FNX(pre) FNX_(pre, SUF)

static void FN(block_rows)(const kern_set *ks, bool ta, int64_t m0, int64_t m1, int64_t j0,
                           int64_t nc, int64_t k0, int64_t kc, int64_t K, const T *A, int64_t lda,
                           const T *B, int64_t ldb, const T *bpack, bool bdirect, T *C, int64_t ldc,
                           bool acc, const tg__gemm_epi *epi, T *apack, T *edge)
{
    const int MR = ks->mr, NR = ks->nr;
    const T *bias = epi ? (const T *)epi->bias : NULL;
    int act = epi ? epi->act : TG__EPI_NONE;
    T *pre = epi ? (T *)epi->pre : NULL;
    bool first = k0 == 0, last = k0 + kc >= K;
    int64_t npanels = (nc + NR - 1) / NR;
    for (int64_t ib = m0; ib < m1; ib += MR) {
        int64_t h = m1 - ib < MR ? m1 - ib : MR;
        /* With few column panels to amortise packing over, a full strip is read in place (a
         * short-lived stream); otherwise, and for an edge strip (zero padded), it is packed
         * into a contiguous k-major strip that stays in L1 (in place, rows a multiple of
         * 4 KiB apart fight over L1 sets). */
        FN(skern) sk = h < MR || npanels >= 8 ? NULL : ta ? ks->FNX(cols) : ks->FNX(rows);
        const T *astrip = ta ? A + k0 * lda + ib : A + ib * lda + k0;
        if (!sk)
            FN(pack_a)(ta, A, lda, ib, h, k0, kc, MR, apack);
        for (int64_t p = 0; p < npanels; p++) {
            int64_t jb = j0 + p * NR, w = nc - p * NR < NR ? nc - p * NR : NR;
            int mode = (!first || acc) ? MK_LOAD : bias ? MK_BIAS : 0;
            if (last && act == TG__EPI_RELU && !pre)
                mode |= MK_RELU;
            T *c = C + ib * ldc + jb;
            const T *bp = bpack + p * kc * NR;
            int64_t bld = NR;
            if (bdirect && w == NR) {
                bp = B + k0 * ldb + jb;
                bld = ldb;
            }
            const T *bj = bias ? bias + jb : NULL;
            if (h == MR && w == NR) {
                if (sk)
                    sk(kc, astrip, lda, bp, bld, c, ldc, mode, bj);
                else
                    ks->FNX(k)(kc, apack, bp, bld, c, ldc, mode, bj);
            } else { /* edge block: through a zero-padded MR x NR tile */
                T bz[NR_MAX];
                for (int64_t j = 0; j < NR; j++)
                    bz[j] = bj && j < w ? bj[j] : 0;
                for (int64_t r = 0; r < MR; r++)
                    for (int64_t j = 0; j < NR; j++)
                        edge[r * NR + j] = (mode & MK_LOAD) && r < h && j < w ? c[r * ldc + j] : 0;
                if (sk)
                    sk(kc, astrip, lda, bp, bld, edge, NR, mode, bz);
                else
                    ks->FNX(k)(kc, apack, bp, bld, edge, NR, mode, bz);
                for (int64_t r = 0; r < h; r++)
                    memcpy(c + r * ldc, edge + r * NR, sizeof(T) * (size_t)w);
            }
            if (last && (pre || act == TG__EPI_GELU)) {
                for (int64_t r = 0; r < h; r++) {
                    T *cr = c + r * ldc;
                    T *pr = pre ? pre + (ib + r) * ldc + jb : NULL;
                    for (int64_t j = 0; j < w; j++) {
                        T z = cr[j];
                        if (pr)
                            pr[j] = z;
                        cr[j] = act == TG__EPI_GELU   ? (T)gelu((double)z)
                                : act == TG__EPI_RELU ? (z > 0 ? z : (z != z ? z : 0))
                                                      : z;
                    }
                }
            }
        }
    }
}
/* A rectangle of C on the calling thread: rows [m0, m1), columns [n0, n1), all of K; for
 * each (column block, K chunk) it packs that slice of op(B) once into its own workspace and
 * runs every row strip over it. */
static void FN(part)(const kern_set *ks, bool ta, bool tb, int64_t m0, int64_t m1, int64_t n0,
                     int64_t n1, int64_t K, const T *A, int64_t lda, const T *B, int64_t ldb, T *C,
                     int64_t ldc, bool acc, const tg__gemm_epi *epi, T *work)
{
    const int MR = ks->mr, NR = ks->nr;
    tg_dtype dt_ = sizeof(T) == 4 ? TG_F32 : TG_F64;
    int64_t kcap = ws_kc(dt_, K), ncap = ws_nc(dt_, n1 - n0);
    T *bpack = work, *apack = work + kcap * ncap, *edge = apack + MR_MAX * kcap;
    /* Few row strips to reuse it: full panels of a row-major op(B) are read in place (the
     * kernel takes B's row stride); only the edge panel is packed. */
    bool bdirect = !tb && m1 - m0 <= 4 * (int64_t)MR;
    for (int64_t j0 = n0; j0 < n1; j0 += NC) {
        int64_t nc = n1 - j0 < NC ? n1 - j0 : NC;
        for (int64_t k0 = 0; k0 < K || k0 == 0; k0 += KC) {
            int64_t kc = K - k0 < KC ? K - k0 : KC;
            FN(pack_b)(tb, B, ldb, k0, kc, j0, nc, NR, bdirect, bpack);
            FN(block_rows)
            (ks, ta, m0, m1, j0, nc, k0, kc, K, A, lda, B, ldb, bpack, bdirect, C, ldc, acc, epi,
             apack, edge);
            if (K == 0)
                break;
        }
    }
}
/* The shared-B schedule (src/core/par.h): blocks b = (column block b / nkb, K chunk
 * b % nkb); op(B)'s block is packed into the B area of workspace slice 0 or 1 by pack tasks
 * of `ppt` panels each, and row groups of `rows` rows run over it; each thread's A strip
 * and edge tile are in its own slice. */
typedef struct {
    const kern_set *ks;
    bool ta, tb, acc;
    int64_t M, N, K, lda, ldb, ldc, nkb, rows, ppt, kcap, ncap;
    const T *A, *B;
    T *C;
    const tg__gemm_epi *epi;
    char *ws;
    size_t per;
} FN(sched);
static void FN(sched_block)(const FN(sched) * g, int64_t b, int64_t *j0, int64_t *nc, int64_t *k0,
                            int64_t *kc)
{
    *j0 = b / g->nkb * NC;
    *nc = g->N - *j0 < NC ? g->N - *j0 : NC;
    *k0 = b % g->nkb * KC;
    *kc = g->K - *k0 < KC ? g->K - *k0 : KC;
}
static void FN(sched_pack)(void *arg, int64_t b, int64_t i, int buf)
{
    const FN(sched) *g = arg;
    const int NR = g->ks->nr;
    int64_t j0, nc, k0, kc;
    FN(sched_block)(g, b, &j0, &nc, &k0, &kc);
    int64_t p0 = i * g->ppt;
    if (p0 * NR >= nc)
        return;
    int64_t w = nc - p0 * NR < g->ppt * NR ? nc - p0 * NR : g->ppt * NR;
    T *bpack = (T *)(void *)(g->ws + (size_t)buf * g->per);
    FN(pack_b)(g->tb, g->B, g->ldb, k0, kc, j0 + p0 * NR, w, NR, false, bpack + p0 * kc * NR);
}
static void FN(sched_rows)(void *arg, int64_t b, int64_t r, int buf, int thread)
{
    const FN(sched) *g = arg;
    int64_t m0 = r * g->rows, m1 = m0 + g->rows < g->M ? m0 + g->rows : g->M;
    if (m0 >= m1)
        return;
    int64_t j0, nc, k0, kc;
    FN(sched_block)(g, b, &j0, &nc, &k0, &kc);
    const T *bpack = (const T *)(const void *)(g->ws + (size_t)buf * g->per);
    T *apack = (T *)(void *)(g->ws + (size_t)thread * g->per) + g->kcap * g->ncap;
    FN(block_rows)
    (g->ks, g->ta, m0, m1, j0, nc, k0, kc, g->K, g->A, g->lda, g->B, g->ldb, bpack, false, g->C,
     g->ldc, g->acc, g->epi, apack, apack + MR_MAX * g->kcap);
}
/* One column group [n0, n1) over every row and all of K, in thread `thread`'s slice. */
static void FN(sched_columns)(void *arg, int64_t n0, int64_t n1, int thread)
{
    const FN(sched) *g = arg;
    T *w = (T *)(void *)(g->ws + (size_t)thread * g->per);
    FN(part)
    (g->ks, g->ta, g->tb, 0, g->M, n0, n1, g->K, g->A, g->lda, g->B, g->ldb, g->C, g->ldc, g->acc,
     g->epi, w);
}
static void FN(gemm_run)(tg__govs *govs, int isa, int nt, bool ta, bool tb, int64_t M, int64_t N,
                         int64_t K, const T *A, int64_t lda, const T *B, int64_t ldb, T *C,
                         int64_t ldc, bool acc, void *ws, const tg__gemm_epi *epi)
{
    if (M <= 0 || N <= 0)
        return;
    tg_dtype dt_ = sizeof(T) == 4 ? TG_F32 : TG_F64;
    kern_set ks = pick(dt_, isa);
    size_t per = per_thread_bytes(dt_, N, K);
    /* ws holds nt per-thread slices of at least tg__gemm_ws_bytes_nk(dt, 1, N, K) bytes;
     * never a stack buffer (up to 512 KiB) in an OpenMP worker's stack. */
    assert(ws != NULL);
    double flops = 2.0 * (double)M * (double)N * (double)K;
    tg__gemm_plan pl;
    tg__gemm_plan_make(&pl, govs, nt, M, N, K, ks.mr, ks.nr, KC, NC, flops,
                       TG_GEMM_FLOPS_PER_THREAD, flops);
    if (pl.nth == 1) {
        FN(part)(&ks, ta, tb, 0, M, 0, N, K, A, lda, B, ldb, C, ldc, acc, epi, ws);
        return;
    }
    FN(sched)
    g = {&ks,           ta,  tb,  acc,    M,       N,      K,
         lda,           ldb, ldc, pl.nkb, pl.rows, pl.ppt, ws_kc(dt_, K),
         ws_nc(dt_, N), A,   B,   C,      epi,     ws,     per};
    if (pl.columns) {
        tg__gemm_run_columns(&pl, FN(sched_columns), &g);
        return;
    }
    pl.sched.pack = FN(sched_pack);
    pl.sched.rows = FN(sched_rows);
    pl.sched.arg = &g;
    tg__sched_run(pl.nth, &pl.sched);
}
void FN(tg__gemm_isa)(int isa, int nt, bool ta, bool tb, int64_t M, int64_t N, int64_t K,
                      const T *A, int64_t lda, const T *B, int64_t ldb, T *C, int64_t ldc, bool acc,
                      void *ws, const tg__gemm_epi *epi)
{
    FN(gemm_run)(NULL, isa, nt, ta, tb, M, N, K, A, lda, B, ldb, C, ldc, acc, ws, epi);
}
void FN(tg__gemm_gov)(tg__govs *govs, int nt, bool ta, bool tb, int64_t M, int64_t N, int64_t K,
                      const T *A, int64_t lda, const T *B, int64_t ldb, T *C, int64_t ldc, bool acc,
                      void *ws, const tg__gemm_epi *epi)
{
    FN(gemm_run)(govs, TG__ISA_BEST, nt, ta, tb, M, N, K, A, lda, B, ldb, C, ldc, acc, ws, epi);
}
void FN(tg__gemm_ex)(int nt, bool ta, bool tb, int64_t M, int64_t N, int64_t K, const T *A,
                     int64_t lda, const T *B, int64_t ldb, T *C, int64_t ldc, bool acc, void *ws,
                     const tg__gemm_epi *epi)
{
    FN(gemm_run)(NULL, TG__ISA_BEST, nt, ta, tb, M, N, K, A, lda, B, ldb, C, ldc, acc, ws, epi);
}
void FN(tg__gemm)(int nt, bool ta, bool tb, int64_t M, int64_t N, int64_t K, const T *A,
                  int64_t lda, const T *B, int64_t ldb, T *C, int64_t ldc, bool acc, void *ws)
{
    FN(gemm_run)(NULL, TG__ISA_BEST, nt, ta, tb, M, N, K, A, lda, B, ldb, C, ldc, acc, ws, NULL);
}

#undef FN
#undef FNX__
#undef FNX_
#undef FNX
