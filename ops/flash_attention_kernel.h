/*
 * flash_attention_kernel.h - the kernels of ops/flash_attention.c for one float type.
 * Included twice by flash_attention.c with FA_T (float / double), FA_SUF (f32 / f64), FA_EXP
 * and FA_LOG defined; see that file for the math, the layout (fa_meta) and the threading.
 *
 * Every sum below runs in a fixed order (over the head dimension c ascending for dot
 * products, over keys j ascending for row sums, over batches, query blocks and rows ascending
 * for dK and dV, over key blocks and keys ascending for dQ); loops vectorize only across
 * independent outputs (keys j of a score row, columns c of an output row), so each result is
 * the same for every thread count and every SIMD clone (-ffp-contract=off; the block products
 * are the GEMM's FMA chains, the same on its AVX-512 and AVX2 kernels).
 */
#define FA_CAT_(a, b) a##_##b
#define FA_CAT(a, b) FA_CAT_(a, b)
#define FA_FN(name) FA_CAT(name, FA_SUF)

#define FA_INLINE static inline __attribute__((always_inline))

/* Kt (d, FA_BK) = the nk rows of X (row stride xs, columns contiguous) transposed; columns
 * nk..FA_BK-1 are not written (no block product reads them). */
FA_INLINE void FA_FN(fa_load_t)(const FA_T *X, int64_t xs, int64_t nk, int64_t d, FA_T *Kt)
{
    for (int64_t j = 0; j < nk; j++) {
        const FA_T *x = X + j * xs;
        for (int64_t c = 0; c < d; c++)
            Kt[c * FA_BK + j] = x[c];
    }
}

/* C (M, N) = (zero ? 0 : C) + A B with A[r][k] at A[r ars + k aks], B[k][c] at B[k ldb + c],
 * C[r][c] at C[r ldc + c]: each C element adds its products over k ascending to its start
 * value (the order of a plain triple loop; no FMA). Register tiles of 4 rows by FA_W columns
 * (one 64-byte vector per row): every load of B serves four rows. */
FA_INLINE void FA_FN(fa_mm_direct)(int64_t M, int64_t N, int64_t K, const FA_T *A, int64_t ars,
                            int64_t aks, const FA_T *B, int64_t ldb, FA_T *C, int64_t ldc,
                            bool zero)
{
    int64_t r = 0;
    for (; r + 4 <= M; r += 4) {
        const FA_T *a0 = A + r * ars, *a1 = a0 + ars, *a2 = a1 + ars, *a3 = a2 + ars;
        FA_T *r0 = C + r * ldc, *r1 = r0 + ldc, *r2 = r1 + ldc, *r3 = r2 + ldc;
        for (int64_t c = 0; c < N; c += FA_W) {
            FA_T c0[FA_W], c1[FA_W], c2[FA_W], c3[FA_W];
            if (c + FA_W <= N) {
                for (int w = 0; w < FA_W; w++) {
                    c0[w] = zero ? 0 : r0[c + w];
                    c1[w] = zero ? 0 : r1[c + w];
                    c2[w] = zero ? 0 : r2[c + w];
                    c3[w] = zero ? 0 : r3[c + w];
                }
                for (int64_t k = 0; k < K; k++) {
                    const FA_T *b = B + k * ldb + c;
                    FA_T x0 = a0[k * aks], x1 = a1[k * aks], x2 = a2[k * aks], x3 = a3[k * aks];
                    for (int w = 0; w < FA_W; w++) {
                        c0[w] += x0 * b[w];
                        c1[w] += x1 * b[w];
                        c2[w] += x2 * b[w];
                        c3[w] += x3 * b[w];
                    }
                }
                for (int w = 0; w < FA_W; w++) {
                    r0[c + w] = c0[w];
                    r1[c + w] = c1[w];
                    r2[c + w] = c2[w];
                    r3[c + w] = c3[w];
                }
            } else { /* the last columns: same order, shorter rows */
                int64_t nw = N - c;
                for (int64_t w = 0; w < nw; w++) {
                    c0[w] = zero ? 0 : r0[c + w];
                    c1[w] = zero ? 0 : r1[c + w];
                    c2[w] = zero ? 0 : r2[c + w];
                    c3[w] = zero ? 0 : r3[c + w];
                }
                for (int64_t k = 0; k < K; k++) {
                    const FA_T *b = B + k * ldb + c;
                    FA_T x0 = a0[k * aks], x1 = a1[k * aks], x2 = a2[k * aks], x3 = a3[k * aks];
                    for (int64_t w = 0; w < nw; w++) {
                        c0[w] += x0 * b[w];
                        c1[w] += x1 * b[w];
                        c2[w] += x2 * b[w];
                        c3[w] += x3 * b[w];
                    }
                }
                for (int64_t w = 0; w < nw; w++) {
                    r0[c + w] = c0[w];
                    r1[c + w] = c1[w];
                    r2[c + w] = c2[w];
                    r3[c + w] = c3[w];
                }
            }
        }
    }
    for (; r < M; r++) {
        const FA_T *a0 = A + r * ars;
        FA_T *r0 = C + r * ldc;
        for (int64_t c = 0; c < N; c += FA_W) {
            int64_t nw = N - c < FA_W ? N - c : FA_W;
            FA_T c0[FA_W];
            for (int64_t w = 0; w < nw; w++)
                c0[w] = zero ? 0 : r0[c + w];
            for (int64_t k = 0; k < K; k++) {
                const FA_T *b = B + k * ldb + c;
                FA_T x0 = a0[k * aks];
                for (int64_t w = 0; w < nw; w++)
                    c0[w] += x0 * b[w];
            }
            for (int64_t w = 0; w < nw; w++)
                r0[c + w] = c0[w];
        }
    }
}

