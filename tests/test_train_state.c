/*
 * test_train_state.c - the training state in a checkpoint and checkpoint save / restore by
 * config: tg_train_state_meta's keys and values, tg_train_checkpoint_save's metadata order
 * (format, model.*, the caller's fields with the state's keys where the caller places them,
 * the rest of the state, optim.step, rng), a save -> restore round trip of parameters,
 * optimizer state and step, RNG and state into a model built from the file's config in another
 * context (bit for bit), and refusals: a corrupted state key, a checkpoint of another config,
 * extra keys the library owns; each with its message and nothing restored or written.
 */
#include "testutil.h"

#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "tgrad_train.h"

static tg_transformer_config small_config(void)
{
    tg_transformer_config c;
    memset(&c, 0, sizeof c);
    c.vocab_size = 7;
    c.max_seq_len = 6;
    c.n_layers = 1;
    c.layer = tg_encoder_config_default(8, 2);
    c.layer.d_ff = 12;
    c.causal = true;
    c.pos = TG_POS_LEARNED;
    return c;
}

START_TEST(test_state_meta)
{
    tg_train_state s = tg_train_state_init();
    ck_assert_int_eq(s.steps, -1);
    ck_assert_int_eq(s.position, -1);
    ck_assert_int_eq(s.epoch, -1);
    ck_assert_int_eq(s.batch, -1);
    ck_assert(isinf(s.best_val) && s.best_val > 0);
    tg_meta_kv kv[TG_TRAIN_STATE_META_MAX];
    ck_assert_int_eq(tg_train_state_meta(&s, kv), 1); /* best_val is always written */
    ck_assert_str_eq(kv[0].key, "train.best_val");
    ck_assert_str_eq(kv[0].value, "inf");
    s.position = 320;
    s.steps = 1500;
    s.best_val = 0.1; /* the shortest decimal that reads back, not 0.10000000000000001 */
    ck_assert_int_eq(tg_train_state_meta(&s, kv), 3);
    ck_assert_str_eq(kv[0].key, "data.position");
    ck_assert_str_eq(kv[0].value, "320");
    ck_assert_str_eq(kv[1].key, "train.steps");
    ck_assert_str_eq(kv[1].value, "1500");
    ck_assert_str_eq(kv[2].key, "train.best_val");
    ck_assert_str_eq(kv[2].value, "0.1");
    s.epoch = 2;
    s.batch = 0;
    ck_assert_int_eq(tg_train_state_meta(&s, kv), 5);
    ck_assert_str_eq(kv[3].key, "data.epoch");
    ck_assert_str_eq(kv[3].value, "2");
    ck_assert_str_eq(kv[4].key, "data.batch");
    ck_assert_str_eq(kv[4].value, "0");
    ck_assert_int_eq(s.best_bleu, -1); /* not written */
    s.best_bleu = 12.5;                /* a run keeping its best checkpoint: last */
    ck_assert_int_eq(tg_train_state_meta(&s, kv), 6);
    ck_assert_str_eq(kv[5].key, "train.best_bleu");
    ck_assert_str_eq(kv[5].value, "12.5");
    /* refused: nothing written */
    tg_train_state b = s;
    b.batch = -1; /* a cursor needs both */
    ck_assert_int_eq(tg_train_state_meta(&b, kv), -1);
    b = s;
    b.steps = 0;
    ck_assert_int_eq(tg_train_state_meta(&b, kv), -1);
    b = s;
    b.position = -2;
    ck_assert_int_eq(tg_train_state_meta(&b, kv), -1);
    b = s;
    b.best_val = NAN;
    ck_assert_int_eq(tg_train_state_meta(&b, kv), -1);
    b.best_val = -1;
    ck_assert_int_eq(tg_train_state_meta(&b, kv), -1);
    b = s;
    b.best_bleu = 100.5;
    ck_assert_int_eq(tg_train_state_meta(&b, kv), -1);
    b.best_bleu = NAN;
    ck_assert_int_eq(tg_train_state_meta(&b, kv), -1);
    ck_assert_int_eq(tg_train_state_meta(NULL, kv), -1);
    ck_assert_int_eq(tg_train_state_meta(&s, NULL), -1);
}
END_TEST

