/* core/print.c - printing tensors exactly as PyTorch 1.13 prints them
 * (repr of t.detach()), so a walkthrough in C shows the notebook's text:
 *   tensor([[0.4421, 0.5931, 0.5790],
 *           [0.4419, 0.6515, 0.5683]])
 *
 * PyTorch's rules, as its documentation and printing code define them:
 * - Only the elements shown count: past `threshold` elements every dim
 *   longer than 2 * edgeitems shows its first and last edgeitems, with
 *   "..." between.
 * - Floats: if every shown finite nonzero value is whole, they print as "2."
 *   (integer mode); otherwise with `precision` decimals. Scientific notation
 *   ("1.0000e-10") when max/min of their magnitudes exceeds 1000, the
 *   largest exceeds 1e8, or (not in integer mode) the smallest is below
 *   1e-4; sci_mode forces it on or off.
 * - One width for all elements: the widest shown finite nonzero value (or
 *   any shown value for integers and bools); nan and inf do not widen it.
 * - A row wraps at (linewidth - indent) / (width + 2) elements; nested rows
 *   are separated by as many newlines as dims remain.
 * - Non-default dtypes get a suffix: ", dtype=torch.float64". */
#include "core/core_internal.h"

#include <stdlib.h>

typedef struct print_opts {
    int precision;
    int64_t threshold;
    int edgeitems;
    int linewidth;
    int sci_mode; /* NB_SCI_AUTO, 0 or 1 */
} print_opts;

static const print_opts defaults = {4, 1000, 3, 80, NB_SCI_AUTO};
static print_opts opts = {4, 1000, 3, 80, NB_SCI_AUTO};

void nb_set_printoptions(int precision, int64_t threshold, int edgeitems, int linewidth,
                         int sci_mode) {
    if (precision >= 0) opts.precision = precision > 40 ? 40 : precision;
    if (threshold >= 0) opts.threshold = threshold;
    if (edgeitems >= 0) opts.edgeitems = edgeitems;
    if (linewidth >= 0) opts.linewidth = linewidth;
    opts.sci_mode = sci_mode < 0 ? NB_SCI_AUTO : sci_mode != 0;
}

void nb_reset_printoptions(void) { opts = defaults; }

typedef struct fmt {
    const nb_tensor *t;
    const void *buf; /* data or grad */
    bool summarize;  /* more than threshold elements: edges only */
    bool floating, int_mode, sci_mode;
    int width;
    /* over the shown finite nonzero floats */
    bool any;
    double min_abs, max_abs;
    size_t inner[NB_MAX_DIMS + 1]; /* elements per index of dim d: shape[d+1] * ... */
} fmt;

static double value_at(const fmt *f, size_t i) {
    switch (f->t->dtype) {
    case NB_F32: return ((const float *)f->buf)[i];
    case NB_F64: return ((const double *)f->buf)[i];
    case NB_I64: return (double)((const int64_t *)f->buf)[i];
    default: return ((const uint8_t *)f->buf)[i] ? 1.0 : 0.0;
    }
}

/* Python's float formatting: nan and inf without sign or digits. */
static int format_float(double v, char conv, int prec, char *s, size_t n) {
    if (isnan(v)) return snprintf(s, n, "nan");
    if (isinf(v)) return snprintf(s, n, v < 0 ? "-inf" : "inf");
    return conv == 'e' ? snprintf(s, n, "%.*e", prec, v) : snprintf(s, n, "%.*f", prec, v);
}

/* Element i as PyTorch writes it, before padding to the common width. */
static int format_one(const fmt *f, size_t i, char *s, size_t n) {
    if (f->t->dtype == NB_BOOL) return snprintf(s, n, "%s", value_at(f, i) != 0 ? "True" : "False");
    if (f->t->dtype == NB_I64)
        return snprintf(s, n, "%lld", (long long)((const int64_t *)f->buf)[i]);
    double v = value_at(f, i);
    if (f->sci_mode) return format_float(v, 'e', opts.precision, s, n);
    if (f->int_mode) {
        int len = format_float(v, 'f', 0, s, n);
        if (isfinite(v) && len + 1 < (int)n) s[len++] = '.', s[len] = '\0';
        return len;
    }
    return format_float(v, 'f', opts.precision, s, n);
}

/* Calls visit(f, i) for every element shown, in order. */
typedef void (*visit_fn)(fmt *f, size_t i);
static void walk(fmt *f, int dim, size_t offset, visit_fn visit) {
    const nb_tensor *t = f->t;
    if (dim == t->ndim) {
        visit(f, offset);
        return;
    }
    if (dim >= NB_MAX_DIMS) return; /* never (ndim <= NB_MAX_DIMS): for the compiler */
    size_t inner = f->inner[dim];
    int64_t n = t->shape[dim], edge = opts.edgeitems;
    bool cut = f->summarize && n > 2 * edge;
    for (int64_t i = 0; i < n; i++) {
        if (cut && i == edge && (i = n - edge) >= n) break; /* edgeitems 0: nothing after */
        walk(f, dim + 1, offset + (size_t)i * inner, visit);
    }
}

static void stats(fmt *f, size_t i) {
    double v = value_at(f, i);
    if (!f->floating) {
        char s[32];
        int len = format_one(f, i, s, sizeof s);
        if (len > f->width) f->width = len;
        return;
    }
    if (!isfinite(v) || v == 0.0) return;
    double a = fabs(v);
    if (!f->any || a < f->min_abs) f->min_abs = a;
    if (!f->any || a > f->max_abs) f->max_abs = a;
    f->any = true;
    if (v != ceil(v)) f->int_mode = false;
}

