/**
 * @file tgrad.h
 * @brief tgrad public API: status codes, context, tensors, op builders, static graphs,
 *        reverse-mode autodiff and numerical gradient checking.
 *
 * Conventions used throughout:
 * - Shapes are written outermost first (PyTorch order), row-major and contiguous.
 *   Letters: B batch, T sequence (seq_len), D d_model, H n_heads, Dh = D/H, F d_ff.
 * - Every op supports both float dtypes, ::TG_F32 (speed) and ::TG_F64 (exact checking); all
 *   float operands of one op share one dtype. ::TG_I32 tensors hold token ids, targets and
 *   masks; only tg_embedding() (ids) and tg_cross_entropy() (targets) take them (see ::tg_dtype).
 * - Op builders only *record* an op and return its output tensor; nothing is computed until a
 *   ::tg_graph containing it runs forward.  A builder that fails returns NULL and records the
 *   **first** error on the context (status plus a message such as
 *   `tg_matmul: inner dims differ: a is (2, 3), b is (4, 5)`); a builder given a NULL input
 *   returns NULL without overwriting the recorded error, so calls chain safely and are checked
 *   once: `tg_add(ctx, tg_matmul(ctx, x, w, false, false), b)`.
 * - **Errors come in two kinds.** A *build error* (tensor constructors, op builders, module
 *   init functions, tg_graph_new(), tg_optim_new(), allocation failures) **sticks** until
 *   tg_ctx_clear_error(): later errors never replace it, and while it is pending every op
 *   builder, module init function (and the module builders of tgrad_nn.h), tg_graph_new() and
 *   tg_optim_new() returns NULL (or the pending status) at once without allocating, so a
 *   failed build stops at its first failure. Leaf constructors (tg_param(), tg_input(),
 *   tg_const()) still work: they only hold data (inputs to fill, files being read). A
 *   *run-time error* (tg_graph_forward(), tg_graph_backward(), tg_optim_step(),
 *   tg_clip_grad_norm(), tg_gradcheck(), the tensor data copies, and every file call: the
 *   safetensors and .npy readers and writers, tg_params_load() / tg_params_save(),
 *   tg_checkpoint_save() / tg_checkpoint_restore(), tg_graph_write_dot(); so a missing file or
 *   a full disk never blocks later builds) is reported by the failing call's status, and
 *   tg_ctx_status() / tg_ctx_message() describe it right after that call; it does **not**
 *   stick: it never blocks a later build, and it is dropped when the next call that builds or
 *   runs begins (or by tg_ctx_clear_error()). A run-time error never replaces a pending build
 *   error.
 * - The context owns all memory; tensors and graphs are borrowed handles that stay valid until
 *   tg_ctx_free().  Library code never aborts, exits or prints on user error.
 * - Broadcasting (add, mul, add_mask, matmul batch dims) is NumPy/PyTorch style: shapes are
 *   aligned on the right; each pair of dims must be equal or one of them 1; missing leading dims
 *   count as 1.
 * - Determinism: every result is bitwise identical for any thread count (each output element is
 *   computed by one thread in a fixed order; no reductions across threads on float data).
 */
#ifndef TGRAD_H
#define TGRAD_H

/** @name Version (semantic versioning; the same as `version` in meson.build, checked by a test) */
/**@{*/
#define TGRAD_VERSION_MAJOR 0
#define TGRAD_VERSION_MINOR 1
#define TGRAD_VERSION_PATCH 0
#define TGRAD_VERSION_STRING "0.1.0"
/**@}*/

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(TG_BUILDING_LIBRARY) && defined(__GNUC__)
#define TG_API __attribute__((visibility("default")))
#else
#define TG_API
#endif

/** Largest tensor rank supported. */
#define TG_MAX_RANK 6
/** Longest tensor name, including the terminating NUL. */
#define TG_NAME_MAX 128

/**
 * Convenience for passing a literal shape: `tg_input(ctx, TG_F32, TG_DIMS(2, 3), "x")`
 * expands to `rank, shape` arguments. (For rank 0 pass `0, NULL`.)
 */
#define TG_DIMS(...)                                                                     \
    (int)(sizeof((const int64_t[]){__VA_ARGS__}) / sizeof(int64_t)), (const int64_t[]) { \
        __VA_ARGS__                                                                      \
    }

/* ------------------------------------------------------------------------------------------ */
/** @name Status codes */
/**@{*/
/** Result of every call that does work. tg_status_str() names a code. */
typedef enum tg_status {
    TG_OK = 0,              /**< success */
    TG_ERR_ARG,             /**< invalid argument (NULL where not allowed, value out of range) */
    TG_ERR_SHAPE,           /**< incompatible or invalid shapes */
    TG_ERR_DTYPE,           /**< unsupported dtype or operands of different dtypes */
    TG_ERR_AXIS,            /**< axis out of range */
    TG_ERR_NOMEM,           /**< the allocator returned NULL */
    TG_ERR_STATE,           /**< call made in the wrong state (e.g. backward before forward) */
    TG_ERR_NOGRAD,          /**< gradient requested where none exists or no backward rule */
    TG_ERR_NONFINITE,       /**< NaN or infinity where a finite value is required */
    TG_ERR_NOTFOUND,        /**< a named item does not exist */
    TG_ERR_GRADCHECK,       /**< tg_gradcheck() found a mismatch (see the report) */
    TG_ERR_IO,              /**< an operating-system I/O call failed (open, read, write, rename) */
    TG_ERR_FORMAT,          /**< malformed file (generic) */
    TG_ERR_TRUNCATED,       /**< file ends before the data it declares */
    TG_ERR_HEADER_SIZE,     /**< header length field absurd (too large or too small) */
    TG_ERR_JSON,            /**< header is not valid JSON of the expected form */
    TG_ERR_DUPLICATE,       /**< a name appears twice */
    TG_ERR_UNSUPPORTED,     /**< valid file, but a feature we do not read (dtype, order, ...) */
    TG_ERR_OVERFLOW,        /**< sizes overflow 64-bit arithmetic */
    TG_ERR_SIZE_MISMATCH,   /**< byte size differs from shape times dtype size */
    TG_ERR_OUT_OF_BOUNDS,   /**< data offsets point outside the file's data section */
    TG_ERR_OVERLAP,         /**< two tensors' data ranges overlap */
    TG_ERR_GAP,             /**< data ranges leave holes (not contiguous) */
    TG_ERR_TRAILING,        /**< bytes after the last tensor's data */
    TG_ERR_MISMATCH,        /**< loaded tensors do not match what the model expects */
    TG_STATUS_COUNT_        /**< number of codes (not a status) */
} tg_status;

/** Short constant name of a status code, e.g. "TG_ERR_SHAPE". Never NULL. */
TG_API const char *tg_status_str(tg_status s);
/**@}*/

/* ------------------------------------------------------------------------------------------ */
/** @name Context */
/**@{*/
typedef struct tg_ctx tg_ctx;
typedef struct tg_tensor tg_tensor;
typedef struct tg_graph tg_graph;
typedef struct tg_arena tg_arena;

/**
 * Element type. Float dtypes (::TG_F32, ::TG_F64) are what every op computes in and what
 * gradients are made of. ::TG_I32 holds integers: token ids (tg_embedding()), class targets
 * (tg_cross_entropy()) and 0/1 masks read from files. An i32 tensor can be an input or a
 * constant, never a parameter, never differentiable (tg_set_requires_grad() refuses it), and
 * every op except the ids operand of tg_embedding() and the targets of tg_cross_entropy()
 * refuses it with ::TG_ERR_DTYPE (`tg_add: 'ids' is i32; this op needs f32 or f64`).
 *
 * **Conversions** (tg_tensor_set_data(), tg_tensor_get_data(), tg_tensor_copy(), tg_set(),
 * tg_fill(), the .npy and safetensors readers) follow one rule: i32 to a float is exact in f64
 * and rounds to nearest in f32 (exact up to 2^24 in magnitude); a float to i32 must be an
 * integer in [-2^31, 2^31 - 1]: a fraction, NaN, an infinity or a value out of that range is an
 * error (::TG_ERR_ARG, nothing written), never a silent truncation or undefined behaviour;
 * f64 to f32 rounds to nearest, but a finite value that would round to an infinity
 * (|v| >= 2^128 - 2^103, about 3.4028235e38, e.g. 1e308) is an error the same way (the file
 * readers: ::TG_ERR_FORMAT), while NaN and the infinities stay what they are.
 * There is no 64-bit integer dtype: token ids, targets and masks fit in 32 bits, and 64-bit
 * integer files (NumPy's default `<i8`, PyTorch's int64) are read into i32 with a range check.
 */
typedef enum tg_dtype {
    TG_F32 = 0, /**< IEEE-754 binary32 */
    TG_F64 = 1, /**< IEEE-754 binary64 */
    TG_I32 = 2  /**< 32-bit two's-complement integer (ids, targets, masks; no gradient) */
} tg_dtype;

/** Size in bytes of one element of @p dt (4 or 8; 0 for an invalid value). */
TG_API size_t tg_dtype_size(tg_dtype dt);
/** "f32", "f64" or "i32" ("?" for an invalid value). */
TG_API const char *tg_dtype_str(tg_dtype dt);
/** True for ::TG_F32 and ::TG_F64 (the dtypes ops compute in and gradients have). */
TG_API bool tg_dtype_is_float(tg_dtype dt);

/**
 * Pluggable allocator. @c alloc returns NULL on failure (tgrad then reports ::TG_ERR_NOMEM);
 * @c free must accept NULL. Memory must be aligned for double. Tests use this to inject
 * out-of-memory failures.
 */
typedef struct tg_allocator {
    void *(*alloc)(void *user, size_t size);
    void (*free)(void *user, void *ptr);
    void *user;
} tg_allocator;

/**
 * Create a context with the C library allocator, RNG seed 0 and the default thread count
 * (OpenMP's `omp_get_max_threads()`, or 1 without OpenMP). Returns NULL only if memory is
 * exhausted. Free with tg_ctx_free().
 */
TG_API tg_ctx *tg_ctx_new(void);
/** Like tg_ctx_new() with a custom allocator (copied; NULL means the C library's). */
TG_API tg_ctx *tg_ctx_new_with(const tg_allocator *allocator);
/** Free the context and every tensor, graph and buffer it owns. NULL is a no-op. */
TG_API void tg_ctx_free(tg_ctx *ctx);

/**
 * Status of the context's error (TG_OK if none): the pending build error (the first one since
 * the last tg_ctx_clear_error()) if there is one, else the run-time error of the most recent
 * call that builds or runs, if that call failed. See "Errors come in two kinds" above.
 */
TG_API tg_status tg_ctx_status(const tg_ctx *ctx);
/** Message of that error ("" if none), one line naming the function, what was given and what
 *  is allowed. Owned by the context. */
TG_API const char *tg_ctx_message(const tg_ctx *ctx);
/** Forget the recorded error (build or run-time); building works again. */
TG_API void tg_ctx_clear_error(tg_ctx *ctx);

/** Which of the two kinds of error tg_ctx_set_error() records (see "Errors come in two kinds"
 *  above). */
typedef enum tg_error_kind {
    TG_ERROR_BUILD = 0, /**< sticks until tg_ctx_clear_error(); blocks later builders */
    TG_ERROR_RUN = 1    /**< describes one failed call; dropped by the next call that runs */
} tg_error_kind;

/**
 * Record an error on @p ctx exactly as tgrad's own calls do, for code built on tgrad (the
 * libtgrad_dist library, an embedder's own modules) that reports through the same context.
 * The message becomes `fn: <formatted>` (printf-style @p fmt; @p fn NULL gives "tgrad"),
 * truncated to the context's message buffer. The rules of the two kinds apply: nothing is
 * recorded while a build error is pending, and a build error replaces a run-time one.
 * @p status ::TG_OK is recorded as ::TG_ERR_ARG (a failure is never OK).
 * @return the status recorded (or that would have been), so a caller can
 *         `return tg_ctx_set_error(ctx, TG_ERROR_RUN, TG_ERR_IO, "my_save", "...")`.
 *         NULL @p ctx: nothing happens, ::TG_ERR_ARG is returned.
 */
TG_API tg_status tg_ctx_set_error(tg_ctx *ctx, tg_error_kind kind, tg_status status,
                                  const char *fn, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 5, 6)))
#endif
    ;

/** Most threads a context uses (kernels' OpenMP teams): tg_ctx_set_threads() and the default
 *  (OpenMP's, e.g. from OMP_NUM_THREADS) are capped here, so a huge value cannot crash the
 *  OpenMP runtime (OMP_NUM_THREADS=100000 made libgomp overflow its stack). */
#define TG_MAX_THREADS 1024

/** Most threads a kernel uses, in [1, TG_MAX_THREADS] (larger values are capped). @p n <= 0
 *  restores the default: OpenMP's (omp_get_max_threads(), capped), 1 without OpenMP. A kernel
 *  uses fewer when its work is too small to pay for waking a thread, or while its parallel
 *  regions have not been paying (other processes hold the cores); results never depend on it.
 *  On a machine other processes share, run with OMP_WAIT_POLICY=passive or a small
 *  GOMP_SPINCOUNT, so that idle OpenMP workers sleep instead of polling (docs/kernels.md,
 *  "Threads"). */
TG_API void tg_ctx_set_threads(tg_ctx *ctx, int n);
TG_API int tg_ctx_threads(const tg_ctx *ctx);

/** Reseed the context RNG (xoshiro256**, seeded through splitmix64). */
TG_API void tg_ctx_seed(tg_ctx *ctx, uint64_t seed);
/** Next raw 64-bit output of the context RNG. */
TG_API uint64_t tg_rng_u64(tg_ctx *ctx);
/** Uniform double in [0, 1) with 53 random bits. */
TG_API double tg_rng_uniform(tg_ctx *ctx);
/** Standard normal deviate (Box-Muller, no cached second value so the state is all there is). */
TG_API double tg_rng_normal(tg_ctx *ctx);
/** Copy the 256-bit RNG state out (4 words), e.g. to store in a checkpoint. */
TG_API void tg_rng_get_state(const tg_ctx *ctx, uint64_t state[4]);
/** Restore a state produced by tg_rng_get_state(). Errors (run-time, state unchanged):
 *  ::TG_ERR_ARG for NULL or the all-zero state (a fixed point of xoshiro256**: the generator
 *  would return 0 for ever; tg_rng_get_state() never gives it). */
