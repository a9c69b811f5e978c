/* train_progress.c - the progress lines of `tgrad train` (see train_progress.h). */
#define _POSIX_C_SOURCE 200809L /* clock_gettime */
#include "train_progress.h"
#include "cliopt.h"

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <time.h>
#include <unistd.h>

double tprog_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void fmt_time(double s, char *buf, size_t n)
{
    if (!(s >= 0) || s > 1e9)
        s = 0;
    long long m = (long long)(s / 60);
    snprintf(buf, n, "%lld:%02d", m, (int)(s - 60 * (double)m));
}

/* Columns available to the live line: the terminal's width (stderr), else $COLUMNS, else 80;
 * minus one so the cursor never wraps. */
int tprog_line_width(void)
{
    struct winsize ws;
    int cols = 80;
    int64_t v;
    const char *c = getenv("COLUMNS");
    if (ioctl(STDERR_FILENO, TIOCGWINSZ, &ws) == 0 && ws.ws_col > 0)
        cols = ws.ws_col;
    else if (c && cli_parse_i64(c, &v) && v > 0 && v <= 10000)
        cols = (int)v;
    return cols > 1 ? cols - 1 : 1;
}

/* The progress line's forms for validation columns @p vbuf (long) and @p vshort, longest
 * first: each drops the least useful columns of the one before (elapsed, then tokens/s, then
 * the labels' room); the epoch (--pairs) and the learning rate stay in the first four. */
#define N_FORMS 7
static void progress_forms(const train_progress *t, int64_t s, double l, const char *lrs,
                           const char *vbuf, const char *vshort, char forms[N_FORMS][256])
{
    char el_s[32], eta_s[32], ep[32] = "", eps[32] = "";
    double el = tprog_now() - t->t0;
    fmt_time(el, el_s, sizeof el_s);
    fmt_time(t->trained ? el / (double)t->trained * (double)(t->end - s) : 0, eta_s,
             sizeof eta_s);
    if (t->pairs) {
        snprintf(ep, sizeof ep, "epoch %" PRId64 "  ", t->epoch + 1);
        snprintf(eps, sizeof eps, "ep %" PRId64 " ", t->epoch + 1);
    }
    char lrc[32]; /* the compact forms: one space after the rate */
    snprintf(lrc, sizeof lrc, "%s", lrs);
    if (lrc[0])
        lrc[strlen(lrc) - 1] = 0;
    int64_t total = t->steps;
    snprintf(forms[0], 256, "step %" PRId64 "/%" PRId64 "  %sloss %.4f  val %s  %s%.0f tok/s  %s "
             "elapsed  ETA %s", s, total, ep, l, vbuf, lrs, t->tok_s, el_s, eta_s);
    snprintf(forms[1], 256, "step %" PRId64 "/%" PRId64 "  %sloss %.4f  val %s  %s%.0f tok/s  "
             "ETA %s", s, total, ep, l, vbuf, lrs, t->tok_s, eta_s);
    snprintf(forms[2], 256, "step %" PRId64 "/%" PRId64 "  %sloss %.4f  val %s  %sETA %s", s,
             total, ep, l, vbuf, lrs, eta_s);
    snprintf(forms[3], 256, "%" PRId64 "/%" PRId64 " %sloss %.4f val %s %sETA %s", s, total, eps,
             l, vbuf, lrc, eta_s);
    snprintf(forms[4], 256, "%" PRId64 "/%" PRId64 " loss %.4f val %s %sETA %s", s, total, l,
             vshort, lrc, eta_s);
    snprintf(forms[5], 256, "%" PRId64 "/%" PRId64 " loss %.3f val %s ETA %s", s, total, l,
             vshort, eta_s);
    snprintf(forms[6], 256, "%" PRId64 "/%" PRId64 " loss %.3f", s, total, l);
}

/* The validation columns: what the last evaluation measured (a resumed run: its checkpoint's
 * best validation loss until it evaluates); @p probe: placeholders as wide as a measured
 * value, so the form chosen does not change when the first evaluation arrives. */
