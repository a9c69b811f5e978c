/*
 * io.h - internal helpers shared by the interop formats (layer 5): byte sources over a file or
 * a memory buffer, growable byte buffers, little-endian and half-precision conversions,
 * item validation, and the atomic file writer.
 */
#ifndef TG_IO_H
#define TG_IO_H

#include "core.h"
#include "tgrad_io.h"

#include <stdio.h>

/* ----- byte sources ------------------------------------------------------------------------ */
/* A regular file (size known from fstat), a stream read whole into memory first (bounded),
 * or a borrowed memory buffer, read sequentially. */
typedef struct tg__src {
    const char *fn;            /* API function name for messages */
    const char *label;         /* file path, "<memory>" or "<fd N>" */
    char label_buf[32];        /* "<fd N>" when tg__src_open_fd was given no label */
    FILE *f;                   /* NULL for memory */
    const unsigned char *mem;  /* memory contents (borrowed or slurped) */
    unsigned char *owned;      /* slurped buffer to tg__free, or NULL */
    uint64_t size;             /* total bytes */
    uint64_t pos;              /* bytes consumed */
} tg__src;

/* Open @p path for reading. Only a regular file is accepted: anything else (directory,
 * device, FIFO, socket) is TG_ERR_IO "'path' is not a regular file (a FIFO)", and a FIFO
 * without a writer cannot block the open. Records TG_ERR_IO / TG_ERR_NOMEM; returns the
 * status. */
tg_status tg__src_open_file(tg_ctx *ctx, tg__src *s, const char *fn, const char *path);
/* Read descriptor @p fd to its end (any file type; not closed) into memory, at most
 * @p max_bytes (more: TG_ERR_IO). @p label names it in messages (borrowed; NULL: "<fd N>"). */
tg_status tg__src_open_fd(tg_ctx *ctx, tg__src *s, const char *fn, int fd, const char *label,
                          uint64_t max_bytes);
/* "a directory", "a character device", "a FIFO", ... for a st_mode. */
const char *tg__ftype_name(unsigned mode);
void tg__src_open_mem(tg__src *s, const char *fn, const void *data, size_t size);
void tg__src_close(tg_ctx *ctx, tg__src *s);
/* Bytes left. */
static inline uint64_t tg__src_left(const tg__src *s) { return s->size - s->pos; }
/* Read exactly n bytes (the caller has checked n <= tg__src_left). A short read means the file
 * changed under us: TG_ERR_TRUNCATED; a read error TG_ERR_IO. @p what names the part read. */
tg_status tg__src_read(tg_ctx *ctx, tg__src *s, void *dst, size_t n, const char *what);

/* ----- growable byte buffer (context memory) ----------------------------------------------- */
typedef struct tg__buf {
    const char *fn; /* API function named in an out-of-memory message */
    char *p;
    size_t len, cap;
    bool failed; /* an allocation failed (TG_ERR_NOMEM recorded) */
} tg__buf;

bool tg__buf_put(tg_ctx *ctx, tg__buf *b, const void *data, size_t n);
bool tg__buf_puts(tg_ctx *ctx, tg__buf *b, const char *s);
bool tg__buf_putc(tg_ctx *ctx, tg__buf *b, char c);
bool tg__buf_put_u64(tg_ctx *ctx, tg__buf *b, uint64_t v); /* decimal */
void tg__buf_free(tg_ctx *ctx, tg__buf *b);

/* ----- encodings ---------------------------------------------------------------------------- */
bool tg__host_is_le(void);
uint16_t tg__le16(const unsigned char *p);
uint32_t tg__le32(const unsigned char *p);
uint64_t tg__le64(const unsigned char *p);
void tg__put_le16(unsigned char *p, uint16_t v);
void tg__put_le32(unsigned char *p, uint32_t v);
void tg__put_le64(unsigned char *p, uint64_t v);
/* IEEE binary16 / bfloat16 bits -> float (exact; subnormals, inf and NaN kept). */
float tg__f16_to_f32(uint16_t h);
/* tg__bf16_to_f32, tg__utf8_len, tg__utf8_valid: src/core/core.h */
/* The value of hex digit @p c (0-9, a-f, A-F), or -1. */
int tg__hex_digit(int c);
/* @p s (a name or value from a file) as one short printable line for a message: at most
 * @p max bytes (cut on a UTF-8 character boundary, then "..."), control characters (C0, DEL,
 * and C1 as UTF-8) shown as '?'. @p buf holds max + 4 bytes; it is returned. */
const char *tg__quote(const char *s, size_t max, char *buf);
/* strerror into buf (thread-safe). */
const char *tg__strerror(int err, char *buf, size_t n);

