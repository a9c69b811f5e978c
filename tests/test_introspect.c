#define _POSIX_C_SOURCE 200809L
/*
 * test_introspect.c - graph introspection and DOT: the accessors (sources, op index, views,
 * execution order), tg_graph_write_dot on a small MHA graph (every node and edge present,
 * backward edges, `dot -Tsvg` accepts it when Graphviz is installed), hostile tensor names
 * escaped, bad paths and a full disk (no partial file), and tg_set_requires_grad refused once
 * an op reads the tensor.
 */
#include "testutil.h"
#include "tgrad_io.h"
#include "tgrad_nn.h"

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- helpers -------------------------------------------------------------------------------- */
typedef struct {
    char *p;
    size_t n, cap;
    int fail_at; /* > 0: the write that would pass this many bytes fails with ENOSPC */
} membuf;

static int mem_write(void *user, const void *data, size_t size)
{
    membuf *b = user;
    if (b->fail_at > 0 && b->n + size > (size_t)b->fail_at)
        return 28; /* ENOSPC */
    if (b->n + size + 1 > b->cap) {
        b->cap = (b->n + size + 1) * 2;
        b->p = realloc(b->p, b->cap);
        ck_assert_ptr_nonnull(b->p);
    }
    memcpy(b->p + b->n, data, size);
    b->n += size;
    b->p[b->n] = '\0';
    return 0;
}

/* The DOT text of g (malloc'd). */
static char *dot_text(tg_graph *g, int flags)
{
    membuf b = {0};
    tg_writer w = {mem_write, &b};
    tg_status s = tg_graph_write_dot_to(g, &w, flags);
    ck_assert_msg(s == TG_OK, "%s", tg_ctx_message(tg_tensor_ctx(tg_graph_node(g, 0))));
    ck_assert_ptr_nonnull(b.p);
    return b.p;
}

static int count(const char *hay, const char *needle)
{
    int n = 0;
    for (const char *p = strstr(hay, needle); p; p = strstr(p + 1, needle))
        n++;
    return n;
}

static bool have_dot(void) { return system("command -v dot >/dev/null 2>&1") == 0; }

static char dir[256];
static void setup(void) { tu_mkdtemp(dir, sizeof dir, "introspect"); }
static void teardown(void) { tu_rm_tree(dir); }

/* `dot -Tsvg name -o name.svg` in dir must succeed without a word on stderr; returns the SVG
 * (malloc'd), or NULL when Graphviz is not installed. */
static char *run_dot(const char *name)
{
    if (!have_dot())
        return NULL;
    char cmd[512];
    snprintf(cmd, sizeof cmd, "dot -Tsvg '%s' -o '%s.svg'", name, name);
    int rc = tu_run_sh(dir, cmd, 120, NULL);
    char *err = tu_slurp_in(dir, "err.txt", NULL);
    ck_assert_msg(rc == 0 && err && err[0] == '\0', "dot -Tsvg %s: exit %d: %s", name, rc,
                  err ? err : "?");
    free(err);
    char svg[300];
    snprintf(svg, sizeof svg, "%s.svg", name);
    char *s = tu_slurp_in(dir, svg, NULL);
    ck_assert_ptr_nonnull(s);
    ck_assert_ptr_nonnull(strstr(s, "<svg"));
    return s;
}

/* A small MHA graph: self-attention over x (2, 3, 4), 2 heads, causal, with its weights as a
 * second output. */
static tg_tensor *mha_graph(tg_ctx *ctx, tg_graph **g)
{
    tg_mha m;
    ck_assert_int_eq(tg_mha_init(ctx, &m, TG_F32, 4, 2, NULL), TG_OK);
    tg_tensor *x = tu_input(ctx, TG_F32, TG_DIMS(2, 3, 4), "x", -1, 1);
    tg_attn_masks masks = {.causal = true};
    tg_tensor *w = NULL;
    tg_tensor *y = tg_mha_forward(ctx, &m, x, x, x, &masks, &w);
    ck_assert_msg(y && w, "%s", tg_ctx_message(ctx));
    tg_tensor *loss = tg_sum_all(ctx, y);
    tg_tensor *outs[2] = {loss, w};
    *g = tg_graph_new(ctx, outs, 2);
    ck_assert_msg(*g != NULL, "%s", tg_ctx_message(ctx));
    return loss;
}

