/*
 * optim_update_kernel.h - Adam/AdamW and SGD updates of src/train/optim.c for one float type
 * (adam_range, adam_bad_range, adam, sgd). A template header: optim.c includes it once per
 * instantiation with T, SUF defined. No include guard.
 */
#define FN(name) TG__CAT(name, SUF)

/* Adam/AdamW on elements [lo, hi): branch-free per element (the optimizer kind and weight-decay
 * mode are loop-invariant), compiled per SIMD level; the same arithmetic as the scalar form, so
 * every clone and thread count gives the same bits. */
TG_SIMD_CLONES static void FN(adam_range)(int64_t lo, int64_t hi, T step, T bc2s, T b1, T b2, T wd,
                                          T eps, T decay, bool decoupled, T *p, const T *g, T *m,
                                          T *v)
{
    if (decoupled) {
        for (int64_t i = lo; i < hi; i++) {
            T gi = g[i];
            p[i] *= decay;
            m[i] = m[i] * b1 + (1 - b1) * gi;
            v[i] = v[i] * b2 + (1 - b2) * gi * gi;
            T denom = sqrt(v[i]) / bc2s + eps;
            p[i] -= step * (m[i] / denom);
        }
    } else {
        for (int64_t i = lo; i < hi; i++) {
            T gi = g[i];
            if (wd != 0)
                gi += wd * p[i];
            m[i] = m[i] * b1 + (1 - b1) * gi;
            v[i] = v[i] * b2 + (1 - b2) * gi * gi;
            T denom = sqrt(v[i]) / bc2s + eps;
            p[i] -= step * (m[i] / denom);
        }
    }
}
/* The same arithmetic without writing: 1 if any element's new p, m or v is not finite. */
TG_SIMD_CLONES static int FN(adam_bad_range)(int64_t lo, int64_t hi, T step, T bc2s, T b1, T b2,
                                             T wd, T eps, T decay, bool decoupled, const T *p,
                                             const T *g, const T *m, const T *v)
{
    int bad = 0;
    for (int64_t i = lo; i < hi; i++) {
        T gi = g[i], pi = p[i];
        if (decoupled)
            pi *= decay;
        else if (wd != 0)
            gi += wd * pi;
        T mi = m[i] * b1 + (1 - b1) * gi;
        T vi = v[i] * b2 + (1 - b2) * gi * gi;
        T denom = sqrt(vi) / bc2s + eps;
        pi -= step * (mi / denom);
        bad |= !isfinite(pi) | !isfinite(mi) | !isfinite(vi);
    }
    return bad;
}
/* Adam or AdamW over n elements; check: only return the index of the first element whose
 * update would not be finite (-1: none), changing nothing. govs: the context's governors. */
static int64_t FN(adam)(tg__govs *govs, int nt, const tg_optim_config *c, double lr, int64_t t,
                        int64_t n, T *p, const T *g, T *m, T *v, bool check)
{
    double bc1 = 1.0 - pow(c->beta1, (double)t), bc2 = 1.0 - pow(c->beta2, (double)t);
    T step = (T)(lr / bc1), bc2s = (T)sqrt(bc2), b1 = (T)c->beta1, b2 = (T)c->beta2;
    T wd = (T)c->weight_decay, eps = (T)c->eps, decay = (T)(1.0 - lr * c->weight_decay);
    bool decoupled = c->kind == TG_OPTIM_ADAMW;
    if (check) {
        /* Blocks of CHECK_BLOCK elements, OR-ed (an integer reduction: exact, any order).
         * Then, only on failure, the first bad element, serially. */
        int64_t nb = (n + CHECK_BLOCK - 1) / CHECK_BLOCK;
        int bad = 0;
        OMP_FOR_OR(nt, n * 4 * (int64_t)sizeof(T) > TG_PAR_BYTES, bad)
        for (int64_t b = 0; b < nb; b++)
            bad |= FN(adam_bad_range)(b * CHECK_BLOCK, b + 1 < nb ? (b + 1) * CHECK_BLOCK : n, step,
                                      bc2s, b1, b2, wd, eps, decay, decoupled, p, g, m, v);
        for (int64_t i = 0; bad && i < n; i++)
            if (FN(adam_bad_range)(i, i + 1, step, bc2s, b1, b2, wd, eps, decay, decoupled, p, g, m,
                                   v))
                return i;
        return -1;
    }
    /* Race-free: element i of p, m, v is owned by one range. (g is never NULL: a
     * parameter without a gradient is not stepped.) */
    TG_PAR_RANGE_IN(
        govs, nt, n * 4 * (int64_t)sizeof(T) > TG_PAR_BYTES, n, 16,
        FN(adam_range)(lo, hi, step, bc2s, b1, b2, wd, eps, decay, decoupled, p, g, m, v));
    return -1;
}
static int64_t FN(sgd)(int nt, const tg_optim_config *c, double lr, int64_t t, int64_t n, T *p,
                       const T *g, T *buf, bool check)
{
    T wd = (T)c->weight_decay, mom = (T)c->momentum, damp = (T)(1.0 - c->dampening);
    T l = (T)lr;
    if (check) { /* as adam: the first element whose update would not be finite */
        int bad = 0;
        OMP_FOR_OR(nt, n > TG_PAR_MIN / 8, bad)
        for (int64_t i = 0; i < n; i++) {
            T d = (g ? g[i] : 0) + wd * p[i], b = 0;
            if (buf) {
                b = t == 1 ? d : mom * buf[i] + damp * d;
                d = c->nesterov ? d + mom * b : b;
            }
            bad |= !isfinite(p[i] - l * d) | !isfinite(b);
        }
        for (int64_t i = 0; bad && i < n; i++) {
            T d = (g ? g[i] : 0) + wd * p[i], b = 0;
            if (buf) {
                b = t == 1 ? d : mom * buf[i] + damp * d;
                d = c->nesterov ? d + mom * b : b;
            }
            if (!isfinite(p[i] - l * d) || !isfinite(b))
                return i;
        }
        return -1;
    }
    TG_OMP_FOR(nt, n > TG_PAR_MIN / 8)
    for (int64_t i = 0; i < n; i++) {
        T d = (g ? g[i] : 0) + wd * p[i];
        if (buf) {
            buf[i] = t == 1 ? d : mom * buf[i] + damp * d;
            d = c->nesterov ? d + mom * buf[i] : buf[i];
        }
        p[i] -= l * d;
    }
    return -1;
}

#undef FN
