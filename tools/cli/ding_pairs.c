/*
 * ding_pairs.c - English-German sentence pairs from the Ding dictionary (Debian's trans-de-en,
 * /usr/share/trans/de-en; GPL-2+, Frank Richter) as train.tsv, valid.tsv and test.tsv.
 *
 *   ding-pairs [--seed N] [--valid N] [--test N] [--source FILE] [--force] OUTDIR
 *
 * The dictionary has one entry per line, `German :: English`; ` | ` separates aligned
 * sub-entries on both sides (the same count on each). A sub-entry pair is a candidate when
 * both sides end in '.', '!' or '?'. Each side is then cleaned, in this order (the first rule
 * that applies to the English side, else to the German side, is the one counted):
 *   1. control characters (a tab, ...) or '~':                      dropped ("tilde/control")
 *   2. variants: "; " outside brackets separates alternatives. The first variant is kept; if
 *      it does not end in . ! ? itself, the next variant must start with a character that is
 *      not a lowercase ASCII letter (a new sentence), and the side's final punctuation is
 *      appended; otherwise (a ';' inside a sentence or a word list):  dropped ("semicolon")
 *   3. annotations removed with the space before them: {...} grammar, [...] labels (Br., ugs.),
 *      <...> spelling variants, (...) optional words and comments; a (...) that opens the
 *      side keeps its words ("(The) markets ..." -> "The markets ..."). Unbalanced or nested
 *      brackets:                                                     dropped ("brackets")
 *   4. spaces collapsed and trimmed, no space before . , ! ? ; :
 *   5. '/' between two non-digits (alternatives such as "argue/quarrel" or "a / b"):
 *                                                                     dropped ("slash")
 *   6. a placeholder word sth, sb, etw, jd, jdn, jdm, jds, jmd, jmdn, jmdm, jmds
 *      (dictionary phrases, not sentences):                           dropped ("placeholder")
 *   7. a side that starts with a lowercase letter (a-z, ä, ö, ü, ß: verb tables such as
 *      "swim!" / "schwimme!", fragments such as "and what then?"):    dropped ("lowercase start")
 *   8. the result must still end in . ! ? and hold a letter:          dropped ("not a sentence")
 *   0. invalid UTF-8 (checked first, with rule 1):                    dropped ("utf-8")
 * Pairs are deduplicated on the exact cleaned (English, German). The same English with two
 * German translations keeps both, and both go to the same split: the unique English sentences
 * (groups) are shuffled (splitmix64 + Fisher-Yates, the state seeded as in SPEC's batches with
 * epoch 0: seed XOR 0x9E3779B97F4A7C15) and dealt in that order: a group goes to test if it
 * fits in the room test has left (--test pairs in all), else to valid if it fits there
 * (--valid), else to train. Every file lists its pairs in the shuffled group order (a group's pairs sorted by
 * German, bytewise). Each file is written through tgrad's atomic writer (tools/cli/outpath.h: a
 * temporary in OUTDIR renamed into place; only a regular file is replaced, and only with
 * --force; the --source file never).
 */
#define _POSIX_C_SOURCE 200809L

#include "outpath.h"

#include <errno.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define PROG "ding-pairs"

enum { R_TILDE, R_SEMI, R_BRACKETS, R_SLASH, R_PLACEHOLDER, R_LOWER, R_NOT_SENTENCE, R_UTF8,
       R_COUNT };
static const char *rule_names[R_COUNT] = {"tilde/control", "semicolon", "brackets", "slash",
                                          "placeholder", "lowercase start", "not a sentence",
                                          "utf-8"};

typedef struct pair {
    char *en, *de;
} pair;

#if defined(__GNUC__)
__attribute__((format(printf, 1, 2), noreturn))
#endif
static void die(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, PROG ": ");
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    exit(1);
}

static void *xmalloc(size_t n)
{
    void *p = malloc(n ? n : 1);
    if (!p)
        die("out of memory");
    return p;
}

