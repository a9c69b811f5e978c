/*
 * gradcheck.c - numerical gradient checking as a public API (PyTorch `torch.autograd.gradcheck`
 * semantics: central differences, pass iff |a - n| <= atol + rtol |n|).
 *
 * Checked scalar: L = sum(r * y), r uniform in [0.5, 1.5) so that no gradient cancels.
 * Element mode: numeric dL/dx_i = (L(x + eps e_i) - L(x - eps e_i)) / (x_i+ - x_i-), where the
 *   denominator is the perturbation actually stored (exact in f64, rounded in f32).
 * Projection mode: for random u, v: compares v^T J u computed as grad_v . u (one backward with
 *   upstream v) with the directional difference (L_v(x + eps u) - L_v(x - eps u)) / 2 eps.
 * The context RNG state is restored before every forward run so stochastic ops (dropout) see the
 * same randomness each time.
 */
#include "graph_internal.h"
#include "registry.h"

#include <stdio.h>
#include <stdlib.h>

/* A private stream (splitmix64) so that gradcheck does not advance the context RNG. */
static uint64_t gc_next(uint64_t *s) { return tg__splitmix64(s); }

static double gc_uniform(uint64_t *s) { return (double)(gc_next(s) >> 11) * 0x1.0p-53; }

static double gc_normal(uint64_t *s)
{
    double u1 = gc_uniform(s), u2 = gc_uniform(s);
    if (u1 < 1e-300)
        u1 = 1e-300;
    return sqrt(-2.0 * log(u1)) * cos(6.283185307179586476925 * u2);
}

tg_gradcheck_opts tg_gradcheck_defaults(tg_dtype dt)
{
    tg_gradcheck_opts o;
    memset(&o, 0, sizeof o);
    if (dt == TG_F32) {
        o.eps = 1e-3;
        o.atol = 1e-2;
        o.rtol = 1e-2;
    } else {
        o.eps = 1e-6;
        o.atol = 1e-5;
        o.rtol = 1e-3;
    }
    o.n_projections = 0;
    o.seed = 0x7467726164ULL; /* "tgrad" */
    o.max_elements = 0;
    return o;
}

typedef struct {
    tg_ctx *ctx;
    tg_graph *g;
    tg_tensor *y;
    tg_tensor *r;        /* upstream weights */
    uint64_t rng0[4];    /* context RNG state at entry */
    tg_status fail;      /* first failed run (a custom op's callback can fail anywhere) */
    char fail_msg[512];  /* its message (the next run would drop it) */
    int64_t nl, total;   /* differentiable leaves; their elements */
    /* f64, total each: the leaves' data and accumulated gradients at entry, the analytic
     * gradient; u (projections only): the direction */
    double *saved, *saved_grad, *analytic, *u;
    tg_tensor *zero;     /* a zero upstream gradient */
    /* forward mode: the tangents (one input per leaf), <r, J u>'s graph and J u */
    tg_tensor **u_in, *ty;
    tg_graph *gt;
} gc_state;

/* Keep the first failure of a forward or backward run of the check. */
static void gc_note(gc_state *st, tg_status s)
{
    if (s == TG_OK || st->fail != TG_OK)
        return;
    st->fail = s;
    snprintf(st->fail_msg, sizeof st->fail_msg, "%s", tg_ctx_message(st->ctx));
}

static double loss(gc_state *st)
{
    tg_rng_set_state(st->ctx, st->rng0);
    gc_note(st, tg_graph_forward(st->g));
    double L = 0;
    for (int64_t i = 0; i < st->y->numel; i++)
        L += tg_get(st->r, i) * tg_get(st->y, i);
    return L;
}

static void backward(gc_state *st, const tg_tensor *dy)
{
    tg_rng_set_state(st->ctx, st->rng0);
    gc_note(st, tg_graph_forward(st->g));
    tg_graph_zero_grad(st->g);
    gc_note(st, tg_graph_backward(st->g, st->y, dy));
}

