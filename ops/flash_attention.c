/*
 * flash_attention.c - scaled dot-product attention fused into one tiled op (FlashAttention).
 *
 *   s_ij  = scale (q_i . k_j)  + m_ij (additive mask), or -inf where a mask blocks (boolean
 *           mask, block mask, causal j > i)
 *   out_i = sum_j p_ij v_j,  p_ij = exp(s_ij - lse_i),  lse_i = log sum_j exp(s_ij)
 *   A fully masked row (every s_ij = -inf) gives out_i = 0, lse_i = -inf and zero gradients,
 *   as the unfused graph's safe softmax does.
 *
 * Forward (Dao et al. 2022, "FlashAttention", Alg. 1; the online softmax of Milakov &
 * Gimelshein 2018): per block of FA_BQ query rows, loop over blocks of FA_BK keys keeping per
 * row the running max m, sum l and unnormalised output acc:
 *   m' = max(m, max_j s_ij);  alpha = exp(m - m');  p_ij = exp(s_ij - m');
 *   l  = alpha l + sum_j p_ij;  acc = alpha acc + sum_j p_ij v_j;  out_i = acc / l.
 * Only a (FA_BQ, FA_BK) tile of scores exists at a time (per thread workspace); the
 * (T_q, T_k) weights are never stored. Saved for backward: lse (..., T_q).
 * Backward (Dao 2023, "FlashAttention-2", Alg. 2), recomputing p from q, k and lse:
 *   D_i = dO_i . O_i,  dP_ij = dO_i . v_j,  dS_ij = p_ij (dP_ij - D_i)
 *   dV_j += sum_i p_ij dO_i,  dK_j += scale sum_i dS_ij q_i,  dQ_i += scale sum_j dS_ij k_j
 *   dM_ij += dS_ij  (an additive mask that requires a gradient; summed over broadcast dims)
 * Threading (deterministic, no atomics): forward items are (batch, query block), each owning
 * its output rows. Backward runs two passes that recompute p: dK and dV by (k matrix, key
 * block), dQ by (q matrix, query block); an item sums every batch that reads its matrix
 * (broadcast q, k or v) in ascending order. Each gradient row is written by one item, in a
 * fixed order, so results are bitwise equal for any thread count.
 * Small-T path (T_k <= FA_BK: one key block; flash_attention_kernel.h, fa_small_*): no tiles,
 * no block products. Per query row, s_j are dot products along d (fixed lanes, vectorized),
 * then the softmax and out_i = sum_j p_j v_j with the columns vectorized; backward computes
 * p_j once per score and D_i, dP_j by the same dots. Items are ranges of whole batches (one
 * region per op, TG_PAR_RANGE: one thread below ~50 us of work); its backward needs batches
 * owning their matrices (no broadcast q, k, v), else the tiled backward runs. With bf16
 * products it rounds every product's operands to bf16 first (copies of K, V and the q and dO
 * rows in the thread's workspace; P and dS after they are computed), the same arithmetic after.
 * Layout: q, k, v are read through their strides (heads split by views are not copied); the
 * last axis must be contiguous (the builder copies otherwise). Masks are read through their
 * strides with stride 0 on broadcast dims. Output, its gradient and the sources' gradients are
 * contiguous.
 */
#include "gemm.h"
#include "registry.h"
#include "vec.h"

#include <stdio.h>

/* The small-T helpers pass 32- and 64-byte vectors between always-inline functions (no call
 * ABI is involved); meson.build compiles the library with -Wno-psabi for GCC's note on them. */

/* Tile sizes: FA_BQ query rows by FA_BK keys. FA_BK is the vector length of the score loops
 * (two AVX-512 vectors of f32, four of f64); results depend on neither. */
#define FA_BQ 32
#define FA_BK 32
/* Rows per group of the small-T path's phases */
#define FA_SR 8
/* Fork the small-T path above this many fa_work units, ~50 us on one core (SDPA (64, 5, 64),
 * 204,800 units, takes ~27 us forward on this project's AVX-512 machine). Not ~20 us: a
 * region that short is dominated by waking the other thread when its core is busy; with
 * 120,000 units SDPA (64, 5, 64) at 2 threads measured 0.018 ms in `tgrad bench` but a median
 * of 0.28 ms (0.04-5.4) in tools/bench/bench_torch.py, whose pauses let the worker sleep. */
