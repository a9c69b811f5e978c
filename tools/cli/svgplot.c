/* svgplot.c - SVG loss curves (see svgplot.h). */
#define _DEFAULT_SOURCE
#include "svgplot.h"

#include "outpath.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void svg_series_init(svg_series *s)
{
    s->x = s->y = NULL;
    s->n = s->seen = 0;
    s->keep_every = 1;
}

bool svg_series_add(svg_series *s, double x, double y)
{
    if (!isfinite(x) || !isfinite(y))
        return true;
    if (s->keep_every < 1)
        s->keep_every = 1;
    if (!s->x) {
        s->x = malloc(sizeof(double) * SVG_MAX_POINTS);
        s->y = malloc(sizeof(double) * SVG_MAX_POINTS);
        if (!s->x || !s->y) {
            svg_series_free(s);
            return false;
        }
    }
    int64_t i = s->seen++;
    if (i % s->keep_every != 0)
        return true;
    if (s->n == SVG_MAX_POINTS) { /* thin: keep every other point, then every 2k-th offered */
        for (int64_t k = 0; 2 * k < s->n; k++) {
            s->x[k] = s->x[2 * k];
            s->y[k] = s->y[2 * k];
        }
        s->n = (s->n + 1) / 2;
        s->keep_every *= 2;
        if (i % s->keep_every != 0)
            return true;
    }
    s->x[s->n] = x;
    s->y[s->n] = y;
    s->n++;
    return true;
}

void svg_series_free(svg_series *s)
{
    free(s->x);
    free(s->y);
    s->x = s->y = NULL;
    s->n = 0;
}

/* Mode for a new output: that of the file it replaces, else 0666 minus the umask. */
/* ---- axes ------------------------------------------------------------------------------ */

/* A round step (1, 2 or 5 x 10^k) giving about @p target intervals over @p range > 0. */
static double nice_step(double range, int target)
{
    double raw = range / target, p = pow(10, floor(log10(raw))), f = raw / p;
    return (f <= 1 ? 1 : f <= 2 ? 2 : f <= 5 ? 5 : 10) * p;
}

/* A linear axis: [lo, hi] widened to multiples of its round step. */
typedef struct {
    double lo, hi, step;
    bool log; /* lo, hi are log10 of the values; ticks at decades (and 2s and 5s) */
} axis;

static axis linear_axis(double lo, double hi, int target)
{
    axis a = {lo, hi, 1, false};
    if (!(hi > lo)) { /* one value: an interval around it */
        double m = fabs(lo) > 0 ? fabs(lo) : 1;
        a.lo = lo - 0.5 * m;
        a.hi = hi + 0.5 * m;
        if (lo >= 0 && a.lo < 0)
            a.lo = 0;
    }
    a.step = nice_step(a.hi - a.lo, target);
    a.lo = floor(a.lo / a.step + 1e-9) * a.step;
    a.hi = ceil(a.hi / a.step - 1e-9) * a.step;
    if (!(a.hi > a.lo))
        a.hi = a.lo + a.step;
    return a;
}

/* A log10 axis over positive [lo, hi]: whole decades. */
static axis log_axis(double lo, double hi)
{
    axis a = {floor(log10(lo)), ceil(log10(hi)), 1, true};
    if (!(a.hi > a.lo))
        a.hi = a.lo + 1;
    return a;
}

/* Where value @p v falls on @p a, from 0 (lo) to 1 (hi). */
static double axis_pos(const axis *a, double v)
{
    double u = a->log ? log10(v) : v;
    return (u - a->lo) / (a->hi - a->lo);
}

/* The tick values of @p a (at most @p cap), written to @p v; returns their number. */
static int axis_ticks(const axis *a, double *v, int cap)
{
    int n = 0;
    if (a->log) {
        bool minor = a->hi - a->lo <= 2; /* few decades: 2s and 5s too */
        for (double d = a->lo; d <= a->hi + 1e-9 && n < cap; d++) {
            double base = pow(10, d);
            v[n++] = base;
            if (minor && d < a->hi - 1e-9) {
                if (n < cap)
                    v[n++] = 2 * base;
                if (n < cap)
                    v[n++] = 5 * base;
            }
        }
        return n;
    }
    for (double t = a->lo; t <= a->hi + a->step * 1e-6 && n < cap; t += a->step) {
        double r = round(t / a->step) * a->step; /* no accumulated drift: 0.30000000000000004 */
        v[n++] = fabs(r) < a->step * 1e-9 ? 0 : r;
    }
    return n;
}

