/* testutil.c - helpers shared by the Check suites (see testutil.h). */
#define _GNU_SOURCE /* mkdtemp, setpgid, nanosleep */
#include "testutil.h"
#include "tgrad_io.h"
#include "tgrad_train.h"

#include <dirent.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <errno.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

int tu_run(Suite *s)
{
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}

static void *fail_alloc(void *user, size_t size)
{
    tu_failing_alloc *st = user;
    if (st->budget >= 0 && st->n_alloc >= st->budget)
        return NULL;
    st->n_alloc++;
    return malloc(size);
}

static void fail_free(void *user, void *p)
{
    tu_failing_alloc *st = user;
    if (p)
        st->n_free++;
    free(p);
}

tg_allocator tu_failing_allocator(tu_failing_alloc *state)
{
    tg_allocator a = {fail_alloc, fail_free, state};
    return a;
}

tg_tensor *tu_input(tg_ctx *ctx, tg_dtype dt, int rank, const int64_t *shape, const char *name,
                    double lo, double hi)
{
    tg_tensor *t = tg_input(ctx, dt, rank, shape, name);
    if (t) {
        tg_set_requires_grad(t, true);
        tg_fill_uniform(t, lo, hi);
    }
    return t;
}

void tu_set(tg_tensor *t, const double *values)
{
    ck_assert_ptr_nonnull(t);
    ck_assert_int_eq(tg_tensor_set_data(t, values, TG_F64, (size_t)tg_tensor_numel(t)), TG_OK);
}

double tu_max_abs_diff(const tg_tensor *a, const tg_tensor *b)
{
    ck_assert_int_eq(tg_tensor_numel(a), tg_tensor_numel(b));
    double m = 0;
    for (int64_t i = 0; i < tg_tensor_numel(a); i++) {
        double d = fabs(tg_get(a, i) - tg_get(b, i));
        if (d > m || isnan(d))
            m = isnan(d) ? INFINITY : d;
    }
    return m;
}

void tu_assert_data(const tg_tensor *t, const double *expect, double tol)
{
    ck_assert_ptr_nonnull(t);
    for (int64_t i = 0; i < tg_tensor_numel(t); i++) {
        double v = tg_get(t, i);
        ck_assert_msg(fabs(v - expect[i]) <= tol || (isinf(v) && v == expect[i]),
                      "'%s'[%lld] = %.17g, expected %.17g (tol %g)", tg_tensor_name(t),
                      (long long)i, v, expect[i], tol);
    }
}

void tu_assert_gradcheck(tg_ctx *ctx, tg_tensor *y)
{
    ck_assert_msg(y != NULL, "build failed: %s", tg_ctx_message(ctx));
    tg_gradcheck_report rep;
    tg_status s = tg_gradcheck(ctx, y, NULL, &rep);
    ck_assert_msg(s == TG_OK, "gradcheck %s: %s (%s)", tg_status_str(s), rep.message,
                  tg_ctx_message(ctx));
}

void tu_assert_error(tg_ctx *ctx, tg_status status, const char *needle)
{
    ck_assert_msg(tg_ctx_status(ctx) == status, "expected %s, got %s (%s)",
                  tg_status_str(status), tg_status_str(tg_ctx_status(ctx)),
                  tg_ctx_message(ctx));
    const char *m = tg_ctx_message(ctx);
    ck_assert_msg(m && m[0], "empty error message");
    if (needle)
        ck_assert_msg(strstr(m, needle) != NULL, "message '%s' lacks '%s'", m, needle);
}

