/* optim/clip.c - gradient clipping (PyTorch's clip_grad_norm_ and
 * clip_grad_value_) and the walk over a parameter list's gradients that it
 * and the training step split over the worker pool. */
#include <stdlib.h>

#include "kernels/kernels_internal.h"
#include "optim/optim_internal.h"

/* ---- clipping ----------------------------------------------------------------- */
static bool has_float_grad(const nb_tensor *t) {
    return t && t->grad && (t->dtype == NB_F32 || t->dtype == NB_F64);
}

/* ---- a parameter list's gradients, element ranges over the threads ---------- */
typedef struct grad_ranges_job {
    const nb_tensor_list *l;
    const int *idx;      /* entries with a float gradient */
    const int64_t *ends; /* their element counts, summed */
    int n;
    nb_grad_range_fn fn;
    void *arg;
} grad_ranges_job;

void nb_pieces_range(const int64_t *ends, int n, int64_t lo, int64_t hi, nb_piece_fn fn,
                     void *arg) {
    int k = 0;
    while (k < n && ends[k] <= lo) k++;
    for (; k < n && lo < hi; k++) {
        int64_t start = k ? ends[k - 1] : 0, end = ends[k] < hi ? ends[k] : hi;
        fn(arg, k, lo - start, end - start);
        lo = end;
    }
}

static void grad_piece(void *arg, int k, int64_t a, int64_t b) {
    const grad_ranges_job *j = arg;
    j->fn(nb_list_tensor(j->l, j->idx[k]), (size_t)a, (size_t)b, j->arg);
}

static void grad_ranges_range(void *arg, int64_t lo, int64_t hi) {
    const grad_ranges_job *j = arg;
    nb_pieces_range(j->ends, j->n, lo, hi, grad_piece, arg);
}

/* The entries are taken a batch of up to BATCH at a time (a stack index). */
void nb_grad_ranges(const nb_tensor_list *l, nb_grad_range_fn fn, void *arg) {
    enum { BATCH = 1024 };
    int idx[BATCH];
    int64_t ends[BATCH];
    for (int i = 0; i < l->n;) {
        int n = 0;
        int64_t total = 0;
        for (; i < l->n && n < BATCH; i++) {
            const nb_tensor *t = nb_list_tensor(l, i);
            if (!has_float_grad(t)) continue;
            total += (int64_t)t->numel;
            idx[n] = i, ends[n] = total, n++;
        }
        grad_ranges_job j = {l, idx, ends, n, fn, arg};
        nb_parallel_for(total, 1 << 15, grad_ranges_range, &j); /* 32k elements a thread */
    }
}

/* g *= coef over one range of a gradient (the same multiply as one thread) */
static void scale_range(nb_tensor *t, size_t lo, size_t hi, void *arg) {
    const double coef = *(const double *)arg;
#define K(T)                                                        \
    {                                                               \
        T *g = (T *)t->grad + lo;                                   \
        const T c = (T)coef;                                        \
        for (size_t j = 0; j < hi - lo; j++) g[j] = g[j] * c;       \
    }
    NB_DISPATCH(t->dtype, K);
#undef K
}

/* ---- the global norm, in fixed chunks over the threads ------------------------
 * Each tensor's gradient is cut into chunks of NORM_CHUNK elements; a chunk's
 * sum of squares (in double, eight partial sums) goes to its own slot, and the
 * slots are added in order at the end. The chunks do not depend on the thread
 * count, so the norm is the same bits on 1 thread as on 16; and a 124M-
 * parameter model's 0.5 GB of gradients is read by every thread at once, not
 * by one (it was a twentieth of the GPT-2 124M step). */
#define NORM_CHUNK ((int64_t)1 << 14)

typedef struct norm_job {
    const nb_tensor_list *l;
    const int *idx;      /* entries with a float gradient */
    const int64_t *ends; /* their chunk counts, summed */
    int n;
    double *part;        /* one sum per chunk */
} norm_job;

