#define _POSIX_C_SOURCE 200809L
/*
 * test_run.c - `tgrad run` end to end: for PyTorch fixtures of every module, write the inputs
 * as .npy and the weights as safetensors (with tgrad's own writers), run the program in f32
 * and f64 with and without backward, and compare its output and gradient files with the
 * references (same tolerances as test_fixtures). Also the error paths: one line on stderr and
 * a non-zero exit.
 */
#include "testutil.h"
#include "tgrad_io.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

static char dir[256];

static void setup(void) { tu_mkdtemp(dir, sizeof dir, "run"); }
static void teardown(void) { tu_rm_tree(dir); }

/* `tgrad run ARGS` in dir; its exit status (-signal if killed); stdout, stderr in out.txt,
 * err.txt. */
static int run(const char *args)
{
    char a[4096];
    snprintf(a, sizeof a, "run %s", args);
    return tu_run_tgrad(dir, a, 300, NULL);
}

/* dir/name into buf (at most n - 1 bytes). */
static void read_file(const char *name, char *buf, size_t n)
{
    char *s = tu_slurp_in(dir, name, NULL);
    ck_assert_msg(s != NULL, "cannot read %s/%s", dir, name);
    snprintf(buf, n, "%s", s);
    free(s);
}

#define count_lines tu_count_lines

typedef struct {
    tg_ctx *ctx;
    tg_safetensors *st;
} fixture;

static fixture load(const char *name)
{
    fixture f;
    char path[512];
    snprintf(path, sizeof path, "%s/%s.safetensors", TG_FIXTURES, name);
    f.ctx = tg_ctx_new();
    f.st = tg_safetensors_read(f.ctx, path);
    ck_assert_msg(f.st != NULL, "%s", tg_ctx_message(f.ctx));
    return f;
}

/* Write fixture tensor `key` as dir/<file>; bool masks as |b1 via a hand-written header. */
static void npy(fixture *f, const char *key, const char *file)
{
    char p[512];
    snprintf(p, sizeof p, "%s/%s", dir, file);
    tg_tensor *t = tg_safetensors_find(f->st, key);
    ck_assert_msg(t != NULL, "fixture lacks %s", key);
    ck_assert_int_eq(tg_npy_write(f->ctx, p, t), TG_OK);
}

/* Write the fixture's 0/1 mask `key` as dir/<file> with element format @p descr: "|b1" (bool),
 * or an integer one, "|u1", "<i4" or "<i8" (NumPy's default integer), little-endian. If
 * @p poke >= 0, element 0 is written as that value instead. */
static void mask_npy(fixture *f, const char *key, const char *file, const char *descr,
                     int poke)
{
    tg_tensor *t = tg_safetensors_find(f->st, key);
    ck_assert_ptr_nonnull(t);
    char p[512], shape[128] = "(";
    int r = tg_tensor_rank(t);
    size_t k = 1;
    for (int i = 0; i < r; i++)
        k += (size_t)snprintf(shape + k, sizeof shape - k, "%lld,%s",
                              (long long)tg_tensor_shape(t)[i], (i < r - 1) ? " " : "");
    snprintf(shape + k, sizeof shape - k, ")");
    size_t numel = (size_t)tg_tensor_numel(t);
    size_t es = descr[2] == '8' ? 8 : descr[2] == '4' ? 4 : 1;
    unsigned char *b = calloc(numel, es);
    ck_assert_ptr_nonnull(b);
    for (size_t i = 0; i < numel; i++) {
        int v = tg_get(t, (int64_t)i) != 0;
        if (i == 0 && poke >= 0)
            v = poke;
        b[i * es] = (unsigned char)v; /* little-endian: the low byte first */
    }
    tu_write_npy_raw(tu_path(p, sizeof p, dir, file), descr, shape, b, numel * es);
    free(b);
}

static void bool_npy(fixture *f, const char *key, const char *file)
{
    mask_npy(f, key, file, "|b1", -1);
}

/* Write the fixture tensors named in `keys` as a weights file. */
static void weights(fixture *f, const char *const *keys, int n)
{
    const tg_tensor *ts[16];
    for (int i = 0; i < n; i++) {
        ts[i] = tg_safetensors_find(f->st, keys[i]);
        ck_assert_ptr_nonnull(ts[i]);
    }
    char p[512];
    snprintf(p, sizeof p, "%s/w.safetensors", dir);
    ck_assert_int_eq(tg_safetensors_write(f->ctx, p, n, ts, keys, 0, NULL, NULL), TG_OK);
}

static double rel(const tg_tensor *a, const tg_tensor *ref)
{
    ck_assert_int_eq(tg_tensor_numel(a), tg_tensor_numel(ref));
    double md = 0, mr = 0;
    for (int64_t i = 0; i < tg_tensor_numel(ref); i++) {
        double d = fabs(tg_get(a, i) - tg_get(ref, i));
        md = d > md || isnan(d) ? (isnan(d) ? INFINITY : d) : md;
        mr = fmax(mr, fabs(tg_get(ref, i)));
    }
    return md / (1 + mr);
}

static void check_out(fixture *f, double tol)
{
    char p[512];
    snprintf(p, sizeof p, "%s/o.npy", dir);
    tg_tensor *o = tg_npy_read(f->ctx, p, TG_F64, NULL);
    ck_assert_msg(o != NULL, "%s", tg_ctx_message(f->ctx));
    double e = rel(o, tg_safetensors_find(f->st, "out"));
    ck_assert_msg(e <= tol, "output error %.3g > %g", e, tol);
}

static void check_grads(fixture *f, double tol, int expect_n)
{
    char p[512];
    snprintf(p, sizeof p, "%s/g.safetensors", dir);
    tg_safetensors *g = tg_safetensors_read(f->ctx, p);
    ck_assert_msg(g != NULL, "%s", tg_ctx_message(f->ctx));
    ck_assert_int_eq(tg_safetensors_count(g), expect_n);
    for (int64_t i = 0; i < tg_safetensors_count(g); i++) {
        char key[256];
        snprintf(key, sizeof key, "grad.%s", tg_safetensors_name(g, i));
        tg_tensor *ref = tg_safetensors_find(f->st, key);
        ck_assert_msg(ref != NULL, "unexpected gradient %s", key);
        double e = rel(tg_safetensors_tensor(g, i), ref);
        ck_assert_msg(e <= tol, "%s error %.3g > %g", key, e, tol);
    }
}

