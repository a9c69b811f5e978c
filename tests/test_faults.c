/*
 * test_faults.c - out-of-memory injection at every allocation, through the allocator hook
 * (tg_ctx_new_with), for each operation that allocates: building a transformer (init and the
 * forward builder), planning a graph (tg_graph_new, tg_graph_new_opts with one_backward),
 * forward, backward, creating an optimizer and stepping it, saving a checkpoint, reading one
 * back and restoring it, reading a .npy file, and tg_gradcheck.
 *
 * For one operation and each k = 0, 1, 2, ... the hook fails the k-th allocation the operation
 * makes ("once": later ones succeed again; "sticky": every one from the k-th on fails) until the
 * operation makes fewer than k + 1 allocations and so succeeds untouched. Every injected
 * failure must
 *   - return TG_ERR_NOMEM (or NULL with TG_ERR_NOMEM recorded on the context), never crash;
 *   - leave the context usable: after tg_ctx_clear_error() the same operation, with allocation
 *     allowed, succeeds and gives bitwise the result of a clean run (parameters, gradients,
 *     optimizer state, file bytes, report);
 *   - leave nothing behind: after tg_ctx_free() the hook counts 0 live bytes and 0 live blocks.
 * Failed saves must also keep the previous file byte-identical and leave no temporary file.
 *
 * Shapes are small so every sweep is quick; under valgrind (TG_UNDER_VALGRIND) only the sticky
 * sweep runs (the once sweep adds the same code paths followed by more work).
 */
#define _POSIX_C_SOURCE 200809L
#include "testutil.h"
#include "tgrad_io.h"
#include "tgrad_nn.h"
#include "tgrad_train.h"

#include <dirent.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* ---- the counting, failing allocator ------------------------------------------------------- */

/* Size header in front of every block, so frees can be counted in bytes. Keeps the alignment
 * of malloc (max_align_t). */
#define HOOK_HDR sizeof(max_align_t)

typedef struct hook {
    bool armed;        /* count attempts and fail as below */
    bool sticky;       /* fail attempt fail_at and every later one (else only fail_at) */
    long fail_at;      /* 0-based attempt number (since arming) to fail */
    long attempts;     /* allocation attempts since arming */
    long n_failed;     /* allocations refused since arming */
    long live_blocks;  /* blocks handed out and not yet freed */
    size_t live_bytes; /* their payload bytes */
} hook;

static void *hook_alloc(void *user, size_t size)
{
    hook *h = user;
    if (h->armed) {
        long i = h->attempts++;
        if (i == h->fail_at || (h->sticky && i > h->fail_at)) {
            h->n_failed++;
            return NULL;
        }
    }
    if (size > SIZE_MAX - HOOK_HDR)
        return NULL;
    unsigned char *p = malloc(HOOK_HDR + size);
    if (!p)
        return NULL;
    memcpy(p, &size, sizeof size);
    h->live_blocks++;
    h->live_bytes += size;
    return p + HOOK_HDR;
}

static void hook_free(void *user, void *ptr)
{
    hook *h = user;
    if (!ptr)
        return;
    unsigned char *p = (unsigned char *)ptr - HOOK_HDR;
    size_t size;
    memcpy(&size, p, sizeof size);
    ck_assert_msg(h->live_blocks > 0 && h->live_bytes >= size,
                  "free of a block the hook never handed out (or a double free)");
    h->live_blocks--;
    h->live_bytes -= size;
    free(p);
}

static void hook_arm(hook *h, long fail_at, bool sticky)
{
    h->armed = fail_at >= 0;
    h->sticky = sticky;
    h->fail_at = fail_at;
    h->attempts = 0;
    h->n_failed = 0;
}

static void hook_disarm(hook *h) { h->armed = false; }

/* ---- result fingerprints: the bytes a run produced, compared bitwise ------------------------- */

typedef struct buf {
    unsigned char *p;
    size_t n, cap;
} buf;