#define FA_SMALL_PAR_UNITS 400000

/* Builder metadata (y->aux, owned by the node). Per output batch o (the broadcast leading
 * dims flattened): the element offset of q's, k's and v's matrix in their data (through
 * strides), the matrix index for their contiguous gradients, and each mask's offset. The
 * batches reading matrix g of source s are list[s][start[s][g] .. start[s][g + 1]),
 * ascending. */
typedef struct fa_meta {
    int64_t nb, Tq, Tk, dk, dv;
    size_t es;                   /* element size: 4 (f32) or 8 (f64) */
    int rank;                    /* scores rank: leading dims + 2 */
    int64_t sshape[TG_MAX_RANK]; /* scores shape (..., T_q, T_k) */
    double scale;
    bool causal;
    tg_mask_kind kind;           /* of the first mask */
    int src_mask[2];             /* source index of the mask and of the block mask; -1: none */
    int64_t rs[3];               /* row strides of q, k, v (their last axis has stride 1) */
    int64_t msi[2], msj[2];      /* masks' strides along T_q and T_k (0: broadcast) */
    bool kv_same;                /* v's batch map is k's: dV in the same pass as dK */
    int64_t n[3];                /* matrices in q, k, v */
    int64_t *off[3], *idx[3], *moff[2], *start[3], *list[3];
} fa_meta;

/* Scalar operations of one forward, for the parallel threshold. */
static double fa_work(const fa_meta *m)
{
    return (double)m->nb * (double)m->Tq * (double)m->Tk * (double)(m->dk + m->dv);
}

static size_t fa_round64(size_t b) { return (b + 63) / 64 * 64; }

/* Bytes of one thread's workspace. Forward: Kt (dk, BK), S (BQ, BK), acc (BQ, dv), m and l
 * (BQ). Backward: Kt, Vt (dv, BK), P and dS (BQ, BK), D (BQ), then dK and dV blocks (BK, dk +
 * dv) or the dQ block (BQ, dk). */
/* Backward in one pass (fa_bwd_one_item): when no matrix of q, k or v is shared between
 * batches (always inside MHA), item o owns all of batch o's gradients, so P and dS are computed
 * once per tile instead of once per pass. Chosen by the shapes only; the sums run in the same
 * order as the two passes, so the results are the same bits either way. */
static bool fa_one_pass(const fa_meta *m)
{
    return m->n[0] == m->nb && m->n[1] == m->nb && m->kv_same && m->nb >= 4;
}

/* The small-T path (flash_attention_kernel.h): every key in one block. Its backward needs
 * batches that own their matrices (no broadcast q, k or v), like fa_one_pass. */
static bool fa_small(const fa_meta *m)
{
    return m->Tk <= FA_BK;
}

static bool fa_small_bwd_ok(const fa_meta *m)
{
    return fa_small(m) && m->n[0] == m->nb && m->n[1] == m->nb && m->kv_same;
}

/* Fork for the small-T path: about 50 us of work on one core (FA_SMALL_PAR_UNITS). */
static bool fa_small_par(const fa_meta *m)
{
    return fa_work(m) > (double)TG_PAR_WORK(FA_SMALL_PAR_UNITS);
}

/* Elements of the two-pass backward layout (before the one-pass extras). */
static size_t fa_bwd_base_elems(const fa_meta *m)
{
    size_t dk = (size_t)m->dk, dv = (size_t)m->dv;
    size_t blk = FA_BK * (dk + dv) > FA_BQ * dk ? FA_BK * (dk + dv) : FA_BQ * dk;
    return (dk + dv) * FA_BK + 2 * FA_BQ * FA_BK + FA_BQ + blk;
}

