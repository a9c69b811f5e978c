/*
 * sharpness.c - the sharpness of a trained small transformer: the top eigenvalue of the
 * Hessian of its training loss over every parameter, by power iteration on Hessian-vector
 * products (tg_hvp, reverse over reverse), f64.
 *
 * Task: arithmetic sequences mod 10, x_t = (a + s t) mod 10 with a in 0..9 and s in 1..9
 * drawn per sequence; the model predicts each next token (it must read s from the first two).
 * Model: tg_transformer as a decoder-only LM (causal mask, learned positions, pre-norm,
 * GELU, dropout 0, d_ff = 4 d_model, heads of width 8), trained with Adam (lr 1e-2) on fresh
 * batches.
 * Then, on one fixed batch, L(w) is the mean cross-entropy and H its Hessian over all the
 * parameters w; from a unit start vector v_0 (normal, from the context RNG):
 *   lambda_{k+1} = |H v_k|,  v_{k+1} = H v_k / |H v_k|,
 * until |lambda_{k+1} - lambda_k| <= 1e-10 lambda_{k+1} or N (--max-iters) products. Each
 * product is one run of a graph built once by tg_hvp with v as its input.
 *
 * The program checks, and exits 1 otherwise:
 *   - the iteration converged;
 *   - lambda equals the Rayleigh quotient v.H v of the last v to 1e-8 relative (so the top
 *     eigenvalue is positive, not a negative one of larger magnitude);
 *   - on one block, the output layer's head.weight: the power iteration over that block alone
 *     equals the largest |eigenvalue| of its dense Hessian from tg_hessian (cyclic Jacobi),
 *     to 1e-8 relative, and the whole Hessian's lambda is at least the block's (Cauchy's
 *     interlacing: a principal submatrix's top eigenvalue is at most the matrix's).
 * With --save FILE it writes the weights (PyTorch state_dict names), the batch (ids, targets),
 * the start vector (v0.<name>) and its results (metadata) to FILE, a safetensors file that
 * tools/reference/sharpness.py reads to run the same iteration with PyTorch's double backward.
 * Every number printed is the same for any thread count.
 *
 * Usage: sharpness [--d-model D] [--layers L] [--seq-len T] [--batch B] [--train-steps S]
 *                  [--max-iters N] [--save FILE]
 * (the test suite's: D = 16, L = 1, T = 8, B = 16, S = 200, N = 2000).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tgrad_train.h"

enum { V = 10, MAX_P = 64 }; /* MAX_P: the parameter tensors of 4 layers, 6 + 12 L */
static const double TOL = 1e-10;

typedef struct {
    long d_model, layers, seq_len, batch, train_steps, max_iters;
    const char *save;
} sizes;

/* Products H v over a list of tensors: v and hv = H v, a graph that computes hv. */
typedef struct {
    int np;
    tg_tensor *w[MAX_P], *v[MAX_P], *hv[MAX_P];
    tg_graph *graph;
    int64_t n; /* elements of all of w */
} hvp_op;

/* The model, its inputs and loss, the training graph, and the products over every
 * parameter (all) and over head.weight alone (block). */
typedef struct {
    tg_ctx *ctx;
    tg_transformer m;
    tg_tensor *ids, *targets, *loss;
    tg_graph *train;
    hvp_op all, block;
} model;

/* A power iteration's result. */
typedef struct {
    double lambda, first, rayleigh, residual;
    long iters;
    bool converged;
} power_result;

