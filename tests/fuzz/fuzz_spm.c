/*
 * fuzz_spm.c - libFuzzer harness for tg_spm_validate / tg_spm_load / tg_spm_load_file
 * (tgrad_spm.h): SentencePiece model bytes as a checkpoint stores them, i.e. untrusted.
 * Built only with the meson feature `sentencepiece` (the libFuzzer binary also needs clang++).
 *
 * Seeds: small real models (unigram and BPE, with and without the nmt_nfkc table, byte
 * fallback, a user-defined symbol). Per input, on a fresh capped, leak-checking context:
 * 1. tg_spm_validate, then tg_spm_load. A refusal is a documented status with one clean line
 *    naming the call, the context unchanged; a validation failure must make the load fail
 *    with the same status.
 * 2. An accepted model: the stored bytes equal the input, the special ids are in range with
 *    bos and eos present, a few texts (ASCII, umlauts, digits, CJK, spaces, empty) encode to
 *    ids in range and decode to UTF-8, every id (up to 2048) decodes alone and all together,
 *    and each decoded text encodes again.
 * 3. The same bytes as a file through tg_spm_load_file: the same outcome.
 * SentencePiece itself is not instrumented (Debian's library), so an out-of-bounds read in it
 * shows only as a crash, a CHECK failure as the process exiting (libFuzzer reports both).
 */
#include "fuzz_util.h"
#include "tgrad_spm.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const tg_status load_errors[] = {TG_ERR_FORMAT, TG_ERR_UNSUPPORTED, TG_ERR_HEADER_SIZE,
                                        TG_ERR_NOMEM, TG_ERR_ARG, TG_ERR_IO, TG_OK};

static const char *texts[] = {
    "Grüße aus Köln, schöne Äpfel über die Straße.",
    "the girl plays football in the garden 12345",
    "  leading and  double  spaces ",
    "\xe4\xb8\x96\xe7\x95\x8c \xf0\x9f\x99\x82 \xef\xbd\xa1", /* 世界 🙂 and a halfwidth char */
    "",
};

static void check_model(tg_ctx *ctx, tg_tokenizer *t, const uint8_t *data, size_t size)
{
    size_t n;
    const void *m = tg_tokenizer_model(t, &n);
    if (n != size || (size && memcmp(m, data, size) != 0))
        fz_die(ctx, "the stored model is not the input");
    int64_t V = tg_tokenizer_vocab_size(t);
    if (V < 1 || V > TG_SPM_MAX_VOCAB)
        fz_die(ctx, "vocabulary %lld", (long long)V);
    tg_token_ids sp = tg_tokenizer_special(t);
    if (sp.bos < 0 || sp.eos < 0 || sp.bos >= V || sp.eos >= V || sp.unk >= V || sp.pad >= V ||
        sp.unk < -1 || sp.pad < -1)
        fz_die(ctx, "special ids %d %d %d %d of %lld", sp.unk, sp.bos, sp.eos, sp.pad,
               (long long)V);
    int32_t ids[512];
    static char out[1 << 16];
    for (size_t i = 0; i < sizeof texts / sizeof *texts; i++) {
        int64_t k = tg_tokenizer_encode(t, texts[i], strlen(texts[i]), ids, 512);
        if (k < 0) { /* SentencePiece may refuse a text with a status: one clean line */
            fz_check_failure(ctx, "tg_tokenizer_encode", tg_ctx_bytes(ctx), load_errors);
            tg_ctx_clear_error(ctx);
            continue;
        }
        int64_t len = tg_tokenizer_decode(t, ids, k < 512 ? k : 512, out, sizeof out);
        if (len < 0) {
            fz_check_failure(ctx, "tg_tokenizer_decode", tg_ctx_bytes(ctx), load_errors);
            tg_ctx_clear_error(ctx);
        }
    }
    int64_t all = V < 2048 ? V : 2048;
    int32_t *every = malloc((size_t)all * sizeof *every);
    if (!every)
        return;
    for (int64_t id = 0; id < all; id++) {
        every[id] = (int32_t)id;
        int64_t len = tg_tokenizer_decode(t, every + id, 1, out, sizeof out);
        if (len < 0) {
            fz_check_failure(ctx, "tg_tokenizer_decode", tg_ctx_bytes(ctx), load_errors);
            tg_ctx_clear_error(ctx);
        } else if ((size_t)len < sizeof out &&
                   tg_tokenizer_encode(t, out, (size_t)len, ids, 512) < 0) {
            fz_check_failure(ctx, "tg_tokenizer_encode", tg_ctx_bytes(ctx), load_errors);
            tg_ctx_clear_error(ctx);
        }
    }
    if (tg_tokenizer_decode(t, every, all, out, sizeof out) < 0) {
        fz_check_failure(ctx, "tg_tokenizer_decode", tg_ctx_bytes(ctx), load_errors);
        tg_ctx_clear_error(ctx);
    }
    free(every);
}

/* Load from memory or from @p path; returns the status (TG_OK: loaded and checked). */
static tg_status load_one(fz_alloc *a, const uint8_t *data, size_t size, const char *path)
{
    tg_ctx *ctx = fz_ctx_new(a, FZ_CAP);
    size_t before = tg_ctx_bytes(ctx);
    tg_status v = path ? TG_OK : tg_spm_validate(ctx, data, size);
    if (v != TG_OK) {
        fz_check_failure(ctx, "tg_spm_validate", before, load_errors);
        tg_ctx_clear_error(ctx);
    }
    tg_tokenizer *t = path ? tg_spm_load_file(ctx, path) : tg_spm_load(ctx, data, size);
    tg_status s = TG_OK;
    if (!t) {
        s = tg_ctx_status(ctx);
        fz_check_failure(ctx, path ? "tg_spm_load_file" : "tg_spm_load", before, load_errors);
        if (v != TG_OK && s != v)
            fz_die(ctx, "tg_spm_validate gave %s, tg_spm_load %s", tg_status_str(v),
                   tg_status_str(s));
    } else {
        if (v != TG_OK)
            fz_die(ctx, "tg_spm_validate refused (%s) what tg_spm_load accepted",
                   tg_status_str(v));
        check_model(ctx, t, data, size);
        tg_tokenizer_free(t);
    }
    fz_ctx_free(ctx, a);
    return s;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fz_alloc a;
    tg_status mem = load_one(&a, data, size, NULL);
    char path[64];
    int fd = fz_file_open(data, size, path, sizeof path);
    if (fd >= 0) {
        tg_status file = load_one(&a, data, size, path);
        if (file != mem)
            fz_die(NULL, "tg_spm_load_file gave %s, tg_spm_load %s", tg_status_str(file),
                   tg_status_str(mem));
        fz_file_close(fd);
    }
    return 0;
}
