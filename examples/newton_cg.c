/*
 * newton_cg.c - Newton-CG against Adam on a small regression problem, full batch, f64.
 *
 * Newton-CG is the truncated Newton method (Nocedal & Wright, "Numerical Optimization", 2nd
 * ed., sec. 7.1, Alg. 7.1) with the damping of Martens 2010 ("Deep learning via Hessian-free
 * optimization", sec. 4.1). At each outer step:
 *   1. f and g = grad f: one forward and backward;
 *   2. conjugate gradients on (H + lambda I) p = -g, each product H d one run of a graph built
 *      once by tg_hvp with the direction d as its input (reverse over reverse). CG stops when
 *      |r| <= min(0.5, sqrt|g|) |g| (the forcing sequence of N&W's Alg. 7.1), after CG_MAX
 *      iterations, or at a direction of non-positive curvature (keeping the last iterate, or
 *      p = -g at the first);
 *   3. a backtracking line search from a = 1, halving a until Armijo's condition
 *      f(w + a p) <= f(w) + 1e-4 a g.p holds (N&W Alg. 3.1);
 *   4. Levenberg-Marquardt: rho = (f(w + p) - f(w)) / (g.p + p.H p / 2), the change the
 *      undamped quadratic model predicts; lambda *= 2/3 when rho > 3/4, *= 3/2 when rho < 1/4.
 * Adam is tgrad's (tg_optim, PyTorch's update, default betas and eps) on the same model from
 * the same weights, at the learning rates 3e-4, 1e-3, 3e-3, 1e-2, 3e-2 and 1e-1; the rate
 * with the lowest final loss is the one compared.
 *
 * Problem: a student-teacher regression. The teacher is a fixed tanh network with one hidden
 * layer of 8 units, y = sum_j c_j tanh(a_j . x + b_j), its weights and N points x uniform in
 * [-1, 1]^2 drawn from a splitmix64 stream. The student is an MLP 2-H-H-1 with tanh
 * (nn.Linear's initialisation from the context RNG), fitted by the mean squared error. Its
 * minimum is near zero, where Newton's fast local convergence shows. f64 throughout: CG needs
 * H d to many digits, and the check below compares H v with a central difference of
 * gradients, which f32 would drown in rounding.
 *
 * The program checks, and exits 1 otherwise:
 *   - at the start and at the end, tg_hvp's H v against (g(w + e v) - g(w - e v)) / 2e,
 *     e = 1e-5, to 1e-6 relative (the difference's own error is about e^2 |D^3 f| + eps / e);
 *   - Newton-CG's final loss is below 1e-6 and below the best Adam's after as many steps as
 *     Newton-CG's work in gradient evaluations (an HVP counted as two, a line search's loss as
 *     one; Adam runs at least that many steps).
 * It prints Newton-CG's steps, Adam's final losses, and a table of Newton-CG's loss with the
 * best Adam's at the same work and at the same wall time. The numbers read from the clock (the
 * times, Adam at equal time) vary from run to run; every other is the same for any thread
 * count.
 *
 * Usage: newton_cg [--points N] [--hidden H] [--steps K] [--cg-max M] [--adam-steps S]
 * (the test suite's: 128 points, H = 8, 60 Newton-CG steps, CG_MAX 100, Adam as long as
 * Newton-CG's work).
 */
#define _POSIX_C_SOURCE 200809L /* clock_gettime */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "tgrad_train.h"

enum { NP = 6, N_LR = 6, TEACHER = 8 };
static const double LOSS_BOUND = 1e-6;
static const double ADAM_LR[N_LR] = {3e-4, 1e-3, 3e-3, 1e-2, 3e-2, 1e-1};

typedef struct {
    long points, hidden, steps, cg_max, adam_steps;
} sizes;