static const char *dtype_arg(int i) { return i == 0 ? "f64" : "f32"; }
static double tol_of(int i) { return i == 0 ? 1e-10 : 1e-4; }

START_TEST(test_sdpa)
{
    fixture f = load("sdpa_bool_mask");
    npy(&f, "q", "q.npy");
    npy(&f, "k", "k.npy");
    npy(&f, "v", "v.npy");
    npy(&f, "grad_out", "dy.npy");
    bool_npy(&f, "attn_mask", "m.npy");
    char a[1024];
    snprintf(a, sizeof a, "sdpa --q q.npy --k k.npy --v v.npy --mask m.npy --dtype %s "
             "--out o.npy --force --attn-out a.npy --grad-out dy.npy --grads g.safetensors", dtype_arg(_i));
    ck_assert_int_eq(run(a), 0);
    check_out(&f, tol_of(_i));
    char p[512];
    snprintf(p, sizeof p, "%s/a.npy", dir);
    tg_tensor *w = tg_npy_read(f.ctx, p, TG_F64, NULL);
    ck_assert_ptr_nonnull(w);
    ck_assert(rel(w, tg_safetensors_find(f.st, "attn_weights")) <= tol_of(_i));
    check_grads(&f, tol_of(_i), 3);
    tg_ctx_free(f.ctx);
}
END_TEST

START_TEST(test_sdpa_causal_forward_only)
{
    fixture f = load("sdpa_causal");
    npy(&f, "q", "q.npy");
    npy(&f, "k", "k.npy");
    npy(&f, "v", "v.npy");
    char a[512];
    snprintf(a, sizeof a, "sdpa --q q.npy --k k.npy --v v.npy --causal --dtype %s --out o.npy --force",
             dtype_arg(_i));
    ck_assert_int_eq(run(a), 0);
    check_out(&f, tol_of(_i));
    tg_ctx_free(f.ctx);
}
END_TEST

static const char *const mha_keys[] = {"in_proj_weight", "in_proj_bias", "out_proj.weight",
                                       "out_proj.bias"};

START_TEST(test_mha_self_masks)
{
    fixture f = load("mha_combined");
    weights(&f, mha_keys, 4);
    npy(&f, "x", "x.npy");
    npy(&f, "grad_out", "dy.npy");
    bool_npy(&f, "key_padding_mask", "p.npy");
    char a[1024];
    snprintf(a, sizeof a, "mha --weights w.safetensors --heads 3 --x x.npy "
             "--key-padding-mask p.npy --causal --dtype %s --out o.npy --force --grad-out dy.npy "
             "--grads g.safetensors", dtype_arg(_i));
    ck_assert_int_eq(run(a), 0);
    check_out(&f, tol_of(_i));
    check_grads(&f, tol_of(_i), 5);
    tg_ctx_free(f.ctx);
}
END_TEST

START_TEST(test_mha_cross)
{
    fixture f = load("mha_cross");
    weights(&f, mha_keys, 4);
    npy(&f, "q", "q.npy");
    npy(&f, "k", "k.npy");
    npy(&f, "v", "v.npy");
    npy(&f, "grad_out", "dy.npy");
    char a[1024];
    snprintf(a, sizeof a, "mha --weights w.safetensors --heads 3 --q q.npy --k k.npy --v v.npy "
             "--dtype %s --out o.npy --force --grad-out dy.npy --grads g.safetensors", dtype_arg(_i));
    ck_assert_int_eq(run(a), 0);
    check_out(&f, tol_of(_i));
    check_grads(&f, tol_of(_i), 7);
    tg_ctx_free(f.ctx);
}
END_TEST

START_TEST(test_mha_additive_3d)
{
    fixture f = load("mha_attn_mask_3d");
    weights(&f, mha_keys, 4);
    npy(&f, "x", "x.npy");
    bool_npy(&f, "attn_mask", "m.npy");
    char a[512];
    snprintf(a, sizeof a, "mha --weights w.safetensors --heads 2 --x x.npy --attn-mask m.npy "
             "--dtype %s --out o.npy --force", dtype_arg(_i));
    ck_assert_int_eq(run(a), 0);
    check_out(&f, tol_of(_i));
    tg_ctx_free(f.ctx);
    f = load("mha_additive_mask");
    weights(&f, mha_keys, 4);
    npy(&f, "x", "x.npy");
    npy(&f, "attn_mask", "m.npy"); /* float: additive */
    ck_assert_int_eq(run(a), 0);
    check_out(&f, tol_of(_i));
    tg_ctx_free(f.ctx);
}
END_TEST

static const char *const ffn_keys[] = {"linear1.weight", "linear1.bias", "linear2.weight",
                                       "linear2.bias"};

START_TEST(test_ffn)
{
    fixture f = load("ffn_gelu");
    weights(&f, ffn_keys, 4);
    npy(&f, "x", "x.npy");
    npy(&f, "grad_out", "dy.npy");
    char a[512];
    snprintf(a, sizeof a, "ffn --weights w.safetensors --x x.npy --activation gelu --dtype %s "
             "--out o.npy --force --grad-out dy.npy --grads g.safetensors", dtype_arg(_i));
    ck_assert_int_eq(run(a), 0);
    check_out(&f, tol_of(_i));
    check_grads(&f, tol_of(_i), 5);
    tg_ctx_free(f.ctx);
}
END_TEST

static const char *const enc_keys[] = {
    "self_attn.in_proj_weight", "self_attn.in_proj_bias", "self_attn.out_proj.weight",
    "self_attn.out_proj.bias", "linear1.weight", "linear1.bias", "linear2.weight",
    "linear2.bias", "norm1.weight", "norm1.bias", "norm2.weight", "norm2.bias"};