/* The data stream: splitmix64, independent of the context RNG. */
static uint64_t next_u64(uint64_t *s)
{
    uint64_t z = (*s += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

/* A batch of B sequences of T + 1 tokens x_t = (a + s t) mod V: ids the first T, targets the
 * last T. */
static int fill_batch(model *md, const sizes *sz, uint64_t *s)
{
    long b = sz->batch, t = sz->seq_len;
    int32_t *ids = malloc(2 * (size_t)(b * t) * sizeof *ids), *tgt = ids ? ids + b * t : NULL;
    if (!ids)
        return 1;
    for (long i = 0; i < b; i++) {
        int a = (int)(next_u64(s) % V), step = 1 + (int)(next_u64(s) % (V - 1));
        for (long j = 0; j < t; j++) {
            ids[i * t + j] = (int32_t)((a + step * j) % V);
            tgt[i * t + j] = (int32_t)((a + step * (j + 1)) % V);
        }
    }
    int rc = tg_tensor_set_data(md->ids, ids, TG_I32, (size_t)(b * t)) != TG_OK ||
             tg_tensor_set_data(md->targets, tgt, TG_I32, (size_t)(b * t)) != TG_OK;
    free(ids);
    return rc;
}

/* The products H v over @p np tensors w: direction inputs, tg_hvp, the graph. */
static int hvp_build(tg_ctx *ctx, tg_tensor *loss, int np, tg_tensor *const *w, hvp_op *op)
{
    op->np = np;
    op->n = 0;
    for (int p = 0; p < np; p++) {
        op->w[p] = w[p];
        op->v[p] = tg_input(ctx, TG_F64, tg_tensor_rank(w[p]), tg_tensor_shape(w[p]), "v");
        if (!op->v[p])
            return 1;
        op->n += tg_tensor_numel(w[p]);
    }
    if (tg_hvp(ctx, loss, np, op->w, op->v, op->hv) != TG_OK)
        return 1;
    op->graph = tg_graph_new(ctx, op->hv, np);
    return op->graph ? 0 : 1;
}

/* The model (its parameters are the context's first ones), the loss on ids and targets
 * (B, T), the training graph and both products. */
static int build(model *md, const sizes *sz)
{
    tg_ctx *ctx = md->ctx;
    tg_transformer_config cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.vocab_size = V;
    cfg.max_seq_len = sz->seq_len;
    cfg.n_layers = sz->layers;
    cfg.layer = tg_encoder_config_default(sz->d_model, sz->d_model / 8);
    cfg.layer.d_ff = 4 * sz->d_model;
    cfg.layer.activation = TG_ACT_GELU;
    cfg.layer.norm_first = true;
    cfg.causal = true;
    if (tg_transformer_init(ctx, &md->m, TG_F64, &cfg) != TG_OK || tg_ctx_n_params(ctx) > MAX_P)
        return 1;
    md->ids = tg_input(ctx, TG_I32, TG_DIMS(sz->batch, sz->seq_len), "ids");
    md->targets = tg_input(ctx, TG_I32, TG_DIMS(sz->batch, sz->seq_len), "targets");
    tg_tensor *logits = tg_transformer_forward(ctx, &md->m, md->ids, NULL); /* (B, T, V) */
    md->loss = tg_cross_entropy(ctx, logits, md->targets, -1);              /* () */
    md->train = tg_graph_new(ctx, &md->loss, 1);
    int np = (int)tg_ctx_n_params(ctx);
    tg_tensor *w[MAX_P];
    for (int p = 0; p < np; p++)
        w[p] = tg_ctx_param(ctx, p);
    return !md->train || hvp_build(ctx, md->loss, np, w, &md->all) ||
           hvp_build(ctx, md->loss, 1, &md->m.head_w, &md->block);
}

/* Adam on fresh batches; prints the loss now and then. */
static int train(model *md, const sizes *sz, uint64_t *s)
{
    tg_optim_config oc = tg_optim_defaults(TG_OPTIM_ADAM);
    oc.lr = 1e-2;
    tg_optim *opt = tg_optim_new(md->ctx, &oc, md->all.np, md->all.w);
    if (!opt)
        return 1;
    for (long k = 0; k < sz->train_steps; k++) {
        if (fill_batch(md, sz, s))
            return 1;
        tg_graph_zero_grad(md->train);
        if (tg_graph_forward(md->train) != TG_OK ||
            tg_graph_backward(md->train, md->loss, NULL) != TG_OK ||
            tg_optim_step(opt, -1) != TG_OK)
            return 1;
        if (k == 0 || (k + 1) % 50 == 0 || k + 1 == sz->train_steps)
            printf("  step %4ld  loss %.6f\n", k + 1, tg_get(md->loss, 0));
    }
    return 0;
}

static double dot(int64_t n, const double *a, const double *b)
{
    double s = 0;
    for (int64_t i = 0; i < n; i++)
        s += a[i] * b[i];
    return s;
}

/* hv = H v over op's tensors (v flat, in op's order): one run of its graph. */
static int apply(hvp_op *op, const double *v, double *hv)
{
    const double *src = v;
    for (int p = 0; p < op->np; p++) {
        size_t k = (size_t)tg_tensor_numel(op->v[p]);
        if (tg_tensor_set_data(op->v[p], src, TG_F64, k) != TG_OK)
            return 1;
        src += k;
    }
    if (tg_graph_forward(op->graph) != TG_OK)
        return 1;
    for (int p = 0; p < op->np; p++) {
        size_t k = (size_t)tg_tensor_numel(op->hv[p]);
        if (tg_tensor_get_data(op->hv[p], hv, TG_F64, k) != TG_OK)
            return 1;
        hv += k;
    }
    return 0;
}

/* Power iteration from the unit vector v (overwritten by the last iterate): lambda_{k+1} =
 * |H v_k|, v_{k+1} = H v_k / lambda_{k+1}; then the Rayleigh quotient v.H v of the last v and
 * the residual |H v - lambda v| / lambda. @p u: room for op->n doubles. */
static int power(hvp_op *op, long max_iters, double *v, double *u, power_result *r)
{
    int64_t n = op->n;
    *r = (power_result){0};
    while (r->iters < max_iters && !r->converged) {
        if (apply(op, v, u))
            return 1;
        double norm = sqrt(dot(n, u, u));
        for (int64_t i = 0; i < n; i++)
            v[i] = u[i] / norm;
        r->converged = r->iters > 0 && fabs(norm - r->lambda) <= TOL * norm;
        r->lambda = norm;
        if (++r->iters == 1)
            r->first = norm;
    }
    if (apply(op, v, u))
        return 1;
    r->rayleigh = dot(n, v, u);
    for (int64_t i = 0; i < n; i++)
        u[i] -= r->lambda * v[i];
    r->residual = sqrt(dot(n, u, u)) / r->lambda;
    return 0;
}

/* A unit vector of n normal draws from the context RNG. */
static void start_vector(tg_ctx *ctx, int64_t n, double *v)
{
    for (int64_t i = 0; i < n; i++)
        v[i] = tg_rng_normal(ctx);
    double norm = sqrt(dot(n, v, v));
    for (int64_t i = 0; i < n; i++)
        v[i] /= norm;
}

/* The eigenvalues of the symmetric n x n matrix a (row-major), left on its diagonal: cyclic
 * Jacobi rotations until the off-diagonal part is below 1e-30 of the whole (Golub & Van Loan,
 * "Matrix Computations", 4th ed., sec. 8.5). */
static void jacobi(double *a, int64_t n)
{
    double total = dot(n * n, a, a);
    for (int sweep = 0; sweep < 100; sweep++) {
        double off = 0;
        for (int64_t p = 0; p < n; p++)
            for (int64_t q = p + 1; q < n; q++)
                off += 2 * a[p * n + q] * a[p * n + q];
        if (off <= 1e-30 * total)
            return;
        for (int64_t p = 0; p < n; p++)
            for (int64_t q = p + 1; q < n; q++) {
                double apq = a[p * n + q];
                if (apq == 0)
                    continue;
                double theta = (a[q * n + q] - a[p * n + p]) / (2 * apq);
                double t = (theta >= 0 ? 1 : -1) / (fabs(theta) + sqrt(theta * theta + 1));
                double c = 1 / sqrt(t * t + 1), s = t * c;
                for (int64_t k = 0; k < n; k++) { /* a = a J: columns p and q */
                    double akp = a[k * n + p], akq = a[k * n + q];
                    a[k * n + p] = c * akp - s * akq;
                    a[k * n + q] = s * akp + c * akq;
                }
                for (int64_t k = 0; k < n; k++) { /* a = J^T a: rows p and q */
                    double apk = a[p * n + k], aqk = a[q * n + k];
                    a[p * n + k] = c * apk - s * aqk;
                    a[q * n + k] = s * apk + c * aqk;
                }
            }
    }
}

/* The block check: head.weight's dense Hessian (tg_hessian), its largest |eigenvalue|, and the
 * power iteration over the block alone. Returns its relative difference, INFINITY on error. */
static double block_check(model *md, const sizes *sz, double *dense_top, power_result *r)
{
    int64_t n = md->block.n;
    double *h = malloc((size_t)(n * n + 2 * n) * sizeof *h), *v = h ? h + n * n : NULL;
    if (!h)
        return INFINITY;
    double diff = INFINITY;
    if (tg_hessian(md->ctx, md->loss, md->m.head_w, h, (size_t)(n * n)) == TG_OK) {
        for (int64_t i = 0; i < n; i++) /* symmetric to rounding: its symmetric part */
            for (int64_t j = 0; j < i; j++)
                h[i * n + j] = h[j * n + i] = 0.5 * (h[i * n + j] + h[j * n + i]);
        jacobi(h, n);
        *dense_top = 0;
        for (int64_t i = 0; i < n; i++)
            *dense_top = fmax(*dense_top, fabs(h[i * n + i]));
        start_vector(md->ctx, n, v);
        if (power(&md->block, sz->max_iters, v, v + n, r) == 0)
            diff = fabs(r->lambda - *dense_top) / *dense_top;
    }
    free(h);
    return diff;
}

/* FILE: the parameters, ids, targets, the start vector v0.<name> and the results (metadata). */
static int save(model *md, const sizes *sz, const double *v0, const power_result *r, double loss)
{
    char names[MAX_P][TG_NAME_MAX + 3];
    tg_io_item items[2 * MAX_P + 2];
    int n = 0;
    const double *src = v0;
    for (int p = 0; p < md->all.np; p++) {
        tg_tensor *w = md->all.w[p];
        items[n++] = tg_io_item_data(w, NULL);
        snprintf(names[p], sizeof names[p], "v0.%s", tg_tensor_name(w));
        items[n++] = (tg_io_item){names[p], TG_F64, tg_tensor_rank(w), tg_tensor_shape(w), src};
        src += tg_tensor_numel(w);
    }
    items[n++] = tg_io_item_data(md->ids, NULL);
    items[n++] = tg_io_item_data(md->targets, NULL);
    enum { N_META = 13 };
    const char *keys[N_META] = {
        "vocab_size", "max_seq_len",  "n_layers",   "d_model",   "n_heads", "d_ff", "loss",
        "lambda",     "lambda_first", "iterations", "max_iters", "tol",     "model"};
    char val[N_META - 1][32];
    long ints[] = {V, sz->seq_len, sz->layers, sz->d_model, sz->d_model / 8, 4 * sz->d_model};
    double reals[] = {loss, r->lambda, r->first};
    for (int i = 0; i < 6; i++)
        snprintf(val[i], sizeof val[i], "%ld", ints[i]);
    for (int i = 0; i < 3; i++)
        snprintf(val[6 + i], sizeof val[i], "%.17g", reals[i]);
    snprintf(val[9], sizeof val[9], "%ld", r->iters);
    snprintf(val[10], sizeof val[10], "%ld", sz->max_iters);
    snprintf(val[11], sizeof val[11], "%g", TOL);
    const char *vals[N_META];
    for (int i = 0; i < N_META - 1; i++)
        vals[i] = val[i];
    vals[N_META - 1] = "decoder-only LM: learned positions, pre-norm, gelu, causal, dropout 0, "
                       "untied head";
    return tg_safetensors_write_items(md->ctx, sz->save, n, items, N_META, keys, vals, NULL) !=
           TG_OK;
}

/* The power iteration over every parameter, then the checks; returns the exit status. */
static int sharpness(model *md, const sizes *sz, double *v0)
{
    int64_t n = md->all.n;
    double *v = malloc(2 * (size_t)n * sizeof *v), loss = NAN, top = NAN;
    power_result r, rb;
    int rc = !v || tg_graph_forward(md->train) != TG_OK;
    if (rc == 0) {
        loss = tg_get(md->loss, 0);
        start_vector(md->ctx, n, v0);
        memcpy(v, v0, (size_t)n * sizeof *v);
        rc = power(&md->all, sz->max_iters, v, v + n, &r);
    }
    double diff = rc ? INFINITY : block_check(md, sz, &top, &rb);
    rc = rc || !isfinite(diff);
    if (rc == 0) {
        printf("loss on the batch %.10f\n", loss);
        printf("top Hessian eigenvalue (every parameter, %lld): %.12e after %ld products (%s; "
               "the first %.12e)\n",
               (long long)n, r.lambda, r.iters, r.converged ? "converged" : "NOT converged",
               r.first);
        printf("  Rayleigh quotient v.Hv %.12e (relative difference %.1e), residual |Hv - "
               "lambda v| / lambda %.1e\n",
               r.rayleigh, fabs(r.rayleigh - r.lambda) / r.lambda, r.residual);
        printf("head.weight's block (%lld): dense Hessian (tg_hessian, Jacobi) %.12e, power "
               "iteration %.12e after %ld products (relative difference %.1e)\n",
               (long long)md->block.n, top, rb.lambda, rb.iters, diff);
        rc = !(r.converged && rb.converged && fabs(r.rayleigh - r.lambda) <= 1e-8 * r.lambda &&
               diff <= 1e-8 && r.lambda >= top);
        if (rc)
            fprintf(stderr, "sharpness: a check failed (converged, Rayleigh quotient, the block "
                            "against its dense Hessian, interlacing)\n");
    }
    if (rc == 0 && sz->save) {
        rc = save(md, sz, v0, &r, loss);
        if (rc == 0)
            printf("wrote %s\n", sz->save);
    }
    free(v);
    return rc;
}

static int parse(int argc, char **argv, sizes *sz)
{
    *sz = (sizes){16, 1, 8, 16, 200, 2000, NULL};
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--save")) {
            sz->save = argv[i + 1];
            continue;
        }
        long *field = !strcmp(argv[i], "--d-model")       ? &sz->d_model
                      : !strcmp(argv[i], "--layers")      ? &sz->layers
                      : !strcmp(argv[i], "--seq-len")     ? &sz->seq_len
                      : !strcmp(argv[i], "--batch")       ? &sz->batch
                      : !strcmp(argv[i], "--train-steps") ? &sz->train_steps
                      : !strcmp(argv[i], "--max-iters")   ? &sz->max_iters
                                                          : NULL;
        char *end;
        if (!field)
            return 1;
        *field = strtol(argv[i + 1], &end, 10);
        if (*end || *field < 1 || *field > 1000000)
            return 1;
    }
    return argc % 2 == 0 || sz->d_model % 8 || sz->layers > 4;
}