/* Position of t among g's nodes, -1 if absent. */
static int64_t index_of(tg_graph *g, const tg_tensor *t)
{
    for (int64_t i = 0; i < tg_graph_size(g); i++)
        if (tg_graph_node(g, i) == t)
            return i;
    return -1;
}

/* ---- accessors ------------------------------------------------------------------------------ */
START_TEST(test_accessors)
{
    tg_ctx *ctx = tu_ctx_new();
    tg_tensor *x = tg_input(ctx, TG_F64, TG_DIMS(2, 3), "x");
    tg_tensor *w = tg_param(ctx, TG_F64, TG_DIMS(3, 4), "w");
    tg_tensor *y = tg_matmul(ctx, x, w, false, false);
    tg_tensor *r = tg_reshape(ctx, y, TG_DIMS(8));
    tg_tensor *sq = tg_matmul(ctx, x, x, false, true); /* one tensor as both operands */
    ck_assert_int_eq(tg_tensor_n_srcs(x), 0);
    ck_assert_ptr_null(tg_tensor_src(x, 0));
    ck_assert_int_eq(tg_tensor_n_srcs(y), 2);
    ck_assert_ptr_eq(tg_tensor_src(y, 0), x);
    ck_assert_ptr_eq(tg_tensor_src(y, 1), w);
    ck_assert_ptr_null(tg_tensor_src(y, 2));
    ck_assert_ptr_null(tg_tensor_src(y, -1));
    ck_assert_ptr_eq(tg_tensor_src(sq, 0), tg_tensor_src(sq, 1));
    ck_assert_int_eq(tg_tensor_op_index(x), -1);
    ck_assert_int_eq(tg_tensor_op_index(y), tg_op_find("matmul"));
    ck_assert_str_eq(tg_op_name(tg_tensor_op_index(r)), "reshape");
    ck_assert_str_eq(tg_tensor_op_name(y), "matmul");
    ck_assert_str_eq(tg_tensor_op_name(w), "param");
    ck_assert(tg_tensor_is_view(r));
    ck_assert(!tg_tensor_is_view(y));
    ck_assert(!tg_tensor_is_view(x));
    ck_assert_int_eq(tg_tensor_kind(y), TG_KIND_OP);
    ck_assert_int_eq(tg_tensor_kind(w), TG_KIND_PARAM);
    /* NULL is harmless */
    ck_assert_int_eq(tg_tensor_n_srcs(NULL), 0);
    ck_assert_ptr_null(tg_tensor_src(NULL, 0));
    ck_assert_int_eq(tg_tensor_op_index(NULL), -1);
    ck_assert(!tg_tensor_is_view(NULL));
}
END_TEST

/* tg_graph_node lists the nodes in execution order: every source before its consumer. */
START_TEST(test_execution_order)
{
    tg_ctx *ctx = tu_ctx_new();
    tg_graph *g;
    tg_tensor *loss = mha_graph(ctx, &g);
    int64_t n = tg_graph_size(g);
    ck_assert_int_gt(n, 20);
    ck_assert_ptr_eq(tg_graph_node(g, index_of(g, loss)), loss);
    for (int64_t i = 0; i < n; i++) {
        tg_tensor *t = tg_graph_node(g, i);
        for (int k = 0; k < tg_tensor_n_srcs(t); k++) {
            int64_t j = index_of(g, tg_tensor_src(t, k));
            ck_assert_msg(j >= 0 && j < i, "node %lld '%s': source %d at %lld", (long long)i,
                          tg_tensor_name(t), k, (long long)j);
        }
    }
}
END_TEST

/* Generated names are unique in a graph: an op whose input needed a contiguous copy first is
 * named after its own id, not the copy's ("contiguous5" then "reshape6", never two nodes
 * numbered 5), so DOT labels and messages never show two nodes with one name. */
