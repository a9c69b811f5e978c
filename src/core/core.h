/*
 * core.h - internal layer 1: context, allocation, errors, tensor and node records.
 *
 * Everything here is private to the library. ops/ (layer 2) include this header; the engine
 * (graph, autodiff, gradcheck) reaches ops only through the registry (src/registry.h).
 */
#ifndef TG_CORE_H
#define TG_CORE_H

#include "tgrad.h"

#include <math.h>
#include <stdarg.h>
#include <string.h>

#ifdef TG_HAVE_OPENMP
#include <omp.h>
#endif

/* The op of a leaf (tg_tensor.op); ops/registry.h numbers the others (TG_OP_*). */
#define TG__OP_LEAF 0

/* Most sources of one op (tg_concat takes up to TG_CONCAT_MAX = TG_MAX_SRC tensors). */
#define TG_MAX_SRC 8

/* Typed per-op parameters (never an untyped blob). Each op uses its own member. */
typedef union tg_op_params {
    struct { bool ta, tb; } matmul;
    struct { int perm[TG_MAX_RANK]; } permute;
    struct { int axis; int64_t start; } narrow;
    struct { double s; } scale;
    struct { int axis; bool all; } reduce; /* sum, mean */
    struct { tg_mask_kind kind; } mask;
    struct { double eps; } layer_norm;
    struct { int act; } dense;                  /* dense_act: TG_ACT_* */
    struct { double p; } dropout;
    struct { int64_t ignore_index; double label_smoothing; } xent; /* label_smoothing in [0, 1] */
    /* more elementwise ops, reductions and losses */
    struct { int axis; } max;                   /* max over one axis (ops/max.c) */
    struct { int axis; } concat;                /* ops/concat.c */
    struct { tg_reduction reduction; } mse;     /* ops/loss.c */
    struct { double scale; } kv_attn;           /* ops/kv_attention.c */
    struct { int64_t n_classes, ignore_index; } one_hot; /* ops/one_hot.c */
    struct { int of, axis; } grad_mask; /* ops/grad_mask.c: of TG_OP_DROPOUT or TG_OP_MAX */
    struct { struct tg__custom *rec; } custom; /* ops/custom.c: the user's definition (also
                                                  y->aux, which owns it) */
} tg_op_params;

struct tg_op_def; /* ops/registry.h */

/* A tensor is a graph node: metadata (dtype, shape, strides, view source, op, sources, typed
 * params, kind, flags). Leaves (params, inputs, constants) own their data; every other buffer
 * (op outputs, values saved for backward, gradients of non-leaves, kernel workspace) belongs to
 * the graph that runs the node, which binds `data`, `grad`, `saved` and `ws` into its planned
 * arena before each kernel call (docs/graph.md). */
struct tg_tensor {
    tg_ctx *ctx;
    uint64_t id;         /* creation number, unique per context */
    tg_dtype dtype;
    tg_kind kind;
    int rank;
    int64_t shape[TG_MAX_RANK];  /* outermost first; unused entries are 1 */
    int64_t stride[TG_MAX_RANK]; /* in elements; row-major contiguous except for views */
    int64_t offset;      /* views: element offset into base's buffer; else 0 */
    tg_tensor *base;     /* views: the non-view tensor whose buffer this views; else NULL */
    int64_t numel;
    bool requires_grad;
    bool auto_name;      /* name was generated ("matmul12"), not given by the user */
    bool keep;           /* tg_keep: data (and grad) stay readable after forward/backward */
    bool consumed;       /* some op reads it (tg_set_requires_grad refuses a change then)... */
    tg_mark consumed_by; /* ...unless a rewind released that op: a mark taken just after the
                            oldest op still reading it was made (tg__consumed) */
    char name[TG_NAME_MAX];

    void *data;          /* leaves only: their values, owned. An op result's memory is in the
                            plan of the graph that last ran it (tg__value) */
    void *grad;          /* leaves only: the accumulated gradient, owned (allocated by
                            tg_graph_new); an op result's: tg__grad_value */

