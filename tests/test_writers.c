/*
 * test_writers.c - every file writer of the library and of the command line follows one rule
 * (tg_file_write, tgrad_io.h; tools/cli/outpath.h): only a regular file is replaced, through a
 * temporary file renamed into place, and nothing the call did not create is ever removed or
 * truncated. A row per writer, each run against
 *   (a) a character device (a private `mknod NAME c 1 7` node, never the system's /dev/full):
 *       refused with a clear message, the node still there;
 *   (b) a full disk (a private 64 KiB tmpfs, filled up): an existing file keeps its bytes, no
 *       temporary is left behind, and a new file is not created at all;
 *   (c) an existing file: replaced only where the API / --force says so, and then atomically
 *       (a hard link to the old file still holds the old bytes: nothing was truncated in place).
 * Then an output that names one of the command's inputs is refused (exit 2, with --force too),
 * whatever the name: the same string, a symbolic link, a hard link.
 */
#define _GNU_SOURCE /* unshare, CLONE_NEWNS */
#include "testutil.h"

#include "tgrad_io.h"
#include "tgrad_train.h"
#ifdef TG_HAVE_SPM
#include "tgrad_spm.h"
#endif

#include <check.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/wait.h>
#include <unistd.h>

static char dir[512];

static void setup(void) { tu_mkdtemp(dir, sizeof dir, "writers"); }
static void teardown(void) { tu_rm_tree(dir); }

static const char *tpath(char *p, size_t n, const char *name) { return tu_path(p, n, dir, name); }

/* The names in directory @p d, sorted, joined by ' ' into buf ("" when empty). */
static const char *listing(const char *d, char *buf, size_t n)
{
    struct dirent **ents = NULL;
    int k = scandir(d, &ents, NULL, alphasort);
    buf[0] = 0;
    for (int i = 0; i < k; i++) {
        const char *nm = ents[i]->d_name;
        if (strcmp(nm, ".") && strcmp(nm, "..")) {
            size_t l = strlen(buf);
            snprintf(buf + l, n - l, "%s%s", l ? " " : "", nm);
        }
        free(ents[i]);
    }
    free(ents);
    return buf;
}

/* A private character device node (c 1 7, what /dev/full is) at @p path; false (say why)
 * when this process may not make one (no CAP_MKNOD, a user namespace). */
static bool make_chardev(const char *path)
{
    if (mknod(path, S_IFCHR | 0666, makedev(1, 7)) == 0)
        return true;
    fprintf(stderr, "test_writers: skipped the character-device case: mknod '%s': %s\n", path,
            strerror(errno));
    return false;
}

static void assert_still_chardev(const char *path, const char *who)
{
    struct stat sb;
    ck_assert_msg(lstat(path, &sb) == 0, "%s removed the device node '%s'", who, path);
    ck_assert_msg(S_ISCHR(sb.st_mode) && sb.st_rdev == makedev(1, 7),
                  "%s replaced the device node '%s'", who, path);
}

/* ---- the library's writers ------------------------------------------------------------------ */

/* What the library rows write: a parameter (16 KiB), a graph, a tokenizer. */
typedef struct {
    tg_ctx *ctx;
    tg_tensor *w;
    tg_graph *g;
    tg_optim *opt;
    void *tok; /* tg_tokenizer (SentencePiece), or NULL without the feature */
} lib_objs;

static lib_objs objs_new(void)
{
    lib_objs o = {0};
    o.ctx = tg_ctx_new();
    ck_assert_ptr_nonnull(o.ctx);
    o.w = tg_param(o.ctx, TG_F32, 2, (const int64_t[]){64, 64}, "w");
    ck_assert_ptr_nonnull(o.w);
    float *v = tg_tensor_data(o.w);
    for (int i = 0; i < 64 * 64; i++)
        v[i] = (float)i * 0.25f;
    tg_tensor *y = tg_sum(o.ctx, tg_mul(o.ctx, o.w, o.w), -1, false);
    o.g = tg_graph_new(o.ctx, &y, 1);
    ck_assert_ptr_nonnull(o.g);
    tg_optim_config oc = tg_optim_defaults(TG_OPTIM_ADAM);
    o.opt = tg_optim_new(o.ctx, &oc, 0, NULL);
    ck_assert_ptr_nonnull(o.opt);
#ifdef TG_HAVE_SPM
    o.tok = tg_spm_load_file(o.ctx, TG_FIXTURES "/export_pairs_spm.model");
    ck_assert_msg(o.tok != NULL, "%s", tg_ctx_message(o.ctx));
#endif
    return o;
}