START_TEST(test_auto_names_unique)
{
    tg_ctx *ctx = tu_ctx_new();
    tg_tensor *x = tg_input(ctx, TG_F32, TG_DIMS(2, 3, 4), "x");
    tg_tensor *t = tg_transpose(ctx, x, 0, 2);                  /* a strided view (4, 3, 2) */
    tg_tensor *r = tg_reshape(ctx, t, TG_DIMS(4, 6));            /* needs a contiguous copy */
    tg_tensor *y = tg_sum(ctx, tg_mul(ctx, r, r), 1, false);   /* (4) */
    ck_assert_ptr_nonnull(y);
    tg_graph *g = tg_graph_new(ctx, &y, 1);
    ck_assert_ptr_nonnull(g);
    int64_t n = tg_graph_size(g);
    bool copied = false;
    for (int64_t i = 0; i < n; i++) {
        const char *a = tg_tensor_name(tg_graph_node(g, i));
        copied = copied || strncmp(a, "contiguous", 10) == 0;
        for (int64_t j = i + 1; j < n; j++)
            ck_assert_msg(strcmp(a, tg_tensor_name(tg_graph_node(g, j))) != 0,
                          "nodes %lld and %lld are both named '%s'", (long long)i,
                          (long long)j, a);
        /* the number in a generated name is unique too */
        const char *d = a + strcspn(a, "0123456789");
        for (int64_t j = 0; j < n && *d; j++) {
            const char *b = tg_tensor_name(tg_graph_node(g, j));
            const char *e = b + strcspn(b, "0123456789");
            ck_assert_msg(j == i || strcmp(d, e) != 0, "'%s' and '%s' share a number", a, b);
        }
    }
    ck_assert_msg(copied, "no contiguous copy: the case does not test what it should");
    char *s = dot_text(g, 0);
    ck_assert_ptr_nonnull(s);
    free(s);
}
END_TEST

/* ---- DOT ------------------------------------------------------------------------------------ */
START_TEST(test_dot_mha_every_node)
{
    tg_ctx *ctx = tu_ctx_new();
    tg_graph *g;
    mha_graph(ctx, &g);
    char *s = dot_text(g, 0);
    ck_assert_msg(strncmp(s, "// tgrad graph", 14) == 0, "%.200s", s);
    ck_assert_ptr_nonnull(strstr(s, "digraph tgrad {"));
    ck_assert_int_eq(count(s, "rankdir=LR"), 0);
    int64_t n = tg_graph_size(g);
    int edges = 0, ops = 0;
    for (int64_t i = 0; i < n; i++) {
        tg_tensor *t = tg_graph_node(g, i);
        char want[600], sh[160];
        snprintf(want, sizeof want, "  n%lld [label=\"%s\\n%s\\n%s f32\"", (long long)i,
                 tg_tensor_op_name(t), tg_tensor_name(t), tg_tensor_shape_str(t, sh, sizeof sh));
        ck_assert_msg(count(s, want) == 1, "node %lld: no (or several) '%s' in\n%s",
                      (long long)i, want, s);
        edges += tg_tensor_n_srcs(t);
        ops += tg_tensor_n_srcs(t) > 0;
    }
    ck_assert_int_eq(count(s, " -> "), edges);
    ck_assert_int_eq(count(s, "dashed, color"), 0);
    /* every op of MHA is there */
    const char *must[] = {"\"dense\\n", "\"reshape\\n", "\"matmul\\n", "\"softmax\\n",
                          "\"add_mask\\n", "\"scale\\n", "\"param\\nin_proj_weight\\n",
                          ("\"input\\nx\\n(2, 3, 4) f32\", shape=box, style=filled, "
                           "fillcolor=\"#d4e1f5\", penwidth=2")};
    for (size_t i = 0; i < sizeof must / sizeof must[0]; i++)
        ck_assert_msg(strstr(s, must[i]) != NULL, "missing %s", must[i]);
    ck_assert_int_eq(count(s, "shape=box, style=filled, fillcolor=\"#cfe8d5\""), 4); /* params */
    ck_assert_int_gt(ops, 10);
    ck_assert(s[strlen(s) - 2] == '}');

    /* backward edges: one per (op needing a gradient, distinct source receiving one) */
    char *b = dot_text(g, TG_DOT_BACKWARD | TG_DOT_LEFT_RIGHT);
    int bwd = 0;
    for (int64_t i = 0; i < n; i++) {
        tg_tensor *t = tg_graph_node(g, i);
        if (!tg_tensor_requires_grad(t))
            continue;
        for (int k = 0; k < tg_tensor_n_srcs(t); k++) {
            bool dup = false;
            for (int m = 0; m < k; m++)
                dup = dup || tg_tensor_src(t, m) == tg_tensor_src(t, k);
            if (!dup && tg_tensor_requires_grad(tg_tensor_src(t, k)))
                bwd++;
        }
    }
    ck_assert_int_gt(bwd, 10);
    ck_assert_int_eq(count(b, "[style=dashed, color=\"#c0392b\", constraint=false]"), bwd);
    ck_assert_int_eq(count(b, " -> "), edges + bwd);
    ck_assert_int_eq(count(b, "rankdir=LR;"), 1);
    free(b);

    /* the file is the same text, and dot draws it */
    char p[512];
    ck_assert_int_eq(tg_graph_write_dot(g, tu_path(p, sizeof p, dir, "g.dot"), 0), TG_OK);
    char *f = tu_slurp(p, NULL);
    ck_assert_str_eq(f, s);
    free(f);
    free(run_dot("g.dot"));
    ck_assert_int_eq(tg_graph_write_dot(g, tu_path(p, sizeof p, dir, "gb.dot"),
                                        TG_DOT_BACKWARD), TG_OK);
    free(run_dot("gb.dot"));
    free(s);
}
END_TEST

