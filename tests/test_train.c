#define _DEFAULT_SOURCE
/*
 * test_train.c - `tgrad train`, `tgrad sample`, `tgrad info` end to end, and checkpoints:
 * the default task reaches its accuracy target; resume is bit-exact (200 straight vs
 * 100 + save + resume + 100, with dropout so the RNG matters); a failed save leaves the old
 * checkpoint byte-identical and no temporary file; a short text run's loss falls; bad input
 * gives one line on stderr, a non-zero exit, and never damages an existing checkpoint.
 */
#include "testutil.h"
#include "tgrad_train.h"

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

static char dir[256];

static const char *exe(void) { return tu_tgrad_exe(); }
static void setup(void) { tu_mkdtemp(dir, sizeof dir, "train"); }
static void teardown(void) { tu_rm_tree(dir); }
/* `tgrad ARGS` in dir (stdout, stderr: out.txt, err.txt); the exit status, -signal if killed. */
static int run(const char *args) { return tu_run_tgrad(dir, args, 600, NULL); }
static char *slurp(const char *name, size_t *len) { return tu_slurp_in(dir, name, len); }
static void write_file(const char *name, const char *text) { tu_write_file(dir, name, text); }
static void write_corpus(const char *name) { tu_write_corpus(dir, name, 3000); }
#define count_lines tu_count_lines

/* CSV columns step,train_loss,val_loss,lr,val_acc (tokens_per_s, the 5th, dropped: it is
 * timing). */
static char *csv_without_speed(const char *name)
{
    char *c = slurp(name, NULL);
    ck_assert_ptr_nonnull(c);
    char *out = malloc(strlen(c) + 1), *o = out;
    for (char *line = strtok(c, "\n"); line; line = strtok(NULL, "\n")) {
        char *speed = line; /* the 5th field, from its comma to the next or the end */
        for (int k = 0; k < 4 && speed; k++)
            speed = strchr(speed + (k > 0), ',');
        if (speed)
            memmove(speed, speed + strcspn(speed + 1, ",") + 1,
                    strlen(speed + strcspn(speed + 1, ",") + 1) + 1);
        o += sprintf(o, "%s\n", line);
    }
    free(c);
    return out;
}

START_TEST(test_default_task_reaches_target)
{
    ck_assert_int_eq(run("train --quiet"), 0);
    char *out = slurp("out.txt", NULL);
    ck_assert_ptr_nonnull(strstr(out, "held-out token accuracy"));
    const char *p = strstr(out, "accuracy ");
    double acc = atof(p + 9);
    ck_assert_msg(acc >= 99.0, "accuracy %g: %s", acc, out);
    free(out);
}
END_TEST

START_TEST(test_tasks_copy_sort)
{
    ck_assert_int_eq(run("train --task copy --quiet"), 0);
    ck_assert_int_eq(run("train --task sort --seq-len 8 --steps 3000 --quiet"), 0);
}
END_TEST