static void objs_free(lib_objs *o)
{
#ifdef TG_HAVE_SPM
    tg_tokenizer_free(o->tok);
#endif
    tg_graph_free(o->g);
    tg_ctx_free(o->ctx);
}

static tg_status emit_text(tg_ctx *ctx, const tg_writer *w, void *user)
{
    int e = w->write(w->user, user, strlen(user));
    return e ? tg_ctx_set_error(ctx, TG_ERROR_RUN, TG_ERR_IO, "emit_text", "%s", strerror(e))
             : TG_OK;
}

static tg_status w_file(lib_objs *o, const char *p)
{
    return tg_file_write(o->ctx, p, emit_text, "a line of text\n", NULL);
}
static tg_status w_st(lib_objs *o, const char *p)
{
    return tg_safetensors_write(o->ctx, p, 1, (const tg_tensor *const *)&o->w, NULL, 0, NULL,
                                NULL);
}
static tg_status w_st_items(lib_objs *o, const char *p)
{
    tg_io_item it = tg_io_item_data(o->w, NULL);
    return tg_safetensors_write_items(o->ctx, p, 1, &it, 1, (const char *const[]){"k"},
                                      (const char *const[]){"v"}, NULL);
}
static tg_status w_npy(lib_objs *o, const char *p) { return tg_npy_write(o->ctx, p, o->w); }
static tg_status w_npy_data(lib_objs *o, const char *p)
{
    return tg_npy_write_data(o->ctx, p, TG_F32, 2, (const int64_t[]){64, 64},
                             tg_tensor_data(o->w));
}
static tg_status w_npy_item(lib_objs *o, const char *p)
{
    tg_io_item it = tg_io_item_data(o->w, NULL);
    return tg_npy_write_item(o->ctx, p, &it, NULL);
}
static tg_status w_params(lib_objs *o, const char *p)
{
    return tg_params_save(o->ctx, p, 0, NULL, 0, NULL, NULL);
}
static tg_status w_ckpt(lib_objs *o, const char *p)
{
    return tg_checkpoint_save(o->ctx, p, o->opt, 0, NULL, NULL, NULL);
}
static tg_status w_dot(lib_objs *o, const char *p) { return tg_graph_write_dot(o->g, p, 0); }
static tg_status w_dot_opts(lib_objs *o, const char *p)
{
    return tg_graph_write_dot_opts(o->g, p, TG_DOT_BACKWARD, NULL);
}
#ifdef TG_HAVE_SPM
static tg_status w_spm(lib_objs *o, const char *p) { return tg_spm_save(o->tok, p); }
#endif

typedef struct {
    const char *name;
    tg_status (*save)(lib_objs *o, const char *path);
} lib_row;

static const lib_row lib_rows[] = {
    {"tg_file_write", w_file},
    {"tg_safetensors_write", w_st},
    {"tg_safetensors_write_items", w_st_items},
    {"tg_npy_write", w_npy},
    {"tg_npy_write_data", w_npy_data},
    {"tg_npy_write_item", w_npy_item},
    {"tg_params_save", w_params},
    {"tg_checkpoint_save", w_ckpt},
    {"tg_graph_write_dot", w_dot},
    {"tg_graph_write_dot_opts", w_dot_opts},
#ifdef TG_HAVE_SPM
    {"tg_spm_save", w_spm},
#endif
};
#define N_LIB ((int)(sizeof lib_rows / sizeof lib_rows[0]))

static const char OLD[] = "the old file's bytes, which must survive\n";

/* (a) a character device: refused, named, the node untouched. */
START_TEST(test_lib_chardev)
{
    const lib_row *r = &lib_rows[_i];
    char p[600];
    tpath(p, sizeof p, "dev");
    if (!make_chardev(p))
        return;
    lib_objs o = objs_new();
    tg_status st = r->save(&o, p);
    ck_assert_msg(st == TG_ERR_IO, "%s on a character device: %s", r->name, tg_status_str(st));
    const char *m = tg_ctx_message(o.ctx);
    ck_assert_msg(strstr(m, "not a regular file (a character device)") && strstr(m, p),
                  "%s: unclear message '%s'", r->name, m);
    assert_still_chardev(p, r->name);
    char ls[256];
    ck_assert_str_eq(listing(dir, ls, sizeof ls), "dev");
    objs_free(&o);
}
END_TEST

