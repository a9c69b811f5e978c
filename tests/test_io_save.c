/*
 * test_io_save.c - the atomic writers under failure and attack (include/tgrad_io.h), and
 * checkpoint restore's metadata checks (include/tgrad_train.h):
 * - an I/O failure injected at every write(2) call and at the create, fsync, close, rename and
 *   directory fsync of a checkpoint-sized safetensors save and an .npy save, with EIO and
 *   ENOSPC, through O_TMPFILE and through a named temporary: TG_ERR_IO naming the path and the
 *   step, the old file byte-identical, no temporary left, nothing leaked, the context usable;
 * - a target that is not a regular file (FIFO, directory, socket, /dev/null, links to them, a
 *   dangling link) is refused before anything is created; a link to a regular file is written
 *   through and survives;
 * - a save never removes a file it did not create: temporaries of killed saves, a concurrent
 *   writer's, and look-alike names stay; SIGKILL at random moments never leaves a damaged file
 *   or more than one temporary per kill;
 * - a new file respects the umask;
 * - tg_checkpoint_restore rejects every malformed optim.step and rng and changes nothing.
 */
#define _GNU_SOURCE /* flock */

#include "testutil.h"
#include "tgrad_io.h"
#include "tgrad_nn.h"
#include "tgrad_train.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

/* ----- helpers -------------------------------------------------------------------------------- */
typedef struct bytes {
    unsigned char *p;
    size_t n;
} bytes;

static char tmpdir[64];

static void make_tmpdir(void)
{
    snprintf(tmpdir, sizeof tmpdir, "/tmp/tgrad_save.XXXXXX");
    ck_assert_ptr_nonnull(mkdtemp(tmpdir));
}

static void rm_tmpdir(void)
{
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpdir);
    ck_assert_int_eq(system(cmd), 0);
}

static const char *tpath(const char *name)
{
    static char p[8][512];
    static int k;
    k = (k + 1) % 8;
    snprintf(p[k], sizeof p[k], "%s/%s", tmpdir, name);
    return p[k];
}

static bytes read_file(const char *path)
{
    bytes b = {0};
    FILE *f = fopen(path, "rb");
    ck_assert_msg(f != NULL, "cannot open %s", path);
    ck_assert_int_eq(fseek(f, 0, SEEK_END), 0);
    long n = ftell(f);
    ck_assert_int_ge(n, 0);
    rewind(f);
    b.n = (size_t)n;
    b.p = malloc(b.n + 1);
    ck_assert_ptr_nonnull(b.p);
    ck_assert_uint_eq(fread(b.p, 1, b.n, f), b.n);
    fclose(f);
    return b;
}

static void write_file(const char *path, const void *data, size_t n)
{
    FILE *f = fopen(path, "wb");
    ck_assert_ptr_nonnull(f);
    ck_assert_uint_eq(fwrite(data, 1, n, f), n);
    ck_assert_int_eq(fclose(f), 0);
}

static bool same_bytes(const char *path, const bytes *want)
{
    bytes b = read_file(path);
    bool same = b.n == want->n && memcmp(b.p, want->p, b.n) == 0;
    free(b.p);
    return same;
}

/* Entries of directory d whose name contains ".tmp." (temporaries of any target). */
static int count_tmp_in(const char *d)
{
    DIR *dd = opendir(d);
    ck_assert_ptr_nonnull(dd);
    int n = 0;
    struct dirent *e;
    while ((e = readdir(dd)))
        n += strstr(e->d_name, ".tmp.") != NULL;
    closedir(dd);
    return n;
}

static int count_tmp(void) { return count_tmp_in(tmpdir); }

static bool exists(const char *path)
{
    struct stat st;
    return lstat(path, &st) == 0;
}

/* A model and optimizer whose checkpoint is ~1.3 MB: several tensors above the writer's 64 KiB
 * buffer (written by their own write(2) calls) and many small ones (buffered). */
typedef struct model {
    tg_ctx *ctx;
    tg_transformer m;
    tg_optim *opt;
} model;

static void model_init(model *md, int64_t d)
{
    md->ctx = tg_ctx_new();
    tg_transformer_config c;
    memset(&c, 0, sizeof c);
    c.vocab_size = 64;
    c.max_seq_len = 16;
    c.n_layers = 2;
    c.layer = tg_encoder_config_default(d, 4);
    c.layer.d_ff = 4 * d;
    ck_assert_int_eq(tg_transformer_init(md->ctx, &md->m, TG_F32, &c), TG_OK);
    tg_optim_config oc = tg_optim_defaults(TG_OPTIM_ADAMW);
    md->opt = tg_optim_new(md->ctx, &oc, 0, NULL);
    ck_assert_ptr_nonnull(md->opt);
}

/* ----- fault injection at every step ----------------------------------------------------------- */
static const char *step_words(tg_write_step s)
{
    switch (s) {
    case TG_WRITE_STEP_CREATE: return "cannot create a temporary file next to";
    case TG_WRITE_STEP_WRITE: return "write";
    case TG_WRITE_STEP_FSYNC: return "cannot fsync the new";
    case TG_WRITE_STEP_CLOSE: return "cannot close the new";
    case TG_WRITE_STEP_RENAME: return "cannot rename the new";
    case TG_WRITE_STEP_DIR_FSYNC: return "fsync of its directory failed";
    case TG_WRITE_STEP_NONE: break;
    }
    return "?";
}

/* One save of the file under test: a checkpoint (kind 0) or an .npy (kind 1). */
typedef struct subject {
    int kind;
    model *md;
    tg_io_item npy;
    const char *fn;
} subject;

static tg_status save(subject *s, const char *path, const tg_write_opts *o)
{
    if (s->kind == 0)
        return tg_checkpoint_save(s->md->ctx, path, s->md->opt, 1, (const char *[]){"note"},
                                  (const char *[]){"x"}, o);
    return tg_npy_write_item(s->md->ctx, path, &s->npy, o);
}

/* Assert a failed save: the status, one line naming fn, the path, the step and the errno;
 * the file at path equals want (the old bytes, or the new ones after a directory fsync
 * failure); no temporary; nothing leaked; then the context saves cleanly again. */
