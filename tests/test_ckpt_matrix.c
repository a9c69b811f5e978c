#define _POSIX_C_SOURCE 200809L
/*
 * test_ckpt_matrix.c - every `tgrad` command that takes a checkpoint, on every kind of
 * checkpoint and on the export of each: a row per command x kind x file.
 *
 * Kinds, each trained here for two steps on a tiny model: a text LM, a built-in task's
 * encoder, the seq2seq task (digits), a translation model with a SentencePiece tokenizer of
 * 2000 pieces trained here (as the quick start's, far more ids than a byte has: a table sized
 * for 256 overruns its whole frame, which ASan reports; only with the feature), one with the
 * byte tokenizer (260 ids) and a text LM trained with bf16 products. Files:
 * the checkpoint, and its `tgrad export`. Commands: train --resume, sample (plain, --source,
 * --prompt), translate, info, export, run transformer.
 *
 * Every cell must end in a sane exit: 0, or 1 / 2 with exactly one line on stderr that starts
 * with "tgrad " (never a signal, a sanitizer report or a hang); each row also states which of
 * the three it is and what the refusal says, so a wrong verdict (a crash, advice that does not
 * fit the file, a refusal that should be a success) is caught. Run under the ASan setup
 * (`meson test -C build-asan --setup=asan ckpt_matrix`), the tgrad processes are instrumented
 * too, so an out-of-bounds access in any cell aborts it (a signal: the cell fails).
 */
#include "testutil.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define RUN_TIMEOUT 120

static char dir[256];

/* ---- the kinds ---------------------------------------------------------------------------- */
#define TINY "--d-model 16 --heads 2 --d-ff 32 --layers 1 --threads 1 --quiet --steps 2 "
#define PAIRS_DATA "--pairs train.tsv --valid valid.tsv"
#define BIG_DATA "--pairs big.tsv --valid bigv.tsv"
#define DIGITS6 "123456"
#define DIGITS16 "1234567890123456"
#define DIGITS40 "1234567890123456789012345678901234567890"

enum { K_TEXT, K_TASK, K_S2S, K_SPM, K_BYTES, K_BF16, N_KINDS };

typedef struct {
    const char *name;  /* file stem: NAME.ckpt, NAME.st (its export) */
    const char *train; /* what trains it (after "train DATA ") */
    const char *data;  /* the data options a resume needs */
    const char *source; /* --source: model.seq_len digits */
} kind;

static const kind kinds[N_KINDS] = {
    {"text", TINY "--seq-len 16 --batch 4", "--text corpus.txt", DIGITS16},
    {"task", TINY "--seq-len 6 --batch 4", "--task reverse --target-acc 0", DIGITS6},
    {"s2s", TINY "--arch seq2seq --seq-len 6 --batch 4", "--task reverse --target-acc 0",
     DIGITS6},
    {"spm", TINY "--vocab-size 2000 --seq-len 40 --batch-tokens 200", BIG_DATA, DIGITS40},
    {"bytes", TINY "--tokenizer bytes --seq-len 40 --batch-tokens 200", PAIRS_DATA, DIGITS40},
    {"bf16", TINY "--seq-len 16 --batch 4 --precision bf16", "--text corpus.txt", DIGITS16},
};

static bool kind_available(int k)
{
#ifdef TG_HAVE_SPM
    (void)k;
    return true;
#else
    return k != K_SPM;
#endif
}

/* ---- the commands ------------------------------------------------------------------------- */
enum { C_RESUME, C_SAMPLE, C_SOURCE, C_PROMPT, C_TRANSLATE, C_INFO, C_EXPORT, C_RUN, N_CMDS };

/* %1$s: the file, %2$s: the kind's data options, %3$s: as many digits as its model.seq_len
 * (what the advice for a seq2seq model asks for; a translation model once took them and
 * overran a 256-entry table with its 260 or more ids) */
static const char *const cmds[N_CMDS] = {
    "train %2$s --resume %1$s --steps 3 --checkpoint resumed.ckpt --force --quiet --threads 1",
    "sample --checkpoint %1$s --tokens 4",
    "sample --checkpoint %1$s --source %3$s",
    "sample --checkpoint %1$s --prompt 'the '",
    "translate --checkpoint %1$s in.txt",
    "info %1$s",
    "export --checkpoint %1$s --out exported.safetensors --force",
    "run transformer --weights %1$s --src src.npy --tgt tgt.npy --out logits.npy --force",
};

/* What a cell must do: exit 0, or exit 1 / 2 with a line containing the needle. */
typedef struct {
    int rc;
    const char *needle;
} want;

#define OK {0, NULL}
#define REFUSE(rc, needle) {rc, needle}
#define NOT_CKPT REFUSE(1, "not a tgrad checkpoint")