static size_t fa_ws_per_thread(const fa_meta *m, bool backward, int prec)
{
    size_t es = m->es;
    size_t dk = (size_t)m->dk, dv = (size_t)m->dv, n;
    if (!backward) {
        n = dk * FA_BK + FA_BQ * FA_BK + FA_BQ * dv + 2 * FA_BQ;
    } else {
        n = fa_bwd_base_elems(m);
        if (fa_one_pass(m)) /* D and the dQ accumulator of the whole batch */
            n += (size_t)m->Tq * (1 + dk);
    }
    if (prec == TG_PRECISION_BF16 && fa_small(m)) /* rounded K, V and q, dO rows */
        n += (size_t)(FA_BK + FA_BQ) * (dk + dv);
    return fa_round64(n * es);
}

/* One thread's GEMM workspace for the block products (at most max(BQ, BK, dk, dv) columns and
 * inner steps). */
static size_t fa_gemm_ws(const fa_meta *m, tg_dtype dt, int prec)
{
    int64_t d = FA_BQ > FA_BK ? FA_BQ : FA_BK;
    d = d > m->dk ? d : m->dk;
    d = d > m->dv ? d : m->dv;
    return tg__gemm_ws_bytes_prec(dt, prec, 1, d, d);
}

/* The additive mask's gradient scratch (nb, T_q, T_k); size checked by the builder. */
static size_t fa_dmask_bytes(const fa_meta *m)
{
    return fa_round64((size_t)m->nb * (size_t)m->Tq * (size_t)m->Tk * m->es);
}

static bool fa_wants_dmask(const tg__call *c)
{
    const fa_meta *m = c->aux;
    return m->src_mask[0] >= 0 && m->kind == TG_MASK_ADDITIVE &&
           c->src_requires_grad[m->src_mask[0]];
}

size_t tg__flash_attn_ws(const tg__call *c)
{
    int nt = c->nt;
    bool backward = c->backward;
    const fa_meta *m = c->aux;
    /* per thread: the tiles, then a one-thread GEMM workspace for the block products */
    size_t b = (size_t)(nt < 1 ? 1 : nt) *
               (fa_ws_per_thread(m, backward, c->precision) + fa_gemm_ws(m, c->dtype, c->precision));
    if (backward && fa_wants_dmask(c))
        b += fa_dmask_bytes(m);
    return b;
}

/* The kernels, written once in flash_attention_kernel.h, for f32 and for f64:
 * tg__flash_attn_forward_f32 ... _backward_f64, registered per dtype in ops/ops_dtype.def. */
#define FA_T float
#define FA_W 16 /* one 64-byte vector */
#define FA_SUF f32
#define FA_EXP tg__expf /* vectorizable, <= 1 ulp from expf (src/core/vec.h) */
#define FA_LOG logf
#define FA_BF16 1 /* bf16 block products at TG_PRECISION_BF16 */
#include "flash_attention_kernel.h"
#undef FA_BF16
#undef FA_T
#undef FA_W
#undef FA_SUF
#undef FA_EXP
#undef FA_LOG
#define FA_T double
#define FA_W 8
#define FA_SUF f64
#define FA_EXP tg__exp
#define FA_LOG log
#define FA_BF16 0
#include "flash_attention_kernel.h"
#undef FA_BF16
#undef FA_T
#undef FA_W
#undef FA_SUF
#undef FA_EXP
#undef FA_LOG
/* ---- builder ------------------------------------------------------------------------------ */

/* Offsets of source x (rank >= 2 for q/k/v: lead = x->rank - 2; masks: lead dims are the
 * axes before the scores' last two, right-aligned) for output batch index o, over the output's
 * leading shape L (rank rb): element offset through strides, and (q/k/v) the matrix index. */
static void fa_offsets(const tg_tensor *x, int lead, int rb, const int64_t *L, int64_t o,
                       int64_t *off, int64_t *mi)
{
    int64_t e = 0, g = 0, cs = 1;
    for (int d = rb - 1; d >= 0; d--) {
        int64_t id = o % L[d];
        o /= L[d];
        int a = d - (rb - lead);
        if (a < 0)
            continue;
        if (x->shape[a] > 1) {
            e += id * x->stride[a];
            g += id * cs;
        }
        cs *= x->shape[a];
    }
    *off = e;
    if (mi)
        *mi = g;
}

