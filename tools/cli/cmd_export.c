/*
 * cmd_export.c - `tgrad export --checkpoint CK --out model.safetensors [--force]`: a trained
 * model as a safetensors file PyTorch loads directly.
 *
 * The file holds the model's parameters only (no optimizer state, step or RNG) under the
 * `state_dict` names of the reference model classes, which are the names tgrad gives them.
 * The decoder-only LM and the task encoder (class LM of tools/reference/train_reference.py):
 *   tok_emb.weight (V, D)        pos_emb.weight (T, D)   (learned positions only)
 *   layers.<i>.self_attn.in_proj_weight (3D, D)   .self_attn.in_proj_bias (3D)
 *   layers.<i>.self_attn.out_proj.weight (D, D)   .self_attn.out_proj.bias (D)
 *   layers.<i>.linear1.weight (F, D)  .linear1.bias (F)  .linear2.weight (D, F)  .linear2.bias (D)
 *   layers.<i>.norm1.weight (D)  .norm1.bias (D)  .norm2.weight (D)  .norm2.bias (D)
 *   norm.weight (D)  norm.bias (D)  head.weight (V, D)  head.bias (V)
 * The encoder-decoder (class Seq2Seq of tools/reference/translate_reference.py, an nn.Transformer with
 * the embeddings and the head added): tok_emb.weight, pos_emb.weight as above (shared by
 * source and target), torch.nn.Transformer's own state_dict keys
 *   encoder.layers.<i>.{self_attn.*, linear1.*, linear2.*, norm1.*, norm2.*}  as layers.<i>.*
 *   encoder.norm.weight (D)  encoder.norm.bias (D)
 *   decoder.layers.<i>.{self_attn.*, multihead_attn.* (the same shapes), linear1.*, linear2.*,
 *                       norm1.*, norm2.*, norm3.*}
 *   decoder.norm.weight (D)  decoder.norm.bias (D)
 * and head.weight (V, D), head.bias (V).
 * With tied weights head.weight is written too (a copy of tok_emb.weight), because PyTorch's
 * state_dict of a tied model lists both keys. Values keep the checkpoint's dtype.
 * Metadata (safetensors `__metadata__`, all strings):
 *   format         "tgrad-export-1"
 *   config         JSON object: the keyword arguments of the model class and dtype
 *                  ("float32" | "float64"). LM: vocab_size, max_seq_len, n_layers, d_model,
 *                  n_heads, d_ff, activation, norm_first, pos, causal, tie_weights,
 *                  layer_norm_eps, dropout. Seq2Seq: vocab_size, max_seq_len, n_layers (the
 *                  encoder's), n_decoder_layers, d_model, n_heads, d_ff, activation,
 *                  norm_first, pos, tie_weights, scale_embedding (the checkpoint's
 *                  model.scale_embeddings: token embeddings times sqrt(d_model); absent:
 *                  false), layer_norm_eps, dropout.
 *   vocab          (not for a translation model) JSON array of V entries: element i is the
 *                  byte token id i stands for (text models: the corpus's distinct bytes,
 *                  sorted; built-in tasks: the digits '0'..'9', i.e. 48..57), null for an id
 *                  that stands for no byte (the task encoder-decoder's BOS, id 10)
 *   bos_id         (encoder-decoder only) the id the decoder input starts with: "10" for a
 *                  task, "1" for a translation model (its tokenizer's: unk 0, bos 1, eos 2,
 *                  pad 3)
 *   data           "text", "task:<name>" or "pairs" (a translation model)
 *   tokenizer.kind, tokenizer.model   (translation models) the checkpoint's tokenizer,
 *                  copied verbatim after validation: kind "bytes" (id 4 + b for byte b) or
 *                  "sentencepiece" with the serialized model in base64
 *   step           optimizer steps taken by the checkpoint
 *   tgrad_version  TGRAD_VERSION_STRING of the exporting program
 * Every value read from the checkpoint is validated before anything is written, by
 * ckpt_config_export (tools/cli/ckpt_config.c), exactly as `tgrad train --resume` and `tgrad
 * sample` validate it: every metadata field with the train option table's bounds, each tensor's
 * shape and dtype against the config, and no tensor but parameters and their optimizer state;
 * --out follows the rule of every output (outpath.h): never replaced without --force, a
 * symbolic link to a regular file written through, never a directory or other special file,
 * never the checkpoint itself.
 */
