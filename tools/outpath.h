/*
 * outpath.h - the one rule for every file a `tgrad` command writes (train --checkpoint, --log,
 * --plot, --dot; run --out, --attn-out, --grads, --dot; export --out):
 *   - an existing file is replaced only with --force (train also replaces the run's own log,
 *     plot and DOT file when resuming); without it the command stops with a usage error
 *     (exit 2) naming the file and --force, before anything is written;
 *   - a symbolic link is written through (the link stays, its target is replaced) when it
 *     points to a regular file; a link to nothing or to anything else is refused;
 *   - a directory, FIFO, device or socket is never replaced, even with --force.
 * stat/lstat only: nothing is opened or created.
 */
#ifndef TG_OUTPATH_H
#define TG_OUTPATH_H

#include <stdbool.h>
#include <stddef.h>

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

/* The file to write for output @p path: its target when @p path is a symbolic link to a
 * regular file (so a writer that renames a temporary into place keeps the link), else @p path
 * itself. Returns a malloc'd string (free it), or NULL when out of memory. */
char *outpath_target(const char *path);



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
