/* gpt_svg.c - loss.svg: the loss curves of a log.jsonl, drawn as SVG. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "gpt_flags.h"
#include "gpt_svg.h"

typedef struct series {
    int n, cap;
    double *x, *y;
} series;

static void push(series *s, double x, double y) {
    if (s->n == s->cap) {
        int cap = s->cap ? 2 * s->cap : 256;
        double *nx = realloc(s->x, (size_t)cap * sizeof *nx);
        if (nx) s->x = nx;
        double *ny = realloc(s->y, (size_t)cap * sizeof *ny);
        if (ny) s->y = ny;
        if (!nx || !ny) return;
        s->cap = cap;
    }
    s->x[s->n] = x, s->y[s->n++] = y;
}

#define W 640.0
#define H 400.0
#define L 60.0  /* left margin */
#define BOT 40.0
#define TOP 20.0
#define R 20.0

typedef struct frame {
    double x0, x1, y0, y1;
} frame;

static double px(const frame *f, double x) { return L + (x - f->x0) / (f->x1 - f->x0) * (W - L - R); }
static double py(const frame *f, double y) { return H - BOT - (y - f->y0) / (f->y1 - f->y0) * (H - BOT - TOP); }

static void polyline(FILE *o, const frame *f, const series *s, const char *color, double width) {
    if (s->n == 0) return;
    fprintf(o, "<polyline fill=\"none\" stroke=\"%s\" stroke-width=\"%g\" points=\"", color, width);
    for (int i = 0; i < s->n; i++) fprintf(o, "%.1f,%.1f ", px(f, s->x[i]), py(f, s->y[i]));
    fputs("\"/>\n", o);
    for (int i = 0; width > 1 && i < s->n; i++) /* the evaluations: a dot each */
        fprintf(o, "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"3\" fill=\"%s\"/>\n", px(f, s->x[i]),
                py(f, s->y[i]), color);
}

static void draw(FILE *o, const series *s) {
    frame f = {0, 1, INFINITY, -INFINITY};
    for (int k = 0; k < 3; k++)
        for (int i = 0; i < s[k].n; i++) {
            if (s[k].x[i] > f.x1) f.x1 = s[k].x[i];
            if (s[k].y[i] < f.y0) f.y0 = s[k].y[i];
            if (s[k].y[i] > f.y1) f.y1 = s[k].y[i];
        }
    if (!(f.y0 < f.y1)) f.y0 = isfinite(f.y0) ? f.y0 - 1 : 0, f.y1 = f.y0 + 2;
    fprintf(o, "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%.0f\" height=\"%.0f\" "
               "font-family=\"sans-serif\" font-size=\"12\">\n<rect width=\"100%%\" "
               "height=\"100%%\" fill=\"white\"/>\n", W, H);
    for (int t = 0; t <= 4; t++) {
        double y = f.y0 + (f.y1 - f.y0) * t / 4, x = f.x0 + (f.x1 - f.x0) * t / 4;
        fprintf(o, "<line x1=\"%g\" y1=\"%.1f\" x2=\"%g\" y2=\"%.1f\" stroke=\"#ddd\"/>"
                   "<text x=\"%g\" y=\"%.1f\" text-anchor=\"end\">%.2f</text>\n",
                L, py(&f, y), W - R, py(&f, y), L - 4, py(&f, y) + 4, y);
        fprintf(o, "<text x=\"%.1f\" y=\"%g\" text-anchor=\"middle\">%.0f</text>\n", px(&f, x),
                H - BOT + 16, x);
    }
    fprintf(o, "<text x=\"%g\" y=\"%g\" text-anchor=\"middle\">iteration</text>\n"
               "<text x=\"14\" y=\"%g\" transform=\"rotate(-90 14 %g)\" "
               "text-anchor=\"middle\">loss (nats/token)</text>\n",
            (L + W - R) / 2, H - 6, H / 2, H / 2);
    polyline(o, &f, &s[0], "#9ecae1", 1);
    polyline(o, &f, &s[1], "#08519c", 2);
    polyline(o, &f, &s[2], "#d94801", 2);
    fprintf(o, "<text x=\"%g\" y=\"34\" fill=\"#9ecae1\">loss per iteration</text>\n"
               "<text x=\"%g\" y=\"50\" fill=\"#08519c\">train loss (eval)</text>\n"
               "<text x=\"%g\" y=\"66\" fill=\"#d94801\">val loss (eval)</text>\n</svg>\n",
            W - 180, W - 180, W - 180);
}

int gpt_write_loss_svg(const char *prog, const char *log_path, const char *svg_path) {
    size_t len;
    char *text = gpt_read_file(prog, log_path, &len);
    if (!text) return GPT_EXIT_USAGE;
    series s[3] = {{0}}; /* per iteration, eval train, eval val */
    for (char *line = strtok(text, "\n"); line; line = strtok(NULL, "\n")) {
        double it, a, b;
        if (sscanf(line, "{\"iter\": %lf, \"loss\": %lf", &it, &a) == 2) {
            push(&s[0], it, a);
        } else if (sscanf(line, "{\"iter\": %lf, \"train_loss\": %lf, \"val_loss\": %lf", &it, &a,
                          &b) == 3) {
            push(&s[1], it, a);
            push(&s[2], it, b);
        }
    }
    free(text);
    char tmp[4200];
    snprintf(tmp, sizeof tmp, "%s.tmp", svg_path);
    FILE *o = fopen(tmp, "w");
    if (o) draw(o, s);
    int bad = !o || fclose(o) || rename(tmp, svg_path);
    for (int k = 0; k < 3; k++) free(s[k].x), free(s[k].y);
    if (bad) {
        remove(tmp);
        return gpt_fail(prog, "%s: cannot write it", svg_path);
    }
    return 0;
}