TG_API tg_status tg_rng_set_state(tg_ctx *ctx, const uint64_t state[4]);
/** Advance the context RNG by 2^128 outputs (xoshiro256**'s jump function, Blackman & Vigna
 *  2018): from one state, 0, 1, 2, ... jumps give 2^128 non-overlapping streams. `tgrad train
 *  --grad-accum` draws micro-batch i's dropout masks from the step's state jumped i times. */
TG_API void tg_rng_jump(tg_ctx *ctx);

/**
 * Training mode (default true). Ops that behave differently at evaluation (dropout) read it
 * when the graph runs forward.
 */
TG_API void tg_ctx_set_training(tg_ctx *ctx, bool training);
TG_API bool tg_ctx_training(const tg_ctx *ctx);

/**
 * Fused kernels (default true). When enabled, module builders (tg_sdpa, tg_mha, the FFN, the
 * encoder and transformer layers) emit fused ops where one applies: flash attention instead of
 * matmul + scale + mask + softmax + matmul when the attention weights are not requested, dense
 * with its activation in the GEMM epilogue, and so on. Disabled, they emit the unfused graph of
 * elementary ops, e.g. to compare the two in tests or to read every intermediate. Read when a
 * builder is called (not when a graph runs); the results agree to rounding (about 1e-12 relative
 * in f64).
 */
TG_API void tg_ctx_set_fusion(tg_ctx *ctx, bool enabled);
TG_API bool tg_ctx_fusion(const tg_ctx *ctx);

/** Bytes currently held by the context from its allocator. */
TG_API size_t tg_ctx_bytes(const tg_ctx *ctx);
/**
 * Cap the bytes the context may hold (tg_ctx_bytes(); 0, the default, means no limit). An
 * allocation that would take the total beyond @p bytes fails with ::TG_ERR_NOMEM and a message
 * such as `tg_param: allocating 4000000000 bytes would exceed the memory limit of 1073741824
 * bytes (12800 in use)`, and module init functions check their whole parameter size against
 * the limit before allocating anything. Use it to turn a huge configuration into one clear
 * error instead of swapping or the kernel's OOM killer. A limit below the bytes already held
 * frees nothing; it only makes later allocations fail.
 */
TG_API void tg_ctx_set_memory_limit(tg_ctx *ctx, size_t bytes);
/** The limit set by tg_ctx_set_memory_limit() (0: none). */
TG_API size_t tg_ctx_memory_limit(const tg_ctx *ctx);

/** A point in a context's life, from tg_ctx_mark(). Opaque; copy it by value. */
typedef struct tg_mark {
    uint64_t alloc_seq_, tensor_id_; /* private */
    int64_t n_params_;               /* private */
    uint64_t era_;                   /* private: rewinds before the mark */
} tg_mark;
/**
 * Remember the current point of @p ctx, for tg_ctx_rewind(). Cheap (no allocation).
 */
TG_API tg_mark tg_ctx_mark(tg_ctx *ctx);
/**
 * Release every tensor and graph created after @p mark, with all their memory (data, arenas,
 * names, saved values), and drop parameters created after it from the context's list. What
 * was created before the mark stays valid, including memory allocated for it later (a
 * parameter's gradient allocated by a graph built after the mark). Pointers to released tensors
 * and graphs must not be used again; op results created before the mark but run by a released
 * graph lose their data binding (tg_tensor_data() returns NULL until another graph runs them).
 *
 * This is how an embedder keeps memory flat: mark once, then in a loop build a graph, run it,
 * read its outputs, rewind (examples/embed_loop.c). After the rewind the context holds exactly
 * the bytes it held at the mark (tg_ctx_bytes()), plus what was allocated meanwhile for objects
 * made before it (a parameter's gradient, the context's parameter list if it grew). Graphs built before the mark stay valid and keep running,
 * also over op results that a released graph had run. A successful rewind does not change the
 * error state. Marks nest (rewind to an earlier mark releases the later ones' objects too), and
 * one mark can be rewound to any number of times. A mark that a rewind went past (rewinding to
 * an earlier mark makes every later mark stale, even once the context has grown again) is
 * refused with ::TG_ERR_ARG (a run-time error; nothing is released). The context remembers one
 * small entry per distinct point rewound to that is still in use (a loop rewinding to one mark
 * keeps one; the first few are inside the context). A shared arena (tg_arena_new()) made
 * before the mark stays usable, at the size graphs made after the mark may have grown it to
 * (that growth counts as memory allocated for an object made before the mark).
 */
TG_API tg_status tg_ctx_rewind(tg_ctx *ctx, tg_mark mark);
/**@}*/

/* ------------------------------------------------------------------------------------------ */
/** @name Tensors */
/**@{*/
/** What a tensor is in a graph. */
typedef enum tg_kind {
    TG_KIND_PARAM = 0, /**< persistent learnable value; always has a gradient */
    TG_KIND_INPUT,     /**< data set by the caller before each run; gradient on request */
    TG_KIND_CONST,     /**< fixed data (e.g. a mask); never has a gradient */
    TG_KIND_OP         /**< result of an op; computed by the graph */
} tg_kind;

/** Largest element count of one tensor (2^60 - 1): its byte size fits in 63 bits. */
#define TG_MAX_NUMEL (INT64_MAX / 8)

/**
 * Create a leaf tensor, zero-filled. @p rank 0..::TG_MAX_RANK, every dim >= 1 (except that a
 * rank-0 tensor has one element). @p name may be NULL (a name like "input3" is generated) and is
 * copied (truncated to ::TG_NAME_MAX - 1 bytes). A parameter is f32 or f64; inputs and
 * constants may also be ::TG_I32.
 * Errors: ::TG_ERR_ARG (bad rank), ::TG_ERR_SHAPE (dim < 1), ::TG_ERR_OVERFLOW (more than
 * ::TG_MAX_NUMEL elements, or a byte size beyond SIZE_MAX), ::TG_ERR_DTYPE (unknown dtype, or
 * an integer dtype for tg_param()), ::TG_ERR_NOMEM.
 * Returns NULL on error. Unlike op builders, leaf constructors work while a build error is
 * pending (the error is kept).
 */
TG_API tg_tensor *tg_param(tg_ctx *ctx, tg_dtype dt, int rank, const int64_t *shape,
                           const char *name);
/** Input leaf (see tg_param()); no gradient unless tg_set_requires_grad() is called. */
TG_API tg_tensor *tg_input(tg_ctx *ctx, tg_dtype dt, int rank, const int64_t *shape,
                           const char *name);
/** Constant leaf (see tg_param()); never differentiable. */
TG_API tg_tensor *tg_const(tg_ctx *ctx, tg_dtype dt, int rank, const int64_t *shape,
                           const char *name);

/** Number of parameters created in this context (in creation order). */
TG_API int64_t tg_ctx_n_params(const tg_ctx *ctx);
/** The i-th parameter created in this context, NULL if out of range. */
TG_API tg_tensor *tg_ctx_param(const tg_ctx *ctx, int64_t i);
/** The parameter named @p name (its `state_dict` key), NULL if none. */
TG_API tg_tensor *tg_ctx_find_param(const tg_ctx *ctx, const char *name);

/**
 * Ask for (or stop asking for) the gradient of an input leaf. Parameters always require grad;
 * constants and op results cannot be changed. Must be called before any op reads @p t: each op
 * records at build time whether its result needs a gradient, so a change afterwards is refused
 * (setting the value it already has is fine; ops released by tg_ctx_rewind() no longer count).
 * Errors (build errors): ::TG_ERR_ARG for a constant or op tensor, ::TG_ERR_DTYPE for asking
 * the gradient of an i32 tensor (integers have none), ::TG_ERR_STATE if an op already reads
 * @p t (`tg_set_requires_grad: input 'x' is already read by an op; ...`).
 */
TG_API tg_status tg_set_requires_grad(tg_tensor *t, bool requires_grad);

TG_API tg_ctx *tg_tensor_ctx(const tg_tensor *t);
TG_API tg_dtype tg_tensor_dtype(const tg_tensor *t);
TG_API tg_kind tg_tensor_kind(const tg_tensor *t);
TG_API int tg_tensor_rank(const tg_tensor *t);
/** Shape array of length tg_tensor_rank(), outermost first. Owned by the tensor. */
TG_API const int64_t *tg_tensor_shape(const tg_tensor *t);
/** Size of @p axis (negative counts from the end); -1 if out of range. */
TG_API int64_t tg_tensor_dim(const tg_tensor *t, int axis);
TG_API int64_t tg_tensor_numel(const tg_tensor *t);
TG_API bool tg_tensor_requires_grad(const tg_tensor *t);
TG_API const char *tg_tensor_name(const tg_tensor *t);
/** Rename (copied). Errors: ::TG_ERR_ARG for NULL. */
TG_API tg_status tg_tensor_set_name(tg_tensor *t, const char *name);
/** Registry name of the op that produced @p t ("param", "input", "const" for leaves; a custom
 *  op's own name, see tg_custom_op()). More introspection: "Introspection and DOT" below. */
TG_API const char *tg_tensor_op_name(const tg_tensor *t);
/** Shape as text, e.g. "(2, 3)"; rank 0 gives "()". Writes at most @p n bytes. */
TG_API const char *tg_tensor_shape_str(const tg_tensor *t, char *buf, size_t n);

/**
 * Raw data pointer: numel elements of the tensor's dtype (float, double or int32_t). For a
 * leaf: its own buffer, row-major, valid until the context is freed (or rewound past it). For
 * an op result: memory of the graph that last ran it, readable after that graph's forward
 * (and backward) only if the tensor is an output of that graph or was marked with tg_keep()
 * before tg_graph_new(). Otherwise NULL with ::TG_ERR_STATE recorded (a run error, e.g.
 * `tg_tensor_data: 'exp1' is an intermediate value of its graph (neither an output nor kept):
 * its memory went to later values; call tg_keep('exp1') before tg_graph_new to read it after
 * the run`): the planner gave its bytes to later values, so they are never handed out as its
 * own. Also NULL before any graph ran it, after that graph was freed, or, for a graph built
 * with a shared arena (tg_arena_new()), after another graph of that arena ran. Exceptions that
 * stay readable: views of a leaf or of an output or kept tensor (they read that memory) and
 * every value of a graph built with tg_graph_opts::no_reuse. The same rule holds for tg_get(), tg_tensor_get_data(),
 * tg_tensor_copy() (NaN or the error returned) and the gradient accessors. A view
 * (tg_tensor_is_view()) points into its base's buffer with its own strides: read it with
 * tg_get() or tg_tensor_get_data(), which follow them.
 */
TG_API void *tg_tensor_data(tg_tensor *t);
/** Raw gradient pointer (row-major, the tensor's shape), or NULL if @p t has no gradient
 *  buffer. A leaf's is its own accumulated gradient; an op result's is graph memory, readable
 *  after backward only for outputs and tg_keep() tensors (otherwise NULL with the error of
 *  tg_tensor_data(); and, with a shared arena, NULL once another graph of the arena ran). */
TG_API void *tg_tensor_grad(tg_tensor *t);

/**
 * Copy @p n elements of type @p src_dtype into the tensor, converting to its dtype by the rule
 * of ::tg_dtype (this is how float ids become an i32 tensor:
 * `tg_tensor_set_data(ids, float_ids, TG_F32, n)`).
 * Errors (run-time, see "Errors come in two kinds"): ::TG_ERR_SHAPE if @p n != numel,
 * ::TG_ERR_ARG for NULL or, for an i32 tensor, a source element that is not an integer in the
 * i32 range (the message names its index and value; nothing is copied), ::TG_ERR_STATE for an
 * op result.
 */
TG_API tg_status tg_tensor_set_data(tg_tensor *t, const void *src, tg_dtype src_dtype, size_t n);
/** Copy the data out as @p dst_dtype (converted by the rule of ::tg_dtype). Errors:
 *  ::TG_ERR_SHAPE if @p n != numel, ::TG_ERR_ARG if @p dst_dtype is i32 and an element is not
 *  an integer in range (nothing written). */
TG_API tg_status tg_tensor_get_data(const tg_tensor *t, void *dst, tg_dtype dst_dtype, size_t n);
/** Copy the gradient out. Errors: ::TG_ERR_NOGRAD if none (always for i32 tensors),
 *  ::TG_ERR_SHAPE if n != numel, ::TG_ERR_ARG as tg_tensor_get_data(). */
TG_API tg_status tg_tensor_get_grad(const tg_tensor *t, void *dst, tg_dtype dst_dtype, size_t n);
/** Copy values from @p src (same shape; dtype converted as tg_tensor_set_data(), whose errors
 *  it has). A strided view as @p src is read through its strides (::TG_ERR_ARG if it is a
 *  strided view of @p dst itself). Errors: ::TG_ERR_SHAPE, ::TG_ERR_ARG. */
TG_API tg_status tg_tensor_copy(tg_tensor *dst, const tg_tensor *src);

/** Element access for tests and tools: value at flat row-major index (no bounds check beyond
 *  returning NaN / doing nothing when out of range). i32 values are returned exactly. */
TG_API double tg_get(const tg_tensor *t, int64_t flat);
/** Set one element. For an i32 tensor @p v must be an integer in the i32 range; otherwise the
 *  element is left unchanged and a run-time ::TG_ERR_ARG is recorded on the context. */
TG_API void tg_set(tg_tensor *t, int64_t flat, double v);
/** Gradient element (NaN if no gradient or out of range). */
TG_API double tg_grad_get(const tg_tensor *t, int64_t flat);
/** Value at coordinates @p idx (tg_tensor_rank() entries). */
TG_API double tg_get_at(const tg_tensor *t, const int64_t *idx);
/** Set every element (leaves only; op results are overwritten by forward; a view of a leaf sets
 *  the leaf's elements it views, as tg_set() does). For an i32 tensor,
 *  a @p v tg_set() refuses leaves the tensor unchanged (run-time ::TG_ERR_ARG recorded). */