#define _POSIX_C_SOURCE 200809L
#include "ckpt_config.h"
#include "cli.h"
#include "climsg.h"
#include "train_data.h"
#include "tgrad_data.h"
#include "tgrad_io.h"
#include "outpath.h"
#include "train_args.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

/* ---- parse ---------------------------------------------------------------------------------- */
static const cli_option export_opts[] = {
    {.name = "checkpoint", .kind = CLI_PATH, .offset = offsetof(export_args, checkpoint),
     .metavar = "CK", .help = "a checkpoint written by 'tgrad train'", .flags = CLI_REQUIRED},
    {.name = "out", .kind = CLI_PATH, .offset = offsetof(export_args, out),
     .metavar = "FILE", .help = "the safetensors file to write", .flags = CLI_REQUIRED},
    {.name = "force", .kind = CLI_FLAG, .offset = offsetof(export_args, force),
     .help = "replace --out if it exists (a regular file only)"},
    {0},
};

static const cli_command export_cmd = {
    .name = "export",
    .usage = "--checkpoint CK --out FILE [--force]",
    .description =
        "Writes the model of a 'tgrad train' checkpoint as a safetensors file that\n"
        "PyTorch loads with load_state_dict(..., strict=True) into the LM class of\n"
        "tools/reference/train_reference.py (an LM or a task encoder) or the Seq2Seq class of\n"
        "tools/reference/translate_reference.py (an encoder-decoder: torch.nn.Transformer's\n"
        "names encoder.* and decoder.*, plus tok_emb, pos_emb and head): the parameters\n"
        "only (no optimizer state) under their PyTorch state_dict names, with the model\n"
        "config (metadata 'config', JSON: the class's keyword arguments) and the\n"
        "vocabulary (metadata 'vocab', JSON: the byte of each token id, null for BOS;\n"
        "a translation model instead has its tokenizer: tokenizer.kind, and\n"
        "tokenizer.model, the SentencePiece model in base64).\n"
        "tools/reference/load_tgrad.py loads either. See docs/cli.md, 'Exporting to PyTorch'.\n"
        "\n"
        "Exit status: 0; 2 for a usage error (options); 1 for a run-time failure (a\n"
        "file missing, corrupt or unwritable).",
    .opts = export_opts,
};

int export_parse(int argc, char **argv, export_args *a, cli_result *r, char *err, size_t n)
{
    memset(a, 0, sizeof *a);
    int rc = cli_parse(&export_cmd, argc, argv, a, r, err, n);
    if (rc == CLI_OK && !strcmp(a->checkpoint, a->out)) {
        char sh[80];
        snprintf(err, n, "--out '%s' is the checkpoint itself (choose another file)",
                 cli_show(a->out, sh, sizeof sh));
        return CLI_ERROR;
    }
    return rc;
}

void export_free(export_args *a, cli_result *r) { cli_free(&export_cmd, a, r); }


/* ---- run ------------------------------------------------------------------------------------ */
typedef struct {
    int64_t n_tensors, n_values, n_dropped, step;
} export_result;

/* --out: absent, or (with --force) a regular file, or a link to one (written through), that is
 * not the checkpoint (outpath.h). Returns 0, or the exit status with one line in @p err. */
static int check_out(const export_args *a, char *err, size_t n)
{
    bool exists;
    if (!outpath_not_input("--out", a->out, "--checkpoint", a->checkpoint, err, n))
        return 2; /* a usage error, even with --force */
    outpath_status os = outpath_check("--out", a->out, true, &exists, err, n);
    if (os != OUTPATH_OK)
        return (int)os;
    if (exists && !a->force) {
        snprintf(err, n, "--out '%s' exists (pass --force to replace it)", a->out);
        return 2;
    }
    return 0;
}

/* The parameters in state_dict order into *items (allocated; *ps holds their names); a tied
 * head.weight is a copy of tok_emb.weight, written before head.bias as PyTorch's state_dict
 * lists it. Returns the item count, or -1 (out of memory). */
