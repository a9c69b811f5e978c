/*
 * test_flash_attention.c - the fused attention op (ops/flash_attention.c) against the unfused
 * graph it replaces (matmul -> scale -> add_mask... -> softmax -> matmul): forward and every
 * gradient within 1e-12 relative (f64) / 1e-5 (f32) over many shapes (T_q != T_k, d_k != d_v,
 * T = 1, T not a multiple of the tiles, broadcast leading dims), every mask kind, causal, fully
 * masked rows (zeros and zero gradients, never NaN), strided views; the small-T path for every
 * T = 1..33; SDPA and MHA with fusion on and off (long and short sequences); bitwise thread
 * invariance for 1, 2, 3 and 8 threads; build errors.
 */
#include "testutil.h"
#include "tgrad_nn.h"

#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* One attention problem. Shapes: q (lq..., T_q, d_k), k (lk..., T_k, d_k), v (lv..., T_k, d_v);
 * lead ranks 0..2 (right-aligned broadcast). */
typedef struct fa_case {
    int rq, rk, rv;          /* lead ranks */
    int64_t lq[2], lk[2], lv[2];
    int64_t Tq, Tk, dk, dv;
    int mask;                /* 0 none, 1 additive (T_q, T_k) learned, 2 additive (B, 1, T_q, T_k)
                                const with -inf, 3 block (T_q, T_k), 4 block (T_k) */
    bool pad;                /* block_mask: key padding (lead0, 1, 1, T_k) (needs rq == 2) */
    bool causal;
    bool full_row;           /* make query row 1 fully masked (via the block mask or mask 3) */
    int views;               /* 0 contiguous; 1 q, k, v transposed views (B, T, H, d) -> (B, H,
                                T, d); 2 narrow views of one (.., T, 3 d) tensor (self, T_q ==
                                T_k, d_k == d_v); 3 q with a non-contiguous last axis */
    double scale;
} fa_case;

typedef struct built {
    tg_tensor *y;
    tg_tensor *leaves[8];
    int n;
} built;

static tg_tensor *rnd(tg_ctx *ctx, tg_dtype dt, int rank, const int64_t *shape,
                      const char *name, bool grad)
{
    tg_tensor *t = tg_input(ctx, dt, rank, shape, name);
    ck_assert_ptr_nonnull(t);
    tg_fill_uniform(t, -1.5, 1.5);
    if (grad)
        tg_set_requires_grad(t, true);
    return t;
}

static int dims(int r, const int64_t *lead, int64_t a, int64_t b, int64_t *out)
{
    for (int i = 0; i < r; i++)
        out[i] = lead[i];
    out[r] = a;
    out[r + 1] = b;
    return r + 2;
}

/* Batch count of the broadcast leading dims (for the masks' leading dim). */
static int64_t lead0(const fa_case *c) { return c->rq == 2 ? c->lq[0] : 1; }

/* Build the case in ctx (seeded: the same values for fused and unfused). unfused: the graph of
 * elementary ops. */
