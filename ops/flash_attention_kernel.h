/*
 * flash_attention_kernel.h - the kernels of ops/flash_attention.c for one float type.
 * Included twice by flash_attention.c with FA_T (float / double), FA_SUF (f32 / f64), FA_EXP
 * and FA_LOG defined; see that file for the math, the layout (fa_meta) and the threading.
 *
 * Every sum below runs in a fixed order (dot products along the head dimension in FA_W fixed
 * lanes added in a fixed tree (fa_dot) or, in the tiled path's block products, c ascending;
 * over keys j ascending for row sums, over batches, query blocks and rows ascending for dK and
 * dV, over key blocks and keys ascending for dQ); other loops vectorize only across independent
 * outputs (keys j of a score row, columns c of an output row), so each result is the same for
 * every thread count and every SIMD clone (-ffp-contract=off; the block products are the
 * GEMM's FMA chains, the same on its AVX-512 and AVX2 kernels).
 */
#define FA_CAT_(a, b) a##_##b
#define FA_CAT(a, b) FA_CAT_(a, b)
#define FA_FN(name) FA_CAT(name, FA_SUF)

#define FA_INLINE static inline __attribute__((always_inline))
/* Block products stay out of line: inlined into every cloned caller they made this file take
 * about a minute to compile; a call per block costs nothing next to the block's work. */
#if defined(__clang__)
/* clang never inlines a target_clones function (it is called through the resolver) and
 * refuses noinline on one */
#define FA_OUTLINE TG_SIMD_CLONES static
#else
#define FA_OUTLINE TG_SIMD_CLONES static __attribute__((noinline))
#endif

/* ---- vector helpers (the small-T path and the backward's D = rowsum(dO O)) ---------------- */

/* A 32-byte vector of FA_VL = FA_W / 2 elements (GCC/Clang vector extension, as ops/gemm.c's
 * portable kernel: element-wise IEEE operations, so every clone computes the same bits; one
 * ymm on the v4 and v3 clones, which on Zen 4 is as fast as a zmm). The FA_W lanes of a dot
 * product are two such vectors: lanes [0, FA_VL) and [FA_VL, FA_W). Loads and stores go
 * through memcpy (unaligned). */
#define FA_VL (FA_W / 2)
typedef FA_T FA_FN(fa_vec) __attribute__((vector_size(32)));
#define FA_V FA_FN(fa_vec)

FA_INLINE FA_V FA_FN(fa_ld)(const FA_T *p)
{
    FA_V v;
    __builtin_memcpy(&v, p, sizeof v);
    return v;
}

FA_INLINE void FA_FN(fa_st)(FA_T *p, FA_V v) { __builtin_memcpy(p, &v, sizeof v); }

/* Elements [lo, lo + FA_VL) of p with those at or past r replaced by 0. */
FA_INLINE FA_V FA_FN(fa_ld_part)(const FA_T *p, int lo, int64_t r)
{
    FA_T t[FA_VL];
    for (int u = 0; u < FA_VL; u++)
        t[u] = lo + u < r ? p[lo + u] : 0;
    return FA_FN(fa_ld)(t);
}

/* Sum of the FA_W lanes (a: lanes 0.., b: lanes FA_VL..) in a fixed tree: lanes u and u + h
 * added for h = FA_W / 2, ..., 1. */
FA_INLINE FA_T FA_FN(fa_hsum)(FA_V a, FA_V b)
{
    FA_V v = a + b;
    FA_T l[FA_VL];
    __builtin_memcpy(l, &v, sizeof v);
#if FA_VL == 8
    for (int u = 0; u < 4; u++)
        l[u] = l[u] + l[u + 4];
#endif
    for (int u = 0; u < 2; u++)
        l[u] = l[u] + l[u + 2];
    return l[0] + l[1];
}

/* a . b over n elements: term c into lane c mod FA_W (ascending c per lane; the last partial
 * chunk's missing lanes add 0), then fa_hsum. */
FA_INLINE FA_T FA_FN(fa_dot)(const FA_T *a, const FA_T *b, int64_t n)
{
    FA_V l = {0}, h = {0};
    int64_t c = 0;
    for (; c + FA_W <= n; c += FA_W) {
        l += FA_FN(fa_ld)(a + c) * FA_FN(fa_ld)(b + c);
        h += FA_FN(fa_ld)(a + c + FA_VL) * FA_FN(fa_ld)(b + c + FA_VL);
    }
    if (c < n) {
        l += FA_FN(fa_ld_part)(a + c, 0, n - c) * FA_FN(fa_ld_part)(b + c, 0, n - c);
        h += FA_FN(fa_ld_part)(a + c, FA_VL, n - c) * FA_FN(fa_ld_part)(b + c, FA_VL, n - c);
    }
    return FA_FN(fa_hsum)(l, h);
}

/* s[j] = a . B_j for the nk rows B_j = B + j bs; four rows at a time share the loads of a
 * (each s[j] is exactly fa_dot(a, B_j, n)). */