/* The leading dims of q, k and v broadcast together (rb of them, lead), the scores' shape
 * (rank rs) and the output's. */
typedef struct {
    int rb, rs;
    int64_t lead[TG_MAX_RANK], sshape[TG_MAX_RANK], oshape[TG_MAX_RANK];
} fa_shapes;

/* Shapes of q, k, v (and the masks src[3..n_src)) against each other; the mask kind and the
 * scale. False with the error recorded. */
static bool fa_check_shapes(tg_ctx *ctx, const char *fn, tg_tensor *const *src, int n_src,
                            int im, tg_mask_kind mask_kind, double scale, fa_shapes *sh)
{
    const tg_tensor *q = src[0], *k = src[1], *v = src[2];
    char b1[128], b2[128], b3[128];
    if (q->rank < 2 || k->rank < 2 || v->rank < 2 || q->shape[q->rank - 1] != k->shape[k->rank - 1] ||
        k->shape[k->rank - 2] != v->shape[v->rank - 2])
        return tg__err(ctx, TG_ERR_SHAPE, fn,
                       "need q (..., T_q, d_k), k (..., T_k, d_k), v (..., T_k, d_v); got q %s, "
                       "k %s, v %s",
                       tg__shape_str(q, b1, sizeof b1), tg__shape_str(k, b2, sizeof b2),
                       tg__shape_str(v, b3, sizeof b3)) != NULL;
    if (im >= 0 && mask_kind != TG_MASK_ADDITIVE && mask_kind != TG_MASK_BLOCK)
        return tg__err(ctx, TG_ERR_ARG, fn,
                       "unknown mask kind %d (use TG_MASK_ADDITIVE or TG_MASK_BLOCK)",
                       (int)mask_kind) != NULL;
    if (!isfinite(scale))
        return tg__err(ctx, TG_ERR_ARG, fn, "scale %g is not finite", scale) != NULL;
    int64_t Tq = q->shape[q->rank - 2], Tk = k->shape[k->rank - 2], dv = v->shape[v->rank - 1];
    /* leading dims of q, k and v broadcast together */
    int64_t lead2[TG_MAX_RANK];
    int rb = 0, rb2;
    bool ok =
        tg__broadcast_shape(q->rank - 2, q->shape, k->rank - 2, k->shape, &rb2, lead2) &&
        tg__broadcast_shape(rb2, lead2, v->rank - 2, v->shape, &rb, sh->lead) &&
        rb + 2 <= TG_MAX_RANK;
    if (!ok)
        return tg__err(ctx, TG_ERR_SHAPE, fn,
                       "leading dims do not broadcast: q %s, k %s, v %s",
                       tg__shape_str(q, b1, sizeof b1), tg__shape_str(k, b2, sizeof b2),
                       tg__shape_str(v, b3, sizeof b3)) != NULL;
    memcpy(sh->sshape, sh->lead, sizeof(int64_t) * (size_t)rb);
    memcpy(sh->oshape, sh->lead, sizeof(int64_t) * (size_t)rb);
    sh->sshape[rb] = sh->oshape[rb] = Tq;
    sh->sshape[rb + 1] = Tk;
    sh->oshape[rb + 1] = dv;
    sh->rb = rb;
    sh->rs = rb + 2;
    for (int i = 3; i < n_src; i++) {
        const tg_tensor *mk = src[i];
        int64_t bs[TG_MAX_RANK];
        int r;
        if (mk->rank > sh->rs ||
            !tg__broadcast_shape(sh->rs, sh->sshape, mk->rank, mk->shape, &r, bs) ||
            memcmp(bs, sh->sshape, sizeof(int64_t) * (size_t)r) != 0) {
            char bs2[128];
            return tg__err(ctx, TG_ERR_SHAPE, fn, "%s %s does not broadcast to the scores %s",
                           i == im ? "mask" : "block_mask", tg__shape_str(mk, b1, sizeof b1),
                           tg__dims_str(sh->rs, sh->sshape, bs2, sizeof bs2)) != NULL;
        }
    }
    return true;
}

