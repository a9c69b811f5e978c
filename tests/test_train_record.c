/*
 * test_train_record.c - the checkpoint's record of a training run: tg_train_record_meta ->
 * safetensors metadata -> tg_train_record_read gives the same record (text, task, seq2seq and
 * pairs records), and written again the same entries; every key the writer writes, corrupted,
 * removed where required, or out of range, refused with a message naming it (and the key
 * returned); keys of another mode refused; tg_train_record_check_data against the data a
 * resumed run loads (the same corpus, other bytes, other content of the same size, another
 * vocabulary, another task or mode).
 */
#include "testutil.h"

#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tgrad_train.h"

static char dir[256];

static void setup(void)
{
    tu_mkdtemp(dir, sizeof dir, "train_record");
    tu_write_corpus(dir, "a.txt", 300);
    tu_write_file(dir, "b.txt", "the same words, another order: words same the.\n");
}

static void teardown(void)
{
    tu_rm_tree(dir);
}

/* The corpus dir/name (the caller's: tg_text_free). */
static tg_text *corpus(tg_ctx *ctx, const char *name)
{
    char p[512];
    snprintf(p, sizeof p, "%s/%s", dir, name);
    const char *paths[1] = {p};
    tg_text *t = tg_text_load(ctx, paths, 1, 0.1);
    ck_assert_msg(t != NULL, "%s", tg_ctx_message(ctx));
    return t;
}

/* The four kinds of record tgrad train writes. */
enum { R_TEXT, R_TASK, R_SEQ2SEQ, R_PAIRS, N_RECORDS };

static tg_train_record record(int kind, const tg_text *text)
{
    tg_train_record r = {.mode = "task", .task = TG_TASK_REVERSE, .seed = 7,
                         .optimizer = TG_OPTIM_ADAMW, .batch = 32, .grad_accum = 2,
                         .warmup = 100, .eval_every = 50, .lr = 3e-3, .min_lr = 3e-4,
                         .weight_decay = 0.01, .clip = 1, .momentum = 0.9,
                         .val_fraction = 0.1, .target_acc = 0.99, .beta2 = 0.999, .eps = 1e-8};
    if (kind == R_TEXT) {
        r.mode = "text";
        r.text = text;
        r.save_every = 7;
        r.precision = TG_PRECISION_BF16;
        r.label_smoothing = 0.1;
    } else if (kind == R_SEQ2SEQ) {
        r.task = TG_TASK_SORT;
        r.optimizer = TG_OPTIM_SGD;
        r.schedule = TG_LR_NOAM;
        r.momentum = 0;
        r.seed = INT64_MAX;
    } else if (kind == R_PAIRS) {
        r.mode = "pairs";
        r.optimizer = TG_OPTIM_ADAM;
        r.schedule = TG_LR_NOAM;
        r.target_bleu = 27.5;
        r.label_smoothing = 0.1;
        r.pairs_hash = 0x0123456789abcdefULL;
        r.valid_hash = 0xfedcba9876543210ULL;
        ck_assert(tg_train_record_mark(&r, "data.pairs_hash"));
        ck_assert(tg_train_record_mark(&r, "data.valid_hash"));
    }
    return r;
}

/* dir/r.st holding the metadata of @p m (the training state's places left out), with key
 * @p key's value replaced by @p value (NULL: removed) and @p extra = @p extra_value added. */
static tg_safetensors *write_meta(tg_ctx *ctx, const tg_train_meta_list *m, const char *key,
                                  const char *value, bool edit, const char *extra,
                                  const char *extra_value)
{
    const char *k[TG_TRAIN_RECORD_META_MAX + 1], *v[TG_TRAIN_RECORD_META_MAX + 1];
    int n = 0;
    for (int i = 0; i < m->n; i++) {
        if (!m->values[i])
            continue;
        bool hit = edit && !strcmp(m->keys[i], key);
        if (hit && !value)
            continue;
        k[n] = m->keys[i];
        v[n++] = hit ? value : m->values[i];
    }
    if (extra) {
        k[n] = extra;
        v[n++] = extra_value;
    }
    char p[512];
    snprintf(p, sizeof p, "%s/r.st", dir);
    tg_write_opts o = {.no_fsync = true};
    ck_assert_int_eq(tg_safetensors_write_items(ctx, p, 0, NULL, n, k, v, &o), TG_OK);
    tg_safetensors *st = tg_safetensors_read(ctx, p);
    ck_assert_msg(st != NULL, "%s", tg_ctx_message(ctx));
    return st;
}