FA_INLINE void FA_FN(fa_dots)(const FA_T *a, const FA_T *B, int64_t bs, int64_t nk, int64_t n,
                              FA_T *s)
{
    int64_t j = 0;
    for (; j + 4 <= nk; j += 4) {
        const FA_T *b0 = B + j * bs, *b1 = b0 + bs, *b2 = b1 + bs, *b3 = b2 + bs;
        FA_V l0 = {0}, l1 = {0}, l2 = {0}, l3 = {0}, h0 = {0}, h1 = {0}, h2 = {0}, h3 = {0};
        int64_t c = 0;
        for (; c + FA_W <= n; c += FA_W) {
            FA_V x = FA_FN(fa_ld)(a + c), y = FA_FN(fa_ld)(a + c + FA_VL);
            l0 += x * FA_FN(fa_ld)(b0 + c);
            h0 += y * FA_FN(fa_ld)(b0 + c + FA_VL);
            l1 += x * FA_FN(fa_ld)(b1 + c);
            h1 += y * FA_FN(fa_ld)(b1 + c + FA_VL);
            l2 += x * FA_FN(fa_ld)(b2 + c);
            h2 += y * FA_FN(fa_ld)(b2 + c + FA_VL);
            l3 += x * FA_FN(fa_ld)(b3 + c);
            h3 += y * FA_FN(fa_ld)(b3 + c + FA_VL);
        }
        if (c < n) {
            int64_t r = n - c;
            FA_V x = FA_FN(fa_ld_part)(a + c, 0, r), y = FA_FN(fa_ld_part)(a + c, FA_VL, r);
            l0 += x * FA_FN(fa_ld_part)(b0 + c, 0, r);
            h0 += y * FA_FN(fa_ld_part)(b0 + c, FA_VL, r);
            l1 += x * FA_FN(fa_ld_part)(b1 + c, 0, r);
            h1 += y * FA_FN(fa_ld_part)(b1 + c, FA_VL, r);
            l2 += x * FA_FN(fa_ld_part)(b2 + c, 0, r);
            h2 += y * FA_FN(fa_ld_part)(b2 + c, FA_VL, r);
            l3 += x * FA_FN(fa_ld_part)(b3 + c, 0, r);
            h3 += y * FA_FN(fa_ld_part)(b3 + c, FA_VL, r);
        }
        s[j] = FA_FN(fa_hsum)(l0, h0);
        s[j + 1] = FA_FN(fa_hsum)(l1, h1);
        s[j + 2] = FA_FN(fa_hsum)(l2, h2);
        s[j + 3] = FA_FN(fa_hsum)(l3, h3);
    }
    for (; j < nk; j++)
        s[j] = FA_FN(fa_dot)(a, B + j * bs, n);
}

/* y (n) = (acc ? y + : ) (sum_j w_j B_j) (* mul when mul != NULL): per element the sum over
 * j < nk ascending starts at 0, is scaled, then added to y once. B_j = B + j bs. */
FA_INLINE void FA_FN(fa_wsum)(const FA_T *w, const FA_T *B, int64_t bs, int64_t nk, int64_t n,
                              const FA_T *mul, bool acc, FA_T *y)
{
    int64_t c = 0;
    for (; c + 2 * FA_VL <= n; c += 2 * FA_VL) {
        FA_V a = {0}, b = {0};
        for (int64_t j = 0; j < nk; j++) {
            a += w[j] * FA_FN(fa_ld)(B + j * bs + c);
            b += w[j] * FA_FN(fa_ld)(B + j * bs + c + FA_VL);
        }
        if (mul) {
            a = a * *mul;
            b = b * *mul;
        }
        if (acc) {
            a = FA_FN(fa_ld)(y + c) + a;
            b = FA_FN(fa_ld)(y + c + FA_VL) + b;
        }
        FA_FN(fa_st)(y + c, a);
        FA_FN(fa_st)(y + c + FA_VL, b);
    }
    for (; c < n; c++) {
        FA_T a = 0;
        for (int64_t j = 0; j < nk; j++)
            a = a + w[j] * B[j * bs + c];
        if (mul)
            a = a * *mul;
        y[c] = acc ? y[c] + a : a;
    }
}

