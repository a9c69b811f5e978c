/*
 * fuzz_util.h - helpers shared by the libFuzzer harnesses (tests/fuzz/fuzz_*.c) and the replay
 * driver (replay.c): a capped, counting allocator for contexts, a memory sink for the writers,
 * and the checks every harness applies to a failed call.
 *
 * A harness is one file defining LLVMFuzzerTestOneInput(). It is linked either with libFuzzer
 * (clang, -Dfuzz=enabled) or with replay.c (any compiler, `meson test`), so it must not rely on
 * anything but this header, the public headers and, where it says so, internal ones from src/.
 * A finding is an abort(): a sanitizer report, a broken documented contract, a round trip that
 * changes the data, or a byte not returned to the allocator.
 */
#ifndef TG_FUZZ_UTIL_H
#define TG_FUZZ_UTIL_H

#include "tgrad.h"
#include "tgrad_io.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* The libFuzzer entry point every harness defines. */
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* Live bytes a fuzzed context may hold: a hostile size claim past this is NOMEM, not an RSS
 * blow-up (libFuzzer runs with -rss_limit_mb=2048). */
#define FZ_CAP ((size_t)256 << 20)

/* Allocator state for one context. */
typedef struct fz_alloc {
    tg_allocator al; /* hook passed to tg_ctx_new_with (user = this struct) */
    size_t cap;      /* refuse an allocation that would take live bytes past this */
    size_t live;     /* bytes handed out and not yet returned */
    size_t peak;     /* most bytes live at once */
    uint64_t count;  /* allocations served or refused so far */
    uint64_t fail_at; /* if > 0, allocation number fail_at (1-based) fails */
} fz_alloc;

/* New context on a fresh capped allocator (abort if even that fails). */
tg_ctx *fz_ctx_new(fz_alloc *a, size_t cap);
/* tg_ctx_free, then abort unless every byte went back to the allocator. */
void fz_ctx_free(tg_ctx *ctx, fz_alloc *a);

/* Memory a reader may hold at its peak for an input of n bytes: FZ_AMP * n + FZ_AMP_SLACK.
 * The widest legitimate case is a header of thousands of one-byte rank-0 tensors (about 12x:
 * a parse entry and a tensor record per ~50 header bytes); a reader that allocates by what a
 * file claims rather than what it holds goes far past this. */
#define FZ_AMP 32
#define FZ_AMP_SLACK ((size_t)64 << 10)
/* Start measuring the peak (returns the live bytes now). */
size_t fz_peak_start(fz_alloc *a);
/* Abort if the peak since fz_peak_start(a) == @p live0 exceeds the bound for @p size bytes. */
void fz_check_peak(const fz_alloc *a, size_t live0, size_t size, const char *fn);

/* A failed call must have recorded a status from @p allowed (a TG_OK-terminated list) and a
 * one-line message starting with "@p fn: " (for NOMEM: with some "tg...: "), and left the context holding @p bytes_before bytes
 * (tgrad_io.h: "On failure nothing stays allocated"). Aborts otherwise. */
void fz_check_failure(tg_ctx *ctx, const char *fn, size_t bytes_before, const tg_status *allowed);

/* A message for the user (a CLI error, a rejection of a checkpoint): abort unless @p msg is
 * one clean line: not empty, at most FZ_LINE_MAX bytes (a value quoted without bound is a
 * finding), no control character (C0, DEL, or C1 as UTF-8 U+0080..U+009F) and no newline.
 * @p what names the call in the abort message. */
#define FZ_LINE_MAX 600
void fz_check_line(const char *what, const char *msg);

/* Growable memory sink for tg_safetensors_write_to / tg_npy_write_to (ENOMEM past FZ_CAP). */
typedef struct fz_membuf {
    unsigned char *p;
    size_t len, cap;
} fz_membuf;
tg_writer fz_membuf_writer(fz_membuf *b);
void fz_membuf_free(fz_membuf *b);

/* A regular file holding the input, for the path-based readers (their streaming code differs
 * from the in-memory one): a memfd on Linux, named "/proc/self/fd/N" in @p path (>= 32 bytes).
 * Returns the descriptor to pass to fz_file_close, or -1 where this is not available. */
int fz_file_open(const uint8_t *data, size_t size, char *path, size_t path_size);
void fz_file_close(int fd);

/* FNV-1a of the input: picks the allocation an out-of-memory pass fails, deterministically. */
uint64_t fz_hash(const uint8_t *data, size_t size);

/* Print "fuzz: <message>" (and the context's message if ctx) to stderr and abort(). */
#if defined(__GNUC__)
__attribute__((format(printf, 2, 3), noreturn))
#endif
void fz_die(const tg_ctx *ctx, const char *fmt, ...);

#endif /* TG_FUZZ_UTIL_H */
