/*
 * cmd_gradcheck.c - `tgrad gradcheck`: run tg_gradcheck (--order 2: tg_gradgradcheck) on every
 * case of tools/cli/opcases.c and print a table; exit 1 if any case fails or is refused.
 */
#include "cli.h"
#include "climsg.h"
#include "opcases.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- parse ---------------------------------------------------------------------------------- */
static const cli_option gradcheck_opts[] = {
    {.name = "op", .kind = CLI_LIST, .offset = offsetof(gradcheck_args, ops),
     .metavar = "NAME", .help = "only the cases of these ops or modules (repeatable; see --list)"},
    {.name = "dtype", .kind = CLI_CHOICE, .offset = offsetof(gradcheck_args, dtype),
     .choices = "f64|f32", .help = "dtype of the check (f64)"},
    {.name = "threads", .kind = CLI_INT, .offset = offsetof(gradcheck_args, threads),
     .metavar = "N", .help = "kernel threads (default: OpenMP's)", .imin = 1,
     .imax = CLI_MAX_THREADS},
    {.name = "order", .kind = CLI_INT, .offset = offsetof(gradcheck_args, order),
     .metavar = "N", .help = "1: first derivatives; 2: second derivatives, the gradients built "
     "as graph nodes checked again (tg_gradgradcheck) (1)", .imin = 1, .imax = 2},
    {.name = "mode", .kind = CLI_CHOICE, .offset = offsetof(gradcheck_args, mode),
     .choices = "rev|fwd|both", .help = "rev: reverse mode (the backward kernels; with --order "
     "2 the gradients as nodes); fwd: forward mode (JVPs as nodes, and the adjoint identity); "
     "both (rev)"},
    {.name = "list", .kind = CLI_FLAG, .offset = offsetof(gradcheck_args, list),
     .help = "list the ops and cases, run nothing"},
    {0},
};

static const cli_command gradcheck_cmd = {
    .name = "gradcheck",
    .usage = "[--op NAME...] [--dtype f64|f32] [--order 1|2] [--mode rev|fwd|both] [--threads N] "
             "[--list]",
    .description =
        "Compares analytic gradients with central differences for every registered op\n"
        "(and module), several shape cases each. f64 uses PyTorch's gradcheck defaults\n"
        "(eps 1e-6, atol 1e-5, rtol 1e-3); f32 uses eps 1e-3, atol 1e-2, rtol 1e-2.\n"
        "Also checks that a second backward is bitwise identical and that a zero\n"
        "upstream gradient gives zero gradients. --order 2 checks second derivatives\n"
        "(PyTorch's gradgradcheck): the gradient of sum(r * y) built as graph nodes\n"
        "(tg_grad), reduced to S = sum <grad, v>, checked in x and in r; a case whose ops\n"
        "have no reverse rule written as ops yet is REFUSED, naming the op. --mode fwd\n"
        "checks forward mode instead (PyTorch's check_forward_ad): JVPs built as nodes\n"
        "(tg_jvp) against the same differences, and <r, J u> = <J^T r, u>; with\n"
        "--order 2 that is forward over reverse. Exits 1 if any case fails or is refused.",
    .opts = gradcheck_opts,
};

int gradcheck_parse(int argc, char **argv, gradcheck_args *a, cli_result *r, char *err,
                    size_t n)
{
    memset(a, 0, sizeof *a);
    int rc = cli_parse(&gradcheck_cmd, argc, argv, a, r, err, n);
    if (rc != CLI_OK)
        return rc;
    for (int k = 0; k < a->ops.n; k++)
        if (tg_opcase_count(a->ops.v[k]) == 0) {
            char sh[80];
            snprintf(err, n, "--op '%s': no op or module of that name (try 'tgrad gradcheck "
                     "--list')", cli_show(a->ops.v[k], sh, sizeof sh));
            return CLI_ERROR;
        }
    return CLI_OK;
}

void gradcheck_free(gradcheck_args *a, cli_result *r) { cli_free(&gradcheck_cmd, a, r); }


/* ---- run and report ------------------------------------------------------------------------- */
static bool wanted(const gradcheck_args *a, const tg_opcase *c)
{
    if (a->ops.n == 0)
        return true;
    for (int k = 0; k < a->ops.n; k++)
        if (!strcmp(a->ops.v[k], c->op))
            return true;
    return false;
}

static void report_list(FILE *f)
{
    for (int i = 0; i < tg_n_opcases; i++)
        fprintf(f, "%-12s %-16s %s\n", tg_opcases[i].op, tg_opcases[i].name,
                tg_opcases[i].shapes);
}

/* Column widths of the table: the longest op name, case name and shapes among the cases run
 * (at least the header's), so a long name never shifts the columns after it. */
