/*
 * cmd_gradcheck.c - `tgrad gradcheck`: run tg_gradcheck on every case of tools/opcases.c and
 * print a table; exit 1 if any case fails.
 */
#include "cli.h"
#include "opcases.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void help(FILE *f)
{
    fprintf(f,
            "usage: tgrad gradcheck [--op NAME] [--dtype f32|f64] [--threads N] [--list]\n"
            "\n"
            "Compares analytic gradients with central differences for every registered op\n"
            "(and module), several shape cases each. f64 uses PyTorch's gradcheck defaults\n"
            "(eps 1e-6, atol 1e-5, rtol 1e-3); f32 uses eps 1e-3, atol 1e-2, rtol 1e-2.\n"
            "Also checks that a second backward is bitwise identical and that a zero\n"
            "upstream gradient gives zero gradients. Exits 1 if any case fails.\n"
            "\n"
            "  --op NAME       only cases of this op or module (repeatable)\n"
            "  --dtype D       f64 (default) or f32\n"
            "  --threads N     kernel threads (default: OpenMP's)\n"
            "  --list          list the ops and cases, run nothing\n");
}

int cmd_gradcheck(int argc, char **argv)
{
    const char *ops[64];
    int n_ops = 0, threads = 0;
    tg_dtype dt = TG_F64;
    bool list = false;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
            help(stdout);
            return 0;
        } else if (strcmp(a, "--list") == 0) {
            list = true;
        } else if (strcmp(a, "--op") == 0 && i + 1 < argc) {
            if (n_ops < 64)
                ops[n_ops++] = argv[++i];
        } else if (strcmp(a, "--dtype") == 0 && i + 1 < argc) {
            const char *d = argv[++i];
            if (strcmp(d, "f32") == 0)
                dt = TG_F32;
            else if (strcmp(d, "f64") == 0)
                dt = TG_F64;
            else {
                fprintf(stderr, "tgrad gradcheck: --dtype must be f32 or f64, not '%s'\n", d);
                return 2;
            }
        } else if (strcmp(a, "--threads") == 0 && i + 1 < argc) {
            threads = atoi(argv[++i]);
            if (threads < 1) {
                fprintf(stderr, "tgrad gradcheck: --threads must be >= 1\n");
                return 2;
            }
        } else {
            fprintf(stderr, "tgrad gradcheck: unknown or incomplete option '%s' (try --help)\n",
                    a);
            return 2;
        }
    }
    for (int k = 0; k < n_ops; k++) {
        if (tg_opcase_count(ops[k]) == 0) {
            fprintf(stderr, "tgrad gradcheck: no op or module named '%s' (try --list)\n", ops[k]);
            return 2;
        }
    }
    if (list) {
        for (int i = 0; i < tg_n_opcases; i++)
            printf("%-12s %-16s %s\n", tg_opcases[i].op, tg_opcases[i].name,
                   tg_opcases[i].shapes);
        return 0;
    }
    printf("%-12s %-16s %-46s %-5s %-10s %-10s %s\n", "op", "case", "shapes", "dtype",
           "max_abs", "max_rel", "result");
    int failed = 0, run = 0;
    for (int i = 0; i < tg_n_opcases; i++) {
        const tg_opcase *c = &tg_opcases[i];
        bool want = n_ops == 0;
        for (int k = 0; k < n_ops; k++)
            if (strcmp(ops[k], c->op) == 0)
                want = true;
        if (!want)
            continue;
        run++;
        tg_ctx *ctx = tg_ctx_new();
        if (!ctx) {
            fprintf(stderr, "tgrad gradcheck: out of memory\n");
            return 1;
        }
        if (threads)
            tg_ctx_set_threads(ctx, threads);
        tg_ctx_seed(ctx, 1234 + (uint64_t)i);
        tg_tensor *y = c->build(ctx, dt);
        tg_gradcheck_report rep;
        tg_status s = y ? tg_gradcheck(ctx, y, NULL, &rep) : tg_ctx_status(ctx);
        if (s == TG_OK || s == TG_ERR_GRADCHECK) {
            printf("%-12s %-16s %-46s %-5s %-10.2e %-10.2e %s\n", c->op, c->name, c->shapes,
                   tg_dtype_str(dt), rep.max_abs_err, rep.max_rel_err,
                   s == TG_OK ? "PASS" : "FAIL");
            if (s != TG_OK) {
                printf("    %s\n", rep.message);
                failed++;
            }
        } else {
            printf("%-12s %-16s %-46s %-5s %-10s %-10s ERROR\n    %s: %s\n", c->op, c->name,
                   c->shapes, tg_dtype_str(dt), "-", "-", tg_status_str(s),
                   tg_ctx_message(ctx));
            failed++;
        }
        tg_ctx_free(ctx);
    }
    printf("\n%d cases, %d passed, %d failed\n", run, run - failed, failed);
    return failed ? 1 : 0;
}
