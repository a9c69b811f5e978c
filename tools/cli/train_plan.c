/* train_plan.c - the outputs of `tgrad train`, checked before anything is trained (see
 * train_plan.h). */
#define _GNU_SOURCE /* O_TMPFILE, AT_EACCESS */
#include "train_plan.h"
#include "cli.h"
#include "climsg.h"
#include "tgrad_io.h"

#include <errno.h>
#include <dirent.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

void train_errf(const char *fmt, ...)
{
    char line[8192];
    va_list ap;
    va_start(ap, fmt);
    int k = snprintf(line, sizeof line, "tgrad train: ");
    vsnprintf(line + k, sizeof line - (size_t)k - 1, fmt, ap);
    va_end(ap);
    strcat(line, "\n");
    fputs(line, stderr); /* one write: never split by another rank's or stream's output */
}

/* Can we create files in the directory of @p path? (Fail before training, not after.) Asked
 * without naming a file, so a SIGKILL at any moment leaves nothing behind: an unnamed
 * O_TMPFILE inode where the file system supports it, else faccessat() for write and search
 * permission. */
static bool dir_writable(const char *opt, const char *path)
{
    char dir[4096];
    snprintf(dir, sizeof dir, "%s", path);
    char *slash = strrchr(dir, '/');
    if (slash)
        *(slash == dir ? slash + 1 : slash) = 0;
    else
        snprintf(dir, sizeof dir, ".");
    int e = 0;
#ifdef O_TMPFILE
    int fd = open(dir, O_TMPFILE | O_WRONLY | O_CLOEXEC, 0600);
    if (fd >= 0) {
        close(fd);
        return true;
    }
    e = errno;
    if (e == EOPNOTSUPP || e == EISDIR || e == EINVAL) /* no O_TMPFILE here: ask instead */
        e = 0;
#endif
    if (!e && faccessat(AT_FDCWD, dir, W_OK | X_OK, AT_EACCESS) != 0)
        e = errno;
    if (e) {
        train_errf("%s '%s': cannot create files in '%s': %s", opt, path, dir, strerror(e));
        return false;
    }
    return true;
}

/* One writer per checkpoint (outpath.h): held until the run ends. */
static bool lock_checkpoint(train_plan *t)
{
    char err[1400];
    if (!outpath_lock_take(t->lock, "--checkpoint", t->a->checkpoint, err, sizeof err)) {
        train_errf("%s", err);
        return false;
    }
    if (err[0]) /* no lock to be had: a note, and the run goes on */
        train_errf("%s", err);
    return true;
}

/* What the existing file @p path holds, for the refusal message. */
static void describe_existing(const char *path, const struct stat *sb, char *buf, size_t n)
{
    snprintf(buf, n, "a file of %lld bytes that is not a tgrad checkpoint", (long long)sb->st_size);
    if (sb->st_size > ((off_t)1 << 30))
        return;
    tg_ctx *c = tg_ctx_new();
    tg_safetensors *st = c ? tg_safetensors_read(c, path) : NULL;
    const char *mode = st ? tg_safetensors_meta_get(st, "data.mode") : NULL;
    const char *d = st ? tg_safetensors_meta_get(st, "model.d_model") : NULL;
    const char *l = st ? tg_safetensors_meta_get(st, "model.layers") : NULL;
    const char *s = st ? tg_safetensors_meta_get(st, "optim.step") : NULL;
    if (mode && d && s) {
        char m1[80], m2[80], m3[80], m4[80];
        snprintf(buf, n, "a checkpoint of another run (%s, layers %s, d_model %s, step %s)",
                 cli_show(mode, m1, sizeof m1), l ? cli_show(l, m2, sizeof m2) : "?",
                 cli_show(d, m3, sizeof m3), cli_show(s, m4, sizeof m4));
    }
    tg_ctx_free(c);
}

/* --checkpoint: never replace a non-regular file; replace another file only with --force (or
 * when it is the resumed checkpoint). A usage error sets t->usage (exit 2). */
static bool check_checkpoint_path(train_plan *t)
{
    const train_args *a = t->a;
    const char *p = a->checkpoint;
    bool resumed = a->resume && cli_same_file(p, a->resume), exists;
    char err[1200];
    outpath_status os = outpath_check("--checkpoint", p, true, &exists, err, sizeof err);
    if (os != OUTPATH_OK) {
        train_errf("%s", err);
        return false;
    }
    if (!dir_writable("--checkpoint", p))
        return false;
    if (!a->dry_run && !lock_checkpoint(t))
        return false;
    if (exists && !resumed && !a->force) {
        struct stat ls, sb;
        char what[400];
        if (lstat(p, &ls) == 0 && S_ISLNK(ls.st_mode))
            snprintf(what, sizeof what, "a symbolic link");
        else if (stat(p, &sb) == 0)
            describe_existing(p, &sb, what, sizeof what);
        else
            snprintf(what, sizeof what, "a file");
        train_errf("--checkpoint '%s' exists: %s; pass --resume '%s' to continue it, --force to "
             "replace it, or another --checkpoint", p, what, p);
        t->usage = true;
        return false;
    }
    return true;
}