int main(int argc, char **argv)
{
    sizes sz;
    if (parse(argc, argv, &sz)) {
        fprintf(stderr, "usage: sharpness [--d-model D (a multiple of 8)] [--layers L (1..4)] "
                        "[--seq-len T] [--batch B] [--train-steps S] [--max-iters N] "
                        "[--save FILE]\n");
        return 2;
    }
    model md = {.ctx = tg_ctx_new()};
    if (!md.ctx)
        return 1;
    tg_ctx_seed(md.ctx, 1);
    uint64_t stream = 1;
    int rc = build(&md, &sz);
    double *v0 = rc ? NULL : malloc((size_t)md.all.n * sizeof *v0);
    if (v0) {
        printf("arithmetic sequences mod %d; decoder-only transformer, %ld layer(s), d_model "
               "%ld, %ld heads, d_ff %ld, f64: %lld parameters in %d tensors\n",
               V, sz.layers, sz.d_model, sz.d_model / 8, 4 * sz.d_model, (long long)md.all.n,
               md.all.np);
        printf("Adam (lr 1e-2), %ld steps of %ld sequences of %ld:\n", sz.train_steps, sz.batch,
               sz.seq_len);
        rc = train(&md, &sz, &stream) || fill_batch(&md, &sz, &stream) || sharpness(&md, &sz, v0);
    }
    if (rc && tg_ctx_status(md.ctx) != TG_OK)
        fprintf(stderr, "sharpness: %s\n", tg_ctx_message(md.ctx));
    free(v0);
    tg_ctx_free(md.ctx);
    return rc || !v0;
}