/* The metadata record of y, with room for its int64 arrays after it (at *arrays): off[3],
 * idx[3], moff[2], list[3] (nb each) and start[3] (n[s] + 1 each, n[s] <= nb). NULL (y freed)
 * on failure. */
static fa_meta *fa_meta_new(tg_ctx *ctx, const char *fn, tg_tensor *y, int64_t nb,
                            int64_t **arrays)
{
    size_t bytes, head = fa_round64(sizeof(fa_meta));
    int64_t cnt;
    if (!tg__mul_i64(nb, 14, &cnt) || !tg__add_i64(cnt, 3, &cnt) ||
        !tg__bytes(cnt, sizeof(int64_t), &bytes) || bytes > SIZE_MAX - head) {
        tg__free(ctx, y);
        return tg__err(ctx, TG_ERR_OVERFLOW, fn, "%lld batches overflow", (long long)nb);
    }
    fa_meta *m = tg__alloc_owned(ctx, head + bytes, fn, y->id + 1);
    if (!m) {
        tg__free(ctx, y);
        return NULL;
    }
    *arrays = (int64_t *)((char *)m + head);
    return m;
}

/* Operand s (q, k or v) of the batches: its row stride, matrix count, each batch's offset and
 * matrix, and the batches listed by matrix (counting sort, ascending within a matrix). Takes
 * its arrays from *p. */
static void fa_index_operand(fa_meta *m, int s, const tg_tensor *x, const fa_shapes *sh,
                             int64_t **p)
{
    int64_t nb = m->nb;
    m->rs[s] = x->shape[x->rank - 2] > 1 ? x->stride[x->rank - 2] : 0;
    m->n[s] = 1;
    for (int a = 0; a < x->rank - 2; a++)
        m->n[s] *= x->shape[a];
    m->off[s] = *p, *p += nb;
    m->idx[s] = *p, *p += nb;
    m->list[s] = *p, *p += nb;
    m->start[s] = *p, *p += m->n[s] + 1;
    for (int64_t o = 0; o < nb; o++)
        fa_offsets(x, x->rank - 2, sh->rb, sh->lead, o, &m->off[s][o], &m->idx[s][o]);
    int64_t *st = m->start[s];
    for (int64_t g = 0; g <= m->n[s]; g++)
        st[g] = 0;
    for (int64_t o = 0; o < nb; o++)
        st[m->idx[s][o] + 1]++;
    for (int64_t g = 0; g < m->n[s]; g++)
        st[g + 1] += st[g];
    for (int64_t o = 0; o < nb; o++) /* st[g] advances to start[g + 1]... */
        m->list[s][st[m->idx[s][o]]++] = o;
    for (int64_t g = m->n[s]; g > 0; g--) /* ...so shift it back */
        st[g] = st[g - 1];
    st[0] = 0;
}

/* The masks' offsets per batch and their row and column strides (from *p). */
static void fa_index_masks(fa_meta *m, tg_tensor *const *src, const fa_shapes *sh, int64_t **p)
{
    for (int i = 0; i < 2; i++) {
        int si = m->src_mask[i];
        m->moff[i] = *p, *p += m->nb;
        m->msi[i] = m->msj[i] = 0;
        if (si < 0)
            continue;
        const tg_tensor *x = src[si];
        int lead_m = x->rank - 2; /* may be negative: a (T_k) or scalar mask */
        for (int64_t o = 0; o < m->nb; o++)
            fa_offsets(x, lead_m, sh->rb, sh->lead, o, &m->moff[i][o], NULL);
        if (x->rank >= 2 && x->shape[x->rank - 2] > 1)
            m->msi[i] = x->stride[x->rank - 2];
        if (x->rank >= 1 && x->shape[x->rank - 1] > 1)
            m->msj[i] = x->stride[x->rank - 1];
    }
}