static void consider(tg_gradcheck_report *rep, const tg_gradcheck_opts *o, const tg_tensor *t,
                     int64_t idx, double a, double n)
{
    double abs_err = fabs(a - n);
    double rel_err = abs_err / fmax(fabs(n), o->atol);
    double ratio = abs_err / (o->atol + o->rtol * fabs(n));
    if (!(abs_err <= o->atol + o->rtol * fabs(n))) /* also catches NaN */
        rep->passed = false;
    if (isnan(abs_err))
        ratio = INFINITY;
    if (abs_err > rep->max_abs_err || isnan(abs_err))
        rep->max_abs_err = isnan(abs_err) ? INFINITY : abs_err;
    if (rel_err > rep->max_rel_err || isnan(rel_err))
        rep->max_rel_err = isnan(rel_err) ? INFINITY : rel_err;
    double worst_ratio = rep->worst_abs_err / (o->atol + o->rtol * fabs(rep->worst_numeric));
    if (rep->n_checked == 0 || ratio > worst_ratio || isnan(worst_ratio)) {
        snprintf(rep->worst_tensor, sizeof rep->worst_tensor, "%s", t ? t->name : "");
        rep->worst_index = idx;
        rep->worst_rank = t ? t->rank : 0;
        int64_t rem = idx;
        for (int d = rep->worst_rank - 1; d >= 0; d--) {
            rep->worst_coords[d] = rem % t->shape[d];
            rem /= t->shape[d];
        }
        rep->worst_analytic = a;
        rep->worst_numeric = n;
        rep->worst_abs_err = abs_err;
        rep->worst_rel_err = rel_err;
    }
    rep->n_checked++;
}

/* Which graph an op result was last run by (its memory and whether the bytes are still its
 * own are that graph's), as before gradcheck ran. */
typedef struct {
    tg_graph *graph;
} run_binding;

/* Put back the run bindings op results had before gradcheck ran. */
static void restore_bindings(tg_graph *g, const run_binding *bind)
{
    for (int64_t i = 0; i < tg_graph_size(g); i++) {
        tg_tensor *t = tg_graph_node(g, i);
        if (t->op == TG_OP_NONE)
            continue;
        t->run_graph = bind[i].graph;
    }
}

/* The arguments and options of tg_gradcheck: TG_OK, or the run error recorded naming fn. */
static tg_status gc_args_ok(tg_ctx *ctx, const tg_tensor *y, const tg_gradcheck_opts *po,
                            const char *fn)
{
    const tg_gradcheck_opts o = *po;
    if (y->ctx != ctx) {
        tg__run_err(ctx, TG_ERR_ARG, fn, "'%s' belongs to another context", y->name);
        return TG_ERR_ARG;
    }
    if (o.n_projections > TG_GRADCHECK_MAX_PROJECTIONS) {
        tg__run_err(ctx, TG_ERR_ARG, fn, "n_projections %d is more than the most, %d",
                    o.n_projections, TG_GRADCHECK_MAX_PROJECTIONS);
        return TG_ERR_ARG;
    }
    if ((int)o.mode < TG_GRADCHECK_REVERSE || (int)o.mode > TG_GRADCHECK_BOTH) {
        tg__run_err(ctx, TG_ERR_ARG, fn, "unknown mode %d", (int)o.mode);
        return TG_ERR_ARG;
    }
    if (!(o.eps > 0) || !isfinite(o.eps) || !(o.atol >= 0) || !(o.rtol >= 0) ||
        o.n_projections < 0 || o.max_elements < 0) {
        tg__run_err(ctx, TG_ERR_ARG, fn,
                "invalid options (eps %g, atol %g, rtol %g, proj %d, max_elements %lld)", o.eps,
                o.atol, o.rtol, o.n_projections, (long long)o.max_elements);
        return TG_ERR_ARG;
    }
    if (!y->requires_grad) {
        tg__run_err(ctx, TG_ERR_NOGRAD, fn, "'%s' depends on nothing that requires grad",
                    y->name);
        return TG_ERR_NOGRAD;
    }
    return TG_OK;
}

