/* core/print.c - printing tensors the way PyTorch does, so a walkthrough in C
 * shows the same text as the notebook it follows:
 *   tensor([[0.4421, 0.5931, 0.5790],
 *           [0.4419, 0.6515, 0.5683]])
 * Floats get 4 decimals (or "2." style when every finite value is whole),
 * one width for all elements, rows wrapped at 80 columns. */
#include "nb_internal.h"

typedef struct fmt {
    const nb_tensor *t;
    const void *buf; /* data or grad */
    bool whole;      /* every finite value is an integer: print "2." */
    int width;
} fmt;

static double value_at(const fmt *f, size_t i) {
    const nb_tensor *t = f->t;
    switch (t->dtype) {
    case NB_F32: return ((const float *)f->buf)[i];
    case NB_F64: return ((const double *)f->buf)[i];
    case NB_I64: return (double)((const int64_t *)f->buf)[i];
    default: return ((const uint8_t *)f->buf)[i] ? 1.0 : 0.0;
    }
}

static int format_one(const fmt *f, size_t i, char *s, size_t n) {
    double v = value_at(f, i);
    if (f->t->dtype == NB_BOOL) return snprintf(s, n, "%s", v != 0.0 ? "True" : "False");
    if (f->t->dtype == NB_I64)
        return snprintf(s, n, "%lld", (long long)((const int64_t *)f->buf)[i]);
    if (isnan(v)) return snprintf(s, n, "nan");
    if (isinf(v)) return snprintf(s, n, v < 0 ? "-inf" : "inf");
    if (f->whole) return snprintf(s, n, "%.0f.", v);
    if (v == 0.0) v = 0.0; /* print -0.0 as 0.0000, as PyTorch does */
    return snprintf(s, n, "%.4f", v);
}

static void print_rec(FILE *out, const fmt *f, int dim, size_t offset, int indent) {
    const nb_tensor *t = f->t;
    char s[64];
    if (dim == t->ndim) {
        int len = format_one(f, offset, s, sizeof s);
        fprintf(out, "%*s%s", f->width - len, "", s);
        return;
    }
    size_t inner = 1;
    for (int d = dim + 1; d < t->ndim; d++) inner *= (size_t)t->shape[d];
    fputc('[', out);
    int64_t n = t->shape[dim];
    if (dim == t->ndim - 1) {
        int per_line = (80 - indent) / (f->width + 2);
        if (per_line < 1) per_line = 1;
        for (int64_t i = 0; i < n; i++) {
            if (i) {
                if (i % per_line == 0)
                    fprintf(out, ",\n%*s", indent + 1, "");
                else
                    fputs(", ", out);
            }
            print_rec(out, f, dim + 1, offset + (size_t)i, indent + 1);
        }
    } else {
        for (int64_t i = 0; i < n; i++) {
            if (i) {
                fputc(',', out);
                for (int k = 0; k < t->ndim - dim - 1; k++) fputc('\n', out);
                fprintf(out, "%*s", indent + 1, "");
            }
            print_rec(out, f, dim + 1, offset + (size_t)i * inner, indent + 1);
        }
    }
    fputc(']', out);
}

static void print_buf(FILE *out, const nb_tensor *t, const void *buf) {
    fmt f = {t, buf, t->dtype == NB_F32 || t->dtype == NB_F64, 1};
    for (size_t i = 0; i < t->numel && f.whole; i++) {
        double v = value_at(&f, i);
        if (isfinite(v) && v != floor(v)) f.whole = false;
    }
    char s[64];
    for (size_t i = 0; i < t->numel; i++) {
        int len = format_one(&f, i, s, sizeof s);
        if (len > f.width) f.width = len;
    }
    fputs("tensor(", out);
    print_rec(out, &f, 0, 0, 7);
    fputc(')', out);
}

void nb_fprint(FILE *out, const nb_tensor *t) {
    if (!out) return;
    if (!t || !t->data) {
        fputs("None", out);
        return;
    }
    print_buf(out, t, t->data);
}

void nb_print(const nb_tensor *t) {
    nb_fprint(stdout, t);
    fputc('\n', stdout);
}

void nb_print_grad(const nb_tensor *t) {
    if (!t || !t->grad)
        fputs("None", stdout);
    else
        print_buf(stdout, t, t->grad);
    fputc('\n', stdout);
}
