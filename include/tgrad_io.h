/**
 * @file tgrad_io.h
 * @brief Interop formats (layer 5): reading and writing safetensors and NumPy `.npy` files.
 *
 * Conventions shared by every function here:
 * - Readers are strict: every byte of the file is accounted for, every size is checked with
 *   overflow-safe arithmetic before anything is allocated, and a file that is malformed in any
 *   way is rejected with a specific status (::TG_ERR_TRUNCATED, ::TG_ERR_JSON, ::TG_ERR_GAP, ...)
 *   and a message naming the file, the tensor and the offending value. They never crash on
 *   hostile input.
 * - Failures are **run-time errors** (tgrad.h, "Errors come in two kinds"): functions
 *   returning a pointer return NULL, functions returning ::tg_status return the code, and
 *   tg_ctx_status() / tg_ctx_message() describe the call's first failure right after it. Such
 *   an error does not stick: a missing file, a full disk or a malformed file never blocks later
 *   builders, graphs or tg_gradcheck(), and the next call that builds or runs drops it. Every
 *   call here starts by dropping an earlier run-time error; a pending build error is never
 *   replaced (the call then still runs, but its own failure is not recorded over it).
 * - Everything a reader returns (tensors, names, metadata strings, the ::tg_safetensors record)
 *   is owned by the context and stays valid until tg_ctx_free(). On failure nothing stays
 *   allocated: the context holds the same number of bytes as before the call.
 * - Readers given a path read only regular files. A directory, device (`/dev/zero` never
 *   ends), FIFO (which may never get a writer), or socket is refused at once with ::TG_ERR_IO
 *   and one line, e.g. `tg_safetensors_read: '/dev/zero' is not a regular file (a character
 *   device)`; the file is opened non-blocking, so nothing can hang. To read a pipe, socket or
 *   any other stream, pass its descriptor to tg_safetensors_read_fd() / tg_npy_read_fd(), which
 *   take an explicit byte limit.
 * - Writers are atomic and crash-safe: after an error, a SIGKILL or a crash at any instant,
 *   @p path holds either the complete old file or the complete new one, never a mixture; once
 *   the call has returned ::TG_OK the new file also survives a power loss. Every system call's
 *   return value is checked; on any failure ::TG_ERR_IO is returned with the failing step,
 *   @p path and strerror() in the message, the temporary file is removed and an existing file
 *   at @p path is left byte-identical. (The one step after the replacement, the fsync() of the
 *   directory, reports its failure with the new file in place and says so.)
 *   How: the data goes to a temporary file in the target's directory, is written, fsync()ed and
 *   closed, then rename()d over the target, and the directory is fsync()ed. On Linux the
 *   temporary is an unnamed `O_TMPFILE` inode, so a process killed while writing leaves nothing
 *   behind; it gets the name `<basename>.tmp.XXXXXX` (X in [A-Za-z0-9]) only for the instant
 *   between its linkat() and the rename(). Where `O_TMPFILE` is unavailable (other systems, some
 *   file systems) the temporary has that name from the start. A save removes only the
 *   temporary it created itself, never another file, whatever its name: a save killed in the
 *   instant between linkat() and rename(), or while writing a named temporary, leaves that
 *   one `<basename>.tmp.XXXXXX` behind, and no later save removes it (it may be deleted by
 *   hand; the target is intact either way). Concurrent saves of one path never touch each
 *   other's temporaries.
 * - Writers replace only regular files. If @p path is a directory, device, FIFO or socket, the
 *   call fails with ::TG_ERR_IO ("'/dev/full' is not a regular file (a character device):
 *   refusing to replace it") before anything is created or renamed. A symbolic link is written
 *   through: the kernel follows it (so `fs.protected_symlinks` applies) and the regular file it
 *   names is replaced atomically in that file's own directory, the link itself staying in
 *   place; a link to anything else, or to nothing, is refused the same way.
 * - Arguments are validated before the temporary file is created, so a refused call leaves no
 *   trace on disk. A new file gets mode 0666 minus the process umask, as fopen() would give; a
 *   replaced file keeps its mode.
 * - All multi-byte values are little-endian on disk whatever the host's byte order.
 *
 * Format sources:
 * - safetensors: the format description in the README of https://github.com/huggingface/safetensors
 *   (8-byte little-endian header length N, N bytes of UTF-8 JSON, then the data section;
 *   reference reader and writer in `safetensors/src/tensor.rs`).
 * - .npy: NumPy NEP 1 ("A Simple File Format for NumPy Arrays") and the module docstring of
 *   `numpy.lib.format` (versions 1.0, 2.0 and 3.0).
 */
