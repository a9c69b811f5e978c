/* svgplot.c - SVG loss curves (see svgplot.h). */
#define _DEFAULT_SOURCE
#include "svgplot.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <errno.h>

#define W 720
#define H 420
#define L 70  /* left margin */
#define R 20
#define TOP 40
#define BOT 50

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
static mode_t output_mode(const char *path)
{
    struct stat sb;
    if (stat(path, &sb) == 0 && S_ISREG(sb.st_mode))
        return sb.st_mode & 07777;
    mode_t um = umask(0);
    umask(um);
    return 0666 & ~um;
}

int svg_loss_plot(const char *path, const svg_series *train, const svg_series *val,
                  const char *val_label)
{
    const svg_series *cs[2] = {train, val};
    double lo = INFINITY, hi = -INFINITY, x0 = INFINITY, x1 = -INFINITY;
    for (int k = 0; k < 2; k++)
        for (int64_t i = 0; i < cs[k]->n; i++) {
            lo = fmin(lo, cs[k]->y[i]);
            hi = fmax(hi, cs[k]->y[i]);
            x0 = fmin(x0, cs[k]->x[i]);
            x1 = fmax(x1, cs[k]->x[i]);
        }
    if (!(lo <= hi)) {
        lo = 0;
        hi = 1;
    }
    if (!(x0 <= x1)) {
        x0 = 1;
        x1 = 1;
    }
    if (hi - lo < 1e-9)
        hi = lo + 1;
    double pad = 0.05 * (hi - lo);
    lo -= pad;
    hi += pad;
    char tmp[4096];
    if (snprintf(tmp, sizeof tmp, "%s.tmp.XXXXXX", path) >= (int)sizeof tmp) {
        errno = ENAMETOOLONG;
        return -1;
    }
    int fd = mkstemp(tmp);
    if (fd < 0)
        return -1;
    if (fchmod(fd, output_mode(path)) != 0) {
        int e = errno;
        close(fd);
        unlink(tmp);
        errno = e;
        return -1;
    }
    FILE *f = fdopen(fd, "w");
    if (!f) {
        int e = errno;
        close(fd);
        unlink(tmp);
        errno = e;
        return -1;
    }
    double pw = W - L - R, ph = H - TOP - BOT, nx = x1 > x0 ? x1 - x0 : 1;
#define X(s) (L + pw * ((s) - x0) / nx)
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
        double s = x0 + nx * t / 5.0;
        fprintf(f, "<text x=\"%.1f\" y=\"%d\" text-anchor=\"middle\">%.0f</text>\n", X(s),
                H - BOT + 18, s);
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
        for (int64_t i = 0; i < cs[k]->n; i++)
            fprintf(f, "%.1f,%.1f ", X(cs[k]->x[i]), Y(cs[k]->y[i]));
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
    int e = errno;
    if (fclose(f) != 0 || bad || rename(tmp, path) != 0) {
        if (!bad)
            e = errno;
        unlink(tmp);
        errno = e ? e : EIO;
        return -1;
    }
    return 0;
}