TG_API void tg_fill(tg_tensor *t, double v);
/** Fill with uniform values in [lo, hi) from the context RNG. An i32 tensor is refused
 *  (unchanged, run-time ::TG_ERR_DTYPE recorded): random floats are not integers. Bounds that
 *  are not finite, or whose values or width (hi - lo) do not fit the tensor's dtype (f32:
 *  |v| < 3.4e38), are refused before any value is drawn (tensor and RNG unchanged, run-time
 *  ::TG_ERR_ARG). */
TG_API void tg_fill_uniform(tg_tensor *t, double lo, double hi);
/** Fill with normal values (mean, std) from the context RNG. i32: refused as
 *  tg_fill_uniform(); so are a non-finite mean or std and |mean| + 40 |std| beyond the
 *  dtype's finite range (a draw never passes ~38.5 std), before any value is drawn. */
TG_API void tg_fill_normal(tg_tensor *t, double mean, double std);
/** Set the gradient buffer to zero (no-op without one). */
TG_API void tg_zero_grad(tg_tensor *t);
/**@}*/

/* ------------------------------------------------------------------------------------------ */
/** @name Op builders
 * Each records one op and returns its result (owned by the context), or NULL on error.
 * All operands must belong to the same context and have the same float dtype
 * (::TG_ERR_DTYPE); an i32 operand is refused (`tg_add: 'ids' is i32; this op needs f32 or
 * f64`) except the ids of tg_embedding() and the targets of tg_cross_entropy(), which must be
 * i32.
 */
/**@{*/

/**
 * Batched matrix product `C = op(A) op(B)`, op(X) = X^T when the flag is set (transposes the
 * last two axes; no copy is made, forward or backward).
 * Shapes: a (..., M, K) [or (..., K, M) with @p transpose_a], b (..., K, N) [or (..., N, K)]
 * -> (batch..., M, N) where batch is the broadcast of both leading dims. Rank >= 2 each.
 * Gradients: dA = dC op(B)^T, dB = op(A)^T dC (summed over broadcast batch dims).
 * Errors: ::TG_ERR_SHAPE (rank < 2, inner dims differ, batch dims not broadcastable).
 * Source: `matmul(queries, keys, transpose_b=True)` in the tutorials "Scaled dot product
 * attention" and "How to Implement Multi-Head Attention From Scratch in TensorFlow and Keras".
 */
TG_API tg_tensor *tg_matmul(tg_ctx *ctx, tg_tensor *a, tg_tensor *b, bool transpose_a,
                            bool transpose_b);

/**
 * Permute axes: out.shape[i] = x.shape[perm[i]]; @p perm is a permutation of 0..rank-1
 * (negative entries count from the end). A view: no data is copied (strides are permuted; a
 * view of a leaf reads the leaf's buffer at once). Gradient: inverse permutation.
 * Errors: ::TG_ERR_AXIS (entry out of range or repeated), ::TG_ERR_ARG (perm NULL).
 */
TG_API tg_tensor *tg_permute(tg_ctx *ctx, tg_tensor *x, const int *perm);
/** Swap two axes (negative counts from the end); a view, as tg_permute(). Errors: ::TG_ERR_AXIS. */
TG_API tg_tensor *tg_transpose(tg_ctx *ctx, tg_tensor *x, int axis0, int axis1);

/**
 * View @p x with a new shape of the same numel; at most one entry may be -1 (inferred).
 * Shares x's data (no copy) when x is contiguous; a strided x (a transposed or narrowed view)
 * is first copied by a `contiguous` node, which the result then views. Gradient: reshaped back.
 * Errors: ::TG_ERR_SHAPE (numel differs, more than one -1, entry 0 or < -1, inferred size not
 * whole), ::TG_ERR_ARG (rank out of range).
 */
TG_API tg_tensor *tg_reshape(tg_ctx *ctx, tg_tensor *x, int rank, const int64_t *shape);

/**
 * Slice `x[..., start:start+length, ...]` along @p axis (PyTorch `narrow`). A view: no data is
 * copied (the start moves by start times the axis's stride). Gradient: scattered back into the
 * slice, zero elsewhere.
 * Errors: ::TG_ERR_AXIS, ::TG_ERR_SHAPE (slice outside the axis or length < 1).
 */
TG_API tg_tensor *tg_narrow(tg_ctx *ctx, tg_tensor *x, int axis, int64_t start, int64_t length);
/**
 * y = x laid out row-major. Transpose/permute/narrow (and reshape of a contiguous tensor) are
 * views that copy nothing; ops whose kernels need contiguous operands get this copy inserted
 * automatically, so call it only to choose where the copy happens. dx += dy.
 * Errors: as any builder. Shapes: y has x's shape; f32 or f64.
 */
TG_API tg_tensor *tg_contiguous(tg_ctx *ctx, tg_tensor *x);


/** `y = s * x`, any shape. Gradient dx = s dy. Errors: ::TG_ERR_ARG if @p s is not finite. */
TG_API tg_tensor *tg_scale(tg_ctx *ctx, tg_tensor *x, double s);
/** Elementwise `a + b` with broadcasting. Gradients reduced over broadcast dims.
 *  Errors: ::TG_ERR_SHAPE (not broadcastable). */
TG_API tg_tensor *tg_add(tg_ctx *ctx, tg_tensor *a, tg_tensor *b);
/** Elementwise `a * b` with broadcasting. da = dy b, db = dy a (reduced). */
TG_API tg_tensor *tg_mul(tg_ctx *ctx, tg_tensor *a, tg_tensor *b);

/**
 * Sum over @p axis (negative counts from the end); @p keepdim keeps it as size 1.
 * Shapes: x (..., N, ...) -> (..., ...) or (..., 1, ...). Gradient: dy broadcast back.
 * Errors: ::TG_ERR_AXIS.
 */
TG_API tg_tensor *tg_sum(tg_ctx *ctx, tg_tensor *x, int axis, bool keepdim);
/** Mean over @p axis (sum / N). Errors: ::TG_ERR_AXIS. */
TG_API tg_tensor *tg_mean(tg_ctx *ctx, tg_tensor *x, int axis, bool keepdim);
/** Sum of all elements -> rank-0 tensor. */
TG_API tg_tensor *tg_sum_all(tg_ctx *ctx, tg_tensor *x);
/** Mean of all elements -> rank-0 tensor. */
TG_API tg_tensor *tg_mean_all(tg_ctx *ctx, tg_tensor *x);

/** How tg_add_mask() reads its mask. */
typedef enum tg_mask_kind {
    /** Float bias added to the scores: 0 keeps, -inf blocks, any value shifts. Differentiable
     *  in the mask too (a learned bias). The Keras tutorials' `scores += -1e9 * mask` ("Scaled
     *  dot product attention", "How to Implement Multi-Head Attention From Scratch in
     *  TensorFlow and Keras") is
     *  `tg_add_mask(ctx, s, tg_scale(ctx, m, -1e9), TG_MASK_ADDITIVE)`. */
    TG_MASK_ADDITIVE = 0,
    /** Boolean mask stored as 0/1 (any non-zero = true): true means "this position may not be
     *  attended" and the score becomes -inf, as PyTorch `nn.MultiheadAttention`'s boolean
     *  `attn_mask` and `key_padding_mask`. Not differentiable in the mask. */
    TG_MASK_BLOCK = 1
} tg_mask_kind;

/**
 * Mask attention scores. Shapes: scores (..., T_q, T_k); mask broadcastable to scores
 * (e.g. (T_q, T_k), (B, 1, T_q, T_k), (B, 1, 1, T_k)) -> same shape as scores.
 * ADDITIVE: y = s + m. BLOCK: y = m != 0 ? -inf : s; dy/ds = 0 where blocked.
 * Errors: ::TG_ERR_SHAPE (not broadcastable to scores, or mask rank > scores rank),
 * ::TG_ERR_ARG (unknown kind), ::TG_ERR_DTYPE.
 */
TG_API tg_tensor *tg_add_mask(tg_ctx *ctx, tg_tensor *scores, tg_tensor *mask,
                              tg_mask_kind kind);

/**
 * Softmax over the last axis, max-subtracted: y_i = exp(x_i - m) / sum_j exp(x_j - m).
 * A row whose entries are all -inf gives all zeros and a zero gradient (PyTorch SDPA's
 * `_safe_softmax`), never NaN. Gradient: dx = y * (dy - sum(dy * y)). Rank >= 1.
 */
TG_API tg_tensor *tg_softmax(tg_ctx *ctx, tg_tensor *x);
/**
 * Fused scaled dot-product attention (FlashAttention): softmax(scale Q K^T + masks) V in one
 * op, without storing the attention weights.
 *
 * Math: s_ij = scale (q_i . k_j), then @p mask added (::TG_MASK_ADDITIVE) or applied as a
 * block (::TG_MASK_BLOCK), then every key blocked by @p block_mask or (@p causal) j > i gets
 * -inf; out_i = sum_j softmax_j(s_i) v_j. The same values as the unfused graph
 * tg_matmul(q, k, false, true) -> tg_scale -> tg_add_mask (mask, block_mask, causal mask) ->
 * tg_softmax -> tg_matmul(w, v), to rounding (about 1e-15 relative in f64).
 * Forward walks blocks of keys per block of query rows with the online softmax (a running max
 * and sum per row: Milakov & Gimelshein 2018; Dao et al. 2022, "FlashAttention", Alg. 1) and
 * saves only the per-row log-sum-exp (..., T_q); backward recomputes the weights from q, k and
 * it (Dao 2023, "FlashAttention-2", Alg. 2: D_i = rowsum(dO_i O_i), dS = P (dP - D)). Memory is
 * O(T_q + T_k) per batch and head instead of O(T_q T_k). Results are bitwise identical for
 * any thread count.
 *
 * **Fully masked rows** (every key blocked) give a zero output row and zero gradients, never
 * NaN, like tg_softmax().
 *
 * Shapes: q (..., T_q, d_k), k (..., T_k, d_k), v (..., T_k, d_v); the leading dims of q, k and
 * v broadcast together (none at all is fine; e.g. k and v (B, 1, T_k, d) shared by H heads of
 * q (B, H, T_q, d)) -> out (..., T_q, d_v). Masks broadcast to the scores (..., T_q, T_k) as
 * in tg_add_mask(): e.g. (T_q, T_k), (B, 1, T_q, T_k), a key padding mask (B, 1, 1, T_k).
 * q, k, v may be strided views (heads split by tg_transpose are read in place); a view whose
 * last axis is not contiguous is copied first.
 * @param mask NULL or a mask read as @p mask_kind; an ::TG_MASK_ADDITIVE mask that requires a
 *        gradient gets one (dM = dS summed over broadcast dims; backward then uses a scratch of
 *        the scores' size).
 * @param block_mask NULL or a second mask, always ::TG_MASK_BLOCK (0/1, 1 = blocked), e.g. a
 *        key padding mask next to an attention mask.
 * @param causal block key j for query i when j > i (top-left aligned, as PyTorch's
 *        `is_causal`), without any mask tensor.
 * @param scale factor on q . k; 0 means 1/sqrt(d_k).
 * Dtypes: f32 or f64, all operands alike (masks included).
 * Errors: ::TG_ERR_SHAPE (ranks below 2, d_k or T_k differ, leading dims or a mask do not
 * broadcast), ::TG_ERR_ARG (unknown mask kind, scale not finite), ::TG_ERR_DTYPE,
 * ::TG_ERR_OVERFLOW (an additive mask needing a gradient with too large scores).
 * Owned by the context. tg_sdpa() and tg_mha_forward() use it when tg_ctx_fusion() is on and
 * the attention weights are not requested.
 */
TG_API tg_tensor *tg_flash_attention(tg_ctx *ctx, tg_tensor *q, tg_tensor *k, tg_tensor *v,
                                     tg_tensor *mask, tg_mask_kind mask_kind,
                                     tg_tensor *block_mask, bool causal, double scale);
/**
 * Causal attention over a KV cache (one step of incremental decoding; inference only).
 * At each run, with p = pos[0] read from the data: writes the n new keys and values into the
 * caches, k_cache[b, h, :, p + i] = k[b, h, i, :] and v_cache[b, h, p + i, :] = v[b, h, i, :],
 * then attends causally over cache rows 0..p+i (query i sits at absolute position p + i):
 * out[b, h, i] = sum_j softmax_j(scale q[b, h, i] . k_j) v_j, j = 0..p+i. This equals
 * tg_flash_attention() with `causal` on the whole sequence so far, restricted to the last n
 * query rows, to rounding (about 1e-15 relative in f64), at O(p + n) work per query row instead
 * of recomputing every key and value (the "KV cache" of autoregressive decoders: Pope et al.
 * 2022, "Efficiently Scaling Transformer Inference", sec. 2; attention as Vaswani et al. 2017,
 * eq. (1)). The generator of tgrad_train.h (tg_generator_new()) builds it for every layer.
 *
 * Shapes: q, k (B, H, n, d_k), v (B, H, n, d_v) (strided views allowed, e.g. heads split from
 * one in_proj product; a non-contiguous last axis is copied); k_cache (B, H, d_k, max_len)
 * (keys stored **transposed**, so the scores of a query are one unit-stride loop over keys);
 * v_cache (B, H, max_len, d_v); pos (1) ::TG_I32 -> out (B, H, n, d_v).
 * The caches and pos must be contiguous leaves that do not require a gradient (inputs or
 * constants, owned by the caller, who keeps them alive as long as the graph); the op writes
 * the caches in place when it runs, rows p..p+n-1 only. Rows >= p + n are neither read nor
 * written.
 * @param scale factor on q . k; 0 means 1/sqrt(d_k).
 * Dtypes: f32 or f64 for q, k, v and the caches (one dtype), pos ::TG_I32.
 * Errors (build): ::TG_ERR_SHAPE (ranks, shapes disagree, n > max_len, pos not one element),
 * ::TG_ERR_ARG (a cache or pos is not a contiguous leaf without gradient, scale not finite),
 * ::TG_ERR_DTYPE. A graph that would differentiate through the op is refused by
 * tg_graph_new() with ::TG_ERR_NOGRAD ("op 'kv_attention' (...) has no backward rule"): build
 * it with tg_graph_opts::no_grad. Errors (run, nothing written): ::TG_ERR_ARG if p < 0 or
 * p + n > max_len. Results are bitwise identical for any thread count ((batch, head) items in
 * one parallel region, each summed in a fixed order).
 */
