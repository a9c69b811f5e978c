/*
 * tgrad.c - the `tgrad` command-line program: top-level options (--version, --help), then one
 * subcommand per file (tools/cmd_*.c). Every error is one line on stderr and a non-zero exit
 * status (2 for a malformed command line).
 */
#define _POSIX_C_SOURCE 200809L /* setenv */
#include "cli.h"
#include "tgrad.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

typedef struct {
    const char *name;
    int (*run)(int argc, char **argv);
    const char *help;
} command;

static const command commands[] = {
    {"train", cmd_train, "train a transformer (built-in task, or --text FILE... for an LM)"},
    {"sample", cmd_sample, "generate text from a language-model checkpoint (or decode a "
                           "sequence with a seq2seq one)"},
    {"translate", cmd_translate, "translate sentences with a checkpoint of 'train --pairs' "
                                 "(greedy or beam search; --eval: BLEU and chrF)"},
    {"export", cmd_export, "write a checkpoint's parameters as a PyTorch-loadable safetensors"},
    {"average", cmd_average, "average the parameters of checkpoints of one model"},
    {"info", cmd_info, "describe checkpoints, safetensors and .npy files"},
    {"bench", cmd_bench, "benchmark kernels and a training step against references"},
    {"gradcheck", cmd_gradcheck, "check every op's gradients against central differences"},
    {"run", cmd_run, "run one module on .npy inputs (modules: %s)"},
    {"version", cmd_version, "print the version"},
    {"help", NULL, "describe a command ('tgrad help COMMAND' = 'tgrad COMMAND --help') or a "
                   "module of run ('tgrad help run MODULE')"},
};
enum { N_COMMANDS = sizeof commands / sizeof commands[0] };

/* ---- report --------------------------------------------------------------------------------- */
/* One command's line; `%s` in its help is the list of run's modules (from cmd_run.c's own
 * table, so it cannot go stale), and a line longer than 80 columns goes on at the next space
 * before column 80, indented under the help. */
static void usage_line(FILE *f, const command *c)
{
    char help[400];
    if (strstr(c->help, "%s"))
        snprintf(help, sizeof help, c->help, run_module_list());
    else
        snprintf(help, sizeof help, "%s", c->help);
    const int indent = 13, width = 80 - indent;
    const char *p = help;
    fprintf(f, "  %-10s ", c->name);
    while ((int)strlen(p) > width) {
        int cut = width;
        while (cut > 0 && p[cut] != ' ')
            cut--;
        if (cut == 0)
            break;
        fprintf(f, "%.*s\n%*s", cut, p, indent, "");
        p += cut + 1;
    }
    fprintf(f, "%s\n", p);
}

static void usage(FILE *f)
{
    fprintf(f, "usage: tgrad [--version | --help] <command> [options]\n\ncommands:\n");
    for (size_t i = 0; i < N_COMMANDS; i++)
        usage_line(f, &commands[i]);
    fprintf(f, "\n'tgrad <command> --help' describes a command's options; 'tgrad help run "
            "MODULE'\n(= 'tgrad run MODULE --help') a module's.\n");
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
                if (commands[i].run == cmd_run && a.cmd_argc == 3) { /* help run MODULE */
                    char help_flag[] = "--help";
                    char *hv[4] = {a.cmd_argv[1], a.cmd_argv[2], help_flag, NULL};
                    return cmd_run(3, hv);
                }
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

/* The OpenMP wait policy tgrad runs with unless the user chose one. libgomp's default keeps an
 * idle worker polling for ~300,000 spins (milliseconds) before it sleeps. When other processes
 * want the cores, that worker uses up its share polling and is then descheduled when the next
 * parallel region needs it, and every region waits for it: on a 2-core machine with one other
 * busy process, 2 threads ran a training step at half the speed of 1. A short poll (GOMP_SPINCOUNT
 * polls of a few nanoseconds each) still catches the next region of a training step, which
 * mostly comes within microseconds, and then sleeps. libgomp reads the variable once, when it is
 * loaded (before main), so tgrad sets it and runs itself again (Linux: /proc/self/exe); when
 * that fails it goes on with libgomp's default. The user's own OMP_WAIT_POLICY or GOMP_SPINCOUNT
 * always wins. */
#define TGRAD_SPINCOUNT "1000"

static void omp_wait_default(char **argv)
{
#if defined(TGRAD_OMP_WAIT_DEFAULT) && defined(__linux__)
    if (getenv("OMP_WAIT_POLICY") || getenv("GOMP_SPINCOUNT"))
        return;
    if (setenv("GOMP_SPINCOUNT", TGRAD_SPINCOUNT, 1) != 0)
        return;
    execv("/proc/self/exe", argv);
    unsetenv("GOMP_SPINCOUNT"); /* not re-executed: say nothing the runtime did not read */
#else
    (void)argv;
#endif
}

int main(int argc, char **argv)
{
    omp_wait_default(argv);
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