START_TEST(test_encoder)
{
    fixture f = load("enc_pre_gelu_eps");
    weights(&f, enc_keys, 12);
    npy(&f, "x", "x.npy");
    npy(&f, "grad_out", "dy.npy");
    char a[1024];
    snprintf(a, sizeof a, "encoder --weights w.safetensors --heads 4 --x x.npy --norm-first "
             "--eps 1e-6 --activation gelu --dtype %s --out o.npy --force --grad-out dy.npy "
             "--grads g.safetensors", dtype_arg(_i));
    ck_assert_int_eq(run(a), 0);
    check_out(&f, tol_of(_i));
    check_grads(&f, tol_of(_i), 13);
    tg_ctx_free(f.ctx);
    f = load("enc_key_padding");
    weights(&f, enc_keys, 12);
    npy(&f, "x", "x.npy");
    bool_npy(&f, "key_padding_mask", "p.npy");
    snprintf(a, sizeof a, "encoder --weights w.safetensors --heads 2 --x x.npy "
             "--key-padding-mask p.npy --dtype %s --out o.npy --force", dtype_arg(_i));
    ck_assert_int_eq(run(a), 0);
    check_out(&f, tol_of(_i));
    tg_ctx_free(f.ctx);
}
END_TEST

/* Integer masks holding 0 and 1 mean what bool masks mean (1 = blocked / padding), in any
 * integer width: the same results as the bool fixtures. */
START_TEST(test_integer_masks)
{
    fixture f = load("sdpa_bool_mask");
    npy(&f, "q", "q.npy");
    npy(&f, "k", "k.npy");
    npy(&f, "v", "v.npy");
    npy(&f, "grad_out", "dy.npy");
    static const char *const descrs[] = {"<i8", "|u1", "<i4"};
    char a[1024];
    for (int d = 0; d < 3; d++) {
        mask_npy(&f, "attn_mask", "m.npy", descrs[d], -1);
        snprintf(a, sizeof a, "sdpa --q q.npy --k k.npy --v v.npy --mask m.npy --dtype %s "
                 "--out o.npy --force --grad-out dy.npy --grads g.safetensors", dtype_arg(_i));
        ck_assert_msg(run(a) == 0, "%s mask", descrs[d]);
        check_out(&f, tol_of(_i));
        check_grads(&f, tol_of(_i), 3);
    }
    tg_ctx_free(f.ctx);
    f = load("enc_key_padding");
    weights(&f, enc_keys, 12);
    npy(&f, "x", "x.npy");
    for (int d = 0; d < 3; d++) {
        mask_npy(&f, "key_padding_mask", "p.npy", descrs[d], -1);
        snprintf(a, sizeof a, "encoder --weights w.safetensors --heads 2 --x x.npy "
                 "--key-padding-mask p.npy --dtype %s --out o.npy --force", dtype_arg(_i));
        ck_assert_msg(run(a) == 0, "%s key padding mask", descrs[d]);
        check_out(&f, tol_of(_i));
    }
    /* a value other than 0 and 1 is refused, naming the element */
    mask_npy(&f, "key_padding_mask", "p2.npy", "<i8", 2);
    ck_assert_int_ne(run("encoder --weights w.safetensors --heads 2 --x x.npy "
                         "--key-padding-mask p2.npy"), 0);
    char err[4096];
    read_file("err.txt", err, sizeof err);
    ck_assert_int_eq(count_lines(err), 1);
    ck_assert_msg(strstr(err, "--key-padding-mask 'p2.npy': an integer mask must hold only 0 "
                              "and 1 (1 = padding, as true in a bool mask), but element 0 is 2"),
                  "%s", err);
    tg_ctx_free(f.ctx);
}
END_TEST

typedef struct {
    const char *args, *needle;
} err_case;

/* Each bad invocation: non-zero exit, exactly one line on stderr containing its needle. */
static void expect_errors(const err_case *cases, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        int rc = run(cases[i].args);
        char err[4096];
        read_file("err.txt", err, sizeof err);
        ck_assert_msg(rc != 0, "'%s' exited 0", cases[i].args);
        ck_assert_msg(count_lines(err) == 1, "'%s' printed %d lines: %s", cases[i].args,
                      count_lines(err), err);
        ck_assert_msg(strstr(err, cases[i].needle) != NULL, "'%s': '%s' lacks '%s'",
                      cases[i].args, err, cases[i].needle);
    }
}

/* Each bad invocation: non-zero exit, exactly one line on stderr naming the problem. */
START_TEST(test_errors)
{
    fixture f = load("mha_self");
    weights(&f, mha_keys, 4);
    npy(&f, "x", "x.npy");
    npy(&f, "out", "wide.npy");
    char sp[512];
    snprintf(sp, sizeof sp, "%s/scalar.npy", dir);
    ck_assert_int_eq(tg_npy_write_data(f.ctx, sp, TG_F64, 0, NULL, (double[]){1.5}), TG_OK);
    static const err_case cases[] = {
        {"mha --weights w.safetensors --heads 2 --x missing.npy", "missing.npy"},
        {"mha --weights w.safetensors --heads 3 --x x.npy", "--heads 3"},
        {"mha --weights nope.safetensors --heads 2 --x x.npy", "nope.safetensors"},
        {"mha --weights w.safetensors --x x.npy", "--heads"},
        {"mha --weights w.safetensors --heads 2 --x x.npy --attn-mask x.npy --bogus 1", "--bogus"},
        {"ffn --weights w.safetensors --x x.npy", "linear1.weight"},
        /* an output never replaces an input */
        {"mha --weights w.safetensors --heads 2 --x x.npy --out x.npy",
         "--out 'x.npy' is the input --x 'x.npy'"},
        {"mha --weights w.safetensors --heads 2 --x x.npy --grad-out wide.npy --grads "
         "w.safetensors", "--grads 'w.safetensors' is the input --weights"},
        /* a 0-d input: said as such, not "last dim 0" */
        {"mha --weights w.safetensors --heads 2 --x scalar.npy",
         "--x 'scalar.npy' is a scalar (shape ()), but --weights 'w.safetensors' needs an input "
         "of shape (..., 8)"},
        {"sdpa --q x.npy --k x.npy", "--v"},
        {"sdpa --q x.npy --k x.npy --v x.npy --dtype f16", "f16"},
        {"teleport --x x.npy", "teleport"},
        {"mha --weights w.safetensors --heads 2 --x x.npy --key-padding-mask x.npy",
         "--key-padding-mask 'x.npy': must be a bool or 0/1 integer array (true/1 = padding), "
         "not a float array"},
        {"mha --weights w.safetensors --heads 2 --x x.npy --grad-out x.npy", "--grads"},
        {"mha --weights x.npy --heads 2 --x x.npy", "x.npy"},
    };
    expect_errors(cases, sizeof cases / sizeof cases[0]);
    tg_ctx_free(f.ctx);
}
END_TEST