#ifndef TGRAD_IO_H
#define TGRAD_IO_H

#include "tgrad.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ------------------------------------------------------------------------------------------ */
/** @name Writing: items, sinks and options */
/**@{*/

/**
 * One array to write: a name plus a borrowed, contiguous, row-major buffer of
 * `prod(shape)` elements of @c dtype (in host byte order). Build one by hand to write any
 * buffer, or with tg_io_item_data() / tg_io_item_grad() from a tensor.
 */
typedef struct tg_io_item {
    const char *name;     /**< safetensors key (UTF-8, non-empty); ignored by the .npy writers */
    tg_dtype dtype;       /**< ::TG_F32, ::TG_F64 or ::TG_I32; written as "F32"/"F64"/"I32"
                               or '<f4'/'<f8'/'<i4' */
    int rank;             /**< 0..::TG_MAX_RANK */
    const int64_t *shape; /**< @c rank dims, each >= 1 (may be NULL for rank 0) */
    const void *data;     /**< prod(shape) elements; borrowed, not copied */
} tg_io_item;

/** An item describing the values of @p t under @p name (NULL: the tensor's own name). Its
 *  @c data is NULL (the writers refuse it with ::TG_ERR_ARG) if @p t has no data (an op result
 *  no live graph computed) or is a strided view (write the output of tg_contiguous() instead). */
TG_API tg_io_item tg_io_item_data(const tg_tensor *t, const char *name);
/**
 * An item describing the gradient buffer of @p t (tg_tensor_grad()) under @p name (NULL: the
 * tensor's own name). Its @c data is NULL if @p t has no gradient buffer; the writers then
 * refuse it with ::TG_ERR_ARG naming the item (tg_safetensors_write_grads() reports
 * ::TG_ERR_NOGRAD instead).
 */
TG_API tg_io_item tg_io_item_grad(const tg_tensor *t, const char *name);

/**
 * A byte sink for the stream-level writers (tg_safetensors_write_to(), tg_npy_write_to()).
 * @c write must consume all @p size bytes and return 0, or return a non-zero errno value
 * (e.g. ENOSPC) on failure; the writer then stops and reports ::TG_ERR_IO with strerror() of it.
 */
typedef struct tg_writer {
    int (*write)(void *user, const void *data, size_t size);
    void *user;
} tg_writer;

/**
 * A step of an atomic save, for fault injection (::tg_write_opts::fail_step). The steps run in
 * this order; every one before ::TG_WRITE_STEP_DIR_FSYNC leaves the old file untouched.
 */
typedef enum tg_write_step {
    TG_WRITE_STEP_NONE = 0,  /**< no injected failure */
    TG_WRITE_STEP_CREATE,    /**< creating the temporary file */
    TG_WRITE_STEP_WRITE,     /**< the write(2) call number ::tg_write_opts::fail_at (0 = first);
                                  the data goes through a 64 KiB buffer, larger pieces directly */
    TG_WRITE_STEP_FSYNC,     /**< fsync(2) of the temporary file */
    TG_WRITE_STEP_CLOSE,     /**< close(2) of the temporary file (it is really closed) */
    TG_WRITE_STEP_RENAME,    /**< rename(2) of the temporary over the target */
    TG_WRITE_STEP_DIR_FSYNC  /**< fsync(2) of the directory, after the rename: the call fails
                                  with the new file in place, and its message says so */
} tg_write_step;

/**
 * Options of the path-based (atomic) writers. A zero-initialised struct (or a NULL pointer)
 * means the defaults. Fields may be added at the end; initialise with `{0}` or memset.
 */
