/*
 * dropout_kernel.h - the kernels of ops/dropout.c (inverted dropout) for one float type. A
 * template header: dropout.c includes it once per dtype with T (float / double) and SUF (f32 /
 * f64) defined; FN(name) is name_f32 or name_f64. No include guard. The math: dropout.c.
 */
#define FN(name) TG__CAT(name, SUF)

/* out = in * keep * s (acc: out += that; in place when out == in). */
TG_SIMD_CLONES static void FN(dropout_apply_range)(int64_t lo, int64_t hi,
                                                   const unsigned char *keep, T s, const T *in,
                                                   T *out, int mode)
{
    if (mode == 0) /* write */
        for (int64_t i = lo; i < hi; i++)
            out[i] = keep[i] ? in[i] * s : (T)0;
    else if (mode == 1) /* accumulate in place: dx = 0 + keep dy s */
        for (int64_t i = lo; i < hi; i++)
            out[i] = (T)0 + (keep[i] ? in[i] * s : (T)0);
    else
        for (int64_t i = lo; i < hi; i++)
            out[i] += keep[i] ? in[i] * s : (T)0;
}

static void FN(apply)(const tg__call *c, const T *in, T *out, bool acc)
{
    const unsigned char *keep = (const unsigned char *)c->saved + SAVED_HEAD;
    T s = (T) * (const double *)c->saved;
    int mode = !acc ? 0 : out == in ? 1 : 2;
    TG_PAR_RANGE(c->nt, c->numel * 2 * (int64_t)sizeof(T) > TG_PAR_BYTES,
                 c->numel, 64, FN(dropout_apply_range)(lo, hi, keep, s, in, out, mode));
}

/* Forward in training mode: keep_i from (k, i) (the rule in dropout.c's header) and y_i in one
 * pass. */
TG_SIMD_CLONES static void FN(dropout_draw_range)(int64_t lo, int64_t hi, uint64_t k, uint64_t thr,
                                                  T s, const T *in, T *out, unsigned char *keep)
{
    for (int64_t i = lo; i < hi; i++) {
        uint64_t z = k + (uint64_t)(i + 1) * 0x9e3779b97f4a7c15u;
        z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9u;
        z = (z ^ (z >> 27)) * 0x94d049bb133111ebu;
        z ^= z >> 31;
        unsigned char kp = (z >> 11) >= thr;
        keep[i] = kp;
        out[i] = kp ? in[i] * s : (T)0;
    }
}

static void FN(drop)(const tg__call *c, const T *in, T *out, uint64_t k, uint64_t thr)
{
    T s = (T) * (const double *)c->saved;
    unsigned char *keep = (unsigned char *)c->saved + SAVED_HEAD;
    TG_PAR_RANGE(c->nt, c->numel * 8 > TG_PAR_BYTES, c->numel, 64,
                 FN(dropout_draw_range)(lo, hi, k, thr, s, in, out, keep));
}

/* Reads only the record: numel, p, training and the RNG stream (no tensor). */
tg_status FN(tg__dropout_forward)(const tg__call *c)
{
    unsigned char *keep = (unsigned char *)c->saved + SAVED_HEAD;
    double *scale = c->saved;
    double p = c->p->dropout.p;
    if (!c->training || p == 0) { /* identity: backward will pass dy through */
        *scale = 1.0;
        memset(keep, 1, (size_t)c->numel);
        if (c->out != c->in[0]) /* (in place, the values are already there) */
            memcpy(c->out, c->in[0], (size_t)c->numel * sizeof(T));
        return TG_OK;
    }
    *scale = 1.0 / (1.0 - p);
    /* threshold on the top 53 bits: drop when u < p */
    uint64_t thr = (uint64_t)(p * 0x1.0p53), k = tg__rng_next(c->rng);
    FN(drop)(c, c->in[0], c->out, k, thr);
    return TG_OK;
}

/* Uses the mask and scale of the last forward run, whatever the mode is now. */
tg_status FN(tg__dropout_backward)(const tg__call *c)
{
    if (c->dx[0])
        FN(apply)(c, c->dy, c->dx[0], true);
    return TG_OK;
}

#undef FN
