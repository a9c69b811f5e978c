/*
 * cmd_run.c - `tgrad run MODULE`: one module on .npy inputs, forward and optional backward.
 *
 *   tgrad run sdpa    --q Q.npy --k K.npy --v V.npy [--mask M.npy] [--causal] [--attn-out A.npy]
 *   tgrad run mha     --weights W.safetensors --heads H (--x X.npy | --q Q.npy --k K.npy --v V.npy)
 *                     [--attn-mask M.npy] [--key-padding-mask P.npy] [--causal]
 *   tgrad run ffn     --weights W.safetensors --x X.npy [--activation relu|gelu]
 *   tgrad run encoder --weights W.safetensors --heads H --x X.npy [--norm-first] [--eps E]
 *                     [--activation relu|gelu] [--key-padding-mask P.npy] [--causal]
 *                     [--layers N]    (nn.TransformerEncoder: layers.{i}.*, norm.* if present)
 *   tgrad run decoder --weights W --heads H --x TGT.npy --memory MEM.npy [--layers N]
 *                     [--causal] [--tgt-mask M.npy] [--memory-mask M.npy]
 *                     [--tgt-key-padding-mask P.npy] [--memory-key-padding-mask P.npy]
 *                     [--norm-first] [--eps E] [--activation relu|gelu]
 *   tgrad run transformer --weights W --heads H --src SRC.npy --tgt TGT.npy
 *                     --encoder-layers N --decoder-layers M [--causal]
 *                     [--src-key-padding-mask P] [--tgt-key-padding-mask P]
 *                     [--memory-key-padding-mask P] [--norm-first] [--eps E] [--activation A]
 *   tgrad run transformer --weights EXPORT --src SRC_IDS.npy --tgt TGT_IDS.npy
 *                     [--src-key-padding-mask P] [--tgt-key-padding-mask P]
 *                     (a `tgrad export` of an encoder-decoder, run whole: ids in, logits out)
 *   every module:     --dtype f32|f64  --out O.npy  [--grad-out dO.npy --grads G.safetensors]
 *                     [--dot G.dot] [--unfused] [--par-report]
 *
 * One option table per module. Masks follow tgrad_nn.h's one convention, converted here at the
 * boundary: a bool .npy (|b1) is TG_MASK_BLOCK (true = blocked, as PyTorch's bool masks); an
 * integer .npy (|u1, <i4, <i8, ...) must hold only 0 and 1 and is read the same way (1 =
 * blocked, as PyTorch's uint8 masks were); a float .npy is additive (added to the scores, as
 * PyTorch's float attn_mask). A key padding mask is bool or 0/1 integer (true/1 = padding).
 * Gradients of the inputs are saved under the options' names: x, q, k, v, memory, src, tgt.
 * Every error is one line on stderr (exit status 2 for the command line, 1 for the files).
 */
#include "cli.h"
#include "climsg.h"
#include "outpath.h"
#include "tgrad_io.h"
#include "tgrad_model.h"
#include "tgrad_nn.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- parse: one table per module ------------------------------------------------------------ */
#define OPT_PATH(nm, field, mv, hp, fl)                                                      \
    {.name = nm, .kind = CLI_PATH, .offset = offsetof(run_args, field), .metavar = mv,       \
     .help = hp, .flags = fl}
#define OPT_Q(fl) OPT_PATH("q", q, "Q.npy", "queries (..., T_q, d)", fl)
#define OPT_K(fl) OPT_PATH("k", k, "K.npy", "keys (..., T_k, d)", fl)
#define OPT_V(fl) OPT_PATH("v", v, "V.npy", "values (..., T_k, d_v)", fl)
#define OPT_WEIGHTS                                                                          \
    OPT_PATH("weights", weights, "W.safetensors", "parameters under PyTorch state_dict names", \
             CLI_REQUIRED)
#define OPT_HEADS                                                                            \
    {.name = "heads", .kind = CLI_INT, .offset = offsetof(run_args, heads), .metavar = "H",  \
     .help = "number of heads (must divide d_model)", .imin = 1, .imax = CLI_MAX_HEADS,      \
     .flags = CLI_REQUIRED}
#define OPT_CAUSAL                                                                           \
    {.name = "causal", .kind = CLI_FLAG, .offset = offsetof(run_args, causal),               \
     .help = "add the look-ahead mask (key j > query i blocked)"}
#define OPT_KPM                                                                              \
    OPT_PATH("key-padding-mask", kpm, "P.npy",                                               \
             "bool or 0/1 integer (B, T_k), true/1 = padding (ignored)", 0)
#define OPT_ACT                                                                              \
    {.name = "activation", .kind = CLI_CHOICE, .offset = offsetof(run_args, activation),     \
     .choices = "relu|gelu", .help = "activation of the feed-forward network (relu)"}
#define OPT_COMMON                                                                           \
    {.name = "dtype", .kind = CLI_CHOICE, .offset = offsetof(run_args, dtype),               \
     .choices = "f32|f64", .help = "compute dtype; inputs are converted (f32)",             \
     .group = "every module:"},                                                              \
        {.name = "precision", .kind = CLI_CHOICE, .offset = offsetof(run_args, precision),   \
         .choices = "f32|bf16", .help = "compute precision of the matrix products: f32, or " \
                                        "bf16 operands with f32 accumulation (f32)"},        \
        OPT_PATH("out", out, "O.npy", "write the output here", 0),                           \
        OPT_PATH("grad-out", grad_out, "dO.npy",                                             \
                 "upstream gradient (shape of the output): run backward", 0),                \
        OPT_PATH("grads", grads, "G.safetensors",                                            \
                 "with --grad-out: every parameter's and input's gradient", 0),              \
        OPT_PATH("dot", dot, "G.dot",                                                        \
                 "write the graph as Graphviz DOT (backward edges with --grad-out)", 0),     \
        {.name = "force", .kind = CLI_FLAG, .offset = offsetof(run_args, force),             \
         .help = "replace output files that exist"},                                         \
        {.name = "unfused", .kind = CLI_FLAG, .offset = offsetof(run_args, unfused),         \
         .help = "build the unfused graph of elementary ops (matmul, softmax, ...) instead of " \
                 "fused kernels (flash attention); same results to rounding"},                 \
        {.name = "par-report", .kind = CLI_FLAG, .offset = offsetof(run_args, par_report),   \
         .help = "after the run, list the graph's parallel loops on stdout: the node that ran " \
                 "each, its threads and its governor (tg_graph_par_site)"}

static const cli_option sdpa_opts[] = {
    OPT_Q(CLI_REQUIRED), OPT_K(CLI_REQUIRED), OPT_V(CLI_REQUIRED),
    OPT_PATH("mask", mask, "M.npy",
             "attention mask: bool or 0/1 integer (true/1 = blocked) or float (added)", 0),
    OPT_CAUSAL,
    OPT_PATH("attn-out", attn_out, "A.npy", "write the attention weights (..., T_q, T_k)", 0),
    OPT_COMMON, {0},
};

static const cli_option mha_opts[] = {
    OPT_WEIGHTS, OPT_HEADS,
    OPT_PATH("x", x, "X.npy", "self-attention input (B, T, d_model)", 0),
    OPT_Q(0), OPT_K(0), OPT_V(0),
    OPT_PATH("attn-mask", attn_mask, "M.npy",
             "(T_q, T_k) or (B, T_q, T_k): bool or 0/1 integer (true/1 = blocked) or float "
             "(added)", 0),
    OPT_KPM, OPT_CAUSAL, OPT_COMMON, {0},
};

