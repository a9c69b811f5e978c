/*
 * test_accum.c - gradient accumulation (tg_grad_accum_*): the fixed binary-tree sum over
 * micro-batches, bitwise against a tree computed here by hand; the same bits across P parts
 * (processes joined by socket pairs, a transport of this file) for every P dividing k, in
 * small buckets; thread invariance; errors.
 */
#define _GNU_SOURCE
#include "testutil.h"
#include "tgrad_train.h"

#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

/* Three parameters of 7, 5x300 and 2x3 elements (the middle one crosses the add kernel's
 * chunks only with TG_PAR_MIN small; the shapes are odd on purpose). */
#define NP 3
static const int64_t P_NUMEL[NP] = {7, 1500, 6};
#define ELEMS (7 + 1500 + 6)

/* A context with the parameters and a graph whose backward gave each a gradient buffer. */
typedef struct {
    tg_ctx *ctx;
    tg_tensor *p[NP];
} setup;

static void setup_new(setup *s, tg_dtype dt)
{
    s->ctx = tu_ctx_new();
    tg_tensor *sum = NULL;
    for (int i = 0; i < NP; i++) {
        s->p[i] = tg_param(s->ctx, dt, TG_DIMS(P_NUMEL[i]), NULL);
        ck_assert_ptr_nonnull(s->p[i]);
        tg_tensor *r = tg_sum_all(s->ctx, s->p[i]);
        sum = sum ? tg_add(s->ctx, sum, r) : r;
    }
    tg_graph *g = tg_graph_new(s->ctx, &sum, 1);
    ck_assert_ptr_nonnull(g);
    ck_assert_int_eq(tg_graph_forward(g), TG_OK);
    ck_assert_int_eq(tg_graph_backward(g, sum, NULL), TG_OK);
}

/* Micro-batch i's gradient element e: values of mixed sign and magnitude, so the grouping of
 * the sum changes its rounding. */
static double grad_val(int64_t i, int64_t e)
{
    uint64_t x = (uint64_t)(i * 1000003 + e) * 0x9e3779b97f4a7c15ULL;
    x ^= x >> 29;
    x *= 0xbf58476d1ce4e5b9ULL;
    x ^= x >> 32;
    double u = (double)(x >> 11) * 0x1.0p-53;
    return (u - 0.5) * ldexp(1.0, (int)(x % 23) - 11);
}

static double loss_val(int64_t i) { return grad_val(i, 99991) * 100; }

/* Write micro-batch i's gradients into the parameters' gradient buffers. */
static void set_grads(setup *s, int64_t i)
{
    int64_t e = 0;
    for (int j = 0; j < NP; j++) {
        void *g = tg_tensor_grad(s->p[j]);
        ck_assert_ptr_nonnull(g);
        for (int64_t q = 0; q < P_NUMEL[j]; q++, e++) {
            if (tg_tensor_dtype(s->p[j]) == TG_F32)
                ((float *)g)[q] = (float)grad_val(i, e);
            else
                ((double *)g)[q] = grad_val(i, e);
        }
    }
}

/* The tree by hand, straight from the definition: node(a, n) = node(a, s) + node(a+s, n-s). */
static int64_t largest_pow2_below(int64_t n)
{
    int64_t s = 1;
    while (2 * s < n)
        s *= 2;
    return s;
}

static double tree_f64(int64_t e, int64_t a, int64_t n)
{
    if (n == 1)
        return e < 0 ? loss_val(a) : grad_val(a, e);
    int64_t s = largest_pow2_below(n);
    return tree_f64(e, a, s) + tree_f64(e, a + s, n - s);
}

static float tree_f32(int64_t e, int64_t a, int64_t n)
{
    if (n == 1)
        return (float)grad_val(a, e);
    int64_t s = largest_pow2_below(n);
    return tree_f32(e, a, s) + tree_f32(e, a + s, n - s);
}

