/* svgplot.h - a dependency-free SVG line chart of the training curves. */
#ifndef TG_SVGPLOT_H
#define TG_SVGPLOT_H

#include <stdint.h>

/* curve[3*i] = train loss at step i+1 (NaN if absent), curve[3*i+1] = validation loss (NaN if
 * not evaluated). Writes an SVG with both curves, axes, ticks and a legend. Returns 0, or -1
 * with errno set. The file is written to a temporary name and renamed (atomic). */
int svg_loss_plot(const char *path, const double *curve, int64_t n, const char *val_label);

#endif