/* A tick label: as many decimals as the step needs (0.05 -> "0.15"), none for whole numbers;
 * %g on a log axis. */
static void tick_label(const axis *a, double v, char *buf, size_t n)
{
    if (a->log || fabs(v) >= 1e7 || (a->step < 1e-4 && v != 0)) {
        snprintf(buf, n, "%g", v);
        return;
    }
    int dec = a->step >= 1 ? 0 : (int)ceil(-log10(a->step) - 1e-9);
    snprintf(buf, n, "%.*f", dec, v);
}

/* ---- drawing ----------------------------------------------------------------------------- */
#define W 720
#define L 70  /* left margin */
#define R 20
#define TOP 40
#define BOT 50
#define LOSS_H 330    /* loss panel height */
#define METRIC_H 150  /* metric panel height */
#define PANEL_GAP 56  /* between the panels (the metric panel's title) */
#define MAX_MARKERS 200

typedef struct {
    FILE *f;
    axis x;
    double top, h; /* the panel's top edge and height in pixels */
} panel;

static double px(const panel *p, double step) { return L + (W - L - R) * axis_pos(&p->x, step); }

static double py(const panel *p, const axis *y, double v)
{
    return p->top + p->h * (1 - axis_pos(y, v));
}

/* Frame, y grid with labels, x labels and the y axis title of one panel. */
static void draw_frame(const panel *p, const axis *y, const char *ytitle, bool percent)
{
    double t[64];
    char lab[48];
    int n = axis_ticks(y, t, 64);
    for (int i = 0; i < n; i++) {
        if (percent) { /* the axis is a fraction; its labels are percent */
            axis pa = *y;
            pa.step *= 100;
            tick_label(&pa, 100 * t[i], lab, sizeof lab);
        } else {
            tick_label(y, t[i], lab, sizeof lab);
        }
        fprintf(p->f, "<line x1=\"%d\" y1=\"%.1f\" x2=\"%d\" y2=\"%.1f\" stroke=\"#ddd\"/>"
                      "<text class=\"ytick\" x=\"%d\" y=\"%.1f\" text-anchor=\"end\">%s</text>\n",
                L, py(p, y, t[i]), W - R, py(p, y, t[i]), L - 6, py(p, y, t[i]) + 4, lab);
    }
    n = axis_ticks(&p->x, t, 64);
    for (int i = 0; i < n; i++) {
        tick_label(&p->x, t[i], lab, sizeof lab);
        fprintf(p->f, "<text class=\"xtick\" x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\">%s"
                      "</text>\n", px(p, t[i]), p->top + p->h + 18, lab);
    }
    fprintf(p->f, "<text x=\"16\" y=\"%.1f\" transform=\"rotate(-90 16 %.1f)\" "
                  "text-anchor=\"middle\">%s</text>\n"
                  "<rect x=\"%d\" y=\"%.1f\" width=\"%d\" height=\"%.1f\" fill=\"none\" "
                  "stroke=\"#444\"/>\n",
            p->top + p->h / 2, p->top + p->h / 2, ytitle, L, p->top, W - L - R, p->h);
}

/* One curve (points with y <= 0 left out on a log axis), and its markers. */
static void draw_curve(const panel *p, const axis *y, const svg_series *s, const char *color,
                       const char *width, const char *cls, bool markers)
{
    fprintf(p->f, "<polyline class=\"%s\" fill=\"none\" stroke=\"%s\" stroke-width=\"%s\" "
                  "points=\"", cls, color, width);
    for (int64_t i = 0; i < s->n; i++)
        if (!y->log || s->y[i] > 0)
            fprintf(p->f, "%.1f,%.1f ", px(p, s->x[i]), py(p, y, s->y[i]));
    fprintf(p->f, "\"/>\n");
    if (!markers || s->n > MAX_MARKERS)
        return;
    for (int64_t i = 0; i < s->n; i++)
        if (!y->log || s->y[i] > 0)
            fprintf(p->f, "<circle class=\"%s-marker\" cx=\"%.1f\" cy=\"%.1f\" r=\"3\" "
                          "fill=\"%s\"/>\n", cls, px(p, s->x[i]), py(p, y, s->y[i]), color);
}

static void range_of(const svg_series *s, bool positive, double *lo, double *hi, double *x0,
                     double *x1)
{
    for (int64_t i = 0; s && i < s->n; i++) {
        *x0 = fmin(*x0, s->x[i]);
        *x1 = fmax(*x1, s->x[i]);
        if (positive && !(s->y[i] > 0))
            continue;
        *lo = fmin(*lo, s->y[i]);
        *hi = fmax(*hi, s->y[i]);
    }
}