typedef struct tg_write_opts {
    /** For tests: if true, the write of the temporary file fails with ENOSPC once
     *  @c fail_after_bytes bytes have been written (0 fails the first write), exactly as a full
     *  disk would, so the clean-up path (temporary file removed, old file untouched,
     *  ::TG_ERR_IO returned) can be exercised without special file systems or privileges. */
    bool inject_write_failure;
    uint64_t fail_after_bytes;
    /** Skip fsync() of the file and of its directory (faster, not crash-safe). The fsync steps
     *  are then not taken, so failures injected into them never happen. */
    bool no_fsync;
    /** For tests: make this step fail with @c fail_errno (0 means EIO), as the system call
     *  would: the call returns ::TG_ERR_IO naming @p path and the step. */
    tg_write_step fail_step;
    /** For ::TG_WRITE_STEP_WRITE: index of the write(2) call that fails (0 = the first). A save
     *  making fewer calls succeeds, so a test can raise it until the save succeeds. */
    uint64_t fail_at;
    /** errno value of the injected failure, e.g. EIO or ENOSPC (0: EIO). */
    int fail_errno;
    /** For tests: use a named temporary file even where `O_TMPFILE` works (the fallback path
     *  other systems take). */
    bool no_tmpfile;
} tg_write_opts;

/**
 * What tg_file_write() calls to produce the file's bytes: send them to @p w (in as many
 * pieces as convenient) and return ::TG_OK, or stop at the first failure and return its
 * status (a failing @c w->write returns an errno value: report it as ::TG_ERR_IO). Record
 * the reason on @p ctx (tg_ctx_set_error() with ::TG_ERROR_RUN); the save then fails with
 * that status and message, and nothing is replaced.
 */
typedef tg_status (*tg_emit_fn)(tg_ctx *ctx, const tg_writer *w, void *user);

/**
 * Write any file at @p path, atomically, by the rule of every writer here (see the file
 * comment): only a regular file (or a symbolic link to one) is replaced, a directory,
 * device, FIFO or socket is refused before anything is created; the bytes @p emit produces
 * go to a temporary file beside the target, which is fsync()ed and renamed over it; on any
 * failure (the emitter's, a full disk, an injected one) the temporary is removed, an existing
 * file is left byte-identical and a new one is not created. Nothing the call did not create
 * is ever removed or truncated. This is the writer behind every path-based save of the
 * library (safetensors, .npy, DOT, checkpoints, SentencePiece models) and every file the
 * `tgrad` program writes.
 * @param user passed to @p emit unchanged.
 * @param opts NULL for the defaults; see ::tg_write_opts.
 * **Errors** (run-time): ::TG_ERR_ARG (NULL @p ctx, @p path or @p emit, empty @p path),
 * ::TG_ERR_IO (with the step, @p path and the system's reason), ::TG_ERR_NOMEM, or what
 * @p emit returned.
 */
TG_API tg_status tg_file_write(tg_ctx *ctx, const char *path, tg_emit_fn emit, void *user,
                               const tg_write_opts *opts);
/**@}*/

/* ------------------------------------------------------------------------------------------ */
/** @name safetensors */
/**@{*/

/** A parsed safetensors file: its tensors in header (JSON) order and its metadata. Opaque;
 *  owned by the context. */
typedef struct tg_safetensors tg_safetensors;

/** Largest header accepted by the readers, as in the reference implementation (100 MB). */
#define TG_SAFETENSORS_MAX_HEADER 100000000u
/** Most `__metadata__` entries accepted by the readers and writers (the reference has no limit;
 *  real files hold a handful). Bounds the memory a hostile header can make the reader use. */
#define TG_SAFETENSORS_MAX_META 65536u