static const cli_option ffn_opts[] = {
    OPT_WEIGHTS,
    OPT_PATH("x", x, "X.npy", "input (..., d_model)", CLI_REQUIRED),
    OPT_ACT, OPT_COMMON, {0},
};

#define OPT_LAYER_COMMON                                                                     \
    {.name = "norm-first", .kind = CLI_FLAG, .offset = offsetof(run_args, norm_first),       \
     .help = "pre-norm (layer norm before each sublayer); default post-norm"},               \
    {.name = "eps", .kind = CLI_NUM, .offset = offsetof(run_args, eps), .metavar = "E",      \
     .help = "layer-norm eps (1e-5)", .fmin = 0, .fmax = 1},                                 \
    OPT_ACT
#define OPT_INT(nm, field, mv, hp, fl)                                                       \
    {.name = nm, .kind = CLI_INT, .offset = offsetof(run_args, field), .metavar = mv,        \
     .help = hp, .imin = 1, .imax = CLI_MAX_LAYERS, .flags = fl}
#define OPT_MASK(nm, field, hp) OPT_PATH(nm, field, "M.npy", hp, 0)
#define OPT_PAD(nm, field, hp) OPT_PATH(nm, field, "P.npy", hp, 0)

static const cli_option encoder_opts[] = {
    OPT_WEIGHTS, OPT_HEADS,
    OPT_PATH("x", x, "X.npy", "input (B, T, d_model)", CLI_REQUIRED),
    OPT_LAYER_COMMON, OPT_KPM, OPT_CAUSAL,
    OPT_INT("layers", layers, "N",
            "a stack of N layers (nn.TransformerEncoder): weights layers.{i}.*, and the final "
            "norm.* when the file has it", 0),
    OPT_COMMON, {0},
};

static const cli_option decoder_opts[] = {
    OPT_WEIGHTS, OPT_HEADS,
    OPT_PATH("x", x, "TGT.npy", "the target (B, T, d_model)", CLI_REQUIRED),
    OPT_PATH("memory", memory, "MEM.npy", "the encoder output (B, S, d_model)", CLI_REQUIRED),
    OPT_LAYER_COMMON,
    {.name = "causal", .kind = CLI_FLAG, .offset = offsetof(run_args, causal),
     .help = "look-ahead mask on the target's self-attention"},
    OPT_MASK("tgt-mask", tgt_mask, "(T, T) or (B, T, T) self-attention mask: bool or 0/1 "
             "integer (true/1 = blocked) or float (added)"),
    OPT_MASK("memory-mask", memory_mask, "(T, S) or (B, T, S) cross-attention mask, as "
             "--tgt-mask"),
    OPT_PAD("tgt-key-padding-mask", tgt_kpm, "bool or 0/1 integer (B, T), true/1 = padding"),
    OPT_PAD("memory-key-padding-mask", memory_kpm,
            "bool or 0/1 integer (B, S), true/1 = padding"),
    OPT_INT("layers", layers, "N",
            "a stack of N layers (nn.TransformerDecoder): weights layers.{i}.*, and the final "
            "norm.* when the file has it", 0),
    OPT_COMMON, {0},
};

static const cli_option transformer_opts[] = {
    OPT_WEIGHTS,
    {.name = "heads", .kind = CLI_INT, .offset = offsetof(run_args, heads), .metavar = "H",
     .help = "number of heads (must divide d_model; an export's config gives it)", .imin = 1,
     .imax = CLI_MAX_HEADS},
    OPT_PATH("src", src, "SRC.npy", "the source (B, S, d_model), or an export's source token ids "
             "(B, S) (integers)", CLI_REQUIRED),
    OPT_PATH("tgt", tgt, "TGT.npy", "the target (B, T, d_model), or an export's target token ids "
             "(B, T) (integers)", CLI_REQUIRED),
    OPT_INT("encoder-layers", encoder_layers, "N", "encoder layers (encoder.layers.{i}.*; an "
            "export's config gives it)", 0),
    OPT_INT("decoder-layers", decoder_layers, "M", "decoder layers (decoder.layers.{i}.*; an "
            "export's config gives it)", 0),
    {.name = "causal", .kind = CLI_FLAG, .offset = offsetof(run_args, causal),
     .help = "look-ahead mask on the target (tgt_mask = the square subsequent mask)"},
    OPT_PAD("src-key-padding-mask", src_kpm, "bool or 0/1 integer (B, S), true/1 = padding"),
    OPT_PAD("tgt-key-padding-mask", tgt_kpm, "bool or 0/1 integer (B, T), true/1 = padding"),
    OPT_PAD("memory-key-padding-mask", memory_kpm,
            "bool or 0/1 integer (B, S), true/1 = padding (usually the source's)"),
    OPT_LAYER_COMMON, OPT_COMMON, {0},
};

static const char *const module_names[RUN_N_MODULES] = {"sdpa", "mha", "ffn", "encoder",
                                                        "decoder", "transformer"};