/* The accumulated gradients in the parameters equal the hand tree, bit for bit. */
static void expect_tree(setup *s, int64_t k, double loss)
{
    int64_t e = 0;
    for (int j = 0; j < NP; j++) {
        const void *g = tg_tensor_grad(s->p[j]);
        for (int64_t q = 0; q < P_NUMEL[j]; q++, e++) {
            if (tg_tensor_dtype(s->p[j]) == TG_F32) {
                float want = tree_f32(e, 0, k), got = ((const float *)g)[q];
                ck_assert_msg(memcmp(&want, &got, sizeof got) == 0,
                              "k=%ld element %ld: %a, tree %a", (long)k, (long)e, got, want);
            } else {
                double want = tree_f64(e, 0, k), got = ((const double *)g)[q];
                ck_assert_msg(memcmp(&want, &got, sizeof got) == 0,
                              "k=%ld element %ld: %a, tree %a", (long)k, (long)e, got, want);
            }
        }
    }
    double want = tree_f64(-1, 0, k);
    ck_assert_msg(memcmp(&want, &loss, sizeof loss) == 0, "k=%ld loss %a, tree %a", (long)k,
                  loss, want);
}

START_TEST(tree_sum_is_the_hand_tree)
{
    for (int d = 0; d < 2; d++) {
        setup s;
        setup_new(&s, tu_dtypes[d]);
        for (int64_t k = 1; k <= 17; k++) {
            tg_grad_accum *acc = tg_grad_accum_new(s.ctx, NP, s.p, k, 0, k);
            ck_assert_ptr_nonnull(acc);
            ck_assert_uint_eq(tg_grad_accum_bytes(acc),
                              (ELEMS * tg_dtype_size(tu_dtypes[d]) + 7) / 8 * 8 + 8);
            for (int rep = 0; rep < 2; rep++) { /* the accumulator is reusable step after step */
                for (int64_t i = 0; i < k; i++) {
                    set_grads(&s, i);
                    ck_assert_int_eq(tg_grad_accum_push(acc, loss_val(i)), TG_OK);
                }
                set_grads(&s, 12345); /* finish overwrites whatever is there */
                double l = 0;
                ck_assert_int_eq(tg_grad_accum_finish(acc, &l), TG_OK);
                expect_tree(&s, k, l);
            }
            tg_grad_accum_free(acc);
        }
        tu_ctx_free(s.ctx);
    }
}
END_TEST

/* The test can tell orders apart: the left-to-right sum differs from the tree somewhere. */
START_TEST(tree_differs_from_sequential_sum)
{
    int differ = 0;
    for (int64_t e = 0; e < ELEMS; e++) {
        float seq = 0;
        for (int64_t i = 0; i < 6; i++)
            seq += (float)grad_val(i, e);
        float tree = tree_f32(e, 0, 6);
        differ += memcmp(&seq, &tree, sizeof seq) != 0;
    }
    ck_assert_int_gt(differ, 10);
}
END_TEST

/* K = 1 leaves the gradients exactly as backward wrote them; the loss is passed through. */
START_TEST(k1_is_the_identity)
{
    setup s;
    setup_new(&s, TG_F32);
    tg_grad_accum *acc = tg_grad_accum_new(s.ctx, 0, NULL, 1, 0, 1);
    ck_assert_ptr_nonnull(acc);
    set_grads(&s, 3);
    float before[ELEMS];
    ck_assert_int_eq(tg_tensor_get_grad(s.p[1], before, TG_F32, 1500), TG_OK);
    ck_assert_int_eq(tg_grad_accum_push(acc, 2.5), TG_OK);
    tg_fill(s.p[1], 0); /* values do not matter; gradients do */
    double l;
    ck_assert_int_eq(tg_grad_accum_finish(acc, &l), TG_OK);
    ck_assert(l == 2.5);
    ck_assert_mem_eq(before, tg_tensor_grad(s.p[1]), 1500 * sizeof(float));
    tu_ctx_free(s.ctx);
}
END_TEST

