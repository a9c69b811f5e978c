/*
 * cliopt.h - one option table per `tgrad` command, parsed with libc's getopt_long.
 *
 * A command describes its options once, in a table of cli_option; the same table
 *   - drives parsing (getopt_long, no abbreviation surprises: a value that looks like an option,
 *     `--steps --d-model`, is an error, not a value),
 *   - validates every value with its bounds (integers and numbers: range; choices: the list),
 *     with messages that say what the user gave and what is allowed,
 *   - prints `--help` (grouped, with metavars, defaults and ranges),
 *   - and validates values from elsewhere (a checkpoint's metadata) exactly like the command
 *     line's, through cli_set().
 * Values are stored by offset into the command's own argument struct:
 *   CLI_FLAG -> bool, CLI_INT -> int64_t, CLI_NUM -> double, CLI_STR / CLI_PATH -> const char *,
 *   CLI_CHOICE -> int (index into the '|'-separated choices), CLI_LIST -> cli_list.
 * String values point into argv (or into the caller's string for cli_set); CLI_LIST arrays are
 * heap-allocated and released by cli_free().
 * No globals besides getopt's own (optind, reset by cli_parse); nothing is printed except by
 * cli_help().
 */
#ifndef TG_CLIOPT_H
#define TG_CLIOPT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

typedef enum {
    CLI_FLAG,   /* no value; sets a bool */
    CLI_INT,    /* int64_t in [imin, imax] */
    CLI_NUM,    /* finite double in [fmin, fmax] (ends open with CLI_FMIN_OPEN/CLI_FMAX_OPEN) */
    CLI_STR,    /* any non-empty string */
    CLI_PATH,   /* a file path (non-empty) */
    CLI_CHOICE, /* one of choices "a|b|c"; stores the index as int */
    CLI_LIST    /* one or more values: `--text a b c` (values up to the next option) */
} cli_kind;

enum {
    CLI_FMIN_OPEN = 1u << 0, /* CLI_NUM: value must be > fmin */
    CLI_FMAX_OPEN = 1u << 1, /* CLI_NUM: value must be < fmax */
    CLI_HIDDEN = 1u << 2,    /* not shown by --help */
    CLI_REQUIRED = 1u << 3   /* cli_parse fails if the option is not given; --help says so */
};

typedef struct {
    const char **v; /* heap array of argv pointers */
    int n;
} cli_list;

typedef struct cli_option {
    const char *name;    /* long name without "--" */
    cli_kind kind;
    size_t offset;       /* where the value is stored in the command's argument struct */
    const char *metavar; /* "N", "FILE", NULL for flags */
    const char *help;    /* one line, with the default in parentheses */
    int64_t imin, imax;  /* CLI_INT bounds, inclusive */
    double fmin, fmax;   /* CLI_NUM bounds (inclusive unless flagged open) */
    const char *choices; /* CLI_CHOICE: "relu|gelu" */
    unsigned flags;
    const char *group;   /* --help heading; printed when it changes from the previous option's */
} cli_option;

#define CLI_MAX_OPTIONS 64

typedef struct cli_command {
    const char *name;        /* "train": messages read "tgrad train: ..." ("" or NULL: the
                              * top level, "tgrad: ..."; "run sdpa" for a subcommand) */
    const char *usage;       /* after "usage: tgrad <name> " */
    const char *description; /* paragraph(s) printed by --help after the usage line */
    const cli_option *opts;  /* terminated by an entry with name NULL */
    const char *positional;  /* metavar of positional arguments ("FILE..."), NULL: none */
    int min_positional, max_positional; /* bounds when positional is set */
} cli_command;

typedef struct cli_result {
    bool given[CLI_MAX_OPTIONS];  /* given[i]: opts[i] appeared on the command line */
    const char **positional;      /* heap array of argv pointers */
    int n_positional;
} cli_result;

/* Outcome of cli_parse. */
enum { CLI_OK = 0, CLI_HELP = 1, CLI_ERROR = 2 };

/*
 * Parse argv[1..argc) (argv[0] is the command name) into @p args (which the caller has filled
 * with defaults) and @p res. Returns CLI_OK, CLI_HELP (--help/-h seen: the caller prints
 * cli_help and exits 0), or CLI_ERROR with one line in @p err (without the "tgrad <cmd>: "
 * prefix). Call cli_free(cmd, args, res) afterwards in every case.
 */
int cli_parse(const cli_command *cmd, int argc, char **argv, void *args, cli_result *res,
              char *err, size_t err_size);

/*
 * Validate @p value for option @p o and store it in @p args, exactly as the command line would.
 * @p source names where the value came from in the error ("--steps", or
 * "checkpoint field 'train.steps'"). For CLI_FLAG, value must be "0"/"1"/"true"/"false".
 * Not for CLI_LIST. Returns true, or false with one line in @p err.
 */
bool cli_set(const cli_command *cmd, const cli_option *o, const char *value, void *args,
             const char *source, char *err, size_t err_size);

/* The option named @p name (without "--"), or NULL. */
const cli_option *cli_find(const cli_command *cmd, const char *name);
/* Index of @p o in cmd->opts (for res->given). */
int cli_index(const cli_command *cmd, const cli_option *o);
/* The name of choice @p i of CLI_CHOICE option @p o ("gelu" for 1 of "relu|gelu"; "?" when
 * out of range), written to @p buf, which is returned. */
const char *cli_choice_name(const cli_option *o, int i, char *buf, size_t n);
/* True if the option named @p name was given on the command line. */
bool cli_given(const cli_command *cmd, const cli_result *res, const char *name);

/* Print the usage line, description and the option table (grouped, with ranges) to @p f. */
void cli_help(const cli_command *cmd, FILE *f);

/* A command's handling of cli_parse's outcome @p pr (its own parse function's): CLI_OK returns
 * -1 (go on); CLI_HELP prints @p cmd's help to stdout and returns 0; CLI_ERROR prints
 * "tgrad <cmd>: <err>" to stderr and returns 2. A result >= 0 is the command's exit status. */
int cli_parse_exit(int pr, const cli_command *cmd, const char *err);

/* Free CLI_LIST arrays in @p args and the positional array of @p res (either may be NULL). */
void cli_free(const cli_command *cmd, void *args, cli_result *res);

/* Strict numeric parsing used by the table (exposed for other fields, e.g. metadata). */
bool cli_parse_i64(const char *s, int64_t *out);  /* base 10, whole string, no overflow */
bool cli_parse_f64(const char *s, double *out);   /* whole string, finite */

/* The shortest decimal (%.{1..17}g) that strtod() reads back as exactly @p v: 0.003, not
 * 0.0030000000000000001; 1e-05; 0.1. Non-finite values as %g ("inf", "nan"). Written to
 * @p buf (32 bytes are enough), which is returned. */
const char *cli_fmt_double(double v, char *buf, size_t n);

/* @p s made safe for a one-line message: control characters (C0, DEL, and C1 as UTF-8) shown
 * as '?', cut after 60 bytes (on a UTF-8 character boundary) with "...". Written to @p buf
 * (80 bytes are enough), which is returned. Every message of cli_parse and cli_set quotes
 * values through it, so hostile input (a checkpoint field holding a newline or a megabyte)
 * still gives one short line. */
const char *cli_show(const char *s, char *buf, size_t n);
/* cli_show() cutting after @p keep bytes instead of 60 (@p buf: keep + 4 bytes are enough). */
const char *cli_show_max(const char *s, size_t keep, char *buf, size_t n);

#endif