static bool is_end(char c) { return c == '.' || c == '!' || c == '?'; }

/* Strict UTF-8 (RFC 3629): no overlong forms, surrogates, or values above U+10FFFF. */
static bool utf8_ok(const unsigned char *s, size_t n)
{
    size_t i = 0;
    while (i < n) {
        unsigned c = s[i];
        size_t need;
        unsigned lo = 0x80, hi = 0xBF;
        if (c < 0x80) {
            i++;
            continue;
        } else if (c >= 0xC2 && c <= 0xDF)
            need = 1;
        else if (c >= 0xE0 && c <= 0xEF) {
            need = 2;
            lo = c == 0xE0 ? 0xA0 : 0x80;
            hi = c == 0xED ? 0x9F : 0xBF;
        } else if (c >= 0xF0 && c <= 0xF4) {
            need = 3;
            lo = c == 0xF0 ? 0x90 : 0x80;
            hi = c == 0xF4 ? 0x8F : 0xBF;
        } else
            return false;
        if (n - i <= need || s[i + 1] < lo || s[i + 1] > hi)
            return false;
        for (size_t k = 2; k <= need; k++)
            if ((s[i + k] & 0xC0) != 0x80)
                return false;
        i += need + 1;
    }
    return true;
}

static bool is_word_char(unsigned char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
           c >= 0x80;
}

static bool has_placeholder(const char *s)
{
    static const char *words[] = {"sth", "sb", "etw", "jd", "jdn", "jdm", "jds",
                                  "jmd", "jmdn", "jmdm", "jmds"};
    size_t n = strlen(s);
    for (size_t i = 0; i < n;) {
        if (!is_word_char((unsigned char)s[i])) {
            i++;
            continue;
        }
        size_t j = i;
        while (j < n && is_word_char((unsigned char)s[j]))
            j++;
        for (size_t w = 0; w < sizeof words / sizeof *words; w++)
            if (strlen(words[w]) == j - i && memcmp(s + i, words[w], j - i) == 0)
                return true;
        i = j;
    }
    return false;
}

static int close_of(char c)
{
    switch (c) {
    case '(': return ')';
    case '[': return ']';
    case '{': return '}';
    case '<': return '>';
    default: return 0;
    }
}

static bool is_close(char c) { return c == ')' || c == ']' || c == '}' || c == '>'; }

/* 2. Variants: where the first variant of s (n bytes) ends (*end; n if there is one only).
 * Returns -1, or R_SEMI when the ';' is inside a sentence or a word list. */
static int first_variant(const char *s, size_t n, size_t *end)
{
    *end = n;
    int depth = 0;
    for (size_t i = 0; i < n; i++) {
        if (close_of(s[i]))
            depth++;
        else if (is_close(s[i]))
            depth--;
        else if (s[i] == ';' && depth == 0) {
            size_t k = i;
            while (k > 0 && s[k - 1] == ' ')
                k--;
            size_t nx = i + 1;
            while (nx < n && s[nx] == ' ')
                nx++;
            if (k == 0 || nx >= n)
                return R_SEMI;
            if (!is_end(s[k - 1]) && s[nx] >= 'a' && s[nx] <= 'z')
                return R_SEMI;
            *end = k;
            break;
        }
    }
    return -1;
}

/* 3. Annotations: s (end bytes) without its bracketed parts, into tmp (*t bytes). Returns -1,
 * or R_BRACKETS for unbalanced or nested brackets. */