/* Allocate the upstream weights r, the zero upstream gradient and the f64 buffers (before any
 * leaf or gradient is touched, so running out of memory leaves no trace: saved data, saved
 * grads, analytic grads, projection directions). false: NOMEM recorded, nothing kept. */
static bool gc_alloc(gc_state *st, const tg_gradcheck_opts *o, const char *fn)
{
    tg_ctx *ctx = st->ctx;
    tg_tensor *y = st->y;
    st->r = tg_const(ctx, y->dtype, y->rank, y->shape, "gradcheck.r");
    st->zero = tg_const(ctx, y->dtype, y->rank, y->shape, "gradcheck.zero");
    /* Saved leaf data and grads, and the analytic gradient, all in f64. */
    int64_t total = 0;
    size_t saved_bytes = SIZE_MAX; /* unreachable if the sizes overflow: NOMEM below */
    bool sizes_ok = true;
    for (int64_t l = 0; l < st->nl; l++)
        sizes_ok = sizes_ok && tg__add_i64(total, tg_graph_grad_leaf(st->g, l)->numel, &total);
    if (sizes_ok && !tg__bytes(total, sizeof(double) * (o->n_projections ? 4 : 3), &saved_bytes))
        saved_bytes = SIZE_MAX;
    double *saved = tg__alloc(ctx, saved_bytes, fn);
    if (!st->r || !st->zero || !saved) {
        tg__free(ctx, saved);
        tg_tensor *tmp[2] = {st->r, st->zero};
        for (int k = 0; k < 2; k++) {
            if (tmp[k]) {
                tg__free(ctx, tmp[k]->data);
                tg__free(ctx, tmp[k]);
            }
        }
        return false;
    }
    st->total = total;
    st->saved = saved;
    st->saved_grad = saved + total;
    st->analytic = saved + 2 * total;
    st->u = o->n_projections ? saved + 3 * total : NULL;
    return true;
}

/* The analytic gradient, twice (the second run must be bitwise identical), once more with each
 * rule checked for accumulation, and from a zero upstream gradient (exactly zero). */
static void gc_analytic(gc_state *st, tg_gradcheck_report *report)
{
    backward(st, st->r);
    for (int64_t l = 0, off = 0; l < st->nl; l++) {
        tg_tensor *t = tg_graph_grad_leaf(st->g, l);
        for (int64_t i = 0; i < t->numel; i++)
            st->analytic[off + i] = tg_grad_get(t, i);
        off += t->numel;
    }
    backward(st, st->r);
    report->backward_deterministic = true;
    for (int64_t l = 0, off = 0; l < st->nl; l++) {
        tg_tensor *t = tg_graph_grad_leaf(st->g, l);
        for (int64_t i = 0; i < t->numel; i++) {
            double v = tg_grad_get(t, i), w = st->analytic[off + i];
            if (memcmp(&v, &w, sizeof v) != 0 && !(isnan(v) && isnan(w)))
                report->backward_deterministic = false;
        }
        off += t->numel;
    }
    /* Every rule adds into its inputs' gradients: run once more with each rule checked on
     * pre-filled buffers (autodiff.c, run_rule_checked). Its gradients equal the first run's
     * (the pre-fill is undone exactly), so the leaves end as before. */
    st->g->check_accum = true;
    memset(&st->g->accum_bad, 0, sizeof st->g->accum_bad);
    backward(st, st->r);
    st->g->check_accum = false;
    report->backward_accumulates = st->g->accum_bad.node == NULL;
    /* A zero upstream gradient must give exactly zero gradients. */
    backward(st, st->zero);
    report->zero_upstream_ok = true;
    for (int64_t l = 0; l < st->nl; l++) {
        tg_tensor *t = tg_graph_grad_leaf(st->g, l);
        for (int64_t i = 0; i < t->numel; i++)
            if (tg_grad_get(t, i) != 0)
                report->zero_upstream_ok = false;
    }
}

/* The stride of the elements checked in a tensor of @p n (every one, or spread evenly past
 * max_elements). */