/* y (n) += w x, element-wise. */
FA_INLINE void FA_FN(fa_axpy)(FA_T w, const FA_T *x, int64_t n, FA_T *y)
{
    int64_t c = 0;
    for (; c + FA_VL <= n; c += FA_VL)
        FA_FN(fa_st)(y + c, FA_FN(fa_ld)(y + c) + w * FA_FN(fa_ld)(x + c));
    for (; c < n; c++)
        y[c] = y[c] + w * x[c];
}

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
FA_OUTLINE void FA_FN(fa_mm_direct)(int64_t M, int64_t N, int64_t K, const FA_T *A, int64_t ars,
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
FA_INLINE void FA_FN(fa_mm)(int prec, int64_t M, int64_t N, int64_t K, const FA_T *A,
                            int64_t ars, int64_t aks, const FA_T *B, int64_t ldb, FA_T *C,
                            int64_t ldc, bool zero, void *gws)
{
#if FA_BF16
    if (prec == TG_PRECISION_BF16) { /* bf16 operands (every block: the tiny ones too) */
        bool ta = aks != 1;
        tg__gemm_isa_bf16(TG__ISA_BEST, 1, ta, false, M, N, K, A, ta ? aks : ars, B, ldb, C, ldc,
                          !zero, gws, NULL);
        return;
    }
#else
    (void)prec;
#endif
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
FA_INLINE void FA_FN(fa_qkt)(int prec, int64_t nq, int64_t nk, int64_t d, const FA_T *Q,
                             int64_t qs, const FA_T *Kt, FA_T scale, FA_T *S, void *gws)
{
    FA_FN(fa_mm)(prec, nq, nk, d, Q, qs, 1, Kt, FA_BK, S, FA_BK, true, gws);
    if (scale != 1)
        for (int64_t i = 0; i < nq; i++)
            for (int64_t j = 0; j < nk; j++)
                S[i * FA_BK + j] *= scale;
}

/* The masks of scores S (nq, FA_BK) for query rows i0.., keys j0.. (nk valid) of batch o,
 * in the unfused graph's order: additive mask added, then every block (mask, block mask,
 * causal) sets -inf. */
FA_OUTLINE void FA_FN(fa_mask)(const fa_meta *m, const FA_T *M0, const FA_T *M1, int64_t o,
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
TG_SIMD_CLONES static void FA_FN(fa_fwd_item)(const fa_meta *m, const tg__call *cl, int64_t o,
                                              int64_t qb, FA_T *w)
{
    const int64_t dk = m->dk, dv = m->dv, i0 = qb * FA_BQ;
    const int64_t nq = m->Tq - i0 < FA_BQ ? m->Tq - i0 : FA_BQ;
    const FA_T *Q = (const FA_T *)cl->in[0] + m->off[0][o] + i0 * m->rs[0];
    const FA_T *K = (const FA_T *)cl->in[1] + m->off[1][o];
    const FA_T *V = (const FA_T *)cl->in[2] + m->off[2][o];
    const FA_T *M0 = m->src_mask[0] >= 0 ? cl->in[m->src_mask[0]] : NULL;
    const FA_T *M1 = m->src_mask[1] >= 0 ? cl->in[m->src_mask[1]] : NULL;
    void *gws = (char *)w + fa_ws_per_thread(m, false, cl->precision);
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
        FA_FN(fa_qkt)(cl->precision, nq, nk, dk, Q, m->rs[0], Kt, scale, S, gws);
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
        FA_FN(fa_mm)(cl->precision, nq, dv, nk, S, FA_BK, 1, V + j0 * m->rs[2], m->rs[2], acc, dv, false, gws);
    }
    FA_T *out = (FA_T *)cl->out + (o * m->Tq + i0) * dv;
    FA_T *lse = (FA_T *)cl->saved + o * m->Tq + i0;
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
FA_INLINE void FA_FN(fa_tile)(const fa_meta *m, const tg__call *cl, int64_t o, int64_t i0,
                              int64_t nq, int64_t j0, int64_t nk, const FA_T *Kt,
                              const FA_T *Vt, const FA_T *D, bool want_ds, FA_T *P, FA_T *dS,
                              void *gws)
{
    const FA_T *Q = (const FA_T *)cl->in[0] + m->off[0][o] + i0 * m->rs[0];
    const FA_T *M0 = m->src_mask[0] >= 0 ? cl->in[m->src_mask[0]] : NULL;
    const FA_T *M1 = m->src_mask[1] >= 0 ? cl->in[m->src_mask[1]] : NULL;
    const FA_T *lse = (const FA_T *)cl->saved + o * m->Tq + i0;
    FA_FN(fa_qkt)(cl->precision, nq, nk, m->dk, Q, m->rs[0], Kt, (FA_T)m->scale, P, gws);
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
    const FA_T *dO = (const FA_T *)cl->dy + (o * m->Tq + i0) * m->dv;
    FA_FN(fa_qkt)(cl->precision, nq, nk, m->dv, dO, m->dv, Vt, (FA_T)1, dS, gws); /* dP = dO V^T */
    for (int64_t i = 0; i < nq; i++) {
        FA_T *p = P + i * FA_BK, *ds = dS + i * FA_BK, Di = D[i];
        for (int64_t j = 0; j < nk; j++)
            ds[j] = p[j] * (ds[j] - Di);
        for (int64_t j = nk; j < FA_BK; j++)
            ds[j] = 0;
    }
}

/* D (nq) = rowsum(dO O) of rows [i0, +nq) of batch o: fa_dot (fixed lanes, vectorized). */
FA_INLINE void FA_FN(fa_rowdot)(const fa_meta *m, const tg__call *cl, int64_t o, int64_t i0,
                                int64_t nq, FA_T *D)
{
    const FA_T *dO = (const FA_T *)cl->dy + (o * m->Tq + i0) * m->dv;
    const FA_T *O = (const FA_T *)cl->out + (o * m->Tq + i0) * m->dv;
    for (int64_t i = 0; i < nq; i++)
        D[i] = FA_FN(fa_dot)(dO + i * m->dv, O + i * m->dv, m->dv);
}

/* dK and/or dV of keys [kb BK, +nk) of one k (or v) matrix: sum over the batches of its group
 * (ascending), query blocks and rows ascending. do_k: dK (and dV too when do_v); !do_k: dV
 * only (v's batch map differs from k's). dM: the additive mask's gradient per batch, or NULL. */
TG_SIMD_CLONES static void FA_FN(fa_bwd_kv_item)(const fa_meta *m, const tg__call *cl,
                                                 int grp_of, int64_t g, int64_t kb, bool do_k,
                                                 bool do_v, FA_T *dM, FA_T *w)
{
    const int64_t dk = m->dk, dv = m->dv, j0 = kb * FA_BK;
    const int64_t nk = m->Tk - j0 < FA_BK ? m->Tk - j0 : FA_BK;
    void *gws = (char *)w + fa_ws_per_thread(m, true, cl->precision);
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
        const FA_T *K = (const FA_T *)cl->in[1] + m->off[1][o] + j0 * m->rs[1];
        const FA_T *V = (const FA_T *)cl->in[2] + m->off[2][o] + j0 * m->rs[2];
        FA_FN(fa_load_t)(K, m->rs[1], nk, dk, Kt);
        if (need_ds)
            FA_FN(fa_load_t)(V, m->rs[2], nk, dv, Vt);
        for (int64_t qb = qb0; qb < nqb; qb++) {
            const int64_t i0 = qb * FA_BQ, nq = m->Tq - i0 < FA_BQ ? m->Tq - i0 : FA_BQ;
            if (need_ds)
                FA_FN(fa_rowdot)(m, cl, o, i0, nq, D);
            FA_FN(fa_tile)(m, cl, o, i0, nq, j0, nk, Kt, Vt, D, need_ds, P, dS, gws);
            const FA_T *Q = (const FA_T *)cl->in[0] + m->off[0][o] + i0 * m->rs[0];
            const FA_T *dO = (const FA_T *)cl->dy + (o * m->Tq + i0) * dv;
            if (dM) {
                FA_T *dm = dM + (o * m->Tq + i0) * m->Tk + j0;
                for (int64_t i = 0; i < nq; i++)
                    for (int64_t j = 0; j < nk; j++)
                        dm[i * m->Tk + j] = dS[i * FA_BK + j];
            }
            /* dV_j += sum_i P_ij dO_i: (nk, dv) += P^T (nk, nq) dO (nq, dv) */
            if (do_v)
                FA_FN(fa_mm)(cl->precision, nk, dv, nq, P, 1, FA_BK, dO, dv, dVb, dv, false, gws);
            /* dK_j += sum_i scale dS_ij q_i: (nk, dk) += (scale dS)^T Q */
            if (do_k) {
                for (int64_t e = 0; e < nq * FA_BK; e++)
                    dS[e] *= scale;
                FA_FN(fa_mm)(cl->precision, nk, dk, nq, dS, 1, FA_BK, Q, m->rs[0], dKb, dk, false, gws);
            }
        }
    }
    /* one matrix per group: its gradient rows [j0, +nk), contiguous */
    if (do_k) {
        FA_T *dK = (FA_T *)cl->dx[1] + (g * m->Tk + j0) * dk;
        for (int64_t e = 0; e < nk * dk; e++)
            dK[e] += dKb[e];
    }
    if (do_v) {
        int64_t gv = m->idx[2][m->list[grp_of][m->start[grp_of][g]]];
        FA_T *dV = (FA_T *)cl->dx[2] + (gv * m->Tk + j0) * dv;
        for (int64_t e = 0; e < nk * dv; e++)
            dV[e] += dVb[e];
    }
}

/* dQ of query rows [qb BQ, +nq) of q matrix g: sum over its batches, key blocks and keys
 * ascending. */
TG_SIMD_CLONES static void FA_FN(fa_bwd_q_item)(const fa_meta *m, const tg__call *cl, int64_t g,
                                                int64_t qb, FA_T *w)
{
    const int64_t dk = m->dk, dv = m->dv, i0 = qb * FA_BQ;
    const int64_t nq = m->Tq - i0 < FA_BQ ? m->Tq - i0 : FA_BQ;
    void *gws = (char *)w + fa_ws_per_thread(m, true, cl->precision);
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
        FA_FN(fa_rowdot)(m, cl, o, i0, nq, D);
        for (int64_t kb = 0; kb < nkb; kb++) {
            const int64_t j0 = kb * FA_BK, nk = m->Tk - j0 < FA_BK ? m->Tk - j0 : FA_BK;
            const FA_T *K = (const FA_T *)cl->in[1] + m->off[1][o] + j0 * m->rs[1];
            const FA_T *V = (const FA_T *)cl->in[2] + m->off[2][o] + j0 * m->rs[2];
            FA_FN(fa_load_t)(K, m->rs[1], nk, dk, Kt);
            FA_FN(fa_load_t)(V, m->rs[2], nk, dv, Vt);
            FA_FN(fa_tile)(m, cl, o, i0, nq, j0, nk, Kt, Vt, D, true, P, dS, gws);
            /* dQ_i += sum_j scale dS_ij k_j: (nq, dk) += (scale dS) K */
            for (int64_t e = 0; e < nq * FA_BK; e++)
                dS[e] *= scale;
            FA_FN(fa_mm)(cl->precision, nq, dk, nk, dS, FA_BK, 1, K, m->rs[1], dQb, dk, false, gws);
        }
    }
    FA_T *dQ = (FA_T *)cl->dx[0] + (g * m->Tq + i0) * dk;
    for (int64_t e = 0; e < nq * dk; e++)
        dQ[e] += dQb[e];
}

/* One-pass backward of batch o (fa_one_pass): per key block (ascending), per query block
 * (ascending) one tile of P and dS, then dV_j += P^T dO, dK_j += (scale dS)^T Q and
 * dQ_i += (scale dS) K_j, the same sums in the same order as the two-pass items. */
TG_SIMD_CLONES static void FA_FN(fa_bwd_one_item)(const fa_meta *m, const tg__call *cl,
                                                  int64_t o, bool do_q, bool do_k, bool do_v,
                                                  FA_T *dM, FA_T *w)
{
    const int64_t dk = m->dk, dv = m->dv, Tq = m->Tq;
    void *gws = (char *)w + fa_ws_per_thread(m, true, cl->precision);
    FA_T *Kt = w, *Vt = Kt + dk * FA_BK, *P = Vt + dv * FA_BK, *dS = P + FA_BQ * FA_BK,
         *dKb = dS + FA_BQ * FA_BK + FA_BQ, *dVb = dKb + FA_BK * dk;
    FA_T *Dall = w + fa_bwd_base_elems(m), *dQacc = Dall + Tq;
    const FA_T scale = (FA_T)m->scale;
    const bool need_ds = do_k || do_q || dM;
    const int64_t nqb = (Tq + FA_BQ - 1) / FA_BQ, nkb = (m->Tk + FA_BK - 1) / FA_BK;
    const FA_T *Q0 = (const FA_T *)cl->in[0] + m->off[0][o];
    const FA_T *K0 = (const FA_T *)cl->in[1] + m->off[1][o];
    const FA_T *V0 = (const FA_T *)cl->in[2] + m->off[2][o];
    if (need_ds)
        for (int64_t qb = 0; qb < nqb; qb++) {
            const int64_t i0 = qb * FA_BQ, nq = Tq - i0 < FA_BQ ? Tq - i0 : FA_BQ;
            FA_FN(fa_rowdot)(m, cl, o, i0, nq, Dall + i0);
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
            FA_FN(fa_tile)(m, cl, o, i0, nq, j0, nk, Kt, Vt, Dall + i0, need_ds, P, dS, gws);
            const FA_T *dO = (const FA_T *)cl->dy + (o * Tq + i0) * dv;
            if (dM) {
                FA_T *dm = dM + (o * Tq + i0) * m->Tk + j0;
                for (int64_t i = 0; i < nq; i++)
                    for (int64_t j = 0; j < nk; j++)
                        dm[i * m->Tk + j] = dS[i * FA_BK + j];
            }
            if (do_v)
                FA_FN(fa_mm)(cl->precision, nk, dv, nq, P, 1, FA_BK, dO, dv, dVb, dv, false, gws);
            if (do_k || do_q)
                for (int64_t e = 0; e < nq * FA_BK; e++)
                    dS[e] *= scale;
            if (do_k)
                FA_FN(fa_mm)(cl->precision, nk, dk, nq, dS, 1, FA_BK, Q0 + i0 * m->rs[0], m->rs[0], dKb, dk,
                             false, gws);
            if (do_q)
                FA_FN(fa_mm)(cl->precision, nq, dk, nk, dS, FA_BK, 1, K, m->rs[1], dQacc + i0 * dk, dk, false,
                             gws);
        }
        if (do_k) {
            FA_T *dK = (FA_T *)cl->dx[1] + (m->idx[1][o] * m->Tk + j0) * dk;
            for (int64_t e = 0; e < nk * dk; e++)
                dK[e] += dKb[e];
        }
        if (do_v) {
            FA_T *dV = (FA_T *)cl->dx[2] + (m->idx[2][o] * m->Tk + j0) * dv;
            for (int64_t e = 0; e < nk * dv; e++)
                dV[e] += dVb[e];
        }
    }
    if (do_q) {
        FA_T *dQ = (FA_T *)cl->dx[0] + m->idx[0][o] * Tq * dk;
        for (int64_t e = 0; e < Tq * dk; e++)
            dQ[e] += dQacc[e];
    }
}