static int strip_annotations(const char *s, size_t end, char *tmp, size_t *t_out)
{
    size_t t = 0, i = 0;
    size_t lead = 0;
    while (lead < end && s[lead] == ' ')
        lead++;
    while (i < end) {
        char c = s[i];
        if (is_close(c))
            return R_BRACKETS;
        int cl = close_of(c);
        if (!cl) {
            tmp[t++] = c;
            i++;
            continue;
        }
        size_t j = i + 1;
        while (j < end && s[j] != cl) {
            if (close_of(s[j]) || is_close(s[j]))
                return R_BRACKETS;
            j++;
        }
        if (j >= end)
            return R_BRACKETS;
        if (c == '(' && i == lead) { /* "(The) markets": keep the words */
            memcpy(tmp + t, s + i + 1, j - i - 1);
            t += j - i - 1;
        } else {
            while (t > 0 && tmp[t - 1] == ' ')
                t--;
            tmp[t++] = ' ';
        }
        i = j + 1;
    }
    *t_out = t;
    return -1;
}

/* 5 to 8 on the cleaned side out (o bytes). Returns -1, or the rule that drops it. */
static int check_sentence(const char *out, size_t o)
{
    /* 5. slash */
    for (size_t k = 0; k < o; k++)
        if (out[k] == '/' &&
            !(k > 0 && k + 1 < o && out[k - 1] >= '0' && out[k - 1] <= '9' &&
              out[k + 1] >= '0' && out[k + 1] <= '9'))
            return R_SLASH;
    /* 6. placeholders */
    if (has_placeholder(out))
        return R_PLACEHOLDER;
    /* 7. a sentence starts with no lowercase letter (verb tables: "swim!", "schwimme!") */
    const unsigned char *u = (const unsigned char *)out;
    if ((u[0] >= 'a' && u[0] <= 'z') ||
        (u[0] == 0xC3 && (u[1] == 0xA4 || u[1] == 0xB6 || u[1] == 0xBC || u[1] == 0x9F)))
        return R_LOWER;
    /* 8. still a sentence */
    bool letter = false;
    for (size_t k = 0; k < o; k++)
        if ((out[k] >= 'a' && out[k] <= 'z') || (out[k] >= 'A' && out[k] <= 'Z') ||
            (unsigned char)out[k] >= 0xC0)
            letter = true;
    if (o < 2 || !is_end(out[o - 1]) || !letter)
        return R_NOT_SENTENCE;
    return -1;
}

/* Clean one side (n bytes at s) into out (at least n + 2 bytes). Returns -1 if kept, else
 * the rule that drops it. */
static int clean_side(const char *s, size_t n, char *out)
{
    for (size_t i = 0; i < n; i++)
        if ((unsigned char)s[i] < 0x20 || s[i] == 0x7f || s[i] == '~')
            return R_TILDE;
    if (!utf8_ok((const unsigned char *)s, n))
        return R_UTF8;
    size_t end;
    if (first_variant(s, n, &end) >= 0)
        return R_SEMI;
    char final = s[n - 1];
    char *tmp = xmalloc(n + 2);
    size_t t = 0;
    if (strip_annotations(s, end, tmp, &t) >= 0) {
        free(tmp);
        return R_BRACKETS;
    }
    /* 4. spaces */
    size_t o = 0;
    for (size_t k = 0; k < t; k++) {
        char c = tmp[k];
        if (c == ' ' && (o == 0 || out[o - 1] == ' '))
            continue;
        if ((is_end(c) || c == ',' || c == ';' || c == ':') && o > 0 && out[o - 1] == ' ')
            o--;
        out[o++] = c;
    }
    while (o > 0 && out[o - 1] == ' ')
        o--;
    free(tmp);
    if (o > 0 && !is_end(out[o - 1]) && is_end(final) && end < n)
        out[o++] = final; /* the first variant without its own punctuation */
    out[o] = '\0';
    return check_sentence(out, o);
}

/* ----- splitmix64 (SPEC: the batches' RNG) ----------------------------------------------- */
static uint64_t sm_next(uint64_t *s)
{
    *s += 0x9E3779B97F4A7C15ULL;
    uint64_t z = *s;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
}