static int64_t gc_step(const tg_gradcheck_opts *o, int64_t n)
{
    return o->max_elements > 0 && n > o->max_elements ? (n + o->max_elements - 1) / o->max_elements
                                                      : 1;
}

/* Central differences per element (every `step`-th one past max_elements). */
static void gc_elements(gc_state *st, const tg_gradcheck_opts *o, tg_gradcheck_report *report)
{
    for (int64_t l = 0, off = 0; l < st->nl; l++) {
        tg_tensor *t = tg_graph_grad_leaf(st->g, l);
        int64_t step = gc_step(o, t->numel);
        for (int64_t i = 0; i < t->numel; i += step) {
            double x0 = st->saved[off + i];
            tg_set(t, i, x0 + o->eps);
            double xp = tg_get(t, i);
            double Lp = loss(st);
            tg_set(t, i, x0 - o->eps);
            double xm = tg_get(t, i);
            double Lm = loss(st);
            tg_set(t, i, x0);
            double numeric = (Lp - Lm) / (xp - xm);
            consider(report, o, t, i, st->analytic[off + i], numeric);
        }
        off += t->numel;
    }
}

/* Every leaf at its saved data plus h u (h 0: exactly its saved data). */
static void gc_move(gc_state *st, double h)
{
    for (int64_t l = 0, off = 0; l < st->nl; l++) {
        tg_tensor *t = tg_graph_grad_leaf(st->g, l);
        for (int64_t i = 0; i < t->numel; i++)
            tg_set(t, i, h == 0 ? st->saved[off + i] : st->saved[off + i] + h * st->u[off + i]);
        off += t->numel;
    }
}

/* Random projections: per projection a new upstream v and direction u; the analytic u . grad
 * against the central difference along u. */
static void gc_projections(gc_state *st, const tg_gradcheck_opts *o, uint64_t *seed,
                           tg_gradcheck_report *report)
{
    double *u = st->u;
    for (int p = 0; p < o->n_projections; p++) {
        /* new random v (upstream) and u (direction) per projection */
        for (int64_t i = 0; i < st->y->numel; i++)
            tg_set(st->r, i, gc_normal(seed));
        double unorm = 0;
        for (int64_t i = 0; i < st->total; i++) {
            u[i] = gc_normal(seed);
            unorm += u[i] * u[i];
        }
        unorm = sqrt(unorm);
        for (int64_t i = 0; i < st->total; i++)
            u[i] /= unorm;
        backward(st, st->r);
        double a = 0;
        for (int64_t l = 0, off = 0; l < st->nl; l++) {
            tg_tensor *t = tg_graph_grad_leaf(st->g, l);
            for (int64_t i = 0; i < t->numel; i++)
                a += tg_grad_get(t, i) * u[off + i];
            off += t->numel;
        }
        double L[2];
        for (int sgn = 0; sgn < 2; sgn++) {
            gc_move(st, sgn == 0 ? o->eps : -o->eps);
            L[sgn] = loss(st);
        }
        gc_move(st, 0.0);
        consider(report, o, NULL, p, a, (L[0] - L[1]) / (2 * o->eps));
    }
}

/* ---- forward mode ---------------------------------------------------------------------- */

/* The tangent inputs (one per leaf) and J u built as nodes, and their graph; false with the
 * error recorded as a run error (an op without a forward rule: named). */
static bool gc_forward_build(gc_state *st, const char *fn)
{
    tg_ctx *ctx = st->ctx;
    tg__io_enter(ctx); /* built here: a failure is this call's, not a pending build */
    tg_tensor **leaf = tg__alloc(ctx, sizeof *leaf * (size_t)st->nl * 2, fn);
    bool ok = leaf != NULL;
    for (int64_t l = 0; ok && l < st->nl; l++) {
        leaf[l] = tg_graph_grad_leaf(st->g, l);
        leaf[st->nl + l] = tg_input(ctx, leaf[l]->dtype, leaf[l]->rank, leaf[l]->shape,
                                    "gradcheck.u");
        ok = leaf[st->nl + l] != NULL;
    }
    ok = ok && st->nl <= INT32_MAX &&
         tg_jvp(ctx, (int)st->nl, leaf, leaf + st->nl, 1, &st->y, &st->ty) == TG_OK;
    st->gt = ok ? tg_graph_new(ctx, &st->ty, 1) : NULL;
    st->u_in = leaf ? leaf + st->nl : NULL;
    tg__io_leave(ctx);
    return st->gt != NULL;
}