void tu_assert_thread_invariant(tu_build_fn build, tg_dtype dt)
{
    size_t es = tg_dtype_size(dt);
    void *ref_y = NULL, *ref_g = NULL;
    size_t ny = 0, ng = 0;
    for (int nt = 1; nt <= 3; nt++) {
        tg_ctx *ctx = tg_ctx_new();
        tg_ctx_set_threads(ctx, nt);
        tg_ctx_seed(ctx, 42);
        tg_tensor *y = build(ctx, dt);
        ck_assert_msg(y != NULL, "build failed: %s", tg_ctx_message(ctx));
        tg_graph *g = tg_graph_new(ctx, &y, 1);
        ck_assert_ptr_nonnull(g);
        tg_tensor *dy = tg_const(ctx, dt, tg_tensor_rank(y), tg_tensor_shape(y), "dy");
        for (int64_t i = 0; i < tg_tensor_numel(dy); i++)
            tg_set(dy, i, sin(0.37 * (double)i + 0.1));
        ck_assert_int_eq(tg_graph_forward(g), TG_OK);
        ck_assert_int_eq(tg_graph_backward(g, y, dy), TG_OK);
        /* gather output and all leaf grads */
        size_t gsz = 0;
        for (int64_t l = 0; l < tg_graph_n_grad_leaves(g); l++)
            gsz += (size_t)tg_tensor_numel(tg_graph_grad_leaf(g, l)) * es;
        size_t ysz = (size_t)tg_tensor_numel(y) * es;
        char *gb = malloc(gsz ? gsz : 1);
        size_t off = 0;
        for (int64_t l = 0; l < tg_graph_n_grad_leaves(g); l++) {
            tg_tensor *t = tg_graph_grad_leaf(g, l);
            size_t n = (size_t)tg_tensor_numel(t) * es;
            memcpy(gb + off, tg_tensor_grad(t), n);
            off += n;
        }
        if (nt == 1) {
            ref_y = malloc(ysz);
            memcpy(ref_y, tg_tensor_data(y), ysz);
            ref_g = gb;
            ny = ysz;
            ng = gsz;
        } else {
            ck_assert_uint_eq(ysz, ny);
            ck_assert_uint_eq(gsz, ng);
            ck_assert_msg(memcmp(ref_y, tg_tensor_data(y), ysz) == 0,
                          "forward differs between 1 and %d threads", nt);
            ck_assert_msg(memcmp(ref_g, gb, gsz) == 0,
                          "gradients differ between 1 and %d threads", nt);
            free(gb);
        }
        tg_ctx_free(ctx);
    }
    free(ref_y);
    free(ref_g);
}

/* ---- op-suite helpers ------------------------------------------------------------------------ */
const tg_dtype tu_dtypes[2] = {TG_F32, TG_F64};

#define TU_MAX_CTX 8
static tg_ctx *g_ctxs[TU_MAX_CTX];

tg_ctx *tu_ctx_new(void)
{
    tg_ctx *c = tg_ctx_new();
    ck_assert_ptr_nonnull(c);
    for (int i = 0; i < TU_MAX_CTX; i++)
        if (!g_ctxs[i]) {
            g_ctxs[i] = c;
            return c;
        }
    ck_abort_msg("more than %d contexts in one test", TU_MAX_CTX);
    return NULL;
}

void tu_ctx_free(tg_ctx *c)
{
    for (int i = 0; i < TU_MAX_CTX; i++)
        if (g_ctxs[i] == c)
            g_ctxs[i] = NULL;
    tg_ctx_free(c);
}

void tu_ctx_teardown(void)
{
    for (int i = 0; i < TU_MAX_CTX; i++) {
        tg_ctx_free(g_ctxs[i]);
        g_ctxs[i] = NULL;
    }
}

bool tu_under_valgrind(void) { return getenv("TG_UNDER_VALGRIND") != NULL; }

int64_t tu_big(int64_t n, int64_t small) { return tu_under_valgrind() ? small : n; }

tg_tensor *tu_in(tg_ctx *ctx, tg_dtype dt, int rank, const int64_t *shape, const char *name,
                 const double *v)
{
    tg_tensor *t = tg_input(ctx, dt, rank, shape, name);
    ck_assert_msg(t != NULL, "tg_input: %s", tg_ctx_message(ctx));
    ck_assert_int_eq(tg_set_requires_grad(t, true), TG_OK);
    if (v)
        tu_set(t, v);
    return t;
}

