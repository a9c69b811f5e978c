/*
 * tgrad.c - the `tgrad` command-line program: top-level options (--version, --help), then one
 * subcommand per file (tools/cmd_*.c). Every error is one line on stderr and a non-zero exit
 * status (2 for a malformed command line).
 */
#include "cli.h"
#include "tgrad.h"

#include <stdio.h>
#include <string.h>

typedef struct {
    const char *name;
    int (*run)(int argc, char **argv);
    const char *help;
} command;

static const command commands[] = {
    {"train", cmd_train, "train a transformer (built-in task, or --text FILE... for an LM)"},
    {"sample", cmd_sample, "generate text from a language-model checkpoint"},
    {"export", cmd_export, "write a checkpoint's parameters as a PyTorch-loadable safetensors"},
    {"info", cmd_info, "describe checkpoints, safetensors and .npy files"},
    {"bench", cmd_bench, "benchmark kernels and a training step against references"},
    {"gradcheck", cmd_gradcheck, "check every op's gradients against central differences"},
    {"run", cmd_run, "run one module (sdpa, mha, ffn, encoder) on .npy inputs"},
    {"version", cmd_version, "print the version"},
    {"help", NULL, "describe a command: 'tgrad help COMMAND' (= 'tgrad COMMAND --help')"},
};
enum { N_COMMANDS = sizeof commands / sizeof commands[0] };

/* ---- parse ---------------------------------------------------------------------------------- */
static const cli_option top_opts[] = {
    {.name = "version", .kind = CLI_FLAG, .offset = offsetof(top_args, version),
     .help = "print the version and exit"},
    {0},
};

static const cli_command top_cmd = {
    .name = "",
    .usage = "[--version | --help] <command> [options]",
    .opts = top_opts,
};

int top_parse(int argc, char **argv, const char *const *names, int n_names, top_args *a,
              cli_result *r, char *err, size_t n)
{
    memset(a, 0, sizeof *a);
    a->command = -1;
    /* the options before the command name are the program's; the rest are the command's */
    int k = 1;
    while (k < argc && argv[k][0] == '-' && strcmp(argv[k], "--") != 0)
        k++;
    int rc = cli_parse(&top_cmd, k, argv, a, r, err, n);
    if (rc != CLI_OK)
        return rc;
    if (k < argc && !strcmp(argv[k], "--"))
        k++;
    if (a->version)
        return CLI_OK;
    if (k >= argc) {
        snprintf(err, n, "no command given (try 'tgrad --help')");
        return CLI_ERROR;
    }
    for (int i = 0; i < n_names; i++)
        if (!strcmp(argv[k], names[i])) {
            a->command = i;
            a->cmd_argc = argc - k;
            a->cmd_argv = argv + k;
            return CLI_OK;
        }
    snprintf(err, n, "unknown command '%s' (try 'tgrad --help')", argv[k]);
    return CLI_ERROR;
}

void top_free(top_args *a, cli_result *r) { cli_free(&top_cmd, a, r); }

/* ---- report --------------------------------------------------------------------------------- */
static void usage(FILE *f)
{
    fprintf(f, "usage: tgrad [--version | --help] <command> [options]\n\ncommands:\n");
    for (size_t i = 0; i < N_COMMANDS; i++)
        fprintf(f, "  %-10s %s\n", commands[i].name, commands[i].help);
    fprintf(f, "\n'tgrad <command> --help' describes a command's options.\n");
}

int cmd_version(int argc, char **argv)
{
    (void)argv;
    if (argc > 1) {
        if (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h")) {
            printf("usage: tgrad version\n\nPrints the version of tgrad (the program and the "
                   "library it is built with).\n");
            return 0;
        }
        fprintf(stderr, "tgrad version: unexpected argument '%s' (try 'tgrad version --help')\n",
                argv[1]);
        return 2;
    }
    printf("tgrad %s\n", TGRAD_VERSION_STRING);
    return 0;
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        usage(stderr);
        return 2;
    }
    const char *names[N_COMMANDS];
    for (int i = 0; i < N_COMMANDS; i++)
        names[i] = commands[i].name;
    top_args a;
    cli_result r;
    char err[512];
    int pr = top_parse(argc, argv, names, N_COMMANDS, &a, &r, err, sizeof err);
    top_free(&a, &r);
    if (pr == CLI_HELP) {
        usage(stdout);
        return 0;
    }
    if (pr == CLI_ERROR) {
        fprintf(stderr, "tgrad: %s\n", err);
        return 2;
    }
    if (a.version)
        return cmd_version(1, argv);
    const command *c = &commands[a.command];
    if (!c->run) { /* help [COMMAND] */
        if (a.cmd_argc < 2) {
            usage(stdout);
            return 0;
        }
        for (int i = 0; i < N_COMMANDS; i++)
            if (commands[i].run && !strcmp(a.cmd_argv[1], commands[i].name)) {
                if (a.cmd_argc > 2) {
                    fprintf(stderr, "tgrad help: unexpected argument '%s' (usage: tgrad help "
                            "COMMAND)\n", a.cmd_argv[2]);
                    return 2;
                }
                char help_flag[] = "--help";
                char *hv[3] = {a.cmd_argv[1], help_flag, NULL};
                return commands[i].run(2, hv);
            }
        fprintf(stderr, "tgrad help: unknown command '%s' (try 'tgrad --help')\n",
                a.cmd_argv[1]);
        return 2;
    }
    return c->run(a.cmd_argc, a.cmd_argv);
}