/* The tangent inputs set to @p u (f64, the leaves' elements in order; NULL: zero but element
 * @p at = 1), the graph run; <r, J u>. */
static double gc_jvp(gc_state *st, const double *u, int64_t at)
{
    for (int64_t l = 0, off = 0; l < st->nl; l++) {
        tg_tensor *t = st->u_in[l];
        for (int64_t i = 0; i < t->numel; i++)
            tg_set(t, i, u ? u[off + i] : off + i == at ? 1.0 : 0.0);
        off += t->numel;
    }
    tg_rng_set_state(st->ctx, st->rng0);
    gc_note(st, tg_graph_forward(st->gt));
    double a = 0;
    for (int64_t i = 0; i < st->y->numel; i++)
        a += tg_get(st->r, i) * tg_get(st->ty, i);
    return a;
}

/* Forward mode: JVP columns (or projections) against central differences, then the adjoint
 * identity for a random u against J^T r from the backward kernels. */
static void gc_forward(gc_state *st, const tg_gradcheck_opts *o, uint64_t *seed,
                       tg_gradcheck_report *report)
{
    if (o->n_projections == 0) { /* the JVP columns gc_elements visits, then the differences */
        for (int64_t l = 0, off = 0; l < st->nl; l++) {
            int64_t n = tg_graph_grad_leaf(st->g, l)->numel, step = gc_step(o, n);
            for (int64_t i = 0; i < n; i += step)
                st->analytic[off + i] = gc_jvp(st, NULL, off + i);
            off += n;
        }
        gc_elements(st, o, report);
    } else {
        for (int p = 0; p < o->n_projections; p++) {
            for (int64_t i = 0; i < st->total; i++)
                st->u[i] = gc_normal(seed);
            double a = gc_jvp(st, st->u, -1), L[2];
            for (int sgn = 0; sgn < 2; sgn++) {
                gc_move(st, sgn == 0 ? o->eps : -o->eps);
                L[sgn] = loss(st);
            }
            gc_move(st, 0.0);
            consider(report, o, NULL, p, a, (L[0] - L[1]) / (2 * o->eps));
        }
    }
    double *u = st->analytic; /* reused: a random direction, then J^T r */
    for (int64_t i = 0; i < st->total; i++)
        u[i] = gc_normal(seed);
    double a = gc_jvp(st, u, -1), b = 0, scale = fabs(a);
    backward(st, st->r);
    for (int64_t l = 0, off = 0; l < st->nl; l++) {
        tg_tensor *t = tg_graph_grad_leaf(st->g, l);
        for (int64_t i = 0; i < t->numel; i++) {
            b += u[off + i] * tg_grad_get(t, i);
            scale += fabs(u[off + i] * tg_grad_get(t, i));
        }
        off += t->numel;
    }
    report->adjoint_err = fabs(a - b) / (scale > 0 ? scale : 1);
    report->adjoint_ok = report->adjoint_err <= (st->y->dtype == TG_F64 ? 1e-10 : 1e-4);
}

/* Restore leaves (data and grads) and the context's RNG. */
static void gc_restore_leaves(gc_state *st)
{
    for (int64_t l = 0, off = 0; l < st->nl; l++) {
        tg_tensor *t = tg_graph_grad_leaf(st->g, l);
        for (int64_t i = 0; i < t->numel; i++) {
            tg_set(t, i, st->saved[off + i]);
            if (t->grad) {
                if (t->dtype == TG_F32)
                    ((float *)t->grad)[i] = (float)st->saved_grad[off + i];
                else
                    ((double *)t->grad)[i] = st->saved_grad[off + i];
            }
        }
        off += t->numel;
    }
    tg_rng_set_state(st->ctx, st->rng0);
}