static const cli_command run_cmds[RUN_N_MODULES] = {
    {.name = "run sdpa",
     .usage = "--q Q.npy --k K.npy --v V.npy [--mask M.npy] [--causal] [--attn-out A.npy]\n"
              "                      [--dtype f32|f64] [--out O.npy] [--grad-out dO.npy --grads "
              "G.safetensors]\n"
              "                      [--dot G.dot]",
     .description = "Scaled dot-product attention softmax(q k^T / sqrt(d) + mask) v on any\n"
                    "leading dims (PyTorch's F.scaled_dot_product_attention).",
     .opts = sdpa_opts},
    {.name = "run mha",
     .usage = "--weights W.safetensors --heads H (--x X.npy | --q Q.npy --k K.npy --v V.npy)\n"
              "                     [--attn-mask M.npy] [--key-padding-mask P.npy] [--causal] ...",
     .description = "nn.MultiheadAttention(batch_first=True): weights in_proj_weight,\n"
                    "in_proj_bias, out_proj.weight, out_proj.bias. With --x it is\n"
                    "self-attention (the gradient of x is the sum over its three uses).",
     .opts = mha_opts},
    {.name = "run ffn",
     .usage = "--weights W.safetensors --x X.npy [--activation relu|gelu] ...",
     .description = "The position-wise feed-forward network linear2(act(linear1(x))): weights\n"
                    "linear1.weight, linear1.bias, linear2.weight, linear2.bias.",
     .opts = ffn_opts},
    {.name = "run encoder",
     .usage = "--weights W.safetensors --heads H --x X.npy [--norm-first] [--eps E]\n"
              "                         [--activation relu|gelu] [--key-padding-mask P.npy] "
              "[--causal] ...",
     .description = "nn.TransformerEncoderLayer(batch_first=True, dropout=0): weights\n"
                    "self_attn.*, linear1.*, linear2.*, norm1.*, norm2.*. With --layers N,\n"
                    "nn.TransformerEncoder: layers.{i}.* and the final norm.* if present.",
     .opts = encoder_opts},
    {.name = "run decoder",
     .usage = "--weights W.safetensors --heads H --x TGT.npy --memory MEM.npy [--layers N]\n"
              "                         [--causal] [--tgt-mask M.npy] [--memory-mask M.npy]\n"
              "                         [--tgt-key-padding-mask P.npy] "
              "[--memory-key-padding-mask P.npy]\n"
              "                         [--norm-first] [--eps E] [--activation relu|gelu] ...",
     .description = "nn.TransformerDecoderLayer(batch_first=True, dropout=0): weights\n"
                    "self_attn.*, multihead_attn.*, linear1.*, linear2.*, norm1.*, norm2.*,\n"
                    "norm3.*. With --layers N, nn.TransformerDecoder: layers.{i}.* and the\n"
                    "final norm.* if present. Gradients of the inputs: x, memory.",
     .opts = decoder_opts},
    {.name = "run transformer",
     .usage = "--weights W.safetensors --heads H --src SRC.npy --tgt TGT.npy\n"
              "                             --encoder-layers N --decoder-layers M [--causal]\n"
              "                             [--src-key-padding-mask P] [--tgt-key-padding-mask P]\n"
              "                             [--memory-key-padding-mask P] [--norm-first] [--eps E]"
              "\n                             [--activation relu|gelu] ...\n"
              "       tgrad run transformer --weights EXPORT.safetensors --src SRC_IDS.npy "
              "--tgt TGT_IDS.npy\n"
              "                             [--src-key-padding-mask P] [--tgt-key-padding-mask P] "
              "...",
     .description = "nn.Transformer(batch_first=True, dropout=0): weights encoder.layers.{i}.*,\n"
                    "encoder.norm.*, decoder.layers.{i}.*, decoder.norm.*. Gradients of the\n"
                    "inputs: src, tgt.\n"
                    "Given the export of an encoder-decoder ('tgrad export' of a seq2seq or\n"
                    "translation checkpoint), the whole model runs: --src (B, S) and --tgt (B, T)\n"
                    "are integer token ids, the output is the logits (B, T, V); the config\n"
                    "(heads, layers, norm, activation, dtype) comes from the export, the target\n"
                    "is causal, and the source's padding mask also masks the memory.",
     .opts = transformer_opts},
};

const char *run_module_list(void)
{
    static char list[128];
    if (!list[0]) {
        size_t w = 0;
        for (int i = 0; i < RUN_N_MODULES && w < sizeof list; i++)
            w += (size_t)snprintf(list + w, sizeof list - w, "%s%s", i ? ", " : "",
                                  module_names[i]);
    }
    return list;
}

void run_help(const run_args *a, FILE *f)
{
    if (a && a->module >= 0 && a->module < RUN_N_MODULES) {
        cli_help(&run_cmds[a->module], f);
        return;
    }
    fprintf(f,
            "usage: tgrad run sdpa|mha|ffn|encoder|decoder|transformer [options]\n"
            "\n"
            "Runs one module on .npy inputs (forward, and backward with --grad-out) and writes\n"
            "the output and gradients, to compare with PyTorch. Shapes are batch-first:\n"
            "x (B, T, d_model); sdpa takes any leading dims. A bool mask .npy (|b1) blocks\n"
            "where true, an integer one (|u1, <i4, <i8, ...) must hold 0 and 1 and blocks\n"
            "where 1, a float one is added to the scores (PyTorch's conventions); a key\n"
            "padding mask is bool or 0/1 integer, true/1 = padding. Weights use PyTorch\n"
            "state_dict names (nn.MultiheadAttention, linear1/linear2,\n"
            "nn.TransformerEncoderLayer, nn.TransformerDecoderLayer, the stacks\n"
            "nn.TransformerEncoder / nn.TransformerDecoder, nn.Transformer).\n"
            "--dot G.dot writes the graph it builds as Graphviz DOT (draw it with\n"
            "'dot -Tsvg G.dot -o g.svg'). --unfused builds the graph of elementary ops\n"
            "(matmul, scale, add_mask, softmax, matmul) instead of the fused flash attention.\n"
            "--par-report lists the graph's parallel loops after the run (threads, governor).\n"
            "\n"
            "modules:\n"
            "  sdpa      scaled dot-product attention (--q --k --v)\n"
            "  mha       multi-head attention (--weights --heads, --x or --q --k --v)\n"
            "  ffn       position-wise feed-forward network (--weights --x)\n"
            "  encoder   transformer encoder layer, or a stack with --layers (--weights --heads\n"
            "            --x)\n"
            "  decoder   transformer decoder layer, or a stack with --layers (--weights --heads\n"
            "            --x --memory)\n"
            "  transformer  the encoder-decoder nn.Transformer (--weights --heads --src --tgt\n"
            "            --encoder-layers --decoder-layers)\n"
            "\n"
            "'tgrad run MODULE --help' lists the module's options.\n");
}

/* The first `--name` of argv that the module's table lacks (NULL if none). */
static const char *foreign_option(const cli_command *cmd, int argc, char **argv, char *name,
                                  size_t n)
{
    for (int i = 1; i < argc; i++) {
        const char *s = argv[i];
        if (!strcmp(s, "--"))
            break;
        if (strncmp(s, "--", 2) || !s[2])
            continue;
        size_t l = strcspn(s + 2, "=");
        if (l >= n)
            continue;
        memcpy(name, s + 2, l);
        name[l] = 0;
        if (!strcmp(name, "help") || cli_find(cmd, name))
            continue;
        return name;
    }
    return NULL;
}

static void foreign_option_error(const cli_command *cmd, int module, int argc, char **argv,
                                 char *err, size_t n);
static int run_check_args(const cli_command *cmd, run_args *a, const cli_result *r, char *err,
                          size_t n);

int run_parse(int argc, char **argv, run_args *a, cli_result *r, char *err, size_t n)
{
    memset(a, 0, sizeof *a);
    memset(r, 0, sizeof *r);
    a->module = RUN_NONE;
    err[0] = 0;
    if (argc < 2) {
        snprintf(err, n, "missing MODULE: sdpa, mha, ffn, encoder, decoder or transformer (try "
                 "'tgrad run --help')");
        return CLI_ERROR;
    }
    const char *m = argv[1];
    if (!strcmp(m, "--help") || !strcmp(m, "-h"))
        return CLI_HELP;
    for (int i = 0; i < RUN_N_MODULES; i++)
        if (!strcmp(m, module_names[i]))
            a->module = i;
    if (a->module == RUN_NONE) {
        char sh[80];
        snprintf(err, n, "unknown module '%s': expected sdpa, mha, ffn, encoder, decoder or "
                 "transformer",
                 cli_show(m, sh, sizeof sh));
        return CLI_ERROR;
    }
    const cli_command *cmd = &run_cmds[a->module];
    int rc = cli_parse(cmd, argc - 1, argv + 1, a, r, err, n);
    if (rc == CLI_ERROR) {
        foreign_option_error(cmd, a->module, argc - 1, argv + 1, err, n);
        return CLI_ERROR;
    }
    if (rc != CLI_OK)
        return rc;
    return run_check_args(cmd, a, r, err, n);
}

/* After cli_parse failed: if the unknown option is another module's, say which module takes
 * it (rewrites @p err). */
