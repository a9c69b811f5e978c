/*
 * test_text.c - tgrad_data.h's byte-level text corpora (tg_text_*) and algorithmic tasks
 * (tg_task_*): files concatenated in order (directories and repeated real paths skipped,
 * special files refused with one message), vocabulary and split, the content hash, training
 * and validation windows by hand, the task targets; errors never abort.
 */
#define _DEFAULT_SOURCE
#include "testutil.h"
#include "tgrad_data.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static char dir[256];

static void setup(void)
{
    tu_mkdtemp(dir, sizeof dir, "text");
}

static void teardown(void)
{
    tu_rm_tree(dir);
    tu_ctx_teardown();
}

static const char *at(const char *name)
{
    static char p[4][512];
    static int k;
    k = (k + 1) % 4;
    return tu_path(p[k], sizeof p[k], dir, name);
}

/* FNV-1a 64 written out for the hash check. */
static uint64_t fnv(uint64_t h, const unsigned char *p, size_t n)
{
    for (size_t i = 0; i < n; i++)
        h = (h ^ p[i]) * 0x100000001b3ULL;
    return h;
}

static uint64_t fnv_u64(uint64_t h, uint64_t v)
{
    unsigned char b[8];
    for (int i = 0; i < 8; i++)
        b[i] = (unsigned char)(v >> (8 * i));
    return fnv(h, b, 8);
}

/* Two files in order, a directory and a symbolic link to the first skipped; vocabulary,
 * split, hash. */
START_TEST(test_load)
{
    tg_ctx *ctx = tu_ctx_new();
    tu_write_file(dir, "a.txt", "hello ");
    tu_write_file(dir, "b.txt", "world, hello!");
    ck_assert_int_eq(mkdir(at("sub"), 0700), 0);
    ck_assert_int_eq(symlink(at("a.txt"), at("link.txt")), 0);
    const char *paths[4] = {at("a.txt"), at("sub"), at("b.txt"), at("link.txt")};
    tg_text *t = tg_text_load(ctx, paths, 4, 0.25);
    ck_assert_msg(t != NULL, "%s", tg_ctx_message(ctx));
    tg_text_info in = tg_text_get_info(t);
    const char *all = "hello world, hello!";
    ck_assert_int_eq(in.bytes, 19);
    ck_assert_int_eq(in.files, 2);
    ck_assert_int_eq(in.dirs, 1);
    ck_assert_int_eq(in.train_bytes, 19 - 4); /* floor(19 * 0.25) held out */
    ck_assert(memcmp(tg_text_data(t), all, 19) == 0);
    const char *vocab = " !,dehlorw"; /* the distinct bytes, sorted */
    ck_assert_int_eq(in.vocab_size, (int)strlen(vocab));
    ck_assert(memcmp(tg_text_vocab(t), vocab, strlen(vocab)) == 0);
    ck_assert_int_eq(tg_text_id(t, 'h'), 5);
    ck_assert_int_eq(tg_text_id(t, 'z'), -1);
    int64_t ends[2] = {6, 19};
    uint64_t h = fnv(0xcbf29ce484222325ULL, (const unsigned char *)all, 19);
    h = fnv_u64(fnv_u64(fnv_u64(h, 6), 19), 2);
    ck_assert(in.hash == h);
    ck_assert(tg_text_hash((const unsigned char *)all, 19, ends, 2) == h);
    /* the same bytes split differently hash differently */
    int64_t ends2[2] = {7, 19};
    ck_assert(tg_text_hash((const unsigned char *)all, 19, ends2, 2) != h);
    tg_text_free(t);
    tg_text_free(NULL);
    ck_assert_int_eq(tg_text_get_info(NULL).bytes, 0);
    tu_ctx_free(ctx);
}
END_TEST