/* ---- small-T path (T_k <= FA_BK: every key in one block) ----------------------------------
 * Short sequences (SDPA on (64, 5, 64), the encoder at T 5) spend nothing on tiles: per query
 * row the scores are dot products along d in FA_W fixed lanes (term c into lane c mod FA_W,
 * the lanes then added in a fixed halving tree), and the weighted sums run over keys j
 * ascending with the columns c vectorized. Items are whole batches, many per region. The path
 * is chosen by the shapes only (fa_small), so results are the same bits for any thread count;
 * they differ from the tiled path's in the order of the dot products' terms. */

/* s[j] = exp(s[j] - sub) for j < nk, in whole blocks of 8 (s has room for FA_BK, a multiple
 * of 8): one vector operation per block, no scalar tail (entries nk.. up to the block's end
 * become exp(0) = 1 and are not used). */
FA_INLINE void FA_FN(fa_small_exp)(FA_T *s, int64_t nk, FA_T sub)
{
    for (int64_t j = nk; j < (nk + 7) / 8 * 8; j++)
        s[j] = sub;
    for (int64_t j = 0; j < nk; j += 8)
        for (int u = 0; u < 8; u++)
            s[j + u] = FA_EXP(s[j + u] - sub);
}

/* Keys of query row i that can be unblocked: all T_k, or j <= i under the causal mask (the
 * later keys have p = 0 and add nothing). */