static void foreign_option_error(const cli_command *cmd, int module, int argc, char **argv,
                                 char *err, size_t n)
{
    char name[64];
    const char *o = foreign_option(cmd, argc, argv, name, sizeof name);
    if (!o || !strstr(err, "unknown option"))
        return;
    char owners[64] = "";
    for (int i = 0; i < RUN_N_MODULES; i++)
        if (cli_find(&run_cmds[i], o)) {
            size_t l = strlen(owners);
            snprintf(owners + l, sizeof owners - l, "%s%s", l ? ", " : "", module_names[i]);
        }
    if (owners[0])
        snprintf(err, n, "option '--%s' is not for %s (it is an option of: %s; try "
                 "'tgrad run %s --help')", o, module_names[module], owners,
                 module_names[module]);
}

/* The checks across options once they parsed: which were given, the inputs of mha, --grad-out
 * with --grads, no two outputs the same file. */
static int run_check_args(const cli_command *cmd, run_args *a, const cli_result *r, char *err,
                          size_t n)
{
    a->has_eps = cli_given(cmd, r, "eps");
    if (a->module == RUN_TRANSFORMER) {
        a->has_heads = cli_given(cmd, r, "heads");
        a->has_encoder_layers = cli_given(cmd, r, "encoder-layers");
        a->has_decoder_layers = cli_given(cmd, r, "decoder-layers");
        a->has_norm_first = cli_given(cmd, r, "norm-first");
        a->has_activation = cli_given(cmd, r, "activation");
        a->has_dtype = cli_given(cmd, r, "dtype");
    }
    if (a->module == RUN_MHA) {
        bool qkv = a->q || a->k || a->v;
        if (a->x && qkv) {
            snprintf(err, n, "give either --x (self-attention) or --q, --k and --v, not both");
            return CLI_ERROR;
        }
        if (!a->x && !(a->q && a->k && a->v)) {
            snprintf(err, n, "missing input: --x X.npy (self-attention) or all of --q, --k "
                     "and --v");
            return CLI_ERROR;
        }
    }
    if ((a->grad_out == NULL) != (a->grads == NULL)) {
        snprintf(err, n, "--grad-out and --grads go together (got only %s)",
                 a->grad_out ? "--grad-out" : "--grads");
        return CLI_ERROR;
    }
    const char *outs[4] = {a->out, a->attn_out, a->grads, a->dot};
    const char *flags[4] = {"--out", "--attn-out", "--grads", "--dot"};
    for (int i = 0; i < 4; i++)
        for (int j = i + 1; j < 4; j++)
            if (outs[i] && outs[j] && !strcmp(outs[i], outs[j])) {
                char sh[80];
                snprintf(err, n, "%s and %s name the same file '%s'", flags[i], flags[j],
                         cli_show(outs[i], sh, sizeof sh));
                return CLI_ERROR;
            }
    return CLI_OK;
}

void run_free(run_args *a, cli_result *r)
{
    if (a->module >= 0 && a->module < RUN_N_MODULES)
        cli_free(&run_cmds[a->module], a, r);
    else
        cli_free(&run_cmds[0], NULL, r);
}

/* ---- run ------------------------------------------------------------------------------------ */
/* Input @p x (read from option @p opt, file @p path) must end in d_model @p D of --weights. */
static bool input_width_ok(const tg_tensor *x, const char *opt, const char *path, int64_t D,
                           const char *weights, char *err, size_t n)
{
    if (tg_tensor_rank(x) == 0) {
        snprintf(err, n, "%s '%s' is a scalar (shape ()), but --weights '%s' needs an input of "
                 "shape (..., %" PRId64 ")", opt, path, weights, D);
        return false;
    }
    int64_t w = tg_tensor_dim(x, -1);
    if (w != D) {
        snprintf(err, n, "%s '%s' has last dim %" PRId64 ", but d_model of --weights '%s' is %"
                 PRId64, opt, path, w, weights, D);
        return false;
    }
    return true;
}

typedef struct {
    char shape[160]; /* of the output */
    const char *dtype;
    bool wrote;      /* any file written */
} run_result;

/* Read an .npy given by option @p opt; mark it differentiable when gradients are requested. */
static tg_tensor *load_npy(tg_ctx *ctx, const char *opt, const char *path, const char *name,
                           tg_dtype dt, bool grad, tg_npy_kind *kind, char *err, size_t n)
{
    char e[1200];
    if (!cli_regular_file(path, e, sizeof e)) {
        snprintf(err, n, "%s %s", opt, e);
        return NULL;
    }
    tg_npy_kind k;
    tg_tensor *t = tg_npy_read(ctx, path, dt, &k);
    if (!t) {
        cli_format(opt, path, ctx, err, n);
        return NULL;
    }
    tg_tensor_set_name(t, name);
    if (kind)
        *kind = k;
    if (grad)
        tg_set_requires_grad(t, true);
    return t;
}

/* A mask file, converted at the boundary to the library's convention (tgrad_nn.h): bool ->
 * BLOCK; integer -> BLOCK if it holds only 0 and 1 (1 = blocked, like true), refused otherwise
 * (a bias of integers or a typo: ambiguous); float -> ADDITIVE, or refused where only a
 * blocking mask makes sense (@p block_only: the key padding mask). The tensor is float (dt). */
static tg_tensor *load_mask(tg_ctx *ctx, const char *opt, const char *path, const char *name,
                            tg_dtype dt, bool block_only, tg_mask_kind *kind, char *err, size_t n)
{
    tg_npy_kind k;
    tg_tensor *m = load_npy(ctx, opt, path, name, dt, false, &k, err, n);
    if (!m)
        return NULL;
    if (k == TG_NPY_INT) {
        for (int64_t i = 0; i < tg_tensor_numel(m); i++) {
            double v = tg_get(m, i);
            if (v != 0 && v != 1) {
                snprintf(err, n, "%s '%s': an integer mask must hold only 0 and 1 (1 = %s, as "
                         "true in a bool mask), but element %" PRId64 " is %.17g", opt, path,
                         block_only ? "padding" : "blocked", i, v);
                return NULL;
            }
        }
    } else if (block_only && k != TG_NPY_BOOL) {
        snprintf(err, n, "%s '%s': must be a bool or 0/1 integer array (true/1 = padding), not "
                 "a float array", opt, path);
        return NULL;
    }
    *kind = k == TG_NPY_FLOAT ? TG_MASK_ADDITIVE : TG_MASK_BLOCK;
    return m;
}

/* Dim @p axis of the rank-2 tensor @p name in the weights file, or -1. */
static int64_t file_dim(const tg_safetensors *st, const char *name, int axis)
{
    tg_tensor *t = tg_safetensors_find(st, name);
    if (!t || tg_tensor_rank(t) != 2)
        return -1;
    return tg_tensor_shape(t)[axis];
}

static bool same_shape(const tg_tensor *a, const tg_tensor *b)
{
    return tg_tensor_rank(a) == tg_tensor_rank(b) &&
           !memcmp(tg_tensor_shape(a), tg_tensor_shape(b),
                   sizeof(int64_t) * (size_t)tg_tensor_rank(a));
}

/* The layer config from the weights file, whose first layer's parameters are under @p pre
 * ("", "layers.0.", "encoder.layers.0."): d_model from self_attn.in_proj_weight, d_ff from
 * linear1.weight; heads, norm placement, eps and activation from the options. */