    int op;              /* TG_OP_* (ops/registry.h) or TG__OP_LEAF */
    const struct tg_op_def *def; /* registry entry (or a custom op's definition); NULL: leaf */
    int n_src;
    tg_tensor *src[TG_MAX_SRC];
    tg_op_params p;
    size_t saved_bytes;  /* values forward saves for backward (planned per graph) */
    void *aux;           /* builder metadata owned by the node (never planned), or NULL */

    struct tg_graph *run_graph; /* op results: the graph that last ran it, whose plan holds
                            this tensor's memory (tg__value; its node index there and whether
                            the bytes are still its own are that graph's: src/graph/exec.c),
                            NULL when none; tg__graph_gone once that graph was freed after
                            giving the bytes to other values */
    uint64_t mark;       /* visit stamp used by graph construction */
    const tg_tensor *unfused_of; /* a node of the unfused form that a rule built for this fused
                            node (and the gradient or tangent nodes built from it); NULL */
};

/* ----- allocation: every byte goes through the context allocator and is freed with it ---- */
/* Zeroed, 64-byte aligned, owned by ctx. Records TG_ERR_NOMEM (naming fn) and returns NULL. */
void *tg__alloc(tg_ctx *ctx, size_t size, const char *fn);
/* tg__alloc for a block that belongs to an object other than the newest: owner is
 * TG__OWNER_CTX (the context's own arrays: never released by tg_ctx_rewind) or a tensor's
 * id + 1 (released by a rewind only if that tensor was made after the mark). */
#define TG__OWNER_CTX UINT64_MAX
void *tg__alloc_owned(tg_ctx *ctx, size_t size, const char *fn, uint64_t owner);
/* Change the owner of block p (from tg__alloc*; NULL: no-op). A graph re-planned after a mark
 * gives its new plan to TG__OWNER_CTX: the plan belongs to the graph, which a rewind frees
 * explicitly (tg_graph_free) only if the graph itself was made after the mark. */
void tg__set_owner(void *p, uint64_t owner);
/* Free one block early (optional; everything is freed by tg_ctx_free anyway). */
void tg__free(tg_ctx *ctx, void *p);

/* ----- UTF-8 (utf8.c) -------------------------------------------------------------------
 * tg__utf8_next: decode one code point of s[0..n) into *cp and return its length in bytes, or
 * 0 if s does not start with a valid sequence (strict RFC 3629: no overlong forms, surrogates
 * or values above U+10FFFF) or n is 0. tg__utf8_valid: true if s[0..n) is valid UTF-8; else
 * false and *bad (if not NULL) is the offset of the first invalid byte. NUL bytes are valid
 * UTF-8 here; callers that refuse them check separately. */
size_t tg__utf8_next(const unsigned char *s, size_t n, uint32_t *cp);
bool tg__utf8_valid(const char *s, size_t n, size_t *bad);

/* ----- errors ------------------------------------------------------------------------------
 * Two kinds (include/tgrad.h, "Errors"):
 * - a BUILD error (tg__err: constructors, op builders, module init, tg_graph_new, tg_optim_new,
 *   allocation failures) sticks until tg_ctx_clear_error: later errors never replace it, and
 *   while it is pending every op builder (tg__check_srcs, tg__op_new), module init function,
 *   tg_graph_new and tg_optim_new refuses (returns NULL or the pending status) without
 *   allocating; leaf constructors still work (they hold data: inputs, files being read);
 * - a RUN error (tg__run_err: forward, backward, optimizer step, data copies; and anything a
 *   public file call records, tg__err included: see tg__io_enter) describes the failing call
 *   only: it never blocks a build, is dropped when the next call that builds or runs begins
 *   (tg__begin), and never replaces a pending build error. */
/* Record a build error as "fn: message" (ignored if a build error is pending; replaces a run
 * error). Returns NULL so builders can `return tg__err(...)`. printf-style. */
void *tg__err(tg_ctx *ctx, tg_status s, const char *fn, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 4, 5)))
#endif
    ;