static int64_t export_items(tg_safetensors *st, const tg_transformer_config *mc,
                            export_result *res, tg_param_info **ps_out, tg_io_item **items_out)
{
    int64_t np = tg_transformer_params(mc, NULL, 0), count = tg_safetensors_count(st);
    tg_param_info *ps = *ps_out = calloc((size_t)np, sizeof *ps);
    tg_io_item *items = *items_out = calloc((size_t)np + 1, sizeof *items);
    if (!ps || !items)
        return -1;
    tg_transformer_params(mc, ps, np);
    int64_t k = 0;
    for (int64_t i = 0; i < np; i++) {
        if (mc->tie_weights && !strcmp(ps[i].name, "head.bias"))
            items[k++] = tg_io_item_data(tg_safetensors_find(st, "tok_emb.weight"),
                                         "head.weight");
        tg_tensor *t = tg_safetensors_find(st, ps[i].name); /* present: checked above */
        items[k++] = tg_io_item_data(t, ps[i].name);
        res->n_values += tg_tensor_numel(t);
    }
    res->n_tensors = k;
    res->n_dropped = count - np; /* the rest is optimizer state (checked above) */
    return k;
}

/* The export's "config" metadata: the model's configuration as JSON. */
static void export_config_json(const tg_transformer_config *mc, const train_args *ta,
                               char *config, size_t size)
{
    bool s2s = mc->n_decoder_layers > 0;
    char s2s_keys[128];
    snprintf(s2s_keys, sizeof s2s_keys, ", \"n_decoder_layers\": %" PRId64, mc->n_decoder_layers);
    snprintf(config, size,
             "{\"vocab_size\": %" PRId64 ", \"max_seq_len\": %" PRId64 ", \"n_layers\": %" PRId64
             "%s, \"d_model\": %" PRId64 ", \"n_heads\": %" PRId64 ", \"d_ff\": %" PRId64
             ", \"activation\": \"%s\", \"norm_first\": %s, \"pos\": \"%s\"%s%s"
             ", \"tie_weights\": %s%s%s, \"layer_norm_eps\": %.17g, \"dropout\": %.17g"
             ", \"dtype\": \"%s\"}",
             mc->vocab_size, mc->max_seq_len, mc->n_layers, s2s ? s2s_keys : "",
             mc->layer.d_model, mc->layer.n_heads, mc->layer.d_ff,
             mc->layer.activation == TG_ACT_GELU ? "gelu" : "relu",
             mc->layer.norm_first ? "true" : "false",
             mc->pos == TG_POS_SINUSOIDAL ? "sinusoidal" : "learned",
             s2s ? "" : ", \"causal\": ", s2s ? "" : mc->causal ? "true" : "false",
             mc->tie_weights ? "true" : "false", s2s ? ", \"scale_embedding\": " : "",
             s2s ? (mc->scale_embeddings ? "true" : "false") : "", mc->layer.layer_norm_eps,
             mc->layer.dropout, train_dtype(ta) == TG_F64 ? "float64" : "float32");
}

/* The export's "vocab" metadata: each token's byte, as a JSON array (vjson of 256 * 6 + 8
 * bytes). */
static void export_vocab_json(const ckpt_info *info, char *vjson, size_t size)
{
    size_t w = 0;
    vjson[w++] = '[';
    for (int i = 0; !info->pairs && i < info->vocab_size; i++) {
        const char *sep = i ? ", " : "";
        if (info->text) /* the corpus's bytes */
            w += (size_t)snprintf(vjson + w, size - w, "%s%u", sep, info->rec.vocab[i]);
        else if (i < 10) /* a task: the digits */
            w += (size_t)snprintf(vjson + w, size - w, "%s%u", sep, (unsigned)('0' + i));
        else /* the encoder-decoder's BOS stands for no byte */
            w += (size_t)snprintf(vjson + w, size - w, "%snull", sep);
    }
    snprintf(vjson + w, size - w, "]");
}