static bool layer_config(const tg_safetensors *st, const char *pre, const run_args *a,
                         tg_encoder_config *c, char *err, size_t n)
{
    char w[160], l1[160];
    snprintf(w, sizeof w, "%sself_attn.in_proj_weight", pre);
    snprintf(l1, sizeof l1, "%slinear1.weight", pre);
    int64_t D = file_dim(st, w, 1);
    if (D < 1 || D > INT64_MAX / 3 || file_dim(st, w, 0) != 3 * D) {
        snprintf(err, n, "--weights '%s': no '%s' tensor of shape (3*d_model, d_model)",
                 a->weights, w);
        return false;
    }
    if (D % a->heads != 0) {
        snprintf(err, n, "--heads %" PRId64 " does not divide d_model %" PRId64
                 " of --weights '%s'", a->heads, D, a->weights);
        return false;
    }
    *c = tg_encoder_config_default(D, a->heads);
    c->d_ff = file_dim(st, l1, 0);
    if (c->d_ff < 1) {
        snprintf(err, n, "--weights '%s': no '%s' tensor of shape (d_ff, d_model)", a->weights,
                 l1);
        return false;
    }
    c->norm_first = a->norm_first;
    c->activation = a->activation == 1 ? TG_ACT_GELU : TG_ACT_RELU;
    if (a->has_eps)
        c->layer_norm_eps = a->eps;
    return true;
}

/* The first option of @p a that contradicts the export's config, in @p given ("" if none), and
 * what the config has instead in @p has (both of 160 bytes). */
static void export_contradiction(const run_args *a, const tg_model_info *mi, char *given,
                                 char *has)
{
    const tg_transformer_config *tc = &mi->config;
    const tg_encoder_config *c = &tc->layer;
    const size_t gn = 160, hn = 160;
    const char *act = c->activation == TG_ACT_GELU ? "gelu" : "relu";
    if (a->has_heads && a->heads != c->n_heads) {
        snprintf(given, gn, "--heads %" PRId64, a->heads);
        snprintf(has, hn, "n_heads %" PRId64, c->n_heads);
    } else if (a->has_encoder_layers && a->encoder_layers != tc->n_layers) {
        snprintf(given, gn, "--encoder-layers %" PRId64, a->encoder_layers);
        snprintf(has, hn, "n_layers %" PRId64, tc->n_layers);
    } else if (a->has_decoder_layers && a->decoder_layers != tc->n_decoder_layers) {
        snprintf(given, gn, "--decoder-layers %" PRId64, a->decoder_layers);
        snprintf(has, hn, "n_decoder_layers %" PRId64, tc->n_decoder_layers);
    } else if (a->has_norm_first && !c->norm_first) {
        snprintf(given, gn, "--norm-first");
        snprintf(has, hn, "norm_first false");
    } else if (a->has_activation && strcmp(a->activation == 1 ? "gelu" : "relu", act)) {
        snprintf(given, gn, "--activation %s", a->activation == 1 ? "gelu" : "relu");
        snprintf(has, hn, "activation %s", act);
    } else if (a->has_eps && a->eps != c->layer_norm_eps) {
        snprintf(given, gn, "--eps %g", a->eps);
        snprintf(has, hn, "layer_norm_eps %g", c->layer_norm_eps);
    } else if (a->has_dtype && (a->dtype == 1 ? TG_F64 : TG_F32) != mi->dtype) {
        snprintf(given, gn, "--dtype %s", a->dtype == 1 ? "f64" : "f32");
        snprintf(has, hn, "dtype %s", tg_dtype_str(mi->dtype));
    }
}

/* The whole encoder-decoder of a `tgrad export` (a seq2seq task's or a translation model's):
 * config, embeddings, layers and output layer from the file (tg_model_load_from), token ids
 * --src (B, S) and --tgt (B, T) in, logits (B, T, V) out, as tg_transformer_forward_seq2seq
 * computes them (the target's look-ahead mask always; the source's padding mask also masks the
 * memory). The options that describe a model must agree with the export's config. Returns the
 * logits, or NULL with one line in @p err and *rc (2: options, 1: files). */
static tg_tensor *export_forward(tg_ctx *ctx, const run_args *a, const tg_safetensors *st,
                                 tg_dtype *dt, int *rc, char *err, size_t n)
{
    *rc = 1;
    tg_model *m = tg_model_load_from(ctx, st, a->weights);
    if (!m) {
        cli_format("--weights", a->weights, ctx, err, n);
        return NULL;
    }
    const tg_model_info *mi = tg_model_get_info(m);
    *rc = 2;
    if (mi->kind != TG_MODEL_SEQ2SEQ) {
        snprintf(err, n, "--weights '%s' is the export of %s, not of an encoder-decoder: run "
                 "transformer takes the export of a seq2seq or translation model", a->weights,
                 mi->kind == TG_MODEL_LM ? "a text language model" : "a built-in task's encoder");
        return NULL;
    }
    char given[160] = "", has[160] = "";
    export_contradiction(a, mi, given, has);
    if (given[0]) {
        snprintf(err, n, "%s contradicts the config of the export --weights '%s' (%s); leave "
                 "it out", given, a->weights, has);
        return NULL;
    }
    if (a->memory_kpm) {
        snprintf(err, n, "--memory-key-padding-mask: the export's model masks the memory with "
                 "the source's padding mask (give --src-key-padding-mask)");
        return NULL;
    }
    *rc = 1;
    *dt = mi->dtype;
    tg_tensor *ids[2] = {NULL, NULL}, *kpm[2] = {NULL, NULL};
    const char *paths[2] = {a->src, a->tgt}, *opts[2] = {"--src", "--tgt"};
    const char *names[2] = {"src", "tgt"};
    const char *kpaths[2] = {a->src_kpm, a->tgt_kpm};
    const char *kopts[2] = {"--src-key-padding-mask", "--tgt-key-padding-mask"};
    const char *knames[2] = {"src_key_padding_mask", "tgt_key_padding_mask"};
    for (int i = 0; i < 2; i++) {
        tg_npy_kind k;
        ids[i] = load_npy(ctx, opts[i], paths[i], names[i], TG_I32, false, &k, err, n);
        if (!ids[i])
            return NULL;
        if (k != TG_NPY_INT) {
            snprintf(err, n, "%s '%s': the export --weights '%s' takes token ids, an integer "
                     "array (B, %s), not a %s array", opts[i], paths[i], a->weights,
                     i ? "T" : "S", k == TG_NPY_BOOL ? "bool" : "float");
            return NULL;
        }
        tg_mask_kind kk;
        if (kpaths[i] && !(kpm[i] = load_mask(ctx, kopts[i], kpaths[i], knames[i], mi->dtype,
                                               true, &kk, err, n)))
            return NULL;
    }
    tg_ctx_set_training(ctx, false); /* inference: no dropout */
    tg_tensor *y = tg_transformer_forward_seq2seq(ctx, tg_model_transformer(m), ids[0], ids[1],
                                                  kpm[0], kpm[1]);
    if (!y)
        cli_format(NULL, NULL, ctx, err, n);
    return y;
}

/* What run_exec's stages share: the context, the weights, the inputs (gradients are written
 * under input_names) and the masks. */
