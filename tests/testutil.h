/*
 * testutil.h - helpers shared by the Check suites.
 */
#ifndef TG_TESTUTIL_H
#define TG_TESTUTIL_H

#include <check.h>
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "tgrad.h"

/* Run one suite and return the process exit status (0 if every test passed). */
int tu_run(Suite *s);

/* An allocator that fails after `budget` successful allocations (budget < 0: never fails).
 * Counts allocations and frees so tests can assert nothing leaked. */
typedef struct {
    long budget;
    long n_alloc, n_free;
} tu_failing_alloc;
tg_allocator tu_failing_allocator(tu_failing_alloc *state);

/* Input with requires_grad, uniform in [lo, hi) from the context RNG. */
tg_tensor *tu_input(tg_ctx *ctx, tg_dtype dt, int rank, const int64_t *shape, const char *name,
                    double lo, double hi);
/* Set data from a double array of numel values. */
void tu_set(tg_tensor *t, const double *values);
/* Max |a - b| over the data of two tensors of equal numel. */
double tu_max_abs_diff(const tg_tensor *a, const tg_tensor *b);
/* Assert tensor data equals `expect` (numel values) within tol. */
void tu_assert_data(const tg_tensor *t, const double *expect, double tol);
/* Run f64 gradcheck on y with defaults; fail the test with the report message if it fails. */
void tu_assert_gradcheck(tg_ctx *ctx, tg_tensor *y);
/* Assert that the context recorded `status` and a message containing `needle` (NULL: any
 * non-empty message). */
void tu_assert_error(tg_ctx *ctx, tg_status status, const char *needle);

/* A thread-invariance case: builds its graph in ctx with dtype dt and returns the output. */
typedef tg_tensor *(*tu_build_fn)(tg_ctx *ctx, tg_dtype dt);
/* Thread invariance: build the case with `build` in fresh contexts using 1, 2 and 3 threads
 * (same seed), run forward and backward (upstream gradient = fixed pseudo-random values), and
 * assert every output value and every leaf gradient is bitwise identical across thread counts.
 * Shapes should be big enough for the parallel paths to engage (> TG_PAR_MIN work). */
void tu_assert_thread_invariant(tu_build_fn build, tg_dtype dt);

/* ---- op-suite helpers (tests/test_ops_*.c) -------------------------------------------------- */

/* The two float dtypes, for loop tests that run once per dtype (tu_dtypes[_i]). */
extern const tg_dtype tu_dtypes[2];

/* A new context registered for tu_ctx_teardown, so a checked teardown frees it even when an
 * assertion fails (under CK_FORK=no, as in the valgrind setup, a failing test would otherwise
 * also report its context as leaked). At most 8 live at once per test. */
tg_ctx *tu_ctx_new(void);
/* Free a context from tu_ctx_new and drop it from the registry. */
void tu_ctx_free(tg_ctx *c);
/* Checked-fixture teardown: free every registered context still alive. */
void tu_ctx_teardown(void);

/* A compound literal of doubles: VALS(1, 2, 3) is a const double[3]. */
#define VALS(...) ((const double[]){__VA_ARGS__})

/* True when the suite runs under the valgrind test setup (TG_UNDER_VALGRIND set). */
bool tu_under_valgrind(void);
/* `n` normally, `small` under valgrind (thread-invariance sizes, shrunk to keep runs short). */
int64_t tu_big(int64_t n, int64_t small);

/* An input that requires grad, holding `v` (numel values; NULL leaves zeros). */
tg_tensor *tu_in(tg_ctx *ctx, tg_dtype dt, int rank, const int64_t *shape, const char *name,
                 const double *v);
/* Build a graph over y and run forward once. */
tg_graph *tu_fwd(tg_ctx *ctx, tg_tensor *y);
/* Backward from y with upstream values v (y's numel of them; NULL: all ones). */
void tu_bwd(tg_ctx *ctx, tg_graph *g, tg_tensor *y, const double *v);

/* |got - want| <= tol * max(1, |want|) for every element of t's data (grad false) or gradient
 * (grad true); want infinities must match. */
void tu_expect_vals(const tg_tensor *t, bool grad, const double *want, double tol);
/* EXPECT_DATA(t, tol, v0, v1, ...): t's data is v0, v1, ... within tol (tu_expect_vals). */
#define EXPECT_DATA(t, tol, ...) tu_expect_vals((t), false, VALS(__VA_ARGS__), (tol))
/* EXPECT_GRAD(t, tol, v0, v1, ...): t's gradient is v0, v1, ... within tol (tu_expect_vals). */
#define EXPECT_GRAD(t, tol, ...) tu_expect_vals((t), true, VALS(__VA_ARGS__), (tol))
/* Assert t is non-NULL with exactly this rank and shape. */
void tu_expect_shape(const tg_tensor *t, int rank, const int64_t *shape);
/* EXPECT_SHAPE(t, d0, d1, ...): tu_expect_shape with the dims listed. */
#define EXPECT_SHAPE(t, ...) tu_expect_shape((t), TG_DIMS(__VA_ARGS__))