static void check_failed(subject *s, tg_status st, const char *path, tg_write_step step, int err,
                         const bytes *want, size_t ctx_bytes, const char *what)
{
    tg_ctx *ctx = s->md->ctx;
    const char *m = tg_ctx_message(ctx);
    ck_assert_msg(st == TG_ERR_IO && tg_ctx_status(ctx) == TG_ERR_IO, "%s: %s (%s)", what,
                  tg_status_str(st), m);
    ck_assert_msg(strncmp(m, s->fn, strlen(s->fn)) == 0 && m[strlen(s->fn)] == ':',
                  "%s: '%s' does not start with %s", what, m, s->fn);
    ck_assert_msg(strstr(m, path) && strstr(m, step_words(step)) && strstr(m, strerror(err)) &&
                      !strchr(m, '\n'),
                  "%s: message '%s' lacks the path, '%s' or '%s'", what, m, step_words(step),
                  strerror(err));
    ck_assert_msg(same_bytes(path, want), "%s: %s changed", what, path);
    ck_assert_msg(count_tmp() == 0, "%s: a temporary file was left", what);
    ck_assert_msg(tg_ctx_bytes(ctx) == ctx_bytes, "%s: %zu bytes leaked", what,
                  tg_ctx_bytes(ctx) - ctx_bytes);
    tg_ctx_clear_error(ctx);
    tg_write_opts fast = {.no_fsync = true};
    ck_assert_int_eq(save(s, tpath("other"), &fast), TG_OK);
}

static void fault_injection(subject *s, bool no_tmpfile, int err)
{
    tg_ctx *ctx = s->md->ctx;
    char path[512]; /* a copy: tpath's buffers rotate */
    snprintf(path, sizeof path, "%s", tpath(s->kind == 0 ? "ck.ckpt" : "a.npy"));
    tg_ctx_clear_error(ctx);
    /* the old file, then a change so the new bytes differ */
    ck_assert_int_eq(save(s, path, NULL), TG_OK);
    bytes old = read_file(path);
    static double bump;
    bump += 1;
    tg_fill(s->md->m.tok_emb, bump);
    if (s->kind == 1)
        ((double *)s->npy.data)[0] += 1;
    ck_assert_int_eq(save(s, tpath("new"), NULL), TG_OK);
    bytes nu = read_file(tpath("new"));
    ck_assert_int_eq(unlink(tpath("new")), 0);
    ck_assert(nu.n != old.n || memcmp(nu.p, old.p, old.n) != 0);
    size_t cb = tg_ctx_bytes(ctx);
    char what[160];

    /* every write(2) call, until the save makes fewer calls than the index */
    uint64_t k = 0;
    for (;; k++) {
        ck_assert_uint_lt(k, 10000);
        tg_write_opts o = {.fail_step = TG_WRITE_STEP_WRITE, .fail_at = k, .fail_errno = err,
                           .no_tmpfile = no_tmpfile};
        tg_status st = save(s, path, &o);
        if (st == TG_OK)
            break;
        snprintf(what, sizeof what, "%s, write call %llu, %s, %s", s->fn, (unsigned long long)k,
                 strerror(err), no_tmpfile ? "named" : "O_TMPFILE");
        check_failed(s, st, path, TG_WRITE_STEP_WRITE, err, &old, cb, what);
    }
    ck_assert_msg(k >= (s->kind == 0 ? 4u : 2u), "%s: only %llu write calls", s->fn,
                  (unsigned long long)k);
    ck_assert(same_bytes(path, &nu)); /* past the last call: a normal save */
    write_file(path, old.p, old.n);

    /* the other steps */
    const tg_write_step steps[] = {TG_WRITE_STEP_CREATE, TG_WRITE_STEP_FSYNC,
                                   TG_WRITE_STEP_CLOSE, TG_WRITE_STEP_RENAME,
                                   TG_WRITE_STEP_DIR_FSYNC};
    for (size_t i = 0; i < sizeof steps / sizeof steps[0]; i++) {
        tg_write_opts o = {.fail_step = steps[i], .fail_errno = err, .no_tmpfile = no_tmpfile};
        snprintf(what, sizeof what, "%s, step %d, %s, %s", s->fn, (int)steps[i], strerror(err),
                 no_tmpfile ? "named" : "O_TMPFILE");
        tg_status st = save(s, path, &o);
        /* only the directory fsync comes after the replacement */
        bool replaced = steps[i] == TG_WRITE_STEP_DIR_FSYNC;
        check_failed(s, st, path, steps[i], err, replaced ? &nu : &old, cb, what);
        if (replaced)
            write_file(path, old.p, old.n);
    }
    /* with no_fsync the fsync steps are not taken */
    tg_write_opts o = {.fail_step = TG_WRITE_STEP_FSYNC, .no_fsync = true};
    ck_assert_int_eq(save(s, path, &o), TG_OK);
    ck_assert(same_bytes(path, &nu));
    write_file(path, old.p, old.n);
    free(old.p);
    free(nu.p);
}

START_TEST(test_fault_injection)
{
    make_tmpdir();
    model md;
    model_init(&md, tu_under_valgrind() ? 32 : 64);
    double *v = calloc(300 * 300, sizeof *v);
    for (int i = 0; i < 300 * 300; i++)
        v[i] = i * 0.5;
    const int64_t shape[2] = {300, 300};
    subject subs[2] = {{0, &md, {0}, "tg_checkpoint_save"},
                       {1, &md, {NULL, TG_F64, 2, shape, v}, "tg_npy_write_item"}};
    const int errs[2] = {EIO, ENOSPC};
    for (int s = 0; s < 2; s++)
        for (int named = 0; named < 2; named++)
            for (int e = 0; e < (tu_under_valgrind() ? 1 : 2); e++)
                fault_injection(&subs[s], named, errs[e]);
    free(v);
    tg_ctx_free(md.ctx);
    rm_tmpdir();
}
END_TEST