typedef struct {
    tg_ctx *ctx;
    tg_dtype dt;
    bool want_grad;
    bool whole; /* a `tgrad export` run whole by export_forward */
    tg_safetensors *st;
    tg_tensor *inputs[4];
    const char *input_names[4];
    int n_inputs;
    tg_attn_masks masks;  /* sdpa, mha, encoder */
    tg_attn_masks tm, mm, sm; /* decoder / transformer: target self-attention, cross-attention,
                               * source */
    tg_tensor *y, *attn;
} run_state;

/* An output never replaces an input (all are read before anything is written, but the input
 * would be lost); an existing output is replaced only with --force (outpath.h). Returns 0, or 2
 * (a usage error, even with --force) with one line in @p err. */
static int run_check_outputs(const run_args *a, char *err, size_t n)
{
    enum { N_INS = 17 };
    const char *out_paths[4] = {a->out, a->attn_out, a->grads, a->dot};
    const char *out_flags[4] = {"--out", "--attn-out", "--grads", "--dot"};
    const char *ins[N_INS] = {a->q, a->k, a->v, a->x, a->mask, a->attn_mask, a->kpm,
                              a->weights, a->grad_out, a->memory, a->src, a->tgt, a->tgt_mask,
                              a->memory_mask, a->tgt_kpm, a->memory_kpm, a->src_kpm};
    const char *in_flags[N_INS] = {"--q", "--k", "--v", "--x", "--mask", "--attn-mask",
                                   "--key-padding-mask", "--weights", "--grad-out", "--memory",
                                   "--src", "--tgt", "--tgt-mask", "--memory-mask",
                                   "--tgt-key-padding-mask", "--memory-key-padding-mask",
                                   "--src-key-padding-mask"};
    for (int i = 0; i < 4; i++)
        for (int j = 0; j < N_INS; j++)
            if (!outpath_not_input(out_flags[i], out_paths[i], in_flags[j], ins[j], err, n))
                return 2;
    for (int i = 0; i < 4; i++)
        if (out_paths[i]) {
            /* (a directory or device is refused by the writer, which names it) */
            if (outpath_check(out_flags[i], out_paths[i], a->force, NULL, err, n) ==
                OUTPATH_EXISTS)
                return 2;
        }
    return 0;
}

/* Read --weights into s->st and decide s->whole. Transformer: a `tgrad export` runs whole (ids
 * in, logits out); a training checkpoint is pointed to its export; other files need the
 * options that describe the layers. Returns 0, or 1 (2 for a usage error) with @p err. */
static int run_open_weights(run_state *s, const run_args *a, char *err, size_t n)
{
    char e[1200];
    if (a->weights) {
        if (!cli_regular_file(a->weights, e, sizeof e)) {
            snprintf(err, n, "--weights %s", e);
            return 1;
        }
        s->st = tg_safetensors_read(s->ctx, a->weights);
        if (!s->st) {
            cli_format("--weights", a->weights, s->ctx, err, n);
            return 1;
        }
    }
    const char *format = s->st ? tg_safetensors_meta_get(s->st, "format") : NULL;
    s->whole = a->module == RUN_TRANSFORMER && format && !strcmp(format, "tgrad-export-1");
    if (a->module == RUN_TRANSFORMER && !s->whole) {
        const char *missing = !a->has_heads            ? "--heads H"
                              : !a->has_encoder_layers ? "--encoder-layers N"
                              : !a->has_decoder_layers ? "--decoder-layers M"
                                                       : NULL;
        if (format && !strcmp(format, "tgrad-checkpoint-1")) {
            snprintf(err, n, "--weights '%s' is a training checkpoint: run transformer takes "
                     "its export ('tgrad export --checkpoint %s --out W.safetensors') or "
                     "nn.Transformer's state_dict names", a->weights, a->weights);
            return 2;
        }
        if (missing) {
            snprintf(err, n, "missing option '%s' (the file is not a 'tgrad export'; try "
                     "'tgrad run transformer --help')", missing);
            return 2;
        }
    }
    return 0;
}

/* Load the input arrays (--x or --q/--k/--v, then the decoder's and transformer's --memory,
 * --src, --tgt), gradients named after their options. */
static bool run_load_inputs(run_state *s, const run_args *a, char *err, size_t n)
{
    if (a->x) {
        s->inputs[0] = load_npy(s->ctx, "--x", a->x, "x", s->dt, s->want_grad, NULL, err, n);
        s->input_names[s->n_inputs++] = "x";
        if (!s->inputs[0])
            return false;
    } else if (a->q) {
        const char *paths[3] = {a->q, a->k, a->v}, *names[3] = {"q", "k", "v"};
        const char *opts[3] = {"--q", "--k", "--v"};
        for (int i = 0; i < 3; i++) {
            s->inputs[i] = load_npy(s->ctx, opts[i], paths[i], names[i], s->dt, s->want_grad,
                                    NULL, err, n);
            s->input_names[s->n_inputs++] = names[i];
            if (!s->inputs[i])
                return false;
        }
    }
    if (s->whole)
        return true; /* (export_forward reads the ids and the padding masks) */
    const char *paths[3] = {a->memory, a->src, a->tgt}, *names[3] = {"memory", "src", "tgt"};
    const char *opts[3] = {"--memory", "--src", "--tgt"};
    for (int i = 0; i < 3; i++) {
        if (!paths[i])
            continue;
        tg_tensor *t = load_npy(s->ctx, opts[i], paths[i], names[i], s->dt, s->want_grad, NULL,
                                err, n);
        if (!t)
            return false;
        s->inputs[s->n_inputs] = t;
        s->input_names[s->n_inputs++] = names[i];
    }
    return true;
}

/* Load the masks: the decoder's and transformer's under PyTorch's names (unless the model runs
 * whole), then --mask / --attn-mask and --key-padding-mask. */
static bool run_load_masks(run_state *s, const run_args *a, char *err, size_t n)
{
    if (!s->whole) {
        struct {
            const char *path, *opt, *name;
            tg_attn_masks *into;
            bool pad;
        } ms[5] = {{a->tgt_mask, "--tgt-mask", "tgt_mask", &s->tm, false},
                   {a->memory_mask, "--memory-mask", "memory_mask", &s->mm, false},
                   {a->tgt_kpm, "--tgt-key-padding-mask", "tgt_key_padding_mask", &s->tm, true},
                   {a->memory_kpm, "--memory-key-padding-mask", "memory_key_padding_mask",
                    &s->mm, true},
                   {a->src_kpm, "--src-key-padding-mask", "src_key_padding_mask", &s->sm,
                    true}};
        for (int i = 0; i < 5; i++) {
            if (!ms[i].path)
                continue;
            tg_mask_kind kk;
            tg_tensor *m = load_mask(s->ctx, ms[i].opt, ms[i].path, ms[i].name, s->dt,
                                     ms[i].pad, &kk, err, n);
            if (!m)
                return false;
            if (ms[i].pad) {
                ms[i].into->key_padding_mask = m;
            } else {
                ms[i].into->attn_mask = m;
                ms[i].into->attn_mask_kind = kk;
            }
        }
    }
    if (a->mask || a->attn_mask) {
        const char *p = a->mask ? a->mask : a->attn_mask;
        s->masks.attn_mask = load_mask(s->ctx, a->mask ? "--mask" : "--attn-mask", p,
                                       "attn_mask", s->dt, false, &s->masks.attn_mask_kind, err,
                                       n);
        if (!s->masks.attn_mask)
            return false;
    }
    if (a->kpm) {
        tg_mask_kind kk;
        s->masks.key_padding_mask = load_mask(s->ctx, "--key-padding-mask", a->kpm,
                                              "key_padding_mask", s->dt, true, &kk, err, n);
        if (!s->masks.key_padding_mask)
            return false;
    }
    return true;
}