#define EQ_BITS(a, b) ck_assert_msg(memcmp(&(a), &(b), sizeof(a)) == 0, #a " differs")

/* @p got (read back) against @p want (written). */
static void same_record(const tg_train_record *got, const tg_train_record *want)
{
    ck_assert_str_eq(got->mode, want->mode);
    ck_assert_ptr_null(got->text);
    bool task = !strcmp(want->mode, "task");
    if (task)
        ck_assert_int_eq(got->task, want->task);
    ck_assert_int_eq(got->seed, want->seed);
    ck_assert_int_eq(got->optimizer, want->optimizer);
    ck_assert_int_eq(got->batch, want->batch);
    ck_assert_int_eq(got->grad_accum, want->grad_accum);
    ck_assert_int_eq(got->warmup, want->warmup);
    ck_assert_int_eq(got->eval_every, want->eval_every);
    ck_assert_int_eq(got->save_every, want->save_every);
    ck_assert_int_eq(tg_train_record_has(got, "train.save_every"), want->save_every > 0);
    EQ_BITS(got->lr, want->lr);
    EQ_BITS(got->min_lr, want->min_lr);
    EQ_BITS(got->weight_decay, want->weight_decay);
    EQ_BITS(got->clip, want->clip);
    EQ_BITS(got->momentum, want->momentum);
    EQ_BITS(got->val_fraction, want->val_fraction);
    EQ_BITS(got->target_acc, want->target_acc);
    EQ_BITS(got->target_bleu, want->target_bleu);
    ck_assert_int_eq(got->schedule, want->schedule);
    ck_assert_int_eq(got->precision, want->precision);
    EQ_BITS(got->beta2, want->beta2);
    EQ_BITS(got->eps, want->eps);
    EQ_BITS(got->label_smoothing, want->label_smoothing);
    if (!strcmp(want->mode, "text")) {
        tg_text_info in = tg_text_get_info(want->text);
        ck_assert_int_eq(got->vocab_size, in.vocab_size);
        ck_assert(!memcmp(got->vocab, tg_text_vocab(want->text), (size_t)in.vocab_size));
        ck_assert_int_eq(got->bytes, in.bytes);
        ck_assert_int_eq(got->files, in.files);
        ck_assert(got->text_hash == in.hash);
    }
    if (!strcmp(want->mode, "pairs")) {
        ck_assert(got->pairs_hash == want->pairs_hash);
        ck_assert(got->valid_hash == want->valid_hash);
    }
}

/* tg_train_record_meta -> metadata -> tg_train_record_read: the same record; written again
 * from the record read (no corpus), the same entries in the same order. */
START_TEST(test_round_trip)
{
    tg_ctx *ctx = tg_ctx_new();
    tg_text *text = corpus(ctx, "a.txt");
    tg_train_record want = record(_i, text);
    tg_train_meta_list *m = calloc(2, sizeof *m);
    ck_assert_int_eq(tg_train_record_meta(ctx, &want, &m[0]), TG_OK);
    tg_safetensors *st = write_meta(ctx, &m[0], NULL, NULL, false, NULL, NULL);
    tg_train_record got;
    const char *bad = "x";
    ck_assert_msg(tg_train_record_read(ctx, st, "r.st", &got, &bad) == TG_OK, "%s",
                  tg_ctx_message(ctx));
    ck_assert_ptr_null(bad);
    same_record(&got, &want);
    for (int i = 0; i < m[0].n; i++) /* every key written is held, and no other */
        ck_assert_msg(tg_train_record_has(&got, m[0].keys[i]) == (m[0].values[i] != NULL),
                      "%s", m[0].keys[i]);
    ck_assert(!tg_train_record_has(&got, "data.position"));
    ck_assert(!tg_train_record_has(&got, "model.layers"));
    ck_assert_int_eq(tg_train_record_meta(ctx, &got, &m[1]), TG_OK);
    ck_assert_int_eq(m[1].n, m[0].n);
    for (int i = 0; i < m[0].n; i++) {
        ck_assert_str_eq(m[1].keys[i], m[0].keys[i]);
        ck_assert_int_eq(m[1].values[i] == NULL, m[0].values[i] == NULL);
        if (m[0].values[i])
            ck_assert_str_eq(m[1].values[i], m[0].values[i]);
    }
    free(m);
    tg_text_free(text);
    tg_ctx_free(ctx);
}
END_TEST