/* C (M, N) = (zero ? 0 : C) + A B with A[r][k] at A[r ars + k aks] (ars or aks is 1),
 * B[k][c] at B[k ldb + c], C[r][c] at C[r ldc + c], through the one-thread GEMM (ops/gemm.c:
 * FMA micro-kernels reading these small blocks in place, no nested region) unless the block
 * is tiny; gws is this thread's GEMM workspace. Each element's order depends only on the
 * shapes (fixed, thread-independent). */
FA_INLINE void FA_FN(fa_mm)(int64_t M, int64_t N, int64_t K, const FA_T *A, int64_t ars,
                            int64_t aks, const FA_T *B, int64_t ldb, FA_T *C, int64_t ldc,
                            bool zero, void *gws)
{
    if (M < 12 || N < 16) { /* tiny blocks (short sequences): the GEMM's register block would
                               be mostly padding */
        FA_FN(fa_mm_direct)(M, N, K, A, ars, aks, B, ldb, C, ldc, zero);
        return;
    }
    bool ta = aks != 1;
    FA_CAT(tg__gemm, FA_SUF)(1, ta, false, M, N, K, A, ta ? aks : ars, B, ldb, C, ldc, !zero, gws);
}

/* S (nq, nk) (row stride FA_BK) = (Q Kt) * scale: S[i][j] = scale * sum_c Q[i][c] Kt[c][j],
 * c ascending from 0 (the order of a GEMM's k loop). Columns nk.. of S are not written. */
FA_INLINE void FA_FN(fa_qkt)(int64_t nq, int64_t nk, int64_t d, const FA_T *Q, int64_t qs,
                             const FA_T *Kt, FA_T scale, FA_T *S, void *gws)
{
    FA_FN(fa_mm)(nq, nk, d, Q, qs, 1, Kt, FA_BK, S, FA_BK, true, gws);
    if (scale != 1)
        for (int64_t i = 0; i < nq; i++)
            for (int64_t j = 0; j < nk; j++)
                S[i * FA_BK + j] *= scale;
}

/* The masks of scores S (nq, FA_BK) for query rows i0.., keys j0.. (nk valid) of batch o,
 * in the unfused graph's order: additive mask added, then every block (mask, block mask,
 * causal) sets -inf. */