/* Views, constants, custom ops: each kind its style. */
static tg_status id_fwd(tg_custom_call *c)
{
    memcpy(c->output, c->input[0], (size_t)c->output_numel * tg_dtype_size(c->dtype));
    return TG_OK;
}

START_TEST(test_dot_styles)
{
    tg_ctx *ctx = tu_ctx_new();
    tg_tensor *x = tg_input(ctx, TG_F64, TG_DIMS(2, 3), "x");
    tg_tensor *c = tg_const(ctx, TG_F64, TG_DIMS(6), "c");
    tg_custom_def d = {.name = "ident", .out_rank = TG_CUSTOM_SAME_SHAPE, .forward_f64 = id_fwd};
    tg_tensor *y = tg_add(ctx, tg_reshape(ctx, tg_custom_op(ctx, &d, 1, &x), TG_DIMS(6)), c);
    tg_graph *g = tg_graph_new(ctx, &y, 1);
    ck_assert_msg(g != NULL, "%s", tg_ctx_message(ctx));
    char *s = dot_text(g, TG_DOT_BACKWARD);
    ck_assert_ptr_nonnull(strstr(s, "\"input\\nx\\n(2, 3) f64\", shape=box, style=filled, "
                                    "fillcolor=\"#d4e1f5\"];"));
    ck_assert_ptr_nonnull(strstr(s, "\"const\\nc\\n(6) f64\", shape=box, "
                                    "style=\"filled,dashed\""));
    ck_assert_ptr_nonnull(strstr(s, "\"ident\\nident"));
    ck_assert_ptr_nonnull(strstr(s, "style=filled, fillcolor=\"#fff2b3\""));
    ck_assert_ptr_nonnull(strstr(s, "\"reshape\\n"));
    ck_assert_ptr_nonnull(strstr(s, "(6) f64\", style=dashed]"));
    ck_assert_int_eq(count(s, "constraint=false"), 0); /* nothing needs a gradient */
    free(s);
    char p[512];
    ck_assert_int_eq(tg_graph_write_dot(g, tu_path(p, sizeof p, dir, "s.dot"), 0), TG_OK);
    free(run_dot("s.dot"));
}
END_TEST