START_TEST(test_help)
{
    ck_assert_int_eq(run("--help"), 0);
    char out[8192];
    read_file("out.txt", out, sizeof out);
    ck_assert(strstr(out, "sdpa") && strstr(out, "mha") && strstr(out, "ffn") &&
              strstr(out, "encoder") && strstr(out, "decoder") && strstr(out, "transformer"));
    /* each module's help is printed from its option table */
    static const char *const mods[][3] = {{"sdpa", "--q", "--attn-out"},
                                          {"mha", "--key-padding-mask", "--attn-mask"},
                                          {"ffn", "--activation", "--weights"},
                                          {"encoder", "--norm-first", "--layers"},
                                          {"decoder", "--memory-key-padding-mask", "--tgt-mask"},
                                          {"transformer", "--src-key-padding-mask",
                                           "--decoder-layers"}};
    for (int i = 0; i < 6; i++) {
        char a[64];
        snprintf(a, sizeof a, "%s --help", mods[i][0]);
        ck_assert_int_eq(run(a), 0);
        read_file("out.txt", out, sizeof out);
        ck_assert_msg(strstr(out, mods[i][1]) && strstr(out, mods[i][2]) &&
                      strstr(out, "--dtype") && strstr(out, "(required)"),
                      "%s: %s", a, out);
    }
}
END_TEST

/* --dot writes the graph it builds; docs/cli.md's `tgrad run encoder ... --dot g.dot && dot -Tsvg
 * g.dot` works as written (the second half when Graphviz is installed). */