/* The add runs over threads; the bits do not depend on how many. */
START_TEST(thread_invariant)
{
    double out[3][ELEMS];
    for (int t = 1; t <= 3; t++) {
        setup s;
        setup_new(&s, TG_F64);
        tg_ctx_set_threads(s.ctx, t);
        tg_grad_accum *acc = tg_grad_accum_new(s.ctx, NP, s.p, 5, 0, 5);
        for (int64_t i = 0; i < 5; i++) {
            set_grads(&s, i);
            ck_assert_int_eq(tg_grad_accum_push(acc, 0), TG_OK);
        }
        ck_assert_int_eq(tg_grad_accum_finish(acc, NULL), TG_OK);
        int64_t e = 0;
        for (int j = 0; j < NP; j++) {
            ck_assert_int_eq(tg_tensor_get_grad(s.p[j], out[t - 1] + e, TG_F64,
                                                (size_t)P_NUMEL[j]), TG_OK);
            e += P_NUMEL[j];
        }
        tu_ctx_free(s.ctx);
    }
    ck_assert_mem_eq(out[0], out[1], sizeof out[0]);
    ck_assert_mem_eq(out[0], out[2], sizeof out[0]);
}
END_TEST

START_TEST(errors)
{
    setup s;
    setup_new(&s, TG_F32);
    tg_ctx *ctx = s.ctx;
    ck_assert_ptr_null(tg_grad_accum_new(ctx, NP, s.p, 0, 0, 1));
    tu_assert_error(ctx, TG_ERR_ARG, "k = 0");
    tg_ctx_clear_error(ctx);
    ck_assert_ptr_null(tg_grad_accum_new(ctx, NP, s.p, 4, 3, 2));
    tu_assert_error(ctx, TG_ERR_ARG, "3 .. 4 are not inside 0 .. 3");
    tg_ctx_clear_error(ctx);
    tg_tensor *mixed[2] = {s.p[0], tg_param(ctx, TG_F64, TG_DIMS(2), "d")};
    ck_assert_ptr_null(tg_grad_accum_new(ctx, 2, mixed, 2, 0, 2));
    tu_assert_error(ctx, TG_ERR_DTYPE, "'d' is f64");
    tg_ctx_clear_error(ctx);
    tg_tensor *ids = tg_input(ctx, TG_I32, TG_DIMS(2), "ids");
    ck_assert_ptr_null(tg_grad_accum_new(ctx, 1, &ids, 2, 0, 2));
    tu_assert_error(ctx, TG_ERR_DTYPE, "i32");
    tg_ctx_clear_error(ctx);

    tg_grad_accum *acc = tg_grad_accum_new(ctx, NP, s.p, 4, 0, 2); /* a part: 0 .. 1 of 4 */
    ck_assert_ptr_nonnull(acc);
    ck_assert_int_eq(tg_grad_accum_push(acc, 0), TG_OK);
    ck_assert_int_eq(tg_grad_accum_finish(acc, NULL), TG_ERR_STATE);
    tu_assert_error(ctx, TG_ERR_STATE, "tg_grad_accum_combine");
    ck_assert_int_eq(tg_grad_accum_push(acc, 0), TG_OK);
    ck_assert_int_eq(tg_grad_accum_push(acc, 0), TG_ERR_STATE);
    tu_assert_error(ctx, TG_ERR_STATE, "all 2 micro-batches");
    ck_assert_int_eq(tg_grad_accum_finish(NULL, NULL), TG_ERR_ARG);
    ck_assert_int_eq(tg_grad_accum_push(NULL, 0), TG_ERR_ARG);
    tg_grad_accum_free(NULL);
    tu_ctx_free(ctx);
}
END_TEST

/* A real model: a 2-layer LM (f32, dropout 0) on a batch of 8 sequences split into K = 4
 * micro-batches of 2. Each micro-batch's gradients are copied out by hand after its backward
 * (seeded 1/K), summed here as (g0 + g1) + (g2 + g3), and compared bit for bit with what the
 * accumulator writes into the parameters; the loss likewise. */