TG_API tg_tensor *tg_kv_attention(tg_ctx *ctx, tg_tensor *q, tg_tensor *k, tg_tensor *v,
                                  tg_tensor *k_cache, tg_tensor *v_cache, tg_tensor *pos,
                                  double scale);
/** max(0, x); gradient 1 where x > 0, else 0 (PyTorch's choice at 0). */
TG_API tg_tensor *tg_relu(tg_ctx *ctx, tg_tensor *x);
/**
 * ReLU's derivative applied to @p t: y = t where r > 0, else 0 (so y = relu'(x) t for
 * r = relu(x) or r = x; PyTorch's `threshold_backward(t, r, 0)`). t, r: one shape, one float
 * dtype; y: that shape. Gradients: dt = dy [r > 0]; none to r (the indicator is piecewise
 * constant: r's gradient is 0). A NaN in r gives 0. The reverse and forward rules of ReLU
 * written as ops use it (docs/autodiff.md). Errors (build): ::TG_ERR_SHAPE (shapes differ),
 * ::TG_ERR_DTYPE. Source: ops/elementwise.c.
 */
TG_API tg_tensor *tg_relu_gate(tg_ctx *ctx, tg_tensor *t, tg_tensor *r);
/** Exact GELU, x * Phi(x) = 0.5 x (1 + erf(x / sqrt 2)) (PyTorch default, Hendrycks &
 *  Gimpel 2016). Gradient Phi(x) + x phi(x). */
TG_API tg_tensor *tg_gelu(tg_ctx *ctx, tg_tensor *x);

/**
 * Affine map over the last axis, PyTorch `nn.Linear`: y = x W^T + b.
 * Shapes: x (..., in_features), w (out_features, in_features), b (out_features) or NULL
 * -> (..., out_features). PyTorch weights load without transposition.
 * Errors: ::TG_ERR_SHAPE (w not rank 2, width mismatch, b wrong length).
 */
TG_API tg_tensor *tg_dense(tg_ctx *ctx, tg_tensor *x, tg_tensor *w, tg_tensor *b);

/** Activation of a feed-forward layer and of tg_dense_act(). */
typedef enum tg_activation {
    TG_ACT_RELU = 0, /**< max(0, x) (PyTorch default) */
    TG_ACT_GELU = 1  /**< exact erf GELU */
} tg_activation;

/**
 * Dense with its activation fused into the GEMM epilogue: y = act(x W^T + b), one op instead
 * of tg_dense() followed by tg_relu() / tg_gelu(), the same values (bitwise for ReLU; GELU to
 * rounding of erf), without a separate pass over the (..., out_features) result or a second
 * buffer for ReLU. The first layer of the feed-forward network (Vaswani et al. 2017, eq. (2):
 * FFN(x) = max(0, x W1 + b1) W2 + b2) uses it when tg_ctx_fusion() is on.
 * Backward: dz = dy * act'(z) with z = x W^T + b (ReLU: 1 where y > 0, read from the output;
 * GELU: z is saved, (..., out_features) elements), then dense's rules: dx += dz W, dW += dz^T x,
 * db += column sums of dz.
 * Shapes: x (..., in_features), w (out_features, in_features), b (out_features) or NULL
 * -> (..., out_features); f32 or f64.
 * Errors: those of tg_dense(); ::TG_ERR_ARG for an unknown activation.
 */
TG_API tg_tensor *tg_dense_act(tg_ctx *ctx, tg_tensor *x, tg_tensor *w, tg_tensor *b,
                               tg_activation act);

/**
 * Layer normalisation over the last axis (Ba et al. 2016; PyTorch `nn.LayerNorm`):
 * y = (x - mean) / sqrt(var + eps) * gamma + beta, with the biased variance computed in two
 * passes. A constant row gives beta (never NaN).
 * Shapes: x (..., D), gamma (D) or NULL (=1), beta (D) or NULL (=0) -> (..., D).
 * Errors: ::TG_ERR_SHAPE, ::TG_ERR_ARG (eps not finite or < 0). PyTorch's default eps is 1e-5.
 */
TG_API tg_tensor *tg_layer_norm(tg_ctx *ctx, tg_tensor *x, tg_tensor *gamma, tg_tensor *beta,
                                double eps);
/**
 * Inverted dropout (Srivastava et al. 2014; PyTorch `nn.Dropout`): in training mode (see
 * tg_ctx_set_training(), read at each forward run) each element is kept with probability
 * 1 - p and scaled by 1 / (1 - p). The mask is counter-based: one draw k from the context RNG
 * per forward run, then keep_i = (u_i >> 11) >= floor(p 2^53) with u_i the i-th output of a
 * splitmix64 stream seeded with k (Steele et al. 2014), so it depends on k and i only and is
 * the same for any thread count; in eval mode, y = x. Gradient: dy masked and scaled the
 * same way. Any shape. Errors: ::TG_ERR_ARG (p outside [0, 1)).
 */
TG_API tg_tensor *tg_dropout(tg_ctx *ctx, tg_tensor *x, double p);

/**
 * Embedding lookup (PyTorch `nn.Embedding`): y[n, :] = weight[ids[n], :].
 * Shapes: ids (...) ::TG_I32 token ids in [0, V), weight (V, D) f32 or f64 -> (..., D) in
 * weight's dtype. Gradient: rows of dy scatter-added into dweight, deterministically (no
 * atomics; forward saves the grouping of positions by id, so backward never reads the ids and
 * changing them after a forward cannot change that forward's gradient); ids get no gradient.
 * Ids are checked at each forward run (tg_graph_forward() returns ::TG_ERR_ARG naming the bad
 * id). Errors: ::TG_ERR_SHAPE (weight not rank 2), ::TG_ERR_DTYPE (ids not i32 — float ids
 * are refused; copy them into an i32 tensor with tg_tensor_set_data(), which checks that they
 * are integers — or weight not f32/f64).
 */
TG_API tg_tensor *tg_embedding(tg_ctx *ctx, tg_tensor *ids, tg_tensor *weight);

/**
 * One-hot rows of class ids as floats (PyTorch `F.one_hot(ids, n_classes).to(dtype)`, with an
 * ignored id): y[..., c] = 1 if ids[...] == c else 0; a position whose id is @p ignore_index
 * gives a row of zeros. Shapes: ids (...) ::TG_I32 -> (..., n_classes) in @p dt (f32 or f64).
 * No gradient (the only source is integer). Ids are checked at each forward run
 * (tg_graph_forward() returns ::TG_ERR_ARG naming an id outside [0, n_classes) that is not
 * @p ignore_index). The reverse rules written as ops use it (cross-entropy's target
 * distribution, embedding's gradient as a product: docs/autodiff.md).
 * Errors: ::TG_ERR_DTYPE (ids not i32, dt not f32/f64), ::TG_ERR_ARG (n_classes outside
 * [1, 2^31)), ::TG_ERR_SHAPE (ids of rank ::TG_MAX_RANK). Source: ops/one_hot.c.
 */
TG_API tg_tensor *tg_one_hot(tg_ctx *ctx, tg_tensor *ids, int64_t n_classes,
                             int64_t ignore_index, tg_dtype dt);

/**
 * Cross-entropy of logits against integer targets, mean over tokens (PyTorch
 * `F.cross_entropy(logits.view(-1, V), targets.view(-1), ignore_index=...)`):
 * loss = mean over rows with target != ignore_index of (logsumexp(x_r) - x_{r, t_r}), computed
 * as a fused, max-subtracted log-softmax (finite for logits of +-1e4).
 * Shapes: logits (..., V) f32 or f64, targets (...) ::TG_I32 class ids -> () (rank 0, logits'
 * dtype). Gradient: (softmax(x_r) - onehot(t_r)) / N_valid (forward saves each row's class,
 * so backward never reads the targets). If every target is ignored the loss and gradient are
 * 0 (PyTorch gives NaN). Targets are checked at each forward run (::TG_ERR_ARG).
 * tg_cross_entropy_smoothed() with label_smoothing 0 (label smoothing: see there).
 * Errors: ::TG_ERR_SHAPE (leading dims differ), ::TG_ERR_DTYPE (targets not i32 — float
 * targets are refused, convert as for tg_embedding() — or logits not f32/f64).
 */
TG_API tg_tensor *tg_cross_entropy(tg_ctx *ctx, tg_tensor *logits, tg_tensor *targets,
                                   int64_t ignore_index);

/**
 * Cross-entropy with label smoothing (PyTorch `F.cross_entropy(logits.view(-1, V),
 * targets.view(-1), ignore_index=..., label_smoothing=eps)`; label smoothing: Szegedy et al.
 * 2016, "Rethinking the Inception Architecture for Computer Vision", sec. 7; used by Vaswani
 * et al. 2017, sec. 5.4, with eps = 0.1). Each row r whose target t_r is not ignore_index is
 * scored against the target distribution q_r = (1 - eps) onehot(t_r) + eps / V, V classes:
 *   loss_r = -sum_c q_rc log softmax(x_r)_c
 *          = (1 - eps) (lse_r - x_{r, t_r}) + eps (lse_r - (1/V) sum_c x_rc),
 *   lse_r = logsumexp(x_r),   loss = (1 / N_valid) sum_r loss_r,
 * N_valid the number of rows not ignored. Fused and max-subtracted as tg_cross_entropy()
 * (finite for logits of +-1e4); eps = 0 gives exactly tg_cross_entropy()'s values and
 * gradients. Shapes: logits (..., V) f32 or f64, targets (...) ::TG_I32 class ids -> ()
 * (rank 0, logits' dtype). Gradient: dx_r = (softmax(x_r) - q_r) / N_valid for a row not
 * ignored, 0 for an ignored row (forward saves each row's class, so backward never reads the
 * targets). If every target is ignored the loss and gradient are 0 (PyTorch gives NaN: 0/0).
 * Targets are checked at each forward run (::TG_ERR_ARG). Results are bitwise identical for
 * any thread count. Errors: ::TG_ERR_ARG (@p label_smoothing outside [0, 1] or NaN),
 * ::TG_ERR_SHAPE (leading dims differ), ::TG_ERR_DTYPE (as tg_cross_entropy()).
 */
TG_API tg_tensor *tg_cross_entropy_smoothed(tg_ctx *ctx, tg_tensor *logits, tg_tensor *targets,
                                            int64_t ignore_index, double label_smoothing);
/**@}*/

/* ------------------------------------------------------------------------------------------ */
/** @name Op builders: arithmetic, math functions, activations, max, concat, losses
 * More elementwise ops and reductions. Same conventions as the op builders above:
 * f32 and f64 (all operands of one dtype, else ::TG_ERR_DTYPE), results bitwise identical for
 * any thread count, a NULL operand gives NULL without a new error. Values outside an op's
 * domain are not errors: they give the IEEE-754 result (inf or NaN) exactly as PyTorch does,
 * in forward and backward; use tg_graph_opts::detect_anomaly to catch them.
 */
/**@{*/

/**
 * Elementwise `a - b` with broadcasting (PyTorch `torch.sub`).
 * Shapes: a, b broadcastable -> the broadcast shape.
 * Gradients: da = reduce(dy), db = -reduce(dy), reduce() summing over the dims that were
 * broadcast, in a fixed order.
 * Errors: ::TG_ERR_SHAPE (not broadcastable), ::TG_ERR_DTYPE, ::TG_ERR_ARG (another context).
 * Source: ops/arith.c.
 */
TG_API tg_tensor *tg_sub(tg_ctx *ctx, tg_tensor *a, tg_tensor *b);
/**
 * Elementwise `a / b` with broadcasting (PyTorch `torch.div`, true division).
 * Shapes: a, b broadcastable -> the broadcast shape.
 * Gradients: da = reduce(dy / b), db = -reduce(dy (a / b) / b) (reduce() as in tg_sub()).
 * Domain: b = 0 gives +-inf or NaN (0 / 0) as IEEE-754, and so do the gradients; no error.
 * Errors: ::TG_ERR_SHAPE (not broadcastable), ::TG_ERR_DTYPE, ::TG_ERR_ARG (another context).
 * Source: ops/arith.c.
 */
TG_API tg_tensor *tg_div(tg_ctx *ctx, tg_tensor *a, tg_tensor *b);

/**
 * Elementwise negation `y = -x` (PyTorch `torch.neg`). Any shape (rank 0 included) -> same
 * shape. Gradient: dx = -dy. Errors: ::TG_ERR_DTYPE, ::TG_ERR_ARG. Source: ops/unary.c.
 */
TG_API tg_tensor *tg_neg(tg_ctx *ctx, tg_tensor *x);
/**
 * Elementwise `y = e^x` (PyTorch `torch.exp`). Any shape -> same shape.
 * Gradient: dx = dy y (from the output). Overflows to +inf beyond x ~ 88.7 (f32) or ~ 709.8
 * (f64), as IEEE-754. Errors: ::TG_ERR_DTYPE, ::TG_ERR_ARG. Source: ops/unary.c.
 */
TG_API tg_tensor *tg_exp(tg_ctx *ctx, tg_tensor *x);
/**
 * Elementwise natural logarithm `y = ln x` (PyTorch `torch.log`). Any shape -> same shape.
 * Gradient: dx = dy / x. Domain: x = +-0 gives -inf (gradient +-inf), x < 0 gives NaN, as
 * IEEE-754 and PyTorch; no error. Errors: ::TG_ERR_DTYPE, ::TG_ERR_ARG. Source: ops/unary.c.
 */
TG_API tg_tensor *tg_log(tg_ctx *ctx, tg_tensor *x);
/**
 * Elementwise square root `y = sqrt(x)` (PyTorch `torch.sqrt`). Any shape -> same shape.
 * Gradient: dx = dy / (2 y) (from the output; +-inf at x = +-0, as PyTorch). Domain: x < 0
 * gives NaN (and a NaN gradient); no error. Errors: ::TG_ERR_DTYPE, ::TG_ERR_ARG.
 * Source: ops/unary.c.
 */