FA_INLINE int64_t FA_FN(fa_small_nk)(const fa_meta *m, int64_t i)
{
    return m->causal && i + 1 < m->Tk ? i + 1 : m->Tk;
}

/* Scores of row i of batch o (nk keys, row j of K at K + j ks): s_j = scale (q_i . k_j), then
 * the masks. */
FA_INLINE void FA_FN(fa_small_scores)(const fa_meta *m, const FA_T *M0, const FA_T *M1,
                                      int64_t o, int64_t i, const FA_T *q, const FA_T *K,
                                      int64_t ks, int64_t nk, FA_T *s)
{
    const FA_T scale = (FA_T)m->scale;
    FA_FN(fa_dots)(q, K, ks, nk, m->dk, s);
    if (scale != 1)
        for (int64_t j = 0; j < nk; j++)
            s[j] *= scale;
    FA_FN(fa_mask)(m, M0, M1, o, i, 1, 0, nk, s);
}

/* bf16 products (TG_PRECISION_BF16, f32 only): the operands of every product are rounded to
 * bf16 (tg__bf16_round) before the same f32 arithmetic, so each product is exact and only the
 * sums round, as in the tiled path's bf16 block products. fa_small_rnd copies n rows of w
 * elements (row r at x + r xs) rounded into dst (rows of w). */
FA_INLINE void FA_FN(fa_small_rnd)(FA_T *dst, const FA_T *x, int64_t xs, int64_t n, int64_t w)
{
#if FA_BF16
    for (int64_t r = 0; r < n; r++)
        for (int64_t c = 0; c < w; c++)
            dst[r * w + c] = tg__bf16_round(x[r * xs + c]);
#else
    (void)dst, (void)x, (void)xs, (void)n, (void)w;
#endif
}

FA_INLINE void FA_FN(fa_small_rnd_in)(FA_T *v, int64_t n)
{
#if FA_BF16
    for (int64_t j = 0; j < n; j++)
        v[j] = tg__bf16_round(v[j]);
#else
    (void)v, (void)n;
#endif
}