static void buf_put(buf *b, const void *src, size_t n)
{
    if (b->n + n > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < b->n + n)
            cap *= 2;
        b->p = realloc(b->p, cap);
        ck_assert_ptr_nonnull(b->p);
        b->cap = cap;
    }
    if (n)
        memcpy(b->p + b->n, src, n);
    b->n += n;
}

static void buf_i64(buf *b, int64_t v) { buf_put(b, &v, sizeof v); }

static void buf_data(buf *b, tg_tensor *t)
{
    ck_assert_ptr_nonnull(t);
    buf_put(b, tg_tensor_data(t), (size_t)tg_tensor_numel(t) * tg_dtype_size(tg_tensor_dtype(t)));
}

static void buf_grad(buf *b, tg_tensor *t)
{
    ck_assert_ptr_nonnull(t);
    const void *g = tg_tensor_grad(t);
    ck_assert_msg(g != NULL, "'%s' has no gradient", tg_tensor_name(t));
    buf_put(b, g, (size_t)tg_tensor_numel(t) * tg_dtype_size(tg_tensor_dtype(t)));
}

static void buf_file(buf *b, const char *path)
{
    FILE *f = fopen(path, "rb");
    ck_assert_msg(f != NULL, "cannot open '%s'", path);
    unsigned char tmp[4096];
    size_t k;
    while ((k = fread(tmp, 1, sizeof tmp, f)) > 0)
        buf_put(b, tmp, k);
    fclose(f);
}

static bool buf_eq(const buf *a, const buf *b)
{
    return a->n == b->n && (a->n == 0 || memcmp(a->p, b->p, a->n) == 0);
}

/* ---- a scratch directory for the file scenarios --------------------------------------------- */

static char g_dir[4096];

static void scratch_path(char *out, size_t n, const char *name)
{
    int k = snprintf(out, n, "%s/%s", g_dir, name);
    ck_assert(k > 0 && (size_t)k < n);
}

static void scratch_setup(void)
{
    const char *tmp = getenv("TMPDIR");
    snprintf(g_dir, sizeof g_dir, "%s/tg_faults_XXXXXX", tmp && tmp[0] ? tmp : "/tmp");
    ck_assert_msg(mkdtemp(g_dir) != NULL, "mkdtemp failed");
}

static void scratch_teardown(void)
{
    if (!g_dir[0])
        return;
    DIR *d = opendir(g_dir);
    if (d) {
        struct dirent *e;
        while ((e = readdir(d)) != NULL) {
            if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, ".."))
                continue;
            char p[8192];
            snprintf(p, sizeof p, "%s/%s", g_dir, e->d_name);
            unlink(p);
        }
        closedir(d);
    }
    rmdir(g_dir);
    g_dir[0] = '\0';
}

/* Names of the entries in g_dir, sorted, one per line (to compare listings). */
static void dir_listing(char *out, size_t n)
{
    DIR *d = opendir(g_dir);
    ck_assert_ptr_nonnull(d);
    char names[64][256];
    int count = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, ".."))
            continue;
        ck_assert_int_lt(count, 64);
        snprintf(names[count++], sizeof names[0], "%s", e->d_name);
    }
    closedir(d);
    for (int i = 1; i < count; i++) /* insertion sort: a handful of names */
        for (int j = i; j > 0 && strcmp(names[j - 1], names[j]) > 0; j--) {
            char t[256];
            memcpy(t, names[j], sizeof t);
            memcpy(names[j], names[j - 1], sizeof t);
            memcpy(names[j - 1], t, sizeof t);
        }
    size_t used = 0;
    out[0] = '\0';
    for (int i = 0; i < count; i++) {
        int k = snprintf(out + used, n - used, "%s\n", names[i]);
        ck_assert(k > 0 && (size_t)k < n - used);
        used += (size_t)k;
    }
}

/* ---- the model every scenario uses ----------------------------------------------------------- */