/**
 * Read a safetensors file: 8-byte little-endian header length N, N bytes of JSON mapping each
 * tensor name to `{"dtype": ..., "shape": [...], "data_offsets": [begin, end]}` plus an
 * optional `"__metadata__"` string-to-string map, then the data section (offsets relative to
 * its start, little-endian, row-major). Whitespace may pad the header (writers pad it to a
 * multiple of 8 bytes with spaces).
 *
 * Every tensor becomes a ::TG_KIND_CONST tensor named with its key (truncated to
 * ::TG_NAME_MAX - 1 bytes; tg_safetensors_name() keeps the full key). Dtypes:
 * F32 and F64 are kept; F16 and BF16 are converted exactly to f32; BOOL (0 and 1) and every
 * integer dtype (U8, I8, U16, I16, I32, U32, I64, U64) become ::TG_I32, values checked to fit
 * (check 12: a 64-bit id file from PyTorch reads exactly as long as its values are 32-bit).
 * tg_safetensors_file_dtype() tells which dtype the file stored. Rank-0 tensors (shape [])
 * are read; tgrad tensors have no zero-size dims, so a dim of 0 is rejected.
 *
 * Checks, in this order (the first failing one is reported), with their status:
 * 1. file shorter than the 8-byte size field: ::TG_ERR_TRUNCATED;
 * 2. N impossible for this file (checks 3 or 4 would fail) and, within the 64 bytes after
 *    the size field, the first one that is not JSON whitespace is not '{':
 *    ::TG_ERR_HEADER_SIZE with `<file>: not a safetensors file (...)` (a text file, an image
 *    or an .npy file given by mistake);
 * 3. N < 2 or N > ::TG_SAFETENSORS_MAX_HEADER: ::TG_ERR_HEADER_SIZE (an absurd length field);
 * 4. fewer than N bytes after the size field: ::TG_ERR_TRUNCATED (the file was cut short);
 * 5. while parsing the header, in text order: not strict RFC 8259 JSON (strings with every
 *    escape incl. surrogate pairs and valid UTF-8, no trailing commas or garbage, nesting
 *    <= 64), not an object, a tensor entry not an object, a missing or unknown field, dtype
 *    not a string, shape or data_offsets not arrays of non-negative integers (negative,
 *    fraction or exponent), data_offsets not exactly 2 entries, `__metadata__` not an object
 *    of strings: ::TG_ERR_JSON; a field or `__metadata__` twice, or a metadata key twice:
 *    ::TG_ERR_DUPLICATE; a name or metadata string containing NUL, or more than
 *    ::TG_SAFETENSORS_MAX_META metadata entries: ::TG_ERR_UNSUPPORTED; more than 1024 tensors
 *    and more tensors than the data section has bytes (each needs at least one):
 *    ::TG_ERR_TRUNCATED at once (for fewer tensors that case is reported by check 8);
 * 6. for each tensor in header order: unknown or unreadable dtype (e.g. "F8_E4M3"), rank >
 *    ::TG_MAX_RANK, a dim of 0: ::TG_ERR_UNSUPPORTED; a dim or the element count overflowing
 *    64-bit sizes (or tgrad's tensor limit): ::TG_ERR_OVERFLOW; begin > end or an offset
 *    beyond 2^63: ::TG_ERR_OUT_OF_BOUNDS; end - begin != numel * dtype size:
 *    ::TG_ERR_SIZE_MISMATCH;
 * 7. a tensor name twice: ::TG_ERR_DUPLICATE;
 * 8. data section shorter than the tensors' total byte size: ::TG_ERR_TRUNCATED;
 * 9. a range ending past the data section: ::TG_ERR_OUT_OF_BOUNDS;
 * 10. ranges sorted by offset overlapping: ::TG_ERR_OVERLAP; leaving a hole, or the first not
 *    starting at 0: ::TG_ERR_GAP;
 * 11. bytes after the last range: ::TG_ERR_TRAILING;
 * 12. while reading the data (in file order): an integer element outside the i32 range
 *    [-2^31, 2^31 - 1]: ::TG_ERR_UNSUPPORTED (`tg_safetensors_read: ids.st: data of tensor
 *    'ids': element 3 (I64) is 4294967296, not an integer in the i32 range [...]`).
 * Also: open/read failure, or a path that is not a regular file, ::TG_ERR_IO (with strerror);
 * allocation failure ::TG_ERR_NOMEM; NULL arguments ::TG_ERR_ARG.
 * Memory: nothing is allocated for the tensors before every check above has passed, so their
 * size is bounded by the file's; the parse itself holds the header plus a record per entry.
 * The worst case is a header of ~1.5 million one-byte tensors, which needs about 13 bytes of
 * memory per byte of file.
 * Messages look like `tg_safetensors_read: model.st: tensor 'w': data_offsets [0, 20] hold 20
 * bytes but F32 [2, 3] needs 24`.
 *
 * @return the parsed file (owned by @p ctx, valid until tg_ctx_free()), or NULL on error with
 *         the status recorded on @p ctx and nothing left allocated.
 */