static void progress_val(const train_progress *t, bool probe, char *vbuf, char *vshort, size_t n)
{
    double v = probe ? 10.0 : t->last_val, a = probe ? 0.5 : t->acc;
    double b = probe ? 10.0 : t->pairs ? t->bleu : NAN, ta = probe ? 0.5 : t->tok_acc;
    snprintf(vbuf, n, "-");
    snprintf(vshort, n, "-");
    if (t->pairs && isfinite(b)) {
        snprintf(vbuf, n, "%.4f BLEU %.2f", v, b);
        snprintf(vshort, n, "BLEU %.1f", b);
    } else if (t->s2s && isfinite(a)) {
        snprintf(vbuf, n, "%.4f seq %.2f%% tok %.2f%%", v, 100 * a, 100 * ta);
        snprintf(vshort, n, "seq %.1f%%", 100 * a);
    } else if (!t->text && !t->pairs && isfinite(a)) {
        snprintf(vbuf, n, "%.4f acc %.2f%%", v, 100 * a);
        snprintf(vshort, n, "acc %.1f%%", 100 * a);
    } else if (isfinite(v)) {
        snprintf(vbuf, n, "%.4f", v);
        snprintf(vshort, n, "%.3f", v);
    }
}

/*
 * One progress line for step @p s (1-based) with train loss @p l at learning rate @p lr.
 * @p width > 0: the longest form that fits in width columns (cut if even the shortest does
 * not), chosen as if the validation columns were filled, so the columns stay the same before
 * and after the first evaluation; 0: the full form.
 */
static void progress_text(const train_progress *t, int64_t s, double l, double lr, bool with_lr,
                          int width, char *buf, size_t n)
{
    char vbuf[64], vshort[64], pbuf[64], pshort[64];
    progress_val(t, false, vbuf, vshort, sizeof vbuf);
    char lrs[32] = "";
    if (with_lr)
        snprintf(lrs, sizeof lrs, "lr %.2e  ", lr);
    char forms[N_FORMS][256], probe[N_FORMS][256];
    progress_forms(t, s, l, lrs, vbuf, vshort, forms);
    int k = 0;
    if (width > 0) {
        bool never = t->no_val; /* no validation set */
        progress_val(t, !never, pbuf, pshort, sizeof pbuf);
        progress_forms(t, s, l, lrs, pbuf, pshort, probe);
        while (k < N_FORMS - 1 && (strlen(forms[k]) > (size_t)width ||
                                   strlen(probe[k]) > (size_t)width))
            k++;
    }
    size_t len = strlen(forms[k]);
    if (width > 0 && len > (size_t)width)
        len = (size_t)width;
    if (len >= n)
        len = n - 1;
    memcpy(buf, forms[k], len);
    buf[len] = 0;
}

/* @p final: an evaluation or the last step (a line that stays); otherwise a live update. */
void tprog_line(train_progress *t, int64_t s, double l, double lr, bool final)
{
    char line[300];
    if (!t->tty) { /* a log or mpirun: the longest form within 80 columns, one write */
        progress_text(t, s, l, lr, true, 80, line, sizeof line - 1);
        strcat(line, "\n");
        fputs(line, stderr);
        return;
    }
    progress_text(t, s, l, lr, final, t->width, line, sizeof line);
    size_t len = strlen(line);
    int pad = t->last_len > len ? (int)(t->last_len - len) : 0; /* blank the old line's rest */
    fprintf(stderr, "\r%s%*s%s", line, pad, "", final ? "\n" : "");
    if (final) {
        t->last_len = 0;
    } else {
        t->last_len = len;
    }
    fflush(stderr);
}

/* Before an error message: end a live line so the message starts on its own line. */
void tprog_end_live(train_progress *t)
{
    if (t->tty && t->last_len) {
        fputc('\n', stderr);
        t->last_len = 0;
    }
}