enum { B_ = 2, T_ = 4, V_ = 7 };

static tg_transformer_config small_config(void)
{
    tg_transformer_config c;
    memset(&c, 0, sizeof c);
    c.vocab_size = V_;
    c.max_seq_len = T_;
    c.n_layers = tu_under_valgrind() ? 1 : 2; /* the sweeps are quadratic in allocations */
    c.layer = tg_encoder_config_default(8, 2);
    c.layer.d_ff = 12;
    c.layer.norm_first = true;
    c.layer.dropout = 0.1; /* the RNG is part of the state that must come out the same */
    c.pos = TG_POS_LEARNED;
    c.causal = true;
    return c;
}

/* State shared by the scenarios; each scenario's setup fills what its operation needs. */
typedef struct fx {
    tg_transformer m;
    tg_tensor *ids, *tgt, *loss;
    tg_graph *g;
    tg_optim *opt;
    tg_safetensors *st;
    tg_tensor *npy;
    tg_tensor *gc_y;
    tg_gradcheck_report rep;
    char path[4096];     /* the file the operation reads or writes */
    buf old;             /* save: the previous checkpoint's bytes */
    char listing[4096];  /* save: the scratch directory before the operation */
} fx;

/* Model, ids and targets, loss builder. Returns the context status. */
static tg_status build_model(tg_ctx *ctx, fx *f)
{
    tg_transformer_config c = small_config();
    tg_status s = tg_transformer_init(ctx, &f->m, TG_F32, &c);
    if (s != TG_OK)
        return s;
    f->ids = tg_input(ctx, TG_I32, TG_DIMS(B_, T_), "ids");
    f->tgt = tg_input(ctx, TG_I32, TG_DIMS(B_, T_), "targets");
    if (f->ids && f->tgt)
        for (int64_t i = 0; i < B_ * T_; i++) {
            tg_set(f->ids, i, (double)((3 * i + 1) % V_));
            tg_set(f->tgt, i, (double)((5 * i + 2) % V_));
        }
    f->loss = tg_cross_entropy(ctx, tg_transformer_forward(ctx, &f->m, f->ids, NULL), f->tgt, -1);
    s = tg_ctx_status(ctx);
    ck_assert_msg(f->loss != NULL || s != TG_OK, "builder returned NULL without an error");
    return s;
}

static void must(tg_ctx *ctx, tg_status s, const char *what)
{
    ck_assert_msg(s == TG_OK, "%s: %s (%s)", what, tg_status_str(s), tg_ctx_message(ctx));
}

static void setup_model(tg_ctx *ctx, fx *f) { must(ctx, build_model(ctx, f), "setup: model"); }

static void setup_graph(tg_ctx *ctx, fx *f)
{
    setup_model(ctx, f);
    f->g = tg_graph_new(ctx, &f->loss, 1);
    must(ctx, tg_ctx_status(ctx), "setup: tg_graph_new");
}

static void setup_forward(tg_ctx *ctx, fx *f)
{
    setup_graph(ctx, f);
    must(ctx, tg_graph_forward(f->g), "setup: forward");
}

static void setup_backward(tg_ctx *ctx, fx *f)
{
    setup_forward(ctx, f);
    must(ctx, tg_graph_backward(f->g, f->loss, NULL), "setup: backward");
}

static tg_optim *adamw(tg_ctx *ctx)
{
    tg_optim_config oc = tg_optim_defaults(TG_OPTIM_ADAMW);
    oc.lr = 1e-2;
    return tg_optim_new(ctx, &oc, 0, NULL);
}

static tg_status train_step(fx *f)
{
    tg_graph_zero_grad(f->g);
    tg_status s = tg_graph_forward(f->g);
    if (s == TG_OK)
        s = tg_graph_backward(f->g, f->loss, NULL);
    if (s == TG_OK)
        s = tg_optim_step(f->opt, -1);
    return s;
}

