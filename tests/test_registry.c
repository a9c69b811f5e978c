/*
 * test_registry.c - the op registry and the gradient-check case table (tools/cli/opcases.c).
 *
 * Fails if any registered op lacks a backward rule or has fewer than three gradcheck cases
 * (except the inference-only ops listed below, which must have neither),
 * or if a case names something that is neither a registered op nor a known module. Then runs
 * every case through tg_gradcheck in f64 and in f32 (each with its dtype's defaults), and
 * checks that every case gives bitwise-identical outputs and gradients on 1, 2 and 3 threads.
 */
#include "opcases.h"
#include "registry.h"
#include "testutil.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Module builders (tgrad_nn.h and later) that have gradcheck cases but are not registry ops:
 * graphs of registered ops. Add a module here when you add its cases. */
static const char *const modules[] = {"sdpa", "mha", "ffn", "encoder", "transformer",
                                      "decoder", "encoder_decoder"};
#define N_MODULES ((int)(sizeof modules / sizeof modules[0]))

static bool is_module(const char *name)
{
    for (int m = 0; m < N_MODULES; m++)
        if (strcmp(modules[m], name) == 0)
            return true;
    return false;
}

/* Ops without a backward rule (a graph differentiating through one is refused with
 * TG_ERR_NOGRAD) and so without gradcheck cases; their forward is tested in their own suite.
 * Add an op here only if it writes state that a gradient cannot flow through (kv_attention:
 * tests/test_kv_cache.c), has no float source (one_hot: tests/test_grad.c) or is constant in
 * its sources (grad_mask: tests/test_grad.c). */
static const char *const inference_only[] = {"kv_attention", "one_hot", "grad_mask"};
#define N_INFERENCE_ONLY ((int)(sizeof inference_only / sizeof inference_only[0]))

static bool is_inference_only(const char *name)
{
    for (int m = 0; m < N_INFERENCE_ONLY; m++)
        if (strcmp(inference_only[m], name) == 0)
            return true;
    return false;
}

/* ---- the registry ------------------------------------------------------------------------- */
START_TEST(test_registry_walk)
{
    int n = tg_op_count();
    ck_assert_int_ge(n, 16);
    for (int i = 0; i < n; i++) {
        const char *name = tg_op_name(i);
        ck_assert_msg(name != NULL && name[0] != '\0', "op %d has no name", i);
        ck_assert_msg(tg_op_find(name) == i, "tg_op_find(\"%s\") = %d, expected %d", name,
                      tg_op_find(name), i);
        for (int j = 0; j < i; j++)
            ck_assert_msg(strcmp(tg_op_name(j), name) != 0, "ops %d and %d are both '%s'", j, i,
                          name);
        ck_assert_msg(!is_module(name), "'%s' is both an op and a module", name);
    }
    ck_assert_ptr_null(tg_op_name(-1));
    ck_assert_ptr_null(tg_op_name(n));
    ck_assert(!tg_op_has_backward(-1));
    ck_assert(!tg_op_has_backward(n));
    ck_assert_int_eq(tg_op_find("no_such_op"), -1);
    ck_assert_int_eq(tg_op_find(""), -1);
    ck_assert_int_eq(tg_op_find(NULL), -1);
    ck_assert_int_eq(tg_op_find("leaf"), -1); /* the leaf slot is not an op */
    ck_assert_int_ge(tg_op_find("matmul"), 0);
    ck_assert_int_ge(tg_op_find("softmax"), 0);
}
END_TEST

START_TEST(test_every_op_has_backward)
{
    char missing[1024] = "";
    for (int m = 0; m < N_INFERENCE_ONLY; m++) {
        int i = tg_op_find(inference_only[m]);
        ck_assert_msg(i >= 0, "inference-only op '%s' is not registered", inference_only[m]);
        ck_assert_msg(!tg_op_has_backward(i), "inference-only op '%s' has a backward rule",
                      inference_only[m]);
        ck_assert_int_eq(tg_opcase_count(inference_only[m]), 0);
    }
    for (int i = 0; i < tg_op_count(); i++)
        if (!tg_op_has_backward(i) && !is_inference_only(tg_op_name(i))) {
            strncat(missing, " ", sizeof missing - strlen(missing) - 1);
            strncat(missing, tg_op_name(i), sizeof missing - strlen(missing) - 1);
        }
    ck_assert_msg(missing[0] == '\0', "ops without a backward rule:%s", missing);
}
END_TEST