/* Forward of batches [o0, o1): out rows and lse. Rows go in groups of FA_SR through three
 * phases (scores, softmax, weighted sums), so the short dependency chains of different rows
 * overlap. With bf16 products: K and V of the batch and each group's q rows are rounded into
 * w (FA_BK (d_k + d_v) + FA_SR d_k elements), the weights after the softmax's sum. */
TG_SIMD_CLONES static void FA_FN(fa_small_fwd)(const fa_meta *m, const tg__call *cl, int64_t o0,
                                               int64_t o1, FA_T *w)
{
    const int64_t dv = m->dv, Tq = m->Tq, Tk = m->Tk, dk = m->dk;
    const bool bf = FA_BF16 && cl->precision == TG_PRECISION_BF16;
    const FA_T *M0 = m->src_mask[0] >= 0 ? cl->in[m->src_mask[0]] : NULL;
    const FA_T *M1 = m->src_mask[1] >= 0 ? cl->in[m->src_mask[1]] : NULL;
    FA_T S[FA_SR][FA_BK], inv[FA_SR];
    int64_t nk[FA_SR];
    for (int64_t o = o0; o < o1; o++) {
        const FA_T *Q = (const FA_T *)cl->in[0] + m->off[0][o];
        const FA_T *K = (const FA_T *)cl->in[1] + m->off[1][o];
        const FA_T *V = (const FA_T *)cl->in[2] + m->off[2][o];
        int64_t ks = m->rs[1], vs = m->rs[2];
        FA_T *out = (FA_T *)cl->out + o * Tq * dv;
        FA_T *lse = (FA_T *)cl->saved + o * Tq;
        if (bf) {
            FA_FN(fa_small_rnd)(w, K, ks, Tk, dk);
            FA_FN(fa_small_rnd)(w + Tk * dk, V, vs, Tk, dv);
            K = w, V = w + Tk * dk, ks = dk, vs = dv;
        }
        for (int64_t i0 = 0; i0 < Tq; i0 += FA_SR) {
            const int nr = Tq - i0 < FA_SR ? (int)(Tq - i0) : FA_SR;
            const FA_T *Qg = Q + i0 * m->rs[0];
            int64_t qs = m->rs[0];
            if (bf) {
                FA_T *qr = w + Tk * (dk + dv);
                FA_FN(fa_small_rnd)(qr, Qg, qs, nr, dk);
                Qg = qr, qs = dk;
            }
            for (int r = 0; r < nr; r++) {
                nk[r] = FA_FN(fa_small_nk)(m, i0 + r);
                FA_FN(fa_small_scores)(m, M0, M1, o, i0 + r, Qg + r * qs, K, ks, nk[r], S[r]);
            }
            for (int r = 0; r < nr; r++) {
                FA_T *s = S[r], mx = (FA_T)-INFINITY;
                bool nan = false;
                for (int64_t j = 0; j < nk[r]; j++) {
                    nan |= s[j] != s[j];
                    mx = s[j] > mx ? s[j] : mx;
                }
                if (nan)
                    mx = (FA_T)NAN;
                if (mx == (FA_T)-INFINITY) { /* fully masked row: zeros, as the safe softmax */
                    lse[i0 + r] = (FA_T)-INFINITY;
                    nk[r] = 0;
                    continue;
                }
                FA_FN(fa_small_exp)(s, nk[r], mx);
                FA_T l = 0;
                for (int64_t j = 0; j < nk[r]; j++)
                    l += s[j];
                inv[r] = (FA_T)1 / l;
                lse[i0 + r] = mx + FA_LOG(l);
                if (bf)
                    FA_FN(fa_small_rnd_in)(s, nk[r]);
            }
            for (int r = 0; r < nr; r++) {
                FA_T *yo = out + (i0 + r) * dv;
                if (nk[r] == 0)
                    for (int64_t c = 0; c < dv; c++)
                        yo[c] = 0;
                else /* (sum_j p_j v_j) / l */
                    FA_FN(fa_wsum)(S[r], V, vs, nk[r], dv, &inv[r], false, yo);
            }
        }
    }
}

/* Backward of batches [o0, o1) when no matrix of q, k, v is shared between batches (item o
 * owns every gradient row of its matrices). Per query row i: p_j = exp(s_j - lse_i) (one exp
 * per score), D_i = dO_i . O_i, dP_j = dO_i . v_j, dS_j = p_j (dP_j - D_i), and
 * dQ_i += sum_j (scale dS_j) k_j. P and scale dS of up to FA_BQ rows are kept transposed
 * (Pt, dSt: FA_BK x FA_BQ), then per key j dV_j += sum_i P_ij dO_i and dK_j += sum_i
 * (scale dS_ij) q_i (rows ascending, accumulated in registers, added to the batch's sums in
 * w, which are added to the gradients at the end). w: this thread's workspace,
 * T_k (d_k + d_v) + 2 FA_BK FA_BQ elements, and with bf16 products the rounded K, V
 * (T_k (d_k + d_v)) and each row block's rounded q and dO rows (FA_BQ (d_k + d_v)): every
 * product's operands rounded (P and scale dS after they are computed in f32; D_i = dO_i . O_i
 * and the mask's gradient use the unrounded values). Masked keys and fully masked rows hold
 * 0. */