TG_API tg_safetensors *tg_safetensors_read(tg_ctx *ctx, const char *path);
/** Like tg_safetensors_read() from @p size bytes at @p data (borrowed, only read during the
 *  call). Messages name the file "<memory>". */
TG_API tg_safetensors *tg_safetensors_read_mem(tg_ctx *ctx, const void *data, size_t size);
/**
 * Like tg_safetensors_read() from an open descriptor of any kind (a pipe, socket, terminal or
 * regular file), read from its current position to its end. This is the way to read a stream:
 * the path-based readers refuse anything but regular files. The stream is read whole into
 * memory first, at most @p max_bytes of it: a stream holding more is refused with ::TG_ERR_IO
 * (`<label>: the stream holds more than the limit of N bytes`), so `/dev/zero` cannot exhaust
 * memory. The read blocks until the writer closes its end; a non-blocking descriptor with no
 * data ready fails with ::TG_ERR_IO. @p fd is not closed.
 * @param label names the stream in messages, e.g. "<stdin>" (NULL: "<fd N>"); borrowed.
 * Errors: those of tg_safetensors_read(); ::TG_ERR_ARG for fd < 0.
 */
TG_API tg_safetensors *tg_safetensors_read_fd(tg_ctx *ctx, int fd, const char *label,
                                              uint64_t max_bytes);

/** Number of tensors (not counting `__metadata__`); 0 for NULL. */
TG_API int64_t tg_safetensors_count(const tg_safetensors *st);
/** Key of tensor @p i (0 <= i < count, header order), full length; NULL if out of range. */
TG_API const char *tg_safetensors_name(const tg_safetensors *st, int64_t i);
/** Tensor @p i (header order); NULL if out of range. */
TG_API tg_tensor *tg_safetensors_tensor(const tg_safetensors *st, int64_t i);
/** Dtype string the file stored for tensor @p i ("F32", "BF16", "I64", ...); NULL if out of
 *  range. */
TG_API const char *tg_safetensors_file_dtype(const tg_safetensors *st, int64_t i);
/** Tensor stored under key @p name (exact, case-sensitive; O(log n)); NULL if there is none.
 *  Does not record an error. */
TG_API tg_tensor *tg_safetensors_find(const tg_safetensors *st, const char *name);
/** Number of `__metadata__` entries (0 if the file has none). */
TG_API int64_t tg_safetensors_meta_count(const tg_safetensors *st);
/** Key of metadata entry @p i, in header order; NULL if out of range. */
TG_API const char *tg_safetensors_meta_key(const tg_safetensors *st, int64_t i);
/** Value of metadata entry @p i; NULL if out of range. */
TG_API const char *tg_safetensors_meta_value(const tg_safetensors *st, int64_t i);
/** Value stored under metadata key @p key, or NULL if absent. */
TG_API const char *tg_safetensors_meta_get(const tg_safetensors *st, const char *key);
/**
 * The one rule for an integer in a file's metadata (every count and size a checkpoint or an
 * export stores, read by the library and by the command line alike): decimal digits only, as
 * tgrad writes them, with no sign, space or leading zero ("0" itself is fine: "012", "+12",
 * " 12", "-0" are not integers), in [@p lo, @p hi] (0 <= lo <= hi <= INT64_MAX; never
 * overflows). Returns whether @p s is one; *out is set only then. NULL @p s: false.
 */
TG_API bool tg_meta_parse_int(const char *s, int64_t lo, int64_t hi, int64_t *out);

