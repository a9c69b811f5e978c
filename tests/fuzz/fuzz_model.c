/*
 * fuzz_model.c - libFuzzer harness for tg_model_load_from / tg_model_load (tgrad_model.h): a
 * checkpoint or export of arbitrary bytes into a ready model.
 *
 * The input is a safetensors file (seeds: checkpoints of `tgrad train` and exports of `tgrad
 * export`). Per input, on a fresh capped, leak-checking context (fuzz_util.h) with
 * tg_ctx_set_memory_limit(LIMIT):
 * 1. tg_safetensors_read_mem; if it parses, tg_model_load_from. A refusal is a documented
 *    status with one clean line naming the call, and the context holds what it held before.
 *    An acceptance gives a consistent model: its parameters are the context's new ones, none
 *    larger than the file's bytes allow (the loader bounds the config by the values the file
 *    holds), the vocabulary maps each byte id back to itself, every id of the vocabulary
 *    decodes and encodes back, and one forward pass (a causal LM or encoder: (1, min(T, 4))
 *    zeros; the encoder-decoder: source and target of that length) in evaluation mode
 *    succeeds. A translation model (data.mode pairs): its tokenizer kind and model bytes are
 *    consistent (bytes: vocabulary 260 and no model; sentencepiece: 1 to 64 MiB of model),
 *    no id stands for a byte, and the forward pass succeeds.
 * 2. The same bytes as a file through tg_model_load (two reads, the first released): the same
 *    outcome (accepted or the same status).
 * 3. Once more with the allocation chosen by the input's hash failing: a clean failure or a
 *    success, never a leak or a crash.
 */
#include "fuzz_util.h"
#include "tgrad_model.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define LIMIT ((size_t)128 << 20)

static const tg_status load_errors[] = {TG_ERR_FORMAT, TG_ERR_MISMATCH, TG_ERR_JSON,
                                        TG_ERR_NOMEM, TG_ERR_ARG, TG_ERR_OVERFLOW, TG_ERR_SHAPE,
                                        TG_ERR_IO, TG_OK};

/* One forward pass of the loaded model; must succeed. */
static void forward_once(tg_ctx *ctx, tg_model *m)
{
    const tg_model_info *info = tg_model_get_info(m);
    int64_t T = info->config.max_seq_len < 4 ? info->config.max_seq_len : 4;
    tg_mark mk = tg_ctx_mark(ctx);
    tg_tensor *ids = tg_input(ctx, TG_I32, TG_DIMS(1, T), "ids"), *y;
    if (info->kind == TG_MODEL_SEQ2SEQ) {
        tg_tensor *src = tg_input(ctx, TG_I32, TG_DIMS(1, T), "src");
        y = tg_transformer_forward_seq2seq(ctx, tg_model_transformer(m), src, ids, NULL, NULL);
    } else {
        y = tg_transformer_forward(ctx, tg_model_transformer(m), ids, NULL);
    }
    tg_graph_opts go = {.no_grad = true};
    tg_graph *g = y ? tg_graph_new_opts(ctx, &y, 1, &go) : NULL;
    /* a graph may exceed the memory limit for a large (accepted) model: NOMEM only */
    if (!g) {
        if (tg_ctx_status(ctx) != TG_ERR_NOMEM && tg_ctx_status(ctx) != TG_ERR_OVERFLOW)
            fz_die(ctx, "forward graph of a loaded model failed");
    } else if (tg_graph_forward(g) != TG_OK) {
        fz_die(ctx, "forward pass of a loaded model failed");
    }
    tg_ctx_rewind(ctx, mk);
    tg_ctx_clear_error(ctx);
}