TG_API tg_tensor *tg_sqrt(tg_ctx *ctx, tg_tensor *x);
/**
 * Elementwise hyperbolic tangent (PyTorch `torch.tanh`). Any shape -> same shape.
 * Gradient: dx = dy (1 - y^2) (from the output). Errors: ::TG_ERR_DTYPE, ::TG_ERR_ARG.
 * Source: ops/unary.c.
 */
TG_API tg_tensor *tg_tanh(tg_ctx *ctx, tg_tensor *x);
/**
 * Elementwise logistic sigmoid `y = 1 / (1 + e^-x)` (PyTorch `torch.sigmoid`); saturates to
 * exactly 0 and 1 without NaN. Any shape -> same shape. Gradient: dx = dy (1 - y) y (from the
 * output). Errors: ::TG_ERR_DTYPE, ::TG_ERR_ARG. Source: ops/unary.c.
 */
TG_API tg_tensor *tg_sigmoid(tg_ctx *ctx, tg_tensor *x);
/**
 * SiLU (swish), `y = x sigmoid(x) = x / (1 + e^-x)` (Elfwing et al. 2018; PyTorch `nn.SiLU`).
 * Any shape -> same shape. Gradient: dx = dy s (1 + x (1 - s)), s = sigmoid(x).
 * silu(-inf) is NaN, as in PyTorch. Errors: ::TG_ERR_DTYPE, ::TG_ERR_ARG. Source: ops/unary.c.
 */
TG_API tg_tensor *tg_silu(tg_ctx *ctx, tg_tensor *x);
/**
 * Elementwise error function `y = erf(x) = 2/sqrt(pi) int_0^x e^{-t^2} dt` (PyTorch
 * `torch.erf`; the C library's erf / erff). Any shape -> same shape. Gradient:
 * dx = dy 2/sqrt(pi) e^{-x^2} (from the input). The exact GELU's second derivative is written
 * with it (docs/autodiff.md). Errors: ::TG_ERR_DTYPE, ::TG_ERR_ARG. Source: ops/unary.c.
 */
TG_API tg_tensor *tg_erf(tg_ctx *ctx, tg_tensor *x);
/**
 * GELU with the tanh approximation (Hendrycks & Gimpel 2016, sec. 2; PyTorch
 * `F.gelu(x, approximate='tanh')`, the `gelu` of GPT-2):
 * y = x/2 (1 + tanh(u)), u = sqrt(2/pi) (x + 0.044715 x^3).
 * Gradient: dx = dy (1/2 (1 + t) + x/2 (1 - t^2) sqrt(2/pi) (1 + 3 * 0.044715 x^2)), t = tanh(u).
 * Any shape -> same shape. For the exact (erf) GELU see tg_gelu(). gelu_tanh(-inf) is NaN, as
 * in PyTorch. Errors: ::TG_ERR_DTYPE, ::TG_ERR_ARG. Source: ops/unary.c.
 */
TG_API tg_tensor *tg_gelu_tanh(tg_ctx *ctx, tg_tensor *x);

/**
 * Log-softmax over the last axis (PyTorch `F.log_softmax(x, dim=-1)`), max-subtracted:
 * y_i = (x_i - m) - log(sum_j exp(x_j - m)), m = max_j x_j, so it is finite for any finite
 * logits (e.g. +-1e4). Gradient: dx = dy - exp(y) sum_j dy_j (from the output).
 * A row whose entries are all -inf gives all -inf and a zero gradient (PyTorch gives NaN; this
 * matches tg_softmax()'s fully masked rows); a -inf entry in another row gives -inf (gradient
 * dy, as PyTorch); a NaN or +inf entry makes its row NaN, as PyTorch.
 * Shapes: x (..., N), rank >= 1 -> same shape.
 * Errors: ::TG_ERR_SHAPE (rank 0), ::TG_ERR_DTYPE, ::TG_ERR_ARG. Source: ops/log_softmax.c.
 */
TG_API tg_tensor *tg_log_softmax(tg_ctx *ctx, tg_tensor *x);

/**
 * Maximum over @p axis (negative counts from the end), PyTorch `torch.max(x, dim, keepdim)`'s
 * values (or `torch.amax` without ties).
 * Shapes: x (..., N, ...) -> (..., ...), or (..., 1, ...) with @p keepdim.
 * Gradient: dy goes to the FIRST maximum along the axis (the index PyTorch's `torch.max`
 * returns), 0 elsewhere; forward saves that index, so backward does not read x.
 * Ties: the first of equal values wins (+0 and -0 are equal). NaN: like PyTorch, NaN is the
 * maximum: a slice holding a NaN gives NaN, and the gradient goes to its first NaN.
 * Errors: ::TG_ERR_AXIS (axis out of range; a rank-0 x has no axis), ::TG_ERR_DTYPE,
 * ::TG_ERR_ARG. Source: ops/max.c.
 */
TG_API tg_tensor *tg_max(tg_ctx *ctx, tg_tensor *x, int axis, bool keepdim);

/** Most tensors one tg_concat() call joins. */
#define TG_CONCAT_MAX 8
/**
 * Concatenate @p n tensors along @p axis (negative counts from the end), PyTorch
 * `torch.cat(xs, dim=axis)`. Copies. The same tensor may appear more than once.
 * Shapes: xs[k] (..., N_k, ...), equal ranks >= 1 and equal dims except on @p axis ->
 * (..., N_0 + ... + N_{n-1}, ...). Gradient: dxs[k] = the slice of dy that xs[k] filled.
 * Errors: ::TG_ERR_ARG (@p xs NULL, @p n outside 1..::TG_CONCAT_MAX, another context),
 * ::TG_ERR_SHAPE (a rank-0 tensor, ranks differ, or another dim differs, e.g.
 * `tg_concat: tensors 0 and 2 differ on axis 1 (3 vs 4)`), ::TG_ERR_AXIS, ::TG_ERR_DTYPE,
 * ::TG_ERR_OVERFLOW (the joined size). A NULL entry gives NULL without a new error (as a NULL
 * operand of any builder). Source: ops/concat.c.
 */
TG_API tg_tensor *tg_concat(tg_ctx *ctx, tg_tensor *const *xs, int n, int axis);

/** How a loss reduces its per-element terms (PyTorch's `reduction=`). */
typedef enum tg_reduction {
    TG_REDUCTION_MEAN = 0, /**< `'mean'`: the mean over every element (a rank-0 result) */
    TG_REDUCTION_SUM = 1,  /**< `'sum'`: the sum over every element (a rank-0 result) */
    TG_REDUCTION_NONE = 2  /**< `'none'`: the per-element terms (the input's shape) */
} tg_reduction;

/**
 * Mean squared error (PyTorch `F.mse_loss(input, target, reduction=...)`): the terms are
 * e_i = (input_i - target_i)^2, reduced by @p reduction: mean (sum / numel), sum, or none.
 * The mean and sum are accumulated in double (for f32 too) over fixed blocks, so they are the
 * same for any thread count. Both operands may be differentiable.
 * Shapes: input and target the same shape (PyTorch broadcasts them with a warning; here a
 * mismatch is an error) -> () for mean and sum, the input's shape for none.
 * Gradients: d input = 2 (input - target) dy / numel (mean), 2 (input - target) dy (sum; none
 * per element); d target = -d input.
 * Errors: ::TG_ERR_SHAPE (shapes differ), ::TG_ERR_ARG (unknown @p reduction, another
 * context), ::TG_ERR_DTYPE. Source: ops/loss.c.
 */
TG_API tg_tensor *tg_mse_loss(tg_ctx *ctx, tg_tensor *input, tg_tensor *target,
                              tg_reduction reduction);
/**@}*/

/* ------------------------------------------------------------------------------------------ */
/** @name Static graphs and autodiff
 * Life of a graph: build ops (record) -> tg_graph_new() (topological order, memory planned:
 * every buffer forward and backward need is allocated here) -> tg_graph_forward() any number of
 * times with new input data -> tg_graph_backward() -> read gradients -> tg_graph_zero_grad().
 */
/**@{*/
/**
 * Build a graph computing @p outputs (and everything they depend on). Iterative topological
 * sort (no recursion, no size limit). Plans every buffer of forward and backward (op outputs,
 * saved values, gradients, workspace) by lifetime in one arena it allocates now (or grows a
 * shared one to: tg_graph_opts::arena), and the accumulated gradient of every leaf that
 * requires grad, so running cannot fail for lack of memory (tg_graph_memory() reports the
 * plan).
 * Errors: ::TG_ERR_ARG (n_outputs < 1 or a NULL output), ::TG_ERR_NOMEM, or the context's
 * recorded build error if one is pending (a graph is never built over a failed builder). A
 * run-time error left by an earlier call (a failed forward, say) does not prevent it.
 * Returns NULL on error. Owned by the context.
 */
TG_API tg_graph *tg_graph_new(tg_ctx *ctx, tg_tensor *const *outputs, int n_outputs);
/**
 * Compute precision of a graph's matrix products (tg_graph_opts::precision).
 *
 * ::TG_PRECISION_BF16 is mixed precision in the sense of Kalamkar et al. 2019 ("A Study of
 * BFLOAT16 for Deep Learning Training", arXiv 1905.12322) and of oneDNN's `fpmath_mode=bf16`:
 * the operands of the matrix products (dense and dense_act, matmul, flash attention's QK^T
 * and PV, forward and backward) are rounded to bf16 (1 sign, 8 exponent, 7 mantissa bits;
 * round to nearest even) and their products accumulated in f32. Everything else stays f32:
 * parameters, gradients, optimizer state, the loss, softmax, layer-norm statistics and every
 * reduction. A product of length K then has a relative error up to about 2^-8 per operand
 * instead of 2^-24 (docs/kernels.md, "bf16 GEMM", gives the bound). Results are bitwise
 * independent of the thread count; the AVX512_BF16 and the portable kernel agree to the last
 * bits except for subnormal operands.
 */
typedef enum tg_precision {
    TG_PRECISION_F32 = 0,  /**< f32 products (the default) */
    TG_PRECISION_BF16 = 1, /**< bf16 operands, f32 accumulation */
} tg_precision;

/** Options for tg_graph_new_opts(); zero-initialise. */
typedef struct tg_graph_opts {
    /**
     * Kept for source compatibility; ignored. Every graph now plans its gradients (and its
     * activations, saved values and workspace) by liveness in one arena (see "Memory").
     */
    bool share_gradients;
    /**
     * Inference graph: no gradient buffers, nothing saved for backward beyond the op that
     * saves it; tg_graph_backward() fails with ::TG_ERR_STATE. Use it for evaluation and
     * sampling: its arena is a fraction of a training graph's.
     */
    bool no_grad;
    /**
     * Each tg_graph_forward() is followed by at most one tg_graph_backward() (PyTorch's
     * default, `retain_graph=False`): a value backward reads is released as soon as its last
     * backward reader ran, so gradients can take its memory (the training loop's setting; the
     * default text model's arena falls by about 15%). A second backward before the next
     * forward then fails with ::TG_ERR_STATE. By default (false) values backward reads live
     * to the end of backward, so backward may run several times on one forward (several
     * outputs one by one, or accumulating twice).
     */
    bool one_backward;
    /**
     * Debug: give every planned buffer its own memory (no sharing, no in-place). Results are
     * bitwise identical to the planned graph; the tests use it as the reference.
     */
    bool no_reuse;
    /**
     * Debug: when a planned buffer's lifetime ends, fill it with NaN, so a kernel that reads a
     * buffer after the planner gave its memory away produces NaN instead of a silently wrong
     * value.
     */
    bool poison;
    /**
     * NaN/Inf tripwire (PyTorch's `torch.autograd.detect_anomaly`). Forward checks every
     * node's output in topological order as it is computed, leaves (inputs, parameters,
     * constants) included; backward checks the upstream gradients it seeds, then after each
     * backward rule every gradient that rule wrote, in execution order, then that adding this
     * call's leaf gradients to the accumulated ones stays finite. The first NaN or infinity
     * stops the call with ::TG_ERR_NONFINITE and a message naming the phase, the op, the
     * tensor, its shape, the flat index and the value, e.g.
     * `tg_graph_forward: anomaly in forward: op 'softmax' output 'scores' (2, 4, 12, 12) has
     * nan at flat index 17`; tg_graph_anomaly() gives the same as fields. A stopped forward
     * leaves the graph not forwarded (backward refuses until a forward succeeds); a stopped
     * backward leaves every leaf's accumulated gradient as it was. -inf is accepted where it is
     * the point: in an attention mask (the mask operand of tg_add_mask(), and the layout ops
     * (reshape, transpose, permute, narrow) that shaped it) and in tg_add_mask()'s output (and
     * layout ops of it); NaN and +inf never are. Works for f32 and f64 and every op; off
     * (the default), it costs nothing and NaN flows through as usual.
     */
    bool detect_anomaly;
    /**
     * Run in this shared arena (tg_arena_new()) instead of an arena of the graph's own; NULL
     * (the default): the graph allocates its own. The graph allocates no arena: building it
     * grows @p arena to its planned need if that is larger (so runs never allocate). Values
     * the graph computes are then valid only until another graph of the arena runs (see
     * tg_arena_new() for the rules). Errors of tg_graph_new_opts(): ::TG_ERR_ARG if the arena
     * belongs to another context, ::TG_ERR_NOMEM if it cannot grow (the arena is unchanged).
     */
    tg_arena *arena;
    /**
     * Compute precision of the matrix products (::tg_precision; 0 = ::TG_PRECISION_F32, today's
     * bits). ::TG_PRECISION_BF16: see ::tg_precision for what it changes. f64 graphs refuse it
     * (::TG_ERR_DTYPE from tg_graph_new_opts()).
     */
    int precision;
} tg_graph_opts;

/** tg_graph_new() with options (@p opts NULL: the defaults). Errors: as tg_graph_new(). */
TG_API tg_graph *tg_graph_new_opts(tg_ctx *ctx, tg_tensor *const *outputs, int n_outputs,
                                   const tg_graph_opts *opts);

