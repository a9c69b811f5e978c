/*
 * cli.h - subcommands of the `tgrad` program (layer 6: uses only the public headers).
 *
 * Each command is split into parse / run / report:
 *   - <cmd>_parse() turns argv into the command's argument struct through its cliopt table
 *     (tools/cli/cliopt.h). It does no I/O (no files, no printing) and uses no globals besides
 *     getopt's, so a fuzzer can call it on any argv. It returns CLI_OK, CLI_HELP or CLI_ERROR
 *     with one line in @p err (without the `tgrad <cmd>: ` prefix), which cli_parse_exit()
 *     turns into the help or the error line. Call <cmd>_free() afterwards in every case.
 *   - the run step does the work and keeps an error line instead of printing;
 *   - the report step prints the result (stdout) or the one-line error (stderr).
 * cmd_<name>(argc, argv) chains the three; argv[0] is the command name.
 */
#ifndef TG_CLI_H
#define TG_CLI_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "cliopt.h"

int cmd_gradcheck(int argc, char **argv);
int cmd_run(int argc, char **argv);
int cmd_train(int argc, char **argv);
int cmd_sample(int argc, char **argv);
int cmd_info(int argc, char **argv);
int cmd_bench(int argc, char **argv);
int cmd_export(int argc, char **argv);
int cmd_version(int argc, char **argv);
int cmd_translate(int argc, char **argv);
int cmd_average(int argc, char **argv);

/* Limits shared by the commands' tables. */
#define CLI_MAX_THREADS 256     /* --threads */
#define CLI_MAX_HEADS 65536     /* --heads */
#define CLI_MAX_LAYERS 65536    /* tgrad run --layers, --encoder-layers, --decoder-layers */

/* ---- tgrad (top level) --------------------------------------------------------------------- */
typedef struct top_args {
    bool version;     /* --version */
    int command;      /* index of the command in tgrad.c's table, -1 if none was named */
    int cmd_argc;     /* the command's argv (argv[0] is its name) */
    char **cmd_argv;
} top_args;
/* Options before the command name (`tgrad --version`, `tgrad --help`), then the command,
 * looked up in @p names (n_names of them). An unknown command is a CLI_ERROR. */
int top_parse(int argc, char **argv, const char *const *names, int n_names, top_args *a,
              cli_result *r, char *err, size_t n);
void top_free(top_args *a, cli_result *r);

/* ---- tgrad run ----------------------------------------------------------------------------- */
typedef enum {
    RUN_NONE = -1, RUN_SDPA = 0, RUN_MHA, RUN_FFN, RUN_ENCODER, RUN_DECODER, RUN_TRANSFORMER,
    RUN_N_MODULES
} run_module;

typedef struct run_args {
    int module;   /* run_module */
    const char *q, *k, *v, *x, *mask, *attn_mask, *kpm, *weights, *out, *attn_out, *grad_out,
        *grads;
    const char *dot; /* --dot: the graph as Graphviz DOT */
    /* decoder and transformer inputs and masks (PyTorch's names) */
    const char *memory, *src, *tgt, *tgt_mask, *memory_mask, *tgt_kpm, *memory_kpm, *src_kpm;
    int64_t layers;                         /* --layers: a stack (0: one layer) */
    int64_t encoder_layers, decoder_layers; /* transformer */
    int activation; /* 0 relu, 1 gelu */
    int dtype;      /* 0 f32, 1 f64 */
    int precision;  /* --precision f32|bf16 (tg_precision; f32 dtype only) */
    int64_t heads;  /* [1, CLI_MAX_HEADS] */
    bool causal, norm_first, has_eps;
    bool force;     /* --force: replace existing output files */
    bool unfused;   /* --unfused: tg_ctx_set_fusion(ctx, false) */
    bool par_report; /* --par-report: list the graph's parallel loops after the run */
    double eps;     /* [0, 1] */
    /* transformer: the options that describe the model, each given or not (an export's config
     * gives them: given ones must agree with it) */
    bool has_heads, has_encoder_layers, has_decoder_layers, has_norm_first, has_activation,
        has_dtype;
} run_args;
/* argv[0] = "run", argv[1] = the module (or --help). */
int run_parse(int argc, char **argv, run_args *a, cli_result *r, char *err, size_t n);
void run_free(run_args *a, cli_result *r);
/* The run help (no module) or the module's table help. */
void run_help(const run_args *a, FILE *f);
/* The modules of `tgrad run`, for messages: "sdpa, mha, ffn, encoder, decoder, transformer". */
const char *run_module_list(void);