/* The metadata, then the file --out with the k items. Returns 0, or 1 with @p err. */
static int export_write(tg_ctx *ctx, const export_args *a, const tg_safetensors *st,
                        const tg_transformer_config *mc, const train_args *ta,
                        const ckpt_info *info, int64_t k, const tg_io_item *items, char *err,
                        size_t n)
{
    bool s2s = mc->n_decoder_layers > 0;
    char config[1024], vjson[256 * 6 + 8], step[32], data[32], bos[16];
    export_config_json(mc, ta, config, sizeof config);
    export_vocab_json(info, vjson, sizeof vjson);
    snprintf(step, sizeof step, "%" PRId64, info->step);
    snprintf(data, sizeof data, "%s%s",
             info->pairs ? "pairs" : info->text ? "text" : "task:",
             info->text || info->pairs ? "" : task_name((task_kind)ta->task));
    snprintf(bos, sizeof bos, "%d", info->pairs ? TG_TOKEN_BOS : SEQ2SEQ_BOS);
    /* a translation model: its tokenizer instead of a byte vocabulary, the checkpoint's
     * tokenizer.kind and tokenizer.model (base64) copied verbatim once they are validated */
    const char *tok_kind = NULL, *tok_model = NULL;
    if (info->pairs) {
        void *mb = NULL;
        size_t msz = 0;
        if (tg_tokenizer_meta_read(ctx, st, &tok_kind, &mb, &msz) != TG_OK) {
            cli_format("--checkpoint", a->checkpoint, ctx, err, n);
            return 1;
        }
        free(mb);
        tok_model = tg_safetensors_meta_get(st, "tokenizer.model");
    }
    const char *keys[9] = {"format", "config", "vocab", "data", "step", "tgrad_version"};
    const char *vals[9] = {"tgrad-export-1", config, vjson, data, step, TGRAD_VERSION_STRING};
    int nm = 6;
    if (info->pairs) { /* no byte vocabulary: drop "vocab" */
        memmove(keys + 2, keys + 3, 3 * sizeof *keys);
        memmove(vals + 2, vals + 3, 3 * sizeof *vals);
        nm = 5;
    }
    if (s2s) {
        keys[nm] = "bos_id";
        vals[nm++] = bos;
    }
    if (tok_kind) {
        keys[nm] = "tokenizer.kind";
        vals[nm++] = tok_kind;
    }
    if (tok_model) {
        keys[nm] = "tokenizer.model";
        vals[nm++] = tok_model;
    }
    if (tg_safetensors_write_items(ctx, a->out, k, items, nm, keys, vals, NULL) != TG_OK) {
        cli_format("--out", a->out, ctx, err, n);
        return 1;
    }
    return 0;
}

static int export_exec(const export_args *a, export_result *res, char *err, size_t n)
{
    memset(res, 0, sizeof *res);
    char e[1200];
    int co = check_out(a, err, n);
    if (co)
        return co;
    if (!cli_regular_file(a->checkpoint, e, sizeof e)) {
        snprintf(err, n, "--checkpoint %s", e);
        return 1;
    }
    tg_ctx *ctx = tg_ctx_new();
    if (!ctx) {
        snprintf(err, n, "out of memory");
        return 1;
    }
    int rc = 1;
    tg_param_info *ps = NULL;
    tg_io_item *items = NULL;
    tg_safetensors *st = tg_safetensors_read(ctx, a->checkpoint);
    if (!st) {
        cli_format("--checkpoint", a->checkpoint, ctx, err, n);
        goto done;
    }
    /* every field and tensor validated exactly as for train --resume and sample */
    train_args ta;
    train_defaults(&ta);
    ckpt_info info;
    tg_transformer_config mc;
    if (!ckpt_config_export(st, &ta, &info, &mc, e, sizeof e)) {
        snprintf(err, n, "--checkpoint '%s': %s", a->checkpoint, e);
        if (info.usage)
            rc = 2; /* a checkpoint export does not take (seq2seq): a usage error */
        goto done;
    }
    int64_t k = export_items(st, &mc, res, &ps, &items);
    if (k < 0) {
        snprintf(err, n, "out of memory");
        goto done;
    }
    res->step = info.step;
    rc = export_write(ctx, a, st, &mc, &ta, &info, k, items, err, n);
done:
    free(ps);
    free(items);
    tg_ctx_free(ctx);
    return rc;
}

/* ---- report --------------------------------------------------------------------------------- */
int cmd_export(int argc, char **argv)
{
    export_args a;
    cli_result r;
    char err[1600];
    int ex = cli_parse_exit(export_parse(argc, argv, &a, &r, err, sizeof err), &export_cmd,
                            err);
    if (ex >= 0) {
        export_free(&a, &r);
        return ex;
    }
    export_result res;
    int rc = export_exec(&a, &res, err, sizeof err);
    if (rc)
        fprintf(stderr, "tgrad export: %s\n", err);
    else
        printf("exported %" PRId64 " tensors (%" PRId64 " parameters, step %" PRId64 ") to '%s'; "
               "%" PRId64 " optimizer-state tensors left out\n", res.n_tensors, res.n_values,
               res.step, a.out, res.n_dropped);
    export_free(&a, &r);
    return rc;
}