/**
 * A memory arena that several graphs of @p ctx share (tg_graph_opts::arena), because only one
 * of them runs at a time: a training loop over length-bucketed batches builds one graph per
 * batch shape (n, S, T), and with an arena each they would hold the sum of their plans; with
 * one shared arena they hold the largest. The arena starts empty; each tg_graph_new_opts()
 * (and a re-plan for more threads, in tg_graph_forward()) grows it to that graph's planned
 * need when it is larger, so its size is always the largest need of the graphs built with it
 * (tg_arena_bytes()). Growing replaces the memory block: the bytes the last graph computed are
 * carried over, so growing invalidates nothing. The arena never shrinks.
 *
 * Rules (every graph built with the arena):
 * - Values a graph computes (outputs, tg_keep() tensors, saved values, gradients of op results)
 *   are valid until another graph of the same arena runs (tg_graph_forward()). Reading an op
 *   result afterwards through tg_tensor_data(), tg_tensor_grad() (NULL), tg_get(),
 *   tg_grad_get() (NaN), tg_tensor_get_data(), tg_tensor_get_grad() or tg_tensor_copy()
 *   (::TG_ERR_STATE, "... another graph sharing that arena ran since"; tg_set() changes
 *   nothing) is refused rather than
 *   returning the other graph's bytes; run the graph again to read it. Copy out what you
 *   keep (the loss) before running the next graph.
 * - tg_graph_backward() must follow its own graph's tg_graph_forward() with no other graph of
 *   the arena run in between; otherwise it fails with ::TG_ERR_STATE (nothing changed) and the
 *   message says so. Run the forward again first.
 * - Leaves are untouched by sharing: parameters' data and their accumulated gradients are the
 *   leaves' own memory, so gradients accumulate across graphs of any shape
 *   (forward A, backward A, forward B, backward B sums both into each parameter).
 * - tg_graph_memory(): tg_memory_report::arena (and peak) is the graph's own need;
 *   tg_memory_report::arena_shared the arena's current size, to count once for all its graphs.
 *
 * Inference graphs (tg_graph_opts::no_grad) may share the arena of training graphs too
 * (evaluation between training steps then adds no memory unless its plan is the largest).
 *
 * Ownership: the context owns the arena; it is released by tg_ctx_free() or by a
 * tg_ctx_rewind() to a mark taken before tg_arena_new() (which also releases every graph built
 * with it, all being newer). A rewind to a later mark frees the graphs made after that mark
 * and leaves the arena usable, at its grown size. Freeing a graph (tg_graph_free()) never
 * frees the arena. Arena and graphs must belong to one context and run on one thread at a
 * time (as the context does).
 *
 * Errors: NULL with ::TG_ERR_NOMEM recorded; NULL for a NULL @p ctx.
 */
TG_API tg_arena *tg_arena_new(tg_ctx *ctx);
/** Bytes of @p arena's memory block: the largest planned need of the graphs built with it so
 *  far (0 before the first; NULL gives 0). */
TG_API size_t tg_arena_bytes(const tg_arena *arena);
/** Bytes of planned gradient buffers (non-leaf gradients and this call's leaf gradients),
 *  before sharing: tg_memory_report::gradients. */
TG_API size_t tg_graph_grad_bytes(const tg_graph *g);

/**
 * What a graph's memory plan holds, in bytes. The categories are the sizes of the buffers the
 * planner placed (each rounded up to 64 bytes), before sharing; `arena` is what the shared
 * arena really takes (the planned peak of activations + saved + gradients + workspace), and
 * `peak` adds the leaves' own memory. Optimizer state is not part of a graph (see
 * tg_optim_state_bytes() in tgrad_train.h).
 */
typedef struct tg_memory_report {
    size_t parameters;      /**< data of the parameters the graph reads (owned by them) */
    size_t parameter_grads; /**< their accumulated gradients (owned by them) */
    size_t inputs;          /**< data of inputs and constants the graph reads */
    size_t input_grads;     /**< accumulated gradients of inputs that require grad */
    size_t activations;     /**< op outputs (views take none) */
    size_t saved;           /**< values saved by forward for backward (or forward scratch) */
    size_t gradients;       /**< gradients of op results and this call's leaf gradients */
    size_t workspace;       /**< kernel workspace (GEMM packing, broadcast scratch) */
    size_t arena;           /**< the arena: all of the four above after sharing (with a
                                 shared arena, the part of it this graph needs) */
    size_t peak;            /**< parameters + parameter_grads + inputs + input_grads + arena */
    size_t arena_shared;    /**< graphs built with tg_graph_opts::arena: the shared arena's
                                 current size (tg_arena_bytes(): the largest need of its graphs
                                 so far; count it once for all of them); else 0 */
} tg_memory_report;

/** Fill @p report with @p g's memory plan. Errors: ::TG_ERR_ARG (NULL). */
TG_API tg_status tg_graph_memory(const tg_graph *g, tg_memory_report *report);

/**
 * A parallel site's governor (docs/kernels.md, "Threads"). A site is a loop that may run on
 * several threads (an elementwise or row loop, the GEMM for products of one size class).
 * After each parallel region the site measures its gain: the time its fastest thread's pace
 * says one thread would have taken, minus the time the team took. While the running mean of
 * the gains is negative (other processes want the cores), the site runs on one thread for a
 * back-off period that doubles with each losing try (1 ms to 256 ms). A graph keeps one record
 * per site its kernels ran (tg_graph_par_site()), the context one per site of the library's
 * direct calls such as optimizer steps (tg_ctx_par_site()). The governor chooses only how many
 * threads run, never the order of any sum: results are the same bits either way.
 */
typedef struct tg_par_site {
    const char *site;    /**< the loop: "ops/layer_norm_kernel.h:132" (source file and line),
                              or "gemm" for the matrix product; static storage */
    int size_class;      /**< "gemm": products of about 2^size_class flops; else 0 */
    int64_t node;        /**< the graph node (tg_graph_node() index) that ran it last; -1 for
                              the context's sites */
    const char *op;      /**< that node's op name ("" for the context's sites) */
    int threads;         /**< threads its last run used (1 while it backs off) */
    int64_t regions;     /**< parallel regions it ran and measured */
    int64_t serial;      /**< runs on one thread because it backed off */
    double mean_gain_us; /**< running mean of the regions' gains, microseconds (newest weighs
                              1/4; negative: the team lost time against one thread) */
    double backoff_us;   /**< the last back-off period, microseconds; 0 once the mean gain is
                              positive again */
    bool backing_off;    /**< in a back-off period now */
} tg_par_site;

/** Number of parallel sites @p g's kernels have run (0 before the first run). */
TG_API int64_t tg_graph_par_sites(const tg_graph *g);
/** Fill @p out with @p g's site @p i (0 .. tg_graph_par_sites() - 1, in the order they first
 *  ran). Errors: ::TG_ERR_ARG (NULL, or @p i out of range). */
TG_API tg_status tg_graph_par_site(const tg_graph *g, int64_t i, tg_par_site *out);
/** Number of parallel sites the library's direct calls on @p ctx have run (optimizer steps). */
TG_API int64_t tg_ctx_par_sites(const tg_ctx *ctx);
/** Fill @p out with @p ctx's site @p i. Errors: ::TG_ERR_ARG (NULL, or @p i out of range). */
TG_API tg_status tg_ctx_par_site(const tg_ctx *ctx, int64_t i, tg_par_site *out);

/**
 * Keep @p t readable: its data (and, in a graph with gradients, its gradient) stays valid after
 * tg_graph_forward() and tg_graph_backward() of graphs built AFTER this call, and backward may
 * start from it. The outputs passed to tg_graph_new() are always kept. Every other op result's
 * memory may be reused by the planner once its last reader has run, so after a run reading it
 * (tg_get(), tg_tensor_data(), ...) is refused with ::TG_ERR_STATE and a message naming
 * tg_keep: read such tensors only through a graph that outputs or keeps them. Keeping costs
 * memory: the value (and gradient) lives to the end of the run. Errors: ::TG_ERR_ARG (NULL).
 */
TG_API tg_status tg_keep(tg_tensor *t);

/** Release the graph: its arena (every planned buffer) and its own arrays. Op results it ran
 *  lose their data binding (tg_tensor_data() gives NULL until another graph runs them);
 *  leaves and their gradients stay. A graph built with a shared arena (tg_graph_opts::arena)
 *  leaves the arena's memory to the arena. NULL is a no-op. */
TG_API void tg_graph_free(tg_graph *g);
/** Number of tensors (leaves and ops) in topological order. */
TG_API int64_t tg_graph_size(const tg_graph *g);
/** The i-th tensor in topological order (NULL if out of range). */
TG_API tg_tensor *tg_graph_node(const tg_graph *g, int64_t i);
/** Number of leaves that receive gradients (params, inputs with requires_grad). */
TG_API int64_t tg_graph_n_grad_leaves(const tg_graph *g);
/** The i-th such leaf, in topological order. */
TG_API tg_tensor *tg_graph_grad_leaf(const tg_graph *g, int64_t i);

/** Run every op in topological order. Memory was planned at build, so the only failures are
 *  ::TG_ERR_ARG (NULL graph), a data check of an op that reads ids from data set after the
 *  build (an out-of-range token id or target: ::TG_ERR_ARG, message names the element), and,
 *  with tg_graph_opts::detect_anomaly, ::TG_ERR_NONFINITE. These are run-time errors: they do
 *  not stick (see "Errors come in two kinds"), so fixing the data and building or running
 *  again works without tg_ctx_clear_error(). */
TG_API tg_status tg_graph_forward(tg_graph *g);
/**
 * Reverse-mode autodiff from @p y (one of the graph's tensors). With @p dy NULL, @p y must have
 * one element and is seeded with 1 (d loss / d loss); otherwise @p dy (same shape and dtype as
 * y) is the upstream gradient, like PyTorch's `y.backward(dy)`. Within a call, every use of a
 * tensor adds its contribution (shared weights, x used as q, k and v). Across calls, leaf
 * gradients **accumulate** exactly as PyTorch's `grad += new_grad` (this call's gradient is
 * computed apart and then added, so two identical calls give exactly twice one); gradients of
 * intermediate tensors are reset by each call. Call tg_graph_zero_grad() between steps.
 * Errors (run-time: they do not stick): ::TG_ERR_STATE (forward not run, or the last forward
 * failed, or, with a shared arena, another graph of the arena ran since this graph's forward),
 * ::TG_ERR_SHAPE (dy or y mismatched, y not scalar with dy NULL), ::TG_ERR_ARG (y not
 * in the graph, or, with shared gradients, not an output; dy of another context),
 * ::TG_ERR_NOGRAD (y does not require grad), ::TG_ERR_NONFINITE (tg_graph_opts::detect_anomaly
 * found a NaN or infinity). A failed call changes no leaf gradient.
 */
TG_API tg_status tg_graph_backward(tg_graph *g, tg_tensor *y, const tg_tensor *dy);
/** Like tg_graph_backward() with several seeded outputs at once; dys[i] NULL seeds 1. */
TG_API tg_status tg_graph_backward_multi(tg_graph *g, int n, tg_tensor *const *ys,
                                         const tg_tensor *const *dys);
/** Zero the gradients of every leaf in the graph. */
TG_API void tg_graph_zero_grad(tg_graph *g);

/**
 * Gradients as graph nodes (`torch.autograd.grad(outputs, inputs, grad_outputs,
 * create_graph=True)`, `tf.gradients`): append to the graph being built the nodes of
 * grads[j] = sum_i d<seeds[i], outputs[i]>/d wrt[j] (the vector-Jacobian product), built from
 * ordinary ops by each op's reverse rule written as ops. They are computed when a graph that
 * contains them runs, can feed further computation (a gradient penalty in a loss), be drawn
 * (DOT) and be differentiated again: tg_graph_backward() over a graph containing them, or
 * tg_grad() of them, gives second derivatives (Hessian-vector products).
 * Shapes and dtypes: grads[j] has wrt[j]'s shape and dtype (f32 or f64); seeds[i] has
 * outputs[i]'s shape and dtype; @p seeds NULL seeds each output (then of one element) with 1.
 * An input the outputs do not depend on gets a zero constant (PyTorch's
 * `materialize_grads=True`). @p wrt may name any tensors of the outputs' graph (leaves or
 * intermediate results); i32 tensors carry no gradient. Repeated contributions are summed in a
 * fixed order (reverse topological, then source order), so results are bitwise reproducible.
 * Ownership: the nodes belong to the context, like any op's.
 * Errors (build errors: they stick; grads[] all NULL): ::TG_ERR_ARG (NULL arrays, counts
 * < 1, a tensor of another context), ::TG_ERR_DTYPE (an output or input not f32/f64),
 * ::TG_ERR_SHAPE (no seeds and an output of more than one element, a seed of another shape or
 * dtype), ::TG_ERR_NOGRAD (an op on the way without a reverse rule as ops yet, named with its
 * node; docs/autodiff.md lists the ops that have one), ::TG_ERR_NOMEM, and any builder's.
 * Source: reverse accumulation (Griewank & Walther, "Evaluating Derivatives", 2nd ed., ch. 3);
 * src/graph/grad.c, ops/vjp.c.
 */
TG_API tg_status tg_grad(tg_ctx *ctx, int n_out, tg_tensor *const *outputs,
                         tg_tensor *const *seeds, int n_wrt, tg_tensor *const *wrt,
                         tg_tensor **grads);

/**
 * Hessian-vector products as graph nodes (`torch.autograd.functional.hvp`, reverse over
 * reverse): hv[j] = sum_k (d^2 y / dx_j dx_k) v[k] for the scalar @p y and the tensors
 * wrt[0..n-1], built as the gradient (tg_grad()) of S = sum_k <dy/dx_k, v[k]>.
 * Shapes and dtypes: y has one element; v[k] and hv[k] have wrt[k]'s shape and dtype.
 * Ownership: the nodes belong to the context. Cost when run: about two forward+backward passes.
 * Errors (build errors: they stick; hv[] all NULL): ::TG_ERR_ARG (NULL arrays, n < 1),
 * ::TG_ERR_SHAPE (y not a scalar, v[k] not of wrt[k]'s shape or dtype), and tg_grad()'s (an
 * op on the way without a reverse rule as ops: ::TG_ERR_NOGRAD naming it).
 * Source: Pearlmutter 1994, "Fast exact multiplication by the Hessian"; src/graph/hessian.c.
 */