/* Gradcheck in f32 with the f32 defaults (eps 1e-3, atol 1e-2, rtol 1e-2). */
void tu_gradcheck_f32(tg_ctx *ctx, tg_tensor *y);

/* Fill with small integers (exact in f32): v[i] = (i * mul + add) % mod - off. */
void tu_fill_int(tg_tensor *t, int mul, int add, int mod, int off);

/* A differentiable input uniform in [-1, 1) from the context RNG (same seed, same data). */
tg_tensor *tu_gc_input(tg_ctx *ctx, tg_dtype dt, int rank, const int64_t *shape,
                       const char *name);
/* GIN(name, d0, d1, ...): tu_gc_input with the `ctx` and `dt` in scope. */
#define GIN(name, ...) tu_gc_input(ctx, dt, TG_DIMS(__VA_ARGS__), name)
/* A parameter (tg_param) uniform in [-1, 1) from the context RNG. */
tg_tensor *tu_gc_param(tg_ctx *ctx, tg_dtype dt, int rank, const int64_t *shape,
                       const char *name);
/* GPARAM(name, d0, d1, ...): tu_gc_param with the `ctx` and `dt` in scope. */
#define GPARAM(name, ...) tu_gc_param(ctx, dt, TG_DIMS(__VA_ARGS__), name)

/* The number of NaNs in t's data (grad false) or gradient (grad true). */
int tu_count_nan(const tg_tensor *t, bool grad);

/* With a builder error pending whose message is `first`: a graph over the valid tensor `good` is
 * refused and the status and message stay as they were; once the error is cleared the graph
 * builds. Returns that graph. */
tg_graph *tu_assert_graph_refused(tg_ctx *ctx, tg_tensor *good, const char *first);

/* Run backward from y with upstream dy (as tu_bwd; NULL: all ones) twice without zero_grad and
 * assert every gradient element of the n leaves (leaves NULL: every gradient leaf of g) is then
 * exactly twice its value after the first backward, as PyTorch's `grad += new_grad` gives. */
void tu_assert_backward_twice(tg_ctx *ctx, tg_graph *g, tg_tensor *y, const double *dy,
                              tg_tensor *const *leaves, int n);

/* A suite's gradcheck cases: case `which` built in ctx with dtype dt. */
typedef tg_tensor *(*tu_gc_case_fn)(tg_ctx *ctx, tg_dtype dt, int which);
/* Gradcheck case `which` of gc in a fresh context seeded with `seed`: tu_assert_gradcheck in
 * f64, tu_gradcheck_f32 in f32. */
void tu_gradcheck_case(tu_gc_case_fn gc, tg_dtype dt, int which, uint64_t seed);

/* A TCase named `name` added to s, with tu_ctx_teardown as its checked teardown and, when
 * timeout_s > 0, that timeout in seconds. */
TCase *tu_tcase(Suite *s, const char *name, int timeout_s);
/* Add the "threads" TCase (timeout 60 s) to s: test_thread_invariance runs
 * tu_assert_thread_invariant on each of the n builders in f32 and in f64 (2 n iterations).
 * `builds` must stay valid while the suite runs; one such TCase per test program. */
void tu_add_thread_tcase(Suite *s, const tu_build_fn *builds, int n);

/* ---- files and the tgrad program (suites that run it as a user would) --------------------- */

/* The tgrad binary: $TG_TGRAD_EXE when set and non-empty (e.g. a sanitizer build), else the
 * one built with the tests (TG_TGRAD_EXE from tests/meson.build). */
const char *tu_tgrad_exe(void);
/* Create a fresh scratch directory /tmp/tgrad_<tag>_XXXXXX; its path goes to dir (n bytes). */
void tu_mkdtemp(char *dir, size_t n, const char *tag);
/* Remove @p dir and everything below it (no shell; symbolic links are removed, never
 * followed). A missing directory is not an error. */
void tu_rm_tree(const char *dir);
/*
 * A character device for a test, never the system's own node: a private `mknod c 1 7` (what
 * /dev/full is: every write fails with ENOSPC) at dir/name, its path in @p path (n bytes).
 * When this process may not make one (no CAP_MKNOD), or @p must_open and the node cannot be
 * opened for writing (a nodev mount), the system's /dev/full is used instead if it is really
 * that device (c 1 7). NULL, with a line on stderr saying which case is skipped and why (@p
 * what names it), when neither can be had: the caller skips that case.
 */