/* The report's message: the verdict and the worst element; an accumulation failure first. */
static void gc_message(const gc_state *st, tg_gradcheck_report *report)
{
    char msg[1024];
    snprintf(msg, sizeof msg,
             "%s: %lld checked in %d tensors, max abs err %.3g, max rel err %.3g, worst '%s'[%lld]"
             " analytic %.10g numeric %.10g%s%s",
             report->passed ? "PASS" : "FAIL", (long long)report->n_checked, report->n_tensors,
             report->max_abs_err, report->max_rel_err, report->worst_tensor,
             (long long)report->worst_index, report->worst_analytic, report->worst_numeric,
             report->backward_deterministic ? "" : "; second backward differs",
             report->zero_upstream_ok ? "" : "; zero upstream gave non-zero gradients");
    if (!report->adjoint_ok) {
        size_t l = strlen(msg);
        snprintf(msg + l, sizeof msg - l, "; adjoint identity <r, Ju> = <J^T r, u> off by %.3g",
                 report->adjoint_err);
    }
    if (!report->backward_accumulates) { /* the cause first: the rest would mislead */
        char rest[sizeof msg];
        snprintf(rest, sizeof rest, "%s", msg);
        snprintf(msg, sizeof msg, "FAIL: the backward rule of '%s' (op %s) assigns the "
                 "gradient of its input '%s' instead of adding to it (dx += ...): element %lld "
                 "pre-filled with %.6g became %.6g, want %.6g; %.500s",
                 st->g->accum_bad.node->name, tg_tensor_op_name(st->g->accum_bad.node),
                 st->g->accum_bad.src->name, (long long)st->g->accum_bad.index,
                 st->g->accum_bad.prefill, st->g->accum_bad.got, st->g->accum_bad.want,
                 rest + 6 /* after "FAIL: " */);
    }
    size_t ml = strlen(msg);
    if (ml >= sizeof report->message)
        ml = sizeof report->message - 1;
    memcpy(report->message, msg, ml);
    report->message[ml] = '\0';
}

/* A run of the check failed: the report's message and the run error say so. */
static tg_status gc_failed(gc_state *st, tg_gradcheck_report *report, const char *fn)
{
    size_t fl = strlen(st->fail_msg); /* "FAIL: a run failed: " + the message, cut */
    const char *head = "FAIL: a run failed: ";
    size_t hl = strlen(head), room = sizeof report->message - 1 - hl;
    memcpy(report->message, head, hl);
    memcpy(report->message + hl, st->fail_msg, fl < room ? fl : room);
    report->message[hl + (fl < room ? fl : room)] = '\0';
    tg__run_err(st->ctx, st->fail, fn, "a run of the check failed: %s", st->fail_msg);
    return st->fail;
}

/* The checks on a forwarded graph with everything allocated: the analytic gradient's
 * properties, then finite differences per element or along projections; leaves restored. */
static void gc_run(gc_state *st, const tg_gradcheck_opts *o, tg_gradcheck_report *report)
{
    uint64_t seed = o->seed;
    for (int64_t i = 0; i < st->y->numel; i++)
        tg_set(st->r, i, 0.5 + gc_uniform(&seed));
    for (int64_t l = 0, off = 0; l < st->nl; l++) {
        tg_tensor *t = tg_graph_grad_leaf(st->g, l);
        for (int64_t i = 0; i < t->numel; i++) {
            st->saved[off + i] = tg_get(t, i);
            st->saved_grad[off + i] = tg_grad_get(t, i);
        }
        off += t->numel;
    }
    report->passed = true;
    report->n_tensors = (int)st->nl;
    report->backward_deterministic = report->zero_upstream_ok = true;
    report->backward_accumulates = report->adjoint_ok = true;
    if (o->mode != TG_GRADCHECK_FORWARD) {
        gc_analytic(st, report);
        if (o->n_projections == 0)
            gc_elements(st, o, report);
        else
            gc_projections(st, o, &seed, report);
    }
    if (o->mode != TG_GRADCHECK_REVERSE) {
        uint64_t rs = o->seed; /* the reverse check's r again, not a projection's */
        for (int64_t i = 0; i < st->y->numel; i++)
            tg_set(st->r, i, 0.5 + gc_uniform(&rs));
        gc_forward(st, o, &seed, report);
    }
    if (!report->backward_deterministic || !report->zero_upstream_ok ||
        !report->backward_accumulates || !report->adjoint_ok)
        report->passed = false;
    /* Restore leaves (data and grads) and recompute the outputs from the original data. */
    gc_restore_leaves(st);
    if (st->fail != TG_OK)
        report->passed = false;
    gc_message(st, report);
}