START_TEST(test_every_op_has_three_cases)
{
    char few[2048] = "";
    for (int i = 0; i < tg_op_count(); i++) {
        int c = tg_opcase_count(tg_op_name(i));
        if (c < 3 && !is_inference_only(tg_op_name(i))) {
            char b[96];
            snprintf(b, sizeof b, " %s (%d)", tg_op_name(i), c);
            strncat(few, b, sizeof few - strlen(few) - 1);
        }
    }
    ck_assert_msg(few[0] == '\0', "ops with fewer than 3 gradcheck cases in tools/cli/opcases.c:%s",
                  few);
    for (int m = 0; m < N_MODULES; m++)
        ck_assert_int_ge(tg_opcase_count(modules[m]), 0);
    ck_assert_int_eq(tg_opcase_count("no_such_op"), 0);
}
END_TEST

START_TEST(test_case_table)
{
    ck_assert_int_gt(tg_n_opcases, 0);
    int total = 0;
    for (int i = 0; i < tg_op_count(); i++)
        total += tg_opcase_count(tg_op_name(i));
    for (int m = 0; m < N_MODULES; m++)
        total += tg_opcase_count(modules[m]);
    for (int i = 0; i < tg_n_opcases; i++) {
        const tg_opcase *c = &tg_opcases[i];
        ck_assert_msg(c->op && c->name && c->shapes && c->build, "case %d is incomplete", i);
        ck_assert_msg(tg_op_find(c->op) >= 0 || is_module(c->op),
                      "case %d ('%s' / '%s') names neither a registered op nor a module in "
                      "tests/test_registry.c's list",
                      i, c->op, c->name);
        ck_assert_msg(c->name[0] && c->shapes[0], "case %d ('%s') lacks a name or shapes", i,
                      c->op);
        for (int j = 0; j < i; j++)
            ck_assert_msg(strcmp(c->op, tg_opcases[j].op) != 0 ||
                              strcmp(c->name, tg_opcases[j].name) != 0,
                          "case '%s' / '%s' appears twice", c->op, c->name);
    }
    ck_assert_int_eq(total, tg_n_opcases); /* every case is counted once */
}
END_TEST

/* ---- every case --------------------------------------------------------------------------- */
/* Each case of a registered op really builds that op (the label is not a typo). */
START_TEST(test_case_uses_its_op)
{
    const tg_opcase *c = &tg_opcases[_i];
    if (tg_op_find(c->op) < 0)
        return; /* modules are graphs of several ops */
    tg_ctx *ctx = tg_ctx_new();
    tg_ctx_seed(ctx, 1);
    tg_tensor *y = c->build(ctx, TG_F64);
    ck_assert_msg(y != NULL, "%s/%s: %s", c->op, c->name, tg_ctx_message(ctx));
    tg_graph *g = tg_graph_new(ctx, &y, 1);
    ck_assert_msg(g != NULL, "%s/%s: %s", c->op, c->name, tg_ctx_message(ctx));
    bool found = false;
    for (int64_t i = 0; i < tg_graph_size(g) && !found; i++) {
        /* a custom op shows its own name; its registry entry is "custom" */
        tg_tensor *t = tg_graph_node(g, i);
        found = strcmp(tg_tensor_op_name(t), c->op) == 0 ||
                (tg_tensor_op_index(t) >= 0 && strcmp(tg_op_name(tg_tensor_op_index(t)), c->op) == 0);
    }
    ck_assert_msg(found, "case %s/%s builds no '%s' op", c->op, c->name, c->op);
    ck_assert_msg(tg_graph_n_grad_leaves(g) > 0, "case %s/%s has nothing to differentiate",
                  c->op, c->name);
    tg_ctx_free(ctx);
}
END_TEST

static void gradcheck_case(int i, tg_dtype dt, uint64_t seed)
{
    const tg_opcase *c = &tg_opcases[i];
    tg_ctx *ctx = tg_ctx_new();
    tg_ctx_seed(ctx, seed);
    tg_tensor *y = c->build(ctx, dt);
    ck_assert_msg(y != NULL, "%s/%s %s: build failed: %s", c->op, c->name, tg_dtype_str(dt),
                  tg_ctx_message(ctx));
    ck_assert_int_eq(tg_tensor_dtype(y), dt);
    tg_gradcheck_opts o = tg_gradcheck_defaults(dt);
    tg_gradcheck_report rep;
    tg_status s = tg_gradcheck(ctx, y, &o, &rep);
    ck_assert_msg(s == TG_OK, "%s/%s (%s) %s, seed %llu: %s: %s%s%s", c->op, c->name, c->shapes,
                  tg_dtype_str(dt), (unsigned long long)seed, tg_status_str(s), rep.message,
                  s == TG_ERR_GRADCHECK ? "" : " / ", s == TG_ERR_GRADCHECK ? "" : tg_ctx_message(ctx));
    ck_assert(rep.passed && rep.backward_deterministic && rep.zero_upstream_ok);
    ck_assert_int_gt(rep.n_checked, 0);
    tg_ctx_free(ctx);
}