static const char *const meta_keys[] = {"format", "model.note"};
static const char *const meta_vals[] = {"tgrad-checkpoint-1", "test_faults"};

static tg_status save_ck(tg_ctx *ctx, fx *f)
{
    tg_write_opts o = {.no_fsync = true}; /* the same allocations, without the disk's latency */
    return tg_checkpoint_save(ctx, f->path, f->opt, 2, meta_keys, meta_vals, &o);
}

/* A model with an optimizer that has taken one step: the state a checkpoint holds. */
static void setup_trained(tg_ctx *ctx, fx *f)
{
    setup_graph(ctx, f);
    f->opt = adamw(ctx);
    must(ctx, tg_ctx_status(ctx), "setup: tg_optim_new");
    must(ctx, train_step(f), "setup: step");
}

/* Parameters, their gradients, the optimizer state and step count, and the RNG state. */
static void fp_state(tg_ctx *ctx, fx *f, buf *out)
{
    for (int64_t i = 0; i < tg_ctx_n_params(ctx); i++) {
        tg_tensor *p = tg_ctx_param(ctx, i);
        buf_data(out, p);
        if (tg_tensor_grad(p))
            buf_grad(out, p);
    }
    for (int64_t i = 0; f->opt && i < tg_optim_n_state(f->opt); i++)
        buf_data(out, tg_optim_state(f->opt, i));
    buf_i64(out, tg_optim_steps(f->opt));
    uint64_t rng[4];
    tg_rng_get_state(ctx, rng);
    buf_put(out, rng, sizeof rng);
}

/* Run the model: forward, backward; fingerprint the loss and every leaf gradient. Then a
 * second forward (dropout draws again) to show the RNG continues identically. */
static void fp_run(tg_ctx *ctx, fx *f, buf *out)
{
    must(ctx, tg_graph_forward(f->g), "forward");
    must(ctx, tg_graph_backward(f->g, f->loss, NULL), "backward");
    buf_data(out, f->loss);
    for (int64_t l = 0; l < tg_graph_n_grad_leaves(f->g); l++)
        buf_grad(out, tg_graph_grad_leaf(f->g, l));
    must(ctx, tg_graph_forward(f->g), "second forward");
    buf_data(out, f->loss);
}

/* ---- the scenarios ------------------------------------------------------------------------- */

typedef struct scenario {
    const char *name;
    /* Prepare what the operation needs (allocation allowed; asserts on failure). */
    void (*setup)(tg_ctx *ctx, fx *f);
    /* The operation under test; returns its status (for builders: the context's). */
    tg_status (*op)(tg_ctx *ctx, fx *f);
    /* After an injected failure, before anything else: checks of what it left (optional). */
    void (*after_fail)(tg_ctx *ctx, fx *f);
    /* After success: the bytes that must be identical to a clean run's. */
    void (*result)(tg_ctx *ctx, fx *f, buf *out);
} scenario;

/* transformer: tg_transformer_init + input leaves + forward builder + loss */
static void setup_none(tg_ctx *ctx, fx *f)
{
    (void)ctx;
    (void)f;
}
static tg_status op_transformer(tg_ctx *ctx, fx *f)
{
    memset(&f->m, 0, sizeof f->m);
    f->ids = f->tgt = f->loss = NULL;
    return build_model(ctx, f);
}
static void res_transformer(tg_ctx *ctx, fx *f, buf *out)
{
    f->g = tg_graph_new(ctx, &f->loss, 1);
    must(ctx, tg_ctx_status(ctx), "tg_graph_new after the build");
    fp_run(ctx, f, out);
}

/* tg_graph_new and tg_graph_new_opts(one_backward) */
static tg_status op_graph(tg_ctx *ctx, fx *f)
{
    f->g = tg_graph_new(ctx, &f->loss, 1);
    return f->g ? TG_OK : tg_ctx_status(ctx);
}
static tg_status op_graph_shared(tg_ctx *ctx, fx *f)
{
    tg_graph_opts o = {.one_backward = true};
    f->g = tg_graph_new_opts(ctx, &f->loss, 1, &o);
    return f->g ? TG_OK : tg_ctx_status(ctx);
}
static void res_graph(tg_ctx *ctx, fx *f, buf *out) { fp_run(ctx, f, out); }