/* 200 steps straight == 100 + checkpoint + resume + 100, bitwise (losses and parameters). */
static void check_resume(const char *data_args)
{
    char a[1024];
    snprintf(a, sizeof a, "train %s --steps 200 --eval-every 50 --dropout 0.1 --target-acc 0 "
             "--checkpoint a.ckpt --log a.csv --quiet", data_args);
    ck_assert_int_eq(run(a), 0);
    snprintf(a, sizeof a, "train %s --steps 200 --eval-every 50 --dropout 0.1 --target-acc 0 "
             "--checkpoint b.ckpt --log b.csv --stop-after 100 --quiet", data_args);
    ck_assert_int_eq(run(a), 0);
    snprintf(a, sizeof a, "train %s --steps 200 --eval-every 50 --dropout 0.1 --target-acc 0 "
             "--resume b.ckpt --checkpoint b.ckpt --log b.csv --quiet", data_args);
    ck_assert_msg(run(a) == 0, "resume failed: %s", slurp("err.txt", NULL));
    char *ca = csv_without_speed("a.csv"), *cb = csv_without_speed("b.csv");
    ck_assert_int_eq(count_lines(ca), 201);
    ck_assert_msg(strcmp(ca, cb) == 0, "loss sequences differ");
    free(ca);
    free(cb);
    tg_ctx *ctx = tg_ctx_new();
    char pa[512], pb[512];
    snprintf(pa, sizeof pa, "%s/a.ckpt", dir);
    snprintf(pb, sizeof pb, "%s/b.ckpt", dir);
    tg_safetensors *sa = tg_safetensors_read(ctx, pa), *sb = tg_safetensors_read(ctx, pb);
    ck_assert_ptr_nonnull(sa);
    ck_assert_ptr_nonnull(sb);
    ck_assert_int_eq(tg_safetensors_count(sa), tg_safetensors_count(sb));
    for (int64_t i = 0; i < tg_safetensors_count(sa); i++) {
        tg_tensor *x = tg_safetensors_tensor(sa, i);
        tg_tensor *y = tg_safetensors_find(sb, tg_safetensors_name(sa, i));
        ck_assert_ptr_nonnull(y);
        ck_assert_msg(memcmp(tg_tensor_data(x), tg_tensor_data(y),
                             (size_t)tg_tensor_numel(x) * tg_dtype_size(tg_tensor_dtype(x))) == 0,
                      "tensor %s differs", tg_safetensors_name(sa, i));
    }
    tg_ctx_free(ctx);
}

START_TEST(test_resume_bit_exact_task)
{
    check_resume("--task reverse --d-model 32 --d-ff 64 --seq-len 8 --batch 16");
}
END_TEST

START_TEST(test_resume_bit_exact_text)
{
    write_corpus("c.txt");
    check_resume("--text c.txt --d-model 32 --heads 2 --d-ff 64 --seq-len 16 --batch 8 "
                 "--layers 1");
}
END_TEST

START_TEST(test_text_loss_falls_and_sample)
{
    write_corpus("c.txt");
    ck_assert_int_eq(run("train --text c.txt --d-model 32 --heads 2 --d-ff 64 --seq-len 16 "
                         "--batch 16 --layers 1 --steps 150 --eval-every 50 --lr 1e-2 "
                         "--warmup 10 --log l.csv --plot p.svg --checkpoint m.ckpt"), 0);
    char *csv = slurp("l.csv", NULL);
    double first = -1, last = -1, vfirst = -1, vlast = -1;
    for (char *line = strtok(csv, "\n"); line; line = strtok(NULL, "\n")) {
        long step;
        double tl, vl;
        int k = sscanf(line, "%ld,%lf,%lf", &step, &tl, &vl);
        if (k >= 2) {
            if (first < 0)
                first = tl;
            last = tl;
        }
        if (k == 3) {
            if (vfirst < 0)
                vfirst = vl;
            vlast = vl;
        }
    }
    free(csv);
    ck_assert_msg(last < 0.6 * first, "train loss %g -> %g did not fall", first, last);
    ck_assert_msg(vlast < vfirst, "validation loss %g -> %g did not fall", vfirst, vlast);
    char *svg = slurp("p.svg", NULL);
    ck_assert_ptr_nonnull(svg);
    ck_assert(strncmp(svg, "<?xml", 5) == 0);
    ck_assert_ptr_nonnull(strstr(svg, "<svg xmlns=\"http://www.w3.org/2000/svg\""));
    ck_assert_ptr_nonnull(strstr(svg, "<polyline"));
    ck_assert_ptr_nonnull(strstr(svg, "</svg>"));
    free(svg);
    /* sampling: deterministic per seed, only vocabulary bytes */
    ck_assert_int_eq(run("sample --checkpoint m.ckpt --prompt 'the ' --tokens 60 --seed 3"), 0);
    char *s1 = slurp("out.txt", NULL);
    ck_assert_int_eq(run("sample --checkpoint m.ckpt --prompt 'the ' --tokens 60 --seed 3"), 0);
    char *s2 = slurp("out.txt", NULL);
    ck_assert_str_eq(s1, s2);
    ck_assert_int_ge((int)strlen(s1), 64);
    for (const char *c = s1; *c; c++)
        ck_assert_msg(strchr("abcdefghijklmnopqrstuvwxyz .\n", *c), "byte %d", *c);
    free(s1);
    free(s2);
    ck_assert_int_ne(run("sample --checkpoint m.ckpt --prompt 'XYZ'"), 0);
    char *err = slurp("err.txt", NULL);
    ck_assert_ptr_nonnull(strstr(err, "vocabulary"));
    free(err);
    ck_assert_int_eq(run("info m.ckpt"), 0);
    char *info = slurp("out.txt", NULL);
    ck_assert_ptr_nonnull(strstr(info, "tok_emb.weight"));
    ck_assert_ptr_nonnull(strstr(info, "adam.m.layers.0.linear1.weight"));
    ck_assert_ptr_nonnull(strstr(info, "model.d_model"));
    free(info);
}
END_TEST

