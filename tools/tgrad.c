/*
 * tgrad.c - the `tgrad` command-line program: dispatches to one subcommand per file
 * (tools/cmd_*.c). Every error is one line on stderr and a non-zero exit status.
 */
#include "cli.h"

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
    {"info", cmd_info, "describe a checkpoint, safetensors or .npy file"},
    {"bench", cmd_bench, "benchmark kernels and a training step against references"},
    {"gradcheck", cmd_gradcheck, "check every op's gradients against central differences"},
    {"run", cmd_run, "run one module (sdpa, mha, ffn, encoder) on .npy inputs"},
};

static void usage(FILE *f)
{
    fprintf(f, "usage: tgrad <command> [options]\n\ncommands:\n");
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
        fprintf(f, "  %-10s %s\n", commands[i].name, commands[i].help);
    fprintf(f, "\n'tgrad <command> --help' describes a command's options.\n");
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        usage(stderr);
        return 2;
    }
    if (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0 ||
        strcmp(argv[1], "help") == 0) {
        usage(stdout);
        return 0;
    }
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
        if (strcmp(argv[1], commands[i].name) == 0)
            return commands[i].run(argc - 1, argv + 1);
    fprintf(stderr, "tgrad: unknown command '%s' (try 'tgrad --help')\n", argv[1]);
    return 2;
}