/* The existing byte-limit injection still works through the new writer, named temporary too. */
START_TEST(test_fail_after_bytes_named)
{
    make_tmpdir();
    tg_ctx *ctx = tg_ctx_new();
    double d[3] = {1, 2, 3};
    tg_io_item it = {"x", TG_F64, 1, (const int64_t[]){3}, d};
    ck_assert_int_eq(tg_safetensors_write_items(ctx, tpath("x.st"), 1, &it, 0, NULL, NULL, NULL),
                     TG_OK);
    bytes old = read_file(tpath("x.st"));
    d[0] = 5;
    for (uint64_t lim = 0; lim < old.n; lim += 7) {
        tg_write_opts o = {.inject_write_failure = true, .fail_after_bytes = lim,
                           .no_tmpfile = true};
        tg_ctx_clear_error(ctx);
        ck_assert_int_eq(tg_safetensors_write_items(ctx, tpath("x.st"), 1, &it, 0, NULL, NULL, &o),
                         TG_ERR_IO);
        tu_assert_error(ctx, TG_ERR_IO, strerror(ENOSPC));
        ck_assert(same_bytes(tpath("x.st"), &old));
        ck_assert_int_eq(count_tmp(), 0);
    }
    free(old.p);
    tg_ctx_free(ctx);
    rm_tmpdir();
}
END_TEST

/* ----- targets that are not regular files ---------------------------------------------------- */
static void make_socket(const char *path)
{
    int s = socket(AF_UNIX, SOCK_STREAM, 0);
    ck_assert_int_ge(s, 0);
    struct sockaddr_un a;
    memset(&a, 0, sizeof a);
    a.sun_family = AF_UNIX;
    ck_assert_uint_lt(strlen(path), sizeof a.sun_path);
    strcpy(a.sun_path, path);
    ck_assert_int_eq(bind(s, (struct sockaddr *)&a, sizeof a), 0);
    close(s);
}

/* Before the fix, a FIFO, a socket or (as root) /dev/null at the target was replaced by a
 * regular file through the rename; a directory failed only at the rename. Now each is refused
 * before anything is created: even with the create step set to fail, the refusal is what is
 * reported. No FIFO is ever opened (no reader exists: an open would hang). */
START_TEST(test_refuse_non_regular_targets)
{
    make_tmpdir();
    tg_ctx *ctx = tg_ctx_new();
    tg_tensor *p = tg_param(ctx, TG_F32, TG_DIMS(2), "p");
    ck_assert_ptr_nonnull(p);
    ck_assert_int_eq(mkfifo(tpath("fifo"), 0600), 0);
    ck_assert_int_eq(mkdir(tpath("dir"), 0700), 0);
    make_socket(tpath("sock"));
    ck_assert_int_eq(symlink("fifo", tpath("lfifo")), 0);
    /* a character device of our own (mknod c 1 7), and the system's /dev/null when it is one */
    char full[600];
    const char *dev = tu_full_device(tmpdir, "full", full, sizeof full, false,
                                     "the character-device targets");
    struct stat nb;
    bool null_ok = stat("/dev/null", &nb) == 0 && S_ISCHR(nb.st_mode);
    if (!null_ok)
        fprintf(stderr, "skipped the /dev/null target: it is not a character device here\n");
    ck_assert_int_eq(symlink(dev ? dev : "fifo", tpath("lnull")), 0);
    ck_assert_int_eq(symlink("missing", tpath("dangling")), 0);
    ck_assert_int_eq(symlink("lfifo", tpath("chain")), 0);
    struct {
        const char *path, *msg;
    } cases[] = {
        {tpath("fifo"), "is not a regular file (a FIFO): refusing to replace it"},
        {tpath("dir"), "is not a regular file (a directory): refusing to replace it"},
        {tpath("sock"), "is not a regular file (a socket): refusing to replace it"},
        {null_ok ? "/dev/null" : NULL,
         "is not a regular file (a character device): refusing to replace it"},
        {dev, "is not a regular file (a character device): refusing to replace it"},
        {tpath("lfifo"), "is a symbolic link to a FIFO, not to a regular file: refusing"},
        {tpath("chain"), "is a symbolic link to a FIFO, not to a regular file: refusing"},
        {tpath("lnull"), dev ? "is a symbolic link to a character device, not to a regular file"
                             : "is a symbolic link to a FIFO, not to a regular file: refusing"},
        {tpath("dangling"), "is a symbolic link to a file that does not exist: refusing"},
    };
    double d[2] = {1, 2};
    tg_io_item it = {"x", TG_F64, 1, (const int64_t[]){2}, d};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        struct stat before, after;
        if (!cases[i].path)
            continue; /* skipped above, with a message */
        ck_assert_int_eq(lstat(cases[i].path, &before), 0);
        for (int w = 0; w < 3; w++) {
            tg_write_opts o = {.fail_step = TG_WRITE_STEP_CREATE};
            tg_ctx_clear_error(ctx);
            size_t cb = tg_ctx_bytes(ctx);
            tg_status st = w == 0   ? tg_safetensors_write_items(ctx, cases[i].path, 1, &it, 0,
                                                                 NULL, NULL, &o)
                           : w == 1 ? tg_npy_write_item(ctx, cases[i].path, &it, &o)
                                    : tg_checkpoint_save(ctx, cases[i].path, NULL, 0, NULL, NULL,
                                                         &o);
            const char *fn = w == 0   ? "tg_safetensors_write_items"
                             : w == 1 ? "tg_npy_write_item"
                                      : "tg_checkpoint_save";
            char want[700];
            snprintf(want, sizeof want, "%s: '%s' %s", fn, cases[i].path, cases[i].msg);
            ck_assert_int_eq(st, TG_ERR_IO);
            ck_assert_msg(strncmp(tg_ctx_message(ctx), want, strlen(want)) == 0,
                          "got '%s', want '%s...'", tg_ctx_message(ctx), want);
            ck_assert_uint_eq(tg_ctx_bytes(ctx), cb);
            ck_assert_int_eq(lstat(cases[i].path, &after), 0);
            ck_assert(after.st_ino == before.st_ino && after.st_mode == before.st_mode &&
                      after.st_rdev == before.st_rdev);
        }
        /* and without injection: the same refusal (never tried on /dev nodes: as root a
         * regression would replace them; the injected create above cannot) */
        if (strncmp(cases[i].path, "/dev/", 5) == 0 || strstr(cases[i].path, "null"))
            continue;
        tg_ctx_clear_error(ctx);
        ck_assert_int_eq(tg_npy_write_item(ctx, cases[i].path, &it, NULL), TG_ERR_IO);
        tu_assert_error(ctx, TG_ERR_IO, cases[i].msg);
    }
    ck_assert_int_eq(count_tmp(), 0);
    ck_assert_int_eq(count_tmp_in(tpath("dir")), 0);
    ck_assert_int_eq(count_tmp_in("/dev"), 0);
    ck_assert(!exists(tpath("missing")));
    /* a path ending in '/' names a directory */
    tg_ctx_clear_error(ctx);
    ck_assert_int_eq(tg_npy_write_item(ctx, tpath("new/"), &it, NULL), TG_ERR_IO);
    ck_assert_int_eq(count_tmp(), 0);
    tg_ctx_free(ctx);
    rm_tmpdir();
}
END_TEST