/* A model of small_config() in a new context seeded @p seed, with Adam; @p steps optimizer
 * steps of a tiny LM loss taken (so the optimizer state and step are not the initial ones). */
typedef struct {
    tg_ctx *ctx;
    tg_transformer m;
    tg_optim *opt;
    tg_optim_config oc;
} run;

static void run_new(run *r, uint64_t seed, int steps)
{
    tg_transformer_config c = small_config();
    r->ctx = tu_ctx_new();
    tg_ctx_seed(r->ctx, seed);
    ck_assert_int_eq(tg_transformer_init(r->ctx, &r->m, TG_F32, &c), TG_OK);
    r->oc = tg_optim_defaults(TG_OPTIM_ADAM);
    r->opt = tg_optim_new(r->ctx, &r->oc, 0, NULL);
    ck_assert_ptr_nonnull(r->opt);
    if (!steps)
        return;
    tg_tensor *ids = tg_input(r->ctx, TG_I32, TG_DIMS(2, 4), "ids");
    tg_tensor *tgt = tg_input(r->ctx, TG_I32, TG_DIMS(2, 4), "targets");
    tg_tensor *loss = tg_cross_entropy(r->ctx, tg_transformer_forward(r->ctx, &r->m, ids, NULL),
                                       tgt, -1);
    tg_graph *g = tg_graph_new(r->ctx, &loss, 1);
    ck_assert_ptr_nonnull(g);
    int32_t x[8] = {1, 2, 3, 4, 5, 6, 0, 1}, y[8] = {2, 3, 4, 5, 6, 0, 1, 2};
    ck_assert_int_eq(tg_tensor_set_data(ids, x, TG_I32, 8), TG_OK);
    ck_assert_int_eq(tg_tensor_set_data(tgt, y, TG_I32, 8), TG_OK);
    for (int i = 0; i < steps; i++) {
        ck_assert_int_eq(tg_graph_forward(g), TG_OK);
        ck_assert_int_eq(tg_graph_backward(g, loss, NULL), TG_OK);
        ck_assert_int_eq(tg_optim_step(r->opt, 1e-2), TG_OK);
    }
}

/* Every parameter and optimizer state tensor of @p a equals @p b's, bit for bit. */
static bool same_tensors(const run *a, const run *b)
{
    int64_t np = tg_ctx_n_params(a->ctx), ns = tg_optim_n_state(a->opt);
    ck_assert_int_eq(np, tg_ctx_n_params(b->ctx));
    ck_assert_int_eq(ns, tg_optim_n_state(b->opt));
    for (int64_t i = 0; i < np + ns; i++) {
        tg_tensor *x = i < np ? tg_ctx_param(a->ctx, i) : tg_optim_state(a->opt, i - np);
        tg_tensor *y = i < np ? tg_ctx_param(b->ctx, i) : tg_optim_state(b->opt, i - np);
        ck_assert_str_eq(tg_tensor_name(x), tg_tensor_name(y));
        if (memcmp(tg_tensor_data(x), tg_tensor_data(y),
                   sizeof(float) * (size_t)tg_tensor_numel(x)) != 0)
            return false;
    }
    return true;
}

static bool same_rng(const run *a, const run *b)
{
    uint64_t s[4], t[4];
    tg_rng_get_state(a->ctx, s);
    tg_rng_get_state(b->ctx, t);
    return !memcmp(s, t, sizeof s);
}

