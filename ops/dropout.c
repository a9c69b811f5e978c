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
 * modes between forward and backward changes nothing). saved: keep mask (numel bytes).
 */
#include "registry.h"
#include "vec.h"

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
    y->p.dropout.scale = 1.0;
    if (!tg__op_save_n(y, x->numel, 1, 0))
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
    static void apply_##SUF(tg_tensor *y, const T *in, T *out, bool acc)                       \
    {                                                                                          \
        const unsigned char *keep = y->saved;                                                  \
        T s = (T)y->p.dropout.scale;                                                           \
        int mode = !acc ? 0 : out == in ? 1 : 2;                                               \
        TG_PAR_RANGE(tg__threads(y->ctx), y->numel * 2 * (int64_t)sizeof(T) > TG_PAR_BYTES,   \
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
    static void drop_##SUF(tg_tensor *y, const T *in, T *out, uint64_t k, uint64_t thr)        \
    {                                                                                          \
        T s = (T)y->p.dropout.scale;                                                           \
        unsigned char *keep = y->saved;                                                        \
        TG_PAR_RANGE(tg__threads(y->ctx), y->numel * 8 > TG_PAR_BYTES, y->numel, 64,           \
                     dropout_draw_range_##SUF(lo, hi, k, thr, s, in, out, keep));              \
    }
DEFINE_DROPOUT(float, f32)
DEFINE_DROPOUT(double, f64)

void tg__dropout_forward(tg_tensor *y)
{
    unsigned char *keep = y->saved;
    double p = y->p.dropout.p;
    if (!y->ctx->training || p == 0) { /* identity: backward will pass dy through */
        y->p.dropout.scale = 1.0;
        memset(keep, 1, (size_t)y->numel);
        if (y->data != y->src[0]->data) /* (in place, the values are already there) */
            memcpy(y->data, y->src[0]->data, (size_t)y->numel * tg_dtype_size(y->dtype));
        return;
    }
    y->p.dropout.scale = 1.0 / (1.0 - p);
    /* threshold on the top 53 bits: drop when u < p */
    uint64_t thr = (uint64_t)(p * 0x1.0p53), k = tg_rng_u64(y->ctx);
    if (y->dtype == TG_F32)
        drop_f32(y, y->src[0]->data, y->data, k, thr);
    else
        drop_f64(y, y->src[0]->data, y->data, k, thr);
}

/* Uses the mask and scale of the last forward run, whatever the mode is now. */
void tg__dropout_backward(tg_tensor *y)
{
    tg_tensor *x = y->src[0];
    if (!x->grad)
        return;
    if (y->dtype == TG_F32)
        apply_f32(y, y->grad, x->grad, true);
    else
        apply_f64(y, y->grad, x->grad, true);
}
