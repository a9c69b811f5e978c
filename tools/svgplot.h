/* svgplot.h - a dependency-free SVG line chart of the training curves. */
#ifndef TG_SVGPLOT_H
#define TG_SVGPLOT_H

#include <stdbool.h>
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

/* Write an SVG with the train and validation curves, axes, ticks and a legend. Returns 0, or -1
 * with errno set. Written to a temporary name and renamed (atomic); the file gets the mode of
 * the one it replaces, or 0666 minus the umask like any new file. */
int svg_loss_plot(const char *path, const svg_series *train, const svg_series *val,
                  const char *val_label);

#endif