/* Save a's checkpoint to @p path with the state of a text-style run plus a pairs cursor. */
static tg_train_state save_run(const run *a, const char *path)
{
    tg_train_state s = tg_train_state_init();
    s.steps = 40;
    s.position = 96;
    s.epoch = 1;
    s.batch = 3;
    s.best_val = 1.25;
    s.best_bleu = 7.5;
    tg_transformer_config c = small_config();
    /* the caller places data.position after data.mode; the rest of the state follows */
    const char *keys[3] = {"data.mode", "data.position", "app.option"};
    const char *vals[3] = {"text", NULL, "x y"};
    ck_assert_int_eq(tg_train_checkpoint_save(a->ctx, path, a->opt, &c, TG_F32, &s, 3, keys,
                                              vals, NULL), TG_OK);
    return s;
}

START_TEST(test_save_layout)
{
    char dir[256], path[512];
    tu_mkdtemp(dir, sizeof dir, "train_state");
    tu_path(path, sizeof path, dir, "ck.safetensors");
    run a;
    run_new(&a, 1, 2);
    save_run(&a, path);
    tg_ctx *rc = tu_ctx_new();
    tg_safetensors *st = tg_safetensors_read(rc, path);
    ck_assert_ptr_nonnull(st);
    tg_transformer_config c = small_config();
    tg_meta_kv mk[TG_TRANSFORMER_META_MAX];
    int nm = tg_transformer_meta(&c, TG_F32, mk);
    ck_assert_int_gt(nm, 0);
    const char *want[] = {"data.mode", "data.position", "app.option", "train.steps",
                          "train.best_val", "data.epoch", "data.batch", "train.best_bleu",
                          "optim.step", "rng"};
    int nw = (int)(sizeof want / sizeof want[0]);
    ck_assert_int_eq(tg_safetensors_meta_count(st), 1 + nm + nw);
    ck_assert_str_eq(tg_safetensors_meta_key(st, 0), "format");
    ck_assert_str_eq(tg_safetensors_meta_get(st, "format"), TG_CHECKPOINT_FORMAT);
    for (int i = 0; i < nm; i++) {
        ck_assert_str_eq(tg_safetensors_meta_key(st, 1 + i), mk[i].key);
        ck_assert_str_eq(tg_safetensors_meta_get(st, mk[i].key), mk[i].value);
    }
    for (int i = 0; i < nw; i++)
        ck_assert_str_eq(tg_safetensors_meta_key(st, 1 + nm + i), want[i]);
    ck_assert_str_eq(tg_safetensors_meta_get(st, "data.position"), "96");
    ck_assert_str_eq(tg_safetensors_meta_get(st, "app.option"), "x y");
    ck_assert_str_eq(tg_safetensors_meta_get(st, "train.best_val"), "1.25");
    ck_assert_str_eq(tg_safetensors_meta_get(st, "data.batch"), "3");
    ck_assert_str_eq(tg_safetensors_meta_get(st, "optim.step"), "2");
    /* the state read back */
    tg_train_state r;
    memset(&r, 0, sizeof r);
    ck_assert_int_eq(tg_train_state_read(a.ctx, st, "ck", &r), TG_OK);
    ck_assert_int_eq(r.step, 2);
    ck_assert_int_eq(r.steps, 40);
    ck_assert_int_eq(r.position, 96);
    ck_assert_int_eq(r.epoch, 1);
    ck_assert_int_eq(r.batch, 3);
    ck_assert(r.best_val == 1.25);
    tu_ctx_free(rc);
    tu_ctx_free(a.ctx);
    tu_rm_tree(dir);
}
END_TEST