tg_tensor *tg_flash_attention(tg_ctx *ctx, tg_tensor *q, tg_tensor *k, tg_tensor *v,
                              tg_tensor *mask, tg_mask_kind mask_kind, tg_tensor *block_mask,
                              bool causal, double scale)
{
    static const char *fn = "tg_flash_attention";
    tg_tensor *src[5] = {q, k, v, NULL, NULL};
    int n_src = 3, im = -1, ib = -1;
    if (mask) {
        im = n_src;
        src[n_src++] = mask;
    }
    if (block_mask) {
        ib = n_src;
        src[n_src++] = block_mask;
    }
    if (!tg__check_srcs(ctx, fn, n_src, src))
        return NULL;
    fa_shapes sh;
    if (!fa_check_shapes(ctx, fn, src, n_src, im, mask_kind, scale, &sh))
        return NULL;
    int64_t Tq = q->shape[q->rank - 2], Tk = k->shape[k->rank - 2];
    int64_t dk = q->shape[q->rank - 1], dv = v->shape[v->rank - 1];
    if (scale == 0)
        scale = 1.0 / sqrt((double)dk);
    int64_t nb = 1;
    for (int d = 0; d < sh.rb; d++)
        nb *= sh.lead[d]; /* <= the output's numel, which tg__op_new checks below */
    bool dmask = im >= 0 && mask_kind == TG_MASK_ADDITIVE && mask->requires_grad;
    int64_t sc;
    char b1[128];
    if (dmask && (!tg__mul_i64(nb, Tq, &sc) || !tg__mul_i64(sc, Tk, &sc) || sc > TG_MAX_NUMEL))
        return tg__err(ctx, TG_ERR_OVERFLOW, fn,
                       "the additive mask's gradient needs the scores %s: too large",
                       tg__dims_str(sh.rs, sh.sshape, b1, sizeof b1));
    /* q, k, v are read through strides with a contiguous last axis; copy any other layout */
    for (int i = 0; i < 3; i++) {
        tg_tensor *x = src[i];
        if (x->shape[x->rank - 1] > 1 && x->stride[x->rank - 1] != 1 &&
            !(src[i] = tg__contiguous(ctx, x)))
            return NULL;
    }
    q = src[0];
    k = src[1];
    v = src[2];
    tg_tensor *y = tg__op_new(ctx, TG_OP_FLASH_ATTN, q->dtype, sh.rb + 2, sh.oshape, n_src, src);
    if (!y)
        return NULL;
    /* a boolean mask has no gradient: y requires one through q, k, v or an additive mask */
    y->requires_grad = q->requires_grad || k->requires_grad || v->requires_grad || dmask;
    if (!tg__op_save_n(y, nb * Tq, q->dtype == TG_F32 ? 4 : 8, 0))
        return NULL; /* y freed, error recorded */
    int64_t *p = NULL;
    fa_meta *m = fa_meta_new(ctx, fn, y, nb, &p);
    if (!m)
        return NULL;
    y->aux = m;
    m->nb = nb;
    m->es = q->dtype == TG_F32 ? sizeof(float) : sizeof(double);
    m->Tq = Tq;
    m->Tk = Tk;
    m->dk = dk;
    m->dv = dv;
    m->rank = sh.rs;
    memcpy(m->sshape, sh.sshape, sizeof sh.sshape);
    m->scale = scale;
    m->causal = causal;
    m->kind = im >= 0 ? mask_kind : TG_MASK_ADDITIVE;
    m->src_mask[0] = im;
    m->src_mask[1] = ib;
    for (int s = 0; s < 3; s++)
        fa_index_operand(m, s, src[s], &sh, &p);
    fa_index_masks(m, src, &sh, &p);
    m->kv_same = m->n[1] == m->n[2];
    for (int64_t o = 0; m->kv_same && o < nb; o++)
        m->kv_same = m->idx[1][o] == m->idx[2][o];
    return y;
}

void tg__flash_attn_describe(const tg_tensor *y, tg__flash_attn_desc *d)
{
    const fa_meta *m = y->aux;
    *d = (tg__flash_attn_desc){.scale = m->scale, .causal = m->causal, .kind = m->kind,
                               .src_mask = m->src_mask[0], .src_block = m->src_mask[1]};
}