FA_INLINE void FA_FN(fa_mask)(const fa_meta *m, const FA_T *M0, const FA_T *M1, int64_t o,
                              int64_t i0, int64_t nq, int64_t j0, int64_t nk, FA_T *S)
{
    if (M0) {
        const FA_T *mb = M0 + m->moff[0][o] + i0 * m->msi[0] + j0 * m->msj[0];
        int64_t si = m->msi[0], sj = m->msj[0];
        for (int64_t i = 0; i < nq; i++) {
            FA_T *s = S + i * FA_BK;
            const FA_T *mr = mb + i * si;
            if (m->kind == TG_MASK_ADDITIVE) {
                for (int64_t j = 0; j < nk; j++)
                    s[j] = s[j] + mr[j * sj];
            } else {
                for (int64_t j = 0; j < nk; j++)
                    s[j] = mr[j * sj] != 0 ? (FA_T)-INFINITY : s[j];
            }
        }
    }
    if (M1) {
        const FA_T *mb = M1 + m->moff[1][o] + i0 * m->msi[1] + j0 * m->msj[1];
        int64_t si = m->msi[1], sj = m->msj[1];
        for (int64_t i = 0; i < nq; i++) {
            FA_T *s = S + i * FA_BK;
            const FA_T *mr = mb + i * si;
            for (int64_t j = 0; j < nk; j++)
                s[j] = mr[j * sj] != 0 ? (FA_T)-INFINITY : s[j];
        }
    }
    if (m->causal && j0 + nk - 1 > i0) { /* some key j > i in the block */
        for (int64_t i = 0; i < nq; i++) {
            FA_T *s = S + i * FA_BK;
            int64_t first = i0 + i + 1 - j0; /* first blocked key of row i in the block */
            for (int64_t j = first > 0 ? first : 0; j < nk; j++)
                s[j] = (FA_T)-INFINITY;
        }
    }
}

/* Forward of query rows [qb BQ, +nq) of batch o: out rows and lse (see flash_attention.c).
 * w: this thread's workspace (fa_ws_fwd elements). */
TG_SIMD_CLONES static void FA_FN(fa_fwd_item)(const fa_meta *m, const tg_tensor *y, int64_t o,
                                              int64_t qb, FA_T *w)
{
    const int64_t dk = m->dk, dv = m->dv, i0 = qb * FA_BQ;
    const int64_t nq = m->Tq - i0 < FA_BQ ? m->Tq - i0 : FA_BQ;
    const FA_T *Q = (const FA_T *)y->src[0]->data + m->off[0][o] + i0 * m->rs[0];
    const FA_T *K = (const FA_T *)y->src[1]->data + m->off[1][o];
    const FA_T *V = (const FA_T *)y->src[2]->data + m->off[2][o];
    const FA_T *M0 = m->src_mask[0] >= 0 ? y->src[m->src_mask[0]]->data : NULL;
    const FA_T *M1 = m->src_mask[1] >= 0 ? y->src[m->src_mask[1]]->data : NULL;
    void *gws = (char *)w + fa_ws_per_thread(m, false);
    FA_T *Kt = w, *S = Kt + dk * FA_BK, *acc = S + FA_BQ * FA_BK, *mx = acc + FA_BQ * dv,
         *l = mx + FA_BQ;
    const FA_T scale = (FA_T)m->scale;
    for (int64_t i = 0; i < nq; i++) {
        mx[i] = (FA_T)-INFINITY;
        l[i] = 0;
    }
    for (int64_t e = 0; e < nq * dv; e++)
        acc[e] = 0;
    int64_t nkb = (m->Tk + FA_BK - 1) / FA_BK;
    if (m->causal) { /* keys j <= i0 + nq - 1 only: later blocks are fully masked */
        int64_t last = (i0 + nq - 1) / FA_BK + 1;
        nkb = last < nkb ? last : nkb;
    }
    for (int64_t kb = 0; kb < nkb; kb++) {
        const int64_t j0 = kb * FA_BK, nk = m->Tk - j0 < FA_BK ? m->Tk - j0 : FA_BK;
        FA_FN(fa_load_t)(K + j0 * m->rs[1], m->rs[1], nk, dk, Kt);
        FA_FN(fa_qkt)(nq, nk, dk, Q, m->rs[0], Kt, scale, S, gws);
        FA_FN(fa_mask)(m, M0, M1, o, i0, nq, j0, nk, S);
        for (int64_t i = 0; i < nq; i++) {
            FA_T *s = S + i * FA_BK;
            /* row max, lane by lane (max is exact: the order does not matter); NaN kept */
            FA_T lm[FA_W], bm = (FA_T)-INFINITY;
            bool nan = false;
            for (int u = 0; u < FA_W; u++)
                lm[u] = (FA_T)-INFINITY;
            int64_t jj = 0;
            for (; jj + FA_W <= nk; jj += FA_W)
                for (int u = 0; u < FA_W; u++) {
                    FA_T x = s[jj + u];
                    nan |= x != x;
                    lm[u] = x > lm[u] ? x : lm[u];
                }
            for (; jj < nk; jj++) {
                nan |= s[jj] != s[jj];
                bm = s[jj] > bm ? s[jj] : bm;
            }
            for (int u = 0; u < FA_W; u++)
                bm = lm[u] > bm ? lm[u] : bm;
            if (nan)
                bm = (FA_T)NAN;
            FA_T mnew = bm > mx[i] || bm != bm ? bm : mx[i];
            if (mnew == (FA_T)-INFINITY) { /* every key so far blocked: nothing to add */
                for (int64_t j = 0; j < nk; j++)
                    s[j] = 0;
                continue;
            }
            FA_T alpha = FA_EXP(mx[i] - mnew); /* 0 when the row had no key yet */
            FA_T sum = 0;
            for (int64_t j = 0; j < nk; j++) {
                s[j] = FA_EXP(s[j] - mnew);
                sum += s[j];
            }
            l[i] = l[i] * alpha + sum;
            mx[i] = mnew;
            FA_T *a = acc + i * dv;
            if (alpha != 1)
                for (int64_t c = 0; c < dv; c++)
                    a[c] *= alpha;
        }
        /* acc += P V (rows that had no key yet hold P = 0 from the masks: exp(-inf) = 0) */
        FA_FN(fa_mm)(nq, dv, nk, S, FA_BK, 1, V + j0 * m->rs[2], m->rs[2], acc, dv, false, gws);
    }
    FA_T *out = (FA_T *)y->data + (o * m->Tq + i0) * dv;
    FA_T *lse = (FA_T *)y->saved + o * m->Tq + i0;
    for (int64_t i = 0; i < nq; i++) {
        FA_T *yo = out + i * dv, *a = acc + i * dv;
        if (mx[i] == (FA_T)-INFINITY) { /* fully masked row: zeros, as the safe softmax */
            for (int64_t c = 0; c < dv; c++)
                yo[c] = 0;
            lse[i] = (FA_T)-INFINITY;
            continue;
        }
        FA_T inv = (FA_T)1 / l[i];
        for (int64_t c = 0; c < dv; c++)
            yo[c] = a[c] * inv;
        lse[i] = mx[i] + FA_LOG(l[i]);
    }
}

