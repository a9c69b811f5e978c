/*
 * kv_attention_kernel.h - the kernels of ops/kv_attention.c (attention over a KV cache) for one
 * float type. A template header: kv_attention.c includes it once per dtype with T (float / double)
 * and SUF (f32 / f64) defined; FN(name) is name_f32 or name_f64. No include guard. The math:
 * kv_attention.c.
 */
#define FN(name) TG__CAT(name, SUF)

/* Item (b, h): write the new keys and values, then every new query row. The sums run in
 * the order of the scalar loops (scores: over c for each key; outputs: over keys for each
 * c, a multiply then an add); c and the keys are taken four at a time only so that each
 * pass reads and writes s and acc a quarter as often. */
TG_SIMD_CLONES static void FN(kv_item)(const tg__call *call, int64_t b, int64_t h, int64_t pos,
                                       T *s, T *acc)
{
    const int64_t *qst = call->src_stride[KV_Q], *kst = call->src_stride[KV_K];
    const int64_t *vst = call->src_stride[KV_V];
    int64_t H = call->shape[1], n = call->shape[2], dk = call->src_shape[KV_Q][3];
    int64_t dv = call->src_shape[KV_V][3];
    int64_t L = call->src_shape[KV_VC][2];
    T scale = (T)call->p->kv_attn.scale;
    const T *Q = (const T *)call->in[KV_Q] + b * qst[0] + h * qst[1];
    const T *Kn = (const T *)call->in[KV_K] + b * kst[0] + h * kst[1];
    const T *Vn = (const T *)call->in[KV_V] + b * vst[0] + h * vst[1];
    /* the cache leaves: written at rows pos.. (the one op that writes a source) */
    T *Kt = (T *)call->in[KV_KC] + (b * H + h) * dk * L; /* (dk, L) */
    T *Vm = (T *)call->in[KV_VC] + (b * H + h) * L * dv; /* (L, dv) */
    T *O = (T *)call->out + (b * H + h) * n * dv;   /* (n, dv) */
    for (int64_t i = 0; i < n; i++) {
        const T *kr = Kn + i * kst[2], *vr = Vn + i * vst[2];
        for (int64_t c = 0; c < dk; c++)
            Kt[c * L + pos + i] = kr[c];
        memcpy(Vm + (pos + i) * dv, vr, sizeof(T) * (size_t)dv);
    }
    for (int64_t i = 0; i < n; i++) {
        const T *qr = Q + i * qst[2];
        int64_t len = pos + i + 1; /* keys 0..pos+i */
        {
            T q0 = qr[0];
            for (int64_t j = 0; j < len; j++)
                s[j] = q0 * Kt[j];
        }
        int64_t c = 1;
        for (; c + 4 <= dk; c += 4) {
            T q0 = qr[c], q1 = qr[c + 1], q2 = qr[c + 2], q3 = qr[c + 3];
            const T *k0 = Kt + c * L, *k1 = k0 + L, *k2 = k1 + L, *k3 = k2 + L;
            for (int64_t j = 0; j < len; j++)
                s[j] = (((s[j] + q0 * k0[j]) + q1 * k1[j]) + q2 * k2[j]) + q3 * k3[j];
        }
        for (; c < dk; c++) {
            T qc = qr[c];
            const T *kt = Kt + c * L;
            for (int64_t j = 0; j < len; j++)
                s[j] = s[j] + qc * kt[j];
        }
        for (int64_t j = 0; j < len; j++)
            s[j] = s[j] * scale;
        T m = FN(tg__row_max)(s, len);
        T l = FN(tg__row_expsum)(s, len, m, s); /* s_j <- exp(s_j - m) */
        for (int64_t cc = 0; cc < dv; cc++)
            acc[cc] = 0;
        int64_t j = 0;
        for (; j + 4 <= len; j += 4) {
            T e0 = s[j], e1 = s[j + 1], e2 = s[j + 2], e3 = s[j + 3];
            const T *v0 = Vm + j * dv, *v1 = v0 + dv, *v2 = v1 + dv, *v3 = v2 + dv;
            for (int64_t cc = 0; cc < dv; cc++)
                acc[cc] = (((acc[cc] + e0 * v0[cc]) + e1 * v1[cc]) + e2 * v2[cc]) +
                          e3 * v3[cc];
        }
        for (; j < len; j++) {
            T e = s[j];
            const T *vj = Vm + j * dv;
            for (int64_t cc = 0; cc < dv; cc++)
                acc[cc] = acc[cc] + e * vj[cc];
        }
        T *o = O + i * dv;
        for (int64_t cc = 0; cc < dv; cc++)
            o[cc] = acc[cc] / l;
    }
}

tg_status FN(tg__kv_attention_forward)(const tg__call *c)
{
    int64_t B = c->shape[0], H = c->shape[1], n = c->shape[2];
    int64_t dk = c->src_shape[KV_Q][3], dv = c->shape[3];
    int64_t pos = ((const int32_t *)c->in[KV_POS])[0];
    size_t per = kv_ws_per_thread(c);
    int64_t L = c->src_shape[KV_VC][2];
    int nt = c->nt;
    /* scalar work: n rows x (pos + n) keys x (dk + dv) per item */
    double work = (double)(B * H) * (double)n * (double)(pos + n) * (double)(dk + dv);
    bool par = work > (double)TG_PAR_WORK(65536);
    /* Race-free: item (b, h) owns Kc[b, h], Vc[b, h] at rows pos.. and out[b, h]; its
     * thread's workspace slice is its own. */
    TG_PAR_RANGE(nt, par, B * H, 1, {
        T *s = (T *)((char *)c->ws + per * (size_t)TG_THREAD_NUM());
        T *acc = s + L;
        for (int64_t it = lo; it < hi; it++)
            FN(kv_item)(c, it / H, it % H, pos, s, acc);
    });
    return TG_OK;
}

#undef FN