/* A user can name a tensor anything: the file stays valid and shows the bytes. */
START_TEST(test_dot_hostile_names)
{
    static const struct {
        const char *name, *dot; /* the name, and how the DOT text must show it */
    } cases[] = {
        {"quote\"d", "quote\\\"d"},
        {"back\\slash", "back\\\\slash"},
        {"new\nline", "new\\\\x0aline"},
        {"tab\tcr\r", "tab\\\\x09cr\\\\x0d"},
        {"ctl\x01" "del\x7f", "ctl\\\\x01del\\\\x7f"},
        {"bad\xff", "bad\\\\xff"},
        {"lone\xc3(", "lone\\\\xc3("},
        {"c1\xc2\x85", "c1\\\\xc2\\\\x85"},
        {"overlong\xc0\xaf", "overlong\\\\xc0\\\\xaf"},
        {"surrogate\xed\xa0\x80", "surrogate\\\\xed\\\\xa0\\\\x80"},
        {"cut\xe2\x82", "cut\\\\xe2\\\\x82"},
        {"esc\\N\\G\\l", "esc\\\\N\\\\G\\\\l"},
        {"}];\n n0 -> n1 [label=\"", "}];\\\\x0a n0 -> n1 [label=\\\""},
        {"<b>html</b>&amp;", "<b>html</b>&amp;"},
        {"caf\xc3\xa9 \xe2\x88\x91 \xf0\x9f\x98\x80", "caf\xc3\xa9 \xe2\x88\x91 \xf0\x9f\x98\x80"},
        {"", "\\n\\n(1) f64"},
    };
    int n = (int)(sizeof cases / sizeof cases[0]);
    tg_ctx *ctx = tu_ctx_new();
    tg_tensor *acc = NULL;
    for (int i = 0; i < n; i++) {
        tg_tensor *t = tg_input(ctx, TG_F64, TG_DIMS(1), "t");
        ck_assert_int_eq(tg_tensor_set_name(t, cases[i].name), TG_OK);
        acc = acc ? tg_add(ctx, acc, t) : t;
    }
    tg_tensor_set_name(acc, "sum\"\n");
    tg_graph *g = tg_graph_new(ctx, &acc, 1);
    ck_assert_msg(g != NULL, "%s", tg_ctx_message(ctx));
    char *s = dot_text(g, 0);
    for (int i = 0; i < n; i++)
        ck_assert_msg(strstr(s, cases[i].dot) != NULL, "case %d: '%s' not in\n%s", i,
                      cases[i].dot, s);
    ck_assert_ptr_nonnull(strstr(s, "sum\\\"\\\\x0a"));
    /* no raw control byte and no stray quote can reach the file */
    for (const char *p = s; *p; p++)
        ck_assert_msg((unsigned char)*p >= 0x20 || *p == '\n', "raw byte 0x%02x in the DOT text",
                      (unsigned char)*p);
    /* one line each: comment, header, 2 defaults, 2n - 1 nodes, 2 (n - 1) edges, the brace */
    ck_assert_int_eq(count(s, "\n"), 4 + (2 * n - 1) + 2 * (n - 1) + 1);
    char p[512];
    ck_assert_int_eq(tg_graph_write_dot(g, tu_path(p, sizeof p, dir, "h.dot"), 0), TG_OK);
    char *svg = run_dot("h.dot");
    if (svg) { /* dot shows the escapes as text */
        ck_assert_msg(strstr(svg, "new\\x0aline") != NULL, "%s", svg);
        ck_assert_ptr_nonnull(strstr(svg, "bad\\xff"));
        ck_assert_ptr_nonnull(strstr(svg, "quote&quot;d"));
        ck_assert_ptr_nonnull(strstr(svg, "back\\slash"));
        ck_assert_ptr_nonnull(strstr(svg, "caf\xc3\xa9"));
        free(svg);
    }
    free(s);
}
END_TEST