static int cmp_pair(const void *a, const void *b)
{
    const pair *x = a, *y = b;
    int c = strcmp(x->en, y->en);
    return c ? c : strcmp(x->de, y->de);
}

/* ----- output ------------------------------------------------------------------------------ */
typedef struct outfile {
    const char *name;
    char path[4096];
    size_t count;
} outfile;

/* One split's file: the pairs of its groups, in the shuffled group order. */
typedef struct split_out {
    const pair *pairs;
    const size_t *order, *gstart;
    const int *split;
    size_t ng;
    int which;    /* 0 train, 1 valid, 2 test */
    size_t count; /* pairs written */
} split_out;

static bool emit_split(FILE *f, void *user)
{
    split_out *so = user;
    for (size_t k = 0; k < so->ng; k++) {
        if (so->split[k] != so->which)
            continue;
        size_t g = so->order[k];
        for (size_t p = so->gstart[g]; p < so->gstart[g + 1]; p++) {
            fprintf(f, "%s\t%s\n", so->pairs[p].en, so->pairs[p].de);
            so->count++;
        }
    }
    return true;
}

static void usage(FILE *f)
{
    fprintf(f,
            "usage: " PROG " [--seed N] [--valid N] [--test N] [--source FILE] [--force] OUTDIR\n"
            "Writes OUTDIR/train.tsv, valid.tsv and test.tsv (English<TAB>German, UTF-8) from\n"
            "the Ding dictionary (default source /usr/share/trans/de-en, Debian's trans-de-en;\n"
            "GPL-2+, Frank Richter). Defaults: --seed 1 --valid 500 --test 1000.\n"
            "--force replaces existing files; a missing OUTDIR is created (one level).\n");
}

static bool parse_u64(const char *s, uint64_t max, uint64_t *v)
{
    if (!s || !*s || *s == '-' || *s == '+')
        return false;
    errno = 0;
    char *e;
    unsigned long long x = strtoull(s, &e, 10);
    if (errno || *e || x > max)
        return false;
    *v = x;
    return true;
}

static void usage_err(const char *msg, const char *arg)
{
    fprintf(stderr, PROG ": %s%s%s\n", msg, arg ? " " : "", arg ? arg : "");
    fprintf(stderr, "Try '" PROG " --help'.\n");
    exit(2);
}

static char *read_all(const char *path, size_t *n)
{
    struct stat st;
    if (stat(path, &st) != 0)
        die("cannot open '%s': %s", path, strerror(errno));
    if (!S_ISREG(st.st_mode))
        die("'%s' is not a regular file", path);
    FILE *f = fopen(path, "rb");
    if (!f)
        die("cannot open '%s': %s", path, strerror(errno));
    size_t cap = (size_t)st.st_size + 1, len = 0;
    char *buf = xmalloc(cap + 1);
    for (;;) {
        if (len == cap) {
            cap *= 2;
            char *nb = realloc(buf, cap + 1);
            if (!nb)
                die("out of memory reading '%s'", path);
            buf = nb;
        }
        size_t got = fread(buf + len, 1, cap - len, f);
        len += got;
        if (got == 0)
            break;
    }
    if (ferror(f))
        die("cannot read '%s': %s", path, strerror(errno));
    fclose(f);
    buf[len] = '\0';
    *n = len;
    return buf;
}

/* The command line. */
typedef struct args {
    uint64_t seed, n_valid, n_test;
    const char *source, *outdir;
    bool force;
} args;