/* Backward tile shared by both passes: for query rows [i0, +nq) of batch o against keys
 * [j0, +nk) (Kt, Vt loaded), P (nq, FA_BK) = exp(S - lse) and, in dP's place, dS = P (dP - D);
 * D (nq) = rowsum(dO O) must be filled. want_ds false: P only. */
FA_INLINE void FA_FN(fa_tile)(const fa_meta *m, const tg_tensor *y, int64_t o, int64_t i0,
                              int64_t nq, int64_t j0, int64_t nk, const FA_T *Kt,
                              const FA_T *Vt, const FA_T *D, bool want_ds, FA_T *P, FA_T *dS,
                              void *gws)
{
    const FA_T *Q = (const FA_T *)y->src[0]->data + m->off[0][o] + i0 * m->rs[0];
    const FA_T *M0 = m->src_mask[0] >= 0 ? y->src[m->src_mask[0]]->data : NULL;
    const FA_T *M1 = m->src_mask[1] >= 0 ? y->src[m->src_mask[1]]->data : NULL;
    const FA_T *lse = (const FA_T *)y->saved + o * m->Tq + i0;
    FA_FN(fa_qkt)(nq, nk, m->dk, Q, m->rs[0], Kt, (FA_T)m->scale, P, gws);
    FA_FN(fa_mask)(m, M0, M1, o, i0, nq, j0, nk, P);
    for (int64_t i = 0; i < nq; i++) {
        FA_T *p = P + i * FA_BK, L = lse[i];
        if (L == (FA_T)-INFINITY) { /* fully masked row: P = 0 */
            for (int64_t j = 0; j < FA_BK; j++)
                p[j] = 0;
            continue;
        }
        for (int64_t j = 0; j < nk; j++)
            p[j] = FA_EXP(p[j] - L);
        for (int64_t j = nk; j < FA_BK; j++)
            p[j] = 0;
    }
    if (!want_ds)
        return;
    const FA_T *dO = (const FA_T *)y->grad + (o * m->Tq + i0) * m->dv;
    FA_FN(fa_qkt)(nq, nk, m->dv, dO, m->dv, Vt, (FA_T)1, dS, gws); /* dP = dO V^T */
    for (int64_t i = 0; i < nq; i++) {
        FA_T *p = P + i * FA_BK, *ds = dS + i * FA_BK, Di = D[i];
        for (int64_t j = 0; j < nk; j++)
            ds[j] = p[j] * (ds[j] - Di);
        for (int64_t j = nk; j < FA_BK; j++)
            ds[j] = 0;
    }
}