TG_API tg_status tg_hvp(tg_ctx *ctx, tg_tensor *y, int n, tg_tensor *const *wrt,
                        tg_tensor *const *v, tg_tensor **hv);

/**
 * Forward mode as graph nodes (`torch.autograd.forward_ad`, `jax.jvp`): append to the graph
 * being built the nodes of the Jacobian-vector products
 * out_tangents[i] = sum_j (d outputs[i] / d inputs[j]) tangents[j],
 * each op's tangent built from its sources' tangents by its forward rule written as ops (linear
 * ops apply themselves to the tangents, multilinear ops sum their terms, elementwise functions
 * multiply by their derivative). An input's tangent is the one given (an intermediate input is
 * taken as an independent variable); an input given twice adds its tangents; an output that
 * depends on no input gets a zero constant.
 * Shapes and dtypes: tangents[j] has inputs[j]'s shape and dtype (f32 or f64); out_tangents[i]
 * has outputs[i]'s. Ownership: the nodes belong to the context. The tangent nodes can be run,
 * drawn and differentiated (tg_grad() of them: forward over reverse and back).
 * Errors (build errors: they stick; out_tangents[] all NULL): ::TG_ERR_ARG (NULL arrays,
 * counts < 1, a tensor of another context), ::TG_ERR_DTYPE (an input or output not f32/f64),
 * ::TG_ERR_SHAPE (a tangent not of its input's shape and dtype), ::TG_ERR_NOGRAD (an op on the
 * way without a forward rule yet, named with its node; docs/autodiff.md lists the ops that
 * have one), ::TG_ERR_NOMEM, and any builder's.
 * Source: forward accumulation (Griewank & Walther, "Evaluating Derivatives", 2nd ed., ch. 3);
 * src/graph/jvp.c.
 */
TG_API tg_status tg_jvp(tg_ctx *ctx, int n_in, tg_tensor *const *inputs,
                        tg_tensor *const *tangents, int n_out, tg_tensor *const *outputs,
                        tg_tensor **out_tangents);

/**
 * The dense Jacobian J[i][j] = d y_i / d x_j of @p y (m elements, flat row-major order) with
 * respect to @p x (n elements), by rows: one vector-Jacobian product (tg_grad() seeded with
 * e_i) per output element, each a run of a graph built here. Written to @p out as m x n
 * doubles, row-major; @p cap is out's capacity in doubles. The context RNG is restored before
 * each run (stochastic ops see the same draws) and at the end; x's data is unchanged.
 * For small inputs: its cost is m graph runs. Errors (run-time: they do not stick): ::TG_ERR_ARG
 * (NULL, a tensor of another context, out smaller than m x n), those of tg_grad() (naming an
 * op without a reverse rule as ops) and of the runs. Source: src/graph/hessian.c.
 */
TG_API tg_status tg_jacobian(tg_ctx *ctx, tg_tensor *y, tg_tensor *x, double *out, size_t cap);

/**
 * The same dense Jacobian J[i][j] = d y_i / d x_j (m x n doubles, row-major in @p out) by
 * columns: one Jacobian-vector product (tg_jvp() along e_j) per input element, each a run of a
 * graph built here (forward mode: cheaper than tg_jacobian() when x has fewer elements than
 * y). The context RNG is restored as in tg_jacobian(); x's data is unchanged. Errors
 * (run-time): ::TG_ERR_ARG (NULL, another context, out smaller than m x n), those of tg_jvp()
 * (naming an op without a forward rule) and of the runs. Source: src/graph/hessian.c.
 */
TG_API tg_status tg_jacobian_fwd(tg_ctx *ctx, tg_tensor *y, tg_tensor *x, double *out,
                                 size_t cap);

/**
 * The dense Hessian H[i][j] = d^2 y / dx_i dx_j of the scalar @p y with respect to @p x (n
 * elements), by rows: one Hessian-vector product (tg_hvp()) with e_i per element, each a run
 * of a graph built here. Written to @p out as n x n doubles, row-major (@p cap: out's capacity
 * in doubles). Symmetric up to rounding. The context RNG is restored as in tg_jacobian().
 * Errors (run-time): ::TG_ERR_ARG (NULL, another context, out too small), ::TG_ERR_SHAPE (y not
 * a scalar), those of tg_hvp() and of the runs. Source: src/graph/hessian.c.
 */
TG_API tg_status tg_hessian(tg_ctx *ctx, tg_tensor *y, tg_tensor *x, double *out, size_t cap);

/** Which run found a NaN or infinity (tg_graph_opts::detect_anomaly). */
typedef enum tg_anomaly_phase {
    TG_ANOMALY_NONE = 0,     /**< the last run found none (or the tripwire is off) */
    TG_ANOMALY_FORWARD = 1,  /**< tg_graph_forward() */
    TG_ANOMALY_BACKWARD = 2  /**< tg_graph_backward() / tg_graph_backward_multi() */
} tg_anomaly_phase;

/** The first non-finite value the tripwire found (see tg_graph_anomaly()). */
typedef struct tg_anomaly_report {
    tg_anomaly_phase phase;
    /** Forward: the registry name of the op that computed the value ("softmax"), or "input",
     *  "parameter", "constant" for a leaf. Backward: the op whose backward rule wrote the
     *  gradient, or "upstream" (the seed of an output: the caller's dy) or "accumulated" (adding
     *  this call's leaf gradient to the accumulated one overflows). */
    char op[32];
    /** Forward: the tensor holding the value. Backward: the tensor whose gradient holds it. */
    char tensor[TG_NAME_MAX];
    /** Backward, written by a rule: the output of the op whose rule ran ("" otherwise). */
    char writer[TG_NAME_MAX];
    int rank;                      /**< rank of that tensor */
    int64_t shape[TG_MAX_RANK];    /**< its shape, outermost first (unused entries 1) */
    int64_t index;                 /**< flat row-major index of the value */
    double value;                  /**< the value (NaN, +inf or -inf) */
    char message[512];             /**< the one-line message the call recorded */
} tg_anomaly_report;

/**
 * What the tripwire found in @p g's most recent forward or backward run (phase
 * ::TG_ANOMALY_NONE if that run found nothing, or detect_anomaly is off). Stays valid until
 * the next run of @p g. Errors: ::TG_ERR_ARG for NULL.
 */
TG_API tg_status tg_graph_anomaly(const tg_graph *g, tg_anomaly_report *report);
/**@}*/

/* ------------------------------------------------------------------------------------------ */
/** @name Op registry */
/**@{*/
/** Number of registered ops. */
TG_API int tg_op_count(void);
/** Name of registered op @p i (0 <= i < tg_op_count()), NULL otherwise. */
TG_API const char *tg_op_name(int i);
/** Whether registered op @p i has a backward rule. */
TG_API bool tg_op_has_backward(int i);
/** Index of the op named @p name, or -1. */
TG_API int tg_op_find(const char *name);
/**@}*/

/* ------------------------------------------------------------------------------------------ */
/** @name Gradient checking */
/**@{*/
/** Most random projections tg_gradcheck() checks (tg_gradcheck_opts::n_projections); each
 *  costs two forward passes. */
#define TG_GRADCHECK_MAX_PROJECTIONS 100000

/** Which derivatives tg_gradcheck() checks against central differences. */
typedef enum tg_gradcheck_mode {
    TG_GRADCHECK_REVERSE = 0, /**< the backward kernels' gradients (the default) */
    TG_GRADCHECK_FORWARD = 1, /**< forward mode: JVPs built as nodes (tg_jvp()), and the adjoint
                                   identity <r, J u> = <J^T r, u> */
    TG_GRADCHECK_BOTH = 2     /**< both (PyTorch's `check_forward_ad=True`) */
} tg_gradcheck_mode;

/** Options for tg_gradcheck(). Fill with tg_gradcheck_defaults(). */
typedef struct tg_gradcheck_opts {
    double eps;           /**< central-difference step (f64: 1e-6, f32: 1e-3) */
    double atol;          /**< absolute tolerance (f64: 1e-5, f32: 1e-2) */
    double rtol;          /**< relative tolerance (f64: 1e-3, f32: 1e-2) */
    int n_projections;    /**< 0: check every element; k in 1..::TG_GRADCHECK_MAX_PROJECTIONS:
                               check k random projections v^T J u instead (cheap for large
                               tensors) */
    uint64_t seed;        /**< seed of r (loss weights) and of the projections */
    int64_t max_elements; /**< 0: no limit; else check at most this many elements per tensor
                               (spread evenly), a cheaper middle ground */
    tg_gradcheck_mode mode; /**< reverse (default), forward or both */
} tg_gradcheck_opts;

/** PyTorch-style defaults for @p dt (f64: eps 1e-6, atol 1e-5, rtol 1e-3). */
TG_API tg_gradcheck_opts tg_gradcheck_defaults(tg_dtype dt);

/** What tg_gradcheck() found. */
typedef struct tg_gradcheck_report {
    bool passed;                  /**< every check below passed */
    bool backward_deterministic;  /**< a second backward gave bitwise-identical gradients */
    bool zero_upstream_ok;        /**< a zero upstream gradient gave all-zero gradients */
    bool backward_accumulates;    /**< every backward rule added (dx += ...) into its inputs'
                                       gradients pre-filled with non-zero values */
    int64_t n_checked;            /**< elements (or projections) compared */
    int n_tensors;                /**< differentiable leaves checked */
    double max_abs_err;           /**< max |analytic - numeric| */
    double max_rel_err;           /**< max |analytic - numeric| / max(|numeric|, atol) */
    /* the worst element: largest |a - n| / (atol + rtol |n|) */
    char worst_tensor[TG_NAME_MAX]; /**< its tensor's name ("" in projection mode) */
    int64_t worst_index;          /**< flat index (projection number in projection mode) */
    int worst_rank;
    int64_t worst_coords[TG_MAX_RANK];
    double worst_analytic, worst_numeric, worst_abs_err, worst_rel_err;
    char message[256];            /**< one-line summary */
    bool adjoint_ok;              /**< forward mode: <r, J u> = <J^T r, u> for a random u to
                                       1e-10 (f64) or 1e-4 (f32) of their scale; true when not
                                       checked */
    double adjoint_err;           /**< forward mode: |<r, J u> - <J^T r, u>| over that scale */
} tg_gradcheck_report;

/**
 * Compare analytic gradients of @p y with central differences, for every differentiable leaf
 * (parameters and inputs with requires_grad) that @p y depends on.
 * The scalar checked is L = sum(r * y) with r uniform in [0.5, 1.5) from @p opts->seed, so no
 * gradient cancels. Element mode: numeric = (L(x + eps) - L(x - eps)) / (2 eps) per element;
 * pass iff |analytic - numeric| <= atol + rtol * |numeric| everywhere (PyTorch `gradcheck`).
 * Projection mode: for k random directions u, compares grad . u with the directional
 * difference. Also checks that a second backward is bitwise identical, that a zero upstream
 * gradient gives zero gradients, and that every op's backward rule accumulates (dx += ...)
 * into its inputs' gradients: each rule runs once more on gradient buffers pre-filled with
 * non-zero values, as a second consumer of the input would leave them, and must add the same
 * contribution (to rounding: 1e-3 relative in f32, 1e-9 in f64); a rule that assigns fails
 * the check, naming its node, op and input in the message. Leaf data and gradients are
 * restored afterwards.
 * Forward mode (opts->mode ::TG_GRADCHECK_FORWARD or ::TG_GRADCHECK_BOTH, PyTorch's
 * `check_forward_ad`): the analytic side is <r, J u> from the Jacobian-vector products built
 * as nodes (tg_jvp()): per element u = e_i (the JVP columns), or along the projections' random
 * u, against the same central differences; and the adjoint identity <r, J u> = <J^T r, u>
 * (J^T r from the backward kernels) for a random u, with no finite-difference noise
 * (report->adjoint_ok, adjoint_err). The tangent nodes stay in the context (context memory).
 * The graph is built internally (context memory). @p opts NULL means defaults for y's dtype.
 * Returns ::TG_OK if passed, ::TG_ERR_GRADCHECK if not (see @p report), or another error
 * (::TG_ERR_ARG for NULL, @p y of another context, or invalid options: eps not finite and
 * > 0, a negative tolerance or max_elements, n_projections outside 0..
 * ::TG_GRADCHECK_MAX_PROJECTIONS, an unknown mode; ::TG_ERR_NOGRAD if nothing is
 * differentiable, or in forward mode an op without a forward rule, named; a pending build
 * error). These are run-time errors: they do not stick.
 */
TG_API tg_status tg_gradcheck(tg_ctx *ctx, tg_tensor *y, const tg_gradcheck_opts *opts,
                              tg_gradcheck_report *report);

/**
 * The second-order check (PyTorch `torch.autograd.gradgradcheck`): the gradients of y built as
 * graph nodes are themselves checked against central differences.
 * Math: with r of y's shape (uniform in [0.5, 1.5), an input that takes a gradient) and the
 * differentiable leaves x_j of y, g_j = d<r, y>/dx_j (tg_grad()) and, with fixed v_j uniform
 * in [-1, 1), S = sum_j <g_j, v_j>; tg_gradcheck() of S checks dS/dx_j = H_j v (the
 * Hessian-vector products of <r, y>, through the reverse rules' own backward) and
 * dS/dr = J v (the Jacobian applied to v) against differences of S. r and v come from
 * @p opts->seed (a private stream: the context RNG is not advanced).
 * Dtypes: f32 or f64 (f64 with the defaults is the meaningful check: eps 1e-6, atol 1e-5,
 * rtol 1e-3). @p opts NULL means tg_gradcheck_defaults() for y's dtype.
 * Returns ::TG_OK if passed, ::TG_ERR_GRADCHECK if not (see @p report), ::TG_ERR_NOGRAD when an
 * op on the way has no reverse rule written as ops (a custom op, or one docs/autodiff.md lists
 * as first-order only; the message and report->message name the op and its node) or nothing
 * is differentiable, ::TG_ERR_ARG (NULL, y of another context), ::TG_ERR_DTYPE, or
 * tg_gradcheck()'s errors. Run-time errors: they do not stick. The nodes built here stay in
 * the context (context memory), like tg_gradcheck()'s graph.
 * Source: PyTorch `torch/autograd/gradcheck.py` (gradgradcheck); src/graph/gradgradcheck.c.
 */