START_TEST(test_dot_errors)
{
    tg_ctx *ctx = tu_ctx_new();
    tg_tensor *x = tu_in(ctx, TG_F64, TG_DIMS(2), "x", NULL);
    tg_tensor *y = tg_scale(ctx, x, 2);
    tg_graph *g = tg_graph_new(ctx, &y, 1);
    char p[512];
    ck_assert_int_eq(tg_graph_write_dot(NULL, "g.dot", 0), TG_ERR_ARG);
    ck_assert_int_eq(tg_graph_write_dot(g, NULL, 0), TG_ERR_ARG);
    tu_assert_error(ctx, TG_ERR_ARG, "tg_graph_write_dot: path is NULL");
    tg_ctx_clear_error(ctx);
    ck_assert_int_eq(tg_graph_write_dot(g, "", 0), TG_ERR_ARG);
    tg_ctx_clear_error(ctx);
    ck_assert_int_eq(tg_graph_write_dot(g, tu_path(p, sizeof p, dir, "f.dot"), 1 << 5),
                     TG_ERR_ARG);
    tu_assert_error(ctx, TG_ERR_ARG, "tg_graph_write_dot: unknown flag bits 0x20");
    tg_ctx_clear_error(ctx);
    /* a missing directory, a directory, a device */
    ck_assert_int_eq(tg_graph_write_dot(g, "/nonexistent-tgrad-dir/g.dot", 0), TG_ERR_IO);
    tu_assert_error(ctx, TG_ERR_IO, "/nonexistent-tgrad-dir/g.dot");
    tg_ctx_clear_error(ctx);
    ck_assert_int_eq(tg_graph_write_dot(g, dir, 0), TG_ERR_IO);
    tu_assert_error(ctx, TG_ERR_IO, "not a regular file");
    tg_ctx_clear_error(ctx);
    char dev[600];
    if (tu_full_device(dir, "dev", dev, sizeof dev, false, "the DOT writer's device case")) {
        ck_assert_int_eq(tg_graph_write_dot(g, dev, 0), TG_ERR_IO);
        tu_assert_error(ctx, TG_ERR_IO, "refusing to replace it");
        tg_ctx_clear_error(ctx);
    }
    /* the stream writer: NULL, and a sink that fails */
    ck_assert_int_eq(tg_graph_write_dot_to(g, NULL, 0), TG_ERR_ARG);
    tg_ctx_clear_error(ctx);
    membuf b = {.fail_at = 50};
    tg_writer w = {mem_write, &b};
    ck_assert_int_eq(tg_graph_write_dot_to(g, &w, 0), TG_ERR_IO);
    tu_assert_error(ctx, TG_ERR_IO, "tg_graph_write_dot_to: cannot write the graph:");
    tg_ctx_clear_error(ctx);
    free(b.p);
}
END_TEST

/* A full disk at any byte: an error, the old file intact, no temporary left. */
START_TEST(test_dot_full_disk)
{
    tg_ctx *ctx = tu_ctx_new();
    tg_graph *g;
    mha_graph(ctx, &g);
    char p[512];
    tu_path(p, sizeof p, dir, "g.dot");
    tu_write_file(dir, "g.dot", "old contents\n");
    char *full = dot_text(g, TG_DOT_BACKWARD);
    size_t len = strlen(full);
    ck_assert_uint_gt(len, 1000);
    uint64_t at[] = {0, 1, 100, len / 2, len - 1};
    for (size_t i = 0; i < sizeof at / sizeof at[0]; i++) {
        tg_write_opts o = {.inject_write_failure = true, .fail_after_bytes = at[i],
                           .no_fsync = true};
        ck_assert_int_eq(tg_graph_write_dot_opts(g, p, TG_DOT_BACKWARD, &o), TG_ERR_IO);
        tu_assert_error(ctx, TG_ERR_IO, "g.dot");
        tg_ctx_clear_error(ctx);
        char *now = tu_slurp(p, NULL);
        ck_assert_str_eq(now, "old contents\n");
        free(now);
        DIR *d = opendir(dir);
        int files = 0;
        for (struct dirent *e = readdir(d); e; e = readdir(d))
            files += e->d_name[0] != '.';
        closedir(d);
        ck_assert_int_eq(files, 1); /* g.dot only: the temporary is gone */
    }
    ck_assert_int_eq(tg_graph_write_dot_opts(g, p, TG_DOT_BACKWARD, NULL), TG_OK);
    char *now = tu_slurp(p, NULL);
    ck_assert_str_eq(now, full);
    free(now);
    free(full);
}
END_TEST