typedef struct {
    int op, name, shapes;
} columns;

static int widest(int w, const char *s)
{
    int l = (int)strlen(s);
    return l > w ? l : w;
}

/* One case: its table row (and failure detail) to @p f. Returns 1 if it failed, 2 if it was
 * refused (--order 2: an op without a second-order rule), 0 if it passed, -1 if the context
 * could not be created. */
static int check_case(const gradcheck_args *a, const columns *w, int i, FILE *f)
{
    const tg_opcase *c = &tg_opcases[i];
    tg_dtype dt = a->dtype == 1 ? TG_F32 : TG_F64;
    tg_ctx *ctx = tg_ctx_new();
    if (!ctx)
        return -1;
    if (a->threads)
        tg_ctx_set_threads(ctx, (int)a->threads); /* capped once (cmd_gradcheck) */
    tg_ctx_seed(ctx, 1234 + (uint64_t)i);
    tg_tensor *y = c->build(ctx, dt);
    tg_gradcheck_report rep;
    tg_gradcheck_opts o = tg_gradcheck_defaults(dt);
    o.mode = (tg_gradcheck_mode)a->mode; /* the choices' order is the enum's */
    tg_status s = !y             ? tg_ctx_status(ctx)
                  : a->order > 1 ? tg_gradgradcheck(ctx, y, &o, &rep)
                                 : tg_gradcheck(ctx, y, &o, &rep);
    int failed = 0;
    if (s == TG_OK || s == TG_ERR_GRADCHECK) {
        fprintf(f, "%-*s %-*s %-*s %-5s %-10.2e %-10.2e %s\n", w->op, c->op, w->name, c->name,
                w->shapes, c->shapes, tg_dtype_str(dt), rep.max_abs_err, rep.max_rel_err,
                s == TG_OK ? "PASS" : "FAIL");
        if (s != TG_OK) {
            fprintf(f, "    %s\n", rep.message);
            failed = 1;
        }
    } else {
        bool refused = y && (a->order > 1 || a->mode > 0) && s == TG_ERR_NOGRAD;
        fprintf(f, "%-*s %-*s %-*s %-5s %-10s %-10s %s\n    %s: %s\n", w->op, c->op, w->name,
                c->name, w->shapes, c->shapes, tg_dtype_str(dt), "-", "-",
                refused ? "REFUSED" : "ERROR", tg_status_str(s), tg_ctx_message(ctx));
        failed = refused ? 2 : 1;
    }
    tg_ctx_free(ctx);
    return failed;
}

int cmd_gradcheck(int argc, char **argv)
{
    gradcheck_args a;
    cli_result r;
    char err[512];
    int ex = cli_parse_exit(gradcheck_parse(argc, argv, &a, &r, err, sizeof err),
                            &gradcheck_cmd, err);
    if (ex >= 0) {
        gradcheck_free(&a, &r);
        return ex;
    }
    if (a.list) {
        report_list(stdout);
        gradcheck_free(&a, &r);
        return 0;
    }
    if (a.threads) /* above the CPUs: lowered once, with one warning */
        a.threads = cli_threads_cap("gradcheck", a.threads);
    columns w = {12, 16, 6};
    for (int i = 0; i < tg_n_opcases; i++)
        if (wanted(&a, &tg_opcases[i])) {
            w.op = widest(w.op, tg_opcases[i].op);
            w.name = widest(w.name, tg_opcases[i].name);
            w.shapes = widest(w.shapes, tg_opcases[i].shapes);
        }
    printf("%-*s %-*s %-*s %-5s %-10s %-10s %s\n", w.op, "op", w.name, "case", w.shapes,
           "shapes", "dtype", "max_abs", "max_rel", "result");
    int failed = 0, refused = 0, run = 0, rc = 0;
    for (int i = 0; i < tg_n_opcases && !rc; i++) {
        if (!wanted(&a, &tg_opcases[i]))
            continue;
        run++;
        int f = check_case(&a, &w, i, stdout);
        if (f < 0) {
            fflush(stdout);
            fprintf(stderr, "tgrad gradcheck: out of memory\n");
            rc = 1;
        }
        failed += f == 1;
        refused += f == 2;
    }
    if (!rc && (a.order > 1 || a.mode > 0))
        printf("\n%d cases, %d passed, %d failed, %d refused (no %s rule yet)\n", run,
               run - failed - refused, failed, refused,
               a.mode > 0 && a.order > 1 ? "forward-mode or second-order"
               : a.mode > 0              ? "forward-mode"
                                         : "second-order");
    else if (!rc)
        printf("\n%d cases, %d passed, %d failed\n", run, run - failed, failed);
    gradcheck_free(&a, &r);
    return rc ? rc : failed || refused ? 1 : 0;
}
