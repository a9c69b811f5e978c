#define _POSIX_C_SOURCE 200809L
/*
 * test_train_pairs.c - `tgrad train --pairs` (translation training) through the CLI, on a
 * small synthetic pairs file with tiny models (byte tokenizer, and SentencePiece when built
 * with it):
 * - a run trains, logs val_bleu, evaluates greedy BLEU and writes a checkpoint whose metadata
 *   carries the tokenizer, the data hashes and the batch cursor;
 * - stopping and resuming gives the checkpoint of the uninterrupted run, byte for byte
 *   (epoch, batch order, RNG, schedule), across an epoch boundary;
 * - resuming with other data, or without --pairs, is refused with one line (exit 2);
 * - bad options and bad files end in one line and a non-zero exit.
 */
#include "testutil.h"
#include "tgrad_io.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static char dir[256];
static void setup(void) { tu_mkdtemp(dir, sizeof dir, "train_pairs"); }
static void teardown(void) { tu_rm_tree(dir); }
static int run(const char *args) { return tu_run_tgrad(dir, args, 120, NULL); }
static char *slurp(const char *name, size_t *len) { return tu_slurp_in(dir, name, len); }

/* n pairs of a toy "translation": English digits words -> German words. */
static void write_pairs(const char *name, int n, int offset)
{
    static const char *en[] = {"one", "two", "three", "four", "five", "six", "seven", "eight"};
    static const char *de[] = {"eins", "zwei", "drei", "vier", "fünf", "sechs", "sieben",
                               "acht"};
    size_t cap = (size_t)n * 96 + 1;
    char *buf = malloc(cap), *p = buf;
    for (int i = 0; i < n; i++) {
        int a = (i + offset) % 8, b = (i * 3 + offset) % 8, c = (i * 5 + 1) % 8;
        p += sprintf(p, "%s %s %s.\t%s %s %s.\n", en[a], en[b], i % 3 ? en[c] : "and",
                     de[a], de[b], i % 3 ? de[c] : "und");
    }
    tu_write_file(dir, name, buf);
    free(buf);
}

#define MODEL "--tokenizer bytes --d-model 16 --heads 2 --d-ff 32 --layers 1 --seq-len 40 " \
              "--batch-tokens 200 --threads 1 --quiet"

static void expect_ok(const char *args)
{
    int rc = run(args);
    char *err = slurp("err.txt", NULL);
    ck_assert_msg(rc == 0, "tgrad %s: exit %d: %s", args, rc, err ? err : "");
    free(err);
}

static void expect_fail(const char *args, int want_rc, const char *needle)
{
    int rc = run(args);
    char *err = slurp("err.txt", NULL);
    ck_assert_msg(rc == want_rc, "tgrad %s: exit %d (want %d): %s", args, rc, want_rc,
                  err ? err : "");
    ck_assert_msg(err && tu_count_lines(err) == 1, "tgrad %s: want one line: %s", args,
                  err ? err : "");
    ck_assert_msg(strstr(err, needle), "tgrad %s: '%s' lacks '%s'", args, err, needle);
    free(err);
}

static const char *meta(const char *name, const char *key, char *buf, size_t n)
{
    char p[512];
    tu_path(p, sizeof p, dir, name);
    tg_ctx *ctx = tg_ctx_new();
    tg_safetensors *st = tg_safetensors_read(ctx, p);
    const char *v = st ? tg_safetensors_meta_get(st, key) : NULL;
    if (v)
        snprintf(buf, n, "%s", v);
    tg_ctx_free(ctx);
    return v ? buf : NULL;
}

static bool same_file(const char *a, const char *b)
{
    size_t na, nb;
    char *x = slurp(a, &na), *y = slurp(b, &nb);
    bool same = x && y && na == nb && memcmp(x, y, na) == 0;
    free(x);
    free(y);
    return same;
}

