/*
 * dot.c - layer 3: a graph as Graphviz DOT text (the language: https://graphviz.org/doc/info/lang.html;
 * label escapes: https://graphviz.org/docs/attr-types/escString/).
 *
 *   digraph tgrad {
 *     n0 [label="param\nweight\n(5, 3) f64", shape=box, style=filled, fillcolor="#cfe8d5"];
 *     n2 [label="matmul\nmatmul7\n(4, 5) f64"];
 *     n0 -> n2;                                     source -> consumer, once per operand
 *     n2 -> n0 [style=dashed, color="#c0392b", constraint=false];   TG_DOT_BACKWARD
 *   }
 *
 * Nodes are named n<i> after their position in tg_graph_node() (execution order), so node
 * identifiers never contain user text; every user string (tensor names, op names) goes
 * through esc(), which keeps valid UTF-8 and writes '"' and '\' escaped and control
 * characters and invalid bytes as the visible text \xNN, so any name gives a file dot
 * accepts. Reads the graph only through its public accessors.
 */
#include "dot.h"

#include <stdio.h>
#include <stdlib.h>

tg_ctx *tg__dot_ctx(const tg_graph *g)
{
    return tg_tensor_ctx(tg_graph_node(g, 0));
}

tg_status tg__dot_check(const tg_graph *g, int flags, const char *fn)
{
    tg_ctx *ctx = tg__dot_ctx(g);
    if (!ctx)
        return TG_ERR_ARG;
    if (flags & ~TG__DOT_ALL_FLAGS) {
        tg__err(ctx, TG_ERR_ARG, fn, "unknown flag bits 0x%x (known: TG_DOT_BACKWARD 0x%x, "
                "TG_DOT_LEFT_RIGHT 0x%x)", (unsigned)(flags & ~TG__DOT_ALL_FLAGS),
                (unsigned)TG_DOT_BACKWARD, (unsigned)TG_DOT_LEFT_RIGHT);
        return TG_ERR_ARG;
    }
    return TG_OK;
}

/* ---- buffered output -------------------------------------------------------------------- */
typedef struct {
    tg__dot_put_fn put;
    void *user;
    int err; /* first errno of the sink; 0 while fine */
    size_t n;
    char buf[4096];
} out_t;

static void flush(out_t *o)
{
    if (o->n && !o->err)
        o->err = o->put(o->user, o->buf, o->n);
    o->n = 0;
}

static void put(out_t *o, const char *s, size_t n)
{
    while (n && !o->err) {
        if (o->n == sizeof o->buf)
            flush(o);
        size_t k = sizeof o->buf - o->n;
        if (k > n)
            k = n;
        memcpy(o->buf + o->n, s, k);
        o->n += k;
        s += k;
        n -= k;
    }
}

static void puts_(out_t *o, const char *s) { put(o, s, strlen(s)); }

static void printf_(out_t *o, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;
static void printf_(out_t *o, const char *fmt, ...)
{
    char b[256];
    va_list ap;
    va_start(ap, fmt);
    int k = vsnprintf(b, sizeof b, fmt, ap);
    va_end(ap);
    if (k > 0)
        put(o, b, (size_t)k < sizeof b ? (size_t)k : sizeof b - 1);
}

/* Length of the valid UTF-8 sequence at s (n bytes left), 0 if invalid: no overlong forms,
 * surrogates or code points above U+10FFFF (RFC 3629). */
static size_t utf8_len(const unsigned char *s, size_t n)
{
    unsigned c = s[0];
    size_t len;
    unsigned min;
    if (c < 0x80)
        return 1;
    if (c >= 0xc2 && c <= 0xdf) {
        len = 2;
        min = 0x80;
    } else if (c >= 0xe0 && c <= 0xef) {
        len = 3;
        min = 0x800;
    } else if (c >= 0xf0 && c <= 0xf4) {
        len = 4;
        min = 0x10000;
    } else {
        return 0;
    }
    if (n < len)
        return 0;
    unsigned cp = c & (0x7fu >> len);
    for (size_t i = 1; i < len; i++) {
        if ((s[i] & 0xc0) != 0x80)
            return 0;
        cp = cp << 6 | (s[i] & 0x3fu);
    }
    if (cp < min || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff))
        return 0;
    return len;
}