/* D (nq) = rowsum(dO O) of rows [i0, +nq) of batch o, c ascending. */
FA_INLINE void FA_FN(fa_rowdot)(const fa_meta *m, const tg_tensor *y, int64_t o, int64_t i0,
                                int64_t nq, FA_T *D)
{
    const FA_T *dO = (const FA_T *)y->grad + (o * m->Tq + i0) * m->dv;
    const FA_T *O = (const FA_T *)y->data + (o * m->Tq + i0) * m->dv;
    for (int64_t i = 0; i < nq; i++) {
        FA_T s = 0;
        for (int64_t c = 0; c < m->dv; c++)
            s += dO[i * m->dv + c] * O[i * m->dv + c];
        D[i] = s;
    }
}

/* dK and/or dV of keys [kb BK, +nk) of one k (or v) matrix: sum over the batches of its group
 * (ascending), query blocks and rows ascending. do_k: dK (and dV too when do_v); !do_k: dV
 * only (v's batch map differs from k's). dM: the additive mask's gradient per batch, or NULL. */
TG_SIMD_CLONES static void FA_FN(fa_bwd_kv_item)(const fa_meta *m, const tg_tensor *y,
                                                 int grp_of, int64_t g, int64_t kb, bool do_k,
                                                 bool do_v, FA_T *dM, FA_T *w)
{
    const int64_t dk = m->dk, dv = m->dv, j0 = kb * FA_BK;
    const int64_t nk = m->Tk - j0 < FA_BK ? m->Tk - j0 : FA_BK;
    void *gws = (char *)w + fa_ws_per_thread(m, true);
    FA_T *Kt = w, *Vt = Kt + dk * FA_BK, *P = Vt + dv * FA_BK, *dS = P + FA_BQ * FA_BK,
         *D = dS + FA_BQ * FA_BK, *dKb = D + FA_BQ, *dVb = dKb + FA_BK * dk;
    const FA_T scale = (FA_T)m->scale;
    const bool need_ds = do_k || dM;
    for (int64_t e = 0; e < nk * dk; e++)
        dKb[e] = 0;
    for (int64_t e = 0; e < nk * dv; e++)
        dVb[e] = 0;
    int64_t nqb = (m->Tq + FA_BQ - 1) / FA_BQ, qb0 = m->causal ? j0 / FA_BQ : 0;
    for (int64_t t = m->start[grp_of][g]; t < m->start[grp_of][g + 1]; t++) {
        const int64_t o = m->list[grp_of][t];
        const FA_T *K = (const FA_T *)y->src[1]->data + m->off[1][o] + j0 * m->rs[1];
        const FA_T *V = (const FA_T *)y->src[2]->data + m->off[2][o] + j0 * m->rs[2];
        FA_FN(fa_load_t)(K, m->rs[1], nk, dk, Kt);
        if (need_ds)
            FA_FN(fa_load_t)(V, m->rs[2], nk, dv, Vt);
        for (int64_t qb = qb0; qb < nqb; qb++) {
            const int64_t i0 = qb * FA_BQ, nq = m->Tq - i0 < FA_BQ ? m->Tq - i0 : FA_BQ;
            if (need_ds)
                FA_FN(fa_rowdot)(m, y, o, i0, nq, D);
            FA_FN(fa_tile)(m, y, o, i0, nq, j0, nk, Kt, Vt, D, need_ds, P, dS, gws);
            const FA_T *Q = (const FA_T *)y->src[0]->data + m->off[0][o] + i0 * m->rs[0];
            const FA_T *dO = (const FA_T *)y->grad + (o * m->Tq + i0) * dv;
            if (dM) {
                FA_T *dm = dM + (o * m->Tq + i0) * m->Tk + j0;
                for (int64_t i = 0; i < nq; i++)
                    for (int64_t j = 0; j < nk; j++)
                        dm[i * m->Tk + j] = dS[i * FA_BK + j];
            }
            /* dV_j += sum_i P_ij dO_i: (nk, dv) += P^T (nk, nq) dO (nq, dv) */
            if (do_v)
                FA_FN(fa_mm)(nk, dv, nq, P, 1, FA_BK, dO, dv, dVb, dv, false, gws);
            /* dK_j += sum_i scale dS_ij q_i: (nk, dk) += (scale dS)^T Q */
            if (do_k) {
                for (int64_t e = 0; e < nq * FA_BK; e++)
                    dS[e] *= scale;
                FA_FN(fa_mm)(nk, dk, nq, dS, 1, FA_BK, Q, m->rs[0], dKb, dk, false, gws);
            }
        }
    }
    /* one matrix per group: its gradient rows [j0, +nk), contiguous */
    if (do_k) {
        FA_T *dK = (FA_T *)y->src[1]->grad + (g * m->Tk + j0) * dk;
        for (int64_t e = 0; e < nk * dk; e++)
            dK[e] += dKb[e];
    }
    if (do_v) {
        int64_t gv = m->idx[2][m->list[grp_of][m->start[grp_of][g]]];
        FA_T *dV = (FA_T *)y->src[2]->grad + (gv * m->Tk + j0) * dv;
        for (int64_t e = 0; e < nk * dv; e++)
            dV[e] += dVb[e];
    }
}

