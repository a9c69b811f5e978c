/*
 * outpath.h - the one rule for every file a `tgrad` command writes (train --checkpoint, --log,
 * --plot, --dot; run --out, --attn-out, --grads, --dot; export --out; translate --out; and
 * ding-pairs' files):
 *   - an existing file is replaced only with --force (train also replaces the run's own log,
 *     plot and DOT file when resuming); without it the command stops with a usage error
 *     (exit 2) naming the file and --force, before anything is written;
 *   - a symbolic link is written through (the link stays, its target is replaced) when it
 *     points to a regular file; a link to nothing or to anything else is refused;
 *   - a directory, FIFO, device or socket is never replaced, even with --force;
 *   - an output never names one of the command's inputs, even with --force
 *     (outpath_not_input: the same device and inode, so links count);
 *   - every file is written by the library's one writer (outpath_write over tg_file_write):
 *     a temporary renamed into place, nothing removed or truncated that it did not create.
 * outpath_check and outpath_not_input only stat: nothing is opened or created.
 */
#ifndef TG_OUTPATH_H
#define TG_OUTPATH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

#include "tgrad.h"

typedef enum {
    OUTPATH_OK = 0,     /* absent, or an existing file that may be replaced */
    OUTPATH_ERROR = 1,  /* not a regular file (or a link to none), or stat failed: exit 1 */
    OUTPATH_EXISTS = 2, /* an existing file and no --force: a usage error, exit 2 */
} outpath_status;

/* Check output @p path of option @p opt ("--log"). @p replace: the file may be replaced
 * (--force, or the run's own file). On a refusal writes one line to @p err, e.g.
 * "--log 'k.csv' exists (pass --force to replace it)"; @p exists (may be NULL) tells whether
 * the path names an existing file (through a link). */
outpath_status outpath_check(const char *opt, const char *path, bool replace, bool *exists,
                             char *err, size_t n);

/*
 * Write output @p path of option @p opt ("--out") through the library's one writer,
 * tg_file_write() (tgrad_io.h): a regular file only (a device, FIFO, directory or socket is
 * refused untouched), a temporary file beside it that is fsync()ed and renamed into place, and
 * on any failure (@p emit's, a full disk) the temporary removed, an existing file left
 * byte-identical and no new file created. @p emit prints the contents to @p f (a stream into
 * the temporary) and returns false if it cannot produce them. @p ctx: a context for the
 * library's message (NULL: one is made for the call). false with one line in @p err, e.g.
 * "--out 'x.txt': cannot write ...: No space left on device". The replace rule (outpath_check)
 * is the caller's, before it computes what to write.
 */
typedef bool (*outpath_emit_fn)(FILE *f, void *user);
bool outpath_write(tg_ctx *ctx, const char *opt, const char *path, outpath_emit_fn emit,
                   void *user, char *err, size_t n);

/*
 * May output @p out (of option @p out_opt) be written, given input @p in (of option
 * @p in_opt)? false when both name one file: the same string, or the same device and inode
 * (through symbolic and hard links; an output that does not exist yet is never an input).
 * An output never replaces, truncates or appends to an input, even with --force: one line in
 * @p err, e.g. "--out 'v.tsv' is the input --eval 'v.tsv' (an output never replaces ...)";
 * the caller stops with a usage error (exit 2) before anything is written. NULL @p out or
 * @p in: true.
 */
bool outpath_not_input(const char *out_opt, const char *out, const char *in_opt,
                       const char *in, char *err, size_t n);



/*
 * One writer per checkpoint: an exclusive lock, held from the output checks to the end of the
 * run, named by the checkpoint's real path (symbolic links resolved, so two names of one file
 * share one lock). The checkpoint file cannot carry it (each save renames a new inode over
 * it), and a sidecar lock file would outlive a killed run as litter next to the checkpoint; so
 * the lock is a bound abstract Unix socket (Linux) "tgrad-checkpoint-<FNV-1a of the real
 * path>": binding is atomic (a second binder gets EADDRINUSE), nothing is created on disk, and
 * the kernel releases it when its process ends, however it ends. The holder's pid comes from
 * SO_PEERCRED. Its scope is one host (one network namespace).
 */
typedef struct outpath_lock {
    int fd; /* the bound socket; -1: not held */
} outpath_lock;

/* Take the lock of checkpoint @p path for option @p opt. false with one line in @p err, e.g.
 * "--checkpoint 'r.ckpt' is in use by another tgrad run (pid 4242)". When no lock can be had
 * at all (no Unix sockets here), true with a note in @p err (print it) and l->fd = -1. */
bool outpath_lock_take(outpath_lock *l, const char *opt, const char *path, char *err, size_t n);
/* Release the lock (nothing when not held). */
void outpath_lock_release(outpath_lock *l);

#endif