/* User text inside a DOT double-quoted string (escString): '"' and '\' escaped; C0 and C1
 * control characters, DEL and bytes that are not UTF-8 written as the visible text \xNN (a
 * literal backslash, so dot draws it and never reads it as an escape). */
static void esc(out_t *o, const char *text)
{
    const unsigned char *s = (const unsigned char *)text;
    size_t n = strlen(text);
    for (size_t i = 0; i < n;) {
        unsigned c = s[i];
        size_t l = utf8_len(s + i, n - i);
        bool c1 = l == 2 && c == 0xc2 && s[i + 1] < 0xa0; /* U+0080..U+009F */
        if (l == 0 || c < 0x20 || c == 0x7f || c1) {
            size_t k = l ? l : 1;
            for (size_t j = 0; j < k; j++)
                printf_(o, "\\\\x%02x", s[i + j]);
            i += k;
        } else if (c == '"' || c == '\\') {
            char e[2] = {'\\', (char)c};
            put(o, e, 2);
            i++;
        } else {
            put(o, (const char *)s + i, l);
            i += l;
        }
    }
}

/* ---- the graph ---------------------------------------------------------------------------- */
typedef struct {
    uintptr_t key;
    int64_t index;
} node_ref;

static int cmp_ref(const void *a, const void *b)
{
    uintptr_t x = ((const node_ref *)a)->key, y = ((const node_ref *)b)->key;
    return x < y ? -1 : x > y;
}

/* Position of t in the graph (binary search of the sorted refs), -1 if absent. */
static int64_t find(const node_ref *refs, int64_t n, const tg_tensor *t)
{
    uintptr_t k = (uintptr_t)t;
    int64_t lo = 0, hi = n - 1;
    while (lo <= hi) {
        int64_t mid = lo + (hi - lo) / 2;
        if (refs[mid].key == k)
            return refs[mid].index;
        if (refs[mid].key < k)
            lo = mid + 1;
        else
            hi = mid - 1;
    }
    return -1;
}

/* Node attributes after the label: styled by kind. */
static const char *style_of(const tg_tensor *t, int custom_op)
{
    switch (tg_tensor_kind(t)) {
    case TG_KIND_PARAM:
        return "shape=box, style=filled, fillcolor=\"#cfe8d5\"";
    case TG_KIND_INPUT:
        return tg_tensor_requires_grad(t) ? "shape=box, style=filled, fillcolor=\"#d4e1f5\", "
                                            "penwidth=2"
                                          : "shape=box, style=filled, fillcolor=\"#d4e1f5\"";
    case TG_KIND_CONST:
        return "shape=box, style=\"filled,dashed\", fillcolor=\"#e8e8e8\"";
    default:
        break;
    }
    if (tg_tensor_op_index(t) == custom_op)
        return "style=filled, fillcolor=\"#fff2b3\"";
    if (tg_tensor_unfused_of(t))
        return tg_tensor_is_view(t) ? "style=dashed, color=\"#8e44ad\"" : "color=\"#8e44ad\"";
    return tg_tensor_is_view(t) ? "style=dashed" : "";
}

/* One line per node: op, name, shape and dtype, and its style. */
static void emit_nodes(out_t *o, const tg_graph *g, int64_t n, int custom_op)
{
    for (int64_t i = 0; i < n && !o->err; i++) {
        const tg_tensor *t = tg_graph_node(g, i);
        char sh[200];
        printf_(o, "  n%lld [label=\"", (long long)i);
        esc(o, tg_tensor_op_name(t));
        puts_(o, "\\n");
        esc(o, tg_tensor_name(t));
        printf_(o, "\\n%s %s", tg_tensor_shape_str(t, sh, sizeof sh),
                tg_dtype_str(tg_tensor_dtype(t)));
        const tg_tensor *f = tg_tensor_unfused_of(t);
        if (f) { /* a node of a fused op's unfused form (a rule as ops built it) */
            puts_(o, "\\nunfused: ");
            esc(o, tg_tensor_name(f));
        }
        puts_(o, "\"");
        const char *st = style_of(t, custom_op);
        if (st[0])
            printf_(o, ", %s", st);
        puts_(o, "];\n");
    }
}