/* A save that fails midway: error, previous checkpoint byte-identical, no temporary file. */
START_TEST(test_atomic_save)
{
    char path[512];
    snprintf(path, sizeof path, "%s/ck.safetensors", dir);
    tg_ctx *ctx = tg_ctx_new();
    tg_transformer_config c;
    memset(&c, 0, sizeof c);
    c.vocab_size = 11;
    c.max_seq_len = 6;
    c.n_layers = 1;
    c.layer = tg_encoder_config_default(8, 2);
    c.layer.d_ff = 16;
    tg_transformer m;
    ck_assert_int_eq(tg_transformer_init(ctx, &m, TG_F32, &c), TG_OK);
    tg_optim_config oc = tg_optim_defaults(TG_OPTIM_ADAMW);
    tg_optim *opt = tg_optim_new(ctx, &oc, 0, NULL);
    ck_assert_ptr_nonnull(opt);
    const char *k[] = {"note"}, *v[] = {"first"};
    ck_assert_int_eq(tg_checkpoint_save(ctx, path, opt, 1, k, v, NULL), TG_OK);
    size_t n0;
    char *before = slurp("ck.safetensors", &n0);
    tg_fill(m.tok_emb, 3.0); /* change the model, then fail at several points */
    for (uint64_t at = 0; at < n0; at += n0 / 7 + 1) {
        tg_write_opts wo;
        memset(&wo, 0, sizeof wo);
        wo.inject_write_failure = true;
        wo.fail_after_bytes = at;
        tg_ctx_clear_error(ctx);
        ck_assert_int_eq(tg_checkpoint_save(ctx, path, opt, 1, k, v, &wo), TG_ERR_IO);
        ck_assert(strlen(tg_ctx_message(ctx)) > 0);
        size_t n1;
        char *after = slurp("ck.safetensors", &n1);
        ck_assert_uint_eq(n0, n1);
        ck_assert(memcmp(before, after, n0) == 0);
        free(after);
        DIR *d = opendir(dir);
        struct dirent *e;
        int files = 0;
        while ((e = readdir(d)))
            files += e->d_name[0] != '.';
        closedir(d);
        ck_assert_int_eq(files, 1); /* only ck.safetensors: no temporary left behind */
    }
    free(before);
    /* and a successful save then restores exactly into a fresh model */
    tg_ctx_clear_error(ctx);
    ck_assert_int_eq(tg_checkpoint_save(ctx, path, opt, 1, k, v, NULL), TG_OK);
    tg_ctx *ctx2 = tg_ctx_new();
    tg_transformer m2;
    ck_assert_int_eq(tg_transformer_init(ctx2, &m2, TG_F32, &c), TG_OK);
    tg_optim *opt2 = tg_optim_new(ctx2, &oc, 0, NULL);
    tg_safetensors *st = tg_safetensors_read(ctx2, path);
    ck_assert_ptr_nonnull(st);
    ck_assert_int_eq(tg_checkpoint_restore(ctx2, st, opt2), TG_OK);
    ck_assert(tg_get(m2.tok_emb, 0) == 3.0);
    tg_ctx_free(ctx2);
    tg_ctx_free(ctx);
}
END_TEST

