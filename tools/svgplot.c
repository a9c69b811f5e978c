/* svgplot.c - SVG loss curves (see svgplot.h). */
#define _DEFAULT_SOURCE
#include "svgplot.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define W 720
#define H 420
#define L 70  /* left margin */
#define R 20
#define TOP 40
#define BOT 50

int svg_loss_plot(const char *path, const double *curve, int64_t n, const char *val_label)
{
    double lo = INFINITY, hi = -INFINITY;
    for (int64_t i = 0; i < n; i++)
        for (int k = 0; k < 2; k++) {
            double v = curve[3 * i + k];
            if (v == v) {
                lo = fmin(lo, v);
                hi = fmax(hi, v);
            }
        }
    if (!(lo <= hi)) {
        lo = 0;
        hi = 1;
    }
    if (hi - lo < 1e-9)
        hi = lo + 1;
    double pad = 0.05 * (hi - lo);
    lo -= pad;
    hi += pad;
    char tmp[4096];
    snprintf(tmp, sizeof tmp, "%s.tmp.XXXXXX", path);
    int fd = mkstemp(tmp);
    if (fd < 0)
        return -1;
    FILE *f = fdopen(fd, "w");
    if (!f) {
        close(fd);
        unlink(tmp);
        return -1;
    }
    double pw = W - L - R, ph = H - TOP - BOT, nx = n > 1 ? (double)(n - 1) : 1;
#define X(i) (L + pw * (double)(i) / nx)
#define Y(v) (TOP + ph * (hi - (v)) / (hi - lo))
    fprintf(f, "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
               "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" "
               "viewBox=\"0 0 %d %d\" font-family=\"sans-serif\" font-size=\"12\">\n"
               "<rect width=\"100%%\" height=\"100%%\" fill=\"white\"/>\n"
               "<text x=\"%d\" y=\"24\" font-size=\"15\">tgrad training loss</text>\n",
            W, H, W, H, L);
    for (int t = 0; t <= 5; t++) { /* y grid and labels */
        double v = lo + (hi - lo) * t / 5.0;
        fprintf(f, "<line x1=\"%d\" y1=\"%.1f\" x2=\"%d\" y2=\"%.1f\" stroke=\"#ddd\"/>"
                   "<text x=\"%d\" y=\"%.1f\" text-anchor=\"end\">%.3g</text>\n",
                L, Y(v), W - R, Y(v), L - 6, Y(v) + 4, v);
    }
    for (int t = 0; t <= 5; t++) { /* x labels */
        double i = nx * t / 5.0;
        fprintf(f, "<text x=\"%.1f\" y=\"%d\" text-anchor=\"middle\">%.0f</text>\n", X(i),
                H - BOT + 18, i + 1);
    }
    fprintf(f, "<text x=\"%.1f\" y=\"%d\" text-anchor=\"middle\">step</text>\n"
               "<text x=\"16\" y=\"%.1f\" transform=\"rotate(-90 16 %.1f)\" "
               "text-anchor=\"middle\">loss (nats/token)</text>\n"
               "<rect x=\"%d\" y=\"%d\" width=\"%.0f\" height=\"%.0f\" fill=\"none\" "
               "stroke=\"#444\"/>\n",
            L + pw / 2, H - 12, TOP + ph / 2, TOP + ph / 2, L, TOP, pw, ph);
    const char *colors[2] = {"#1f77b4", "#d62728"};
    for (int k = 0; k < 2; k++) {
        fprintf(f, "<polyline fill=\"none\" stroke=\"%s\" stroke-width=\"%s\" points=\"",
                colors[k], k ? "2" : "1");
        for (int64_t i = 0; i < n; i++) {
            double v = curve[3 * i + k];
            if (v == v)
                fprintf(f, "%.1f,%.1f ", X(i), Y(v));
        }
        fprintf(f, "\"/>\n");
    }
    fprintf(f, "<rect x=\"%d\" y=\"%d\" width=\"12\" height=\"3\" fill=\"%s\"/>"
               "<text x=\"%d\" y=\"%d\">train loss</text>\n"
               "<rect x=\"%d\" y=\"%d\" width=\"12\" height=\"3\" fill=\"%s\"/>"
               "<text x=\"%d\" y=\"%d\">%s</text>\n</svg>\n",
            W - R - 250, TOP + 12, colors[0], W - R - 232, TOP + 16, W - R - 130, TOP + 12,
            colors[1], W - R - 112, TOP + 16, val_label);
#undef X
#undef Y
    int bad = ferror(f);
    if (fflush(f) != 0 || fsync(fileno(f)) != 0)
        bad = 1;
    if (fclose(f) != 0 || bad || rename(tmp, path) != 0) {
        unlink(tmp);
        return -1;
    }
    return 0;
}