/* [command][kind] for the checkpoint */
static const want want_ckpt[N_CMDS][N_KINDS] = {
    /* text, task, seq2seq, spm, bytes, bf16 */
    [C_RESUME] = {OK, OK, OK, OK, OK, OK},
    [C_SAMPLE] = {OK, REFUSE(2, "nothing to sample"), REFUSE(2, "give --source DIGITS"),
                  REFUSE(2, "tgrad translate"), REFUSE(2, "tgrad translate"), OK},
    [C_SOURCE] = {REFUSE(2, "not a seq2seq checkpoint"), REFUSE(2, "nothing to sample"), OK,
                  REFUSE(2, "tgrad translate"), REFUSE(2, "tgrad translate"),
                  REFUSE(2, "not a seq2seq checkpoint")},
    [C_PROMPT] = {OK, REFUSE(2, "nothing to sample"), REFUSE(2, "not --prompt"),
                  REFUSE(2, "tgrad translate"), REFUSE(2, "tgrad translate"), OK},
    [C_TRANSLATE] = {REFUSE(2, "translation"), REFUSE(2, "translation"),
                     REFUSE(2, "translation"), OK, OK, REFUSE(2, "translation")},
    [C_INFO] = {OK, OK, OK, OK, OK, OK},
    [C_EXPORT] = {OK, OK, OK, OK, OK, OK},
    [C_RUN] = {REFUSE(2, "takes its export"), REFUSE(2, "takes its export"),
               REFUSE(2, "takes its export"), REFUSE(2, "takes its export"),
               REFUSE(2, "takes its export"), REFUSE(2, "takes its export")},
};

/* [command][kind] for its export */
static const want want_export[N_CMDS][N_KINDS] = {
    [C_RESUME] = {NOT_CKPT, NOT_CKPT, NOT_CKPT, NOT_CKPT, NOT_CKPT, NOT_CKPT},
    [C_SAMPLE] = {OK, REFUSE(2, "nothing to sample"), REFUSE(2, "give --source DIGITS"),
                  REFUSE(2, "tgrad translate"), REFUSE(2, "tgrad translate"), OK},
    [C_SOURCE] = {REFUSE(2, "not a seq2seq checkpoint"), REFUSE(2, "nothing to sample"), OK,
                  REFUSE(2, "tgrad translate"), REFUSE(2, "tgrad translate"),
                  REFUSE(2, "not a seq2seq checkpoint")},
    [C_PROMPT] = {OK, REFUSE(2, "nothing to sample"), REFUSE(2, "not --prompt"),
                  REFUSE(2, "tgrad translate"), REFUSE(2, "tgrad translate"), OK},
    [C_TRANSLATE] = {REFUSE(2, "translation"), REFUSE(2, "translation"),
                     REFUSE(2, "translation"), OK, OK, REFUSE(2, "translation")},
    [C_INFO] = {OK, OK, OK, OK, OK, OK},
    [C_EXPORT] = {NOT_CKPT, NOT_CKPT, NOT_CKPT, NOT_CKPT, NOT_CKPT, NOT_CKPT},
    [C_RUN] = {REFUSE(2, "encoder-decoder"), REFUSE(2, "encoder-decoder"), OK, OK, OK,
               REFUSE(2, "encoder-decoder")},
};

/* ---- setup: the data, the checkpoints and their exports, made once ----------------------- */
static void copy_fixture(const char *name)
{
    char p[512];
    snprintf(p, sizeof p, "%s/%s", TG_FIXTURES, name);
    char *text = tu_slurp(p, NULL);
    ck_assert_msg(text != NULL, "cannot read %s", p);
    tu_write_file(dir, name + strlen("export_pairs_"), text); /* train.tsv, valid.tsv */
    free(text);
}

/* n pairs of made-up words (3-8 letters): enough distinct text for 2000 SentencePiece pieces */
static void write_big_pairs(const char *name, int n, uint64_t seed)
{
    static const char al[] = "abcdefghijklmnoprstuvwyz";
    size_t cap = (size_t)n * 120 + 1;
    char *buf = malloc(cap), *p = buf;
    ck_assert_ptr_nonnull(buf);
    for (int i = 0; i < n; i++)
        for (int side = 0; side < 2; side++)
            for (int w = 0; w < 5; w++) {
                seed = seed * 6364136223846793005ULL + 1442695040888963407ULL;
                int len = 3 + (int)((seed >> 33) % 6);
                for (int c = 0; c < len; c++) {
                    seed = seed * 6364136223846793005ULL + 1442695040888963407ULL;
                    *p++ = al[(seed >> 33) % (sizeof al - 1)];
                }
                p += sprintf(p, "%s", w < 4 ? " " : side ? ".\n" : ".\t");
            }
    *p = '\0';
    tu_write_file(dir, name, buf);
    free(buf);
}