/* Parse the options into @p a; false for --help (usage printed). Usage errors exit. */
static bool parse_args(int argc, char **argv, args *a)
{
    for (int i = 1; i < argc; i++) {
        const char *s = argv[i];
        uint64_t *num = NULL;
        if (!strcmp(s, "--help") || !strcmp(s, "-h")) {
            usage(stdout);
            return false;
        } else if (!strcmp(s, "--force"))
            a->force = true;
        else if (!strcmp(s, "--seed"))
            num = &a->seed;
        else if (!strcmp(s, "--valid"))
            num = &a->n_valid;
        else if (!strcmp(s, "--test"))
            num = &a->n_test;
        else if (!strcmp(s, "--source")) {
            if (i + 1 >= argc)
                usage_err("--source needs a file", NULL);
            a->source = argv[++i];
        } else if (s[0] == '-' && s[1])
            usage_err("unknown option", s);
        else if (a->outdir)
            usage_err("more than one output directory:", s);
        else
            a->outdir = s;
        if (num) {
            if (i + 1 >= argc)
                usage_err("option needs a number:", s);
            uint64_t max = num == &a->seed ? UINT64_MAX : 100000000;
            if (!parse_u64(argv[i + 1], max, num))
                usage_err(num == &a->seed ? "--seed needs an integer in [0, 2^64):"
                                          : "--valid/--test need an integer in [0, 1e8]:",
                          argv[i + 1]);
            i++;
        }
    }
    if (!a->outdir)
        usage_err("no output directory given", NULL);
    return true;
}

/* OUTDIR (created if missing) and the three output paths: an existing file is replaced only
 * with --force, the input never. */
static void check_outputs(const args *a, outfile out[3])
{
    struct stat st;
    if (stat(a->outdir, &st) != 0 && errno == ENOENT && mkdir(a->outdir, 0777) != 0)
        die("cannot create the directory '%s': %s", a->outdir, strerror(errno));
    if (stat(a->outdir, &st) != 0 || !S_ISDIR(st.st_mode))
        die("'%s' is not a directory", a->outdir);
    for (int k = 0; k < 3; k++) {
        snprintf(out[k].path, sizeof out[k].path, "%s/%s", a->outdir, out[k].name);
        char err[1200];
        outpath_status os = outpath_check("output", out[k].path, a->force, NULL, err,
                                          sizeof err);
        if (os == OUTPATH_EXISTS)
            die("'%s' exists; give --force to replace it", out[k].path);
        if (os != OUTPATH_OK)
            die("%s", err);
        /* an output never replaces the input, even with --force */
        if (!outpath_not_input("output", out[k].path, "--source", a->source, err, sizeof err)) {
            fprintf(stderr, PROG ": %s\n", err);
            exit(2);
        }
    }
}

/* The pairs read from the dictionary, and what the reading counted. */
typedef struct scan {
    pair *pairs;
    size_t np, cap;
    size_t lines, entries, misaligned, candidates, dropped[R_COUNT];
} scan;

/* One aligned sub-entry pair, German d (dn bytes) and English e (enn bytes), trimmed: kept
 * cleaned if it is a candidate that survives the rules, else counted under the rule that
 * dropped it. */
static void scan_pair(scan *sc, const char *d, size_t dn, const char *e, size_t enn)
{
    while (dn && *d == ' ')
        d++, dn--;
    while (enn && *e == ' ')
        e++, enn--;
    while (dn && d[dn - 1] == ' ')
        dn--;
    while (enn && e[enn - 1] == ' ')
        enn--;
    if (!(dn && enn && is_end(d[dn - 1]) && is_end(e[enn - 1])))
        return;
    sc->candidates++;
    char *ce_ = xmalloc(enn + 2), *cde = xmalloc(dn + 2);
    int r = clean_side(e, enn, ce_);
    if (r < 0)
        r = clean_side(d, dn, cde);
    if (r >= 0) {
        sc->dropped[r]++;
        free(ce_);
        free(cde);
        return;
    }
    if (sc->np == sc->cap) {
        sc->cap *= 2;
        pair *nbuf = realloc(sc->pairs, sc->cap * sizeof *sc->pairs);
        if (!nbuf)
            die("out of memory");
        sc->pairs = nbuf;
    }
    sc->pairs[sc->np].en = ce_;
    sc->pairs[sc->np].de = cde;
    sc->np++;
}