/**
 * Write @p n items as a safetensors file, atomically (see the file comment).
 * The output is deterministic: `__metadata__` first (if @p n_meta > 0) with keys in the given
 * order, then the tensors in the given order, data offsets assigned consecutively from 0,
 * minimal JSON (no whitespace; `"` `\` and control characters escaped as serde_json does:
 * `\b \t \n \f \r`, others `\u00xx`; other characters as raw UTF-8), the header padded with
 * spaces to a multiple of 8 bytes, then each item's data in its own dtype, little-endian.
 * This is byte-for-byte what the reference `safetensors.serialize` produces for the same
 * tensor order (the reference sorts tensors by dtype alignment and then by name; pass them in
 * that order to match it exactly). @p n may be 0.
 *
 * Errors (nothing is created on disk for these): ::TG_ERR_ARG (NULL ctx/path/arrays, n < 0,
 * n_meta over ::TG_SAFETENSORS_MAX_META, NULL or empty name, name "__metadata__", name or
 * metadata not valid UTF-8, rank out of range, NULL shape for rank > 0, NULL data),
 * ::TG_ERR_DUPLICATE (a name or metadata key twice), ::TG_ERR_DTYPE, ::TG_ERR_SHAPE (dim < 1),
 * ::TG_ERR_OVERFLOW, ::TG_ERR_HEADER_SIZE (header over ::TG_SAFETENSORS_MAX_HEADER),
 * ::TG_ERR_NOMEM, ::TG_ERR_IO (@p path exists and is not a regular file, or a link to one).
 * I/O failures: ::TG_ERR_IO with the failing step, the path and strerror() in the message;
 * the temporary file is removed and @p path left as it was (see the file comment).
 * Source: huggingface/safetensors README and `safetensors/src/tensor.rs` (`serialize`).
 *
 * @param meta_keys, meta_values @p n_meta strings each (may be NULL when @p n_meta is 0).
 * @param opts NULL for the defaults; see ::tg_write_opts (fault injection for tests).
 */
TG_API tg_status tg_safetensors_write_items(tg_ctx *ctx, const char *path, int64_t n,
                                            const tg_io_item *items, int64_t n_meta,
                                            const char *const *meta_keys,
                                            const char *const *meta_values,
                                            const tg_write_opts *opts);

/**
 * Convenience over tg_safetensors_write_items(): write the values of @p n tensors, each in its
 * own dtype, under @p names[i] (or, if @p names is NULL, the tensors' names).
 * Errors: as tg_safetensors_write_items().
 */
TG_API tg_status tg_safetensors_write(tg_ctx *ctx, const char *path, int64_t n,
                                      const tg_tensor *const *tensors, const char *const *names,
                                      int64_t n_meta, const char *const *meta_keys,
                                      const char *const *meta_values);

/**
 * Write the gradient buffers of @p n tensors (tg_tensor_grad()) under @p names[i] (or the
 * tensors' names if @p names is NULL), e.g. to compare with PyTorch's `p.grad`.
 * Errors: as tg_safetensors_write_items(); ::TG_ERR_NOGRAD if a tensor has no gradient buffer.
 */
TG_API tg_status tg_safetensors_write_grads(tg_ctx *ctx, const char *path, int64_t n,
                                            const tg_tensor *const *tensors,
                                            const char *const *names, int64_t n_meta,
                                            const char *const *meta_keys,
                                            const char *const *meta_values);

/**
 * Stream form of tg_safetensors_write_items(): the same bytes, sent to @p w (no temporary file,
 * no atomicity). Errors: as tg_safetensors_write_items(); ::TG_ERR_IO if @p w fails.
 */
TG_API tg_status tg_safetensors_write_to(tg_ctx *ctx, const tg_writer *w, int64_t n,
                                         const tg_io_item *items, int64_t n_meta,
                                         const char *const *meta_keys,
                                         const char *const *meta_values);
/**@}*/

/* ------------------------------------------------------------------------------------------ */
/** @name NumPy .npy */
/**@{*/

/** Element kind of an .npy file, so a caller can tell a boolean mask from a float one. */
typedef enum tg_npy_kind {
    TG_NPY_FLOAT = 0, /**< f2, f4, f8 */
    TG_NPY_BOOL,      /**< b1 (read as 0 and 1) */
    TG_NPY_INT        /**< i1, i2, i4, i8, u1, u2, u4, u8 */
} tg_npy_kind;

/** Largest .npy header accepted (bytes after the length field). NumPy's own limit is 10000. */
#define TG_NPY_MAX_HEADER 65536u