TG_API tg_status tg_gradgradcheck(tg_ctx *ctx, tg_tensor *y, const tg_gradcheck_opts *opts,
                                  tg_gradcheck_report *report);
/**@}*/

/* ------------------------------------------------------------------------------------------ */
/** @name Introspection and DOT
 * A graph's nodes, in order, and each node's op, sources, kind, dtype and shape, through
 * accessors only (the records are private). tg_graph_size() / tg_graph_node() list the nodes
 * in **execution order**: a topological order in which every node comes after its sources;
 * forward runs the ops in this order and backward runs their rules in the reverse order.
 */
/**@{*/
/** Number of sources (operands) of @p t's op: 0 for a leaf. */
TG_API int tg_tensor_n_srcs(const tg_tensor *t);
/** Source @p i (0 <= i < tg_tensor_n_srcs()) of @p t's op, in the builder's argument order,
 *  or NULL if out of range. The same tensor may appear twice (`x x^T`). */
TG_API tg_tensor *tg_tensor_src(const tg_tensor *t, int i);
/** Registry index of @p t's op (as tg_op_name() / tg_op_find() number them; every custom op
 *  has the index of "custom"), or -1 for a leaf. */
TG_API int tg_tensor_op_index(const tg_tensor *t);
/** True if @p t's result shares its source's buffer instead of holding its own (a view, e.g.
 *  tg_reshape()). */
TG_API bool tg_tensor_is_view(const tg_tensor *t);
/** The fused node (flash_attention, dense_act with GELU) whose equivalent unfused form @p t is
 *  part of, or NULL. tg_grad() and tg_jvp() differentiate such a node through its unfused form
 *  (softmax(scale q kᵀ + masks) v; act(dense(x, W, b))), built from the node's own sources, so
 *  that the result can be differentiated again; every node made for it, the form and its
 *  gradient or tangent nodes, answers the fused node here, and tg_graph_write_dot() labels it
 *  so. The fused node itself still runs its fused kernel. */
TG_API const tg_tensor *tg_tensor_unfused_of(const tg_tensor *t);

/** Flags of tg_graph_write_dot(); combine with `|`. */
enum {
    /** Also draw the backward pass: a dashed red edge from each op whose result requires a
     *  gradient to each source that receives one from its backward rule. */
    TG_DOT_BACKWARD = 1 << 0,
    /** Lay the graph out left to right (`rankdir=LR`) instead of top to bottom. */
    TG_DOT_LEFT_RIGHT = 1 << 1
};

/**
 * Write @p g as a Graphviz DOT file (`dot -Tsvg FILE -o g.svg` draws it). One node per tensor
 * of tg_graph_node(), labelled with its op (tg_tensor_op_name()), its name, its shape and its
 * dtype, e.g. `matmul` / `scores` / `(2, 4, 3, 3) f32`; one edge per source from source to
 * consumer. Leaves are boxes styled by kind: parameters green, inputs blue (with a thick border
 * when they require a gradient), constants grey and dashed; ops are ellipses, views dashed,
 * custom ops yellow; nodes of a fused op's unfused form (tg_tensor_unfused_of()) are purple
 * and carry a fourth line `unfused: <the fused node's name>`. Names are escaped (quotes, backslashes, control characters and bytes that
 * are not UTF-8 are written as visible escapes such as `\x0a`), so any name gives a valid file.
 * @p flags: ::TG_DOT_BACKWARD, ::TG_DOT_LEFT_RIGHT, or 0.
 * The file is written like every tgrad save (see tgrad_io.h): atomically through a temporary
 * file, so after an error (a full disk: ::TG_ERR_IO) @p path holds the old file or nothing,
 * never a partial one; anything but a regular file is refused. tg_graph_write_dot_to() and
 * tg_graph_write_dot_opts() in tgrad_io.h write to a stream or inject failures.
 * Errors (run-time errors, as the other writers': they do not stick): ::TG_ERR_ARG (NULL,
 * unknown flag bits), ::TG_ERR_IO (e.g. @p path is a directory), ::TG_ERR_NOMEM.
 */
TG_API tg_status tg_graph_write_dot(const tg_graph *g, const char *path, int flags);
/**@}*/

/* ------------------------------------------------------------------------------------------ */
/** @name User-defined ops
 * tg_custom_op() records an op whose forward and backward are the caller's C callbacks. It is a
 * node like any other: graphs order it, run it with the context's thread count, differentiate
 * through it, and tg_gradcheck() checks it. Example: `examples/custom_op.c` (a softplus).
 */
/**@{*/
/** Most inputs of a custom op. */
#define TG_CUSTOM_MAX_INPUTS 4
/** Longest custom op name, including the terminating NUL. */
#define TG_CUSTOM_NAME_MAX 32
/** tg_custom_def::out_rank value meaning "the output has input 0's shape". */
#define TG_CUSTOM_SAME_SHAPE (-1)
/** tg_custom_def::backward_reads bit: backward reads input @p i's data. */
#define TG_CUSTOM_READS_INPUT(i) (1u << (i))
/** tg_custom_def::backward_reads bit: backward reads the output (the forward result). */
#define TG_CUSTOM_READS_OUTPUT (1u << TG_CUSTOM_MAX_INPUTS)

/**
 * What a custom op's callback receives for one call. Arrays are contiguous and row-major in
 * the op's dtype (`float *` for ::TG_F32, `double *` for ::TG_F64); shapes outermost first.
 * Pointers are valid for this call only: never keep them.
 */
typedef struct tg_custom_call {
    const char *name;          /**< the op's name (tg_custom_def::name) */
    tg_dtype dtype;            /**< ::TG_F32 or ::TG_F64, shared by every input and the output */
    /** Threads the callback may use (tg_ctx_threads()). Results must not depend on it: give
     *  each output element to one thread, summed in a fixed order (see tgrad.h, Determinism). */
    int n_threads;
    bool backward;             /**< false in forward (and tg_custom_def::workspace's forward
                                    query), true in backward */
    int n_inputs;
    /** Input data. In backward, NULL unless tg_custom_def::backward_reads declares it (the
     *  memory planner may have reused it). */
    const void *input[TG_CUSTOM_MAX_INPUTS];
    int input_rank[TG_CUSTOM_MAX_INPUTS];
    const int64_t *input_shape[TG_CUSTOM_MAX_INPUTS];
    int64_t input_numel[TG_CUSTOM_MAX_INPUTS];
    /** Forward: write every element here. Backward: the forward result if backward_reads has
     *  ::TG_CUSTOM_READS_OUTPUT, else NULL. */
    void *output;
    int output_rank;
    const int64_t *output_shape;
    int64_t output_numel;
    /** Backward: dL/d(output), output's shape. Forward: NULL. */
    const void *grad_output;
    /** Backward: dL/d(input i), input i's shape, to **accumulate into** (`+=`, never `=`): it
     *  already holds what other consumers of that tensor added, and two inputs may be the
     *  same tensor (then both pointers are equal). NULL when input i needs no gradient (a
     *  constant, or nothing differentiable behind it): skip it. Forward: all NULL. */
    void *grad_input[TG_CUSTOM_MAX_INPUTS];
    void *workspace;           /**< tg_custom_def::workspace bytes, uninitialised (NULL if 0) */
    size_t workspace_bytes;
    void *user;                /**< tg_custom_def::user */
    void *internal_;           /**< private to tgrad (where tg_custom_error() writes) */
} tg_custom_call;

/** A forward or backward callback: do the work described by @p call and return ::TG_OK, or
 *  report a failure with `return tg_custom_error(call, status, "...", ...)`. It must not call
 *  any other tgrad function. */
typedef tg_status (*tg_custom_fn)(tg_custom_call *call);

/** Definition of a custom op; zero-initialise, then fill. Copied by tg_custom_op() (except
 *  what @c user points to), so one definition may build many ops. */
typedef struct tg_custom_def {
    /** Name shown by tg_tensor_op_name(), error messages and DOT: 1 to ::TG_CUSTOM_NAME_MAX - 1
     *  characters from [A-Za-z0-9_], not starting with a digit, and not a registered op's name
     *  (tg_op_find()) nor "param", "input", "const" or "leaf". The result's generated name is
     *  this name plus a number ("softplus7"). */
    const char *name;
    /** Output shape from the inputs: set @p *rank (0..::TG_MAX_RANK) and @p shape[0..rank),
     *  each >= 1, and return ::TG_OK; or return an error status, optionally with a one-line
     *  reason written to @p msg (@p msg_size bytes). NULL: use out_rank / out_shape. */
    tg_status (*shape)(int n_inputs, const tg_tensor *const *inputs, int *rank,
                       int64_t *shape, char *msg, size_t msg_size, void *user);
    /** Without @c shape: ::TG_CUSTOM_SAME_SHAPE (input 0's shape) or an explicit rank
     *  0..::TG_MAX_RANK with @c out_shape (0, the zero value, is a scalar). */
    int out_rank;
    int64_t out_shape[TG_MAX_RANK];
    /** Callbacks per dtype. A NULL forward means the op does not support that dtype: building
     *  it with inputs of that dtype is refused (::TG_ERR_DTYPE). A NULL backward means the op
     *  is not differentiable in that dtype: tg_graph_new() refuses a graph that would need its
     *  gradient (::TG_ERR_NOGRAD). */
    tg_custom_fn forward_f32, backward_f32;
    tg_custom_fn forward_f64, backward_f64;
    /** What backward reads, besides grad_output: ::TG_CUSTOM_READS_INPUT(i) bits and
     *  ::TG_CUSTOM_READS_OUTPUT. The memory planner keeps exactly these alive until backward;
     *  the others arrive as NULL. */
    unsigned backward_reads;
    /** Scratch bytes one forward or backward call needs (call->backward says which), given the
     *  shapes and call->n_threads (data pointers are NULL in this query). NULL: none. */
    size_t (*workspace)(const tg_custom_call *call);
    /** Optional reverse rule written as ops, for tg_grad() (and so tg_hvp(), tg_hessian(),
     *  tg_gradgradcheck() and forward over reverse): build, with tgrad's op builders, the
     *  vector-Jacobian products grad_inputs[i] = (dy/d inputs[i])ᵀ grad_output, each of input
     *  i's shape and dtype, for every i with need[i] (leave the others NULL). @p y is this op's
     *  node, @p grad_output a tensor of y's shape. The nodes must be differentiable themselves
     *  where second derivatives are wanted (built from ops with rules, or from custom ops with
     *  rules). Return ::TG_OK, or the builders' error status (its message is on the context).
     *  NULL: tg_grad() refuses a graph through this op with ::TG_ERR_NOGRAD naming it; the
     *  backward callbacks still serve tg_graph_backward(). */
    tg_status (*vjp)(tg_ctx *ctx, tg_tensor *y, int n_inputs, tg_tensor *const *inputs,
                     tg_tensor *grad_output, const bool *need, tg_tensor **grad_inputs,
                     void *user);
    /** Optional forward rule written as ops, for tg_jvp() and tg_gradcheck()'s forward mode:
     *  return y's tangent Σ_i (dy/d inputs[i]) tangents[i] (y's shape and dtype), with
     *  tangents[i] NULL for an input no tangent reaches (at least one is not). Return NULL
     *  with the builders' error on the context to fail. NULL: tg_jvp() refuses this op with
     *  ::TG_ERR_NOGRAD naming it. */
    tg_tensor *(*jvp)(tg_ctx *ctx, tg_tensor *y, int n_inputs, tg_tensor *const *inputs,
                      tg_tensor *const *tangents, void *user);
    /** Passed to every callback as call->user (and to @c shape, @c vjp, @c jvp); borrowed,
     *  must outlive every graph that runs the op. */
    void *user;
} tg_custom_def;

/**
 * Record a custom op y = op(inputs[0], ..., inputs[n_inputs - 1]) defined by @p def.
 * Shapes: any inputs (1 to ::TG_CUSTOM_MAX_INPUTS, one dtype) -> the shape @p def gives.
 * The result requires a gradient if any input does; backward then calls the dtype's backward
 * callback, which adds into call->grad_input[i] (accumulate contract above).
 * A callback that returns an error stops the run: tg_graph_forward() / tg_graph_backward()
 * (and tg_gradcheck()) return its status with the message `tg_graph_forward: custom op
 * 'softplus' ('softplus7'): <the callback's message>`, a run-time error (it does not stick).
 * Errors (build errors): ::TG_ERR_ARG (NULL def, bad name, n_inputs out of range, unknown
 * backward_reads bits), ::TG_ERR_DTYPE (no forward for the inputs' dtype, inputs of different
 * dtypes), ::TG_ERR_SHAPE (shape function refused, or a bad output shape), ::TG_ERR_OVERFLOW,
 * ::TG_ERR_NOMEM. Returns NULL on error, like every builder.
 */
TG_API tg_tensor *tg_custom_op(tg_ctx *ctx, const tg_custom_def *def, int n_inputs,
                               tg_tensor *const *inputs);

/**
 * Inside a callback: record why it fails and return @p status, so that
 * `return tg_custom_error(call, TG_ERR_ARG, "x[%lld] = %g is negative", i, v);` ends it.
 * The message (printf-style, truncated to 300 bytes) becomes the run's error message, as one
 * printable line: a newline, carriage return or tab becomes a space; any other control
 * character (C0, DEL, C1) and every byte that is not valid UTF-8 becomes '?'.
 * @p status should be an error code (::TG_OK is turned into ::TG_ERR_ARG).
 */
TG_API tg_status tg_custom_error(tg_custom_call *call, tg_status status, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 3, 4)))
#endif
    ;
/**@}*/

#ifdef __cplusplus
}
#endif
#endif /* TGRAD_H */