START_TEST(model_micro_batches_tree)
{
    enum { K = 4, BM = 2, T = 6, V = 11 };
    tg_ctx *ctx = tu_ctx_new();
    tg_ctx_seed(ctx, 5);
    tg_transformer_config mc;
    memset(&mc, 0, sizeof mc);
    mc.vocab_size = V;
    mc.max_seq_len = T;
    mc.n_layers = 2;
    mc.layer = tg_encoder_config_default(16, 2);
    mc.layer.norm_first = true;
    mc.causal = true;
    tg_transformer m;
    ck_assert_int_eq(tg_transformer_init(ctx, &m, TG_F32, &mc), TG_OK);
    tg_tensor *ids = tg_input(ctx, TG_I32, TG_DIMS(BM, T), "ids");
    tg_tensor *tgt = tg_input(ctx, TG_I32, TG_DIMS(BM, T), "targets");
    tg_tensor *loss = tg_cross_entropy(ctx, tg_transformer_forward(ctx, &m, ids, NULL), tgt, -1);
    tg_graph *g = tg_graph_new(ctx, &loss, 1);
    tg_tensor *dy = tg_const(ctx, TG_F32, 0, NULL, "share");
    tg_fill(dy, 1.0 / K);
    ck_assert_ptr_nonnull(g);
    int64_t np = tg_ctx_n_params(ctx), total = 0;
    for (int64_t j = 0; j < np; j++)
        total += tg_tensor_numel(tg_ctx_param(ctx, j));
    float *gm = malloc(sizeof(float) * (size_t)(K * total));
    double losses[K];
    tg_grad_accum *acc = tg_grad_accum_new(ctx, 0, NULL, K, 0, K);
    ck_assert_ptr_nonnull(acc);
    for (int i = 0; i < K; i++) {
        int32_t x[BM * T], y[BM * T];
        for (int r = 0; r < BM * T; r++) {
            x[r] = (int32_t)((r * 7 + i * 3) % V);
            y[r] = (int32_t)((r * 5 + i * 2 + 1) % V);
        }
        ck_assert_int_eq(tg_tensor_set_data(ids, x, TG_I32, BM * T), TG_OK);
        ck_assert_int_eq(tg_tensor_set_data(tgt, y, TG_I32, BM * T), TG_OK);
        tg_graph_zero_grad(g);
        ck_assert_int_eq(tg_graph_forward(g), TG_OK);
        ck_assert_int_eq(tg_graph_backward(g, loss, dy), TG_OK);
        losses[i] = tg_get(loss, 0) / K;
        int64_t off = 0;
        for (int64_t j = 0; j < np; j++) {
            tg_tensor *p = tg_ctx_param(ctx, j);
            int64_t n = tg_tensor_numel(p);
            ck_assert_int_eq(tg_tensor_get_grad(p, gm + i * total + off, TG_F32, (size_t)n),
                             TG_OK);
            off += n;
        }
        ck_assert_int_eq(tg_grad_accum_push(acc, losses[i]), TG_OK);
    }
    double l;
    ck_assert_int_eq(tg_grad_accum_finish(acc, &l), TG_OK);
    double wl = (losses[0] + losses[1]) + (losses[2] + losses[3]);
    ck_assert(memcmp(&wl, &l, sizeof l) == 0);
    int64_t off = 0, differs_from_sequential = 0;
    for (int64_t j = 0; j < np; j++) {
        tg_tensor *p = tg_ctx_param(ctx, j);
        const float *got = tg_tensor_grad(p);
        for (int64_t e = 0; e < tg_tensor_numel(p); e++, off++) {
            const float *q = gm + off;
            float want = (q[0] + q[total]) + (q[2 * total] + q[3 * total]);
            float seq = ((q[0] + q[total]) + q[2 * total]) + q[3 * total];
            differs_from_sequential += memcmp(&seq, &want, sizeof seq) != 0;
            ck_assert_msg(memcmp(&want, &got[e], sizeof want) == 0,
                          "%s[%ld]: %a, tree by hand %a", tg_tensor_name(p), (long)e, got[e],
                          want);
        }
    }
    ck_assert_int_gt(differs_from_sequential, 0); /* the order is visible in the bits */
    free(gm);
    tu_ctx_free(ctx);
}
END_TEST

/* ---- several parts: processes over socket pairs ------------------------------------------ */

#define MAXP 8
typedef struct {
    int fd[MAXP]; /* fd[q]: this part's end of the socket to part q */
    int fail_after; /* > 0: the transport fails at this call (fault injection) */
    int calls;
} sock_transport;