/* Refusals: one message naming the file as given, NULL, no abort. */
START_TEST(test_errors)
{
    tg_ctx *ctx = tu_ctx_new();
    tu_write_file(dir, "empty.txt", "");
    tu_write_file(dir, "a.txt", "abc");
    ck_assert_int_eq(mkdir(at("d"), 0700), 0);
    ck_assert_int_eq(mkfifo(at("fifo"), 0600), 0);
    struct {
        const char *path;
        double vf;
        tg_status st;
        const char *needle;
    } rows[] = {
        {"missing.txt", 0.1, TG_ERR_IO, "missing.txt': cannot read: No such file"},
        {"fifo", 0.1, TG_ERR_IO, "fifo' is a FIFO, not a regular file"},
        {"d", 0.1, TG_ERR_ARG, "d' is a directory; give the files in it"},
        {"empty.txt", 0.1, TG_ERR_ARG, "no text: the input file is empty"},
        {"a.txt", 1.0, TG_ERR_ARG, "validation fraction 1 outside [0, 1)"},
        {"a.txt", -0.5, TG_ERR_ARG, "validation fraction"},
    };
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
        const char *p = at(rows[i].path);
        ck_assert_ptr_null(tg_text_load(ctx, &p, 1, rows[i].vf));
        tu_assert_error(ctx, rows[i].st, rows[i].needle);
        ck_assert_msg(strncmp(tg_ctx_message(ctx), "tg_text_load: ", 14) == 0, "%s",
                      tg_ctx_message(ctx));
    }
    const char *dev = "/dev/null";
    ck_assert_ptr_null(tg_text_load(ctx, &dev, 1, 0));
    tu_assert_error(ctx, TG_ERR_IO, "'/dev/null' is a character device, not a regular file");
    ck_assert_ptr_null(tg_text_load(ctx, NULL, 2, 0));
    tu_assert_error(ctx, TG_ERR_ARG, NULL);
    ck_assert_ptr_null(tg_text_load(NULL, NULL, 0, 0));
    tu_ctx_free(ctx);
}
END_TEST

/* Training windows: start = rng % (n_train - T), ids and next-byte targets; validation
 * windows from the split's start, padding rows ignored. */
START_TEST(test_windows)
{
    tg_ctx *ctx = tu_ctx_new();
    char text[401];
    for (int i = 0; i < 400; i++)
        text[i] = (char)('a' + (i * 7 + i / 13) % 26);
    text[400] = 0;
    tu_write_file(dir, "t.txt", text);
    const char *p = at("t.txt");
    tg_text *t = tg_text_load(ctx, &p, 1, 0.25);
    ck_assert_ptr_nonnull(t);
    tg_text_info in = tg_text_get_info(t);
    ck_assert_int_eq(in.train_bytes, 300);
    enum { B = 3, T = 8 };
    int32_t ids[B * T], tgt[B * T];
    uint64_t st[4];
    tg_ctx_seed(ctx, 9);
    tg_rng_get_state(ctx, st);
    ck_assert_int_eq(tg_text_train_batch(ctx, t, B, T, ids, tgt), TG_OK);
    tg_rng_set_state(ctx, st);
    for (int b = 0; b < B; b++) {
        int64_t s = (int64_t)(tg_rng_u64(ctx) % (uint64_t)(300 - T));
        for (int j = 0; j < T; j++) {
            ck_assert_int_eq(ids[b * T + j], tg_text_id(t, (unsigned char)text[s + j]));
            ck_assert_int_eq(tgt[b * T + j], tg_text_id(t, (unsigned char)text[s + j + 1]));
        }
    }
    /* validation: (100 - 1) / 8 = 12 windows, batches of 5: 5, 5, 2 */
    ck_assert_int_eq(tg_text_val_windows(t, T), 12);
    ck_assert_int_eq(tg_text_val_batches(t, 5, T), 3);
    int32_t vi[5 * T], vt[5 * T];
    ck_assert_int_eq(tg_text_val_batch(t, 0, 5, T, vi, vt), 5);
    ck_assert_int_eq(vi[T], tg_text_id(t, (unsigned char)text[300 + T]));
    ck_assert_int_eq(tg_text_val_batch(t, 2, 5, T, vi, vt), 2);
    for (int j = 0; j < T; j++) {
        ck_assert_int_eq(vi[j], tg_text_id(t, (unsigned char)text[300 + 10 * T + j]));
        ck_assert_int_eq(vt[j], tg_text_id(t, (unsigned char)text[300 + 10 * T + j + 1]));
        ck_assert_int_eq(vt[2 * T + j], -1); /* padding rows: ignored targets */
        ck_assert_int_eq(vi[2 * T + j], 0);
    }
    /* errors: a window longer than the split, bad sizes */
    ck_assert_int_eq(tg_text_train_batch(ctx, t, B, 300, ids, tgt), TG_ERR_ARG);
    tu_assert_error(ctx, TG_ERR_ARG, "a window of T = 300 needs 301");
    ck_assert_int_eq(tg_text_train_batch(ctx, t, 0, T, ids, tgt), TG_ERR_ARG);
    ck_assert_int_eq(tg_text_train_batch(ctx, NULL, B, T, ids, tgt), TG_ERR_ARG);
    ck_assert_int_eq(tg_text_val_batch(t, 0, 0, T, vi, vt), 0);
    ck_assert_int_eq(tg_text_val_windows(NULL, T), 0);
    tg_text_free(t);
    tu_ctx_free(ctx);
}
END_TEST