/* Load the module's parameters from --weights (after its init registered them). */
static bool run_load_params(run_state *s, const run_args *a, char *err, size_t n)
{
    if (tg_params_load_from(s->ctx, s->st, 0, NULL, true) != TG_OK) {
        cli_format("--weights", a->weights, s->ctx, err, n);
        return false;
    }
    return true;
}

/* mha: d_model from in_proj_weight, self-attention on --x or attention on --q/--k/--v. */
static bool run_build_mha(run_state *s, const run_args *a, char *err, size_t n)
{
    const char *wname = "in_proj_weight";
    int64_t D = file_dim(s->st, wname, 1);
    if (D < 1 || D > INT64_MAX / 3 || file_dim(s->st, wname, 0) != 3 * D) {
        snprintf(err, n, "--weights '%s': no '%s' tensor of shape (3*d_model, d_model)",
                 a->weights, wname);
        return false;
    }
    if (D % a->heads != 0) {
        snprintf(err, n, "--heads %" PRId64 " does not divide d_model %" PRId64
                 " of --weights '%s'", a->heads, D, a->weights);
        return false;
    }
    if (!input_width_ok(s->inputs[0], a->x ? "--x" : "--q", a->x ? a->x : a->q, D, a->weights,
                        err, n))
        return false;
    tg_mha m;
    if (tg_mha_init(s->ctx, &m, s->dt, D, a->heads, NULL) != TG_OK) {
        cli_format(NULL, NULL, s->ctx, err, n);
        return false;
    }
    tg_tensor *q = s->inputs[0], *k = a->x ? s->inputs[0] : s->inputs[1],
              *v = a->x ? s->inputs[0] : s->inputs[2];
    if (!run_load_params(s, a, err, n))
        return false;
    s->y = tg_mha_forward(s->ctx, &m, q, k, v, &s->masks, NULL);
    return true;
}

/* encoder, decoder (layer or stack), transformer: the configuration from the weights; every
 * input's width is d_model of the weights. */
static bool run_build_layers(run_state *s, const run_args *a, char *err, size_t n)
{
    bool tf = a->module == RUN_TRANSFORMER, stack = a->layers > 0;
    tg_encoder_config c;
    if (!layer_config(s->st, tf ? "encoder.layers.0." : stack ? "layers.0." : "", a, &c, err,
                      n))
        return false;
    static const char *const in_opts[] = {"--x", "--memory", "--src", "--tgt"};
    const char *in_paths[] = {a->x, a->memory, a->src, a->tgt};
    for (int i = 0; i < 4; i++)
        if (in_paths[i]) {
            tg_tensor *t = NULL;
            for (int j = 0; j < s->n_inputs; j++)
                if (!strcmp(s->input_names[j], in_opts[i] + 2))
                    t = s->inputs[j];
            if (!input_width_ok(t, in_opts[i], in_paths[i], c.d_model, a->weights, err, n))
                return false;
        }
    bool has_norm = tg_safetensors_find(s->st, "norm.weight") != NULL;
    tg_status is;
    tg_encoder_layer el;
    tg_decoder_layer dl;
    tg_encoder es;
    tg_decoder ds;
    tg_encoder_decoder ed;
    tg_ctx *ctx = s->ctx;
    if (tf)
        is = tg_encoder_decoder_init(ctx, &ed, s->dt, &c, a->encoder_layers, a->decoder_layers,
                                     NULL);
    else if (a->module == RUN_ENCODER)
        is = stack ? tg_encoder_init(ctx, &es, s->dt, &c, a->layers, has_norm, NULL)
                   : tg_encoder_layer_init(ctx, &el, s->dt, &c, NULL);
    else
        is = stack ? tg_decoder_init(ctx, &ds, s->dt, &c, a->layers, has_norm, NULL)
                   : tg_decoder_layer_init(ctx, &dl, s->dt, &c, NULL);
    if (is != TG_OK) {
        cli_format(NULL, NULL, ctx, err, n);
        return false;
    }
    if (!run_load_params(s, a, err, n))
        return false;
    tg_tensor **in = s->inputs;
    if (tf)
        s->y = tg_encoder_decoder_forward(ctx, &ed, in[0], in[1], &s->sm, &s->tm, &s->mm);
    else if (a->module == RUN_ENCODER)
        s->y = stack ? tg_encoder_forward(ctx, &es, in[0], &s->masks)
                     : tg_encoder_layer_forward(ctx, &el, in[0], &s->masks);
    else
        s->y = stack ? tg_decoder_forward(ctx, &ds, in[0], in[1], &s->tm, &s->mm)
                     : tg_decoder_layer_forward(ctx, &dl, in[0], in[1], &s->tm, &s->mm);
    return true;
}

/* ffn: d_model and d_ff from linear1.weight. */
static bool run_build_ffn(run_state *s, const run_args *a, char *err, size_t n)
{
    tg_activation act = a->activation == 1 ? TG_ACT_GELU : TG_ACT_RELU;
    int64_t D = file_dim(s->st, "linear1.weight", 1), F = file_dim(s->st, "linear1.weight", 0);
    if (D < 1 || F < 1) {
        snprintf(err, n, "--weights '%s': no 'linear1.weight' tensor of shape (d_ff, "
                 "d_model)", a->weights);
        return false;
    }
    if (!input_width_ok(s->inputs[0], "--x", a->x, D, a->weights, err, n))
        return false;
    tg_ffn f;
    if (tg_ffn_init(s->ctx, &f, s->dt, D, F, act, NULL) != TG_OK) {
        cli_format(NULL, NULL, s->ctx, err, n);
        return false;
    }
    if (!run_load_params(s, a, err, n))
        return false;
    s->y = tg_ffn_forward(s->ctx, &f, s->inputs[0]);
    return true;
}

/* Build the module on the inputs into s->y (and s->attn). Returns 0, or 1 (or export_forward's
 * status) with one line in @p err. */
static int run_build(run_state *s, const run_args *a, run_result *res, char *err, size_t n)
{
    bool ok;
    if (a->module == RUN_SDPA) {
        s->y = tg_sdpa(s->ctx, s->inputs[0], s->inputs[1], s->inputs[2], &s->masks, 0,
                       &s->attn);
        ok = true;
    } else if (a->module == RUN_MHA) {
        ok = run_build_mha(s, a, err, n);
    } else if (s->whole) {
        tg_dtype mdt = s->dt;
        int xrc = 1;
        s->y = export_forward(s->ctx, a, s->st, &mdt, &xrc, err, n);
        if (!s->y)
            return xrc;
        res->dtype = tg_dtype_str(mdt);
        ok = true;
    } else if (a->module != RUN_FFN) {
        ok = run_build_layers(s, a, err, n);
    } else {
        ok = run_build_ffn(s, a, err, n);
    }
    if (!ok)
        return 1;
    if (!s->y) {
        cli_format(NULL, NULL, s->ctx, err, n);
        return 1;
    }
    return 0;
}