/**
 * Read an .npy file (format versions 1.0, 2.0 and 3.0) into a new ::TG_KIND_INPUT tensor of
 * dtype @p want, named after the file (its base name without ".npy").
 * The header is a Python dict literal with exactly the keys 'descr', 'fortran_order' and
 * 'shape', e.g. `{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }`.
 * Supported descr: `<f2 <f4 <f8 <i2 <i4 <i8 <u2 <u4 <u8` and the one-byte `|b1 |i1 |u1`;
 * values are converted to @p want: bools to 0 and 1; into f32/f64 integers round to nearest
 * (exact up to 2^24 / 2^53); into ::TG_I32 every element must be an integer in the i32 range
 * (an integer array by value, e.g. NumPy's default `<i8` ids; a float array only if every
 * value is integral, by the conversion rule of ::tg_dtype), else ::TG_ERR_UNSUPPORTED naming
 * the element. Rank-0 arrays (shape `()`) are read.
 *
 * Errors: ::TG_ERR_FORMAT (bad magic, header not a dict literal of the expected form, missing,
 * unknown or repeated key, shape not a tuple of non-negative integers), ::TG_ERR_UNSUPPORTED
 * (format version other than 1.0/2.0/3.0; object '|O', structured, big-endian, native-order
 * '=' or other unsupported dtypes; fortran_order True unless at most one dim exceeds 1, where
 * both orders are the same bytes; a dim of 0; rank > ::TG_MAX_RANK), ::TG_ERR_HEADER_SIZE
 * (header longer than ::TG_NPY_MAX_HEADER), ::TG_ERR_TRUNCATED (file ends inside the preamble,
 * header or data), ::TG_ERR_TRAILING (bytes after the data), ::TG_ERR_OVERFLOW (a dim or the
 * shape product overflows), ::TG_ERR_UNSUPPORTED also for a value that does not fit an i32
 * @p want, ::TG_ERR_FORMAT also for a finite `<f8` value beyond the f32 range (e.g. 1e308)
 * read as ::TG_F32 (`element 3 (F64) is 1e+308, beyond the f32 range ...`), ::TG_ERR_DTYPE (@p want not f32/f64/i32), ::TG_ERR_IO, ::TG_ERR_NOMEM,
 * ::TG_ERR_ARG; ::TG_ERR_IO also for a path that is not a regular file (read a stream with
 * tg_npy_read_fd()). Source: NumPy NEP 1 and `numpy.lib.format`.
 *
 * @param kind_out if not NULL, receives the file's element kind on success.
 * @return the tensor (owned by @p ctx), or NULL with the status recorded and nothing left
 *         allocated.
 */
TG_API tg_tensor *tg_npy_read(tg_ctx *ctx, const char *path, tg_dtype want,
                              tg_npy_kind *kind_out);
/** Like tg_npy_read() from @p size bytes at @p data; the tensor gets a generated name. */
TG_API tg_tensor *tg_npy_read_mem(tg_ctx *ctx, const void *data, size_t size, tg_dtype want,
                                  tg_npy_kind *kind_out);
/** Like tg_npy_read() from an open descriptor of any kind, read to its end, at most
 *  @p max_bytes (see tg_safetensors_read_fd()); the tensor gets a generated name. */
TG_API tg_tensor *tg_npy_read_fd(tg_ctx *ctx, int fd, const char *label, uint64_t max_bytes,
                                 tg_dtype want, tg_npy_kind *kind_out);

/**
 * Write tensor @p t's values as a version 1.0 .npy file ('<f4', '<f8' or '<i4', C order),
 * atomically.
 * The header is what `numpy.save` writes: keys in sorted order, the spare spaces NumPy adds so
 * the first dim can grow in place, then spaces and '\n' so the data starts at a multiple of 64
 * bytes. Errors: ::TG_ERR_ARG (NULL, or @p t of another context), ::TG_ERR_IO (temporary
 * file removed, old file untouched), ::TG_ERR_NOMEM.
 */
TG_API tg_status tg_npy_write(tg_ctx *ctx, const char *path, const tg_tensor *t);
/**
 * Write a raw buffer (e.g. a gradient from tg_tensor_grad()) as .npy, like tg_npy_write().
 * Errors: ::TG_ERR_ARG (NULL data, rank out of range), ::TG_ERR_SHAPE (dim < 1),
 * ::TG_ERR_DTYPE, ::TG_ERR_OVERFLOW, ::TG_ERR_IO.
 */