/* dQ of query rows [qb BQ, +nq) of q matrix g: sum over its batches, key blocks and keys
 * ascending. */
TG_SIMD_CLONES static void FA_FN(fa_bwd_q_item)(const fa_meta *m, const tg_tensor *y, int64_t g,
                                                int64_t qb, FA_T *w)
{
    const int64_t dk = m->dk, dv = m->dv, i0 = qb * FA_BQ;
    const int64_t nq = m->Tq - i0 < FA_BQ ? m->Tq - i0 : FA_BQ;
    void *gws = (char *)w + fa_ws_per_thread(m, true);
    FA_T *Kt = w, *Vt = Kt + dk * FA_BK, *P = Vt + dv * FA_BK, *dS = P + FA_BQ * FA_BK,
         *D = dS + FA_BQ * FA_BK, *dQb = D + FA_BQ;
    const FA_T scale = (FA_T)m->scale;
    for (int64_t e = 0; e < nq * dk; e++)
        dQb[e] = 0;
    int64_t nkb = (m->Tk + FA_BK - 1) / FA_BK;
    if (m->causal) {
        int64_t last = (i0 + nq - 1) / FA_BK + 1;
        nkb = last < nkb ? last : nkb;
    }
    for (int64_t t = m->start[0][g]; t < m->start[0][g + 1]; t++) {
        const int64_t o = m->list[0][t];
        FA_FN(fa_rowdot)(m, y, o, i0, nq, D);
        for (int64_t kb = 0; kb < nkb; kb++) {
            const int64_t j0 = kb * FA_BK, nk = m->Tk - j0 < FA_BK ? m->Tk - j0 : FA_BK;
            const FA_T *K = (const FA_T *)y->src[1]->data + m->off[1][o] + j0 * m->rs[1];
            const FA_T *V = (const FA_T *)y->src[2]->data + m->off[2][o] + j0 * m->rs[2];
            FA_FN(fa_load_t)(K, m->rs[1], nk, dk, Kt);
            FA_FN(fa_load_t)(V, m->rs[2], nk, dv, Vt);
            FA_FN(fa_tile)(m, y, o, i0, nq, j0, nk, Kt, Vt, D, true, P, dS, gws);
            /* dQ_i += sum_j scale dS_ij k_j: (nq, dk) += (scale dS) K */
            for (int64_t e = 0; e < nq * FA_BK; e++)
                dS[e] *= scale;
            FA_FN(fa_mm)(nq, dk, nk, dS, FA_BK, 1, K, m->rs[1], dQb, dk, false, gws);
        }
    }
    FA_T *dQ = (FA_T *)y->src[0]->grad + (g * m->Tq + i0) * dk;
    for (int64_t e = 0; e < nq * dk; e++)
        dQ[e] += dQb[e];
}

/* One-pass backward of batch o (fa_one_pass): per key block (ascending), per query block
 * (ascending) one tile of P and dS, then dV_j += P^T dO, dK_j += (scale dS)^T Q and
 * dQ_i += (scale dS) K_j, the same sums in the same order as the two-pass items. */
