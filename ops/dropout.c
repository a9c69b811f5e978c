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

/* The i-th output of a splitmix64 stream seeded with k (the mixing function of tg__splitmix64). */
static inline uint64_t mask_bits(uint64_t k, int64_t i)
{
    uint64_t z = k + (uint64_t)(i + 1) * 0x9e3779b97f4a7c15u;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9u;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebu;
    return z ^ (z >> 31);
}

#define DEFINE_DROPOUT(T, SUF)                                                                 \
    static void apply_##SUF(tg_tensor *y, const T *in, T *out, bool acc)                       \
    {                                                                                          \
        const unsigned char *keep = y->saved;                                                  \
        T s = (T)y->p.dropout.scale;                                                           \
        int nt = tg__threads(y->ctx);                                                          \
        TG_OMP_FOR(nt, y->numel > TG_PAR_MIN)                                                  \
        for (int64_t i = 0; i < y->numel; i++) {                                               \
            T v = keep[i] ? in[i] * s : 0;                                                     \
            out[i] = acc && out != in ? out[i] + v : acc ? (T)0 + v : v; /* in place: write */ \
        }                                                                                      \
    }                                                                                          \
    /* Forward in training mode: draw the mask and apply it in one pass. */                   \
    static void drop_##SUF(tg_tensor *y, const T *in, T *out, uint64_t k, uint64_t thr)        \
    {                                                                                          \
        unsigned char *keep = y->saved;                                                        \
        T s = (T)y->p.dropout.scale;                                                           \
        int nt = tg__threads(y->ctx);                                                          \
        TG_OMP_FOR(nt, y->numel > TG_PAR_MIN / 8)                                              \
        for (int64_t i = 0; i < y->numel; i++) {                                               \
            unsigned char kp = (mask_bits(k, i) >> 11) >= thr;                                 \
            keep[i] = kp;                                                                      \
            out[i] = kp ? in[i] * s : 0;                                                       \
        }                                                                                      \
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
