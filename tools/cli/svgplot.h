/* svgplot.h - a dependency-free SVG line chart of the training curves. */
#ifndef TG_SVGPLOT_H
#define TG_SVGPLOT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Points kept per curve: a longer run is thinned evenly (every 2nd, 4th, ... point), so memory
 * stays bounded whatever --steps is. */
#define SVG_MAX_POINTS 4096

/* A curve of (step, value) points. Zero-initialise (or svg_series_init). */
typedef struct {
    double *x, *y;      /* SVG_MAX_POINTS each once the first point is added */
    int64_t n;          /* points kept */
    int64_t seen;       /* points offered */
    int64_t keep_every; /* the i-th point offered is kept if i % keep_every == 0 */
} svg_series;

void svg_series_init(svg_series *s);
/* Offer a point; non-finite values are dropped. Returns false if out of memory. */
bool svg_series_add(svg_series *s, double x, double y);
void svg_series_free(svg_series *s);

/* What svg_training_plot draws. */
typedef struct {
    const svg_series *train, *val; /* loss curves (val may be empty) */
    const char *val_label;         /* "validation loss", "held-out loss" */
    bool log_y;                    /* the loss axis on a log scale (values <= 0 left out) */
    /* the metric the run stops on (task accuracy, as a fraction in [0, 1]), drawn in a second
     * panel below the losses with the same step axis; NULL or empty: no second panel */
    const svg_series *metric;
    const char *metric_label;      /* "held-out token accuracy" */
    const char *metric_axis;       /* its axis title (NULL: "accuracy (%)"), e.g. "BLEU" */
    /* drawn as a dashed line when in (0, 1] (--target-acc, --target-bleu / 100), and then
     * the panel's title says training stops there */
    double metric_target;
} svg_plot;

/*
 * Write an SVG of the training curves: the train loss (a line) and the validation loss (a line
 * with a marker on each point while there are at most 200 of them), round tick values (1, 2
 * or 5 x 10^k; decades and their 2s and 5s on a log axis), a loss axis from 0 to above the
 * largest loss (a loss is >= 0; the curve's height shows its real proportion) or, with log_y,
 * from the decade below the smallest loss; then, with a metric, a second panel (0-100, the
 * target dashed). Written by outpath_write (the library's atomic writer: a regular file only,
 * a temporary renamed into place, the mode of the file replaced kept). false with one line
 * naming @p opt and @p path in @p err.
 */
bool svg_training_plot(const char *opt, const char *path, const svg_plot *p, char *err,
                       size_t n);

#endif