/* ---- tgrad info ---------------------------------------------------------------------------- */
typedef struct info_args {
    int dummy; /* no options besides --help; the files are r->positional */
} info_args;
int info_parse(int argc, char **argv, info_args *a, cli_result *r, char *err, size_t n);
void info_free(info_args *a, cli_result *r);

/* ---- tgrad gradcheck ----------------------------------------------------------------------- */
typedef struct gradcheck_args {
    cli_list ops;     /* --op NAME... (every name checked against the case table) */
    int dtype;        /* 0 f64, 1 f32 */
    int64_t threads;  /* 0: OpenMP's default; else [1, CLI_MAX_THREADS] */
    int64_t order;    /* 1 (0: not given): tg_gradcheck; 2: tg_gradgradcheck */
    int mode;         /* 0 rev, 1 fwd, 2 both (tg_gradcheck_opts.mode) */
    bool list;
} gradcheck_args;
int gradcheck_parse(int argc, char **argv, gradcheck_args *a, cli_result *r, char *err,
                    size_t n);
void gradcheck_free(gradcheck_args *a, cli_result *r);

/* ---- tgrad bench --------------------------------------------------------------------------- */
typedef struct bench_args {
    int64_t threads; /* 0: all (OpenMP's default); else [1, CLI_MAX_THREADS] */
    int only;        /* section: 0 all, 1 peak, 2 gemm, 3 dense, 4 sdpa, 5 mha, 6 encoder,
                        7 train */
    int64_t samples; /* samples per number (median, min-max); 0: the default, 7 */
    bool unfused;    /* module and training sections with tg_ctx_set_fusion(ctx, false) */
    bool tiny;       /* (hidden) every section on tiny shapes: a smoke test for the tests */
    int precision;   /* 0 f32, 1 bf16: tg_graph_opts.precision of the gemm, dense, sdpa, mha,
                        encoder and train sections (the index of --precision's choice) */
} bench_args;
int bench_parse(int argc, char **argv, bench_args *a, cli_result *r, char *err, size_t n);
void bench_free(bench_args *a, cli_result *r);

/* ---- tgrad export -------------------------------------------------------------------------- */
typedef struct export_args {
    const char *checkpoint, *out;
    bool force;
} export_args;
int export_parse(int argc, char **argv, export_args *a, cli_result *r, char *err, size_t n);
void export_free(export_args *a, cli_result *r);

/* ---- tgrad average ------------------------------------------------------------------------- */
typedef struct average_args {
    const char *out; /* --out OUT (required) */
    bool force;
} average_args;
int average_parse(int argc, char **argv, average_args *a, cli_result *r, char *err, size_t n);
void average_free(average_args *a, cli_result *r);

/* ---- tgrad translate ----------------------------------------------------------------------- */
#define TRANSLATE_MAX_BEAM 64     /* --beam */
#define TRANSLATE_MAX_BATCH 4096  /* --batch */
typedef struct translate_args {
    const char *checkpoint; /* --checkpoint (required) */
    const char *eval, *out; /* --eval PAIRS, --out FILE (with --eval) */
    const char *input;      /* the positional FILE (NULL or "-": standard input) */
    int64_t beam, batch, threads, no_repeat_ngram;
    double lenpen, max_len_a, max_len_b;
    bool force;
    int precision; /* --precision f32|bf16 (tg_precision) */
} translate_args;
int translate_parse(int argc, char **argv, translate_args *a, cli_result *r, char *err,
                    size_t n);
void translate_free(translate_args *a, cli_result *r);
const cli_command *translate_command(void);

#endif