static built build(tg_ctx *ctx, tg_dtype dt, const fa_case *c, bool fused)
{
    built b = {0};
    int64_t sh[TG_MAX_RANK];
    tg_tensor *q, *k, *v;
    if (c->views == 1) { /* (B, T, H, d) leaves, transposed to (B, H, T, d) */
        q = rnd(ctx, dt, TG_DIMS(c->lq[0], c->Tq, c->lq[1], c->dk), "q", true);
        k = rnd(ctx, dt, TG_DIMS(c->lk[0], c->Tk, c->lk[1], c->dk), "k", true);
        v = rnd(ctx, dt, TG_DIMS(c->lv[0], c->Tk, c->lv[1], c->dv), "v", true);
        b.leaves[b.n++] = q;
        b.leaves[b.n++] = k;
        b.leaves[b.n++] = v;
        q = tg_transpose(ctx, q, 1, 2);
        k = tg_transpose(ctx, k, 1, 2);
        v = tg_transpose(ctx, v, 1, 2);
    } else if (c->views == 2) { /* narrow views of one (lead..., T, 3 d) tensor */
        tg_tensor *x = rnd(ctx, dt, dims(c->rq, c->lq, c->Tq, 3 * c->dk, sh), sh, "x", true);
        b.leaves[b.n++] = x;
        q = tg_narrow(ctx, x, -1, 0, c->dk);
        k = tg_narrow(ctx, x, -1, c->dk, c->dk);
        v = tg_narrow(ctx, x, -1, 2 * c->dk, c->dk);
    } else {
        q = rnd(ctx, dt, dims(c->rq, c->lq, c->Tq, c->dk, sh), sh, "q", true);
        k = rnd(ctx, dt, dims(c->rk, c->lk, c->Tk, c->dk, sh), sh, "k", true);
        v = rnd(ctx, dt, dims(c->rv, c->lv, c->Tk, c->dv, sh), sh, "v", true);
        b.leaves[b.n++] = q;
        b.leaves[b.n++] = k;
        b.leaves[b.n++] = v;
        if (c->views == 3) { /* q stored (lead..., d_k, T_q), used transposed */
            tg_tensor *qt = rnd(ctx, dt, dims(c->rq, c->lq, c->dk, c->Tq, sh), sh, "qt", true);
            b.leaves[0] = qt;
            q = tg_transpose(ctx, qt, -1, -2);
        }
    }
    tg_tensor *mask = NULL, *pad = NULL;
    tg_mask_kind kind = TG_MASK_ADDITIVE;
    int64_t B = lead0(c);
    switch (c->mask) {
    case 1:
        mask = rnd(ctx, dt, TG_DIMS(c->Tq, c->Tk), "bias", true);
        b.leaves[b.n++] = mask;
        break;
    case 2:
        mask = tg_const(ctx, dt, TG_DIMS(B, 1, c->Tq, c->Tk), "am");
        tg_fill_uniform(mask, -2, 2);
        for (int64_t i = 0; i < tg_tensor_numel(mask); i += 3)
            tg_set(mask, i, -INFINITY);
        break;
    case 3:
    case 4: {
        kind = TG_MASK_BLOCK;
        if (c->mask == 3)
            mask = tg_const(ctx, dt, TG_DIMS(c->Tq, c->Tk), "bm");
        else
            mask = tg_const(ctx, dt, TG_DIMS(c->Tk), "km");
        for (int64_t i = 0; i < tg_tensor_numel(mask); i++)
            tg_set(mask, i, (i * 7 + 3) % 5 == 0);
        if (c->mask == 3 && c->full_row && c->Tq > 1)
            for (int64_t j = 0; j < c->Tk; j++)
                tg_set(mask, c->Tk + j, 1);
        break;
    }
    default:
        break;
    }
    if (c->pad) {
        pad = tg_const(ctx, dt, TG_DIMS(B, 1, 1, c->Tk), "pad");
        for (int64_t i = 0; i < tg_tensor_numel(pad); i++)
            tg_set(pad, i, (i % c->Tk) == c->Tk - 1 && i >= c->Tk);
        if (c->full_row) /* batch 0 pads key 0 and causal leaves row 0 only key 0 */
            tg_set(pad, 0, 1);
    }
    if (fused) {
        b.y = tg_flash_attention(ctx, q, k, v, mask, kind, pad, c->causal, c->scale);
    } else {
        double scale = c->scale != 0 ? c->scale : 1.0 / sqrt((double)c->dk);
        tg_tensor *s = tg_scale(ctx, tg_matmul(ctx, q, k, false, true), scale);
        if (mask)
            s = tg_add_mask(ctx, s, mask, kind);
        if (pad)
            s = tg_add_mask(ctx, s, pad, TG_MASK_BLOCK);
        if (c->causal)
            s = tg_add_mask(ctx, s, tg_causal_mask(ctx, dt, c->Tq, c->Tk), TG_MASK_BLOCK);
        b.y = tg_matmul(ctx, tg_softmax(ctx, s), v, false, false);
    }
    ck_assert_msg(b.y != NULL, "build: %s", tg_ctx_message(ctx));
    return b;
}

/* max |a - b| / max |b| (0 / 0 = 0); a and b of n elements of dt. */
static double rel_err(const void *a, const void *b, int64_t n, tg_dtype dt, bool *nan)
{
    double num = 0, den = 0;
    for (int64_t i = 0; i < n; i++) {
        double x = dt == TG_F32 ? ((const float *)a)[i] : ((const double *)a)[i];
        double y = dt == TG_F32 ? ((const float *)b)[i] : ((const double *)b)[i];
        if (x != x || y != y)
            *nan = true;
        num = fmax(num, fabs(x - y));
        den = fmax(den, fabs(y));
    }
    return den == 0 ? num : num / den;
}

/* Run fused and unfused, compare output and every leaf gradient. */
static void compare(const fa_case *c, tg_dtype dt, uint64_t seed, const char *what)
{
    double tol = dt == TG_F64 ? 1e-12 : 1e-5;
    tg_ctx *ctx[2];
    built b[2];
    for (int f = 0; f < 2; f++) {
        ctx[f] = tu_ctx_new();
        tg_ctx_seed(ctx[f], seed);
        b[f] = build(ctx[f], dt, c, f == 1);
        tg_graph *g = tg_graph_new(ctx[f], &b[f].y, 1);
        ck_assert_msg(g != NULL, "%s: %s", what, tg_ctx_message(ctx[f]));
        ck_assert_int_eq(tg_graph_forward(g), TG_OK);
        tg_tensor *dy = tg_const(ctx[f], dt, tg_tensor_rank(b[f].y), tg_tensor_shape(b[f].y),
                                 "dy");
        for (int64_t i = 0; i < tg_tensor_numel(dy); i++)
            tg_set(dy, i, sin(0.37 * (double)i + 0.1));
        ck_assert_int_eq(tg_graph_backward(g, b[f].y, dy), TG_OK);
    }
    /* the fused graph has one flash_attention node and no softmax */
    bool nan = false;
    int64_t n = tg_tensor_numel(b[1].y);
    double e = rel_err(tg_tensor_data(b[1].y), tg_tensor_data(b[0].y), n, dt, &nan);
    ck_assert_msg(!nan, "%s %s: NaN in the output", what, tg_dtype_str(dt));
    ck_assert_msg(e <= tol, "%s %s: output differs by %g (rel)", what, tg_dtype_str(dt), e);
    ck_assert_int_eq(b[0].n, b[1].n);
    for (int l = 0; l < b[0].n; l++) {
        tg_tensor *t0 = b[0].leaves[l], *t1 = b[1].leaves[l];
        e = rel_err(tg_tensor_grad(t1), tg_tensor_grad(t0), tg_tensor_numel(t0), dt, &nan);
        ck_assert_msg(!nan, "%s %s: NaN in d%s", what, tg_dtype_str(dt), tg_tensor_name(t0));
        ck_assert_msg(e <= tol, "%s %s: d%s differs by %g (rel)", what, tg_dtype_str(dt),
                      tg_tensor_name(t0), e);
    }
    tu_ctx_free(ctx[0]);
    tu_ctx_free(ctx[1]);
}