static int wr_all(int fd, const char *p, size_t n)
{
    while (n) {
        ssize_t w = send(fd, p, n, MSG_NOSIGNAL); /* a closed peer is an error, not SIGPIPE */
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            return -1;
        p += w;
        n -= (size_t)w;
    }
    return 0;
}

static int rd_all(int fd, char *p, size_t n)
{
    while (n) {
        ssize_t r = read(fd, p, n);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            return -1;
        p += r;
        n -= (size_t)r;
    }
    return 0;
}

static int failing(sock_transport *t, char *err, size_t n)
{
    if (t->fail_after > 0 && ++t->calls >= t->fail_after) {
        snprintf(err, n, "injected transport failure");
        return 1;
    }
    return 0;
}

static int st_send(void *u, int to, const void *buf, size_t bytes, char *err, size_t n)
{
    sock_transport *t = u;
    if (failing(t, err, n))
        return 1;
    return wr_all(t->fd[to], buf, bytes) ? (snprintf(err, n, "send failed"), 1) : 0;
}

static int st_recv(void *u, int from, void *buf, size_t bytes, char *err, size_t n)
{
    sock_transport *t = u;
    if (failing(t, err, n))
        return 1;
    return rd_all(t->fd[from], buf, bytes) ? (snprintf(err, n, "recv failed"), 1) : 0;
}

/* Both directions at once through poll, so two parts exchanging large buffers never block on
 * each other's full socket. */
static int st_sendrecv(void *u, int peer, const void *sbuf, void *rbuf, size_t bytes, char *err,
                       size_t n)
{
    sock_transport *t = u;
    if (failing(t, err, n))
        return 1;
    const char *sp = sbuf;
    char *rp = rbuf;
    size_t sent = 0, got = 0;
    while (sent < bytes || got < bytes) {
        struct pollfd pf = {t->fd[peer], (short)((sent < bytes ? POLLOUT : 0) |
                                                 (got < bytes ? POLLIN : 0)), 0};
        if (poll(&pf, 1, 10000) <= 0)
            return snprintf(err, n, "poll timed out"), 1;
        if ((pf.revents & POLLOUT) && sent < bytes) {
            ssize_t w = send(t->fd[peer], sp + sent, bytes - sent, MSG_DONTWAIT);
            if (w > 0)
                sent += (size_t)w;
            else if (w < 0 && errno != EAGAIN && errno != EINTR)
                return snprintf(err, n, "send failed"), 1;
        }
        if ((pf.revents & (POLLIN | POLLHUP)) && got < bytes) {
            ssize_t r = recv(t->fd[peer], rp + got, bytes - got, MSG_DONTWAIT);
            if (r > 0)
                got += (size_t)r;
            else if (r == 0 || (errno != EAGAIN && errno != EINTR))
                return snprintf(err, n, "peer closed"), 1;
        }
    }
    return 0;
}

/* Run k micro-batches over P forked parts (buckets of @p bucket bytes); part 0 returns the
 * combined gradients (ELEMS doubles, converted) and loss through a pipe. Returns the number of
 * parts whose combine returned TG_OK and fills @p out from part 0. @p fail_part: that part's
 * transport fails at its second call (-1: none). */