START_TEST(test_round_trip)
{
    char dir[256], path[512];
    tu_mkdtemp(dir, sizeof dir, "train_state");
    tu_path(path, sizeof path, dir, "ck.safetensors");
    run a, b;
    run_new(&a, 1, 3);
    tg_train_state saved = save_run(&a, path);
    /* the model built again from the file's own config, in another context and seed */
    tg_ctx *rc = tu_ctx_new();
    tg_safetensors *st = tg_safetensors_read(rc, path);
    ck_assert_ptr_nonnull(st);
    tg_transformer_config c;
    tg_dtype dt;
    ck_assert_int_eq(tg_transformer_meta_read(rc, st, "ck", &c, &dt), TG_OK);
    ck_assert_int_eq(dt, TG_F32);
    run_new(&b, 99, 0);
    ck_assert(!same_tensors(&a, &b));
    tg_train_state s = tg_train_state_init();
    ck_assert_int_eq(tg_train_checkpoint_restore(b.ctx, st, "ck", &c, dt, &b.oc, b.opt, &s),
                     TG_OK);
    ck_assert(same_tensors(&a, &b));
    ck_assert(same_rng(&a, &b));
    ck_assert_int_eq(tg_optim_steps(b.opt), 3);
    ck_assert_int_eq(s.step, 3);
    ck_assert_int_eq(s.steps, saved.steps);
    ck_assert_int_eq(s.position, saved.position);
    ck_assert_int_eq(s.epoch, saved.epoch);
    ck_assert_int_eq(s.batch, saved.batch);
    ck_assert(s.best_val == saved.best_val && s.best_bleu == saved.best_bleu);
    /* saved again from the restored run: the same bytes */
    char again[512];
    tu_path(again, sizeof again, dir, "again.safetensors");
    save_run(&b, again);
    size_t n1, n2;
    char *f1 = tu_slurp(path, &n1), *f2 = tu_slurp(again, &n2);
    ck_assert(f1 && f2 && n1 == n2 && !memcmp(f1, f2, n1));
    free(f1);
    free(f2);
    tu_ctx_free(rc);
    tu_ctx_free(a.ctx);
    tu_ctx_free(b.ctx);
    tu_rm_tree(dir);
}
END_TEST

/* A restore of @p path into a fresh run fails with @p status and a message containing @p msg;
 * nothing changed: parameters, optimizer state and step, RNG, the state. */
static void assert_refused(const char *path, const tg_transformer_config *c, tg_status status,
                           const char *msg)
{
    run b, ref;
    run_new(&b, 7, 0);
    run_new(&ref, 7, 0);
    tg_ctx *rc = tu_ctx_new();
    tg_safetensors *st = tg_safetensors_read(rc, path);
    ck_assert_ptr_nonnull(st);
    tg_train_state s = tg_train_state_init(), before = s;
    s.position = 5;
    before.position = 5;
    ck_assert_int_eq(tg_train_checkpoint_restore(b.ctx, st, "ck", c, TG_F32, &b.oc, b.opt, &s),
                     status);
    ck_assert_msg(strstr(tg_ctx_message(b.ctx), msg), "message '%s' lacks '%s'",
                  tg_ctx_message(b.ctx), msg);
    ck_assert(same_tensors(&b, &ref));
    ck_assert(same_rng(&b, &ref));
    ck_assert_int_eq(tg_optim_steps(b.opt), 0);
    ck_assert(!memcmp(&s, &before, sizeof s));
    tu_ctx_free(rc);
    tu_ctx_free(b.ctx);
    tu_ctx_free(ref.ctx);
}