/* tg_graph_forward and tg_graph_backward (memory is planned at build: no allocation is
 * expected, so k = 0 already succeeds; the sweep keeps them honest after any change) */
static tg_status op_forward(tg_ctx *ctx, fx *f)
{
    (void)ctx;
    return tg_graph_forward(f->g);
}
static void res_forward(tg_ctx *ctx, fx *f, buf *out)
{
    (void)ctx;
    buf_data(out, f->loss);
}
static tg_status op_backward(tg_ctx *ctx, fx *f)
{
    (void)ctx;
    tg_graph_zero_grad(f->g);
    return tg_graph_backward(f->g, f->loss, NULL);
}
static void res_backward(tg_ctx *ctx, fx *f, buf *out)
{
    (void)ctx;
    for (int64_t l = 0; l < tg_graph_n_grad_leaves(f->g); l++)
        buf_grad(out, tg_graph_grad_leaf(f->g, l));
}

/* tg_optim_new + two tg_optim_step */
static void setup_optim(tg_ctx *ctx, fx *f) { setup_backward(ctx, f); }
static tg_status op_optim(tg_ctx *ctx, fx *f)
{
    f->opt = adamw(ctx);
    if (!f->opt)
        return tg_ctx_status(ctx);
    tg_status s = tg_optim_step(f->opt, -1);
    if (s == TG_OK)
        s = tg_optim_step(f->opt, 5e-3);
    return s;
}
static void res_optim(tg_ctx *ctx, fx *f, buf *out)
{
    fp_state(ctx, f, out);
    must(ctx, train_step(f), "a step after the optimizer's");
    fp_state(ctx, f, out);
}

/* tg_checkpoint_save over a previous checkpoint */
static void setup_save(tg_ctx *ctx, fx *f)
{
    setup_trained(ctx, f);
    scratch_path(f->path, sizeof f->path, "save.ckpt");
    must(ctx, save_ck(ctx, f), "setup: first save");
    buf_file(&f->old, f->path);
    must(ctx, train_step(f), "setup: second step");
    dir_listing(f->listing, sizeof f->listing);
}
static tg_status op_save(tg_ctx *ctx, fx *f) { return save_ck(ctx, f); }
static void after_fail_save(tg_ctx *ctx, fx *f)
{
    (void)ctx;
    buf now = {0};
    buf_file(&now, f->path);
    ck_assert_msg(buf_eq(&now, &f->old), "a failed save changed the previous checkpoint");
    free(now.p);
    char listing[4096];
    dir_listing(listing, sizeof listing);
    ck_assert_msg(!strcmp(listing, f->listing),
                  "a failed save left files behind: before\n%safter\n%s", f->listing, listing);
}
static void res_save(tg_ctx *ctx, fx *f, buf *out)
{
    (void)ctx;
    buf_file(out, f->path);
    char listing[4096];
    dir_listing(listing, sizeof listing);
    ck_assert_msg(!strcmp(listing, f->listing), "a save left files behind: before\n%safter\n%s",
                  f->listing, listing);
}