static int run_parts(tg_dtype dt, int64_t k, int P, size_t bucket, int fail_part, double *out,
                     double *loss_out)
{
    int sv[MAXP][MAXP][2];
    for (int a = 0; a < P; a++)
        for (int b = a + 1; b < P; b++)
            ck_assert_int_eq(socketpair(AF_UNIX, SOCK_STREAM, 0, sv[a][b]), 0);
    int res[MAXP][2]; /* one result pipe per part */
    for (int me = 0; me < P; me++)
        ck_assert_int_eq(socketpair(AF_UNIX, SOCK_STREAM, 0, res[me]), 0);
    pid_t pid[MAXP];
    for (int me = 0; me < P; me++) {
        pid[me] = fork();
        ck_assert_int_ge(pid[me], 0);
        if (pid[me] > 0)
            continue;
        sock_transport st = {.fail_after = me == fail_part ? 2 : 0};
        for (int q = 0; q < P; q++)
            if (q != me)
                st.fd[q] = q > me ? sv[me][q][0] : sv[q][me][1];
        setup s;
        setup_new(&s, dt);
        int64_t m = k / P;
        tg_grad_accum *acc = tg_grad_accum_new(s.ctx, NP, s.p, k, me * m, m);
        int ok = acc != NULL;
        for (int64_t i = me * m; ok && i < (me + 1) * m; i++) {
            set_grads(&s, i);
            ok = tg_grad_accum_push(acc, loss_val(i)) == TG_OK;
        }
        tg_grad_transport tr = {&st, me, P, bucket, st_send, st_recv, st_sendrecv};
        double l = 0;
        size_t sent = 0;
        set_grads(&s, 777); /* what a failed combine must leave alone */
        ok = ok && tg_grad_accum_combine(acc, &tr, &l, &sent) == TG_OK;
        /* the run error lives until the next call: read it now */
        bool injected = tg_ctx_status(s.ctx) == TG_ERR_IO &&
                        strstr(tg_ctx_message(s.ctx), "injected transport failure");
        /* every part writes [ok, loss, gradients] */
        double rec[2 + ELEMS];
        rec[0] = ok;
        rec[1] = l;
        int64_t e = 0;
        for (int j = 0; j < NP; j++) {
            tg_tensor_get_grad(s.p[j], rec + 2 + e, TG_F64, (size_t)P_NUMEL[j]);
            e += P_NUMEL[j];
        }
        if (ok && P > 1 && sent == 0)
            rec[0] = 0; /* a multi-part combine sends something */
        if (!ok && fail_part == me) { /* the failure is reported, gradients untouched */
            rec[0] = injected ? -1 : -2;
            rec[0] = rec[0] == -1 && rec[2] == (dt == TG_F32 ? (float)grad_val(777, 0)
                                                             : grad_val(777, 0)) ? -1 : -3;
        }
        wr_all(res[me][1], (const char *)rec, sizeof rec);
        tu_ctx_free(s.ctx);
        _exit(0);
    }
    for (int a = 0; a < P; a++)
        for (int b = a + 1; b < P; b++) {
            close(sv[a][b][0]);
            close(sv[a][b][1]);
        }
    int n_ok = 0, injected_seen = 0;
    for (int hdr = 0; hdr < P; hdr++) {
        double rec[2 + ELEMS];
        close(res[hdr][1]);
        int bad = rd_all(res[hdr][0], (char *)rec, sizeof rec);
        close(res[hdr][0]);
        if (bad)
            continue; /* a part died without reporting (the wait below fails the test) */
        if (rec[0] == 1)
            n_ok++;
        if (rec[0] == -1)
            injected_seen = 1;
        ck_assert_msg(rec[0] != -3 && rec[0] != -2,
                      "part %d: a failed combine must report TG_ERR_IO and keep gradients",
                      hdr);
        if (hdr == 0 && rec[0] == 1) {
            memcpy(out, rec + 2, sizeof(double) * ELEMS);
            *loss_out = rec[1];
        }
        /* every part that succeeded holds part 0's bits: compare with what we have so far */
        static double first[ELEMS];
        if (rec[0] == 1) {
            if (n_ok == 1)
                memcpy(first, rec + 2, sizeof first);
            else
                ck_assert_msg(memcmp(first, rec + 2, sizeof first) == 0,
                              "part %d holds other bits (k=%ld P=%d)", hdr, (long)k, P);
        }
    }
    for (int me = 0; me < P; me++) {
        int st;
        ck_assert_int_eq(waitpid(pid[me], &st, 0), pid[me]);
        ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) == 0, "part %d died", me);
    }
    if (fail_part >= 0)
        ck_assert_int_eq(injected_seen, 1);
    return n_ok;
}