/* Tasks: the digits from the private splitmix64 state, targets copied, reversed, sorted. */
START_TEST(test_tasks)
{
    enum { B = 4, T = 9 };
    int32_t ids[B * T], tgt[B * T];
    for (int k = 0; k < 3; k++) {
        uint64_t s = 77, s2 = 77;
        ck_assert_int_eq(tg_task_batch((tg_task_kind)k, &s, B, T, ids, tgt), TG_OK);
        for (int i = 0; i < B * T; i++) { /* splitmix64 by hand */
            uint64_t z = (s2 += 0x9e3779b97f4a7c15ULL);
            z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
            z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
            ck_assert_int_eq(ids[i], (int32_t)((z ^ (z >> 31)) % 10));
        }
        ck_assert(s == s2);
        for (int b = 0; b < B; b++) {
            const int32_t *x = ids + b * T, *y = tgt + b * T;
            int cx[10] = {0}, cy[10] = {0};
            for (int t = 0; t < T; t++) {
                if (k == TG_TASK_COPY)
                    ck_assert_int_eq(y[t], x[t]);
                if (k == TG_TASK_REVERSE)
                    ck_assert_int_eq(y[t], x[T - 1 - t]);
                if (k == TG_TASK_SORT && t > 0)
                    ck_assert_int_le(y[t - 1], y[t]);
                cx[x[t]]++;
                cy[y[t]]++;
            }
            ck_assert(memcmp(cx, cy, sizeof cx) == 0);
        }
    }
    ck_assert_str_eq(tg_task_name(TG_TASK_SORT), "sort");
    ck_assert_ptr_null(tg_task_name((tg_task_kind)7));
    uint64_t s = 1;
    ck_assert_int_eq(tg_task_batch((tg_task_kind)7, &s, B, T, ids, tgt), TG_ERR_ARG);
    ck_assert_int_eq(tg_task_batch(TG_TASK_COPY, NULL, B, T, ids, tgt), TG_ERR_ARG);
    /* training batches draw from the context RNG */
    tg_ctx *ctx = tu_ctx_new();
    tg_ctx_seed(ctx, 5);
    ck_assert_int_eq(tg_task_train_batch(ctx, TG_TASK_REVERSE, B, T, ids, tgt), TG_OK);
    tg_ctx_seed(ctx, 5);
    for (int i = 0; i < T; i++)
        ck_assert_int_eq(ids[i], (int32_t)(tg_rng_u64(ctx) % 10));
    ck_assert_int_eq(tg_task_train_batch(ctx, TG_TASK_REVERSE, 0, T, ids, tgt), TG_ERR_ARG);
    tu_assert_error(ctx, TG_ERR_ARG, "tg_task_train_batch");
    tu_ctx_free(ctx);
}
END_TEST

static Suite *text_suite(void)
{
    Suite *s = suite_create("text");
    TCase *tc = tcase_create("text");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_test(tc, test_load);
    tcase_add_test(tc, test_errors);
    tcase_add_test(tc, test_windows);
    tcase_add_test(tc, test_tasks);
    suite_add_tcase(s, tc);
    return s;
}

int main(void) { return tu_run(text_suite()); }