static void run_ok(const char *args)
{
    int rc = tu_run_tgrad(dir, args, RUN_TIMEOUT, NULL);
    char *err = tu_slurp_in(dir, "err.txt", NULL);
    ck_assert_msg(rc == 0, "setup: tgrad %s: exit %d: %s", args, rc, err ? err : "");
    free(err);
}

static void setup(void)
{
    tu_mkdtemp(dir, sizeof dir, "ckpt_matrix");
    tu_write_corpus(dir, "corpus.txt", 600);
    copy_fixture("export_pairs_train.tsv");
    copy_fixture("export_pairs_valid.tsv");
    write_big_pairs("big.tsv", 1500, 7);
    write_big_pairs("bigv.tsv", 20, 11);
    tu_write_file(dir, "in.txt", "the cat sleeps.\n");
    /* ids of an encoder-decoder: src (1, 6), tgt (1, 4), within every kind's vocabulary */
    const int32_t src[6] = {1, 2, 3, 4, 5, 6}, tgt[4] = {1, 7, 8, 9};
    char p[512];
    tu_write_npy_raw(tu_path(p, sizeof p, dir, "src.npy"), "<i4", "(1, 6)", src, sizeof src);
    tu_write_npy_raw(tu_path(p, sizeof p, dir, "tgt.npy"), "<i4", "(1, 4)", tgt, sizeof tgt);
    for (int k = 0; k < N_KINDS; k++) {
        if (!kind_available(k)) {
            fprintf(stderr, "ckpt_matrix: the '%s' kind is skipped: tgrad is built without "
                    "SentencePiece\n", kinds[k].name);
            continue;
        }
        char args[1024];
        snprintf(args, sizeof args, "train %s %s --checkpoint %s.ckpt", kinds[k].data,
                 kinds[k].train, kinds[k].name);
        run_ok(args);
        snprintf(args, sizeof args, "export --checkpoint %s.ckpt --out %s.st", kinds[k].name,
                 kinds[k].name);
        run_ok(args);
    }
}

static void teardown(void)
{
    if (!getenv("TU_KEEP"))
        tu_rm_tree(dir);
}

/* ---- a cell --------------------------------------------------------------------------------- */
static void cell(int c, int k, bool exported)
{
    if (!kind_available(k))
        return; /* (said once, in setup) */
    char file[64], args[1024];
    snprintf(file, sizeof file, "%s.%s", kinds[k].name, exported ? "st" : "ckpt");
    snprintf(args, sizeof args, cmds[c], file, kinds[k].data, kinds[k].source);
    want w = (exported ? want_export : want_ckpt)[c][k];
    int rc = tu_run_tgrad(dir, args, RUN_TIMEOUT, NULL);
    char *err = tu_slurp_in(dir, "err.txt", NULL);
    ck_assert_ptr_nonnull(err);
    ck_assert_msg(rc != TU_TIMED_OUT, "tgrad %s: hung (killed after %d s)", args, RUN_TIMEOUT);
    ck_assert_msg(rc >= 0, "tgrad %s: killed by signal %d: %s", args, -rc, err);
    ck_assert_msg(rc <= 2, "tgrad %s: exit %d (want 0, 1 or 2): %s", args, rc, err);
    ck_assert_msg(!strstr(err, "Sanitizer") && !strstr(err, "runtime error"),
                  "tgrad %s: a sanitizer report: %s", args, err);
    ck_assert_msg(rc == w.rc, "tgrad %s: exit %d, want %d: %s", args, rc, w.rc, err);
    if (rc != 0) {
        size_t n = strlen(err);
        ck_assert_msg(tu_count_lines(err) == 1 && n > 0 && err[n - 1] == '\n' &&
                          !strncmp(err, "tgrad ", 6),
                      "tgrad %s: the refusal is not one line starting with 'tgrad ': '%s'", args,
                      err);
        ck_assert_msg(!w.needle || strstr(err, w.needle), "tgrad %s: '%s' lacks '%s'", args,
                      err, w.needle);
    }
    free(err);
}

/* _i = (command * N_KINDS + kind) * 2 + exported */
START_TEST(test_cell)
{
    int exported = _i % 2, k = (_i / 2) % N_KINDS, c = _i / 2 / N_KINDS;
    cell(c, k, exported);
}
END_TEST

static Suite *suite(void)
{
    Suite *s = suite_create("ckpt_matrix");
    TCase *tc = tcase_create("matrix");
    tcase_add_unchecked_fixture(tc, setup, teardown);
    tcase_set_timeout(tc, 300);
    tcase_add_loop_test(tc, test_cell, 0, N_CMDS * N_KINDS * 2);
    suite_add_tcase(s, tc);
    return s;
}

int main(void) { return tu_run(suite()); }