/* --log, --plot, --dot: absent (in a writable directory), or an existing regular file we may
 * write and replace: with --force, or when resuming (the run's own files). */
static bool check_output(train_plan *t, const char *opt, const char *path,
                         bool replaced_by_rename)
{
    const train_args *a = t->a;
    char err[1200];
    bool exists;
    outpath_status os = outpath_check(opt, path, a->force || a->resume, &exists, err,
                                      sizeof err);
    if (os != OUTPATH_OK) {
        if (os == OUTPATH_EXISTS) {
            train_errf("%s; --resume continues a run's own log and plot", err);
            t->usage = true;
        } else {
            train_errf("%s", err);
        }
        return false;
    }
    if (exists) {
        if (access(path, W_OK) != 0) {
            train_errf("%s '%s': %s", opt, path, strerror(errno));
            return false;
        }
        if (!replaced_by_rename)
            return true;
    }
    return dir_writable(opt, path);
}

char *train_plan_tag_path(const char *ck, const char *tag)
{
    size_t n = strlen(ck), tl = strlen(tag);
    const char *base = strrchr(ck, '/'), *dot = strrchr(ck, '.');
    base = base ? base + 1 : ck;
    size_t at = dot && dot > base ? (size_t)(dot - ck) : n; /* (a leading dot: no extension) */
    char *p = malloc(n + tl + 1);
    if (p)
        snprintf(p, n + tl + 1, "%.*s%s%s", (int)at, ck, tag, ck + at);
    return p;
}

char *train_plan_best_path(const char *ck) { return train_plan_tag_path(ck, ".best"); }

char *train_plan_step_path(const char *ck, int64_t step)
{
    char tag[32];
    snprintf(tag, sizeof tag, ".step%" PRId64, step);
    return train_plan_tag_path(ck, tag);
}

/* --keep-best: needs --checkpoint; its file is none of the other outputs nor an input (the
 * resumed checkpoint included), and an existing one is replaced only with --force or by the
 * resumed run it belongs to (its --checkpoint is the --resume file, which kept its best). */
static bool check_best(train_plan *t)
{
    const train_args *a = t->a;
    if (!a->checkpoint) {
        train_errf("--keep-best needs --checkpoint (the best checkpoint goes beside it)");
        t->usage = true;
        return false;
    }
    char *p = t->best_path = train_plan_best_path(a->checkpoint), err[1400];
    if (!p) {
        train_errf("out of memory");
        return false;
    }
    const char *names[4] = {"--checkpoint", "--log", "--plot", "--dot"};
    const char *paths[4] = {a->checkpoint, a->log, a->plot, a->dot};
    bool ok = true;
    for (int i = 0; ok && i < 4; i++)
        if (paths[i] && cli_same_file(paths[i], p)) {
            snprintf(err, sizeof err, "--keep-best's file '%s' is %s's", p, names[i]);
            ok = false;
        }
    for (int k = 0; ok && k < a->text.n; k++)
        ok = outpath_not_input("--keep-best", p, "--text", a->text.v[k], err, sizeof err);
    ok = ok && outpath_not_input("--keep-best", p, "--pairs", a->pairs, err, sizeof err) &&
         outpath_not_input("--keep-best", p, "--valid", a->valid, err, sizeof err) &&
         outpath_not_input("--keep-best", p, "--spm", a->spm, err, sizeof err) &&
         outpath_not_input("--keep-best", p, "--resume", a->resume, err, sizeof err);
    if (!ok) {
        train_errf("%s", err);
        t->usage = true;
        return false;
    }
    bool own = t->resumed_best && cli_same_file(a->checkpoint, a->resume), exists;
    outpath_status os = outpath_check("--keep-best", p, a->force || own, &exists, err, sizeof err);
    if (os != OUTPATH_OK) {
        train_errf("%s", err);
        t->usage = os == OUTPATH_EXISTS;
        return false;
    }
    return dir_writable("--keep-best", p);
}

/* Is directory entry @p name a step file of checkpoint @p ck (its last component with
 * ".step" and a step count, canonical decimal digits, before its extension)? The step in
 * *step. */
static bool is_step_name(const char *ck, const char *name, int64_t *step)
{
    const char *base = strrchr(ck, '/'), *dot;
    base = base ? base + 1 : ck;
    dot = strrchr(base, '.');
    size_t stem = dot && dot > base ? (size_t)(dot - base) : strlen(base);
    const char *ext = base + stem;
    size_t nl = strlen(name), el = strlen(ext);
    if (nl <= stem + 5 + el || strncmp(name, base, stem) || strncmp(name + stem, ".step", 5) ||
        strcmp(name + nl - el, ext))
        return false;
    char digits[24];
    size_t dl = nl - el - stem - 5;
    if (dl >= sizeof digits)
        return false;
    memcpy(digits, name + stem + 5, dl);
    digits[dl] = 0;
    return tg_meta_parse_int(digits, 0, INT64_MAX, step);
}