/* tg_safetensors_read + tg_checkpoint_restore into a model with an optimizer */
static void setup_restore(tg_ctx *ctx, fx *f)
{
    setup_trained(ctx, f);
    tg_ctx_seed(ctx, 5); /* state different from the file's */
    for (int64_t i = 0; i < tg_ctx_n_params(ctx); i++)
        tg_fill_uniform(tg_ctx_param(ctx, i), -0.1, 0.1);
    scratch_path(f->path, sizeof f->path, "restore.ckpt");
}
static tg_status op_restore(tg_ctx *ctx, fx *f)
{
    f->st = tg_safetensors_read(ctx, f->path);
    if (!f->st)
        return tg_ctx_status(ctx);
    return tg_checkpoint_restore(ctx, f->st, f->opt);
}
static void res_restore(tg_ctx *ctx, fx *f, buf *out)
{
    fp_state(ctx, f, out);
    for (int64_t i = 0; i < tg_safetensors_meta_count(f->st); i++) {
        const char *k = tg_safetensors_meta_key(f->st, i), *v = tg_safetensors_meta_value(f->st, i);
        buf_put(out, k, strlen(k) + 1);
        buf_put(out, v, strlen(v) + 1);
    }
    must(ctx, train_step(f), "a step after the restore");
    fp_state(ctx, f, out);
}

/* tg_npy_read */
static void setup_npy(tg_ctx *ctx, fx *f)
{
    (void)ctx;
    scratch_path(f->path, sizeof f->path, "x.npy");
}
static tg_status op_npy(tg_ctx *ctx, fx *f)
{
    tg_npy_kind kind;
    f->npy = tg_npy_read(ctx, f->path, TG_F64, &kind);
    return f->npy ? TG_OK : tg_ctx_status(ctx);
}
static void res_npy(tg_ctx *ctx, fx *f, buf *out)
{
    (void)ctx;
    buf_data(out, f->npy);
    buf_i64(out, tg_tensor_rank(f->npy));
    buf_put(out, tg_tensor_shape(f->npy), sizeof(int64_t) * (size_t)tg_tensor_rank(f->npy));
}

/* tg_gradcheck on a small graph with a parameter, an input and several ops */
static void setup_gradcheck(tg_ctx *ctx, fx *f)
{
    tg_tensor *x = tu_input(ctx, TG_F64, TG_DIMS(3, 4), "x", -1, 1);
    tg_tensor *w = tg_param(ctx, TG_F64, TG_DIMS(5, 4), "w");
    tg_tensor *b = tg_param(ctx, TG_F64, TG_DIMS(5), "b");
    tg_tensor *gam = tg_param(ctx, TG_F64, TG_DIMS(5), "gamma");
    ck_assert(w && b && gam);
    tg_fill_uniform(w, -1, 1);
    tg_fill_uniform(b, -1, 1);
    tg_fill_uniform(gam, 0.5, 1.5);
    f->gc_y = tg_softmax(ctx, tg_gelu(ctx, tg_layer_norm(ctx, tg_dense(ctx, x, w, b), gam, NULL,
                                                         1e-5)));
    must(ctx, tg_ctx_status(ctx), "setup: gradcheck graph");
}
static tg_status op_gradcheck(tg_ctx *ctx, fx *f)
{
    tg_gradcheck_opts o = tg_gradcheck_defaults(TG_F64);
    o.seed = 3;
    return tg_gradcheck(ctx, f->gc_y, &o, &f->rep);
}
static void res_gradcheck(tg_ctx *ctx, fx *f, buf *out)
{
    ck_assert_msg(f->rep.passed, "%s", f->rep.message);
    buf_i64(out, f->rep.n_checked);
    buf_i64(out, f->rep.n_tensors);
    buf_put(out, &f->rep.max_abs_err, sizeof(double));
    buf_put(out, &f->rep.max_rel_err, sizeof(double));
    buf_put(out, f->rep.message, strlen(f->rep.message));
    /* leaves restored exactly */
    for (int64_t i = 0; i < tg_ctx_n_params(ctx); i++)
        buf_data(out, tg_ctx_param(ctx, i));
}