/* Record a run error (ignored if a build error is pending). Returns NULL. */
void *tg__run_err(tg_ctx *ctx, tg_status s, const char *fn, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 4, 5)))
#endif
    ;
/* Replace the error recorded so far in this I/O call by "fn: <fmt>" (the first error of an
 * I/O call is otherwise kept). */
void tg__err_replace(tg_ctx *ctx, tg_status s, const char *fn, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 4, 5)))
#endif
    ;
/* True while a build error is pending (ctx non-NULL). */
bool tg__build_failed(const tg_ctx *ctx);
/* Start of a call that builds or runs: drop a run error left by an earlier call (a pending
 * build error stays). */
void tg__begin(tg_ctx *ctx);
/* Public I/O calls (safetensors, .npy, parameters, checkpoints, DOT files) report RUN errors:
 * tg__io_enter (at depth 0 it is tg__begin) makes every error recorded until the matching
 * tg__io_leave a run error, the first one of the call kept (tg__err included, so shared
 * helpers and allocation failures never leave a build error behind an I/O call). Calls nest. */
void tg__io_enter(tg_ctx *ctx);
void tg__io_leave(tg_ctx *ctx);
/* A kernel that can fail (a custom op's callback) reports it here: records a run error
 * (tg__run_err) and returns s (TG_ERR_ARG if s is TG_OK), which the kernel returns. */
tg_status tg__kernel_fail(tg_ctx *ctx, tg_status s, const char *fn, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 4, 5)))
#endif
    ;

/* ----- checked size arithmetic --------------------------------------------------------------
 * Every size computed from user values goes through these (no signed overflow, no wrapped
 * allocation sizes). Each returns false on overflow (or a negative operand) and leaves *out
 * unspecified. */
/* Largest element count of a tensor (public TG_MAX_NUMEL): numel * 8 bytes fits in int64. */
#define TG__MAX_NUMEL TG_MAX_NUMEL
static inline bool tg__mul_i64(int64_t a, int64_t b, int64_t *out)
{
    if (a < 0 || b < 0)
        return false;
    if (a != 0 && b > INT64_MAX / a)
        return false;
    *out = a * b;
    return true;
}
static inline bool tg__add_i64(int64_t a, int64_t b, int64_t *out)
{
    if (a < 0 || b < 0 || a > INT64_MAX - b)
        return false;
    *out = a + b;
    return true;
}
static inline bool tg__mul_size(size_t a, size_t b, size_t *out)
{
    if (a != 0 && b > SIZE_MAX / a)
        return false;
    *out = a * b;
    return true;
}
/* Bytes of n elements of es bytes each, for n >= 0 (false if it does not fit in size_t). */
static inline bool tg__bytes(int64_t n, size_t es, size_t *out)
{
    if (n < 0 || (uint64_t)n > (uint64_t)SIZE_MAX)
        return false;
    return tg__mul_size((size_t)n, es, out);
}
/* "(2, 3)" for a tensor's shape, into buf of n bytes. */
const char *tg__shape_str(const tg_tensor *t, char *buf, size_t n);
/* Same for a bare shape. */
const char *tg__dims_str(int rank, const int64_t *shape, char *buf, size_t n);

/* ----- integer values ------------------------------------------------------------------------ */
/* Is v an integer in the i32 range? (The one rule for converting a float into TG_I32: a
 * fraction, NaN, an infinity or a value out of range is refused; tgrad.h, tg_dtype.) */
static inline bool tg__i32_ok(double v)
{
    return v >= -2147483648.0 && v <= 2147483647.0 && v == floor(v);
}
/* Does v keep its meaning as an f32? (The one rule for converting an f64 into TG_F32: a
 * finite value that would round to an infinity, |v| >= 2^128 - 2^103, is refused; NaN and the
 * infinities stay what they are, and small values round (possibly to 0) as usual.) */
#define TG__F32_OVERFLOW 0x1.ffffffp+127
static inline bool tg__f32_ok(double v)
{
    return !(fabs(v) >= TG__F32_OVERFLOW) || isinf(v);
}