/* A link to a regular file is written through: the file it names is replaced atomically in its
 * own directory (mode kept), the link stays a link. */
START_TEST(test_symlink_write_through)
{
    make_tmpdir();
    tg_ctx *ctx = tg_ctx_new();
    ck_assert_int_eq(mkdir(tpath("runs"), 0700), 0);
    double d[2] = {1, 2};
    tg_io_item it = {"x", TG_F64, 1, (const int64_t[]){2}, d};
    ck_assert_int_eq(tg_npy_write_item(ctx, tpath("runs/r1.npy"), &it, NULL), TG_OK);
    ck_assert_int_eq(chmod(tpath("runs/r1.npy"), 0640), 0);
    ck_assert_int_eq(symlink("runs/r1.npy", tpath("latest.npy")), 0);
    ck_assert_int_eq(symlink("latest.npy", tpath("chain.npy")), 0);
    for (int round = 0; round < 2; round++) {
        d[0] = 10 + round;
        const char *via = tpath(round == 0 ? "latest.npy" : "chain.npy");
        ck_assert_int_eq(tg_npy_write_item(ctx, via, &it, NULL), TG_OK);
        struct stat ls;
        ck_assert_int_eq(lstat(tpath("latest.npy"), &ls), 0);
        ck_assert(S_ISLNK(ls.st_mode));
        char buf[64] = {0};
        ck_assert_int_gt(readlink(tpath("latest.npy"), buf, sizeof buf - 1), 0);
        ck_assert_str_eq(buf, "runs/r1.npy");
        ck_assert_int_eq(stat(tpath("runs/r1.npy"), &ls), 0);
        ck_assert_int_eq(ls.st_mode & 0777, 0640);
        tg_tensor *r = tg_npy_read(ctx, tpath("runs/r1.npy"), TG_F64, NULL);
        ck_assert_ptr_nonnull(r);
        ck_assert_double_eq(tg_get(r, 0), 10 + round);
        ck_assert_int_eq(count_tmp(), 0);
        ck_assert_int_eq(count_tmp_in(tpath("runs")), 0);
    }
    tg_ctx_free(ctx);
    rm_tmpdir();
}
END_TEST

/* New files get 0666 minus the umask, as fopen() gives (the writer used to force 0644). */
START_TEST(test_new_file_mode_umask)
{
    make_tmpdir();
    tg_ctx *ctx = tg_ctx_new();
    double d[1] = {1};
    tg_io_item it = {"x", TG_F64, 0, NULL, d};
    const mode_t masks[3] = {077, 022, 002};
    for (int named = 0; named < 2; named++) {
        for (int i = 0; i < 3; i++) {
            char name[32];
            snprintf(name, sizeof name, "m%d%d.npy", named, i);
            mode_t old = umask(masks[i]);
            tg_write_opts o = {.no_tmpfile = named};
            ck_assert_int_eq(tg_npy_write_item(ctx, tpath(name), &it, &o), TG_OK);
            umask(old);
            struct stat st;
            ck_assert_int_eq(stat(tpath(name), &st), 0);
            ck_assert_int_eq(st.st_mode & 0777, 0666 & ~masks[i]);
        }
    }
    tg_ctx_free(ctx);
    rm_tmpdir();
}
END_TEST

/* ----- stale temporaries --------------------------------------------------------------------- */
static void touch(const char *path)
{
    write_file(path, "junk", 4);
}

/* A save removes nothing it did not create: files named like temporaries of its target (a
 * killed save's, a live writer's, the user's "ck.ckpt.tmp.backup"), directories, links and
 * FIFOs all stay, and the save leaves no temporary of its own. */
START_TEST(test_save_removes_nothing_else)
{
    make_tmpdir();
    tg_ctx *ctx = tg_ctx_new();
    double d[2] = {1, 2};
    tg_io_item it = {"x", TG_F64, 1, (const int64_t[]){2}, d};
    const char *kept[] = {"ck.ckpt.tmp.AAAAAA",     "ck.ckpt.tmp.z09Zaq",  "ck.ckpt.tmp.backup",
                          "ck.ckpt.tmp.CCCCC",      "ck.ckpt.tmp.CCCCCCC", "ck.ckpt.tmp.DD-DDD",
                          "other.ckpt.tmp.EEEEEE",  "ck.ckpt.tmp",         "xck.ckpt.tmp.HHHHHH",
                          "ck.ckpt.tmp.XXXXXX.bak", "ck.ckpt.tmp.BBBBBB"};
    const size_t n_kept = sizeof kept / sizeof kept[0];
    for (size_t i = 0; i < n_kept; i++)
        touch(tpath(kept[i]));
    ck_assert_int_eq(mkdir(tpath("ck.ckpt.tmp.FFFFFF"), 0700), 0);            /* a directory */
    touch(tpath("victim"));
    ck_assert_int_eq(symlink("victim", tpath("ck.ckpt.tmp.GGGGGG")), 0);      /* a link */
    ck_assert_int_eq(mkfifo(tpath("ck.ckpt.tmp.IIIIII"), 0600), 0);           /* a FIFO */
    int live = open(tpath("ck.ckpt.tmp.BBBBBB"), O_RDONLY); /* a writer holding its lock */
    ck_assert_int_ge(live, 0);
    ck_assert_int_eq(flock(live, LOCK_EX | LOCK_NB), 0);
    int before = count_tmp();
    for (int named = 0; named < 2; named++) {
        tg_write_opts o = {.no_tmpfile = named};
        ck_assert_int_eq(tg_safetensors_write_items(ctx, tpath("ck.ckpt"), 1, &it, 0, NULL, NULL,
                                                    &o),
                         TG_OK);
        ck_assert_int_eq(tg_npy_write_item(ctx, tpath("other.ckpt"), &it, &o), TG_OK);
        close(live); /* once the writer is gone too */
        live = -1;
        for (size_t i = 0; i < n_kept; i++)
            ck_assert_msg(exists(tpath(kept[i])), "%s removed", kept[i]);
        ck_assert(exists(tpath("ck.ckpt.tmp.FFFFFF")));
        ck_assert(exists(tpath("ck.ckpt.tmp.GGGGGG")) && exists(tpath("victim")));
        ck_assert(exists(tpath("ck.ckpt.tmp.IIIIII")));
        ck_assert_int_eq(count_tmp(), before);
    }
    tg_ctx_free(ctx);
    rm_tmpdir();
}
END_TEST