TG_SIMD_CLONES static void FA_FN(fa_bwd_one_item)(const fa_meta *m, const tg_tensor *y,
                                                  int64_t o, bool do_q, bool do_k, bool do_v,
                                                  FA_T *dM, FA_T *w)
{
    const int64_t dk = m->dk, dv = m->dv, Tq = m->Tq;
    void *gws = (char *)w + fa_ws_per_thread(m, true);
    FA_T *Kt = w, *Vt = Kt + dk * FA_BK, *P = Vt + dv * FA_BK, *dS = P + FA_BQ * FA_BK,
         *dKb = dS + FA_BQ * FA_BK + FA_BQ, *dVb = dKb + FA_BK * dk;
    FA_T *Dall = w + fa_bwd_base_elems(m), *dQacc = Dall + Tq;
    const FA_T scale = (FA_T)m->scale;
    const bool need_ds = do_k || do_q || dM;
    const int64_t nqb = (Tq + FA_BQ - 1) / FA_BQ, nkb = (m->Tk + FA_BK - 1) / FA_BK;
    const FA_T *Q0 = (const FA_T *)y->src[0]->data + m->off[0][o];
    const FA_T *K0 = (const FA_T *)y->src[1]->data + m->off[1][o];
    const FA_T *V0 = (const FA_T *)y->src[2]->data + m->off[2][o];
    if (need_ds)
        for (int64_t qb = 0; qb < nqb; qb++) {
            const int64_t i0 = qb * FA_BQ, nq = Tq - i0 < FA_BQ ? Tq - i0 : FA_BQ;
            FA_FN(fa_rowdot)(m, y, o, i0, nq, Dall + i0);
        }
    if (do_q)
        for (int64_t e = 0; e < Tq * dk; e++)
            dQacc[e] = 0;
    for (int64_t kb = 0; kb < nkb; kb++) {
        const int64_t j0 = kb * FA_BK, nk = m->Tk - j0 < FA_BK ? m->Tk - j0 : FA_BK;
        const FA_T *K = K0 + j0 * m->rs[1];
        FA_FN(fa_load_t)(K, m->rs[1], nk, dk, Kt);
        if (need_ds)
            FA_FN(fa_load_t)(V0 + j0 * m->rs[2], m->rs[2], nk, dv, Vt);
        for (int64_t e = 0; e < nk * dk; e++)
            dKb[e] = 0;
        for (int64_t e = 0; e < nk * dv; e++)
            dVb[e] = 0;
        for (int64_t qb = m->causal ? j0 / FA_BQ : 0; qb < nqb; qb++) {
            const int64_t i0 = qb * FA_BQ, nq = Tq - i0 < FA_BQ ? Tq - i0 : FA_BQ;
            FA_FN(fa_tile)(m, y, o, i0, nq, j0, nk, Kt, Vt, Dall + i0, need_ds, P, dS, gws);
            const FA_T *dO = (const FA_T *)y->grad + (o * Tq + i0) * dv;
            if (dM) {
                FA_T *dm = dM + (o * Tq + i0) * m->Tk + j0;
                for (int64_t i = 0; i < nq; i++)
                    for (int64_t j = 0; j < nk; j++)
                        dm[i * m->Tk + j] = dS[i * FA_BK + j];
            }
            if (do_v)
                FA_FN(fa_mm)(nk, dv, nq, P, 1, FA_BK, dO, dv, dVb, dv, false, gws);
            if (do_k || do_q)
                for (int64_t e = 0; e < nq * FA_BK; e++)
                    dS[e] *= scale;
            if (do_k)
                FA_FN(fa_mm)(nk, dk, nq, dS, 1, FA_BK, Q0 + i0 * m->rs[0], m->rs[0], dKb, dk,
                             false, gws);
            if (do_q)
                FA_FN(fa_mm)(nq, dk, nk, dS, FA_BK, 1, K, m->rs[1], dQacc + i0 * dk, dk, false,
                             gws);
        }
        if (do_k) {
            FA_T *dK = (FA_T *)y->src[1]->grad + (m->idx[1][o] * m->Tk + j0) * dk;
            for (int64_t e = 0; e < nk * dk; e++)
                dK[e] += dKb[e];
        }
        if (do_v) {
            FA_T *dV = (FA_T *)y->src[2]->grad + (m->idx[2][o] * m->Tk + j0) * dv;
            for (int64_t e = 0; e < nk * dv; e++)
                dV[e] += dVb[e];
        }
    }
    if (do_q) {
        FA_T *dQ = (FA_T *)y->src[0]->grad + m->idx[0][o] * Tq * dk;
        for (int64_t e = 0; e < Tq * dk; e++)
            dQ[e] += dQacc[e];
    }
}

