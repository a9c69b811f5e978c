/*
 * data.h - training data for `tgrad train` and `tgrad sample`: byte-level text corpora and the
 * built-in algorithmic tasks (copy, reverse, sort of random digit sequences).
 */
#ifndef TG_DATA_H
#define TG_DATA_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "tgrad.h"

/* A byte-level corpus: vocabulary = the distinct bytes of the text, sorted. */
typedef struct {
    unsigned char *bytes; /* the concatenated files */
    int64_t n;
    int64_t n_train;      /* bytes [0, n_train) train, [n_train, n) validation */
    int vocab_size;
    unsigned char vocab[256]; /* id -> byte */
    int id_of[256];           /* byte -> id, -1 if absent */
    int n_files;              /* files read (duplicates by real path skipped) */
    int n_dirs;               /* directories skipped */
    uint64_t hash;            /* corpus_hash: the text's content, file boundaries and count */
} corpus;

/* Largest corpus read (bytes, all files together). */
#define CORPUS_MAX_BYTES ((int64_t)1 << 30)

/* Read and concatenate `n_paths` files (directories and repeated real paths skipped), split off
 * the last `val_fraction` (in [0, 1)) for validation. Files are opened with O_NONBLOCK and
 * anything that is not a regular file (a FIFO, a device) is refused, so nothing can block; the
 * total is limited to CORPUS_MAX_BYTES. If only directories were given, the message says so.
 * On error writes one line to `err` ("--text 'x' is a FIFO ...") and returns false. */
bool corpus_load(corpus *c, const char *const *paths, int n_paths, double val_fraction,
                 char *err, size_t err_size);
void corpus_free(corpus *c);
/* 64-bit FNV-1a over the concatenated bytes in the order read, then over each file's end
 * offset (8 bytes, little-endian) and the number of files: the same files in another order or
 * split differently hash differently. corpus_load sets c->hash with it; @p ends holds the
 * cumulative end offset of each of the @p n_files files. */
uint64_t corpus_hash(const unsigned char *bytes, int64_t n, const int64_t *ends, int n_files);
/* Is @p path a regular file (cli_regular_file) of at most @p max_bytes (<= 0: any size)?
 * (stat only: never blocks.) Otherwise one line in @p err saying what it is ("'p': is a FIFO,
 * not a regular file"), why it cannot be read ("'p': No such file or directory") or how big it
 * is, to follow the option's name. */
bool data_check_regular(const char *path, double max_bytes, char *err, size_t err_size);

/* The memory this process may use, in bytes: the machine's physical memory (sysconf; a huge
 * value if unknown), or the address-space or data-segment limit (ulimit -v, -d) if lower. */
double phys_memory_bytes(void);

/* Vocabulary as lowercase hex (2 chars per byte) for checkpoint metadata, and back. */
void vocab_to_hex(const unsigned char *vocab, int n, char *out);
/* The value of hex digit @p c (0-9, a-f, A-F), or -1. */
int hex_digit(char c);
/* Strict: 2 to 512 hex digits, an even number of them; returns the byte count or -1. */
int vocab_from_hex(const char *hex, unsigned char *vocab);

/* Fill ids/targets (B, T), i32 token ids, with random training windows drawn with the context
 * RNG. */
void corpus_train_batch(tg_ctx *ctx, const corpus *c, int64_t B, int64_t T, int32_t *ids,
                        int32_t *targets);
/* The k-th validation window batch (deterministic; non-overlapping windows of T bytes, at most
 * 4096 of them spread evenly over a large split); returns the number of windows written (< B at
 * the end: remaining rows get ignore targets = -1). */
int64_t corpus_val_batch(const corpus *c, int64_t k, int64_t B, int64_t T, int32_t *ids,
                         int32_t *targets);
/* Number of validation windows of T (all of them, or at most 4096 spread evenly). */
int64_t corpus_val_windows(const corpus *c, int64_t T);
/* Number of validation batches of B windows of T. */
int64_t corpus_val_batches(const corpus *c, int64_t B, int64_t T);

/* Algorithmic tasks over digits 0-9 (vocabulary 10): target[i] is the i-th output symbol. */
typedef enum { TASK_COPY, TASK_REVERSE, TASK_SORT } task_kind;
bool task_parse(const char *name, task_kind *k);
const char *task_name(task_kind k);
/* B sequences of length T from `rng_state` (a private splitmix64 state, so held-out data does
 * not depend on training). */
void task_batch(task_kind k, uint64_t *rng_state, int64_t B, int64_t T, int32_t *ids,
                int32_t *targets);
/* Training batch from the context RNG. */
void task_train_batch(tg_ctx *ctx, task_kind k, int64_t B, int64_t T, int32_t *ids,
                      int32_t *targets);

#endif