START_TEST(test_restore_refusals)
{
    char dir[256], path[512], bad[512];
    tu_mkdtemp(dir, sizeof dir, "train_state");
    tu_path(path, sizeof path, dir, "ck.safetensors");
    tu_path(bad, sizeof bad, dir, "bad.safetensors");
    run a;
    run_new(&a, 1, 2);
    save_run(&a, path);
    tg_transformer_config c = small_config();
    static const struct {
        const char *key, *value, *msg;
    } cases[] = {
        {"optim.step", "-1", "tg_train_state_read: ck: metadata 'optim.step' is '-1' (expected "
                             "decimal digits, 0 to 9007199254740992)"},
        {"optim.step", NULL, "metadata 'optim.step' is missing"},
        {"optim.step", "02", "metadata 'optim.step' is '02'"},
        {"rng", "0000000000000000000000000000000000000000000000000000000000000000",
         "metadata 'rng' is '00000000000000000000"},
        {"rng", "12", "(expected 64 hex digits, not all zero)"},
        {"rng", NULL, "metadata 'rng' is missing"},
        {"train.steps", "0", "metadata 'train.steps' is '0' (expected decimal digits, 1 to"},
        {"data.position", "x", "metadata 'data.position' is 'x'"},
        {"data.position", "99999999999999999999", "metadata 'data.position' is '9999"},
        {"data.epoch", NULL, "metadata 'data.epoch' is missing ('data.batch' is there"},
        {"data.batch", "2147483648", "metadata 'data.batch' is '2147483648' (expected decimal "
                                     "digits, 0 to 2147483647)"},
        {"train.best_val", "-1", "metadata 'train.best_val' is '-1' (expected a loss >= 0 or "
                                 "inf)"},
        {"train.best_val", "nan", "'train.best_val' is 'nan'"},
        {"train.best_val", "1.5x", "'train.best_val' is '1.5x'"},
        {"train.best_val", " 1", "'train.best_val' is ' 1'"},
        {"train.best_bleu", "101", "metadata 'train.best_bleu' is '101' (expected a BLEU score "
                                   "from 0 to 100)"},
        {"train.best_bleu", "-1", "'train.best_bleu' is '-1'"},
        {"train.best_bleu", "nan", "'train.best_bleu' is 'nan'"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        tu_st_edit e = {.key = cases[i].key, .value = cases[i].value};
        ck_assert(tu_st_rewrite(path, bad, &e));
        assert_refused(bad, &c, TG_ERR_FORMAT, cases[i].msg);
    }
    /* an optimizer tensor with a NaN: tg_checkpoint_check refuses it before anything is built */
    tu_st_edit e = {.poison = "adam.v.tok_emb.weight"};
    tu_st_rewrite(path, bad, &e);
    assert_refused(bad, &c, TG_ERR_FORMAT, "tg_checkpoint_check: optimizer state "
                                           "'adam.v.tok_emb.weight' element 0 is nan");
    /* another config: tg_checkpoint_check names the tensor */
    tg_transformer_config o = c;
    o.n_layers = 2;
    assert_refused(path, &o, TG_ERR_MISMATCH, "tg_checkpoint_check: the file lacks tensor "
                                              "'layers.1.self_attn.in_proj_weight'");
    /* a state without optional keys reads as not written */
    tu_st_edit d = {.key = "train.best_val"};
    tu_st_rewrite(path, bad, &d);
    tg_ctx *rc = tu_ctx_new();
    tg_safetensors *st = tg_safetensors_read(rc, bad);
    tg_train_state s;
    ck_assert_int_eq(tg_train_state_read(rc, st, NULL, &s), TG_OK);
    ck_assert(isinf(s.best_val));
    ck_assert(s.best_bleu == 7.5);
    ck_assert_int_eq(tg_train_state_read(rc, NULL, NULL, &s), TG_ERR_ARG);
    ck_assert_int_eq(tg_train_state_read(rc, st, NULL, NULL), TG_ERR_ARG);
    tu_ctx_free(rc);
    tu_ctx_free(a.ctx);
    tu_rm_tree(dir);
}
END_TEST

/* tg_train_checkpoint_save refuses extra keys the library writes and NULL values that are not
 * a set state key; nothing is written. */
START_TEST(test_save_refusals)
{
    char dir[256], path[512];
    tu_mkdtemp(dir, sizeof dir, "train_state");
    tu_path(path, sizeof path, dir, "ck.safetensors");
    run a;
    run_new(&a, 1, 0);
    tg_transformer_config c = small_config();
    tg_train_state s = tg_train_state_init();
    s.steps = 10;
    static const struct {
        const char *key, *value, *msg;
    } cases[] = {
        {"format", "x", "extra key 'format' is written by the library"},
        {"model.layers", "3", "extra key 'model.layers' is written by the library"},
        {"optim.step", "3", "extra key 'optim.step' is written by the library"},
        {"rng", "3", "extra key 'rng' is written by the library"},
        {"train.steps", "3", "extra key 'train.steps' is written by the library"},
        {"app.x", NULL, "extra entry 0 'app.x' has a NULL value but is not a key of the "
                        "training state"},
        {"data.epoch", NULL, "'data.epoch' has a NULL value but is not a key of the training "
                             "state that is set"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const char *k = cases[i].key, *v = cases[i].value;
        ck_assert_int_eq(tg_train_checkpoint_save(a.ctx, path, a.opt, &c, TG_F32, &s, 1, &k, &v,
                                                  NULL), TG_ERR_ARG);
        ck_assert_msg(strstr(tg_ctx_message(a.ctx), cases[i].msg), "message '%s' lacks '%s'",
                      tg_ctx_message(a.ctx), cases[i].msg);
    }
    const char *k2[2] = {"train.steps", "train.steps"}, *v2[2] = {NULL, NULL};
    ck_assert_int_eq(tg_train_checkpoint_save(a.ctx, path, a.opt, &c, TG_F32, &s, 2, k2, v2,
                                              NULL), TG_ERR_ARG);
    ck_assert(strstr(tg_ctx_message(a.ctx), "(placed twice)"));
    const char *k3[2] = {"app.x", "app.x"}, *v3[2] = {"1", "2"};
    ck_assert_int_eq(tg_train_checkpoint_save(a.ctx, path, a.opt, &c, TG_F32, &s, 2, k3, v3,
                                              NULL), TG_ERR_DUPLICATE);
    tg_train_state bad = s;
    bad.steps = 0;
    ck_assert_int_eq(tg_train_checkpoint_save(a.ctx, path, a.opt, &c, TG_F32, &bad, 0, NULL,
                                              NULL, NULL), TG_ERR_ARG);
    ck_assert_int_eq(tg_train_checkpoint_save(a.ctx, path, a.opt, NULL, TG_F32, &s, 0, NULL,
                                              NULL, NULL), TG_ERR_ARG);
    ck_assert_int_eq(tg_train_checkpoint_save(a.ctx, path, a.opt, &c, TG_F32, NULL, 0, NULL,
                                              NULL, NULL), TG_ERR_ARG);
    struct stat sb;
    ck_assert_int_ne(stat(path, &sb), 0); /* nothing written */
    /* and with no extras at all: format, model.*, the state, optim.step, rng */
    ck_assert_int_eq(tg_train_checkpoint_save(a.ctx, path, a.opt, &c, TG_F32, &s, 0, NULL, NULL,
                                              NULL), TG_OK);
    tg_ctx *rc = tu_ctx_new();
    tg_safetensors *st = tg_safetensors_read(rc, path);
    ck_assert_ptr_nonnull(st);
    int64_t n = tg_safetensors_meta_count(st);
    ck_assert_str_eq(tg_safetensors_meta_key(st, n - 4), "train.steps");
    ck_assert_str_eq(tg_safetensors_meta_key(st, n - 3), "train.best_val");
    ck_assert_str_eq(tg_safetensors_meta_key(st, n - 2), "optim.step");
    ck_assert_str_eq(tg_safetensors_meta_key(st, n - 1), "rng");
    tu_ctx_free(rc);
    tu_ctx_free(a.ctx);
    tu_rm_tree(dir);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("train_state");
    TCase *tc = tcase_create("train_state");
    tcase_add_checked_fixture(tc, NULL, tu_ctx_teardown);
    tcase_set_timeout(tc, 30);
    tcase_add_test(tc, test_state_meta);
    tcase_add_test(tc, test_save_layout);
    tcase_add_test(tc, test_round_trip);
    tcase_add_test(tc, test_restore_refusals);
    tcase_add_test(tc, test_save_refusals);
    suite_add_tcase(s, tc);
    return tu_run(s);
}