/* A process saving in a loop, killed at random moments: the file is always a complete old or
 * new one, a kill leaves at most one temporary, and no later save removes it (it is not that
 * save's). Both temporary kinds (with the named one, most kills leave litter). */
static void save_forever(const char *path, bool named, int id, int ready_fd)
{
    tg_ctx *ctx = tg_ctx_new();
    int64_t n = 1 << 17;
    double *v = calloc((size_t)n, sizeof *v);
    tg_io_item it = {"x", TG_F64, 1, &n, v};
    char val[16];
    const char *k = "id";
    for (int64_t i = 0;; i++) {
        v[0] = (double)i;
        snprintf(val, sizeof val, "%d", id);
        const char *vv = val;
        tg_write_opts o = {.no_tmpfile = named};
        if (tg_safetensors_write_items(ctx, path, 1, &it, 1, &k, &vv, &o) != TG_OK)
            _exit(3);
        if (i == 0) { /* saving is under way: the parent's random delay starts now (under
                         valgrind, start-up alone outlasts any fixed delay) */
            char one = 1;
            if (write(ready_fd, &one, 1) != 1)
                _exit(4);
            close(ready_fd);
        }
    }
}

START_TEST(test_sigkill_during_saves)
{
    make_tmpdir();
    char path[512];
    snprintf(path, sizeof path, "%s", tpath("k.st"));
    int kills = tu_under_valgrind() ? 6 : 30;
    srand(7);
    for (int named = 0; named < 2; named++) {
        int littered = 0, base = count_tmp(); /* the first round's litter stays */
        for (int i = 0; i < kills; i++) {
            int ready[2];
            ck_assert_int_eq(pipe(ready), 0);
            pid_t pid = fork();
            ck_assert_int_ge(pid, 0);
            if (pid == 0) {
                close(ready[0]);
                save_forever(path, named, i, ready[1]);
            }
            close(ready[1]);
            char one;
            ck_assert_msg(read(ready[0], &one, 1) == 1, "the saver failed before its first save");
            close(ready[0]);
            struct timespec ts = {0, (long)(1 + rand() % 40) * 1000000L};
            nanosleep(&ts, NULL);
            kill(pid, SIGKILL);
            int wst = tu_wait_killed(pid);
            ck_assert_msg(WIFSIGNALED(wst), "the saver exited on its own (status %d)", wst);
            int left = count_tmp() - base - littered;
            ck_assert_int_le(left, 1);
            ck_assert_int_ge(left, 0);
            littered += left;
            if (exists(path)) {
                tg_ctx *c = tg_ctx_new();
                tg_safetensors *st = tg_safetensors_read(c, path);
                ck_assert_msg(st != NULL, "after kill %d: %s", i, tg_ctx_message(c));
                tg_ctx_free(c);
            }
        }
        /* the next save (here, in this process) adds none and removes none */
        tg_ctx *ctx = tg_ctx_new();
        double d[1] = {1};
        tg_io_item it = {"x", TG_F64, 0, NULL, d};
        ck_assert_int_eq(tg_safetensors_write_items(ctx, path, 1, &it, 0, NULL, NULL, NULL),
                         TG_OK);
        ck_assert_int_eq(count_tmp(), base + littered);
        tg_ctx_free(ctx);
        if (named)
            ck_assert_msg(littered > 0, "no kill hit a named temporary: the test is not testing");
        (void)littered;
    }
    rm_tmpdir();
}
END_TEST

/* Two processes saving the same path at once: each one's cleaner never removes the other's
 * live temporary (every save succeeds), and the file is always complete. */
START_TEST(test_concurrent_saves)
{
    make_tmpdir();
    char path[512];
    snprintf(path, sizeof path, "%s", tpath("c.st"));
    int rounds = tu_under_valgrind() ? 5 : 40;
    for (int named = 0; named < 2; named++) {
        pid_t pids[2];
        for (int w = 0; w < 2; w++) {
            pids[w] = fork();
            ck_assert_int_ge(pids[w], 0);
            if (pids[w] == 0) {
                tg_ctx *ctx = tg_ctx_new();
                int64_t n = 1 << 14;
                double *v = calloc((size_t)n, sizeof *v);
                tg_io_item it = {"x", TG_F64, 1, &n, v};
                int bad = 0;
                for (int r = 0; r < rounds; r++) {
                    v[0] = r;
                    tg_write_opts o = {.no_tmpfile = named, .no_fsync = true};
                    bad += tg_safetensors_write_items(ctx, path, 1, &it, 0, NULL, NULL, &o) !=
                           TG_OK;
                }
                _exit(bad ? 1 : 0);
            }
        }
        for (int w = 0; w < 2; w++) {
            int wst;
            ck_assert_int_eq(waitpid(pids[w], &wst, 0), pids[w]);
            ck_assert_msg(WIFEXITED(wst) && WEXITSTATUS(wst) == 0, "a concurrent save failed");
        }
        ck_assert_int_eq(count_tmp(), 0);
        tg_ctx *c = tg_ctx_new();
        ck_assert_ptr_nonnull(tg_safetensors_read(c, path));
        tg_ctx_free(c);
    }
    rm_tmpdir();
}
END_TEST