/* The problem: the model, its data, the two graphs and the counts of evaluations. */
typedef struct {
    tg_ctx *ctx;
    tg_tensor *w[NP], *v[NP], *hv[NP], *x, *y, *loss;
    tg_graph *grad_graph; /* loss; backward gives the gradient */
    tg_graph *hvp_graph;  /* hv = H v, v an input */
    int64_t n;            /* parameters */
    long grads, hvps, losses;
    struct timespec t0;
} problem;

/* One point of a method's trace: after `work` gradient-equivalents, at `time` seconds. */
typedef struct {
    double time, loss;
    long work;
} point;

static double seconds(const problem *pb)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)(t.tv_sec - pb->t0.tv_sec) + 1e-9 * (double)(t.tv_nsec - pb->t0.tv_nsec);
}

/* The data stream: splitmix64, independent of the context RNG. */
static double uniform(uint64_t *s, double lo, double hi)
{
    uint64_t z = (*s += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return lo + (hi - lo) * (double)((z ^ (z >> 31)) >> 11) * 0x1.0p-53;
}

/* The data: x (N, 2) uniform in [-1, 1]^2, y (N, 1) = the teacher's output at x. */
static void teacher_data(tg_tensor *x, tg_tensor *y, long points)
{
    double a[TEACHER][4]; /* a row per unit: its two weights, its bias, its output weight */
    uint64_t s = 77;
    for (int j = 0; j < TEACHER; j++)
        for (int k = 0; k < 4; k++)
            a[j][k] = k < 2 ? uniform(&s, -2, 2) : uniform(&s, -1, 1);
    for (long i = 0; i < points; i++) {
        double x1 = uniform(&s, -1, 1), x2 = uniform(&s, -1, 1), out = 0;
        for (int j = 0; j < TEACHER; j++)
            out += a[j][3] * tanh(a[j][0] * x1 + a[j][1] * x2 + a[j][2]);
        tg_set(x, 2 * i, x1);
        tg_set(x, 2 * i + 1, x2);
        tg_set(y, i, out);
    }
}

static double dot(int64_t n, const double *a, const double *b)
{
    double s = 0;
    for (int64_t i = 0; i < n; i++)
        s += a[i] * b[i];
    return s;
}

/* The model, the data and the graphs: loss (N, 2) -> () and its HVP along v. */
static int build(problem *pb, const sizes *sz)
{
    tg_ctx *ctx = pb->ctx;
    int64_t h = sz->hidden, shapes[NP][2] = {{h, 2}, {h, 0}, {h, h}, {h, 0}, {1, h}, {1, 0}};
    static const char *names[NP] = {"0.weight", "0.bias",   "2.weight", /* nn.Sequential's */
                                    "2.bias",   "4.weight", "4.bias"};
    for (int p = 0; p < NP; p++) {
        int rank = shapes[p][1] ? 2 : 1;
        pb->w[p] = tg_param(ctx, TG_F64, rank, shapes[p], names[p]);
        pb->v[p] = tg_input(ctx, TG_F64, rank, shapes[p], "v");
        if (!pb->w[p] || !pb->v[p])
            return 1;
        pb->n += tg_tensor_numel(pb->w[p]);
    }
    for (int p = 0; p < NP; p += 2) /* nn.Linear: U(-1/sqrt(fan_in), 1/sqrt(fan_in)) */
        for (int q = 0; q < 2; q++) {
            double r = 1 / sqrt((double)tg_tensor_dim(pb->w[p], 1));
            tg_fill_uniform(pb->w[p + q], -r, r);
        }
    pb->x = tg_input(ctx, TG_F64, TG_DIMS(sz->points, 2), "x");
    pb->y = tg_input(ctx, TG_F64, TG_DIMS(sz->points, 1), "y");
    teacher_data(pb->x, pb->y, sz->points);
    tg_tensor *a = tg_tanh(ctx, tg_dense(ctx, pb->x, pb->w[0], pb->w[1])); /* (N, H) */
    a = tg_tanh(ctx, tg_dense(ctx, a, pb->w[2], pb->w[3]));                /* (N, H) */
    tg_tensor *out = tg_dense(ctx, a, pb->w[4], pb->w[5]);                 /* (N, 1) */
    pb->loss = tg_mse_loss(ctx, out, pb->y, TG_REDUCTION_MEAN);            /* () */
    pb->grad_graph = tg_graph_new(ctx, &pb->loss, 1);
    if (!pb->grad_graph || tg_hvp(ctx, pb->loss, NP, pb->w, pb->v, pb->hv) != TG_OK)
        return 1;
    pb->hvp_graph = tg_graph_new(ctx, pb->hv, NP);
    return pb->hvp_graph ? 0 : 1;
}

/* Flat vectors <-> the parameters, the HVP's direction, the gradients. */
static int put(tg_tensor *const *t, const double *src)
{
    for (int p = 0; p < NP; p++) {
        size_t k = (size_t)tg_tensor_numel(t[p]);
        if (tg_tensor_set_data(t[p], src, TG_F64, k) != TG_OK)
            return 1;
        src += k;
    }
    return 0;
}

static int take(tg_tensor *const *t, double *dst, bool grad)
{
    for (int p = 0; p < NP; p++) {
        size_t k = (size_t)tg_tensor_numel(t[p]);
        tg_status s = grad ? tg_tensor_get_grad(t[p], dst, TG_F64, k)
                           : tg_tensor_get_data(t[p], dst, TG_F64, k);
        if (s != TG_OK)
            return 1;
        dst += k;
    }
    return 0;
}

/* f(w) (a forward), and with @p g the gradient too (forward and backward). */
static int eval(problem *pb, const double *w, double *f, double *g)
{
    if (put(pb->w, w))
        return 1;
    tg_graph_zero_grad(pb->grad_graph);
    if (tg_graph_forward(pb->grad_graph) != TG_OK ||
        (g && tg_graph_backward(pb->grad_graph, pb->loss, NULL) != TG_OK))
        return 1;
    *f = tg_get(pb->loss, 0);
    if (g)
        pb->grads++;
    else
        pb->losses++;
    return g ? take(pb->w, g, true) : 0;
}

/* hd = H d at the parameters' current values (one run of the HVP graph). */
static int hvp(problem *pb, const double *d, double *hd)
{
    pb->hvps++;
    return put(pb->v, d) || tg_graph_forward(pb->hvp_graph) != TG_OK || take(pb->hv, hd, false);
}

/* H v against the central difference of gradients along v at w; returns the relative error. */
static double hvp_check(problem *pb, const double *w, double *work)
{
    int64_t n = pb->n;
    double *v = work, *hv = v + n, *wp = hv + n, *gp = wp + n, *gm = gp + n, f, e = 1e-5;
    for (int64_t i = 0; i < n; i++)
        v[i] = sin(0.7 * (double)i + 1); /* a fixed direction with every entry nonzero */
    if (put(pb->w, w) || hvp(pb, v, hv))
        return INFINITY;
    for (int64_t i = 0; i < n; i++)
        wp[i] = w[i] + e * v[i];
    if (eval(pb, wp, &f, gp))
        return INFINITY;
    for (int64_t i = 0; i < n; i++)
        wp[i] = w[i] - e * v[i];
    if (eval(pb, wp, &f, gm))
        return INFINITY;
    double err = 0, norm = 0;
    for (int64_t i = 0; i < n; i++) {
        double fd = (gp[i] - gm[i]) / (2 * e);
        err += (fd - hv[i]) * (fd - hv[i]);
        norm += hv[i] * hv[i];
    }
    return sqrt(err / norm);
}

/* Truncated CG on (H + lambda I) p = -g from p = 0 (N&W Alg. 7.1's inner loop). Keeps
 * r = -g - (H + lambda I) p, so p.(H + lambda I) p = -g.p - p.r, and gives *q, the undamped
 * model's change g.p + p.H p / 2. Returns the iterations, -1 on error. */
static int cg(problem *pb, const double *g, double lambda, long max, double *p, double *q,
              double *work)
{
    int64_t n = pb->n;
    double *r = work, *d = r + n, *ad = d + n;
    double gnorm = sqrt(dot(n, g, g)), tol = fmin(0.5, sqrt(gnorm)) * gnorm;
    for (int64_t i = 0; i < n; i++) {
        p[i] = 0;
        r[i] = d[i] = -g[i];
    }
    double rr = gnorm * gnorm;
    int j = 0;
    while (j < max && sqrt(rr) > tol) {
        if (hvp(pb, d, ad))
            return -1;
        for (int64_t i = 0; i < n; i++)
            ad[i] += lambda * d[i];
        double curv = dot(n, d, ad);
        if (curv <= 0 && j > 0)
            break;                               /* negative curvature: keep the last iterate */
        double alpha = curv > 0 ? rr / curv : 1; /* at the first: p = -g */
        for (int64_t i = 0; i < n; i++) {
            p[i] += alpha * d[i];
            r[i] -= alpha * ad[i];
        }
        j++;
        double rr_new = dot(n, r, r);
        if (curv <= 0)
            break;
        for (int64_t i = 0; i < n; i++)
            d[i] = r[i] + rr_new / rr * d[i];
        rr = rr_new;
    }
    double gp = dot(n, g, p), pap = -gp - dot(n, p, r);
    *q = gp + 0.5 * (pap - lambda * dot(n, p, p));
    return j;
}

/* One outer step's record. */
typedef struct {
    int cg_iters;
    double lambda, alpha, rho;
} step_info;

/* One outer step of Newton-CG from w (f: its loss, updated), lambda adapted. */
static int newton_step(problem *pb, long cg_max, double *w, double *f, double *lambda,
                       step_info *info, double *work)
{
    int64_t n = pb->n;
    double *g = work, *p = g + n, *wt = p + n, q, ft = 0;
    if (eval(pb, w, f, g))
        return 1;
    info->lambda = *lambda;
    info->cg_iters = cg(pb, g, *lambda, cg_max, p, &q, wt + n);
    if (info->cg_iters < 0)
        return 1;
    double gp = dot(n, g, p), a = 1;
    for (int k = 0;; k++, a *= 0.5) { /* backtracking (Armijo, c = 1e-4) */
        for (int64_t i = 0; i < n; i++)
            wt[i] = w[i] + a * p[i];
        if (eval(pb, wt, &ft, NULL))
            return 1;
        if (k == 0)
            info->rho = (ft - *f) / q;
        if (ft <= *f + 1e-4 * a * gp)
            break;
        if (k == 30) { /* no decrease along p: stay, damp more */
            a = 0;
            ft = *f;
            memcpy(wt, w, (size_t)n * sizeof *w);
            break;
        }
    }
    if (info->rho > 0.75)
        *lambda *= 2.0 / 3;
    else if (info->rho < 0.25)
        *lambda *= 1.5;
    info->alpha = a;
    memcpy(w, wt, (size_t)n * sizeof *w);
    *f = ft;
    return 0;
}

static long work_of(const problem *pb) { return pb->grads + 2 * pb->hvps + pb->losses; }

/* Newton-CG from w0 for sz->steps outer steps; trace[k] after step k (trace[0]: the start). */
static int newton(problem *pb, const sizes *sz, const double *w0, double *w, point *trace,
                  double *work)
{
    double f, lambda = 1;
    memcpy(w, w0, (size_t)pb->n * sizeof *w);
    pb->grads = pb->hvps = pb->losses = 0;
    clock_gettime(CLOCK_MONOTONIC, &pb->t0);
    if (eval(pb, w, &f, NULL))
        return 1;
    pb->losses = 0; /* the starting loss is shared by both methods: not counted */
    trace[0] = (point){0, f, 0};
    printf("Newton-CG (lambda starts at 1):\n  step  CG  lambda    step size  rho       loss      "
           "   grads   HVPs  losses  time (s)\n");
    for (long k = 1; k <= sz->steps; k++) {
        step_info in;
        if (newton_step(pb, sz->cg_max, w, &f, &lambda, &in, work))
            return 1;
        trace[k] = (point){seconds(pb), f, work_of(pb)};
        if (k <= 5 || k == sz->steps || k % 10 == 0)
            printf("  %4ld %3d  %.2e  %-9.4g  %-8.3g  %.4e  %6ld %6ld %6ld  %.3f\n", k, in.cg_iters,
                   in.lambda, in.alpha, in.rho, f, pb->grads, pb->hvps, pb->losses, trace[k].time);
    }
    return 0;
}

/* Adam at @p lr from w0 for @p steps full-batch steps; trace[s] before step s, trace[steps] at
 * the end. */
static int adam(problem *pb, const double *w0, double lr, long steps, point *trace)
{
    tg_optim_config oc = tg_optim_defaults(TG_OPTIM_ADAM);
    oc.lr = lr;
    tg_optim *opt = tg_optim_new(pb->ctx, &oc, NP, pb->w);
    if (!opt || put(pb->w, w0))
        return 1;
    clock_gettime(CLOCK_MONOTONIC, &pb->t0);
    for (long s = 0; s <= steps; s++) {
        tg_graph_zero_grad(pb->grad_graph);
        if (tg_graph_forward(pb->grad_graph) != TG_OK)
            return 1;
        trace[s] = (point){seconds(pb), tg_get(pb->loss, 0), s};
        if (s < steps && (tg_graph_backward(pb->grad_graph, pb->loss, NULL) != TG_OK ||
                          tg_optim_step(opt, -1) != TG_OK))
            return 1;
    }
    return 0;
}

/* The loss of a trace at time t (its last point at or before t). */
static const point *at_time(const point *trace, long n, double t)
{
    long i = 0;
    while (i + 1 <= n && trace[i + 1].time <= t)
        i++;
    return &trace[i];
}

/* Adam at every learning rate; the best (lowest final loss) run's trace is kept in best. */
static int adam_sweep(problem *pb, const sizes *sz, const double *w0, point *best, point *trace,
                      double *best_lr)
{
    printf("Adam (full batch, %ld steps):\n  lr      final loss  time (s)\n", sz->adam_steps);
    for (int i = 0; i < N_LR; i++) {
        if (adam(pb, w0, ADAM_LR[i], sz->adam_steps, trace))
            return 1;
        const point *end = &trace[sz->adam_steps];
        printf("  %-6g  %.4e  %.3f\n", ADAM_LR[i], end->loss, end->time);
        if (i == 0 || end->loss < best[sz->adam_steps].loss) {
            memcpy(best, trace, (size_t)(sz->adam_steps + 1) * sizeof *trace);
            *best_lr = ADAM_LR[i];
        }
    }
    return 0;
}

/* Both losses at Newton-CG's steps: Adam's at the same work, and at the same time. */
static void report(const sizes *sz, const point *nt, const point *ad, double lr)
{
    printf("Newton-CG against Adam (lr %g, its best) at equal work and at equal wall time:\n"
           "  Newton-CG step  work   loss        time (s)  Adam, equal work  Adam, equal time\n",
           lr);
    for (long k = 1; k <= sz->steps; k++) {
        if (!(k <= 2 || k == 5 || k % 10 == 0 || k == sz->steps))
            continue;
        const point *a = at_time(ad, sz->adam_steps, nt[k].time);
        printf("  %14ld  %5ld  %.4e  %8.3f  %.4e        %.4e (step %ld)\n", k, nt[k].work,
               nt[k].loss, nt[k].time, ad[nt[k].work].loss, a->loss, a->work);
    }
}

static int parse(int argc, char **argv, sizes *sz)
{
    *sz = (sizes){128, 8, 60, 100, 0};
    for (int i = 1; i < argc; i++) {
        long *field = !strcmp(argv[i], "--points")       ? &sz->points
                      : !strcmp(argv[i], "--hidden")     ? &sz->hidden
                      : !strcmp(argv[i], "--steps")      ? &sz->steps
                      : !strcmp(argv[i], "--cg-max")     ? &sz->cg_max
                      : !strcmp(argv[i], "--adam-steps") ? &sz->adam_steps
                                                         : NULL;
        char *end;
        if (!field || i + 1 == argc)
            return 1;
        *field = strtol(argv[++i], &end, 10);
        if (*end || *field < 1 || *field > 10000000)
            return 1;
    }
    return 0;
}

/* Newton-CG, then Adam at each rate; the checks. Returns the exit status. */
static int run(problem *pb, sizes *sz, double *w0, double *w, double *work)
{
    if (take(pb->w, w0, false))
        return 1;
    double err0 = hvp_check(pb, w0, work);
    point *nt = malloc((size_t)(sz->steps + 1) * sizeof *nt);
    if (!nt || newton(pb, sz, w0, w, nt, work)) {
        free(nt);
        return 1;
    }
    double err1 = hvp_check(pb, w, work);
    long work_nt = nt[sz->steps].work;
    if (sz->adam_steps < work_nt) /* at least Newton-CG's work */
        sz->adam_steps = work_nt;
    point *ad = malloc(2 * (size_t)(sz->adam_steps + 1) * sizeof *ad);
    double lr = 0;
    int rc = !ad || adam_sweep(pb, sz, w0, ad, ad + sz->adam_steps + 1, &lr);
    if (rc == 0) {
        report(sz, nt, ad, lr);
        double f_nt = nt[sz->steps].loss, f_ad = ad[work_nt].loss;
        printf("H v against central differences of gradients: relative error %.2e at the "
               "start, %.2e at the end\n",
               err0, err1);
        printf("at equal work (%ld gradient evaluations, an HVP counted as 2): Newton-CG "
               "%.4e, Adam %.4e\n",
               work_nt, f_nt, f_ad);
        rc = !(err0 < 1e-6 && err1 < 1e-6 && f_nt < f_ad && f_nt < LOSS_BOUND);
        if (rc)
            fprintf(stderr,
                    "newton_cg: a check failed (HVP error below 1e-6, Newton-CG below "
                    "Adam and below %g)\n",
                    LOSS_BOUND);
    }
    free(nt);
    free(ad);
    return rc;
}

int main(int argc, char **argv)
{
    sizes sz;
    if (parse(argc, argv, &sz)) {
        fprintf(stderr, "usage: newton_cg [--points N] [--hidden H] [--steps K] [--cg-max M] "
                        "[--adam-steps S] (each 1..10000000)\n");
        return 2;
    }
    problem pb = {.ctx = tg_ctx_new()};
    if (!pb.ctx)
        return 1;
    tg_ctx_seed(pb.ctx, 1);
    int rc = build(&pb, &sz);
    double *w0 = rc ? NULL : malloc(10 * (size_t)pb.n * sizeof *w0);
    if (w0) {
        printf("teacher 2-%d-1 tanh, %ld points; student MLP 2-%ld-%ld-1 tanh (%lld parameters), "
               "MSE, f64\n",
               TEACHER, sz.points, sz.hidden, sz.hidden, (long long)pb.n);
        rc = run(&pb, &sz, w0, w0 + pb.n, w0 + 2 * pb.n);
    }
    if (rc && tg_ctx_status(pb.ctx) != TG_OK)
        fprintf(stderr, "newton_cg: %s\n", tg_ctx_message(pb.ctx));
    free(w0);
    tg_ctx_free(pb.ctx);
    return rc || !w0;
}