/* (c) an existing file: replaced (the API says so) by a new inode; a hard link to the old one
 * keeps the old bytes, so nothing was truncated or written in place; no temporary left. */
START_TEST(test_lib_existing)
{
    const lib_row *r = &lib_rows[_i];
    char p[600], q[600], ls[256];
    tpath(p, sizeof p, "out");
    tpath(q, sizeof q, "keep");
    tu_write_file(dir, "out", OLD);
    ck_assert_int_eq(link(p, q), 0);
    lib_objs o = objs_new();
    tg_status st = r->save(&o, p);
    ck_assert_msg(st == TG_OK, "%s: %s", r->name, tg_ctx_message(o.ctx));
    size_t n;
    char *kept = tu_slurp(q, &n), *now = tu_slurp(p, NULL);
    ck_assert_msg(kept && n == strlen(OLD) && !memcmp(kept, OLD, n),
                  "%s wrote into the old file in place", r->name);
    ck_assert_msg(now && strcmp(now, OLD), "%s did not replace the file", r->name);
    ck_assert_str_eq(listing(dir, ls, sizeof ls), "keep out");
    free(kept);
    free(now);
    objs_free(&o);
}
END_TEST

/*
 * Run @p fn in a child process with a private tmpfs of @p size bytes mounted on @p mnt (its own
 * mount namespace, so nothing is seen outside and the mount goes with the child). The child's
 * exit status is returned; -1 when a private tmpfs cannot be had here (not root, no
 * namespaces: the caller skips, saying so).
 */
static int with_small_tmpfs(const char *mnt, const char *size, int (*fn)(const char *, void *),
                            void *user)
{
    pid_t pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        /* (a propagation change ignores source and type: named, not NULL, for valgrind) */
        if (unshare(CLONE_NEWNS) != 0 ||
            mount("none", "/", "none", MS_REC | MS_PRIVATE, NULL) != 0)
            _exit(77);
        char opt[64];
        snprintf(opt, sizeof opt, "size=%s", size);
        if (mount("none", mnt, "tmpfs", 0, opt) != 0)
            _exit(77);
        _exit(fn(mnt, user));
    }
    int st = 0;
    ck_assert_int_eq(waitpid(pid, &st, 0), pid);
    ck_assert_msg(WIFEXITED(st), "the full-disk child died of signal %d",
                  WIFSIGNALED(st) ? WTERMSIG(st) : 0);
    if (WEXITSTATUS(st) == 77) {
        fprintf(stderr, "test_writers: skipped the full-disk case: no private tmpfs here "
                        "(unshare(CLONE_NEWNS) and mount need root)\n");
        return -1;
    }
    return WEXITSTATUS(st);
}