/* ----- checkpoint restore: metadata ---------------------------------------------------------- */
/* Rewrite checkpoint src into dst with metadata key set to value (NULL: removed). */
static void rewrite_meta(const tg_safetensors *src, const char *dst, const char *key,
                         const char *value)
{
    tg_ctx *c = tg_ctx_new();
    int64_t n = tg_safetensors_count(src), nm = tg_safetensors_meta_count(src);
    tg_io_item *items = calloc((size_t)n, sizeof *items);
    const char **ks = calloc((size_t)nm + 1, sizeof *ks), **vs = calloc((size_t)nm + 1, sizeof *vs);
    for (int64_t i = 0; i < n; i++)
        items[i] = tg_io_item_data(tg_safetensors_tensor(src, i), tg_safetensors_name(src, i));
    int64_t m = 0;
    for (int64_t i = 0; i < nm; i++) {
        ks[m] = tg_safetensors_meta_key(src, i);
        vs[m] = tg_safetensors_meta_value(src, i);
        if (strcmp(ks[m], key) == 0) {
            if (!value)
                continue;
            vs[m] = value;
        }
        m++;
    }
    ck_assert_int_eq(tg_safetensors_write_items(c, dst, n, items, m, ks, vs, NULL), TG_OK);
    free(items);
    free(ks);
    free(vs);
    tg_ctx_free(c);
}

/* Before: strtoll/strtoull accepted "", " 5", "+5", overflow (as LLONG_MAX), "-0001..." and
 * "0x..." words in the rng, and the all-zero rng state. */
START_TEST(test_checkpoint_restore_metadata)
{
    make_tmpdir();
    model a;
    model_init(&a, 8);
    tg_optim_set_steps(a.opt, 7);
    ck_assert_int_eq(tg_checkpoint_save(a.ctx, tpath("good.ckpt"), a.opt, 0, NULL, NULL, NULL),
                     TG_OK);
    tg_safetensors *good = tg_safetensors_read(a.ctx, tpath("good.ckpt"));
    ck_assert_ptr_nonnull(good);
    const char *rng_ok = tg_safetensors_meta_get(good, "rng");
    ck_assert_ptr_nonnull(rng_ok);
    ck_assert_uint_eq(strlen(rng_ok), 64);

    char long_step[64], hex63[70], hex65[70], sp[70], plus[70], minus[70], ox[70], g[70];
    snprintf(long_step, sizeof long_step, "%s", "123456789012345678901234567890");
    snprintf(hex63, sizeof hex63, "%.63s", rng_ok);
    snprintf(hex65, sizeof hex65, "%s0", rng_ok);
    snprintf(sp, sizeof sp, " %.63s", rng_ok);
    snprintf(plus, sizeof plus, "+%.63s", rng_ok);
    snprintf(minus, sizeof minus, "-000000000000001%.48s", rng_ok + 16);
    snprintf(ox, sizeof ox, "0x%.62s", rng_ok);
    snprintf(g, sizeof g, "%.40sg%.23s", rng_ok, rng_ok + 41);
    struct {
        const char *key, *value, *msg;
    } cases[] = {
        {"optim.step", NULL, "not a checkpoint: metadata 'optim.step' is missing"},
        {"rng", NULL, "not a checkpoint: metadata 'rng' is missing"},
        {"optim.step", "", "metadata 'optim.step' is '' (expected a step count"},
        {"optim.step", "-1", "'optim.step' is '-1' (expected"},
        {"optim.step", "-0", "'optim.step' is '-0' (expected"},
        {"optim.step", "+5", "'optim.step' is '+5'"},
        {"optim.step", " 5", "'optim.step' is ' 5'"},
        {"optim.step", "5 ", "'optim.step' is '5 '"},
        {"optim.step", "05", "'optim.step' is '05'"},
        {"optim.step", "5x", "'optim.step' is '5x'"},
        {"optim.step", "1e3", "'optim.step' is '1e3'"},
        {"optim.step", "0x10", "'optim.step' is '0x10'"},
        {"optim.step", "abc", "'optim.step' is 'abc'"},
        {"optim.step", "2.5", "'optim.step' is '2.5'"},
        {"optim.step", "5\n", "'optim.step' is '5?'"},
        {"optim.step", "9007199254740993", "'optim.step' is '9007199254740993' (expected a step "
                                           "count: decimal digits, 0 to 9007199254740992)"},
        {"optim.step", "9223372036854775807", "'optim.step' is '9223372036854775807'"},
        {"optim.step", "9223372036854775808", "'optim.step' is '9223372036854775808'"},
        {"optim.step", "18446744073709551617", "'optim.step' is '18446744073709551617'"},
        {"optim.step", long_step, "'optim.step' is '123456789012345678901234567890'"},
        {"rng", "", "metadata 'rng' is '' (expected the RNG state: 64 hex digits, not all zero)"},
        {"rng", "0", "'rng' is '0'"},
        {"rng", hex63, "metadata 'rng' is '"},
        {"rng", hex65, "...' (expected the RNG state"},
        {"rng", sp, "metadata 'rng' is ' "},
        {"rng", plus, "metadata 'rng' is '+"},
        {"rng", minus, "metadata 'rng' is '-"},
        {"rng", ox, "metadata 'rng' is '0x"},
        {"rng", g, "metadata 'rng' is '"},
        {"rng", "0000000000000000000000000000000000000000000000000000000000000000",
         "'rng' is '0000000000000000000000000000000000000000...' (expected the RNG state: 64 "
         "hex digits, not all zero)"},
    };
    model b;
    model_init(&b, 8);
    tg_fill(b.m.tok_emb, 0.25);
    tg_optim_set_steps(b.opt, 3);
    uint64_t rng0[4], rng1[4];
    tg_rng_get_state(b.ctx, rng0);
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        rewrite_meta(good, tpath("bad.ckpt"), cases[i].key, cases[i].value);
        tg_ctx_clear_error(b.ctx);
        tg_safetensors *bad = tg_safetensors_read(b.ctx, tpath("bad.ckpt"));
        ck_assert_msg(bad != NULL, "%s", tg_ctx_message(b.ctx));
        size_t cb = tg_ctx_bytes(b.ctx);
        ck_assert_int_eq(tg_checkpoint_restore(b.ctx, bad, b.opt), TG_ERR_FORMAT);
        const char *m = tg_ctx_message(b.ctx);
        ck_assert_msg(strncmp(m, "tg_checkpoint_restore: ", 23) == 0 && strstr(m, cases[i].msg) &&
                          !strchr(m, '\n'),
                      "case %zu: '%s' lacks '%s'", i, m, cases[i].msg);
        ck_assert_int_eq(tg_ctx_status(b.ctx), TG_ERR_FORMAT);
        ck_assert_uint_eq(tg_ctx_bytes(b.ctx), cb);
        /* nothing changed */
        ck_assert_double_eq(tg_get(b.m.tok_emb, 0), 0.25);
        ck_assert_int_eq(tg_optim_steps(b.opt), 3);
        tg_rng_get_state(b.ctx, rng1);
        ck_assert(memcmp(rng0, rng1, sizeof rng0) == 0);
    }
    /* the edges that are valid: step 0 and 2^53, upper-case hex */
    const char *okv[][2] = {{"optim.step", "0"}, {"optim.step", "9007199254740992"}};
    for (int i = 0; i < 2; i++) {
        rewrite_meta(good, tpath("ok.ckpt"), okv[i][0], okv[i][1]);
        tg_ctx_clear_error(b.ctx);
        tg_safetensors *st = tg_safetensors_read(b.ctx, tpath("ok.ckpt"));
        ck_assert_int_eq(tg_checkpoint_restore(b.ctx, st, b.opt), TG_OK);
        ck_assert_int_eq(tg_optim_steps(b.opt), i == 0 ? 0 : (int64_t)1 << 53);
    }
    char upper[65];
    for (int i = 0; i < 64; i++)
        upper[i] = (char)(rng_ok[i] >= 'a' && rng_ok[i] <= 'f' ? rng_ok[i] - 32 : rng_ok[i]);
    upper[64] = '\0';
    rewrite_meta(good, tpath("ok.ckpt"), "rng", upper);
    tg_safetensors *st = tg_safetensors_read(b.ctx, tpath("ok.ckpt"));
    ck_assert_int_eq(tg_checkpoint_restore(b.ctx, st, b.opt), TG_OK);
    ck_assert_int_eq(tg_optim_steps(b.opt), 7);
    uint64_t ra[4];
    tg_rng_get_state(a.ctx, ra);
    tg_rng_get_state(b.ctx, rng1);
    ck_assert(memcmp(ra, rng1, sizeof ra) == 0);
    ck_assert_double_eq(tg_get(b.m.tok_emb, 0), tg_get(a.m.tok_emb, 0));
    /* NULL arguments */
    tg_ctx_clear_error(b.ctx);
    ck_assert_int_eq(tg_checkpoint_restore(b.ctx, NULL, b.opt), TG_ERR_ARG);
    tu_assert_error(b.ctx, TG_ERR_ARG, "tg_checkpoint_restore: the checkpoint is NULL");
    tg_ctx_clear_error(b.ctx);
    ck_assert_int_eq(tg_checkpoint_save(b.ctx, NULL, b.opt, 0, NULL, NULL, NULL), TG_ERR_ARG);
    tu_assert_error(b.ctx, TG_ERR_ARG, "tg_checkpoint_save: path is NULL");
    tg_ctx_clear_error(b.ctx);
    ck_assert_int_eq(tg_checkpoint_save(b.ctx, tpath("x"), b.opt, INT64_MAX / 4,
                                        (const char *[]){"a"}, (const char *[]){"b"}, NULL),
                     TG_ERR_ARG);
    tu_assert_error(b.ctx, TG_ERR_ARG, "n_meta is too large");
    tg_ctx_free(a.ctx);
    tg_ctx_free(b.ctx);
    rm_tmpdir();
}
END_TEST