/* ----- tensor records (tensor.c) ------------------------------------------------------------
 * A new tensor record of the given kind, shape checked (TG_ERR_SHAPE / TG_ERR_OVERFLOW naming
 * fn), named (name NULL: generated) and, with alloc_data, with its own zeroed data. NULL with
 * the error recorded. Op results are made by tg__op_new (ops/node.c). */
tg_tensor *tg__tensor_new(tg_ctx *ctx, const char *fn, tg_kind kind, tg_dtype dt, int rank,
                         const int64_t *shape, const char *name, bool alloc_data);
/* An input leaf of shape (rows, base's shape after the first) whose data is the first rows
 * of @p base's (a contiguous leaf; 1 <= rows <= base's first dimension): nothing is
 * allocated; the caller keeps base alive and sets the leaf's data to NULL before base's is
 * freed. A graph built for fewer rows reads and writes base's memory in place (the
 * generator's step graphs for fewer live rows). NULL with the error recorded. */
tg_tensor *tg__input_rows(tg_ctx *ctx, tg_tensor *base, int64_t rows, const char *name);
/* Element index in t->data of logical (row-major) element `flat` (strides of a view). */
int64_t tg__elem(const tg_tensor *t, int64_t flat);
/* Row-major strides (elements) of shape; entries past rank are 1. */
void tg__contiguous_strides(int rank, const int64_t *shape, int64_t *stride);
/* True if t's elements are laid out row-major without gaps (size-1 dims ignored). */
bool tg__is_contiguous(const tg_tensor *t);
/* Normalize a possibly negative axis against rank; returns -1 if out of range. */
int tg__axis(int axis, int rank);

/* ----- random numbers ----------------------------------------------------------------------- */
/* splitmix64 (Steele et al. 2014): advances *state and returns the next output. Seeds the
 * context RNG and drives gradcheck's private stream. */
uint64_t tg__splitmix64(uint64_t *state);

/* ----- threads ------------------------------------------------------------------------------ */
int tg__threads(const tg_ctx *ctx);
/* The next draw of the xoshiro256** stream with state s[4] (advances it): tg_rng_u64 on the
 * context's; kernels draw from the stream their call record names. */
uint64_t tg__rng_next(uint64_t *s);
/* Below this many scalar operations a kernel runs on one thread. (Overridable at build time:
 * tests/meson.build compiles the library with TG_PAR_MIN=1 into a thread-invariance test so
 * even tiny shapes take every parallel path.) */
#ifndef TG_PAR_MIN
#define TG_PAR_MIN 32768
#endif
#define TG__PRAGMA(x) _Pragma(#x)
/* Threads for one parallel region doing `work` units, when each thread should have at least
 * `per_thread` units: min(nt, work / per_thread), at least 1. A region costs more than its
 * fork: a worker that has gone to sleep takes tens of microseconds to wake (more when its core
 * is busy with another process) and the region ends only when every worker has, so
 * `per_thread` is worth ~100 us on one core. The TG_PAR_MIN=1 builds use every thread for any
 * work > 1, so the tests take the parallel paths on tiny shapes. */
static inline int tg__threads_for(int nt, double work, double per_thread)
{
    if (nt <= 1 || work <= 1)
        return 1;
    if (TG_PAR_MIN == 1)
        return nt;
    double t = work / per_thread;
    return t >= (double)nt ? nt : t >= 2 ? (int)t : 1;
}
/* GEMM flops worth a thread (~100 us at the ~100 GFLOP/s of one AVX-512 core). */
#define TG_GEMM_FLOPS_PER_THREAD 1e7