TG_API tg_status tg_npy_write_data(tg_ctx *ctx, const char *path, tg_dtype dtype, int rank,
                                   const int64_t *shape, const void *data);
/** tg_npy_write_data() taking an item (its name is ignored) and write options (may be NULL). */
TG_API tg_status tg_npy_write_item(tg_ctx *ctx, const char *path, const tg_io_item *item,
                                   const tg_write_opts *opts);
/** Stream form: send the .npy bytes of @p item to @p w (no atomicity). */
TG_API tg_status tg_npy_write_to(tg_ctx *ctx, const tg_writer *w, const tg_io_item *item);
/**@}*/

/* ------------------------------------------------------------------------------------------ */
/** @name Parameters by name (PyTorch `state_dict` keys) */
/**@{*/
/**
 * Load parameter values from a parsed safetensors file by name, like PyTorch
 * `load_state_dict`. @p params (n of them) are matched by their names (tg_tensor_name(), the
 * `state_dict` keys given by the module builders); @p params NULL means every parameter of the
 * context. File values of any dtype are converted into a float parameter (by the rule of
 * ::tg_dtype); an i32 tensor in @p params loads only from an integer tensor in the file.
 * Nothing is modified unless everything matches. A training checkpoint's optimizer state of
 * the loaded parameters (`adam.m.<name>`, `adam.v.<name>`, `sgd.momentum.<name>`, as
 * tg_checkpoint_save() writes it) is skipped, so a checkpoint loads strictly into a model
 * (tg_checkpoint_restore() restores that state into an optimizer). To build a whole model
 * from a checkpoint or an export, see tg_model_load() (tgrad_model.h).
 * Errors (message names the tensor):
 * ::TG_ERR_MISMATCH for a missing tensor, a shape different from the parameter's, a float
 * tensor for an i32 one, or (with @p strict) a tensor in the file that no parameter takes
 * (optimizer state of a parameter that is loaded is skipped, not unexpected);
 * ::TG_ERR_FORMAT for a finite f64 value beyond the f32 range of an f32 parameter (`tensor 'w'
 * element 1 is -1e+308 in the file, beyond the f32 range ...`); ::TG_ERR_ARG (an entry of
 * @p params NULL or of another context). @p st may come from any context (it is only data).
 */
TG_API tg_status tg_params_load_from(tg_ctx *ctx, const tg_safetensors *st, int64_t n,
                                     tg_tensor *const *params, bool strict);
/** tg_params_load_from() reading @p path first (errors of tg_safetensors_read() too). */
TG_API tg_status tg_params_load(tg_ctx *ctx, const char *path, int64_t n,
                                tg_tensor *const *params, bool strict);
/**
 * Save parameters under their names (NULL @p params: every parameter of the context, in
 * creation order) with optional metadata, atomically. Errors: as tg_safetensors_write().
 */
TG_API tg_status tg_params_save(tg_ctx *ctx, const char *path, int64_t n,
                                tg_tensor *const *params, int64_t n_meta,
                                const char *const *meta_keys, const char *const *meta_values);
/**@}*/

/* ------------------------------------------------------------------------------------------ */
/** @name Graph DOT files (see tg_graph_write_dot() in tgrad.h) */
/**@{*/
/** tg_graph_write_dot() with write options (@p opts NULL: the defaults; fault injection for
 *  tests, see ::tg_write_opts). Errors: as tg_graph_write_dot(). */
TG_API tg_status tg_graph_write_dot_opts(const tg_graph *g, const char *path, int flags,
                                         const tg_write_opts *opts);
/** The same DOT text sent to the byte sink @p w (a pipe, a memory buffer, stdout), not
 *  atomically. Errors: ::TG_ERR_ARG, ::TG_ERR_IO (the sink failed), ::TG_ERR_NOMEM. */
TG_API tg_status tg_graph_write_dot_to(const tg_graph *g, const tg_writer *w, int flags);
/**@}*/

#ifdef __cplusplus
}
#endif
#endif /* TGRAD_IO_H */