const char *tu_full_device(const char *dir, const char *name, char *path, size_t n,
                           bool must_open, const char *what);
/* "dir/name" in p (n bytes); returns p. */
const char *tu_path(char *p, size_t n, const char *dir, const char *name);
/* The whole file, NUL-terminated (malloc'd: free it), its byte count in *len (may be NULL);
 * NULL if it cannot be opened. */
char *tu_slurp(const char *path, size_t *len);
/* tu_slurp of dir/name. */
char *tu_slurp_in(const char *dir, const char *name, size_t *len);
/* The number of '\n' in s. */
int tu_count_lines(const char *s);
/* Write @p text to dir/name (replacing it). */
void tu_write_file(const char *dir, const char *name, const char *text);
/* An English-like text of n_words words from a fixed 12-word vocabulary, a sentence ending
 * every 9 words (deterministic), written to dir/name: a corpus a tiny model learns quickly. */
void tu_write_corpus(const char *dir, const char *name, int n_words);
/* @p n sentence pairs of a toy translation (English number words -> German), tab-separated,
 * the words chosen by the line index and @p offset (deterministic), written to dir/name: a
 * `tgrad train --pairs` file a tiny model trains on in a moment. */
void tu_write_pairs(const char *dir, const char *name, int n, int offset);

/* Write an .npy (version 1.0) file at @p path by hand: header {'descr': DESCR, 'fortran_order':
 * False, 'shape': SHAPE, } (SHAPE a Python tuple literal such as "(2, 3)", "(5,)" or "()"),
 * padded as NumPy pads it, then @p n bytes of @p data. For dtypes tgrad does not write (|b1,
 * integers) and for deliberately wrong files. */
void tu_write_npy_raw(const char *path, const char *descr, const char *shape, const void *data,
                      size_t n);

/* An edit of a safetensors file for tu_st_rewrite (NULL fields: no such edit). */
typedef struct {
    const char *key, *value;   /* metadata @p key set to @p value (NULL: removed; added if new) */
    const char *drop;          /* this tensor left out */
    const char *poison;        /* every element of this tensor set to NaN */
    const char *fill;          /* every element of this tensor set to fill_value */
    double fill_value;
    const char *rename, *to;   /* tensor @p rename written under the name @p to */
} tu_st_edit;
/* Copy safetensors file @p src to @p dst (paths) with edit @p e, through the library's own
 * reader and writer. Returns whether e->key was present in @p src. */
bool tu_st_rewrite(const char *src, const char *dst, const tu_st_edit *e);

/* Waits for the child @p pid, which the caller has killed, and reaps it; returns its wait
 * status. Before reaping (the pid is still the dead child's), removes the registration that
 * LLVM's OpenMP runtime (libomp, in clang builds) keeps in /dev/shm/__KMP_REGISTERED_LIB_<pid>_
 * <uid> and deletes at exit. A kill between creating that file and sizing it leaves it empty,
 * and libomp 14 then dies of SIGBUS in the next process given that pid. */
int tu_wait_killed(pid_t pid);

/* tu_run_sh's result when the command did not finish in time (it was killed). */
#define TU_TIMED_OUT (-1000)
/* Run the shell command @p cmd as `cd DIR && exec CMD > out.txt 2> err.txt` (a command
 * starting with '(' is not exec'd), in its own process group, which is killed after
 * @p timeout_s seconds. Returns the exit status, -signal if the command was killed by a signal
 * (exec'd, so a crash shows as a signal, not as the shell's 128 + n), or TU_TIMED_OUT; the wall
 * time in *secs (may be NULL). */
int tu_run_sh(const char *dir, const char *cmd, double timeout_s, double *secs);
/* tu_run_sh of `'<tu_tgrad_exe()>' ARGS` (ARGS: shell words). */
int tu_run_tgrad(const char *dir, const char *args, double timeout_s, double *secs);

/* max |a - b| / max(1e-3, max |b|) over n values (relative to b's scale). */
double tu_rel_err(const double *a, const double *b, int64_t n);
/* Index of the largest of x[0..n) (the first on ties). */
int tu_argmax(const double *x, int64_t n);
/* The first n values of the generator's last logits (the live rows; n <= its size, checked)
 * as doubles into out. */
struct tg_generator;
void tu_generator_logits(struct tg_generator *gen, int64_t n, double *out);

#endif