/* f64 with PyTorch's defaults, with the seed `tgrad gradcheck` uses and with a second one */
START_TEST(test_gradcheck_f64)
{
    gradcheck_case(_i, TG_F64, 1234 + (uint64_t)_i);
    gradcheck_case(_i, TG_F64, 99991 + 7 * (uint64_t)_i);
}
END_TEST

START_TEST(test_gradcheck_f32) { gradcheck_case(_i, TG_F32, 1234 + (uint64_t)_i); }
END_TEST

START_TEST(test_thread_invariance_f64) { tu_assert_thread_invariant(tg_opcases[_i].build, TG_F64); }
END_TEST

START_TEST(test_thread_invariance_f32) { tu_assert_thread_invariant(tg_opcases[_i].build, TG_F32); }
END_TEST

/* A kernel runs from its call record alone: dropout's forward and backward, called through
 * the registry with a record filled by hand (it has no pointer to a tensor), give the graph's bits for the
 * same RNG state, draw exactly one number from the record's stream in training mode and none
 * in eval mode. */
START_TEST(test_kernel_without_tensor)
{
    enum { N = 1000 };
    static float x[N], out[N], want[N], dy[N], dx[N];
    static _Alignas(64) unsigned char saved[64 + N];
    for (int i = 0; i < N; i++) {
        x[i] = (float)(i % 17) - 8.5f;
        dy[i] = 0.25f * (float)(i % 5);
    }
    /* the graph's result, and the context's RNG state before its run */
    tg_ctx *ctx = tu_ctx_new();
    tg_ctx_seed(ctx, 42);
    tg_tensor *xt = tg_input(ctx, TG_F32, TG_DIMS(N), "x");
    ck_assert_int_eq(tg_tensor_set_data(xt, x, TG_F32, N), TG_OK);
    tg_tensor *y = tg_dropout(ctx, xt, 0.3);
    tg_graph *g = tg_graph_new(ctx, &y, 1);
    ck_assert_ptr_nonnull(g);
    uint64_t rng[4], rng0[4];
    memcpy(rng, ctx->rng, sizeof rng);
    memcpy(rng0, ctx->rng, sizeof rng0);
    ck_assert_int_eq(tg_graph_forward(g), TG_OK);
    ck_assert_int_eq(tg_tensor_get_data(y, want, TG_F32, N), TG_OK);
    tu_ctx_free(ctx);

    tg_op_params p = {.dropout = {.p = 0.3}};
    int64_t shape[1] = {N}, stride[1] = {1};
    tg__call c = {.n_src = 1, .in = {x}, .out = out, .saved = saved, .nt = 2,
                  .op = TG_OP_DROPOUT, .dtype = TG_F32, .rank = 1, .numel = N, .shape = shape, .p = &p,
                  .src_dtype = {TG_F32}, .src_rank = {1}, .src_numel = {N},
                  .src_shape = {shape}, .src_stride = {stride}, .training = true, .rng = rng};
    const tg_op_def *def = &tg__op_table[TG_OP_DROPOUT];
    ck_assert_int_eq(def->forward(&c), TG_OK);
    ck_assert_mem_eq(out, want, sizeof out);
    (void)tg__rng_next(rng0); /* one draw */
    ck_assert_mem_eq(rng, rng0, sizeof rng);
    /* backward: dx += dy keep / (1 - p), from the saved mask and scale */
    c.backward = true;
    c.dy = dy;
    c.dx[0] = dx;
    ck_assert_int_eq(def->backward(&c), TG_OK);
    float scale = (float)(1.0 / (1.0 - 0.3));
    for (int i = 0; i < N; i++)
        ck_assert(dx[i] == (saved[64 + i] ? dy[i] * scale : 0.0f));
    /* eval mode: the identity, and the stream is left alone */
    c.backward = false;
    c.training = false;
    ck_assert_int_eq(def->forward(&c), TG_OK);
    ck_assert_mem_eq(out, x, sizeof out);
    ck_assert_mem_eq(rng, rng0, sizeof rng);
}
END_TEST

/* A broadcasting op's kernels from a hand-filled record: mul of a (3, 5) by b (5), forward and
 * backward (b's gradient summed over the broadcast rows, its workspace sized by the op's own
 * query), give the graph's bits. The sources' shapes come from the record alone. */