static const scenario scenarios[] = {
    {"transformer build", setup_none, op_transformer, NULL, res_transformer},
    {"tg_graph_new", setup_model, op_graph, NULL, res_graph},
    {"tg_graph_new_opts one_backward", setup_model, op_graph_shared, NULL, res_graph},
    {"tg_graph_forward", setup_graph, op_forward, NULL, res_forward},
    {"tg_graph_backward", setup_forward, op_backward, NULL, res_backward},
    {"tg_optim_new + tg_optim_step", setup_optim, op_optim, NULL, res_optim},
    {"tg_checkpoint_save", setup_save, op_save, after_fail_save, res_save},
    {"tg_safetensors_read + tg_checkpoint_restore", setup_restore, op_restore, NULL, res_restore},
    {"tg_npy_read", setup_npy, op_npy, NULL, res_npy},
    {"tg_gradcheck", setup_gradcheck, op_gradcheck, NULL, res_gradcheck},
};
enum { N_SCENARIOS = (int)(sizeof scenarios / sizeof scenarios[0]) };

/* Seeds: the context before setup, and before each attempt of the operation (the rerun after
 * a failure starts from the same RNG state as the clean run). */
enum { SETUP_SEED = 11, OP_SEED = 99 };

/* What a run holds, freed by the teardown if an assertion ends the test early (under
 * CK_FORK=no, as in the valgrind setup, it would otherwise be reported as leaked). */
static tg_ctx *g_ctx;
static fx *g_fx;
static buf g_ref, g_got;

static void run_cleanup(void)
{
    tg_ctx_free(g_ctx);
    g_ctx = NULL;
    if (g_fx)
        free(g_fx->old.p);
    free(g_fx);
    g_fx = NULL;
}

/* One run of scenario sc with allocation fail_at (< 0: none) of the operation failing.
 * Fills out with the result; returns the number of allocations the hook refused. */
static long run_once(const scenario *sc, long fail_at, bool sticky, buf *out)
{
    hook h;
    memset(&h, 0, sizeof h);
    tg_allocator al = {hook_alloc, hook_free, &h};
    tg_ctx *ctx = g_ctx = tg_ctx_new_with(&al);
    ck_assert_ptr_nonnull(ctx);
    tg_ctx_seed(ctx, SETUP_SEED);
    fx *f = g_fx = calloc(1, sizeof *f);
    ck_assert_ptr_nonnull(f);
    sc->setup(ctx, f);
    must(ctx, tg_ctx_status(ctx), "setup");

    hook_arm(&h, fail_at, sticky);
    tg_ctx_seed(ctx, OP_SEED);
    tg_status s = sc->op(ctx, f);
    hook_disarm(&h);
    long failed = h.n_failed;
    if (failed) {
        ck_assert_msg(s == TG_ERR_NOMEM && tg_ctx_status(ctx) == TG_ERR_NOMEM,
                      "%s, allocation %ld failed (%s): returned %s, context %s (%s)", sc->name,
                      fail_at, sticky ? "sticky" : "once", tg_status_str(s),
                      tg_status_str(tg_ctx_status(ctx)), tg_ctx_message(ctx));
        ck_assert_msg(tg_ctx_message(ctx)[0] != '\0', "%s: NOMEM without a message", sc->name);
        if (sc->after_fail)
            sc->after_fail(ctx, f);
        tg_ctx_clear_error(ctx);
        tg_ctx_seed(ctx, OP_SEED);
        s = sc->op(ctx, f);
    }
    ck_assert_msg(s == TG_OK && tg_ctx_status(ctx) == TG_OK,
                  "%s%s: %s after allocation %ld failed (%s): %s", sc->name,
                  failed ? " (retried with allocation allowed)" : "", tg_status_str(s), fail_at,
                  sticky ? "sticky" : "once", tg_ctx_message(ctx));
    sc->result(ctx, f, out);
    must(ctx, tg_ctx_status(ctx), "result");

    tg_ctx_free(ctx);
    g_ctx = NULL;
    ck_assert_msg(h.live_blocks == 0 && h.live_bytes == 0,
                  "%s, allocation %ld failed (%s): %ld blocks (%zu bytes) still live after "
                  "tg_ctx_free", sc->name, fail_at, sticky ? "sticky" : "once", h.live_blocks,
                  h.live_bytes);
    run_cleanup();
    return failed;
}