/* Backward from --grad-out; write the gradients of the parameters and the inputs to --grads. */
static bool run_write_grads(run_state *s, const run_args *a, tg_graph *g, char *err, size_t n)
{
    tg_ctx *ctx = s->ctx;
    tg_tensor *dy = load_npy(ctx, "--grad-out", a->grad_out, "grad_out", s->dt, false, NULL,
                             err, n);
    if (!dy)
        return false;
    if (!same_shape(dy, s->y)) {
        char b1[160], b2[160];
        snprintf(err, n, "--grad-out '%s' has shape %s, but the output is %s", a->grad_out,
                 tg_tensor_shape_str(dy, b1, sizeof b1),
                 tg_tensor_shape_str(s->y, b2, sizeof b2));
        return false;
    }
    if (tg_graph_backward(g, s->y, dy) != TG_OK) {
        cli_format(NULL, NULL, ctx, err, n);
        return false;
    }
    int64_t np = tg_ctx_n_params(ctx), k = 0;
    const tg_tensor **ts = malloc(sizeof *ts * (size_t)(np + 4));
    const char **names = malloc(sizeof *names * (size_t)(np + 4));
    if (!ts || !names) {
        free(ts);
        free(names);
        snprintf(err, n, "out of memory");
        return false;
    }
    for (int64_t i = 0; i < np; i++) {
        ts[k] = tg_ctx_param(ctx, i);
        names[k++] = tg_tensor_name(tg_ctx_param(ctx, i));
    }
    for (int i = 0; i < s->n_inputs; i++) {
        ts[k] = s->inputs[i];
        names[k++] = s->input_names[i];
    }
    tg_status st = tg_safetensors_write_grads(ctx, a->grads, k, ts, names, 0, NULL, NULL);
    free(ts);
    free(names);
    if (st != TG_OK) {
        cli_format("--grads", a->grads, ctx, err, n);
        return false;
    }
    return true;
}

/* --par-report: the parallel loops g ran (tg_graph_par_site), one line each. */
static void par_report(const tg_graph *g, FILE *f)
{
    int64_t n = tg_graph_par_sites(g);
    fprintf(f, "parallel loops: %" PRId64 "%s\n", n,
            n ? "" : " (one thread, or no loop large enough to split)");
    for (int64_t i = 0; i < n; i++) {
        tg_par_site e;
        if (tg_graph_par_site(g, i, &e) != TG_OK)
            continue;
        char site[160];
        if (!strcmp(e.site, "gemm"))
            snprintf(site, sizeof site, "gemm (~2^%d flops)", e.size_class);
        else
            snprintf(site, sizeof site, "%s", e.site);
        char node[96] = "the graph's own loop";
        if (e.node >= 0)
            snprintf(node, sizeof node, "node %" PRId64 " %s", e.node, e.op);
        fprintf(f,
                "  %s: %s, %d thread%s last, %" PRId64 " region%s, %" PRId64
                " on one thread, mean gain %.1f us%s\n",
                site, node, e.threads, e.threads == 1 ? "" : "s", e.regions,
                e.regions == 1 ? "" : "s", e.serial, e.mean_gain_us,
                e.backing_off ? ", backing off" : "");
    }
}

/* Run the built graph: --dot, forward, --out and --attn-out, and with --grad-out backward and
 * --grads; --par-report. */
static bool run_graph(run_state *s, const run_args *a, run_result *res, char *err, size_t n)
{
    tg_ctx *ctx = s->ctx;
    tg_tensor *outs[2] = {s->y, s->attn};
    tg_graph_opts go = {.precision = a->precision};
    tg_graph *g = tg_graph_new_opts(ctx, outs, s->attn ? 2 : 1, &go);
    if (!g) {
        cli_format(NULL, NULL, ctx, err, n);
        return false;
    }
    if (a->dot) { /* the graph as built, before it runs */
        if (tg_graph_write_dot(g, a->dot, s->want_grad ? TG_DOT_BACKWARD : 0) != TG_OK) {
            cli_format("--dot", a->dot, ctx, err, n);
            return false;
        }
        res->wrote = true;
    }
    if (tg_graph_forward(g) != TG_OK) {
        cli_format(NULL, NULL, ctx, err, n);
        return false;
    }
    tg_tensor_shape_str(s->y, res->shape, sizeof res->shape);
    if (a->out) {
        if (tg_npy_write(ctx, a->out, s->y) != TG_OK) {
            cli_format("--out", a->out, ctx, err, n);
            return false;
        }
        res->wrote = true;
    }
    if (a->attn_out) {
        if (tg_npy_write(ctx, a->attn_out, s->attn) != TG_OK) {
            cli_format("--attn-out", a->attn_out, ctx, err, n);
            return false;
        }
        res->wrote = true;
    }
    if (s->want_grad) {
        if (!run_write_grads(s, a, g, err, n))
            return false;
        res->wrote = true;
    }
    if (a->par_report)
        par_report(g, stdout);
    return true;
}

/* Build the module on the inputs, run forward (and backward), write the files. Returns 0, or 1
 * (2 for a usage error) with one line in @p err. */
static int run_exec(const run_args *a, run_result *res, char *err, size_t n)
{
    memset(res, 0, sizeof *res);
    run_state s;
    memset(&s, 0, sizeof s);
    s.ctx = tg_ctx_new();
    if (!s.ctx) {
        snprintf(err, n, "out of memory");
        return 1;
    }
    if (a->unfused)
        tg_ctx_set_fusion(s.ctx, false);
    s.want_grad = a->grad_out != NULL;
    s.dt = a->dtype == 1 ? TG_F64 : TG_F32;
    res->dtype = tg_dtype_str(s.dt);
    s.masks.causal = a->causal;
    s.tm.causal = a->causal;
    int rc = run_check_outputs(a, err, n);
    if (!rc)
        rc = run_open_weights(&s, a, err, n);
    if (!rc)
        rc = run_load_inputs(&s, a, err, n) && run_load_masks(&s, a, err, n) ? 0 : 1;
    if (!rc)
        rc = run_build(&s, a, res, err, n);
    if (!rc)
        rc = run_graph(&s, a, res, err, n) ? 0 : 1;
    tg_ctx_free(s.ctx);
    return rc;
}

/* ---- report --------------------------------------------------------------------------------- */
int cmd_run(int argc, char **argv)
{
    run_args a;
    cli_result r;
    char err[1600];
    int pr = run_parse(argc, argv, &a, &r, err, sizeof err);
    if (pr != CLI_OK) {
        if (pr == CLI_HELP)
            run_help(&a, stdout);
        else if (a.module >= 0)
            fprintf(stderr, "tgrad run %s: %s\n", module_names[a.module], err);
        else
            fprintf(stderr, "tgrad run: %s\n", err);
        run_free(&a, &r);
        return pr == CLI_HELP ? 0 : 2;
    }
    run_result res;
    int rc = run_exec(&a, &res, err, sizeof err);
    if (rc)
        fprintf(stderr, "tgrad run %s: %s\n", module_names[a.module], err);
    else if (!res.wrote) /* nothing written: describe the result */
        printf("%s output %s %s\n", module_names[a.module], res.shape, res.dtype);
    run_free(&a, &r);
    return rc;
}