tg_graph *tu_fwd(tg_ctx *ctx, tg_tensor *y)
{
    ck_assert_msg(y != NULL, "build failed: %s", tg_ctx_message(ctx));
    tg_graph *g = tg_graph_new(ctx, &y, 1);
    ck_assert_msg(g != NULL, "tg_graph_new: %s", tg_ctx_message(ctx));
    ck_assert_int_eq(tg_graph_forward(g), TG_OK);
    return g;
}

void tu_bwd(tg_ctx *ctx, tg_graph *g, tg_tensor *y, const double *v)
{
    tg_tensor *dy = tg_const(ctx, tg_tensor_dtype(y), tg_tensor_rank(y), tg_tensor_shape(y), "dy");
    ck_assert_ptr_nonnull(dy);
    if (v)
        tu_set(dy, v);
    else
        tg_fill(dy, 1.0);
    tg_status s = tg_graph_backward(g, y, dy);
    ck_assert_msg(s == TG_OK, "backward: %s (%s)", tg_status_str(s), tg_ctx_message(ctx));
}

void tu_expect_vals(const tg_tensor *t, bool grad, const double *want, double tol)
{
    for (int64_t i = 0; i < tg_tensor_numel(t); i++) {
        double v = grad ? tg_grad_get(t, i) : tg_get(t, i);
        double w = want[i];
        bool ok = isinf(w) ? v == w : fabs(v - w) <= tol * fmax(1.0, fabs(w));
        ck_assert_msg(ok, "%s of '%s'[%lld] = %.17g, expected %.17g (tol %g)",
                      grad ? "grad" : "value", tg_tensor_name(t), (long long)i, v, w, tol);
    }
}

void tu_expect_shape(const tg_tensor *t, int rank, const int64_t *shape)
{
    ck_assert_ptr_nonnull(t);
    ck_assert_int_eq(tg_tensor_rank(t), rank);
    for (int i = 0; i < rank; i++)
        ck_assert_msg(tg_tensor_shape(t)[i] == shape[i], "'%s' dim %d is %lld, expected %lld",
                      tg_tensor_name(t), i, (long long)tg_tensor_shape(t)[i],
                      (long long)shape[i]);
}

void tu_gradcheck_f32(tg_ctx *ctx, tg_tensor *y)
{
    ck_assert_msg(y != NULL, "build failed: %s", tg_ctx_message(ctx));
    tg_gradcheck_opts o = tg_gradcheck_defaults(TG_F32);
    tg_gradcheck_report rep;
    tg_status s = tg_gradcheck(ctx, y, &o, &rep);
    ck_assert_msg(s == TG_OK, "f32 gradcheck %s: %s (%s)", tg_status_str(s), rep.message,
                  tg_ctx_message(ctx));
}

void tu_fill_int(tg_tensor *t, int mul, int add, int mod, int off)
{
    for (int64_t i = 0; i < tg_tensor_numel(t); i++)
        tg_set(t, i, (double)((i * mul + add) % mod - off));
}

tg_tensor *tu_gc_input(tg_ctx *ctx, tg_dtype dt, int rank, const int64_t *shape,
                       const char *name)
{
    return tu_input(ctx, dt, rank, shape, name, -1.0, 1.0);
}

tg_tensor *tu_gc_param(tg_ctx *ctx, tg_dtype dt, int rank, const int64_t *shape,
                       const char *name)
{
    tg_tensor *t = tg_param(ctx, dt, rank, shape, name);
    if (t)
        tg_fill_uniform(t, -1, 1);
    return t;
}

int tu_count_nan(const tg_tensor *t, bool grad)
{
    int n = 0;
    for (int64_t i = 0; i < tg_tensor_numel(t); i++)
        n += isnan(grad ? tg_grad_get(t, i) : tg_get(t, i)) ? 1 : 0;
    return n;
}