START_TEST(test_broadcast_kernel_without_tensor)
{
    enum { R = 3, L = 5, N = R * L };
    static float a[N], b[L], out[N], want[N], dy[N], da[N], db[L], ga[N], gb[L];
    static _Alignas(64) float ws[N];
    for (int i = 0; i < N; i++) {
        a[i] = 0.37f * (float)(i % 7) - 1.1f;
        dy[i] = 1.0f; /* the gradient of sum_all */
    }
    for (int j = 0; j < L; j++)
        b[j] = 0.5f + 0.23f * (float)j;
    tg_ctx *ctx = tu_ctx_new();
    tg_tensor *at = tg_param(ctx, TG_F32, TG_DIMS(R, L), "a");
    tg_tensor *bt = tg_param(ctx, TG_F32, TG_DIMS(L), "b");
    ck_assert_int_eq(tg_tensor_set_data(at, a, TG_F32, N), TG_OK);
    ck_assert_int_eq(tg_tensor_set_data(bt, b, TG_F32, L), TG_OK);
    tg_tensor *y = tg_mul(ctx, at, bt);
    ck_assert_int_eq(tg_keep(y), TG_OK);
    tg_tensor *loss = tg_sum_all(ctx, y);
    tg_graph *g = tg_graph_new(ctx, &loss, 1);
    ck_assert_ptr_nonnull(g);
    ck_assert_int_eq(tg_graph_forward(g), TG_OK);
    ck_assert_int_eq(tg_graph_backward(g, loss, NULL), TG_OK);
    ck_assert_int_eq(tg_tensor_get_data(y, want, TG_F32, N), TG_OK);
    ck_assert_int_eq(tg_tensor_get_grad(at, ga, TG_F32, N), TG_OK);
    ck_assert_int_eq(tg_tensor_get_grad(bt, gb, TG_F32, L), TG_OK);
    tu_ctx_free(ctx);

    int64_t ys[2] = {R, L}, yst[2] = {L, 1}, bs[1] = {L}, bst[1] = {1};
    tg_op_params p = {0};
    tg__call c = {.n_src = 2, .in = {a, b}, .out = out, .nt = 2, .op = TG_OP_MUL,
                  .dtype = TG_F32, .rank = 2, .numel = N, .shape = ys, .p = &p,
                  .src_dtype = {TG_F32, TG_F32}, .src_rank = {2, 1}, .src_numel = {N, L},
                  .src_shape = {ys, bs}, .src_stride = {yst, bst}};
    tg_kernel_fn fwd = tg__kernel(&tg__op_table[TG_OP_MUL], TG_OP_MUL, TG_F32, false);
    tg_kernel_fn bwd = tg__kernel(&tg__op_table[TG_OP_MUL], TG_OP_MUL, TG_F32, true);
    ck_assert_int_eq(fwd(&c), TG_OK);
    ck_assert_mem_eq(out, want, sizeof out);
    c.backward = true;
    ck_assert_uint_eq(tg__op_table[TG_OP_MUL].workspace(&c), sizeof ws); /* b is broadcast */
    c.dy = dy;
    c.dx[0] = da;
    c.dx[1] = db;
    c.ws = ws;
    c.ws_bytes = sizeof ws;
    ck_assert_int_eq(bwd(&c), TG_OK);
    ck_assert_mem_eq(da, ga, sizeof da);
    ck_assert_mem_eq(db, gb, sizeof db);
}
END_TEST

static Suite *registry_suite(void)
{
    Suite *s = suite_create("registry");
    TCase *tc = tcase_create("table");
    tcase_add_test(tc, test_registry_walk);
    tcase_add_test(tc, test_every_op_has_backward);
    tcase_add_test(tc, test_every_op_has_three_cases);
    tcase_add_test(tc, test_case_table);
    tcase_add_loop_test(tc, test_case_uses_its_op, 0, tg_n_opcases);
    tcase_add_test(tc, test_kernel_without_tensor);
    tcase_add_test(tc, test_broadcast_kernel_without_tensor);
    suite_add_tcase(s, tc);

    tc = tcase_create("gradcheck");
    tcase_set_timeout(tc, 120);
    tcase_add_loop_test(tc, test_gradcheck_f64, 0, tg_n_opcases);
    tcase_add_loop_test(tc, test_gradcheck_f32, 0, tg_n_opcases);
    suite_add_tcase(s, tc);

    tc = tcase_create("threads");
    tcase_set_timeout(tc, 120);
    tcase_add_loop_test(tc, test_thread_invariance_f64, 0, tg_n_opcases);
    tcase_add_loop_test(tc, test_thread_invariance_f32, 0, tg_n_opcases);
    suite_add_tcase(s, tc);
    return s;
}

int main(void) { return tu_run(registry_suite()); }