static void FA_FN(fa_forward)(tg_tensor *y)
{
    const fa_meta *m = y->aux;
    int64_t nqb = (m->Tq + FA_BQ - 1) / FA_BQ, items = m->nb * nqb;
    size_t per = (fa_ws_per_thread(m, false) + fa_gemm_ws(m, y->dtype)) / sizeof(FA_T);
    FA_T *ws = y->ws;
    int nt = tg__threads(y->ctx);
    /* Item (o, qb) owns out rows and lse of query block qb of batch o: race-free, each
     * computed by one thread in a fixed order whatever the thread count. */
    TG_OMP_FOR(nt, fa_work(m) > TG_PAR_MIN)
    for (int64_t it = 0; it < items; it++)
        FA_FN(fa_fwd_item)(m, y, it / nqb, it % nqb, ws + (size_t)TG_THREAD_NUM() * per);
}

static void FA_FN(fa_backward)(tg_tensor *y)
{
    const fa_meta *m = y->aux;
    const tg_tensor *q = y->src[0], *k = y->src[1], *v = y->src[2];
    const tg_tensor *mk = m->src_mask[0] >= 0 ? y->src[m->src_mask[0]] : NULL;
    FA_T *dM = NULL;
    FA_T *ws = y->ws;
    if (mk && m->kind == TG_MASK_ADDITIVE && mk->grad) {
        dM = ws; /* (nb, T_q, T_k): dS per batch, reduced into the mask's shape below */
        memset(dM, 0, fa_dmask_bytes(m));
        ws += fa_dmask_bytes(m) / sizeof(FA_T);
    }
    size_t per = (fa_ws_per_thread(m, true) + fa_gemm_ws(m, y->dtype)) / sizeof(FA_T);
    int nt = tg__threads(y->ctx);
    bool par = fa_work(m) > TG_PAR_MIN;
    int64_t nkb = (m->Tk + FA_BK - 1) / FA_BK, nqb = (m->Tq + FA_BQ - 1) / FA_BQ;
    bool do_k = k->grad != NULL, do_v = v->grad != NULL;
    if (fa_one_pass(m)) {
        /* Item o owns every gradient row of batch o's matrices (a bijection): race-free. */
        TG_OMP_FOR(nt, par)
        for (int64_t o = 0; o < m->nb; o++)
            FA_FN(fa_bwd_one_item)(m, y, o, q->grad != NULL, do_k, do_v, dM,
                                   ws + (size_t)TG_THREAD_NUM() * per);
        if (dM)
            tg__reduce_to(y->ctx, y->dtype, dM, m->rank, m->sshape, mk, mk->grad);
        return;
    }
    /* Pass 1: item (matrix g of k, key block kb) owns rows kb of dK[g] (and of dV when v's
     * batch map is k's); every batch o of g is summed in ascending order by that one item. */
    if (do_k || dM || (do_v && m->kv_same)) {
        int64_t items = m->n[1] * nkb;
        bool with_v = do_v && m->kv_same;
        TG_OMP_FOR(nt, par)
        for (int64_t it = 0; it < items; it++)
            FA_FN(fa_bwd_kv_item)(m, y, 1, it / nkb, it % nkb, do_k, with_v, dM,
                                  ws + (size_t)TG_THREAD_NUM() * per);
    }
    /* Pass 1b: v grouped differently from k (broadcast differently): dV by v's own groups. */
    if (do_v && !m->kv_same) {
        int64_t items = m->n[2] * nkb;
        TG_OMP_FOR(nt, par)
        for (int64_t it = 0; it < items; it++)
            FA_FN(fa_bwd_kv_item)(m, y, 2, it / nkb, it % nkb, false, true, NULL,
                                  ws + (size_t)TG_THREAD_NUM() * per);
    }
    /* Pass 2: item (matrix g of q, query block qb) owns rows qb of dQ[g]. */
    if (q->grad) {
        int64_t items = m->n[0] * nqb;
        TG_OMP_FOR(nt, par)
        for (int64_t it = 0; it < items; it++)
            FA_FN(fa_bwd_q_item)(m, y, it / nqb, it % nqb, ws + (size_t)TG_THREAD_NUM() * per);
    }
    if (dM)
        tg__reduce_to(y->ctx, y->dtype, dM, m->rank, m->sshape, mk, mk->grad);
}

#undef FA_INLINE
#undef FA_FN
#undef FA_CAT
#undef FA_CAT_