static void check_model(tg_ctx *ctx, tg_model *m, int64_t params_before, size_t size)
{
    const tg_model_info *info = tg_model_get_info(m);
    if (tg_model_n_params(m) != tg_ctx_n_params(ctx) - params_before)
        fz_die(ctx, "the model's parameters are not the context's new ones");
    double values = 0;
    for (int64_t i = 0; i < tg_model_n_params(m); i++) {
        tg_tensor *p = tg_model_param(m, i);
        if (p != tg_ctx_param(ctx, params_before + i))
            fz_die(ctx, "parameter %lld is not the context's", (long long)i);
        values += (double)tg_tensor_numel(p);
    }
    if (values > (double)size) /* every value came from at least one byte of the file */
        fz_die(ctx, "%g parameter values from a file of %zu bytes", values, size);
    int64_t V = tg_model_vocab_size(m);
    if (info->tokenizer[0]) { /* a translation model: ids are its tokenizer's */
        size_t n = 0;
        const void *bytes = tg_model_tokenizer_bytes(m, &n);
        bool spm = !strcmp(info->tokenizer, "sentencepiece");
        if (V != info->config.vocab_size || V < 4 || V > (1 << 20) ||
            (!spm && (strcmp(info->tokenizer, "bytes") || V != 260)) ||
            info->bos_id != 1 || info->kind != TG_MODEL_SEQ2SEQ ||
            spm != (bytes != NULL) || (spm && (n == 0 || n > TG_TOKENIZER_MAX_MODEL_BYTES)) ||
            tg_model_token_byte(m, 0) != -1 || tg_model_token_byte(m, (int32_t)V - 1) != -1)
            fz_die(ctx, "translation model: tokenizer %s, vocabulary %lld", info->tokenizer,
                   (long long)V);
        forward_once(ctx, m);
        return;
    }
    if (V != info->config.vocab_size || V < 1 || V > 256)
        fz_die(ctx, "vocabulary size %lld", (long long)V);
    for (int32_t id = 0; id < V; id++) {
        int b = tg_model_token_byte(m, id);
        if (b < 0 ? id != info->bos_id : tg_model_byte_token(m, b) != id)
            fz_die(ctx, "id %d and byte %d do not map back", id, b);
        if (b >= 0) {
            char c = (char)b, back;
            int32_t got;
            if (tg_model_encode(m, &c, 1, &got, 1) != 1 || got != id ||
                tg_model_decode(m, &id, 1, &back) != 1 || back != c)
                fz_die(ctx, "id %d does not encode and decode", id);
        }
    }
    forward_once(ctx, m);
}

/* Load through @p path or @p st; returns the status (TG_OK: loaded and checked). */
static tg_status load_one(fz_alloc *a, const uint8_t *data, size_t size, const char *path,
                          uint64_t fail_at)
{
    tg_ctx *ctx = fz_ctx_new(a, FZ_CAP);
    tg_ctx_set_memory_limit(ctx, LIMIT);
    tg_ctx_set_threads(ctx, 1);
    tg_status s = TG_OK;
    tg_safetensors *st = path ? NULL : tg_safetensors_read_mem(ctx, data, size);
    if (!path && !st) {
        fz_ctx_free(ctx, a);
        return TG_ERR_IO; /* not a safetensors file at all: fuzz_safetensors' business */
    }
    size_t before = tg_ctx_bytes(ctx);
    int64_t params_before = tg_ctx_n_params(ctx);
    a->fail_at = fail_at ? a->count + fail_at : 0;
    tg_model *m = path ? tg_model_load(ctx, path) : tg_model_load_from(ctx, st, "<input>");
    a->fail_at = 0;
    if (!m) {
        s = tg_ctx_status(ctx);
        fz_check_failure(ctx, path ? "tg_model_load" : "tg_model_load_from", before,
                         load_errors);
    } else {
        check_model(ctx, m, params_before, size);
    }
    fz_ctx_free(ctx, a);
    return s;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fz_alloc a;
    tg_status mem = load_one(&a, data, size, NULL, 0);
    if (mem == TG_ERR_IO)
        return 0;
    char path[64];
    int fd = fz_file_open(data, size, path, sizeof path);
    if (fd >= 0) {
        tg_status file = load_one(&a, data, size, path, 0);
        if (file != mem)
            fz_die(NULL, "tg_model_load gave %s, tg_model_load_from %s", tg_status_str(file),
                   tg_status_str(mem));
        fz_file_close(fd);
    }
    load_one(&a, data, size, NULL, 1 + fz_hash(data, size) % 64);
    return 0;
}