/* Values no key of the record takes. */
static const char *const hostile[] = {"", "abc", "nan", "inf", "-1", "1e999", " 1", "0x1",
                                      "1\nmodel.layers 2"};

/* Key @p key of record kind @p kind set to @p value (NULL: removed): refused, the key
 * returned, the message naming it (and containing @p needle). */
static void expect_refused(int kind, const char *key, const char *value, const char *needle)
{
    tg_ctx *ctx = tg_ctx_new();
    tg_text *text = corpus(ctx, "a.txt");
    tg_train_record r = record(kind, text), got;
    tg_train_meta_list *m = calloc(1, sizeof *m);
    ck_assert_int_eq(tg_train_record_meta(ctx, &r, m), TG_OK);
    tg_safetensors *st = write_meta(ctx, m, key, value, true, NULL, NULL);
    const char *bad = NULL;
    ck_assert_msg(tg_train_record_read(ctx, st, "r.st", &got, &bad) == TG_ERR_FORMAT,
                  "%s = '%s' accepted", key, value ? value : "(none)");
    ck_assert_msg(bad && !strcmp(bad, key), "%s = '%s': the key at fault is %s", key,
                  value ? value : "(none)", bad ? bad : "(none)");
    const char *msg = tg_ctx_message(ctx);
    char q[96];
    snprintf(q, sizeof q, "'%s'", key);
    ck_assert_msg(strstr(msg, q) && strstr(msg, "tg_train_record_read: r.st: "),
                  "%s = '%s': %s", key, value ? value : "(none)", msg);
    ck_assert_msg(!needle || strstr(msg, needle), "%s: '%s' lacks '%s'", key, msg, needle);
    ck_assert_msg(!strchr(msg, '\n'), "%s: two lines: %s", key, msg);
    free(m);
    tg_text_free(text);
    tg_ctx_free(ctx);
}

/* Every key each kind of record writes, with each hostile value. */
START_TEST(test_corrupted_keys)
{
    tg_ctx *ctx = tg_ctx_new();
    tg_text *text = corpus(ctx, "a.txt");
    tg_train_record r = record(_i, text);
    tg_train_meta_list *m = calloc(1, sizeof *m);
    ck_assert_int_eq(tg_train_record_meta(ctx, &r, m), TG_OK);
    int checked = 0;
    for (int i = 0; i < m->n; i++) {
        if (!m->values[i])
            continue; /* the training state's place: tg_train_state_read's */
        for (size_t k = 0; k < sizeof hostile / sizeof hostile[0]; k++)
            expect_refused(_i, m->keys[i], hostile[k], NULL);
        checked++;
    }
    ck_assert_int_ge(checked, 20);
    free(m);
    tg_text_free(text);
    tg_ctx_free(ctx);
}
END_TEST