tg_status tg_gradcheck(tg_ctx *ctx, tg_tensor *y, const tg_gradcheck_opts *opts,
                       tg_gradcheck_report *report)
{
    static const char *fn = "tg_gradcheck";
    if (!ctx || !y || !report)
        return TG_ERR_ARG;
    memset(report, 0, sizeof *report);
    tg__begin(ctx);
    if (tg__build_failed(ctx))
        return ctx->status;
    tg_gradcheck_opts o = opts ? *opts : tg_gradcheck_defaults(y->dtype);
    tg_status as = gc_args_ok(ctx, y, &o, fn);
    if (as != TG_OK)
        return as;
    gc_state st = {.ctx = ctx, .y = y, .fail = TG_OK};
    tg_rng_get_state(ctx, st.rng0);
    st.g = tg_graph_new(ctx, &y, 1);
    if (!st.g)
        return ctx->status;
    st.nl = tg_graph_n_grad_leaves(st.g);
    if (st.nl == 0) {
        tg__run_err(ctx, TG_ERR_NOGRAD, fn, "no differentiable leaves");
        tg_graph_free(st.g);
        return TG_ERR_NOGRAD;
    }
    /* The caller's graphs own the op results' memory: remember which graph each node was
     * last run by, and put that back at the end (no trace). */
    int64_t nn = tg_graph_size(st.g);
    size_t bind_bytes;
    run_binding *bind = tg__mul_size((size_t)nn, sizeof(run_binding), &bind_bytes)
                            ? tg__alloc(ctx, bind_bytes, fn)
                            : NULL;
    if (!bind) {
        tg_graph_free(st.g);
        return ctx->status;
    }
    for (int64_t i = 0; i < nn; i++) {
        tg_tensor *t = tg_graph_node(st.g, i);
        bind[i] = (run_binding){t->run_graph};
    }
    /* A forward run that fails a data check (e.g. a token id out of range) is an error, found
     * here before leaves are perturbed; a later run that fails (a custom op's callback, at a
     * perturbed input) ends the check with its error after the leaves are restored. */
    tg_status fs = tg_graph_forward(st.g);
    tg_rng_set_state(ctx, st.rng0);
    bool ran = fs == TG_OK && gc_alloc(&st, &o, fn);
    bool built = ran && (o.mode == TG_GRADCHECK_REVERSE || gc_forward_build(&st, fn));
    if (built)
        gc_run(&st, &o, report);
    else if (ran) /* forward mode: an op without a forward rule (named), or out of memory */
        fs = ctx->status != TG_OK ? ctx->status : TG_ERR_NOMEM;
    if (ran) {
        tg__free(ctx, st.saved);
        tg__free(ctx, st.u_in ? st.u_in - st.nl : NULL);
        tg_tensor *tmp[2] = {st.r, st.zero};
        for (int k = 0; k < 2; k++) {
            tg__free(ctx, tmp[k]->data);
            tg__free(ctx, tmp[k]);
        }
    }
    ran = built;
    restore_bindings(st.g, bind);
    tg_graph_free(st.g); /* (after restoring: its unbinding must not touch the caller's) */
    tg_graph_free(st.gt);
    tg__free(ctx, bind);
    if (!ran)
        return fs != TG_OK ? fs : ctx->status;
    if (st.fail != TG_OK)
        return gc_failed(&st, report, fn);
    return report->passed ? TG_OK : TG_ERR_GRADCHECK;
}