START_TEST(test_bad_input)
{
    write_corpus("c.txt");
    write_file("empty.txt", "");
    write_file("short.txt", "tiny text");
    /* an existing checkpoint that failed runs must not damage */
    ck_assert_int_eq(run("train --text c.txt --d-model 16 --heads 2 --d-ff 32 --seq-len 8 "
                         "--batch 4 --layers 1 --steps 5 --checkpoint keep.ckpt --quiet"), 0);
    size_t n0;
    char *keep = slurp("keep.ckpt", &n0);
    static const struct {
        const char *args, *needle;
    } cases[] = {
        {"train --text missing.txt", "missing.txt"},
        {"train --text empty.txt", "empty"},
        {"train --text short.txt", "too short"},
        {"train --text c.txt --d-model 30 --heads 4", "does not divide"},
        {"train --text c.txt --checkpoint /nonexistent-dir/x.ckpt", "/nonexistent-dir/x.ckpt"},
        {"train --text c.txt --resume keep.ckpt --d-model 32 --checkpoint keep.ckpt",
         "different config"},
        {"train --task reverse --resume keep.ckpt --checkpoint keep.ckpt", "--text"},
        {"train --resume nothere.ckpt", "nothere.ckpt"},
        {"train --text c.txt --resume c.txt --checkpoint keep.ckpt", "c.txt"},
        {"train --task juggle", "juggle"},
        {"train --steps 0", "--steps"},
        {"train --bogus", "--bogus"},
        {"sample --checkpoint nothere.ckpt", "nothere.ckpt"},
        {"info nothere.safetensors", "nothere.safetensors"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        int rc = run(cases[i].args);
        char *err = slurp("err.txt", NULL);
        ck_assert_msg(rc != 0, "'%s' exited 0", cases[i].args);
        ck_assert_msg(count_lines(err) == 1, "'%s' printed %d lines: %s", cases[i].args,
                      count_lines(err), err);
        ck_assert_msg(strstr(err, cases[i].needle) != NULL, "'%s': '%s' lacks '%s'",
                      cases[i].args, err, cases[i].needle);
        free(err);
        size_t n1;
        char *now = slurp("keep.ckpt", &n1);
        ck_assert_msg(n1 == n0 && memcmp(now, keep, n0) == 0, "'%s' damaged the checkpoint",
                      cases[i].args);
        free(now);
    }
    free(keep);
}
END_TEST


/* Training is bitwise identical for any thread count: same losses, same parameters. */
START_TEST(test_thread_count_invariance)
{
    write_corpus("c.txt");
    const char *common = "train --text c.txt --d-model 32 --heads 2 --d-ff 64 --seq-len 16 "
                         "--batch 8 --layers 2 --steps 40 --eval-every 20 --dropout 0.1 --quiet";
    char a[1024];
    snprintf(a, sizeof a, "%s --threads 1 --log t1.csv --checkpoint t1.ckpt", common);
    ck_assert_int_eq(run(a), 0);
    /* 3 threads even on fewer CPUs (tgrad would lower --threads to the CPUs otherwise) */
    setenv("TGRAD_OVERSUBSCRIBE", "1", 1);
    snprintf(a, sizeof a, "%s --threads 3 --log t3.csv --checkpoint t3.ckpt", common);
    ck_assert_int_eq(run(a), 0);
    char *c1 = csv_without_speed("t1.csv"), *c3 = csv_without_speed("t3.csv");
    ck_assert_msg(strcmp(c1, c3) == 0, "losses differ between 1 and 3 threads");
    free(c1);
    free(c3);
    size_t n1, n3;
    char *k1 = slurp("t1.ckpt", &n1), *k3 = slurp("t3.ckpt", &n3);
    ck_assert_uint_eq(n1, n3);
    ck_assert_msg(memcmp(k1, k3, n1) == 0, "checkpoints differ between 1 and 3 threads");
    free(k1);
    free(k3);
}
END_TEST


/* --resume restores the model config and training hyperparameters: a resumed run given only
 * --text, --resume and --steps continues exactly like the straight run with custom settings. */
START_TEST(test_resume_restores_hyperparameters)
{
    write_corpus("c.txt");
    const char *custom = "--d-model 32 --heads 2 --d-ff 64 --seq-len 16 --layers 1 --lr 5e-3 "
                         "--batch 8 --warmup 7 --clip 0.5 --dropout 0.1 --optimizer sgd "
                         "--momentum 0.8 --weight-decay 0.001 --eval-every 10";
    char a[1024];
    snprintf(a, sizeof a, "train --text c.txt %s --steps 40 --log a.csv --checkpoint a.ckpt "
             "--quiet", custom);
    ck_assert_int_eq(run(a), 0);
    snprintf(a, sizeof a, "train --text c.txt %s --steps 40 --stop-after 20 --log b.csv "
             "--checkpoint b.ckpt --quiet", custom);
    ck_assert_int_eq(run(a), 0);
    ck_assert_int_eq(run("train --text c.txt --resume b.ckpt --steps 40 --log b.csv "
                         "--checkpoint b.ckpt --quiet"), 0);
    char *ca = csv_without_speed("a.csv"), *cb = csv_without_speed("b.csv");
    ck_assert_msg(strcmp(ca, cb) == 0, "resumed run diverged");
    free(ca);
    free(cb);
    size_t na, nb;
    char *ka = slurp("a.ckpt", &na), *kb = slurp("b.ckpt", &nb);
    ck_assert(na == nb && memcmp(ka, kb, na) == 0);
    free(ka);
    free(kb);
}
END_TEST


/* Ctrl-C: the run stops after the current step, saves its checkpoint, exits 130; resumable. */
START_TEST(test_interrupt_saves)
{
    write_corpus("c.txt");
    char cmd[2048];
    snprintf(cmd, sizeof cmd,
             "cd '%s' && (env --default-signal=INT '%s' train --text c.txt --d-model 32 --heads 2 --d-ff 64 --seq-len 16 "
             "--batch 8 --layers 1 --steps 1000000 --eval-every 1000000 --checkpoint i.ckpt "
             "--quiet > out.txt 2> err.txt & pid=$!; sleep 2; kill -INT $pid; wait $pid; "
             "echo $? > rc.txt)",
             dir, exe());
    ck_assert_int_eq(system(cmd), 0);
    char *rc = slurp("rc.txt", NULL);
    ck_assert_int_eq(atoi(rc), 130);
    free(rc);
    char *err = slurp("err.txt", NULL);
    ck_assert_ptr_nonnull(strstr(err, "interrupted at step"));
    free(err);
    size_t n0, n1;
    char *before = slurp("i.ckpt", &n0);
    /* the checkpoint is past step 1: an error, and the checkpoint stays as it was */
    ck_assert_int_ne(run("train --text c.txt --resume i.ckpt --checkpoint i.ckpt --stop-after 1 "
                         "--quiet"), 0);
    char *e2 = slurp("err.txt", NULL);
    ck_assert_ptr_nonnull(strstr(e2, "--stop-after 1 must be later"));
    free(e2);
    char *after = slurp("i.ckpt", &n1);
    ck_assert(n0 == n1 && memcmp(before, after, n0) == 0);
    free(before);
    free(after);
    /* and it resumes: two more steps */
    ck_assert_int_eq(run("info i.ckpt"), 0);
    char *info = slurp("out.txt", NULL);
    const char *st = strstr(info, "optim.step");
    ck_assert_ptr_nonnull(st);
    long at = atol(st + strlen("optim.step"));
    free(info);
    char a[512];
    snprintf(a, sizeof a, "train --text c.txt --resume i.ckpt --checkpoint i.ckpt --stop-after %ld "
             "--quiet", at + 2);
    ck_assert_int_eq(run(a), 0);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("train");
    TCase *tc = tcase_create("train");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_set_timeout(tc, 240);
    tcase_add_test(tc, test_default_task_reaches_target);
    tcase_add_test(tc, test_tasks_copy_sort);
    tcase_add_test(tc, test_resume_bit_exact_task);
    tcase_add_test(tc, test_resume_bit_exact_text);
    tcase_add_test(tc, test_resume_restores_hyperparameters);
    tcase_add_test(tc, test_text_loss_falls_and_sample);
    tcase_add_test(tc, test_atomic_save);
    tcase_add_test(tc, test_thread_count_invariance);
    tcase_add_test(tc, test_interrupt_saves);
    tcase_add_test(tc, test_bad_input);
    suite_add_tcase(s, tc);
    return tu_run(s);
}