/* Fill the file system of @p d: a file "fill" grown until ENOSPC. */
static void fill_up(const char *d)
{
    char p[1200];
    snprintf(p, sizeof p, "%s/fill", d);
    int fd = open(p, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    static char zero[4096];
    while (fd >= 0 && write(fd, zero, sizeof zero) > 0)
        ;
    while (fd >= 0 && write(fd, zero, 1) > 0) /* the last partial block too */
        ;
    if (fd >= 0)
        close(fd);
}

#define CHILD_FAIL(...)                                                                       \
    do {                                                                                      \
        fprintf(stderr, __VA_ARGS__);                                                         \
        fputc('\n', stderr);                                                                  \
        return 1;                                                                             \
    } while (0)

static int lib_full_child(const char *d, void *user)
{
    const lib_row *r = user;
    char p[1200], q[1200], ls[256];
    snprintf(p, sizeof p, "%s/old", d);
    snprintf(q, sizeof q, "%s/new", d);
    FILE *f = fopen(p, "w");
    if (!f || fputs(OLD, f) < 0 || fclose(f) != 0)
        CHILD_FAIL("%s: cannot set up '%s'", r->name, p);
    fill_up(d);
    lib_objs o = objs_new();
    tg_status st = r->save(&o, p);
    if (st != TG_ERR_IO)
        CHILD_FAIL("%s on a full disk over an existing file: %s (want TG_ERR_IO)", r->name,
                   tg_status_str(st));
    if (!strstr(tg_ctx_message(o.ctx), "No space left on device"))
        CHILD_FAIL("%s: unclear message '%s'", r->name, tg_ctx_message(o.ctx));
    size_t n;
    char *now = tu_slurp(p, &n);
    if (!now || n != strlen(OLD) || memcmp(now, OLD, n))
        CHILD_FAIL("%s on a full disk damaged the existing file", r->name);
    free(now);
    if (strcmp(listing(d, ls, sizeof ls), "fill old"))
        CHILD_FAIL("%s on a full disk left '%s' (want 'fill old')", r->name, ls);
    st = r->save(&o, q);
    if (st != TG_ERR_IO)
        CHILD_FAIL("%s on a full disk (new file): %s (want TG_ERR_IO)", r->name,
                   tg_status_str(st));
    if (strcmp(listing(d, ls, sizeof ls), "fill old"))
        CHILD_FAIL("%s on a full disk created a partial new file: '%s'", r->name, ls);
    objs_free(&o);
    return 0;
}

/* (b) a full disk: the existing file byte-identical, no temporary left, no new file. */
START_TEST(test_lib_full_disk)
{
    char m[600];
    tpath(m, sizeof m, "fs");
    ck_assert_int_eq(mkdir(m, 0700), 0);
    int rc = with_small_tmpfs(m, "64k", lib_full_child, (void *)&lib_rows[_i]);
    ck_assert_msg(rc <= 0, "%s: the full-disk case failed (see above)", lib_rows[_i].name);
}
END_TEST

/* ---- the command line's writers --------------------------------------------------------------- */

#define TEXT_MODEL "--text c.txt --d-model 16 --heads 2 --d-ff 32 --seq-len 8 --batch 4 " \
                   "--layers 1 --threads 1 --steps 2 --quiet"

typedef struct {
    const char *name;   /* the row, as a message names it */
    const char *prog;   /* "tgrad" or "ding-pairs" */
    const char *args;   /* the arguments, OUT where the output's path goes */
    const char *file;   /* the output's file name (ding-pairs: one of the files in OUT) */
    bool out_is_dir;    /* OUT is the directory holding @c file */
    int exists_rc;      /* exit status for an existing file without --force */
} cli_row;

static const cli_row cli_rows[] = {
    {"train --checkpoint", "tgrad", "train " TEXT_MODEL " --checkpoint OUT", "o.ckpt", false, 2},
    {"train --log", "tgrad", "train " TEXT_MODEL " --log OUT", "o.csv", false, 2},
    {"train --plot", "tgrad", "train " TEXT_MODEL " --plot OUT", "o.svg", false, 2},
    {"train --dot", "tgrad", "train " TEXT_MODEL " --dot OUT", "o.dot", false, 2},
    {"run --out", "tgrad", "run sdpa --q x.npy --k x.npy --v x.npy --out OUT", "o.npy", false, 2},
    {"run --attn-out", "tgrad", "run sdpa --q x.npy --k x.npy --v x.npy --attn-out OUT", "o.npy",
     false, 2},
    {"run --dot", "tgrad", "run sdpa --q x.npy --k x.npy --v x.npy --dot OUT", "o.dot", false, 2},
    {"run --grads", "tgrad", "run ffn --weights w.safetensors --x x.npy --grad-out x.npy --grads OUT",
     "o.safetensors", false, 2},
    {"export --out", "tgrad", "export --checkpoint '" TG_FIXTURES "/export_lm.ckpt' --out OUT",
     "o.safetensors", false, 2},
    {"translate --out", "tgrad",
     "translate --checkpoint '" TG_FIXTURES "/export_pairs_bytes.ckpt' --eval '" TG_FIXTURES
     "/export_pairs_valid.tsv' --beam 1 --out OUT", "o.txt", false, 2},
    {"ding-pairs", "ding-pairs", "--source dict.txt --valid 1 --test 1 OUT",
     "train.tsv", true, 1},
};
#define N_CLI ((int)(sizeof cli_rows / sizeof cli_rows[0]))

/* The inputs every row reads, in the scratch directory. */
static void cli_inputs(void)
{
    tu_write_corpus(dir, "c.txt", 2000);
    char p[600];
    double x[8] = {0.5, -1, 2, 0.25, 1, 0, -0.5, 3};
    tg_ctx *c = tg_ctx_new();
    ck_assert_int_eq(tg_npy_write_data(c, tpath(p, sizeof p, "x.npy"), TG_F64, 2,
                                       (const int64_t[]){2, 4}, x), TG_OK);
    /* an FFN's weights (D 4, F 8) for run --grads */
    static double w1[32], b1[8], w2[32], b2[4];
    for (int i = 0; i < 32; i++)
        w1[i] = w2[i] = 0.01 * i;
    const tg_io_item items[4] = {
        {"linear1.weight", TG_F64, 2, (const int64_t[]){8, 4}, w1},
        {"linear1.bias", TG_F64, 1, (const int64_t[]){8}, b1},
        {"linear2.weight", TG_F64, 2, (const int64_t[]){4, 8}, w2},
        {"linear2.bias", TG_F64, 1, (const int64_t[]){4}, b2},
    };
    ck_assert_int_eq(tg_safetensors_write_items(c, tpath(p, sizeof p, "w.safetensors"), 4, items,
                                                0, NULL, NULL, NULL), TG_OK);
    tg_ctx_free(c);
    static const char *const en[] = {"That is good.", "The house is big.", "I see a dog.",
                                     "We like bread.", "It is cold.", "Where is the car?"};
    static const char *const de[] = {"Das ist gut.", "Das Haus ist groß.", "Ich sehe einen Hund.",
                                     "Wir mögen Brot.", "Es ist kalt.", "Wo ist das Auto?"};
    char dict[1024] = "";
    for (int i = 0; i < 6; i++) {
        size_t l = strlen(dict);
        snprintf(dict + l, sizeof dict - l, "%s :: %s\n", de[i], en[i]);
    }
    tu_write_file(dir, "dict.txt", dict);
}

/* The shell words of row @p r with OUT replaced by @p out, plus " --force" when asked. */
static void cli_cmd(const cli_row *r, const char *out, bool force, char *buf, size_t n)
{
    const char *at = strstr(r->args, "OUT");
    const char *exe = strcmp(r->prog, "tgrad") ? TG_DING_PAIRS_EXE : tu_tgrad_exe();
    snprintf(buf, n, "'%s' %.*s'%s'%s%s", exe, (int)(at - r->args), r->args, out, at + 3,
             force ? " --force" : "");
}

static int run_cli(const char *cmd, double timeout)
{
    int rc = tu_run_sh(dir, cmd, timeout, NULL);
    ck_assert_msg(rc != TU_TIMED_OUT, "'%s' did not finish", cmd);
    return rc;
}

static char *err_text(void)
{
    char *e = tu_slurp_in(dir, "err.txt", NULL);
    return e ? e : strdup("");
}

/* (a) a character device (with --force): refused with exit 1 and one clear line; the node
 * survives. */
START_TEST(test_cli_chardev)
{
    const cli_row *r = &cli_rows[_i];
    cli_inputs();
    char p[1300], out[600], cmd[2400];
    if (r->out_is_dir) {
        ck_assert_int_eq(mkdir(tpath(out, sizeof out, "od"), 0700), 0);
        snprintf(p, sizeof p, "%s/%s", out, r->file);
    } else {
        tpath(out, sizeof out, "dev");
        snprintf(p, sizeof p, "%s", out);
    }
    if (!make_chardev(p))
        return;
    cli_cmd(r, out, true, cmd, sizeof cmd);
    int rc = run_cli(cmd, 60);
    char *e = err_text();
    ck_assert_msg(rc == 1, "%s on a character device: exit %d (%s)", r->name, rc, e);
    ck_assert_msg(strstr(e, "character device") && strstr(e, p) && tu_count_lines(e) == 1,
                  "%s: unclear message '%s'", r->name, e);
    assert_still_chardev(p, r->name);
    free(e);
}
END_TEST

/* (c) an existing file: without --force a usage error and the file untouched; with --force
 * replaced by a new inode (a hard link to the old file keeps its bytes), nothing else left. */
START_TEST(test_cli_existing)
{
    const cli_row *r = &cli_rows[_i];
    cli_inputs();
    char p[1300], q[600], out[600], cmd[2400], ls[512], ls0[512];
    if (r->out_is_dir) {
        ck_assert_int_eq(mkdir(tpath(out, sizeof out, "od"), 0700), 0);
        snprintf(p, sizeof p, "%s/%s", out, r->file);
    } else {
        tpath(out, sizeof out, r->file);
        snprintf(p, sizeof p, "%s", out);
    }
    tpath(q, sizeof q, "keep");
    FILE *f = fopen(p, "w");
    ck_assert_ptr_nonnull(f);
    fputs(OLD, f);
    fclose(f);
    ck_assert_int_eq(link(p, q), 0);
    tu_write_file(dir, "out.txt", ""); /* what tu_run_sh creates */
    tu_write_file(dir, "err.txt", "");
    listing(dir, ls0, sizeof ls0);
    cli_cmd(r, out, false, cmd, sizeof cmd);
    int rc = run_cli(cmd, 60);
    char *e = err_text();
    ck_assert_msg(rc == r->exists_rc && strstr(e, "force"),
                  "%s over an existing file without --force: exit %d (%s)", r->name, rc, e);
    free(e);
    char *now = tu_slurp(p, NULL);
    ck_assert_msg(now && !strcmp(now, OLD), "%s without --force changed the file", r->name);
    free(now);
    ck_assert_str_eq(listing(dir, ls, sizeof ls), ls0);

    cli_cmd(r, out, true, cmd, sizeof cmd);
    rc = run_cli(cmd, 60);
    e = err_text();
    ck_assert_msg(rc == 0, "%s --force: exit %d (%s)", r->name, rc, e);
    free(e);
    char *kept = tu_slurp(q, NULL);
    now = tu_slurp(p, NULL);
    ck_assert_msg(kept && !strcmp(kept, OLD), "%s --force wrote into the old file in place",
                  r->name);
    ck_assert_msg(now && strcmp(now, OLD), "%s --force did not replace the file", r->name);
    free(kept);
    free(now);
    /* no temporary left beside it */
    char d[1300];
    snprintf(d, sizeof d, "%s", p);
    *strrchr(d, '/') = 0;
    listing(d, ls, sizeof ls);
    ck_assert_msg(!strstr(ls, ".tmp"), "%s --force left a temporary: '%s'", r->name, ls);
}
END_TEST

/* (b) a full disk: `unshare -m` mounts a private 64 KiB tmpfs, fills it and runs the row over
 * an existing file (--force) and then towards a new one; what the tmpfs holds afterwards is
 * recorded outside it. */
START_TEST(test_cli_full_disk)
{
    const cli_row *r = &cli_rows[_i];
    if (tu_run_sh(dir, "unshare -m sh -c 'mount -t tmpfs -o size=4k none .'", 10, NULL) != 0) {
        fprintf(stderr, "test_writers: skipped the full-disk case of %s: `unshare -m` and "
                        "mount need root\n", r->name);
        return;
    }
    cli_inputs();
    ck_assert_int_eq(mkdir(tpath((char[600]){0}, 600, "fs"), 0700), 0);
    char out[600], cmd_old[2400], cmd_new[2400], script[8192];
    const char *tgt = r->out_is_dir ? "fs" : "fs/old";
    snprintf(out, sizeof out, "%s", tgt);
    cli_cmd(r, out, true, cmd_old, sizeof cmd_old);
    cli_cmd(r, r->out_is_dir ? "fs" : "fs/new", false, cmd_new, sizeof cmd_new);
    const char *file = r->out_is_dir ? r->file : "old";
    snprintf(script, sizeof script,
             "mount -t tmpfs -o size=64k none fs || exit 99\n"
             "printf '%%s' '%s' > 'fs/%s'\n"
             "head -c 1000000 /dev/zero > fs/fill 2>/dev/null\n"
             "%s 2> err1.txt; echo $? > rc1.txt\n"
             "cat 'fs/%s' > after.txt; ls -A fs > ls1.txt\n"
             "rm 'fs/%s'; head -c 1000000 /dev/zero >> fs/fill 2>/dev/null\n"
             "%s 2> err2.txt; echo $? > rc2.txt\n"
             "ls -A fs > ls2.txt\n",
             "the old bytes, which must survive", file, cmd_old, file, file, cmd_new);
    tu_write_file(dir, "full.sh", script);
    int rc = run_cli("unshare -m sh full.sh", 120);
    ck_assert_msg(rc == 0, "%s: the full-disk script exited %d", r->name, rc);
    char *rc1 = tu_slurp_in(dir, "rc1.txt", NULL), *rc2 = tu_slurp_in(dir, "rc2.txt", NULL);
    char *e1 = tu_slurp_in(dir, "err1.txt", NULL), *e2 = tu_slurp_in(dir, "err2.txt", NULL);
    char *after = tu_slurp_in(dir, "after.txt", NULL);
    char *ls1 = tu_slurp_in(dir, "ls1.txt", NULL), *ls2 = tu_slurp_in(dir, "ls2.txt", NULL);
    ck_assert_ptr_nonnull(rc1);
    ck_assert_ptr_nonnull(rc2);
    ck_assert_msg(!strcmp(rc1, "1\n") && strstr(e1, "No space left on device"),
                  "%s --force on a full disk: exit %s, '%s'", r->name, rc1, e1);
    ck_assert_msg(after && !strcmp(after, "the old bytes, which must survive"),
                  "%s on a full disk damaged the existing file: '%s'", r->name, after);
    char want[256];
    snprintf(want, sizeof want, "fill\n%s\n", file);
    ck_assert_msg(!strcmp(ls1, want), "%s on a full disk left '%s'", r->name, ls1);
    ck_assert_msg(!strcmp(rc2, "1\n") && strstr(e2, "No space left on device"),
                  "%s on a full disk (new file): exit %s, '%s'", r->name, rc2, e2);
    ck_assert_msg(!strcmp(ls2, "fill\n"), "%s on a full disk created '%s'", r->name, ls2);
    free(rc1);
    free(rc2);
    free(e1);
    free(e2);
    free(after);
    free(ls1);
    free(ls2);
}
END_TEST

/* An output naming one of the command's inputs: a usage error (exit 2, with --force) naming
 * both options, and the input byte-identical; through a symbolic and a hard link too. */
START_TEST(test_outputs_never_inputs)
{
    cli_inputs();
    char p[600];
    /* a copy of the pairs checkpoint and data, and two more names of each */
    static const char *const copies[][2] = {{"export_pairs_bytes.ckpt", "ck"},
                                            {"export_pairs_valid.tsv", "v.tsv"},
                                            {"export_pairs_train.tsv", "t.tsv"},
                                            {"export_pairs_spm.model", "m.model"},
                                            {"export_lm.ckpt", "lm.ckpt"}};
    for (size_t i = 0; i < sizeof copies / sizeof copies[0]; i++) {
        char src[600], cmd[1400];
        snprintf(src, sizeof src, "%s/%s", TG_FIXTURES, copies[i][0]);
        snprintf(cmd, sizeof cmd, "(cp '%s' '%s' && ln '%s' '%s.hard' && ln -s '%s' '%s.sym')",
                 src, copies[i][1], copies[i][1], copies[i][1], copies[i][1], copies[i][1]);
        ck_assert_int_eq(tu_run_sh(dir, cmd, 10, NULL), 0);
    }
    const char *P = "--pairs t.tsv --valid v.tsv --d-model 16 --heads 2 --d-ff 32 --layers 1 "
                    "--steps 2 --threads 1 --quiet";
    char cases[24][600];
    const char *needles[24];
    int k = 0;
#define CASE(needle, ...)                                                                      \
    do {                                                                                       \
        snprintf(cases[k], sizeof cases[k], __VA_ARGS__);                                      \
        needles[k++] = needle;                                                                 \
    } while (0)
    CASE("--out 'v.tsv' is the input --eval 'v.tsv'",
         "translate --checkpoint ck --eval v.tsv --out v.tsv --force");
    CASE("--out 'ck' is the input --checkpoint 'ck'",
         "translate --checkpoint ck --eval v.tsv --out ck --force");
    CASE("--out 'ck.sym' is the input --checkpoint 'ck'",
         "translate --checkpoint ck --eval v.tsv --out ck.sym --force");
    CASE("--out 'ck.hard' is the input --checkpoint 'ck'",
         "translate --checkpoint ck --eval v.tsv --out ck.hard --force");
    CASE("--out 'v.tsv.hard' is the input --eval 'v.tsv'",
         "translate --checkpoint ck --eval v.tsv --out v.tsv.hard --force");
    CASE("--log 't.tsv' is the input --pairs 't.tsv'", "train %s --log t.tsv --force", P);
    CASE("--log 'v.tsv.sym' is the input --valid 'v.tsv'", "train %s --log v.tsv.sym --force",
         P);
    CASE("--plot 'v.tsv.hard' is the input --valid 'v.tsv'",
         "train %s --plot v.tsv.hard --force", P);
    CASE("--checkpoint 't.tsv' is the input --pairs 't.tsv'",
         "train %s --checkpoint t.tsv --force", P);
    CASE("--dot 'v.tsv' is the input --valid 'v.tsv'", "train %s --dot v.tsv --force", P);
    CASE("--checkpoint 'm.model' is the input --spm 'm.model'",
         "train %s --spm m.model --checkpoint m.model --force", P);
    CASE("--checkpoint 'm.model.hard' is the input --spm 'm.model'",
         "train %s --spm m.model --checkpoint m.model.hard --force", P);
    CASE("--log 'ck' is the input --resume 'ck'",
         "train --pairs t.tsv --valid v.tsv --resume ck --checkpoint o.ckpt --log ck --force "
         "--steps 100000 --quiet");
    CASE("--out 'lm.ckpt.sym' is the input --checkpoint 'lm.ckpt'",
         "export --checkpoint lm.ckpt --out lm.ckpt.sym --force");
    CASE("--out 'lm.ckpt.hard' is the input --checkpoint 'lm.ckpt'",
         "export --checkpoint lm.ckpt --out lm.ckpt.hard --force");
    CASE("--out 'x.npy' is the input --q 'x.npy'",
         "run sdpa --q x.npy --k x.npy --v x.npy --out x.npy --force");
    CASE("--grads 'w.safetensors' is the input --weights 'w.safetensors'",
         "run ffn --weights w.safetensors --x x.npy --grad-out x.npy --grads w.safetensors "
         "--force");
    CASE("--attn-out 'x.npy' is the input --q 'x.npy'",
         "run sdpa --q x.npy --k x.npy --v x.npy --attn-out x.npy --force");
#undef CASE
    static const char *const inputs[] = {"ck",     "v.tsv", "t.tsv",        "m.model",
                                         "lm.ckpt", "x.npy", "w.safetensors", "c.txt"};
    enum { N_IN = sizeof inputs / sizeof inputs[0] };
    char *before[N_IN];
    size_t len[N_IN];
    for (int i = 0; i < N_IN; i++)
        ck_assert_ptr_nonnull(before[i] = tu_slurp(tpath(p, sizeof p, inputs[i]), &len[i]));
    for (int i = 0; i < k; i++) {
        int rc = tu_run_tgrad(dir, cases[i], 60, NULL);
        char *e = err_text();
        ck_assert_msg(rc == 2 && strstr(e, needles[i]) && tu_count_lines(e) == 1,
                      "'%s': exit %d, '%s' (want 2 and '%s')", cases[i], rc, e, needles[i]);
        free(e);
        for (int j = 0; j < N_IN; j++) {
            size_t n;
            char *now = tu_slurp(tpath(p, sizeof p, inputs[j]), &n);
            ck_assert_msg(now && n == len[j] && !memcmp(now, before[j], n), "'%s' changed '%s'",
                          cases[i], inputs[j]);
            free(now);
        }
    }
    for (int i = 0; i < N_IN; i++)
        free(before[i]);
    /* ding-pairs: an output file that is its --source */
    ck_assert_int_eq(mkdir(tpath(p, sizeof p, "od"), 0700), 0);
    ck_assert_int_eq(tu_run_sh(dir, "cp dict.txt od/train.tsv", 10, NULL), 0);
    size_t n0;
    char *d0 = tu_slurp_in(dir, "dict.txt", &n0);
    int rc = tu_run_sh(dir, "'" TG_DING_PAIRS_EXE "' --source od/train.tsv --valid 1 --test 1 "
                            "--force od", 30, NULL);
    char *e = err_text();
    ck_assert_msg(rc == 2 && strstr(e, "is the input --source"), "ding-pairs: exit %d, '%s'",
                  rc, e);
    char *d1 = tu_slurp_in(dir, "od/train.tsv", NULL);
    ck_assert_msg(d1 && !strcmp(d0, d1), "ding-pairs replaced its --source");
    free(e);
    free(d0);
    free(d1);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("writers");
    TCase *lib = tcase_create("library");
    tcase_add_checked_fixture(lib, setup, teardown);
    tcase_set_timeout(lib, 30);
    tcase_add_loop_test(lib, test_lib_chardev, 0, N_LIB);
    tcase_add_loop_test(lib, test_lib_existing, 0, N_LIB);
    tcase_add_loop_test(lib, test_lib_full_disk, 0, N_LIB);
    suite_add_tcase(s, lib);
    TCase *cli = tcase_create("cli");
    tcase_add_checked_fixture(cli, setup, teardown);
    tcase_set_timeout(cli, 240);
    tcase_add_loop_test(cli, test_cli_chardev, 0, N_CLI);
    tcase_add_loop_test(cli, test_cli_existing, 0, N_CLI);
    tcase_add_loop_test(cli, test_cli_full_disk, 0, N_CLI);
    tcase_add_test(cli, test_outputs_never_inputs);
    suite_add_tcase(s, cli);
    return tu_run(s);
}
