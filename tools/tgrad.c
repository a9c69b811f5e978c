/*
 * tgrad.c - the `tgrad` command-line program: top-level options (--version, --help), then one
 * subcommand per file (tools/cmd_*.c). Every error is one line on stderr and a non-zero exit
 * status (2 for a malformed command line).
 */
#include "cli.h"
#include "tgrad.h"

#include <errno.h>
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

/* ---- report --------------------------------------------------------------------------------- */
static void usage(FILE *f)
{
    fprintf(f, "usage: tgrad [--version | --help] <command> [options]\n\ncommands:\n");
    for (size_t i = 0; i < N_COMMANDS; i++)
        fprintf(f, "  %-10s %s\n", commands[i].name, commands[i].help);
    fprintf(f, "\n'tgrad <command> --help' describes a command's options.\n");
}

/* The command line's command, or the top level's usage, help or version. */
static int dispatch(int argc, char **argv)
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
        if (!strcmp(a.cmd_argv[1], c->name) && a.cmd_argc == 2) { /* tgrad help help */
            usage(stdout);
            return 0;
        }
        for (int i = 0; i < N_COMMANDS; i++)
            if (commands[i].run && !strcmp(a.cmd_argv[1], commands[i].name)) {
                if (a.cmd_argc > 2) {
                    char sh[80];
                    fprintf(stderr, "tgrad help: unexpected argument '%s' (usage: tgrad help "
                            "COMMAND)\n", cli_show(a.cmd_argv[2], sh, sizeof sh));
                    return 2;
                }
                char help_flag[] = "--help";
                char *hv[3] = {a.cmd_argv[1], help_flag, NULL};
                return commands[i].run(2, hv);
            }
        char sh[80];
        fprintf(stderr, "tgrad help: unknown command '%s' (try 'tgrad --help')\n",
                cli_show(a.cmd_argv[1], sh, sizeof sh));
        return 2;
    }
    return c->run(a.cmd_argc, a.cmd_argv);
}

int main(int argc, char **argv)
{
    int rc = dispatch(argc, argv);
    /* output that could not be written (a full disk, a closed pipe) is an error, never a
     * silent exit 0 with a truncated file; a command that failed has said why already */
    errno = 0;
    if ((fflush(stdout) != 0 || ferror(stdout)) && rc == 0) {
        int e = errno;
        fprintf(stderr, "tgrad: writing the output failed%s%s\n", e ? ": " : "",
                e ? strerror(e) : "");
        return 1;
    }
    return rc;
}