/* Element formats the readers convert from (little-endian on disk). */
typedef enum tg__efmt {
    TG__E_BOOL, TG__E_U8, TG__E_I8, TG__E_U16, TG__E_I16, TG__E_U32, TG__E_I32, TG__E_U64,
    TG__E_I64, TG__E_F16, TG__E_BF16, TG__E_F32, TG__E_F64
} tg__efmt;
size_t tg__efmt_size(tg__efmt e);
/* Convert n elements of e (little-endian bytes at src) to dt at dst. Into TG_I32 every element
 * must be an integer in the i32 range (integer formats by value, bools as 0/1, floats by the
 * rule of tg_dtype), into TG_F32 an F64 must be within the f32 range (tg__f32_ok): returns
 * the index of the first that is not (the conversion stops there), or -1 when all converted. */
int64_t tg__convert_le(void *dst, tg_dtype dt, const unsigned char *src, tg__efmt e, size_t n);
/* Read n elements of format e from s into dst (dtype dt), converting, in bounded chunks. An
 * element that does not fit TG_I32 is TG_ERR_UNSUPPORTED "label: what: element 3 (I64) is
 * 4294967296, not an integer in the i32 range [...]"; an F64 beyond the f32 range read as
 * TG_F32 is TG_ERR_FORMAT "label: what: element 3 (F64) is 1e+308, beyond the f32 range". */
tg_status tg__src_read_elems(tg_ctx *ctx, tg__src *s, void *dst, tg_dtype dt, tg__efmt e,
                             uint64_t n, const char *what);

/* ----- writing ------------------------------------------------------------------------------ */
/* Validate an item (name not checked); on success sets *nbytes. Records the error (naming fn
 * and, if idx >= 0, the item index) and returns the status. */
tg_status tg__item_check(tg_ctx *ctx, const char *fn, const tg_io_item *it, int64_t idx,
                         uint64_t *nbytes);
/* Send n bytes to w; TG_ERR_IO (recorded, naming fn and what) if it fails. */
tg_status tg__write(tg_ctx *ctx, const char *fn, const tg_writer *w, const void *p, size_t n,
                    const char *what);
/* Send an item's data (n elements of dt) little-endian, swapping through a bounce buffer on
 * big-endian hosts. */
tg_status tg__write_data(tg_ctx *ctx, const char *fn, const tg_writer *w, const void *data,
                         tg_dtype dt, uint64_t nbytes);

/* Produce the file's bytes through w (the public tg_emit_fn). */
typedef tg_emit_fn tg__emit_fn;
/* Atomic write of @p path (see tgrad_io.h and the comment in io.c): refuse a target that is
 * not a regular file; remove stale temporaries of ours; temporary in the target's directory
 * (O_TMPFILE where possible, else named, flock-ed either way), emit, write, fsync, close,
 * rename, fsync the directory; on failure the temporary is removed and @p path untouched.
 * @p opts may inject a failure at any step (tests). */
tg_status tg__write_atomic(tg_ctx *ctx, const char *fn, const char *path,
                           const tg_write_opts *opts, tg__emit_fn emit, void *user);

/* tg_safetensors_write_items() with messages naming @p fn (e.g. tg_checkpoint_save). */
tg_status tg__st_write_items(tg_ctx *ctx, const char *fn, const char *path, int64_t n,
                            const tg_io_item *items, int64_t n_meta, const char *const *keys,
                            const char *const *vals, const tg_write_opts *opts);

/* tg_params_load_from() with messages naming @p fn (tg_params_load, tg_checkpoint_restore);
 * tensor names from the file are quoted as one short printable line. */
tg_status tg__params_load_from(tg_ctx *ctx, const char *fn, const tg_safetensors *st, int64_t n,
                               tg_tensor *const *params, bool strict);

/* Remove tensor t created by a reader that failed later (frees its data and record). */
void tg__tensor_discard(tg_ctx *ctx, tg_tensor *t);

/* The shortest "%.<p>g" of v that strtod reads back as v (%.17g always does); "inf", "nan"
 * as %g writes them (src/io/model_meta.c). */
void tg__fmt_double(double v, char *buf, size_t n);

/* Optimizer state read from a file (src/train/checkpoint.c): every value finite, and Adam's
 * second moments (@p name "adam.v.*") >= 0; one NaN would silently turn every later step of
 * that parameter into NaN. The first bad element's index, or -1 (an integer tensor: -1). */
int64_t tg__optim_state_bad(const char *name, const tg_tensor *f);
/* Why optimizer state @p name element @p bad is refused, into @p buf: "optimizer state 'x'
 * element 3 is nan (expected a finite value)". */
void tg__optim_state_msg(char *buf, size_t n, const char *name, const tg_tensor *f,
                         int64_t bad);

struct tg_train_state;
/* The training state's metadata (data.position, train.steps, data.epoch with data.batch,
 * train.best_val, and optim.step, rng) of checkpoint @p st validated as
 * tg_train_state_read() validates it (src/train/state.c), errors naming @p fn and @p label;
 * @p required: optim.step and rng must be there (else each is checked only when present).
 * @p out (may be NULL) gets the state. TG_OK or TG_ERR_FORMAT. */
tg_status tg__train_state_fields(tg_ctx *ctx, const char *fn, const char *label,
                                 const tg_safetensors *st, bool required,
                                 struct tg_train_state *out);

#endif /* TG_IO_H */