/* The region governor (src/core/par.c). A site that opens parallel regions (a TG_PAR_RANGE
 * loop, the GEMM per size class) keeps a record in a governor table (tg__govs below). After a
 * region, the pace of its fastest thread (time per chunk, from its first chunk to running out)
 * times the chunks gives what one thread alone would have taken, and the difference to the
 * team's time is the region's gain (negative when a worker came late or was descheduled
 * holding a chunk: other processes want the cores). While the running mean of a site's gains
 * is negative, the site runs on one thread, without a region: for 1 ms, twice as long after
 * each further losing try (up to 256 ms), then the team tries again. A site whose wins
 * outweigh its losses keeps its threads. Only how many threads run changes, never a result.
 * The TG_PAR_MIN=1 builds never back off (the tests take every parallel path). */
typedef struct tg__par_gov {
    double off_until; /* us (tg__now_us): until then, one thread */
    double backoff;   /* us: the last off period; 0 once the mean gain is positive again */
    double gain;      /* us: running mean of the regions' gains (weight 1/4 for the newest) */
    int judged;       /* regions in the mean since the last off period */
    int threads;      /* threads the site's last run used (1: it backed off) */
    int64_t regions;  /* parallel regions run and measured */
    int64_t serial;   /* runs on one thread because the site backed off */
} tg__par_gov;
double tg__now_us(void);
/* nth, or 1 while the site backs off (g NULL: nth, no governor). */
int tg__gov_threads(tg__par_gov *g, int nth);

/* A governor table: the records of the parallel sites that ran for one owner, one per (site,
 * size class), in the order they first ran. A graph owns one for its kernels (the call record
 * points at it: tg__call.govs), the context one for the library's direct calls (optimizer
 * steps, gradient clipping, a graph's own loops run outside kernels go to the graph's). A site
 * is named by a string literal (__FILE__ ":" line, "gemm"); `node` is the node the table's
 * owner is running (the executor sets it; -1 outside a node), recorded with each use. Lookups
 * and updates happen on the thread that opens the region (never inside one). A full table
 * gives NULL: the site then runs with its threads, ungoverned. */
#define TG__GOV_SLOTS 128
typedef struct tg__gov_slot {
    const char *site; /* NULL: free */
    int cls;          /* size class (the GEMM: products of about 2^cls flops), else 0 */
    int64_t node;     /* the node that used it last (-1: none) */
    tg__par_gov g;
} tg__gov_slot;
typedef struct tg__govs {
    int n;                         /* slots used: slot[0 .. n) */
    int64_t node;                  /* the node running now (-1: none) */
    int16_t ix[2 * TG__GOV_SLOTS]; /* hash of (site, cls) -> slot + 1; 0: empty */
    tg__gov_slot slot[TG__GOV_SLOTS];
} tg__govs;
/* Empties t (node -1). */
void tg__govs_init(tg__govs *t);
/* The record of (site, cls) in t, added if new; NULL when t is NULL or full. */
tg__par_gov *tg__gov_at(tg__govs *t, const char *site, int cls);
/* Entry i (0 .. t->n) of t as the public record; false past the end. */
bool tg__govs_entry(const tg__govs *t, int64_t i, tg_par_site *out);

/* A region's accounting: its start, and per thread (the first TG__ACCT_THREADS) the chunks it
 * ran, when it took its first and when it found none left. Each thread writes its own slot. */
#define TG__ACCT_THREADS 8
typedef struct tg__par_acct {
    double t0;
    int64_t chunks[TG__ACCT_THREADS];
    double first[TG__ACCT_THREADS], done[TG__ACCT_THREADS];
} tg__par_acct;
void tg__acct_init(tg__par_acct *a);
static inline void tg__acct_chunk(tg__par_acct *a, int me)
{
    if (me < TG__ACCT_THREADS && a->chunks[me]++ == 0)
        a->first[me] = tg__now_us();
}
static inline void tg__acct_done(tg__par_acct *a, int me)
{
    if (me < TG__ACCT_THREADS && a->chunks[me] > 0 && a->done[me] == 0)
        a->done[me] = tg__now_us();
}
/* After a region of `chunks` chunks of similar size: updates the site's record (g NULL:
 * nothing). */