TG_SIMD_CLONES static void FA_FN(fa_small_bwd)(const fa_meta *m, const tg__call *cl, int64_t o0,
                                               int64_t o1, bool do_q, bool do_k, bool do_v,
                                               FA_T *dM, FA_T *w)
{
    const int64_t dk = m->dk, dv = m->dv, Tq = m->Tq, Tk = m->Tk;
    const FA_T *M0 = m->src_mask[0] >= 0 ? cl->in[m->src_mask[0]] : NULL;
    const FA_T *M1 = m->src_mask[1] >= 0 ? cl->in[m->src_mask[1]] : NULL;
    const FA_T scale = (FA_T)m->scale;
    const bool need_ds = do_k || do_q || dM;
    const bool bf = FA_BF16 && cl->precision == TG_PRECISION_BF16;
    FA_T *dKb = w, *dVb = w + Tk * dk, *Pt = dVb + Tk * dv, *dSt = Pt + FA_BK * FA_BQ;
    FA_T *Kr = dSt + FA_BK * FA_BQ, *Vr = Kr + Tk * dk, *Qr = Vr + Tk * dv, *dOr = Qr + FA_BQ * dk;
    for (int64_t o = o0; o < o1; o++) {
        const FA_T *Q = (const FA_T *)cl->in[0] + m->off[0][o];
        const FA_T *K = (const FA_T *)cl->in[1] + m->off[1][o];
        const FA_T *V = (const FA_T *)cl->in[2] + m->off[2][o];
        int64_t ks = m->rs[1], vs = m->rs[2];
        if (bf) {
            FA_FN(fa_small_rnd)(Kr, K, ks, Tk, dk);
            FA_FN(fa_small_rnd)(Vr, V, vs, Tk, dv);
            K = Kr, V = Vr, ks = dk, vs = dv;
        }
        const FA_T *O = (const FA_T *)cl->out + o * Tq * dv;
        const FA_T *dO = (const FA_T *)cl->dy + o * Tq * dv;
        const FA_T *lse = (const FA_T *)cl->saved + o * Tq;
        FA_T *dQ = do_q ? (FA_T *)cl->dx[0] + m->idx[0][o] * Tq * dk : NULL;
        if (do_k)
            for (int64_t e = 0; e < Tk * dk; e++)
                dKb[e] = 0;
        if (do_v)
            for (int64_t e = 0; e < Tk * dv; e++)
                dVb[e] = 0;
        for (int64_t i0 = 0; i0 < Tq; i0 += FA_BQ) {
            const int64_t nr = Tq - i0 < FA_BQ ? Tq - i0 : FA_BQ;
            /* the row block's q and dO rows as the products read them */
            const FA_T *Qb = Q + i0 * m->rs[0], *dOb = dO + i0 * dv;
            int64_t qs = m->rs[0];
            if (bf) {
                FA_FN(fa_small_rnd)(Qr, Qb, qs, nr, dk);
                FA_FN(fa_small_rnd)(dOr, dOb, dv, nr, dv);
                Qb = Qr, dOb = dOr, qs = dk;
            }
            for (int64_t r = 0; r < nr; r++) {
                const int64_t i = i0 + r;
                const FA_T L = lse[i];
                FA_T p[FA_BK], ds[FA_BK];
                int64_t nk = FA_FN(fa_small_nk)(m, i);
                if (L == (FA_T)-INFINITY) /* fully masked row: P = 0, dS = 0 */
                    nk = 0;
                const FA_T *qi = Qb + r * qs, *doi = dOb + r * dv;
                if (nk > 0) {
                    FA_FN(fa_small_scores)(m, M0, M1, o, i, qi, K, ks, nk, p);
                    FA_FN(fa_small_exp)(p, nk, L);
                }
                if (need_ds && nk > 0) {
                    const FA_T Di = FA_FN(fa_dot)(dO + i * dv, O + i * dv, dv);
                    FA_FN(fa_dots)(doi, V, vs, nk, dv, ds); /* dP */
                    for (int64_t j = 0; j < nk; j++)
                        ds[j] = p[j] * (ds[j] - Di);
                    if (dM) {
                        FA_T *dm = dM + i * Tk + o * Tq * Tk;
                        for (int64_t j = 0; j < nk; j++)
                            dm[j] = ds[j];
                    }
                    for (int64_t j = 0; j < nk; j++)
                        ds[j] *= scale;
                    if (bf)
                        FA_FN(fa_small_rnd_in)(ds, nk);
                    if (do_q)
                        FA_FN(fa_wsum)(ds, K, ks, nk, dk, NULL, true, dQ + i * dk);
                }
                if (bf)
                    FA_FN(fa_small_rnd_in)(p, nk);
                for (int64_t j = 0; j < nk; j++) {
                    Pt[j * FA_BQ + r] = p[j];
                    dSt[j * FA_BQ + r] = need_ds ? ds[j] : 0;
                }
                for (int64_t j = nk; j < Tk; j++)
                    Pt[j * FA_BQ + r] = dSt[j * FA_BQ + r] = 0;
            }
            if (do_v)
                for (int64_t j = 0; j < Tk; j++)
                    FA_FN(fa_wsum)(Pt + j * FA_BQ, dOb, dv, nr, dv, NULL, true, dVb + j * dv);
            if (do_k)
                for (int64_t j = 0; j < Tk; j++)
                    FA_FN(fa_wsum)(dSt + j * FA_BQ, Qb, qs, nr, dk, NULL, true, dKb + j * dk);
        }
        if (do_k) {
            FA_T *dK = (FA_T *)cl->dx[1] + m->idx[1][o] * Tk * dk;
            for (int64_t e = 0; e < Tk * dk; e++)
                dK[e] += dKb[e];
        }
        if (do_v) {
            FA_T *dV = (FA_T *)cl->dx[2] + m->idx[2][o] * Tk * dv;
            for (int64_t e = 0; e < Tk * dv; e++)
                dV[e] += dVb[e];
        }
    }
}