/* Step file @p path (of step @p step) found beside the checkpoint: this run's (the resumed
 * run's train.kept lists it), or replaced only with --force, never an input. */
static bool check_step_file(train_plan *t, const char *path, int64_t step)
{
    const train_args *a = t->a;
    bool ours = false, ok = true, exists;
    for (int i = 0; i < t->n_kept; i++)
        ours |= t->kept[i] == step;
    char err[1400];
    for (int k = 0; ok && k < a->text.n; k++)
        ok = outpath_not_input("--keep-last", path, "--text", a->text.v[k], err, sizeof err);
    ok = ok && outpath_not_input("--keep-last", path, "--pairs", a->pairs, err, sizeof err) &&
         outpath_not_input("--keep-last", path, "--valid", a->valid, err, sizeof err) &&
         outpath_not_input("--keep-last", path, "--spm", a->spm, err, sizeof err) &&
         outpath_not_input("--keep-last", path, "--resume", a->resume, err, sizeof err);
    outpath_status os =
        ok ? outpath_check("--keep-last", path, ours || a->force, &exists, err, sizeof err)
           : OUTPATH_EXISTS;
    if (os == OUTPATH_OK)
        return true;
    if (os == OUTPATH_EXISTS && ok)
        snprintf(err, sizeof err,
                 "--keep-last: '%s' exists and is not a step file of this run "
                 "(pass --force to let the run replace it with its own)",
                 path);
    train_errf("%s", err);
    t->usage = os == OUTPATH_EXISTS;
    return false;
}

/* --keep-last: needs --checkpoint; every file already beside it that is named like a step
 * file of it (CK.stepS.ckpt) is checked (check_step_file). */
static bool check_keep_last(train_plan *t)
{
    const char *ck = t->a->checkpoint;
    if (!ck) {
        train_errf("--keep-last needs --checkpoint (the kept checkpoints go beside it)");
        t->usage = true;
        return false;
    }
    const char *slash = strrchr(ck, '/');
    char dir[4096];
    snprintf(dir, sizeof dir, "%.*s", slash ? (int)(slash - ck + 1) : 1, slash ? ck : ".");
    DIR *d = opendir(dir);
    if (!d) {
        train_errf("--keep-last: cannot read the directory '%s': %s", dir, strerror(errno));
        return false;
    }
    bool ok = true;
    for (struct dirent *e; ok && (e = readdir(d));) {
        int64_t step;
        if (!is_step_name(ck, e->d_name, &step))
            continue;
        char *p = train_plan_step_path(ck, step);
        ok = p ? check_step_file(t, p, step) : (train_errf("out of memory"), false);
        free(p);
    }
    closedir(d);
    return ok;
}

bool train_plan_outputs(train_plan *t)
{
    const train_args *a = t->a;
    const char *names[4] = {"--checkpoint", "--log", "--plot", "--dot"};
    const char *paths[4] = {a->checkpoint, a->log, a->plot, a->dot};
    for (int i = 0; i < 4; i++)
        for (int j = i + 1; j < 4; j++)
            if (paths[i] && paths[j] && cli_same_file(paths[i], paths[j])) {
                train_errf("%s and %s name the same file '%s'", names[i], names[j], paths[j]);
                return false;
            }
    /* an output never replaces (or, for --log, appends to) an input, even with --force: the
     * data trained on, the tokenizer model, or the resumed checkpoint unless it is the
     * checkpoint being saved (a usage error naming both options) */
    char err[1400];
    for (int i = 0; i < 4; i++) {
        if (!paths[i])
            continue;
        bool ok = true;
        for (int k = 0; ok && k < a->text.n; k++)
            ok = outpath_not_input(names[i], paths[i], "--text", a->text.v[k], err, sizeof err);
        ok = ok && outpath_not_input(names[i], paths[i], "--pairs", a->pairs, err, sizeof err) &&
             outpath_not_input(names[i], paths[i], "--valid", a->valid, err, sizeof err) &&
             outpath_not_input(names[i], paths[i], "--spm", a->spm, err, sizeof err) &&
             (i == 0 ||
              outpath_not_input(names[i], paths[i], "--resume", a->resume, err, sizeof err));
        if (!ok) {
            train_errf("%s", err);
            t->usage = true;
            return false;
        }
    }
    /* a new log is renamed into place; a resumed run's own log is continued in place */
    if (a->log && !check_output(t, "--log", a->log, !a->resume))
        return false;
    if (a->plot && !check_output(t, "--plot", a->plot, true))
        return false;
    if (a->dot && !check_output(t, "--dot", a->dot, true))
        return false;
    if (a->keep_best && !check_best(t))
        return false;
    if (a->keep_last && !check_keep_last(t))
        return false;
    /* last: the lock is taken once every other output is known to be fine */
    if (a->checkpoint && !check_checkpoint_path(t))
        return false;
    return true;
}