void tg__gov_report(tg__par_gov *g, const tg__par_acct *a, int64_t chunks);
#ifdef TG_HAVE_OPENMP
/* A parallel loop over independent outputs. Each iteration must write only its own outputs, so
 * results depend neither on the thread count nor on which thread runs an iteration. The
 * iterations are handed out dynamically in shrinking runs (OpenMP's guided schedule: a thread
 * takes about remaining / threads at a time), so a thread that starts late or is descheduled
 * leaves the rest to the others instead of holding up a fixed half. */
#define TG_OMP_FOR(nt, cond) TG__PRAGMA(omp parallel for schedule(guided) num_threads(nt) if (cond))
/* The same over items of microseconds or more each (attention blocks, one-thread GEMMs, rows
 * of a big matrix), a fixed set given by the shapes: the threads take the items one at a time
 * as they come free, so a thread the OS deschedules holds up only the item it is in. */
#define TG_OMP_FOR_ITEMS(nt, cond)                                                            \
    TG__PRAGMA(omp parallel for schedule(dynamic, 1) num_threads(nt) if (cond))
#else
/* Without OpenMP the loop runs serially; evaluate the arguments so they count as used. */
#define TG_OMP_FOR(nt, cond) (void)(nt); (void)(cond);
#define TG_OMP_FOR_ITEMS(nt, cond) (void)(nt); (void)(cond);
#endif

/* ----- SIMD: one binary for every x86-64 ----------------------------------------------------
 * TG_SIMD_CLONES on a hot function compiles it three times, for x86-64-v4 (AVX-512), x86-64-v3
 * (AVX2 + FMA) and the baseline, and glibc's ifunc resolver picks one from CPUID at load time.
 * The project builds with -ffp-contract=off, so a clone uses FMA only where the code asks for it
 * (fma(), __builtin_fma, intrinsics); plain vectorized multiply/add rounds exactly as the scalar
 * code does, and results do not depend on the clone. Never name a CPU model (arch=haswell,
 * arch=skylake-avx512): those resolvers test the vendor/model, not the features. Under valgrind
 * (no AVX-512) the v3 clone runs. clang (14) has no x86-64-vN resolver (its "arch=" clones test
 * the CPU model), so with clang the clones are named by feature: avx512f (which implies AVX2
 * and FMA there) and avx2 (the code asks for no FMA, so that clone needs none). Two clang 14
 * rules: a cloned function's resolver is a global symbol, so cloned static functions need
 * names unique in the library (ln_fwd_rows, xent_fwd_rows, ...); and a call from another file
 * goes to the wrong symbol, so a cloned function other files call sits behind a plain one
 * (src/core/vec.c). The clang CI stage (tools/check.sh clang) links and runs it all. Other
 * compilers or non-x86 builds get the portable code. */
#if defined(__clang__) && defined(__x86_64__) && defined(__linux__)
#define TG_SIMD_CLONES __attribute__((target_clones("avx512f", "avx2", "default")))
#elif defined(__GNUC__) && defined(__x86_64__) && defined(__linux__)
#define TG_SIMD_CLONES __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#else
#define TG_SIMD_CLONES
#endif

/* ----- dtype variants: template headers ------------------------------------------------------
 * A file's f32 and f64 kernels are written once, in a template header (ops/<file>_kernel.h)
 * that the file includes once per dtype with T (float / double) and SUF (f32 / f64) defined;
 * the header names its functions through TG__CAT: TG__CAT(fwd, SUF) is fwd_f32 or fwd_f64 (the
 * arguments are macro-expanded before pasting). docs/kernels.md, "Kernel files". */
#define TG__CAT_(a, b) a##_##b
#define TG__CAT(a, b) TG__CAT_(a, b)

/* ----- bf16 and UTF-8 helpers --------------------------------------------------------------
 * f32 -> bf16 bits (nearest, ties to even; NaN keeps its sign and top payload, made quiet) and
 * back (exact: bf16 is the top half of a binary32). */