/* Required keys removed, values out of range, names and hashes spelled otherwise. */
START_TEST(test_refusals)
{
    expect_refused(R_TEXT, "data.mode", NULL, "it lacks the field 'data.mode'");
    expect_refused(R_TASK, "data.mode", "both", "expected text, task or pairs");
    expect_refused(R_TEXT, "data.vocab", NULL, "not a tgrad text checkpoint");
    expect_refused(R_TEXT, "data.vocab", "6261", "distinct bytes in increasing order as hex");
    expect_refused(R_TEXT, "data.vocab", "6161", "distinct bytes");
    expect_refused(R_TEXT, "data.bytes", "0", "from 1 to 1073741824");
    expect_refused(R_TEXT, "data.bytes", "1073741825", NULL);
    expect_refused(R_TEXT, "data.bytes", "0100", NULL);
    expect_refused(R_TEXT, "data.files", "2147483648", NULL);
    expect_refused(R_TEXT, "data.text_hash", "fnv1a64:00000000000000AB", "16 lowercase hex");
    expect_refused(R_TEXT, "data.text_hash", "fnv1a32:0000000000000000", NULL);
    expect_refused(R_TASK, "data.task", NULL, "not a tgrad task checkpoint");
    expect_refused(R_TASK, "data.task", "Reverse", "expected copy, reverse or sort");
    expect_refused(R_PAIRS, "data.pairs_hash", NULL, "not a tgrad translation checkpoint");
    expect_refused(R_PAIRS, "data.valid_hash", "fnv1a64:0", NULL);
    expect_refused(R_TASK, "train.seed", "9223372036854775808", NULL);
    expect_refused(R_TASK, "train.batch", "0", "from 1 to");
    expect_refused(R_TASK, "train.grad_accum", "0", NULL);
    expect_refused(R_TASK, "train.eval_every", "0", NULL);
    expect_refused(R_TEXT, "train.save_every", "0", NULL);
    expect_refused(R_TASK, "train.warmup", "+5", NULL);
    expect_refused(R_TASK, "train.optimizer", "AdamW", "expected sgd, adam or adamw");
    expect_refused(R_TASK, "train.schedule", "linear", "expected cosine or noam");
    expect_refused(R_TASK, "train.precision", "f16", "expected f32 or bf16");
    expect_refused(R_TASK, "train.lr", "-0.5", "a number >= 0");
    expect_refused(R_TASK, "train.momentum", "1.5", "in [0, 1]");
    expect_refused(R_TASK, "data.val_fraction", "1", "in [0, 1)");
    expect_refused(R_TASK, "train.beta2", "1", "in [0, 1)");
    expect_refused(R_TASK, "train.eps", "0", "in (0, 1]");
    expect_refused(R_PAIRS, "train.target_bleu", "100.5", "in [0, 100]");
    expect_refused(R_TASK, "train.label_smoothing", "2", NULL);
}
END_TEST

/* A key of another mode; with no key but data.mode, the record reads (older files). */
START_TEST(test_modes)
{
    tg_ctx *ctx = tg_ctx_new();
    tg_text *text = corpus(ctx, "a.txt");
    static const struct {
        int kind;
        const char *key, *value;
    } other[] = {{R_TEXT, "data.task", "copy"},     {R_TASK, "data.vocab", "3031"},
                 {R_PAIRS, "data.vocab", "3031"},   {R_PAIRS, "data.task", "sort"},
                 {R_TASK, "data.bytes", "12"},      {R_PAIRS, "data.text_hash",
                                                     "fnv1a64:0000000000000000"},
                 {R_SEQ2SEQ, "data.files", "1"}};
    for (size_t i = 0; i < sizeof other / sizeof other[0]; i++) {
        tg_train_record r = record(other[i].kind, text), got;
        tg_train_meta_list m;
        ck_assert_int_eq(tg_train_record_meta(ctx, &r, &m), TG_OK);
        tg_safetensors *st = write_meta(ctx, &m, NULL, NULL, false, other[i].key,
                                        other[i].value);
        const char *bad = NULL;
        ck_assert_int_eq(tg_train_record_read(ctx, st, NULL, &got, &bad), TG_ERR_FORMAT);
        ck_assert_str_eq(bad, other[i].key);
        tu_assert_error(ctx, TG_ERR_FORMAT, "checkpoint fields disagree: data.mode");
        ck_assert_str_eq(got.mode, r.mode); /* what was read before the fault */
    }
    /* only data.mode: every train.* key absent, not held, 0 */
    tg_train_meta_list m = {.n = 1, .keys = {"data.mode"}, .values = {"task"}};
    m.store[0][0] = 0;
    tg_safetensors *st = write_meta(ctx, &m, "data.mode", "pairs", true, NULL, NULL);
    tg_train_record got;
    ck_assert_int_eq(tg_train_record_read(ctx, st, NULL, &got, NULL), TG_ERR_FORMAT);
    tu_assert_error(ctx, TG_ERR_FORMAT, "<memory>: not a tgrad translation checkpoint: it lacks "
                                        "the field 'data.pairs_hash'");
    st = write_meta(ctx, &m, "data.mode", "task", true, "data.task", "copy");
    ck_assert_int_eq(tg_train_record_read(ctx, st, NULL, &got, NULL), TG_OK);
    ck_assert_int_eq(got.task, TG_TASK_COPY);
    ck_assert(!tg_train_record_has(&got, "train.lr") && got.lr == 0 && got.batch == 0);
    ck_assert(tg_train_record_has(&got, "data.task"));
    /* arguments */
    ck_assert_int_eq(tg_train_record_read(ctx, NULL, NULL, &got, NULL), TG_ERR_ARG);
    ck_assert_int_eq(tg_train_record_read(ctx, st, NULL, NULL, NULL), TG_ERR_ARG);
    ck_assert_int_eq(tg_train_record_read(NULL, st, NULL, &got, NULL), TG_ERR_ARG);
    ck_assert(!tg_train_record_mark(&got, "model.layers"));
    tg_text_free(text);
    tg_ctx_free(ctx);
}
END_TEST