tg_graph *tu_assert_graph_refused(tg_ctx *ctx, tg_tensor *good, const char *first)
{
    tg_status pending = tg_ctx_status(ctx);
    ck_assert_msg(pending != TG_OK, "no builder error pending");
    ck_assert_ptr_null(tg_graph_new(ctx, &good, 1));
    ck_assert_int_eq(tg_ctx_status(ctx), pending);
    ck_assert_str_eq(tg_ctx_message(ctx), first);
    tg_ctx_clear_error(ctx);
    tg_graph *g = tg_graph_new(ctx, &good, 1);
    ck_assert_ptr_nonnull(g);
    return g;
}

void tu_assert_backward_twice(tg_ctx *ctx, tg_graph *g, tg_tensor *y, const double *dy,
                              tg_tensor *const *leaves, int n)
{
    if (!leaves)
        n = (int)tg_graph_n_grad_leaves(g);
    tu_bwd(ctx, g, y, dy);
    int64_t total = 0;
    for (int l = 0; l < n; l++)
        total += tg_tensor_numel(leaves ? leaves[l] : tg_graph_grad_leaf(g, l));
    double *g1 = malloc(sizeof(double) * (size_t)(total ? total : 1));
    ck_assert_ptr_nonnull(g1);
    int64_t off = 0;
    for (int l = 0; l < n; l++) {
        const tg_tensor *t = leaves ? leaves[l] : tg_graph_grad_leaf(g, l);
        for (int64_t i = 0; i < tg_tensor_numel(t); i++)
            g1[off++] = tg_grad_get(t, i);
    }
    tu_bwd(ctx, g, y, dy);
    int64_t bad = 0, first_i = -1;
    const tg_tensor *first_t = NULL;
    double got = 0, want = 0;
    off = 0;
    for (int l = 0; l < n; l++) {
        const tg_tensor *t = leaves ? leaves[l] : tg_graph_grad_leaf(g, l);
        for (int64_t i = 0; i < tg_tensor_numel(t); i++, off++)
            if (tg_grad_get(t, i) != 2 * g1[off] && bad++ == 0) {
                first_t = t;
                first_i = i;
                got = tg_grad_get(t, i);
                want = 2 * g1[off];
            }
    }
    free(g1);
    ck_assert_msg(bad == 0, "%lld of %lld gradient elements are not exactly doubled by a second "
                  "backward; first: '%s'[%lld] = %.17g, expected %.17g",
                  (long long)bad, (long long)total, first_t ? tg_tensor_name(first_t) : "",
                  (long long)first_i, got, want);
}

void tu_gradcheck_case(tu_gc_case_fn gc, tg_dtype dt, int which, uint64_t seed)
{
    tg_ctx *ctx = tu_ctx_new();
    tg_ctx_seed(ctx, seed);
    tg_tensor *y = gc(ctx, dt, which);
    if (dt == TG_F64)
        tu_assert_gradcheck(ctx, y);
    else
        tu_gradcheck_f32(ctx, y);
    tu_ctx_free(ctx);
}

TCase *tu_tcase(Suite *s, const char *name, int timeout_s)
{
    TCase *tc = tcase_create(name);
    tcase_add_checked_fixture(tc, NULL, tu_ctx_teardown);
    if (timeout_s > 0)
        tcase_set_timeout(tc, timeout_s);
    suite_add_tcase(s, tc);
    return tc;
}

static const tu_build_fn *g_ti_builds;

START_TEST(test_thread_invariance)
{
    tu_assert_thread_invariant(g_ti_builds[_i / 2], tu_dtypes[_i % 2]);
}
END_TEST

void tu_add_thread_tcase(Suite *s, const tu_build_fn *builds, int n)
{
    g_ti_builds = builds;
    TCase *tc = tu_tcase(s, "threads", 60);
    tcase_add_loop_test(tc, test_thread_invariance, 0, 2 * n);
}