/* The backward edges: each op to the distinct sources its rule sends a gradient to. */
static void emit_backward_edges(out_t *o, const tg_graph *g, const node_ref *refs, int64_t n)
{
    puts_(o, "  // backward: each op to the sources its rule sends a gradient to\n");
    for (int64_t i = 0; i < n && !o->err; i++) {
        const tg_tensor *t = tg_graph_node(g, i);
        if (tg_tensor_n_srcs(t) == 0 || !tg_tensor_requires_grad(t))
            continue;
        for (int k = 0; k < tg_tensor_n_srcs(t); k++) {
            const tg_tensor *s = tg_tensor_src(t, k);
            bool dup = false; /* one edge per distinct source */
            for (int m = 0; m < k; m++)
                dup = dup || tg_tensor_src(t, m) == s;
            int64_t j = find(refs, n, s);
            if (dup || j < 0 || !tg_tensor_requires_grad(s))
                continue;
            printf_(o, "  n%lld -> n%lld [style=dashed, color=\"#c0392b\", "
                    "constraint=false];\n", (long long)i, (long long)j);
        }
    }
}

tg_status tg__dot_emit(const tg_graph *g, int flags, const char *fn, tg__dot_put_fn putf,
                       void *user, int *put_errno)
{
    tg_ctx *ctx = tg__dot_ctx(g);
    int64_t n = tg_graph_size(g);
    *put_errno = 0;
    size_t bytes;
    if (!tg__bytes(n, sizeof(node_ref), &bytes)) {
        tg__err(ctx, TG_ERR_NOMEM, fn, "%lld nodes: index too large", (long long)n);
        return TG_ERR_NOMEM;
    }
    node_ref *refs = tg__alloc(ctx, bytes ? bytes : 1, fn);
    out_t *o = tg__alloc(ctx, sizeof *o, fn);
    if (!refs || !o) {
        tg__free(ctx, refs);
        tg__free(ctx, o);
        return TG_ERR_NOMEM;
    }
    for (int64_t i = 0; i < n; i++)
        refs[i] = (node_ref){(uintptr_t)tg_graph_node(g, i), i};
    qsort(refs, (size_t)n, sizeof *refs, cmp_ref);
    o->put = putf;
    o->user = user;

    puts_(o, "// tgrad graph: nodes in execution order (n0 first); edges from source to "
             "consumer\n");
    puts_(o, "digraph tgrad {\n");
    if (flags & TG_DOT_LEFT_RIGHT)
        puts_(o, "  rankdir=LR;\n");
    puts_(o, "  node [fontname=\"Helvetica\", fontsize=10];\n"
             "  edge [arrowsize=0.7];\n");
    emit_nodes(o, g, n, tg_op_find("custom"));
    for (int64_t i = 0; i < n && !o->err; i++) {
        const tg_tensor *t = tg_graph_node(g, i);
        for (int k = 0; k < tg_tensor_n_srcs(t); k++) {
            int64_t j = find(refs, n, tg_tensor_src(t, k));
            if (j >= 0)
                printf_(o, "  n%lld -> n%lld;\n", (long long)j, (long long)i);
        }
    }
    if (flags & TG_DOT_BACKWARD)
        emit_backward_edges(o, g, refs, n);
    puts_(o, "}\n");
    flush(o);
    int e = o->err;
    tg__free(ctx, o);
    tg__free(ctx, refs);
    if (e) {
        *put_errno = e;
        return TG_ERR_IO;
    }
    return TG_OK;
}
