/*
 * tools_access.c - see tools_access.h. The command files are included here, not linked, so
 * that their static tables and functions can be reached; each keeps its own code unchanged.
 * (They share no static names; _GNU_SOURCE covers the feature macros each one asks for.)
 */
#define _GNU_SOURCE
#include "tools_access.h"

#include "cmd_top.c"
#include "cmd_run.c"
#include "cmd_info.c"
#include "cmd_gradcheck.c"
#include "cmd_bench.c"
#include "cmd_export.c"
#include "cmd_average.c"
#include "cmd_sample.c"
#include "train_args.h"

typedef struct {
    const cli_command *cmd;
    size_t args_size;
} fz_table_entry;

static int n_tables;

static const fz_table_entry *tables(void)
{
    static fz_table_entry t[16];
    if (!n_tables) {
        int k = 0;
        t[k++] = (fz_table_entry){&top_cmd, sizeof(top_args)};
        for (int m = 0; m < RUN_N_MODULES; m++)
            t[k++] = (fz_table_entry){&run_cmds[m], sizeof(run_args)};
        t[k++] = (fz_table_entry){&info_cmd, sizeof(info_args)};
        t[k++] = (fz_table_entry){&gradcheck_cmd, sizeof(gradcheck_args)};
        t[k++] = (fz_table_entry){&bench_cmd, sizeof(bench_args)};
        t[k++] = (fz_table_entry){&export_cmd, sizeof(export_args)};
        t[k++] = (fz_table_entry){&average_cmd, sizeof(average_args)};
        t[k++] = (fz_table_entry){train_command(), sizeof(train_args)};
        t[k++] = (fz_table_entry){sample_command(), sizeof(sample_args)};
        t[k++] = (fz_table_entry){translate_command(), sizeof(translate_args)};
        n_tables = k;
    }
    return t;
}

int fz_n_tables(void)
{
    tables();
    return n_tables;
}

const cli_command *fz_table(int i, size_t *args_size)
{
    if (i < 0 || i >= fz_n_tables())
        return NULL;
    *args_size = tables()[i].args_size;
    return tables()[i].cmd;
}

int fz_export_exec(const char *ck, const char *out, bool force, int64_t *n_tensors, char *err,
                   size_t n)
{
    export_args a = {.checkpoint = ck, .out = out, .force = force};
    export_result res;
    int rc = export_exec(&a, &res, err, n);
    *n_tensors = res.n_tensors;
    return rc;
}

bool fz_info_file(const char *path, FILE *out, char *err, size_t n)
{
    return info_file(path, out, err, n);
}

int fz_sample_pick(const double *lg, int nv, double temp, int64_t top_k, double u, double *p)
{
    return pick(lg, nv, temp, top_k, u, p);
}