/* ---- files and the tgrad program ------------------------------------------------------------ */
const char *tu_tgrad_exe(void)
{
    const char *e = getenv("TG_TGRAD_EXE");
    if (e && *e)
        return e;
#ifdef TG_TGRAD_EXE
    return TG_TGRAD_EXE;
#else
    return "tgrad";
#endif
}

void tu_mkdtemp(char *dir, size_t n, const char *tag)
{
    snprintf(dir, n, "/tmp/tgrad_%s_XXXXXX", tag);
    ck_assert_ptr_nonnull(mkdtemp(dir));
}

const char *tu_full_device(const char *dir, const char *name, char *path, size_t n,
                           bool must_open, const char *what)
{
    snprintf(path, n, "%s/%s", dir, name);
    const dev_t full = makedev(1, 7);
    char why[300];
    if (mknod(path, S_IFCHR | 0666, full) == 0) {
        int fd = must_open ? open(path, O_WRONLY | O_CLOEXEC) : -2;
        if (fd != -1) {
            if (fd >= 0)
                close(fd);
            return path;
        }
        snprintf(why, sizeof why, "cannot open the node made with mknod: %s", strerror(errno));
        unlink(path); /* ours */
    } else {
        snprintf(why, sizeof why, "mknod: %s", strerror(errno));
    }
    struct stat sb;
    if (stat("/dev/full", &sb) == 0 && S_ISCHR(sb.st_mode) && sb.st_rdev == full) {
        snprintf(path, n, "/dev/full");
        return path;
    }
    fprintf(stderr, "skipped %s: no character device to write to (%s; /dev/full is %s)\n", what,
            why, stat("/dev/full", &sb) != 0 ? "missing"
                 : !S_ISCHR(sb.st_mode)     ? "not a character device"
                                            : "another device than c 1 7");
    return NULL;
}

void tu_rm_tree(const char *dir)
{
    DIR *d = opendir(dir);
    if (!d) {
        unlink(dir); /* not a directory (or already gone) */
        return;
    }
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, ".."))
            continue;
        char p[8192];
        snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
        struct stat sb;
        if (lstat(p, &sb) == 0 && S_ISDIR(sb.st_mode))
            tu_rm_tree(p);
        else
            unlink(p);
    }
    closedir(d);
    rmdir(dir);
}

const char *tu_path(char *p, size_t n, const char *dir, const char *name)
{
    snprintf(p, n, "%s/%s", dir, name);
    return p;
}

char *tu_slurp(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    size_t cap = 1 << 16, k = 0, got;
    char *b = malloc(cap + 1);
    ck_assert_ptr_nonnull(b);
    while ((got = fread(b + k, 1, cap - k, f)) > 0) {
        k += got;
        if (k == cap) {
            b = realloc(b, (cap *= 2) + 1);
            ck_assert_ptr_nonnull(b);
        }
    }
    fclose(f);
    b[k] = 0;
    if (len)
        *len = k;
    return b;
}

char *tu_slurp_in(const char *dir, const char *name, size_t *len)
{
    char p[4400];
    return tu_slurp(tu_path(p, sizeof p, dir, name), len);
}

int tu_count_lines(const char *s)
{
    int n = 0;
    for (; *s; s++)
        n += *s == '\n';
    return n;
}

void tu_write_file(const char *dir, const char *name, const char *text)
{
    char p[4400];
    FILE *f = fopen(tu_path(p, sizeof p, dir, name), "wb");
    ck_assert_msg(f != NULL, "cannot create %s", p);
    fputs(text, f);
    ck_assert_int_eq(fclose(f), 0);
}

void tu_write_pairs(const char *dir, const char *name, int n, int offset)
{
    static const char *en[] = {"one", "two", "three", "four", "five", "six", "seven", "eight"};
    static const char *de[] = {"eins", "zwei", "drei", "vier", "fünf", "sechs", "sieben", "acht"};
    char *buf = malloc((size_t)n * 96 + 1), *p = buf;
    ck_assert_ptr_nonnull(buf);
    for (int i = 0; i < n; i++) {
        int a = (i + offset) % 8, b = (i * 3 + offset) % 8, c = (i * 5 + 1) % 8;
        p += sprintf(p, "%s %s %s.\t%s %s %s.\n", en[a], en[b], i % 3 ? en[c] : "and", de[a], de[b],
                     i % 3 ? de[c] : "und");
    }
    tu_write_file(dir, name, buf);
    free(buf);
}