/* Hand-picked cases: every mask kind, causal, T = 1, tiles not dividing T, broadcasting, views. */
static const fa_case cases[] = {
    /* no lead dims, T_q != T_k, d_k != d_v */
    {.Tq = 5, .Tk = 7, .dk = 3, .dv = 4},
    /* T = 1 */
    {.Tq = 1, .Tk = 1, .dk = 2, .dv = 1},
    {.rq = 1, .rk = 1, .rv = 1, .lq = {2}, .lk = {2}, .lv = {2}, .Tq = 1, .Tk = 40, .dk = 8, .dv = 5},
    {.rq = 1, .rk = 1, .rv = 1, .lq = {2}, .lk = {2}, .lv = {2}, .Tq = 40, .Tk = 1, .dk = 8, .dv = 5},
    /* more than one tile each way, not multiples of 32 */
    {.rq = 2, .rk = 2, .rv = 2, .lq = {2, 3}, .lk = {2, 3}, .lv = {2, 3}, .Tq = 33, .Tk = 70,
     .dk = 16, .dv = 8, .scale = 0.3},
    {.rq = 2, .rk = 2, .rv = 2, .lq = {1, 2}, .lk = {1, 2}, .lv = {1, 2}, .Tq = 65, .Tk = 64,
     .dk = 64, .dv = 64},
    /* broadcasting: k over heads, v over batch; q over batch */
    {.rq = 2, .rk = 2, .rv = 1, .lq = {2, 3}, .lk = {2, 1}, .lv = {3}, .Tq = 9, .Tk = 37, .dk = 5,
     .dv = 3},
    {.rq = 1, .rk = 2, .rv = 2, .lq = {3}, .lk = {2, 3}, .lv = {2, 1}, .Tq = 34, .Tk = 6, .dk = 4,
     .dv = 6},
    /* masks */
    {.rq = 2, .rk = 2, .rv = 2, .lq = {2, 2}, .lk = {2, 2}, .lv = {2, 2}, .Tq = 35, .Tk = 33,
     .dk = 6, .dv = 4, .mask = 1},
    {.rq = 2, .rk = 2, .rv = 2, .lq = {2, 2}, .lk = {2, 2}, .lv = {2, 2}, .Tq = 7, .Tk = 40,
     .dk = 6, .dv = 4, .mask = 2},
    {.rq = 2, .rk = 2, .rv = 2, .lq = {2, 2}, .lk = {2, 2}, .lv = {2, 2}, .Tq = 40, .Tk = 9,
     .dk = 6, .dv = 4, .mask = 3, .full_row = true},
    {.rq = 1, .rk = 1, .rv = 1, .lq = {3}, .lk = {3}, .lv = {3}, .Tq = 6, .Tk = 8, .dk = 3,
     .dv = 2, .mask = 4},
    {.rq = 2, .rk = 2, .rv = 2, .lq = {2, 3}, .lk = {2, 3}, .lv = {2, 3}, .Tq = 11, .Tk = 11,
     .dk = 4, .dv = 4, .pad = true},
    /* causal (T_q < T_k, T_q > T_k, several tiles), with masks, a fully masked row */
    {.rq = 2, .rk = 2, .rv = 2, .lq = {2, 2}, .lk = {2, 2}, .lv = {2, 2}, .Tq = 70, .Tk = 70,
     .dk = 8, .dv = 8, .causal = true},
    {.rq = 1, .rk = 1, .rv = 1, .lq = {2}, .lk = {2}, .lv = {2}, .Tq = 5, .Tk = 41, .dk = 8,
     .dv = 3, .causal = true},
    {.rq = 1, .rk = 1, .rv = 1, .lq = {2}, .lk = {2}, .lv = {2}, .Tq = 45, .Tk = 7, .dk = 8,
     .dv = 3, .causal = true, .mask = 1},
    {.rq = 2, .rk = 2, .rv = 2, .lq = {2, 2}, .lk = {2, 2}, .lv = {2, 2}, .Tq = 34, .Tk = 34,
     .dk = 4, .dv = 4, .causal = true, .pad = true, .full_row = true, .mask = 2},
    /* views */
    {.rq = 2, .rk = 2, .rv = 2, .lq = {2, 3}, .lk = {2, 3}, .lv = {2, 3}, .Tq = 33, .Tk = 12,
     .dk = 8, .dv = 4, .views = 1, .causal = true},
    {.rq = 1, .lq = {2}, .Tq = 37, .Tk = 37, .dk = 4, .dv = 4, .views = 2, .mask = 3},
    {.rq = 1, .rk = 1, .rv = 1, .lq = {2}, .lk = {2}, .lv = {2}, .Tq = 6, .Tk = 5, .dk = 3,
     .dv = 2, .views = 3},
};
#define N_CASES ((int)(sizeof cases / sizeof cases[0]))