/* The first optimizer state tensor whose name starts with prefix. */
static tg_tensor *state_named(const tg_optim *o, const char *prefix)
{
    for (int64_t i = 0; i < tg_optim_n_state(o); i++)
        if (strncmp(tg_tensor_name(tg_optim_state(o, i)), prefix, strlen(prefix)) == 0)
            return tg_optim_state(o, i);
    ck_abort_msg("no state named %s...", prefix);
    return NULL;
}

/* Optimizer state from a checkpoint must be finite, and Adam's v >= 0: a NaN, an infinity or a
 * negative second moment is refused naming the tensor, the element and the value, and nothing
 * (parameters, state, step, RNG) changes. Negative first moments and -0 second moments are
 * fine. */
START_TEST(test_checkpoint_restore_state_values)
{
    make_tmpdir();
    struct {
        const char *prefix;
        int64_t k;
        double v;
        const char *msg; /* NULL: accepted */
    } cases[] = {
        {"adam.m.", 3, NAN, "element 3 is nan (expected a finite value)"},
        {"adam.m.", 2, -INFINITY, "element 2 is -inf (expected a finite value)"},
        {"adam.v.", 0, NAN, "element 0 is nan (expected a finite value >= 0"},
        {"adam.v.", 1, INFINITY, "element 1 is inf (expected a finite value >= 0"},
        {"adam.v.", 5, -1e-30, "element 5 is -1e-30 (expected a finite value >= 0"},
        {"adam.m.", 4, -2.5, NULL},
        {"adam.v.", 4, -0.0, NULL},
    };
    model b;
    model_init(&b, 8);
    tg_fill(b.m.tok_emb, 0.25);
    tg_optim_set_steps(b.opt, 3);
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        model a;
        model_init(&a, 8);
        tg_optim_set_steps(a.opt, 7);
        tg_tensor *st = state_named(a.opt, cases[i].prefix);
        tg_set(st, cases[i].k, cases[i].v);
        ck_assert_int_eq(tg_checkpoint_save(a.ctx, tpath("s.ckpt"), a.opt, 0, NULL, NULL, NULL),
                         TG_OK);
        tg_safetensors *f = tg_safetensors_read(b.ctx, tpath("s.ckpt"));
        ck_assert_ptr_nonnull(f);
        uint64_t rng0[4], rng1[4];
        tg_rng_get_state(b.ctx, rng0);
        tg_status s = tg_checkpoint_restore(b.ctx, f, b.opt);
        if (!cases[i].msg) {
            ck_assert_msg(s == TG_OK, "case %zu: %s", i, tg_ctx_message(b.ctx));
            ck_assert_double_eq(tg_get(state_named(b.opt, cases[i].prefix), cases[i].k),
                                cases[i].v);
            tg_fill(b.m.tok_emb, 0.25);
            tg_optim_set_steps(b.opt, 3);
        } else {
            ck_assert_int_eq(s, TG_ERR_FORMAT);
            char want[256];
            snprintf(want, sizeof want, "tg_checkpoint_restore: optimizer state '%s' %s",
                     tg_tensor_name(st), cases[i].msg);
            tu_assert_error(b.ctx, TG_ERR_FORMAT, want);
            tu_assert_error(b.ctx, TG_ERR_FORMAT, "nothing was restored");
            ck_assert_double_eq(tg_get(b.m.tok_emb, 0), 0.25);
            ck_assert_int_eq(tg_optim_steps(b.opt), 3);
            tg_rng_get_state(b.ctx, rng1);
            ck_assert(memcmp(rng0, rng1, sizeof rng0) == 0);
            for (int64_t j = 0; j < tg_optim_n_state(b.opt); j++)
                ck_assert(isfinite(tg_get(tg_optim_state(b.opt, j), cases[i].k)));
            /* a run-time error: building goes on */
            ck_assert_ptr_nonnull(tg_sum_all(b.ctx, b.m.tok_emb));
        }
        tg_ctx_free(a.ctx);
    }
    /* SGD momentum: finite only */
    tg_ctx *ctx = tg_ctx_new();
    tg_tensor *w = tg_param(ctx, TG_F64, TG_DIMS(3), "w");
    tg_optim_config oc = tg_optim_defaults(TG_OPTIM_SGD);
    oc.momentum = 0.9;
    tg_optim *o = tg_optim_new(ctx, &oc, 0, NULL);
    tg_tensor *mom = state_named(o, "sgd.momentum.");
    tg_set(mom, 1, -3);
    ck_assert_int_eq(tg_checkpoint_save(ctx, tpath("sgd.ckpt"), o, 0, NULL, NULL, NULL), TG_OK);
    tg_safetensors *f = tg_safetensors_read(ctx, tpath("sgd.ckpt"));
    ck_assert_int_eq(tg_checkpoint_restore(ctx, f, o), TG_OK);
    tg_set(mom, 1, INFINITY);
    ck_assert_int_eq(tg_checkpoint_save(ctx, tpath("sgd.ckpt"), o, 0, NULL, NULL, NULL), TG_OK);
    f = tg_safetensors_read(ctx, tpath("sgd.ckpt"));
    tg_set(mom, 1, 5);
    ck_assert_int_eq(tg_checkpoint_restore(ctx, f, o), TG_ERR_FORMAT);
    tu_assert_error(ctx, TG_ERR_FORMAT, "optimizer state 'sgd.momentum.w' element 1 is inf");
    ck_assert_double_eq(tg_get(mom, 1), 5);
    (void)w;
    tg_ctx_free(ctx);
    tg_ctx_free(b.ctx);
    rm_tmpdir();
}
END_TEST