/* One line of the dictionary (modified in place): an entry 'German :: English' with the same
 * number of " | " on both sides gives its aligned sub-entry pairs. */
static void scan_line(scan *sc, char *line)
{
    char *sep = strstr(line, " :: ");
    if (line[0] == '#' || !sep)
        return;
    sc->entries++;
    *sep = '\0';
    char *de = line, *en = sep + 4;
    size_t cd = 1, ce = 1;
    for (char *p = de; (p = strstr(p, " | ")); p += 3)
        cd++;
    for (char *p = en; (p = strstr(p, " | ")); p += 3)
        ce++;
    if (cd != ce) {
        sc->misaligned++;
        return;
    }
    for (size_t k = 0; k < cd; k++) {
        char *de_end = strstr(de, " | "), *en_end = strstr(en, " | ");
        size_t dn = de_end ? (size_t)(de_end - de) : strlen(de);
        size_t enn = en_end ? (size_t)(en_end - en) : strlen(en);
        scan_pair(sc, de, dn, en, enn);
        if (de_end)
            de = de_end + 3;
        if (en_end)
            en = en_end + 3;
    }
}

/* Every line of the dictionary text (n bytes, modified in place). */
static void scan_text(scan *sc, char *text, size_t n)
{
    char *line = text;
    while (line < text + n) {
        char *nl = memchr(line, '\n', (size_t)(text + n - line));
        char *le = nl ? nl : text + n;
        char *next = nl ? nl + 1 : text + n;
        if (le > line && le[-1] == '\r')
            le--;
        *le = '\0';
        sc->lines++;
        scan_line(sc, line);
        line = next;
    }
}

/* Deduplicate exact pairs, sorted so that each English sentence's pairs are together. Returns
 * how many were removed. */
static size_t dedup(scan *sc)
{
    pair *pairs = sc->pairs;
    size_t np = sc->np;
    if (np)
        qsort(pairs, np, sizeof *pairs, cmp_pair);
    size_t u = 0;
    for (size_t k = 0; k < np; k++) {
        if (u > 0 && !strcmp(pairs[u - 1].en, pairs[k].en) && !strcmp(pairs[u - 1].de, pairs[k].de)) {
            free(pairs[k].en);
            free(pairs[k].de);
            continue;
        }
        pairs[u++] = pairs[k];
    }
    sc->np = u;
    return np - u;
}

/* The groups of equal English sentences: gstart (ng + 1 entries) and their shuffled order. */
typedef struct groups {
    size_t ng, *gstart, *order;
    int *split; /* (ng) the file of the k-th group in order: 0 train, 1 valid, 2 test */
} groups;

static void group_and_shuffle(const scan *sc, uint64_t seed, groups *gr)
{
    size_t np = sc->np, ng = 0;
    gr->gstart = xmalloc((np + 1) * sizeof *gr->gstart);
    for (size_t k = 0; k < np; k++)
        if (k == 0 || strcmp(sc->pairs[k - 1].en, sc->pairs[k].en))
            gr->gstart[ng++] = k;
    gr->gstart[ng] = np;
    gr->order = xmalloc((ng + 1) * sizeof *gr->order);
    for (size_t g = 0; g < ng; g++)
        gr->order[g] = g;
    uint64_t s = seed ^ 0x9E3779B97F4A7C15ULL; /* SPEC: seed XOR golden * (epoch + 1), epoch 0 */
    for (size_t g = ng; g > 1; g--) {
        size_t j = (size_t)(sm_next(&s) % (uint64_t)g);
        size_t t = gr->order[g - 1];
        gr->order[g - 1] = gr->order[j];
        gr->order[j] = t;
    }
    gr->ng = ng;
}

