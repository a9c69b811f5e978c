/*
 * cmd_top.c - the program level of `tgrad`: options before the command name (--version,
 * --help) and `tgrad version`. Separate from tgrad.c (main and the command table) so the
 * parser links into a test or fuzzer without a second main.
 */
#include "cli.h"
#include "tgrad.h"

#include <stdio.h>
#include <string.h>

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
    char sh[80];
    snprintf(err, n, "unknown command '%s' (try 'tgrad --help')", cli_show(argv[k], sh, sizeof sh));
    return CLI_ERROR;
}

void top_free(top_args *a, cli_result *r) { cli_free(&top_cmd, a, r); }

/* ---- tgrad version ------------------------------------------------------------------------- */
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