START_TEST(test_fused_matches_unfused)
{
    char what[32];
    snprintf(what, sizeof what, "case %d", _i);
    compare(&cases[_i], TG_F64, 11 + (uint64_t)_i, what);
    compare(&cases[_i], TG_F32, 11 + (uint64_t)_i, what);
}
END_TEST

static uint64_t splitmix(uint64_t *s)
{
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* Random shapes: lead dims broadcast, T up to 80, d up to 40, random masks. */
START_TEST(test_random_shapes)
{
    uint64_t st = 12345 + (uint64_t)_i;
    int n = tu_under_valgrind() ? 2 : 12;
    for (int it = 0; it < n; it++) {
        fa_case c;
        memset(&c, 0, sizeof c);
#define R(m) ((int64_t)(splitmix(&st) % (uint64_t)(m)))
        c.rq = 2;
        c.lq[0] = 1 + R(2);
        c.lq[1] = 1 + R(3);
        c.rk = (int)R(3);
        c.rv = (int)R(3);
        for (int d = 0; d < 2; d++) { /* k, v leads: match q's or broadcast (1) */
            int ik = d + 2 - (c.rk ? c.rk : 2), iv = d + 2 - (c.rv ? c.rv : 2);
            int64_t pk = R(2); /* drawn even when unused: the same cases as before */
            c.lk[d] = pk && ik < 2 ? c.lq[ik] : 1;
            int64_t pv = R(2);
            c.lv[d] = pv && iv < 2 ? c.lq[iv] : 1;
        }
        if (c.rk == 1)
            c.lk[0] = R(2) ? c.lq[1] : 1;
        if (c.rv == 1)
            c.lv[0] = R(2) ? c.lq[1] : 1;
        c.Tq = 1 + R(80);
        c.Tk = 1 + R(80);
        c.dk = 1 + R(40);
        c.dv = 1 + R(40);
        c.mask = (int)R(5);
        c.pad = R(2);
        c.causal = R(2);
        c.full_row = R(3) == 0;
        c.scale = R(2) ? 0 : 0.25;
#undef R
        char what[64];
        snprintf(what, sizeof what, "random %d.%d", _i, it);
        compare(&c, TG_F64, st, what);
        compare(&c, TG_F32, st, what);
    }
}
END_TEST

/* The small-T path (T_k <= 32: ops/flash_attention_kernel.h's fa_small_*) for T = 1..33 (33:
 * the tiled path next to it): T_q != T_k both ways, d_k and d_v with full and partial 16-lane
 * chunks, every mask kind, causal, fully masked rows, a learned additive mask's gradient,
 * MHA-like views, and broadcast k / v (small-T forward, tiled backward). */
START_TEST(test_small_t)
{
    const int64_t T = 1 + _i, T2 = 1 + (T * 7) % 33;
    const int64_t d1 = 1 + (T * 5) % 40, d2 = 1 + (T * 11) % 70;
    if (tu_under_valgrind() && T % 5 != 1 && T < 32)
        return; /* T 1, 6, ..., 31, 32, 33 */
    const fa_case cs[] = {
        {.rq = 1, .rk = 1, .rv = 1, .lq = {3}, .lk = {3}, .lv = {3}, .Tq = T, .Tk = T, .dk = d1,
         .dv = d2},
        {.rq = 2, .rk = 2, .rv = 2, .lq = {2, 2}, .lk = {2, 2}, .lv = {2, 2}, .Tq = T2, .Tk = T,
         .dk = d2, .dv = d1, .causal = true, .pad = true, .full_row = true, .mask = 2},
        {.rq = 2, .rk = 2, .rv = 2, .lq = {2, 2}, .lk = {2, 2}, .lv = {2, 2}, .Tq = T, .Tk = T2,
         .dk = d1, .dv = d1, .mask = 1, .causal = T % 2 == 0, .scale = 0.4},
        {.rq = 2, .rk = 2, .rv = 2, .lq = {1, 2}, .lk = {1, 2}, .lv = {1, 2}, .Tq = T, .Tk = T,
         .dk = d1, .dv = d2, .mask = 3, .full_row = true},
        {.rq = 1, .rk = 1, .rv = 1, .lq = {2}, .lk = {2}, .lv = {2}, .Tq = T2, .Tk = T, .dk = d2,
         .dv = 3, .mask = 4, .causal = true},
        {.rq = 1, .lq = {2}, .Tq = T, .Tk = T, .dk = d1, .dv = d1, .views = 2, .causal = true},
        {.rq = 2, .rk = 2, .rv = 2, .lq = {2, 3}, .lk = {2, 3}, .lv = {2, 3}, .Tq = T, .Tk = T2,
         .dk = d1, .dv = d2, .views = 1, .pad = true},
        {.rq = 2, .rk = 2, .rv = 1, .lq = {2, 3}, .lk = {2, 1}, .lv = {3}, .Tq = T2, .Tk = T,
         .dk = d2, .dv = d1, .mask = 1},
        {.rq = 1, .rk = 1, .rv = 1, .lq = {2}, .lk = {2}, .lv = {2}, .Tq = T, .Tk = T2, .dk = d1,
         .dv = d1, .views = 3, .causal = true},
    };
    for (int k = 0; k < (int)(sizeof cs / sizeof cs[0]); k++) {
        char what[48];
        snprintf(what, sizeof what, "small T %lld case %d", (long long)T, k);
        compare(&cs[k], TG_F64, 300 + (uint64_t)(T * 16 + k), what);
        compare(&cs[k], TG_F32, 300 + (uint64_t)(T * 16 + k), what);
    }
}
END_TEST

/* A fully masked row: output zeros, zero gradients for its query, no NaN anywhere. */
START_TEST(test_fully_masked_rows)
{
    tg_dtype dt = tu_dtypes[_i];
    tg_ctx *ctx = tu_ctx_new();
    tg_ctx_seed(ctx, 5);
    tg_tensor *q = rnd(ctx, dt, TG_DIMS(2, 40, 4), "q", true);
    tg_tensor *k = rnd(ctx, dt, TG_DIMS(2, 36, 4), "k", true);
    tg_tensor *v = rnd(ctx, dt, TG_DIMS(2, 36, 3), "v", true);
    tg_tensor *m = tg_const(ctx, dt, TG_DIMS(40, 36), "m");
    for (int64_t j = 0; j < 36; j++) { /* rows 0 and 33 see nothing; row 1 sees key 35 */
        tg_set(m, j, 1);
        tg_set(m, 33 * 36 + j, 1);
        tg_set(m, 36 + j, j != 35);
    }
    tg_tensor *am = tg_const(ctx, dt, TG_DIMS(2, 40, 36), "am"); /* -inf in batch 1, row 5 */
    for (int64_t j = 0; j < 36; j++)
        tg_set(am, (40 + 5) * 36 + j, -INFINITY);
    tg_tensor *y = tg_flash_attention(ctx, q, k, v, am, TG_MASK_ADDITIVE, m, false, 0);
    tg_graph *g = tu_fwd(ctx, y);
    tu_bwd(ctx, g, y, NULL);
    for (int b = 0; b < 2; b++)
        for (int i = 0; i < 40; i++) {
            bool dead = i == 0 || i == 33 || (b == 1 && i == 5);
            for (int c = 0; c < 3; c++) {
                double o = tg_get(y, (b * 40 + i) * 3 + c);
                ck_assert(!isnan(o));
                if (dead)
                    ck_assert_msg(o == 0, "out[%d][%d] = %g", b, i, o);
                if (i == 1) /* one key: out = v[35] */
                    ck_assert(fabs(o - tg_get(v, (b * 36 + 35) * 3 + c)) < 1e-6);
            }
            for (int c = 0; c < 4; c++) {
                double dq = tg_grad_get(q, (b * 40 + i) * 4 + c);
                ck_assert(!isnan(dq));
                if (dead || i == 1) /* one key: softmax is constant, dq = 0 */
                    ck_assert_msg(fabs(dq) < 1e-12, "dq[%d][%d] = %g", b, i, dq);
            }
        }
    ck_assert_int_eq(tu_count_nan(k, true), 0);
    ck_assert_int_eq(tu_count_nan(v, true), 0);
    /* every row masked: everything zero */
    tg_tensor *all = tg_const(ctx, dt, TG_DIMS(1), "all");
    tg_set(all, 0, 1);
    tg_tensor *z = tg_flash_attention(ctx, q, k, v, all, TG_MASK_BLOCK, NULL, true, 0);
    tg_graph_zero_grad(g);
    tg_graph *g2 = tu_fwd(ctx, z);
    tu_bwd(ctx, g2, z, NULL);
    for (int64_t i = 0; i < tg_tensor_numel(z); i++)
        ck_assert(tg_get(z, i) == 0);
    for (int64_t i = 0; i < tg_tensor_numel(q); i++)
        ck_assert(tg_grad_get(q, i) == 0);
    for (int64_t i = 0; i < tg_tensor_numel(k); i++)
        ck_assert(tg_grad_get(k, i) == 0);
    for (int64_t i = 0; i < tg_tensor_numel(v); i++)
        ck_assert(tg_grad_get(v, i) == 0);
    tu_ctx_free(ctx);
}
END_TEST

/* SDPA and MHA (and so the encoder) with fusion on and off agree; fused graphs hold one
 * flash_attention node per attention and no softmax. */
static bool has_op(tg_graph *g, const char *op)
{
    for (int64_t i = 0; i < tg_graph_size(g); i++)
        if (!strcmp(tg_tensor_op_name(tg_graph_node(g, i)), op))
            return true;
    return false;
}

START_TEST(test_modules_fused_vs_unfused)
{
    tg_dtype dt = tu_dtypes[_i % 2];
    int which = _i / 2 % 4; /* 0 sdpa, 1 mha self with masks, 2 mha cross, 3 encoder */
    bool small = _i >= 8;   /* short sequences: the small-T path */
    const int64_t Tl = small ? 5 : 35, Tk = small ? 6 : 41, Tx = small ? 9 : 40;
    double tol = dt == TG_F64 ? 1e-12 : 1e-5;
    tg_ctx *ctx[2];
    tg_tensor *y[2], *x[2][3];
    int nx = 0;
    for (int f = 0; f < 2; f++) {
        tg_ctx *c = ctx[f] = tu_ctx_new();
        tg_ctx_set_fusion(c, f == 1);
        tg_ctx_seed(c, 77);
        tg_attn_masks mk = {0};
        if (which == 0) {
            x[f][0] = rnd(c, dt, TG_DIMS(2, 3, small ? 4 : 37, 8), "q", true);
            x[f][1] = rnd(c, dt, TG_DIMS(2, 1, Tk, 8), "k", true);
            x[f][2] = rnd(c, dt, TG_DIMS(3, Tk, 5), "v", true);
            nx = 3;
            mk.attn_mask = tg_const(c, dt, TG_DIMS(2, 1, 1, Tk), "pad");
            tg_set(mk.attn_mask, Tk - 1, 1);
            tg_set(mk.attn_mask, Tk + 3, 1);
            mk.attn_mask_kind = TG_MASK_BLOCK;
            mk.causal = true;
            y[f] = tg_sdpa(c, x[f][0], x[f][1], x[f][2], &mk, 0, NULL);
        } else if (which <= 2) {
            tg_mha m;
            ck_assert_int_eq(tg_mha_init(c, &m, dt, 16, 4, NULL), TG_OK);
            tg_fill_uniform(m.in_proj_bias, -0.5, 0.5);
            if (which == 1) {
                x[f][0] = rnd(c, dt, TG_DIMS(2, Tl, 16), "x", true);
                nx = 1;
                mk.key_padding_mask = tg_const(c, dt, TG_DIMS(2, Tl), "kpm");
                tg_set(mk.key_padding_mask, Tl + 0, 1); /* batch 1, row 0: fully masked */
                tg_set(mk.key_padding_mask, Tl - 1, 1);
                mk.attn_mask = tg_const(c, dt, TG_DIMS(2, Tl, Tl), "am");
                tg_fill_uniform(mk.attn_mask, -1, 1);
                mk.attn_mask_kind = TG_MASK_ADDITIVE;
                mk.causal = true;
                y[f] = tg_mha_forward(c, &m, x[f][0], x[f][0], x[f][0], &mk, NULL);
            } else {
                x[f][0] = rnd(c, dt, TG_DIMS(3, small ? 3 : 7, 16), "query", true);
                x[f][1] = rnd(c, dt, TG_DIMS(3, Tx, 16), "key", true);
                x[f][2] = rnd(c, dt, TG_DIMS(3, Tx, 16), "value", true);
                nx = 3;
                y[f] = tg_mha_forward(c, &m, x[f][0], x[f][1], x[f][2], NULL, NULL);
            }
        } else {
            tg_encoder_config cfg = tg_encoder_config_default(16, 2);
            cfg.d_ff = 24;
            tg_encoder_layer l;
            ck_assert_int_eq(tg_encoder_layer_init(c, &l, dt, &cfg, NULL), TG_OK);
            x[f][0] = rnd(c, dt, TG_DIMS(2, small ? 5 : 33, 16), "x", true);
            nx = 1;
            mk.causal = true;
            y[f] = tg_encoder_layer_forward(c, &l, x[f][0], &mk);
        }
        ck_assert_msg(y[f] != NULL, "%s", tg_ctx_message(c));
        tg_graph *g = tu_fwd(c, y[f]);
        ck_assert(has_op(g, "flash_attention") == (f == 1));
        ck_assert(has_op(g, "softmax") == (f == 0));
        tg_tensor *dy = tg_const(c, dt, tg_tensor_rank(y[f]), tg_tensor_shape(y[f]), "dy");
        for (int64_t i = 0; i < tg_tensor_numel(dy); i++) /* not 1: layer norm's sum is flat */
            tg_set(dy, i, sin(0.37 * (double)i + 0.1));
        ck_assert_int_eq(tg_graph_backward(g, y[f], dy), TG_OK);
    }
    bool nan = false;
    double e = rel_err(tg_tensor_data(y[1]), tg_tensor_data(y[0]), tg_tensor_numel(y[0]), dt,
                       &nan);
    ck_assert_msg(!nan && e <= tol, "module %d output: %g", which, e);
    for (int i = 0; i < nx; i++) {
        e = rel_err(tg_tensor_grad(x[1][i]), tg_tensor_grad(x[0][i]),
                    tg_tensor_numel(x[0][i]), dt, &nan);
        ck_assert_msg(!nan && e <= tol, "module %d d%s: %g", which, tg_tensor_name(x[0][i]), e);
    }
    /* every parameter's gradient too */
    for (int64_t p = 0; p < tg_ctx_n_params(ctx[0]); p++) {
        tg_tensor *p0 = tg_ctx_param(ctx[0], p), *p1 = tg_ctx_param(ctx[1], p);
        e = rel_err(tg_tensor_grad(p1), tg_tensor_grad(p0), tg_tensor_numel(p0), dt, &nan);
        ck_assert_msg(!nan && e <= tol, "module %d d%s: %g", which, tg_tensor_name(p0), e);
    }
    tu_ctx_free(ctx[0]);
    tu_ctx_free(ctx[1]);
}
END_TEST

/* Bitwise identical for 1, 2, 3 and 8 threads, shapes big enough for the parallel paths. */
static const fa_case thread_cases[] = {
    {.rq = 2, .rk = 2, .rv = 2, .lq = {2, 3}, .lk = {2, 3}, .lv = {2, 3}, .Tq = 70, .Tk = 45,
     .dk = 16, .dv = 12, .causal = true, .mask = 1, .pad = true},
    {.rq = 2, .rk = 2, .rv = 1, .lq = {2, 3}, .lk = {2, 1}, .lv = {3}, .Tq = 40, .Tk = 66,
     .dk = 8, .dv = 8, .mask = 3, .views = 0},
    {.rq = 2, .rk = 2, .rv = 2, .lq = {2, 4}, .lk = {2, 4}, .lv = {2, 4}, .Tq = 64, .Tk = 64,
     .dk = 16, .dv = 16, .views = 1, .causal = true},
    /* the small-T path (T_k <= 32) with enough batches to fork: 128 x 20 x 20 x 32 */
    {.rq = 2, .rk = 2, .rv = 2, .lq = {4, 32}, .lk = {4, 32}, .lv = {4, 32}, .Tq = 20, .Tk = 20,
     .dk = 16, .dv = 16, .causal = true, .mask = 1, .pad = true, .full_row = true},
    {.rq = 1, .lq = {96}, .Tq = 12, .Tk = 12, .dk = 40, .dv = 40, .views = 2, .mask = 3},
};

START_TEST(test_thread_invariance)
{
    tg_dtype dt = tu_dtypes[_i % 2];
    const fa_case *c = &thread_cases[_i / 2];
    static const int nts[] = {1, 2, 3, 8};
    size_t es = tg_dtype_size(dt);
    char *ref = NULL;
    size_t nref = 0;
    for (int t = 0; t < 4; t++) {
        tg_ctx *ctx = tu_ctx_new();
        tg_ctx_set_threads(ctx, nts[t]);
        tg_ctx_seed(ctx, 9);
        built b = build(ctx, dt, c, true);
        tg_graph *g = tu_fwd(ctx, b.y);
        tg_tensor *dy = tg_const(ctx, dt, tg_tensor_rank(b.y), tg_tensor_shape(b.y), "dy");
        for (int64_t i = 0; i < tg_tensor_numel(dy); i++)
            tg_set(dy, i, cos(0.23 * (double)i));
        ck_assert_int_eq(tg_graph_backward(g, b.y, dy), TG_OK);
        size_t n = (size_t)tg_tensor_numel(b.y) * es;
        for (int l = 0; l < b.n; l++)
            n += (size_t)tg_tensor_numel(b.leaves[l]) * es;
        char *buf = malloc(n), *p = buf;
        memcpy(p, tg_tensor_data(b.y), (size_t)tg_tensor_numel(b.y) * es);
        p += (size_t)tg_tensor_numel(b.y) * es;
        for (int l = 0; l < b.n; l++) {
            memcpy(p, tg_tensor_grad(b.leaves[l]), (size_t)tg_tensor_numel(b.leaves[l]) * es);
            p += (size_t)tg_tensor_numel(b.leaves[l]) * es;
        }
        if (!ref) {
            ref = buf;
            nref = n;
        } else {
            ck_assert_uint_eq(n, nref);
            ck_assert_msg(memcmp(ref, buf, n) == 0, "1 and %d threads differ", nts[t]);
            free(buf);
        }
        tu_ctx_free(ctx);
    }
    free(ref);
}
END_TEST

/* Build errors: status and message, nothing aborts. */
START_TEST(test_errors)
{
    tg_ctx *ctx = tu_ctx_new();
    tg_tensor *q = tg_input(ctx, TG_F32, TG_DIMS(2, 3, 4), "q");
    tg_tensor *k = tg_input(ctx, TG_F32, TG_DIMS(2, 5, 4), "k");
    tg_tensor *v = tg_input(ctx, TG_F32, TG_DIMS(2, 5, 3), "v");
    tg_tensor *k3 = tg_input(ctx, TG_F32, TG_DIMS(2, 5, 3), "k3");
    tg_tensor *v4 = tg_input(ctx, TG_F32, TG_DIMS(2, 4, 3), "v4");
    tg_tensor *b3 = tg_input(ctx, TG_F32, TG_DIMS(3, 5, 4), "b3");
    tg_tensor *q1 = tg_input(ctx, TG_F32, TG_DIMS(4), "q1");
    tg_tensor *qd = tg_input(ctx, TG_F64, TG_DIMS(2, 3, 4), "qd");
    tg_tensor *bad = tg_const(ctx, TG_F32, TG_DIMS(3, 4), "bad");
    ck_assert_ptr_null(tg_flash_attention(ctx, q, k3, v, NULL, 0, NULL, false, 0));
    tu_assert_error(ctx, TG_ERR_SHAPE, "tg_flash_attention: need q (..., T_q, d_k)");
    tg_ctx_clear_error(ctx);
    ck_assert_ptr_null(tg_flash_attention(ctx, q, k, v4, NULL, 0, NULL, false, 0));
    tu_assert_error(ctx, TG_ERR_SHAPE, "v (2, 4, 3)");
    tg_ctx_clear_error(ctx);
    ck_assert_ptr_null(tg_flash_attention(ctx, q1, k, v, NULL, 0, NULL, false, 0));
    tu_assert_error(ctx, TG_ERR_SHAPE, "q (4)");
    tg_ctx_clear_error(ctx);
    ck_assert_ptr_null(tg_flash_attention(ctx, q, b3, v, NULL, 0, NULL, false, 0));
    tu_assert_error(ctx, TG_ERR_SHAPE, "leading dims do not broadcast");
    tg_ctx_clear_error(ctx);
    ck_assert_ptr_null(tg_flash_attention(ctx, q, k, v, bad, TG_MASK_BLOCK, NULL, false, 0));
    tu_assert_error(ctx, TG_ERR_SHAPE, "mask (3, 4) does not broadcast to the scores (2, 3, 5)");
    tg_ctx_clear_error(ctx);
    ck_assert_ptr_null(tg_flash_attention(ctx, q, k, v, NULL, 0, bad, false, 0));
    tu_assert_error(ctx, TG_ERR_SHAPE, "block_mask (3, 4)");
    tg_ctx_clear_error(ctx);
    ck_assert_ptr_null(tg_flash_attention(ctx, q, k, v, k, (tg_mask_kind)7, NULL, false, 0));
    tu_assert_error(ctx, TG_ERR_ARG, "unknown mask kind 7");
    tg_ctx_clear_error(ctx);
    ck_assert_ptr_null(tg_flash_attention(ctx, q, k, v, NULL, 0, NULL, false, NAN));
    tu_assert_error(ctx, TG_ERR_ARG, "scale nan is not finite");
    tg_ctx_clear_error(ctx);
    ck_assert_ptr_null(tg_flash_attention(ctx, qd, k, v, NULL, 0, NULL, false, 0));
    tu_assert_error(ctx, TG_ERR_DTYPE, NULL);
    tg_ctx_clear_error(ctx);
    /* a NULL operand (a failed builder upstream) returns NULL without a new error */
    ck_assert_ptr_null(tg_flash_attention(ctx, NULL, k, v, NULL, 0, NULL, false, 0));
    ck_assert_ptr_null(tg_flash_attention(NULL, q, k, v, NULL, 0, NULL, false, 0));
    /* the output: (..., T_q, d_v), the op's name */
    tg_tensor *y = tg_flash_attention(ctx, q, k, v, NULL, 0, NULL, true, 0);
    ck_assert_ptr_nonnull(y);
    tu_expect_shape(y, TG_DIMS(2, 3, 3));
    ck_assert_str_eq(tg_tensor_op_name(y), "flash_attention");
    tu_ctx_free(ctx);
}
END_TEST

/* The attention weights are never stored: the fused graph's arena is smaller than the
 * unfused one's by at least the (B, H, T, T) weights. */
START_TEST(test_memory_smaller)
{
    size_t arena[2];
    for (int f = 0; f < 2; f++) {
        tg_ctx *ctx = tu_ctx_new();
        tg_ctx_seed(ctx, 1);
        fa_case c = {.rq = 2, .rk = 2, .rv = 2, .lq = {2, 4}, .lk = {2, 4}, .lv = {2, 4},
                     .Tq = 128, .Tk = 128, .dk = 16, .dv = 16, .causal = true};
        built b = build(ctx, TG_F32, &c, f == 1);
        tg_tensor *loss = tg_sum_all(ctx, b.y);
        tg_graph *g = tg_graph_new(ctx, &loss, 1);
        ck_assert_ptr_nonnull(g);
        tg_memory_report r;
        ck_assert_int_eq(tg_graph_memory(g, &r), TG_OK);
        arena[f] = r.arena;
        tu_ctx_free(ctx);
    }
    size_t weights = (size_t)2 * 4 * 128 * 128 * sizeof(float);
    ck_assert_msg(arena[1] + weights <= arena[0], "fused arena %zu, unfused %zu", arena[1],
                  arena[0]);
}
END_TEST

static Suite *fa_suite(void)
{
    Suite *s = suite_create("flash_attention");
    TCase *tc = tcase_create("parity");
    tcase_add_checked_fixture(tc, NULL, tu_ctx_teardown);
    tcase_set_timeout(tc, 240);
    tcase_add_loop_test(tc, test_fused_matches_unfused, 0, N_CASES);
    tcase_add_loop_test(tc, test_random_shapes, 0, 4);
    tcase_add_loop_test(tc, test_small_t, 0, 33);
    tcase_add_loop_test(tc, test_fully_masked_rows, 0, 2);
    tcase_add_loop_test(tc, test_modules_fused_vs_unfused, 0, 16);
    tcase_add_test(tc, test_errors);
    tcase_add_test(tc, test_memory_smaller);
    suite_add_tcase(s, tc);
    tc = tcase_create("threads");
    tcase_add_checked_fixture(tc, NULL, tu_ctx_teardown);
    tcase_set_timeout(tc, 240);
    tcase_add_loop_test(tc, test_thread_invariance, 0,
                        2 * (int)(sizeof thread_cases / sizeof thread_cases[0]));
    suite_add_tcase(s, tc);
    return s;
}

int main(void) { return tu_run(fa_suite()); }