START_TEST(test_trains_logs_and_saves)
{
    write_pairs("train.tsv", 60, 0);
    write_pairs("valid.tsv", 10, 3);
    expect_ok("train --pairs train.tsv --valid valid.tsv " MODEL " --steps 12 --eval-every 6 "
              "--log log.csv --checkpoint ck");
    char *log = slurp("log.csv", NULL);
    ck_assert_ptr_nonnull(log);
    const char *head = "step,train_loss,val_loss,lr,tokens_per_s,val_bleu\n";
    ck_assert_msg(strncmp(log, head, strlen(head)) == 0, "%s", log);
    ck_assert_int_eq(tu_count_lines(log), 13);
    free(log);
    char v[128];
    ck_assert_str_eq(meta("ck", "data.mode", v, sizeof v), "pairs");
    ck_assert_str_eq(meta("ck", "tokenizer.kind", v, sizeof v), "bytes");
    ck_assert_str_eq(meta("ck", "model.vocab_size", v, sizeof v), "260");
    ck_assert_str_eq(meta("ck", "model.scale_embeddings", v, sizeof v), "1");
    ck_assert_str_eq(meta("ck", "optim.step", v, sizeof v), "12");
    ck_assert_ptr_nonnull(meta("ck", "data.pairs_hash", v, sizeof v));
    ck_assert_ptr_nonnull(meta("ck", "data.epoch", v, sizeof v));
    char *out = slurp("out.txt", NULL);
    ck_assert_msg(out && strstr(out, "BLEU = "), "summary: %s", out ? out : "");
    free(out);
}
END_TEST

/* 60 pairs in batches of <= 200 tokens: about 14 batches an epoch, so 40 steps cross two epoch
 * boundaries; stopping at 17 and resuming must give the straight run's bytes. */
START_TEST(test_resume_bit_exact)
{
    write_pairs("train.tsv", 60, 0);
    write_pairs("valid.tsv", 10, 3);
    expect_ok("train --pairs train.tsv --valid valid.tsv " MODEL " --steps 40 --eval-every 20 "
              "--checkpoint straight");
    expect_ok("train --pairs train.tsv --valid valid.tsv " MODEL " --steps 40 --eval-every 20 "
              "--checkpoint part --stop-after 17");
    char v[64];
    ck_assert_str_eq(meta("part", "optim.step", v, sizeof v), "17");
    expect_ok("train --pairs train.tsv --valid valid.tsv --resume part --quiet");
    ck_assert_msg(same_file("straight", "part"), "resumed checkpoint differs");
    ck_assert_msg(strcmp(meta("part", "data.epoch", v, sizeof v), "0") != 0,
                  "the run crossed an epoch");
    /* other data, or no data: refused */
    write_pairs("other.tsv", 60, 1);
    expect_fail("train --pairs other.tsv --valid valid.tsv --resume part --steps 50", 2,
                "other --pairs data");
    expect_fail("train --resume part --steps 50", 2, "pass its --pairs and --valid");
}
END_TEST

START_TEST(test_refusals)
{
    write_pairs("train.tsv", 20, 0);
    write_pairs("valid.tsv", 5, 3);
    expect_fail("train --pairs train.tsv " MODEL, 2, "--valid");
    expect_fail("train --valid valid.tsv --task copy", 2, "--valid needs --pairs");
    expect_fail("train --pairs train.tsv --valid valid.tsv --text train.tsv", 2,
                "exclude each other");
    expect_fail("train --pairs train.tsv --valid valid.tsv --arch lm", 2, "encoder-decoder");
    expect_fail("train --pairs train.tsv --valid valid.tsv --tokenizer bytes --seq-len 40 "
                "--batch-tokens 10", 2,
                "--batch-tokens 10 is smaller than the longest sequence");
    tu_write_file(dir, "bad.tsv", "one\ttwo\nno tab here\n");
    expect_fail("train --pairs bad.tsv --valid valid.tsv " MODEL, 1, "bad.tsv:2");
    tu_write_file(dir, "bad8.tsv", "caf\xe9\tx\n");
    expect_fail("train --pairs train.tsv --valid bad8.tsv " MODEL, 1, "bad8.tsv:1");
    expect_fail("train --pairs missing.tsv --valid valid.tsv " MODEL, 1, "missing.tsv");
}
END_TEST

int main(void)
{
    Suite *s = suite_create("train_pairs");
    TCase *tc = tu_tcase(s, "cli", 0);
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_test(tc, test_trains_logs_and_saves);
    tcase_add_test(tc, test_resume_bit_exact);
    tcase_add_test(tc, test_refusals);
    return tu_run(s);
}