/* The SVG text of plot @p p to @p f. */
static void draw(FILE *f, const svg_plot *p)
{
    bool metric = p->metric && p->metric->n > 0;
    double lo = INFINITY, hi = -INFINITY, x0 = INFINITY, x1 = -INFINITY;
    range_of(p->train, p->log_y, &lo, &hi, &x0, &x1);
    range_of(p->val, p->log_y, &lo, &hi, &x0, &x1);
    double mlo = INFINITY, mhi = -INFINITY;
    if (metric)
        range_of(p->metric, false, &mlo, &mhi, &x0, &x1);
    if (!(x0 <= x1))
        x0 = x1 = 1;
    if (!(lo <= hi))
        lo = hi = p->log_y ? 1 : 0;
    panel top = {f, linear_axis(x0 > 1 ? x0 : 0, x1 > x0 ? x1 : x0 + 1, 6), TOP, LOSS_H};
    top.x.lo = fmax(top.x.lo, 0);
    /* a loss is >= 0: the linear axis starts at 0, so a curve's height is its proportion
     * (--plot-log shows the detail of small losses) */
    axis y = p->log_y ? log_axis(lo, hi) : linear_axis(0, hi > 0 ? hi : 0, 5);
    if (!p->log_y && y.lo < 0)
        y.lo = 0;
    int height = TOP + LOSS_H + BOT + (metric ? PANEL_GAP + METRIC_H : 0);
    fprintf(f, "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
               "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" "
               "viewBox=\"0 0 %d %d\" font-family=\"sans-serif\" font-size=\"12\">\n"
               "<rect width=\"100%%\" height=\"100%%\" fill=\"white\"/>\n"
               "<text x=\"%d\" y=\"24\" font-size=\"15\">tgrad training loss%s</text>\n",
            W, height, W, height, L, p->log_y ? " (log scale)" : "");
    draw_frame(&top, &y, "loss (nats/token)", false);
    const char *colors[3] = {"#1f77b4", "#d62728", "#2ca02c"};
    draw_curve(&top, &y, p->train, colors[0], "1", "train", false);
    if (p->val)
        draw_curve(&top, &y, p->val, colors[1], "2", "val", true);
    fprintf(f, "<rect x=\"%d\" y=\"%d\" width=\"12\" height=\"3\" fill=\"%s\"/>"
               "<text x=\"%d\" y=\"%d\">train loss</text>\n"
               "<rect x=\"%d\" y=\"%d\" width=\"12\" height=\"3\" fill=\"%s\"/>"
               "<text x=\"%d\" y=\"%d\">%s</text>\n",
            W - R - 250, TOP + 12, colors[0], W - R - 232, TOP + 16, W - R - 130, TOP + 12,
            colors[1], W - R - 112, TOP + 16, p->val_label ? p->val_label : "validation loss");
    double xlab = TOP + LOSS_H + 36;
    if (metric) {
        panel bot = {f, top.x, TOP + LOSS_H + PANEL_GAP, METRIC_H};
        axis m = {0, 1, 0.2, false}; /* 0-100% */
        bool target = p->metric_target > 0 && p->metric_target <= 1;
        fprintf(f, "<g id=\"metric\">\n<text x=\"%d\" y=\"%.1f\" font-size=\"13\">%s%s"
                   "</text>\n", L, bot.top - 8, p->metric_label ? p->metric_label : "metric",
                target ? " (training stops at the dashed target)" : "");
        draw_frame(&bot, &m, p->metric_axis ? p->metric_axis : "accuracy (%)", true);
        if (target)
            fprintf(f, "<line class=\"target\" x1=\"%d\" y1=\"%.1f\" x2=\"%d\" y2=\"%.1f\" "
                       "stroke=\"#888\" stroke-dasharray=\"5,4\"/>\n", L,
                    py(&bot, &m, p->metric_target), W - R, py(&bot, &m, p->metric_target));
        draw_curve(&bot, &m, p->metric, colors[2], "2", "metric", true);
        fprintf(f, "</g>\n");
        xlab = bot.top + METRIC_H + 36;
    }
    fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\">step</text>\n</svg>\n",
            L + (W - L - R) / 2.0, xlab);
}

static bool draw_emit(FILE *f, void *user)
{
    draw(f, user);
    return true;
}

bool svg_training_plot(const char *opt, const char *path, const svg_plot *p, char *err,
                       size_t n)
{
    return outpath_write(NULL, opt, path, draw_emit, (void *)p, err, n);
}