static inline uint16_t tg__bf16_from_f32(float x)
{
    uint32_t u;
    memcpy(&u, &x, sizeof u);
    if ((u & 0x7fffffffu) > 0x7f800000u)
        return (uint16_t)((u >> 16) | 0x40u);
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}
static inline float tg__bf16_to_f32(uint16_t h)
{
    uint32_t bits = (uint32_t)h << 16;
    float f;
    memcpy(&f, &bits, sizeof f);
    return f;
}
/* x rounded to bf16 (nearest, ties to even; NaN stays NaN, made quiet), as an f32: the value
 * tg__bf16_to_f32(tg__bf16_from_f32(x)) in a form loops vectorize. */
static inline float tg__bf16_round(float x)
{
    uint32_t u;
    memcpy(&u, &x, sizeof u);
    uint32_t r = (u + 0x7fffu + ((u >> 16) & 1u)) & 0xffff0000u;
    uint32_t q = (u | 0x00400000u) & 0xffff0000u;
    u = (u & 0x7fffffffu) > 0x7f800000u ? q : r;
    memcpy(&x, &u, sizeof x);
    return x;
}
/* Length of the valid UTF-8 sequence starting at s[0] (of at most n bytes), or 0 if invalid
 * (overlong, surrogate, > U+10FFFF, truncated): tg__utf8_next without the code point. */
size_t tg__utf8_len(const unsigned char *s, size_t n);

/* Index of the calling thread in the innermost parallel region (0 outside one). */
#ifdef TG_HAVE_OPENMP
#define TG_THREAD_NUM() omp_get_thread_num()
#else
#define TG_THREAD_NUM() 0
#endif

/* ----- context record (for src/ files that need it) ---------------------------------------- */
struct tg_block; /* allocation list node */
struct tg_ctx {
    tg_allocator al;
    struct tg_block *blocks; /* doubly linked list of live allocations */
    size_t bytes;
    tg_status status;
    bool sticky;             /* status is a build error (see "errors" above) */
    int io_depth;            /* > 0 inside a public I/O call (tg__io_enter) */
    char msg[512];
    size_t mem_limit;        /* 0: none; else tg__alloc fails beyond this many bytes */
    int n_threads;
    uint64_t rng[4];         /* xoshiro256** state (tg__rng_next) */
    bool training;
    bool unfused;            /* tg_ctx_set_fusion(ctx, false) */
    uint64_t next_id;
    uint64_t mark_epoch;
    tg_tensor **params;      /* every parameter, in creation order */
    int64_t n_params, cap_params;
    uint64_t alloc_seq;      /* number of the next allocation (tg_ctx_mark); a rewind sets it
                                back to the mark's */
    /* Rewind history (ctx.c, tg_ctx_rewind): a step function giving, for each allocation
     * number, the era (count of rewinds) in which it was last handed out: eras[k] covers the
     * numbers from eras[k].seq up to eras[k + 1].seq; both fields increase along the array.
     * Points at eras_inline, or at a block the context owns once more are needed. */
    uint64_t n_rewinds;
    struct tg__era { uint64_t seq, gen; } *eras, eras_inline[8];
    int64_t n_eras, cap_eras;
    tg__govs govs;           /* the governors of the library's direct calls (optimizer
                                steps; tg_ctx_par_site) */
    tg_graph *graphs;        /* live graphs, newest first (the graph layer's list) */
    tg_arena *arenas;        /* live shared arenas, newest first (likewise) */
    /* Set by the graph layer when it makes its first graph or arena: frees the graphs, then
     * the shared arenas, made at or after allocation number seq (tg_ctx_rewind). Core never
     * calls upward otherwise. */
    void (*forget_after)(tg_ctx *ctx, uint64_t seq);
};

/* Is @p m a mark of ctx that no rewind has gone past (tg_ctx_rewind would accept it)? */
bool tg__mark_valid(const tg_ctx *ctx, tg_mark m);
/* Does an op (not released by a rewind) read t? */
static inline bool tg__consumed(const tg_tensor *t)
{
    return t->consumed && tg__mark_valid(t->ctx, t->consumed_by);
}


#endif /* TG_CORE_H */