static void expect_parts_equal_tree(tg_dtype dt, int64_t k, int P, size_t bucket)
{
    double got[ELEMS], loss = 0;
    ck_assert_int_eq(run_parts(dt, k, P, bucket, -1, got, &loss), P);
    for (int64_t e = 0; e < ELEMS; e++) {
        double want = dt == TG_F32 ? (double)tree_f32(e, 0, k) : tree_f64(e, 0, k);
        ck_assert_msg(memcmp(&want, &got[e], sizeof want) == 0,
                      "%s k=%ld P=%d element %ld: %a, tree %a", tg_dtype_str(dt), (long)k, P,
                      (long)e, got[e], want);
    }
    double wl = tree_f64(-1, 0, k);
    ck_assert_msg(memcmp(&wl, &loss, sizeof wl) == 0, "k=%ld P=%d loss", (long)k, P);
}

/* Every P dividing k, powers of two (recursive doubling) or not (the spanning-node schedule),
 * whole buffers and buckets of 1000 bytes (several per buffer, the last one short). */
START_TEST(parts_equal_one_process)
{
    static const int cases[][2] = {{2, 2}, {4, 2}, {4, 4}, {8, 2}, {8, 4}, {16, 8},
                                   {6, 2}, {6, 3}, {12, 4}, {12, 3}, {9, 3}, {5, 5},
                                   {7, 7}, {10, 2}, {24, 8}, {3, 1}};
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++)
        for (int d = 0; d < 2; d++)
            expect_parts_equal_tree(tu_dtypes[d], cases[c][0], cases[c][1],
                                    c % 2 ? 1000 : 0);
}
END_TEST

/* A transport failure: TG_ERR_IO with the transport's message, gradients left alone. */
START_TEST(transport_failure)
{
    double got[ELEMS], loss;
    /* part 1's second call fails; the other parts see their peer's socket close and fail too */
    int n_ok = run_parts(TG_F64, 4, 2, 1000, 1, got, &loss);
    ck_assert_int_lt(n_ok, 2);
    n_ok = run_parts(TG_F32, 6, 3, 0, 2, got, &loss);
    ck_assert_int_lt(n_ok, 3);
}
END_TEST

START_TEST(combine_errors)
{
    setup s;
    setup_new(&s, TG_F32);
    sock_transport st = {0};
    tg_grad_accum *acc = tg_grad_accum_new(s.ctx, NP, s.p, 6, 2, 2);
    tg_grad_transport tr = {&st, 1, 3, 0, st_send, st_recv, st_sendrecv};
    ck_assert_int_eq(tg_grad_accum_combine(acc, &tr, NULL, NULL), TG_ERR_STATE);
    tu_assert_error(s.ctx, TG_ERR_STATE, "0 of this part's 2");
    tr.n_parts = 4; /* does not divide 6 */
    ck_assert_int_eq(tg_grad_accum_combine(acc, &tr, NULL, NULL), TG_ERR_ARG);
    tu_assert_error(s.ctx, TG_ERR_ARG, "P must divide k");
    tr.n_parts = 2; /* part 1 of 2 holds 3 .. 5, not 2 .. 3 */
    ck_assert_int_eq(tg_grad_accum_combine(acc, &tr, NULL, NULL), TG_ERR_ARG);
    tu_assert_error(s.ctx, TG_ERR_ARG, "must hold micro-batches 3 .. 5");
    tr.send = NULL;
    ck_assert_int_eq(tg_grad_accum_combine(acc, &tr, NULL, NULL), TG_ERR_ARG);
    tu_ctx_free(s.ctx);
}
END_TEST

static Suite *accum_suite(void)
{
    Suite *s = suite_create("accum");
    TCase *tc = tcase_create("accum");
    tcase_add_checked_fixture(tc, NULL, tu_ctx_teardown);
    tcase_set_timeout(tc, 300);
    tcase_add_test(tc, tree_sum_is_the_hand_tree);
    tcase_add_test(tc, tree_differs_from_sequential_sum);
    tcase_add_test(tc, k1_is_the_identity);
    tcase_add_test(tc, thread_invariant);
    tcase_add_test(tc, model_micro_batches_tree);
    tcase_add_test(tc, errors);
    tcase_add_test(tc, parts_equal_one_process);
    tcase_add_test(tc, transport_failure);
    tcase_add_test(tc, combine_errors);
    suite_add_tcase(s, tc);
    return s;
}

int main(void) { return tu_run(accum_suite()); }