#define SUMSQ(T)                                                                   \
    static double sumsq_##T(const T *g, size_t n) {                                \
        double s[8] = {0, 0, 0, 0, 0, 0, 0, 0};                                    \
        size_t j = 0;                                                              \
        for (; j + 8 <= n; j += 8)                                                 \
            for (int l = 0; l < 8; l++) s[l] += (double)g[j + l] * (double)g[j + l]; \
        for (; j < n; j++) s[0] += (double)g[j] * (double)g[j];                    \
        return ((s[0] + s[1]) + (s[2] + s[3])) + ((s[4] + s[5]) + (s[6] + s[7]));   \
    }
SUMSQ(float)
SUMSQ(double)
#undef SUMSQ

static void norm_range(void *arg, int64_t lo, int64_t hi) {
    const norm_job *j = arg;
    int k = 0;
    while (k < j->n && j->ends[k] <= lo) k++;
    for (int64_t c = lo; c < hi; c++) {
        while (j->ends[k] <= c) k++;
        const nb_tensor *t = nb_list_tensor(j->l, j->idx[k]);
        int64_t q = c - (k ? j->ends[k - 1] : 0), a = q * NORM_CHUNK;
        size_t n = (size_t)((int64_t)t->numel - a < NORM_CHUNK ? (int64_t)t->numel - a : NORM_CHUNK);
        j->part[c] = t->dtype == NB_F32 ? sumsq_float((const float *)t->grad + a, n)
                                        : sumsq_double((const double *)t->grad + a, n);
    }
}

double nb_grad_norm(const nb_tensor_list *params) {
    int *idx = malloc(sizeof(int) * (size_t)(params->n + 1));
    int64_t *ends = malloc(sizeof(int64_t) * (size_t)(params->n + 1)), chunks = 0;
    int n = 0;
    for (int i = 0; idx && ends && i < params->n; i++) {
        const nb_tensor *t = nb_list_tensor(params, i);
        if (!has_float_grad(t) || !t->numel) continue;
        chunks += ((int64_t)t->numel + NORM_CHUNK - 1) / NORM_CHUNK;
        idx[n] = i, ends[n] = chunks, n++;
    }
    double *part = idx && ends ? malloc(sizeof(double) * (size_t)(chunks + 1)) : NULL;
    double total = NAN;
    if (part) {
        norm_job j = {params, idx, ends, n, part};
        nb_parallel_for(chunks, 16, norm_range, &j); /* 16 chunks (256k elements) a thread */
        total = 0;
        for (int64_t c = 0; c < chunks; c++) total += part[c];
        total = sqrt(total);
    }
    free(part), free(ends), free(idx);
    return total;
}

double nb_clip_grad_norm(const nb_tensor_list *params, double max_norm) {
    if (!nb_list_valid(params)) return NAN;
    const double total = nb_grad_norm(params);
    double coef = max_norm / (total + 1e-6);
    if (coef < 1.0) nb_grad_scale(params, coef);
    return total;
}

void nb_grad_scale(const nb_tensor_list *params, double coef) {
    nb_grad_ranges(params, scale_range, &coef); /* on every thread */
}

void nb_clip_grad_value(const nb_tensor_list *params, double clip) {
    if (!nb_list_valid(params) || !(clip >= 0)) return;
    for (int i = 0; i < params->n; i++) {
        nb_tensor *t = nb_list_tensor(params, i);
        if (!has_float_grad(t)) continue;
#define K(T)                                                        \
    {                                                               \
        T *g = t->grad;                                             \
        const T hi = (T)clip, lo = -hi;                             \
        for (size_t j = 0; j < t->numel; j++)                       \
            g[j] = g[j] < lo ? lo : g[j] > hi ? hi : g[j];          \
    }
        NB_DISPATCH(t->dtype, K);
#undef K
    }
}