/* Room for "%.40f" of the largest double (309 digits + 41). */
#define ELEM_CHARS 400

static void widen(fmt *f, size_t i) {
    double v = value_at(f, i);
    if (!isfinite(v) || v == 0.0) return;
    char s[ELEM_CHARS];
    int len = f->sci_mode ? format_float(v, 'e', opts.precision, s, sizeof s)
              : f->int_mode ? format_float(v, 'f', 0, s, sizeof s) + 1
                            : format_float(v, 'f', opts.precision, s, sizeof s);
    if (len > f->width) f->width = len;
}

/* PyTorch's _Formatter: the mode and the width, from the shown elements. */
static void formatter(fmt *f) {
    f->floating = f->t->dtype == NB_F32 || f->t->dtype == NB_F64;
    f->int_mode = true;
    f->width = 1;
    walk(f, 0, 0, stats);
    if (f->floating && f->any) {
        bool wide = f->max_abs / f->min_abs > 1000.0 || f->max_abs > 1e8;
        f->sci_mode = wide || (!f->int_mode && f->min_abs < 1e-4);
        walk(f, 0, 0, widen);
    }
    if (f->floating && opts.sci_mode != NB_SCI_AUTO) f->sci_mode = opts.sci_mode;
}

static void put_elem(FILE *out, const fmt *f, size_t i) {
    char s[ELEM_CHARS];
    int len = format_one(f, i, s, sizeof s);
    fprintf(out, "%*s%s", f->width > len ? f->width - len : 0, "", s);
}

/* One row (the last dim): elements, " ..." in a summarized row, wrapped. */
static void print_row(FILE *out, const fmt *f, size_t offset, int indent) {
    int64_t n = f->t->shape[f->t->ndim - 1], edge = opts.edgeitems;
    bool cut = f->summarize && n > 2 * edge;
    double fit = floor((double)(opts.linewidth - indent) / (double)(f->width + 2));
    int64_t per_line = fit < 1 ? 1 : (int64_t)fit;
    int64_t shown = cut ? 2 * edge + 1 : n; /* the " ..." counts as an item */
    fputc('[', out);
    for (int64_t k = 0; k < shown; k++) {
        if (k) {
            if (k % per_line == 0)
                fprintf(out, ",\n%*s", indent + 1, "");
            else
                fputs(", ", out);
        }
        if (cut && k == edge)
            fputs(" ...", out);
        else
            put_elem(out, f, offset + (size_t)(cut && k > edge ? n - 2 * edge - 1 + k : k));
    }
    fputc(']', out);
}

static void print_rec(FILE *out, const fmt *f, int dim, size_t offset, int indent) {
    const nb_tensor *t = f->t;
    if (dim == t->ndim - 1) {
        print_row(out, f, offset, indent);
        return;
    }
    if (dim >= NB_MAX_DIMS - 1) return; /* never: for the compiler */
    size_t inner = f->inner[dim];
    int64_t n = t->shape[dim], edge = opts.edgeitems;
    bool cut = f->summarize && n > 2 * edge;
    fputc('[', out);
    for (int64_t i = 0; i < n; i++) {
        if (i) {
            fputc(',', out);
            for (int k = 0; k < t->ndim - dim - 1; k++) fputc('\n', out);
            fprintf(out, "%*s", indent + 1, "");
        }
        if (cut && i == edge) {
            fputs("...", out);
            i = n - edge - 1;
            continue;
        }
        print_rec(out, f, dim + 1, offset + (size_t)i * inner, indent + 1);
    }
    fputc(']', out);
}

/* An empty tensor, as PyTorch's _tensor_str writes it: "[]", its size
 * unless it has one dim, and the dtype suffix. */
static void print_empty(FILE *out, const nb_tensor *t) {
    fputs("tensor([]", out);
    if (t->ndim != 1) {
        char s[NB_MAX_DIMS * 24 + 8];
        nb_dims_str(t->ndim, t->shape, "()", s, sizeof s);
        fprintf(out, ", size=%s", s);
    }
    if (t->dtype == NB_F64) fputs(", dtype=torch.float64", out);
    fputc(')', out);
}

static void print_buf(FILE *out, const nb_tensor *t, const void *buf) {
    if (t->numel == 0) {
        print_empty(out, t);
        return;
    }
    fmt f = {.t = t, .buf = buf, .summarize = (int64_t)t->numel > opts.threshold};
    f.inner[t->ndim] = 1;
    for (int d = t->ndim - 1; d >= 0; d--)
        f.inner[d] = d + 1 < t->ndim ? f.inner[d + 1] * (size_t)t->shape[d + 1] : 1;
    formatter(&f);
    char *body = NULL;
    size_t len = 0;
    FILE *m = open_memstream(&body, &len);
    if (!m) return;
    fputs("tensor(", m);
    if (t->ndim == 0)
        put_elem(m, &f, 0);
    else
        print_rec(m, &f, 0, 0, 7);
    fclose(m);
    if (!body) return;
    fputs(body, out);
    if (t->dtype == NB_F64) {
        /* PyTorch's _add_suffixes: on the last line if it fits */
        const char *suffix = "dtype=torch.float64", *nl = strrchr(body, '\n');
        size_t last = nl ? (size_t)(body + len - nl) + 1 : len + 2;
        if (last + strlen(suffix) + 2 > (size_t)opts.linewidth)
            fprintf(out, ",\n%7s%s", "", suffix);
        else
            fprintf(out, ", %s", suffix);
    }
    fputc(')', out);
    free(body);
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