void tu_write_corpus(const char *dir, const char *name, int n_words)
{
    static const char *const words[] = {"the", "quick", "brown", "fox", "jumps", "over",
                                        "lazy", "dog", "and", "runs", "away", "home"};
    char p[4400];
    FILE *f = fopen(tu_path(p, sizeof p, dir, name), "wb");
    ck_assert_msg(f != NULL, "cannot create %s", p);
    uint64_t s = 7;
    for (int i = 0; i < n_words; i++) {
        s = s * 6364136223846793005ULL + 1442695040888963407ULL;
        fprintf(f, "%s%s", words[(s >> 33) % 12], i % 9 == 8 ? ".\n" : " ");
    }
    ck_assert_int_eq(fclose(f), 0);
}

static double tu_now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

int tu_wait_killed(pid_t pid)
{
    siginfo_t si;
    while (waitid(P_PID, (id_t)pid, &si, WEXITED | WNOWAIT) != 0 && errno == EINTR)
        ;
    char path[96];
    snprintf(path, sizeof path, "/dev/shm/__KMP_REGISTERED_LIB_%ld_%ld", (long)pid,
             (long)getuid());
    unlink(path); /* absent unless this child ran libomp and was killed */
    int st = 0;
    pid_t w;
    while ((w = waitpid(pid, &st, 0)) < 0 && errno == EINTR)
        ;
    ck_assert_int_eq(w, pid);
    return st;
}

int tu_run_sh(const char *dir, const char *cmd, double timeout_s, double *secs)
{
    size_t len = strlen(dir) + strlen(cmd) + 64;
    char *full = malloc(len);
    ck_assert_ptr_nonnull(full);
    snprintf(full, len, "cd '%s' && %s%s > out.txt 2> err.txt", dir,
             cmd[0] == '(' ? "" : "exec ", cmd);
    double t0 = tu_now_s();
    pid_t pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        setpgid(0, 0);
        execl("/bin/sh", "sh", "-c", full, (char *)NULL);
        _exit(127);
    }
    free(full);
    setpgid(pid, pid);
    int st = 0;
    for (;;) {
        pid_t w = waitpid(pid, &st, WNOHANG);
        if (w == pid)
            break;
        if (tu_now_s() - t0 > timeout_s) {
            kill(-pid, SIGKILL);
            st = tu_wait_killed(pid);
            if (secs)
                *secs = tu_now_s() - t0;
            return TU_TIMED_OUT;
        }
        struct timespec d = {0, 2000000};
        nanosleep(&d, NULL);
    }
    if (secs)
        *secs = tu_now_s() - t0;
    if (WIFEXITED(st))
        return WEXITSTATUS(st);
    return -WTERMSIG(st);
}

int tu_run_tgrad(const char *dir, const char *args, double timeout_s, double *secs)
{
    size_t len = strlen(tu_tgrad_exe()) + strlen(args) + 8;
    char *cmd = malloc(len);
    ck_assert_ptr_nonnull(cmd);
    snprintf(cmd, len, "'%s' %s", tu_tgrad_exe(), args);
    int rc = tu_run_sh(dir, cmd, timeout_s, secs);
    free(cmd);
    return rc;
}