START_TEST(test_dot)
{
    fixture f = load("enc_pre_gelu_eps");
    weights(&f, enc_keys, 12);
    npy(&f, "x", "x.npy");
    npy(&f, "grad_out", "dy.npy");
    ck_assert_int_eq(run("encoder --weights w.safetensors --heads 4 --x x.npy --norm-first "
                         "--dot g.dot"), 0);
    char out[256];
    read_file("out.txt", out, sizeof out);
    ck_assert_str_eq(out, ""); /* a file was written: nothing to describe */
    char *g = tu_slurp_in(dir, "g.dot", NULL);
    ck_assert_ptr_nonnull(g);
    ck_assert_ptr_nonnull(strstr(g, "digraph tgrad {"));
    ck_assert_ptr_nonnull(strstr(g, "[label=\"input\\nx\\n(2, 4, 8) f32\""));
    ck_assert_ptr_nonnull(strstr(g, "[label=\"param\\nself_attn.in_proj_weight\\n(24, 8) f32\""));
    ck_assert_ptr_nonnull(strstr(g, "[label=\"layer_norm\\n"));
    ck_assert_ptr_nonnull(strstr(g, "[label=\"flash_attention\\n")); /* fused by default */
    ck_assert_ptr_null(strstr(g, "[label=\"softmax\\n"));
    ck_assert_ptr_null(strstr(g, "constraint=false")); /* forward only */
    free(g);
    /* --unfused: the elementary ops instead, and the same output */
    ck_assert_int_eq(run("encoder --weights w.safetensors --heads 4 --x x.npy --norm-first "
                         "--unfused --out o2.npy --dot gu.dot"), 0);
    g = tu_slurp_in(dir, "gu.dot", NULL);
    ck_assert_ptr_nonnull(g);
    ck_assert_ptr_nonnull(strstr(g, "[label=\"softmax\\n"));
    ck_assert_ptr_null(strstr(g, "[label=\"flash_attention\\n"));
    free(g);
    /* with backward: the backward edges too, and dtype f64 */
    ck_assert_int_eq(run("encoder --weights w.safetensors --heads 4 --x x.npy --norm-first "
                         "--dtype f64 --grad-out dy.npy --grads g.safetensors --dot gb.dot"), 0);
    g = tu_slurp_in(dir, "gb.dot", NULL);
    ck_assert_ptr_nonnull(g);
    ck_assert_ptr_nonnull(strstr(g, "(2, 4, 8) f64"));
    ck_assert_ptr_nonnull(strstr(g, "[style=dashed, color=\"#c0392b\", constraint=false]"));
    free(g);
    if (system("command -v dot >/dev/null 2>&1") == 0) {
        char cmd[2048];
        snprintf(cmd, sizeof cmd, "('%s' run encoder --weights w.safetensors --heads 4 --x x.npy "
                 "--dot g.dot --force && dot -Tsvg g.dot)", tu_tgrad_exe());
        ck_assert_int_eq(tu_run_sh(dir, cmd, 300, NULL), 0);
        char *svg = tu_slurp_in(dir, "out.txt", NULL);
        ck_assert_ptr_nonnull(svg);
        ck_assert_ptr_nonnull(strstr(svg, "<svg"));
        ck_assert_ptr_nonnull(strstr(svg, "self_attn.in_proj_weight"));
        free(svg);
        char err[256];
        read_file("err.txt", err, sizeof err);
        ck_assert_str_eq(err, "");
    }
    /* refusals: one line each */
    static const struct {
        const char *args, *needle;
    } bad[] = {
        {"encoder --weights w.safetensors --heads 4 --x x.npy --dot x.npy",
         "--dot 'x.npy' is the input --x 'x.npy'"},
        {"encoder --weights w.safetensors --heads 4 --x x.npy --out o.npy --dot o.npy",
         "--out and --dot name the same file 'o.npy'"},
        {"encoder --weights w.safetensors --heads 4 --x x.npy --dot /nonexistent-tgrad/g.dot",
         "--dot: cannot open the directory of '/nonexistent-tgrad/g.dot'"},
        {"encoder --weights w.safetensors --heads 4 --x x.npy --dot .",
         "--dot: '.' is not a regular file (a directory): refusing to replace it"},
        {"encoder --weights w.safetensors --heads 4 --x x.npy --dot", "--dot"},
        /* an existing output is replaced only with --force */
        {"encoder --weights w.safetensors --heads 4 --x x.npy --dot g.dot",
         "--dot 'g.dot' exists (pass --force to replace it)"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        int rc = run(bad[i].args);
        char err[4096];
        read_file("err.txt", err, sizeof err);
        ck_assert_msg(rc != 0, "'%s' exited 0", bad[i].args);
        ck_assert_msg(count_lines(err) == 1, "'%s' printed %d lines: %s", bad[i].args,
                      count_lines(err), err);
        ck_assert_msg(strstr(err, bad[i].needle) != NULL, "'%s': '%s' lacks '%s'", bad[i].args,
                      err, bad[i].needle);
    }
    /* every output: refused before anything is written (usage error, exit 2), kept as it was */
    tu_write_file(dir, "keep.npy", "precious\n");
    static const char *const outs[] = {"--out keep.npy", "--dot keep.npy",
                                       "--grad-out dy.npy --grads keep.npy",
                                       "--out o9.npy --grad-out dy.npy --grads keep.npy"};
    for (size_t i = 0; i < sizeof outs / sizeof outs[0]; i++) {
        char a[512];
        snprintf(a, sizeof a, "encoder --weights w.safetensors --heads 4 --x x.npy --dtype f64 %s",
                 outs[i]);
        ck_assert_int_eq(run(a), 2);
        char *kept = tu_slurp_in(dir, "keep.npy", NULL);
        ck_assert_str_eq(kept, "precious\n");
        free(kept);
        char err[4096];
        read_file("err.txt", err, sizeof err);
        ck_assert_msg(strstr(err, "'keep.npy' exists (pass --force to replace it)"), "%s", err);
    }
    struct stat sb;
    char o9[512];
    snprintf(o9, sizeof o9, "%s/o9.npy", dir);
    ck_assert_int_ne(stat(o9, &sb), 0); /* nothing written before the refusal */
    ck_assert_int_eq(run("encoder --weights w.safetensors --heads 4 --x x.npy --out keep.npy "
                         "--force"), 0);
    tg_ctx_free(f.ctx);
}
END_TEST


/* ---- decoder, stacks, nn.Transformer ------------------------------------------ */

/* Write every parameter of the fixture (everything but inputs, masks, grad_out, out and the
 * gradients) as the weights file; returns how many. */
static int weights_all(fixture *f)
{
    static const char *const not_params[] = {"x", "memory", "src", "tgt", "out", "grad_out"};
    int64_t n = tg_safetensors_count(f->st), k = 0;
    const tg_tensor **ts = malloc(sizeof *ts * (size_t)n);
    const char **names = malloc(sizeof *names * (size_t)n);
    ck_assert(ts && names);
    for (int64_t i = 0; i < n; i++) {
        const char *nm = tg_safetensors_name(f->st, i);
        size_t l = strlen(nm);
        bool skip = !strncmp(nm, "grad.", 5) || (l > 5 && !strcmp(nm + l - 5, "_mask"));
        for (size_t j = 0; j < sizeof not_params / sizeof not_params[0]; j++)
            skip = skip || !strcmp(nm, not_params[j]);
        if (skip)
            continue;
        ts[k] = tg_safetensors_tensor(f->st, i);
        names[k++] = nm;
    }
    char p[512];
    snprintf(p, sizeof p, "%s/w.safetensors", dir);
    ck_assert_int_eq(tg_safetensors_write(f->ctx, p, k, ts, names, 0, NULL, NULL), TG_OK);
    free(ts);
    free(names);
    return (int)k;
}

/* Run `tgrad run ARGS --dtype .. --out o.npy --force [--grad-out dy.npy --grads g.safetensors]` on a
 * fixture whose inputs and masks were written, and compare with PyTorch. */
static void run_and_check(fixture *f, const char *args, int dtype_i, int n_inputs, int n_params)
{
    char a[2048];
    bool grads = n_inputs > 0;
    snprintf(a, sizeof a, "%s --dtype %s --out o.npy --force%s", args, dtype_arg(dtype_i),
             grads ? " --grad-out dy.npy --grads g.safetensors" : "");
    int rc = run(a);
    char err[4096];
    read_file("err.txt", err, sizeof err);
    ck_assert_msg(rc == 0, "'%s': %s", a, err);
    check_out(f, tol_of(dtype_i));
    if (grads)
        check_grads(f, tol_of(dtype_i), n_params + n_inputs);
}

/* One `tgrad run` case on a fixture: its files ("key=file" written as .npy; "key=file|b1" as
 * a bool mask, "key=file<i8" as a 0/1 integer mask), the arguments, and how many inputs have
 * gradients (0: forward only). */
typedef struct {
    const char *fixture;
    const char *files[6];
    const char *args;
    int n_inputs;
    int n_params; /* expected parameter count of the weights file */
} run_case_t;

static void write_files(fixture *f, const char *const *files)
{
    for (int i = 0; i < 6 && files[i]; i++) {
        char key[64], file[64];
        const char *eq = strchr(files[i], '=');
        snprintf(key, sizeof key, "%.*s", (int)(eq - files[i]), files[i]);
        size_t l = strcspn(eq + 1, "|<");
        snprintf(file, sizeof file, "%.*s", (int)l, eq + 1);
        if (eq[1 + l])
            mask_npy(f, key, file, eq + 1 + l, -1);
        else
            npy(f, key, file);
    }
}

static void run_cases(const run_case_t *cases, int n, int dtype_i)
{
    for (int i = 0; i < n; i++) {
        fixture f = load(cases[i].fixture);
        int np = weights_all(&f);
        ck_assert_int_eq(np, cases[i].n_params);
        write_files(&f, cases[i].files);
        if (cases[i].n_inputs)
            npy(&f, "grad_out", "dy.npy");
        run_and_check(&f, cases[i].args, dtype_i, cases[i].n_inputs, np);
        tg_ctx_free(f.ctx);
    }
}

#define DEC "decoder --weights w.safetensors --x x.npy --memory m.npy "
#define XM "x=x.npy", "memory=m.npy"
START_TEST(test_decoder_layer)
{
    static const run_case_t cases[] = {
        /* float tgt_mask (additive), bool memory_mask, gelu */
        {"dec_masks", {XM, "tgt_mask=tm.npy", "memory_mask=mm.npy|b1"},
         DEC "--heads 2 --tgt-mask tm.npy --memory-mask mm.npy --activation gelu", 2, 18},
        {"dec_causal_tgt_kpm", {XM, "tgt_key_padding_mask=tp.npy|b1"},
         DEC "--heads 2 --causal --tgt-key-padding-mask tp.npy", 2, 18},
        {"dec_memory_kpm", {XM, "memory_key_padding_mask=mp.npy<i8"}, /* 0/1 integers */
         DEC "--heads 4 --norm-first --memory-key-padding-mask mp.npy", 0, 18},
        {"dec_pre_gelu_eps", {XM}, DEC "--heads 3 --norm-first --eps 1e-6 --activation gelu", 2,
         18},
        /* PyTorch gives NaN in the fully masked row; tgrad the cross-attention's bias there */
        {"dec_masked_memory_row", {XM, "memory_mask=mm.npy|b1"},
         DEC "--heads 2 --norm-first --causal --memory-mask mm.npy", 2, 18},
    };
    run_cases(cases, (int)(sizeof cases / sizeof cases[0]), _i);
}
END_TEST

START_TEST(test_stacks)
{
    static const run_case_t cases[] = {
        {"dec_stack2", {XM, "memory_key_padding_mask=mp.npy|b1"},
         DEC "--heads 2 --layers 2 --causal --memory-key-padding-mask mp.npy", 2, 38},
        {"enc_stack2_norm", {"x=x.npy", "key_padding_mask=p.npy|b1"},
         "encoder --weights w.safetensors --heads 2 --x x.npy --layers 2 "
         "--key-padding-mask p.npy", 1, 26},
    };
    run_cases(cases, (int)(sizeof cases / sizeof cases[0]), _i);
}
END_TEST

#define TF "transformer --weights w.safetensors --heads 2 --src s.npy --tgt t.npy " \
           "--encoder-layers 2 --decoder-layers 2 --causal "
START_TEST(test_transformer)
{
    static const run_case_t cases[] = {
        {"transformer_2_2", {"src=s.npy", "tgt=t.npy", "src_key_padding_mask=sp.npy|b1",
                             "tgt_key_padding_mask=tp.npy|b1"},
         TF "--src-key-padding-mask sp.npy --tgt-key-padding-mask tp.npy "
            "--memory-key-padding-mask sp.npy", 2, 64},
        {"transformer_pre_gelu", {"src=s.npy", "tgt=t.npy", "tgt_key_padding_mask=tp.npy|b1"},
         TF "--tgt-key-padding-mask tp.npy --norm-first --eps 1e-6 --activation gelu", 2, 64},
    };
    run_cases(cases, (int)(sizeof cases / sizeof cases[0]), _i);
}
END_TEST

/* Integer ids of fixture tensor @p key (F64 holding integers) as a <i4 .npy dir/<file>. */
static void ids_npy(fixture *f, const char *key, const char *file)
{
    tg_tensor *t = tg_safetensors_find(f->st, key);
    ck_assert_msg(t != NULL && tg_tensor_rank(t) == 2, "fixture lacks %s (B, T)", key);
    int64_t numel = tg_tensor_numel(t);
    int32_t *ids = malloc(sizeof(int32_t) * (size_t)numel);
    ck_assert_ptr_nonnull(ids);
    for (int64_t i = 0; i < numel; i++)
        ids[i] = (int32_t)tg_get(t, i);
    char p[512], shape[64];
    snprintf(shape, sizeof shape, "(%lld, %lld)", (long long)tg_tensor_shape(t)[0],
             (long long)tg_tensor_shape(t)[1]);
    tu_write_npy_raw(tu_path(p, sizeof p, dir, file), "<i4", shape, ids,
                     sizeof(int32_t) * (size_t)numel);
    free(ids);
}

/* `run transformer` on tgrad's own export of an encoder-decoder: the whole model (token
 * embeddings, positions, both stacks, final norm, output layer), token ids in, logits out,
 * equal to PyTorch's (tools/reference/check_export.py) on a padded source; the options that describe
 * the model come from the export's config (given ones must agree). */
START_TEST(test_transformer_export)
{
    static const char *const cases[2] = {"export_seq2seq", "export_seq2seq_tied"};
    char name[64], args[1024];
    snprintf(name, sizeof name, "%s_logits", cases[_i]);
    fixture f = load(name);
    ids_npy(&f, "src_ids", "s.npy");
    ids_npy(&f, "tgt_ids", "t.npy");
    bool_npy(&f, "src_key_padding_mask", "sp.npy");
    snprintf(args, sizeof args, "transformer --weights %s/%s.safetensors --src s.npy --tgt t.npy "
             "--src-key-padding-mask sp.npy --out o.npy%s", TG_FIXTURES, cases[_i],
             _i == 0 ? " --heads 2 --encoder-layers 1 --decoder-layers 2 --causal" : "");
    int rc = run(args);
    char err[4096];
    read_file("err.txt", err, sizeof err);
    ck_assert_msg(rc == 0, "run %s: exit %d: %s", args, rc, err);
    char p[512];
    tg_tensor *o = tg_npy_read(f.ctx, tu_path(p, sizeof p, dir, "o.npy"), TG_F64, NULL);
    ck_assert_msg(o != NULL, "%s", tg_ctx_message(f.ctx));
    tg_tensor *want = tg_safetensors_find(f.st, _i == 0 ? "logits_f32" : "logits");
    const int64_t *ws = tg_tensor_shape(want);
    ck_assert_int_eq(tg_tensor_rank(o), 3);
    ck_assert(!memcmp(tg_tensor_shape(o), ws, 3 * sizeof(int64_t)));
    double e = rel(o, want), tol = _i == 0 ? 1e-5 : 1e-10;
    ck_assert_msg(e <= tol, "%s: logits differ from PyTorch's by %.3g", cases[_i], e);
    /* without --out: the shape and the export's dtype */
    snprintf(args, sizeof args, "transformer --weights %s/%s.safetensors --src s.npy --tgt t.npy",
             TG_FIXTURES, cases[_i]);
    ck_assert_int_eq(run(args), 0);
    char out[256], line[256];
    read_file("out.txt", out, sizeof out);
    snprintf(line, sizeof line, "transformer output (%lld, %lld, %lld) %s\n", (long long)ws[0],
             (long long)ws[1], (long long)ws[2], _i == 0 ? "f32" : "f64");
    ck_assert_str_eq(out, line);
    tg_ctx_free(f.ctx);
}
END_TEST

/* What `run transformer` refuses about an export or a checkpoint: one line, exit 2 for the
 * command line (a contradicting option, the wrong kind of file), 1 for a file's contents. */
START_TEST(test_transformer_export_errors)
{
    fixture f = load("export_seq2seq_logits");
    ids_npy(&f, "src_ids", "s.npy");
    ids_npy(&f, "tgt_ids", "t.npy");
    npy(&f, "src_key_padding_mask", "fs.npy"); /* float: not ids */
    static const struct {
        const char *args;
        int rc;
        const char *needle;
    } cases[] = {
        {"export_seq2seq.safetensors --src s.npy --tgt t.npy --heads 4", 2,
         "--heads 4 contradicts the config of the export"},
        {"export_seq2seq.safetensors --src s.npy --tgt t.npy --decoder-layers 1", 2,
         "(n_decoder_layers 2)"},
        {"export_seq2seq.safetensors --src s.npy --tgt t.npy --dtype f64", 2, "(dtype f32)"},
        {"export_seq2seq.safetensors --src s.npy --tgt t.npy --activation gelu", 2,
         "(activation relu)"},
        {"export_seq2seq.safetensors --src s.npy --tgt t.npy --memory-key-padding-mask fs.npy",
         2, "--src-key-padding-mask"},
        {"export_seq2seq.safetensors --src fs.npy --tgt t.npy", 1,
         "takes token ids, an integer array (B, S), not a float array"},
        {"export_lm.safetensors --src s.npy --tgt t.npy", 2,
         "is the export of a text language model, not of an encoder-decoder"},
        {"export_task.safetensors --src s.npy --tgt t.npy", 2,
         "is the export of a built-in task's encoder"},
        {"export_seq2seq.ckpt --src s.npy --tgt t.npy", 2,
         "is a training checkpoint: run transformer takes its export"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char args[1024], err[4096];
        snprintf(args, sizeof args, "transformer --weights %s/%s", TG_FIXTURES, cases[i].args);
        int rc = run(args);
        read_file("err.txt", err, sizeof err);
        ck_assert_msg(rc == cases[i].rc, "run %s: exit %d, want %d: %s", args, rc, cases[i].rc,
                      err);
        ck_assert_msg(count_lines(err) == 1 && strstr(err, cases[i].needle),
                      "run %s: '%s' is not one line with '%s'", args, err, cases[i].needle);
    }
    tg_ctx_free(f.ctx);
}
END_TEST

/* Bad decoder / transformer invocations: one line on stderr naming the problem. */
START_TEST(test_decoder_errors)
{
    fixture f = load("dec_masks");
    weights_all(&f);
    npy(&f, "x", "x.npy");
    npy(&f, "memory", "m.npy");
    npy(&f, "tgt_mask", "tm.npy");
    bool_npy(&f, "memory_mask", "mm.npy");
    npy(&f, "grad_out", "wide.npy"); /* (2, 4, 8) */
    char p[512];
    static const double zeros[120] = {0};
    snprintf(p, sizeof p, "%s/m3.npy", dir); /* batch 3 */
    ck_assert_int_eq(tg_npy_write_data(f.ctx, p, TG_F64, 3, (int64_t[]){3, 5, 8}, zeros),
                     TG_OK);
    snprintf(p, sizeof p, "%s/m6.npy", dir); /* width 6 */
    ck_assert_int_eq(tg_npy_write_data(f.ctx, p, TG_F64, 3, (int64_t[]){2, 5, 6}, zeros),
                     TG_OK);
    static const err_case cases[] = {
        {"decoder --weights w.safetensors --heads 2 --x x.npy --memory m6.npy",
         "--memory 'm6.npy' has last dim 6, but d_model of --weights 'w.safetensors' is 8"},
        {"decoder --weights w.safetensors --heads 2 --x x.npy --memory m3.npy",
         "need x (B, T, 8) and memory (B, S, 8) with the same batch B; got x (2, 4, 8), "
         "memory (3, 5, 8)"},
        {"decoder --weights w.safetensors --heads 2 --x x.npy --memory m.npy --tgt-mask mm.npy",
         "tgt_mask (4, 5) must be (T_q, T_k) = (4, 4)"},
        {"decoder --weights w.safetensors --heads 2 --x x.npy --memory m.npy --memory-mask "
         "tm.npy", "memory_mask (4, 4) must be (T_q, T_k) = (4, 5)"},
        {"decoder --weights w.safetensors --heads 2 --x x.npy --memory m.npy "
         "--memory-key-padding-mask tm.npy", "--memory-key-padding-mask 'tm.npy': must be a "
         "bool or 0/1 integer array"},
        {"decoder --weights w.safetensors --heads 2 --x x.npy", "--memory"},
        {"decoder --weights w.safetensors --heads 3 --x x.npy --memory m.npy", "--heads 3"},
        {"decoder --weights w.safetensors --heads 2 --x x.npy --memory m.npy --layers 2",
         "no 'layers.0.self_attn.in_proj_weight'"},
        {"decoder --weights w.safetensors --heads 2 --x x.npy --memory m.npy --out m.npy",
         "--out 'm.npy' is the input --memory 'm.npy'"},
        {"decoder --weights w.safetensors --heads 2 --x x.npy --memory m.npy --src x.npy",
         "option '--src' is not for decoder (it is an option of: transformer"},
        {"transformer --weights w.safetensors --heads 2 --src m.npy --tgt x.npy "
         "--decoder-layers 1", "--encoder-layers"},
        {"transformer --weights w.safetensors --heads 2 --src m.npy --tgt x.npy "
         "--encoder-layers 1 --decoder-layers 0", "--decoder-layers '0'"},
        {"transformer --weights w.safetensors --heads 2 --src m.npy --tgt x.npy "
         "--encoder-layers 1 --decoder-layers 1", "no 'encoder.layers.0.self_attn.in_proj_weight'"},
        {"encoder --weights w.safetensors --heads 2 --x x.npy --memory m.npy",
         "option '--memory' is not for encoder"},
    };
    expect_errors(cases, sizeof cases / sizeof cases[0]);
    tg_ctx_free(f.ctx);
}
END_TEST

/* --par-report lists the graph's parallel loops after the run: unfused attention over 512
 * positions has a 2^25-flop product (q k^T and the weights times v share its record) and a
 * softmax over 1 MiB, both split at 2 threads; each line names the node and op that ran it. */
START_TEST(test_par_report)
{
    enum { T = 512, D = 64 };
    static float v[T * D];
    for (int i = 0; i < T * D; i++)
        v[i] = (float)(i % 13) * 0.01f;
    tg_ctx *ctx = tg_ctx_new();
    ck_assert_ptr_nonnull(ctx);
    const char *names[3] = {"q.npy", "k.npy", "v.npy"};
    for (int i = 0; i < 3; i++) {
        char p[512];
        snprintf(p, sizeof p, "%s/%s", dir, names[i]);
        ck_assert_int_eq(tg_npy_write_data(ctx, p, TG_F32, TG_DIMS(1, T, D), v), TG_OK);
    }
    tg_ctx_set_threads(ctx, 2);
    bool par = tg_ctx_threads(ctx) == 2; /* a build with OpenMP */
    tg_ctx_free(ctx);
    char cmd[1024];
    snprintf(cmd, sizeof cmd, "env OMP_NUM_THREADS=2 '%s' run sdpa --q q.npy --k k.npy --v v.npy "
             "--unfused --par-report", tu_tgrad_exe());
    ck_assert_int_eq(tu_run_sh(dir, cmd, 120, NULL), 0);
    char out[4096];
    read_file("out.txt", out, sizeof out);
    long n = -1;
    ck_assert_msg(sscanf(out, "parallel loops: %ld", &n) == 1, "%s", out);
    ck_assert_ptr_nonnull(strstr(out, "sdpa output (1, 512, 64) f32\n"));
    if (!par) {
        ck_assert_int_eq(n, 0);
        fprintf(stderr, "test_par_report: this build runs one thread (no OpenMP)\n");
        return;
    }
    ck_assert_int_ge(n, 2);
    ck_assert_int_eq(count_lines(out), n + 2); /* the count, the loops, the output line */
    ck_assert_msg(strstr(out, "  gemm (~2^25 flops): node ") && strstr(out, " matmul, "), "%s",
                  out);
    ck_assert_msg(strstr(out, " softmax, "), "%s", out);
    ck_assert_msg(strstr(out, " region") && strstr(out, " on one thread, mean gain "), "%s", out);
    /* without the option: no report */
    snprintf(cmd, sizeof cmd, "env OMP_NUM_THREADS=2 '%s' run sdpa --q q.npy --k k.npy --v v.npy "
             "--unfused", tu_tgrad_exe());
    ck_assert_int_eq(tu_run_sh(dir, cmd, 120, NULL), 0);
    read_file("out.txt", out, sizeof out);
    ck_assert_str_eq(out, "sdpa output (1, 512, 64) f32\n");
}
END_TEST

int main(void)
{
    Suite *s = suite_create("run");
    TCase *tc = tcase_create("run");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_set_timeout(tc, 120);
    tcase_add_loop_test(tc, test_sdpa, 0, 2);
    tcase_add_loop_test(tc, test_sdpa_causal_forward_only, 0, 2);
    tcase_add_loop_test(tc, test_mha_self_masks, 0, 2);
    tcase_add_loop_test(tc, test_mha_cross, 0, 2);
    tcase_add_loop_test(tc, test_mha_additive_3d, 0, 2);
    tcase_add_loop_test(tc, test_ffn, 0, 2);
    tcase_add_loop_test(tc, test_encoder, 0, 2);
    tcase_add_loop_test(tc, test_integer_masks, 0, 2);
    tcase_add_loop_test(tc, test_decoder_layer, 0, 2);
    tcase_add_loop_test(tc, test_stacks, 0, 2);
    tcase_add_loop_test(tc, test_transformer, 0, 2);
    tcase_add_loop_test(tc, test_transformer_export, 0, 2);
    tcase_add_test(tc, test_transformer_export_errors);
    tcase_add_test(tc, test_decoder_errors);
    tcase_add_test(tc, test_errors);
    tcase_add_test(tc, test_help);
    tcase_add_test(tc, test_dot);
    tcase_add_test(tc, test_par_report);
    suite_add_tcase(s, tc);
    return tu_run(s);
}