/* The file the read scenarios read, written by a clean context. */
static void write_fixtures(void)
{
    char path[4096];
    tg_ctx *ctx = tu_ctx_new();
    tg_ctx_seed(ctx, 23);
    fx f;
    memset(&f, 0, sizeof f);
    setup_trained(ctx, &f);
    must(ctx, train_step(&f), "fixture: second step");
    scratch_path(f.path, sizeof f.path, "restore.ckpt");
    must(ctx, save_ck(ctx, &f), "fixture: checkpoint");
    tg_tensor *x = tg_const(ctx, TG_F32, TG_DIMS(3, 1, 5), "x");
    ck_assert_ptr_nonnull(x);
    tg_fill_uniform(x, -2, 2);
    scratch_path(path, sizeof path, "x.npy");
    must(ctx, tg_npy_write(ctx, path, x), "fixture: npy");
    tu_ctx_free(ctx);
}

START_TEST(test_oom_sweep)
{
    const scenario *sc = &scenarios[_i];
    scratch_setup();
    write_fixtures();
    buf *ref = &g_ref;
    ck_assert_int_eq(run_once(sc, -1, false, ref), 0);
    for (int mode = tu_under_valgrind() ? 1 : 0; mode < 2; mode++) {
        bool sticky = mode == 1;
        long k = 0;
        for (;; k++) {
            ck_assert_msg(k < 100000, "%s: still failing after %ld allocations", sc->name, k);
            buf *got = &g_got;
            got->n = 0;
            long failed = run_once(sc, k, sticky, got);
            ck_assert_msg(buf_eq(got, ref),
                          "%s: after allocation %ld failed (%s) and a retry, the result differs "
                          "from a clean run's (%zu vs %zu bytes)", sc->name, k,
                          sticky ? "sticky" : "once", got->n, ref->n);
            if (!failed)
                break; /* the operation makes only k allocations: all were tried */
        }
        fprintf(stderr, "test_faults: %-44s %4ld allocations (%s)\n", sc->name, k,
                sticky ? "sticky" : "once");
    }
    free(g_ref.p);
    free(g_got.p);
    memset(&g_ref, 0, sizeof g_ref);
    memset(&g_got, 0, sizeof g_got);
    scratch_teardown();
}
END_TEST

/* The context itself is the first allocation: failing it gives NULL and nothing live. */
START_TEST(test_oom_ctx_new)
{
    hook h;
    memset(&h, 0, sizeof h);
    hook_arm(&h, 0, false);
    tg_allocator al = {hook_alloc, hook_free, &h};
    ck_assert_ptr_null(tg_ctx_new_with(&al));
    ck_assert_int_eq(h.n_failed, 1);
    ck_assert_int_eq(h.live_blocks, 0);
    hook_disarm(&h);
    tg_ctx *ctx = tg_ctx_new_with(&al);
    ck_assert_ptr_nonnull(ctx);
    tg_ctx_free(ctx);
    ck_assert_int_eq(h.live_blocks, 0);
    ck_assert_uint_eq(h.live_bytes, 0);
}
END_TEST

static void teardown(void)
{
    run_cleanup();
    free(g_ref.p);
    free(g_got.p);
    memset(&g_ref, 0, sizeof g_ref);
    memset(&g_got, 0, sizeof g_got);
    tu_ctx_teardown();
    scratch_teardown();
}

static Suite *faults_suite(void)
{
    Suite *s = suite_create("faults");
    TCase *tc = tcase_create("oom");
    tcase_add_checked_fixture(tc, NULL, teardown);
    tcase_set_timeout(tc, 600);
    tcase_add_test(tc, test_oom_ctx_new);
    tcase_add_loop_test(tc, test_oom_sweep, 0, N_SCENARIOS);
    suite_add_tcase(s, tc);
    return s;
}

int main(void) { return tu_run(faults_suite()); }