bool tu_st_rewrite(const char *src, const char *dst, const tu_st_edit *e)
{
    tg_ctx *ctx = tg_ctx_new();
    tg_safetensors *st = tg_safetensors_read(ctx, src);
    ck_assert_msg(st != NULL, "%s", tg_ctx_message(ctx));
    int64_t n = tg_safetensors_count(st), nm = tg_safetensors_meta_count(st);
    tg_io_item *items = calloc((size_t)n + 1, sizeof *items);
    const char **mk = calloc((size_t)nm + 1, sizeof *mk), **mv = calloc((size_t)nm + 1, sizeof *mv);
    ck_assert(items && mk && mv);
    int64_t ni = 0, nk = 0;
    bool seen = false;
    for (int64_t i = 0; i < n; i++) {
        const char *name = tg_safetensors_name(st, i);
        if (e->drop && !strcmp(name, e->drop))
            continue;
        tg_tensor *t = tg_safetensors_tensor(st, i);
        if (e->poison && !strcmp(name, e->poison))
            tg_fill(t, NAN);
        if (e->fill && !strcmp(name, e->fill))
            tg_fill(t, e->fill_value);
        items[ni++] = tg_io_item_data(t, e->rename && !strcmp(name, e->rename) ? e->to : name);
    }
    for (int64_t i = 0; i < nm; i++) {
        const char *k = tg_safetensors_meta_key(st, i);
        if (e->key && !strcmp(k, e->key)) {
            seen = true;
            if (!e->value)
                continue;
            mk[nk] = k;
            mv[nk++] = e->value;
            continue;
        }
        mk[nk] = k;
        mv[nk++] = tg_safetensors_meta_value(st, i);
    }
    if (e->key && e->value && !seen) {
        mk[nk] = e->key;
        mv[nk++] = e->value;
    }
    ck_assert_msg(tg_safetensors_write_items(ctx, dst, ni, items, nk, mk, mv, NULL) == TG_OK,
                  "%s", tg_ctx_message(ctx));
    free(items);
    free(mk);
    free(mv);
    tg_ctx_free(ctx);
    return seen;
}

void tu_write_npy_raw(const char *path, const char *descr, const char *shape, const void *data,
                      size_t n)
{
    char hdr[512];
    int hl = snprintf(hdr, sizeof hdr, "{'descr': '%s', 'fortran_order': False, 'shape': %s, }",
                      descr, shape);
    ck_assert(hl > 0 && (size_t)hl < sizeof hdr);
    int pad = (64 - (10 + hl + 1) % 64) % 64;
    FILE *f = fopen(path, "wb");
    ck_assert_msg(f != NULL, "cannot create %s", path);
    unsigned short len = (unsigned short)(hl + pad + 1);
    fwrite("\x93NUMPY\x01\x00", 1, 8, f);
    fputc(len & 0xff, f);
    fputc(len >> 8, f);
    fwrite(hdr, 1, (size_t)hl, f);
    for (int i = 0; i < pad; i++)
        fputc(' ', f);
    fputc('\n', f);
    if (n)
        fwrite(data, 1, n, f);
    ck_assert_int_eq(fclose(f), 0);
}

double tu_rel_err(const double *a, const double *b, int64_t n)
{
    double d = 0, s = 1e-3;
    for (int64_t i = 0; i < n; i++) {
        double e = fabs(a[i] - b[i]);
        d = e > d ? e : d;
        s = fabs(b[i]) > s ? fabs(b[i]) : s;
    }
    return d / s;
}

int tu_argmax(const double *x, int64_t n)
{
    int best = 0;
    for (int64_t i = 1; i < n; i++)
        if (x[i] > x[best])
            best = (int)i;
    return best;
}

void tu_generator_logits(struct tg_generator *gen, int64_t n, double *out)
{
    tg_tensor *lg = tg_generator_logits(gen);
    ck_assert_ptr_nonnull(lg);
    ck_assert_int_le(n, tg_tensor_numel(lg));
    if (n == tg_tensor_numel(lg)) {
        ck_assert_int_eq(tg_tensor_get_data(lg, out, TG_F64, (size_t)n), TG_OK);
        return;
    }
    for (int64_t i = 0; i < n; i++) /* the first rows: the live ones (select_rows) */
        out[i] = tg_get(lg, i);
}