/* Out of memory while writing: TG_ERR_NOMEM, nothing kept. */
START_TEST(test_dot_out_of_memory)
{
    for (long k = 0;; k++) {
        tu_failing_alloc st = {.budget = -1};
        tg_allocator al = tu_failing_allocator(&st);
        tg_ctx *ctx = tg_ctx_new_with(&al);
        tg_tensor *x = tg_input(ctx, TG_F32, TG_DIMS(2), "x");
        tg_tensor *y = tg_relu(ctx, x);
        tg_graph *g = tg_graph_new(ctx, &y, 1);
        ck_assert_ptr_nonnull(g);
        size_t before = tg_ctx_bytes(ctx);
        st.budget = st.n_alloc + k;
        membuf b = {0};
        tg_writer w = {mem_write, &b};
        tg_status s = tg_graph_write_dot_to(g, &w, 0);
        free(b.p);
        ck_assert_uint_eq(tg_ctx_bytes(ctx), before);
        tg_ctx_free(ctx);
        ck_assert_int_eq(st.n_alloc, st.n_free);
        if (s == TG_OK)
            break;
        ck_assert_int_eq(s, TG_ERR_NOMEM);
        ck_assert_int_lt(k, 100);
    }
}
END_TEST

/* ---- tg_set_requires_grad once an op reads the tensor -------------------- */
START_TEST(test_requires_grad_after_use_refused)
{
    tg_ctx *ctx = tu_ctx_new();
    tg_tensor *x = tg_input(ctx, TG_F64, TG_DIMS(3), "x");
    tg_tensor *y = tg_sum_all(ctx, tg_scale(ctx, x, 2));
    /* Before the fix this was accepted and backward then gave x a zero gradient. */
    ck_assert_int_eq(tg_set_requires_grad(x, true), TG_ERR_STATE);
    tu_assert_error(ctx, TG_ERR_STATE, "tg_set_requires_grad: input 'x' is already read by an "
                                       "op; call it before building ops on 'x'");
    ck_assert(!tg_tensor_requires_grad(x));
    /* a build error: it sticks until cleared */
    ck_assert_ptr_null(tg_scale(ctx, x, 3));
    tg_ctx_clear_error(ctx);
    /* the value it already has is fine */
    ck_assert_int_eq(tg_set_requires_grad(x, false), TG_OK);
    ck_assert_int_eq(tg_ctx_status(ctx), TG_OK);
    /* a graph over y works (no gradient to ask for) */
    tg_graph *g = tg_graph_new(ctx, &y, 1);
    ck_assert_ptr_nonnull(g);
    ck_assert_int_eq(tg_graph_forward(g), TG_OK);

    /* the other way round too: stop asking after an op was built */
    tg_tensor *z = tg_input(ctx, TG_F64, TG_DIMS(2), "z");
    ck_assert_int_eq(tg_set_requires_grad(z, true), TG_OK);
    tg_tensor *r = tg_reshape(ctx, z, TG_DIMS(2, 1)); /* a view reads it too */
    ck_assert_ptr_nonnull(r);
    ck_assert_int_eq(tg_set_requires_grad(z, false), TG_ERR_STATE);
    tg_ctx_clear_error(ctx);
    ck_assert(tg_tensor_requires_grad(z));
    ck_assert_int_eq(tg_set_requires_grad(z, true), TG_OK);

    /* parameters and constants as before */
    tg_tensor *w = tg_param(ctx, TG_F64, TG_DIMS(2), "w");
    ck_assert_ptr_nonnull(tg_relu(ctx, w));
    ck_assert_int_eq(tg_set_requires_grad(w, true), TG_OK);
    ck_assert_int_eq(tg_set_requires_grad(w, false), TG_ERR_ARG);
    tg_ctx_clear_error(ctx);
}
END_TEST