tg_status FA_FN(tg__flash_attn_forward)(const tg__call *cl)
{
    const fa_meta *m = cl->aux;
    int64_t nqb = (m->Tq + FA_BQ - 1) / FA_BQ, items = m->nb * nqb;
    size_t per = (fa_ws_per_thread(m, false, cl->precision) + fa_gemm_ws(m, cl->dtype, cl->precision)) / sizeof(FA_T);
    FA_T *ws = cl->ws;
    int nt = cl->nt;
    if (fa_small(m)) { /* batches [lo, hi) per thread, each owning its out rows and lse */
        TG_PAR_RANGE_IN(cl->govs, nt, fa_small_par(m), m->nb, 1,
                        FA_FN(fa_small_fwd)(m, cl, lo, hi, ws + (size_t)TG_THREAD_NUM() * per));
        return TG_OK;
    }
    /* Item (o, qb) owns out rows and lse of query block qb of batch o: race-free, each
     * computed by one thread in a fixed order whatever the thread count. */
    TG_OMP_FOR(nt, fa_work(m) > TG_PAR_MIN)
    for (int64_t it = 0; it < items; it++)
        FA_FN(fa_fwd_item)(m, cl, it / nqb, it % nqb, ws + (size_t)TG_THREAD_NUM() * per);
    return TG_OK;
}

tg_status FA_FN(tg__flash_attn_backward)(const tg__call *cl)
{
    const fa_meta *m = cl->aux;
    int mi = m->src_mask[0]; /* the additive mask's source, or < 0 */
    FA_T *dM = NULL;
    FA_T *ws = cl->ws;
    if (mi >= 0 && m->kind == TG_MASK_ADDITIVE && cl->dx[m->src_mask[0]]) {
        dM = ws; /* (nb, T_q, T_k): dS per batch, reduced into the mask's shape below */
        memset(dM, 0, fa_dmask_bytes(m));
        ws += fa_dmask_bytes(m) / sizeof(FA_T);
    }
    size_t per = (fa_ws_per_thread(m, true, cl->precision) + fa_gemm_ws(m, cl->dtype, cl->precision)) / sizeof(FA_T);
    int nt = cl->nt;
    bool par = fa_work(m) > TG_PAR_MIN;
    int64_t nkb = (m->Tk + FA_BK - 1) / FA_BK, nqb = (m->Tq + FA_BQ - 1) / FA_BQ;
    bool do_k = cl->dx[1] != NULL, do_v = cl->dx[2] != NULL;
    if (fa_small_bwd_ok(m)) {
        /* batches [lo, hi) per thread; batch o owns every gradient row of its matrices */
        TG_PAR_RANGE_IN(cl->govs, nt, fa_small_par(m), m->nb, 1,
                        FA_FN(fa_small_bwd)(m, cl, lo, hi, cl->dx[0] != NULL, do_k, do_v, dM,
                                            ws + (size_t)TG_THREAD_NUM() * per));
        if (dM)
            tg__reduce_to(cl->govs, cl->nt, cl->dtype, dM, m->rank, m->sshape, cl->src_rank[mi], cl->src_shape[mi],
                          cl->dx[mi]);
        return TG_OK;
    }
    if (fa_one_pass(m)) {
        /* Item o owns every gradient row of batch o's matrices (a bijection): race-free. */
        TG_OMP_FOR(nt, par)
        for (int64_t o = 0; o < m->nb; o++)
            FA_FN(fa_bwd_one_item)(m, cl, o, cl->dx[0] != NULL, do_k, do_v, dM,
                                   ws + (size_t)TG_THREAD_NUM() * per);
        if (dM)
            tg__reduce_to(cl->govs, cl->nt, cl->dtype, dM, m->rank, m->sshape, cl->src_rank[mi], cl->src_shape[mi],
                          cl->dx[mi]);
        return TG_OK;
    }
    /* Pass 1: item (matrix g of k, key block kb) owns rows kb of dK[g] (and of dV when v's
     * batch map is k's); every batch o of g is summed in ascending order by that one item. */
    if (do_k || dM || (do_v && m->kv_same)) {
        int64_t items = m->n[1] * nkb;
        bool with_v = do_v && m->kv_same;
        TG_OMP_FOR(nt, par)
        for (int64_t it = 0; it < items; it++)
            FA_FN(fa_bwd_kv_item)(m, cl, 1, it / nkb, it % nkb, do_k, with_v, dM,
                                  ws + (size_t)TG_THREAD_NUM() * per);
    }
    /* Pass 1b: v grouped differently from k (broadcast differently): dV by v's own groups. */
    if (do_v && !m->kv_same) {
        int64_t items = m->n[2] * nkb;
        TG_OMP_FOR(nt, par)
        for (int64_t it = 0; it < items; it++)
            FA_FN(fa_bwd_kv_item)(m, cl, 2, it / nkb, it % nkb, false, true, NULL,
                                  ws + (size_t)TG_THREAD_NUM() * per);
    }
    /* Pass 2: item (matrix g of q, query block qb) owns rows qb of dQ[g]. */
    if (cl->dx[0]) {
        int64_t items = m->n[0] * nqb;
        TG_OMP_FOR(nt, par)
        for (int64_t it = 0; it < items; it++)
            FA_FN(fa_bwd_q_item)(m, cl, it / nqb, it % nqb, ws + (size_t)TG_THREAD_NUM() * per);
    }
    if (dM)
        tg__reduce_to(cl->govs, cl->nt, cl->dtype, dM, m->rank, m->sshape, cl->src_rank[mi], cl->src_shape[mi],
                          cl->dx[mi]);
    return TG_OK;
}

#undef FA_V
#undef FA_VL
#undef FA_INLINE
#undef FA_OUTLINE
#undef FA_FN
#undef FA_CAT
#undef FA_CAT_