/* Assign: test, then valid, then train. */
static void assign_splits(const args *a, groups *gr)
{
    gr->split = xmalloc((gr->ng + 1) * sizeof *gr->split);
    size_t room[3] = {0, a->n_valid, a->n_test};
    for (size_t k = 0; k < gr->ng; k++) {
        size_t g = gr->order[k], sz = gr->gstart[g + 1] - gr->gstart[g];
        int to = 0;
        if (sz <= room[2])
            to = 2;
        else if (sz <= room[1])
            to = 1;
        room[to] -= to ? sz : 0;
        gr->split[k] = to;
    }
    if (room[1] || room[2])
        die("could not fill --valid and --test exactly from the groups of equal English "
            "sentences");
}

/* The summary on standard output. */
static void report(const args *a, const scan *sc, size_t kept, size_t duplicates, size_t ng,
                   const outfile out[3])
{
    size_t np = sc->np;
    double words = 0;
    for (size_t k = 0; k < np; k++) {
        const char *e = sc->pairs[k].en;
        for (size_t c = 0; e[c]; c++)
            if (e[c] != ' ' && (c == 0 || e[c - 1] == ' '))
                words++;
    }
    printf("%s: %zu lines, %zu entries (%zu with unequal ' | ' counts, skipped)\n", a->source,
           sc->lines, sc->entries, sc->misaligned);
    printf("sentence pairs: %zu candidates, %zu kept, %zu dropped", sc->candidates, kept,
           sc->candidates - kept);
    for (int r = 0; r < R_COUNT; r++)
        printf("%s%s %zu", r ? ", " : " (", rule_names[r], sc->dropped[r]);
    printf(")\n");
    printf("unique pairs: %zu (%zu duplicates removed), %zu distinct English sentences, "
           "%.2f English words per pair\n",
           np, duplicates, ng, np ? words / (double)np : 0.0);
    printf("seed %llu: %s %zu, %s %zu, %s %zu pairs in '%s'\n", (unsigned long long)a->seed,
           out[0].name, out[0].count, out[1].name, out[1].count, out[2].name, out[2].count,
           a->outdir);
}

int main(int argc, char **argv)
{
    args a = {.seed = 1, .n_valid = 500, .n_test = 1000, .source = "/usr/share/trans/de-en"};
    if (!parse_args(argc, argv, &a))
        return 0;
    outfile out[3] = {{.name = "train.tsv"}, {.name = "valid.tsv"}, {.name = "test.tsv"}};
    check_outputs(&a, out);

    size_t n;
    char *text = read_all(a.source, &n);
    scan sc = {.cap = 1024};
    sc.pairs = xmalloc(sc.cap * sizeof *sc.pairs);
    scan_text(&sc, text, n);
    free(text);
    if (sc.entries == 0)
        die("'%s' holds no dictionary entries (lines 'German :: English')", a.source);

    size_t kept = sc.np;
    size_t duplicates = dedup(&sc);
    groups gr = {0};
    group_and_shuffle(&sc, a.seed, &gr);
    if (a.n_valid + a.n_test > sc.np)
        die("only %zu unique pairs: too few for --valid %llu and --test %llu", sc.np,
            (unsigned long long)a.n_valid, (unsigned long long)a.n_test);
    assign_splits(&a, &gr);

    /* each file through tgrad's atomic writer (a temporary renamed into place): a failure
     * leaves the file it would have replaced as it was */
    for (int k = 0; k < 3; k++) {
        split_out so = {sc.pairs, gr.order, gr.gstart, gr.split, gr.ng, k, 0};
        char err[1600];
        if (!outpath_write(NULL, "output", out[k].path, emit_split, &so, err, sizeof err))
            die("%s", err);
        out[k].count = so.count;
    }
    report(&a, &sc, kept, duplicates, gr.ng, out);
    for (size_t k = 0; k < sc.np; k++) {
        free(sc.pairs[k].en);
        free(sc.pairs[k].de);
    }
    free(sc.pairs);
    free(gr.gstart);
    free(gr.order);
    free(gr.split);
    return 0;
}