/* Checkpoints take the optimizer of their own context: another context's is refused (it would
 * write one model's parameters with another's optimizer state). */
START_TEST(test_checkpoint_other_context)
{
    make_tmpdir();
    model a, b;
    model_init(&a, 8);
    model_init(&b, 8);
    ck_assert_int_eq(tg_checkpoint_save(b.ctx, tpath("x.ckpt"), a.opt, 0, NULL, NULL, NULL),
                     TG_ERR_ARG);
    tu_assert_error(b.ctx, TG_ERR_ARG,
                    "tg_checkpoint_save: the optimizer belongs to another context");
    ck_assert(!exists(tpath("x.ckpt")));
    ck_assert_int_eq(tg_checkpoint_save(b.ctx, tpath("b.ckpt"), b.opt, 0, NULL, NULL, NULL),
                     TG_OK);
    tg_safetensors *f = tg_safetensors_read(b.ctx, tpath("b.ckpt"));
    ck_assert_ptr_nonnull(f);
    tg_optim_set_steps(a.opt, 5);
    ck_assert_int_eq(tg_checkpoint_restore(b.ctx, f, a.opt), TG_ERR_ARG);
    tu_assert_error(b.ctx, TG_ERR_ARG,
                    "tg_checkpoint_restore: the optimizer belongs to another context");
    ck_assert_int_eq(tg_optim_steps(a.opt), 5);
    /* a file read in another context is only data: restoring it is fine */
    ck_assert_int_eq(tg_checkpoint_restore(a.ctx, f, a.opt), TG_OK);
    ck_assert_int_eq(tg_optim_steps(a.opt), 0);
    tg_ctx_free(a.ctx);
    tg_ctx_free(b.ctx);
    rm_tmpdir();
}
END_TEST

static Suite *io_save_suite(void)
{
    Suite *s = suite_create("io_save");
    TCase *tc = tcase_create("faults");
    tcase_set_timeout(tc, 240);
    tcase_add_test(tc, test_fault_injection);
    tcase_add_test(tc, test_fail_after_bytes_named);
    suite_add_tcase(s, tc);
    tc = tcase_create("targets");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_refuse_non_regular_targets);
    tcase_add_test(tc, test_symlink_write_through);
    tcase_add_test(tc, test_new_file_mode_umask);
    suite_add_tcase(s, tc);
    tc = tcase_create("litter");
    tcase_set_timeout(tc, 240);
    tcase_add_test(tc, test_save_removes_nothing_else);
    tcase_add_test(tc, test_sigkill_during_saves);
    tcase_add_test(tc, test_concurrent_saves);
    suite_add_tcase(s, tc);
    tc = tcase_create("checkpoint");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_checkpoint_restore_metadata);
    tcase_add_test(tc, test_checkpoint_restore_state_values);
    tcase_add_test(tc, test_checkpoint_other_context);
    suite_add_tcase(s, tc);
    return s;
}

int main(void) { return tu_run(io_save_suite()); }
