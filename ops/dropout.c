/*
 * dropout.c - inverted dropout (Srivastava et al. 2014; PyTorch nn.Dropout).
 *
 * Training mode: keep_i ~ Bernoulli(1 - p);  y = x * keep / (1 - p)
 *                The mask is counter-based: one draw k from the context RNG per forward run,
 *                then u_i = splitmix64's output for the state k + (i + 1) * 0x9e3779b97f4a7c15
 *                (Steele et al. 2014: the i-th output of a splitmix64 stream seeded with k), and
 *                keep_i = (u_i >> 11) >= floor(p * 2^53). Element i's draw depends on k and i
 *                only, so threads generate the mask in parallel and it does not depend on the
 *                thread count; the context RNG advances by one draw per run.
 *                dx += dy * keep / (1 - p)
 * Eval mode (tg_ctx_set_training(ctx, false)) or p = 0: y = x, dx += dy.
 * The mode is read at each forward run; backward uses the mask and scale of that run (switching
 * modes between forward and backward changes nothing). saved: that run's scale (a double, in
 * a 64-byte header), then the keep mask (numel bytes).
 */
#include "registry.h"
#include "vec.h"

#define SAVED_HEAD 64 /* bytes before the mask in the saved values: the scale */

tg_tensor *tg_dropout(tg_ctx *ctx, tg_tensor *x, double p)
{
    static const char *fn = "tg_dropout";
    if (!tg__check_srcs(ctx, fn, 1, &x))
        return NULL;
    if (!(p >= 0 && p < 1))
        return tg__err(ctx, TG_ERR_ARG, fn, "p = %g must be in [0, 1)", p);
    tg_tensor *y = tg__op_new(ctx, TG_OP_DROPOUT, x->dtype, x->rank, x->shape, 1, &x);
    if (!y)
        return NULL;
    y->p.dropout.p = p;
    if (!tg__op_save_n(y, x->numel, 1, SAVED_HEAD))
        return NULL;
    return y;
}

#define DEFINE_DROPOUT(T, SUF)                                                                 \
    /* out = in * keep * s (acc: out += that; in place when out == in). */                     \
    TG_SIMD_CLONES static void dropout_apply_range_##SUF(int64_t lo, int64_t hi,               \
                                                         const unsigned char *keep, T s,       \
                                                         const T *in, T *out, int mode)        \
    {                                                                                          \
        if (mode == 0) /* write */                                                             \
            for (int64_t i = lo; i < hi; i++)                                                  \
                out[i] = keep[i] ? in[i] * s : (T)0;                                           \
        else if (mode == 1) /* accumulate in place: dx = 0 + keep dy s */                      \
            for (int64_t i = lo; i < hi; i++)                                                  \
                out[i] = (T)0 + (keep[i] ? in[i] * s : (T)0);                                  \
        else                                                                                   \
            for (int64_t i = lo; i < hi; i++)                                                  \
                out[i] += keep[i] ? in[i] * s : (T)0;                                          \
    }                                                                                          \
    static void apply_##SUF(const tg__call *c, const T *in, T *out, bool acc)                       \
    {                                                                                          \
        const tg_tensor *y = c->y;                                                             \
        const unsigned char *keep = (const unsigned char *)c->saved + SAVED_HEAD;              \
        T s = (T) * (const double *)c->saved;                                                  \
        int mode = !acc ? 0 : out == in ? 1 : 2;                                               \
        TG_PAR_RANGE(c->nt, y->numel * 2 * (int64_t)sizeof(T) > TG_PAR_BYTES,   \
                     y->numel, 64, dropout_apply_range_##SUF(lo, hi, keep, s, in, out, mode)); \
    }                                                                                          \
    /* Forward in training mode: keep_i from (k, i) (the header's rule) and y_i in one pass. */ \
    TG_SIMD_CLONES static void dropout_draw_range_##SUF(int64_t lo, int64_t hi, uint64_t k,    \
                                                        uint64_t thr, T s, const T *in,        \
                                                        T *out, unsigned char *keep)           \
    {                                                                                          \
        for (int64_t i = lo; i < hi; i++) {                                                    \
            uint64_t z = k + (uint64_t)(i + 1) * 0x9e3779b97f4a7c15u;                          \
            z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9u;                                         \
            z = (z ^ (z >> 27)) * 0x94d049bb133111ebu;                                         \
            z ^= z >> 31;                                                                      \
            unsigned char kp = (z >> 11) >= thr;                                               \
            keep[i] = kp;                                                                      \
            out[i] = kp ? in[i] * s : (T)0;                                                    \
        }                                                                                      \
    }                                                                                          \
    static void drop_##SUF(const tg__call *c, const T *in, T *out, uint64_t k, uint64_t thr)        \
    {                                                                                          \
        const tg_tensor *y = c->y;                                                             \
        T s = (T) * (const double *)c->saved;                                                  \
        unsigned char *keep = (unsigned char *)c->saved + SAVED_HEAD;                          \
        TG_PAR_RANGE(c->nt, y->numel * 8 > TG_PAR_BYTES, y->numel, 64,           \
                     dropout_draw_range_##SUF(lo, hi, k, thr, s, in, out, keep));              \
    }
DEFINE_DROPOUT(float, f32)
DEFINE_DROPOUT(double, f64)

tg_status tg__dropout_forward(const tg__call *c)
{
    const tg_tensor *y = c->y;
    unsigned char *keep = (unsigned char *)c->saved + SAVED_HEAD;
    double *scale = c->saved;
    double p = y->p.dropout.p;
    if (!c->ctx->training || p == 0) { /* identity: backward will pass dy through */
        *scale = 1.0;
        memset(keep, 1, (size_t)y->numel);
        if (c->out != c->in[0]) /* (in place, the values are already there) */
            memcpy(c->out, c->in[0], (size_t)y->numel * tg_dtype_size(y->dtype));
        return TG_OK;
    }
    *scale = 1.0 / (1.0 - p);
    /* threshold on the top 53 bits: drop when u < p */
    uint64_t thr = (uint64_t)(p * 0x1.0p53), k = tg_rng_u64(c->ctx);
    if (y->dtype == TG_F32)
        drop_f32(c, c->in[0], c->out, k, thr);
    else
        drop_f64(c, c->in[0], c->out, k, thr);
    return TG_OK;
}

/* Uses the mask and scale of the last forward run, whatever the mode is now. */
tg_status tg__dropout_backward(const tg__call *c)
{
    const tg_tensor *y = c->y;
    if (!c->dx[0])
        return TG_OK;
    if (y->dtype == TG_F32)
        apply_f32(c, c->dy, c->dx[0], true);
    else
        apply_f64(c, c->dy, c->dx[0], true);
    return TG_OK;
}