/* Key tg_train_record_check_data names for record @p r against @p data (NULL: accepted). */
static const char *check(tg_ctx *ctx, const tg_train_record *r, const tg_train_record *data)
{
    const char *bad = "x";
    tg_status s = tg_train_record_check_data(ctx, r, data, &bad);
    ck_assert_int_eq(s == TG_OK, bad == NULL);
    if (bad) {
        char q[64];
        snprintf(q, sizeof q, "tg_train_record_check_data: %s: ", bad);
        tu_assert_error(ctx, TG_ERR_ARG, q);
    }
    return bad;
}

/* The record read back against the corpus a resumed run loads, and a task against a task. */
START_TEST(test_check_data)
{
    tg_ctx *ctx = tg_ctx_new();
    tg_text *a = corpus(ctx, "a.txt");
    tg_train_record w = record(R_TEXT, a), got;
    tg_train_meta_list m;
    ck_assert_int_eq(tg_train_record_meta(ctx, &w, &m), TG_OK);
    tg_safetensors *st = write_meta(ctx, &m, NULL, NULL, false, NULL, NULL);
    ck_assert_int_eq(tg_train_record_read(ctx, st, NULL, &got, NULL), TG_OK);
    tg_train_record here = {.mode = "text", .text = a};
    ck_assert_ptr_null(check(ctx, &got, &here));
    here.text = corpus(ctx, "b.txt"); /* fewer bytes */
    ck_assert_str_eq(check(ctx, &got, &here), "data.bytes");
    /* the same size in another order: the hash */
    tg_text_info in = tg_text_get_info(a);
    char *bytes = tu_slurp_in(dir, "a.txt", NULL);
    size_t len = strlen(bytes);
    char c = bytes[0];
    memmove(bytes, bytes + 1, len - 1);
    bytes[len - 1] = c;
    tu_write_file(dir, "c.txt", bytes);
    free(bytes);
    tg_text_free((tg_text *)here.text);
    here.text = corpus(ctx, "c.txt");
    ck_assert_int_eq(tg_text_get_info(here.text).bytes, in.bytes);
    ck_assert_str_eq(check(ctx, &got, &here), "data.text_hash");
    /* without the hash, bytes and files the same: the vocabulary */
    tg_train_record old = got;
    old.has = 0;
    ck_assert(tg_train_record_mark(&old, "data.mode") && tg_train_record_mark(&old, "data.vocab"));
    ck_assert_ptr_null(check(ctx, &old, &here)); /* same bytes present */
    old.vocab[0]++;
    ck_assert_str_eq(check(ctx, &old, &here), "data.vocab");
    old.vocab_size--;
    ck_assert_str_eq(check(ctx, &old, &here), "data.vocab");
    tg_train_record task = record(R_TASK, NULL), other = task;
    other.task = TG_TASK_COPY;
    ck_assert_ptr_null(check(ctx, &task, &task));
    ck_assert_str_eq(check(ctx, &task, &other), "data.task");
    ck_assert_str_eq(check(ctx, &task, &here), "data.mode");
    tg_train_record pairs = record(R_PAIRS, NULL);
    ck_assert_ptr_null(check(ctx, &pairs, &pairs));
    tg_text_free((tg_text *)here.text);
    here.text = NULL;
    ck_assert_int_eq(tg_train_record_check_data(ctx, &got, &here, NULL), TG_ERR_ARG);
    ck_assert_int_eq(tg_train_record_check_data(ctx, NULL, &here, NULL), TG_ERR_ARG);
    tg_text_free(a);
    tg_ctx_free(ctx);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("train_record");
    TCase *tc = tcase_create("record");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_set_timeout(tc, 30);
    tcase_add_loop_test(tc, test_round_trip, 0, N_RECORDS);
    tcase_add_loop_test(tc, test_corrupted_keys, 0, N_RECORDS);
    tcase_add_test(tc, test_refusals);
    tcase_add_test(tc, test_modes);
    tcase_add_test(tc, test_check_data);
    suite_add_tcase(s, tc);
    return tu_run(s);
}