/* Set before any op reads it: the gradient flows. */
START_TEST(test_requires_grad_before_use)
{
    tg_ctx *ctx = tu_ctx_new();
    tg_tensor *x = tg_input(ctx, TG_F64, TG_DIMS(3), "x");
    ck_assert_int_eq(tg_set_requires_grad(x, true), TG_OK);
    ck_assert_int_eq(tg_set_requires_grad(x, false), TG_OK); /* unused: free to change */
    ck_assert_int_eq(tg_set_requires_grad(x, true), TG_OK);
    tg_tensor *y = tg_sum_all(ctx, tg_scale(ctx, x, 2));
    tg_graph *g = tu_fwd(ctx, y);
    tu_bwd(ctx, g, y, NULL);
    EXPECT_GRAD(x, 0, 2, 2, 2);
}
END_TEST


/* tg_grad and tg_jvp through flash attention build its unfused form: every node made for it
 * answers the fused node in tg_tensor_unfused_of() and DOT labels it; the fused node itself,
 * nodes of other rules and a graph without such rules have none. */
START_TEST(test_unfused_form_named)
{
    tg_ctx *ctx = tu_ctx_new();
    int64_t s[3] = {2, 3, 4};
    tg_tensor *q = tg_input(ctx, TG_F64, 3, s, "q"), *u = tg_const(ctx, TG_F64, 3, s, "u");
    tg_set_requires_grad(q, true);
    tg_fill_uniform(q, -1, 1);
    tg_fill_uniform(u, -1, 1);
    tg_tensor *a = tg_flash_attention(ctx, q, q, q, NULL, TG_MASK_ADDITIVE, NULL, true, 0.5);
    ck_assert_int_eq(tg_tensor_set_name(a, "attn"), TG_OK);
    tg_tensor *L = tg_sum_all(ctx, tg_exp(ctx, a)), *g, *t;
    ck_assert_int_eq(tg_grad(ctx, 1, &L, NULL, 1, &q, &g), TG_OK);
    ck_assert_int_eq(tg_jvp(ctx, 1, &q, &u, 1, &a, &t), TG_OK);
    ck_assert_ptr_eq(tg_tensor_unfused_of(g), a);
    ck_assert_ptr_eq(tg_tensor_unfused_of(t), a);
    tg_tensor *outs[2] = {g, t};
    tg_graph *gr = tg_graph_new(ctx, outs, 2);
    int64_t marked = 0;
    for (int64_t i = 0; i < tg_graph_size(gr); i++) {
        const tg_tensor *n = tg_graph_node(gr, i);
        const tg_tensor *f = tg_tensor_unfused_of(n);
        ck_assert(f == NULL || f == a);
        ck_assert(n != a && n != q && n != L ? true : f == NULL);
        marked += f != NULL;
        if (tg_tensor_op_index(n) == tg_op_find("softmax"))
            ck_assert_ptr_eq(f, a); /* the unfused form's softmax */
    }
    ck_assert_int_gt(marked, 10);
    char *dot = dot_text(gr, 0);
    ck_assert_int_eq(count(dot, "unfused: attn"), marked);
    free(dot);
    tg_graph_free(gr);
    tg_graph *plain = tg_graph_new(ctx, &L, 1);
    dot = dot_text(plain, 0);
    ck_assert_ptr_null(strstr(dot, "unfused"));
    free(dot);
    tu_ctx_free(ctx);
}
END_TEST

static Suite *introspect_suite(void)
{
    Suite *s = suite_create("introspect");
    TCase *tc = tu_tcase(s, "accessors", 60);
    tcase_add_test(tc, test_accessors);
    tcase_add_test(tc, test_execution_order);
    tc = tu_tcase(s, "dot", 120);
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_test(tc, test_dot_mha_every_node);
    tcase_add_test(tc, test_auto_names_unique);
    tcase_add_test(tc, test_dot_styles);
    tcase_add_test(tc, test_dot_hostile_names);
    tcase_add_test(tc, test_dot_errors);
    tcase_add_test(tc, test_dot_full_disk);
    tcase_add_test(tc, test_dot_out_of_memory);
    tc = tu_tcase(s, "requires_grad", 60);
    tcase_add_test(tc, test_requires_grad_after_use_refused);
    tcase_add_test(tc, test_requires_grad_before_use);
    tcase_add_test(tc, test_unfused_form_named);
    return s;
}

int main(void) { return tu_run(introspect_suite()); }
